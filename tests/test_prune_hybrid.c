// Tests of the hybrid pattern KxC+F (runtime/pattern.h, prune/mask_pattern.c):
// parsing, the raise (exact zeros, whole blocks kept by summed coefficient,
// at most floor(F x kept) singles, the singles kept by coefficient, masks
// only grow), the singles and violation counts, whole-net raises and the
// projection of an unstructured mask.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prune/mask.h"
#include "runtime/net.h"
#include "runtime/pattern.h"
#include "runtime/rng.h"
#include "tests/prune_testutil.h"

// --- parsing ------------------------------------------------------------------

// "KxC+F" parses to the block and share and prints back the same; bad
// shares and a share after N:M are refused with a message naming the string.
static void test_parse(tctx *t) {
    const char *good[] = {"16x8+0.2", "4x2+0.05", "8x1+0.5", "16x8+0.999"};
    for (int i = 0; i < 4; i++) {
        sc_pattern p;
        char back[32];
        sc_err err = {0};
        CHECK(t, sc_pattern_parse(good[i], &p, &err) == 0 && p.dflt.kind == PAT_BLOCK && p.dflt.rem > 0.0, "%s: %s",
              good[i], err.msg);
        sc_pattern_format(&p, back, sizeof back);
        CHECK(t, !strcmp(back, good[i]), "%s printed as %s", good[i], back);
    }
    sc_pattern p;
    CHECK(t, sc_pattern_parse("16x8+0.2", &p, NULL) == 0 && p.dflt.k == 16 && p.dflt.c == 8 && p.dflt.rem == 0.2, "16x8+0.2");
    CHECK(t, sc_pattern_parse("16x8", &p, NULL) == 0 && p.dflt.rem == 0.0, "16x8 has a share");
    const char *bad[] = {"16x8+", "16x8+0", "16x8+1", "16x8+1.5", "16x8+-0.1", "16x8++0.1", "2:4+0.2",
                         "16x8+0.2 ", "+0.2", "16x8+ 0.2", "16x8+abc", "1x1+0.2", "16x8+0.2+0.1"};
    for (int i = 0; i < 13; i++) {
        sc_err err = {0};
        CHECK(t, sc_pattern_parse(bad[i], &p, &err) != 0, "accepted '%s'", bad[i]);
        CHECK(t, strstr(err.msg, bad[i]) != NULL, "message '%s' lacks '%s'", err.msg, bad[i]);
    }
}

// --- counts -----------------------------------------------------------------------

// A (32, 16, 9) layer at 16x8+0.2 with two whole blocks and 100 singles:
// 100 singles, floor(0.2 x 356) = 71 allowed, 29 off the pattern; without
// the share all 100 are.
static void test_counts(tctx *t) {
    sc_pattern p;
    sc_pattern_parse("16x8+0.2", &p, NULL);
    sc_pattern_geom g = {.kind = PAT_BLOCK, .K = 32, .C = 16, .RS = 9, .kb = 16, .cb = 8, .rem = 0.2};
    g.unit_size = 128, g.units = 32 * 16 * 9 / 128;
    size_t n = 32 * 16 * 9, idx[128];
    float *m = calloc(n, sizeof *m);
    for (size_t u = 0; u < 2; u++) {
        sc_pattern_unit_entries(&g, 5 + 7 * u, idx);
        for (size_t j = 0; j < 128; j++) m[idx[j]] = 1.0f;
    }
    size_t singles = 0;
    for (size_t i = 0; singles < 100; i += 37)  // entries of blocks other than 5 and 12
        if (m[i] == 0.0f && sc_pattern_unit_of(&g, i) != 5 && sc_pattern_unit_of(&g, i) != 12) m[i] = 1, singles++;
    CHECK(t, sc_pattern_singles(&g, m) == 100, "singles %zu", sc_pattern_singles(&g, m));
    CHECK(t, sc_pattern_singles_max(&g, 356) == 71, "max %zu", sc_pattern_singles_max(&g, 356));
    CHECK(t, sc_pattern_violations(&g, m) == 29, "violations %zu", sc_pattern_violations(&g, m));
    g.rem = 0.0;
    CHECK(t, sc_pattern_violations(&g, m) == 100, "violations without a share %zu", sc_pattern_violations(&g, m));
    free(m);
}

