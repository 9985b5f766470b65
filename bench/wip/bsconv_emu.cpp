// A CPU emulation of the block-sparse conv kernel (kernels/bsconv.cu) for
// machines without a GPU; bench/wip/bsconv_emu.sh extracts the kernel's text
// verbatim (its "the kernel" section) and builds it with this file. CUDA
// built-ins are emulated with one std::thread per CUDA thread and a barrier
// per CTA / warp (CTAs one after another), WMMA by whole-tile arithmetic in
// every lane (lane 0 stores), cp.async by copies deferred to wait_group, and
// shuffles through a per-warp buffer. It runs the GPU test's cases
// (bsc_gpu_case) on every variant against the CPU reference with the GPU
// test's tolerance. It checks index math, buffers and synchronisation order,
// not the hardware's fragment layouts, alignment faults or timing.
#include <pthread.h>
#include <thread>
#include <vector>
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" {
#include "kernels/bsconv.h"
#include "runtime/rng.h"
}
struct edim3 { unsigned x, y, z; };
static thread_local edim3 threadIdx, blockIdx;
static const edim3 blockDim = {128, 1, 1};
static pthread_barrier_t g_bar, w_bar[4];
// CTA and warp barriers.
static void __syncthreads() { pthread_barrier_wait(&g_bar); }
static void __syncwarp() { pthread_barrier_wait(&w_bar[threadIdx.x / 32]); }
// A read-only load.
template <typename T> static T __ldg(const T *p) { return *p; }
// A shuffle through a per-warp buffer (every lane of the warp calls it).
static float shfl_buf[4][32];
static float __shfl_xor_sync(unsigned, float v, int off) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    shfl_buf[w][l] = v;
    pthread_barrier_wait(&w_bar[w]);
    const float r = shfl_buf[w][l ^ off];
    pthread_barrier_wait(&w_bar[w]);
    return r;
}
using std::min;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
// kernels/device_gpu.h's conversions and packs on the host
static inline float sc_tof(__half x) { return __half2float(x); }
static inline float sc_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T sc_fromf(float x);
template <> __half sc_fromf<__half>(float x) { return __float2half_rn(x); }
template <> __nv_bfloat16 sc_fromf<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <typename T> struct sc_pack { static constexpr int VEC = 16 / sizeof(T); union { uint4 raw; T v[VEC]; }; sc_pack() {} };
// WMMA: every lane holds the whole tile; lane 0 stores.
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {};
enum layout_t { mem_row_major };
template <typename U, int M, int N, int K, typename T, typename L = void> struct fragment {
    static constexpr int R = std::is_same<U, matrix_b>::value ? K : M;
    static constexpr int C = std::is_same<U, matrix_a>::value ? K : N;
    float v[R * C];
};
// The fragment operations, on whole tiles.
template <typename F> void fill_fragment(F &f, float x) { for (auto &e : f.v) e = x; }
template <typename F, typename T> void load_matrix_sync(F &f, const T *p, unsigned ldm) {
    for (int r = 0; r < F::R; r++) for (int c = 0; c < F::C; c++) f.v[r * F::C + c] = sc_tof(p[(size_t)r * ldm + c]);
}
template <typename FC, typename FA, typename FB> void mma_sync(FC &d, const FA &a, const FB &b, const FC &c) {
    FC t;
    for (int i = 0; i < FC::R; i++) for (int j = 0; j < FC::C; j++) {
        float s = c.v[i * FC::C + j];
        for (int k = 0; k < FA::C; k++) s += a.v[i * FA::C + k] * b.v[k * FB::C + j];
        t.v[i * FC::C + j] = s;
    }
    d = t;
}
template <typename F> void store_matrix_sync(float *p, const F &f, unsigned ldm, layout_t) {
    if (threadIdx.x % 32) return;
    for (int r = 0; r < F::R; r++) for (int c = 0; c < F::C; c++) p[(size_t)r * ldm + c] = f.v[r * F::C + c];
}
}}
typedef enum { GDT_F32 = 0, GDT_F16 = 1, GDT_BF16 = 2 } gpu_dtype;
#include <deque>
struct cp_op { void *dst; const void *src; int valid; };
static thread_local std::vector<cp_op> cp_cur;
static thread_local std::deque<std::vector<cp_op>> cp_groups;
// cp.async: queued per thread, done at wait_group.
static void bsk_cp16(void *dst, const void *src, int valid) { cp_cur.push_back({dst, src, valid}); }
static void bsk_cp_commit() { cp_groups.push_back(cp_cur); cp_cur.clear(); }
template <int N> static void bsk_cp_wait() {
    while ((int)cp_groups.size() > N) {
        for (auto &c : cp_groups.front()) { if (c.valid) memcpy(c.dst, c.src, 16); else memset(c.dst, 0, 16); }
        cp_groups.pop_front();
    }
}
using namespace nvcuda;
#include BSCONV_KERNEL_INC

