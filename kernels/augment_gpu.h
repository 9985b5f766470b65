// GPU input preprocessing (GPU builds only): the semantics of
// augment_normalize_cpu (kernels/augment.h: reflect-padded crop, flip,
// (x/255 - mean)/std) with an NHWC output whose channels are padded with
// zeros to cpad (>= 3), so the first conv can use tensor-core kernels.
#ifndef SC_KERNELS_AUGMENT_GPU_H
#define SC_KERNELS_AUGMENT_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// img (N, 3, H, W) bytes -> out (N, H, W, cpad) [dt]; dx, dy, flip (N) may be NULL.
int augment_normalize_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w, int cpad,
                          const uint8_t *img, const int8_t *dx, const int8_t *dy,
                          const uint8_t *flip, const float mean[3], const float std[3],
                          void *out, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
