// Tests of pruning patterns (runtime/pattern.h, prune/mask_pattern.c):
// parsing, per-layer geometry and fallbacks, block raises by summed
// coefficient (every block all kept or all pruned), N:M raises (at most N
// kept per group), the projection of an unstructured mask, and the
// unstructured pattern giving the same bits as no pattern.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "prune/mask.h"
#include "runtime/model_io.h"
#include "runtime/net.h"
#include "runtime/pattern.h"
#include "runtime/rng.h"
#include "tests/prune_testutil.h"

// --- helpers ----------------------------------------------------------------

// A hand-made geometry of a (K, C, RS) tensor.
static sc_pattern_geom geom_make(sc_pattern_kind kind, int K, int C, int RS, int kb, int cb, int n) {
    sc_pattern_geom g = {.kind = kind, .K = K, .C = C, .RS = RS, .kb = kb, .cb = cb};
    g.unit_size = (size_t)kb * (size_t)cb;
    g.units = (size_t)K * (size_t)C * (size_t)RS / g.unit_size;
    if (kind == PAT_NM) g.n = n, g.m = cb;
    return g;
}

// Unit scores and their ranks for the reference: (score, unit).
typedef struct {
    double s;
    size_t u;
} su_pair;

// Compares two (score, unit) pairs.
static int su_cmp(const void *a, const void *b) {
    const su_pair *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return x->u < y->u ? -1 : x->u > y->u;
}

// --- parsing and geometry ---------------------------------------------------

// Good pattern strings parse to their fields and print back the same.
static void test_parse_good(tctx *t) {
    const char *in[] = {"unstructured", "8x1", "16x1", "16x8", "1x4", "2:4", "1:2", "4:8"};
    for (int i = 0; i < 8; i++) {
        sc_pattern p;
        char back[32];
        sc_err err = {0};
        CHECK(t, sc_pattern_parse(in[i], &p, &err) == 0, "%s: %s", in[i], err.msg);
        sc_pattern_format(&p, back, sizeof back);
        CHECK(t, !strcmp(back, in[i]), "%s printed as %s", in[i], back);
    }
    sc_pattern p;
    CHECK(t, sc_pattern_parse("16x8", &p, NULL) == 0 && p.dflt.kind == PAT_BLOCK && p.dflt.k == 16 && p.dflt.c == 8, "16x8");
    CHECK(t, sc_pattern_parse("2:4", &p, NULL) == 0 && p.dflt.kind == PAT_NM && p.dflt.n == 2 && p.dflt.m == 4, "2:4");
}

// Bad pattern strings are refused with a message naming them.
static void test_parse_bad(tctx *t) {
    const char *in[] = {"", "x", "8x", "x8", "0x4", "1x1", "300x1", "8x1x2", "-8x1", "8X1",
                        "2:2", "3:2", "0:4", "2:", ":4", "2:4:8", "2:64", "abc", "8 x1", "8x1 "};
    for (int i = 0; i < 20; i++) {
        sc_pattern p;
        sc_err err = {0};
        CHECK(t, sc_pattern_parse(in[i], &p, &err) != 0, "accepted '%s'", in[i]);
        CHECK(t, strstr(err.msg, in[i]) != NULL, "message '%s' lacks '%s'", err.msg, in[i]);
    }
}

