// Tests of the deploy plan and its CPU path: on small synthetic models of
// awkward shapes, the plan's logits equal the dense CPU executor's on the
// unfolded net (proves BN folding, borders, recomputed offsets, fused ReLU
// and pool, residual adds, unfolded BNs, flattening); the plan's structure
// for resnet18 and vgg16; errors for exports that do not match their graph.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/dengine_tail.h"
#include "runtime/deploy_plan.h"
#include "runtime/deploy_report.h"
#include "runtime/exec.h"
#include "tests/check.h"
#include "tests/deploy_testutil.h"
#include "tests/testutil.h"

// --- helpers ------------------------------------------------------------------

// Builds a net from text (or a built-in name when desc is NULL).
static net *make_net(const char *arch, const char *desc, int h, int w, int classes) {
    sc_err err = {{0}};
    net *nt = desc ? net_from_desc(arch, desc, 3, h, w, classes, &err)
                   : net_create(arch, 3, h, w, classes, &err);
    if (!nt) fprintf(stderr, "net: %s\n", err.msg);
    return nt;
}

// Logits (n, classes) of the dense CPU executor on nt (caller frees).
static float *dense_logits(net *nt, int n, const uint8_t *img) {
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, n, &err);
    if (!e) return NULL;
    int *labels = calloc((size_t)n, sizeof *labels);
    float *lg = malloc((size_t)n * nt->classes * sizeof *lg);
    exec_batch b = {n, img, labels, NULL, NULL, NULL, NULL};
    if (exec_eval_batch(e, &b, 0.0f, lg, &err)) free(lg), lg = NULL;
    exec_free(e);
    free(labels);
    return lg;
}

// Checks the CPU plan's logits against the dense executor for n images.
static void check_against_dense(tctx *t, const char *what, net *nt, const tdm_opts *o, int n,
                                uint64_t seed) {
    sc_err err = {{0}};
    sparse_model *m = tdm_build(nt, o, seed);
    deploy_plan *p = deploy_plan_build(m, &err);
    CHECK(t, p != NULL, "%s: plan: %s", what, err.msg);
    deploy_cpu *c = p ? deploy_cpu_create(p, n, &err) : NULL;
    CHECK(t, !p || c != NULL, "%s: cpu: %s", what, err.msg);
    uint8_t *img = tdm_images(n, nt->in_h, nt->in_w, seed);
    float *want = dense_logits(nt, n, img);
    float *got = alloc_poisoned((size_t)n * nt->classes);
    if (c && want) {
        for (int nn = n; nn >= 1; nn -= n - 1) {  // the whole batch, then one image
            CHECK(t, deploy_cpu_forward(c, nn, img, got, &err) == 0, "%s: %s", what, err.msg);
            double e = relerr((size_t)nn * nt->classes, got, want);
            CHECK(t, e <= 2e-5, "%s n=%d: relative error %.3g", what, nn, e);
            if (n == 1) break;
        }
        CHECK(t, guard_ok(got, (size_t)n * nt->classes), "%s: logits overrun", what);
    }
    free(img), free(want), free(got);
    deploy_cpu_free(c);
    deploy_plan_free(p);
    tdm_free(m);
}

// Number of ops of a kind in the plan.
static int count_ops(const deploy_plan *p, deploy_op_kind k) {
    int n = 0;
    for (int i = 0; i < p->nops; i++) n += p->ops[i].kind == k;
    return n;
}

// The op named `name`, or NULL.
static const deploy_op *find_op(const deploy_plan *p, const char *name) {
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i].name, name)) return &p->ops[i];
    return NULL;
}

// --- plan vs dense executor ------------------------------------------------------

// LeNet: conv+ReLU+pool fused, linear+ReLU fused, flatten of 16x5x5.
static void test_lenet_fused(tctx *t) {
    net *nt = make_net("lenet", NULL, 32, 32, 10);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.7f};
    check_against_dense(t, "lenet fused", nt, &o, 5, 3);
    net_free(nt);
}

