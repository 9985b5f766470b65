// The channels-last dense engine on the GPU (runtime/dengine.h): maps each
// op of a deploy plan onto a fused cuDNN graph convolution, a cuBLASLt
// linear layer or a small NHWC kernel, tunes the convolutions on the real
// activations, and replays the forward pass as one CUDA graph.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv_gpu.h"
#include "kernels/concat_gpu.h"
#include "kernels/fconv_gpu.h"
#include "kernels/median.h"
#include "kernels/flinear_gpu.h"
#include "kernels/nhwc_ops_gpu.h"
#include "runtime/dengine.h"
#include "runtime/dengine_bsconv.h"
#include "runtime/dengine_tail.h"
#include "runtime/dengine_sparse.h"
#include "runtime/half.h"
#include "runtime/exec.h"

#define DE_TUNE_WS ((size_t)256 << 20)
#define DE_MAX_PLANS 12
#define DE_CONFIRM_ROUNDS 3  // alternating whole-graph measurements per sparse op
#define DE_CONFIRM_REPEAT 20 // replays per measurement
#define DE_TAIL_CANDIDATES 48 // chains the tail search builds and times at most

typedef enum { EO_SMALL = 0, EO_CONV, EO_LINEAR, EO_NONE } eng_kind;

// One op of the plan as the engine runs it.
typedef struct {
    eng_kind kind;        // EO_NONE: fused into a conv, or an alias (flatten)
    fconv_gpu *fc;        // EO_CONV
    flinear_gpu *fl;      // EO_LINEAR
    void *w, *bias;       // device weights (KRSC or (K, HWC)) and bias, storage type
    int res;              // EO_CONV: tensor added before the ReLU, -1: none
    int relu;             // EO_CONV: ReLU last (the op's own or the fused add's)
    int out;              // tensor written (the fused add's output)
    void *pre_pool;       // EO_CONV with a max pool after it: (n, P, Q, K) conv output
    float *scale, *shift; // DOP_AFFINE: device fp32 (c)
    double ms;            // tuned time, NAN when not timed
    double dense_ms;      // EO_CONV: tuned time of its cuDNN plan (NAN when not timed)
    double sparse_ms;     // mixed plans: fastest checked sparse path (kept or not), else NAN
    desparse *sp;         // mixed plans: the sparse path, when it runs the op
    debs *bs;             // mixed plans: the block-sparse path, when it runs the op
    double graph_gain_ms; // mixed plans: the whole forward's time on cuDNN minus on the sparse
                          // path (de_confirm_sparse), NAN where not measured
    size_t ws_off;        // EO_CONV: byte offset of its own workspace in the engine's
} eng_op;

struct dengine {
    const deploy_plan *p;
    dengine_prec prec;
    gpu_dtype dt;
    size_t esz;
    int n;                // the batch the engine is built for
    int mixed;            // 0: dense; 1: sparse convs where faster; 2: wherever correct
    void *check;          // mixed plans: (largest tensor) scratch for the sparse check
    gpu_ctx g;
    int *cs;              // per tensor: channels stored (the input is padded)
    void **t;             // per tensor (n, h, w, cs) device; aliases share
    signed char *owned;   // per tensor: 1 when t[i] is this engine's allocation
    eng_op *ops;
    uint8_t *d_img;       // (n, 3, H, W) device
    float *d_logits;      // (n, classes) device
    float *h_logits;      // (n, classes) pinned host
    void *ws;             // workspace of the tuned plans, one region per conv
    size_t ws_bytes;
    detail_chain tail;    // mixed plans: ops [tail.lo, tail.hi) as one tail-kernel launch, when kept
    int tail_on, tail_parked;  // whether the forward runs the tail (de_park saves it)
    double tail_ms[2];         // the forward with the tail and without it (medians), when tried
    char tail_note[512];       // mixed fp16 plans without a kept tail: why ("": no search)
    cudaGraphExec_t graph;
};

// The precision's name.
const char *dengine_prec_name(dengine_prec p) {
    return p == DE_FP16 ? "fp16" : p == DE_BF16 ? "bf16" : "tf32";
}

// --- analysis --------------------------------------------------------------------

// Index of the op writing tensor t, -1 for the plan's input (or none).
static int de_producer(const deploy_plan *p, int t) {
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].out == t) return i;
    return -1;
}

// Ops that read tensor t.
static int de_readers(const deploy_plan *p, int t) {
    int r = 0, ins[LAYER_MAX_IN];
    for (int i = 0; i < p->nops; i++)
        for (int k = deploy_op_inputs(&p->ops[i], ins) - 1; k >= 0; k--) r += ins[k] == t;
    return r;
}

// 1 when conv op c may take add op a into its epilogue with `other` as the
// residual: c is a plain conv (no ReLU, no pool) whose output only the add
// reads, and `other` is ready before c runs.
static int de_can_fuse(const deploy_plan *p, int c, int a, int other) {
    if (c < 0 || c >= a) return 0;
    const deploy_op *op = &p->ops[c];
    return op->kind == DOP_CONV && !deploy_op_layer(p, op)->is_linear && !op->desc.relu &&
           op->desc.pool_k == 0 && de_readers(p, op->out) == 1 && de_producer(p, other) < c;
}

// Marks every residual add that a conv's epilogue can take.
static void de_fuse_adds(dengine *e) {
    const deploy_plan *p = e->p;
    for (int a = 0; a < p->nops; a++) {
        const deploy_op *op = &p->ops[a];
        if (op->kind != DOP_ADD) continue;
        const int in[2] = {op->in, op->in2};
        for (int k = 0; k < 2; k++) {
            int c = de_producer(p, in[k]);
            if (!de_can_fuse(p, c, a, in[1 - k]) || e->ops[c].res >= 0) continue;
            e->ops[c].res = in[1 - k], e->ops[c].relu = op->relu, e->ops[c].out = op->out;
            e->ops[a].kind = EO_NONE;
            break;
        }
    }
}

// Fills the op kinds and the stored channels of every tensor.
static int de_analyse(dengine *e, sc_err *err) {
    const deploy_plan *p = e->p;
    e->ops = calloc((size_t)p->nops + 1, sizeof *e->ops);
    e->cs = calloc((size_t)p->ntensors + 1, sizeof *e->cs);
    if (!e->ops || !e->cs) return sc_fail(err, "out of memory");
    for (int t = 0; t < p->ntensors; t++) e->cs[t] = p->tensors[t].c;
    const int align = e->dt == GDT_F32 ? 4 : 8;  // 16-byte channel rows for the tensor cores
    e->cs[p->input] = (p->tensors[p->input].c + align - 1) / align * align;
    for (int i = 0; i < p->nops; i++) {
        const deploy_op *op = &p->ops[i];
        eng_op *o = &e->ops[i];
        o->res = -1, o->out = op->out, o->ms = o->dense_ms = o->sparse_ms = o->graph_gain_ms = NAN;
        o->kind = op->kind == DOP_COPY ? EO_NONE : EO_SMALL;
        if (op->kind == DOP_CONV) {
            o->kind = deploy_op_layer(p, op)->is_linear ? EO_LINEAR : EO_CONV;
            o->relu = op->desc.relu;
        }
    }
    de_fuse_adds(e);
    return 0;
}

