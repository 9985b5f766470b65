// Tests of the pruning run on tiny synthetic data on the CPU (lenet): zeros
// stay zero through training (momentum too), masks only grow, targets are
// reached, a stopped run resumed from its state file ends bitwise equal to
// an uninterrupted one, the same seed gives the same result, evolve's racing
// (the population halved, survivors training more rounds) keeps the image
// budget and trains only the survivors, a per-layer floor holds for every
// solution of evolve (and changes nothing for gmp/oneshot), per-layer floors
// (--layer-floor: longest prefix, one layer above the target) hold for evolve
// and gmp at the target, evolve does at least as well as oneshot at the same
// sparsity and image budget, and under the latency objective a given target
// too low for the latency target is raised until the winner meets it (resumable).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "datasets/cifar.h"
#include "prune/floor.h"
#include "prune/gmp.h"
#include "prune/search.h"
#include "runtime/exec.h"
#include "runtime/net.h"

// --- fixture ------------------------------------------------------------------

typedef struct {
    char dir[128];
    dataset ds;
    net *trained;  // lenet trained briefly on the tiny set (start model)
} fixture;

// Trains nt for `steps` batches of 32 with a constant learning rate.
static int pretrain(net *nt, const dataset *ds, int steps, sc_err *err) {
    exec *ex = exec_create(nt, DEV_CPU, PREC_FP32, 32, err);
    if (!ex) return -1;
    loader ld;
    int rc = loader_init(&ld, &ds->train, 32, 1, 99, err);
    exec_hparams hp = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = 1};
    for (int i = 0, ep = 0; !rc && i < steps; i++) {
        exec_batch b;
        if (!loader_next(&ld, &b)) {
            loader_start_epoch(&ld, ++ep);
            loader_next(&ld, &b);
        }
        rc = exec_train_step(ex, &b, &hp, err);
    }
    if (!rc) rc = exec_read_net(ex, err);
    if (!rc) loader_free(&ld);
    exec_free(ex);
    return rc;
}

// Writes a tiny synthetic set (4 classes), opens it and trains the start model.
static int fixture_init(fixture *f, sc_err *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/test_prune_search_%d", (int)getpid());
    mkdir(f->dir, 0777);
    SC_TRY(synthetic_write(f->dir, 704, 200, 4, 77, err));
    SC_TRY(dataset_open(f->dir, NULL, 192, 5, &f->ds, err));
    f->trained = net_create("lenet", 3, 32, 32, f->ds.classes, err);
    if (!f->trained) return -1;
    rng g;
    rng_seed(&g, 3, 0);
    net_init_weights(f->trained, &g);
    memcpy(f->trained->in_mean, f->ds.mean, sizeof f->ds.mean);
    memcpy(f->trained->in_std, f->ds.std, sizeof f->ds.std);
    return pretrain(f->trained, &f->ds, 200, err);
}

// Removes the fixture's files.
static void fixture_free(fixture *f) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", f->dir);
    net_free(f->trained);
    dataset_free(&f->ds);
}

// A small configuration of a method.
static prune_cfg small_cfg(prune_method m, int rounds, double target) {
    prune_cfg c;
    prune_cfg_default(&c, m);
    c.population = m == PM_EVOLVE ? 4 : 1;
    c.rounds = rounds;
    c.batches = 3;
    c.target = target;
    c.hp.batch = 32;
    c.hp.lr = 0.01f;
    c.scan_images = 96;
    c.quiet = 1;
    c.seed = 11;
    return c;
}

// A copy of the trained model (the executor's net for one run).
static net *model_copy(const net *src) {
    net *nt = net_from_desc(src->arch, src->desc, src->in_c, src->in_h, src->in_w, src->classes, NULL);
    if (!nt) return NULL;
    memcpy(nt->param, src->param, src->nparam * sizeof *nt->param);
    memcpy(nt->mask, src->mask, src->nparam * sizeof *nt->mask);
    memcpy(nt->buf, src->buf, src->nbuf * sizeof *nt->buf);
    memcpy(nt->in_mean, src->in_mean, sizeof nt->in_mean);
    memcpy(nt->in_std, src->in_std, sizeof nt->in_std);
    return nt;
}

typedef struct {
    net *nt;
    exec *ex;
    prune_search s;
} run;

// Sets up a run of cfg from a copy of `start`.
static int run_init(run *r, const fixture *f, const net *start, const prune_cfg *cfg, sc_err *err) {
    memset(r, 0, sizeof *r);
    if (!(r->nt = model_copy(start))) return sc_fail(err, "copy");
    if (!(r->ex = exec_create(r->nt, DEV_CPU, PREC_FP32, cfg->hp.batch, err))) return -1;
    return prune_search_init(&r->s, cfg, &f->ds, r->nt, r->ex, err);
}

// Frees a run.
static void run_free(run *r) {
    prune_search_free(&r->s);
    exec_free(r->ex);
    net_free(r->nt);
}

