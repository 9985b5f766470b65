// Random block-sparse conv layers for the bsconv tests (tests/test_bsconv_cpu.c
// and tests/gpu_test_bsconv.c): a shape, a block, an exact block sparsity
// (blocks kept chosen uniformly, block columns listed in random order within
// a row, optionally one empty block row; optionally single weights beside the
// blocks, a hybrid layer's remainder), random NHWC inputs, and an
// independent dense direct convolution in double over the (K, R, S, C)
// weights the BSR describes. Header-only (static inline) so each test binary
// stays self-contained.
#ifndef SC_TESTS_BSCONV_CASES_H
#define SC_TESTS_BSCONV_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv.h"
#include "runtime/rng.h"

// A test case: the conv, its block, the fraction of blocks pruned, epilogue.
typedef struct {
    int n, C, H, W, K, R, S, stride, pad;
    int kb, cb;
    double sparsity;  // fraction of the K/kb x R*S*C/cb blocks that are zero
    int empty_row;    // 1: block row (K/kb)/2 has no block
    int bias, residual, relu;
    int pool;         // 0: none; 2 or 4: max pool after the ReLU (no residual)
} bsc_case;

// A generated layer and its tensors (host floats).
typedef struct {
    bsconv_shape s;
    bsconv_bsr w;
    int32_t *indptr, *indices;
    float *data;      // (nblocks, kb, cb)
    float *bias;      // (K) or NULL
    float *x, *z;     // (n, H, W, C); (n, Po, Qo, K) or NULL
    int P, Q;         // conv output plane
    int Po, Qo;       // y plane (after the pool)
    size_t nx, ny;    // element counts of x and y
    int nblocks;
    int32_t *rem_indptr, *rem_indices;  // the remainder (hybrid layers), else NULL
    float *rem_data;
} bsc_layer;

// One line naming a case (for the test output).
static inline void bsc_case_name(const bsc_case *c, char *buf, size_t len) {
    snprintf(buf, len, "n%d C%d %dx%d K%d %dx%d s%d p%d blk%dx%d sp%.2f%s%s%s%s%s", c->n, c->C, c->H,
             c->W, c->K, c->R, c->S, c->stride, c->pad, c->kb, c->cb, c->sparsity,
             c->empty_row ? " empty-row" : "", c->bias ? " bias" : "",
             c->residual ? " res" : "", c->relu ? " relu" : "",
             c->pool == 2 ? " pool2" : c->pool == 4 ? " pool4" : "");
}

// Uniform float in [lo, hi).
static inline float bsc_unif(rng *r, float lo, float hi) { return lo + (hi - lo) * rng_uniform(r); }

// Random non-zero value of magnitude in [0.1, 1).
static inline float bsc_nonzero(rng *r) {
    return bsc_unif(r, 0.1f, 1.0f) * (rng_below(r, 2) ? 1.0f : -1.0f);
}

// Chooses the kept blocks (keep: nbr*ncb bytes) for the case's exact sparsity.
static inline void bsc_choose_blocks(rng *r, const bsc_case *c, int nbr, int ncb, uint8_t *keep) {
    const int total = nbr * ncb;
    int *ord = malloc((size_t)total * sizeof *ord);
    for (int i = 0; i < total; i++) ord[i] = i;
    rng_shuffle(r, ord, total);
    const int nkeep = (int)lround((1.0 - c->sparsity) * total);
    memset(keep, 0, (size_t)total);
    for (int i = 0; i < nkeep; i++) keep[ord[i]] = 1;
    if (c->empty_row) memset(keep + (size_t)(nbr / 2) * ncb, 0, (size_t)ncb);
    free(ord);
}

