// A CPU emulation of the halo, direct, vector and tail kernels of the block-sparse conv
// (kernels/bsconv_halo.cu, kernels/bsconv_direct.cu, kernels/bsconv_vec.cu and kernels/bsconv_tail.cu, built as host C++ by
// tests/halo_emu.sh with prelude.h): each CUDA thread a coroutine (ucontext) on one host thread,
// CTAs one after another, switching only at barriers (per CTA and per warp; between two CTA
// barriers one warp at a time, in a seeded random order); cp.async queued per thread and done at
// wait_group; ldmatrix and mma.sync (m16n8k16, m16n8k8) as warp-collective
// operations with the PTX ISA's fragment layouts; the CUDA runtime calls the
// file makes stubbed on host memory. Every shared-memory access the PTX
// wrappers make is checked against the launch's dynamic size, 4 KB of
// canary after it catch plain stores past it, and the outputs carry a
// poisoned guard zone. It runs the GPU test's cases (bsc_gpu_case) on the
// halo, direct and vector variants against the CPU reference with the GPU test's tolerance:
// index math and buffers; barrier order only partly (a copy lands at its
// thread's wait_group); not what nvcc makes of the code, timing or the
// hardware's faults.
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif
#include "prelude.h"
#include "kernels/bsconv_direct_gpu.h"
#include "kernels/bsconv_halo_gpu.h"
#include "kernels/bsconv_tail_gpu.h"
#include "kernels/bsconv_vec_gpu.h"
#include "kernels/nhwc_ops_gpu.h"
extern "C" {
#include "kernels/bsconv.h"
#include "tests/bsconv_cases.h"
#include "tests/tail_cases.h"
}

uint3 threadIdx, blockIdx;  // the running coroutine's
dim3 blockDim, gridDim;
char *emu_smem;
static size_t emu_dyn;  // the launch's dynamic shared memory
#define EMU_WARPS 32  // warps per CTA at most (the tail kernel's 1024 threads)
#define EMU_THREADS (32 * EMU_WARPS)
static int or_acc;  // __syncthreads_or's (the threads take turns on one host thread)

// --- the CTA's threads as coroutines ----------------------------------------------------
static const size_t EMU_STACK = 256 << 10;  // bytes of stack per emulated thread
// idle: the last switch came from a wait that found its barrier still closed;
// at_cta: waiting at the CTA barrier of generation gen.
struct emu_fiber { ucontext_t ctx; char *stack; int done, idle, at_cta; unsigned gen; };
static emu_fiber fibers[EMU_THREADS];
static ucontext_t sched_ctx;  // the launch loop's
static int cur;               // the running coroutine
static const void *sched_bottom;  // the launch loop's stack (AddressSanitizer builds)
static size_t sched_size;

// Switches from context `from` to `to`, whose stack starts at bottom and
// holds size bytes; AddressSanitizer builds are told, and store the stack
// switched back from in *from_bottom, *from_size when those are given.
static void emu_switch(ucontext_t *from, ucontext_t *to, const void *bottom, size_t size,
                       const void **from_bottom, size_t *from_size) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(NULL, bottom, size);
    swapcontext(from, to);
    __sanitizer_finish_switch_fiber(NULL, from_bottom, from_size);
#else
    (void)bottom, (void)size, (void)from_bottom, (void)from_size;
    swapcontext(from, to);
#endif
}

// Returns control to the launch loop; the coroutine resumes where it left.
static void emu_yield() { emu_switch(&fibers[cur].ctx, &sched_ctx, sched_bottom, sched_size, &sched_bottom, &sched_size); }

// A barrier of `need` threads (those that have not ended): the last to
// arrive goes on, the others yield until it has.
struct emu_bar { int need, arrived; unsigned gen; };
static emu_bar cta_bar, warp_bar[EMU_WARPS];
static void bar_open(emu_bar &b) {
    if (b.arrived > 0 && b.arrived >= b.need) b.arrived = 0, b.gen++;
}
static void bar_wait(emu_bar &b) {
    const unsigned g = b.gen;
    b.arrived++;
    bar_open(b);
    if (b.gen != g) return;
    emu_fiber &f = fibers[cur];
    f.at_cta = &b == &cta_bar, f.gen = g, f.idle = 0;
    emu_yield();
    while (b.gen == g) f.idle = 1, emu_yield();
    f.at_cta = 0;
}

