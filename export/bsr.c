// The storage plan of a layer: BSR of its kept blocks when its mask is on
// its pattern's block grid (hybrid patterns: plus a remainder of the single
// weights beside them), else CSR of its non-zeros (see bsr.h).
#include "export/bsr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Classifies block u of geometry g: 1 kept (all entries stored), 0 pruned,
// -1 neither (why filled unless NULL). idx: unit_size entries of scratch.
static int bsr_unit(const sc_pattern_geom *g, size_t u, const float *w, const float *mk,
                    const export_codebook *cb, size_t *idx, const char *name, char *why, size_t len) {
    sc_pattern_unit_entries(g, u, idx);
    size_t kept = 0, nz = 0;
    for (size_t j = 0; j < g->unit_size; j++) kept += mk[idx[j]] != 0.0f, nz += w[idx[j]] != 0.0f;
    if (kept == 0 && nz == 0) return 0;
    if (kept == g->unit_size && (nz == kept || !cb->use || cb->qidx)) return 1;
    if (!why) return -1;
    if (kept == 0 || kept == g->unit_size)
        snprintf(why, len, "layer %s: block %zu of %dx%d %s; stored as CSR", name, u, g->kb, g->cb,
                 kept ? "keeps a zero its derived codebook has no code for" : "is pruned but holds a non-zero weight");
    else
        snprintf(why, len, "layer %s: its mask is off its %dx%d block grid (block %zu keeps %zu of %zu); "
                 "stored as CSR", name, g->kb, g->cb, u, kept, g->unit_size);
    return -1;
}

// Marks the stored entries of a block layer in keep; 0 on the grid, 1 off it.
// hybrid: a block off the grid keeps its non-zero weights (the remainder)
// instead, and the layer stays on the grid.
static int bsr_blocks(const net *nt, const sparse_layer *l, const sc_pattern_geom *g,
                      const export_codebook *cb, int hybrid, float *keep, char *why, size_t len, sc_err *err) {
    const layer *L = &nt->layers[l->layer];
    const float *w = net_tensor_data(nt, L->weight), *mk = net_tensor_mask(nt, L->weight);
    size_t *idx = malloc(g->unit_size * sizeof *idx);  // (unit_size)
    if (!idx) return sc_fail(err, "out of memory");
    int off = 0;
    for (size_t u = 0; !off && u < g->units; u++) {
        int st = bsr_unit(g, u, w, mk, cb, idx, L->name, hybrid ? NULL : why, hybrid ? 0 : len);
        off = st < 0 && !hybrid;
        for (size_t j = 0; j < g->unit_size; j++)
            if (st > 0 || (st < 0 && w[idx[j]] != 0.0f)) keep[idx[j]] = 1.0f;
    }
    free(idx);
    return off;
}

// The storage plan of layer l (see bsr.h).
int export_bsr_plan(const net *nt, const sparse_layer *l, const sc_pattern *p,
                    const export_codebook *cb, float *keep, int *kb, int *cb_out, int *hybrid,
                    char *why, size_t len, sc_err *err) {
    const int t = nt->layers[l->layer].weight;
    const float *w = net_tensor_data(nt, t);
    const size_t count = nt->tensors[t].count;
    *kb = *cb_out = *hybrid = 0;
    sc_pattern_geom g;
    if (p) sc_pattern_geom_of(p, nt, t, &g);
    if (p && g.kind == PAT_BLOCK) {
        const int hy = g.rem > 0.0;  // KxC+F: whole blocks plus single weights beside them
        memset(keep, 0, count * sizeof *keep);
        char msg[320];
        int off = bsr_blocks(nt, l, &g, cb, hy, keep, msg, sizeof msg, err);
        if (off < 0) return -1;
        if (!off) {
            *kb = g.kb, *cb_out = g.cb, *hybrid = hy;
            return 0;
        }
        snprintf(why, len, "%s", msg);
    }
    for (size_t i = 0; i < count; i++) keep[i] = w[i] != 0.0f;
    return 0;
}
