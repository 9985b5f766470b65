// BSR layers (runtime/sparse_model.h, docs/export-format.md): the block
// structure of a layer whose real entries are whole kb x cb blocks of its
// (K, R*S*C) matrix in (r, s, c) column order (hybrid layers: plus a
// remainder of single entries outside them), built from the padded CSR
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
    free(b->rem_indptr), free(b->rem_indices), free(b->rem_values), free(b->rem_codes);
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
            if (pos[col / b->cb] < 0) continue;  // a remainder entry (hybrid layers)
            const size_t e = ((size_t)pos[col / b->cb] * b->kb + (k - (size_t)bi * b->kb)) * b->cb +
                             (size_t)(col % b->cb);
            b->values[e] = l->values[j];
            if (b->codes) b->codes[e / 2] |= (uint8_t)(((l->codes[j / 2] >> (4 * (j % 2))) & 15) << (4 * (e % 2)));
        }
}

// Counts the kept blocks (all kb*cb entries real) into b->indptr and
// b->indices; fails on a block that is partly real unless hybrid (its
// entries then belong to the remainder).
static int bsr_grid(sparse_layer *l, long *cnt, int bcols, int hybrid, sc_err *err) {
    sparse_bsr *b = &l->bsr;
    const long full = (long)b->kb * b->cb;
    b->indptr[0] = 0;
    for (int bi = 0; bi < l->K / b->kb; bi++) {
        bsr_count(l, b->kb, b->cb, bi, cnt, bcols);
        long n = b->indptr[bi];
        for (int j = 0; j < bcols; j++) {
            if (cnt[j] != 0 && cnt[j] != full && !hybrid)
                return sc_fail(err, "block (%d, %d) of %d x %d holds %ld of %ld entries: not on the grid",
                               bi, j, b->kb, b->cb, cnt[j], full);
            if (cnt[j] == full) b->indices[n++] = j;
        }
        b->indptr[bi + 1] = n;
    }
    b->nblocks = b->indptr[l->K / b->kb];
    b->nrem = l->nnz - b->nblocks * full;
    return 0;
}

// A remainder entry being sorted: its KRSC column and padded-CSR index.
typedef struct {
    int32_t col, j;
} bsr_rent;

// Orders remainder entries by column.
static int bsr_rent_cmp(const void *a, const void *b) {
    const int32_t x = ((const bsr_rent *)a)->col, y = ((const bsr_rent *)b)->col;
    return (x > y) - (x < y);
}

// Appends row k's real entries outside the kept blocks (pos: block column ->
// block number, -1 none) to the remainder, columns ascending (tmp: nnz_row).
static void bsr_rem_row(sparse_layer *l, int k, const long *pos, bsr_rent *tmp) {
    sparse_bsr *b = &l->bsr;
    int n = 0;
    for (size_t j = (size_t)k * l->nnz_row; j < (size_t)(k + 1) * l->nnz_row; j++) {
        if ((l->pad_mask[j / 8] >> (j % 8)) & 1) continue;
        const int32_t col = sparse_col_krsc(l, l->indices[j]);
        if (pos[col / b->cb] < 0) tmp[n++] = (bsr_rent){col, (int32_t)j};
    }
    qsort(tmp, (size_t)n, sizeof *tmp, bsr_rent_cmp);
    int64_t e = b->rem_indptr[k];
    for (int i = 0; i < n; i++, e++) {
        const size_t j = (size_t)tmp[i].j;
        b->rem_indices[e] = tmp[i].col;
        b->rem_values[e] = l->values[j];
        if (b->rem_codes) b->rem_codes[e / 2] |= (uint8_t)(((l->codes[j / 2] >> (4 * (j % 2))) & 15) << (4 * (e % 2)));
    }
    b->rem_indptr[k + 1] = e;
}

