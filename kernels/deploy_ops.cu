// GPU versions of the deploy runtime's small ops on bordered NCHW tensors
// (kernels/deploy_ops_gpu.h): fp32 or fp16 storage, fp32 arithmetic, one
// thread per interior output element (one warp per plane for the global
// pool), grid-stride loops, nothing that breaks graph capture.
#include "kernels/deploy_ops_gpu.h"
#include "kernels/device_gpu.h"

// --- geometry on the device -----------------------------------------------------

// A bordered tensor as the kernels see it.
struct dgeo {
    int c, h, w, b;
};

// The device view of a dops_geom.
static dgeo dgeo_of(const dops_geom *g) { return dgeo{g->c, g->h, g->w, g->b}; }

// Interior elements (all planes) of a geometry.
static size_t dgeo_total(const dops_geom *g) { return (size_t)g->n * g->c * g->h * g->w; }

// Element offset of interior pixel (y, x) of a plane; I is the index type
// (32-bit when every tensor of the op fits, which keeps divisions cheap).
template <typename I>
__device__ __forceinline__ I dgeo_at(dgeo g, I plane, int y, int x) {
    return (plane * (I)(g.h + 2 * g.b) + (I)(y + g.b)) * (I)(g.w + 2 * g.b) + (I)(x + g.b);
}

// Splits an interior element index of geometry g into plane, row and column.
template <typename I>
__device__ __forceinline__ void dgeo_split(dgeo g, I i, I *plane, int *y, int *x) {
    const I row = i / (I)g.w;
    *x = (int)(i - row * (I)g.w);
    *plane = row / (I)g.h;
    *y = (int)(row - *plane * (I)g.h);
}

// True when every element index of these geometries fits in 32 bits.
static bool dgeo_small(const dops_geom *a, const dops_geom *b, const dops_geom *c) {
    const dops_geom *g[3] = {a, b, c};
    for (int k = 0; k < 3; k++)
        if (g[k] && dops_geom_count(g[k]) >= (size_t)1 << 31) return false;
    return true;
}

static const int DOPS_THREADS = 256;

// --- elementwise ------------------------------------------------------------------

enum { EW_RELU = 0, EW_ADD = 1, EW_AFFINE = 2, EW_COPY = 3 };

// y = op(a, b) over the interior of gy: relu, add (+relu), affine (+relu), copy.
template <typename T, int OP, typename I>
__global__ void dops_ew_kernel(I total, dgeo ga, const T *a, dgeo gb, const T *b, dgeo gy, T *y,
                               const float *scale, const float *shift, int relu) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)blockDim.x * gridDim.x) {
        I pl;
        int r, c;
        dgeo_split(gy, i, &pl, &r, &c);
        float v = sc_tof(a[dgeo_at(ga, pl, r, c)]);
        if (OP == EW_ADD) v += sc_tof(b[dgeo_at(gb, pl, r, c)]);
        if (OP == EW_AFFINE) {
            const int ch = (int)(pl % (I)gy.c);
            v = v * scale[ch] + shift[ch];
        }
        if (OP == EW_RELU || relu) v = v > 0.0f ? v : 0.0f;
        y[dgeo_at(gy, pl, r, c)] = OP == EW_COPY ? a[dgeo_at(ga, pl, r, c)] : sc_fromf<T>(v);
    }
}

// Launches dops_ew_kernel for element type T.
template <typename T, int OP>
static int dops_ew_launch(const gpu_ctx *g, const dops_geom *ga, const void *a,
                          const dops_geom *gb, const void *b, const dops_geom *gy, void *y,
                          const float *scale, const float *shift, int relu, sc_err *err) {
    const size_t n = dgeo_total(gy);
    if (n == 0) return 0;
    const unsigned blocks = sc_blocks(g, n, DOPS_THREADS);
    if (dgeo_small(ga, gb, gy))
        dops_ew_kernel<T, OP, uint32_t><<<blocks, DOPS_THREADS, 0, g->stream>>>(
            (uint32_t)n, dgeo_of(ga), (const T *)a, dgeo_of(gb ? gb : ga), (const T *)b,
            dgeo_of(gy), (T *)y, scale, shift, relu);
    else
        dops_ew_kernel<T, OP, size_t><<<blocks, DOPS_THREADS, 0, g->stream>>>(
            n, dgeo_of(ga), (const T *)a, dgeo_of(gb ? gb : ga), (const T *)b, dgeo_of(gy),
            (T *)y, scale, shift, relu);
    cudaCheckLaunch(err);
    return 0;
}

