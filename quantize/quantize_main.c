// The `quantize` tool: k-means codebooks (--centroids K), linear fixed point
// (--bits 8|16) or fp16 (--half) for a trained or pruned model, evaluated
// before and after on the validation and test splits with the decoded
// weights, optionally with sensitivity-weighted k-means (the empirical
// Fisher diagonal from training batches) and centroid fine-tuning (by
// default distilled from the unquantized model's outputs), written as a
// model file whose /params hold the decoded values and /quant the compact
// form.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>

#include "datasets/cifar.h"
#include "quantize/apply.h"
#include "quantize/finetune.h"
#include "quantize/fisher.h"
#include "quantize/quant_report.h"
#include "runtime/cli.h"
#include "runtime/exec.h"
#include "runtime/json.h"
#include "runtime/model_io.h"
#include "runtime/net.h"
#include "runtime/progress.h"
#include "runtime/quant_io.h"
#include "runtime/rundir.h"
#include "train/distill.h"
#include "train/trainer.h"

#define TOOL "quantize"

// --- options ----------------------------------------------------------------

typedef struct {
    cli_common c;
    int centroids, half, iters, asymmetric, bins, skip_first, skip_last, row_scale;
    int ft_epochs, batch, augment, val_size, bn_batches, fisher_batches;
    const char *bits, *init, *codebook, *clip, *granularity, *precision, *ft_distill, *km_weight;
    const char *dataset, *data_dir, *runs, *output;
    double percentile, ft_lr, ft_momentum, ft_lr_params, ft_wd, ft_alpha, smoothing;
    const char *input;  // positional model file, or NULL
} quant_opts;

