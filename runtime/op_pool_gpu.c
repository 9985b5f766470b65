// The pooling layer kinds' GPU executor hooks (runtime/ops.h): max, average
// and global average pooling, channels-last.
#include "runtime/exec_gpu_impl.h"

// Pool dimensions of layer L for n images.
static int pool_gpu_dims(const layer *L, int n, pool_dims *d, sc_err *err) {
    if (pool_dims_init(d, n, L->in_c, L->in_h, L->in_w, L->k, L->stride, L->pad))
        return sc_fail(err, "layer %s: bad pooling window", L->name);
    return 0;
}

// Routes layer i's input gradient (*dx NULL: none flows) and fills its pool
// dimensions for n images.
static int pool_gpu_bwd_args(gx_exec *e, int i, int n, pool_dims *d, void **dx, int *acc,
                             sc_err *err) {
    *dx = gx_route(e, e->nt->layers[i].src, acc);
    return *dx ? pool_gpu_dims(&e->nt->layers[i], n, d, err) : 0;
}

// Max (max = 1) or mean over each window.
static int window_gpu_fwd(gx_exec *e, int i, int n, int max, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    pool_dims d;
    SC_TRY(pool_gpu_dims(L, n, &d, err));
    return (max ? maxpool_forward_gpu : avgpool_forward_gpu)(&e->g, e->dt, &d, gx_out(e, L->src),
                                                              e->gl[i].out, err);
}

// The gradient to each window's maximum (max = 1) or spread evenly over it.
static int window_gpu_bwd(gx_exec *e, int i, int n, int max, sc_err *err) {
    pool_dims d;
    void *dx;
    int acc;
    SC_TRY(pool_gpu_bwd_args(e, i, n, &d, &dx, &acc, err));
    if (!dx) return 0;
    if (max)
        return maxpool_backward_gpu(&e->g, e->dt, &d, gx_out(e, e->nt->layers[i].src), e->gl[i].grad, dx,
                                    acc, err);
    return avgpool_backward_gpu(&e->g, e->dt, &d, e->gl[i].grad, dx, acc, err);
}

// Max over each window.
static int maxpool_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    return window_gpu_fwd(e, i, n, 1, err);
}

// The gradient to each window's maximum.
static int maxpool_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    return window_gpu_bwd(e, i, n, 1, err);
}

// Mean over each window.
static int avgpool_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    return window_gpu_fwd(e, i, n, 0, err);
}

// The gradient spread evenly over each window.
static int avgpool_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    return window_gpu_bwd(e, i, n, 0, err);
}

// Mean over each plane.
static int gap_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    return gap_forward_gpu(&e->g, e->dt, n, L->c, L->in_h * L->in_w, gx_out(e, L->src),
                           e->gl[i].out, err);
}

// The gradient spread evenly over each plane.
static int gap_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    int acc;
    void *dx = gx_route(e, L->src, &acc);
    if (!dx) return 0;
    return gap_backward_gpu(&e->g, e->dt, n, L->c, L->in_h * L->in_w, e->gl[i].grad, dx, acc, err);
}

const struct op_gpu op_maxpool_gpu = {.forward = maxpool_gpu_fwd, .backward = maxpool_gpu_bwd};
const struct op_gpu op_avgpool_gpu = {.forward = avgpool_gpu_fwd, .backward = avgpool_gpu_bwd};
const struct op_gpu op_gap_gpu = {.forward = gap_gpu_fwd, .backward = gap_gpu_bwd};