// LeNet with nothing fused: standalone ReLUs and max pools.
static void test_lenet_unfused(tctx *t) {
    net *nt = make_net("lenet", NULL, 32, 32, 10);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 0, .fuse_pool = 0, .sparsity = 0.5f};
    check_against_dense(t, "lenet unfused", nt, &o, 3, 4);
    net_free(nt);
}

// The residual net, BNs folded and ReLUs fused, 93% sparse.
static void test_residual_fused(tctx *t) {
    net *nt = make_net("res", RES_DESC, 13, 11, 7);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.93f};
    if (nt) check_against_dense(t, "residual fused", nt, &o, 4, 5);
    net_free(nt);
}

// The residual net with BNs left as ops (affine + fused ReLU).
static void test_residual_unfolded(tctx *t) {
    net *nt = make_net("res", RES_DESC, 13, 11, 7);
    tdm_opts o = {.fold_bn = 0, .sparsity = 0.6f};
    if (nt) check_against_dense(t, "residual unfolded", nt, &o, 3, 6);
    net_free(nt);
}

// The residual net with codebook weights (values = codebook[code] * row_scale).
static void test_residual_codebook(tctx *t) {
    net *nt = make_net("res", RES_DESC, 13, 11, 7);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 0, .codebook = 1, .sparsity = 0.8f};
    if (nt) check_against_dense(t, "residual codebook", nt, &o, 2, 7);
    net_free(nt);
}

// DenseNet-style concats (DOP_CONCAT with borders of every size), 85% sparse.
static void test_concat(tctx *t) {
    net *nt = make_net("dense", DENSE_DESC, 13, 11, 6);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.85f};
    if (nt) check_against_dense(t, "concat", nt, &o, 3, 9);
    sc_err err = {{0}};
    sparse_model *m = nt ? tdm_build(nt, &o, 9) : NULL;
    deploy_plan *p = m ? deploy_plan_build(m, &err) : NULL;
    CHECK(t, p && count_ops(p, DOP_CONCAT) == 2, "concat ops: %d", p ? count_ops(p, DOP_CONCAT) : -1);
    const deploy_op *c2 = p ? find_op(p, "cat2") : NULL;
    CHECK(t, c2 && c2->nin == 3 && p->tensors[c2->out].c == 5 + 12 + 12, "cat2 joins 3 inputs of 29 channels");
    deploy_plan_free(p);
    tdm_free(m);
    net_free(nt);
}

// A dense (0% sparse) small VGG-like net on 9x9 images, one image.
static void test_dense_vgg(tctx *t) {
    const char *d = "conv 5 3 pad=1 bias=0 name=c1\nbn name=b1\nrelu name=r1\nmaxpool 2 name=p1\n"
                    "conv 6 3 pad=1 bias=0 name=c2\nbn name=b2\nrelu name=r2\nmaxpool 2 name=p2\n"
                    "linear classes name=fc\n";
    net *nt = make_net("vggish", d, 9, 9, 3);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.0f};
    if (nt) check_against_dense(t, "dense vgg", nt, &o, 1, 8);
    net_free(nt);
}

// --- plan structure ------------------------------------------------------------

// Residual net: borders, recomputed offsets, flatten, fused ops.
static void test_residual_structure(tctx *t) {
    sc_err err = {{0}};
    net *nt = make_net("res", RES_DESC, 13, 11, 7);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.5f};
    sparse_model *m = tdm_build(nt, &o, 9);
    deploy_plan *p = deploy_plan_build(m, &err);
    CHECK(t, p != NULL, "%s", err.msg);
    if (!p) goto done;
    const deploy_op *sc = find_op(p, "sc"), *c5 = find_op(p, "c5"), *fb = find_op(p, "fb");
    CHECK(t, sc && sc->desc.in_border == 1 && sc->desc.pad == 0 && sc->offsets != NULL,
          "shortcut reads the border-1 tensor with recomputed offsets");
    CHECK(t, p->tensors[p->input].border == 1, "input border %d", p->tensors[p->input].border);
    CHECK(t, c5 && c5->desc.in_border == 2 && c5->desc.relu && c5->desc.pool_k == 2,
          "c5: border 2, ReLU and pool fused");
    CHECK(t, fb && p->tensors[fb->in].border == 0 && p->tensors[fb->in].layer == -2,
          "fb reads a flattened copy");
    CHECK(t, count_ops(p, DOP_COPY) == 1, "%d copies", count_ops(p, DOP_COPY));
    CHECK(t, count_ops(p, DOP_ADD) == 3 && count_ops(p, DOP_RELU) == 0, "adds %d relus %d",
          count_ops(p, DOP_ADD), count_ops(p, DOP_RELU));
    const deploy_op *a1 = find_op(p, "a1");
    CHECK(t, a1 && a1->relu, "a1 fuses its ReLU");
    CHECK(t, p->tensors[p->output].border == 0 && p->tensors[p->output].c == 7, "logits tensor");
