// Dense convolution on cuDNN with the semantics of kernels/spconv.h (GPU
// builds only): bordered NCHW activations in and out, bias + ReLU fused,
// the max pool after; the baseline the sparse kernels are measured against.
//
// Precisions: DC_FP32 plain fp32 arithmetic (CUDNN_FMA_MATH, TF32 off),
// DC_TF32 fp32 data on TF32 tensor cores, DC_FP16 fp16 data on tensor cores
// (fp32 accumulation), DC_FP16_NHWC the same with cuDNN working in NHWC: the
// input is transposed first and the output transposed back by the epilogue
// (dconv_gpu_forward_conv times the cuDNN call alone). The algorithm is the
// fastest that cudnnFind measures at max_n; without a pool the fused
// cudnnConvolutionBiasActivationForward is used when it measures faster
// than the convolution plus a bias/ReLU pass.
#ifndef SC_KERNELS_DCONV_GPU_H
#define SC_KERNELS_DCONV_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/spconv.h"

// Activations fp32 for DC_FP32/DC_TF32, __half for DC_FP16/DC_FP16_NHWC.
typedef enum { DC_FP32 = 0, DC_TF32 = 1, DC_FP16 = 2, DC_FP16_NHWC = 3 } dconv_prec;

typedef struct dconv_gpu dconv_gpu;

// w: (K, C, R, S) dense fp32 weights; d gives geometry, bias, relu, pool and
// borders (offsets and values unused). max_n: the largest batch. Runs
// cudnnFind on g's stream (synchronises).
dconv_gpu *dconv_gpu_create(const gpu_ctx *g, const spconv_desc *d, const float *w,
                            dconv_prec p, int max_n, sc_err *err);

// out = layer(in) for n <= max_n images on stream st (capturable once the
// descriptors for n exist: a first call with a new n only sets descriptors).
int dconv_gpu_forward(const gpu_ctx *g, dconv_gpu *c, int n, const void *in, void *out,
                      cudaStream_t st, sc_err *err);

// One line: precision, algorithm, math type, workspace and mode.
void dconv_gpu_describe(const dconv_gpu *c, char *buf, size_t len);

void dconv_gpu_free(dconv_gpu *c);

// --- additions ------------------------------------------------------------------

// Sets the forward algorithm (a cudnnConvolutionFwdAlgo_t) without checking
// it (tests: an algorithm cuDNN refuses falls back to its heuristic choice).
void dconv_gpu_set_algo(dconv_gpu *c, int algo);

// The cuDNN convolution alone for n images on internal buffers (timing).
int dconv_gpu_forward_conv(const gpu_ctx *g, dconv_gpu *c, int n, cudaStream_t st, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
