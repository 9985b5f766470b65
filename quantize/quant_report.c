// The quantize tool's per-layer table, sizes and JSON details.
#include "quant_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quantize/apply.h"

// --- per layer ------------------------------------------------------------------

// Orders floats ascending (for qsort).
static int qr_cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Index of tensor t in q (-1 when not quantized).
static int qr_find(const quant_model *q, int t) {
    for (int i = 0; i < q->ntensors; i++)
        if (q->t[i].tensor == t) return i;
    return -1;
}

// Counts the distinct non-zero values among the kept weights (buf: scratch).
static long qr_distinct(const float *w, const float *m, size_t n, float *buf) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (m[i] != 0.0f && w[i] != 0.0f) buf[k++] = w[i];
    qsort(buf, k, sizeof *buf, qr_cmp);
    long d = 0;
    for (size_t i = 0; i < k; i++) d += i == 0 || buf[i] != buf[i - 1];
    return d;
}

// Largest count of distinct non-zero kept values in one row (rows rows).
static long qr_distinct_rows(const float *w, const float *m, size_t n, int rows, float *buf) {
    const size_t per = rows > 0 ? n / (size_t)rows : n;
    long d = 0;
    for (int r = 0; r < rows; r++) {
        long dr = qr_distinct(w + (size_t)r * per, m + (size_t)r * per, per, buf);
        if (dr > d) d = dr;
    }
    return d;
}

// Bytes of the quantized values and their codebook or scales.
static long qr_packed_values(const quant_model *q, const quant_tensor *t, size_t kept) {
    const long bits = quant_index_bits(q);
    long b = (long)((kept * (size_t)bits + 7) / 8);
    if (q->method == QM_KMEANS)
        b += (long)(t->k + (t->row_scale ? t->nrows : 0)) * (q->codebook_fp16 ? 2 : 4);
    if (q->method == QM_LINEAR) b += (long)t->nscale * (q->symmetric ? 4 : 8);
    return b;
}

// Fills one row: counts, errors and sizes.
static void qr_row(const net *nt, const float *orig, const quant_model *q, int t, float *buf,
                   quant_layer_stat *s) {
    const ptensor *p = &nt->tensors[t];
    const float *w = nt->param + p->offset, *m = nt->mask + p->offset, *o = orig + p->offset;
    memset(s, 0, sizeof *s);
    s->tensor = t, s->qi = qr_find(q, t), s->weights = p->count, s->rows = p->dims[0];
    double se = 0.0;
    for (size_t i = 0; i < p->count; i++) {
        if (m[i] == 0.0f) continue;
        double e = fabs((double)w[i] - o[i]);
        s->kept++, se += e * e, s->max_err = fmax(s->max_err, e);
    }
    s->rmse = s->kept ? sqrt(se / (double)s->kept) : 0.0;
    s->distinct = q->row_scale && s->qi >= 0 ? qr_distinct_rows(w, m, p->count, s->rows, buf)
                                             : qr_distinct(w, m, p->count, buf);
    s->saturated = s->qi >= 0 ? q->t[s->qi].saturated : 0;
    const long index_bytes = (long)s->kept * 4 + (long)(s->rows + 1) * 4;
    s->dense_bytes = (long)p->count * 4;
    s->sparse_bytes = (long)s->kept * 4 + index_bytes;
    s->packed_bytes = s->qi >= 0 ? qr_packed_values(q, &q->t[s->qi], s->kept) + index_bytes
                                 : s->sparse_bytes;
}

// Builds the report over every conv/linear weight.
int quant_report_build(const net *nt, const float *orig, const quant_model *q, quant_report *r,
                       sc_err *err) {
    memset(r, 0, sizeof *r);
    r->rows = calloc((size_t)(nt->ntensors ? nt->ntensors : 1), sizeof *r->rows);
    float *buf = malloc((nt->nparam ? nt->nparam : 1) * sizeof *buf);  // scratch
    if (!r->rows || !buf) {
        free(buf);
        return sc_fail(err, "out of memory (report)");
    }
    long weight_floats = 0;
    for (int t = 0; t < nt->ntensors; t++) {
        if (nt->tensors[t].kind != PT_WEIGHT) continue;
        quant_layer_stat *s = &r->rows[r->n++];
        qr_row(nt, orig, q, t, buf, s);
        weight_floats += (long)s->weights;
        r->weights += s->weights, r->kept += s->kept, r->saturated += s->saturated;
        r->dense_bytes += s->dense_bytes, r->sparse_bytes += s->sparse_bytes;
        r->packed_bytes += s->packed_bytes;
        if (s->qi >= 0 && s->distinct > r->distinct_max) r->distinct_max = s->distinct;
    }
    r->other_bytes = ((long)nt->nparam - weight_floats + (long)nt->nbuf) * 4;
    free(buf);
    return 0;
}

