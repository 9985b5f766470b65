// GPU tests of the channels-last dense engine (runtime/dengine.h): on small
// synthetic models of awkward shapes (13x11 images, 3/8/10/12 channels,
// residual adds fused into conv epilogues and not, padded pools, a linear
// layer reading a 2-D feature map, unfolded batch norms), the engine's
// logits in fp16, bf16 and TF32 match the CPU plan's, at the batch it was
// built for, for fewer images, at batch 1, and again after the timing's
// graph replays (mixed plans: after every op is timed in a graph of its
// own too). Every tensor starts as NaN,
// so an element the engine forgets to write shows in the logits. Mixed fp16
// plans force convs onto the sparse paths: the direct sparse kernel, and on
// nets pruned on blocks and exported as BSR the block-sparse kernel (fused
// 2x2/4x4 pools, a fused residual, a pool the engine runs after it).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dengine.h"
#include "runtime/dengine_bsconv.h"
#include "runtime/deploy_plan.h"
#include "runtime/pattern.h"
#include "tests/check.h"
#include "tests/deploy_testutil.h"
#include "tests/export_testutil.h"
#include "tests/testutil.h"

// Tolerance of the logits, relative to the largest, per precision.
static double tol_of(dengine_prec p) { return p == DE_FP16 ? 3e-2 : p == DE_BF16 ? 8e-2 : 1e-2; }

// Engine logits of m images against the CPU's.
static void check_engine(tctx *t, tdm_fixture *f, dengine *e, const char *what, int m,
                         dengine_prec prec) {
    sc_err err = {{0}};
    const size_t nl = (size_t)m * f->nt->classes;
    float *got = alloc_poisoned(nl);
    CHECK(t, dengine_forward(e, m, f->img, got, &err) == 0, "%s: %s", what, err.msg);
    double rel = relerr(nl, got, f->want);
    CHECK(t, rel <= tol_of(prec), "%s: logits off by %.3g (tol %g)", what, rel, tol_of(prec));
    CHECK(t, guard_ok(got, nl), "%s: logits overrun", what);
    free(got);
}

// Builds the engine in every precision at NIMG and at batch 1 and checks it.
static void run_all(tctx *t, tdm_fixture *f, const char *name) {
    for (int p = 0; p < DE_NPREC; p++)
        for (int b1 = 0; b1 < 2; b1++) {
            sc_err err = {{0}};
            char what[96];
            snprintf(what, sizeof what, "%s %s batch %d", name, dengine_prec_name(p), b1 ? 1 : NIMG);
            dengine *e = dengine_create(f->p, (dengine_prec)p, b1 ? 1 : NIMG, f->img, 3, &err);
            CHECK(t, e != NULL, "%s: %s", what, err.msg);
            if (!e) continue;
            check_engine(t, f, e, what, b1 ? 1 : NIMG, (dengine_prec)p);
            if (!b1) check_engine(t, f, e, what, 2, (dengine_prec)p);
            double ms = NAN;
            CHECK(t, dengine_time(e, 3, &ms, &err) == 0 && ms > 0, "%s: timing: %s", what, err.msg);
            char again[128];  // graph replays must not leave state that changes the next one
            snprintf(again, sizeof again, "%s after timing", what);
            check_engine(t, f, e, again, b1 ? 1 : NIMG, (dengine_prec)p);
            dengine_free(e);
        }
}

// LeNet: fused conv+ReLU+max pool, linears.
static void test_lenet(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.0f};
    if (tdm_fixture_make(t, &f, "lenet", NULL, 32, 32, &o, 41) == 0) run_all(t, &f, "lenet");
    tdm_fixture_free(&f);
}

// The residual net, BN folded: adds fused into conv epilogues.
static void test_residual(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.3f};
    if (tdm_fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 42) == 0) run_all(t, &f, "res");
    tdm_fixture_free(&f);
}

// The residual net unfolded: affine ops, standalone ReLUs, pools and adds.
static void test_residual_unfused(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 0, .sparsity = 0.5f};
    if (tdm_fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 43) == 0) run_all(t, &f, "res-unfused");
    tdm_fixture_free(&f);
}

