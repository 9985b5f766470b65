// The sparse convolution on the GPU (kernels/spconv_gpu.h) against the CPU
// reference (kernels/spconv_cpu.c): every listed variant of every layer, in
// fp32, fp16 and with 4-bit codebook weights, on random layers of awkward
// shapes (odd sizes, strides 1 and 2, paddings 0-2, 1x1/1x3/3x3/5x5 kernels,
// borders wider than the padding, pools, a linear layer, channel chunks; 1x1
// layers with stride 2 and 3, which the tiled and ell variants run as stride 1
// over a strided view of the input, at 0/50/90/99% with pads, pools and
// chunks; 64 channels of 16x16, where shortened bands (gd) are listed; small
// planes of 3x3 to 8x8 incl. 300-600 channels, odd planes, pools and stride 2,
// where the big 512-thread pair blocks are listed; batches >= 32, where the
// pair blocks with 3 or 4 blocks per SM, "occ3" / "occ4", are listed) and
// sparsities 0/50/90/99% with a row that has no non-zero, skewed
// row lengths (log-normal, like real pruned masks; every variant also with
// zero skipping and row ordering off), for 1, 3, 5, 8, 37, 40 and 128 images
// (37 and 40: the several-images-per-block variants with a partial last
// block); then the
// tuned variant, the variant replayed from a captured
// CUDA graph, and the cuDNN (dconv) and cuSPARSE (spmm) baselines (and the
// cuDNN baseline's fallback from an algorithm cuDNN refuses at run time). Outputs
// are poisoned (all bits set) before each run; border elements must keep the
// poison. Inputs are rounded to fp16 for the fp16 cases and the reference
// runs on the rounded values.
//
// Error: max |gpu - cpu| / max |cpu| over the output. Tolerances: fp32 1e-4
// (sums in another order); TF32 1e-2 (10-bit mantissa); fp16 and codebook
// 1e-2 (fp16 storage, half2 sums of <= 32 terms flushed into fp32).
//
//   gpu_test_spconv            all tests (skipped without a GPU)
//   gpu_test_spconv --small    a few small cases, baselines on one
//   gpu_test_spconv --sanitize the small sparse cases only (for compute-sanitizer)
//   gpu_test_spconv --bench    times the CIFAR VGG-16 / ResNet-18 layers (options below)
//   gpu_test_spconv --profile  one layer's forward for ncu (below)
//   gpu_test_spconv --variants every fp32 variant of one layer, timed (below)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>
#include <cudnn.h>

#include "kernels/dconv_gpu.h"
#include "kernels/spconv_gpu.h"
#include "kernels/spmm_gpu.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/gpu_testutil.h"
#include "tests/spconv_cases.h"
#include "tests/testutil.h"

#define TOL32 1e-4
#define TOLTF32 1e-2
#define TOL16 1e-2

// A shape and the batch sizes it is tested with (0 ends the list).
typedef struct {
    spc_shape s;
    int ns[3];
} tcase;

