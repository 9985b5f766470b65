// Block-sparse implicit-GEMM convolution on tensor cores (kernels/bsconv_gpu.h):
// the packed layer (kernels/bsconv.h, bsconv_pack) uploaded once, and a WMMA
// kernel per element type, pixel tile and group width.
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv_direct_gpu.h"
#include "kernels/bsconv_gpu.h"
#include "kernels/bsconv_halo_gpu.h"
#include "kernels/bsconv_vec_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/nhwc_ops_gpu.h"
#include "kernels/ptx_gpu.h"

using namespace nvcuda;

static_assert(BSCONV_DIRECT_FIRST == BSCONV_GATHER_VARIANTS + BSH_VARIANTS, "halo variants follow the gather ones");
static_assert(BSCONV_VEC_FIRST == BSCONV_DIRECT_FIRST + BSD_VARIANTS, "direct variants follow the halo ones");
static_assert(BSCONV_GPU_VARIANTS == BSCONV_VEC_FIRST + BSV_VARIANTS, "vector variants follow the direct ones");

#define BSK_WARPS 4                 // warps per CTA
#define BSK_THREADS (BSK_WARPS * 32)
#define BSK_FM 32                   // pixel rows of one WMMA fragment (32x8x16)
#define BSK_LDA 24                  // A tile row stride in elements: 48-byte rows, so the
                                    // 8 rows of a fragment load hit distinct banks

struct bsconv_gpu {
    bsconv_shape s;
    int P, Q, Po, Qo, win, kb, cb, nblocks;  // conv plane, y plane, pool window (1: none)
    gpu_dtype dt;
    int nrem;                              // the remainder's entries: only halo variants run them
    int np, ngroups, ncols, vec, vec_out;  // from the packed layout; vec_out: every group
                                           // starts at a multiple of 8 channels and K % 8 == 0
    int variant;                           // < BSCONV_GATHER_VARIANTS: bsk_variant_of (pixel
                                           // tile, pipelining); then halo variant - that;
                                           // from BSCONV_DIRECT_FIRST direct variant - that
    int halo;                              // 1: the halo kernel applies (h uploaded)
    char no_halo[120];                     // else why not
    bsh_gpu h;                             // the halo kernel's weights
    uint32_t *dcodes;                      // device: the direct kernel's unit codes (NULL: it does not apply)
    char no_direct[120];                   // why not
    int vk;                                // 1: the vector kernel applies (v uploaded)
    char no_vec[120];                      // else why not
    bsv_gpu v;                             // the vector kernel's weights
    bsconv_group *grp;                     // device (ngroups)
    uint32_t *cols;                        // device (ncols)
    void *vals;                            // device (ncols * np) of dt, fragment order
    float *bias;                           // device (K) or NULL
};

// What the kernel reads (passed by value).
struct bsk_args {
    const void *x, *z;
    void *y;
    const float *bias;
    const bsconv_group *grp;
    const uint32_t *cols;
    const void *vals;
    int H, W, C, K, stride, pad, relu;
    int Po, Qo, win;  // y plane and pool window side (1: no pool)
    int npq;      // GEMM rows: conv pixels n * Po * Qo * win * win, each pool window's
                  // win * win pixels consecutive
    int vec;      // gather 16-byte vectors (cb % 8 == 0 and x 16-byte aligned)
    int vec_out;  // 16-byte epilogue loads and stores
    int dep_early;  // 1: the next kernel may start from this one's start (gpu_ctx.pdl 2)
};

// --- the kernel -----------------------------------------------------------------------

// Shared memory of one CTA with ROWS pixel rows and NBUF A tiles.
template <typename T, int ROWS, int NBUF> struct bsk_smem {
    T a[NBUF][ROWS * BSK_LDA];         // gathered A tiles of one k-step each (ROWS x 16)
    float out[BSK_WARPS][BSK_FM * 8];  // one accumulator fragment per warp, for the epilogue
    int h0[ROWS], w0[ROWS], img[ROWS];  // window origin of each pixel row; img -1: past the end
};

