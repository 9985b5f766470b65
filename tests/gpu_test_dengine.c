// GPU tests of the channels-last dense engine (runtime/dengine.h): on small
// synthetic models of awkward shapes (13x11 images, 3/8/10/12 channels,
// residual adds fused into conv epilogues and not, padded pools, a linear
// layer reading a 2-D feature map, unfolded batch norms), the engine's
// logits in fp16, bf16 and TF32 match the CPU plan's, at the batch it was
// built for, for fewer images, at batch 1, and again after the timing's
// graph replays. Every tensor starts as NaN,
// so an element the engine forgets to write shows in the logits.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dengine.h"
#include "runtime/deploy_plan.h"
#include "tests/check.h"
#include "tests/deploy_testutil.h"
#include "tests/testutil.h"

// Tolerance of the logits, relative to the largest, per precision.
static double tol_of(dengine_prec p) { return p == DE_FP16 ? 3e-2 : p == DE_BF16 ? 8e-2 : 1e-2; }

// Engine logits of m images against the CPU's.
static void check_engine(tctx *t, tdm_fixture *f, dengine *e, const char *what, int m,
                         dengine_prec prec) {
    sc_err err = {{0}};
    const size_t nl = (size_t)m * f->nt->classes;
    float *got = alloc_poisoned(nl);
    CHECK(t, dengine_forward(e, m, f->img, got, &err) == 0, "%s: %s", what, err.msg);
    double rel = relerr(nl, got, f->want);
    CHECK(t, rel <= tol_of(prec), "%s: logits off by %.3g (tol %g)", what, rel, tol_of(prec));
    CHECK(t, guard_ok(got, nl), "%s: logits overrun", what);
    free(got);
}

// Builds the engine in every precision at NIMG and at batch 1 and checks it.
static void run_all(tctx *t, tdm_fixture *f, const char *name) {
    for (int p = 0; p < DE_NPREC; p++)
        for (int b1 = 0; b1 < 2; b1++) {
            sc_err err = {{0}};
            char what[96];
            snprintf(what, sizeof what, "%s %s batch %d", name, dengine_prec_name(p), b1 ? 1 : NIMG);
            dengine *e = dengine_create(f->p, (dengine_prec)p, b1 ? 1 : NIMG, f->img, 3, &err);
            CHECK(t, e != NULL, "%s: %s", what, err.msg);
            if (!e) continue;
            check_engine(t, f, e, what, b1 ? 1 : NIMG, (dengine_prec)p);
            if (!b1) check_engine(t, f, e, what, 2, (dengine_prec)p);
            double ms = NAN;
            CHECK(t, dengine_time(e, 3, &ms, &err) == 0 && ms > 0, "%s: timing: %s", what, err.msg);
            char again[128];  // graph replays must not leave state that changes the next one
            snprintf(again, sizeof again, "%s after timing", what);
            check_engine(t, f, e, again, b1 ? 1 : NIMG, (dengine_prec)p);
            dengine_free(e);
        }
}

// LeNet: fused conv+ReLU+max pool, linears.
static void test_lenet(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.0f};
    if (tdm_fixture_make(t, &f, "lenet", NULL, 32, 32, &o, 41) == 0) run_all(t, &f, "lenet");
    tdm_fixture_free(&f);
}

// The residual net, BN folded: adds fused into conv epilogues.
static void test_residual(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.3f};
    if (tdm_fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 42) == 0) run_all(t, &f, "res");
    tdm_fixture_free(&f);
}

// The residual net unfolded: affine ops, standalone ReLUs, pools and adds.
static void test_residual_unfused(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 0, .sparsity = 0.5f};
    if (tdm_fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 43) == 0) run_all(t, &f, "res-unfused");
    tdm_fixture_free(&f);
}

// The mixed fp16 plan with every conv forced onto the sparse kernel (where
// its check against cuDNN passes): the layout conversions, the residual add
// and ReLU after the conversion, and fused pools give the CPU's logits.
static void run_mixed(tctx *t, tdm_fixture *f, const char *name) {
    for (int b1 = 0; b1 < 2; b1++) {
        sc_err err = {{0}};
        char what[96];
        snprintf(what, sizeof what, "%s mixed batch %d", name, b1 ? 1 : NIMG);
        dengine *e = dengine_create_mixed(f->p, b1 ? 1 : NIMG, f->img, 3, 1, &err);
        CHECK(t, e != NULL, "%s: %s", what, err.msg);
        if (!e) continue;
        int sparse = 0;
        for (int i = 0; i < f->p->nops; i++) sparse += dengine_op_sparse(e, i);
        CHECK(t, sparse > 0, "%s: no layer ran sparse", what);
        check_engine(t, f, e, what, b1 ? 1 : NIMG, DE_FP16);
        dengine_free(e);
    }
}

// Mixed plans on the residual net (fused adds) and LeNet (fused pools), 90% sparse.
static void test_mixed(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.9f};
    if (tdm_fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 45) == 0) run_mixed(t, &f, "res");
    tdm_fixture_free(&f);
    if (tdm_fixture_make(t, &f, "lenet", NULL, 32, 32, &o, 46) == 0) run_mixed(t, &f, "lenet");
    tdm_fixture_free(&f);
}

// Three convs of one shape (b, c, d) and two residual twins: each is tuned
// and checked on its own buffers (an engine cache that reused the first
// twin's engine was removed after whole-test-set runs disagreed with the CPU).
static void test_twins(tctx *t) {
    if (!gpu_here(t)) return;
    static const char *const TWIN_DESC =
        "conv 8 3 pad=1 name=a\nrelu\nconv 8 3 pad=1 name=b\nrelu name=rb\n"
        "conv 8 3 pad=1 name=c\nrelu\nconv 8 3 pad=1 name=d\nadd rb\nrelu name=rd\n"
        "conv 8 3 pad=1 name=e\nadd rd\nrelu\ngap\nlinear classes name=fc\n";
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.2f};
    if (tdm_fixture_make(t, &f, "twins", TWIN_DESC, 9, 7, &o, 44) == 0) run_all(t, &f, "twins");
    tdm_fixture_free(&f);
}

int main(void) {
    tctx t = {.suite = "gpu_test_dengine"};
    RUN(&t, test_lenet);
    RUN(&t, test_residual);
    RUN(&t, test_residual_unfused);
    RUN(&t, test_mixed);
    RUN(&t, test_twins);
    return check_finish(&t);
}
