// 1-D k-means for weight codebooks. The values are sorted once; a cluster is
// then a contiguous run between two midpoints, so one Lloyd iteration costs
// k binary searches and k means from prefix sums.
#include "runtime/half.h"
#include "kmeans.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- sorted data ------------------------------------------------------------

typedef struct {
    float *x;      // (n) the values, ascending
    double *pre;   // (n + 1) prefix sums: pre[i] = x[0] + ... + x[i-1]
    size_t n;
    size_t *end;   // (k) one past the last value of each cluster
} km_data;

// Orders floats ascending (for qsort).
static int km_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Orders doubles ascending (for qsort).
static int km_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Sorts a copy of the values and builds the prefix sums.
static int km_data_init(km_data *d, const float *x, size_t n, int k, sc_err *err) {
    d->n = n;
    d->x = malloc((n ? n : 1) * sizeof *d->x);
    d->pre = malloc((n + 1) * sizeof *d->pre);
    d->end = malloc((size_t)k * sizeof *d->end);
    if (!d->x || !d->pre || !d->end) return sc_fail(err, "out of memory (k-means of %zu values)", n);
    memcpy(d->x, x, n * sizeof *x);
    qsort(d->x, n, sizeof *d->x, km_cmp_float);
    d->pre[0] = 0.0;
    for (size_t i = 0; i < n; i++) d->pre[i + 1] = d->pre[i] + d->x[i];
    return 0;
}

// Frees the sorted data.
static void km_data_free(km_data *d) { free(d->x), free(d->pre), free(d->end); }

