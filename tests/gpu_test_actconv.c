// The activation-sparse convolution on the GPU (kernels/actconv_gpu.h)
// against the CPU reference (kernels/actconv_cpu.c) on the cases of
// tests/actconv_cases.h (odd C/K/H/W, strides 1 and 2, pads 0-2, 1x1, 3x3
// and 5x5, all-zero and all-non-zero inputs, 0/50/95% weight sparsity, pools
// fused and not, a linear layer), in fp32 and fp16, for 1 and 5 images of a
// layer made for 7. Outputs are poisoned (all bits set) before each run; the
// border must keep the poison and the input must be unchanged. Then a replay
// from a captured CUDA graph, a smaller batch after a larger one (stale
// lists must not leak), and a batch over the allocation (refused).
// Inputs are rounded to fp16 for the fp16 cases and the reference runs on
// the rounded values.
//
// Error: max |gpu - cpu| / max |cpu| over the output interior. Tolerances:
// fp32 1e-4 (fp32 sums in another order), fp16 1e-2 (fp16 output storage).
//
//   gpu_test_actconv           the tests (skipped without a GPU)
//   gpu_test_actconv --time    times CIFAR ResNet-18 / VGG-16 shaped layers at
//                              batch 128 and 1 (90% sparse weights, inputs 50,
//                              70 and 90% zeros): actconv fp32 / fp16, the direct
//                              sparse kernel fp16 (tuned) and cuDNN fp16 (NCHW,
//                              NHWC with transposes), milliseconds, median of 20
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/actconv_gpu.h"
#include "kernels/dconv_gpu.h"
#include "kernels/spconv_gpu.h"
#include "tests/actconv_cases.h"
#include "tests/check.h"
#include "tests/gpu_testutil.h"
#include "tests/spconv_cases.h"
#include "tests/testutil.h"

#define TOL32 1e-4
#define TOL16 1e-2
#define MAX_N 7

// --- device helpers ---------------------------------------------------------------

// Device copy of n activations (fp32, or fp16 bits when half); NULL on failure.
static void *put_act(const float *h, size_t n, int half) {
    void *d = NULL;
    sc_err e;
    if (cudaMalloc(&d, n * (half ? 2 : 4) + 16) != cudaSuccess) return NULL;
    if (!half) return gpu_upload(d, h, n * 4, &e) ? (cudaFree(d), NULL) : d;
    uint16_t *b = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) b[i] = spc_half_bits(h[i]);
    if (!b || gpu_upload(d, b, n * 2, &e)) cudaFree(d), d = NULL;
    free(b);
    return d;
}

// Host floats of n device activations (NaN where every bit is set); 0 on success.
static int get_act(const void *d, size_t n, int half, float *h) {
    uint32_t *raw = malloc(n * 4 + 4);
    int rc = !raw || cudaMemcpy(raw, d, n * (half ? 2 : 4), cudaMemcpyDeviceToHost) != cudaSuccess;
    for (size_t i = 0; !rc && i < n; i++) {
        if (half) h[i] = ((uint16_t *)raw)[i] == 0xFFFF ? NAN : spc_half_float(((uint16_t *)raw)[i]);
        else memcpy(&h[i], &raw[i], 4);
    }
    free(raw);
    return rc;
}

// Sets every bit of n activations (NaN) and waits.
static int poison(void *d, size_t n, int half) {
    return cudaMemset(d, 0xFF, n * (half ? 2 : 4)) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
}

// --- one case -------------------------------------------------------------------------

// A case's layer, input (host, rounded for fp16), CPU output and device buffers.
typedef struct {
    spc_layer L;
    int n, half;
    size_t nin, nout;
    float *x, *ref, *got;
    void *din, *dout;
} tdata;

// Builds the layer (from seed), a MAX_N-image input with the case's zeros
// (from xseed), the CPU output of the first n images and the device buffers.
static int tdata_make(tdata *d, const acv_case *c, int n, int half, uint64_t seed, uint64_t xseed) {
    memset(d, 0, sizeof *d);
    spc_layer_make(&d->L, &c->s, half ? SPC_FP16 : SPC_FP32, seed);
    d->n = n, d->half = half;
    d->nin = spc_in_elems(&d->L.d, MAX_N), d->nout = spc_out_elems(&d->L, MAX_N);
    d->x = spc_input(&d->L.d, MAX_N, half, xseed);
    acv_sparsify(&d->L.d, MAX_N, d->x, c->zeros, xseed + 1);
    d->ref = alloc_poisoned(d->nout), d->got = alloc_poisoned(d->nout);
    actconv_nz z;
    sc_err err = {{0}};
    if (actconv_nz_alloc(&z, &d->L.d, n, &err)) return -1;
    actconv_nz_build(&d->L.d, n, d->x, &z);
    actconv_forward_cpu(&d->L.d, n, &z, d->ref);
    actconv_nz_free(&z);
    d->din = put_act(d->x, d->nin, half);
    if (cudaMalloc(&d->dout, d->nout * 4 + 16) != cudaSuccess) d->dout = NULL;
    return d->din && d->dout ? 0 : -1;
}

