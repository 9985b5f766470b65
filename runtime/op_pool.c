// The pooling layer kinds: "maxpool k [stride=] [pad=]" (pads never win),
// "avgpool k [stride=] [pad=]" (pads count as zeros, divisor k*k) and "gap"
// (global average: (c, h, w) -> (c, 1, 1)); their parsers, CPU hooks and
// deploy hooks (GPU hooks: runtime/op_pool_gpu.c).
#include "deploy_plan.h"
#include "exec_cpu_impl.h"
#include "kernels/pool.h"

// Window, stride, padding and output shape.
static int pool_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    return op_window(L, dl, 0, lineno, err);
}

// Output (c, 1, 1).
static int gap_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    L->h = L->w = 1;
    return 0;
}

// Pooling dimensions of layer L for a batch of n.
static int pool_dims_of(const layer *L, int n, pool_dims *d) {
    return pool_dims_init(d, n, L->in_c, L->in_h, L->in_w, L->k, L->stride, L->pad);
}

// Valid window.
static int pool_cpu_check(const layer *L, int max_batch, sc_err *err) {
    pool_dims d;
    if (pool_dims_of(L, max_batch, &d)) return sc_fail(err, "layer %s: bad pooling window", L->name);
    return 0;
}

// Max (max = 1) or mean over each window.
static void window_cpu_forward(cpu_exec *e, int i, int n, int max) {
    const layer *L = &e->nt->layers[i];
    pool_dims d;
    pool_dims_of(L, n, &d);
    (max ? maxpool_forward_cpu : avgpool_forward_cpu)(&d, cpu_src(e, L->src), e->act[i]);
}

// The gradient to each window's maximum (max = 1) or spread evenly over it.
static void window_cpu_backward(cpu_exec *e, int i, int n, const float *dy, int max) {
    const layer *L = &e->nt->layers[i];
    float *dx = cpu_grad_target(e, i, 0);
    pool_dims d;
    if (!dx) return;
    pool_dims_of(L, n, &d);
    if (max) maxpool_backward_cpu(&d, cpu_src(e, L->src), dy, dx);
    else avgpool_backward_cpu(&d, dy, dx);
    cpu_grad_done(e, i, 0, (size_t)n * L->in_c * L->in_h * L->in_w);
}

// Max over each window.
static void maxpool_cpu_forward(cpu_exec *e, int i, int n, int train) { window_cpu_forward(e, i, n, 1); }

// The gradient to each window's maximum.
static void maxpool_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    window_cpu_backward(e, i, n, dy, 1);
}

// Mean over each window.
static void avgpool_cpu_forward(cpu_exec *e, int i, int n, int train) { window_cpu_forward(e, i, n, 0); }

// The gradient spread evenly over each window.
static void avgpool_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    window_cpu_backward(e, i, n, dy, 0);
}

// Mean over each plane.
static void gap_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    gap_forward_cpu(n, L->c, L->in_h * L->in_w, cpu_src(e, L->src), e->act[i]);
}

// The gradient spread evenly over each plane.
static void gap_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    float *dx = cpu_grad_target(e, i, 0);
    if (!dx) return;
    gap_backward_cpu(n, L->c, L->in_h * L->in_w, dy, dx);
    cpu_grad_done(e, i, 0, (size_t)n * L->in_c * L->in_h * L->in_w);
}

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_maxpool_gpu, op_avgpool_gpu, op_gap_gpu;
#endif

// One pooling kind: its CPU hooks (CHECK: the window check, NULL for none),
// its deploy hook (a DOP pool op) and its descriptor op_NAME, keyword NAME
// with options OPTS parsed by PARSE.
#define POOL_KIND(NAME, OPTS, PARSE, CHECK, DOP)                                  \
    static int NAME##_deploy(struct plan_builder *b, int i, sc_err *err) {        \
        return deploy_plan_pool(b, i, DOP, err);                                  \
    }                                                                             \
    static const struct op_cpu NAME##_cpu = {                                     \
        .check = CHECK,                                                           \
        .forward = NAME##_cpu_forward,                                            \
        .backward = NAME##_cpu_backward,                                          \
    };                                                                            \
    const op_kind op_##NAME = {                                                   \
        .name = #NAME,                                                            \
        .options = OPTS,                                                          \
        .parse = PARSE,                                                           \
        .cpu = &NAME##_cpu,                                                       \
        .gpu = OP_GPU_HOOKS(op_##NAME##_gpu),                                     \
        .deploy = NAME##_deploy,                                                  \
    };

// A max pool the export did not fuse; an average pool; a global average pool.
POOL_KIND(maxpool, " stride pad name from ", pool_parse, pool_cpu_check, DOP_MAXPOOL)
POOL_KIND(avgpool, " stride pad name from ", pool_parse, pool_cpu_check, DOP_AVGPOOL)
POOL_KIND(gap, " name from ", gap_parse, NULL, DOP_GAP)
