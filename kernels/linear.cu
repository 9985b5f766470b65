// GPU fully connected layer: three cublasGemmEx calls on row-major data seen
// as column-major transposes.
#include "kernels/linear_gpu.h"

// cuBLAS element type of a dtype.
static cudaDataType_t lin_type(gpu_dtype dt) { return dt == GDT_F16 ? CUDA_R_16F : CUDA_R_32F; }

// One gemm with fp32 compute (no TF32) and fp32 alpha/beta.
static int lin_gemm(const gpu_ctx *g, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const void *a, gpu_dtype adt, int lda, const void *b, gpu_dtype bdt,
                    int ldb, float beta, void *c, gpu_dtype cdt, int ldc, sc_err *err) {
    const float alpha = 1.0f;
    const cublasGemmAlgo_t algo =
        adt == GDT_F16 ? CUBLAS_GEMM_DEFAULT_TENSOR_OP : CUBLAS_GEMM_DEFAULT;
    cublasCheck(err, cublasGemmEx(g->cublas, ta, tb, m, n, k, &alpha, a, lin_type(adt), lda, b,
                                  lin_type(bdt), ldb, &beta, c, lin_type(cdt), ldc,
                                  CUBLAS_COMPUTE_32F, algo));
    return 0;
}

// y (N, OUT) = x (N, IN) wt^T: column-major y^T (OUT, N) = (wt^T)^T x^T, gemm(T, N).
extern "C" int linear_forward_gpu(const gpu_ctx *g, gpu_dtype dt, gpu_dtype ydt, int n, int in,
                                  int out, const void *x, const void *wt, void *y, sc_err *err) {
    return lin_gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, wt, dt, in, x, dt, in, 0.0f, y, ydt,
                    out, err);
}

// dx (N, IN) (+)= dy (N, OUT) wt (OUT, IN): column-major dx^T = wt^T dy^T.
extern "C" int linear_backward_data_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int in, int out,
                                        const void *dy, const void *wt, void *dx, int accumulate,
                                        sc_err *err) {
    return lin_gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, wt, dt, in, dy, dt, out,
                    accumulate ? 1.0f : 0.0f, dx, dt, in, err);
}

// dw (OUT, IN) = dy^T x: column-major dw^T (IN, OUT) = x^T (IN, N) dy (N, OUT).
extern "C" int linear_backward_filter_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int in,
                                          int out, const void *x, const void *dy, float *dw,
                                          sc_err *err) {
    return lin_gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, dt, in, dy, dt, out, 0.0f, dw,
                    GDT_F32, in, err);
}
