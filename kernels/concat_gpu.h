// Channel concatenation on the GPU (GPU builds only), fp32 or fp16 storage,
// the same (outer, c, inner) view as the CPU reference (kernels/concat.h);
// the executor's NHWC tensors are (n*h*w, c, 1).
#ifndef SC_KERNELS_CONCAT_GPU_H
#define SC_KERNELS_CONCAT_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// Copies x (outer, c, inner) [dt] into channels [off, off + c) of y (outer, ctot, inner).
int concat_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t outer, int c, size_t inner,
                       int ctot, int off, const void *x, void *y, sc_err *err);

// dx (outer, c, inner) [dt] (+)= channels [off, off + c) of dy (outer, ctot,
// inner); accumulate = 0 overwrites dx (never read).
int concat_backward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t outer, int c, size_t inner,
                        int ctot, int off, const void *dy, void *dx, int accumulate,
                        sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
