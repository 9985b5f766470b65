// The tail kernel (kernels/bsconv_tail_gpu.h): resnet18's layer4, layer3 and
// both as one chain, and vgg16's conv5-13 with their 2x2 max-pools (the
// chains of tests/tail_cases.h), one CTA per image, on random 16x8 block-sparse weights
// (50% to 99%, an empty block row, dense; scaled by the fan-in), fp16, against the plain-C chain
// (each conv's output rounded to fp16 as the kernel keeps it), y poisoned
// first with a poisoned guard after it. `gpu_test_tail --time` also times
// each chain at batch 128 against the same convs as one-layer block-sparse
// launches on their fastest variants (medians of 50 after 10 warm-ups, host
// work hidden behind a spin kernel); `--profile SPARSITY` runs layer3+4 for a
// profiler. Skipped without a GPU.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv.h"
#include "kernels/bsconv_gpu.h"
#include "kernels/bsconv_tail_gpu.h"
#include "runtime/exec.h"
#include "runtime/half.h"
#include "tests/bsconv_cases.h"
#include "tests/check.h"
#include "tests/tail_cases.h"

#define GUARD_EL 64  // poisoned elements after y

// A chain on the host and the device.
typedef struct {
    gpu_ctx *g;
    sc_err *err;
    int nops, n;
    bsc_layer L[TAIL_MAXOPS];
    bst_w w[TAIL_MAXOPS];
    float *bias[TAIL_MAXOPS];    // device
    bst_op ops[TAIL_MAXOPS];
    bsconv_gpu *b[TAIL_MAXOPS];  // the one-layer kernels
    const tail_spec *sp;
    void *x, *y, *ybuf[TAIL_MAXOPS];
    size_t ny;
} chain;

