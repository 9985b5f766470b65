// cuDNN dense convolution with spconv's semantics (kernels/dconv_gpu.h):
// descriptors over the bordered tensors (the input's border is the conv's
// padding, so cuDNN runs with pad 0 on a strided view), algorithm by
// cudnnFind, and small epilogue kernels for bias, ReLU, pooling and the
// NHWC round trip.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/dconv_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/epilogue_gpu.h"

#define DC_WS_LIMIT ((size_t)256 << 20)

enum { DCM_INPLACE = 0, DCM_TMP = 1, DCM_FUSED = 2 };

struct dconv_gpu {
    spconv_desc d;           // geometry (array pointers not kept)
    dconv_prec p;
    int max_n, cur_n, po, qo, hb, wb, hp, wp, nhwc, mode;
    cudnnDataType_t dt;
    size_t es;               // bytes per activation element
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math;
    size_t ws_bytes;
    void *ws, *w, *bias;     // workspace, weights (KCRS or KRSC), bias (K) [fp32]
    void *bias_dt;           // bias in the data type (fused call)
    void *tmp;               // conv output when not written in place: (n,K,P,Q) or (n,P,Q,K)
    void *xt;                // NHWC mode: (n, hp, wp, C) input copy
    void *sx, *sy;           // scratch bordered input / output (max_n) for find and timing
};

// --- epilogue kernels -------------------------------------------------------------

// Bias + ReLU in place on the interior of the bordered output (n, K, P+2ob,
// Q+2ob) (e: no pool; each element is read and written by one thread).
template <typename T>
__global__ void dconv_bias_relu_kernel(T *out, const sc_epi e) {
    sc_epi_run(e, out, [&](int i, int k, int p, int q) {
        return sc_tof(out[sc_epi_out_at(e, i, k, p, q)]);
    });
}

// out (bordered NCHW) = pool(relu(tmp + bias)); tmp (n,K,P,Q) or, nhwc, (n,P,Q,K).
template <typename T>
__global__ void dconv_pool_kernel(const T *tmp, int nhwc, T *out, const sc_epi e) {
    sc_epi_run(e, out, [&](int i, int k, int p, int q) {
        const size_t at = nhwc ? (((size_t)i * e.P + p) * e.Q + q) * e.K + k
                               : (((size_t)i * e.K + k) * e.P + p) * e.Q + q;
        return sc_tof(tmp[at]);
    });
}

// xt (n, hp, wp, C) = the window region of the bordered NCHW input (shift sh).
template <typename T>
__global__ void dconv_to_nhwc_kernel(const T *in, T *xt, int n, int C, int hb, int wb, int hp,
                                     int wp, int sh) {
    const size_t total = (size_t)n * hp * wp * C;
    SC_GRID_LOOP(i, total) {
        const int c = (int)(i % C), x = (int)(i / C % wp), y = (int)(i / ((size_t)C * wp) % hp);
        const size_t img = i / ((size_t)C * wp * hp);
        xt[i] = in[((img * C + c) * hb + y + sh) * wb + x + sh];
    }
}

// out[0] = max |a - b| (NaN counts as infinite), out[1] = max |b|, as float bits.
template <typename T>
__global__ void dconv_diff_kernel(const T *a, const T *b, size_t n, unsigned *out) {
    float dm = 0.0f, bm = 0.0f;
    SC_GRID_LOOP(i, n) {
        const float y = sc_tof(b[i]);
        float d = fabsf(sc_tof(a[i]) - y);
        if (d != d) d = INFINITY;
        dm = fmaxf(dm, d), bm = fmaxf(bm, y == y ? fabsf(y) : INFINITY);
    }
    atomicMax(out, __float_as_uint(dm));
    atomicMax(out + 1, __float_as_uint(bm));
}

// Element strides of a 4-d tensor (n, channel, row, column).
struct dconv_strides {
    long n, c, h, w;
};

