// The linear layer kind's GPU executor hooks (runtime/ops.h): cuBLAS on a
// per-layer work copy of the weights [dt] with an fp32 work gradient; as
// the net's last layer it writes fp32 logits.
#include "runtime/exec_gpu_impl.h"

// Work copy of the weights [dt] and an fp32 work gradient, (out, in) each.
static int linear_gpu_setup(gx_exec *e, int i, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    if (L->weight < 0) return sc_fail(err, "layer %s has no weights", L->name);
    const size_t cnt = (size_t)L->c * L->in_c * L->in_h * L->in_w;
    SC_TRY(gx_alloc(&G->gwork, cnt * sizeof(float), err));
    SC_TRY(gx_alloc(&G->wwork, cnt * gpu_dtype_size(e->dt), err));
    cudaCheck(err, cudaMemset(G->gwork, 0, cnt * sizeof(float)));
    return 0;
}

// The weight's segment: (out, C, H*W) master, the work copy in the input's
// channels-last order [dt], fp32 work gradient.
static void linear_gpu_weight_seg(gx_exec *e, int i, size_t offset, param_seg *q) {
    const layer *L = &e->nt->layers[i];
    const gx_layer *G = &e->gl[i];
    *q = (param_seg){SEG_WORK, offset, L->c, L->in_c, L->in_h * L->in_w, L->in_c, e->dt,
                     GDT_F32, G->wwork, G->gwork};
}

// Forward, bias included.
static int linear_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    SC_TRY(linear_forward_gpu(&e->g, e->dt, G->odt, n, L->in_c * L->in_h * L->in_w, L->c,
                              gx_out(e, L->src), G->wwork, G->out, err));
    if (L->bias < 0) return 0;
    return bias_forward_gpu(&e->g, G->odt, (size_t)n * L->h * L->w, L->c, gx_param(e, L->bias),
                            G->out, err);
}

// Weight (and bias) gradients, then the input's.
static int linear_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    const int in = L->in_c * L->in_h * L->in_w;
    int acc;
    SC_TRY(linear_backward_filter_gpu(&e->g, e->dt, n, in, L->c, gx_out(e, L->src), G->grad,
                                      (float *)G->gwork, err));
    if (L->bias >= 0)
        SC_TRY(bias_backward_gpu(&e->g, e->dt, (size_t)n * L->h * L->w, L->c, G->grad,
                                 gx_pgrad(e, L->bias), err));
    void *dx = gx_route(e, L->src, &acc);
    if (!dx) return 0;
    return linear_backward_data_gpu(&e->g, e->dt, n, in, L->c, G->grad, G->wwork, dx, acc, err);
}

const struct op_gpu op_linear_gpu = {
    .fp32_head = 1,
    .setup = linear_gpu_setup,
    .weight_seg = linear_gpu_weight_seg,
    .forward = linear_gpu_fwd,
    .backward = linear_gpu_bwd,
};
