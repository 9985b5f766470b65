// The latency table of prune's latency objective: interpolation, prediction,
// JSON I/O, the key check and the FLOP model (prune/latency.h).
#include "prune/latency.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/atomic.h"
#include "runtime/json.h"
#include "runtime/ops.h"

// Allocates the arrays of an L x G table.
int lat_table_alloc(lat_table *t, int L, int G, const double *grid, sc_err *err) {
    memset(t, 0, sizeof *t);
    if (L < 1 || G < 2 || G > LAT_MAX_GRID)
        return sc_fail(err, "latency table of %d layers and %d grid points", L, G);
    t->L = L, t->G = G;
    memcpy(t->grid, grid, (size_t)G * sizeof *grid);
    t->ms = calloc((size_t)L * G, sizeof *t->ms);
    t->name = calloc((size_t)L, sizeof *t->name);
    if (!t->ms || !t->name) {
        lat_table_free(t);
        return sc_fail(err, "out of memory");
    }
    return 0;
}

// Frees the arrays.
void lat_table_free(lat_table *t) {
    free(t->ms);
    free(t->name);
    t->ms = NULL;
    t->name = NULL;
}

// Index g of the grid segment [grid[g], grid[g+1]] that holds s (clamped).
static int segment(const lat_table *t, double s) {
    int g = 0;
    while (g + 2 < t->G && s >= t->grid[g + 1]) g++;
    return g;
}

// Piecewise-linear interpolation, flat beyond both ends.
double lat_layer_ms(const lat_table *t, int l, double s) {
    const double *m = t->ms + (size_t)l * t->G;
    if (s <= t->grid[0]) return m[0];
    if (s >= t->grid[t->G - 1]) return m[t->G - 1];
    int g = segment(t, s);
    double u = (s - t->grid[g]) / (t->grid[g + 1] - t->grid[g]);
    return m[g] + u * (m[g + 1] - m[g]);
}

// Time saved from s to the end of the grid, per unit sparsity.
double lat_layer_gain(const lat_table *t, int l, double s) {
    double end = t->grid[t->G - 1];
    if (s >= end) return 0.0;
    s = fmax(s, 0.0);
    return fmax(0.0, (lat_layer_ms(t, l, s) - lat_layer_ms(t, l, end)) / (end - s));
}

// Sum over the layers plus the rest.
double lat_predict(const lat_table *t, const double *sp) {
    double ms = t->rest_ms;
    for (int l = 0; l < t->L; l++) ms += lat_layer_ms(t, l, sp[l]);
    return ms;
}

// Scales each grid point's layer times to the whole graph measured there.
void lat_table_calibrate(lat_table *t, const double *graph_ms) {
    for (int g = 0; g < t->G; g++) {
        double sum = 0.0;
        for (int l = 0; l < t->L; l++) sum += t->ms[(size_t)l * t->G + g];
        const double r = sum > 0.0 && graph_ms[g] > 0.0 ? (graph_ms[g] - t->rest_ms) / sum : NAN;
        if (!(r > 0.0)) continue;  // NAN too
        for (int l = 0; l < t->L; l++) t->ms[(size_t)l * t->G + g] *= r;
    }
}

// The prediction at sparsity 0 everywhere.
double lat_dense_ms(const lat_table *t) {
    double ms = t->rest_ms;
    for (int l = 0; l < t->L; l++) ms += lat_layer_ms(t, l, 0.0);
    return ms;
}

// --- JSON ---------------------------------------------------------------------

// Writes the key, the grid, the rest and one object per layer.
int lat_table_save(const lat_table *t, const char *path, sc_err *err) {
    json_writer j;
    json_init(&j);
    json_object_begin(&j, NULL);
    json_add_string(&j, "gpu", t->key.gpu);
    json_add_int(&j, "compute_capability", t->key.cc);
    json_add_string(&j, "arch", t->key.arch);
    json_add_int(&j, "batch", t->key.batch);
    json_add_string(&j, "precision", t->key.precision);
    json_add_string(&j, "plan", t->key.plan);
    json_add_string(&j, "build", t->key.build);
    json_add_string(&j, "pattern", t->key.pattern);
    json_add_string(&j, "source", t->source);
    json_add_number(&j, "rest_ms", t->rest_ms);
    json_array_begin(&j, "grid");
    for (int g = 0; g < t->G; g++) json_add_number(&j, NULL, t->grid[g]);
    json_array_end(&j);
    json_array_begin(&j, "layers");
    for (int l = 0; l < t->L; l++) json_add_string(&j, NULL, t->name[l]);
    json_array_end(&j);
    json_array_begin(&j, "ms");
    for (int l = 0; l < t->L; l++) {
        json_array_begin(&j, NULL);
        for (int g = 0; g < t->G; g++) json_add_number(&j, NULL, t->ms[(size_t)l * t->G + g]);
        json_array_end(&j);
    }
    json_array_end(&j);
    json_object_end(&j);
    int rc = json_write_file(&j, path, err);
    json_free(&j);
    return rc ? sc_wrap(err, "latency table %s", path) : 0;
}

