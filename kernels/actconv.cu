// Activation-sparse convolution kernels (kernels/actconv_gpu.h): the
// non-zero lists of the input (one warp per row) and the scatter kernel (one
// CTA per output row tile x output channel tile x image, accumulators in
// shared memory), then the bias + ReLU + max-pool epilogue of
// kernels/epilogue_gpu.h over the tile.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/actconv_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/epilogue_gpu.h"

// Threads of a scatter CTA and of a list-building block.
#define ACV_THREADS 256
// Conv pixels a tile aims at before its rows are cut to fit shared memory.
#define ACV_TILE_PIXELS 256
// Most output channels of one tile (the packed index keeps 16 bits for it).
#define ACV_MAX_KT 32

struct actconv_gpu {
    spconv_desc d;          // geometry only (pointers cleared)
    gpu_dtype dt;
    int max_n, sms;         // largest batch; SMs of the device it was made on
    int kt, tr;             // output channels per tile; output rows per tile (pooled rows if pooled)
    int cr, ir;             // most conv rows and input rows one tile reads
    int ntk, ntr, po, qo;   // tiles over K and over the output rows; output plane
    int wmax;               // most weights of one (channel tile, input channel)
    size_t smem;            // dynamic shared memory of a scatter CTA (bytes)
    int *wptr;              // (ntk * C + 1) start of each (tile, channel) weight group
    uint32_t *wpk;          // per weight: k_local << 16 | r << 8 | s
    float *wv;              // per weight: value
    float *bias;            // (K) or NULL
    int32_t *cnt;           // (max_n, C, H) non-zeros per input row
    uint16_t *col;          // (max_n, C, H, W) their columns
    void *val;              // (max_n, C, H, W) their values (activation type)
};

// What both kernels read (passed by value).
struct acv_args {
    const void *in;
    void *out;
    const int *wptr;
    const uint32_t *wpk;
    const float *wv, *bias;
    int32_t *cnt;
    uint16_t *col;
    void *val;
    int n, C, H, W, Hb, Wb, ib, K, P, Q, po, qo, ob, R, S, stride, pad;
    int relu, pk, ps, pp, kt, tr, cr, ir;
};

// --- kernel 1: the non-zero lists --------------------------------------------------

// One warp per input row: the row's non-zeros in column order (ballot, then
// the count of set lanes below each) into the row's slot, and their number.
template <typename T> __global__ void __launch_bounds__(ACV_THREADS) acv_nz_kernel(const acv_args a) {
    const int lane = threadIdx.x & 31;
    const size_t rows = (size_t)a.n * a.C * a.H, nwarps = (size_t)gridDim.x * (blockDim.x / 32);
    for (size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < rows; row += nwarps) {
        const size_t pl = row / a.H, slot = row * a.W;
        const int y = (int)(row % a.H);
        const T *x = (const T *)a.in + (pl * a.Hb + y + a.ib) * a.Wb + a.ib;
        int base = 0;
        for (int z0 = 0; z0 < a.W; z0 += 32) {
            const int z = z0 + lane;
            const T v = z < a.W ? x[z] : sc_fromf<T>(0.0f);
            const bool nz = z < a.W && sc_tof(v) != 0.0f;
            const unsigned m = __ballot_sync(0xffffffffu, nz);
            if (nz) {
                const int at = base + __popc(m & ((1u << lane) - 1u));
                a.col[slot + at] = (uint16_t)z;
                ((T *)a.val)[slot + at] = v;
            }
            base += __popc(m);
        }
        if (lane == 0) a.cnt[row] = base;
    }
}

// --- kernel 2: scatter ----------------------------------------------------------

// Shared memory of a tile: accumulators, staged non-zeros, staged weights, row starts.
struct acv_smem {
    float *acc;      // (kt, cr, Q)
    float *xv;       // (ir * W) staged input values
    uint32_t *xp;    // (ir * W) their row << 16 | column
    float *wv;       // (wmax) weights of the channel
    uint32_t *wp;    // (wmax) their k_local << 16 | r << 8 | s
    int *rs;         // (ir + 1) start of each staged row
};

