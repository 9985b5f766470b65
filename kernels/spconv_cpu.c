// Direct sparse convolution on the CPU: the plain reference every GPU variant
// is checked against (kernels/spconv.h). One output plane per (image, output
// channel) pair, OpenMP over those pairs; each plane is summed in double in
// tiles of 16 pixels whose accumulators stay in registers over the whole row
// (every pixel adds the row's products in the row's order j, so the result is
// bit for bit that of a plain per-pixel loop), then bias, ReLU and the fused
// max pool read it.
#include "kernels/spconv.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// Pixels of an accumulator tile (at most 4 x 8).
#define SPCONV_TILE_PIX 32

// Four doubles and four floats (GCC vector extensions; SSE2 pairs by default).
typedef double spconv_v4d __attribute__((vector_size(32)));
typedef float spconv_v4f __attribute__((vector_size(16)));

// On x86-64 the tile loop is also built for AVX2 + FMA (x86-64-v3) and picked at
// run time; a fused multiply-add gives the same bits, the product being exact.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPCONV_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SPCONV_CLONES
#endif

// --- geometry ---------------------------------------------------------------

// Output plane size after the fused pool (P, Q when there is none).
void spconv_out_size(const spconv_desc *d, int *po, int *qo) {
    if (d->pool_k <= 0) {
        *po = d->P, *qo = d->Q;
        return;
    }
    *po = (d->P + 2 * d->pool_pad - d->pool_k) / d->pool_stride + 1;
    *qo = (d->Q + 2 * d->pool_pad - d->pool_k) / d->pool_stride + 1;
}

// Fills offsets (K, nnz_row) from column indices c*R*S + r*S + s.
void spconv_offsets(const spconv_desc *d, const int32_t *indices, int32_t *offsets) {
    const int hb = d->H + 2 * d->in_border, wb = d->W + 2 * d->in_border;
    const int sh = d->in_border - d->pad;
    const size_t n = (size_t)d->K * (size_t)d->nnz_row;
    for (size_t i = 0; i < n; i++) {
        const int col = indices[i];
        const int c = col / (d->R * d->S), r = (col / d->S) % d->R, s = col % d->S;
        offsets[i] = ((c * hb) + r + sh) * wb + s + sh;
    }
}

// --- forward ----------------------------------------------------------------

// Sums row k's entries, in order j, over a tile of tr x tq output pixels whose
// first input element is x0 (input row step rs, column step st) into
// accumulators held in registers, then stores them in a (row step Q). Per
// pixel the additions are those of a plain loop over j: the products of two
// floats are exact in double, so only their order matters, and it is kept.
// Inlined with constant sizes for the fast tiles, variable for the edges.
static inline __attribute__((always_inline)) void
spconv_tile(const float *x0, size_t rs, int st, const int32_t *off, const float *val, int nnz,
            int tr, int tq, double *a, int Q) {
    double s[SPCONV_TILE_PIX] = {0.0};
    for (int j = 0; j < nnz; j++) {
        const double v = val[j];
        const float *x = x0 + off[j];
#pragma GCC unroll 16
        for (int r = 0; r < tr; r++)
#pragma GCC unroll 16
            for (int t = 0; t < tq; t++) s[r * tq + t] += v * (double)x[r * rs + (size_t)t * st];
    }
    for (int r = 0; r < tr; r++)
        for (int t = 0; t < tq; t++) a[(size_t)r * Q + t] = s[r * tq + t];
}

// spconv_tile with 4-wide double vectors for stride st (1 or 2): tr rows of
// nv vectors (tr * nv <= 8), the same products added in the same order j per
// pixel. Stride 2 gathers the even elements one by one (no read past the last).
static inline __attribute__((always_inline)) void
spconv_vtile(const float *x0, size_t rs, int st, const int32_t *off, const float *val, int nnz,
             int tr, int nv, double *a, int Q) {
    spconv_v4d s[8] = {{0.0}};
    for (int j = 0; j < nnz; j++) {
        const double v = val[j];
        const spconv_v4d vv = {v, v, v, v};
        const float *x = x0 + off[j];
#pragma GCC unroll 8
        for (int r = 0; r < tr; r++)
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) {
                const float *y = x + r * rs + (size_t)4 * st * u;
                spconv_v4f f;
                if (st == 1) memcpy(&f, y, sizeof f);
                else f = (spconv_v4f){y[0], y[2], y[4], y[6]};
                s[r * nv + u] += vv * __builtin_convertvector(f, spconv_v4d);
            }
    }
    for (int r = 0; r < tr; r++)
        for (int u = 0; u < nv; u++) memcpy(a + (size_t)r * Q + 4 * u, &s[r * nv + u], sizeof *s);
}

