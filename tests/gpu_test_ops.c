// Every GPU op (kernels/*_gpu.h, the soft-target loss included) against its
// CPU reference (kernels/*.h) on random inputs of awkward shapes, in fp32
// and fp16 storage. Outputs are
// poisoned with NaN (all bits set) before each run, so an element the GPU
// does not write fails the comparison. Inputs are rounded to the storage
// precision first and the CPU reference runs on the rounded values, so the
// error measured is the op's own.
//
// Error measure: max |gpu - cpu| / max |cpu| over a tensor (NaN = failure).
// Tolerances: fp32 1e-4 for arithmetic in a different order (convs run with
// plain FMA math, no TF32: TF32 would show as ~1e-3), 1e-5 for elementwise
// ops, exact for SGD masks and augmentation; fp16 1e-2 (storage rounding is
// 2^-11 relative; accumulation in fp32). Skipped without a GPU.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/activation.h"
#include "kernels/activation_gpu.h"
#include "kernels/augment.h"
#include "kernels/augment_gpu.h"
#include "kernels/batchnorm.h"
#include "kernels/batchnorm_gpu.h"
#include "kernels/conv2d.h"
#include "kernels/conv2d_gpu.h"
#include "kernels/linear.h"
#include "kernels/linear_gpu.h"
#include "kernels/loss.h"
#include "kernels/loss_gpu.h"
#include "kernels/pool.h"
#include "kernels/pool_gpu.h"
#include "kernels/sgd.h"
#include "kernels/sgd_gpu.h"
#include "runtime/exec.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/gpu_testutil.h"
#include "tests/testutil.h"

#define TOL32 1e-4
#define TOL32_EW 1e-5
#define TOL16 1e-2

// --- convolution ------------------------------------------------------------

// Forward (+bias), backward data (overwrite and accumulate) and backward
// filter (+bias) of one shape against the CPU.
static void conv_case(tctx *t, gpu_dtype dt, int n, int c, int h, int w, int k, int r,
                      int stride, int pad, int bias) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n * 1000 + c * 100 + k * 10 + r + dt))) return;
    conv2d_dims d;
    conv2d_dims_init(&d, n, c, h, w, k, r, r, stride, pad);
    const size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * r * r,
                 ny = (size_t)n * k * d.p * d.q;
    const double tol = dt == GDT_F16 ? TOL16 : TOL32;
    float *x = hrand(e, nx, -1, 1), *wt = hrand(e, nw, -0.5f, 0.5f), *b = hrand(e, k, -1, 1);
    float *dy = hrand(e, ny, -1, 1), *pre = hrand(e, nx, -1, 1);
    float *y = hzero(ny), *dx = hzero(nx), *dw = hzero(nw), *db = hzero(k);
    float *gy = hzero(ny), *gdx = hzero(nx), *gdw = hzero(nw), *gdb = hzero(k);
    float *work = hzero(conv2d_cpu_workspace(&d));
    conv_gpu *plan = NULL;
    char what[96];
    void *dx_ = dput_nchw(e, dt, n, c, h * w, x), *dw_ = dput_nchw(e, dt, k, c, r * r, wt);
    void *ddy = dput_nchw(e, dt, n, k, d.p * d.q, dy), *dpre = dput_nchw(e, dt, n, c, h * w, pre);
    float *db_ = dput(e, GDT_F32, k, b), *ddb = dalloc(e, k * sizeof(float));
    void *dyo = dalloc(e, ny * 4), *ddx = dalloc(e, nx * 4), *ddw = dalloc(e, nw * 4);
    GTRY(t, e, (plan = conv_gpu_create(&e->g, dt, &d, 1, (size_t)64 << 20, &e->err)) ? 0 : -1);
    void *ws = dalloc(e, conv_gpu_workspace(plan));
    conv2d_forward_cpu(&d, x, wt, bias ? b : NULL, y, work);
    conv2d_backward_data_cpu(&d, dy, wt, dx, work);
    conv2d_backward_filter_cpu(&d, x, dy, dw, bias ? db : NULL, work);
    GTRY(t, e, conv_gpu_forward(&e->g, plan, dx_, dw_, dyo, ws, &e->err));
    if (bias) GTRY(t, e, bias_forward_gpu(&e->g, dt, (size_t)n * d.p * d.q, k, db_, dyo, &e->err));
    GTRY(t, e, conv_gpu_backward_data(&e->g, plan, ddy, dw_, ddx, 0, ws, &e->err));
    GTRY(t, e, conv_gpu_backward_filter(&e->g, plan, dx_, ddy, ddw, ws, &e->err));
    if (bias) GTRY(t, e, bias_backward_gpu(&e->g, dt, (size_t)n * d.p * d.q, k, ddy, ddb, &e->err));
    GTRY(t, e, conv_gpu_backward_data(&e->g, plan, ddy, dw_, dpre, 1, ws, &e->err));
    dget_nchw(e, dt, n, k, d.p * d.q, dyo, gy);
    dget_nchw(e, dt, n, c, h * w, ddx, gdx);
    dget_nchw(e, dt, k, c, r * r, ddw, gdw);
    snprintf(what, sizeof what, "conv %s n%d c%d %dx%d k%d r%d s%d p%d", dtn(dt), n, c, h, w, k,
             r, stride, pad);
    CHECK_REL(t, what, ny, gy, y, tol);
    CHECK_REL(t, what, nx, gdx, dx, tol);
    CHECK_REL(t, what, nw, gdw, dw, tol);
    if (bias) {
        dget(e, GDT_F32, k, ddb, gdb);
        CHECK_REL(t, what, (size_t)k, gdb, db, tol);
    }
    for (size_t i = 0; i < nx; i++) dx[i] += pre[i];
    dget_nchw(e, dt, n, c, h * w, dpre, gdx);
    CHECK_REL(t, what, nx, gdx, dx, tol);
out:
    conv_gpu_free(plan);
    free(x), free(wt), free(b), free(dy), free(pre), free(y), free(dx), free(dw), free(db);
    free(gy), free(gdx), free(gdw), free(gdb), free(work);
    genv_close(e);
}

// Conv shapes: strides, paddings, 1/3/5 kernels, odd channels and sizes.
static void test_conv(tctx *t) {
    if (!gpu_here(t)) return;
    for (int dt = 0; dt < 2; dt++) {
        conv_case(t, (gpu_dtype)dt, 3, 5, 7, 9, 4, 3, 2, 1, 0);
        conv_case(t, (gpu_dtype)dt, 3, 5, 7, 9, 4, 3, 2, 1, 1);
        conv_case(t, (gpu_dtype)dt, 2, 3, 8, 8, 6, 5, 1, 2, 1);
        conv_case(t, (gpu_dtype)dt, 3, 8, 7, 9, 5, 1, 1, 0, 0);
        conv_case(t, (gpu_dtype)dt, 2, 16, 6, 5, 8, 3, 1, 1, 0);
        conv_case(t, (gpu_dtype)dt, 4, 8, 9, 7, 16, 1, 2, 0, 0);
    }
}

