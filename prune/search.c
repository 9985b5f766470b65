// The pruning run: rounds of masked training over a host population on one
// executor, for evolve, gmp and oneshot. See prune/search.h and docs/prune.md.
#include "search.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prune/floor.h"
#include "prune/gmp.h"
#include "prune/pop_dist.h"

// --- configuration ----------------------------------------------------------

// Defaults of a method.
void prune_cfg_default(prune_cfg *c, prune_method m) {
    memset(c, 0, sizeof *c);
    c->method = m;
    c->population = m == PM_EVOLVE ? 8 : 1;
    c->rounds = 30;
    c->batches = 50;
    c->target = 0.9;
    c->crit = (prune_crit){.alpha = 1.0f, .beta = m == PM_EVOLVE ? 0.5f : 0.0f};
    c->grad_steps = 4;
    c->ramp_begin = 0.0;
    c->ramp_end = 0.75;
    c->hp = (train_hparams){.batch = 128, .lr = 0.01f, .sched = SCHED_COSINE, .momentum = 0.9f,
                            .weight_decay = 5e-4f, .smoothing = 0.1f, .nesterov = 1};
    c->augment = 1;
    c->seed = 1;
    c->scan_images = 2000;
    c->save_interval = 30.0;
    evolve_cfg_default(&c->ev, c->rounds, c->target);
}

// Total iterations: the search (or gmp/oneshot rounds) plus evolve's fine-tuning.
int prune_search_total(const prune_search *s) {
    return s->cfg.rounds + (s->cfg.method == PM_EVOLVE ? s->cfg.finetune : 0);
}

// Largest divisor of n that is at most m (>= 1).
static int divisor_at_most(int n, int m) {
    for (int d = m < n ? m : n; d > 1; d--)
        if (n % d == 0) return d;
    return 1;
}

// Solutions training in iteration it (see the header).
int prune_search_active(const prune_cfg *c, int it) {
    int n = c->population;
    if (c->method != PM_EVOLVE || it >= c->rounds) return 1;
    if (c->halve_every <= 0 || n <= 1) return n;
    int h = it / c->halve_every;
    return h >= 30 ? 1 : divisor_at_most(n, n >> h);
}

// Rounds a surviving solution trained before iteration it (see the header).
long prune_search_clock(const prune_cfg *c, int it) {
    long k = 0;
    int search = c->method == PM_EVOLVE ? (it < c->rounds ? it : c->rounds) : 0;
    for (int t = 0; t < search; t++) k += c->population / prune_search_active(c, t);
    return k + (it - search);
}

// True when iteration `it` (0-based) is evolve's population search.
static int in_search(const prune_search *s, int it) {
    return s->cfg.method == PM_EVOLVE && it < s->cfg.rounds;
}

// --- set-up -----------------------------------------------------------------

// Copies and checks the per-layer floors (NULL: none) into s->floor; evolve
// reads them from there.
static int floor_copy(prune_search *s, const double *lf, sc_err *err) {
    int L = s->pl.n;
    s->cfg.layer_floor = s->cfg.ev.layer_floor = NULL;
    if (!lf) return 0;
    for (int l = 0; l < L; l++)
        if (!(lf[l] >= 0.0 && lf[l] <= s->cfg.ev.s_max))
            return sc_fail(err, "per-layer sparsity floor of layer %d outside [0, %g] (%g)", l,
                           s->cfg.ev.s_max, lf[l]);
    SC_TRY(prune_floor_budget(&s->pl, lf, s->cfg.target, err));
    if (!(s->floor = malloc((size_t)L * sizeof *s->floor))) return sc_fail(err, "out of memory");
    memcpy(s->floor, lf, (size_t)L * sizeof *s->floor);
    s->cfg.layer_floor = s->cfg.ev.layer_floor = s->floor;
    return 0;
}

// Allocates the search's buffers and one data stream per solution.
int prune_search_init(prune_search *s, const prune_cfg *cfg, const dataset *ds, net *nt,
                      exec *ex, sc_err *err) {
    memset(s, 0, sizeof *s);
    if (!(cfg->min_layer >= 0.0 && cfg->min_layer <= cfg->target))
        return sc_fail(err, "per-layer sparsity floor outside [0, target %g] (%g)", cfg->target,
                       cfg->min_layer);
    s->cfg = *cfg;
    if (cfg->method != PM_EVOLVE) s->cfg.population = 1;
    s->cfg.ev.layer_min = cfg->min_layer;
    s->cfg.ev.iterations = (int)prune_search_clock(&s->cfg, cfg->rounds);
    s->cfg.ev.target = cfg->target;
    s->cfg.ev.ramp_begin = cfg->ramp_begin;
    s->cfg.ev.ramp_end = cfg->ramp_end;
    s->cfg.ev.chance = 100.0 / (nt->classes > 0 ? nt->classes : 1);
    s->ds = ds;
    s->nt = nt;
    s->ex = ex;
    s->start_acc = -1.0;
    s->target0 = cfg->target;
    s->lat_goal = cfg->ev.lat_target;
    s->loaded = -1;
    s->t_run = progress_clock();
    SC_TRY(prune_layers_init(&s->pl, nt, err));
    SC_TRY(prune_layers_set_pattern(&s->pl, nt, &cfg->pattern, err));
    SC_TRY(floor_copy(s, cfg->layer_floor, err));
    int n = s->cfg.population;
    s->mom = calloc(nt->nparam, sizeof *s->mom);
    s->gabs = calloc(nt->nparam, sizeof *s->gabs);
    s->grad = calloc(nt->nparam, sizeof *s->grad);
    s->cut = calloc((size_t)n * s->pl.n, sizeof *s->cut);
    s->ld = calloc((size_t)n, sizeof *s->ld);
    s->owner = calloc((size_t)n, sizeof *s->owner);
    s->img = calloc((size_t)n, sizeof *s->img);
    s->log.cap = 4 * n + 8;  // a selection logs at most 3 entries per solution
    s->log.op = calloc((size_t)s->log.cap, sizeof *s->log.op);
    s->size = 1;
    if (!s->mom || !s->gabs || !s->grad || !s->cut || !s->ld || !s->owner || !s->img || !s->log.op)
        return sc_fail(err, "out of memory");
    for (int i = 0; i < n; i++) {
        uint64_t seed = cfg->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xD1B54A32D192ED03ull;
        SC_TRY(loader_init(&s->ld[i], &ds->train, cfg->hp.batch, cfg->augment, seed, err));
        if (loader_batches_per_epoch(&s->ld[i]) < 1)
            return sc_fail(err, "batch %d is larger than the training split (%d images)",
                           cfg->hp.batch, ds->train.n);
    }
    return 0;
}

