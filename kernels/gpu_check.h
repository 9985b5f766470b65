// Return-code checks for CUDA, cuDNN and cuBLAS calls (GPU builds only).
// Each macro evaluates a call once; on failure it fills the sc_err with the
// expression, the library's own error string, file and line, and makes the
// calling function return -1:
//
//     cudaCheck(err, cudaMalloc(&p, bytes));
//     cudnnCheck(err, cudnnSetStream(h, s));
//     cublasCheck(err, cublasSetStream(b, s));
//     cudaCheckLaunch(err);     // after a <<<...>>> launch
#ifndef SC_KERNELS_GPU_CHECK_H
#define SC_KERNELS_GPU_CHECK_H

#ifdef SC_HAVE_CUDA

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/error.h"
#ifdef __cplusplus
}
#endif

#define SC_GPU_FAIL_(err, expr, what)                                                     \
    sc_fail((err), "%.200s failed: %s (%s:%d)", (expr), (what), __FILE__, __LINE__)

// Returns -1 from the caller when a CUDA runtime call does not succeed.
#define cudaCheck(err, call)                                                              \
    do {                                                                                  \
        cudaError_t sc_e_ = (call);                                                       \
        if (sc_e_ != cudaSuccess) return SC_GPU_FAIL_(err, #call, cudaGetErrorString(sc_e_)); \
    } while (0)

// Returns -1 from the caller when a cuDNN call does not succeed.
#define cudnnCheck(err, call)                                                             \
    do {                                                                                  \
        cudnnStatus_t sc_s_ = (call);                                                     \
        if (sc_s_ != CUDNN_STATUS_SUCCESS)                                                \
            return SC_GPU_FAIL_(err, #call, cudnnGetErrorString(sc_s_));                  \
    } while (0)

// Returns -1 from the caller when a cuBLAS call does not succeed.
#define cublasCheck(err, call)                                                            \
    do {                                                                                  \
        cublasStatus_t sc_b_ = (call);                                                    \
        if (sc_b_ != CUBLAS_STATUS_SUCCESS)                                               \
            return SC_GPU_FAIL_(err, #call, cublasGetStatusString(sc_b_));                \
    } while (0)

// Returns -1 from the caller when the last kernel launch failed.
#define cudaCheckLaunch(err) cudaCheck(err, cudaGetLastError())

#endif  // SC_HAVE_CUDA
#endif
