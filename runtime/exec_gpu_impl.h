// Private state of the GPU executor backend, shared by runtime/exec_gpu.c
// (the backend table: create, staging, host copies, profiling) and
// runtime/exec_gpu_step.cu (plans, forward, backward, the step and its graph).
//
// The GPU executor backend: runs a net with cuDNN/cuBLAS and the kernels of
// kernels/*.cu, NHWC activations in fp32 (PREC_FP32) or fp16 (PREC_FP16, with
// fp32 master weights, BN parameters and optimizer, dynamic loss scaling).
//
// What lives where:
//   - flat fp32 vectors param/mask/grad/mom (nparam) and buf (nbuf) mirror
//     the net's canonical layout; conv and linear layers run on per-layer
//     work copies of their weights (KRSC, [dt]) that one multi-tensor launch
//     refreshes each step, and write their weight gradients into per-layer
//     work gradients that one launch gathers back (unscaled, checked);
//   - one output and one gradient buffer per layer, sized for max_batch;
//   - per batch size a plan: cuDNN conv plans (algorithms timed once) and BN
//     plans, plus the CUDA graph of a whole training step once it has run
//     (captured again when the loss switches between hard labels and soft
//     targets).
// In fp16, "bn, relu" and "bn, add, relu" patterns run as cuDNN's fused
// persistent BN kernels during training. Batches are staged through pinned
// memory (two buffers, so the host can fill one while the GPU reads the
// other); nothing in a step synchronises with the host.
#ifndef SC_EXEC_GPU_IMPL_H
#define SC_EXEC_GPU_IMPL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "runtime/exec_backend.h"
#include "runtime/exec_gpu.h"
#include "runtime/ops.h"
#ifdef __cplusplus
}
#endif
#include "kernels/activation_gpu.h"
#include "kernels/augment_gpu.h"
#include "kernels/batchnorm_gpu.h"
#include "kernels/conv2d_gpu.h"
#include "kernels/linear_gpu.h"
#include "kernels/loss_gpu.h"
#include "kernels/pool_gpu.h"
#include "kernels/sgd_gpu.h"

#define GX_MAX_PLANS 6                     // batch sizes kept planned at once
#define GX_FIND_LIMIT ((size_t)512 << 20)  // workspace limit of the algorithm search
#define GX_SCALE_INIT 4096.0f              // initial loss scale (fp16)
#define GX_SCALE_INTERVAL 1000             // clean steps before the scale doubles
#define GX_STAGE_ALIGN 256

typedef enum { ROLE_PLAIN = 0, ROLE_HEAD, ROLE_INNER, ROLE_TAIL } gx_role;

// Per-layer state that does not depend on the batch size.
typedef struct {
    gx_role role;          // in a fused BN group (training, fp16): head = the BN
    bn_fuse fuse;          // head: the group's fusion
    int head;              // tail: index of the group's BN
    gpu_dtype odt;         // dtype of the output (fp32 for a final linear)
    size_t size;           // output elements per image
    void *out;             // (max_batch, h, w, c) [odt]
    void *grad;            // (max_batch, h, w, c) [dt]
    int wc;                // conv: input channels as stored (cpad for the stem)
    void *wwork, *gwork;   // conv/linear: work weight [dt], work gradient
    float *save_mean, *save_invstd;  // bn: (c) batch statistics
    float *stage;          // bn: 16-byte aligned copies of its per-channel vectors (6 x c4)
    void *reserve;         // bn: cuDNN reserve space
    size_t reserve_bytes;
} gx_layer;

// Per-batch-size state.
typedef struct gx_plan {
    int n, backward;       // n = 0: unused slot
    conv_gpu **conv;       // per layer, shared between layers of equal shape
    unsigned char *owner;  // per layer: conv[i] is freed with this layer
    bn_gpu **bn;           // per layer
    cudaGraphExec_t graph;
    int graph_state;       // 0 not tried, 1 ready, -1 failed (runs eagerly)
    int graph_soft;        // the graph's loss: 1 soft targets, 0 hard labels
    char graph_err[200];   // why the capture failed
    long steps;
    unsigned long last_use;
} gx_plan;

// Profiling events of one step (exec_gpu_profile_step).
typedef struct {
    cudaEvent_t *fwd, *bwd;  // (nlayers + 1) each: boundaries
    cudaEvent_t other[5];
} gx_prof;

typedef struct gx_exec {
    net *nt;
    sc_precision prec;
    gpu_dtype dt;
    int max_batch, cpad, use_graphs;
    char name[256];
    gpu_ctx g;
    gx_layer *gl;
    unsigned char *gseen;  // per layer, host: its gradient was written this step
    gx_plan plans[GX_MAX_PLANS];
    unsigned long clock;
    void *ws;              // shared cuDNN workspace
    size_t ws_bytes, max_size;
    void *input;           // (max_batch, in_h, in_w, cpad) [dt]
    void *scratch[2];      // (max_batch * max_size) [dt] each
    float *logits32;       // (max_batch, classes)
    float *param, *mask, *grad, *mom, *buf;
    param_segs *segs;
    gpu_stats *stats;
    gpu_scaler *scaler;
    size_t stage_bytes, off_labels, off_dx, off_dy, off_flip, off_images, off_soft;
    int soft_mode;         // the staged batch has soft targets (exec_batch.soft)
    unsigned char *dstage, *hstage[2];
    cudaEvent_t stage_ev[2];
    int stage_cur, work_stale;
    gx_prof *prof;         // non-NULL while a profiled step runs
} gx_exec;

