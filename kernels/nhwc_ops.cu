// The channels-last dense engine's small ops (kernels/nhwc_ops_gpu.h):
// grid-stride kernels over dense (n, h, w, c) tensors with the channel
// innermost, so consecutive threads touch consecutive bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "kernels/device_gpu.h"
#include "kernels/nhwc_ops_gpu.h"

// --- element access for the three storage types ----------------------------------

// Widens a bf16 element to float (fp32 and fp16 use sc_tof).
__device__ __forceinline__ float nh_tof(float x) { return x; }
__device__ __forceinline__ float nh_tof(__half x) { return __half2float(x); }
__device__ __forceinline__ float nh_tof(__nv_bfloat16 x) { return __bfloat162float(x); }

// Narrows a float to T (round to nearest).
template <typename T> __device__ __forceinline__ T nh_from(float x);
template <> __device__ __forceinline__ float nh_from<float>(float x) { return x; }
template <> __device__ __forceinline__ __half nh_from<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 nh_from<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// Runs `body` with T bound to the element type of dt (fp32, fp16 or bf16).
#define NH_DISPATCH(dt, ...)                                                            \
    do {                                                                                \
        if ((dt) == GDT_F16) {                                                          \
            typedef __half T;                                                           \
            __VA_ARGS__;                                                                \
        } else if ((dt) == GDT_BF16) {                                                  \
            typedef __nv_bfloat16 T;                                                    \
            __VA_ARGS__;                                                                \
        } else {                                                                        \
            typedef float T;                                                            \
            __VA_ARGS__;                                                                \
        }                                                                               \
    } while (0)

#define NH_THREADS 256

// --- kernels ------------------------------------------------------------------------

// y (n, h, w, cy) from image bytes (n, 3, h, w); channels >= 3 are zero.
template <typename T>
__global__ void nhwc_normalize_kernel(const uint8_t *img, int n, int h, int w, int cy, float m0,
                                      float m1, float m2, float s0, float s1, float s2, T *y) {
    const size_t total = (size_t)n * h * w * cy;
    SC_GRID_LOOP(i, total) {
        const int ch = (int)(i % cy);
        const size_t pix = i / cy;  // (image, row, col)
        const size_t im = pix / ((size_t)h * w), rc = pix % ((size_t)h * w);
        float v = 0.0f;
        if (ch < 3) {
            const float m = ch == 0 ? m0 : ch == 1 ? m1 : m2, s = ch == 0 ? s0 : ch == 1 ? s1 : s2;
            v = ((float)img[(im * 3 + ch) * h * w + rc] / 255.0f - m) / s;
        }
        y[i] = nh_from<T>(v);
    }
}

// y = a + b (then ReLU).
template <typename T>
__global__ void nhwc_add_kernel(const T *a, const T *b, T *y, size_t count, int relu) {
    SC_GRID_LOOP(i, count) {
        float v = nh_tof(a[i]) + nh_tof(b[i]);
        y[i] = nh_from<T>(relu ? fmaxf(v, 0.0f) : v);
    }
}

// y = max(x, 0).
template <typename T> __global__ void nhwc_relu_kernel(const T *x, T *y, size_t count) {
    SC_GRID_LOOP(i, count) y[i] = nh_from<T>(fmaxf(nh_tof(x[i]), 0.0f));
}

// y = x * scale[ch] + shift[ch] (then ReLU).
template <typename T>
__global__ void nhwc_affine_kernel(const T *x, T *y, size_t count, int c, const float *scale,
                                   const float *shift, int relu) {
    SC_GRID_LOOP(i, count) {
        const int ch = (int)(i % c);
        float v = nh_tof(x[i]) * scale[ch] + shift[ch];
        y[i] = nh_from<T>(relu ? fmaxf(v, 0.0f) : v);
    }
}

// One output element of a max or average pool.
template <typename T>
__global__ void nhwc_pool_kernel(const T *x, T *y, int n, int h, int w, int c, int k, int stride,
                                 int pad, int avg, int po, int qo) {
    const size_t total = (size_t)n * po * qo * c;
    SC_GRID_LOOP(i, total) {
        const int ch = (int)(i % c), q = (int)(i / c % qo), p = (int)(i / ((size_t)c * qo) % po);
        const size_t im = i / ((size_t)c * qo * po);
        float m = avg ? 0.0f : -INFINITY;
        for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) {
                const int r = p * stride - pad + a, s = q * stride - pad + b;
                if (r < 0 || r >= h || s < 0 || s >= w) continue;
                const float v = nh_tof(x[((im * h + r) * w + s) * c + ch]);
                m = avg ? m + v : fmaxf(m, v);
            }
        y[i] = nh_from<T>(avg ? m / (float)(k * k) : (m == -INFINITY ? 0.0f : m));
    }
}

