// Tests of the CPU executor backend (runtime/exec_cpu.c) through exec.h:
// whole-net gradients against finite differences of the executor's own loss
// (a residual net without BN and a net with concats through eval, one with
// BN through zero-lr train steps), LeNet overfitting one batch, masks keeping weights and momentum at
// exactly zero, bitwise determinism across executors, eval statistics and
// the host copies. Soft targets (exec_batch.soft): the loss kernel against
// the formula and against the hard-label loss for one-hot targets, the
// whole-net gradient against finite differences, label smoothing ignored,
// and evaluation applying the batch's crop/flip like training.
//
// Finite differences are taken in float through the executor, and every
// parameter is checked with |num - ana| <= 1e-2 * |ana| + 1e-4 * (1e-3 / h)
// for step h = 1e-3 (observed errors <= 2e-5: float noise of the loss
// divided by 2h). When the step crosses a ReLU/max-pool kink the numeric
// value is wrong, not the analytic one (it converges to the analytic value
// as h shrinks), so a failing element is retried with h = 3e-4 and 1e-4;
// at most 10% of the elements may need a retry, and none may fail all three.
// A missing or doubled term in a backward pass gives errors of the
// gradient's own size (1e-3 to 1e-1) at every step.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/loss.h"
#include "runtime/exec.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/testutil.h"

#define FD_RTOL 1e-2
#define FD_ATOL 1e-4  // at h = 1e-3, scaled by 1e-3 / h

static const float FD_STEPS[3] = {1e-3f, 3e-4f, 1e-4f};

#define TB_STREAM 7  // rng stream of this file's random batches
#define TB_SHIFT 2   // their crop offsets lie in [-2, 2]

// --- helpers ----------------------------------------------------------------

// Builds a net from a description for (3, hw, hw) input, weights seeded;
// gammas and betas randomised so their gradients are not trivial.
static net *tnet_make(const char *desc, int hw, int classes, uint64_t seed, sc_err *err) {
    net *nt = net_from_desc("test", desc, 3, hw, hw, classes, err);
    if (!nt) return NULL;
    tnet_randomize(nt, seed, 0);
    return nt;
}

// Mean loss of the batch at the net's current parameters: through eval, or
// (bn_train) through a train step with lr 0 (training-mode BN, params kept).
static double exec_loss(exec *e, const exec_batch *b, int bn_train, float smoothing) {
    sc_err err = {0};
    exec_stats s;
    exec_hparams h = {.label_smoothing = smoothing};
    if (exec_write_net(e, &err)) return NAN;
    int rc = bn_train ? exec_train_step(e, b, &h, &err) : exec_eval_batch(e, b, smoothing, NULL, &err);
    if (rc || exec_stats_take(e, &s, &err) || s.count != b->n) return NAN;
    return s.loss_sum / (double)s.count;
}

// --- gradient checks --------------------------------------------------------

// Central difference of the loss w.r.t. parameter i of the net with step h.
static double fd_param(exec *e, net *nt, const exec_batch *b, int bn_train, float smoothing,
                       size_t i, float h) {
    const float keep = nt->param[i];
    nt->param[i] = keep + h;
    const double lp = exec_loss(e, b, bn_train, smoothing);
    nt->param[i] = keep - h;
    const double lm = exec_loss(e, b, bn_train, smoothing);
    nt->param[i] = keep;
    return (lp - lm) / (2.0 * (double)h);
}

// Error of num against ana in units of the tolerance for step h (> 1: fails).
static double fd_excess(double num, double ana, float h) {
    double x = fabs(num - ana) / (FD_RTOL * fabs(ana) + FD_ATOL * (1e-3 / h));
    return isnan(x) ? INFINITY : x;  // NaN: a failed loss evaluation
}

// Random target distributions (n, k), every entry > 0, rows summing to 1.
static float *soft_random(int n, int k, uint64_t seed) {
    rng g;
    rng_seed(&g, seed, 11);
    float *q = malloc((size_t)n * k * sizeof *q);
    for (int i = 0; i < n; i++) {
        double sum = 0.0;
        for (int j = 0; j < k; j++) sum += q[i * k + j] = 0.01f + rng_uniform(&g);
        for (int j = 0; j < k; j++) q[i * k + j] = (float)(q[i * k + j] / sum);
    }
    return q;
}