// True when two populations hold identical solutions and history accuracies.
static int pops_equal(const prune_pop *a, const prune_pop *b) {
    if (a->n != b->n || a->iter != b->iter || a->best != b->best || a->nhist != b->nhist ||
        a->images != b->images)
        return 0;
    for (int i = 0; i < a->n; i++) {
        const prune_sol *x = &a->sol[i], *y = &b->sol[i];
        if (x->acc != y->acc || x->batches != y->batches || memcmp(x->param, y->param, a->nparam * 4) ||
            memcmp(x->mask, y->mask, a->nparam * 4) || memcmp(x->mom, y->mom, a->nparam * 4) ||
            memcmp(x->buf, y->buf, a->nbuf * 4))
            return 0;
    }
    for (int h = 0; h < a->nhist; h++)
        if (a->hist[h].best_acc != b->hist[h].best_acc || a->hist[h].mean_acc != b->hist[h].mean_acc)
            return 0;
    return !memcmp(a->sens, b->sens, (size_t)a->L * sizeof(double));
}

// --- tests ----------------------------------------------------------------------

// Zeros stay zero through training: after every gmp iteration the solution's
// pruned weights and momentum are exactly 0, and its masks only grow.
static void test_zeros_and_growth(tctx *t, fixture *f) {
    sc_err err = {0};
    run r;
    prune_cfg c = small_cfg(PM_GMP, 6, 0.8);
    if (run_init(&r, f, f->trained, &c, &err) || prune_search_begin(&r.s, &err)) {
        CHECK(t, 0, "%s", err.msg);
        run_free(&r);
        return;
    }
    float *prev = calloc(r.nt->nparam, sizeof *prev);
    memcpy(prev, r.s.pop->sol[0].mask, r.nt->nparam * sizeof *prev);
    for (int it = 1; it <= 6; it++) {
        r.s.cfg.stop_after = it;
        CHECK(t, prune_search_run(&r.s, NULL, NULL, &err) == 0, "%s", err.msg);
        prune_sol_load(r.s.pop, 0, r.nt, r.s.mom);
        CHECK(t, prune_mask_violations(r.nt, &r.s.pl, r.s.mom) == 0, "iteration %d: pruned weights or momentum not zero", it);
        // The executor's own copy after the last step, too.
        float *mom = malloc(r.nt->nparam * sizeof *mom);
        exec_read_momentum(r.ex, mom, &err);
        exec_read_net(r.ex, &err);
        CHECK(t, prune_mask_violations(r.nt, &r.s.pl, mom) == 0, "executor state at iteration %d", it);
        free(mom);
        size_t revived = 0;
        for (size_t k = 0; k < r.nt->nparam; k++) revived += prev[k] == 0.0f && r.s.pop->sol[0].mask[k] != 0.0f;
        CHECK(t, revived == 0, "iteration %d revived %zu weights", it, revived);
        memcpy(prev, r.s.pop->sol[0].mask, r.nt->nparam * sizeof *prev);
    }
    // gmp reaches its target in every layer exactly (round(s * n) zeros).
    for (int l = 0; l < r.s.pl.n; l++) {
        size_t z = prune_mask_zeros(r.s.pop->sol[0].mask + r.s.pl.offset[l], r.s.pl.count[l]);
        CHECK(t, z == prune_target_zeros(r.s.pl.count[l], 0.8), "layer %d: %zu zeros", l, z);
    }
    CHECK(t, r.s.finished, "gmp did not finish");
    free(prev);
    run_free(&r);
}

// Evolve from a partly pruned model: every solution keeps the start mask's
// zeros at every iteration, and the winner reaches the target (within one
// element per layer).
static void test_evolve_masks(tctx *t, fixture *f) {
    sc_err err = {0};
    net *start = model_copy(f->trained);
    rng g;
    rng_seed(&g, 17, 0);
    prune_layers pl;
    prune_layers_init(&pl, start, &err);
    for (int l = 0; l < pl.n; l++)
        for (size_t k = pl.offset[l]; k < pl.offset[l] + pl.count[l]; k++)
            if (rng_uniform(&g) < 0.3f) start->mask[k] = 0.0f, start->param[k] = 0.0f;
    run r;
    prune_cfg c = small_cfg(PM_EVOLVE, 5, 0.85);
    c.ev.cluster_every = 2;
    if (run_init(&r, f, start, &c, &err) || prune_search_begin(&r.s, &err)) {
        CHECK(t, 0, "%s", err.msg);
    } else {
        for (int it = 1; it <= 5; it++) {
            r.s.cfg.stop_after = it;
            CHECK(t, prune_search_run(&r.s, NULL, NULL, &err) == 0, "%s", err.msg);
            for (int i = 0; i < r.s.pop->n; i++) {
                size_t revived = 0;
                for (size_t k = 0; k < start->nparam; k++)
                    revived += start->mask[k] == 0.0f && r.s.pop->sol[i].mask[k] != 0.0f;
                CHECK(t, revived == 0, "iteration %d solution %d revived %zu", it, i, revived);
                prune_sol_load(r.s.pop, i, r.nt, r.s.mom);
                CHECK(t, prune_mask_violations(r.nt, &r.s.pl, r.s.mom) == 0, "zeros, solution %d", i);
            }
        }
        int best;
        CHECK(t, prune_search_result(&r.s, &best, &err) == 0, "%s", err.msg);
        double over = net_sparsity(r.nt);
        CHECK(t, fabs(over - 0.85) * (double)pl.total <= pl.n, "sparsity %.6f", over);
    }
    prune_layers_free(&pl);
    run_free(&r);
    net_free(start);
}

