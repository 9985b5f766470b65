// Measures a latency table on the present GPU on the plan that will run the
// model (prune/latency.h): at every grid sparsity the net's prunable layers
// get masks at that sparsity (the net's own weights, magnitude order, on the
// layers' pattern) and the model is exported in memory. fp16: at sparsity 0
// the dense engine's mixed fp16 plan is built on it and every prunable
// layer's op is timed as a CUDA graph runs it; above 0 every conv keeps its
// checked sparse path (the direct sparse or the block-sparse kernel) and a
// layer's time is its dense time less its gain in the whole graph with it
// alone sparse (engine_point_in_graph). fp32: deploy's
// per-layer tuner checks and times every candidate of every layer at the
// batch; a layer's time is its fastest choosable candidate. The rest of the
// network is timed at sparsity 0; on the mixed engine each grid point's layer
// times are then scaled to the whole graph timed there (lat_table_calibrate).
// Plain C: without a GPU deploy_gpu_available says so.
#include "prune/latency.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/csr.h"
#include "runtime/dengine.h"
#include "runtime/deploy_gpu.h"
#include "runtime/deploy_plan.h"
#include "runtime/rng.h"
#include "runtime/sparse_model.h"

// Check images of the CPU reference per grid point (per-layer plan).
#define LAT_NREF 2
// Mixed engine: timed runs per conv path when it is built (as deploy builds
// it), runs of an op captured per graph and replays timed for its time, and
// replays of the whole graph timed (deploy's --repeat default).
#define LAT_TUNE_REPEAT 5
#define LAT_OP_COPIES 10
#define LAT_OP_REPEAT 10
#define LAT_GRAPH_REPEAT 20

// Every prunable layer dense (masks all kept), the weights as they are: the
// grid's masks then follow the model's own weights (magnitude order), so a
// trained model's uneven block rows (some output channels keep several times
// the mean of blocks) are in the table as in the models pruned from it.
static void dense_masks(net *nt, const prune_layers *pl) {
    for (int l = 0; l < pl->n; l++)
        for (size_t k = 0; k < pl->count[l]; k++) nt->mask[pl->offset[l] + k] = 1.0f;
}

// Index of the prunable layer whose conv/linear op i computes, or -1.
static int op_prunable(const deploy_plan *p, int i, const net *nt, const prune_layers *pl) {
    const sparse_layer *sl = p->ops[i].kind == DOP_CONV ? deploy_op_layer(p, &p->ops[i]) : NULL;
    for (int l = 0; sl && l < pl->n; l++)
        if (nt->tensors[pl->tensor[l]].layer == sl->layer) return l;
    return -1;
}

// Random input bytes for a batch of nt (NULL when out of memory).
static uint8_t *random_images(const net *nt, int batch, uint64_t stream) {
    size_t n = (size_t)batch * 3 * nt->in_h * nt->in_w;
    uint8_t *img = malloc(n);
    rng r;
    rng_seed(&r, 0x1A7E, stream);
    for (size_t i = 0; img && i < n; i++) img[i] = (uint8_t)rng_below(&r, 256);
    return img;
}

// Exports nt in memory in key's precision and builds its deploy plan.
static int export_plan(const net *nt, const lat_key *key, const sc_pattern *pat, sparse_model **mo,
                       deploy_plan **po, sc_err *err) {
    export_cfg cfg = {.half = !strcmp(key->precision, "fp16"), .codebook = EXPORT_CB_OFF,
                      .pattern = pat};
    export_info info;
    *mo = export_build(nt, "latency", &cfg, &info, err);
    *po = *mo ? deploy_plan_build(*mo, err) : NULL;
    return *po ? 0 : -1;
}

// --- deploy's per-layer plan (fp32) -------------------------------------------------

// Tunes the exported model of nt at the batch; per-op times into t->op_ms;
// graph_ms (when not NULL) gets the tuned plan's whole forward pass (CUDA graph).
static int tune_model(const net *nt, const lat_key *key, const sc_pattern *pat,
                      const uint8_t *img, deploy_timing *t, sparse_model **mo, deploy_plan **po,
                      double *graph_ms, sc_err *err) {
    int rc = export_plan(nt, key, pat, mo, po, err);
    deploy_plan *p = *po;
    deploy_cpu *ref = rc ? NULL : deploy_cpu_create(p, LAT_NREF, err);
    deploy_prec prec = !strcmp(key->precision, "fp16") ? DP_FP16 : DP_FP32;
    deploy_gpu *g = ref ? deploy_gpu_create(p, prec, key->batch, NULL, NULL, err) : NULL;
    rc = g ? deploy_cpu_forward(ref, LAT_NREF, img, NULL, err) : -1;
    if (!rc) rc = deploy_timing_init(t, p->nops, key->batch, err);
    if (!rc) rc = deploy_gpu_tune(g, key->batch, img, ref, LAT_NREF, 20, t, NULL, err);
    int graph;
    if (!rc && graph_ms) rc = deploy_gpu_time(g, key->batch, 20, graph_ms, &graph, err);
    deploy_gpu_free(g);
    deploy_cpu_free(ref);
    return rc;
}

