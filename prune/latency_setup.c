// Choosing, sharing and using the latency table of a prune run
// (prune/latency_setup.h).
#include "prune/latency_setup.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/progress.h"
#include "runtime/rundir.h"
#if defined(__has_include)
#if __has_include("build_id.h")
#include "build_id.h"  // SC_BUILD_ID, written by the Makefile into the build directory
#endif
#endif
#ifndef SC_BUILD_ID
#define SC_BUILD_ID "unknown"  // built without that header (the fuzzing build)
#endif

// Resolves --objective auto and --pattern auto (prune/latency_setup.h).
void prune_auto_resolve(const prune_auto_run *run, const char **objective, const char **pattern) {
    if (!strcmp(*objective, "auto"))
        *objective = run->on_gpu && run->evolve && !run->from && !run->sparsity_given && !run->hybrid ? "latency"
                                                                                                       : "sparsity";
    if (!strcmp(*pattern, "auto"))
        *pattern = !strcmp(*objective, "latency") && run->fp16 && !run->from ? PRUNE_AUTO_PATTERN : "unstructured";
}

// The key this run needs: the present GPU (or "none"), arch, batch,
// precision, the layers' pattern.
static void run_key(const prune_lat_opts *o, const net *nt, const sc_pattern *pat, lat_key *k) {
    sc_err e = {0};
    memset(k, 0, sizeof *k);
    if (!o->on_gpu || lat_gpu_key(k, &e)) snprintf(k->gpu, sizeof k->gpu, "none"), k->cc = 0;
    snprintf(k->arch, sizeof k->arch, "%s", nt->arch);
    k->batch = o->batch;
    snprintf(k->precision, sizeof k->precision, "%s", o->precision);
    snprintf(k->plan, sizeof k->plan, "%s", lat_plan_for(o->precision));
    snprintf(k->build, sizeof k->build, "%s", SC_BUILD_ID);
    sc_pattern_format(pat, k->pattern, sizeof k->pattern);
}

// A given file: it must fit; without a GPU its GPU is taken as it is (noted).
static int given_table(const prune_lat_opts *o, const lat_key *key, const net *nt,
                       const prune_layers *pl, lat_table *t, sc_err *err) {
    char why[200];
    SC_TRY(lat_table_load(t, o->table, err));
    lat_key k = *key;
    if (!strcmp(key->gpu, "none")) {
        snprintf(k.gpu, sizeof k.gpu, "%s", t->key.gpu), k.cc = t->key.cc;
        log_line(stderr, o->quiet, "prune: no GPU here: using the latency table %s as given (%s, %s)",
                 o->table, t->key.gpu, t->source);
    }
    if (strcmp(k.build, t->key.build)) {  // a table the user names is trusted across builds, said so
        log_line(stderr, o->quiet, "prune: the latency table %s was timed by build %s, this is %s", o->table,
                 t->key.build, k.build);
        snprintf(k.build, sizeof k.build, "%s", t->key.build);
    }
    if (!strcmp(t->key.pattern, "unknown")) {  // older than the pattern in the key: trusted, said so
        log_line(stderr, o->quiet, "prune: the latency table %s does not say its pattern; taken as %s", o->table,
                 k.pattern);
        snprintf(k.pattern, sizeof k.pattern, "%s", t->key.pattern);
    }
    if (lat_table_fits(t, &k, nt, pl, why, sizeof why)) return 0;
    lat_table_free(t);
    return sc_fail(err, "--latency-table %s does not fit this run: %s", o->table, why);
}

// The table cached at path (NULL: none) when it fits (else a note why not); 1 when used.
static int cached_table(const prune_lat_opts *o, const char *path, const lat_key *key, const net *nt,
                        const prune_layers *pl, lat_table *t) {
    char why[200];
    sc_err e = {0};
    if (!path || access(path, F_OK)) return 0;
    if (lat_table_load(t, path, &e)) {
        log_line(stderr, o->quiet, "prune: %s; measuring again", e.msg);
        return 0;
    }
    if (lat_table_fits(t, key, nt, pl, why, sizeof why)) {
        log_line(stderr, o->quiet, "prune: reusing the latency table %s (%s)", path, t->source);
        return 1;
    }
    log_line(stderr, o->quiet, "prune: not reusing the latency table %s: %s; building a new one", path, why);
    lat_table_free(t);
    return 0;
}

// The shared table's path: <shared_dir>/<arch>-<tag>-<gpu>-b<batch>-<precision>.json,
// every character but letters, digits, '.' and '-' made '_'; "" without a shared_dir.
static void shared_path(const prune_lat_opts *o, const lat_key *key, char *out, size_t n) {
    char name[400];
    out[0] = 0;
    if (!o->shared_dir) return;
    snprintf(name, sizeof name, "%s-%s-%s-b%d-%s.json", key->arch, o->shared_tag ? o->shared_tag : "",
             key->gpu, key->batch, key->precision);
    for (char *c = name; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '-') *c = '_';
    snprintf(out, n, "%s/%s", o->shared_dir, name);
}

