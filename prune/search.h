// The pruning run: rounds of training on one executor over a host population
// (prune/pop.h), for the three methods of the `prune` tool:
//   evolve   seed 001's Algorithm 1 (prune/evolve.h), `population` solutions
//   gmp      gradual magnitude pruning, cubic schedule, uniform per layer
//   oneshot  magnitude pruning to the target at once, then fine-tuning
// Every round a solution trains `batches` batches from its own data stream,
// its masks are raised to the round's per-layer targets (coefficient of eq. 2
// from its weights and the mean |gradient| of the round's last steps) and it
// is evaluated on the VALIDATION split. After every iteration the state is
// saved atomically, so a killed run resumes from the last finished one and
// ends exactly as an uninterrupted run would.
#ifndef SC_PRUNE_SEARCH_H
#define SC_PRUNE_SEARCH_H

#include <stdint.h>

#include "datasets/cifar.h"
#include "datasets/loader.h"
#include "prune/dist.h"
#include "prune/evolve.h"
#include "prune/mask.h"
#include "prune/pop.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/progress.h"
#include "train/distill.h"
#include "train/trainer.h"

typedef enum { PM_EVOLVE = 0, PM_GMP = 1, PM_ONESHOT = 2 } prune_method;

// Measures nt as it is (weights and masks of pl) on the GPU the latency
// table is for: the whole forward pass in milliseconds into *ms; 0 or -1.
typedef int (*prune_lat_measure_fn)(void *ctx, const net *nt, const prune_layers *pl, double *ms,
                                    sc_err *err);

// The method names in enum order, '|'-separated (for the CLI).
#define PRUNE_METHODS "evolve|gmp|oneshot"

typedef struct {
    prune_method method;
    int population;       // solutions (1 for gmp and oneshot)
    int rounds;           // evolve: search iterations; gmp/oneshot: training rounds
    int finetune;         // evolve: rounds training the winner after the search
    int halve_every;      // evolve: search iterations between halvings of the active
                          // population (racing; 0: every solution trains to the end)
    int batches;          // batches per round
    double target;        // overall sparsity over the pruned layers, [0, 1)
    double min_layer;     // every pruned layer at least this sparse at the end, in
                          // [0, target] (0: no floor); along the way the floor is
                          // scaled by the schedule (gmp_layer_floor, docs/prune.md)
    const double *layer_floor;  // (L, one per prunable layer) per-layer floors at the end
                          // (--layer-floor), each in [0, s_max], fitting the target
                          // (prune_floor_budget); NULL: min_layer for every layer.
                          // Copied by prune_search_init.
    prune_crit crit;      // coefficient (gmp and oneshot use magnitude: alpha 1, beta 0)
    sc_pattern pattern;   // every mask raise keeps the layers on it (unstructured: as before)
    int grad_steps;       // last steps of a round whose |gradient| is averaged
    double ramp_begin;    // fraction of the rounds before the sparsity starts rising
    double ramp_end;      // fraction of the rounds at which it reaches the target
    train_hparams hp;     // batch, lr, schedule, momentum, weight decay, smoothing
    int augment;          // random crop and flip
    uint64_t seed;
    int from_scratch;     // 1: every solution starts from its own random weights
    int scan_images;      // evolve from a trained model: validation images used by the
                          // initial per-layer sensitivity scan (0: no scan)
    int stop_after;       // stop once this many iterations are finished (0: run all)
    double time_limit;    // stop after the iteration that passes this many seconds (0: none)
    double save_interval; // seconds between state saves (0: after every iteration); the
                          // state is always saved when the run stops or ends
    int quiet;            // 1: no progress display
    int lat_retarget;     // latency objective with `target` derived from the latency target:
                          // once the schedule reaches it, the target rises to what the best
                          // solution needs for the table to predict the latency target
    int lat_checks;       // latency objective: whole-graph measurements of the best solution,
                          // spread over the schedule's ramp from half way to the target to
                          // where it reaches it; each sets the factor by which the search
                          // scales the table's predictions, phased in up to the next (0: none)
    prune_lat_measure_fn lat_measure;  // how a check measures (NULL: no checks); every rank's
    void *lat_measure_ctx;             // the owner of the best solution measures it
    evolve_cfg ev;        // evolve's settings (iterations and target are set from above)
} prune_cfg;

// Fills the defaults of a method (see docs/prune.md).
void prune_cfg_default(prune_cfg *c, prune_method m);

