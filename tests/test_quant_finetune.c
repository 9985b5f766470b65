// Tests of codebook fine-tuning and BN recalibration on the CPU executor with
// tiny synthetic datasets: one step moves each centroid by the summed
// gradient of its kept weights and every unquantized parameter by the
// executor's SGD (lr_params > 0); with lr_params 0 nothing but the centroids
// moves; indices, pruned zeros and the K-value limit survive; the best epoch
// (codebooks, parameters, BN statistics) is what stays; runs are
// deterministic; the loss of a learnable problem goes down; recalibration
// changes only the BN running statistics. With row scales a centroid moves
// by the gradient summed times each weight's row scale, the scales and
// indices stay, and every weight is exactly centroid * row scale.
// Distillation: the student's logits move toward the unquantized teacher's
// (KL on a fixed batch falls, more than with hard labels), the teacher sees
// the student's augmented pixels (a teacher equal to the student gives KL 0
// with crop and flip on), and a bad alpha is refused.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>

#include "runtime/half.h"
#include "quantize/apply.h"
#include "quantize/finetune.h"
#include "train/distill.h"
#include "tests/testutil.h"

static const char *DESC = "conv 4 3 pad=1 bias=0 name=c1\nbn name=b1\nrelu\nmaxpool 4\n"
                          "conv 6 3 name=c2\nrelu\ngap\nlinear classes name=fc\n";

// The same without BN: training and inference forward passes agree.
static const char *DESC_NOBN = "conv 4 3 pad=1 name=c1\nrelu\nmaxpool 4\n"
                               "conv 6 3 name=c2\nrelu\ngap\nlinear classes name=fc\n";

// --- fixtures -------------------------------------------------------------------

// A random split of n CIFAR-sized images with labels below classes.
static void split_random(data_split *s, int n, int classes, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 0);
    s->n = n;
    s->images = malloc((size_t)n * 3072);
    s->labels = malloc((size_t)n * sizeof *s->labels);
    s->coarse = NULL;
    for (size_t i = 0; i < (size_t)n * 3072; i++) s->images[i] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < n; i++) s->labels[i] = (int)rng_below(&r, (uint32_t)classes);
}

// A dataset of random images: train, val and test splits.
static void dataset_random(dataset *ds, int ntrain) {
    memset(ds, 0, sizeof *ds);
    snprintf(ds->name, sizeof ds->name, "random");
    ds->classes = 5;
    split_random(&ds->train, ntrain, 5, 1);
    split_random(&ds->val, 23, 5, 2);
    split_random(&ds->test, 17, 5, 3);
    for (int c = 0; c < 3; c++) ds->mean[c] = 0.5f, ds->std[c] = 0.25f;
}

// Images whose mean brightness tells the class: class c draws its pixels
// from [c * 256 / classes, (c + 1) * 256 / classes) plus noise.
static void split_learnable(data_split *s, int n, int classes, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 0);
    split_random(s, n, classes, seed);
    for (int i = 0; i < n; i++) {
        int lo = s->labels[i] * 256 / classes, w = 256 / classes;
        for (size_t j = 0; j < 3072; j++)
            s->images[(size_t)i * 3072 + j] = (uint8_t)(lo + (int)rng_below(&r, (uint32_t)w));
    }
}

// A dataset whose classes can be learnt (split_learnable).
static void dataset_learnable(dataset *ds, int ntrain) {
    dataset_random(ds, ntrain);
    data_split *sp[3] = {&ds->train, &ds->val, &ds->test};
    for (int i = 0; i < 3; i++) {
        free(sp[i]->images), free(sp[i]->labels);
        split_learnable(sp[i], i == 0 ? ntrain : 40, ds->classes, 11 + (uint64_t)i);
    }
}

// A net of description desc with random weights, ~60% of c2 and fc pruned,
// quantized with k-means (k centroids, fp16 codebooks); skip_last leaves
// fc.weight in fp32; fc.weight is multiplied by gain (confident outputs).
// *before (when not NULL) gets a copy of the net before quantization.
static net *net_quantized_desc(const char *desc, int k, int skip_last, int rows, float gain,
                               quant_model **q, net **before) {
    sc_err err = {{0}};
    net *nt = net_from_desc("tiny", desc, 3, 32, 32, 5, &err);
    tnet_randomize(nt, 8, 1);
    rng r;
    rng_seed(&r, 8, 5);
    for (int t = 0; t < nt->ntensors; t++) {
        if (!nt->tensors[t].prunable) continue;
        float *w = net_tensor_data(nt, t), *m = net_tensor_mask(nt, t);
        for (size_t i = 0; i < nt->tensors[t].count; i++)
            if (rng_uniform(&r) < 0.6f) m[i] = 0.0f, w[i] = 0.0f;
    }
    const int fc = net_tensor_find(nt, "fc.weight");
    for (size_t i = 0; fc >= 0 && i < nt->tensors[fc].count; i++) net_tensor_data(nt, fc)[i] *= gain;
    quant_cfg c = {.method = QM_KMEANS, .codebook_fp16 = 1,
                   .km = {.k = k, .init = KM_INIT_LINEAR, .max_iter = 50, .fp16 = 1,
                          .row_scale = rows},
                   .skip_last = skip_last};
    *q = NULL;
    if (before && !(*before = distill_net_copy(nt, &err))) fprintf(stderr, "copy: %s\n", err.msg);
    if (quant_net_apply(nt, &c, q, &err)) fprintf(stderr, "quant_net_apply: %s\n", err.msg);
    return nt;
}