// Window origin of the CTA's pixel rows: row m is conv pixel (m % win^2) of
// the pool window of y pixel m / win^2 (without a pool, conv pixel m).
template <typename SM>
__device__ __forceinline__ void bsk_pixels(const bsk_args &a, int m0, int rows, SM &sm) {
    const int ww = a.win * a.win;
    for (int i = threadIdx.x; i < rows; i += BSK_THREADS) {
        const int m = m0 + i;
        if (m >= a.npq) {
            sm.img[i] = -1, sm.h0[i] = 0, sm.w0[i] = 0;
            continue;
        }
        const int pm = m / ww, wi = m % ww;
        const int q = pm % a.Qo * a.win + wi % a.win, p = pm / a.Qo % a.Po * a.win + wi / a.win;
        sm.img[i] = pm / (a.Po * a.Qo);
        sm.h0[i] = p * a.stride - a.pad, sm.w0[i] = q * a.stride - a.pad;
    }
}

// Element offset in x of column `code` for pixel row i, or -1 when it reads padding.
template <typename SM>
__device__ __forceinline__ long long bsk_src(const bsk_args &a, const SM &sm, int i, uint32_t code) {
    if (code == BSCONV_PAD || sm.img[i] < 0) return -1;
    const int h = sm.h0[i] + (int)(code & 255u), w = sm.w0[i] + (int)(code >> 8 & 255u);
    if (h < 0 || h >= a.H || w < 0 || w >= a.W) return -1;
    return (((long long)sm.img[i] * a.H + h) * a.W + w) * a.C + (code >> 16);
}

// Gathers the A tile (into sa) of the k-step at packed column col: 16-byte
// runs of 8 channels, synchronously or (ASYNC) by cp.async left in flight.
template <typename T, int ROWS, bool ASYNC, typename SM>
__device__ __forceinline__ void bsk_gather_vec(const bsk_args &a, int col, const SM &sm, T *sa) {
    const T *x = (const T *)a.x;
    for (int i = threadIdx.x; i < ROWS * 2; i += BSK_THREADS) {
        const int row = i >> 1, half = i & 1;
        const long long src = bsk_src(a, sm, row, __ldg(a.cols + col + half * 8));
        T *dst = sa + row * BSK_LDA + half * 8;
        if (ASYNC) {
            ptx_cp16(dst, src >= 0 ? x + src : x, src >= 0);
            continue;
        }
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (src >= 0) v = __ldg(reinterpret_cast<const uint4 *>(x + src));
        *reinterpret_cast<uint4 *>(dst) = v;
    }
}

// Gathers the A tile (into sa) of the k-step at packed column col, one element at a time.
template <typename T, int ROWS, typename SM>
__device__ __forceinline__ void bsk_gather_scalar(const bsk_args &a, int col, const SM &sm, T *sa) {
    const T *x = (const T *)a.x;
    for (int i = threadIdx.x; i < ROWS * BSCONV_KSTEP; i += BSK_THREADS) {
        const int row = i / BSCONV_KSTEP, k = i % BSCONV_KSTEP;
        const long long src = bsk_src(a, sm, row, __ldg(a.cols + col + k));
        sa[row * BSK_LDA + k] = src >= 0 ? x[src] : sc_fromf<T>(0.0f);
    }
}

// Starts the gather of k-step tile (col) into sa: cp.async when PIPE and the
// layer gathers vectors (the caller commits and waits), else synchronous.
template <typename T, int ROWS, bool PIPE, typename SM>
__device__ __forceinline__ void bsk_gather(const bsk_args &a, int col, const SM &sm, T *sa) {
    if (a.vec) bsk_gather_vec<T, ROWS, PIPE>(a, col, sm, sa);
    else bsk_gather_scalar<T, ROWS>(a, col, sm, sa);
}

// v[j] = act(v[j] + bias[k + j] [+ z[o + j]]) for j < nj (8: z read as one vector).
template <typename T>
__device__ __forceinline__ void bsk_act(const bsk_args &a, size_t o, int k, int nj, float *v) {
    sc_pack<T> zp;
    const bool zvec = a.z && a.vec_out && nj == 8;
    if (zvec) zp.raw = *reinterpret_cast<const uint4 *>((const T *)a.z + o);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (j >= nj) break;
        float r = v[j] + (a.bias ? __ldg(a.bias + k + j) : 0.0f);
        if (a.z) r += sc_tof(zvec ? zp.v[j] : ((const T *)a.z)[o + j]);
        v[j] = a.relu ? fmaxf(r, 0.0f) : r;
    }
}

// y[o + j] = v[j] for j < nj (8: one vector store).
template <typename T> __device__ __forceinline__ void bsk_store(const bsk_args &a, size_t o, int nj, const float *v) {
    if (a.vec_out && nj == 8) {
        sc_pack<T> yp;
#pragma unroll
        for (int j = 0; j < 8; j++) yp.v[j] = sc_fromf<T>(v[j]);
        *reinterpret_cast<uint4 *>((T *)a.y + o) = yp.raw;
        return;
    }
    for (int j = 0; j < nj; j++) ((T *)a.y)[o + j] = sc_fromf<T>(v[j]);
}