typedef struct {
    prune_cfg cfg;
    const dataset *ds;
    net *nt;             // the executor's net (the caller's; holds the start model)
    exec *ex;            // the caller's executor for nt
    prune_layers pl;
    prune_pop *pop;
    loader *ld;          // (population) one data stream per solution
    float *mom;          // (nparam) momentum of the loaded solution
    float *gabs;         // (nparam) mean |gradient| of the round's last steps
    float *grad;         // (nparam) one step's gradient
    double *cut;         // (population * L) cost increase per layer this round (evolve_cost)
    double *floor;       // (L) the copy of cfg.layer_floor (NULL without one)
    double start_acc;    // validation accuracy of the start model (before any pruning)
    double target0;      // cfg.target as given (lat_retarget moves cfg.target above it)
    double lat_goal;     // cfg.ev.lat_target as given (the checks' factor moves cfg.ev.lat_target)
    int finished;        // 1 once every iteration is done
    int loaded;          // solution whose exact state the executor holds (-1: none)
    double t_run;        // wall clock when this process started running
    // Spread over ranks (prune_search_set_dist; docs/prune.md, "Several GPUs"):
    dist *dist;          // the ranks of the run (NULL: this process alone)
    int rank, size;      // this process's rank, number of ranks
    int *owner;          // (population) rank that holds and trains each solution's arrays
    long *img;           // (population) training images of each solution this iteration
    prune_oplog log;     // the array work of the last selection (prune/pop.h)
    distill *teacher;    // the caller's teacher (prune_search_set_teacher; NULL: train on the labels)
    int die_iter, die_rank;  // test builds (SC_TEST_HOOKS; SC_PRUNE_TEST_DIE_AT=I,R): rank R
                             // dies as iteration I starts; always 0 in the shipped library
} prune_search;

// Sets up a search for the start model in nt on executor ex; the population
// is created by prune_search_begin or prune_search_resume. Fails when
// cfg->min_layer is outside [0, cfg->target], or a cfg->layer_floor entry
// outside [0, s_max] or the floors together above the target.
int prune_search_init(prune_search *s, const prune_cfg *cfg, const dataset *ds, net *nt,
                      exec *ex, sc_err *err);
// Frees what the search owns (not nt, ex or ds).
void prune_search_free(prune_search *s);

// Spreads the search over the ranks of d (NULL: this process alone); call
// after prune_search_init and before prune_search_begin/resume, on every
// rank with the same settings. Each rank then trains and evaluates its share
// of the solutions that train in an iteration (rebalanced as racing shrinks
// them), every rank runs the selection on the same small fields, arrays move
// between ranks only where a solution changes rank or is copied from another
// rank, and rank 0 alone reads and writes the state file. The result is
// bitwise the same for any number of ranks (CPU, fp32). Every function below
// is then collective: all ranks call it.
void prune_search_set_dist(prune_search *s, dist *d);

// Trains every solution against teacher t's targets from now on
// (train/distill.h; the caller keeps t; NULL: the labels again).
void prune_search_set_teacher(prune_search *s, distill *t);

// Creates the population from the start model: random weights per solution
// from scratch, else copies; evaluates it, sets up evolve's genomes and
// sensitivities or oneshot's masks, records iteration 0.
int prune_search_begin(prune_search *s, sc_err *err);
// Replaces the population by the one saved in a state file (read by rank 0,
// whatever number of ranks wrote it); *config gets the settings text stored
// with it (caller frees).
int prune_search_resume(prune_search *s, const char *state_path, char **config, sc_err *err);

// Runs the remaining iterations, saving the state to state_path (NULL:
// never) with `config` every save_interval seconds and when it stops; stops
// early on stop_after/time_limit (then s->finished stays 0).
int prune_search_run(prune_search *s, const char *state_path, const char *config, sc_err *err);

// Total iterations of the run (search plus fine-tuning rounds).
int prune_search_total(const prune_search *s);

// Solutions that train in iteration it (0-based) of evolve's search: the
// population, halved every halve_every iterations (to a divisor of it, down
// to 1); each of them trains population / active rounds in that iteration,
// so every search iteration costs the same images. 1 after the search.
int prune_search_active(const prune_cfg *c, int it);

// Rounds a surviving solution has trained before iteration it (0-based):
// the clock of the sparsity floor and of the learning-rate schedule.
long prune_search_clock(const prune_cfg *c, int it);

// Latency objective: the factor of the last whole-graph check (1 before any;
// NAN without the objective) and how many checks the history holds.
double prune_search_lat_scale(const prune_search *s, int *checks);

// Latency objective: the factor the search scales the table's predictions by
// in iteration it (0-based): each check's factor phased in linearly over the
// iterations up to the next check (1 before any; NAN without the objective).
double prune_search_lat_scale_at(const prune_search *s, int it);

// Loads the result (the best solution at the target) into nt and the
// executor of rank 0; *index receives its index when not NULL.
int prune_search_result(prune_search *s, int *index, sc_err *err);

#endif