// Layer geometry: blocks narrowed to the gcd with the layer's channels,
// N:M layers whose C is not a multiple of M left unstructured.
static void test_geometry(tctx *t) {
    net *nt = lenet_random(t, 1);
    if (!nt) return;
    int conv2 = net_tensor_find(nt, "conv2.weight"), fc3 = net_tensor_find(nt, "fc3.weight");
    sc_pattern p;
    sc_pattern_geom g;
    sc_pattern_parse("16x8", &p, NULL);
    sc_pattern_geom_of(&p, nt, conv2, &g);  // (16, 6, 5, 5)
    CHECK(t, g.kind == PAT_BLOCK && g.kb == 16 && g.cb == 2 && g.fallback, "conv2 %dx%d", g.kb, g.cb);
    CHECK(t, g.units == 3 * 25 && g.unit_size == 32 && g.RS == 25, "conv2 units %zu", g.units);
    sc_pattern_geom_of(&p, nt, fc3, &g);  // (10, 84)
    CHECK(t, g.kb == 2 && g.cb == 4 && g.units == 5 * 21 && g.RS == 1, "fc3 %dx%d", g.kb, g.cb);
    sc_pattern_parse("2:4", &p, NULL);
    sc_pattern_geom_of(&p, nt, conv2, &g);
    CHECK(t, g.kind == PAT_UNSTRUCTURED && g.fallback && g.units == 2400, "conv2 under 2:4");
    sc_pattern_geom_of(&p, nt, fc3, &g);
    CHECK(t, g.kind == PAT_NM && !g.fallback && g.units == 10 * 21 && g.n == 2, "fc3 under 2:4");
    char text[32];
    sc_pattern_geom_format(&g, text, sizeof text);
    CHECK(t, !strcmp(text, "2:4"), "%s", text);
    net_free(nt);
}

// Every entry belongs to exactly one unit and unit_entries lists it there.
static void test_units(tctx *t) {
    sc_pattern_geom g = geom_make(PAT_BLOCK, 8, 6, 9, 4, 3, 0);
    size_t n = 8 * 6 * 9, idx[12];
    int *seen = calloc(n, sizeof *seen);
    for (size_t u = 0; u < g.units; u++) {
        sc_pattern_unit_entries(&g, u, idx);
        for (size_t j = 0; j < g.unit_size; j++) {
            seen[idx[j]]++;
            CHECK(t, sc_pattern_unit_of(&g, idx[j]) == u, "entry %zu", idx[j]);
            size_t c = (idx[j] / 9) % 6, k = idx[j] / 54;
            CHECK(t, idx[j] % 9 == idx[0] % 9, "unit %zu spans taps", u);
            CHECK(t, k / 4 == idx[0] / 54 / 4 && c / 3 == (idx[0] / 9) % 6 / 3, "unit %zu", u);
        }
    }
    for (size_t i = 0; i < n; i++) CHECK(t, seen[i] == 1, "entry %zu in %d units", i, seen[i]);
    free(seen);
}

// The busiest block row by hand: (K 8, C 6, RS 9) in 4x3 blocks, rows of 2 x 9 blocks.
static void test_row_max(tctx *t) {
    sc_pattern_geom g = geom_make(PAT_BLOCK, 8, 6, 9, 4, 3, 0);
    size_t n = 8 * 6 * 9, idx[12];
    float *m = calloc(n, sizeof *m);
    CHECK(t, sc_pattern_row_max_kept(&g, m) == 0, "empty mask");
    const size_t keep[] = {0, 5, 17, 20, 21};  // three blocks of row 0, two of row 1
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        sc_pattern_unit_entries(&g, keep[i], idx);
        m[idx[i % g.unit_size]] = 1.0f;  // one kept entry is enough
    }
    CHECK(t, sc_pattern_row_max_kept(&g, m) == 3, "row max %zu, want 3", sc_pattern_row_max_kept(&g, m));
    CHECK(t, sc_pattern_units_kept(&g, m) == 5, "kept %zu", sc_pattern_units_kept(&g, m));
    sc_pattern_geom u = geom_make(PAT_NM, 8, 8, 1, 1, 4, 2);
    CHECK(t, sc_pattern_row_max_kept(&u, m) == 0, "not a block layer");
    free(m);
}

// --- raises -------------------------------------------------------------------

