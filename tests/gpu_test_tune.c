// The sparse conv tuner checks before it times (kernels/spconv_gpu.h,
// spconv_gpu_tune). This binary links a test build of kernels/spconv_plan.cu
// (-DSC_TEST_PLANT_WRONG, see the Makefile) whose variant lists end with a
// wrong copy of every variant (empty rows: faster than the original) and one
// that asks for more shared memory than any GPU has (cannot be prepared).
// The tuner must skip all of them without failing, and the layer must still
// get a correct sparse kernel as fast as the fastest correct variant the
// test measures itself. Also: the busy timer (gpu_time_median_busy) leaves
// the host's queuing time out and the plain one counts it. Skipped without a GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common_gpu.h"
#include "kernels/spconv_gpu.h"
#include "runtime/progress.h"
#include "tests/check.h"
#include "tests/spconv_cases.h"
#include "tests/testutil.h"

// A layer on the device with its input, a CPU reference and an output buffer.
typedef struct {
    spc_layer L;
    int n, half;
    float *ref;
    void *din, *dout;
    spconv_gpu *g;
} tune_case;

// Builds layer, input (fp16 bits when half), CPU reference and the GPU layer.
static int tune_case_make(tune_case *c, const spc_shape *s, int n, int vt, sc_err *err) {
    memset(c, 0, sizeof *c);
    spc_layer_make(&c->L, s, vt, 77);
    c->n = n, c->half = vt != SPC_FP32;
    const size_t ni = spc_in_elems(&c->L.d, n), no = spc_out_elems(&c->L, n);
    float *x = spc_input(&c->L.d, n, c->half, 78);
    c->ref = calloc(no, sizeof *c->ref);
    spconv_forward_cpu(&c->L.d, n, x, c->ref);
    if (c->half) {  // the fp16 bits in place, in the first half of x
        uint16_t *h = (uint16_t *)x;
        for (size_t i = 0; i < ni; i++) h[i] = spc_half_bits(x[i]);
    }
    const size_t es = c->half ? 2 : 4;
    int rc = cudaMalloc(&c->din, ni * es) != cudaSuccess || cudaMalloc(&c->dout, no * es) ||
             gpu_upload(c->din, x, ni * es, err) != 0;
    free(x);
    if (rc) return sc_fail(err, "device buffers: %s", cudaGetErrorString(cudaGetLastError()));
    c->g = spconv_gpu_create(&c->L.d, (spconv_gpu_vtype)vt, c->L.codes, c->L.cb, c->L.scale, err);
    return c->g ? 0 : -1;
}

// Frees what tune_case_make made.
static void tune_case_free(tune_case *c) {
    spconv_gpu_free(c->g);
    cudaFree(c->din), cudaFree(c->dout);
    free(c->ref);
    spc_layer_free(&c->L);
}

// Runs the chosen variant on a zeroed output and returns max |gpu - cpu| /
// max |cpu| over the output interior (INFINITY when the run failed).
static double tune_case_error(tune_case *c, cudaStream_t st) {
    sc_err err = {{0}};
    const size_t no = spc_out_elems(&c->L, c->n), es = c->half ? 2 : 4;
    cudaMemsetAsync(c->dout, 0, no * es, st);
    if (spconv_gpu_forward(c->g, c->n, c->din, c->dout, st, &err) ||
        cudaStreamSynchronize(st) != cudaSuccess)
        return INFINITY;
    uint8_t *raw = malloc(no * es);
    cudaMemcpy(raw, c->dout, no * es, cudaMemcpyDeviceToHost);
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < no; i++) {
        float v;
        if (c->half) v = spc_half_float(((const uint16_t *)raw)[i]);
        else memcpy(&v, raw + 4 * i, 4);
        num = fmax(num, isnan(v) ? INFINITY : fabs((double)v - c->ref[i]));
        den = fmax(den, fabs(c->ref[i]));
    }
    free(raw);
    return den > 0 ? num / den : num;
}

