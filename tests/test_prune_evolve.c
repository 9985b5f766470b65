// Tests of the search's host parts: the cubic schedule, planning a raise
// (eq. 4) with and without a per-layer floor (one for all, or per layer with
// --layer-floor: parsing, budget, water-filling), sensitivities, k-means, selection with rewinding, and the state
// file (round trip, corruption, another net).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "prune/evolve.h"
#include "prune/floor.h"
#include "prune/gmp.h"
#include "prune/mask.h"
#include "prune/pop.h"
#include "tests/prune_testutil.h"

// --- helpers ----------------------------------------------------------------

// A random population for lenet's sizes with distinct contents.
static prune_pop *random_pop(const net *nt, int n, int L, rng *r) {
    prune_pop *p = prune_pop_create(n, L, nt, NULL);
    if (!p) return NULL;
    for (int i = 0; i < n; i++) {
        prune_sol *s = &p->sol[i];
        for (size_t k = 0; k < p->nparam; k++) {
            s->mask[k] = rng_uniform(r) < 0.3f ? 0.0f : 1.0f;
            s->param[k] = s->mask[k] * rng_normal(r);
            s->mom[k] = s->mask[k] * rng_normal(r);
        }
        for (size_t k = 0; k < p->nbuf; k++) s->buf[k] = rng_uniform(r);
        for (int l = 0; l < L; l++) s->sparsity[l] = rng_uniform(r), s->genome[l] = rng_uniform(r);
        s->acc = 50 + i, s->acc_prev = 40 + i, s->batches = 1000 + i, s->stream = 7 * i;
        s->age = i, s->fails = i % 2, s->cluster = i % 3;
    }
    for (int l = 0; l < L; l++) p->sens[l] = rng_normal(r);
    prune_hist h = {.iter = 3, .best_acc = 61.5, .images = 12345, .admitted = 2};
    prune_pop_add_hist(p, &h, NULL);
    p->iter = 3, p->best = n - 1, p->images = 12345, p->seconds = 9.5;
    return p;
}

// True when two solutions are identical in every stored field.
static int sol_equal(const prune_sol *a, const prune_sol *b, int L, size_t np, size_t nb) {
    return a->acc == b->acc && a->acc_prev == b->acc_prev && a->batches == b->batches &&
           a->stream == b->stream && a->age == b->age && a->fails == b->fails &&
           a->cluster == b->cluster && !memcmp(a->sparsity, b->sparsity, L * sizeof(double)) &&
           !memcmp(a->genome, b->genome, L * sizeof(double)) &&
           !memcmp(a->param, b->param, np * 4) && !memcmp(a->mask, b->mask, np * 4) &&
           !memcmp(a->mom, b->mom, np * 4) && !memcmp(a->buf, b->buf, nb * 4);
}

// --- schedule ---------------------------------------------------------------

// The cubic schedule: endpoints, monotone, the cubic value in the middle.
static void test_cubic(tctx *t) {
    CHECK_CLOSE(t, gmp_sparsity_at(0.0, 0.9, 0.0, 0.0, 1.0), 0.0, 1e-12);
    CHECK_CLOSE(t, gmp_sparsity_at(0.0, 0.9, 1.0, 0.0, 1.0), 0.9, 1e-12);
    CHECK_CLOSE(t, gmp_sparsity_at(0.0, 0.9, 0.5, 0.0, 1.0), 0.9 * (1 - 0.125), 1e-12);
    CHECK_CLOSE(t, gmp_sparsity_at(0.2, 0.9, 0.1, 0.25, 0.75), 0.2, 1e-12);
    CHECK_CLOSE(t, gmp_sparsity_at(0.2, 0.9, 0.8, 0.25, 0.75), 0.9, 1e-12);
    CHECK_CLOSE(t, gmp_sparsity_at(0.0, 0.9, 0.0, 0.0, 0.0), 0.9, 1e-12);  // one-shot
    double prev = -1;
    for (int i = 0; i <= 100; i++) {
        double s = gmp_sparsity_at(0.0, 0.95, i / 100.0, 0.1, 0.8);
        CHECK(t, s >= prev, "not monotone at %d", i);
        prev = s;
    }
    evolve_cfg c;
    evolve_cfg_default(&c, 20, 0.9);
    CHECK_CLOSE(t, evolve_floor(&c, 0), 0.0, 1e-12);
    CHECK_CLOSE(t, evolve_floor(&c, 15), 0.9, 1e-12);
    CHECK_CLOSE(t, evolve_floor(&c, 20), 0.9, 1e-12);
}

