// The `prune` tool: prunes a CNN with seed 001's evolutionary search over
// gradient/magnitude masks (--method evolve), or the gmp/oneshot magnitude
// baselines, from scratch or from a trained model (--from). Writes the pruned
// model, the per-layer table, the search history (CSV and JSON) and an
// accuracy-vs-sparsity plot into a run directory; --resume continues a
// stopped or killed run from its last finished iteration.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/cifar.h"
#include "prune/dist.h"
#include "prune/floor.h"
#include "prune/latency_setup.h"
#include "prune/prune_opts.h"
#include "prune/reprune.h"
#include "prune/report.h"
#include "prune/search.h"
#include "runtime/atomic.h"
#include "runtime/cli.h"
#include "runtime/exec.h"
#include "runtime/json.h"
#include "runtime/model_io.h"
#include "runtime/net.h"
#include "runtime/pattern.h"
#include "runtime/progress.h"
#include "runtime/rundir.h"
#include "train/train_cli.h"

#define TOOL "prune"

// Options that steer one invocation and are not stored for --resume.
static const char *const prune_transient[] = {"--resume", "--stop-after=", "--time-limit=", "--keep-state",
                                              NULL};

// --- options ----------------------------------------------------------------

// Checks --pattern and notes whether --target-sparsity and --latency-target were given.
static int pattern_check(prune_opts *o, int argc, char **argv) {
    sc_pattern p;
    sc_err err = {0};
    if (strcmp(o->pattern, "auto") && sc_pattern_parse(o->pattern, &p, &err)) {
        cli_error(TOOL, "--pattern: %s", err.msg);
        return CLI_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        o->target_given |= !strncmp(argv[i], "--target-sparsity", strlen("--target-sparsity"));
        o->lat_target_given |= !strncmp(argv[i], "--latency-target", strlen("--latency-target"));
    }
    return CLI_OK;
}

// Parses argv into o; returns CLI_OK, CLI_HELP or CLI_USAGE.
static int opts_parse(prune_opts *o, int argc, char **argv) {
    cli_opt opts[] = {CLI_COMMON_OPTS(o->c), PRUNE_OPTS(o)};
    int rc = cli_parse_one(TOOL, "prune [options] [DATASET]",
                           "Prunes a CNN: evolutionary population search over gradient/magnitude masks\n"
                           "(Pietron and Zurek), or gradual/one-shot magnitude pruning, from scratch or --from a\n"
                           "trained model. DATASET: cifar10, cifar100, synthetic or a CIFAR-format folder\n"
                           "(default: the model's, else cifar100 when present, else synthetic).",
                           opts, (int)(sizeof opts / sizeof *opts), argc, argv, &o->dataset);
    if (rc == CLI_OK && !(o->target >= 0.0 && o->target < 1.0)) {
        cli_error(TOOL, "--target-sparsity: must be in [0, 1) (%g)", o->target);
        return CLI_USAGE;
    }
    if (rc == CLI_OK && !(o->min_layer >= 0.0 && o->min_layer <= o->target)) {
        cli_error(TOOL, "--min-layer-sparsity: must be in [0, --target-sparsity %g] (%g)", o->target,
                  o->min_layer);
        return CLI_USAGE;
    }
    prune_floor_spec fs;
    sc_err err = {0};
    if (rc == CLI_OK && o->layer_floor && prune_floor_parse(o->layer_floor, &fs, &err)) {
        cli_error(TOOL, "--layer-floor: %s (%s)", err.msg, o->layer_floor);
        return CLI_USAGE;
    }
    if (rc == CLI_OK && o->layer_floor) prune_floor_spec_free(&fs);
    return rc == CLI_OK ? pattern_check(o, argc, argv) : rc;
}

// Stored args then the current ones: one argv for a combined parse (the
// --- the run ----------------------------------------------------------------

typedef struct {
    prune_opts o;
    dataset ds;
    net *nt;
    model_meta meta;     // of the --from model (history carried over), then the output's
    exec *ex;
    sc_device dev;
    sc_precision prec;
    prune_cfg cfg;
    prune_search s;
    char *config;        // the stored settings text
    dist *dist;          // the ranks of an mpirun run (prune/dist.h)
    double holdout_acc;  // accuracy on the --holdout images at the end (NAN: none)
    double *floors;      // (prunable layers) --layer-floor's floors at the end (NULL: none)
    prune_reprune rp;    // re-pruning of a --from model pruned off --pattern
    lat_table lat;       // --objective latency: the table (L = 0: sparsity objective)
    prune_lat_opts lo;   // how it was chosen
    prune_lat_probe probe;  // what the search's latency checks measure with
    prune_lat_result latres;  // the final model's predicted and measured latency
    distill teacher;     // --distill: the start model on its own executor (zeroed: off)
    int usage;           // 1: the error is bad usage (exit 2)
    char from[1100], rundir[1024], out[1100], prefix[1100], state[1200];
} prune_run;

// Under mpirun each rank of a machine takes its own GPU: its local rank
// modulo the GPUs present (before anything touches a GPU).
static int gpu_select(prune_run *r, sc_err *err) {
    if (dist_size(r->dist) < 2 || !strcmp(r->o.c.device, "cpu")) return 0;
    return exec_gpu_select(dist_local_rank(r->dist), err);
}

// Picks device and precision from the options.
static int device_pick(prune_run *r, sc_err *err) {
    return exec_pick_device(TOOL, r->o.c.device, r->o.precision, r->o.c.quiet, &r->dev, &r->prec,
                            err);
}

