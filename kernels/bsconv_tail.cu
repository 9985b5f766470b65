// The tail kernel of the block-sparse convolution (kernels/bsconv_tail_gpu.h):
// a chain of small-plane convs in one launch, one CTA per image, the
// activations in shared memory. Each warp takes (16-channel group, slice of
// 32 output pixels) items in turn; a group's units (a tap and 8 input
// channels each), repacked in pairs, are multiplied by mma.m16n8k16 with
// their A fragments read by ldmatrix straight from the input plane (pixel +
// tap), as in the halo kernel, but with the whole image's channels resident,
// so no layer waits on a window load. Nsight Compute on the first form (16
// warps, the halo packing read unit by unit; H200, 2026-11-27) found it
// issue-bound (half the cycles with no eligible warp, L2 at 4%): the pairs
// cut its instructions, the 32 warps did not move its time.
#include <stdio.h>
#include <string.h>

#include "kernels/bsconv_tail_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/ptx_gpu.h"

#define BST_WARPS 32  // warps per CTA (one CTA per SM: its planes fill shared memory)
#define BST_SLICE 32  // output pixels per warp's slice (MF <= 2: 64 registers a thread)

// One op as the kernel reads it.
struct bst_dop {
    const int32_t *prange;
    const int2 *pcode;
    const uint4 *pvals;
    const float *bias;
    int in, out, res;  // shared byte offsets (res -1: none)
    int pre, pool;     // pool 2: the unpooled output at pre (no ring), then a 2x2 max-pool into out
    int H, W, C, P, Q, K, R, stride, relu, ngroups;
    int OP, OQ;        // the output plane at out: P x Q, or P / 2 x Q / 2 with the pool
};

// The chain (passed by value).
struct bst_args {
    const __half *x;
    __half *y;
    int nops, zero;  // zero: shared byte offset of 16 zero bytes
    bst_dop op[BST_MAX_OPS];
};

// Shared byte offset of channel slot j at position p of a plane at base with
// nch slots per position (a multiple of 8): j xor-swizzled by the position.
__device__ __forceinline__ int bst_slot(int base, int p, int j, int nch) {
    return base + (p * nch + (j ^ (p & 7))) * 16;
}

// Position of ring entry i (0 <= i < 2 (q + 2) + 2 p) of a p x q plane with its ring.
__device__ __forceinline__ int bst_ring_pos(int i, int p, int q) {
    const int wp = q + 2;
    if (i < wp) return i;                                  // the top row
    if (i < 2 * wp) return (p + 1) * wp + (i - wp);        // the bottom row
    const int r = (i - 2 * wp) >> 1;                       // the sides of row r + 1
    return (r + 1) * wp + ((i & 1) ? q + 1 : 0);
}

// Zeroes the ring of the p x q x (nch slots) plane at base (every thread calls it).
__device__ __forceinline__ void bst_zero_ring(char *smem, int base, int p, int q, int nch) {
    const int n = (2 * (q + 2) + 2 * p) * nch;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = i / nch, j = i - e * nch;
        *(uint4 *)(smem + bst_slot(base, bst_ring_pos(e, p, q), j, nch)) = make_uint4(0, 0, 0, 0);
    }
}

// Starts the copies of image img of x into the first op's input plane (its ring zeroed).
__device__ __forceinline__ void bst_load_input(const bst_args &a, char *smem, int img) {
    const bst_dop &o = a.op[0];
    const int nch = o.C / 8, wp = o.W + 2, n = o.H * o.W * nch;
    bst_zero_ring(smem, o.in, o.H, o.W, nch);
    const __half *x = a.x + (size_t)img * o.H * o.W * o.C;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int pix = i / nch, j = i - pix * nch, h = pix / o.W, w = pix - h * o.W;
        ptx_cp16(smem + bst_slot(o.in, (h + 1) * wp + w + 1, j, nch), x + (size_t)pix * o.C + j * 8, 1);
    }
    ptx_cp_commit();
}

