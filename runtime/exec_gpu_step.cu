// The GPU executor's work per batch size: plans (cuDNN conv algorithms
// timed once, BN plans), the forward and backward passes over the layer
// list, one whole training step and its CUDA graph. Written in C style; a
// .cu file only so the backend's table file stays short (runtime/exec_gpu.c).
#include "runtime/exec_gpu_impl.h"

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

// Builds the plan for n images (backward = 1: with backward algorithms).
static int gx_plan_build(gx_exec *e, gx_plan *p, int n, int backward, sc_err *err) {
    const int nl = e->nt->nlayers;
    p->n = n, p->backward = backward;
    p->conv = (conv_gpu **)calloc((size_t)nl, sizeof *p->conv);
    p->owner = (unsigned char *)calloc((size_t)nl, 1);
    p->bn = (bn_gpu **)calloc((size_t)nl, sizeof *p->bn);
    if (!p->conv || !p->owner || !p->bn) return sc_fail(err, "out of memory");
    size_t ws = 0;
    for (int i = 0; i < nl; i++)
        if (gx_ops(e, i)->plan) SC_TRY(gx_ops(e, i)->plan(e, p, i, &ws, err));
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

// Runs layer i forward on n images through its kind's hooks (the inner
// and tail layers of a fused group are run by its head when training).
static int gx_layer_forward(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    const gx_layer *G = &e->gl[i];
    if (train && (G->role == ROLE_INNER || G->role == ROLE_TAIL)) return 0;  // done by the head
    return gx_ops(e, i)->forward(e, p, i, n, train, err);
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

// Runs layer i backward on n images through its kind's hooks; a fused
// group runs once, from its tail, through its head's hooks.
static int gx_layer_backward(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const gx_layer *G = &e->gl[i];
    if (G->role == ROLE_HEAD || G->role == ROLE_INNER) return 0;  // done by the tail
    if (G->role == ROLE_TAIL) return gx_ops(e, G->head)->backward(e, p, G->head, n, err);
    return gx_ops(e, i)->backward(e, p, i, n, err);
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