// --- planning ---------------------------------------------------------------

// A plan reaches the floor, never lowers a layer, keeps layers under s_max
// when it can, and cuts the sensitive layer less than the others.
static void test_plan(tctx *t) {
    const size_t cnt[5] = {300, 5000, 77, 20000, 1234};
    prune_layers pl = fake_layers(5, cnt);
    evolve_cfg c;
    evolve_cfg_default(&c, 10, 0.95);
    c.layer_frac = 1.0;
    rng r;
    rng_seed(&r, 3, 0);
    double sp[5] = {0.1, 0.5, 0.0, 0.3, 0.2}, gen[5] = {0.1, 0.5, 0.6, 0.3, 0.2}, tg[5];
    double sens[5] = {0, 0, 0, 0, 0};
    prune_sol s = {.sparsity = sp, .genome = gen};
    double floors[5] = {0.2, 0.3, 0.6, 0.95, 0.999}, gen_overall = prune_sparsity_overall(&pl, gen);
    double sp_overall = prune_sparsity_overall(&pl, sp);
    for (int f = 0; f < 5; f++) {
        evolve_plan(&s, &pl, sens, &c, floors[f], &r, tg);
        double got = prune_sparsity_overall(&pl, tg);
        CHECK(t, got >= floors[f] - 1e-9, "floor %g got %g", floors[f], got);
        for (int l = 0; l < 5; l++) CHECK(t, tg[l] >= sp[l] - 1e-12, "lowered %d", l);
        if (got > gen_overall)  // a floor above the genome: the genome is kept
            for (int l = 0; l < 5; l++) CHECK(t, tg[l] >= gen[l] - 1e-12, "genome %d", l);
        if (floors[f] < c.s_max) {
            for (int l = 0; l < 5; l++) CHECK(t, tg[l] <= c.s_max + 1e-12, "above s_max %d", l);
            CHECK(t, got <= fmax(floors[f], sp_overall) + 1e-9, "overshot %g", got);
        }
    }
    // Sensitive layer 3 (the largest): cut less than with equal sensitivities.
    double flat[5];
    evolve_plan(&s, &pl, sens, &c, 0.6, &r, flat);
    sens[3] = 10.0;
    evolve_plan(&s, &pl, sens, &c, 0.6, &r, tg);
    CHECK(t, tg[3] < flat[3], "sensitive layer %g vs %g", tg[3], flat[3]);
    // With equal sensitivities larger layers are cut more, and the floor is met exactly.
    double z[5] = {0, 0, 0, 0, 0}, zg[5] = {0, 0, 0, 0, 0};
    prune_sol s0 = {.sparsity = z, .genome = zg};
    sens[3] = 0.0;
    evolve_plan(&s0, &pl, sens, &c, 0.5, &r, tg);
    for (int l = 0; l < 5; l++)
        for (int m = 0; m < 5; m++)
            if (cnt[l] > cnt[m]) CHECK(t, tg[l] > tg[m], "layer %d (%zu) %g <= layer %d (%zu) %g", l, cnt[l], tg[l], m, cnt[m], tg[m]);
    CHECK_CLOSE(t, prune_sparsity_overall(&pl, tg), 0.5, 1e-9);
    // The allocation is the optimum: moving weights between two layers costs more.
    double sv[5] = {3, 1, 7, 2, 5}, lo[5] = {0, 0, 0, 0, 0}, al[5];
    evolve_allocate(sv, &pl, lo, 0.7, 0.995, al);
    double best = 0;
    for (int l = 0; l < 5; l++) best += sv[l] * evolve_cost(al[l]);
    for (int l = 0; l < 5; l++)
        for (int m = 0; m < 5; m++) {
            if (l == m) continue;
            double moved[5];
            memcpy(moved, al, sizeof moved);
            double dw = 10.0;  // move 10 pruned weights from layer m to layer l
            moved[l] += dw / cnt[l];
            moved[m] -= dw / cnt[m];
            if (moved[l] > 0.995 || moved[m] < 0) continue;
            double cst = 0;
            for (int k = 0; k < 5; k++) cst += sv[k] * evolve_cost(moved[k]);
            CHECK(t, cst >= best - 1e-9, "move %d->%d lowers the cost %g < %g", m, l, cst, best);
        }
    // A small subset still reaches the floor.
    c.layer_frac = 0.2;
    evolve_plan(&s0, &pl, sens, &c, 0.4, &r, tg);
    CHECK(t, prune_sparsity_overall(&pl, tg) >= 0.4 - 1e-9, "subset floor");
    prune_layers_free(&pl);
}

