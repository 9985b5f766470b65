// The deploy plan: an exported model (runtime/sparse_model.h) turned into a
// list of ops over activation tensors that the CPU path (deploy_cpu.c) and
// the GPU path (deploy_gpu.h) both execute.
//
// Activations are bordered NCHW (kernels/deploy_ops.h): each tensor keeps a
// border of zeros around every plane, as wide as the largest padding of the
// convolutions that read it, so convolutions read their padding from memory.
// A conv's CSR offsets are recomputed (spconv_offsets) when its input's
// border differs from its own padding. Each conv/linear op carries its
// folded batch norm, the ReLU after it and the max pool after that when the
// export marked them fused; everything else is an op of its own: residual add
// (+ReLU), ReLU, batch norm left unfolded, max/avg pool, global average pool,
// and a copy that strips a border before a linear layer (flatten).
#ifndef SC_RUNTIME_DEPLOY_PLAN_H
#define SC_RUNTIME_DEPLOY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/deploy_ops.h"
#include "kernels/spconv.h"
#include "runtime/error.h"
#include "runtime/sparse_model.h"

typedef enum {
    DOP_CONV,     // conv or linear (+ folded BN, ReLU, max pool): spconv_desc
    DOP_ADD,      // residual add, optional ReLU
    DOP_RELU,     // standalone ReLU
    DOP_AFFINE,   // batch norm not folded into a conv (scale, shift), optional ReLU
    DOP_MAXPOOL,  // standalone max pool
    DOP_AVGPOOL,  // average pool
    DOP_GAP,      // global average pool
    DOP_COPY,     // copy into a tensor with another border (flatten before a linear)
    DOP_CONCAT,   // channel concatenation of ins[0..nin) in order (DenseNet joins)
} deploy_op_kind;

// One activation tensor per image: (c, h + 2 border, w + 2 border).
typedef struct {
    int c, h, w;
    int border;
    int layer;            // net layer whose output it is; -1: the normalised input,
                          // -2: a copy made by the plan
} deploy_tensor;

typedef struct {
    deploy_op_kind kind;
    char name[48];        // the layer's name ("layer2.0.conv1", "pool1", ...)
    int in, in2, out;     // tensor indices (in2: DOP_ADD only, else -1)
    int nin;              // DOP_CONCAT: inputs joined, ins[0] == in
    int ins[LAYER_MAX_IN];
    int relu;             // DOP_ADD, DOP_AFFINE: ReLU after
    int k, stride, pad;   // pools
    int sl;               // DOP_CONV: index into m->layers
    int last;             // net layer whose output `out` holds
    spconv_desc desc;     // DOP_CONV: borders and offsets of this plan
    int32_t *offsets;     // DOP_CONV: (K, nnz_row) owned when recomputed, else NULL
    float *scale, *shift; // DOP_AFFINE: (c) owned
} deploy_op;

typedef struct {
    const sparse_model *m;  // not owned
    int ntensors;
    deploy_tensor *tensors;
    int nops;
    deploy_op *ops;
    int input;              // tensor of the normalised images (3, in_h, in_w)
    int output;             // tensor of the logits (classes, 1, 1), border 0
} deploy_plan;

// Builds the plan for m (kept by pointer; it must outlive the plan). Errors
// name the layer where the export and its graph disagree.
deploy_plan *deploy_plan_build(const sparse_model *m, sc_err *err);

// Frees a plan (NULL is fine).
void deploy_plan_free(deploy_plan *p);

// Elements per image of tensor t, borders included.
size_t deploy_tensor_elems(const deploy_plan *p, int t);

// Geometry of tensor t for n images.
dops_geom deploy_tensor_geom(const deploy_plan *p, int t, int n);

// The sparse layer of a DOP_CONV op.
const sparse_layer *deploy_op_layer(const deploy_plan *p, const deploy_op *op);

// Fraction of zero weights of a DOP_CONV op's layer (padding zeros count as zeros).
double deploy_op_sparsity(const deploy_plan *p, const deploy_op *op);

// Multiply-accumulates of a DOP_CONV op per image (output pixels before any
// fused pooling), dense or with the stored weights only (a kept block counts
// whole, padding entries do not): the work a sparse kernel must do.
double deploy_op_macs(const deploy_plan *p, const deploy_op *op, int sparse);

// "KxCxRxS@HxW" for a conv, "KxC" for a linear, into buf.
void deploy_op_shape(const deploy_plan *p, const deploy_op *op, char *buf, size_t len);

// Dense (K, C, R, S) weights of a DOP_CONV op's layer (caller frees), NULL
// when out of memory.
float *deploy_op_dense_weights(const deploy_plan *p, const deploy_op *op);

// Fraction of zero weights over the model's prunable conv/linear layers.
double deploy_plan_sparsity(const deploy_plan *p);

// Fraction of the conv/linear layers' multiply-accumulates per image that
// the zero weights remove (every layer, pruned or not, by its output plane):
// the compute a sparse kernel can skip, which time follows.
double deploy_plan_mac_sparsity(const deploy_plan *p);

// --- builders the layer kinds' deploy hooks call (runtime/ops.h) ------------

struct plan_builder;

// Adds the op of conv/linear layer i with what the export fused into it.
int deploy_plan_conv(struct plan_builder *b, int i, sc_err *err);

// Adds an elementwise op of `kind` (DOP_ADD, DOP_RELU, DOP_AFFINE) for layer
// i, fusing a ReLU that alone reads an add or a BN.
int deploy_plan_elementwise(struct plan_builder *b, int i, deploy_op_kind kind, sc_err *err);

// Adds a pooling op of `kind` (DOP_MAXPOOL, DOP_AVGPOOL, DOP_GAP) for layer i.
int deploy_plan_pool(struct plan_builder *b, int i, deploy_op_kind kind, sc_err *err);

// Adds the DOP_CONCAT op of concat layer i.
int deploy_plan_concat(struct plan_builder *b, int i, sc_err *err);

// The tensors op reads into ins (LAYER_MAX_IN of room); their number.
int deploy_op_inputs(const deploy_op *op, int *ins);

// --- the CPU path (deploy_cpu.c): also the reference for the GPU path --------

typedef struct deploy_cpu deploy_cpu;

// Allocates every tensor of the plan for up to max_n images (borders zero).
deploy_cpu *deploy_cpu_create(const deploy_plan *p, int max_n, sc_err *err);
void deploy_cpu_free(deploy_cpu *c);

// Runs the plan on n images (n, 3, in_h, in_w) bytes; logits (n, classes)
// when not NULL.
int deploy_cpu_forward(deploy_cpu *c, int n, const uint8_t *images, float *logits,
                       sc_err *err);

// Runs op i alone on the first n images of its input tensor(s).
void deploy_cpu_op(deploy_cpu *c, int i, int n);

// Adds to zeros[i] and elems[i] (nops) the zeros and the elements of the
// input interior of every DOP_CONV op i over the first n images of the last
// forward (its activation sparsity is zeros / elems).
void deploy_cpu_act_zeros(const deploy_cpu *c, int n, double *zeros, double *elems);

// Tensor t's buffer: (max_n, c, h + 2 border, w + 2 border).
float *deploy_cpu_tensor(const deploy_cpu *c, int t);

// Top-1 hits of logits (n, classes) against labels.
long deploy_count_correct(int n, int classes, const float *logits, const int *labels);

#endif
