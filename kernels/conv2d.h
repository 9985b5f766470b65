// 2-D convolution (cross-correlation, as in every DL framework), NCHW fp32,
// weights (K, C, R, S). CPU reference in conv2d_cpu.c; the GPU version (cuDNN,
// NHWC fp16/fp32) is in conv2d.cu with its API in conv2d_gpu.h.
#ifndef SC_KERNELS_CONV2D_H
#define SC_KERNELS_CONV2D_H

#include <stddef.h>

typedef struct {
    int n, c, h, w;     // input (N, C, H, W)
    int k, r, s;        // filters (K, C, R, S)
    int stride, pad;    // same in both directions; zero padding
    int p, q;           // output (N, K, P, Q): P = (H + 2 pad - R) / stride + 1
} conv2d_dims;

// Fills d, computing p and q; returns -1 when the output would be empty.
int conv2d_dims_init(conv2d_dims *d, int n, int c, int h, int w, int k, int r, int s,
                     int stride, int pad);

// Floats of scratch memory the CPU functions below need.
size_t conv2d_cpu_workspace(const conv2d_dims *d);

// y (N, K, P, Q) = conv(x (N, C, H, W), wt (K, C, R, S)) + bias (K) (bias may be NULL).
void conv2d_forward_cpu(const conv2d_dims *d, const float *x, const float *wt,
                        const float *bias, float *y, float *work);

// dx (N, C, H, W) = gradient w.r.t. the input, overwritten.
void conv2d_backward_data_cpu(const conv2d_dims *d, const float *dy, const float *wt,
                              float *dx, float *work);

// dw (K, C, R, S) and dbias (K, may be NULL) = gradients w.r.t. weights and
// bias, overwritten (not accumulated).
void conv2d_backward_filter_cpu(const conv2d_dims *d, const float *x, const float *dy,
                                float *dw, float *dbias, float *work);

#endif