// Per-layer plan at grid point gi (masks set): the layers' times into t.
static int layer_point(lat_table *t, int gi, const net *nt, const prune_layers *pl, const lat_key *key,
                       const sc_pattern *pat, const uint8_t *img, sc_err *err) {
    deploy_timing tm = {0};
    sparse_model *m = NULL;
    deploy_plan *p = NULL;
    int rc = tune_model(nt, key, pat, img, &tm, &m, &p, NULL, err);
    for (int i = 0; !rc && i < p->nops; i++) {
        int l = op_prunable(p, i, nt, pl);
        if (!isfinite(tm.op_ms[i])) rc = sc_fail(err, "op %s: no time", p->ops[i].name);
        else if (l >= 0) t->ms[(size_t)l * t->G + gi] = tm.op_ms[i];
        else if (gi == 0) t->rest_ms += tm.op_ms[i];
    }
    deploy_timing_free(&tm);
    deploy_plan_free(p);
    sparse_model_free(m);
    return rc;
}

// Per-layer plan of the model as it is: per-op best times summed (and per
// prunable layer into layer_ms when not NULL), the whole graph timed.
static int layer_model(const lat_key *key, const net *nt, const prune_layers *pl, const sc_pattern *pat,
                       const uint8_t *img, double *layer_ms, double *sum_ms, double *graph_ms, sc_err *err) {
    deploy_timing tm = {0};
    sparse_model *m = NULL;
    deploy_plan *p = NULL;
    int rc = tune_model(nt, key, pat, img, &tm, &m, &p, graph_ms, err);
    *sum_ms = 0.0;
    for (int i = 0; !rc && i < p->nops; i++) {
        const int l = layer_ms ? op_prunable(p, i, nt, pl) : -1;
        if (l >= 0) layer_ms[l] = tm.op_ms[i];
        *sum_ms += tm.op_ms[i];
    }
    deploy_timing_free(&tm);
    deploy_plan_free(p);
    sparse_model_free(m);
    return rc;
}

// --- the mixed fp16 engine ---------------------------------------------------------------

// The exported model of nt, its plan and the mixed fp16 engine built on img
// at the batch (force: every conv whose sparse path passes its check keeps it).
static int engine_build(const net *nt, const lat_key *key, const sc_pattern *pat, const uint8_t *img, int force,
                        sparse_model **m, deploy_plan **p, dengine **e, sc_err *err) {
    *e = NULL;
    SC_TRY(export_plan(nt, key, pat, m, p, err));
    *e = dengine_create_mixed(*p, key->batch, img, LAT_TUNE_REPEAT, force, err);
    return *e ? 0 : -1;
}

// Frees what engine_build made (the engine first: it reads the plan, the plan the model).
static void engine_free(sparse_model *m, deploy_plan *p, dengine *e) {
    dengine_free(e);
    deploy_plan_free(p);
    sparse_model_free(m);
}

