// Tests of the population spread over ranks (prune/pop_dist.h) that run in
// one process: the balanced assignment keeps as many solutions in place as
// any balanced assignment can, selection with its array work logged and
// replayed ends exactly as selection done at once (chains of copies and
// rewinds included), and with no ranks (d = NULL) every collective is local.
// The runs over several ranks are in tests/cli_prune_mpi.sh.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prune/dist.h"
#include "prune/evolve.h"
#include "prune/pop.h"
#include "prune/pop_dist.h"
#include "runtime/rng.h"

// --- helpers ----------------------------------------------------------------

// A population of n solutions for nt with random arrays, snapshots that
// differ from the current state, and random small fields (seeded).
static prune_pop *random_pop(const net *nt, int n, int L, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 0);
    prune_pop *p = prune_pop_create(n, L, nt, NULL);
    if (!p) return NULL;
    for (int i = 0; i < n; i++) {
        prune_sol *s = &p->sol[i];
        for (size_t k = 0; k < p->nparam; k++) {
            s->mask[k] = rng_uniform(&r) < 0.3f ? 0.0f : 1.0f;
            s->param[k] = s->mask[k] * rng_normal(&r);
            s->mom[k] = s->mask[k] * rng_normal(&r);
        }
        for (size_t k = 0; k < p->nbuf; k++) s->buf[k] = rng_uniform(&r);
        for (int l = 0; l < L; l++) s->sparsity[l] = 0.5 * rng_uniform(&r);
        memcpy(s->genome, s->sparsity, (size_t)L * sizeof(double));
        s->acc_prev = 60.0 + 10.0 * rng_uniform(&r);
        s->stream = i;
        prune_sol_snapshot(p, i);
        for (size_t k = 0; k < p->nparam; k++) s->param[k] += s->mask[k] * 0.5f;  // the round
        for (int l = 0; l < L; l++) s->sparsity[l] += 0.1 * rng_uniform(&r);
        s->acc = 50.0 + 20.0 * rng_uniform(&r);
    }
    for (int l = 0; l < L; l++) p->sens[l] = 1.0 + rng_uniform(&r);
    return p;
}

// True when solution i of a and b are equal in every field but the snapshot.
static int sol_same(const prune_pop *a, const prune_pop *b, int i) {
    const prune_sol *x = &a->sol[i], *y = &b->sol[i];
    size_t np = a->nparam * sizeof(float), nb = a->nbuf * sizeof(float), nl = (size_t)a->L * sizeof(double);
    return x->acc == y->acc && x->acc_prev == y->acc_prev && x->batches == y->batches &&
           x->stream == y->stream && x->age == y->age && x->fails == y->fails &&
           x->cluster == y->cluster && !memcmp(x->sparsity, y->sparsity, nl) &&
           !memcmp(x->genome, y->genome, nl) && !memcmp(x->param, y->param, np) &&
           !memcmp(x->mask, y->mask, np) && !memcmp(x->mom, y->mom, np) && !memcmp(x->buf, y->buf, nb);
}

// --- assignment -----------------------------------------------------------------

// Checks one assignment: inactive solutions stay, active ones are balanced,
// the count of moves is right and as small as any balanced assignment allows.
static void assign_check(tctx *t, const int *owner, const int *active, int n, int size) {
    int want[64], held[16] = {0}, cnt[16] = {0}, na = 0, moved = 0;
    int moves = prune_pop_assign(owner, active, n, size, want);
    for (int i = 0; i < n; i++) {
        if (!active[i]) {
            CHECK(t, want[i] == owner[i], "inactive %d moved", i);
            continue;
        }
        na++;
        held[owner[i]]++;
        CHECK(t, want[i] >= 0 && want[i] < size, "rank %d", want[i]);
        if (want[i] >= 0 && want[i] < size) cnt[want[i]]++;
        moved += want[i] != owner[i];
    }
    int lo = na, hi = 0, base = na / size, extra = na % size, over = 0, kept = 0;
    for (int r = 0; r < size; r++) {
        lo = cnt[r] < lo ? cnt[r] : lo;
        hi = cnt[r] > hi ? cnt[r] : hi;
        kept += held[r] < base ? held[r] : base;
        over += held[r] > base;
    }
    kept += over < extra ? over : extra;  // the extra places go to ranks holding more
    CHECK(t, hi - lo <= 1, "unbalanced: %d..%d (n %d size %d)", lo, hi, n, size);
    CHECK(t, moves == moved, "returned %d moves, made %d", moves, moved);
    CHECK(t, na - moved == kept, "kept %d, best possible %d (n %d size %d)", na - moved, kept, n, size);
    int again[64];
    CHECK(t, prune_pop_assign(want, active, n, size, again) == 0, "not stable");
}

// Random owners, active sets and rank counts; the racing shapes too.
static void test_assign(tctx *t) {
    rng r;
    rng_seed(&r, 42, 1);
    int owner[64], active[64];
    for (int trial = 0; trial < 500; trial++) {
        int n = 1 + (int)rng_below(&r, 40), size = 1 + (int)rng_below(&r, 9);
        for (int i = 0; i < n; i++) {
            owner[i] = (int)rng_below(&r, (uint32_t)size);
            active[i] = rng_uniform(&r) < 0.6f;
        }
        assign_check(t, owner, active, n, size);
    }
    // Racing 8 -> 4 -> 2 on 3 ranks from the home shares: the first slots train.
    prune_pop_home(owner, 8, 3);
    CHECK(t, owner[0] == 0 && owner[2] == 0 && owner[3] == 1 && owner[7] == 2, "home shares");
    for (int a = 8; a >= 1; a /= 2) {
        for (int i = 0; i < 8; i++) active[i] = i < a;
        int want[8];
        assign_check(t, owner, active, 8, 3);
        prune_pop_assign(owner, active, 8, 3, want);
        memcpy(owner, want, sizeof want);
    }
}