// Stops the emulation with a message (a fault the GPU would report or not).
static void emu_fault(const char *what, long long at) {
    fprintf(stderr, "FAULT %s at %lld (CTA %u,%u,%u thread %u; dynamic shared %zu)\n", what, at, blockIdx.x,
            blockIdx.y, blockIdx.z, threadIdx.x, emu_dyn);
    exit(3);
}

void __syncthreads() { bar_wait(cta_bar); }
int __syncthreads_or(int p) {
    __syncthreads();
    if (p) or_acc |= 1;
    __syncthreads();
    const int r = or_acc;
    __syncthreads();
    if (threadIdx.x == 0) or_acc = 0;
    __syncthreads();
    return r;
}
int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static void warp_sync() { bar_wait(warp_bar[threadIdx.x / 32]); }
void __syncwarp() { warp_sync(); }
static uint32_t shfl_ubuf[EMU_WARPS][32];
uint32_t __shfl_sync(unsigned, uint32_t v, int src) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    shfl_ubuf[w][l] = v;
    warp_sync();
    const uint32_t r = shfl_ubuf[w][src & 31];
    warp_sync();
    return r;
}
static float shfl_buf[EMU_WARPS][32];
float __shfl_xor_sync(unsigned, float v, int off) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    shfl_buf[w][l] = v;
    warp_sync();
    const float r = shfl_buf[w][l ^ off];
    warp_sync();
    return r;
}
size_t __cvta_generic_to_shared(const void *p) {
    const long long o = (const char *)p - emu_smem;
    if (o < 0 || (size_t)o > emu_dyn) emu_fault("cvta outside shared memory", o);
    return (size_t)o;
}

// --- cp.async ---------------------------------------------------------------------------
struct cp_op { char *dst; const void *src; int valid; };
static std::vector<cp_op> cp_cur_of[EMU_THREADS];               // per thread
static std::deque<std::vector<cp_op>> cp_groups_of[EMU_THREADS];
#define cp_cur cp_cur_of[threadIdx.x]
#define cp_groups cp_groups_of[threadIdx.x]
void ptx_cp16(void *dst, const void *src, int valid) {
    const long long o = (char *)dst - emu_smem;
    if (o < 0 || (size_t)o + 16 > emu_dyn || o % 16) emu_fault("cp.async destination", o);
    cp_cur.push_back({(char *)dst, src, valid});
}
void ptx_cp_commit() { cp_groups.push_back(cp_cur), cp_cur.clear(); }
void emu_cp_wait(int n) {
    while ((int)cp_groups.size() > n) {
        for (auto &c : cp_groups.front()) c.valid ? (void)memcpy(c.dst, c.src, 16) : (void)memset(c.dst, 0, 16);
        cp_groups.pop_front();
    }
}

