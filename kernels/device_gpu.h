// Device-side helpers shared by the kernels/*.cu files (CUDA sources only):
// float <-> element conversions, 16-byte packs, launch sizing and the dtype
// dispatch. Not for C code.
#ifndef SC_KERNELS_DEVICE_GPU_H
#define SC_KERNELS_DEVICE_GPU_H

#if defined(SC_HAVE_CUDA) && defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common_gpu.h"

// --- element conversions ----------------------------------------------------

// Widens an element to float.
__device__ __forceinline__ float sc_tof(float x) { return x; }
__device__ __forceinline__ float sc_tof(__half x) { return __half2float(x); }
__device__ __forceinline__ float sc_tof(__nv_bfloat16 x) { return __bfloat162float(x); }

// Narrows a float to element type T (round to nearest).
template <typename T> __device__ __forceinline__ T sc_fromf(float x);
template <> __device__ __forceinline__ float sc_fromf<float>(float x) { return x; }
template <> __device__ __forceinline__ __half sc_fromf<__half>(float x) {
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 sc_fromf<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// --- 16-byte packs ----------------------------------------------------------

// VEC elements of T moved as one 16-byte load/store.
template <typename T> struct sc_pack {
    static constexpr int VEC = 16 / sizeof(T);
    union {
        uint4 raw;
        T v[VEC];
    };
};

// True when every pointer is 16-byte aligned and n is a multiple of vec.
static inline bool sc_can_vec(size_t n, int vec, const void *a, const void *b = nullptr,
                              const void *c = nullptr) {
    auto al = [](const void *p) { return ((uintptr_t)p & 15u) == 0; };
    return n % (size_t)vec == 0 && al(a) && al(b) && al(c);
}

// --- launch sizing ----------------------------------------------------------

// Blocks for a grid-stride loop over `items` with `threads` per block on a
// device with `sms` SMs: at most 16 per SM (enough to fill it several times).
static inline unsigned sc_blocks_on(int sms, size_t items, int threads) {
    size_t b = (items + (size_t)threads - 1) / (size_t)threads;
    const size_t cap = (size_t)sms * 16;
    if (b < 1) b = 1;
    return (unsigned)(b > cap ? cap : b);
}

// Blocks for a grid-stride loop over `items` with `threads` per block on g's device.
static inline unsigned sc_blocks(const gpu_ctx *g, size_t items, int threads) {
    return sc_blocks_on(g->dev.sms, items, threads);
}

// Queues kernel fn (args as for cudaLaunchKernel) on g's stream, as a
// programmatic dependent launch when g->pdl: fn must then call ptx_dep_wait
// (kernels/ptx_gpu.h) before it reads or writes what earlier work touches.
static inline cudaError_t sc_launch(const gpu_ctx *g, const void *fn, dim3 grid, dim3 block, size_t smem,
                                    void **args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = grid, c.blockDim = block, c.dynamicSmemBytes = smem, c.stream = g->stream;
    c.attrs = at, c.numAttrs = g->pdl ? 1 : 0;
    return cudaLaunchKernelExC(&c, fn, args);
}

// Grid-stride loop index helpers.
#define SC_GRID_LOOP(i, n)                                                                 \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);         \
         i += (size_t)blockDim.x * gridDim.x)

// Runs `body` with T bound to the element type of dt (float or __half).
#define SC_DISPATCH(dt, ...)                                                               \
    do {                                                                                   \
        if ((dt) == GDT_F16) {                                                             \
            typedef __half T;                                                              \
            __VA_ARGS__;                                                                   \
        } else {                                                                           \
            typedef float T;                                                               \
            __VA_ARGS__;                                                                   \
        }                                                                                  \
    } while (0)

// Runs `body` with T bound to the element type of dt, bf16 included
// (float, __half or __nv_bfloat16): for kernels written for all three.
#define SC_DISPATCH3(dt, ...)                                                              \
    do {                                                                                   \
        if ((dt) == GDT_BF16) {                                                            \
            typedef __nv_bfloat16 T;                                                       \
            __VA_ARGS__;                                                                   \
        } else {                                                                           \
            SC_DISPATCH(dt, __VA_ARGS__);                                                  \
        }                                                                                  \
    } while (0)

#endif
#endif