// Skips white space.
static const char *ws(const char *p) {
    while (*p && isspace((unsigned char)*p)) p++;
    return p;
}

// Reads up to max numbers of a flat array at p into out; returns the count
// (-1 when malformed) and sets *end past the ']'.
static int read_numbers(const char *p, double *out, int max, const char **end) {
    int n = 0;
    p = ws(p);
    if (*p != '[') return -1;
    p = ws(p + 1);
    while (*p != ']') {
        char *e;
        double v = strtod(p, &e);
        if (e == p || n == max || !isfinite(v)) return -1;
        out[n++] = v;
        p = ws(e);
        if (*p == ',') p = ws(p + 1);
        else if (*p != ']') return -1;
    }
    *end = p + 1;
    return n;
}

// Reads up to max plain strings (no escapes) of an array at p into out.
static int read_names(const char *p, char (*out)[48], int max) {
    int n = 0;
    p = ws(p);
    if (*p != '[') return -1;
    p = ws(p + 1);
    while (*p != ']') {
        const char *q = p + 1, *e = *p == '"' ? strchr(q, '"') : NULL;
        if (!e || n == max || e - q >= 48) return -1;
        memcpy(out[n], q, (size_t)(e - q));
        out[n++][e - q] = 0;
        p = ws(e + 1);
        if (*p == ',') p = ws(p + 1);
        else if (*p != ']') return -1;
    }
    return n;
}

// Counts the inner arrays of an array of arrays (the layers of "ms").
static int count_rows(const char *p) {
    int n = 0, depth = 0;
    for (; *p; p++) {
        if (*p == '[' && ++depth == 2) n++;
        if (*p == ']' && --depth == 0) return n;
    }
    return -1;
}

// Reads the key, source and rest of the table text.
static int parse_head(lat_table *t, const char *s) {
    double cc, batch;
    if (json_get_string(s, "gpu", t->key.gpu, sizeof t->key.gpu) ||
        json_get_number(s, "compute_capability", &cc) ||
        json_get_string(s, "arch", t->key.arch, sizeof t->key.arch) ||
        json_get_number(s, "batch", &batch) ||
        json_get_string(s, "precision", t->key.precision, sizeof t->key.precision) ||
        json_get_number(s, "rest_ms", &t->rest_ms) || !(t->rest_ms >= 0))
        return -1;
    if (json_get_string(s, "source", t->source, sizeof t->source)) strcpy(t->source, "file");
    if (json_get_string(s, "plan", t->key.plan, sizeof t->key.plan))
        snprintf(t->key.plan, sizeof t->key.plan, "%s", LAT_PLAN_LAYER);  // written before the engine was timed
    if (json_get_string(s, "build", t->key.build, sizeof t->key.build))
        snprintf(t->key.build, sizeof t->key.build, "unknown");  // written before builds were recorded
    if (json_get_string(s, "pattern", t->key.pattern, sizeof t->key.pattern))
        snprintf(t->key.pattern, sizeof t->key.pattern, "unknown");  // written before patterns were recorded
    t->key.cc = (int)cc, t->key.batch = (int)batch;
    return t->key.batch >= 1 ? 0 : -1;
}

// Parses the text of a table file into t (allocated here).
static int parse_table(lat_table *t, const char *s, sc_err *err) {
    double grid[LAT_MAX_GRID];
    lat_table h = {0};
    const char *g = json_find(s, "grid"), *ms = json_find(s, "ms"), *nm = json_find(s, "layers"), *e;
    int G = g ? read_numbers(g, grid, LAT_MAX_GRID, &e) : -1, L = ms ? count_rows(ms) : -1;
    if (parse_head(&h, s) || G < 2 || L < 1 || !nm) return sc_fail(err, "malformed");
    for (int k = 0; k < G; k++)
        if (grid[k] < 0 || grid[k] >= 1 || (k && grid[k] <= grid[k - 1]) || (!k && grid[k] != 0))
            return sc_fail(err, "grid not increasing from 0 below 1");
    SC_TRY(lat_table_alloc(t, L, G, grid, err));
    t->key = h.key, t->rest_ms = h.rest_ms;
    memcpy(t->source, h.source, sizeof t->source);
    if (read_names(nm, t->name, L) != L) return sc_fail(err, "not one name per layer");
    const char *p = ws(ms) + 1;
    for (int l = 0; l < L; l++) {
        if (read_numbers(p, t->ms + (size_t)l * G, G, &e) != G) return sc_fail(err, "layer %d: not %d times", l, G);
        for (int k = 0; k < G; k++)
            if (t->ms[(size_t)l * G + k] < 0) return sc_fail(err, "layer %d: negative time", l);
        p = ws(e);
        if (*p == ',') p++;
    }
    return 0;
}

// Reads the file whole, then parses it.
int lat_table_load(lat_table *t, const char *path, sc_err *err) {
    memset(t, 0, sizeof *t);
    FILE *f = sc_input_fopen(path, "latency table", err);
    if (!f) return -1;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (n >= 0 && n < (64L << 20) && !fseek(f, 0, SEEK_SET) && (s = malloc((size_t)n + 1)))
        s[fread(s, 1, (size_t)n, f)] = 0;
    fclose(f);
    if (!s) return sc_fail(err, "cannot read the latency table %s", path);
    int rc = parse_table(t, s, err);
    free(s);
    if (rc) {
        lat_table_free(t);
        return sc_wrap(err, "latency table %s", path);
    }
    return 0;
}

