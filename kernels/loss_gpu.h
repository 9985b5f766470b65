// GPU softmax cross-entropy with label smoothing, and against soft targets
// (GPU builds only): the semantics of softmax_xent_cpu and soft_xent_cpu
// (kernels/loss.h), with the batch's loss sum, top-1 hits and image count
// added to device-resident statistics.
#ifndef SC_KERNELS_LOSS_GPU_H
#define SC_KERNELS_LOSS_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// logits (N, K) [ldt], labels (N) device ints; smoothing is read from
// hp->smoothing. stats gets loss_sum, correct and count added. When dlogits
// is not NULL it receives (softmax - target) * grad_scale, times sc->scale
// when sc is not NULL, as (N, K) [gdt].
int softmax_xent_gpu(const gpu_ctx *g, gpu_dtype ldt, gpu_dtype gdt, int n, int k,
                     const void *logits, const int *labels, const gpu_hparams *hp,
                     float grad_scale, const gpu_scaler *sc, void *dlogits, gpu_stats *stats,
                     sc_err *err);

// logits (N, K) [ldt], soft (N, K) fp32 target distributions and labels (N)
// device ints (top-1 hits only). stats gets loss_sum (-sum q log softmax),
// correct and count added. When dlogits is not NULL it receives
// (softmax * sum q - q) * grad_scale, times sc->scale when sc is not NULL,
// as (N, K) [gdt].
int soft_xent_gpu(const gpu_ctx *g, gpu_dtype ldt, gpu_dtype gdt, int n, int k,
                  const void *logits, const float *soft, const int *labels, float grad_scale,
                  const gpu_scaler *sc, void *dlogits, gpu_stats *stats, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