// --- ldmatrix and mma.sync (warp-collective) ------------------------------------------
static uint32_t addr_buf[EMU_WARPS][32], frag_a[EMU_WARPS][32][4], frag_b[EMU_WARPS][32][2];
// Rows of `nmat` 8x8 16-bit matrices from the lanes' row addresses.
static void ldmatrix(uint32_t addr, uint32_t *a, int nmat) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l < nmat * 8 && ((size_t)addr + 16 > emu_dyn || addr % 16)) emu_fault("ldmatrix row address", addr);
    addr_buf[w][l] = addr;
    warp_sync();
    for (int i = 0; i < nmat; i++) memcpy(&a[i], emu_smem + addr_buf[w][8 * i + l / 4] + 4 * (l % 4), 4);
    warp_sync();
}
void ptx_ldmatrix_x4(uint32_t addr, uint32_t *a) { ldmatrix(addr, a, 4); }
// The transposed form: per matrix, rows 2 (l % 4) and 2 (l % 4) + 1 at column l / 4.
void ptx_ldmatrix_x4_trans(uint32_t addr, uint32_t *a) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if ((size_t)addr + 16 > emu_dyn || addr % 16) emu_fault("ldmatrix row address", addr);
    addr_buf[w][l] = addr;
    warp_sync();
    for (int i = 0; i < 4; i++) {
        uint16_t e[2];
        for (int h = 0; h < 2; h++) memcpy(&e[h], emu_smem + addr_buf[w][8 * i + 2 * (l % 4) + h] + 2 * (l / 4), 2);
        a[i] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
    warp_sync();
}
void ptx_ldmatrix_x2(uint32_t addr, uint32_t *a) { ldmatrix(addr, a, 2); }
uint32_t ptx_lds_u16(uint32_t addr) {
    if ((size_t)addr + 2 > emu_dyn || addr % 2) emu_fault("shared load address", addr);
    uint16_t v;
    memcpy(&v, emu_smem + addr, 2);
    return v;
}
// Element e (0 low, 1 high) of a register holding two 16-bit values, as a float.
static float half_of(uint32_t r, int e, int bf16) {
    const uint16_t b = (uint16_t)(r >> (16 * e));
    if (bf16) { uint32_t f = (uint32_t)b << 16; float x; memcpy(&x, &f, 4); return x; }
    __half h; memcpy(&h, &b, 2); return __half2float(h);
}
void emu_mma(float *d, const uint32_t *a, const uint32_t *b, int k16, int bf16) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, t = l % 4, K = k16 ? 16 : 8;
    for (int i = 0; i < (k16 ? 4 : 2); i++) frag_a[w][l][i] = a[i];
    for (int i = 0; i < (k16 ? 2 : 1); i++) frag_b[w][l][i] = b[i];
    warp_sync();
    for (int j = 0; j < 4; j++) {
        const int row = g + (j >= 2 ? 8 : 0), col = 2 * t + (j & 1);
        float s = 0.0f;
        for (int k = 0; k < K; k++) {
            const int la = 4 * (row % 8) + (k % 8) / 2, ra = (row >= 8) + (k >= 8 ? 2 : 0);
            const int lb = 4 * col + (k % 8) / 2, rb = k >= 8;
            s += half_of(frag_a[w][la][ra], k % 2, bf16) * half_of(frag_b[w][lb][rb], k % 2, bf16);
        }
        d[j] += s;
    }
    warp_sync();
}

// --- the launch -------------------------------------------------------------------------
// kernel_tu.cpp, once per kernel file: calls fn with its argument struct.
void emu_run_halo(const void *fn, void **args);
void emu_run_direct(const void *fn, void **args);
void emu_run_tail(const void *fn, void **args);
void emu_run_vec(const void *fn, void **args);
static void (*emu_run_cta)(const void *fn, void **args) = emu_run_halo;  // the file of the kernel launched next
// A coroutine's body: the kernel for the CTA the launch loop set up, then back to the loop.
static const void *cta_fn;
static void **cta_args;
static void emu_fiber_main() {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &sched_bottom, &sched_size);
#endif
    emu_run_cta(cta_fn, cta_args);
    if (!cp_cur.empty() || !cp_groups.empty()) emu_fault("copies left in flight", 0);
    fibers[cur].done = 1;  // an ended thread no longer counts at the barriers
    cta_bar.need--, warp_bar[threadIdx.x / 32].need--;
    bar_open(cta_bar), bar_open(warp_bar[threadIdx.x / 32]);
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(NULL, sched_bottom, sched_size);
#endif
}  // (uc_link: back to the launch loop)

// Resumes thread t where it yielded: 1 when it got anywhere (it arrived at a
// barrier, passed one or ended), 0 when it found its barrier still closed.
static int emu_resume(unsigned t) {
    emu_fiber &f = fibers[t];
    cur = (int)t, threadIdx = {t, 0, 0};
    emu_switch(&sched_ctx, &f.ctx, f.stack, EMU_STACK, NULL, NULL);
    return f.done || !f.idle;
}

// Runs warp w's lanes until each has ended or waits at a closed CTA
// barrier: the number of threads that ended; *moved = 1 when any got anywhere.
static unsigned emu_run_warp(unsigned w, unsigned nthreads, int *moved) {
    unsigned ended = 0;
    for (int again = 1; again;) {
        again = 0;
        for (unsigned t = w * 32; t < w * 32 + 32 && t < nthreads; t++) {
            const emu_fiber &f = fibers[t];
            if (f.done || (f.at_cta && f.gen == cta_bar.gen)) continue;
            again |= emu_resume(t);
            ended += f.done;
        }
        *moved |= again;
    }
    return ended;
}