// The test net (DESC) quantized as net_quantized_desc says.
static net *net_quantized_opts(int k, int skip_last, int rows, quant_model **q) {
    return net_quantized_desc(DESC, k, skip_last, rows, 1.0f, q, NULL);
}

// The test net, k-means without row scales.
static net *net_quantized_skip(int k, int skip_last, quant_model **q) {
    return net_quantized_opts(k, skip_last, 0, q);
}

// The test net with every conv and linear weight quantized.
static net *net_quantized(int k, quant_model **q) { return net_quantized_skip(k, 0, q); }

// 1 when tensor t of nt is quantized by q.
static int is_quantized(const quant_model *q, int t) {
    for (int i = 0; i < q->ntensors; i++)
        if (q->t[i].tensor == t) return 1;
    return 0;
}

// Checks every quantized tensor: params == decoded codebook, pruned zeros,
// at most K distinct non-zero values, each one of the stored codebook's.
static void check_quantized(tctx *t, const net *nt, const quant_model *q) {
    for (int i = 0; i < q->ntensors; i++) {
        const quant_tensor *qt = &q->t[i];
        const ptensor *p = &nt->tensors[qt->tensor];
        const float *w = nt->param + p->offset, *m = nt->mask + p->offset;
        float *dec = malloc(qt->count * sizeof *dec), seen[256];
        int nseen = 0, outside = 0, zeros = 1;
        quant_tensor_decode(q, qt, m, dec);
        CHECK(t, !memcmp(dec, w, qt->count * sizeof *dec), "%s: params not the decoded codebook", p->name);
        for (size_t j = 0; j < qt->count; j++) {
            if (m[j] == 0.0f) zeros &= w[j] == 0.0f;
            if (w[j] == 0.0f) continue;
            int in_cb = 0, known = 0;
            for (int c = 0; c < qt->k; c++) in_cb |= qt->codebook[c] == w[j];
            for (int c = 0; c < nseen; c++) known |= seen[c] == w[j];
            outside += !in_cb;
            if (!known && nseen < 256) seen[nseen++] = w[j];
        }
        CHECK(t, zeros, "%s: a pruned weight is not zero", p->name);
        CHECK(t, outside == 0, "%s: %d values outside the codebook", p->name, outside);
        CHECK(t, nseen <= qt->k, "%s: %d distinct non-zero values > K = %d", p->name, nseen, qt->k);
        free(dec);
    }
}

// --- tests ----------------------------------------------------------------------

// One step (a single batch, no momentum) moves centroid j of every tensor by
// lr * (k / kept) * the summed gradient of its kept weights.
static void test_finetune_step(tctx *t) {
    dataset ds;
    dataset_random(&ds, 32);
    quant_model *q;
    net *nt = net_quantized(6, &q);
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 32, &err);
    // the reference gradient on the same (whole) training split
    float *g = malloc(nt->nparam * sizeof *g);
    exec_batch b = {ds.train.n, ds.train.images, ds.train.labels, NULL, NULL, NULL, NULL};
    exec_hparams frozen = {.label_smoothing = 0.1f};
    CHECK(t, exec_train_step(e, &b, &frozen, &err) == 0 && exec_read_grad(e, g, &err) == 0, "%s", err.msg);
    float *before = malloc((size_t)q->ntensors * 6 * sizeof *before);
    for (int i = 0; i < q->ntensors; i++) memcpy(before + i * 6, q->t[i].codebook, 6 * sizeof(float));
    finetune_cfg fc = {.epochs = 1, .batch = 32, .lr = 0.5f, .momentum = 0.0f, .smoothing = 0.1f,
                       .augment = 0, .seed = 3, .quiet = 1};
    finetune_result res;
    CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) == 0, "%s", err.msg);
    CHECK(t, res.best_epoch == 1 && res.nepochs == 1, "best %d of %d", res.best_epoch, res.nepochs);
    long moved = 0;
    for (int i = 0; i < q->ntensors; i++) {
        const ptensor *p = &nt->tensors[q->t[i].tensor];
        const float *m = nt->mask + p->offset, *gi = g + p->offset;
        double sum[6] = {0};
        size_t kept = 0;
        for (size_t j = 0; j < p->count; j++)
            if (m[j] != 0.0f) sum[q->t[i].indices[j]] += gi[j], kept++;
        for (int j = 0; j < 6; j++) {
            double want = before[i * 6 + j] - 0.5 * sum[j] * 6.0 / (double)kept;
            double got = q->t[i].codebook[j];
            CHECK(t, fabs(got - want) <= 1e-3 * fabs(want) + 1e-6, "%s centroid %d: %.7g, want %.7g",
                  p->name, j, got, want);
            moved += got != before[i * 6 + j];
        }
    }
    CHECK(t, moved > 0, "no centroid moved");
    finetune_result_free(&res);
    free(g), free(before);
    exec_free(e);
    quant_model_free(q);
    net_free(nt);
    dataset_free(&ds);
}

