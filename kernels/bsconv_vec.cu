// The vector kernel of the block-sparse convolution (layout and loops in
// kernels/bsconv_vec.h; device API in kernels/bsconv_vec_gpu.h): a CTA
// stages its tile's whole input window in shared memory, then each warp
// multiplies its groups of 8 output channels, building every A fragment by
// two-byte shared loads at the group's own columns, and writes them through
// shared memory as 16-byte rows (the halo kernel's register epilogue where
// a 2x2 pool follows or y is not 16-byte aligned).
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
    int tt_off;            // transposed variants: bytes from the window to the transposed window
    unsigned char order[BSV_TM_MAX];  // slot m of the tables holds the tile's pixel row order[m]
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
        uint16_t *wr = win + (size_t)(ii * a.g.ip + (row - ii * a.g.hr) * a.g.hw) * a.g.ldc;
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

// acc[.][j] += group g's k-steps for the warp's MT 16-row slices (rows:
// each slice's two rows' shared addresses in the window). A lane multiplies
// 4 columns per k-step, each an offset in bytes added to a row's address;
// the next k-step's codes and weights load while this one multiplies (the
// last step loads itself again, so no load leaves the layer's arrays).
template <typename T, int MT, int G>
__device__ __forceinline__ void bsv_group(const bsv_args &a, int g, int j, int lane, const uint32_t (*rows)[2],
                                          float (*acc)[G][4]) {
    const int s0 = __ldg(a.gstart + g), s1 = __ldg(a.gstart + g + 1), c = lane & 3;
    if (s0 >= s1) return;
    const uint2 *codes = reinterpret_cast<const uint2 *>(a.codes);
    uint2 lo = __ldg(codes + s0 * 8 + c), hi = __ldg(codes + s0 * 8 + 4 + c), bw = __ldg(a.vals + s0 * 32 + lane);
    for (int st = s0; st < s1; st++) {
        const int sn = min(st + 1, s1 - 1);
        const uint2 nlo = __ldg(codes + sn * 8 + c), nhi = __ldg(codes + sn * 8 + 4 + c),
                    nbw = __ldg(a.vals + sn * 32 + lane);
        // byte offsets of the lane's 4 columns from a pixel's window base
        const uint32_t o0 = bsv_off(&a.g, lo.x) * 2, o1 = bsv_off(&a.g, lo.y) * 2;
        const uint32_t o2 = bsv_off(&a.g, hi.x) * 2, o3 = bsv_off(&a.g, hi.y) * 2;
        const uint32_t b[2] = {bw.x, bw.y};
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const uint32_t r0 = rows[mt][0], r1 = rows[mt][1];
            uint32_t af[4];
            af[0] = ptx_lds_u16(r0 + o0) | ptx_lds_u16(r0 + o1) << 16;
            af[1] = ptx_lds_u16(r1 + o0) | ptx_lds_u16(r1 + o1) << 16;
            af[2] = ptx_lds_u16(r0 + o2) | ptx_lds_u16(r0 + o3) << 16;
            af[3] = ptx_lds_u16(r1 + o2) | ptx_lds_u16(r1 + o3) << 16;
            ptx_mma16816<T>(acc[mt][j], af, b);
        }
        lo = nlo, hi = nhi, bw = nbw;
    }
}

// Bytes between staged rows of the epilogue through shared memory: the
// CTA's kn channels as floats and 32 bytes of padding (a warp's stores of 8
// rows then fall on two wavefronts, the fewest their 256 bytes take).
__host__ __device__ __forceinline__ int bsv_stage_pitch(int kn) { return kn * 4 + 32; }

// Adds 8 channels of residual (16-bit, packed in zz) to v.
template <typename T> __device__ __forceinline__ void bsv_add8(float *v, uint4 zz) {
    const uint32_t w[4] = {zz.x, zz.y, zz.z, zz.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = bsh_unpack2<T>(w[i]);
        v[2 * i] += f.x, v[2 * i + 1] += f.y;
    }
}

// Writes the 8 channels v (ReLU when relu) as 16-bit values at y + o (16-byte aligned).
template <typename T> __device__ __forceinline__ void bsv_put8(const bsv_args &a, size_t o, float *v) {
    __align__(16) T h[8];
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
        if (a.relu) v[i] = fmaxf(v[i], 0.0f), v[i + 1] = fmaxf(v[i + 1], 0.0f);
        bsh_st2(h + i, v[i], v[i + 1]);
    }
    *reinterpret_cast<uint4 *>((T *)a.y + o) = *reinterpret_cast<const uint4 *>(h);
}

