// Tests of the CPU convolution (kernels/conv2d_cpu.c): forward against a
// direct double-precision loop, the three gradients against central finite
// differences of L = sum(y * r) evaluated in double, the grouped (multi-image
// im2col) path against one-image calls, and bitwise determinism.
//
// Tolerances: |got - want| <= tol * max(1, |want|) with tol = 1e-4 (float
// kernels vs double references on O(1) data; float rounding is ~1e-6 here,
// a wrong index or a missing term is >= 1e-1). Finite differences use step
// 1e-3 in double; L is linear in each argument so they are exact to ~1e-12.
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv2d.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/testutil.h"

#define TOL 1e-4
#define FD_STEP 1e-3

// --- reference convolution --------------------------------------------------

typedef struct {
    conv2d_dims d;
    double *x, *w, *b, *r;  // input, weights, bias (or NULL), loss weights (N, K, P, Q)
} conv_ref;

// y = conv(x, w) + b by the direct definition, in double.
static void ref_conv_forward(const conv2d_dims *d, const double *x, const double *w,
                             const double *b, double *y) {
    for (int n = 0; n < d->n; n++)
        for (int k = 0; k < d->k; k++)
            for (int p = 0; p < d->p; p++)
                for (int q = 0; q < d->q; q++) {
                    double sum = b ? b[k] : 0.0;
                    for (int c = 0; c < d->c; c++)
                        for (int r = 0; r < d->r; r++)
                            for (int s = 0; s < d->s; s++) {
                                int ih = p * d->stride - d->pad + r;
                                int iw = q * d->stride - d->pad + s;
                                if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                                sum += x[((size_t)(n * d->c + c) * d->h + ih) * d->w + iw] *
                                       w[((size_t)(k * d->c + c) * d->r + r) * d->s + s];
                            }
                    y[((size_t)(n * d->k + k) * d->p + p) * d->q + q] = sum;
                }
}

// L = sum(conv(x, w) + b) * r) in double (ctx: a conv_ref).
static double ref_conv_loss(void *ctx) {
    const conv_ref *c = ctx;
    size_t ny = (size_t)c->d.n * c->d.k * c->d.p * c->d.q;
    double *y = malloc(ny * sizeof *y), l = 0.0;
    ref_conv_forward(&c->d, c->x, c->w, c->b, y);
    for (size_t i = 0; i < ny; i++) l += y[i] * c->r[i];
    free(y);
    return l;
}

// --- test shapes ------------------------------------------------------------

typedef struct {
    int n, c, h, w, k, r, s, stride, pad, bias;
} conv_shape;