// v = the max of v over the win * win consecutive lanes of a pool window
// (lane groups aligned to win * win, a power of two dividing 32).
__device__ __forceinline__ void bsk_pool_lanes(int win, float *v) {
    for (int off = 1; off < win * win; off <<= 1)
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = fmaxf(v[j], __shfl_xor_sync(0xffffffffu, v[j], off));
}

// Writes the 8-channel column f of the warp's pixel-row fragment i from
// sm.out: act, pool over lanes, the window's first lane stores y pixel m / win^2.
template <typename T, typename SM>
__device__ __forceinline__ void bsk_epilogue(const bsk_args &a, const bsconv_group &g, SM &sm,
                                             int m, int f, int warp, int lane) {
    const int j0 = f * 8, ww = a.win * a.win;
    if (j0 >= g.nk) return;  // the same for the whole warp
    const int nj = min(8, g.nk - j0), k = g.k0 + j0;
    const size_t o = (size_t)(m / ww) * a.K + k;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = sm.out[warp][lane * 8 + j];
    if (m < a.npq) bsk_act<T>(a, o, k, nj, v);
    if (ww > 1) bsk_pool_lanes(a.win, v);  // every lane takes part
    if (m < a.npq && m % ww == 0) bsk_store<T>(a, o, nj, v);
}

// acc += the warp's rows of A tile sa x the weights of the k-step at packed column col.
template <typename T, int MF, int NF, typename ACC>
__device__ __forceinline__ void bsk_mma(const T *sa, const T *vals, int col, int warp, ACC &acc) {
    wmma::fragment<wmma::matrix_a, BSK_FM, 8, 16, T, wmma::row_major> fa[MF];
#pragma unroll
    for (int i = 0; i < MF; i++)
        wmma::load_matrix_sync(fa[i], sa + (warp * MF + i) * BSK_FM * BSK_LDA, BSK_LDA);
#pragma unroll
    for (int f = 0; f < NF; f++) {
        wmma::fragment<wmma::matrix_b, BSK_FM, 8, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fb, vals + ((size_t)(col / BSCONV_KSTEP) * NF + f) * 128, 8);
#pragma unroll
        for (int i = 0; i < MF; i++) wmma::mma_sync(acc[i][f], fa[i], fb, acc[i][f]);
    }
}

// The k-steps one after another: gather, sync, multiply, sync.
template <typename T, int MF, int NF, typename SM, typename ACC>
__device__ __forceinline__ void bsk_steps_plain(const bsk_args &a, const bsconv_group &g, SM &sm,
                                                int warp, ACC &acc) {
    constexpr int ROWS = BSK_WARPS * MF * BSK_FM;
    for (int t = 0; t < g.steps; t++) {
        const int col = g.col0 + t * BSCONV_KSTEP;
        __syncthreads();  // the pixel table is written; the previous tile is consumed
        bsk_gather<T, ROWS, false>(a, col, sm, sm.a[0]);
        __syncthreads();
        bsk_mma<T, MF, NF>(sm.a[0], (const T *)a.vals, col, warp, acc);
    }
}

// The k-steps through NBUF A buffers: the gathers (cp.async for vector
// layers) run NBUF - 1 steps ahead of the multiply, so a CTA keeps that many
// in flight (small planes have few CTAs and long chains of short steps).
// One barrier per step: after it, step t is visible and step t - 1 consumed,
// so its buffer takes the gather of step t + NBUF - 1.
template <typename T, int MF, int NF, int NBUF, typename SM, typename ACC>
__device__ __forceinline__ void bsk_steps_pipe(const bsk_args &a, const bsconv_group &g, SM &sm,
                                               int warp, ACC &acc) {
    constexpr int ROWS = BSK_WARPS * MF * BSK_FM;
    static_assert(NBUF >= 2, "a pipeline needs two buffers");
    __syncthreads();  // the pixel table is written
#pragma unroll
    for (int t = 0; t < NBUF - 1; t++) {
        if (t < g.steps) bsk_gather<T, ROWS, true>(a, g.col0 + t * BSCONV_KSTEP, sm, sm.a[t]);
        ptx_cp_commit();  // empty groups keep the count of groups in flight fixed
    }
    for (int t = 0; t < g.steps; t++) {
        ptx_cp_wait<NBUF - 2>();
        __syncthreads();
        const int tn = t + NBUF - 1;
        if (tn < g.steps) bsk_gather<T, ROWS, true>(a, g.col0 + tn * BSCONV_KSTEP, sm, sm.a[tn % NBUF]);
        ptx_cp_commit();
        bsk_mma<T, MF, NF>(sm.a[t % NBUF], (const T *)a.vals, g.col0 + t * BSCONV_KSTEP, warp, acc);
    }
}