// Block raise by hand: the block with the smallest sum goes first even
// when another block holds the smallest single weight.
static void test_block_sum_hand(tctx *t) {
    // (K 2, C 2, RS 1) with 1x2 blocks: block 0 = {w0, w1}, block 1 = {w2, w3}.
    float w[4] = {0.1f, 10.0f, 1.0f, 1.0f}, m[4] = {1, 1, 1, 1}, scr[12];
    sc_pattern_geom g = geom_make(PAT_BLOCK, 2, 2, 1, 1, 2, 0);
    sc_err err = {0};
    CHECK(t, prune_layer_raise_pattern(&g, w, m, NULL, NULL, 4, 1, 1, (prune_crit){1.0f, 0.0f}, scr,
                                       &err) == 0, "%s", err.msg);
    CHECK(t, m[0] == 1 && m[1] == 1 && m[2] == 0 && m[3] == 0, "masks %g %g %g %g", m[0], m[1], m[2], m[3]);
    CHECK(t, w[2] == 0.0f && w[3] == 0.0f && w[0] == 0.1f, "weights not zeroed");
}

// Random block raises: whole blocks, zeros rounded up to a whole number of
// blocks, the pruned blocks the lowest by summed coefficient, masks only grow.
static void test_block_raise_random(tctx *t) {
    rng r;
    rng_seed(&r, 3, 0);
    sc_pattern_geom g = geom_make(PAT_BLOCK, 16, 12, 9, 4, 3, 0);
    size_t n = 16 * 12 * 9, U = g.unit_size, idx[12];
    float *w = malloc(n * 4), *m = malloc(n * 4), *gr = malloc(n * 4), *scr = malloc(3 * n * 4);
    float *coef = malloc(n * 4), *mom = malloc(n * 4);
    su_pair *ref = malloc(g.units * sizeof *ref);
    for (size_t i = 0; i < n; i++) w[i] = rng_normal(&r), gr[i] = fabsf(rng_normal(&r)), m[i] = 1, mom[i] = 1;
    prune_crit c = {.alpha = 1.0f, .beta = 0.5f};
    double s = 0.0;
    for (int step = 0; step < 5; step++) {
        s = fmin(0.99, s + 0.2);
        size_t want = prune_target_zeros(n, s), have = prune_mask_zeros(m, n), k = 0;
        prune_coef(w, gr, m, n, c, coef, NULL);
        for (size_t u = 0; u < g.units; u++) {
            sc_pattern_unit_entries(&g, u, idx);
            double sum = 0.0;
            for (size_t j = 0; j < U; j++) sum += coef[idx[j]];
            if (m[idx[0]] != 0.0f) ref[k++] = (su_pair){sum, u};
        }
        qsort(ref, k, sizeof *ref, su_cmp);
        sc_err err = {0};
        CHECK(t, prune_layer_raise_pattern(&g, w, m, mom, gr, n, want, 1, c, scr, &err) == 0, "%s", err.msg);
        size_t z = prune_mask_zeros(m, n), nb = (want - have + U - 1) / U;
        CHECK(t, z == have + nb * U && z >= want && z - want < U, "zeros %zu want %zu", z, want);
        CHECK(t, sc_pattern_violations(&g, m) == 0, "off the pattern at step %d", step);
        for (size_t j = 0; j < nb && j + 1 < nb; j++) {  // the last may tie within float rounding
            sc_pattern_unit_entries(&g, ref[j].u, idx);
            CHECK(t, m[idx[0]] == 0.0f, "block %zu (rank %zu) kept", ref[j].u, j);
        }
        for (size_t i = 0; i < n; i++)
            if (m[i] == 0.0f) CHECK(t, w[i] == 0.0f && mom[i] == 0.0f, "entry %zu not zeroed", i);
    }
    free(w), free(m), free(gr), free(scr), free(coef), free(mom), free(ref);
}