// DenseNet-style concats: channel slices of NHWC tensors, unfolded BNs.
static void test_concat(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.4f};
    if (tdm_fixture_make(t, &f, "dense", DENSE_DESC, 13, 11, &o, 44) == 0) run_all(t, &f, "dense");
    tdm_fixture_free(&f);
}

// Every op timed in a graph of its own (dengine_op_graph_ms): a time for
// each op the engine runs, NAN for the fused and aliased ones, and the
// forward still gives the CPU's logits after the repeated runs.
static void check_op_times(tctx *t, tdm_fixture *f, dengine *e, const char *what, int m) {
    sc_err err = {{0}};
    for (int i = 0; i < f->p->nops; i++) {
        double ms = -1;
        const int runs = dengine_op_tensor(e, i) >= 0;
        CHECK(t, dengine_op_graph_ms(e, i, 3, 3, &ms, &err) == 0, "%s %s: %s", what, f->p->ops[i].name, err.msg);
        CHECK(t, runs ? ms > 0 && isfinite(ms) : isnan(ms), "%s %s: %g ms (runs: %d)", what, f->p->ops[i].name,
              ms, runs);
    }
    char again[128];
    snprintf(again, sizeof again, "%s after timing each op", what);
    check_engine(t, f, e, again, m, DE_FP16);
}

// The mixed fp16 plan with every conv forced onto the sparse kernel (where
// its check against cuDNN passes): the layout conversions, the residual add
// and ReLU after the conversion, and fused pools give the CPU's logits.
static void run_mixed(tctx *t, tdm_fixture *f, const char *name) {
    for (int b1 = 0; b1 < 2; b1++) {
        sc_err err = {{0}};
        char what[96];
        snprintf(what, sizeof what, "%s mixed batch %d", name, b1 ? 1 : NIMG);
        dengine *e = dengine_create_mixed(f->p, b1 ? 1 : NIMG, f->img, 3, 1, &err);
        CHECK(t, e != NULL, "%s: %s", what, err.msg);
        if (!e) continue;
        int sparse = 0;
        for (int i = 0; i < f->p->nops; i++) sparse += dengine_op_sparse(e, i);
        CHECK(t, sparse > 0, "%s: no layer ran sparse", what);
        check_engine(t, f, e, what, b1 ? 1 : NIMG, DE_FP16);
        check_op_times(t, f, e, what, b1 ? 1 : NIMG);
        // the plan against its own all-cuDNN forward: both timed, every sparse path back after
        double ms = NAN, dense_ms = NAN;
        CHECK(t, dengine_time_vs_dense(e, 5, &ms, &dense_ms, &err) == 0, "%s: %s", what, err.msg);
        CHECK(t, ms > 0 && dense_ms > 0 && isfinite(ms) && isfinite(dense_ms), "%s: %g vs %g ms", what, ms, dense_ms);
        int again = 0;
        for (int i = 0; i < f->p->nops; i++) again += dengine_op_sparse(e, i);
        CHECK(t, again == sparse, "%s: %d sparse layers after timing against cuDNN, %d before", what, again, sparse);
        check_engine(t, f, e, what, b1 ? 1 : NIMG, DE_FP16);
        dengine_free(e);
    }
}

// Mixed plans on the residual net (fused adds) and LeNet (fused pools), 90% sparse.
static void test_mixed(tctx *t) {
    if (!gpu_here(t)) return;
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.9f};
    if (tdm_fixture_make(t, &f, "res", RES_DESC, 13, 11, &o, 45) == 0) run_mixed(t, &f, "res");
    tdm_fixture_free(&f);
    if (tdm_fixture_make(t, &f, "lenet", NULL, 32, 32, &o, 46) == 0) run_mixed(t, &f, "lenet");
    tdm_fixture_free(&f);
}

