// GPU pooling (GPU builds only), NHWC, fp32 or fp16 storage: the semantics
// of kernels/pool.h (max: padding never wins, ties go to the first maximum in
// row-major window order; average: pads count as zeros, divisor k*k).
// Backward passes gather (no atomics): each input element sums the windows
// that contain it, so results are deterministic. `accumulate` as in
// activation_gpu.h.
#ifndef SC_KERNELS_POOL_GPU_H
#define SC_KERNELS_POOL_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/pool.h"

// y (N, P, Q, C) = max pool of x (N, H, W, C).
int maxpool_forward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d, const void *x,
                        void *y, sc_err *err);
// dx (N, H, W, C) (+)= dy routed to each window's first maximum in x.
int maxpool_backward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d, const void *x,
                         const void *dy, void *dx, int accumulate, sc_err *err);
// y (N, P, Q, C) = average pool of x (N, H, W, C).
int avgpool_forward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d, const void *x,
                        void *y, sc_err *err);
// dx (N, H, W, C) (+)= backward of the average pool.
int avgpool_backward_gpu(const gpu_ctx *g, gpu_dtype dt, const pool_dims *d, const void *dy,
                         void *dx, int accumulate, sc_err *err);
// y (N, C) = mean over HW of x (N, HW, C).
int gap_forward_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int c, int hw, const void *x,
                    void *y, sc_err *err);
// dx (N, HW, C) (+)= dy (N, C) / HW.
int gap_backward_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int c, int hw, const void *dy,
                     void *dx, int accumulate, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
