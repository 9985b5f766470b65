// GPU fully connected layer on cuBLAS (GPU builds only): the semantics of
// kernels/linear.h, y (N, OUT) = x (N, IN) wt^T with wt (OUT, IN), row-major.
// x, wt, dy and dx have dtype dt; y may be fp32 even when dt is fp16 (logits);
// the filter gradient is always fp32. fp16 runs on tensor cores with fp32
// accumulation; fp32 uses plain fp32 (no TF32). Biases: bias_*_gpu in
// activation_gpu.h.
#ifndef SC_KERNELS_LINEAR_GPU_H
#define SC_KERNELS_LINEAR_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// y (N, OUT) [ydt] = x (N, IN) wt^T.
int linear_forward_gpu(const gpu_ctx *g, gpu_dtype dt, gpu_dtype ydt, int n, int in, int out,
                       const void *x, const void *wt, void *y, sc_err *err);
// dx (N, IN) (+)= dy (N, OUT) wt.
int linear_backward_data_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int in, int out,
                             const void *dy, const void *wt, void *dx, int accumulate,
                             sc_err *err);
// dw (OUT, IN) fp32 = dy^T x, overwritten.
int linear_backward_filter_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int in, int out,
                               const void *x, const void *dy, float *dw, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