// Forward, backward data and backward filter of one shape run twice on the
// same inputs give the same bits (the plan's algorithms use no atomics).
static void conv_repeat_case(tctx *t, gpu_dtype dt, int n, int c, int hw, int k, int r, int stride) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n + c + k + dt))) return;
    conv2d_dims d;
    conv2d_dims_init(&d, n, c, hw, hw, k, r, r, stride, r / 2);
    const size_t nx = (size_t)n * c * hw * hw, nw = (size_t)k * c * r * r, ny = (size_t)n * k * d.p * d.q;
    const size_t es = dt == GDT_F16 ? 2 : 4, ns[3] = {ny, nx, nw};
    float *x = hrand(e, nx, -1, 1), *wt = hrand(e, nw, -0.5f, 0.5f), *dy = hrand(e, ny, -1, 1);
    float *got[2][3] = {{hzero(ny), hzero(nx), hzero(nw)}, {hzero(ny), hzero(nx), hzero(nw)}};
    conv_gpu *plan = NULL;
    char what[96];
    snprintf(what, sizeof what, "conv repeat %s n%d c%d %dx%d k%d r%d s%d", dtn(dt), n, c, hw, hw, k, r, stride);
    void *dx_ = dput_nchw(e, dt, n, c, hw * hw, x), *dw_ = dput_nchw(e, dt, k, c, r * r, wt);
    void *ddy = dput_nchw(e, dt, n, k, d.p * d.q, dy);
    void *out[3] = {dalloc(e, ny * es), dalloc(e, nx * es), dalloc(e, nw * es)};
    GTRY(t, e, (plan = conv_gpu_create(&e->g, dt, &d, 1, (size_t)256 << 20, &e->err)) ? 0 : -1);
    void *ws = dalloc(e, conv_gpu_workspace(plan));
    for (int run = 0; run < 2; run++) {
        GTRY(t, e, conv_gpu_forward(&e->g, plan, dx_, dw_, out[0], ws, &e->err));
        GTRY(t, e, conv_gpu_backward_data(&e->g, plan, ddy, dw_, out[1], 0, ws, &e->err));
        GTRY(t, e, conv_gpu_backward_filter(&e->g, plan, dx_, ddy, out[2], ws, &e->err));
        dget_nchw(e, dt, n, k, d.p * d.q, out[0], got[run][0]);
        dget_nchw(e, dt, n, c, hw * hw, out[1], got[run][1]);
        dget_nchw(e, dt, k, c, r * r, out[2], got[run][2]);
    }
    char algos[128];
    conv_gpu_describe(plan, algos, sizeof algos);
    const char *dir[3] = {"forward", "backward data", "backward filter"};
    for (int i = 0; i < 3; i++)
        CHECK(t, memcmp(got[0][i], got[1][i], ns[i] * sizeof(float)) == 0, "%s: %s differs between two runs (%s)",
              what, dir[i], algos);
out:
    conv_gpu_free(plan);
    free(x), free(wt), free(dy);
    for (int run = 0; run < 2; run++)
        for (int i = 0; i < 3; i++) free(got[run][i]);
    genv_close(e);
}

// Training shapes (resnet18's and vgg16's large-batch layers, where the
// reductions are long) repeat bit for bit in both precisions.
static void test_conv_repeat(tctx *t) {
    if (!gpu_here(t)) return;
    for (int dt = 0; dt < 2; dt++) {
        conv_repeat_case(t, (gpu_dtype)dt, 128, 64, 32, 64, 3, 1);
        conv_repeat_case(t, (gpu_dtype)dt, 128, 128, 16, 256, 3, 2);
        conv_repeat_case(t, (gpu_dtype)dt, 128, 512, 4, 512, 3, 1);
        conv_repeat_case(t, (gpu_dtype)dt, 128, 128, 16, 256, 1, 2);
    }
}

// --- batch norm -------------------------------------------------------------

// Training forward (outputs, running and saved stats), inference forward and
// backward of a plain BN, against the CPU.
static void bn_case(tctx *t, gpu_dtype dt, int n, int c, int h, int w) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n * 100 + c * 10 + h + dt))) return;
    const int hw = h * w;
    const size_t nx = (size_t)n * c * hw;
    const float eps = 1e-5f, mom = 0.1f;
    const double tol = dt == GDT_F16 ? TOL16 : TOL32;
    float *x = hrand(e, nx, -2, 3), *dy = hrand(e, nx, -1, 1), *gam = hrand(e, c, 0.5f, 1.5f);
    float *bet = hrand(e, c, -0.5f, 0.5f), *rm = hrand(e, c, -0.2f, 0.2f), *rv = hrand(e, c, 0.5f, 2);
    float *rm0 = malloc(c * sizeof *rm0), *rv0 = malloc(c * sizeof *rv0);
    float *y = hzero(nx), *yi = hzero(nx), *dx = hzero(nx), *sm = hzero(c), *si = hzero(c);
    float *dg = hzero(c), *dbt = hzero(c), *g1 = hzero(nx), *g2 = hzero(c);
    bn_gpu *plan = NULL;
    char what[64];
    snprintf(what, sizeof what, "bn %s n%d c%d %dx%d", dtn(dt), n, c, h, w);
    memcpy(rm0, rm, c * sizeof *rm), memcpy(rv0, rv, c * sizeof *rv);
    void *dx_ = dput_nchw(e, dt, n, c, hw, x), *ddy = dput_nchw(e, dt, n, c, hw, dy);
    float *dgam = dput(e, GDT_F32, c, gam), *dbet = dput(e, GDT_F32, c, bet);
    float *drm = dput(e, GDT_F32, c, rm), *drv = dput(e, GDT_F32, c, rv);
    float *dsm = dalloc(e, c * 4), *dsi = dalloc(e, c * 4), *ddg = dalloc(e, c * 4), *ddb = dalloc(e, c * 4);
    void *dy_ = dalloc(e, nx * 4), *dyi = dalloc(e, nx * 4), *ddx = dalloc(e, nx * 4);
    GTRY(t, e, (plan = bn_gpu_create(&e->g, dt, n, c, h, w, BN_FUSE_NONE, &e->err)) ? 0 : -1);
    void *ws = dalloc(e, bn_gpu_workspace(plan)), *res = dalloc(e, bn_gpu_reserve(plan));
    batchnorm_forward_train_cpu(n, c, hw, x, gam, bet, eps, mom, rm, rv, y, sm, si);
    batchnorm_forward_infer_cpu(n, c, hw, x, gam, bet, rm, rv, eps, yi);
    batchnorm_backward_cpu(n, c, hw, x, dy, gam, sm, si, dx, dg, dbt);
    GTRY(t, e, bn_gpu_forward_train(&e->g, plan, dx_, NULL, dy_, dgam, dbet, eps, mom, drm, drv,
                                    dsm, dsi, ws, res, &e->err));
    GTRY(t, e, bn_gpu_forward_infer(&e->g, plan, dx_, dyi, dgam, dbet, drm, drv, eps, &e->err));
    GTRY(t, e, bn_gpu_backward(&e->g, plan, dx_, NULL, ddy, NULL, ddx, dgam, dbet, ddg, ddb, eps,
                               dsm, dsi, ws, res, &e->err));
    dget_nchw(e, dt, n, c, hw, dy_, g1);
    CHECK_REL(t, what, nx, g1, y, tol);
    dget_nchw(e, dt, n, c, hw, dyi, g1);
    CHECK_REL(t, what, nx, g1, yi, tol);
    dget_nchw(e, dt, n, c, hw, ddx, g1);
    CHECK_REL(t, what, nx, g1, dx, tol);
    const float *pairs[6][2] = {{drm, rm}, {drv, rv}, {dsm, sm}, {dsi, si}, {ddg, dg}, {ddb, dbt}};
    const char *names[6] = {"running mean", "running var (unbiased)", "saved mean",
                            "saved invstd", "dgamma", "dbeta"};
    for (int k = 0; k < 6; k++) {
        dget(e, GDT_F32, c, pairs[k][0], g2);
        CHECK(t, relerr(c, g2, pairs[k][1]) <= tol, "%s %s: relative error %.3g", what,
              names[k], relerr(c, g2, pairs[k][1]));
    }