// --- the raise -------------------------------------------------------------------

// Whether every entry of unit u is kept in m.
static int unit_full(const sc_pattern_geom *g, size_t u, const float *m, size_t *idx) {
    sc_pattern_unit_entries(g, u, idx);
    for (size_t j = 0; j < g->unit_size; j++)
        if (m[idx[j]] == 0.0f) return 0;
    return 1;
}

// Checks one hybrid raise from mask m0 (coefficients coef of that state) to
// mask m for `want` zeros: masks only grow; whole blocks a subset of m0's, as
// many as leave room for floor(F x kept) singles (at most kept / U), the kept
// ones the highest by summed coefficient; then kept - blocks x U singles, at
// most floor(F / (1 - F) x the blocks' weights), the highest by coefficient.
static void check_raise(tctx *t, const sc_pattern_geom *g, const float *m0, const float *m,
                        const float *coef, size_t n, size_t want, int step) {
    size_t U = g->unit_size, kept = n - want, idx[512], full0 = 0, full = 0;
    for (size_t u = 0; u < g->units; u++) full0 += unit_full(g, u, m0, idx);
    size_t blocks = (kept - sc_pattern_singles_max(g, kept) + U - 1) / U;
    if (blocks > full0) blocks = full0;
    if (blocks * U > kept) blocks = kept / U;
    size_t cap = (size_t)floor(g->rem / (1.0 - g->rem) * (double)(blocks * U) + 1e-9);
    size_t singles = kept - blocks * U < cap ? kept - blocks * U : cap;
    size_t z = prune_mask_zeros(m, n);
    CHECK(t, z == n - blocks * U - singles && z >= want, "step %d: zeros %zu want %zu", step, z, want);
    double lo_kept = INFINITY, hi_gone = -INFINITY;
    for (size_t u = 0; u < g->units; u++) {
        if (!unit_full(g, u, m0, idx)) {
            CHECK(t, !unit_full(g, u, m, idx), "step %d: block %zu re-formed", step, u);
            continue;
        }
        double s = 0.0;
        for (size_t j = 0; j < U; j++) s += coef[idx[j]];
        if (unit_full(g, u, m, idx)) full++, lo_kept = fmin(lo_kept, s);
        else hi_gone = fmax(hi_gone, s);
    }
    CHECK(t, full == blocks, "step %d: %zu whole blocks, want %zu", step, full, blocks);
    CHECK(t, lo_kept >= hi_gone - 1e-4 * fabs(hi_gone), "step %d: kept block %g < given-up %g", step, lo_kept, hi_gone);
    CHECK(t, sc_pattern_singles(g, m) == singles && sc_pattern_violations(g, m) == 0,
          "step %d: %zu singles, want %zu", step, sc_pattern_singles(g, m), singles);
    double lo_single = INFINITY, hi_pruned = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        CHECK(t, m[i] == 0.0f || m0[i] != 0.0f, "step %d: entry %zu revived", step, i);
        if (m0[i] == 0.0f || unit_full(g, sc_pattern_unit_of(g, i), m, idx)) continue;
        if (m[i] != 0.0f) lo_single = fmin(lo_single, coef[i]);
        else hi_pruned = fmax(hi_pruned, coef[i]);
    }
    CHECK(t, lo_single >= hi_pruned - 1e-6, "step %d: kept single %g < pruned %g", step, lo_single, hi_pruned);
}