// The epilogue through shared memory (no pool; y and z 16-byte aligned;
// every thread of the CTA calls it): each warp writes its sums plus the
// bias as floats into a tile of tm rows x the CTA's channels over the
// window, then the threads take whole 8-channel pieces of each row: add the
// residual by one 16-byte load, ReLU, round once to 16 bits and store 16
// bytes, so a warp stores contiguous runs instead of 8 pixels' 16-byte pieces.
template <typename T, int MT, int G>
__device__ __forceinline__ void bsv_stage_store(const bsv_args &a, const int *tout, int gw, int lane,
                                                float (*acc)[G][4], unsigned char *stg) {
    const int kb = (int)blockIdx.y * a.gpc * BSV_NG, kn = min(a.gpc * BSV_NG, a.K - kb), pitch = bsv_stage_pitch(kn);
    __syncthreads();  // every warp is done with the window
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (gw + j >= a.ng) break;
        const int k = (gw + j) * BSV_NG + (lane & 3) * 2;
        float2 bias;
        bsh_bias<1>(a, k, BSV_NG, &bias);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float2 *p = reinterpret_cast<float2 *>(stg + (mt * 16 + (lane >> 2) + h * 8) * pitch + (k - kb) * 4);
                *p = make_float2(acc[mt][j][h * 2] + bias.x, acc[mt][j][h * 2 + 1] + bias.y);
            }
    }
    __syncthreads();
    bsh_for_pieces(a.g.tm, kn / BSV_NG, [&](int i, int p) {
        const int pix = tout[i];
        if (pix < 0) return;
        const float4 *s = reinterpret_cast<const float4 *>(stg + i * pitch + p * 32);
        const float4 u = s[0], w = s[1];
        float v[8] = {u.x, u.y, u.z, u.w, w.x, w.y, w.z, w.w};
        const size_t o = (size_t)pix * a.K + kb + p * BSV_NG;
        if (a.z) bsv_add8<T>(v, __ldg(reinterpret_cast<const uint4 *>((const T *)a.z + o)));
        bsv_put8<T>(a, o, v);
    });
}

// --- the transposed window (variants 6-7) ---------------------------------------------------
//
// Tiles of tr x 8 output pixels of one image. After the window is staged as
// above, it is transposed into Tt: row (s C + c) hrp + h holds channel c of
// the 8 input columns q stride + s (q = 0..7) of window row h, 16 bytes (hrp,
// the rows per (s, c), is odd, so 8 consecutive channels' rows start in
// different bank groups). The 8 pixels of a tile row at column (r, s, c) of
// the filter are then one 16-byte row of Tt, and an ldmatrix.x4.trans loads a
// whole A fragment (16 pixels x 16 columns): one shared load per MMA
// instead of eight two-byte ones.

// Rows of Tt per (s, c): the window's rows, made odd.
__host__ __device__ __forceinline__ int bsvt_hrp(const bsv_geom *g) { return g->hr | 1; }

// Transposes the staged window win (positions x ldc channels) into tt: warp
// w takes the (h, s) pairs w, w + BSV_WARPS, ... (stepped by additions: a
// division per unit was most of the kernel's instructions), and per pair and
// 32-channel block one ldmatrix.x4.trans reads positions (h, q stride + s),
// q = lane % 8, at channels 8 (lane / 8) of the block; each lane stores 4
// bytes per matrix: channel 8 i + lane / 4, columns 2 (lane % 4) and 2 (lane % 4) + 1.
__device__ __forceinline__ void bsvt_transpose(const bsv_args &a, const unsigned char *win, unsigned char *tt) {
    const int lane = threadIdx.x & 31, S = a.g.S, hrp = bsvt_hrp(&a.g), nb = a.g.C >> 5, warp = threadIdx.x >> 5;
    const int ds = BSV_WARPS % S, dh = BSV_WARPS / S;
    const uint32_t w0 = (uint32_t)__cvta_generic_to_shared(win) +
                        (uint32_t)((((lane & 7) * a.g.stride) * a.g.ldc + (lane >> 3) * 8) * 2);
    const int crow = hrp * 16 * 8;  // bytes from channel c's rows to channel c + 8's
    unsigned char *t1 = tt + ((lane >> 2) * hrp) * 16 + (lane & 3) * 4;
    for (int h = warp / S, s = warp % S; h < a.g.hr; s += ds, h += dh) {
        if (s >= S) s -= S, h++;
        if (h >= a.g.hr) break;
        const uint32_t src = w0 + (uint32_t)((h * a.g.hw + s) * a.g.ldc * 2);
        unsigned char *dst = t1 + (s * a.g.C * hrp + h) * 16;
        for (int cb = 0; cb < nb; cb++, dst += 4 * crow) {
            uint32_t r[4];
            ptx_ldmatrix_x4_trans(src + (uint32_t)(cb * 64), r);
#pragma unroll
            for (int i = 0; i < 4; i++) *reinterpret_cast<uint32_t *>(dst + i * crow) = r[i];
        }
    }
}

