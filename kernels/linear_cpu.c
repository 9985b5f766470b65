// CPU fully connected layer, fp32, on CBLAS sgemm:
// y (N, OUT) = x (N, IN) wt^T + bias, wt (OUT, IN). BLAS runs single-threaded
// (see conv2d_cpu.c: OpenMP does the threading in the CPU kernels), so the
// results do not depend on the thread count.
#include "linear.h"

#include <cblas.h>
#include <stddef.h>

// Makes OpenBLAS single-threaded.
static void linear_blas_serial(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// Forward; bias may be NULL.
void linear_forward_cpu(int n, int in, int out, const float *x, const float *wt,
                        const float *bias, float *y) {
    linear_blas_serial();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, wt, in,
                0.0f, y, out);
    if (!bias) return;
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) y[(size_t)i * out + o] += bias[o];
}

// dx (N, IN) = dy (N, OUT) wt (OUT, IN), overwritten.
void linear_backward_data_cpu(int n, int in, int out, const float *dy, const float *wt,
                              float *dx) {
    linear_blas_serial();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, wt, in,
                0.0f, dx, in);
}

// dw (OUT, IN) = dy^T x and dbias (OUT, may be NULL) = column sums of dy
// (in double), overwritten.
void linear_backward_filter_cpu(int n, int in, int out, const float *x, const float *dy,
                                float *dw, float *dbias) {
    linear_blas_serial();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 0.0f,
                dw, in);
    if (!dbias) return;
    for (int o = 0; o < out; o++) {
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += dy[(size_t)i * out + o];
        dbias[o] = (float)sum;
    }
}