// Compares exec_read_grad with central differences of the loss for every
// trainable parameter of the net (soft: against random soft targets);
// returns the number of elements checked.
static int grad_check(tctx *t, const char *desc, int bn_train, uint64_t seed, int soft) {
    sc_err err = {0};
    const float smoothing = 0.1f;
    net *nt = tnet_make(desc, 8, 5, seed, &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return 0;
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 4, &err);
    CHECK(t, e != NULL, "%s", err.msg);
    if (!e) return net_free(nt), 0;
    tbatch tb;
    tbatch_make(&tb, 3, 8, 8, 5, seed, TB_STREAM, TB_SHIFT, 1);
    float *q = soft ? soft_random(3, 5, seed) : NULL;
    tb.b.soft = q;
    float *grad = malloc(nt->nparam * sizeof *grad);
    exec_hparams h = {.label_smoothing = smoothing};
    exec_stats st;
    CHECK(t, exec_train_step(e, &tb.b, &h, &err) == 0, "%s", err.msg);
    exec_read_grad(e, grad, &err);
    exec_stats_take(e, &st, &err);
    double worst = 0.0, wnum = 0.0;
    size_t wi = 0, bad = 0, retried = 0;
    for (size_t i = 0; i < nt->nparam; i++) {
        int s = 0;
        double num = fd_param(e, nt, &tb.b, bn_train, smoothing, i, FD_STEPS[0]);
        const double first = num, excess = fd_excess(num, grad[i], FD_STEPS[0]);
        while (fd_excess(num, grad[i], FD_STEPS[s]) > 1.0 && ++s < 3)
            num = fd_param(e, nt, &tb.b, bn_train, smoothing, i, FD_STEPS[s]);
        bad += s == 3;
        retried += s > 0 && s < 3;
        if (s == 3 && excess > worst) worst = excess, wi = i, wnum = first;
    }
    CHECK(t, bad == 0, "%zu of %zu gradients off at every step; worst param %zu: analytic %.6g "
          "numeric %.6g (h = 1e-3)", bad, nt->nparam, wi, (double)grad[wi], wnum);
    CHECK(t, retried * 10 <= nt->nparam, "%zu of %zu gradients needed a smaller step", retried,
          nt->nparam);
    int n = (int)nt->nparam;
    free(grad), free(q);
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
    return n;
}

// A residual net without BN: every layer kind but BN, an output read by three
// layers (r1: gradients accumulated by a conv and by an add), an add of a
// layer with itself, a branch from the input, stride and padding.
static const char *DESC_PLAIN =
    "conv 4 3 pad=1 name=c1\n"
    "relu name=r1\n"
    "conv 4 3 pad=1 name=c2\n"
    "add r1 name=a1\n"
    "conv 4 1 bias=0 from=input name=skip\n"
    "add a1 name=a2\n"
    "conv 4 1 from=r1 name=late\n"
    "add a2 name=a3\n"
    "add a3 from=a3\n"
    "relu\n"
    "maxpool 2\n"                     // 8 -> 4
    "conv 6 3 stride=2 pad=1 bias=0\n"  // 4 -> 2
    "avgpool 3 stride=1 pad=1\n"
    "relu\n"
    "gap\n"
    "linear 7\n"
    "relu\n"
    "linear classes\n";

// A small ResNet-style net with BN (training-mode statistics in the loss); a
// ReLU working in place on a BN output that two layers read. (More ReLUs
// after BN put kinks inside the finite-difference step: BN centres them at 0.)
static const char *DESC_BN =
    "conv 4 3 pad=1 bias=0 name=c1\n"
    "bn name=b1\n"
    "relu name=r1\n"
    "conv 4 3 pad=1 bias=0\n"
    "bn eps=1e-3\n"
    "add r1\n"
    "conv 6 3 stride=2 pad=1 bias=0\n"
    "bn momentum=0.2\n"
    "gap\n"
    "linear classes\n";

