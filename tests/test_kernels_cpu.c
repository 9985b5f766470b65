// Tests of the CPU reference kernels other than convolution: batch norm,
// ReLU/add/accumulate, max/avg/global pooling, linear, softmax cross-entropy
// and masked SGD. Forwards are compared with direct double-precision loops;
// backwards with central finite differences of L = sum(y * r) (r random)
// evaluated on those double references.
//
// Tolerances: |got - want| <= tol * max(1, |want|); tol = 1e-4 for float
// kernels against double references on O(1) data (float rounding is ~1e-6;
// an indexing or formula error is >= 1e-2). FD step 1e-4 in double: exact for
// the piecewise-linear ops (inputs kept >= 1e-2 away from kinks and ties),
// O(1e-8) truncation error for BN and softmax.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/linear.h"
#include "kernels/loss.h"
#include "kernels/pool.h"
#include "kernels/sgd.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/testutil.h"

#define TOL 1e-4
#define FD_STEP 1e-4

// --- helpers ----------------------------------------------------------------

// Distinct values (a shuffled grid with spacing 0.02) for ties-free max pooling
// and kink-free ReLU: every |value| >= 0.01.
static void fill_distinct(rng *r, float *p, size_t n) {
    int *perm = malloc(n * sizeof *perm);
    for (size_t i = 0; i < n; i++) perm[i] = (int)i;
    rng_shuffle(r, perm, (int)n);
    for (size_t i = 0; i < n; i++) p[i] = 0.02f * (float)(perm[i] - (int)(n / 2)) + 0.01f;
    free(perm);
}

// sum(y * r) over n elements.
static double dot(const double *y, const double *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += y[i] * r[i];
    return s;
}

// --- batch norm -------------------------------------------------------------

typedef struct {
    int n, c, hw;
    double *x, *gamma, *beta, *r;
    double eps;
} bn_ref;

// Training-mode BN in double: y, batch mean and biased variance per channel.
static void ref_bn_train(const bn_ref *b, double *y, double *mean, double *var) {
    const double m = (double)b->n * b->hw;
    for (int ch = 0; ch < b->c; ch++) {
        double s = 0.0, sq = 0.0;
        for (int i = 0; i < b->n; i++)
            for (int e = 0; e < b->hw; e++) s += b->x[((size_t)i * b->c + ch) * b->hw + e];
        const double mu = s / m;
        for (int i = 0; i < b->n; i++)
            for (int e = 0; e < b->hw; e++) {
                const double d = b->x[((size_t)i * b->c + ch) * b->hw + e] - mu;
                sq += d * d;
            }
        mean[ch] = mu, var[ch] = sq / m;
        for (int i = 0; i < b->n; i++)
            for (int e = 0; e < b->hw; e++) {
                const size_t o = ((size_t)i * b->c + ch) * b->hw + e;
                y[o] = (b->x[o] - mu) / sqrt(var[ch] + b->eps) * b->gamma[ch] + b->beta[ch];
            }
    }
}

// L = sum(bn_train(x) * r) in double.
static double ref_bn_loss(void *ctx) {
    const bn_ref *b = ctx;
    const size_t nx = (size_t)b->n * b->c * b->hw;
    double *y = malloc(nx * sizeof *y), *mean = malloc(b->c * sizeof *mean);
    double *var = malloc(b->c * sizeof *var);
    ref_bn_train(b, y, mean, var);
    const double l = dot(y, b->r, nx);
    free(y), free(mean), free(var);
    return l;
}