// Frees a case's data.
static void tdata_free(tdata *d) {
    cudaFree(d->din), cudaFree(d->dout);
    free(d->x), free(d->ref), free(d->got);
    spc_layer_free(&d->L);
}

// Checks the device output of the first n images against the reference
// (interior within tol, border still NaN) and the input against the host copy.
static int out_check(tctx *t, const tdata *d, const char *what) {
    const size_t no = spc_out_elems(&d->L, d->n);
    float *xin = malloc(d->nin * sizeof *xin);
    int rc = get_act(d->dout, no, d->half, d->got) | get_act(d->din, d->nin, d->half, xin);
    size_t border = 0, changed = 0;
    const double e = rc ? INFINITY : acv_out_err(&d->L, d->n, d->got, d->ref, &border);
    for (size_t i = 0; !rc && i < d->nin; i++) changed += memcmp(&xin[i], &d->x[i], 4) != 0;
    const double tol = d->half ? TOL16 : TOL32;
    CHECK(t, !rc && e <= tol && border == 0 && changed == 0,
          "%s: rel err %.3g (tol %g), %zu border elements written, %zu inputs changed", what, e, tol,
          border, changed);
    free(xin);
    return e <= tol && border == 0 && changed == 0;
}

// Poisons the output, runs the layer for d->n images, checks it.
static int run_check(tctx *t, tdata *d, const actconv_gpu *a, cudaStream_t st, const char *what) {
    sc_err err = {{0}};
    if (poison(d->dout, d->nout, d->half)) {
        CHECK(t, 0, "%s: poison failed", what);
        return 0;
    }
    const int rc = actconv_gpu_forward(a, d->n, d->din, d->dout, st, &err);
    const cudaError_t ce = cudaStreamSynchronize(st);
    CHECK(t, rc == 0 && ce == cudaSuccess, "%s: forward: %s %s", what, err.msg, cudaGetErrorString(ce));
    return rc == 0 && ce == cudaSuccess && out_check(t, d, what);
}

// One case in one precision for n images.
static void one_case(tctx *t, const gpu_ctx *g, const acv_case *c, int n, int half, uint64_t seed) {
    tdata d;
    char what[256], desc[200] = "";
    sc_err err = {{0}};
    actconv_gpu *a = NULL;
    if (tdata_make(&d, c, n, half, seed, seed + 1)) {
        CHECK(t, 0, "%s: set-up failed", c->s.name);
        goto out;
    }
    a = actconv_gpu_create(g, &d.L.d, half ? GDT_F16 : GDT_F32, MAX_N, &err);
    CHECK(t, a != NULL, "%s: create: %s", c->s.name, err.msg);
    if (!a) goto out;
    actconv_gpu_describe(a, desc, sizeof desc);
    snprintf(what, sizeof what, "%s n=%d %s (%s)", c->s.name, n, half ? "fp16" : "fp32", desc);
    run_check(t, &d, a, g->stream, what);
out:
    actconv_gpu_free(a);
    tdata_free(&d);
}

// --- tests ------------------------------------------------------------------------------

// Every case in fp32 and fp16 for 1 and 5 images.
static void test_cases(tctx *t) {
    if (!gpu_here(t)) return;
    gpu_ctx g;
    sc_err err = {{0}};
    if (gpu_ctx_init(&g, &err)) {
        CHECK(t, 0, "gpu_ctx_init: %s", err.msg);
        return;
    }
    for (int c = 0; c < ACV_NCASES; c++)
        for (int h = 0; h < 2; h++) {
            one_case(t, &g, &acv_cases[c], 1, h, 300 + 10 * (uint64_t)c + h);
            one_case(t, &g, &acv_cases[c], 5, h, 305 + 10 * (uint64_t)c + h);
        }
    gpu_ctx_free(&g);
}

