// Fine-tuning of k-means codebooks: shared-weight gradients summed per
// centroid, SGD with momentum on the host; optionally the executor's masked
// SGD on the host copy of every unquantized trainable tensor; the decoded
// weights and the other parameters uploaded after each step. With a teacher,
// the loss is distillation from the unquantized model's outputs.
#include "finetune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/loader.h"
#include "kernels/sgd.h"
#include "runtime/half.h"
#include "runtime/ops.h"
#include "runtime/progress.h"
#include "train/distill.h"
#include "train/trainer.h"

// --- state ----------------------------------------------------------------------

typedef struct {
    exec *e;
    net *nt;
    quant_model *q;
    const finetune_cfg *c;
    int k;              // centroids per tensor
    float *master;      // (ntensors, k) fp32 centroids the SGD updates
    float *vel;         // (ntensors, k) momentum
    float *best;        // (ntensors, k) codebooks of the best epoch
    float *best_buf;    // (nbuf) BN statistics of the best epoch
    float *grad;        // (nparam) the step's gradient
    float *rate;        // (ntensors) k / sum over kept weights of s_k^2 (s = 1 without row
                        // scales: 1 / the tensor's mean cluster size)
    int nother;         // unquantized trainable tensors trained (0: lr_params is 0)
    int *other;         // (nother) their indices into nt->tensors
    size_t nother_f;    // floats in them
    float *pmom;        // (nother_f) their SGD momentum, tensor after tensor
    float *best_other;  // (nother_f) their values at the best epoch
    train_hparams sched, psched;  // cosine schedules of the centroids and of the others
    long steps, total;  // steps done and planned
    long skipped;       // tensor updates skipped for a non-finite gradient
    distill dist;       // distillation: the teacher's targets (c->teacher borrowed)
} ft_state;

// Lists the trainable tensors that q does not quantize (when lr_params > 0)
// and allocates their momentum and best-epoch copies.
static int ft_others_init(ft_state *s, sc_err *err) {
    const net *nt = s->nt;
    int *quantized = calloc((size_t)(nt->ntensors ? nt->ntensors : 1), sizeof *quantized);
    s->other = malloc((size_t)(nt->ntensors ? nt->ntensors : 1) * sizeof *s->other);
    if (!quantized || !s->other) {
        free(quantized);
        return sc_fail(err, "out of memory (fine-tuning)");
    }
    for (int t = 0; t < s->q->ntensors; t++) quantized[s->q->t[t].tensor] = 1;
    for (int t = 0; s->c->lr_params > 0.0f && t < nt->ntensors; t++)
        if (nt->tensors[t].trainable && !quantized[t]) {
            s->other[s->nother++] = t;
            s->nother_f += nt->tensors[t].count;
        }
    free(quantized);
    s->pmom = calloc(s->nother_f ? s->nother_f : 1, sizeof *s->pmom);
    s->best_other = malloc((s->nother_f ? s->nother_f : 1) * sizeof *s->best_other);
    if (!s->pmom || !s->best_other) return sc_fail(err, "out of memory (fine-tuning)");
    return 0;
}

// Copies the unquantized tensors between the net and a packed buffer
// ((nother_f) floats): into the net when to_net, else out of it.
static void ft_others_copy(ft_state *s, float *packed, int to_net) {
    size_t at = 0;
    for (int i = 0; i < s->nother; i++) {
        const ptensor *p = &s->nt->tensors[s->other[i]];
        float *w = s->nt->param + p->offset;
        if (to_net) memcpy(w, packed + at, p->count * sizeof *w);
        else memcpy(packed + at, w, p->count * sizeof *w);
        at += p->count;
    }
}

// k / (sum of s_k^2 over the kept weights; s = 1 without row scales): the
// summed centroid gradient times it is a mean per weight, and with row
// scales (gradient g * s_k per weight, the centroid moving each weight by
// s_k times its step) one learning rate moves weights by the same relative
// amount as without them.
static float ft_rate(const net *nt, const quant_tensor *t) {
    const float *m = nt->mask + nt->tensors[t->tensor].offset;
    const size_t per = t->row_scale ? t->count / (size_t)t->nrows : 0;
    double sum = 0.0;
    for (size_t i = 0; i < t->count; i++) {
        if (m[i] == 0.0f) continue;
        const double sk = t->row_scale ? t->row_scale[i / per] : 1.0;
        sum += sk * sk;
    }
    return (float)((double)t->k / (sum > 0.0 ? sum : 1.0));
}

