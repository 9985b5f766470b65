// Tests of sensitivity-weighted k-means (quantize --kmeans-weight fisher):
// weighted Lloyd puts each centroid at the weighted mean of its cluster
// (the plain mean when the cluster's weights are all 0), equal weights give
// plain k-means bit for bit (every start), no weights give exactly what
// k-means gave before weights existed (recorded centroids), bad weights
// are refused, and weighting lowers the weighted error of a whole net's
// quantization (with and without row scales) while keeping pruned zeros
// and the K-value limit. The Fisher pass (quantize/fisher.h) on a tiny
// net: h >= 0, exactly 0 at pruned weights, the executor's parameters and
// BN statistics untouched, and on a linear layer after a global average
// pool the mean over batches of the hand-computed squared gradient.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_rng.h>

#include "quantize/apply.h"
#include "quantize/finetune.h"
#include "train/distill.h"
#include "quantize/fisher.h"
#include "quantize/kmeans.h"
#include "tests/testutil.h"

// --- weighted Lloyd ---------------------------------------------------------------

// nc (3 or 4) clusters, each two tight sub-groups (awkward sizes, unit
// weights) plus one heavy point (weight 1000) and one point of weight 0;
// the fourth cluster has weight 0 throughout. Shuffled. want: each
// cluster's weighted mean (the plain mean for the fourth), plain: its
// plain mean.
static size_t weighted_clusters(int nc, float *x, float *h, double want[4], double plain[4]) {
    const double centre[4] = {-1.25, 0.5, 2.0, 5.0};
    const int size[2] = {31, 17};
    rng r;
    rng_seed(&r, 13, 0);
    size_t n = 0;
    for (int c = 0; c < nc; c++) {
        double sw = 0, sh = 0, sx = 0;
        size_t m = 0;
        for (int g = 0; g < 2; g++)
            for (int i = 0; i < size[g] + (g == 0 ? 2 : 0); i++, n++, m++) {
                x[n] = (float)(centre[c] + (g ? 0.04 : -0.04) + 0.003 * rng_normal(&r));
                h[n] = c == 3 ? 0.0f : i == size[0] ? 1000.0f : i == size[0] + 1 ? 0.0f : 1.0f;
                sw += (double)h[n] * x[n], sh += h[n], sx += x[n];
            }
        want[c] = sh > 0 ? sw / sh : sx / (double)m;
        plain[c] = sx / (double)m;
    }
    int order[256];
    float xs[256], hs[256];
    for (size_t i = 0; i < n; i++) order[i] = (int)i, xs[i] = x[i], hs[i] = h[i];
    rng_shuffle(&r, order, (int)n);
    for (size_t i = 0; i < n; i++) x[i] = xs[order[i]], h[i] = hs[order[i]];
    return n;
}

// Each centroid lands at its cluster's weighted mean, from every start,
// and the heavy points move the means measurably.
static void test_weighted_means(tctx *t) {
    float x[256], h[256];
    double want[4], plain[4], c[3];
    const size_t n = weighted_clusters(3, x, h, want, plain);
    for (int j = 0; j < 3; j++)
        CHECK(t, fabs(want[j] - plain[j]) > 0.02, "cluster %d: weighted %g, plain %g", j, want[j],
              plain[j]);
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    for (int init = 0; init < 4; init++)
        for (int seed = 0; seed < 3; seed++) {
            gsl_rng_set(r, 100 + 10 * init + seed);
            kmeans_cfg cfg = {.k = 3, .init = (kmeans_init)init, .max_iter = 100};
            sc_err err = {{0}};
            CHECK(t, kmeans_1d_weighted(x, h, n, &cfg, r, c, NULL, NULL, &err) == 0, "%s", err.msg);
            for (int j = 0; j < 3; j++)
                CHECK(t, fabs(c[j] - want[j]) < 1e-9,
                      "init %d seed %d centroid %d = %.12g, want %.12g", init, seed, j, c[j],
                      want[j]);
        }
    gsl_rng_free(r);
}

// A cluster whose weights are all 0 (reached by the linear start) sits at
// its plain mean; the others at their weighted means.
static void test_zero_weight_cluster(tctx *t) {
    float x[256], h[256];
    double want[4], plain[4], c[4];
    const size_t n = weighted_clusters(4, x, h, want, plain);
    kmeans_cfg cfg = {.k = 4, .init = KM_INIT_LINEAR, .max_iter = 100};
    sc_err err = {{0}};
    CHECK(t, kmeans_1d_weighted(x, h, n, &cfg, NULL, c, NULL, NULL, &err) == 0, "%s", err.msg);
    for (int j = 0; j < 4; j++)
        CHECK(t, fabs(c[j] - want[j]) < 1e-9, "centroid %d = %.12g, want %.12g", j, c[j], want[j]);
    CHECK(t, want[3] == plain[3], "the reference of the zero-weight cluster");
}

