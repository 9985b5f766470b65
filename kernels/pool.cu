// GPU max/average/global-average pooling, NHWC; one thread per output
// element forward, one per input element backward (gather form).
#include "kernels/device_gpu.h"
#include "kernels/pool_gpu.h"

// Pool shape passed by value.
struct pool_shape {
    int n, c, h, w, k, stride, pad, p, q;
};

// Copies pool_dims into the kernel argument struct.
static pool_shape pool_shape_of(const pool_dims *d) {
    return pool_shape{d->n, d->c, d->h, d->w, d->k, d->stride, d->pad, d->p, d->q};
}

// Offset (in elements) of the first maximum of window (i, p, q) channel ch;
// padding never wins, ties keep the first in row-major order.
template <typename T>
__device__ __forceinline__ size_t pool_argmax(const pool_shape &s, const T *x, int i, int p,
                                              int q, int ch) {
    const int y0 = max(p * s.stride - s.pad, 0), y1 = min(p * s.stride - s.pad + s.k, s.h);
    const int x0 = max(q * s.stride - s.pad, 0), x1 = min(q * s.stride - s.pad + s.k, s.w);
    size_t best = (((size_t)i * s.h + y0) * s.w + x0) * s.c + ch;
    float bv = sc_tof(x[best]);
    for (int y = y0; y < y1; y++)
        for (int xx = x0; xx < x1; xx++) {
            const size_t o = (((size_t)i * s.h + y) * s.w + xx) * s.c + ch;
            const float v = sc_tof(x[o]);
            if (v > bv) bv = v, best = o;
        }
    return best;
}

// Range of output rows whose windows contain input row y: [*lo, *hi).
__device__ __forceinline__ void pool_span(int y, int k, int stride, int pad, int outn, int *lo,
                                          int *hi) {
    const int t = y + pad - k + 1;  // first window start covering y is >= t
    *lo = t <= 0 ? 0 : (t + stride - 1) / stride;
    *hi = min((y + pad) / stride + 1, outn);
}

// --- max pool ---------------------------------------------------------------

// One thread per output element: the window's maximum (pads never win).
template <typename T>
__global__ void maxpool_fwd_kernel(pool_shape s, const T *x, T *y) {
    const size_t total = (size_t)s.n * s.p * s.q * s.c;
    SC_GRID_LOOP(o, total) {
        const int ch = (int)(o % s.c), q = (int)(o / s.c % s.q), p = (int)(o / s.c / s.q % s.p);
        const int i = (int)(o / ((size_t)s.c * s.q * s.p));
        y[o] = x[pool_argmax(s, x, i, p, q, ch)];
    }
}

// One thread per input element: sums dy of the windows whose first maximum it is.
template <typename T>
__global__ void maxpool_bwd_kernel(pool_shape s, const T *x, const T *dy, T *dx, int acc) {
    const size_t total = (size_t)s.n * s.h * s.w * s.c;
    SC_GRID_LOOP(e, total) {
        const int ch = (int)(e % s.c), xx = (int)(e / s.c % s.w), y = (int)(e / s.c / s.w % s.h);
        const int i = (int)(e / ((size_t)s.c * s.w * s.h));
        int p0, p1, q0, q1;
        pool_span(y, s.k, s.stride, s.pad, s.p, &p0, &p1);
        pool_span(xx, s.k, s.stride, s.pad, s.q, &q0, &q1);
        float g = acc ? sc_tof(dx[e]) : 0.0f;
        for (int p = p0; p < p1; p++)
            for (int q = q0; q < q1; q++)
                if (pool_argmax(s, x, i, p, q, ch) == e)
                    g += sc_tof(dy[(((size_t)i * s.p + p) * s.q + q) * s.c + ch]);
        dx[e] = sc_fromf<T>(g);
    }
}