// Builds the BSR arrays from the kept blocks, columns shuffled within each row.
static inline void bsc_build_bsr(rng *r, bsc_layer *L, int nbr, int ncb, const uint8_t *keep) {
    const int kb = L->w.kb, cb = L->w.cb;
    int nb = 0;
    for (int i = 0; i < nbr * ncb; i++) nb += keep[i];
    L->nblocks = nb;
    L->indptr = malloc((size_t)(nbr + 1) * sizeof *L->indptr);
    L->indices = malloc((size_t)(nb ? nb : 1) * sizeof *L->indices);
    L->data = malloc((size_t)(nb ? nb : 1) * kb * cb * sizeof *L->data);
    L->indptr[0] = 0;
    for (int i = 0, b = 0; i < nbr; i++) {
        const int b0 = b;
        for (int j = 0; j < ncb; j++)
            if (keep[(size_t)i * ncb + j]) L->indices[b++] = j;
        rng_shuffle(r, L->indices + b0, b - b0);
        L->indptr[i + 1] = b;
    }
    for (size_t e = 0; e < (size_t)nb * kb * cb; e++) L->data[e] = bsc_nonzero(r);
    L->w.indptr = L->indptr, L->w.indices = L->indices, L->w.data = L->data;
}

// Generates a layer for case c (seeded); inputs uniform in [-1, 1).
static inline void bsc_make(const bsc_case *c, uint64_t seed, bsc_layer *L) {
    memset(L, 0, sizeof *L);
    rng r;
    rng_seed(&r, seed, 7);
    L->s = (bsconv_shape){c->n, c->C, c->H, c->W, c->K, c->R, c->S, c->stride, c->pad, c->relu,
                          c->pool};
    L->w.kb = c->kb, L->w.cb = c->cb;
    bsconv_out_size(&L->s, &L->P, &L->Q);
    bsconv_y_size(&L->s, &L->Po, &L->Qo);
    const int nbr = c->K / c->kb, ncb = c->R * c->S * c->C / c->cb;
    uint8_t *keep = malloc((size_t)nbr * ncb);
    bsc_choose_blocks(&r, c, nbr, ncb, keep);
    bsc_build_bsr(&r, L, nbr, ncb, keep);
    free(keep);
    L->nx = (size_t)c->n * c->H * c->W * c->C;
    L->ny = (size_t)c->n * L->Po * L->Qo * c->K;
    L->x = malloc(L->nx * sizeof *L->x);
    for (size_t i = 0; i < L->nx; i++) L->x[i] = bsc_unif(&r, -1.0f, 1.0f);
    if (c->bias) {
        L->bias = malloc((size_t)c->K * sizeof *L->bias);
        for (int k = 0; k < c->K; k++) L->bias[k] = bsc_unif(&r, -0.5f, 0.5f);
    }
    if (c->residual && c->pool < 2) {
        L->z = malloc(L->ny * sizeof *L->z);
        for (size_t i = 0; i < L->ny; i++) L->z[i] = bsc_unif(&r, -1.0f, 1.0f);
    }
}

// 1 when KRSC column col of output channel k lies in one of L's kept blocks.
static inline int bsc_in_block(const bsc_layer *L, int k, int col) {
    const int i = k / L->w.kb;
    for (int b = L->indptr[i]; b < L->indptr[i + 1]; b++)
        if (L->indices[b] == col / L->w.cb) return 1;
    return 0;
}

// Gives L a remainder (a hybrid layer): each weight outside the kept blocks
// is kept with probability density, value non-zero (seeded apart from the
// blocks and inputs, so the layer is bsc_make's plus single weights).
static inline void bsc_add_rem(bsc_layer *L, double density, uint64_t seed) {
    const bsconv_shape *s = &L->s;
    const int cols = s->R * s->S * s->C;
    rng r;
    rng_seed(&r, seed, 11);
    L->rem_indptr = malloc((size_t)(s->K + 1) * sizeof *L->rem_indptr);
    L->rem_indices = malloc(((size_t)s->K * cols + 1) * sizeof *L->rem_indices);
    L->rem_data = malloc(((size_t)s->K * cols + 1) * sizeof *L->rem_data);
    int n = 0;
    L->rem_indptr[0] = 0;
    for (int k = 0; k < s->K; k++) {
        for (int col = 0; col < cols; col++)
            if (rng_uniform(&r) < density && !bsc_in_block(L, k, col))
                L->rem_indices[n] = col, L->rem_data[n++] = bsc_nonzero(&r);
        L->rem_indptr[k + 1] = n;
    }
    L->w.rem_indptr = L->rem_indptr, L->w.rem_indices = L->rem_indices, L->w.rem_data = L->rem_data;
}

