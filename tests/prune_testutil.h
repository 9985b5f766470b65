// Helpers of the prune tests (tests/test_prune_*.c): a fake list of prunable
// layers of given sizes, lenet with its real list, and lenet with random weights.
#ifndef SC_TESTS_PRUNE_TESTUTIL_H
#define SC_TESTS_PRUNE_TESTUTIL_H

#include <stdlib.h>

#include "prune/mask.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/check.h"

// A fake layer list of L layers with the given sizes (no net needed).
static inline prune_layers fake_layers(int L, const size_t *count) {
    size_t n = L > 0 ? (size_t)L : 0;
    prune_layers pl = {.n = L};
    pl.tensor = calloc(n, sizeof *pl.tensor);
    pl.count = calloc(n, sizeof *pl.count);
    pl.offset = calloc(n, sizeof *pl.offset);
    for (int l = 0; l < L; l++) {
        pl.count[l] = count[l];
        pl.offset[l] = pl.total;
        pl.total += count[l];
    }
    return pl;
}

// lenet on 32x32 images and 10 classes with its prunable layers in *pl;
// NULL (a failed check) when either fails.
static inline net *lenet_layers(tctx *t, prune_layers *pl) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    if (nt && prune_layers_init(pl, nt, &err) == 0) return nt;
    CHECK(t, 0, "lenet: %s", err.msg);
    net_free(nt);
    return NULL;
}

// lenet on 32x32 images and 10 classes with random weights (seeded);
// NULL (a failed check) on error.
static inline net *lenet_random(tctx *t, uint64_t seed) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return NULL;
    rng r;
    rng_seed(&r, seed, 0);
    net_init_weights(nt, &r);
    return nt;
}

#endif