// Stopped after iteration 2 and resumed from the state file == uninterrupted;
// a second uninterrupted run with the same seed is identical too.
static void test_resume_and_seed(tctx *t, fixture *f) {
    sc_err err = {0};
    char state[200];
    snprintf(state, sizeof state, "%s/prune.state", f->dir);
    prune_cfg c = small_cfg(PM_EVOLVE, 4, 0.8);
    c.finetune = 1;
    c.ev.cluster_every = 2;
    run a, b, d;
    int ok = !run_init(&a, f, f->trained, &c, &err) && !prune_search_begin(&a.s, &err) &&
             !prune_search_run(&a.s, NULL, NULL, &err);
    CHECK(t, ok && a.s.finished, "uninterrupted run: %s", err.msg);
    prune_cfg c2 = c;
    c2.stop_after = 2;
    ok = !run_init(&b, f, f->trained, &c2, &err) && !prune_search_begin(&b.s, &err) &&
         !prune_search_run(&b.s, state, "{\"test\":1}", &err);
    CHECK(t, ok && !b.s.finished && b.s.pop->iter == 2, "stopped run: %s (iter %d)", err.msg,
          b.s.pop ? b.s.pop->iter : -1);
    run_free(&b);
    char *cfg = NULL;
    ok = !run_init(&b, f, f->trained, &c, &err) && !prune_search_resume(&b.s, state, &cfg, &err) &&
         !prune_search_run(&b.s, state, cfg, &err);
    CHECK(t, ok && b.s.finished, "resumed run: %s", err.msg);
    CHECK(t, cfg && !strcmp(cfg, "{\"test\":1}"), "stored config");
    free(cfg);
    CHECK(t, ok && pops_equal(a.s.pop, b.s.pop), "resumed run differs from the uninterrupted one");
    ok = !run_init(&d, f, f->trained, &c, &err) && !prune_search_begin(&d.s, &err) &&
         !prune_search_run(&d.s, NULL, NULL, &err);
    CHECK(t, ok && pops_equal(a.s.pop, d.s.pop), "same seed, different result");
    prune_cfg c3 = c;
    c3.seed = 12;
    run e;
    ok = !run_init(&e, f, f->trained, &c3, &err) && !prune_search_begin(&e.s, &err) &&
         !prune_search_run(&e.s, NULL, NULL, &err);
    CHECK(t, ok && !pops_equal(a.s.pop, e.s.pop), "another seed gives the same result");
    run_free(&a);
    run_free(&b);
    run_free(&d);
    run_free(&e);
}

// The racing schedule: population sizes and the clock of the survivors.
static void test_race_schedule(tctx *t, fixture *f) {
    (void)f;
    prune_cfg c = small_cfg(PM_EVOLVE, 12, 0.9);
    c.population = 8;
    c.halve_every = 3;
    int want[13] = {8, 8, 8, 4, 4, 4, 2, 2, 2, 1, 1, 1, 1};
    for (int it = 0; it < 13; it++)
        CHECK(t, prune_search_active(&c, it) == want[it], "iteration %d: %d active", it,
              prune_search_active(&c, it));
    CHECK(t, prune_search_clock(&c, 12) == 3 + 6 + 12 + 24, "clock %ld", prune_search_clock(&c, 12));
    CHECK(t, prune_search_clock(&c, 15) == 48, "clock after 3 fine-tuning rounds");
    c.population = 6;
    c.halve_every = 1;  // 6, 3, then 1 (divisors of 6)
    CHECK(t, prune_search_active(&c, 1) == 3 && prune_search_active(&c, 2) == 1, "population 6");
    c.halve_every = 0;
    CHECK(t, prune_search_active(&c, 5) == 6 && prune_search_clock(&c, 7) == 7, "no racing");
    c.population = 1;
    c.halve_every = 1;
    CHECK(t, prune_search_active(&c, 3) == 1 && prune_search_clock(&c, 9) == 9, "population 1");
}