// acc[.][j] += group g's k-steps from the transposed window at shared
// address t0: lane l names column (l % 8) + 8 (l / 16) of each k-step for
// pixel row (l / 8) % 2 of every slice; the next step loads while this one multiplies.
template <typename T, int MT, int G>
__device__ __forceinline__ void bsvt_group(const bsv_args &a, int g, int j, int lane, uint32_t t0, float (*acc)[G][4]) {
    const int s0 = __ldg(a.gstart + g), s1 = __ldg(a.gstart + g + 1), k = (lane & 7) + (lane >> 4) * 8;
    if (s0 >= s1) return;
    const int hrp = bsvt_hrp(&a.g), C = a.g.C, rs = 2 * a.g.stride * 16;  // bytes from one slice to the next
    const uint32_t tl = t0 + (uint32_t)(((lane >> 3) & 1) * a.g.stride * 16);
    uint32_t code = __ldg(a.codes + s0 * BSV_KSTEP + k);
    uint2 bw = __ldg(a.vals + s0 * 32 + lane);
    for (int st = s0; st < s1; st++) {
        const int sn = min(st + 1, s1 - 1);
        const uint32_t ncode = __ldg(a.codes + sn * BSV_KSTEP + k);
        const uint2 nbw = __ldg(a.vals + sn * 32 + lane);
        const int rho = ((int)(code >> 16 & 255u) * C + (int)(code & 0xFFFFu)) * hrp + (int)(code >> 24);
        const uint32_t ad = tl + (uint32_t)(rho * 16);
        const uint32_t b[2] = {bw.x, bw.y};
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            uint32_t af[4];
            ptx_ldmatrix_x4_trans(ad + (uint32_t)(mt * rs), af);
            ptx_mma16816<T>(acc[mt][j], af, b);
        }
        code = ncode, bw = nbw;
    }
}

// --- the kernel ----------------------------------------------------------------------------

// One CTA: tile blockIdx.x (MT 16-row slices) x the CTA's a.gpc groups from
// blockIdx.y * a.gpc, warp w holding the sums of G consecutive groups of
// them at once. TP: the window transposed first (the layout above: tiles
// of tr x 8 pixels, no pool). EPI: 0 the register epilogue, 1 with the 2x2
// pool, 2 through shared memory (bsv_stage_store).
template <typename T, int MT, int G, int EPI, bool TP>
__global__ void __launch_bounds__(BSV_WARPS * 32) bsv_kernel(bsv_args a) {
    extern __shared__ __align__(16) unsigned char bsv_sm[];
    int *tout = reinterpret_cast<int *>(bsv_sm), *tbase = tout + BSV_TM_MAX;
    unsigned char *win = bsv_sm + BSV_TABLE_BYTES, *tt = win + a.tt_off;
    const int lane = threadIdx.x & 31, t = (int)blockIdx.x;
    if (a.dep_early) ptx_dep_launch();  // else at the end, below
    int unused;  // the transposed window reads no window bases
    if (threadIdx.x < MT * 16)
        bsv_row(&a.g, t, a.order[threadIdx.x], TP ? &unused : tbase + threadIdx.x, tout + threadIdx.x);
    ptx_dep_wait();  // x and z belong to earlier kernels; the weights are the layer's own
    bsv_stage(a, t, reinterpret_cast<uint16_t *>(win));
    __syncthreads();
    if (TP) {
        bsvt_transpose(a, win, tt);
        __syncthreads();
    }
    const int gw = (int)blockIdx.y * a.gpc + (int)(threadIdx.x >> 5) * G;  // the warp's first group
    float acc[MT][G][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < G; j++) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;
    if (TP) {
        const uint32_t t0 = (uint32_t)__cvta_generic_to_shared(tt);
#pragma unroll
        for (int j = 0; j < G; j++)
            if (gw + j < a.ng) bsvt_group<T, MT, G>(a, gw + j, j, lane, t0, acc);
    } else {
        const uint32_t w0 = (uint32_t)__cvta_generic_to_shared(win);
        uint32_t rows[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) rows[mt][h] = w0 + (uint32_t)tbase[mt * 16 + (lane >> 2) + h * 8] * 2;
#pragma unroll
        for (int j = 0; j < G; j++)
            if (gw + j < a.ng) bsv_group<T, MT, G>(a, gw + j, j, lane, rows, acc);
    }
    if (EPI == 2) {
        bsv_stage_store<T, MT, G>(a, tout, gw, lane, acc, win);
    } else if (gw < a.ng) {
        const int nk = min(G, a.ng - gw) * BSV_NG;
        bsh_epilogue<T, MT, G, EPI == 1>(a, tout, gw * BSV_NG, nk, lane, acc);
    }
    ptx_dep_launch();
}