// Allocates the state and copies the start codebooks and parameters.
static int ft_init(ft_state *s, exec *e, net *nt, quant_model *q, const finetune_cfg *c,
                   sc_err *err) {
    memset(s, 0, sizeof *s);
    s->e = e, s->nt = nt, s->q = q, s->c = c, s->k = q->k;
    s->sched = (train_hparams){.lr = c->lr, .sched = SCHED_COSINE, .warmup = 0.0f};
    s->psched = (train_hparams){.lr = c->lr_params, .sched = SCHED_COSINE, .warmup = 0.0f};
    size_t nk = (size_t)q->ntensors * (size_t)q->k;
    s->master = malloc(nk * sizeof *s->master);
    s->vel = calloc(nk, sizeof *s->vel);
    s->best = malloc(nk * sizeof *s->best);
    s->grad = malloc((nt->nparam ? nt->nparam : 1) * sizeof *s->grad);
    s->rate = malloc((size_t)(q->ntensors ? q->ntensors : 1) * sizeof *s->rate);
    s->best_buf = malloc((nt->nbuf ? nt->nbuf : 1) * sizeof *s->best_buf);
    if (!s->master || !s->vel || !s->best || !s->grad || !s->rate || !s->best_buf)
        return sc_fail(err, "out of memory (fine-tuning)");
    SC_TRY(ft_others_init(s, err));
    if (c->teacher) SC_TRY(distill_borrow(&s->dist, c->teacher, c->batch, nt->classes, c->alpha, err));
    for (int t = 0; t < q->ntensors; t++) s->rate[t] = ft_rate(nt, &q->t[t]);
    for (int t = 0; t < q->ntensors; t++)
        memcpy(s->master + (size_t)t * s->k, q->t[t].codebook, (size_t)s->k * sizeof(float));
    memcpy(s->best, s->master, nk * sizeof *s->best);
    memcpy(s->best_buf, nt->buf, nt->nbuf * sizeof *s->best_buf);
    ft_others_copy(s, s->best_other, 0);
    return 0;
}

// Frees the state's buffers.
static void ft_free(ft_state *s) {
    free(s->master), free(s->vel), free(s->best), free(s->grad), free(s->rate);
    free(s->best_buf), free(s->other), free(s->pmom), free(s->best_other);
    distill_close(&s->dist);
}

// Writes the decoded codebooks into the net's quantized tensors, as
// quant_net_decode() but one tensor per thread.
static void ft_decode(ft_state *s) {
    const quant_model *q = s->q;
    net *nt = s->nt;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < q->ntensors; i++) {
        const ptensor *p = &nt->tensors[q->t[i].tensor];
        quant_tensor_decode(q, &q->t[i], nt->mask + p->offset, nt->param + p->offset);
    }
}

// Sets every codebook from src ((ntensors, k) floats, rounded as stored),
// decodes into the net and uploads it (with the other parameters and the
// BN statistics as the host holds them).
static int ft_codebooks_set(ft_state *s, const float *src, sc_err *err) {
    for (int t = 0; t < s->q->ntensors; t++)
        for (int j = 0; j < s->k; j++) {
            float v = src[(size_t)t * s->k + j];
            s->q->t[t].codebook[j] = s->q->codebook_fp16 ? half_round(v, NULL) : v;
        }
    ft_decode(s);
    return exec_write_net(s->e, err);
}

// --- one step ---------------------------------------------------------------------