// DenseNet-style joins: a concat of a conv, a ReLU output that it reads twice
// and the network input (gradients accumulated into one buffer and dropped
// for the input), then a concat through from= of two earlier outputs.
static const char *DESC_CONCAT =
    "conv 4 3 pad=1 name=c1\n"
    "relu name=r1\n"
    "conv 3 3 pad=1 name=c2\n"
    "concat r1 input r1 name=j\n"       // 3 + 4 + 3 + 4 channels
    "conv 4 1 name=c3\n"
    "concat c2 j from=c3\n"             // 4 + 3 + 14
    "maxpool 2\n"
    "conv 5 3 pad=1\n"
    "gap\n"
    "linear classes\n";

// Gradients of the plain residual net against finite differences of eval losses.
static void test_grad_plain(tctx *t) {
    int n = grad_check(t, DESC_PLAIN, 0, 1, 0);
    CHECK(t, n > 400, "only %d parameters checked", n);
}

// Gradients of the concat net against finite differences of eval losses.
static void test_grad_concat(tctx *t) {
    int n = grad_check(t, DESC_CONCAT, 0, 4, 0);
    CHECK(t, n > 400, "only %d parameters checked", n);
}

// Gradients of the BN net against finite differences of zero-lr train-step losses.
static void test_grad_bn(tctx *t) {
    int n = grad_check(t, DESC_BN, 1, 2, 0);
    CHECK(t, n > 400, "only %d parameters checked", n);
}

// Gradients of the BN net against soft targets (label smoothing 0.1 set and
// ignored) against finite differences of zero-lr train-step losses.
static void test_grad_soft(tctx *t) {
    int n = grad_check(t, DESC_BN, 1, 3, 1);
    CHECK(t, n > 400, "only %d parameters checked", n);
}

// --- soft targets -----------------------------------------------------------

// soft_xent_cpu against -sum q log softmax and (p - q) * scale computed
// directly, for awkward sizes; one-hot targets give the hard-label loss
// with smoothing 0 bit for bit.
static void test_soft_xent_kernel(tctx *t) {
    const int ns[3] = {1, 5, 13}, ks[2] = {7, 100};
    for (int a = 0; a < 3; a++)
        for (int c = 0; c < 2; c++) {
            const int n = ns[a], k = ks[c];
            rng g;
            rng_seed(&g, 40 + (uint64_t)a, (uint64_t)c);
            float *z = malloc((size_t)n * k * sizeof *z), *q = soft_random(n, k, 50 + a + c);
            float *d = malloc((size_t)n * k * sizeof *d), *dh = malloc((size_t)n * k * sizeof *dh);
            int *lab = malloc((size_t)n * sizeof *lab);
            for (int i = 0; i < n * k; i++) z[i] = 40.0f * (rng_uniform(&g) - 0.5f);
            for (int i = 0; i < n; i++) lab[i] = (int)rng_below(&g, (uint32_t)k);
            long hits = -1, hh = -1;
            const double loss = soft_xent_cpu(n, k, z, q, lab, 0.25f, d, &hits);
            double want = 0.0, worst = 0.0;
            long want_hits = 0;
            for (int i = 0; i < n; i++) {
                const float *r = z + (size_t)i * k;
                double mx = r[0], se = 0.0;
                int best = 0;
                for (int j = 1; j < k; j++) best = r[j] > r[best] ? j : best;
                mx = r[best];
                for (int j = 0; j < k; j++) se += exp(r[j] - mx);
                for (int j = 0; j < k; j++) {
                    const double lp = r[j] - mx - log(se), qj = q[(size_t)i * k + j];
                    want -= qj * lp;
                    const double dg = (exp(lp) - qj) * 0.25, got = d[(size_t)i * k + j];
                    if (fabs(got - dg) > worst) worst = fabs(got - dg);
                }
                want_hits += best == lab[i];
            }
            CHECK(t, fabs(loss - want) <= 1e-9 * fabs(want) + 1e-9, "n %d k %d: loss %.12g want %.12g",
                  n, k, loss, want);
            CHECK(t, worst <= 1e-7, "n %d k %d: gradient off by %.3g", n, k, worst);
            CHECK(t, hits == want_hits, "n %d k %d: hits %ld want %ld", n, k, hits, want_hits);
            soft_xent_cpu(n, k, z, q, NULL, 1.0f, NULL, &hits);
            CHECK(t, hits == 0, "no labels, %ld hits", hits);
            for (int i = 0; i < n * k; i++) q[i] = (i % k) == lab[i / k] ? 1.0f : 0.0f;
            const double ls = soft_xent_cpu(n, k, z, q, lab, 1.0f / n, d, &hits);
            const double lh = softmax_xent_cpu(n, k, z, lab, 0.0f, 1.0f / n, dh, &hh);
            CHECK(t, ls == lh && hits == hh && !memcmp(d, dh, (size_t)n * k * sizeof *d),
                  "n %d k %d: one-hot targets: loss %.17g vs %.17g, hits %ld vs %ld", n, k, ls, lh,
                  hits, hh);
            free(z), free(q), free(d), free(dh), free(lab);
        }
}

