// cuSPARSE baseline (kernels/spmm_gpu.h): im2col into a dense (C*R*S, n*P*Q)
// row-major matrix, cusparseSpMM with the CSR weights (K, C*R*S), then an
// epilogue kernel for bias, ReLU and pooling into the bordered output.
// cusparse.h is included only here (its deprecation warnings silenced).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cusparse.h>
#pragma GCC diagnostic pop

#include "kernels/device_gpu.h"
#include "kernels/epilogue_gpu.h"
#include "kernels/spmm_gpu.h"

// Returns -1 from the caller when a cuSPARSE call does not succeed.
#define cusparseCheck(err, call)                                                          \
    do {                                                                                  \
        cusparseStatus_t sc_p_ = (call);                                                  \
        if (sc_p_ != CUSPARSE_STATUS_SUCCESS)                                             \
            return SC_GPU_FAIL_(err, #call, cusparseGetErrorString(sc_p_));               \
    } while (0)

struct spmm_gpu {
    spconv_desc d;             // geometry (array pointers not kept)
    gpu_dtype dt;
    int max_n, cur_n, po, qo, hb, wb, crs;
    cusparseHandle_t h;
    cusparseSpMatDescr_t A;
    cusparseDnMatDescr_t B, C;
    cusparseSpMMAlg_t alg;
    int *rowptr, *cols;        // CSR (K + 1), (K * nnz_row)
    void *vals;                // (K * nnz_row) in dt
    void *bmat;                // (crs, max_n*P*Q) im2col
    void *cmat;                // (K, max_n*P*Q)
    void *buf;
    size_t buf_bytes;
    float *bias;               // (K) or NULL
};

// --- kernels ----------------------------------------------------------------------

// b (crs, n*P*Q) = the conv windows of the bordered input (shift sh = border - pad).
template <typename T>
__global__ void spmm_im2col_kernel(const T *in, T *b, int n, int C, int R, int S, int stride,
                                   int hb, int wb, int P, int Q, int sh) {
    const size_t npq = (size_t)n * P * Q, total = npq * C * R * S;
    SC_GRID_LOOP(idx, total) {
        const size_t pix = idx % npq;
        const int crs = (int)(idx / npq);
        const int q = (int)(pix % Q), p = (int)(pix / Q % P), i = (int)(pix / ((size_t)P * Q));
        const int s = crs % S, r = crs / S % R, c = crs / (R * S);
        b[idx] = in[(((size_t)i * C + c) * hb + p * stride + r + sh) * wb + q * stride + s + sh];
    }
}

// out (bordered NCHW) = pool(relu(cm + bias)) for cm (K, n*P*Q).
template <typename T>
__global__ void spmm_epilogue_kernel(const T *cm, T *out, const sc_epi e) {
    const size_t npq = (size_t)e.n * e.P * e.Q;
    sc_epi_run(e, out, [&](int i, int k, int p, int q) {
        return sc_tof(cm[(size_t)k * npq + ((size_t)i * e.P + p) * e.Q + q]);
    });
}

// --- setup ------------------------------------------------------------------------

// CSR of the layer: columns c*R*S + r*S + s recovered from the offsets, sorted per row.
static int spmm_csr(const gpu_ctx *g, spmm_gpu *s, const spconv_desc *d, sc_err *err) {
    const int nnz = d->nnz_row, sh = d->in_border - d->pad;
    const size_t total = (size_t)d->K * nnz;
    std::vector<int> rp(d->K + 1), col(total ? total : 1);
    std::vector<float> val(total ? total : 1);
    std::vector<std::pair<int, float>> row(nnz);
    for (int k = 0; k < d->K; k++) {
        rp[k] = k * nnz;
        for (int j = 0; j < nnz; j++) {
            const long o = d->offsets[(size_t)k * nnz + j], plane = (long)s->hb * s->wb;
            const int c = (int)(o / plane), r = (int)(o % plane / s->wb) - sh;
            const int q = (int)(o % s->wb) - sh;
            if (o < 0 || c >= d->C || r < 0 || r >= d->R || q < 0 || q >= d->S)
                return sc_fail(err, "spmm: offset %ld of row %d outside the conv window", o, k);
            row[j] = {(c * d->R + r) * d->S + q, d->values[(size_t)k * nnz + j]};
        }
        std::sort(row.begin(), row.end());
        for (int j = 0; j < nnz; j++)
            col[(size_t)k * nnz + j] = row[j].first, val[(size_t)k * nnz + j] = row[j].second;
    }
    rp[d->K] = (int)total;
    const size_t es = gpu_dtype_size(s->dt);
    float *tmp = NULL;
    cudaCheck(err, cudaMalloc((void **)&s->rowptr, (d->K + 1) * sizeof(int)));
    cudaCheck(err, cudaMalloc((void **)&s->cols, col.size() * sizeof(int)));
    cudaCheck(err, cudaMalloc(&s->vals, val.size() * es));
    cudaCheck(err, cudaMalloc((void **)&tmp, val.size() * sizeof(float)));
    SC_TRY(gpu_upload(s->rowptr, rp.data(), rp.size() * sizeof(int), err));
    SC_TRY(gpu_upload(s->cols, col.data(), col.size() * sizeof(int), err));
    SC_TRY(gpu_upload(tmp, val.data(), val.size() * sizeof(float), err));
    int rc = gpu_convert(g, val.size(), GDT_F32, tmp, s->dt, s->vals, err);
    if (!rc && cudaStreamSynchronize(g->stream) != cudaSuccess) rc = sc_fail(err, "spmm: sync");
    cudaFree(tmp);
    return rc;
}

// cuDNN-style data type of the activations.
static cudaDataType spmm_type(const spmm_gpu *s) {
    return s->dt == GDT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

// Dense descriptors for n images (row-major im2col and result).
static int spmm_descs(spmm_gpu *s, int n, sc_err *err) {
    const int64_t npq = (int64_t)n * s->d.P * s->d.Q;
    if (s->B) cusparseDestroyDnMat(s->B), s->B = NULL;
    if (s->C) cusparseDestroyDnMat(s->C), s->C = NULL;
    cusparseCheck(err, cusparseCreateDnMat(&s->B, s->crs, npq, npq, s->bmat, spmm_type(s),
                                           CUSPARSE_ORDER_ROW));
    cusparseCheck(err, cusparseCreateDnMat(&s->C, s->d.K, npq, npq, s->cmat, spmm_type(s),
                                           CUSPARSE_ORDER_ROW));
    s->cur_n = n;
    return 0;
}

// Runs one SpMM with algorithm alg (buffer already large enough).
static int spmm_mul(spmm_gpu *s, cusparseSpMMAlg_t alg, sc_err *err) {
    const float one = 1.0f, zero = 0.0f;
    cusparseCheck(err, cusparseSpMM(s->h, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                    CUSPARSE_OPERATION_NON_TRANSPOSE, &one, s->A, s->B, &zero,
                                    s->C, CUDA_R_32F, alg, s->buf));
    return 0;
}

// Median time (ms) of 5 SpMMs with alg at max_n; INFINITY when cuSPARSE refuses it.
static float spmm_time_alg(const gpu_ctx *g, spmm_gpu *s, cusparseSpMMAlg_t alg) {
    const float one = 1.0f, zero = 0.0f;
    size_t need = 0;
    if (cusparseSpMM_bufferSize(s->h, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                CUSPARSE_OPERATION_NON_TRANSPOSE, &one, s->A, s->B, &zero, s->C,
                                CUDA_R_32F, alg, &need) != CUSPARSE_STATUS_SUCCESS)
        return INFINITY;
    if (need > s->buf_bytes) {
        cudaFree(s->buf), s->buf = NULL, s->buf_bytes = 0;
        if (cudaMalloc(&s->buf, need ? need : 16) != cudaSuccess) return INFINITY;
        s->buf_bytes = need;
    }
    sc_err e;
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) || cudaEventCreate(&e1)) return INFINITY;
    float t[5];
    int ok = 1;
    for (int r = -1; r < 5 && ok; r++) {
        cudaEventRecord(e0, g->stream);
        ok = spmm_mul(s, alg, &e) == 0;
        cudaEventRecord(e1, g->stream);
        ok = ok && cudaEventSynchronize(e1) == cudaSuccess;
        if (ok && r >= 0) cudaEventElapsedTime(&t[r], e0, e1);
    }
    (void)cudaGetLastError();
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    if (!ok) return INFINITY;
    std::sort(t, t + 5);
    return t[2];
}

