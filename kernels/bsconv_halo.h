// The halo layout of the block-sparse convolution (kernels/bsconv.h): a
// second tensor-core kernel for layers whose blocks are 8-channel aligned
// (cb a multiple of 8, C and K multiples of 8, no pool or a 2x2 pool).
//
// A CTA owns a tile of output pixels (ti images x tr rows x tq columns) and
// loads the input window the tile reads (its "halo": hr x hw positions per
// image; for a 1x1 conv with a stride, only the pixels it reads) into shared
// memory once per chunk of cc input channels, by 16-byte copies. Its warps then multiply that window with one output-channel group
// each: the group's weight columns are "units" of 8 consecutive input
// channels at one kernel tap, and for every unit the warp points the rows
// of an ldmatrix straight at the window (pixel + tap), so nothing is copied
// a second time (implicit GEMM from shared memory; the same idea as the
// dense-block kernels of Rumi et al., "Accelerating Sparse CNN Inference on
// GPUs with Performance-Aware Weight Pruning", PACT 2020, and of Chen et al.,
// "Efficient tensor core-based GPU kernels for structured sparsity under
// reduced precision", SC'21). Units are multiplied two at a time by
// mma.m16n8k16 (one by m16n8k8 when a chunk has an odd count); the epilogue
// works on the accumulator registers (bias, residual, ReLU, the 2x2 max over
// a window's four pixels by lane shuffles). A hybrid layer's single weights
// (bsconv_bsr's remainder) are added after each chunk's units on the CUDA
// cores, each lane reading the window's elements at its accumulators' rows.
//
// This header: the packed weights (plain C, built from bsconv_pack's
// groups), the tile geometry shared by the CUDA kernel and the plain-C walk
// (BSH_HD functions compile for both), and that walk, which runs the
// kernel's loops on the CPU so that the layout is tested without a GPU.
#ifndef SC_KERNELS_BSCONV_HALO_H
#define SC_KERNELS_BSCONV_HALO_H

#include <stdint.h>

#include "kernels/bsconv.h"
#include "kernels/error.h"

#ifdef __CUDACC__
#define BSH_HD __host__ __device__ __forceinline__
#else
#define BSH_HD static inline
#endif

// Lanes per warp and values per (unit, 8-channel fragment) in the packed weights.
#define BSH_LANES 32
#define BSH_FRAG_VALS 64

// The weights of a layer in unit order. Group g (bsconv_pack's groups: k0,
// nk, up to np channels) has its units of channel chunk c at
// units[ustart[g * nchunks + c] .. ustart[g * nchunks + c + 1]). Unit u's
// code is r | s << 8 | j << 16 (kernel tap r, s; j: which 8 channels of the
// chunk). Its weights, for 8-channel fragment f of the group, are
// vals[(u * nf + f) * 64 + lane * 2 + e] = w[channel k0 + f * 8 + lane / 4]
// [input channel chunk * cc + j * 8 + (lane % 4) * 2 + e] at the tap: the
// B operand of an m16n8k8 MMA as lane `lane` holds it.
typedef struct {
    int cc, nchunks;           // channels per chunk (64, 32, 16 or 8; divides C), chunks
    int np, nf, ngroups;       // channels per group (padded), np / 8, groups
    int nunits;                // units of all groups
    int32_t *k0, *nk;          // (ngroups) first channel and channel count of each group
    int32_t *ustart;           // (ngroups * nchunks + 1)
    uint32_t *units;           // (nunits)
    float *vals;               // (nunits * nf * 64)
    // The remainder (hybrid layers; nrem 0 and the arrays NULL without one):
    // the single weights of group g, chunk c, group channel j (0 <= j < np)
    // are rcode/rvals[rstart[(g * nchunks + c) * np + j] .. next start), each
    // code r | s << 8 | (e / 8) << 16 | (e % 8) << 24 for input channel
    // chunk * cc + e at tap (r, s): the unit code of its 8 channels plus its
    // place among them. The kernel adds them after the chunk's units.
    int nrem;
    int32_t *rstart;           // (ngroups * nchunks * np + 1)
    uint32_t *rcode;           // (nrem)
    float *rvals;              // (nrem)
} bsconv_hpack;

// 1 when the halo kernel can compute the layer (else 0 and why).
int bsconv_halo_applies(const bsconv_shape *s, const bsconv_bsr *w, char *why, int len);

// Builds the halo weights of a checked layer that the kernel applies to. 0 or -1.
int bsconv_hpack_build(const bsconv_shape *s, const bsconv_bsr *w, bsconv_hpack *h, sc_err *err);

