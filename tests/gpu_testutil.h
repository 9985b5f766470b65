// Helpers of the GPU op tests (tests/gpu_test_*.c): device buffers of one
// test poisoned with NaN, random host inputs rounded to the storage dtype,
// NCHW <-> NHWC transfers, relative-error checks.
#ifndef SC_TESTS_GPU_TESTUTIL_H
#define SC_TESTS_GPU_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common_gpu.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/testutil.h"

// Device allocations of one test, freed together.
typedef struct {
    void *p[128];
    int n;
    gpu_ctx g;
    sc_err err;
    rng r;
} genv;

// Opens a GPU context and seeds the generator.
static inline int genv_open(tctx *t, genv *e, uint64_t seed) {
    memset(e, 0, sizeof *e);
    rng_seed(&e->r, seed, 11);
    if (gpu_ctx_init(&e->g, &e->err)) {
        CHECK(t, 0, "gpu_ctx_init: %s", e->err.msg);
        return 0;
    }
    return 1;
}

// Frees every allocation and the context.
static inline void genv_close(genv *e) {
    cudaDeviceSynchronize();
    for (int i = 0; i < e->n; i++) cudaFree(e->p[i]);
    gpu_ctx_free(&e->g);
}

// Device buffer of `bytes`, poisoned with all-ones bits (NaN in fp32/fp16).
static inline void *dalloc(genv *e, size_t bytes) {
    void *p = NULL;
    if (e->n == 128 || cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) return NULL;
    cudaMemset(p, 0xFF, bytes);
    cudaDeviceSynchronize();  // the memset runs on the legacy stream, ours is non-blocking
    e->p[e->n++] = p;
    return p;
}

// Host -> device copy, complete when it returns (a pageable cudaMemcpy may
// still be in flight for work queued on another stream).
static inline void h2d(void *dst, const void *src, size_t bytes) {
    sc_err err;
    gpu_upload(dst, src, bytes, &err);
}

// Host floats uniform in [lo, hi).
static inline float *hrand(genv *e, size_t n, float lo, float hi) {
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * rng_uniform(&e->r);
    return v;
}

// Host zeros.
static inline float *hzero(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// Uploads host floats as dtype dt and rounds the host copy to what is stored.
static inline void *dput(genv *e, gpu_dtype dt, size_t n, float *host) {
    float *tmp = NULL;
    void *d = dalloc(e, n * gpu_dtype_size(dt));
    if (!d || cudaMalloc((void **)&tmp, n * sizeof(float) + 16) != cudaSuccess) return NULL;
    h2d(tmp, host, n * sizeof(float));
    gpu_convert(&e->g, n, GDT_F32, tmp, dt, d, &e->err);
    gpu_convert(&e->g, n, dt, d, GDT_F32, tmp, &e->err);
    cudaStreamSynchronize(e->g.stream);
    cudaMemcpy(host, tmp, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(tmp);
    return d;
}

// Downloads n elements of dtype dt as floats (waits for the stream).
static inline void dget(genv *e, gpu_dtype dt, size_t n, const void *d, float *host) {
    float *tmp = NULL;
    cudaStreamSynchronize(e->g.stream);
    if (cudaMalloc((void **)&tmp, n * sizeof(float) + 16) != cudaSuccess) return;
    gpu_convert(&e->g, n, dt, d, GDT_F32, tmp, &e->err);
    cudaStreamSynchronize(e->g.stream);
    cudaMemcpy(host, tmp, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(tmp);
}

// Checks one tensor against its reference with a tolerance.
#define CHECK_REL(t, what, n, got, ref, tol)                                                \
    do {                                                                                   \
        double re_ = relerr((n), (got), (ref));                                            \
        CHECK(t, re_ <= (tol), "%s: relative error %.3g > %.3g", (what), re_, (double)(tol)); \
    } while (0)

// Runs a GPU call; on failure fails the test with the error and jumps to out.
#define GTRY(t, e, call)                                                                   \
    do {                                                                                   \
        if ((call) != 0) {                                                                 \
            CHECK(t, 0, "%s: %s", #call, (e)->err.msg);                                    \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

// (n, c, hw) -> (n, hw, c) host transpose.
static inline void to_nhwc(int n, int c, int hw, const float *s, float *d) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int e = 0; e < hw; e++)
                d[((size_t)i * hw + e) * c + ch] = s[((size_t)i * c + ch) * hw + e];
}
// (n, hw, c) -> (n, c, hw) host transpose.
static inline void to_nchw(int n, int c, int hw, const float *s, float *d) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int e = 0; e < hw; e++)
                d[((size_t)i * c + ch) * hw + e] = s[((size_t)i * hw + e) * c + ch];
}

// Random NCHW tensor uploaded as NHWC [dt]; the host copy is rounded.
static inline void *dput_nchw(genv *e, gpu_dtype dt, int n, int c, int hw, float *host) {
    size_t cnt = (size_t)n * c * hw;
    float *t = malloc(cnt * sizeof *t);
    to_nhwc(n, c, hw, host, t);
    void *d = dput(e, dt, cnt, t);
    to_nchw(n, c, hw, t, host);
    free(t);
    return d;
}

// Downloads an NHWC tensor [dt] as NCHW floats.
static inline void dget_nchw(genv *e, gpu_dtype dt, int n, int c, int hw, const void *d, float *host) {
    size_t cnt = (size_t)n * c * hw;
    float *t = malloc(cnt * sizeof *t);
    dget(e, dt, cnt, d, t);
    to_nchw(n, c, hw, t, host);
    free(t);
}

// Captures fn(arg), which queues work on st, into a CUDA graph and
// instantiates it into *exec (the caller destroys it); 0 on success.
static inline int graph_capture(cudaStream_t st, gpu_run_fn fn, void *arg, cudaGraphExec_t *exec,
                                sc_err *err) {
    cudaGraph_t graph = NULL;
    *exec = NULL;
    int ok = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    ok = ok && fn(arg, err) == 0;
    ok = cudaStreamEndCapture(st, &graph) == cudaSuccess && ok;
    ok = ok && cudaGraphInstantiate(exec, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    if (!ok && *exec) cudaGraphExecDestroy(*exec), *exec = NULL;
    return ok ? 0 : -1;
}

// Name of a dtype for messages.
static inline const char *dtn(gpu_dtype dt) { return dt == GDT_F16 ? "fp16" : "fp32"; }

#endif
