// The GPU executor backend: runs a net with cuDNN/cuBLAS and the kernels of
// kernels/*.cu, NHWC activations in fp32 (PREC_FP32) or fp16 (PREC_FP16, with
// fp32 master weights, BN parameters and optimizer, dynamic loss scaling).
//
// What lives where:
//   - flat fp32 vectors param/mask/grad/mom (nparam) and buf (nbuf) mirror
//     the net's canonical layout; conv and linear layers run on per-layer
//     work copies of their weights (KRSC, [dt]) that one multi-tensor launch
//     refreshes each step, and write their weight gradients into per-layer
//     work gradients that one launch gathers back (unscaled, checked);
//   - one output and one gradient buffer per layer, sized for max_batch;
//   - per batch size a plan: cuDNN conv plans (algorithms timed once) and BN
//     plans, plus the CUDA graph of a whole training step once it has run.
// In fp16, "bn, relu" and "bn, add, relu" patterns run as cuDNN's fused
// persistent BN kernels during training. Batches are staged through pinned
// memory (two buffers, so the host can fill one while the GPU reads the
// other); nothing in a step synchronises with the host.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_backend.h"
#include "exec_gpu.h"
#include "kernels/activation_gpu.h"
#include "kernels/augment_gpu.h"
#include "kernels/batchnorm_gpu.h"
#include "kernels/conv2d_gpu.h"
#include "kernels/linear_gpu.h"
#include "kernels/loss_gpu.h"
#include "kernels/pool_gpu.h"
#include "kernels/sgd_gpu.h"

#define GX_MAX_PLANS 6                     // batch sizes kept planned at once
#define GX_FIND_LIMIT ((size_t)512 << 20)  // workspace limit of the algorithm search
#define GX_SCALE_INIT 4096.0f              // initial loss scale (fp16)
#define GX_SCALE_INTERVAL 1000             // clean steps before the scale doubles
#define GX_STAGE_ALIGN 256

typedef enum { ROLE_PLAIN = 0, ROLE_HEAD, ROLE_INNER, ROLE_TAIL } gx_role;

// Per-layer state that does not depend on the batch size.
typedef struct {
    gx_role role;          // in a fused BN group (training, fp16): head = the BN
    bn_fuse fuse;          // head: the group's fusion
    int head;              // tail: index of the group's BN
    gpu_dtype odt;         // dtype of the output (fp32 for a final linear)
    size_t size;           // output elements per image
    void *out;             // (max_batch, h, w, c) [odt]
    void *grad;            // (max_batch, h, w, c) [dt]
    int wc;                // conv: input channels as stored (cpad for the stem)
    void *wwork, *gwork;   // conv/linear: work weight [dt], work gradient
    float *save_mean, *save_invstd;  // bn: (c) batch statistics
    void *reserve;         // bn: cuDNN reserve space
    size_t reserve_bytes;
} gx_layer;

// Per-batch-size state.
typedef struct {
    int n, backward;       // n = 0: unused slot
    conv_gpu **conv;       // per layer, shared between layers of equal shape
    unsigned char *owner;  // per layer: conv[i] is freed with this layer
    bn_gpu **bn;           // per layer
    cudaGraphExec_t graph;
    int graph_state;       // 0 not tried, 1 ready, -1 failed (runs eagerly)
    char graph_err[200];   // why the capture failed
    long steps;
    unsigned long last_use;
} gx_plan;

// Profiling events of one step (exec_gpu_profile_step).
typedef struct {
    cudaEvent_t *fwd, *bwd;  // (nlayers + 1) each: boundaries
    cudaEvent_t other[5];
} gx_prof;

typedef struct {
    net *nt;
    sc_precision prec;
    gpu_dtype dt;
    int max_batch, cpad, use_graphs;
    char name[256];
    gpu_ctx g;
    gx_layer *gl;
    unsigned char *gseen;  // per layer, host: its gradient was written this step
    gx_plan plans[GX_MAX_PLANS];
    unsigned long clock;
    void *ws;              // shared cuDNN workspace
    size_t ws_bytes, max_size;
    void *input;           // (max_batch, in_h, in_w, cpad) [dt]
    void *scratch[2];      // (max_batch * max_size) [dt] each
    float *logits32;       // (max_batch, classes)
    float *param, *mask, *grad, *mom, *buf;
    param_segs *segs;
    gpu_stats *stats;
    gpu_scaler *scaler;
    size_t stage_bytes, off_labels, off_dx, off_dy, off_flip, off_images;
    unsigned char *dstage, *hstage[2];
    cudaEvent_t stage_ev[2];
    int stage_cur, work_stale;
    gx_prof *prof;         // non-NULL while a profiled step runs
} gx_exec;

// --- small helpers ----------------------------------------------------------

// Output of layer src (-1 = the prepared input).
static void *gx_out(gx_exec *e, int src) { return src < 0 ? e->input : e->gl[src].out; }

// Trainable tensor t's master values / gradient (fp32), NULL when t < 0.
static float *gx_param(gx_exec *e, int t) {
    return t < 0 ? NULL : e->param + e->nt->tensors[t].offset;
}
static float *gx_pgrad(gx_exec *e, int t) {
    return t < 0 ? NULL : e->grad + e->nt->tensors[t].offset;
}

// BN buffer tensor t (running mean or var).
static float *gx_buf(gx_exec *e, int t) { return e->buf + e->nt->tensors[t].offset; }

// Staged device copies of the batch.
static gpu_hparams *gx_hp(gx_exec *e) { return (gpu_hparams *)e->dstage; }
static int *gx_labels(gx_exec *e) { return (int *)(e->dstage + e->off_labels); }

// Image bytes of one input image.
static size_t gx_img_bytes(const net *nt) { return (size_t)3 * nt->in_h * nt->in_w; }

// cudaMalloc that reports the size that failed.
static int gx_alloc(void **p, size_t bytes, sc_err *err) {
    cudaError_t rc = cudaMalloc(p, bytes ? bytes : 16);
    if (rc != cudaSuccess)
        return sc_fail(err, "GPU allocation of %zu bytes failed: %s", bytes, cudaGetErrorString(rc));
    return 0;
}

// Records a profiling event when profiling.
static void gx_mark(gx_exec *e, cudaEvent_t ev) {
    if (e->prof) cudaEventRecord(ev, e->g.stream);
}

// --- net checks and fused groups --------------------------------------------