out:
    bn_gpu_free(plan);
    free(x), free(dy), free(gam), free(bet), free(rm), free(rv), free(rm0), free(rv0), free(y);
    free(yi), free(dx), free(sm), free(si), free(dg), free(dbt), free(g1), free(g2);
    genv_close(e);
}

// Fused relu(bn(x) [+ z]) forward and backward (fp16) against CPU bn, add
// and relu composed.
static void bn_fused_case(tctx *t, int add, int n, int c, int h, int w) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(77 + add + n + c))) return;
    const int hw = h * w;
    const size_t nx = (size_t)n * c * hw;
    const gpu_dtype dt = GDT_F16;
    float *x = hrand(e, nx, -2, 3), *z = hrand(e, nx, -1, 1), *dy = hrand(e, nx, -1, 1);
    float *gam = hrand(e, c, 0.5f, 1.5f), *bet = hrand(e, c, -0.5f, 0.5f);
    float *rm = hzero(c), *rv = hrand(e, c, 1, 1), *t1 = hzero(nx), *y = hzero(nx), *g = hzero(nx);
    float *sm = hzero(c), *si = hzero(c), *dg = hzero(c), *dbt = hzero(c), *dx = hzero(nx);
    float *dr = hzero(nx), *g2 = hzero(c);
    bn_gpu *plan = NULL;
    char what[64];
    snprintf(what, sizeof what, "bn+%srelu fp16 n%d c%d %dx%d", add ? "add+" : "", n, c, h, w);
    void *dx_ = dput_nchw(e, dt, n, c, hw, x), *dz_ = dput_nchw(e, dt, n, c, hw, z);
    void *ddy = dput_nchw(e, dt, n, c, hw, dy);
    float *dgam = dput(e, GDT_F32, c, gam), *dbet = dput(e, GDT_F32, c, bet);
    float *drm = dput(e, GDT_F32, c, rm), *drv = dput(e, GDT_F32, c, rv);
    float *dsm = dalloc(e, c * 4), *dsi = dalloc(e, c * 4), *ddg = dalloc(e, c * 4), *ddb = dalloc(e, c * 4);
    void *dyo = dalloc(e, nx * 2), *ddx = dalloc(e, nx * 2), *ddz = dalloc(e, nx * 2);
    GTRY(t, e, (plan = bn_gpu_create(&e->g, dt, n, c, h, w, add ? BN_FUSE_ADD_RELU : BN_FUSE_RELU,
                                     &e->err)) ? 0 : -1);
    void *ws = dalloc(e, bn_gpu_workspace(plan)), *res = dalloc(e, bn_gpu_reserve(plan));
    batchnorm_forward_train_cpu(n, c, hw, x, gam, bet, 1e-5f, 0.1f, rm, rv, t1, sm, si);
    if (add) add_forward_cpu(nx, t1, z, t1);
    relu_forward_cpu(nx, t1, y);
    relu_backward_cpu(nx, y, dy, dr);
    batchnorm_backward_cpu(n, c, hw, x, dr, gam, sm, si, dx, dg, dbt);
    GTRY(t, e, bn_gpu_forward_train(&e->g, plan, dx_, dz_, dyo, dgam, dbet, 1e-5f, 0.1f, drm, drv,
                                    dsm, dsi, ws, res, &e->err));
    GTRY(t, e, bn_gpu_backward(&e->g, plan, dx_, dyo, ddy, ddz, ddx, dgam, dbet, ddg, ddb, 1e-5f,
                               dsm, dsi, ws, res, &e->err));
    dget_nchw(e, dt, n, c, hw, dyo, g);
    CHECK_REL(t, what, nx, g, y, TOL16);
    dget_nchw(e, dt, n, c, hw, ddx, g);
    CHECK_REL(t, what, nx, g, dx, TOL16);
    if (add) {
        dget_nchw(e, dt, n, c, hw, ddz, g);
        CHECK_REL(t, what, nx, g, dr, TOL16);
    }
    dget(e, GDT_F32, c, ddg, g2);
    CHECK_REL(t, "fused dgamma", (size_t)c, g2, dg, TOL16);
    dget(e, GDT_F32, c, ddb, g2);
    CHECK_REL(t, "fused dbeta", (size_t)c, g2, dbt, TOL16);
    dget(e, GDT_F32, c, drv, g2);
    CHECK_REL(t, "fused running var", (size_t)c, g2, rv, TOL16);
out:
    bn_gpu_free(plan);
    free(x), free(z), free(dy), free(gam), free(bet), free(rm), free(rv), free(t1), free(y);
    free(g), free(sm), free(si), free(dg), free(dbt), free(dx), free(dr), free(g2);
    genv_close(e);
}

