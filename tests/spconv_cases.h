// Random sparse conv layers for the spconv tests (tests/test_spconv.c and
// tests/gpu_test_spconv.c): a shape, a density, CSR rows padded with
// explicit zeros to the longest row (entries shuffled within each row; row
// lengths equal in expectation, or skewed like real pruned masks),
// offsets from spconv_offsets, optional fp16 rounding or a 4-bit codebook,
// bordered random inputs, and an independent dense reference in double.
// Header-only (static inline) so each test binary stays self-contained.
#ifndef SC_TESTS_SPCONV_CASES_H
#define SC_TESTS_SPCONV_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/spconv.h"
#include "runtime/rng.h"

// A layer shape and its sparsity.
typedef struct {
    const char *name;
    int K, C, H, W, R, S, stride, pad, ib, ob;
    int pk, ps, pp;      // max pool after the ReLU (pk 0: none)
    int relu, bias;
    double density;      // fraction of weights kept
    int empty_row;       // 1: row K/2 has no non-zero at all
    double skew;         // 0: every row keeps weights with the same probability; > 0:
                         // row k with density * w_k, w_k log-normal (sigma skew,
                         // mean 1), so rows differ in length like real pruned masks
} spc_shape;

// Value types of a case: fp32, fp16 (values and inputs rounded), codebook.
enum { SPC_FP32 = 0, SPC_FP16 = 1, SPC_CB4 = 2 };

// A generated layer: the desc points into the arrays below.
typedef struct {
    spconv_desc d;
    int vt, po, qo;
    int32_t *idx, *off;  // (K, nnz_row) columns c*R*S + r*S + s and offsets
    float *val, *bias;   // (K, nnz_row) decoded weights, (K) or NULL
    float *w;            // (K, C, R, S) dense weights
    uint8_t *codes;      // SPC_CB4: (K*nnz_row+1)/2 packed 4-bit codes, else NULL
    float cb[16];        // SPC_CB4 codebook (fp16-exact values)
    float *scale;        // SPC_CB4 (K) row scale, else NULL
} spc_layer;

// --- helpers ------------------------------------------------------------------

// x rounded to the nearest fp16 value.
static inline float spc_half(float x) { return (float)(_Float16)x; }