// Checks that the GPU executor can run nt.
static int gx_check_net(const net *nt, int max_batch, sc_err *err) {
    if (max_batch < 1) return sc_fail(err, "bad batch size (%d)", max_batch);
    if (nt->in_c != 3) return sc_fail(err, "the GPU executor needs 3-channel input (got %d)", nt->in_c);
    if (nt->nlayers < 1) return sc_fail(err, "the net has no layers");
    const layer *last = &nt->layers[nt->nlayers - 1];
    if (last->c != nt->classes || last->h != 1 || last->w != 1)
        return sc_fail(err, "the GPU executor needs a last layer of shape (%d, 1, 1), got "
                       "(%d, %d, %d)", nt->classes, last->c, last->h, last->w);
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        if (L->src >= i || L->src < -1 || (L->kind == LK_ADD && (L->src2 >= i || L->src2 < -1)))
            return sc_fail(err, "layer %s reads a later layer", L->name);
        if ((L->kind == LK_CONV || L->kind == LK_LINEAR) && L->weight < 0)
            return sc_fail(err, "layer %s has no weights", L->name);
    }
    return 0;
}

// Marks "bn, relu" and "bn, add, relu" runs whose inner outputs have no other
// reader as fused groups (fp16 training only).
static void gx_find_groups(gx_exec *e, const int *readers) {
    const net *nt = e->nt;
    if (e->dt != GDT_F16) return;
    for (int i = 0; i + 1 < nt->nlayers; i++) {
        const layer *B = &nt->layers[i], *N1 = &nt->layers[i + 1];
        if (B->kind != LK_BN || readers[i] != 1 || e->gl[i].role != ROLE_PLAIN) continue;
        if (N1->kind == LK_RELU && N1->src == i) {
            e->gl[i].role = ROLE_HEAD, e->gl[i].fuse = BN_FUSE_RELU;
            e->gl[i + 1].role = ROLE_TAIL, e->gl[i + 1].head = i;
            continue;
        }
        if (i + 2 >= nt->nlayers || N1->kind != LK_ADD || readers[i + 1] != 1) continue;
        const layer *N2 = &nt->layers[i + 2];
        if ((N1->src == i) == (N1->src2 == i) || N2->kind != LK_RELU || N2->src != i + 1) continue;
        e->gl[i].role = ROLE_HEAD, e->gl[i].fuse = BN_FUSE_ADD_RELU;
        e->gl[i + 1].role = ROLE_INNER;
        e->gl[i + 2].role = ROLE_TAIL, e->gl[i + 2].head = i;
    }
}

// Undoes the fused group headed by BN layer i (cuDNN refused the fusion).
static void gx_unfuse(gx_exec *e, int i) {
    const int len = e->gl[i].fuse == BN_FUSE_ADD_RELU ? 3 : 2;
    for (int k = 0; k < len; k++) e->gl[i + k].role = ROLE_PLAIN;
    e->gl[i].fuse = BN_FUSE_NONE;
}

// Counts the readers of every layer's output; input channel padding follows:
// 8 in fp16 when only convs read the input, else none.
static int gx_plan_roles(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    int *readers = calloc((size_t)nt->nlayers, sizeof *readers), only_convs = 1;
    if (!readers) return sc_fail(err, "out of memory");
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        const int in[2] = {L->src, L->kind == LK_ADD ? L->src2 : -2};
        for (int k = 0; k < 2; k++) {
            if (in[k] >= 0) readers[in[k]]++;
            if (in[k] == -1 && L->kind != LK_CONV) only_convs = 0;
        }
    }
    e->cpad = e->dt == GDT_F16 && only_convs ? 8 : 3;
    gx_find_groups(e, readers);
    free(readers);
    return 0;
}

// --- allocation -------------------------------------------------------------

// Work copies of a conv/linear layer's weights and their gradients.
static int gx_alloc_work(gx_exec *e, int i, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    const size_t es = gpu_dtype_size(e->dt);
    size_t cnt;
    if (L->kind == LK_CONV) {
        G->wc = L->src < 0 ? e->cpad : L->in_c;
        cnt = (size_t)L->c * L->k * L->k * G->wc;
        SC_TRY(gx_alloc(&G->gwork, cnt * es, err));
    } else {
        cnt = (size_t)L->c * L->in_c * L->in_h * L->in_w;
        SC_TRY(gx_alloc(&G->gwork, cnt * sizeof(float), err));
    }
    SC_TRY(gx_alloc(&G->wwork, cnt * es, err));
    cudaCheck(err, cudaMemset(G->gwork, 0, cnt * (L->kind == LK_CONV ? es : sizeof(float))));
    return 0;
}

// Output, gradient and per-kind buffers of every layer.
static int gx_alloc_layers(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    const size_t es = gpu_dtype_size(e->dt);
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        gx_layer *G = &e->gl[i];
        G->size = (size_t)L->c * L->h * L->w;
        if (G->size > e->max_size) e->max_size = G->size;
        G->odt = (i == nt->nlayers - 1 && L->kind == LK_LINEAR) ? GDT_F32 : e->dt;
        SC_TRY(gx_alloc(&G->out, (size_t)e->max_batch * G->size * gpu_dtype_size(G->odt), err));
        SC_TRY(gx_alloc(&G->grad, (size_t)e->max_batch * G->size * es, err));
        if (L->kind == LK_CONV || L->kind == LK_LINEAR) SC_TRY(gx_alloc_work(e, i, err));
        if (L->kind == LK_BN) {
            SC_TRY(gx_alloc((void **)&G->save_mean, (size_t)L->c * sizeof(float), err));
            SC_TRY(gx_alloc((void **)&G->save_invstd, (size_t)L->c * sizeof(float), err));
        }
    }
    return 0;
}

// The multi-tensor segment table over every trainable tensor.
static int gx_segments(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    param_seg *s = calloc((size_t)nt->ntensors + 1, sizeof *s);
    if (!s) return sc_fail(err, "out of memory");
    int ns = 0;
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        if (!p->trainable) continue;
        const layer *L = &nt->layers[p->layer];
        const gx_layer *G = &e->gl[p->layer];
        param_seg *q = &s[ns++];
        q->offset = p->offset;
        if (p->kind == PT_WEIGHT && L->kind == LK_CONV) {
            *q = (param_seg){SEG_WORK, p->offset, L->c, L->in_c, L->k * L->k, G->wc, e->dt,
                             e->dt, G->wwork, G->gwork};
        } else if (p->kind == PT_WEIGHT) {
            *q = (param_seg){SEG_WORK, p->offset, L->c, L->in_c, L->in_h * L->in_w, L->in_c,
                             e->dt, GDT_F32, G->wwork, G->gwork};
        } else {
            q->kind = SEG_DIRECT, q->k = (int)p->count, q->c = q->hw = q->cw = 1;
        }
    }
    e->segs = param_segs_create(s, ns, err);
    free(s);
    return e->segs ? 0 : -1;
}