// Saves a new table for later runs too (not a FLOP model standing in for a
// failed measurement); a failure is a note, not an error.
static void share_later(const prune_lat_opts *o, const char *path, const lat_key *key, const lat_table *t) {
    sc_err e = {0};
    if (!path[0] || (strcmp(key->gpu, "none") && strncmp(t->source, "measured", 8))) return;
    if (rundir_mkdirs(o->shared_dir, &e) || lat_table_save(t, path, &e))
        log_line(stderr, o->quiet, "prune: not keeping the latency table for later runs: %s", e.msg);
}

// A new table: measured on the GPU, else the FLOP model (said so, and why in its source).
static int new_table(const prune_lat_opts *o, const lat_key *key, net *nt, const prune_layers *pl,
                     const sc_pattern *pat, lat_table *t, sc_err *err) {
    const int gpu = strcmp(key->gpu, "none") != 0;
    if (gpu) {
        sc_err e = {0};
        char plan[48];
        lat_plan_describe(key, plan, sizeof plan);
        log_line(stderr, o->quiet, "prune: measuring the latency table on %s (the %s)", key->gpu, plan);
        if (!lat_table_measure(t, key, nt, pl, pat, o->quiet ? NULL : stderr, &e)) return 0;
        log_line(stderr, o->quiet, "prune: measuring failed (%s); using the FLOP model", e.msg);
    } else {
        log_line(stderr, o->quiet, "prune: no GPU: predicted latency from the FLOP model (nominal "
                 "milliseconds, only their ratios mean something)");
    }
    SC_TRY(lat_table_flops(t, key, nt, pl, err));
    if (gpu) snprintf(t->source, sizeof t->source, "FLOP model (measuring failed)");
    return 0;
}

// Rank 0's choice of table.
static int choose_table(const prune_lat_opts *o, net *nt, const prune_layers *pl,
                        const sc_pattern *pat, lat_table *t, sc_err *err) {
    lat_key key;
    char shared[1400];
    run_key(o, nt, pat, &key);
    if (o->table) return given_table(o, &key, nt, pl, t, err);
    if (cached_table(o, o->cache, &key, nt, pl, t)) return 0;
    shared_path(o, &key, shared, sizeof shared);
    if (!cached_table(o, shared[0] ? shared : NULL, &key, nt, pl, t)) {
        SC_TRY(new_table(o, &key, nt, pl, pat, t, err));
        share_later(o, shared, &key, t);
    }
    return o->cache ? lat_table_save(t, o->cache, err) : 0;
}

// Sends rank 0's table to every rank.
static int share_table(dist *d, lat_table *t, sc_err *err) {
    int dims[2] = {t->L, t->G};
    SC_TRY(dist_bcast(d, dims, sizeof dims, 0, err));
    int rc = dist_rank(d) != 0 ? lat_table_alloc(t, dims[0], dims[1], t->grid, err) : 0;
    SC_TRY(dist_agree(d, rc, err));
    rc = dist_bcast(d, &t->key, sizeof t->key, 0, err) || dist_bcast(d, t->source, sizeof t->source, 0, err) ||
         dist_bcast(d, t->grid, sizeof t->grid, 0, err) || dist_bcast(d, &t->rest_ms, sizeof t->rest_ms, 0, err) ||
         dist_bcast(d, t->ms, (size_t)t->L * t->G * sizeof *t->ms, 0, err) ||
         dist_bcast(d, t->name, (size_t)t->L * sizeof *t->name, 0, err);
    return rc ? -1 : 0;
}

// Chooses on rank 0, then shares.
int prune_lat_table(const prune_lat_opts *o, net *nt, const prune_layers *pl,
                    const sc_pattern *pat, dist *d, lat_table *t, sc_err *err) {
    memset(t, 0, sizeof *t);
    int rc = dist_rank(d) == 0 ? choose_table(o, nt, pl, pat, t, err) : 0;
    SC_TRY(dist_agree(d, rc, err));
    if (dist_size(d) > 1) SC_TRY(share_table(d, t, err));
    return 0;
}

// The allocation from sparsity 0 (evolve_lat_reach), or the error naming the best it can do.
int prune_lat_sparsity(const lat_table *t, const prune_layers *pl, double target_ms, double s_max,
                       double *sparsity, sc_err *err) {
    int L = pl->n;
    double zero[L > 0 ? L : 1], ms;
    evolve_cfg c;
    evolve_cfg_default(&c, 1, 0.0);
    c.lat = t;
    c.s_max = s_max;
    for (int l = 0; l < L; l++) zero[l] = 0.0;
    if (!evolve_lat_reach(&c, pl, zero, target_ms, sparsity, &ms)) return 0;
    return sc_fail(err, "latency target %.4g ms out of reach: the table predicts %.4g ms at "
                   "sparsity %.3f (dense %.4g ms)", target_ms, ms, *sparsity, lat_dense_ms(t));
}