// A racing run (4 solutions halved every iteration): the same images as
// without racing; after the halvings only the survivor trains, every round
// of the rest of the run; a stop after iteration 1 resumed is bitwise equal;
// the winner is at the target.
static void test_race_run(tctx *t, fixture *f) {
    sc_err err = {0};
    char state[200];
    snprintf(state, sizeof state, "%s/race.state", f->dir);
    prune_cfg c = small_cfg(PM_EVOLVE, 4, 0.8);
    c.halve_every = 1;
    c.finetune = 2;
    run a, b;
    int ok = !run_init(&a, f, f->trained, &c, &err) && !prune_search_begin(&a.s, &err);
    long before[4] = {0};
    a.s.cfg.stop_after = 2;
    ok = ok && !prune_search_run(&a.s, NULL, NULL, &err);
    for (int i = 0; ok && i < 4; i++) before[a.s.pop->sol[i].stream] = a.s.pop->sol[i].batches;
    a.s.cfg.stop_after = 0;
    ok = ok && !prune_search_run(&a.s, NULL, NULL, &err);
    CHECK(t, ok && a.s.finished, "racing run: %s", err.msg);
    if (!ok) {
        run_free(&a);
        return;
    }
    prune_pop *p = a.s.pop;
    CHECK(t, p->images == (long)(4 * 4 + 2) * c.batches * c.hp.batch, "images %ld", p->images);
    const prune_sol *w = &p->sol[p->best];
    long trained = (prune_search_clock(&c, 6) - prune_search_clock(&c, 2)) * c.batches;
    CHECK(t, trained == 10 * c.batches, "clock");
    CHECK(t, w->batches - before[w->stream] == trained, "the survivor trained %ld batches, not %ld",
          w->batches - before[w->stream], trained);
    for (int i = 0; i < 4; i++)
        if (i != p->best)
            CHECK(t, p->sol[i].batches == before[p->sol[i].stream], "solution %d trained after losing", i);
    double tol = (double)(a.s.pl.n + 1) / (double)a.s.pl.total;
    CHECK(t, prune_sparsity_overall(&a.s.pl, w->sparsity) >= 0.8 - tol, "winner below the target");
    prune_cfg c2 = c;
    c2.stop_after = 1;
    ok = !run_init(&b, f, f->trained, &c2, &err) && !prune_search_begin(&b.s, &err) &&
         !prune_search_run(&b.s, state, "{}", &err);
    run_free(&b);
    char *cfg = NULL;
    ok = ok && !run_init(&b, f, f->trained, &c, &err) && !prune_search_resume(&b.s, state, &cfg, &err) &&
         !prune_search_run(&b.s, NULL, NULL, &err);
    free(cfg);
    CHECK(t, ok && pops_equal(a.s.pop, b.s.pop), "racing: resumed run differs (%s)", err.msg);
    run_free(&a);
    run_free(&b);
}

// --- per-layer floor (--min-layer-sparsity) -----------------------------------

// Smallest margin (sparsity - floor, in weights) over the layers of s.
static double floor_margin(const prune_layers *pl, const double *s, double lf) {
    double lo = INFINITY;
    for (int l = 0; l < pl->n; l++) lo = fmin(lo, (s[l] - lf) * (double)pl->count[l]);
    return lo;
}

// Evolve with a floor (no racing, so every solution trains every
// iteration): after each iteration every solution holds the layer floor of
// the point of the schedule it stands at (the floor scaled by its overall
// sparsity: rewound and copied solutions may stand at an earlier point), none
// passes the overall floor, and the winner has every layer at the floor
// (within one weight) and the target overall. Without the floor the same run
// leaves a layer below it.
static void test_floor_evolve(tctx *t, fixture *f) {
    sc_err err = {0};
    double T = 0.85, m = 0.8;
    double margin[2];
    for (int with = 1; with >= 0; with--) {
        run r;
        prune_cfg c = small_cfg(PM_EVOLVE, 5, T);
        c.halve_every = 0;
        c.ev.cluster_every = 2;
        c.min_layer = with ? m : 0.0;
        if (run_init(&r, f, f->trained, &c, &err) || prune_search_begin(&r.s, &err)) {
            CHECK(t, 0, "%s", err.msg);
            run_free(&r);
            return;
        }
        double tol = (double)(r.s.pl.n + 1) / (double)r.s.pl.total;
        for (int it = 1; it <= 5 && with; it++) {
            r.s.cfg.stop_after = it;
            CHECK(t, prune_search_run(&r.s, NULL, NULL, &err) == 0, "%s", err.msg);
            for (int i = 0; i < r.s.pop->n; i++) {
                const double *sp = r.s.pop->sol[i].sparsity;
                double lf = gmp_layer_floor(m, T, prune_sparsity_overall(&r.s.pl, sp));
                CHECK(t, floor_margin(&r.s.pl, sp, lf) >= -1.0, "iteration %d solution %d below %g", it, i, lf);
                CHECK(t, prune_sparsity_overall(&r.s.pl, sp) <= evolve_floor(&r.s.cfg.ev, it) + tol,
                      "iteration %d solution %d overshoots", it, i);
            }
        }
        r.s.cfg.stop_after = 0;
        int best;
        CHECK(t, !prune_search_run(&r.s, NULL, NULL, &err) && r.s.finished &&
                 !prune_search_result(&r.s, &best, &err), "%s", err.msg);
        margin[with] = floor_margin(&r.s.pl, r.s.pop->sol[best].sparsity, m);
        CHECK(t, fabs(net_sparsity(r.nt) - T) <= tol, "%s floor: sparsity %.6f", with ? "with" : "without",
              net_sparsity(r.nt));
        run_free(&r);
    }
    CHECK(t, margin[1] >= -0.5, "a layer %.1f weights below the floor", -margin[1]);
    CHECK(t, margin[0] < -1.0, "without the floor every layer is above it anyway (%.1f)", margin[0]);
}

