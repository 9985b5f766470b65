// The residual add layer kind: description "add NAME", the elementwise sum
// of its input and the output of the earlier layer NAME ("input" for the
// network's), of the same shape; its parser, CPU hooks and deploy hook (GPU
// hooks: runtime/op_add_gpu.c).
#include <string.h>

#include "deploy_plan.h"
#include "exec_cpu_impl.h"
#include "kernels/activation.h"

// The second input by name; shapes must agree.
static int add_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    if (dl->npos != 1) return sc_fail(err, "line %d: add needs the name of a layer", lineno);
    const int s2 = op_layer_find(nt, dl->pos[0]);
    if (s2 == -2) return sc_fail(err, "line %d: add: no layer called %s", lineno, dl->pos[0]);
    L->srcs[L->nsrc++] = s2;
    int c2, h2, w2;
    op_src_shape(nt, s2, &c2, &h2, &w2);
    if (c2 != L->in_c || h2 != L->in_h || w2 != L->in_w)
        return sc_fail(err, "line %d: add: shapes differ (%dx%dx%d vs %dx%dx%d)", lineno,
                       L->in_c, L->in_h, L->in_w, c2, h2, w2);
    return 0;
}

// Sum of both inputs.
static void add_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    add_forward_cpu((size_t)n * cpu_layer_size(L), cpu_src(e, L->srcs[0]),
                    cpu_src(e, L->srcs[1]), e->act[i]);
}

// The output gradient flows unchanged to both inputs.
static void add_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    const size_t nx = (size_t)n * L->in_c * L->in_h * L->in_w;
    for (int k = 0; k < 2; k++) {
        float *t = cpu_grad_target(e, i, k);
        if (!t) continue;
        if (e->gfirst[i][k]) memcpy(t, dy, nx * sizeof *t);
        else accumulate_cpu(nx, dy, e->slots[e->gslot[L->srcs[k]]]);
    }
}

// A residual add (+ReLU when one alone follows).
static int add_deploy(struct plan_builder *b, int i, sc_err *err) {
    return deploy_plan_elementwise(b, i, DOP_ADD, err);
}

static const struct op_cpu add_cpu = {
    .forward = add_cpu_forward,
    .backward = add_cpu_backward,
};

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_add_gpu;
#endif

const op_kind op_add = {
    .name = "add",
    .options = " name from ",
    .parse = add_parse,
    .cpu = &add_cpu,
    .gpu = OP_GPU_HOOKS(op_add_gpu),
    .deploy = add_deploy,
};
