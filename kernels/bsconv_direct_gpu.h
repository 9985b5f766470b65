// The direct kernel of the block-sparse convolution on the device
// (kernels/bsconv_direct.h has the layout; kernels/bsconv.cu picks between
// it, the halo kernel and the gather kernel per variant). GPU builds only.
#ifndef SC_KERNELS_BSCONV_DIRECT_GPU_H
#define SC_KERNELS_BSCONV_DIRECT_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/bsconv_direct.h"
#include "kernels/bsconv_halo_gpu.h"

// Variants: 16 pixel rows per warp, each warp its own rows (0); or 16 or 32
// rows (1, 2) shared by the CTA's BSD_WARPS warps, each a quarter of the
// group's units, their sums added through shared memory (long unit lists on
// few pixels). A CTA holds BSD_WARPS warps of one group. (Session 27 also
// timed 32 and 64 rows per warp unshared: never the fastest, so not built.)
#define BSD_VARIANTS 3
#define BSD_WARPS 4

// Pixel rows per warp of variant v.
int bsd_rows_per_warp(int v);

// Warps that share a pixel slice's units in variant v (1 or BSD_WARPS).
int bsd_unit_share(int v);

// Uploads h's unit codes with the chunks folded in (bsconv_direct_codes) to
// *codes on the current device (complete on return). 0 or -1.
int bsd_gpu_upload(const bsconv_hpack *h, uint32_t **codes, sc_err *err);

// Queues y = pool(act(conv(x) + bias [+ z])) with variant v (0 <= v <
// BSD_VARIANTS: every variant has a kernel for every group width) on
// g's stream; codes from bsd_gpu_upload, x 4-byte aligned, y and z too.
int bsd_gpu_run(const gpu_ctx *g, const bsconv_shape *s, const bsh_gpu *d, const uint32_t *codes, gpu_dtype dt,
                int v, const float *bias, const void *x, const void *z, void *y, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
