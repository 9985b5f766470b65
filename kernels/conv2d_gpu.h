// GPU convolution on cuDNN (GPU builds only): the semantics of
// kernels/conv2d.h with NHWC activations and KRSC filters, fp32 (plain fp32
// arithmetic, no TF32) or fp16 (tensor cores, fp32 accumulation).
//
// A plan fixes one shape: it creates the descriptors once and picks each
// direction's algorithm by timing them (cudnnFind*AlgorithmEx on scratch
// buffers filled with random values), within a workspace limit, among the
// algorithms cuDNN reports deterministic (no atomics: every run gives the
// same bits). The caller
// owns one workspace of at least conv_gpu_workspace() bytes. Biases:
// bias_*_gpu in activation_gpu.h.
#ifndef SC_KERNELS_CONV2D_GPU_H
#define SC_KERNELS_CONV2D_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/conv2d.h"

typedef struct conv_gpu conv_gpu;

// Plans a convolution of shape d (d->c channels of the NHWC input, filters
// (K, R, S, C)); backward = 1 also picks the two backward algorithms.
conv_gpu *conv_gpu_create(const gpu_ctx *g, gpu_dtype dt, const conv2d_dims *d, int backward,
                          size_t ws_limit, sc_err *err);
void conv_gpu_free(conv_gpu *c);

// Workspace bytes the chosen algorithms need.
size_t conv_gpu_workspace(const conv_gpu *c);
// The plan's shape.
const conv2d_dims *conv_gpu_dims(const conv_gpu *c);
// Writes the chosen algorithms as text ("fwd 1 bwd-data 1 bwd-filter 3 ...").
void conv_gpu_describe(const conv_gpu *c, char *buf, size_t len);

// y (N, P, Q, K) = conv(x (N, H, W, C), w (K, R, S, C)).
int conv_gpu_forward(const gpu_ctx *g, const conv_gpu *c, const void *x, const void *w, void *y,
                     void *ws, sc_err *err);
// dx (N, H, W, C) (+)= gradient w.r.t. the input.
int conv_gpu_backward_data(const gpu_ctx *g, const conv_gpu *c, const void *dy, const void *w,
                           void *dx, int accumulate, void *ws, sc_err *err);
// dw (K, R, S, C) = gradient w.r.t. the filters, overwritten.
int conv_gpu_backward_filter(const gpu_ctx *g, const conv_gpu *c, const void *x, const void *dy,
                             void *dw, void *ws, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
