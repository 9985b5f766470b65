// Pruning masks: the prunable layers of a net, the per-weight coefficient of
// seed 001 (eq. 2: magnitude and current gradient weighted by alpha and
// beta), and per-layer sparsity targets turned into masks (eq. 3: in each
// layer the kept weights with the lowest coefficient are pruned until the
// layer has exactly round(target * count) zeros). Masks only grow: a pruned
// weight is never revived, and pruned weights and their momentum are zeroed.
#ifndef SC_PRUNE_MASK_H
#define SC_PRUNE_MASK_H

#include <stddef.h>

#include "runtime/error.h"
#include "runtime/net.h"
#include "runtime/pattern.h"

// --- the prunable layers ----------------------------------------------------

typedef struct {
    int n;            // prunable tensors (conv/linear weights except the first conv)
    int *tensor;      // (n) indices into net.tensors
    size_t *count;    // (n) elements of each
    size_t *offset;   // (n) offset of each in net.param / net.mask
    size_t total;     // sum of count
    sc_pattern_geom *geom;  // (n) each layer's pattern (prune_layers_set_pattern), or
                            // NULL: unstructured
} prune_layers;

// Collects the net's prunable tensors; fails when there are none.
int prune_layers_init(prune_layers *pl, const net *nt, sc_err *err);
// Frees what prune_layers_init allocated and zeroes pl.
void prune_layers_free(prune_layers *pl);
// Puts the layers under pattern p (runtime/pattern.h): from then on every
// raise keeps each layer's mask on its own block or N:M pattern. The
// unstructured pattern leaves pl as prune_layers_init made it.
int prune_layers_set_pattern(prune_layers *pl, const net *nt, const sc_pattern *p, sc_err *err);

// Zeros in a mask of n entries.
size_t prune_mask_zeros(const float *mask, size_t n);
// Fraction of pruned entries of prunable layer i.
double prune_layer_sparsity(const net *nt, const prune_layers *pl, int i);
// Per-layer sparsities of a net into s (pl->n).
void prune_sparsity_read(const net *nt, const prune_layers *pl, double *s);
// Overall sparsity of per-layer sparsities s, weighted by layer size.
double prune_sparsity_overall(const prune_layers *pl, const double *s);
// Zeros a layer of `count` weights must have for sparsity s: round(s * count).
size_t prune_target_zeros(size_t count, double s);

// --- criterion (eq. 2) ------------------------------------------------------

typedef struct {
    float alpha;  // weight of |w| / mean |w| over the layer's kept weights
    float beta;   // weight of |g| / mean |g| over the layer's kept weights
} prune_crit;

// Coefficient of every kept entry of one layer (n entries): alpha * |w| / mean|w|
// + beta * |g| / mean|g|, means over kept entries; gabs (mean |gradient|) may be
// NULL. Pruned entries get +inf. Fails on a non-finite weight or gradient.
int prune_coef(const float *w, const float *gabs, const float *mask, size_t n, prune_crit c,
               float *coef, sc_err *err);

// --- masks (eq. 3) ----------------------------------------------------------

// Raises one layer to `zeros` pruned entries (no-op when it already has as
// many): prunes the kept entries with the lowest coefficient, ties broken by
// position. Zeroes the pruned weights and, when mom is not NULL, their
// momentum. scratch holds 2 * n floats.
int prune_layer_raise(float *w, float *mask, float *mom, const float *gabs, size_t n,
                      size_t zeros, prune_crit c, float *scratch, sc_err *err);

// The same for a layer under a block or N:M pattern g (docs/prune.md,
// "Patterns"): blocks by the sum of their entries' coefficients, lowest
// first, until the layer has at least `zeros` (a whole number of blocks);
// N:M: when `enforce`, first the lowest entries of every group past its N
// kept, then single entries by coefficient up to `zeros`. scratch holds
// 3 * n floats.
int prune_layer_raise_pattern(const sc_pattern_geom *g, float *w, float *mask, float *mom,
                              const float *gabs, size_t n, size_t zeros, int enforce,
                              prune_crit c, float *scratch, sc_err *err);

// Raises every prunable layer i of nt to sparsity target[i] (masks only grow;
// under a pattern, prune_layer_raise_pattern, N:M enforced when target[i] > 0);
// gabs and mom are (nparam) arrays or NULL.
int prune_mask_raise(net *nt, const prune_layers *pl, const double *target, const float *gabs,
                     prune_crit c, float *mom, sc_err *err);

// Counts prunable weights that are non-zero although masked (0 when the
// invariant holds); mom (nparam) may be NULL.
size_t prune_mask_violations(const net *nt, const prune_layers *pl, const float *mom);

// --- patterns ---------------------------------------------------------------

// The k-th smallest value (0-based) of a[0..m) (quickselect; reorders a,
// which holds no NaN).
float prune_select_kth(float *a, size_t m, size_t k);

// Puts every layer under a pattern back on it at its sparsity: its mask is
// reset to all kept (pruned weights revive at 0) and raised by magnitude to
// the zeros it had (whole blocks: rounded up), keeping the blocks with the
// largest |w| sum (N:M: each group's largest, then the largest overall; a
// dense N:M layer goes to N per group). Layers on their pattern and
// unstructured layers are untouched. mom (nparam) may be NULL.
int prune_mask_project(net *nt, const prune_layers *pl, float *mom, sc_err *err);

// Entries of the prunable layers that break their pattern (0: all on it).
size_t prune_mask_off_pattern(const net *nt, const prune_layers *pl);

#endif
