// The executor: runs a net on one device (CPU or GPU) for training and
// evaluation. It owns the device copies of parameters, masks, BN statistics,
// gradients and the optimizer's momentum, and accumulates loss/accuracy
// statistics on the device until they are taken.
//
// Layouts: the CPU backend keeps activations NCHW fp32. The GPU backend is
// free to use NHWC and fp16 internally; everything crossing this interface is
// in the net's canonical layout (net.h) and fp32.
#ifndef SC_EXEC_H
#define SC_EXEC_H

#include <stdint.h>

#include "error.h"
#include "net.h"

typedef enum { DEV_CPU = 0, DEV_GPU = 1 } sc_device;
typedef enum { PREC_FP32 = 0, PREC_FP16 = 1 } sc_precision;  // fp16: mixed, fp32 master weights

// One batch as the trainer hands it over, all on the host. The executor
// applies crop/flip and normalisation itself (kernels/augment.h).
typedef struct {
    int n;                  // images in this batch (<= max_batch)
    const uint8_t *images;  // (n, 3, 32, 32) CIFAR planar bytes: R plane, G plane, B plane
    const int *labels;      // (n) class ids
    const int8_t *dx, *dy;  // (n) crop offsets in [-4, 4], or NULL for no crop
    const uint8_t *flip;    // (n) 1 = mirror horizontally, or NULL
    const float *soft;      // (n, classes) target distribution, or NULL (hard labels)
} exec_batch;

typedef struct {
    float lr, momentum, weight_decay;  // SGD, PyTorch semantics; decay on all parameters
    int nesterov;
    float label_smoothing;
} exec_hparams;

typedef struct {
    double loss_sum;   // sum over images of the (smoothed) cross-entropy
    long correct;      // top-1 hits
    long count;        // images seen
    long skipped;      // fp16 steps skipped for overflow (loss scaling)
} exec_stats;

typedef struct exec exec;

// Creates an executor for `nt` on `dev` for batches of up to max_batch images
// and uploads the net's parameters, masks and buffers. The executor keeps a
// pointer to nt but changes it only in exec_read_net().
exec *exec_create(net *nt, sc_device dev, sc_precision prec, int max_batch, sc_err *err);
void exec_free(exec *e);

// One SGD step: forward (training-mode BN), loss, backward, masked update
// (weights, gradients and momentum multiplied by the mask). Statistics are
// accumulated for exec_stats_take(). With b->soft the loss is the
// cross-entropy against those targets, -sum_j q_j log p_j (gradient
// (p - q) / n; h->label_smoothing is ignored), and top-1 hits still count
// against b->labels; without it, the label-smoothed cross-entropy.
int exec_train_step(exec *e, const exec_batch *b, const exec_hparams *h, sc_err *err);

// Forward in inference mode (running BN stats); accumulates statistics with
// the given label smoothing (b->soft is ignored). Crop and flip (b->dx, dy,
// flip) are applied as in training. When logits is not NULL it receives
// (n, classes).
int exec_eval_batch(exec *e, const exec_batch *b, float label_smoothing, float *logits,
                    sc_err *err);

// Returns the accumulated statistics and resets them.
int exec_stats_take(exec *e, exec_stats *out, sc_err *err);

// Copies parameters, masks and BN buffers from the device into the net.
int exec_read_net(exec *e, sc_err *err);
// Uploads the net's parameters, masks and BN buffers (after the host changed them).
int exec_write_net(exec *e, sc_err *err);

// Momentum buffer of the optimizer, (nparam) floats, to and from the host.
int exec_read_momentum(exec *e, float *mom, sc_err *err);
int exec_write_momentum(exec *e, const float *mom, sc_err *err);

// Gradient of the last training step (unscaled, before masking), (nparam) floats.
int exec_read_grad(exec *e, float *grad, sc_err *err);

// Puts the fp16 loss scaler back to its initial scale and counters (no-op for
// fp32 and on the CPU), so that what trains next does not depend on the steps
// the executor ran before (other solutions of a population, other ranks).
int exec_reset_scaler(exec *e, sc_err *err);

// Resolves the --device (cpu|gpu|auto) and --precision (auto|fp16|fp32)
// options of a tool: auto takes the GPU when one works, else the CPU (and
// says so on stderr as "tool: ...; using the CPU" unless quiet); auto
// precision is fp16 on the GPU and fp32 on the CPU. Errors for --device gpu
// without a GPU and for fp16 on the CPU.
int exec_pick_device(const char *tool, const char *device, const char *precision, int quiet,
                     sc_device *dev, sc_precision *prec, sc_err *err);

// Which device really runs ("cpu" or the GPU's name).
const char *exec_device_name(const exec *e);

// True when a usable GPU backend is compiled in and a device is present;
// otherwise 0 and, when why is not NULL, the reason.
int exec_gpu_available(sc_err *why);

// Makes GPU `ordinal` (modulo the number of GPUs) the device of executors the
// calling thread creates from now on (one GPU per rank of a multi-process
// run); a no-op returning 0 when no GPU is present or compiled in.
int exec_gpu_select(int ordinal, sc_err *err);

#endif
