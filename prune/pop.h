// The population of the pruning search, held on the host: per solution its
// parameters, masks, momentum and BN buffers, its per-layer sparsities and
// genome (the per-layer targets it proposes), its last validation accuracy
// and its data-stream position; a pre-round snapshot of each for rewinding;
// the layer sensitivities and the per-iteration history. The whole state is
// saved to one binary file (written atomically, checksummed) for --resume.
// gmp and oneshot run as a population of one.
#ifndef SC_PRUNE_POP_H
#define SC_PRUNE_POP_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"
#include "runtime/net.h"

// --- one solution -----------------------------------------------------------

typedef struct {
    double *sparsity;  // (L) per-layer sparsity of its mask
    double *genome;    // (L) per-layer targets proposed for its next raise
    float *param;      // (nparam) trainable parameters
    float *mask;       // (nparam) 1 keep / 0 pruned
    float *mom;        // (nparam) optimizer momentum
    float *buf;        // (nbuf) BN running statistics
    double acc;        // last validation accuracy, percent (< 0 unknown)
    double acc_prev;   // validation accuracy before the last round
    long batches;      // batches drawn from its data stream
    int stream;        // data stream id (its loader's seed offset)
    int age;           // iterations since it was last created, copied or rewound
    int fails;         // consecutive rejections
    int cluster;       // k-means cluster of the last clustering (-1 none)
} prune_sol;

// --- history ----------------------------------------------------------------

typedef struct {
    int iter;              // 1-based iteration (0: the starting point)
    int phase;             // 0 start, 1 search/prune, 2 finetune
    double target;         // overall sparsity the schedule asked for
    double best_acc;       // best validation accuracy in the population, percent
    double mean_acc;       // mean validation accuracy
    double best_sparsity;  // overall sparsity of the best solution
    double mean_sparsity;  // mean overall sparsity
    long images;           // training images seen so far by all solutions
    double seconds;        // wall time so far (over resumed runs)
    int admitted, rewound, mutated, crossed, replaced;  // evolve events this iteration
    double best_latency_ms;  // latency objective: predicted ms of the best solution (NAN: none)
    double mean_latency_ms;  // mean predicted ms (NAN: none)
    double measured_latency_ms;  // latency objective: the best solution's whole graph measured on
                                 // the GPU after this iteration's selection (NAN: not checked)
    double lat_scale;        // latency objective: measured / predicted of the last check so far,
                             // which the search phases in (prune_search_lat_scale_at) (1 before
                             // any check; NAN: no latency objective)
} prune_hist;

// --- deferred array work ----------------------------------------------------

// When the population is spread over ranks (prune/pop_dist.h), every rank
// keeps the small fields of every solution, but only the solution's owner
// holds its arrays. Selection then runs on every rank with a log attached:
// prune_sol_copy and prune_sol_rewind change the small fields at once and
// append the array work here, which prune_pop_replay carries out in order,
// moving arrays between ranks where source and destination differ.
typedef enum { PRUNE_OP_REWIND = 0, PRUNE_OP_COPY = 1 } prune_op_kind;

typedef struct {
    int kind;      // prune_op_kind
    int dst, src;  // REWIND: dst from its snapshot; COPY: dst from solution src
} prune_op;

typedef struct {
    int n, cap;    // entries used, room
    int lost;      // entries that did not fit (an error when replayed)
    prune_op *op;  // (cap)
} prune_oplog;

// --- the population ---------------------------------------------------------

typedef struct {
    int n, L;              // solutions, prunable layers
    size_t nparam, nbuf;
    prune_sol *sol;        // (n) current solutions
    prune_sol *snap;       // (n) pre-round snapshots for rewinding
    double *sens;          // (L) layer sensitivity (accuracy points, EMA)
    int iter;              // finished iterations
    int best;              // index of the best solution after the last iteration
    long images;           // training images seen so far
    double seconds;        // wall time spent so far
    int nhist, cap_hist;
    prune_hist *hist;      // (nhist) one row per finished iteration (+ the start)
    prune_oplog *defer;    // NULL: copies and rewinds move arrays at once; else logged
} prune_pop;

// Allocates a population of n solutions for nt's sizes and L prunable layers.
prune_pop *prune_pop_create(int n, int L, const net *nt, sc_err *err);
// Frees a population (NULL is fine).
void prune_pop_free(prune_pop *p);

// Copies the net's parameters, masks and buffers (and mom when not NULL)
// into solution i.
void prune_sol_store(prune_pop *p, int i, const net *nt, const float *mom);
// Copies solution i into the net (and its momentum into mom when not NULL).
void prune_sol_load(const prune_pop *p, int i, net *nt, float *mom);
// Copies everything of solution src into dst except dst's data stream (the
// arrays are logged instead when p->defer is set, as for prune_sol_rewind).
void prune_sol_copy(prune_pop *p, int dst, int src);
// Saves solution i into its snapshot.
void prune_sol_snapshot(prune_pop *p, int i);
// Saves only the small fields of solution i (sparsities, genome, accuracies)
// into its snapshot (ranks that do not hold its arrays).
void prune_sol_snapshot_small(prune_pop *p, int i);
// Restores solution i from its snapshot (weights, masks, sparsities, accuracy).
void prune_sol_rewind(prune_pop *p, int i);
// The array part of prune_sol_copy and prune_sol_rewind (parameters, masks,
// momentum, buffers), as replayed from a log.
void prune_sol_arrays_copy(prune_pop *p, int dst, int src);
void prune_sol_arrays_rewind(prune_pop *p, int i);

// Appends a history row.
int prune_pop_add_hist(prune_pop *p, const prune_hist *h, sc_err *err);

// Writes the population state and the settings text `config` to path
// atomically (a temporary file, fsync, rename).
int prune_state_save(const char *path, const prune_pop *p, const char *config, sc_err *err);
// Reads a state file written by prune_state_save into a new population;
// *config receives the settings text (caller frees). Fails, naming the file,
// on a truncated, corrupt or mismatched (other net sizes) file.
prune_pop *prune_state_load(const char *path, const net *nt, int L, char **config, sc_err *err);
// Reads only the settings text of a state file into *config (caller frees).
int prune_state_config(const char *path, char **config, sc_err *err);

#endif
