// GPU convolution plans on cuDNN's legacy API: NHWC tensors, KRSC filters,
// algorithms chosen by timing at plan creation, fixed workspace.
#include <stdio.h>
#include <stdlib.h>

#include "kernels/conv2d_gpu.h"

struct conv_gpu {
    conv2d_dims d;
    gpu_dtype dt;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd[3];  // forward, backward data, backward filter
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t math[3];
    size_t ws[3];
    int has_bwd;
};

// Scratch buffers for the algorithm search.
struct conv_find_bufs {
    void *x, *w, *y, *ws;
    size_t ws_bytes;
};

// --- descriptors ------------------------------------------------------------

// cuDNN element type of a dtype.
static cudnnDataType_t conv_type(gpu_dtype dt) {
    return dt == GDT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

// Creates the tensor, filter and convolution descriptors of a plan.
static int conv_descs(conv_gpu *c, sc_err *err) {
    const conv2d_dims *d = &c->d;
    const cudnnDataType_t t = conv_type(c->dt);
    cudnnCheck(err, cudnnCreateTensorDescriptor(&c->xd));
    cudnnCheck(err, cudnnCreateTensorDescriptor(&c->yd));
    cudnnCheck(err, cudnnCreateFilterDescriptor(&c->wd));
    cudnnCheck(err, cudnnSetTensor4dDescriptor(c->xd, CUDNN_TENSOR_NHWC, t, d->n, d->c, d->h, d->w));
    cudnnCheck(err, cudnnSetTensor4dDescriptor(c->yd, CUDNN_TENSOR_NHWC, t, d->n, d->k, d->p, d->q));
    cudnnCheck(err, cudnnSetFilter4dDescriptor(c->wd, t, CUDNN_TENSOR_NHWC, d->k, d->c, d->r, d->s));
    const cudnnMathType_t math = c->dt == GDT_F16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    for (int i = 0; i < 3; i++) {
        cudnnCheck(err, cudnnCreateConvolutionDescriptor(&c->cd[i]));
        cudnnCheck(err, cudnnSetConvolution2dDescriptor(c->cd[i], d->pad, d->pad, d->stride,
                                                        d->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT));
        cudnnCheck(err, cudnnSetConvolutionMathType(c->cd[i], math));
        c->math[i] = math;
    }
    int n, k, p, q;
    cudnnCheck(err, cudnnGetConvolution2dForwardOutputDim(c->cd[0], c->xd, c->wd, &n, &k, &p, &q));
    if (n != d->n || k != d->k || p != d->p || q != d->q)
        return sc_fail(err, "conv plan: cuDNN output %dx%dx%dx%d differs from %dx%dx%dx%d", n, k,
                       p, q, d->n, d->k, d->p, d->q);
    return 0;
}

// --- algorithm search -------------------------------------------------------

// Accepts a timed result: it ran, fits the limit, gives the same bits on every
// run (no atomics: a training run repeats), and (fp32) used no TF32.
static int conv_result_ok(const conv_gpu *c, cudnnStatus_t st, size_t mem, cudnnMathType_t m,
                          cudnnDeterminism_t det, size_t limit) {
    if (st != CUDNN_STATUS_SUCCESS || mem > limit || det != CUDNN_DETERMINISTIC) return 0;
    return c->dt == GDT_F16 || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

// Math mode to run a chosen algorithm with (fp32 stays on plain FMA).
static cudnnMathType_t conv_run_math(const conv_gpu *c, cudnnMathType_t found) {
    return c->dt == GDT_F16 ? found : CUDNN_FMA_MATH;
}

// Times the forward algorithms and keeps the fastest acceptable one.
static int conv_find_fwd(const gpu_ctx *g, conv_gpu *c, const conv_find_bufs *b, size_t limit,
                         sc_err *err) {
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int nr = 0;
    cudnnCheck(err, cudnnFindConvolutionForwardAlgorithmEx(
                        g->cudnn, c->xd, b->x, c->wd, b->w, c->cd[0], c->yd, b->y,
                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nr, r, b->ws, b->ws_bytes));
    for (int i = 0; i < nr; i++) {
        if (!conv_result_ok(c, r[i].status, r[i].memory, r[i].mathType, r[i].determinism, limit))
            continue;
        c->fwd = r[i].algo, c->ws[0] = r[i].memory, c->math[0] = conv_run_math(c, r[i].mathType);
        cudnnCheck(err, cudnnSetConvolutionMathType(c->cd[0], c->math[0]));
        return 0;
    }
    return sc_fail(err, "conv plan: no forward algorithm for %dx%dx%dx%d k%d r%d s%d", c->d.n,
                   c->d.c, c->d.h, c->d.w, c->d.k, c->d.r, c->d.stride);
}

// Times the backward-data algorithms and keeps the fastest acceptable one.
static int conv_find_bwd_data(const gpu_ctx *g, conv_gpu *c, const conv_find_bufs *b,
                              size_t limit, sc_err *err) {
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int nr = 0;
    cudnnCheck(err, cudnnFindConvolutionBackwardDataAlgorithmEx(
                        g->cudnn, c->wd, b->w, c->yd, b->y, c->cd[1], c->xd, b->x,
                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nr, r, b->ws, b->ws_bytes));
    for (int i = 0; i < nr; i++) {
        if (!conv_result_ok(c, r[i].status, r[i].memory, r[i].mathType, r[i].determinism, limit))
            continue;
        c->bwd_data = r[i].algo, c->ws[1] = r[i].memory;
        c->math[1] = conv_run_math(c, r[i].mathType);
        cudnnCheck(err, cudnnSetConvolutionMathType(c->cd[1], c->math[1]));
        return 0;
    }
    return sc_fail(err, "conv plan: no backward-data algorithm for %dx%dx%dx%d k%d", c->d.n,
                   c->d.c, c->d.h, c->d.w, c->d.k);
}

// Times the backward-filter algorithms and keeps the fastest acceptable one.
static int conv_find_bwd_filter(const gpu_ctx *g, conv_gpu *c, const conv_find_bufs *b,
                                size_t limit, sc_err *err) {
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int nr = 0;
    cudnnCheck(err, cudnnFindConvolutionBackwardFilterAlgorithmEx(
                        g->cudnn, c->xd, b->x, c->yd, b->y, c->cd[2], c->wd, b->w,
                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &nr, r, b->ws, b->ws_bytes));
    for (int i = 0; i < nr; i++) {
        if (!conv_result_ok(c, r[i].status, r[i].memory, r[i].mathType, r[i].determinism, limit))
            continue;
        c->bwd_filter = r[i].algo, c->ws[2] = r[i].memory;
        c->math[2] = conv_run_math(c, r[i].mathType);
        cudnnCheck(err, cudnnSetConvolutionMathType(c->cd[2], c->math[2]));
        return 0;
    }
    return sc_fail(err, "conv plan: no backward-filter algorithm for %dx%dx%dx%d k%d", c->d.n,
                   c->d.c, c->d.h, c->d.w, c->d.k);
}

// Allocates and fills the search buffers; the workspace shrinks until it fits.
static int conv_find_alloc(const gpu_ctx *g, const conv_gpu *c, size_t limit, conv_find_bufs *b,
                           sc_err *err) {
    const conv2d_dims *d = &c->d;
    const size_t es = gpu_dtype_size(c->dt);
    const size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = (size_t)d->k * d->c * d->r * d->s;
    const size_t ny = (size_t)d->n * d->k * d->p * d->q;
    cudaCheck(err, cudaMalloc(&b->x, nx * es));
    cudaCheck(err, cudaMalloc(&b->w, nw * es));
    cudaCheck(err, cudaMalloc(&b->y, ny * es));
    SC_TRY(gpu_fill_uniform(g, c->dt, nx, b->x, -1.0f, 1.0f, 1, err));
    SC_TRY(gpu_fill_uniform(g, c->dt, nw, b->w, -0.1f, 0.1f, 2, err));
    SC_TRY(gpu_fill_uniform(g, c->dt, ny, b->y, -1.0f, 1.0f, 3, err));
    for (b->ws_bytes = limit; b->ws_bytes > 0; b->ws_bytes /= 2) {
        if (cudaMalloc(&b->ws, b->ws_bytes) == cudaSuccess) break;
        (void)cudaGetLastError();
        b->ws = NULL;
    }
    return 0;
}

// Frees the search buffers.
static void conv_find_free(conv_find_bufs *b) {
    cudaFree(b->x);
    cudaFree(b->w);
    cudaFree(b->y);
    cudaFree(b->ws);
}

// --- plans ------------------------------------------------------------------

// Builds the plan's descriptors and picks its algorithms.
static int conv_plan_init(const gpu_ctx *g, conv_gpu *c, size_t limit, sc_err *err) {
    SC_TRY(conv_descs(c, err));
    conv_find_bufs b = {};
    int rc = conv_find_alloc(g, c, limit, &b, err);
    if (!rc) rc = conv_find_fwd(g, c, &b, limit, err);
    if (!rc && c->has_bwd) rc = conv_find_bwd_data(g, c, &b, limit, err);
    if (!rc && c->has_bwd) rc = conv_find_bwd_filter(g, c, &b, limit, err);
    cudaStreamSynchronize(g->stream);
    conv_find_free(&b);
    return rc;
}

// Plans a convolution of shape d.
extern "C" conv_gpu *conv_gpu_create(const gpu_ctx *g, gpu_dtype dt, const conv2d_dims *d,
                                     int backward, size_t ws_limit, sc_err *err) {
    conv_gpu *c = (conv_gpu *)calloc(1, sizeof *c);
    if (!c) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    c->d = *d;
    c->dt = dt;
    c->has_bwd = backward;
    if (conv_plan_init(g, c, ws_limit, err)) {
        conv_gpu_free(c);
        return NULL;
    }
    return c;
}

// Frees a plan (NULL is fine).
extern "C" void conv_gpu_free(conv_gpu *c) {
    if (!c) return;
    if (c->xd) cudnnDestroyTensorDescriptor(c->xd);
    if (c->yd) cudnnDestroyTensorDescriptor(c->yd);
    if (c->wd) cudnnDestroyFilterDescriptor(c->wd);
    for (int i = 0; i < 3; i++)
        if (c->cd[i]) cudnnDestroyConvolutionDescriptor(c->cd[i]);
    free(c);
}

// Workspace bytes the chosen algorithms need.
extern "C" size_t conv_gpu_workspace(const conv_gpu *c) {
    size_t m = c->ws[0];
    if (c->has_bwd && c->ws[1] > m) m = c->ws[1];
    if (c->has_bwd && c->ws[2] > m) m = c->ws[2];
    return m;
}

// The plan's shape.
extern "C" const conv2d_dims *conv_gpu_dims(const conv_gpu *c) { return &c->d; }

// Chosen algorithms as text.
extern "C" void conv_gpu_describe(const conv_gpu *c, char *buf, size_t len) {
    snprintf(buf, len, "fwd %d (%zu KB, math %d) bwd-data %d (%zu KB, math %d) "
             "bwd-filter %d (%zu KB, math %d)", (int)c->fwd, c->ws[0] >> 10, (int)c->math[0],
             c->has_bwd ? (int)c->bwd_data : -1, c->ws[1] >> 10, (int)c->math[1],
             c->has_bwd ? (int)c->bwd_filter : -1, c->ws[2] >> 10, (int)c->math[2]);
}

// --- running ----------------------------------------------------------------

// y = conv(x, w).
extern "C" int conv_gpu_forward(const gpu_ctx *g, const conv_gpu *c, const void *x,
                                const void *w, void *y, void *ws, sc_err *err) {
    const float one = 1.0f, zero = 0.0f;
    cudnnCheck(err, cudnnConvolutionForward(g->cudnn, &one, c->xd, x, c->wd, w, c->cd[0], c->fwd,
                                            ws, c->ws[0], &zero, c->yd, y));
    return 0;
}

// dx (+)= gradient w.r.t. the input.
extern "C" int conv_gpu_backward_data(const gpu_ctx *g, const conv_gpu *c, const void *dy,
                                      const void *w, void *dx, int accumulate, void *ws,
                                      sc_err *err) {
    if (!c->has_bwd) return sc_fail(err, "conv plan made without backward algorithms");
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cudnnCheck(err, cudnnConvolutionBackwardData(g->cudnn, &one, c->wd, w, c->yd, dy, c->cd[1],
                                                 c->bwd_data, ws, c->ws[1], &beta, c->xd, dx));
    return 0;
}

// dw = gradient w.r.t. the filters.
extern "C" int conv_gpu_backward_filter(const gpu_ctx *g, const conv_gpu *c, const void *x,
                                        const void *dy, void *dw, void *ws, sc_err *err) {
    if (!c->has_bwd) return sc_fail(err, "conv plan made without backward algorithms");
    const float one = 1.0f, zero = 0.0f;
    cudnnCheck(err, cudnnConvolutionBackwardFilter(g->cudnn, &one, c->xd, x, c->yd, dy, c->cd[2],
                                                   c->bwd_filter, ws, c->ws[2], &zero, c->wd, dw));
    return 0;
}