// y (n, K, P, Q) = conv(x, w) by the definition in fp32 (the check on cuDNN).
template <typename T>
__global__ void dconv_ref_kernel(const T *x, dconv_strides xs, const T *w, dconv_strides ws,
                                 T *y, dconv_strides ys, int n, int K, int C, int R, int S,
                                 int P, int Q, int stride) {
    const size_t total = (size_t)n * K * P * Q;
    SC_GRID_LOOP(idx, total) {
        const int q = (int)(idx % Q), p = (int)(idx / Q % P);
        const int k = (int)(idx / ((size_t)Q * P) % K), i = (int)(idx / ((size_t)Q * P * K));
        float acc = 0.0f;
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int s = 0; s < S; s++)
                    acc += sc_tof(w[k * ws.n + c * ws.c + r * ws.h + s * ws.w]) *
                           sc_tof(x[i * xs.n + c * xs.c + (p * stride + r) * xs.h +
                                    (q * stride + s) * xs.w]);
        y[i * ys.n + k * ys.c + p * ys.h + q * ys.w] = sc_fromf<T>(acc);
    }
}

// --- descriptors ------------------------------------------------------------------

// Sets the activation descriptors for n images.
static int dconv_descs(dconv_gpu *c, int n, sc_err *err) {
    const spconv_desc *d = &c->d;
    const int ob = d->out_border, hob = c->po + 2 * ob, wob = c->qo + 2 * ob;
    if (c->nhwc)
        cudnnCheck(err, cudnnSetTensor4dDescriptor(c->xd, CUDNN_TENSOR_NHWC, c->dt, n, d->C, c->hp,
                                                   c->wp));
    else
        cudnnCheck(err, cudnnSetTensor4dDescriptorEx(c->xd, c->dt, n, d->C, c->hp, c->wp,
                                                     d->C * c->hb * c->wb, c->hb * c->wb, c->wb, 1));
    if (c->mode == DCM_TMP)
        cudnnCheck(err, cudnnSetTensor4dDescriptor(c->yd, c->nhwc ? CUDNN_TENSOR_NHWC
                                                                  : CUDNN_TENSOR_NCHW,
                                                   c->dt, n, d->K, d->P, d->Q));
    else
        cudnnCheck(err, cudnnSetTensor4dDescriptorEx(c->yd, c->dt, n, d->K, d->P, d->Q,
                                                     d->K * hob * wob, hob * wob, wob, 1));
    c->cur_n = n;
    return 0;
}