// A skewed two-lobed sample like a pruned layer's (n values).
static void skewed_sample(float *x, size_t n, uint64_t seed) {
    rng g;
    rng_seed(&g, seed, 0);
    for (size_t i = 0; i < n; i++) {
        float v = 0.05f + fabsf(rng_normal(&g)) * 0.1f * (rng_uniform(&g) < 0.1f ? 4.0f : 1.0f);
        x[i] = rng_uniform(&g) < 0.4f ? -v : v;
    }
}

// Equal weights (1, 0.37, 0) give plain k-means bit for bit from every
// start: the same centroids and iterations, the squared error times the weight.
static void test_equal_weights(tctx *t) {
    const size_t n = 3001;
    float *x = malloc(n * sizeof *x), *h = malloc(n * sizeof *h);
    skewed_sample(x, n, 17);
    const float hv[3] = {1.0f, 0.37f, 0.0f};
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    for (int init = 0; init < 4; init++)
        for (int v = 0; v < 3; v++) {
            kmeans_cfg cfg = {.k = 16, .init = (kmeans_init)init, .max_iter = 100};
            double c0[16], c1[16], e0, e1;
            int i0, i1;
            sc_err err = {{0}};
            for (size_t i = 0; i < n; i++) h[i] = hv[v];
            gsl_rng_set(r, 3 + init);
            CHECK(t, kmeans_1d(x, n, &cfg, r, c0, &i0, &e0, &err) == 0, "%s", err.msg);
            gsl_rng_set(r, 3 + init);
            CHECK(t, kmeans_1d_weighted(x, h, n, &cfg, r, c1, &i1, &e1, &err) == 0, "%s", err.msg);
            CHECK(t, !memcmp(c0, c1, sizeof c0), "init %d h %g: centroids differ", init, hv[v]);
            CHECK(t, i0 == i1, "init %d h %g: %d vs %d iterations", init, hv[v], i0, i1);
            CHECK(t, e1 == e0 * hv[v], "init %d h %g: sse %.17g, want %.17g", init, hv[v], e1,
                  e0 * hv[v]);
        }
    gsl_rng_free(r);
    free(x), free(h);
}

// The sample the recorded centroids below come from (duplicates, a zero).
static void golden_sample(float *x, size_t n) {
    rng g;
    rng_seed(&g, 23, 0);
    for (size_t i = 0; i < n; i++) {
        float v = 0.1f * rng_normal(&g) * (rng_uniform(&g) < 0.1f ? 5.0f : 1.0f);
        x[i] = (i % 7 == 6) ? x[i - 1] : v;
    }
    x[100] = 0.0f;
}

// Centroids of golden_sample(257) from plain k-means as it was before
// weights existed (k 5 and 16; inits linear, density, kmeans++, best;
// GSL mt19937 seeded 5 + init).
static const double GOLDEN[2][4][16] = {
    {{-0x1.3ea1775555555p-1, -0x1.28f5b17bbbbbcp-3, -0x1.5a46f87ed8cafp-9, 0x1.f6168b9249249p-4,
      0x1.4f89bbaaaaaabp-1},
     {-0x1.3ea1775555555p-1, -0x1.28f5b17bbbbbcp-3, -0x1.5a46f87ed8cafp-9, 0x1.f6168b9249249p-4,
      0x1.4f89bbaaaaaabp-1},
     {-0x1.3ea1775555555p-1, -0x1.28f5b17bbbbbcp-3, -0x1.a4cdff1e4129ep-9, 0x1.f2cbf92762762p-4,
      0x1.4f89bbaaaaaabp-1},
     {-0x1.3ea1775555555p-1, -0x1.28f5b17bbbbbcp-3, -0x1.a4cdff1e4129ep-9, 0x1.f2cbf92762762p-4,
      0x1.4f89bbaaaaaabp-1}},
    {{-0x1.726ee4p-1, -0x1.3e0e7ap-1, -0x1.0b6708p-1, -0x1.c3ffc44p-3, -0x1.4b816ea2e8ba3p-3,
      -0x1.f1a6ac6f4de9cp-4, -0x1.f12412aaaaaabp-5, -0x1.4f48bc972620bp-7, 0x1.87fd9d7555555p-5,
      0x1.b47a4a26a439fp-4, 0x1.9584b88ba2e8cp-3, 0x1.3c90d4p-2, 0x1.fa694p-2, 0x1.2c2d98p-1,
      0x1.5aed94p-1, 0x1.a30f72p-1},
     {-0x1.3ea1775555555p-1, -0x1.c3ffc44p-3, -0x1.4b816ea2e8ba3p-3, -0x1.f1a6ac6f4de9cp-4,
      -0x1.2c9fb95p-4, -0x1.8f286d0f0f0f1p-5, -0x1.86fdc61642c86p-6, -0x1.6c469c4p-8,
      0x1.2466fdccccccdp-6, 0x1.60d0e31249249p-5, 0x1.089973bbbbbbcp-4, 0x1.8270b59c71c72p-4,
      0x1.11d209aaaaaabp-3, 0x1.8498bbp-3, 0x1.25543a6666666p-2, 0x1.4f89bbaaaaaabp-1},
     {-0x1.726ee4p-1, -0x1.3e0e7ap-1, -0x1.0b6708p-1, -0x1.c3ffc44p-3, -0x1.4b816ea2e8ba3p-3,
      -0x1.f1a6ac6f4de9cp-4, -0x1.01a694999999ap-4, -0x1.574d23471c71cp-6, 0x1.fce4583666666p-7,
      0x1.9d15f8e0c7ce1p-5, 0x1.903b7e68ba2e9p-4, 0x1.4df69ep-3, 0x1.25543a6666666p-2,
      0x1.14b11cp-1, 0x1.5aed94p-1, 0x1.a30f72p-1},
     {-0x1.726ee4p-1, -0x1.24bac1p-1, -0x1.9a70d73333333p-3, -0x1.27cee2e38e38ep-3,
      -0x1.983d3a8e38e39p-4, -0x1.c65361d70a3d7p-5, -0x1.45c9c26969697p-6, 0x1.e28414035e50dp-7,
      0x1.759961b4b4b4bp-5, 0x1.53b489ap-4, 0x1.f2950b9ce739dp-4, 0x1.9e4450ccccccdp-3,
      0x1.3c90d4p-2, 0x1.fa694p-2, 0x1.4f3d95p-1, 0x1.a30f72p-1}}};