// A buffers of the pipelined variants: more stages for the smaller tile, both
// under the 48 KB of static shared memory.
template <int MF> struct bsk_stages {
    static constexpr int n = MF == 1 ? 6 : 3;
};

// One CTA: ROWS = BSK_WARPS * MF * 32 output pixels x the NF * 8 channels of
// group blockIdx.y; warp w owns pixel rows [w * MF * 32, (w + 1) * MF * 32).
// PIPE: the k-steps pipelined through bsk_stages<MF>::n buffers.
template <typename T, int MF, int NF, bool PIPE>
__global__ void __launch_bounds__(BSK_THREADS) bsk_kernel(bsk_args a) {
    constexpr int ROWS = BSK_WARPS * MF * BSK_FM, NBUF = PIPE ? bsk_stages<MF>::n : 1;
    __shared__ __align__(128) bsk_smem<T, ROWS, NBUF> sm;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bsconv_group g = a.grp[blockIdx.y];
    const int m0 = blockIdx.x * ROWS;
    if (a.dep_early) ptx_dep_launch();  // else after the main loop, below
    bsk_pixels(a, m0, ROWS, sm);
    wmma::fragment<wmma::accumulator, BSK_FM, 8, 16, float> acc[MF][NF];
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int f = 0; f < NF; f++) wmma::fill_fragment(acc[i][f], 0.0f);
    ptx_dep_wait();  // x and z come from earlier kernels (weights and tables are the layer's own)
    if constexpr (PIPE) bsk_steps_pipe<T, MF, NF, NBUF>(a, g, sm, warp, acc);
    else bsk_steps_plain<T, MF, NF>(a, g, sm, warp, acc);
    ptx_dep_launch();  // the next kernel may start its preamble during this epilogue
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int f = 0; f < NF; f++) {
            wmma::store_matrix_sync(sm.out[warp], acc[i][f], 8, wmma::mem_row_major);
            __syncwarp();
            bsk_epilogue<T>(a, g, sm, m0 + (warp * MF + i) * BSK_FM + lane, f, warp, lane);
            __syncwarp();
        }
}

// --- launch ---------------------------------------------------------------------------

// Pixel tile (MF: 32-row fragments per warp) and pipelining of variant v.
static void bsk_variant_of(int v, int *mf, bool *pipe) {
    *mf = v & 1 ? 2 : 1;
    *pipe = v >= 2;
}

// Shared memory bytes of a CTA of variant v (16-bit elements).
static size_t bsk_smem_bytes(int v) {
    constexpr int R1 = BSK_WARPS * BSK_FM, R2 = 2 * R1;
    const size_t sz[4] = {sizeof(bsk_smem<__half, R1, 1>), sizeof(bsk_smem<__half, R2, 1>),
                          sizeof(bsk_smem<__half, R1, bsk_stages<1>::n>),
                          sizeof(bsk_smem<__half, R2, bsk_stages<2>::n>)};
    return sz[v];
}

// Launches kernel<T, MF, NF, PIPE> for the layer's group width (sc_launch).
template <typename T, int MF, bool PIPE>
static cudaError_t bsk_launch_nf(const gpu_ctx *g, const bsconv_gpu *b, bsk_args a, dim3 grid) {
    const void *fn = b->np / 8 == 1   ? (const void *)bsk_kernel<T, MF, 1, PIPE>
                     : b->np / 8 == 2 ? (const void *)bsk_kernel<T, MF, 2, PIPE>
                     : b->np / 8 == 4 ? (const void *)bsk_kernel<T, MF, 4, PIPE>
                                      : (const void *)bsk_kernel<T, MF, 8, PIPE>;
    void *args[] = {&a};
    return sc_launch(g, fn, grid, dim3(BSK_THREADS), 0, args);
}