static const tcase cases[] = {
    {{"3x3 odd", 17, 5, 9, 9, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, {1, 3}},
    {{"3x3 s2 wide border", 24, 16, 13, 11, 3, 3, 2, 1, 2, 1, 0, 0, 0, 1, 1, 0.9, 0, 0}, {3, 8}},
    {{"5x5 p2 pool", 8, 3, 16, 16, 5, 5, 1, 2, 2, 1, 2, 2, 0, 1, 1, 0.5, 0, 0}, {1, 3}},
    {{"1x1 s2 shortcut", 33, 20, 8, 8, 1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 1, 0.9, 0, 0}, {8}},
    {{"odd pool 99%", 9, 7, 7, 7, 3, 3, 1, 1, 1, 2, 2, 2, 0, 1, 1, 0.01, 0, 0}, {3}},
    {{"dense 0%", 6, 4, 6, 6, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1.0, 0, 0}, {1, 3}},
    {{"empty row 90%", 12, 8, 10, 10, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.1, 1, 0}, {3}},
    {{"pool 3/2/1", 5, 3, 9, 9, 3, 3, 1, 1, 1, 1, 3, 2, 1, 1, 0, 0.5, 0, 0}, {3}},
    {{"5x5 p0", 7, 6, 12, 10, 5, 5, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0.5, 0, 0}, {1}},
    {{"cifar 32x32", 64, 64, 32, 32, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0}, {8}},
    {{"cifar 32x32 pool", 32, 24, 32, 32, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 0, 0}, {3}},
    {{"4x4 pool", 128, 96, 4, 4, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 0, 0}, {1, 8}},
    {{"chunked C", 40, 700, 4, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.05, 0, 0}, {3}},
    {{"linear", 37, 129, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, {1, 3, 40}},
    {{"s2 pool", 10, 6, 12, 12, 3, 3, 2, 1, 1, 0, 2, 2, 0, 1, 1, 0.5, 0, 0}, {3}},
    {{"2x2 planes", 16, 32, 2, 2, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, {1, 16}},
    {{"1x3", 5, 4, 3, 15, 1, 3, 1, 1, 2, 1, 0, 0, 0, 0, 1, 0.5, 0, 0}, {3}},
    {{"batch 128 pool", 32, 16, 8, 8, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 0, 0}, {128}},
    {{"batch 128 s2", 24, 16, 16, 16, 3, 3, 2, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0}, {128}},
    {{"skewed 3x3", 96, 24, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0.8}, {3, 40}},
    {{"skewed 2x2 empty", 64, 48, 2, 2, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.1, 1, 0.8}, {37, 1}},
    {{"skewed 1x1 s2", 72, 40, 8, 8, 1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 1, 0.1, 0, 0.8}, {37}},
    {{"skewed 4x4 pool", 64, 40, 4, 4, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.05, 0, 0.8}, {37}},
    {{"skewed 99% odd", 33, 17, 7, 9, 3, 3, 2, 1, 1, 1, 0, 0, 0, 1, 1, 0.01, 1, 1.0}, {3}},
    {{"skewed linear", 40, 100, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0.1, 0, 0.8}, {37}},
    // 1x1 stride 2 and 3 (run by the tiled and ell kernels as stride 1 over a strided view)
    {{"1x1 s2 odd 50%", 19, 13, 11, 9, 1, 1, 2, 0, 2, 1, 0, 0, 0, 0, 1, 0.5, 1, 0}, {5, 1}},
    {{"1x1 s3 odd 90%", 21, 9, 13, 10, 1, 1, 3, 0, 1, 0, 0, 0, 0, 1, 1, 0.1, 1, 0}, {1, 5}},
    {{"1x1 s2 dense 0%", 8, 6, 7, 7, 1, 1, 2, 0, 1, 1, 0, 0, 0, 0, 0, 1.0, 0, 0}, {1, 5}},
    {{"1x1 s3 99%", 40, 24, 17, 17, 1, 1, 3, 0, 0, 2, 0, 0, 0, 0, 1, 0.01, 1, 0}, {5, 1}},
    {{"1x1 s2 pad 1", 12, 7, 9, 8, 1, 1, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, {3, 1}},
    {{"1x1 s2 pool", 10, 6, 17, 15, 1, 1, 2, 0, 1, 1, 2, 2, 0, 1, 1, 0.5, 0, 0}, {3}},
    {{"1x1 s2 16x16 90%", 64, 48, 16, 16, 1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 1, 0.1, 1, 0}, {5, 40}},
    {{"1x1 s2 chunked C", 40, 600, 8, 8, 1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 1, 0.05, 0, 0}, {5}},
    {{"1x1 s3 n128 skewed", 24, 16, 20, 20, 1, 1, 3, 0, 1, 1, 0, 0, 0, 0, 1, 0.1, 0, 0.8}, {128}},
    // 64 channels of 16x16: the default bands need two chunks, shorter ones (gd) one
    {{"short bands 16x16", 16, 64, 16, 16, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.1, 1, 0}, {1, 5}},
    // small planes (<= 64 conv pixels): big 512-thread pair blocks are listed too
    {{"small 3x3 C300 90%", 40, 300, 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 1, 0}, {5, 1}},
    {{"small 5x5 50%", 37, 45, 5, 5, 3, 3, 1, 1, 2, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, {1, 5}},
    {{"small 7x7 pool 90%", 24, 33, 7, 7, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 1, 0}, {5, 1}},
    {{"small 4x4 dense 0%", 20, 16, 4, 4, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1.0, 0, 0}, {8, 1}},
    {{"small 4x4 99% C300", 64, 300, 4, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.01, 1, 0}, {5, 40}},
    {{"small 4x4 pool C600", 72, 600, 4, 4, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.05, 0, 0}, {5, 37}},
    {{"small 8x8 s2 -> 4x4", 64, 48, 8, 8, 3, 3, 2, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0}, {40, 1}},
    {{"small 16x15 s2 -> 8x8", 33, 29, 16, 15, 3, 3, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0.1, 1, 0}, {5}},
    {{"small 8x8 skewed C300", 48, 300, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0.8}, {5}},
    // 133 images: one-image big blocks of 8x8 run both 128-channel blocks (ki 2)
    {{"small 8x8 n133 ki", 256, 6, 8, 8, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.3, 0, 0}, {133}},
    // batch >= 32: the occ3 / occ4 pair blocks (3-4 per SM, 75 / 56 KB tiles) are listed
    {{"occ 16x16 K128 pool", 128, 24, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.2, 1, 0}, {40}},
    {{"occ 8x8 K256 skewed", 256, 40, 8, 8, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.1, 0, 0.8}, {64}},
    {{"occ 4x4 K520 C300 99%", 520, 300, 4, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.01, 1, 0}, {72}},
    {{"occ 13x17 s2 K200 odd", 200, 20, 13, 17, 3, 3, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0.3, 0, 0}, {37}},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

// Cases run under compute-sanitizer (--small), each with its first batch size.
static const int small_cases[] = {0,  1,  2,  4,  12, 13, 20, 21, 22, 25, 26, 27,
                                   28, 29, 30, 34, 35, 37, 39, 40, 41, 45, 47, 48};

static const char *vt_name[] = {"fp32", "fp16", "cb4"};

// --- device helpers ---------------------------------------------------------------

// Device copy of n activations (fp32, or fp16 bits when half).
static void *dev_put(const float *h, size_t n, int half) {
    void *d = NULL;
    const size_t es = half ? 2 : 4;
    if (cudaMalloc(&d, n * es + 16) != cudaSuccess) return NULL;
    if (!half) {
        sc_err e;
        return gpu_upload(d, h, n * es, &e) ? (cudaFree(d), NULL) : d;
    }
    uint16_t *b = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) b[i] = spc_half_bits(h[i]);
    sc_err e;
    if (gpu_upload(d, b, n * 2, &e)) cudaFree(d), d = NULL;
    free(b);
    return d;
}

// Sets every bit of n activations on stream st.
static void dev_poison(void *d, size_t n, int half, cudaStream_t st) {
    cudaMemsetAsync(d, 0xFF, n * (half ? 2 : 4), st);
}

// Compares a bordered device output with the CPU output ref (same layout):
// interior within tol, border elements still poisoned. Returns 1 when good.
static int out_check(tctx *t, const char *what, const spc_layer *L, int n, int half,
                     const void *dout, const float *ref, double tol) {
    const size_t no = spc_out_elems(L, n);
    uint32_t *raw = malloc(no * 4 + 4);
    uint16_t *h = (uint16_t *)raw;
    cudaMemcpy(raw, dout, no * (half ? 2 : 4), cudaMemcpyDeviceToHost);
    const int ob = L->d.out_border, hob = L->po + 2 * ob, wob = L->qo + 2 * ob;
    double num = 0.0, den = 0.0;
    size_t border_bad = 0, worst = 0;
    for (size_t i = 0; i < no; i++) {
        const int y = (int)(i / wob % hob), x = (int)(i % wob);
        if (spc_is_border(y, x, hob, wob, ob)) {
            border_bad += half ? h[i] != 0xFFFF : raw[i] != 0xFFFFFFFFu;
            continue;
        }
        float v;
        if (half) v = spc_half_float(h[i]);
        else memcpy(&v, &raw[i], 4);
        const double e = isnan(v) ? INFINITY : fabs((double)v - ref[i]);
        if (e > num) num = e, worst = i;
        den = fmax(den, fabs(ref[i]));
    }
    const double rel = den > 0 ? num / den : num;
    CHECK(t, rel <= tol && border_bad == 0, "%s: rel err %.3g (tol %g) at %zu (want %g), %zu border "
          "elements written", what, rel, tol, worst, (double)ref[worst], border_bad);
    free(raw);
    return rel <= tol && border_bad == 0;
}

// Waits for stream st; 0 when it and the last launch succeeded.
static int dev_sync(cudaStream_t st) {
    return cudaStreamSynchronize(st) != cudaSuccess || cudaGetLastError() != cudaSuccess;
}

// --- one case -----------------------------------------------------------------------

// A case's data: the layer, its input (host, rounded) and the CPU output.
typedef struct {
    spc_layer L;
    int n, vt, half;
    float *x, *ref;
    void *din, *dout;
} tdata;

// Builds layer, input, CPU reference (when ref is set) and device buffers.
static void tdata_make(tdata *d, const spc_shape *s, int n, int vt, uint64_t seed, int ref) {
    memset(d, 0, sizeof *d);
    spc_layer_make(&d->L, s, vt, seed);
    d->n = n, d->vt = vt, d->half = vt != SPC_FP32;
    d->x = spc_input(&d->L.d, n, d->half, seed + 1);
    const size_t no = spc_out_elems(&d->L, n);
    d->ref = calloc(no + 1, sizeof *d->ref);
    if (ref) spconv_forward_cpu(&d->L.d, n, d->x, d->ref);
    d->din = dev_put(d->x, spc_in_elems(&d->L.d, n), d->half);
    cudaMalloc(&d->dout, no * 4 + 16);
}

// Frees a case's data.
static void tdata_free(tdata *d) {
    cudaFree(d->din), cudaFree(d->dout);
    free(d->x), free(d->ref);
    spc_layer_free(&d->L);
}

// Runs the chosen variant of g on poisoned output and checks it.
static int sparse_run_check(tctx *t, tdata *d, spconv_gpu *g, cudaStream_t st, const char *what) {
    sc_err err = {{0}};
    dev_poison(d->dout, spc_out_elems(&d->L, d->n), d->half, st);
    int rc = spconv_gpu_forward(g, d->n, d->din, d->dout, st, &err);
    if (rc || dev_sync(st)) {
        CHECK(t, 0, "%s: forward failed: %s %s", what, err.msg, cudaGetErrorString(cudaGetLastError()));
        return 0;
    }
    return out_check(t, what, &d->L, d->n, d->half, d->dout, d->ref, d->half ? TOL16 : TOL32);
}

// One forward of the chosen variant (graph_capture's callback).
typedef struct {
    tdata *d;
    spconv_gpu *g;
    cudaStream_t st;
} sparse_fwd;

// Queues the forward in arg.
static int sparse_fwd_run(void *arg, sc_err *err) {
    sparse_fwd *f = arg;
    return spconv_gpu_forward(f->g, f->d->n, f->d->din, f->d->dout, f->st, err);
}

// Replays the chosen variant from a captured CUDA graph and checks it.
static void sparse_graph_check(tctx *t, tdata *d, spconv_gpu *g, cudaStream_t st) {
    sc_err err = {{0}};
    cudaGraphExec_t exec = NULL;
    sparse_fwd f = {d, g, st};
    int ok = graph_capture(st, sparse_fwd_run, &f, &exec, &err) == 0;
    CHECK(t, ok, "graph capture failed: %s %s", err.msg, cudaGetErrorString(cudaGetLastError()));
    if (ok) {
        dev_poison(d->dout, spc_out_elems(&d->L, d->n), d->half, st);
        ok = cudaGraphLaunch(exec, st) == cudaSuccess && !dev_sync(st);
        CHECK(t, ok, "graph launch failed");
        if (ok) out_check(t, "graph replay", &d->L, d->n, d->half, d->dout, d->ref,
                          d->half ? TOL16 : TOL32);
    }
    if (exec) cudaGraphExecDestroy(exec);
}

// Every variant, the tuned one and a graph replay of one case; returns how
// many of the variant runs were fp32 several-columns-per-thread ("pair") ones
// and adds to cnt[0] those that ran a 1x1 strided layer as a strided view,
// to cnt[1] those with shortened bands (gd), to cnt[2] the big (512-thread)
// pair blocks, to cnt[3] the big ones that load each row's first records
// early ("big pf") and to cnt[4] / cnt[5] the pair blocks with 3 / 4 blocks
// per SM ("occ3" / "occ4").
static int sparse_case(tctx *t, const spc_shape *s, int n, int vt, uint64_t seed,
                       cudaStream_t st, int *cnt) {
    tdata d;
    tdata_make(&d, s, n, vt, seed, 1);
    sc_err err = {{0}};
    spconv_gpu *g = spconv_gpu_create(&d.L.d, (spconv_gpu_vtype)vt, d.L.codes, d.L.cb,
                                      d.L.scale, &err);
    CHECK(t, g != NULL, "%s %s: create: %s", s->name, vt_name[vt], err.msg);
    if (!g) {
        tdata_free(&d);
        return 0;
    }
    const int nv = spconv_gpu_nvariants(g, n);
    int good = 0, shown = 0, pairs = 0;
    char what[256], desc[200];
    for (int pass = s->skew > 0 ? 0 : 1; pass < 2; pass++) {  // skewed: padded rows too
        CHECK(t, spconv_gpu_compact(g, pass, &err) == 0, "compact %d: %s", pass, err.msg);
        for (int v = 0; v < nv && shown < 3; v++) {  // at most 3 failures: keep the log short
            if (spconv_gpu_use(g, n, v, &err)) {
                CHECK(t, 0, "%s: use %d: %s", s->name, v, err.msg);
                continue;
            }
            spconv_gpu_describe(g, desc, sizeof desc);
            pairs += !strncmp(desc, "pair ", 5);
            cnt[0] += strstr(desc, " view s") != NULL;
            cnt[1] += strstr(desc, " gd") != NULL;
            cnt[2] += strstr(desc, " big") != NULL;
            cnt[3] += strstr(desc, " big pf") != NULL;
            cnt[4] += strstr(desc, " occ3") != NULL;
            cnt[5] += strstr(desc, " occ4") != NULL;
            snprintf(what, sizeof what, "%s n=%d %s variant %d (%s)", s->name, n, vt_name[vt], v,
                     desc);
            if (sparse_run_check(t, &d, g, st, what)) good += pass;
            else shown++;
        }
    }
    float ms = 0;
    CHECK(t, spconv_gpu_tune(g, n, d.din, d.dout, st, &ms, &err) == 0, "tune: %s", err.msg);
    spconv_gpu_describe(g, desc, sizeof desc);
    snprintf(what, sizeof what, "%s n=%d %s tuned (%s)", s->name, n, vt_name[vt], desc);
    sparse_run_check(t, &d, g, st, what);
    sparse_graph_check(t, &d, g, st);
    printf("  %-20s n=%-3d %-4s %2d/%2d variants ok; tuned: %s\n", s->name, n, vt_name[vt], good,
           nv, desc);
    spconv_gpu_free(g);
    tdata_free(&d);
    return pairs;
}

// --- baselines ----------------------------------------------------------------------

// cuDNN at each precision of the case's type and cuSPARSE, checked like the sparse kernel.
static void baseline_case(tctx *t, const spc_shape *s, int n, int vt, uint64_t seed,
                          const gpu_ctx *g) {
    tdata d;
    tdata_make(&d, s, n, vt, seed, 1);
    sc_err err = {{0}};
    char what[200], desc[160];
    const dconv_prec ps[2] = {vt == SPC_FP32 ? DC_FP32 : DC_FP16, vt == SPC_FP32 ? DC_TF32
                                                                                 : DC_FP16_NHWC};
    for (int i = 0; i < 2; i++) {
        dconv_gpu *c = dconv_gpu_create(g, &d.L.d, d.L.w, ps[i], n, &err);
        CHECK(t, c != NULL, "%s: dconv create: %s", s->name, err.msg);
        if (!c) continue;
        dconv_gpu_describe(c, desc, sizeof desc);
        snprintf(what, sizeof what, "%s n=%d %s", s->name, n, desc);
        dev_poison(d.dout, spc_out_elems(&d.L, n), d.half, g->stream);
        const int rc = dconv_gpu_forward(g, c, n, d.din, d.dout, g->stream, &err);
        CHECK(t, rc == 0 && !dev_sync(g->stream), "%s: forward: %s", what, err.msg);
        out_check(t, what, &d.L, n, d.half, d.dout, d.ref,
                  ps[i] == DC_TF32 ? TOLTF32 : d.half ? TOL16 : TOL32);
        printf("  %s\n", what);
        dconv_gpu_free(c);
    }
    spmm_gpu *m = spmm_gpu_create(g, &d.L.d, d.half ? GDT_F16 : GDT_F32, n, &err);
    CHECK(t, m != NULL, "%s: spmm create: %s", s->name, err.msg);
    if (m) {
        spmm_gpu_describe(m, desc, sizeof desc);
        snprintf(what, sizeof what, "%s n=%d %s", s->name, n, desc);
        dev_poison(d.dout, spc_out_elems(&d.L, n), d.half, g->stream);
        const int rc = spmm_gpu_forward(g, m, n, d.din, d.dout, g->stream, &err);
        CHECK(t, rc == 0 && !dev_sync(g->stream), "%s: forward: %s", what, err.msg);
        out_check(t, what, &d.L, n, d.half, d.dout, d.ref, d.half ? TOL16 : TOL32);
        printf("  %s\n", what);
        spmm_gpu_free(m);
    }
    tdata_free(&d);
}

// --- tests --------------------------------------------------------------------------

// A GPU context for a test: 0, or -1 with the test failed.
static int ctx_open(tctx *t, gpu_ctx *g) {
    sc_err err = {{0}};
    if (!gpu_ctx_init(g, &err)) return 0;
    CHECK(t, 0, "gpu_ctx_init: %s", err.msg);
    return -1;
}

// Runs the sparse cases listed in idx (all, with every batch size, when idx
// is NULL; else each with its first batch size) for every value type.
static void sparse_cases(tctx *t, const int *idx, int count) {
    gpu_ctx g;
    if (ctx_open(t, &g)) return;
    int pairs = 0, cnt[6] = {0, 0, 0, 0, 0, 0}, strided1x1 = 0;
    for (int c = 0; c < count; c++) {
        const tcase *tc = &cases[idx ? idx[c] : c];
        strided1x1 |= tc->s.R == 1 && tc->s.S == 1 && tc->s.stride > 1;
        for (int j = 0; j < (idx ? 1 : 3) && tc->ns[j]; j++)
            for (int vt = 0; vt < 3; vt++)
                pairs += sparse_case(t, &tc->s, tc->ns[j], vt, 1000 + 10 * c + j, g.stream,
                                     cnt);
    }
    printf("  fp32 pair-variant runs checked: %d; strided-view runs: %d; short-band runs: %d; "
           "big-block runs: %d (pf %d); occ3 runs: %d; occ4 runs: %d\n", pairs, cnt[0], cnt[1],
           cnt[2], cnt[3], cnt[4], cnt[5]);
    CHECK(t, pairs > 0, "no fp32 pair variant was listed for any case");
    CHECK(t, cnt[0] > 0 || !strided1x1, "no 1x1 strided layer ran as a strided view");
    CHECK(t, cnt[1] > 0, "no short-band (gd) variant was listed for any case");
    CHECK(t, cnt[2] > 0, "no big (512-thread) pair variant was listed for any case");
    CHECK(t, cnt[3] > 0, "no big pf pair variant was listed for any case");
    CHECK(t, cnt[4] > 0, "no occ3 (3 blocks per SM) pair variant was listed for any case");
    CHECK(t, cnt[5] > 0, "no occ4 (4 blocks per SM) pair variant was listed for any case");
    gpu_ctx_free(&g);
}

// Every case, every variant, fp32/fp16/cb4.
static void test_sparse(tctx *t) {
    if (!gpu_here(t)) return;
    sparse_cases(t, NULL, NCASES);
}

// A few small cases (for compute-sanitizer).
static void test_sparse_small(tctx *t) {
    if (!gpu_here(t)) return;
    sparse_cases(t, small_cases, (int)(sizeof small_cases / sizeof *small_cases));
}

// cuDNN and cuSPARSE baselines on the cases up to the first batch-128 one.
static void baselines(tctx *t, int count) {
    gpu_ctx g;
    if (ctx_open(t, &g)) return;
    for (int c = 0; c < count && c < NCASES; c++)
        for (int vt = 0; vt < 2; vt++) baseline_case(t, &cases[c].s, cases[c].ns[0], vt, 5000 + c, &g);
    gpu_ctx_free(&g);
}

// A cuDNN algorithm refused at run time (FFT on a stride-2 NHWC fp16 layer)
// falls back to cuDNN's heuristic choice: the forward succeeds, the layer
// names another algorithm, and the output matches the reference.
static void test_baseline_fallback(tctx *t) {
    if (!gpu_here(t)) return;
    gpu_ctx g;
    sc_err err = {{0}};
    if (ctx_open(t, &g)) return;
    const spc_shape *s = &cases[1].s;  // 3x3 stride 2
    const int n = cases[1].ns[0];
    tdata d;
    tdata_make(&d, s, n, SPC_FP16, 5100, 1);
    dconv_gpu *c = dconv_gpu_create(&g, &d.L.d, d.L.w, DC_FP16_NHWC, n, &err);
    CHECK(t, c != NULL, "%s: dconv create: %s", s->name, err.msg);
    if (c) {
        char desc[160];
        dconv_gpu_set_algo(c, CUDNN_CONVOLUTION_FWD_ALGO_FFT);
        dev_poison(d.dout, spc_out_elems(&d.L, n), d.half, g.stream);
        const int rc = dconv_gpu_forward(&g, c, n, d.din, d.dout, g.stream, &err);
        CHECK(t, rc == 0 && !dev_sync(g.stream), "%s: forward with FFT forced: %s", s->name, err.msg);
        dconv_gpu_describe(c, desc, sizeof desc);
        CHECK(t, strstr(desc, " algo 4 ") == NULL, "%s: still on FFT (%s)", s->name, desc);
        if (rc == 0) out_check(t, "fallback from FFT", &d.L, n, d.half, d.dout, d.ref, TOL16);
        printf("  fallback from FFT: %s\n", desc);
        dconv_gpu_free(c);
    }
    tdata_free(&d);
    gpu_ctx_free(&g);
}

// The baselines on every case.
static void test_baselines(tctx *t) {
    if (!gpu_here(t)) return;
    baselines(t, NCASES);
}

// The baselines on the first case.
static void test_baselines_small(tctx *t) {
    if (!gpu_here(t)) return;
    baselines(t, 1);
}

// --- benchmark ------------------------------------------------------------------------
//
// Every CIFAR VGG-16 and ResNet-18 conv shape (and the classifier) at batch
// 128 and 1, with masks at 90% and 95%: random (every weight kept with the same
// probability) and skewed (row densities log-normal, sigma 0.45: the longest
// row about 3-3.5x the mean on 512-row layers, like the real pruned masks;
// every row padded with explicit zeros to the longest, as export writes it).
// Columns: the sparse kernel tuned in fp32, fp16 and codebook form, the tuned
// fp32 variant with zero skipping and row ordering off ("pad32": what the
// kernel did before),
// cuDNN dense fp32 (TF32 off), TF32, fp16 NCHW and NHWC (also the cuDNN call
// alone), and cuSPARSE fp32. Median of 20 runs after 3 warm-ups, CUDA events,
// random data; each sparse result is checked against the CPU on the first
// two images before it is timed.
//
//   --bench [MASKS [TYPES [BATCHES]]]  MASKS: comma list of r90,r95,s90,s95 (default
//                             all); TYPES: 1 fp32, 2 + fp16, 3 + codebook (default 3);
//                             BATCHES: 128, 1 or 128,1 (default both)
//   --profile L N MASK        layer L of the list, batch N, fp32 tuned, one
//                             forward between cudaProfilerStart/Stop (for ncu)
//   --variants L N MASK       layer L, batch N: every fp32 variant checked and
//                             timed, then the best "tile" and "pair" times

typedef struct {
    const char *net, *name;
    int K, C, H, R, stride, pad, ib, pool, relu, count;
} blayer;

static const blayer blayers[] = {
    {"vgg16", "conv1", 64, 3, 32, 3, 1, 1, 1, 0, 1, 1},
    {"vgg16", "conv2+pool", 64, 64, 32, 3, 1, 1, 1, 1, 1, 1},
    {"vgg16", "conv3", 128, 64, 16, 3, 1, 1, 1, 0, 1, 1},
    {"vgg16", "conv4+pool", 128, 128, 16, 3, 1, 1, 1, 1, 1, 1},
    {"vgg16", "conv5", 256, 128, 8, 3, 1, 1, 1, 0, 1, 1},
    {"vgg16", "conv6", 256, 256, 8, 3, 1, 1, 1, 0, 1, 1},
    {"vgg16", "conv7+pool", 256, 256, 8, 3, 1, 1, 1, 1, 1, 1},
    {"vgg16", "conv8", 512, 256, 4, 3, 1, 1, 1, 0, 1, 1},
    {"vgg16", "conv9", 512, 512, 4, 3, 1, 1, 1, 0, 1, 1},
    {"vgg16", "conv10+pool", 512, 512, 4, 3, 1, 1, 1, 1, 1, 1},
    {"vgg16", "conv11-12", 512, 512, 2, 3, 1, 1, 1, 0, 1, 2},
    {"vgg16", "conv13+pool", 512, 512, 2, 3, 1, 1, 1, 1, 1, 1},
    {"vgg16", "fc", 100, 512, 1, 1, 1, 0, 0, 0, 0, 1},
    {"resnet18", "conv1", 64, 3, 32, 3, 1, 1, 1, 0, 1, 1},
    {"resnet18", "layer1 x4", 64, 64, 32, 3, 1, 1, 1, 0, 1, 4},
    {"resnet18", "layer2.0.conv1 s2", 128, 64, 32, 3, 2, 1, 1, 0, 1, 1},
    {"resnet18", "layer2.0.shortcut", 128, 64, 32, 1, 2, 0, 1, 0, 0, 1},
    {"resnet18", "layer2 x3", 128, 128, 16, 3, 1, 1, 1, 0, 1, 3},
    {"resnet18", "layer3.0.conv1 s2", 256, 128, 16, 3, 2, 1, 1, 0, 1, 1},
    {"resnet18", "layer3.0.shortcut", 256, 128, 16, 1, 2, 0, 1, 0, 0, 1},
    {"resnet18", "layer3 x3", 256, 256, 8, 3, 1, 1, 1, 0, 1, 3},
    {"resnet18", "layer4.0.conv1 s2", 512, 256, 8, 3, 2, 1, 1, 0, 1, 1},
    {"resnet18", "layer4.0.shortcut", 512, 256, 8, 1, 2, 0, 1, 0, 0, 1},
    {"resnet18", "layer4 x3", 512, 512, 4, 3, 1, 1, 1, 0, 1, 3},
    {"resnet18", "fc", 100, 512, 1, 1, 1, 0, 0, 0, 0, 1},
};
#define NBL ((int)(sizeof blayers / sizeof *blayers))

// Columns of a benchmark row.
enum { B_SP32, B_SP16, B_CB4, B_PAD32, B_CU32, B_TF32, B_CU16, B_NHWC, B_NHWC_CONV, B_CUSP,
       B_NCOL };
static const char *bcol[B_NCOL] = {"sp32", "sp16", "cb4", "pad32", "cudnn32", "tf32", "cudnn16",
                                   "nhwc16", "(conv)", "cusp32"};

// Mask configurations of the benchmark: name, sparsity, skew (log-normal sigma).
typedef struct {
    const char *name;
    double sparsity, skew;
} bmask;
static const bmask bmasks[] = {{"r90", 0.90, 0}, {"r95", 0.95, 0}, {"s90", 0.90, 0.45},
                               {"s95", 0.95, 0.45}};
#define NBM 4

// One thing to time: kind 0 sparse, 1 dconv, 2 dconv conv only, 3 spmm.
typedef struct {
    int kind, n;
    const gpu_ctx *g;
    void *obj;
    const void *in;
    void *out;
} brun;

// Runs b once on g's stream.
static int brun_once(const brun *b) {
    sc_err e;
    switch (b->kind) {
    case 0: return spconv_gpu_forward(b->obj, b->n, b->in, b->out, b->g->stream, &e);
    case 1: return dconv_gpu_forward(b->g, b->obj, b->n, b->in, b->out, b->g->stream, &e);
    case 2: return dconv_gpu_forward_conv(b->g, b->obj, b->n, b->g->stream, &e);
    default: return spmm_gpu_forward(b->g, b->obj, b->n, b->in, b->out, b->g->stream, &e);
    }
}

// Ascending order of floats (qsort).
static int bench_cmp(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Median time (ms) of 20 runs after 3 warm-ups; NAN when a run fails.
static float bench_time(const brun *b) {
    cudaStream_t st = b->g->stream;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    float t[20];
    int ok = 1;
    for (int r = -3; r < 20 && ok; r++) {
        cudaEventRecord(e0, st);
        ok = brun_once(b) == 0;
        cudaEventRecord(e1, st);
        ok = ok && cudaEventSynchronize(e1) == cudaSuccess;
        if (ok && r >= 0) cudaEventElapsedTime(&t[r], e0, e1);
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    if (!ok) return NAN;
    qsort(t, 20, sizeof *t, bench_cmp);
    return 0.5f * (t[9] + t[10]);
}

// The shape of benchmark layer l at a density and skew.
static spc_shape bench_shape(const blayer *l, double density, double skew) {
    const int fc = l->H == 1;
    spc_shape s = {l->name, l->K, l->C, l->H, l->H, l->R, l->R, l->stride, l->pad, l->ib,
                   fc ? 0 : 1, l->pool ? 2 : 0, l->pool ? 2 : 0, 0, l->relu, 1, density, 0,
                   skew};
    return s;
}

// Dense cuDNN columns of layer l at batch n.
static void bench_dense(const gpu_ctx *g, const blayer *l, int n, float *row) {
    const spc_shape s = bench_shape(l, 1.0, 0);
    static const dconv_prec ps[] = {DC_FP32, DC_TF32, DC_FP16, DC_FP16_NHWC};
    static const int cols[] = {B_CU32, B_TF32, B_CU16, B_NHWC};
    for (int i = 0; i < 4; i++) {
        tdata d;
        sc_err err = {{0}};
        char desc[160];
        tdata_make(&d, &s, n, ps[i] >= DC_FP16 ? SPC_FP16 : SPC_FP32, 77, 0);
        dconv_gpu *c = dconv_gpu_create(g, &d.L.d, d.L.w, ps[i], n, &err);
        row[cols[i]] = NAN;
        if (!c) printf("  %s: %s\n", l->name, err.msg);
        if (c) {
            brun b = {1, n, g, c, d.din, d.dout};
            row[cols[i]] = bench_time(&b);
            if (ps[i] == DC_FP16_NHWC) b.kind = 2, row[B_NHWC_CONV] = bench_time(&b);
            dconv_gpu_describe(c, desc, sizeof desc);
            printf("    %s\n", desc);
            dconv_gpu_free(c);
        }
        tdata_free(&d);
    }
}

// Longest row over the mean row (non-zeros) of a generated layer.
static double bench_skew_ratio(const spc_layer *L) {
    long kept = 0;
    int longest = 0;
    for (int k = 0; k < L->d.K; k++) {
        int c = 0;
        for (int j = 0; j < L->d.nnz_row; j++) c += L->val[(size_t)k * L->d.nnz_row + j] != 0.0f;
        kept += c, longest = c > longest ? c : longest;
    }
    return kept ? (double)longest * L->d.K / kept : 0.0;
}

// Tunes sg for n images (when tune is set), checks it on the first images
// against d's CPU output and times it; NAN when something failed.
static float bench_one(const gpu_ctx *g, tdata *d, spconv_gpu *sg, int n, void *din, void *dout,
                       const char *name, int tune) {
    sc_err err = {{0}};
    char desc[200];
    float ms = 0;
    if (tune && spconv_gpu_tune(sg, n, din, dout, g->stream, &ms, &err)) {
        printf("  %s: %s\n", name, err.msg);
        return NAN;
    }
    tctx t = {.suite = "bench", .test = "check"};
    brun b = {0, n, g, sg, din, dout};
    dev_poison(dout, spc_out_elems(&d->L, n), d->half, g->stream);
    const int ok = brun_once(&b) == 0 && !dev_sync(g->stream) &&
                   out_check(&t, name, &d->L, d->n, d->half, dout, d->ref, d->half ? TOL16 : TOL32);
    const float r = ok ? bench_time(&b) : NAN;
    spconv_gpu_describe(sg, desc, sizeof desc);
    printf("    %s%s\n", desc, ok ? "" : "  WRONG RESULT");
    return r;
}

// Sparse columns (tuned, checked), padded fp32 and cuSPARSE of layer l at
// batch n for mask m; vts value types.
static void bench_sparse(const gpu_ctx *g, const blayer *l, int n, const bmask *m, int vts,
                         float *row, double *macs, double *ratio) {
    const spc_shape s = bench_shape(l, 1.0 - m->sparsity, m->skew);
    row[B_SP16] = row[B_CB4] = row[B_PAD32] = row[B_CUSP] = NAN;
    for (int vt = 0; vt < vts; vt++) {
        tdata d;
        sc_err err = {{0}};
        tdata_make(&d, &s, n > 2 ? 2 : n, vt, 99, 1);  // reference on two images
        float *x = spc_input(&d.L.d, n, d.half, 98);
        memcpy(x, d.x, spc_in_elems(&d.L.d, d.n) * sizeof *x);
        void *din = dev_put(x, spc_in_elems(&d.L.d, n), d.half), *dout = NULL;
        cudaMalloc(&dout, spc_out_elems(&d.L, n) * 4 + 16);
        spconv_gpu *sg = spconv_gpu_create(&d.L.d, (spconv_gpu_vtype)vt, d.L.codes, d.L.cb,
                                           d.L.scale, &err);
        row[vt] = NAN;
        if (!sg) printf("  %s %s: %s\n", l->name, vt_name[vt], err.msg);
        if (sg) row[vt] = bench_one(g, &d, sg, n, din, dout, l->name, 1);
        if (sg && vt == 0) {
            *macs = spconv_gpu_macs(sg, n), *ratio = bench_skew_ratio(&d.L);
            if (spconv_gpu_compact(sg, 0, &err) == 0)  // the same variant, rows padded
                row[B_PAD32] = bench_one(g, &d, sg, n, din, dout, l->name, 0);
            spmm_gpu *mm = spmm_gpu_create(g, &d.L.d, GDT_F32, n, &err);
            brun b = {3, n, g, mm, din, dout};
            row[B_CUSP] = mm ? bench_time(&b) : NAN;
            if (!mm) printf("  %s cusparse: %s\n", l->name, err.msg);
            spmm_gpu_free(mm);
        }
        spconv_gpu_free(sg);
        cudaFree(din), cudaFree(dout), free(x);
        tdata_free(&d);
    }
}

// Prints one benchmark row.
static void bench_row(const blayer *l, int n, const bmask *m, const float *r, double macs,
                      double ratio) {
    printf("%-8s %-18s %3d %s", l->net, l->name, n, m->name);
    for (int c = 0; c < B_NCOL; c++) printf(" %8.4f", r[c]);
    printf(" | x32 %5.2f x16 %5.2f xsp %5.2f xpad %5.2f | %5.2f TF/s | max/mean %.2f\n",
           r[B_CU32] / r[B_SP32], r[B_CU16] / r[B_SP16], r[B_CUSP] / r[B_SP32],
           r[B_PAD32] / r[B_SP32], 2 * macs / (r[B_SP32] * 1e9), ratio);
    fflush(stdout);
}

// Per network, batch and mask: column sums weighted by layer counts, the
// per-layer best of sparse and dense, and layers faster than cuSPARSE.
static void bench_totals(float (*res)[2][NBM][B_NCOL], const int *use) {
    static const char *nets[] = {"vgg16", "resnet18"};
    static const int ns[] = {128, 1};
    printf("\n%-8s %4s %4s", "TOTAL", "n", "mask");
    for (int c = 0; c < B_NCOL; c++) printf(" %8s", bcol[c]);
    printf(" | best32  best16 | fp32 x  fp16 x  cb4 vs16 pad/sp | >cusp\n");
    for (int ni = 0; ni < 2; ni++)
        for (int net = 0; net < 2; net++)
            for (int mi = 0; mi < NBM; mi++) {
                if (!use[mi]) continue;
                double sum[B_NCOL] = {0}, best32 = 0, best16 = 0;
                int faster = 0, layers = 0;
                for (int l = 0; l < NBL; l++) {
                    if (strcmp(blayers[l].net, nets[net])) continue;
                    const float *r = res[l][ni][mi];
                    for (int c = 0; c < B_NCOL; c++) sum[c] += blayers[l].count * r[c];
                    best32 += blayers[l].count * fminf(r[B_SP32], r[B_CU32]);
                    best16 += blayers[l].count * fminf(fminf(r[B_SP16], r[B_CB4]), r[B_CU16]);
                    if (blayers[l].H > 1) layers++, faster += r[B_SP32] < r[B_CUSP];
                }
                printf("%-8s %4d %4s", nets[net], ns[ni], bmasks[mi].name);
                for (int c = 0; c < B_NCOL; c++) printf(" %8.4f", sum[c]);
                printf(" | %7.4f %7.4f | %6.2f %6.2f %6.2f %6.2f | %d/%d\n", best32, best16,
                       sum[B_CU32] / sum[B_SP32], sum[B_CU16] / sum[B_SP16],
                       sum[B_CU16] / sum[B_CB4], sum[B_PAD32] / sum[B_SP32], faster, layers);
            }
    printf("(ms; fp32 x = cudnn32 / sp32; fp16 x = cudnn16 / sp16; cb4 vs16 = cudnn16 / cb4;\n"
           " pad/sp = pad32 / sp32; best = per layer min of sparse and cuDNN at that precision;\n"
           " >cusp = conv layers where sp32 beats cuSPARSE fp32)\n");
}

// Mask configurations named in list (comma separated; NULL: all) into use.
static void bench_masks(const char *list, int *use) {
    for (int i = 0; i < NBM; i++) use[i] = !list || strstr(list, bmasks[i].name) != NULL;
}

// Runs the benchmark for the masks and batches (128 and/or 1) named; 0 when it ran.
static int spconv_bench(const char *masks, int vts, const char *batches) {
    gpu_ctx g;
    sc_err err = {{0}};
    if (!exec_gpu_available(&err) || gpu_ctx_init(&g, &err)) {
        printf("bench: no GPU: %s\n", err.msg);
        return 1;
    }
    static float res[NBL][2][NBM][B_NCOL];
    int use[NBM];
    bench_masks(masks, use);
    const int ns[2] = {128, 1};
    printf("%-8s %-18s %3s %4s", "net", "layer", "n", "mask");
    for (int c = 0; c < B_NCOL; c++) printf(" %8s", bcol[c]);
    printf("   (ms, median of 20)\n");
    for (int ni = 0; ni < 2; ni++)
        for (int l = 0; l < NBL; l++) {
            float dense[B_NCOL];
            for (int mi = 0; mi < NBM; mi++)
                for (int c = 0; c < B_NCOL; c++) res[l][ni][mi][c] = NAN;
            if (batches && !strstr(batches, ni ? "1" : "128")) continue;
            if (batches && ni && !strcmp(batches, "128")) continue;
            bench_dense(&g, &blayers[l], ns[ni], dense);
            for (int mi = 0; mi < NBM; mi++) {
                float *r = res[l][ni][mi];
                double macs = 0, ratio = 0;
                for (int c = 0; c < B_NCOL; c++) r[c] = NAN;
                if (!use[mi]) continue;
                memcpy(r, dense, sizeof dense);
                bench_sparse(&g, &blayers[l], ns[ni], &bmasks[mi], vts, r, &macs, &ratio);
                bench_row(&blayers[l], ns[ni], &bmasks[mi], r, macs, ratio);
            }
        }
    bench_totals(res, use);
    gpu_ctx_free(&g);
    return 0;
}

// Checks a one-layer run's arguments (--profile, --variants), picks the
// first mask named in `mask` into *mi and starts a GPU context; 0 when it
// can run, else prints why under `tag`.
static int one_layer_setup(const char *tag, int li, int n, const char *mask, gpu_ctx *g, int *mi,
                           sc_err *err) {
    int use[NBM];
    bench_masks(mask, use);
    for (*mi = 0; *mi < NBM - 1 && !use[*mi];) (*mi)++;
    if (li < 0 || li >= NBL || n < 1 || !exec_gpu_available(err) || gpu_ctx_init(g, err)) {
        printf("%s: bad layer/batch or no GPU: %s\n", tag, err->msg);
        return 1;
    }
    return 0;
}

// One layer tuned in fp32, then one forward between cudaProfilerStart and
// Stop (run under ncu --profile-from-start off); 0 when it ran.
static int spconv_profile(int li, int n, const char *mask) {
    gpu_ctx g;
    sc_err err = {{0}};
    int mi;
    if (one_layer_setup("profile", li, n, mask, &g, &mi, &err)) return 1;
    const blayer *l = &blayers[li];
    const spc_shape s = bench_shape(l, 1.0 - bmasks[mi].sparsity, bmasks[mi].skew);
    tdata d;
    tdata_make(&d, &s, n, SPC_FP32, 99, 0);
    spconv_gpu *sg = spconv_gpu_create(&d.L.d, SPG_FP32, NULL, NULL, NULL, &err);
    float ms = 0;
    int rc = !sg || spconv_gpu_tune(sg, n, d.din, d.dout, g.stream, &ms, &err);
    if (!rc) {
        char desc[200];
        spconv_gpu_describe(sg, desc, sizeof desc);
        printf("profile %s %s n=%d %s: %s, %.2f TFLOP/s\n", l->net, l->name, n, bmasks[mi].name,
               desc, 2 * spconv_gpu_macs(sg, n) / (ms * 1e9));
        cudaProfilerStart();
        rc = spconv_gpu_forward(sg, n, d.din, d.dout, g.stream, &err) || dev_sync(g.stream);
        cudaProfilerStop();
    }
    if (rc) printf("profile: %s\n", err.msg);
    spconv_gpu_free(sg);
    tdata_free(&d);
    gpu_ctx_free(&g);
    return rc;
}

// Every fp32 variant of layer li at batch n for a mask, each checked on the
// first images and timed; then the fastest one-column tiled ("tile") and
// several-columns ("pair", 256-thread blocks, two per SM) variant, the
// fastest big (512-thread) pair block, the fastest occ3 / occ4 (3 / 4 blocks
// per SM) pair block, and the fastest ell, short-band (gd) and other variant.
// 0 when it ran.
static int spconv_variants(int li, int n, const char *mask) {
    gpu_ctx g;
    sc_err err = {{0}};
    int mi;
    if (one_layer_setup("variants", li, n, mask, &g, &mi, &err)) return 1;
    const blayer *l = &blayers[li];
    const spc_shape s = bench_shape(l, 1.0 - bmasks[mi].sparsity, bmasks[mi].skew);
    tdata d;
    tdata_make(&d, &s, n > 2 ? 2 : n, SPC_FP32, 99, 1);  // reference on two images
    float *x = spc_input(&d.L.d, n, 0, 98);
    memcpy(x, d.x, spc_in_elems(&d.L.d, d.n) * sizeof *x);
    void *din = dev_put(x, spc_in_elems(&d.L.d, n), 0), *dout = NULL;
    cudaMalloc(&dout, spc_out_elems(&d.L, n) * 4 + 16);
    spconv_gpu *sg = spconv_gpu_create(&d.L.d, SPG_FP32, NULL, NULL, NULL, &err);
    // tile, pair, ell, gd, not gd, big, occ3, occ4
    float best[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    int rc = !sg || !din || !dout, bad = 0;
    const int nv = sg ? spconv_gpu_nvariants(sg, n) : 0;
    printf("variants %s %s n=%d %s: %d\n", l->net, l->name, n, bmasks[mi].name, nv);
    for (int v = 1; v < nv && !rc; v++) {
        char desc[200];
        if (spconv_gpu_use(sg, n, v, &err)) {
            rc = 1;
            break;
        }
        spconv_gpu_describe(sg, desc, sizeof desc);
        const float ms = bench_one(&g, &d, sg, n, din, dout, l->name, 0);
        printf("      v%-3d %.4f ms\n", v, ms);
        bad += ms != ms;  // failed or wrong
        int kind = !strncmp(desc, "tile ", 5) ? 0 : !strncmp(desc, "pair ", 5) ? 1 : 2;
        if (kind == 1 && strstr(desc, " big")) kind = 5;
        if (kind == 1 && strstr(desc, " occ")) kind = strstr(desc, " occ3") ? 6 : 7;
        const int band = strstr(desc, " gd") ? 3 : 4;
        if (ms == ms && !(ms >= best[kind])) best[kind] = ms;
        if (ms == ms && !(ms >= best[band])) best[band] = ms;
    }
    if (rc || err.msg[0]) printf("variants: %s\n", err.msg);
    printf("variants %s %s n=%d %s: best tile %.4f ms, best pair %.4f ms, tile/pair %.2f, "
           "%d failed\n", l->net, l->name, n, bmasks[mi].name, best[0], best[1],
           best[0] / best[1], bad);
    printf("variants %s %s n=%d %s: best ell/linear %.4f ms, best gd %.4f ms, best other %.4f ms, "
           "other/gd %.2f\n", l->net, l->name, n, bmasks[mi].name, best[2], best[3], best[4],
           best[4] / best[3]);
    const float rest = fminf(fminf(best[0], best[1]), best[2]);  // NAN-safe: fminf skips NAN
    printf("variants %s %s n=%d %s: best big %.4f ms, best pair %.4f ms, pair/big %.2f, "
           "best non-big %.4f ms, non-big/big %.2f\n", l->net, l->name, n, bmasks[mi].name,
           best[5], best[1], best[1] / best[5], rest, rest / best[5]);
    const float occ = fminf(best[6], best[7]), other = fminf(rest, best[5]);
    printf("variants %s %s n=%d %s: best occ3 %.4f ms, best occ4 %.4f ms, best non-occ %.4f ms, "
           "non-occ/occ %.2f\n", l->net, l->name, n, bmasks[mi].name, best[6], best[7], other,
           other / occ);
    spconv_gpu_free(sg);
    cudaFree(din), cudaFree(dout), free(x);
    tdata_free(&d);
    gpu_ctx_free(&g);
    return rc || bad;
}

// Runs the tests (or the benchmark); exit status 1 when one failed.
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "--bench"))
        return spconv_bench(argc > 2 ? argv[2] : NULL, argc > 3 ? atoi(argv[3]) : 3,
                            argc > 4 ? argv[4] : NULL);
    if (!strcmp(mode, "--profile") && argc > 4)
        return spconv_profile(atoi(argv[2]), atoi(argv[3]), argv[4]);
    if (!strcmp(mode, "--variants") && argc > 4)
        return spconv_variants(atoi(argv[2]), atoi(argv[3]), argv[4]);
    tctx t = {.suite = "gpu_test_spconv"};
    if (!strcmp(mode, "--small") || !strcmp(mode, "--sanitize")) {
        RUN(&t, test_sparse_small);
        if (!strcmp(mode, "--small")) RUN(&t, test_baselines_small);
        if (!strcmp(mode, "--small")) RUN(&t, test_baseline_fallback);
    } else {
        RUN(&t, test_sparse);
        RUN(&t, test_baselines);
        RUN(&t, test_baseline_fallback);
    }
    return check_finish(&t);
}
