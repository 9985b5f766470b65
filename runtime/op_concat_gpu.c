// The concat layer kind's GPU executor hooks (runtime/ops.h): channel-slice
// copies on the executor's NHWC tensors, viewed as (n*h*w, c, 1).
#include "kernels/concat_gpu.h"
#include "runtime/exec_gpu_impl.h"

// Channels of input k of layer L.
static int concat_gpu_in_c(const net *nt, const layer *L, int k) {
    int c, h, w;
    op_src_shape(nt, L->srcs[k], &c, &h, &w);
    return c;
}

// Each input into its channel slice of the output.
static int concat_gpu_fwd(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    const size_t rows = (size_t)n * L->h * L->w;
    for (int k = 0, off = 0; k < L->nsrc; k++) {
        const int c = concat_gpu_in_c(e->nt, L, k);
        SC_TRY(concat_forward_gpu(&e->g, e->dt, rows, c, 1, L->c, off, gx_out(e, L->srcs[k]),
                                  e->gl[i].out, err));
        off += c;
    }
    return 0;
}

// Each input's gradient (written or accumulated) is its slice of the output's.
static int concat_gpu_bwd(gx_exec *e, gx_plan *p, int i, int n, sc_err *err) {
    const layer *L = &e->nt->layers[i];
    const size_t rows = (size_t)n * L->h * L->w;
    for (int k = 0, off = 0; k < L->nsrc; k++) {
        const int c = concat_gpu_in_c(e->nt, L, k);
        int acc;
        void *dx = gx_route(e, L->srcs[k], &acc);
        if (dx)
            SC_TRY(concat_backward_gpu(&e->g, e->dt, rows, c, 1, L->c, off, e->gl[i].grad, dx,
                                       acc, err));
        off += c;
    }
    return 0;
}

const struct op_gpu op_concat_gpu = {
    .forward = concat_gpu_fwd,
    .backward = concat_gpu_bwd,
};