// Raw fp16 bits of x.
static inline uint16_t spc_half_bits(float x) {
    _Float16 h = (_Float16)x;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

// Float from raw fp16 bits.
static inline float spc_half_float(uint16_t b) {
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}

// Uniform value in [lo, hi).
static inline float spc_uniform(rng *r, float lo, float hi) {
    return lo + (hi - lo) * rng_uniform(r);
}

// Fills the desc's geometry from a shape.
static inline void spc_geometry(const spc_shape *s, spconv_desc *d) {
    memset(d, 0, sizeof *d);
    d->K = s->K, d->C = s->C, d->R = s->R, d->S = s->S;
    d->stride = s->stride, d->pad = s->pad, d->H = s->H, d->W = s->W;
    d->P = (s->H + 2 * s->pad - s->R) / s->stride + 1;
    d->Q = (s->W + 2 * s->pad - s->S) / s->stride + 1;
    d->in_border = s->ib, d->out_border = s->ob, d->relu = s->relu;
    d->pool_k = s->pk, d->pool_stride = s->ps, d->pool_pad = s->pp;
}

// --- layers -------------------------------------------------------------------

// Keeps each weight of row k with probability density; returns the kept count.
static inline int spc_row_mask(rng *r, const spc_shape *s, int k, double density,
                               uint8_t *keep) {
    const int crs = s->C * s->R * s->S;
    int cnt = 0;
    for (int j = 0; j < crs; j++) {
        keep[j] = !(s->empty_row && k == s->K / 2) && rng_uniform(r) < density;
        cnt += keep[j];
    }
    return cnt;
}

// Per-row densities (K): the shape's density, or with skew > 0 the density
// times log-normal factors of mean 1 (capped at 1).
static inline void spc_row_density(rng *r, const spc_shape *s, double *dens) {
    double sum = 0.0;
    for (int k = 0; k < s->K; k++) {
        dens[k] = s->skew > 0 ? exp(s->skew * rng_normal(r)) : 1.0;
        sum += dens[k];
    }
    for (int k = 0; k < s->K; k++) {
        const double v = s->density * dens[k] * s->K / sum;
        dens[k] = v < 1.0 ? v : 1.0;
    }
}

// Value of a kept weight (never zero) for the case's value type; sets *code.
static inline float spc_value(rng *r, spc_layer *L, int k, int *code) {
    if (L->vt == SPC_CB4) {
        *code = (int)rng_below(r, 16);
        return L->cb[*code] * L->scale[k];
    }
    float v = spc_uniform(r, 0.05f, 1.0f) * (rng_below(r, 2) ? 1.0f : -1.0f);
    *code = 0;
    return L->vt == SPC_FP16 ? spc_half(v) : v;
}

// Stores packed 4-bit code c of entry e.
static inline void spc_put_code(uint8_t *codes, size_t e, int c) {
    codes[e / 2] = (uint8_t)((codes[e / 2] & (e & 1 ? 0x0f : 0xf0)) | (c << (e & 1 ? 4 : 0)));
}

// Fills row k: kept weights, then explicit zeros on unused columns, shuffled.
static inline void spc_row_fill(rng *r, spc_layer *L, int k, const uint8_t *keep, int crs) {
    const int nnz = L->d.nnz_row;
    int *cols = malloc((size_t)(crs ? crs : 1) * sizeof *cols), n = 0, z = 0;
    for (int j = 0; j < crs; j++)
        if (keep[j]) cols[n++] = j;
    for (int j = 0; j < crs && n < nnz; j++)
        if (!keep[j] && rng_uniform(r) < 0.5f) cols[n++] = j, z++;
    for (int j = 0; j < crs && n < nnz; j++) {
        int used = keep[j];
        for (int t = 0; t < n && !used; t++) used = cols[t] == j;
        if (!used) cols[n++] = j, z++;
    }
    rng_shuffle(r, cols, n);
    for (int t = 0; t < nnz; t++) {
        const size_t e = (size_t)k * nnz + t;
        int code = (int)rng_below(r, 16);
        const float v = keep[cols[t]] ? spc_value(r, L, k, &code) : 0.0f;
        L->idx[e] = cols[t], L->val[e] = v;
        L->w[(size_t)k * crs + cols[t]] = v;
        if (L->codes) spc_put_code(L->codes, e, code);
    }
    free(cols);
}

// Codebook (fp16-exact, one entry exactly zero) and row scales of a SPC_CB4 case.
static inline void spc_codebook(rng *r, spc_layer *L) {
    for (int i = 0; i < 16; i++) L->cb[i] = spc_half(spc_uniform(r, -1.0f, 1.0f));
    L->cb[5] = 0.0f;
    L->scale = malloc((size_t)L->d.K * sizeof *L->scale);
    for (int k = 0; k < L->d.K; k++) L->scale[k] = spc_uniform(r, 0.5f, 1.5f);
}

// Generates a layer of shape s with value type vt from seed.
static inline void spc_layer_make(spc_layer *L, const spc_shape *s, int vt, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 17);
    memset(L, 0, sizeof *L);
    L->vt = vt;
    spc_geometry(s, &L->d);
    spconv_out_size(&L->d, &L->po, &L->qo);
    const int K = s->K, crs = s->C * s->R * s->S;
    uint8_t *keep = malloc((size_t)K * crs + 1);
    double *dens = malloc((size_t)K * sizeof *dens);
    int nnz = 0;
    spc_row_density(&r, s, dens);
    for (int k = 0; k < K; k++) {
        const int c = spc_row_mask(&r, s, k, dens[k], keep + (size_t)k * crs);
        nnz = c > nnz ? c : nnz;
    }
    free(dens);
    L->d.nnz_row = nnz;
    const size_t n = (size_t)K * nnz;
    L->idx = malloc((n ? n : 1) * sizeof *L->idx), L->off = malloc((n ? n : 1) * sizeof *L->off);
    L->val = malloc((n ? n : 1) * sizeof *L->val);
    L->w = calloc((size_t)K * crs + 1, sizeof *L->w);
    if (vt == SPC_CB4) L->codes = calloc(n / 2 + 1, 1), spc_codebook(&r, L);
    for (int k = 0; k < K; k++) spc_row_fill(&r, L, k, keep + (size_t)k * crs, crs);
    if (s->bias) {
        L->bias = malloc((size_t)K * sizeof *L->bias);
        for (int k = 0; k < K; k++) L->bias[k] = spc_uniform(&r, -0.5f, 0.5f);
    }
    spconv_offsets(&L->d, L->idx, L->off);
    L->d.offsets = L->off, L->d.values = L->val, L->d.bias = L->bias;
    free(keep);
}

