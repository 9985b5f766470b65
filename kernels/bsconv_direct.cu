// The direct kernel of the block-sparse convolution (layout and loops in
// kernels/bsconv_direct.h; device API in kernels/bsconv_direct_gpu.h): each
// lane loads its MMA operands straight from x and the packed weights, several
// unit pairs ahead of the mma.sync, with no shared-memory window and no
// barrier; the epilogue is the halo kernel's (kernels/bsconv_epi_gpu.h).
#include <stdio.h>
#include <stdlib.h>

#include "kernels/bsconv_direct_gpu.h"
#include "kernels/bsconv_epi_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/ptx_gpu.h"

// What the kernel reads (passed by value; z, y, bias, k0, nk, K and relu as the epilogue wants them).
struct bsd_args {
    const void *x, *z;
    void *y;
    const float *bias;
    const int32_t *k0, *nk, *ustart;
    const uint32_t *codes, *vals;  // vals: two 16-bit weights per word
    bsconv_dgeom g;
    int K, relu, nchunks;
    int dep_early;  // 1: the next kernel may start from this one's start (gpu_ctx.pdl 2)
};

// A lane's two pixel rows per fragment (rows lane / 4 and lane / 4 + 8): the
// element offset in x of the conv pixel's tap (0, 0) at channel 2 (lane % 4),
// and that tap's input row and column (a row far outside for a row past the layer).
template <int MF> struct bsd_rows {
    int off[MF][2], iy[MF][2], ix[MF][2];
};

// The lane's rows of the warp's rows [row0, row0 + 16 MF).
template <int MF> __device__ __forceinline__ void bsd_rows_of(const bsd_args &a, int row0, int lane, bsd_rows<MF> &rw) {
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int img, p, q, out;
            const bool ok = bsd_pixel(&a.g, row0 + mf * 16 + (lane >> 2) + h * 8, &img, &p, &q, &out);
            const int iy = p * a.g.stride - a.g.pad, ix = q * a.g.stride - a.g.pad;
            rw.iy[mf][h] = ok ? iy : -(1 << 24);
            rw.ix[mf][h] = ok ? ix : 0;
            rw.off[mf][h] = ok ? ((img * a.g.H + iy) * a.g.W + ix) * a.g.C + (lane & 3) * 2 : 0;
        }
}

// The lane's A words of unit code c: input channels ch + 2 (lane % 4) + {0, 1}
// of its rows' pixels at tap (r, s), zero outside the image.
template <int MF>
__device__ __forceinline__ void bsd_load_a(const bsd_args &a, const bsd_rows<MF> &rw, uint32_t c, uint32_t (*w)[2]) {
    const uint32_t *x = (const uint32_t *)a.x;
    const int r = (int)(c & 255u), s = (int)(c >> 8 & 255u), d = (r * a.g.W + s) * a.g.C + (int)(c >> 16);
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const bool in = (unsigned)(rw.iy[mf][h] + r) < (unsigned)a.g.H && (unsigned)(rw.ix[mf][h] + s) < (unsigned)a.g.W;
            w[mf][h] = in ? __ldg(x + ((rw.off[mf][h] + d) >> 1)) : 0u;
        }
}

// acc += D unit pairs starting at unit u (the i-th unit's code is lane i of cl, from unit ub):
// every load issued before the first MMA.
template <typename T, int MF, int NF, int D>
__device__ __forceinline__ void bsd_pairs(const bsd_args &a, int u, int ub, uint32_t cl, const bsd_rows<MF> &rw,
                                          int lane, float (*acc)[NF][4]) {
    uint32_t fa[D][2][MF][2], fb[D][NF][2];
#pragma unroll
    for (int d = 0; d < D; d++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int ue = u + 2 * d + e;
            bsd_load_a<MF>(a, rw, __shfl_sync(0xffffffffu, cl, ue - ub), fa[d][e]);
#pragma unroll
            for (int f = 0; f < NF; f++) fb[d][f][e] = __ldg(a.vals + ((size_t)ue * NF + f) * 32 + lane);
        }
#pragma unroll
    for (int d = 0; d < D; d++)
#pragma unroll
        for (int mf = 0; mf < MF; mf++) {
            const uint32_t fr[4] = {fa[d][0][mf][0], fa[d][0][mf][1], fa[d][1][mf][0], fa[d][1][mf][1]};
#pragma unroll
            for (int f = 0; f < NF; f++) ptx_mma16816<T>(acc[mf][f], fr, fb[d][f]);
        }
}

