// The halo kernel of the block-sparse convolution (layout and loops in
// kernels/bsconv_halo.h; device API in kernels/bsconv_halo_gpu.h): a CTA
// stages its tile's input window in shared memory chunk by chunk (cp.async,
// double-buffered when there are several chunks), each warp multiplies one
// output-channel group's units from it with ldmatrix + mma.sync, and the
// epilogue works on the accumulator registers.
#include <stdio.h>
#include <stdlib.h>

#include "kernels/bsconv_epi_gpu.h"
#include "kernels/bsconv_halo_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/nhwc_ops_gpu.h"
#include "kernels/ptx_gpu.h"

// What the kernel reads (passed by value).
struct bsh_args {
    const void *x, *z;
    void *y;
    const float *bias;
    const int32_t *k0, *nk, *ustart;
    const uint32_t *units, *vals;  // vals: two 16-bit weights per word
    const int32_t *rstart;         // the remainder (bsconv_hpack; NULL: none)
    const uint32_t *rcode;
    const void *rvals;             // (nrem) 16-bit weights
    bsconv_htile t;
    int n, H, W, C, K, stride, pad, relu;
    int cc, lnch, nchunks, ngroups, nw;  // lnch: log2 of the 16-byte slots per position
    int ws;                              // warps per group (each a slice of the tile's pixels)
    int wbytes;                          // bytes of one window buffer (a multiple of 16)
    int nbuf;                            // window buffers: 1, 2 (taking turns) or nchunks (resident)
    int zoff;                            // shared byte offset of the zero slot (the tables follow it)
    int stage, srow;                     // staged stores (bsh_stage_store) and its row stride in bytes
    float *part;                         // split variants: the CTAs' partial sums (bsh_split_total)
    int *cnt;                            // split variants: finished CTAs per tile, zero between launches
    int dep_early;                       // 1: the next kernel may start from this one's start (gpu_ctx.pdl 2)
};

// --- the window ---------------------------------------------------------------------------

// Starts the copies of chunk c of the tile's window into buffer buf: warp w
// takes window rows w, w + nw, ... (one image row each, contiguous in x). A
// position holds nch <= 8 slots and 32 is a multiple of nch, so a lane keeps
// one channel slot j and steps over the row's positions 32 / nch at a time:
// the walk is additions only (it was about 31 instructions per 16-byte copy,
// most of a nearly empty layer's time on an H200).
template <typename T>
__device__ __forceinline__ void bsh_load(const bsh_args &a, int i0, int r0, int q0, int c, char *buf) {
    const T *x = (const T *)a.x;
    const int lane = threadIdx.x & 31, nch = 1 << a.lnch, j = lane & (nch - 1), step = 32 >> a.lnch;
    const int nwarp = blockDim.x >> 5, rows = a.t.ti * a.t.hr, dw = step * a.t.sub, doff = dw * a.C;
    const int w0 = q0 * a.stride - a.pad + (lane >> a.lnch) * a.t.sub, h0 = r0 * a.stride - a.pad;
    int row = threadIdx.x >> 5, img = i0 + row / a.t.hr, yy = row % a.t.hr;
    for (; row < rows; row += nwarp) {
        const int h = h0 + yy * a.t.sub;
        const bool rin = img < a.n && h >= 0 && h < a.H;
        const T *xr = x + (((size_t)(rin ? img : 0) * a.H + (rin ? h : 0)) * a.W) * a.C + c * a.cc + j * 8;
        // src: the address of position xx as an integer (it may lie outside x where !in)
        size_t src = (size_t)xr + (size_t)((long long)w0 * a.C * (long long)sizeof(T));
        const size_t dsrc = (size_t)((long long)doff * (long long)sizeof(T));
        int p = row * a.t.hw + (lane >> a.lnch), w = w0;
        char *dst = buf + p * nch * 16;  // + the swizzled slot; a step moves 32 slots (512 bytes)
        for (int xx = lane >> a.lnch; xx < a.t.hw; xx += step, p += step, w += dw, src += dsrc, dst += 512) {
            const bool in = rin && (unsigned)w < (unsigned)a.W;
            ptx_cp16(dst + (j ^ ((p >> a.t.swz) & (nch - 1))) * 16, in ? (const T *)src : x, in);
        }
        for (yy += nwarp; yy >= a.t.hr; yy -= a.t.hr) img++;  // the next row's image and row
    }
}

// The tile's tables (thread i < tm computes entry i): the window position of
// pixel i's ldmatrix row (-1 past the tile) and the y pixel it writes (-1: none).
__device__ __forceinline__ void bsh_tables(const bsh_args &a, int i0, int r0, int q0, int *pos, int *out) {
    const int i = threadIdx.x;
    if (i >= a.t.tm) return;
    int ti, tr, tq;
    pos[i] = -1, out[i] = -1;
    if (!bsh_pixel(&a.t, i, &ti, &tr, &tq)) return;
    pos[i] = bsh_pos(&a.t, ti, tr * a.t.ps, tq * a.t.ps);
    const int img = i0 + ti, r = r0 + tr, q = q0 + tq, w = a.t.win;
    if (img < a.n && r < a.t.pc && q < a.t.qc) out[i] = (img * (a.t.pc / w) + r / w) * (a.t.qc / w) + q / w;
}

