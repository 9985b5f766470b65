// Fully connected layer, fp32: y (N, OUT) = x (N, IN) wt^T + bias, wt (OUT, IN).
// The CPU version uses CBLAS sgemm.
#ifndef SC_KERNELS_LINEAR_H
#define SC_KERNELS_LINEAR_H

// Forward; bias may be NULL.
void linear_forward_cpu(int n, int in, int out, const float *x, const float *wt,
                        const float *bias, float *y);
// dx (N, IN) overwritten.
void linear_backward_data_cpu(int n, int in, int out, const float *dy, const float *wt,
                              float *dx);
// dw (OUT, IN) and dbias (OUT, may be NULL) overwritten.
void linear_backward_filter_cpu(int n, int in, int out, const float *x, const float *dy,
                                float *dw, float *dbias);

#endif
