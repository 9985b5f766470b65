// Activation-sparse convolution (W. Xu, Y. Sun, S. Fan, H. Yu, X. Fu,
// "Accelerating Convolutional Neural Network by Exploiting Sparsity on GPUs",
// ACM TACO 2023): the non-zeros of a layer's input are found once and stored
// compactly, then only they are multiplied with the layer's non-zero weights,
// each product scattered into the output pixel it belongs to. A max pool that
// follows the conv is fused: only the pooled output is written.
//
// The layer is the direct sparse convolution's (kernels/spconv.h, spconv_desc:
// bordered NCHW activations, CSR rows padded to nnz_row with explicit zeros,
// offsets into the bordered input, bias + ReLU + max pool fused), so the same
// exported layer runs on either kernel and gives the same output. Each
// weight's (channel, row, column) is recovered from its offset; explicit
// zeros are skipped.
//
// The compact input (actconv_nz): one list per (image, channel, row) of the
// interior's non-zeros, in column order, each row's list in a slot as wide as
// the row (so no prefix sum over the tensor is needed to place it), with the
// list's length. The CUDA version (actconv.cu, API in actconv_gpu.h) builds
// the same lists with one warp per row and computes the same output.
#ifndef SC_KERNELS_ACTCONV_H
#define SC_KERNELS_ACTCONV_H

#include <stdint.h>

#include "kernels/error.h"
#include "kernels/spconv.h"

// Non-zeros of n bordered input images (n, C, H + 2 ib, W + 2 ib), per row.
typedef struct {
    int n, C, H, W;
    int32_t *cnt;   // (n, C, H) non-zeros of each interior row
    uint16_t *col;  // (n, C, H, W) row (i, c, y)'s columns at [((i*C + c)*H + y)*W, + cnt)
    float *val;     // (n, C, H, W) their values, same places
} actconv_nz;

// Checks that d is a layer the activation-sparse kernels run: sizes
// positive, P and Q consistent with H, W, stride and pad, in_border >= pad,
// H, W and the kernel sizes small enough for the packed indices (H, W <= 65535,
// R, S <= 255), a sane pool. 0, or -1 with the reason.
int actconv_check(const spconv_desc *d, sc_err *err);

// Channel, kernel row and column of the weight whose offset (spconv_offsets)
// is off; -1 when the offset is not one of d's windows.
int actconv_decode(const spconv_desc *d, int32_t off, int *c, int *r, int *s);

// Allocates the lists for n images of d's input; 0 or -1 (out of memory).
int actconv_nz_alloc(actconv_nz *z, const spconv_desc *d, int n, sc_err *err);
void actconv_nz_free(actconv_nz *z);

// Fills z with the non-zeros of in (n images, n <= the allocation's).
void actconv_nz_build(const spconv_desc *d, int n, const float *in, actconv_nz *z);

// Fraction of zeros in the interiors of n bordered input images of d.
double actconv_zero_fraction(const spconv_desc *d, int n, const float *in);

// out (n, K, Po + 2 ob, Qo + 2 ob) interior = pool(relu(conv(in) + bias)),
// computed from the non-zeros z of the input (built by actconv_nz_build from
// the same images); sums in double, so it equals spconv_forward_cpu up to the
// order of the additions. The output border is not written.
void actconv_forward_cpu(const spconv_desc *d, int n, const actconv_nz *z, float *out);

#endif