// --- the multiply -------------------------------------------------------------------------

// Shared address of unit `code`'s 8 channels for the row at window position p (-1: zeros).
// S8: the layout known at compile time, 8 slots per position swizzled by the
// position's low 3 bits (64-channel chunks, swz 0: bsh_s8), so the slot is
// one mask-and-xor instead of shifts and a multiply by runtime amounts.
template <bool S8>
__device__ __forceinline__ uint32_t bsh_addr(const bsh_args &a, uint32_t buf, uint32_t zero, int p,
                                             uint32_t code) {
    if (p < 0) return zero;
    const int q = p + (int)(code & 255u) * a.t.hw + (int)(code >> 8 & 255u);
    if constexpr (S8) return buf + ((uint32_t)q << 7) + ((((uint32_t)q & 7u) ^ (code >> 16)) << 4);
    return buf + 16u * (uint32_t)bsh_slot(&a.t, q, (int)(code >> 16), 1 << a.lnch);
}

// One unit pair's operands for this lane: the code of unit u (lanes 0-15) or
// u + 1 (lanes 16-31), for the ldmatrix rows, and both units' B fragments.
template <int NF>
struct bsh_pair {
    uint32_t code, b[NF][2];
};

// Starts the loads of pair (u, u + 1).
template <int NF>
__device__ __forceinline__ void bsh_pair_load(const bsh_args &a, int u, int lane, bsh_pair<NF> &p) {
    p.code = __ldg(a.units + u + (lane >> 4));
#pragma unroll
    for (int f = 0; f < NF; f++) {
        p.b[f][0] = __ldg(a.vals + ((size_t)u * NF + f) * 32 + lane);
        p.b[f][1] = __ldg(a.vals + ((size_t)(u + 1) * NF + f) * 32 + lane);
    }
}

// acc += pair p by m16n8k16, its A fragments from the window buffer buf.
template <typename T, int MF, int NF, bool S8>
__device__ __forceinline__ void bsh_pair_mma(const bsh_args &a, const bsh_pair<NF> &p, uint32_t buf, uint32_t zero,
                                             const int *pos, float (*acc)[NF][4]) {
#pragma unroll
    for (int mf = 0; mf < MF; mf++) {
        uint32_t fa[4];
        ptx_ldmatrix_x4(bsh_addr<S8>(a, buf, zero, pos[mf], p.code), fa);
#pragma unroll
        for (int f = 0; f < NF; f++) ptx_mma16816<T>(acc[mf][f], fa, p.b[f]);
    }
}

// acc += units [u, ue) of chunk buffer buf: pairs by m16n8k16, a last odd one by m16n8k8.
// Where a pair is little math (MF x NF <= 4) the loop waits on its loads, so
// the loads of D = 4 pairs are issued together before their math; the
// pairs are added in the same order either way.
template <typename T, int MF, int NF, bool S8>
__device__ __forceinline__ void bsh_units(const bsh_args &a, int u, int ue, uint32_t buf, uint32_t zero,
                                          const int *pos, int lane, float (*acc)[NF][4]) {
    constexpr int D = MF * NF <= 4 ? 4 : 1;  // pairs per batch
    if (D > 1)
        for (; u + 2 * D <= ue; u += 2 * D) {
            bsh_pair<NF> p[D];
            uint32_t ad[D][MF];  // every ldmatrix address before the first ldmatrix: the codes load together
#pragma unroll
            for (int d = 0; d < D; d++) bsh_pair_load<NF>(a, u + 2 * d, lane, p[d]);
#pragma unroll
            for (int d = 0; d < D; d++)
#pragma unroll
                for (int mf = 0; mf < MF; mf++) ad[d][mf] = bsh_addr<S8>(a, buf, zero, pos[mf], p[d].code);
#pragma unroll
            for (int d = 0; d < D; d++)
#pragma unroll
                for (int mf = 0; mf < MF; mf++) {
                    uint32_t fa[4];
                    ptx_ldmatrix_x4(ad[d][mf], fa);
#pragma unroll
                    for (int f = 0; f < NF; f++) ptx_mma16816<T>(acc[mf][f], fa, p[d].b[f]);
                }
        }
    for (; u + 1 < ue; u += 2) {
        bsh_pair<NF> p;
        bsh_pair_load<NF>(a, u, lane, p);
        bsh_pair_mma<T, MF, NF, S8>(a, p, buf, zero, pos, acc);
    }
    if (u < ue) {
        const uint32_t code = __ldg(a.units + u);
        uint32_t b[NF];
#pragma unroll
        for (int f = 0; f < NF; f++) b[f] = __ldg(a.vals + ((size_t)u * NF + f) * 32 + lane);
#pragma unroll
        for (int mf = 0; mf < MF; mf++) {
            uint32_t fa[2];
            ptx_ldmatrix_x2(bsh_addr<S8>(a, buf, zero, pos[mf], code), fa);
#pragma unroll
            for (int f = 0; f < NF; f++) ptx_mma1688<T>(acc[mf][f], fa, b[f]);
        }
    }
}