// Several epochs: only centroids move; indices, zeros, the K limit, biases
// and BN parameters stay; the params are the decoded codebooks.
static void test_finetune_invariants(tctx *t) {
    dataset ds;
    dataset_random(&ds, 50);
    quant_model *q;
    net *nt = net_quantized(4, &q);
    float *orig = malloc(nt->nparam * sizeof *orig);
    memcpy(orig, nt->param, nt->nparam * sizeof *orig);
    uint8_t *idx0 = malloc(nt->nparam);
    size_t at = 0;
    for (int i = 0; i < q->ntensors; i++, at += q->t[i - 1].count) memcpy(idx0 + at, q->t[i].indices, q->t[i].count);
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 16, &err);
    finetune_cfg fc = {.epochs = 3, .batch = 16, .lr = 2.0f, .momentum = 0.9f, .lr_params = 0.0f,
                       .weight_decay = 5e-4f, .nesterov = 1, .smoothing = 0.1f, .augment = 1,
                       .seed = 4, .bn_batches = 2, .quiet = 1};
    finetune_result res;
    CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) == 0, "%s", err.msg);
    at = 0;
    for (int i = 0; i < q->ntensors; i++) {
        const quant_tensor *qt = &q->t[i];
        const ptensor *p = &nt->tensors[qt->tensor];
        CHECK(t, !memcmp(idx0 + at, qt->indices, qt->count), "%s: indices changed", p->name);
        at += qt->count;
        float *dec = malloc(qt->count * sizeof *dec);
        quant_tensor_decode(q, qt, nt->mask + p->offset, dec);
        CHECK(t, !memcmp(dec, nt->param + p->offset, qt->count * sizeof *dec), "%s: params not decoded", p->name);
        free(dec);
        for (int j = 0; j < qt->k; j++)
            CHECK(t, half_round(qt->codebook[j], NULL) == qt->codebook[j], "not fp16");
    }
    check_quantized(t, nt, q);
    CHECK(t, res.trained_tensors == 0, "%d tensors trained with lr_params 0", res.trained_tensors);
    for (int k = 0; k < nt->ntensors; k++) {
        const ptensor *p = &nt->tensors[k];
        if (!p->trainable || p->kind == PT_WEIGHT) continue;
        CHECK(t, !memcmp(orig + p->offset, nt->param + p->offset, p->count * sizeof(float)),
              "%s moved", p->name);
    }
    finetune_result_free(&res);
    free(orig), free(idx0);
    exec_free(e);
    quant_model_free(q);
    net_free(nt);
    dataset_free(&ds);
}

// Checks a row-scaled net: params == decoded, pruned +0, every kept weight
// exactly fp32(codebook[idx] * row_scale[k]), at most K distinct non-zero
// values per row.
static void check_rows(tctx *t, const net *nt, const quant_model *q) {
    for (int i = 0; i < q->ntensors; i++) {
        const quant_tensor *qt = &q->t[i];
        const ptensor *p = &nt->tensors[qt->tensor];
        const float *w = nt->param + p->offset, *m = nt->mask + p->offset;
        CHECK(t, qt->row_scale && qt->nrows == p->dims[0], "%s: no row scales", p->name);
        if (!qt->row_scale) continue;
        const size_t per = qt->count / (size_t)qt->nrows;
        long bad = 0, worst = 0;
        for (size_t j = 0; j < qt->count; j++) {
            float want = m[j] == 0.0f ? 0.0f : qt->codebook[qt->indices[j]] * qt->row_scale[j / per];
            bad += memcmp(&want, &w[j], sizeof want) != 0;
        }
        for (int r = 0; r < qt->nrows; r++) {
            float seen[256];
            int nseen = 0;
            for (size_t j = (size_t)r * per; j < (size_t)(r + 1) * per; j++) {
                int known = 0;
                for (int c = 0; c < nseen; c++) known |= seen[c] == w[j];
                if (w[j] != 0.0f && !known && nseen < 256) seen[nseen++] = w[j];
            }
            if (nseen > worst) worst = nseen;
        }
        CHECK(t, bad == 0, "%s: %ld weights not codebook * row scale (or +0)", p->name, bad);
        CHECK(t, worst <= qt->k, "%s: %ld distinct values in a row > K = %d", p->name, worst, qt->k);
    }
}

