// Sensitivities for Hessian-weighted k-means (Choi, El-Khamy, Lee 2017,
// "Towards the limit of network quantization"; quantize --kmeans-weight
// fisher): the diagonal of the Hessian of the training loss, approximated
// by the diagonal of the empirical Fisher information, estimated as the
// mean over N training batches of the squared gradient of the batch's mean
// cross-entropy with the true labels (no label smoothing):
//
//     h_i = (1 / N) sum_b (dL_b / dw_i)^2
//
// at the model's unquantized weights. The gradients come from the
// executor's forward and backward pass with nothing updated
// (finetune_grad_step, the path fine-tuning takes), so BN runs in training
// mode (batch statistics, as the net trained). The batches are drawn from
// the training split only (shuffled, with crop and flip when augment is
// set, else in file order; a stream of their own), never the validation or
// test split. Pruned weights (mask 0) get h = 0. Afterwards the executor
// holds the net's parameters and BN statistics exactly as before
// (exec_write_net: the training-mode passes moved the device's running
// statistics) and its fp16 loss scaler in its initial state
// (exec_reset_scaler). Cost: N forward and backward passes and N gradient
// reads.
#ifndef SC_QUANTIZE_FISHER_H
#define SC_QUANTIZE_FISHER_H

#include <stdint.h>

#include "datasets/cifar.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/net.h"

typedef struct {
    int batches;    // N >= 1 training batches averaged
    int batch;      // images per batch (at most the executor's max_batch)
    int augment;    // 1: shuffled batches with crop and flip; 0: file order, neither
    uint64_t seed;  // the loader's stream (mixed with a constant of its own)
    int quiet;      // no progress display
} fisher_cfg;

typedef struct {
    int batches;     // batches averaged
    int skipped;     // batches left out for a non-finite gradient at a kept weight
    double seconds;  // wall time of the pass
} fisher_result;

// Fills h ((nparam) floats, indexed like nt->param) with the empirical
// Fisher diagonal above for the net nt run by executor e (which must hold
// nt as it is), from c->batches batches of the training split `train`
// (more than one epoch wraps into the next). A batch whose gradient is not
// finite at a kept weight (fp16 overflow) is left out; fails when all are,
// or when the split gives no batch of c->batch images.
int fisher_diag(exec *e, const net *nt, const data_split *train, const fisher_cfg *c, float *h,
                fisher_result *res, sc_err *err);

#endif
