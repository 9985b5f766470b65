// Linear fixed-point quantization with histogram-chosen saturation levels.
#include "linear.h"

#include <math.h>
#include <stdlib.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_histogram.h>

// --- integer range, scale, zero point -------------------------------------------

// Smallest and largest integer of the configuration.
void linear_qrange(const linear_cfg *c, int *qmin, int *qmax) {
    const int half = 1 << (c->bits - 1);
    *qmax = half - 1;
    *qmin = c->symmetric ? -(half - 1) : -half;
}

// Scale and zero point for the range [lo, hi].
void linear_params(const linear_cfg *c, double lo, double hi, float *scale, int32_t *zp) {
    int qmin, qmax;
    linear_qrange(c, &qmin, &qmax);
    double s = c->symmetric ? fmax(fabs(lo), fabs(hi)) / qmax : (hi - lo) / (qmax - qmin);
    *scale = (float)s;
    *zp = 0;
    if (!(*scale > 0.0f) || !isfinite(*scale)) {  // empty range: every value is 0
        *scale = 1.0f;
        return;
    }
    if (c->symmetric) return;
    double z = rint(qmin - lo / *scale);
    *zp = (int32_t)fmin(qmax, fmax(qmin, z));
}

// The integer for x, clamped to the range; *sat = 1 when it had to be.
int16_t linear_encode(const linear_cfg *c, float scale, int32_t zp, float x, int *sat) {
    int qmin, qmax;
    linear_qrange(c, &qmin, &qmax);
    double v = rint((double)x / scale) + zp;
    *sat = v < qmin || v > qmax;
    return (int16_t)fmin(qmax, fmax(qmin, v));
}

// --- histogram ----------------------------------------------------------------

typedef struct {
    int bins;
    double lo, width;   // first edge and bin width
    double *n;          // (bins) counts
    double *m;          // (bins) bin centres
} lq_hist;

// Fills a GSL histogram of x (or |x| when absolute) over [lo, hi] (hi is
// nudged up: GSL's upper edge is exclusive) and copies counts and centres.
static int lq_hist_build(const float *x, size_t n, int absolute, double lo, double hi, int bins,
                         lq_hist *out, sc_err *err) {
    hi += fmax(fabs(hi), fabs(lo)) * 1e-6 + 1e-30;
    gsl_histogram *h = gsl_histogram_alloc((size_t)bins);
    if (!h) return sc_fail(err, "GSL: cannot allocate a histogram of %d bins", bins);
    int rc = gsl_histogram_set_ranges_uniform(h, lo, hi);
    for (size_t i = 0; rc == GSL_SUCCESS && i < n; i++)
        rc = gsl_histogram_increment(h, absolute ? fabs((double)x[i]) : (double)x[i]);
    out->n = malloc((size_t)bins * sizeof *out->n);
    out->m = malloc((size_t)bins * sizeof *out->m);
    if (rc == GSL_SUCCESS && out->n && out->m) {
        out->bins = bins, out->lo = lo, out->width = (hi - lo) / bins;
        for (int j = 0; j < bins; j++) {
            double a, b;
            rc = gsl_histogram_get_range(h, (size_t)j, &a, &b);
            if (rc != GSL_SUCCESS) break;
            out->n[j] = gsl_histogram_get(h, (size_t)j);
            out->m[j] = 0.5 * (a + b);
        }
    }
    gsl_histogram_free(h);
    if (!out->n || !out->m) return sc_fail(err, "out of memory (histogram)");
    if (rc != GSL_SUCCESS) return sc_fail(err, "GSL histogram failed: %s", gsl_strerror(rc));
    return 0;
}

// Frees the histogram copy.
static void lq_hist_free(lq_hist *h) { free(h->n), free(h->m); }

// Lower edge of bin j.
static double lq_edge(const lq_hist *h, int j) { return h->lo + h->width * j; }

// --- symmetric: one clip level for |x| ----------------------------------------