// Copies 16-byte piece p of a staged row (at shared row) to y pixel pix's channels kb + 8p.. (pix < 0: none).
template <typename T>
__device__ __forceinline__ void bsh_copy_piece(const bsh_args &a, int pix, int kb, int p, const char *row) {
    if (pix >= 0) *(uint4 *)((T *)a.y + (size_t)pix * a.K + kb + p * 8) = *(const uint4 *)(row + p * 16);
}

// The epilogue through shared memory (full groups, no pool; every thread of
// the CTA calls it): each warp writes its rows' values (bias, residual, ReLU)
// as 16-bit pairs into a tile of tm rows x the CTA's channels over the window
// buffers, rows a.srow bytes apart (16 bytes of padding: the 8 rows of a store
// fall on distinct banks), then the threads copy whole 16-byte pieces of
// each row to y, so a warp stores contiguous runs, not 8 separate 16-byte pieces.
template <typename T, int MF, int NF>
__device__ __forceinline__ void bsh_stage_store(const bsh_args &a, const int *tout, int row0, int g, int lane,
                                                float (*acc)[NF][4]) {
    extern __shared__ __align__(16) char bsh_smem[];
    constexpr int NP = NF * 8;  // channels per group
    const int gpc = a.nw / a.ws, g0 = (int)blockIdx.y * gpc;
    __syncthreads();  // every warp is done with the window buffers
    if (g < a.ngroups) {
        const int k = g * NP + (lane & 3) * 2;  // full groups: group g starts at channel g * NP
        float2 bias[NF];
        bsh_bias<NF>(a, k, NP, bias);
        if (a.z) bsh_add_residual<T, MF, NF>(a, tout + row0, k, NP, lane, acc);
#pragma unroll
        for (int mf = 0; mf < MF; mf++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                char *row = bsh_smem + (row0 + mf * 16 + (lane >> 2) + h * 8) * a.srow + (k - g0 * NP) * 2;
#pragma unroll
                for (int f = 0; f < NF; f++) {
                    float v0 = acc[mf][f][h * 2] + bias[f].x, v1 = acc[mf][f][h * 2 + 1] + bias[f].y;
                    if (a.relu) v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
                    bsh_st2((T *)(row + f * 16), v0, v1);
                }
            }
    }
    __syncthreads();
    const int kb = g0 * NP, kn = min(gpc * NP, a.K - kb), pieces = kn / 8;  // 16-byte pieces per row
    bsh_for_pieces(a.t.tm, pieces, [&](int i, int p) { bsh_copy_piece<T>(a, tout[i], kb, p, bsh_smem + i * a.srow); });
}

// --- the remainder ------------------------------------------------------------------------

// One 16-bit value as a float.
__device__ __forceinline__ float bsh_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float bsh_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// acc += the remainder of group g in chunk c (hybrid layers, bsconv_hpack)
// on the CUDA cores: each lane walks the single weights of its accumulators'
// channels (f * 8 + (lane % 4) * 2 + e) and multiplies each with the
// window's element at its accumulators' rows (rows lane / 4 + 8 h of each
// fragment; their window positions from the tile's table tpos).
template <typename T, int MF, int NF, bool S8>
__device__ __forceinline__ void bsh_rem(const bsh_args &a, int g, int c, uint32_t buf, uint32_t zaddr,
                                        const int *tpos, int row0, int lane, float (*acc)[NF][4]) {
    extern __shared__ __align__(16) char bsh_smem[];
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(bsh_smem);
    int p[MF][2];
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int h = 0; h < 2; h++) p[mf][h] = tpos[row0 + mf * 16 + (lane >> 2) + h * 8];
    const int32_t *rs = a.rstart + ((size_t)g * a.nchunks + c) * (NF * 8) + (lane & 3) * 2;
#pragma unroll
    for (int f = 0; f < NF; f++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            for (int32_t i = __ldg(rs + f * 8 + e), end = __ldg(rs + f * 8 + e + 1); i < end; i++) {
                const uint32_t code = __ldg(a.rcode + i);
                const float v = bsh_f32(__ldg((const T *)a.rvals + i));
                const uint32_t off = (code >> 24) * 2u - base;  // the element within its unit's 16 bytes
#pragma unroll
                for (int mf = 0; mf < MF; mf++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t ad = bsh_addr<S8>(a, buf, zaddr, p[mf][h], code & 0xFFFFFFu) + off;
                        acc[mf][f][h * 2 + e] += v * bsh_f32(*(const T *)(bsh_smem + ad));
                    }
            }
}

// --- the chunk loop -----------------------------------------------------------------------

// The units of group g (when it exists) in chunk c, from the window buffer at
// shared address buf, then its remainder (REM; tpos: the tile's window positions).
template <typename T, int MF, int NF, bool S8, bool REM = false>
__device__ __forceinline__ void bsh_chunk(const bsh_args &a, int g, int c, uint32_t buf, uint32_t zaddr,
                                          const int *pos, int lane, float (*acc)[NF][4], const int *tpos = nullptr,
                                          int row0 = 0) {
    if (g >= a.ngroups) return;
    bsh_units<T, MF, NF, S8>(a, __ldg(a.ustart + g * a.nchunks + c), __ldg(a.ustart + g * a.nchunks + c + 1), buf,
                             zaddr, pos, lane, acc);
    if constexpr (REM) bsh_rem<T, MF, NF, S8>(a, g, c, buf, zaddr, tpos, row0, lane, acc);
}