// N:M raises: below 1 - N/M the layer goes to exactly N kept per group,
// above it to round(s * n) zeros; groups never keep more than N, and the
// enforcement keeps each group's largest magnitudes.
static void test_nm_raise(tctx *t) {
    rng r;
    rng_seed(&r, 4, 0);
    sc_pattern_geom g = geom_make(PAT_NM, 8, 16, 9, 1, 4, 2);
    size_t n = 8 * 16 * 9, idx[4];
    float *w = malloc(n * 4), *w0 = malloc(n * 4), *m = malloc(n * 4), *scr = malloc(3 * n * 4);
    for (size_t i = 0; i < n; i++) w0[i] = w[i] = rng_normal(&r), m[i] = 1;
    prune_crit c = {1.0f, 0.0f};
    CHECK(t, prune_layer_raise_pattern(&g, w, m, NULL, NULL, n, prune_target_zeros(n, 0.2), 1, c,
                                       scr, NULL) == 0, "raise 0.2");
    CHECK(t, prune_mask_zeros(m, n) == n / 2, "zeros %zu at 0.2", prune_mask_zeros(m, n));
    for (size_t u = 0; u < g.units; u++) {  // the kept two are the group's largest |w|
        sc_pattern_unit_entries(&g, u, idx);
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                if (m[idx[a]] != 0.0f && m[idx[b]] == 0.0f)
                    CHECK(t, fabsf(w0[idx[a]]) >= fabsf(w0[idx[b]]), "group %zu", u);
    }
    CHECK(t, prune_layer_raise_pattern(&g, w, m, NULL, NULL, n, prune_target_zeros(n, 0.83), 1, c,
                                       scr, NULL) == 0, "raise 0.83");
    CHECK(t, prune_mask_zeros(m, n) == prune_target_zeros(n, 0.83), "zeros at 0.83");
    CHECK(t, sc_pattern_violations(&g, m) == 0, "a group keeps more than 2");
    sc_pattern_geom g3 = g;  // 1:4 on the same mask: violations counted
    g3.n = 1;
    CHECK(t, sc_pattern_violations(&g3, m) > 0, "1:4 check passed a 2:4 mask");
    free(w), free(w0), free(m), free(scr);
}

// --- whole nets -------------------------------------------------------------------

// A layer of n weights under g at sparsity s for target tg: at or above it
// (half a weight), above by less than a block, or for N:M at most at 1 - N/M.
static int sparsity_fits(const sc_pattern_geom *g, size_t n, double s, double tg) {
    double z = s * (double)n, want = tg * (double)n;
    if (z + 0.5 < want) return 0;
    if (g->kind == PAT_NM) return s <= fmax(tg, 1.0 - (double)g->n / g->m) + 0.5 / (double)n;
    return z - want < (double)g->unit_size + 0.5;
}

// Repeated whole-net raises under every pattern keep every layer on it, each
// at or above its target (blocks: within one block).
static void test_net_patterns(tctx *t) {
    const char *pats[] = {"8x1", "4x2", "16x8", "2:4", "1:4"};
    for (int pi = 0; pi < 5; pi++) {
        net *nt = lenet_random(t, 7);
        if (!nt) return;
        prune_layers pl;
        sc_pattern p;
        sc_err err = {0};
        sc_pattern_parse(pats[pi], &p, NULL);
        prune_layers_init(&pl, nt, &err);
        CHECK(t, prune_layers_set_pattern(&pl, nt, &p, &err) == 0, "%s", err.msg);
        double tgt[4] = {0, 0, 0, 0}, s[4];
        for (int step = 0; step < 4; step++) {
            for (int l = 0; l < 4; l++) tgt[l] = fmin(0.97, tgt[l] + 0.1 + 0.05 * l);
            CHECK(t, prune_mask_raise(nt, &pl, tgt, NULL, (prune_crit){1, 0}, NULL, &err) == 0, "%s", err.msg);
            CHECK(t, prune_mask_off_pattern(nt, &pl) == 0, "%s off the pattern at step %d", pats[pi], step);
            prune_sparsity_read(nt, &pl, s);
            for (int l = 0; l < 4; l++)
                CHECK(t, sparsity_fits(&pl.geom[l], pl.count[l], s[l], tgt[l]),
                      "%s layer %d: %g for %g", pats[pi], l, s[l], tgt[l]);
        }
        CHECK(t, prune_mask_violations(nt, &pl, NULL) == 0, "pruned weights not zero");
        prune_layers_free(&pl);
        net_free(nt);
    }
}

