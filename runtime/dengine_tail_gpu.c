// A chain of block-sparse convs as one tail-kernel launch (runtime/dengine_tail.h).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv_tail_gpu.h"
#include "runtime/dengine_bsconv.h"
#include "runtime/dengine_tail.h"

struct detail {
    int n;                       // convs
    int in, out;                 // engine tensors: the chain's input and output
    bst_op ops[BST_MAX_OPS];
    bst_w w[BST_MAX_OPS];
    float *bias[BST_MAX_OPS];    // device fp32, or NULL
    long long smem;              // bytes of the planes
};

// 1 when plan conv op has no pool after it, or the 2x2 stride-2 max-pool the kernel takes.
static int dt_pool_ok(const deploy_op *op) {
    const spconv_desc *d = &op->desc;
    return d->pool_k <= 1 || (d->pool_k == 2 && d->pool_stride == 2 && d->pool_pad == 0);
}

// The kernel's shape of plan conv op i (one image; its 2x2 pool, if any).
static bsconv_shape dt_shape(const deploy_op *op, int relu) {
    const spconv_desc *d = &op->desc;
    return (bsconv_shape){.n = 1, .C = d->C, .H = d->H, .W = d->W, .K = d->K, .R = d->R, .S = d->S,
                          .stride = d->stride, .pad = d->pad, .relu = relu, .pool = d->pool_k > 1 ? d->pool_k : 0};
}

// Uploads conv k's weights (16x8 BSR blocks repacked for the tail) and bias.
static int dt_weights(const gpu_ctx *g, const deploy_plan *p, const detail_conv *c, detail *t, int k, sc_err *err) {
    const deploy_op *op = &p->ops[c->op];
    const sparse_layer *sl = deploy_op_layer(p, op);
    const sparse_bsr *x = &sl->bsr;
    if (sl->is_linear || x->kb != 16 || x->cb != 8 || !dt_pool_ok(op) || x->nrem)
        return sc_fail(err, "%s: not a 16x8 block-sparse conv with at most a 2x2 pool and no singles", op->name);
    bsconv_bsr w;
    int32_t *ip = NULL;
    SC_TRY(debs_bsr(sl, &w, &ip, err));
    const bsconv_shape s = dt_shape(op, c->relu);
    bsconv_hpack h;
    int rc = bsconv_check(&s, &w, err) || bsconv_hpack_build(&s, &w, &h, err);
    if (!rc) {
        rc = bst_gpu_upload(g, &s, &h, &t->w[k], err);
        bsconv_hpack_free(&h);
    }
    free(ip);
    if (!rc && op->desc.bias) {
        cudaCheck(err, cudaMalloc((void **)&t->bias[k], (size_t)s.K * sizeof(float)));
        rc = gpu_upload(t->bias[k], op->desc.bias, (size_t)s.K * sizeof(float), err);
    }
    t->ops[k] = (bst_op){s, &t->w[k], t->bias[k], 0, 0, -1, 0};
    return rc;
}

// Bytes of tensor t's plane in the chain (the first conv's input or a conv's output).
static long long dt_plane(const deploy_plan *p, int t) {
    const deploy_tensor *d = &p->tensors[t];
    return bst_plane_bytes(d->h, d->w, d->c);
}

// 1 when [a, a + na) and [b, b + nb) overlap.
static int dt_overlap(long long a, long long na, long long b, long long nb) { return a < b + nb && b < a + na; }

// Index in cv of the last conv reading tensor tn (as input or residual), -1 when none does.
static int dt_last_use(const detail_conv *cv, int n, int tn) {
    int last = -1;
    for (int k = 0; k < n; k++)
        if (cv[k].in == tn || cv[k].res == tn) last = k;
    return last;
}

// The shared-memory offset of conv k's output plane: the lowest 16-byte
// aligned offset clear of every plane still to be read (off[j], j < k, and
// the chain's input at off[n]), first fit.
static long long dt_place(const deploy_plan *p, const detail_conv *cv, int n, const long long *off, int k) {
    const long long need = dt_plane(p, cv[k].out);
    long long at = 0;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int j = -1; j < k; j++) {
            const int tn = j < 0 ? cv[0].in : cv[j].out;
            const long long o = j < 0 ? off[n] : off[j], sz = dt_plane(p, tn);
            if (dt_last_use(cv, n, tn) >= k && dt_overlap(at, need, o, sz)) at = (o + sz + 15) / 16 * 16, moved = 1;
        }
    }
    return at;
}

