// GPU test of BSR exports in deploy: a net of odd shapes pruned on 16x8 and
// 8x1 blocks, exported as BSR and as CSR (--bsr off), loads into the same
// layout, so the GPU plans tuned on each, with the same sparse candidate
// forced on every conv, agree (within the candidate's tolerance: each plan's
// tuner picks its own kernel variant by time; the number of bitwise equal
// pairs is printed), fp32 and fp16, and the tuned plan of the BSR export
// matches the CPU plan. Skips without a GPU.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/deploy_gpu.h"
#include "runtime/deploy_plan.h"
#include "tests/check.h"
#include "tests/export_testutil.h"
#include "tests/testutil.h"

#define NIMG 6

static char g_dir[256];  // the temporary directory of this run (set once in main)

// One export loaded, its plan, CPU path and tuned GPU plan.
typedef struct {
    sparse_model *m;
    deploy_plan *p;
    deploy_cpu *cpu;
    deploy_gpu *g;
    deploy_timing tm;
} bsr_side;

// Exports nt (csr_only or not), loads it and tunes a GPU plan in prec.
static int side_make(tctx *t, bsr_side *s, net *nt, const sc_pattern *pat, int csr_only,
                     deploy_prec prec, const uint8_t *img) {
    sc_err err = {{0}};
    char path[512];
    snprintf(path, sizeof path, "%s/%s.h5", g_dir, csr_only ? "csr" : "bsr");
    export_cfg cfg = {.pattern = pat, .csr_only = csr_only};
    memset(s, 0, sizeof *s);
    s->m = tex_roundtrip(nt, &cfg, path, NULL);
    s->p = s->m ? deploy_plan_build(s->m, &err) : NULL;
    s->cpu = s->p ? deploy_cpu_create(s->p, NIMG, &err) : NULL;
    s->g = s->cpu ? deploy_gpu_create(s->p, prec, NIMG, NULL, stderr, &err) : NULL;
    int rc = s->g && deploy_timing_init(&s->tm, s->p->nops, NIMG, &err) == 0 ? 0 : -1;
    if (rc == 0) rc = deploy_cpu_forward(s->cpu, NIMG, img, NULL, &err);  // the tune's reference has run them
    if (rc == 0) rc = deploy_gpu_tune(s->g, NIMG, img, s->cpu, NIMG, 2, &s->tm, stderr, &err);
    CHECK(t, rc == 0, "%s side: %s", csr_only ? "CSR" : "BSR", err.msg);
    return rc;
}

// Frees one side.
static void side_free(bsr_side *s) {
    if (s->g) deploy_timing_free(&s->tm);
    deploy_gpu_free(s->g);
    deploy_cpu_free(s->cpu);
    deploy_plan_free(s->p);
    sparse_model_free(s->m);
}

// GPU logits (n, classes) of a side's current plan (caller frees).
static float *side_logits(tctx *t, bsr_side *s, const uint8_t *img) {
    sc_err err = {{0}};
    float *lg = alloc_poisoned((size_t)NIMG * s->m->nt->classes);
    CHECK(t, deploy_gpu_forward(s->g, NIMG, img, lg, &err) == 0, "forward: %s", err.msg);
    return lg;
}

// Forces candidate c on every conv op of both sides where it passed on both;
// 1 when it applied to every conv op.
static int force_candidate(tctx *t, bsr_side *a, bsr_side *b, int c) {
    sc_err err = {{0}};
    int *ch = malloc((size_t)a->p->nops * sizeof *ch), all = 1;
    for (int i = 0; i < a->p->nops; i++) {
        const int conv = a->p->ops[i].kind == DOP_CONV;
        ch[i] = conv ? c : -1;
        if (conv) all &= a->tm.passed[i][c] == 1 && b->tm.passed[i][c] == 1;
    }
    if (all) {
        CHECK(t, deploy_gpu_choose(a->g, ch, &err) == 0, "choose %s: %s", deploy_cand_name(c), err.msg);
        CHECK(t, deploy_gpu_choose(b->g, ch, &err) == 0, "choose %s: %s", deploy_cand_name(c), err.msg);
    }
    free(ch);
    return all;
}

// BSR and CSR exports of one block-pruned net on the GPU in one precision.
static void run_pattern(tctx *t, const char *ps, deploy_prec prec) {
    sc_err err = {{0}};
    sc_pattern pat;
    CHECK(t, sc_pattern_parse(ps, &pat, &err) == 0, "%s", err.msg);
    net *nt = tex_block_net(&pat, 0.3f, 0, 700 + (uint64_t)prec);
    uint8_t *img = malloc((size_t)NIMG * 3 * nt->in_h * nt->in_w);
    rng g;
    rng_seed(&g, 7, 1);
    for (size_t i = 0; i < (size_t)NIMG * 3 * nt->in_h * nt->in_w; i++) img[i] = (uint8_t)(rng_uniform(&g) * 256.0f);
    bsr_side a = {0}, b = {0};
    if (side_make(t, &a, nt, &pat, 0, prec, img) == 0 && side_make(t, &b, nt, &pat, 1, prec, img) == 0) {
        CHECK(t, tex_same_layout(a.m, b.m) && a.m->layers[1].bsr.kb > 0, "%s: layouts differ", ps);
        float *want = malloc((size_t)NIMG * nt->classes * sizeof *want);
        CHECK(t, deploy_cpu_forward(a.cpu, NIMG, img, want, &err) == 0, "cpu: %s", err.msg);
        float *tuned = side_logits(t, &a, img);
        double e = relerr((size_t)NIMG * nt->classes, tuned, want);
        CHECK(t, e <= (prec == DP_FP32 ? 1e-4 : 5e-2), "%s: tuned BSR plan vs CPU %.3g", ps, e);
        int forced = 0, same = 0;
        for (int c = 0; c < deploy_cand_count(); c++) {
            if (deploy_cand_prec(c) != prec || deploy_cand_dense(c) || !deploy_cand_choosable(c) ||
                !force_candidate(t, &a, &b, c))
                continue;
            float *la = side_logits(t, &a, img), *lb = side_logits(t, &b, img);
            const size_t n = (size_t)NIMG * nt->classes;
            e = relerr(n, la, lb);
            CHECK(t, e <= deploy_cand_tol(c), "%s %s: BSR and CSR logits differ by %.3g", ps, deploy_cand_name(c), e);
            forced++, same += !memcmp(la, lb, n * sizeof *la);
            free(la), free(lb);
        }
        CHECK(t, forced > 0, "%s: no sparse candidate applied to every conv", ps);
        printf("  %s %s: %d sparse candidates forced, %d bitwise equal\n", ps, prec == DP_FP32 ? "fp32" : "fp16",
               forced, same);
        free(want), free(tuned);
    }
    side_free(&a);
    side_free(&b);
    free(img);
    net_free(nt);
}

// 16x8 and 8x1 blocks, fp32 and fp16 plans.
static void test_bsr_exports(tctx *t) {
    if (!gpu_here(t)) return;
    for (int p = 0; p < 2; p++) {
        run_pattern(t, "16x8", (deploy_prec)p);
        run_pattern(t, "8x1", (deploy_prec)p);
    }
}

int main(void) {
    tctx t = {.suite = "gpu_test_export_bsr"};
    if (tex_dir_make(g_dir, sizeof g_dir) != 0) {
        printf("gpu_test_export_bsr: cannot make a temporary directory\n");
        return 1;
    }
    RUN(&t, test_bsr_exports);
    tex_dir_remove(g_dir);
    return check_finish(&t);
}
