// The evolutionary operators of seed 001's Algorithm 1 on a host population
// (prune/pop.h): random initial per-layer sparsities, the overall sparsity
// floor (a cubic schedule), the per-iteration choice of layers to prune
// further and the size of each layer's cut from its sensitivity (eq. 4 as
// read in docs/prune.md), the sensitivity estimates, admission within a
// threshold of the best, rewinding with mutation or crossover, and k-means
// clustering of the population with a few representatives kept per cluster.
// Training and evaluation are the caller's (prune/search.c).
#ifndef SC_PRUNE_EVOLVE_H
#define SC_PRUNE_EVOLVE_H

#include "prune/latency.h"
#include "prune/mask.h"
#include "prune/pop.h"
#include "runtime/error.h"
#include "runtime/rng.h"

typedef struct {
    int iterations;       // search iterations
    double target;        // final overall sparsity over the pruned layers
    double threshold;     // admitted when accuracy >= best - threshold (points)
    double ramp_begin;    // fraction of the iterations before the floor rises
    double ramp_end;      // fraction of the iterations at which the floor reaches target
    double layer_frac;    // fraction of the layers picked for pruning each iteration
    double init_max;      // initial genomes: per-layer sparsity uniform in [0, init_max]
    double s_max;         // highest sparsity of any one layer
    double mutate_sigma;  // mutation: std dev of a layer's relative sparsity change
    double sens_rate;     // rate of the sensitivities' exponential moving average
    int cluster_every;    // iterations between clusterings (0: never)
    int clusters;         // k of k-means (0: ceil(n / 3))
    int keep;             // representatives kept per cluster
    int patience;         // consecutive rejections before a solution is replaced
    double chance;        // accuracy of guessing (percent): below 1.5x no sensitivity update
    double layer_min;     // per-layer sparsity floor at the end, in [0, target] (0: none);
                          // scaled by floor / target along the way (gmp_layer_floor)
    const double *layer_floor;  // (L) per-layer floors at the end (--layer-floor), each in
                                // [0, s_max], used instead of layer_min when not NULL;
                                // scaled the same way (gmp_layer_floor_at); not owned
    // The latency objective (docs/prune.md, "Latency objective"); lat NULL: sparsity
    // objective, every operator exactly as before.
    const lat_table *lat; // per-layer milliseconds against sparsity; not owned
    double lat_target;    // predicted milliseconds a solution should not exceed
    double lat_penalty;   // fitness points lost per percent of predicted time over lat_target
    int lat_time;         // latency objective without an overall sparsity: evolve_plan
                          // allocates by predicted time (evolve_allocate_time), the
                          // overall sparsity follows; 0: by overall sparsity (the floor);
                          // EVOLVE_ALLOC_TIME or EVOLVE_ALLOC_RAMP: how (evolve_plan)
} evolve_cfg;

// evolve_cfg.lat_time: each round's plan meets the round's scheduled time
// (TIME), or ramps every layer towards its sparsity in the plan for the final
// target (RAMP).
#define EVOLVE_ALLOC_TIME 1
#define EVOLVE_ALLOC_RAMP 2

// A solution's fitness: its validation accuracy, minus lat_penalty points per
// percent its predicted latency passes lat_target (latency objective only).
double evolve_fitness(const evolve_cfg *c, const prune_sol *s);

// Latency objective: each layer's time saved per weight pruned relative to the
// mean over the layers (gain of lat_layer_gain at sparsity sp[l] over the
// layer's weights), clipped to [1/20, 20], into r; 1 everywhere without c->lat.
void evolve_lat_ratio(const evolve_cfg *c, const prune_layers *pl, const double *sp, double *r);

// Latency objective: the smallest overall sparsity in [overall(from), s_max] whose
// allocation above the per-layer sparsities `from` (evolve_allocate with each
// layer's weight 1 / its evolve_lat_ratio at `from`: time bought per weight) the
// table c->lat predicts at or below target_ms, into *sparsity (and that prediction
// into *ms); returns 1, with s_max and its prediction, when even s_max does not
// reach it, else 0.
int evolve_lat_reach(const evolve_cfg *c, const prune_layers *pl, const double *from,
                     double target_ms, double *sparsity, double *ms);

// Fills the defaults for `iterations` iterations towards `target`.
void evolve_cfg_default(evolve_cfg *c, int iterations, double target);

// Overall sparsity floor after iteration `iter` (1-based; 0 = start).
double evolve_floor(const evolve_cfg *c, int iter);

// Random initial genomes (per-layer sparsities uniform in [0, init_max]).
void evolve_init(prune_pop *p, const evolve_cfg *c, rng *r);

// Robustness of each layer from the sensitivities: 1 / (1 + (s - min) /
// mean(s - min)); 1 everywhere when all are equal.
void evolve_robustness(const double *sens, int L, double *rho);