// Frees what bsconv_hpack_build allocated (a zeroed struct is fine).
void bsconv_hpack_free(bsconv_hpack *h);

// --- the tile ---------------------------------------------------------------------------

// A CTA's pixel tile and its input window. Tiles cover the conv plane
// pc x qc (with a pool: the pooled plane times 2, odd edges dropped).
typedef struct {
    int tm;              // pixel rows of the GEMM tile (16 per MMA fragment), ti * tr * tq <= tm
    int ti, tr, tq;      // images, conv rows and columns per tile
    int sub;             // input pixels between neighbouring window positions: the stride for
                         // a 1x1 conv (its window holds just the pixels it reads), else 1
    int ps;              // window positions between neighbouring output pixels: stride / sub
    int hr, hw;          // window rows and columns per image: (tr - 1) * ps + R, likewise
    int pc, qc;          // conv plane the tiles cover
    int nti, ntr, ntq;   // tiles along images, rows and columns
    int win;             // 2: the pixel rows are ordered window by window (2x2 pool), else 1
    int swz;             // shift of the shared-memory swizzle (bsh_swizzle)
} bsconv_htile;

// The tile of tm pixel rows for layer s (tm 32, 64 or 128).
void bsconv_htile_pick(const bsconv_shape *s, int tm, int cc, bsconv_htile *t);

// Tiles in the grid (nti * ntr * ntq).
long long bsconv_htile_count(const bsconv_htile *t);

// Bytes of one chunk's window in shared memory (16-bit elements).
long long bsconv_htile_bytes(const bsconv_htile *t, int cc);

// Tile pixel i -> image, row and column in the tile; 0 when i is past the tile.
BSH_HD int bsh_pixel(const bsconv_htile *t, int i, int *ti, int *tr, int *tq) {
    if (i >= t->ti * t->tr * t->tq) return 0;
    if (t->win == 2) {  // window w = i / 4, its pixel (i / 2 % 2, i % 2)
        const int w = i >> 2, wq = t->tq >> 1, wr = t->tr >> 1;
        *ti = w / (wr * wq);
        *tr = (w / wq % wr) * 2 + (i >> 1 & 1);
        *tq = (w % wq) * 2 + (i & 1);
    } else {
        *ti = i / (t->tr * t->tq);
        *tr = i / t->tq % t->tr;
        *tq = i % t->tq;
    }
    return 1;
}

// Window position (ti, y, x) as one index.
BSH_HD int bsh_pos(const bsconv_htile *t, int ti, int y, int x) { return (ti * t->hr + y) * t->hw + x; }

// 16-byte slot in the window of channel group j (of nch per position) at
// position p: j xor-swizzled by the position so that the 8 rows of an
// ldmatrix (8 neighbouring pixels, `stride` positions apart) fall on distinct
// banks.
BSH_HD int bsh_slot(const bsconv_htile *t, int p, int j, int nch) {
    return p * nch + (j ^ ((p >> t->swz) & (nch - 1)));
}

// The layer's tile index -> the first image, conv row and column it covers
// (32-bit arithmetic: a layer has fewer than 2^31 tiles, as the kernel's grid).
BSH_HD void bsh_tile_origin(const bsconv_htile *t, int tile, int *i0, int *r0, int *q0) {
    const int rq = tile / t->ntq;
    *q0 = (tile - rq * t->ntq) * t->tq;
    *r0 = rq % t->ntr * t->tr;
    *i0 = rq / t->ntr * t->ti;
}

// Slice z of nsplit over n chunks: chunks [*c0, *c1), every chunk in exactly
// one slice, none empty when nsplit <= n (the split variants' CTAs, blockIdx.z).
BSH_HD void bsh_split_range(int z, int nsplit, int n, int *c0, int *c1) {
    *c0 = (int)((long long)z * n / nsplit);
    *c1 = (int)((long long)(z + 1) * n / nsplit);
}

// The kernel's loops in plain C (fp32): per tile, the window staged chunk by
// chunk in the swizzled layout, every group's units multiplied from it, the
// epilogue per pixel; y as bsconv_forward_cpu gives it up to the order of sums
// (a layer of fewer than 2^31 tiles, as on the GPU; else y is left alone).
// nsplit > 1: the chunks in nsplit slices (bsh_split_range), each slice's sums
// apart, then added in slice order, as the split variants do; 1 is no split.
void bsconv_halo_forward_cpu(const bsconv_shape *s, const bsconv_hpack *h, const bsconv_htile *t, int nsplit,
                             const float *bias, const float *x, const float *z, float *y);

#endif
