// Builds the deploy plan (runtime/deploy_plan.h) from an exported model: one
// pass over the net's layers in execution order turns each conv/linear and
// what the export fused into it into one op, and every other layer into a
// small op; then borders are sized from the convolutions' paddings, linear
// layers that would read a bordered tensor get a flattening copy, and each
// conv's descriptor gets borders and (when needed) recomputed offsets.
#include "runtime/deploy_plan.h"
#include "runtime/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct plan_builder {
    const sparse_model *m;
    const net *nt;
    deploy_plan *p;
    int *readers;    // per net layer: how many layers read its output
    int *tensor_of;  // per net layer: tensor holding its output, -1 when none
    int *sl_of;      // per net layer: index into m->layers, -1 when none
    uint8_t *covered;  // per net layer: fused into an earlier op
    int cap_t, cap_o;
} plan_builder;

// --- growing arrays -----------------------------------------------------------

// Appends a tensor for net layer `layer`; returns its index or -1 (out of memory).
static int pb_tensor_add(plan_builder *b, int c, int h, int w, int layer) {
    deploy_plan *p = b->p;
    if (p->ntensors == b->cap_t) {
        int cap = b->cap_t ? 2 * b->cap_t : 32;
        deploy_tensor *t = realloc(p->tensors, (size_t)cap * sizeof *t);
        if (!t) return -1;
        p->tensors = t, b->cap_t = cap;
    }
    p->tensors[p->ntensors] = (deploy_tensor){.c = c, .h = h, .w = w, .layer = layer};
    return p->ntensors++;
}