// Per-layer sparsities minimising sum_l sens_l * ln(1/d_l)^2 (d_l the
// layer's density, the share of its weights kept) subject to an overall
// sparsity of `floor`, with no layer below lo[l] or above s_max (eq. 4 as
// read in docs/prune.md). Larger and less sensitive layers are cut more.
void evolve_allocate(const double *sens, const prune_layers *pl, const double *lo, double floor,
                     double s_max, double *target);

// Per-layer sparsities in [lo[l], s_max] minimising sum_l sens_l *
// ln(1/d_l)^2 (evolve_cost) subject to the table t predicting at most
// target_ms (a Lagrange multiplier on time, bisected; each layer's choice
// searched on a fine grid, the table being piecewise linear): layers buy
// time where it costs the least sensitivity, and a layer whose pruning buys
// no time stays at lo. Returns 1 (with the fastest such allocation) when
// even that misses target_ms, else 0. sens (L) must be positive.
int evolve_allocate_time(const double *sens, const lat_table *t, const double *lo, double target_ms,
                         double s_max, double *target);

// Latency objective with c->lat_time: the predicted milliseconds the plans
// aim at when the overall floor is `floor`: from the table's dense time to
// c->lat_target along the floor's ramp (floor / c->target).
double evolve_lat_schedule(const evolve_cfg *c, double floor);

// Per-layer targets for a solution's next raise: its mask sparsity raised
// towards its genome (scaled down when the genome alone passes the floor),
// then the rest up to the overall `floor` allocated by evolve_allocate, with
// the sensitivities halved in a random subset of layers (layer_frac of them,
// picked by robustness and room) so that those are pruned further. With
// c->layer_min > 0 no target is below gmp_layer_floor(layer_min, target,
// floor), with c->layer_floor none of layer l below gmp_layer_floor_at(
// layer_floor[l], target, floor, s_max); the genome and the allocation stay
// free above it. With c->lat_time (latency objective) the allocation is
// evolve_allocate_time's instead, above the mask, the genome and the layer
// floors, aiming at evolve_lat_schedule(c, floor) (EVOLVE_ALLOC_TIME), or at
// c->lat_target with each layer then taken only to the schedule's share
// floor / c->target of its planned sparsity, never below the mask
// (EVOLVE_ALLOC_RAMP); nothing else forces the overall sparsity.
void evolve_plan(const prune_sol *s, const prune_layers *pl, const double *sens,
                 const evolve_cfg *c, double floor, rng *r, double *target);

// Updates sensitivities from one iteration: cost[i*L + l] is the increase of
// ln(1/d_l)^2 in solution i's layer l this round, drop[i] its accuracy drop.
// The observation for layer l is the least-squares slope, across solutions,
// of the drop minus the other layers' share (their current estimates) on
// its cost, shrunk towards the current estimate (ridge), clipped at 0.
// Needs 4 or more solutions.
void evolve_sens_update(double *sens, int L, int n, const double *cost, const double *drop,
                        double rate);

// The cost feature of a layer at sparsity s: ln(1 / (1 - s))^2.
double evolve_cost(double s);

// Mutation: its genome becomes its mask sparsity raised in a random quarter
// of the layers by a random fraction of their remaining weights. Latency
// objective: half of the picks go to layers drawn in proportion to the time
// they can still save (lat_layer_gain x remaining density), the rest uniformly.
void evolve_mutate(prune_sol *s, int L, const evolve_cfg *c, rng *r);

// Crossover: the child's genome takes parent a's sparsities with those of
// parent b in randomly chosen layers (never below the child's own mask).
void evolve_crossover(prune_sol *child, const prune_sol *a, const prune_sol *b, int L, rng *r);

// k-means (k-means++ seeding, Lloyd iterations) of n points of d dims;
// assign (n) receives cluster ids in [0, k). k is clamped to [1, n].
int evolve_kmeans(const double *x, int n, int d, int k, rng *r, int *assign, sc_err *err);

// The selection step after every solution trained and was evaluated this
// iteration: admits solutions within the threshold of the best, updates the
// sensitivities, rewinds the rejected ones whose masks grew and gives them a
// mutated or crossed-over genome, replaces solutions rejected `patience`
// times in a row, and every cluster_every iterations thins crowded clusters.
// cost is as for evolve_sens_update. Counts go into h.
int evolve_select(prune_pop *p, const evolve_cfg *c, int iter, const double *cost, rng *r,
                  prune_hist *h, sc_err *err);

// Index of the fittest (evolve_fitness) solution whose overall sparsity is at
// least `min_sparsity` (the most sparse one when none is).
int evolve_best(const prune_pop *p, const prune_layers *pl, const evolve_cfg *c, double min_sparsity);

#endif
