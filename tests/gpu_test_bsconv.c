// The block-sparse tensor-core conv (kernels/bsconv_gpu.h) against its CPU
// reference (kernels/bsconv.h) on random layers: odd n, H, W; K and C
// multiples of the block but not of 64 (and C = 3, 12: the scalar gather);
// strides 1 and 2; 1x1, 3x3; blocks 8x1, 16x1, 16x8, 32x8, 8x8, 4x4 (rows
// merged) and 72x8 (sliced); an empty block row; block sparsity 0%, 50%,
// 95%, 99%, 100%; bias, residual and ReLU on and off; 2x2 and 4x4 max
// pools; fp16 and bf16; every
// kernel variant (two pixel tiles, plain and pipelined); x misaligned
// (scalar gather of a vector layer) and y == z.
// Outputs are poisoned (all bits set: NaN in fp16 and bf16) with a guard
// zone after the end, so an unwritten element or a write past the end fails.
// Inputs, weights and z are rounded to the storage type first and the CPU
// reference runs on the rounded values (bias stays fp32, as in the kernel).
//
// Tolerance per element: 1.01 u |want| + 5e-5 sum |terms| (u = 2^-11 fp16,
// 2^-8 bf16: the rounding of the output; the second term: fp32 sums in
// another order, and tensor cores truncate rather than round when they add
// (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021): up to
// about 2^-22 of the sum per addition, a few dozen k-steps here). One line
// per case, then "N passed, N failed, N skipped".
// Skipped without a GPU.
//
// --time: median times (cudaEvent, after a warm-up) of a resnet18 layer
// (n 128, 64 -> 64, 32x32, 3x3, pad 1, bias + ReLU) at 90% and 95% block
// sparsity, blocks 16x8 and 8x1, fp16 and bf16, each kernel variant, next to the
// dense fused cuDNN conv (kernels/fconv_gpu.h) of the same layer; each
// layer is checked on its first two images before it is timed.
// --time LAYER [SPARSITY]: that layer only (fp16, default 95%), for a profiler,
// then its fastest variant and the cuDNN conv in back-to-back pairs (time_mix).
// --variant V: the correctness cases of kernel variant V only (for compute-sanitizer).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv.h"
#include "kernels/bsconv_gpu.h"
#include "kernels/bsconv_halo.h"
#include "kernels/fconv_gpu.h"
#include "kernels/nhwc_ops_gpu.h"
#include "runtime/exec.h"
#include "tests/bsconv_cases.h"
#include "tests/check.h"

#define GUARD_EL 64  // poisoned elements after every output
#define TOL_ABS 5e-5
#define WS_BYTES ((size_t)256 << 20)

// --- device buffers -------------------------------------------------------------------

// The context and the device buffers of one case (freed together).
typedef struct {
    gpu_ctx g;
    sc_err err;
    void *p[16];
    int np;
} env;

// A device buffer of `bytes` (+ 16) with all bits set; NULL on failure.
static void *dnew(env *e, size_t bytes) {
    void *d = NULL;
    if (e->np == 16 || cudaMalloc(&d, bytes + 16) != cudaSuccess) {
        sc_fail(&e->err, "cudaMalloc %zu bytes failed", bytes);
        return NULL;
    }
    e->p[e->np++] = d;
    if (cudaMemset(d, 0xFF, bytes + 16) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        sc_fail(&e->err, "cudaMemset failed");
        return NULL;
    }
    return d;
}

// Frees every buffer of the case.
static void dfree_all(env *e) {
    cudaDeviceSynchronize();
    for (int i = 0; i < e->np; i++) cudaFree(e->p[i]);
    e->np = 0;
}

