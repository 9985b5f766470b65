// Block-sparse implicit-GEMM convolution on tensor cores (kernels/bsconv_gpu.h):
// the packed layer (kernels/bsconv.h, bsconv_pack) uploaded once, and a WMMA
// kernel per element type, pixel tile and group width.
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/bsconv_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/nhwc_ops_gpu.h"

using namespace nvcuda;

#define BSK_WARPS 4                 // warps per CTA
#define BSK_THREADS (BSK_WARPS * 32)
#define BSK_FM 32                   // pixel rows of one WMMA fragment (32x8x16)
#define BSK_LDA 24                  // A tile row stride in elements: 48-byte rows, so the
                                    // 8 rows of a fragment load hit distinct banks

struct bsconv_gpu {
    bsconv_shape s;
    int P, Q, kb, cb, nblocks;
    gpu_dtype dt;
    int np, ngroups, ncols, vec, vec_out;  // from the packed layout; vec_out: every group
                                           // starts at a multiple of 8 channels and K % 8 == 0
    int variant;                           // pixel rows per CTA: 128 << variant
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
    int H, W, C, K, P, Q, stride, pad, relu;
    int npq;      // output pixels n * P * Q
    int vec;      // gather 16-byte vectors (cb % 8 == 0 and x 16-byte aligned)
    int vec_out;  // 16-byte epilogue loads and stores
};

// --- the kernel -----------------------------------------------------------------------

// Shared memory of one CTA with ROWS pixel rows.
template <typename T, int ROWS> struct bsk_smem {
    T a[ROWS * BSK_LDA];            // the gathered A tile of one k-step (ROWS x 16)
    float out[BSK_WARPS][BSK_FM * 8];  // one accumulator fragment per warp, for the epilogue
    int h0[ROWS], w0[ROWS], img[ROWS];  // window origin of each pixel row; img -1: past the end
};

// Window origin of the CTA's pixel rows.
template <typename T, int ROWS>
__device__ __forceinline__ void bsk_pixels(const bsk_args &a, int m0, bsk_smem<T, ROWS> &sm) {
    for (int i = threadIdx.x; i < ROWS; i += BSK_THREADS) {
        const int m = m0 + i;
        if (m >= a.npq) {
            sm.img[i] = -1, sm.h0[i] = 0, sm.w0[i] = 0;
            continue;
        }
        const int q = m % a.Q, p = m / a.Q % a.P;
        sm.img[i] = m / (a.P * a.Q);
        sm.h0[i] = p * a.stride - a.pad, sm.w0[i] = q * a.stride - a.pad;
    }
}

// Element offset in x of column `code` for pixel row i, or -1 when it reads padding.
template <typename T, int ROWS>
__device__ __forceinline__ long long bsk_src(const bsk_args &a, const bsk_smem<T, ROWS> &sm, int i,
                                             uint32_t code) {
    if (code == BSCONV_PAD || sm.img[i] < 0) return -1;
    const int h = sm.h0[i] + (int)(code & 255u), w = sm.w0[i] + (int)(code >> 8 & 255u);
    if (h < 0 || h >= a.H || w < 0 || w >= a.W) return -1;
    return (((long long)sm.img[i] * a.H + h) * a.W + w) * a.C + (code >> 16);
}

// Gathers the A tile of the k-step at packed column col: 16-byte runs of 8 channels.
template <typename T, int ROWS>
__device__ __forceinline__ void bsk_gather_vec(const bsk_args &a, int col, bsk_smem<T, ROWS> &sm) {
    const T *x = (const T *)a.x;
    for (int i = threadIdx.x; i < ROWS * 2; i += BSK_THREADS) {
        const int row = i >> 1, half = i & 1;
        const long long src = bsk_src(a, sm, row, __ldg(a.cols + col + half * 8));
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (src >= 0) v = __ldg(reinterpret_cast<const uint4 *>(x + src));
        *reinterpret_cast<uint4 *>(sm.a + row * BSK_LDA + half * 8) = v;
    }
}

