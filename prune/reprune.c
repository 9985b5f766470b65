// Re-pruning onto a pattern: projection and its cost. See prune/reprune.h.
#include "reprune.h"

#include <stdlib.h>
#include <string.h>

#include "prune/floor.h"
#include "train/trainer.h"

// Validation accuracy (%) of the executor's net.
static int val_acc(exec *ex, const data_split *val, int batch, float smoothing, double *acc,
                   sc_err *err) {
    double loss;
    return train_evaluate(ex, val, batch, smoothing, acc, &loss, err);
}

// The projected layers' sparsities (capped at s_max) as floors, and their need.
static int floors_fill(prune_reprune *rp, const net *nt, const prune_layers *pl, double s_max,
                       sc_err *err) {
    rp->floors = malloc((size_t)(pl->n > 0 ? pl->n : 1) * sizeof *rp->floors);
    if (!rp->floors) return sc_fail(err, "out of memory");
    prune_sparsity_read(nt, pl, rp->floors);
    rp->sparsity_after = prune_sparsity_overall(pl, rp->floors);
    for (int l = 0; l < pl->n; l++)
        if (rp->floors[l] > s_max) rp->floors[l] = s_max;
    rp->need = prune_floor_need(pl, rp->floors);
    return 0;
}

// Projects when needed, with the accuracy before and after.
static int reprune_go(prune_reprune *rp, net *nt, exec *ex, const data_split *val, int batch,
                      float smoothing, prune_layers *pl, double s_max, sc_err *err) {
    rp->off_before = prune_mask_off_pattern(nt, pl);
    rp->sparsity_before = net_sparsity(nt);
    if (rp->off_before == 0 || rp->sparsity_before == 0.0) return 0;
    rp->active = 1;
    SC_TRY(val_acc(ex, val, batch, smoothing, &rp->val_before, err));
    SC_TRY(prune_mask_project(nt, pl, NULL, err));
    if (prune_mask_off_pattern(nt, pl) != 0) return sc_fail(err, "projection left weights off the pattern");
    SC_TRY(exec_write_net(ex, err));
    SC_TRY(val_acc(ex, val, batch, smoothing, &rp->val_projected, err));
    return floors_fill(rp, nt, pl, s_max, err);
}

// Projects nt onto p when it is pruned and off it.
int prune_reprune_start(prune_reprune *rp, net *nt, exec *ex, const data_split *val, int batch,
                        float smoothing, const sc_pattern *p, double s_max, sc_err *err) {
    prune_layers pl;
    memset(rp, 0, sizeof *rp);
    if (sc_pattern_is_unstructured(p)) return 0;
    SC_TRY(prune_layers_init(&pl, nt, err));
    int rc = prune_layers_set_pattern(&pl, nt, p, err);
    if (!rc) rc = reprune_go(rp, nt, ex, val, batch, smoothing, &pl, s_max, err);
    prune_layers_free(&pl);
    return rc;
}

// Frees the floors.
void prune_reprune_free(prune_reprune *rp) {
    free(rp->floors);
    memset(rp, 0, sizeof *rp);
}
