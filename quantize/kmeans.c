// 1-D k-means for weight codebooks. The values are sorted once; a cluster is
// then a contiguous run between two midpoints, so one Lloyd iteration costs
// k binary searches and k means from prefix sums. With a weight per value
// (sensitivity-weighted k-means, kmeans.h) the prefix sums are of h x and h
// and the means are weighted; without one every h is 1, and the arithmetic
// is that of plain k-means exactly (1 * x is x, sums of ones are exact).
#include "runtime/half.h"
#include "kmeans.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- sorted data ------------------------------------------------------------

typedef struct {
    float *x;      // (n) the values, ascending
    float *h;      // (n) their weights, in the same order (all 1 when unweighted)
    double *pre;   // (n + 1) prefix sums of h x: pre[i] = h[0] x[0] + ... + h[i-1] x[i-1]
    double *hpre;  // (n + 1) prefix sums of h (hpre[i] = i when unweighted)
    double *xpre;  // (n + 1) prefix sums of x (a cluster whose h sum to 0 takes its plain
                   // mean); the same array as pre when unweighted
    size_t n;
    int weighted;  // 0: every h is 1
    size_t *end;   // (k) one past the last value of each cluster
} km_data;

typedef struct {
    float x, h;
} km_pair;

// Orders floats ascending (for qsort).
static int km_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Orders (value, weight) pairs by value, then weight (for qsort).
static int km_cmp_pair(const void *a, const void *b) {
    const km_pair *p = a, *q = b;
    int c = (p->x > q->x) - (p->x < q->x);
    return c ? c : (p->h > q->h) - (p->h < q->h);
}

// Orders doubles ascending (for qsort).
static int km_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Sorts a copy of the values with their weights (h NULL: all 1).
static int km_data_sort(km_data *d, const float *x, const float *h) {
    if (!h) {
        memcpy(d->x, x, d->n * sizeof *x);
        qsort(d->x, d->n, sizeof *d->x, km_cmp_float);
        for (size_t i = 0; i < d->n; i++) d->h[i] = 1.0f;
        return 0;
    }
    km_pair *p = malloc((d->n ? d->n : 1) * sizeof *p);  // (n) values with their weights
    if (!p) return -1;
    for (size_t i = 0; i < d->n; i++) p[i].x = x[i], p[i].h = h[i];
    qsort(p, d->n, sizeof *p, km_cmp_pair);
    for (size_t i = 0; i < d->n; i++) d->x[i] = p[i].x, d->h[i] = p[i].h;
    free(p);
    return 0;
}

// Sorts a copy of the values (and weights) and builds the prefix sums.
static int km_data_init(km_data *d, const float *x, const float *h, size_t n, int k, sc_err *err) {
    d->n = n;
    d->weighted = h != NULL;
    d->x = malloc((n ? n : 1) * sizeof *d->x);
    d->h = malloc((n ? n : 1) * sizeof *d->h);
    d->pre = malloc((n + 1) * sizeof *d->pre);
    d->hpre = malloc((n + 1) * sizeof *d->hpre);
    d->xpre = h ? malloc((n + 1) * sizeof *d->xpre) : d->pre;
    d->end = malloc((size_t)k * sizeof *d->end);
    if (!d->x || !d->h || !d->pre || !d->hpre || !d->xpre || !d->end || km_data_sort(d, x, h))
        return sc_fail(err, "out of memory (k-means of %zu values)", n);
    d->pre[0] = d->hpre[0] = d->xpre[0] = 0.0;
    for (size_t i = 0; i < n; i++) {
        d->pre[i + 1] = d->pre[i] + (double)d->h[i] * d->x[i];
        d->hpre[i + 1] = d->hpre[i] + d->h[i];
        if (h) d->xpre[i + 1] = d->xpre[i] + d->x[i];
    }
    return 0;
}

// Frees the sorted data.
static void km_data_free(km_data *d) {
    if (d->xpre != d->pre) free(d->xpre);
    free(d->x), free(d->h), free(d->pre), free(d->hpre), free(d->end);
}

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

// First index i whose cumulative weight hpre[i + 1] exceeds u (n - 1 when
// none): the value at weighted position u; a zero weight is never chosen
// for u below the total.
static size_t km_at_weight(const km_data *d, double u) {
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->hpre[mid + 1] <= u) lo = mid + 1;
        else hi = mid;
    }
    return lo < d->n ? lo : d->n - 1;
}

// --- initialisation ---------------------------------------------------------

