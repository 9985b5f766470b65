// Masks under a block or N:M pattern (runtime/pattern.h): raises that keep a
// layer on its pattern, the projection of an off-pattern mask onto it, and
// the check. See prune/mask.h and docs/prune.md ("Patterns").
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"

// --- set-up -------------------------------------------------------------------

// Fills each layer's geometry under p (nothing for the unstructured pattern).
int prune_layers_set_pattern(prune_layers *pl, const net *nt, const sc_pattern *p, sc_err *err) {
    free(pl->geom);
    pl->geom = NULL;
    if (sc_pattern_is_unstructured(p)) return 0;
    pl->geom = malloc((size_t)(pl->n > 0 ? pl->n : 1) * sizeof *pl->geom);
    if (!pl->geom) return sc_fail(err, "out of memory (%d layers)", pl->n);
    for (int i = 0; i < pl->n; i++) sc_pattern_geom_of(p, nt, pl->tensor[i], &pl->geom[i]);
    return 0;
}

// --- raising ------------------------------------------------------------------

// Prunes the entries idx[0..k): mask, weight and momentum (when not NULL) to zero.
static void entries_prune(const size_t *idx, size_t k, float *w, float *mask, float *mom) {
    for (size_t j = 0; j < k; j++) {
        mask[idx[j]] = 0.0f;
        w[idx[j]] = 0.0f;
        if (mom) mom[idx[j]] = 0.0f;
    }
}

// Block score of every unit into us (units): the sum of its entries'
// coefficients, +inf when one of them is pruned. Entries are added in their
// (k, c, tap) order, the unit found without a division per entry.
static void block_scores(const sc_pattern_geom *g, const float *coef, float *us) {
    size_t C = (size_t)g->C, RS = (size_t)g->RS, cblocks = C / (size_t)g->cb, i = 0;
    for (size_t u = 0; u < g->units; u++) us[u] = 0.0f;
    for (size_t k = 0; k < (size_t)g->K; k++)
        for (size_t c = 0; c < C; c++) {
            float *row = us + (k / (size_t)g->kb) * RS * cblocks + c / (size_t)g->cb;
            for (size_t rs = 0; rs < RS; rs++, i++) row[rs * cblocks] += coef[i];
        }
}

// Takes the `need` units of lowest score (ties by unit index): prunes their
// entries, or with `prune` 0 only marks them (their score set to +inf).
// vals holds g->units floats, idx g->unit_size entries.
static void units_take_lowest(const sc_pattern_geom *g, float *us, size_t need, int prune,
                              float *vals, size_t *idx, float *w, float *mask, float *mom) {
    size_t m = 0, below = 0;
    for (size_t u = 0; u < g->units; u++) {  // the kept units' scores
        vals[m] = us[u];
        m += us[u] != INFINITY;
    }
    if (need > m) need = m;
    if (need == 0) return;
    float v = prune_select_kth(vals, m, need - 1);
    for (size_t u = 0; u < g->units; u++) below += us[u] < v;
    size_t eq = need - below;  // units at the threshold taken, by index
    for (size_t u = 0; u < g->units; u++) {
        if (!(us[u] < v || (us[u] == v && eq > 0))) continue;
        eq -= us[u] == v;
        if (!prune) {
            us[u] = INFINITY;
            continue;
        }
        sc_pattern_unit_entries(g, u, idx);
        entries_prune(idx, g->unit_size, w, mask, mom);
    }
}

// Hybrid raise (KxC+F) to at least `zeros`, exactly where whole blocks allow:
// keeps the whole blocks of highest summed coefficient that leave room for
// floor(F x kept) singles (blocks are never re-formed), then the singles of
// highest coefficient, at most floor(F / (1 - F) x the whole blocks' weights)
// so that they stay within the share of what is kept. coef, us and vals: the
// three n-float thirds of scratch.
static int hybrid_raise(const sc_pattern_geom *g, float *w, float *mask, float *mom,
                        const float *gabs, size_t n, size_t zeros, prune_crit c, float *scratch,
                        sc_err *err) {
    float *coef = scratch, *us = scratch + n, *vals = us + n;
    size_t U = g->unit_size, kept = n - zeros, full = 0, have_kept = n - prune_mask_zeros(mask, n);
    size_t want = (kept - sc_pattern_singles_max(g, kept) + U - 1) / U;  // whole blocks to keep
    SC_TRY(prune_coef(w, gabs, mask, n, c, coef, err));
    block_scores(g, coef, us);
    for (size_t u = 0; u < g->units; u++) full += us[u] != INFINITY;
    if (want > full) want = full;
    if (want * U > kept) want = kept / U;
    size_t cap = sc_pattern_singles_cap(g, want * U);
    size_t singles = kept - want * U < cap ? kept - want * U : cap;
    units_take_lowest(g, us, full - want, 0, vals, NULL, w, mask, mom);  // demoted to singles
    size_t *idx = malloc(U * sizeof *idx);
    if (!idx) return sc_fail(err, "out of memory (%zu entries)", U);
    for (size_t i = 0; i < n; i++) vals[i] = 0.0f;  // 1: inside a whole block kept
    for (size_t u = 0; u < g->units; u++) {
        if (us[u] == INFINITY) continue;
        sc_pattern_unit_entries(g, u, idx);
        for (size_t j = 0; j < U; j++) vals[idx[j]] = 1.0f;
    }
    free(idx);
    for (size_t i = 0; i < n; i++) us[i] = mask[i] != 0.0f && vals[i] == 0.0f ? coef[i] : INFINITY;
    sc_pattern_geom one = {.kind = PAT_UNSTRUCTURED, .K = g->K, .C = g->C, .RS = g->RS, .kb = 1,
                           .cb = 1, .units = n, .unit_size = 1};
    size_t idx1;
    units_take_lowest(&one, us, have_kept - want * U - singles, 1, vals, &idx1, w, mask, mom);
    return 0;
}