// Carves the dynamic shared memory into the tile's arrays.
__device__ __forceinline__ acv_smem acv_carve(const acv_args &a, int wmax, float *base) {
    acv_smem s;
    s.acc = base;
    s.xv = s.acc + (size_t)a.kt * a.cr * a.Q;
    s.xp = (uint32_t *)(s.xv + (size_t)a.ir * a.W);
    s.wv = (float *)(s.xp + (size_t)a.ir * a.W);
    s.wp = (uint32_t *)(s.wv + wmax);
    s.rs = (int *)(s.wp + wmax);
    return s;
}

// Warp 0 writes rs[0..nir]: the starts of the staged rows (an exclusive scan
// of the row counts of image i, channel c, rows ya.. in chunks of 32 lanes).
__device__ __forceinline__ void acv_row_starts(const acv_args &a, int *rs, size_t row0, int nir) {
    const int lane = threadIdx.x & 31;
    int run = 0;
    if (lane == 0) rs[0] = 0;
    for (int b = 0; b < nir; b += 32) {
        int v = b + lane < nir ? a.cnt[row0 + b + lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += u;
        }
        if (b + lane < nir) rs[b + lane + 1] = run + v;
        run += __shfl_sync(0xffffffffu, v, 31);
    }
}

// Copies the listed non-zeros of the nir rows from row0 (input row ya) and
// the channel's nw weights from w0 into shared memory, one warp per row.
template <typename T>
__device__ __forceinline__ void acv_stage(const acv_args &a, const acv_smem &s, size_t row0, int ya,
                                          int nir, int w0, int nw) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, nwarp = blockDim.x / 32;
    for (int j = threadIdx.x; j < nw; j += blockDim.x) s.wp[j] = a.wpk[w0 + j], s.wv[j] = a.wv[w0 + j];
    for (int r = warp; r < nir; r += nwarp) {
        const int at = s.rs[r], cnt = s.rs[r + 1] - at;
        const size_t src = (row0 + r) * a.W;
        for (int e = lane; e < cnt; e += 32) {
            s.xp[at + e] = (uint32_t)(ya + r) << 16 | a.col[src + e];
            s.xv[at + e] = sc_tof(((const T *)a.val)[src + e]);
        }
    }
}

// Adds every (staged non-zero, staged weight) product to the conv pixel of
// the tile (rows pa.., ncr of them) whose window reads it.
__device__ __forceinline__ void acv_pairs(const acv_args &a, const acv_smem &s, int total, int nw,
                                          int pa, int ncr) {
    const unsigned pairs = (unsigned)total * (unsigned)nw;  // <= (ir W) wmax, both bounded by the tile
    for (unsigned i = threadIdx.x; i < pairs; i += blockDim.x) {
        const unsigned x = i / (unsigned)nw, j = i - x * (unsigned)nw;
        const uint32_t xp = s.xp[x], wp = s.wp[j];
        int ty = (int)(xp >> 16) + a.pad - (int)(wp >> 8 & 255u);
        int tz = (int)(xp & 65535u) + a.pad - (int)(wp & 255u);
        if (ty < 0 || tz < 0) continue;
        if (a.stride > 1) {
            if (ty % a.stride || tz % a.stride) continue;
            ty /= a.stride, tz /= a.stride;
        }
        const int p = ty - pa;
        if (p >= ncr || p < 0 || tz >= a.Q) continue;
        atomicAdd(&s.acc[((size_t)(wp >> 16) * a.cr + p) * a.Q + tz], s.xv[x] * s.wv[j]);
    }
}

// The tile's output rows [*o0, *o1) and conv rows [*pa, *pb) for row tile rt.
__device__ __forceinline__ void acv_tile_rows(const acv_args &a, int rt, int *o0, int *o1, int *pa,
                                              int *pb) {
    *o0 = rt * a.tr;
    *o1 = min(*o0 + a.tr, a.po);
    if (a.pk <= 0) {
        *pa = *o0, *pb = *o1;
        return;
    }
    *pa = max(0, *o0 * a.ps - a.pp);
    *pb = min(a.P, (*o1 - 1) * a.ps - a.pp + a.pk);
}