// One step with row scales (a single batch, no momentum): centroid j moves
// by lr * k / (sum of s^2 over kept weights) * sum over its weights of g * s;
// the row scales and indices stay.
static void test_finetune_rows_step(tctx *t) {
    dataset ds;
    dataset_random(&ds, 32);
    quant_model *q;
    net *nt = net_quantized_opts(5, 0, 1, &q);
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 32, &err);
    float *g = malloc(nt->nparam * sizeof *g);
    exec_batch b = {ds.train.n, ds.train.images, ds.train.labels, NULL, NULL, NULL, NULL};
    exec_hparams frozen = {.label_smoothing = 0.1f};
    CHECK(t, exec_train_step(e, &b, &frozen, &err) == 0 && exec_read_grad(e, g, &err) == 0, "%s", err.msg);
    float before[16][5], scale0[16][64];
    for (int i = 0; i < q->ntensors; i++) {
        memcpy(before[i], q->t[i].codebook, 5 * sizeof(float));
        memcpy(scale0[i], q->t[i].row_scale, (size_t)q->t[i].nrows * sizeof(float));
    }
    finetune_cfg fc = {.epochs = 1, .batch = 32, .lr = 0.5f, .momentum = 0.0f, .smoothing = 0.1f,
                       .augment = 0, .seed = 3, .quiet = 1};
    finetune_result res;
    CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) == 0, "%s", err.msg);
    long moved = 0;
    for (int i = 0; i < q->ntensors; i++) {
        const quant_tensor *qt = &q->t[i];
        const ptensor *p = &nt->tensors[qt->tensor];
        const float *m = nt->mask + p->offset, *gi = g + p->offset;
        const size_t per = qt->count / (size_t)qt->nrows;
        double sum[5] = {0}, s2 = 0.0;
        for (size_t j = 0; j < p->count; j++) {
            if (m[j] == 0.0f) continue;
            const double sk = qt->row_scale[j / per];
            sum[qt->indices[j]] += gi[j] * sk, s2 += sk * sk;
        }
        for (int j = 0; j < 5; j++) {
            double want = before[i][j] - 0.5 * sum[j] * 5.0 / s2, got = qt->codebook[j];
            CHECK(t, fabs(got - want) <= 1e-3 * fabs(want) + 1e-6, "%s centroid %d: %.7g, want %.7g",
                  p->name, j, got, want);
            moved += got != before[i][j];
        }
        CHECK(t, !memcmp(scale0[i], qt->row_scale, (size_t)qt->nrows * sizeof(float)),
              "%s: row scales changed", p->name);
    }
    CHECK(t, moved > 0, "no centroid moved");
    check_rows(t, nt, q);
    finetune_result_free(&res);
    free(g);
    exec_free(e);
    quant_model_free(q);
    net_free(nt);
    dataset_free(&ds);
}

// Several epochs with row scales and the other parameters trained: indices
// and row scales stay, the weights are centroid * row scale exactly.
static void test_finetune_rows_invariants(tctx *t) {
    dataset ds;
    dataset_random(&ds, 50);
    quant_model *q;
    net *nt = net_quantized_opts(4, 0, 1, &q);
    uint8_t *idx0 = malloc(nt->nparam);
    float *s0 = malloc(nt->nparam * sizeof *s0);
    size_t at = 0, as = 0;
    for (int i = 0; i < q->ntensors; i++) {
        memcpy(idx0 + at, q->t[i].indices, q->t[i].count), at += q->t[i].count;
        memcpy(s0 + as, q->t[i].row_scale, (size_t)q->t[i].nrows * sizeof *s0), as += (size_t)q->t[i].nrows;
    }
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 16, &err);
    finetune_cfg fc = {.epochs = 3, .batch = 16, .lr = 2.0f, .momentum = 0.9f, .lr_params = 0.05f,
                       .weight_decay = 5e-4f, .nesterov = 1, .smoothing = 0.1f, .augment = 1,
                       .seed = 4, .bn_batches = 2, .quiet = 1};
    finetune_result res;
    CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) == 0, "%s", err.msg);
    at = as = 0;
    for (int i = 0; i < q->ntensors; i++) {
        const quant_tensor *qt = &q->t[i];
        CHECK(t, !memcmp(idx0 + at, qt->indices, qt->count), "%s: indices changed", qt->name);
        CHECK(t, !memcmp(s0 + as, qt->row_scale, (size_t)qt->nrows * sizeof *s0),
              "%s: row scales changed", qt->name);
        at += qt->count, as += (size_t)qt->nrows;
        for (int j = 0; j < qt->k; j++)
            CHECK(t, half_round(qt->codebook[j], NULL) == qt->codebook[j], "not fp16");
    }
    check_rows(t, nt, q);
    finetune_result_free(&res);
    free(idx0), free(s0);
    exec_free(e);
    quant_model_free(q);
    net_free(nt);
    dataset_free(&ds);
}