// Frees a layer's arrays.
static inline void bsc_free(bsc_layer *L) {
    free(L->indptr), free(L->indices), free(L->data), free(L->bias), free(L->x), free(L->z);
    free(L->rem_indptr), free(L->rem_indices), free(L->rem_data);
    memset(L, 0, sizeof *L);
}

// Dense (K, R, S, C) weights of the layer's BSR and remainder (caller frees).
static inline float *bsc_dense_weights(const bsc_layer *L) {
    const bsconv_shape *s = &L->s;
    const size_t nw = (size_t)s->K * s->R * s->S * s->C;
    float *wd = calloc(nw ? nw : 1, sizeof *wd);
    for (int i = 0; i < s->K / L->w.kb; i++)
        for (int b = L->indptr[i]; b < L->indptr[i + 1]; b++)
            for (int kk = 0; kk < L->w.kb; kk++)
                for (int c = 0; c < L->w.cb; c++)
                    wd[(size_t)(i * L->w.kb + kk) * s->R * s->S * s->C +
                       (size_t)L->indices[b] * L->w.cb + c] =
                        L->data[((size_t)b * L->w.kb + kk) * L->w.cb + c];
    for (int k = 0; L->rem_indptr && k < s->K; k++)
        for (int j = L->rem_indptr[k]; j < L->rem_indptr[k + 1]; j++)
            wd[(size_t)k * s->R * s->S * s->C + (size_t)L->rem_indices[j]] += L->rem_data[j];
    return wd;
}

// Dense direct conv in double at conv pixel (im, p, q), channel k, y
// element o: act(conv(x, wd) + bias [+ z]); with absval, every term is taken
// by magnitude and no ReLU is applied (the scale of the sum, for tolerances).
static inline double bsc_dense_at(const bsc_layer *L, const float *wd, int absval, int im, int p,
                                  int q, int k, size_t o) {
    const bsconv_shape *s = &L->s;
    double acc = L->bias ? (absval ? fabs(L->bias[k]) : L->bias[k]) : 0.0;
    for (int r = 0; r < s->R; r++)
        for (int t = 0; t < s->S; t++) {
            const int h = p * s->stride - s->pad + r, w = q * s->stride - s->pad + t;
            if (h < 0 || h >= s->H || w < 0 || w >= s->W) continue;
            const float *xp = L->x + (((size_t)im * s->H + h) * s->W + w) * s->C;
            const float *wp = wd + (((size_t)k * s->R + r) * s->S + t) * s->C;
            for (int c = 0; c < s->C; c++)
                acc += absval ? fabs((double)wp[c] * xp[c]) : (double)wp[c] * xp[c];
        }
    if (L->z) acc += absval ? fabs(L->z[o]) : L->z[o];
    return !absval && s->relu && acc < 0.0 ? 0.0 : acc;
}

// y = pool(act(conv(x, wd) + bias [+ z])) in double, NHWC/KRSC, by
// bsc_dense_at (absval: the largest scale over each pool window).
static inline void bsc_dense_conv(const bsc_layer *L, const float *wd, int absval, double *y) {
    const bsconv_shape *s = &L->s;
    const int win = s->pool > 1 ? s->pool : 1;
    for (int im = 0; im < s->n; im++)
        for (int p = 0; p < L->Po; p++)
            for (int q = 0; q < L->Qo; q++)
                for (int k = 0; k < s->K; k++) {
                    const size_t o = (((size_t)im * L->Po + p) * L->Qo + q) * s->K + k;
                    double m = -INFINITY;
                    for (int a = 0; a < win * win; a++)
                        m = fmax(m, bsc_dense_at(L, wd, absval, im, p * win + a / win,
                                                 q * win + a % win, k, o));
                    y[o] = m;
                }
}