done:
    deploy_plan_free(p);
    tdm_free(m);
    net_free(nt);
}

// resnet18 and vgg16 at 32x32: op counts, borders, offsets.
static void test_builtin_structure(tctx *t) {
    sc_err err = {{0}};
    const char *arch[2] = {"resnet18", "vgg16"};
    for (int a = 0; a < 2; a++) {
        net *nt = make_net(arch[a], NULL, 32, 32, 100);
        tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.9f};
        sparse_model *m = tdm_build(nt, &o, 10);
        deploy_plan *p = deploy_plan_build(m, &err);
        CHECK(t, p != NULL, "%s: %s", arch[a], err.msg);
        if (p && a == 0) {
            CHECK(t, count_ops(p, DOP_CONV) == 21 && count_ops(p, DOP_ADD) == 8 &&
                     count_ops(p, DOP_GAP) == 1 && count_ops(p, DOP_COPY) == 0,
                  "resnet18: %d convs, %d adds", count_ops(p, DOP_CONV), count_ops(p, DOP_ADD));
            const deploy_op *s = find_op(p, "layer2.0.shortcut");
            CHECK(t, s && s->desc.in_border == 1 && s->offsets, "shortcut offsets recomputed");
            CHECK(t, p->nops == 21 + 8 + 1, "resnet18: %d ops", p->nops);
            double sp = deploy_plan_sparsity(p);
            CHECK(t, sp > 0.88 && sp < 0.92, "sparsity %g", sp);
        }
        if (p && a == 1) {
            int pooled = 0;
            for (int i = 0; i < p->nops; i++) pooled += p->ops[i].desc.pool_k == 2;
            CHECK(t, count_ops(p, DOP_CONV) == 14 && p->nops == 14 && pooled == 5,
                  "vgg16: %d ops, %d with a fused pool", p->nops, pooled);
            const deploy_op *fc = find_op(p, "fc");
            CHECK(t, fc && fc->desc.in_border == 0 && p->tensors[fc->in].c == 512, "vgg16 fc input");
        }
        deploy_plan_free(p);
        tdm_free(m);
        net_free(nt);
    }
}

// --- errors ---------------------------------------------------------------------

// Exports that do not match their graph are refused with the layer's name.
static void test_plan_errors(tctx *t) {
    sc_err err = {{0}};
    net *nt = make_net("lenet", NULL, 32, 32, 10);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.5f};
    sparse_model *m = tdm_build(nt, &o, 11);
    m->nlayers--;  // the last linear is missing
    CHECK(t, !deploy_plan_build(m, &err) && strstr(err.msg, "fc3"), "missing layer: %s", err.msg);
    m->nlayers++;
    m->layers[1].K++;
    CHECK(t, !deploy_plan_build(m, &err) && strstr(err.msg, "conv2"), "bad shape: %s", err.msg);
    m->layers[1].K--;
    m->layers[2].pool_k = 2, m->layers[2].pool_stride = 2;  // fc1 is not followed by a pool
    CHECK(t, !deploy_plan_build(m, &err) && strstr(err.msg, "pool"), "bad fusion: %s", err.msg);
    m->layers[2].pool_k = 0, m->layers[2].pool_stride = 0;
    m->layers[0].layer = 1;  // names a ReLU
    CHECK(t, !deploy_plan_build(m, &err) && strstr(err.msg, "not a conv"), "bad index: %s", err.msg);
    m->layers[0].layer = 0;
    deploy_plan *p = deploy_plan_build(m, &err);
    CHECK(t, p != NULL, "repaired model: %s", err.msg);
    deploy_cpu *c = p ? deploy_cpu_create(p, 2, &err) : NULL;
    uint8_t img[3 * 3 * 32 * 32] = {0};
    CHECK(t, c && deploy_cpu_forward(c, 3, img, NULL, &err) != 0 && strstr(err.msg, "3 images"),
          "batch too large: %s", err.msg);
    deploy_cpu_free(c);
    deploy_plan_free(p);
    tdm_free(m);
    net_free(nt);
}

