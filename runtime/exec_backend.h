// The table each executor backend fills in; runtime/exec.c dispatches to it.
// A backend's state is opaque (void *) to everyone else.
#ifndef SC_EXEC_BACKEND_H
#define SC_EXEC_BACKEND_H

#include "exec.h"

typedef struct {
    const char *name;  // "cpu" or "gpu"
    void *(*create)(net *nt, sc_precision prec, int max_batch, sc_err *err);
    void (*destroy)(void *st);
    int (*train_step)(void *st, const exec_batch *b, const exec_hparams *h, sc_err *err);
    int (*eval_batch)(void *st, const exec_batch *b, float smoothing, float *logits, sc_err *err);
    int (*stats_take)(void *st, exec_stats *out, sc_err *err);
    int (*read_net)(void *st, sc_err *err);
    int (*write_net)(void *st, sc_err *err);
    int (*read_momentum)(void *st, float *mom, sc_err *err);
    int (*write_momentum)(void *st, const float *mom, sc_err *err);
    int (*read_grad)(void *st, float *grad, sc_err *err);
    int (*reset_scaler)(void *st, sc_err *err);  // NULL: nothing to reset
    const char *(*device_name)(const void *st);
} exec_backend;

// The CPU backend (runtime/exec_cpu.c); always present.
const exec_backend *exec_cpu_backend(void);
// The GPU backend (runtime/exec_gpu.c), or NULL when built without CUDA or
// when no GPU can be used; err says why in the latter case when not NULL.
const exec_backend *exec_gpu_backend(sc_err *err);

#endif