// Sums the gradient of one tensor's kept weights per centroid into gsum
// (k doubles): d loss / d c_j = sum over the weights i with index j of
// g_i * s_k (s_k the scale of i's row, 1 without row scales; the scales
// stay fixed). 0 when the sums are finite.
static int ft_grad_sum(const ft_state *s, const quant_tensor *t, double *gsum) {
    const ptensor *p = &s->nt->tensors[t->tensor];
    const float *g = s->grad + p->offset, *m = s->nt->mask + p->offset;
    for (int j = 0; j < s->k; j++) gsum[j] = 0.0;
    if (t->row_scale) {
        const size_t per = t->count / (size_t)t->nrows;
        for (size_t r = 0, i = 0; r < (size_t)t->nrows; r++) {
            const double sk = t->row_scale[r];
            for (size_t e = i + per; i < e; i++)
                if (m[i] != 0.0f) gsum[t->indices[i]] += (double)g[i] * sk;
        }
    } else {
        for (size_t i = 0; i < t->count; i++)
            if (m[i] != 0.0f) gsum[t->indices[i]] += g[i];
    }
    for (int j = 0; j < s->k; j++)
        if (!isfinite(gsum[j])) return -1;
    return 0;
}

// SGD with momentum (PyTorch semantics) on every tensor's centroids; the
// summed gradients are scaled by the tensor's rate (1 / its mean cluster
// size, see ft_rate), so one rate suits tensors (and nets) of any size.
// One tensor per thread, each summed in order, so the result does not
// depend on the thread count.
static void ft_update(ft_state *s, float lr) {
    long skipped = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : skipped)
    for (int t = 0; t < s->q->ntensors; t++) {
        double gsum[256];  // (k) summed gradient of the tensor's centroids
        if (ft_grad_sum(s, &s->q->t[t], gsum)) {
            skipped++;
            continue;
        }
        float *c = s->master + (size_t)t * s->k, *v = s->vel + (size_t)t * s->k;
        for (int j = 0; j < s->k; j++) {
            v[j] = s->c->momentum * v[j] + (float)gsum[j] * s->rate[t];
            c[j] -= lr * v[j];
        }
    }
    s->skipped += skipped;
}

// True when the n floats of g are all finite.
static int ft_finite(const float *g, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(g[i])) return 0;
    return 1;
}

// The executor's masked SGD (momentum, Nesterov, weight decay) on the host
// copy of every unquantized trainable tensor; a tensor whose gradient is
// not finite is left alone.
static void ft_params_update(ft_state *s, float lr) {
    size_t at = 0;
    for (int i = 0; i < s->nother; i++) {
        const ptensor *p = &s->nt->tensors[s->other[i]];
        const float *g = s->grad + p->offset;
        if (ft_finite(g, p->count))
            sgd_step_cpu(p->count, s->nt->param + p->offset, g, s->pmom + at,
                         s->nt->mask + p->offset, lr, s->c->momentum, s->c->weight_decay,
                         s->c->nesterov);
        else s->skipped++;
        at += p->count;
    }
}

// One step: forward/backward with the decoded weights (nothing updated on
// the device; against the teacher's targets when distilling), centroid and
// parameter updates on the host, the net uploaded.
static int ft_step(ft_state *s, const exec_batch *b, sc_err *err) {
    exec_batch sb = *b;
    sb.soft = NULL;
    if (s->c->teacher) SC_TRY(distill_batch(&s->dist, b, &sb, err));
    SC_TRY(finetune_grad_step(s->e, &sb, s->c->smoothing, s->grad, err));
    ft_update(s, train_lr_at(&s->sched, s->steps, s->total));
    if (s->nother) ft_params_update(s, train_lr_at(&s->psched, s->steps, s->total));
    s->steps++;
    return ft_codebooks_set(s, s->master, err);
}

// --- epochs -----------------------------------------------------------------------

