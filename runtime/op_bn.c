// The batch-norm layer kind: description "bn [eps=] [momentum=]", per
// channel over batch and space, with running statistics; its parser,
// tensors, CPU hooks and deploy hook (GPU hooks: runtime/op_bn_gpu.c).
#include "deploy_plan.h"
#include "exec_cpu_impl.h"
#include "kernels/batchnorm.h"

// Epsilon and momentum (PyTorch's meaning and defaults).
static int bn_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    SC_TRY(op_kv_float(dl, "eps", 1e-5f, &L->eps, lineno, err));
    return op_kv_float(dl, "momentum", 0.1f, &L->momentum, lineno, err);
}

// Gamma, beta (trainable) and running mean and variance (buffers), (C) each.
static int bn_tensors(op_build *b, int li, const op_line *dl, int lineno, sc_err *err) {
    const ptensor_kind kinds[4] = {PT_GAMMA, PT_BETA, PT_MEAN, PT_VAR};
    const char *names[4] = {"gamma", "beta", "mean", "var"};
    int idx[4];
    for (int i = 0; i < 4; i++)
        if ((idx[i] = op_tensor_add(b, li, names[i], kinds[i], 1,
                                    &op_build_net(b)->layers[li].c, err)) < 0)
            return -1;
    layer *L = &op_build_net(b)->layers[li];
    L->gamma = idx[0], L->beta = idx[1], L->mean = idx[2], L->var = idx[3];
    return 0;
}

// The batch mean and inverse deviation saved for the backward pass.
static int bn_cpu_setup(cpu_exec *e, int i, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    e->save_mean[i] = cpu_alloc((size_t)L->c);
    e->save_invstd[i] = cpu_alloc((size_t)L->c);
    if (!e->save_mean[i] || !e->save_invstd[i]) return sc_fail(err, "out of memory");
    return 0;
}

// Training: batch statistics (running ones updated); inference: running ones.
static void bn_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    const float *x = cpu_src(e, L->src);
    if (train)
        batchnorm_forward_train_cpu(n, L->c, L->h * L->w, x, cpu_param(e, L->gamma),
                                    cpu_param(e, L->beta), L->eps, L->momentum,
                                    cpu_buf(e, L->mean), cpu_buf(e, L->var), e->act[i],
                                    e->save_mean[i], e->save_invstd[i]);
    else
        batchnorm_forward_infer_cpu(n, L->c, L->h * L->w, x, cpu_param(e, L->gamma),
                                    cpu_param(e, L->beta), cpu_buf(e, L->mean),
                                    cpu_buf(e, L->var), L->eps, e->act[i]);
}

// Gamma and beta gradients and the input's (into scratch when the input is
// the network's: the kernel always writes one).
static void bn_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    float *dx = cpu_grad_target(e, i, 0);
    batchnorm_backward_cpu(n, L->c, L->h * L->w, cpu_src(e, L->src), dy, cpu_param(e, L->gamma),
                           e->save_mean[i], e->save_invstd[i], dx ? dx : e->scratch,
                           cpu_grad(e, L->gamma), cpu_grad(e, L->beta));
    if (dx) cpu_grad_done(e, i, 0, (size_t)n * L->in_c * L->in_h * L->in_w);
}

// A BN the export did not fold: a per-channel affine op (+ReLU).
static int bn_deploy(struct plan_builder *b, int i, sc_err *err) {
    return deploy_plan_elementwise(b, i, DOP_AFFINE, err);
}

static const struct op_cpu bn_cpu = {
    .setup = bn_cpu_setup,
    .forward = bn_cpu_forward,
    .backward = bn_cpu_backward,
};

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_bn_gpu;
#endif

const op_kind op_bn = {
    .name = "bn",
    .options = " eps momentum name from ",
    .parse = bn_parse,
    .tensors = bn_tensors,
    .running_stats = 1,
    .cpu = &bn_cpu,
    .gpu = OP_GPU_HOOKS(op_bn_gpu),
    .deploy = bn_deploy,
};