// A lenet plan, the report of a run without GPU timings and a temporary
// file: what the chart tests write.
typedef struct {
    net *nt;
    sparse_model *m;
    deploy_plan *p;  // NULL when the build failed (err says why)
    deploy_report r;
    char path[64];   // the temporary file
    int fd;          // its descriptor, -1 when closed or not created
} report_fixture;

// Builds the fixture's plan and report and creates its temporary file.
static void report_fixture_make(report_fixture *f, sc_err *err) {
    f->nt = make_net("lenet", NULL, 32, 32, 10);
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.5f};
    f->m = tdm_build(f->nt, &o, 12);
    f->p = deploy_plan_build(f->m, err);
    f->r = (deploy_report){.input = "x.h5", .dataset = "synthetic", .arch = "lenet", .device = "cpu",
                           .gpu = 1, .batch = 8, .repeat = 1, .test_images = 10};
    snprintf(f->path, sizeof f->path, "/tmp/test_deploy_chart_XXXXXX");
    f->fd = mkstemp(f->path);
}

// Removes the temporary file and frees the plan, model and net.
static void report_fixture_free(report_fixture *f) {
    if (f->fd >= 0) close(f->fd);
    unlink(f->path);
    deploy_plan_free(f->p);
    tdm_free(f->m);
    net_free(f->nt);
}

// Reads at most len - 1 bytes of path into text (zero-terminated, text
// zeroed first); returns the count read, 0 when it cannot be opened.
static size_t read_text(const char *path, char *text, size_t len) {
    memset(text, 0, len);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, len - 1, f) : 0;
    if (f) fclose(f);
    return n;
}

// The chart and the JSON summary of a run without GPU timings: an SVG
// naming every conv/linear layer; the JSON with every per-layer column.
static void test_report(tctx *t) {
    sc_err err = {{0}};
    report_fixture fx;
    report_fixture_make(&fx, &err);
    deploy_plan *p = fx.p;
    CHECK(t, p && fx.fd >= 0 && deploy_report_chart(fx.path, p, &fx.r, &err) == 0, "chart: %s", err.msg);
    char text[16384];
    size_t len = read_text(fx.path, text, sizeof text);
    CHECK(t, len > 0 && strstr(text, "<svg") && strstr(text, ">conv2<") && strstr(text, ">fc3<") &&
             strstr(text, "</svg>"), "chart text: %.200s", text);
    json_writer j;
    json_init(&j);
    if (p) deploy_report_json(&j, p, &fx.r);
    const char *js = json_text(&j);
    CHECK(t, js && strstr(js, "\"cudnn_tf32_ms\": null") && strstr(js, "\"cusparse_ms\": null") &&
             strstr(js, "\"name\": \"fc3\"") && strstr(js, "\"output\": null"), "json: %.300s", js ? js : j.why);
    json_free(&j);
    report_fixture_free(&fx);
}

// The number after "key": in js (NAN when absent).
static double json_number_after(const char *js, const char *key) {
    const char *at = js ? strstr(js, key) : NULL;
    return at ? strtod(at + strlen(key), NULL) : NAN;
}

