// Helpers shared by the test binaries: poisoned buffers with guard zones,
// seeded random fills, float-vs-double and relative-error comparisons,
// finite-difference gradients, random executor batches and nets, and the GPU
// skip check. Header-only (static inline) so every tests/test_*.c and
// tests/gpu_test_*.c stays one self-contained binary.
#ifndef SC_TESTS_TESTUTIL_H
#define SC_TESTS_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/check.h"

#define GUARD 16  // poisoned floats after every buffer from alloc_poisoned

// --- poisoned buffers -------------------------------------------------------

// Bit pattern written into outputs and guard zones before a kernel runs.
static inline float poison_value(void) {
    uint32_t bits = 0x7fc0deadu;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// Allocates n floats plus a guard zone, all poisoned.
static inline float *alloc_poisoned(size_t n) {
    float *p = malloc((n + GUARD) * sizeof *p);
    const float v = poison_value();
    for (size_t i = 0; i < n + GUARD; i++) p[i] = v;
    return p;
}

// True when the guard zone after p[n] is untouched.
static inline int guard_ok(const float *p, size_t n) {
    const float v = poison_value();
    for (int i = 0; i < GUARD; i++)
        if (memcmp(p + n + i, &v, sizeof v) != 0) return 0;
    return 1;
}

// --- random data and comparisons --------------------------------------------

// Uniform floats in [lo, hi), one rng_uniform draw each.
static inline void fill_uniform(rng *r, float *p, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform(r);
}

// Double copy of a float array (caller frees).
static inline double *to_double(const float *p, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = p[i];
    return d;
}

// Checks got (float) against want (double) elementwise with
// |got - want| <= tol * max(1, |want|); reports the worst element once.
static inline void check_values(tctx *t, const char *what, const float *got,
                                const double *want, size_t n, double tol) {
    size_t worst = 0;
    double werr = -1.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (isnan(e)) e = INFINITY;  // NaN (unwritten) counts as the worst
        if (e > werr) werr = e, worst = i;
    }
    CHECK(t, n == 0 || werr <= tol, "%s[%zu] = %.9g, want %.9g (rel err %.3g, tol %g)", what,
          worst, (double)got[worst], want[worst], werr, tol);
}

// check_values plus the guard zone after got[n] (got from alloc_poisoned).
static inline void check_array(tctx *t, const char *what, const float *got, const double *want,
                               size_t n, double tol) {
    check_values(t, what, got, want, n, tol);
    CHECK(t, guard_ok(got, n), "%s: write past the end", what);
}

// max |a - b| / max |b| over n values; infinite when a holds a NaN or b is
// all zero but a is not.
static inline double relerr(size_t n, const float *a, const float *b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != a[i]) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        num = d > num ? d : num;
        den = fabs(b[i]) > den ? fabs(b[i]) : den;
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
}

// A scalar function of the double arrays held in ctx.
typedef double (*loss_fn)(void *ctx);

// Central-difference gradient (step h) of f w.r.t. v[0..n) (v lives in f's
// context); caller frees.
static inline double *fd_grad(loss_fn f, void *ctx, double *v, size_t n, double h) {
    double *g = malloc((n ? n : 1) * sizeof *g);
    for (size_t i = 0; i < n; i++) {
        const double keep = v[i];
        v[i] = keep + h;
        const double lp = f(ctx);
        v[i] = keep - h;
        const double lm = f(ctx);
        v[i] = keep;
        g[i] = (lp - lm) / (2.0 * h);
    }
    return g;
}

// --- executor batches and nets ----------------------------------------------

// One batch of random images, labels and augmentation offsets.
typedef struct {
    uint8_t *img, *flip;
    int *labels;
    int8_t *dx, *dy;
    exec_batch b;
} tbatch;

// Fills a batch of n images (3, h, w) from rng stream (seed, stream): pixels,
// then per image label, dx, dy in [-shift, shift] and flip; augment = 0
// passes NULL crop/flip in tb->b (the draws are made all the same).
static inline void tbatch_make(tbatch *tb, int n, int h, int w, int classes, uint64_t seed,
                               uint64_t stream, int shift, int augment) {
    rng g;
    rng_seed(&g, seed, stream);
    size_t npix = (size_t)n * 3 * h * w;
    tb->img = malloc(npix), tb->flip = malloc(n), tb->labels = malloc(n * sizeof(int));
    tb->dx = malloc(n), tb->dy = malloc(n);
    for (size_t i = 0; i < npix; i++) tb->img[i] = (uint8_t)rng_below(&g, 256);
    for (int i = 0; i < n; i++) {
        tb->labels[i] = (int)rng_below(&g, classes);
        tb->dx[i] = (int8_t)((int)rng_below(&g, 2 * shift + 1) - shift);
        tb->dy[i] = (int8_t)((int)rng_below(&g, 2 * shift + 1) - shift);
        tb->flip[i] = (uint8_t)rng_below(&g, 2);
    }
    tb->b = (exec_batch){n, tb->img, tb->labels, augment ? tb->dx : NULL,
                         augment ? tb->dy : NULL, augment ? tb->flip : NULL, NULL};
}

// Frees a batch.
static inline void tbatch_free(tbatch *tb) {
    free(tb->img), free(tb->flip), free(tb->labels), free(tb->dx), free(tb->dy);
}

// Seeds a net's weights (rng stream 3) and randomises gammas to [0.5, 1.5)
// and betas (and conv/linear biases when bias is set) to [-0.5, 0.5), so
// their gradients are not trivial.
static inline void tnet_randomize(net *nt, uint64_t seed, int bias) {
    rng g;
    rng_seed(&g, seed, 3);
    net_init_weights(nt, &g);
    for (int k = 0; k < nt->ntensors; k++) {
        const ptensor *p = &nt->tensors[k];
        float *d = net_tensor_data(nt, k);
        for (size_t i = 0; i < p->count; i++) {
            if (p->kind == PT_GAMMA) d[i] = 0.5f + rng_uniform(&g);
            if (p->kind == PT_BETA || (bias && p->kind == PT_BIAS)) d[i] = rng_uniform(&g) - 0.5f;
        }
    }
}

// True when a GPU is usable; else marks the test skipped.
static inline int gpu_here(tctx *t) {
    sc_err why = {{0}};
    if (exec_gpu_available(&why)) return 1;
    SKIP(t, "%s", why.msg);
    return 0;
}

#endif