// A net for the block-sparse path on 16x20 images: conv1 reads the padded
// input (stays on cuDNN), c2 and c6 fuse 2x2 / 4x4 max pools (the 4x4 one
// drops a column), c4 a residual add, c5 a padded 3x3 stride-2 pool that the
// engine runs on the kernel's conv output, c3 is plain.
static const char *const BS_DESC =
    "conv 16 3 pad=1 bias=0 name=conv1\nbn name=bn1\nrelu name=relu1\n"
    "conv 16 3 pad=1 bias=0 name=c2\nbn name=bn2\nrelu name=relu2\nmaxpool 2 name=p2\n"
    "conv 16 3 pad=1 bias=0 name=c3\nbn name=bn3\nrelu name=r3\n"
    "conv 16 3 pad=1 bias=0 name=c4\nbn name=bn4\nadd p2 name=a4\nrelu name=r4\n"
    "conv 24 3 pad=1 name=c5\nrelu name=r5\nmaxpool 3 stride=2 pad=1 name=p5\n"
    "conv 32 3 pad=1 name=c6\nrelu name=r6\nmaxpool 4 name=p6\n"
    "gap name=gap\nlinear classes name=fc\n";

// Net desc on h x w images (BS_DESC on 16x20 when desc is NULL) pruned on
// pattern pat (each block kept with probability 0.4, the third conv's first
// block row empty; a hybrid pattern KxC+F also keeps 5% of the other weights
// as singles), exported as BSR into dir and loaded, with its plan and CPU
// logits; 0 or -1.
static int bs_fixture(tctx *t, tdm_fixture *f, const char *desc, int h, int w, const char *pat, const char *dir,
                      uint64_t seed) {
    sc_err err = {{0}};
    sc_pattern p;
    char path[512];
    memset(f, 0, sizeof *f);
    CHECK(t, sc_pattern_parse(pat, &p, &err) == 0, "%s: %s", pat, err.msg);
    if (!desc) desc = BS_DESC, h = 16, w = 20;
    if (!(f->nt = tex_net("bsnet", desc, h, w, 7))) return -1;
    tex_randomize(f->nt, seed, 0.0f, 0);
    rng g;
    rng_seed(&g, seed, 5);
    for (int i = 0, n = 0; i < f->nt->nlayers; i++)
        if (f->nt->layers[i].kind == LK_CONV || f->nt->layers[i].kind == LK_LINEAR)
            tex_block_prune(f->nt, f->nt->layers[i].weight, &p, 0.4f, n++ == 2 ? BP_EMPTY_ROW : BP_RANDOM, &g);
    for (int i = 0; p.dflt.rem > 0.0 && i < f->nt->nlayers; i++) {  // a hybrid pattern: 5% singles beside the blocks
        if (f->nt->layers[i].kind != LK_CONV && f->nt->layers[i].kind != LK_LINEAR) continue;
        const int wt = f->nt->layers[i].weight;
        float *w = net_tensor_data(f->nt, wt), *mk = net_tensor_mask(f->nt, wt);
        for (size_t e = 0; e < f->nt->tensors[wt].count; e++)
            if (mk[e] == 0.0f && rng_uniform(&g) < 0.05f) mk[e] = 1.0f, w[e] = rng_uniform(&g) - 0.5f + 1e-3f;
    }
    export_cfg cfg = {.pattern = &p};
    snprintf(path, sizeof path, "%s/bs_%s.h5", dir, pat);
    f->m = tex_roundtrip(f->nt, &cfg, path, NULL);
    CHECK(t, f->m != NULL, "%s: BSR export failed", pat);
    if (f->m) f->p = deploy_plan_build(f->m, &err);
    CHECK(t, f->p != NULL, "%s: plan: %s", pat, err.msg);
    if (!f->p) return -1;
    f->cpu = deploy_cpu_create(f->p, NIMG, &err);
    f->img = tdm_images(NIMG, h, w, seed);
    f->want = malloc((size_t)NIMG * f->nt->classes * sizeof *f->want);
    CHECK(t, f->cpu && deploy_cpu_forward(f->cpu, NIMG, f->img, f->want, &err) == 0, "cpu: %s", err.msg);
    return f->cpu ? 0 : -1;
}

// Frees a bs_fixture (the loaded model owns its own net).
static void bs_fixture_free(tdm_fixture *f) {
    deploy_cpu_free(f->cpu);
    deploy_plan_free(f->p);
    sparse_model_free(f->m);
    net_free(f->nt);
    free(f->img), free(f->want);
}