// Frees the rows.
void quant_report_free(quant_report *r) {
    free(r->rows);
    memset(r, 0, sizeof *r);
}

// --- output ---------------------------------------------------------------------

// Short description of the method.
void quant_report_method(const quant_model *q, char *out, size_t len) {
    if (q->method == QM_KMEANS)
        snprintf(out, len, "k-means %d (%d-bit indices, %s codebook%s)", q->k, quant_index_bits(q),
                 q->codebook_fp16 ? "fp16" : "fp32", q->row_scale ? ", row scales" : "");
    else if (q->method == QM_LINEAR)
        snprintf(out, len, "linear %d-bit %s, per %s", q->bits,
                 q->symmetric ? "symmetric" : "asymmetric", q->per_channel ? "channel" : "layer");
    else snprintf(out, len, "fp16");
}

// Formats a tensor's dims as "64x3x3x3".
static void qr_shape(const ptensor *p, char *out, size_t len) {
    size_t o = 0;
    for (int i = 0; i < p->ndim && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%d", i ? "x" : "", p->dims[i]);
}

// Prints one row per conv/linear weight and the totals.
void quant_report_table(FILE *f, const net *nt, const quant_model *q, const quant_report *r) {
    char shape[64];
    fprintf(f, "%-28s %-14s %9s %9s %8s %8s %10s %11s %11s %11s\n", "layer", "shape", "weights",
            "non-zeros", "quant", "distinct", "rmse", "dense fp32", "sparse", "sparse+code");
    for (int i = 0; i < r->n; i++) {
        const quant_layer_stat *s = &r->rows[i];
        const ptensor *p = &nt->tensors[s->tensor];
        qr_shape(p, shape, sizeof shape);
        fprintf(f, "%-28s %-14s %9zu %9zu %8s %8ld %10.3g %11ld %11ld %11ld\n", p->name, shape,
                s->weights, s->kept, s->qi >= 0 ? "yes" : "fp32", s->distinct, s->rmse,
                s->dense_bytes, s->sparse_bytes, s->packed_bytes);
    }
    fprintf(f, "%-28s %-14s %9zu %9zu %8s %8ld %10s %11ld %11ld %11ld\n", "total", "", r->weights,
            r->kept, "", r->distinct_max, "", r->dense_bytes, r->sparse_bytes, r->packed_bytes);
    if (q->method == QM_LINEAR) fprintf(f, "saturated values: %ld of %zu kept\n", r->saturated, r->kept);
}

// Adds one layer object.
static void qr_json_row(json_writer *j, const net *nt, const quant_model *q,
                        const quant_layer_stat *s) {
    const ptensor *p = &nt->tensors[s->tensor];
    json_object_begin(j, NULL);
    json_add_string(j, "name", p->name);
    json_array_begin(j, "shape");
    for (int d = 0; d < p->ndim; d++) json_add_int(j, NULL, p->dims[d]);
    json_array_end(j);
    json_add_int(j, "weights", (long long)s->weights);
    json_add_int(j, "nonzeros", (long long)s->kept);
    json_add_number(j, "sparsity", s->weights ? 1.0 - (double)s->kept / (double)s->weights : 0.0);
    json_add_bool(j, "pruned", p->prunable);
    json_add_bool(j, "quantized", s->qi >= 0);
    json_add_int(j, "distinct_nonzero_values", s->distinct);
    json_add_number(j, "rmse", s->rmse);
    json_add_number(j, "max_abs_error", s->max_err);
    if (q->method == QM_LINEAR) json_add_int(j, "saturated", s->saturated);
    json_add_int(j, "dense_fp32_bytes", s->dense_bytes);
    json_add_int(j, "sparse_bytes", s->sparse_bytes);
    json_add_int(j, "sparse_codebook_bytes", s->packed_bytes);
    json_object_end(j);
}

// Adds "sizes" and "layers" to the open JSON object.
void quant_report_json(json_writer *j, const net *nt, const quant_model *q, const quant_report *r) {
    json_object_begin(j, "sizes");
    json_add_int(j, "dense_fp32_bytes", r->dense_bytes);
    json_add_int(j, "sparse_bytes", r->sparse_bytes);
    json_add_int(j, "sparse_codebook_bytes", r->packed_bytes);
    json_add_int(j, "other_fp32_bytes", r->other_bytes);
    json_object_end(j);
    json_array_begin(j, "layers");
    for (int i = 0; i < r->n; i++) qr_json_row(j, nt, q, &r->rows[i]);
    json_array_end(j);
}