// Without weights (kmeans_1d, or kmeans_1d_weighted with h NULL) the
// centroids are bit for bit those recorded before weights existed.
static void test_null_weights_golden(tctx *t) {
    float x[257];
    golden_sample(x, 257);
    const int ks[2] = {5, 16};
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    for (int a = 0; a < 2; a++)
        for (int init = 0; init < 4; init++)
            for (int how = 0; how < 2; how++) {
                kmeans_cfg cfg = {.k = ks[a], .init = (kmeans_init)init, .max_iter = 100};
                double c[16];
                sc_err err = {{0}};
                gsl_rng_set(r, 5 + init);
                int rc = how ? kmeans_1d_weighted(x, NULL, 257, &cfg, r, c, NULL, NULL, &err)
                             : kmeans_1d(x, 257, &cfg, r, c, NULL, NULL, &err);
                CHECK(t, rc == 0, "%s", err.msg);
                for (int j = 0; j < ks[a]; j++)
                    CHECK(t, c[j] == GOLDEN[a][init][j],
                          "k %d init %d %s centroid %d: %a, recorded %a", ks[a], init,
                          how ? "h NULL" : "kmeans_1d", j, c[j], GOLDEN[a][init][j]);
            }
    gsl_rng_free(r);
}

// More centroids than distinct values, uneven weights (the empty-cluster
// re-seeding path): every value becomes a centroid, from every start.
static void test_weighted_few_values(tctx *t) {
    float x[40], h[40], cf[8];
    const float vals[5] = {-3.0f, -0.5f, 0.25f, 1.0f, 7.5f};
    rng g;
    rng_seed(&g, 5, 1);
    for (int i = 0; i < 40; i++) x[i] = vals[(i * 7) % 5], h[i] = 0.01f + 100.0f * rng_uniform(&g);
    for (int init = 0; init < 4; init++) {
        gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
        kmeans_cfg cfg = {.k = 8, .init = (kmeans_init)init, .max_iter = 50};
        double c[8];
        sc_err err = {{0}};
        CHECK(t, kmeans_1d_weighted(x, h, 40, &cfg, r, c, NULL, NULL, &err) == 0, "%s", err.msg);
        for (int j = 0; j < 8; j++) cf[j] = (float)c[j];
        for (int i = 0; i < 40; i++)
            CHECK(t, cf[kmeans_nearest(cf, 8, x[i])] == x[i], "init %d: %g not a centroid", init,
                  x[i]);
        gsl_rng_free(r);
    }
}