// Resolves --objective auto and --pattern auto for this run and says what they came to.
static void auto_set(prune_run *r) {
    prune_opts *o = &r->o;
    const char *obj = o->objective, *pat = o->pattern;
    sc_pattern p = {0};
    if (strcmp(o->pattern, "auto")) sc_pattern_parse(o->pattern, &p, NULL);  // checked by pattern_check
    prune_auto_run run = {.on_gpu = r->dev == DEV_GPU, .fp16 = r->prec == PREC_FP16,
                          .evolve = !strcmp(o->method, "evolve"), .from = o->from != NULL,
                          .sparsity_given = o->target_given || o->min_layer > 0 || o->layer_floor,
                          .hybrid = sc_pattern_has_hybrid(&p)};
    prune_auto_resolve(&run, &o->objective, &o->pattern);
    o->objective_auto = !strcmp(obj, "auto"), o->pattern_auto = !strcmp(pat, "auto");
    if (o->objective_auto || o->pattern_auto)
        log_line(stderr, o->c.quiet, "prune: objective %s%s, pattern %s%s", o->objective,
                 o->objective_auto ? " (auto)" : "", o->pattern, o->pattern_auto ? " (auto)" : "");
}

// Loads the --from model and checks it against --model and DATASET.
static int start_from_model(prune_run *r, sc_err *err) {
    if (!strcmp(r->o.from, "latest")) {
        const char *cand[] = {"model.h5", NULL};
        SC_TRY(rundir_find_input(r->o.runs, cand, r->from, sizeof r->from, err));
    } else {
        snprintf(r->from, sizeof r->from, "%s", r->o.from);
    }
    r->nt = model_load(r->from, &r->meta, err);
    if (!r->nt) return -1;
    if (r->o.model && strcmp(r->o.model, r->nt->arch) != 0)
        return sc_fail(err, "%s: the model is %s, not %s (--model)", r->from, r->nt->arch, r->o.model);
    if (r->o.dataset && r->meta.dataset[0] && strcmp(r->o.dataset, r->meta.dataset) != 0)
        return sc_fail(err, "%s: the model was trained on %s, not %s", r->from, r->meta.dataset,
                       r->o.dataset);
    if (!r->o.dataset && r->meta.dataset[0]) r->o.dataset = r->meta.dataset;
    return 0;
}

// The validation split of a --from model must be the one it was trained
// without: same seed and size as its training run (its file records both).
static void split_from_model(prune_run *r, uint64_t *seed) {
    *seed = r->meta.seed;
    int stored = cli_args_int(r->meta.config, "--val-size", -1);
    if (r->o.val_size == -1 && stored > 0) r->o.val_size = stored;
    if (stored == 0)
        log_line(stderr, r->o.c.quiet, "prune: warning: %s was trained on every training image; "
                 "its validation accuracy (the fitness) is optimistic", r->from);
}

// Opens the dataset, then builds (from scratch) or checks (--from) the net.
static int data_and_net(prune_run *r, sc_err *err) {
    uint64_t split_seed = (uint64_t)r->o.c.seed;
    if (r->o.from) {
        SC_TRY(start_from_model(r, err));
        split_from_model(r, &split_seed);
    }
    if (!r->o.dataset) r->o.dataset = dataset_default_name(r->o.data_dir);
    SC_TRY(dataset_open(r->o.dataset, r->o.data_dir, r->o.val_size, split_seed, &r->ds, err));
    r->meta.seed = split_seed;  // the output records the split it was selected on
    if (r->ds.val.n == 0) return sc_fail(err, "pruning needs a validation split (--val-size 0)");
    SC_TRY(dataset_carve_holdout(&r->ds, r->o.holdout, split_seed, err));
    if (r->nt) {
        if (r->nt->classes != r->ds.classes)
            return sc_fail(err, "%s: the model has %d classes, dataset %s has %d", r->from,
                           r->nt->classes, r->o.dataset, r->ds.classes);
        return 0;
    }
    r->nt = net_create(r->o.model ? r->o.model : "resnet18", 3, CIFAR_SIDE, CIFAR_SIDE, r->ds.classes, err);
    if (!r->nt) return -1;
    memcpy(r->nt->in_mean, r->ds.mean, sizeof r->ds.mean);
    memcpy(r->nt->in_std, r->ds.std, sizeof r->ds.std);
    snprintf(r->meta.dataset, sizeof r->meta.dataset, "%s", r->o.dataset);
    return 0;
}

// Parses a positive number or "auto" (returns `dflt`); -1 when invalid.
static double num_or_auto(const char *s, double dflt, double lo, double hi) {
    if (!strcmp(s, "auto")) return dflt;
    char *end;
    double v = strtod(s, &end);
    return end != s && !*end && v >= lo && v <= hi ? v : -1.0;
}

// Evolve's fine-tuning rounds: --finetune, or a third of the search's rounds.
static int finetune_rounds(const prune_opts *o, int *rounds, sc_err *err) {
    double v = num_or_auto(o->finetune, -2.0, 0.0, 1e6);
    if (v == -1.0 || (v >= 0 && v != floor(v)))
        return sc_fail(err, "--finetune: not a whole number >= 0 or auto (%s)", o->finetune);
    *rounds = v == -2.0 ? (int)lround((double)o->population * o->iterations / 3.0) : (int)v;
    return 0;
}

// Rounds of gmp/oneshot: --epochs, or evolve's image budget with these settings.
static int gmp_rounds(prune_run *r, int *rounds, sc_err *err) {
    prune_opts *o = &r->o;
    int ft;
    SC_TRY(finetune_rounds(o, &ft, err));
    long auto_rounds = (long)o->population * o->iterations + ft;
    double ep = num_or_auto(o->epochs, -2.0, 0.0, 1e6);
    if (ep == -1.0) return sc_fail(err, "--epochs: not a number >= 0 or auto (%s)", o->epochs);
    if (ep == -2.0) {
        *rounds = (int)(auto_rounds > 1000000 ? 1000000 : auto_rounds);
        return 0;
    }
    int bpe = r->ds.train.n / o->batch;
    *rounds = (int)ceil(ep * bpe / o->batches);
    return 0;
}

