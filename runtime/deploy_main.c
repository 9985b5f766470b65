// The `deploy` tool: loads an export (runtime/sparse_model.h), builds the
// deploy plan, and on a GPU checks, times and picks an implementation per
// layer (Algorithm 2 of Pietroń and Żurek, "When deep learning models on GPU can be
// accelerated by taking advantage of unstructured sparsity"), then reports test accuracy, a per-layer
// table, end-to-end images/s at the batch size and latency at batch 1
// against the all-dense cuDNN network in the same precision (same run, CUDA
// graphs), a speedup chart and a JSON summary. Without a GPU it runs the CPU
// path (the reference) and says so.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "datasets/cifar.h"
#include "kernels/median.h"
#include "runtime/cli.h"
#include "runtime/dengine.h"
#include "runtime/deploy_gpu.h"
#include "runtime/deploy_plan.h"
#include "runtime/deploy_refcache.h"
#include "runtime/deploy_report.h"
#include "runtime/exec.h"
#include "runtime/json.h"
#include "runtime/progress.h"
#include "runtime/rundir.h"
#include "runtime/sparse_model.h"

#define TOOL "deploy"

// --- options ----------------------------------------------------------------

typedef struct {
    cli_common c;
    const char *precision, *reference, *ref_cache, *chart, *data_dir, *runs, *engine, *skip_cands;
    int batch, repeat, check_images, test_images;
    double act_min;
    const char *model, *dataset;  // positionals
} deploy_opts;

// Sorts the positionals: [EXPORT.h5] [DATASET]; a lone argument is the
// export when it names a file or ends in .h5, else the dataset.
static void opts_positionals(deploy_opts *o, const char **pos, int npos) {
    struct stat st;
    o->model = o->dataset = NULL;
    if (npos == 2) o->model = pos[0], o->dataset = pos[1];
    if (npos != 1) return;
    size_t n = strlen(pos[0]);
    int file = (stat(pos[0], &st) == 0 && S_ISREG(st.st_mode)) ||
               (n > 3 && !strcmp(pos[0] + n - 3, ".h5"));
    if (file) o->model = pos[0];
    else o->dataset = pos[0];
}

// Parses argv into o; returns CLI_OK, CLI_HELP or CLI_USAGE.
static int opts_parse(deploy_opts *o, int argc, char **argv) {
    cli_opt opts[] = {
        CLI_COMMON_OPTS(o->c),
        {.name = "precision", .type = OPT_CHOICE, .dst = &o->precision, .def = "both",
         .choices = "fp32|fp16|both|none", .help = "sparse plans to build and time on the GPU (the CPU path is fp32;\n"
                                                      "none: only the dense engine of --engine)"},
        {.name = "engine", .type = OPT_STRING, .dst = &o->engine, .def = "fp16,bf16,tf32",
         .metavar = "LIST", .help = "precisions of the dense channels-last engine to build and time as the\n"
                                    "yardstick (fp16, bf16, tf32, comma-separated; none: skip it)"},
        {.name = "skip-candidates", .type = OPT_STRING, .dst = &o->skip_cands, .def = "none",
         .metavar = "LIST", .help = "candidates the sparse plans leave out on every layer: names or families\n"
                                    "(the name up to its first '_'), comma-separated, e.g. actsparse;\n"
                                    "dense baselines cannot be left out (none: time every candidate)"},
        {.name = "actsparse-min-zeros", .type = OPT_FLOAT, .dst = &o->act_min, .def = "0.5", .min = 0,
         .max = 1, .help = "time the activation-sparse candidates only on layers whose input has at\n"
                           "least this fraction of zeros over the CPU reference's images (0: every\n"
                           "layer): they multiply the input's non-zeros, so below the measured\n"
                           "fraction they do more work than where they already lost"},
        {.name = "batch", .short_name = 'b', .type = OPT_INT, .dst = &o->batch, .def = "128",
         .min = 1, .max = 65536, .help = "batch size of the throughput figures and the per-layer choice"},
        {.name = "repeat", .type = OPT_INT, .dst = &o->repeat, .def = "20", .min = 1,
         .max = 100000, .help = "timed runs per measurement (the median is reported)"},
        {.name = "check-images", .type = OPT_INT, .dst = &o->check_images, .def = "4", .min = 1,
         .max = 1024, .help = "images every layer is checked on against the CPU reference before timing"},
        {.name = "reference", .type = OPT_STRING, .dst = &o->reference, .def = "1000",
         .metavar = "N", .help = "GPU runs: first test images also run through the CPU reference to compare\n"
                                 "accuracy and predictions (a number, or all; 0: none)"},
        {.name = "reference-cache", .type = OPT_STRING, .dst = &o->ref_cache, .metavar = "FILE",
         .help = "keeps the CPU reference's top-1 per image and activation counts in FILE: a\n"
                 "later run of the same export and test images reuses them, an interrupted one\n"
                 "goes on where it stopped (default: <EXPORT>.cpuref next to the export;\n"
                 "'none': no cache)"},
        {.name = "test-images", .type = OPT_INT, .dst = &o->test_images, .def = "0", .min = 0,
         .max = 100000000, .help = "use only the first N test images (0: all)"},
        {.name = "chart", .type = OPT_STRING, .dst = &o->chart, .metavar = "FILE",
         .help = "per-layer speedup chart, SVG (default: deploy_speedup.svg next to the export;\n"
                 "'none': no chart)"},
        {.name = "data-dir", .type = OPT_STRING, .dst = &o->data_dir, .def = "data",
         .metavar = "DIR", .help = "where cifar10/cifar100/synthetic live"},
        {.name = "runs", .type = OPT_STRING, .dst = &o->runs, .def = "runs", .metavar = "DIR",
         .help = "root of the run directories"},
    };
    cli_spec spec = {.tool = TOOL, .usage = "deploy [options] [EXPORT.h5] [DATASET]",
                     .summary = "Runs an exported sparse model: checks every layer against the CPU reference,\n"
                                "times each layer's implementations on the GPU and runs the fastest, then\n"
                                "reports test accuracy, a per-layer table and end-to-end speed against the\n"
                                "all-dense cuDNN network. EXPORT.h5: default runs/latest/model.csr.h5;\n"
                                "DATASET: default the one recorded in the export. Without a GPU: the CPU path.",
                     .opts = opts, .nopts = (int)(sizeof opts / sizeof *opts), .min_pos = 0,
                     .max_pos = 2};
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    int rc = cli_parse(&spec, argc, argv, pos, &npos);
    opts_positionals(o, pos, npos);
    return rc;
}

