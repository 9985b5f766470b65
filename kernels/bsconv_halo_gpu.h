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

// The halo weights on the device (sizes as in bsconv_hpack), and the split
// variants' scratch (bsh_gpu_split_alloc): each split CTA's partial sums and a
// counter per tile, which the tile's last CTA resets, so a layer's launches
// must not overlap (one stream, as in the engine's graph).
typedef struct {
    int cc, nchunks, np, nf, ngroups, nunits;
    int full;                   // 1: every group has np channels, group g from g * np (staged stores apply)
    int32_t *k0, *nk, *ustart;  // device
    uint32_t *units;            // device
    void *vals;                 // device (nunits * nf * 64) of the layer's dtype
    int nrem;                   // the remainder's entries (0: none, the arrays NULL)
    int32_t *rstart;            // device (ngroups * nchunks * np + 1)
    uint32_t *rcode;            // device (nrem)
    void *rvals;                // device (nrem) of the layer's dtype
    int sms;                    // the device's SMs when the scratch was sized (the split fills them)
    float *part;                // device, part_floats
    int *cnt;                   // device, ncnt zeros between launches
    long long part_floats, ncnt;
} bsh_gpu;

// A halo-kernel variant: pixel rows per tile, warps per CTA, warps per group
// (each warp a slice of the tile's pixels), whether every channel chunk
// of the window stays in shared memory (all loads issued at once: for small
// planes, whose CTAs are few and run a long chain of chunks) instead of two
// buffers taking turns, and the split: 0 none; k >= 2: the chunks in k slices
// (at most one per chunk), one CTA each, the tile's last CTA adding the
// slices' sums before the epilogue; -1: as many slices as give the GPU about
// BSH_SPLIT_FILL CTAs per SM (small planes leave most SMs idle otherwise).
// stage: the epilogue writes the CTA's outputs to shared memory first and
// copies whole 16-byte pieces of pixel rows to y (no pool, no split, not
// resident, full groups; y 16-byte aligned, else the register epilogue).
typedef struct {
    int tm, nw, ws, resident, split, stage;
} bsh_variant;
#define BSH_VARIANTS 14
#define BSH_SPLIT_FILL 4
bsh_variant bsh_variant_get(int v);

// Uploads h for storage dt on g's stream (synchronised). 0 or -1.
int bsh_gpu_upload(const gpu_ctx *g, const bsconv_hpack *h, gpu_dtype dt, bsh_gpu *d, sc_err *err);

// Sizes and allocates d's split scratch for layer s on g's device (the largest
// any split variant needs; none when no split applies). 0 or -1.
int bsh_gpu_split_alloc(const gpu_ctx *g, const bsconv_shape *s, bsh_gpu *d, sc_err *err);

// Slices of variant v's split for layer s (1: no split).
int bsh_gpu_nsplit(const bsconv_shape *s, const bsh_gpu *d, int v);

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
