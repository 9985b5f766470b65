// Pruning masks: prunable layers, the magnitude/gradient coefficient (eq. 2)
// and per-layer targets turned into monotone masks (eq. 3). See docs/prune.md.
#include "mask.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// Element loops shorter than this run on one thread (the OpenMP start-up
// costs more than the work); every parallel loop writes per-element results
// or sums integers, so results do not depend on the thread count.
#define PAR_MIN 65536

// --- the prunable layers ----------------------------------------------------

// Collects the net's prunable tensors in tensor order.
int prune_layers_init(prune_layers *pl, const net *nt, sc_err *err) {
    memset(pl, 0, sizeof *pl);
    int n = 0;
    for (int t = 0; t < nt->ntensors; t++) n += nt->tensors[t].prunable != 0;
    if (n == 0) return sc_fail(err, "net %s has no prunable layer", nt->arch);
    pl->tensor = malloc((size_t)n * sizeof *pl->tensor);
    pl->count = malloc((size_t)n * sizeof *pl->count);
    pl->offset = malloc((size_t)n * sizeof *pl->offset);
    if (!pl->tensor || !pl->count || !pl->offset) {
        prune_layers_free(pl);
        return sc_fail(err, "out of memory");
    }
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        if (!p->prunable) continue;
        pl->tensor[pl->n] = t;
        pl->count[pl->n] = p->count;
        pl->offset[pl->n] = p->offset;
        pl->total += p->count;
        pl->n++;
    }
    return 0;
}

// Frees the arrays of pl and zeroes it.
void prune_layers_free(prune_layers *pl) {
    free(pl->tensor);
    free(pl->count);
    free(pl->offset);
    free(pl->geom);
    memset(pl, 0, sizeof *pl);
}

// Counts zero entries of a mask.
size_t prune_mask_zeros(const float *mask, size_t n) {
    size_t z = 0;
#pragma omp parallel for schedule(static) reduction(+ : z) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) z += mask[i] == 0.0f;
    return z;
}

// Fraction of pruned entries of prunable layer i.
double prune_layer_sparsity(const net *nt, const prune_layers *pl, int i) {
    size_t z = prune_mask_zeros(nt->mask + pl->offset[i], pl->count[i]);
    return (double)z / (double)pl->count[i];
}

// Per-layer sparsities of the net.
void prune_sparsity_read(const net *nt, const prune_layers *pl, double *s) {
    for (int i = 0; i < pl->n; i++) s[i] = prune_layer_sparsity(nt, pl, i);
}

// Size-weighted mean of per-layer sparsities.
double prune_sparsity_overall(const prune_layers *pl, const double *s) {
    double z = 0.0;
    for (int i = 0; i < pl->n; i++) z += s[i] * (double)pl->count[i];
    return pl->total ? z / (double)pl->total : 0.0;
}

// round(s * count), clamped to [0, count].
size_t prune_target_zeros(size_t count, double s) {
    if (!(s > 0.0)) return 0;
    if (s >= 1.0) return count;
    size_t z = (size_t)llround(s * (double)count);
    return z > count ? count : z;
}

// --- criterion (eq. 2) ------------------------------------------------------

// Means of |w| and |g| over the kept entries (0 when none are kept; *mg is
// 0 when g is NULL), each summed in element order.
static void kept_abs_means(const float *w, const float *g, const float *mask, size_t n,
                           double *mw, double *mg) {
    double sw = 0.0, sg = 0.0;
    size_t k = 0;
    // Pruned entries add +0.0 (no change: the sums start at +0.0) and no
    // branch on the mask.
    for (size_t i = 0; i < n; i++) {
        int on = mask[i] != 0.0f;
        sw += on ? fabs((double)w[i]) : 0.0;
        if (g) sg += on ? fabs((double)g[i]) : 0.0;
        k += (size_t)on;
    }
    *mw = k ? sw / (double)k : 0.0;
    *mg = k && g ? sg / (double)k : 0.0;
}