// The mixed plan's per-layer TFLOP/s: cuDNN's of the dense layer and the
// sparse path's useful one (2 x stored weights x output pixels / time),
// with the weights counted here from the layer's dense form.
static void test_report_tflops(tctx *t) {
    sc_err err = {{0}};
    report_fixture fx;
    report_fixture_make(&fx, &err);
    deploy_plan *p = fx.p;
    CHECK(t, p != NULL, "plan: %s", err.msg);
    if (!p) {
        report_fixture_free(&fx);
        return;
    }
    const int n = p->nops;
    double dn[64], sp[64], gain[64];
    signed char path[64];
    int conv = -1;
    for (int i = 0; i < n && i < 64; i++) {
        dn[i] = sp[i] = gain[i] = NAN, path[i] = 0;
        if (conv < 0 && p->ops[i].kind == DOP_CONV && deploy_op_layer(p, &p->ops[i])->R > 1 &&
            deploy_op_sparsity(p, &p->ops[i]) > 0.0)
            conv = i;
    }
    CHECK(t, n <= 64 && conv >= 0, "%d ops, first pruned conv of 3x3 or more: %d", n, conv);
    if (n > 64 || conv < 0) {
        report_fixture_free(&fx);
        return;
    }
    dn[conv] = 0.5, sp[conv] = 0.25, path[conv] = 1;
    deploy_engine_result *m = &fx.r.mixed;
    *m = (deploy_engine_result){.ran = 1, .ms = 1.0, .lat_ms = 1.0, .op_dense_ms = dn, .op_sparse_ms = sp,
                                .op_path = path, .op_graph_gain_ms = gain};
    fx.r.eng[DE_FP16] = (deploy_engine_result){.ran = 1, .ms = 2.0, .lat_ms = 1.0};
    const sparse_layer *sl = deploy_op_layer(p, &p->ops[conv]);
    float *w = deploy_op_dense_weights(p, &p->ops[conv]);
    const size_t dense = (size_t)sl->K * sl->C * sl->R * sl->S;
    size_t kept = 0;
    for (size_t e = 0; w && e < dense; e++) kept += w[e] != 0.0f;
    free(w);
    const double px = (double)sl->P * sl->Q * fx.r.batch;
    const double want_dense = 2.0 * dense * px / 0.5e9, want_sparse = 2.0 * kept * px / 0.25e9;
    json_writer j;
    json_init(&j);
    deploy_report_json(&j, p, &fx.r);
    const char *js = json_text(&j);
    const double got_dense = json_number_after(js, "\"cudnn_tflops\": ");
    const double got_sparse = json_number_after(js, "\"sparse_useful_tflops\": ");
    CHECK(t, kept > 0 && kept < dense && fabs(got_dense - want_dense) <= 1e-6 * want_dense &&
             fabs(got_sparse - want_sparse) <= 1e-6 * want_sparse,
          "kept %zu of %zu: cudnn %g (want %g), sparse %g (want %g)", kept, dense, got_dense, want_dense,
          got_sparse, want_sparse);
    json_free(&j);
    FILE *f = fdopen(fx.fd, "w");
    if (f) deploy_report_summary(f, p, &fx.r), fclose(f), fx.fd = -1;
    char text[16384], cell[32];
    read_text(fx.path, text, sizeof text);
    snprintf(cell, sizeof cell, " %8.1f %8.1f sparse", want_dense, want_sparse);
    CHECK(t, strstr(text, "TF sp") && strstr(text, cell), "no '%s' in: %.600s", cell, text);
    path[conv] = 3;  // the conv inside a tail launch: the JSON says so
    json_init(&j);
    deploy_report_json(&j, p, &fx.r);
    CHECK(t, json_text(&j) && strstr(json_text(&j), "\"runs\": \"tail\""), "no \"runs\": \"tail\" for path 3");
    json_free(&j);
    m->tail_ms = 0.8, m->tail_off_ms = 1.0;  // and the tail's whole-forward figures, in the JSON and the text
    json_init(&j);
    deploy_report_json(&j, p, &fx.r);
    const char *tl = json_text(&j) ? strstr(json_text(&j), "\"tail\": {") : NULL;
    CHECK(t, tl && json_number_after(tl, "\"batch_ms\": ") == 0.8 && json_number_after(tl, "\"without_batch_ms\": ") == 1.0,
          "no tail figures: %.200s", tl ? tl : "(none)");
    json_free(&j);
    f = fopen(fx.path, "w");
    if (f) deploy_report_summary(f, p, &fx.r), fclose(f);
    read_text(fx.path, text, sizeof text);
    CHECK(t, strstr(text, "0.8000 ms with it, 1.0000 ms with them on their one-layer paths (1.25x)"),
          "no tail line in: %.600s", strstr(text, "per layer") ? strstr(text, "per layer") : text);
    m->tail_ms = NAN;  // no tail kept: the engine's reason, in the text and the JSON
    snprintf(m->tail_note, sizeof m->tail_note, "the fastest chain, c2-c3, 1.1 ms against 1.0 ms without (3 tried)");
    f = fopen(fx.path, "w");
    if (f) deploy_report_summary(f, p, &fx.r), fclose(f);
    read_text(fx.path, text, sizeof text);
    CHECK(t, strstr(text, "no tail launch (a chain of small-plane block-sparse convs in one kernel): the fastest chain"),
          "no tail note in: %.600s", strstr(text, "per layer") ? strstr(text, "per layer") : text);
    json_init(&j);
    deploy_report_json(&j, p, &fx.r);
    CHECK(t, json_text(&j) && strstr(json_text(&j), "\"note\": \"the fastest chain, c2-c3"), "no tail note in the JSON");
    json_free(&j);
    report_fixture_free(&fx);
}

