// Block-sparse convolution (Chen et al., "Efficient tensor core-based GPU
// kernels for structured sparsity under reduced precision", SC'21; Rumi et
// al., "Accelerating Sparse CNN Inference on GPUs with Performance-Aware
// Weight Pruning", PACT 2020): the layer's weights are the (K, R*S*C) matrix
// in KRSC column order (column (r*S + s)*C + c) stored as BSR (scipy's
// bsr_matrix) with blocks of kb output channels x cb input channels at one
// kernel tap. Activations are dense channels-last: x (n, H, W, C), the
// residual z and the output y (n, Po, Qo, K), as in the dense engine
// (kernels/fconv_gpu.h). y = pool(act(conv(x, w) + bias [+ z])), the pool
// optional (and then no z).
//
// This header: the layer description, its validation, the plain-C reference
// (fp32 arithmetic; a caller comparing with fp16/bf16 storage rounds the
// inputs first) and the packed layout the CUDA kernel reads
// (kernels/bsconv.cu, API in kernels/bsconv_gpu.h), built on the host by
// bsconv_pack and walked in plain C by bsconv_packed_forward_cpu so that
// the layout is tested without a GPU.
#ifndef SC_KERNELS_BSCONV_H
#define SC_KERNELS_BSCONV_H

#include <stdint.h>

#include "kernels/error.h"

// Geometry and epilogue of one convolution.
typedef struct {
    int n, C, H, W;   // batch, input channels, input plane
    int K, R, S;      // output channels, kernel rows and columns (R, S <= 255)
    int stride, pad;  // the conv's stride and zero padding (both sides)
    int relu;         // 1: ReLU after bias and residual
    int pool;         // 0 or 1: none; 2 or 4: max pool of pool x pool windows with stride
                      // pool, no padding, after the ReLU (no residual then)
} bsconv_shape;

// A block-sparse (K, R*S*C) weight matrix in BSR form. Block row i holds
// output channels [i*kb, (i+1)*kb); its blocks are indptr[i] .. indptr[i+1]-1;
// block b covers columns [indices[b]*cb, (indices[b]+1)*cb) (one tap, cb
// consecutive input channels, since cb divides C) and its values are
// data[b*kb*cb + row*cb + col]. Block columns need not be sorted; a block
// column listed twice in one block row is rejected.
//
// A hybrid layer (blocks plus a small share of single weights outside them)
// also has a remainder: CSR over the K output channels of the same (K,
// R*S*C) matrix, columns strictly ascending within a row; rem_indptr NULL:
// none. Only the halo kernel runs a remainder (kernels/bsconv_halo.h).
typedef struct {
    int kb, cb;              // block: kb output channels x cb input channels
    const int32_t *indptr;   // (K/kb + 1), indptr[0] = 0, non-decreasing
    const int32_t *indices;  // (indptr[K/kb]) block columns, < R*S*C/cb
    const float *data;       // (indptr[K/kb], kb, cb)
    const int32_t *rem_indptr;   // (K + 1) or NULL: the remainder's rows
    const int32_t *rem_indices;  // (rem_indptr[K]) KRSC columns (tap * C + c), < R*S*C
    const float *rem_data;       // (rem_indptr[K]) their weights
} bsconv_bsr;

// Entries of w's remainder (0 without one).
int32_t bsconv_rem_count(const bsconv_bsr *w, int K);

// Conv output plane size: P = (H + 2 pad - R) / stride + 1, Q likewise.
void bsconv_out_size(const bsconv_shape *s, int *P, int *Q);

// Output plane size of y: P / pool, Q / pool (rounded down) with a pool, else P, Q.
void bsconv_y_size(const bsconv_shape *s, int *Po, int *Qo);

// Checks the shape (positive sizes, P, Q >= 1, R, S <= 255, C <= 65535, pool
// 0, 1, 2 or 4 and at most P, Q) and the BSR structure against it (kb
// divides K, cb divides C, indptr and indices in range, no repeated block
// column in a row), and the remainder when there is one (rows from 0,
// non-decreasing, columns in range and strictly ascending). 0 or -1.
int bsconv_check(const bsconv_shape *s, const bsconv_bsr *w, sc_err *err);

