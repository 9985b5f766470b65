// The latency objective of the prune tool: which table a run uses (a given
// file, the run's cached one when it was made for this GPU, architecture,
// batch and precision, else a fresh measurement, else the FLOP model), the
// same table on every rank, the target in milliseconds and the overall
// sparsity the schedule needs for it.
#ifndef SC_PRUNE_LATENCY_SETUP_H
#define SC_PRUNE_LATENCY_SETUP_H

#include "prune/dist.h"
#include "prune/evolve.h"
#include "prune/latency.h"
#include "runtime/json.h"

typedef struct {
    const char *table;      // --latency-table FILE, or NULL
    const char *target;     // --latency-target: "X" ms or "Nx"
    int batch;              // --latency-batch
    const char *precision;  // "fp16" or "fp32"
    int on_gpu;             // the run trains on a GPU: measure there
    const char *cache;      // rank 0: the run's table file (read if it fits, else written)
    const char *shared_dir; // rank 0: tables shared between runs (<runs>/latency), or NULL
    const char *shared_tag; // what else a shared table depends on: dataset, pattern, start weights
    int quiet;
} prune_lat_opts;

// Rank 0 chooses the table (notes to stderr), every rank receives it in t:
// a given file; else the run's own (resumed); else one an earlier run
// measured in o->shared_dir for the same GPU, build, net, batch, precision
// and tag; else a new one (saved to both).
// Collective. Errors: a given file that does not fit (arch, batch,
// precision, layers, or another GPU than the present one), a bad target.
int prune_lat_table(const prune_lat_opts *o, net *nt, const prune_layers *pl,
                    const sc_pattern *pat, dist *d, lat_table *t, sc_err *err);

// Smallest overall sparsity whose allocation (evolve_allocate with each
// layer's sensitivity divided by its time-per-weight ratio, evolve_lat_ratio
// at sparsity 0) the table predicts at or below target_ms; fails, naming the
// best it can do, when even s_max does not reach it.
int prune_lat_sparsity(const lat_table *t, const prune_layers *pl, double target_ms, double s_max,
                       double *sparsity, sc_err *err);

// What a run is, for --objective auto and --pattern auto.
typedef struct {
    int on_gpu;          // the run trains on a GPU
    int fp16;            // at fp16 (the latency table's precision)
    int evolve;          // --method evolve
    int from;            // --from a model
    int sparsity_given;  // --target-sparsity, --min-layer-sparsity or --layer-floor given
    int hybrid;          // --pattern KxC+F: no kernel runs it yet, so no latency table can time it
} prune_auto_run;

// Resolves "auto" in *objective and *pattern (others are left as given):
// the objective is latency for an evolutionary search on a GPU from scratch
// that names no sparsity and no hybrid pattern (the mission's pipeline), else sparsity; the
// pattern is PRUNE_AUTO_PATTERN for a latency run at fp16 from scratch (the
// fp16 engine's sparse kernels are the block ones), else unstructured.
void prune_auto_resolve(const prune_auto_run *run, const char **objective, const char **pattern);

// The pattern --pattern auto picks for a latency run at fp16.
#define PRUNE_AUTO_PATTERN "16x8"

// Prunable layers whose times prune_lat_result keeps one by one.
#define PRUNE_LAT_MAX_LAYERS 256

// What the run's final model came to: predicted by the table and, on a GPU,
// measured on the table's plan (NAN where not measured).
typedef struct {
    double target_ms;     // the objective's target
    double predicted_ms;  // the table's prediction for the final masks
    double dense_ms;      // the table's dense network
    double measured_ms;   // the plan's forward pass as one CUDA graph (the prediction's error is against it)
    double ops_ms;        // sum of the plan's op times (lat_model_measure's sum_ms)
    int L;                // prunable layers kept below (0 when more than PRUNE_LAT_MAX_LAYERS)
    double sp[PRUNE_LAT_MAX_LAYERS];        // each layer's sparsity
    double layer_ms[PRUNE_LAT_MAX_LAYERS];  // each layer's measured op time (NAN: not measured)
    char why[520];        // why it was not measured ("" when it was)
    int checks;           // the search's whole-graph checks (prune_search_lat_scale)
    double scale;         // the last check's measured / predicted (1: none)
} prune_lat_result;

// What the search's latency checks measure with: the table (its plan, batch
// and precision) and the run's pattern.
typedef struct {
    const lat_table *t;
    const sc_pattern *pat;
} prune_lat_probe;

// A prune_lat_measure_fn (prune/search.h) for the search's latency checks:
// nt's whole forward pass as one CUDA graph on the table's plan
// (lat_model_measure's graph_ms). ctx: a prune_lat_probe.
int prune_lat_measure_graph(void *ctx, const net *nt, const prune_layers *pl, double *ms, sc_err *err);

// Predicts and (on a GPU, o->on_gpu) measures nt's latency; prints one line
// to stdout, one more on the search's latency checks when there were any
// (checks, the last one's factor scale), and unless o->quiet each layer's
// table time against its measured op time. A failed measurement is
// reported, not an error.
void prune_lat_final(const prune_lat_opts *o, const lat_table *t, double target_ms, const net *nt,
                     const prune_layers *pl, const sc_pattern *pat, int checks, double scale,
                     prune_lat_result *res);

// Adds the objective's members to the summary JSON (res NULL: not finished),
// with each prunable layer's sparsity, table time and measured time.
void prune_lat_json(json_writer *j, const lat_table *t, const prune_lat_result *res,
                    double target_ms);

#endif