// The tool's own options (after the common ones).
#define QUANT_OPTS(o)                                                                            \
    {.name = "centroids", .short_name = 'k', .type = OPT_INT, .dst = &(o)->centroids, .min = 2,  \
     .max = 256, .metavar = "K",                                                                 \
     .help = "k-means codebook of K centroids per tensor (2..256; 16: 4-bit indices);\n"         \
             "the method when none of --centroids, --bits, --half is given (K = 16)"},           \
    {.name = "init", .type = OPT_CHOICE, .dst = &(o)->init, .def = "best",                       \
     .choices = KMEANS_INITS, .help = "k-means: initial centroids (linear: evenly over [min, max]; density:\n" \
             "quantiles; best: Lloyd from linear, density and 3 k-means++ draws, least error wins)"}, \
    {.name = "iters", .type = OPT_INT, .dst = &(o)->iters, .def = "100", .min = 1, .max = 100000,\
     .help = "k-means: Lloyd iterations at most"},                                               \
    {.name = "codebook", .type = OPT_CHOICE, .dst = &(o)->codebook, .def = "fp16",               \
     .choices = "fp16|fp32", .help = "k-means: how centroids are stored (and decoded)"},         \
    {.name = "row-scale", .type = OPT_FLAG, .dst = &(o)->row_scale,                              \
     .help = "k-means: a scale per output channel, stored like the codebook; the K centroids\n"  \
             "are shared by the scaled rows (weight = centroid * scale: K values per row)"},     \
    {.name = "kmeans-weight", .type = OPT_CHOICE, .dst = &(o)->km_weight, .def = "auto",          \
     .choices = "auto|fisher|none",                                                              \
     .help = "k-means: weight each kept weight's squared error by its sensitivity (fisher: the\n" \
             "empirical Fisher diagonal, mean squared gradient of the training loss over\n"      \
             "--fisher-batches training batches; Hessian-weighted k-means) or not (none);\n"     \
             "auto: fisher with --centroids, none otherwise"},                                    \
    {.name = "fisher-batches", .type = OPT_INT, .dst = &(o)->fisher_batches, .def = "32",         \
     .min = 1, .max = 1000000, .metavar = "N",                                                   \
     .help = "--kmeans-weight fisher: training batches (of --batch images, crop and flip with\n" \
             "--augment) the squared gradients are averaged over"},                             \
    {.name = "bits", .type = OPT_CHOICE, .dst = &(o)->bits, .choices = "8|16",                   \
     .help = "linear fixed point with 8- or 16-bit integers"},                                   \
    {.name = "asymmetric", .type = OPT_FLAG, .dst = &(o)->asymmetric,                            \
     .help = "linear: zero point and full integer range (default: symmetric, zero point 0)"},   \
    {.name = "scale", .type = OPT_CHOICE, .dst = &(o)->granularity, .def = "channel",            \
     .choices = "channel|layer", .help = "linear: one scale per output channel or per layer"},    \
    {.name = "clip", .type = OPT_CHOICE, .dst = &(o)->clip, .def = "mse", .choices = LINEAR_CLIPS,\
     .help = "linear: saturation level from the histogram: least expected squared error,\n"      \
             "the largest value, or --percentile"},                                              \
    {.name = "percentile", .type = OPT_FLOAT, .dst = &(o)->percentile, .def = "99.99",           \
     .min = 50, .max = 100, .help = "linear --clip percentile: share of |w| kept in range"},     \
    {.name = "bins", .type = OPT_INT, .dst = &(o)->bins, .def = "2048", .min = 16,               \
     .max = 1000000, .help = "linear: histogram bins"},                                          \
    {.name = "half", .type = OPT_FLAG, .dst = &(o)->half,                                        \
     .help = "round every trainable tensor to fp16"},                                            \
    {.name = "skip-first", .type = OPT_FLAG, .dst = &(o)->skip_first, .def = "1",                \
     .help = "k-means/linear: keep the first conv weight (small, dense, not pruned) in fp32\n"  \
             "(--no-skip-first: quantize it too)"},                                              \
    {.name = "skip-last", .type = OPT_FLAG, .dst = &(o)->skip_last,                              \
     .help = "k-means/linear: keep the last linear weight in fp32 (default: quantized)"},        \
    {.name = "finetune-epochs", .type = OPT_INT, .dst = &(o)->ft_epochs, .def = "0", .min = 0,   \
     .max = 100000, .help = "k-means: epochs of fine-tuning the centroids and, with\n"            \
             "--finetune-lr-params > 0, the unquantized parameters (best epoch by validation accuracy)"}, \
    {.name = "finetune-lr", .type = OPT_FLOAT, .dst = &(o)->ft_lr, .def = "0.3", .min = 0,       \
     .max = 100, .help = "fine-tuning: peak learning rate of the centroids (cosine); applied to each\n" \
             "centroid's summed gradient divided by its tensor's mean cluster size (kept / K)"}, \
    {.name = "finetune-lr-params", .type = OPT_FLOAT, .dst = &(o)->ft_lr_params, .def = "0.01",  \
     .min = 0, .max = 10, .metavar = "X",                                                        \
     .help = "fine-tuning: peak learning rate (cosine) of every parameter that is not a\n"       \
             "quantized weight: BN gamma/beta, biases, fp32 weights (0: they stay frozen)"},     \
    {.name = "finetune-wd", .type = OPT_FLOAT, .dst = &(o)->ft_wd, .def = "5e-4", .min = 0,      \
     .max = 1, .metavar = "X", .help = "fine-tuning: weight decay of those parameters (as train's --wd)"}, \
    {.name = "finetune-momentum", .type = OPT_FLOAT, .dst = &(o)->ft_momentum, .def = "0.9",     \
     .min = 0, .max = 0.999,                                                                     \
     .help = "fine-tuning: SGD momentum of the centroids (plain) and the other parameters (Nesterov)"}, \
    {.name = "finetune-distill", .type = OPT_CHOICE, .dst = &(o)->ft_distill, .def = "on",       \
     .choices = "on|off", .help = "fine-tuning: learn from the unquantized model's outputs on the same\n" \
             "augmented batches (knowledge distillation, temperature 1; on), or from the labels\n" \
             "with --smoothing (off)"},                                                          \
    {.name = "finetune-alpha", .type = OPT_FLOAT, .dst = &(o)->ft_alpha, .def = "0", .min = 0,   \
     .max = 1, .metavar = "A", .help = "distillation: targets A * one-hot label + (1 - A) * the unquantized\n" \
             "model's softmax (0..1; label smoothing does not apply)"},                          \
    {.name = "bn-recalibrate", .type = OPT_INT, .dst = &(o)->bn_batches, .def = "-1", .min = -1, \
     .max = 1000000, .metavar = "N",                                                             \
     .help = "re-estimate batch-norm running statistics with the quantized weights from N\n"   \
             "training batches (0: keep the model's; -1: 100 for k-means, 0 otherwise)"},        \
    {.name = "batch", .short_name = 'b', .type = OPT_INT, .dst = &(o)->batch, .def = "256",      \
     .min = 1, .max = 65536, .help = "images per step (evaluation and fine-tuning)"},           \
    {.name = "augment", .type = OPT_FLAG, .dst = &(o)->augment, .def = "1",                      \
     .help = "fine-tuning: random crop and flip (--no-augment: off)"},                           \
    {.name = "smoothing", .type = OPT_FLOAT, .dst = &(o)->smoothing, .def = "0.1", .min = 0,     \
     .max = 0.999, .help = "label smoothing of the loss"},                                       \
    {.name = "precision", .type = OPT_CHOICE, .dst = &(o)->precision, .def = "auto",             \
     .choices = "auto|fp16|fp32", .help = "GPU arithmetic (auto: fp32, so the figures are the quantized weights')"}, \
    {.name = "dataset", .type = OPT_STRING, .dst = &(o)->dataset, .metavar = "SPEC",             \
     .help = "data to evaluate on (default: the model's dataset)"},                              \
    {.name = "val-size", .type = OPT_INT, .dst = &(o)->val_size, .def = "-1", .min = -1,         \
     .max = 1000000, .help = "validation images (-1: the model's split, else 5000 or a tenth)"}, \
    {.name = "data-dir", .type = OPT_STRING, .dst = &(o)->data_dir, .def = "data",               \
     .metavar = "DIR", .help = "where cifar10/cifar100/synthetic live"},                         \
    {.name = "runs", .type = OPT_STRING, .dst = &(o)->runs, .def = "runs", .metavar = "DIR",     \
     .help = "root of the run directories"},                                                     \
    {.name = "output", .short_name = 'o', .type = OPT_STRING, .dst = &(o)->output,               \
     .metavar = "FILE", .help = "quantized model to write (default: model.quant.h5 next to the input)"}

