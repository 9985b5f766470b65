// GPU tests of the channels-last dense engine (runtime/dengine.h): on small
// synthetic models of awkward shapes (13x11 images, 3/8/10/12 channels,
// residual adds fused into conv epilogues and not, padded pools, a linear
// layer reading a 2-D feature map, unfolded batch norms), the engine's
// logits in fp16, bf16 and TF32 match the CPU plan's, at the batch it was
// built for, for fewer images, and at batch 1. Every tensor starts as NaN,
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

int main(void) {
    tctx t = {.suite = "gpu_test_dengine"};
    RUN(&t, test_lenet);
    RUN(&t, test_residual);
    RUN(&t, test_residual_unfused);
    return check_finish(&t);
}
