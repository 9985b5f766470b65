// Programmatic dependent launch of the block-sparse convs (gpu_ctx.pdl,
// kernels/ptx_gpu.h ptx_dep_wait / ptx_dep_launch): a chain of four layers,
// each reading the one before it (the second and fourth also add the chain's
// input as a residual), on the gather and the halo kernels, launched back to
// back with no host sync, and as a captured CUDA graph replayed 20 times with
// every intermediate poisoned (all bits set: NaN in fp16) before each replay,
// in both dependent modes (the next kernel let in after the main loop, and
// from the start).
// Every run must give the same bits as the chain run with plain launches and
// a stream sync after each layer: a kernel that read its input, or wrote its
// output, before the kernel ahead of it had finished would meet the poison.
// Skipped without a GPU, and before compute capability 9.0 (no such launch).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv.h"
#include "kernels/bsconv_gpu.h"
#include "runtime/exec.h"
#include "tests/bsconv_cases.h"
#include "tests/check.h"

#define NL 4         // layers in the chain
#define REPLAYS 20   // graph replays checked

// The chain: its layers on the device and the buffers between them.
typedef struct {
    gpu_ctx g;
    sc_err err;
    bsc_layer L[NL];
    bsconv_gpu *b[NL];
    void *buf[NL + 1];  // fp16 (n, H, W, 64): buf[0] the input, buf[k + 1] layer k's output
    size_t n;           // elements per buffer
} chain;

// A kernel variant for layer k that mixes the gather, halo, direct and vector
// kernels (the layer's own pick where the wanted one does not run it).
static int chain_variant(chain *c, int k) {
    const int want[NL] = {0, -1, BSCONV_VEC_FIRST - 1, BSCONV_GPU_VARIANTS - 1};
    if (want[k] >= 0 && bsconv_gpu_variant_usable(&c->g, c->b[k], want[k], NULL, 0)) return want[k];
    return bsconv_gpu_variant(c->b[k]);
}

// Builds the layers (16 images, 64 -> 64 channels, 16x16, 3x3, 16x8 blocks at
// 50%, bias and ReLU) and the buffers, the input uploaded; 0 or -1.
static int chain_make(chain *c) {
    for (int k = 0; k < NL; k++) {
        const bsc_case cs = {16, 64, 16, 16, 64, 3, 3, 1, 1, 16, 8, 0.5, 0, 1, k % 2, 1, 0};
        bsc_make(&cs, 100 + (uint64_t)k, &c->L[k]);
        c->b[k] = bsconv_gpu_create(&c->g, &c->L[k].s, &c->L[k].w, c->L[k].bias, GDT_F16, &c->err);
        if (!c->b[k]) return -1;
        SC_TRY(bsconv_gpu_set_variant(&c->g, c->b[k], chain_variant(c, k), &c->err));
    }
    c->n = c->L[0].nx;
    float *d32 = NULL;
    cudaCheck(&c->err, cudaMalloc((void **)&d32, c->n * sizeof *d32));
    for (int i = 0; i <= NL; i++) cudaCheck(&c->err, cudaMalloc(&c->buf[i], c->n * 2));
    int rc = gpu_upload(d32, c->L[0].x, c->n * sizeof *d32, &c->err);
    if (!rc) rc = gpu_convert(&c->g, c->n, GDT_F32, d32, GDT_F16, c->buf[0], &c->err);
    if (!rc && cudaStreamSynchronize(c->g.stream) != cudaSuccess) rc = sc_fail(&c->err, "uploading the input");
    cudaFree(d32);
    return rc;
}

// Queues the chain on the stream (sync: a stream sync after every layer),
// its intermediates and output poisoned first.
static int chain_queue(chain *c, int sync) {
    for (int i = 1; i <= NL; i++) cudaCheck(&c->err, cudaMemsetAsync(c->buf[i], 0xFF, c->n * 2, c->g.stream));
    for (int k = 0; k < NL; k++) {
        SC_TRY(bsconv_gpu_run(&c->g, c->b[k], c->buf[k], k % 2 ? c->buf[0] : NULL, c->buf[k + 1], &c->err));
        if (sync) cudaCheck(&c->err, cudaStreamSynchronize(c->g.stream));
    }
    return 0;
}

// Downloads the chain's output bits into out (c->n 16-bit values).
static int chain_get(chain *c, uint16_t *out) {
    cudaCheck(&c->err, cudaStreamSynchronize(c->g.stream));
    cudaCheck(&c->err, cudaMemcpy(out, c->buf[NL], c->n * 2, cudaMemcpyDeviceToHost));
    return 0;
}

