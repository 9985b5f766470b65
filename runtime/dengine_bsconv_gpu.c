// A dense-engine conv layer on the block-sparse tensor-core kernel
// (runtime/dengine_bsconv.h).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/bsconv_gpu.h"
#include "runtime/dengine_bsconv.h"

struct debs {
    bsconv_gpu *k;
    int kb, cb, pooled, hybrid;
};

// 1 when the kernel's pool epilogue computes the op's max pool (2x2 or 4x4,
// stride = window, no padding, no residual, the plan's pooled size).
static int debs_can_pool(const spconv_desc *d, const bsconv_shape *s) {
    int po, qo, yp, yq;
    if ((d->pool_k != 2 && d->pool_k != 4) || d->pool_stride != d->pool_k || d->pool_pad != 0) return 0;
    bsconv_shape t = *s;
    t.pool = d->pool_k;
    spconv_out_size(d, &po, &qo);
    bsconv_y_size(&t, &yp, &yq);
    return yp == po && yq == qo;
}

// The kernel's shape of conv op i (pool set when the epilogue takes it; a
// hybrid layer, which only the halo kernel runs, fuses a 2x2 pool at most).
static bsconv_shape debs_shape(const deploy_op *op, int n, int residual, int relu, int hybrid) {
    const spconv_desc *d = &op->desc;
    bsconv_shape s = {.n = n, .C = d->C, .H = d->H, .W = d->W, .K = d->K, .R = d->R, .S = d->S,
                      .stride = d->stride, .pad = d->pad, .relu = relu};
    if (!residual && debs_can_pool(d, &s) && !(hybrid && d->pool_k > 2)) s.pool = d->pool_k;
    return s;
}

// The layer's blocks (and remainder) as the kernels' BSR, the indptrs
// narrowed to 32 bits in one allocation.
int debs_bsr(const sparse_layer *sl, bsconv_bsr *w, int32_t **ip, sc_err *err) {
    const sparse_bsr *x = &sl->bsr;
    const int rows = sl->K / x->kb;
    if (x->nblocks > INT32_MAX || x->nrem > INT32_MAX) return sc_fail(err, "%ld blocks, %ld singles", x->nblocks, x->nrem);
    if (!(*ip = malloc(((size_t)rows + 1 + (size_t)sl->K + 1) * sizeof **ip))) return sc_fail(err, "out of memory");
    for (int r = 0; r <= rows; r++) (*ip)[r] = (int32_t)x->indptr[r];
    *w = (bsconv_bsr){.kb = x->kb, .cb = x->cb, .indptr = *ip, .indices = x->indices, .data = x->values};
    if (!x->nrem) return 0;
    int32_t *rp = *ip + rows + 1;
    for (int k = 0; k <= sl->K; k++) rp[k] = (int32_t)x->rem_indptr[k];
    w->rem_indptr = rp, w->rem_indices = x->rem_indices, w->rem_data = x->rem_values;
    return 0;
}

// Packs and uploads layer sl's blocks.
static int debs_upload(const gpu_ctx *g, debs *b, const bsconv_shape *s, const sparse_layer *sl,
                       const float *bias, gpu_dtype dt, sc_err *err) {
    bsconv_bsr w;
    int32_t *ip = NULL;
    SC_TRY(debs_bsr(sl, &w, &ip, err));
    b->k = bsconv_gpu_create(g, s, &w, bias, dt, err);
    free(ip);
    return b->k ? 0 : -1;
}

// Creates the layer's block-sparse path.
debs *debs_create(const gpu_ctx *g, const deploy_plan *p, int i, int n, int cx, int residual, int relu,
                  gpu_dtype dt, sc_err *err) {
    const deploy_op *op = &p->ops[i];
    const sparse_layer *sl = deploy_op_layer(p, op);
    if (sl->is_linear || sl->bsr.kb <= 0 || sl->bsr.cb <= 0) {
        sc_fail(err, "%s: not a BSR conv layer", op->name);
        return NULL;
    }
    if (cx != sl->C) {
        sc_fail(err, "%s: the input stores %d channels, the layer has %d", op->name, cx, sl->C);
        return NULL;
    }
    debs *b = calloc(1, sizeof *b);
    if (!b) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    const bsconv_shape s = debs_shape(op, n, residual, relu, sl->bsr.nrem > 0);
    b->kb = sl->bsr.kb, b->cb = sl->bsr.cb, b->pooled = s.pool > 1, b->hybrid = sl->bsr.nrem > 0;
    if (debs_upload(g, b, &s, sl, op->desc.bias, dt, err)) {
        debs_free(b);
        return NULL;
    }
    return b;
}

// Whether the pool is fused.
int debs_pooled(const debs *b) { return b->pooled; }

// Selects a kernel variant.
int debs_set_variant(const gpu_ctx *g, debs *b, int v, sc_err *err) {
    return bsconv_gpu_set_variant(g, b->k, v, err);
}

// Queues the kernel.
int debs_run(const gpu_ctx *g, const debs *b, const void *x, const void *z, void *y, sc_err *err) {
    return bsconv_gpu_run(g, b->k, x, z, y, err);
}

// The path's name, block and variant.
void debs_describe(const debs *b, char *buf, size_t len) {
    snprintf(buf, len, "bsconv %dx%d%s v%d%s", b->kb, b->cb, b->hybrid ? "+singles" : "", bsconv_gpu_variant(b->k),
             b->pooled ? " +pool" : "");
}

// Frees the kernel.
void debs_free(debs *b) {
    if (!b) return;
    bsconv_gpu_free(b->k);
    free(b);
}