// Engine grid point gi (masks set; point 0): each prunable layer's op as a graph runs
// it, on the path the engine chose (a prunable linear layer runs dense on
// cuBLASLt at every sparsity: flat). At sparsity 0 the rest is the whole
// graph minus the prunable layers, clamped at 0: the ops outside them have no
// tuned time (dengine_op_ms is NAN for the small ops and the linear layers)
// and the adds fused into a conv none of their own, so the graph is what
// holds all of them. Every point logs the graph against the table's sum and
// against the sum of the engine's tuned conv times (each timed behind a spin kernel, gpu_time_median_busy).
static int engine_point(lat_table *t, int gi, const net *nt, const prune_layers *pl, const lat_key *key,
                        const sc_pattern *pat, const uint8_t *img, FILE *log, double *graph_ms, sc_err *err) {
    sparse_model *m = NULL;
    deploy_plan *p = NULL;
    dengine *e = NULL;
    double graph = NAN, layers = 0.0, tuned = 0.0;
    *graph_ms = NAN;
    int rc = engine_build(nt, key, pat, img, 0, &m, &p, &e, err);
    for (int i = 0; !rc && i < p->nops; i++) {
        const int l = op_prunable(p, i, nt, pl);
        double *ms = l >= 0 ? &t->ms[(size_t)l * t->G + gi] : NULL;
        if (!ms) continue;
        rc = dengine_op_graph_ms(e, i, LAT_OP_COPIES, LAT_OP_REPEAT, ms, err);
        if (!rc && !isfinite(*ms)) rc = sc_fail(err, "op %s: no time", p->ops[i].name);
        layers += *ms;
        tuned += isfinite(dengine_op_ms(e, i)) ? dengine_op_ms(e, i) : *ms;
    }
    if (!rc) rc = dengine_time(e, LAT_GRAPH_REPEAT, &graph, err);
    if (!rc) *graph_ms = graph;
    if (!rc && gi == 0) t->rest_ms = fmax(0.0, graph - layers);
    if (!rc && log)
        fprintf(log, "prune: sparsity %.2f: whole graph %.4f ms, table %.4f ms (layers %.4f + rest %.4f; "
                "with the tuned conv times %.4f)\n", t->grid[gi], graph, layers + t->rest_ms, layers,
                t->rest_ms, tuned + t->rest_ms);
    engine_free(m, p, e);
    return rc;
}

// Engine grid point gi > 0 (masks set; point 0 measured): each prunable
// layer's time is its dense time at point 0 less its gain in the graph, the
// whole forward on cuDNN minus with that layer alone sparse (never below 0:
// the plan keeps a layer on cuDNN where the graph is faster so); the whole
// graph is timed with the layers that gain sparse. Summed over the layers
// the plan ran sparse, the gains alone (ten copies, input hot in L2) were
// 0.0193 ms where the graph gained 0.0008 ms (a trained resnet18, 16x8, 95%).
static int engine_point_in_graph(lat_table *t, int gi, const net *nt, const prune_layers *pl, const lat_key *key,
                                 const sc_pattern *pat, const uint8_t *img, FILE *log, double *graph_ms,
                                 sc_err *err) {
    sparse_model *m = NULL;
    deploy_plan *p = NULL;
    dengine *e = NULL;
    double layers = 0.0;
    int nsparse = 0;
    *graph_ms = NAN;
    int rc = engine_build(nt, key, pat, img, 1, &m, &p, &e, err);
    unsigned char *on = rc ? NULL : calloc((size_t)p->nops, 1);
    if (!rc && !on) rc = sc_fail(err, "out of memory");
    for (int i = 0; !rc && i < p->nops; i++) {
        const int l = op_prunable(p, i, nt, pl);
        if (l < 0) continue;
        double gain = NAN;
        rc = dengine_op_graph_gain_alone(e, i, LAT_GRAPH_REPEAT, &gain, err);
        const double dense = t->ms[(size_t)l * t->G];
        on[i] = !rc && gain > 0.0;
        t->ms[(size_t)l * t->G + gi] = on[i] ? fmax(0.0, dense - gain) : dense;
        layers += t->ms[(size_t)l * t->G + gi], nsparse += on[i];
    }
    if (!rc) rc = dengine_graph_ms_with(e, on, LAT_GRAPH_REPEAT, graph_ms, err);
    if (!rc && log)
        fprintf(log, "prune: sparsity %.2f: whole graph %.4f ms with %d layers sparse, table %.4f ms (layers %.4f + "
                "rest %.4f, each layer's gain measured in the graph)\n", t->grid[gi], *graph_ms, nsparse,
                layers + t->rest_ms, layers, t->rest_ms);
    free(on);
    engine_free(m, p, e);
    return rc;
}

// The mixed engine of the model as it is: every op's graph time summed (and
// per prunable layer into layer_ms when not NULL; sum_ms NULL: the ops are
// not timed one by one), the whole graph timed.
static int engine_model(const lat_key *key, const net *nt, const prune_layers *pl, const sc_pattern *pat,
                        const uint8_t *img, double *layer_ms, double *sum_ms, double *graph_ms, sc_err *err) {
    sparse_model *m = NULL;
    deploy_plan *p = NULL;
    dengine *e = NULL;
    int rc = engine_build(nt, key, pat, img, 0, &m, &p, &e, err);
    if (sum_ms) *sum_ms = 0.0;
    for (int i = 0; !rc && sum_ms && i < p->nops; i++) {
        double ms;
        rc = dengine_op_graph_ms(e, i, LAT_OP_COPIES, LAT_OP_REPEAT, &ms, err);
        if (!rc && isfinite(ms)) *sum_ms += ms;  // NAN: fused into a conv or an alias
        const int l = layer_ms ? op_prunable(p, i, nt, pl) : -1;
        if (!rc && l >= 0) layer_ms[l] = ms;
    }
    if (!rc) rc = dengine_time(e, LAT_GRAPH_REPEAT, graph_ms, err);
    engine_free(m, p, e);
    return rc;
}