// Training forward: y, saved stats and the running-stat update (unbiased var).
static void test_bn_forward_train(tctx *t) {
    const int n = 3, c = 5, hw = 63;  // h = 7, w = 9
    const size_t nx = (size_t)n * c * hw;
    const float eps = 1e-5f, mom = 0.1f;
    rng g;
    rng_seed(&g, 11, 0);
    float *x = malloc(nx * sizeof *x), gam[5], bet[5], rm[5], rv[5];
    fill_uniform(&g, x, nx, -1.0f, 3.0f);  // mean away from zero
    fill_uniform(&g, gam, c, 0.5f, 1.5f), fill_uniform(&g, bet, c, -1.0f, 1.0f);
    fill_uniform(&g, rm, c, -0.5f, 0.5f), fill_uniform(&g, rv, c, 0.5f, 2.0f);
    bn_ref b = {n, c, hw, to_double(x, nx), to_double(gam, c), to_double(bet, c), NULL, eps};
    double *y_ref = malloc(nx * sizeof *y_ref), mean[5], var[5], invstd[5], rm_ref[5], rv_ref[5];
    ref_bn_train(&b, y_ref, mean, var);
    const double m = (double)n * hw;
    for (int ch = 0; ch < c; ch++) {
        invstd[ch] = 1.0 / sqrt(var[ch] + eps);
        rm_ref[ch] = (1.0 - mom) * rm[ch] + mom * mean[ch];
        rv_ref[ch] = (1.0 - mom) * rv[ch] + mom * var[ch] * m / (m - 1.0);
    }
    float *y = alloc_poisoned(nx), *sm = alloc_poisoned(c), *si = alloc_poisoned(c);
    batchnorm_forward_train_cpu(n, c, hw, x, gam, bet, eps, mom, rm, rv, y, sm, si);
    check_array(t, "bn y", y, y_ref, nx, TOL);
    check_array(t, "bn save_mean", sm, mean, c, TOL);
    check_array(t, "bn save_invstd", si, invstd, c, TOL);
    for (int ch = 0; ch < c; ch++) {
        CHECK_CLOSE(t, rm[ch], rm_ref[ch], 1e-6);
        CHECK_CLOSE(t, rv[ch], rv_ref[ch], 1e-6);
    }
    free(x), free(b.x), free(b.gamma), free(b.beta), free(y_ref), free(y), free(sm), free(si);
}

// Inference forward uses the running statistics.
static void test_bn_forward_infer(tctx *t) {
    const int n = 2, c = 3, hw = 10;
    const size_t nx = (size_t)n * c * hw;
    rng g;
    rng_seed(&g, 12, 0);
    float *x = malloc(nx * sizeof *x), gam[3], bet[3], rm[3], rv[3];
    fill_uniform(&g, x, nx, -2.0f, 2.0f);
    fill_uniform(&g, gam, c, 0.5f, 1.5f), fill_uniform(&g, bet, c, -1.0f, 1.0f);
    fill_uniform(&g, rm, c, -0.5f, 0.5f), fill_uniform(&g, rv, c, 0.1f, 2.0f);
    double *want = malloc(nx * sizeof *want);
    for (size_t i = 0; i < nx; i++) {
        const int ch = (int)(i / hw) % c;
        want[i] = ((double)x[i] - rm[ch]) / sqrt((double)rv[ch] + 1e-3) * gam[ch] + bet[ch];
    }
    float *y = alloc_poisoned(nx);
    batchnorm_forward_infer_cpu(n, c, hw, x, gam, bet, rm, rv, 1e-3f, y);
    check_array(t, "bn infer y", y, want, nx, TOL);
    free(x), free(want), free(y);
}

