// Tests of the quantizers: 1-D k-means finds known centroids from every
// initialisation, linear fixed point round-trips within half a step, fp16
// rounding is exact over every half value, and quantizing a whole net keeps
// pruned zeros and leaves at most K distinct non-zero values per tensor.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_rng.h>

#include "quantize/apply.h"
#include "quantize/kmeans.h"
#include "quantize/linear.h"
#include "runtime/half.h"
#include "runtime/quant_io.h"
#include "tests/testutil.h"

// --- k-means ------------------------------------------------------------------

// Values around three known centres (tiny spread, awkward cluster sizes,
// shuffled); want receives each cluster's exact mean, ascending.
static float *three_clusters(size_t *n, double want[3]) {
    const double centre[3] = {-1.25, 0.5, 2.0};
    const size_t size[3] = {101, 57, 233};
    *n = size[0] + size[1] + size[2];
    float *x = malloc(*n * sizeof *x);
    int *order = malloc(*n * sizeof *order);
    rng r;
    rng_seed(&r, 11, 0);
    size_t at = 0;
    for (int c = 0; c < 3; c++) {
        double sum = 0;
        for (size_t i = 0; i < size[c]; i++, at++) sum += x[at] = (float)(centre[c] + 0.01 * rng_normal(&r));
        want[c] = sum / (double)size[c];
    }
    for (size_t i = 0; i < *n; i++) order[i] = (int)i;
    rng_shuffle(&r, order, (int)*n);
    float *y = malloc(*n * sizeof *y);
    for (size_t i = 0; i < *n; i++) y[i] = x[order[i]];
    free(x), free(order);
    return y;
}

// Every initialisation finds the three known cluster means.
static void test_kmeans_known(tctx *t) {
    size_t n;
    double want[3], c[3];
    float *x = three_clusters(&n, want);
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    for (int init = 0; init < 4; init++) {
        gsl_rng_set(r, 7 + init);
        kmeans_cfg cfg = {.k = 3, .init = (kmeans_init)init, .max_iter = 100};
        sc_err err = {{0}};
        int iters = 0;
        CHECK(t, kmeans_1d(x, n, &cfg, r, c, &iters, NULL, &err) == 0, "%s", err.msg);
        for (int j = 0; j < 3; j++)
            CHECK(t, fabs(c[j] - want[j]) < 1e-6, "init %d centroid %d = %.9g, want %.9g", init, j,
                  c[j], want[j]);
        CHECK(t, iters >= 1 && iters < 100, "init %d: %d iterations", init, iters);
    }
    gsl_rng_free(r);
    free(x);
}

// More centroids than distinct values: every value is a centroid, and no
// value is farther from its nearest centroid than 0.
static void test_kmeans_few_values(tctx *t) {
    float x[40];
    const float vals[5] = {-3.0f, -0.5f, 0.25f, 1.0f, 7.5f};
    for (int i = 0; i < 40; i++) x[i] = vals[(i * 7) % 5];
    double c[8];
    float cf[8];
    for (int init = 0; init < 4; init++) {
        gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
        kmeans_cfg cfg = {.k = 8, .init = (kmeans_init)init, .max_iter = 50};
        sc_err err = {{0}};
        CHECK(t, kmeans_1d(x, 40, &cfg, r, c, NULL, NULL, &err) == 0, "%s", err.msg);
        for (int j = 0; j < 8; j++) cf[j] = (float)c[j];
        for (int i = 0; i < 40; i++)
            CHECK(t, cf[kmeans_nearest(cf, 8, x[i])] == x[i], "init %d: %g not a centroid", init, x[i]);
        gsl_rng_free(r);
    }
}