// --- the run ----------------------------------------------------------------

typedef struct {
    deploy_opts o;
    char input[1100], chart[1100];
    sparse_model *m;
    dataset ds;
    data_split test;      // the test images used (a view of ds.test)
    deploy_plan *p;
    deploy_report r;
    int *cpu_pred;        // (test.n) CPU reference top-1, -1 where not run
    refcache cache;       // --reference-cache (path empty: off)
    int nreference;       // --reference resolved
    double *act_z, *act_e; // (nops) zeros and elements of each conv op's input over the CPU's images
    unsigned skip_mask;   // --skip-candidates parsed
    FILE *log;            // progress and warnings (stderr), NULL when quiet
    double t0;
} deploy_run;

// Top-1 class of one row of logits (first maximum wins).
static int top1(const float *row, int classes) {
    int best = 0;
    for (int k = 1; k < classes; k++)
        if (row[k] > row[best]) best = k;
    return best;
}

// Finds the export: the positional, else runs/latest/model.csr.h5.
static int input_resolve(deploy_run *d, sc_err *err) {
    if (d->o.model) {
        snprintf(d->input, sizeof d->input, "%s", d->o.model);
        return 0;
    }
    const char *cand[] = {"model.csr.h5", NULL};
    if (rundir_find_input(d->o.runs, cand, d->input, sizeof d->input, err) == 0) return 0;
    if (!strstr(err->msg, "(run ")) sc_wrap(err, "no export to deploy (run export first)");
    return -1;
}

// Images of --reference: all, or a number (at most the test images).
static int reference_count(const deploy_run *d, int *n, sc_err *err) {
    if (!strcmp(d->o.reference, "all")) {
        *n = d->test.n;
        return 0;
    }
    char *end;
    long v = strtol(d->o.reference, &end, 10);
    if (end == d->o.reference || *end || v < 0)
        return sc_fail(err, "--reference: not 'all' or a number >= 0 (%s)", d->o.reference);
    *n = v < d->test.n ? (int)v : d->test.n;
    return 0;
}

// Sets up --reference-cache: FILE, none, or <export>.cpuref by default.
static int cache_open(deploy_run *d, sc_err *err) {
    char path[1100] = "";
    if (!d->o.ref_cache) snprintf(path, sizeof path, "%.1092s.cpuref", d->input);
    else if (strcmp(d->o.ref_cache, "none")) snprintf(path, sizeof path, "%s", d->o.ref_cache);
    return refcache_open(&d->cache, path, d->input, d->ds.test.images, d->ds.test.n, CIFAR_IMAGE_BYTES, d->p->nops,
                         err);
}

// Loads the export, opens its dataset and builds the plan.
static int model_and_data(deploy_run *d, sc_err *err) {
    SC_TRY(input_resolve(d, err));
    const double t_load = progress_clock();
    if (!(d->m = sparse_model_load(d->input, err))) return -1;
    d->r.load_seconds = progress_clock() - t_load;
    const net *nt = d->m->nt;
    const char *ds = d->o.dataset ? d->o.dataset : d->m->dataset;
    if (!ds[0]) return sc_fail(err, "%s does not record its dataset; name one (deploy FILE DATASET)", d->input);
    SC_TRY(dataset_open(ds, d->o.data_dir, 0, (uint64_t)d->o.c.seed, &d->ds, err));
    if (d->ds.classes != nt->classes)
        return sc_fail(err, "%s: the model has %d classes, dataset %s has %d", d->input, nt->classes,
                       ds, d->ds.classes);
    if (nt->in_c != 3 || nt->in_h != CIFAR_SIDE || nt->in_w != CIFAR_SIDE)
        return sc_fail(err, "%s: the model takes %dx%dx%d images, the dataset has 3x32x32", d->input,
                       nt->in_c, nt->in_h, nt->in_w);
    d->test = d->ds.test;
    if (d->o.test_images > 0 && d->o.test_images < d->test.n) d->test.n = d->o.test_images;
    if (d->test.n < 1) return sc_fail(err, "dataset %s has no test images", ds);
    SC_TRY(reference_count(d, &d->nreference, err));
    if (!(d->p = deploy_plan_build(d->m, err))) return sc_wrap(err, "%s", d->input);
    d->cpu_pred = malloc((size_t)d->test.n * sizeof *d->cpu_pred);
    d->act_z = calloc((size_t)d->p->nops, sizeof *d->act_z);
    d->act_e = calloc((size_t)d->p->nops, sizeof *d->act_e);
    d->r.act_sparsity = malloc((size_t)d->p->nops * sizeof *d->r.act_sparsity);
    if (!d->cpu_pred || !d->act_z || !d->act_e || !d->r.act_sparsity) return sc_fail(err, "out of memory");
    for (int i = 0; i < d->test.n; i++) d->cpu_pred[i] = -1;
    return cache_open(d, err);
}

