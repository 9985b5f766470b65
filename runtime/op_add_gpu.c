// The residual add layer kind's GPU executor hooks (runtime/ops.h); in a
// fused "bn, add, relu" group the BN runs it (runtime/op_bn_gpu.c).
#include "runtime/exec_gpu_impl.h"

// Sum of both inputs.
static int add_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    return add_forward_gpu(&e->g, e->dt, (size_t)n * G->size, gx_out(e, L->srcs[0]),
                           gx_out(e, L->srcs[1]), G->out, 0, err);
}

// The output gradient to both inputs (copied or accumulated).
static int add_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    int acc;
    for (int k = 0; k < 2; k++) {
        void *dx = gx_route(e, L->srcs[k], &acc);
        if (dx) SC_TRY(accumulate_gpu(&e->g, e->dt, (size_t)n * G->size, G->grad, dx, acc, err));
    }
    return 0;
}

const struct op_gpu op_add_gpu = {
    .forward = add_gpu_fwd,
    .backward = add_gpu_bwd,
};
