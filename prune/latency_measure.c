// Measures a latency table on the present GPU with deploy's own machinery:
// at every grid sparsity the net's prunable layers get masks at that sparsity
// (random weights, magnitude order, on the layers' pattern), the model is
// exported in memory, and deploy's tuner checks and times every candidate of
// every layer at the batch; a layer's time is its fastest choosable candidate
// (sparse or dense, in the plan's precision). The rest of the network is
// timed at sparsity 0. Plain C: without a GPU deploy_gpu_available says so.
#include "prune/latency.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/csr.h"
#include "runtime/deploy_gpu.h"
#include "runtime/deploy_plan.h"
#include "runtime/rng.h"
#include "runtime/sparse_model.h"

// Check images of the CPU reference per grid point.
#define LAT_NREF 2

// Random dense weights in the prunable layers, every mask entry kept.
static void dense_random(net *nt, const prune_layers *pl, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 0x1A7E);
    for (int l = 0; l < pl->n; l++) {
        float sd = 1.0f / sqrtf((float)pl->count[l] / (float)nt->tensors[pl->tensor[l]].dims[0]);
        for (size_t k = 0; k < pl->count[l]; k++) {
            nt->param[pl->offset[l] + k] = sd * rng_normal(&r);
            nt->mask[pl->offset[l] + k] = 1.0f;
        }
    }
}

// Index of the prunable layer whose conv/linear op i computes, or -1.
static int op_prunable(const deploy_plan *p, int i, const net *nt, const prune_layers *pl) {
    const sparse_layer *sl = p->ops[i].kind == DOP_CONV ? deploy_op_layer(p, &p->ops[i]) : NULL;
    for (int l = 0; sl && l < pl->n; l++)
        if (nt->tensors[pl->tensor[l]].layer == sl->layer) return l;
    return -1;
}

// Tunes the exported model of nt at the batch; per-op times into t->op_ms;
// graph_ms (when not NULL) gets the tuned plan's whole forward pass (CUDA graph).
static int tune_model(const net *nt, const lat_key *key, const sc_pattern *pat,
                      const uint8_t *img, deploy_timing *t, sparse_model **mo, deploy_plan **po,
                      double *graph_ms, sc_err *err) {
    export_cfg cfg = {.half = !strcmp(key->precision, "fp16"), .codebook = EXPORT_CB_OFF,
                      .pattern = pat};
    export_info info;
    sparse_model *m = export_build(nt, "latency", &cfg, &info, err);
    deploy_plan *p = m ? deploy_plan_build(m, err) : NULL;
    deploy_cpu *ref = p ? deploy_cpu_create(p, LAT_NREF, err) : NULL;
    deploy_prec prec = cfg.half ? DP_FP16 : DP_FP32;
    deploy_gpu *g = ref ? deploy_gpu_create(p, prec, key->batch, NULL, NULL, err) : NULL;
    int rc = g ? deploy_cpu_forward(ref, LAT_NREF, img, NULL, err) : -1;
    if (!rc) rc = deploy_timing_init(t, p->nops, key->batch, err);
    if (!rc) rc = deploy_gpu_tune(g, key->batch, img, ref, LAT_NREF, 20, t, NULL, err);
    int graph;
    if (!rc && graph_ms) rc = deploy_gpu_time(g, key->batch, 20, graph_ms, &graph, err);
    deploy_gpu_free(g);
    deploy_cpu_free(ref);
    *mo = m, *po = p;
    return rc;
}

// One grid point: masks at grid[gi], tuned; the layers' times into t.
static int measure_point(lat_table *t, int gi, net *nt, const prune_layers *pl, const lat_key *key,
                         const sc_pattern *pat, const uint8_t *img, sc_err *err) {
    double tg[pl->n];
    for (int l = 0; l < pl->n; l++) tg[l] = t->grid[gi];
    SC_TRY(prune_mask_raise(nt, pl, tg, NULL, (prune_crit){.alpha = 1, .beta = 0}, NULL, err));
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
    return rc ? sc_wrap(err, "latency at sparsity %g", t->grid[gi]) : 0;
}

// The whole grid; nt's parameters and masks are restored afterwards.
int lat_table_measure(lat_table *t, const lat_key *key, net *nt, const prune_layers *pl,
                      const sc_pattern *pat, FILE *log, sc_err *err) {
    const double grid[] = LAT_GRID_DEFAULT;
    if (!deploy_gpu_available(err)) return -1;  // 1 when a GPU is there
    SC_TRY(lat_table_alloc(t, pl->n, LAT_GRID_N, grid, err));
    t->key = *key;
    snprintf(t->source, sizeof t->source, "measured (deploy candidates)");
    lat_table_names(t, nt, pl);
    size_t np = nt->nparam * sizeof(float), nimg = (size_t)key->batch * 3 * nt->in_h * nt->in_w;
    float *param = malloc(np), *mask = malloc(np);
    uint8_t *img = malloc(nimg);
    rng r;
    rng_seed(&r, 0x1A7E, 1);
    int rc = param && mask && img ? 0 : sc_fail(err, "out of memory");
    if (!rc) {
        memcpy(param, nt->param, np), memcpy(mask, nt->mask, np);
        for (size_t i = 0; i < nimg; i++) img[i] = (uint8_t)rng_below(&r, 256);
        dense_random(nt, pl, 0x1A7E);
    }
    for (int g = 0; g < t->G && !rc; g++) {
        if (log) fprintf(log, "prune: timing every layer at sparsity %.2f, batch %d, %s\n", t->grid[g],
                         key->batch, key->precision);
        rc = measure_point(t, g, nt, pl, key, pat, img, err);
    }
    if (param && mask) memcpy(nt->param, param, np), memcpy(nt->mask, mask, np);
    free(param);
    free(mask);
    free(img);
    if (rc) lat_table_free(t);
    return rc;
}

// The model as it is: exported, tuned, per-op best times summed and the
// whole graph timed.
int lat_model_measure(const lat_key *key, const net *nt, const sc_pattern *pat, double *sum_ms,
                      double *graph_ms, sc_err *err) {
    if (!deploy_gpu_available(err)) return -1;  // 1 when a GPU is there
    size_t nimg = (size_t)key->batch * 3 * nt->in_h * nt->in_w;
    uint8_t *img = malloc(nimg);
    if (!img) return sc_fail(err, "out of memory");
    rng r;
    rng_seed(&r, 0x1A7E, 2);
    for (size_t i = 0; i < nimg; i++) img[i] = (uint8_t)rng_below(&r, 256);
    deploy_timing tm = {0};
    sparse_model *m = NULL;
    deploy_plan *p = NULL;
    int rc = tune_model(nt, key, pat, img, &tm, &m, &p, graph_ms, err);
    *sum_ms = 0.0;
    for (int i = 0; !rc && i < p->nops; i++) *sum_ms += tm.op_ms[i];
    deploy_timing_free(&tm);
    deploy_plan_free(p);
    sparse_model_free(m);
    free(img);
    return rc;
}