// --- logged selection ---------------------------------------------------------------

// Selection (rewinds, crossovers, replacements, clustering) on two equal
// populations: at once on one, logged and replayed on the other.
static void test_replay_selection(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    if (!nt) {
        CHECK(t, 0, "%s", err.msg);
        return;
    }
    int n = 7, L = 4, owner[7] = {0}, copies = 0;
    for (int seed = 1; seed <= 4; seed++) {
        prune_pop *a = random_pop(nt, n, L, (uint64_t)seed), *b = random_pop(nt, n, L, (uint64_t)seed);
        prune_oplog log = {.cap = 4 * n, .op = calloc(4 * (size_t)n, sizeof(prune_op))};
        evolve_cfg c;
        evolve_cfg_default(&c, 10, 0.9);
        c.threshold = 5.0, c.patience = 1, c.cluster_every = 1, c.clusters = 2, c.keep = 1;
        double cost[7 * 4];
        for (int k = 0; k < n * L; k++) cost[k] = 0.1;
        rng ra, rb;
        rng_seed(&ra, 9, (uint64_t)seed);
        rng_seed(&rb, 9, (uint64_t)seed);
        prune_hist ha = {0}, hb = {0};
        b->defer = &log;
        int ok = !evolve_select(a, &c, 1, cost, &ra, &ha, &err) &&
                 !evolve_select(b, &c, 1, cost, &rb, &hb, &err);
        for (int k = 0; k < log.n; k++) copies += log.op[k].kind == PRUNE_OP_COPY;
        ok = ok && !prune_pop_replay(NULL, b, owner, &log, &err);
        CHECK(t, ok, "%s", err.msg);
        CHECK(t, log.n == 0, "log not emptied");
        for (int i = 0; i < n; i++) CHECK(t, sol_same(a, b, i), "seed %d: solution %d differs", seed, i);
        CHECK(t, a->best == b->best && ha.replaced == hb.replaced && ha.rewound == hb.rewound, "events");
        CHECK(t, ha.rewound > 0 && ha.replaced > 0, "seed %d: no rewind (%d) or replacement (%d)", seed,
              ha.rewound, ha.replaced);
        free(log.op);
        prune_pop_free(a);
        prune_pop_free(b);
    }
    CHECK(t, copies > 0, "no copies logged");
    net_free(nt);
}

// A chain: a copy of a copy, a source overwritten after it was copied, a
// rewind of a copied solution; replayed equals done at once. A full log
// refuses to replay.
static void test_replay_chain(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    if (!nt) {
        CHECK(t, 0, "%s", err.msg);
        return;
    }
    prune_pop *a = random_pop(nt, 4, 4, 77), *b = random_pop(nt, 4, 4, 77);
    prune_oplog log = {.cap = 8, .op = calloc(8, sizeof(prune_op))};
    int owner[4] = {0};
    b->defer = &log;
    for (prune_pop *p = a; p; p = p == a ? b : NULL) {
        prune_sol_copy(p, 1, 0);
        prune_sol_copy(p, 3, 1);
        prune_sol_copy(p, 0, 2);
        prune_sol_rewind(p, 2);
        prune_sol_copy(p, 1, 2);
    }
    CHECK(t, log.n == 5, "%d entries", log.n);
    CHECK(t, !prune_pop_replay(NULL, b, owner, &log, &err), "%s", err.msg);
    for (int i = 0; i < 4; i++) CHECK(t, sol_same(a, b, i), "solution %d differs", i);
    log.cap = 1;
    for (int k = 0; k < 3; k++) prune_sol_copy(b, 1, 0);
    CHECK(t, log.lost == 2 && prune_pop_replay(NULL, b, owner, &log, &err) != 0, "overflow accepted");
    free(log.op);
    prune_pop_free(a);
    prune_pop_free(b);
    net_free(nt);
}

// --- one process -------------------------------------------------------------------

// d = NULL: rank 0 of 1, agreement passes the status through, collectives are local.
static void test_single_process(tctx *t) {
    sc_err err = {0};
    CHECK(t, dist_rank(NULL) == 0 && dist_size(NULL) == 1 && dist_local_size(NULL) == 1, "ranks");
    CHECK(t, dist_agree(NULL, 0, &err) == 0 && dist_agree(NULL, -1, &err) == -1, "agree");
    int x = 5;
    CHECK(t, dist_bcast(NULL, &x, sizeof x, 0, &err) == 0 && x == 5, "bcast");
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    prune_pop *p = nt ? random_pop(nt, 3, 4, 5) : NULL, *q = nt ? random_pop(nt, 3, 4, 5) : NULL;
    if (!p || !q) {
        CHECK(t, 0, "set-up");
    } else {
        int owner[3] = {0, 0, 0}, want[3] = {0, 0, 0};
        char *cfg = NULL;
        prune_pop *pp = p;
        CHECK(t, !prune_pop_gather(NULL, p, owner, &err) && !prune_pop_scatter(NULL, p, owner, &err) &&
                     !prune_pop_fetch(NULL, p, owner, 2, 0, &err) && !prune_pop_move(NULL, p, owner, want, &err) &&
                     !prune_pop_share(NULL, &pp, nt, &cfg, &err) && pp == p,
              "%s", err.msg);
        for (int i = 0; i < 3; i++) CHECK(t, sol_same(p, q, i), "solution %d changed", i);
    }
    prune_pop_free(p);
    prune_pop_free(q);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_prune_dist"};
    RUN(&t, test_assign);
    RUN(&t, test_replay_selection);
    RUN(&t, test_replay_chain);
    RUN(&t, test_single_process);
    return check_finish(&t);
}
