// A dense convolution with its epilogue fused, through cuDNN's graph
// (backend) API (GPU builds only): y = act(conv(x, w) + bias [+ z]) on
// channels-last tensors, in fp16, bf16 or fp32 storage with fp32
// accumulation. The operation graph is conv -> add bias -> [add residual z]
// -> [ReLU]; cuDNN's heuristics list the engine configurations that can run
// it, and fconv_gpu_tune times each one on the real buffers and keeps the
// fastest (engines that reduce in reduced precision, or that down-convert
// fp32 inputs, are left out).
//
// Layouts: x (n, H, W, C), w (K, R, S, C), bias (K), z and y (n, P, Q, K),
// all dense, device pointers, element type `dt`.
#ifndef SC_KERNELS_FCONV_GPU_H
#define SC_KERNELS_FCONV_GPU_H

#ifdef SC_HAVE_CUDA

#include <stddef.h>

#include "kernels/common_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// What one fused convolution computes.
typedef struct {
    int n, C, H, W;       // batch, input channels, input plane
    int K, R, S;          // output channels, kernel rows and columns
    int stride, pad;      // the conv's stride and zero padding (both sides)
    int residual;         // 1: add z before the activation
    int relu;             // 1: ReLU last
    gpu_dtype dt;         // storage type of x, w, bias, z, y
} fconv_shape;

typedef struct fconv_gpu fconv_gpu;

// Builds the operation graph and an execution plan for every engine
// configuration cuDNN offers for it (at most max_plans; those that fail to
// build are skipped), or, with engine >= 0, for that engine alone (a layer
// of the same shape as one already tuned). Fails when none builds.
fconv_gpu *fconv_gpu_create(const gpu_ctx *g, const fconv_shape *s, int max_plans,
                            int64_t engine, sc_err *err);

// cuDNN's global index of the engine of the plan in use.
int64_t fconv_gpu_engine(const fconv_gpu *c);

// Output plane size.
void fconv_gpu_out(const fconv_shape *s, int *P, int *Q);

// Times every plan on the given buffers (median of `repeat` after a
// warm-up; ws_max bytes of workspace at ws) and keeps the fastest; *ms gets
// its time. Plans needing more workspace than ws_max are skipped. Syncs.
int fconv_gpu_tune(const gpu_ctx *g, fconv_gpu *c, const void *x, const void *w, const void *bias,
                   const void *z, void *y, void *ws, size_t ws_max, int repeat, double *ms,
                   sc_err *err);

// Workspace bytes of the plan in use (the largest of all plans before tuning).
size_t fconv_gpu_workspace(const fconv_gpu *c);

// Queues y = act(conv(x, w) + bias [+ z]) with the plan in use on g's stream
// (capturable; ws holds at least fconv_gpu_workspace bytes).
int fconv_gpu_run(const gpu_ctx *g, fconv_gpu *c, const void *x, const void *w, const void *bias,
                  const void *z, void *y, void *ws, sc_err *err);

// One line: engine index, plans offered, workspace.
void fconv_gpu_describe(const fconv_gpu *c, char *buf, size_t len);

// Frees the plans and the graph (NULL is fine).
void fconv_gpu_free(fconv_gpu *c);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