// Runs kernel<T, MF, NF, PIPE> over the grid on the host.
template <typename T, int MF, int NF, bool PIPE> void emu_launch(const bsk_args &a, unsigned gx, unsigned gy) {
    for (unsigned by = 0; by < gy; by++) for (unsigned bx = 0; bx < gx; bx++) {
        std::vector<std::thread> th;
        for (unsigned t = 0; t < 128; t++) th.emplace_back([&, t] { threadIdx = {t, 0, 0}; blockIdx = {bx, by, 0}; bsk_kernel<T, MF, NF, PIPE>(a); if (!cp_cur.empty() || !cp_groups.empty()) { printf("copies left in flight\n"); exit(1);} });
        for (auto &x : th) x.join();
    }
}

extern "C" {
#include "tests/bsconv_cases.h"
}

// n host floats narrowed to T (h rounded in place to the stored values).
template <typename T> static std::vector<T> to_t(float *h, size_t n) {
    std::vector<T> v(n + 8);
    for (size_t i = 0; i < n; i++) { v[i] = sc_fromf<T>(h[i]); h[i] = sc_tof(v[i]); }
    return v;
}

// Launches the emulated kernel for the layer's group width.
template <typename T, int MF, bool P> static void dispatch_nf(const bsk_args &a, int np, unsigned gx, unsigned gy) {
    switch (np / 8) {
    case 1: emu_launch<T, MF, 1, P>(a, gx, gy); break;
    case 2: emu_launch<T, MF, 2, P>(a, gx, gy); break;
    case 4: emu_launch<T, MF, 4, P>(a, gx, gy); break;
    default: emu_launch<T, MF, 8, P>(a, gx, gy); break;
    }
}