// Converts n host floats to dt at d (a device buffer) and rounds the host
// copy to the stored values; 0 or -1.
static int dput(env *e, gpu_dtype dt, float *h, size_t n, void *d) {
    float *tmp = NULL;
    if (!n) return 0;
    cudaCheck(&e->err, cudaMalloc((void **)&tmp, n * sizeof *h));
    int rc = cudaMemcpyAsync(tmp, h, n * sizeof *h, cudaMemcpyHostToDevice, e->g.stream) != cudaSuccess ||
             nhwc_from_f32_gpu(&e->g, dt, n, tmp, d, &e->err) ||
             nhwc_to_f32_gpu(&e->g, dt, n, d, tmp, &e->err) ||
             cudaStreamSynchronize(e->g.stream) != cudaSuccess ||
             cudaMemcpy(h, tmp, n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess;
    cudaFree(tmp);
    if (rc && !e->err.msg[0]) sc_fail(&e->err, "upload of %zu values failed", n);
    return rc ? -1 : 0;
}

// A new device copy of n host floats in dt (host rounded in place); NULL on failure.
static void *dnew_put(env *e, gpu_dtype dt, float *h, size_t n) {
    void *d = dnew(e, n * 2);
    return d && dput(e, dt, h, n, d) == 0 ? d : NULL;
}

// Rounds n host floats to dt through the device.
static int hround(env *e, gpu_dtype dt, float *h, size_t n) {
    void *d = dnew(e, n * 2);
    return d ? dput(e, dt, h, n, d) : -1;
}

// Downloads n elements of dt at d into host floats (waits for the stream).
static int dget(env *e, gpu_dtype dt, const void *d, size_t n, float *h) {
    float *tmp = NULL;
    cudaCheck(&e->err, cudaStreamSynchronize(e->g.stream));
    cudaCheck(&e->err, cudaMalloc((void **)&tmp, n * sizeof *h + 16));
    int rc = nhwc_to_f32_gpu(&e->g, dt, n, d, tmp, &e->err) ||
             cudaStreamSynchronize(e->g.stream) != cudaSuccess ||
             cudaMemcpy(h, tmp, n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess;
    cudaFree(tmp);
    if (rc && !e->err.msg[0]) sc_fail(&e->err, "download of %zu values failed", n);
    return rc ? -1 : 0;
}

// 1 when the GUARD_EL 16-bit elements after d[n] still have all bits set.
static int guard_intact(const void *d, size_t n) {
    uint16_t g[GUARD_EL];
    if (cudaMemcpy(g, (const uint16_t *)d + n, sizeof g, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
    for (int i = 0; i < GUARD_EL; i++)
        if (g[i] != 0xFFFFu) return 0;
    return 1;
}

// Unit roundoff of a storage type.
static double unit_round(gpu_dtype dt) { return dt == GDT_BF16 ? 1.0 / 256 : 1.0 / 2048; }

// --- one case -------------------------------------------------------------------------

// How a case runs besides its layer.
typedef struct {
    gpu_dtype dt;
    int variant;
    int misalign;  // 1: x one element past a 16-byte boundary (scalar gather)
    int inplace;   // 1: y is z's buffer
    int skip_run;  // 1: do not launch (the self-check: the poisoned output must fail)
    int plant;     // 1: change one downloaded element (the self-check)
    double rem;    // > 0: a hybrid layer, single weights of this density beside the blocks
} run_opts;

// The GPU part of a case: uploads, runs, downloads y into got; 0 or -1.
static int gpu_part(env *e, bsc_layer *L, const run_opts *o, float *got) {
    void *dx = dnew(e, (L->nx + 1) * 2), *dz = NULL, *dy;
    if (!dx) return -1;
    void *x = o->misalign ? (void *)((uint16_t *)dx + 1) : dx;
    int rc = dput(e, o->dt, L->x, L->nx, x);
    if (!rc && L->z && !(dz = dnew_put(e, o->dt, L->z, L->ny))) rc = -1;
    dy = o->inplace ? dz : dnew(e, (L->ny + GUARD_EL) * 2);
    if (rc || !dy) return -1;
    bsconv_gpu *b = bsconv_gpu_create(&e->g, &L->s, &L->w, L->bias, o->dt, &e->err);
    if (!b) return -1;
    if (!bsconv_gpu_variant_usable(&e->g, b, o->variant, e->err.msg, sizeof e->err.msg)) {
        bsconv_gpu_free(b);
        return 1;  // skipped: the variant does not run this layer
    }
    rc = bsconv_gpu_set_variant(&e->g, b, o->variant, &e->err);
    if (!rc && !o->skip_run) rc = bsconv_gpu_run(&e->g, b, x, dz, dy, &e->err);
    // a second launch onto a poisoned y (all-ones bits: NaN) must write it
    // all again: the split variants' counters are back at zero after a launch
    if (!rc && !o->skip_run && !o->inplace) {
        const cudaError_t ce = cudaMemsetAsync(dy, 0xFF, L->ny * 2, e->g.stream);
        rc = ce == cudaSuccess ? bsconv_gpu_run(&e->g, b, x, dz, dy, &e->err)
                               : sc_fail(&e->err, "poisoning y: %s", cudaGetErrorString(ce));
    }
    if (!rc) rc = dget(e, o->dt, dy, L->ny, got);
    if (!rc && !o->inplace && !guard_intact(dy, L->ny)) rc = sc_fail(&e->err, "write past the end of y");
    bsconv_gpu_free(b);
    return rc;
}

// Runs case c under o and compares with the CPU reference; prints one line;
// returns 1 when it passes.
static int run_case(env *e, const bsc_case *c, uint64_t seed, const run_opts *o) {
    bsc_layer L;
    char name[200];
    bsc_case_name(c, name, sizeof name);
    bsc_make(c, seed, &L);
    if (o->rem > 0) {
        bsc_add_rem(&L, o->rem, seed + 77);
        snprintf(name + strlen(name), sizeof name - strlen(name), " rem %d", L.rem_indptr[c->K]);
    }
    e->err.msg[0] = 0;
    float *got = malloc((L.ny + 1) * sizeof *got), *want = malloc((L.ny + 1) * sizeof *want);
    double *wantd = malloc((L.ny + 1) * sizeof *wantd), *scale = malloc((L.ny + 1) * sizeof *scale);
    int rc = hround(e, o->dt, L.data, (size_t)L.nblocks * c->kb * c->cb);
    if (!rc && L.rem_data) rc = hround(e, o->dt, L.rem_data, (size_t)L.rem_indptr[c->K]);
    if (!rc) rc = gpu_part(e, &L, o, got);  // rounds x and z in place
    if (rc == 1) {
        printf("skip %s v%d %s: %s\n", o->dt == GDT_BF16 ? "bf16" : "fp16", o->variant, name, e->err.msg);
        dfree_all(e);
        free(got), free(want), free(wantd), free(scale);
        bsc_free(&L);
        return 2;
    }
    double worst = INFINITY;
    size_t at = 0;
    if (!rc) {
        if (o->plant) got[L.ny / 3] += 0.05f * (1.0f + fabsf(got[L.ny / 3]));
        bsconv_forward_cpu(&L.s, &L.w, L.bias, L.x, L.z, want);
        float *wd = bsc_dense_weights(&L);
        bsc_dense_conv(&L, wd, 1, scale);
        free(wd);
        for (size_t i = 0; i < L.ny; i++) wantd[i] = want[i];
        worst = bsc_worst(got, wantd, scale, L.ny, 1.01 * unit_round(o->dt), TOL_ABS, &at);
    }
    const int pass = !rc && worst <= 1.0, expect_fail = o->skip_run || o->plant;
    printf("%s %s v%d%s%s %s: ", pass ? "ok  " : expect_fail ? "caught" : "FAIL", o->dt == GDT_BF16 ? "bf16" : "fp16",
           o->variant, o->misalign ? " misaligned-x" : "", o->inplace ? " y=z" : "", name);
    if (rc) printf("error: %s\n", e->err.msg);
    else printf("worst %.3g of tolerance (y[%zu] = %.6g, want %.6g)\n", worst, at, got[at], want[at]);
    fflush(stdout);
    dfree_all(e);
    free(got), free(want), free(wantd), free(scale);
    bsc_free(&L);
    return pass;
}

// --- the cases ------------------------------------------------------------------------

// Counts a case's result into t (2: skipped, the variant does not run the layer).
static void count(tctx *t, int pass) {
    if (pass == 2) t->skipped++;
    else if (pass) t->passed++;
    else t->failed++;
}

// 1 when some halo variant runs layer c (built with seed) on the device.
static int halo_usable(env *e, const bsc_case *c, uint64_t seed) {
    bsc_layer L;
    bsc_make(c, seed, &L);
    bsconv_gpu *b = bsconv_gpu_create(&e->g, &L.s, &L.w, L.bias, GDT_F16, &e->err);
    int ok = 0;
    for (int v = BSCONV_GATHER_VARIANTS; b && v < BSCONV_GPU_VARIANTS; v++)
        ok |= bsconv_gpu_variant_usable(&e->g, b, v, NULL, 0);
    bsconv_gpu_free(b);
    bsc_free(&L);
    return ok;
}

// Every layer the halo kernel applies to gets at least one halo variant.
static void check_halo_coverage(tctx *t, env *e) {
    for (int si = 0; si < BSC_GPU_SHAPES; si++) {
        const bsc_case c = bsc_gpu_case(si, 1);
        bsc_layer L;
        bsc_make(&c, 5, &L);
        const int applies = bsconv_halo_applies(&L.s, &L.w, NULL, 0);
        bsc_free(&L);
        if (!applies) continue;
        char name[200];
        bsc_case_name(&c, name, sizeof name);
        CHECK(t, halo_usable(e, &c, 5), "no halo variant runs %s", name);
    }
}

// Hybrid layers (blocks plus single weights of density 0.03 beside them) on
// every shape the halo kernel applies to, block sparsities 50/95/99%, both
// storage types, every variant (those without a remainder path skip them).
static void run_hybrid(tctx *t, env *e, int only) {
    const gpu_dtype dts[2] = {GDT_F16, GDT_BF16};
    for (int si = 0; si < BSC_GPU_SHAPES; si++)
        for (int pi = 1; pi <= 3; pi++) {
            const bsc_case c = bsc_gpu_case(si, pi);
            bsc_layer L;
            bsc_make(&c, 5, &L);
            const int applies = bsconv_halo_applies(&L.s, &L.w, NULL, 0);
            bsc_free(&L);
            for (int d = 0; applies && d < 2; d++)
                for (int v = 0; v < BSCONV_GPU_VARIANTS; v++)
                    if (only < 0 || v == only) {
                        const run_opts o = {dts[d], v, 0, 0, 0, 0, 0.03};
                        count(t, run_case(e, &c, 3000 + 10 * si + pi, &o));
                    }
        }
}

// Every shape x sparsity x storage type x pixel tile (only variant `only`
// when it is >= 0), then the special runs.
static void run_all(tctx *t, env *e, int only) {
    const gpu_dtype dts[2] = {GDT_F16, GDT_BF16};
    for (int si = 0; si < BSC_GPU_SHAPES; si++)
        for (int pi = 0; pi < BSC_GPU_SPARSITIES; pi++)
            for (int d = 0; d < 2; d++)
                for (int v = 0; v < BSCONV_GPU_VARIANTS; v++) {
                    if (only >= 0 && v != only) continue;
                    const bsc_case c = bsc_gpu_case(si, pi);
                    const run_opts o = {dts[d], v, 0, 0, 0, 0, 0.0};
                    count(t, run_case(e, &c, 1000 + 10 * si + pi, &o));
                }
    for (int d = 0; d < 2; d++)  // vector layers through the scalar gather; in-place residual
        for (int v = 0; v < BSCONV_GPU_VARIANTS; v++) {
            if (only >= 0 && v != only) continue;
            const run_opts mis = {dts[d], v, 1, 0, 0, 0, 0.0}, inpl = {dts[d], v, 0, 1, 0, 0, 0.0};
            bsc_case c0 = bsc_gpu_case(0, 1), c3 = bsc_gpu_case(3, 2);
            count(t, run_case(e, &c0, 77, &mis));
            c3.residual = 1;
            count(t, run_case(e, &c3, 78, &inpl));
        }
    run_hybrid(t, e, only);
}

// run refuses a residual with a pool.
static void reject_pool_residual(tctx *t, env *e) {
    bsc_layer L;
    bsc_case c = bsc_gpu_case(10, 1);  // the 2x2 pool
    bsc_make(&c, 80, &L);
    void *buf = dnew(e, L.nx * 2 + L.ny * 2);
    bsconv_gpu *b = buf ? bsconv_gpu_create(&e->g, &L.s, &L.w, L.bias, GDT_F16, &e->err) : NULL;
    const int rc = b ? bsconv_gpu_run(&e->g, b, buf, buf, (uint16_t *)buf + L.nx, &e->err) : 0;
    printf("%s pool with a residual refused: %s\n", b && rc == -1 ? "ok  " : "FAIL", e->err.msg);
    count(t, b && rc == -1);
    bsconv_gpu_free(b);
    dfree_all(e);
    bsc_free(&L);
}

// Two layers on one halo kernel (same element type, tile and group width) whose
// windows need different shared memory: preparing the small one after the
// large one must not stop the large one from launching (the kernel's limit is
// shared; a deployed resnet18 failed so).
static void shared_kernel_limit(tctx *t, env *e) {
    const bsc_case big = {128, 64, 32, 32, 64, 3, 3, 2, 1, 16, 8, 0.9, 0, 1, 0, 1, 0};
    const bsc_case small = {2, 64, 6, 6, 64, 3, 3, 1, 1, 16, 8, 0.9, 0, 1, 0, 1, 0};
    bsc_layer Lb, Ls;
    bsc_make(&big, 81, &Lb);
    bsc_make(&small, 82, &Ls);
    void *x = dnew(e, Lb.nx * 2), *y = dnew(e, Lb.ny * 2);
    bsconv_gpu *b = x && y ? bsconv_gpu_create(&e->g, &Lb.s, &Lb.w, Lb.bias, GDT_F16, &e->err) : NULL;
    bsconv_gpu *s = b ? bsconv_gpu_create(&e->g, &Ls.s, &Ls.w, Ls.bias, GDT_F16, &e->err) : NULL;
    const int v = BSCONV_GATHER_VARIANTS + 5;  // 128-pixel tiles: the stride-2 window is the largest
    int rc = !s || bsconv_gpu_set_variant(&e->g, b, v, &e->err) || bsconv_gpu_set_variant(&e->g, s, v, &e->err) ||
             bsconv_gpu_run(&e->g, b, x, NULL, y, &e->err) || cudaStreamSynchronize(e->g.stream) != cudaSuccess;
    printf("%s a large layer launches after a small one set the same kernel up%s%s\n", rc ? "FAIL" : "ok  ",
           rc ? ": " : "", rc ? e->err.msg : "");
    count(t, !rc);
    bsconv_gpu_free(b);
    bsconv_gpu_free(s);
    dfree_all(e);
    bsc_free(&Lb);
    bsc_free(&Ls);
}

// The comparison fails when the kernel does not run (poisoned output) or one element is off.
static void self_check(tctx *t, env *e) {
    const bsc_case c = bsc_gpu_case(0, 1);
    const run_opts unrun = {GDT_F16, 0, 0, 0, 1, 0, 0.0}, planted = {GDT_F16, 0, 0, 0, 0, 1, 0.0};
    printf("self-check (the next two lines must say caught):\n");
    const int a = run_case(e, &c, 79, &unrun), b = run_case(e, &c, 79, &planted);
    printf("%s self-check: an unwritten output and a changed element are caught\n",
           !a && !b ? "ok  " : "FAIL");
    count(t, !a && !b);
}

// --- timing -----------------------------------------------------------------------------

// One timed launch.
typedef struct {
    const gpu_ctx *g;
    bsconv_gpu *b;
    fconv_gpu *fc;
    const void *x, *w, *bias, *z;
    void *y, *ws;
} timed;

// Queues one block-sparse conv.
static int timed_bsconv(void *arg, sc_err *err) {
    timed *a = arg;
    return bsconv_gpu_run(a->g, a->b, a->x, a->z, a->y, err);
}

// Queues one dense cuDNN conv.
static int timed_fconv(void *arg, sc_err *err) {
    timed *a = arg;
    return fconv_gpu_run(a->g, a->fc, a->x, a->w, a->bias, a->z, a->y, a->ws, err);
}

// Checks the first two images of a timed layer against the CPU reference; 1 when they agree.
static int time_check(env *e, bsc_layer *L, gpu_dtype dt, const void *dy) {
    bsconv_shape s2 = L->s;
    s2.n = 2;
    const size_t n2 = (size_t)2 * L->Po * L->Qo * L->s.K;
    float *got = malloc(n2 * sizeof *got), *want = malloc(n2 * sizeof *want);
    double *wd = malloc(n2 * sizeof *wd), *scale = malloc(n2 * sizeof *scale);
    int ok = dget(e, dt, dy, n2, got) == 0;
    bsconv_forward_cpu(&s2, &L->w, L->bias, L->x, L->z, want);  // z: its first two images
    const bsconv_shape keep = L->s;
    L->s = s2;
    float *wdense = bsc_dense_weights(L);
    bsc_dense_conv(L, wdense, 1, scale);
    L->s = keep;
    for (size_t i = 0; i < n2; i++) wd[i] = want[i];
    size_t at;
    const double w = ok ? bsc_worst(got, wd, scale, n2, 1.01 * unit_round(dt), TOL_ABS, &at) : INFINITY;
    printf("  check (2 images): worst %.3g of tolerance\n", w);
    free(got), free(want), free(wd), free(scale), free(wdense);
    return ok && w <= 1.0;
}

// The block-sparse layer of case c (seeded) in dt on the device: L made,
// its launch in *a; NULL on failure (e->err).
static bsconv_gpu *bs_make(env *e, const bsc_case *c, gpu_dtype dt, double rem, bsc_layer *L, timed *a) {
    bsc_make(c, 4242, L);
    if (rem > 0) bsc_add_rem(L, rem, 4343);
    int ok = hround(e, dt, L->data, (size_t)L->nblocks * c->kb * c->cb) == 0;
    if (ok && L->rem_data) ok = hround(e, dt, L->rem_data, (size_t)L->rem_indptr[c->K]) == 0;
    void *dx = ok ? dnew_put(e, dt, L->x, L->nx) : NULL, *dy = dnew(e, L->ny * 2);
    void *dz = ok && L->z ? dnew_put(e, dt, L->z, L->ny) : NULL;
    bsconv_gpu *b = dx && dy && (dz || !L->z) ? bsconv_gpu_create(&e->g, &L->s, &L->w, L->bias, dt, &e->err) : NULL;
    *a = (timed){&e->g, b, NULL, dx, NULL, NULL, dz, dy, NULL};
    return b;
}

// Times the block-sparse layer of case c in dt, every kernel variant (only
// only_v when >= 0); 1 when it checks; the fastest variant into *best_v when not NULL.
static int time_layer(env *e, const char *name, const bsc_case *c, gpu_dtype dt, double dense_ms, int only_v,
                      double rem, int *best_v) {
    bsc_layer L;
    timed a;
    bsconv_gpu *b = bs_make(e, c, dt, rem, &L, &a);
    int ok = b != NULL;
    void *dy = a.y;
    double best = INFINITY;
    int bv = -1;
    for (int v = 0; ok && v < BSCONV_GPU_VARIANTS; v++) {
        double ms = NAN;
        char desc[300];
        if ((only_v >= 0 && v != only_v) || !bsconv_gpu_variant_usable(&e->g, b, v, desc, sizeof desc)) continue;
        ok = bsconv_gpu_set_variant(&e->g, b, v, &e->err) == 0 &&
             gpu_time_median_busy(&e->g, timed_bsconv, &a, 10, 50, &ms, &e->err) == 0;
        bsconv_gpu_describe(b, desc, sizeof desc);
        if (ok)
            printf("time %s block %dx%d sparsity %.2f%s variant %d: %.4f ms median of 50 (%s), %.1f useful TFLOP/s, "
                   "dense cuDNN / this = %.2f\n",
                   dt == GDT_BF16 ? "bf16" : "fp16", c->kb, c->cb, c->sparsity, rem > 0 ? " hybrid" : "", v, ms, desc,
                   2.0 * bsconv_gpu_macs(b) * c->n / (ms * 1e9), dense_ms / ms);
        if (ok) ok = time_check(e, &L, dt, dy);
        if (ok && ms < best) best = ms, bv = v;
    }
    if (ok && bv < 0) {  // e.g. the variant asked for does not run this layer
        sc_fail(&e->err, "no variant%s runs the layer", only_v >= 0 ? " asked for" : "");
        ok = 0;
    }
    if (ok)
        printf("best %s %s block %dx%d sparsity %.2f%s: variant %d %.4f ms, dense cuDNN / this = %.2f\n",
               dt == GDT_BF16 ? "bf16" : "fp16", name, c->kb, c->cb, c->sparsity, rem > 0 ? " hybrid" : "", bv, best,
               dense_ms / best);
    if (!ok) printf("FAIL time %dx%d %.2f: %s\n", c->kb, c->cb, c->sparsity, e->err.msg);
    if (best_v) *best_v = bv;
    bsconv_gpu_free(b);
    dfree_all(e);
    bsc_free(&L);
    return ok;
}

// The dense fused cuDNN conv (bias, residual, ReLU) of case c in dt on the
// device, random inputs, tuned: its launch in *a; NULL on failure (e->err).
static fconv_gpu *dense_make(env *e, const bsc_case *c, gpu_dtype dt, timed *a) {
    fconv_shape fs = {.d = {c->n, c->C, c->H, c->W, c->K, c->R, c->S, c->stride, c->pad, 0, 1}, .dt = dt};
    fs.d.residual = c->residual;
    const size_t nx = (size_t)c->n * c->H * c->W * c->C, nw = (size_t)c->K * c->R * c->S * c->C;
    int P, Q;
    fconv_out(&fs.d, &P, &Q);
    const size_t ny = (size_t)c->n * P * Q * c->K;
    void *dx = dnew(e, nx * 2), *dw = dnew(e, nw * 2), *db = dnew(e, (size_t)c->K * 2),
         *dy = dnew(e, ny * 2), *ws = dnew(e, WS_BYTES), *dz = c->residual ? dnew(e, ny * 2) : NULL;
    fconv_gpu *fc = dx && dw && db && dy && ws && (dz || !c->residual) ? fconv_gpu_create(&e->g, &fs, 12, &e->err)
                                                                         : NULL;
    double ms = NAN;
    int rc = !fc || gpu_fill_uniform(&e->g, dt, nx, dx, -1.0f, 1.0f, 1, &e->err) ||
             gpu_fill_uniform(&e->g, dt, nw, dw, -0.1f, 0.1f, 2, &e->err) ||
             gpu_fill_uniform(&e->g, dt, (size_t)c->K, db, -0.5f, 0.5f, 3, &e->err) ||
             (dz && gpu_fill_uniform(&e->g, dt, ny, dz, -1.0f, 1.0f, 4, &e->err)) ||
             fconv_gpu_tune(&e->g, fc, dx, dw, db, dz, dy, ws, WS_BYTES, 20, &ms, &e->err);
    *a = (timed){&e->g, NULL, fc, dx, dw, db, dz, dy, ws};
    if (rc) fconv_gpu_free(fc);
    return rc ? NULL : fc;
}

// Times the dense fused cuDNN conv (bias + ReLU) of the layer in dt; NAN on failure.
static double time_dense(env *e, const bsc_case *c, gpu_dtype dt) {
    timed a;
    double ms = NAN;
    fconv_gpu *fc = dense_make(e, c, dt, &a);
    int rc = !fc;
    if (!rc) rc = gpu_time_median_busy(&e->g, timed_fconv, &a, 10, 50, &ms, &e->err);
    if (rc) printf("dense cuDNN conv %s: failed: %s\n", dt == GDT_BF16 ? "bf16" : "fp16", e->err.msg);
    else printf("time %s dense cuDNN fused conv+bias%s+ReLU: %.4f ms median of 50\n",
                dt == GDT_BF16 ? "bf16" : "fp16", c->residual ? "+residual" : "", ms);
    fconv_gpu_free(fc);
    dfree_all(e);
    return rc ? NAN : ms;
}

// Two launches queued back to back (the argument of timed_two).
typedef struct {
    gpu_run_fn f1, f2;
    void *a1, *a2;
} two;

// Queues the first launch, then the second (a gpu_run_fn).
static int timed_two(void *arg, sc_err *err) {
    two *p = arg;
    SC_TRY(p->f1(p->a1, err));
    return p->f2(p->a2, err);
}

// Median of 50 busy-timed runs of f2 queued right after f1 (on the buffers their launches name); NAN on failure.
static double time_two(env *e, gpu_run_fn f1, void *a1, gpu_run_fn f2, void *a2) {
    two p = {f1, f2, a1, a2};
    double ms = NAN;
    return gpu_time_median_busy(&e->g, timed_two, &p, 10, 50, &ms, &e->err) ? NAN : ms;
}

// Times s alone and d, s in the four back-to-back pairs (median of 50 each) and prints them.
static void mix_pairs(env *e, timed *d, timed *s, int v) {
    double sa = NAN;
    if (gpu_time_median_busy(&e->g, timed_bsconv, s, 10, 50, &sa, &e->err)) sa = NAN;
    const double dd = time_two(e, timed_fconv, d, timed_fconv, d), ss = time_two(e, timed_bsconv, s, timed_bsconv, s);
    const double ds = time_two(e, timed_fconv, d, timed_bsconv, s), sd = time_two(e, timed_bsconv, s, timed_fconv, d);
    printf("mix (variant %d, shared buffers, ms, median of 50): bsconv alone %.4f; pairs cudnn+cudnn %.4f, "
           "bsconv+bsconv %.4f, cudnn+bsconv %.4f, bsconv+cudnn %.4f; a mixed pair minus the mean of the two same "
           "pairs: %+.4f, %+.4f\n",
           v, sa, dd, ss, ds, sd, ds - 0.5 * (dd + ss), sd - 0.5 * (dd + ss));
}

// --time LAYER: the layer's cuDNN conv and its block-sparse conv (variant v)
// each alone and in back-to-back pairs, to see whether a kernel costs more
// after the other kind (inside the engine's graph a swapped layer sits
// between cuDNN convs) than after itself: "after cuDNN - alone" per kind.
static void time_mix(env *e, const bsc_case *c, gpu_dtype dt, int v) {
    bsc_layer L;
    timed d, s;
    fconv_gpu *fc = dense_make(e, c, dt, &d);
    bsconv_gpu *b = fc ? bs_make(e, c, dt, 0.0, &L, &s) : NULL;
    if (b && bsconv_gpu_set_variant(&e->g, b, v, &e->err) == 0) {
        // both kinds read the same input and write the same output (the same
        // bytes as the engine's graph moves): a mixed pair touches no more memory
        s.x = d.x, s.y = d.y, s.z = d.z;
        mix_pairs(e, &d, &s, v);
    } else printf("mix: failed: %s\n", e->err.msg);
    bsconv_gpu_free(b), fconv_gpu_free(fc);
    if (fc) bsc_free(&L);
    dfree_all(e);
}

// A layer the --time mode measures.
typedef struct {
    const char *name;
    int C, HW, K, R, stride, pad, pool;
    int res;  // 1: a residual add before the ReLU (the second conv of a ResNet block)
} time_shape;

// Block sparsity and the singles' density beside the blocks (bsc_add_rem) of
// a hybrid layer of total sparsity sp whose singles are a share f of its
// kept weights (prune's pattern KxC+F).
static void hybrid_split(double sp, double f, double *block_sp, double *density) {
    *block_sp = 1.0 - (1.0 - sp) * (1.0 - f);
    *density = (1.0 - sp) * f / *block_sp;
}

// The block KxC of the environment's BLOCK (e.g. "8x1") into c, when set and well formed.
static void block_from_env(bsc_case *c) {
    const char *b = getenv("BLOCK");
    int kb, cb;
    char end;
    if (b && sscanf(b, "%dx%d%c", &kb, &cb, &end) == 2 && kb > 0 && cb > 0) c->kb = kb, c->cb = cb;
}

// The --time mode: resnet18's and vgg16's layer shapes at batch 128 (three
// with a residual add), blocks 16x8 at 90% and 95% and the hybrid 16x8+0.2
// at 95% (and 8x1 on the first), fp16 (and bf16 on the first);
// only the layer named `only` at sparsity `only_sp` when given (hybrid with
// singles a share only_f of the kept weights when only_f > 0), and only
// variant only_v when >= 0 (profiling: one kernel's launches).
static void time_all(tctx *t, env *e, const char *only, double only_sp, int only_v, double only_f) {
    static const time_shape SH[] = {
        {"r18-64x32", 64, 32, 64, 3, 1, 1, 0, 0},      {"r18-64to128s2", 64, 32, 128, 3, 2, 1, 0, 0},
        {"r18-128x16", 128, 16, 128, 3, 1, 1, 0, 0},   {"r18-256x8", 256, 8, 256, 3, 1, 1, 0, 0},
        {"r18-512x4", 512, 4, 512, 3, 1, 1, 0, 0},     {"r18-1x1s2", 128, 16, 256, 1, 2, 0, 0, 0},
        {"vgg-64x32+pool", 64, 32, 64, 3, 1, 1, 2, 0}, {"vgg-256x8+pool", 256, 8, 256, 3, 1, 1, 2, 0},
        {"r18-64x32+res", 64, 32, 64, 3, 1, 1, 0, 1}, {"r18-128x16+res", 128, 16, 128, 3, 1, 1, 0, 1},
        {"r18-512x4+res", 512, 4, 512, 3, 1, 1, 0, 1}, {"vgg-512x2", 512, 2, 512, 3, 1, 1, 0, 0},
        {"vgg-512x2+pool", 512, 2, 512, 3, 1, 1, 2, 0}, {"vgg-512x4+pool", 512, 4, 512, 3, 1, 1, 2, 0},
    };
    const double sps[2] = {0.90, 0.95};
    printf("device: %s (%d SMs)\n", e->g.dev.name, e->g.dev.sms);
    for (int i = 0; i < (int)(sizeof SH / sizeof SH[0]); i++)
        for (int d = 0; d < (i == 0 && !only ? 2 : 1); d++) {
            if (only && strcmp(only, SH[i].name)) continue;
            const gpu_dtype dt = d ? GDT_BF16 : GDT_F16;
            const time_shape *h = &SH[i];
            bsc_case c = {128, h->C, h->HW, h->HW, h->K, h->R, h->R, h->stride, h->pad, 16, 8, 0.0, 0, 1, h->res, 1, h->pool};
            if (only) block_from_env(&c);
            printf("layer %s: n 128, C %d, %dx%d, K %d, %dx%d, stride %d%s%s\n", h->name, h->C, h->HW, h->HW, h->K,
                   h->R, h->R, h->stride, h->pool ? ", 2x2 max pool (dense: without)" : "",
                   h->res ? ", residual add" : "");
            const double dense = time_dense(e, &c, dt);
            for (int si = 0; si < 2 && !(only && only_f > 0); si++) {
                int bv = -1;
                c.sparsity = only ? only_sp : sps[si];
                count(t, time_layer(e, h->name, &c, dt, dense, only_v, 0.0, &bv));
                if (only && bv >= 0) time_mix(e, &c, dt, bv);
                if (only) break;
            }
            double dens;
            hybrid_split(only ? only_sp : 0.95, only ? only_f : 0.2, &c.sparsity, &dens);
            if (!only || only_f > 0) count(t, time_layer(e, h->name, &c, dt, dense, only_v, dens, NULL));
            if (i == 0 && d == 0 && !only) {
                c.kb = 8, c.cb = 1, c.sparsity = 0.95;
                count(t, time_layer(e, h->name, &c, dt, dense, -1, 0.0, NULL));
            }
        }
}

int main(int argc, char **argv) {
    tctx t = {.suite = "gpu_test_bsconv", .test = "gpu_test_bsconv"};  // .test: the checks run outside RUN
    const int timing = argc > 1 && !strcmp(argv[1], "--time");
    const int one_v = argc == 3 && !strcmp(argv[1], "--variant");
    const char *only = timing && argc > 2 ? argv[2] : NULL;
    const double only_sp = timing && argc > 3 ? atof(argv[3]) : 0.95;
    const int only_v = one_v ? atoi(argv[2]) : timing && argc > 4 ? atoi(argv[4]) : -1;
    const double only_f = timing && argc > 5 ? atof(argv[5]) : 0.0;
    sc_err why = {{0}};
    if ((argc > 1 && !timing && !one_v) || argc > 6 || !(only_sp > 0.0 && only_sp < 1.0) ||
        (one_v && (only_v < 0 || only_v >= BSCONV_GPU_VARIANTS)) ||
        (argc >= 5 && timing && (only_v < -1 || only_v >= BSCONV_GPU_VARIANTS)) || !(only_f >= 0.0 && only_f < 1.0)) {
        fprintf(stderr, "usage: gpu_test_bsconv [--time [LAYER [SPARSITY [V [F]]]] | --variant V]  (LAYER e.g. "
                        "r18-64x32, SPARSITY in (0, 1); V: kernel variant V only, 0 to %d, -1 every one; F in [0, 1): "
                        "a hybrid layer whose single weights are that share of the kept ones; BLOCK=KxC in the environment: "
                        "LAYER's blocks, 16x8 when unset)\n",
                BSCONV_GPU_VARIANTS - 1);
        return 2;
    }
    if (!exec_gpu_available(&why)) {
        printf("  skip gpu_test_bsconv: %s\n", why.msg);
        t.skipped = 1;
        return check_finish(&t);
    }
    env e;
    memset(&e, 0, sizeof e);
    if (gpu_ctx_init(&e.g, &e.err)) {
        printf("FAIL gpu_ctx_init: %s\n", e.err.msg);
        t.failed = 1;
        return check_finish(&t);
    }
    if (timing) {
        time_all(&t, &e, only, only_sp, only_v, only_f);
    } else {
        run_all(&t, &e, only_v);
        if (!one_v) {
            check_halo_coverage(&t, &e);
            shared_kernel_limit(&t, &e);
            reject_pool_residual(&t, &e);
            self_check(&t, &e);
        }
    }
    gpu_ctx_free(&e.g);
    printf("%s: %d PASS, %d FAIL\n", timing ? "timing checks" : "cases", t.passed, t.failed);
    return check_finish(&t);
}