// Checks that at most one method is chosen and that its options fit.
static int opts_check(quant_opts *o) {
    int n = (o->centroids > 0) + (o->bits != NULL) + o->half;
    if (n > 1) {
        cli_error(TOOL, "choose one of --centroids, --bits and --half");
        return CLI_USAGE;
    }
    if (n == 0) o->centroids = 16;
    // BN re-estimation: on by default for k-means only, chosen on the validation split
    // (resnet18 90%, 16 centroids: val 74.80 without, 74.96 with; bench/RESULTS.md).
    if (o->bn_batches < 0) o->bn_batches = o->centroids > 0 ? 100 : 0;
    if (o->row_scale && o->centroids == 0) {
        cli_error(TOOL, "--row-scale needs k-means codebooks (--centroids)");
        return CLI_USAGE;
    }
    if (!strcmp(o->km_weight, "fisher") && o->centroids == 0) {
        cli_error(TOOL, "--kmeans-weight fisher needs k-means codebooks (--centroids)");
        return CLI_USAGE;
    }
    // Sensitivity weighting: on by default for k-means, chosen on the validation split
    // (resnet18 90%, 16 centroids, BN re-estimation: val 74.54 plain, 74.72 weighted;
    // bench/RESULTS.md session 5).
    if (!strcmp(o->km_weight, "auto")) o->km_weight = o->centroids > 0 ? "fisher" : "none";
    if (o->ft_epochs > 0 && o->centroids == 0) {
        cli_error(TOOL, "--finetune-epochs needs k-means codebooks (--centroids)");
        return CLI_USAGE;
    }
    return CLI_OK;
}