// Backward (dx, dgamma, dbeta) against finite differences of the training forward.
static void test_bn_backward(tctx *t) {
    const int n = 3, c = 5, hw = 6;
    const size_t nx = (size_t)n * c * hw;
    rng g;
    rng_seed(&g, 13, 0);
    float *x = malloc(nx * sizeof *x), *r = malloc(nx * sizeof *r), gam[5], bet[5];
    float rm[5] = {0}, rv[5] = {1, 1, 1, 1, 1}, sm[5], si[5];
    fill_uniform(&g, x, nx, -1.0f, 2.0f), fill_uniform(&g, r, nx, -1.0f, 1.0f);
    fill_uniform(&g, gam, c, 0.5f, 1.5f), fill_uniform(&g, bet, c, -1.0f, 1.0f);
    float *y = malloc(nx * sizeof *y);
    batchnorm_forward_train_cpu(n, c, hw, x, gam, bet, 1e-5f, 0.1f, rm, rv, y, sm, si);
    float *dx = alloc_poisoned(nx), *dg = alloc_poisoned(c), *db = alloc_poisoned(c);
    batchnorm_backward_cpu(n, c, hw, x, r, gam, sm, si, dx, dg, db);
    bn_ref b = {n, c, hw, to_double(x, nx), to_double(gam, c), to_double(bet, c),
                to_double(r, nx), 1e-5};
    double *num = fd_grad(ref_bn_loss, &b, b.x, nx, FD_STEP);
    check_array(t, "bn dx", dx, num, nx, 1e-3);  // invstd ~ 1.2 amplifies float rounding
    free(num);
    num = fd_grad(ref_bn_loss, &b, b.gamma, c, FD_STEP);
    check_array(t, "bn dgamma", dg, num, c, TOL);
    free(num);
    num = fd_grad(ref_bn_loss, &b, b.beta, c, FD_STEP);
    check_array(t, "bn dbeta", db, num, c, TOL);
    free(num);
    free(x), free(r), free(y), free(dx), free(dg), free(db);
    free(b.x), free(b.gamma), free(b.beta), free(b.r);
}

// --- elementwise ------------------------------------------------------------

typedef struct {
    size_t n;
    double *x, *r;
} relu_ref;

// L = sum(max(x, 0) * r) in double.
static double ref_relu_loss(void *ctx) {
    const relu_ref *a = ctx;
    double l = 0.0;
    for (size_t i = 0; i < a->n; i++) l += (a->x[i] > 0 ? a->x[i] : 0.0) * a->r[i];
    return l;
}

// ReLU forward (also in place) and backward by finite differences; add and accumulate.
static void test_elementwise(tctx *t) {
    const size_t n = 3 * 5 * 7 * 9;
    rng g;
    rng_seed(&g, 21, 0);
    float *x = malloc(n * sizeof *x), *r = malloc(n * sizeof *r), *b = malloc(n * sizeof *b);
    fill_distinct(&g, x, n), fill_uniform(&g, r, n, -1.0f, 1.0f);
    fill_uniform(&g, b, n, -1.0f, 1.0f);
    relu_ref a = {n, to_double(x, n), to_double(r, n)};
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = x[i] > 0 ? x[i] : 0.0;
    float *y = alloc_poisoned(n);
    relu_forward_cpu(n, x, y);
    check_array(t, "relu y", y, want, n, 0.0);
    float *inplace = alloc_poisoned(n);
    memcpy(inplace, x, n * sizeof *x);
    relu_forward_cpu(n, inplace, inplace);
    check_array(t, "relu in place", inplace, want, n, 0.0);
    float *dx = alloc_poisoned(n);
    relu_backward_cpu(n, y, r, dx);
    double *num = fd_grad(ref_relu_loss, &a, a.x, n, FD_STEP);
    check_array(t, "relu dx", dx, num, n, TOL);
    memcpy(inplace, r, n * sizeof *r);
    relu_backward_cpu(n, y, inplace, inplace);
    check_array(t, "relu dx in place", inplace, num, n, TOL);
    for (size_t i = 0; i < n; i++) want[i] = (double)x[i] + b[i];
    add_forward_cpu(n, x, b, y);
    check_array(t, "add y", y, want, n, 1e-6);
    memcpy(inplace, x, n * sizeof *x);
    accumulate_cpu(n, b, inplace);
    check_array(t, "accumulate", inplace, want, n, 1e-6);
    free(x), free(r), free(b), free(a.x), free(a.r), free(want), free(y), free(inplace);
    free(dx), free(num);
}

// --- pooling ----------------------------------------------------------------

typedef struct {
    pool_dims d;
    int kind;  // 0 max, 1 avg
    double *x, *r;
} pool_ref;