// Bias, ReLU and pool of the tile's accumulators into the output interior.
template <typename T>
__device__ __forceinline__ void acv_epilogue(const acv_args &a, const float *acc, int img, int k0,
                                             int o0, int o1, int pa) {
    const sc_epi e = {a.n, a.K, a.P, a.Q, a.po, a.qo, a.ob, a.bias, a.relu, a.pk, a.ps, a.pp};
    const int nk = min(a.kt, a.K - k0), rows = o1 - o0, cnt = nk * rows * a.qo;
    for (int t = threadIdx.x; t < cnt; t += blockDim.x) {
        const int kl = t / (rows * a.qo), y = o0 + t / a.qo % rows, x = t % a.qo;
        const float v = sc_epi_value(e, img, k0 + kl, y, x, [&](int, int k, int p, int q) {
            return acc[((size_t)(k - k0) * a.cr + p - pa) * a.Q + q];
        });
        ((T *)a.out)[sc_epi_out_at(e, img, k0 + kl, y, x)] = sc_fromf<T>(v);
    }
}

// One CTA per (row tile, channel tile, image): zeroed accumulators, then per
// input channel with weights in the tile: stage, scatter; then the epilogue.
template <typename T>
__global__ void __launch_bounds__(ACV_THREADS) acv_scatter_kernel(const acv_args a, int wmax) {
    extern __shared__ float acv_shared[];
    const acv_smem s = acv_carve(a, wmax, acv_shared);
    const int img = blockIdx.z, tk = blockIdx.y, k0 = tk * a.kt;
    int o0, o1, pa, pb;
    acv_tile_rows(a, blockIdx.x, &o0, &o1, &pa, &pb);
    const int ya = max(0, pa * a.stride - a.pad), yb = min(a.H, (pb - 1) * a.stride - a.pad + a.R);
    const int nir = max(0, yb - ya);
    for (int t = threadIdx.x; t < a.kt * a.cr * a.Q; t += blockDim.x) s.acc[t] = 0.0f;
    for (int c = 0; c < a.C; c++) {
        const int w0 = a.wptr[tk * a.C + c], nw = a.wptr[tk * a.C + c + 1] - w0;
        if (nw == 0 || nir == 0) continue;  // the same for the whole CTA
        const size_t row0 = ((size_t)img * a.C + c) * a.H + ya;
        __syncthreads();  // the previous channel's pairs are done with the staging arrays
        if (threadIdx.x < 32) acv_row_starts(a, s.rs, row0, nir);
        __syncthreads();
        acv_stage<T>(a, s, row0, ya, nir, w0, nw);
        __syncthreads();
        acv_pairs(a, s, s.rs[nir], nw, pa, pb - pa);
    }
    __syncthreads();
    acv_epilogue<T>(a, s.acc, img, k0, o0, o1, pa);
}

// --- host: weights ------------------------------------------------------------------

// The layer's non-zero weights grouped by (channel tile of kt rows, input
// channel): group starts wptr (ntk * C + 1), packed indices and values; *wmax
// receives the largest group. 0, or -1 on a bad offset or no memory.
static int acv_group(const spconv_desc *d, int kt, int **wptr, uint32_t **wpk, float **wv,
                     int *wmax, sc_err *err) {
    const int ntk = (d->K + kt - 1) / kt;
    const size_t ng = (size_t)ntk * d->C, ne = (size_t)d->K * d->nnz_row;
    *wptr = (int *)calloc(ng + 1, sizeof **wptr);
    *wpk = (uint32_t *)malloc((ne ? ne : 1) * sizeof **wpk), *wv = (float *)malloc((ne ? ne : 1) * sizeof **wv);
    if (!*wptr || !*wpk || !*wv) return sc_fail(err, "out of memory");
    for (int pass = 0; pass < 2; pass++) {  // count per group, then place
        for (size_t e = 0; e < ne; e++) {
            int c, r, s, k = (int)(e / d->nnz_row);
            if (d->values[e] == 0.0f) continue;
            if (actconv_decode(d, d->offsets[e], &c, &r, &s))
                return sc_fail(err, "actconv: offset %d of row %d is not a window element", d->offsets[e], k);
            const size_t gi = (size_t)(k / kt) * d->C + c;
            if (!pass) {
                (*wptr)[gi + 1]++;
                continue;
            }
            const int at = (*wptr)[gi]++;
            (*wpk)[at] = (uint32_t)(k % kt) << 16 | (uint32_t)r << 8 | (uint32_t)s;
            (*wv)[at] = d->values[e];
        }
        if (pass) break;
        *wmax = 0;
        for (size_t gi = 0; gi < ng; gi++) {
            *wmax = (*wptr)[gi + 1] > *wmax ? (*wptr)[gi + 1] : *wmax;
            (*wptr)[gi + 1] += (*wptr)[gi];
        }
    }
    memmove(*wptr + 1, *wptr, ng * sizeof **wptr);  // the placing pass moved each start to the next
    (*wptr)[0] = 0;
    return 0;
}