// The best of several starts has no larger squared error than linear or
// density alone (on a skewed two-lobed sample like a pruned layer's).
static void test_kmeans_best(tctx *t) {
    const size_t n = 3001;
    float *x = malloc(n * sizeof *x);
    rng g;
    rng_seed(&g, 17, 0);
    for (size_t i = 0; i < n; i++) {
        float v = 0.05f + fabsf(rng_normal(&g)) * 0.1f * (rng_uniform(&g) < 0.1f ? 4.0f : 1.0f);
        x[i] = rng_uniform(&g) < 0.4f ? -v : v;
    }
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    double c[16], sse[4];
    for (int init = 0; init < 4; init++) {
        kmeans_cfg cfg = {.k = 16, .init = (kmeans_init)init, .max_iter = 100};
        sc_err err = {{0}};
        CHECK(t, kmeans_1d(x, n, &cfg, r, c, NULL, &sse[init], &err) == 0, "%s", err.msg);
    }
    CHECK(t, sse[3] <= sse[0] && sse[3] <= sse[1], "best %g, linear %g, density %g", sse[3], sse[0], sse[1]);
    gsl_rng_free(r);
    free(x);
}

// The nearest centroid: ends, interior, ties to the lower one.
static void test_kmeans_nearest(tctx *t) {
    const float c[4] = {-1.0f, 0.0f, 0.0f, 2.0f};
    CHECK(t, kmeans_nearest(c, 4, -5.0f) == 0, "below");
    CHECK(t, kmeans_nearest(c, 4, 9.0f) == 3, "above");
    CHECK(t, kmeans_nearest(c, 4, -0.5f) == 0, "tie goes low");
    CHECK(t, c[kmeans_nearest(c, 4, 0.9f)] == 0.0f, "0.9 -> 0");
    CHECK(t, kmeans_nearest(c, 4, 1.1f) == 3, "1.1 -> 2");
}

// --- linear -------------------------------------------------------------------

// Quantizes n random values with cfg and checks: decoded within half a step
// of the original unless saturated, the saturation count, q in range, and
// exact zeros.
static void linear_roundtrip(tctx *t, const linear_cfg *cfg, size_t n, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 1);
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (i % 9 == 0) ? 0.0f : 0.05f * rng_normal(&r) + 0.01f;
    x[n / 2] = 0.4f;  // an outlier the mse clip may saturate
    double lo, hi;
    sc_err err = {{0}};
    CHECK(t, linear_range(x, n, cfg, &lo, &hi, &err) == 0, "%s", err.msg);
    CHECK(t, lo <= 0.0 && hi >= 0.0, "range [%g, %g] lacks 0", lo, hi);
    float scale;
    int32_t zp;
    int qmin, qmax;
    long sat = 0, far = 0;
    linear_params(cfg, lo, hi, &scale, &zp);
    linear_qrange(cfg, &qmin, &qmax);
    for (size_t i = 0; i < n; i++) {
        int s = 0;
        int16_t q = linear_encode(cfg, scale, zp, x[i], &s);
        float d = scale * (float)((int32_t)q - zp);
        sat += s;
        CHECK(t, q >= qmin && q <= qmax, "q %d out of [%d, %d]", q, qmin, qmax);
        if (fabs((double)d - x[i]) > 0.5 * scale * (1 + 1e-6) + 1e-7 * fabs(x[i])) far++;
        if (x[i] == 0.0f) CHECK(t, d == 0.0f, "zero decodes to %g", d);
    }
    CHECK(t, far <= sat, "bits %d sym %d clip %d: %ld values beyond half a step, %ld saturated",
          cfg->bits, cfg->symmetric, cfg->clip, far, sat);
    if (cfg->clip == LQ_CLIP_MAX) CHECK(t, sat == 0, "clip max saturated %ld", sat);
    free(x);
}

// Every linear configuration round-trips within half a step.
static void test_linear_roundtrip(tctx *t) {
    const size_t sizes[3] = {1, 97, 4099};
    for (int bits = 8; bits <= 16; bits += 8)
        for (int sym = 0; sym < 2; sym++)
            for (int clip = 0; clip < 3; clip++)
                for (int s = 0; s < 3; s++) {
                    linear_cfg c = {.bits = bits, .symmetric = sym, .clip = (linear_clip)clip,
                                    .percentile = 99.9, .bins = 512};
                    linear_roundtrip(t, &c, sizes[s], 100 + s);
                }
}