// Image i of the test images.
static const uint8_t *test_image(const deploy_run *d, int i) {
    return d->test.images + (size_t)i * CIFAR_IMAGE_BYTES;
}

// A batch of n test images starting at image 0, repeated when the test set is smaller.
static uint8_t *batch_images(const deploy_run *d, int n) {
    uint8_t *b = malloc((size_t)n * CIFAR_IMAGE_BYTES);
    for (int i = 0; b && i < n; i++)
        memcpy(b + (size_t)i * CIFAR_IMAGE_BYTES, test_image(d, i % d->test.n), CIFAR_IMAGE_BYTES);
    return b;
}

// --- the CPU path -------------------------------------------------------------

// Counts the zeros of every conv op's input over the n images of c's last forward.
static void act_add(deploy_run *d, const deploy_cpu *c, int n) {
    deploy_cpu_act_zeros(c, n, d->act_z, d->act_e);
    d->r.act_images += n;
}

// The report's activation sparsity per op from the counts (NAN: not a conv or not measured).
static void act_finish(deploy_run *d) {
    for (int i = 0; i < d->p->nops; i++) d->r.act_sparsity[i] = d->act_e[i] > 0 ? d->act_z[i] / d->act_e[i] : NAN;
}

// Saves the CPU reference's first `done` images to the cache (every 20 s
// unless `now`); a failed save is a warning and turns the cache off.
static void cache_save(deploy_run *d, int done, int now) {
    if (!d->cache.path[0] || (!now && progress_clock() - d->cache.last_save < 20.0)) return;
    refcache_state s = {done, d->test.n, d->cpu_pred, d->act_z, d->act_e, d->r.act_images};
    sc_err err = {{0}};
    if (refcache_save(&d->cache, &s, &err) == 0) return;
    fprintf(stderr, "%s: warning: --reference-cache: %s (going on without it)\n", TOOL, err.msg);
    d->cache.path[0] = 0;
}

// The images the cache already holds (their predictions and activation
// counts loaded), at most count.
static int cache_resume(deploy_run *d, int count) {
    refcache_state s = {0, d->test.n, d->cpu_pred, d->act_z, d->act_e, 0};
    const int loaded = refcache_load(&d->cache, &s), done = loaded < count ? loaded : count;
    if (!done) return 0;
    d->r.act_images = s.act_images;
    if (d->log) fprintf(d->log, "CPU reference: %d images from %s\n", done, d->cache.path);
    return done;
}

// Runs the CPU plan over the first `count` test images in batches of n
// (those in the cache skipped): predictions into cpu_pred, accuracy, median
// batch time (NAN when no full batch ran).
static int cpu_pass(deploy_run *d, deploy_cpu *c, int n, int count, double *batch_ms, sc_err *err) {
    const int classes = d->m->nt->classes;
    float *lg = malloc((size_t)n * classes * sizeof *lg);
    double *times = malloc(((size_t)count / n + 1) * sizeof *times);
    if (!lg || !times) return free(lg), free(times), sc_fail(err, "out of memory");
    const int start = cache_resume(d, count);
    progress pg;
    progress_start(&pg, stderr, "CPU reference", count, d->log == NULL || start == count);
    progress_resume(&pg, start);
    int nt = 0, rc = 0, i;
    for (i = start; i < count && !rc; i += n) {
        int b = count - i < n ? count - i : n;
        double t = progress_clock();
        rc = deploy_cpu_forward(c, b, test_image(d, i), lg, err);
        if (b == n) times[nt++] = (progress_clock() - t) * 1000.0;
        if (!rc) act_add(d, c, b);
        for (int k = 0; k < b && !rc; k++) d->cpu_pred[i + k] = top1(lg + (size_t)k * classes, classes);
        if (!rc) cache_save(d, i + b, 0);
        progress_update(&pg, i + b, NULL);
    }
    progress_finish(&pg, NULL);
    if (!rc && i > start) cache_save(d, count, 1);
    long hits = 0;
    for (int k = 0; k < count; k++) hits += d->cpu_pred[k] == d->test.labels[k];
    d->r.cpu_images = count;
    d->r.cpu_acc = 100.0 * (double)hits / count;
    *batch_ms = NAN;
    if (nt) *batch_ms = sc_median(times, nt);  // median of the full batches
    free(lg), free(times);
    return rc;
}

// Median time of a few runs of one CPU plan op (the whole forward when op < 0).
static double cpu_time_op(deploy_run *d, deploy_cpu *c, int op, int n, int reps) {
    double best[64];
    reps = reps > 64 ? 64 : reps;
    for (int k = 0; k < reps; k++) {
        double t = progress_clock();
        if (op >= 0) deploy_cpu_op(c, op, n);
        else deploy_cpu_forward(c, n, test_image(d, 0), NULL, NULL);
        best[k] = (progress_clock() - t) * 1000.0;
    }
    return sc_median(best, reps);
}