// First index whose value is greater than v (n when none).
static size_t km_upper(const km_data *d, double v) {
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((double)d->x[mid] <= v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// --- initialisation ---------------------------------------------------------

// k-means++: the first centroid uniformly, each next one with probability
// proportional to the squared distance to the nearest chosen one.
static int km_init_kpp(const km_data *d, int k, gsl_rng *r, double *c, sc_err *err) {
    if (!r) return sc_fail(err, "k-means++ needs a random generator");
    if (d->n - 1 > gsl_rng_max(r) - gsl_rng_min(r))
        return sc_fail(err, "k-means++: too many values for the generator (%zu)", d->n);
    double *dist = malloc(d->n * sizeof *dist);  // (n) squared distance to the nearest centroid
    if (!dist) return sc_fail(err, "out of memory (k-means++ of %zu values)", d->n);
    c[0] = d->x[gsl_rng_uniform_int(r, (unsigned long)d->n)];
    double total = 0.0;
    for (size_t i = 0; i < d->n; i++) total += dist[i] = (d->x[i] - c[0]) * (d->x[i] - c[0]);
    for (int j = 1; j < k; j++) {
        size_t pick = 0;
        if (total > 0.0) {
            double u = gsl_rng_uniform(r) * total, acc = 0.0;
            pick = d->n - 1;
            for (size_t i = 0; i < d->n; i++)
                if ((acc += dist[i]) > u && dist[i] > 0.0) {
                    pick = i;
                    break;
                }
        }
        c[j] = d->x[pick];
        total = 0.0;
        for (size_t i = 0; i < d->n; i++) {
            double e = (d->x[i] - c[j]) * (d->x[i] - c[j]);
            if (e < dist[i]) dist[i] = e;
            total += dist[i];
        }
    }
    free(dist);
    return 0;
}

// Starting centroids by the configured method.
static int km_init(const km_data *d, const kmeans_cfg *cfg, gsl_rng *r, double *c, sc_err *err) {
    const int k = cfg->k;
    const double lo = d->x[0], hi = d->x[d->n - 1];
    if (cfg->init == KM_INIT_KPP) SC_TRY(km_init_kpp(d, k, r, c, err));
    for (int j = 0; cfg->init == KM_INIT_LINEAR && j < k; j++)
        c[j] = lo + (hi - lo) * j / (k - 1);
    for (int j = 0; cfg->init == KM_INIT_DENSITY && j < k; j++)
        c[j] = d->x[(size_t)(((double)j + 0.5) * (double)d->n / k)];
    qsort(c, (size_t)k, sizeof *c, km_cmp_double);
    return 0;
}

// --- Lloyd iterations -------------------------------------------------------

// Assigns the sorted values to the ascending centroids: cluster j ends
// where the values pass the midpoint between centroids j and j+1.
static void km_assign(km_data *d, const double *c, int k) {
    for (int j = 0; j + 1 < k; j++) d->end[j] = km_upper(d, 0.5 * (c[j] + c[j + 1]));
    d->end[k - 1] = d->n;
}

// Start of cluster j.
static size_t km_start(const km_data *d, int j) { return j ? d->end[j - 1] : 0; }

// Moves each non-empty cluster's centroid to its mean; returns how many are empty.
static int km_update(const km_data *d, double *c, int k) {
    int empty = 0;
    for (int j = 0; j < k; j++) {
        size_t s = km_start(d, j), e = d->end[j];
        if (e > s) c[j] = (d->pre[e] - d->pre[s]) / (double)(e - s);
        else empty++;
    }
    return empty;
}

// Re-seeds every empty cluster at the value farthest from its centroid
// (in 1-D one of a cluster's two ends), a different value each time.
static void km_reseed(const km_data *d, double *c, int k) {
    double err[2 * 256];
    size_t at[2 * 256];
    int m = 0;
    for (int j = 0; j < k; j++) {
        size_t s = km_start(d, j), e = d->end[j];
        if (e == s) continue;
        at[m] = s, err[m++] = (d->x[s] - c[j]) * (d->x[s] - c[j]);
        at[m] = e - 1, err[m++] = (d->x[e - 1] - c[j]) * (d->x[e - 1] - c[j]);
    }
    for (int j = 0; j < k; j++) {
        if (d->end[j] > km_start(d, j)) continue;
        int best = -1;
        for (int i = 0; i < m; i++)
            if (err[i] > 0.0 && (best < 0 || err[i] > err[best])) best = i;
        if (best < 0) return;  // every value sits on a centroid: nothing to split
        c[j] = d->x[at[best]];
        for (int i = 0; i < m; i++)
            if (at[i] == at[best]) err[i] = 0.0;
    }
}

// Sum of squared distances of the sorted values to their clusters' centroids.
static double km_sse(km_data *d, const double *c, int k) {
    km_assign(d, c, k);
    double sse = 0.0;
    for (int j = 0; j < k; j++)
        for (size_t i = km_start(d, j); i < d->end[j]; i++) sse += (d->x[i] - c[j]) * (d->x[i] - c[j]);
    return sse;
}

// Lloyd's iterations from one initialisation; returns the iterations run.
static int km_lloyd(km_data *d, const kmeans_cfg *cfg, kmeans_init init, gsl_rng *r, double *c,
                    sc_err *err) {
    const int k = cfg->k;
    kmeans_cfg one = *cfg;
    one.init = init;
    if (km_init(d, &one, r, c, err)) return -1;
    double prev[256];
    int it = 0;
    while (it < cfg->max_iter) {
        memcpy(prev, c, (size_t)k * sizeof *c);
        km_assign(d, c, k);
        if (km_update(d, c, k)) km_reseed(d, c, k);
        qsort(c, (size_t)k, sizeof *c, km_cmp_double);
        it++;
        if (!memcmp(prev, c, (size_t)k * sizeof *c)) break;
    }
    return it;
}

// Runs every start of KM_INIT_BEST and keeps the lowest squared error.
static int km_best(km_data *d, const kmeans_cfg *cfg, gsl_rng *r, double *c, int *iters,
                   double *sse, sc_err *err) {
    double trial[256];
    *sse = INFINITY;
    for (int s = 0; s < 2 + KMEANS_BEST_KPP; s++) {
        kmeans_init init = s == 0 ? KM_INIT_LINEAR : s == 1 ? KM_INIT_DENSITY : KM_INIT_KPP;
        int it = km_lloyd(d, cfg, init, r, trial, err);
        if (it < 0) return -1;
        double e = km_sse(d, trial, cfg->k);
        if (e < *sse) {
            *sse = e, *iters = it;
            memcpy(c, trial, (size_t)cfg->k * sizeof *c);
        }
    }
    return 0;
}

// Clusters n values into k ascending centroids.
int kmeans_1d(const float *x, size_t n, const kmeans_cfg *cfg, gsl_rng *r, double *c,
              int *iters, double *sse, sc_err *err) {
    const int k = cfg->k;
    int it = 0;
    double e = 0.0;
    if (k < 2 || k > 256) return sc_fail(err, "k-means: k = %d, must be 2..256", k);
    if (n == 0) {
        for (int j = 0; j < k; j++) c[j] = 0.0;
    } else {
        km_data d = {0};
        int rc = km_data_init(&d, x, n, k, err);
        if (!rc && cfg->init == KM_INIT_BEST) {
            rc = km_best(&d, cfg, r, c, &it, &e, err);
        } else if (!rc) {
            it = km_lloyd(&d, cfg, cfg->init, r, c, err);
            if (it < 0) rc = -1;
            else e = km_sse(&d, c, k);
        }
        km_data_free(&d);
        SC_TRY(rc);
    }
    if (iters) *iters = it;
    if (sse) *sse = e;
    return 0;
}

// --- one tensor ---------------------------------------------------------------

// Index of the nearest of k ascending centroids (the lower one on a tie).
int kmeans_nearest(const float *c, int k, float v) {
    int lo = 0, hi = k;  // first centroid >= v
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    if (lo == k) return k - 1;
    if (lo == 0) return 0;
    return fabs((double)v - c[lo - 1]) <= fabs((double)c[lo] - v) ? lo - 1 : lo;
}

// Copies the kept weights of a tensor into out; returns their count.
static size_t km_gather(const net *nt, int ti, float *out) {
    const ptensor *p = &nt->tensors[ti];
    const float *w = nt->param + p->offset, *m = nt->mask + p->offset;
    size_t n = 0;
    for (size_t i = 0; i < p->count; i++)
        if (m[i] != 0.0f) out[n++] = w[i];
    return n;
}

// Turns the centroids into the stored codebook (fp16-rounded when asked).
int kmeans_codebook_round(const double *c, const kmeans_cfg *cfg, const char *name, float *cb,
                          sc_err *err) {
    for (int j = 0; j < cfg->k; j++) {
        int over = 0;
        cb[j] = cfg->fp16 ? half_round((float)c[j], &over) : (float)c[j];
        if (over || !isfinite(cb[j]))
            return sc_fail(err, "%s: centroid %g does not fit in fp16 (use --codebook fp32)",
                           name, c[j]);
    }
    return 0;
}

// Clusters one tensor's kept weights and fills t with codebook and indices.
int kmeans_quantize_tensor(const net *nt, int ti, const kmeans_cfg *cfg, gsl_rng *r,
                           quant_tensor *t, int *iters, sc_err *err) {
    const ptensor *p = &nt->tensors[ti];
    if (cfg->row_scale) {
        if (iters) *iters = 0;
        return kmeans_quantize_rows(nt, ti, cfg, r, t, NULL, err);
    }
    SC_TRY(quant_tensor_alloc(t, nt, ti, cfg->k, 0, err));
    float *kept = malloc((p->count ? p->count : 1) * sizeof *kept);  // (count) kept weights
    double c[256];
    if (!kept) return sc_fail(err, "out of memory (%s)", p->name);
    size_t n = km_gather(nt, ti, kept);
    int rc = kmeans_1d(kept, n, cfg, r, c, iters, NULL, err);
    free(kept);
    if (rc) return sc_wrap(err, "%s", p->name);
    SC_TRY(kmeans_codebook_round(c, cfg, p->name, t->codebook, err));
    const float *w = nt->param + p->offset, *m = nt->mask + p->offset;
    for (size_t i = 0; i < p->count; i++)
        t->indices[i] = m[i] != 0.0f ? (uint8_t)kmeans_nearest(t->codebook, cfg->k, w[i]) : 0;
    return 0;
}
