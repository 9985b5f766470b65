// Activation-sparse convolution on the CPU (kernels/actconv.h): the plain
// reference the CUDA version is checked against. The input's non-zeros are
// listed per (image, channel, row); then per (image, output channel) plane
// every non-zero weight (c, r, s) meets the listed non-zeros of the input
// rows its windows read, and each product is added, in double, to the conv
// pixel it belongs to. Bias, ReLU and the fused max pool are
// kernels/spconv_cpu.c's (spconv_planes_cpu).
#include "kernels/actconv.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// --- layer checks -----------------------------------------------------------

// Checks the geometry and the limits of the packed indices.
int actconv_check(const spconv_desc *d, sc_err *err) {
    if (d->K < 1 || d->C < 1 || d->R < 1 || d->S < 1 || d->H < 1 || d->W < 1 || d->stride < 1 ||
        d->pad < 0 || d->nnz_row < 0)
        return sc_fail(err, "actconv: bad layer sizes (K %d C %d %dx%d on %dx%d, stride %d, pad %d)",
                       d->K, d->C, d->R, d->S, d->H, d->W, d->stride, d->pad);
    if (d->P != (d->H + 2 * d->pad - d->R) / d->stride + 1 || d->P < 1 ||
        d->Q != (d->W + 2 * d->pad - d->S) / d->stride + 1 || d->Q < 1)
        return sc_fail(err, "actconv: output %dx%d does not match the geometry", d->P, d->Q);
    if (d->in_border < d->pad || d->out_border < 0)
        return sc_fail(err, "actconv: input border %d below the padding %d", d->in_border, d->pad);
    if (d->H > 65535 || d->W > 65535 || d->R > 255 || d->S > 255)
        return sc_fail(err, "actconv: plane %dx%d or kernel %dx%d too large", d->H, d->W, d->R, d->S);
    if (d->pool_k > 0 && (d->pool_stride < 1 || d->pool_pad < 0 || d->pool_pad >= d->pool_k ||
                          d->P + 2 * d->pool_pad < d->pool_k || d->Q + 2 * d->pool_pad < d->pool_k))
        return sc_fail(err, "actconv: bad pool (%d, stride %d, pad %d)", d->pool_k, d->pool_stride,
                       d->pool_pad);
    return 0;
}

// Channel, row and column of a weight from its offset into the bordered input.
int actconv_decode(const spconv_desc *d, int32_t off, int *c, int *r, int *s) {
    const long hb = d->H + 2 * d->in_border, wb = d->W + 2 * d->in_border, sh = d->in_border - d->pad;
    if (off < 0) return -1;
    const long plane = hb * wb, rem = off % plane;
    *c = (int)(off / plane), *r = (int)(rem / wb - sh), *s = (int)(rem % wb - sh);
    return *c < d->C && *r >= 0 && *r < d->R && *s >= 0 && *s < d->S ? 0 : -1;
}

// --- the compact input --------------------------------------------------------

// Allocates the lists for n images.
int actconv_nz_alloc(actconv_nz *z, const spconv_desc *d, int n, sc_err *err) {
    memset(z, 0, sizeof *z);
    const size_t rows = (size_t)n * d->C * d->H, ent = rows * d->W;
    z->cnt = malloc((rows ? rows : 1) * sizeof *z->cnt);
    z->col = malloc((ent ? ent : 1) * sizeof *z->col);
    z->val = malloc((ent ? ent : 1) * sizeof *z->val);
    if (!z->cnt || !z->col || !z->val) {
        actconv_nz_free(z);
        return sc_fail(err, "out of memory (non-zero lists of %d images)", n);
    }
    z->n = n, z->C = d->C, z->H = d->H, z->W = d->W;
    return 0;
}

// Frees the lists (a zeroed struct is fine).
void actconv_nz_free(actconv_nz *z) {
    free(z->cnt), free(z->col), free(z->val);
    memset(z, 0, sizeof *z);
}

// Lists the non-zeros of every interior row of the input, in column order.
void actconv_nz_build(const spconv_desc *d, int n, const float *in, actconv_nz *z) {
    const int ib = d->in_border, hb = d->H + 2 * ib, wb = d->W + 2 * ib;
    const long rows = (long)n * d->C * d->H;
#pragma omp parallel for schedule(static)
    for (long row = 0; row < rows; row++) {
        const long pl = row / d->H;
        const int y = (int)(row % d->H);
        const float *x = in + ((size_t)pl * hb + y + ib) * wb + ib;
        const size_t slot = (size_t)row * d->W;
        int k = 0;
        for (int q = 0; q < d->W; q++)
            if (x[q] != 0.0f) z->col[slot + k] = (uint16_t)q, z->val[slot + k] = x[q], k++;
        z->cnt[row] = k;
    }
}

// Fraction of zeros in the interiors of n input images.
double actconv_zero_fraction(const spconv_desc *d, int n, const float *in) {
    const int ib = d->in_border, hb = d->H + 2 * ib, wb = d->W + 2 * ib;
    const long rows = (long)n * d->C * d->H;
    long zeros = 0;
#pragma omp parallel for reduction(+ : zeros) schedule(static)
    for (long row = 0; row < rows; row++) {
        const float *x = in + ((size_t)(row / d->H) * hb + row % d->H + ib) * wb + ib;
        for (int q = 0; q < d->W; q++) zeros += x[q] == 0.0f;
    }
    return rows ? (double)zeros / ((double)rows * d->W) : 0.0;
}

// --- forward -------------------------------------------------------------------

// acc (P, Q) += the products of weight w at (c, r, s) with image i's listed
// non-zeros of channel c, each into the conv pixel whose window reads it.
static void actconv_scatter(const spconv_desc *d, const actconv_nz *z, int i, int c, int r, int s,
                            double w, double *acc) {
    for (int p = 0; p < d->P; p++) {
        const int y = p * d->stride - d->pad + r;
        if (y < 0 || y >= d->H) continue;
        const size_t row = ((size_t)i * d->C + c) * d->H + y, slot = row * d->W;
        double *a = acc + (size_t)p * d->Q;
        for (int e = 0; e < z->cnt[row]; e++) {
            const int t = z->col[slot + e] + d->pad - s;  // q * stride when it is a window's
            if (t < 0 || t % d->stride) continue;
            const int q = t / d->stride;
            if (q < d->Q) a[q] += w * (double)z->val[slot + e];
        }
    }
}

// acc (P, Q) = conv of row k over image i from the input's non-zeros (arg: the lists).
static void actconv_plane(const spconv_desc *d, const void *arg, int i, int k, double *acc) {
    const actconv_nz *z = arg;
    memset(acc, 0, (size_t)d->P * d->Q * sizeof *acc);
    for (int j = 0; j < d->nnz_row; j++) {
        const size_t e = (size_t)k * d->nnz_row + j;
        int c, r, s;
        if (d->values[e] == 0.0f || actconv_decode(d, d->offsets[e], &c, &r, &s)) continue;
        actconv_scatter(d, z, i, c, r, s, d->values[e], acc);
    }
}

// out interior = pool(relu(conv(in) + bias)) from the input's non-zeros,
// through the direct sparse reference's epilogue.
void actconv_forward_cpu(const spconv_desc *d, int n, const actconv_nz *z, float *out) {
    spconv_planes_cpu(d, n, actconv_plane, z, out);
}