// acc += the last, odd unit u by m16n8k8.
template <typename T, int MF, int NF>
__device__ __forceinline__ void bsd_single(const bsd_args &a, int u, int ub, uint32_t cl, const bsd_rows<MF> &rw,
                                           int lane, float (*acc)[NF][4]) {
    uint32_t fa[MF][2], fb[NF];
    bsd_load_a<MF>(a, rw, __shfl_sync(0xffffffffu, cl, u - ub), fa);
#pragma unroll
    for (int f = 0; f < NF; f++) fb[f] = __ldg(a.vals + ((size_t)u * NF + f) * 32 + lane);
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int f = 0; f < NF; f++) ptx_mma1688<T>(acc[mf][f], fa[mf], fb[f]);
}

// acc += units [u, ue) of the group: codes 32 at a time (one per lane), unit
// pairs D at a time where a pair is little math, then single pairs, then an odd unit.
template <typename T, int MF, int NF>
__device__ __forceinline__ void bsd_units(const bsd_args &a, int u, int ue, const bsd_rows<MF> &rw, int lane,
                                          float (*acc)[NF][4]) {
    constexpr int D = MF * NF <= 4 ? 4 : MF * NF <= 8 ? 2 : 1;
    for (int ub = u; ub < ue; ub += 32) {
        const int un = min(ub + 32, ue);
        const uint32_t cl = ub + lane < ue ? __ldg(a.codes + ub + lane) : 0u;
        int v = ub;
        for (; v + 2 * D <= un; v += 2 * D) bsd_pairs<T, MF, NF, D>(a, v, ub, cl, rw, lane, acc);
        for (; v + 2 <= un; v += 2) bsd_pairs<T, MF, NF, 1>(a, v, ub, cl, rw, lane, acc);
        if (v < un) bsd_single<T, MF, NF>(a, v, ub, cl, rw, lane, acc);
    }
}

// Warp w's units of [u0, u1) when KS warps share them: the w % KS-th of KS contiguous runs.
template <int KS> __device__ __forceinline__ void bsd_share(int w, int *u0, int *u1) {
    if constexpr (KS == 1) return;
    const int n = *u1 - *u0, part = w % KS;
    *u1 = *u0 + (int)((long long)n * (part + 1) / KS);
    *u0 += (int)((long long)n * part / KS);
}

// With KS > 1, the KS warps of a pixel slice add their sums into the slice's
// first warp through shared memory, in warp order (the same sums every run);
// false for the warps that are done then.
template <int MF, int NF, int KS>
__device__ __forceinline__ bool bsd_reduce(int warp, int lane, float (*acc)[NF][4]) {
    if constexpr (KS == 1) {
        return true;
    } else {  // (a kernel without the share declares no buffer)
        constexpr int E = MF * NF * 4;
        __shared__ float red[BSD_WARPS][E][32];  // the other warps' sums, lane-minor (no bank conflicts)
        float *v = &acc[0][0][0];
        if (warp % KS) {
#pragma unroll
            for (int e = 0; e < E; e++) red[warp][e][lane] = v[e];
        }
        __syncthreads();
        if (warp % KS) return false;
        for (int w = warp + 1; w < warp + KS; w++)
#pragma unroll
            for (int e = 0; e < E; e++) v[e] += red[w][e][lane];
        return true;
    }
}

// One CTA: BSD_WARPS warps of group blockIdx.y in BSD_WARPS / KS pixel
// slices of 16 MF rows, slice i from (blockIdx.x BSD_WARPS / KS + i) 16 MF;
// the KS warps of a slice take a share of the group's units each (KS > 1:
// long unit lists on few pixels, the small planes).
template <typename T, int MF, int NF, bool POOL, int KS>
__global__ void __launch_bounds__(BSD_WARPS * 32) bsd_kernel(bsd_args a) {
    __shared__ int tout[BSD_WARPS][64];  // the y pixel of each of a warp's rows (-1: none)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = (int)blockIdx.y;
    const int row0 = ((int)blockIdx.x * (BSD_WARPS / KS) + warp / KS) * MF * 16;
    if (a.dep_early) ptx_dep_launch();  // else after the main loop, below
    if (KS == 1 && row0 >= a.g.rows) return;  // the whole warp (with KS > 1 every warp reaches the barrier)
    for (int i = lane; i < MF * 16; i += 32) {
        int img, p, q, out;
        tout[warp][i] = bsd_pixel(&a.g, row0 + i, &img, &p, &q, &out) ? out : -1;
    }
    bsd_rows<MF> rw;
    bsd_rows_of<MF>(a, row0, lane, rw);
    float acc[MF][NF][4];
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int f = 0; f < NF; f++) acc[mf][f][0] = acc[mf][f][1] = acc[mf][f][2] = acc[mf][f][3] = 0.0f;
    int u0 = __ldg(a.ustart + g * a.nchunks), u1 = __ldg(a.ustart + (g + 1) * a.nchunks);
    bsd_share<KS>(warp, &u0, &u1);
    ptx_dep_wait();  // x and z belong to earlier kernels; the weights are the layer's own
    bsd_units<T, MF, NF>(a, u0, u1, rw, lane, acc);
    ptx_dep_launch();
    if (!bsd_reduce<MF, NF, KS>(warp, lane, acc)) return;
    __syncwarp();
    bsh_epilogue<T, MF, NF, POOL>(a, tout[warp], __ldg(a.k0 + g), __ldg(a.nk + g), lane, acc);
}