// Evolve's racing: --halve-every, auto 1 (halve after every iteration; the
// CPU and CIFAR-100 figures behind that choice are in docs/prune.md).
static int halve_every(const prune_opts *o, int *k, sc_err *err) {
    double v = num_or_auto(o->halve_every, 1.0, 0.0, 1e6);
    if (v == -1.0 || v != floor(v))
        return sc_fail(err, "--halve-every: not a whole number >= 0 or auto (%s)", o->halve_every);
    *k = (int)v;
    return 0;
}

// Fills the search settings from the options.
static int cfg_set(prune_run *r, sc_err *err) {
    prune_opts *o = &r->o;
    prune_cfg *c = &r->cfg;
    int scratch = o->from == NULL;
    prune_cfg_default(c, (prune_method)cli_choice_index(PRUNE_METHODS, o->method));
    c->population = c->method == PM_EVOLVE ? o->population : 1;
    c->rounds = o->iterations;
    if (c->method != PM_EVOLVE) SC_TRY(gmp_rounds(r, &c->rounds, err));
    SC_TRY(finetune_rounds(o, &c->finetune, err));
    SC_TRY(halve_every(o, &c->halve_every, err));
    c->batches = o->batches;
    c->target = o->target;
    c->min_layer = o->min_layer;
    c->crit = (prune_crit){.alpha = (float)o->alpha, .beta = (float)o->beta};
    SC_TRY(sc_pattern_parse(o->pattern, &c->pattern, err));
    if (sc_pattern_is_unstructured(&c->pattern)) r->meta.pattern[0] = 0;
    else sc_pattern_format(&c->pattern, r->meta.pattern, sizeof r->meta.pattern);
    c->grad_steps = o->grad_steps;
    c->ramp_begin = scratch ? 0.2 : 0.0;
    c->ramp_end = num_or_auto(o->ramp_end, c->method == PM_GMP ? 0.5625 : 0.75, 0.0, 1.0);
    if (c->ramp_end < 0 || c->ramp_end <= c->ramp_begin)
        return sc_fail(err, "--ramp-end: not a number in (%g, 1] or auto (%s)", c->ramp_begin, o->ramp_end);
    c->from_scratch = scratch;
    c->scan_images = o->scan_images;
    c->augment = o->augment;
    c->seed = (uint64_t)o->c.seed;
    c->stop_after = o->stop_after;
    c->time_limit = o->time_limit;
    c->save_interval = o->save_interval;
    c->quiet = o->c.quiet;
    c->ev.threshold = o->threshold;
    const double lr = net_arch_auto_lr(r->nt->arch);  // train's; a tenth of it from a model
    c->hp.lr = (float)num_or_auto(o->lr, scratch ? lr : lr / 10, 1e-9, 100);
    if (c->hp.lr <= 0) return sc_fail(err, "--lr: not a positive number or auto (%s)", o->lr);
    c->hp.warmup = (float)num_or_auto(o->warmup, scratch ? 0.25 : 0.0, 0.0, 1.0);
    if (c->hp.warmup < 0) return sc_fail(err, "--warmup: not a number in [0, 1] or auto (%s)", o->warmup);
    int sc = cli_choice_index("auto|onecycle|cosine|constant", o->sched);
    c->hp.sched = sc == 0 ? (scratch ? SCHED_ONECYCLE : SCHED_COSINE) : (sched_kind)(sc - 1);
    c->hp.batch = o->batch;
    c->hp.momentum = (float)o->momentum;
    c->hp.weight_decay = (float)o->wd;
    c->hp.smoothing = (float)o->smoothing;
    c->hp.nesterov = o->nesterov;
    return 0;
}

// Puts the option's name before err's message; returns -1.
static int opt_fail(sc_err *err, const char *opt) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return sc_fail(err, "%s: %s", opt, msg);
}

// Checks that every per-layer prefix of --pattern names a prunable layer; its errors are bad usage.
static int pattern_names_set(prune_run *r, sc_err *err) {
    r->usage = 1;
    if (sc_pattern_check_names(&r->cfg.pattern, r->nt, err)) return opt_fail(err, "--pattern");
    r->usage = 0;
    return 0;
}

// Resolves --layer-floor against the net's prunable layers into r->floors
// and checks that they fit the target; its errors are bad usage.
static int floors_set(prune_run *r, sc_err *err) {
    prune_floor_spec fs;
    prune_layers pl;
    if (!r->o.layer_floor) return 0;
    r->usage = 1;
    SC_TRY(prune_floor_parse(r->o.layer_floor, &fs, err));
    int rc = prune_layers_init(&pl, r->nt, err);
    if (!rc && !(r->floors = malloc((size_t)pl.n * sizeof *r->floors))) rc = sc_fail(err, "out of memory");
    if (!rc) rc = prune_floor_resolve(&fs, r->nt, &pl, r->cfg.min_layer, r->floors, err);
    if (!rc) rc = prune_floor_budget(&pl, r->floors, r->cfg.target, err);
    prune_layers_free(&pl);
    prune_floor_spec_free(&fs);
    if (rc) return opt_fail(err, "--layer-floor");
    r->cfg.layer_floor = r->floors;
    r->usage = 0;
    return 0;
}

// Re-pruning (prune/reprune.h): a --from model pruned off --pattern is
// projected onto it; its per-layer sparsities become the floors and, unless
// --target-sparsity is given, its overall sparsity the target.
static int reprune_set(prune_run *r, sc_err *err) {
    SC_TRY(prune_reprune_start(&r->rp, r->nt, r->ex, &r->ds.val, r->cfg.hp.batch,
                               r->cfg.hp.smoothing, &r->cfg.pattern, r->cfg.ev.s_max, err));
    if (!r->rp.active) return 0;
    r->usage = 1;
    if (r->floors) return sc_fail(err, "--layer-floor: not with re-pruning onto --pattern %s", r->o.pattern);
    if (r->o.target_given && r->cfg.target < r->rp.need - 1e-9)
        return sc_fail(err, "--target-sparsity %g: below the re-pruned model's %.4f", r->cfg.target,
                       r->rp.need);
    r->usage = 0;
    if (!r->o.target_given || r->cfg.target < r->rp.need) r->cfg.target = r->rp.need;
    r->cfg.layer_floor = r->rp.floors;
    log_line(stderr, r->o.c.quiet, "prune: re-pruned %s onto %s (%zu weights were off it): "
             "sparsity %.4f -> %.4f, val %.2f%% -> %.2f%%; fine-tuning to %.4f", r->from,
             r->o.pattern, r->rp.off_before, r->rp.sparsity_before, r->rp.sparsity_after,
             r->rp.val_before, r->rp.val_projected, r->cfg.target);
    return 0;
}

