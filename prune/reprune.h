// Re-pruning an unstructured model onto a pattern (Rumi et al., "Accelerating
// Sparse CNN Inference on GPUs with Performance-Aware Weight Pruning", PACT
// 2020: keep the dense blocks, re-prune the rest): when `prune --from` gets a
// pruned model whose masks are off the asked pattern, every layer is
// projected onto it at its own sparsity (prune_mask_project: the blocks of
// largest |w| sum stay), and the run that follows fine-tunes it with those
// per-layer sparsities as floors (and prunes further when the target asks
// for more). The validation accuracy before and after the projection is
// kept for the report; the run's own result is the figure after fine-tuning.
#ifndef SC_PRUNE_REPRUNE_H
#define SC_PRUNE_REPRUNE_H

#include <stddef.h>

#include "datasets/cifar.h"
#include "prune/mask.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/pattern.h"

typedef struct {
    int active;              // 1: the start model was pruned off the pattern and projected
    double val_before;       // validation accuracy (%) of the start model
    double val_projected;    // ... right after the projection
    double sparsity_before;  // overall sparsity of the pruned layers before / after
    double sparsity_after;
    size_t off_before;       // weights off the pattern in the start model
    double *floors;          // (L) each pruned layer's sparsity after the projection,
                             // capped at s_max (the run's per-layer floors; owned)
    double need;             // the overall sparsity the floors make (prune_floor_need)
} prune_reprune;

// Projects nt (held by executor ex, which gets the new state) onto pattern
// p when nt is pruned and off it, evaluating the validation split before
// and after (batch images per step, label smoothing as the run's); leaves
// rp->active 0 and nt untouched otherwise.
int prune_reprune_start(prune_reprune *rp, net *nt, exec *ex, const data_split *val, int batch,
                        float smoothing, const sc_pattern *p, double s_max, sc_err *err);

// Frees rp's floors and zeroes it.
void prune_reprune_free(prune_reprune *rp);

#endif