// The weighted starts (0 Lloyd iterations return them): density takes
// weighted quantiles, k-means++ draws only values of non-zero weight; an
// empty cluster is re-seeded at the value of the largest h D^2 (not at a
// cluster's end); the squared error returned is the weighted one.
static void test_weighted_starts(tctx *t) {
    float x[10], h[10];
    double c[3], sse;
    sc_err err = {{0}};
    for (int i = 0; i < 10; i++) x[i] = (float)((i * 3) % 10), h[i] = x[i] == 9.0f ? 11.0f : 1.0f;
    kmeans_cfg cfg = {.k = 2, .init = KM_INIT_DENSITY, .max_iter = 0};
    CHECK(t, kmeans_1d_weighted(x, h, 10, &cfg, NULL, c, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(t, c[0] == 5.0 && c[1] == 9.0, "density start %g %g, want 5 9 (unweighted 2 7)", c[0],
          c[1]);
    for (int i = 0; i < 10; i++) h[i] = x[i] == 3.0f || x[i] == 7.0f ? 1.0f : 0.0f;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    cfg.init = KM_INIT_KPP;
    for (int seed = 0; seed < 8; seed++) {
        gsl_rng_set(r, (unsigned long)seed);
        CHECK(t, kmeans_1d_weighted(x, h, 10, &cfg, r, c, NULL, NULL, &err) == 0, "%s", err.msg);
        CHECK(t, c[0] == 3.0 && c[1] == 7.0, "seed %d: k-means++ start %g %g, want 3 7", seed, c[0],
              c[1]);
    }
    gsl_rng_free(r);
    // linear start 0, 50, 100: the middle cluster is empty after the first
    // assignment; h D^2 is largest at 0.8 (the ends 0 and 1 have weight 1)
    const float y[7] = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f, 100.0f},
                hy[7] = {1, 1000, 1, 1, 500, 1, 1};
    cfg = (kmeans_cfg){.k = 3, .init = KM_INIT_LINEAR, .max_iter = 1};
    CHECK(t, kmeans_1d_weighted(y, hy, 7, &cfg, NULL, c, NULL, &sse, &err) == 0, "%s", err.msg);
    CHECK(t, c[1] == (double)0.8f && c[2] == 100.0, "re-seeded at %.9g, want 0.8 (c %g %g %g)",
          c[1], c[0], c[1], c[2]);
    double want = 0.0;  // the weighted error of the returned centroids, measured here
    for (int i = 0; i < 7; i++) {
        double best = INFINITY;
        for (int j = 0; j < 3; j++)
            best = fmin(best, ((double)y[i] - c[j]) * ((double)y[i] - c[j]));
        want += hy[i] * best;
    }
    CHECK(t, fabs(sse - want) <= 1e-12 * want, "weighted error %.12g, measured %.12g", sse, want);
}

// Negative or non-finite weights are refused; normalisation: mean 1, the
// floor, all zero -> all one, bad values refused.
static void test_weights_checks(tctx *t) {
    float x[6] = {0.1f, 0.2f, 0.3f, 1.0f, 1.1f, 1.2f}, h[6] = {1, 1, 1, 1, -1, 1};
    double c[2];
    kmeans_cfg cfg = {.k = 2, .init = KM_INIT_LINEAR, .max_iter = 10};
    sc_err err = {{0}};
    CHECK(t,
          kmeans_1d_weighted(x, h, 6, &cfg, NULL, c, NULL, NULL, &err) == -1 &&
              strstr(err.msg, "negative"),
          "negative weight: '%s'", err.msg);
    h[4] = NAN;
    CHECK(t, kmeans_1d_weighted(x, h, 6, &cfg, NULL, c, NULL, NULL, &err) == -1,
          "NaN weight accepted");
    float a[5] = {4.0f, 1.0f, 0.0f, 2.0f, 3.0f};  // mean 2
    CHECK(t, kmeans_weights_normalise(a, 5, "w", &err) == 0, "%s", err.msg);
    CHECK(t, a[0] == 2.0f && a[1] == 0.5f && a[2] == KMEANS_H_FLOOR && a[3] == 1.0f && a[4] == 1.5f,
          "normalised %g %g %g %g %g", a[0], a[1], a[2], a[3], a[4]);
    float z[3] = {0, 0, 0};
    CHECK(t, kmeans_weights_normalise(z, 3, "w", &err) == 0 && z[0] == 1.0f && z[2] == 1.0f,
          "zeros -> %g", z[0]);
    float b[2] = {1.0f, INFINITY};
    CHECK(t, kmeans_weights_normalise(b, 2, "w", &err) == -1 && strstr(err.msg, "w:"), "inf: '%s'",
          err.msg);
}

// --- whole nets -----------------------------------------------------------------------

static const char *DESC =
    "conv 4 3 pad=1 bias=0 name=c1\nbn name=b1\nrelu\nmaxpool 4\n"
    "conv 6 3 name=c2\nrelu\ngap\nlinear classes name=fc\n";

// A net of DESC with random weights, ~60% of c2 and fc pruned (a whole row of c2 too).
static net *tiny_net(uint64_t seed) {
    sc_err err = {{0}};
    net *nt = net_from_desc("tiny", DESC, 3, 32, 32, 5, &err);
    tnet_randomize(nt, seed, 1);
    rng r;
    rng_seed(&r, seed, 5);
    for (int t = 0; t < nt->ntensors; t++) {
        if (!nt->tensors[t].prunable) continue;
        float *w = net_tensor_data(nt, t), *m = net_tensor_mask(nt, t);
        const size_t per = nt->tensors[t].count / (size_t)nt->tensors[t].dims[0];
        for (size_t i = 0; i < nt->tensors[t].count; i++)
            if (rng_uniform(&r) < 0.6f || (t == net_tensor_find(nt, "c2.weight") && i / per == 2))
                m[i] = 0.0f, w[i] = 0.0f;
    }
    return nt;
}

// Sensitivities spread over six decades (pruned weights 0).
static float *spread_h(const net *nt, uint64_t seed) {
    float *h = malloc(nt->nparam * sizeof *h);
    rng r;
    rng_seed(&r, seed, 9);
    for (size_t i = 0; i < nt->nparam; i++)
        h[i] = nt->mask[i] != 0.0f ? powf(10.0f, 6.0f * rng_uniform(&r) - 4.0f) : 0.0f;
    return h;
}

// Quantizes a copy of nt with k-means (k, init best, fp32 codebook or fp16,
// row scales or not, sensitivities h or NULL); returns the copy and *q.
static net *quantized(const net *nt, int k, int rows, int fp16, const float *h, quant_model **q) {
    sc_err err = {{0}};
    net *c = distill_net_copy(nt, &err);
    quant_cfg qc = {.method = QM_KMEANS, .codebook_fp16 = fp16, .seed = 4};
    qc.km = (kmeans_cfg){
        .k = k, .init = KM_INIT_BEST, .max_iter = 100, .fp16 = fp16, .row_scale = rows, .net_h = h};
    *q = NULL;
    if (quant_net_apply(c, &qc, q, &err)) fprintf(stderr, "quant_net_apply: %s\n", err.msg);
    return c;
}

// Constant sensitivities give exactly the quantization without them
// (codebooks, indices, row scales, decoded weights), with and without row scales.
static void test_net_equal_h(tctx *t) {
    net *nt = tiny_net(3);
    float *h = malloc(nt->nparam * sizeof *h);
    for (size_t i = 0; i < nt->nparam; i++) h[i] = 2.5f;
    for (int rows = 0; rows < 2; rows++) {
        quant_model *q0, *q1;
        net *a = quantized(nt, 5, rows, 1, NULL, &q0), *b = quantized(nt, 5, rows, 1, h, &q1);
        CHECK(t, q0 && q1 && q0->ntensors == q1->ntensors, "quantization failed");
        for (int i = 0; q0 && q1 && i < q0->ntensors; i++) {
            const quant_tensor *x = &q0->t[i], *y = &q1->t[i];
            CHECK(t, !memcmp(x->codebook, y->codebook, (size_t)x->k * sizeof *x->codebook),
                  "rows %d tensor %d: codebooks", rows, i);
            CHECK(t, !memcmp(x->indices, y->indices, x->count), "rows %d tensor %d: indices", rows,
                  i);
            CHECK(t,
                  !rows ||
                      !memcmp(x->row_scale, y->row_scale, (size_t)x->nrows * sizeof *x->row_scale),
                  "rows %d tensor %d: row scales", rows, i);
        }
        CHECK(t, !memcmp(a->param, b->param, nt->nparam * sizeof *a->param),
              "rows %d: decoded weights differ", rows);
        quant_model_free(q0), quant_model_free(q1), net_free(a), net_free(b);
    }
    free(h);
    net_free(nt);
}

// Sum over kept weights of the selected tensors of hn (w - q)^2, hn the
// per-tensor normalised sensitivities (or 1 when h is NULL).
static double weighted_sse(const net *nt, const quant_model *q, const float *orig, const float *h) {
    double sum = 0.0;
    for (int i = 0; i < q->ntensors; i++) {
        const ptensor *p = &nt->tensors[q->t[i].tensor];
        double hs = 0.0;
        size_t kept = 0;
        for (size_t j = p->offset; j < p->offset + p->count; j++)
            if (nt->mask[j] != 0.0f) hs += h ? h[j] : 1.0, kept++;
        for (size_t j = p->offset; j < p->offset + p->count; j++) {
            if (nt->mask[j] == 0.0f) continue;
            const double hn = h ? fmax(h[j] / (hs / (double)kept), KMEANS_H_FLOOR) : 1.0;
            const double d = (double)orig[j] - nt->param[j];
            sum += hn * d * d;
        }
    }
    return sum;
}

// Weighting by spread-out sensitivities lowers the weighted squared error
// of the quantized net (and the plain k-means keeps the lower plain error),
// with and without row scales; pruned weights stay zero and each tensor
// (each row with row scales) keeps at most K distinct non-zero values.
static void test_net_weighted_error(tctx *t) {
    net *nt = tiny_net(7);
    float *h = spread_h(nt, 7);
    for (int rows = 0; rows < 2; rows++) {
        quant_model *q0, *q1;
        net *a = quantized(nt, 4, rows, 0, NULL, &q0), *b = quantized(nt, 4, rows, 0, h, &q1);
        if (!q0 || !q1) {
            CHECK(t, 0, "quantization failed");
            continue;
        }
        const double w0 = weighted_sse(a, q0, nt->param, h), w1 = weighted_sse(b, q1, nt->param, h);
        const double p0 = weighted_sse(a, q0, nt->param, NULL),
                     p1 = weighted_sse(b, q1, nt->param, NULL);
        CHECK(t, w1 < 0.8 * w0, "rows %d: weighted error %.4g with h, %.4g without", rows, w1, w0);
        CHECK(t, p0 < p1, "rows %d: plain error %.4g without h, %.4g with", rows, p0, p1);
        for (size_t i = 0; i < nt->nparam; i++)
            CHECK(t, nt->mask[i] != 0.0f || b->param[i] == 0.0f, "pruned weight %zu = %g", i,
                  b->param[i]);
        for (int i = 0; i < q1->ntensors; i++) {
            const ptensor *p = &nt->tensors[q1->t[i].tensor];
            const size_t per = rows ? p->count / (size_t)p->dims[0] : p->count;
            for (size_t s = 0; s < p->count; s += per) {
                float seen[64];
                int ns = 0;
                for (size_t j = s; j < s + per; j++) {
                    const float v = b->param[p->offset + j];
                    int known = v == 0.0f;
                    for (int u = 0; u < ns; u++) known |= seen[u] == v;
                    if (!known && ns < 64) seen[ns++] = v;
                }
                CHECK(t, ns <= 4, "%s (rows %d): %d distinct values at %zu", p->name, rows, ns, s);
            }
        }
        quant_model_free(q0), quant_model_free(q1), net_free(a), net_free(b);
    }
    free(h);
    net_free(nt);
}

// A net whose l1.weight (12 rows of 48) holds in every row 16 "heavy"
// weights that fit a shared codebook {-2, -1, 1, 2} exactly, times a row
// scale (0.5..2 with rows, 1 without), and 32 "light" random ones (a few
// pruned); h: 1e6 at the heavy weights, 1 at the light ones, 0 pruned.
static net *heavy_net(int rows, float **h) {
    sc_err err = {{0}};
    net *nt = net_from_desc("heavy", "maxpool 8\nlinear 12 name=l1\nlinear classes name=fc\n", 3,
                            32, 32, 5, &err);
    tnet_randomize(nt, 9, 1);
    const int ti = net_tensor_find(nt, "l1.weight");
    float *w = net_tensor_data(nt, ti), *m = net_tensor_mask(nt, ti);
    *h = calloc(nt->nparam, sizeof **h);
    float *hw = *h + nt->tensors[ti].offset;
    const float cb[4] = {-2.0f, -1.0f, 1.0f, 2.0f};
    rng r;
    rng_seed(&r, 9, 7);
    for (int k = 0; k < 12; k++) {
        const float s = rows ? 0.5f + 1.5f * rng_uniform(&r) : 1.0f;
        for (int i = 0; i < 48; i++) {
            float *v = &w[k * 48 + i];
            if (i % 3 == 0)
                *v = cb[(i / 3) % 4] * s, hw[k * 48 + i] = 1e6f;
            else
                *v = s * (4.0f * rng_uniform(&r) - 2.0f), hw[k * 48 + i] = 1.0f;
            if (i % 3 && rng_uniform(&r) < 0.1f)
                *v = 0.0f, m[k * 48 + i] = 0.0f, hw[k * 48 + i] = 0.0f;
        }
    }
    return nt;
}

// Squared error of l1's heavy weights (every third) after quantizing it
// with k = 4 (fp32 codebook, row scales or not, sensitivities h or NULL).
static double heavy_error(tctx *t, const net *nt, int rows, const float *h) {
    const int ti = net_tensor_find(nt, "l1.weight");
    const ptensor *p = &nt->tensors[ti];
    kmeans_cfg c = {.k = 4, .init = KM_INIT_BEST, .max_iter = 100, .row_scale = rows, .net_h = h};
    quant_model qm = {.method = QM_KMEANS, .k = 4, .row_scale = rows};
    quant_tensor qt;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 3);
    sc_err err = {{0}};
    float dec[12 * 48];
    double e = 0.0;
    CHECK(t, kmeans_quantize_tensor(nt, ti, &c, r, &qt, NULL, &err) == 0, "%s", err.msg);
    quant_tensor_decode(&qm, &qt, nt->mask + p->offset, dec);
    for (size_t i = 0; i < p->count; i += 3) {
        const double d = (double)dec[i] - nt->param[p->offset + i];
        e += d * d;
    }
    free(qt.codebook), free(qt.indices), free(qt.row_scale);
    gsl_rng_free(r);
    return e;
}