// Checks that every BSR conv whose input channels are not padded runs on
// the block-sparse kernel (and names it), and that the others do not.
static void check_bs_paths(tctx *t, const tdm_fixture *f, const dengine *e, const char *what) {
    for (int i = 0; i < f->p->nops; i++) {
        const deploy_op *op = &f->p->ops[i];
        if (op->kind != DOP_CONV || deploy_op_layer(f->p, op)->is_linear) continue;
        const int want = deploy_op_layer(f->p, op)->bsr.kb > 0 && op->in != f->p->input;
        char how[96];
        dengine_op_describe(e, i, how, sizeof how);
        CHECK(t, (dengine_op_sparse(e, i) == 2) == want && (strncmp(how, "bsconv ", 7) == 0) == want,
              "%s %s: path %d (%s), block-sparse expected: %d", what, op->name, dengine_op_sparse(e, i), how, want);
    }
}

// The measured mixed plan (each layer sparse where faster alone, then put
// back on cuDNN where the whole graph is faster; block-sparse ones, path 2,
// or the tail, path 3, named "bsconv ...") gives the CPU's logits,
// whatever it chose; a layer on cuDNN has no sparse path left.
static void run_bs_measured(tctx *t, tdm_fixture *f, const char *pat) {
    sc_err err = {{0}};
    char what[96];
    snprintf(what, sizeof what, "bsr %s measured mixed batch %d", pat, NIMG);
    dengine *e = dengine_create_mixed(f->p, NIMG, f->img, 3, 0, &err);
    CHECK(t, e != NULL, "%s: %s", what, err.msg);
    if (!e) return;
    for (int i = 0; i < f->p->nops; i++) {
        char how[96];
        dengine_op_describe(e, i, how, sizeof how);
        CHECK(t, (dengine_op_sparse(e, i) >= 2) == (strncmp(how, "bsconv ", 7) == 0), "%s %s: path %d runs %s",
              what, f->p->ops[i].name, dengine_op_sparse(e, i), how);
    }
    check_engine(t, f, e, what, NIMG, DE_FP16);
    dengine_free(e);
}

// The forced mixed plan on a BSR export of pattern pat at batch NIMG and 1:
// the block-sparse convs give the CPU's logits; then the measured plan.
static void run_bs(tctx *t, const char *pat, const char *dir, uint64_t seed) {
    tdm_fixture f;
    if (bs_fixture(t, &f, NULL, 0, 0, pat, dir, seed) == 0) {
        for (int b1 = 0; b1 < 2; b1++) {
            sc_err err = {{0}};
            char what[96];
            snprintf(what, sizeof what, "bsr %s mixed batch %d", pat, b1 ? 1 : NIMG);
            dengine *e = dengine_create_mixed(f.p, b1 ? 1 : NIMG, f.img, 3, 1, &err);
            CHECK(t, e != NULL, "%s: %s", what, err.msg);
            if (!e) continue;
            check_bs_paths(t, &f, e, what);
            check_engine(t, &f, e, what, b1 ? 1 : NIMG, DE_FP16);
            check_op_times(t, &f, e, what, b1 ? 1 : NIMG);
            dengine_free(e);
        }
        run_bs_measured(t, &f, pat);
    }
    bs_fixture_free(&f);
}

// The kernels' BSR of a loaded layer (debs_bsr, host code) carries its
// remainder: as many singles, and a valid layer for bsconv_check.
static void check_debs_bsr(tctx *t, const deploy_op *op, const sparse_layer *sl) {
    bsconv_bsr w;
    int32_t *ip = NULL;
    sc_err err = {{0}};
    const spconv_desc *d = &op->desc;
    const bsconv_shape s = {.n = 1, .C = d->C, .H = d->H, .W = d->W, .K = d->K, .R = d->R, .S = d->S,
                            .stride = d->stride, .pad = d->pad};
    CHECK(t, debs_bsr(sl, &w, &ip, &err) == 0 && bsconv_rem_count(&w, s.K) == sl->bsr.nrem &&
                 bsconv_check(&s, &w, &err) == 0,
          "%s: the kernels' BSR of %ld singles: %s", op->name, sl->bsr.nrem, err.msg);
    free(ip);
}

