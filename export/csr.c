// The CSR builder: BN folding, row padding (runtime/sparse_layout.c),
// offsets and value encoding for every conv and linear layer of a net (see
// csr.h).
#include "runtime/half.h"
#include "runtime/ops.h"
#include "export/csr.h"

#include "export/bsr.h"
#include "export/codebook.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- layer scan ---------------------------------------------------------------

// Counts the stored entries (keep, (K, cols)) per row: l->nnz and l->nnz_row.
static void csr_scan(const float *keep, sparse_layer *l) {
    const size_t cols = (size_t)l->C * l->R * l->S;
    l->nnz = 0, l->nnz_row = 0;
    for (size_t k = 0; k < (size_t)l->K; k++) {
        int n = 0;
        for (size_t c = 0; c < cols; c++) n += keep[k * cols + c] != 0.0f;
        l->nnz += n;
        if (n > l->nnz_row) l->nnz_row = n;
    }
}

// --- layer build ------------------------------------------------------------

// BN folding factors of a layer: y = w*scale[k] + shift[k] per output row.
static void csr_fold(const net *nt, const sparse_layer *l, double *scale, double *shift) {
    const layer *L = &nt->layers[l->layer];
    const float *b = L->bias >= 0 ? net_tensor_data(nt, L->bias) : NULL;
    for (int k = 0; k < l->K; k++) {
        double bias = b ? b[k] : 0.0;
        scale[k] = 1.0, shift[k] = bias;
        if (l->bn < 0) continue;
        const layer *B = &nt->layers[l->bn];
        const float *g = net_tensor_data(nt, B->gamma), *be = net_tensor_data(nt, B->beta);
        const float *mu = net_tensor_data(nt, B->mean), *var = net_tensor_data(nt, B->var);
        scale[k] = g[k] / sqrt((double)var[k] + B->eps);
        shift[k] = (bias - mu[k]) * scale[k] + be[k];
    }
}

// Encodes entry j of row k, column col (unfolded weight w; real: a stored
// entry, else padding): values[j] and, for codebook layers, its code and
// padding bit.
static int csr_encode(sparse_layer *l, const export_codebook *cb, size_t j, int k, int col,
                      float w, int real, double scale, const char *name, sc_err *err) {
    if (!real) {
        l->pad_mask[j / 8] |= (uint8_t)(1u << (j % 8));
        l->values[j] = 0.0f;
        return 0;
    }
    if (l->vtype == SV_CODEBOOK4) {
        size_t cols = (size_t)l->C * l->R * l->S;
        int code = export_codebook_code(cb, (size_t)k * cols + (size_t)col, w);
        l->codes[j / 2] |= (uint8_t)(code << (4 * (j % 2)));
        l->values[j] = l->codebook[code] * l->row_scale[k];
        return 0;
    }
    float v = (float)(w * scale);
    if (l->vtype == SV_FP16) {
        v = half_to_float(half_from_float(v));
        if (isinf(v))
            return sc_fail(err, "layer %s: weight %g does not fit in fp16 (drop --half)", name,
                           w * scale);
    }
    l->values[j] = v;
    return 0;
}

// Builds rows, offsets and values of one layer (after csr_scan) from its
// stored entries keep (K, cols).
static int csr_rows(const net *nt, sparse_layer *l, const export_codebook *cb, const float *keep,
                    const double *scale, uint32_t *scratch, sc_err *err) {
    const char *name = nt->layers[l->layer].name;
    const float *w = net_tensor_data(nt, nt->layers[l->layer].weight);  // (K, cols)
    const int cols = l->C * l->R * l->S;
    for (int k = 0; k < l->K; k++) {
        const float *row = w + (size_t)k * cols, *kr = keep + (size_t)k * cols;
        const size_t base = (size_t)k * l->nnz_row;
        sparse_row_columns(kr, cols, l->R * l->S, l->nnz_row, l->indices + base, scratch);
        for (size_t j = base; j < base + (size_t)l->nnz_row; j++) {
            const int col = l->indices[j];
            int64_t off = sparse_layer_offset(l, col);
            if (off > INT32_MAX)
                return sc_fail(err, "layer %s: input offset %lld exceeds int32", name, (long long)off);
            l->offsets[j] = (int32_t)off;
            SC_TRY(csr_encode(l, cb, j, k, col, row[col], kr[col] != 0.0f, scale[k], name, err));
        }
    }
    return 0;
}

