// fp32 tiled sparse convolution with CW = 2 or 4 output columns per thread
// (variant kind SPK_PAIR, kernels/spconv_gpu.h): the tiled kernel of
// spconv.cu (input tile in shared memory, warp-uniform weight records, output
// channels x conv rows blocked in registers), but each thread also owns CW
// columns l, l + H, ... of its conv rows, and the tile stores those CW inputs
// side by side (layout: kernels/spconv_impl.h), so one record costs per conv
// row one add, one 8- or 16-byte shared load and CW FMAs. Records hold byte
// offsets; each row's segment of a chunk has an even length (zero records
// pad it), so it is read in 16-byte loads throughout. Each (rs, rb, cw, pool)
// comes as a 256-thread kernel (two blocks per SM) and, for the small-plane
// list, as a "big" 512-thread one (one block per SM, a tile of up to 220 KB
// where the device has it):
// the same body, twice the output channels per block sharing each staged
// chunk, and fewer chunks (bench/kernels_small.md); some of those also as a
// "big pf" kernel that loads each row's first records during the row before;
// and some as "occ3" / "occ4" kernels, 256 threads with 3 or 4 blocks per SM
// (fewer registers, smaller tile; bench/kernels_small.md).
#include <limits.h>

#include "kernels/spconv_dev.h"

// --- slots ---------------------------------------------------------------------

// The CW floats of the slot at p (shared memory, 8- or 16-byte aligned).
template <int CW> __device__ __forceinline__ void spk_slot_ld(const char *p, float (&f)[CW]) {
    if constexpr (CW == 2) {
        const float2 v = *reinterpret_cast<const float2 *>(p);
        f[0] = v.x, f[1] = v.y;
    } else {
        const float4 v = *reinterpret_cast<const float4 *>(p);
        f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
    }
}

// Stores CW floats as the slot at p.
template <int CW> __device__ __forceinline__ void spk_slot_st(float *p, const float (&f)[CW]) {
    if constexpr (CW == 2) *reinterpret_cast<float2 *>(p) = make_float2(f[0], f[1]);
    else *reinterpret_cast<float4 *>(p) = make_float4(f[0], f[1], f[2], f[3]);
}

// --- staging ---------------------------------------------------------------------

// Copies the chunk's input tile (nb images, cc channels from c0, br view rows
// from bordered row prow0, vs apart) into shared memory as slots;
// out-of-range elements become 0. The thread fills slot sw of lines l0, l0 +
// lstep, ... (a line: one row of one channel of one image); slot sw of phase
// ph holds the phase's columns x = j, j + H, ... (j = sw - ph pw; view column
// v at bordered v vs + cmin), U slots (U CW loads) in flight.
template <int CW, int U>
__device__ __forceinline__ void spk_pair_stage(const spk_args &a, float *tile, int sw, int l0,
                                               int lstep, int n0, int c0, int prow0) {
    const int lines = a.nb * a.cc * a.br, ipad = a.ip - a.cc * a.cp;
    int col0 = INT_MAX / 2;  // bordered column of element 0 (none: past the row)
    if (sw < a.stride * a.pw) {
        const int ph = sw / a.pw, j = sw - ph * a.pw;
        col0 = (j * a.stride + ph) * a.vs + a.cmin;
    }
    const int cstep = a.lc * a.stride * a.vs;
    for (int base = l0; base < lines; base += U * lstep) {
        float v[U][CW];
        int dst[U];
#pragma unroll
        for (int t = 0; t < U; t++) {
            const int line = base + t * lstep;
#pragma unroll
            for (int k = 0; k < CW; k++) v[t][k] = 0.0f;
            dst[t] = -1;
            if (line >= lines) continue;
            const int pl = (int)spk_div(line, a.f_br), row = line - pl * a.br;
            const int i = (int)spk_div(pl, a.f_cc), cl = pl - i * a.cc;
            dst[t] = line * a.rp + sw + i * ipad;
            const int c = c0 + cl, img = n0 + i, grow = prow0 + row * a.vs;
            if (c >= a.C || img >= a.n || grow >= a.Hb) continue;
            const float *src = (const float *)a.in + (((size_t)img * a.C + c) * a.Hb + grow) * a.Wb;
#pragma unroll
            for (int k = 0; k < CW; k++)
                if (col0 + k * cstep < a.Wb) v[t][k] = __ldg(src + col0 + k * cstep);
        }
#pragma unroll
        for (int t = 0; t < U; t++)
            if (dst[t] >= 0) spk_slot_st<CW>(tile + (size_t)dst[t] * CW, v[t]);
    }
}