// y (n, Po, Qo, K) = pool(act(conv(x, w) + bias [+ z])) in fp32 for x (n,
// H, W, C); bias (K) or NULL, z (n, Po, Qo, K) or NULL (NULL with a pool);
// w must pass bsconv_check.
void bsconv_forward_cpu(const bsconv_shape *s, const bsconv_bsr *w, const float *bias,
                        const float *x, const float *z, float *y);

// act(acc + bias[k] [+ z[o]]) of output channel k at y element o (the epilogue
// before any pool; bias and z may be NULL).
float bsconv_epi_cpu(const bsconv_shape *s, float acc, const float *bias, const float *z, size_t o,
                     int k);

// --- the packed layout of the CUDA kernel --------------------------------------

// Column code of a padding column (its weights are zero, its input is never read).
#define BSCONV_PAD 0xFFFFFFFFu
// Columns per k-step of the tensor-core MMA (16x16x16 / 32x8x16 shapes).
#define BSCONV_KSTEP 16
// Output channels per MMA fragment (the n of WMMA's 32x8x16 shape).
#define BSCONV_NFRAG 8
// Widest channel group (np <= BSCONV_NMAX).
#define BSCONV_NMAX 64

// One channel group: a CTA computes a tile of output pixels x these channels.
typedef struct {
    int32_t k0, nk;      // first output channel and channel count (nk <= np)
    int32_t col0, steps; // first packed column (a multiple of BSCONV_KSTEP) and k-steps
} bsconv_group;

// The weights rearranged for the kernel. The output channels are split into
// groups: one group per block row when 8 <= kb <= 64 (kb = 8m); slices of 64
// channels of one block row when kb > 64; ceil(8 / kb) consecutive block rows
// when kb < 8 (their columns merged). A group's columns are the union of its
// block rows' non-zero columns (ascending), cb per block, padded with
// BSCONV_PAD to a multiple of BSCONV_KSTEP. Values are in fragment order:
// vals[((col / 16) * (np / 8) + j / 8) * 128 + (col % 16) * 8 + j % 8] is the
// weight of column col (a packed column index) for channel k0 + j of the
// column's group (zero for padding, for channels past nk, and where a merged
// block row lacks that column).
typedef struct {
    int np;              // channels per group padded: 8, 16, 32 or 64
    int ngroups, ncols;  // groups; packed columns (all groups)
    int vec;             // 1: every aligned run of 8 columns is 8 consecutive channels
                         // at one tap (cb % 8 == 0): the kernel gathers 16-byte vectors
    bsconv_group *grp;   // (ngroups)
    uint32_t *cols;      // (ncols) r | s << 8 | c << 16, or BSCONV_PAD
    float *vals;         // (ncols * np) in fragment order (fp32; the GPU narrows them)
} bsconv_packed;

// Builds the packed layout of a checked layer's blocks (host memory; free
// with bsconv_packed_free; a remainder is not packed: the gather kernel
// refuses a hybrid layer, the halo one takes it from bsconv_hpack). 0 or -1
// (bad layer, or out of memory).
int bsconv_pack(const bsconv_shape *s, const bsconv_bsr *w, bsconv_packed *p, sc_err *err);

// Index in vals of packed column col, group channel j (the fragment order above).
size_t bsconv_packed_at(int np, int col, int j);

// Frees what bsconv_pack allocated (a zeroed struct is fine).
void bsconv_packed_free(bsconv_packed *p);

// The kernel's loop over the packed layout in plain C (fp32): the same
// result as bsconv_forward_cpu up to the order of the sums; for tests.
void bsconv_packed_forward_cpu(const bsconv_shape *s, const bsconv_packed *p, const float *bias,
                               const float *x, const float *z, float *y);

#endif