// Launches the kernel for element type T with the layer's variant.
template <typename T>
static cudaError_t bsk_launch(const gpu_ctx *g, const bsconv_gpu *b, const bsk_args &a) {
    int mf;
    bool pipe;
    bsk_variant_of(b->variant, &mf, &pipe);
    const int rows = BSK_WARPS * BSK_FM * mf;
    const dim3 grid((unsigned)((a.npq + rows - 1) / rows), (unsigned)b->ngroups);
    if (mf == 1 && !pipe) return bsk_launch_nf<T, 1, false>(g, b, a, grid);
    if (mf == 2 && !pipe) return bsk_launch_nf<T, 2, false>(g, b, a, grid);
    if (mf == 1) return bsk_launch_nf<T, 1, true>(g, b, a, grid);
    return bsk_launch_nf<T, 2, true>(g, b, a, grid);
}

// True when p is 16-byte aligned (NULL counts as aligned).
static bool bsk_al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// True when p is 4-byte aligned (NULL counts as aligned).
static bool bsk_al4(const void *p) { return ((uintptr_t)p & 3u) == 0; }

// Queues y = act(conv(x, w) + bias [+ z]).
extern "C" int bsconv_gpu_run(const gpu_ctx *g, const bsconv_gpu *b, const void *x, const void *z,
                              void *y, sc_err *err) {
    const bsconv_shape *s = &b->s;
    bsk_args a;
    a.x = x, a.z = z, a.y = y, a.bias = b->bias, a.grp = b->grp, a.cols = b->cols, a.vals = b->vals;
    if (z && b->win > 1) return sc_fail(err, "block-sparse conv: no residual with a pool");
    a.H = s->H, a.W = s->W, a.C = s->C, a.K = s->K, a.Po = b->Po, a.Qo = b->Qo, a.win = b->win;
    a.stride = s->stride, a.pad = s->pad, a.relu = s->relu;
    if (b->variant >= BSCONV_VEC_FIRST && bsk_al16(x) && bsk_al4(y) && bsk_al4(z))
        return bsv_gpu_run(g, s, &b->v, b->dt, b->variant - BSCONV_VEC_FIRST, b->bias, x, z, y, err);
    if (b->variant >= BSCONV_DIRECT_FIRST && b->variant < BSCONV_VEC_FIRST && bsk_al4(x) && bsk_al4(y) && bsk_al4(z))
        return bsd_gpu_run(g, s, &b->h, b->dcodes, b->dt, b->variant - BSCONV_DIRECT_FIRST, b->bias, x, z, y, err);
    if (b->variant >= BSCONV_GATHER_VARIANTS && b->variant < BSCONV_DIRECT_FIRST && bsk_al16(x) && bsk_al4(y) &&
        bsk_al4(z))
        return bsh_gpu_run(g, s, &b->h, b->dt, b->variant - BSCONV_GATHER_VARIANTS, b->bias, x, z, y, err);
    if (b->nrem) return sc_fail(err, "block-sparse conv: a hybrid layer needs x 16-byte and y, z 4-byte aligned");
    a.npq = s->n * b->Po * b->Qo * b->win * b->win;
    a.vec = b->vec && bsk_al16(x);
    a.vec_out = b->vec_out && bsk_al16(y) && bsk_al16(z);
    a.dep_early = g->pdl == 2;
    cudaCheck(err, b->dt == GDT_BF16 ? bsk_launch<__nv_bfloat16>(g, b, a) : bsk_launch<__half>(g, b, a));
    return 0;
}

// --- create -------------------------------------------------------------------------

// Sets the pixel tile of a layer (checked against the device's shared memory per block).
extern "C" int bsconv_gpu_set_variant(const gpu_ctx *g, bsconv_gpu *b, int v, sc_err *err) {
    if (v < 0 || v >= BSCONV_GPU_VARIANTS)
        return sc_fail(err, "block-sparse conv: variant %d (0 to %d)", v, BSCONV_GPU_VARIANTS - 1);
    if (v >= BSCONV_VEC_FIRST) {
        if (!b->vk) return sc_fail(err, "block-sparse conv: no vector kernel: %s", b->no_vec);
        SC_TRY(bsv_gpu_prepare(g, &b->s, b->dt, v - BSCONV_VEC_FIRST, &b->v, err));
        b->variant = v;
        return 0;
    }
    if (v >= BSCONV_DIRECT_FIRST) {
        if (!b->dcodes) return sc_fail(err, "block-sparse conv: no direct kernel: %s", b->no_direct);
        b->variant = v;
        return 0;
    }
    if (v >= BSCONV_GATHER_VARIANTS) {
        if (!b->halo) return sc_fail(err, "block-sparse conv: no halo kernel: %s", b->no_halo);
        SC_TRY(bsh_gpu_prepare(g, &b->s, &b->h, b->dt, v - BSCONV_GATHER_VARIANTS, err));
        b->variant = v;
        return 0;
    }
    if (b->nrem)
        return sc_fail(err, "block-sparse conv: variant %d gathers; the remainder of a hybrid layer runs on "
                       "the halo kernel only", v);
    if (bsk_smem_bytes(v) > (size_t)g->dev.smem_block)
        return sc_fail(err, "block-sparse conv: variant %d needs %zu bytes of shared memory (%d)", v,
                       bsk_smem_bytes(v), g->dev.smem_block);
    if ((long long)b->s.n * b->Po * b->Qo * b->win * b->win > INT32_MAX - 2 * BSK_WARPS * BSK_FM)
        return sc_fail(err, "block-sparse conv: too many output pixels (%d x %d x %d)", b->s.n,
                       b->P, b->Q);
    b->variant = v;
    return 0;
}