// --- records -------------------------------------------------------------------------

// One record (value bits vb, slot byte offset ob): acc[r][c] += v * slot(r)[c].
template <int RS, int CW>
__device__ __forceinline__ void spk_pair_use(uint32_t vb, uint32_t ob,
                                             const char *const (&rowp)[RS], float (&acc)[RS][CW]) {
    const float v = __uint_as_float(vb);
#pragma unroll
    for (int r = 0; r < RS; r++) {
        float f[CW];
        spk_slot_ld<CW>(rowp[r] + ob, f);
#pragma unroll
        for (int c = 0; c < CW; c++) acc[r][c] = fmaf(v, f[c], acc[r][c]);
    }
}

// The 2 NL records of NL 16-byte loads.
template <int RS, int CW, int NL>
__device__ __forceinline__ void spk_pair_group(const uint4 (&q)[NL], const char *const (&rowp)[RS],
                                               float (&acc)[RS][CW]) {
#pragma unroll
    for (int l = 0; l < NL; l++) {
        spk_pair_use<RS, CW>(q[l].x, q[l].y, rowp, acc);
        spk_pair_use<RS, CW>(q[l].z, q[l].w, rowp, acc);
    }
}

// Loads NL record pairs from p (warp-uniform).
template <int NL> __device__ __forceinline__ void spk_pair_load(const uint4 *p, uint4 (&q)[NL]) {
#pragma unroll
    for (int l = 0; l < NL; l++) q[l] = __ldg(p + l);
}

// Record pairs [jb, je) of a row (wr: the row as 16-byte record pairs): groups
// of NL pairs (2 NL records in registers) double-buffered (the next group
// loads while one is used), then a tail of up to NL - 1 pairs.
template <int RS, int CW, int NL>
__device__ __forceinline__ void spk_pair_row(const uint4 *wr, int jb, int je,
                                             const char *const (&rowp)[RS], float (&acc)[RS][CW]) {
    const uint4 *p = wr + jb, *const pe = wr + je;
    if (p + NL <= pe) {
        uint4 x[NL], y[NL];
        spk_pair_load<NL>(p, x);
        for (;;) {
            bool more = p + 2 * NL <= pe;
            if (more) spk_pair_load<NL>(p + NL, y);
            spk_pair_group<RS, CW, NL>(x, rowp, acc);
            p += NL;
            if (!more) break;
            more = p + 2 * NL <= pe;
            if (more) spk_pair_load<NL>(p + NL, x);
            spk_pair_group<RS, CW, NL>(y, rowp, acc);
            p += NL;
            if (!more) break;
        }
    }
    if constexpr (NL > 1) {  // tail: independent loads, then use (NL 1: none left)
        const int r = (int)(pe - p);
        uint4 t[NL - 1];
#pragma unroll
        for (int x = 0; x < NL - 1; x++)
            if (x < r) t[x] = __ldg(p + x);
#pragma unroll
        for (int x = 0; x < NL - 1; x++)
            if (x < r) {
                spk_pair_use<RS, CW>(t[x].x, t[x].y, rowp, acc);
                spk_pair_use<RS, CW>(t[x].z, t[x].w, rowp, acc);
            }
    }
}