// Coefficient of each kept entry; +inf for pruned ones.
int prune_coef(const float *w, const float *gabs, const float *mask, size_t n, prune_crit c,
               float *coef, sc_err *err) {
    double mw, mg;
    kept_abs_means(w, gabs, mask, n, &mw, &mg);
    if (!isfinite(mw) || (gabs && !isfinite(mg)))
        return sc_fail(err, "non-finite %s in a pruned layer", isfinite(mw) ? "gradient" : "weight");
    float aw = (mw > 0.0 && c.alpha != 0.0f) ? (float)(c.alpha / mw) : 0.0f;
    float ag = (gabs && mg > 0.0 && c.beta != 0.0f) ? (float)(c.beta / mg) : 0.0f;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {  // computed for every entry: no branch on the mask
        float v = aw * fabsf(w[i]);
        if (ag != 0.0f) v += ag * fabsf(gabs[i]);
        coef[i] = mask[i] == 0.0f ? INFINITY : v;
    }
    return 0;
}

// --- selection --------------------------------------------------------------

// Swaps two floats.
static void fswap(float *a, float *b) {
    float t = *a;
    *a = *b;
    *b = t;
}

// The k-th smallest value (0-based) of a[0..m), reordering a (quickselect
// with median-of-three pivots; a holds no NaN).
static float select_kth(float *a, size_t m, size_t k) {
    ptrdiff_t lo = 0, hi = (ptrdiff_t)m - 1, kk = (ptrdiff_t)k;
    while (lo < hi) {
        ptrdiff_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo]) fswap(&a[mid], &a[lo]);
        if (a[hi] < a[lo]) fswap(&a[hi], &a[lo]);
        if (a[hi] < a[mid]) fswap(&a[hi], &a[mid]);
        float pivot = a[mid];
        ptrdiff_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) fswap(&a[i++], &a[j--]);
        }
        // a[lo..j] <= pivot, a[i..hi] >= pivot, a[j+1..i-1] == pivot.
        if (kk <= j) hi = j;
        else if (kk >= i) lo = i;
        else return a[kk];
    }
    return a[kk];
}

// The k-th smallest value (0-based) of a[0..m), reordering a.
float prune_select_kth(float *a, size_t m, size_t k) { return select_kth(a, m, k); }

// --- masks (eq. 3) ----------------------------------------------------------

// Prunes entry i: mask, weight and momentum to zero.
static void prune_entry(size_t i, float *w, float *mask, float *mom) {
    mask[i] = 0.0f;
    w[i] = 0.0f;
    if (mom) mom[i] = 0.0f;
}

// Raises one layer to `zeros` pruned entries by lowest coefficient.
int prune_layer_raise(float *w, float *mask, float *mom, const float *gabs, size_t n,
                      size_t zeros, prune_crit c, float *scratch, sc_err *err) {
    size_t have = prune_mask_zeros(mask, n);
    if (zeros > n) zeros = n;
    if (zeros <= have) return 0;
    size_t need = zeros - have;
    float *coef = scratch, *vals = scratch + n;  // (n) each
    SC_TRY(prune_coef(w, gabs, mask, n, c, coef, err));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {  // the kept coefficients, without a branch
        vals[m] = coef[i];
        m += mask[i] != 0.0f;
    }
    float v = select_kth(vals, m, need - 1);
    // Entries strictly below v go first, then entries equal to v by position
    // (coef tested first: rarely true, so the branch is predictable).
    size_t done = 0;
    for (size_t i = 0; i < n && done < need; i++)
        if (coef[i] < v && mask[i] != 0.0f) {
            prune_entry(i, w, mask, mom);
            done++;
        }
    for (size_t i = 0; i < n && done < need; i++)
        if (coef[i] == v && mask[i] != 0.0f) {
            prune_entry(i, w, mask, mom);
            done++;
        }
    if (done != need) return sc_fail(err, "mask selection pruned %zu of %zu entries", done, need);
    return 0;
}

