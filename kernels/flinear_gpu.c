// Fused linear layer through cuBLASLt (kernels/flinear_gpu.h). Row-major
// y (n, K) is the column-major K x n product op(A) B with A = w viewed as
// a C x K column-major matrix (transposed) and B = x as C x n.
#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>

#include "kernels/flinear_gpu.h"

#define FL_WS_BYTES ((size_t)32 << 20)

// Returns -1 from the caller when a cuBLASLt call does not succeed.
#define ltCheck(err, call)                                                               \
    do {                                                                                 \
        cublasStatus_t sc_l_ = (call);                                                   \
        if (sc_l_ != CUBLAS_STATUS_SUCCESS)                                              \
            return sc_fail((err), "%.200s failed: %s (%s:%d)", #call,                    \
                           cublasGetStatusString(sc_l_), __FILE__, __LINE__);            \
    } while (0)

struct flinear_gpu {
    int n, K, C, relu;
    gpu_dtype dt;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    void *ws;
};

// cuBLAS's data type of a storage type.
static cudaDataType_t fl_type(gpu_dtype dt) {
    return dt == GDT_F16 ? CUDA_R_16F : dt == GDT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Creates the matmul descriptor: A transposed, bias (+ReLU) epilogue.
static int fl_desc(flinear_gpu *l, sc_err *err) {
    const cublasComputeType_t ct = l->dt == GDT_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t ta = CUBLAS_OP_T;
    const cublasLtEpilogue_t ep = l->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    ltCheck(err, cublasLtMatmulDescCreate(&l->op, ct, CUDA_R_32F));
    ltCheck(err, cublasLtMatmulDescSetAttribute(l->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ltCheck(err, cublasLtMatmulDescSetAttribute(l->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    const cudaDataType_t t = fl_type(l->dt);
    ltCheck(err, cublasLtMatrixLayoutCreate(&l->la, t, l->C, l->K, l->C));
    ltCheck(err, cublasLtMatrixLayoutCreate(&l->lb, t, l->C, l->n, l->C));
    ltCheck(err, cublasLtMatrixLayoutCreate(&l->ld, t, l->K, l->n, l->K));
    return 0;
}

// Takes the heuristics' first algorithm within the workspace.
static int fl_algo(flinear_gpu *l, sc_err *err) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    size_t ws = FL_WS_BYTES;
    ltCheck(err, cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(l->lt, l->op, l->la, l->lb, l->ld, l->ld, pref, 1, &res,
                                            &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1)
        return sc_fail(err, "cuBLASLt has no algorithm for linear %dx%d at batch %d (%s)", l->K, l->C,
                       l->n, cublasGetStatusString(st));
    l->algo = res.algo;
    return 0;
}

// Creates the layer.
flinear_gpu *flinear_gpu_create(int n, int K, int C, int relu, gpu_dtype dt, sc_err *err) {
    flinear_gpu *l = calloc(1, sizeof *l);
    if (!l) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    l->n = n, l->K = K, l->C = C, l->relu = relu, l->dt = dt;
    cublasStatus_t st = cublasLtCreate(&l->lt);
    int rc = st == CUBLAS_STATUS_SUCCESS ? 0 : sc_fail(err, "cublasLtCreate: %s", cublasGetStatusString(st));
    if (!rc) rc = fl_desc(l, err);
    if (!rc) rc = fl_algo(l, err);
    if (!rc && cudaMalloc(&l->ws, FL_WS_BYTES) != cudaSuccess)
        rc = sc_fail(err, "cudaMalloc of %zu bytes (cuBLASLt workspace) failed", FL_WS_BYTES);
    if (rc) {
        flinear_gpu_free(l);
        return NULL;
    }
    return l;
}

// Queues y = act(x w^T + bias).
int flinear_gpu_run(const gpu_ctx *g, flinear_gpu *l, const void *x, const void *w,
                    const void *bias, void *y, sc_err *err) {
    const float one = 1.0f, zero = 0.0f;
    ltCheck(err, cublasLtMatmulDescSetAttribute(l->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
    ltCheck(err, cublasLtMatmul(l->lt, l->op, &one, w, l->la, x, l->lb, &zero, y, l->ld, y, l->ld,
                                &l->algo, l->ws, FL_WS_BYTES, g->stream));
    return 0;
}

// The product and its epilogue.
void flinear_gpu_describe(const flinear_gpu *l, char *buf, size_t len) {
    snprintf(buf, len, "cuBLASLt %dx%d, bias%s epilogue", l->K, l->C, l->relu ? "+relu" : "");
}

// Frees the layer.
void flinear_gpu_free(flinear_gpu *l) {
    if (!l) return;
    if (l->la) cublasLtMatrixLayoutDestroy(l->la);
    if (l->lb) cublasLtMatrixLayoutDestroy(l->lb);
    if (l->ld) cublasLtMatrixLayoutDestroy(l->ld);
    if (l->op) cublasLtMatmulDescDestroy(l->op);
    if (l->lt) cublasLtDestroy(l->lt);
    cudaFree(l->ws);
    free(l);
}