// Allocates the remainder's arrays for b->nrem entries (none: nothing); 0 or -1.
static int bsr_rem_alloc(sparse_layer *l, sc_err *err) {
    sparse_bsr *b = &l->bsr;
    if (b->nrem == 0) return 0;
    const size_t n = (size_t)b->nrem;
    b->rem_indptr = calloc((size_t)l->K + 1, sizeof *b->rem_indptr);
    b->rem_indices = malloc(n * sizeof *b->rem_indices);
    b->rem_values = malloc(n * sizeof *b->rem_values);
    b->rem_codes = l->vtype == SV_CODEBOOK4 ? calloc(n / 2 + 1, 1) : NULL;
    if (!b->rem_indptr || !b->rem_indices || !b->rem_values || (l->vtype == SV_CODEBOOK4 && !b->rem_codes))
        return sc_fail(err, "out of memory (BSR remainder)");
    return 0;
}

// Fills every block row's values (and codes) and its rows' remainder after bsr_grid.
static int bsr_values(sparse_layer *l, long *pos, int bcols, sc_err *err) {
    sparse_bsr *b = &l->bsr;
    const size_t n = (size_t)b->nblocks * b->kb * b->cb;
    b->values = malloc((n ? n : 1) * sizeof *b->values);
    b->codes = l->vtype == SV_CODEBOOK4 ? calloc(n / 2 + 1, 1) : NULL;
    bsr_rent *tmp = malloc(((size_t)l->nnz_row + 1) * sizeof *tmp);  // (nnz_row)
    int rc = !b->values || !tmp || (l->vtype == SV_CODEBOOK4 && !b->codes) ? sc_fail(err, "out of memory (BSR)")
                                                                          : bsr_rem_alloc(l, err);
    for (int bi = 0; rc == 0 && bi < l->K / b->kb; bi++) {
        for (int j = 0; j < bcols; j++) pos[j] = -1;
        for (int64_t e = b->indptr[bi]; e < b->indptr[bi + 1]; e++) pos[b->indices[e]] = (long)e;
        bsr_fill(l, bi, pos);
        for (int k = bi * b->kb; b->nrem && k < (bi + 1) * b->kb; k++) bsr_rem_row(l, k, pos, tmp);
    }
    free(tmp);
    return rc;
}

// Builds l->bsr from the padded CSR (see sparse_model.h).
int sparse_bsr_build(sparse_layer *l, int kb, int cb, int hybrid, sc_err *err) {
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
    if (rc == 0) rc = bsr_grid(l, cnt, bcols, hybrid, err);
    if (rc == 0) rc = bsr_values(l, cnt, bcols, err);
    free(cnt);
    if (rc) sparse_bsr_free(b);
    return rc;
}

// --- blocks -> compact CSR ----------------------------------------------------

// Marks row k's block entries in where (KCRS column -> entry number), and
// its remainder entries (-2 - their number).
static void bsr_row_mark(const sparse_layer *l, int k, int32_t *where) {
    const sparse_bsr *b = &l->bsr;
    const int bi = k / b->kb, a = k % b->kb;
    for (int64_t e = b->indptr[bi]; e < b->indptr[bi + 1]; e++)
        for (int c = 0; c < b->cb; c++)
            where[sparse_col_kcrs(l, b->indices[e] * b->cb + c)] = (int32_t)((e * b->kb + a) * b->cb + c);
    for (int64_t e = b->nrem ? b->rem_indptr[k] : 0; b->nrem && e < b->rem_indptr[k + 1]; e++)
        where[sparse_col_kcrs(l, b->rem_indices[e])] = (int32_t)(-2 - e);
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
            if (scratch[c] == -1) continue;
            const int32_t e = scratch[c] >= 0 ? scratch[c] : -2 - scratch[c];  // block or remainder entry
            const float *v = scratch[c] >= 0 ? b->values : b->rem_values;
            const uint8_t *cd = scratch[c] >= 0 ? b->codes : b->rem_codes;
            scratch[c] = -1;
            idx[n] = c;
            vals[n] = v[e];
            if (codes) codes[n / 2] |= (uint8_t)(((cd[e / 2] >> (4 * (e % 2))) & 15) << (4 * (n % 2)));
            n++;
        }
        indptr[k + 1] = n;
        if (n - indptr[k] > l->nnz_row) l->nnz_row = (int)(n - indptr[k]);
    }
    l->nnz = (long)n;
}