// Frees the search's buffers, loaders and population.
void prune_search_free(prune_search *s) {
    for (int i = 0; s->ld && i < s->cfg.population; i++) loader_free(&s->ld[i]);
    free(s->ld);
    free(s->mom);
    free(s->gabs);
    free(s->grad);
    free(s->cut);
    free(s->floor);
    free(s->owner);
    free(s->img);
    free(s->log.op);
    prune_pop_free(s->pop);
    prune_layers_free(&s->pl);
    memset(s, 0, sizeof *s);
}

// Trains against teacher t.
void prune_search_set_teacher(prune_search *s, distill *t) { s->teacher = t; }

// Spreads the search over the ranks of d.
void prune_search_set_dist(prune_search *s, dist *d) {
    s->dist = d;
    s->rank = dist_rank(d);
    s->size = dist_size(d);
    if (s->rank != 0) s->cfg.quiet = 1;
    prune_pop_home(s->owner, s->cfg.population, s->size);
    s->die_iter = 0;
#ifdef SC_TEST_HOOKS  // test builds only (build/testbin/prune): tests/cli_prune_mpi.sh
    const char *die = getenv("SC_PRUNE_TEST_DIE_AT");
    if (!die || sscanf(die, "%d,%d", &s->die_iter, &s->die_rank) != 2) s->die_iter = 0;
#endif
}

// --- spreading the solutions over ranks -------------------------------------

// True when this rank holds (and trains) solution i.
static int mine(const prune_search *s, int i) { return s->owner[i] == s->rank; }

// Every rank gets the results of the solutions flagged in `which` from their
// owners: accuracies, stream position, images this iteration, sparsities and
// the round's cost increases (the arrays stay on the owner).
static int results_share(prune_search *s, const int *which, sc_err *err) {
    int L = s->pl.n;
    if (s->size < 2) return 0;
    double rec[4 + 2 * L];
    for (int i = 0; i < s->pop->n; i++) {
        prune_sol *sol = &s->pop->sol[i];
        double *cut = s->cut + (size_t)i * L;
        if (!which[i]) continue;
        if (mine(s, i)) {
            rec[0] = sol->acc, rec[1] = sol->acc_prev;
            rec[2] = (double)sol->batches, rec[3] = (double)s->img[i];
            memcpy(rec + 4, sol->sparsity, (size_t)L * sizeof *rec);
            memcpy(rec + 4 + L, cut, (size_t)L * sizeof *rec);
        }
        SC_TRY(dist_bcast(s->dist, rec, sizeof rec, s->owner[i], err));
        if (mine(s, i)) continue;
        sol->acc = rec[0], sol->acc_prev = rec[1];
        sol->batches = (long)rec[2], s->img[i] = (long)rec[3];
        memcpy(sol->sparsity, rec + 4, (size_t)L * sizeof *rec);
        memcpy(cut, rec + 4 + L, (size_t)L * sizeof *rec);
    }
    return 0;
}

// Rebalances the solutions that train this iteration over the ranks.
static int spread(prune_search *s, const int *active, sc_err *err) {
    int want[s->pop->n];
    if (s->size < 2 || !prune_pop_assign(s->owner, active, s->pop->n, s->size, want)) return 0;
    s->loaded = -1;
    return prune_pop_move(s->dist, s->pop, s->owner, want, err);
}

// The state file on rank 0: every solution's arrays are gathered there first.
static int state_save(prune_search *s, const char *path, const char *config, sc_err *err) {
    SC_TRY(prune_pop_gather(s->dist, s->pop, s->owner, err));
    int rc = s->rank == 0 ? prune_state_save(path, s->pop, config, err) : 0;
    SC_TRY(dist_agree(s->dist, rc, err));
    dist_set_epitaph(s->dist, "the run was stopped by mpirun: a rank died or the job was killed "
                     "(state file %s, iteration %d: continue with --resume)", path, s->pop->iter);
    return 0;
}

// Test builds (SC_TEST_HOOKS): SC_PRUNE_TEST_DIE_AT=I,R kills rank R as
// iteration I (1-based) starts; the shipped library never does.
static void test_die(const prune_search *s, int it) {
#ifdef SC_TEST_HOOKS
    if (s->die_iter == it + 1 && s->die_rank == s->rank) raise(SIGKILL);
#else
    (void)s, (void)it;
#endif
}

// --- moving solutions through the executor ----------------------------------

