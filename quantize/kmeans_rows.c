// k-means codebooks with a scale per output channel (quantize --row-scale):
// the K centroids of a tensor are shared by the normalised weights w / s_k
// of all its rows, and weight i of row k decodes to fp32(c[idx[i]] * s_k),
// so rows whose magnitudes differ a lot each get K values of their own size
// from one codebook (export's codebook4 format decodes exactly this).
//
// The objective is the relative squared error: each row's squared error
// divided by the row's mean square (its RMS^2), summed over the rows. A
// batch norm after a conv divides each output channel by its own spread,
// so an error counts relative to its channel's size; k-means on w / s_k
// minimises just this, where per-tensor k-means spends its centroids on
// the largest rows and leaves small rows a level or two.
//
// With sensitivities (cfg->net_h, sensitivity-weighted k-means, kmeans.h)
// every squared error counts h_i times: the clustering of w / s_k, the
// least-squares scale (sum h w c / sum h c^2) and the relative error that
// picks the round.
#include "runtime/half.h"
#include "kmeans.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- state ------------------------------------------------------------------

typedef struct {
    const float *w, *m;  // (count) the tensor's weights and mask
    size_t count, per;   // weights, weights per row
    int rows, k, fp16;
    size_t n;            // kept weights
    float *x;            // (n) normalised kept weights w / s_k, tensor order
    float *rms;          // (rows) RMS of each row's kept weights (1 when none): the
                         // relative error's unit
    float *s;            // (rows) scales of the current round
    float *s_new;        // (rows) refit scales
    uint8_t *idx;        // (count) centroid of each weight in this round (0 when pruned)
    float *hk;           // (n) normalised sensitivity of each kept weight, tensor order,
                         // or NULL (unweighted)
    float *h;            // (count) the same by position (0 when pruned), or NULL
    float cb[256];       // (k) this round's codebook, ascending
} kr_state;

// The normalised sensitivities of the kept weights, in kept order and by position.
static int kr_weights_init(kr_state *st, const net *nt, int ti, const kmeans_cfg *cfg,
                           sc_err *err) {
    st->hk = malloc((st->n ? st->n : 1) * sizeof *st->hk);
    st->h = calloc(st->count ? st->count : 1, sizeof *st->h);
    if (!st->hk || !st->h)
        return sc_fail(err, "out of memory (row-scaled k-means of %s)", nt->tensors[ti].name);
    SC_TRY(kmeans_tensor_weights(nt, ti, cfg, st->hk, err));
    for (size_t i = 0, j = 0; i < st->count; i++)
        if (st->m[i] != 0.0f) st->h[i] = st->hk[j++];
    return 0;
}

// Allocates the state of one tensor.
static int kr_init(kr_state *st, const net *nt, int ti, const kmeans_cfg *cfg, sc_err *err) {
    const ptensor *p = &nt->tensors[ti];
    memset(st, 0, sizeof *st);
    st->w = nt->param + p->offset, st->m = nt->mask + p->offset;
    st->count = p->count, st->rows = p->dims[0] > 0 ? p->dims[0] : 1;
    st->per = st->count / (size_t)st->rows;
    st->k = cfg->k, st->fp16 = cfg->fp16;
    for (size_t i = 0; i < st->count; i++) st->n += st->m[i] != 0.0f;
    st->x = malloc((st->n ? st->n : 1) * sizeof *st->x);
    st->s = malloc((size_t)st->rows * sizeof *st->s);
    st->rms = malloc((size_t)st->rows * sizeof *st->rms);
    st->s_new = malloc((size_t)st->rows * sizeof *st->s_new);
    st->idx = calloc(st->count ? st->count : 1, 1);
    if (!st->x || !st->s || !st->rms || !st->s_new || !st->idx)
        return sc_fail(err, "out of memory (row-scaled k-means of %s)", p->name);
    return cfg->net_h ? kr_weights_init(st, nt, ti, cfg, err) : 0;
}

// Frees the state.
static void kr_free(kr_state *st) {
    free(st->x), free(st->s), free(st->rms), free(st->s_new), free(st->idx);
    free(st->hk), free(st->h);
}

// The stored form of scale v: fp16-rounded when asked, at least the
// smallest positive value of the type, at most the largest; `old` when v
// is not a positive finite number.
static float kr_scale_store(double v, int fp16, float old) {
    if (!(isfinite(v) && v > 0.0)) return old;
    const float lo = fp16 ? 0x1p-24f : FLT_MIN, hi = fp16 ? 65504.0f : FLT_MAX;
    float s = v > hi ? hi : (float)v;
    if (fp16) s = half_round(s, NULL);
    return s < lo ? lo : s > hi ? hi : s;
}

// --- one round ----------------------------------------------------------------

