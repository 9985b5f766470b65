// GPU batch normalisation on cuDNN (GPU builds only): the semantics of
// kernels/batchnorm.h (PyTorch running statistics: exponential average with
// factor `momentum`, unbiased variance for the running var) on NHWC
// activations. gamma, beta, running stats and the saved batch statistics are
// fp32 (C) vectors in every precision.
//
// fp16 plans use cuDNN's NHWC persistent kernels and can fuse what follows
// the BN in the net: BN_FUSE_RELU y = relu(bn(x)), BN_FUSE_ADD_RELU
// y = relu(bn(x) + z); their backward gives dx and (ADD_RELU) dz from the
// output y and its gradient dy. fp32 plans are plain BN (persistent NHWC
// kernels where cuDNN takes them, else the spatial ones).
#ifndef SC_KERNELS_BATCHNORM_GPU_H
#define SC_KERNELS_BATCHNORM_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BN_FUSE_NONE = 0, BN_FUSE_RELU = 1, BN_FUSE_ADD_RELU = 2 } bn_fuse;

typedef struct bn_gpu bn_gpu;

// Plans a BN over x (N, H, W, C) with the given fusion; fails when cuDNN does
// not support the combination (the caller can then run the ops unfused).
bn_gpu *bn_gpu_create(const gpu_ctx *g, gpu_dtype dt, int n, int c, int h, int w, bn_fuse fuse,
                      sc_err *err);
void bn_gpu_free(bn_gpu *b);

// Workspace bytes (shared scratch) and reserve bytes (kept from the forward
// to the backward of the same step, one per layer).
size_t bn_gpu_workspace(const bn_gpu *b);
size_t bn_gpu_reserve(const bn_gpu *b);

// Training forward: y = act(bn(x) [+ z]) with batch statistics; updates the
// running stats and saves the batch mean and 1/sqrt(var + eps).
int bn_gpu_forward_train(const gpu_ctx *g, const bn_gpu *b, const void *x, const void *z,
                         void *y, const float *gamma, const float *beta, float eps,
                         float momentum, float *running_mean, float *running_var,
                         float *save_mean, float *save_invstd, void *ws, void *reserve,
                         sc_err *err);

// Inference forward with the running statistics (no fusion: y = bn(x)).
int bn_gpu_forward_infer(const gpu_ctx *g, const bn_gpu *b, const void *x, void *y,
                         const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, float eps, sc_err *err);

// Backward of the training forward: dx and dz (ADD_RELU only) overwritten,
// dgamma and dbeta (C) overwritten. y is the forward output (needed by the
// fused plans, may be NULL otherwise).
int bn_gpu_backward(const gpu_ctx *g, const bn_gpu *b, const void *x, const void *y,
                    const void *dy, void *dz, void *dx, const float *gamma, const float *beta,
                    float *dgamma, float *dbeta, float eps, const float *save_mean,
                    const float *save_invstd, void *ws, void *reserve, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
