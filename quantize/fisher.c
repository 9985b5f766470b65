// The empirical Fisher diagonal of a net's parameters from training
// batches: squared gradients of the batch loss, averaged (fisher.h).
#include "fisher.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/loader.h"
#include "quantize/finetune.h"
#include "runtime/progress.h"

// Mixed into the seed so the Fisher batches are a stream of their own.
#define FISHER_SEED_MIX 0xF15E4D1A6ull

// --- one batch ----------------------------------------------------------------------

// True when the gradient g ((nparam) floats) is finite at every kept entry.
static int fs_finite(const net *nt, const float *g) {
    int bad = 0;
#pragma omp parallel for reduction(| : bad)
    for (size_t i = 0; i < nt->nparam; i++) bad |= nt->mask[i] != 0.0f && !isfinite(g[i]);
    return !bad;
}

// Adds the squared gradient of the kept entries to h.
static void fs_add(const net *nt, const float *g, float *h) {
#pragma omp parallel for
    for (size_t i = 0; i < nt->nparam; i++)
        if (nt->mask[i] != 0.0f) h[i] += g[i] * g[i];
}

// --- the pass -----------------------------------------------------------------------

// Runs the batches and sums their squared gradients into h; counts them in res.
static int fs_batches(exec *e, const net *nt, loader *ld, const fisher_cfg *c, float *g,
                      float *h, fisher_result *res, sc_err *err) {
    progress pg;
    exec_batch b;
    int epoch = 0, rc = 0;
    char text[64];
    progress_start(&pg, stderr, "fisher", c->batches, c->quiet);
    for (int done = 0; !rc && done < c->batches && finetune_next_batch(ld, &epoch, &b); done++) {
        rc = finetune_grad_step(e, &b, 0.0f, g, err);  // the labels' cross-entropy, no smoothing
        if (rc) break;
        if (fs_finite(nt, g)) fs_add(nt, g, h), res->batches++;
        else res->skipped++;
        snprintf(text, sizeof text, "%d skipped", res->skipped);
        progress_update(&pg, done + 1, text);
    }
    progress_finish(&pg, NULL);
    return rc;
}

// The mean squared gradient over c->batches training batches.
int fisher_diag(exec *e, const net *nt, const data_split *train, const fisher_cfg *c, float *h,
                fisher_result *res, sc_err *err) {
    memset(res, 0, sizeof *res);
    if (c->batches < 1) return sc_fail(err, "Fisher: %d batches, at least 1", c->batches);
    const double t0 = progress_clock();
    float *g = malloc((nt->nparam ? nt->nparam : 1) * sizeof *g);  // (nparam) one batch's gradient
    if (!g) return sc_fail(err, "out of memory (Fisher of %zu parameters)", nt->nparam);
    memset(h, 0, nt->nparam * sizeof *h);
    loader ld;
    exec_stats st;
    int rc = loader_init(&ld, train, c->batch, c->augment, c->seed ^ FISHER_SEED_MIX, err);
    if (rc) {
        free(g);
        return sc_wrap(err, "Fisher");
    }
    if (loader_batches_per_epoch(&ld) <= 0)
        rc = sc_fail(err, "Fisher: the training split (%d images) gives no batch of %d", train->n,
                     c->batch);
    if (!rc) rc = fs_batches(e, nt, &ld, c, g, h, res, err);
    if (!rc) rc = exec_stats_take(e, &st, err);  // the passes' loss is nobody's statistic
    if (!rc) rc = exec_write_net(e, err);        // BN running statistics as before
    if (!rc) rc = exec_reset_scaler(e, err);     // fp16 loss scale as before too
    if (!rc && res->batches == 0)
        rc = sc_fail(err, "Fisher: the gradient of every one of %d batches is not finite",
                     res->skipped);
    for (size_t i = 0; !rc && i < nt->nparam; i++) h[i] /= (float)res->batches;
    loader_free(&ld);
    free(g);
    res->seconds = progress_clock() - t0;
    return rc;
}
