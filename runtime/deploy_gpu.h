// The deploy plan on the GPU (Algorithm 2 of Pietroń and Żurek, 2020): every conv/linear op
// has a set of candidate implementations taken from one table
// (runtime/deploy_cand_gpu.c: the direct sparse kernel, cuDNN dense in each
// precision, cuSPARSE, ...). Each candidate is first checked against the CPU
// reference on a few images, then timed on the layer's real input at the
// deploy batch size, and the fastest one runs the layer. The whole forward
// pass (input normalisation included) is captured in one CUDA graph.
//
// Activations stay bordered NCHW (runtime/deploy_plan.h) in the plan's
// precision: fp32, or fp16 (every candidate then reads and writes __half).
// This header is plain C and exists in CPU builds too (deploy_gpu_none.c
// answers that there is no GPU).
#ifndef SC_RUNTIME_DEPLOY_GPU_H
#define SC_RUNTIME_DEPLOY_GPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/deploy_plan.h"
#include "runtime/error.h"

typedef enum { DP_FP32 = 0, DP_FP16 = 1 } deploy_prec;

#define DEPLOY_MAX_CANDS 12

// --- the candidate table (names only; the table itself is GPU code) ---------

// Number of candidate implementations in this build (0 without a GPU).
int deploy_cand_count(void);
// Candidate i's name, also its JSON column stem: "sparse_fp32", "cudnn_fp16", ...
const char *deploy_cand_name(int i);
// The plan precision candidate i serves.
deploy_prec deploy_cand_prec(int i);
// 1 when candidate i may be chosen to run a layer (0: timed for the table only).
int deploy_cand_choosable(int i);
// 1 when candidate i is the all-dense baseline of its precision.
int deploy_cand_dense(int i);
// Candidate i's check tolerance (relative to the largest output).
double deploy_cand_tol(int i);
// 1 when candidate i skips the zeros of its input (its work shrinks with the
// input's activation sparsity): the activation-sparse convolution.
int deploy_cand_skips_zeros(int i);
// Parses a comma-separated list of candidate names or families (the part of
// a name before its first '_': "actsparse" is actsparse_fp32 and
// actsparse_fp16) into *mask (bit c: leave candidate c out). A name that is
// no candidate of this build, or one that would leave out a dense baseline,
// is an error. In a build without candidates every list gives an empty mask.
int deploy_cand_parse_skip(const char *list, unsigned *mask, sc_err *err);

// Which candidates deploy_gpu_create leaves out.
typedef struct {
    unsigned cands;              // bit c: candidate c is left out on every layer
    const double *act_sparsity;  // (nops) measured fraction of zeros in each op's input, or NULL
    double act_min;              // candidates that skip input zeros are left out of an op
                                 // whose act_sparsity is below this (0: never)
} deploy_gpu_skip;

// 1 when `skip` leaves candidate c out of op i (skip may be NULL: never).
int deploy_gpu_skipped(const deploy_gpu_skip *skip, int i, int c);

// --- per-layer results ---------------------------------------------------------

// What checking and timing found for every op at one batch size. Arrays
// are (nops, DEPLOY_MAX_CANDS) indexed by candidate; NAN where a candidate
// does not apply, failed its check or was not timed.
typedef struct {
    int n;                                 // batch size timed
    int nops;
    double (*ms)[DEPLOY_MAX_CANDS];        // median milliseconds
    double (*err)[DEPLOY_MAX_CANDS];       // max |gpu - cpu| / max |cpu| on the check images
    signed char (*passed)[DEPLOY_MAX_CANDS]; // 1 passed its check, 0 failed (timed when it
                                           // did not write into its input, never chosen), -1 n/a
    double *op_ms;                         // (nops) the chosen implementation's time (all ops)
    int *chosen;                           // (nops) candidate index, -1 for non-conv ops
    int dense_failed;                      // ops whose dense baseline failed its check
                                           // (still timed for the all-dense network)
} deploy_timing;

// Allocates a timing for nops ops (NANs, chosen -1); 0 or -1.
int deploy_timing_init(deploy_timing *t, int nops, int n, sc_err *err);
void deploy_timing_free(deploy_timing *t);

// --- the GPU executor ------------------------------------------------------------

typedef struct deploy_gpu deploy_gpu;

// True when a GPU works in this build; else 0 and the reason in why.
int deploy_gpu_available(sc_err *why);

// Creates the GPU plan in precision prec for batches of up to max_n images:
// device tensors, every applicable candidate of every conv/linear op that
// `skip` (NULL: none) does not leave out. A candidate other than the dense
// baseline that cannot be made for a layer is left out with a line to
// `warn` (when not NULL).
deploy_gpu *deploy_gpu_create(const deploy_plan *p, deploy_prec prec, int max_n,
                              const deploy_gpu_skip *skip, FILE *warn, sc_err *err);
void deploy_gpu_free(deploy_gpu *g);

// The GPU's name ("NVIDIA H200").
const char *deploy_gpu_device(const deploy_gpu *g);

// Algorithm 2 at batch n: runs the plan on n real images (n, 3, H, W) bytes
// to fill every tensor, lets each candidate tune itself for n, checks every
// candidate of every op (and every small op) against the CPU reference on
// the first nref images (ref has run them; poisoned outputs, untouched
// borders), drops the candidates off by more than their tolerance (a line
// to `warn` each, when not NULL), times the rest on the op's real input
// (median of `repeat`) and makes the fastest choosable one run the op.
// A candidate that fails its check (wrong values) is never chosen but still
// timed for the table, and a dense baseline that fails is still used by the
// all-dense network (counted in t->dense_failed); one that writes into its
// input is not run again. Fills t->err, t->passed, t->ms, t->op_ms,
// t->chosen. -1 when an op has no candidate left or a small op is wrong.
int deploy_gpu_tune(deploy_gpu *g, int n, const uint8_t *images, deploy_cpu *ref, int nref,
                    int repeat, deploy_timing *t, FILE *warn, sc_err *err);

// Makes every conv/linear op run its precision's dense baseline (cuDNN):
// the all-dense network of the same plan.
int deploy_gpu_choose_dense(deploy_gpu *g, sc_err *err);

// Makes op i run candidate `chosen[i]` for every conv/linear op (a tuning's choices).
int deploy_gpu_choose(deploy_gpu *g, const int *chosen, sc_err *err);

// Runs the plan (its CUDA graph) on n images; logits (n, classes) fp32. The
// plan always runs the batch it was tuned for (max_n before any tuning);
// smaller batches are padded with the previous images.
int deploy_gpu_forward(deploy_gpu *g, int n, const uint8_t *images, float *logits, sc_err *err);

// Median milliseconds of `repeat` replays of the forward graph for n images
// (after warm-up; n must be the tuned batch), on the images of the last
// forward or tuning. *graph gets 1 when the pass ran as a CUDA graph (0:
// plain launches).
int deploy_gpu_time(deploy_gpu *g, int n, int repeat, double *ms, int *graph, sc_err *err);

// Describes the implementation chosen for op i (kernel configuration) into buf.
void deploy_gpu_describe(const deploy_gpu *g, int i, char *buf, size_t len);

#endif
