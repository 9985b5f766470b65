// A dense linear layer with its bias (and ReLU) fused, through cuBLASLt
// (GPU builds only): y (n, K) = act(x (n, C) w^T + bias), w (K, C), in fp16,
// bf16 (fp32 accumulation) or fp32 (TF32 tensor cores) storage. Device
// pointers; work queued on g->stream; capturable.
#ifndef SC_KERNELS_FLINEAR_GPU_H
#define SC_KERNELS_FLINEAR_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flinear_gpu flinear_gpu;

// Describes the product for n rows and picks cuBLASLt's first algorithm
// for it (workspace allocated here).
flinear_gpu *flinear_gpu_create(int n, int K, int C, int relu, gpu_dtype dt, sc_err *err);

// Queues y = act(x w^T + bias).
int flinear_gpu_run(const gpu_ctx *g, flinear_gpu *l, const void *x, const void *w,
                    const void *bias, void *y, sc_err *err);

// One line: the algorithm and the epilogue.
void flinear_gpu_describe(const flinear_gpu *l, char *buf, size_t len);

// Frees the descriptors and the workspace (NULL is fine).
void flinear_gpu_free(flinear_gpu *l);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
