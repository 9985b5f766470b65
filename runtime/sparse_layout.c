// The padded kernel layout of an exported layer (runtime/sparse_model.h),
// derived from the compact CSR the export file stores: rows padded to the
// layer's longest with explicit zeros at the zero columns nearest to the
// row's non-zeros, input offsets from the geometry, the padding mask, and
// the values (plain, or decoded from 4-bit codes). Shared by the export
// builder and the loader so both give the same layout.
#include "sparse_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- row padding ------------------------------------------------------------

// Class of zero column c given its nearest non-zero columns before (lo) and
// after (hi), -1 when none: a neighbour in the same channel (block of rs
// columns) first, then the distance; 2*(cols+1) when the row has no non-zero.
static uint32_t sl_pad_class(int c, int lo, int hi, int rs, int cols) {
    uint32_t best = UINT32_MAX;
    const int near[2] = {lo, hi};
    for (int i = 0; i < 2; i++) {
        if (near[i] < 0) continue;
        uint32_t cls = (uint32_t)abs(c - near[i]) + (near[i] / rs == c / rs ? 0u : (uint32_t)cols + 1u);
        if (cls < best) best = cls;
    }
    return best == UINT32_MAX ? 2u * ((uint32_t)cols + 1u) : best;
}

// Fills the row's columns: non-zeros plus the nearest zero columns (a
// counting sort over the classes, ties to the lower column).
int sparse_row_columns(const float *w, int cols, int rs, int nnz_row, int32_t *idx,
                       uint32_t *scratch) {
    uint32_t *cls = scratch, *hist = scratch + cols;  // (cols), (2*cols + 3)
    int n = 0;
    for (int c = 0; c < cols; c++) n += w[c] != 0.0f;
    const int need = nnz_row - n;
    uint32_t cut = 0;
    int at_cut = 0;  // columns of class `cut` still to take
    if (need > 0) {
        for (int c = 0, lo = -1; c < cols; c++) {  // cls[c]: previous non-zero + 1
            cls[c] = (uint32_t)(lo + 1);
            if (w[c] != 0.0f) lo = c;
        }
        for (int c = cols - 1, hi = -1; c >= 0; c--) {
            if (w[c] != 0.0f) hi = c, cls[c] = UINT32_MAX;
            else cls[c] = sl_pad_class(c, (int)cls[c] - 1, hi, rs, cols);
        }
        memset(hist, 0, (2 * (size_t)cols + 3) * sizeof *hist);
        for (int c = 0; c < cols; c++)
            if (cls[c] != UINT32_MAX) hist[cls[c]]++;
        int acc = 0;
        for (; acc + (int)hist[cut] < need; cut++) acc += (int)hist[cut];
        at_cut = need - acc;
    }
    int out = 0;
    for (int c = 0; c < cols && out < nnz_row; c++) {
        int chosen = need > 0 && w[c] == 0.0f && (cls[c] < cut || (cls[c] == cut && at_cut-- > 0));
        if (w[c] != 0.0f || chosen) idx[out++] = c;
    }
    return n;
}

// --- the padded layer -------------------------------------------------------

// Allocates the padded arrays of l for nnz_row entries per row (mask and
// codes zeroed; codes and row scales only for codebook layers).
int sparse_layer_alloc(sparse_layer *l, sc_err *err) {
    const size_t n = (size_t)l->K * (size_t)l->nnz_row;
    l->indices = malloc((n ? n : 1) * sizeof(int32_t));
    l->offsets = malloc((n ? n : 1) * sizeof(int32_t));
    l->values = malloc((n ? n : 1) * sizeof(float));
    l->bias = malloc((size_t)(l->K ? l->K : 1) * sizeof(float));
    l->pad_mask = calloc((n + 7) / 8 + 1, 1);
    const int cb = l->vtype == SV_CODEBOOK4;
    if (cb) {
        l->codes = calloc((n + 1) / 2 + 1, 1);
        l->row_scale = malloc((size_t)(l->K ? l->K : 1) * sizeof(float));
    }
    if (!l->indices || !l->offsets || !l->values || !l->bias || !l->pad_mask ||
        (cb && (!l->codes || !l->row_scale)))
        return sc_fail(err, "out of memory (CSR of %d x %d)", l->K, l->nnz_row);
    return 0;
}

