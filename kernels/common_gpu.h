// Shared pieces of the GPU kernels (GPU builds only): the element types, the
// context every GPU function takes (stream and library handles, no globals),
// the small device-resident structs a training step reads and updates
// (hyper-parameters, statistics, loss scaler), and a few utility launches.
//
// Layout conventions of every *_gpu function: activations are NHWC, conv
// filters KRSC, all pointers are device pointers unless a comment says
// otherwise, and work is queued on g->stream without a host sync.
#ifndef SC_KERNELS_COMMON_GPU_H
#define SC_KERNELS_COMMON_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>
#include <stdint.h>

#include "kernels/gpu_check.h"

#ifdef __cplusplus
extern "C" {
#endif

// --- types ------------------------------------------------------------------

// The oldest compute capability the build emits code for (Makefile CUDA_ARCH)
// and the code relies on (warp reductions such as __reduce_max_sync need 8.0).
#define GPU_MIN_CC 80

// GDT_BF16 is used by the channels-last dense engine only (kernels/nhwc_ops_gpu.h,
// kernels/fconv_gpu.h, kernels/flinear_gpu.h); SC_DISPATCH knows fp32 and fp16.
typedef enum { GDT_F32 = 0, GDT_F16 = 1, GDT_BF16 = 2 } gpu_dtype;

// What the code needs to know of a device, queried once (gpu_devinfo_query)
// and carried in the context: launch sizes and shared-memory budgets read
// these, never literals, so the kernels fit any GPU from compute capability 8.0.
typedef struct {
    int device;            // CUDA ordinal
    int cc_major, cc_minor;
    int sms;               // streaming multiprocessors
    int smem_block;        // shared memory per block without opt-in (bytes)
    int smem_block_optin;  // shared memory per block with opt-in (bytes)
    int smem_sm;           // shared memory per SM (bytes)
    int smem_reserved;     // shared memory the system reserves per block (bytes)
    int regs_block, regs_sm;
    int threads_sm;        // resident threads per SM
    char name[256];
} gpu_devinfo;

// Stream and library handles (cuDNN and cuBLAS are bound to the stream) and
// the properties of the device they were created on.
typedef struct {
    gpu_devinfo dev;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    void *cublas_ws;  // cuBLAS workspace (so graph capture needs no allocation)
    int pdl;          // the block-sparse conv kernels as programmatic dependent launches
                      // (compute capability 9.0 on: each may start while the kernel before it
                      // ends, and waits for it before it touches activations), letting the
                      // next kernel start 1: after their main loop (the default there), 2:
                      // from their start (the tail kernel, bsconv_tail_gpu.h: after its last
                      // conv in both modes); 0: plain launches (the default before 9.0)
} gpu_ctx;

// Per-step hyper-parameters, uploaded with each batch (device memory).
typedef struct {
    float lr, momentum, weight_decay, smoothing;
    int nesterov;
    int pad_[3];
} gpu_hparams;

// Statistics accumulated on the device until the host takes them.
typedef struct {
    double loss_sum;
    unsigned long long correct, count, skipped;
} gpu_stats;

// Dynamic loss scaling state (device memory). overflow is set by the gradient
// gather when a non-finite gradient shows up and cleared by scaler_update_gpu.
typedef struct {
    float scale, inv_scale;
    int good_steps, overflow;
} gpu_scaler;

// Bytes per element of a dtype.
size_t gpu_dtype_size(gpu_dtype dt);

// --- context ----------------------------------------------------------------

// Fills *d with the properties of device dev (-1: the current device).
int gpu_devinfo_query(int dev, gpu_devinfo *d, sc_err *err);

// Compute capability as one number (8.6 -> 86).
int gpu_devinfo_cc(const gpu_devinfo *d);

// Queries the current device and creates a non-blocking stream and
// cuDNN/cuBLAS handles bound to it.
int gpu_ctx_init(gpu_ctx *g, sc_err *err);
// Destroys what gpu_ctx_init created (a zeroed context is fine).
void gpu_ctx_free(gpu_ctx *g);

// --- utility launches -------------------------------------------------------

// dst = src[0, bytes) from host memory, complete on return: a pageable
// cudaMemcpy may still be in flight when it returns, and kernels on a
// non-blocking stream (every gpu_ctx's) do not wait for it.
int gpu_upload(void *dst, const void *src, size_t bytes, sc_err *err);

// *dst = a new device buffer (16 bytes when bytes is 0) holding src[0,
// bytes), complete on return; the caller frees it (also on failure).
int gpu_new_upload(void **dst, const void *src, size_t bytes, sc_err *err);

// dst (n) [ddt] = src (n) [sdt], converted through fp32 (fp32, fp16, bf16; rounds to nearest).
int gpu_convert(const gpu_ctx *g, size_t n, gpu_dtype sdt, const void *src, gpu_dtype ddt,
                void *dst, sc_err *err);

// One run of GPU work to time: queues it on the context's stream; 0 or -1.
typedef int (*gpu_run_fn)(void *arg, sc_err *err);

// Median milliseconds of `repeat` runs of fn (1..1000), each between two
// CUDA events on g's stream, after `warmup` untimed runs; synchronises.
int gpu_time_median(const gpu_ctx *g, gpu_run_fn fn, void *arg, int warmup, int repeat, double *ms,
                    sc_err *err);

// The GPU time of one op as it runs inside a CUDA graph: like gpu_time_median,
// but each timed run is queued behind a spin kernel of GPU_BUSY_NS, so the
// host's work for fn (a launch, a cuDNN call's planning and checks) overlaps
// the spin and is not counted. For choosing between kernels of one op; a
// whole forward pass is timed with gpu_time_median (launch included).
#define GPU_BUSY_NS 200000ull
int gpu_time_median_busy(const gpu_ctx *g, gpu_run_fn fn, void *arg, int warmup, int repeat, double *ms,
                         sc_err *err);

// p (n) [dt] = uniform values in [lo, hi) from a hash of (seed, index).
int gpu_fill_uniform(const gpu_ctx *g, gpu_dtype dt, size_t n, void *p, float lo, float hi,
                     uint64_t seed, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