// Uploads solution i (parameters, masks, buffers, momentum) to the executor
// unless it already holds exactly that state.
static int sol_upload(prune_search *s, int i, sc_err *err) {
    if (s->loaded == i) return 0;
    s->loaded = -1;
    prune_sol_load(s->pop, i, s->nt, s->mom);
    SC_TRY(exec_write_net(s->ex, err));
    SC_TRY(exec_write_momentum(s->ex, s->mom, err));
    s->loaded = i;
    return 0;
}

// Accuracy (percent) of the executor's net on the first `limit` validation
// images (limit <= 0: all).
static int val_accuracy(prune_search *s, int limit, double *acc, sc_err *err) {
    data_split sub = s->ds->val;
    double loss;
    if (limit > 0 && limit < sub.n) sub.n = limit;
    if (sub.n == 0) return sc_fail(err, "the validation split is empty (fitness needs one)");
    return train_evaluate(s->ex, &sub, s->cfg.hp.batch, s->cfg.hp.smoothing, acc, &loss, err);
}

// --- one round of one solution ------------------------------------------------

// gabs += |grad| / G element by element, over the OpenMP threads when large
// (each element on its own: the same bits for any thread count).
static void gabs_add(float *gabs, const float *grad, size_t n, int G) {
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (size_t k = 0; k < n; k++) gabs[k] += fabsf(grad[k]) / (float)G;
}

// Trains solution i for one round: `batches` batches from its data stream at
// the learning rate of global step pos*batches + b (pos: the round's place on
// the clock, prune_search_clock); the mean |gradient| of the last grad_steps
// steps goes to s->gabs when want_grad. Leaves the trained state in s->nt
// and s->mom.
static int round_train(prune_search *s, int i, long pos, int want_grad, progress *pg,
                       sc_err *err) {
    prune_sol *sol = &s->pop->sol[i];
    loader *ld = &s->ld[sol->stream];
    int B = s->cfg.batches, bpe = loader_batches_per_epoch(ld);
    int G = s->cfg.grad_steps < B ? s->cfg.grad_steps : B;
    long total = prune_search_clock(&s->cfg, prune_search_total(s)) * B;
    exec_hparams hp = {.momentum = s->cfg.hp.momentum, .weight_decay = s->cfg.hp.weight_decay,
                       .nesterov = s->cfg.hp.nesterov, .label_smoothing = s->cfg.hp.smoothing};
    SC_TRY(sol_upload(s, i, err));
    SC_TRY(exec_reset_scaler(s->ex, err));  // same start for any rank and history
    loader_start_epoch(ld, (int)(sol->batches / bpe));
    loader_seek(ld, (int)(sol->batches % bpe));
    if (want_grad) memset(s->gabs, 0, s->nt->nparam * sizeof *s->gabs);
    for (int b = 0; b < B; b++) {
        exec_batch bt;
        if (!loader_next(ld, &bt)) {
            loader_start_epoch(ld, (int)(sol->batches / bpe));
            if (!loader_next(ld, &bt)) return sc_fail(err, "the training split gave no batch");
        }
        hp.lr = train_lr_at(&s->cfg.hp, pos * B + b, total);
        exec_batch sb = bt;
        if (s->teacher) SC_TRY(distill_batch(s->teacher, &bt, &sb, err));
        SC_TRY(exec_train_step(s->ex, &sb, &hp, err));
        sol->batches++;
        s->img[i] += bt.n;
        if (want_grad && b >= B - G) {
            SC_TRY(exec_read_grad(s->ex, s->grad, err));
            gabs_add(s->gabs, s->grad, s->nt->nparam, G);
        }
        if (pg) progress_update(pg, pg->done + 1, NULL);
    }
    SC_TRY(exec_read_net(s->ex, err));
    return exec_read_momentum(s->ex, s->mom, err);
}

// Raises the masks in s->nt to `target` and adds each layer's cost increase
// to row i of s->cut.
static int round_raise(prune_search *s, int i, const double *target, int use_grad,
                       sc_err *err) {
    int L = s->pl.n;
    const double *before = s->pop->sol[i].sparsity;
    prune_crit c = s->cfg.method == PM_EVOLVE ? s->cfg.crit : (prune_crit){1.0f, 0.0f};
    double after[L > 0 ? L : 1], *cut = s->cut + (size_t)i * L;
    SC_TRY(prune_mask_raise(s->nt, &s->pl, target, use_grad ? s->gabs : NULL, c, s->mom, err));
    prune_sparsity_read(s->nt, &s->pl, after);
    int grew = 0;
    for (int l = 0; l < L; l++) {  // the cost feature's increase (evolve_sens_update)
        double d = after[l] - before[l];
        if (d > 0.0) cut[l] += evolve_cost(after[l]) - evolve_cost(before[l]);
        grew |= d > 0.0;
    }
    if (!grew) return 0;
    SC_TRY(exec_write_net(s->ex, err));
    return exec_write_momentum(s->ex, s->mom, err);
}

// gmp's and oneshot's per-layer targets at overall sparsity v: uniform, or
// water-filled above the layers' floors at v (gmp_targets_floored).
static void magnitude_targets(const prune_search *s, double v, double *target) {
    int L = s->pl.n;
    if (!s->cfg.layer_floor) {
        gmp_targets_uniform(L, v, target);
        return;
    }
    double lf[L > 0 ? L : 1];
    for (int l = 0; l < L; l++)
        lf[l] = gmp_layer_floor_at(s->cfg.layer_floor[l], s->cfg.target, v, s->cfg.ev.s_max);
    gmp_targets_floored(s->pl.count, L, v, lf, target);
}

