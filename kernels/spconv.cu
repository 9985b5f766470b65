// Direct sparse convolution kernels (kernels/spconv_gpu.h): the tiled kernel
// (input tile in shared memory, warp-uniform weights, registers blocked over
// output channels x conv rows x column pairs), the kernel with output
// channels along the lanes (small images, batch 1), the sparse linear kernel
// and the plain one-thread-per-output kernel. Layouts: kernels/spconv_impl.h.
#include <limits.h>
#include <math.h>

#include "kernels/epilogue_gpu.h"
#include "kernels/spconv_dev.h"

// --- value types ----------------------------------------------------------------

// Activation element type of a value type (fp32: float, fp16 and cb4: __half).
template <int VT> struct spk_elem { typedef __half T; };
template <> struct spk_elem<0> { typedef float T; };

// Accumulator of one unit and conv row: fp32 one column, fp16 a column pair.
template <int VT> struct spk_acc { typedef float2 T; };
template <> struct spk_acc<0> { typedef float T; };

// --- plain kernel -------------------------------------------------------------

// Raw conv value of pixel (p, q) of image img, row k (weights and offsets from global).
template <typename T>
__device__ float spk_plain_pixel(const spk_args &a, int img, int k, int p, int q) {
    const T *win = (const T *)a.in + (size_t)img * a.C * a.Hb * a.Wb +
                   (size_t)(p * a.stride) * a.Wb + (size_t)(q * a.stride);
    const float *w = (const float *)a.w + (size_t)k * a.nnz;
    const int32_t *o = a.goff + (size_t)k * a.nnz;
    float acc = 0.0f;
    for (int j = 0; j < a.nnz; j++) acc = fmaf(__ldg(w + j), spk_ld(win, __ldg(o + j)), acc);
    return acc;
}

// One thread per output element; any geometry and any max pool (the
// epilogue of kernels/epilogue_gpu.h; decoded weights, so no row scale).
template <int VT>
__global__ void __launch_bounds__(256, 2) spk_plain_kernel(const __grid_constant__ spk_args a) {
    typedef typename spk_elem<VT>::T T;
    const sc_epi e = {a.n, a.K, a.P, a.Q, a.Po, a.Qo, a.ob, a.bias, a.relu, a.pk, a.ps, a.pp};
    sc_epi_run(e, (T *)a.out, [&](int img, int k, int p, int q) {
        return spk_plain_pixel<T>(a, img, k, p, q);
    });
}

// --- tiled kernel: staging ----------------------------------------------------

// Input columns (bordered, -1: none) of tile-row word cw: x for fp32, x and y
// for a half2 (view column v at bordered v vs + cmin).
template <int VT> __device__ int2 spk_colsrc(const spk_args &a, int cw) {
    int2 r = make_int2(-1, -1);
    if (cw >= a.stride * a.pw) return r;
    const int ph = cw / a.pw, rem = cw - ph * a.pw;
    if (VT == 0) {
        const int col = (rem * a.stride + ph) * a.vs + a.cmin;
        r.x = col < a.Wb ? col : -1;
    } else {
        const int cpy = rem >= a.np ? 1 : 0, pi = rem - cpy * a.np;
        const int col0 = ((2 * pi + cpy) * a.stride + ph) * a.vs + a.cmin;
        const int col1 = col0 + a.stride * a.vs;
        r.x = col0 < a.Wb ? col0 : -1;
        r.y = col1 < a.Wb ? col1 : -1;
    }
    return r;
}