// Gives every plane its region and every op its offsets; the pooled convs'
// unpooled outputs share one region past every plane.
static void dt_regions(const deploy_plan *p, const detail_conv *cv, detail *t) {
    long long off[BST_MAX_OPS + 1], pre = 0;
    off[t->n] = 0, t->smem = dt_plane(p, cv[0].in);
    for (int k = 0; k < t->n; k++) {
        off[k] = dt_place(p, cv, t->n, off, k);
        if (off[k] + dt_plane(p, cv[k].out) > t->smem) t->smem = off[k] + dt_plane(p, cv[k].out);
        if (bst_pre_bytes(&t->ops[k]) > pre) pre = bst_pre_bytes(&t->ops[k]);
    }
    const long long pre_at = (t->smem + 15) / 16 * 16;
    if (pre) t->smem = pre_at + pre;
    for (int k = 0; k < t->n; k++) t->ops[k].pre = bst_pre_bytes(&t->ops[k]) ? (int)pre_at : 0;
    for (int k = 0; k < t->n; k++) {
        int src = -1, rsrc = -1;  // the convs whose outputs this one reads (-1: the chain's input)
        for (int j = 0; j < k; j++) {
            if (cv[j].out == cv[k].in) src = j;
            if (cv[j].out == cv[k].res) rsrc = j;
        }
        t->ops[k].in = (int)off[src < 0 ? t->n : src], t->ops[k].out = (int)off[k];
        t->ops[k].res = cv[k].res < 0 ? -1 : (int)off[rsrc < 0 ? t->n : rsrc];
    }
}

// 1 when every tensor conv k reads is the chain's input or an earlier conv's output.
static int dt_reads_ok(const detail_conv *cv, int k) {
    int in = cv[k].in == cv[0].in, res = cv[k].res < 0 || cv[k].res == cv[0].in;
    for (int j = 0; j < k; j++) in |= cv[j].out == cv[k].in, res |= cv[j].out == cv[k].res;
    return in && res;
}

// Builds the chain: weights, shared-memory regions, and the kernel's checks.
detail *detail_create(const gpu_ctx *g, const deploy_plan *p, const detail_conv *cv, int n, sc_err *err) {
    if (n < 2 || n > BST_MAX_OPS) {
        sc_fail(err, "a tail of %d convs (2 to %d)", n, BST_MAX_OPS);
        return NULL;
    }
    detail *t = calloc(1, sizeof *t);
    if (!t) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    t->n = n;
    int rc = 0;
    for (int k = 0; !rc && k < n; k++)
        rc = dt_reads_ok(cv, k) ? dt_weights(g, p, &cv[k], t, k, err)
                                : sc_fail(err, "%s reads a tensor from outside the chain", p->ops[cv[k].op].name);
    if (!rc) dt_regions(p, cv, t);
    t->in = cv[0].in, t->out = cv[n - 1].out;
    char why[160];
    if (!rc && !bst_gpu_applies(g, t->ops, n, why, sizeof why)) rc = sc_fail(err, "tail: %s", why);
    if (!rc) rc = bst_gpu_prepare(g, err);
    if (rc) {
        detail_free(t);
        return NULL;
    }
    return t;
}

// 1 when op i may be in a chain: a 16x8 block-sparse conv (no singles: the
// tail kernel has no remainder path; at most a 2x2 pool after it) on at most
// 64 output pixels, not reading the plan's input; or a fused add.
static int dt_op(const deploy_plan *p, const detail_op *ops, int i) {
    if (ops[i].kind == 2) return 1;
    const deploy_op *op = &p->ops[i];
    if (ops[i].kind != 1 || op->in == p->input) return 0;
    const sparse_layer *sl = deploy_op_layer(p, op);
    return sl->bsr.kb == 16 && sl->bsr.cb == 8 && !sl->bsr.nrem && dt_pool_ok(op) && op->desc.P * op->desc.Q <= 64;
}

// 1 when an op from `from` on reads tensor tn.
static int dt_read_from(const deploy_plan *p, int from, int tn) {
    int ins[LAYER_MAX_IN];
    for (int i = from; i < p->nops; i++)
        for (int k = deploy_op_inputs(&p->ops[i], ins) - 1; k >= 0; k--)
            if (ins[k] == tn) return 1;
    return 0;
}