// Chunks [c0, c1) through two window buffers taking turns (one when there is
// one chunk): chunk c + 1 loads while chunk c multiplies.
template <typename T, int MF, int NF, bool S8, bool REM>
__device__ __forceinline__ void bsh_chunks_two(const bsh_args &a, int i0, int r0, int q0, int g, int c0, int c1,
                                               uint32_t base, uint32_t zaddr, const int *pos, int lane,
                                               float (*acc)[NF][4], const int *tpos, int row0) {
    extern __shared__ __align__(16) char bsh_smem[];
    bsh_load<T>(a, i0, r0, q0, c0, bsh_smem);
    ptx_cp_commit();
    for (int c = c0; c < c1; c++) {
        const int j = c - c0;
        if (c + 1 < c1) {  // the other buffer was consumed before the last barrier
            bsh_load<T>(a, i0, r0, q0, c + 1, bsh_smem + ((j + 1) & 1) * a.wbytes);
            ptx_cp_commit();
            ptx_cp_wait<1>();
        } else {
            ptx_cp_wait<0>();
        }
        __syncthreads();
        bsh_chunk<T, MF, NF, S8, REM>(a, g, c, base + (uint32_t)((j & 1) * a.wbytes), zaddr, pos, lane, acc, tpos,
                                      row0);
        __syncthreads();
    }
}

// A split CTA's end: it stores its partial sums in its own slice of a.part,
// and the last of the tile's gridDim.z CTAs to finish (a.cnt counts them)
// adds every slice, its own read back too, in slice order (the same sums
// whichever CTA is last), resets the counter and returns true: it writes the
// tile; the others, false.
template <int MF, int NF>
__device__ __forceinline__ bool bsh_split_total(const bsh_args &a, float (*acc)[NF][4]) {
    constexpr int E = MF * NF * 4;
    const unsigned tile = blockIdx.y * gridDim.x + blockIdx.x, nt = blockDim.x;
    const size_t slice = (size_t)gridDim.x * gridDim.y * E * nt;  // floats per slice
    float *p = a.part + (size_t)tile * E * nt + threadIdx.x, *v = &acc[0][0][0];
#pragma unroll
    for (int e = 0; e < E; e++) __stcg(p + blockIdx.z * slice + (size_t)e * nt, v[e]);
    __threadfence();  // the slice is visible before the count says so
    __syncthreads();
    if (!__syncthreads_or(threadIdx.x == 0 && atomicAdd(a.cnt + tile, 1) == (int)gridDim.z - 1)) return false;
    __threadfence();
#pragma unroll
    for (int e = 0; e < E; e++) v[e] = 0.0f;
    for (unsigned z = 0; z < gridDim.z; z++)
#pragma unroll
        for (int e = 0; e < E; e++) v[e] += __ldcg(p + z * slice + (size_t)e * nt);
    if (threadIdx.x == 0) a.cnt[tile] = 0;  // for the next launch
    return true;
}

// The chunks with the whole window resident: every chunk's load issued at
// once (one cp.async group each), chunk c multiplied as soon as it has landed.
template <typename T, int MF, int NF>
__device__ __forceinline__ void bsh_chunks_resident(const bsh_args &a, int i0, int r0, int q0, int g,
                                                    uint32_t base, uint32_t zaddr, const int *pos, int lane,
                                                    float (*acc)[NF][4]) {
    extern __shared__ __align__(16) char bsh_smem[];
    const int n = a.nchunks;
    for (int c = 0; c < n; c++) {
        bsh_load<T>(a, i0, r0, q0, c, bsh_smem + (size_t)c * a.wbytes);
        ptx_cp_commit();
    }
    for (int c = 0; c < n; c++) {
        ptx_cp_wait_n(n - 1 - c);  // the groups after chunk c's may still fly
        __syncthreads();           // chunk c has landed for every thread
        bsh_chunk<T, MF, NF, false>(a, g, c, base + (uint32_t)c * (uint32_t)a.wbytes, zaddr, pos, lane, acc);
    }
}


// --- the kernel ---------------------------------------------------------------------------

// One CTA: tile blockIdx.x, groups blockIdx.y * nw / ws + warp / ws; warp w
// computes the MF fragments of pixel slice w % ws of its group. RES: the
// whole window resident (a.nbuf = a.nchunks), else two buffers taking turns;
// a kernel of its own each, since one loop over a.nbuf buffers cost the
// two-buffer variants registers and 5-12% of their time on an H100. SPLIT:
// the chunks of slice blockIdx.z only, the tile's last CTA adds the slices.
// STAGE: the epilogue through shared memory when a.stage (a kernel of its own:
// its code cost the other kernels registers, e.g. 112 -> 128 for <8, 2>).
// S8: the window's layout fixed at compile time (bsh_s8; staged kernels only,
// where it took 1-7% off the large planes on an H100). REM: the layer's
// remainder after each chunk's units (hybrid layers; two buffers, no split: a
// kernel of its own, so that the others keep their registers).
template <typename T, int MF, int NF, bool POOL, bool RES, bool SPLIT, bool STAGE = false, bool S8 = false,
          bool REM = false>