// --- per-layer floor (--min-layer-sparsity) ---------------------------------

// The layer floor follows the schedule, reaches min_layer exactly at the
// target, never exceeds the overall value; uniform targets already meet it.
static void test_layer_floor(tctx *t) {
    CHECK(t, gmp_layer_floor(0.0, 0.9, 0.45) == 0.0, "no floor");
    CHECK(t, gmp_layer_floor(0.5, 0.0, 0.0) == 0.0, "target 0");
    CHECK_CLOSE(t, gmp_layer_floor(0.6, 0.9, 0.45), 0.3, 1e-15);
    CHECK(t, gmp_layer_floor(0.7, 0.9, 0.9) == 0.7, "not exact at the target");
    CHECK(t, gmp_layer_floor(0.9, 0.9, 0.9) == 0.9, "not exact at floor == target");
    rng r;
    rng_seed(&r, 41, 0);
    for (int k = 0; k < 1000; k++) {
        double T = 0.999 * rng_uniform(&r), m = T * rng_uniform(&r), now = T * rng_uniform(&r);
        if (k % 7 == 0) m = T;
        // lf <= now: gmp's and oneshot's uniform targets (= now) already meet it
        double lf = gmp_layer_floor(m, T, now);
        CHECK(t, lf >= 0.0 && lf <= now, "floor %g above now %g (m %g T %g)", lf, now, m, T);
    }
}

// One solution driven through the evolve schedule as the search drives it:
// plan, raise (round(target * count) zeros, masks only grow), sometimes a
// rewind (the raise is undone) or a mutated genome. Checks every plan
// against the layer floor and the overall floor; the final per-layer
// sparsities go to out (L). Returns the failed checks.
static int floor_walk(tctx *t, const prune_layers *pl, double T, double m, uint64_t seed,
                      double *out) {
    int L = pl->n, K = 12, bad = 0;
    evolve_cfg c;
    evolve_cfg_default(&c, K, T);
    c.layer_min = m;
    rng r;
    rng_seed(&r, seed, 1);
    double sp[16] = {0}, gen[16] = {0}, sens[16], tg[16];
    for (int l = 0; l < L; l++) sens[l] = (pl->count[l] < 1000 ? 3.0 : 0.1) * rng_uniform(&r);
    prune_sol s = {.sparsity = sp, .genome = gen};
    for (int l = 0; l < L; l++) gen[l] = c.s_max * 0.5 * rng_uniform(&r);  // as evolve_init
    for (int k = 1; k <= K; k++) {
        double F = evolve_floor(&c, k), lf = gmp_layer_floor(m, T, F);
        evolve_plan(&s, pl, sens, &c, F, &r, tg);
        for (int l = 0; l < L; l++) {
            if (tg[l] < lf - 1e-12) bad++;
            if (tg[l] < sp[l] - 1e-12) bad++;
        }
        double got = prune_sparsity_overall(pl, tg);
        if (fabs(got - F) > (double)(L + 1) / (double)pl->total) bad++;
        CHECK(t, !bad, "step %d: overall %g floor %g (layer floor %g)", k, got, F, lf);
        if (bad) return bad;
        if (k < K && rng_uniform(&r) < 0.2) continue;  // rejected and rewound: the mask stays
        for (int l = 0; l < L; l++) {
            size_t z = prune_target_zeros(pl->count[l], tg[l]), have = prune_target_zeros(pl->count[l], sp[l]);
            sp[l] = (double)(z > have ? z : have) / (double)pl->count[l];
        }
        if (rng_uniform(&r) < 0.3) evolve_mutate(&s, L, &c, &r);
        else memcpy(gen, sp, (size_t)L * sizeof *gen);
    }
    memcpy(out, sp, (size_t)L * sizeof *out);
    return 0;
}