// acc += pairs [i, ie) of a group: D pairs' loads (a code pair and one
// 16-byte piece of weights per lane each) issued before their math; the
// ldmatrix rows at tap-(0, 0) input positions pos (-1: zeros) of the
// plane at shared address sin with nch slots per position.
template <int MF>
__device__ __forceinline__ void bst_pairs(const bst_dop &o, int i, int ie, uint32_t sin, int nch, uint32_t zaddr,
                                          const int *pos, int lane, float (*acc)[2][4]) {
    constexpr int D = MF <= 1 ? 4 : 2;
    for (; i < ie; i += D) {
        int2 cd[D];
        uint4 bv[D];
#pragma unroll
        for (int d = 0; d < D; d++)
            if (i + d < ie) cd[d] = __ldg(o.pcode + i + d), bv[d] = __ldg(o.pvals + (size_t)(i + d) * 32 + lane);
#pragma unroll
        for (int d = 0; d < D; d++) {
            if (i + d >= ie) break;  // the same for the whole warp
            const int code = lane < 16 ? cd[d].x : cd[d].y, tap = code & 255, j = code >> 8;
            const uint32_t b0[2] = {bv[d].x, bv[d].y}, b1[2] = {bv[d].z, bv[d].w};
#pragma unroll
            for (int mf = 0; mf < MF; mf++) {
                const int q = pos[mf] + tap;
                uint32_t fa[4];
                ptx_ldmatrix_x4(pos[mf] < 0 ? zaddr : sin + (uint32_t)((q * nch + (j ^ (q & 7))) * 16), fa);
                ptx_mma16816<__half>(acc[mf][0], fa, b0);
                ptx_mma16816<__half>(acc[mf][1], fa, b1);
            }
        }
    }
}

// Writes group g's accumulators to the output plane, or to pre when a pool
// follows (positions of this lane's rows in opos, -1: none): bias, residual,
// ReLU, fp16.
template <int MF>
__device__ __forceinline__ void bst_epilogue(const bst_dop &o, char *smem, int g, int lane, const int (*opos)[2],
                                             float (*acc)[2][4]) {
#pragma unroll
    for (int f = 0; f < 2; f++) {
        const int k = g * 16 + f * 8 + (lane & 3) * 2, j = 2 * g + f;
        const float b0 = o.bias ? __ldg(o.bias + k) : 0.0f, b1 = o.bias ? __ldg(o.bias + k + 1) : 0.0f;
#pragma unroll
        for (int mf = 0; mf < MF; mf++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int p = opos[mf][h];
                if (p < 0) continue;
                const int off = (p * (o.K / 8) + (j ^ (p & 7))) * 16 + (lane & 3) * 4;
                float v0 = acc[mf][f][h * 2] + b0, v1 = acc[mf][f][h * 2 + 1] + b1;
                if (o.res >= 0) {
                    const float2 z = __half22float2(*(const __half2 *)(smem + o.res + off));
                    v0 += z.x, v1 += z.y;
                }
                if (o.relu) v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
                *(__half2 *)(smem + (o.pool ? o.pre : o.out) + off) = __floats2half2_rn(v0, v1);
            }
    }
}

// One conv of the chain (every thread calls it; a barrier must follow): the
// warps take (group, slice of BST_SLICE output pixels) items in turn.
template <int MF>
__device__ void bst_conv(const bst_dop &o, char *smem, uint32_t sbase, uint32_t zaddr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, m = o.P * o.Q, wi = o.W + 2, pad = o.R / 2;
    const int nch = o.C / 8, nsl = (m + BST_SLICE - 1) / BST_SLICE, nitems = o.ngroups * nsl;
    bst_zero_ring(smem, o.out, o.OP, o.OQ, o.K / 8);
    if (warp >= nitems) return;
    const int sl = warp % nsl, r0 = sl * BST_SLICE;  // BST_WARPS is a multiple of nsl: a warp keeps its slice
    int pos[MF], opos[MF][2];
#pragma unroll
    for (int mf = 0; mf < MF; mf++) {
        const int i = r0 + mf * 16 + (lane & 15), py = i / o.Q, px = i - py * o.Q;
        pos[mf] = i < m ? (py * o.stride + 1 - pad) * wi + px * o.stride + 1 - pad : -1;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int e = r0 + mf * 16 + (lane >> 2) + h * 8, ey = e / o.Q, ex = e - ey * o.Q;
            opos[mf][h] = e >= m ? -1 : o.pool ? e : (ey + 1) * (o.Q + 2) + ex + 1;  // pre has no ring
        }
    }
    const uint32_t sin = sbase + (uint32_t)o.in;
    for (int it = warp; it < nitems; it += BST_WARPS) {
        const int g = it / nsl, i0 = __ldg(o.prange + g), ie = __ldg(o.prange + g + 1);
        float acc[MF][2][4];
#pragma unroll
        for (int mf = 0; mf < MF; mf++)
#pragma unroll
            for (int f = 0; f < 2; f++) acc[mf][f][0] = acc[mf][f][1] = acc[mf][f][2] = acc[mf][f][3] = 0.0f;
        bst_pairs<MF>(o, i0, ie, sin, nch, zaddr, pos, lane, acc);
        bst_epilogue<MF>(o, smem, g, lane, opos, acc);
    }
}