// Index of the first element where a and b differ, or -1.
static long first_diff(const uint16_t *a, const uint16_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (long)i;
    return -1;
}

// Captures the chain (launches as c->g.pdl says) and checks REPLAYS replays against want.
static void chain_graph(tctx *t, chain *c, const uint16_t *want, uint16_t *got) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int rc = cudaStreamBeginCapture(c->g.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess ? 0 : -1;
    if (!rc) rc = chain_queue(c, 0);
    const cudaError_t ce = cudaStreamEndCapture(c->g.stream, &graph);
    CHECK(t, !rc && ce == cudaSuccess, "capture: %s %s", c->err.msg, cudaGetErrorString(ce));
    if (!rc && ce == cudaSuccess) CHECK(t, cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
    for (int r = 0; exec && r < REPLAYS && !t->bad; r++) {
        CHECK(t, cudaGraphLaunch(exec, c->g.stream) == cudaSuccess && !chain_get(c, got), "replay %d", r);
        const long at = t->bad ? -1 : first_diff(got, want, c->n);
        CHECK(t, at < 0, "pdl %d, replay %d: element %ld is 0x%04x, want 0x%04x", c->g.pdl, r, at,
              at < 0 ? 0 : got[at], at < 0 ? 0 : want[at]);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
}

// Frees the chain.
static void chain_free(chain *c) {
    for (int k = 0; k < NL; k++) bsconv_gpu_free(c->b[k]), bsc_free(&c->L[k]);
    for (int i = 0; i <= NL; i++) cudaFree(c->buf[i]);
    gpu_ctx_free(&c->g);
}

// The chain with programmatic dependent launches equals it run layer by layer.
static void test_pdl_chain(tctx *t) {
    sc_err why = {{0}};
    if (!exec_gpu_available(&why)) {
        SKIP(t, "%s", why.msg);
        return;
    }
    chain c;
    memset(&c, 0, sizeof c);
    if (gpu_ctx_init(&c.g, &c.err)) {
        CHECK(t, 0, "gpu_ctx_init: %s", c.err.msg);
        return;
    }
    if (!c.g.pdl) {
        SKIP(t, "%s is compute capability %d.%d: no programmatic dependent launch", c.g.dev.name,
             c.g.dev.cc_major, c.g.dev.cc_minor);
        gpu_ctx_free(&c.g);
        return;
    }
    int rc = chain_make(&c);
    uint16_t *want = malloc(c.n * 2 + 2), *got = malloc(c.n * 2 + 2);
    CHECK(t, !rc && want && got, "setting up: %s", c.err.msg);
    if (!t->bad) {
        c.g.pdl = 0;
        CHECK(t, !chain_queue(&c, 1) && !chain_get(&c, want), "plain launches: %s", c.err.msg);
        c.g.pdl = 1;
    }
    for (int mode = 1; mode <= 2 && !t->bad; mode++) {
        c.g.pdl = mode;
        CHECK(t, !chain_queue(&c, 0) && !chain_get(&c, got), "dependent launches: %s", c.err.msg);
        const long at = t->bad ? -1 : first_diff(got, want, c.n);
        CHECK(t, at < 0, "stream, pdl %d: element %ld is 0x%04x, want 0x%04x", mode, at, at < 0 ? 0 : got[at],
              at < 0 ? 0 : want[at]);
        if (!t->bad) chain_graph(t, &c, want, got);
    }
    c.g.pdl = 0;
    if (!t->bad) chain_graph(t, &c, want, got);  // the same graph with plain launches
    c.g.pdl = 1;
    for (size_t i = 0; !t->bad && i < c.n; i++)  // the poison never reached the output
        CHECK(t, (want[i] & 0x7c00) != 0x7c00, "element %zu of the plain chain is not finite", i);
    printf("  chain of %d layers, variants %d %d %d %d, %zu outputs, %d graph replays\n", NL,
           c.b[0] ? bsconv_gpu_variant(c.b[0]) : -1, c.b[1] ? bsconv_gpu_variant(c.b[1]) : -1,
           c.b[2] ? bsconv_gpu_variant(c.b[2]) : -1, c.b[3] ? bsconv_gpu_variant(c.b[3]) : -1, c.n, REPLAYS);
    free(want), free(got);
    chain_free(&c);
}

int main(void) {
    tctx t = {.suite = "gpu_test_pdl"};
    RUN(&t, test_pdl_chain);
    return check_finish(&t);
}
