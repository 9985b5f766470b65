// The halo kernel of the block-sparse convolution on the device
// (kernels/bsconv_halo.h has the layout; kernels/bsconv.cu picks between
// this kernel and the gather kernel per variant). GPU builds only.
#ifndef SC_KERNELS_BSCONV_HALO_GPU_H
#define SC_KERNELS_BSCONV_HALO_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/bsconv_halo.h"

// The halo weights on the device (sizes as in bsconv_hpack).
typedef struct {
    int cc, nchunks, np, nf, ngroups, nunits;
    int32_t *k0, *nk, *ustart;  // device
    uint32_t *units;            // device
    void *vals;                 // device (nunits * nf * 64) of the layer's dtype
} bsh_gpu;

// A halo-kernel variant: pixel rows per tile, warps per CTA, warps per group
// (each warp a slice of the tile's pixels), and whether every channel chunk
// of the window stays in shared memory (all loads issued at once: for small
// planes, whose CTAs are few and run a long chain of chunks) instead of two
// buffers taking turns.
typedef struct {
    int tm, nw, ws, resident;
} bsh_variant;
#define BSH_VARIANTS 8
bsh_variant bsh_variant_get(int v);

// Uploads h for storage dt on g's stream (synchronised). 0 or -1.
int bsh_gpu_upload(const gpu_ctx *g, const bsconv_hpack *h, gpu_dtype dt, bsh_gpu *d, sc_err *err);

// Frees the device arrays (a zeroed struct is fine).
void bsh_gpu_free(bsh_gpu *d);

// Checks that variant v runs layer s on g's device (registers: tm / 16 x np / 8
// accumulator fragments at most 16; shared memory) and allows its shared memory.
int bsh_gpu_prepare(const gpu_ctx *g, const bsconv_shape *s, const bsh_gpu *d, gpu_dtype dt, int v,
                    sc_err *err);

// Queues y = pool(act(conv(x) + bias [+ z])) with variant v (prepared) on g's stream.
int bsh_gpu_run(const gpu_ctx *g, const bsconv_shape *s, const bsh_gpu *d, gpu_dtype dt, int v,
                const float *bias, const void *x, const void *z, void *y, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