// --- host: tiles ----------------------------------------------------------------------

// Conv rows and input rows a tile of tr output rows reads at most.
static void acv_rows(const actconv_gpu *a, int tr, int *cr, int *ir) {
    const spconv_desc *d = &a->d;
    *cr = d->pool_k > 0 ? (tr - 1) * d->pool_stride + d->pool_k : tr;
    *cr = *cr < d->P ? *cr : d->P;
    *ir = (*cr - 1) * d->stride + d->R;
    *ir = *ir < d->H ? *ir : d->H;
}

// Shared bytes of a tile of kt channels and tr output rows with wmax weights.
static size_t acv_smem_bytes(const actconv_gpu *a, int kt, int tr, int wmax) {
    int cr, ir;
    acv_rows(a, tr, &cr, &ir);
    return 4 * ((size_t)kt * cr * a->d.Q + 2 * (size_t)ir * a->d.W + 2 * (size_t)wmax + ir + 1);
}

// Picks kt and tr: the most channels (<= ACV_MAX_KT) and rows (<= those of
// ACV_TILE_PIXELS conv pixels) whose tile fits the device's shared memory per
// block; groups the weights for it. 0, or -1 when not even 1 x 1 fits.
static int acv_tiles(actconv_gpu *a, const gpu_ctx *g, int **wptr, uint32_t **wpk, float **wv,
                     sc_err *err) {
    const spconv_desc *d = &a->d;
    const int per_row = d->Q * (d->pool_k > 0 ? d->pool_stride : 1);
    int tr0 = ACV_TILE_PIXELS / (per_row > 0 ? per_row : 1);
    tr0 = tr0 < 1 ? 1 : tr0 > a->po ? a->po : tr0;
    for (int kt = d->K < ACV_MAX_KT ? d->K : ACV_MAX_KT; kt >= 1; kt = kt > 1 ? kt / 2 : 0) {
        int wmax = 0;
        free(*wptr), free(*wpk), free(*wv);
        *wptr = NULL, *wpk = NULL, *wv = NULL;
        SC_TRY(acv_group(d, kt, wptr, wpk, wv, &wmax, err));
        for (int tr = tr0; tr >= 1; tr--) {
            const size_t b = acv_smem_bytes(a, kt, tr, wmax);
            if (b > (size_t)g->dev.smem_block) continue;
            a->kt = kt, a->tr = tr, a->wmax = wmax, a->smem = b;
            acv_rows(a, tr, &a->cr, &a->ir);
            a->ntk = (d->K + kt - 1) / kt, a->ntr = (a->po + tr - 1) / tr;
            return 0;
        }
    }
    return sc_fail(err, "actconv: no tile of a %dx%d plane fits %d bytes of shared memory", d->P, d->Q,
                   g->dev.smem_block);
}

// --- host: API ------------------------------------------------------------------------

// Uploads n bytes from host h into a new device buffer *dst.
static int acv_put(void **dst, const void *h, size_t n, sc_err *err) {
    cudaCheck(err, cudaMalloc(dst, n ? n : 16));
    return n ? gpu_upload(*dst, h, n, err) : 0;
}

// Uploads the grouped weights and the bias, allocates the lists.
static int acv_upload(actconv_gpu *a, const spconv_desc *d, const int *wptr, const uint32_t *wpk,
                      const float *wv, sc_err *err) {
    const size_t ng = (size_t)a->ntk * d->C, nw = (size_t)wptr[ng];
    SC_TRY(acv_put((void **)&a->wptr, wptr, (ng + 1) * sizeof *wptr, err));
    SC_TRY(acv_put((void **)&a->wpk, wpk, nw * sizeof *wpk, err));
    SC_TRY(acv_put((void **)&a->wv, wv, nw * sizeof *wv, err));
    if (d->bias) SC_TRY(acv_put((void **)&a->bias, d->bias, (size_t)d->K * sizeof(float), err));
    const size_t rows = (size_t)a->max_n * d->C * d->H;
    cudaCheck(err, cudaMalloc((void **)&a->cnt, rows * sizeof *a->cnt));
    cudaCheck(err, cudaMalloc((void **)&a->col, rows * d->W * sizeof *a->col));
    cudaCheck(err, cudaMalloc(&a->val, rows * d->W * gpu_dtype_size(a->dt)));
    return 0;
}