// y = a + b (+ReLU).
extern "C" int dops_add_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *ga, const void *a,
                            const dops_geom *gb, const void *b, const dops_geom *gy, void *y,
                            int relu, sc_err *err) {
    SC_DISPATCH(dt, return dops_ew_launch<T, EW_ADD>(g, ga, a, gb, b, gy, y, nullptr, nullptr,
                                                     relu, err));
    return 0;
}

// y = max(x, 0).
extern "C" int dops_relu_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                             const dops_geom *gy, void *y, sc_err *err) {
    SC_DISPATCH(dt, return dops_ew_launch<T, EW_RELU>(g, gx, x, nullptr, nullptr, gy, y, nullptr,
                                                      nullptr, 1, err));
    return 0;
}

// y = x * scale + shift per channel (+ReLU).
extern "C" int dops_affine_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx,
                               const void *x, const float *scale, const float *shift,
                               const dops_geom *gy, void *y, int relu, sc_err *err) {
    SC_DISPATCH(dt, return dops_ew_launch<T, EW_AFFINE>(g, gx, x, nullptr, nullptr, gy, y, scale,
                                                        shift, relu, err));
    return 0;
}

// Copies the interior of x into y.
extern "C" int dops_copy_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                             const dops_geom *gy, void *y, sc_err *err) {
    SC_DISPATCH(dt, return dops_ew_launch<T, EW_COPY>(g, gx, x, nullptr, nullptr, gy, y, nullptr,
                                                      nullptr, 0, err));
    return 0;
}

// y's planes img * gy.c + off + ch = x's planes img * gx.c + ch, interiors.
template <typename T, typename I>
__global__ void dops_concat_kernel(I total, dgeo gx, const T *x, int off, dgeo gy, T *y) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)blockDim.x * gridDim.x) {
        I pl;
        int r, c;
        dgeo_split(gx, i, &pl, &r, &c);
        const I to = pl / (I)gx.c * (I)gy.c + (I)off + pl % (I)gx.c;
        y[dgeo_at(gy, to, r, c)] = x[dgeo_at(gx, pl, r, c)];
    }
}

// Launches dops_concat_kernel for element type T.
template <typename T>
static int dops_concat_launch(const gpu_ctx *g, const dops_geom *gx, const void *x, int off,
                              const dops_geom *gy, void *y, sc_err *err) {
    const size_t n = dgeo_total(gx);
    if (n == 0) return 0;
    const unsigned blocks = sc_blocks(g, n, DOPS_THREADS);
    if (dgeo_small(gx, nullptr, gy))
        dops_concat_kernel<T, uint32_t><<<blocks, DOPS_THREADS, 0, g->stream>>>(
            (uint32_t)n, dgeo_of(gx), (const T *)x, off, dgeo_of(gy), (T *)y);
    else
        dops_concat_kernel<T, size_t><<<blocks, DOPS_THREADS, 0, g->stream>>>(
            n, dgeo_of(gx), (const T *)x, off, dgeo_of(gy), (T *)y);
    cudaCheckLaunch(err);
    return 0;
}

// Copies x's interior into y's channels [off, off + gx->c).
extern "C" int dops_concat_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                               int off, const dops_geom *gy, void *y, sc_err *err) {
    SC_DISPATCH(dt, return dops_concat_launch<T>(g, gx, x, off, gy, y, err));
    return 0;
}

// --- input normalisation --------------------------------------------------------------

// Per-channel mean and standard deviation, passed by value.
struct dnorm {
    float mean[3], std[3];
};

