// Per-layer codebooks of the export: quantize's k-means codebooks when the
// input has them, else (--codebook on) the distinct values of each layer.
#include "runtime/half.h"
#include "export/codebook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- distinct values --------------------------------------------------------

// Orders floats ascending (qsort, bsearch).
static int cb_float_cmp(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Collects up to 16 distinct non-zero values of w (count) ascending into cb;
// *n gets how many distinct values there are in all.
static int cb_distinct(const float *w, size_t count, export_codebook *cb, int *n, sc_err *err) {
    float *v = malloc((count ? count : 1) * sizeof *v);  // (count)
    if (!v) return sc_fail(err, "out of memory");
    size_t m = 0;
    for (size_t i = 0; i < count; i++)
        if (w[i] != 0.0f) v[m++] = w[i];
    qsort(v, m, sizeof *v, cb_float_cmp);
    *n = 0;
    for (size_t i = 0; i < m; i++) {
        if (i > 0 && v[i] == v[i - 1]) continue;
        if (*n < 16) cb->cb[*n] = v[i];
        (*n)++;
    }
    free(v);
    return 0;
}

// --- planning ---------------------------------------------------------------

// quantize's k-means tensor for tensor t, or NULL.
static const quant_tensor *cb_quant(const quant_model *q, int t) {
    if (!q || q->method != QM_KMEANS) return NULL;
    for (int i = 0; i < q->ntensors; i++)
        if (q->t[i].tensor == t && q->t[i].codebook && q->t[i].indices) return &q->t[i];
    return NULL;
}

// Plans one layer from quantize's codebook qt (or derives one in on mode).
static int cb_plan_layer(const net *nt, const sparse_layer *l, const export_cfg *cfg,
                         const quant_tensor *qt, export_codebook *cb, export_info *info,
                         sc_err *err) {
    const layer *L = &nt->layers[l->layer];
    memset(cb, 0, sizeof *cb);
    if (qt && qt->k <= 16) {
        cb->use = 1, cb->n = qt->k, cb->qidx = qt->indices, cb->qscale = qt->row_scale;
        memcpy(cb->cb, qt->codebook, (size_t)qt->k * sizeof *cb->cb);
        return 0;
    }
    if (qt) {
        if (cfg->codebook == EXPORT_CB_ON)
            return sc_fail(err, "layer %s has %d centroids; 4-bit codes need at most 16 "
                           "(quantize --centroids 16)", L->name, qt->k);
        if (!info->notice[0])
            snprintf(info->notice, sizeof info->notice, "layer %s has %d centroids, more than 4-bit "
                     "codes hold; storing its values as %s", L->name, qt->k, cfg->half ? "fp16" : "fp32");
        return 0;
    }
    if (cfg->codebook != EXPORT_CB_ON) return 0;
    int n = 0;
    SC_TRY(cb_distinct(net_tensor_data(nt, L->weight), nt->tensors[L->weight].count, cb, &n, err));
    if (n > 16)
        return sc_fail(err, "layer %s has %d distinct values; run quantize --centroids 16 first",
                       L->name, n);
    cb->use = n > 0, cb->n = n;
    return 0;
}

// Plans the codebook of every layer.
int export_codebook_plan(const net *nt, const sparse_model *m, const export_cfg *cfg,
                         export_codebook *cbs, export_info *info, sc_err *err) {
    for (int i = 0; i < m->nlayers; i++) {
        memset(&cbs[i], 0, sizeof cbs[i]);
        if (cfg->codebook == EXPORT_CB_OFF) continue;
        const sparse_layer *l = &m->layers[i];
        const quant_tensor *qt = cb_quant(cfg->quant, nt->layers[l->layer].weight);
        SC_TRY(cb_plan_layer(nt, l, cfg, qt, &cbs[i], info, err));
        info->codebook_layers += cbs[i].use;
    }
    return 0;
}

// --- codes --------------------------------------------------------------------

// Code of weight i (value w): quantize's index, else the value's entry.
int export_codebook_code(const export_codebook *cb, size_t i, float w) {
    if (cb->qidx) return cb->qidx[i];
    const float *p = bsearch(&w, cb->cb, (size_t)cb->n, sizeof *cb->cb, cb_float_cmp);
    return p ? (int)(p - cb->cb) : 0;
}

// 1 when every entry survives a round trip through fp16.
int export_codebook_half_exact(const float *cb, int n) {
    for (int i = 0; i < n; i++)
        if (half_to_float(half_from_float(cb[i])) != cb[i]) return 0;
    return 1;
}