// The first record group (NL pairs) of row k's segment [jb, je) into q, when
// the segment has one (warp-uniform); returns whether it did.
template <int NL>
__device__ __forceinline__ bool spk_pair_first(const spk_args &a, int k, int jb, int je,
                                               uint4 (&q)[NL]) {
    if (jb + NL > je) return false;
    spk_pair_load<NL>((const uint4 *)a.w + (size_t)k * (a.nnzp / 2) + jb, q);
    return true;
}

// The RB rows kt + r of one chunk (record pairs [jb[r], je[r])) for the big
// instances: spk_pair_row for each row in turn, but the next row's first group
// is loaded while the current row's last group and tail are used (into the
// buffer that is free then; x holds it when the row starts), so a row start
// does not wait for its first records (big blocks leave little L1 beside the
// tile, so they come from L2). The same records in the same order per row.
template <int RS, int RB, int CW>
__device__ __forceinline__ void spk_pair_rows(const spk_args &a, int kt, const int (&jb)[RB],
                                              const int (&je)[RB],
                                              const char *const (&rowp)[RS],
                                              float (&acc)[RB][RS][CW]) {
    constexpr int NL = CW == 2 ? 4 : 2;
    uint4 x[NL], y[NL];
    bool full = kt < a.K && spk_pair_first<NL>(a, kt, jb[0], je[0], x);
#pragma unroll
    for (int r = 0; r < RB; r++) {
        const int k = kt + r, kn = k + 1, rn = r + 1 < RB ? r + 1 : r;
        const bool has_next = r + 1 < RB && kn < a.K;
        const uint4 *p = (const uint4 *)a.w + (size_t)(k < a.K ? k : 0) * (a.nnzp / 2) + jb[r];
        const uint4 *const pe = p + (je[r] - jb[r]);
        bool nfull = false;  // the next row's first group is in x
        if (full) {  // x: this row's first group
            for (;;) {
                bool more = p + 2 * NL <= pe;
                if (more) spk_pair_load<NL>(p + NL, y);
                else if (has_next) nfull = spk_pair_first<NL>(a, kn, jb[rn], je[rn], y);
                spk_pair_group<RS, CW, NL>(x, rowp, acc[r]);
                p += NL;
                if (!more) {
#pragma unroll
                    for (int l = 0; l < NL; l++) x[l] = y[l];  // once per row
                    break;
                }
                more = p + 2 * NL <= pe;
                if (more) spk_pair_load<NL>(p + NL, x);
                else if (has_next) nfull = spk_pair_first<NL>(a, kn, jb[rn], je[rn], x);
                spk_pair_group<RS, CW, NL>(y, rowp, acc[r]);
                p += NL;
                if (!more) break;
            }
        } else if (has_next) {
            nfull = spk_pair_first<NL>(a, kn, jb[rn], je[rn], x);
        }
        const int rem = (int)(pe - p);  // tail: independent loads, then use
        uint4 t[NL - 1];
#pragma unroll
        for (int q = 0; q < NL - 1; q++)
            if (q < rem) t[q] = __ldg(p + q);
#pragma unroll
        for (int q = 0; q < NL - 1; q++)
            if (q < rem) {
                spk_pair_use<RS, CW>(t[q].x, t[q].y, rowp, acc[r]);
                spk_pair_use<RS, CW>(t[q].z, t[q].w, rowp, acc[r]);
            }
        full = nfull;
    }
}

// Row k's segment of chunk ch as record pairs [jb, je) (empty past K).
__device__ __forceinline__ void spk_pair_span(const spk_args &a, int k, int ch, int &jb, int &je) {
    jb = je = 0;
    if (k < a.K) {
        const int *cp = a.cptr + (size_t)k * (a.nch + 1) + ch;
        jb = __ldg(cp) >> 1, je = __ldg(cp + 1) >> 1;
    }
}