// Worst |got - want| / (tol_rel * |want| + tol_abs * scale) over n elements
// (NaN counts as infinite); *at gets its index. <= 1 passes.
static inline double bsc_worst(const float *got, const double *want, const double *scale,
                               size_t n, double tol_rel, double tol_abs, size_t *at) {
    double worst = 0.0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        const double bound = tol_rel * fabs(want[i]) + tol_abs * scale[i] + 1e-30;
        double e = fabs((double)got[i] - want[i]) / bound;
        if (isnan(e)) e = INFINITY;
        if (e > worst) worst = e, *at = i;
    }
    return worst;
}

// The GPU test's shapes and blocks (tests/gpu_test_bsconv.c): odd n, H, W;
// K and C multiples of the block but not of 64, C = 3 and 12 (scalar
// gathers), kb < 8 (merged rows) and kb > 64 (sliced rows), batch 1, 2x2 and
// 4x4 pools; each at the sparsities below with the epilogue varied.
#define BSC_GPU_SHAPES 13
#define BSC_GPU_SPARSITIES 5

// Case (shape si, sparsity index pi) of the GPU test.
static inline bsc_case bsc_gpu_case(int si, int pi) {
    static const bsc_case SHAPES[BSC_GPU_SHAPES] = {
        // n  C   H   W   K   R  S st pad kb cb
        {3, 64, 9, 9, 48, 3, 3, 1, 1, 16, 8, 0.0, 0, 0, 0, 0, 0},
        {2, 32, 11, 17, 80, 3, 3, 2, 1, 8, 1, 0.0, 0, 0, 0, 0, 0},   // stride 2, 8x1, 9 output columns
        {5, 96, 13, 13, 16, 1, 1, 1, 0, 16, 1, 0.0, 0, 0, 0, 0, 0},   // 1x1, C = 3 x 32
        {3, 24, 10, 9, 40, 1, 1, 2, 0, 8, 8, 0.0, 0, 0, 0, 0, 0},
        {1, 16, 7, 7, 96, 3, 3, 1, 0, 32, 8, 0.0, 0, 0, 0, 0, 0},
        {2, 3, 15, 15, 16, 3, 3, 1, 1, 8, 1, 0.0, 0, 0, 0, 0, 0},    // first layer: C = 3
        {2, 12, 6, 5, 20, 3, 3, 1, 1, 4, 4, 0.0, 0, 0, 0, 0, 0},     // kb < 8, C and K not multiples of 8
        {1, 16, 6, 6, 144, 3, 3, 1, 1, 72, 8, 0.0, 0, 0, 0, 0, 0},   // kb > 64: sliced block rows
        {1, 64, 8, 8, 64, 3, 3, 1, 1, 16, 8, 0.0, 0, 0, 0, 0, 0},    // batch 1
        {3, 40, 9, 9, 24, 3, 3, 2, 1, 8, 8, 0.0, 0, 0, 0, 0, 0},
        {2, 32, 9, 11, 32, 3, 3, 1, 1, 16, 8, 0.0, 0, 0, 0, 0, 2},   // 2x2 max pool, odd plane
        {1, 16, 9, 9, 24, 1, 1, 1, 0, 8, 1, 0.0, 0, 0, 0, 0, 4},     // 4x4 max pool
        {5, 128, 2, 3, 32, 3, 3, 1, 1, 16, 8, 0.0, 0, 0, 0, 0, 2},   // a small plane (vgg16's last), 2x2 pool
    };
    static const double SPARSITY[BSC_GPU_SPARSITIES] = {0.0, 0.5, 0.95, 0.99, 1.0};
    bsc_case c = SHAPES[si];
    c.sparsity = SPARSITY[pi];
    c.empty_row = pi == 1 || pi == 2;
    c.bias = (si + pi) % 3 != 0;
    c.residual = c.pool < 2 && (si + pi) % 2;
    c.relu = (si / 2 + pi) % 2;
    return c;
}

#endif
