// Executor front end: picks a backend and forwards every call to it.
#include "exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_backend.h"

struct exec {
    const exec_backend *be;
    void *st;
};

// Creates an executor on the requested device.
exec *exec_create(net *nt, sc_device dev, sc_precision prec, int max_batch, sc_err *err) {
    const exec_backend *be = dev == DEV_GPU ? exec_gpu_backend(err) : exec_cpu_backend();
    if (!be) {
        if (dev == DEV_GPU && err && !err->msg[0]) sc_fail(err, "no usable GPU");
        return NULL;
    }
    exec *e = calloc(1, sizeof *e);
    if (!e) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    e->be = be;
    e->st = be->create(nt, prec, max_batch, err);
    if (!e->st) {
        free(e);
        return NULL;
    }
    return e;
}

// Frees an executor (NULL is fine).
void exec_free(exec *e) {
    if (!e) return;
    e->be->destroy(e->st);
    free(e);
}

// One SGD step on the backend.
int exec_train_step(exec *e, const exec_batch *b, const exec_hparams *h, sc_err *err) {
    return e->be->train_step(e->st, b, h, err);
}

// Inference-mode forward on the backend.
int exec_eval_batch(exec *e, const exec_batch *b, float smoothing, float *logits, sc_err *err) {
    return e->be->eval_batch(e->st, b, smoothing, logits, err);
}

// Takes and resets the accumulated statistics.
int exec_stats_take(exec *e, exec_stats *out, sc_err *err) {
    return e->be->stats_take(e->st, out, err);
}

// Device -> net copy of parameters, masks and buffers.
int exec_read_net(exec *e, sc_err *err) { return e->be->read_net(e->st, err); }

// Net -> device copy of parameters, masks and buffers.
int exec_write_net(exec *e, sc_err *err) { return e->be->write_net(e->st, err); }

// Device -> host copy of the momentum buffer.
int exec_read_momentum(exec *e, float *mom, sc_err *err) {
    return e->be->read_momentum(e->st, mom, err);
}

// Host -> device copy of the momentum buffer.
int exec_write_momentum(exec *e, const float *mom, sc_err *err) {
    return e->be->write_momentum(e->st, mom, err);
}

// Device -> host copy of the last step's gradient.
int exec_read_grad(exec *e, float *grad, sc_err *err) {
    return e->be->read_grad(e->st, grad, err);
}

// Initial loss scale again (backends without a scaler have nothing to do).
int exec_reset_scaler(exec *e, sc_err *err) {
    return e->be->reset_scaler ? e->be->reset_scaler(e->st, err) : 0;
}

// Name of the device that runs this executor.
const char *exec_device_name(const exec *e) { return e->be->device_name(e->st); }

// True when the GPU backend exists and finds a device.
int exec_gpu_available(sc_err *why) { return exec_gpu_backend(why) != NULL; }

// Resolves a tool's --device and --precision options.
int exec_pick_device(const char *tool, const char *device, const char *precision, int quiet,
                     sc_device *dev, sc_precision *prec, sc_err *err) {
    sc_err why = {0};
    int gpu = strcmp(device, "cpu") && exec_gpu_available(&why);
    if (!strcmp(device, "gpu") && !gpu) return sc_fail(err, "--device gpu: %s", why.msg);
    if (!strcmp(precision, "fp16") && !gpu)
        return sc_fail(err, "--precision fp16 needs the GPU (running on the CPU)");
    *dev = gpu ? DEV_GPU : DEV_CPU;
    *prec = !strcmp(precision, "fp32") ? PREC_FP32 : gpu ? PREC_FP16 : PREC_FP32;
    if (!strcmp(device, "auto") && !gpu && !quiet) fprintf(stderr, "%s: %s; using the CPU\n", tool, why.msg);
    return 0;
}
