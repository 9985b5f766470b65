// GPU tests of the deploy runtime: on small synthetic models of awkward
// shapes, the GPU plan (tuned per layer, run as a CUDA graph) gives the CPU
// plan's logits, fp32 tightly and fp16 loosely; every candidate passes its
// per-layer check; each candidate run alone on every layer gives the same
// logits; batch 1, padded batches and the all-dense plan work.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/deploy_gpu.h"
#include "runtime/deploy_plan.h"
#include "tests/check.h"
#include "tests/deploy_testutil.h"
#include "tests/testutil.h"


typedef tdm_fixture fixture;
#define fixture_make tdm_fixture_make
#define fixture_free tdm_fixture_free

// GPU logits of n images against the CPU's.
static void check_logits(tctx *t, const char *what, fixture *f, deploy_gpu *g, int n, double tol) {
    sc_err err = {{0}};
    float *got = alloc_poisoned((size_t)n * f->nt->classes);
    CHECK(t, deploy_gpu_forward(g, n, f->img, got, &err) == 0, "%s: %s", what, err.msg);
    double e = relerr((size_t)n * f->nt->classes, got, f->want);
    CHECK(t, e <= tol, "%s: logits off by %.3g (tol %g)", what, e, tol);
    CHECK(t, guard_ok(got, (size_t)n * f->nt->classes), "%s: logits overrun", what);
    free(got);
}

// Every conv op runs candidate c alone (when it applies everywhere).
static void check_each_candidate(tctx *t, fixture *f, deploy_gpu *g, deploy_prec prec,
                                 const deploy_timing *tm, double tol) {
    sc_err err = {{0}};
    int *ch = malloc((size_t)f->p->nops * sizeof *ch);
    for (int c = 0; c < deploy_cand_count(); c++) {
        if (deploy_cand_prec(c) != prec) continue;
        int all = 1;
        for (int i = 0; i < f->p->nops; i++) {
            ch[i] = f->p->ops[i].kind == DOP_CONV ? c : -1;
            if (f->p->ops[i].kind == DOP_CONV) all &= tm->passed[i][c] == 1;
        }
        if (!all) continue;
        CHECK(t, deploy_gpu_choose(g, ch, &err) == 0, "%s: %s", deploy_cand_name(c), err.msg);
        char what[64];
        snprintf(what, sizeof what, "all layers %s", deploy_cand_name(c));
        // each candidate at least within its own per-layer tolerance (TF32 in the
        // fp32 plan rounds inputs to 10 mantissa bits: not held to fp32's 1e-4)
        check_logits(t, what, f, g, NIMG, fmax(tol, deploy_cand_tol(c)));
    }
    free(ch);
}

// Tunes at NIMG and at 1 in one precision and checks logits, candidates and timing.
static void run_prec(tctx *t, fixture *f, deploy_prec prec, double tol) {
    sc_err err = {{0}};
    deploy_gpu *g = deploy_gpu_create(f->p, prec, NIMG, NULL, stderr, &err);
    CHECK(t, g != NULL, "create: %s", err.msg);
    if (!g) return;
    deploy_timing tm;
    deploy_timing_init(&tm, f->p->nops, NIMG, &err);
    int rc = deploy_gpu_tune(g, NIMG, f->img, f->cpu, NIMG, 3, &tm, stderr, &err);
    CHECK(t, rc == 0, "tune: %s", err.msg);
    for (int i = 0; !rc && i < f->p->nops; i++)
        for (int c = 0; c < deploy_cand_count(); c++)
            if (tm.passed[i][c] >= 0)
                CHECK(t, tm.passed[i][c] == 1 && !isnan(tm.ms[i][c]), "%s: %s failed its check (%.3g)",
                      f->p->ops[i].name, deploy_cand_name(c), tm.err[i][c]);
    if (!rc) {
        check_logits(t, "tuned plan", f, g, NIMG, tol);
        check_logits(t, "padded batch of 2", f, g, 2, tol);
        double ms;
        int graph = 0;
        CHECK(t, deploy_gpu_time(g, NIMG, 3, &ms, &graph, &err) == 0 && ms > 0 && graph,
              "timing: %s (graph %d)", err.msg, graph);
        CHECK(t, deploy_gpu_choose_dense(g, &err) == 0, "dense: %s", err.msg);
        check_logits(t, "all-dense plan", f, g, NIMG, tol);
        check_each_candidate(t, f, g, prec, &tm, tol);
        deploy_timing t1;
        deploy_timing_init(&t1, f->p->nops, 1, &err);
        CHECK(t, deploy_gpu_tune(g, 1, f->img, f->cpu, 1, 3, &t1, stderr, &err) == 0, "tune 1: %s", err.msg);
        check_logits(t, "batch 1", f, g, 1, tol);
        deploy_timing_free(&t1);
    }
    deploy_timing_free(&tm);
    deploy_gpu_free(g);
}

// --- tests --------------------------------------------------------------------