// Layer indices of pl by decreasing size (ties by index), so that the
// threads of prune_mask_raise start on the big layers.
static void layers_by_size(const prune_layers *pl, int *order) {
    for (int i = 0; i < pl->n; i++) {
        int j = i;
        for (; j > 0 && pl->count[order[j - 1]] < pl->count[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
}

// Raises layer i of pl (scratch: 2 * count floats, 3 * count under a
// pattern; NULL when out of memory).
static int mask_raise_one(net *nt, const prune_layers *pl, int i, const double *target,
                          const float *gabs, prune_crit c, float *mom, float *scratch,
                          sc_err *err) {
    size_t off = pl->offset[i];
    if (!scratch) return sc_fail(err, "out of memory (%zu floats)", 2 * pl->count[i]);
    const sc_pattern_geom *g = pl->geom ? &pl->geom[i] : NULL;
    size_t zeros = prune_target_zeros(pl->count[i], target[i]);
    int rc = g && g->kind != PAT_UNSTRUCTURED
                 ? prune_layer_raise_pattern(g, nt->param + off, nt->mask + off, mom ? mom + off : NULL,
                                             gabs ? gabs + off : NULL, pl->count[i], zeros,
                                             target[i] > 0.0, c, scratch, err)
                 : prune_layer_raise(nt->param + off, nt->mask + off, mom ? mom + off : NULL,
                                     gabs ? gabs + off : NULL, pl->count[i], zeros, c, scratch, err);
    if (rc) return sc_wrap(err, "layer %s", nt->tensors[pl->tensor[i]].name);
    return 0;
}

// Raises every prunable layer to its target sparsity; the layers (each
// independent of the others) are shared over the OpenMP threads, and the
// error reported is that of the first failing layer.
int prune_mask_raise(net *nt, const prune_layers *pl, const double *target, const float *gabs,
                     prune_crit c, float *mom, sc_err *err) {
    int L = pl->n, *order = malloc((size_t)(L > 0 ? L : 1) * sizeof *order);
    int *rc = calloc((size_t)(L > 0 ? L : 1), sizeof *rc);
    sc_err *lerr = calloc((size_t)(L > 0 ? L : 1), sizeof *lerr);
    if (!order || !rc || !lerr) {
        free(order), free(rc), free(lerr);
        return sc_fail(err, "out of memory (%d layers)", L);
    }
    layers_by_size(pl, order);
    size_t maxn = (L > 0 ? pl->count[order[0]] : 0) * (pl->geom ? 3 : 2);  // scratch floats
#pragma omp parallel if (L > 1 && pl->total >= PAR_MIN)
    {
        float *scratch = malloc((maxn + 1) * sizeof *scratch);  // (maxn)
#pragma omp for schedule(dynamic, 1)
        for (int j = 0; j < L; j++) {
            int i = order[j];
            rc[i] = scratch ? mask_raise_one(nt, pl, i, target, gabs, c, mom, scratch, &lerr[i])
                            : sc_fail(&lerr[i], "out of memory (scratch of %zu floats)", maxn + 1);
        }
        free(scratch);
    }
    int bad = -1;
    for (int i = 0; i < L && bad < 0; i++)
        if (rc[i]) bad = i;
    if (bad >= 0 && err) *err = lerr[bad];
    free(order), free(rc), free(lerr);
    return bad >= 0 ? -1 : 0;
}

// Counts masked entries of prunable layers whose weight or momentum is not zero.
size_t prune_mask_violations(const net *nt, const prune_layers *pl, const float *mom) {
    size_t bad = 0;
    for (int l = 0; l < pl->n; l++) {
        size_t off = pl->offset[l];
        for (size_t i = off; i < off + pl->count[l]; i++) {
            if (nt->mask[i] != 0.0f) continue;
            bad += nt->param[i] != 0.0f || (mom && mom[i] != 0.0f);
        }
    }
    return bad;
}
