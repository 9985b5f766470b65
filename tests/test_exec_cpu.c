// Tests of the CPU executor backend (runtime/exec_cpu.c) through exec.h:
// whole-net gradients against finite differences of the executor's own loss
// (a residual net without BN through eval, one with BN through zero-lr train
// steps), LeNet overfitting one batch, masks keeping weights and momentum at
// exactly zero, bitwise determinism across executors, eval statistics and
// the host copies.
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

// Compares exec_read_grad with central differences of the loss for every
// trainable parameter of the net; returns the number of elements checked.
static int grad_check(tctx *t, const char *desc, int bn_train, uint64_t seed) {
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
    free(grad);
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

// Gradients of the plain residual net against finite differences of eval losses.
static void test_grad_plain(tctx *t) {
    int n = grad_check(t, DESC_PLAIN, 0, 1);
    CHECK(t, n > 400, "only %d parameters checked", n);
}

// Gradients of the BN net against finite differences of zero-lr train-step losses.
static void test_grad_bn(tctx *t) {
    int n = grad_check(t, DESC_BN, 1, 2);
    CHECK(t, n > 400, "only %d parameters checked", n);
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
    RUN(&t, test_grad_bn);
    RUN(&t, test_lenet_overfit);
    RUN(&t, test_masks);
    RUN(&t, test_deterministic);
    RUN(&t, test_eval_stats);
    RUN(&t, test_copies_and_errors);
    return check_finish(&t);
}