__global__ void __launch_bounds__(256) bsh_kernel(bsh_args a) {
    extern __shared__ __align__(16) char bsh_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = blockIdx.y * (a.nw / a.ws) + warp / a.ws, row0 = warp % a.ws * MF * 16;
    if (a.dep_early) ptx_dep_launch();  // else after the main loop, below
    int i0, r0, q0;
    bsh_tile_origin(&a.t, (int)blockIdx.x, &i0, &r0, &q0);
    char *zero = bsh_smem + a.zoff;
    int *tpos = (int *)(zero + 16), *tout = tpos + a.t.tm;
    if (threadIdx.x < 4) ((uint32_t *)zero)[threadIdx.x] = 0u;
    bsh_tables(a, i0, r0, q0, tpos, tout);
    __syncthreads();
    int pos[MF];
#pragma unroll
    for (int mf = 0; mf < MF; mf++) pos[mf] = tpos[row0 + mf * 16 + (lane & 15)];
    float acc[MF][NF][4];
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int f = 0; f < NF; f++) acc[mf][f][0] = acc[mf][f][1] = acc[mf][f][2] = acc[mf][f][3] = 0.0f;
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(bsh_smem);
    const uint32_t zaddr = (uint32_t)__cvta_generic_to_shared(zero);
    int c0 = 0, c1 = a.nchunks;
    if constexpr (SPLIT) bsh_split_range((int)blockIdx.z, (int)gridDim.z, a.nchunks, &c0, &c1);
    ptx_dep_wait();  // x, z and the split scratch belong to earlier kernels; the weights are the layer's own
    if constexpr (RES) bsh_chunks_resident<T, MF, NF>(a, i0, r0, q0, g, base, zaddr, pos, lane, acc);
    else bsh_chunks_two<T, MF, NF, S8, REM>(a, i0, r0, q0, g, c0, c1, base, zaddr, pos, lane, acc, tpos, row0);
    ptx_dep_launch();  // the next kernel may start its preamble during the sums and the epilogue
    if constexpr (SPLIT)
        if (!bsh_split_total<MF, NF>(a, acc)) return;
    if constexpr (STAGE && !POOL && !SPLIT && !RES)
        if (a.stage) return bsh_stage_store<T, MF, NF>(a, tout, row0, g, lane, acc);  // the whole CTA
    if (g < a.ngroups) bsh_epilogue<T, MF, NF, POOL>(a, tout + row0, __ldg(a.k0 + g), __ldg(a.nk + g), lane, acc);
}

// --- variants and launch ------------------------------------------------------------------

// Variant v (0 <= v < BSH_VARIANTS): 7 keeps the whole window resident, 8-10 split the chunks,
// 11-13 stage the outputs (0, 5 and 1 otherwise).
extern "C" bsh_variant bsh_variant_get(int v) {
    static const bsh_variant vs[BSH_VARIANTS] = {
        {128, 4, 1, 0, 0}, {64, 4, 1, 0, 0}, {128, 8, 2, 0, 0}, {64, 8, 1, 0, 0}, {32, 4, 1, 0, 0}, {128, 8, 1, 0, 0},
        {64, 8, 2, 0, 0},  {32, 8, 1, 1, 0}, {32, 4, 1, 0, -1}, {64, 4, 1, 0, -1}, {64, 4, 1, 0, 2},
        {128, 4, 1, 0, 0, 1}, {128, 8, 1, 0, 0, 1}, {64, 4, 1, 0, 0, 1}};
    return vs[v];
}

// Window buffers of variant r for a layer of nchunks chunks.
static int bsh_nbuf(bsh_variant r, int nchunks) { return r.resident ? nchunks : nchunks > 1 ? 2 : 1; }

// The kernel of (T, MF, NF, POOL, RES, SPLIT, STAGE, S8, REM) as a plain pointer; NULL when MF x NF > 16.
template <typename T, int MF, bool POOL, bool RES, bool SPLIT, bool STAGE = false, bool S8 = false, bool REM = false>
static void *bsh_fn_nf(int nf) {
    switch (nf) {
    case 1: return (void *)bsh_kernel<T, MF, 1, POOL, RES, SPLIT, STAGE, S8, REM>;
    case 2: return (void *)bsh_kernel<T, MF, 2, POOL, RES, SPLIT, STAGE, S8, REM>;
    case 4: return MF <= 4 ? (void *)bsh_kernel<T, MF, (MF <= 4 ? 4 : 1), POOL, RES, SPLIT, STAGE, S8, REM> : NULL;
    default: return MF <= 2 ? (void *)bsh_kernel<T, MF, (MF <= 2 ? 8 : 1), POOL, RES, SPLIT, STAGE, S8, REM> : NULL;
    }
}

// The staged kernel of (T, MF) for nf fragments, with the compile-time layout (bsh_s8) when s8.
template <typename T, int MF, bool REM> static void *bsh_fn_stage(int nf, bool s8) {
    return s8 ? bsh_fn_nf<T, MF, false, false, false, true, true, REM>(nf)
              : bsh_fn_nf<T, MF, false, false, false, true, false, REM>(nf);
}