// Random hybrid raises of a (32, 16, 9) layer at 16x8+0.2 with gradients in
// the coefficient, from dense to 0.97 in steps; pruned weights and momentum zeroed.
static void test_raise_random(tctx *t) {
    rng r;
    rng_seed(&r, 21, 0);
    sc_pattern_geom g = {.kind = PAT_BLOCK, .K = 32, .C = 16, .RS = 9, .kb = 16, .cb = 8, .rem = 0.2};
    size_t n = 32 * 16 * 9;
    g.unit_size = 128, g.units = n / 128;
    float *w = malloc(n * 4), *m = malloc(n * 4), *m0 = malloc(n * 4), *gr = malloc(n * 4);
    float *scr = malloc(3 * n * 4), *coef = malloc(n * 4), *mom = malloc(n * 4);
    for (size_t i = 0; i < n; i++) w[i] = rng_normal(&r), gr[i] = fabsf(rng_normal(&r)), m[i] = 1, mom[i] = 1;
    prune_crit c = {.alpha = 1.0f, .beta = 0.5f};
    const double steps[] = {0.3, 0.6, 0.8, 0.9, 0.95, 0.97};
    for (int step = 0; step < 6; step++) {
        size_t want = prune_target_zeros(n, steps[step]);
        memcpy(m0, m, n * 4);
        prune_coef(w, gr, m, n, c, coef, NULL);
        sc_err err = {0};
        CHECK(t, prune_layer_raise_pattern(&g, w, m, mom, gr, n, want, 1, c, scr, &err) == 0, "%s", err.msg);
        check_raise(t, &g, m0, m, coef, n, want, step);
        for (size_t i = 0; i < n; i++)
            if (m[i] == 0.0f) CHECK(t, w[i] == 0.0f && mom[i] == 0.0f, "entry %zu not zeroed", i);
    }
    free(w), free(m), free(m0), free(gr), free(scr), free(coef), free(mom);
}

// --- whole nets -------------------------------------------------------------------

// Whole-net raises at 4x2+0.25 reach every layer's target (within a block)
// and stay on the pattern; the projection of an unstructured mask keeps each
// layer's sparsity (within a block) and puts it on the pattern.
static void test_net(tctx *t) {
    net *nt = lenet_random(t, 23);
    if (!nt) return;
    prune_layers pl;
    sc_pattern p;
    sc_err err = {0};
    sc_pattern_parse("4x2+0.25", &p, NULL);
    prune_layers_init(&pl, nt, &err);
    double tgt[4] = {0, 0, 0, 0}, s[4];
    for (int step = 0; step < 4; step++) {
        for (int l = 0; l < 4; l++) tgt[l] = fmin(0.97, tgt[l] + 0.15 + 0.05 * l);
        if (step == 2) {  // from here on the pattern: project what the unstructured raises left
            double before[4];
            prune_sparsity_read(nt, &pl, before);
            CHECK(t, prune_layers_set_pattern(&pl, nt, &p, &err) == 0, "%s", err.msg);
            CHECK(t, prune_mask_off_pattern(nt, &pl) > 0, "random mask already on 4x2+0.25");
            CHECK(t, prune_mask_project(nt, &pl, NULL, &err) == 0, "%s", err.msg);
            prune_sparsity_read(nt, &pl, s);
            for (int l = 0; l < 4; l++)
                CHECK(t, s[l] >= before[l] && (s[l] - before[l]) * pl.count[l] < pl.geom[l].unit_size,
                      "layer %d projected %g -> %g", l, before[l], s[l]);
            CHECK(t, prune_mask_off_pattern(nt, &pl) == 0, "projection off the pattern");
        }
        CHECK(t, prune_mask_raise(nt, &pl, tgt, NULL, (prune_crit){1, 0}, NULL, &err) == 0, "%s", err.msg);
        CHECK(t, prune_mask_off_pattern(nt, &pl) == 0, "off the pattern at step %d", step);
        for (int l = 0; l < 4; l++) {
            size_t z = prune_mask_zeros(nt->mask + pl.offset[l], pl.count[l]), want = prune_target_zeros(pl.count[l], tgt[l]);
            size_t U = pl.geom ? pl.geom[l].unit_size : 1;
            CHECK(t, z >= want && z - want < U, "step %d layer %d: %zu zeros for %zu", step, l, z, want);
        }
    }
    CHECK(t, prune_mask_violations(nt, &pl, NULL) == 0, "pruned weights not zero");
    prune_layers_free(&pl);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_prune_hybrid"};
    RUN(&t, test_parse);
    RUN(&t, test_counts);
    RUN(&t, test_raise_random);
    RUN(&t, test_net);
    return check_finish(&t);
}