// BN in both precisions, odd shapes; fused BN patterns in fp16.
static void test_batchnorm(tctx *t) {
    if (!gpu_here(t)) return;
    for (int dt = 0; dt < 2; dt++) {
        bn_case(t, (gpu_dtype)dt, 3, 5, 7, 9);
        bn_case(t, (gpu_dtype)dt, 8, 16, 4, 4);
    }
    bn_fused_case(t, 0, 4, 8, 6, 5);
    bn_fused_case(t, 1, 4, 8, 6, 5);
    bn_fused_case(t, 1, 16, 64, 8, 8);
}

// --- elementwise ------------------------------------------------------------

// ReLU forward/backward (both modes), add, add+relu, accumulate, bias.
static void ew_case(tctx *t, gpu_dtype dt, size_t n) {
    genv E, *e = &E;
    if (!genv_open(t, e, n + dt)) return;
    const double tol = dt == GDT_F16 ? TOL16 : TOL32_EW;
    float *a = hrand(e, n, -1, 1), *b = hrand(e, n, -1, 1), *pre = hrand(e, n, -1, 1);
    float *ref = hzero(n), *got = hzero(n), *bias = hrand(e, 5, -1, 1);
    char what[64];
    void *da = dput(e, dt, n, a), *db = dput(e, dt, n, b), *dp = dput(e, dt, n, pre);
    float *dbias = dput(e, GDT_F32, 5, bias);
    void *dy = dalloc(e, n * 4);
    snprintf(what, sizeof what, "elementwise %s n%zu", dtn(dt), n);
    relu_forward_cpu(n, a, ref);
    GTRY(t, e, relu_forward_gpu(&e->g, dt, n, da, dy, &e->err));
    dget(e, dt, n, dy, got);
    CHECK_REL(t, "relu", n, got, ref, tol);
    relu_backward_cpu(n, a, b, ref);  // a as the forward output
    GTRY(t, e, relu_backward_gpu(&e->g, dt, n, da, db, dy, 0, &e->err));
    dget(e, dt, n, dy, got);
    CHECK_REL(t, "relu backward", n, got, ref, tol);
    accumulate_cpu(n, pre, ref);
    GTRY(t, e, relu_backward_gpu(&e->g, dt, n, da, db, dp, 1, &e->err));
    dget(e, dt, n, dp, got);
    CHECK_REL(t, "relu backward accumulate", n, got, ref, tol);
    add_forward_cpu(n, a, b, ref);
    GTRY(t, e, add_forward_gpu(&e->g, dt, n, da, db, dy, 0, &e->err));
    dget(e, dt, n, dy, got);
    CHECK_REL(t, "add", n, got, ref, tol);
    relu_forward_cpu(n, ref, ref);
    GTRY(t, e, add_forward_gpu(&e->g, dt, n, da, db, dy, 1, &e->err));
    dget(e, dt, n, dy, got);
    CHECK_REL(t, "add+relu", n, got, ref, tol);
    GTRY(t, e, accumulate_gpu(&e->g, dt, n, da, dy, 0, &e->err));
    dget(e, dt, n, dy, got);
    CHECK_REL(t, "copy", n, got, a, tol);
    GTRY(t, e, accumulate_gpu(&e->g, dt, n, db, dy, 1, &e->err));
    add_forward_cpu(n, a, b, ref);
    dget(e, dt, n, dy, got);
    CHECK_REL(t, "accumulate", n, got, ref, tol);
    if (n % 5 == 0) {  // bias over (n / 5, 5)
        for (size_t i = 0; i < n; i++) ref[i] = a[i] + bias[i % 5];
        GTRY(t, e, bias_forward_gpu(&e->g, dt, n / 5, 5, dbias, da, &e->err));
        dget(e, dt, n, da, got);
        CHECK_REL(t, "bias forward", n, got, ref, tol);
    }
out:
    free(a), free(b), free(pre), free(ref), free(got), free(bias);
    genv_close(e);
}

// Elementwise ops on sizes that take the scalar and the packed paths.
static void test_elementwise(tctx *t) {
    if (!gpu_here(t)) return;
    for (int dt = 0; dt < 2; dt++) {
        ew_case(t, (gpu_dtype)dt, 1001);
        ew_case(t, (gpu_dtype)dt, 4096);
        ew_case(t, (gpu_dtype)dt, 40960);
    }
}

// --- pooling ----------------------------------------------------------------

// Max and average pool forward/backward of one window shape.
static void pool_case(tctx *t, gpu_dtype dt, int n, int c, int h, int w, int k, int s, int p) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n + c + h + k * 7 + s + p + dt))) return;
    pool_dims d;
    pool_dims_init(&d, n, c, h, w, k, s, p);
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * d.p * d.q;
    const double tol = dt == GDT_F16 ? TOL16 : TOL32_EW;
    float *x = hrand(e, nx, -1, 1), *dy = hrand(e, ny, -1, 1), *pre = hrand(e, nx, -1, 1);
    float *y = hzero(ny), *dx = hzero(nx), *gy = hzero(ny), *gdx = hzero(nx);
    char what[80];
    snprintf(what, sizeof what, "pool %s n%d c%d %dx%d k%d s%d p%d", dtn(dt), n, c, h, w, k, s, p);
    void *dx_ = dput_nchw(e, dt, n, c, h * w, x), *ddy = dput_nchw(e, dt, n, c, d.p * d.q, dy);
    void *dp = dput_nchw(e, dt, n, c, h * w, pre);
    void *dyo = dalloc(e, ny * 4), *ddx = dalloc(e, nx * 4);
    maxpool_forward_cpu(&d, x, y);
    maxpool_backward_cpu(&d, x, dy, dx);
    GTRY(t, e, maxpool_forward_gpu(&e->g, dt, &d, dx_, dyo, &e->err));
    GTRY(t, e, maxpool_backward_gpu(&e->g, dt, &d, dx_, ddy, ddx, 0, &e->err));
    GTRY(t, e, maxpool_backward_gpu(&e->g, dt, &d, dx_, ddy, dp, 1, &e->err));
    dget_nchw(e, dt, n, c, d.p * d.q, dyo, gy);
    CHECK_REL(t, what, ny, gy, y, tol);
    dget_nchw(e, dt, n, c, h * w, ddx, gdx);
    CHECK_REL(t, what, nx, gdx, dx, tol);
    accumulate_cpu(nx, pre, dx);
    dget_nchw(e, dt, n, c, h * w, dp, gdx);
    CHECK_REL(t, what, nx, gdx, dx, tol);
    avgpool_forward_cpu(&d, x, y);
    avgpool_backward_cpu(&d, dy, dx);
    GTRY(t, e, avgpool_forward_gpu(&e->g, dt, &d, dx_, dyo, &e->err));
    GTRY(t, e, avgpool_backward_gpu(&e->g, dt, &d, ddy, ddx, 0, &e->err));
    dget_nchw(e, dt, n, c, d.p * d.q, dyo, gy);
    CHECK_REL(t, what, ny, gy, y, tol);
    dget_nchw(e, dt, n, c, h * w, ddx, gdx);
    CHECK_REL(t, what, nx, gdx, dx, tol);