// Clip of |x| minimising the expected squared error: step^2/12 for every
// value inside, the squared excess for every value beyond (suffix sums).
static double lq_clip_mse(const lq_hist *h, int qmax, double amax) {
    double s0 = 0, s1 = 0, s2 = 0, total = 0, best = amax, best_err = INFINITY;
    for (int j = 0; j < h->bins; j++) total += h->n[j];
    for (int i = h->bins - 1; i >= 0; i--) {  // clip at the upper edge of bin i
        double t = fmin(lq_edge(h, i + 1), amax), step = t / qmax;
        double e = (total - s0) * step * step / 12.0 + (s2 - 2.0 * t * s1 + t * t * s0);
        if (e < best_err) best_err = e, best = t;
        s0 += h->n[i], s1 += h->n[i] * h->m[i], s2 += h->n[i] * h->m[i] * h->m[i];
    }
    return best;
}

// Upper edge of the first bin where the cumulative count reaches `want`.
static double lq_quantile(const lq_hist *h, double want) {
    double cum = 0;
    for (int j = 0; j < h->bins; j++)
        if ((cum += h->n[j]) >= want) return lq_edge(h, j + 1);
    return lq_edge(h, h->bins);
}

// Symmetric range [-t, t] from a histogram of |x|.
static int lq_range_sym(const float *x, size_t n, const linear_cfg *c, double amax, double *t,
                        sc_err *err) {
    lq_hist h = {0};
    int rc = lq_hist_build(x, n, 1, 0.0, amax, c->bins, &h, err);
    int qmin, qmax;
    linear_qrange(c, &qmin, &qmax);
    if (!rc && c->clip == LQ_CLIP_MSE) *t = lq_clip_mse(&h, qmax, amax);
    if (!rc && c->clip == LQ_CLIP_PERCENTILE)
        *t = fmin(amax, lq_quantile(&h, c->percentile / 100.0 * (double)n));
    lq_hist_free(&h);
    return rc;
}

// --- asymmetric: two clip levels ----------------------------------------------

// Expected squared error of the range from the lower edge of bin a to the
// upper edge of bin b, with prefix sums p0/p1/p2 (bins < j) of the counts.
static double lq_err_ab(const lq_hist *h, const double *p0, const double *p1, const double *p2,
                        int a, int b, double span, double *lo, double *hi, double xlo, double xhi) {
    const int B = h->bins;
    *lo = fmax(lq_edge(h, a), xlo), *hi = fmin(lq_edge(h, b + 1), xhi);
    double step = (*hi - *lo) / span, in = p0[b + 1] - p0[a];
    double below = p2[a] - 2.0 * *lo * p1[a] + *lo * *lo * p0[a];
    double a0 = p0[B] - p0[b + 1], a1 = p1[B] - p1[b + 1], a2 = p2[B] - p2[b + 1];
    double above = a2 - 2.0 * *hi * a1 + *hi * *hi * a0;
    return in * step * step / 12.0 + below + above;
}

// Alternately moves the upper and the lower level to the best bin edge
// (each holding 0 in range), a few rounds.
static int lq_range_asym_mse(const lq_hist *h, double span, double xlo, double xhi, double *lo,
                             double *hi, sc_err *err) {
    const int B = h->bins;
    double *p = malloc((size_t)(B + 1) * 3 * sizeof *p);  // (3, B + 1) prefix sums
    if (!p) return sc_fail(err, "out of memory (histogram sums)");
    double *p0 = p, *p1 = p + B + 1, *p2 = p + 2 * (B + 1);
    p0[0] = p1[0] = p2[0] = 0;
    for (int j = 0; j < B; j++) {
        p0[j + 1] = p0[j] + h->n[j];
        p1[j + 1] = p1[j] + h->n[j] * h->m[j];
        p2[j + 1] = p2[j] + h->n[j] * h->m[j] * h->m[j];
    }
    int z = (int)fmin(B - 1, fmax(0, floor((0.0 - h->lo) / h->width)));  // bin holding 0
    int a = 0, b = B - 1;
    double l, u;
    for (int round = 0; round < 4; round++) {
        double best = INFINITY;
        int next = b;
        for (int j = z; j < B; j++) {
            double e = lq_err_ab(h, p0, p1, p2, a, j, span, &l, &u, xlo, xhi);
            if (e < best) best = e, next = j;
        }
        b = next, best = INFINITY, next = a;
        for (int j = 0; j <= z; j++) {
            double e = lq_err_ab(h, p0, p1, p2, j, b, span, &l, &u, xlo, xhi);
            if (e < best) best = e, next = j;
        }
        a = next;
    }
    lq_err_ab(h, p0, p1, p2, a, b, span, lo, hi, xlo, xhi);
    free(p);
    return 0;
}