// Weights of a million times the others, that a codebook (times row
// scales) fits exactly, come out almost exactly with weighting (the
// clustering, with row scales also the scale fit and the choice of round,
// all weighted), and clearly not without it.
static void test_heavy_weights(tctx *t) {
    for (int rows = 0; rows < 2; rows++) {
        float *h;
        net *nt = heavy_net(rows, &h);
        const double e0 = heavy_error(t, nt, rows, NULL), e1 = heavy_error(t, nt, rows, h);
        CHECK(t, e1 < 1e-3 * e0 && e0 > 0.1,
              "rows %d: heavy weights' squared error %.4g weighted, %.4g not", rows, e1, e0);
        free(h);
        net_free(nt);
    }
}

// --- the Fisher pass ----------------------------------------------------------------

// A random split of n CIFAR-sized images with labels below classes.
static void split_random(data_split *s, int n, int classes, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 0);
    s->n = n;
    s->images = malloc((size_t)n * 3072 + 1);
    s->labels = malloc((size_t)n * sizeof *s->labels + 1);
    s->coarse = NULL;
    for (size_t i = 0; i < (size_t)n * 3072; i++) s->images[i] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < n; i++) s->labels[i] = (int)rng_below(&r, (uint32_t)classes);
}

// Frees a split made by split_random.
static void split_free(data_split *s) { free(s->images), free(s->labels); }

