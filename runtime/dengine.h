// The channels-last dense engine: the fastest dense network this toolkit
// can run on the present GPU, the yardstick of every speedup deploy prints.
// It runs a deploy plan (runtime/deploy_plan.h) with every weight dense:
// activations NHWC from the first layer to the last (no transposes), batch
// norm folded (as exported), each convolution one cuDNN graph-API call with
// its epilogue fused (bias + ReLU, or bias + residual add + ReLU where the
// plan's add reads the conv's output alone; a max pool follows as its own
// kernel), engine configurations chosen by timing on the layer's real
// input, the linear layers through cuBLASLt with a bias epilogue, and the
// whole forward pass replayed as one CUDA graph.
//
// Precisions: fp16 and bf16 storage with fp32 accumulation, and TF32
// (fp32 storage on TF32 tensor cores). The engine is built for one batch
// size. This header is plain C and exists in CPU builds too (the stand-in
// answers that there is no GPU).
#ifndef SC_RUNTIME_DENGINE_H
#define SC_RUNTIME_DENGINE_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/deploy_plan.h"
#include "runtime/error.h"

typedef enum { DE_FP16 = 0, DE_BF16 = 1, DE_TF32 = 2, DE_NPREC = 3 } dengine_prec;

typedef struct dengine dengine;

// "fp16", "bf16", "tf32".
const char *dengine_prec_name(dengine_prec p);

// Builds the engine for batches of n images: uploads the weights, runs the
// net once on `images` (n, 3, H, W) bytes, tuning each convolution's cuDNN
// plan on its real input (median of `repeat`), then captures the forward
// as a CUDA graph.
dengine *dengine_create(const deploy_plan *p, dengine_prec prec, int n, const uint8_t *images,
                        int repeat, sc_err *err);
void dengine_free(dengine *e);

// The mixed fp16 plan: the fp16 engine in which every conv that a sparse
// path runs faster runs sparse (checked against the engine's cuDNN output
// first, then timed on the real input): the direct sparse kernel with the
// NHWC <-> bordered NCHW conversions around it, or, for a layer loaded as
// BSR whose input channels are not padded, the block-sparse tensor-core
// kernel on the NHWC tensors (its fastest variant that passes the check).
// force: every conv whose sparse path passes its check runs sparse, the
// block-sparse path where it passes (tests).
dengine *dengine_create_mixed(const deploy_plan *p, int n, const uint8_t *images, int repeat,
                              int force, sc_err *err);

// Which sparse path runs op i (mixed plans): 0 none, 1 the direct sparse
// kernel, 2 the block-sparse kernel (dengine_op_describe names its block and
// variant), 3 the block-sparse tail: a chain of small-plane convs (a residual
// network's last stages) in one launch, one CTA per image, the activations
// in shared memory, kept when the whole forward measures faster with it.
int dengine_op_sparse(const dengine *e, int i);

// Mixed plans with a kept tail launch: the whole forward's milliseconds with
// the tail and with its convs on their one-layer paths (medians of the
// alternating rounds that kept it); NAN otherwise.
void dengine_tail_ms(const dengine *e, double *with_ms, double *without_ms);

// Mixed fp16 plans without a kept tail: why, in words ("" when no tail
// was looked for, or one is kept).
const char *dengine_tail_note(const dengine *e);

// Runs m <= n images; logits (m, classes) fp32 when not NULL.
int dengine_forward(dengine *e, int m, const uint8_t *images, float *logits, sc_err *err);

// The same forward queued op by op without the graph (to check the graph's replay).
int dengine_forward_eager(dengine *e, int m, const uint8_t *images, float *logits, sc_err *err);

// The tensor op i writes in the engine (-1: fused into a conv, or an alias),
// and tensor t of the last forward's first m images as fp32 (m, h, w, c).
int dengine_op_tensor(const dengine *e, int i);
int dengine_tensor(dengine *e, int t, int m, float *host, sc_err *err);

// Median milliseconds of `repeat` graph replays of the whole forward at the
// engine's batch (after a warm-up), on the images of the last forward.
int dengine_time(dengine *e, int repeat, double *ms, sc_err *err);

// Mixed plans: the whole forward as planned (*ms) and with every op on cuDNN
// (*dense_ms), each the median of alternating rounds of `repeat` replays, so
// that clock drift between two separately built engines is not in the ratio;
// with no op sparse, one measurement for both.
int dengine_time_vs_dense(dengine *e, int repeat, double *ms, double *dense_ms, sc_err *err);

// Mixed plans on a device with programmatic dependent launch: the whole
// forward with the block-sparse kernels launched in each gpu_ctx.pdl mode
// (ms[0] plain, ms[1] and ms[2] dependent launches, the next kernel let in
// after the main loop or from the start), each the median of alternating
// rounds of `repeat` replays; all NAN where the device has no such launch or
// no op is block-sparse. The engine keeps the mode it had.
#define DE_PDL_MODES 3
int dengine_time_pdl(dengine *e, int repeat, double ms[DE_PDL_MODES], sc_err *err);

// Tuned milliseconds of plan op i (NAN for ops the engine fused away or
// did not time: only convolutions are tuned) and a one-line description of
// what runs it. Each tuning run is queued behind a spin kernel
// (gpu_time_median_busy), so a call's host-side cost is not in it, as in
// the whole graph's replay.
double dengine_op_ms(const dengine *e, int i);

// Milliseconds of plan op i (any kind, on the path the engine chose) as a
// CUDA graph runs it: `copies` consecutive runs of the op captured in one
// graph, the median of `repeat` replays divided by copies, so no host
// launch cost is in it. *ms = NAN for an op fused into a conv or aliased.
// The repeated runs overwrite the op's output: run a forward before
// reading tensors again.
int dengine_op_graph_ms(dengine *e, int i, int copies, int repeat, double *ms, sc_err *err);
void dengine_op_describe(const dengine *e, int i, char *buf, size_t len);

// Conv op i's tuned cuDNN time and its fastest sparse path that passed the
// check (mixed plans; kept or not), NAN where not timed: what the mixed plan
// chose between, both measured alone on the op's real input; and, for an op
// that was faster sparse alone, the whole forward's time on cuDNN minus its
// time with the op sparse (the check that keeps it sparse when positive), else NAN.
void dengine_op_paths_ms(const dengine *e, int i, double *dense_ms, double *sparse_ms, double *graph_gain_ms);

// Mixed plans (built with force for every op's sparse path): op i's gain in
// the graph when it alone runs sparse, the whole forward's time with every
// conv on cuDNN minus with op i sparse (alternating rounds, medians); NAN
// when op i has no sparse path. The engine's own graph is unchanged.
int dengine_op_graph_gain_alone(dengine *e, int i, int repeat, double *gain_ms, sc_err *err);

// Mixed plans: median milliseconds of `repeat` replays of the whole forward
// with exactly the ops flagged in sparse (nops entries) on their sparse
// paths, the rest on cuDNN. The engine's own graph is unchanged.
int dengine_graph_ms_with(dengine *e, const unsigned char *sparse, int repeat, double *ms, sc_err *err);

#endif