// One step with lr_params > 0 (a single batch, momentum 0, so Nesterov adds
// nothing): every unquantized parameter w becomes (w - lr_p * (g + wd * w) * m) * m,
// the centroids move as without it, and pruned fp32 weights stay zero.
static void test_finetune_params_step(tctx *t) {
    dataset ds;
    dataset_random(&ds, 32);
    quant_model *q;
    net *nt = net_quantized_skip(6, 1, &q);
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 32, &err);
    float *g = malloc(nt->nparam * sizeof *g), *p0 = malloc(nt->nparam * sizeof *p0);
    memcpy(p0, nt->param, nt->nparam * sizeof *p0);
    exec_batch b = {ds.train.n, ds.train.images, ds.train.labels, NULL, NULL, NULL, NULL};
    exec_hparams frozen = {.label_smoothing = 0.1f};
    CHECK(t, exec_train_step(e, &b, &frozen, &err) == 0 && exec_read_grad(e, g, &err) == 0, "%s", err.msg);
    const float lrp = 0.2f, wd = 0.01f;
    finetune_cfg fc = {.epochs = 1, .batch = 32, .lr = 0.5f, .momentum = 0.0f, .lr_params = lrp,
                       .weight_decay = wd, .nesterov = 1, .smoothing = 0.1f, .augment = 0,
                       .seed = 3, .quiet = 1};
    finetune_result res;
    CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) == 0, "%s", err.msg);
    CHECK(t, res.best_epoch == 1 && res.trained_tensors == 5, "best %d, %d tensors trained",
          res.best_epoch, res.trained_tensors);  // b1.gamma/beta, c2.bias, fc.weight/bias
    long moved = 0, bad = 0, zeros = 1;
    for (int k = 0; k < nt->ntensors; k++) {
        const ptensor *p = &nt->tensors[k];
        if (!p->trainable || is_quantized(q, k)) continue;
        for (size_t i = p->offset; i < p->offset + p->count; i++) {
            float m = nt->mask[i];
            double want = (p0[i] - lrp * (g[i] + wd * p0[i]) * m) * m;
            bad += fabs(nt->param[i] - want) > 1e-4 * fabs(want) + 1e-6;
            moved += nt->param[i] != p0[i];
            if (m == 0.0f) zeros &= nt->param[i] == 0.0f;
        }
    }
    CHECK(t, bad == 0, "%ld parameters off the SGD step", bad);
    CHECK(t, moved > 0 && zeros, "moved %ld, pruned zeros %s", moved, zeros ? "kept" : "lost");
    check_quantized(t, nt, q);
    float *dev = malloc(nt->nparam * sizeof *dev);
    memcpy(dev, nt->param, nt->nparam * sizeof *dev);
    CHECK(t, exec_read_net(e, &err) == 0 && !memcmp(dev, nt->param, nt->nparam * sizeof *dev),
          "the executor does not hold the host's parameters");
    finetune_result_free(&res);
    free(g), free(p0), free(dev);
    exec_free(e);
    quant_model_free(q);
    net_free(nt);
    dataset_free(&ds);
}

// Runs fine-tuning with lr_params on a fresh quantized net (skip_last: an
// fp32 pruned weight too); returns the net, its model and the result.
static net *finetune_fresh(tctx *t, const dataset *ds, const finetune_cfg *fc, double start_val,
                           quant_model **q, finetune_result *res) {
    net *nt = net_quantized_skip(4, 1, q);
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, fc->batch, &err);
    CHECK(t, e && finetune_run(e, nt, *q, ds, fc, start_val, res, &err) == 0, "%s", err.msg);
    float *host = malloc(nt->nparam * sizeof *host), *buf = malloc(nt->nbuf * sizeof *buf);
    memcpy(host, nt->param, nt->nparam * sizeof *host);
    memcpy(buf, nt->buf, nt->nbuf * sizeof *buf);
    CHECK(t, exec_read_net(e, &err) == 0 && !memcmp(host, nt->param, nt->nparam * sizeof *host) &&
             !memcmp(buf, nt->buf, nt->nbuf * sizeof *buf), "device and host differ");
    free(host), free(buf);
    exec_free(e);
    return nt;
}