// --- buffers and weights -------------------------------------------------------------

// Elements of tensor t at the engine's batch.
static size_t de_elems(const dengine *e, int t) {
    const deploy_tensor *d = &e->p->tensors[t];
    return (size_t)e->n * d->h * d->w * e->cs[t];
}

// Elements of the sparse check's scratch: the largest tensor or conv output before its pool.
static size_t de_check_elems(const dengine *e) {
    size_t big = 0;
    for (int t = 0; t < e->p->ntensors; t++) big = de_elems(e, t) > big ? de_elems(e, t) : big;
    for (int i = 0; i < e->p->nops; i++) {
        const spconv_desc *d = &e->p->ops[i].desc;
        const size_t pre = (size_t)e->n * d->P * d->Q * d->K;
        if (e->ops[i].kind == EO_CONV && d->pool_k > 0 && pre > big) big = pre;
    }
    return big;
}

// Allocates every tensor poisoned with NaNs (a flatten copy aliases its
// input) and the I/O buffers.
static int de_buffers(dengine *e, sc_err *err) {
    const deploy_plan *p = e->p;
    const net *nt = p->m->nt;
    e->t = calloc((size_t)p->ntensors + 1, sizeof *e->t);
    e->owned = calloc((size_t)p->ntensors + 1, 1);
    if (!e->t || !e->owned) return sc_fail(err, "out of memory");
    for (int i = 0; i < p->nops; i++)  // ops are in order: an alias's source exists
        if (p->ops[i].kind == DOP_COPY) e->t[p->ops[i].out] = (void *)(intptr_t)-1;
    for (int t = 0; t < p->ntensors; t++) {
        if (e->t[t]) continue;
        cudaCheck(err, cudaMalloc(&e->t[t], de_elems(e, t) * e->esz));
        cudaCheck(err, cudaMemset(e->t[t], 0xff, de_elems(e, t) * e->esz));  // NaN: unwritten shows
        e->owned[t] = 1;
    }
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i].kind == DOP_COPY) e->t[p->ops[i].out] = e->t[p->ops[i].in];
    if (e->mixed) cudaCheck(err, cudaMalloc(&e->check, de_check_elems(e) * e->esz));
    cudaCheck(err, cudaMalloc((void **)&e->d_img, (size_t)e->n * nt->in_c * nt->in_h * nt->in_w));
    cudaCheck(err, cudaMalloc((void **)&e->d_logits, (size_t)e->n * nt->classes * sizeof(float)));
    cudaCheck(err, cudaMallocHost((void **)&e->h_logits, (size_t)e->n * nt->classes * sizeof(float)));
    return 0;
}

// Uploads count fp32 values as a device array of the engine's storage type.
static void *de_upload(dengine *e, const float *h, size_t count, sc_err *err) {
    void *d = NULL;
    if (!nhwc_new_from_host_f32(&e->g, e->dt, count, h, &d, err)) return d;
    cudaFree(d);
    return NULL;
}

// Dense weights of conv op i reordered to (K, R, S, Cs) with zero channels
// past C; for a linear layer, (K, h*w*c) with its input flattened channels-last.
static float *de_reorder(const dengine *e, int i, int cs) {
    const deploy_op *op = &e->p->ops[i];
    const sparse_layer *sl = deploy_op_layer(e->p, op);
    float *w = deploy_op_dense_weights(e->p, op);
    float *r = calloc((size_t)sl->K * cs * sl->R * sl->S + 1, sizeof *r);
    const deploy_tensor *in = &e->p->tensors[op->in];
    const int hw = sl->is_linear ? in->h * in->w : 1, c = sl->is_linear ? in->c : sl->C;
    for (int k = 0; w && r && k < sl->K; k++)
        for (int ch = 0; ch < c; ch++)
            for (int rs = 0; rs < sl->R * sl->S * hw; rs++) {
                const size_t src = ((size_t)k * c + ch) * sl->R * sl->S * hw + rs;
                const size_t dst = sl->is_linear ? (size_t)k * sl->C + (size_t)rs * c + ch
                                                 : ((size_t)k * sl->R * sl->S + rs) * cs + ch;
                r[dst] = w[src];
            }
    free(w);
    return r;
}

// Uploads the weights and bias of conv/linear op i.
static int de_weights(dengine *e, int i, int cs, sc_err *err) {
    const deploy_op *op = &e->p->ops[i];
    const sparse_layer *sl = deploy_op_layer(e->p, op);
    float *w = de_reorder(e, i, cs), *b = calloc((size_t)sl->K, sizeof *b);
    if (!w || !b) return free(w), free(b), sc_fail(err, "out of memory");
    if (op->desc.bias) memcpy(b, op->desc.bias, (size_t)sl->K * sizeof *b);
    eng_op *o = &e->ops[i];
    o->w = de_upload(e, w, (size_t)sl->K * cs * sl->R * sl->S, err);
    if (o->w) o->bias = de_upload(e, b, (size_t)sl->K, err);
    free(w), free(b);
    return o->w && o->bias ? 0 : -1;
}

// --- per-op set-up ---------------------------------------------------------------------

// The fused convolution op i computes.
static fconv_shape de_conv_shape(const dengine *e, int i) {
    const deploy_op *op = &e->p->ops[i];
    const spconv_desc *d = &op->desc;
    return (fconv_shape){.d = {.n = e->n, .C = e->cs[op->in], .H = d->H, .W = d->W, .K = d->K,
                               .R = d->R, .S = d->S, .stride = d->stride, .pad = d->pad,
                               .residual = e->ops[i].res >= 0, .relu = e->ops[i].relu},
                         .dt = e->dt};
}

// Uploads conv op i's weights and makes its pre-pool buffer (its cuDNN
// plans are made when the tuning pass reaches it).
static int de_conv(dengine *e, int i, sc_err *err) {
    const spconv_desc *d = &e->p->ops[i].desc;
    SC_TRY(de_weights(e, i, e->cs[e->p->ops[i].in], err));
    if (d->pool_k > 0)
        cudaCheck(err, cudaMalloc(&e->ops[i].pre_pool, (size_t)e->n * d->P * d->Q * d->K * e->esz));
    return 0;
}

