// GPU versions of the deploy runtime's small ops (GPU builds only): the
// semantics of kernels/deploy_ops.h on bordered NCHW tensors in fp32 or fp16
// storage (arithmetic in fp32). Pointers are device pointers, work is queued
// on g->stream without a host sync, and every launch is graph-capturable.
// Output borders are never written.
#ifndef SC_KERNELS_DEPLOY_OPS_GPU_H
#define SC_KERNELS_DEPLOY_OPS_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/deploy_ops.h"

// y interior (n, 3, h, w) = (img / 255 - mean[ch]) / std[ch], img (n, 3, h, w) bytes.
int dops_normalize_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gy, const uint8_t *img,
                       const float mean[3], const float std[3], void *y, sc_err *err);

// y = a + b, then max(., 0) when relu.
int dops_add_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *ga, const void *a,
                 const dops_geom *gb, const void *b, const dops_geom *gy, void *y, int relu,
                 sc_err *err);

// y = max(x, 0).
int dops_relu_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                  const dops_geom *gy, void *y, sc_err *err);

// y = x * scale[ch] + shift[ch] (scale, shift: device fp32 (c)), then ReLU when asked.
int dops_affine_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                    const float *scale, const float *shift, const dops_geom *gy, void *y,
                    int relu, sc_err *err);

// Max pool (padding never wins) or, avg = 1, average pool (divisor k*k).
int dops_pool_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x, int k,
                  int stride, int pad, int avg, const dops_geom *gy, void *y, sc_err *err);

// Global average pool into the single interior pixel of each output plane.
int dops_gap_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                 const dops_geom *gy, void *y, sc_err *err);

// Copies the interior of x into y (another border).
int dops_copy_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                  const dops_geom *gy, void *y, sc_err *err);

// Copies the interior of x's channels into y's channels [off, off + gx->c).
int dops_concat_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x, int off,
                    const dops_geom *gy, void *y, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