// With --min-layer-sparsity every layer ends at the floor or above (within
// one weight), the overall floor is still met exactly at every step, and
// without it the same walk leaves some small layer below the floor.
static void test_plan_floor(tctx *t) {
    rng r;
    rng_seed(&r, 77, 0);
    for (int trial = 0; trial < 12; trial++) {
        int L = 3 + (int)rng_below(&r, 10);
        size_t cnt[16];
        for (int l = 0; l < L; l++) cnt[l] = 5 + rng_below(&r, l % 3 ? 40000 : 900);
        prune_layers pl = fake_layers(L, cnt);
        double T = 0.5 + 0.47 * rng_uniform(&r), m = T * (0.6 + 0.4 * rng_uniform(&r));
        if (trial == 0) m = T;  // every layer exactly at the target
        double with[16], without[16];
        uint64_t seed = 100 + (uint64_t)trial;
        if (floor_walk(t, &pl, T, m, seed, with) || floor_walk(t, &pl, T, 0.0, seed, without)) {
            prune_layers_free(&pl);
            return;
        }
        int below = 0;
        for (int l = 0; l < L; l++) {
            CHECK(t, with[l] >= m - 1.0 / (double)cnt[l], "trial %d layer %d (%zu): %g < floor %g",
                  trial, l, cnt[l], with[l], m);
            below += without[l] < m - 1.0 / (double)cnt[l];
        }
        CHECK_CLOSE(t, prune_sparsity_overall(&pl, with), T, (double)(L + 1) / (double)pl.total);
        if (trial < 4) CHECK(t, below > 0, "trial %d: the floor never binds (T %g m %g)", trial, T, m);
        prune_layers_free(&pl);
    }
}

// --- per-layer floors (--layer-floor) -------------------------------------------

// gmp_layer_floor_at: the same bits as gmp_layer_floor for m <= target,
// m * now / target (<= s_max) above it.
static void test_layer_floor_at(tctx *t) {
    rng r;
    rng_seed(&r, 31, 0);
    for (int k = 0; k < 500; k++) {
        double T = 0.999 * rng_uniform(&r), m = T * rng_uniform(&r), now = T * rng_uniform(&r);
        double a = gmp_layer_floor(m, T, now), b = gmp_layer_floor_at(m, T, now, 0.995);
        CHECK(t, memcmp(&a, &b, sizeof a) == 0, "m %g T %g now %g: %.17g vs %.17g", m, T, now, a, b);
        double hi = T + (0.995 - T) * rng_uniform(&r), f = gmp_layer_floor_at(hi, T, now, 0.995);
        if (hi > T && T > 0.0 && now > 0.0)
            CHECK(t, fabs(f - hi * now / T) < 1e-12 && f <= 0.995, "m %g T %g now %g: %g", hi, T, now, f);
    }
    CHECK(t, gmp_layer_floor_at(0.99, 0.9, 0.9, 0.995) == 0.99, "at the end the floor itself");
}