// The GPU executor's hooks in a layer kind's registry row (runtime/ops.h),
// defined in runtime/op_<kind>_gpu.c.
struct op_gpu {
    int reads_padded_input;  // reads the network input with its channels padded (conv)
    int fp32_head;           // as the last layer it writes fp32 logits (linear)
    // Per-layer buffers that do not depend on the batch size; NULL: none.
    int (*setup)(gx_exec *e, int i, sc_err *err);
    // The multi-tensor segment of the layer's weight tensor (work copy
    // layout); required when the kind owns a PT_WEIGHT tensor.
    void (*weight_seg)(gx_exec *e, int i, size_t offset, param_seg *q);
    // Per-batch-size plan of layer i for p->n images; grows *ws to the
    // workspace it needs. NULL: nothing to plan.
    int (*plan)(gx_exec *e, gx_plan *p, int i, size_t *ws, sc_err *err);
    // Layer i forward on n images (train: training mode); a fused group's
    // head runs the whole group.
    int (*forward)(gx_exec *e, gx_plan *p, int i, int n, int train, sc_err *err);
    // Layer i backward on n images: parameter gradients, then input
    // gradients routed through gx_route (a fused group's head runs the group).
    int (*backward)(gx_exec *e, gx_plan *p, int i, int n, sc_err *err);
};

// --- small helpers ----------------------------------------------------------

// The GPU hooks of layer i's kind.
static inline const struct op_gpu *gx_ops(const gx_exec *e, int i) {
    return op_of(e->nt->layers[i].kind)->gpu;
}

// Output of layer src (-1 = the prepared input).
static inline void *gx_out(gx_exec *e, int src) { return src < 0 ? e->input : e->gl[src].out; }

// Trainable tensor t's master values / gradient (fp32), NULL when t < 0.
static inline float *gx_param(gx_exec *e, int t) {
    return t < 0 ? NULL : e->param + e->nt->tensors[t].offset;
}
// Gradient (fp32, flat) of trainable tensor t, NULL when t < 0.
static inline float *gx_pgrad(gx_exec *e, int t) {
    return t < 0 ? NULL : e->grad + e->nt->tensors[t].offset;
}

// BN buffer tensor t (running mean or var).
static inline float *gx_buf(gx_exec *e, int t) { return e->buf + e->nt->tensors[t].offset; }

// Staged device copies of the batch.
static inline gpu_hparams *gx_hp(gx_exec *e) { return (gpu_hparams *)e->dstage; }
static inline int *gx_labels(gx_exec *e) { return (int *)(e->dstage + e->off_labels); }
// Staged soft targets, (n, classes) fp32 (valid when soft_mode).
static inline float *gx_soft(gx_exec *e) { return (float *)(e->dstage + e->off_soft); }

// Image bytes of one input image.
static inline size_t gx_img_bytes(const net *nt) { return (size_t)3 * nt->in_h * nt->in_w; }

// cudaMalloc that reports the size that failed.
static inline int gx_alloc(void **p, size_t bytes, sc_err *err) {
    cudaError_t rc = cudaMalloc(p, bytes ? bytes : 16);
    if (rc != cudaSuccess)
        return sc_fail(err, "GPU allocation of %zu bytes failed: %s", bytes, cudaGetErrorString(rc));
    return 0;
}

// Gradient buffer of input src and whether it already holds a contribution
// (*acc); marks it written. NULL for the network input.
static inline void *gx_route(gx_exec *e, int src, int *acc) {
    *acc = 0;
    if (src < 0) return NULL;
    *acc = e->gseen[src];
    e->gseen[src] = 1;
    return e->gl[src].grad;
}

// Adds scratch buffer k into dst when the target needed accumulation.
static inline int gx_settle(gx_exec *e, int k, void *dst, int acc, size_t count, sc_err *err) {
    if (!dst || !acc) return 0;
    return accumulate_gpu(&e->g, e->dt, count, e->scratch[k], dst, 1, err);
}

// Records a profiling event when profiling.
static inline void gx_mark(gx_exec *e, cudaEvent_t ev) {
    if (e->prof) cudaEventRecord(ev, e->g.stream);
}

// --- shared functions (runtime/exec_gpu_step.cu) ----------------------------

#ifdef __cplusplus
extern "C" {
#endif
// Frees a plan's cuDNN plans and graph and marks the slot unused.
void gx_plan_free(gx_exec *e, gx_plan *p);
// The plan for n images, built when missing (backward: with backward algorithms).
gx_plan *gx_plan_get(gx_exec *e, int n, int backward, sc_err *err);
// Prepares the staged images and runs every layer (train: batch-statistics BN).
int gx_forward(gx_exec *e, gx_plan *p, int n, int train, sc_err *err);
// Every launch of one training step on the staged batch.
int gx_step_ops(gx_exec *e, gx_plan *p, sc_err *err);
// Runs the staged step by graph when captured, else eagerly.
int gx_step_run(gx_exec *e, gx_plan *p, sc_err *err);
#ifdef __cplusplus
}
#endif

#endif
