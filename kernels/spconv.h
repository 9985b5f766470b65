// Direct sparse convolution (Pietron and Zurek, section 7; Park et al.,
// "Faster CNNs with Direct Sparse Convolutions and Guided Pruning"): weights in CSR,
// one row per output channel, every row padded to the same number of entries,
// column indices precomputed as offsets into the zero-bordered input, so the
// inner loop is one load and one FMA per non-zero. Bias, ReLU and a following
// max pool are fused. Activations are NCHW planes with a border of zeros kept
// in memory (the border replaces the conv's zero padding).
//
// This header: the layer description and the plain-C reference. The CUDA
// version (spconv.cu, API in spconv_gpu.h) computes the same thing.
#ifndef SC_KERNELS_SPCONV_H
#define SC_KERNELS_SPCONV_H

#include <stdint.h>

typedef struct {
    int K, C, R, S;         // output channels, input channels, kernel rows and columns
    int stride, pad;        // the conv's stride and zero padding
    int H, W;               // input plane size without border
    int P, Q;               // conv output size: (H + 2 pad - R) / stride + 1, ...
    int in_border;          // zeros around each input plane in memory, >= pad;
                            // a plane is (H + 2 in_border) x (W + 2 in_border)
    int nnz_row;            // entries per row (row k: [k*nnz_row, (k+1)*nnz_row))
    const int32_t *offsets; // (K, nnz_row) offset of the weight's input element from the
                            // window origin in the bordered input: see spconv_offsets()
    const float *values;    // (K, nnz_row) weights; explicit zeros allowed
    const float *bias;      // (K) or NULL
    int relu;               // 1: y = max(y, 0) after the bias
    int pool_k, pool_stride, pool_pad;  // max pool after the ReLU, pool_k 0: none
    int out_border;         // zeros kept around each output plane in memory
} spconv_desc;

// Output plane size after the fused pool (P, Q when there is none).
void spconv_out_size(const spconv_desc *d, int *po, int *qo);

// Fills offsets (K, nnz_row) from column indices c*R*S + r*S + s for the
// desc's in_border: ((c*Hb) + r + in_border - pad) * Wb + s + in_border - pad,
// Hb = H + 2 in_border, Wb = W + 2 in_border. The window origin of output
// pixel (p, q) is element (p*stride)*Wb + q*stride of an image's first plane.
void spconv_offsets(const spconv_desc *d, const int32_t *indices, int32_t *offsets);

// out (n, K, Po + 2 ob, Qo + 2 ob) interior = pool(relu(conv(in) + bias)) for
// in (n, C, H + 2 ib, W + 2 ib) with zero borders; the output border is not
// written (the caller keeps it zero).
void spconv_forward_cpu(const spconv_desc *d, int n, const float *in, float *out);

// Fills acc (P, Q) with the raw sums (no bias) of output channel k of image i;
// arg is what the caller passed to spconv_planes_cpu.
typedef void (*spconv_plane_fn)(const spconv_desc *d, const void *arg, int i, int k, double *acc);

// spconv_forward_cpu's driver and epilogue for any way of summing a plane:
// every (image, channel) plane's sums from fn, then bias, ReLU and the fused
// max pool into the interior of out (kernels/actconv_cpu.c sums from the
// input's non-zeros).
void spconv_planes_cpu(const spconv_desc *d, int n, spconv_plane_fn fn, const void *arg, float *out);

#endif