// The RB rows kt + r of chunk ch for the occ3 / occ4 instances (few
// registers): spk_pair_row for each row in turn with NL-pair groups, each
// row's span loaded while the row before runs (two spans live, not 2 RB).
template <int RS, int RB, int CW, int NL>
__device__ __forceinline__ void spk_pair_rows_lean(const spk_args &a, int kt, int ch,
                                                   const char *const (&rowp)[RS],
                                                   float (&acc)[RB][RS][CW]) {
    int jb, je;
    spk_pair_span(a, kt, ch, jb, je);
#pragma unroll
    for (int r = 0; r < RB; r++) {
        const int k = kt + r;
        int nb = 0, ne = 0;
        if (r + 1 < RB) spk_pair_span(a, k + 1, ch, nb, ne);
        const uint4 *wr = (const uint4 *)a.w + (size_t)(k < a.K ? k : 0) * (a.nnzp / 2);
        spk_pair_row<RS, CW, NL>(wr, jb, je, rowp, acc[r]);
        jb = nb, je = ne;
    }
}

// --- epilogue --------------------------------------------------------------------------

// Writes the RB channels x RS conv rows x CW columns (l + c lc) of one unit:
// bias, scale, ReLU and the 2x2 pool (rows in registers, columns with the
// neighbouring lane: lc is even with a pool).
template <int RS, int RB, int CW, int POOL>
__device__ __forceinline__ void spk_pair_epilogue(const spk_args &a, float (&acc)[RB][RS][CW],
                                                  int kt, bool ok, int img, int prow, int l) {
    float *out = (float *)a.out;
#pragma unroll
    for (int r = 0; r < RB; r++) {
        if (kt + r >= a.K) break;  // warp-uniform
        const int k = spk_chan(a, kt + r);
#pragma unroll
        for (int c = 0; c < CW; c++) {
            const int q = l + c * a.lc;
            if constexpr (POOL) {
#pragma unroll
                for (int t = 0; t < RS / 2; t++) {
                    float m = fmaxf(spk_act(a, k, acc[r][2 * t][c]),
                                    spk_act(a, k, acc[r][2 * t + 1][c]));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                    const int po = prow / 2 + t, qo = q >> 1;
                    if (ok && !(l & 1) && po < a.Po && qo < a.Qo)
                        out[spk_out_at(a, img, k, po, qo)] = m;
                }
            } else {
#pragma unroll
                for (int s = 0; s < RS; s++)
                    if (ok && prow + s < a.P && q < a.Q)
                        out[spk_out_at(a, img, k, prow + s, q)] = spk_act(a, k, acc[r][s][c]);
            }
        }
    }
}

// --- kernel ------------------------------------------------------------------------------

// Threads per block of pair kernel family BIG (1, 2: big blocks).
__host__ __device__ constexpr int spk_pair_threads(int big) {
    return big == 1 || big == 2 ? 512 : 256;
}

// Blocks per SM the registers must allow for family BIG (3, 4: occ3, occ4).
__host__ __device__ constexpr int spk_pair_blocks(int big) {
    return big == 1 || big == 2 ? 1 : big == 0 ? 2 : big;
}

// Record pairs per double-buffered group of family BIG with CW columns (occ3
// and occ4: one pair, 2 records, 8 registers for both buffers; two pairs
// spilled 32-80 bytes at cw 2).
__host__ __device__ constexpr int spk_pair_nl(int big, int cw) {
    return big >= 3 ? 1 : cw == 2 ? 4 : 2;
}

// Slots in flight per thread while staging (16 loads; occ3 and occ4: 8).
__host__ __device__ constexpr int spk_pair_u(int big, int cw) {
    return 16 / cw / (big >= 3 ? 2 : 1);
}

