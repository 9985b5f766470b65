// The channels-last dense engine's small ops (kernels/nhwc_ops_gpu.h):
// grid-stride kernels over dense (n, h, w, c) tensors with the channel
// innermost, so consecutive threads touch consecutive bytes.
#include <math.h>

#include "kernels/device_gpu.h"
#include "kernels/nhwc_ops_gpu.h"

// Runs `body` with T bound to the element type of dt: bf16 here, fp32 and
// fp16 through SC_DISPATCH.
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
        y[i] = sc_fromf<T>(v);
    }
}

// y = a + b (then ReLU).
template <typename T>
__global__ void nhwc_add_kernel(const T *a, const T *b, T *y, size_t count, int relu) {
    SC_GRID_LOOP(i, count) {
        float v = sc_tof(a[i]) + sc_tof(b[i]);
        y[i] = sc_fromf<T>(relu ? fmaxf(v, 0.0f) : v);
    }
}

// y = max(x, 0).
template <typename T> __global__ void nhwc_relu_kernel(const T *x, T *y, size_t count) {
    SC_GRID_LOOP(i, count) y[i] = sc_fromf<T>(fmaxf(sc_tof(x[i]), 0.0f));
}

// y = x * scale[ch] + shift[ch] (then ReLU).
template <typename T>
__global__ void nhwc_affine_kernel(const T *x, T *y, size_t count, int c, const float *scale,
                                   const float *shift, int relu) {
    SC_GRID_LOOP(i, count) {
        const int ch = (int)(i % c);
        float v = sc_tof(x[i]) * scale[ch] + shift[ch];
        y[i] = sc_fromf<T>(relu ? fmaxf(v, 0.0f) : v);
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
                const float v = sc_tof(x[((im * h + r) * w + s) * c + ch]);
                m = avg ? m + v : fmaxf(m, v);
            }
        y[i] = sc_fromf<T>(avg ? m / (float)(k * k) : (m == -INFINITY ? 0.0f : m));
    }
}

// y (n, c) = plane means; one thread per (image, channel).
template <typename T>
__global__ void nhwc_gap_kernel(const T *x, T *y, int n, int hw, int c) {
    SC_GRID_LOOP(i, (size_t)n * c) {
        const size_t im = i / c;
        const int ch = (int)(i % c);
        float s = 0.0f;
        for (int k = 0; k < hw; k++) s += sc_tof(x[(im * hw + k) * c + ch]);
        y[i] = sc_fromf<T>(s / (float)hw);
    }
}

// y fp32 = x.
template <typename T> __global__ void nhwc_to_f32_kernel(const T *x, float *y, size_t count) {
    SC_GRID_LOOP(i, count) y[i] = sc_tof(x[i]);
}

// y = x fp32 narrowed.
template <typename T> __global__ void nhwc_from_f32_kernel(const float *x, T *y, size_t count) {
    SC_GRID_LOOP(i, count) y[i] = sc_fromf<T>(x[i]);
}

// y interior (bordered NCHW) = x (NHWC, cx channels); one thread per y element.
template <typename T>
__global__ void nhwc_to_bordered_kernel(const T *x, T *y, int n, int h, int w, int c, int cx, int b) {
    const size_t total = (size_t)n * c * h * w;
    const int hb = h + 2 * b, wb = w + 2 * b;
    SC_GRID_LOOP(i, total) {
        const int s = (int)(i % w), r = (int)(i / w % h);
        const size_t plane = i / ((size_t)w * h);  // image * c + channel
        const size_t im = plane / c, ch = plane % c;
        y[(plane * hb + r + b) * wb + s + b] = x[((im * h + r) * w + s) * cx + ch];
    }
}

// y (NHWC) = x interior (bordered NCHW) [+ z], then ReLU; one thread per y element.
template <typename T>
__global__ void bordered_to_nhwc_kernel(const T *x, const T *z, T *y, int n, int h, int w, int c,
                                        int b, int relu) {
    const size_t total = (size_t)n * h * w * c;
    const int hb = h + 2 * b, wb = w + 2 * b;
    SC_GRID_LOOP(i, total) {
        const int ch = (int)(i % c), s = (int)(i / c % w), r = (int)(i / ((size_t)c * w) % h);
        const size_t im = i / ((size_t)c * w * h);
        float v = sc_tof(x[((im * c + ch) * hb + r + b) * wb + s + b]);
        if (z) v += sc_tof(z[i]);
        y[i] = sc_fromf<T>(relu ? fmaxf(v, 0.0f) : v);
    }
}

// --- launchers ------------------------------------------------------------------------

#define NH_LAUNCH(items) <<<sc_blocks(g, (items), NH_THREADS), NH_THREADS, 0, g->stream>>>