// y (n, c) = plane means; one thread per (image, channel).
template <typename T>
__global__ void nhwc_gap_kernel(const T *x, T *y, int n, int hw, int c) {
    SC_GRID_LOOP(i, (size_t)n * c) {
        const size_t im = i / c;
        const int ch = (int)(i % c);
        float s = 0.0f;
        for (int k = 0; k < hw; k++) s += nh_tof(x[(im * hw + k) * c + ch]);
        y[i] = nh_from<T>(s / (float)hw);
    }
}

// y fp32 = x.
template <typename T> __global__ void nhwc_to_f32_kernel(const T *x, float *y, size_t count) {
    SC_GRID_LOOP(i, count) y[i] = nh_tof(x[i]);
}

// y = x fp32 narrowed.
template <typename T> __global__ void nhwc_from_f32_kernel(const float *x, T *y, size_t count) {
    SC_GRID_LOOP(i, count) y[i] = nh_from<T>(x[i]);
}

// --- launchers ------------------------------------------------------------------------

#define NH_LAUNCH(items) <<<sc_blocks(g, (items), NH_THREADS), NH_THREADS, 0, g->stream>>>

// Normalises the images into NHWC.
extern "C" int nhwc_normalize_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int cy,
                                  const uint8_t *img, const float mean[3], const float std[3],
                                  void *y, sc_err *err) {
    const size_t total = (size_t)n * h * w * cy;
    NH_DISPATCH(dt, nhwc_normalize_kernel<T> NH_LAUNCH(total)(img, n, h, w, cy, mean[0], mean[1],
                                                              mean[2], std[0], std[1], std[2], (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// y = a + b (+ReLU).
extern "C" int nhwc_add_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *a,
                            const void *b, void *y, int relu, sc_err *err) {
    NH_DISPATCH(dt, nhwc_add_kernel<T> NH_LAUNCH(count)((const T *)a, (const T *)b, (T *)y, count, relu));
    cudaCheckLaunch(err);
    return 0;
}

// y = max(x, 0).
extern "C" int nhwc_relu_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *x, void *y,
                             sc_err *err) {
    NH_DISPATCH(dt, nhwc_relu_kernel<T> NH_LAUNCH(count)((const T *)x, (T *)y, count));
    cudaCheckLaunch(err);
    return 0;
}

// y = x * scale + shift per channel (+ReLU).
extern "C" int nhwc_affine_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x,
                               const float *scale, const float *shift, void *y, int relu,
                               sc_err *err) {
    const size_t count = (size_t)gx->n * gx->h * gx->w * gx->c;
    NH_DISPATCH(dt, nhwc_affine_kernel<T> NH_LAUNCH(count)((const T *)x, (T *)y, count, gx->c, scale,
                                                          shift, relu));
    cudaCheckLaunch(err);
    return 0;
}

// Max or average pool.
extern "C" int nhwc_pool_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x,
                             int k, int stride, int pad, int avg, int po, int qo, void *y,
                             sc_err *err) {
    const size_t total = (size_t)gx->n * po * qo * gx->c;
    NH_DISPATCH(dt, nhwc_pool_kernel<T> NH_LAUNCH(total)((const T *)x, (T *)y, gx->n, gx->h, gx->w,
                                                        gx->c, k, stride, pad, avg, po, qo));
    cudaCheckLaunch(err);
    return 0;
}

// Global average pool.
extern "C" int nhwc_gap_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x,
                            void *y, sc_err *err) {
    const size_t total = (size_t)gx->n * gx->c;
    NH_DISPATCH(dt, nhwc_gap_kernel<T> NH_LAUNCH(total)((const T *)x, (T *)y, gx->n, gx->h * gx->w,
                                                       gx->c));
    cudaCheckLaunch(err);
    return 0;
}

// Widens to fp32.
extern "C" int nhwc_to_f32_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *x,
                               float *y, sc_err *err) {
    NH_DISPATCH(dt, nhwc_to_f32_kernel<T> NH_LAUNCH(count)((const T *)x, y, count));
    cudaCheckLaunch(err);
    return 0;
}

// Narrows from fp32.
extern "C" int nhwc_from_f32_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const float *x,
                                 void *y, sc_err *err) {
    NH_DISPATCH(dt, nhwc_from_f32_kernel<T> NH_LAUNCH(count)(x, (T *)y, count));
    cudaCheckLaunch(err);
    return 0;
}