// Times the dense CPU executor on the export's (densified, folded) net.
static int cpu_dense(deploy_run *d, int n, int reps, sc_err *err) {
    exec *e = exec_create(d->m->nt, DEV_CPU, PREC_FP32, n, err);
    if (!e) return -1;
    float *lg = malloc((size_t)n * d->m->nt->classes * sizeof *lg);
    uint8_t *img = batch_images(d, n);
    int *lab = calloc((size_t)n, sizeof *lab), rc = lg && img && lab ? 0 : sc_fail(err, "out of memory");
    double ms[2] = {INFINITY, INFINITY};
    for (int s = 0; s < 2 && !rc; s++)  // the batch, then one image
        for (int k = 0; k < (s ? reps : (reps < 3 ? reps : 3)) && !rc; k++) {
            exec_batch b = {s ? 1 : n, img, lab, NULL, NULL, NULL, NULL};
            double t = progress_clock();
            rc = exec_eval_batch(e, &b, 0.0f, lg, err);
            double x = (progress_clock() - t) * 1000.0;
            ms[s] = x < ms[s] ? x : ms[s];
        }
    d->r.cpu_dense_ms = ms[0], d->r.cpu_dense_lat_ms = ms[1];
    free(lg), free(img), free(lab);
    exec_free(e);
    return rc;
}

// The CPU path: accuracy over the test images, per-op times, end-to-end
// times of the plan and of the dense executor.
static int cpu_path(deploy_run *d, sc_err *err) {
    const int n = d->o.batch < d->test.n ? d->o.batch : d->test.n;
    deploy_cpu *c = deploy_cpu_create(d->p, n, err);
    if (!c) return -1;
    int reps = d->o.repeat < 3 ? d->o.repeat : 3, rc = cpu_pass(d, c, n, d->test.n, &d->r.cpu_ms, err);
    if (!rc && !(d->r.cpu_op_ms = malloc((size_t)d->p->nops * sizeof(double))))
        rc = sc_fail(err, "out of memory");
    for (int i = 0; !rc && i < d->p->nops; i++) d->r.cpu_op_ms[i] = cpu_time_op(d, c, i, n, reps);
    if (!rc) d->r.cpu_lat_ms = cpu_time_op(d, c, -1, 1, d->o.repeat);
    if (!isfinite(d->r.cpu_ms)) d->r.cpu_ms = cpu_time_op(d, c, -1, n, reps);
    deploy_cpu_free(c);
    d->r.batch = n;
    return rc ? -1 : cpu_dense(d, n, d->o.repeat, err);
}

// --- the GPU path -------------------------------------------------------------

// Max |a - b| / max |b| over n values (infinite on a NaN).
static double max_rel_err(size_t n, const float *a, const float *b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= num)) num = e;  // NaN propagates
        den = fabs(b[i]) > den ? fabs(b[i]) : den;
    }
    return den > 0 ? num / den : num;
}

// Top-1 hits over every test image, and agreement with the CPU reference's
// top-1 on the images it ran.
typedef struct {
    long hits;                // over all test images
    long agree, compared;     // equal to the CPU's top-1, out of the images it ran
    long ref_hits;            // hits among those images
} test_counts;

// A forward of n images into logits: the GPU plan or the dense engine.
typedef int (*forward_fn)(void *ctx, int n, const uint8_t *images, float *logits, sc_err *err);

// Runs `fwd` over every test image in batches of --batch and counts.
static int test_pass(deploy_run *d, forward_fn fwd, void *ctx, const char *label, test_counts *c,
                     sc_err *err) {
    const int n = d->o.batch, classes = d->m->nt->classes;
    float *lg = malloc((size_t)n * classes * sizeof *lg);
    if (!lg) return sc_fail(err, "out of memory");
    progress pg;
    progress_start(&pg, stderr, label, d->test.n, d->log == NULL);
    memset(c, 0, sizeof *c);
    int rc = 0;
    for (int i = 0; i < d->test.n && !rc; i += n) {
        int b = d->test.n - i < n ? d->test.n - i : n;
        rc = fwd(ctx, b, test_image(d, i), lg, err);
        for (int k = 0; k < b && !rc; k++) {
            int y = top1(lg + (size_t)k * classes, classes), hit = y == d->test.labels[i + k];
            c->hits += hit;
            if (d->cpu_pred[i + k] < 0) continue;
            c->compared++, c->agree += y == d->cpu_pred[i + k], c->ref_hits += hit;
        }
        progress_update(&pg, i + b, NULL);
    }
    progress_finish(&pg, NULL);
    free(lg);
    return rc;
}

// deploy_gpu_forward as a forward_fn.
static int plan_forward(void *g, int n, const uint8_t *img, float *lg, sc_err *err) {
    return deploy_gpu_forward(g, n, img, lg, err);
}

// Runs the GPU plan over every test image: accuracy and agreement with the CPU reference.
static int gpu_accuracy(deploy_run *d, deploy_gpu *g, deploy_prec_result *pr, sc_err *err) {
    test_counts c;
    int rc = test_pass(d, plan_forward, g, pr->prec == DP_FP16 ? "GPU fp16 accuracy" : "GPU fp32 accuracy",
                       &c, err);
    pr->test_acc = 100.0 * (double)c.hits / d->test.n;
    pr->agree = c.agree, pr->compared = c.compared;
    pr->ref_acc = c.compared ? 100.0 * (double)c.ref_hits / c.compared : NAN;
    return rc;
}

// End-to-end: the chosen plan and the all-dense one, at batch n (the plan
// is tuned at n first); ms and dense_ms get the medians.
static int gpu_end_to_end(deploy_run *d, deploy_gpu *g, int n, const uint8_t *img, deploy_cpu *ref,
                          int nref, deploy_timing *t, double *ms, double *dense_ms, int *graph,
                          sc_err *err) {
    int g2 = 0, convs = 0;
    for (int i = 0; i < d->p->nops; i++) convs += d->p->ops[i].kind == DOP_CONV;
    log_line(stderr, d->o.c.quiet, "%s: checking and timing every implementation of %d layers at batch %d",
             TOOL, convs, n);
    SC_TRY(deploy_gpu_tune(g, n, img, ref, nref < n ? nref : n, d->o.repeat, t, stderr, err));
    SC_TRY(deploy_gpu_time(g, n, d->o.repeat, ms, graph, err));
    SC_TRY(deploy_gpu_choose_dense(g, err));
    SC_TRY(deploy_gpu_time(g, n, d->o.repeat, dense_ms, &g2, err));
    *graph = *graph && g2;
    return deploy_gpu_choose(g, t->chosen, err);
}