// Parses argv into o; returns CLI_OK, CLI_HELP or CLI_USAGE.
static int opts_parse(quant_opts *o, int argc, char **argv) {
    cli_opt opts[] = {CLI_COMMON_OPTS(o->c), QUANT_OPTS(o)};
    o->centroids = 0;
    int rc = cli_parse_one(TOOL, "quantize [options] [MODEL]",
                           "Quantizes a model's conv and linear weights: k-means codebooks, linear fixed\n"
                           "point (Pietron and Zurek, eq. 8-9 and 5-7) or fp16; pruned zeros stay zero.\n"
                           "MODEL: a model file (default: runs/latest/model.pruned.h5, else model.h5).\n"
                           "Evaluates before and after on the model's validation split and the test set.",
                           opts, (int)(sizeof opts / sizeof *opts), argc, argv, &o->input);
    return rc == CLI_OK ? opts_check(o) : rc;
}

// --- the run ----------------------------------------------------------------

typedef struct {
    quant_opts o;
    net *nt;
    model_meta meta;
    dataset ds;
    exec *ex;
    net *tnet;                   // distillation: the unquantized model (teacher), or NULL
    exec *teacher;               // its executor
    sc_device dev;
    sc_precision prec;
    quant_cfg cfg;
    quant_model *q;
    float *orig;                 // (nparam) parameters before quantization
    float *fisher;               // (nparam) --kmeans-weight fisher: sensitivities, else NULL
    fisher_result fres;
    finetune_result ft;
    quant_report rep;
    double val0, test0;          // before
    double val1, test1;          // after quantization, before anything else
    double val2, test2;          // after BN recalibration (NaN without)
    double val, test;            // final
    double t0;
    char in[1100], out[1100], method[128];
} quant_run;

// Finds the input model: the positional path or the latest run's.
static int input_find(quant_run *r, sc_err *err) {
    if (r->o.input) {
        if (snprintf(r->in, sizeof r->in, "%s", r->o.input) >= (int)sizeof r->in)
            return sc_fail(err, "path too long (%s)", r->o.input);
        return 0;
    }
    const char *cand[] = {"model.pruned.h5", "model.h5", NULL};
    return rundir_find_input(r->o.runs, cand, r->in, sizeof r->in, err);
}

// Output path: -o FILE, else model.quant.h5 in the input's directory.
static int output_set(quant_run *r, sc_err *err) {
    if (r->o.output) {
        snprintf(r->out, sizeof r->out, "%s", r->o.output);
        return cli_outputs_check(&r->o.c, r->out, err);
    }
    char dir[1100];
    const char *slash = strrchr(r->in, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - r->in), r->in);
    SC_TRY(rundir_join(r->out, sizeof r->out, slash == r->in ? "/" : dir, "model.quant.h5", err));
    return cli_outputs_check(&r->o.c, r->out, err);
}

// Opens the model's dataset with the split it was trained without.
static int data_open(quant_run *r, sc_err *err) {
    const char *spec = r->o.dataset ? r->o.dataset
                       : r->meta.dataset[0] ? r->meta.dataset : dataset_default_name(r->o.data_dir);
    int val = r->o.val_size >= 0 ? r->o.val_size : cli_args_int(r->meta.config, "--val-size", -1);
    SC_TRY(dataset_open(spec, r->o.data_dir, val, r->meta.seed, &r->ds, err));
    if (r->ds.classes != r->nt->classes)
        return sc_fail(err, "%s: the model has %d classes, dataset %s has %d", r->in,
                       r->nt->classes, spec, r->ds.classes);
    if (r->ds.val.n == 0 && r->o.ft_epochs > 0)
        return sc_fail(err, "fine-tuning needs a validation split (%s has none)", spec);
    return 0;
}

// Loads the model and checks that it has something to quantize.
static int model_open(quant_run *r, sc_err *err) {
    r->nt = model_load(r->in, &r->meta, err);
    if (!r->nt) return -1;
    int *sel = calloc((size_t)(r->nt->ntensors ? r->nt->ntensors : 1), sizeof *sel);
    if (!sel) return sc_fail(err, "out of memory");
    int n = quant_net_select(r->nt, &r->cfg, sel);
    free(sel);
    if (n == 0)
        return sc_fail(err, "the model has no %s to quantize (%s)",
                       r->cfg.method == QM_HALF ? "parameters" : "conv or linear weights", r->in);
    return 0;
}

