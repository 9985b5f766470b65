// GPU context (stream + cuDNN + cuBLAS handles) and utility launches:
// dtype conversion and deterministic uniform fills.
#include <stdio.h>

#include "kernels/common_gpu.h"
#include "kernels/device_gpu.h"
#include "kernels/median.h"

// cuBLAS workspace handed to the handle, so captured graphs allocate nothing.
#define SC_CUBLAS_WS_BYTES ((size_t)32 << 20)

// --- types ------------------------------------------------------------------

// Bytes per element of a dtype.
extern "C" size_t gpu_dtype_size(gpu_dtype dt) { return dt == GDT_F32 ? 4 : 2; }

// --- context ----------------------------------------------------------------

// Fills *d with the properties of device dev (-1: the current device).
extern "C" int gpu_devinfo_query(int dev, gpu_devinfo *d, sc_err *err) {
    *d = gpu_devinfo{};
    if (dev < 0) cudaCheck(err, cudaGetDevice(&dev));
    cudaDeviceProp p;
    cudaCheck(err, cudaGetDeviceProperties(&p, dev));
    d->device = dev, d->cc_major = p.major, d->cc_minor = p.minor;
    d->sms = p.multiProcessorCount;
    d->smem_block = (int)p.sharedMemPerBlock, d->smem_block_optin = (int)p.sharedMemPerBlockOptin;
    d->smem_sm = (int)p.sharedMemPerMultiprocessor;
    d->smem_reserved = (int)p.reservedSharedMemPerBlock;
    d->regs_block = p.regsPerBlock, d->regs_sm = p.regsPerMultiprocessor;
    d->threads_sm = p.maxThreadsPerMultiProcessor;
    snprintf(d->name, sizeof d->name, "%s", p.name);
    if (d->sms < 1 || d->smem_block_optin < d->smem_block)
        return sc_fail(err, "device %d (%s): odd properties (%d SMs, %d bytes shared per block)",
                       dev, d->name, d->sms, d->smem_block_optin);
    return 0;
}

// Compute capability as one number (8.6 -> 86).
extern "C" int gpu_devinfo_cc(const gpu_devinfo *d) { return 10 * d->cc_major + d->cc_minor; }