int prune_lat_measure_graph(void *ctx, const net *nt, const prune_layers *pl, double *ms, sc_err *err) {
    const prune_lat_probe *p = ctx;
    return lat_model_measure(&p->t->key, nt, pl, p->pat, NULL, NULL, ms, err);
}

// Each layer's table time at its sparsity against its measured op time (stdout).
static void print_layers(const lat_table *t, const prune_lat_result *res) {
    printf("  per layer (table at the layer's sparsity vs its op measured in the final model; ms):\n"
           "  %-28s %8s %8s %8s %7s\n", "layer", "sparsity", "table", "measured", "error");
    for (int l = 0; l < res->L; l++) {
        const double p = lat_layer_ms(t, l, res->sp[l]), m = res->layer_ms[l];
        printf("  %-28.28s %8.3f %8.4f %8.4f", t->name[l], res->sp[l], p, m);
        if (isfinite(m) && m > 0) printf(" %+6.1f%%\n", 100.0 * (p / m - 1.0));
        else printf("       -\n");
    }
}

// Prediction from the masks, then the measurement where there is a GPU.
void prune_lat_final(const prune_lat_opts *o, const lat_table *t, double target_ms, const net *nt,
                     const prune_layers *pl, const sc_pattern *pat, int checks, double scale,
                     prune_lat_result *res) {
    double sp[pl->n];
    sc_err e = {0};
    prune_sparsity_read(nt, pl, sp);
    *res = (prune_lat_result){.target_ms = target_ms, .predicted_ms = lat_predict(t, sp),
                              .dense_ms = lat_dense_ms(t), .measured_ms = NAN, .ops_ms = NAN,
                              .L = pl->n <= PRUNE_LAT_MAX_LAYERS ? pl->n : 0, .checks = checks,
                              .scale = scale};
    for (int l = 0; l < res->L; l++) res->sp[l] = sp[l], res->layer_ms[l] = NAN;
    if (!o->on_gpu) snprintf(res->why, sizeof res->why, "no GPU");
    else if (lat_model_measure(&t->key, nt, pl, pat, res->L ? res->layer_ms : NULL, &res->ops_ms,
                               &res->measured_ms, &e))
        snprintf(res->why, sizeof res->why, "%s", e.msg), res->measured_ms = res->ops_ms = NAN;
    printf("latency at batch %d, %s (%s): predicted %.4g ms (target %.4g, dense %.4g)", t->key.batch,
           t->key.precision, t->source, res->predicted_ms, target_ms, res->dense_ms);
    if (isnan(res->measured_ms)) printf(", not measured (%s)\n", res->why);
    else printf(", measured %.4g ms (whole graph; sum of its ops %.4g ms), prediction error %+.1f%%\n",
                res->measured_ms, res->ops_ms, 100.0 * (res->predicted_ms / res->measured_ms - 1.0));
    if (checks)
        printf("latency checks during the search: %d; the last found the table %+.1f%% off the graph, so "
               "the search aimed at a prediction of %.4g ms (scaled prediction %.4g ms)\n", checks,
               100.0 * (1.0 / res->scale - 1.0), target_ms / res->scale, res->predicted_ms * res->scale);
    if (!o->quiet && !isnan(res->measured_ms)) print_layers(t, res);
}

// The objective's members of the summary.
void prune_lat_json(json_writer *j, const lat_table *t, const prune_lat_result *res,
                    double target_ms) {
    json_object_begin(j, "latency");
    json_add_string(j, "table_source", t->source);
    json_add_string(j, "table_gpu", t->key.gpu);
    json_add_int(j, "batch", t->key.batch);
    json_add_string(j, "precision", t->key.precision);
    json_add_string(j, "plan", t->key.plan);
    json_add_number(j, "target_ms", target_ms);
    json_add_number(j, "dense_predicted_ms", lat_dense_ms(t));
    json_add_number(j, "predicted_ms", res ? res->predicted_ms : NAN);
    json_add_number(j, "measured_ms", res ? res->measured_ms : NAN);
    json_add_number(j, "measured_ops_ms", res ? res->ops_ms : NAN);
    json_add_number(j, "prediction_error", res ? res->predicted_ms / res->measured_ms - 1.0 : NAN);
    json_add_int(j, "checks", res ? res->checks : 0);
    json_add_number(j, "check_scale", res ? res->scale : NAN);
    json_add_number(j, "aimed_ms", res ? target_ms / res->scale : NAN);
    json_add_number(j, "scaled_prediction_error",
                    res ? res->predicted_ms * res->scale / res->measured_ms - 1.0 : NAN);
    json_add_string(j, "not_measured", res && res->why[0] ? res->why : NULL);
    json_array_begin(j, "layers");
    for (int l = 0; res && l < res->L; l++) {
        json_object_begin(j, NULL);
        json_add_string(j, "name", t->name[l]);
        json_add_number(j, "sparsity", res->sp[l]);
        json_add_number(j, "table_ms", lat_layer_ms(t, l, res->sp[l]));
        json_add_number(j, "measured_ms", res->layer_ms[l]);
        json_object_end(j);
    }
    json_array_end(j);
    json_object_end(j);
}
