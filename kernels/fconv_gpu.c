// Fused dense convolution through cuDNN's graph (backend) API
// (kernels/fconv_gpu.h): descriptors for the tensors, the convolution and
// the pointwise epilogue, the operation graph, one execution plan per engine
// configuration the heuristics offer, and timing to keep the fastest.
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fconv_gpu.h"
#include "kernels/nhwc_ops_gpu.h"

#define FC_MAX_PLANS 32
#define FC_NVIRT 3

// Unique ids of the tensors the variant pack binds.
enum { UID_X = 1, UID_W, UID_B, UID_Z, UID_Y, UID_VIRT = 100 };

typedef cudnnBackendDescriptor_t bdesc;

struct fconv_gpu {
    fconv_shape s;
    int P, Q;
    bdesc graph;                 // the operation graph
    int nplans, pick;            // plans built; the one in use
    bdesc plan[FC_MAX_PLANS];
    size_t ws[FC_MAX_PLANS];     // workspace bytes per plan
    int64_t engine[FC_MAX_PLANS];// cuDNN's global engine index per plan
    double ms;                   // tuned time of the plan in use (NAN before tuning)
    double err;                  // its max |y - CPU| / max |CPU| on the checked images
    int rejected;                // plans that failed the check
    bdesc vpack;                 // variant pack of the last pointers, NULL when none
    const void *vp_ptr[6];       // x, w, bias, z, y, ws of vpack
};

// --- descriptor helpers --------------------------------------------------------

// Sets one attribute of a backend descriptor.
#define BE_SET(err, d, attr, type, count, ptr) \
    cudnnCheck(err, cudnnBackendSetAttribute((d), (attr), (type), (count), (ptr)))