// Runs one case in element type T with variant var; returns the worst error / tolerance.
template <typename T> static double run(const bsc_case *c, uint64_t seed, int var, double u, int misalign) {
    const int mf = var & 1 ? 2 : 1; const bool pipe = var >= 2;
    bsc_layer L;
    bsc_make(c, seed, &L);
    std::vector<T> data = to_t<T>(L.data, (size_t)L.nblocks * c->kb * c->cb);
    (void)data;
    // x with room for a one-element shift
    std::vector<T> xs = to_t<T>(L.x, L.nx);
    T *xbuf = (T *)aligned_alloc(16, (L.nx + 16) * sizeof(T));
    T *x = xbuf + (misalign ? 1 : 0);
    memcpy(x, xs.data(), L.nx * sizeof(T));
    std::vector<T> z;
    if (L.z) z = to_t<T>(L.z, L.ny);
    T *ybuf = (T *)aligned_alloc(16, ((L.ny + 64) * sizeof(T) + 15) / 16 * 16);
    memset(ybuf, 0xFF, (L.ny + 64) * sizeof(T));
    bsconv_packed p;
    sc_err err;
    if (bsconv_pack(&L.s, &L.w, &p, &err)) { printf("pack: %s\n", err.msg); exit(1); }
    T *vals = (T *)aligned_alloc(32, ((size_t)p.ncols * p.np * sizeof(T) + 64) / 32 * 32);
    for (size_t i = 0; i < (size_t)p.ncols * p.np; i++) vals[i] = sc_fromf<T>(p.vals[i]);
    bsk_args a;
    a.x = x, a.z = L.z ? z.data() : nullptr, a.y = ybuf, a.bias = L.bias, a.grp = p.grp, a.cols = p.cols, a.vals = vals;
    a.H = c->H, a.W = c->W, a.C = c->C, a.K = c->K, a.Po = L.Po, a.Qo = L.Qo, a.win = c->pool > 1 ? c->pool : 1, a.stride = c->stride, a.pad = c->pad, a.relu = c->relu;
    a.npq = c->n * L.Po * L.Qo * a.win * a.win;
    a.vec = p.vec && !misalign;
    int vo = c->K % 8 == 0;
    for (int i = 0; i < p.ngroups; i++) vo &= p.grp[i].k0 % 8 == 0;
    a.vec_out = vo && (((uintptr_t)a.z & 15) == 0);
    const int rows = 128 * mf;
    const unsigned gx = (a.npq + rows - 1) / rows, gy = p.ngroups;
    if (mf == 1 && !pipe) dispatch_nf<T, 1, false>(a, p.np, gx, gy); else if (mf == 2 && !pipe) dispatch_nf<T, 2, false>(a, p.np, gx, gy);
    else if (mf == 1) dispatch_nf<T, 1, true>(a, p.np, gx, gy); else dispatch_nf<T, 2, true>(a, p.np, gx, gy);
    std::vector<float> got(L.ny), want(L.ny);
    std::vector<double> wd(L.ny), scale(L.ny);
    for (size_t i = 0; i < L.ny; i++) got[i] = sc_tof(ybuf[i]);
    int guard = 1;
    for (int i = 0; i < 64; i++) { uint16_t b; memcpy(&b, ybuf + L.ny + i, 2); guard &= b == 0xFFFF; }
    bsconv_forward_cpu(&L.s, &L.w, L.bias, L.x, L.z, want.data());
    float *wdense = bsc_dense_weights(&L);
    bsc_dense_conv(&L, wdense, 1, scale.data());
    free(wdense);
    for (size_t i = 0; i < L.ny; i++) wd[i] = want[i];
    size_t at;
    double w = bsc_worst(got.data(), wd.data(), scale.data(), L.ny, 1.01 * u, 5e-5, &at);
    if (!guard) w = INFINITY;
    char name[200];
    bsc_case_name(c, name, sizeof name);
    printf("%s %s v%d%s %s: worst %.3g (y[%zu]=%g want %g) vec %d vec_out %d np %d groups %d\n", w <= 1 ? "ok  " : "FAIL",
           sizeof(T) == 2 && u > 1e-3 ? "bf16" : "fp16", var, misalign ? " misaligned" : "", name, w, at, got[at], want[at], a.vec, a.vec_out, p.np, p.ngroups);
    bsconv_packed_free(&p);
    free(xbuf); free(ybuf); free(vals);
    bsc_free(&L);
    return w;
}

// Every GPU-test case (argv[1]: how many of the sparsities) x fp16/bf16 x variant.
int main(int argc, char **argv) {
    pthread_barrier_init(&g_bar, NULL, 128);
    for (int w = 0; w < 4; w++) pthread_barrier_init(&w_bar[w], NULL, 32);
    int pass = 0, fail = 0;
    const int nsp = argc > 1 ? atoi(argv[1]) : BSC_GPU_SPARSITIES;
    for (int si = 0; si < BSC_GPU_SHAPES; si++) for (int pi = 0; pi < nsp; pi++) for (int d = 0; d < 2; d++) for (int mf = 0; mf < 4; mf++) {
        const bsc_case c = bsc_gpu_case(si, pi);
        double w = d ? run<__nv_bfloat16>(&c, 1000 + 10 * si + pi, mf, 1.0 / 256, 0) : run<__half>(&c, 1000 + 10 * si + pi, mf, 1.0 / 2048, pi == 1 && (mf == 1 || mf == 2));
        (w <= 1 ? pass : fail)++;
    }
    printf("emulation: %d passed, %d failed\n", pass, fail);
    return fail != 0;
}