// Makes conv op i's plans and checks and times them on its real buffers,
// keeping the fastest that matches the CPU (kernels/fconv_gpu.h).
static int de_conv_tune(dengine *e, int i, const void *z, void *y, void *ws, size_t ws_max,
                        int repeat, sc_err *err) {
    eng_op *o = &e->ops[i];
    const fconv_shape s = de_conv_shape(e, i);
    if (!(o->fc = fconv_gpu_create(&e->g, &s, DE_MAX_PLANS, err)) ||
        fconv_gpu_tune(&e->g, o->fc, e->t[e->p->ops[i].in], o->w, o->bias, z, y, ws, ws_max, repeat,
                       &o->ms, err))
        return sc_wrap(err, "%s", e->p->ops[i].name);
    o->dense_ms = o->ms;
    return 0;
}

// Creates the cuBLASLt linear layer of op i.
static int de_linear(dengine *e, int i, sc_err *err) {
    const deploy_op *op = &e->p->ops[i];
    const sparse_layer *sl = deploy_op_layer(e->p, op);
    SC_TRY(de_weights(e, i, sl->C, err));
    e->ops[i].fl = flinear_gpu_create(e->n, sl->K, sl->C, op->desc.relu, e->dt, err);
    return e->ops[i].fl ? 0 : sc_wrap(err, "%s", op->name);
}

// Uploads the scale and shift of an unfolded batch norm.
static int de_affine(dengine *e, int i, sc_err *err) {
    const deploy_op *op = &e->p->ops[i];
    const size_t bytes = (size_t)e->p->tensors[op->out].c * sizeof(float);
    cudaCheck(err, cudaMalloc((void **)&e->ops[i].scale, bytes));
    cudaCheck(err, cudaMalloc((void **)&e->ops[i].shift, bytes));
    SC_TRY(gpu_upload(e->ops[i].scale, op->scale, bytes, err));
    SC_TRY(gpu_upload(e->ops[i].shift, op->shift, bytes, err));
    return 0;
}

// Sets up every op.
static int de_setup(dengine *e, sc_err *err) {
    for (int i = 0; i < e->p->nops; i++) {
        if (e->ops[i].kind == EO_CONV) SC_TRY(de_conv(e, i, err));
        else if (e->ops[i].kind == EO_LINEAR) SC_TRY(de_linear(e, i, err));
        else if (e->p->ops[i].kind == DOP_AFFINE) SC_TRY(de_affine(e, i, err));
    }
    return 0;
}

// --- running ----------------------------------------------------------------------------

// Geometry of tensor t at the engine's batch.
static nhwc_geom de_geom(const dengine *e, int t) {
    const deploy_tensor *d = &e->p->tensors[t];
    return (nhwc_geom){e->n, d->h, d->w, e->cs[t]};
}

// Queues a concat: each input into its channel slice of y (rows of n*h*w pixels).
static int de_concat(dengine *e, const deploy_op *op, void *y, sc_err *err) {
    const deploy_tensor *d = &e->p->tensors[op->out];
    const size_t rows = (size_t)e->n * d->h * d->w;
    for (int k = 0, off = 0; k < op->nin; k++) {
        const int t = op->ins[k], c = e->p->tensors[t].c;
        if (e->cs[t] != c) return sc_fail(err, "op %s: the engine cannot join the padded input", op->name);
        SC_TRY(concat_forward_gpu(&e->g, e->dt, rows, c, 1, e->cs[op->out], off, e->t[t], y, err));
        off += c;
    }
    return 0;
}

// Queues a small op.
static int de_small(dengine *e, int i, sc_err *err) {
    const deploy_op *op = &e->p->ops[i];
    const nhwc_geom gx = de_geom(e, op->in), gy = de_geom(e, op->out);
    const void *x = e->t[op->in];
    void *y = e->t[op->out];
    const size_t count = de_elems(e, op->in);
    switch (op->kind) {
    case DOP_ADD: return nhwc_add_gpu(&e->g, e->dt, count, x, e->t[op->in2], y, op->relu, err);
    case DOP_RELU: return nhwc_relu_gpu(&e->g, e->dt, count, x, y, err);
    case DOP_AFFINE:
        return nhwc_affine_gpu(&e->g, e->dt, &gx, x, e->ops[i].scale, e->ops[i].shift, y, op->relu, err);
    case DOP_MAXPOOL:
    case DOP_AVGPOOL:
        return nhwc_pool_gpu(&e->g, e->dt, &gx, x, op->k, op->stride, op->pad,
                             op->kind == DOP_AVGPOOL, gy.h, gy.w, y, err);
    case DOP_GAP: return nhwc_gap_gpu(&e->g, e->dt, &gx, x, y, err);
    case DOP_CONCAT: return de_concat(e, op, y, err);
    case DOP_COPY:
    case DOP_CONV: break;
    }
    return sc_fail(err, "op %s: not a small op", op->name);
}

// Max |a - b| / max |b| of two fp16 device arrays of count elements (syncs).
static int de_half_relerr(const dengine *e, const void *a, const void *b, size_t count, double *rel,
                          sc_err *err) {
    uint16_t *h = malloc(2 * count * sizeof *h);
    if (!h) return sc_fail(err, "out of memory");
    int rc = cudaStreamSynchronize(e->g.stream) != cudaSuccess ||
             cudaMemcpy(h, a, count * 2, cudaMemcpyDeviceToHost) != cudaSuccess ||
             cudaMemcpy(h + count, b, count * 2, cudaMemcpyDeviceToHost) != cudaSuccess;
    double num = 0.0, den = 0.0;
    for (size_t i = 0; !rc && i < count; i++) {
        const double x = half_to_float(h[i]), y = half_to_float(h[count + i]), d = fabs(x - y);
        if (!(d <= num)) num = d;  // NaN propagates
        den = fabs(y) > den ? fabs(y) : den;
    }
    free(h);
    *rel = den > 0 ? num / den : num;
    return rc ? sc_fail(err, "checking a sparse layer: %s", cudaGetErrorString(cudaGetLastError())) : 0;
}

// Queues op i's sparse path into y.
static int de_sparse_run(dengine *e, int i, desparse *sp, void *y, sc_err *err) {
    const eng_op *o = &e->ops[i];
    const int in = e->p->ops[i].in;
    return desparse_run(&e->g, sp, e->t[in], e->cs[in], o->res >= 0 ? e->t[o->res] : NULL,
                        o->res >= 0 ? o->relu : 0, y, err);
}

// One run of a sparse path into the check scratch (the argument of de_sparse_once).
typedef struct {
    dengine *e;
    int i;
    desparse *sp;
} de_sparse_timed;

// Queues the sparse path once (a gpu_run_fn).
static int de_sparse_once(void *arg, sc_err *err) {
    de_sparse_timed *t = arg;
    return de_sparse_run(t->e, t->i, t->sp, t->e->check, err);
}

// Median milliseconds of `repeat` runs of op i's sparse path into the scratch.
static int de_sparse_time(dengine *e, int i, desparse *sp, int repeat, double *ms, sc_err *err) {
    de_sparse_timed t = {e, i, sp};
    return gpu_time_median_busy(&e->g, de_sparse_once, &t, 2, repeat < 1 ? 1 : repeat, ms, err);
}