// The unstructured pattern is no pattern: the same bits as a plain raise.
static void test_unstructured_same(tctx *t) {
    net *a = lenet_random(t, 9), *b = lenet_random(t, 9);
    if (!a || !b) return;
    prune_layers pa, pb;
    sc_pattern p;
    sc_err err = {0};
    sc_pattern_parse("unstructured", &p, NULL);
    prune_layers_init(&pa, a, &err);
    prune_layers_init(&pb, b, &err);
    CHECK(t, prune_layers_set_pattern(&pb, b, &p, &err) == 0 && pb.geom == NULL, "geometry set");
    double tgt[4] = {0.3, 0.9, 0.6, 0.45};
    float *g = malloc(a->nparam * sizeof *g);
    for (size_t i = 0; i < a->nparam; i++) g[i] = fabsf(a->param[(i * 7) % a->nparam]);
    prune_mask_raise(a, &pa, tgt, g, (prune_crit){1.0f, 0.5f}, NULL, &err);
    prune_mask_raise(b, &pb, tgt, g, (prune_crit){1.0f, 0.5f}, NULL, &err);
    CHECK(t, !memcmp(a->mask, b->mask, a->nparam * sizeof *a->mask), "masks differ");
    CHECK(t, !memcmp(a->param, b->param, a->nparam * sizeof *a->param), "weights differ");
    CHECK(t, prune_mask_project(b, &pb, NULL, &err) == 0 && !memcmp(a->mask, b->mask, a->nparam * 4),
          "projection changed an unstructured net");
    free(g);
    prune_layers_free(&pa), prune_layers_free(&pb);
    net_free(a), net_free(b);
}

// A lenet pruned unstructured by magnitude to per-layer targets tgt (its
// sparsities into before), its layers then put under pattern pat in pl.
static net *lenet_pruned(tctx *t, uint64_t seed, const double *tgt, const char *pat,
                         prune_layers *pl, double *before) {
    sc_pattern p;
    sc_err err = {0};
    net *nt = lenet_random(t, seed);
    if (!nt) return NULL;
    prune_layers_init(pl, nt, &err);
    prune_mask_raise(nt, pl, tgt, NULL, (prune_crit){1, 0}, NULL, &err);
    prune_sparsity_read(nt, pl, before);
    sc_pattern_parse(pat, &p, NULL);
    CHECK(t, prune_layers_set_pattern(pl, nt, &p, &err) == 0, "%s", err.msg);
    return nt;
}

// Projection of an unstructured mask onto 4x2: on the pattern, the same
// sparsity rounded up to whole blocks, the kept blocks those of largest
// |w| sum (pruned weights counting 0), revived weights at 0.
static void test_project(tctx *t) {
    prune_layers pl;
    sc_err err = {0};
    double tgt[4] = {0.7, 0.9, 0.8, 0.6}, before[4], after[4];
    net *nt = lenet_pruned(t, 12, tgt, "4x2", &pl, before);
    if (!nt) return;
    float *w0 = malloc(nt->nparam * 4);
    memcpy(w0, nt->param, nt->nparam * 4);
    CHECK(t, prune_mask_off_pattern(nt, &pl) > 0, "random mask already on 4x2");
    CHECK(t, prune_mask_project(nt, &pl, NULL, &err) == 0, "%s", err.msg);
    CHECK(t, prune_mask_off_pattern(nt, &pl) == 0, "projection off the pattern");
    prune_sparsity_read(nt, &pl, after);
    for (int l = 0; l < 4; l++) {
        const sc_pattern_geom *g = &pl.geom[l];
        CHECK(t, after[l] >= before[l] && (after[l] - before[l]) * pl.count[l] < g->unit_size,
              "layer %d: %g -> %g", l, before[l], after[l]);
        const float *w = w0 + pl.offset[l], *m = nt->mask + pl.offset[l];
        size_t idx[8];
        double min_kept = INFINITY, max_pruned = 0.0;
        for (size_t u = 0; u < g->units; u++) {
            sc_pattern_unit_entries(g, u, idx);
            double sum = 0.0;
            for (size_t j = 0; j < g->unit_size; j++) sum += fabsf(w[idx[j]]);
            if (m[idx[0]] != 0.0f) min_kept = fmin(min_kept, sum);
            else max_pruned = fmax(max_pruned, sum);
        }
        CHECK(t, min_kept >= max_pruned - 1e-5, "layer %d: kept %g < pruned %g", l, min_kept, max_pruned);
    }
    for (size_t i = 0; i < nt->nparam; i++)
        if (nt->mask[i] != 0.0f) CHECK(t, nt->param[i] == w0[i], "kept weight %zu changed", i);
    CHECK(t, prune_mask_violations(nt, &pl, NULL) == 0, "pruned weights not zero");
    free(w0);
    prune_layers_free(&pl);
    net_free(nt);
}