// Every pruned layer's floor at the end into lf (r->s.pl.n).
static void floors_end(const prune_run *r, double *lf) {
    for (int l = 0; l < r->s.pl.n; l++) lf[l] = r->floors ? r->floors[l] : r->cfg.min_layer;
}

// Side-file prefix: -o FILE without ".h5", else <run dir>/prune; on
// --resume without -o the run directory is runs/latest.
static int prefix_of(const prune_opts *o, const char *rundir, char *out, size_t len, sc_err *err) {
    if (!o->output) return rundir_join(out, len, rundir, "prune", err);
    if (snprintf(out, len, "%s", o->output) >= (int)len) return sc_fail(err, "path too long (%s)", o->output);
    size_t n = strlen(out);
    if (n > 3 && !strcmp(out + n - 3, ".h5")) out[n - 3] = 0;
    return 0;
}

// Output, state and report paths: -o FILE (side files next to it), else a
// new run directory (or runs/latest on --resume).
static int paths_set(prune_run *r, sc_err *err) {
    if (dist_rank(r->dist) != 0) return 0;  // rank 0 alone writes files
    if (r->o.output) {
        snprintf(r->out, sizeof r->out, "%s", r->o.output);
    } else {
        if (r->o.resume) SC_TRY(rundir_latest(r->o.runs, r->rundir, sizeof r->rundir, err));
        else SC_TRY(rundir_create(r->o.runs, r->o.dataset, r->nt->arch, r->rundir, sizeof r->rundir, err));
        SC_TRY(rundir_join(r->out, sizeof r->out, r->rundir, "model.pruned.h5", err));
    }
    SC_TRY(prefix_of(&r->o, r->rundir, r->prefix, sizeof r->prefix, err));
    snprintf(r->state, sizeof r->state, "%s.state", r->prefix);
    return cli_outputs_check(&r->o.c, r->out, err);
}

// The tag of a table shared between runs (prune/latency_setup.h): dataset,
// pattern and what the grid masks come from: the seed from scratch, else the
// --from file's CRC-32 and length; 0 when that file cannot be read.
static int shared_tag(const prune_run *r, char *out, size_t n) {
    char pat[80];
    sc_pattern_tag(&r->cfg.pattern, pat, sizeof pat);
    if (!r->o.from) {
        snprintf(out, n, "%s-%s-seed%llu", r->o.dataset, pat, (unsigned long long)r->o.c.seed);
        return 1;
    }
    sc_err e = {0};
    uint32_t crc;
    unsigned long long len;
    int fd = open(r->from, O_RDONLY);
    int ok = fd >= 0 && !sc_fd_crc32(fd, 0, r->from, &crc, &len, &e);
    if (fd >= 0) close(fd);
    if (ok) snprintf(out, n, "%s-%s-from%08x-%llu", r->o.dataset, pat, (unsigned)crc, len);
    return ok;
}

// --objective auto whose default latency target the table cannot reach (a
// network too small to gain): the sparsity search instead, said so, and
// --pattern auto back to unstructured.
static int auto_fallback(prune_run *r, const char *why, sc_err *err) {
    log_line(stderr, r->o.c.quiet, "prune: objective auto: %s; running the sparsity search instead", why);
    r->o.objective = "sparsity";
    lat_table_free(&r->lat);
    memset(&r->lat, 0, sizeof r->lat);
    if (!r->o.pattern_auto) return 0;
    r->o.pattern = "unstructured";
    r->meta.pattern[0] = 0;
    return sc_pattern_parse(r->o.pattern, &r->cfg.pattern, err);
}

