// Which entries `export` stores for a layer, and whether as BSR
// (docs/export-format.md): a layer whose weight the model's pattern cuts
// into KxC blocks (runtime/pattern.h: the layer's own block, narrowed to
// the gcd with its channels) is stored as BSR when its mask is on that block
// grid (every block all kept or all pruned) and no weight outside the kept
// blocks is non-zero; it then stores every entry of its kept blocks (a kept
// weight that is zero as an explicit zero). Any other layer (unstructured,
// N:M, off its grid) is stored as CSR of its non-zero weights. A layer of
// a hybrid pattern (KxC+F) is stored as BSR of its whole kept blocks plus a
// remainder: its other non-zero weights (the singles, and the non-zero
// entries of a block whose kept zero a derived codebook cannot code).
#ifndef SC_EXPORT_BSR_H
#define SC_EXPORT_BSR_H

#include <stddef.h>

#include "export/codebook.h"
#include "runtime/pattern.h"
#include "runtime/sparse_model.h"

// Fills keep (one float per weight of l's weight tensor, (K, C, R, S)
// order) with 1 for the entries l stores and 0 elsewhere, and *kb, *cb with
// its block (0 when stored as CSR), *hybrid 1 when the layer's other
// entries form a remainder (sparse_bsr_build's hybrid). p NULL: CSR. A block layer that falls
// back to CSR gets the reason in why (len bytes; else why is left alone): a
// block partly kept, a non-zero weight in a pruned block, or a kept zero in
// a codebook layer whose codebook has no code for it (derived codebooks).
int export_bsr_plan(const net *nt, const sparse_layer *l, const sc_pattern *p,
                    const export_codebook *cb, float *keep, int *kb, int *cb_out, int *hybrid,
                    char *why, size_t len, sc_err *err);

#endif