// Max or average pool in double by the direct definition.
static void ref_pool(const pool_ref *pr, double *y) {
    const pool_dims *d = &pr->d;
    for (int pl = 0; pl < d->n * d->c; pl++)
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++) {
                double best = -INFINITY, sum = 0.0;
                for (int i = 0; i < d->k; i++)
                    for (int j = 0; j < d->k; j++) {
                        const int yy = p * d->stride - d->pad + i, xx = q * d->stride - d->pad + j;
                        if (yy < 0 || yy >= d->h || xx < 0 || xx >= d->w) continue;
                        const double v = pr->x[((size_t)pl * d->h + yy) * d->w + xx];
                        best = v > best ? v : best;
                        sum += v;
                    }
                y[((size_t)pl * d->p + p) * d->q + q] = pr->kind ? sum / (d->k * d->k) : best;
            }
}

// L = sum(pool(x) * r) in double.
static double ref_pool_loss(void *ctx) {
    const pool_ref *pr = ctx;
    const size_t ny = (size_t)pr->d.n * pr->d.c * pr->d.p * pr->d.q;
    double *y = malloc(ny * sizeof *y);
    ref_pool(pr, y);
    const double l = dot(y, pr->r, ny);
    free(y);
    return l;
}

// Max and average pooling forward and backward on several window settings.
static void test_pool(tctx *t) {
    const int cfg[][3] = {{3, 2, 1}, {2, 2, 0}, {3, 1, 1}, {5, 3, 2}};  // k, stride, pad
    for (int ci = 0; ci < 4; ci++) {
        for (int kind = 0; kind < 2; kind++) {
            pool_ref pr = {.kind = kind};
            CHECK(t, pool_dims_init(&pr.d, 3, 5, 7, 9, cfg[ci][0], cfg[ci][1], cfg[ci][2]) == 0,
                  "cfg %d rejected", ci);
            const size_t nx = 3 * 5 * 7 * 9, ny = (size_t)3 * 5 * pr.d.p * pr.d.q;
            rng g;
            rng_seed(&g, 31, ci * 2 + kind);
            float *x = malloc(nx * sizeof *x), *r = malloc(ny * sizeof *r);
            fill_distinct(&g, x, nx), fill_uniform(&g, r, ny, -1.0f, 1.0f);
            pr.x = to_double(x, nx), pr.r = to_double(r, ny);
            double *want = malloc(ny * sizeof *want);
            ref_pool(&pr, want);
            float *y = alloc_poisoned(ny), *dx = alloc_poisoned(nx);
            if (kind) {
                avgpool_forward_cpu(&pr.d, x, y);
                avgpool_backward_cpu(&pr.d, r, dx);
            } else {
                maxpool_forward_cpu(&pr.d, x, y);
                maxpool_backward_cpu(&pr.d, x, r, dx);
            }
            check_array(t, kind ? "avgpool y" : "maxpool y", y, want, ny, TOL);
            double *num = fd_grad(ref_pool_loss, &pr, pr.x, nx, FD_STEP);
            check_array(t, kind ? "avgpool dx" : "maxpool dx", dx, num, nx, TOL);
            free(x), free(r), free(pr.x), free(pr.r), free(want), free(y), free(dx), free(num);
        }
    }
}