// Checks the GPU plan's logits on the check images against the CPU's.
static int gpu_logits_check(deploy_run *d, deploy_gpu *g, const float *ref_logits, int nref,
                            deploy_prec_result *pr, sc_err *err) {
    const int classes = d->m->nt->classes;
    float *lg = malloc((size_t)nref * classes * sizeof *lg);
    if (!lg) return sc_fail(err, "out of memory");
    int rc = deploy_gpu_forward(g, nref, test_image(d, 0), lg, err);
    if (!rc) pr->logits_err = max_rel_err((size_t)nref * classes, lg, ref_logits);
    free(lg);
    return rc;
}

// One precision on the GPU: check, tune and time at the batch size, accuracy,
// then tune and time at batch 1; the all-dense network timed alongside.
static int gpu_prec(deploy_run *d, deploy_cpu *ref, const float *ref_logits, int nref,
                    deploy_prec_result *pr, sc_err *err) {
    log_line(stderr, d->o.c.quiet, "%s: %s plan", TOOL, deploy_prec_name(pr->prec));
    act_finish(d);  // the CPU reference has run: the filter of the activation-sparse candidates
    const deploy_gpu_skip skip = {.cands = d->skip_mask, .act_sparsity = d->r.act_sparsity,
                                  .act_min = d->o.act_min};
    deploy_gpu *g = deploy_gpu_create(d->p, pr->prec, d->o.batch, &skip, stderr, err);
    if (!g) return -1;
    d->r.device = deploy_gpu_device(g);
    uint8_t *img = batch_images(d, d->o.batch);
    int rc = img ? 0 : sc_fail(err, "out of memory"), g1 = 0;
    if (!rc) rc = deploy_timing_init(&pr->tb, d->p->nops, d->o.batch, err);
    if (!rc) rc = deploy_timing_init(&pr->t1, d->p->nops, 1, err);
    if (!rc)
        rc = gpu_end_to_end(d, g, d->o.batch, img, ref, nref, &pr->tb, &pr->ms, &pr->dense_ms,
                            &pr->graph, err);
    if (!rc) rc = gpu_logits_check(d, g, ref_logits, nref, pr, err);
    if (!rc) rc = gpu_accuracy(d, g, pr, err);
    if (!rc) rc = gpu_end_to_end(d, g, 1, img, ref, nref, &pr->t1, &pr->lat_ms, &pr->dense_lat_ms, &g1, err);
    pr->graph = pr->graph && g1;
    pr->ran = rc == 0;
    free(img);
    deploy_gpu_free(g);
    return rc;
}

// --- the dense engine (the yardstick) ------------------------------------------

// 1 when --engine names precision k.
static int engine_wanted(const deploy_run *d, dengine_prec k) {
    const char *name = dengine_prec_name(k), *s = d->o.engine;
    const size_t n = strlen(name);
    for (const char *at = strstr(s, name); at; at = strstr(at + 1, name))
        if ((at == s || at[-1] == ',') && (at[n] == ',' || at[n] == 0)) return 1;
    return 0;
}

// Checks --engine: a comma-separated list of fp16, bf16, tf32, or none.
static int engine_list_check(const deploy_run *d, sc_err *err) {
    size_t want = 0;
    if (!strcmp(d->o.engine, "none")) return 0;
    for (int k = 0; k < DE_NPREC; k++) want += engine_wanted(d, (dengine_prec)k) ? strlen(dengine_prec_name((dengine_prec)k)) + 1 : 0;
    if (want != strlen(d->o.engine) + 1)
        return sc_fail(err, "--engine: not a comma-separated list of fp16, bf16, tf32, or none (%s)", d->o.engine);
    return 0;
}

// dengine_forward as a forward_fn.
static int engine_forward(void *e, int n, const uint8_t *img, float *lg, sc_err *err) {
    return dengine_forward(e, n, img, lg, err);
}

// The engine's accuracy over every test image and its agreement with the
// CPU reference's top-1.
static int engine_accuracy(deploy_run *d, dengine *e, deploy_engine_result *er, sc_err *err) {
    test_counts c;
    int rc = test_pass(d, engine_forward, e, "dense engine accuracy", &c, err);
    er->test_acc = 100.0 * (double)c.hits / d->test.n;
    er->agree = c.agree, er->compared = c.compared;
    return rc;
}

// Builds the engine (mixed: the mixed fp16 plan) at batch n on img, and times it.
static dengine *engine_build(deploy_run *d, dengine_prec k, int mixed, int n, const uint8_t *img,
                             double *ms, sc_err *err) {
    dengine *e = mixed ? dengine_create_mixed(d->p, n, img, 5, 0, err) : dengine_create(d->p, k, n, img, 5, err);
    if (e && dengine_time(e, d->o.repeat, ms, err)) dengine_free(e), e = NULL;
    return e;
}

