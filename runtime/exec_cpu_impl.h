// Private state of the CPU executor backend (runtime/exec_cpu.c), shared
// with the CPU hooks of the layer kinds (struct op_cpu, runtime/op_*.c).
//
// The CPU executor runs a net with the plain-C reference kernels
// (kernels/*_cpu.c), NCHW fp32. It keeps its own copies of the parameters,
// masks and BN buffers (like a device would), one activation buffer per
// layer (a layer whose row is `inplace`, the ReLU, works in its source's
// buffer when it is that source's only reader), and a small pool of gradient
// buffers reused along the backward pass.
//
// Everything is deterministic: the kernels write each element from one thread
// in a fixed order, so the same inputs give bitwise-identical results.
#ifndef SC_EXEC_CPU_IMPL_H
#define SC_EXEC_CPU_IMPL_H

#include <stdint.h>
#include <stdlib.h>

#include "exec_backend.h"
#include "ops.h"

typedef struct cpu_exec {
    net *nt;
    int max_batch;
    size_t max_size;        // largest c*h*w over the layers
    float *param, *mask;    // (nparam) own copies
    float *buf;             // (nbuf) BN running statistics
    float *grad;            // (nparam) last step's gradient, before masking and decay
    float *mom;             // (nparam) optimizer momentum
    float *input;           // (max_batch, in_c, in_h, in_w) normalised input
    float **act;            // per layer (max_batch, c, h, w); may alias the source's
    uint8_t *owns;          // per layer: act[i] was allocated for it
    float **save_mean;      // per BN layer (c) batch mean, NULL for other layers
    float **save_invstd;    // per BN layer (c) 1/sqrt(var + eps)
    int *gslot;             // per layer: gradient buffer of its output, -1 = none flows
    uint8_t (*gfirst)[LAYER_MAX_IN];  // per layer and input: its backward writes that slot first
    int nslots;
    float **slots;          // (nslots) gradient buffers, each (max_batch * max_size)
    float *scratch;         // (max_batch * max_size) for gradients to be accumulated
    float *work;            // shared scratch, the largest workspace a layer asks for
    exec_stats stats;
} cpu_exec;

// The CPU executor's hooks in a layer kind's registry row.
struct op_cpu {
    // Fails unless the CPU kernels can run layer L for batches up to max_batch.
    int (*check)(const layer *L, int max_batch, sc_err *err);
    // 1: the backward reads only the output, so the layer may overwrite its
    // input when it is that input's sole reader (and the input is not in place).
    int inplace;
    // Floats of shared scratch (e->work) the layer needs; NULL: none.
    size_t (*workspace)(const layer *L, int max_batch);
    // Allocates per-layer state (e.g. saved batch statistics); NULL: none.
    int (*setup)(cpu_exec *e, int i, sc_err *err);
    // Layer i forward on n images (train: training-mode statistics).
    void (*forward)(cpu_exec *e, int i, int n, int train);
    // Layer i backward on n images with output gradient dy: parameter
    // gradients overwritten, input gradients written or accumulated
    // (cpu_grad_target / cpu_grad_done).
    void (*backward)(cpu_exec *e, int i, int n, const float *dy);
};

// Floats per image of layer L's output.
static inline size_t cpu_layer_size(const layer *L) { return (size_t)L->c * L->h * L->w; }

// Output of layer `src` (-1 = the normalised input).
static inline float *cpu_src(cpu_exec *e, int src) { return src < 0 ? e->input : e->act[src]; }

// Trainable tensor t's values, or NULL when t < 0.
static inline float *cpu_param(cpu_exec *e, int t) {
    return t < 0 ? NULL : e->param + e->nt->tensors[t].offset;
}

// Gradient of trainable tensor t, or NULL when t < 0.
static inline float *cpu_grad(cpu_exec *e, int t) {
    return t < 0 ? NULL : e->grad + e->nt->tensors[t].offset;
}

// BN buffer tensor t (running mean or var).
static inline float *cpu_buf(cpu_exec *e, int t) { return e->buf + e->nt->tensors[t].offset; }

// Allocates n floats, zeroed; NULL on failure.
static inline float *cpu_alloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// Where layer j's backward writes the gradient of its input k: straight into
// that input's buffer when it is the first writer, else into the scratch
// buffer (to be added by cpu_grad_done). NULL when the input is the network's.
float *cpu_grad_target(cpu_exec *e, int j, int k);

// Adds the scratch buffer into input k's gradient when it was not the first writer.
void cpu_grad_done(cpu_exec *e, int j, int k, size_t count);

#endif