// --objective latency: the table (prune/latency_setup.h), the target in
// milliseconds, the overall sparsity it needs unless --target-sparsity is
// given, and evolve's fitness and operators pointed at them.
static int latency_set(prune_run *r, sc_err *err) {
    prune_layers pl;
    char cache[1300], shared_dir[1100], tag[600];  // paths lo points at while the table is chosen
    double ms, sp;
    if (strcmp(r->o.objective, "latency")) return 0;
    r->usage = 1;
    if (r->cfg.method != PM_EVOLVE) return sc_fail(err, "--objective latency: needs --method evolve");
    if (sc_pattern_has_hybrid(&r->cfg.pattern))
        return sc_fail(err, "--objective latency: the latency tables do not time hybrid layers (pattern %s) yet "
                       "(use --objective sparsity)", r->o.pattern);
    r->usage = 0;
    snprintf(cache, sizeof cache, "%s_latency.json", r->prefix);
    sc_err ignored = {0};  // a path too long: no sharing
    int share = dist_rank(r->dist) == 0 && shared_tag(r, tag, sizeof tag) &&
                !rundir_join(shared_dir, sizeof shared_dir, r->o.runs, "latency", &ignored);
    r->lo = (prune_lat_opts){.table = r->o.lat_table, .target = r->o.lat_target, .batch = r->o.lat_batch,
                             .precision = r->prec == PREC_FP16 ? "fp16" : "fp32", .on_gpu = r->dev == DEV_GPU,
                             .cache = dist_rank(r->dist) == 0 ? cache : NULL, .quiet = r->o.c.quiet,
                             .shared_dir = share ? shared_dir : NULL, .shared_tag = share ? tag : NULL};
    SC_TRY(prune_layers_init(&pl, r->nt, err));
    int rc = prune_layers_set_pattern(&pl, r->nt, &r->cfg.pattern, err);
    if (!rc) rc = prune_lat_table(&r->lo, r->nt, &pl, &r->cfg.pattern, r->dist, &r->lat, err);
    r->lo.cache = r->lo.shared_dir = r->lo.shared_tag = NULL;  // this function's buffers: chosen now
    if (!rc) r->usage = rc = lat_parse_target(r->o.lat_target, &r->lat, &ms, err);
    if (!rc && !r->o.target_given) rc = prune_lat_sparsity(&r->lat, &pl, ms, r->cfg.ev.s_max, &sp, err);
    if (rc && !r->usage && r->lat.L > 0 && r->o.objective_auto && !r->o.lat_target_given) {
        sc_err why = *err;  // the default target is out of this network's reach
        prune_layers_free(&pl);
        return auto_fallback(r, why.msg, err);
    }
    if (!rc && !r->o.target_given) {  // by time, or by an overall sparsity raised as needed
        r->cfg.target = fmax(sp, r->cfg.min_layer);
        r->cfg.ev.lat_time = !strcmp(r->o.lat_alloc, "time")   ? EVOLVE_ALLOC_TIME
                             : !strcmp(r->o.lat_alloc, "ramp") ? EVOLVE_ALLOC_RAMP : 0;
        r->cfg.lat_retarget = !r->cfg.ev.lat_time;
    }
    prune_layers_free(&pl);
    SC_TRY(rc);
    r->cfg.ev.lat = &r->lat;
    r->cfg.ev.lat_target = ms;
    r->cfg.ev.lat_penalty = r->o.lat_penalty;
    r->probe = (prune_lat_probe){.t = &r->lat, .pat = &r->cfg.pattern};
    if (r->lo.on_gpu && r->o.lat_checks > 0)
        r->cfg.lat_checks = r->o.lat_checks, r->cfg.lat_measure = prune_lat_measure_graph,
        r->cfg.lat_measure_ctx = &r->probe;
    log_line(stderr, r->o.c.quiet, "prune: latency objective: %.4g ms at batch %d in %s (dense %.4g ms, %s), "
             "%s %.4f", ms, r->o.lat_batch, r->lo.precision, lat_dense_ms(&r->lat), r->lat.source,
             r->cfg.ev.lat_time ? "allocated by time (the overall sparsity follows), schedule nominally to"
                                : "overall sparsity", r->cfg.target);
    if (r->cfg.ev.lat_time == EVOLVE_ALLOC_RAMP)
        log_line(stderr, r->o.c.quiet, "prune: each layer ramps towards its sparsity in the plan for the final target");
    return 0;
}

// --- reports ------------------------------------------------------------------

// Writes the history CSV/JSON files and the plot next to the output.
static int reports_write(prune_run *r, char *plot, size_t plotlen, sc_err *err) {
    char path[1300], title[256];
    prune_pop *p = r->s.pop;
    snprintf(path, sizeof path, "%s_history.csv", r->prefix);
    SC_TRY(prune_report_csv(path, p, err));
    json_writer j;
    json_init(&j);
    json_object_begin(&j, NULL);
    prune_report_json_history(&j, p);
    json_object_end(&j);
    snprintf(path, sizeof path, "%s_history.json", r->prefix);
    int rc = json_write_file(&j, path, err);
    json_free(&j);
    SC_TRY(rc);
    snprintf(title, sizeof title, "prune %s: %s on %s, target %.3f", r->o.method, r->nt->arch,
             r->o.dataset, r->cfg.target);
    if (r->lat.L > 0)
        snprintf(title + strlen(title), sizeof title - strlen(title), ", latency target %.4g ms (%s)",
                 r->cfg.ev.lat_target, r->lat.source);
    snprintf(path, sizeof path, "%s_plot", r->prefix);
    return prune_report_plot(path, p, title, plot, plotlen, err);
}

// Adds "pattern", "off_pattern" and, when re-pruned, "reprune" to the summary.
static void pattern_json(const prune_run *r, json_writer *j) {
    json_add_string(j, "pattern", r->o.pattern);
    json_add_int(j, "off_pattern", (long long)prune_mask_off_pattern(r->nt, &r->s.pl));
    if (!r->rp.active) return;
    json_object_begin(j, "reprune");
    json_add_number(j, "sparsity_before", r->rp.sparsity_before);
    json_add_number(j, "sparsity_projected", r->rp.sparsity_after);
    json_add_int(j, "weights_off_pattern_before", (long long)r->rp.off_before);
    json_add_number(j, "val_accuracy_before", r->rp.val_before);
    json_add_number(j, "val_accuracy_projected", r->rp.val_projected);
    json_object_end(j);
}

// Prints how the result stands on its pattern and what re-pruning cost.
static void pattern_report(const prune_run *r, double val) {
    size_t off = prune_mask_off_pattern(r->nt, &r->s.pl);
    if (sc_pattern_is_unstructured(&r->cfg.pattern)) return;
    printf("pattern %s: %s\n", r->o.pattern, off ? "SOME WEIGHTS OFF THE PATTERN" : "every pruned layer on it");
    if (r->rp.active)
        printf("re-pruned onto %s: val %.2f%% (start, sparsity %.4f) -> %.2f%% (projected, %.4f) -> "
               "%.2f%% (fine-tuned, %.4f)\n", r->o.pattern, r->rp.val_before, r->rp.sparsity_before,
               r->rp.val_projected, r->rp.sparsity_after, val, net_sparsity(r->nt));
}

