// Knowledge distillation (Hinton, Vinyals and Dean, "Distilling the Knowledge
// in a Neural Network", 2015) from a frozen teacher, shared by `prune` and
// `quantize`: every training batch, with the very crop and flip the student
// gets, first runs through the teacher (inference-mode BN), and the student
// learns from the targets
//     q = alpha * onehot(label) + (1 - alpha) * softmax(z_teacher)
// (temperature 1) by the cross-entropy -sum q log p_student (the executor's
// soft-target loss, runtime/exec.h; label smoothing does not apply to them).
#ifndef SC_TRAIN_DISTILL_H
#define SC_TRAIN_DISTILL_H

#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/net.h"

// A teacher: its net and executor (owned, or borrowed when made by
// distill_borrow) and the per-batch buffers.
typedef struct {
    net *nt;         // owned copy (distill_open) or NULL (borrowed executor)
    exec *e;         // the teacher's executor
    int own_exec;    // 1: distill_close frees e
    float alpha;     // weight of the one-hot label in the targets (0..1)
    int batch, classes;
    float *tlogits;  // (batch, classes) the teacher's logits of the last batch
    float *soft;     // (batch, classes) the student's targets of the last batch
    double ent_sum;  // sum of the targets' entropies (nats) since the last distill_take_entropy
} distill;

// q = alpha * onehot(labels[i]) + (1 - alpha) * softmax(logits[i]) for n rows
// of k classes into soft; returns the sum of the rows' entropies (nats).
double distill_targets(const float *logits, const int *labels, int n, int k, float alpha, float *soft);

// A teacher holding a copy of nt (graph, parameters, masks, BN statistics,
// input normalisation) on its own executor for batches of up to `batch`
// images. 0 or -1.
int distill_open(distill *d, const net *nt, sc_device dev, sc_precision prec, int batch, float alpha,
                 sc_err *err);

// An executor for batches of up to `batch` images on a copy of nt (the
// teacher without the targets' buffers, e.g. for quantize's fine-tuning,
// which borrows it); the copy goes to *copy (the caller frees both). NULL
// with err filled on failure (nothing left to free).
exec *distill_teacher_create(const net *nt, sc_device dev, sc_precision prec, int batch, net **copy, sc_err *err);

// A teacher on an executor the caller keeps (e runs a net of `classes`
// classes, batches of up to `batch`). 0 or -1.
int distill_borrow(distill *d, exec *e, int batch, int classes, float alpha, sc_err *err);

// Runs batch b through the teacher and sets *out = b with the targets as its
// soft labels (valid until the next call). 0 or -1.
int distill_batch(distill *d, const exec_batch *b, exec_batch *out, sc_err *err);

// Frees what distill_open/borrow made (the borrowed executor stays; a zeroed struct is fine).
void distill_close(distill *d);

// A copy of nt: the same graph from its description, then its values. NULL
// with err filled on failure.
net *distill_net_copy(const net *nt, sc_err *err);

#endif