// Block: nb images x a band of pb conv rows x kb*ki output channels. Thread:
// one unit (image, RS conv rows, CW columns l + c lc) x RB channels. The input
// of a chunk of cc channels sits in shared memory as CW-float slots; each
// row's records of the chunk are read with warp-uniform 16-byte loads. BIG 0:
// up to 256 threads, two blocks per SM (<= 100 KB tile each); BIG 1: 512
// threads, one block per SM (kb twice as wide, up to 220 KB tile, so each
// staged chunk serves 2-4x the output channels: small planes); BIG 2: as 1,
// with each row's first record group loaded during the previous row; BIG 3, 4
// ("occ3", "occ4"): 256 threads, 3 or 4 blocks per SM (<= 80 or 64 registers,
// <= 75 or 56 KB tile), 16 or 8 accumulators, one-pair record groups and each
// row's span loaded during the row before, so more warps hide the shared,
// record and staging latencies.
template <int RS, int RB, int CW, int POOL, int BIG>
__global__ void __launch_bounds__(spk_pair_threads(BIG), spk_pair_blocks(BIG))
    spk_pair_kernel(const __grid_constant__ spk_args a) {
    extern __shared__ __align__(16) uint32_t sm[];
    float *tile = reinterpret_cast<float *>(sm) + (size_t)2 * a.rp * CW;  // (nb, ip) slots
    const int sl = (int)spk_div(threadIdx.x, a.f_rp), sw = threadIdx.x - sl * a.rp;
    const int slstep = (int)spk_div(blockDim.x, a.f_rp);  // >= 1: rp <= threads
    const int band = blockIdx.x % a.bands, n0 = (blockIdx.x / a.bands) * a.nb;
    const int p0 = band * a.pb, prow0 = p0 * a.stride * a.vs + a.rmin;
    const int u = threadIdx.x % a.ubp, kg = threadIdx.x / a.ubp;
    const bool live = u < a.ub;
    const int l = u % a.lc, i = (u / a.lc) % a.nb, gq = u / (a.lc * a.nb);
    const int rstep = a.stride * a.rp;  // slots from one conv row to the next
    const int ubase = live ? i * a.ip + gq * RS * rstep + l : 0;
    const char *rowp[RS];  // the thread's slot of each conv row (record offset 0)
#pragma unroll
    for (int r = 0; r < RS; r++)
        rowp[r] = reinterpret_cast<const char *>(tile + (size_t)(ubase + r * rstep) * CW);
    for (int kk = 0; kk < a.ki; kk++) {
        const int kt = (blockIdx.y * a.ki + kk) * a.kb + kg * RB;
        float acc[RB][RS][CW];
#pragma unroll
        for (int r = 0; r < RB; r++)
#pragma unroll
            for (int s = 0; s < RS; s++)
#pragma unroll
                for (int c = 0; c < CW; c++) acc[r][s][c] = 0.0f;
        for (int ch = 0; ch < a.nch; ch++) {
            if (a.nch > 1 || kk == 0) {
                __syncthreads();
                spk_pair_stage<CW, spk_pair_u(BIG, CW)>(a, tile, sw,
                                                        sl < slstep ? sl : INT_MAX / 2, slstep,
                                                        n0, ch * a.cc, prow0);
                __syncthreads();
            }
            if constexpr (BIG >= 3) {
                spk_pair_rows_lean<RS, RB, CW, spk_pair_nl(BIG, CW)>(a, kt, ch, rowp, acc);
            } else {
            int jb[RB], je[RB];  // every row's span first (record pairs): one load latency
#pragma unroll
            for (int r = 0; r < RB; r++) {
                jb[r] = je[r] = 0;
                if (kt + r < a.K) {
                    const int *cp = a.cptr + (size_t)(kt + r) * (a.nch + 1) + ch;
                    jb[r] = __ldg(cp) >> 1, je[r] = __ldg(cp + 1) >> 1;
                }
            }
            if constexpr (BIG == 2) {
                spk_pair_rows<RS, RB, CW>(a, kt, jb, je, rowp, acc);
            } else {
#pragma unroll
            for (int r = 0; r < RB; r++) {
                const int k = kt + r;
                const uint4 *wr = (const uint4 *)a.w + (size_t)(k < a.K ? k : 0) * (a.nnzp / 2);
                spk_pair_row<RS, CW, spk_pair_nl(BIG, CW)>(wr, jb[r], je[r], rowp, acc[r]);
            }
            }
            }
        }
        spk_pair_epilogue<RS, RB, CW, POOL>(a, acc, kt, live && n0 + i < a.n, n0 + i,
                                            p0 + gq * RS, l);
    }
}

