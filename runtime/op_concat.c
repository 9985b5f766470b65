// The concat layer kind: description "concat NAME [NAME ...]" joins the
// channels of its input (the previous layer, or from=) and of the earlier
// layers named ("input" for the network's), in that order, as DenseNet does
// (G. Huang, Z. Liu, L. van der Maaten, K. Q. Weinberger, "Densely Connected
// Convolutional Networks", CVPR 2017); all must share height and width. Its
// parser, CPU and deploy hooks (GPU executor hooks: runtime/op_concat_gpu.c).
#include "deploy_plan.h"
#include "exec_cpu_impl.h"
#include "kernels/concat.h"

// The named inputs after the first; same height and width; channels summed.
static int concat_parse(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err) {
    if (dl->npos < 1)
        return sc_fail(err, "line %d: concat needs the names of the layers to join", lineno);
    for (int k = 0; k < dl->npos; k++) {
        const int s = op_layer_find(nt, dl->pos[k]);
        if (s == -2) return sc_fail(err, "line %d: concat: no layer called %s", lineno, dl->pos[k]);
        int c, h, w;
        op_src_shape(nt, s, &c, &h, &w);
        if (h != L->in_h || w != L->in_w)
            return sc_fail(err, "line %d: concat: %s is %dx%d, the input %dx%d", lineno,
                           dl->pos[k], h, w, L->in_h, L->in_w);
        L->srcs[L->nsrc++] = s;
        L->c += c;
    }
    return 0;
}

// Channels of input k of layer L.
static int concat_in_c(const net *nt, const layer *L, int k) {
    int c, h, w;
    op_src_shape(nt, L->srcs[k], &c, &h, &w);
    return c;
}

// Each input into its channel slice of the output.
static void concat_cpu_forward(cpu_exec *e, int i, int n, int train) {
    const layer *L = &e->nt->layers[i];
    for (int k = 0, off = 0; k < L->nsrc; k++) {
        const int c = concat_in_c(e->nt, L, k);
        concat_forward_cpu((size_t)n, c, (size_t)L->h * L->w, L->c, off, cpu_src(e, L->srcs[k]),
                           e->act[i]);
        off += c;
    }
}

// Each input's gradient is its channel slice of the output's.
static void concat_cpu_backward(cpu_exec *e, int i, int n, const float *dy) {
    const layer *L = &e->nt->layers[i];
    const size_t hw = (size_t)L->h * L->w;
    for (int k = 0, off = 0; k < L->nsrc; k++) {
        const int c = concat_in_c(e->nt, L, k);
        float *dx = cpu_grad_target(e, i, k);
        if (dx) {
            concat_backward_cpu((size_t)n, c, hw, L->c, off, dy, dx, 0);
            cpu_grad_done(e, i, k, (size_t)n * c * hw);
        }
        off += c;
    }
}

static const struct op_cpu concat_cpu = {
    .forward = concat_cpu_forward,
    .backward = concat_cpu_backward,
};

#ifdef SC_HAVE_CUDA
extern const struct op_gpu op_concat_gpu;
#endif

// Deploy hook: one op joining the inputs.
static int concat_deploy(struct plan_builder *b, int i, sc_err *err) {
    return deploy_plan_concat(b, i, err);
}

const op_kind op_concat = {
    .name = "concat",
    .options = " name from ",
    .parse = concat_parse,
    .cpu = &concat_cpu,
    .gpu = OP_GPU_HOOKS(op_concat_gpu),
    .deploy = concat_deploy,
};
