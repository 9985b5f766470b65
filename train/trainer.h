// The training loop pieces shared by `train` and `prune`: learning-rate
// schedules, one epoch of masked SGD over a loader, and evaluation of a split.
#ifndef SC_TRAINER_H
#define SC_TRAINER_H

#include <stdint.h>

#include "datasets/cifar.h"
#include "datasets/loader.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/progress.h"

typedef enum { SCHED_ONECYCLE = 0, SCHED_COSINE = 1, SCHED_CONSTANT = 2 } sched_kind;

typedef struct {
    int epochs;           // epochs to train
    int batch;            // images per step
    float lr;             // peak learning rate
    float warmup;         // fraction of all steps spent warming up (linear from lr/25... see schedule)
    sched_kind sched;     // learning-rate schedule
    float momentum, weight_decay, smoothing;
    int nesterov;
    int anneal_linear;    // one-cycle: 1 = linear decay after warm-up, 0 = cosine (PyTorch's default)
    int cycle_momentum;   // one-cycle: momentum from momentum+0.05 down to momentum-0.05
                          // during warm-up and back while the rate decays (0 = constant)
} train_hparams;

// Learning rate at `step` of `total` steps. One-cycle (PyTorch's OneCycleLR):
// warm-up from lr/25 to lr over warmup*total steps, then down to lr/25e4,
// both phases cosine, or linear with anneal_linear; cosine: linear warm-up
// from 0, then cosine to 0; constant: lr.
float train_lr_at(const train_hparams *h, long step, long total);

// Momentum at `step` of `total` steps (cycled inversely to the one-cycle rate
// when cycle_momentum is set, else constant).
float train_momentum_at(const train_hparams *h, long step, long total);

// Trains one epoch: for every batch of the loader (already started on the
// epoch), sets the learning rate from the schedule at *step and steps the
// executor; *step advances. Statistics of the epoch come back in *out.
// The progress display (may be NULL) is updated with loss and accuracy.
int train_epoch(exec *e, loader *ld, const train_hparams *h, long *step, long total_steps,
                progress *pg, exec_stats *out, sc_err *err);

// Evaluates a split in inference mode: top-1 accuracy in percent and mean loss.
int train_evaluate(exec *e, const data_split *s, int batch, float smoothing, double *acc,
                   double *loss, sc_err *err);

#endif