// --- variants and launch ------------------------------------------------------------------

// Variant v: accumulator fragments per warp (MF) and warps sharing a slice's units (KS).
static const struct { int mf, ks; } BSD_V[BSD_VARIANTS] = {{1, 1}, {1, 4}, {2, 4}};

// Pixel rows per warp of variant v.
extern "C" int bsd_rows_per_warp(int v) { return 16 * BSD_V[v].mf; }

// Warps sharing a pixel slice's units in variant v.
extern "C" int bsd_unit_share(int v) { return BSD_V[v].ks; }

// The kernel of (T, MF, nf, pool, KS) as a plain pointer (MF x nf <= 16 fragments).
template <typename T, int MF, int KS> static void *bsd_fn_mf(int nf, bool pool) {
    switch (nf) {
    case 1: return pool ? (void *)bsd_kernel<T, MF, 1, true, KS> : (void *)bsd_kernel<T, MF, 1, false, KS>;
    case 2: return pool ? (void *)bsd_kernel<T, MF, 2, true, KS> : (void *)bsd_kernel<T, MF, 2, false, KS>;
    case 4: return pool ? (void *)bsd_kernel<T, MF, 4, true, KS> : (void *)bsd_kernel<T, MF, 4, false, KS>;
    default: return pool ? (void *)bsd_kernel<T, MF, 8, true, KS> : (void *)bsd_kernel<T, MF, 8, false, KS>;
    }
}

// The kernel of element type T for variant v, or NULL.
template <typename T> static void *bsd_fn_t(int v, int nf, bool pool) {
    switch (v) {
    case 0: return bsd_fn_mf<T, 1, 1>(nf, pool);
    case 1: return bsd_fn_mf<T, 1, 4>(nf, pool);
    default: return bsd_fn_mf<T, 2, 4>(nf, pool);
    }
}

// The kernel of variant v for layer (s, d) in dt, or NULL.
static void *bsd_fn(const bsconv_shape *s, const bsh_gpu *d, gpu_dtype dt, int v) {
    const bool pool = s->pool == 2;
    return dt == GDT_BF16 ? bsd_fn_t<__nv_bfloat16>(v, d->nf, pool) : bsd_fn_t<__half>(v, d->nf, pool);
}

// Queues the kernel of variant v.
extern "C" int bsd_gpu_run(const gpu_ctx *g, const bsconv_shape *s, const bsh_gpu *d, const uint32_t *codes,
                           gpu_dtype dt, int v, const float *bias, const void *x, const void *z, void *y, sc_err *err) {
    void *fn = bsd_fn(s, d, dt, v);
    bsd_args a;
    a.x = x, a.z = z, a.y = y, a.bias = bias, a.k0 = d->k0, a.nk = d->nk, a.ustart = d->ustart;
    a.codes = codes, a.vals = (const uint32_t *)d->vals;
    bsconv_dgeom_of(s, &a.g);
    a.K = s->K, a.relu = s->relu, a.nchunks = d->nchunks, a.dep_early = g->pdl == 2;
    const long long rpc = (long long)BSD_WARPS / BSD_V[v].ks * bsd_rows_per_warp(v);
    const dim3 grid((unsigned)((a.g.rows + rpc - 1) / rpc), (unsigned)d->ngroups);
    void *args[] = {&a};
    cudaCheck(err, sc_launch(g, fn, grid, dim3(BSD_WARPS * 32), 0, args));
    return 0;
}

// Uploads the codes.
extern "C" int bsd_gpu_upload(const bsconv_hpack *h, uint32_t **codes, sc_err *err) {
    const size_t n = (size_t)h->nunits + 1;
    uint32_t *du = (uint32_t *)calloc(n, sizeof *du);
    if (!du) return sc_fail(err, "block-sparse conv: out of memory");
    bsconv_direct_codes(h, du);
    const cudaError_t e = cudaMalloc(codes, n * sizeof *du);
    const int rc = e != cudaSuccess ? sc_fail(err, "block-sparse conv: direct codes: %s", cudaGetErrorString(e))
                                    : gpu_upload(*codes, du, n * sizeof *du, err);
    free(du);
    return rc;
}