// Through the executor: one-hot soft targets (smoothing 0.3, ignored) give
// the gradient and loss of hard labels without smoothing, bit for bit; other
// targets another gradient; top-1 still counts the labels.
static void test_soft_train_step(tctx *t) {
    sc_err err = {0};
    net *nt = tnet_make(DESC_BN, 8, 5, 12, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 6, &err);
    if (!e) { CHECK(t, 0, "%s", err.msg); net_free(nt); return; }
    tbatch tb;
    tbatch_make(&tb, 6, 8, 8, 5, 12, TB_STREAM, TB_SHIFT, 1);
    float *g[3], onehot[30];
    exec_stats st[3];
    for (int i = 0; i < 30; i++) onehot[i] = (i % 5) == tb.labels[i / 5] ? 1.0f : 0.0f;
    float *rq = soft_random(6, 5, 12);
    const float *soft[3] = {NULL, onehot, rq};
    const float smooth[3] = {0.0f, 0.3f, 0.0f};
    for (int v = 0; v < 3; v++) {
        g[v] = malloc(nt->nparam * sizeof *g[v]);
        exec_batch b = tb.b;
        b.soft = soft[v];
        exec_hparams h = {.label_smoothing = smooth[v]};
        CHECK(t, exec_write_net(e, &err) == 0 && exec_train_step(e, &b, &h, &err) == 0 &&
                 exec_read_grad(e, g[v], &err) == 0 && exec_stats_take(e, &st[v], &err) == 0,
              "%s", err.msg);
    }
    CHECK(t, !memcmp(g[0], g[1], nt->nparam * sizeof(float)) && st[0].loss_sum == st[1].loss_sum,
          "one-hot targets differ from hard labels (loss %.17g vs %.17g)", st[0].loss_sum,
          st[1].loss_sum);
    CHECK(t, memcmp(g[0], g[2], nt->nparam * sizeof(float)) != 0, "soft targets ignored");
    CHECK(t, st[2].count == 6 && st[2].correct == st[0].correct, "hits %ld vs %ld",
          st[2].correct, st[0].correct);
    for (int v = 0; v < 3; v++) free(g[v]);
    free(rq);
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
}

// Evaluation applies the batch's flip: flipped images give the logits of
// the same images mirrored on the host; with crop offsets the logits of a
// training-mode batch change too (the teacher of distillation sees the
// student's pixels).
static void test_eval_augment(tctx *t) {
    sc_err err = {0};
    net *nt = tnet_make(DESC_BN, 8, 5, 13, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 5, &err);
    if (!e) { CHECK(t, 0, "%s", err.msg); net_free(nt); return; }
    tbatch tb;
    tbatch_make(&tb, 5, 8, 8, 5, 13, TB_STREAM, TB_SHIFT, 1);
    uint8_t *mir = malloc(5 * 3 * 64), ones[5] = {1, 1, 1, 1, 1};
    for (int p = 0; p < 5 * 3 * 8; p++)
        for (int x = 0; x < 8; x++) mir[p * 8 + x] = tb.img[p * 8 + 7 - x];
    exec_batch fl = {5, tb.img, tb.labels, NULL, NULL, ones, NULL};
    exec_batch mb = {5, mir, tb.labels, NULL, NULL, NULL, NULL};
    exec_batch plain = {5, tb.img, tb.labels, NULL, NULL, NULL, NULL};
    float z[4][25];
    CHECK(t, exec_eval_batch(e, &fl, 0.0f, z[0], &err) == 0 &&
             exec_eval_batch(e, &mb, 0.0f, z[1], &err) == 0 &&
             exec_eval_batch(e, &plain, 0.0f, z[2], &err) == 0 &&
             exec_eval_batch(e, &tb.b, 0.0f, z[3], &err) == 0, "%s", err.msg);
    CHECK(t, !memcmp(z[0], z[1], sizeof z[0]), "eval ignores flip");
    CHECK(t, memcmp(z[0], z[2], sizeof z[0]) != 0, "flip changes nothing");
    CHECK(t, memcmp(z[3], z[2], sizeof z[0]) != 0, "eval ignores crop and flip");
    free(mir);
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
}

