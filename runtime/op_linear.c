// The linear layer kind: description "linear N|classes [bias=0|1]", fully
// connected on the input flattened in (c, h, w) order; its parser, tensors,
// initialisation, CPU hooks, deploy and export hooks (GPU hooks:
// runtime/op_linear_gpu.c).
#include <math.h>
#include <string.h>

#include "deploy_plan.h"
#include "exec_cpu_impl.h"
#include "kernels/linear.h"
#include "sparse_model.h"

// Output size: a count or "classes"; output shape (N, 1, 1).
static int linear_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    if (dl->npos != 1) return sc_fail(err, "line %d: linear needs an output size", lineno);
    if (!strcmp(dl->pos[0], "classes")) L->c = nt->classes;
    else if (op_parse_int(dl->pos[0], 1, 1 << 20, &L->c))
        return sc_fail(err, "line %d: bad output size (%s)", lineno, dl->pos[0]);
    L->h = L->w = 1;
    return 0;
}

// Weight (out, in) and optional bias (out).
static int linear_tensors(op_build *b, int li, const op_line *dl, int lineno, sc_err *err) {
    const layer *L = &op_build_net(b)->layers[li];
    long long fan = (long long)L->in_c * L->in_h * L->in_w;  // bounded by the net's size limit
    const int dims[2] = {L->c, (int)fan};
    return op_weight_bias(b, li, 2, dims, dl, lineno, err);
}

// PyTorch's default: weights and biases uniform in +-1/sqrt(fan_in).
static float linear_init(const layer *L, const ptensor *p, rng *r) {
    return (2 * rng_uniform(r) - 1) * (1.0f / sqrtf((float)(L->in_c * L->in_h * L->in_w)));
}

// Multiply-accumulates per image.
static double linear_macs(const layer *L) { return (double)L->c * L->in_c * L->in_h * L->in_w; }

// Weights present.
static int linear_cpu_check(const layer *L, int max_batch, sc_err *err) {
    if (L->weight < 0) return sc_fail(err, "layer %s: linear layer without weights", L->name);
    return 0;
}

// Forward with bias.
static void linear_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    linear_forward_cpu(n, L->in_c * L->in_h * L->in_w, L->c, cpu_src(e, L->src),
                       cpu_param(e, L->weight), cpu_param(e, L->bias), e->act[i]);
}

// Weight and bias gradients, then the input's.
static void linear_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    const int in = L->in_c * L->in_h * L->in_w;
    float *dx = cpu_grad_target(e, i, 0);
    linear_backward_filter_cpu(n, in, L->c, cpu_src(e, L->src), dy, cpu_grad(e, L->weight),
                               cpu_grad(e, L->bias));
    if (!dx) return;
    linear_backward_data_cpu(n, in, L->c, dy, cpu_param(e, L->weight), dx);
    cpu_grad_done(e, i, 0, (size_t)n * in);
}

// The export's sparse layer geometry: a (K, C) matrix, R = S = H = W = 1.
static void linear_sparse_geom(const layer *L, sparse_layer *l) {
    l->is_linear = 1;
    l->K = L->c, l->C = L->in_c * L->in_h * L->in_w, l->R = l->S = 1;
    l->stride = 1, l->pad = 0;
    l->H = l->W = 1, l->P = L->h, l->Q = L->w;
}

static const struct op_cpu linear_cpu = {
    .check = linear_cpu_check,
    .forward = linear_cpu_forward,
    .backward = linear_cpu_backward,
};

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_linear_gpu;
#endif

const op_kind op_linear = {
    .name = "linear",
    .options = " bias name from ",
    .parse = linear_parse,
    .tensors = linear_tensors,
    .init = linear_init,
    .macs = linear_macs,
    .cpu = &linear_cpu,
    .gpu = OP_GPU_HOOKS(op_linear_gpu),
    .deploy = deploy_plan_conv,
    .sparse_geom = linear_sparse_geom,
};