// Several epochs with lr_params: the quantized tensors keep their indices,
// zeros and at most K values (the codebook's); every other trainable tensor
// moves, its pruned entries stay zero.
static void test_finetune_params_invariants(tctx *t) {
    dataset ds;
    dataset_random(&ds, 50);
    quant_model *q, *q0;
    net *n0 = net_quantized_skip(4, 1, &q0);
    finetune_cfg fc = {.epochs = 3, .batch = 16, .lr = 2.0f, .momentum = 0.9f, .lr_params = 0.05f,
                       .weight_decay = 5e-4f, .nesterov = 1, .smoothing = 0.1f, .augment = 1,
                       .seed = 4, .bn_batches = 2, .quiet = 1};
    finetune_result res;
    net *nt = finetune_fresh(t, &ds, &fc, -1.0, &q, &res);
    CHECK(t, res.best_epoch >= 1, "best epoch %d", res.best_epoch);
    check_quantized(t, nt, q);
    for (int i = 0; i < q->ntensors; i++)
        CHECK(t, !memcmp(q0->t[i].indices, q->t[i].indices, q->t[i].count), "%s: indices changed",
              q->t[i].name);
    for (int k = 0; k < nt->ntensors; k++) {
        const ptensor *p = &nt->tensors[k];
        if (!p->trainable || is_quantized(q, k)) continue;
        long moved = 0, zeros = 1;
        for (size_t i = p->offset; i < p->offset + p->count; i++) {
            moved += nt->param[i] != n0->param[i];
            if (nt->mask[i] == 0.0f) zeros &= nt->param[i] == 0.0f;
        }
        CHECK(t, moved > 0, "%s did not move", p->name);
        CHECK(t, zeros, "%s: a pruned weight is not zero", p->name);
    }
    finetune_result_free(&res);
    quant_model_free(q), quant_model_free(q0);
    net_free(nt), net_free(n0);
    dataset_free(&ds);
}

// When no epoch beats the start (start_val above 100), the codebooks, the
// parameters and the BN statistics of the start are what remains.
static void test_finetune_keeps_best(tctx *t) {
    dataset ds;
    dataset_random(&ds, 40);
    quant_model *q, *q0;
    net *n0 = net_quantized_skip(4, 1, &q0);
    finetune_cfg fc = {.epochs = 2, .batch = 16, .lr = 2.0f, .momentum = 0.9f, .lr_params = 0.1f,
                       .weight_decay = 5e-4f, .nesterov = 1, .smoothing = 0.1f, .augment = 1,
                       .seed = 6, .bn_batches = 3, .quiet = 1};
    finetune_result res;
    net *nt = finetune_fresh(t, &ds, &fc, 101.0, &q, &res);
    CHECK(t, res.best_epoch == 0 && res.nepochs == 2, "best %d of %d", res.best_epoch, res.nepochs);
    CHECK(t, !memcmp(n0->param, nt->param, nt->nparam * sizeof(float)), "parameters not restored");
    CHECK(t, !memcmp(n0->buf, nt->buf, nt->nbuf * sizeof(float)), "BN statistics not restored");
    for (int i = 0; i < q->ntensors; i++)
        CHECK(t, !memcmp(q0->t[i].codebook, q->t[i].codebook, (size_t)q->k * sizeof(float)),
              "%s: codebook not restored", q->t[i].name);
    finetune_result_free(&res);
    quant_model_free(q), quant_model_free(q0);
    net_free(nt), net_free(n0);
    dataset_free(&ds);
}

// Two runs with the same seed give the same bits; another seed does not.
static void test_finetune_deterministic(tctx *t) {
    dataset ds;
    dataset_random(&ds, 48);
    finetune_cfg fc = {.epochs = 2, .batch = 16, .lr = 1.0f, .momentum = 0.9f, .lr_params = 0.05f,
                       .weight_decay = 5e-4f, .nesterov = 1, .smoothing = 0.1f, .augment = 1,
                       .seed = 9, .bn_batches = 2, .quiet = 1};
    quant_model *q[3];
    finetune_result res[3];
    net *nt[3];
    for (int r = 0; r < 3; r++) {
        fc.seed = r < 2 ? 9 : 10;
        nt[r] = finetune_fresh(t, &ds, &fc, -1.0, &q[r], &res[r]);
    }
    CHECK(t, !memcmp(nt[0]->param, nt[1]->param, nt[0]->nparam * sizeof(float)) &&
             !memcmp(nt[0]->buf, nt[1]->buf, nt[0]->nbuf * sizeof(float)), "same seed, other net");
    CHECK(t, res[0].hist[1].loss == res[1].hist[1].loss, "same seed, loss %.9g vs %.9g",
          res[0].hist[1].loss, res[1].hist[1].loss);
    CHECK(t, memcmp(nt[0]->param, nt[2]->param, nt[0]->nparam * sizeof(float)) != 0,
          "another seed, same net");
    for (int r = 0; r < 3; r++) {
        finetune_result_free(&res[r]);
        quant_model_free(q[r]);
        net_free(nt[r]);
    }
    dataset_free(&ds);
}

