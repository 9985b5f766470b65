// Fine-tuning of k-means codebooks (Deep Compression, "shared weights"):
// every weight keeps its centroid index; per step the net runs forward and
// backward with the decoded weights, the gradients of the kept weights are
// summed per centroid (each times its row's scale with row scales, which
// stay fixed), and the centroids take an SGD step with momentum
// (cosine-decayed learning rate) on the host. With lr_params > 0 every
// trainable tensor that is not quantized (batch-norm gamma and beta, biases,
// weights left in fp32 such as the first conv or a --skip-last linear) is
// trained too, by the executor's masked SGD (kernels/sgd.h: momentum,
// Nesterov, weight decay) on the host copy with the same cosine schedule;
// with lr_params 0 they stay as they are. Quantized weights are the decoded
// codebooks after every step (bit for bit), pruned weights stay zero. The
// executor runs each step with learning rate, momentum and weight decay 0
// and the host's values (parameters and BN statistics) are uploaded again
// after it, so BN running statistics only move by recalibration. After
// every epoch the validation split is evaluated; the codebooks, the other
// parameters and the BN statistics of the best epoch (0: before
// fine-tuning) are kept. The test split is never looked at.
//
// Knowledge distillation (c->teacher set): the teacher is a second executor
// holding the model before quantization (frozen, inference-mode BN). Every
// fine-tuning batch, with the very crop and flip the student gets (the
// executor applies them in evaluation too), first runs through the teacher;
// the student then learns from the targets
//     q = alpha * onehot(label) + (1 - alpha) * softmax(z_teacher)
// (temperature 1) by the cross-entropy -sum q log p_student (label smoothing
// is not applied to them). The pruned, unquantized model fits the training
// set almost perfectly, so hard labels say little about what quantization
// changed; the teacher's outputs say exactly that. Without a teacher the
// loss is the label-smoothed cross-entropy against the labels.
//
// Batch-norm recalibration (optional, bn_batches > 0): the running means
// and variances are re-estimated with the quantized weights from that many
// training batches (forward passes in training mode; weights, gamma and
// beta do not move), after quantization and before each validation of the
// fine-tuning.
#ifndef SC_QUANTIZE_FINETUNE_H
#define SC_QUANTIZE_FINETUNE_H

#include <stdint.h>

#include "datasets/cifar.h"
#include "datasets/loader.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/net.h"
#include "runtime/quant_io.h"

typedef struct {
    int epochs;          // passes over the training split
    int batch;           // images per step
    float lr;            // peak learning rate of the centroids (cosine to 0)
    float momentum;      // SGD momentum of the centroids and of the other parameters
    float lr_params;     // peak learning rate of the unquantized parameters (0: frozen)
    float weight_decay;  // their weight decay (centroids: none)
    int nesterov;        // their Nesterov momentum (centroids: plain momentum)
    float smoothing;     // label smoothing of the loss
    int augment;         // random crop and flip
    uint64_t seed;       // the loader's shuffling and augmentation stream
    int bn_batches;      // batches re-estimating BN statistics (0: keep the model's)
    int quiet;           // no progress display
    exec *teacher;       // distillation: the unquantized model's executor (NULL: hard labels)
    float alpha;         // distillation: weight of the one-hot label in the targets (0..1)
} finetune_cfg;

typedef struct {
    int epoch;           // 1-based
    double loss;         // mean training loss
    double train_accuracy, val_accuracy;  // percent
    double kl;           // distillation: mean KL(targets || student) over the epoch, else NaN
    double teacher_accuracy;  // distillation: the teacher's top-1 on the same batches, else NaN
} finetune_epoch;

typedef struct {
    int nepochs;
    finetune_epoch *hist;  // (nepochs)
    int best_epoch;        // epoch whose codebooks and parameters were kept (0: the start)
    double best_val;       // its validation accuracy
    long images;           // training images seen
    int trained_tensors;   // unquantized trainable tensors trained (0 when lr_params is 0)
    double seconds;
} finetune_result;

// Fine-tunes the codebooks of q (k-means), and with c->lr_params > 0 the
// unquantized parameters, of the net nt run by executor e on ds's training
// split; start_val is the validation accuracy of the net as it is. With
// c->teacher the loss is distillation from it (see above); the teacher must
// take batches of c->batch images and have nt's classes. On return q, nt and
// the executor hold the best epoch by validation accuracy.
int finetune_run(exec *e, net *nt, quant_model *q, const dataset *ds, const finetune_cfg *c,
                 double start_val, finetune_result *res, sc_err *err);

// Re-estimates the BN running statistics of nt (run by e) with its current
// weights from c->bn_batches training batches (loader epoch `round`); the
// parameters stay bit for bit as they are. A net without BN is left alone.
int finetune_bn_recalibrate(exec *e, net *nt, const dataset *ds, const finetune_cfg *c,
                            int round, sc_err *err);

// One forward and backward pass of batch b on e that moves no parameter
// (the executor's SGD with learning rate, momentum and weight decay 0; the
// step every fine-tuning, BN-recalibration and Fisher batch takes). BN runs
// in training mode, so the device's BN running statistics do move. The loss
// is the cross-entropy with label smoothing `smoothing` (against b->soft
// when set). When grad is not NULL it receives the gradient of the batch's
// mean loss, (nparam) floats, before masking (exec_read_grad).
int finetune_grad_step(exec *e, const exec_batch *b, float smoothing, float *grad, sc_err *err);

// The next batch of loader ld into b, going on with epoch *epoch + 1 (and
// counting it in *epoch) when one ends; 0 when the loader has no batch at
// all (a training split smaller than one batch).
int finetune_next_batch(loader *ld, int *epoch, exec_batch *b);

// Frees the result's history.
void finetune_result_free(finetune_result *r);

#endif