// qsort order of floats.
static int tune_cmp(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Median time (ms) of 15 runs of the chosen variant (after 3 warm-ups).
static float tune_case_time(tune_case *c, cudaStream_t st) {
    cudaEvent_t e0, e1;
    float t[15];
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    for (int r = -3; r < 15; r++) {
        sc_err err = {{0}};
        cudaEventRecord(e0, st);
        spconv_gpu_forward(c->g, c->n, c->din, c->dout, st, &err);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        if (r >= 0) cudaEventElapsedTime(&t[r], e0, e1);
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    qsort(t, 15, sizeof *t, tune_cmp);
    return t[7];
}

// Every variant of the list in turn: counts the planted ones, and for the
// others records the fastest that agrees with the CPU reference (*best_ms).
static int tune_case_survey(tctx *t, tune_case *c, cudaStream_t st, double tol, float *best_ms,
                            float *planted_ms) {
    const int nv = spconv_gpu_nvariants(c->g, c->n);
    int planted = 0;
    *best_ms = *planted_ms = INFINITY;
    for (int v = 1; v < nv; v++) {
        sc_err err = {{0}};
        char desc[256];
        if (spconv_gpu_use(c->g, c->n, v, &err)) {
            planted += strstr(err.msg, "shared memory") != NULL;  // the unpreparable plant
            continue;
        }
        spconv_gpu_describe(c->g, desc, sizeof desc);
        const int is_planted = strstr(desc, " planted") != NULL;
        planted += is_planted;
        const double e = tune_case_error(c, st);
        const float ms = tune_case_time(c, st);
        CHECK(t, is_planted || e <= tol, "variant %d (%s) off by %.3g", v, desc, e);
        if (is_planted && ms < *planted_ms) *planted_ms = ms;
        if (!is_planted && e <= tol && ms < *best_ms) *best_ms = ms;
    }
    return planted;
}

// One layer: the planted variants are listed, skipped by the tuner, and the
// tuned variant is a correct sparse one about as fast as the best correct one.
static void tune_one(tctx *t, const spc_shape *s, int n, int vt, double tol) {
    cudaStream_t st;
    sc_err err = {{0}};
    tune_case c;
    CHECK(t, cudaStreamCreate(&st) == cudaSuccess, "stream");
    if (tune_case_make(&c, s, n, vt, &err)) {
        CHECK(t, 0, "%s: %s", s->name, err.msg);
        tune_case_free(&c);
        return;
    }
    float best_ms, planted_ms, ms = 0;
    const int planted = tune_case_survey(t, &c, st, tol, &best_ms, &planted_ms);
    CHECK(t, planted >= 2, "%s: %d planted variants listed (a SC_TEST_PLANT_WRONG build?)",
          s->name, planted);
    CHECK(t, spconv_gpu_tune(c.g, n, c.din, c.dout, st, &ms, &err) == 0, "%s: tune: %s", s->name,
          err.msg);
    char desc[256], note[256];
    spconv_gpu_describe(c.g, desc, sizeof desc);
    const int skipped = spconv_gpu_skipped(c.g, note, sizeof note);
    const double e = tune_case_error(&c, st);
    printf("  %s n=%d %s: %d planted (fastest %.4f ms), best correct %.4f ms; tuned %.4f ms: %s; "
           "skipped %d, first: %s\n", s->name, n, vt ? "fp16" : "fp32", planted, planted_ms,
           best_ms, ms, desc, skipped, note);
    CHECK(t, !strstr(desc, " planted"), "%s: the tuner kept a planted variant: %s", s->name, desc);
    CHECK(t, strncmp(desc, "plain", 5) != 0, "%s: no sparse variant kept: %s", s->name, desc);
    CHECK(t, skipped >= planted, "%s: %d skipped, %d planted", s->name, skipped, planted);
    CHECK(t, e <= tol, "%s: tuned output off by %.3g (tol %g)", s->name, e, tol);
    CHECK(t, ms <= 1.3f * best_ms + 0.01f, "%s: tuned %.4f ms, fastest correct %.4f ms", s->name,
          ms, best_ms);
    tune_case_free(&c);
    cudaStreamDestroy(st);
}

// The planted wrong and unpreparable variants are skipped (fp32 and fp16).
static void test_tune_skips_planted(tctx *t) {
    if (!gpu_here(t)) return;
    static const spc_shape conv = {"cifar 16x16", 64, 64, 16, 16, 3, 3, 1, 1, 1, 1,
                                   0, 0, 0, 1, 1, 0.1, 0, 0.4};
    static const spc_shape pool = {"8x8 pool", 128, 64, 8, 8, 3, 3, 1, 1, 1, 1,
                                   2, 2, 0, 1, 1, 0.1, 0, 0};
    tune_one(t, &conv, 32, SPC_FP32, 1e-4);
    tune_one(t, &pool, 8, SPC_FP32, 1e-4);
    tune_one(t, &conv, 32, SPC_FP16, 1e-2);
}

// One timed run for the timers' test: 100 us of host work, then a small fill.
typedef struct {
    const gpu_ctx *g;
    float *p;
} slow_host_run;

// Queues the fill after the host delay (a gpu_run_fn).
static int slow_host_once(void *arg, sc_err *err) {
    slow_host_run *r = arg;
    const double t0 = progress_clock();
    while (progress_clock() - t0 < 1e-4) {
    }
    return gpu_fill_uniform(r->g, GDT_F32, 1024, r->p, 0.0f, 1.0f, 1, err);
}

// The busy timer leaves the host's queuing time out (as a CUDA graph does);
// the plain one counts it.
static void test_busy_timer(tctx *t) {
    if (!gpu_here(t)) return;
    gpu_ctx g;
    sc_err err = {{0}};
    float *p = NULL;
    CHECK(t, gpu_ctx_init(&g, &err) == 0, "%s", err.msg);
    CHECK(t, cudaMalloc((void **)&p, 1024 * sizeof(float)) == cudaSuccess, "cudaMalloc");
    slow_host_run r = {&g, p};
    double plain = NAN, busy = NAN;
    CHECK(t, gpu_time_median(&g, slow_host_once, &r, 2, 9, &plain, &err) == 0, "%s", err.msg);
    CHECK(t, gpu_time_median_busy(&g, slow_host_once, &r, 2, 9, &busy, &err) == 0, "%s", err.msg);
    printf("  host 0.1 ms + tiny kernel: plain timer %.4f ms, busy timer %.4f ms\n", plain, busy);
    CHECK(t, plain >= 0.09, "plain timer %.4f ms should count the 0.1 ms of host work", plain);
    CHECK(t, busy < 0.05, "busy timer %.4f ms should not count the host work", busy);
    cudaFree(p);
    gpu_ctx_free(&g);
}

// Runs the tests; exit status 1 when one failed.
int main(void) {
    tctx t = {.suite = "gpu_test_tune"};
    RUN(&t, test_tune_skips_planted);
    RUN(&t, test_busy_timer);
    return check_finish(&t);
}
