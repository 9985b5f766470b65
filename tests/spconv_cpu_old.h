// A straightforward copy of the CPU direct sparse convolution as it was before
// register tiling (one output plane at a time, each stored entry added over
// every pixel of the plane in double): the baseline tests/test_spconv_order.c
// compares the tiled kernels/spconv_cpu.c against bit for bit, and the timing
// harness tests/helper_spconv_bench.c measures against. Single-threaded over
// planes when called from one thread; OpenMP over (image, channel) planes.
#ifndef SC_TESTS_SPCONV_CPU_OLD_H
#define SC_TESTS_SPCONV_CPU_OLD_H

#include <math.h>
#include <stdlib.h>

#include "kernels/spconv.h"

// acc (P, Q) = conv of row k over one image, summed in double entry by entry.
static inline void spold_plane(const spconv_desc *d, const float *img, int k, double *acc) {
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
static inline float spold_out(const spconv_desc *d, const double *acc, int k, int p, int q) {
    float y = (float)acc[(size_t)p * d->Q + q] + (d->bias ? d->bias[k] : 0.0f);
    return d->relu && y < 0.0f ? 0.0f : y;
}

// Pooled value at (po, qo): the maximum over the window's valid conv pixels.
static inline float spold_pooled(const spconv_desc *d, const double *acc, int k, int po, int qo) {
    const int p0 = po * d->pool_stride - d->pool_pad, q0 = qo * d->pool_stride - d->pool_pad;
    float m = -INFINITY;
    for (int a = 0; a < d->pool_k; a++)
        for (int b = 0; b < d->pool_k; b++) {
            const int p = p0 + a, q = q0 + b;
            if (p < 0 || p >= d->P || q < 0 || q >= d->Q) continue;
            const float y = spold_out(d, acc, k, p, q);
            if (y > m) m = y;
        }
    return m == -INFINITY ? 0.0f : m;
}

// out (n, K, Po + 2 ob, Qo + 2 ob) interior = pool(relu(conv(in) + bias)), the old way.
static inline void spold_forward(const spconv_desc *d, int n, const float *in, float *out) {
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
            float *o = out + (size_t)pl * hob * wob;
            if (!acc) continue;
            spold_plane(d, in + (size_t)i * in_img, k, acc);
            for (int p = 0; p < po; p++)
                for (int q = 0; q < qo; q++)
                    o[(size_t)(p + ob) * wob + q + ob] =
                        d->pool_k > 0 ? spold_pooled(d, acc, k, p, q) : spold_out(d, acc, k, p, q);
        }
        free(acc);
    }
}

#endif
