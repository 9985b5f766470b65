// Soft targets (exec_batch.soft) on the GPU executor against the CPU
// executor through exec.h: a run of lr = 0 training steps that switches
// between hard labels and soft targets (hard, hard: the CUDA graph is
// captured; soft: captured again for the other loss; soft: replayed; hard:
// captured again) must give, at every step, the CPU's gradient (unscaled,
// exec_read_grad), loss sum and hits; one-hot soft targets give the hard
// labels' gradient; an eval of an augmented batch gives the CPU's logits
// (the distillation teacher sees the student's crop and flip).
// Tolerances as ||gpu - cpu|| / ||cpu|| over the whole gradient: fp32 1e-3,
// fp16 1e-1 (tests/gpu_test_exec.c explains them). Skipped without a GPU.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/testutil.h"

#define BATCH 6
#define CLASSES 7
#define HW 16

static const char *DESC =
    "conv 8 3 pad=1 bias=0 name=c1\nbn name=b1\nrelu name=r1\n"
    "conv 8 3 pad=1 bias=0 name=c2\nbn name=b2\nadd r1\nrelu\n"
    "maxpool 2\nconv 12 3 stride=2 pad=1 name=c3\nrelu\ngap\nlinear classes name=fc\n";

// Euclidean norm of a - b over that of b (NaN counts as infinite).
static double rel_l2(size_t n, const float *a, const float *b) {
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double x = (double)a[i] - b[i];
        d += x != x ? INFINITY : x * x;
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / (r > 0.0 ? sqrt(r) : 1.0);
}

// A net with seeded weights and randomised gammas and betas.
static net *soft_net(uint64_t seed) {
    sc_err err = {{0}};
    net *nt = net_from_desc("test", DESC, 3, HW, HW, CLASSES, &err);
    if (nt) tnet_randomize(nt, seed, 1);
    else fprintf(stderr, "net: %s\n", err.msg);
    return nt;
}

// Random target distributions (n, k).
static void soft_fill(rng *g, float *q, int n, int k) {
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < k; j++) s += q[i * k + j] = 0.02f + rng_uniform(g);
        for (int j = 0; j < k; j++) q[i * k + j] = (float)(q[i * k + j] / s);
    }
}

// One lr = 0 step on both executors; compares gradient, loss and hits (fp32).
static void step_both(tctx *t, exec *ec, exec *eg, const exec_batch *b, size_t np, float *gc,
                      float *gg, double tol, const char *what) {
    sc_err err = {{0}};
    exec_hparams h = {.label_smoothing = 0.1f};
    exec_stats sc, sg;
    int rc = exec_train_step(ec, b, &h, &err) || exec_read_grad(ec, gc, &err) ||
             exec_stats_take(ec, &sc, &err) || exec_train_step(eg, b, &h, &err) ||
             exec_read_grad(eg, gg, &err) || exec_stats_take(eg, &sg, &err);
    CHECK(t, rc == 0, "%s: %s", what, err.msg);
    if (rc) return;
    const double e = rel_l2(np, gg, gc);
    printf("  info: %s: gradient error %.2g, loss %.6f vs %.6f\n", what, e,
           sg.loss_sum / BATCH, sc.loss_sum / BATCH);
    CHECK(t, e <= tol, "%s: gradient relative error %.3g > %.3g", what, e, tol);
    CHECK(t, fabs(sg.loss_sum - sc.loss_sum) <= tol * fabs(sc.loss_sum) + 1e-6,
          "%s: loss %.6f vs %.6f", what, sg.loss_sum, sc.loss_sum);
    CHECK(t, sg.count == BATCH && (tol > 1e-2 || sg.correct == sc.correct),
          "%s: count %ld, hits %ld vs %ld", what, sg.count, sg.correct, sc.correct);
}

// Steps switching between hard labels and soft targets, an augmented eval,
// then one-hot targets against hard labels on the GPU alone.
static void soft_run(tctx *t, exec *ec, exec *eg, const tbatch *tb, size_t np, double tol) {
    sc_err err = {{0}};
    float q[BATCH * CLASSES], onehot[BATCH * CLASSES], lc[BATCH * CLASSES], lg[BATCH * CLASSES];
    rng g;
    rng_seed(&g, 9, 1);
    soft_fill(&g, q, BATCH, CLASSES);
    for (int i = 0; i < BATCH * CLASSES; i++) onehot[i] = i % CLASSES == tb->labels[i / CLASSES];
    float *gc = malloc(np * sizeof *gc), *gg = malloc(np * sizeof *gg), *gh = malloc(np * sizeof *gh);
    const float *seq[5] = {NULL, NULL, q, q, NULL};
    const char *names[5] = {"hard (eager)", "hard (graph)", "soft (graph again)", "soft (replay)",
                            "hard (graph again)"};
    exec_batch b = tb->b;
    for (int s = 0; s < 5; s++) {
        b.soft = seq[s];
        step_both(t, ec, eg, &b, np, gc, gg, tol, names[s]);
    }
    // evaluation with crop and flip, as the teacher runs it (same BN statistics on both)
    b.soft = NULL;
    int rc = exec_eval_batch(ec, &b, 0.0f, lc, &err) || exec_eval_batch(eg, &b, 0.0f, lg, &err);
    CHECK(t, rc == 0, "%s", err.msg);
    CHECK(t, rel_l2(BATCH * CLASSES, lg, lc) <= tol, "augmented eval logits: %.3g",
          rel_l2(BATCH * CLASSES, lg, lc));
    // one-hot targets (label smoothing 0) against hard labels (smoothing 0)
    exec_hparams h0 = {.label_smoothing = 0.0f};
    rc = exec_train_step(eg, &b, &h0, &err) || exec_read_grad(eg, gh, &err);
    b.soft = onehot;
    rc = rc || exec_train_step(eg, &b, &h0, &err) || exec_read_grad(eg, gg, &err);
    CHECK(t, rc == 0, "%s", err.msg);
    CHECK(t, rel_l2(np, gg, gh) <= 1e-6, "one-hot targets vs hard labels: %.3g", rel_l2(np, gg, gh));
    free(gc), free(gg), free(gh);
}

// Both executors on identical nets, then soft_run.
static void soft_case(tctx *t, sc_precision prec) {
    const double tol = prec == PREC_FP16 ? 1e-1 : 1e-3;
    sc_err err = {{0}};
    net *nc = soft_net(5), *ng = soft_net(5);
    exec *ec = nc ? exec_create(nc, DEV_CPU, PREC_FP32, BATCH, &err) : NULL;
    exec *eg = ng ? exec_create(ng, DEV_GPU, prec, BATCH, &err) : NULL;
    CHECK(t, ec && eg, "%s", err.msg);
    tbatch tb;
    tbatch_make(&tb, BATCH, HW, HW, CLASSES, 8, 3, 4, 1);
    if (ec && eg) soft_run(t, ec, eg, &tb, nc->nparam, tol);
    tbatch_free(&tb);
    exec_free(ec), exec_free(eg);
    net_free(nc), net_free(ng);
}

// fp32: tight tolerances.
static void test_soft_fp32(tctx *t) {
    if (gpu_here(t)) soft_case(t, PREC_FP32);
}

// fp16 (loss scaling in the gradient path).
static void test_soft_fp16(tctx *t) {
    if (gpu_here(t)) soft_case(t, PREC_FP16);
}

// Runs every test; exit status 1 when one failed.
int main(void) {
    tctx t = {.suite = "gpu_test_soft"};
    RUN(&t, test_soft_fp32);
    RUN(&t, test_soft_fp16);
    return check_finish(&t);
}