// Lists the ops a mixed plan runs sparse into er.
static void engine_sparse_ops(const deploy_run *d, const dengine *e, deploy_engine_result *er) {
    size_t at = 0;
    er->nsparse = 0, er->sparse[0] = 0;
    for (int i = 0; i < d->p->nops; i++) {
        const int path = dengine_op_sparse(e, i);
        char how[96] = "";
        if (!path) continue;
        er->nsparse++;
        if (path >= 2) dengine_op_describe(e, i, how, sizeof how);
        if (at < sizeof er->sparse)
            at += (size_t)snprintf(er->sparse + at, sizeof er->sparse - at, "%s%s%s%s%s", at ? " " : "",
                                   d->p->ops[i].name, path >= 2 ? "(" : "", how, path >= 2 ? ")" : "");
    }
}

// Keeps the mixed plan's per-conv times (cuDNN path, best sparse path) and paths in er.
static int engine_layer_times(const deploy_run *d, const dengine *e, deploy_engine_result *er, sc_err *err) {
    const size_t n = d->p->nops > 0 ? (size_t)d->p->nops : 1;
    er->op_dense_ms = malloc(n * sizeof(double)), er->op_sparse_ms = malloc(n * sizeof(double));
    er->op_path = malloc(n), er->op_graph_gain_ms = malloc(n * sizeof(double));
    if (!er->op_dense_ms || !er->op_sparse_ms || !er->op_path || !er->op_graph_gain_ms)
        return sc_fail(err, "out of memory");
    for (int i = 0; i < d->p->nops; i++) {
        dengine_op_paths_ms(e, i, &er->op_dense_ms[i], &er->op_sparse_ms[i], &er->op_graph_gain_ms[i]);
        er->op_path[i] = (signed char)dengine_op_sparse(e, i);
    }
    dengine_tail_ms(e, &er->tail_ms, &er->tail_off_ms);
    snprintf(er->tail_note, sizeof er->tail_note, "%s", dengine_tail_note(e));
    return 0;
}

// Max |engine - CPU| / max |CPU| of tensor t on the first m images: the
// engine's (m, h, w, c) against the CPU reference's bordered NCHW tensor.
static double tensor_rel_err(const deploy_run *d, const deploy_cpu *ref, int t, int m, const float *nhwc) {
    const dops_geom g = deploy_tensor_geom(d->p, t, m);
    const float *cpu = deploy_cpu_tensor(ref, t);
    double num = 0.0, den = 0.0;
    for (int i = 0; i < m; i++)
        for (int y = 0; y < g.h; y++)
            for (int x = 0; x < g.w; x++)
                for (int c = 0; c < g.c; c++) {
                    const double a = nhwc[(((size_t)i * g.h + y) * g.w + x) * g.c + c];
                    const double b = cpu[dops_geom_at(&g, (size_t)i * g.c + c, y, x)], e = fabs(a - b);
                    if (!(e <= num)) num = e;  // NaN propagates
                    den = fabs(b) > den ? fabs(b) : den;
                }
    return den > 0 ? num / den : num;
}

// Prints every op's output error against the CPU reference on the m check
// images, for the graph's replay and for the same ops queued one by one:
// where an engine that disagrees with the CPU goes wrong.
static int engine_diagnose(const deploy_run *d, dengine *e, const deploy_cpu *ref, int m, const char *what,
                           sc_err *err) {
    size_t big = 0;
    for (int t = 0; t < d->p->ntensors; t++) {
        const deploy_tensor *x = &d->p->tensors[t];
        big = (size_t)x->c * x->h * x->w > big ? (size_t)x->c * x->h * x->w : big;
    }
    float *h = malloc(big * m * sizeof *h);
    if (!h) return sc_fail(err, "out of memory");
    int rc = 0;
    for (int eager = 0; eager < 2 && !rc; eager++) {
        rc = eager ? dengine_forward_eager(e, m, test_image(d, 0), NULL, err)
                   : dengine_forward(e, m, test_image(d, 0), NULL, err);
        fprintf(stderr, "%s: diagnosis of the %s (%s), output error against the CPU per op:", TOOL, what,
                eager ? "ops queued one by one" : "graph replay");
        for (int i = 0; i < d->p->nops && !rc; i++) {
            const int t = dengine_op_tensor(e, i);
            if (t < 0) continue;
            rc = dengine_tensor(e, t, m, h, err);
            if (!rc) fprintf(stderr, " %s %.1e", d->p->ops[i].name, tensor_rel_err(d, ref, t, m, h));
        }
        fprintf(stderr, "\n");
    }
    free(h);
    return rc;
}