// gmp and oneshot: uniform targets already meet any floor up to the target,
// so a floor (here the target itself) changes nothing, bit for bit; a floor
// above the target or below 0 is refused.
static void test_floor_uniform(tctx *t, fixture *f) {
    sc_err err = {0};
    prune_method ms[2] = {PM_GMP, PM_ONESHOT};
    for (int k = 0; k < 2; k++) {
        run a, b;
        prune_cfg c = small_cfg(ms[k], 4, 0.7), cf = c;
        cf.min_layer = 0.7;
        int ok = !run_init(&a, f, f->trained, &c, &err) && !prune_search_begin(&a.s, &err) &&
                 !prune_search_run(&a.s, NULL, NULL, &err);
        ok = ok && !run_init(&b, f, f->trained, &cf, &err) && !prune_search_begin(&b.s, &err) &&
             !prune_search_run(&b.s, NULL, NULL, &err);
        CHECK(t, ok && pops_equal(a.s.pop, b.s.pop), "method %d: the floor changed the run (%s)", k, err.msg);
        for (int l = 0; ok && l < b.s.pl.n; l++)
            CHECK(t, b.s.pop->sol[0].sparsity[l] >= 0.7 - 1.0 / (double)b.s.pl.count[l], "layer %d", l);
        run_free(&a);
        run_free(&b);
    }
    double bad[2] = {0.71, -0.01};
    for (int k = 0; k < 2; k++) {
        run r;
        prune_cfg c = small_cfg(PM_EVOLVE, 2, 0.7);
        c.min_layer = bad[k];
        CHECK(t, run_init(&r, f, f->trained, &c, &err) != 0 && strstr(err.msg, "floor"),
              "floor %g accepted (%s)", bad[k], err.msg);
        run_free(&r);
    }
}

// --- per-layer floors (--layer-floor) ---------------------------------------------

// Prefix matching on lenet's prunable layers (conv2, fc1, fc2, fc3; conv1 is
// not prunable): the longest prefix wins, the rest take the default, a
// prefix matching no prunable layer is refused by name.
static void test_floor_resolve(tctx *t, fixture *f) {
    sc_err err = {0};
    prune_layers pl;
    prune_floor_spec fs;
    double lf[8];
    if (prune_layers_init(&pl, f->trained, &err) || pl.n != 4) {
        CHECK(t, 0, "lenet layers: %s", err.msg);
        return;
    }
    CHECK(t, !prune_floor_parse("fc=0.5,fc1=0.9,conv=0.7", &fs, &err) &&
             !prune_floor_resolve(&fs, f->trained, &pl, 0.25, lf, &err), "%s", err.msg);
    CHECK(t, lf[0] == 0.7 && lf[1] == 0.9 && lf[2] == 0.5 && lf[3] == 0.5, "%g %g %g %g", lf[0], lf[1], lf[2], lf[3]);
    prune_floor_spec_free(&fs);
    CHECK(t, !prune_floor_parse("fc1.weight=0.9,fc1=0.3", &fs, &err) &&
             !prune_floor_resolve(&fs, f->trained, &pl, 0.25, lf, &err), "%s", err.msg);
    CHECK(t, lf[0] == 0.25 && lf[1] == 0.9 && lf[2] == 0.25, "%g %g %g", lf[0], lf[1], lf[2]);
    prune_floor_spec_free(&fs);
    const char *none[] = {"conv1=0.5", "fc=0.5,layer1=0.9", "fc1.weightx=0.5"};
    const char *name[] = {"'conv1'", "'layer1'", "'fc1.weightx'"};
    for (int k = 0; k < 3; k++) {
        err.msg[0] = 0;
        CHECK(t, !prune_floor_parse(none[k], &fs, &err) &&
                 prune_floor_resolve(&fs, f->trained, &pl, 0.0, lf, &err) != 0 && strstr(err.msg, name[k]),
              "'%s' accepted (%s)", none[k], err.msg);
        prune_floor_spec_free(&fs);
    }
    prune_layers_free(&pl);
}

// Runs cfg to the end; 0 on success.
static int run_all(run *r, const fixture *f, const prune_cfg *cfg, sc_err *err) {
    return run_init(r, f, f->trained, cfg, err) || prune_search_begin(&r->s, err) ||
           prune_search_run(&r->s, NULL, NULL, err);
}