// Runs one CTA's nthreads threads to the end, one warp at a time: each
// warp, in an order drawn anew (seeded per CTA, so a run repeats) after
// every CTA barrier, runs until all its lanes wait at the next one, so
// that a warp reading what another writes without a barrier between them
// reads it before it is written in about half the draws.
static void emu_run_block(unsigned nthreads, uint64_t seed) {
    static char *stacks = NULL;
    if (!stacks) {
        stacks = (char *)mmap(NULL, EMU_STACK * EMU_THREADS, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (stacks == MAP_FAILED) { fprintf(stderr, "emulation: no memory for the stacks\n"); exit(3); }
    }
    for (unsigned t = 0; t < nthreads; t++) {
        emu_fiber &f = fibers[t];
        f.stack = stacks + t * EMU_STACK, f.done = f.idle = f.at_cta = 0;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack, f.ctx.uc_stack.ss_size = EMU_STACK, f.ctx.uc_link = &sched_ctx;
        makecontext(&f.ctx, emu_fiber_main, 0);
    }
    const unsigned nw = (nthreads + 31) / 32;
    unsigned order[EMU_WARPS], left = nthreads;
    for (unsigned w = 0; w < nw; w++) order[w] = w;
    while (left) {
        for (unsigned i = nw - 1; i > 0; i--) {  // Fisher-Yates with a 64-bit LCG
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            std::swap(order[i], order[(seed >> 33) % (i + 1)]);
        }
        int moved = 0;
        for (unsigned i = 0; i < nw; i++) left -= emu_run_warp(order[i], nthreads, &moved);
        if (left && !moved) emu_fault("deadlock: threads wait at a barrier the others never reach", 0);
    }
}

cudaError_t emu_launch(const void *fn, dim3 grid, dim3 block, void **args, size_t smem) {
    const size_t canary = 4096;
    if (block.x > EMU_THREADS || block.x % 32) { fprintf(stderr, "emulation: %u threads per CTA\n", block.x); exit(3); }
    gridDim = grid, blockDim = block, emu_dyn = smem, cta_fn = fn, cta_args = args;
    std::vector<char> buf(smem + canary);
    emu_smem = buf.data();
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                memset(emu_smem, 0xA7, smem + canary);  // shared memory starts with anything in it
                blockIdx = {bx, by, bz};
                cta_bar = {(int)block.x, 0, 0};
                for (unsigned w = 0; w < block.x / 32; w++) warp_bar[w] = {32, 0, 0};
                emu_run_block(block.x, ((uint64_t)bz * grid.y + by) * grid.x + bx + 1);
                for (size_t i = smem; i < smem + canary; i++)
                    if ((unsigned char)emu_smem[i] != 0xA7) emu_fault("store past the dynamic shared memory", (long long)i);
            }
    return cudaSuccess;
}

// --- the runtime calls of kernels/bsconv_halo.cu, on host memory ------------------------
extern "C" {
cudaError_t cudaMalloc(void **p, size_t n) { *p = aligned_alloc(256, (n + 255) / 256 * 256); return cudaSuccess; }
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaFuncSetAttribute(const void *, enum cudaFuncAttribute, int) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t) { return "emulated error"; }
int gpu_upload(void *dst, const void *src, size_t n, sc_err *) { memcpy(dst, src, n); return 0; }
int gpu_new_upload(void **dst, const void *src, size_t n, sc_err *e) {
    cudaMalloc(dst, n ? n : 16);
    return gpu_upload(*dst, src, n, e);
}
int nhwc_from_f32_gpu(const gpu_ctx *, gpu_dtype dt, size_t n, const float *x, void *y, sc_err *) {
    for (size_t i = 0; i < n; i++)
        if (dt == GDT_BF16) ((__nv_bfloat16 *)y)[i] = __float2bfloat16_rn(x[i]);
        else ((__half *)y)[i] = __float2half_rn(x[i]);
    return 0;
}
int nhwc_new_from_host_f32(const gpu_ctx *g, gpu_dtype dt, size_t n, const float *x, void **y, sc_err *e) {
    cudaMalloc(y, n * 2 + 16);  // the kernels emulated here store 16-bit values
    return nhwc_from_f32_gpu(g, dt, n, x, *y, e);
}
}

// --- the cases --------------------------------------------------------------------------
// n floats as dt (16-bit) with the host copy rounded to the stored values.
static std::vector<uint16_t> to16(float *h, size_t n, gpu_dtype dt, size_t extra = 0) {
    std::vector<uint16_t> v(n + extra, 0xFFFF);
    nhwc_from_f32_gpu(NULL, dt, n, h, v.data(), NULL);
    for (size_t i = 0; i < n; i++) h[i] = half_of(v[i], 0, dt == GDT_BF16);
    return v;
}