// --- training behaviour -----------------------------------------------------

// Runs `steps` train steps on one batch; returns the first and last batch losses.
static int train_steps(exec *e, const exec_batch *b, const exec_hparams *h, int steps,
                       double *first, double *last, sc_err *err) {
    for (int s = 0; s < steps; s++) {
        exec_stats st;
        SC_TRY(exec_train_step(e, b, h, err));
        SC_TRY(exec_stats_take(e, &st, err));
        if (s == 0) *first = st.loss_sum / st.count;
        *last = st.loss_sum / st.count;
    }
    return 0;
}

// LeNet memorises a fixed batch of 16 random images: the loss falls well below log(10).
static void test_lenet_overfit(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return;
    rng g;
    rng_seed(&g, 5, 0);
    net_init_weights(nt, &g);
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 16, &err);
    CHECK(t, e != NULL, "%s", err.msg);
    tbatch tb;
    tbatch_make(&tb, 16, 32, 32, 10, 5, TB_STREAM, TB_SHIFT, 0);
    exec_hparams h = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = 1};
    double first = 0, last = 0;
    CHECK(t, e && train_steps(e, &tb.b, &h, 60, &first, &last, &err) == 0, "%s", err.msg);
    CHECK(t, first > 1.8 && first < 2.8, "initial loss %g, want about log(10)", first);
    CHECK(t, last < 0.2 * first, "loss %g -> %g after 60 steps", first, last);
    CHECK(t, strcmp(exec_device_name(e), "cpu") == 0, "device %s", exec_device_name(e));
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
}

// Pruned weights (mask 0) become and stay exactly zero, with zero momentum;
// the gradient read back is the one before masking.
static void test_masks(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    rng g;
    rng_seed(&g, 6, 0);
    net_init_weights(nt, &g);
    for (int ti = 0; ti < nt->ntensors; ti++) {
        if (!nt->tensors[ti].prunable) continue;
        float *m = net_tensor_mask(nt, ti);
        for (size_t i = 0; i < nt->tensors[ti].count; i++) m[i] = rng_uniform(&g) < 0.5f ? 0.0f : 1.0f;
    }
    float *before = malloc(nt->nparam * sizeof *before);
    memcpy(before, nt->param, nt->nparam * sizeof *before);  // pruned entries still non-zero
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 8, &err);
    if (!e) { CHECK(t, 0, "%s", err.msg); return; }
    tbatch tb;
    tbatch_make(&tb, 8, 32, 32, 10, 6, TB_STREAM, TB_SHIFT, 1);
    exec_hparams h = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = 1};
    double first, last;
    CHECK(t, train_steps(e, &tb.b, &h, 5, &first, &last, &err) == 0, "%s", err.msg);
    float *mom = malloc(nt->nparam * sizeof *mom), *grad = malloc(nt->nparam * sizeof *grad);
    exec_read_net(e, &err), exec_read_momentum(e, mom, &err), exec_read_grad(e, grad, &err);
    size_t pruned = 0, gnz = 0, changed = 0;
    for (size_t i = 0; i < nt->nparam; i++) {
        if (nt->mask[i] == 0.0f) {
            pruned++;
            gnz += grad[i] != 0.0f;
            CHECK(t, nt->param[i] == 0.0f && mom[i] == 0.0f, "pruned %zu: w %g mom %g", i,
                  nt->param[i], mom[i]);
        } else {
            changed += nt->param[i] != before[i];
        }
    }
    CHECK(t, pruned > 10000, "only %zu pruned", pruned);
    CHECK(t, gnz > pruned / 10, "gradient read back looks masked (%zu of %zu non-zero)", gnz, pruned);
    CHECK(t, changed > (nt->nparam - pruned) / 2, "unpruned weights did not train");
    free(before), free(mom), free(grad);
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
}