// Fills the quantization settings from the options.
static void cfg_set(quant_run *r) {
    const quant_opts *o = &r->o;
    quant_cfg *c = &r->cfg;
    memset(c, 0, sizeof *c);
    c->method = o->half ? QM_HALF : o->bits ? QM_LINEAR : QM_KMEANS;
    c->codebook_fp16 = !strcmp(o->codebook, "fp16");
    c->km = (kmeans_cfg){.k = o->centroids, .init = (kmeans_init)cli_choice_index(KMEANS_INITS, o->init),
                         .max_iter = o->iters, .fp16 = c->codebook_fp16,
                         .row_scale = o->row_scale};
    c->lin = (linear_cfg){.bits = o->bits ? atoi(o->bits) : 8, .symmetric = !o->asymmetric,
                          .per_channel = !strcmp(o->granularity, "channel"),
                          .clip = (linear_clip)cli_choice_index(LINEAR_CLIPS, o->clip),
                          .percentile = o->percentile, .bins = o->bins};
    c->skip_first = o->skip_first;
    c->skip_last = o->skip_last;
    c->seed = (uint64_t)o->c.seed;
}

// Evaluates the validation and test splits with the executor's weights.
static int evaluate(quant_run *r, double *val, double *test, sc_err *err) {
    double loss;
    SC_TRY(train_evaluate(r->ex, &r->ds.val, r->o.batch, (float)r->o.smoothing, val, &loss, err));
    return train_evaluate(r->ex, &r->ds.test, r->o.batch, (float)r->o.smoothing, test, &loss, err);
}

// True when fine-tuning runs with distillation.
static int distilling(const quant_run *r) {
    return r->o.ft_epochs > 0 && !strcmp(r->o.ft_distill, "on");
}

// Keeps a copy of the unquantized model on a second executor (same device
// and precision) as the distillation teacher, when fine-tuning distills.
static int teacher_create(quant_run *r, sc_err *err) {
    if (!distilling(r)) return 0;
    r->teacher = distill_teacher_create(r->nt, r->dev, r->prec, r->o.batch, &r->tnet, err);
    return r->teacher ? 0 : sc_wrap(err, "distillation teacher");
}

// True when k-means is weighted by the Fisher diagonal.
static int fisher_on(const quant_run *r) {
    return r->cfg.method == QM_KMEANS && !strcmp(r->o.km_weight, "fisher");
}

// --kmeans-weight fisher: the sensitivities of the unquantized net (on the
// executor) from training batches, handed to k-means.
static int fisher_pass(quant_run *r, sc_err *err) {
    if (!fisher_on(r)) return 0;
    r->fisher = malloc((r->nt->nparam ? r->nt->nparam : 1) * sizeof *r->fisher);
    if (!r->fisher) return sc_fail(err, "out of memory");
    const fisher_cfg fc = {.batches = r->o.fisher_batches, .batch = r->o.batch,
                           .augment = r->o.augment, .seed = (uint64_t)r->o.c.seed,
                           .quiet = r->o.c.quiet};
    SC_TRY(fisher_diag(r->ex, r->nt, &r->ds.train, &fc, r->fisher, &r->fres, err));
    log_line(stderr, r->o.c.quiet, "quantize: Fisher sensitivities from %d training batches of %d "
             "(%s%s) in %.1f s", r->fres.batches, r->o.batch,
             r->o.augment ? "crop and flip" : "no augmentation",
             r->fres.skipped ? ", some skipped: gradient not finite" : "", r->fres.seconds);
    r->cfg.km.net_h = r->fisher;
    return 0;
}

// Quantizes the net, uploads the decoded weights and evaluates them.
static int quantize_net(quant_run *r, sc_err *err) {
    r->orig = malloc((r->nt->nparam ? r->nt->nparam : 1) * sizeof *r->orig);
    if (!r->orig) return sc_fail(err, "out of memory");
    memcpy(r->orig, r->nt->param, r->nt->nparam * sizeof *r->orig);
    SC_TRY(fisher_pass(r, err));
    SC_TRY(quant_net_apply(r->nt, &r->cfg, &r->q, err));
    char text[sizeof r->method - 32];
    quant_report_method(r->q, text, sizeof text);
    snprintf(r->method, sizeof r->method, "%s%s", fisher_on(r) ? "Fisher-weighted " : "", text);
    SC_TRY(exec_write_net(r->ex, err));
    SC_TRY(evaluate(r, &r->val1, &r->test1, err));
    log_line(stderr, r->o.c.quiet, "quantize: %s: val %.2f%% test %.2f%% (before: val %.2f%% test %.2f%%)",
             r->method, r->val1, r->test1, r->val0, r->test0);
    r->val = r->val1, r->test = r->test1;
    return 0;
}

