// The small ops of the channels-last dense engine (GPU builds only): input
// normalisation into NHWC, residual add, ReLU, per-channel affine, max/avg
// pooling, global average pooling and the cast of the logits to fp32, on
// dense (n, h, w, c) tensors in fp32, fp16 or bf16 storage with fp32
// arithmetic. Semantics follow kernels/deploy_ops.h (the CPU reference):
// max-pool padding never wins, average pools divide by k*k. Pointers are
// device pointers, work is queued on g->stream, every launch is capturable.
#ifndef SC_KERNELS_NHWC_OPS_GPU_H
#define SC_KERNELS_NHWC_OPS_GPU_H

#ifdef SC_HAVE_CUDA

#include <stdint.h>

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// Geometry of one dense channels-last tensor.
typedef struct {
    int n, h, w, c;
} nhwc_geom;

// y (n, h, w, cy) = (img / 255 - mean[ch]) / std[ch] for img (n, 3, h, w)
// bytes; channels 3..cy-1 are written as zeros (cy >= 3).
int nhwc_normalize_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int cy,
                       const uint8_t *img, const float mean[3], const float std[3], void *y,
                       sc_err *err);

// y = a + b over `count` elements, then max(., 0) when relu.
int nhwc_add_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *a, const void *b,
                 void *y, int relu, sc_err *err);

// y = max(x, 0) over `count` elements.
int nhwc_relu_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *x, void *y, sc_err *err);

// y = x * scale[ch] + shift[ch] (device fp32 (c)) over x's geometry, then ReLU when asked.
int nhwc_affine_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x,
                    const float *scale, const float *shift, void *y, int relu, sc_err *err);

// y (n, po, qo, c) = max pool (avg = 0) or average pool (avg = 1, divisor
// k*k) of x with window k, stride and padding; po, qo from the pool's rule.
int nhwc_pool_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x, int k,
                  int stride, int pad, int avg, int po, int qo, void *y, sc_err *err);

// y (n, c) = mean of x over each plane.
int nhwc_gap_gpu(const gpu_ctx *g, gpu_dtype dt, const nhwc_geom *gx, const void *x, void *y,
                 sc_err *err);

// y (count) fp32 = x (count) of type dt.
int nhwc_to_f32_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const void *x, float *y,
                    sc_err *err);

// y (count) of type dt = x (count) fp32 (round to nearest).
int nhwc_from_f32_gpu(const gpu_ctx *g, gpu_dtype dt, size_t count, const float *x, void *y,
                      sc_err *err);

// *y = a new device array of count values of type dt (16 bytes more, so never
// empty) narrowed from the host fp32 array x on g's stream, complete on
// return; the caller frees *y, also on failure. 0 or -1.
int nhwc_new_from_host_f32(const gpu_ctx *g, gpu_dtype dt, size_t count, const float *x, void **y,
                           sc_err *err);

// --- layout conversions for kernels that work on bordered NCHW ---------------------

// y interior (n, c, h + 2b, w + 2b) = channels [0, c) of x (n, h, w, cx),
// cx >= c; y's border is not written (the caller keeps it zero).
int nhwc_to_bordered_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int c, int cx,
                         const void *x, int b, void *y, sc_err *err);

// y (n, h, w, c) = x interior (n, c, h + 2b, w + 2b), plus z (n, h, w, c)
// when not NULL, then max(., 0) when relu.
int bordered_to_nhwc_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int c, const void *x,
                         int b, const void *z, int relu, void *y, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
