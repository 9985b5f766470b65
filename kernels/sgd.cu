// GPU optimizer passes over the flat master parameters: multi-tensor weight
// cast, gradient gather/unscale/check, masked SGD and the loss-scale update.
// A multi-tensor pass is one launch: a host-built block map tells each block
// which segment and which chunk of it to process.
#include <stdlib.h>

#include <vector>

#include "kernels/device_gpu.h"
#include "kernels/sgd_gpu.h"

#define SEG_THREADS 256
#define SEG_CHUNK (SEG_THREADS * 8)  // elements per block of a multi-tensor pass

// One block's work: segment index and first element.
struct seg_block {
    int seg, start;
};

// A block map on the device.
struct seg_map {
    seg_block *blocks;
    int nblocks;
};

struct param_segs {
    param_seg *dev;     // (nseg) the table on the device
    int nseg;
    seg_map cast;       // SEG_WORK segments over work elements
    seg_map gather_w;   // SEG_WORK segments over master elements
    seg_map gather_all; // every segment over master elements
};

// --- tables -----------------------------------------------------------------

// Elements of a segment's work copy.
static size_t seg_work_count(const param_seg *s) { return (size_t)s->k * s->hw * s->cw; }
// Elements of a segment in the flat vector.
static size_t seg_master_count(const param_seg *s) { return (size_t)s->k * s->c * s->hw; }

// Builds and uploads the block map of one pass; `which` 0 = cast, 1 = gather
// of SEG_WORK, 2 = gather of all.
static int seg_map_build(const param_seg *segs, int nseg, int which, seg_map *m, sc_err *err) {
    std::vector<seg_block> v;
    for (int i = 0; i < nseg; i++) {
        if (which < 2 && segs[i].kind != SEG_WORK) continue;
        const size_t cnt = which == 0 ? seg_work_count(&segs[i]) : seg_master_count(&segs[i]);
        if (cnt > (size_t)0x7fffffff) return sc_fail(err, "parameter tensor too large (%zu)", cnt);
        for (size_t s = 0; s < cnt; s += SEG_CHUNK) v.push_back(seg_block{i, (int)s});
    }
    m->nblocks = (int)v.size();
    if (v.empty()) return 0;
    cudaCheck(err, cudaMalloc(&m->blocks, v.size() * sizeof(seg_block)));
    return gpu_upload(m->blocks, v.data(), v.size() * sizeof(seg_block), err);
}

// Uploads a segment table and its block maps.
extern "C" param_segs *param_segs_create(const param_seg *segs, int nseg, sc_err *err) {
    param_segs *s = (param_segs *)calloc(1, sizeof *s);
    if (!s) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    s->nseg = nseg;
    int rc = 0;
    for (int i = 0; i < nseg && !rc; i++)
        if (segs[i].kind == SEG_WORK && segs[i].cw < segs[i].c)
            rc = sc_fail(err, "parameter segment %d: work channels %d < %d", i, segs[i].cw, segs[i].c);
    if (!rc && nseg > 0) {
        cudaError_t e = cudaMalloc(&s->dev, (size_t)nseg * sizeof *segs);
        if (e != cudaSuccess) rc = sc_fail(err, "param_segs_create: %s", cudaGetErrorString(e));
        if (!rc) rc = gpu_upload(s->dev, segs, (size_t)nseg * sizeof *segs, err);
    }
    if (!rc) rc = seg_map_build(segs, nseg, 0, &s->cast, err);
    if (!rc) rc = seg_map_build(segs, nseg, 1, &s->gather_w, err);
    if (!rc) rc = seg_map_build(segs, nseg, 2, &s->gather_all, err);
    if (rc) {
        param_segs_free(s);
        return NULL;
    }
    return s;
}

// Frees a segment table (NULL is fine).
extern "C" void param_segs_free(param_segs *s) {
    if (!s) return;
    cudaFree(s->dev);
    cudaFree(s->cast.blocks);
    cudaFree(s->gather_w.blocks);
    cudaFree(s->gather_all.blocks);
    free(s);
}

// --- cast -------------------------------------------------------------------

// Work copy element j of segment sg from the master vector.
template <typename T>
__device__ __forceinline__ void cast_one(const param_seg &sg, const float *master, size_t j) {
    const int c = (int)(j % sg.cw);
    const size_t khw = j / sg.cw;
    const int hw = (int)(khw % sg.hw);
    const size_t k = khw / sg.hw;
    const float v = c < sg.c ? master[sg.offset + (k * sg.c + c) * sg.hw + hw] : 0.0f;
    ((T *)sg.work)[j] = sc_fromf<T>(v);
}

// One chunk of one segment per block.
__global__ void param_cast_kernel(const param_seg *segs, const seg_block *map,
                                  const float *master) {
    const seg_block b = map[blockIdx.x];
    const param_seg sg = segs[b.seg];
    const size_t cnt = (size_t)sg.k * sg.hw * sg.cw;
    const size_t end = min(cnt, (size_t)b.start + SEG_CHUNK);
    for (size_t j = (size_t)b.start + threadIdx.x; j < end; j += SEG_THREADS) {
        if (sg.wdt == GDT_F16) cast_one<__half>(sg, master, j);
        else cast_one<float>(sg, master, j);
    }
}

// Work copies of every SEG_WORK segment.
extern "C" int param_cast_gpu(const gpu_ctx *g, const param_segs *s, const float *master,
                              sc_err *err) {
    if (s->cast.nblocks == 0) return 0;
    param_cast_kernel<<<s->cast.nblocks, SEG_THREADS, 0, g->stream>>>(s->dev, s->cast.blocks,
                                                                       master);
    cudaCheckLaunch(err);
    return 0;
}