static const conv_shape SHAPES[] = {
    {3, 5, 7, 9, 4, 3, 3, 2, 1, 1},   // awkward sizes, stride 2, pad 1
    {2, 3, 8, 6, 6, 1, 1, 1, 0, 0},   // 1x1, no bias
    {2, 4, 9, 7, 3, 5, 5, 1, 2, 1},   // 5x5 "same"
    {1, 2, 5, 5, 2, 3, 3, 3, 0, 1},   // one image, stride 3
    {3, 3, 6, 11, 5, 3, 5, 2, 2, 0},  // non-square kernel, pad > needed
    {2, 2, 4, 4, 3, 3, 3, 1, 1, 1},   // small "same"
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

// Inputs of one conv test, float and double.
typedef struct {
    conv2d_dims d;
    size_t nx, nw, ny;
    float *x, *w, *b, *r, *work;
    conv_ref ref;
} conv_case;

// Builds random inputs for shape sh (seeded by its index).
static int conv_case_init(conv_case *cc, const conv_shape *sh, uint64_t seed) {
    if (conv2d_dims_init(&cc->d, sh->n, sh->c, sh->h, sh->w, sh->k, sh->r, sh->s, sh->stride,
                         sh->pad) != 0)
        return -1;
    rng g;
    rng_seed(&g, seed, 1);
    const conv2d_dims *d = &cc->d;
    cc->nx = (size_t)d->n * d->c * d->h * d->w;
    cc->nw = (size_t)d->k * d->c * d->r * d->s;
    cc->ny = (size_t)d->n * d->k * d->p * d->q;
    cc->x = malloc(cc->nx * sizeof(float));
    cc->w = malloc(cc->nw * sizeof(float));
    cc->b = sh->bias ? malloc(d->k * sizeof(float)) : NULL;
    cc->r = malloc(cc->ny * sizeof(float));
    cc->work = alloc_poisoned(conv2d_cpu_workspace(d));
    fill_uniform(&g, cc->x, cc->nx, -1.0f, 1.0f);
    fill_uniform(&g, cc->w, cc->nw, -1.0f, 1.0f);
    if (cc->b) fill_uniform(&g, cc->b, d->k, -1.0f, 1.0f);
    fill_uniform(&g, cc->r, cc->ny, -1.0f, 1.0f);
    cc->ref.d = *d;
    cc->ref.x = to_double(cc->x, cc->nx);
    cc->ref.w = to_double(cc->w, cc->nw);
    cc->ref.b = cc->b ? to_double(cc->b, d->k) : NULL;
    cc->ref.r = to_double(cc->r, cc->ny);
    return 0;
}

// Frees a conv_case.
static void conv_case_free(conv_case *cc) {
    free(cc->x), free(cc->w), free(cc->b), free(cc->r), free(cc->work);
    free(cc->ref.x), free(cc->ref.w), free(cc->ref.b), free(cc->ref.r);
}

// --- tests ------------------------------------------------------------------

// Output sizes and rejection of empty outputs.
static void test_conv_dims(tctx *t) {
    conv2d_dims d;
    CHECK(t, conv2d_dims_init(&d, 3, 5, 7, 9, 4, 3, 3, 2, 1) == 0, "valid dims rejected");
    CHECK(t, d.p == 4 && d.q == 5, "p=%d q=%d, want 4 5", d.p, d.q);
    CHECK(t, conv2d_dims_init(&d, 1, 1, 2, 2, 1, 5, 5, 1, 1) == -1, "empty output accepted");
    CHECK(t, conv2d_dims_init(&d, 1, 1, 4, 4, 1, 3, 3, 0, 1) == -1, "stride 0 accepted");
    CHECK(t, conv2d_dims_init(&d, 1, 1, 5, 5, 1, 5, 5, 1, 0) == 0 && d.p == 1 && d.q == 1,
          "full-size kernel: p=%d q=%d", d.p, d.q);
}

// Forward against the direct double loop on every shape.
static void test_conv_forward(tctx *t) {
    for (int i = 0; i < NSHAPES; i++) {
        conv_case cc;
        CHECK(t, conv_case_init(&cc, &SHAPES[i], 100 + i) == 0, "shape %d rejected", i);
        float *y = alloc_poisoned(cc.ny);
        double *want = malloc(cc.ny * sizeof *want);
        conv2d_forward_cpu(&cc.d, cc.x, cc.w, cc.b, y, cc.work);
        ref_conv_forward(&cc.d, cc.ref.x, cc.ref.w, cc.ref.b, want);
        check_array(t, "conv y", y, want, cc.ny, TOL);
        free(y), free(want);
        conv_case_free(&cc);
    }
}

// Gradient w.r.t. the input against finite differences.
static void test_conv_backward_data(tctx *t) {
    for (int i = 0; i < NSHAPES; i++) {
        conv_case cc;
        conv_case_init(&cc, &SHAPES[i], 200 + i);
        float *dx = alloc_poisoned(cc.nx);
        conv2d_backward_data_cpu(&cc.d, cc.r, cc.w, dx, cc.work);
        double *num = fd_grad(ref_conv_loss, &cc.ref, cc.ref.x, cc.nx, FD_STEP);
        check_array(t, "conv dx", dx, num, cc.nx, TOL);
        free(dx), free(num);
        conv_case_free(&cc);
    }
}

// Gradients w.r.t. weights and bias against finite differences.
static void test_conv_backward_filter(tctx *t) {
    for (int i = 0; i < NSHAPES; i++) {
        conv_case cc;
        conv_case_init(&cc, &SHAPES[i], 300 + i);
        float *dw = alloc_poisoned(cc.nw), *db = alloc_poisoned(cc.d.k);
        conv2d_backward_filter_cpu(&cc.d, cc.x, cc.r, dw, cc.b ? db : NULL, cc.work);
        double *num = fd_grad(ref_conv_loss, &cc.ref, cc.ref.w, cc.nw, FD_STEP);
        check_array(t, "conv dw", dw, num, cc.nw, TOL);
        free(num);
        if (cc.b) {
            num = fd_grad(ref_conv_loss, &cc.ref, cc.ref.b, cc.d.k, FD_STEP);
            check_array(t, "conv db", db, num, cc.d.k, TOL);
            free(num);
        }
        free(dw), free(db);
        conv_case_free(&cc);
    }
}

// A shape large enough that images are unfolded in several groups (the last
// one partial) gives the same results as one-image calls.
static void test_conv_grouped(tctx *t) {
    const conv_shape sh = {7, 32, 64, 64, 32, 3, 3, 1, 1, 1};
    conv_case cc;
    conv_case_init(&cc, &sh, 400);
    const conv2d_dims *d = &cc.d;
    CHECK(t, conv2d_cpu_workspace(d) < (size_t)d->n * d->p * d->q * (d->c * 9 + d->k),
          "shape does not exercise grouping");
    float *y = alloc_poisoned(cc.ny), *dx = alloc_poisoned(cc.nx), *dw = alloc_poisoned(cc.nw);
    float *db = alloc_poisoned(d->k);
    conv2d_forward_cpu(d, cc.x, cc.w, cc.b, y, cc.work);
    conv2d_backward_data_cpu(d, cc.r, cc.w, dx, cc.work);
    conv2d_backward_filter_cpu(d, cc.x, cc.r, dw, db, cc.work);
    // One image at a time: forward and dx per slice, dw/db summed in double.
    conv2d_dims d1;
    conv2d_dims_init(&d1, 1, d->c, d->h, d->w, d->k, d->r, d->s, d->stride, d->pad);
    float *w1 = malloc(conv2d_cpu_workspace(&d1) * sizeof *w1);
    size_t xs = cc.nx / d->n, ys = cc.ny / d->n;
    double *ywant = malloc(cc.ny * sizeof *ywant), *dxwant = malloc(cc.nx * sizeof *dxwant);
    double *dwwant = calloc(cc.nw, sizeof *dwwant), *dbwant = calloc(d->k, sizeof *dbwant);
    float *t1 = malloc((xs > ys ? xs : ys) * sizeof *t1), *tw = malloc(cc.nw * sizeof *tw);
    float tb[32];
    for (int i = 0; i < d->n; i++) {
        conv2d_forward_cpu(&d1, cc.x + i * xs, cc.w, cc.b, t1, w1);
        for (size_t e = 0; e < ys; e++) ywant[i * ys + e] = t1[e];
        conv2d_backward_data_cpu(&d1, cc.r + i * ys, cc.w, t1, w1);
        for (size_t e = 0; e < xs; e++) dxwant[i * xs + e] = t1[e];
        conv2d_backward_filter_cpu(&d1, cc.x + i * xs, cc.r + i * ys, tw, tb, w1);
        for (size_t e = 0; e < cc.nw; e++) dwwant[e] += tw[e];
        for (int k = 0; k < d->k; k++) dbwant[k] += tb[k];
    }
    check_array(t, "grouped y", y, ywant, cc.ny, TOL);
    check_array(t, "grouped dx", dx, dxwant, cc.nx, TOL);
    check_array(t, "grouped dw", dw, dwwant, cc.nw, 1e-3);  // sums of 28k terms
    check_array(t, "grouped db", db, dbwant, d->k, 1e-3);
    // Spot-check the one-image forward against the direct loop (corner outputs).
    double *yref = malloc(cc.ny * sizeof *yref);
    conv2d_dims d2 = *d;
    d2.n = 1;
    ref_conv_forward(&d2, cc.ref.x, cc.ref.w, cc.ref.b, yref);
    check_values(t, "grouped y[0]", y, yref, ys, TOL);
    free(yref), free(y), free(dx), free(dw), free(db), free(w1), free(ywant), free(dxwant);
    free(dwwant), free(dbwant), free(t1), free(tw);
    conv_case_free(&cc);
}

// Runs on the same inputs give bitwise-equal outputs and gradients, with the
// default thread count and with one thread.
static void test_conv_deterministic(tctx *t) {
    const conv_shape sh = {5, 16, 32, 32, 16, 3, 3, 1, 1, 1};
    conv_case cc;
    conv_case_init(&cc, &sh, 500);
    float *out[3][3];
    const int threads = omp_get_max_threads();
    for (int run = 0; run < 3; run++) {
        omp_set_num_threads(run == 2 ? 1 : threads);
        out[run][0] = malloc(cc.ny * sizeof(float));
        out[run][1] = malloc(cc.nx * sizeof(float));
        out[run][2] = malloc(cc.nw * sizeof(float));
        conv2d_forward_cpu(&cc.d, cc.x, cc.w, cc.b, out[run][0], cc.work);
        conv2d_backward_data_cpu(&cc.d, cc.r, cc.w, out[run][1], cc.work);
        conv2d_backward_filter_cpu(&cc.d, cc.x, cc.r, out[run][2], NULL, cc.work);
    }
    omp_set_num_threads(threads);
    for (int run = 1; run < 3; run++) {
        CHECK(t, memcmp(out[0][0], out[run][0], cc.ny * sizeof(float)) == 0, "forward differs");
        CHECK(t, memcmp(out[0][1], out[run][1], cc.nx * sizeof(float)) == 0, "dx differs");
        CHECK(t, memcmp(out[0][2], out[run][2], cc.nw * sizeof(float)) == 0, "dw differs");
    }
    for (int run = 0; run < 3; run++)
        for (int j = 0; j < 3; j++) free(out[run][j]);
    conv_case_free(&cc);
}

int main(void) {
    tctx t = {.suite = "test_kernels_conv"};
    RUN(&t, test_conv_dims);
    RUN(&t, test_conv_forward);
    RUN(&t, test_conv_backward_data);
    RUN(&t, test_conv_backward_filter);
    RUN(&t, test_conv_grouped);
    RUN(&t, test_conv_deterministic);
    return check_finish(&t);
}