// Appends a zeroed op of `kind` named after net layer i; NULL when out of memory.
static deploy_op *pb_op_add(plan_builder *b, deploy_op_kind kind, int i) {
    deploy_plan *p = b->p;
    if (p->nops == b->cap_o) {
        int cap = b->cap_o ? 2 * b->cap_o : 32;
        deploy_op *o = realloc(p->ops, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        p->ops = o, b->cap_o = cap;
    }
    deploy_op *op = &p->ops[p->nops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->in = op->in2 = op->out = op->sl = -1;
    op->last = i;
    snprintf(op->name, sizeof op->name, "%s", b->nt->layers[i].name);
    return op;
}

// --- graph helpers ------------------------------------------------------------

// The only layer reading net layer i's output, or -1 when it has none or several.
static int pb_sole_reader(const plan_builder *b, int i) {
    if (b->readers[i] != 1) return -1;
    for (int j = i + 1; j < b->nt->nlayers; j++) {
        if (layer_reads(&b->nt->layers[j], i)) return j;
    }
    return -1;
}

// Tensor holding the output of net layer src (-1: the input); -1 with err
// filled when that output was fused away.
static int pb_src(plan_builder *b, int src, int reader, sc_err *err) {
    int t = src < 0 ? b->p->input : b->tensor_of[src];
    if (t < 0)
        sc_fail(err, "layer %s reads %s, whose output the export fused away",
                b->nt->layers[reader].name, b->nt->layers[src].name);
    return t;
}

// Makes a tensor for net layer i's output and records it; -1 when out of memory.
static int pb_out(plan_builder *b, int i, sc_err *err) {
    const layer *L = &b->nt->layers[i];
    int t = pb_tensor_add(b, L->c, L->h, L->w, i);
    if (t < 0) return sc_fail(err, "out of memory");
    b->tensor_of[i] = t;
    return t;
}

// Counts readers of every layer and maps conv/linear layers to sparse layers.
static int pb_index(plan_builder *b, sc_err *err) {
    const net *nt = b->nt;
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        for (int k = 0; k < L->nsrc; k++) {
            if (L->srcs[k] >= i) return sc_fail(err, "layer %s reads a later layer", L->name);
            if (L->srcs[k] >= 0) b->readers[L->srcs[k]]++;
        }
        b->tensor_of[i] = b->sl_of[i] = -1;
    }
    for (int s = 0; s < b->m->nlayers; s++) {
        int li = b->m->layers[s].layer;
        if (li < 0 || li >= nt->nlayers || !op_of(nt->layers[li].kind)->sparse_geom)
            return sc_fail(err, "export layer %d names net layer %d, not a conv or linear", s, li);
        if (b->sl_of[li] >= 0) return sc_fail(err, "layer %s is exported twice", nt->layers[li].name);
        b->sl_of[li] = s;
    }
    return 0;
}

// --- conv and linear ----------------------------------------------------------

// Checks that sparse layer sl matches net layer L's geometry.
static int pb_conv_check(const layer *L, const sparse_layer *sl, sc_err *err) {
    int lin = L->kind == LK_LINEAR;
    int ok = sl->K == L->c && sl->is_linear == lin && sl->nnz_row >= 0 &&
             sl->nnz <= (long)sl->K * sl->nnz_row && sl->indices && sl->offsets && sl->values;
    if (lin)
        ok = ok && sl->C == L->in_c * L->in_h * L->in_w && sl->R == 1 && sl->S == 1 &&
             sl->H == 1 && sl->W == 1 && sl->pad == 0 && sl->stride == 1;
    else
        ok = ok && sl->C == L->in_c && sl->R == L->k && sl->S == L->k && sl->stride == L->stride &&
             sl->pad == L->pad && sl->H == L->in_h && sl->W == L->in_w && sl->P == L->h &&
             sl->Q == L->w;
    if (!ok)
        return sc_fail(err, "layer %s: the exported weights (%dx%dx%dx%d, input %dx%d) do not "
                       "match the net", L->name, sl->K, sl->C, sl->R, sl->S, sl->H, sl->W);
    return 0;
}

// Checks that layer j exists, is of `kind` and is the sole reader of `last`.
static int pb_fuse_check(const plan_builder *b, int last, int j, layer_kind kind,
                         const char *what, sc_err *err) {
    if (j < 0 || b->nt->layers[j].kind != kind || pb_sole_reader(b, last) != j)
        return sc_fail(err, "layer %s: the export fused a %s that does not follow it alone",
                       b->nt->layers[last].name, what);
    return 0;
}

// Records the fused BN, ReLU and max pool after conv layer i; *last gets the
// net layer whose output the op produces.
static int pb_conv_fuse(plan_builder *b, int i, const sparse_layer *sl, deploy_op *op,
                        int *last, sc_err *err) {
    *last = i;
    if (sl->bn >= 0) {
        SC_TRY(pb_fuse_check(b, i, sl->bn, LK_BN, "batch norm", err));
        *last = sl->bn;
        b->covered[*last] = 1;
    }
    if (sl->relu) {
        int j = pb_sole_reader(b, *last);
        SC_TRY(pb_fuse_check(b, *last, j, LK_RELU, "ReLU", err));
        *last = j;
        b->covered[j] = 1;
    }
    if (sl->pool_k > 0) {
        int j = pb_sole_reader(b, *last);
        SC_TRY(pb_fuse_check(b, *last, j, LK_MAXPOOL, "max pool", err));
        const layer *P = &b->nt->layers[j];
        if (P->k != sl->pool_k || P->stride != sl->pool_stride || P->pad != sl->pool_pad)
            return sc_fail(err, "layer %s: fused pool %d/%d/%d, the net has %d/%d/%d", P->name,
                           sl->pool_k, sl->pool_stride, sl->pool_pad, P->k, P->stride, P->pad);
        *last = j;
        b->covered[j] = 1;
    }
    op->desc.relu = sl->relu;
    op->desc.pool_k = sl->pool_k, op->desc.pool_stride = sl->pool_stride;
    op->desc.pool_pad = sl->pool_pad;
    return 0;
}

// Adds the op of conv/linear layer i (with what the export fused into it).
int deploy_plan_conv(plan_builder *b, int i, sc_err *err) {
    const layer *L = &b->nt->layers[i];
    if (b->sl_of[i] < 0) return sc_fail(err, "the export lacks layer %s", L->name);
    const sparse_layer *sl = &b->m->layers[b->sl_of[i]];
    SC_TRY(pb_conv_check(L, sl, err));
    int in = pb_src(b, L->src, i, err), last;
    if (in < 0) return -1;
    deploy_op *op = pb_op_add(b, DOP_CONV, i);
    if (!op) return sc_fail(err, "out of memory");
    op->sl = b->sl_of[i];
    op->in = in;
    SC_TRY(pb_conv_fuse(b, i, sl, op, &last, err));
    spconv_desc *d = &op->desc;
    d->K = sl->K, d->C = sl->C, d->R = sl->R, d->S = sl->S;
    d->stride = sl->stride, d->pad = sl->pad;
    d->H = sl->H, d->W = sl->W, d->P = sl->P, d->Q = sl->Q;
    d->nnz_row = sl->nnz_row, d->values = sl->values, d->bias = sl->bias;
    int po, qo;
    spconv_out_size(d, &po, &qo);
    const layer *O = &b->nt->layers[last];
    if (po != O->h || qo != O->w)
        return sc_fail(err, "layer %s: output %dx%d, the net has %dx%d", O->name, po, qo, O->h, O->w);
    op->last = last;
    op->out = pb_out(b, last, err);
    return op->out < 0 ? -1 : 0;
}

// --- the other layers -----------------------------------------------------------

// Adds an elementwise op (add, relu, unfolded BN), fusing a ReLU that
// alone reads an add or a BN.
int deploy_plan_elementwise(plan_builder *b, int i, deploy_op_kind kind, sc_err *err) {
    const layer *L = &b->nt->layers[i];
    deploy_op *op = pb_op_add(b, kind, i);
    if (!op) return sc_fail(err, "out of memory");
    if ((op->in = pb_src(b, L->src, i, err)) < 0) return -1;
    if (kind == DOP_ADD && (op->in2 = pb_src(b, L->srcs[1], i, err)) < 0) return -1;
    if (kind == DOP_AFFINE) {
        op->scale = malloc((size_t)L->c * sizeof *op->scale);
        op->shift = malloc((size_t)L->c * sizeof *op->shift);
        if (!op->scale || !op->shift) return sc_fail(err, "out of memory");
        const float *g = net_tensor_data(b->nt, L->gamma), *be = net_tensor_data(b->nt, L->beta);
        const float *mu = net_tensor_data(b->nt, L->mean), *var = net_tensor_data(b->nt, L->var);
        for (int c = 0; c < L->c; c++) {
            double s = g[c] / sqrt((double)var[c] + L->eps);
            op->scale[c] = (float)s, op->shift[c] = (float)(be[c] - mu[c] * s);
        }
    }
    int j = pb_sole_reader(b, i);
    if (kind != DOP_RELU && j >= 0 && b->nt->layers[j].kind == LK_RELU) {
        op->relu = 1;
        op->last = j;
        b->covered[j] = 1;
    }
    op->out = pb_out(b, op->last, err);
    return op->out < 0 ? -1 : 0;
}

// Adds a pooling op (max, average, global average).
int deploy_plan_pool(plan_builder *b, int i, deploy_op_kind kind, sc_err *err) {
    const layer *L = &b->nt->layers[i];
    deploy_op *op = pb_op_add(b, kind, i);
    if (!op) return sc_fail(err, "out of memory");
    if ((op->in = pb_src(b, L->src, i, err)) < 0) return -1;
    op->k = L->k, op->stride = L->stride, op->pad = L->pad;
    op->out = pb_out(b, i, err);
    return op->out < 0 ? -1 : 0;
}

// Adds the DOP_CONCAT op of concat layer i: its inputs in order into one tensor.
int deploy_plan_concat(plan_builder *b, int i, sc_err *err) {
    const layer *L = &b->nt->layers[i];
    deploy_op *op = pb_op_add(b, DOP_CONCAT, i);
    if (!op) return sc_fail(err, "out of memory");
    op->nin = L->nsrc;
    for (int k = 0; k < L->nsrc; k++)
        if ((op->ins[k] = pb_src(b, L->srcs[k], i, err)) < 0) return -1;
    op->in = op->ins[0];
    op->out = pb_out(b, i, err);
    return op->out < 0 ? -1 : 0;
}

// The tensors op reads into ins; their number.
int deploy_op_inputs(const deploy_op *op, int *ins) {
    if (op->kind == DOP_CONCAT) {
        memcpy(ins, op->ins, (size_t)op->nin * sizeof *ins);
        return op->nin;
    }
    ins[0] = op->in;
    if (op->in2 >= 0) ins[1] = op->in2;
    return op->in2 >= 0 ? 2 : 1;
}

// Adds the ops of every layer not already covered by a fused op, each
// through its kind's deploy hook.
static int pb_layers(plan_builder *b, sc_err *err) {
    const net *nt = b->nt;
    for (int i = 0; i < nt->nlayers; i++) {
        if (b->covered[i]) continue;
        const op_kind *op = op_of(nt->layers[i].kind);
        if (!op->deploy)
            return sc_fail(err, "layer %s: deploy cannot run a %s layer", nt->layers[i].name,
                           op->name);
        SC_TRY(op->deploy(b, i, err));
    }
    return 0;
}

// --- borders, flattening, descriptors -------------------------------------------

// Sizes every tensor's border: the largest padding of the convolutions reading it.
static void pb_borders(deploy_plan *p) {
    for (int o = 0; o < p->nops; o++) {
        const deploy_op *op = &p->ops[o];
        deploy_tensor *t = &p->tensors[op->in];
        if (op->kind == DOP_CONV && op->desc.pad > t->border) t->border = op->desc.pad;
    }
}

// Puts a border-stripping copy in front of every linear layer whose input
// has a border (one copy per tensor, shared by its linear readers).
static int pb_flatten(plan_builder *b, sc_err *err) {
    deploy_plan *p = b->p;
    int ncopy = 0;
    for (int o = 0; o < p->nops; o++)
        ncopy += p->ops[o].kind == DOP_CONV && deploy_op_layer(p, &p->ops[o])->is_linear &&
                 p->tensors[p->ops[o].in].border > 0;
    if (!ncopy) return 0;
    deploy_op *ops = calloc((size_t)(p->nops + ncopy), sizeof *ops);
    int *copy_of = malloc((size_t)p->ntensors * sizeof *copy_of), n = 0;
    if (!ops || !copy_of) return free(ops), free(copy_of), sc_fail(err, "out of memory");
    for (int t = 0; t < p->ntensors; t++) copy_of[t] = -1;
    for (int o = 0; o < p->nops; o++) {
        deploy_op op = p->ops[o];
        const deploy_tensor src = p->tensors[op.in];
        if (op.kind == DOP_CONV && deploy_op_layer(p, &op)->is_linear && src.border > 0) {
            if (copy_of[op.in] < 0) {
                int t = pb_tensor_add(b, src.c, src.h, src.w, -2);
                if (t < 0) return free(ops), free(copy_of), sc_fail(err, "out of memory");
                ops[n] = (deploy_op){.kind = DOP_COPY, .in = op.in, .in2 = -1, .out = t,
                                     .sl = -1, .last = -1};
                snprintf(ops[n++].name, sizeof op.name, "%.39s.flatten", op.name);
                copy_of[op.in] = t;
            }
            op.in = copy_of[op.in];
        }
        ops[n++] = op;
    }
    free(p->ops), free(copy_of);
    p->ops = ops, p->nops = n, b->cap_o = n;
    return 0;
}

// Fills each conv descriptor's borders and offsets (recomputed when the
// input's border is not the conv's padding).
static int pb_descs(deploy_plan *p, sc_err *err) {
    for (int o = 0; o < p->nops; o++) {
        deploy_op *op = &p->ops[o];
        if (op->kind != DOP_CONV) continue;
        const sparse_layer *sl = deploy_op_layer(p, op);
        spconv_desc *d = &op->desc;
        d->in_border = p->tensors[op->in].border;
        d->out_border = p->tensors[op->out].border;
        d->offsets = sl->offsets;
        if (d->in_border == sl->pad) continue;
        size_t n = (size_t)sl->K * sl->nnz_row;
        op->offsets = malloc((n ? n : 1) * sizeof *op->offsets);
        if (!op->offsets) return sc_fail(err, "out of memory");
        spconv_offsets(d, sl->indices, op->offsets);
        d->offsets = op->offsets;
    }
    return 0;
}

// --- build / free -----------------------------------------------------------------

// Allocates the builder's per-layer arrays.
static int pb_init(plan_builder *b, const sparse_model *m, deploy_plan *p, sc_err *err) {
    memset(b, 0, sizeof *b);
    b->m = m, b->nt = m->nt, b->p = p;
    size_t nl = (size_t)(m->nt->nlayers > 0 ? m->nt->nlayers : 1);
    b->readers = calloc(nl, sizeof *b->readers);
    b->tensor_of = calloc(nl, sizeof *b->tensor_of);
    b->sl_of = calloc(nl, sizeof *b->sl_of);
    b->covered = calloc(nl, 1);
    if (!b->readers || !b->tensor_of || !b->sl_of || !b->covered) return sc_fail(err, "out of memory");
    return 0;
}

// Frees the builder's arrays (not the plan).
static void pb_done(plan_builder *b) {
    free(b->readers), free(b->tensor_of), free(b->sl_of), free(b->covered);
}

// Runs every pass of the builder.
static int pb_run(plan_builder *b, sc_err *err) {
    const net *nt = b->nt;
    deploy_plan *p = b->p;
    if (nt->nlayers < 1) return sc_fail(err, "the net has no layers");
    SC_TRY(pb_index(b, err));
    p->input = pb_tensor_add(b, nt->in_c, nt->in_h, nt->in_w, -1);
    if (p->input < 0) return sc_fail(err, "out of memory");
    SC_TRY(pb_layers(b, err));
    p->output = b->tensor_of[nt->nlayers - 1];
    const deploy_tensor *out = p->output >= 0 ? &p->tensors[p->output] : NULL;
    if (!out || (size_t)out->c * out->h * out->w != (size_t)nt->classes)
        return sc_fail(err, "the last layer (%s) does not give %d class scores",
                       nt->layers[nt->nlayers - 1].name, nt->classes);
    pb_borders(p);
    SC_TRY(pb_flatten(b, err));
    if (p->tensors[p->output].border)
        return sc_fail(err, "the logits are read by a padded convolution");
    return pb_descs(p, err);
}

// Builds the plan for m.
deploy_plan *deploy_plan_build(const sparse_model *m, sc_err *err) {
    if (!m || !m->nt) {
        sc_fail(err, "no model");
        return NULL;
    }
    deploy_plan *p = calloc(1, sizeof *p);
    plan_builder b;
    if (!p) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    p->m = m;
    int rc = pb_init(&b, m, p, err);
    if (!rc) rc = pb_run(&b, err);
    pb_done(&b);
    if (rc) {
        deploy_plan_free(p);
        return NULL;
    }
    return p;
}

// Frees a plan and what its ops own.
void deploy_plan_free(deploy_plan *p) {
    if (!p) return;
    for (int o = 0; o < p->nops; o++) {
        free(p->ops[o].offsets);
        free(p->ops[o].scale), free(p->ops[o].shift);
    }
    free(p->ops), free(p->tensors), free(p);
}

// --- queries ------------------------------------------------------------------------

// Elements per image of tensor t, borders included.
size_t deploy_tensor_elems(const deploy_plan *p, int t) {
    const deploy_tensor *x = &p->tensors[t];
    return (size_t)x->c * (size_t)(x->h + 2 * x->border) * (size_t)(x->w + 2 * x->border);
}

// Geometry of tensor t for n images.
dops_geom deploy_tensor_geom(const deploy_plan *p, int t, int n) {
    const deploy_tensor *x = &p->tensors[t];
    return (dops_geom){.n = n, .c = x->c, .h = x->h, .w = x->w, .b = x->border};
}

// The sparse layer of a DOP_CONV op.
const sparse_layer *deploy_op_layer(const deploy_plan *p, const deploy_op *op) {
    return &p->m->layers[op->sl];
}

// Fraction of zero weights of a conv op's layer.
double deploy_op_sparsity(const deploy_plan *p, const deploy_op *op) {
    const sparse_layer *sl = deploy_op_layer(p, op);
    double total = (double)sl->K * sl->C * sl->R * sl->S;
    return total > 0 ? 1.0 - (double)sl->nnz / total : 0.0;
}

// Multiply-accumulates per image, dense or with the stored weights only.
double deploy_op_macs(const deploy_plan *p, const deploy_op *op, int sparse) {
    const sparse_layer *sl = deploy_op_layer(p, op);
    const double plane = (double)(sl->P > 0 ? sl->P : 1) * (sl->Q > 0 ? sl->Q : 1);
    return (sparse ? (double)sl->nnz : (double)sl->K * sl->C * sl->R * sl->S) * plane;
}

// "KxCxRxS@HxW" or "KxC" into buf.
void deploy_op_shape(const deploy_plan *p, const deploy_op *op, char *buf, size_t len) {
    const sparse_layer *sl = deploy_op_layer(p, op);
    if (sl->is_linear) snprintf(buf, len, "%dx%d", sl->K, sl->C);
    else snprintf(buf, len, "%dx%dx%dx%d@%dx%d", sl->K, sl->C, sl->R, sl->S, sl->H, sl->W);
}

// Dense (K, C, R, S) weights of a conv op's layer (caller frees).
float *deploy_op_dense_weights(const deploy_plan *p, const deploy_op *op) {
    const sparse_layer *sl = deploy_op_layer(p, op);
    const size_t cols = (size_t)sl->C * sl->R * sl->S;
    float *w = calloc((size_t)sl->K * cols + 1, sizeof *w);
    if (!w) return NULL;
    for (int k = 0; k < sl->K; k++)
        for (int e = 0; e < sl->nnz_row; e++) {
            size_t at = (size_t)k * sl->nnz_row + (size_t)e;
            if ((size_t)sl->indices[at] < cols) w[(size_t)k * cols + (size_t)sl->indices[at]] += sl->values[at];
        }
    return w;
}

// Share of the conv/linear multiply-accumulates per image the zero weights remove.
double deploy_plan_mac_sparsity(const deploy_plan *p) {
    double kept = 0.0, total = 0.0;
    for (int s = 0; s < p->m->nlayers; s++) {
        const sparse_layer *sl = &p->m->layers[s];
        const double plane = (double)(sl->P > 0 ? sl->P : 1) * (sl->Q > 0 ? sl->Q : 1);
        kept += (double)sl->nnz * plane, total += (double)sl->K * sl->C * sl->R * sl->S * plane;
    }
    return total > 0 ? 1.0 - kept / total : 0.0;
}

// Fraction of zero weights over the model's prunable conv/linear layers.
double deploy_plan_sparsity(const deploy_plan *p) {
    const net *nt = p->m->nt;
    double zeros = 0.0, total = 0.0;
    for (int s = 0; s < p->m->nlayers; s++) {
        const sparse_layer *sl = &p->m->layers[s];
        int w = nt->layers[sl->layer].weight;
        if (w < 0 || !nt->tensors[w].prunable) continue;
        double n = (double)sl->K * sl->C * sl->R * sl->S;
        zeros += n - (double)sl->nnz, total += n;
    }
    return total > 0 ? zeros / total : 0.0;
}
