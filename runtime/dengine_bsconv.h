// A conv layer of the dense engine run by the block-sparse tensor-core
// kernel (kernels/bsconv_gpu.h; GPU builds only) when its loaded layer keeps
// a block structure (sparse_layer.bsr; a hybrid layer's single weights run
// on the halo kernel's remainder path): the kernel reads and writes the
// engine's channels-last tensors as they are, takes the residual add and
// ReLU the engine fused into the layer, and a 2x2 or 4x4 max pool of stride
// equal to its window and no padding in its epilogue (another pool is left
// to the engine, which then gets the conv output).
#ifndef SC_RUNTIME_DENGINE_BSCONV_H
#define SC_RUNTIME_DENGINE_BSCONV_H

#ifdef SC_HAVE_CUDA

#include "kernels/bsconv.h"
#include "kernels/common_gpu.h"
#include "runtime/deploy_plan.h"

typedef struct debs debs;

// Layer sl's blocks (and a hybrid layer's remainder of single weights) as
// the kernels' BSR (kernels/bsconv.h): w points into sl, with its indptrs
// narrowed to 32 bits in *ip (the caller frees it). 0 or -1.
int debs_bsr(const sparse_layer *sl, bsconv_bsr *w, int32_t **ip, sc_err *err);

// Uploads conv op i of p for batches of n in storage type dt, reading an
// input of cx stored channels, with a residual (residual != 0) and ReLU;
// NULL (why in err) when the layer is not BSR or its input channels are
// padded (cx != C).
debs *debs_create(const gpu_ctx *g, const deploy_plan *p, int i, int n, int cx, int residual, int relu,
                  gpu_dtype dt, sc_err *err);

// 1 when the kernel writes the pooled output (the op's tensor), 0 when it
// writes the conv output (the engine's pre-pool buffer, if the op pools).
int debs_pooled(const debs *b);

// Selects kernel variant v (0 .. BSCONV_GPU_VARIANTS - 1); -1 when it does not fit.
int debs_set_variant(const gpu_ctx *g, debs *b, int v, sc_err *err);

// Queues y = [pool](act(conv(x) + bias [+ z])) on g's stream (z NULL without a residual).
int debs_run(const gpu_ctx *g, const debs *b, const void *x, const void *z, void *y, sc_err *err);

// "bsconv KBxCB vV" (and "+pool" when the pool is fused).
void debs_describe(const debs *b, char *buf, size_t len);

void debs_free(debs *b);

#endif  // SC_HAVE_CUDA
#endif