// The mse clip never costs more squared error than clipping at the maximum
// (on a heavy-tailed sample), and saturates some of the tail.
static void test_linear_mse_clip(tctx *t) {
    const size_t n = 20000;
    float *x = malloc(n * sizeof *x);
    rng r;
    rng_seed(&r, 5, 2);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&r) * (rng_uniform(&r) < 0.01f ? 8.0f : 1.0f);
    double err[2];
    for (int clip = 0; clip < 2; clip++) {
        linear_cfg c = {.bits = 8, .symmetric = 1, .clip = (linear_clip)clip, .bins = 2048};
        double lo, hi, se = 0;
        sc_err e = {{0}};
        float scale;
        int32_t zp;
        CHECK(t, linear_range(x, n, &c, &lo, &hi, &e) == 0, "%s", e.msg);
        linear_params(&c, lo, hi, &scale, &zp);
        for (size_t i = 0; i < n; i++) {
            int s;
            double d = scale * (float)(linear_encode(&c, scale, zp, x[i], &s) - zp) - x[i];
            se += d * d;
        }
        err[clip] = se / n;
    }
    CHECK(t, err[0] <= err[1], "mse clip error %g > max clip error %g", err[0], err[1]);
    free(x);
}

// --- fp16 ---------------------------------------------------------------------

// Reference decoder of an IEEE half bit pattern.
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

// Every finite half is kept; midpoints go to the even neighbour; overflow.
static void test_fp16_round(tctx *t) {
    long bad = 0, badmid = 0;
    for (uint32_t h = 0; h < 0x7C00; h++) {  // positive finite halves
        double v = half_value((uint16_t)h);
        if (half_round((float)v, NULL) != (float)v) bad++;
        if (half_round((float)-v, NULL) != (float)-v) bad++;
        if (h + 1 < 0x7C00) {
            double mid = 0.5 * (v + half_value((uint16_t)(h + 1)));
            double even = (h & 1) ? half_value((uint16_t)(h + 1)) : v;
            if (half_round((float)mid, NULL) != (float)even) badmid++;
        }
    }
    CHECK(t, bad == 0, "%ld halves not kept", bad);
    CHECK(t, badmid == 0, "%ld midpoints not rounded to even", badmid);
    int over = 0;
    CHECK(t, half_round(65519.0f, &over) == 65504.0f && !over, "65519");
    CHECK(t, isinf(half_round(65520.0f, &over)) && over, "65520 overflows");
    CHECK(t, half_round(1e-9f, NULL) == 0.0f, "tiny to zero");
}

// --- whole nets -----------------------------------------------------------------

// LeNet with random weights and ~70% of the prunable weights pruned.
static net *pruned_lenet(uint64_t seed) {
    sc_err err = {{0}};
    net *nt = net_create("lenet", 3, 32, 32, 7, &err);
    if (!nt) return NULL;
    tnet_randomize(nt, seed, 1);
    rng r;
    rng_seed(&r, seed, 9);
    for (int k = 0; k < nt->ntensors; k++) {
        if (!nt->tensors[k].prunable) continue;
        float *w = net_tensor_data(nt, k), *m = net_tensor_mask(nt, k);
        for (size_t i = 0; i < nt->tensors[k].count; i++)
            if (rng_uniform(&r) < 0.7f) m[i] = 0.0f, w[i] = 0.0f;
    }
    return nt;
}

// Distinct non-zero values among a tensor's weights.
static long distinct_nonzero(const float *w, size_t n) {
    float *s = malloc((n ? n : 1) * sizeof *s);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i] != 0.0f) s[k++] = w[i];
    long d = 0;
    for (size_t i = 0; i < k; i++) {  // small tensors: quadratic is fine
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = s[j] == s[i];
        d += !seen;
    }
    free(s);
    return d;
}