// Settings of fine-tuning and BN recalibration.
static finetune_cfg finetune_settings(const quant_run *r) {
    return (finetune_cfg){.epochs = r->o.ft_epochs, .batch = r->o.batch, .lr = (float)r->o.ft_lr,
                          .momentum = (float)r->o.ft_momentum, .lr_params = (float)r->o.ft_lr_params,
                          .weight_decay = (float)r->o.ft_wd, .nesterov = 1,
                          .smoothing = (float)r->o.smoothing,
                          .augment = r->o.augment, .seed = (uint64_t)r->o.c.seed,
                          .bn_batches = r->o.bn_batches, .quiet = r->o.c.quiet,
                          .teacher = r->teacher, .alpha = (float)r->o.ft_alpha};
}

// Re-estimates the BN statistics when asked, then evaluates again.
static int recalibrate(quant_run *r, sc_err *err) {
    r->val2 = r->test2 = NAN;
    if (r->o.bn_batches == 0) return 0;
    finetune_cfg fc = finetune_settings(r);
    SC_TRY(finetune_bn_recalibrate(r->ex, r->nt, &r->ds, &fc, 0, err));
    SC_TRY(evaluate(r, &r->val2, &r->test2, err));
    log_line(stderr, r->o.c.quiet, "quantize: BN statistics from %d batches: val %.2f%% test %.2f%%",
             r->o.bn_batches, r->val2, r->test2);
    r->val = r->val2, r->test = r->test2;
    return 0;
}

// Fine-tunes the centroids when asked, then evaluates again.
static int finetune(quant_run *r, sc_err *err) {
    if (r->o.ft_epochs == 0) return 0;
    finetune_cfg fc = finetune_settings(r);
    SC_TRY(finetune_run(r->ex, r->nt, r->q, &r->ds, &fc, r->val, &r->ft, err));
    SC_TRY(evaluate(r, &r->val, &r->test, err));
    char how[64] = "hard labels";
    if (distilling(r)) snprintf(how, sizeof how, "distillation, alpha %g", r->o.ft_alpha);
    log_line(stderr, r->o.c.quiet, "quantize: fine-tuned (%s; kept epoch %d of %d): val %.2f%% test %.2f%%",
             how, r->ft.best_epoch, r->ft.nepochs, r->val, r->test);
    return 0;
}

// Writes the quantized model with its history line and accuracies.
static int model_write(quant_run *r, sc_err *err) {
    char line[2048], weight[64] = "";
    if (fisher_on(r))
        snprintf(weight, sizeof weight, ", kmeans-weight fisher %d batches", r->fres.batches);
    snprintf(line, sizeof line,
             "quantize: %s, %d tensors, init %s%s, BN recalibration %d batches, finetune %d epochs "
             "(kept %d, lr %g, lr-params %g, distill %s alpha %g), skip-first %d skip-last %d, "
             "from %s, %s: val %.2f%% -> %.2f%%, test %.2f%% -> %.2f%%",
             r->method, r->q->ntensors, r->q->method == QM_KMEANS ? r->o.init : "-", weight,
             r->o.bn_batches,
             r->o.ft_epochs, r->ft.best_epoch, r->o.ft_lr, r->o.ft_lr_params,
             distilling(r) ? "on" : "off", r->o.ft_alpha,
             r->o.skip_first, r->o.skip_last, r->in, exec_device_name(r->ex), r->val0, r->val,
             r->test0, r->test);
    SC_TRY(model_meta_add_history(&r->meta, line, err));
    r->meta.val_accuracy = r->val;
    r->meta.test_accuracy = r->test;
    free(r->meta.momentum);  // the optimizer state belongs to the unquantized weights
    r->meta.momentum = NULL;
    return quant_model_save(r->out, r->nt, &r->meta, r->q, err);
}