// Staging layout: hparams, labels, dx, dy, flip, images (each aligned).
static void gx_stage_layout(gx_exec *e) {
    const size_t a = GX_STAGE_ALIGN, mb = (size_t)e->max_batch;
    size_t o = a;  // gpu_hparams first
    e->off_labels = o, o += (mb * sizeof(int) + a - 1) / a * a;
    e->off_dx = o, o += (mb + a - 1) / a * a;
    e->off_dy = o, o += (mb + a - 1) / a * a;
    e->off_flip = o, o += (mb + a - 1) / a * a;
    e->off_images = o, o += mb * gx_img_bytes(e->nt);
    e->stage_bytes = o;
}

// Flat vectors, staging buffers, statistics, loss scaler and scratch.
static int gx_alloc_state(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    const size_t np = nt->nparam * sizeof(float), es = gpu_dtype_size(e->dt);
    SC_TRY(gx_alloc((void **)&e->param, np, err));
    SC_TRY(gx_alloc((void **)&e->mask, np, err));
    SC_TRY(gx_alloc((void **)&e->grad, np, err));
    SC_TRY(gx_alloc((void **)&e->mom, np, err));
    SC_TRY(gx_alloc((void **)&e->buf, nt->nbuf * sizeof(float), err));
    cudaCheck(err, cudaMemset(e->grad, 0, np));
    cudaCheck(err, cudaMemset(e->mom, 0, np));
    SC_TRY(gx_alloc(&e->input, (size_t)e->max_batch * nt->in_h * nt->in_w * e->cpad * es, err));
    for (int k = 0; k < 2; k++)
        SC_TRY(gx_alloc(&e->scratch[k], (size_t)e->max_batch * e->max_size * es, err));
    SC_TRY(gx_alloc((void **)&e->logits32, (size_t)e->max_batch * nt->classes * sizeof(float), err));
    gx_stage_layout(e);
    SC_TRY(gx_alloc((void **)&e->dstage, e->stage_bytes, err));
    for (int k = 0; k < 2; k++) {
        cudaCheck(err, cudaMallocHost((void **)&e->hstage[k], e->stage_bytes));
        memset(e->hstage[k], 0, e->stage_bytes);
        cudaCheck(err, cudaEventCreateWithFlags(&e->stage_ev[k], cudaEventDisableTiming));
    }
    SC_TRY(gx_alloc((void **)&e->stats, sizeof(gpu_stats), err));
    SC_TRY(gx_alloc((void **)&e->scaler, sizeof(gpu_scaler), err));
    cudaCheck(err, cudaMemset(e->stats, 0, sizeof(gpu_stats)));
    const float s0 = e->dt == GDT_F16 ? GX_SCALE_INIT : 1.0f;
    const gpu_scaler sc = {s0, 1.0f / s0, 0, 0};
    cudaCheck(err, cudaMemcpy(e->scaler, &sc, sizeof sc, cudaMemcpyHostToDevice));
    return 0;
}

// --- plans ------------------------------------------------------------------

// Frees a plan's cuDNN plans and graph and marks the slot unused.
static void gx_plan_free(gx_exec *e, gx_plan *p) {
    for (int i = 0; p->conv && i < e->nt->nlayers; i++)
        if (p->owner[i]) conv_gpu_free(p->conv[i]);
    for (int i = 0; p->bn && i < e->nt->nlayers; i++) bn_gpu_free(p->bn[i]);
    if (p->graph) cudaGraphExecDestroy(p->graph);
    free(p->conv), free(p->owner), free(p->bn);
    memset(p, 0, sizeof *p);
}

// Drops every captured graph (their pointers into the workspace go stale).
static void gx_graphs_drop(gx_exec *e) {
    for (int k = 0; k < GX_MAX_PLANS; k++) {
        gx_plan *p = &e->plans[k];
        if (p->graph) cudaGraphExecDestroy(p->graph);
        p->graph = NULL;
        if (p->graph_state == 1) p->graph_state = 0;
    }
}

// Grows the shared workspace to at least `bytes`.
static int gx_ws_ensure(gx_exec *e, size_t bytes, sc_err *err) {
    if (bytes <= e->ws_bytes && e->ws) return 0;
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    gx_graphs_drop(e);
    cudaFree(e->ws);
    e->ws = NULL, e->ws_bytes = 0;
    SC_TRY(gx_alloc(&e->ws, bytes, err));
    e->ws_bytes = bytes;
    return 0;
}

// Conv plan of layer i for n images, shared with an earlier layer of equal shape.
static int gx_plan_conv(gx_exec *e, gx_plan *p, int i, size_t *ws, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    conv2d_dims d;
    if (conv2d_dims_init(&d, p->n, e->gl[i].wc, L->in_h, L->in_w, L->c, L->k, L->k, L->stride,
                         L->pad))
        return sc_fail(err, "layer %s: bad convolution", L->name);
    for (int j = 0; j < i; j++)
        if (p->conv[j] && !memcmp(conv_gpu_dims(p->conv[j]), &d, sizeof d)) {
            p->conv[i] = p->conv[j];
            return 0;
        }
    p->conv[i] = conv_gpu_create(&e->g, e->dt, &d, p->backward, GX_FIND_LIMIT, err);
    if (!p->conv[i]) return sc_wrap(err, "layer %s", L->name);
    p->owner[i] = 1;
    if (conv_gpu_workspace(p->conv[i]) > *ws) *ws = conv_gpu_workspace(p->conv[i]);
    return 0;
}