// Handle, matrices and the fastest accepted SpMM algorithm at max_n.
static int spmm_init(const gpu_ctx *g, spmm_gpu *s, const spconv_desc *d, sc_err *err) {
    s->hb = d->H + 2 * d->in_border, s->wb = d->W + 2 * d->in_border;
    s->crs = d->C * d->R * d->S;
    spconv_out_size(d, &s->po, &s->qo);
    if (d->in_border < d->pad || s->max_n < 1)
        return sc_fail(err, "spmm: border %d below padding %d or max_n %d", d->in_border, d->pad,
                       s->max_n);
    cusparseCheck(err, cusparseCreate(&s->h));
    cusparseCheck(err, cusparseSetStream(s->h, g->stream));
    SC_TRY(spmm_csr(g, s, d, err));
    const size_t es = gpu_dtype_size(s->dt), npq = (size_t)s->max_n * d->P * d->Q;
    cudaCheck(err, cudaMalloc(&s->bmat, (size_t)s->crs * npq * es));
    cudaCheck(err, cudaMalloc(&s->cmat, (size_t)d->K * npq * es));
    SC_TRY(gpu_fill_uniform(g, s->dt, (size_t)s->crs * npq, s->bmat, -1.0f, 1.0f, 5, err));
    if (d->bias) {
        cudaCheck(err, cudaMalloc((void **)&s->bias, d->K * sizeof(float)));
        SC_TRY(gpu_upload(s->bias, d->bias, d->K * sizeof(float), err));
        cudaCheck(err, cudaDeviceSynchronize());
    }
    cusparseCheck(err, cusparseCreateCsr(&s->A, d->K, s->crs, (int64_t)d->K * d->nnz_row,
                                         s->rowptr, s->cols, s->vals, CUSPARSE_INDEX_32I,
                                         CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                         spmm_type(s)));
    SC_TRY(spmm_descs(s, s->max_n, err));
    static const cusparseSpMMAlg_t algs[] = {CUSPARSE_SPMM_ALG_DEFAULT, CUSPARSE_SPMM_CSR_ALG1,
                                             CUSPARSE_SPMM_CSR_ALG2, CUSPARSE_SPMM_CSR_ALG3};
    float best = INFINITY;
    for (int i = 0; i < 4; i++) {
        const float t = spmm_time_alg(g, s, algs[i]);
        if (t < best) best = t, s->alg = algs[i];
    }
    if (best == INFINITY) return sc_fail(err, "spmm: cuSPARSE accepts no SpMM algorithm");
    return spmm_time_alg(g, s, s->alg) < INFINITY ? 0 : sc_fail(err, "spmm: SpMM failed");
}