// One engine (a precision, or the mixed fp16 plan): build and time at the
// batch size, accuracy and logits against the CPU, then build and time at
// batch 1.
static int engine_run(deploy_run *d, dengine_prec k, int mixed, deploy_engine_result *er,
                      const deploy_cpu *ref, const float *ref_logits, int nref, sc_err *err) {
    const int classes = d->m->nt->classes;
    const char *what = mixed ? "mixed fp16 plan" : dengine_prec_name(k);
    log_line(stderr, d->o.c.quiet, "%s: %s%s", TOOL, mixed ? "" : "dense engine ", what);
    double t0 = progress_clock();
    uint8_t *img = batch_images(d, d->o.batch);
    float *lg = malloc((size_t)nref * classes * sizeof *lg);
    int rc = img && lg ? 0 : sc_fail(err, "out of memory");
    dengine *e = rc ? NULL : engine_build(d, k, mixed, d->o.batch, img, &er->ms, err);
    rc = e ? 0 : -1;
    if (!rc && mixed) rc = dengine_time_vs_dense(e, d->o.repeat, &er->ab_ms, &er->ab_dense_ms, err);
    if (!rc && mixed) rc = dengine_time_pdl(e, d->o.repeat, er->pdl_ms, err);
    if (!rc) engine_sparse_ops(d, e, er);
    if (!rc && mixed) rc = engine_layer_times(d, e, er, err);
    if (!rc) rc = dengine_forward(e, nref, test_image(d, 0), lg, err);
    if (!rc) er->logits_err = max_rel_err((size_t)nref * classes, lg, ref_logits);
    if (!rc && !(er->logits_err <= 5e-2)) rc = engine_diagnose(d, e, ref, nref, what, err);
    if (!rc) rc = engine_accuracy(d, e, er, err);
    dengine_free(e);
    e = rc ? NULL : engine_build(d, k, mixed, 1, img, &er->lat_ms, err);
    rc = e ? 0 : -1;
    if (!rc && mixed) rc = dengine_time_vs_dense(e, d->o.repeat, &er->ab_lat_ms, &er->ab_dense_lat_ms, err);
    if (!rc && mixed) rc = dengine_time_pdl(e, d->o.repeat, er->pdl_lat_ms, err);
    dengine_free(e);
    er->build_s = progress_clock() - t0;
    er->ran = rc == 0;
    if (er->ran)
        log_line(stderr, d->o.c.quiet, "%s: %s: batch %d %.3f ms, batch 1 %.3f ms, test %.2f%%, "
                 "top-1 = CPU on %ld of %ld", TOOL, what, d->o.batch, er->ms, er->lat_ms,
                 er->test_acc, er->agree, er->compared);
    if (er->ran && er->compared > 0 && er->agree < 0.99 * er->compared)  // fp16 ties flip a few, not more
        fprintf(stderr, "%s: warning: the %s agrees with the CPU reference's top-1 on only %ld of %ld images\n",
                TOOL, what, er->agree, er->compared);
    free(img), free(lg);
    return rc;
}

// 1 when the fp16 sparse plan was asked for (then the mixed fp16 plan runs too).
static int rep_has_fp16(const deploy_run *d) {
    for (int i = 0; i < d->r.nprec; i++)
        if (d->r.pr[i].prec == DP_FP16) return 1;
    return 0;
}

// Runs the per-layer plan of one precision; when it stops (a library refusal
// in a weaker baseline must not lose the engines' figures) notes why in the
// report and on stderr, and the run goes on (main exits non-zero at the end).
static void plan_or_note(deploy_run *d, deploy_cpu *ref, const float *ref_logits, int nref, deploy_prec_result *pr) {
    sc_err why = {{0}};
    if (gpu_prec(d, ref, ref_logits, nref, pr, &why) == 0) return;
    pr->ran = 0;
    snprintf(pr->failed, sizeof pr->failed, "%s", why.msg[0] ? why.msg : "unknown error");
    fprintf(stderr, "%s: the %s per-layer plan stopped (its figures are left out): %s\n", TOOL,
            deploy_prec_name(pr->prec), pr->failed);
}

// 1 when a per-layer plan stopped (its message in err).
static int plans_failed(const deploy_run *d, sc_err *err) {
    for (int i = 0; i < d->r.nprec; i++)
        if (d->r.pr[i].failed[0])
            return sc_fail(err, "the %s per-layer plan stopped: %s", deploy_prec_name(d->r.pr[i].prec),
                           d->r.pr[i].failed) != 0;
    return 0;
}

// The GPU path: the CPU reference (check images and --reference images),
// then every precision asked for.
static int gpu_path(deploy_run *d, sc_err *err) {
    int nref = d->o.check_images < d->test.n ? d->o.check_images : d->test.n, nall = d->nreference;
    const int classes = d->m->nt->classes;
    deploy_cpu *ref = deploy_cpu_create(d->p, nref, err);
    float *ref_logits = malloc((size_t)nref * classes * sizeof *ref_logits);
    int rc = ref && ref_logits ? 0 : -1;
    if (ref && !ref_logits) sc_fail(err, "out of memory");
    if (!rc) rc = deploy_cpu_forward(ref, nref, test_image(d, 0), ref_logits, err);
    if (!rc && nall == 0) act_add(d, ref, nref);  // else the --reference images are counted
    if (!rc && nall > 0) {
        int n = d->o.batch < 64 ? d->o.batch : 64;
        deploy_cpu *c = deploy_cpu_create(d->p, n, err);
        double ms;
        rc = c ? cpu_pass(d, c, n, nall, &ms, err) : -1;
        deploy_cpu_free(c);
    }
    for (int k = 0; k < DE_NPREC && !rc; k++)
        if (engine_wanted(d, (dengine_prec)k))
            rc = engine_run(d, (dengine_prec)k, 0, &d->r.eng[k], ref, ref_logits, nref, err);
    if (!rc && d->r.eng[DE_FP16].ran && rep_has_fp16(d))
        rc = engine_run(d, DE_FP16, 1, &d->r.mixed, ref, ref_logits, nref, err);
    for (int i = 0; i < d->r.nprec && !rc; i++) plan_or_note(d, ref, ref_logits, nref, &d->r.pr[i]);
    free(ref_logits);
    deploy_cpu_free(ref);
    return rc;
}

// --- device, reports, main ------------------------------------------------------

