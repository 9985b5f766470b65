// Per-layer sparsity floors (--layer-floor SPEC, docs/prune.md "Per-layer
// floors"): SPEC is a comma-separated list of PREFIX=X; each prunable layer
// gets the X of the longest PREFIX its tensor name starts with, else the
// default (--min-layer-sparsity). A floor may be above the overall target
// (up to PRUNE_FLOOR_MAX) as long as the floors fit it: sum_l floor_l *
// count_l <= target * total.
#ifndef SC_PRUNE_FLOOR_H
#define SC_PRUNE_FLOOR_H

#include "prune/mask.h"
#include "runtime/error.h"
#include "runtime/net.h"

// Highest floor of one layer (evolve's s_max).
#define PRUNE_FLOOR_MAX 0.995

typedef struct {
    int n;          // entries
    char **prefix;  // (n) tensor-name prefixes
    double *value;  // (n) their floors, in [0, PRUNE_FLOOR_MAX]
} prune_floor_spec;

// Parses SPEC into fs; fails (message naming the item) on an item without
// '=', an empty prefix, a value that is not a number or outside [0,
// PRUNE_FLOOR_MAX], a prefix given twice or an empty SPEC (net_prefix_items).
int prune_floor_parse(const char *spec, prune_floor_spec *fs, sc_err *err);
// Frees what prune_floor_parse allocated and zeroes fs.
void prune_floor_spec_free(prune_floor_spec *fs);

// Floor of every prunable layer into floor (pl->n): the value of the longest
// prefix of its tensor name in fs, else dflt. Fails naming a prefix that
// matches no prunable layer.
int prune_floor_resolve(const prune_floor_spec *fs, const net *nt, const prune_layers *pl,
                        double dflt, double *floor, sc_err *err);

// Overall sparsity the floors alone need: sum floor_l * count_l / total.
double prune_floor_need(const prune_layers *pl, const double *floor);

// Checks that the floors (pl->n) fit the target: prune_floor_need <= target
// (up to rounding); fails naming the overall sparsity they need.
int prune_floor_budget(const prune_layers *pl, const double *floor, double target, sc_err *err);

#endif