// --- public API -------------------------------------------------------------------

// Uploads the layer for up to max_n images.
extern "C" spmm_gpu *spmm_gpu_create(const gpu_ctx *g, const spconv_desc *d, gpu_dtype dt,
                                     int max_n, sc_err *err) {
    spmm_gpu *s = (spmm_gpu *)calloc(1, sizeof *s);
    if (!s) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    s->d = *d, s->dt = dt, s->max_n = max_n;
    if (spmm_init(g, s, d, err)) {
        spmm_gpu_free(s);
        return NULL;
    }
    return s;
}

// out = layer(in): im2col, SpMM, epilogue on stream st.
extern "C" int spmm_gpu_forward(const gpu_ctx *g, spmm_gpu *s, int n, const void *in, void *out,
                                cudaStream_t st, sc_err *err) {
    const spconv_desc *d = &s->d;
    if (n <= 0) return 0;
    if (n > s->max_n) return sc_fail(err, "spmm: batch %d above max_n %d", n, s->max_n);
    if (n != s->cur_n) SC_TRY(spmm_descs(s, n, err));
    cusparseCheck(err, cusparseSetStream(s->h, st));
    const size_t cols = (size_t)n * d->P * d->Q, outs = (size_t)n * d->K * s->po * s->qo;
    const int sh = d->in_border - d->pad;
    SC_DISPATCH(s->dt, spmm_im2col_kernel<T><<<sc_blocks(g, cols * s->crs, 256), 256, 0, st>>>(
                           (const T *)in, (T *)s->bmat, n, d->C, d->R, d->S, d->stride, s->hb,
                           s->wb, d->P, d->Q, sh));
    cudaCheckLaunch(err);
    SC_TRY(spmm_mul(s, s->alg, err));
    const sc_epi e = {n, d->K, d->P, d->Q, s->po, s->qo, d->out_border, s->bias, d->relu,
                      d->pool_k, d->pool_stride, d->pool_pad};
    SC_DISPATCH(s->dt, spmm_epilogue_kernel<T><<<sc_blocks(g, outs, 256), 256, 0, st>>>(
                           (const T *)s->cmat, (T *)out, e));
    cudaCheckLaunch(err);
    return 0;
}

// One line: data type and SpMM algorithm.
extern "C" void spmm_gpu_describe(const spmm_gpu *s, char *buf, size_t len) {
    snprintf(buf, len, "cusparse %s spmm alg %d buf %zuK", s->dt == GDT_F16 ? "fp16" : "fp32",
             (int)s->alg, s->buf_bytes >> 10);
}

// Frees the baseline (NULL is fine).
extern "C" void spmm_gpu_free(spmm_gpu *s) {
    if (!s) return;
    if (s->A) cusparseDestroySpMat(s->A);
    if (s->B) cusparseDestroyDnMat(s->B);
    if (s->C) cusparseDestroyDnMat(s->C);
    if (s->h) cusparseDestroy(s->h);
    cudaFree(s->rowptr), cudaFree(s->cols), cudaFree(s->vals), cudaFree(s->bmat);
    cudaFree(s->cmat), cudaFree(s->buf), cudaFree(s->bias);
    free(s);
}