// Water-filling: the overall lands on v, every floor holds, the layers under
// the level share one value, and with no floor above v the targets are the
// uniform ones bit for bit.
static void test_water_fill(tctx *t) {
    rng r;
    rng_seed(&r, 41, 0);
    for (int trial = 0; trial < 200; trial++) {
        int L = 2 + (int)rng_below(&r, 14);
        size_t cnt[16];
        double lf[16], tg[16], un[16], v = 0.05 + 0.9 * rng_uniform(&r), total = 0, need = 0;
        for (int l = 0; l < L; l++) {
            cnt[l] = 3 + rng_below(&r, l % 2 ? 50000 : 700);
            lf[l] = v * rng_uniform(&r);
            total += (double)cnt[l];
        }
        if (trial % 4) {  // some small layers above v, within the budget
            for (int l = 0; l < L; l += 2) lf[l] = v + (0.995 - v) * rng_uniform(&r);
            for (int l = 0; l < L; l++) need += lf[l] * (double)cnt[l];
            if (need > v * total) continue;
        }
        gmp_targets_floored(cnt, L, v, lf, tg);
        gmp_targets_uniform(L, v, un);
        if (trial % 4 == 0) {
            CHECK(t, memcmp(tg, un, (size_t)L * sizeof *tg) == 0, "trial %d: not uniform", trial);
            continue;
        }
        double sum = 0.0, u = -1.0;
        for (int l = 0; l < L; l++) {
            sum += tg[l] * (double)cnt[l];
            CHECK(t, tg[l] >= lf[l] && tg[l] <= fmax(lf[l], v), "trial %d layer %d: %g floor %g", trial, l, tg[l], lf[l]);
            if (tg[l] > lf[l]) {
                CHECK(t, u < 0.0 || fabs(tg[l] - u) < 1e-15, "trial %d: two levels %g %g", trial, u, tg[l]);
                u = tg[l];
            }
        }
        CHECK(t, fabs(sum - v * total) <= 1e-9 * total, "trial %d: %.12g weights, want %.12g", trial, sum, v * total);
    }
    size_t c2[2] = {100, 900};  // layer 0 at 0.99: layer 1 takes (0.9 * 1000 - 99) / 900
    double f2[2] = {0.99, 0.0}, t2[2];
    gmp_targets_floored(c2, 2, 0.9, f2, t2);
    CHECK(t, t2[0] == 0.99 && fabs(t2[1] - 801.0 / 900.0) < 1e-12, "%g %g", t2[0], t2[1]);
}

// SPEC parsing: items, errors, and the budget check.
static void test_floor_spec(tctx *t) {
    prune_floor_spec fs;
    sc_err err = {0};
    CHECK(t, prune_floor_parse("layer1=0.98,layer1.0=0.5,fc=0", &fs, &err) == 0, "%s", err.msg);
    CHECK(t, fs.n == 3 && !strcmp(fs.prefix[1], "layer1.0") && fs.value[0] == 0.98 && fs.value[2] == 0.0,
          "parsed %d", fs.n);
    prune_floor_spec_free(&fs);
    const char *bad[] = {"layer1", "=0.5", "a=", "a=x", "a=0.5x", "a=1", "a=-0.1", "a=0.996",
                         "a=0.1,a=0.2", "a=0.1,", "", "a=0.1,,b=0.2", "a=nan"};
    const char *why[] = {"'='", "empty prefix", "number", "number", "number", "outside", "outside",
                         "outside", "twice", "empty item", "empty", "empty item", "outside"};
    for (int k = 0; k < (int)(sizeof bad / sizeof *bad); k++) {
        err.msg[0] = 0;
        CHECK(t, prune_floor_parse(bad[k], &fs, &err) != 0 && strstr(err.msg, why[k]),
              "'%s' accepted or wrong message (%s)", bad[k], err.msg);
    }
    CHECK(t, prune_floor_parse("a=0.995", &fs, &err) == 0, "s_max refused: %s", err.msg);
    prune_floor_spec_free(&fs);
    size_t cnt[3] = {100, 300, 600};
    prune_layers pl = fake_layers(3, cnt);
    double ok[3] = {0.99, 0.95, 0.8}, no[3] = {0.99, 0.95, 0.9};  // need 0.864, 0.924
    CHECK_CLOSE(t, prune_floor_need(&pl, ok), 0.864, 1e-12);
    CHECK(t, prune_floor_budget(&pl, ok, 0.9, &err) == 0, "%s", err.msg);
    CHECK(t, prune_floor_budget(&pl, ok, 0.864, &err) == 0, "exact fit refused: %s", err.msg);
    CHECK(t, prune_floor_budget(&pl, no, 0.9, &err) != 0 && strstr(err.msg, "0.9240"),
          "over budget accepted (%s)", err.msg);
    prune_layers_free(&pl);
}

