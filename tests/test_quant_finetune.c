// Tests of centroid fine-tuning and BN recalibration on the CPU executor with
// a tiny random dataset: one step moves each centroid by the summed gradient
// of its kept weights; nothing but the centroids moves; indices, pruned
// zeros and the K-value limit survive; recalibration changes only the BN
// running statistics.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>

#include "runtime/half.h"
#include "quantize/apply.h"
#include "quantize/finetune.h"
#include "tests/testutil.h"

static const char *DESC = "conv 4 3 pad=1 bias=0 name=c1\nbn name=b1\nrelu\nmaxpool 4\n"
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

// The test net with random weights, ~60% of c2 and fc pruned, quantized with
// k-means (k centroids, fp16 codebooks).
static net *net_quantized(int k, quant_model **q) {
    sc_err err = {{0}};
    net *nt = net_from_desc("tiny", DESC, 3, 32, 32, 5, &err);
    tnet_randomize(nt, 8, 1);
    rng r;
    rng_seed(&r, 8, 5);
    for (int t = 0; t < nt->ntensors; t++) {
        if (!nt->tensors[t].prunable) continue;
        float *w = net_tensor_data(nt, t), *m = net_tensor_mask(nt, t);
        for (size_t i = 0; i < nt->tensors[t].count; i++)
            if (rng_uniform(&r) < 0.6f) m[i] = 0.0f, w[i] = 0.0f;
    }
    quant_cfg c = {.method = QM_KMEANS, .codebook_fp16 = 1,
                   .km = {.k = k, .init = KM_INIT_LINEAR, .max_iter = 50, .fp16 = 1}};
    *q = NULL;
    if (quant_net_apply(nt, &c, q, &err)) fprintf(stderr, "quant_net_apply: %s\n", err.msg);
    return nt;
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
    exec_batch b = {ds.train.n, ds.train.images, ds.train.labels, NULL, NULL, NULL};
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
    finetune_cfg fc = {.epochs = 3, .batch = 16, .lr = 2.0f, .momentum = 0.9f, .smoothing = 0.1f,
                       .augment = 1, .seed = 4, .bn_batches = 2, .quiet = 1};
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

int main(void) {
    gsl_set_error_handler_off();
    tctx t = {.suite = "test_quant_finetune"};
    RUN(&t, test_finetune_step);
    RUN(&t, test_finetune_invariants);
    RUN(&t, test_bn_recalibrate);
    return check_finish(&t);
}