// The 2x2 max-pool of op o's unpooled output (pre) into its output plane
// (every thread calls it, after a barrier; a barrier must follow).
__device__ void bst_pool(const bst_dop &o, char *smem) {
    const int nch = o.K / 8, n = o.OP * o.OQ * nch;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int pix = i / nch, j = i - pix * nch, py = pix / o.OQ, px = pix - py * o.OQ;
        const int p0 = 2 * py * o.Q + 2 * px, q[4] = {p0, p0 + 1, p0 + o.Q, p0 + o.Q + 1};
        uint4 m = *(const uint4 *)(smem + bst_slot(o.pre, q[0], j, nch));
#pragma unroll
        for (int t = 1; t < 4; t++) {
            const uint4 v = *(const uint4 *)(smem + bst_slot(o.pre, q[t], j, nch));
            __half2 *mh = (__half2 *)&m;
            const __half2 *vh = (const __half2 *)&v;
#pragma unroll
            for (int e = 0; e < 4; e++) mh[e] = __hmax2(mh[e], vh[e]);
        }
        *(uint4 *)(smem + bst_slot(o.out, (py + 1) * (o.OQ + 2) + px + 1, j, nch)) = m;
    }
}

// Stores the last op's output plane to y (image img).
__device__ __forceinline__ void bst_store(const bst_args &a, const char *smem, int img) {
    const bst_dop &o = a.op[a.nops - 1];
    const int nch = o.K / 8, wp = o.OQ + 2, n = o.OP * o.OQ * nch;
    __half *y = a.y + (size_t)img * o.OP * o.OQ * o.K;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int pix = i / nch, j = i - pix * nch, py = pix / o.OQ, px = pix - py * o.OQ;
        *(uint4 *)(y + (size_t)pix * o.K + j * 8) = *(const uint4 *)(smem + bst_slot(o.out, (py + 1) * wp + px + 1, j, nch));
    }
}

