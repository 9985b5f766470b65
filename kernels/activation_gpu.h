// GPU elementwise ops (GPU builds only), fp32 or fp16 storage with fp32
// arithmetic: ReLU, residual add, gradient routing, per-channel bias.
// `accumulate` = 0 overwrites the destination (it is never read, so it may
// hold garbage), 1 adds to it.
#ifndef SC_KERNELS_ACTIVATION_GPU_H
#define SC_KERNELS_ACTIVATION_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// y = max(x, 0); y may alias x.
int relu_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *x, void *y,
                     sc_err *err);
// dx (+)= dy where y > 0, else 0.
int relu_backward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *y, const void *dy,
                      void *dx, int accumulate, sc_err *err);
// y = a + b, then max(., 0) when relu is set; y may alias a or b.
int add_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *a, const void *b,
                    void *y, int relu, sc_err *err);
// acc (+)= x (gradient routing where an output feeds a layer).
int accumulate_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *x, void *acc,
                   int accumulate, sc_err *err);
// y (rows, C) [dt] += bias (C) fp32.
int bias_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t rows, int c, const float *bias,
                     void *y, sc_err *err);
// db (C) fp32 = column sums of dy (rows, C) [dt], overwritten.
int bias_backward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t rows, int c, const void *dy,
                      float *db, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