// One forward of a case (graph_capture's callback).
typedef struct {
    tdata *d;
    const actconv_gpu *a;
    cudaStream_t st;
} act_fwd;

// Queues the forward in arg.
static int act_fwd_run(void *arg, sc_err *err) {
    act_fwd *f = arg;
    return actconv_gpu_forward(f->a, f->d->n, f->d->din, f->d->dout, f->st, err);
}

// Captures a forward in a CUDA graph and checks its replay.
static void graph_check(tctx *t, tdata *d, const actconv_gpu *a, cudaStream_t st) {
    sc_err err = {{0}};
    cudaGraphExec_t exec = NULL;
    act_fwd f = {d, a, st};
    int ok = graph_capture(st, act_fwd_run, &f, &exec, &err) == 0;
    CHECK(t, ok, "graph capture failed: %s", err.msg);
    if (ok && !poison(d->dout, d->nout, d->half)) {
        ok = cudaGraphLaunch(exec, st) == cudaSuccess && cudaStreamSynchronize(st) == cudaSuccess;
        CHECK(t, ok, "graph launch failed");
        if (ok) out_check(t, d, "graph replay");
    }
    if (exec) cudaGraphExecDestroy(exec);
}

// A batch of 7, then a batch of 2 of other images through the same layer
// (the lists of the 7 stay in the buffers and must not leak into the 2),
// its replay from a CUDA graph, and a batch over the allocation refused.
static void test_reuse(tctx *t) {
    if (!gpu_here(t)) return;
    genv e;
    if (!genv_open(t, &e, 5)) return;
    const acv_case *c = &acv_cases[6];  // pool 2/2 odd
    for (int h = 0; h < 2; h++) {
        tdata big, small;
        const int ok = !tdata_make(&big, c, MAX_N, h, 77, 1000) & !tdata_make(&small, c, 2, h, 77, 2000);
        actconv_gpu *a = ok ? actconv_gpu_create(&e.g, &big.L.d, h ? GDT_F16 : GDT_F32, MAX_N, &e.err) : NULL;
        CHECK(t, a != NULL, "set-up or create failed: %s", e.err.msg);
        if (a && run_check(t, &big, a, e.g.stream, "batch 7") &&
            run_check(t, &small, a, e.g.stream, "batch 2 after batch 7"))
            graph_check(t, &small, a, e.g.stream);
        CHECK(t, !a || actconv_gpu_forward(a, MAX_N + 1, big.din, big.dout, e.g.stream, &e.err) != 0,
              "batch %d over the allocation accepted", MAX_N + 1);
        actconv_gpu_free(a);
        tdata_free(&big), tdata_free(&small);
    }
    genv_close(&e);
}

// Bad layers and types are refused at create.
static void test_refused(tctx *t) {
    if (!gpu_here(t)) return;
    genv e;
    if (!genv_open(t, &e, 6)) return;
    spc_layer L;
    spc_layer_make(&L, &acv_cases[0].s, SPC_FP32, 9);
    spconv_desc d = L.d;
    d.in_border = 0;  // below the padding
    actconv_gpu *a = actconv_gpu_create(&e.g, &d, GDT_F32, 4, &e.err);
    CHECK(t, a == NULL && strstr(e.err.msg, "border"), "border < pad accepted: %s", e.err.msg);
    actconv_gpu_free(a);
    a = actconv_gpu_create(&e.g, &L.d, GDT_BF16, 4, &e.err);
    CHECK(t, a == NULL, "bf16 accepted");
    actconv_gpu_free(a);
    spc_layer_free(&L);
    genv_close(&e);
}

// --- timing (--time) -------------------------------------------------------------------

// One timed call: which implementation, its state and buffers.
typedef struct {
    int kind;  // 0 actconv, 1 cuDNN
    const gpu_ctx *g;
    void *st;
    int n;
    const void *in;
    void *out;
} trun;

// Queues one forward of the implementation in arg.
static int trun_fn(void *arg, sc_err *err) {
    trun *r = arg;
    if (r->kind == 0) return actconv_gpu_forward(r->st, r->n, r->in, r->out, r->g->stream, err);
    return dconv_gpu_forward(r->g, r->st, r->n, r->in, r->out, r->g->stream, err);
}

// Median ms of 20 forwards of r (NAN when it fails).
static double trun_time(trun *r) {
    double ms = NAN;
    sc_err err = {{0}};
    if (!r->st || gpu_time_median(r->g, trun_fn, r, 3, 20, &ms, &err)) return NAN;
    return ms;
}

