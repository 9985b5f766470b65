// The distillation targets (train/distill.h) against a direct computation in
// double: q = alpha onehot(label) + (1 - alpha) softmax(z) sums to 1 per
// row, alpha 1 gives the one-hot label and alpha 0 the softmax, the entropy
// returned is the rows' total, and logits of 1e4 stay finite. The teacher
// itself (distill_open / distill_batch) runs in tests/cli_prune.sh.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/rng.h"
#include "tests/check.h"
#include "train/distill.h"

#define N 5
#define K 7

// Softmax of row z (k values) in double into p.
static void softmax(const float *z, int k, double *p) {
    double mx = z[0], s = 0.0;
    for (int j = 1; j < k; j++) mx = z[j] > mx ? z[j] : mx;
    for (int j = 0; j < k; j++) s += exp((double)z[j] - mx);
    for (int j = 0; j < k; j++) p[j] = exp((double)z[j] - mx) / s;
}

// Random logits in [-scale, scale] and labels.
static void fill(float *z, int *labels, double scale, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 0);
    for (int i = 0; i < N * K; i++) z[i] = (float)(scale * (2.0 * rng_uniform(&r) - 1.0));
    for (int i = 0; i < N; i++) labels[i] = (int)rng_below(&r, K);
}

// Every alpha in a grid: the targets against double, the entropy against its definition.
static void test_targets_vs_double(tctx *t) {
    float z[N * K], q[N * K];
    int labels[N];
    fill(z, labels, 4.0, 11);
    const float alphas[4] = {0.0f, 0.3f, 0.5f, 1.0f};
    for (int a = 0; a < 4; a++) {
        const double ent = distill_targets(z, labels, N, K, alphas[a], q);
        double want_ent = 0.0;
        for (int i = 0; i < N; i++) {
            double p[K], sum = 0.0;
            softmax(z + i * K, K, p);
            for (int j = 0; j < K; j++) {
                const double w = alphas[a] * (j == labels[i]) + (1.0 - alphas[a]) * p[j];
                CHECK_CLOSE(t, q[i * K + j], w, 1e-6);
                sum += q[i * K + j];
                if (w > 0) want_ent -= w * log(w);
            }
            CHECK_CLOSE(t, sum, 1.0, 1e-6);
        }
        CHECK_CLOSE(t, ent, want_ent, 1e-5);
    }
}

// alpha 1: exactly the one-hot label, entropy 0.
static void test_alpha_one_is_label(tctx *t) {
    float z[N * K], q[N * K];
    int labels[N];
    fill(z, labels, 4.0, 12);
    const double ent = distill_targets(z, labels, N, K, 1.0f, q);
    int bad = 0;
    for (int i = 0; i < N * K; i++) bad += q[i] != (i % K == labels[i / K] ? 1.0f : 0.0f);
    CHECK(t, bad == 0, "%d targets are not the one-hot label", bad);
    CHECK(t, ent == 0.0, "entropy %g", ent);
}

// Logits of size 1e4 (exp would overflow without the max taken off): finite targets summing to 1.
static void test_large_logits(tctx *t) {
    float z[N * K], q[N * K];
    int labels[N];
    fill(z, labels, 1e4, 13);
    const double ent = distill_targets(z, labels, N, K, 0.25f, q);
    for (int i = 0; i < N; i++) {
        double sum = 0.0;
        for (int j = 0; j < K; j++) sum += q[i * K + j];
        CHECK(t, isfinite(sum) && fabs(sum - 1.0) < 1e-5, "row %d sums to %g", i, sum);
    }
    CHECK(t, isfinite(ent), "entropy %g", ent);
}

int main(void) {
    tctx t = {.suite = "test_distill"};
    RUN(&t, test_targets_vs_double);
    RUN(&t, test_alpha_one_is_label);
    RUN(&t, test_large_logits);
    return check_finish(&t);
}