// Copies the chunk's input tile (nb images, cc channels from c0, br view rows
// from bordered row prow0, vs apart) into shared memory; out-of-range
// elements become 0.
// The thread copies word cw of lines l0, l0 + lstep, ... (a line: one row of
// one channel of one image; src: cw's input columns), eight loads in flight.
template <int VT>
__device__ __forceinline__ void spk_tile_stage(const spk_args &a, uint32_t *tile, int2 src, int cw,
                                               int l0, int lstep, int n0, int c0, int prow0) {
    const int lines = a.nb * a.cc * a.br, ipad = a.ip - a.cc * a.cp;
    for (int base = l0; base < lines; base += 8 * lstep) {
        uint32_t v[8];
        int dst[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int line = base + u * lstep;
            v[u] = 0, dst[u] = -1;
            if (line >= lines) continue;
            const int pl = (int)spk_div(line, a.f_br), row = line - pl * a.br;
            const int i = (int)spk_div(pl, a.f_cc), cl = pl - i * a.cc;
            dst[u] = line * a.rp + cw + i * ipad;
            const int c = c0 + cl, img = n0 + i, grow = prow0 + row * a.vs;
            if (c >= a.C || img >= a.n || grow >= a.Hb) continue;
            const size_t at = (((size_t)img * a.C + c) * a.Hb + grow) * a.Wb;
            if (VT == 0) {
                if (src.x >= 0) v[u] = __float_as_uint(__ldg((const float *)a.in + at + src.x));
            } else {
                const unsigned short *h = (const unsigned short *)a.in + at;
                const uint32_t lo = src.x >= 0 ? __ldg(h + src.x) : 0u;
                const uint32_t hi = src.y >= 0 ? __ldg(h + src.y) : 0u;
                v[u] = lo | (hi << 16);
            }
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (dst[u] >= 0) tile[dst[u]] = v[u];
    }
}

// --- tiled kernel: one row's records of a chunk --------------------------------
//
// Records are 8 bytes (fp32, fp16) or 4 (codebook); a row's records of a chunk
// are read with warp-uniform 16-byte loads in groups of 8 records, the next
// group loaded before the current one is used, so that the load latency (L2
// when the weights are not in L1) is paid once per group, not per record.

// Runs f on record words (8-byte records: two words, codebook: one) [jb, je) of a row.
template <int RW, typename F>
__device__ __forceinline__ void spk_records(const uint32_t *wr, int jb, int je, F &&f) {
    constexpr int PER = 4 / RW, G = 8, NL = G / PER;  // records per load and group, loads
    int j = jb;
    uint32_t t[RW * G];
    if (j % PER) {  // head up to 16-byte alignment: independent loads, then use
        const int h = min(je, (j / PER + 1) * PER) - j;
#pragma unroll
        for (int i = 0; i < PER - 1; i++)
            if (i < h)
#pragma unroll
                for (int w = 0; w < RW; w++) t[i * RW + w] = __ldg(wr + (size_t)(j + i) * RW + w);
#pragma unroll
        for (int i = 0; i < PER - 1; i++)
            if (i < h) f(t + i * RW);
        j += h;
    }
    if (j + G <= je) {
        uint4 cur[NL], nxt[NL];
#pragma unroll
        for (int l = 0; l < NL; l++)
            cur[l] = __ldg(reinterpret_cast<const uint4 *>(wr + (size_t)j * RW) + l);
        for (;;) {
            const bool more = j + 2 * G <= je;
            if (more)
#pragma unroll
                for (int l = 0; l < NL; l++)
                    nxt[l] = __ldg(reinterpret_cast<const uint4 *>(wr + (size_t)(j + G) * RW) + l);
#pragma unroll
            for (int l = 0; l < NL; l++) {
                const uint32_t q[4] = {cur[l].x, cur[l].y, cur[l].z, cur[l].w};
#pragma unroll
                for (int i = 0; i < PER; i++) f(q + i * RW);
            }
            j += G;
            if (!more) break;
#pragma unroll
            for (int l = 0; l < NL; l++) cur[l] = nxt[l];
        }
    }
    const int r = je - j;  // tail (< G records): independent loads, then use
#pragma unroll
    for (int i = 0; i < G - 1; i++)
        if (i < r)
#pragma unroll
            for (int w = 0; w < RW; w++) t[i * RW + w] = __ldg(wr + (size_t)(j + i) * RW + w);
#pragma unroll
    for (int i = 0; i < G - 1; i++)
        if (i < r) f(t + i * RW);
}

// fp32 records (value, offset) [jb, je): acc[rs] += v * s[o + rs * rstep].
template <int RS>
__device__ __forceinline__ void spk_f32_row(const uint32_t *wr, int jb, int je, const float *s,
                                            int rstep, float (&acc)[RS]) {
    spk_records<2>(wr, jb, je, [&](const uint32_t *rec) {
        const float v = __uint_as_float(rec[0]);
        const float *p = s + (int)rec[1];
#pragma unroll
        for (int r = 0; r < RS; r++) acc[r] = fmaf(v, p[r * rstep], acc[r]);
    });
}

// Adds half2 partial sums into the fp32 accumulators.
template <int RS>
__device__ __forceinline__ void spk_h2_flush(const __half2 (&h)[RS], float2 (&acc)[RS]) {
#pragma unroll
    for (int r = 0; r < RS; r++) {
        const float2 f = __half22float2(h[r]);
        acc[r].x += f.x, acc[r].y += f.y;
    }
}

// fp16 records (half2 value, offset) or codebook records (offset << 5 | code)
// [jb, je): h[rs] += w * s[o + rs * rstep] on both columns of the pair; the
// half2 sums are flushed into fp32 every 32 records.
template <int VT, int RS>
__device__ __forceinline__ void spk_h2_row(const spk_args &a, const uint32_t *wr, int jb, int je,
                                           const __half2 *s, int rstep, float2 (&acc)[RS]) {
    for (int j0 = jb; j0 < je; j0 += 32) {
        __half2 h[RS];
#pragma unroll
        for (int r = 0; r < RS; r++) h[r] = __float2half2_rn(0.0f);
        spk_records<VT == 1 ? 2 : 1>(wr, j0, min(j0 + 32, je), [&](const uint32_t *rec) {
            const __half2 w = spk_h2(VT == 1 ? rec[0] : a.cbh[rec[0] & 31u]);
            const __half2 *p = s + (int)(VT == 1 ? rec[1] : rec[0] >> 5);
#pragma unroll
            for (int r = 0; r < RS; r++) h[r] = __hfma2(w, p[r * rstep], h[r]);
        });
        spk_h2_flush<RS>(h, acc);
    }
}

// --- tiled kernel: epilogue ----------------------------------------------------

// Writes the RB channels x RS conv rows of one unit: bias, scale, ReLU and the
// 2x2 pool (fp32: rows in registers, columns with the neighbouring lane).
template <int VT, int RS, int RB, int POOL>
__device__ __forceinline__ void spk_tile_epilogue(const spk_args &a,
                                                  typename spk_acc<VT>::T (&acc)[RB][RS], int kt,
                                                  bool ok, int img, int prow, int l) {
    typedef typename spk_elem<VT>::T T;
    T *out = (T *)a.out;
#pragma unroll
    for (int r = 0; r < RB; r++) {
        if (kt + r >= a.K) break;  // warp-uniform
        const int k = spk_chan(a, kt + r);
        if constexpr (VT == 0) {
            float y[RS];
#pragma unroll
            for (int s = 0; s < RS; s++) y[s] = spk_act(a, k, acc[r][s]);
            if constexpr (POOL) {
#pragma unroll
                for (int t = 0; t < RS / 2; t++) {
                    float m = fmaxf(y[2 * t], y[2 * t + 1]);
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                    const int po = prow / 2 + t, qo = l >> 1;
                    if (ok && !(l & 1) && po < a.Po && qo < a.Qo)
                        spk_st(out, spk_out_at(a, img, k, po, qo), m);
                }
            } else {
#pragma unroll
                for (int s = 0; s < RS; s++)
                    if (ok && prow + s < a.P && l < a.Q)
                        spk_st(out, spk_out_at(a, img, k, prow + s, l), y[s]);
            }
        } else {
            float y0[RS], y1[RS];
#pragma unroll
            for (int s = 0; s < RS; s++)
                y0[s] = spk_act(a, k, acc[r][s].x), y1[s] = spk_act(a, k, acc[r][s].y);
            if constexpr (POOL) {
#pragma unroll
                for (int t = 0; t < RS / 2; t++) {
                    const float m = fmaxf(fmaxf(y0[2 * t], y1[2 * t]),
                                          fmaxf(y0[2 * t + 1], y1[2 * t + 1]));
                    const int po = prow / 2 + t;
                    if (ok && po < a.Po && l < a.Qo) spk_st(out, spk_out_at(a, img, k, po, l), m);
                }
            } else {
#pragma unroll
                for (int s = 0; s < RS; s++) {
                    if (!ok || prow + s >= a.P) continue;
                    if (2 * l < a.Q) spk_st(out, spk_out_at(a, img, k, prow + s, 2 * l), y0[s]);
                    if (2 * l + 1 < a.Q)
                        spk_st(out, spk_out_at(a, img, k, prow + s, 2 * l + 1), y1[s]);
                }
            }
        }
    }
}

// --- tiled kernel ----------------------------------------------------------------

// Block: nb images x a band of pb conv rows x kb*ki output channels. Thread:
// one unit (image, RS conv rows, one column or column pair) x RB channels.
// The input of a chunk of cc channels sits in shared memory; each row's
// records of the chunk are read with warp-uniform addresses.
template <int VT, int RS, int RB, int POOL>
__global__ void __launch_bounds__(256, 2) spk_tile_kernel(const __grid_constant__ spk_args a) {
    extern __shared__ __align__(16) uint32_t sm[];
    uint32_t *tile = sm + 2 * a.rp;  // (nb, ip) words (the first 2 rp words are unused)
    const int sl = (int)spk_div(threadIdx.x, a.f_rp), scw = threadIdx.x - sl * a.rp;
    const int slstep = (int)spk_div(blockDim.x, a.f_rp);  // >= 1: rp <= threads
    const int2 ssrc = spk_colsrc<VT>(a, scw);
    const int band = blockIdx.x % a.bands, n0 = (blockIdx.x / a.bands) * a.nb;
    const int p0 = band * a.pb, prow0 = p0 * a.stride * a.vs + a.rmin;
    const int u = threadIdx.x % a.ubp, kg = threadIdx.x / a.ubp;
    const bool live = u < a.ub;
    const int l = u % a.lc, i = (u / a.lc) % a.nb, gq = u / (a.lc * a.nb);
    const int rstep = a.stride * a.rp;
    const int ubase = live ? i * a.ip + gq * RS * rstep + l : 0;
    for (int kk = 0; kk < a.ki; kk++) {
        const int kt = (blockIdx.y * a.ki + kk) * a.kb + kg * RB;
        typename spk_acc<VT>::T acc[RB][RS];
#pragma unroll
        for (int r = 0; r < RB; r++)
#pragma unroll
            for (int s = 0; s < RS; s++) {
                if constexpr (VT == 0) acc[r][s] = 0.0f;
                else acc[r][s] = make_float2(0.0f, 0.0f);
            }
        for (int ch = 0; ch < a.nch; ch++) {
            if (a.nch > 1 || kk == 0) {
                __syncthreads();
                spk_tile_stage<VT>(a, tile, ssrc, scw, sl < slstep ? sl : INT_MAX / 2, slstep, n0,
                                   ch * a.cc, prow0);
                __syncthreads();
            }
            int jb[RB], je[RB];  // every row's span first: one load latency, not RB
#pragma unroll
            for (int r = 0; r < RB; r++) {
                jb[r] = je[r] = 0;
                if (kt + r < a.K) {
                    const int *cp = a.cptr + (size_t)(kt + r) * (a.nch + 1) + ch;
                    jb[r] = __ldg(cp), je[r] = __ldg(cp + 1);
                }
            }
#pragma unroll
            for (int r = 0; r < RB; r++) {
                const int k = kt + r;
                const size_t row = (size_t)(k < a.K ? k : 0) * a.nnzp;
                const uint32_t *wr = (const uint32_t *)a.w + row * (VT == 2 ? 1 : 2);
                if constexpr (VT == 0)
                    spk_f32_row<RS>(wr, jb[r], je[r], (const float *)tile + ubase, rstep, acc[r]);
                else
                    spk_h2_row<VT, RS>(a, wr, jb[r], je[r], (const __half2 *)tile + ubase, rstep,
                                       acc[r]);
            }
        }
        spk_tile_epilogue<VT, RS, RB, POOL>(a, acc, kt, live && n0 + i < a.n, n0 + i,
                                            p0 + gq * RS, l);
    }
}

// --- channels-along-lanes kernel (ell): epilogue ---------------------------------

// Sums the splits of each (row, image, pixel) from red, then bias, ReLU, the
// 2x2 pool and the store of the block's outputs.
template <int VT, int ET, int NI>
__device__ __forceinline__ void spk_ell_epilogue(const spk_args &a, const float *red, int img0,
                                                 int tp, int tq) {
    typedef typename spk_elem<VT>::T T;
    constexpr int PX = ET * ET, AX = NI * PX;
    const int half = ET / 2, outs = a.pool ? half * half : PX;
    for (int idx = threadIdx.x; idx < a.kbt * outs * NI; idx += blockDim.x) {
        const int kl2 = idx % a.kbt, rest = idx / a.kbt, op = rest % outs, i = rest / outs;
        const int kr = blockIdx.y * a.kbt + kl2, img = img0 + i;
        if (kr >= a.K || img >= a.n) continue;
        const int k2 = spk_chan(a, kr);
        auto conv = [&](int px) {
            float s = 0.0f;
            for (int c = 0; c < a.cs; c++) s += red[((size_t)c * a.kbt + kl2) * AX + i * PX + px];
            return spk_act(a, k2, s);
        };
        if (!a.pool) {
            const int p = tp + op / ET, q = tq + op % ET;
            if (p < a.P && q < a.Q) spk_st((T *)a.out, spk_out_at(a, img, k2, p, q), conv(op));
        } else if constexpr (ET >= 2) {
            const int x = op / half, y = op % half;
            const float m = fmaxf(fmaxf(conv(2 * x * ET + 2 * y), conv(2 * x * ET + 2 * y + 1)),
                                  fmaxf(conv((2 * x + 1) * ET + 2 * y),
                                        conv((2 * x + 1) * ET + 2 * y + 1)));
            const int po = tp / 2 + x, qo = tq / 2 + y;
            if (po < a.Po && qo < a.Qo) spk_st((T *)a.out, spk_out_at(a, img, k2, po, qo), m);
        }
    }
}

// --- channels-along-lanes kernel (ell) -------------------------------------------

// Four consecutive activations in shared memory as floats (16-byte aligned
// for fp32, 8-byte for fp16).
__device__ __forceinline__ float4 spk_ld4(const float *p) {
    return *reinterpret_cast<const float4 *>(p);
}
__device__ __forceinline__ float4 spk_ld4(const __half *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 lo = __half22float2(spk_h2(u.x)), hi = __half22float2(spk_h2(u.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Two consecutive activations in shared memory as floats (8-byte aligned
// for fp32, 4-byte for fp16).
__device__ __forceinline__ float2 spk_ld2(const float *p) {
    return *reinterpret_cast<const float2 *>(p);
}
__device__ __forceinline__ float2 spk_ld2(const __half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}

// Block: NI images, one ET x ET tile of conv pixels each, kbt kernel rows,
// each row's records split cs ways (thread = row x split, rows along the
// lanes so the transposed records load coalesced; each record feeds NI x ET x
// ET multiply-adds). The tiles' input (all channels) sits in shared memory,
// the NI images of an element side by side (one vector load for all of
// them); the splits are summed through it.
template <int VT, int ET, int NI>
__global__ void __launch_bounds__(256, 2) spk_ell_kernel(const __grid_constant__ spk_args a) {
    typedef typename spk_elem<VT>::T T;
    constexpr int PX = ET * ET, AX = NI * PX;
    extern __shared__ __align__(16) uint32_t sm[];
    T *tile = reinterpret_cast<T *>(sm);                     // (C, ebr, ebc, NI)
    float *red = reinterpret_cast<float *>(sm + a.red_off);  // (threads, NI, PX)
    float *cbs = red + (size_t)blockDim.x * AX;              // (32) codebook
    if (VT == 2)
        for (int c = threadIdx.x; c < 32; c += blockDim.x) cbs[c] = a.cbf[c];
    const int img0 = (blockIdx.x / a.ntiles) * NI, t = blockIdx.x % a.ntiles;
    const int tp = (t / a.tiles_q) * ET, tq = (t % a.tiles_q) * ET;
    const int r0 = tp * a.stride * a.vs + a.rmin, c0 = tq * a.stride * a.vs + a.cmin;
    const int per = a.ebr * a.ebc, total = a.C * per;
    const T *src = (const T *)a.in + (size_t)img0 * a.C * a.Hb * a.Wb;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
        const int c = (int)spk_div(idx, a.f_plane), rem = idx - c * per;
        const int row = (int)spk_div(rem, a.f_ebc), col = rem - row * a.ebc;
        const int gr = r0 + row * a.vs, gc = c0 + col * a.vs;  // view element (row, col)
        const bool in = gr < a.Hb && gc < a.Wb;
        const size_t at = ((size_t)c * a.Hb + gr) * a.Wb + gc, istep = (size_t)a.C * a.Hb * a.Wb;
#pragma unroll
        for (int i = 0; i < NI; i++) {  // the NI images of an element side by side
            T v = (T)0.0f;
            if (in && img0 + i < a.n) v = __ldg(src + i * istep + at);
            tile[(size_t)idx * NI + i] = v;
        }
    }
    __syncthreads();
    const int kl = threadIdx.x % a.kbt, cs = threadIdx.x / a.kbt, k = blockIdx.y * a.kbt + kl;
    float acc[AX];
#pragma unroll
    for (int x = 0; x < AX; x++) acc[x] = 0.0f;
    // split bounds from the warp's longest row (kbt is a multiple of 32, so the
    // warp shares cs): its lanes read the same record index j at once, coalesced
    const int len = k < a.K ? spk_row_span(a, k).y : 0;
    const int wl = __reduce_max_sync(0xffffffffu, len);
    if (k < a.K) {
        const int jb = (int)((long)cs * wl / a.cs);
        const int je = min(len, (int)((long)(cs + 1) * wl / a.cs));
        const int sr = a.stride * a.ebc, sq = a.stride;
        // one record: its weight times the NI x ET x ET inputs it meets
        auto use = [&](float v, int o) {
#pragma unroll
            for (int x = 0; x < ET; x++)
#pragma unroll
                for (int y = 0; y < ET; y++) {
                    const T *p = tile + (size_t)(o + x * sr + y * sq) * NI;
                    if constexpr (NI == 1) {
                        acc[x * ET + y] = fmaf(v, (float)p[0], acc[x * ET + y]);
                    } else if constexpr (NI == 2) {
                        const float2 f = spk_ld2(p);
                        acc[x * ET + y] = fmaf(v, f.x, acc[x * ET + y]);
                        acc[PX + x * ET + y] = fmaf(v, f.y, acc[PX + x * ET + y]);
                    } else {
#pragma unroll
                        for (int i = 0; i < NI; i += 4) {
                            const float4 f = spk_ld4(p + i);
                            acc[i * PX + x * ET + y] = fmaf(v, f.x, acc[i * PX + x * ET + y]);
                            acc[(i + 1) * PX + x * ET + y] =
                                fmaf(v, f.y, acc[(i + 1) * PX + x * ET + y]);
                            acc[(i + 2) * PX + x * ET + y] =
                                fmaf(v, f.z, acc[(i + 2) * PX + x * ET + y]);
                            acc[(i + 3) * PX + x * ET + y] =
                                fmaf(v, f.w, acc[(i + 3) * PX + x * ET + y]);
                        }
                    }
                }
        };
        // record j of this row: raw words (fp32/fp16: value and offset; cb4: one word)
        auto load = [&](int j) {
            if constexpr (VT == 2) {
                const uint32_t p = __ldg((const uint32_t *)a.w + (size_t)j * a.K + k);
                return make_uint2(p, 0u);
            } else {
                return __ldg((const uint2 *)a.w + (size_t)j * a.K + k);
            }
        };
        auto decode = [&](uint2 r) {
            if constexpr (VT == 2) use(cbs[r.x & 31u], (int)(r.x >> 5));
            else use(__uint_as_float(r.x), (int)r.y);
        };
        constexpr int B = AX <= 4 ? 8 : 4;  // loads in flight: more when a record feeds few FMAs
        int j = jb;
        for (; j + B <= je; j += B) {
            uint2 r[B];
#pragma unroll
            for (int u = 0; u < B; u++) r[u] = load(j + u);
#pragma unroll
            for (int u = 0; u < B; u++) decode(r[u]);
        }
        for (; j < je; j++) decode(load(j));
    }
#pragma unroll
    for (int x = 0; x < AX; x++) red[(size_t)threadIdx.x * AX + x] = acc[x];
    __syncthreads();
    spk_ell_epilogue<VT, ET, NI>(a, red, img0, tp, tq);
}

// --- sparse linear kernel -------------------------------------------------------

// Block: 32 images (one per lane) x lkb output features, a warp per feature
// (warp-uniform records); the 32 input vectors sit in shared memory.
template <int VT>
__global__ void __launch_bounds__(256, 2) spk_linear_kernel(const __grid_constant__ spk_args a) {
    typedef typename spk_elem<VT>::T T;
    extern __shared__ __align__(16) uint32_t sm[];
    const int pitch = a.C + 1;
    float *x = reinterpret_cast<float *>(sm);  // (32, C + 1)
    float *cbs = x + 32 * pitch;               // (32)
    if (VT == 2)
        for (int c = threadIdx.x; c < 32; c += blockDim.x) cbs[c] = a.cbf[c];
    const int n0 = blockIdx.x * 32;
    for (int idx = threadIdx.x; idx < 32 * a.C; idx += blockDim.x) {
        const int i = (int)spk_div(idx, a.f_c), c = idx - i * a.C;
        x[i * pitch + c] =
            n0 + i < a.n ? spk_ld((const T *)a.in, (size_t)(n0 + i) * a.C + c) : 0.0f;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int kend = min(a.K, ((int)blockIdx.y + 1) * a.lkb);
    const float *xr = x + lane * pitch;
    for (int k = blockIdx.y * a.lkb + (threadIdx.x >> 5); k < kend; k += nw) {
        float acc = 0.0f;
        const int je = spk_row_span(a, k).y;
#pragma unroll 4
        for (int j = 0; j < je; j++) {
            if (VT == 2) {
                const uint32_t p = __ldg((const uint32_t *)a.w + (size_t)k * a.nnzp + j);
                acc = fmaf(cbs[p & 31u], xr[p >> 5], acc);
            } else {
                const float2 w = __ldg((const float2 *)a.w + (size_t)k * a.nnzp + j);
                acc = fmaf(w.x, xr[__float_as_int(w.y)], acc);
            }
        }
        const int ko = spk_chan(a, k);
        if (n0 + lane < a.n)
            spk_st((T *)a.out, spk_out_at(a, n0 + lane, ko, 0, 0), spk_act(a, ko, acc));
    }
}

// --- dispatch -------------------------------------------------------------------

// Tiled kernel instance for (RS, RB) with fused pool or not.
template <int VT, int POOL> static spk_fn spk_tile_fn_vt(int rs, int rb) {
#define SPK_T(R, B) if (rs == R && rb == B) return spk_tile_kernel<VT, R, B, POOL>
    if (!POOL) {
        SPK_T(1, 2); SPK_T(1, 4); SPK_T(1, 8);
    }
    SPK_T(2, 2); SPK_T(2, 4); SPK_T(2, 8); SPK_T(4, 2); SPK_T(4, 4);
#undef SPK_T
    return nullptr;
}

// Channels-along-lanes kernel instance for tile side et and ni images per block.
template <int VT> static spk_fn spk_ell_fn_vt(int et, int ni) {
#define SPK_E(E, I) if (et == E && ni == I) return spk_ell_kernel<VT, E, I>
    SPK_E(1, 1); SPK_E(2, 1); SPK_E(4, 1); SPK_E(1, 2); SPK_E(2, 2); SPK_E(1, 4); SPK_E(2, 4);
    SPK_E(1, 16);
#undef SPK_E
    return nullptr;
}

// Kernel of a variant for value type vt (NULL when there is no such instance).
static spk_fn spk_kernel(const spk_cfg *c, int vt) {
    const int pool = c->a.pool;
    switch (c->kind) {
    case SPK_TILE:
        if (vt == 0) return pool ? spk_tile_fn_vt<0, 1>(c->rs, c->rb)
                                 : spk_tile_fn_vt<0, 0>(c->rs, c->rb);
        if (vt == 1) return pool ? spk_tile_fn_vt<1, 1>(c->rs, c->rb)
                                 : spk_tile_fn_vt<1, 0>(c->rs, c->rb);
        return pool ? spk_tile_fn_vt<2, 1>(c->rs, c->rb) : spk_tile_fn_vt<2, 0>(c->rs, c->rb);
    case SPK_PAIR:
        return vt == 0 ? spk_pair_fn(c->rs, c->rb, c->cw, pool, c->big) : nullptr;
    case SPK_ELL:
        return vt == 0 ? spk_ell_fn_vt<0>(c->et, c->ni)
               : vt == 1 ? spk_ell_fn_vt<1>(c->et, c->ni)
                         : spk_ell_fn_vt<2>(c->et, c->ni);
    case SPK_LINEAR:
        return vt == 0   ? spk_linear_kernel<0>
               : vt == 1 ? spk_linear_kernel<1>
                         : spk_linear_kernel<2>;
    default:
        return vt == 0 ? spk_plain_kernel<0> : vt == 1 ? spk_plain_kernel<1> : spk_plain_kernel<2>;
    }
}

// Grid of a variant for n images on a device with `sms` SMs.
static dim3 spk_grid(const spk_cfg *c, int sms, int n) {
    const spk_args &a = c->a;
    switch (c->kind) {
    case SPK_TILE:
    case SPK_PAIR:
        return dim3((unsigned)(a.bands * ((n + a.nb - 1) / a.nb)),
                    (unsigned)((a.K + a.kb * a.ki - 1) / (a.kb * a.ki)));
    case SPK_ELL:
        return dim3((unsigned)((n + a.ni - 1) / a.ni * a.ntiles),
                    (unsigned)((a.K + a.kbt - 1) / a.kbt));
    case SPK_LINEAR:
        return dim3((unsigned)((n + 31) / 32), (unsigned)((a.K + a.lkb - 1) / a.lkb));
    default: {
        const size_t total = (size_t)n * a.K * a.Po * a.Qo, cap = (size_t)sms * 64;
        size_t b = (total + 255) / 256;
        return dim3((unsigned)(b < 1 ? 1 : b > cap ? cap : b));
    }
    }
}

// --- host entry points ----------------------------------------------------------

// Divisor for spk_fdiv (d >= 1): shift = ceil(log2 d), mul = 2^32 (2^shift - d) / d + 1.
spk_fdiv spk_fdiv_make(uint32_t d) {
    uint32_t s = 0;
    while ((1ull << s) < d) s++;
    const uint64_t m = ((1ull << 32) * ((1ull << s) - d)) / d + 1;
    return spk_fdiv{(uint32_t)m, s};
}

// Raises the kernel's dynamic shared memory limit to what device dev allows
// (occ3 / occ4 pair variants: and asks for a shared-memory carveout that holds
// 3 / 4 of their blocks per SM); fails when the device has too little.
int spk_prepare(const spk_cfg *cfg, int vt, const gpu_devinfo *dev, sc_err *err) {
    spk_fn fn = spk_kernel(cfg, vt);
    if (!fn) return sc_fail(err, "spconv: no kernel for variant kind %d", cfg->kind);
    if (cfg->smem > (size_t)dev->smem_block_optin)
        return sc_fail(err, "spconv: variant needs %zu bytes of shared memory, the device %d",
                       cfg->smem, dev->smem_block_optin);
    if (cfg->kind == SPK_PAIR && cfg->big >= 3) {  // occ3 / occ4: room for big blocks per SM
        const size_t need = (size_t)cfg->big * (cfg->smem + dev->smem_reserved);
        const size_t sm = (size_t)dev->smem_sm;
        const int pct = need >= sm ? 100 : (int)((100 * need + sm - 1) / sm);
        cudaCheck(err, cudaFuncSetAttribute((const void *)fn,
                                            cudaFuncAttributePreferredSharedMemoryCarveout, pct));
    }
    if (cfg->smem <= (size_t)dev->smem_block) return 0;
    cudaCheck(err, cudaFuncSetAttribute((const void *)fn,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        dev->smem_block_optin));
    return 0;
}

// Launches variant cfg for n images on stream st (device with `sms` SMs).
int spk_launch(const spk_cfg *cfg, int vt, int sms, int n, const void *in, void *out,
               cudaStream_t st, sc_err *err) {
    if (n <= 0) return 0;
    spk_args a = cfg->a;
    a.n = n, a.in = in, a.out = out;
    spk_fn fn = spk_kernel(cfg, vt);
    if (!fn) return sc_fail(err, "spconv: no kernel for variant kind %d", cfg->kind);
    void *params[] = {&a};
    cudaCheck(err, cudaLaunchKernel((const void *)fn, spk_grid(cfg, sms, n), dim3(cfg->threads),
                                    params, cfg->smem, st));
    return 0;
}