// One tile of plane k at output (p, q), tr x tq pixels: vector fast paths for
// full 4x8 and 4x4 tiles at strides 1 and 2, constant-size scalar tiles for
// 2x2 planes (stride 1) and single pixels (linear layers), the scalar loop
// with variable sizes for the rest.
SPCONV_CLONES static void spconv_tile_at(const spconv_desc *d, const float *img, int k, int p,
                                         int q, int tr, int tq, double *acc) {
    const size_t wb = (size_t)d->W + 2 * d->in_border, st = (size_t)d->stride;
    const float *x0 = img + p * st * wb + q * st;
    const int32_t *off = d->offsets + (size_t)k * d->nnz_row;
    const float *val = d->values + (size_t)k * d->nnz_row;
    const int n = d->nnz_row, Q = d->Q;
    double *a = acc + (size_t)p * Q + q;
    if (st == 1 && tr == 4 && tq == 8) spconv_vtile(x0, wb, 1, off, val, n, 4, 2, a, Q);
    else if (st == 1 && tr == 4 && tq == 4) spconv_vtile(x0, wb, 1, off, val, n, 4, 1, a, Q);
    else if (st == 2 && tr == 4 && tq == 8) spconv_vtile(x0, 2 * wb, 2, off, val, n, 4, 2, a, Q);
    else if (st == 2 && tr == 4 && tq == 4) spconv_vtile(x0, 2 * wb, 2, off, val, n, 4, 1, a, Q);
    else if (st == 1 && tr == 2 && tq == 2) spconv_tile(x0, wb, 1, off, val, n, 2, 2, a, Q);
    else if (tr == 1 && tq == 1) spconv_tile(x0, wb, 1, off, val, n, 1, 1, a, Q);
    else spconv_tile(x0, st * wb, (int)st, off, val, n, tr, tq, a, Q);
}

// acc (P, Q) = conv of row k over one image, tile by tile (8 columns by 4
// rows, or 4 by 4 for planes narrower than 8), each pixel summed in double
// over the row's entries in order j.
static void spconv_plane(const spconv_desc *d, const float *img, int k, double *acc) {
    const int P = d->P, Q = d->Q, TQ = Q >= 8 ? 8 : 4, TR = 4;
    for (int p = 0; p < P; p += TR)
        for (int q = 0; q < Q; q += TQ)
            spconv_tile_at(d, img, k, p, q, P - p < TR ? P - p : TR, Q - q < TQ ? Q - q : TQ, acc);
}

// Conv value at pixel (p, q) of a summed plane: bias, ReLU applied.
static float spconv_out(const spconv_desc *d, const double *acc, int k, int p, int q) {
    float y = (float)acc[(size_t)p * d->Q + q] + (d->bias ? d->bias[k] : 0.0f);
    return d->relu && y < 0.0f ? 0.0f : y;
}

// Pooled value at (po, qo): the maximum over the window's valid conv pixels.
static float spconv_pooled(const spconv_desc *d, const double *acc, int k, int po, int qo) {
    const int p0 = po * d->pool_stride - d->pool_pad, q0 = qo * d->pool_stride - d->pool_pad;
    float m = -INFINITY;
    for (int a = 0; a < d->pool_k; a++)
        for (int b = 0; b < d->pool_k; b++) {
            const int p = p0 + a, q = q0 + b;
            if (p < 0 || p >= d->P || q < 0 || q >= d->Q) continue;
            const float y = spconv_out(d, acc, k, p, q);
            if (y > m) m = y;
        }
    return m == -INFINITY ? 0.0f : m;
}

// o (P, Q, row step wob) = relu(acc + bias) without a pool: spconv_out's
// operations row by row (the bias, 0.0f when none, added in float as there).
static void spconv_store(const spconv_desc *d, const double *acc, int k, float *o, int wob) {
    const float b = d->bias ? d->bias[k] : 0.0f;
    for (int p = 0; p < d->P; p++) {
        const double *a = acc + (size_t)p * d->Q;
        float *r = o + (size_t)p * wob;
        if (d->relu)
            for (int q = 0; q < d->Q; q++) {
                const float y = (float)a[q] + b;
                r[q] = y < 0.0f ? 0.0f : y;
            }
        else
            for (int q = 0; q < d->Q; q++) r[q] = (float)a[q] + b;
    }
}

// acc (P, Q) = conv of row k over image i of the bordered input arg (n, C, Hb, Wb).
static void spconv_plane_in(const spconv_desc *d, const void *arg, int i, int k, double *acc) {
    const size_t in_img = (size_t)d->C * (d->H + 2 * d->in_border) * (d->W + 2 * d->in_border);
    spconv_plane(d, (const float *)arg + (size_t)i * in_img, k, acc);
}

// out (n, K, Po + 2 ob, Qo + 2 ob) interior = pool(relu(conv(in) + bias)).
void spconv_forward_cpu(const spconv_desc *d, int n, const float *in, float *out) {
    spconv_planes_cpu(d, n, spconv_plane_in, in, out);
}

// out interior = pool(relu(sums + bias)) of every (image, channel) plane,
// the sums from fn, OpenMP over the planes.
void spconv_planes_cpu(const spconv_desc *d, int n, spconv_plane_fn fn, const void *arg, float *out) {
    int po, qo;
    spconv_out_size(d, &po, &qo);
    const int ob = d->out_border, hob = po + 2 * ob, wob = qo + 2 * ob;
    const long planes = (long)n * d->K;
#pragma omp parallel
    {
        double *acc = malloc(((size_t)d->P * d->Q + 1) * sizeof *acc);
#pragma omp for schedule(dynamic, 4)
        for (long pl = 0; pl < planes; pl++) {
            const int i = (int)(pl / d->K), k = (int)(pl % d->K);
            float *o = out + (size_t)pl * hob * wob;  // (Po + 2 ob, Qo + 2 ob)
            if (!acc) continue;                        // out of memory: plane left as it was
            fn(d, arg, i, k, acc);
            if (d->pool_k <= 0) {
                spconv_store(d, acc, k, o + (size_t)ob * wob + ob, wob);
                continue;
            }
            for (int p = 0; p < po; p++)
                for (int q = 0; q < qo; q++)
                    o[(size_t)(p + ob) * wob + q + ob] = spconv_pooled(d, acc, k, p, q);
        }
        free(acc);
    }
}