// On a learnable problem (brightness tells the class) the training loss
// goes down: a little with the centroids alone (4 of them), by a fifth at
// least when the other parameters train too, which ends lower.
static void test_finetune_learns(tctx *t) {
    dataset ds;
    dataset_learnable(&ds, 96);
    double last[2];
    for (int v = 0; v < 2; v++) {
        finetune_cfg fc = {.epochs = 10, .batch = 16, .lr = 1.0f, .momentum = 0.9f,
                           .lr_params = v ? 0.2f : 0.0f, .weight_decay = 5e-4f, .nesterov = 1,
                           .smoothing = 0.1f, .augment = 0, .seed = 5, .bn_batches = 4, .quiet = 1};
        quant_model *q;
        finetune_result res;
        net *nt = finetune_fresh(t, &ds, &fc, -1.0, &q, &res);
        double first = res.hist[0].loss;
        last[v] = res.hist[res.nepochs - 1].loss;
        printf("  lr_params %.2f: loss %.4f -> %.4f, train %.1f%% -> %.1f%%, val %.1f%% (kept epoch %d)\n",
               (double)fc.lr_params, first, last[v], res.hist[0].train_accuracy,
               res.hist[res.nepochs - 1].train_accuracy, res.best_val, res.best_epoch);
        CHECK(t, last[v] < (v ? 0.8 * first : first), "lr_params %g: loss %.4f -> %.4f",
              (double)fc.lr_params, first, last[v]);
        check_quantized(t, nt, q);
        finetune_result_free(&res);
        quant_model_free(q);
        net_free(nt);
    }
    CHECK(t, last[1] < last[0], "with lr_params %.4f, without %.4f", last[1], last[0]);
    dataset_free(&ds);
}

// Recalibration changes the BN running statistics and nothing else.
static void test_bn_recalibrate(tctx *t) {
    dataset ds;
    dataset_random(&ds, 40);
    quant_model *q;
    net *nt = net_quantized(8, &q);
    float *p0 = malloc(nt->nparam * sizeof *p0), *b0 = malloc(nt->nbuf * sizeof *b0);
    memcpy(p0, nt->param, nt->nparam * sizeof *p0);
    memcpy(b0, nt->buf, nt->nbuf * sizeof *b0);
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 16, &err);
    finetune_cfg fc = {.batch = 16, .smoothing = 0.1f, .augment = 1, .seed = 2, .bn_batches = 5, .quiet = 1};
    CHECK(t, finetune_bn_recalibrate(e, nt, &ds, &fc, 0, &err) == 0, "%s", err.msg);
    CHECK(t, !memcmp(p0, nt->param, nt->nparam * sizeof *p0), "parameters changed");
    CHECK(t, memcmp(b0, nt->buf, nt->nbuf * sizeof *b0) != 0, "BN statistics unchanged");
    memcpy(b0, nt->buf, nt->nbuf * sizeof *b0);
    CHECK(t, exec_read_net(e, &err) == 0 && !memcmp(p0, nt->param, nt->nparam * sizeof *p0) &&
             !memcmp(b0, nt->buf, nt->nbuf * sizeof *b0), "device and host differ");
    free(p0), free(b0);
    exec_free(e);
    quant_model_free(q);
    net_free(nt);
    dataset_free(&ds);
}

// --- distillation -----------------------------------------------------------------

// Mean KL(softmax(teacher) || softmax(student)) over a batch of logits (n, k).
static double kl_mean(int n, int k, const float *zt, const float *zs) {
    double kl = 0.0;
    for (int i = 0; i < n; i++) {
        const float *a = zt + (size_t)i * k, *b = zs + (size_t)i * k;
        double sa = 0.0, sb = 0.0;
        for (int j = 0; j < k; j++) sa += exp(a[j]), sb += exp(b[j]);
        for (int j = 0; j < k; j++) {
            const double pa = exp(a[j]) / sa;
            kl += pa * (log(pa) - (b[j] - log(sb)));
        }
    }
    return kl / n;
}

// Eval logits (n, classes) of the training split's first n images (no crop or flip).
static int logits_of(exec *e, const dataset *ds, int n, float *z, sc_err *err) {
    exec_batch b = {n, ds->train.images, ds->train.labels, NULL, NULL, NULL, NULL};
    exec_stats st;
    SC_TRY(exec_eval_batch(e, &b, 0.0f, z, err));
    return exec_stats_take(e, &st, err);
}