out:
    free(x), free(dy), free(pre), free(y), free(dx), free(gy), free(gdx);
    genv_close(e);
}

// Global average pool forward/backward.
static void gap_case(tctx *t, gpu_dtype dt, int n, int c, int hw) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n + c + hw + dt))) return;
    const size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
    const double tol = dt == GDT_F16 ? TOL16 : TOL32_EW;
    float *x = hrand(e, nx, -1, 1), *dy = hrand(e, ny, -1, 1), *y = hzero(ny), *dx = hzero(nx);
    float *gy = hzero(ny), *gdx = hzero(nx);
    void *dx_ = dput_nchw(e, dt, n, c, hw, x), *ddy = dput(e, dt, ny, dy);
    void *dyo = dalloc(e, ny * 4), *ddx = dalloc(e, nx * 4);
    gap_forward_cpu(n, c, hw, x, y);
    gap_backward_cpu(n, c, hw, dy, dx);
    GTRY(t, e, gap_forward_gpu(&e->g, dt, n, c, hw, dx_, dyo, &e->err));
    GTRY(t, e, gap_backward_gpu(&e->g, dt, n, c, hw, ddy, ddx, 0, &e->err));
    dget(e, dt, ny, dyo, gy);
    CHECK_REL(t, "gap forward", ny, gy, y, tol);
    dget_nchw(e, dt, n, c, hw, ddx, gdx);
    CHECK_REL(t, "gap backward", nx, gdx, dx, tol);
out:
    free(x), free(dy), free(y), free(dx), free(gy), free(gdx);
    genv_close(e);
}

// Pooling windows with and without overlap and padding; global pooling.
static void test_pool(tctx *t) {
    if (!gpu_here(t)) return;
    for (int dt = 0; dt < 2; dt++) {
        pool_case(t, (gpu_dtype)dt, 3, 5, 7, 9, 3, 2, 1);
        pool_case(t, (gpu_dtype)dt, 3, 5, 8, 6, 2, 2, 0);
        pool_case(t, (gpu_dtype)dt, 2, 3, 7, 9, 3, 1, 1);
        pool_case(t, (gpu_dtype)dt, 2, 4, 9, 7, 5, 3, 2);
        gap_case(t, (gpu_dtype)dt, 3, 5, 63);
        gap_case(t, (gpu_dtype)dt, 4, 512, 16);
    }
}

// --- linear -----------------------------------------------------------------

// Forward (fp32 and dt outputs), backward data (both modes), backward filter.
static void linear_case(tctx *t, gpu_dtype dt, int n, int in, int out) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n + in + out + dt))) return;
    const double tol = dt == GDT_F16 ? TOL16 : TOL32;
    const size_t nx = (size_t)n * in, ny = (size_t)n * out, nw = (size_t)out * in;
    float *x = hrand(e, nx, -1, 1), *wt = hrand(e, nw, -0.5f, 0.5f), *dy = hrand(e, ny, -1, 1);
    float *pre = hrand(e, nx, -1, 1), *y = hzero(ny), *dx = hzero(nx), *dw = hzero(nw);
    float *gy = hzero(ny), *gdx = hzero(nx), *gdw = hzero(nw);
    char what[64];
    snprintf(what, sizeof what, "linear %s n%d in%d out%d", dtn(dt), n, in, out);
    void *dx_ = dput(e, dt, nx, x), *dw_ = dput(e, dt, nw, wt), *ddy = dput(e, dt, ny, dy);
    void *dp = dput(e, dt, nx, pre), *dy32 = dalloc(e, ny * 4), *dyt = dalloc(e, ny * 4);
    void *ddx = dalloc(e, nx * 4);
    float *ddw = dalloc(e, nw * 4);
    linear_forward_cpu(n, in, out, x, wt, NULL, y);
    linear_backward_data_cpu(n, in, out, dy, wt, dx);
    linear_backward_filter_cpu(n, in, out, x, dy, dw, NULL);
    GTRY(t, e, linear_forward_gpu(&e->g, dt, GDT_F32, n, in, out, dx_, dw_, dy32, &e->err));
    GTRY(t, e, linear_forward_gpu(&e->g, dt, dt, n, in, out, dx_, dw_, dyt, &e->err));
    GTRY(t, e, linear_backward_data_gpu(&e->g, dt, n, in, out, ddy, dw_, ddx, 0, &e->err));
    GTRY(t, e, linear_backward_data_gpu(&e->g, dt, n, in, out, ddy, dw_, dp, 1, &e->err));
    GTRY(t, e, linear_backward_filter_gpu(&e->g, dt, n, in, out, dx_, ddy, ddw, &e->err));
    dget(e, GDT_F32, ny, dy32, gy);
    CHECK_REL(t, what, ny, gy, y, dt == GDT_F16 ? 1e-3 : TOL32);  // fp32 output: no rounding
    dget(e, dt, ny, dyt, gy);
    CHECK_REL(t, what, ny, gy, y, tol);
    dget(e, dt, nx, ddx, gdx);
    CHECK_REL(t, what, nx, gdx, dx, tol);
    accumulate_cpu(nx, pre, dx);
    dget(e, dt, nx, dp, gdx);
    CHECK_REL(t, what, nx, gdx, dx, tol);
    dget(e, GDT_F32, nw, ddw, gdw);
    CHECK_REL(t, what, nw, gdw, dw, dt == GDT_F16 ? 1e-3 : TOL32);
out:
    free(x), free(wt), free(dy), free(pre), free(y), free(dx), free(dw), free(gy), free(gdx);
    free(gdw);
    genv_close(e);
}

// Linear shapes, odd sizes.
static void test_linear(tctx *t) {
    if (!gpu_here(t)) return;
    for (int dt = 0; dt < 2; dt++) {
        linear_case(t, (gpu_dtype)dt, 3, 37, 11);
        linear_case(t, (gpu_dtype)dt, 64, 512, 100);
    }
}

// --- loss -------------------------------------------------------------------

