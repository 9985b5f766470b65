// Tests of prune/mask: prunable layers, the coefficient (eq. 2), exact
// per-layer targets, monotone masks and zeroed weights and momentum.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prune/mask.h"
#include "runtime/net.h"
#include "runtime/rng.h"

// --- helpers ----------------------------------------------------------------

// Random weights with many exact ties (values drawn from a small set, signs random).
static void fill_ties(float *w, size_t n, rng *r) {
    for (size_t i = 0; i < n; i++) {
        float v = (float)(1 + rng_below(r, 7)) * 0.125f;
        w[i] = rng_uniform(r) < 0.5f ? -v : v;
    }
}

// Index order of the kept entries sorted by (coef, index), for the reference.
typedef struct {
    float c;
    size_t i;
} ci_pair;

// Compares two (coef, index) pairs.
static int ci_cmp(const void *a, const void *b) {
    const ci_pair *x = a, *y = b;
    if (x->c != y->c) return x->c < y->c ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

// --- tests ------------------------------------------------------------------

// lenet: every conv/linear weight but the first conv is prunable.
static void test_layers(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return;
    prune_layers pl;
    CHECK(t, prune_layers_init(&pl, nt, &err) == 0, "%s", err.msg);
    CHECK(t, pl.n == 4, "n %d", pl.n);
    CHECK(t, pl.total == 2400 + 48000 + 10080 + 840, "total %zu", pl.total);
    for (int i = 0; i < pl.n; i++) {
        const ptensor *p = &nt->tensors[pl.tensor[i]];
        CHECK(t, p->kind == PT_WEIGHT && strcmp(p->name, "conv1.weight") != 0, "%s", p->name);
        CHECK(t, pl.offset[i] == p->offset && pl.count[i] == p->count, "%s", p->name);
    }
    prune_layers_free(&pl);
    net_free(nt);
}

// Raising a layer prunes exactly the kept entries first in (coef, index)
// order, reaches round(s * n) zeros and never revives an entry.
static void test_raise_matches_sort(tctx *t) {
    rng r;
    rng_seed(&r, 11, 0);
    const size_t sizes[] = {1, 7, 250, 1237};
    for (int si = 0; si < 4; si++) {
        size_t n = sizes[si];
        float *w = malloc(n * sizeof *w), *m = malloc(n * sizeof *m), *mom = malloc(n * 4);
        float *g = malloc(n * sizeof *g), *scr = malloc(2 * n * sizeof *scr);
        float *coef = malloc(n * sizeof *coef), *oldm = malloc(n * sizeof *oldm);
        ci_pair *ref = malloc(n * sizeof *ref);
        fill_ties(w, n, &r);
        fill_ties(g, n, &r);
        for (size_t i = 0; i < n; i++) m[i] = 1.0f, mom[i] = 1.0f + (float)i;
        prune_crit c = {.alpha = 1.0f, .beta = 0.5f};
        double s = 0.0;
        for (int step = 0; step < 6; step++) {
            s = fmin(1.0, s + 0.37 * rng_uniform(&r));
            size_t want = prune_target_zeros(n, s), have = prune_mask_zeros(m, n);
            CHECK(t, prune_coef(w, g, m, n, c, coef, NULL) == 0, "coef");
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (m[i] != 0.0f) ref[k++] = (ci_pair){coef[i], i};
            qsort(ref, k, sizeof *ref, ci_cmp);
            memcpy(oldm, m, n * sizeof *m);
            sc_err err = {0};
            CHECK(t, prune_layer_raise(w, m, mom, g, n, want, c, scr, &err) == 0, "%s", err.msg);
            CHECK(t, prune_mask_zeros(m, n) == (want > have ? want : have), "zeros n=%zu", n);
            for (size_t i = 0; i < n; i++)
                CHECK(t, !(oldm[i] == 0.0f && m[i] != 0.0f), "revived %zu", i);
            for (size_t j = 0; want > have && j < want - have; j++)
                CHECK(t, m[ref[j].i] == 0.0f, "entry %zu (rank %zu) not pruned", ref[j].i, j);
            for (size_t i = 0; i < n; i++)
                if (m[i] == 0.0f) CHECK(t, w[i] == 0.0f && mom[i] == 0.0f, "not zeroed %zu", i);
        }
        free(w), free(m), free(mom), free(g), free(scr), free(coef), free(oldm), free(ref);
    }
}

// Eq. 2 on a hand example: the means are over kept entries only.
static void test_coef_formula(tctx *t) {
    float w[4] = {1, -3, 100, 2}, g[4] = {4, 0, 7, 2}, m[4] = {1, 1, 0, 1}, c[4];
    prune_crit k = {.alpha = 2.0f, .beta = 3.0f};
    CHECK(t, prune_coef(w, g, m, 4, k, c, NULL) == 0, "coef");
    // mean|w| over kept = 2, mean|g| = 2.
    CHECK_CLOSE(t, c[0], 2.0 * 1 / 2 + 3.0 * 4 / 2, 1e-6);
    CHECK_CLOSE(t, c[1], 2.0 * 3 / 2 + 0.0, 1e-6);
    CHECK(t, isinf(c[2]), "pruned entry %g", c[2]);
    CHECK_CLOSE(t, c[3], 2.0 * 2 / 2 + 3.0 * 2 / 2, 1e-6);
    // gradient only: the smallest gradient goes first.
    float w2[3] = {5, 5, 5}, g2[3] = {3, 1, 2}, m2[3] = {1, 1, 1}, scr[6];
    prune_crit gr = {.alpha = 0.0f, .beta = 1.0f};
    CHECK(t, prune_layer_raise(w2, m2, NULL, g2, 3, 1, gr, scr, NULL) == 0, "raise");
    CHECK(t, m2[1] == 0.0f && m2[0] == 1.0f && m2[2] == 1.0f, "gradient criterion");
}

// A NaN weight is an error, not a silent mask.
static void test_nonfinite(tctx *t) {
    float w[3] = {1, NAN, 2}, m[3] = {1, 1, 1}, scr[6];
    sc_err err = {0};
    prune_crit c = {.alpha = 1.0f, .beta = 0.0f};
    CHECK(t, prune_layer_raise(w, m, NULL, NULL, 3, 1, c, scr, &err) != 0, "accepted NaN");
    CHECK(t, strstr(err.msg, "non-finite") != NULL, "message: %s", err.msg);
}

// Whole-net raise: per-layer targets within one element, other masks stay 1,
// pruned weights and momentum are zero, lowering a target changes nothing.
static void test_net_raise(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    if (!nt) {
        CHECK(t, 0, "%s", err.msg);
        return;
    }
    rng r;
    rng_seed(&r, 5, 0);
    net_init_weights(nt, &r);
    prune_layers pl;
    prune_layers_init(&pl, nt, &err);
    float *mom = malloc(nt->nparam * sizeof *mom), *g = malloc(nt->nparam * sizeof *g);
    for (size_t i = 0; i < nt->nparam; i++) mom[i] = rng_normal(&r), g[i] = fabsf(rng_normal(&r));
    double tgt[4] = {0.3, 0.91, 0.5, 0.777}, low[4] = {0.1, 0.2, 0.3, 0.4}, s[4];
    prune_crit c = {.alpha = 1.0f, .beta = 0.3f};
    CHECK(t, prune_mask_raise(nt, &pl, tgt, g, c, mom, &err) == 0, "%s", err.msg);
    prune_sparsity_read(nt, &pl, s);
    for (int i = 0; i < 4; i++)
        CHECK(t, fabs(s[i] - tgt[i]) * pl.count[i] <= 0.5 + 1e-9, "layer %d %g vs %g", i, s[i], tgt[i]);
    CHECK(t, prune_mask_violations(nt, &pl, mom) == 0, "pruned entries not zero");
    size_t nonprunable_zero = 0, zeros = 0;
    for (size_t i = 0; i < nt->nparam; i++) zeros += nt->mask[i] == 0.0f;
    for (int i = 0; i < 4; i++) nonprunable_zero += prune_mask_zeros(nt->mask + pl.offset[i], pl.count[i]);
    CHECK(t, zeros == nonprunable_zero, "a non-prunable entry was masked");
    CHECK(t, prune_mask_raise(nt, &pl, low, g, c, mom, &err) == 0, "%s", err.msg);
    double s2[4];
    prune_sparsity_read(nt, &pl, s2);
    for (int i = 0; i < 4; i++) CHECK(t, s2[i] == s[i], "layer %d changed on a lower target", i);
    double overall = prune_sparsity_overall(&pl, s);
    CHECK_CLOSE(t, overall, net_sparsity(nt), 1e-12);
    free(mom);
    free(g);
    prune_layers_free(&pl);
    net_free(nt);
}

// Raises vgg11's masks twice (0.5 then 0.8 per layer, magnitude and gradient)
// from the same state with 1, 2 and 3 OpenMP threads: the parallel paths
// (layers in parallel, element loops of layers over 65,536 weights) must
// give the same bits as one thread.
static void test_raise_threads(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("vgg11", 3, 32, 32, 10, &err);
    if (!nt) {
        CHECK(t, 0, "%s", err.msg);
        return;
    }
    rng r;
    rng_seed(&r, 17, 0);
    net_init_weights(nt, &r);
    prune_layers pl;
    CHECK(t, prune_layers_init(&pl, nt, &err) == 0, "%s", err.msg);
    size_t n = nt->nparam;
    float *p0 = malloc(n * sizeof *p0), *g = malloc(n * sizeof *g), *mom = malloc(n * sizeof *mom);
    float *ref = malloc(3 * n * sizeof *ref);  // (3, n) params, mask, momentum of one thread
    memcpy(p0, nt->param, n * sizeof *p0);
    for (size_t i = 0; i < n; i++) g[i] = fabsf(rng_normal(&r));
    double lo[64], hi[64];
    for (int i = 0; i < pl.n && i < 64; i++) lo[i] = 0.5, hi[i] = 0.8;
    prune_crit c = {.alpha = 1.0f, .beta = 0.5f};
    int keep = omp_get_max_threads();
    for (int th = 1; th <= 3 && pl.n <= 64; th++) {
        omp_set_num_threads(th);
        memcpy(nt->param, p0, n * sizeof *p0);
        for (size_t i = 0; i < n; i++) nt->mask[i] = 1.0f, mom[i] = 0.01f * (float)(i % 97);
        CHECK(t, prune_mask_raise(nt, &pl, lo, g, c, mom, &err) == 0, "%s", err.msg);
        CHECK(t, prune_mask_raise(nt, &pl, hi, g, c, mom, &err) == 0, "%s", err.msg);
        const float *got[3] = {nt->param, nt->mask, mom};
        for (int a = 0; a < 3; a++) {
            if (th == 1) memcpy(ref + a * n, got[a], n * sizeof *ref);
            else CHECK(t, !memcmp(ref + a * n, got[a], n * sizeof *ref), "array %d differs at %d threads", a, th);
        }
    }
    omp_set_num_threads(keep);
    CHECK(t, pl.n <= 64, "%d prunable layers", pl.n);
    free(p0), free(g), free(mom), free(ref);
    prune_layers_free(&pl);
    net_free(nt);
}

// Target rounding: round(s * n), clamped.
static void test_target_zeros(tctx *t) {
    CHECK(t, prune_target_zeros(10, 0.25) == 3 || prune_target_zeros(10, 0.25) == 2, "0.25");
    CHECK(t, prune_target_zeros(7, 0.5) == 4, "%zu", prune_target_zeros(7, 0.5));
    CHECK(t, prune_target_zeros(7, -1.0) == 0, "negative");
    CHECK(t, prune_target_zeros(7, 1.5) == 7, "above 1");
    CHECK(t, prune_target_zeros(1000, 0.9) == 900, "0.9");
}

int main(void) {
    tctx t = {.suite = "test_prune_mask"};
    RUN(&t, test_layers);
    RUN(&t, test_raise_matches_sort);
    RUN(&t, test_raise_threads);
    RUN(&t, test_coef_formula);
    RUN(&t, test_nonfinite);
    RUN(&t, test_net_raise);
    RUN(&t, test_target_zeros);
    return check_finish(&t);
}