// --- reports ------------------------------------------------------------------

// Adds the fine-tuning history.
static void json_finetune(json_writer *j, const quant_run *r) {
    json_add_int(j, "finetune_epochs", r->o.ft_epochs);
    json_add_int(j, "finetune_best_epoch", r->ft.best_epoch);
    json_add_number(j, "finetune_lr", r->o.ft_lr);
    json_add_number(j, "finetune_lr_params", r->o.ft_lr_params);
    json_add_number(j, "finetune_wd", r->o.ft_wd);
    json_add_number(j, "finetune_momentum", r->o.ft_momentum);
    json_add_int(j, "finetune_trained_tensors", r->ft.trained_tensors);
    json_add_bool(j, "finetune_distill", distilling(r));
    json_add_number(j, "finetune_alpha", r->o.ft_alpha);
    json_array_begin(j, "finetune_history");
    for (int i = 0; i < r->ft.nepochs; i++) {
        const finetune_epoch *e = &r->ft.hist[i];
        json_object_begin(j, NULL);
        json_add_int(j, "epoch", e->epoch);
        json_add_number(j, "loss", e->loss);
        json_add_number(j, "train_accuracy", e->train_accuracy);
        json_add_number(j, "val_accuracy", e->val_accuracy);
        json_add_number(j, "kl", e->kl);
        json_add_number(j, "teacher_accuracy", e->teacher_accuracy);
        json_object_end(j);
    }
    json_array_end(j);
}

// Adds the method's settings.
static void json_method(json_writer *j, const quant_run *r) {
    static const char *const names[] = {"kmeans", "linear", "half"};
    json_add_string(j, "method", names[r->q->method]);
    json_add_string(j, "method_text", r->method);
    json_add_int(j, "bits", r->q->bits);
    if (r->q->method == QM_KMEANS) {
        json_add_int(j, "centroids", r->q->k);
        json_add_string(j, "init", r->o.init);
        json_add_string(j, "codebook", r->q->codebook_fp16 ? "fp16" : "fp32");
        json_add_bool(j, "row_scale", r->q->row_scale);
        json_add_string(j, "kmeans_weight", r->o.km_weight);
        json_add_int(j, "fisher_batches", fisher_on(r) ? r->fres.batches : 0);
        json_add_number(j, "fisher_seconds", fisher_on(r) ? r->fres.seconds : NAN);
    }
    if (r->q->method == QM_LINEAR) {
        json_add_bool(j, "symmetric", r->q->symmetric);
        json_add_bool(j, "per_channel", r->q->per_channel);
        json_add_string(j, "clip", r->o.clip);
        json_add_int(j, "saturated", r->rep.saturated);
    }
    json_add_int(j, "quantized_tensors", r->q->ntensors);
    json_add_bool(j, "skip_first", r->o.skip_first);
    json_add_bool(j, "skip_last", r->o.skip_last);
}

// Writes the JSON summary (--json).
static int summary_json(quant_run *r, sc_err *err) {
    json_writer j;
    json_init(&j);
    json_object_begin(&j, NULL);
    json_add_string(&j, "tool", TOOL);
    json_add_string(&j, "dataset", r->ds.name);
    json_add_string(&j, "model", r->nt->arch);
    json_add_string(&j, "input", r->in);
    json_add_string(&j, "output", r->out);
    json_method(&j, r);
    json_add_string(&j, "device", exec_device_name(r->ex));
    json_add_string(&j, "precision", r->prec == PREC_FP16 ? "fp16" : "fp32");
    json_add_number(&j, "val_accuracy", r->val);
    json_add_number(&j, "test_accuracy", r->test);
    json_add_number(&j, "val_accuracy_before", r->val0);
    json_add_number(&j, "test_accuracy_before", r->test0);
    json_add_number(&j, "val_accuracy_quantized", r->val1);
    json_add_number(&j, "test_accuracy_quantized", r->test1);
    json_add_int(&j, "bn_recalibrate_batches", r->o.bn_batches);
    json_add_number(&j, "val_accuracy_recalibrated", r->val2);
    json_add_number(&j, "test_accuracy_recalibrated", r->test2);
    json_add_number(&j, "sparsity", net_sparsity(r->nt));
    json_add_int(&j, "max_distinct_nonzero_values", r->rep.distinct_max);
    json_finetune(&j, r);
    json_add_number(&j, "images_per_second", r->ft.seconds > 0 ? r->ft.images / r->ft.seconds : 0.0);
    json_add_number(&j, "seconds", progress_clock() - r->t0);
    quant_report_json(&j, r->nt, r->q, &r->rep);
    json_object_end(&j);
    int rc = json_write_file(&j, r->o.c.json, err);
    json_free(&j);
    return rc;
}