// The two-buffer kernel of (T, MF, POOL) for nf fragments, without or with the remainder.
template <typename T, int MF, bool POOL> static void *bsh_fn_plain(int nf, bool rem) {
    return rem ? bsh_fn_nf<T, MF, POOL, false, false, false, false, true>(nf) : bsh_fn_nf<T, MF, POOL, false, false>(nf);
}

// The kernel for element type T, mf fragments, nf channel fragments, pool or
// not, resident window or not (resident: 2 fragments only, the one such
// variant), split or not (2 or 4 fragments, two buffers), staged stores or not
// (8 or 4 fragments, no pool, two buffers, no split; with the compile-time
// layout when s8, bsh_s8: the staged kernels are the large planes' choice),
// with the layer's remainder or not (rem: two buffers, no split).
template <typename T>
static void *bsh_fn_t(int mf, int nf, bool pool, bool res, bool split, bool stage, bool s8, bool rem) {
    if (rem && (res || split)) return NULL;
    if (stage) {
        if (pool || res || split) return NULL;
        if (mf == 8) return rem ? bsh_fn_stage<T, 8, true>(nf, s8) : bsh_fn_stage<T, 8, false>(nf, s8);
        return mf != 4 ? NULL : rem ? bsh_fn_stage<T, 4, true>(nf, s8) : bsh_fn_stage<T, 4, false>(nf, s8);
    }
    if (res) return mf != 2 ? NULL : pool ? bsh_fn_nf<T, 2, true, true, false>(nf) : bsh_fn_nf<T, 2, false, true, false>(nf);
    if (split) {
        if (mf == 2) return pool ? bsh_fn_nf<T, 2, true, false, true>(nf) : bsh_fn_nf<T, 2, false, false, true>(nf);
        return mf != 4 ? NULL : pool ? bsh_fn_nf<T, 4, true, false, true>(nf) : bsh_fn_nf<T, 4, false, false, true>(nf);
    }
    switch (mf) {
    case 2: return pool ? bsh_fn_plain<T, 2, true>(nf, rem) : bsh_fn_plain<T, 2, false>(nf, rem);
    case 4: return pool ? bsh_fn_plain<T, 4, true>(nf, rem) : bsh_fn_plain<T, 4, false>(nf, rem);
    default: return pool ? bsh_fn_plain<T, 8, true>(nf, rem) : bsh_fn_plain<T, 8, false>(nf, rem);
    }
}

// Whether the layer's window has the layout bsh_addr<true> assumes: 64-channel
// chunks (8 slots per position) with no swizzle shift (bsh_slot's swz 0).
static bool bsh_s8(const bsconv_shape *s, const bsh_gpu *d, int tm) {
    bsconv_htile t;
    bsconv_htile_pick(s, tm, d->cc, &t);
    return d->cc == 64 && t.swz == 0;
}

// The kernel of variant v for layer (s, d) in dt, or NULL.
static void *bsh_fn(const bsconv_shape *s, const bsh_gpu *d, gpu_dtype dt, int v) {
    const bsh_variant r = bsh_variant_get(v);
    const bool pool = s->pool == 2, res = r.resident != 0, split = r.split != 0, stage = r.stage != 0;
    const int mf = r.tm / 16 / r.ws;
    const bool s8 = bsh_s8(s, d, r.tm), rem = d->nrem > 0;
    return dt == GDT_BF16 ? bsh_fn_t<__nv_bfloat16>(mf, d->nf, pool, res, split, stage, s8, rem)
                          : bsh_fn_t<__half>(mf, d->nf, pool, res, split, stage, s8, rem);
}

// CTAs of variant r's grid without a split: tiles x channel-group blocks.
static long long bsh_ctas(const bsconv_shape *s, const bsh_gpu *d, bsh_variant r) {
    bsconv_htile t;
    bsconv_htile_pick(s, r.tm, d->cc, &t);
    const int gpc = r.nw / r.ws;  // groups per CTA
    return bsconv_htile_count(&t) * ((d->ngroups + gpc - 1) / gpc);
}

// Slices of variant v's split (1: none): only where the grid leaves the GPU
// short of BSH_SPLIT_FILL CTAs per SM, at most one per chunk.
extern "C" int bsh_gpu_nsplit(const bsconv_shape *s, const bsh_gpu *d, int v) {
    const bsh_variant r = bsh_variant_get(v);
    const long long base = bsh_ctas(s, d, r), fill = (long long)BSH_SPLIT_FILL * d->sms;
    if (!r.split || r.resident || d->nchunks < 2 || base < 1 || base >= fill) return 1;
    const long long k = r.split > 0 ? r.split : (fill + base - 1) / base;
    return (int)(k < d->nchunks ? k : d->nchunks);
}

// Floats of split scratch variant v needs: a slice of every CTA's accumulators per split.
static long long bsh_part_floats(const bsconv_shape *s, const bsh_gpu *d, int v) {
    const bsh_variant r = bsh_variant_get(v);
    const int k = bsh_gpu_nsplit(s, d, v);
    return k < 2 ? 0 : k * bsh_ctas(s, d, r) * r.nw * 32 * (r.tm / 16 / r.ws) * d->nf * 4;
}

