// The batch-norm layer kind's GPU executor hooks (runtime/ops.h): cuDNN BN
// per batch size; a BN that heads a fused group (fp16 training: "bn, relu"
// or "bn, add, relu", runtime/exec_gpu.c) runs the whole group forward and
// backward with cuDNN's fused kernels.
#include "runtime/exec_gpu_impl.h"

// Saved batch mean and inverse deviation, (c) fp32 each.
static int bn_gpu_setup(gx_exec *e, int i, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    SC_TRY(gx_alloc((void **)&G->save_mean, (size_t)L->c * sizeof(float), err));
    return gx_alloc((void **)&G->save_invstd, (size_t)L->c * sizeof(float), err);
}

// Undoes the fused group headed by BN layer i (cuDNN refused the fusion).
static void bn_gpu_unfuse(gx_exec *e, int i) {
    const int len = e->gl[i].fuse == BN_FUSE_ADD_RELU ? 3 : 2;
    for (int k = 0; k < len; k++) e->gl[i + k].role = ROLE_PLAIN;
    e->gl[i].fuse = BN_FUSE_NONE;
}

// BN plan of layer i for n images (fused when it heads a group; a refused
// fusion is undone); allocates or checks the layer's reserve space.
static int bn_gpu_plan(gx_exec *e, gx_plan *p, int i, size_t *ws, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    if (L->eps <= 0.0f) return sc_fail(err, "layer %s: BN epsilon must be positive", L->name);
    p->bn[i] = bn_gpu_create(&e->g, e->dt, p->n, L->c, L->h, L->w, G->fuse, err);
    if (!p->bn[i] && G->role == ROLE_HEAD && p->n == e->max_batch) {
        bn_gpu_unfuse(e, i);
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

// BN forward of layer i: a fused group's whole forward when it heads one.
static int bn_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
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
        z = gx_out(e, A->srcs[0] == i ? A->srcs[1] : A->srcs[0]);
    }
    return bn_gpu_forward_train(&e->g, p->bn[i], x, z, y, gamma, beta, L->eps, L->momentum,
                                gx_buf(e, L->mean), gx_buf(e, L->var), G->save_mean,
                                G->save_invstd, e->ws, G->reserve, err);
}

// BN backward of BN layer b: a plain BN, or the fused group it heads (its
// tail's output and gradient, the add's other input's gradient too).
static int bn_gpu_bwd(gx_exec *e, gx_plan *p, int b, int n, sc_err *err) {
    const layer *L = &e->nt->layers[b];
    gx_layer *G = &e->gl[b];
    const int tail = G->role != ROLE_HEAD ? b : b + (G->fuse == BN_FUSE_ADD_RELU ? 2 : 1);
    gx_layer *T = &e->gl[tail];
    const size_t nx = (size_t)n * G->size;
    int accx, accz = 0;
    void *dx = gx_route(e, L->src, &accx), *dz = NULL;
    if (G->role == ROLE_HEAD && G->fuse == BN_FUSE_ADD_RELU) {
        const layer *A = &e->nt->layers[b + 1];
        dz = gx_route(e, A->srcs[0] == b ? A->srcs[1] : A->srcs[0], &accz);
    }
    SC_TRY(bn_gpu_backward(&e->g, p->bn[b], gx_out(e, L->src), T->out, T->grad,
                           (!dz || accz) ? e->scratch[1] : dz, (!dx || accx) ? e->scratch[0] : dx,
                           gx_param(e, L->gamma), gx_param(e, L->beta), gx_pgrad(e, L->gamma),
                           gx_pgrad(e, L->beta), L->eps, G->save_mean, G->save_invstd, e->ws,
                           G->reserve, err));
    SC_TRY(gx_settle(e, 0, dx, accx, nx, err));
    return gx_settle(e, 1, dz, accz, nx, err);
}

const struct op_gpu op_bn_gpu = {
    .setup = bn_gpu_setup,
    .plan = bn_gpu_plan,
    .forward = bn_gpu_fwd,
    .backward = bn_gpu_bwd,
};