// Hand-computed Fisher diagonal of "gap, linear" (weight (classes, 3),
// bias) over batches b = 0..nb-1 of `batch` images in file order (batch b
// of an epoch of nper): mean over batches of the squared gradient of the
// batch's mean cross-entropy. want: (classes * 3 + classes) doubles.
static void fisher_linear_ref(const net *nt, const data_split *s, int batch, int nb, int nper,
                              double *want) {
    const int k = nt->classes;
    const float *w = net_tensor_data(nt, net_tensor_find(nt, "fc.weight"));
    const float *bias = net_tensor_data(nt, net_tensor_find(nt, "fc.bias"));
    memset(want, 0, (size_t)(4 * k) * sizeof *want);
    for (int b = 0; b < nb; b++) {
        double g[64] = {0};  // (k * 3 + k) this batch's gradient
        for (int n = (b % nper) * batch; n < (b % nper + 1) * batch; n++) {
            double x[3], z[16], mx = -INFINITY, se = 0.0;
            for (int c = 0; c < 3; c++) {
                double sum = 0.0;
                for (int p = 0; p < 1024; p++)
                    sum += ((double)s->images[(size_t)n * 3072 + (size_t)c * 1024 + p] / 255.0 -
                            nt->in_mean[c]) /
                           nt->in_std[c];
                x[c] = sum / 1024.0;
            }
            for (int o = 0; o < k; o++) {
                z[o] = bias[o];
                for (int c = 0; c < 3; c++) z[o] += (double)w[o * 3 + c] * x[c];
                mx = fmax(mx, z[o]);
            }
            for (int o = 0; o < k; o++) se += exp(z[o] - mx);
            for (int o = 0; o < k; o++) {
                const double d = (exp(z[o] - mx) / se - (o == s->labels[n])) / batch;
                for (int c = 0; c < 3; c++) g[o * 3 + c] += d * x[c];
                g[3 * k + o] += d;
            }
        }
        for (int i = 0; i < 4 * k; i++) want[i] += g[i] * g[i] / nb;
    }
}

