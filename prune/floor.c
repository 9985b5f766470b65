// Per-layer sparsity floors from --layer-floor SPEC. See prune/floor.h.
#include "floor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- parsing ------------------------------------------------------------------

// Adds one PREFIX=X item (net_prefix_items' callback) to the prune_floor_spec ctx.
static int item_add(void *ctx, const char *prefix, size_t plen, const char *value, sc_err *err) {
    prune_floor_spec *fs = ctx;
    char *end;
    double v = strtod(value, &end);
    if (!*value || end == value || *end)
        return sc_fail(err, "not a number in item '%.*s=%s'", (int)plen, prefix, value);
    if (!(v >= 0.0 && v <= PRUNE_FLOOR_MAX))
        return sc_fail(err, "floor outside [0, %g] in item '%.*s=%s'", PRUNE_FLOOR_MAX, (int)plen, prefix, value);
    char **p = realloc(fs->prefix, (size_t)(fs->n + 1) * sizeof *p);
    if (p) fs->prefix = p;
    double *x = realloc(fs->value, (size_t)(fs->n + 1) * sizeof *x);
    if (x) fs->value = x;
    char *name = p && x ? strndup(prefix, plen) : NULL;
    if (!name) return sc_fail(err, "out of memory");
    fs->prefix[fs->n] = name;
    fs->value[fs->n++] = v;
    return 0;
}

// Parses SPEC's items (net_prefix_items: no bare item).
int prune_floor_parse(const char *spec, prune_floor_spec *fs, sc_err *err) {
    memset(fs, 0, sizeof *fs);
    if (net_prefix_items(spec, 0, item_add, fs, err)) {
        prune_floor_spec_free(fs);
        return -1;
    }
    return 0;
}

// Frees the prefixes and values.
void prune_floor_spec_free(prune_floor_spec *fs) {
    for (int k = 0; k < fs->n; k++) free(fs->prefix[k]);
    free(fs->prefix);
    free(fs->value);
    memset(fs, 0, sizeof *fs);
}

// --- resolution and budget ------------------------------------------------------

// Longest-prefix match of every prunable layer's name.
int prune_floor_resolve(const prune_floor_spec *fs, const net *nt, const prune_layers *pl,
                        double dflt, double *floor, sc_err *err) {
    const char *const *pfx = (const char *const *)fs->prefix;
    for (int l = 0; l < pl->n; l++) {
        const int best = net_prefix_longest(nt->tensors[pl->tensor[l]].name, pfx, fs->n);
        floor[l] = best >= 0 ? fs->value[best] : dflt;
    }
    const int k = net_prefix_unmatched(nt, pfx, fs->n);
    return k < 0 ? 0 : sc_fail(err, "prefix '%s' matches no prunable layer of %s", fs->prefix[k], nt->arch);
}

// Share of the prunable weights the floors prune.
double prune_floor_need(const prune_layers *pl, const double *floor) {
    double sum = 0.0;
    for (int l = 0; l < pl->n; l++) sum += floor[l] * (double)pl->count[l];
    return pl->total ? sum / (double)pl->total : 0.0;
}

// The floors must fit the target (with a tolerance for rounding).
int prune_floor_budget(const prune_layers *pl, const double *floor, double target, sc_err *err) {
    double need = prune_floor_need(pl, floor);
    if (need <= target + 1e-12) return 0;
    return sc_fail(err, "the floors need an overall sparsity of at least %.4f, above the target %g "
                   "(raise --target-sparsity or lower the floors)", ceil(need * 1e4) / 1e4, target);
}