// Runs one epoch over the loader; returns its loss and training accuracy
// (and, distilling, the KL divergence and the teacher's accuracy).
static int ft_epoch(ft_state *s, loader *ld, int ep, finetune_epoch *out, sc_err *err) {
    progress pg;
    char label[64], text[96];
    exec_stats st, sum = {0}, tst = {0};
    exec_batch b;
    snprintf(label, sizeof label, "finetune %d/%d", ep + 1, s->c->epochs);
    progress_start(&pg, stderr, label, loader_batches_per_epoch(ld), s->c->quiet);
    loader_start_epoch(ld, ep);
    SC_TRY(exec_stats_take(s->e, &st, err));
    if (s->c->teacher) SC_TRY(exec_stats_take(s->c->teacher, &tst, err));
    s->dist.ent_sum = 0.0;
    for (long done = 1; loader_next(ld, &b); done++) {
        SC_TRY(ft_step(s, &b, err));
        SC_TRY(exec_stats_take(s->e, &st, err));
        sum.loss_sum += st.loss_sum, sum.correct += st.correct, sum.count += st.count;
        snprintf(text, sizeof text, "loss %.3f acc %5.1f%%", sum.loss_sum / (double)sum.count,
                 100.0 * (double)sum.correct / (double)sum.count);
        progress_update(&pg, done, text);
    }
    progress_finish(&pg, NULL);
    out->epoch = ep + 1;
    out->loss = sum.count ? sum.loss_sum / (double)sum.count : NAN;
    out->train_accuracy = sum.count ? 100.0 * (double)sum.correct / (double)sum.count : NAN;
    out->kl = out->teacher_accuracy = NAN;
    if (!s->c->teacher || !sum.count) return 0;
    SC_TRY(exec_stats_take(s->c->teacher, &tst, err));
    out->kl = (sum.loss_sum - s->dist.ent_sum) / (double)sum.count;
    out->teacher_accuracy = tst.count ? 100.0 * (double)tst.correct / (double)tst.count : NAN;
    return 0;
}

// Evaluates the validation split and keeps the codebooks, the other
// parameters and the BN statistics when they are the best.
static int ft_judge(ft_state *s, const dataset *ds, finetune_epoch *ep, finetune_result *res,
                    sc_err *err) {
    double loss;
    SC_TRY(finetune_bn_recalibrate(s->e, s->nt, ds, s->c, ep->epoch, err));
    SC_TRY(train_evaluate(s->e, &ds->val, s->c->batch, s->c->smoothing, &ep->val_accuracy, &loss,
                          err));
    if (s->c->teacher)
        log_line(stderr, s->c->quiet, "quantize: finetune epoch %d/%d: loss %.4f (KL %.4f) train "
                 "%.2f%% (teacher %.2f%%) val %.2f%%", ep->epoch, s->c->epochs, ep->loss, ep->kl,
                 ep->train_accuracy, ep->teacher_accuracy, ep->val_accuracy);
    else
        log_line(stderr, s->c->quiet, "quantize: finetune epoch %d/%d: loss %.4f train %.2f%% val %.2f%%",
                 ep->epoch, s->c->epochs, ep->loss, ep->train_accuracy, ep->val_accuracy);
    if (ep->val_accuracy > res->best_val) {
        res->best_val = ep->val_accuracy;
        res->best_epoch = ep->epoch;
        memcpy(s->best, s->master, (size_t)s->q->ntensors * s->k * sizeof *s->best);
        memcpy(s->best_buf, s->nt->buf, s->nt->nbuf * sizeof *s->best_buf);
        ft_others_copy(s, s->best_other, 0);
    }
    return 0;
}

// Fine-tunes the codebooks (and the other parameters) and keeps the best epoch's.
int finetune_run(exec *e, net *nt, quant_model *q, const dataset *ds, const finetune_cfg *c,
                 double start_val, finetune_result *res, sc_err *err) {
    memset(res, 0, sizeof *res);
    res->best_val = start_val;
    if (q->method != QM_KMEANS) return sc_fail(err, "fine-tuning needs k-means codebooks");
    if (q->k < 1 || q->k > 256) return sc_fail(err, "fine-tuning: %d centroids (1..256)", q->k);
    if (c->teacher && !(c->alpha >= 0.0f && c->alpha <= 1.0f))
        return sc_fail(err, "distillation: alpha %g outside 0..1", (double)c->alpha);
    if (c->epochs <= 0 || q->ntensors == 0) return 0;
    res->hist = calloc((size_t)c->epochs, sizeof *res->hist);
    if (!res->hist) return sc_fail(err, "out of memory");
    ft_state s;
    loader ld;
    memset(&ld, 0, sizeof ld);
    double t0 = progress_clock();
    int rc = ft_init(&s, e, nt, q, c, err);
    if (!rc) rc = loader_init(&ld, &ds->train, c->batch, c->augment, c->seed, err);
    if (!rc) s.total = (long)loader_batches_per_epoch(&ld) * c->epochs;
    res->trained_tensors = s.nother;
    if (!rc && s.nother)
        log_line(stderr, c->quiet, "quantize: fine-tuning also trains %d unquantized tensors "
                 "(%zu parameters, lr %g)", s.nother, s.nother_f, (double)c->lr_params);
    if (!rc && c->teacher)
        log_line(stderr, c->quiet, "quantize: fine-tuning distills from the unquantized model "
                 "(targets %g * label + %g * teacher softmax, T 1)", (double)c->alpha,
                 1.0 - (double)c->alpha);
    for (int ep = 0; !rc && ep < c->epochs; ep++) {
        rc = ft_epoch(&s, &ld, ep, &res->hist[ep], err);
        if (!rc) rc = ft_judge(&s, ds, &res->hist[ep], res, err);
        res->nepochs = ep + 1;
    }
    res->images = s.steps * (long)c->batch;
    if (!rc && s.skipped)
        log_line(stderr, c->quiet, "quantize: %ld tensor updates skipped (gradient not finite)",
                 s.skipped);
    if (!rc) memcpy(nt->buf, s.best_buf, nt->nbuf * sizeof *nt->buf);
    if (!rc) ft_others_copy(&s, s.best_other, 1);
    if (!rc) rc = ft_codebooks_set(&s, s.best, err);
    res->seconds = progress_clock() - t0;
    loader_free(&ld);
    ft_free(&s);
    return rc;
}