// Builds one layer's CSR (and its blocks when stored as BSR); cb says
// whether (and how) it is a codebook layer.
static int csr_layer(const net *nt, sparse_layer *l, const export_codebook *cb,
                     const export_cfg *cfg, export_info *info, sc_err *err) {
    const int cols = l->C * l->R * l->S;
    l->vtype = cb->use ? SV_CODEBOOK4 : cfg->half ? SV_FP16 : SV_FP32;
    double *scale = malloc((size_t)l->K * sizeof *scale), *shift = malloc((size_t)l->K * sizeof *shift);
    uint32_t *scratch = malloc((3 * (size_t)cols + 3) * sizeof *scratch);  // (3*cols + 3)
    float *keep = malloc(((size_t)l->K * cols + 1) * sizeof *keep);      // (K, cols)
    int rc = !scale || !shift || !scratch || !keep ? sc_fail(err, "out of memory") : 0, kb = 0, bc = 0, hybrid = 0;
    char why[sizeof info->bsr_notice] = "";
    if (rc == 0)
        rc = export_bsr_plan(nt, l, cfg->csr_only ? NULL : cfg->pattern, cb, keep, &kb, &bc, &hybrid, why,
                             sizeof why, err);
    if (why[0] && !info->bsr_notice[0]) memcpy(info->bsr_notice, why, sizeof why);
    if (rc == 0) csr_scan(keep, l);
    if (rc == 0) rc = sparse_layer_alloc(l, err);
    if (rc == 0) {
        csr_fold(nt, l, scale, shift);
        for (int k = 0; k < l->K; k++) l->bias[k] = (float)shift[k];
        if (cb->use) {
            l->ncodebook = cb->n;
            memcpy(l->codebook, cb->cb, sizeof l->codebook);
            for (int k = 0; k < l->K; k++)  // quantize's row scale times the BN scale
                l->row_scale[k] = (float)(scale[k] * (cb->qscale ? cb->qscale[k] : 1.0));
        }
        rc = csr_rows(nt, l, cb, keep, scale, scratch, err);
    }
    if (rc == 0 && kb > 0) rc = sparse_bsr_build(l, kb, bc, hybrid, err);
    info->bsr_layers += rc == 0 && kb > 0;
    free(scale), free(shift), free(scratch), free(keep);
    return rc;
}

// --- the model --------------------------------------------------------------

// A fresh graph from nt's description with nt's parameters, masks and buffers.
static net *csr_net_copy(const net *nt, sc_err *err) {
    net *c = net_from_desc(nt->arch, nt->desc, nt->in_c, nt->in_h, nt->in_w, nt->classes, err);
    if (!c) return NULL;
    if (c->nparam != nt->nparam || c->nbuf != nt->nbuf) {
        net_free(c);
        sc_fail(err, "the net's description does not rebuild the same net (%s)", nt->arch);
        return NULL;
    }
    memcpy(c->param, nt->param, nt->nparam * sizeof *c->param);
    memcpy(c->mask, nt->mask, nt->nparam * sizeof *c->mask);
    memcpy(c->buf, nt->buf, nt->nbuf * sizeof *c->buf);
    memcpy(c->in_mean, nt->in_mean, sizeof c->in_mean);
    memcpy(c->in_std, nt->in_std, sizeof c->in_std);
    return c;
}

// Allocates the model with the graph copy and every layer's fusion.
static sparse_model *csr_model_new(const net *nt, const char *dataset, sc_err *err) {
    sparse_model *m = calloc(1, sizeof *m);
    if (!m || !(m->nt = csr_net_copy(nt, err))) {
        if (m) free(m);
        else sc_fail(err, "out of memory");
        return NULL;
    }
    snprintf(m->dataset, sizeof m->dataset, "%s", dataset ? dataset : "");
    for (int i = 0; i < nt->nlayers; i++)
        m->nlayers += op_of(nt->layers[i].kind)->sparse_geom != NULL;
    m->layers = calloc((size_t)(m->nlayers ? m->nlayers : 1), sizeof *m->layers);
    if (!m->layers) {
        sparse_model_free(m);
        sc_fail(err, "out of memory");
        return NULL;
    }
    for (int i = 0, n = 0; i < nt->nlayers; i++) {
        if (!op_of(nt->layers[i].kind)->sparse_geom) continue;
        for (int c = 0; nt->layers[i].name[c]; c++)
            if (nt->layers[i].name[c] == '/') {
                sparse_model_free(m);
                sc_fail(err, "layer name not usable in HDF5 ('%s')", nt->layers[i].name);
                return NULL;
            }
        sparse_layer_fusion(nt, i, &m->layers[n++]);
    }
    return m;
}

// Builds every layer (codebook or plain values) and the folded graph.
static int csr_build_all(const net *nt, sparse_model *m, const export_cfg *cfg, export_info *info,
                         sc_err *err) {
    export_codebook *cbs = calloc((size_t)(m->nlayers ? m->nlayers : 1), sizeof *cbs);
    if (!cbs) return sc_fail(err, "out of memory");
    int rc = export_codebook_plan(nt, m, cfg, cbs, info, err);
    m->vtype = info->codebook_layers ? SV_CODEBOOK4 : cfg->half ? SV_FP16 : SV_FP32;
    for (int i = 0; rc == 0 && i < m->nlayers; i++)
        rc = csr_layer(nt, &m->layers[i], &cbs[i], cfg, info, err);
    free(cbs);
    if (rc == 0) rc = sparse_model_fill_net(m, err);
    return rc;
}

// Builds the sparse model of a net.
sparse_model *export_build(const net *nt, const char *dataset, const export_cfg *cfg,
                           export_info *info, sc_err *err) {
    memset(info, 0, sizeof *info);
    for (int t = 0; t < nt->ntensors && !info->pruned; t++) {
        const ptensor *p = &nt->tensors[t];
        const float *mk = net_tensor_mask(nt, t);
        for (size_t i = 0; p->prunable && i < p->count; i++)
            if (mk[i] == 0.0f) {
                info->pruned = 1;
                break;
            }
    }
    sparse_model *m = csr_model_new(nt, dataset, err);
    if (m && csr_build_all(nt, m, cfg, info, err) != 0) {
        sparse_model_free(m);
        m = NULL;
    }
    return m;
}