// Asymmetric range [lo, hi] from a histogram of x over [xlo, xhi].
static int lq_range_asym(const float *x, size_t n, const linear_cfg *c, double xlo, double xhi,
                         double *lo, double *hi, sc_err *err) {
    lq_hist h = {0};
    int rc = lq_hist_build(x, n, 0, xlo, xhi, c->bins, &h, err);
    int qmin, qmax;
    linear_qrange(c, &qmin, &qmax);
    if (!rc && c->clip == LQ_CLIP_MSE)
        rc = lq_range_asym_mse(&h, (double)(qmax - qmin), xlo, xhi, lo, hi, err);
    if (!rc && c->clip == LQ_CLIP_PERCENTILE) {
        double tail = (100.0 - c->percentile) / 100.0 * (double)n;
        *lo = fmin(0.0, fmax(xlo, lq_quantile(&h, tail) - h.width));
        *hi = fmax(0.0, fmin(xhi, lq_quantile(&h, (double)n - tail)));
    }
    lq_hist_free(&h);
    return rc;
}

// --- ranges and tensors -------------------------------------------------------

// Chooses the range [lo, hi] (holding 0) for n values.
int linear_range(const float *x, size_t n, const linear_cfg *c, double *lo, double *hi,
                 sc_err *err) {
    double xlo = 0.0, xhi = 0.0;
    for (size_t i = 0; i < n; i++) xlo = fmin(xlo, x[i]), xhi = fmax(xhi, x[i]);
    double amax = fmax(-xlo, xhi);
    *lo = c->symmetric ? -amax : xlo;
    *hi = c->symmetric ? amax : xhi;
    if (c->clip == LQ_CLIP_MAX || n == 0 || amax == 0.0) return 0;
    if (!c->symmetric) return lq_range_asym(x, n, c, xlo, xhi, lo, hi, err);
    double t = amax;
    SC_TRY(lq_range_sym(x, n, c, amax, &t, err));
    *lo = -t, *hi = t;
    return 0;
}

// Quantizes one channel (or the whole tensor): range, scale, integers.
static int lq_channel(const linear_cfg *c, const float *w, const float *m, size_t per, float *buf,
                      quant_tensor *t, int ch, sc_err *err) {
    size_t n = 0;
    for (size_t i = 0; i < per; i++)
        if (m[i] != 0.0f) buf[n++] = w[i];
    double lo, hi;
    SC_TRY(linear_range(buf, n, c, &lo, &hi, err));
    linear_params(c, lo, hi, &t->scale[ch], &t->zero_point[ch]);
    int16_t *q = t->q + (size_t)ch * per;
    for (size_t i = 0; i < per; i++) {
        int sat = 0;
        q[i] = m[i] != 0.0f ? linear_encode(c, t->scale[ch], t->zero_point[ch], w[i], &sat)
                            : (int16_t)t->zero_point[ch];
        t->saturated += sat;
    }
    return 0;
}

// Quantizes tensor ti per channel or per tensor into t.
int linear_quantize_tensor(const net *nt, int ti, const linear_cfg *c, quant_tensor *t,
                           sc_err *err) {
    const ptensor *p = &nt->tensors[ti];
    if (c->bits != 8 && c->bits != 16)
        return sc_fail(err, "linear quantization: bits = %d, must be 8 or 16", c->bits);
    const int ns = c->per_channel ? p->dims[0] : 1;
    SC_TRY(quant_tensor_alloc(t, nt, ti, 0, ns, err));
    const size_t per = p->count / (size_t)ns;
    float *buf = malloc((per ? per : 1) * sizeof *buf);  // (per) kept weights of one channel
    if (!buf) return sc_fail(err, "out of memory (%s)", p->name);
    int rc = 0;
    for (int ch = 0; !rc && ch < ns; ch++)
        rc = lq_channel(c, nt->param + p->offset + (size_t)ch * per,
                        nt->mask + p->offset + (size_t)ch * per, per, buf, t, ch, err);
    free(buf);
    return rc ? sc_wrap(err, "%s", p->name) : 0;
}
