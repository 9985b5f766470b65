// cuSPARSE baseline for the sparse convolution (GPU builds only): the same
// layer as kernels/spconv_gpu.h computed as im2col (a (C*R*S, n*P*Q) dense
// matrix in memory) times the CSR weights with cusparseSpMM, then bias,
// ReLU and the max pool into the bordered NCHW output. fp32 or fp16 data
// (fp32 accumulation). The SpMM algorithm is the fastest of those cuSPARSE
// accepts, measured at max_n.
#ifndef SC_KERNELS_SPMM_GPU_H
#define SC_KERNELS_SPMM_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/spconv.h"

typedef struct spmm_gpu spmm_gpu;

// Uploads the layer's CSR (d's offsets and values) for up to max_n images;
// dt GDT_F32 or GDT_F16 (activations of that type). Synchronises.
spmm_gpu *spmm_gpu_create(const gpu_ctx *g, const spconv_desc *d, gpu_dtype dt, int max_n,
                          sc_err *err);

// out = layer(in) for n <= max_n images on stream st (capturable once the
// descriptors for n exist: a first call with a new n creates them).
int spmm_gpu_forward(const gpu_ctx *g, spmm_gpu *s, int n, const void *in, void *out,
                     cudaStream_t st, sc_err *err);

// One line: data type and SpMM algorithm.
void spmm_gpu_describe(const spmm_gpu *s, char *buf, size_t len);

void spmm_gpu_free(spmm_gpu *s);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