// evolve_plan with per-layer floors: one small layer floored above the
// target is lifted to its scaled floor at every step and ends at it, the
// overall floor is met at every step; floors all equal to layer_min give the
// same plans bit for bit as layer_min alone.
static void test_plan_layer_floor(tctx *t) {
    rng r;
    rng_seed(&r, 55, 0);
    for (int trial = 0; trial < 10; trial++) {
        int L = 3 + (int)rng_below(&r, 8), K = 10;
        size_t cnt[16];
        for (int l = 0; l < L; l++) cnt[l] = 50 + rng_below(&r, l ? 30000 : 900);
        prune_layers pl = fake_layers(L, cnt);
        double T = 0.6 + 0.3 * rng_uniform(&r), m = T * rng_uniform(&r), lf[16], same[16];
        for (int l = 0; l < L; l++) lf[l] = m, same[l] = m;
        lf[0] = T + (0.99 - T) * rng_uniform(&r);  // above the target (layer 0 is small)
        evolve_cfg c, c0, c1;
        evolve_cfg_default(&c, K, T);
        c.layer_floor = lf;
        c0 = c1 = c;
        c0.layer_floor = NULL, c0.layer_min = m;
        c1.layer_floor = same;
        double sp[16] = {0}, gen[16], sens[16], tg[16], t0[16], t1[16];
        for (int l = 0; l < L; l++) sens[l] = 0.1 + rng_uniform(&r), gen[l] = 0.5 * rng_uniform(&r);
        prune_sol s = {.sparsity = sp, .genome = gen};
        for (int k = 1; k <= K; k++) {
            double F = evolve_floor(&c, k);
            rng r0 = r, r1 = r;
            evolve_plan(&s, &pl, sens, &c0, F, &r0, t0);
            evolve_plan(&s, &pl, sens, &c1, F, &r1, t1);
            CHECK(t, memcmp(t0, t1, (size_t)L * sizeof *t0) == 0, "trial %d step %d: not the same bits", trial, k);
            evolve_plan(&s, &pl, sens, &c, F, &r, tg);
            for (int l = 0; l < L; l++)
                CHECK(t, tg[l] >= gmp_layer_floor_at(lf[l], T, F, c.s_max) - 1e-12,
                      "trial %d step %d layer %d: %g below its floor", trial, k, l, tg[l]);
            CHECK(t, fabs(prune_sparsity_overall(&pl, tg) - F) <= (double)(L + 1) / (double)pl.total,
                  "trial %d step %d: overall %g, floor %g", trial, k, prune_sparsity_overall(&pl, tg), F);
            for (int l = 0; l < L; l++) {
                size_t z = prune_target_zeros(cnt[l], tg[l]), have = prune_target_zeros(cnt[l], sp[l]);
                sp[l] = (double)(z > have ? z : have) / (double)cnt[l];
                gen[l] = sp[l];
            }
        }
        CHECK(t, sp[0] >= lf[0] - 0.5 / (double)cnt[0], "trial %d: layer 0 at %g, floor %g", trial, sp[0], lf[0]);
        prune_layers_free(&pl);
    }
}

