// Pooling, NCHW fp32: max and average over k x k windows, and global average.
#ifndef SC_KERNELS_POOL_H
#define SC_KERNELS_POOL_H

typedef struct {
    int n, c, h, w;     // input (N, C, H, W)
    int k, stride, pad; // window, stride, padding
    int p, q;           // output (N, C, P, Q): P = (H + 2 pad - k) / stride + 1
} pool_dims;

// Fills d, computing p and q; returns -1 when the output would be empty.
int pool_dims_init(pool_dims *d, int n, int c, int h, int w, int k, int stride, int pad);

// Max pool; padding never wins. Ties: the first maximum in row-major window order.
void maxpool_forward_cpu(const pool_dims *d, const float *x, float *y);
// dx overwritten: each dy goes to its window's first maximum in x.
void maxpool_backward_cpu(const pool_dims *d, const float *x, const float *dy, float *dx);

// Average pool; padded positions count as zeros, the divisor is always k*k.
void avgpool_forward_cpu(const pool_dims *d, const float *x, float *y);
void avgpool_backward_cpu(const pool_dims *d, const float *dy, float *dx);

// Global average pool: x (N, C, HW) -> y (N, C).
void gap_forward_cpu(int n, int c, int hw, const float *x, float *y);
void gap_backward_cpu(int n, int c, int hw, const float *dy, float *dx);

#endif
