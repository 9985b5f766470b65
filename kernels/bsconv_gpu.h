// Block-sparse convolution on tensor cores (GPU builds only): the semantics
// of kernels/bsconv.h, y = pool(act(conv(x, w) + bias [+ z])), with x, z, y
// dense channels-last (n, H, W, C) / (n, Po, Qo, K) tensors in fp16 or bf16 storage
// and fp32 accumulation, the weights a BSR matrix of kb x cb blocks (Chen et
// al., "Efficient tensor core-based GPU kernels for structured sparsity
// under reduced precision", SC'21).
//
// Four kernels, chosen per layer by variant (a tuner measures them):
//
// The halo kernel (variants 4-17, kernels/bsconv_halo.h) for layers whose
// blocks are 8-channel aligned: a CTA (one per tile) stages its tile's input
// window in shared memory once per 64-channel chunk and its warps multiply
// their groups' 8-channel units straight from it (ldmatrix + mma.sync); its
// two-buffer variants also run a hybrid layer's single weights (the only
// kernel that does: the others refuse a layer with a remainder).
//
// The direct kernel (variants 18-20, kernels/bsconv_direct.h) for the same
// layers as the halo kernel, meant for small planes: each lane loads its MMA
// operands straight from x and the weights, several unit pairs ahead, with no
// shared-memory window and no barrier.
//
// The vector kernel (variants 21-28, kernels/bsconv_vec.h) for blocks of 8
// output channels of any width, above all 8x1: a CTA stages its tile's whole
// input window, and each warp builds its MMA operands by two-byte shared
// loads at its group's own non-zero columns, or (27-28) transposes the
// window so that one ldmatrix.trans loads a whole operand.
//
// The gather kernel (variants 0-3), for every layer: an implicit GEMM over
// the non-zero columns only: bsconv_gpu_create packs
// the BSR once (bsconv_pack: output channels in groups of up to 64, each
// with the list of its non-zero (r, s, c) columns padded to the MMA's
// k-step of 16, weights narrowed to fp16/bf16 in fragment order). A CTA
// computes 128 or 256 output pixels x one group: per k-step it gathers the
// pixels' input values of those 16 columns from x into shared memory (16-byte
// vectors when cb is a multiple of 8, zeros outside the image; optionally
// pipelined several k-steps deep with cp.async), multiplies
// them with the group's weights by WMMA 32x8x16 fragments (one per 8
// channels), and the epilogue adds bias (fp32) and z, applies the ReLU and
// writes the group's channels of y. With a max pool, the pixel rows are
// ordered window by window (4 or 16 consecutive rows per y pixel) and the
// epilogue takes the max across those lanes before one of them stores.
// run only launches (capturable).
#ifndef SC_KERNELS_BSCONV_GPU_H
#define SC_KERNELS_BSCONV_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/bsconv.h"

typedef struct bsconv_gpu bsconv_gpu;

// Checks and packs layer (s, w) and uploads it for storage type dt (GDT_F16
// or GDT_BF16) on g's device; bias: host (K) floats or NULL. s->n is the
// batch bsconv_gpu_run computes. Synchronises g's stream. NULL on failure.
bsconv_gpu *bsconv_gpu_create(const gpu_ctx *g, const bsconv_shape *s, const bsconv_bsr *w,
                              const float *bias, gpu_dtype dt, sc_err *err);

// Kernel variants: 0 and 1 gather a k-step's A tile and multiply it in turn
// with 128 (0) or 256 (1) pixels per CTA; 2 and 3 are the same tiles with
// the gathers (cp.async for vector layers) 5 (2) or 2 (3) k-steps ahead of
// the multiply. create picks 0 or 1 by the grid's
// size; bsconv_gpu_set_variant sets another (for a tuner): -1 when v is out
// of range or its shared memory does not fit the device.
// Variants 4 to 17 run the halo kernel (kernels/bsconv_halo.h: 8-channel
// aligned blocks, a 2x2 pool at most) with 128, 64 or 32 pixels x 2 to 8
// groups per CTA, one or two warps per group, two window buffers or (32 x 8) the whole
// window resident, or (12-14, where the grid is small) the input chunks split
// over several CTAs per tile, or (15-17) the outputs staged in shared memory and
// stored as whole rows (bsh_variant_get); create picks the first halo variant that
// runs the layer. Variants 18 to 20 run the direct kernel with 64 pixels of
// one group per CTA, or 16 or 32 pixels whose units the CTA's four warps
// share (bsconv_direct_gpu.h). Variants 21 to 28 run the vector kernel
// (blocks of 8 output channels, e.g. 8x1; kernels/bsconv_vec.h) with tiles
// of 64, 32 or 16 pixels and 64 to 512 channels per CTA, 27-28 with the
// window transposed (bsconv_vec_gpu.h);
// create picks the first that runs the layer when no halo variant does.
// run falls back to the gather kernel (same tile) when x (halo, vector:
// 16-byte; direct: 4-byte), y or z is not 4-byte aligned.
#define BSCONV_GATHER_VARIANTS 4
#define BSCONV_DIRECT_FIRST 18
#define BSCONV_VEC_FIRST 21
#define BSCONV_GPU_VARIANTS 29
int bsconv_gpu_set_variant(const gpu_ctx *g, bsconv_gpu *b, int v, sc_err *err);
int bsconv_gpu_variant(const bsconv_gpu *b);

// 1 when variant v can run the layer on g's device (else 0 and why, len bytes).
int bsconv_gpu_variant_usable(const gpu_ctx *g, const bsconv_gpu *b, int v, char *why, int len);

// Queues y (n, Po, Qo, K) = pool(act(conv(x, w) + bias [+ z])) on g's
// stream for x (n, H, W, C); z NULL: no residual (NULL with a pool, else
// -1). Device pointers of the layer's dtype; y must not overlap x (it may be z).
int bsconv_gpu_run(const gpu_ctx *g, const bsconv_gpu *b, const void *x, const void *z, void *y,
                   sc_err *err);

// Multiply-adds of the non-zero weights per image: (blocks x kb x cb + the
// remainder's entries) x the
// conv pixels computed (P x Q, or the pooled windows' pixels; useful FLOP/s =
// 2 x this x n / time).
double bsconv_gpu_macs(const bsconv_gpu *b);

// One line: block, groups, channels per group, packed columns, variant.
void bsconv_gpu_describe(const bsconv_gpu *b, char *buf, size_t len);

// Frees the device arrays (NULL is fine).
void bsconv_gpu_free(bsconv_gpu *b);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