// The summary's closing line and JSON "result" for r: into text (len) and
// *speedup (the JSON's result.speedup, NAN when null).
static void result_of(report_fixture *fx, char *text, size_t len, double *speedup) {
    json_writer j;
    json_init(&j);
    deploy_report_json(&j, fx->p, &fx->r);
    const char *js = json_text(&j);
    const char *res = js ? strstr(js, "\"result\": {") : NULL;
    *speedup = res ? json_number_after(res, "\"speedup\": ") : NAN;
    json_free(&j);
    FILE *f = fopen(fx->path, "w");
    if (f) deploy_report_summary(f, fx->p, &fx->r), fclose(f);
    read_text(fx->path, text, len);
    char *line = strstr(text, "result: ");
    if (line) memmove(text, line, strlen(line) + 1);
    else text[0] = 0;
}

// Makes the fixture and checks its plan; 0 when it is ready, else -1 (freed).
static int report_fixture_ready(tctx *t, report_fixture *fx) {
    sc_err err = {{0}};
    report_fixture_make(fx, &err);
    CHECK(t, fx->p != NULL, "plan: %s", err.msg);
    if (fx->p) return 0;
    report_fixture_free(fx);
    return -1;
}

// The tail chain the engine keeps from its timings (detail_pick; chains
// without GPU memory): the fastest that beats the forward without one, the
// first when forced, none with the reason when none beats it, the timing
// failed or there was none.
static void test_tail_pick(tctx *t) {
#ifdef SC_HAVE_CUDA
    report_fixture fx;
    if (report_fixture_ready(t, &fx)) return;
    const deploy_plan *p = fx.p;
    const detail_chain c[3] = {{NULL, 0, 3}, {NULL, 1, 3}, {NULL, 0, 2}};
    const double faster[4] = {1.0, 0.9, 0.8, 0.95}, slower[4] = {1.0, 1.1, 1.2, 1.05};
    char note[256] = "", want[256];
    CHECK(t, detail_pick(p, c, 3, faster, 0, "none", note, sizeof note) == 1 && !note[0], "not the fastest: %s", note);
    CHECK(t, detail_pick(p, c, 3, slower, 1, "none", note, sizeof note) == 0 && !note[0], "forced: not the first");
    CHECK(t, detail_pick(p, c, 3, slower, 0, "none", note, sizeof note) == -1, "kept a slower chain");
    snprintf(want, sizeof want, "the fastest chain, %s-%s, 1.0500 ms against 1.0000 ms without (3 tried)",
             p->ops[0].name, p->ops[1].name);
    CHECK(t, strcmp(note, want) == 0, "note '%s', want '%s'", note, want);
    CHECK(t, detail_pick(p, c, 3, NULL, 0, "timing failed", note, sizeof note) == -1 && !strcmp(note, "timing failed"),
          "kept a chain without timings: %s", note);
    CHECK(t, detail_pick(p, c, 0, faster, 0, "no run", note, sizeof note) == -1 && !strcmp(note, "no run"),
          "kept a chain of none: %s", note);
    report_fixture_free(&fx);
#else
    SKIP(t, "a build without CUDA has no tail kernel");
#endif
}