// The chain on image blockIdx.x.
__global__ void __launch_bounds__(BST_WARPS * 32, 1) bst_kernel(bst_args a) {
    extern __shared__ __align__(16) char bst_smem[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(bst_smem);
    if (threadIdx.x < 4) ((uint32_t *)(bst_smem + a.zero))[threadIdx.x] = 0u;
    ptx_dep_wait();  // x belongs to the kernel before
    bst_load_input(a, bst_smem, (int)blockIdx.x);
    ptx_cp_wait<0>();
    __syncthreads();
    for (int k = 0; k < a.nops; k++) {
        const bst_dop &o = a.op[k];
        if (o.P * o.Q <= 16) bst_conv<1>(o, bst_smem, sbase, sbase + a.zero);
        else bst_conv<2>(o, bst_smem, sbase, sbase + a.zero);
        __syncthreads();
        if (o.pool) {
            bst_pool(o, bst_smem);
            __syncthreads();
        }
    }
    ptx_dep_launch();  // after the last conv whatever gpu_ctx.pdl's mode: only the store is left
    bst_store(a, bst_smem, (int)blockIdx.x);
}

// --- host ---------------------------------------------------------------------------------

extern "C" long long bst_plane_bytes(int h, int w, int c) { return (long long)(h + 2) * (w + 2) * c * 2; }

// 1 when op o pools its output (into out, from pre).
static int bst_pooled(const bst_op *o) { return o->s.pool > 1; }

extern "C" long long bst_pre_bytes(const bst_op *o) {
    int P, Q;
    bsconv_out_size(&o->s, &P, &Q);
    return bst_pooled(o) ? (long long)P * Q * o->s.K * 2 : 0;
}

// Shared memory the chain needs: past its last region, then 16 zero bytes.
static long long bst_smem_end(const bst_op *ops, int nops) {
    long long end = 0;
    for (int k = 0; k < nops; k++) {
        const bsconv_shape *s = &ops[k].s;
        int P, Q;
        bsconv_y_size(s, &P, &Q);
        const long long e[4] = {ops[k].in + bst_plane_bytes(s->H, s->W, s->C), ops[k].out + bst_plane_bytes(P, Q, s->K),
                                ops[k].res < 0 ? 0 : ops[k].res + bst_plane_bytes(P, Q, s->K),
                                bst_pooled(&ops[k]) ? ops[k].pre + bst_pre_bytes(&ops[k]) : 0};
        for (int i = 0; i < 4; i++) end = e[i] > end ? e[i] : end;
    }
    return (end + 15) / 16 * 16;
}

// 1 when [a, a + na) and [b, b + nb) overlap.
static int bst_overlap(long long a, long long na, long long b, long long nb) { return a < b + nb && b < a + na; }

// Checks op k of the chain (why: the reason, len bytes); 1 when it fits.
static int bst_op_ok(const bst_op *ops, int k, char *why, int len) {
    const bst_op *o = &ops[k];
    const bsconv_shape *s = &o->s;
    int P, Q, Po, Qo;
    bsconv_out_size(s, &P, &Q);
    bsconv_y_size(s, &Po, &Qo);
    const long long nin = bst_plane_bytes(s->H, s->W, s->C), nout = bst_plane_bytes(Po, Qo, s->K);
    const long long npre = bst_pre_bytes(o);
    const char *bad = NULL;
    if (s->R != s->S || (s->R != 1 && s->R != 3) || s->pad != s->R / 2) bad = "only 1x1 and 3x3 convs with pad R / 2";
    else if (s->stride != 1 && s->stride != 2) bad = "only strides 1 and 2";
    else if (s->pool > 2 || (bst_pooled(o) && (P % 2 || Q % 2 || o->res >= 0)))
        bad = "only a 2x2 pool, of an even plane, without a residual";
    else if (s->C % 64 || s->K % 64) bad = "channels must be multiples of 64";
    else if (P * Q > 64) bad = "at most 64 output pixels per image";
    else if (!o->w || o->w->ngroups * 16 != s->K) bad = "16-channel groups (16x8 blocks) only";
    else if (o->in % 16 || o->out % 16 || (o->res >= 0 && o->res % 16) || (npre && o->pre % 16))
        bad = "regions must be 16-byte aligned";
    else if (bst_overlap(o->out, nout, o->in, nin) || (o->res >= 0 && bst_overlap(o->out, nout, o->res, nout)))
        bad = "the output overlaps the input or the residual";
    else if (npre && (bst_overlap(o->pre, npre, o->in, nin) || bst_overlap(o->pre, npre, o->out, nout)))
        bad = "the unpooled output overlaps the input or the output";
    if (bad) snprintf(why, (size_t)len, "op %d: %s", k, bad);
    return bad == NULL;
}

extern "C" int bst_gpu_applies(const gpu_ctx *g, const bst_op *ops, int nops, char *why, int len) {
    char dummy[8];
    if (!why) why = dummy, len = sizeof dummy;
    if (nops < 1 || nops > BST_MAX_OPS) {
        snprintf(why, (size_t)len, "%d ops (1 to %d)", nops, BST_MAX_OPS);
        return 0;
    }
    for (int k = 0; k < nops; k++)
        if (!bst_op_ok(ops, k, why, len)) return 0;
    const long long bytes = bst_smem_end(ops, nops) + 16;
    if (bytes > g->dev.smem_block_optin) {
        snprintf(why, (size_t)len, "the chain's planes need %lld bytes of shared memory (%d)", bytes, g->dev.smem_block_optin);
        return 0;
    }
    return 1;
}

extern "C" int bst_gpu_prepare(const gpu_ctx *g, sc_err *err) {
    cudaCheck(err, cudaFuncSetAttribute((const void *)bst_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        g->dev.smem_block_optin));
    return 0;
}

extern "C" int bst_gpu_run(const gpu_ctx *g, const bst_op *ops, int nops, int n, const void *x, void *y, sc_err *err) {
    char why[160];
    if (!bst_gpu_applies(g, ops, nops, why, sizeof why)) return sc_fail(err, "block-sparse tail: %s", why);
    bst_args a;
    memset(&a, 0, sizeof a);
    a.x = (const __half *)x, a.y = (__half *)y, a.nops = nops;
    a.zero = (int)bst_smem_end(ops, nops);
    for (int k = 0; k < nops; k++) {
        const bst_op *o = &ops[k];
        bst_dop *d = &a.op[k];
        d->prange = o->w->prange, d->pcode = o->w->pcode, d->pvals = (const uint4 *)o->w->pvals, d->bias = o->bias;
        d->in = o->in, d->out = o->out, d->res = o->res;
        d->pool = bst_pooled(o), d->pre = d->pool ? o->pre : 0;
        d->H = o->s.H, d->W = o->s.W, d->C = o->s.C, d->K = o->s.K, d->R = o->s.R, d->stride = o->s.stride;
        d->relu = o->s.relu;
        bsconv_out_size(&o->s, &d->P, &d->Q);
        bsconv_y_size(&o->s, &d->OP, &d->OQ);
        d->ngroups = o->w->ngroups;
    }
    void *args[] = {&a};
    cudaCheck(err, sc_launch(g, (const void *)bst_kernel, dim3((unsigned)n), dim3(BST_WARPS * 32), (size_t)a.zero + 16,
                             args));
    return 0;
}

// --- weights ------------------------------------------------------------------------------

// Pair count and ranges of h's groups (16 channels each, full); -1 when h has other groups.
static int bst_ranges(const bsconv_hpack *h, int32_t *prange) {
    if (h->np != 16 || h->nf != 2) return -1;
    prange[0] = 0;
    for (int g = 0; g < h->ngroups; g++) {
        if (h->k0[g] != g * 16 || h->nk[g] != 16) return -1;
        const int n = h->ustart[(g + 1) * h->nchunks] - h->ustart[g * h->nchunks];
        prange[g + 1] = prange[g] + (n + 1) / 2;
    }
    return prange[h->ngroups];
}

// Unit u's tail code for layer s: its tap's offset in input positions | its 8-channel slot << 8.
static int bst_code(const bsconv_shape *s, const bsconv_hpack *h, int u, int chunk) {
    const uint32_t c = h->units[u];
    const int r = (int)(c & 255u), sx = (int)(c >> 8 & 255u), j = (int)(c >> 16);
    return (r * (s->W + 2) + sx) | (chunk * (h->cc / 8) + j) << 8;
}

// The fp16 bits of v (round to nearest even).
static uint16_t bst_half_bits(float v) {
    const __half h = __float2half_rn(v);
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

// Fills the pairs of group g: codes and lane-ordered fp16 weights (zeros for a missing second unit).
static void bst_pack_group(const bsconv_shape *s, const bsconv_hpack *h, int g, int32_t p0, int2 *pcode,
                           uint16_t *pvals) {
    int i = p0, half = 0;
    for (int c = 0; c < h->nchunks; c++)
        for (int u = h->ustart[g * h->nchunks + c]; u < h->ustart[g * h->nchunks + c + 1]; u++) {
            const int code = bst_code(s, h, u, c);
            if (!half) pcode[i].x = pcode[i].y = code;
            else pcode[i].y = code;
            for (int l = 0; l < 32; l++)
                for (int f = 0; f < 2; f++)
                    for (int e = 0; e < 2; e++)  // word 2 f + half of lane l, element e
                        pvals[(((size_t)i * 32 + l) * 4 + 2 * f + half) * 2 + e] =
                            bst_half_bits(h->vals[((size_t)u * 2 + f) * 64 + l * 2 + e]);
            half ^= 1;
            if (!half) i++;
        }
}

extern "C" int bst_gpu_upload(const gpu_ctx *g, const bsconv_shape *s, const bsconv_hpack *h, bst_w *w,
                              sc_err *err) {
    memset(w, 0, sizeof *w);
    int32_t *prange = (int32_t *)malloc((size_t)(h->ngroups + 1) * sizeof *prange);
    const int np = prange ? bst_ranges(h, prange) : -1;
    if (np < 0) {
        free(prange);
        return sc_fail(err, "block-sparse tail: the weights need 16-channel groups (16x8 blocks)");
    }
    int2 *pcode = (int2 *)calloc((size_t)np + 1, sizeof *pcode);
    uint16_t *pvals = (uint16_t *)calloc(((size_t)np + 1) * 32 * 8, sizeof *pvals);
    int rc = pcode && pvals ? 0 : sc_fail(err, "block-sparse tail: out of memory");
    for (int gi = 0; !rc && gi < h->ngroups; gi++) bst_pack_group(s, h, gi, prange[gi], pcode, pvals);
    w->ngroups = h->ngroups, w->npairs = np;
    if (!rc && (cudaMalloc((void **)&w->prange, (size_t)(h->ngroups + 1) * 4) != cudaSuccess ||
                cudaMalloc((void **)&w->pcode, ((size_t)np + 1) * sizeof *pcode) != cudaSuccess ||
                cudaMalloc((void **)&w->pvals, ((size_t)np + 1) * 32 * 16) != cudaSuccess))
        rc = sc_fail(err, "block-sparse tail: cudaMalloc failed");
    if (!rc) rc = gpu_upload(w->prange, prange, (size_t)(h->ngroups + 1) * 4, err);
    if (!rc) rc = gpu_upload(w->pcode, pcode, ((size_t)np + 1) * sizeof *pcode, err);
    if (!rc) rc = gpu_upload(w->pvals, pvals, ((size_t)np + 1) * 32 * 16, err);
    free(prange), free(pcode), free(pvals);
    (void)g;
    return rc;
}

extern "C" void bst_gpu_free(bst_w *w) {
    cudaFree(w->prange), cudaFree(w->pcode), cudaFree(w->pvals);
    memset(w, 0, sizeof *w);
}
