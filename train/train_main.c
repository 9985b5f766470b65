// The `train` tool: trains a CNN on a CIFAR-format dataset with masked SGD,
// writes an HDF5 checkpoint into the run directory after every epoch and
// resumes from it with --resume.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/cifar.h"
#include "datasets/loader.h"
#include "runtime/cli.h"
#include "runtime/exec.h"
#include "runtime/json.h"
#include "runtime/model_io.h"
#include "runtime/net.h"
#include "runtime/progress.h"
#include "runtime/rundir.h"
#include "train/train_cli.h"
#include "train/trainer.h"

#define TOOL "train"

// --- options ----------------------------------------------------------------

typedef struct {
    cli_common c;
    const char *model, *lr, *sched, *precision, *data_dir, *runs, *output;
    int epochs, batch, nesterov, augment, val_size, resume, cycle_momentum;
    const char *anneal;
    double warmup, momentum, wd, smoothing;
    const char *dataset;  // positional, or the default
} train_opts;

// Parses argv into o; returns CLI_OK, CLI_HELP or CLI_USAGE.
static int opts_parse(train_opts *o, int argc, char **argv) {
    cli_opt opts[] = {
        CLI_COMMON_OPTS(o->c),
        {.name = "model", .short_name = 'm', .type = OPT_STRING, .dst = &o->model,
         .def = "resnet18", .metavar = "NAME",
         .help = "lenet, resnet18, resnet20/32/50/56, vgg11/13/16/19, densenet121, or a description file"},
        {.name = "epochs", .short_name = 'e', .type = OPT_INT, .dst = &o->epochs, .def = "30",
         .min = 1, .max = 100000, .help = "epochs to train"},
        {.name = "batch", .short_name = 'b', .type = OPT_INT, .dst = &o->batch, .def = "512",
         .min = 1, .max = 65536, .help = "images per step"},
        {.name = "lr", .type = OPT_STRING, .dst = &o->lr, .def = "auto", .metavar = "X",
         .help = "peak learning rate (auto: 0.4 for resnet, vgg and densenet, 0.05 otherwise)"},
        {.name = "sched", .type = OPT_CHOICE, .dst = &o->sched, .def = "onecycle",
         .choices = "onecycle|cosine|constant", .help = "learning-rate schedule"},
        {.name = "anneal", .type = OPT_CHOICE, .dst = &o->anneal, .def = "cos",
         .choices = "cos|linear", .help = "one-cycle: shape of the warm-up and the decay"},
        {.name = "cycle-momentum", .type = OPT_FLAG, .dst = &o->cycle_momentum, .def = "0",
         .help = "one-cycle: momentum cycles +-0.05 against the rate"},
        {.name = "warmup", .type = OPT_FLOAT, .dst = &o->warmup, .def = "0.25", .min = 0,
         .max = 1, .help = "fraction of the steps spent warming up"},
        TRAIN_SGD_OPTS(o),
        {.name = "val-size", .type = OPT_INT, .dst = &o->val_size, .def = "-1", .min = -1,
         .max = 1000000, .help = "validation images held out of the training set (-1: 5000, or a tenth when smaller)"},
        {.name = "data-dir", .type = OPT_STRING, .dst = &o->data_dir, .def = "data",
         .metavar = "DIR", .help = "where cifar10/cifar100/synthetic live"},
        {.name = "runs", .type = OPT_STRING, .dst = &o->runs, .def = "runs", .metavar = "DIR",
         .help = "root of the run directories"},
        {.name = "output", .short_name = 'o', .type = OPT_STRING, .dst = &o->output,
         .metavar = "FILE", .help = "model file to write (default: <run dir>/model.h5)"},
        {.name = "resume", .type = OPT_FLAG, .dst = &o->resume,
         .help = "continue the checkpoint in -o FILE or runs/latest/model.h5"},
    };
    return cli_parse_one(TOOL, "train [options] [DATASET]",
                         "Trains a CNN on cifar10, cifar100, synthetic or a CIFAR-format folder\n"
                         "(default: cifar100 when data/cifar-100-binary exists, else synthetic).",
                         opts, (int)(sizeof opts / sizeof *opts), argc, argv, &o->dataset);
}

