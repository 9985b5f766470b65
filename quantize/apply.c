// Quantizing a whole net with k-means codebooks, linear fixed point or fp16.
#include "runtime/half.h"
#include "apply.h"

#include <stdlib.h>

#include <gsl/gsl_rng.h>

// --- selection ----------------------------------------------------------------

// Index of the first conv weight and the last linear weight (-1 when none).
static void qa_ends(const net *nt, int *first_conv, int *last_linear) {
    *first_conv = *last_linear = -1;
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        if (p->kind != PT_WEIGHT) continue;
        int kind = nt->layers[p->layer].kind;
        if (kind == LK_CONV && *first_conv < 0) *first_conv = t;
        if (kind == LK_LINEAR) *last_linear = t;
    }
}

// Marks the tensors to quantize; returns how many.
int quant_net_select(const net *nt, const quant_cfg *c, int *sel) {
    int first, last, n = 0;
    qa_ends(nt, &first, &last);
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        if (c->method == QM_HALF) sel[t] = p->trainable;
        else sel[t] = p->kind == PT_WEIGHT && !(c->skip_first && t == first) &&
                      !(c->skip_last && t == last);
        n += sel[t];
    }
    return n;
}

// --- methods --------------------------------------------------------------------

// Rounds every selected tensor to fp16 in place.
static int qa_half(net *nt, const int *sel, quant_model *q, sc_err *err) {
    for (int t = 0; t < nt->ntensors; t++) {
        if (!sel[t]) continue;
        const ptensor *p = &nt->tensors[t];
        float *w = nt->param + p->offset;
        for (size_t i = 0; i < p->count; i++) {
            int over = 0;
            w[i] = half_round(w[i], &over);
            if (over) return sc_fail(err, "%s[%zu] is beyond the fp16 range", p->name, i);
        }
        SC_TRY(quant_tensor_alloc(&q->t[q->ntensors++], nt, t, 0, 0, err));
    }
    return 0;
}

// Seed of tensor t's generator: results do not depend on the tensor order.
static unsigned long qa_seed(uint64_t seed, int t) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)(t + 1) * 0xBF58476D1CE4E5B9ull;
    return (unsigned long)(z ^ (z >> 31));
}

// k-means or linear quantization of every selected tensor.
static int qa_coded(const net *nt, const quant_cfg *c, const int *sel, quant_model *q,
                    sc_err *err) {
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) return sc_fail(err, "GSL: cannot allocate a random generator");
    int rc = 0;
    for (int t = 0; !rc && t < nt->ntensors; t++) {
        if (!sel[t]) continue;
        quant_tensor *qt = &q->t[q->ntensors++];  // counted first: freed on failure too
        gsl_rng_set(r, qa_seed(c->seed, t));
        rc = c->method == QM_KMEANS ? kmeans_quantize_tensor(nt, t, &c->km, r, qt, NULL, err)
                                    : linear_quantize_tensor(nt, t, &c->lin, qt, err);
    }
    gsl_rng_free(r);
    return rc;
}

// Writes the decoded values of every tensor of q into nt->param.
void quant_net_decode(net *nt, const quant_model *q) {
    if (q->method == QM_HALF) return;  // rounded in place already
    for (int i = 0; i < q->ntensors; i++) {
        const ptensor *p = &nt->tensors[q->t[i].tensor];
        quant_tensor_decode(q, &q->t[i], nt->mask + p->offset, nt->param + p->offset);
    }
}

// Quantizes the selected tensors and writes the decoded values into the net.
int quant_net_apply(net *nt, const quant_cfg *c, quant_model **out, sc_err *err) {
    *out = NULL;
    int *sel = calloc((size_t)(nt->ntensors ? nt->ntensors : 1), sizeof *sel);
    if (!sel) return sc_fail(err, "out of memory");
    if (quant_net_select(nt, c, sel) == 0) {
        free(sel);
        return sc_fail(err, "the model has no %s to quantize",
                       c->method == QM_HALF ? "parameters" : "conv or linear weights");
    }
    quant_model *q = quant_model_new(c->method, nt->ntensors, err);
    int rc = q ? 0 : -1;
    if (q) {
        q->k = c->method == QM_KMEANS ? c->km.k : 0;
        q->codebook_fp16 = c->codebook_fp16;
        q->row_scale = c->method == QM_KMEANS && c->km.row_scale;
        q->bits = c->method == QM_LINEAR ? c->lin.bits : 16;
        q->per_channel = c->lin.per_channel;
        q->symmetric = c->lin.symmetric;
        q->bits = quant_index_bits(q);
        rc = c->method == QM_HALF ? qa_half(nt, sel, q, err) : qa_coded(nt, c, sel, q, err);
    }
    free(sel);
    if (rc) {
        quant_model_free(q);
        return -1;
    }
    quant_net_decode(nt, q);
    *out = q;
    return 0;
}

// Index bits of one weight.
int quant_index_bits(const quant_model *q) {
    if (q->method != QM_KMEANS) return q->bits;
    int b = 0;
    while ((1 << b) < q->k) b++;
    return b;
}
