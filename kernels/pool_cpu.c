// CPU reference pooling, NCHW fp32: max and average over k x k windows and
// global average. Work is split by (image, channel) plane, one plane per
// thread, windows visited in a fixed order (deterministic backward sums).
#include "pool.h"

#include <stddef.h>
#include <string.h>

// Below this many input elements a loop stays on one thread.
#define POOL_PAR_MIN 32768

// --- dimensions -------------------------------------------------------------

// Fills d, computing p and q; returns -1 when the output would be empty (or
// when pad >= k, which would allow windows made only of padding).
int pool_dims_init(pool_dims *d, int n, int c, int h, int w, int k, int stride, int pad) {
    if (n < 1 || c < 1 || h < 1 || w < 1 || k < 1 || stride < 1 || pad < 0 || pad >= k)
        return -1;
    if (h + 2 * pad < k || w + 2 * pad < k) return -1;
    d->n = n, d->c = c, d->h = h, d->w = w;
    d->k = k, d->stride = stride, d->pad = pad;
    d->p = (h + 2 * pad - k) / stride + 1;
    d->q = (w + 2 * pad - k) / stride + 1;
    return 0;
}

// Clips the window starting at `start` of size k to [0, size): [*lo, *hi).
static void pool_clip(int start, int k, int size, int *lo, int *hi) {
    *lo = start < 0 ? 0 : start;
    *hi = start + k > size ? size : start + k;
}

// Index (within the plane) of the first maximum of window (p, q); padding never wins.
static int pool_argmax(const pool_dims *d, const float *plane, int p, int q) {
    int y0, y1, x0, x1;
    pool_clip(p * d->stride - d->pad, d->k, d->h, &y0, &y1);
    pool_clip(q * d->stride - d->pad, d->k, d->w, &x0, &x1);
    int best = y0 * d->w + x0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            if (plane[y * d->w + x] > plane[best]) best = y * d->w + x;
    return best;
}

// --- max pool ---------------------------------------------------------------

// Max pool; padding never wins. Ties: the first maximum in row-major window order.
void maxpool_forward_cpu(const pool_dims *d, const float *x, float *y) {
    const int planes = d->n * d->c, hw = d->h * d->w, pq = d->p * d->q;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw > POOL_PAR_MIN)
    for (int pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * hw;
        float *yp = y + (size_t)pl * pq;
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++) yp[p * d->q + q] = xp[pool_argmax(d, xp, p, q)];
    }
}

// dx overwritten: each dy goes to its window's first maximum in x.
void maxpool_backward_cpu(const pool_dims *d, const float *x, const float *dy, float *dx) {
    const int planes = d->n * d->c, hw = d->h * d->w, pq = d->p * d->q;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw > POOL_PAR_MIN)
    for (int pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * hw, *dyp = dy + (size_t)pl * pq;
        float *dxp = dx + (size_t)pl * hw;
        memset(dxp, 0, (size_t)hw * sizeof *dxp);
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++) dxp[pool_argmax(d, xp, p, q)] += dyp[p * d->q + q];
    }
}

// --- average pool -----------------------------------------------------------

// Average pool; padded positions count as zeros, the divisor is always k*k.
void avgpool_forward_cpu(const pool_dims *d, const float *x, float *y) {
    const int planes = d->n * d->c, hw = d->h * d->w, pq = d->p * d->q;
    const float inv = 1.0f / (float)(d->k * d->k);
#pragma omp parallel for schedule(static) if ((size_t)planes * hw > POOL_PAR_MIN)
    for (int pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * hw;
        for (int p = 0; p < d->p; p++) {
            for (int q = 0; q < d->q; q++) {
                int y0, y1, x0, x1;
                pool_clip(p * d->stride - d->pad, d->k, d->h, &y0, &y1);
                pool_clip(q * d->stride - d->pad, d->k, d->w, &x0, &x1);
                float sum = 0.0f;
                for (int yy = y0; yy < y1; yy++)
                    for (int xx = x0; xx < x1; xx++) sum += xp[yy * d->w + xx];
                y[(size_t)pl * pq + p * d->q + q] = sum * inv;
            }
        }
    }
}

// dx overwritten: each dy is spread evenly (1/k^2) over its window's real pixels.
void avgpool_backward_cpu(const pool_dims *d, const float *dy, float *dx) {
    const int planes = d->n * d->c, hw = d->h * d->w, pq = d->p * d->q;
    const float inv = 1.0f / (float)(d->k * d->k);
#pragma omp parallel for schedule(static) if ((size_t)planes * hw > POOL_PAR_MIN)
    for (int pl = 0; pl < planes; pl++) {
        float *dxp = dx + (size_t)pl * hw;
        memset(dxp, 0, (size_t)hw * sizeof *dxp);
        for (int p = 0; p < d->p; p++) {
            for (int q = 0; q < d->q; q++) {
                int y0, y1, x0, x1;
                pool_clip(p * d->stride - d->pad, d->k, d->h, &y0, &y1);
                pool_clip(q * d->stride - d->pad, d->k, d->w, &x0, &x1);
                const float g = dy[(size_t)pl * pq + p * d->q + q] * inv;
                for (int yy = y0; yy < y1; yy++)
                    for (int xx = x0; xx < x1; xx++) dxp[yy * d->w + xx] += g;
            }
        }
    }
}

// --- global average pool ----------------------------------------------------

// Global average pool: x (N, C, HW) -> y (N, C).
void gap_forward_cpu(int n, int c, int hw, const float *x, float *y) {
    const int planes = n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw > POOL_PAR_MIN)
    for (int pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * hw;
        double sum = 0.0;
        for (int e = 0; e < hw; e++) sum += xp[e];
        y[pl] = (float)(sum / hw);
    }
}

// dx (N, C, HW) = dy (N, C) / HW, overwritten.
void gap_backward_cpu(int n, int c, int hw, const float *dy, float *dx) {
    const int planes = n * c;
    const float inv = 1.0f / (float)hw;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw > POOL_PAR_MIN)
    for (int pl = 0; pl < planes; pl++) {
        const float g = dy[pl] * inv;
        float *dxp = dx + (size_t)pl * hw;
        for (int e = 0; e < hw; e++) dxp[e] = g;
    }
}