// Loss sum, hits, count and gradient (with a loss scale) against the CPU.
static void loss_case(tctx *t, gpu_dtype ldt, gpu_dtype gdt, int n, int k, float smooth) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n * 7 + k + ldt * 2 + gdt))) return;
    const size_t cnt = (size_t)n * k;
    const float scale = 256.0f;
    float *x = hrand(e, cnt, -4, 4), *ref = hzero(cnt), *got = hzero(cnt);
    int *lab = malloc(n * sizeof *lab), *dlab = NULL;
    long hits = 0;
    for (int i = 0; i < n; i++) lab[i] = (int)rng_below(&e->r, (uint32_t)k);
    void *dx = dput(e, ldt, cnt, x), *dg = dalloc(e, cnt * 4);
    gpu_hparams hp = {0.1f, 0.9f, 0.0f, smooth, 0, {0, 0, 0}};
    gpu_scaler sc = {scale, 1.0f / scale, 0, 0};
    gpu_stats st;
    gpu_hparams *dhp = dalloc(e, sizeof hp);
    gpu_scaler *dsc = dalloc(e, sizeof sc);
    gpu_stats *dst = dalloc(e, sizeof st);
    dlab = dalloc(e, n * sizeof *lab);
    h2d(dhp, &hp, sizeof hp);
    h2d(dsc, &sc, sizeof sc);
    h2d(dlab, lab, n * sizeof *lab);
    cudaMemset(dst, 0, sizeof st);
    cudaDeviceSynchronize();
    double loss = softmax_xent_cpu(n, k, x, lab, smooth, scale / n, ref, &hits);
    GTRY(t, e, softmax_xent_gpu(&e->g, ldt, gdt, n, k, dx, dlab, dhp, 1.0f / n, dsc, dg, dst,
                                &e->err));
    GTRY(t, e, softmax_xent_gpu(&e->g, ldt, gdt, n, k, dx, dlab, dhp, 1.0f, NULL, NULL, dst,
                                &e->err));
    dget(e, gdt, cnt, dg, got);
    CHECK_REL(t, "loss gradient", cnt, got, ref, gdt == GDT_F16 ? TOL16 : TOL32_EW);
    cudaMemcpy(&st, dst, sizeof st, cudaMemcpyDeviceToHost);
    CHECK_CLOSE(t, st.loss_sum, 2 * loss, 1e-5);
    CHECK(t, st.correct == (unsigned long long)(2 * hits), "hits %llu vs %ld", st.correct, 2 * hits);
    CHECK(t, st.count == (unsigned long long)(2 * n), "count %llu vs %d", st.count, 2 * n);
out:
    free(x), free(ref), free(got), free(lab);
    genv_close(e);
}

// Loss over fp32/fp16 logits, 10 and 100 classes, with and without smoothing.
static void test_loss(tctx *t) {
    if (!gpu_here(t)) return;
    loss_case(t, GDT_F32, GDT_F32, 13, 10, 0.1f);
    loss_case(t, GDT_F32, GDT_F16, 37, 100, 0.1f);
    loss_case(t, GDT_F16, GDT_F16, 29, 100, 0.0f);
    loss_case(t, GDT_F32, GDT_F32, 512, 100, 0.1f);
}

// Loss against soft targets (random distributions), hits against the
// labels and the gradient (with a loss scale) against soft_xent_cpu.
static void soft_loss_case(tctx *t, gpu_dtype ldt, gpu_dtype gdt, int n, int k) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n * 5 + k + ldt * 2 + gdt + 1000))) return;
    const size_t cnt = (size_t)n * k;
    const float scale = 256.0f;
    float *x = hrand(e, cnt, -6, 6), *q = hrand(e, cnt, 0.01f, 1), *ref = hzero(cnt), *got = hzero(cnt);
    int *lab = malloc(n * sizeof *lab), *dlab = NULL;
    long hits = 0;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < k; j++) s += q[(size_t)i * k + j];
        for (int j = 0; j < k; j++) q[(size_t)i * k + j] = (float)(q[(size_t)i * k + j] / s);
        lab[i] = (int)rng_below(&e->r, (uint32_t)k);
    }
    void *dx = dput(e, ldt, cnt, x), *dg = dalloc(e, cnt * 4);
    float *dq = dalloc(e, cnt * sizeof(float));
    gpu_scaler sc = {scale, 1.0f / scale, 0, 0};
    gpu_stats st;
    gpu_scaler *dsc = dalloc(e, sizeof sc);
    gpu_stats *dst = dalloc(e, sizeof st);
    dlab = dalloc(e, n * sizeof *lab);
    h2d(dq, q, cnt * sizeof(float));
    h2d(dsc, &sc, sizeof sc);
    h2d(dlab, lab, n * sizeof *lab);
    cudaMemset(dst, 0, sizeof st);
    cudaDeviceSynchronize();
    double loss = soft_xent_cpu(n, k, x, q, lab, scale / n, ref, &hits);
    GTRY(t, e, soft_xent_gpu(&e->g, ldt, gdt, n, k, dx, dq, dlab, 1.0f / n, dsc, dg, dst, &e->err));
    GTRY(t, e, soft_xent_gpu(&e->g, ldt, gdt, n, k, dx, dq, dlab, 1.0f, NULL, NULL, dst, &e->err));
    dget(e, gdt, cnt, dg, got);
    CHECK_REL(t, "soft loss gradient", cnt, got, ref, gdt == GDT_F16 ? TOL16 : TOL32_EW);
    cudaMemcpy(&st, dst, sizeof st, cudaMemcpyDeviceToHost);
    CHECK_CLOSE(t, st.loss_sum, 2 * loss, 1e-5);
    CHECK(t, st.correct == (unsigned long long)(2 * hits), "hits %llu vs %ld", st.correct, 2 * hits);
    CHECK(t, st.count == (unsigned long long)(2 * n), "count %llu vs %d", st.count, 2 * n);
out:
    free(x), free(q), free(ref), free(got), free(lab);
    genv_close(e);
}

// Soft-target loss: 1, 5 and 128 images of 7 and 100 classes, fp32 and fp16.
static void test_soft_loss(tctx *t) {
    if (!gpu_here(t)) return;
    const int ns[3] = {1, 5, 128}, ks[2] = {7, 100};
    for (int a = 0; a < 3; a++)
        for (int c = 0; c < 2; c++) soft_loss_case(t, GDT_F32, GDT_F32, ns[a], ks[c]);
    soft_loss_case(t, GDT_F32, GDT_F16, 37, 100);
    soft_loss_case(t, GDT_F16, GDT_F16, 29, 7);
}

// --- optimizer --------------------------------------------------------------