// cuDNN's data type of a storage type.
static cudnnDataType_t fc_cudnn_type(gpu_dtype dt) {
    return dt == GDT_F16 ? CUDNN_DATA_HALF : dt == GDT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

// Creates a tensor descriptor (n, c, h, w) with channels-last strides.
static int fc_tensor(bdesc *t, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
                     int64_t w, bool virt, sc_err *err) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
    const int64_t align = 16;
    cudnnCheck(err, cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
    BE_SET(err, *t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    BE_SET(err, *t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    BE_SET(err, *t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    BE_SET(err, *t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    BE_SET(err, *t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    BE_SET(err, *t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    cudnnCheck(err, cudnnBackendFinalize(*t));
    return 0;
}

// Creates the convolution descriptor (cross-correlation, fp32 accumulation).
static int fc_conv_desc(bdesc *cd, const fconv_shape *s, sc_err *err) {
    const cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, pad[2] = {s->d.pad, s->d.pad}, str[2] = {s->d.stride, s->d.stride};
    const int64_t dil[2] = {1, 1};
    cudnnCheck(err, cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, cd));
    BE_SET(err, *cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct);
    BE_SET(err, *cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    BE_SET(err, *cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    BE_SET(err, *cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    BE_SET(err, *cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
    BE_SET(err, *cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    BE_SET(err, *cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    cudnnCheck(err, cudnnBackendFinalize(*cd));
    return 0;
}

// Creates the convolution operation y = conv(x, w).
static int fc_conv_op(bdesc *op, bdesc x, bdesc w, bdesc y, bdesc cd, sc_err *err) {
    const float alpha = 1.0f, beta = 0.0f;
    cudnnCheck(err, cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, op));
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    cudnnCheck(err, cudnnBackendFinalize(*op));
    return 0;
}

// Creates a pointwise operation y = mode(x [, b]) with fp32 math; pw gets
// the pointwise descriptor (the caller destroys both).
static int fc_pw_op(bdesc *op, bdesc *pw, cudnnPointwiseMode_t mode, bdesc x, bdesc b, bdesc y,
                    sc_err *err) {
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnCheck(err, cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, pw));
    BE_SET(err, *pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    BE_SET(err, *pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    cudnnCheck(err, cudnnBackendFinalize(*pw));
    cudnnCheck(err, cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op));
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, pw);
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) BE_SET(err, *op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    BE_SET(err, *op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cudnnCheck(err, cudnnBackendFinalize(*op));
    return 0;
}

// --- the operation graph ----------------------------------------------------------

// Every descriptor the graph is made of (destroyed once the graph is final).
typedef struct {
    bdesc t[5 + FC_NVIRT];       // x, w, bias, z, y, virtual intermediates
    bdesc cd;                    // convolution
    bdesc op[4], pw[4];          // conv, bias, residual, ReLU operations
    int nop;
} fc_parts;

// Destroys every descriptor of the parts.
static void fc_parts_free(fc_parts *q) {
    for (int i = 0; i < 5 + FC_NVIRT; i++)
        if (q->t[i]) cudnnBackendDestroyDescriptor(q->t[i]);
    for (int i = 0; i < 4; i++) {
        if (q->op[i]) cudnnBackendDestroyDescriptor(q->op[i]);
        if (q->pw[i]) cudnnBackendDestroyDescriptor(q->pw[i]);
    }
    if (q->cd) cudnnBackendDestroyDescriptor(q->cd);
}

// Creates the real tensors (x, w, bias, z, y) of the graph.
static int fc_real_tensors(fc_parts *q, const fconv_shape *s, int P, int Q, sc_err *err) {
    const cudnnDataType_t dt = fc_cudnn_type(s->dt);
    SC_TRY(fc_tensor(&q->t[0], UID_X, dt, s->d.n, s->d.C, s->d.H, s->d.W, false, err));
    SC_TRY(fc_tensor(&q->t[1], UID_W, dt, s->d.K, s->d.C, s->d.R, s->d.S, false, err));
    SC_TRY(fc_tensor(&q->t[2], UID_B, dt, 1, s->d.K, 1, 1, false, err));
    if (s->d.residual) SC_TRY(fc_tensor(&q->t[3], UID_Z, dt, s->d.n, s->d.K, P, Q, false, err));
    return fc_tensor(&q->t[4], UID_Y, dt, s->d.n, s->d.K, P, Q, false, err);
}

// Creates conv -> +bias -> [+z] -> [ReLU]; the last op writes y.
static int fc_ops(fc_parts *q, const fconv_shape *s, int P, int Q, sc_err *err) {
    const int stages = 1 + s->d.residual + s->d.relu;  // pointwise ops after the conv
    bdesc cur;
    SC_TRY(fc_tensor(&q->t[5], UID_VIRT, CUDNN_DATA_FLOAT, s->d.n, s->d.K, P, Q, true, err));
    SC_TRY(fc_conv_desc(&q->cd, s, err));
    SC_TRY(fc_conv_op(&q->op[0], q->t[0], q->t[1], q->t[5], q->cd, err));
    cur = q->t[5];
    q->nop = 1;
    const cudnnPointwiseMode_t modes[3] = {CUDNN_POINTWISE_ADD, CUDNN_POINTWISE_ADD,
                                           CUDNN_POINTWISE_RELU_FWD};
    const int use[3] = {1, s->d.residual, s->d.relu};
    for (int k = 0, done = 0; k < 3; k++) {
        if (!use[k]) continue;
        done++;
        bdesc out = q->t[4];
        if (done < stages) {
            SC_TRY(fc_tensor(&out, UID_VIRT + done, CUDNN_DATA_FLOAT, s->d.n, s->d.K, P, Q, true, err));
            q->t[5 + done] = out;
        }
        bdesc b = k == 0 ? q->t[2] : k == 1 ? q->t[3] : NULL;
        SC_TRY(fc_pw_op(&q->op[q->nop], &q->pw[q->nop], modes[k], cur, b, out, err));
        q->nop++;
        cur = out;
    }
    return 0;
}

// Builds and finalizes the operation graph of c->s.
static int fc_graph(fconv_gpu *c, const gpu_ctx *g, sc_err *err) {
    fc_parts q;
    memset(&q, 0, sizeof q);
    int rc = fc_real_tensors(&q, &c->s, c->P, c->Q, err);
    if (!rc) rc = fc_ops(&q, &c->s, c->P, c->Q, err);
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (!rc) st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &c->graph);
    if (!rc && st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(c->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, q.nop, q.op);
    if (!rc && st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(c->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
                                      1, &g->cudnn);
    if (!rc && st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(c->graph);
    if (!rc && st != CUDNN_STATUS_SUCCESS)
        rc = sc_fail(err, "cuDNN operation graph: %s", cudnnGetErrorString(st));
    fc_parts_free(&q);
    return rc;
}

// --- engine configurations and plans ------------------------------------------------

// 1 when an engine configuration keeps fp32 accumulation and inputs (no
// reduced-precision reduction, no down-converted fp32 inputs); its global
// engine index into *index.
static int fc_cfg_acceptable(bdesc cfg, int64_t *index) {
    bdesc eng;
    int64_t got = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS)
        return 0;
    int ok = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                      1, &got, &eng) == CUDNN_STATUS_SUCCESS;
    ok = ok && cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                        &got, index) == CUDNN_STATUS_SUCCESS;
    ok = ok && cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                        CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                        &got, notes) == CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; ok && i < got; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
            notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
            ok = 0;
    cudnnBackendDestroyDescriptor(eng);
    return ok;
}

// Builds an execution plan for one engine configuration; 0 when it builds.
static int fc_plan_build(fconv_gpu *c, const gpu_ctx *g, bdesc cfg, int64_t index) {
    bdesc plan;
    int64_t ws = 0, got = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
        CUDNN_STATUS_SUCCESS)
        return -1;
    int ok = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                      &g->cudnn) == CUDNN_STATUS_SUCCESS &&
             cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) == CUDNN_STATUS_SUCCESS &&
             cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
             cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                      CUDNN_TYPE_INT64, 1, &got, &ws) == CUDNN_STATUS_SUCCESS;
    if (!ok) {
        cudnnBackendDestroyDescriptor(plan);
        return -1;
    }
    c->plan[c->nplans] = plan, c->ws[c->nplans] = (size_t)ws, c->engine[c->nplans] = index;
    c->nplans++;
    return 0;
}

// Asks the heuristics in `mode` for configurations and builds plans for
// the acceptable ones until max_plans exist.
static int fc_plans_from(fconv_gpu *c, const gpu_ctx *g, cudnnBackendHeurMode_t mode, int max_plans,
                         sc_err *err) {
    bdesc heur, cfgs[FC_MAX_PLANS];
    int64_t count = 0;
    cudnnCheck(err, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    int rc = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c->graph) ||
             cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ||
             cudnnBackendFinalize(heur);
    int ncfg = 0;
    for (; !rc && ncfg < FC_MAX_PLANS; ncfg++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[ncfg])) break;
    if (!rc) rc = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &count, cfgs);
    for (int64_t i = 0; !rc && i < count && i < ncfg && c->nplans < max_plans; i++) {
        int64_t index = -1, dup = 0;
        if (!fc_cfg_acceptable(cfgs[i], &index)) continue;
        for (int p = 0; p < c->nplans; p++) dup |= c->engine[p] == index;
        if (!dup) fc_plan_build(c, g, cfgs[i], index);
    }
    for (int i = 0; i < ncfg; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
    cudnnBackendDestroyDescriptor(heur);
    return 0;  // a heuristics mode that offers nothing is not an error
}

// --- public API -----------------------------------------------------------------------

// Builds the graph and the plans.
fconv_gpu *fconv_gpu_create(const gpu_ctx *g, const fconv_shape *s, int max_plans, sc_err *err) {
    fconv_gpu *c = calloc(1, sizeof *c);
    if (!c) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    c->s = *s, c->ms = NAN;
    fconv_out(&s->d, &c->P, &c->Q);
    max_plans = max_plans < 1 || max_plans > FC_MAX_PLANS ? FC_MAX_PLANS : max_plans;
    int rc = c->P > 0 && c->Q > 0 ? 0 : sc_fail(err, "conv output is empty");
    if (!rc) rc = fc_graph(c, g, err);
    if (!rc) rc = fc_plans_from(c, g, CUDNN_HEUR_MODE_A, max_plans, err);
    if (!rc && c->nplans < max_plans) rc = fc_plans_from(c, g, CUDNN_HEUR_MODE_FALLBACK, max_plans, err);
    if (!rc && c->nplans == 0)
        rc = sc_fail(err, "cuDNN has no engine for conv %dx%dx%dx%d stride %d on %dx%d (%s)", s->d.K,
                     s->d.C, s->d.R, s->d.S, s->d.stride, s->d.H, s->d.W,
                     s->d.residual ? "bias+add+act" : "bias+act");
    if (rc) {
        fconv_gpu_free(c);
        return NULL;
    }
    return c;
}

// Workspace bytes of the plan in use, or the largest before tuning.
size_t fconv_gpu_workspace(const fconv_gpu *c) {
    size_t m = 0;
    for (int p = 0; p < c->nplans; p++)
        if (p == c->pick || c->pick < 0) m = c->ws[p] > m ? c->ws[p] : m;
    return m;
}

// Binds the pointers into a variant pack (kept while they stay the same).
static int fc_vpack(fconv_gpu *c, const void *const ptr[6], sc_err *err) {
    if (c->vpack && !memcmp(c->vp_ptr, ptr, sizeof c->vp_ptr)) return 0;
    if (c->vpack) cudnnBackendDestroyDescriptor(c->vpack);
    c->vpack = NULL;
    int64_t uids[5] = {UID_X, UID_W, UID_B, UID_Y, UID_Z};
    void *data[5] = {(void *)ptr[0], (void *)ptr[1], (void *)ptr[2], (void *)ptr[4], (void *)ptr[3]};
    void *ws = (void *)ptr[5];
    const int64_t nb = c->s.d.residual ? 5 : 4;
    cudnnCheck(err, cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &c->vpack));
    BE_SET(err, c->vpack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, nb, uids);
    BE_SET(err, c->vpack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, nb, data);
    BE_SET(err, c->vpack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    cudnnCheck(err, cudnnBackendFinalize(c->vpack));
    memcpy(c->vp_ptr, ptr, sizeof c->vp_ptr);
    return 0;
}

// Queues plan p on the given buffers.
static int fc_exec(const gpu_ctx *g, fconv_gpu *c, int p, const void *x, const void *w,
                   const void *bias, const void *z, void *y, void *ws, sc_err *err) {
    const void *ptr[6] = {x, w, bias, z, y, ws};
    SC_TRY(fc_vpack(c, ptr, err));
    cudnnCheck(err, cudnnBackendExecute(g->cudnn, c->plan[p], c->vpack));
#ifdef SC_TEST_PLANT_WRONG
    // test-only build: the first plan writes a wrong value over y's first elements
    if (p == 0 && c->nplans > 1) cudaCheck(err, cudaMemsetAsync(y, 0x7b, 4, g->stream));
#endif
    return 0;
}

// Queues the layer with the plan in use.
int fconv_gpu_run(const gpu_ctx *g, fconv_gpu *c, const void *x, const void *w, const void *bias,
                  const void *z, void *y, void *ws, sc_err *err) {
    return fc_exec(g, c, c->pick, x, w, bias, z, y, ws, err);
}

// --- the check against the CPU reference -------------------------------------------

// The tuner's check: the batch's first and last images of x (and z), the
// weights and bias as fp32 on the host, the CPU's output for them and its
// magnitudes (the rounding bound), and the storage type's rounding units.
typedef struct {
    int m;                       // images checked (1 or 2)
    size_t in_img, out_img, wn;  // floats per image of x, per image of y, of w
    float *x, *w, *b, *z, *ref, *y, *mag;
    float *dev;                  // device fp32 scratch for the casts
    fconv_tol tol;
} fc_check;

// Frees the check's buffers.
static void fc_check_free(fc_check *k) {
    free(k->x), free(k->w), free(k->b), free(k->z), free(k->ref), free(k->y), free(k->mag);
    cudaFree(k->dev);
}

// host[0, count) = fp32 of device src[first, first + count) of type dt (syncs).
static int fc_fetch(const gpu_ctx *g, const fc_check *k, gpu_dtype dt, const void *src, size_t first,
                    size_t count, float *host, sc_err *err) {
    const char *at = (const char *)src + first * gpu_dtype_size(dt);
    SC_TRY(nhwc_to_f32_gpu(g, dt, count, at, k->dev, err));
    cudaCheck(err, cudaMemcpyAsync(host, k->dev, count * sizeof *host, cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(err, cudaStreamSynchronize(g->stream));
    return 0;
}

// Fetches images 0 and (when two are checked) n-1 of an (n, ., ., .)
// tensor of `img` elements per image into host.
static int fc_fetch_images(const gpu_ctx *g, const fconv_gpu *c, const fc_check *k, const void *src,
                           size_t img, float *host, sc_err *err) {
    SC_TRY(fc_fetch(g, k, c->s.dt, src, 0, img, host, err));
    return k->m < 2 ? 0 : fc_fetch(g, k, c->s.dt, src, (size_t)(c->s.d.n - 1) * img, img, host + img, err);
}

// The rounding units of a storage type (kernels/fconv.h): the output's
// rounding (fp16 2^-11, bf16 2^-8, fp32 2^-24), fp32 accumulation with
// truncation (2^-23 an add), exact fp16/bf16 products in fp32; fp32 storage
// may run on TF32 tensor cores, whose inputs keep 10 mantissa bits (each
// input off by up to 2^-10 when truncated: 2^-9 a product). The reference is
// the CPU's on the same stored inputs, so their rounding is not counted.
static fconv_tol fc_tolerance(gpu_dtype dt, const fconv_dims *d) {
    fconv_tol t = {.u_acc = 0x1p-23, .terms = fconv_terms(d)};
    if (dt == GDT_F16) t.u_out = 0x1p-11, t.tiny = 0x1p-24;
    else if (dt == GDT_BF16) t.u_out = 0x1p-8, t.tiny = 0x1p-126;
    else t.u_out = 0x1p-24, t.u_prod = 0x1p-9, t.tiny = 0x1p-126;
    return t;
}

// Fetches the inputs of the checked images and computes the CPU's output.
static int fc_check_init(const gpu_ctx *g, const fconv_gpu *c, const void *const ptr[6], fc_check *k,
                         sc_err *err) {
    const fconv_dims *d = &c->s.d;
    memset(k, 0, sizeof *k);
    k->m = d->n > 1 ? 2 : 1, k->tol = fc_tolerance(c->s.dt, d);
    k->in_img = (size_t)d->H * d->W * d->C, k->out_img = (size_t)c->P * c->Q * d->K;
    k->wn = (size_t)d->K * d->R * d->S * d->C;
    size_t big = k->in_img > k->out_img ? k->in_img : k->out_img;
    big = big > k->wn ? big : k->wn;
    k->x = malloc(k->m * k->in_img * sizeof(float)), k->w = malloc(k->wn * sizeof(float));
    k->b = malloc(d->K * sizeof(float)), k->z = malloc(k->m * k->out_img * sizeof(float));
    k->ref = malloc(k->m * k->out_img * sizeof(float)), k->y = malloc(k->m * k->out_img * sizeof(float));
    k->mag = malloc(k->m * k->out_img * sizeof(float));
    if (!k->x || !k->w || !k->b || !k->z || !k->ref || !k->y || !k->mag) return fc_check_free(k), sc_fail(err, "out of memory");
    int rc = cudaMalloc((void **)&k->dev, big * sizeof(float)) != cudaSuccess
                 ? sc_fail(err, "checking cuDNN plans: %s", cudaGetErrorString(cudaGetLastError())) : 0;
    if (!rc) rc = fc_fetch_images(g, c, k, ptr[0], k->in_img, k->x, err);
    if (!rc) rc = fc_fetch(g, k, c->s.dt, ptr[1], 0, k->wn, k->w, err);
    if (!rc) rc = fc_fetch(g, k, c->s.dt, ptr[2], 0, (size_t)d->K, k->b, err);
    if (!rc && d->residual) rc = fc_fetch_images(g, c, k, ptr[3], k->out_img, k->z, err);
    if (rc) return fc_check_free(k), rc;
    fconv_dims dm = *d;
    dm.n = k->m;
    fconv_cpu(&dm, k->m, k->x, k->w, k->b, k->z, k->ref);
    fconv_cpu_mag(&dm, k->m, k->x, k->w, k->b, k->z, k->mag);
    return 0;
}

// Runs plan p once and sets *rel to max |y - CPU| / max |CPU| on the
// checked images (reported) and *ratio to the error over its rounding bound
// (fconv_check_ratio: the plan passes at most 1); both infinite on a NaN or
// when the plan fails to run.
static int fc_check_plan(const gpu_ctx *g, fconv_gpu *c, int p, const void *const ptr[6],
                         const fc_check *k, double *rel, double *ratio, sc_err *err) {
    sc_err why = {{0}};
    *rel = *ratio = INFINITY;
    if (fc_exec(g, c, p, ptr[0], ptr[1], ptr[2], ptr[3], (void *)ptr[4], (void *)ptr[5], &why) ||
        cudaStreamSynchronize(g->stream) != cudaSuccess)
        return cudaGetLastError(), 0;  // a plan that cannot run is skipped, not fatal
    SC_TRY(fc_fetch_images(g, c, k, ptr[4], k->out_img, k->y, err));
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < k->m * k->out_img; i++) {
        const double e = fabs((double)k->y[i] - k->ref[i]);
        if (!(e <= num)) num = e;  // NaN propagates
        den = fabs(k->ref[i]) > den ? fabs(k->ref[i]) : den;
    }
    *rel = den > 0 ? num / den : num;
    *ratio = fconv_check_ratio(k->m * k->out_img, k->y, k->ref, k->mag, &k->tol);
    return 0;
}

// One plan on fixed buffers (the argument of fc_run_plan).
typedef struct {
    const gpu_ctx *g;
    fconv_gpu *c;
    int p;
    const void *const *ptr;  // x, w, bias, z, y, ws
} fc_timed;

// Queues the plan once (a gpu_run_fn).
static int fc_run_plan(void *arg, sc_err *err) {
    const fc_timed *t = arg;
    return fc_exec(t->g, t->c, t->p, t->ptr[0], t->ptr[1], t->ptr[2], t->ptr[3], (void *)t->ptr[4],
                   (void *)t->ptr[5], err);
}

// Median milliseconds of `repeat` runs of plan p after two warm-up runs;
// INFINITY when the plan fails to run.
static double fc_time_plan(const gpu_ctx *g, fconv_gpu *c, int p, const void *const ptr[6], int repeat) {
    fc_timed t = {g, c, p, ptr};
    sc_err e = {{0}};
    double ms;
    repeat = repeat < 1 ? 1 : repeat > 64 ? 64 : repeat;
    if (gpu_time_median_busy(g, fc_run_plan, &t, 2, repeat, &ms, &e)) return cudaGetLastError(), INFINITY;
    return ms;
}

// Keeps plan `keep` alone.
static void fc_keep(fconv_gpu *c, int keep) {
    for (int p = 0; p < c->nplans; p++)
        if (p != keep) cudnnBackendDestroyDescriptor(c->plan[p]);
    c->plan[0] = c->plan[keep], c->ws[0] = c->ws[keep], c->engine[0] = c->engine[keep];
    c->nplans = 1, c->pick = 0;
}

// Largest |output| of the CPU reference on the checked images.
static double fc_ref_max(const fc_check *k) {
    double m = 0.0;
    for (size_t i = 0; i < k->m * k->out_img; i++) m = fabs((double)k->ref[i]) > m ? fabs((double)k->ref[i]) : m;
    return m;
}

// Times every plan that matches the CPU reference (fconv_check) and keeps
// the fastest.
int fconv_gpu_tune(const gpu_ctx *g, fconv_gpu *c, const void *x, const void *w, const void *bias,
                   const void *z, void *y, void *ws, size_t ws_max, int repeat, double *ms,
                   sc_err *err) {
    const void *ptr[6] = {x, w, bias, z, y, ws};
    fc_check k;
    SC_TRY(fc_check_init(g, c, ptr, &k, err));
    int best = -1, rc = 0;
    double best_ms = INFINITY, best_err = NAN, closest = INFINITY;
    c->rejected = 0;
    for (int p = 0; p < c->nplans && !rc; p++) {
        double e = INFINITY, ratio = INFINITY;
        if (c->ws[p] > ws_max) continue;
        rc = fc_check_plan(g, c, p, ptr, &k, &e, &ratio, err);
        if (!rc && !(ratio <= 1.0)) c->rejected++, closest = ratio < closest ? ratio : closest;
        if (rc || !(ratio <= 1.0)) continue;
        double t = fc_time_plan(g, c, p, ptr, repeat);
        if (t < best_ms) best_ms = t, best = p, best_err = e;
    }
    const double ymax = fc_ref_max(&k);
    fc_check_free(&k);
    if (rc) return rc;
    if (best < 0 && c->s.dt == GDT_F16 && ymax > 65504.0)  // fp16's largest finite value
        return sc_fail(err, "conv %dx%dx%dx%d: its outputs reach %.3g, beyond fp16's largest finite value "
                       "(65504); this model cannot run in fp16 (bf16 or fp32 can)",
                       c->s.d.K, c->s.d.C, c->s.d.R, c->s.d.S, ymax);
    if (best < 0)
        return sc_fail(err, "none of the %d cuDNN plans of conv %dx%dx%dx%d ran and matched the CPU "
                       "reference (%d did not match; the closest was off by %.3g times its rounding bound)",
                       c->nplans, c->s.d.K, c->s.d.C, c->s.d.R, c->s.d.S, c->rejected, closest);
    fc_keep(c, best);
    c->ms = *ms = best_ms, c->err = best_err;
    return 0;
}

// Plans the last tune rejected because they did not match the CPU reference.
int fconv_gpu_rejected(const fconv_gpu *c) { return c->rejected; }

// Engine index, workspace, tuned time, check error and plans rejected.
void fconv_gpu_describe(const fconv_gpu *c, char *buf, size_t len) {
    snprintf(buf, len, "cuDNN graph engine %lld (conv+bias%s%s), ws %zu KB, CPU check %.1e, %d rejected",
             (long long)c->engine[c->pick], c->s.d.residual ? "+add" : "", c->s.d.relu ? "+relu" : "",
             c->ws[c->pick] >> 10, c->err, c->rejected);
}

// Frees the plans, the variant pack and the graph.
void fconv_gpu_free(fconv_gpu *c) {
    if (!c) return;
    for (int p = 0; p < c->nplans; p++) cudnnBackendDestroyDescriptor(c->plan[p]);
    if (c->vpack) cudnnBackendDestroyDescriptor(c->vpack);
    if (c->graph) cudnnBackendDestroyDescriptor(c->graph);
    free(c);
}