// y interior = (img / 255 - mean) / std, the CPU reference's fp32 expression.
template <typename T>
__global__ void dops_normalize_kernel(size_t total, dgeo gy, const uint8_t *img, dnorm nm, T *y) {
    SC_GRID_LOOP(i, total) {
        size_t pl;
        int r, c;
        dgeo_split<size_t>(gy, i, &pl, &r, &c);
        const int ch = (int)(pl % 3);
        float x = __fdiv_rn((float)img[i], 255.0f);
        x = __fsub_rn(x, nm.mean[ch]);
        y[dgeo_at(gy, pl, r, c)] = sc_fromf<T>(__fdiv_rn(x, nm.std[ch]));
    }
}

// Normalises n images into the interior of y.
extern "C" int dops_normalize_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gy,
                                  const uint8_t *img, const float mean[3], const float std[3],
                                  void *y, sc_err *err) {
    if (gy->c != 3) return sc_fail(err, "normalize: %d channels, not 3", gy->c);
    const size_t n = dgeo_total(gy);
    if (n == 0) return 0;
    dnorm nm;
    for (int c = 0; c < 3; c++) nm.mean[c] = mean[c], nm.std[c] = std[c];
    SC_DISPATCH(dt, dops_normalize_kernel<T><<<sc_blocks(g, n, DOPS_THREADS), DOPS_THREADS, 0,
                                               g->stream>>>(n, dgeo_of(gy), img, nm, (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// --- pooling ------------------------------------------------------------------------

// One output element per thread: max (padding never wins) or average (/k*k).
template <typename T>
__global__ void dops_pool_kernel(size_t total, dgeo gx, const T *x, int k, int stride, int pad,
                                 int avg, dgeo gy, T *y) {
    SC_GRID_LOOP(i, total) {
        size_t pl;
        int p, q;
        dgeo_split<size_t>(gy, i, &pl, &p, &q);
        const int y0 = p * stride - pad, x0 = q * stride - pad;
        float best = -INFINITY, sum = 0.0f;
        for (int r = max(y0, 0); r < min(y0 + k, gx.h); r++)
            for (int c = max(x0, 0); c < min(x0 + k, gx.w); c++) {
                const float v = sc_tof(x[dgeo_at(gx, pl, r, c)]);
                sum += v;
                best = v > best ? v : best;
            }
        y[dgeo_at(gy, pl, p, q)] = sc_fromf<T>(avg ? sum / (float)(k * k) : best);
    }
}

// Max or average pool from gx to gy.
extern "C" int dops_pool_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                             int k, int stride, int pad, int avg, const dops_geom *gy, void *y,
                             sc_err *err) {
    const size_t n = dgeo_total(gy);
    if (n == 0) return 0;
    SC_DISPATCH(dt, dops_pool_kernel<T><<<sc_blocks(g, n, DOPS_THREADS), DOPS_THREADS, 0,
                                          g->stream>>>(n, dgeo_of(gx), (const T *)x, k, stride,
                                                       pad, avg, dgeo_of(gy), (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// One warp per plane: the mean of its interior into the output's single pixel.
template <typename T>
__global__ void dops_gap_kernel(size_t planes, dgeo gx, const T *x, dgeo gy, T *y) {
    const size_t warps = (size_t)gridDim.x * blockDim.x / 32;
    const int lane = threadIdx.x & 31;
    for (size_t pl = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; pl < planes;
         pl += warps) {
        float sum = 0.0f;
        for (int e = lane; e < gx.h * gx.w; e += 32)
            sum += sc_tof(x[dgeo_at(gx, pl, e / gx.w, e % gx.w)]);
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) y[dgeo_at(gy, pl, 0, 0)] = sc_fromf<T>(sum / (float)(gx.h * gx.w));
    }
}

// Global average pool.
extern "C" int dops_gap_gpu(const gpu_ctx *g, gpu_dtype dt, const dops_geom *gx, const void *x,
                            const dops_geom *gy, void *y, sc_err *err) {
    const size_t planes = (size_t)gx->n * gx->c;
    if (planes == 0) return 0;
    SC_DISPATCH(dt, dops_gap_kernel<T><<<sc_blocks(g, planes * 32, DOPS_THREADS), DOPS_THREADS, 0,
                                         g->stream>>>(planes, dgeo_of(gx), (const T *)x,
                                                      dgeo_of(gy), (T *)y));
    cudaCheckLaunch(err);
    return 0;
}