// Masked SGD against the CPU (exact), masked entries exactly zero, and a
// step skipped by the overflow flag.
static void sgd_case(tctx *t, size_t n, int nesterov) {
    genv E, *e = &E;
    if (!genv_open(t, e, n + nesterov)) return;
    float *w = hrand(e, n, -1, 1), *g = hrand(e, n, -1, 1), *m = hrand(e, n, -1, 1);
    float *mask = hzero(n), *gw = hzero(n), *gm = hzero(n);
    for (size_t i = 0; i < n; i++) mask[i] = rng_uniform(&e->r) < 0.3f ? 0.0f : 1.0f;
    for (size_t i = 0; i < n; i++) w[i] *= mask[i], m[i] *= mask[i];
    float *dw = dput(e, GDT_F32, n, w), *dg = dput(e, GDT_F32, n, g), *dm = dput(e, GDT_F32, n, m);
    float *dk = dput(e, GDT_F32, n, mask);
    gpu_hparams hp = {0.05f, 0.9f, 5e-4f, 0.0f, nesterov, {0, 0, 0}};
    gpu_scaler sc = {1.0f, 1.0f, 0, 1};  // overflow set: the step must do nothing
    gpu_hparams *dhp = dalloc(e, sizeof hp);
    gpu_scaler *dsc = dalloc(e, sizeof sc);
    h2d(dhp, &hp, sizeof hp);
    h2d(dsc, &sc, sizeof sc);
    GTRY(t, e, sgd_step_gpu(&e->g, n, dw, dg, dm, dk, dhp, dsc, &e->err));
    dget(e, GDT_F32, n, dw, gw);
    CHECK(t, !memcmp(gw, w, n * sizeof *w), "sgd changed weights on an overflow step");
    sgd_step_cpu(n, w, g, m, mask, hp.lr, hp.momentum, hp.weight_decay, nesterov);
    GTRY(t, e, sgd_step_gpu(&e->g, n, dw, dg, dm, dk, dhp, NULL, &e->err));
    dget(e, GDT_F32, n, dw, gw);
    dget(e, GDT_F32, n, dm, gm);
    CHECK_REL(t, "sgd weights", n, gw, w, 1e-6);
    CHECK_REL(t, "sgd momentum", n, gm, m, 1e-6);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += mask[i] == 0.0f && (gw[i] != 0.0f || gm[i] != 0.0f);
    CHECK(t, bad == 0, "%d masked entries not exactly zero", bad);
out:
    free(w), free(g), free(m), free(mask), free(gw), free(gm);
    genv_close(e);
}

// Multi-tensor cast (KCRS -> KRSC with channel padding, linear permutation)
// and gather (back, unscaled, with the non-finite check) against host loops.
static void segs_case(tctx *t, gpu_dtype dt) {
    genv E, *e = &E;
    if (!genv_open(t, e, 5 + dt)) return;
    // conv (K 6, C 3, 3x3) padded to 8 channels, linear (7, C 5, 2x3), a bias of 9
    const int K0 = 6, C0 = 3, HW0 = 9, CW0 = 8, K1 = 7, C1 = 5, HW1 = 6, NB = 9;
    const size_t n0 = (size_t)K0 * C0 * HW0, n1 = (size_t)K1 * C1 * HW1, np = n0 + n1 + NB;
    const size_t w0 = (size_t)K0 * HW0 * CW0, w1 = (size_t)K1 * HW1 * C1;
    const float inv = 0.125f;
    float *master = hrand(e, np, -1, 1), *gw0 = hrand(e, w0, -8, 8), *gw1 = hrand(e, w1, -8, 8);
    float *gdir = hrand(e, NB, -8, 8), *out0 = hzero(w0), *out1 = hzero(w1), *grad = hzero(np);
    param_segs *ps = NULL;
    float *dmaster = dput(e, GDT_F32, np, master);
    void *dw0 = dalloc(e, w0 * 4), *dw1 = dalloc(e, w1 * 4);
    void *dg0 = dput(e, dt, w0, gw0), *dg1 = dput(e, GDT_F32, w1, gw1);
    float *dgrad = dalloc(e, np * 4);
    h2d(dgrad + n0 + n1, gdir, NB * sizeof(float));
    param_seg segs[3] = {
        {SEG_WORK, 0, K0, C0, HW0, CW0, dt, dt, dw0, dg0},
        {SEG_WORK, n0, K1, C1, HW1, C1, dt, GDT_F32, dw1, dg1},
        {SEG_DIRECT, n0 + n1, NB, 1, 1, 1, GDT_F32, GDT_F32, NULL, NULL},
    };
    gpu_scaler sc = {1.0f / inv, inv, 0, 0}, sc2;
    gpu_scaler *dsc = dalloc(e, sizeof sc);
    h2d(dsc, &sc, sizeof sc);
    GTRY(t, e, (ps = param_segs_create(segs, 3, &e->err)) ? 0 : -1);
    GTRY(t, e, param_cast_gpu(&e->g, ps, dmaster, &e->err));
    GTRY(t, e, grad_gather_gpu(&e->g, ps, dgrad, dsc, &e->err));
    dget(e, dt, w0, dw0, out0);
    dget(e, dt, w1, dw1, out1);
    dget(e, GDT_F32, np, dgrad, grad);
    int bad = 0;
    double tol = dt == GDT_F16 ? 1e-3 : 0.0;
    for (int k = 0; k < K0; k++)
        for (int s = 0; s < HW0; s++)
            for (int c = 0; c < CW0; c++) {
                float want = c < C0 ? master[((size_t)k * C0 + c) * HW0 + s] : 0.0f;
                float got = out0[((size_t)k * HW0 + s) * CW0 + c];
                bad += fabs(got - want) > tol * fabs(want) + 1e-7;
                if (c < C0) {
                    float gg = grad[((size_t)k * C0 + c) * HW0 + s];
                    bad += fabs(gg - gw0[((size_t)k * HW0 + s) * CW0 + c] * inv) > 1e-6;
                }
            }
    for (int k = 0; k < K1; k++)
        for (int s = 0; s < HW1; s++)
            for (int c = 0; c < C1; c++) {
                float want = master[n0 + ((size_t)k * C1 + c) * HW1 + s];
                bad += fabs(out1[((size_t)k * HW1 + s) * C1 + c] - want) > tol * fabs(want) + 1e-7;
                bad += fabs(grad[n0 + ((size_t)k * C1 + c) * HW1 + s] -
                            gw1[((size_t)k * HW1 + s) * C1 + c] * inv) > 1e-6;
            }
    for (int i = 0; i < NB; i++) bad += fabs(grad[n0 + n1 + i] - gdir[i] * inv) > 1e-6;
    CHECK(t, bad == 0, "%s: %d wrong cast/gather elements", dtn(dt), bad);
    cudaMemcpy(&sc2, dsc, sizeof sc2, cudaMemcpyDeviceToHost);
    CHECK(t, sc2.overflow == 0, "overflow flagged on finite gradients");
    gdir[4] = INFINITY;  // a non-finite direct gradient must raise the flag
    h2d(dgrad + n0 + n1, gdir, NB * sizeof(float));
    GTRY(t, e, grad_gather_gpu(&e->g, ps, dgrad, dsc, &e->err));
    cudaStreamSynchronize(e->g.stream);
    cudaMemcpy(&sc2, dsc, sizeof sc2, cudaMemcpyDeviceToHost);
    CHECK(t, sc2.overflow == 1, "overflow not flagged");
out:
    param_segs_free(ps);
    free(master), free(gw0), free(gw1), free(gdir), free(out0), free(out1), free(grad);
    genv_close(e);
}