// Checks one quantized net: pruned zeros, decoded values, distinct counts.
static void check_quantized(tctx *t, const net *nt, const quant_model *q, const char *what, int k) {
    for (int i = 0; i < q->ntensors; i++) {
        const quant_tensor *qt = &q->t[i];
        const ptensor *p = &nt->tensors[qt->tensor];
        const float *w = nt->param + p->offset, *m = nt->mask + p->offset;
        long bad = 0;
        for (size_t j = 0; j < p->count; j++) bad += m[j] == 0.0f && (w[j] != 0.0f || signbit(w[j]));
        CHECK(t, bad == 0, "%s %s: %ld pruned weights not +0", what, p->name, bad);
        if (k > 0) {
            long d = distinct_nonzero(w, p->count);
            CHECK(t, d <= k, "%s %s: %ld distinct non-zero values > %d", what, p->name, d, k);
        }
        float *dec = malloc(p->count * sizeof *dec);
        quant_tensor_decode(q, qt, m, dec);
        CHECK(t, q->method == QM_HALF || !memcmp(dec, w, p->count * sizeof *w),
              "%s %s: params differ from the decoded values", what, p->name);
        free(dec);
    }
}

// k-means (every K edge), linear and half on a pruned LeNet.
static void test_net_apply(tctx *t) {
    const int ks[4] = {2, 3, 16, 256};
    for (int m = 0; m < 6; m++) {
        net *nt = pruned_lenet(30 + m);
        quant_cfg c = {.method = m < 4 ? QM_KMEANS : m == 4 ? QM_LINEAR : QM_HALF,
                       .codebook_fp16 = m != 1, .seed = 3};
        c.km = (kmeans_cfg){.k = m < 4 ? ks[m] : 16, .init = (kmeans_init)(m % 3), .max_iter = 100,
                            .fp16 = c.codebook_fp16};
        c.lin = (linear_cfg){.bits = 8, .symmetric = 0, .per_channel = 1, .clip = LQ_CLIP_MSE, .bins = 256};
        quant_model *q = NULL;
        sc_err err = {{0}};
        CHECK(t, quant_net_apply(nt, &c, &q, &err) == 0, "%s", err.msg);
        if (q) {
            CHECK(t, q->ntensors == (m == 5 ? 10 : 5), "method %d: %d tensors", m, q->ntensors);
            check_quantized(t, nt, q, m < 4 ? "kmeans" : m == 4 ? "linear" : "half", m < 4 ? ks[m] : 0);
        }
        for (size_t i = 0; m == 5 && i < nt->nparam; i++)
            if (half_round(nt->param[i], NULL) != nt->param[i]) {
                CHECK(t, 0, "half: param %zu not fp16", i);
                break;
            }
        quant_model_free(q);
        net_free(nt);
    }
}

// Skipping the first conv and the last linear leaves them untouched.
static void test_net_skip(tctx *t) {
    net *nt = pruned_lenet(41);
    float *orig = malloc(nt->nparam * sizeof *orig);
    memcpy(orig, nt->param, nt->nparam * sizeof *orig);
    quant_cfg c = {.method = QM_KMEANS, .codebook_fp16 = 1, .skip_first = 1, .skip_last = 1,
                   .km = {.k = 4, .init = KM_INIT_LINEAR, .max_iter = 20, .fp16 = 1}};
    quant_model *q = NULL;
    sc_err err = {{0}};
    CHECK(t, quant_net_apply(nt, &c, &q, &err) == 0, "%s", err.msg);
    int first = net_tensor_find(nt, "conv1.weight"), last = net_tensor_find(nt, "fc3.weight");
    CHECK(t, q && q->ntensors == 3, "%d tensors", q ? q->ntensors : -1);
    CHECK(t, !memcmp(nt->param + nt->tensors[first].offset, orig + nt->tensors[first].offset,
                     nt->tensors[first].count * sizeof(float)), "conv1 changed");
    CHECK(t, !memcmp(nt->param + nt->tensors[last].offset, orig + nt->tensors[last].offset,
                     nt->tensors[last].count * sizeof(float)), "fc3 changed");
    quant_model_free(q);
    free(orig);
    net_free(nt);
}

int main(void) {
    gsl_set_error_handler_off();
    tctx t = {.suite = "test_quant"};
    RUN(&t, test_kmeans_known);
    RUN(&t, test_kmeans_few_values);
    RUN(&t, test_kmeans_best);
    RUN(&t, test_kmeans_nearest);
    RUN(&t, test_linear_roundtrip);
    RUN(&t, test_linear_mse_clip);
    RUN(&t, test_fp16_round);
    RUN(&t, test_net_apply);
    RUN(&t, test_net_skip);
    return check_finish(&t);
}
