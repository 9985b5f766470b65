// Direct sparse convolution on the GPU (GPU builds only): the semantics of
// kernels/spconv.h (bordered NCHW activations, CSR rows with precomputed
// offsets, bias + ReLU + max pool fused) with fp32, fp16 (half2) or fp16
// activations with 4-bit codebook weights.
//
// A layer is uploaded once (spconv_gpu_create) and owns a list of kernel
// variants for a batch size: a tiled kernel (input tile in shared memory,
// warp-uniform weights, output channels x conv rows x images blocked in
// registers, C split in chunks when it does not fit), a kernel that runs the
// output channels along the lanes (small images, batch 1; at larger batches
// with 2-16 images per block for planes of <= 64 output pixels), a sparse
// linear kernel and a plain one-thread-per-output kernel that handles any
// geometry. Every variant but the plain one skips the rows' explicit zeros
// and runs each row to its own length; the rows are reordered by length
// (dealt evenly over the tiled kernel's warps, side by side in the others) and
// the epilogue writes each to its own output channel. A 1x1 layer with stride
// s > 1 reaches the tiled and ell kernels as stride 1 over every s-th input
// row and column, so they stage only the inputs the windows read; where the
// default band of a tiled variant needs C in several chunks, the list also
// holds the same variant with a shorter band that fits one chunk.
// spconv_gpu_tune checks the variants against the plain kernel, times those
// that agree and keeps the fastest; forward only launches, so it can be
// captured in a CUDA graph.
#ifndef SC_KERNELS_SPCONV_GPU_H
#define SC_KERNELS_SPCONV_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>
#include <stdint.h>

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/spconv.h"

// Activations: fp32 for SPG_FP32, __half for SPG_FP16 and SPG_CB4.
typedef enum { SPG_FP32 = 0, SPG_FP16 = 1, SPG_CB4 = 2 } spconv_gpu_vtype;

typedef struct spconv_gpu spconv_gpu;

// Uploads a layer (copies d's arrays). SPG_CB4: codes = packed 4-bit indices,
// two per byte, low nibble first, in values order ((K*nnz_row+1)/2 bytes);
// codebook = 16 floats; row_scale = (K) per-row factor or NULL (weight =
// codebook[code] * row_scale[k]); entries whose d->values is 0 count as zero
// whatever their code. d->values is given (decoded) for every type. A layer
// with H = W = R = S = 1 is a linear layer (input (n, C), output (n, K)).
spconv_gpu *spconv_gpu_create(const spconv_desc *d, spconv_gpu_vtype vt, const uint8_t *codes,
                              const float *codebook, const float *row_scale, sc_err *err);

// Checks every variant for batch n against the plain kernel on the given
// input (real activations, not zeros), times those that agree on the given
// buffers and keeps the fastest; a variant that cannot be built, fails or
// disagrees is skipped (spconv_gpu_skipped). *ms (may be NULL) receives the
// median time. Allocates two outputs' worth of check buffers; synchronises.
int spconv_gpu_tune(spconv_gpu *g, int n, const void *in, void *out, cudaStream_t st, float *ms,
                    sc_err *err);

// Number of variants the last tune skipped; note (may be NULL) receives why
// the first of them was.
int spconv_gpu_skipped(const spconv_gpu *g, char *note, size_t len);

// out = layer(in) for n images; no allocation, no sync: capturable.
int spconv_gpu_forward(const spconv_gpu *g, int n, const void *in, void *out, cudaStream_t st,
                       sc_err *err);

// One line describing the chosen variant.
void spconv_gpu_describe(const spconv_gpu *g, char *buf, size_t len);

void spconv_gpu_free(spconv_gpu *g);

// --- additions: variant control (tests, benchmarks) --------------------------

// Number of variants listed for batch n (variant 0 is the plain kernel).
int spconv_gpu_nvariants(const spconv_gpu *g, int n);

// Makes variant v of the list for batch n the one forward runs.
int spconv_gpu_use(spconv_gpu *g, int n, int v, sc_err *err);

// Useful multiply-adds of one forward for n images (K * nnz_row * P * Q * n,
// pool windows counted once per conv pixel).
double spconv_gpu_macs(const spconv_gpu *g, int n);

// Variants skip the layer's explicit zeros (weights exactly 0) and run its
// rows in order of their length (on: 1, the default); 0 restores rows padded
// to nnz_row in their own order (benchmarks). Rebuilds the chosen variant.
int spconv_gpu_compact(spconv_gpu *g, int on, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