// --- set-up -----------------------------------------------------------------

// Peak learning rate from --lr (auto picks by architecture); -1 when invalid.
static float lr_resolve(const char *lr, const char *model) {
    if (!strcmp(lr, "auto"))
        return (float)net_arch_auto_lr(model);
    char *end;
    double v = strtod(lr, &end);
    return (end != lr && !*end && v > 0 && v < 100) ? (float)v : -1.0f;
}

typedef struct {
    train_opts o;
    dataset ds;
    net *nt;
    model_meta meta;
    exec *ex;
    sc_device dev;
    sc_precision prec;
    char rundir[1024], out[1100];
    train_hparams hp;
} train_run;

// Picks device and precision from the options.
static int device_pick(train_run *r, sc_err *err) {
    return exec_pick_device(TOOL, r->o.c.device, r->o.precision, r->o.c.quiet, &r->dev, &r->prec,
                            err);
}

// Opens the dataset named by the options (or the default one).
static int data_open(train_run *r, sc_err *err) {
    if (!r->o.dataset) r->o.dataset = dataset_default_name(r->o.data_dir);
    return dataset_open(r->o.dataset, r->o.data_dir, r->o.val_size, (uint64_t)r->o.c.seed, &r->ds,
                        err);
}

// Fills the training hyper-parameters from the options.
static int hparams_set(train_run *r, sc_err *err) {
    train_hparams *h = &r->hp;
    h->lr = lr_resolve(r->o.lr, r->o.model);
    if (h->lr <= 0) return sc_fail(err, "--lr: not a positive number or auto (%s)", r->o.lr);
    h->epochs = r->o.epochs;
    h->batch = r->o.batch;
    h->warmup = (float)r->o.warmup;
    h->sched = (sched_kind)cli_choice_index("onecycle|cosine|constant", r->o.sched);
    h->momentum = (float)r->o.momentum;
    h->weight_decay = (float)r->o.wd;
    h->smoothing = (float)r->o.smoothing;
    h->nesterov = r->o.nesterov;
    h->anneal_linear = !strcmp(r->o.anneal, "linear");
    h->cycle_momentum = r->o.cycle_momentum;
    return 0;
}

// Builds and initialises a fresh net for the dataset, and a new run directory.
static int fresh_start(train_run *r, int argc, char **argv, sc_err *err) {
    r->nt = net_create(r->o.model, 3, CIFAR_SIDE, CIFAR_SIDE, r->ds.classes, err);
    if (!r->nt) return -1;
    rng g;
    rng_seed(&g, (uint64_t)r->o.c.seed, 0x1417);
    net_init_weights(r->nt, &g);
    memcpy(r->nt->in_mean, r->ds.mean, sizeof r->ds.mean);
    memcpy(r->nt->in_std, r->ds.std, sizeof r->ds.std);
    model_meta_init(&r->meta);
    snprintf(r->meta.dataset, sizeof r->meta.dataset, "%s", r->o.dataset);
    r->meta.epochs_total = r->o.epochs;
    r->meta.seed = (uint64_t)r->o.c.seed;
    r->meta.rng_state = g;
    if (!(r->meta.config = cli_args_join(argc, argv, NULL))) return sc_fail(err, "out of memory");
    if (r->o.output) return 0;
    SC_TRY(rundir_create(r->o.runs, r->o.dataset, r->nt->arch, r->rundir, sizeof r->rundir, err));
    return 0;
}

