// The conv layer kind's GPU executor hooks (runtime/ops.h): cuDNN
// convolutions (plans timed once per batch size, shared between layers of
// equal shape) on a per-layer work copy of the weights in KRSC [dt], the
// stem's input channels padded as the executor stores the input.
#include "runtime/exec_gpu_impl.h"

// Work copy of the weights and its gradient, both [dt], (K, R, S, wc).
static int conv_gpu_setup(gx_exec *e, int i, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    if (L->weight < 0) return sc_fail(err, "layer %s has no weights", L->name);
    const size_t es = gpu_dtype_size(e->dt);
    G->wc = L->src < 0 ? e->cpad : L->in_c;
    const size_t cnt = (size_t)L->c * L->k * L->k * G->wc;
    SC_TRY(gx_alloc(&G->gwork, cnt * es, err));
    SC_TRY(gx_alloc(&G->wwork, cnt * es, err));
    cudaCheck(err, cudaMemset(G->gwork, 0, cnt * es));
    return 0;
}

// The weight's segment: (K, C, R*S) master, (K, R*S, wc) work copy [dt].
static void conv_gpu_weight_seg(gx_exec *e, int i, size_t offset, param_seg *q) {
    const layer *L = &e->nt->layers[i];
    const gx_layer *G = &e->gl[i];
    *q = (param_seg){SEG_WORK, offset, L->c, L->in_c, L->k * L->k, G->wc, e->dt, e->dt,
                     G->wwork, G->gwork};
}

// Conv plan of layer i for n images, shared with an earlier layer of equal shape.
static int conv_gpu_plan(gx_exec *e, gx_plan *p, int i, size_t *ws, sc_err *err) {
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

// Forward, bias included.
static int conv_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    SC_TRY(conv_gpu_forward(&e->g, p->conv[i], gx_out(e, L->src), G->wwork, G->out, e->ws, err));
    if (L->bias < 0) return 0;
    return bias_forward_gpu(&e->g, G->odt, (size_t)n * L->h * L->w, L->c, gx_param(e, L->bias),
                            G->out, err);
}

// Weight (and bias) gradients, then the input's.
static int conv_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    gx_layer *G = &e->gl[i];
    int acc;
    SC_TRY(conv_gpu_backward_filter(&e->g, p->conv[i], gx_out(e, L->src), G->grad, G->gwork,
                                    e->ws, err));
    if (L->bias >= 0)
        SC_TRY(bias_backward_gpu(&e->g, e->dt, (size_t)n * L->h * L->w, L->c, G->grad,
                                 gx_pgrad(e, L->bias), err));
    void *dx = gx_route(e, L->src, &acc);
    if (!dx) return 0;
    return conv_gpu_backward_data(&e->g, p->conv[i], G->grad, G->wwork, dx, acc, e->ws, err);
}

const struct op_gpu op_conv_gpu = {
    .reads_padded_input = 1,
    .setup = conv_gpu_setup,
    .weight_seg = conv_gpu_weight_seg,
    .plan = conv_gpu_plan,
    .forward = conv_gpu_fwd,
    .backward = conv_gpu_bwd,
};
