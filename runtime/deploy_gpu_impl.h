// Internals of the GPU deploy path shared by its files (GPU builds only):
// the candidate table's entry type and the executor's state.
//
//   deploy_cand_gpu.c  the table of candidate implementations per layer
//   deploy_gpu.c       device tensors, op launches, the CUDA graph, forward, timing
//   deploy_tune_gpu.c  per-layer check against the CPU reference, timing, choice
//
// Adding an algorithm = its kernel files + one entry in the table in
// deploy_cand_gpu.c; nothing here or in the planner changes.
#ifndef SC_RUNTIME_DEPLOY_GPU_IMPL_H
#define SC_RUNTIME_DEPLOY_GPU_IMPL_H

#ifdef SC_HAVE_CUDA

#include "kernels/common_gpu.h"
#include "runtime/deploy_gpu.h"

// --- the candidate table -------------------------------------------------------

// What a candidate is built from: one DOP_CONV op of the plan.
typedef struct {
    const gpu_ctx *g;
    const deploy_plan *p;
    const deploy_op *op;       // its spconv_desc has this plan's borders and offsets
    const sparse_layer *sl;    // values, codes, codebook, row_scale
    const float *dense_w;      // (K, C, R, S) the layer densified, host memory
    int max_n;                 // largest batch it will run
} deploy_cand_args;

// One implementation of a conv/linear layer. Activations are the plan's
// (bordered NCHW; fp32 or __half as `prec` says); every call queues work on
// g->stream; forward must not allocate or synchronise (graph capture).
typedef struct {
    const char *name;          // JSON column stem and table header: "sparse_fp16", ...
    deploy_prec prec;          // the plan precision it serves
    int choosable;             // 0: timed for the table only (e.g. TF32 in the fp32 plan)
    int dense;                 // 1: its precision's all-dense baseline
    double tol;                // check tolerance: max |gpu - cpu| / max |cpu|
    int skips_zeros;           // 1: its work shrinks with the input's zeros (deploy_gpu_skip)
    int (*applies)(const deploy_cand_args *a);       // NULL: every layer
    void *(*create)(const deploy_cand_args *a, sc_err *err);
    int (*tune)(void *st, const gpu_ctx *g, int n, const void *in, void *out,
                sc_err *err);                       // NULL: nothing to tune; may sync
    int (*forward)(void *st, const gpu_ctx *g, int n, const void *in, void *out, sc_err *err);
    void (*describe)(const void *st, char *buf, size_t len);
    void (*free)(void *st);
} deploy_cand;

// The table and its length.
const deploy_cand *deploy_cand_table(int *n);

// --- the executor ----------------------------------------------------------------

typedef struct {
    void *st;                  // the candidate's state, NULL when it does not apply
    int ok;                    // passed the last check
    int wrote;                 // wrote into its input in the last check (never run again)
} deploy_inst;

struct deploy_gpu {
    const deploy_plan *p;
    deploy_prec prec;
    gpu_dtype dt;
    size_t esz;                // bytes per activation element
    int max_n, cur_n;          // allocation and the batch the plan is tuned for
    gpu_ctx g;
    int ncand;
    const deploy_cand *cands;
    void **t;                  // per tensor (max_n, c, h + 2b, w + 2b) device
    uint8_t *d_img;            // (max_n, 3, H, W) device
    float *d_logits;           // (max_n, classes) device fp32
    float *h_logits;           // (max_n, classes) pinned host
    void *scratch;             // (max_n * largest tensor) device, check and timing output
    float *staging;            // (max_n * largest tensor) device fp32, conversions
    float **scale, **shift;    // per op (DOP_AFFINE) device (c)
    deploy_inst *inst;         // (nops, ncand)
    int *chosen;               // (nops) candidate per conv op, -1 for other ops
    int *dense_pick;           // (nops) fastest dense baseline of the last tuning, -1: none yet
    cudaGraphExec_t graph;     // the forward at cur_n for `chosen`, or NULL
    int graph_tried;           // capture attempted since the last change
    cudaEvent_t ev[2];
    char device[256];
};

// Elements of the largest tensor per image.
size_t deploy_gpu_max_elems(const deploy_gpu *g);

// Queues op i for n images reading the plan's tensors and writing `out`
// (the op's own tensor when NULL) with candidate c (-1: the chosen one).
int deploy_gpu_op(deploy_gpu *g, int i, int c, int n, void *out, sc_err *err);

// Queues the whole forward for n images (normalisation to logits), no graph.
int deploy_gpu_enqueue(deploy_gpu *g, int n, sc_err *err);

// Drops the captured graph (after a change of choice or batch).
void deploy_gpu_graph_reset(deploy_gpu *g);

#endif  // SC_HAVE_CUDA
#endif