// Writes the JSON summary (--json) of a finished or stopped run.
static int summary_json(prune_run *r, double val, double test, const char *plot, sc_err *err) {
    if (!r->o.c.json) return 0;
    prune_pop *p = r->s.pop;
    json_writer j;
    json_init(&j);
    json_object_begin(&j, NULL);
    json_add_string(&j, "tool", TOOL);
    json_add_string(&j, "dataset", r->o.dataset);
    json_add_string(&j, "model", r->nt->arch);
    json_add_string(&j, "output", r->s.finished ? r->out : NULL);
    json_add_string(&j, "from", r->o.from ? r->from : NULL);
    json_add_string(&j, "method", r->o.method);
    json_add_number(&j, "distill_alpha", r->o.distill >= 0 ? r->o.distill : NAN);  // null: no distillation
    json_add_bool(&j, "finished", r->s.finished);
    json_add_int(&j, "iterations_done", p->iter);
    json_add_int(&j, "iterations_total", prune_search_total(&r->s));
    json_add_int(&j, "population", r->cfg.population);
    json_add_int(&j, "halve_every", r->cfg.method == PM_EVOLVE ? r->cfg.halve_every : 0);
    json_add_int(&j, "batches", r->cfg.batches);
    json_add_int(&j, "batch", r->cfg.hp.batch);
    json_add_int(&j, "ranks", dist_size(r->dist));
    json_add_string(&j, "device", exec_device_name(r->ex));
    json_add_string(&j, "precision", r->prec == PREC_FP16 ? "fp16" : "fp32");
    json_add_number(&j, "target_sparsity", r->s.cfg.target);  // as raised by the latency objective
    json_add_string(&j, "latency_allocation",  // latency objective: how plans allocate (--latency-allocation)
                    !r->cfg.ev.lat ? NULL : r->cfg.ev.lat_time ? r->o.lat_alloc : "sparsity");
    json_add_number(&j, "min_layer_sparsity", r->cfg.min_layer);
    json_add_string(&j, "layer_floor", r->o.layer_floor);
    json_add_number(&j, "sparsity", net_sparsity(r->nt));
    json_add_number(&j, "mac_sparsity", net_mac_sparsity(r->nt));
    json_add_number(&j, "start_val_accuracy", p->nhist ? p->hist[0].best_acc : NAN);
    json_add_number(&j, "val_accuracy", val);
    json_add_number(&j, "test_accuracy", test);
    if (r->ds.holdout.n > 0) {
        json_add_number(&j, "holdout_accuracy", r->holdout_acc);
        json_add_int(&j, "holdout_images", r->ds.holdout.n);
    }
    json_add_int(&j, "images", p->images);
    json_add_number(&j, "images_per_second", p->seconds > 0 ? (double)p->images / p->seconds : 0.0);
    json_add_number(&j, "seconds", p->seconds);
    json_add_string(&j, "plot", plot);
    double lf[r->s.pl.n > 0 ? r->s.pl.n : 1];
    floors_end(r, lf);
    pattern_json(r, &j);
    prune_report_json_layers(&j, r->nt, r->rp.active ? r->rp.floors : lf, &r->cfg.pattern);
    json_add_string(&j, "objective", r->o.objective);
    if (r->lat.L > 0) prune_lat_json(&j, &r->lat, r->s.finished ? &r->latres : NULL, r->cfg.ev.lat_target);
    prune_report_json_history(&j, p);
    json_object_end(&j);
    int rc = json_write_file(&j, r->o.c.json, err);
    json_free(&j);
    return rc;
}

// Writes the pruned model with its history line and the accuracies.
static int model_write(prune_run *r, int best, double val, double test, sc_err *err) {
    char line[2048], floor_text[600] = "";
    if (r->cfg.min_layer > 0.0)
        snprintf(floor_text, sizeof floor_text, ", every layer >= %.4f", r->cfg.min_layer);
    if (r->floors)
        snprintf(floor_text + strlen(floor_text), sizeof floor_text - strlen(floor_text),
                 ", layer floors %.500s", r->o.layer_floor);
    if (!sc_pattern_is_unstructured(&r->cfg.pattern))
        snprintf(floor_text + strlen(floor_text), sizeof floor_text - strlen(floor_text),
                 ", pattern %s%s", r->meta.pattern, r->rp.active ? " (re-pruned)" : "");
    snprintf(line, sizeof line,
             "prune: method %s, %s, population %d, %d iterations x %d batches of %d, alpha %g beta %g, "
             "sparsity %.4f (target %.4f%s), %s %s: val %.2f%% test %.2f%%",
             r->o.method, r->o.from ? r->from : "from scratch", r->cfg.population,
             prune_search_total(&r->s), r->cfg.batches, r->cfg.hp.batch, r->cfg.crit.alpha,
             r->cfg.crit.beta, net_sparsity(r->nt), r->cfg.target, floor_text,
             exec_device_name(r->ex), r->prec == PREC_FP16 ? "fp16" : "fp32", val, test);
    SC_TRY(model_meta_add_history(&r->meta, line, err));
    free(r->meta.config);
    r->meta.config = strdup(r->config);
    r->meta.val_accuracy = val;
    r->meta.test_accuracy = test;
    free(r->meta.momentum);  // --resume reads the state file, not the model: no optimizer state
    r->meta.momentum = NULL;
    if (!r->meta.config) return sc_fail(err, "out of memory");
    return model_save(r->out, r->nt, &r->meta, err);
}

// Prints how the pruned layers stand against their --layer-floor floors.
static void floors_report(const prune_run *r) {
    int L = r->s.pl.n, below = 0, over = 0;
    if (!r->floors) return;
    double sp[L > 0 ? L : 1];
    prune_sparsity_read(r->nt, &r->s.pl, sp);
    for (int l = 0; l < L; l++) {
        below += (sp[l] - r->floors[l]) * (double)r->s.pl.count[l] < -0.5;
        over += r->floors[l] > r->cfg.target;
    }
    printf("layer floors (--layer-floor %s): %d of %d pruned layers floored above the target, %s\n",
           r->o.layer_floor, over, L, below ? "SOME BELOW THEIR FLOOR" : "every layer at or above its floor");
}

// A finished run's resumable state is removed unless --keep-state.
static int state_remove(const prune_run *r, sc_err *err) {
    if (r->o.keep_state || remove(r->state) == 0) return 0;
    if (errno == ENOENT) return 0;
    return sc_fail(err, "cannot remove the finished run's state (%s: %s)", r->state, strerror(errno));
}