// Creates the descriptors that do not depend on n.
static int dconv_static_descs(dconv_gpu *c, sc_err *err) {
    const spconv_desc *d = &c->d;
    cudnnCheck(err, cudnnCreateTensorDescriptor(&c->xd));
    cudnnCheck(err, cudnnCreateTensorDescriptor(&c->yd));
    cudnnCheck(err, cudnnCreateTensorDescriptor(&c->bd));
    cudnnCheck(err, cudnnCreateFilterDescriptor(&c->wd));
    cudnnCheck(err, cudnnCreateConvolutionDescriptor(&c->cd));
    cudnnCheck(err, cudnnCreateActivationDescriptor(&c->ad));
    cudnnCheck(err, cudnnSetFilter4dDescriptor(c->wd, c->dt, c->nhwc ? CUDNN_TENSOR_NHWC
                                                                     : CUDNN_TENSOR_NCHW,
                                               d->K, d->C, d->R, d->S));
    cudnnCheck(err, cudnnSetConvolution2dDescriptor(c->cd, 0, 0, d->stride, d->stride, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    c->math = c->p == DC_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    cudnnCheck(err, cudnnSetConvolutionMathType(c->cd, c->math));
    cudnnCheck(err, cudnnSetTensor4dDescriptor(c->bd, CUDNN_TENSOR_NCHW, c->dt, 1, d->K, 1, 1));
    cudnnCheck(err, cudnnSetActivationDescriptor(c->ad, d->relu ? CUDNN_ACTIVATION_RELU
                                                                : CUDNN_ACTIVATION_IDENTITY,
                                                 CUDNN_PROPAGATE_NAN, 0.0));
    return 0;
}

// --- buffers ----------------------------------------------------------------------

// Uploads weights (KCRS, or KRSC for NHWC) and bias in the right types.
static int dconv_upload(const gpu_ctx *g, dconv_gpu *c, const float *w, sc_err *err) {
    const spconv_desc *d = &c->d;
    const size_t nw = (size_t)d->K * d->C * d->R * d->S, rs = (size_t)d->R * d->S;
    std::vector<float> hw(nw), hb(d->K, 0.0f);
    for (size_t i = 0; i < nw; i++) {
        const size_t k = i / (d->C * rs), c_ = i / rs % d->C, r = i % rs;
        hw[c->nhwc ? (k * rs + r) * d->C + c_ : i] = w[i];
    }
    if (d->bias)
        for (int k = 0; k < d->K; k++) hb[k] = d->bias[k];
    float *tmp = NULL;
    cudaCheck(err, cudaMalloc(&c->w, nw * c->es));
    cudaCheck(err, cudaMalloc(&c->bias, d->K * sizeof(float)));
    cudaCheck(err, cudaMalloc(&c->bias_dt, d->K * c->es));
    cudaCheck(err, cudaMalloc((void **)&tmp, (nw > (size_t)d->K ? nw : d->K) * sizeof(float)));
    SC_TRY(gpu_upload(tmp, hw.data(), nw * sizeof(float), err));
    const gpu_dtype gdt = c->es == 2 ? GDT_F16 : GDT_F32;
    int rc = gpu_convert(g, nw, GDT_F32, tmp, gdt, c->w, err);
    if (!rc && cudaStreamSynchronize(g->stream) != cudaSuccess) rc = sc_fail(err, "dconv: sync");
    if (!rc) rc = gpu_upload(tmp, hb.data(), d->K * sizeof(float), err);
    if (!rc) rc = gpu_upload(c->bias, hb.data(), d->K * sizeof(float), err);
    if (!rc) rc = gpu_convert(g, d->K, GDT_F32, tmp, gdt, c->bias_dt, err);
    if (!rc && cudaStreamSynchronize(g->stream) != cudaSuccess) rc = sc_fail(err, "dconv: sync");
    cudaFree(tmp);
    return rc;
}

// Allocates the temporaries and the scratch tensors for max_n (filled with random values).
static int dconv_alloc(const gpu_ctx *g, dconv_gpu *c, sc_err *err) {
    const spconv_desc *d = &c->d;
    const size_t n = c->max_n, ob = d->out_border;
    const size_t nx = n * d->C * c->hb * c->wb, ny = n * d->K * (c->po + 2 * ob) * (c->qo + 2 * ob);
    const gpu_dtype gdt = c->es == 2 ? GDT_F16 : GDT_F32;
    cudaCheck(err, cudaMalloc(&c->sx, nx * c->es));
    cudaCheck(err, cudaMalloc(&c->sy, ny * c->es));
    SC_TRY(gpu_fill_uniform(g, gdt, nx, c->sx, -1.0f, 1.0f, 7, err));
    SC_TRY(gpu_fill_uniform(g, gdt, ny, c->sy, -1.0f, 1.0f, 8, err));
    if (c->mode == DCM_TMP) cudaCheck(err, cudaMalloc(&c->tmp, n * d->K * d->P * d->Q * c->es));
    if (c->nhwc) {
        const size_t nt = n * d->C * c->hp * c->wp;
        cudaCheck(err, cudaMalloc(&c->xt, nt * c->es));
        SC_TRY(gpu_fill_uniform(g, gdt, nt, c->xt, -1.0f, 1.0f, 9, err));
    }
    cudaCheck(err, cudaStreamSynchronize(g->stream));
    return 0;
}

// --- running ----------------------------------------------------------------------

// Pointer to the conv's input view (window region of the bordered input, or xt).
static const void *dconv_x(const dconv_gpu *c, const void *in) {
    if (c->nhwc) return c->xt;
    const size_t sh = (size_t)(c->d.in_border - c->d.pad);
    return (const char *)in + sh * (c->wb + 1) * c->es;
}

// Pointer to the conv's output (tmp, or the interior of the bordered output).
static void *dconv_y(const dconv_gpu *c, void *out) {
    if (c->mode == DCM_TMP) return c->tmp;
    const size_t ob = c->d.out_border;
    return (char *)out + ob * (c->qo + 2 * ob + 1) * c->es;
}

// Another forward algorithm for the present descriptors (another batch than
// the one cudnnFind measured): the first of cuDNN's heuristics, other than
// the present one, in the layer's math type and workspace; -1 when none.
static int dconv_fallback_algo(const gpu_ctx *g, const dconv_gpu *c, cudnnConvolutionFwdAlgo_t *algo) {
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int nr = 0;
    if (cudnnGetConvolutionForwardAlgorithm_v7(g->cudnn, c->xd, c->wd, c->cd, c->yd,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nr, r) != CUDNN_STATUS_SUCCESS)
        return -1;
    for (int i = 0; i < nr; i++) {
        size_t need = 0;
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].algo == c->algo || r[i].mathType != c->math ||
            cudnnGetConvolutionForwardWorkspaceSize(g->cudnn, c->xd, c->wd, c->cd, c->yd, r[i].algo, &need) !=
                CUDNN_STATUS_SUCCESS || need > c->ws_bytes)
            continue;
        *algo = r[i].algo;
        return 0;
    }
    return -1;
}