// The variant in use.
extern "C" int bsconv_gpu_variant(const bsconv_gpu *b) { return b->variant; }

// 1 when variant v can run the layer on g's device (else 0 and why).
extern "C" int bsconv_gpu_variant_usable(const gpu_ctx *g, const bsconv_gpu *b, int v, char *why, int len) {
    sc_err e = {{0}};
    bsconv_gpu t = *b;
    const int ok = bsconv_gpu_set_variant(g, &t, v, &e) == 0;
    if (!ok && why) snprintf(why, (size_t)len, "%s", e.msg);
    return ok;
}

// The first halo variant that runs the layer, else the first vector one,
// else the larger gather tile when it still gives every SM two CTAs, else
// the smaller one.
static int bsk_pick_variant(const gpu_ctx *g, const bsconv_gpu *b) {
    for (int v = BSCONV_GATHER_VARIANTS; b->halo && v < BSCONV_DIRECT_FIRST; v++)
        if (bsconv_gpu_variant_usable(g, b, v, NULL, 0)) return v;
    for (int v = BSCONV_VEC_FIRST; b->vk && v < BSCONV_GPU_VARIANTS; v++)
        if (bsconv_gpu_variant_usable(g, b, v, NULL, 0)) return v;
    const long long npq = (long long)b->s.n * b->Po * b->Qo * b->win * b->win;
    const long long rows = 2LL * BSK_WARPS * BSK_FM;
    return (npq + rows - 1) / rows * b->ngroups >= 2LL * g->dev.sms ? 1 : 0;
}

// Queues a copy of n host bytes to a new device buffer at *d on g's stream (n may be 0).
static int bsk_put(const gpu_ctx *g, void **d, const void *h, size_t n, sc_err *err) {
    cudaCheck(err, cudaMalloc(d, n ? n : 16));
    if (n) cudaCheck(err, cudaMemcpyAsync(*d, h, n, cudaMemcpyHostToDevice, g->stream));
    return 0;
}

// Uploads the packed arrays and the bias, the values narrowed to b->dt on
// the device (fp32 staging buffer at *tmp); everything queued on g's stream.
static int bsk_upload_async(const gpu_ctx *g, bsconv_gpu *b, const bsconv_packed *p,
                            const float *bias, float **tmp, sc_err *err) {
    SC_TRY(bsk_put(g, (void **)&b->grp, p->grp, (size_t)p->ngroups * sizeof *p->grp, err));
    SC_TRY(bsk_put(g, (void **)&b->cols, p->cols, (size_t)p->ncols * sizeof *p->cols, err));
    const size_t nv = (size_t)p->ncols * p->np;
    cudaCheck(err, cudaMalloc(&b->vals, nv ? nv * 2 : 16));
    if (bias) SC_TRY(bsk_put(g, (void **)&b->bias, bias, (size_t)b->s.K * sizeof *bias, err));
    if (!nv) return 0;
    SC_TRY(bsk_put(g, (void **)tmp, p->vals, nv * sizeof **tmp, err));
    return nhwc_from_f32_gpu(g, b->dt, nv, *tmp, b->vals, err);
}

