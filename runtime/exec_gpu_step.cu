// The GPU executor's work per batch size: plans (cuDNN conv algorithms
// timed once, BN plans), the forward and backward passes over the layer
// list, one whole training step and its CUDA graph. Written in C style; a
// .cu file only so the backend's table file stays short (runtime/exec_gpu.c).
#include "runtime/exec_gpu_impl.h"

// Undoes the fused group headed by BN layer i (cuDNN refused the fusion).
static void gx_unfuse(gx_exec *e, int i) {
    const int len = e->gl[i].fuse == BN_FUSE_ADD_RELU ? 3 : 2;
    for (int k = 0; k < len; k++) e->gl[i + k].role = ROLE_PLAIN;
    e->gl[i].fuse = BN_FUSE_NONE;
}

// --- plans ------------------------------------------------------------------

// Frees a plan's cuDNN plans and graph and marks the slot unused.
extern "C" void gx_plan_free(gx_exec *e, gx_plan *p) {
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
    p->conv = (conv_gpu **)calloc((size_t)nl, sizeof *p->conv);
    p->owner = (unsigned char *)calloc((size_t)nl, 1);
    p->bn = (bn_gpu **)calloc((size_t)nl, sizeof *p->bn);
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
extern "C" gx_plan *gx_plan_get(gx_exec *e, int n, int backward, sc_err *err) {
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
extern "C" int gx_forward(gx_exec *e, gx_plan *p, int n, int train, sc_err *err) {
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
        SC_TRY(linear_backward_filter_gpu(&e->g, e->dt, n, in, L->c, x, G->grad, (float *)G->gwork, err));
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
extern "C" int gx_step_ops(gx_exec *e, gx_plan *p, sc_err *err) {
    const int n = p->n, last = e->nt->nlayers - 1;
    gpu_scaler *sc = e->dt == GDT_F16 ? e->scaler : NULL;
    if (e->prof) gx_mark(e, e->prof->other[0]);
    SC_TRY(param_cast_gpu(&e->g, e->segs, e->param, err));
    SC_TRY(gx_forward(e, p, n, 1, err));
    if (e->soft_mode)
        SC_TRY(soft_xent_gpu(&e->g, e->gl[last].odt, e->dt, n, e->nt->classes, e->gl[last].out,
                             gx_soft(e), gx_labels(e), 1.0f / (float)n, sc, e->gl[last].grad,
                             e->stats, err));
    else
        SC_TRY(softmax_xent_gpu(&e->g, e->gl[last].odt, e->dt, n, e->nt->classes,
                                e->gl[last].out, gx_labels(e), gx_hp(e), 1.0f / (float)n, sc,
                                e->gl[last].grad, e->stats, err));
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
    sc_err cap = {};
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
    p->graph_soft = e->soft_mode;
    return 0;
}

// Runs the staged step: by graph when captured, else eagerly (capturing the
// graph at the second step of a plan, and again when the loss switches
// between hard labels and soft targets).
extern "C" int gx_step_run(gx_exec *e, gx_plan *p, sc_err *err) {
    if (p->graph_state == 1 && p->graph_soft != e->soft_mode) {
        cudaGraphExecDestroy(p->graph);
        p->graph = NULL;
        p->graph_state = 0;
    }
    if (p->graph_state == 0 && p->steps >= 1 && e->use_graphs) (void)gx_capture(e, p, err);
    p->steps++;
    if (p->graph_state == 1) {
        cudaCheck(err, cudaGraphLaunch(p->graph, e->g.stream));
        return 0;
    }
    return gx_step_ops(e, p, err);
}