// A device fp16 buffer of n elements and GUARD_EL more, all poisoned (0xFFFF); NULL on failure.
static void *dnew16(size_t n) {
    void *d = NULL;
    if (cudaMalloc(&d, (n + GUARD_EL) * 2) != cudaSuccess || cudaMemset(d, 0xFF, (n + GUARD_EL) * 2) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

// Uploads host floats as fp16 into a new buffer; NULL on failure.
static void *dput16(const float *h, size_t n) {
    uint16_t *b = malloc(n * 2);
    for (size_t i = 0; i < n; i++) b[i] = half_from_float(h[i]);
    void *d = dnew16(n);
    if (d && cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice) != cudaSuccess) cudaFree(d), d = NULL;
    free(b);
    return d;
}

// n fp16 values of device d as floats into h; 0 or -1.
static int get16(const void *d, size_t n, float *h) {
    uint16_t *b = malloc(n * 2);
    const int rc = cudaMemcpy(b, d, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess;
    for (size_t i = 0; !rc && i < n; i++) h[i] = half_to_float(b[i]);
    free(b);
    return rc ? -1 : 0;
}

// Builds chain c of n images from specs sp (nops of them) at block sparsity
// spars (op 2 with an empty block row when empty); 0 or -1.
static int chain_make(chain *c, const tail_spec *sp, int nops, int n, double spars, int empty, uint64_t seed) {
    c->sp = sp, c->nops = nops, c->n = n;
    tail_layers_make(c->L, sp, nops, n, spars, empty, seed);
    for (int k = 0; k < nops; k++) {
        const tail_spec *s = &sp[k];
        bsconv_hpack h;
        SC_TRY(bsconv_hpack_build(&c->L[k].s, &c->L[k].w, &h, c->err));
        const int rc = bst_gpu_upload(c->g, &c->L[k].s, &h, &c->w[k], c->err);
        bsconv_hpack_free(&h);
        SC_TRY(rc);
        cudaCheck(c->err, cudaMalloc((void **)&c->bias[k], (size_t)s->K * 4));
        SC_TRY(gpu_upload(c->bias[k], c->L[k].bias, (size_t)s->K * 4, c->err));
        c->ops[k] = (bst_op){c->L[k].s, &c->w[k], c->bias[k], s->in, s->out, s->res, s->pre};
        if (!(c->b[k] = bsconv_gpu_create(c->g, &c->L[k].s, &c->L[k].w, c->L[k].bias, GDT_F16, c->err))) return -1;
        if (!(c->ybuf[k] = dnew16(c->L[k].ny))) return sc_fail(c->err, "cudaMalloc failed");
    }
    c->ny = c->L[nops - 1].ny;
    if (!(c->x = dput16(c->L[0].x, c->L[0].nx)) || !(c->y = dnew16(c->ny))) return sc_fail(c->err, "cudaMalloc failed");
    char why[160];
    if (!bst_gpu_applies(c->g, c->ops, nops, why, sizeof why)) return sc_fail(c->err, "the tail kernel: %s", why);
    return bst_gpu_prepare(c->g, c->err);
}

// Frees the chain.
static void chain_free(chain *c) {
    for (int k = 0; k < c->nops; k++) {
        bst_gpu_free(&c->w[k]), bsconv_gpu_free(c->b[k]), cudaFree(c->bias[k]), cudaFree(c->ybuf[k]);
        bsc_free(&c->L[k]);
    }
    cudaFree(c->x), cudaFree(c->y);
}

// Queues the tail kernel into y (a gpu_run_fn).
static int run_tail(void *arg, sc_err *err) {
    chain *c = arg;
    return bst_gpu_run(c->g, c->ops, c->nops, c->n, c->x, c->y, err);
}

// Queues the convs as one-layer launches into ybuf (a gpu_run_fn).
static int run_layers(void *arg, sc_err *err) {
    chain *c = arg;
    for (int k = 0; k < c->nops; k++) {
        const tail_spec *s = &c->sp[k];
        SC_TRY(bsconv_gpu_run(c->g, c->b[k], s->src < 0 ? c->x : c->ybuf[s->src], s->rsrc < 0 ? NULL : c->ybuf[s->rsrc],
                              c->ybuf[k], err));
    }
    return 0;
}

// Worst error of got (the last op's output) against the plain-C chain (tail_worst).
static double chain_worst(chain *c, const float *got, size_t *at) { return tail_worst(c->L, c->sp, c->nops, got, at); }

// 1 when the GUARD_EL elements after n of device d are still poisoned.
static int guard_intact(const void *d, size_t n) {
    uint16_t g[GUARD_EL];
    if (cudaMemcpy(g, (const uint16_t *)d + n, sizeof g, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
    for (int i = 0; i < GUARD_EL; i++)
        if (g[i] != 0xFFFFu) return 0;
    return 1;
}

// Opens the GPU into g; 0, or 1 (skipped or failed, said) when there is none to use.
static int open_gpu(tctx *t, gpu_ctx *g) {
    sc_err why = {{0}};
    if (!exec_gpu_available(&why)) {
        SKIP(t, "%s", why.msg);
        return 1;
    }
    if (gpu_ctx_init(g, &why)) {
        CHECK(t, 0, "gpu_ctx_init: %s", why.msg);
        return 1;
    }
    return 0;
}

// Makes a chain, runs the tail kernel and checks it; 0 when it passed (c kept for timing).
static int tail_check(tctx *t, gpu_ctx *g, chain *c, const char *what, const tail_spec *sp, int nops, int n, double spars,
                      int empty, uint64_t seed) {
    static sc_err err;
    memset(&err, 0, sizeof err), memset(c, 0, sizeof *c);
    c->g = g, c->err = &err;
    char name[120];
    snprintf(name, sizeof name, "%s n%d blk16x8 sp%.2f%s", what, n, spars, empty ? " empty-row" : "");
    int rc = chain_make(c, sp, nops, n, spars, empty, seed);
    float *got = malloc(c->ny ? c->ny * 4 : 4);
    if (!rc) rc = run_tail(c, &err) || cudaStreamSynchronize(g->stream) != cudaSuccess || get16(c->y, c->ny, got);
    CHECK(t, !rc, "%s: %s (%s)", name, err.msg, cudaGetErrorString(cudaGetLastError()));
    if (!rc) {
        CHECK(t, guard_intact(c->y, c->ny), "%s: the tail kernel wrote past y", name);
        size_t at = 0;
        const double worst = chain_worst(c, got, &at);
        CHECK(t, worst <= 1.0, "%s: worst %.3g of tolerance at y[%zu] = %.6g", name, worst, at, got[at]);
        printf("  %s: worst %.3g of tolerance\n", name, worst);
        rc = worst <= 1.0 ? 0 : -1;
    }
    free(got);
    return rc;
}

// Awkward batches and sparsities on both chains.
static void test_tail(tctx *t) {
    gpu_ctx g;
    if (open_gpu(t, &g)) return;
    const struct { const tail_spec *sp; int nops, n; double spars; int empty; const char *what; } cs[] = {
        {R18_L4, 5, 3, 0.5, 0, "layer4"},       {R18_L4, 5, 2, 0.95, 1, "layer4"}, {R18_L4, 5, 1, 0.99, 0, "layer4"},
        {R18_L4, 5, 2, 0.0, 0, "layer4"},       {R18_TAIL, 10, 3, 0.9, 1, "layer3+4"},
        {R18_TAIL, 5, 2, 0.95, 0, "layer3"},    {R18_TAIL, 10, 1, 0.0, 0, "layer3+4"},
        {VGG_TAIL, 9, 3, 0.9, 1, "vgg16 conv5-13"}, {VGG_TAIL, 3, 2, 0.5, 0, "vgg16 conv5-7"},
        {VGG_TAIL, 9, 1, 0.0, 0, "vgg16 conv5-13"}, {VGG_TAIL, 6, 2, 0.99, 1, "vgg16 conv5-10"},
        {VGG_LATE, 6, 3, 0.9, 1, "vgg16 conv8-13"}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        chain c;
        tail_check(t, &g, &c, cs[i].what, cs[i].sp, cs[i].nops, cs[i].n, cs[i].spars, cs[i].empty, 31 + i);
        chain_free(&c);
    }
    gpu_ctx_free(&g);
}

// Sets op k's one-layer kernel to its fastest variant alone; that time into *ms.
static int best_variant(chain *c, int k, double *ms) {
    chain one = *c;
    one.nops = k + 1;  // times ops 0..k; the fastest for k is the one that minimises the whole
    int bv = -1;
    *ms = INFINITY;
    for (int v = 0; v < BSCONV_GPU_VARIANTS; v++) {
        double m = NAN;
        if (!bsconv_gpu_variant_usable(c->g, c->b[k], v, NULL, 0) || bsconv_gpu_set_variant(c->g, c->b[k], v, c->err)) continue;
        if (gpu_time_median_busy(c->g, run_layers, &one, 5, 30, &m, c->err)) continue;
        if (m < *ms) *ms = m, bv = v;
    }
    return bv < 0 ? -1 : bsconv_gpu_set_variant(c->g, c->b[k], bv, c->err);
}

// One chain at batch 128: the tail kernel against the one-layer launches on their fastest variants.
static void time_chain(tctx *t, gpu_ctx *g, const char *what, const tail_spec *sp, int nops, double spars) {
    chain c;
    if (tail_check(t, g, &c, what, sp, nops, 128, spars, 0, 77)) {
        chain_free(&c);
        return;
    }
    double layers = NAN, tail = NAN, ms;
    int rc = 0;
    for (int k = 0; !rc && k < nops; k++) rc = best_variant(&c, k, &ms);
    if (!rc) rc = gpu_time_median_busy(g, run_layers, &c, 10, 50, &layers, c.err) ||
                  gpu_time_median_busy(g, run_tail, &c, 10, 50, &tail, c.err);
    CHECK(t, !rc, "time %s: %s", what, c.err->msg);
    if (!rc) {
        printf("time %s n128 blk16x8 sp%.2f: tail %.4f ms, %d one-layer launches %.4f ms (variants", what, spars,
               tail, nops, layers);
        for (int k = 0; k < nops; k++) printf(" %d", bsconv_gpu_variant(c.b[k]));
        printf("), launches / tail = %.2f (medians of 50, %s)\n", layers / tail, g->dev.name);
    }
    chain_free(&c);
}

// resnet18's layer4 and layer3+4 and vgg16's conv5-13, conv5-7 and conv8-13 at batch 128 and 90%, 95% and 98% block sparsity.
static void test_tail_time(tctx *t) {
    gpu_ctx g;
    if (open_gpu(t, &g)) return;
    const double sp[3] = {0.9, 0.95, 0.98};
    for (int i = 0; i < 3; i++) {
        time_chain(t, &g, "resnet18 layer4", R18_L4, 5, sp[i]);
        time_chain(t, &g, "resnet18 layer3+4", R18_TAIL, 10, sp[i]);
        time_chain(t, &g, "vgg16 conv5-13", VGG_TAIL, 9, sp[i]);
        time_chain(t, &g, "vgg16 conv5-7", VGG_TAIL, 3, sp[i]);
        time_chain(t, &g, "vgg16 conv8-13", VGG_LATE, 6, sp[i]);
    }
    gpu_ctx_free(&g);
}

// For a profiler: layer3+4 at batch 128 and the sparsity in argv[2], checked, then the tail kernel 5 more times.
static int profile_tail(const char *sp) {
    tctx t = {.suite = "gpu_test_tail --profile"};
    gpu_ctx g;
    if (open_gpu(&t, &g)) return check_finish(&t);
    chain c;
    if (!tail_check(&t, &g, &c, "layer3+4", R18_TAIL, 10, 128, atof(sp), 0, 77))
        for (int i = 0; i < 5; i++) CHECK(&t, !run_tail(&c, c.err), "run: %s", c.err->msg);
    cudaDeviceSynchronize();
    chain_free(&c);
    gpu_ctx_free(&g);
    return check_finish(&t);
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--profile")) return profile_tail(argv[2]);
    tctx t = {.suite = "gpu_test_tail"};
    RUN(&t, test_tail);
    if (argc > 1 && !strcmp(argv[1], "--time")) RUN(&t, test_tail_time);
    return check_finish(&t);
}
