// Inline PTX wrappers of the sm_80 instructions the tensor-core kernels use
// (CUDA sources only): cp.async copies to shared memory, ldmatrix, and the
// fp16/bf16 mma.sync shapes with fp32 accumulators; and the sm_90 grid
// dependency controls of programmatic dependent launch.
#ifndef SC_KERNELS_PTX_GPU_H
#define SC_KERNELS_PTX_GPU_H

#if defined(SC_HAVE_CUDA) && defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// --- asynchronous copies ----------------------------------------------------------------

// Starts a 16-byte copy global -> shared; valid 0 writes 16 zero bytes instead
// (src-size 0: nothing is read from src).
__device__ __forceinline__ void ptx_cp16(void *dst, const void *src, int valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}

// Closes the group of copies started since the last commit.
__device__ __forceinline__ void ptx_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N groups of this thread's copies are still in flight.
template <int N> __device__ __forceinline__ void ptx_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Waits until at most n groups are still in flight (n from 0 to 7; larger n
// waits as for 7, which is stricter, never looser).
__device__ __forceinline__ void ptx_cp_wait_n(int n) {
    switch (n) {
    case 0: ptx_cp_wait<0>(); break;
    case 1: ptx_cp_wait<1>(); break;
    case 2: ptx_cp_wait<2>(); break;
    case 3: ptx_cp_wait<3>(); break;
    case 4: ptx_cp_wait<4>(); break;
    case 5: ptx_cp_wait<5>(); break;
    case 6: ptx_cp_wait<6>(); break;
    default: ptx_cp_wait<7>(); break;
    }
}

// --- programmatic dependent launch (compute capability 9.0; no-ops before) ------------------

// Waits until the kernels this one was launched after have finished and their
// writes are visible (griddepcontrol.wait): a kernel that goes out as a
// programmatic dependent launch calls it before it reads or writes anything
// that earlier work on the stream touches; a no-op for a plain launch.
__device__ __forceinline__ void ptx_dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel on the stream, when it is a programmatic dependent
// launch, start once every CTA of this one has called this or exited
// (griddepcontrol.launch_dependents); it still waits for this kernel's end
// in its ptx_dep_wait.
__device__ __forceinline__ void ptx_dep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// --- shared loads ------------------------------------------------------------------------

// The 16-bit value at shared address addr, zero-extended (not volatile: the
// compiler may schedule it among the multiplies; its address comes from
// values loaded after the barrier that makes the data visible).
__device__ __forceinline__ uint32_t ptx_lds_u16(uint32_t addr) {
    unsigned short v;
    asm("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
    return v;
}

// --- ldmatrix ---------------------------------------------------------------------------

// Four 8x8 16-bit matrices; lane l gives the shared address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ptx_ldmatrix_x4(uint32_t addr, uint32_t *a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}

// Four 8x8 16-bit matrices transposed: lane l gives the shared address of
// row l % 8 of matrix l / 8 and receives, per matrix, its rows 2 (l % 4) and
// 2 (l % 4) + 1 at column l / 4.
__device__ __forceinline__ void ptx_ldmatrix_x4_trans(uint32_t addr, uint32_t *a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}

// Two 8x8 16-bit matrices; lanes 0-15 give the row addresses.
__device__ __forceinline__ void ptx_ldmatrix_x2(uint32_t addr, uint32_t *a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(a[0]), "=r"(a[1])
                 : "r"(addr));
}

// --- mma.sync ---------------------------------------------------------------------------

// d += a (16x16, row) x b (16x8, col), fp32 accumulators, for element type T.
template <typename T> __device__ __forceinline__ void ptx_mma16816(float *d, const uint32_t *a, const uint32_t *b);
template <> __device__ __forceinline__ void ptx_mma16816<__half>(float *d, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void ptx_mma16816<__nv_bfloat16>(float *d, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a (16x8, row) x b (8x8, col), fp32 accumulators, for element type T.
template <typename T> __device__ __forceinline__ void ptx_mma1688(float *d, const uint32_t *a, uint32_t b);
template <> __device__ __forceinline__ void ptx_mma1688<__half>(float *d, const uint32_t *a, uint32_t b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
}
template <>
__device__ __forceinline__ void ptx_mma1688<__nv_bfloat16>(float *d, const uint32_t *a, uint32_t b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
}

#endif  // SC_HAVE_CUDA && __CUDACC__
#endif