// Times one layer shape at batch n with a fraction zeros of its input zero:
// actconv fp32 and fp16, the tuned direct sparse kernel fp16, cuDNN fp16
// NCHW and NHWC. Prints one line; 0 on success.
static int time_layer(const gpu_ctx *g, const spc_shape *s, int n, double zeros) {
    spc_layer L;
    spc_layer_make(&L, s, SPC_FP16, 31);
    float *x = spc_input(&L.d, n, 1, 32);
    acv_sparsify(&L.d, n, x, zeros, 33);
    const size_t nin = spc_in_elems(&L.d, n), nout = spc_out_elems(&L, n);
    void *x32 = put_act(x, nin, 0), *x16 = put_act(x, nin, 1), *out = NULL;
    sc_err err = {{0}};
    double ms[5] = {NAN, NAN, NAN, NAN, NAN};
    int rc = !x32 || !x16 || cudaMalloc(&out, nout * 4 + 16) != cudaSuccess;
    for (int h = 0; h < 2 && !rc; h++) {  // actconv fp32, fp16
        trun r = {0, g, actconv_gpu_create(g, &L.d, h ? GDT_F16 : GDT_F32, n, &err), n, h ? x16 : x32, out};
        ms[h] = trun_time(&r);
        actconv_gpu_free(r.st);
    }
    spconv_gpu *sp = rc ? NULL : spconv_gpu_create(&L.d, SPG_FP16, NULL, NULL, NULL, &err);
    float sms = NAN;
    if (sp && !spconv_gpu_tune(sp, n, x16, out, g->stream, &sms, &err)) ms[2] = sms;
    spconv_gpu_free(sp);
    for (int k = 0; k < 2 && !rc; k++) {  // cuDNN fp16 NCHW, NHWC
        trun r = {1, g, dconv_gpu_create(g, &L.d, L.w, k ? DC_FP16_NHWC : DC_FP16, n, &err), n, x16, out};
        ms[3 + k] = trun_time(&r);
        dconv_gpu_free(r.st);
    }
    printf("%-8s %3dx%3d@%2dx%-2d %-4s n=%-3d %3.0f%% %9.4f %9.4f %9.4f %9.4f %9.4f  %6.2fx\n", s->name, s->K,
           s->C, s->H, s->W, s->pk ? "pool" : "", n, 100.0 * zeros, ms[0], ms[1], ms[2], ms[3], ms[4],
           fmin(ms[3], ms[4]) / ms[1]);
    cudaFree(x32), cudaFree(x16), cudaFree(out), free(x);
    spc_layer_free(&L);
    return rc;
}

// The CIFAR ResNet-18 and VGG-16 3x3 shapes (90% sparse weights) at batch
// 128 and 1 with inputs 50, 70 and 90% zero.
static int time_all(void) {
    static const spc_shape shapes[] = {
        {"r18.l1", 64, 64, 32, 32, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0},
        {"r18.l2", 128, 128, 16, 16, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0},
        {"r18.l3", 256, 256, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0},
        {"r18.l4", 512, 512, 4, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0},
        {"vgg.c2", 64, 64, 32, 32, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 0, 0},
        {"vgg.c4", 128, 128, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 0, 0},
        {"vgg.c7", 256, 256, 8, 8, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 0, 0},
        {"vgg.c10", 512, 512, 4, 4, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.1, 0, 0},
    };
    gpu_ctx g;
    sc_err err = {{0}};
    if (gpu_ctx_init(&g, &err)) {
        printf("time: no GPU: %s\n", err.msg);
        return 1;
    }
    printf("%-8s %-13s %-4s %-5s %4s %9s %9s %9s %9s %9s  %s\n", "layer", "KxC@HxW", "", "batch", "in0",
           "act32", "act16", "sparse16", "cudnn16", "cudnn16h", "cuDNN16/act16");
    const int ns[2] = {128, 1};
    const double zs[3] = {0.5, 0.7, 0.9};
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int b = 0; b < 2; b++)
            for (int z = 0; z < 3; z++) rc |= time_layer(&g, &shapes[i], ns[b], zs[z]);
    gpu_ctx_free(&g);
    return rc;
}

// Runs the tests (or the timing); exit status 1 when one failed.
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--time")) return time_all();
    tctx t = {.suite = "gpu_test_actconv"};
    RUN(&t, test_cases);
    RUN(&t, test_reuse);
    RUN(&t, test_refused);
    return check_finish(&t);
}