// The closing result: the fastest plan (the mixed plan here, not the slower
// sparse plan) against the fastest dense engine (TF32 here, not fp16); when
// the engine is faster, the line says to run it and the speedup is below 1.
static void test_report_result(tctx *t) {
    report_fixture fx;
    if (report_fixture_ready(t, &fx)) return;
    fx.r.eng[DE_FP16] = (deploy_engine_result){.ran = 1, .ms = 2.0, .lat_ms = 1.5};
    fx.r.eng[DE_TF32] = (deploy_engine_result){.ran = 1, .ms = 1.6, .lat_ms = 1.2};
    fx.r.mixed = (deploy_engine_result){.ran = 1, .ms = 1.0, .lat_ms = 1.0, .test_acc = 70.0};
    fx.r.nprec = 1;
    fx.r.pr[0] = (deploy_prec_result){.prec = DP_FP16, .ran = 1, .ms = 3.0, .lat_ms = 2.0, .dense_ms = 4.0,
                                      .dense_lat_ms = 3.0, .test_acc = 70.0};
    char text[16384];
    double x;
    result_of(&fx, text, sizeof text, &x);
    CHECK(t, strstr(text, "result: the mixed fp16 plan is the fastest: batch 8 1.000 ms = 1.60x the fastest "
                          "dense engine (tf32, 1.600 ms), batch 1 1.000 ms = 1.20x") && fabs(x - 1.6) < 1e-9,
          "faster: speedup %g, %.300s", x, text);
    fx.r.mixed.ms = 2.5;
    result_of(&fx, text, sizeof text, &x);
    CHECK(t, strstr(text, "result: the dense tf32 engine is the fastest (batch 8 1.600 ms); the fastest sparse "
                          "plan, the mixed fp16 plan, runs 0.64x") && fabs(x - 0.64) < 1e-9,
          "slower: speedup %g, %.300s", x, text);
    report_fixture_free(&fx);
}

// A per-layer plan that stopped (a library refusal in the weaker baseline):
// the summary says so and keeps the engines' result line; the JSON names the
// error under "plan_errors" and leaves the stopped plan's figures null.
static void test_report_plan_stopped(tctx *t) {
    report_fixture fx;
    if (report_fixture_ready(t, &fx)) return;
    fx.r.eng[DE_FP16] = (deploy_engine_result){.ran = 1, .ms = 2.0, .lat_ms = 1.5};
    fx.r.mixed = (deploy_engine_result){.ran = 1, .ms = 1.0, .lat_ms = 1.0, .test_acc = 70.0};
    fx.r.nprec = 1;
    fx.r.pr[0] = (deploy_prec_result){.prec = DP_FP16, .ran = 0, .ms = 3.0, .test_acc = 70.0};
    snprintf(fx.r.pr[0].failed, sizeof fx.r.pr[0].failed, "cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM");
    char text[16384];
    double x;
    result_of(&fx, text, sizeof text, &x);
    CHECK(t, strstr(text, "result: the mixed fp16 plan is the fastest") && fabs(x - 2.0) < 1e-9,
          "result: speedup %g, %.300s", x, text);
    FILE *f = fopen(fx.path, "w");
    if (f) deploy_report_summary(f, fx.p, &fx.r), fclose(f);
    read_text(fx.path, text, sizeof text);
    CHECK(t, strstr(text, "fp16 per-layer plan: failed, its figures are left out: cudnnConvolutionForward: "
                          "CUDNN_STATUS_BAD_PARAM"), "summary: %.400s", text);
    json_writer j;
    json_init(&j);
    deploy_report_json(&j, fx.p, &fx.r);
    const char *js = json_text(&j);
    const char *pe = js ? strstr(js, "\"plan_errors\": {") : NULL, *pl = js ? strstr(js, "\"plans\": [") : NULL;
    CHECK(t, pe && strstr(pe, "\"fp16\": \"cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM\"") &&
             strstr(js, "\"test_accuracy\": null") && pl && !strstr(pl, "\"precision\""),
          "json: %.600s", pl ? pl : js ? js : j.why);
    json_free(&j);
    report_fixture_free(&fx);
}