// On "gap, linear" the pass gives the hand-computed mean squared gradient
// (5 batches of 4 over 3 batches an epoch: the epochs wrap), 0 at the
// pruned weights.
static void test_fisher_linear(tctx *t) {
    sc_err err = {{0}};
    net *nt = net_from_desc("lin", "gap\nlinear classes name=fc\n", 3, 32, 32, 3, &err);
    tnet_randomize(nt, 21, 1);
    const float mean[3] = {0.45f, 0.5f, 0.55f}, sd[3] = {0.2f, 0.25f, 0.3f};
    memcpy(nt->in_mean, mean, sizeof mean), memcpy(nt->in_std, sd, sizeof sd);
    const int wi = net_tensor_find(nt, "fc.weight"), bi = net_tensor_find(nt, "fc.bias");
    float *w = net_tensor_data(nt, wi), *m = net_tensor_mask(nt, wi);
    for (int i = 0; i < 9; i++) w[i] *= 4.0f;  // confident, unequal outputs
    m[1] = m[5] = 0.0f, w[1] = w[5] = 0.0f;
    data_split s;
    split_random(&s, 12, 3, 31);
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 4, &err);
    float *h = malloc(nt->nparam * sizeof *h);
    fisher_cfg fc = {.batches = 5, .batch = 4, .augment = 0, .seed = 1, .quiet = 1};
    fisher_result res;
    CHECK(t, e && fisher_diag(e, nt, &s, &fc, h, &res, &err) == 0, "%s", err.msg);
    CHECK(t, res.batches == 5 && res.skipped == 0, "%d batches, %d skipped", res.batches,
          res.skipped);
    double want[12];
    fisher_linear_ref(nt, &s, 4, 5, 3, want);
    const float *hw = h + nt->tensors[wi].offset, *hb = h + nt->tensors[bi].offset;
    for (int i = 0; i < 9; i++) {
        const double ref = m[i] != 0.0f ? want[i] : 0.0;
        CHECK(t, fabs(hw[i] - ref) <= 1e-4 * fabs(ref) + 1e-12,
              "h(fc.weight[%d]) = %.7g, want %.7g", i, hw[i], ref);
    }
    CHECK(t, hw[1] == 0.0f && hw[5] == 0.0f, "pruned weights: %g %g", hw[1], hw[5]);
    for (int o = 0; o < 3; o++)
        CHECK(t, fabs(hb[o] - want[9 + o]) <= 1e-4 * want[9 + o] + 1e-12,
              "h(fc.bias[%d]) = %.7g, want %.7g", o, hb[o], want[9 + o]);
    CHECK(t, want[0] > 1e-6, "degenerate reference %g", want[0]);
    exec_free(e);
    free(h);
    split_free(&s);
    net_free(nt);
}

