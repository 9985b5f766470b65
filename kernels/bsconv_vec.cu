// The vector kernel of the block-sparse convolution (layout and loops in
// kernels/bsconv_vec.h; device API in kernels/bsconv_vec_gpu.h): a CTA
// stages its tile's whole input window in shared memory, then each warp
// multiplies its groups of 8 output channels, building every A fragment by
// two-byte shared loads at the group's own columns, and writes them through
// the halo kernel's register epilogue.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv_epi_gpu.h"
#include "kernels/bsconv_vec_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/nhwc_ops_gpu.h"
#include "kernels/ptx_gpu.h"

// What the kernel reads (passed by value); the epilogue reads z, y, bias, K, relu.
struct bsv_args {
    const void *x, *z;
    void *y;
    const float *bias;
    const int32_t *gstart;
    const uint32_t *codes;
    const uint2 *vals;
    bsv_geom g;
    int K, relu, ng, gpc;  // gpc: groups per CTA (blockIdx.y takes groups [y gpc, (y + 1) gpc))
    int dep_early;         // 1: the next kernel may start from this one's start (gpu_ctx.pdl 2)
};

// Stages tile t's window into win: each position's C channels by 16-byte
// copies at a stride of ldc elements, zeros outside the image and the batch.
// Warp w takes window rows w, w + BSV_WARPS, ... (one image row each, whose
// hw positions are contiguous in x); its lanes walk the row's 16-byte slots
// 32 at a time by additions only (position xx, slot j; a division per slot
// was most of a nearly empty layer's time).
__device__ __forceinline__ void bsv_stage(const bsv_args &a, int t, uint16_t *win) {
    const uint16_t *x = (const uint16_t *)a.x;
    const int lane = threadIdx.x & 31, slots = a.g.C >> 3, dq = 32 / slots, dj = 32 % slots;
    const int rows = a.g.ti * a.g.hr, rowlen = a.g.hw * slots;
    const long long rowc = (long long)a.g.W * a.g.C;  // elements of an image row
    int img0, p0, q0;
    bsv_tile(&a.g, t, &img0, &p0, &q0);
    for (int row = threadIdx.x >> 5; row < rows; row += BSV_WARPS) {
        const int ii = row / a.g.hr, img = img0 + ii, h = p0 * a.g.stride - a.g.pad + row - ii * a.g.hr;
        const bool rin = img < a.g.n && h >= 0 && h < a.g.H;
        const uint16_t *xr = x + ((long long)(rin ? img : 0) * a.g.H + (rin ? h : 0)) * rowc;
        uint16_t *wr = win + (size_t)row * a.g.hw * a.g.ldc;
        long long e = (long long)(q0 * a.g.stride - a.g.pad) * a.g.C + lane * 8;  // element in the image row
        int xx = lane / slots, j = lane % slots;
        for (int i = lane; i < rowlen; i += 32) {
            const bool in = rin && e >= 0 && e < rowc;
            ptx_cp16(wr + xx * a.g.ldc + j * 8, in ? xr + e : x, in);
            e += 256, xx += dq, j += dj;
            if (j >= slots) j -= slots, xx++;
        }
    }
    ptx_cp_commit();
    ptx_cp_wait<0>();
}

// acc += group g's k-steps for the warp's MT 16-row slices (window bases base).
template <typename T, int MT>
__device__ __forceinline__ void bsv_group(const bsv_args &a, int g, int lane, const uint16_t *win,
                                          const int (*base)[2], float (*acc)[1][4]) {
    const int s1 = __ldg(a.gstart + g + 1), c = lane & 3;
    for (int st = __ldg(a.gstart + g); st < s1; st++) {
        const uint2 lo = __ldg(reinterpret_cast<const uint2 *>(a.codes + st * BSV_KSTEP) + c);
        const uint2 hi = __ldg(reinterpret_cast<const uint2 *>(a.codes + st * BSV_KSTEP + 8) + c);
        const uint2 bw = __ldg(a.vals + st * 32 + lane);
        const int o0 = bsv_off(&a.g, lo.x), o1 = bsv_off(&a.g, lo.y), o2 = bsv_off(&a.g, hi.x), o3 = bsv_off(&a.g, hi.y);
        const uint32_t b[2] = {bw.x, bw.y};
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const uint16_t *r0 = win + base[mt][0], *r1 = win + base[mt][1];
            uint32_t af[4];
            af[0] = (uint32_t)r0[o0] | (uint32_t)r0[o1] << 16;
            af[1] = (uint32_t)r1[o0] | (uint32_t)r1[o1] << 16;
            af[2] = (uint32_t)r0[o2] | (uint32_t)r0[o3] << 16;
            af[3] = (uint32_t)r1[o2] | (uint32_t)r1[o3] << 16;
            ptx_mma16816<T>(acc[mt][0], af, b);
        }
    }
}

