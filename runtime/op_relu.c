// The ReLU layer kind: description "relu", max(x, 0); its CPU hooks and
// deploy hook (GPU hooks: runtime/op_relu_gpu.c).
#include "deploy_plan.h"
#include "exec_cpu_impl.h"
#include "kernels/activation.h"

// No positionals; the output has the input's shape.
static int relu_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    return 0;
}

// max(x, 0).
static void relu_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    relu_forward_cpu((size_t)n * cpu_layer_size(L), cpu_src(e, L->src), e->act[i]);
}

// Passes the gradient where the output is positive (reads only the output).
static void relu_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    const size_t nx = (size_t)n * L->in_c * L->in_h * L->in_w;
    float *dx = cpu_grad_target(e, i, 0);
    if (!dx) return;
    relu_backward_cpu(nx, e->act[i], dy, dx);
    cpu_grad_done(e, i, 0, nx);
}

// A ReLU the export did not fuse: an op of its own.
static int relu_deploy(struct plan_builder *b, int i, sc_err *err) {
    return deploy_plan_elementwise(b, i, DOP_RELU, err);
}

static const struct op_cpu relu_cpu = {
    .inplace = 1,
    .forward = relu_cpu_forward,
    .backward = relu_cpu_backward,
};

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_relu_gpu;
#endif

const op_kind op_relu = {
    .name = "relu",
    .options = " name from ",
    .parse = relu_parse,
    .cpu = &relu_cpu,
    .gpu = OP_GPU_HOOKS(op_relu_gpu),
    .deploy = relu_deploy,
};