// Mixed plans: builds op i's sparse path, checks it against the cuDNN
// output already in the op's tensor (fp16 tolerance 3e-2 of the largest),
// times it with its conversions and keeps it when faster (or forced). A
// layer the sparse kernel cannot take stays on cuDNN.
static int de_try_sparse(dengine *e, int i, int repeat, sc_err *err) {
    eng_op *o = &e->ops[i];
    sc_err why = {{0}};
    desparse *sp = desparse_create(e->p, i, e->n, e->dt, &why);
    if (!sp) return 0;
    double rel = INFINITY, ms = INFINITY;
    int rc = desparse_tune(&e->g, sp, e->t[e->p->ops[i].in], e->cs[e->p->ops[i].in], err);
    if (!rc) rc = de_sparse_run(e, i, sp, e->check, err);
    if (!rc) rc = de_half_relerr(e, e->check, e->t[o->out], de_elems(e, o->out), &rel, err);
    if (!rc && rel <= 3e-2) rc = de_sparse_time(e, i, sp, repeat, &ms, err);
    if (!rc && rel <= 3e-2 && !(ms >= o->sparse_ms)) o->sparse_ms = ms;
    if (!rc && rel <= 3e-2 && (e->mixed == 2 || ms < o->ms)) o->sp = sp, o->ms = ms;
    else desparse_free(sp);
    return rc;
}

// Output of op i's block-sparse path b: the op's tensor, or its pre-pool
// buffer when the engine pools after it.
static void *de_bs_target(const dengine *e, int i, const debs *b) {
    const eng_op *o = &e->ops[i];
    return o->pre_pool && !debs_pooled(b) ? o->pre_pool : e->t[o->out];
}

// Elements of that output.
static size_t de_bs_elems(const dengine *e, int i, const debs *b) {
    const spconv_desc *d = &e->p->ops[i].desc;
    if (e->ops[i].pre_pool && !debs_pooled(b)) return (size_t)e->n * d->P * d->Q * d->K;
    return de_elems(e, e->ops[i].out);
}

// Queues op i's block-sparse path b into y (with the op's fused residual).
static int de_bs_run(dengine *e, int i, const debs *b, void *y, sc_err *err) {
    const eng_op *o = &e->ops[i];
    return debs_run(&e->g, b, e->t[e->p->ops[i].in], o->res >= 0 ? e->t[o->res] : NULL, y, err);
}

// One run of a block-sparse path into the check scratch (the argument of de_bs_once).
typedef struct {
    dengine *e;
    int i;
    const debs *b;
} de_bs_timed;

// Queues the block-sparse path once (a gpu_run_fn).
static int de_bs_once(void *arg, sc_err *err) {
    de_bs_timed *t = arg;
    return de_bs_run(t->e, t->i, t->b, t->e->check, err);
}

// Checks variant v of op i's block-sparse path against the cuDNN output
// (fp16 tolerance 3e-2 of the largest) and times it; ms stays INFINITY when
// the variant does not fit or fails the check.
static int de_bs_variant(dengine *e, int i, debs *b, int v, int repeat, double *ms, sc_err *err) {
    sc_err why = {{0}};
    double rel = INFINITY;
    *ms = INFINITY;
    if (debs_set_variant(&e->g, b, v, &why)) return 0;
    SC_TRY(de_bs_run(e, i, b, e->check, err));
    SC_TRY(de_half_relerr(e, e->check, de_bs_target(e, i, b), de_bs_elems(e, i, b), &rel, err));
    if (!(rel <= 3e-2)) return 0;
    de_bs_timed t = {e, i, b};
    return gpu_time_median_busy(&e->g, de_bs_once, &t, 2, repeat < 1 ? 1 : repeat, ms, err);
}

// Mixed plans: builds op i's block-sparse path when its layer is BSR,
// finds its fastest variant that passes the check, and runs the op on it
// when faster than the op's path so far (or forced, replacing a sparse path).
static int de_try_bsconv(dengine *e, int i, int repeat, sc_err *err) {
    eng_op *o = &e->ops[i];
    const int in = e->p->ops[i].in;
    sc_err why = {{0}};
    debs *b = debs_create(&e->g, e->p, i, e->n, e->cs[in], o->res >= 0, o->relu, e->dt, &why);
    if (!b) return 0;
    double best = INFINITY, ms = INFINITY;
    int bv = -1, rc = 0;
    for (int v = 0; !rc && v < BSCONV_GPU_VARIANTS; v++) {
        rc = de_bs_variant(e, i, b, v, repeat, &ms, err);
        if (!rc && ms < best) best = ms, bv = v;
    }
    if (!rc && bv >= 0 && !(best >= o->sparse_ms)) o->sparse_ms = best;
    const int keep = !rc && bv >= 0 && (e->mixed == 2 || best < o->ms);
    if (keep) rc = debs_set_variant(&e->g, b, bv, err);
    if (keep && !rc) {
        desparse_free(o->sp);
        o->sp = NULL, o->bs = b, o->ms = best;
    } else debs_free(b);
    return rc;
}

// Queues the engine's max pool of conv op i (its pre-pool buffer into its tensor).
static int de_pool_after(dengine *e, int i, sc_err *err) {
    const spconv_desc *d = &e->p->ops[i].desc;
    const nhwc_geom gp = {e->n, d->P, d->Q, d->K}, gy = de_geom(e, e->ops[i].out);
    return nhwc_pool_gpu(&e->g, e->dt, &gp, e->ops[i].pre_pool, d->pool_k, d->pool_stride, d->pool_pad, 0,
                         gy.h, gy.w, e->t[e->ops[i].out], err);
}

// Queues op i on its block-sparse path, then the engine's pool when the kernel does not take it.
static int de_bs_conv(dengine *e, int i, sc_err *err) {
    const eng_op *o = &e->ops[i];
    SC_TRY(de_bs_run(e, i, o->bs, de_bs_target(e, i, o->bs), err));
    return o->pre_pool && !debs_pooled(o->bs) ? de_pool_after(e, i, err) : 0;
}

// Mixed plans: tries the sparse paths of conv op i after its cuDNN tuning.
static int de_try_paths(dengine *e, int i, int repeat, sc_err *err) {
    SC_TRY(de_try_sparse(e, i, repeat, err));
    return de_try_bsconv(e, i, repeat, err);
}

