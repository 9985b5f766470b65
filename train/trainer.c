// Training-loop pieces shared by the train and prune tools: learning-rate
// schedules, one epoch of masked SGD, evaluation of a split.
#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

// Interpolates from a to b at fraction t in [0, 1], cosine or linear.
static double anneal(double a, double b, double t, int linear) {
    t = fmin(1.0, fmax(0.0, t));
    return linear ? a + (b - a) * t : b + (a - b) * 0.5 * (1.0 + cos(M_PI * t));
}

// Fraction of the current one-cycle phase and whether it is the warm-up.
static double phase_at(const train_hparams *h, long step, long total, int *warm) {
    double t = (double)step / (double)total, w = h->warmup;
    *warm = t < w;
    return *warm ? t / w : (t - w) / fmax(1e-12, 1.0 - w);
}

// Learning rate at `step` of `total` steps under the configured schedule.
float train_lr_at(const train_hparams *h, long step, long total) {
    if (h->sched == SCHED_CONSTANT || total <= 0) return h->lr;
    int warm;
    double u = phase_at(h, step, total, &warm);
    if (h->sched == SCHED_ONECYCLE) {
        double lo = h->lr / 25.0, end = lo / 1e4;
        return (float)(warm ? anneal(lo, h->lr, u, h->anneal_linear)
                            : anneal(h->lr, end, u, h->anneal_linear));
    }
    return (float)(warm ? h->lr * u : anneal(h->lr, 0.0, u, 0));
}

// Momentum at `step`: cycled against the one-cycle rate, else constant.
float train_momentum_at(const train_hparams *h, long step, long total) {
    if (h->sched != SCHED_ONECYCLE || !h->cycle_momentum || total <= 0) return h->momentum;
    int warm;
    double u = phase_at(h, step, total, &warm);
    double hi = fmin(0.999, h->momentum + 0.05), lo = h->momentum - 0.05;
    return (float)(warm ? anneal(hi, lo, u, h->anneal_linear) : anneal(lo, hi, u, h->anneal_linear));
}

// Fills the progress text with the running loss, accuracy, rate and lr.
static void stats_text(const exec_stats *s, float lr, double secs, char *buf, size_t len) {
    double n = s->count ? (double)s->count : 1.0;
    snprintf(buf, len, "loss %.3f acc %5.1f%% %.0f img/s lr %.3g", s->loss_sum / n,
             100.0 * s->correct / n, secs > 0 ? (double)s->count / secs : 0.0, lr);
}

// Adds b into a.
static void stats_add(exec_stats *a, const exec_stats *b) {
    a->loss_sum += b->loss_sum;
    a->correct += b->correct;
    a->count += b->count;
    a->skipped += b->skipped;
}

// Trains one epoch over the loader's batches.
int train_epoch(exec *e, loader *ld, const train_hparams *h, long *step, long total_steps,
                progress *pg, exec_stats *out, sc_err *err) {
    exec_stats total = {0}, part;
    exec_hparams hp = {.momentum = h->momentum, .weight_decay = h->weight_decay,
                       .nesterov = h->nesterov, .label_smoothing = h->smoothing};
    exec_batch b;
    long done = 0;
    char text[128];
    SC_TRY(exec_stats_take(e, &part, err));  // start from clean statistics
    while (loader_next(ld, &b)) {
        hp.lr = train_lr_at(h, *step, total_steps);
        hp.momentum = train_momentum_at(h, *step, total_steps);
        SC_TRY(exec_train_step(e, &b, &hp, err));
        (*step)++;
        done++;
        // Reading statistics syncs the device: do it only every few steps.
        if (pg && (done % 20 == 0 || done == loader_batches_per_epoch(ld))) {
            SC_TRY(exec_stats_take(e, &part, err));
            stats_add(&total, &part);
            stats_text(&total, hp.lr, progress_elapsed(pg), text, sizeof text);
            progress_update(pg, done, text);
        }
    }
    SC_TRY(exec_stats_take(e, &part, err));
    stats_add(&total, &part);
    *out = total;
    return 0;
}

// Evaluates a split in inference mode: accuracy in percent and mean loss.
int train_evaluate(exec *e, const data_split *s, int batch, float smoothing, double *acc,
                   double *loss, sc_err *err) {
    loader ld;
    exec_batch b;
    exec_stats st;
    if (s->n == 0) {
        *acc = *loss = NAN;
        return 0;
    }
    SC_TRY(loader_init(&ld, s, batch, 0, 0, err));
    loader_start_epoch(&ld, 0);
    int rc = exec_stats_take(e, &st, err);
    while (!rc && loader_next(&ld, &b)) rc = exec_eval_batch(e, &b, smoothing, NULL, err);
    if (!rc) rc = exec_stats_take(e, &st, err);
    loader_free(&ld);
    if (rc) return -1;
    *acc = st.count ? 100.0 * (double)st.correct / (double)st.count : NAN;
    *loss = st.count ? st.loss_sum / (double)st.count : NAN;
    return 0;
}