// The cuDNN call (plain or fused with bias and activation). A fused call
// that cuDNN refuses for the present batch size (it accepts an identity
// activation only with some algorithms and shapes: seen at batch 1 on a
// DenseNet layer) turns the layer into a plain conv + epilogue for good. A
// plain call that cuDNN refuses with the algorithm cudnnFind chose at max_n
// (CUDNN_STATUS_BAD_PARAM at another batch: seen once in three deploys of one
// resnet18 export) retries with cuDNN's heuristic choice, which the layer
// then keeps.
static int dconv_call(const gpu_ctx *g, dconv_gpu *c, const void *x, void *y, sc_err *err) {
    const float one = 1.0f, zero = 0.0f;
    if (c->mode == DCM_FUSED &&
        cudnnConvolutionBiasActivationForward(g->cudnn, &one, c->xd, x, c->wd, c->w, c->cd, c->algo,
                                              c->ws, c->ws_bytes, &zero, c->yd, y, c->bd, c->bias_dt,
                                              c->ad, c->yd, y) == CUDNN_STATUS_SUCCESS)
        return 0;
    if (c->mode == DCM_FUSED) c->mode = DCM_INPLACE;
    cudnnStatus_t st = cudnnConvolutionForward(g->cudnn, &one, c->xd, x, c->wd, c->w, c->cd, c->algo, c->ws,
                                               c->ws_bytes, &zero, c->yd, y);
    cudnnConvolutionFwdAlgo_t alt;
    if (st != CUDNN_STATUS_SUCCESS && dconv_fallback_algo(g, c, &alt) == 0) {
        const cudnnStatus_t first = st;
        st = cudnnConvolutionForward(g->cudnn, &one, c->xd, x, c->wd, c->w, c->cd, alt, c->ws, c->ws_bytes, &zero,
                                     c->yd, y);
        if (st == CUDNN_STATUS_SUCCESS) c->algo = alt;
        else st = first;
    }
    if (st != CUDNN_STATUS_SUCCESS)
        return sc_fail(err, "cudnnConvolutionForward (K %d C %d %dx%d, batch %d, algorithm %d): %s", c->d.K,
                       c->d.C, c->d.H, c->d.W, c->cur_n, (int)c->algo, cudnnGetErrorString(st));
    return 0;
}

