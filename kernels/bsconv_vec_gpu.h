// The vector kernel of the block-sparse convolution on the device
// (kernels/bsconv_vec.h has the layout; kernels/bsconv.cu picks between it
// and the other kernels per variant). GPU builds only.
#ifndef SC_KERNELS_BSCONV_VEC_GPU_H
#define SC_KERNELS_BSCONV_VEC_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/bsconv_vec.h"

// Variants: tiles of at most 64, 32 or 16 pixel rows, each of the CTA's
// BSV_WARPS warps holding the sums of 1 to 8 groups of 8 output channels at
// once (64: 1 or 2, 32: 2 or 4, 16: 4 or 8): more groups per CTA stage the
// window fewer times, fewer give more CTAs. Variants 6 and 7: the window
// transposed, tiles of 8 x 8 pixels, 1 or 2 groups per warp (no pool; a
// multiple of 32 input channels; at least 8 output columns).
#define BSV_VARIANTS 8
#define BSV_WARPS 8

// The layer's packed weights on the device.
typedef struct {
    int ng, nsteps;
    int32_t *gstart;            // device (ng + 1): group g is channels 8g .. 8g + 7
    uint32_t *codes;            // device (nsteps * 16)
    void *vals;                 // device (nsteps * 128) of the layer's dtype
    int ready;                  // 1 + the variant bsv_gpu_prepare set up (0: none)
    bsv_geom geo;               // that variant's tile geometry
    unsigned char order[BSV_TM_MAX];  // and its row order (bsconv_vec_row_order), made once, not per launch
} bsv_gpu;

// Uploads p, the weights narrowed to dt on the device (complete on return). 0 or -1.
int bsv_gpu_upload(const gpu_ctx *g, const bsconv_vpack *p, gpu_dtype dt, bsv_gpu *d, sc_err *err);

// Frees the device arrays (a zeroed struct is fine).
void bsv_gpu_free(bsv_gpu *d);

// Groups per warp of variant v.
int bsv_groups_per_warp(int v);

// The tile geometry of layer s on variant v.
void bsv_gpu_geom(const bsconv_shape *s, int v, bsv_geom *g);

// Checks that variant v runs layer s on g's device (shared memory), allows
// it, and keeps its geometry and row order in d (uploaded). 0 or -1.
int bsv_gpu_prepare(const gpu_ctx *g, const bsconv_shape *s, gpu_dtype dt, int v, bsv_gpu *d, sc_err *err);

// Queues y = pool(act(conv(x) + bias [+ z])) with variant v (prepared in d) on
// g's stream; x 16-byte aligned, y and z 4-byte aligned.
int bsv_gpu_run(const gpu_ctx *g, const bsconv_shape *s, const bsv_gpu *d, gpu_dtype dt, int v,
                const float *bias, const void *x, const void *z, void *y, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