// Max-pool ties go to the first maximum in row-major window order; bad dims rejected.
static void test_pool_ties_and_dims(tctx *t) {
    pool_dims d;
    CHECK(t, pool_dims_init(&d, 1, 1, 4, 4, 2, 2, 0) == 0, "valid dims rejected");
    float x[16], y[4], dy[4] = {1, 2, 3, 4}, dx[16];
    for (int i = 0; i < 16; i++) x[i] = 1.0f;
    maxpool_forward_cpu(&d, x, y);
    maxpool_backward_cpu(&d, x, dy, dx);
    const int first[4] = {0, 2, 8, 10};
    for (int i = 0; i < 16; i++) {
        float want = 0.0f;
        for (int j = 0; j < 4; j++)
            if (first[j] == i) want = dy[j];
        CHECK(t, dx[i] == want, "dx[%d] = %g, want %g", i, dx[i], want);
    }
    CHECK(t, y[0] == 1.0f && y[3] == 1.0f, "y = %g %g", y[0], y[3]);
    // All-negative input with padding: the pad (0) must not win.
    CHECK(t, pool_dims_init(&d, 1, 1, 2, 2, 3, 1, 1) == 0, "padded dims rejected");
    float xn[4] = {-4, -3, -2, -1}, yn[4];
    maxpool_forward_cpu(&d, xn, yn);
    CHECK(t, yn[0] == -1.0f && yn[3] == -1.0f, "padding won: %g %g", yn[0], yn[3]);
    CHECK(t, pool_dims_init(&d, 1, 1, 4, 4, 2, 2, 2) == -1, "pad >= k accepted");
    CHECK(t, pool_dims_init(&d, 1, 1, 2, 2, 5, 1, 1) == -1, "empty output accepted");
    CHECK(t, pool_dims_init(&d, 3, 5, 7, 9, 3, 2, 1) == 0 && d.p == 4 && d.q == 5,
          "p=%d q=%d, want 4 5", d.p, d.q);
}

typedef struct {
    int n, c, hw;
    double *x, *r;
} gap_ref;

// L = sum(mean_hw(x) * r) in double.
static double ref_gap_loss(void *ctx) {
    const gap_ref *a = ctx;
    double l = 0.0;
    for (int pl = 0; pl < a->n * a->c; pl++) {
        double s = 0.0;
        for (int e = 0; e < a->hw; e++) s += a->x[(size_t)pl * a->hw + e];
        l += s / a->hw * a->r[pl];
    }
    return l;
}

// Global average pool forward and backward.
static void test_gap(tctx *t) {
    const int n = 3, c = 5, hw = 63;
    const size_t nx = (size_t)n * c * hw;
    rng g;
    rng_seed(&g, 41, 0);
    float *x = malloc(nx * sizeof *x), r[15];
    fill_uniform(&g, x, nx, -1.0f, 1.0f), fill_uniform(&g, r, 15, -1.0f, 1.0f);
    gap_ref a = {n, c, hw, to_double(x, nx), to_double(r, 15)};
    double want[15];
    for (int pl = 0; pl < 15; pl++) {
        double s = 0.0;
        for (int e = 0; e < hw; e++) s += x[(size_t)pl * hw + e];
        want[pl] = s / hw;
    }
    float *y = alloc_poisoned(15), *dx = alloc_poisoned(nx);
    gap_forward_cpu(n, c, hw, x, y);
    gap_backward_cpu(n, c, hw, r, dx);
    check_array(t, "gap y", y, want, 15, TOL);
    double *num = fd_grad(ref_gap_loss, &a, a.x, nx, FD_STEP);
    check_array(t, "gap dx", dx, num, nx, TOL);
    free(x), free(a.x), free(a.r), free(y), free(dx), free(num);
}

// --- linear -----------------------------------------------------------------

typedef struct {
    int n, in, out;
    double *x, *w, *b, *r;  // b may be NULL
} linear_ref;

// y = x w^T + b in double.
static void ref_linear(const linear_ref *a, double *y) {
    for (int i = 0; i < a->n; i++)
        for (int o = 0; o < a->out; o++) {
            double s = a->b ? a->b[o] : 0.0;
            for (int j = 0; j < a->in; j++) s += a->x[(size_t)i * a->in + j] * a->w[(size_t)o * a->in + j];
            y[(size_t)i * a->out + o] = s;
        }
}

// L = sum(linear(x) * r) in double.
static double ref_linear_loss(void *ctx) {
    const linear_ref *a = ctx;
    double *y = malloc((size_t)a->n * a->out * sizeof *y);
    ref_linear(a, y);
    const double l = dot(y, a->r, (size_t)a->n * a->out);
    free(y);
    return l;
}

