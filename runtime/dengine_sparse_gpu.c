// A dense-engine conv layer on the direct sparse kernel, with layout
// conversions around it (runtime/dengine_sparse.h).
#include <stdlib.h>

#include "kernels/nhwc_ops_gpu.h"
#include "kernels/spconv_gpu.h"
#include "runtime/dengine_sparse.h"

struct desparse {
    const deploy_plan *p;
    int op, n;
    gpu_dtype dt;
    spconv_gpu *k;
    void *xb;            // (n, C, H + 2 ib, W + 2 ib) bordered input, borders zero
    void *yb;            // (n, K, Po + 2 ob, Qo + 2 ob) bordered output
    int po, qo;          // output plane (after a fused pool)
};

// Bytes of a bordered tensor of n images.
static size_t ds_bytes(int n, int c, int h, int w, int b, gpu_dtype dt) {
    return (size_t)n * c * (h + 2 * b) * (w + 2 * b) * gpu_dtype_size(dt);
}

// Uploads the layer and makes the buffers.
static int ds_make(desparse *s, sc_err *err) {
    const deploy_op *op = &s->p->ops[s->op];
    const spconv_desc *d = &op->desc;
    const sparse_layer *sl = deploy_op_layer(s->p, op);
    const int cb = sl->codes != NULL;
    if (s->dt != GDT_F16) return sc_fail(err, "the sparse kernels run fp16 activations only");
    s->k = spconv_gpu_create(d, cb ? SPG_CB4 : SPG_FP16, cb ? sl->codes : NULL, cb ? sl->codebook : NULL,
                             cb ? sl->row_scale : NULL, err);
    if (!s->k) return -1;
    spconv_out_size(d, &s->po, &s->qo);
    const size_t xb = ds_bytes(s->n, d->C, d->H, d->W, d->in_border, s->dt);
    const size_t yb = ds_bytes(s->n, d->K, s->po, s->qo, d->out_border, s->dt);
    cudaCheck(err, cudaMalloc(&s->xb, xb));
    cudaCheck(err, cudaMemset(s->xb, 0, xb));
    cudaCheck(err, cudaMalloc(&s->yb, yb));
    cudaCheck(err, cudaMemset(s->yb, 0, yb));
    return 0;
}

// Creates the layer's sparse path.
desparse *desparse_create(const deploy_plan *p, int i, int n, gpu_dtype dt, sc_err *err) {
    desparse *s = calloc(1, sizeof *s);
    if (!s) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    s->p = p, s->op = i, s->n = n, s->dt = dt;
    if (ds_make(s, err)) {
        desparse_free(s);
        return NULL;
    }
    return s;
}

// Queues the input conversion.
static int ds_in(const gpu_ctx *g, desparse *s, const void *x, int cx, sc_err *err) {
    const spconv_desc *d = &s->p->ops[s->op].desc;
    return nhwc_to_bordered_gpu(g, s->dt, s->n, d->H, d->W, d->C, cx, x, d->in_border, s->xb, err);
}

// Queues conversion in, the kernel, conversion out.
int desparse_run(const gpu_ctx *g, desparse *s, const void *x, int cx, const void *z, int relu,
                 void *y, sc_err *err) {
    const spconv_desc *d = &s->p->ops[s->op].desc;
    SC_TRY(ds_in(g, s, x, cx, err));
    SC_TRY(spconv_gpu_forward(s->k, s->n, s->xb, s->yb, g->stream, err));
    return bordered_to_nhwc_gpu(g, s->dt, s->n, s->po, s->qo, d->K, s->yb, d->out_border, z, relu, y, err);
}

// Converts x and tunes the kernel on it.
int desparse_tune(const gpu_ctx *g, desparse *s, const void *x, int cx, sc_err *err) {
    SC_TRY(ds_in(g, s, x, cx, err));
    return spconv_gpu_tune(s->k, s->n, s->xb, s->yb, g->stream, NULL, err);
}

// The kernel variant.
void desparse_describe(const desparse *s, char *buf, size_t len) { spconv_gpu_describe(s->k, buf, len); }

// Frees the kernel and the buffers.
void desparse_free(desparse *s) {
    if (!s) return;
    spconv_gpu_free(s->k);
    cudaFree(s->xb), cudaFree(s->yb);
    free(s);
}