// Block raise: whole blocks by summed coefficient until >= zeros.
static int block_raise(const sc_pattern_geom *g, float *w, float *mask, float *mom,
                       const float *gabs, size_t n, size_t zeros, prune_crit c, float *scratch,
                       sc_err *err) {
    size_t have = prune_mask_zeros(mask, n), U = g->unit_size;
    if (zeros > n) zeros = n;
    if (zeros <= have) return 0;
    if (g->rem > 0.0) return hybrid_raise(g, w, mask, mom, gabs, n, zeros, c, scratch, err);
    float *coef = scratch, *us = scratch + n, *vals = us + g->units;  // (n), (units), (units)
    SC_TRY(prune_coef(w, gabs, mask, n, c, coef, err));
    size_t *idx = malloc(U * sizeof *idx);
    if (!idx) return sc_fail(err, "out of memory (%zu entries)", U);
    block_scores(g, coef, us);
    units_take_lowest(g, us, (zeros - have + U - 1) / U, 1, vals, idx, w, mask, mom);
    free(idx);
    return 0;
}

// Prunes the entries of one N:M group past its N kept, lowest coefficient
// first (ties by position); idx holds the group's m entries.
static void group_enforce(const size_t *idx, int m, int keep, const float *coef, float *w,
                          float *mask, float *mom) {
    int kept = 0;
    for (int j = 0; j < m; j++) kept += mask[idx[j]] != 0.0f;
    for (; kept > keep; kept--) {
        int lo = -1;
        for (int j = 0; j < m; j++)
            if (mask[idx[j]] != 0.0f && (lo < 0 || coef[idx[j]] < coef[idx[lo]])) lo = j;
        entries_prune(&idx[lo], 1, w, mask, mom);
    }
}

// N:M raise: every group down to N kept (when enforce), then single entries.
static int nm_raise(const sc_pattern_geom *g, float *w, float *mask, float *mom,
                    const float *gabs, size_t n, size_t zeros, int enforce, prune_crit c,
                    float *scratch, sc_err *err) {
    if (enforce) {
        size_t idx[64];  // m <= 32
        SC_TRY(prune_coef(w, gabs, mask, n, c, scratch, err));
        for (size_t u = 0; u < g->units; u++) {
            sc_pattern_unit_entries(g, u, idx);
            group_enforce(idx, g->m, g->n, scratch, w, mask, mom);
        }
    }
    return prune_layer_raise(w, mask, mom, gabs, n, zeros, c, scratch, err);
}

// Raises one layer under its pattern.
int prune_layer_raise_pattern(const sc_pattern_geom *g, float *w, float *mask, float *mom,
                              const float *gabs, size_t n, size_t zeros, int enforce,
                              prune_crit c, float *scratch, sc_err *err) {
    if (g->kind == PAT_NM) return nm_raise(g, w, mask, mom, gabs, n, zeros, enforce, c, scratch, err);
    if (g->kind == PAT_BLOCK) return block_raise(g, w, mask, mom, gabs, n, zeros, c, scratch, err);
    return prune_layer_raise(w, mask, mom, gabs, n, zeros, c, scratch, err);
}

// --- projection and check ---------------------------------------------------------

// Projects layer i when it is off its pattern (a dense N:M layer too: it
// goes to N kept per group).
static int project_one(net *nt, const prune_layers *pl, int i, float *mom, sc_err *err) {
    const sc_pattern_geom *g = &pl->geom[i];
    size_t off = pl->offset[i], n = pl->count[i];
    float *mask = nt->mask + off;
    size_t zeros = prune_mask_zeros(mask, n);
    if (g->kind == PAT_UNSTRUCTURED || sc_pattern_violations(g, mask) == 0) return 0;
    float *scratch = malloc((3 * n + 1) * sizeof *scratch);
    if (!scratch) return sc_fail(err, "out of memory (%zu floats)", 3 * n);
    for (size_t j = 0; j < n; j++) mask[j] = 1.0f;  // pruned weights are 0: they revive at 0
    int rc = prune_layer_raise_pattern(g, nt->param + off, mask, mom ? mom + off : NULL, NULL, n,
                                       zeros, 1, (prune_crit){1.0f, 0.0f}, scratch, err);
    free(scratch);
    return rc ? sc_wrap(err, "layer %s", nt->tensors[pl->tensor[i]].name) : 0;
}

// Projects every layer under a pattern onto it at its sparsity.
int prune_mask_project(net *nt, const prune_layers *pl, float *mom, sc_err *err) {
    for (int i = 0; pl->geom && i < pl->n; i++) SC_TRY(project_one(nt, pl, i, mom, err));
    return 0;
}

// Sum of the layers' pattern violations.
size_t prune_mask_off_pattern(const net *nt, const prune_layers *pl) {
    size_t bad = 0;
    for (int i = 0; pl->geom && i < pl->n; i++)
        bad += sc_pattern_violations(&pl->geom[i], nt->mask + pl->offset[i]);
    return bad;
}