// evolve and gmp with conv2 (2400 weights) floored at 0.95 above the target
// 0.8 and fc3 at 0.85: every layer of the result at its floor (within half a
// weight), the overall at the target; per-layer floors all equal to a
// --min-layer-sparsity give the same run bit for bit as that option alone;
// floors over the budget or above s_max are refused.
static void test_floor_layers_run(tctx *t, fixture *f) {
    sc_err err = {0};
    prune_method ms[3] = {PM_EVOLVE, PM_GMP, PM_ONESHOT};
    double T = 0.8, lf[4] = {0.95, 0.3, 0.3, 0.85}, same[4] = {0.3, 0.3, 0.3, 0.3};
    for (int k = 0; k < 3; k++) {
        run r, a, b;
        prune_cfg c = small_cfg(ms[k], 4, T), ca, cb;
        c.min_layer = 0.3;
        c.halve_every = 1;
        ca = cb = c;
        c.layer_floor = lf;
        cb.layer_floor = same;
        int best = 0;
        if (run_all(&r, f, &c, &err) || prune_search_result(&r.s, &best, &err)) {
            CHECK(t, 0, "method %d: %s", k, err.msg);
        } else {
            const double *sp = r.s.pop->sol[best].sparsity;
            for (int l = 0; l < r.s.pl.n; l++)
                CHECK(t, (sp[l] - lf[l]) * (double)r.s.pl.count[l] >= -0.5, "method %d layer %d: %g < %g", k, l, sp[l], lf[l]);
            double tol = (double)(r.s.pl.n + 1) / (double)r.s.pl.total;
            CHECK(t, fabs(net_sparsity(r.nt) - T) <= tol, "method %d: sparsity %.6f", k, net_sparsity(r.nt));
            CHECK(t, sp[0] > T + 0.1, "method %d: conv2 only at %g", k, sp[0]);
        }
        run_free(&r);
        int ok = !run_all(&a, f, &ca, &err) && !run_all(&b, f, &cb, &err);
        CHECK(t, ok && pops_equal(a.s.pop, b.s.pop), "method %d: floors = min-layer changed the run (%s)", k, err.msg);
        run_free(&a);
        run_free(&b);
    }
    double over[4] = {0.99, 0.99, 0.99, 0.99}, smax[4] = {0.996, 0.1, 0.1, 0.1};
    const double *bad[2] = {over, smax};
    for (int k = 0; k < 2; k++) {
        run r;
        prune_cfg c = small_cfg(PM_GMP, 2, T);
        c.layer_floor = bad[k];
        CHECK(t, run_init(&r, f, f->trained, &c, &err) != 0 && strstr(err.msg, k ? "floor" : "0.9900"),
              "bad floors %d accepted (%s)", k, err.msg);
        run_free(&r);
    }
}

// Validation accuracy of the result of a finished run of cfg.
static double result_acc(fixture *f, const prune_cfg *cfg, double *sparsity, sc_err *err) {
    run r;
    double acc = -1.0;
    int best;
    if (!run_init(&r, f, f->trained, cfg, err) && !prune_search_begin(&r.s, err) &&
        !prune_search_run(&r.s, NULL, NULL, err) && !prune_search_result(&r.s, &best, err)) {
        acc = r.s.pop->sol[best].acc;
        *sparsity = net_sparsity(r.nt);
    }
    run_free(&r);
    return acc;
}

// At 95% sparsity and the same training images (4 search iterations of 4
// solutions plus 16 fine-tuning rounds against 32 rounds), evolve is at
// least as accurate (validation) as oneshot, on the mean over three seeds.
static void test_evolve_vs_oneshot(tctx *t, fixture *f) {
    sc_err err = {0};
    double me = 0, mo = 0;
    for (int seed = 11; seed <= 13; seed++) {
        prune_cfg ev = small_cfg(PM_EVOLVE, 4, 0.95), os = small_cfg(PM_ONESHOT, 4 * 4 + 16, 0.95);
        ev.finetune = 16;
        ev.seed = os.seed = (uint64_t)seed;
        double se = 0, so = 0;
        double ae = result_acc(f, &ev, &se, &err), ao = result_acc(f, &os, &so, &err);
        CHECK(t, ae >= 0 && ao >= 0, "%s", err.msg);
        CHECK(t, fabs(se - so) < 1e-3, "sparsity %g vs %g", se, so);
        printf("  seed %d: evolve %.2f%% oneshot %.2f%% at sparsity %.4f\n", seed, ae, ao, se);
        me += ae / 3;
        mo += ao / 3;
    }
    CHECK(t, me >= mo, "evolve %.2f%% < oneshot %.2f%% (mean of 3 seeds)", me, mo);
}

// A table over the run's layers where every layer's time falls with its
// sparsity alike (so the time follows the unweighted mean of the layers'
// sparsities, which the search's weight-weighted target does not fix).
static int flat_table(lat_table *tb, int L) {
    double grid[3] = {0.0, 0.5, 0.98};
    if (lat_table_alloc(tb, L, 3, grid, NULL)) return -1;
    for (int l = 0; l < L; l++)
        for (int g = 0; g < 3; g++) tb->ms[l * 3 + g] = 1.0 - 0.9 * grid[g];
    tb->rest_ms = 0.1;
    return 0;
}

// The latency tests' set-up: the small evolve run with a given target (0.3)
// too low for the latency target, a flat table over its layers and the
// latency target at every layer 0.7 (the table's prediction); 0, or -1
// with the test failed.
static int lat_setup(tctx *t, fixture *f, prune_cfg *c, lat_table *tb) {
    sc_err err = {0};
    run a;
    *c = small_cfg(PM_EVOLVE, 8, 0.3);
    int ok = !run_all(&a, f, c, &err);  // for the layer count
    int L = ok ? a.s.pl.n : 1;
    if (ok) run_free(&a);
    ok = ok && !flat_table(tb, L);
    CHECK(t, ok, "set-up: %s", err.msg);
    if (!ok) return -1;
    double want[L];
    for (int l = 0; l < L; l++) want[l] = 0.7;
    c->ev.lat = tb, c->ev.lat_penalty = 1.0, c->ev.lat_target = lat_predict(tb, want);
    return 0;
}