// BN plan of layer i for n images (fused when it heads a group; a refused
// fusion is undone); allocates or checks the layer's reserve space.
static int gx_plan_bn(gx_exec *e, gx_plan *p, int i, size_t *ws, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    if (L->eps <= 0.0f) return sc_fail(err, "layer %s: BN epsilon must be positive", L->name);
    p->bn[i] = bn_gpu_create(&e->g, e->dt, p->n, L->c, L->h, L->w, G->fuse, err);
    if (!p->bn[i] && G->role == ROLE_HEAD && p->n == e->max_batch) {
        gx_unfuse(e, i);
        p->bn[i] = bn_gpu_create(&e->g, e->dt, p->n, L->c, L->h, L->w, BN_FUSE_NONE, err);
    }
    if (!p->bn[i]) return sc_wrap(err, "layer %s", L->name);
    if (bn_gpu_workspace(p->bn[i]) > *ws) *ws = bn_gpu_workspace(p->bn[i]);
    const size_t r = bn_gpu_reserve(p->bn[i]);
    if (!G->reserve) {
        SC_TRY(gx_alloc(&G->reserve, r, err));
        G->reserve_bytes = r;
    } else if (r > G->reserve_bytes) {
        return sc_fail(err, "layer %s: BN reserve of %zu bytes for %d images exceeds %zu",
                       L->name, r, p->n, G->reserve_bytes);
    }
    return 0;
}

// Builds the plan for n images (backward = 1: with backward algorithms).
static int gx_plan_build(gx_exec *e, gx_plan *p, int n, int backward, sc_err *err) {
    const int nl = e->nt->nlayers;
    p->n = n, p->backward = backward;
    p->conv = calloc((size_t)nl, sizeof *p->conv);
    p->owner = calloc((size_t)nl, 1);
    p->bn = calloc((size_t)nl, sizeof *p->bn);
    if (!p->conv || !p->owner || !p->bn) return sc_fail(err, "out of memory");
    size_t ws = 0;
    for (int i = 0; i < nl; i++) {
        const layer_kind k = e->nt->layers[i].kind;
        if (k == LK_CONV) SC_TRY(gx_plan_conv(e, p, i, &ws, err));
        if (k == LK_BN) SC_TRY(gx_plan_bn(e, p, i, &ws, err));
    }
    return gx_ws_ensure(e, ws, err);
}

// The plan for n images, built when missing (in an empty slot, else in
// place of the least recently used plan other than the max_batch one).
static gx_plan *gx_plan_get(gx_exec *e, int n, int backward, sc_err *err) {
    gx_plan *p = NULL, *victim = NULL;
    for (int k = 0; k < GX_MAX_PLANS; k++)
        if (e->plans[k].n == n) p = &e->plans[k];
    if (p && (!backward || p->backward)) {
        p->last_use = ++e->clock;
        return p;
    }
    for (int k = 0; k < GX_MAX_PLANS && !p; k++) {
        gx_plan *q = &e->plans[k];
        if (!q->n) {
            victim = q;
            break;
        }
        if (q->n != e->max_batch && (!victim || q->last_use < victim->last_use)) victim = q;
    }
    p = p ? p : victim;
    if (p->n) {
        cudaStreamSynchronize(e->g.stream);
        gx_plan_free(e, p);
    }
    if (gx_plan_build(e, p, n, backward, err)) {
        gx_plan_free(e, p);
        return NULL;
    }
    p->last_use = ++e->clock;
    return p;
}

// --- forward ----------------------------------------------------------------

// Pool dimensions of layer L for n images.
static int gx_pool_dims(const layer *L, int n, pool_dims *d, sc_err *err) {
    if (pool_dims_init(d, n, L->in_c, L->in_h, L->in_w, L->k, L->stride, L->pad))
        return sc_fail(err, "layer %s: bad pooling window", L->name);
    return 0;
}

// Conv or linear forward of layer i, bias included.
static int gx_fwd_affine(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    const void *x = gx_out(e, L->src);
    if (L->kind == LK_CONV)
        SC_TRY(conv_gpu_forward(&e->g, p->conv[i], x, G->wwork, G->out, e->ws, err));
    else
        SC_TRY(linear_forward_gpu(&e->g, e->dt, G->odt, n, L->in_c * L->in_h * L->in_w, L->c, x,
                                  G->wwork, G->out, err));
    if (L->bias < 0) return 0;
    return bias_forward_gpu(&e->g, G->odt, (size_t)n * L->h * L->w, L->c, gx_param(e, L->bias),
                            G->out, err);
}

// BN forward of layer i: a fused group's whole forward when it heads one.
static int gx_fwd_bn(gx_exec *e, gx_plan *p, int i, int train, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    const void *x = gx_out(e, L->src);
    const float *gamma = gx_param(e, L->gamma), *beta = gx_param(e, L->beta);
    if (!train)
        return bn_gpu_forward_infer(&e->g, p->bn[i], x, G->out, gamma, beta, gx_buf(e, L->mean),
                                    gx_buf(e, L->var), L->eps, err);
    void *y = G->out;
    const void *z = NULL;
    if (G->role == ROLE_HEAD && G->fuse == BN_FUSE_RELU) y = e->gl[i + 1].out;
    if (G->role == ROLE_HEAD && G->fuse == BN_FUSE_ADD_RELU) {
        const layer *A = &e->nt->layers[i + 1];
        y = e->gl[i + 2].out;
        z = gx_out(e, A->src == i ? A->src2 : A->src);
    }
    return bn_gpu_forward_train(&e->g, p->bn[i], x, z, y, gamma, beta, L->eps, L->momentum,
                                gx_buf(e, L->mean), gx_buf(e, L->var), G->save_mean,
                                G->save_invstd, e->ws, G->reserve, err);
}

// Runs layer i forward on n images.
static int gx_layer_forward(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    const void *x = gx_out(e, L->src);
    const size_t ny = (size_t)n * G->size;
    pool_dims pd;
    if (train && (G->role == ROLE_INNER || G->role == ROLE_TAIL)) return 0;  // done by the head
    switch (L->kind) {
    case LK_CONV:
    case LK_LINEAR: return gx_fwd_affine(e, p, i, n, err);
    case LK_BN: return gx_fwd_bn(e, p, i, train, err);
    case LK_RELU: return relu_forward_gpu(&e->g, e->dt, ny, x, G->out, err);
    case LK_ADD: return add_forward_gpu(&e->g, e->dt, ny, x, gx_out(e, L->src2), G->out, 0, err);
    case LK_MAXPOOL:
        SC_TRY(gx_pool_dims(L, n, &pd, err));
        return maxpool_forward_gpu(&e->g, e->dt, &pd, x, G->out, err);
    case LK_AVGPOOL:
        SC_TRY(gx_pool_dims(L, n, &pd, err));
        return avgpool_forward_gpu(&e->g, e->dt, &pd, x, G->out, err);
    case LK_GAP: return gap_forward_gpu(&e->g, e->dt, n, L->c, L->in_h * L->in_w, x, G->out, err);
    }
    return sc_fail(err, "layer %s: unknown kind %d", L->name, (int)L->kind);
}