// The BSR fixtures themselves (no GPU needed): every conv loaded as BSR with
// the pattern's blocks (the hybrid one's with singles), and the pools the paths must cover fused into c2
// (2x2), c5 (3x3 stride 2 padded) and c6 (4x4).
static void test_bsr_fixture(tctx *t) {
    const char *pats[3] = {"16x8", "8x1", "16x8+0.2"};
    char dir[256];
    CHECK(t, tex_dir_make(dir, sizeof dir) == 0, "no temporary directory");
    for (int k = 0; k < 3; k++) {
        tdm_fixture f;
        int bsr = 0, convs = 0, pools = 0, hybrid = 0;
        if (bs_fixture(t, &f, NULL, 0, 0, pats[k], dir, 47 + k) == 0)
            for (int i = 0; i < f.p->nops; i++) {
                const deploy_op *op = &f.p->ops[i];
                if (op->kind != DOP_CONV || deploy_op_layer(f.p, op)->is_linear) continue;
                convs++, bsr += deploy_op_layer(f.p, op)->bsr.kb > 0;
                hybrid += deploy_op_layer(f.p, op)->bsr.nrem > 0;
                check_debs_bsr(t, op, deploy_op_layer(f.p, op));
                pools += op->desc.pool_k * 10 + op->desc.pool_stride + 100 * op->desc.pool_pad;
            }
        CHECK(t, convs == 6 && bsr == 6, "%s: %d of %d convs loaded as BSR", pats[k], bsr, convs);
        CHECK(t, hybrid == (k == 2 ? 6 : 0), "%s: %d convs with singles", pats[k], hybrid);
        CHECK(t, pools == 22 + 132 + 44, "%s: fused pools %d", pats[k], pools);
        bs_fixture_free(&f);
    }
    tex_dir_remove(dir);
}

// Mixed plans on nets pruned on blocks (vector 16x8 blocks, scalar 8x1
// ones, and 16x8 blocks with singles) and exported as BSR: the block-sparse path.
static void test_mixed_bsr(tctx *t) {
    if (!gpu_here(t)) return;
    char dir[256];
    CHECK(t, tex_dir_make(dir, sizeof dir) == 0, "no temporary directory");
    run_bs(t, "16x8", dir, 47);
    run_bs(t, "8x1", dir, 48);
    run_bs(t, "16x8+0.2", dir, 49);  // blocks and singles: the halo kernel's remainder path
    tex_dir_remove(dir);
}

// A net whose last stages the tail kernel takes (16x16 images), shaped as
// two residual stages: conv1 reads the padded input (cuDNN); then s2 (1x1
// stride 2) and c2 (stride 2 to 8x8) both read conv1's output, c3 adds s2's,
// c4, c5 adds r3's (identity); s6 and c6 (stride 2 to 4x4, 128 channels)
// read r5, c7 adds s6's: eight 16x8 block-sparse convs on at most 64
// pixels, then the global pool.
static const char *const TAIL_DESC =
    "conv 64 3 pad=1 bias=0 name=conv1\nbn name=bn1\nrelu name=relu1\n"
    "conv 64 1 stride=2 bias=0 name=s2 from=relu1\nbn name=bn2s\n"
    "conv 64 3 stride=2 pad=1 bias=0 name=c2 from=relu1\nbn name=bn2\nrelu name=r2\n"
    "conv 64 3 pad=1 bias=0 name=c3\nbn name=bn3\nadd bn2s name=a3\nrelu name=r3\n"
    "conv 64 3 pad=1 bias=0 name=c4\nbn name=bn4\nrelu name=r4\n"
    "conv 64 3 pad=1 bias=0 name=c5\nbn name=bn5\nadd r3 name=a5\nrelu name=r5\n"
    "conv 128 1 stride=2 bias=0 name=s6 from=r5\nbn name=bn6s\n"
    "conv 128 3 stride=2 pad=1 bias=0 name=c6 from=r5\nbn name=bn6\nrelu name=r6\n"
    "conv 128 3 pad=1 bias=0 name=c7\nbn name=bn7\nadd bn6s name=a7\nrelu name=r7\n"
    "gap name=gap\nlinear classes name=fc\n";