// y = max pool of x.
extern "C" int maxpool_forward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d,
                                   const void *x, void *y, sc_err *err) {
    const pool_shape s = pool_shape_of(d);
    const size_t total = (size_t)s.n * s.p * s.q * s.c;
    SC_DISPATCH(dt, maxpool_fwd_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                        s, (const T *)x, (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// dx (+)= max pool backward.
extern "C" int maxpool_backward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d,
                                    const void *x, const void *dy, void *dx, int accumulate,
                                    sc_err *err) {
    const pool_shape s = pool_shape_of(d);
    const size_t total = (size_t)s.n * s.h * s.w * s.c;
    SC_DISPATCH(dt, maxpool_bwd_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                        s, (const T *)x, (const T *)dy, (T *)dx, accumulate));
    cudaCheckLaunch(err);
    return 0;
}

// --- average pool -----------------------------------------------------------

// One thread per output element: the window's sum divided by k*k.
template <typename T>
__global__ void avgpool_fwd_kernel(pool_shape s, const T *x, T *y) {
    const size_t total = (size_t)s.n * s.p * s.q * s.c;
    const float inv = 1.0f / (float)(s.k * s.k);
    SC_GRID_LOOP(o, total) {
        const int ch = (int)(o % s.c), q = (int)(o / s.c % s.q), p = (int)(o / s.c / s.q % s.p);
        const int i = (int)(o / ((size_t)s.c * s.q * s.p));
        const int y0 = max(p * s.stride - s.pad, 0), y1 = min(p * s.stride - s.pad + s.k, s.h);
        const int x0 = max(q * s.stride - s.pad, 0), x1 = min(q * s.stride - s.pad + s.k, s.w);
        float sum = 0.0f;
        for (int yy = y0; yy < y1; yy++)
            for (int xx = x0; xx < x1; xx++)
                sum += sc_tof(x[(((size_t)i * s.h + yy) * s.w + xx) * s.c + ch]);
        y[o] = sc_fromf<T>(sum * inv);
    }
}

// One thread per input element: dy/(k*k) summed over the windows that cover it.
template <typename T>
__global__ void avgpool_bwd_kernel(pool_shape s, const T *dy, T *dx, int acc) {
    const size_t total = (size_t)s.n * s.h * s.w * s.c;
    const float inv = 1.0f / (float)(s.k * s.k);
    SC_GRID_LOOP(e, total) {
        const int ch = (int)(e % s.c), xx = (int)(e / s.c % s.w), y = (int)(e / s.c / s.w % s.h);
        const int i = (int)(e / ((size_t)s.c * s.w * s.h));
        int p0, p1, q0, q1;
        pool_span(y, s.k, s.stride, s.pad, s.p, &p0, &p1);
        pool_span(xx, s.k, s.stride, s.pad, s.q, &q0, &q1);
        float g = 0.0f;
        for (int p = p0; p < p1; p++)
            for (int q = q0; q < q1; q++)
                g += sc_tof(dy[(((size_t)i * s.p + p) * s.q + q) * s.c + ch]);
        dx[e] = sc_fromf<T>((acc ? sc_tof(dx[e]) : 0.0f) + g * inv);
    }
}

// y = average pool of x.
extern "C" int avgpool_forward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d,
                                   const void *x, void *y, sc_err *err) {
    const pool_shape s = pool_shape_of(d);
    const size_t total = (size_t)s.n * s.p * s.q * s.c;
    SC_DISPATCH(dt, avgpool_fwd_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                        s, (const T *)x, (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// dx (+)= average pool backward.
extern "C" int avgpool_backward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d,
                                    const void *dy, void *dx, int accumulate, sc_err *err) {
    const pool_shape s = pool_shape_of(d);
    const size_t total = (size_t)s.n * s.h * s.w * s.c;
    SC_DISPATCH(dt, avgpool_bwd_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                        s, (const T *)dy, (T *)dx, accumulate));
    cudaCheckLaunch(err);
    return 0;
}

// --- global average pool ----------------------------------------------------

// y (N, C) = mean over HW; one thread per (image, channel), lanes along C.
template <typename T>
__global__ void gap_fwd_kernel(int n, int c, int hw, const T *x, T *y) {
    const float inv = 1.0f / (float)hw;
    SC_GRID_LOOP(o, (size_t)n * c) {
        const size_t i = o / c, ch = o % c;
        const T *p = x + i * hw * c + ch;
        float s = 0.0f;
        for (int e = 0; e < hw; e++) s += sc_tof(p[(size_t)e * c]);
        y[o] = sc_fromf<T>(s * inv);
    }
}

// dx (N, HW, C) (+)= dy (N, C) / HW.
template <typename T>
__global__ void gap_bwd_kernel(int n, int c, int hw, const T *dy, T *dx, int acc) {
    const float inv = 1.0f / (float)hw;
    SC_GRID_LOOP(e, (size_t)n * hw * c) {
        const size_t ch = e % c, i = e / ((size_t)hw * c);
        const float g = sc_tof(dy[i * c + ch]) * inv;
        dx[e] = sc_fromf<T>(acc ? sc_tof(dx[e]) + g : g);
    }
}

// y (N, C) = mean over HW of x (N, HW, C).
extern "C" int gap_forward_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int c, int hw,
                               const void *x, void *y, sc_err *err) {
    const size_t total = (size_t)n * c;
    SC_DISPATCH(dt, gap_fwd_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                        n, c, hw, (const T *)x, (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// dx (+)= dy / HW broadcast over HW.
extern "C" int gap_backward_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int c, int hw,
                                const void *dy, void *dx, int accumulate, sc_err *err) {
    const size_t total = (size_t)n * hw * c;
    SC_DISPATCH(dt, gap_bwd_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                        n, c, hw, (const T *)dy, (T *)dx, accumulate));
    cudaCheckLaunch(err);
    return 0;
}