// Evaluates the winner on the test split, writes the model and every report.
static int finish(prune_run *r, sc_err *err) {
    int best;
    double test, loss, val;
    char plot[1300] = "";
    SC_TRY(prune_search_result(&r->s, &best, err));
    val = r->s.pop->sol[best].acc;
    SC_TRY(train_evaluate(r->ex, &r->ds.test, r->cfg.hp.batch, r->cfg.hp.smoothing, &test, &loss, err));
    r->holdout_acc = NAN;
    if (r->ds.holdout.n > 0)
        SC_TRY(train_evaluate(r->ex, &r->ds.holdout, r->cfg.hp.batch, r->cfg.hp.smoothing,
                              &r->holdout_acc, &loss, err));
    SC_TRY(model_write(r, best, val, test, err));
    SC_TRY(reports_write(r, plot, sizeof plot, err));
    if (r->lat.L > 0) {
        int checks;
        double scale = prune_search_lat_scale(&r->s, &checks);
        prune_lat_final(&r->lo, &r->lat, r->cfg.ev.lat_target, r->nt, &r->s.pl, &r->cfg.pattern, checks,
                        scale, &r->latres);
    }
    prune_report_table(stdout, r->nt, &r->cfg.pattern);
    floors_report(r);
    pattern_report(r, val);
    printf("pruned %s to %.2f%% sparsity (pruned layers): val %.2f%% test %.2f%% (start val %.2f%%), "
           "%ld training images, %.1f s; model: %s, plot: %s\n",
           r->nt->arch, 100.0 * net_sparsity(r->nt), val, test, r->s.pop->hist[0].best_acc,
           r->s.pop->images, r->s.pop->seconds, r->out, plot);
    if (r->ds.holdout.n > 0)
        printf("held-out images (never in training or fitness): %.2f%% on %d\n", r->holdout_acc,
               r->ds.holdout.n);
    SC_TRY(summary_json(r, val, test, plot, err));
    return state_remove(r, err);
}

// A stopped run: reports so far and how to continue.
static int stopped(prune_run *r, sc_err *err) {
    char plot[1300] = "";
    SC_TRY(reports_write(r, plot, sizeof plot, err));
    r->holdout_acc = NAN;
    printf("stopped after iteration %d of %d; continue with: prune --resume%s%s\n", r->s.pop->iter,
           prune_search_total(&r->s), r->o.output ? " -o " : "", r->o.output ? r->o.output : "");
    return summary_json(r, r->s.pop->hist[r->s.pop->nhist - 1].best_acc, NAN, plot, err);
}

// Logs what is about to run.
static void intro(prune_run *r) {
    log_line(stderr, r->o.c.quiet,
             "prune: %s %s on %s (%d train, %d val), %s, population %d, %d iterations x %d batches "
             "of %d, target %.3f, lr %g, %s %s -> %s",
             r->o.method, r->nt->arch, r->o.dataset, r->ds.train.n, r->ds.val.n,
             r->o.from ? r->from : "from scratch", r->cfg.population, prune_search_total(&r->s),
             r->cfg.batches, r->cfg.hp.batch, r->cfg.target, r->cfg.hp.lr,
             exec_device_name(r->ex), r->prec == PREC_FP16 ? "fp16" : "fp32", r->out);
    if (r->cfg.min_layer > 0.0)
        log_line(stderr, r->o.c.quiet, "prune: every pruned layer at least %.3f sparse at the end "
                 "(--min-layer-sparsity)", r->cfg.min_layer);
    if (r->floors)
        log_line(stderr, r->o.c.quiet, "prune: per-layer floors %s (--layer-floor; the floors alone "
                 "need %.4f overall)", r->o.layer_floor, prune_floor_need(&r->s.pl, r->floors));
    if (dist_size(r->dist) > 1)
        log_line(stderr, r->o.c.quiet, "prune: spread over %d ranks (%d on this machine, one device "
                 "each), each training its share of the %d solutions", dist_size(r->dist),
                 dist_local_size(r->dist), r->cfg.population);
}

// Starts or resumes the search, runs it and finishes.
static int search_go(prune_run *r, sc_err *err) {
    SC_TRY(dist_agree(r->dist, prune_search_init(&r->s, &r->cfg, &r->ds, r->nt, r->ex, err), err));
    prune_search_set_dist(&r->s, r->dist);
    if (r->teacher.e) prune_search_set_teacher(&r->s, &r->teacher);
    intro(r);
    if (r->o.resume) {
        char *stored = NULL;
        SC_TRY(prune_search_resume(&r->s, r->state, &stored, err));
        free(stored);
        if (r->s.pop->iter >= prune_search_total(&r->s))
            log_line(stderr, r->o.c.quiet, "prune: %s: every iteration is done; writing the result", r->state);
        else
            log_line(stderr, r->o.c.quiet, "prune: resuming after iteration %d of %d", r->s.pop->iter,
                     prune_search_total(&r->s));
    } else {
        SC_TRY(prune_search_begin(&r->s, err));
    }
    SC_TRY(prune_search_run(&r->s, r->state, r->config, err));
    if (dist_rank(r->dist) != 0)  // rank 0 writes the result and the reports
        return r->s.finished ? prune_search_result(&r->s, NULL, err) : 0;
    return r->s.finished ? finish(r, err) : stopped(r, err);
}

// --distill: the start model (as loaded, before any pruning) on a second
// executor as the teacher; needs --from.
static int teacher_set(prune_run *r, sc_err *err) {
    if (r->o.distill < 0) return 0;
    if (!r->o.from) {
        r->usage = 1;
        return sc_fail(err, "--distill needs --from (the teacher is the start model)");
    }
    SC_TRY(distill_open(&r->teacher, r->nt, r->dev, r->prec, r->cfg.hp.batch, (float)r->o.distill, err));
    log_line(stderr, r->o.c.quiet, "prune: distilling from the start model (targets %.2f x the label + %.2f x "
             "its softmax)", r->o.distill, 1.0 - r->o.distill);
    return 0;
}