// The table's prediction for run a's best solution (0 when the run failed: ok 0).
static double best_ms(const run *a, const lat_table *tb, int ok) {
    return ok ? lat_predict(tb, a->s.pop->sol[a->s.pop->best].sparsity) : 0.0;
}

// Runs c stopped after `after` iterations into the state file f->dir/NAME.state,
// then resumed: 1 when the resumed population equals ref's; the stopped
// run's target into *stopped.
static int lat_resume_after(fixture *f, const prune_cfg *c, const char *name, int after, const prune_pop *ref,
                            double *stopped, sc_err *err) {
    char state[200];
    snprintf(state, sizeof state, "%s/%s.state", f->dir, name);
    run b, d;
    prune_cfg c2 = *c;
    c2.stop_after = after;
    int ok = !run_init(&b, f, f->trained, &c2, err) && !prune_search_begin(&b.s, err) &&
             !prune_search_run(&b.s, state, "{}", err);
    *stopped = ok ? b.s.cfg.target : -1.0;
    char *cfg = NULL;
    ok = ok && !run_init(&d, f, f->trained, c, err) && !prune_search_resume(&d.s, state, &cfg, err) &&
         !prune_search_run(&d.s, state, cfg, err);
    free(cfg);
    ok = ok && pops_equal(ref, d.s.pop);
    run_free(&b);
    run_free(&d);
    return ok;
}

// Latency objective allocating by overall sparsity: with lat_retarget the
// target rises once the schedule reaches it and the winner ends within 2% of
// the latency target (without, over 10% above it); a run stopped after the
// first raise and resumed equals the uninterrupted one.
static void test_lat_retarget(tctx *t, fixture *f) {
    sc_err err = {0};
    prune_cfg c;
    lat_table tb;
    run a;
    if (lat_setup(t, f, &c, &tb)) return;
    int ok = !run_all(&a, f, &c, &err);
    const double p0 = best_ms(&a, &tb, ok);
    CHECK(t, ok && p0 > 1.1 * c.ev.lat_target, "without: %s %g vs %g", err.msg, p0, c.ev.lat_target);
    run_free(&a);
    c.lat_retarget = 1;
    ok = !run_all(&a, f, &c, &err);
    const double p1 = best_ms(&a, &tb, ok);
    CHECK(t, ok && p1 < 1.02 * c.ev.lat_target && a.s.cfg.target > 0.35, "with: %s %g vs %g (target %g)",
          err.msg, p1, c.ev.lat_target, a.s.cfg.target);
    double stopped = -1.0;
    CHECK(t, ok && lat_resume_after(f, &c, "lat", 7, a.s.pop, &stopped, &err) && stopped > 0.35,
          "stopped and resumed: %s (target %g at the stop)", err.msg, stopped);
    run_free(&a);
    lat_table_free(&tb);
}

// Latency objective allocating by time (lat_time = alloc), the same set-up:
// the winner ends within 2% of the latency target with the overall target
// never raised, and a stopped and resumed run equals the uninterrupted one.
static void lat_time_with(tctx *t, fixture *f, int alloc) {
    sc_err err = {0};
    prune_cfg c;
    lat_table tb;
    run a;
    if (lat_setup(t, f, &c, &tb)) return;
    c.ev.lat_time = alloc;
    int ok = !run_all(&a, f, &c, &err);
    const double p1 = best_ms(&a, &tb, ok);
    CHECK(t, ok && p1 < 1.02 * c.ev.lat_target && a.s.cfg.target == 0.3, "time: %s %g vs %g (target %g)", err.msg,
          p1, c.ev.lat_target, a.s.cfg.target);
    double stopped = -1.0;
    CHECK(t, ok && lat_resume_after(f, &c, "lat_time", 7, a.s.pop, &stopped, &err), "stopped and resumed: %s", err.msg);
    run_free(&a);
    lat_table_free(&tb);
}

// Each round's plan meets the round's scheduled time.
static void test_lat_time(tctx *t, fixture *f) { lat_time_with(t, f, EVOLVE_ALLOC_TIME); }

// Each layer ramps towards its place in the plan for the final target.
static void test_lat_ramp(tctx *t, fixture *f) { lat_time_with(t, f, EVOLVE_ALLOC_RAMP); }

// A stand-in for the GPU's whole-graph measurement: the table's prediction for
// nt's masks times a factor (a table that misses the graph by it).
typedef struct {
    const lat_table *t;
    double factor;
    int calls;
} fake_probe;

static int fake_measure(void *ctx, const net *nt, const prune_layers *pl, double *ms, sc_err *err) {
    fake_probe *p = ctx;
    double sp[pl->n];
    (void)err;
    prune_sparsity_read(nt, pl, sp);
    *ms = p->factor * lat_predict(p->t, sp);
    p->calls++;
    return 0;
}