// The per-layer targets of solution i for its round at clock position pos of
// iteration it; returns 0 when its masks do not change this round.
static int round_targets(prune_search *s, int i, int it, long pos, rng *r, double *target) {
    const prune_cfg *c = &s->cfg;
    if (c->method == PM_GMP) {
        double v = gmp_sparsity_at(0.0, c->target, (double)(it + 1) / c->rounds, c->ramp_begin,
                                   c->ramp_end);
        magnitude_targets(s, v, target);
        return 1;
    }
    if (!in_search(s, it)) return 0;
    evolve_plan(&s->pop->sol[i], &s->pl, s->pop->sens, &c->ev, evolve_floor(&c->ev, (int)pos + 1),
                r, target);
    return 1;
}

// Before the rounds of solution i in iteration it, on every rank: its
// snapshot (the arrays on its owner only), the start of the iteration's cost
// and accuracy drop, no images yet.
static void round_prelude(prune_search *s, int i, int it) {
    prune_sol *sol = &s->pop->sol[i];
    int L = s->pl.n;
    memset(s->cut + (size_t)i * L, 0, (size_t)L * sizeof *s->cut);
    if (in_search(s, it) && s->pop->n > 1) {
        if (mine(s, i)) prune_sol_snapshot(s->pop, i);
        else prune_sol_snapshot_small(s->pop, i);
    }
    sol->acc_prev = sol->acc;
    s->img[i] = 0;
}

// One round of solution i in iteration it (at clock position pos): train,
// raise masks, evaluate, store.
static int round_run(prune_search *s, int i, int it, long pos, rng *r, progress *pg,
                     sc_err *err) {
    prune_sol *sol = &s->pop->sol[i];
    int L = s->pl.n;
    double target[L > 0 ? L : 1];
    int grow = round_targets(s, i, it, pos, r, target);
    int use_grad = grow && s->cfg.method == PM_EVOLVE && s->cfg.crit.beta != 0.0f;
    SC_TRY(round_train(s, i, pos, use_grad, pg, err));
    s->loaded = -1;  // the device state changes below until it is stored again
    if (grow) SC_TRY(round_raise(s, i, target, use_grad, err));
    SC_TRY(val_accuracy(s, 0, &sol->acc, err));
    prune_sol_store(s->pop, i, s->nt, s->mom);
    prune_sparsity_read(s->nt, &s->pl, sol->sparsity);
    s->loaded = i;  // device and host hold the same state now
    return 0;
}

// The k rounds of solution i in iteration it from clock position pos. Its
// layer picks come from a generator of its own, seeded by (seed, iteration,
// slot), so they do not depend on which rank runs it or on the others.
static int sol_rounds(prune_search *s, int i, int it, int k, long pos, progress *pg,
                      sc_err *err) {
    rng r;
    rng_seed(&r, s->cfg.seed, 0x91A4000000000ull + ((uint64_t)it << 16) + (uint64_t)i);
    for (int j = 0; j < k; j++) SC_TRY(round_run(s, i, it, pos + j, &r, pg, err));
    return 0;
}

// --- one iteration ------------------------------------------------------------

// Fills the accuracy, sparsity and predicted latency figures of a history
// row over the solutions flagged in `active` (best: the fittest).
static void hist_fill(const prune_search *s, const int *active, prune_hist *h) {
    int n = 0, best = -1;
    const evolve_cfg *ev = &s->cfg.ev;
    h->mean_acc = h->mean_sparsity = h->mean_latency_ms = 0.0;
    h->best_latency_ms = NAN;
    for (int i = 0; i < s->pop->n; i++) {
        const prune_sol *sol = &s->pop->sol[i];
        if (!active[i]) continue;
        h->mean_acc += sol->acc;
        h->mean_sparsity += prune_sparsity_overall(&s->pl, sol->sparsity);
        if (ev->lat) h->mean_latency_ms += lat_predict(ev->lat, sol->sparsity);
        n++;
        if (best < 0 || evolve_fitness(ev, sol) > evolve_fitness(ev, &s->pop->sol[best])) best = i;
    }
    if (!ev->lat) h->mean_latency_ms = NAN;
    h->measured_latency_ms = NAN;
    h->lat_scale = ev->lat ? prune_search_lat_scale(s, NULL) : NAN;
    if (!n) return;
    h->mean_acc /= n;
    h->mean_sparsity /= n;
    h->mean_latency_ms /= n;
    h->best_acc = s->pop->sol[best].acc;
    h->best_sparsity = prune_sparsity_overall(&s->pl, s->pop->sol[best].sparsity);
    if (ev->lat) h->best_latency_ms = lat_predict(ev->lat, s->pop->sol[best].sparsity);
    h->images = s->pop->images;
}

// Overall sparsity the schedule asks for after iteration it (0-based).
static double schedule_target(const prune_search *s, int it) {
    const prune_cfg *c = &s->cfg;
    if (c->method == PM_ONESHOT || it >= c->rounds) return c->target;
    if (c->method == PM_EVOLVE) return evolve_floor(&c->ev, (int)prune_search_clock(c, it + 1));
    return gmp_sparsity_at(0.0, c->target, (double)(it + 1) / c->rounds, c->ramp_begin,
                           c->ramp_end);
}

