// GPU softmax cross-entropy (label smoothing, or against soft targets): one
// warp per image, statistics reduced per block and added to the device
// counters with one atomic each.
#include "kernels/device_gpu.h"
#include "kernels/loss_gpu.h"

#define LOSS_WARPS 8

// Warp-wide max / sum.
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the 32 lanes of a warp (every lane gets it).
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// First index of the row maximum (ties: lowest index), warp-wide.
__device__ __forceinline__ int warp_argmax(float v, int idx) {
    for (int o = 16; o; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
    }
    return idx;
}

// The row's maximum into *mx and the first index holding it (ties: lowest),
// warp-wide over the row's k logits.
template <typename L>
__device__ __forceinline__ int row_max(const L *x, int k, int lane, float *mx) {
    float m = -INFINITY;
    int bi = k;
    for (int j = lane; j < k; j += 32) {
        const float v = sc_tof(x[j]);
        if (v > m) m = v, bi = j;
    }
    bi = warp_argmax(m, bi);
    *mx = warp_max(m);
    return bi;
}

// Adds the block's per-warp losses and hits (lane 0 of each warp holds its
// row's) to the device counters, one atomic each; block 0 also counts n.
__device__ __forceinline__ void block_stats(float loss, int hit, int n, gpu_stats *stats) {
    __shared__ float s_loss[LOSS_WARPS];
    __shared__ int s_hit[LOSS_WARPS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) s_loss[warp] = loss, s_hit[warp] = hit;
    __syncthreads();
    if (threadIdx.x == 0) {
        double tl = 0.0;
        unsigned long long th = 0;
        for (int w = 0; w < LOSS_WARPS; w++) tl += s_loss[w], th += (unsigned)s_hit[w];
        atomicAdd(&stats->loss_sum, tl);
        atomicAdd(&stats->correct, th);
        if (blockIdx.x == 0) atomicAdd(&stats->count, (unsigned long long)n);
    }
}

// Loss and gradient of rows; blockDim = 32 * LOSS_WARPS, one warp per row.
template <typename L, typename G>
__global__ void xent_kernel(int n, int k, const L *logits, const int *labels,
                            const gpu_hparams *hp, float grad_scale, const gpu_scaler *sc,
                            G *dlogits, gpu_stats *stats) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * LOSS_WARPS + warp;
    float loss = 0.0f;
    int hit = 0;
    if (row < n) {
        const L *x = logits + (size_t)row * k;
        const float eps = hp->smoothing, off = eps / k, on = 1.0f - eps + off;
        const int lab = labels[row];
        float mx;
        const int bi = row_max(x, k, lane, &mx);
        float se = 0.0f, td = 0.0f;
        for (int j = lane; j < k; j += 32) {
            const float v = sc_tof(x[j]) - mx;
            se += __expf(v);
            td += (j == lab ? on : off) * v;
        }
        se = warp_sum(se);
        td = warp_sum(td);
        loss = __logf(se) - td;
        hit = bi == lab;
        if (dlogits) {
            const float gs = grad_scale * (sc ? sc->scale : 1.0f), inv = 1.0f / se;
            G *d = dlogits + (size_t)row * k;
            for (int j = lane; j < k; j += 32) {
                const float p = __expf(sc_tof(x[j]) - mx) * inv;
                d[j] = sc_fromf<G>((p - (j == lab ? on : off)) * gs);
            }
        }
    }
    block_stats(loss, hit, n, stats);
}

// Blocks for n rows, one warp per row.
static unsigned loss_blocks(int n) {
    return (unsigned)((n + LOSS_WARPS - 1) / LOSS_WARPS);
}

// Calls f(L(), G()) with L and G the element types of the logits (ldt) and
// the gradient (gdt): __half or float.
template <typename F> static void loss_types(gpu_dtype ldt, gpu_dtype gdt, F f) {
    if (ldt == GDT_F16) {
        if (gdt == GDT_F16) f(__half(), __half());
        else f(__half(), 0.0f);
    } else {
        if (gdt == GDT_F16) f(0.0f, __half());
        else f(0.0f, 0.0f);
    }
}

// Loss, hits and (optionally) the gradient of a batch of logits.
extern "C" int softmax_xent_gpu(const gpu_ctx *g, gpu_dtype ldt, gpu_dtype gdt, int n, int k,
                                const void *logits, const int *labels, const gpu_hparams *hp,
                                float grad_scale, const gpu_scaler *sc, void *dlogits,
                                gpu_stats *stats, sc_err *err) {
    if (n <= 0) return 0;
    if (k < 1) return sc_fail(err, "softmax_xent_gpu: %d classes", k);
    loss_types(ldt, gdt, [&](auto l0, auto g0) {
        using L = decltype(l0);
        using G = decltype(g0);
        xent_kernel<L, G><<<loss_blocks(n), 32 * LOSS_WARPS, 0, g->stream>>>(
            n, k, (const L *)logits, labels, hp, grad_scale, sc, (G *)dlogits, stats);
    });
    cudaCheckLaunch(err);
    return 0;
}

// --- soft targets -------------------------------------------------------------

// Cross-entropy of rows against target distributions (N, K) fp32: loss
// sum q * log(sum exp(l - max)) - sum q (l - max), gradient (p * sum q - q);
// hits against the labels. blockDim = 32 * LOSS_WARPS, one warp per row.
template <typename L, typename G>
__global__ void soft_xent_kernel(int n, int k, const L *logits, const float *soft,
                                 const int *labels, float grad_scale, const gpu_scaler *sc,
                                 G *dlogits, gpu_stats *stats) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * LOSS_WARPS + warp;
    float loss = 0.0f;
    int hit = 0;
    if (row < n) {
        const L *x = logits + (size_t)row * k;
        const float *q = soft + (size_t)row * k;
        float mx;
        const int bi = row_max(x, k, lane, &mx);
        float se = 0.0f, sq = 0.0f, td = 0.0f;
        for (int j = lane; j < k; j += 32) {
            const float v = sc_tof(x[j]) - mx;
            se += __expf(v);
            sq += q[j];
            td += q[j] * v;
        }
        se = warp_sum(se);
        sq = warp_sum(sq);
        td = warp_sum(td);
        loss = sq * __logf(se) - td;
        hit = bi == labels[row];
        if (dlogits) {
            const float gs = grad_scale * (sc ? sc->scale : 1.0f), inv = sq / se;
            G *d = dlogits + (size_t)row * k;
            for (int j = lane; j < k; j += 32) {
                const float p = __expf(sc_tof(x[j]) - mx) * inv;
                d[j] = sc_fromf<G>((p - q[j]) * gs);
            }
        }
    }
    block_stats(loss, hit, n, stats);
}

// Loss against soft targets, hits and (optionally) the gradient of a batch.
extern "C" int soft_xent_gpu(const gpu_ctx *g, gpu_dtype ldt, gpu_dtype gdt, int n, int k,
                             const void *logits, const float *soft, const int *labels,
                             float grad_scale, const gpu_scaler *sc, void *dlogits,
                             gpu_stats *stats, sc_err *err) {
    if (n <= 0) return 0;
    if (k < 1) return sc_fail(err, "soft_xent_gpu: %d classes", k);
    loss_types(ldt, gdt, [&](auto l0, auto g0) {
        using L = decltype(l0);
        using G = decltype(g0);
        soft_xent_kernel<L, G><<<loss_blocks(n), 32 * LOSS_WARPS, 0, g->stream>>>(
            n, k, (const L *)logits, soft, labels, grad_scale, sc, (G *)dlogits, stats);
    });
    cudaCheckLaunch(err);
    return 0;
}