// Two executors fed the same batches end with bitwise-equal parameters,
// BN buffers, momentum and statistics.
static void test_deterministic(tctx *t) {
    sc_err err = {0};
    net *nets[2];
    exec *ex[2];
    exec_stats st[2];
    float *mom[2];
    for (int k = 0; k < 2; k++) {
        nets[k] = net_create("resnet20", 3, 32, 32, 10, &err);
        if (!nets[k]) { CHECK(t, 0, "%s", err.msg); return; }
        rng g;
        rng_seed(&g, 8, 0);
        net_init_weights(nets[k], &g);
        ex[k] = exec_create(nets[k], DEV_CPU, PREC_FP32, 6, &err);
        if (!ex[k]) { CHECK(t, 0, "%s", err.msg); return; }
        exec_hparams h = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f,
                          .label_smoothing = 0.1f};
        for (int s = 0; s < 3; s++) {
            tbatch tb;
            tbatch_make(&tb, s == 2 ? 5 : 6, 32, 32, 10, 100 + s, TB_STREAM, TB_SHIFT, 1);
            CHECK(t, exec_train_step(ex[k], &tb.b, &h, &err) == 0, "%s", err.msg);
            tbatch_free(&tb);
        }
        exec_stats_take(ex[k], &st[k], &err);
        exec_read_net(ex[k], &err);
        mom[k] = malloc(nets[k]->nparam * sizeof(float));
        exec_read_momentum(ex[k], mom[k], &err);
    }
    const size_t np = nets[0]->nparam, nb = nets[0]->nbuf;
    CHECK(t, memcmp(nets[0]->param, nets[1]->param, np * sizeof(float)) == 0, "params differ");
    CHECK(t, memcmp(nets[0]->buf, nets[1]->buf, nb * sizeof(float)) == 0, "BN buffers differ");
    CHECK(t, memcmp(mom[0], mom[1], np * sizeof(float)) == 0, "momentum differs");
    CHECK(t, st[0].loss_sum == st[1].loss_sum && st[0].correct == st[1].correct &&
                 st[0].count == 17,
          "stats differ: %.17g/%ld/%ld vs %.17g/%ld", st[0].loss_sum, st[0].correct,
          st[0].count, st[1].loss_sum, st[1].correct);
    CHECK(t, isfinite(st[0].loss_sum), "loss %g", st[0].loss_sum);
    for (int k = 0; k < 2; k++) exec_free(ex[k]), net_free(nets[k]), free(mom[k]);
}

// --- eval, statistics, copies, errors ---------------------------------------