// Racing: when iteration it trains fewer solutions than the one before, the
// fittest (evolve_fitness: the most accurate under the sparsity objective) of those move (by swapping, data streams included) to the
// first slots, which are the ones that train from now on.
static void race_promote(prune_search *s, int it) {
    prune_pop *p = s->pop;
    int a = prune_search_active(&s->cfg, it);
    int before = it > 0 ? prune_search_active(&s->cfg, it - 1) : p->n;
    if (!in_search(s, it) || a >= before) return;
    for (int k = 0; k < a; k++) {  // selection sort of the k-th best into slot k
        int b = k;
        for (int i = k + 1; i < before; i++)
            if (evolve_fitness(&s->cfg.ev, &p->sol[i]) > evolve_fitness(&s->cfg.ev, &p->sol[b])) b = i;
        prune_sol t = p->sol[k];
        p->sol[k] = p->sol[b];
        p->sol[b] = t;
        int o = s->owner[k];  // the arrays move with the solution
        s->owner[k] = s->owner[b];
        s->owner[b] = o;
    }
    p->best = 0;
    s->loaded = -1;
}

// Evolve's selection over the first `a` solutions (the ones racing now),
// with its own generator seeded by (seed, iteration), on every rank alike;
// the array work it logs is then done where the arrays are. At the end of
// the search the winner is the best of them at the target.
static int race_select(prune_search *s, int it, int a, prune_hist *h, sc_err *err) {
    prune_pop view = *s->pop;
    rng r;
    rng_seed(&r, s->cfg.seed, 0x5E1EC7000ull + (uint64_t)it);
    view.n = a;
    view.defer = &s->log;
    s->log.n = s->log.lost = 0;
    s->loaded = -1;  // selection rewinds and copies solutions on the host
    int rc = evolve_select(&view, &s->cfg.ev, it + 1, s->cut, &r, h, err);
    SC_TRY(dist_agree(s->dist, rc, err));
    SC_TRY(prune_pop_replay(s->dist, s->pop, s->owner, &s->log, err));
    if (it + 1 == s->cfg.rounds) {
        double tol = (double)(s->pl.n + 1) / (double)s->pl.total;
        view.best = evolve_best(&view, &s->pl, &s->cfg.ev, s->cfg.ev.lat_time ? 0.0 : s->cfg.target - tol);
    }
    s->pop->best = view.best;
    return 0;
}

// Runs the rounds of the active solutions this rank holds, then shares
// their results with every rank.
static int iteration_rounds(prune_search *s, int it, const int *active, int k, long pos,
                            progress *pg, sc_err *err) {
    prune_pop *p = s->pop;
    int own = 0, rc = 0;
    for (int i = 0; i < p->n; i++) {
        if (active[i]) round_prelude(s, i, it);
        own += active[i] && mine(s, i);
    }
    char label[64];
    snprintf(label, sizeof label, "iteration %d/%d", it + 1, prune_search_total(s));
    progress_start(pg, stderr, label, (long)own * k * s->cfg.batches, s->cfg.quiet);
    for (int i = 0; i < p->n && !rc; i++)
        if (active[i] && mine(s, i)) rc = sol_rounds(s, i, it, k, pos, pg, err);
    SC_TRY(dist_agree(s->dist, rc, err));
    SC_TRY(results_share(s, active, err));
    for (int i = 0; i < p->n; i++) p->images += active[i] ? s->img[i] : 0;
    return 0;
}

// 1 when iteration it's rounds reach share x of the given target (cfg.target
// as given: lat_retarget may have raised it since).
static int reaches(const prune_search *s, int it, double x) {
    evolve_cfg given = s->cfg.ev;
    given.target = s->target0;
    return evolve_floor(&given, (int)prune_search_clock(&s->cfg, it) + 1) >= x * s->target0 - 1e-9;
}

// The first search iteration whose rounds reach share x of the given target (cfg.rounds: none).
static int first_reaching(const prune_search *s, double x) {
    int it = 0;
    while (it < s->cfg.rounds && !reaches(s, it, x)) it++;
    return it;
}

// Latency objective (cfg.lat_retarget): from the iteration whose rounds reach
// the given target on, the target is what the best solution needs, from its
// own per-layer sparsities, for the table to predict the latency target
// (evolve_lat_reach; never below the given one). The search's allocation
// follows sensitivity as well as time, so the target the latency was turned
// into at the start can leave it above the latency target (vgg16: 14%). A
// function of the population, so a resumed run sets the same target.
static void lat_retarget(prune_search *s, int it) {
    prune_cfg *c = &s->cfg;
    if (!c->lat_retarget || !c->ev.lat || !in_search(s, it) || !reaches(s, it, 1.0)) return;
    const double *sp = s->pop->sol[s->pop->best].sparsity;
    double v, ms, old = c->target;
    int out = evolve_lat_reach(&c->ev, &s->pl, sp, c->ev.lat_target, &v, &ms);
    c->target = c->ev.target = fmax(s->target0, v);
    if (fabs(c->target - old) > 1e-4 && s->rank == 0)
        log_line(stderr, c->quiet, "prune: best solution predicted %.4g ms (latency target %.4g): target "
                 "sparsity %.4f -> %.4f%s", lat_predict(c->ev.lat, sp), c->ev.lat_target, old, c->target,
                 out ? " (the most the table allows; the latency target is out of reach)" : "");
}

// --- latency checks ---------------------------------------------------------

// The bounds of a check's factor: a measurement outside them is taken as the bound.
#define LAT_SCALE_MIN 0.7
#define LAT_SCALE_MAX 1.4

double prune_search_lat_scale(const prune_search *s, int *checks) {
    double scale = s->cfg.ev.lat ? 1.0 : NAN;
    int n = 0;
    for (int i = 0; s->pop && i < s->pop->nhist; i++) {
        const prune_hist *h = &s->pop->hist[i];
        if (isfinite(h->measured_latency_ms)) n++;
        if (isfinite(h->lat_scale)) scale = h->lat_scale;
    }
    if (checks) *checks = n;
    return scale;
}