// Gathers the A tile of the k-step at packed column col, one element at a time.
template <typename T, int ROWS>
__device__ __forceinline__ void bsk_gather_scalar(const bsk_args &a, int col, bsk_smem<T, ROWS> &sm) {
    const T *x = (const T *)a.x;
    for (int i = threadIdx.x; i < ROWS * BSCONV_KSTEP; i += BSK_THREADS) {
        const int row = i / BSCONV_KSTEP, k = i % BSCONV_KSTEP;
        const long long src = bsk_src(a, sm, row, __ldg(a.cols + col + k));
        sm.a[row * BSK_LDA + k] = src >= 0 ? x[src] : sc_fromf<T>(0.0f);
    }
}

// Writes 8 (or nj < 8) channels from k of output pixel m: act(v + bias [+ z]).
template <typename T>
__device__ __forceinline__ void bsk_write(const bsk_args &a, int m, int k, int nj, float *v) {
    const size_t o = (size_t)m * a.K + k;
    for (int j = 0; j < nj; j++) v[j] += a.bias ? __ldg(a.bias + k + j) : 0.0f;
    if (a.vec_out && nj == 8) {
        sc_pack<T> zp, yp;
        if (a.z) zp.raw = *reinterpret_cast<const uint4 *>((const T *)a.z + o);
        for (int j = 0; j < 8; j++) {
            const float r = v[j] + (a.z ? sc_tof(zp.v[j]) : 0.0f);
            yp.v[j] = sc_fromf<T>(a.relu ? fmaxf(r, 0.0f) : r);
        }
        *reinterpret_cast<uint4 *>((T *)a.y + o) = yp.raw;
        return;
    }
    for (int j = 0; j < nj; j++) {
        const float r = v[j] + (a.z ? sc_tof(((const T *)a.z)[o + j]) : 0.0f);
        ((T *)a.y)[o + j] = sc_fromf<T>(a.relu ? fmaxf(r, 0.0f) : r);
    }
}

// One CTA: ROWS = BSK_WARPS * MF * 32 output pixels x the NF * 8 channels of
// group blockIdx.y; warp w owns pixel rows [w * MF * 32, (w + 1) * MF * 32).
template <typename T, int MF, int NF>
__global__ void __launch_bounds__(BSK_THREADS) bsk_kernel(bsk_args a) {
    constexpr int ROWS = BSK_WARPS * MF * BSK_FM;
    __shared__ __align__(128) bsk_smem<T, ROWS> sm;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bsconv_group g = a.grp[blockIdx.y];
    const int m0 = blockIdx.x * ROWS;
    bsk_pixels<T, ROWS>(a, m0, sm);
    wmma::fragment<wmma::accumulator, BSK_FM, 8, 16, float> acc[MF][NF];
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int f = 0; f < NF; f++) wmma::fill_fragment(acc[i][f], 0.0f);
    const T *vals = (const T *)a.vals;
    for (int t = 0; t < g.steps; t++) {
        const int col = g.col0 + t * BSCONV_KSTEP;
        __syncthreads();  // the pixel table is written; the previous tile is consumed
        if (a.vec) bsk_gather_vec<T, ROWS>(a, col, sm);
        else bsk_gather_scalar<T, ROWS>(a, col, sm);
        __syncthreads();
        wmma::fragment<wmma::matrix_a, BSK_FM, 8, 16, T, wmma::row_major> fa[MF];
#pragma unroll
        for (int i = 0; i < MF; i++)
            wmma::load_matrix_sync(fa[i], sm.a + (warp * MF + i) * BSK_FM * BSK_LDA, BSK_LDA);
#pragma unroll
        for (int f = 0; f < NF; f++) {
            wmma::fragment<wmma::matrix_b, BSK_FM, 8, 16, T, wmma::row_major> fb;
            wmma::load_matrix_sync(fb, vals + ((size_t)(col / BSCONV_KSTEP) * NF + f) * 128, 8);
#pragma unroll
            for (int i = 0; i < MF; i++) wmma::mma_sync(acc[i][f], fa[i], fb, acc[i][f]);
        }
    }
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int f = 0; f < NF; f++) {
            wmma::store_matrix_sync(sm.out[warp], acc[i][f], 8, wmma::mem_row_major);
            __syncwarp();
            const int m = m0 + (warp * MF + i) * BSK_FM + lane, j0 = f * 8;
            if (m < a.npq && j0 < g.nk) {
                float v[8];
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = sm.out[warp][lane * 8 + j];
                bsk_write<T>(a, m, g.k0 + j0, min(8, g.nk - j0), v);
            }
            __syncwarp();
        }
}