// The emulated GPU: an H100's shared memory, EMU_SMS SMs (default 132; few:
// persistent CTAs walk many tiles).
static gpu_ctx emu_gpu() {
    gpu_ctx g = {};
    g.dev.sms = getenv("EMU_SMS") ? atoi(getenv("EMU_SMS")) : 132;
    g.dev.smem_block_optin = 232448, g.dev.smem_block = 49152;
    return g;
}

// Which kernel a variant number of main's list names: halo v >= 0, direct -1 - v, vector -100 - v.
enum kind { K_HALO, K_DIRECT, K_VEC };
static kind kind_of(int v) { return v >= 0 ? K_HALO : v > -100 ? K_DIRECT : K_VEC; }
static int variant_of(int v) { return v >= 0 ? v : v > -100 ? -1 - v : -100 - v; }

// Runs layer L (one the vector kernel applies to) on vector variant v in dt (x, z, y as the GPU
// would hold them): 0, or -1 when the variant does not run the layer (nothing written).
static int run_vec(const bsc_layer &L, int v, gpu_dtype dt, const uint16_t *x, const uint16_t *z, uint16_t *y) {
    const gpu_ctx g = emu_gpu();
    sc_err err = {{0}};
    bsconv_vpack p;
    bsv_gpu d;
    if (bsconv_vpack_build(&L.s, &L.w, &p, &err) || bsv_gpu_upload(&g, &p, dt, &d, &err)) { printf("upload: %s\n", err.msg); exit(1); }
    bsconv_vpack_free(&p);
    emu_run_cta = emu_run_vec;
    int rc = bsv_gpu_prepare(&g, &L.s, dt, v, &d, &err) == 0 ? 0 : -1;
    if (!rc) bsv_gpu_run(&g, &L.s, &d, dt, v, L.bias, x, z, y, &err);
    bsv_gpu_free(&d);
    return rc;
}