// The latency checks' plan: the first where the schedule is half way to the
// given target, the last where it reaches it (or at the search's last
// iteration), `gap` iterations apart. Checks after the ramp left the search
// no room: on vgg16 (four H200s, 2026-11-27) a first check in iteration 26
// of 32 cut the aim by 9% at once, and the best solution's validation fell
// from 64% to 33% and ended 6 points below the run without checks.
static void check_plan(const prune_search *s, int *first, int *gap) {
    int n = s->cfg.lat_checks, a = first_reaching(s, 0.5), b = first_reaching(s, 1.0);
    if (b > s->cfg.rounds - 1) b = s->cfg.rounds - 1;
    int g = n > 1 ? (b - a) / (n - 1) : b - a;
    *first = a;
    *gap = g < 1 ? 1 : g;
}

// 1 when iteration it checks (check_plan: cfg.lat_checks of them).
static int check_due(const prune_search *s, int it) {
    const prune_cfg *c = &s->cfg;
    if (c->lat_checks <= 0 || !in_search(s, it)) return 0;
    int first, gap;
    check_plan(s, &first, &gap);
    return it >= first && (it - first) % gap == 0 && (it - first) / gap < c->lat_checks;
}

// Iterations over which the factor of a check in iteration k comes in: up to
// the next check, and in place by the search's last iteration.
static int phase_len(const prune_search *s, int k, int gap) {
    int n = s->cfg.rounds - 1 - k;
    return n < gap ? (n < 1 ? 1 : n) : gap;
}

// The factor at iteration it while a check in iteration k moves it from `from` to `to`.
static double phased(const prune_search *s, int k, int gap, double from, double to, int it) {
    return from + (to - from) * fmin(1.0, (double)(it - k) / phase_len(s, k, gap));
}

double prune_search_lat_scale_at(const prune_search *s, int it) {
    if (!s->cfg.ev.lat) return NAN;
    int first, gap, k = -1;
    double from = 1.0, to = 1.0;
    check_plan(s, &first, &gap);
    for (int i = 0; s->pop && i < s->pop->nhist; i++) {  // the checks before iteration it, in order
        const prune_hist *h = &s->pop->hist[i];
        int r = h->iter - 1;
        if (r >= it || !isfinite(h->measured_latency_ms) || !isfinite(h->lat_scale)) continue;
        from = k < 0 ? 1.0 : phased(s, k, gap, from, to, r);
        to = h->lat_scale, k = r;
    }
    return k < 0 ? 1.0 : phased(s, k, gap, from, to, it);
}

// Latency objective: the search aims at the latency target divided by the
// checks' factor at iteration it (a function of the history, so a resumed run aims alike).
static void lat_aim(prune_search *s, int it) {
    if (s->cfg.ev.lat) s->cfg.ev.lat_target = s->lat_goal / prune_search_lat_scale_at(s, it);
}

// The best solution's whole graph measured by its owner (NAN, said in a line, when that fails).
static int best_measured(prune_search *s, double *ms, sc_err *err) {
    int b = s->pop->best, owner = s->owner[b];
    *ms = NAN;
    if (s->rank == owner) {
        sc_err e = {0};
        prune_sol_load(s->pop, b, s->nt, NULL);
        s->loaded = -1;  // the host net holds solution b, the executor what it held
        if (s->cfg.lat_measure(s->cfg.lat_measure_ctx, s->nt, &s->pl, ms, &e) || !(*ms > 0.0)) {
            log_line(stderr, 0, "prune: latency check not measured (%s); the predictions stay as they were",
                     e.msg[0] ? e.msg : "no time");
            *ms = NAN;
        }
    }
    if (s->size > 1) SC_TRY(dist_bcast(s->dist, ms, sizeof *ms, owner, err));
    return 0;
}

// Latency objective, when iteration it is due a check (check_due): measures
// the best solution after the selection and records it and the factor
// measured / predicted in h, which then scales the table's predictions,
// phased in over the iterations up to the next check (lat_aim). The table
// times each layer sparse in an otherwise dense graph, and in the searched
// graphs, which alternate dense and sparse layers, the gains did not add up
// (vgg16 on an H100: 5-10% slow).
static int lat_check(prune_search *s, int it, prune_hist *h, sc_err *err) {
    const prune_cfg *c = &s->cfg;
    if (!c->ev.lat || !c->lat_measure || !check_due(s, it)) return 0;
    double ms, pred = lat_predict(c->ev.lat, s->pop->sol[s->pop->best].sparsity);
    SC_TRY(best_measured(s, &ms, err));
    if (!isfinite(ms) || !(pred > 0.0)) return 0;
    h->measured_latency_ms = ms;
    h->lat_scale = fmin(LAT_SCALE_MAX, fmax(LAT_SCALE_MIN, ms / pred));
    if (s->rank == 0)
        log_line(stderr, c->quiet, "prune: latency check: best solution measured %.4g ms, the table predicts "
                 "%.4g ms (%+.1f%%); the search's aim moves to a prediction of %.4g ms for the %.4g ms "
                 "target over the next iterations", ms, pred, 100.0 * (pred / ms - 1.0), s->lat_goal / h->lat_scale,
                 s->lat_goal);
    return 0;
}