// Prepares the staged images and runs every layer.
static int gx_forward(gx_exec *e, gx_plan *p, int n, int train, sc_err *err) {
    const net *nt = e->nt;
    SC_TRY(augment_normalize_gpu(&e->g, e->dt, n, nt->in_h, nt->in_w, e->cpad,
                                 e->dstage + e->off_images, (int8_t *)(e->dstage + e->off_dx),
                                 (int8_t *)(e->dstage + e->off_dy), e->dstage + e->off_flip,
                                 nt->in_mean, nt->in_std, e->input, err));
    for (int i = 0; i < nt->nlayers; i++) {
        if (e->prof) gx_mark(e, e->prof->fwd[i]);
        SC_TRY(gx_layer_forward(e, p, i, n, train, err));
    }
    if (e->prof) gx_mark(e, e->prof->fwd[nt->nlayers]);
    return 0;
}

// --- backward ---------------------------------------------------------------

// Gradient buffer of input src and whether it already holds a contribution
// (*acc); marks it written. NULL for the network input.
static void *gx_route(gx_exec *e, int src, int *acc) {
    *acc = 0;
    if (src < 0) return NULL;
    *acc = e->gseen[src];
    e->gseen[src] = 1;
    return e->gl[src].grad;
}

// Conv or linear backward: weight (and bias) gradients, then the input's.
static int gx_bwd_affine(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    const void *x = gx_out(e, L->src);
    const int in = L->in_c * L->in_h * L->in_w;
    int acc;
    if (L->kind == LK_CONV)
        SC_TRY(conv_gpu_backward_filter(&e->g, p->conv[i], x, G->grad, G->gwork, e->ws, err));
    else
        SC_TRY(linear_backward_filter_gpu(&e->g, e->dt, n, in, L->c, x, G->grad, G->gwork, err));
    if (L->bias >= 0)
        SC_TRY(bias_backward_gpu(&e->g, e->dt, (size_t)n * L->h * L->w, L->c, G->grad,
                                 gx_pgrad(e, L->bias), err));
    void *dx = gx_route(e, L->src, &acc);
    if (!dx) return 0;
    if (L->kind == LK_CONV)
        return conv_gpu_backward_data(&e->g, p->conv[i], G->grad, G->wwork, dx, acc, e->ws, err);
    return linear_backward_data_gpu(&e->g, e->dt, n, in, L->c, G->grad, G->wwork, dx, acc, err);
}

// Adds scratch buffer k into dst when the target needed accumulation.
static int gx_settle(gx_exec *e, int k, void *dst, int acc, size_t count, sc_err *err) {
    if (!dst || !acc) return 0;
    return accumulate_gpu(&e->g, e->dt, count, e->scratch[k], dst, 1, err);
}

// BN backward of BN layer b with output gradient dy and output y: a plain
// BN, or the fused group whose last layer is `tail`.
static int gx_bwd_bn(gx_exec *e, gx_plan *p, int b, int tail, int n, sc_err *err) {
    const layer *L = &e->nt->layers[b];
    gx_layer *G = &e->gl[b], *T = &e->gl[tail];
    const size_t nx = (size_t)n * G->size;
    int accx, accz = 0;
    void *dx = gx_route(e, L->src, &accx), *dz = NULL;
    if (G->role == ROLE_HEAD && G->fuse == BN_FUSE_ADD_RELU) {
        const layer *A = &e->nt->layers[b + 1];
        dz = gx_route(e, A->src == b ? A->src2 : A->src, &accz);
    }
    SC_TRY(bn_gpu_backward(&e->g, p->bn[b], gx_out(e, L->src), T->out, T->grad,
                           (!dz || accz) ? e->scratch[1] : dz, (!dx || accx) ? e->scratch[0] : dx,
                           gx_param(e, L->gamma), gx_param(e, L->beta), gx_pgrad(e, L->gamma),
                           gx_pgrad(e, L->beta), L->eps, G->save_mean, G->save_invstd, e->ws,
                           G->reserve, err));
    SC_TRY(gx_settle(e, 0, dx, accx, nx, err));
    return gx_settle(e, 1, dz, accz, nx, err);
}

// Backward of the windowed and elementwise layers (one input gradient).
static int gx_bwd_simple(gx_exec *e, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    int acc;
    void *dx = gx_route(e, L->src, &acc);
    pool_dims pd;
    if (!dx) return 0;
    switch (L->kind) {
    case LK_RELU: return relu_backward_gpu(&e->g, e->dt, (size_t)n * G->size, G->out, G->grad, dx, acc, err);
    case LK_MAXPOOL:
        SC_TRY(gx_pool_dims(L, n, &pd, err));
        return maxpool_backward_gpu(&e->g, e->dt, &pd, gx_out(e, L->src), G->grad, dx, acc, err);
    case LK_AVGPOOL:
        SC_TRY(gx_pool_dims(L, n, &pd, err));
        return avgpool_backward_gpu(&e->g, e->dt, &pd, G->grad, dx, acc, err);
    case LK_GAP: return gap_backward_gpu(&e->g, e->dt, n, L->c, L->in_h * L->in_w, G->grad, dx, acc, err);
    default: return sc_fail(err, "layer %s: no simple backward", L->name);
    }
}

// Runs layer i backward on n images.
static int gx_layer_backward(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    int acc;
    if (G->role == ROLE_HEAD || G->role == ROLE_INNER) return 0;  // done by the tail
    if (G->role == ROLE_TAIL) return gx_bwd_bn(e, p, G->head, i, n, err);
    switch (L->kind) {
    case LK_CONV:
    case LK_LINEAR: return gx_bwd_affine(e, p, i, n, err);
    case LK_BN: return gx_bwd_bn(e, p, i, i, n, err);
    case LK_ADD:
        for (int k = 0; k < 2; k++) {
            void *dx = gx_route(e, k ? L->src2 : L->src, &acc);
            if (dx) SC_TRY(accumulate_gpu(&e->g, e->dt, (size_t)n * G->size, G->grad, dx, acc, err));
        }
        return 0;
    default: return gx_bwd_simple(e, i, n, err);
    }
}

// Backward over every layer that the loss reaches, last to first.
static int gx_backward(gx_exec *e, gx_plan *p, int n, sc_err *err) {
    const int nl = e->nt->nlayers;
    memset(e->gseen, 0, (size_t)nl);
    e->gseen[nl - 1] = 1;
    for (int i = nl - 1; i >= 0; i--) {
        if (e->prof) gx_mark(e, e->prof->bwd[i + 1]);
        if (e->gseen[i]) SC_TRY(gx_layer_backward(e, p, i, n, err));
    }
    if (e->prof) gx_mark(e, e->prof->bwd[0]);
    return 0;
}

