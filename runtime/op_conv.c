// The conv layer kind: description "conv K k [stride=] [pad=] [bias=0|1]",
// a k x k convolution to K channels; its parser, tensors, initialisation,
// CPU hooks, deploy and export hooks (GPU hooks: runtime/op_conv_gpu.c).
#include <math.h>

#include "deploy_plan.h"
#include "exec_cpu_impl.h"
#include "kernels/conv2d.h"
#include "sparse_model.h"

// Kernel size, stride, padding and output shape.
static int conv_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    return op_window(L, dl, 1, lineno, err);
}

// Weight (K, C, R, S) and optional bias (K).
static int conv_tensors(op_build *b, int li, const op_line *dl, int lineno, sc_err *err) {
    const layer *L = &op_build_net(b)->layers[li];
    const int dims[4] = {L->c, L->in_c, L->k, L->k};
    return op_weight_bias(b, li, 4, dims, dl, lineno, err);
}

// Kaiming normal (fan_out) weights; biases uniform in +-1/sqrt(fan_in).
static float conv_init(const layer *L, const ptensor *p, rng *r) {
    if (p->kind == PT_WEIGHT) return rng_normal(r) * sqrtf(2.0f / (float)(L->c * L->k * L->k));
    return (2 * rng_uniform(r) - 1) * (1.0f / sqrtf((float)(L->in_c * L->k * L->k)));
}

// Multiply-accumulates per image.
static double conv_macs(const layer *L) {
    return (double)L->c * L->h * L->w * L->in_c * L->k * L->k;
}

// Convolution dimensions of layer L for a batch of n.
static int conv_dims(const layer *L, int n, conv2d_dims *d) {
    return conv2d_dims_init(d, n, L->in_c, L->in_h, L->in_w, L->c, L->k, L->k, L->stride,
                            L->pad);
}

// Valid geometry and weights.
static int conv_cpu_check(const layer *L, int max_batch, sc_err *err) {
    conv2d_dims d;
    if (conv_dims(L, max_batch, &d) || L->weight < 0)
        return sc_fail(err, "layer %s: bad convolution", L->name);
    return 0;
}

// Scratch floats of the CPU convolution.
static size_t conv_cpu_workspace(const layer *L, int max_batch) {
    conv2d_dims d;
    return conv_dims(L, max_batch, &d) ? 0 : conv2d_cpu_workspace(&d);
}

// Forward with bias.
static void conv_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    conv2d_dims d;
    conv_dims(L, n, &d);
    conv2d_forward_cpu(&d, cpu_src(e, L->src), cpu_param(e, L->weight), cpu_param(e, L->bias),
                       e->act[i], e->work);
}

// Weight and bias gradients, then the input's.
static void conv_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    float *dx = cpu_grad_target(e, i, 0);
    conv2d_dims d;
    conv_dims(L, n, &d);
    conv2d_backward_filter_cpu(&d, cpu_src(e, L->src), dy, cpu_grad(e, L->weight),
                               cpu_grad(e, L->bias), e->work);
    if (!dx) return;
    conv2d_backward_data_cpu(&d, dy, cpu_param(e, L->weight), dx, e->work);
    cpu_grad_done(e, i, 0, (size_t)n * L->in_c * L->in_h * L->in_w);
}

// The export's sparse layer geometry: a (K, C*R*S) matrix over the padded input.
static void conv_sparse_geom(const layer *L, sparse_layer *l) {
    l->is_linear = 0;
    l->K = L->c, l->C = L->in_c, l->R = l->S = L->k;
    l->stride = L->stride, l->pad = L->pad;
    l->H = L->in_h, l->W = L->in_w, l->P = L->h, l->Q = L->w;
}

static const struct op_cpu conv_cpu = {
    .check = conv_cpu_check,
    .workspace = conv_cpu_workspace,
    .forward = conv_cpu_forward,
    .backward = conv_cpu_backward,
};

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_conv_gpu;
#endif

const op_kind op_conv = {
    .name = "conv",
    .options = " stride pad bias name from ",
    .parse = conv_parse,
    .tensors = conv_tensors,
    .init = conv_init,
    .macs = conv_macs,
    .cpu = &conv_cpu,
    .gpu = OP_GPU_HOOKS(op_conv_gpu),
    .deploy = deploy_plan_conv,
    .sparse_geom = conv_sparse_geom,
};