// Input transpose (NHWC), conv and epilogue for n images on the handle's stream.
static int dconv_run(const gpu_ctx *g, dconv_gpu *c, int n, const void *in, void *out,
                     cudaStream_t st, sc_err *err) {
    const spconv_desc *d = &c->d;
    const int sh = d->in_border - d->pad;
    if (c->nhwc) {
        const size_t total = (size_t)n * c->hp * c->wp * d->C;
        dconv_to_nhwc_kernel<<<sc_blocks(g, total, 256), 256, 0, st>>>(
            (const __half *)in, (__half *)c->xt, n, d->C, c->hb, c->wb, c->hp, c->wp, sh);
        cudaCheckLaunch(err);
    }
    SC_TRY(dconv_call(g, c, dconv_x(c, in), dconv_y(c, out), err));
    const float *b = d->bias ? (const float *)c->bias : NULL;
    const sc_epi e = {n, d->K, d->P, d->Q, c->po, c->qo, d->out_border, b, d->relu,
                      d->pool_k, d->pool_stride, d->pool_pad};
    const unsigned bl = sc_blocks(g, (size_t)n * d->K * c->po * c->qo, 256);
    if (c->mode == DCM_TMP) {
        SC_DISPATCH(c->es == 2 ? GDT_F16 : GDT_F32,
                    dconv_pool_kernel<T><<<bl, 256, 0, st>>>((const T *)c->tmp, c->nhwc,
                                                             (T *)out, e));
        cudaCheckLaunch(err);
    } else if (c->mode == DCM_INPLACE && (b || d->relu)) {  // no pool: po = P, qo = Q
        SC_DISPATCH(c->es == 2 ? GDT_F16 : GDT_F32,
                    dconv_bias_relu_kernel<T><<<bl, 256, 0, st>>>((T *)out, e));
        cudaCheckLaunch(err);
    }
    return 0;
}

// --- algorithm and mode -----------------------------------------------------------

// Elements of the conv's output buffer at max_n (tmp, or the bordered output).
static size_t dconv_y_elems(const dconv_gpu *c) {
    const spconv_desc *d = &c->d;
    const size_t ob = d->out_border;
    if (c->mode == DCM_TMP) return (size_t)c->max_n * d->K * d->P * d->Q;
    return (size_t)c->max_n * d->K * (c->po + 2 * ob) * (c->qo + 2 * ob);
}

// True when buffer y (n elements) matches ref within tol * max |ref|.
static int dconv_same(const gpu_ctx *g, const dconv_gpu *c, const void *y, const void *ref,
                      size_t n, float tol) {
    unsigned *dv = NULL, hv[2] = {0, 0};
    if (cudaMalloc((void **)&dv, 2 * sizeof *dv) != cudaSuccess) return 0;
    cudaMemsetAsync(dv, 0, 2 * sizeof *dv, g->stream);
    SC_DISPATCH(c->es == 2 ? GDT_F16 : GDT_F32,
                dconv_diff_kernel<T><<<sc_blocks(g, n, 256), 256, 0, g->stream>>>(
                    (const T *)y, (const T *)ref, n, dv));
    const int ok = cudaMemcpyAsync(hv, dv, sizeof hv, cudaMemcpyDeviceToHost, g->stream) ==
                       cudaSuccess && cudaStreamSynchronize(g->stream) == cudaSuccess;
    cudaFree(dv);
    float dm, bm;
    memcpy(&dm, &hv[0], 4), memcpy(&bm, &hv[1], 4);
    return ok && bm < INFINITY && dm <= tol * bm;
}

// Runs algorithm algo with math type m on the scratch input into y (a buffer
// laid out like the conv's output buffer); 0 on success.
static int dconv_try(const gpu_ctx *g, dconv_gpu *c, cudnnConvolutionFwdAlgo_t algo,
                     cudnnMathType_t m, void *ybuf) {
    const float one = 1.0f, zero = 0.0f;
    if (cudnnSetConvolutionMathType(c->cd, m) != CUDNN_STATUS_SUCCESS) return -1;
    void *y = c->mode == DCM_TMP ? ybuf : (char *)ybuf + ((char *)dconv_y(c, c->sy) - (char *)c->sy);
    const cudnnStatus_t st = cudnnConvolutionForward(g->cudnn, &one, c->xd, dconv_x(c, c->sx),
                                                     c->wd, c->w, c->cd, algo, c->ws,
                                                     c->ws_bytes, &zero, c->yd, y);
    return st == CUDNN_STATUS_SUCCESS && cudaStreamSynchronize(g->stream) == cudaSuccess ? 0 : -1;
}

