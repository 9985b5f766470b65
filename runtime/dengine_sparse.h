// A conv layer of the dense engine run by the direct sparse kernel instead
// (GPU builds only): the engine's NHWC input is converted into the bordered
// NCHW layout the kernel reads, the kernel runs (bias, ReLU and a fused max
// pool as exported), and its output is converted back to NHWC, with the
// residual add and ReLU the engine fused into the layer. The engine times
// the three launches together against its cuDNN convolution and keeps the
// faster, so the conversions are paid for in the comparison.
#ifndef SC_RUNTIME_DENGINE_SPARSE_H
#define SC_RUNTIME_DENGINE_SPARSE_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"
#include "runtime/deploy_plan.h"

typedef struct desparse desparse;

// Uploads conv op i of p for batches of n in storage type dt (fp16: the
// half2 kernel, or the 4-bit codebook kernel when the layer has codes) and
// makes its bordered buffers (borders zero).
desparse *desparse_create(const deploy_plan *p, int i, int n, gpu_dtype dt, sc_err *err);

// Queues y (NHWC) = layer(x (NHWC, cx channels)) [+ z], ReLU when relu.
int desparse_run(const gpu_ctx *g, desparse *s, const void *x, int cx, const void *z, int relu,
                 void *y, sc_err *err);

// Converts x and lets the kernel pick its fastest variant on it (syncs).
int desparse_tune(const gpu_ctx *g, desparse *s, const void *x, int cx, sc_err *err);

// The kernel variant in use.
void desparse_describe(const desparse *s, char *buf, size_t len);

void desparse_free(desparse *s);

#endif  // SC_HAVE_CUDA
#endif