// Runs the whole tool after option parsing; returns an exit status.
static int prune_tool(prune_run *r, int argc, char **argv) {
    sc_err err = {0};
    int rc = gpu_select(r, &err) || device_pick(r, &err);
    if (!rc) auto_set(r);
    rc = rc || data_and_net(r, &err) || cfg_set(r, &err) ||
             pattern_names_set(r, &err) || floors_set(r, &err) || paths_set(r, &err) || latency_set(r, &err);
    if (!rc && !r->config && !(r->config = cli_args_join(argc, argv, prune_transient))) rc = sc_fail(&err, "out of memory");
    if (!rc) {
        r->ex = exec_create(r->nt, r->dev, r->prec, r->cfg.hp.batch, &err);
        rc = !r->ex;
    }
    if (!rc) rc = teacher_set(r, &err);
    if (!rc) rc = reprune_set(r, &err);
    rc = dist_agree(r->dist, rc ? -1 : 0, &err);  // every rank leaves on the same path
    if (!rc) rc = search_go(r, &err);
    rc = dist_agree(r->dist, rc, &err);
    if (rc) cli_error(TOOL, "%s", err.msg);
    prune_search_free(&r->s);
    distill_close(&r->teacher);
    exec_free(r->ex);
    net_free(r->nt);
    model_meta_free(&r->meta);
    dataset_free(&r->ds);
    free(r->config);
    free(r->floors);
    prune_reprune_free(&r->rp);
    lat_table_free(&r->lat);
    return rc ? (r->usage ? SC_EXIT_USAGE : SC_EXIT_INPUT) : SC_EXIT_OK;
}

// The settings text stored in the state to resume: rank 0 reads it (-o
// FILE's or runs/latest's), every rank gets a copy in r->config.
static int stored_config(prune_run *r, sc_err *err) {
    prune_opts *o = &r->o;
    char dir[1024] = "", prefix[1100], path[1200];
    int rc = 0;
    if (dist_rank(r->dist) == 0) {
        rc = (!o->output && rundir_latest(o->runs, dir, sizeof dir, err)) ||
             prefix_of(o, dir, prefix, sizeof prefix, err);
        if (!rc) snprintf(path, sizeof path, "%s.state", prefix);
        if (!rc) rc = prune_state_config(path, &r->config, err);
    }
    SC_TRY(dist_agree(r->dist, rc ? -1 : 0, err));
    uint64_t len = r->config ? strlen(r->config) + 1 : 0;
    SC_TRY(dist_bcast(r->dist, &len, sizeof len, 0, err));
    rc = !r->config && !(r->config = calloc(len, 1)) ? sc_fail(err, "out of memory") : 0;
    SC_TRY(dist_agree(r->dist, rc, err));
    return dist_bcast(r->dist, r->config, len, 0, err);
}

// Reads the settings stored in the state to resume and merges them with the
// current ones (current options win); returns a cli status, or -1 after
// printing an input error.
static int resume_opts(prune_run *r, int argc, char **argv) {
    prune_opts *o = &r->o;
    sc_err err = {0};
    if (o->dataset) {
        cli_error(TOOL, "--resume takes the dataset and settings from the run (%s)", o->dataset);
        return CLI_USAGE;
    }
    if (stored_config(r, &err)) {
        cli_error(TOOL, "%s", err.msg);
        return -1;
    }
    int n;
    char **v = cli_args_merge(r->config, argc, argv, &n);
    if (!v) {
        cli_error(TOOL, "out of memory");
        return -1;
    }
    memset(o, 0, sizeof *o);
    return opts_parse(o, n, v);  // v and its strings live until exit
}

// Checks the "number or auto" options before any work (a bad one is a usage
// error): each must be auto or a number in its range.
static int opts_check(const prune_opts *o) {
    const struct { const char *name, *value; double lo, hi; int whole; } v[] = {
        {"epochs", o->epochs, 0, 1e6, 0},   {"finetune", o->finetune, 0, 1e6, 1},
        {"halve-every", o->halve_every, 0, 1e6, 1}, {"ramp-end", o->ramp_end, 0, 1, 0},
        {"lr", o->lr, 1e-9, 100, 0},        {"warmup", o->warmup, 0, 1, 0}};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        double x = num_or_auto(v[i].value, 0, v[i].lo, v[i].hi);
        if (x != -1.0 && !(v[i].whole && x != floor(x))) continue;
        cli_error(TOOL, "--%s: not a %s in [%g, %g] or auto (%s)", v[i].name,
                  v[i].whole ? "whole number" : "number", v[i].lo, v[i].hi, v[i].value);
        return CLI_USAGE;
    }
    return CLI_OK;
}

// Parses the options (and the stored ones on --resume), then runs the tool.
static int prune_start(prune_run *r, int argc, char **argv) {
    int rc = opts_parse(&r->o, argc, argv);
    if (rc == CLI_OK && r->o.resume) rc = resume_opts(r, argc, argv);
    if (rc == CLI_OK) rc = opts_check(&r->o);
    if (rc != CLI_OK) free(r->config);
    if (rc == CLI_HELP) return SC_EXIT_OK;
    if (rc != CLI_OK) return rc == CLI_USAGE ? SC_EXIT_USAGE : SC_EXIT_INPUT;
    return prune_tool(r, argc, argv);
}

// Starts the ranks (one process without mpirun), runs, ends them.
int main(int argc, char **argv) {
    prune_run r;
    sc_err err = {0};
    memset(&r, 0, sizeof r);
    model_meta_init(&r.meta);
    if (dist_init(&r.dist, TOOL, &argc, &argv, &err)) {
        cli_error(TOOL, "%s", err.msg);
        return SC_EXIT_INPUT;
    }
    int rc = prune_start(&r, argc, argv);
    dist_free(r.dist);
    return rc;
}
