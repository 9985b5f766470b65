// A latency model of the pruned layers for prune's latency objective: per
// prunable layer (prune/mask.h order), its milliseconds at a grid of
// sparsities, interpolated piecewise-linearly, plus a constant for the rest of
// the network. A table is measured on the GPU (prune/latency_measure.c) on the
// plan that runs the model: in fp16 deploy's mixed fp16 plan of the dense
// engine (runtime/dengine.h), in fp32 deploy's per-layer plan (the engine's
// mixed plan is fp16 only, and prune trains in fp16 or fp32 only); it is built
// from FLOPs when there is no GPU, or read from a JSON file. It records the
// GPU, its compute capability, the architecture, the batch, the precision
// and the plan it holds for, and a table made for other ones is refused. The idea of pruning to a measured per-layer timing
// table follows Frantar and Alistarh, "SPDY: Accurate Pruning with Speedup
// Guarantees" (ICML 2022).
#ifndef SC_PRUNE_LATENCY_H
#define SC_PRUNE_LATENCY_H

#include <stdio.h>

#include "prune/mask.h"
#include "runtime/error.h"
#include "runtime/net.h"
#include "runtime/pattern.h"

#define LAT_MAX_GRID 16

// The default grid of sparsities.
#define LAT_GRID_DEFAULT {0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98}
#define LAT_GRID_N 7

// What a table was made for; a table is used only where all of these agree.
typedef struct {
    char gpu[96];        // device name, "none" for the FLOP model
    int cc;              // compute capability major*10+minor, 0 without a GPU
    char arch[64];       // net architecture (net.arch)
    int batch;           // images per forward pass
    char precision[8];   // "fp16" or "fp32"
    char plan[24];       // the plan timed: LAT_PLAN_MIXED or LAT_PLAN_LAYER (lat_plan_for)
    char build[48];      // the toolkit build that timed it (SC_BUILD_ID; "unknown" in older files)
    char pattern[SC_PATTERN_TEXT];    // the layers' pattern the grid's masks were raised on (sc_pattern_format;
                         // "unknown" in older files)
} lat_key;

// The plans a table times: the dense engine's mixed fp16 plan (every conv on
// the fastest of cuDNN, the direct sparse and the block-sparse kernel), or
// deploy's per-layer plan (NCHW, a candidate per layer). A table file
// without a plan was written before the engine was timed: per-layer.
#define LAT_PLAN_MIXED "mixed-fp16-engine"
#define LAT_PLAN_LAYER "per-layer"

// The plan a table of this precision times: fp16 the mixed engine, else per-layer.
const char *lat_plan_for(const char *precision);
// The plan in words ("mixed fp16 engine", "per-layer plan (fp32)") into buf.
void lat_plan_describe(const lat_key *key, char *buf, size_t len);

typedef struct {
    lat_key key;
    char source[48];     // "measured", "FLOP model (no GPU)", ...
    int L, G;            // prunable layers, grid points
    double grid[LAT_MAX_GRID];  // (G) increasing sparsities, grid[0] = 0
    double *ms;          // (L * G) milliseconds of layer l at grid[g]: ms[l * G + g]
    char (*name)[48];    // (L) the layers' weight tensor names
    double rest_ms;      // the non-prunable rest of the network (first conv, BN, pools, ...)
} lat_table;

// Allocates an L x G table (G <= LAT_MAX_GRID) with the given grid; 0 or -1.
int lat_table_alloc(lat_table *t, int L, int G, const double *grid, sc_err *err);
void lat_table_free(lat_table *t);