// Linear forward and the three gradients, with and without bias.
static void test_linear(tctx *t) {
    for (int bias = 0; bias < 2; bias++) {
        const int n = 3, in = 35, out = 7;
        rng g;
        rng_seed(&g, 51, bias);
        float *x = malloc(n * in * sizeof *x), *w = malloc(out * in * sizeof *w), b[7], r[21];
        fill_uniform(&g, x, n * in, -1, 1), fill_uniform(&g, w, out * in, -1, 1);
        fill_uniform(&g, b, out, -1, 1), fill_uniform(&g, r, n * out, -1, 1);
        linear_ref a = {n, in, out, to_double(x, n * in), to_double(w, out * in),
                        bias ? to_double(b, out) : NULL, to_double(r, n * out)};
        double want[21];
        ref_linear(&a, want);
        float *y = alloc_poisoned(n * out), *dx = alloc_poisoned(n * in);
        float *dw = alloc_poisoned(out * in), *db = alloc_poisoned(out);
        linear_forward_cpu(n, in, out, x, w, bias ? b : NULL, y);
        linear_backward_data_cpu(n, in, out, r, w, dx);
        linear_backward_filter_cpu(n, in, out, x, r, dw, bias ? db : NULL);
        check_array(t, "linear y", y, want, n * out, TOL);
        double *num = fd_grad(ref_linear_loss, &a, a.x, n * in, FD_STEP);
        check_array(t, "linear dx", dx, num, n * in, TOL);
        free(num);
        num = fd_grad(ref_linear_loss, &a, a.w, out * in, FD_STEP);
        check_array(t, "linear dw", dw, num, out * in, TOL);
        free(num);
        if (bias) {
            num = fd_grad(ref_linear_loss, &a, a.b, out, FD_STEP);
            check_array(t, "linear db", db, num, out, TOL);
            free(num);
        } else {
            CHECK(t, guard_ok(db, 0) && isnan(db[0]), "db written although NULL was passed");
        }
        free(x), free(w), free(a.x), free(a.w), free(a.b), free(a.r);
        free(y), free(dx), free(dw), free(db);
    }
}

// --- loss -------------------------------------------------------------------

typedef struct {
    int n, k;
    double *z;
    const int *labels;
    double smoothing, scale;
} xent_ref;

// scale * sum over images of -sum(target * log softmax(z)), in double (direct formula).
static double ref_xent(void *ctx) {
    const xent_ref *a = ctx;
    double total = 0.0;
    for (int i = 0; i < a->n; i++) {
        const double *z = a->z + (size_t)i * a->k;
        double se = 0.0;
        for (int j = 0; j < a->k; j++) se += exp(z[j]);
        for (int j = 0; j < a->k; j++) {
            const double tj = (j == a->labels[i] ? 1.0 - a->smoothing : 0.0) + a->smoothing / a->k;
            total -= tj * (z[j] - log(se));
        }
    }
    return total * a->scale;
}

// Loss value, gradient and top-1 count with and without label smoothing.
static void test_loss(tctx *t) {
    const int n = 6, k = 7;
    const int labels[6] = {0, 3, 6, 2, 2, 5};
    for (int si = 0; si < 2; si++) {
        const float smooth = si ? 0.1f : 0.0f;
        rng g;
        rng_seed(&g, 61, si);
        float z[42];
        fill_uniform(&g, z, n * k, -3, 3);
        z[1 * k + 3] = 5.0f;  // image 1 and 3 predicted right, others by chance
        z[3 * k + 2] = 5.0f;
        long want_hits = 0;
        for (int i = 0; i < n; i++) {
            int best = 0;
            for (int j = 1; j < k; j++)
                if (z[i * k + j] > z[i * k + best]) best = j;
            want_hits += best == labels[i];
        }
        xent_ref a = {n, k, to_double(z, n * k), labels, smooth, 1.0 / n};
        float *dz = alloc_poisoned(n * k);
        long hits = -1;
        double loss = softmax_xent_cpu(n, k, z, labels, smooth, 1.0f / n, dz, &hits);
        CHECK_CLOSE(t, loss / n, ref_xent(&a), 1e-6);
        CHECK(t, hits == want_hits && hits >= 2, "hits %ld, want %ld", hits, want_hits);
        double *num = fd_grad(ref_xent, &a, a.z, n * k, FD_STEP);
        check_array(t, "xent dlogits", dz, num, n * k, TOL);
        double l2 = softmax_xent_cpu(n, k, z, labels, smooth, 1.0f, NULL, NULL);
        CHECK(t, l2 == loss, "loss without gradient differs: %.17g vs %.17g", l2, loss);
        free(a.z), free(dz), free(num);
    }
}

