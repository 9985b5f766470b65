// Direct sparse convolution on the CPU: the plain reference every GPU variant
// is checked against (kernels/spconv.h). One output plane per (image, output
// channel) pair, OpenMP over those pairs; each plane is summed in double, one
// stored entry at a time over every pixel (contiguous, vectorisable), then
// bias, ReLU and the fused max pool read it.
#include "kernels/spconv.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

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

// acc (P, Q) = conv of row k over one image, summed in double entry by entry
// (per pixel the same order as a per-pixel loop: the products of two floats
// are exact in double, so the result does not depend on the loop order).
static void spconv_plane(const spconv_desc *d, const float *img, int k, double *acc) {
    const int wb = d->W + 2 * d->in_border, st = d->stride, P = d->P, Q = d->Q;
    const int32_t *off = d->offsets + (size_t)k * d->nnz_row;
    const float *val = d->values + (size_t)k * d->nnz_row;
    for (int i = 0; i < P * Q; i++) acc[i] = 0.0;
    for (int j = 0; j < d->nnz_row; j++) {
        const double v = val[j];
        for (int p = 0; p < P; p++) {
            const float *x = img + off[j] + (size_t)(p * st) * wb;
            double *a = acc + (size_t)p * Q;
            if (st == 1)
                for (int q = 0; q < Q; q++) a[q] += v * (double)x[q];
            else
                for (int q = 0; q < Q; q++) a[q] += v * (double)x[(size_t)q * st];
        }
    }
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

// out (n, K, Po + 2 ob, Qo + 2 ob) interior = pool(relu(conv(in) + bias)).
void spconv_forward_cpu(const spconv_desc *d, int n, const float *in, float *out) {
    int po, qo;
    spconv_out_size(d, &po, &qo);
    const size_t in_img = (size_t)d->C * (d->H + 2 * d->in_border) * (d->W + 2 * d->in_border);
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
            spconv_plane(d, in + (size_t)i * in_img, k, acc);
            for (int p = 0; p < po; p++)
                for (int q = 0; q < qo; q++)
                    o[(size_t)(p + ob) * wob + q + ob] =
                        d->pool_k > 0 ? spconv_pooled(d, acc, k, p, q) : spconv_out(d, acc, k, p, q);
        }
        free(acc);
    }
}