// ref (laid out like the conv's output buffer) = the direct convolution of
// the scratch input; 0 on success.
static int dconv_reference(const gpu_ctx *g, const dconv_gpu *c, void *ref) {
    const spconv_desc *d = &c->d;
    const long C = d->C, K = d->K, RS = (long)d->R * d->S, P = d->P, Q = d->Q;
    const long ob = d->out_border, hob = c->po + 2 * ob, wob = c->qo + 2 * ob;
    dconv_strides xs, ws, ys;
    if (c->nhwc) {
        xs = {C * c->hp * c->wp, 1, C * c->wp, C};
        ws = {C * RS, 1, C * d->S, C};
    } else {
        xs = {C * c->hb * c->wb, (long)c->hb * c->wb, c->wb, 1};
        ws = {C * RS, RS, d->S, 1};
    }
    if (c->mode == DCM_TMP && c->nhwc) ys = {K * P * Q, 1, Q * K, K};
    else if (c->mode == DCM_TMP) ys = {K * P * Q, P * Q, Q, 1};
    else ys = {K * hob * wob, hob * wob, wob, 1};
    (void)cudaGetLastError();  // a failed trial inside cudnnFind must not count here
    const size_t total = (size_t)c->max_n * K * P * Q;
    const size_t yoff = c->mode == DCM_TMP ? 0 : (size_t)(ob * (wob + 1)) * c->es;
    SC_DISPATCH(c->es == 2 ? GDT_F16 : GDT_F32,
                dconv_ref_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                    (const T *)dconv_x(c, c->sx), xs, (const T *)c->w, ws,
                    (T *)((char *)ref + yoff), ys, c->max_n, (int)K, (int)C, d->R, d->S,
                    (int)P, (int)Q, d->stride));
    return cudaGetLastError() == cudaSuccess && cudaStreamSynchronize(g->stream) == cudaSuccess
               ? 0 : -1;
}

// Times the cuDNN algorithms at max_n (cudnnFind) and keeps the fastest
// acceptable one whose output matches the direct convolution on the scratch
// input when run exactly as forward will run it: with its own workspace of
// max(Find's figure, cudnnGetConvolutionForwardWorkspaceSize) bytes.
static int dconv_find(const gpu_ctx *g, dconv_gpu *c, sc_err *err) {
    void *ws = NULL;
    size_t ws_bytes = DC_WS_LIMIT;
    for (; ws_bytes > 0; ws_bytes /= 2) {
        if (cudaMalloc(&ws, ws_bytes) == cudaSuccess) break;
        (void)cudaGetLastError(), ws = NULL;
    }
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int nr = 0;
    const cudnnStatus_t st = cudnnFindConvolutionForwardAlgorithmEx(
        g->cudnn, c->xd, dconv_x(c, c->sx), c->wd, c->w, c->cd, c->yd, dconv_y(c, c->sy),
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nr, r, ws, ws_bytes);
    cudaFree(ws);
    (void)cudaGetLastError();
    if (st != CUDNN_STATUS_SUCCESS)
        return sc_fail(err, "dconv: cudnnFind failed: %s", cudnnGetErrorString(st));
    const size_t ny = dconv_y_elems(c);
    void *ref = NULL, *ybuf = c->mode == DCM_TMP ? c->tmp : c->sy;
    cudaCheck(err, cudaMalloc(&ref, ny * c->es));
    cudaCheck(err, cudaMemcpyAsync(ref, ybuf, ny * c->es, cudaMemcpyDeviceToDevice, g->stream));  // after the find, in stream order
    const int checked = dconv_reference(g, c, ref) == 0;
    const float tol = c->p == DC_FP32 ? 1e-3f : 3e-2f;
    int chosen = -1;
    for (int i = 0; i < nr && chosen < 0; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > ws_bytes) continue;
        if (c->p == DC_FP32 && r[i].mathType != CUDNN_FMA_MATH &&
            r[i].mathType != CUDNN_DEFAULT_MATH)
            continue;
        const cudnnMathType_t m = c->p == DC_FP32 ? CUDNN_FMA_MATH : r[i].mathType;
        size_t need = 0;
        if (cudnnSetConvolutionMathType(c->cd, m) != CUDNN_STATUS_SUCCESS ||
            cudnnGetConvolutionForwardWorkspaceSize(g->cudnn, c->xd, c->wd, c->cd, c->yd,
                                                    r[i].algo, &need) != CUDNN_STATUS_SUCCESS)
            continue;
        need = std::max(need, r[i].memory);
        if (cudaMalloc(&c->ws, need ? need : 16) != cudaSuccess) {
            (void)cudaGetLastError(), c->ws = NULL;
            continue;
        }
        c->ws_bytes = need;
        if (!checked || (dconv_try(g, c, r[i].algo, m, ybuf) == 0 &&
                         dconv_same(g, c, ybuf, ref, ny, tol)))
            chosen = i, c->algo = r[i].algo, c->math = m;
        else
            cudaFree(c->ws), c->ws = NULL, c->ws_bytes = 0;
    }
    (void)cudaGetLastError();
    cudaFree(ref);
    if (chosen < 0)
        return sc_fail(err, "dconv: no cuDNN algorithm for K %d C %d %dx%d matches the direct "
                       "convolution%s", c->d.K, c->d.C, c->d.H, c->d.W, checked ? "" : " (not run)");
    cudnnCheck(err, cudnnSetConvolutionMathType(c->cd, c->math));
    return 0;
}