// Each row's RMS and the starting scales from it (1 for an empty row).
static void kr_scales_rms(kr_state *st) {
    for (int r = 0; r < st->rows; r++) {
        double ss = 0.0;
        size_t n = 0;
        for (size_t i = (size_t)r * st->per; i < (size_t)(r + 1) * st->per; i++)
            if (st->m[i] != 0.0f) ss += (double)st->w[i] * st->w[i], n++;
        const double rms = n && ss > 0.0 ? sqrt(ss / (double)n) : 1.0;
        st->rms[r] = (float)rms;
        st->s[r] = kr_scale_store(rms, st->fp16, 1.0f);
    }
}

// Normalises the kept weights by the current scales into x.
static void kr_normalise(kr_state *st) {
    size_t n = 0;
    for (size_t i = 0; i < st->count; i++)
        if (st->m[i] != 0.0f) st->x[n++] = st->w[i] / st->s[i / st->per];
}

// Each kept weight's nearest centroid under the scales s.
static void kr_assign(kr_state *st, const float *s) {
    for (size_t i = 0; i < st->count; i++)
        st->idx[i] = st->m[i] != 0.0f
                         ? (uint8_t)kmeans_nearest(st->cb, st->k, st->w[i] / s[i / st->per])
                         : 0;
}

// (Weighted) least-squares scale of every row for the current codebook and
// indices: sum h w c / sum h c^2.
static void kr_refit(kr_state *st) {
    for (int r = 0; r < st->rows; r++) {
        double num = 0.0, den = 0.0;
        for (size_t i = (size_t)r * st->per; i < (size_t)(r + 1) * st->per; i++) {
            if (st->m[i] == 0.0f) continue;
            const double c = st->cb[st->idx[i]], h = st->h ? st->h[i] : 1.0;
            num += h * ((double)st->w[i] * c), den += h * (c * c);
        }
        st->s_new[r] = den > 0.0 ? kr_scale_store(num / den, st->fp16, st->s[r]) : st->s[r];
    }
}

// Relative squared error of the decoded kept weights fp32(c * s) under
// scales s (each row's (h-weighted) error over its RMS^2); *abs gets the
// plain one.
static double kr_error(const kr_state *st, const float *s, double *abs) {
    double rel = 0.0;
    *abs = 0.0;
    for (int r = 0; r < st->rows; r++) {
        double e = 0.0, eh = 0.0;
        for (size_t i = (size_t)r * st->per; i < (size_t)(r + 1) * st->per; i++) {
            if (st->m[i] == 0.0f) continue;
            const float d = st->cb[st->idx[i]] * s[r];
            const double d2 = ((double)st->w[i] - d) * ((double)st->w[i] - d);
            e += d2, eh += (st->h ? st->h[i] : 1.0) * d2;
        }
        *abs += e;
        rel += eh / ((double)st->rms[r] * st->rms[r]);
    }
    return rel;
}

// One round: codebook from the normalised weights, assignment, scale refit,
// reassignment; returns the round's relative squared error (*abs: the
// plain one), negative on failure.
static double kr_round(kr_state *st, const kmeans_cfg *cfg, gsl_rng *r, const char *name,
                       double *abs, sc_err *err) {
    double c[256];
    kr_normalise(st);
    if (kmeans_1d_weighted(st->x, st->hk, st->n, cfg, r, c, NULL, NULL, err))
        return sc_wrap(err, "%s", name);
    if (kmeans_codebook_round(c, cfg, name, st->cb, err)) return -1.0;
    kr_assign(st, st->s);
    kr_refit(st);
    kr_assign(st, st->s_new);
    return kr_error(st, st->s_new, abs);
}

// --- the tensor -------------------------------------------------------------------

// Row-scaled k-means of one tensor; keeps the round with the least error.
int kmeans_quantize_rows(const net *nt, int ti, const kmeans_cfg *cfg, gsl_rng *r,
                         quant_tensor *t, double *sse, sc_err *err) {
    const ptensor *p = &nt->tensors[ti];
    kr_state st;
    SC_TRY(quant_tensor_alloc(t, nt, ti, cfg->k, 0, err));
    SC_TRY(quant_tensor_row_scale_alloc(t, p->dims[0] > 0 ? p->dims[0] : 1, err));
    int rc = kr_init(&st, nt, ti, cfg, err);
    double best = INFINITY, best_abs = 0.0;
    if (rc == 0) kr_scales_rms(&st);
    for (int round = 0; rc == 0 && round < KMEANS_ROW_ROUNDS; round++) {
        double abs = 0.0, e = kr_round(&st, cfg, r, p->name, &abs, err);
        if (e < 0.0) rc = -1;
        else if (e < best) {
            best = e, best_abs = abs;
            memcpy(t->codebook, st.cb, (size_t)cfg->k * sizeof *t->codebook);
            memcpy(t->row_scale, st.s_new, (size_t)st.rows * sizeof *t->row_scale);
            memcpy(t->indices, st.idx, st.count);
        }
        if (rc == 0) memcpy(st.s, st.s_new, (size_t)st.rows * sizeof *st.s);
    }
    kr_free(&st);
    if (rc == 0 && sse) *sse = best_abs;
    return rc;
}