// --- a whole step -----------------------------------------------------------

// Every launch of one training step on the staged batch.
static int gx_step_ops(gx_exec *e, gx_plan *p, sc_err *err) {
    const int n = p->n, last = e->nt->nlayers - 1;
    gpu_scaler *sc = e->dt == GDT_F16 ? e->scaler : NULL;
    if (e->prof) gx_mark(e, e->prof->other[0]);
    SC_TRY(param_cast_gpu(&e->g, e->segs, e->param, err));
    SC_TRY(gx_forward(e, p, n, 1, err));
    SC_TRY(softmax_xent_gpu(&e->g, e->gl[last].odt, e->dt, n, e->nt->classes, e->gl[last].out,
                            gx_labels(e), gx_hp(e), 1.0f / (float)n, sc, e->gl[last].grad,
                            e->stats, err));
    if (e->prof) gx_mark(e, e->prof->other[1]);
    SC_TRY(gx_backward(e, p, n, err));
    if (e->prof) gx_mark(e, e->prof->other[2]);
    SC_TRY(grad_gather_gpu(&e->g, e->segs, e->grad, sc, err));
    if (e->prof) gx_mark(e, e->prof->other[3]);
    SC_TRY(sgd_step_gpu(&e->g, e->nt->nparam, e->param, e->grad, e->mom, e->mask, gx_hp(e), sc, err));
    if (sc) SC_TRY(scaler_update_gpu(&e->g, sc, e->stats, GX_SCALE_INTERVAL, err));
    if (e->prof) gx_mark(e, e->prof->other[4]);
    return 0;
}