// LeNet, fused convs and linears, 75% sparse.
static void test_lenet(tctx *t) {
    if (!gpu_here(t)) return;
    fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.75f};
    if (fixture_make(t, &f, "lenet", NULL, 32, 32, &o, 21) == 0) {
        run_prec(t, &f, DP_FP32, 1e-4);
        run_prec(t, &f, DP_FP16, 5e-2);
    }
    fixture_free(&f);
}

// The residual net (awkward 13x11 images), 92% sparse.
static void test_residual(tctx *t) {
    if (!gpu_here(t)) return;
    fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.92f};
    if (fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 22) == 0) {
        run_prec(t, &f, DP_FP32, 1e-4);
        run_prec(t, &f, DP_FP16, 5e-2);
    }
    fixture_free(&f);
}

// The residual net with unfolded BNs and standalone ReLUs and pools.
static void test_residual_unfused(tctx *t) {
    if (!gpu_here(t)) return;
    fixture f;
    tdm_opts o = {.fold_bn = 0, .sparsity = 0.5f};
    if (fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 23) == 0) {
        run_prec(t, &f, DP_FP32, 1e-4);
        run_prec(t, &f, DP_FP16, 5e-2);
    }
    fixture_free(&f);
}

// DenseNet-style concats (DOP_CONCAT on bordered tensors), 85% sparse.
static void test_concat(tctx *t) {
    if (!gpu_here(t)) return;
    fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.85f};
    if (fixture_make(t, &f, "dense", DENSE_DESC, 13, 11, &o, 25) == 0) {
        run_prec(t, &f, DP_FP32, 1e-4);
        run_prec(t, &f, DP_FP16, 5e-2);
    }
    fixture_free(&f);
}

// Codebook weights: the 4-bit candidate runs in the fp16 plan.
static void test_codebook(tctx *t) {
    if (!gpu_here(t)) return;
    fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 0, .codebook = 1, .sparsity = 0.9f};
    if (fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 24) == 0) run_prec(t, &f, DP_FP16, 5e-2);
    fixture_free(&f);
}

// Candidates deploy_gpu_create leaves out: a --skip-candidates mask on every
// layer, the activation-sparsity filter on the layers below its threshold;
// the rest are checked and timed as usual and the plan still matches the CPU.
static void test_skip(tctx *t) {
    if (!gpu_here(t)) return;
    fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.85f};
    sc_err err = {{0}};
    if (fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 26) == 0) {
        unsigned mask = 0;
        CHECK(t, deploy_cand_parse_skip("cusparse", &mask, &err) == 0 && mask, "parse: %s", err.msg);
        double *act = malloc((size_t)f.p->nops * sizeof *act);
        int first = -1;  // the first conv reads the image (no zeros): below any threshold
        for (int i = 0; i < f.p->nops; i++) {
            act[i] = f.p->ops[i].kind == DOP_CONV && first < 0 ? 0.1 : 0.9;
            if (f.p->ops[i].kind == DOP_CONV && first < 0) first = i;
        }
        const deploy_gpu_skip skip = {.cands = mask, .act_sparsity = act, .act_min = 0.5};
        deploy_gpu *g = deploy_gpu_create(f.p, DP_FP32, NIMG, &skip, stderr, &err);
        CHECK(t, g != NULL, "create: %s", err.msg);
        deploy_timing tm;
        deploy_timing_init(&tm, f.p->nops, NIMG, &err);
        int rc = g ? deploy_gpu_tune(g, NIMG, f.img, f.cpu, NIMG, 3, &tm, stderr, &err) : -1, kept = 0;
        CHECK(t, rc == 0, "tune: %s", err.msg);
        for (int i = 0; !rc && i < f.p->nops; i++)
            for (int c = 0; c < deploy_cand_count() && f.p->ops[i].kind == DOP_CONV; c++) {
                const int out = deploy_gpu_skipped(&skip, i, c);
                CHECK(t, !out || (tm.passed[i][c] == -1 && isnan(tm.ms[i][c]) && tm.chosen[i] != c),
                      "%s: %s was left out but ran", f.p->ops[i].name, deploy_cand_name(c));
                kept += deploy_cand_prec(c) == DP_FP32 && deploy_cand_skips_zeros(c) && tm.passed[i][c] == 1;
            }
        CHECK(t, rc || kept > 0, "the activation-sparse candidate ran on no layer above the threshold");
        if (!rc) check_logits(t, "plan without the skipped candidates", &f, g, NIMG, 1e-4);
        deploy_timing_free(&tm);
        deploy_gpu_free(g);
        free(act);
    }
    fixture_free(&f);
}

int main(void) {
    tctx t = {.suite = "gpu_test_deploy"};
    RUN(&t, test_lenet);
    RUN(&t, test_residual);
    RUN(&t, test_residual_unfused);
    RUN(&t, test_codebook);
    RUN(&t, test_concat);
    RUN(&t, test_skip);
    return check_finish(&t);
}
