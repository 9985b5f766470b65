// BSR layers (runtime/sparse_model.h, docs/export-format.md): the block
// structure of a layer whose real entries are whole kb x cb blocks of its
// (K, R*S*C) matrix in (r, s, c) column order, built from the padded CSR
// (the writer's side) and turned back into the compact CSR the padded layout
// is derived from (the loader's side), so both give the same layout.
#include "sparse_model.h"

#include <stdlib.h>
#include <string.h>

// --- column orders ----------------------------------------------------------

// KRSC column of KCRS column col = c*RS + t: t*C + c.
int32_t sparse_col_krsc(const sparse_layer *l, int32_t col) {
    const int32_t rs = l->R * l->S;
    return (col % rs) * l->C + col / rs;
}

// KCRS column of KRSC column col = t*C + c: c*RS + t.
int32_t sparse_col_kcrs(const sparse_layer *l, int32_t col) {
    return (col % l->C) * (l->R * l->S) + col / l->C;
}

// Frees the block structure and empties it.
void sparse_bsr_free(sparse_bsr *b) {
    free(b->indptr), free(b->indices), free(b->values), free(b->codes);
    memset(b, 0, sizeof *b);
}

// --- padded CSR -> blocks -----------------------------------------------------

// Real entries per block column of block row bi into cnt (bcols, zeroed
// first).
static void bsr_count(const sparse_layer *l, int kb, int cb, int bi, long *cnt, int bcols) {
    memset(cnt, 0, (size_t)bcols * sizeof *cnt);
    for (size_t k = (size_t)bi * kb; k < (size_t)(bi + 1) * kb; k++)
        for (size_t j = k * l->nnz_row; j < (k + 1) * (size_t)l->nnz_row; j++)
            if (!((l->pad_mask[j / 8] >> (j % 8)) & 1)) cnt[sparse_col_krsc(l, l->indices[j]) / cb]++;
}

// Copies the real entries of block row bi into their blocks, whose indices
// pos (block column -> block number) gives.
static void bsr_fill(sparse_layer *l, int bi, const long *pos) {
    sparse_bsr *b = &l->bsr;
    for (size_t k = (size_t)bi * b->kb; k < (size_t)(bi + 1) * b->kb; k++)
        for (size_t j = k * l->nnz_row; j < (k + 1) * (size_t)l->nnz_row; j++) {
            if ((l->pad_mask[j / 8] >> (j % 8)) & 1) continue;
            const int32_t col = sparse_col_krsc(l, l->indices[j]);
            const size_t e = ((size_t)pos[col / b->cb] * b->kb + (k - (size_t)bi * b->kb)) * b->cb +
                             (size_t)(col % b->cb);
            b->values[e] = l->values[j];
            if (b->codes) b->codes[e / 2] |= (uint8_t)(((l->codes[j / 2] >> (4 * (j % 2))) & 15) << (4 * (e % 2)));
        }
}

// Counts the kept blocks (all kb*cb entries real) into b->indptr and
// b->indices; fails on a block that is partly real.
static int bsr_grid(sparse_layer *l, long *cnt, int bcols, sc_err *err) {
    sparse_bsr *b = &l->bsr;
    const long full = (long)b->kb * b->cb;
    b->indptr[0] = 0;
    for (int bi = 0; bi < l->K / b->kb; bi++) {
        bsr_count(l, b->kb, b->cb, bi, cnt, bcols);
        long n = b->indptr[bi];
        for (int j = 0; j < bcols; j++) {
            if (cnt[j] != 0 && cnt[j] != full)
                return sc_fail(err, "block (%d, %d) of %d x %d holds %ld of %ld entries: not on the grid",
                               bi, j, b->kb, b->cb, cnt[j], full);
            if (cnt[j]) b->indices[n++] = j;
        }
        b->indptr[bi + 1] = n;
    }
    b->nblocks = b->indptr[l->K / b->kb];
    return 0;
}