// Captures one step into the plan's graph; on failure the plan stays eager.
static int gx_capture(gx_exec *e, gx_plan *p, sc_err *err) {
    cudaGraph_t graph = NULL;
    sc_err cap = {{0}};
    cudaCheck(err, cudaStreamBeginCapture(e->g.stream, cudaStreamCaptureModeRelaxed));
    int rc = gx_step_ops(e, p, &cap);
    cudaError_t ce = cudaStreamEndCapture(e->g.stream, &graph);
    if (!rc && ce == cudaSuccess) ce = cudaGraphInstantiate(&p->graph, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (rc || ce != cudaSuccess) {
        snprintf(p->graph_err, sizeof p->graph_err, "%.190s", rc ? cap.msg : cudaGetErrorString(ce));
        (void)cudaGetLastError();
        p->graph = NULL;
        p->graph_state = -1;
        return -1;
    }
    p->graph_state = 1;
    return 0;
}

// Runs the staged step: by graph when captured, else eagerly (capturing the
// graph at the second step of a plan).
static int gx_step_run(gx_exec *e, gx_plan *p, sc_err *err) {
    if (p->graph_state == 0 && p->steps >= 1 && e->use_graphs) (void)gx_capture(e, p, err);
    p->steps++;
    if (p->graph_state == 1) {
        cudaCheck(err, cudaGraphLaunch(p->graph, e->g.stream));
        return 0;
    }
    return gx_step_ops(e, p, err);
}

// --- staging ----------------------------------------------------------------

// Checks batch size and labels.
static int gx_check_batch(gx_exec *e, const exec_batch *b, sc_err *err) {
    if (b->n < 1 || b->n > e->max_batch)
        return sc_fail(err, "batch of %d images (the executor takes 1 to %d)", b->n, e->max_batch);
    if (!b->images || !b->labels) return sc_fail(err, "batch without images or labels");
    for (int i = 0; i < b->n; i++)
        if (b->labels[i] < 0 || b->labels[i] >= e->nt->classes)
            return sc_fail(err, "label out of range (image %d, label %d, %d classes)", i,
                           b->labels[i], e->nt->classes);
    return 0;
}

// Copies the batch and hyper-parameters into a pinned buffer and queues its upload.
static int gx_stage(gx_exec *e, const exec_batch *b, const gpu_hparams *hp, sc_err *err) {
    const int k = e->stage_cur, n = b->n;
    unsigned char *h = e->hstage[k];
    cudaCheck(err, cudaEventSynchronize(e->stage_ev[k]));  // its last upload is done
    memcpy(h, hp, sizeof *hp);
    memcpy(h + e->off_labels, b->labels, (size_t)n * sizeof(int));
    if (b->dx) memcpy(h + e->off_dx, b->dx, (size_t)n);
    else memset(h + e->off_dx, 0, (size_t)n);
    if (b->dy) memcpy(h + e->off_dy, b->dy, (size_t)n);
    else memset(h + e->off_dy, 0, (size_t)n);
    if (b->flip) memcpy(h + e->off_flip, b->flip, (size_t)n);
    else memset(h + e->off_flip, 0, (size_t)n);
    memcpy(h + e->off_images, b->images, (size_t)n * gx_img_bytes(e->nt));
    const size_t bytes = e->off_images + (size_t)n * gx_img_bytes(e->nt);
    cudaCheck(err, cudaMemcpyAsync(e->dstage, h, bytes, cudaMemcpyHostToDevice, e->g.stream));
    cudaCheck(err, cudaEventRecord(e->stage_ev[k], e->g.stream));
    e->stage_cur = 1 - k;
    return 0;
}

// --- backend: create / destroy ----------------------------------------------

// Frees everything a GPU executor state holds (NULL is fine).
static void gx_destroy(void *st) {
    gx_exec *e = st;
    if (!e) return;
    if (e->g.stream) cudaStreamSynchronize(e->g.stream);
    for (int k = 0; k < GX_MAX_PLANS; k++) gx_plan_free(e, &e->plans[k]);
    for (int i = 0; e->gl && i < e->nt->nlayers; i++) {
        gx_layer *G = &e->gl[i];
        cudaFree(G->out), cudaFree(G->grad), cudaFree(G->wwork), cudaFree(G->gwork);
        cudaFree(G->save_mean), cudaFree(G->save_invstd), cudaFree(G->reserve);
    }
    param_segs_free(e->segs);
    cudaFree(e->ws), cudaFree(e->input), cudaFree(e->scratch[0]), cudaFree(e->scratch[1]);
    cudaFree(e->logits32), cudaFree(e->param), cudaFree(e->mask), cudaFree(e->grad);
    cudaFree(e->mom), cudaFree(e->buf), cudaFree(e->dstage), cudaFree(e->stats);
    cudaFree(e->scaler);
    for (int k = 0; k < 2; k++) {
        if (e->hstage[k]) cudaFreeHost(e->hstage[k]);
        if (e->stage_ev[k]) cudaEventDestroy(e->stage_ev[k]);
    }
    gpu_ctx_free(&e->g);
    free(e->gl), free(e->gseen);
    free(e);
}

static int gx_write_net(void *st, sc_err *err);

// Sets up the state: context, layers, segments, buffers, the max_batch plan.
static int gx_setup(gx_exec *e, sc_err *err) {
    struct cudaDeviceProp prop;
    cudaCheck(err, cudaGetDeviceProperties(&prop, 0));
    snprintf(e->name, sizeof e->name, "%s", prop.name);
    SC_TRY(gpu_ctx_init(&e->g, err));
    e->gl = calloc((size_t)e->nt->nlayers, sizeof *e->gl);
    e->gseen = calloc((size_t)e->nt->nlayers, 1);
    if (!e->gl || !e->gseen) return sc_fail(err, "out of memory");
    SC_TRY(gx_plan_roles(e, err));
    SC_TRY(gx_alloc_layers(e, err));
    SC_TRY(gx_alloc_state(e, err));
    SC_TRY(gx_segments(e, err));
    SC_TRY(gx_write_net(e, err));
    return gx_plan_get(e, e->max_batch, 1, err) ? 0 : -1;
}

// Creates the GPU state for nt and uploads its parameters, masks and buffers.
static void *gx_create(net *nt, sc_precision prec, int max_batch, sc_err *err) {
    if (gx_check_net(nt, max_batch, err)) return NULL;
    gx_exec *e = calloc(1, sizeof *e);
    if (!e) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    e->nt = nt, e->prec = prec, e->max_batch = max_batch;
    e->dt = prec == PREC_FP16 ? GDT_F16 : GDT_F32;
    const char *ev = getenv("SC_GPU_GRAPH");
    e->use_graphs = !(ev && !strcmp(ev, "0"));
    if (gx_setup(e, err)) {
        gx_destroy(e);
        return NULL;
    }
    return e;
}

// --- backend: steps ---------------------------------------------------------

// One SGD step on the GPU.
static int gx_train_step(void *st, const exec_batch *b, const exec_hparams *h, sc_err *err) {
    gx_exec *e = st;
    SC_TRY(gx_check_batch(e, b, err));
    gx_plan *p = gx_plan_get(e, b->n, 1, err);
    if (!p) return -1;
    const gpu_hparams hp = {h->lr, h->momentum, h->weight_decay, h->label_smoothing,
                            h->nesterov, {0, 0, 0}};
    SC_TRY(gx_stage(e, b, &hp, err));
    SC_TRY(gx_step_run(e, p, err));
    e->work_stale = 1;
    return 0;
}

// Inference-mode forward; statistics on the device, logits copied when asked.
static int gx_eval_batch(void *st, const exec_batch *b, float smoothing, float *logits,
                         sc_err *err) {
    gx_exec *e = st;
    const int last = e->nt->nlayers - 1, k = e->nt->classes;
    SC_TRY(gx_check_batch(e, b, err));
    gx_plan *p = gx_plan_get(e, b->n, 0, err);
    if (!p) return -1;
    const gpu_hparams hp = {0.0f, 0.0f, 0.0f, smoothing, 0, {0, 0, 0}};
    SC_TRY(gx_stage(e, b, &hp, err));
    if (e->work_stale) SC_TRY(param_cast_gpu(&e->g, e->segs, e->param, err));
    e->work_stale = 0;
    SC_TRY(gx_forward(e, p, b->n, 0, err));
    const gx_layer *G = &e->gl[last];
    SC_TRY(softmax_xent_gpu(&e->g, G->odt, e->dt, b->n, k, G->out, gx_labels(e), gx_hp(e), 1.0f,
                            NULL, NULL, e->stats, err));
    if (!logits) return 0;
    const size_t cnt = (size_t)b->n * k;
    const void *src = G->out;
    if (G->odt != GDT_F32) {
        SC_TRY(gpu_convert(&e->g, cnt, G->odt, G->out, GDT_F32, e->logits32, err));
        src = e->logits32;
    }
    cudaCheck(err, cudaMemcpyAsync(logits, src, cnt * sizeof(float), cudaMemcpyDeviceToHost,
                                   e->g.stream));
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    return 0;
}

// Returns and resets the device statistics (synchronises).
static int gx_stats_take(void *st, exec_stats *out, sc_err *err) {
    gx_exec *e = st;
    gpu_stats s;
    cudaCheck(err, cudaMemcpyAsync(&s, e->stats, sizeof s, cudaMemcpyDeviceToHost, e->g.stream));
    cudaCheck(err, cudaMemsetAsync(e->stats, 0, sizeof s, e->g.stream));
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    cudaCheck(err, cudaGetLastError());
    out->loss_sum = s.loss_sum;
    out->correct = (long)s.correct;
    out->count = (long)s.count;
    out->skipped = (long)s.skipped;
    return 0;
}

// --- backend: host copies ---------------------------------------------------

// Queues a copy on the executor's stream and waits for it.
static int gx_copy(gx_exec *e, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                   sc_err *err) {
    if (bytes) cudaCheck(err, cudaMemcpyAsync(dst, src, bytes, kind, e->g.stream));
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    return 0;
}

// Copies parameters, masks and BN buffers into the net.
static int gx_read_net(void *st, sc_err *err) {
    gx_exec *e = st;
    net *nt = e->nt;
    const size_t np = nt->nparam * sizeof(float);
    SC_TRY(gx_copy(e, nt->param, e->param, np, cudaMemcpyDeviceToHost, err));
    SC_TRY(gx_copy(e, nt->mask, e->mask, np, cudaMemcpyDeviceToHost, err));
    return gx_copy(e, nt->buf, e->buf, nt->nbuf * sizeof(float), cudaMemcpyDeviceToHost, err);
}

// Uploads the net's parameters, masks and BN buffers.
static int gx_write_net(void *st, sc_err *err) {
    gx_exec *e = st;
    const net *nt = e->nt;
    const size_t np = nt->nparam * sizeof(float);
    SC_TRY(gx_copy(e, e->param, nt->param, np, cudaMemcpyHostToDevice, err));
    SC_TRY(gx_copy(e, e->mask, nt->mask, np, cudaMemcpyHostToDevice, err));
    SC_TRY(gx_copy(e, e->buf, nt->buf, nt->nbuf * sizeof(float), cudaMemcpyHostToDevice, err));
    e->work_stale = 1;
    return 0;
}

// Copies the momentum buffer out.
static int gx_read_momentum(void *st, float *mom, sc_err *err) {
    gx_exec *e = st;
    return gx_copy(e, mom, e->mom, e->nt->nparam * sizeof(float), cudaMemcpyDeviceToHost, err);
}

// Copies a momentum buffer in.
static int gx_write_momentum(void *st, const float *mom, sc_err *err) {
    gx_exec *e = st;
    return gx_copy(e, e->mom, mom, e->nt->nparam * sizeof(float), cudaMemcpyHostToDevice, err);
}

// Copies the last step's unscaled gradient out (zeros before the first step).
static int gx_read_grad(void *st, float *grad, sc_err *err) {
    gx_exec *e = st;
    return gx_copy(e, grad, e->grad, e->nt->nparam * sizeof(float), cudaMemcpyDeviceToHost, err);
}

// The GPU's name.
static const char *gx_device_name(const void *st) { return ((const gx_exec *)st)->name; }

// --- profiling and description ----------------------------------------------

// Creates n timing events.
static int gx_events(cudaEvent_t *ev, int n, sc_err *err) {
    for (int i = 0; i < n; i++) cudaCheck(err, cudaEventCreate(&ev[i]));
    return 0;
}

// Milliseconds between two recorded events.
static float gx_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

// Runs one eager training step with events around every layer.
int exec_gpu_profile_step(void *st, const exec_batch *b, const exec_hparams *h, float *fwd_ms,
                          float *bwd_ms, float other_ms[4], sc_err *err) {
    gx_exec *e = st;
    const int nl = e->nt->nlayers;
    SC_TRY(gx_check_batch(e, b, err));
    gx_plan *p = gx_plan_get(e, b->n, 1, err);
    if (!p) return -1;
    gx_prof pr = {calloc((size_t)nl + 1, sizeof(cudaEvent_t)),
                  calloc((size_t)nl + 1, sizeof(cudaEvent_t)), {0}};
    int rc = pr.fwd && pr.bwd ? 0 : sc_fail(err, "out of memory");
    if (!rc) rc = gx_events(pr.fwd, nl + 1, err) || gx_events(pr.bwd, nl + 1, err) ||
                  gx_events(pr.other, 5, err);
    const gpu_hparams hp = {h->lr, h->momentum, h->weight_decay, h->label_smoothing,
                            h->nesterov, {0, 0, 0}};
    if (!rc) rc = gx_stage(e, b, &hp, err);
    e->prof = &pr;
    if (!rc) rc = gx_step_ops(e, p, err);
    e->prof = NULL;
    e->work_stale = 1;
    if (!rc && cudaStreamSynchronize(e->g.stream) != cudaSuccess)
        rc = sc_fail(err, "profiled step failed: %s", cudaGetErrorString(cudaGetLastError()));
    for (int i = 0; !rc && i < nl; i++) {
        fwd_ms[i] = gx_ms(pr.fwd[i], pr.fwd[i + 1]);
        bwd_ms[i] = gx_ms(pr.bwd[i + 1], pr.bwd[i]);
    }
    if (!rc) {
        other_ms[0] = gx_ms(pr.other[0], pr.fwd[0]);
        other_ms[1] = gx_ms(pr.fwd[nl], pr.other[1]);
        other_ms[2] = gx_ms(pr.other[2], pr.other[3]);
        other_ms[3] = gx_ms(pr.other[3], pr.other[4]);
    }
    for (int i = 0; i <= nl; i++) {
        if (pr.fwd && pr.fwd[i]) cudaEventDestroy(pr.fwd[i]);
        if (pr.bwd && pr.bwd[i]) cudaEventDestroy(pr.bwd[i]);
    }
    for (int i = 0; i < 5; i++)
        if (pr.other[i]) cudaEventDestroy(pr.other[i]);
    free(pr.fwd), free(pr.bwd);
    return rc;
}

// Describes precision, padding, fusion, algorithms, workspace and graph use.
void exec_gpu_describe(const void *st, char *buf, size_t len) {
    const gx_exec *e = st;
    size_t o = 0;
    const gx_plan *p = NULL;
    for (int k = 0; k < GX_MAX_PLANS; k++)
        if (e->plans[k].n == e->max_batch) p = &e->plans[k];
    o += (size_t)snprintf(buf + o, len - o, "%s, %s, input channels padded to %d, workspace %zu MB, "
                          "graph %s %s\n", e->name, e->dt == GDT_F16 ? "fp16" : "fp32", e->cpad,
                          e->ws_bytes >> 20, !p ? "-" : p->graph_state == 1 ? "yes"
                          : p->graph_state < 0 ? "failed:" : "not yet", p ? p->graph_err : "");
    for (int i = 0; i < e->nt->nlayers && o < len; i++) {
        const layer *L = &e->nt->layers[i];
        const gx_layer *G = &e->gl[i];
        char a[200] = "";
        if (p && p->conv && p->conv[i]) conv_gpu_describe(p->conv[i], a, sizeof a);
        if (G->role == ROLE_HEAD)
            snprintf(a, sizeof a, "fused %s", G->fuse == BN_FUSE_RELU ? "bn+relu" : "bn+add+relu");
        o += (size_t)snprintf(buf + o, len - o, "  %-24s %s\n", L->name, a);
    }
}

// --- table ------------------------------------------------------------------

static const exec_backend gpu_backend = {
    .name = "gpu",
    .create = gx_create,
    .destroy = gx_destroy,
    .train_step = gx_train_step,
    .eval_batch = gx_eval_batch,
    .stats_take = gx_stats_take,
    .read_net = gx_read_net,
    .write_net = gx_write_net,
    .read_momentum = gx_read_momentum,
    .write_momentum = gx_write_momentum,
    .read_grad = gx_read_grad,
    .device_name = gx_device_name,
};

// The GPU backend, or NULL (err says why) when no CUDA device can be used.
const exec_backend *exec_gpu_backend(sc_err *err) {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        sc_fail(err, "no usable GPU (%s)", cudaGetErrorString(rc));
        return NULL;
    }
    if (count < 1) {
        sc_fail(err, "no GPU found");
        return NULL;
    }
    return &gpu_backend;
}