// Loads the checkpoint to resume; its stored options were merged by main().
static int resume_start(train_run *r, sc_err *err) {
    r->nt = model_load(r->out, &r->meta, err);
    if (!r->nt) return -1;
    if (r->nt->classes != r->ds.classes)
        return sc_fail(err, "%s: model has %d classes, dataset %s has %d", r->out, r->nt->classes,
                       r->o.dataset, r->ds.classes);
    if (r->meta.epoch >= r->meta.epochs_total)
        return sc_fail(err, "%s: training already finished (%d of %d epochs)", r->out,
                       r->meta.epoch, r->meta.epochs_total);
    if (!r->meta.momentum)
        return sc_fail(err, "%s: the checkpoint has no optimizer state (/optimizer/momentum); "
                            "resuming without it would not continue the run", r->out);
    return 0;
}

// --- the loop ---------------------------------------------------------------

// Index of the first NaN or infinite value of v[0..n), or -1.
static long first_nonfinite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return (long)i;
    return -1;
}

// Fails when the weights, buffers or momentum read back from the executor
// hold NaN or Inf (training diverged; the last checkpoint is kept).
static int state_finite_check(train_run *r, sc_err *err) {
    const struct { const char *what; const float *v; size_t n; } parts[] = {
        {"weights", r->nt->param, r->nt->nparam}, {"BN buffers", r->nt->buf, r->nt->nbuf},
        {"momentum", r->meta.momentum, r->nt->nparam}};
    for (int p = 0; p < 3; p++) {
        long i = first_nonfinite(parts[p].v, parts[p].n);
        if (i >= 0)
            return sc_fail(err, "training diverged in epoch %d: the %s hold NaN/Inf at index %ld; "
                                "the last good checkpoint is kept (%s); try a lower --lr",
                           r->meta.epoch, parts[p].what, i, r->out);
    }
    return 0;
}

// Writes the checkpoint with the current state of the executor.
static int checkpoint_save(train_run *r, sc_err *err) {
    SC_TRY(exec_read_net(r->ex, err));
    if (!r->meta.momentum && !(r->meta.momentum = malloc(r->nt->nparam * sizeof(float))))
        return sc_fail(err, "out of memory");
    SC_TRY(exec_read_momentum(r->ex, r->meta.momentum, err));
    SC_TRY(state_finite_check(r, err));
    return model_save(r->out, r->nt, &r->meta, err);
}

// Appends one epoch's figures to the JSON history.
static void epoch_json(json_writer *j, int epoch, const exec_stats *s, double val, double secs) {
    json_object_begin(j, NULL);
    json_add_int(j, "epoch", epoch);
    json_add_number(j, "train_loss", s->count ? s->loss_sum / (double)s->count : 0);
    json_add_number(j, "train_accuracy", s->count ? 100.0 * (double)s->correct / (double)s->count : 0);
    json_add_number(j, "val_accuracy", val);
    json_add_number(j, "seconds", secs);
    json_object_end(j);
}

// Runs the remaining epochs; returns total training seconds in *secs.
static int epochs_run(train_run *r, json_writer *hist, double *secs, long *images, sc_err *err) {
    loader ld;
    SC_TRY(loader_init(&ld, &r->ds.train, r->hp.batch, r->o.augment, r->meta.seed, err));
    long per_epoch = loader_batches_per_epoch(&ld), total = per_epoch * r->hp.epochs;
    int rc = per_epoch > 0 ? 0 : sc_fail(err, "batch %d is larger than the training split (%d)",
                                         r->hp.batch, r->ds.train.n);
    for (int ep = r->meta.epoch; !rc && ep < r->hp.epochs; ep++) {
        char label[64];
        progress pg;
        exec_stats st;
        double val = 0, vloss = 0;
        snprintf(label, sizeof label, "epoch %d/%d", ep + 1, r->hp.epochs);
        progress_start(&pg, stderr, label, per_epoch, r->o.c.quiet);
        loader_start_epoch(&ld, ep);
        rc = train_epoch(r->ex, &ld, &r->hp, &r->meta.step, total, &pg, &st, err);
        if (!rc && !isfinite(st.loss_sum) && r->prec != PREC_FP16)
            rc = sc_fail(err, "training diverged in epoch %d: the loss is NaN/Inf; the last good "
                              "checkpoint is kept (%s); try a lower --lr", ep + 1, r->out);
        double t = progress_elapsed(&pg);
        if (!rc) rc = train_evaluate(r->ex, &r->ds.val, r->hp.batch, r->hp.smoothing, &val, &vloss, err);
        if (rc) break;
        *secs += t;
        *images += st.count;
        char text[160];
        double n = (double)(st.count ? st.count : 1);
        char vtxt[32] = "";
        if (r->ds.val.n) snprintf(vtxt, sizeof vtxt, " val %.2f%%", val);
        snprintf(text, sizeof text, "loss %.3f train %.1f%%%s %.0f img/s%s", st.loss_sum / n,
                 100.0 * (double)st.correct / n, vtxt, (double)st.count / (t > 0 ? t : 1e-9),
                 st.skipped ? " (fp16 steps skipped)" : "");
        progress_finish(&pg, text);
        epoch_json(hist, ep + 1, &st, val, t);
        r->meta.epoch = ep + 1;
        r->meta.val_accuracy = val;
        rc = checkpoint_save(r, err);
    }
    loader_free(&ld);
    return rc;
}