// N:M projection of a net with one dense layer: every layer ends on 2:4,
// the dense one at exactly half its weights, the pruned ones at their
// sparsity (above 1 - N/M here).
static void test_project_nm(tctx *t) {
    prune_layers pl;
    sc_err err = {0};
    double tgt[4] = {0.0, 0.9, 0.8, 0.7}, before[4], after[4];
    net *nt = lenet_pruned(t, 13, tgt, "2:4", &pl, before);
    if (!nt) return;
    CHECK(t, prune_mask_project(nt, &pl, NULL, &err) == 0, "%s", err.msg);
    CHECK(t, prune_mask_off_pattern(nt, &pl) == 0, "projection off 2:4");
    prune_sparsity_read(nt, &pl, after);
    CHECK(t, after[0] == 0.0 && pl.geom[0].kind == PAT_UNSTRUCTURED, "conv2 (C=6) changed: %g", after[0]);
    for (int l = 1; l < 4; l++) CHECK(t, after[l] == before[l], "layer %d: %g -> %g", l, before[l], after[l]);
    tgt[1] = 0.0;  // now a dense fc1
    for (size_t i = 0; i < pl.count[1]; i++) nt->mask[pl.offset[1] + i] = 1.0f;
    CHECK(t, prune_mask_project(nt, &pl, NULL, &err) == 0, "%s", err.msg);
    prune_sparsity_read(nt, &pl, after);
    CHECK(t, after[1] == 0.5 && prune_mask_off_pattern(nt, &pl) == 0, "dense fc1 projected to %g", after[1]);
    prune_layers_free(&pl);
    net_free(nt);
}

// --- the model file ------------------------------------------------------------