// Case c on halo variant hv (direct: direct variant hv; vector: vector variant hv) in dt, hybrid with a
// remainder of density rem when rem > 0: 1 pass, 0 fail, 2 the variant does not run it.
static int run(const bsc_case *c, uint64_t seed, int hv, gpu_dtype dt, kind k, double rem = 0.0) {
    const bool direct = k == K_DIRECT;
    bsc_layer L;
    sc_err err = {{0}};
    char name[200];
    bsc_case_name(c, name, sizeof name);
    bsc_make(c, seed, &L);
    to16(L.data, (size_t)L.nblocks * c->kb * c->cb, dt);
    if (rem > 0) {
        bsc_add_rem(&L, rem, seed + 77);
        to16(L.rem_data, (size_t)L.rem_indptr[c->K], dt);
        snprintf(name + strlen(name), sizeof name - strlen(name), " rem %d", L.rem_indptr[c->K]);
    }
    bsconv_hpack h = {};  // (zeroed: freeing them is fine when the vector kernel leaves them unused)
    bsh_gpu d = {};
    const gpu_ctx g = emu_gpu();
    int rc = 2;
    uint32_t *codes = NULL;
    const bool applies = k == K_VEC ? bsconv_vec_applies(&L.s, &L.w, NULL, 0)
                         : direct ? bsconv_direct_applies(&L.s, &L.w, NULL, 0) : bsconv_halo_applies(&L.s, &L.w, NULL, 0);
    if (applies && (k == K_VEC || bsconv_hpack_build(&L.s, &L.w, &h, &err) == 0)) {
        if (k != K_VEC && (bsh_gpu_upload(&g, &h, dt, &d, &err) || bsh_gpu_split_alloc(&g, &L.s, &d, &err) ||
                           (direct && bsd_gpu_upload(&h, &codes, &err)))) { printf("upload: %s\n", err.msg); exit(1); }
        emu_run_cta = direct ? emu_run_direct : emu_run_halo;
        std::vector<uint16_t> x = to16(L.x, L.nx, dt), z, y((L.ny + 64), 0xFFFF);
        if (L.z) z = to16(L.z, L.ny, dt);
        bool runs = k == K_VEC || direct || bsh_gpu_prepare(&g, &L.s, &d, dt, hv, &err) == 0;  // every direct variant runs every layer
        for (int rep = 0; runs && rep < 2; rep++) {  // twice, as the GPU test: the split counters reset
            std::fill(y.begin(), y.end(), 0xFFFF);
            if (k == K_VEC) runs = run_vec(L, hv, dt, x.data(), L.z ? z.data() : NULL, y.data()) == 0;
            else if (direct) bsd_gpu_run(&g, &L.s, &d, codes, dt, hv, L.bias, x.data(), L.z ? z.data() : NULL, y.data(), &err);
            else bsh_gpu_run(&g, &L.s, &d, dt, hv, L.bias, x.data(), L.z ? z.data() : NULL, y.data(), &err);
        }
        if (runs) {
            std::vector<float> got(L.ny + 1), want(L.ny + 1);
            std::vector<double> wantd(L.ny + 1), scale(L.ny + 1);
            for (size_t i = 0; i < L.ny; i++) got[i] = half_of(y[i], 0, dt == GDT_BF16);
            int guard = 1;
            for (int i = 0; i < 64; i++) guard &= y[L.ny + i] == 0xFFFF;
            bsconv_forward_cpu(&L.s, &L.w, L.bias, L.x, L.z, want.data());
            float *wd = bsc_dense_weights(&L);
            bsc_dense_conv(&L, wd, 1, scale.data());
            free(wd);
            for (size_t i = 0; i < L.ny; i++) wantd[i] = want[i];
            size_t at = 0;
            const double w = bsc_worst(got.data(), wantd.data(), scale.data(), L.ny,
                                       1.01 * (dt == GDT_BF16 ? 1.0 / 256 : 1.0 / 2048), 5e-5, &at);
            rc = w <= 1.0 && guard;
            printf("%s %s %s %d %s: worst %.3g (y[%zu] = %g, want %g)%s\n", rc ? "ok  " : "FAIL",
                   dt == GDT_BF16 ? "bf16" : "fp16", k == K_VEC ? "vector" : direct ? "direct" : "halo", hv, name, w, at,
                   got[at], want[at], guard ? "" : " guard overwritten");
            fflush(stdout);
        }
        bsh_gpu_free(&d);
        cudaFree(codes);
        bsconv_hpack_free(&h);
    }
    bsc_free(&L);
    return rc;
}

// The tail kernel on chain sp (its first nops convs) for n images at block
// sparsity spars (op 2 with an empty block row when empty), against the
// plain-C chain as gpu_test_tail checks it: 1 pass, 0 fail.
static int run_tail(const char *what, const tail_spec *sp, int nops, int n, double spars, int empty, uint64_t seed) {
    bsc_layer L[TAIL_MAXOPS] = {};
    bst_w w[TAIL_MAXOPS] = {};
    bst_op ops[TAIL_MAXOPS];
    sc_err err = {{0}};
    const gpu_ctx g = emu_gpu();
    tail_layers_make(L, sp, nops, n, spars, empty, seed);
    for (int k = 0; k < nops; k++) {
        bsconv_hpack h;
        if (bsconv_hpack_build(&L[k].s, &L[k].w, &h, &err) || bst_gpu_upload(&g, &L[k].s, &h, &w[k], &err)) {
            printf("upload: %s\n", err.msg);
            exit(1);
        }
        bsconv_hpack_free(&h);
        ops[k] = (bst_op){L[k].s, &w[k], L[k].bias, sp[k].in, sp[k].out, sp[k].res, sp[k].pre};
    }
    char why[160];
    const size_t ny = L[nops - 1].ny;
    std::vector<uint16_t> x = to16(L[0].x, L[0].nx, GDT_F16), y(ny + 64, 0xFFFF);
    emu_run_cta = emu_run_tail;
    int rc = bst_gpu_applies(&g, ops, nops, why, sizeof why) && bst_gpu_prepare(&g, &err) == 0 &&
             bst_gpu_run(&g, ops, nops, n, x.data(), y.data(), &err) == 0;
    if (!rc) printf("FAIL tail %s: %s%s\n", what, why, err.msg);
    if (rc) {
        std::vector<float> got(ny);
        int guard = 1;
        for (size_t i = 0; i < ny; i++) got[i] = half_of(y[i], 0, 0);
        for (int i = 0; i < 64; i++) guard &= y[ny + i] == 0xFFFF;
        size_t at = 0;
        const double worst = tail_worst(L, sp, nops, got.data(), &at);
        rc = worst <= 1.0 && guard;
        printf("%s tail %s n%d sp%.2f%s: worst %.3g of tolerance (y[%zu] = %g)%s\n", rc ? "ok  " : "FAIL", what, n, spars,
               empty ? " empty-row" : "", worst, at, got[at], guard ? "" : " guard overwritten");
    }
    fflush(stdout);
    for (int k = 0; k < nops; k++) bst_gpu_free(&w[k]), bsc_free(&L[k]);
    return rc;
}