// --- gradients without a step ------------------------------------------------------

// Forward and backward with nothing updated; the gradient read back when asked.
int finetune_grad_step(exec *e, const exec_batch *b, float smoothing, float *grad, sc_err *err) {
    const exec_hparams frozen = {.lr = 0.0f, .momentum = 0.0f, .weight_decay = 0.0f,
                                 .nesterov = 0, .label_smoothing = smoothing};
    SC_TRY(exec_train_step(e, b, &frozen, err));
    return grad ? exec_read_grad(e, grad, err) : 0;
}

// The next batch, wrapping into the next epoch.
int finetune_next_batch(loader *ld, int *epoch, exec_batch *b) {
    if (loader_batches_per_epoch(ld) <= 0) return 0;
    if (loader_next(ld, b)) return 1;
    loader_start_epoch(ld, ++*epoch);  // more batches than one epoch: the next epoch
    return loader_next(ld, b);
}

// --- batch-norm statistics --------------------------------------------------------

// True when the net has a layer with running statistics (batch norm).
static int ft_has_bn(const net *nt) {
    for (int l = 0; l < nt->nlayers; l++)
        if (op_of(nt->layers[l].kind)->running_stats) return 1;
    return 0;
}

// Runs the training batches that move only the BN running statistics.
static int ft_bn_steps(exec *e, const dataset *ds, const finetune_cfg *c, int round, sc_err *err) {
    loader ld;
    exec_batch b;
    exec_stats st;
    SC_TRY(loader_init(&ld, &ds->train, c->batch, c->augment, c->seed ^ 0x5EEDB00Full, err));
    int rc = 0, epoch = round * 1000;
    loader_start_epoch(&ld, epoch);
    for (int done = 0; !rc && done < c->bn_batches && finetune_next_batch(&ld, &epoch, &b); done++)
        rc = finetune_grad_step(e, &b, c->smoothing, NULL, err);
    if (!rc) rc = exec_stats_take(e, &st, err);
    loader_free(&ld);
    return rc;
}

// Re-estimates the BN running statistics with the current weights.
int finetune_bn_recalibrate(exec *e, net *nt, const dataset *ds, const finetune_cfg *c,
                            int round, sc_err *err) {
    if (c->bn_batches <= 0 || !ft_has_bn(nt)) return 0;
    float *keep = malloc((nt->nparam ? nt->nparam : 1) * sizeof *keep);  // (nparam)
    if (!keep) return sc_fail(err, "out of memory (BN recalibration)");
    memcpy(keep, nt->param, nt->nparam * sizeof *keep);
    int rc = ft_bn_steps(e, ds, c, round, err);
    if (!rc) rc = exec_read_net(e, err);
    memcpy(nt->param, keep, nt->nparam * sizeof *keep);  // exactly the decoded weights again
    free(keep);
    return rc ? rc : exec_write_net(e, err);
}

// Frees the result's history.
void finetune_result_free(finetune_result *r) {
    free(r->hist);
    memset(r, 0, sizeof *r);
}