// --- variants and launch ------------------------------------------------------------------

// Variant v: pixel rows per tile (at most), groups per warp (each warp
// holding G groups' sums at once, MT x G <= 8 fragments) and whether the
// window is transposed (bsv_kernel's TP: tiles of tm / 8 x 8 pixels).
static const struct { int tm, gpw, tp; } BSV_V[BSV_VARIANTS] = {
    {64, 1, 0}, {64, 2, 0}, {32, 2, 0}, {32, 4, 0}, {16, 4, 0}, {16, 8, 0}, {64, 1, 1}, {64, 2, 1}};

// Groups per warp of variant v.
extern "C" int bsv_groups_per_warp(int v) { return BSV_V[v].gpw; }

// The geometry of layer s on variant v: the layout's (bsconv_vgeom_of), or
// for a transposed variant tiles of one image's tm / 8 rows x 8 columns.
extern "C" void bsv_gpu_geom(const bsconv_shape *s, int v, bsv_geom *g) {
    bsconv_vgeom_of(s, BSV_V[v].tm, g);
    if (!BSV_V[v].tp) return;
    g->ti = 1, g->tr = BSV_V[v].tm / 8, g->tq = 8, g->tm = g->tr * g->tq;
    g->hr = (g->tr - 1) * g->stride + g->R, g->hw = (g->tq - 1) * g->stride + g->S, g->ip = g->hr * g->hw;
    g->nti = g->n, g->ntr = (g->cp + g->tr - 1) / g->tr, g->ntq = (g->cq + g->tq - 1) / g->tq;
}

// The kernel of element type T with mt slices and g groups per warp, epilogue EPI.
template <typename T, int EPI> static void *bsv_fn_e(int mt, int g) {
    switch (mt * 16 + g) {
    case 4 * 16 + 1: return (void *)bsv_kernel<T, 4, 1, EPI, false>;
    case 4 * 16 + 2: return (void *)bsv_kernel<T, 4, 2, EPI, false>;
    case 2 * 16 + 2: return (void *)bsv_kernel<T, 2, 2, EPI, false>;
    case 2 * 16 + 4: return (void *)bsv_kernel<T, 2, 4, EPI, false>;
    case 1 * 16 + 4: return (void *)bsv_kernel<T, 1, 4, EPI, false>;
    default: return (void *)bsv_kernel<T, 1, 8, EPI, false>;
    }
}

// The transposed-window kernel of element type T with g groups per warp (4 slices), epilogue EPI (0 or 2).
template <typename T, int EPI> static void *bsvt_fn_e(int g) {
    return g == 2 ? (void *)bsv_kernel<T, 4, 2, EPI, true> : (void *)bsv_kernel<T, 4, 1, EPI, true>;
}

// The kernel of variant v in dt with epilogue epi (bsv_kernel's EPI).
template <typename T> static void *bsv_fn_t(int v, int epi) {
    const int mt = BSV_V[v].tm / 16, g = BSV_V[v].gpw;
    if (BSV_V[v].tp) return epi == 2 ? bsvt_fn_e<T, 2>(g) : bsvt_fn_e<T, 0>(g);
    return epi == 2 ? bsv_fn_e<T, 2>(mt, g) : epi ? bsv_fn_e<T, 1>(mt, g) : bsv_fn_e<T, 0>(mt, g);
}

// The kernel of variant v in dt with epilogue epi.
static void *bsv_fn(gpu_dtype dt, int v, int epi) {
    return dt == GDT_BF16 ? bsv_fn_t<__nv_bfloat16>(v, epi) : bsv_fn_t<__half>(v, epi);
}

// The epilogue variant v runs layer s with: the pool's, else through shared
// memory when y and z are 16-byte aligned, else the register one.
static int bsv_epi(const bsconv_shape *s, const void *y, const void *z) {
    if (s->pool == 2) return 1;
    return ((uintptr_t)y & 15) == 0 && ((uintptr_t)z & 15) == 0 ? 2 : 0;
}