// Uploads the layer and waits for the copies (the host arrays may go then).
static int bsk_upload(const gpu_ctx *g, bsconv_gpu *b, const bsconv_packed *p, const float *bias,
                      sc_err *err) {
    float *tmp = NULL;
    int rc = bsk_upload_async(g, b, p, bias, &tmp, err);
    const cudaError_t e = cudaStreamSynchronize(g->stream);
    cudaFree(tmp);
    if (!rc && e != cudaSuccess)
        rc = sc_fail(err, "block-sparse conv: uploading the layer: %s", cudaGetErrorString(e));
    return rc;
}

// Fills b's fields from the layer and its packed layout.
static void bsk_fill(bsconv_gpu *b, const bsconv_shape *s, const bsconv_bsr *w,
                     const bsconv_packed *p, gpu_dtype dt) {
    b->s = *s, b->dt = dt, b->kb = w->kb, b->cb = w->cb;
    b->nblocks = w->indptr[s->K / w->kb], b->nrem = bsconv_rem_count(w, s->K);
    bsconv_out_size(s, &b->P, &b->Q);
    bsconv_y_size(s, &b->Po, &b->Qo);
    b->win = s->pool > 1 ? s->pool : 1;
    b->np = p->np, b->ngroups = p->ngroups, b->ncols = p->ncols, b->vec = p->vec;
    b->vec_out = s->K % 8 == 0;
    for (int i = 0; i < p->ngroups; i++) b->vec_out &= p->grp[i].k0 % 8 == 0;
}

// Builds and uploads the halo kernel's weights when that kernel applies, and
// the direct kernel's codes when it does too.
static int bsk_halo_create(const gpu_ctx *g, bsconv_gpu *b, const bsconv_shape *s, const bsconv_bsr *w,
                           sc_err *err) {
    snprintf(b->no_direct, sizeof b->no_direct, "the halo kernel does not apply");
    if (!bsconv_halo_applies(s, w, b->no_halo, sizeof b->no_halo))
        return b->nrem ? sc_fail(err, "block-sparse conv: a hybrid layer needs the halo kernel: %s", b->no_halo) : 0;
    bsconv_hpack h;
    SC_TRY(bsconv_hpack_build(s, w, &h, err));
    int rc = bsh_gpu_upload(g, &h, b->dt, &b->h, err);
    if (!rc) rc = bsh_gpu_split_alloc(g, s, &b->h, err);
    if (!rc && bsconv_direct_applies(s, w, b->no_direct, sizeof b->no_direct))
        rc = bsd_gpu_upload(&h, &b->dcodes, err);
    bsconv_hpack_free(&h);
    b->halo = rc == 0;
    return rc;
}

// Builds and uploads the vector kernel's weights when that kernel applies.
static int bsk_vec_create(const gpu_ctx *g, bsconv_gpu *b, const bsconv_shape *s, const bsconv_bsr *w,
                          sc_err *err) {
    if (!bsconv_vec_applies(s, w, b->no_vec, sizeof b->no_vec)) return 0;
    bsconv_vpack p;
    SC_TRY(bsconv_vpack_build(s, w, &p, err));
    const int rc = bsv_gpu_upload(g, &p, b->dt, &b->v, err);
    bsconv_vpack_free(&p);
    b->vk = rc == 0;
    return rc;
}

// Packs and uploads a layer.
extern "C" bsconv_gpu *bsconv_gpu_create(const gpu_ctx *g, const bsconv_shape *s,
                                         const bsconv_bsr *w, const float *bias, gpu_dtype dt,
                                         sc_err *err) {
    if (dt != GDT_F16 && dt != GDT_BF16) {
        sc_fail(err, "block-sparse conv: storage must be fp16 or bf16");
        return NULL;
    }
    if (gpu_devinfo_cc(&g->dev) < GPU_MIN_CC) {
        sc_fail(err, "block-sparse conv: %s is compute capability %d.%d (needs 8.0)", g->dev.name,
                g->dev.cc_major, g->dev.cc_minor);
        return NULL;
    }
    bsconv_packed p;
    if (bsconv_pack(s, w, &p, err)) return NULL;
    bsconv_gpu *b = (bsconv_gpu *)calloc(1, sizeof *b);
    if (!b) {
        bsconv_packed_free(&p);
        sc_fail(err, "block-sparse conv: out of memory");
        return NULL;
    }
    bsk_fill(b, s, w, &p, dt);
    int rc = p.ngroups > 65535 ? sc_fail(err, "block-sparse conv: %d channel groups (65535)", p.ngroups)
                               : bsk_upload(g, b, &p, bias, err);
    bsconv_packed_free(&p);
    if (!rc) rc = bsk_halo_create(g, b, s, w, err);
    if (!rc) rc = bsk_vec_create(g, b, s, w, err);
    if (!rc) rc = bsconv_gpu_set_variant(g, b, bsk_pick_variant(g, b), err);
    if (rc) {
        bsconv_gpu_free(b);
        return NULL;
    }
    return b;
}

