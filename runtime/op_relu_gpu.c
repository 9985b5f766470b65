// The ReLU layer kind's GPU executor hooks (runtime/ops.h); in a fused BN
// group the BN runs it (runtime/op_bn_gpu.c).
#include "runtime/exec_gpu_impl.h"

// max(x, 0).
static int relu_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    gx_layer *G = &e->gl[i];
    return relu_forward_gpu(&e->g, e->dt, (size_t)n * G->size, gx_out(e, e->nt->layers[i].src),
                            G->out, err);
}

// Passes the gradient where the output is positive.
static int relu_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    gx_layer *G = &e->gl[i];
    int acc;
    void *dx = gx_route(e, e->nt->layers[i].src, &acc);
    if (!dx) return 0;
    return relu_backward_gpu(&e->g, e->dt, (size_t)n * G->size, G->out, G->grad, dx, acc, err);
}

const struct op_gpu op_relu_gpu = {
    .forward = relu_gpu_fwd,
    .backward = relu_gpu_bwd,
};