// Uploads layer d for activations of type dt and batches up to max_n.
extern "C" actconv_gpu *actconv_gpu_create(const gpu_ctx *g, const spconv_desc *d, gpu_dtype dt,
                                           int max_n, sc_err *err) {
    if (actconv_check(d, err)) return NULL;
    if ((dt != GDT_F32 && dt != GDT_F16) || max_n < 1) {
        sc_fail(err, "actconv: bad activation type %d or batch %d", (int)dt, max_n);
        return NULL;
    }
    actconv_gpu *a = (actconv_gpu *)calloc(1, sizeof *a);
    if (!a) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    a->d = *d, a->dt = dt, a->max_n = max_n, a->sms = g->dev.sms;
    spconv_out_size(d, &a->po, &a->qo);
    int *wptr = NULL;
    uint32_t *wpk = NULL;
    float *wv = NULL;
    int rc = acv_tiles(a, g, &wptr, &wpk, &wv, err);  // reads the host weights through a->d
    if (!rc) rc = acv_upload(a, d, wptr, wpk, wv, err);
    a->d.offsets = NULL, a->d.values = NULL, a->d.bias = NULL;  // the caller's arrays: not kept
    free(wptr), free(wpk), free(wv);
    if (rc) actconv_gpu_free(a), a = NULL;
    return a;
}

// The kernels' arguments for n images.
static acv_args acv_args_of(const actconv_gpu *a, int n, const void *in, void *out) {
    const spconv_desc *d = &a->d;
    const acv_args r = {in, out, a->wptr, a->wpk, a->wv, a->bias, a->cnt, a->col, a->val,
                        n, d->C, d->H, d->W, d->H + 2 * d->in_border, d->W + 2 * d->in_border,
                        d->in_border, d->K, d->P, d->Q, a->po, a->qo, d->out_border, d->R, d->S,
                        d->stride, d->pad, d->relu, d->pool_k, d->pool_stride, d->pool_pad, a->kt,
                        a->tr, a->cr, a->ir};
    return r;
}

// out = layer(in) for n images: the lists, then the scatter CTAs.
extern "C" int actconv_gpu_forward(const actconv_gpu *a, int n, const void *in, void *out,
                                   cudaStream_t st, sc_err *err) {
    if (n < 1 || n > a->max_n) return sc_fail(err, "actconv: batch %d outside 1..%d", n, a->max_n);
    const acv_args args = acv_args_of(a, n, in, out);
    const size_t rows = (size_t)n * a->d.C * a->d.H;
    const unsigned nzb = sc_blocks_on(a->sms, rows * 32, ACV_THREADS);
    const dim3 grid((unsigned)a->ntr, (unsigned)a->ntk, (unsigned)n);
    SC_DISPATCH(a->dt, {
        acv_nz_kernel<T><<<nzb, ACV_THREADS, 0, st>>>(args);
        cudaCheckLaunch(err);
        acv_scatter_kernel<T><<<grid, ACV_THREADS, a->smem, st>>>(args, a->wmax);
        cudaCheckLaunch(err);
    });
    return 0;
}

// Tile sizes, threads and shared memory in one line.
extern "C" void actconv_gpu_describe(const actconv_gpu *a, char *buf, size_t len) {
    snprintf(buf, len, "actconv %s: %d channels x %d output rows per tile (%d conv, %d input rows), "
                       "%dx%d tiles, %d threads, %zu B shared",
             a->dt == GDT_F16 ? "fp16" : "fp32", a->kt, a->tr, a->cr, a->ir, a->ntk, a->ntr, ACV_THREADS,
             a->smem);
}

// Frees the device buffers and the state (NULL is fine).
extern "C" void actconv_gpu_free(actconv_gpu *a) {
    if (!a) return;
    cudaFree(a->wptr), cudaFree(a->wpk), cudaFree(a->wv), cudaFree(a->bias);
    cudaFree(a->cnt), cudaFree(a->col), cudaFree(a->val);
    free(a);
}