// Multiply-adds of the non-zero weights per image.
extern "C" double bsconv_gpu_macs(const bsconv_gpu *b) {
    return ((double)b->nblocks * b->kb * b->cb + b->nrem) * b->Po * b->Qo * b->win * b->win;
}

// One line describing the layer.
extern "C" void bsconv_gpu_describe(const bsconv_gpu *b, char *buf, size_t len) {
    if (b->variant >= BSCONV_VEC_FIRST) {
        const int v = b->variant - BSCONV_VEC_FIRST;
        bsv_geom geo;
        bsv_gpu_geom(&b->s, v, &geo);
        snprintf(buf, len, "block %dx%d, %d blocks, vector kernel: %d groups of 8 channels, %d k-steps, %s, tile %d "
                 "image(s) x %d x %d pixels x %d groups per CTA", b->kb, b->cb, b->nblocks, b->v.ng, b->v.nsteps,
                 b->dt == GDT_BF16 ? "bf16" : "fp16", geo.ti, geo.tr, geo.tq, BSV_WARPS * bsv_groups_per_warp(v));
        return;
    }
    if (b->variant >= BSCONV_DIRECT_FIRST) {
        const int v = b->variant - BSCONV_DIRECT_FIRST;
        const int ks = bsd_unit_share(v);
        snprintf(buf, len, "block %dx%d, %d blocks, direct kernel: %d groups of %d channels, %d units, %s, "
                 "%d pixels x 1 group per CTA (%d warps%s)", b->kb, b->cb, b->nblocks, b->h.ngroups, b->h.np,
                 b->h.nunits, b->dt == GDT_BF16 ? "bf16" : "fp16", BSD_WARPS / ks * bsd_rows_per_warp(v), BSD_WARPS,
                 ks > 1 ? " sharing the units" : "");
        return;
    }
    if (b->variant >= BSCONV_GATHER_VARIANTS) {
        const int hv = b->variant - BSCONV_GATHER_VARIANTS, split = bsh_gpu_nsplit(&b->s, &b->h, hv);
        const bsh_variant r = bsh_variant_get(hv);
        snprintf(buf, len, "block %dx%d, %d blocks, halo kernel: %d groups of %d channels, %d units, "
                 "%d input channels per chunk, %s, %d pixels x %d groups per CTA, %d warps per group%s",
                 b->kb, b->cb, b->nblocks, b->h.ngroups, b->h.np, b->h.nunits, b->h.cc,
                 b->dt == GDT_BF16 ? "bf16" : "fp16", r.tm, r.nw / r.ws, r.ws,
                 r.resident ? ", whole window resident" : r.stage ? ", outputs staged in shared memory" : "");
        if (split > 1)
            snprintf(buf + strlen(buf), len - strlen(buf), ", %d chunks in %d slices (a CTA each)", b->h.nchunks, split);
        if (b->nrem)
            snprintf(buf + strlen(buf), len - strlen(buf), ", %d single weights beside the blocks", b->nrem);
        return;
    }
    int mf;
    bool pipe;
    bsk_variant_of(b->variant, &mf, &pipe);
    const int nbuf = !pipe ? 1 : mf == 2 ? bsk_stages<2>::n : bsk_stages<1>::n;
    snprintf(buf, len, "block %dx%d, %d blocks, %d groups of %d channels, %d columns, %s, %d pixels/CTA, %s%s gather",
             b->kb, b->cb, b->nblocks, b->ngroups, b->np, b->ncols,
             b->dt == GDT_BF16 ? "bf16" : "fp16", BSK_WARPS * BSK_FM * mf,
             nbuf > 1 ? (b->vec ? "cp.async " : "") : "", b->vec ? "vector" : "scalar");
    if (nbuf > 1) snprintf(buf + strlen(buf), len - strlen(buf), ", %d stages", nbuf);
}

// Frees the device arrays.
extern "C" void bsconv_gpu_free(bsconv_gpu *b) {
    if (!b) return;
    cudaFree(b->grp);
    cudaFree(b->cols);
    cudaFree(b->vals);
    cudaFree(b->bias);
    bsh_gpu_free(&b->h);
    cudaFree(b->dcodes);
    bsv_gpu_free(&b->v);
    free(b);
}