// The tail: the forced mixed plan at NIMG runs the eight small-plane convs as
// one tail launch (path 3) and gives the CPU's logits, also after each op is
// timed alone and the plan against its all-cuDNN forward (the tail parked and
// back); at batch 1 and measured, the logits whatever was chosen.
static void test_mixed_tail(tctx *t) {
    if (!gpu_here(t)) return;
    char dir[256];
    CHECK(t, tex_dir_make(dir, sizeof dir) == 0, "no temporary directory");
    tdm_fixture f;
    if (bs_fixture(t, &f, TAIL_DESC, 16, 16, "16x8", dir, 51) == 0) {
        for (int b1 = 0; b1 < 2; b1++) {
            sc_err err = {{0}};
            char what[96];
            snprintf(what, sizeof what, "tail mixed batch %d", b1 ? 1 : NIMG);
            dengine *e = dengine_create_mixed(f.p, b1 ? 1 : NIMG, f.img, 3, 1, &err);
            CHECK(t, e != NULL, "%s: %s", what, err.msg);
            if (!e) continue;
            int tail = 0;
            for (int i = 0; i < f.p->nops; i++) {
                char how[96];
                dengine_op_describe(e, i, how, sizeof how);
                tail += dengine_op_sparse(e, i) == 3 && strncmp(how, "bsconv tail ", 12) == 0;
            }
            CHECK(t, tail == 8, "%s: %d convs in the tail, 8 expected", what, tail);
            check_engine(t, &f, e, what, b1 ? 1 : NIMG, DE_FP16);
            check_op_times(t, &f, e, what, b1 ? 1 : NIMG);
            double ms = NAN, dense_ms = NAN;
            CHECK(t, dengine_time_vs_dense(e, 3, &ms, &dense_ms, &err) == 0, "%s: %s", what, err.msg);
            int again = 0;
            for (int i = 0; i < f.p->nops; i++) again += dengine_op_sparse(e, i) == 3;
            CHECK(t, again == 8, "%s: %d convs in the tail after timing against cuDNN", what, again);
            check_engine(t, &f, e, what, b1 ? 1 : NIMG, DE_FP16);
            dengine_free(e);
        }
        run_bs_measured(t, &f, "16x8 tail net");
    }
    bs_fixture_free(&f);
    tex_dir_remove(dir);
}

// Three convs of one shape (b, c, d) and two residual twins: each is tuned
// and checked on its own buffers (an engine cache that reused the first
// twin's engine was removed after whole-test-set runs disagreed with the CPU).
static void test_twins(tctx *t) {
    if (!gpu_here(t)) return;
    static const char *const TWIN_DESC =
        "conv 8 3 pad=1 name=a\nrelu\nconv 8 3 pad=1 name=b\nrelu name=rb\n"
        "conv 8 3 pad=1 name=c\nrelu\nconv 8 3 pad=1 name=d\nadd rb\nrelu name=rd\n"
        "conv 8 3 pad=1 name=e\nadd rd\nrelu\ngap\nlinear classes name=fc\n";
    tdm_fixture f;
    tdm_opts o = {.fold_bn = 1, .fuse_relu = 1, .fuse_pool = 1, .sparsity = 0.2f};
    if (tdm_fixture_make(t, &f, "twins", TWIN_DESC, 9, 7, &o, 44) == 0) run_all(t, &f, "twins");
    tdm_fixture_free(&f);
}

// Runs every test, or those whose names contain argv[1].
int main(int argc, char **argv) {
    tctx t = {.suite = "gpu_test_dengine", .only = argc > 1 ? argv[1] : NULL};
    RUN(&t, test_lenet);
    RUN(&t, test_residual);
    RUN(&t, test_residual_unfused);
    RUN(&t, test_concat);
    RUN(&t, test_mixed);
    RUN(&t, test_bsr_fixture);
    RUN(&t, test_mixed_bsr);
    RUN(&t, test_mixed_tail);
    RUN(&t, test_twins);
    return check_finish(&t);
}