// Allocates the largest scratch any split variant that fits needs, counters zeroed.
extern "C" int bsh_gpu_split_alloc(const gpu_ctx *g, const bsconv_shape *s, bsh_gpu *d, sc_err *err) {
    d->sms = g->dev.sms;
    long long need = 0, ncnt = 0;
    for (int v = 0; v < BSH_VARIANTS; v++) {
        const long long f = bsh_fn(s, d, GDT_F16, v) ? bsh_part_floats(s, d, v) : 0;  // fits alike in bf16
        if (f > need) need = f;
        if (f > 0 && bsh_ctas(s, d, bsh_variant_get(v)) > ncnt) ncnt = bsh_ctas(s, d, bsh_variant_get(v));
    }
    if (!need) return 0;
    cudaCheck(err, cudaMalloc(&d->part, (size_t)need * sizeof(float)));
    cudaCheck(err, cudaMalloc(&d->cnt, (size_t)ncnt * sizeof(int)));
    cudaCheck(err, cudaMemsetAsync(d->cnt, 0, (size_t)ncnt * sizeof(int), g->stream));
    cudaCheck(err, cudaStreamSynchronize(g->stream));
    d->part_floats = need, d->ncnt = ncnt;
    return 0;
}

// Row stride in bytes of variant r's staging tile: the CTA's channels, 16 bytes of padding.
static int bsh_srow(const bsh_gpu *d, bsh_variant r) { return r.nw / r.ws * d->np * 2 + 16; }

// Shared byte offset of variant v's zero slot: past its window buffers
// (bsh_nbuf) and its staging tile, which lies over them.
static long long bsh_zoff(const bsconv_shape *s, const bsh_gpu *d, int v) {
    const bsh_variant r = bsh_variant_get(v);
    bsconv_htile t;
    bsconv_htile_pick(s, r.tm, d->cc, &t);
    const long long win = bsconv_htile_bytes(&t, d->cc) * bsh_nbuf(r, d->nchunks);
    const long long st = r.stage ? (long long)r.tm * bsh_srow(d, r) : 0;
    return ((win > st ? win : st) + 15) / 16 * 16;
}

// Dynamic shared memory of variant v's CTA: its window buffers (or staging
// tile), a zero slot and the tile's two tables.
static long long bsh_smem_bytes(const bsconv_shape *s, const bsh_gpu *d, int v) {
    return bsh_zoff(s, d, v) + 16 + 2 * bsh_variant_get(v).tm * (long long)sizeof(int);
}

// Checks that variant v runs the layer and allows its shared memory.
extern "C" int bsh_gpu_prepare(const gpu_ctx *g, const bsconv_shape *s, const bsh_gpu *d, gpu_dtype dt,
                               int v, sc_err *err) {
    if (v < 0 || v >= BSH_VARIANTS) return sc_fail(err, "block-sparse conv: halo variant %d", v);
    void *fn = bsh_fn(s, d, dt, v);
    const bsh_variant r = bsh_variant_get(v);
    if (r.stage && (s->pool == 2 || !d->full))  // (bsh_fn has no staged kernel with a pool either)
        return sc_fail(err, "block-sparse conv: halo variant %d stages whole output rows: not with a pool or "
                       "groups of fewer than %d channels", v, d->np);
    if (d->nrem > 0 && (r.resident || r.split))
        return sc_fail(err, "block-sparse conv: halo variant %d %s; the remainder of a hybrid layer runs on "
                       "two buffers without a split", v, r.resident ? "keeps the window resident" : "splits the chunks");
    if (!fn)
        return sc_fail(err, "block-sparse conv: %d pixels x %d channels per warp need too many registers",
                       r.tm / r.ws, d->np);
    if (r.resident && d->nchunks <= 2)  // two buffers already hold every chunk: the same kernel run
        return sc_fail(err, "block-sparse conv: halo variant %d keeps the window resident, the same as two "
                       "buffers for %d chunk(s)", v, d->nchunks);
    if (r.split && bsh_gpu_nsplit(s, d, v) < 2)
        return sc_fail(err, "block-sparse conv: halo variant %d splits the chunks, and %d chunk(s) in %lld CTAs "
                       "leave nothing to split", v, d->nchunks, bsh_ctas(s, d, r));
    if (r.split && bsh_part_floats(s, d, v) > d->part_floats)
        return sc_fail(err, "block-sparse conv: halo variant %d: no split scratch (bsh_gpu_split_alloc)", v);
    const long long bytes = bsh_smem_bytes(s, d, v);
    if (bytes > g->dev.smem_block_optin)
        return sc_fail(err, "block-sparse conv: the window needs %lld bytes of shared memory (%d)", bytes,
                       g->dev.smem_block_optin);
    // The limit belongs to the kernel, which other layers share: raise it to the
    // device's opt-in maximum (never to this layer's need, which may be below theirs).
    // The carveout stays the driver's choice: forcing the largest ran no faster
    // alone and cost ~1 us more next to cuDNN's kernels (H100).
    cudaCheck(err, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, g->dev.smem_block_optin));
    return 0;
}