// Sensitivities follow the slope of drop on cut.
static void test_sens(tctx *t) {
    rng r;
    rng_seed(&r, 9, 0);
    int n = 8, L = 3;
    double sens[3] = {0, 0, 0}, cut[24], drop[8];
    for (int it = 0; it < 40; it++) {
        for (int i = 0; i < n; i++) {
            for (int l = 0; l < L; l++) cut[i * L + l] = rng_uniform(&r) < 0.5 ? 0.0 : 0.2 * rng_uniform(&r);
            drop[i] = 30.0 * cut[i * L + 1] + 0.05 * rng_normal(&r) - 1.0;
        }
        evolve_sens_update(sens, L, n, cut, drop, 0.3);
    }
    CHECK(t, fabs(sens[1] - 30.0) < 3.0, "sens[1] %g", sens[1]);
    CHECK(t, fabs(sens[0]) < 3.0 && fabs(sens[2]) < 3.0, "sens %g %g", sens[0], sens[2]);
    double rho[3];
    evolve_robustness(sens, L, rho);
    CHECK(t, rho[1] < rho[0] && rho[1] < rho[2], "robustness %g %g %g", rho[0], rho[1], rho[2]);
}

// k-means separates three tight blobs of awkward sizes.
static void test_kmeans(tctx *t) {
    rng r;
    rng_seed(&r, 4, 0);
    int n = 13, d = 5, as[13];
    double x[13 * 5];
    int truth[13];
    for (int i = 0; i < n; i++) {
        truth[i] = i % 3;
        for (int j = 0; j < d; j++) x[i * d + j] = truth[i] * 0.4 + 0.01 * rng_normal(&r);
    }
    CHECK(t, evolve_kmeans(x, n, d, 3, &r, as, NULL) == 0, "kmeans");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            CHECK(t, (as[i] == as[j]) == (truth[i] == truth[j]), "points %d %d", i, j);
    CHECK(t, evolve_kmeans(x, 2, d, 5, &r, as, NULL) == 0 && as[0] != as[1], "k > n");
}

// --- selection ---------------------------------------------------------------

// Rejected solutions whose masks grew are rewound to their snapshot; the
// admitted keep their state and take their sparsity as genome.
static void test_select(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    if (!nt) {
        CHECK(t, 0, "%s", err.msg);
        return;
    }
    rng r;
    rng_seed(&r, 21, 0);
    int n = 5, L = 4;
    prune_pop *p = random_pop(nt, n, L, &r);
    evolve_cfg c;
    evolve_cfg_default(&c, 10, 0.9);
    c.cluster_every = 0;
    c.patience = 100;
    c.threshold = 1.5;
    double acc[5] = {70.0, 69.5, 60.0, 71.0, 50.0}, cut[20] = {0};
    for (int i = 0; i < n; i++) {
        prune_sol_snapshot(p, i);
        p->sol[i].acc_prev = p->sol[i].acc;
        for (size_t k = 0; k < p->nparam; k++) p->sol[i].param[k] += 1.0f;  // "trained"
        p->sol[i].acc = acc[i];
        cut[i * L + 1] = 0.1;
    }
    cut[4 * L + 1] = 0.0;  // solution 4 did not grow: nothing to rewind
    prune_hist h = {0};
    CHECK(t, evolve_select(p, &c, 1, cut, &r, &h, &err) == 0, "%s", err.msg);
    CHECK(t, h.admitted == 3 && h.rewound == 1, "admitted %d rewound %d", h.admitted, h.rewound);
    CHECK(t, p->best == 3, "best %d", p->best);
    CHECK(t, !memcmp(p->sol[2].param, p->snap[2].param, p->nparam * 4), "not rewound");
    CHECK(t, p->sol[2].acc == p->snap[2].acc, "accuracy not rewound");
    CHECK(t, memcmp(p->sol[0].param, p->snap[0].param, p->nparam * 4) != 0, "admitted rewound");
    CHECK(t, memcmp(p->sol[4].param, p->snap[4].param, p->nparam * 4) != 0, "unchanged rewound");
    CHECK(t, !memcmp(p->sol[0].genome, p->sol[0].sparsity, L * sizeof(double)), "genome");
    for (int l = 0; l < L; l++)
        CHECK(t, p->sol[2].genome[l] >= p->sol[2].sparsity[l] - 1e-12, "genome below mask");
    CHECK(t, p->sol[2].fails == 1 + 0 && p->sol[4].fails == 1, "fails %d %d", p->sol[2].fails,
          p->sol[4].fails);
    // Clustering keeps at most `keep` per cluster and copies the best over the rest.
    c.cluster_every = 1;
    c.clusters = 1;
    c.keep = 2;
    prune_hist h2 = {0};
    CHECK(t, evolve_select(p, &c, 2, cut, &r, &h2, &err) == 0, "%s", err.msg);
    CHECK(t, h2.replaced >= n - 2, "replaced %d", h2.replaced);
    prune_pop_free(p);
    net_free(nt);
}

