// The batch-norm layer kind's GPU executor hooks (runtime/ops.h): cuDNN BN
// per batch size; a BN that heads a fused group (fp16 training: "bn, relu"
// or "bn, add, relu", runtime/exec_gpu.c) runs the whole group forward and
// backward with cuDNN's fused kernels.
#include <stdint.h>

#include "runtime/exec_gpu_impl.h"

// Channels of one vector in a BN layer's stage (a multiple of 4 floats).
static size_t bn_stage_c(const layer *L) { return ((size_t)L->c + 3) / 4 * 4; }

// Saved batch mean and inverse deviation, (c) fp32 each, and the stage.
static int bn_gpu_setup(gx_exec *e, int i, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    SC_TRY(gx_alloc((void **)&G->save_mean, (size_t)L->c * sizeof(float), err));
    SC_TRY(gx_alloc((void **)&G->stage, 6 * bn_stage_c(L) * sizeof(float), err));
    return gx_alloc((void **)&G->save_invstd, (size_t)L->c * sizeof(float), err);
}

// A BN layer's per-channel vectors as cuDNN gets them: gamma, beta,
// running mean, running var, dgamma, dbeta (the last two NULL outside the
// backward). cuDNN's NHWC kernels read them four floats at a time, but a
// tensor's offset in the flat vectors need not be a multiple of 4 (e.g.
// after a concat of 6 + 8 channels): then all six live in the layer's
// 16-byte aligned stage, copied in before and out after.
typedef struct {
    float *v[6];     // what cuDNN gets
    float *flat[6];  // the flat vectors' own
    int staged;
} bn_vecs;

// Points v at the layer's vectors, staging them (gamma, beta, mean, var
// copied in) when one is misaligned.
static int bn_vecs_in(gx_exec *e, int i, int grads, bn_vecs *v, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    float *flat[6] = {gx_param(e, L->gamma), gx_param(e, L->beta), gx_buf(e, L->mean),
                      gx_buf(e, L->var), grads ? gx_pgrad(e, L->gamma) : NULL,
                      grads ? gx_pgrad(e, L->beta) : NULL};
    v->staged = 0;
    for (int k = 0; k < 6; k++) v->staged |= ((uintptr_t)flat[k] & 15) != 0;
    for (int k = 0; k < 6; k++) {
        v->flat[k] = flat[k];
        v->v[k] = v->staged && flat[k] ? e->gl[i].stage + k * bn_stage_c(L) : flat[k];
        if (v->staged && flat[k] && k < 4)
            cudaCheck(err, cudaMemcpyAsync(v->v[k], flat[k], (size_t)L->c * sizeof(float),
                                           cudaMemcpyDeviceToDevice, e->g.stream));
    }
    return 0;
}

// Copies the staged vectors in [from, to) back to the flat vectors.
static int bn_vecs_out(gx_exec *e, int i, const bn_vecs *v, int from, int to, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    for (int k = from; v->staged && k < to; k++)
        if (v->flat[k])
            cudaCheck(err, cudaMemcpyAsync(v->flat[k], v->v[k], (size_t)L->c * sizeof(float),
                                           cudaMemcpyDeviceToDevice, e->g.stream));
    return 0;
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
    bn_vecs v;
    SC_TRY(bn_vecs_in(e, i, 0, &v, err));
    if (!train)
        return bn_gpu_forward_infer(&e->g, p->bn[i], x, G->out, v.v[0], v.v[1], v.v[2], v.v[3],
                                    L->eps, err);
    void *y = G->out;
    const void *z = NULL;
    if (G->role == ROLE_HEAD && G->fuse == BN_FUSE_RELU) y = e->gl[i + 1].out;
    if (G->role == ROLE_HEAD && G->fuse == BN_FUSE_ADD_RELU) {
        const layer *A = &e->nt->layers[i + 1];
        y = e->gl[i + 2].out;
        z = gx_out(e, A->srcs[0] == i ? A->srcs[1] : A->srcs[0]);
    }
    SC_TRY(bn_gpu_forward_train(&e->g, p->bn[i], x, z, y, v.v[0], v.v[1], L->eps, L->momentum,
                                v.v[2], v.v[3], G->save_mean, G->save_invstd, e->ws, G->reserve, err));
    return bn_vecs_out(e, i, &v, 2, 4, err);  // the running statistics
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
    bn_vecs v;
    SC_TRY(bn_vecs_in(e, b, 1, &v, err));
    SC_TRY(bn_gpu_backward(&e->g, p->bn[b], gx_out(e, L->src), T->out, T->grad,
                           (!dz || accz) ? e->scratch[1] : dz, (!dx || accx) ? e->scratch[0] : dx,
                           v.v[0], v.v[1], v.v[4], v.v[5], L->eps, G->save_mean, G->save_invstd,
                           e->ws, G->reserve, err));
    SC_TRY(bn_vecs_out(e, b, &v, 4, 6, err));  // dgamma, dbeta
    SC_TRY(gx_settle(e, 0, dx, accx, nx, err));
    return gx_settle(e, 1, dz, accz, nx, err);
}

const struct op_gpu op_bn_gpu = {
    .setup = bn_gpu_setup,
    .plan = bn_gpu_plan,
    .forward = bn_gpu_fwd,
    .backward = bn_gpu_bwd,
};