// Bytes from the window to the transposed window (0: none) of variant v on geometry geo.
static long long bsv_tt_off(const bsv_geom *geo, int v) {
    return BSV_V[v].tp ? (bsconv_vec_smem(geo) - BSV_TABLE_BYTES + 15) / 16 * 16 : 0;
}

// Bytes of dynamic shared memory of variant v on geometry geo with epilogue
// epi: the tables, the window and the transposed window, or for the staged
// epilogue (2) the staged tile over them when that is larger.
static long long bsv_smem_bytes(const bsconv_shape *s, const bsv_geom *geo, int v, int epi) {
    long long win = bsconv_vec_smem(geo);
    if (BSV_V[v].tp) win = BSV_TABLE_BYTES + bsv_tt_off(geo, v) + (long long)geo->S * geo->C * bsvt_hrp(geo) * 16;
    const long long kn = BSV_WARPS * BSV_V[v].gpw * BSV_NG;
    const long long stg = BSV_TABLE_BYTES + (long long)BSV_V[v].tm * bsv_stage_pitch((int)(kn < s->K ? kn : s->K));
    return epi != 2 || win >= stg ? win : stg;
}

// Why variant v cannot run layer s (NULL: it can), besides shared memory.
static const char *bsv_refuse(const bsconv_shape *s, const bsv_geom *geo, int v) {
    if (!BSV_V[v].tp) return NULL;
    if (s->pool == 2) return "the transposed window takes no pool";
    if (s->C % 32) return "the transposed window needs a multiple of 32 input channels";
    if (geo->cq < 8) return "the transposed window needs 8 output columns";
    return NULL;
}

// Checks that variant v runs the layer, allows its shared memory and keeps its geometry and row order in d.
extern "C" int bsv_gpu_prepare(const gpu_ctx *g, const bsconv_shape *s, gpu_dtype dt, int v, bsv_gpu *d,
                               sc_err *err) {
    if (v < 0 || v >= BSV_VARIANTS) return sc_fail(err, "block-sparse conv: vector variant %d", v);
    bsv_geom geo;
    bsv_gpu_geom(s, v, &geo);
    const char *no = bsv_refuse(s, &geo, v);
    if (no) return sc_fail(err, "block-sparse conv: vector variant %d: %s", v, no);
    const long long bytes = bsv_smem_bytes(s, &geo, v, s->pool == 2 ? 1 : 2), tiles = (long long)geo.nti * geo.ntr * geo.ntq;
    if (bytes > g->dev.smem_block_optin)
        return sc_fail(err, "block-sparse conv: the vector kernel's window needs %lld bytes of shared memory (%d)",
                       bytes, g->dev.smem_block_optin);
    if (tiles > INT_MAX) return sc_fail(err, "block-sparse conv: %lld tiles", tiles);
    // The limit belongs to the kernels, which other layers share: the device's opt-in maximum.
    for (int epi = 0; epi < 3; epi++)
        cudaCheck(err, cudaFuncSetAttribute(bsv_fn(dt, v, epi), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            g->dev.smem_block_optin));
    d->geo = geo;
    bsconv_vec_row_order(&geo, BSV_V[v].tp || geo.pool == 2, d->order);
    d->ready = v + 1;
    return 0;
}

// Queues the kernel of variant v.
extern "C" int bsv_gpu_run(const gpu_ctx *g, const bsconv_shape *s, const bsv_gpu *d, gpu_dtype dt, int v,
                           const float *bias, const void *x, const void *z, void *y, sc_err *err) {
    if (d->ready != v + 1) return sc_fail(err, "block-sparse conv: vector variant %d not prepared", v);
    bsv_args a;
    a.x = x, a.z = z, a.y = y, a.bias = bias, a.gstart = d->gstart;
    a.codes = d->codes, a.vals = (const uint2 *)d->vals;
    a.g = d->geo;
    a.K = s->K, a.relu = s->relu, a.ng = d->ng, a.gpc = BSV_WARPS * BSV_V[v].gpw, a.dep_early = g->pdl == 2;
    a.tt_off = (int)bsv_tt_off(&a.g, v);
    memcpy(a.order, d->order, sizeof a.order);
    const dim3 grid((unsigned)(a.g.nti * a.g.ntr * a.g.ntq), (unsigned)((a.ng + a.gpc - 1) / a.gpc));
    const int epi = bsv_epi(s, y, z);
    void *args[] = {&a};
    cudaCheck(err, sc_launch(g, bsv_fn(dt, v, epi), grid, dim3(BSV_WARPS * 32),
                             (size_t)bsv_smem_bytes(s, &a.g, v, epi), args));
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