// Runs iteration it (0-based): every active solution's rounds (population /
// active of them each), then evolve's selection; appends the history row.
static int iteration_run(prune_search *s, int it, sc_err *err) {
    prune_pop *p = s->pop;
    int search = in_search(s, it), active[p->n];
    int a = prune_search_active(&s->cfg, it), k = search ? p->n / a : 1;
    long pos = prune_search_clock(&s->cfg, it);
    lat_aim(s, it);
    lat_retarget(s, it);
    race_promote(s, it);
    for (int i = 0; i < p->n; i++) active[i] = search ? i < a : i == p->best;
    SC_TRY(spread(s, active, err));
    test_die(s, it);
    progress pg;
    SC_TRY(iteration_rounds(s, it, active, k, pos, &pg, err));
    prune_hist h = {.iter = it + 1, .phase = it < s->cfg.rounds ? 1 : 2,
                    .target = schedule_target(s, it)};
    hist_fill(s, active, &h);
    if (search) SC_TRY(race_select(s, it, a, &h, err));
    SC_TRY(lat_check(s, it, &h, err));
    p->iter = it + 1;
    double now = progress_clock();
    p->seconds += now - s->t_run;
    s->t_run = now;
    h.seconds = p->seconds;
    char text[260];
    snprintf(text, sizeof text, "val best %.2f%% mean %.2f%%, sparsity %.4f (target %.4f)",
             h.best_acc, h.mean_acc, h.best_sparsity, h.target);
    if (s->cfg.ev.lat)
        snprintf(text + strlen(text), sizeof text - strlen(text), ", predicted %.4g ms (aim %.4g)%s",
                 h.best_latency_ms, s->cfg.ev.lat_target, isfinite(h.measured_latency_ms) ? ", checked" : "");
    if (search && a > 1)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 ", admitted %d, rewound %d, mutated %d, crossed %d, replaced %d", h.admitted,
                 h.rewound, h.mutated, h.crossed, h.replaced);
    progress_finish(&pg, text);
    return prune_pop_add_hist(p, &h, err);
}

// --- the start ------------------------------------------------------------------

// Sensitivity of layer l: cut alone to the target by magnitude from the
// start model (solution 0), validation accuracy on scan_images images.
static int sens_layer(prune_search *s, int l, double acc0, sc_err *err) {
    int L = s->pl.n;
    double target[L];
    prune_sol_load(s->pop, 0, s->nt, NULL);
    const double *cur = s->pop->sol[0].sparsity;
    double cost = evolve_cost(s->cfg.target) - evolve_cost(cur[l]), acc;
    if (cost <= 0.0) return 0;
    memcpy(target, cur, (size_t)L * sizeof *target);
    target[l] = s->cfg.target;
    SC_TRY(prune_mask_raise(s->nt, &s->pl, target, NULL, (prune_crit){1.0f, 0.0f}, NULL, err));
    SC_TRY(exec_write_net(s->ex, err));
    SC_TRY(val_accuracy(s, s->cfg.scan_images, &acc, err));
    s->pop->sens[l] = fmax(0.0, acc0 - acc) / cost;
    return 0;
}

// Per-layer sensitivity of the trained start model: the validation accuracy
// drop when that layer alone is cut to the target by magnitude, per unit of
// the cost feature ln(1/density)^2 (evolve_cost). Layer l is scanned by rank
// l % size (every rank holds the start model) and shared.
static int sens_scan(prune_search *s, double acc0, sc_err *err) {
    int L = s->pl.n, rc = 0;
    s->loaded = -1;
    for (int l = s->rank; l < L && !rc; l += s->size) rc = sens_layer(s, l, acc0, err);
    SC_TRY(dist_agree(s->dist, rc, err));
    for (int l = 0; l < L && s->size > 1; l++)
        SC_TRY(dist_bcast(s->dist, &s->pop->sens[l], sizeof(double), l % s->size, err));
    prune_sol_load(s->pop, 0, s->nt, NULL);
    return 0;
}

// Solution i from the start model (or its own random weights), evaluated
// when it is from scratch or the first one and this rank holds it.
static int begin_one(prune_search *s, int i, sc_err *err) {
    prune_sol *sol = &s->pop->sol[i];
    if (s->cfg.from_scratch) {
        rng g;
        rng_seed(&g, s->cfg.seed, 0xA11CE00ull + (uint64_t)i);
        net_init_weights(s->nt, &g);
    }
    prune_sol_store(s->pop, i, s->nt, NULL);  // momentum starts at zero
    prune_sparsity_read(s->nt, &s->pl, sol->sparsity);
    if (!(s->cfg.from_scratch || i == 0) || !mine(s, i)) return 0;
    SC_TRY(sol_upload(s, i, err));
    return val_accuracy(s, 0, &sol->acc, err);
}

// Fills the solutions from the start model (on every rank, so every rank
// holds it) or from random weights (on the owner) and evaluates them.
static int begin_solutions(prune_search *s, sc_err *err) {
    prune_pop *p = s->pop;
    int all[p->n], rc = 0;
    s->loaded = -1;
    for (int i = 0; i < p->n; i++) all[i] = 1;
    for (int i = 0; i < p->n && !rc; i++)
        if (!s->cfg.from_scratch || mine(s, i)) rc = begin_one(s, i, err);
    SC_TRY(dist_agree(s->dist, rc, err));
    SC_TRY(results_share(s, all, err));
    for (int i = 0; i < p->n; i++) {
        prune_sol *sol = &p->sol[i];
        memcpy(sol->genome, sol->sparsity, (size_t)p->L * sizeof(double));
        if (!s->cfg.from_scratch) sol->acc = p->sol[0].acc;
        sol->acc_prev = sol->acc;
    }
    s->start_acc = p->sol[0].acc;
    return 0;
}