// --- dispatch ------------------------------------------------------------------------------

// The SPK_PAIR kernel for (rs, rb, cw) with fused pool or not, 256-thread
// blocks (big 0), big 512-thread ones (1) or big ones with the next row's
// first records loaded early (2; only where the accumulators stay in
// registers: rb 8 spills, (4, 2, 4) puts them in local memory), or the
// 3- and 4-blocks-per-SM ones (3: 16 accumulators, 4: 8; (1, 8, 2) and
// (1, 4, 2) spilled 40-112 bytes there, so they are not instantiated); NULL: none.
spk_fn spk_pair_fn(int rs, int rb, int cw, int pool, int big) {
#define SPK_P(R, B, W, P) \
    if (!big && rs == R && rb == B && cw == W && pool == P) return spk_pair_kernel<R, B, W, P, 0>
    SPK_P(1, 8, 2, 0); SPK_P(2, 4, 2, 0); SPK_P(4, 2, 2, 0); SPK_P(4, 4, 2, 0); SPK_P(2, 8, 2, 0);
    SPK_P(2, 4, 2, 1); SPK_P(4, 2, 2, 1); SPK_P(4, 4, 2, 1); SPK_P(2, 8, 2, 1);
    SPK_P(1, 4, 4, 0); SPK_P(2, 2, 4, 0); SPK_P(2, 4, 4, 0); SPK_P(4, 2, 4, 0);
    SPK_P(2, 2, 4, 1); SPK_P(2, 4, 4, 1); SPK_P(4, 2, 4, 1);
#undef SPK_P
#define SPK_B(R, B, W, P) \
    if (big == 1 && rs == R && rb == B && cw == W && pool == P)  \
        return spk_pair_kernel<R, B, W, P, 1>
    SPK_B(1, 8, 2, 0); SPK_B(2, 4, 2, 0); SPK_B(2, 8, 2, 0); SPK_B(4, 4, 2, 0);
    SPK_B(1, 4, 4, 0); SPK_B(2, 4, 4, 0); SPK_B(4, 2, 4, 0);
    SPK_B(2, 4, 2, 1); SPK_B(2, 8, 2, 1); SPK_B(4, 4, 2, 1); SPK_B(2, 4, 4, 1); SPK_B(4, 2, 4, 1);
#undef SPK_B
#define SPK_F(R, B, W, P) \
    if (big == 2 && rs == R && rb == B && cw == W && pool == P)  \
        return spk_pair_kernel<R, B, W, P, 2>
    SPK_F(2, 4, 2, 0); SPK_F(1, 4, 4, 0); SPK_F(2, 4, 4, 0); SPK_F(2, 4, 2, 1); SPK_F(2, 4, 4, 1);
#undef SPK_F
#define SPK_O(O, R, B, W, P) \
    if (big == O && rs == R && rb == B && cw == W && pool == P)  \
        return spk_pair_kernel<R, B, W, P, O>
    SPK_O(3, 2, 4, 2, 0); SPK_O(3, 4, 2, 2, 0); SPK_O(3, 2, 2, 4, 0); SPK_O(3, 1, 4, 4, 0);
    SPK_O(3, 2, 4, 2, 1); SPK_O(3, 4, 2, 2, 1); SPK_O(3, 2, 2, 4, 1);
    SPK_O(4, 2, 2, 2, 0); SPK_O(4, 4, 1, 2, 0); SPK_O(4, 2, 1, 4, 0); SPK_O(4, 1, 2, 4, 0);
    SPK_O(4, 2, 2, 2, 1); SPK_O(4, 4, 1, 2, 1); SPK_O(4, 2, 1, 4, 1);
#undef SPK_O
    return nullptr;
}