// On a net with BN: h >= 0 and finite, exactly 0 at pruned weights,
// positive at some kept weight of every weight tensor; the executor's
// parameters and BN statistics are the net's afterwards; a second pass
// gives the same h; a split without a full batch and 0 batches are refused.
static void test_fisher_net(tctx *t) {
    net *nt = tiny_net(5);
    const int b1 = net_tensor_find(nt, "b1.mean");
    for (int c = 0; c < 4; c++)
        net_tensor_data(nt, b1)[c] = 0.1f * (float)c;  // non-default statistics
    float *param = malloc(nt->nparam * sizeof *param), *buf = malloc(nt->nbuf * sizeof *buf);
    memcpy(param, nt->param, nt->nparam * sizeof *param),
        memcpy(buf, nt->buf, nt->nbuf * sizeof *buf);
    data_split s;
    split_random(&s, 30, 5, 41);
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 8, &err);
    float *h = malloc(nt->nparam * sizeof *h), *h2 = malloc(nt->nparam * sizeof *h2);
    fisher_cfg fc = {.batches = 5, .batch = 8, .augment = 1, .seed = 2, .quiet = 1};
    fisher_result res;
    CHECK(t, e && fisher_diag(e, nt, &s, &fc, h, &res, &err) == 0, "%s", err.msg);
    CHECK(t, res.batches == 5, "%d batches", res.batches);
    long bad = 0, pruned_nonzero = 0;
    for (size_t i = 0; i < nt->nparam; i++) {
        bad += !(h[i] >= 0.0f && isfinite(h[i]));
        pruned_nonzero += nt->mask[i] == 0.0f && h[i] != 0.0f;
    }
    CHECK(t, bad == 0 && pruned_nonzero == 0, "%ld bad values, %ld non-zero at pruned weights", bad,
          pruned_nonzero);
    for (int i = 0; i < nt->ntensors; i++) {
        const ptensor *p = &nt->tensors[i];
        if (p->kind != PT_WEIGHT) continue;
        double mx = 0.0;
        for (size_t j = 0; j < p->count; j++) mx = fmax(mx, h[p->offset + j]);
        CHECK(t, mx > 0.0, "%s: every h is 0", p->name);
    }
    CHECK(t, exec_read_net(e, &err) == 0, "%s", err.msg);
    CHECK(t, !memcmp(param, nt->param, nt->nparam * sizeof *param),
          "the executor's parameters moved");
    CHECK(t, !memcmp(buf, nt->buf, nt->nbuf * sizeof *buf), "the executor's BN statistics moved");
    CHECK(t, fisher_diag(e, nt, &s, &fc, h2, &res, &err) == 0, "%s", err.msg);
    CHECK(t, !memcmp(h, h2, nt->nparam * sizeof *h), "a second pass differs");
    data_split small;
    split_random(&small, 5, 5, 43);
    CHECK(t, fisher_diag(e, nt, &small, &fc, h2, &res, &err) == -1 && strstr(err.msg, "split"),
          "a 5-image split: '%s'", err.msg);
    fc.batches = 0;
    CHECK(t, fisher_diag(e, nt, &s, &fc, h2, &res, &err) == -1, "0 batches accepted");
    exec_free(e);
    free(h), free(h2), free(param), free(buf);
    split_free(&s), split_free(&small);
    net_free(nt);
}

int main(void) {
    gsl_set_error_handler_off();
    tctx t = {.suite = "test_kmeans_weighted"};
    RUN(&t, test_weighted_means);
    RUN(&t, test_zero_weight_cluster);
    RUN(&t, test_equal_weights);
    RUN(&t, test_null_weights_golden);
    RUN(&t, test_weighted_few_values);
    RUN(&t, test_weighted_starts);
    RUN(&t, test_weights_checks);
    RUN(&t, test_net_equal_h);
    RUN(&t, test_net_weighted_error);
    RUN(&t, test_heavy_weights);
    RUN(&t, test_fisher_linear);
    RUN(&t, test_fisher_net);
    return check_finish(&t);
}