// Queues conv op i; with ws_max > 0 its plans are timed first (on the
// real input) and the fastest kept (then, in mixed plans, the sparse path
// is tried against it).
static int de_conv_run(dengine *e, int i, void *ws, size_t ws_max, int repeat, sc_err *err) {
    const deploy_op *op = &e->p->ops[i];
    eng_op *o = &e->ops[i];
    if (o->sp) return de_sparse_run(e, i, o->sp, e->t[o->out], err);
    if (o->bs) return de_bs_conv(e, i, err);
    void *y = o->pre_pool ? o->pre_pool : e->t[o->out];
    const void *z = o->res >= 0 ? e->t[o->res] : NULL;
    if (ws_max) SC_TRY(de_conv_tune(e, i, z, y, ws, ws_max, repeat, err));
    SC_TRY(fconv_gpu_run(&e->g, o->fc, e->t[op->in], o->w, o->bias, z, y,
                         ws ? ws : (char *)e->ws + o->ws_off, err));
    if (o->pre_pool) SC_TRY(de_pool_after(e, i, err));
    return ws_max && e->mixed ? de_try_paths(e, i, repeat, err) : 0;
}

// Queues op i (tuning convolutions when ws_max > 0).
static int de_op_run(dengine *e, int i, void *ws, size_t ws_max, int repeat, sc_err *err) {
    const eng_op *o = &e->ops[i];
    switch (o->kind) {
    case EO_CONV: return de_conv_run(e, i, ws, ws_max, repeat, err);
    case EO_LINEAR:
        return flinear_gpu_run(&e->g, o->fl, e->t[e->p->ops[i].in], o->w, o->bias, e->t[o->out], err);
    case EO_SMALL: return de_small(e, i, err);
    case EO_NONE: return 0;
    }
    return 0;
}

// Queues the whole forward (normalisation to fp32 logits).
static int de_enqueue(dengine *e, void *ws, size_t ws_max, int repeat, sc_err *err) {
    const deploy_plan *p = e->p;
    const net *nt = p->m->nt;
    SC_TRY(nhwc_normalize_gpu(&e->g, e->dt, e->n, nt->in_h, nt->in_w, e->cs[p->input], e->d_img,
                              nt->in_mean, nt->in_std, e->t[p->input], err));
    for (int i = 0; i < p->nops; i++) {
        if (e->tail_on && i == e->tail.lo) {
            int in, out;
            detail_io(e->tail.t, &in, &out);
            SC_TRY(detail_run(&e->g, e->tail.t, e->n, e->t[in], e->t[out], err));
            i = e->tail.hi - 1;
            continue;
        }
        SC_TRY(de_op_run(e, i, ws, ws_max, repeat, err));
    }
    return nhwc_to_f32_gpu(&e->g, e->dt, (size_t)e->n * nt->classes, e->t[p->output], e->d_logits, err);
}

// Runs the forward once tuning every conv, then gives every conv its own
// zeroed workspace region (256-byte aligned): no plan sees another's
// leftovers between graph replays (a plan that keeps counters in its
// workspace and resets them itself finds them as it left them).
static int de_tune(dengine *e, const uint8_t *images, int repeat, sc_err *err) {
    const net *nt = e->p->m->nt;
    void *ws = NULL;
    SC_TRY(gpu_upload(e->d_img, images, (size_t)e->n * nt->in_c * nt->in_h * nt->in_w, err));
    cudaCheck(err, cudaMalloc(&ws, DE_TUNE_WS));
    int rc = de_enqueue(e, ws, DE_TUNE_WS, repeat, err);
    if (!rc && cudaStreamSynchronize(e->g.stream) != cudaSuccess) rc = sc_fail(err, "tuning run failed");
    cudaFree(ws);
    for (int i = 0; !rc && i < e->p->nops; i++)
        if (e->ops[i].fc) {
            e->ops[i].ws_off = e->ws_bytes;
            e->ws_bytes += (fconv_gpu_workspace(e->ops[i].fc) + 255) / 256 * 256;
        }
    if (!rc) cudaCheck(err, cudaMalloc(&e->ws, e->ws_bytes + 16));
    if (!rc) cudaCheck(err, cudaMemset(e->ws, 0, e->ws_bytes + 16));  // as a fresh allocation for each plan
    return rc;
}

// A graph and the stream it replays on (the argument of de_replay).
typedef struct {
    cudaGraphExec_t graph;
    cudaStream_t stream;
} de_replayed;

// One replay of a graph (a gpu_run_fn).
static int de_replay(void *arg, sc_err *err) {
    const de_replayed *r = arg;
    cudaCheck(err, cudaGraphLaunch(r->graph, r->stream));
    return 0;
}

// Captures `copies` runs of op i (i < 0: the whole forward) into a CUDA graph.
static int de_capture_runs(dengine *e, int i, int copies, cudaGraphExec_t *exec, sc_err *err) {
    cudaGraph_t graph = NULL;
    cudaCheck(err, cudaStreamBeginCapture(e->g.stream, cudaStreamCaptureModeThreadLocal));
    int rc = 0;
    for (int k = 0; k < copies && !rc; k++)
        rc = i < 0 ? de_enqueue(e, NULL, 0, 0, err) : de_op_run(e, i, NULL, 0, 0, err);
    cudaError_t ce = cudaStreamEndCapture(e->g.stream, &graph);
    if (!rc && ce != cudaSuccess) rc = sc_fail(err, "capturing the dense engine: %s", cudaGetErrorString(ce));
    if (!rc && cudaGraphInstantiate(exec, graph, 0) != cudaSuccess)
        rc = sc_fail(err, "instantiating the dense engine's graph: %s", cudaGetErrorString(cudaGetLastError()));
    if (graph) cudaGraphDestroy(graph);
    return rc;
}

// Captures the forward into a CUDA graph.
static int de_capture(dengine *e, sc_err *err) { return de_capture_runs(e, -1, 1, &e->graph, err); }

// Op i's gain alone on its sparse path (cuDNN time - sparse time).
static double de_gain(const dengine *e, int i) { return e->ops[i].dense_ms - e->ops[i].ms; }

// Median milliseconds of the whole forward as the ops now run: captured
// afresh, `repeat` replays after a warm-up.
static int de_graph_ms(dengine *e, int repeat, double *ms, sc_err *err) {
    de_replayed r = {NULL, e->g.stream};
    int rc = de_capture_runs(e, -1, 1, &r.graph, err);
    if (!rc) rc = gpu_time_median(&e->g, de_replay, &r, 3, repeat, ms, err);
    if (r.graph) cudaGraphExecDestroy(r.graph);
    return rc;
}

// An op's sparse paths, parked while the op runs on cuDNN.
typedef struct {
    desparse *sp;
    debs *bs;
} de_path;