// Median time (ms) of 9 runs of the current mode at max_n on scratch tensors.
static float dconv_time_mode(const gpu_ctx *g, dconv_gpu *c) {
    sc_err e;
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) || cudaEventCreate(&e1)) return INFINITY;
    float t[9];
    int ok = 1;
    for (int r = -2; r < 9 && ok; r++) {
        cudaEventRecord(e0, g->stream);
        ok = dconv_run(g, c, c->max_n, c->sx, c->sy, g->stream, &e) == 0;
        cudaEventRecord(e1, g->stream);
        ok = ok && cudaEventSynchronize(e1) == cudaSuccess;
        if (ok && r >= 0) cudaEventElapsedTime(&t[r], e0, e1);
    }
    (void)cudaGetLastError();
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    if (!ok) return INFINITY;
    std::sort(t, t + 9);
    return t[4];
}

// Without a pool: keeps the fused call when it measures faster and its
// output matches the convolution plus the bias/ReLU pass.
static void dconv_pick_mode(const gpu_ctx *g, dconv_gpu *c) {
    if (c->mode != DCM_INPLACE) return;
    sc_err e;
    const float plain = dconv_time_mode(g, c);
    const size_t ny = dconv_y_elems(c);
    void *ref = NULL;
    if (cudaMalloc(&ref, ny * c->es) != cudaSuccess) return;
    int ok = dconv_run(g, c, c->max_n, c->sx, c->sy, g->stream, &e) == 0 &&
             cudaMemcpyAsync(ref, c->sy, ny * c->es, cudaMemcpyDeviceToDevice, g->stream) == cudaSuccess;
    c->mode = DCM_FUSED;
    const float fused = ok ? dconv_time_mode(g, c) : INFINITY;
    ok = ok && fused < plain && dconv_run(g, c, c->max_n, c->sx, c->sy, g->stream, &e) == 0 &&
         dconv_same(g, c, c->sy, ref, ny, c->p == DC_FP32 ? 1e-4f : 1e-2f);
    if (!ok) c->mode = DCM_INPLACE;
    (void)cudaGetLastError();
    cudaFree(ref);
}

// --- public API -------------------------------------------------------------------

// Plans the dense layer: descriptors, weights, algorithm and mode.
static int dconv_init(const gpu_ctx *g, dconv_gpu *c, const float *w, sc_err *err) {
    const spconv_desc *d = &c->d;
    c->nhwc = c->p == DC_FP16_NHWC;
    c->es = c->p >= DC_FP16 ? 2 : 4;
    c->dt = c->es == 2 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    c->hb = d->H + 2 * d->in_border, c->wb = d->W + 2 * d->in_border;
    c->hp = d->H + 2 * d->pad, c->wp = d->W + 2 * d->pad;
    spconv_out_size(d, &c->po, &c->qo);
    c->mode = d->pool_k > 0 || c->nhwc ? DCM_TMP : DCM_INPLACE;
    if (d->in_border < d->pad || c->max_n < 1)
        return sc_fail(err, "dconv: border %d below padding %d or max_n %d", d->in_border, d->pad,
                       c->max_n);
    SC_TRY(dconv_static_descs(c, err));
    SC_TRY(dconv_descs(c, c->max_n, err));
    SC_TRY(dconv_upload(g, c, w, err));
    SC_TRY(dconv_alloc(g, c, err));
    SC_TRY(dconv_find(g, c, err));
    dconv_pick_mode(g, c);
    return 0;
}