// Writes the chart under a 256-byte file size limit (a full disk): the write
// fails with one line, the previous chart stays and no temporary is left.
static int chart_write_limited(const char *path, const deploy_plan *p, const deploy_report *r,
                               sc_err *err) {
    struct rlimit old, lim = {256, 256};
    if (getrlimit(RLIMIT_FSIZE, &old) != 0) return sc_fail(err, "getrlimit");
    lim.rlim_max = old.rlim_max;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return sc_fail(err, "setrlimit");
    int rc = deploy_report_chart(path, p, r, err);
    if (setrlimit(RLIMIT_FSIZE, &old) != 0) rc = 0, sc_fail(err, "cannot restore the rlimit");
    signal(SIGXFSZ, prev);
    return rc;
}

// An existing chart survives a failed write (the chart goes through the
// atomic writer).
static void test_chart_write_error(tctx *t) {
    sc_err err = {{0}};
    report_fixture fx;
    report_fixture_make(&fx, &err);
    char tmp[96], text[64];
    CHECK(t, fx.p && fx.fd >= 0 && write(fx.fd, "previous chart", 14) == 14, "setup: %s", err.msg);
    if (fx.fd >= 0) close(fx.fd), fx.fd = -1;
    int rc = fx.p ? chart_write_limited(fx.path, fx.p, &fx.r, &err) : 0;
    CHECK(t, rc != 0 && strstr(err.msg, fx.path) && !strchr(err.msg, '\n'), "error: %s", err.msg);
    size_t len = read_text(fx.path, text, sizeof text);
    CHECK(t, len == 14 && !strcmp(text, "previous chart"), "previous chart changed: %.40s", text);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", fx.path, (long)getpid());
    CHECK(t, access(tmp, F_OK) != 0, "temporary %s left", tmp);
    report_fixture_free(&fx);
}

// Top-1 counting: first maximum wins.
static void test_count_correct(tctx *t) {
    const float lg[3 * 4] = {0, 1, 1, 0, 5, -1, 2, 2, 0, 0, 0, 0};
    const int labels[3] = {1, 0, 1};
    CHECK(t, deploy_count_correct(3, 4, lg, labels) == 2, "count %ld",
          deploy_count_correct(3, 4, lg, labels));
}

int main(void) {
    tctx t = {.suite = "test_deploy"};
    RUN(&t, test_lenet_fused);
    RUN(&t, test_lenet_unfused);
    RUN(&t, test_residual_fused);
    RUN(&t, test_residual_unfolded);
    RUN(&t, test_residual_codebook);
    RUN(&t, test_dense_vgg);
    RUN(&t, test_concat);
    RUN(&t, test_residual_structure);
    RUN(&t, test_builtin_structure);
    RUN(&t, test_plan_errors);
    RUN(&t, test_report);
    RUN(&t, test_report_tflops);
    RUN(&t, test_report_result);
    RUN(&t, test_tail_pick);
    RUN(&t, test_report_plan_stopped);
    RUN(&t, test_chart_write_error);
    RUN(&t, test_count_correct);
    return check_finish(&t);
}