// One CTA: tile blockIdx.x (MT 16-row slices) x groups of blockIdx.y, warp
// w taking the CTA's groups w, w + BSV_WARPS, ...
template <typename T, int MT, bool POOL>
__global__ void __launch_bounds__(BSV_WARPS * 32) bsv_kernel(bsv_args a) {
    extern __shared__ __align__(16) unsigned char bsv_sm[];
    int *tout = reinterpret_cast<int *>(bsv_sm), *tbase = tout + BSV_TM_MAX;
    uint16_t *win = reinterpret_cast<uint16_t *>(bsv_sm + BSV_TABLE_BYTES);
    const int lane = threadIdx.x & 31, t = (int)blockIdx.x;
    if (a.dep_early) ptx_dep_launch();  // else after the groups, below
    if (threadIdx.x < MT * 16) bsv_row(&a.g, t, threadIdx.x, tbase + threadIdx.x, tout + threadIdx.x);
    ptx_dep_wait();  // x and z belong to earlier kernels; the weights are the layer's own
    bsv_stage(a, t, win);
    __syncthreads();
    int base[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) base[mt][h] = tbase[mt * 16 + (lane >> 2) + h * 8];
    const int g1 = min(a.ng, ((int)blockIdx.y + 1) * a.gpc);
    for (int g = (int)blockIdx.y * a.gpc + (int)(threadIdx.x >> 5); g < g1; g += BSV_WARPS) {
        float acc[MT][1][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) acc[mt][0][0] = acc[mt][0][1] = acc[mt][0][2] = acc[mt][0][3] = 0.0f;
        bsv_group<T, MT>(a, g, lane, win, base, acc);
        bsh_epilogue<T, MT, 1, POOL>(a, tout, g * BSV_NG, BSV_NG, lane, acc);
    }
    ptx_dep_launch();
}

// --- variants and launch ------------------------------------------------------------------

// Variant v: pixel rows per tile (at most) and groups per warp.
static const struct { int tm, gpw; } BSV_V[BSV_VARIANTS] = {{64, 1}, {64, 4}, {32, 1}, {32, 4}, {16, 1}, {16, 4}};

// Pixel rows per tile (at most) of variant v.
extern "C" int bsv_tile_rows(int v) { return BSV_V[v].tm; }

// Groups per warp of variant v.
extern "C" int bsv_groups_per_warp(int v) { return BSV_V[v].gpw; }

// The kernel of element type T with mt slices, with or without the pool.
template <typename T> static void *bsv_fn_t(int mt, bool pool) {
    switch (mt) {
    case 4: return pool ? (void *)bsv_kernel<T, 4, true> : (void *)bsv_kernel<T, 4, false>;
    case 2: return pool ? (void *)bsv_kernel<T, 2, true> : (void *)bsv_kernel<T, 2, false>;
    default: return pool ? (void *)bsv_kernel<T, 1, true> : (void *)bsv_kernel<T, 1, false>;
    }
}

// The kernel of variant v for layer s in dt.
static void *bsv_fn(const bsconv_shape *s, gpu_dtype dt, int v) {
    const int mt = BSV_V[v].tm / 16;
    const bool pool = s->pool == 2;
    return dt == GDT_BF16 ? bsv_fn_t<__nv_bfloat16>(mt, pool) : bsv_fn_t<__half>(mt, pool);
}

// Checks that variant v runs the layer and allows its shared memory.
extern "C" int bsv_gpu_prepare(const gpu_ctx *g, const bsconv_shape *s, gpu_dtype dt, int v, sc_err *err) {
    if (v < 0 || v >= BSV_VARIANTS) return sc_fail(err, "block-sparse conv: vector variant %d", v);
    bsv_geom geo;
    bsconv_vgeom_of(s, BSV_V[v].tm, &geo);
    const long long bytes = bsconv_vec_smem(&geo), tiles = (long long)geo.nti * geo.ntr * geo.ntq;
    if (bytes > g->dev.smem_block_optin)
        return sc_fail(err, "block-sparse conv: the vector kernel's window needs %lld bytes of shared memory (%d)",
                       bytes, g->dev.smem_block_optin);
    if (tiles > INT_MAX) return sc_fail(err, "block-sparse conv: %lld tiles", tiles);
    // The limit belongs to the kernel, which other layers share: the device's opt-in maximum.
    cudaCheck(err, cudaFuncSetAttribute(bsv_fn(s, dt, v), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        g->dev.smem_block_optin));
    return 0;
}

// Queues the kernel of variant v.
extern "C" int bsv_gpu_run(const gpu_ctx *g, const bsconv_shape *s, const bsv_gpu *d, gpu_dtype dt, int v,
                           const float *bias, const void *x, const void *z, void *y, sc_err *err) {
    bsv_args a;
    a.x = x, a.z = z, a.y = y, a.bias = bias, a.gstart = d->gstart;
    a.codes = d->codes, a.vals = (const uint2 *)d->vals;
    bsconv_vgeom_of(s, BSV_V[v].tm, &a.g);
    a.K = s->K, a.relu = s->relu, a.ng = d->ng, a.gpc = BSV_WARPS * BSV_V[v].gpw, a.dep_early = g->pdl == 2;
    const dim3 grid((unsigned)(a.g.nti * a.g.ntr * a.g.ntq), (unsigned)((a.ng + a.gpc - 1) / a.gpc));
    void *args[] = {&a};
    cudaCheck(err, sc_launch(g, bsv_fn(s, dt, v), grid, dim3(BSV_WARPS * 32), (size_t)bsconv_vec_smem(&a.g), args));
    return 0;
}

// Uploads the packed weights, narrowed to dt on the device.
extern "C" int bsv_gpu_upload(const gpu_ctx *g, const bsconv_vpack *p, gpu_dtype dt, bsv_gpu *d, sc_err *err) {
    memset(d, 0, sizeof *d);
    d->ng = p->ng, d->nsteps = p->nsteps;
    SC_TRY(gpu_new_upload((void **)&d->gstart, p->gstart, ((size_t)p->ng + 1) * sizeof *p->gstart, err));
    SC_TRY(gpu_new_upload((void **)&d->codes, p->codes, ((size_t)p->nsteps * BSV_KSTEP + 1) * sizeof *p->codes, err));
    return nhwc_new_from_host_f32(g, dt, (size_t)p->nsteps * 128, p->vals, &d->vals, err);
}

// Frees the device arrays.
extern "C" void bsv_gpu_free(bsv_gpu *d) {
    cudaFree(d->gstart), cudaFree(d->codes), cudaFree(d->vals);
    memset(d, 0, sizeof *d);
}