// The pattern round-trips through a model file as its root attribute; a
// file without one reads as unstructured ("").
// Per-layer patterns: parse and print back, each tensor on the rule of the
// longest prefix of its name (else the bare pattern), hybrid and unstructured
// tests over every rule, a file-name tag, and names checked against the net.
static void test_per_layer(tctx *t) {
    net *nt = lenet_random(t, 3);
    if (!nt) return;
    sc_pattern p;
    sc_err err = {0};
    char back[SC_PATTERN_TEXT], tag[80];
    const char *in = "fc=4x2,fc3=unstructured,fc2=2:4,16x1";
    CHECK(t, sc_pattern_parse(in, &p, &err) == 0 && p.nrules == 3, "%s: %s", in, err.msg);
    sc_pattern_format(&p, back, sizeof back);
    CHECK(t, !strcmp(back, in), "printed as %s", back);
    const char *name[] = {"conv2.weight", "fc1.weight", "fc2.weight", "fc3.weight"};
    const sc_pattern_kind want[] = {PAT_BLOCK, PAT_BLOCK, PAT_NM, PAT_UNSTRUCTURED};
    const int wkb[] = {16, 4, 1, 1};
    for (int i = 0; i < 4; i++) {
        sc_pattern_geom g;
        sc_pattern_geom_of(&p, nt, net_tensor_find(nt, name[i]), &g);
        CHECK(t, g.kind == want[i] && g.kb == wkb[i], "%s: kind %d kb %d", name[i], (int)g.kind, g.kb);
    }
    CHECK(t, !sc_pattern_is_unstructured(&p) && !sc_pattern_has_hybrid(&p), "kind tests");
    CHECK(t, sc_pattern_check_names(&p, nt, &err) == 0, "%s", err.msg);
    sc_pattern_tag(&p, tag, sizeof tag);
    CHECK(t, !strncmp(tag, "perlayer-", 9) && strlen(tag) == 17 && !strchr(tag, ','), "tag %s", tag);
    CHECK(t, sc_pattern_parse("fc1=unstructured", &p, NULL) == 0 && sc_pattern_is_unstructured(&p), "all unstructured");
    sc_pattern_format(&p, back, sizeof back);
    CHECK(t, !strcmp(back, "fc1=unstructured"), "printed as %s", back);
    CHECK(t, sc_pattern_parse("fc2=16x8+0.2", &p, NULL) == 0 && sc_pattern_has_hybrid(&p), "hybrid rule");
    CHECK(t, sc_pattern_parse("conv9=16x8", &p, NULL) == 0 && sc_pattern_check_names(&p, nt, &err) != 0 &&
                 strstr(err.msg, "conv9"), "unknown prefix accepted: %s", err.msg);
    CHECK(t, sc_pattern_parse("conv1=16x8", &p, NULL) == 0 && sc_pattern_check_names(&p, nt, &err) != 0,
          "a prefix naming only the unpruned first conv accepted");
    const char *bad[] = {"fc=4x2,fc=2:4", "fc=4x2,16x8,2:4", "fc=", "=4x2", "fc=4x2,", ",16x8", "fc=4y2"};
    for (int i = 0; i < 7; i++) CHECK(t, sc_pattern_parse(bad[i], &p, &err) != 0, "accepted '%s'", bad[i]);
    char many[SC_PATTERN_TEXT] = "";
    for (int i = 0; i <= SC_PATTERN_RULES; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sl%d=4x2", i ? "," : "", i);
    CHECK(t, sc_pattern_parse(many, &p, &err) != 0 && strstr(err.msg, "more than"), "%d rules: %s",
          SC_PATTERN_RULES + 1, err.msg);
    net_free(nt);
}

static void test_model_attribute(tctx *t) {
    net *nt = lenet_random(t, 2);
    if (!nt) return;
    char path[] = "/tmp/test_prune_pattern_XXXXXX";
    int fd = mkstemp(path);
    CHECK(t, fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    model_meta m, back;
    sc_err err = {0};
    model_meta_init(&m);
    const char *text[] = {"16x8", "conv2=16x8,fc1=2:4,fc2=4x2+0.25,fc3=unstructured,8x1"};
    net *b = NULL;
    for (int i = 0; i < 2; i++) {
        snprintf(m.pattern, sizeof m.pattern, "%s", text[i]);
        CHECK(t, model_save(path, nt, &m, &err) == 0, "%s", err.msg);
        b = model_load(path, &back, &err);
        CHECK(t, b && !strcmp(back.pattern, text[i]), "read back '%s' %s", b ? back.pattern : "", err.msg);
        net_free(b);
        model_meta_free(&back);
    }
    m.pattern[0] = 0;
    CHECK(t, model_save(path, nt, &m, &err) == 0, "%s", err.msg);
    b = model_load(path, &back, &err);
    CHECK(t, b && back.pattern[0] == 0, "unstructured read back as '%s'", back.pattern);
    net_free(b);
    model_meta_free(&back);
    unlink(path);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_prune_pattern"};
    RUN(&t, test_parse_good);
    RUN(&t, test_parse_bad);
    RUN(&t, test_geometry);
    RUN(&t, test_units);
    RUN(&t, test_row_max);
    RUN(&t, test_block_sum_hand);
    RUN(&t, test_block_raise_random);
    RUN(&t, test_nm_raise);
    RUN(&t, test_net_patterns);
    RUN(&t, test_unstructured_same);
    RUN(&t, test_project);
    RUN(&t, test_project_nm);
    RUN(&t, test_per_layer);
    RUN(&t, test_model_attribute);
    return check_finish(&t);
}