// Distillation fine-tuning moves the quantized student's logits toward the
// unquantized teacher's (a net without BN, so training and inference
// forward passes agree; confident outputs, 3 centroids): the training KL
// falls epoch by epoch, KL(teacher || student) on fixed images falls, and
// ends below hard-label fine-tuning's (the same run with no teacher, which
// drifts away); the history has KL and teacher accuracy only when distilling.
static void test_distill_toward_teacher(tctx *t) {
    dataset ds;
    dataset_learnable(&ds, 96);
    double kl[2][2];
    for (int v = 0; v < 2; v++) {
        quant_model *q;
        net *tn = NULL, *nt = net_quantized_desc(DESC_NOBN, 3, 0, 0, 6.0f, &q, &tn);
        sc_err err = {{0}};
        exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 16, &err);
        exec *te = tn ? exec_create(tn, DEV_CPU, PREC_FP32, 16, &err) : NULL;
        CHECK(t, e && te, "%s", err.msg);
        if (!e || !te) return;
        float zt[16 * 5], zs[16 * 5];
        CHECK(t, logits_of(te, &ds, 16, zt, &err) == 0 && logits_of(e, &ds, 16, zs, &err) == 0, "%s", err.msg);
        kl[v][0] = kl_mean(16, 5, zt, zs);
        finetune_cfg fc = {.epochs = 3, .batch = 16, .lr = 0.3f, .momentum = 0.9f,
                           .lr_params = 0.01f, .weight_decay = 5e-4f, .nesterov = 1,
                           .smoothing = 0.1f, .augment = 1, .seed = 7, .bn_batches = 0,
                           .quiet = 1, .teacher = v ? NULL : te, .alpha = 0.0f};
        finetune_result res;
        CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) == 0, "%s", err.msg);
        CHECK(t, logits_of(e, &ds, 16, zs, &err) == 0, "%s", err.msg);
        kl[v][1] = kl_mean(16, 5, zt, zs);
        printf("  %s: KL(teacher || student) %.5f -> %.5f (kept epoch %d); training KL by epoch "
               "%.4f %.4f %.4f, teacher %.1f%%\n", v ? "hard labels" : "distillation", kl[v][0],
               kl[v][1], res.best_epoch, res.hist[0].kl, res.hist[1].kl, res.hist[2].kl,
               res.hist[0].teacher_accuracy);
        if (!v)
            CHECK(t, res.hist[2].kl < 0.85 * res.hist[0].kl, "training KL %.5f -> %.5f",
                  res.hist[0].kl, res.hist[2].kl);
        for (int i = 0; i < res.nepochs; i++)
            CHECK(t, v ? isnan(res.hist[i].kl) && isnan(res.hist[i].teacher_accuracy)
                       : isfinite(res.hist[i].kl) && res.hist[i].kl >= -1e-6 &&
                             res.hist[i].teacher_accuracy >= 0.0,
                  "epoch %d: KL %g teacher %g", i + 1, res.hist[i].kl, res.hist[i].teacher_accuracy);
        check_quantized(t, nt, q);
        finetune_result_free(&res);
        exec_free(e), exec_free(te);
        quant_model_free(q);
        net_free(nt), net_free(tn);
    }
    CHECK(t, kl[0][1] < 0.9 * kl[0][0], "distillation: KL %.5f -> %.5f", kl[0][0], kl[0][1]);
    CHECK(t, kl[0][1] < kl[1][1], "KL after distillation %.5f, after hard labels %.5f", kl[0][1],
          kl[1][1]);
    dataset_free(&ds);
}

// The teacher sees the student's pixels: a net without BN (training and
// inference forward agree) taught by a copy of itself, nothing moving
// (learning rates 0), has KL 0 with random crop and flip on; alpha outside
// 0..1 is refused.
static void test_distill_same_pixels(tctx *t) {
    dataset ds;
    dataset_random(&ds, 48);
    quant_model *q;
    net *nt = net_quantized_desc(DESC_NOBN, 4, 0, 0, 1.0f, &q, NULL);
    sc_err err = {{0}};
    net *tn = distill_net_copy(nt, &err);
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 16, &err);
    exec *te = tn ? exec_create(tn, DEV_CPU, PREC_FP32, 16, &err) : NULL;
    CHECK(t, e && te, "%s", err.msg);
    if (!e || !te) return;
    finetune_cfg fc = {.epochs = 2, .batch = 16, .lr = 0.0f, .momentum = 0.9f, .smoothing = 0.1f,
                       .augment = 1, .seed = 8, .quiet = 1, .teacher = te, .alpha = 0.0f};
    finetune_result res;
    CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) == 0, "%s", err.msg);
    for (int i = 0; i < res.nepochs; i++)
        CHECK(t, fabs(res.hist[i].kl) < 1e-5, "epoch %d: KL %.3g with the student as teacher",
              i + 1, res.hist[i].kl);
    finetune_result_free(&res);
    fc.alpha = 2.0f;
    CHECK(t, finetune_run(e, nt, q, &ds, &fc, -1.0, &res, &err) != 0 && strstr(err.msg, "alpha"),
          "alpha 2 accepted (%s)", err.msg);
    finetune_result_free(&res);
    exec_free(e), exec_free(te);
    quant_model_free(q);
    net_free(nt), net_free(tn);
    dataset_free(&ds);
}

int main(void) {
    gsl_set_error_handler_off();
    tctx t = {.suite = "test_quant_finetune"};
    RUN(&t, test_finetune_step);
    RUN(&t, test_finetune_invariants);
    RUN(&t, test_finetune_params_step);
    RUN(&t, test_finetune_rows_step);
    RUN(&t, test_finetune_rows_invariants);
    RUN(&t, test_finetune_params_invariants);
    RUN(&t, test_finetune_keeps_best);
    RUN(&t, test_finetune_deterministic);
    RUN(&t, test_finetune_learns);
    RUN(&t, test_bn_recalibrate);
    RUN(&t, test_distill_toward_teacher);
    RUN(&t, test_distill_same_pixels);
    return check_finish(&t);
}