// Queues the kernel of variant v.
extern "C" int bsh_gpu_run(const gpu_ctx *g, const bsconv_shape *s, const bsh_gpu *d, gpu_dtype dt, int v,
                           const float *bias, const void *x, const void *z, void *y, sc_err *err) {
    const bsh_variant r = bsh_variant_get(v);
    bsh_args a;
    a.x = x, a.z = z, a.y = y, a.bias = bias, a.k0 = d->k0, a.nk = d->nk, a.ustart = d->ustart;
    a.units = d->units, a.vals = (const uint32_t *)d->vals;
    a.rstart = d->rstart, a.rcode = d->rcode, a.rvals = d->rvals;
    bsconv_htile_pick(s, r.tm, d->cc, &a.t);
    a.n = s->n, a.H = s->H, a.W = s->W, a.C = s->C, a.K = s->K, a.stride = s->stride, a.pad = s->pad;
    a.relu = s->relu, a.cc = d->cc, a.nchunks = d->nchunks, a.ngroups = d->ngroups, a.nw = r.nw, a.ws = r.ws;
    a.lnch = 0;
    while ((8 << a.lnch) < d->cc) a.lnch++;
    a.wbytes = (int)bsconv_htile_bytes(&a.t, d->cc);
    a.nbuf = bsh_nbuf(r, d->nchunks);
    a.zoff = (int)bsh_zoff(s, d, v), a.srow = bsh_srow(d, r);
    a.stage = r.stage && ((uintptr_t)y & 15) == 0;  // else the register epilogue, same results
    a.dep_early = g->pdl == 2;
    const long long tiles = bsconv_htile_count(&a.t);
    if (tiles > INT32_MAX) return sc_fail(err, "block-sparse conv: %lld tiles", tiles);
    void *fn = bsh_fn(s, d, dt, v);
    if (!fn) return sc_fail(err, "block-sparse conv: halo variant %d does not fit the layer", v);
    const int gpc = r.nw / r.ws;  // groups per CTA
    a.part = d->part, a.cnt = d->cnt;
    const dim3 grid((unsigned)tiles, (unsigned)((d->ngroups + gpc - 1) / gpc), (unsigned)bsh_gpu_nsplit(s, d, v));
    void *args[] = {&a};
    cudaCheck(err, sc_launch(g, fn, grid, dim3((unsigned)(r.nw * 32)), (size_t)bsh_smem_bytes(s, d, v), args));
    return 0;
}

// --- upload -------------------------------------------------------------------------------

// Uploads h's remainder (none: nothing), its weights narrowed to dt.
static int bsh_rem_upload(const gpu_ctx *g, const bsconv_hpack *h, gpu_dtype dt, bsh_gpu *d, sc_err *err) {
    d->nrem = h->nrem;
    if (!h->nrem) return 0;
    const size_t ns = (size_t)h->ngroups * h->nchunks * h->np + 1, n = (size_t)h->nrem;
    SC_TRY(gpu_new_upload((void **)&d->rstart, h->rstart, ns * sizeof *h->rstart, err));
    SC_TRY(gpu_new_upload((void **)&d->rcode, h->rcode, n * sizeof *h->rcode, err));
    return nhwc_new_from_host_f32(g, dt, n, h->rvals, &d->rvals, err);
}

// Uploads h, the weights narrowed to dt on the device.
extern "C" int bsh_gpu_upload(const gpu_ctx *g, const bsconv_hpack *h, gpu_dtype dt, bsh_gpu *d, sc_err *err) {
    memset(d, 0, sizeof *d);
    d->cc = h->cc, d->nchunks = h->nchunks, d->np = h->np, d->nf = h->nf, d->ngroups = h->ngroups;
    d->nunits = h->nunits;
    d->full = 1;
    for (int g = 0; g < h->ngroups; g++) d->full &= h->nk[g] == h->np && h->k0[g] == g * h->np;
    const size_t ng = (size_t)h->ngroups, nv = (size_t)h->nunits * h->nf * BSH_FRAG_VALS;
    SC_TRY(gpu_new_upload((void **)&d->k0, h->k0, ng * sizeof *h->k0, err));
    SC_TRY(gpu_new_upload((void **)&d->nk, h->nk, ng * sizeof *h->nk, err));
    SC_TRY(gpu_new_upload((void **)&d->ustart, h->ustart, (ng * h->nchunks + 1) * sizeof *h->ustart, err));
    SC_TRY(gpu_new_upload((void **)&d->units, h->units, ((size_t)h->nunits + 1) * sizeof *h->units, err));
    SC_TRY(nhwc_new_from_host_f32(g, dt, nv, h->vals, &d->vals, err));
    return bsh_rem_upload(g, h, dt, d, err);
}

// Frees the device arrays.
extern "C" void bsh_gpu_free(bsh_gpu *d) {
    cudaFree(d->k0), cudaFree(d->nk), cudaFree(d->ustart), cudaFree(d->units), cudaFree(d->vals);
    cudaFree(d->part), cudaFree(d->cnt);
    cudaFree(d->rstart), cudaFree(d->rcode), cudaFree(d->rvals);
    memset(d, 0, sizeof *d);
}