// Oneshot's cut: every layer straight to the target by magnitude, evaluated.
static int oneshot_cut(prune_search *s, sc_err *err) {
    int L = s->pl.n;
    double target[L];
    magnitude_targets(s, s->cfg.target, target);
    prune_sol_load(s->pop, 0, s->nt, s->mom);
    SC_TRY(prune_mask_raise(s->nt, &s->pl, target, NULL, (prune_crit){1.0f, 0.0f}, s->mom, err));
    SC_TRY(exec_write_net(s->ex, err));
    prune_sol *sol = &s->pop->sol[0];
    SC_TRY(val_accuracy(s, 0, &sol->acc, err));
    prune_sol_store(s->pop, 0, s->nt, s->mom);
    prune_sparsity_read(s->nt, &s->pl, sol->sparsity);
    return 0;
}

// Oneshot: the cut on the owner of its one solution, shared.
static int begin_oneshot(prune_search *s, sc_err *err) {
    int one[s->pop->n];
    memset(one, 0, sizeof one);
    one[0] = 1;
    s->loaded = -1;
    SC_TRY(dist_agree(s->dist, mine(s, 0) ? oneshot_cut(s, err) : 0, err));
    return results_share(s, one, err);
}

// Creates and evaluates the starting population; records iteration 0.
int prune_search_begin(prune_search *s, sc_err *err) {
    prune_pop_free(s->pop);
    s->pop = prune_pop_create(s->cfg.population, s->pl.n, s->nt, err);
    SC_TRY(dist_agree(s->dist, s->pop ? 0 : -1, err));
    prune_pop_home(s->owner, s->pop->n, s->size);
    SC_TRY(begin_solutions(s, err));
    if (s->cfg.method == PM_EVOLVE) {
        rng r;
        rng_seed(&r, s->cfg.seed, 0x6E0E5ull);
        evolve_init(s->pop, &s->cfg.ev, &r);
        if (!s->cfg.from_scratch && s->cfg.scan_images > 0) SC_TRY(sens_scan(s, s->start_acc, err));
    }
    int active[s->pop->n];
    for (int i = 0; i < s->pop->n; i++) active[i] = 1;
    prune_hist h = {.iter = 0, .phase = 0};
    hist_fill(s, active, &h);  // the start model, before oneshot's cut
    if (s->cfg.method == PM_ONESHOT) SC_TRY(begin_oneshot(s, err));
    s->pop->seconds = progress_clock() - s->t_run;
    s->t_run = progress_clock();
    h.seconds = s->pop->seconds;
    return prune_pop_add_hist(s->pop, &h, err);
}

// Rank 0: the saved population, checked against the settings.
static prune_pop *resume_load(prune_search *s, const char *state_path, char **config,
                              sc_err *err) {
    prune_pop *p = prune_state_load(state_path, s->nt, s->pl.n, config, err);
    if (!p || p->n == s->cfg.population) return p;
    sc_fail(err, "state file %s holds %d solutions, the settings ask for %d", state_path, p->n,
            s->cfg.population);
    prune_pop_free(p);
    free(*config);
    *config = NULL;
    return NULL;
}

// Loads a saved population in place of the current one: rank 0 reads it,
// every rank gets its small fields, each owner its solutions' arrays.
int prune_search_resume(prune_search *s, const char *state_path, char **config, sc_err *err) {
    prune_pop *p = NULL;
    *config = NULL;
    if (s->rank == 0) p = resume_load(s, state_path, config, err);
    SC_TRY(dist_agree(s->dist, s->rank == 0 && !p ? -1 : 0, err));
    int rc = prune_pop_share(s->dist, &p, s->nt, config, err);
    if (dist_agree(s->dist, rc, err)) {
        prune_pop_free(p);
        free(*config);
        *config = NULL;
        return -1;
    }
    prune_pop_free(s->pop);
    s->pop = p;
    prune_pop_home(s->owner, p->n, s->size);
    SC_TRY(prune_pop_scatter(s->dist, p, s->owner, err));
    s->loaded = -1;
    s->start_acc = p->nhist > 0 ? p->hist[0].best_acc : -1.0;
    s->t_run = progress_clock();
    return 0;
}

// --- the run --------------------------------------------------------------------

// Runs iterations until the end or a stop condition, saving after each when
// due. Rank 0 decides whether to save and to stop (its clock) for all.
int prune_search_run(prune_search *s, const char *state_path, const char *config, sc_err *err) {
    int total = prune_search_total(s), saving = state_path != NULL;
    s->finished = 0;
    double t0 = progress_clock();
    double saved = t0;
    SC_TRY(dist_bcast(s->dist, &saving, sizeof saving, 0, err));
    if (saving && s->pop->iter == 0) SC_TRY(state_save(s, state_path, config, err));
    while (s->pop->iter < total) {
        SC_TRY(iteration_run(s, s->pop->iter, err));
        int stop = (s->cfg.stop_after > 0 && s->pop->iter >= s->cfg.stop_after) ||
                   (s->cfg.time_limit > 0 && progress_clock() - t0 >= s->cfg.time_limit);
        int last = stop || s->pop->iter >= total;
        int due[2] = {stop, saving && (last || progress_clock() - saved >= s->cfg.save_interval)};
        SC_TRY(dist_bcast(s->dist, due, sizeof due, 0, err));
        if (due[1]) {
            SC_TRY(state_save(s, state_path, config, err));
            saved = progress_clock();
        }
        if (due[0]) break;
    }
    s->finished = s->pop->iter >= total;
    return 0;
}

// Loads the winning solution into the net and the executor of rank 0.
int prune_search_result(prune_search *s, int *index, sc_err *err) {
    int b = s->cfg.method == PM_EVOLVE ? s->pop->best : 0;
    if (index) *index = b;
    s->loaded = -1;
    SC_TRY(prune_pop_fetch(s->dist, s->pop, s->owner, b, 0, err));
    return s->rank == 0 ? sol_upload(s, b, err) : 0;
}