// Creates a dense layer for up to max_n images.
extern "C" dconv_gpu *dconv_gpu_create(const gpu_ctx *g, const spconv_desc *d, const float *w,
                                       dconv_prec p, int max_n, sc_err *err) {
    dconv_gpu *c = (dconv_gpu *)calloc(1, sizeof *c);
    if (!c) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    c->d = *d, c->p = p, c->max_n = max_n;
    if (dconv_init(g, c, w, err)) {
        dconv_gpu_free(c);
        return NULL;
    }
    return c;
}

// out = layer(in) for n images on stream st.
extern "C" int dconv_gpu_forward(const gpu_ctx *g, dconv_gpu *c, int n, const void *in,
                                 void *out, cudaStream_t st, sc_err *err) {
    if (n <= 0) return 0;
    if (n > c->max_n) return sc_fail(err, "dconv: batch %d above max_n %d", n, c->max_n);
    if (n != c->cur_n) SC_TRY(dconv_descs(c, n, err));
    if (st != g->stream) cudnnCheck(err, cudnnSetStream(g->cudnn, st));
    const int rc = dconv_run(g, c, n, in, out, st, err);
    if (st != g->stream) cudnnCheck(err, cudnnSetStream(g->cudnn, g->stream));
    return rc;
}

// Sets the layer's forward algorithm (tests: one cuDNN refuses falls back).
extern "C" void dconv_gpu_set_algo(dconv_gpu *c, int algo) { c->algo = (cudnnConvolutionFwdAlgo_t)algo; }

// The cuDNN call alone on the scratch tensors.
extern "C" int dconv_gpu_forward_conv(const gpu_ctx *g, dconv_gpu *c, int n, cudaStream_t st,
                                      sc_err *err) {
    if (n <= 0 || n > c->max_n) return sc_fail(err, "dconv: batch %d of %d", n, c->max_n);
    if (n != c->cur_n) SC_TRY(dconv_descs(c, n, err));
    if (st != g->stream) cudnnCheck(err, cudnnSetStream(g->cudnn, st));
    const int rc = dconv_call(g, c, dconv_x(c, c->sx), dconv_y(c, c->sy), err);
    if (st != g->stream) cudnnCheck(err, cudnnSetStream(g->cudnn, g->stream));
    return rc;
}

// One line: precision, algorithm, math type, workspace and mode.
extern "C" void dconv_gpu_describe(const dconv_gpu *c, char *buf, size_t len) {
    static const char *ps[] = {"fp32", "tf32", "fp16", "fp16-nhwc"};
    static const char *ms[] = {"conv+epilogue", "conv+pool", "fused"};
    snprintf(buf, len, "cudnn %s algo %d math %d ws %zuK %s", ps[c->p], (int)c->algo,
             (int)c->math, c->ws_bytes >> 10, ms[c->mode]);
}

// Frees a dense layer (NULL is fine).
extern "C" void dconv_gpu_free(dconv_gpu *c) {
    if (!c) return;
    if (c->xd) cudnnDestroyTensorDescriptor(c->xd);
    if (c->yd) cudnnDestroyTensorDescriptor(c->yd);
    if (c->bd) cudnnDestroyTensorDescriptor(c->bd);
    if (c->wd) cudnnDestroyFilterDescriptor(c->wd);
    if (c->cd) cudnnDestroyConvolutionDescriptor(c->cd);
    if (c->ad) cudnnDestroyActivationDescriptor(c->ad);
    cudaFree(c->ws), cudaFree(c->w), cudaFree(c->bias), cudaFree(c->bias_dt);
    cudaFree(c->tmp), cudaFree(c->xt), cudaFree(c->sx), cudaFree(c->sy);
    free(c);
}
