// Force-included before kernels/bsconv_halo.cu and kernels/bsconv_direct.cu
// when tests/halo_emu.sh builds them as host C++: the CUDA types come from the real headers, the
// device built-ins and the PTX wrappers of kernels/ptx_gpu.h (which compiles
// to nothing outside nvcc) are declared here and emulated in driver.cpp.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#undef __align__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
using std::min;
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
void __syncthreads();
int __syncthreads_or(int p);
int atomicAdd(int *p, int v);
template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcg(const T *p) { T v; __atomic_load(p, &v, __ATOMIC_SEQ_CST); return v; }
template <typename T> inline void __stcg(T *p, T v) { __atomic_store(p, &v, __ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
float __shfl_xor_sync(unsigned mask, float v, int off);
uint32_t __shfl_sync(unsigned mask, uint32_t v, int src);
void __syncwarp();
size_t __cvta_generic_to_shared(const void *p);
void ptx_cp16(void *dst, const void *src, int valid);
void ptx_cp_commit();
void emu_cp_wait(int n);
template <int N> inline void ptx_cp_wait() { emu_cp_wait(N); }
inline void ptx_cp_wait_n(int n) { emu_cp_wait(n < 7 ? n : 7); }
uint32_t ptx_lds_u16(uint32_t addr);
void ptx_ldmatrix_x4(uint32_t addr, uint32_t *a);
void ptx_ldmatrix_x2(uint32_t addr, uint32_t *a);
void ptx_ldmatrix_x4_trans(uint32_t addr, uint32_t *a);
void emu_mma(float *d, const uint32_t *a, const uint32_t *b, int k16, int bf16);
template <typename T> inline void ptx_mma16816(float *d, const uint32_t *a, const uint32_t *b) {
    emu_mma(d, a, b, 1, sizeof(T) == 2 && !std::is_same<T, __half>::value);
}
template <typename T> inline void ptx_mma1688(float *d, const uint32_t *a, uint32_t b) {
    emu_mma(d, a, &b, 0, sizeof(T) == 2 && !std::is_same<T, __half>::value);
}
// The launch: the grid's CTAs one after another, a coroutine per CUDA thread.
cudaError_t emu_launch(const void *fn, dim3 grid, dim3 block, void **args, size_t smem);
#define cudaLaunchKernel(fn, grid, block, args, smem, stream) emu_launch((const void *)(fn), grid, block, args, smem)
// kernels/device_gpu.h's launch helper and the grid dependency controls of
// kernels/ptx_gpu.h: the CTAs run one after another here, so a programmatic
// dependent launch is a plain one and its wait and trigger do nothing.
template <typename G>
inline cudaError_t sc_launch(const G *g, const void *fn, dim3 grid, dim3 block, size_t smem, void **args) {
    return emu_launch(fn, grid, block, args, smem);
}
inline void ptx_dep_wait() {}
inline void ptx_dep_launch() {}
// The shared memory of the CTA that runs (one at a time).
extern char *emu_smem;