// Fills every block row's values (and codes) after bsr_grid.
static int bsr_values(sparse_layer *l, long *pos, int bcols, sc_err *err) {
    sparse_bsr *b = &l->bsr;
    const size_t n = (size_t)b->nblocks * b->kb * b->cb;
    b->values = malloc((n ? n : 1) * sizeof *b->values);
    b->codes = l->vtype == SV_CODEBOOK4 ? calloc(n / 2 + 1, 1) : NULL;
    if (!b->values || (l->vtype == SV_CODEBOOK4 && !b->codes)) return sc_fail(err, "out of memory (BSR)");
    for (int bi = 0; bi < l->K / b->kb; bi++) {
        for (int j = 0; j < bcols; j++) pos[j] = -1;
        for (int64_t e = b->indptr[bi]; e < b->indptr[bi + 1]; e++) pos[b->indices[e]] = (long)e;
        bsr_fill(l, bi, pos);
    }
    return 0;
}

// Builds l->bsr from the padded CSR (see sparse_model.h).
int sparse_bsr_build(sparse_layer *l, int kb, int cb, sc_err *err) {
    sparse_bsr_free(&l->bsr);
    if (kb < 1 || cb < 1 || l->K % kb || l->C % cb)
        return sc_fail(err, "blocks of %d x %d do not tile a layer of %d x %d channels", kb, cb, l->K, l->C);
    const int bcols = l->R * l->S * (l->C / cb);
    sparse_bsr *b = &l->bsr;
    b->kb = kb, b->cb = cb;
    const size_t most = (size_t)(l->K / kb) * (size_t)bcols;
    b->indptr = malloc(((size_t)(l->K / kb) + 1) * sizeof *b->indptr);
    b->indices = malloc((most ? most : 1) * sizeof *b->indices);
    long *cnt = malloc(((size_t)bcols + 1) * sizeof *cnt);  // (bcols)
    int rc = !b->indptr || !b->indices || !cnt ? sc_fail(err, "out of memory (BSR)") : 0;
    if (rc == 0) rc = bsr_grid(l, cnt, bcols, err);
    if (rc == 0) rc = bsr_values(l, cnt, bcols, err);
    free(cnt);
    if (rc) sparse_bsr_free(b);
    return rc;
}

// --- blocks -> compact CSR ----------------------------------------------------

// Marks row k's block entries in where (KCRS column -> entry number).
static void bsr_row_mark(const sparse_layer *l, int k, int32_t *where) {
    const sparse_bsr *b = &l->bsr;
    const int bi = k / b->kb, a = k % b->kb;
    for (int64_t e = b->indptr[bi]; e < b->indptr[bi + 1]; e++)
        for (int c = 0; c < b->cb; c++)
            where[sparse_col_kcrs(l, b->indices[e] * b->cb + c)] = (int32_t)((e * b->kb + a) * b->cb + c);
}

// The compact CSR of l->bsr (see sparse_model.h); scratch: C*R*S entries.
void sparse_bsr_to_csr(sparse_layer *l, int64_t *indptr, int32_t *idx, float *vals,
                       uint8_t *codes, int32_t *scratch) {
    const sparse_bsr *b = &l->bsr;
    const int32_t cols = l->C * l->R * l->S;
    for (int32_t c = 0; c < cols; c++) scratch[c] = -1;
    int64_t n = 0;
    indptr[0] = 0;
    l->nnz_row = 0;
    for (int k = 0; k < l->K; k++) {
        bsr_row_mark(l, k, scratch);
        for (int32_t c = 0; c < cols; c++) {
            const int32_t e = scratch[c];
            if (e < 0) continue;
            scratch[c] = -1;
            idx[n] = c;
            vals[n] = b->values[e];
            if (codes) codes[n / 2] |= (uint8_t)(((b->codes[e / 2] >> (4 * (e % 2))) & 15) << (4 * (n % 2)));
            n++;
        }
        indptr[k + 1] = n;
        if (n - indptr[k] > l->nnz_row) l->nnz_row = (int)(n - indptr[k]);
    }
    l->nnz = (long)n;
}