// Whole-forward time with ops [lo, hi) on their present paths (*sparse_ms) and
// all on cuDNN (*dense_ms), each the median of DE_CONFIRM_ROUNDS alternating
// measurements (drift hits both); the paths are as before afterwards.
static int de_graph_ab(dengine *e, int lo, int hi, int repeat, double *sparse_ms, double *dense_ms, sc_err *err) {
    de_path *saved = malloc((hi > lo ? (size_t)(hi - lo) : 1) * sizeof *saved);
    double a[DE_CONFIRM_ROUNDS], b[DE_CONFIRM_ROUNDS];
    int rc = saved ? 0 : sc_fail(err, "out of memory");
    for (int i = lo; !rc && i < hi; i++) saved[i - lo] = (de_path){e->ops[i].sp, e->ops[i].bs};
    const int tail = e->tail_on, in_range = e->tail.t && lo < e->tail.hi && e->tail.lo < hi;
    for (int k = 0; !rc && k < DE_CONFIRM_ROUNDS; k++) {
        rc = de_graph_ms(e, repeat, &a[k], err);
        for (int i = lo; i < hi; i++) e->ops[i].sp = NULL, e->ops[i].bs = NULL;
        if (in_range) e->tail_on = 0;
        if (!rc) rc = de_graph_ms(e, repeat, &b[k], err);
        for (int i = lo; i < hi; i++) e->ops[i].sp = saved[i - lo].sp, e->ops[i].bs = saved[i - lo].bs;
        e->tail_on = tail;
    }
    free(saved);
    if (!rc) *sparse_ms = sc_median(a, DE_CONFIRM_ROUNDS), *dense_ms = sc_median(b, DE_CONFIRM_ROUNDS);
    return rc;
}