// Milliseconds of layer l at sparsity s (piecewise linear; flat outside the grid).
double lat_layer_ms(const lat_table *t, int l, double s);
// Milliseconds saved per unit of sparsity by pruning layer l from s to the
// end of the grid (never negative; 0 from the last grid point on). Not the
// local slope: a best-of-sparse-and-dense curve is often flat until the
// sparse kernel wins, and a local slope of 0 there would hide the gain.
double lat_layer_gain(const lat_table *t, int l, double s);
// Predicted milliseconds of the network with per-layer sparsities sp (L).
double lat_predict(const lat_table *t, const double *sp);
// Scales grid point g's layer times by (graph_ms[g] - rest) / (their sum), so
// that the prediction at every layer = grid[g] equals the whole graph timed
// there (a NAN or non-positive graph_ms[g], or a factor <= 0, leaves the point
// alone). Ops timed alone miss what they cost each other inside the network:
// on an H200 the uncalibrated table of a 16x8 resnet18 under-predicted its
// graph by 8-18% when many layers ran block-sparse.
void lat_table_calibrate(lat_table *t, const double *graph_ms);
// Predicted milliseconds of the dense network.
double lat_dense_ms(const lat_table *t);

// Writes the table as JSON atomically.
int lat_table_save(const lat_table *t, const char *path, sc_err *err);
// Reads a table written by lat_table_save (or by hand in that format).
int lat_table_load(lat_table *t, const char *path, sc_err *err);

// 1 when t was made for key and for the layers of nt in pl (same count and
// tensor names); else 0 with the first difference in why (len bytes).
int lat_table_fits(const lat_table *t, const lat_key *key, const net *nt,
                   const prune_layers *pl, char *why, size_t len);

// The FLOP model, for machines without a GPU: each layer's time is its dense
// multiply-accumulates times (1 - s), never below LAT_FLOP_FLOOR of dense (a
// sparse kernel's fixed costs), at a nominal LAT_FLOP_RATE; the rest from the
// other layers' MACs. Labelled "FLOP model (no GPU)": its milliseconds are
// not a GPU's, only their ratios mean something.
#define LAT_FLOP_FLOOR 0.05
#define LAT_FLOP_RATE 1e10  // multiply-accumulates per millisecond
int lat_table_flops(lat_table *t, const lat_key *key, const net *nt, const prune_layers *pl,
                    sc_err *err);

// Measures a table on the current GPU (prune/latency_measure.c): at every grid
// sparsity every prunable layer of nt is masked to it by the magnitude of its
// own weights (on the pattern pat when not NULL: a trained model's uneven
// block rows are timed as its pruned models will have them) and the model is exported in memory and built at
// key->batch on key->plan. Mixed engine: a layer's time is its conv's as the
// engine's CUDA graph runs it, on the path the engine chose (cuDNN or a
// sparse kernel); the rest is the engine's whole graph at sparsity 0 minus
// the prunable layers. Per-layer plan: deploy's tuner checks and times every
// candidate in key->precision; a layer's time is its fastest choosable
// candidate, the rest's the other ops' times at sparsity 0. nt's parameters
// and masks are restored. Progress lines to log (may be NULL). Fails (saying
// why) without a GPU.
int lat_table_measure(lat_table *t, const lat_key *key, net *nt, const prune_layers *pl,
                      const sc_pattern *pat, FILE *log, sc_err *err);

// Measures nt as it is (its weights and masks) on key->plan: *graph_ms gets
// the plan's whole forward pass as one CUDA graph (median of replays, the
// measured latency), *sum_ms the sum of its ops' times as the table adds
// them (mixed engine: each op in a graph of its own; per-layer plan: the
// ops' fastest candidates), and layer_ms (pl->n, when not NULL) each
// prunable layer's op time of that sum (NAN for a layer without its own op).
// sum_ms NULL: the mixed engine's ops are not timed one by one (layer_ms
// must then be NULL too). Fails without a GPU.
int lat_model_measure(const lat_key *key, const net *nt, const prune_layers *pl, const sc_pattern *pat,
                      double *layer_ms, double *sum_ms, double *graph_ms, sc_err *err);

// The current GPU's name and compute capability into key (-1 without a GPU).
int lat_gpu_key(lat_key *key, sc_err *err);

// Fills t's layer names from nt and pl.
void lat_table_names(lat_table *t, const net *nt, const prune_layers *pl);

// A latency target: "X" milliseconds, or "Nx" for N times faster than the
// dense network of the table (ms gets the milliseconds). 0 or -1 (bad text).
int lat_parse_target(const char *text, const lat_table *t, double *ms, sc_err *err);

#endif