// Evaluates the test set, writes the final model and the JSON summary.
static int finish(train_run *r, json_writer *hist, double secs, long images, sc_err *err) {
    double test = 0, tloss = 0;
    SC_TRY(train_evaluate(r->ex, &r->ds.test, r->hp.batch, r->hp.smoothing, &test, &tloss, err));
    r->meta.test_accuracy = test;
    char line[512];
    snprintf(line, sizeof line, "train: model %s, dataset %s, %d epochs, batch %d, lr %g, %s %s: val %.2f%% test %.2f%%",
             r->nt->arch, r->o.dataset, r->hp.epochs, r->hp.batch, r->hp.lr, exec_device_name(r->ex),
             r->prec == PREC_FP16 ? "fp16" : "fp32", r->meta.val_accuracy, test);
    SC_TRY(model_meta_add_history(&r->meta, line, err));
    SC_TRY(checkpoint_save(r, err));
    char val[48] = "no validation split";
    if (r->ds.val.n) snprintf(val, sizeof val, "val %.2f%%", r->meta.val_accuracy);
    printf("test accuracy %.2f%% (%s), %.1f s training, %.0f img/s; model: %s\n", test, val, secs,
           secs > 0 ? (double)images / secs : 0.0, r->out);
    json_writer *j = hist;
    json_array_end(j);
    json_add_string(j, "tool", TOOL);
    json_add_string(j, "dataset", r->o.dataset);
    json_add_string(j, "model", r->nt->arch);
    json_add_string(j, "output", r->out);
    json_add_string(j, "device", exec_device_name(r->ex));
    json_add_string(j, "precision", r->prec == PREC_FP16 ? "fp16" : "fp32");
    json_add_int(j, "epochs", r->hp.epochs);
    json_add_int(j, "batch", r->hp.batch);
    json_add_number(j, "lr", r->hp.lr);
    json_add_int(j, "parameters", (long long)r->nt->nparam);
    json_add_number(j, "val_accuracy", r->meta.val_accuracy);
    json_add_number(j, "test_accuracy", test);
    json_add_number(j, "sparsity", net_sparsity(r->nt));
    json_add_number(j, "images_per_second", secs > 0 ? (double)images / secs : 0.0);
    json_add_number(j, "seconds", secs);
    json_object_end(j);
    if (!r->o.c.json) return 0;
    return json_write_file(j, r->o.c.json, err);
}

// Output path and run directory: -o FILE, else <run dir>/model.h5.
static int paths_set(train_run *r, sc_err *err) {
    if (r->o.output) {
        snprintf(r->out, sizeof r->out, "%s", r->o.output);
    } else {
        if (r->o.resume) SC_TRY(rundir_latest(r->o.runs, r->rundir, sizeof r->rundir, err));
        SC_TRY(rundir_join(r->out, sizeof r->out, r->rundir, "model.h5", err));
    }
    return cli_outputs_check(&r->o.c, r->out, err);
}