// Mixed plans: each op on a sparse path goes back to cuDNN when the whole
// forward measures faster that way, the ops gaining least alone tried first.
// An op's time alone (ten copies, its input hot in L2) need not be its cost
// in the graph, where its input comes from another op.
static int de_confirm_sparse(dengine *e, int repeat, sc_err *err) {
    const int nops = e->p->nops;
    int *order = malloc((size_t)nops * sizeof *order), n = 0, rc = 0;
    if (!order) return sc_fail(err, "out of memory");
    for (int i = 0; i < nops; i++)
        if (e->ops[i].sp || e->ops[i].bs) order[n++] = i;
    for (int a = 1; a < n; a++)  // insertion sort by the gain alone, ascending
        for (int b = a; b > 0 && de_gain(e, order[b]) < de_gain(e, order[b - 1]); b--) {
            const int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    for (int k = 0; !rc && k < n; k++) {
        eng_op *o = &e->ops[order[k]];
        double with = 0, without = 0;
        rc = de_graph_ab(e, order[k], order[k] + 1, repeat, &with, &without, err);
        o->graph_gain_ms = without - with;
        if (rc || !(without < with)) continue;
        desparse_free(o->sp), debs_free(o->bs);
        o->sp = NULL, o->bs = NULL, o->ms = o->dense_ms;
    }
    free(order);
    return rc;
}

// Parks every op's sparse path in saved (nops) and leaves those with on[i]
// (on NULL: none) running sparse; de_unpark puts them all back.
static void de_park(dengine *e, const unsigned char *on, de_path *saved) {
    e->tail_parked = e->tail_on;
    e->tail_on = e->tail_on && on && on[e->tail.lo];
    for (int i = 0; i < e->p->nops; i++) {
        saved[i] = (de_path){e->ops[i].sp, e->ops[i].bs};
        if (!on || !on[i]) e->ops[i].sp = NULL, e->ops[i].bs = NULL;
    }
}

// Puts back the paths de_park saved.
static void de_unpark(dengine *e, const de_path *saved) {
    for (int i = 0; i < e->p->nops; i++) e->ops[i].sp = saved[i].sp, e->ops[i].bs = saved[i].bs;
    e->tail_on = e->tail_parked;
}

// --- the tail ----------------------------------------------------------------------------

// Builds the chains the tail kernel takes (detail_find_all) into c, at most
// max, with the engine's view of each op; their count (why: when none).
static int de_tail_find(dengine *e, detail_chain *c, int max, sc_err *why) {
    const int nops = e->p->nops;
    detail_op *v = calloc((size_t)nops + 1, sizeof *v);
    if (!v) return sc_fail(why, "out of memory"), 0;  // no tail: the engine runs as it is
    for (int i = 0; i < nops; i++) {
        const eng_op *o = &e->ops[i];
        v[i].kind = o->kind == EO_CONV ? 1 : o->kind == EO_NONE && e->p->ops[i].kind == DOP_ADD ? 2 : 0;
        v[i].c = (detail_conv){i, e->p->ops[i].in, o->res, o->out, o->relu};
    }
    const int n = detail_find_all(&e->g, e->p, v, c, max, why);
    free(v);
    return n;
}

// Drops (frees) the candidates that do not match the engine's output of
// their chain (fp16 tolerance 3e-2 of the largest); *n: the count left
// (why: the last miss).
static int de_tail_check(dengine *e, detail_chain *c, int *n, sc_err *why, sc_err *err) {
    int kept = 0, rc = 0;
    for (int k = 0; k < *n; k++) {
        double rel = INFINITY;
        int in, out;
        detail_io(c[k].t, &in, &out);
        if (!rc) rc = detail_run(&e->g, c[k].t, e->n, e->t[in], e->check, err);
        if (!rc) rc = de_half_relerr(e, e->check, e->t[out], de_elems(e, out), &rel, err);
        if (!rc && rel <= 3e-2) c[kept++] = c[k];
        else {
            if (!rc) sc_fail(why, "%s-%s: output off by %.3g of the largest", e->p->ops[c[k].lo].name,
                             e->p->ops[c[k].hi - 1].name, rel);
            detail_free(c[k].t);
        }
    }
    *n = kept;
    return rc;
}

// Times the whole forward without a tail (ms[0]) and with each candidate
// (ms[1 + k]), each the median of DE_CONFIRM_ROUNDS alternating rounds.
static int de_tail_time(dengine *e, const detail_chain *c, int n, int repeat, double *ms, sc_err *err) {
    double *r = malloc((size_t)(n + 1) * DE_CONFIRM_ROUNDS * sizeof *r);
    if (!r) return sc_fail(err, "out of memory");
    int rc = 0;
    for (int k = 0; !rc && k < DE_CONFIRM_ROUNDS; k++)
        for (int j = 0; !rc && j <= n; j++) {
            e->tail = j ? c[j - 1] : (detail_chain){NULL, 0, 0}, e->tail_on = j > 0;
            rc = de_graph_ms(e, repeat, &r[j * DE_CONFIRM_ROUNDS + k], err);
        }
    for (int j = 0; !rc && j <= n; j++) ms[j] = sc_median(&r[j * DE_CONFIRM_ROUNDS], DE_CONFIRM_ROUNDS);
    e->tail = (detail_chain){NULL, 0, 0}, e->tail_on = 0;
    free(r);
    return rc;
}

// Mixed fp16 plans: tries every chain of small-plane block-sparse convs
// the tail kernel takes as one launch; keeps the one whose whole forward
// measures fastest when it beats the forward without a tail (forced: the
// longest of the first run that matches). e->tail_note says why none was kept.
static int de_try_tail(dengine *e, int repeat, sc_err *err) {
    if (e->dt != GDT_F16) return 0;
    detail_chain c[DE_TAIL_CANDIDATES];
    double ms[DE_TAIL_CANDIDATES + 1];
    sc_err why = {{0}};
    int n = de_tail_find(e, c, DE_TAIL_CANDIDATES, &why);
    int rc = de_tail_check(e, c, &n, &why, err);
    if (!rc && n) rc = de_tail_time(e, c, n, repeat, ms, err);
    const int k = detail_pick(e->p, c, n, rc ? NULL : ms, e->mixed == 2, why.msg, e->tail_note, sizeof e->tail_note);
    if (k >= 0) e->tail = c[k], e->tail_on = 1, e->tail_ms[0] = ms[1 + k], e->tail_ms[1] = ms[0];
    return rc;
}

// --- public API ---------------------------------------------------------------------------

// Builds, tunes and captures the engine (mixed: see dengine_create_mixed).
static dengine *de_create(const deploy_plan *p, dengine_prec prec, int n, const uint8_t *images,
                          int repeat, int mixed, sc_err *err) {
    sc_err why = {{0}};
    if (!exec_gpu_available(&why)) {
        sc_fail(err, "%s", why.msg);
        return NULL;
    }
    dengine *e = calloc(1, sizeof *e);
    if (!e) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    e->p = p, e->prec = prec, e->n = n, e->mixed = mixed;
    e->dt = prec == DE_FP16 ? GDT_F16 : prec == DE_BF16 ? GDT_BF16 : GDT_F32;
    e->esz = gpu_dtype_size(e->dt);
    if (gpu_ctx_init(&e->g, err) || de_analyse(e, err) || de_buffers(e, err) || de_setup(e, err) ||
        de_tune(e, images, repeat, err) || (mixed == 1 && de_confirm_sparse(e, DE_CONFIRM_REPEAT, err)) ||
        (mixed && de_try_tail(e, DE_CONFIRM_REPEAT, err)) || de_capture(e, err)) {
        sc_wrap(err, "dense %s engine", dengine_prec_name(prec));
        dengine_free(e);
        return NULL;
    }
    return e;
}

// Builds, tunes and captures the dense engine.
dengine *dengine_create(const deploy_plan *p, dengine_prec prec, int n, const uint8_t *images,
                        int repeat, sc_err *err) {
    return de_create(p, prec, n, images, repeat, 0, err);
}

// The fp16 engine with sparse layers where they measure faster.
dengine *dengine_create_mixed(const deploy_plan *p, int n, const uint8_t *images, int repeat,
                              int force, sc_err *err) {
    return de_create(p, DE_FP16, n, images, repeat, force ? 2 : 1, err);
}

// 1 when conv op i runs inside the tail launch.
static int de_in_tail(const dengine *e, int i) {
    return e->tail_on && i >= e->tail.lo && i < e->tail.hi && e->ops[i].kind == EO_CONV;
}

// The whole forward with the kept tail and without it (NAN: no tail runs).
void dengine_tail_ms(const dengine *e, double *with_ms, double *without_ms) {
    *with_ms = e->tail_on ? e->tail_ms[0] : NAN, *without_ms = e->tail_on ? e->tail_ms[1] : NAN;
}

// Why the mixed plan keeps no tail ("": one is kept, or none was looked for).
const char *dengine_tail_note(const dengine *e) { return e->tail_on ? "" : e->tail_note; }

// Which sparse path runs op i: 0 none (dense), 1 the direct sparse kernel, 2 the block-sparse one, 3 the tail.
int dengine_op_sparse(const dengine *e, int i) {
    return de_in_tail(e, i) ? 3 : e->ops[i].bs ? 2 : e->ops[i].sp != NULL;
}

// Frees the engine.
void dengine_free(dengine *e) {
    if (!e) return;
    if (e->g.stream) cudaStreamSynchronize(e->g.stream);
    if (e->graph) cudaGraphExecDestroy(e->graph);
    detail_free(e->tail.t);
    for (int i = 0; e->ops && i < e->p->nops; i++) {
        eng_op *o = &e->ops[i];
        fconv_gpu_free(o->fc), flinear_gpu_free(o->fl), desparse_free(o->sp), debs_free(o->bs);
        cudaFree(o->w), cudaFree(o->bias), cudaFree(o->pre_pool), cudaFree(o->scale), cudaFree(o->shift);
    }
    for (int t = 0; e->t && t < e->p->ntensors; t++)
        if (e->owned[t]) cudaFree(e->t[t]);
    cudaFree(e->d_img), cudaFree(e->d_logits), cudaFree(e->ws), cudaFree(e->check);
    if (e->h_logits) cudaFreeHost(e->h_logits);
    gpu_ctx_free(&e->g);
    free(e->ops), free(e->cs), free(e->t), free(e->owned);
    free(e);
}

// Runs m images through the graph, or op by op (eager) to check the graph's replay.
static int de_forward(dengine *e, int m, const uint8_t *images, float *logits, int eager, sc_err *err) {
    const net *nt = e->p->m->nt;
    if (m < 1 || m > e->n) return sc_fail(err, "batch of %d images (the engine runs 1 to %d)", m, e->n);
    cudaCheck(err, cudaMemcpyAsync(e->d_img, images, (size_t)m * nt->in_c * nt->in_h * nt->in_w,
                                   cudaMemcpyHostToDevice, e->g.stream));
    if (eager) SC_TRY(de_enqueue(e, NULL, 0, 0, err));
    else cudaCheck(err, cudaGraphLaunch(e->graph, e->g.stream));
    const size_t bytes = (size_t)m * nt->classes * sizeof(float);
    cudaCheck(err, cudaMemcpyAsync(e->h_logits, e->d_logits, bytes, cudaMemcpyDeviceToHost, e->g.stream));
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    if (logits) memcpy(logits, e->h_logits, bytes);
    return 0;
}

// Runs m images through the graph.
int dengine_forward(dengine *e, int m, const uint8_t *images, float *logits, sc_err *err) {
    return de_forward(e, m, images, logits, 0, err);
}

// Runs m images op by op without the graph.
int dengine_forward_eager(dengine *e, int m, const uint8_t *images, float *logits, sc_err *err) {
    return de_forward(e, m, images, logits, 1, err);
}

// Tensor op i writes in the engine, -1 when the op is fused away or an alias.
int dengine_op_tensor(const dengine *e, int i) { return e->ops[i].kind == EO_NONE ? -1 : e->ops[i].out; }

// Tensor t of the first m images as fp32 (m, h, w, c) into host (syncs).
int dengine_tensor(dengine *e, int t, int m, float *host, sc_err *err) {
    const deploy_tensor *d = &e->p->tensors[t];
    const size_t px = (size_t)m * d->h * d->w, cs = (size_t)e->cs[t];
    float *dev = NULL, *all = malloc(px * cs * sizeof *all);
    int rc = all && cudaMalloc((void **)&dev, px * cs * sizeof *dev) == cudaSuccess ? 0 : sc_fail(err, "out of memory");
    if (!rc) rc = nhwc_to_f32_gpu(&e->g, e->dt, px * cs, e->t[t], dev, err);
    if (!rc && (cudaMemcpyAsync(all, dev, px * cs * sizeof *all, cudaMemcpyDeviceToHost, e->g.stream) != cudaSuccess ||
                cudaStreamSynchronize(e->g.stream) != cudaSuccess))
        rc = sc_fail(err, "reading tensor %d: %s", t, cudaGetErrorString(cudaGetLastError()));
    for (size_t i = 0; !rc && i < px; i++) memcpy(host + i * d->c, all + i * cs, (size_t)d->c * sizeof *host);
    free(all), cudaFree(dev);
    return rc;
}

// Median of `repeat` graph replays after a warm-up.
int dengine_time(dengine *e, int repeat, double *ms, sc_err *err) {
    de_replayed r = {e->graph, e->g.stream};
    return gpu_time_median(&e->g, de_replay, &r, 3, repeat, ms, err) ? sc_wrap(err, "timing the dense engine") : 0;
}

// The plan and its all-cuDNN forward in alternating rounds, medians.
int dengine_time_vs_dense(dengine *e, int repeat, double *ms, double *dense_ms, sc_err *err) {
    int nsparse = 0;
    for (int i = 0; i < e->p->nops; i++) nsparse += e->ops[i].sp || e->ops[i].bs;
    if (!nsparse) {
        const int rc = de_graph_ms(e, repeat, ms, err);
        *dense_ms = *ms;
        return rc ? sc_wrap(err, "timing the engine") : 0;
    }
    return de_graph_ab(e, 0, e->p->nops, repeat, ms, dense_ms, err)
               ? sc_wrap(err, "timing the engine against its all-cuDNN forward")
               : 0;
}

// The whole forward in each launch mode of the block-sparse kernels, alternating rounds, medians.
int dengine_time_pdl(dengine *e, int repeat, double ms[DE_PDL_MODES], sc_err *err) {
    int nbs = 0, rc = 0;
    const int had = e->g.pdl;
    for (int i = 0; i < e->p->nops; i++) nbs += e->ops[i].bs != NULL;
    for (int m = 0; m < DE_PDL_MODES; m++) ms[m] = NAN;
    if (!nbs || !had) return 0;
    double t[DE_PDL_MODES][DE_CONFIRM_ROUNDS];
    for (int k = 0; !rc && k < DE_CONFIRM_ROUNDS; k++)
        for (int m = 0; !rc && m < DE_PDL_MODES; m++) {
            e->g.pdl = m;
            rc = de_graph_ms(e, repeat, &t[m][k], err);
        }
    e->g.pdl = had;
    if (rc) return sc_wrap(err, "timing the engine with and without dependent launches");
    for (int m = 0; m < DE_PDL_MODES; m++) ms[m] = sc_median(t[m], DE_CONFIRM_ROUNDS);
    return 0;
}

// Tuned milliseconds of op i.
double dengine_op_ms(const dengine *e, int i) { return e->ops[i].ms; }

// Tuned milliseconds of conv op i's cuDNN plan, of its fastest checked sparse path, and its gain in the graph.
void dengine_op_paths_ms(const dengine *e, int i, double *dense_ms, double *sparse_ms, double *graph_gain_ms) {
    *dense_ms = e->ops[i].dense_ms, *sparse_ms = e->ops[i].sparse_ms, *graph_gain_ms = e->ops[i].graph_gain_ms;
}

// Op i's milliseconds inside a graph: `copies` runs captured, replays timed, per run.
int dengine_op_graph_ms(dengine *e, int i, int copies, int repeat, double *ms, sc_err *err) {
    *ms = NAN;
    if (e->ops[i].kind == EO_NONE) return 0;
    if (copies < 1) return sc_fail(err, "timing op %s: %d copies", e->p->ops[i].name, copies);
    de_replayed r = {NULL, e->g.stream};
    int rc = de_capture_runs(e, i, copies, &r.graph, err);
    if (!rc) rc = gpu_time_median(&e->g, de_replay, &r, 2, repeat, ms, err);
    if (r.graph) cudaGraphExecDestroy(r.graph);
    if (!rc) *ms /= copies;
    return rc ? sc_wrap(err, "timing op %s in a graph", e->p->ops[i].name) : 0;
}

// Op i alone on its sparse path in a graph of cuDNN convs: the whole
// forward's time on cuDNN minus with op i sparse (de_graph_ab); NAN when op i
// has no sparse path.
int dengine_op_graph_gain_alone(dengine *e, int i, int repeat, double *gain_ms, sc_err *err) {
    *gain_ms = NAN;
    if (!e->ops[i].sp && !e->ops[i].bs) return 0;
    de_path *saved = malloc((size_t)e->p->nops * sizeof *saved);
    if (!saved) return sc_fail(err, "out of memory");
    de_park(e, NULL, saved);
    e->ops[i].sp = saved[i].sp, e->ops[i].bs = saved[i].bs;
    double with = 0, without = 0;
    const int rc = de_graph_ab(e, i, i + 1, repeat, &with, &without, err);
    de_unpark(e, saved);
    free(saved);
    if (!rc) *gain_ms = without - with;
    return rc ? sc_wrap(err, "timing op %s in the graph", e->p->ops[i].name) : 0;
}

// The whole forward with exactly the ops flagged in `sparse` on their sparse paths.
int dengine_graph_ms_with(dengine *e, const unsigned char *sparse, int repeat, double *ms, sc_err *err) {
    de_path *saved = malloc((size_t)e->p->nops * sizeof *saved);
    if (!saved) return sc_fail(err, "out of memory");
    de_park(e, sparse, saved);
    const int rc = de_graph_ms(e, repeat, ms, err);
    de_unpark(e, saved);
    free(saved);
    return rc ? sc_wrap(err, "timing the mixed engine's graph") : 0;
}

// What runs op i.
void dengine_op_describe(const dengine *e, int i, char *buf, size_t len) {
    const eng_op *o = &e->ops[i];
    if (de_in_tail(e, i)) {
        int k = 0;  // the conv's place in the chain
        for (int j = e->tail.lo; j < i; j++) k += e->ops[j].kind == EO_CONV;
        detail_describe(e->tail.t, k, buf, len);
    } else if (o->sp) desparse_describe(o->sp, buf, len);
    else if (o->bs) debs_describe(o->bs, buf, len);
    else if (o->fc) fconv_gpu_describe(o->fc, buf, len);
    else if (o->fl) flinear_gpu_describe(o->fl, buf, len);
    else snprintf(buf, len, o->kind == EO_NONE ? "fused or aliased" : "nhwc_ops");
}
