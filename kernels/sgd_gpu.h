// GPU optimizer pieces over the flat fp32 master parameters (GPU builds
// only): the semantics of sgd_step_cpu (kernels/sgd.h), plus the multi-tensor
// passes that a mixed-precision step needs, each one launch over all tensors:
//   param_cast_gpu    master (K, C, HW) fp32 -> work copies (K, HW, CW) [fp16/fp32]
//                     (conv KCRS -> KRSC; linear (OUT, C, H, W) -> (OUT, H, W, C);
//                     channels c >= C of a padded copy are zero)
//   grad_gather_gpu   work gradients -> flat fp32 gradient in the master layout,
//                     unscaled by the loss scale, with a check for inf/NaN
//   sgd_step_gpu      masked SGD, skipped entirely when the check found one
//   scaler_update_gpu halves the loss scale after an overflow (counting the
//                     skipped step), doubles it after `interval` clean steps
#ifndef SC_KERNELS_SGD_GPU_H
#define SC_KERNELS_SGD_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SEG_WORK = 0,    // has a work copy and a work gradient (conv/linear weights)
    SEG_DIRECT = 1,  // gradient written straight into the flat fp32 vector
} param_seg_kind;

// One parameter tensor of the flat vector.
typedef struct {
    param_seg_kind kind;
    size_t offset;         // first float in the flat vector
    int k, c, hw;          // master layout (K, C, HW); SEG_DIRECT: k = count, c = hw = 1
    int cw;                // SEG_WORK: channels of the work copy (>= c)
    gpu_dtype wdt, gdt;    // SEG_WORK: dtype of the work copy and of the work gradient
    void *work;            // SEG_WORK: (K, HW, CW) [wdt]
    void *gwork;           // SEG_WORK: (K, HW, CW) [gdt]
} param_seg;

typedef struct param_segs param_segs;

// Uploads a segment table (and the block maps of the passes) to the device.
param_segs *param_segs_create(const param_seg *segs, int nseg, sc_err *err);
void param_segs_free(param_segs *s);

// Work copies of every SEG_WORK segment from master (nparam) fp32.
int param_cast_gpu(const gpu_ctx *g, const param_segs *s, const float *master, sc_err *err);

// grad (nparam) fp32: SEG_WORK segments gathered from their work gradients,
// SEG_DIRECT ones scaled in place; both multiplied by sc->inv_scale and
// checked for inf/NaN (sets sc->overflow) when sc is not NULL.
int grad_gather_gpu(const gpu_ctx *g, const param_segs *s, float *grad, gpu_scaler *sc,
                    sc_err *err);

// Masked SGD (kernels/sgd.h) over n floats with lr, momentum, weight decay and
// nesterov from hp; does nothing when sc is not NULL and sc->overflow is set.
int sgd_step_gpu(const gpu_ctx *g, size_t n, float *w, const float *grad, float *mom,
                 const float *mask, const gpu_hparams *hp, const gpu_scaler *sc, sc_err *err);

// Loss-scale update after a step (see above); stats->skipped counts overflows.
int scaler_update_gpu(const gpu_ctx *g, gpu_scaler *sc, gpu_stats *stats, int interval,
                      sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