// --- the key, the FLOP model, targets ---------------------------------------------

// fp16: the mixed engine; fp32 (and anything else): the per-layer plan.
const char *lat_plan_for(const char *precision) {
    return strcmp(precision, "fp16") ? LAT_PLAN_LAYER : LAT_PLAN_MIXED;
}

// "mixed fp16 engine" or "per-layer plan (<precision>)".
void lat_plan_describe(const lat_key *key, char *buf, size_t len) {
    if (!strcmp(key->plan, LAT_PLAN_MIXED)) snprintf(buf, len, "mixed fp16 engine");
    else snprintf(buf, len, "per-layer plan (%s)", key->precision);
}

// Compares the key and the layer names.
int lat_table_fits(const lat_table *t, const lat_key *key, const net *nt,
                   const prune_layers *pl, char *why, size_t len) {
    const lat_key *a = &t->key;
    if (strcmp(a->gpu, key->gpu) || a->cc != key->cc)
        snprintf(why, len, "made on %s (cc %d), this is %s (cc %d)", a->gpu, a->cc, key->gpu, key->cc);
    else if (strcmp(a->arch, key->arch))
        snprintf(why, len, "made for %s, the net is %s", a->arch, key->arch);
    else if (a->batch != key->batch)
        snprintf(why, len, "made at batch %d, asked %d", a->batch, key->batch);
    else if (strcmp(a->precision, key->precision))
        snprintf(why, len, "made in %s, asked %s", a->precision, key->precision);
    else if (strcmp(a->plan, key->plan))
        snprintf(why, len, "timed the %s plan, asked the %s plan", a->plan, key->plan);
    else if (strcmp(a->gpu, "none") && strcmp(a->build, key->build))  // kernels change between builds
        snprintf(why, len, "timed by build %s, this is %s", a->build, key->build);
    else if (strcmp(a->pattern, key->pattern))  // blocks and unstructured masks run on other kernels
        snprintf(why, len, "timed on pattern %s, the run prunes on %s", a->pattern, key->pattern);
    else if (t->L != pl->n)
        snprintf(why, len, "%d layers, the net prunes %d", t->L, pl->n);
    else {
        for (int l = 0; l < pl->n; l++)
            if (strcmp(t->name[l], nt->tensors[pl->tensor[l]].name)) {
                snprintf(why, len, "layer %d is %s, the net's %s", l, t->name[l],
                         nt->tensors[pl->tensor[l]].name);
                return 0;
            }
        return 1;
    }
    return 0;
}

// Copies the weight tensor names.
void lat_table_names(lat_table *t, const net *nt, const prune_layers *pl) {
    for (int l = 0; l < pl->n && l < t->L; l++)
        snprintf(t->name[l], sizeof t->name[l], "%s", nt->tensors[pl->tensor[l]].name);
}

// Multiply-accumulates of the layer owning tensor ti (0 when it computes none).
static double layer_macs(const net *nt, int ti) {
    const layer *L = &nt->layers[nt->tensors[ti].layer];
    return op_of(L->kind)->macs ? op_of(L->kind)->macs(L) : 0.0;
}

// Layer times from MACs x (1 - s) with a floor; the rest from the other MACs.
int lat_table_flops(lat_table *t, const lat_key *key, const net *nt, const prune_layers *pl,
                    sc_err *err) {
    const double grid[] = LAT_GRID_DEFAULT;
    SC_TRY(lat_table_alloc(t, pl->n, LAT_GRID_N, grid, err));
    t->key = *key;
    snprintf(t->source, sizeof t->source, "FLOP model (no GPU)");
    lat_table_names(t, nt, pl);
    double pruned = 0.0;
    for (int l = 0; l < pl->n; l++) {
        double dense = layer_macs(nt, pl->tensor[l]) * key->batch / LAT_FLOP_RATE;
        pruned += layer_macs(nt, pl->tensor[l]);
        for (int g = 0; g < t->G; g++)
            t->ms[(size_t)l * t->G + g] = dense * fmax(LAT_FLOP_FLOOR, 1.0 - grid[g]);
    }
    t->rest_ms = fmax(0.0, net_macs(nt) - pruned) * key->batch / LAT_FLOP_RATE;
    return 0;
}

// "X" (ms) or "Nx" (speedup over the table's dense network).
int lat_parse_target(const char *text, const lat_table *t, double *ms, sc_err *err) {
    char *e;
    double v = strtod(text, &e);
    int speedup = *e == 'x' || *e == 'X';
    if (e == text || (speedup ? e[1] != 0 : *e != 0) || !(v > 0) || !isfinite(v) ||
        (speedup && v < 1.0))
        return sc_fail(err, "latency target %s: want milliseconds (e.g. 0.3) or a speedup >= 1 (e.g. 2x)",
                       text);
    *ms = speedup ? lat_dense_ms(t) / v : v;
    return 0;
}