// --- the table and the model ----------------------------------------------------------

// 1 when key times the mixed fp16 engine, 0 the per-layer plan, -1 (err) another.
static int engine_plan(const lat_key *key, sc_err *err) {
    if (!strcmp(key->plan, LAT_PLAN_MIXED)) return 1;
    if (!strcmp(key->plan, LAT_PLAN_LAYER)) return 0;
    return sc_fail(err, "latency table: unknown plan '%s'", key->plan);
}

// One grid point: masks at grid[gi], then the plan's layer times into t
// and (mixed engine) the whole graph's time into *graph_ms (else NAN).
static int measure_point(lat_table *t, int gi, net *nt, const prune_layers *pl, const lat_key *key,
                         const sc_pattern *pat, const uint8_t *img, FILE *log, double *graph_ms, sc_err *err) {
    double tg[pl->n];
    *graph_ms = NAN;
    for (int l = 0; l < pl->n; l++) tg[l] = t->grid[gi];
    SC_TRY(prune_mask_raise(nt, pl, tg, NULL, (prune_crit){.alpha = 1, .beta = 0}, NULL, err));
    int rc = !engine_plan(key, err) ? layer_point(t, gi, nt, pl, key, pat, img, err)
             : gi == 0              ? engine_point(t, gi, nt, pl, key, pat, img, log, graph_ms, err)
                                    : engine_point_in_graph(t, gi, nt, pl, key, pat, img, log, graph_ms, err);
    return rc ? sc_wrap(err, "latency at sparsity %g", t->grid[gi]) : 0;
}

// The whole grid; nt's parameters and masks are restored afterwards.
int lat_table_measure(lat_table *t, const lat_key *key, net *nt, const prune_layers *pl,
                      const sc_pattern *pat, FILE *log, sc_err *err) {
    const double grid[] = LAT_GRID_DEFAULT;
    char plan[48];
    if (!deploy_gpu_available(err)) return -1;  // 1 when a GPU is there
    if (engine_plan(key, err) < 0) return -1;
    SC_TRY(lat_table_alloc(t, pl->n, LAT_GRID_N, grid, err));
    t->key = *key;
    lat_plan_describe(key, plan, sizeof plan);
    snprintf(t->source, sizeof t->source, "measured (%.30s)", plan);
    lat_table_names(t, nt, pl);
    size_t np = nt->nparam * sizeof(float);
    float *param = malloc(np), *mask = malloc(np);
    uint8_t *img = random_images(nt, key->batch, 1);
    int rc = param && mask && img ? 0 : sc_fail(err, "out of memory");
    if (!rc) {
        memcpy(param, nt->param, np), memcpy(mask, nt->mask, np);
        dense_masks(nt, pl);
    }
    double graph[LAT_MAX_GRID];
    for (int g = 0; g < t->G && !rc; g++) {
        if (log) fprintf(log, "prune: timing every layer at sparsity %.2f, batch %d, %s\n", t->grid[g],
                         key->batch, plan);
        rc = measure_point(t, g, nt, pl, key, pat, img, log, &graph[g], err);
    }
    if (!rc) lat_table_calibrate(t, graph);  // mixed engine: each point to its whole graph
    if (param && mask) memcpy(nt->param, param, np), memcpy(nt->mask, mask, np);
    free(param);
    free(mask);
    free(img);
    if (rc) lat_table_free(t);
    return rc;
}

// The model as it is on key's plan: its ops' times summed and the whole graph timed.
int lat_model_measure(const lat_key *key, const net *nt, const prune_layers *pl, const sc_pattern *pat,
                      double *layer_ms, double *sum_ms, double *graph_ms, sc_err *err) {
    if (!deploy_gpu_available(err)) return -1;  // 1 when a GPU is there
    const int engine = engine_plan(key, err);
    if (engine < 0) return -1;
    uint8_t *img = random_images(nt, key->batch, 2);
    if (!img) return sc_fail(err, "out of memory");
    double sum;
    for (int l = 0; layer_ms && l < pl->n; l++) layer_ms[l] = NAN;
    int rc = engine ? engine_model(key, nt, pl, pat, img, layer_ms, sum_ms, graph_ms, err)
                    : layer_model(key, nt, pl, pat, img, layer_ms, sum_ms ? sum_ms : &sum, graph_ms, err);
    free(img);
    return rc;
}