// Prints the table and the closing line, writes the JSON summary.
static int report(quant_run *r, sc_err *err) {
    SC_TRY(quant_report_build(r->nt, r->orig, r->q, &r->rep, err));
    if (!r->o.c.quiet || !r->o.c.json || strcmp(r->o.c.json, "-")) {
        quant_report_table(stdout, r->nt, r->q, &r->rep);
        char ft[128] = "";
        if (r->o.ft_epochs > 0)
            snprintf(ft, sizeof ft, ", fine-tuned %d epochs (kept %d; %s%.3g)", r->o.ft_epochs,
                     r->ft.best_epoch, distilling(r) ? "distillation, alpha " : "hard labels, smoothing ",
                     distilling(r) ? r->o.ft_alpha : r->o.smoothing);
        printf("quantized %s (%s, sparsity %.2f%%%s): val %.2f%% -> %.2f%%, test %.2f%% -> %.2f%%; "
               "size %.3f MB dense fp32, %.3f MB sparse, %.3f MB sparse+codebook; model: %s\n",
               r->nt->arch, r->method, 100.0 * net_sparsity(r->nt), ft, r->val0, r->val, r->test0,
               r->test, r->rep.dense_bytes / 1e6, r->rep.sparse_bytes / 1e6,
               r->rep.packed_bytes / 1e6, r->out);
    }
    return r->o.c.json ? summary_json(r, err) : 0;
}

// Runs the whole tool after option parsing; returns an exit status.
static int quant_tool(quant_run *r) {
    sc_err err = {0};
    r->t0 = progress_clock();
    cfg_set(r);
    int rc = input_find(r, &err) || model_open(r, &err) || output_set(r, &err) ||
             data_open(r, &err) ||
             exec_pick_device(TOOL, r->o.c.device, strcmp(r->o.precision, "auto") ? r->o.precision : "fp32",
                              r->o.c.quiet, &r->dev, &r->prec, &err);
    if (!rc) rc = !(r->ex = exec_create(r->nt, r->dev, r->prec, r->o.batch, &err));
    if (!rc) {
        log_line(stderr, r->o.c.quiet, "quantize: %s (%s) on %s (%d val, %d test), %s %s -> %s",
                 r->in, r->nt->arch, r->ds.name, r->ds.val.n, r->ds.test.n,
                 exec_device_name(r->ex), r->prec == PREC_FP16 ? "fp16" : "fp32", r->out);
        rc = evaluate(r, &r->val0, &r->test0, &err) || teacher_create(r, &err) || quantize_net(r, &err) ||
             recalibrate(r, &err) || finetune(r, &err) || model_write(r, &err) || report(r, &err);
    }
    if (rc) cli_error(TOOL, "%s", err.msg);
    exec_free(r->ex);
    exec_free(r->teacher);
    net_free(r->tnet);
    quant_model_free(r->q);
    quant_report_free(&r->rep);
    finetune_result_free(&r->ft);
    free(r->orig);
    free(r->fisher);
    net_free(r->nt);
    model_meta_free(&r->meta);
    dataset_free(&r->ds);
    return rc ? SC_EXIT_INPUT : SC_EXIT_OK;
}

// Parses the options and runs the tool.
int main(int argc, char **argv) {
    quant_run r;
    memset(&r, 0, sizeof r);
    model_meta_init(&r.meta);
    gsl_set_error_handler_off();  // GSL returns error codes; we check them
    int rc = opts_parse(&r.o, argc, argv);
    if (rc == CLI_HELP) return SC_EXIT_OK;
    if (rc != CLI_OK) return SC_EXIT_USAGE;
    return quant_tool(&r);
}