// Latency checks (allocating by time, the same set-up) when the graph runs 15%
// slower than the table predicts: without checks the winner's graph ends over
// 5% above the latency target; with three it ends within 2% of it, the
// history holds the three checks and their factor, at least two checks come
// while the schedule still ramps, the factor comes in over at least two
// iterations and is whole by the search's last, and a run stopped while a
// factor is coming in (after 2 of 8 iterations, the first check just made;
// the checks follow iterations 2, 4 and 6) and resumed equals the
// uninterrupted one.
static void test_lat_checks(tctx *t, fixture *f) {
    sc_err err = {0};
    prune_cfg c;
    lat_table tb;
    run a;
    if (lat_setup(t, f, &c, &tb)) return;
    fake_probe fp = {.t = &tb, .factor = 1.15};
    c.ev.lat_time = EVOLVE_ALLOC_TIME;
    int ok = !run_all(&a, f, &c, &err);
    const double g0 = 1.15 * best_ms(&a, &tb, ok);
    CHECK(t, ok && g0 > 1.05 * c.ev.lat_target, "without: %s graph %g vs %g", err.msg, g0, c.ev.lat_target);
    if (ok) run_free(&a);
    c.lat_checks = 3, c.lat_measure = fake_measure, c.lat_measure_ctx = &fp;
    ok = !run_all(&a, f, &c, &err);
    int checks = 0;
    const double g1 = 1.15 * best_ms(&a, &tb, ok), scale = ok ? prune_search_lat_scale(&a.s, &checks) : 0.0;
    CHECK(t, ok && fabs(g1 / c.ev.lat_target - 1.0) < 0.02 && checks == 3 && fp.calls == 3 &&
          fabs(scale - 1.15) < 1e-9, "with: %s graph %g vs %g, %d checks (%d calls), scale %g", err.msg, g1,
          c.ev.lat_target, checks, fp.calls, scale);
    int ramping = 0;  // checks while the schedule still ramps to the target
    for (int i = 0; ok && i < a.s.pop->nhist; i++)
        ramping += isfinite(a.s.pop->hist[i].measured_latency_ms) && a.s.pop->hist[i].target < c.target - 1e-9;
    double step = 0.0;  // the largest change of the factor from one iteration to the next
    for (int it = 1; ok && it < c.rounds; it++)
        step = fmax(step, fabs(prune_search_lat_scale_at(&a.s, it) - prune_search_lat_scale_at(&a.s, it - 1)));
    CHECK(t, ok && ramping >= 2 && step < 0.5 * 0.15 + 1e-9 && prune_search_lat_scale_at(&a.s, c.rounds - 1) == 1.15,
          "phase-in: %d checks in the ramp, largest step %g, factor %g in the last iteration", ramping, step,
          ok ? prune_search_lat_scale_at(&a.s, c.rounds - 1) : 0.0);
    double stopped = -1.0;
    CHECK(t, ok && lat_resume_after(f, &c, "lat_checks", 2, a.s.pop, &stopped, &err), "stopped and resumed: %s",
          err.msg);
    if (ok) run_free(&a);
    lat_table_free(&tb);
}

// Runs one test that needs the fixture, like RUN() in check.h.
static void run_with(tctx *t, fixture *f, void (*fn)(tctx *, fixture *), const char *name) {
    t->test = name;
    t->bad = 0;
    fn(t, f);
    if (t->bad) {
        t->failed++;
        printf("FAIL %s\n", name);
    } else {
        t->passed++;
        printf("ok   %s\n", name);
    }
    fflush(stdout);
}

int main(void) {
    tctx t = {.suite = "test_prune_search"};
    fixture f;
    sc_err err = {0};
    if (fixture_init(&f, &err)) {
        printf("FAIL fixture: %s\n", err.msg);
        t.failed = 1;
        fixture_free(&f);
        return check_finish(&t);
    }
    run_with(&t, &f, test_zeros_and_growth, "test_zeros_and_growth");
    run_with(&t, &f, test_evolve_masks, "test_evolve_masks");
    run_with(&t, &f, test_resume_and_seed, "test_resume_and_seed");
    run_with(&t, &f, test_race_schedule, "test_race_schedule");
    run_with(&t, &f, test_race_run, "test_race_run");
    run_with(&t, &f, test_floor_evolve, "test_floor_evolve");
    run_with(&t, &f, test_floor_uniform, "test_floor_uniform");
    run_with(&t, &f, test_floor_resolve, "test_floor_resolve");
    run_with(&t, &f, test_floor_layers_run, "test_floor_layers_run");
    run_with(&t, &f, test_evolve_vs_oneshot, "test_evolve_vs_oneshot");
    run_with(&t, &f, test_lat_retarget, "test_lat_retarget");
    run_with(&t, &f, test_lat_time, "test_lat_time");
    run_with(&t, &f, test_lat_ramp, "test_lat_ramp");
    run_with(&t, &f, test_lat_checks, "test_lat_checks");
    fixture_free(&f);
    return check_finish(&t);
}
