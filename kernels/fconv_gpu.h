// A dense convolution with its epilogue fused, through cuDNN's graph
// (backend) API (GPU builds only): y = act(conv(x, w) + bias [+ z]) on
// channels-last tensors, in fp16, bf16 or fp32 storage with fp32
// accumulation. The operation graph is conv -> add bias -> [add residual z]
// -> [ReLU]; cuDNN's heuristics list the engine configurations that can run
// it, and fconv_gpu_tune checks each one on the real buffers against the
// CPU reference (kernels/fconv.h) and times those that match, keeping the
// fastest (engines that reduce in reduced precision, or that down-convert
// fp32 inputs, are left out before that).
//
// Layouts: x (n, H, W, C), w (K, R, S, C), bias (K), z and y (n, P, Q, K),
// all dense, device pointers, element type `dt`.
#ifndef SC_KERNELS_FCONV_GPU_H
#define SC_KERNELS_FCONV_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>

#include "kernels/common_gpu.h"
#include "kernels/fconv.h"

#ifdef __cplusplus
extern "C" {
#endif

// One fused convolution and the storage type of its tensors.
typedef struct {
    fconv_dims d;         // geometry and epilogue (kernels/fconv.h)
    gpu_dtype dt;         // storage type of x, w, bias, z, y
} fconv_shape;

typedef struct fconv_gpu fconv_gpu;

// Builds the operation graph and an execution plan for every engine
// configuration cuDNN offers for it (at most max_plans; those that fail to
// build are skipped). Fails when none builds.
fconv_gpu *fconv_gpu_create(const gpu_ctx *g, const fconv_shape *s, int max_plans, sc_err *err);

// Checks every plan on the given buffers against the CPU reference on the
// batch's first and last images (max |y - CPU| within a few roundings of
// the storage type, relative to the largest output), times those that
// match (median of `repeat` after a warm-up; ws_max bytes of workspace at
// ws) and keeps the fastest; *ms gets its time. Plans needing more
// workspace than ws_max, failing to run or failing the check are skipped;
// fails when none is left. Syncs.
int fconv_gpu_tune(const gpu_ctx *g, fconv_gpu *c, const void *x, const void *w, const void *bias,
                   const void *z, void *y, void *ws, size_t ws_max, int repeat, double *ms,
                   sc_err *err);

// Plans the last fconv_gpu_tune rejected for not matching the CPU reference.
int fconv_gpu_rejected(const fconv_gpu *c);

// Workspace bytes of the plan in use (the largest of all plans before tuning).
size_t fconv_gpu_workspace(const fconv_gpu *c);

// Queues y = act(conv(x, w) + bias [+ z]) with the plan in use on g's stream
// (capturable; ws holds at least fconv_gpu_workspace bytes).
int fconv_gpu_run(const gpu_ctx *g, fconv_gpu *c, const void *x, const void *w, const void *bias,
                  const void *z, void *y, void *ws, sc_err *err);

// One line: engine index, workspace, check error, plans rejected by the check.
void fconv_gpu_describe(const fconv_gpu *c, char *buf, size_t len);

// Frees the plans and the graph (NULL is fine).
void fconv_gpu_free(fconv_gpu *c);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