// --- launch ---------------------------------------------------------------------------

// Shared memory bytes of a CTA of variant v for element type size 2.
static size_t bsk_smem_bytes(int v) {
    return v == 0 ? sizeof(bsk_smem<__half, BSK_WARPS * 1 * BSK_FM>)
                  : sizeof(bsk_smem<__half, BSK_WARPS * 2 * BSK_FM>);
}

// Launches the kernel for element type T with the layer's pixel tile and group width.
template <typename T>
static void bsk_launch(const gpu_ctx *g, const bsconv_gpu *b, const bsk_args &a) {
    const int rows = BSK_WARPS * BSK_FM << b->variant;
    const dim3 grid((unsigned)((a.npq + rows - 1) / rows), (unsigned)b->ngroups);
#define BSK_GO(MF, NF) bsk_kernel<T, MF, NF><<<grid, BSK_THREADS, 0, g->stream>>>(a)
#define BSK_NF(MF)                      \
    switch (b->np / 8) {                \
    case 1: BSK_GO(MF, 1); break;       \
    case 2: BSK_GO(MF, 2); break;       \
    case 4: BSK_GO(MF, 4); break;       \
    default: BSK_GO(MF, 8); break;      \
    }
    if (b->variant == 0) {
        BSK_NF(1)
    } else {
        BSK_NF(2)
    }
#undef BSK_NF
#undef BSK_GO
}

// True when p is 16-byte aligned (NULL counts as aligned).
static bool bsk_al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Queues y = act(conv(x, w) + bias [+ z]).
extern "C" int bsconv_gpu_run(const gpu_ctx *g, const bsconv_gpu *b, const void *x, const void *z,
                              void *y, sc_err *err) {
    const bsconv_shape *s = &b->s;
    bsk_args a;
    a.x = x, a.z = z, a.y = y, a.bias = b->bias, a.grp = b->grp, a.cols = b->cols, a.vals = b->vals;
    a.H = s->H, a.W = s->W, a.C = s->C, a.K = s->K, a.P = b->P, a.Q = b->Q;
    a.stride = s->stride, a.pad = s->pad, a.relu = s->relu;
    a.npq = s->n * b->P * b->Q;
    a.vec = b->vec && bsk_al16(x);
    a.vec_out = b->vec_out && bsk_al16(y) && bsk_al16(z);
    if (b->dt == GDT_BF16) bsk_launch<__nv_bfloat16>(g, b, a);
    else bsk_launch<__half>(g, b, a);
    cudaCheckLaunch(err);
    return 0;
}

// --- create -------------------------------------------------------------------------

// Sets the pixel tile of a layer (checked against the device's shared memory per block).
extern "C" int bsconv_gpu_set_variant(const gpu_ctx *g, bsconv_gpu *b, int v, sc_err *err) {
    if (v < 0 || v >= BSCONV_GPU_VARIANTS)
        return sc_fail(err, "block-sparse conv: variant %d (0 to %d)", v, BSCONV_GPU_VARIANTS - 1);
    if (bsk_smem_bytes(v) > (size_t)g->dev.smem_block)
        return sc_fail(err, "block-sparse conv: variant %d needs %zu bytes of shared memory (%d)", v,
                       bsk_smem_bytes(v), g->dev.smem_block);
    if ((long long)b->s.n * b->P * b->Q > INT32_MAX - 2 * BSK_WARPS * BSK_FM)
        return sc_fail(err, "block-sparse conv: too many output pixels (%d x %d x %d)", b->s.n,
                       b->P, b->Q);
    b->variant = v;
    return 0;
}

// The variant in use.
extern "C" int bsconv_gpu_variant(const bsconv_gpu *b) { return b->variant; }