// --- gather -----------------------------------------------------------------

// Gradient of master element r of segment sg (from its work gradient or in place).
__device__ __forceinline__ float gather_one(const param_seg &sg, const float *grad, size_t r) {
    if (sg.kind != SEG_WORK) return grad[sg.offset + r];
    const int hw = (int)(r % sg.hw);
    const size_t kc = r / sg.hw;
    const int c = (int)(kc % sg.c);
    const size_t k = kc / sg.c;
    const size_t j = (k * sg.hw + hw) * sg.cw + c;
    return sg.gdt == GDT_F16 ? __half2float(((const __half *)sg.gwork)[j])
                             : ((const float *)sg.gwork)[j];
}

// One chunk of one segment per block; sc may be NULL (no scaling, no check).
__global__ void grad_gather_kernel(const param_seg *segs, const seg_block *map, float *grad,
                                   gpu_scaler *sc) {
    const seg_block b = map[blockIdx.x];
    const param_seg sg = segs[b.seg];
    const size_t cnt = (size_t)sg.k * sg.c * sg.hw;
    const size_t end = min(cnt, (size_t)b.start + SEG_CHUNK);
    const float inv = sc ? sc->inv_scale : 1.0f;
    int bad = 0;
    for (size_t r = (size_t)b.start + threadIdx.x; r < end; r += SEG_THREADS) {
        const float v = gather_one(sg, grad, r) * inv;
        bad |= !isfinite(v);
        grad[sg.offset + r] = v;
    }
    if (sc && __syncthreads_or(bad) && threadIdx.x == 0) sc->overflow = 1;
}

// Flat fp32 gradient from the work gradients, unscaled and checked.
extern "C" int grad_gather_gpu(const gpu_ctx *g, const param_segs *s, float *grad,
                               gpu_scaler *sc, sc_err *err) {
    const seg_map *m = sc ? &s->gather_all : &s->gather_w;
    if (m->nblocks == 0) return 0;
    grad_gather_kernel<<<m->nblocks, SEG_THREADS, 0, g->stream>>>(s->dev, m->blocks, grad, sc);
    cudaCheckLaunch(err);
    return 0;
}

// --- SGD --------------------------------------------------------------------

// The sgd_step_cpu update of one element.
__device__ __forceinline__ void sgd_one(float &w, float gr, float &mom, float m, float lr,
                                        float mu, float wd, int nesterov) {
    const float g = (gr + wd * w) * m;
    const float v = (mu * mom + g) * m;
    const float step = nesterov ? g + mu * v : v;
    mom = v;
    w = (w - lr * step) * m;
}

// Four elements per thread (float4) over n4 packs, then the scalar tail.
__global__ void sgd_kernel(size_t n, float *w, const float *grad, float *mom, const float *mask,
                           const gpu_hparams *hp, const gpu_scaler *sc) {
    if (sc && sc->overflow) return;
    const float lr = hp->lr, mu = hp->momentum, wd = hp->weight_decay;
    const int nest = hp->nesterov;
    const size_t n4 = n / 4;
    SC_GRID_LOOP(p, n4) {
        float4 W = ((float4 *)w)[p], M = ((float4 *)mom)[p];
        const float4 G = ((const float4 *)grad)[p], K = ((const float4 *)mask)[p];
        sgd_one(W.x, G.x, M.x, K.x, lr, mu, wd, nest);
        sgd_one(W.y, G.y, M.y, K.y, lr, mu, wd, nest);
        sgd_one(W.z, G.z, M.z, K.z, lr, mu, wd, nest);
        sgd_one(W.w, G.w, M.w, K.w, lr, mu, wd, nest);
        ((float4 *)w)[p] = W;
        ((float4 *)mom)[p] = M;
    }
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) {
        const size_t i = n4 * 4 + threadIdx.x;
        sgd_one(w[i], grad[i], mom[i], mask[i], lr, mu, wd, nest);
    }
}

// Masked SGD over the flat vectors (pointers from cudaMalloc: 16-byte aligned).
extern "C" int sgd_step_gpu(const gpu_ctx *g, size_t n, float *w, const float *grad, float *mom,
                            const float *mask, const gpu_hparams *hp, const gpu_scaler *sc,
                            sc_err *err) {
    if (n == 0) return 0;
    if (!sc_can_vec(n - n % 4, 4, w, grad, mom) || ((uintptr_t)mask & 15u))
        return sc_fail(err, "sgd_step_gpu: vectors not 16-byte aligned");
    sgd_kernel<<<sc_blocks(g, n / 4 + 1, 256), 256, 0, g->stream>>>(n, w, grad, mom, mask, hp, sc);
    cudaCheckLaunch(err);
    return 0;
}

// --- loss scaling -----------------------------------------------------------

// Halves the scale after an overflow, doubles it after `interval` clean steps.
__global__ void scaler_update_kernel(gpu_scaler *sc, gpu_stats *stats, int interval) {
    if (sc->overflow) {
        sc->scale = fmaxf(sc->scale * 0.5f, 1.0f / 65536.0f);
        sc->good_steps = 0;
        stats->skipped++;
    } else if (++sc->good_steps >= interval) {
        sc->scale = fminf(sc->scale * 2.0f, 16777216.0f);
        sc->good_steps = 0;
    }
    sc->inv_scale = 1.0f / sc->scale;
    sc->overflow = 0;
}

// Loss-scale update after a step.
extern "C" int scaler_update_gpu(const gpu_ctx *g, gpu_scaler *sc, gpu_stats *stats,
                                 int interval, sc_err *err) {
    scaler_update_kernel<<<1, 1, 0, g->stream>>>(sc, stats, interval);
    cudaCheckLaunch(err);
    return 0;
}
