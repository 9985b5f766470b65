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

// Max over each window.
static void maxpool_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    pool_dims d;
    pool_dims_of(L, n, &d);
    maxpool_forward_cpu(&d, cpu_src(e, L->src), e->act[i]);
}

// The gradient to each window's maximum.
static void maxpool_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    float *dx = cpu_grad_target(e, i, 0);
    pool_dims d;
    if (!dx) return;
    pool_dims_of(L, n, &d);
    maxpool_backward_cpu(&d, cpu_src(e, L->src), dy, dx);
    cpu_grad_done(e, i, 0, (size_t)n * L->in_c * L->in_h * L->in_w);
}

// Mean over each window.
static void avgpool_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    pool_dims d;
    pool_dims_of(L, n, &d);
    avgpool_forward_cpu(&d, cpu_src(e, L->src), e->act[i]);
}

// The gradient spread evenly over each window.
static void avgpool_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    float *dx = cpu_grad_target(e, i, 0);
    pool_dims d;
    if (!dx) return;
    pool_dims_of(L, n, &d);
    avgpool_backward_cpu(&d, dy, dx);
    cpu_grad_done(e, i, 0, (size_t)n * L->in_c * L->in_h * L->in_w);
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

// A max pool the export did not fuse.
static int maxpool_deploy(struct plan_builder *b, int i, sc_err *err) {
    return deploy_plan_pool(b, i, DOP_MAXPOOL, err);
}

// An average pool.
static int avgpool_deploy(struct plan_builder *b, int i, sc_err *err) {
    return deploy_plan_pool(b, i, DOP_AVGPOOL, err);
}

// A global average pool.
static int gap_deploy(struct plan_builder *b, int i, sc_err *err) {
    return deploy_plan_pool(b, i, DOP_GAP, err);
}

static const struct op_cpu maxpool_cpu = {
    .check = pool_cpu_check,
    .forward = maxpool_cpu_forward,
    .backward = maxpool_cpu_backward,
};

static const struct op_cpu avgpool_cpu = {
    .check = pool_cpu_check,
    .forward = avgpool_cpu_forward,
    .backward = avgpool_cpu_backward,
};

static const struct op_cpu gap_cpu = {
    .forward = gap_cpu_forward,
    .backward = gap_cpu_backward,
};

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_maxpool_gpu, op_avgpool_gpu, op_gap_gpu;
#endif

const op_kind op_maxpool = {
    .name = "maxpool",
    .options = " stride pad name from ",
    .parse = pool_parse,
    .cpu = &maxpool_cpu,
    .gpu = OP_GPU_HOOKS(op_maxpool_gpu),
    .deploy = maxpool_deploy,
};

const op_kind op_avgpool = {
    .name = "avgpool",
    .options = " stride pad name from ",
    .parse = pool_parse,
    .cpu = &avgpool_cpu,
    .gpu = OP_GPU_HOOKS(op_avgpool_gpu),
    .deploy = avgpool_deploy,
};

const op_kind op_gap = {
    .name = "gap",
    .options = " name from ",
    .parse = gap_parse,
    .cpu = &gap_cpu,
    .gpu = OP_GPU_HOOKS(op_gap_gpu),
    .deploy = gap_deploy,
};