// Allocates a compact layer of K rows and nnz entries.
int sparse_compact_alloc(sparse_compact *c, int K, long nnz, sparse_vtype v) {
    const size_t n = (size_t)nnz + 1;
    const int cb = v == SV_CODEBOOK4;
    c->indptr = malloc(((size_t)K + 1) * sizeof *c->indptr);
    c->indices = malloc(n * sizeof *c->indices);
    c->values = cb ? NULL : malloc(n * sizeof *c->values);
    c->codes = cb ? calloc(n / 2 + 1, 1) : NULL;
    return !c->indptr || !c->indices || (!c->values && !c->codes) ? -1 : 0;
}

// Frees a compact layer's arrays.
void sparse_compact_free(sparse_compact *c) {
    free(c->indptr), free(c->indices), free(c->values), free(c->codes);
}

// Sets padded entry j of row k to column col: its offset, and either the
// padding bit or the real entry e's value (vals) or code (codes).
static void sl_entry(sparse_layer *l, size_t j, int k, int32_t col, long e, const float *vals,
                     const uint8_t *codes) {
    l->indices[j] = col;
    l->offsets[j] = (int32_t)sparse_layer_offset(l, col);
    if (e < 0) {
        l->pad_mask[j / 8] |= (uint8_t)(1u << (j % 8));
        l->values[j] = 0.0f;
        return;
    }
    if (!codes) {
        l->values[j] = vals[e];
        return;
    }
    const int code = (codes[e / 2] >> (4 * (e % 2))) & 15;
    l->codes[j / 2] |= (uint8_t)(code << (4 * (j % 2)));
    l->values[j] = l->codebook[code] * l->row_scale[k];
}

// Pads row k: columns from the row's real entries [b, e) of idx.
static void sl_row(sparse_layer *l, int k, const int32_t *idx, long b, long e, const float *vals,
                   const uint8_t *codes, float *dense, uint32_t *scratch, int32_t *cols_out) {
    const int cols = l->C * l->R * l->S;
    for (long i = b; i < e; i++) dense[idx[i]] = 1.0f;
    sparse_row_columns(dense, cols, l->R * l->S, l->nnz_row, cols_out, scratch);
    long r = b;
    for (int p = 0; p < l->nnz_row; p++) {
        const int real = r < e && idx[r] == cols_out[p];
        sl_entry(l, (size_t)k * l->nnz_row + (size_t)p, k, cols_out[p], real ? r : -1, vals, codes);
        r += real;
    }
    for (long i = b; i < e; i++) dense[idx[i]] = 0.0f;
}

// Builds the padded layout from the compact CSR (see sparse_model.h).
int sparse_layer_expand(sparse_layer *l, const int64_t *indptr, const int32_t *idx,
                        const float *vals, const uint8_t *codes, sc_err *err) {
    const int cols = l->C * l->R * l->S;
    float *dense = calloc((size_t)cols + 1, sizeof *dense);              // (cols)
    uint32_t *scratch = malloc((3 * (size_t)cols + 3) * sizeof *scratch);  // (3*cols + 3)
    int32_t *row = malloc(((size_t)l->nnz_row + 1) * sizeof *row);        // (nnz_row)
    int rc = !dense || !scratch || !row ? sc_fail(err, "out of memory (CSR of %d x %d)", l->K, cols) : 0;
    for (int k = 0; rc == 0 && k < l->K; k++)
        sl_row(l, k, idx, (long)indptr[k], (long)indptr[k + 1], vals, codes, dense, scratch, row);
    free(dense), free(scratch), free(row);
    return rc;
}

// --- checks -------------------------------------------------------------------

// Index of the first non-finite value of v (n), or -1.
long sparse_first_nonfinite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return (long)i;
    return -1;
}