// Loss scale: halved with a skipped step counted after an overflow, doubled
// after `interval` clean steps; the flag is cleared either way.
static void scaler_case(tctx *t) {
    genv E, *e = &E;
    if (!genv_open(t, e, 99)) return;
    gpu_scaler sc = {1024.0f, 1.0f / 1024.0f, 0, 1}, got;
    gpu_stats st = {0};
    gpu_scaler *dsc = dalloc(e, sizeof sc);
    gpu_stats *dst = dalloc(e, sizeof st);
    h2d(dsc, &sc, sizeof sc);
    h2d(dst, &st, sizeof st);
    GTRY(t, e, scaler_update_gpu(&e->g, dsc, dst, 2, &e->err));
    cudaStreamSynchronize(e->g.stream);
    cudaMemcpy(&got, dsc, sizeof got, cudaMemcpyDeviceToHost);
    cudaMemcpy(&st, dst, sizeof st, cudaMemcpyDeviceToHost);
    CHECK(t, got.scale == 512.0f && got.inv_scale == 1.0f / 512.0f && got.overflow == 0 &&
                 st.skipped == 1, "after overflow: scale %g, flag %d, skipped %llu", got.scale,
          got.overflow, st.skipped);
    GTRY(t, e, scaler_update_gpu(&e->g, dsc, dst, 2, &e->err));
    GTRY(t, e, scaler_update_gpu(&e->g, dsc, dst, 2, &e->err));
    cudaStreamSynchronize(e->g.stream);
    cudaMemcpy(&got, dsc, sizeof got, cudaMemcpyDeviceToHost);
    cudaMemcpy(&st, dst, sizeof st, cudaMemcpyDeviceToHost);
    CHECK(t, got.scale == 1024.0f && got.good_steps == 0 && st.skipped == 1,
          "after 2 clean steps: scale %g, good %d, skipped %llu", got.scale, got.good_steps,
          st.skipped);
out:
    genv_close(e);
}

// The optimizer passes.
static void test_optimizer(tctx *t) {
    if (!gpu_here(t)) return;
    sgd_case(t, 1003, 0);
    sgd_case(t, 1 << 16, 1);
    segs_case(t, GDT_F32);
    segs_case(t, GDT_F16);
    scaler_case(t);
}

// --- augmentation -----------------------------------------------------------

// Crop/flip/normalise against the CPU (fp32 exact), with channel padding.
static void augment_case(tctx *t, gpu_dtype dt, int n, int h, int w, int cpad, int aug) {
    genv E, *e = &E;
    if (!genv_open(t, e, (uint64_t)(n + h + w + cpad + aug))) return;
    const size_t npix = (size_t)n * 3 * h * w, nout = (size_t)n * h * w * cpad;
    uint8_t *img = malloc(npix), *flip = malloc(n);
    int8_t *dx = malloc(n), *dy = malloc(n);
    for (size_t i = 0; i < npix; i++) img[i] = (uint8_t)rng_below(&e->r, 256);
    for (int i = 0; i < n; i++) {
        dx[i] = (int8_t)((int)rng_below(&e->r, 9) - 4);
        dy[i] = (int8_t)((int)rng_below(&e->r, 9) - 4);
        flip[i] = (uint8_t)rng_below(&e->r, 2);
    }
    const float mean[3] = {0.507f, 0.487f, 0.441f}, sd[3] = {0.267f, 0.256f, 0.276f};
    float *ref = hzero(npix), *got = hzero(nout), *g3 = hzero(npix);
    uint8_t *dimg = dalloc(e, npix), *dflip = dalloc(e, n);
    int8_t *ddx = dalloc(e, n), *ddy = dalloc(e, n);
    void *dout = dalloc(e, nout * 4);
    h2d(dimg, img, npix);
    h2d(ddx, dx, n);
    h2d(ddy, dy, n);
    h2d(dflip, flip, n);
    augment_normalize_cpu(n, h, w, img, aug ? dx : NULL, aug ? dy : NULL, aug ? flip : NULL,
                          mean, sd, ref);
    GTRY(t, e, augment_normalize_gpu(&e->g, dt, n, h, w, cpad, dimg, aug ? ddx : NULL,
                                     aug ? ddy : NULL, aug ? dflip : NULL, mean, sd, dout,
                                     &e->err));
    dget(e, dt, nout, dout, got);
    int pad_bad = 0;
    for (size_t p = 0; p < (size_t)n * h * w; p++) {
        for (int c = 0; c < 3; c++) {
            size_t i = p / ((size_t)h * w), e2 = p % ((size_t)h * w);
            g3[(i * 3 + c) * h * w + e2] = got[p * cpad + c];
        }
        for (int c = 3; c < cpad; c++) pad_bad += got[p * cpad + c] != 0.0f;
    }
    CHECK(t, pad_bad == 0, "%d padding channels not zero", pad_bad);
    if (dt == GDT_F32) CHECK(t, !memcmp(g3, ref, npix * sizeof *ref), "augment fp32 not bit-exact");
    CHECK_REL(t, "augment", npix, g3, ref, dt == GDT_F16 ? 1e-3 : 0.0);
out:
    free(img), free(flip), free(dx), free(dy), free(ref), free(got), free(g3);
    genv_close(e);
}

// Augmentation: CIFAR size and an odd one, with and without crop/flip.
static void test_augment(tctx *t) {
    if (!gpu_here(t)) return;
    augment_case(t, GDT_F32, 5, 32, 32, 3, 1);
    augment_case(t, GDT_F32, 3, 7, 9, 4, 1);
    augment_case(t, GDT_F16, 5, 32, 32, 8, 1);
    augment_case(t, GDT_F16, 2, 32, 32, 8, 0);
}

// Runs every test; exit status 1 when one failed.
int main(void) {
    tctx t = {.suite = "gpu_test_ops"};
    RUN(&t, test_conv);
    RUN(&t, test_conv_repeat);
    RUN(&t, test_batchnorm);
    RUN(&t, test_elementwise);
    RUN(&t, test_pool);
    RUN(&t, test_linear);
    RUN(&t, test_loss);
    RUN(&t, test_soft_loss);
    RUN(&t, test_optimizer);
    RUN(&t, test_augment);
    return check_finish(&t);
}