// argv: halo variants to run (default: every halo and every direct variant,
// then the tail chains; "tail": the tail chains only), then with -s N only
// shape N; EMU_FULL=1: every sparsity in fp16 and bf16.
// A segmentation fault (a wild pointer the GPU would fault on too) named
// like the emulator's own faults, with the CTA and thread that made it.
static void emu_segv(int) { emu_fault("segmentation fault", 0); }

int main(int argc, char **argv) {
#ifndef EMU_ASAN
    signal(SIGSEGV, emu_segv);
#endif
    std::vector<int> vs;
    int shape = -1;
    bool tail_only = false, vec_only = false;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-s") && i + 1 < argc) shape = atoi(argv[++i]);
        else if (!strcmp(argv[i], "tail")) tail_only = true;
        else if (!strcmp(argv[i], "vec")) vec_only = true;
        else vs.push_back(atoi(argv[i]));
    const bool all = vs.empty() && !tail_only && !vec_only;  // then the direct and vector variants too
    if (all) for (int v = 0; v < BSH_VARIANTS; v++) vs.push_back(v);
    if (all) for (int v = 0; v < BSD_VARIANTS; v++) vs.push_back(-1 - v);
    const bool full = getenv("EMU_FULL") && atoi(getenv("EMU_FULL"));  // else sparsities 0.5 and 0.95 in fp16
    // The vector variants: all of them by default and with "vec".
    for (int v = 0; (all || vec_only) && v < BSV_VARIANTS; v++) vs.push_back(-100 - v);
    int n[3] = {0, 0, 0};
    for (int v : vs)
        for (int si = 0; si < BSC_GPU_SHAPES; si++)
            for (int pi = full ? 0 : 1; pi < (full ? BSC_GPU_SPARSITIES : 3) && (shape < 0 || si == shape); pi++) {
                const bsc_case c = bsc_gpu_case(si, pi);
                for (int dt = 0; dt < (full ? 2 : 1); dt++)
                    n[run(&c, 1000 + 10 * si + pi, variant_of(v), dt ? GDT_BF16 : GDT_F16, kind_of(v))]++;
            }
    // Hybrid layers (blocks plus single weights): the halo variants that take a
    // remainder; the others and the direct kernel refuse it (counted as not run).
    for (int v : vs)
        for (int si = 0; si < BSC_GPU_SHAPES; si++)
            for (int pi = full ? 0 : 2; pi < (full ? BSC_GPU_SPARSITIES : 3) && (shape < 0 || si == shape); pi++) {
                const bsc_case c = bsc_gpu_case(si, pi);
                for (int dt = 0; dt < (full ? 2 : 1); dt++)
                    n[run(&c, 2000 + 10 * si + pi, variant_of(v), dt ? GDT_BF16 : GDT_F16, kind_of(v), 0.03)]++;
            }
    // The tail kernel on gpu_test_tail's chains (sparse ones: each emulated CTA is 1,024 threads).
    if (all || tail_only) {
        n[run_tail("resnet18 layer4", R18_L4, 5, 2, 0.95, 1, 31)]++;
        n[run_tail("resnet18 layer3+4", R18_TAIL, 10, 1, 0.9, 0, 32)]++;
        n[run_tail("vgg16 conv5-13", VGG_TAIL, 9, 2, 0.9, 1, 33)]++;
        n[run_tail("vgg16 conv5-7", VGG_TAIL, 3, 1, 0.5, 0, 34)]++;
        n[run_tail("vgg16 conv8-13", VGG_LATE, 6, 2, 0.9, 1, 35)]++;
    }
    printf("halo, direct, vector and tail emulation (%d case-variant pairs the variant does not run): %d passed, %d failed, 0 skipped\n",
           n[2], n[1], n[0]);
    return n[0] != 0;
}