// Queries the current device and creates a non-blocking stream and
// cuDNN/cuBLAS handles bound to it.
extern "C" int gpu_ctx_init(gpu_ctx *g, sc_err *err) {
    *g = gpu_ctx{};
    SC_TRY(gpu_devinfo_query(-1, &g->dev, err));
    cudaCheck(err, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    cudnnCheck(err, cudnnCreate(&g->cudnn));
    cudnnCheck(err, cudnnSetStream(g->cudnn, g->stream));
    cublasCheck(err, cublasCreate(&g->cublas));
    cublasCheck(err, cublasSetStream(g->cublas, g->stream));
    cudaCheck(err, cudaMalloc(&g->cublas_ws, SC_CUBLAS_WS_BYTES));
    cublasCheck(err, cublasSetWorkspace(g->cublas, g->cublas_ws, SC_CUBLAS_WS_BYTES));
    g->pdl = gpu_devinfo_cc(&g->dev) >= 90;
    return 0;
}

// Destroys what gpu_ctx_init created (a zeroed context is fine).
extern "C" void gpu_ctx_free(gpu_ctx *g) {
    if (g->cublas) cublasDestroy(g->cublas);
    if (g->cudnn) cudnnDestroy(g->cudnn);
    if (g->cublas_ws) cudaFree(g->cublas_ws);
    if (g->stream) cudaStreamDestroy(g->stream);
    *g = gpu_ctx{};
}

// --- conversion -------------------------------------------------------------

// dst = src[0, bytes) from host memory, complete on return (the device
// waits for the copy's DMA, which the legacy stream carries).
extern "C" int gpu_upload(void *dst, const void *src, size_t bytes, sc_err *err) {
    if (!bytes) return 0;
    cudaCheck(err, cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    cudaCheck(err, cudaDeviceSynchronize());
    return 0;
}

// *dst = a new device buffer (16 bytes when bytes is 0) holding src[0, bytes).
extern "C" int gpu_new_upload(void **dst, const void *src, size_t bytes, sc_err *err) {
    cudaCheck(err, cudaMalloc(dst, bytes ? bytes : 16));
    return gpu_upload(*dst, src, bytes, err);
}

// dst = src element by element.
template <typename S, typename D>
__global__ void convert_kernel(size_t n, const S *src, D *dst) {
    SC_GRID_LOOP(i, n) dst[i] = sc_fromf<D>(sc_tof(src[i]));
}

// dst (n) [ddt] = src (n) [sdt] (through fp32; a copy when the types match).
extern "C" int gpu_convert(const gpu_ctx *g, size_t n, gpu_dtype sdt, const void *src,
                           gpu_dtype ddt, void *dst, sc_err *err) {
    if (n == 0) return 0;
    if (sdt == ddt) {
        cudaCheck(err, cudaMemcpyAsync(dst, src, n * gpu_dtype_size(sdt), cudaMemcpyDeviceToDevice,
                                       g->stream));
        return 0;
    }
    const int th = 256;
    const unsigned bl = sc_blocks(g, n, th);
    SC_DISPATCH3(sdt, typedef T S; SC_DISPATCH3(ddt, convert_kernel<<<bl, th, 0, g->stream>>>(
                                                         n, (const S *)src, (T *)dst)));
    cudaCheckLaunch(err);
    return 0;
}

// --- fills ------------------------------------------------------------------

// 64-bit mix (splitmix64 finaliser).
__device__ __forceinline__ uint64_t fill_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// p[i] = lo + (hi - lo) * u(seed, i).
template <typename T>
__global__ void fill_uniform_kernel(size_t n, T *p, float lo, float hi, uint64_t seed) {
    SC_GRID_LOOP(i, n) {
        const uint64_t z = fill_mix(seed * 0x9e3779b97f4a7c15ull + i);
        const float u = (float)(z >> 40) * (1.0f / 16777216.0f);
        p[i] = sc_fromf<T>(lo + (hi - lo) * u);
    }
}

// p (n) [dt] = uniform values in [lo, hi).
extern "C" int gpu_fill_uniform(const gpu_ctx *g, gpu_dtype dt, size_t n, void *p, float lo,
                                float hi, uint64_t seed, sc_err *err) {
    if (n == 0) return 0;
    SC_DISPATCH3(dt, fill_uniform_kernel<T><<<sc_blocks(g, n, 256), 256, 0, g->stream>>>(
                        n, (T *)p, lo, hi, seed));
    cudaCheckLaunch(err);
    return 0;
}

// --- timing -------------------------------------------------------------------

// Spins until `ns` nanoseconds of the GPU's global timer have passed.
__global__ void gpu_spin_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

// Times `repeat` runs of fn between events after the warm-up, each queued
// behind a spin kernel of GPU_BUSY_NS when busy (the host's queuing of fn
// then overlaps it); -1 on failure.
static int gpu_time_runs(const gpu_ctx *g, gpu_run_fn fn, void *arg, int warmup, int repeat, int busy,
                         cudaEvent_t ev[2], double *v, sc_err *err) {
    for (int k = 0; k < warmup; k++) SC_TRY(fn(arg, err));
    for (int k = 0; k < repeat; k++) {
        float t = 0.0f;
        if (busy) {
            gpu_spin_kernel<<<1, 1, 0, g->stream>>>(GPU_BUSY_NS);
            cudaCheckLaunch(err);
        }
        cudaCheck(err, cudaEventRecord(ev[0], g->stream));
        SC_TRY(fn(arg, err));
        cudaCheck(err, cudaEventRecord(ev[1], g->stream));
        cudaCheck(err, cudaEventSynchronize(ev[1]));
        cudaCheck(err, cudaEventElapsedTime(&t, ev[0], ev[1]));
        v[k] = t;
    }
    return 0;
}

// Median milliseconds of `repeat` timed runs of fn (busy: each behind a spin kernel).
static int gpu_time_median_of(const gpu_ctx *g, gpu_run_fn fn, void *arg, int warmup, int repeat, int busy,
                              double *ms, sc_err *err) {
    if (repeat < 1 || repeat > 1000) return sc_fail(err, "timing: %d runs (1 to 1000)", repeat);
    double v[1000];
    cudaEvent_t ev[2] = {NULL, NULL};
    int rc = cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess
                 ? sc_fail(err, "cudaEventCreate: %s", cudaGetErrorString(cudaGetLastError()))
                 : gpu_time_runs(g, fn, arg, warmup, repeat, busy, ev, v, err);
    for (int k = 0; k < 2; k++)
        if (ev[k]) cudaEventDestroy(ev[k]);
    *ms = rc ? NAN : sc_median(v, repeat);
    return rc;
}

// Median milliseconds of `repeat` timed runs of fn.
extern "C" int gpu_time_median(const gpu_ctx *g, gpu_run_fn fn, void *arg, int warmup, int repeat,
                               double *ms, sc_err *err) {
    return gpu_time_median_of(g, fn, arg, warmup, repeat, 0, ms, err);
}

// Median GPU milliseconds of `repeat` runs of fn with the host's queuing hidden.
extern "C" int gpu_time_median_busy(const gpu_ctx *g, gpu_run_fn fn, void *arg, int warmup, int repeat,
                                    double *ms, sc_err *err) {
    return gpu_time_median_of(g, fn, arg, warmup, repeat, 1, ms, err);
}