// Frees a layer.
static inline void spc_layer_free(spc_layer *L) {
    free(L->idx), free(L->off), free(L->val), free(L->bias), free(L->w), free(L->codes);
    free(L->scale);
}

// --- activations --------------------------------------------------------------

// Elements of n bordered input images / output images.
static inline size_t spc_in_elems(const spconv_desc *d, int n) {
    return (size_t)n * d->C * (d->H + 2 * d->in_border) * (d->W + 2 * d->in_border);
}
static inline size_t spc_out_elems(const spc_layer *L, int n) {
    const int ob = L->d.out_border;
    return (size_t)n * L->d.K * (L->po + 2 * ob) * (L->qo + 2 * ob);
}

// Random bordered input (zeros in the border; interior in [-1, 1), fp16-rounded
// when half is set).
static inline float *spc_input(const spconv_desc *d, int n, int half, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 23);
    const int ib = d->in_border, hb = d->H + 2 * ib, wb = d->W + 2 * ib;
    float *x = calloc(spc_in_elems(d, n) + 1, sizeof *x);
    for (size_t pl = 0; pl < (size_t)n * d->C; pl++)
        for (int y = 0; y < d->H; y++)
            for (int q = 0; q < d->W; q++) {
                const float v = spc_uniform(&r, -1.0f, 1.0f);
                x[(pl * hb + y + ib) * wb + q + ib] = half ? spc_half(v) : v;
            }
    return x;
}

// True when (y, x) of a plane of height h and width w with border b is a border element.
static inline int spc_is_border(int y, int x, int h, int w, int b) {
    return y < b || x < b || y >= h - b || x >= w - b;
}

// --- dense reference ----------------------------------------------------------

// out (n, K, Po, Qo) = pool(relu(conv(x, w) + bias)) in double from the dense
// weights; the input is read from the interior of the bordered x only.
static inline void spc_dense_ref(const spc_layer *L, int n, const float *x, double *out) {
    const spconv_desc *d = &L->d;
    const int ib = d->in_border, hb = d->H + 2 * ib, wb = d->W + 2 * ib;
    double *conv = malloc((size_t)d->P * d->Q * sizeof *conv);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < d->K; k++) {
            for (int p = 0; p < d->P; p++)
                for (int q = 0; q < d->Q; q++) {
                    double s = L->bias ? L->bias[k] : 0.0;
                    for (int c = 0; c < d->C; c++)
                        for (int a = 0; a < d->R; a++)
                            for (int b = 0; b < d->S; b++) {
                                const int y = p * d->stride - d->pad + a;
                                const int z = q * d->stride - d->pad + b;
                                if (y < 0 || y >= d->H || z < 0 || z >= d->W) continue;
                                s += (double)L->w[((size_t)(k * d->C + c) * d->R + a) * d->S + b] *
                                     x[(((size_t)i * d->C + c) * hb + y + ib) * wb + z + ib];
                            }
                    conv[p * d->Q + q] = d->relu && s < 0 ? 0.0 : s;
                }
            double *o = out + ((size_t)i * d->K + k) * L->po * L->qo;
            for (int p = 0; p < L->po; p++)
                for (int q = 0; q < L->qo; q++) {
                    if (!d->pool_k) {
                        o[p * L->qo + q] = conv[p * d->Q + q];
                        continue;
                    }
                    double m = -INFINITY;
                    for (int a = 0; a < d->pool_k; a++)
                        for (int b = 0; b < d->pool_k; b++) {
                            const int y = p * d->pool_stride - d->pool_pad + a;
                            const int z = q * d->pool_stride - d->pool_pad + b;
                            if (y >= 0 && y < d->P && z >= 0 && z < d->Q && conv[y * d->Q + z] > m)
                                m = conv[y * d->Q + z];
                        }
                    o[p * L->qo + q] = m;
                }
        }
    free(conv);
}

#endif