// Normalises the images into NHWC.
extern "C" int nhwc_normalize_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int cy,
                                  const uint8_t *img, const float mean[3], const float std[3],
                                  void *y, sc_err *err) {
    const size_t total = (size_t)n * h * w * cy;
    SC_DISPATCH3(dt, nhwc_normalize_kernel<T> NH_LAUNCH(total)(img, n, h, w, cy, mean[0], mean[1],
                                                              mean[2], std[0], std[1], std[2], (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// y = a + b (+ReLU).
extern "C" int nhwc_add_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *a,
                            const void *b, void *y, int relu, sc_err *err) {
    SC_DISPATCH3(dt, nhwc_add_kernel<T> NH_LAUNCH(count)((const T *)a, (const T *)b, (T *)y, count, relu));
    cudaCheckLaunch(err);
    return 0;
}

// y = max(x, 0).
extern "C" int nhwc_relu_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *x, void *y,
                             sc_err *err) {
    SC_DISPATCH3(dt, nhwc_relu_kernel<T> NH_LAUNCH(count)((const T *)x, (T *)y, count));
    cudaCheckLaunch(err);
    return 0;
}

// y = x * scale + shift per channel (+ReLU).
extern "C" int nhwc_affine_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x,
                               const float *scale, const float *shift, void *y, int relu,
                               sc_err *err) {
    const size_t count = (size_t)gx->n * gx->h * gx->w * gx->c;
    SC_DISPATCH3(dt, nhwc_affine_kernel<T> NH_LAUNCH(count)((const T *)x, (T *)y, count, gx->c, scale,
                                                          shift, relu));
    cudaCheckLaunch(err);
    return 0;
}

// Max or average pool.
extern "C" int nhwc_pool_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x,
                             int k, int stride, int pad, int avg, int po, int qo, void *y,
                             sc_err *err) {
    const size_t total = (size_t)gx->n * po * qo * gx->c;
    SC_DISPATCH3(dt, nhwc_pool_kernel<T> NH_LAUNCH(total)((const T *)x, (T *)y, gx->n, gx->h, gx->w,
                                                        gx->c, k, stride, pad, avg, po, qo));
    cudaCheckLaunch(err);
    return 0;
}

// Global average pool.
extern "C" int nhwc_gap_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x,
                            void *y, sc_err *err) {
    const size_t total = (size_t)gx->n * gx->c;
    SC_DISPATCH3(dt, nhwc_gap_kernel<T> NH_LAUNCH(total)((const T *)x, (T *)y, gx->n, gx->h * gx->w,
                                                       gx->c));
    cudaCheckLaunch(err);
    return 0;
}

// Widens to fp32.
extern "C" int nhwc_to_f32_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *x,
                               float *y, sc_err *err) {
    SC_DISPATCH3(dt, nhwc_to_f32_kernel<T> NH_LAUNCH(count)((const T *)x, y, count));
    cudaCheckLaunch(err);
    return 0;
}

// Narrows from fp32.
extern "C" int nhwc_from_f32_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const float *x,
                                 void *y, sc_err *err) {
    SC_DISPATCH3(dt, nhwc_from_f32_kernel<T> NH_LAUNCH(count)(x, (T *)y, count));
    cudaCheckLaunch(err);
    return 0;
}

// A new device array of dt narrowed from host fp32 (through an fp32 device copy).
extern "C" int nhwc_new_from_host_f32(const gpu_ctx *g, gpu_dtype dt, size_t count, const float *x, void **y,
                                      sc_err *err) {
    cudaCheck(err, cudaMalloc(y, count * gpu_dtype_size(dt) + 16));
    float *tmp = NULL;
    int rc = count ? gpu_new_upload((void **)&tmp, x, count * sizeof *x, err) : 0;
    if (!rc && count) rc = nhwc_from_f32_gpu(g, dt, count, tmp, *y, err);
    const cudaError_t e = cudaStreamSynchronize(g->stream);
    cudaFree(tmp);
    if (!rc && e != cudaSuccess) rc = sc_fail(err, "uploading %zu values: %s", count, cudaGetErrorString(e));
    return rc;
}

// NHWC to bordered NCHW.
extern "C" int nhwc_to_bordered_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int c,
                                    int cx, const void *x, int b, void *y, sc_err *err) {
    const size_t total = (size_t)n * c * h * w;
    SC_DISPATCH3(dt, nhwc_to_bordered_kernel<T> NH_LAUNCH(total)((const T *)x, (T *)y, n, h, w, c, cx, b));
    cudaCheckLaunch(err);
    return 0;
}

// Bordered NCHW to NHWC (+ residual, ReLU).
extern "C" int bordered_to_nhwc_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int c,
                                    const void *x, int b, const void *z, int relu, void *y,
                                    sc_err *err) {
    const size_t total = (size_t)n * h * w * c;
    SC_DISPATCH3(dt, bordered_to_nhwc_kernel<T> NH_LAUNCH(total)((const T *)x, (const T *)z, (T *)y, n,
                                                               h, w, c, b, relu));
    cudaCheckLaunch(err);
    return 0;
}