// Huge logits stay finite (max subtracted) and ties go to the first maximum.
static void test_loss_stable(tctx *t) {
    float z[2 * 3] = {1000.0f, 999.0f, -1000.0f, 7.0f, 7.0f, 7.0f};
    const int labels[2] = {1, 1};
    float dz[6];
    long hits = -1;
    double loss = softmax_xent_cpu(2, 3, z, labels, 0.0f, 1.0f, dz, &hits);
    const double want = (1.0 + log1p(exp(-1.0))) + log(3.0);  // image 0 + image 1
    CHECK_CLOSE(t, loss, want, 1e-6);
    CHECK(t, hits == 0, "hits %ld: a tie must go to the first maximum (class 0)", hits);
    for (int i = 0; i < 6; i++) CHECK(t, isfinite(dz[i]), "dz[%d] = %g", i, dz[i]);
    CHECK_CLOSE(t, dz[3], 1.0 / 3.0, 1e-6);
    CHECK_CLOSE(t, dz[4], 1.0 / 3.0 - 1.0, 1e-6);
}

// --- SGD --------------------------------------------------------------------

// Three steps against the header's formula, written out; pruned entries stay 0.
static void test_sgd(tctx *t) {
    const size_t n = 37;
    for (int cfg = 0; cfg < 4; cfg++) {
        const int nesterov = cfg & 1;
        const float lr = 0.05f, mo = cfg & 2 ? 0.9f : 0.0f, wd = cfg & 2 ? 5e-4f : 0.01f;
        rng g;
        rng_seed(&g, 71, cfg);
        float w[37], mom[37], mask[37], ew[37], em[37], grad[37];
        fill_uniform(&g, w, n, -1, 1), fill_uniform(&g, mom, n, -1, 1);
        for (size_t i = 0; i < n; i++) mask[i] = i % 3 == 1 ? 0.0f : 1.0f;
        memcpy(ew, w, sizeof w), memcpy(em, mom, sizeof mom);
        for (int step = 0; step < 3; step++) {
            fill_uniform(&g, grad, n, -1, 1);
            sgd_step_cpu(n, w, grad, mom, mask, lr, mo, wd, nesterov);
            for (size_t i = 0; i < n; i++) {
                double gi = ((double)grad[i] + wd * (double)ew[i]) * mask[i];
                em[i] = (float)((mo * (double)em[i] + gi) * mask[i]);
                double st = nesterov ? gi + mo * (double)em[i] : em[i];
                ew[i] = (float)(((double)ew[i] - lr * st) * mask[i]);
            }
            for (size_t i = 0; i < n; i++) {
                CHECK_CLOSE(t, w[i], ew[i], 1e-6);
                CHECK_CLOSE(t, mom[i], em[i], 1e-6);
                if (mask[i] == 0.0f)
                    CHECK(t, w[i] == 0.0f && mom[i] == 0.0f, "pruned %zu: w %g mom %g", i,
                          w[i], mom[i]);
            }
        }
    }
}

int main(void) {
    tctx t = {.suite = "test_kernels_cpu"};
    RUN(&t, test_bn_forward_train);
    RUN(&t, test_bn_forward_infer);
    RUN(&t, test_bn_backward);
    RUN(&t, test_elementwise);
    RUN(&t, test_pool);
    RUN(&t, test_pool_ties_and_dims);
    RUN(&t, test_gap);
    RUN(&t, test_linear);
    RUN(&t, test_loss);
    RUN(&t, test_loss_stable);
    RUN(&t, test_sgd);
    return check_finish(&t);
}