// --- state file ---------------------------------------------------------------

// Writes, reads back bit for bit, then rejects corrupt, truncated and
// mismatched files with a message naming the file.
static void test_state_file(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    net *other = net_create("lenet", 3, 32, 32, 7, &err);
    if (!nt || !other) {
        CHECK(t, 0, "%s", err.msg);
        return;
    }
    rng r;
    rng_seed(&r, 8, 0);
    prune_pop *p = random_pop(nt, 3, 4, &r);
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_prune_state_%d.bin", (int)getpid());
    CHECK(t, prune_state_save(path, p, "{\"method\":\"evolve\"}", &err) == 0, "%s", err.msg);
    char *cfg = NULL;
    prune_pop *q = prune_state_load(path, nt, 4, &cfg, &err);
    CHECK(t, q != NULL, "%s", err.msg);
    if (q) {
        CHECK(t, cfg && !strcmp(cfg, "{\"method\":\"evolve\"}"), "config %s", cfg ? cfg : "");
        CHECK(t, q->n == 3 && q->iter == 3 && q->best == 2 && q->images == 12345, "header");
        CHECK(t, q->nhist == 1 && q->hist[0].best_acc == 61.5, "history");
        CHECK(t, !memcmp(q->sens, p->sens, 4 * sizeof(double)), "sens");
        for (int i = 0; i < 3; i++)
            CHECK(t, sol_equal(&q->sol[i], &p->sol[i], 4, p->nparam, p->nbuf), "solution %d", i);
    }
    free(cfg);
    prune_pop_free(q);
    // Another net's sizes.
    q = prune_state_load(path, other, 4, &cfg, &err);
    CHECK(t, q == NULL && strstr(err.msg, "another net") && strstr(err.msg, path), "%s", err.msg);
    prune_pop_free(q);
    // One flipped byte in the middle.
    FILE *f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size / 2, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, size / 2, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
    q = prune_state_load(path, nt, 4, &cfg, &err);
    CHECK(t, q == NULL && strstr(err.msg, "corrupt"), "flipped byte: %s", err.msg);
    prune_pop_free(q);
    // Truncated.
    CHECK(t, truncate(path, size / 3) == 0, "truncate");
    q = prune_state_load(path, nt, 4, &cfg, &err);
    CHECK(t, q == NULL && strstr(err.msg, path), "truncated: %s", err.msg);
    prune_pop_free(q);
    remove(path);
    prune_pop_free(p);
    net_free(nt);
    net_free(other);
}

int main(void) {
    tctx t = {.suite = "test_prune_evolve"};
    RUN(&t, test_cubic);
    RUN(&t, test_plan);
    RUN(&t, test_layer_floor);
    RUN(&t, test_plan_floor);
    RUN(&t, test_layer_floor_at);
    RUN(&t, test_water_fill);
    RUN(&t, test_floor_spec);
    RUN(&t, test_plan_layer_floor);
    RUN(&t, test_sens);
    RUN(&t, test_kmeans);
    RUN(&t, test_select);
    RUN(&t, test_state_file);
    return check_finish(&t);
}