// The convs of ops [lo, hi) into cv; their count, or -1 when there are too
// many, fewer than two, or an op after the range reads an output but the last.
static int dt_convs(const deploy_plan *p, const detail_op *ops, int lo, int hi, detail_conv *cv) {
    int n = 0;
    for (int i = lo; i < hi; i++) {
        if (ops[i].kind != 1) continue;
        if (n == BST_MAX_OPS) return -1;
        cv[n++] = ops[i].c;
    }
    for (int k = 0; k < n - 1; k++)
        if (dt_read_from(p, hi, cv[k].out)) return -1;
    return n >= 2 ? n : -1;
}

// 1 when ops [l, h) of the run [a, b) may form a chain: from a conv, not
// ending between a conv and the add fused into it.
static int dt_range_ok(const detail_op *ops, int l, int h, int b) {
    return ops[l].kind == 1 && (h == b || ops[h].kind != 2);
}

// Builds the chain of ops [l, h) (NULL: none, why in err).
static detail *dt_try(const gpu_ctx *g, const deploy_plan *p, const detail_op *ops, int l, int h, sc_err *err) {
    detail_conv cv[BST_MAX_OPS];
    const int n = dt_convs(p, ops, l, h, cv);
    if (n < 2) {
        sc_fail(err, "%s-%s: fewer than two convs, too many, or an inner output read later", p->ops[l].name,
                p->ops[h - 1].name);
        return NULL;
    }
    return detail_create(g, p, cv, n, err);
}

// Builds every chain the kernel takes into c[0 .. max), longest first within each run of chainable ops.
int detail_find_all(const gpu_ctx *g, const deploy_plan *p, const detail_op *ops, detail_chain *c, int max,
                    sc_err *why) {
    int found = 0;
    sc_fail(why, "no run of two or more 16x8 block-sparse convs on at most 64 output pixels");
    for (int a = 0; a < p->nops && found < max; a++) {
        if (!dt_op(p, ops, a)) continue;
        int b = a;
        while (b < p->nops && dt_op(p, ops, b)) b++;
        for (int len = b - a; len >= 2; len--)
            for (int l = a; l + len <= b && found < max; l++) {
                if (!dt_range_ok(ops, l, l + len, b)) continue;
                sc_err e = {{0}};
                detail *t = dt_try(g, p, ops, l, l + len, &e);
                if (t) c[found++] = (detail_chain){t, l, l + len};
                else if (!found) *why = e;
            }
        a = b;
    }
    return found;
}

// Picks the chain to keep (see the header).
int detail_pick(const deploy_plan *p, const detail_chain *c, int n, const double *ms, int forced, const char *why,
                char *note, size_t len) {
    int best = n && ms ? 0 : -1;
    for (int k = 1; best >= 0 && !forced && k < n; k++)
        if (ms[1 + k] < ms[1 + best]) best = k;
    const int keep = best >= 0 && (forced || ms[1 + best] < ms[0]);
    if (best < 0) snprintf(note, len, "%s", why);
    else if (!keep)
        snprintf(note, len, "the fastest chain, %s-%s, %.4f ms against %.4f ms without (%d tried)",
                 p->ops[c[best].lo].name, p->ops[c[best].hi - 1].name, ms[1 + best], ms[0], n);
    for (int k = 0; k < n; k++)
        if (k != best || !keep) detail_free(c[k].t);
    return keep ? best : -1;
}

// The chain's input and output tensors.
void detail_io(const detail *t, int *in, int *out) { *in = t->in, *out = t->out; }

// Queues the chain's launch.
int detail_run(const gpu_ctx *g, const detail *t, int nimg, const void *x, void *y, sc_err *err) {
    return bst_gpu_run(g, t->ops, t->n, nimg, x, y, err);
}

// Names conv k of the chain.
void detail_describe(const detail *t, int k, char *buf, size_t len) {
    snprintf(buf, len, "bsconv tail %d/%d (16x8, one CTA per image, %lld KB of shared memory)", k + 1, t->n,
             (t->smem + 1023) / 1024);
}

// Frees the chain's device arrays.
void detail_free(detail *t) {
    if (!t) return;
    for (int k = 0; k < t->n; k++) bst_gpu_free(&t->w[k]), cudaFree(t->bias[k]);
    free(t);
}