// The larger tile when it still gives every SM two CTAs, else the smaller one.
static int bsk_pick_variant(const gpu_ctx *g, const bsconv_gpu *b) {
    const long long npq = (long long)b->s.n * b->P * b->Q, rows = 2LL * BSK_WARPS * BSK_FM;
    return (npq + rows - 1) / rows * b->ngroups >= 2LL * g->dev.sms ? 1 : 0;
}

// Copies n bytes to a new device buffer at *d (n may be 0).
static int bsk_put(void **d, const void *h, size_t n, sc_err *err) {
    cudaCheck(err, cudaMalloc(d, n ? n : 16));
    if (n) cudaCheck(err, cudaMemcpy(*d, h, n, cudaMemcpyHostToDevice));
    return 0;
}

// Uploads the packed arrays and the bias; the values narrowed to b->dt.
static int bsk_upload(const gpu_ctx *g, bsconv_gpu *b, const bsconv_packed *p, const float *bias,
                      sc_err *err) {
    SC_TRY(bsk_put((void **)&b->grp, p->grp, (size_t)p->ngroups * sizeof *p->grp, err));
    SC_TRY(bsk_put((void **)&b->cols, p->cols, (size_t)p->ncols * sizeof *p->cols, err));
    const size_t nv = (size_t)p->ncols * p->np;
    cudaCheck(err, cudaMalloc(&b->vals, nv ? nv * 2 : 16));
    if (bias) SC_TRY(bsk_put((void **)&b->bias, bias, (size_t)b->s.K * sizeof *bias, err));
    if (!nv) return 0;
    float *tmp = NULL;
    SC_TRY(bsk_put((void **)&tmp, p->vals, nv * sizeof *tmp, err));
    int rc = nhwc_from_f32_gpu(g, b->dt, nv, tmp, b->vals, err);
    const cudaError_t e = cudaStreamSynchronize(g->stream);
    cudaFree(tmp);
    if (!rc && e != cudaSuccess)
        rc = sc_fail(err, "block-sparse conv: narrowing the weights: %s", cudaGetErrorString(e));
    return rc;
}

// Fills b's fields from the layer and its packed layout.
static void bsk_fill(bsconv_gpu *b, const bsconv_shape *s, const bsconv_bsr *w,
                     const bsconv_packed *p, gpu_dtype dt) {
    b->s = *s, b->dt = dt, b->kb = w->kb, b->cb = w->cb;
    b->nblocks = w->indptr[s->K / w->kb];
    bsconv_out_size(s, &b->P, &b->Q);
    b->np = p->np, b->ngroups = p->ngroups, b->ncols = p->ncols, b->vec = p->vec;
    b->vec_out = s->K % 8 == 0;
    for (int i = 0; i < p->ngroups; i++) b->vec_out &= p->grp[i].k0 % 8 == 0;
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
    if (!rc) rc = bsconv_gpu_set_variant(g, b, bsk_pick_variant(g, b), err);
    if (rc) {
        bsconv_gpu_free(b);
        return NULL;
    }
    return b;
}

// Multiply-adds of the non-zero weights per image.
extern "C" double bsconv_gpu_macs(const bsconv_gpu *b) {
    return (double)b->nblocks * b->kb * b->cb * b->P * b->Q;
}

// One line describing the layer.
extern "C" void bsconv_gpu_describe(const bsconv_gpu *b, char *buf, size_t len) {
    snprintf(buf, len, "block %dx%d, %d blocks, %d groups of %d channels, %d columns, %s, %d pixels/CTA%s",
             b->kb, b->cb, b->nblocks, b->ngroups, b->np, b->ncols,
             b->dt == GDT_BF16 ? "bf16" : "fp16", BSK_WARPS * BSK_FM << b->variant,
             b->vec ? ", vector gather" : "");
}

// Frees the device arrays.
extern "C" void bsconv_gpu_free(bsconv_gpu *b) {
    if (!b) return;
    cudaFree(b->grp);
    cudaFree(b->cols);
    cudaFree(b->vals);
    cudaFree(b->bias);
    free(b);
}