// Picks the path (GPU or CPU) and the precisions from the options.
static int device_pick(deploy_run *d, sc_err *err) {
    sc_err why = {{0}};
    int gpu = strcmp(d->o.c.device, "cpu") && deploy_gpu_available(&why);
    if (!strcmp(d->o.c.device, "gpu") && !gpu) return sc_fail(err, "--device gpu: %s", why.msg);
    if (!gpu && !strcmp(d->o.precision, "fp16"))
        return sc_fail(err, "--precision fp16 needs the GPU (running on the CPU)");
    if (!gpu && !strcmp(d->o.c.device, "auto") && d->log)
        fprintf(d->log, "%s: %s; running the CPU path (fp32, no GPU timings)\n", TOOL, why.msg);
    d->r.gpu = gpu;
    d->r.nprec = 0;
    const int none = !strcmp(d->o.precision, "none");
    if (!gpu && none) return sc_fail(err, "--precision none needs the GPU (running on the CPU)");
    if (gpu && !none && strcmp(d->o.precision, "fp16")) d->r.pr[d->r.nprec++].prec = DP_FP32;
    if (gpu && !none && strcmp(d->o.precision, "fp32")) d->r.pr[d->r.nprec++].prec = DP_FP16;
    d->r.device = gpu ? "gpu" : "cpu";
    return 0;
}

// Fills the report's fixed fields.
static void report_init(deploy_run *d) {
    d->r.input = d->input;
    d->r.dataset = d->o.dataset ? d->o.dataset : d->m->dataset;
    d->r.arch = d->m->nt->arch;
    d->r.batch = d->o.batch, d->r.repeat = d->o.repeat;
    d->r.test_images = d->test.n;
    d->r.sparsity = deploy_plan_sparsity(d->p);
    d->r.mac_sparsity = deploy_plan_mac_sparsity(d->p);
    d->r.skip_cands = d->skip_mask, d->r.act_min = d->o.act_min;
    d->r.dense_note = d->r.gpu ? "the dense engine of the plan's precision (TF32 for the fp32 plan) is "
                                 "the yardstick; the old per-layer cuDNN plan (fp32: NCHW, TF32 off; "
                                 "fp16: per layer the faster of NCHW and NHWC with transposes) is a "
                                 "weaker baseline, shown for reference"
                               : "the dense CPU executor on the export's densified net";
}

// Writes the chart (GPU runs) next to the export or to --chart.
static void chart_write(deploy_run *d) {
    if (!d->r.gpu || !d->r.nprec || (d->o.chart && !strcmp(d->o.chart, "none"))) return;
    if (d->o.chart) {
        snprintf(d->chart, sizeof d->chart, "%s", d->o.chart);
    } else {
        snprintf(d->chart, sizeof d->chart, "%s", d->input);
        char *slash = strrchr(d->chart, '/');
        snprintf(slash ? slash + 1 : d->chart, sizeof d->chart - (size_t)(slash ? slash + 1 - d->chart : 0),
                 "deploy_speedup.svg");
    }
    sc_err err = {{0}};
    if (deploy_report_chart(d->chart, d->p, &d->r, &err) == 0)
        snprintf(d->r.chart, sizeof d->r.chart, "%s", d->chart);
    else fprintf(stderr, "%s: warning: %s\n", TOOL, err.msg);
}

// Prints the table and the summary; writes the chart and the JSON summary.
static int reports(deploy_run *d, sc_err *err) {
    d->r.seconds = progress_clock() - d->t0;
    act_finish(d);
    chart_write(d);
    FILE *out = d->o.c.json && !strcmp(d->o.c.json, "-") ? stderr : stdout;
    if (!d->o.c.quiet && (!d->r.gpu || d->r.nprec)) deploy_report_table(out, d->p, &d->r);
    deploy_report_summary(out, d->p, &d->r);
    if (d->r.chart[0] && !d->o.c.quiet) fprintf(out, "chart: %s\n", d->r.chart);
    if (!d->o.c.json) return 0;
    json_writer j;
    json_init(&j);
    deploy_report_json(&j, d->p, &d->r);
    int rc = json_write_file(&j, d->o.c.json, err);
    json_free(&j);
    return rc;
}

// Frees everything a run holds.
static void run_free(deploy_run *d) {
    for (int i = 0; i < 2; i++) deploy_timing_free(&d->r.pr[i].tb), deploy_timing_free(&d->r.pr[i].t1);
    free(d->r.cpu_op_ms), free(d->cpu_pred), free(d->act_z), free(d->act_e), free(d->r.act_sparsity);
    free(d->r.mixed.op_dense_ms), free(d->r.mixed.op_sparse_ms), free(d->r.mixed.op_path);
    free(d->r.mixed.op_graph_gain_ms);
    deploy_plan_free(d->p);
    sparse_model_free(d->m);
    dataset_free(&d->ds);
}

int main(int argc, char **argv) {
    deploy_run d;
    memset(&d, 0, sizeof d);
    int rc = opts_parse(&d.o, argc, argv);
    if (rc == CLI_HELP) return SC_EXIT_OK;
    if (rc != CLI_OK) return SC_EXIT_USAGE;
    d.t0 = progress_clock();
    d.log = d.o.c.quiet ? NULL : stderr;
    sc_err err = {{0}};
    rc = engine_list_check(&d, &err) ? -2 : 0;
    if (!rc && strcmp(d.o.skip_cands, "none")) rc = deploy_cand_parse_skip(d.o.skip_cands, &d.skip_mask, &err) ? -2 : 0;
    if (rc == -2) {
        cli_error(TOOL, "%s", err.msg);
        return SC_EXIT_USAGE;
    }
    rc = model_and_data(&d, &err);
    if (!rc) rc = device_pick(&d, &err);
    if (!rc) report_init(&d);
    if (!rc) rc = d.r.gpu ? gpu_path(&d, &err) : cpu_path(&d, &err);
    if (!rc) rc = reports(&d, &err);
    if (!rc) rc = plans_failed(&d, &err);
    run_free(&d);
    if (rc) {
        cli_error(TOOL, "%s", err.msg);
        return SC_EXIT_INPUT;
    }
    return SC_EXIT_OK;
}