// Runs the whole tool after option parsing; returns an exit status.
static int train_tool(train_run *r, int argc, char **argv) {
    sc_err err = {0};
    json_writer hist;
    double secs = 0;
    long images = 0;
    json_init(&hist);
    json_object_begin(&hist, NULL);
    json_array_begin(&hist, "history");
    int rc = device_pick(r, &err) || hparams_set(r, &err) || data_open(r, &err);
    if (!rc && r->o.resume) rc = paths_set(r, &err) || resume_start(r, &err);
    else if (!rc) rc = fresh_start(r, argc, argv, &err) || paths_set(r, &err);
    if (!rc) {
        r->ex = exec_create(r->nt, r->dev, r->prec, r->hp.batch, &err);
        rc = !r->ex;
    }
    if (!rc && r->meta.momentum) rc = exec_write_momentum(r->ex, r->meta.momentum, &err);
    if (!rc) {
        log_line(stderr, r->o.c.quiet, "train: %s on %s (%d train, %d val, %d test, %d classes), %s %s, "
                 "%zu parameters, %.1f MMAC/image -> %s",
                 r->nt->arch, r->o.dataset, r->ds.train.n, r->ds.val.n, r->ds.test.n, r->ds.classes,
                 exec_device_name(r->ex), r->prec == PREC_FP16 ? "fp16" : "fp32", r->nt->nparam,
                 net_macs(r->nt) / 1e6, r->out);
        rc = epochs_run(r, &hist, &secs, &images, &err) || finish(r, &hist, secs, images, &err);
    }
    if (rc) cli_error(TOOL, "%s", err.msg);
    json_free(&hist);
    exec_free(r->ex);
    net_free(r->nt);
    model_meta_free(&r->meta);
    dataset_free(&r->ds);
    return rc ? SC_EXIT_INPUT : SC_EXIT_OK;
}

// Reads the options stored in the checkpoint to resume and merges them with
// the current ones (current options win); returns a cli status, or -1 when
// the checkpoint cannot be read (the error is printed).
static int resume_opts(train_opts *o, int argc, char **argv) {
    char dir[1024], path[1100];
    sc_err err = {0};
    if (o->dataset) {
        cli_error(TOOL, "--resume takes the dataset and settings from the checkpoint (%s)", o->dataset);
        return CLI_USAGE;
    }
    if (o->output) snprintf(path, sizeof path, "%s", o->output);
    else if (rundir_latest(o->runs, dir, sizeof dir, &err) || rundir_join(path, sizeof path, dir, "model.h5", &err)) {
        cli_error(TOOL, "%s", err.msg);
        return -1;
    }
    model_meta m;
    model_meta_init(&m);
    net *nt = model_load(path, &m, &err);
    net_free(nt);
    if (!nt || !m.config) {
        cli_error(TOOL, "%s", nt ? "the checkpoint stores no training settings" : err.msg);
        model_meta_free(&m);
        return -1;
    }
    int n;
    char **v = cli_args_merge(m.config, argc, argv, &n);
    model_meta_free(&m);
    return v ? opts_parse(o, n, v) : -1;
}

int main(int argc, char **argv) {
    train_run r;
    memset(&r, 0, sizeof r);
    model_meta_init(&r.meta);
    int rc = opts_parse(&r.o, argc, argv);
    if (rc == CLI_OK && r.o.resume) rc = resume_opts(&r.o, argc, argv);
    if (rc == CLI_OK && lr_resolve(r.o.lr, r.o.model ? r.o.model : "") <= 0) {
        cli_error(TOOL, "--lr: not a number in (0, 100) or auto (%s)", r.o.lr);
        rc = CLI_USAGE;
    }
    if (rc == CLI_HELP) return SC_EXIT_OK;
    if (rc != CLI_OK) return rc == CLI_USAGE ? SC_EXIT_USAGE : SC_EXIT_INPUT;
    return train_tool(&r, argc, argv);
}