// Eval logits are repeatable, statistics match them, and train steps update
// the BN running statistics that eval then uses.
static void test_eval_stats(tctx *t) {
    sc_err err = {0};
    net *nt = tnet_make(DESC_BN, 8, 5, 9, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 7, &err);
    if (!e) { CHECK(t, 0, "%s", err.msg); return; }
    tbatch tb;
    tbatch_make(&tb, 7, 8, 8, 5, 9, TB_STREAM, TB_SHIFT, 0);
    float z[2][35];
    exec_stats s;
    CHECK(t, exec_eval_batch(e, &tb.b, 0.0f, z[0], &err) == 0, "%s", err.msg);
    CHECK(t, exec_eval_batch(e, &tb.b, 0.0f, z[1], &err) == 0, "%s", err.msg);
    CHECK(t, memcmp(z[0], z[1], sizeof z[0]) == 0, "eval not repeatable");
    exec_stats_take(e, &s, &err);
    double loss = 0.0;
    long hits = 0;
    for (int i = 0; i < 7; i++) {
        const float *r = z[0] + i * 5;
        int best = 0;
        double se = 0.0;
        for (int j = 0; j < 5; j++) best = r[j] > r[best] ? j : best, se += exp(r[j]);
        loss += log(se) - r[tb.labels[i]];
        hits += best == tb.labels[i];
    }
    CHECK(t, s.count == 14 && s.correct == 2 * hits, "count %ld correct %ld (want 14, %ld)",
          s.count, s.correct, 2 * hits);
    CHECK_CLOSE(t, s.loss_sum, 2 * loss, 1e-5);
    exec_stats_take(e, &s, &err);
    CHECK(t, s.count == 0 && s.loss_sum == 0.0, "stats not reset");
    exec_hparams h = {.lr = 0.0f};
    CHECK(t, exec_train_step(e, &tb.b, &h, &err) == 0, "%s", err.msg);
    exec_read_net(e, &err);
    int var = net_tensor_find(nt, "b1.var"), mean = net_tensor_find(nt, "b1.mean");
    CHECK(t, var >= 0 && mean >= 0, "no b1 buffers");
    const float *rv = net_tensor_data(nt, var), *rm = net_tensor_data(nt, mean);
    CHECK(t, rv[0] != 1.0f && rm[0] != 0.0f, "running stats unchanged: %g %g", rm[0], rv[0]);
    CHECK(t, exec_eval_batch(e, &tb.b, 0.0f, z[1], &err) == 0, "%s", err.msg);
    CHECK(t, memcmp(z[0], z[1], sizeof z[0]) != 0, "eval ignores the new running stats");
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
}

// write_net/read_net and momentum round-trip; bad batches and fp16 are refused.
static void test_copies_and_errors(tctx *t) {
    sc_err err = {0};
    net *nt = tnet_make(DESC_PLAIN, 8, 5, 10, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    CHECK(t, exec_create(nt, DEV_CPU, PREC_FP16, 4, &err) == NULL, "fp16 accepted on the CPU");
    CHECK(t, exec_create(nt, DEV_CPU, PREC_FP32, 0, &err) == NULL, "batch 0 accepted");
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 4, &err);
    if (!e) { CHECK(t, 0, "%s", err.msg); return; }
    float *mom = malloc(nt->nparam * sizeof *mom), *back = malloc(nt->nparam * sizeof *back);
    for (size_t i = 0; i < nt->nparam; i++) mom[i] = (float)i * 0.5f;
    exec_write_momentum(e, mom, &err);
    exec_read_momentum(e, back, &err);
    CHECK(t, memcmp(mom, back, nt->nparam * sizeof *mom) == 0, "momentum round trip");
    memcpy(back, nt->param, nt->nparam * sizeof *back);
    nt->param[3] = 42.0f;  // host change not uploaded: read_net restores the device copy
    exec_read_net(e, &err);
    CHECK(t, nt->param[3] == back[3], "read_net did not restore the executor's copy");
    nt->param[3] = 42.0f;
    exec_write_net(e, &err);
    nt->param[3] = 0.0f;
    exec_read_net(e, &err);
    CHECK(t, nt->param[3] == 42.0f, "write_net did not upload");
    tbatch tb;
    tbatch_make(&tb, 5, 8, 8, 5, 10, TB_STREAM, TB_SHIFT, 0);
    exec_hparams h = {.lr = 0.1f};
    err.msg[0] = 0;
    CHECK(t, exec_train_step(e, &tb.b, &h, &err) == -1 && err.msg[0], "batch 5 > 4 accepted");
    tb.b.n = 2;
    tb.labels[1] = 5;
    err.msg[0] = 0;
    CHECK(t, exec_eval_batch(e, &tb.b, 0.0f, NULL, &err) == -1 && strstr(err.msg, "label"),
          "label 5 of 5 classes accepted (%s)", err.msg);
    free(mom), free(back);
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_exec_cpu"};
    RUN(&t, test_grad_plain);
    RUN(&t, test_grad_concat);
    RUN(&t, test_grad_bn);
    RUN(&t, test_grad_soft);
    RUN(&t, test_soft_xent_kernel);
    RUN(&t, test_soft_train_step);
    RUN(&t, test_eval_augment);
    RUN(&t, test_lenet_overfit);
    RUN(&t, test_masks);
    RUN(&t, test_deterministic);
    RUN(&t, test_eval_stats);
    RUN(&t, test_copies_and_errors);
    return check_finish(&t);
}
