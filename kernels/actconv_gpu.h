// Activation-sparse convolution on the GPU (GPU builds only): the semantics
// of kernels/actconv.h (the direct sparse conv's layer and bordered NCHW
// activations; bias + ReLU + max pool fused, only the pooled output written)
// with fp32 or fp16 activations; weights and sums in fp32.
//
// A forward is two launches on the caller's stream:
//  1. one warp per input row (image, channel, row) lists the row's non-zeros
//     in column order (a ballot and a prefix count within the warp) into a
//     slot as wide as the row, with the list's length (actconv_nz's layout);
//  2. one CTA per (output row tile, output channel tile, image) keeps the
//     tile's conv pixels as fp32 accumulators in shared memory; per input
//     channel it stages the listed non-zeros of the input rows the tile's
//     windows read and the tile's non-zero weights of that channel, then
//     every (non-zero input, non-zero weight) pair adds its product to the
//     conv pixel it belongs to (shared-memory atomics); a channel without
//     weights in the tile costs one read. The epilogue adds the bias, applies
//     the ReLU and the max pool over the tile's conv rows (a pooled tile
//     recomputes the conv rows its windows share with the next) and writes
//     the interior of the output only.
// The tile sizes come from the device's shared memory per block (gpu_ctx.dev).
// The non-zero lists are allocated once for the largest batch (create), so
// forward neither allocates nor synchronises and can be captured in a CUDA graph.
#ifndef SC_KERNELS_ACTCONV_GPU_H
#define SC_KERNELS_ACTCONV_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/actconv.h"

typedef struct actconv_gpu actconv_gpu;

// Uploads layer d (its weights regrouped per output-channel tile and input
// channel, explicit zeros dropped) for activations of type dt (GDT_F32 or
// GDT_F16) and batches up to max_n; sizes tiles for g's device. NULL with
// the reason when d fails actconv_check or no tile fits.
actconv_gpu *actconv_gpu_create(const gpu_ctx *g, const spconv_desc *d, gpu_dtype dt, int max_n,
                                sc_err *err);

// out = layer(in) for n <= max_n images on stream st; in (n, C, H + 2 ib,
// W + 2 ib), out (n, K, Po + 2 ob, Qo + 2 ob), borders untouched.
int actconv_gpu_forward(const actconv_gpu *a, int n, const void *in, void *out, cudaStream_t st,
                        sc_err *err);

// One line: tile sizes, threads, shared memory.
void actconv_gpu_describe(const actconv_gpu *a, char *buf, size_t len);

void actconv_gpu_free(actconv_gpu *a);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