// k-means++: the first centroid uniformly (weighted: with probability
// proportional to h), each next one with probability proportional to h
// times the squared distance to the nearest chosen one.
static int km_init_kpp(const km_data *d, int k, gsl_rng *r, double *c, sc_err *err) {
    if (!r) return sc_fail(err, "k-means++ needs a random generator");
    if (d->n - 1 > gsl_rng_max(r) - gsl_rng_min(r))
        return sc_fail(err, "k-means++: too many values for the generator (%zu)", d->n);
    double *dist = malloc(d->n * sizeof *dist);  // (n) squared distance to the nearest centroid
    if (!dist) return sc_fail(err, "out of memory (k-means++ of %zu values)", d->n);
    c[0] = d->weighted ? d->x[km_at_weight(d, gsl_rng_uniform(r) * d->hpre[d->n])]
                       : d->x[gsl_rng_uniform_int(r, (unsigned long)d->n)];
    double total = 0.0;
    for (size_t i = 0; i < d->n; i++) {
        dist[i] = (d->x[i] - c[0]) * (d->x[i] - c[0]);
        total += (double)d->h[i] * dist[i];
    }
    for (int j = 1; j < k; j++) {
        size_t pick = 0;
        if (total > 0.0) {
            double u = gsl_rng_uniform(r) * total, acc = 0.0;
            pick = d->n - 1;
            for (size_t i = 0; i < d->n; i++) {
                const double wd = (double)d->h[i] * dist[i];
                if ((acc += wd) > u && wd > 0.0) {
                    pick = i;
                    break;
                }
            }
        }
        c[j] = d->x[pick];
        total = 0.0;
        for (size_t i = 0; i < d->n; i++) {
            double e = (d->x[i] - c[j]) * (d->x[i] - c[j]);
            if (e < dist[i]) dist[i] = e;
            total += (double)d->h[i] * dist[i];
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
    // (weighted) quantiles; unweighted, value (j + 0.5) n / k rounded down
    for (int j = 0; cfg->init == KM_INIT_DENSITY && j < k; j++)
        c[j] = d->x[km_at_weight(d, ((double)j + 0.5) * d->hpre[d->n] / k)];
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

// Moves each non-empty cluster's centroid to its (weighted) mean, the plain
// mean when its weights sum to 0; returns how many clusters are empty.
static int km_update(const km_data *d, double *c, int k) {
    int empty = 0;
    for (int j = 0; j < k; j++) {
        size_t s = km_start(d, j), e = d->end[j];
        const double hs = d->hpre[e] - d->hpre[s];
        if (e == s) empty++;
        else if (hs > 0.0) c[j] = (d->pre[e] - d->pre[s]) / hs;
        else c[j] = (d->xpre[e] - d->xpre[s]) / (double)(e - s);
    }
    return empty;
}

// Re-seeds every empty cluster at the value farthest from its centroid
// (in 1-D one of a cluster's two ends), a different value each time.
static void km_reseed_ends(const km_data *d, double *c, int k) {
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

// Weighted: re-seeds every empty cluster at the value with the largest
// h D^2 (D: the distance to its cluster's centroid; not necessarily at an
// end), skipping the values already taken in this call. Only empty
// clusters' centroids change, and they have no members.
static void km_reseed_weighted(const km_data *d, double *c, int k) {
    double taken[256];
    int ntaken = 0;
    for (int j = 0; j < k; j++) {
        if (d->end[j] > km_start(d, j)) continue;
        size_t best = d->n;
        double bv = 0.0;
        for (int q = 0; q < k; q++)
            for (size_t i = km_start(d, q); i < d->end[q]; i++) {
                const double v = (double)d->h[i] * ((d->x[i] - c[q]) * (d->x[i] - c[q]));
                int used = 0;
                for (int t = 0; v > bv && t < ntaken; t++) used |= taken[t] == d->x[i];
                if (v > bv && !used) bv = v, best = i;
            }
        if (best == d->n) return;  // nothing left off its centroid: nothing to split
        c[j] = taken[ntaken++] = d->x[best];
    }
}

// Re-seeds the empty clusters (weighted or not).
static void km_reseed(const km_data *d, double *c, int k) {
    if (d->weighted) km_reseed_weighted(d, c, k);
    else km_reseed_ends(d, c, k);
}

// Sum of (weighted) squared distances of the sorted values to their
// clusters' centroids.
static double km_sse(km_data *d, const double *c, int k) {
    km_assign(d, c, k);
    double sse = 0.0;
    for (int j = 0; j < k; j++)
        for (size_t i = km_start(d, j); i < d->end[j]; i++)
            sse += (double)d->h[i] * ((d->x[i] - c[j]) * (d->x[i] - c[j]));
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

// Checks the weights (>= 0, finite); returns h, or NULL when they are all
// equal (plain k-means, bit for bit), or sets *bad on a bad weight.
static const float *km_weights_check(const float *h, size_t n, int *bad, sc_err *err) {
    *bad = 0;
    if (!h) return NULL;
    int equal = 1;
    for (size_t i = 0; i < n; i++) {
        if (!(h[i] >= 0.0f && isfinite(h[i]))) {
            *bad = 1;
            sc_fail(err, "k-means: weight %g of value %zu is negative or not finite", h[i], i);
            return NULL;
        }
        equal &= h[i] == h[0];
    }
    return equal ? NULL : h;
}

// Clusters n values (weights h, or NULL) into k ascending centroids.
int kmeans_1d_weighted(const float *x, const float *h, size_t n, const kmeans_cfg *cfg, gsl_rng *r,
                       double *c, int *iters, double *sse, sc_err *err) {
    const int k = cfg->k;
    int it = 0, bad;
    double e = 0.0;
    if (k < 2 || k > 256) return sc_fail(err, "k-means: k = %d, must be 2..256", k);
    const double h_all = h && n ? h[0] : 1.0;  // the weight of every value when all are equal
    h = km_weights_check(h, n, &bad, err);
    if (bad) return -1;
    if (n == 0) {
        for (int j = 0; j < k; j++) c[j] = 0.0;
    } else {
        km_data d = {0};
        int rc = km_data_init(&d, x, h, n, k, err);
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
    if (sse) *sse = h ? e : e * h_all;
    return 0;
}

// Clusters n values into k ascending centroids (every weight 1).
int kmeans_1d(const float *x, size_t n, const kmeans_cfg *cfg, gsl_rng *r, double *c,
              int *iters, double *sse, sc_err *err) {
    return kmeans_1d_weighted(x, NULL, n, cfg, r, c, iters, sse, err);
}

// Divides the sensitivities by their mean and lifts them to the floor.
int kmeans_weights_normalise(float *h, size_t n, const char *name, sc_err *err) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!(h[i] >= 0.0f && isfinite(h[i])))
            return sc_fail(err, "%s: sensitivity %g of kept weight %zu is negative or not finite",
                           name, h[i], i);
        sum += h[i];
    }
    const double mean = n ? sum / (double)n : 0.0;
    for (size_t i = 0; i < n; i++) {
        const float v = mean > 0.0 && isfinite(mean) ? (float)(h[i] / mean) : 1.0f;
        h[i] = v > KMEANS_H_FLOOR ? v : KMEANS_H_FLOOR;
    }
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

// Copies the entries of src ((nparam) floats, indexed like nt->param) at
// tensor ti's kept weights into out; returns their count.
static size_t km_gather(const net *nt, int ti, const float *src, float *out) {
    const ptensor *p = &nt->tensors[ti];
    const float *w = src + p->offset, *m = nt->mask + p->offset;
    size_t n = 0;
    for (size_t i = 0; i < p->count; i++)
        if (m[i] != 0.0f) out[n++] = w[i];
    return n;
}

// The normalised sensitivities of a tensor's kept weights.
int kmeans_tensor_weights(const net *nt, int ti, const kmeans_cfg *cfg, float *h, sc_err *err) {
    if (!cfg->net_h)
        return sc_fail(err, "%s: no sensitivities to weight k-means by", nt->tensors[ti].name);
    size_t n = km_gather(nt, ti, cfg->net_h, h);
    return kmeans_weights_normalise(h, n, nt->tensors[ti].name, err);
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
    float *h = cfg->net_h ? malloc((p->count ? p->count : 1) * sizeof *h) : NULL;  // their h
    double c[256];
    if (!kept || (cfg->net_h && !h)) {
        free(kept), free(h);
        return sc_fail(err, "out of memory (%s)", p->name);
    }
    size_t n = km_gather(nt, ti, nt->param, kept);
    int rc = h ? kmeans_tensor_weights(nt, ti, cfg, h, err) : 0;  // its message names p
    if (!rc && kmeans_1d_weighted(kept, h, n, cfg, r, c, iters, NULL, err))
        rc = sc_wrap(err, "%s", p->name);
    free(kept), free(h);
    SC_TRY(rc);
    SC_TRY(kmeans_codebook_round(c, cfg, p->name, t->codebook, err));
    const float *w = nt->param + p->offset, *m = nt->mask + p->offset;
    for (size_t i = 0; i < p->count; i++)
        t->indices[i] = m[i] != 0.0f ? (uint8_t)kmeans_nearest(t->codebook, cfg->k, w[i]) : 0;
    return 0;
}
