// Stand-in for the GPU deploy path in CPU-only builds: no candidates, no
// device; every entry point says so.
#include "runtime/deploy_gpu.h"

#define DEPLOY_NO_GPU "this build has no GPU support (nvcc or cuDNN was missing at build time)"

// No candidates without a GPU.
int deploy_cand_count(void) { return 0; }

// No names without candidates.
const char *deploy_cand_name(int i) { return "none"; }

// Every (absent) candidate serves fp32.
deploy_prec deploy_cand_prec(int i) { return DP_FP32; }

// Nothing to choose.
int deploy_cand_choosable(int i) { return 0; }

// No dense baseline.
int deploy_cand_dense(int i) { return 0; }

// No tolerance without candidates.
double deploy_cand_tol(int i) { return 0.0; }

// No candidate skips zeros.
int deploy_cand_skips_zeros(int i) { return 0; }

// No GPU in this build.
int deploy_gpu_available(sc_err *why) { return sc_fail(why, DEPLOY_NO_GPU), 0; }

// Fails: no GPU in this build.
deploy_gpu *deploy_gpu_create(const deploy_plan *p, deploy_prec prec, int max_n,
                              const deploy_gpu_skip *skip, FILE *warn, sc_err *err) {
    sc_fail(err, DEPLOY_NO_GPU);
    return NULL;
}

// Nothing to free.
void deploy_gpu_free(deploy_gpu *g) {}

// No device.
const char *deploy_gpu_device(const deploy_gpu *g) { return "none"; }

// Fails: no GPU in this build.
int deploy_gpu_tune(deploy_gpu *g, int n, const uint8_t *images, deploy_cpu *ref, int nref,
                    int repeat, deploy_timing *t, FILE *warn, sc_err *err) {
    return sc_fail(err, DEPLOY_NO_GPU);
}

// Fails: no GPU in this build.
int deploy_gpu_choose_dense(deploy_gpu *g, sc_err *err) { return sc_fail(err, DEPLOY_NO_GPU); }

// Fails: no GPU in this build.
int deploy_gpu_choose(deploy_gpu *g, const int *chosen, sc_err *err) {
    return sc_fail(err, DEPLOY_NO_GPU);
}

// Fails: no GPU in this build.
int deploy_gpu_forward(deploy_gpu *g, int n, const uint8_t *images, float *logits, sc_err *err) {
    return sc_fail(err, DEPLOY_NO_GPU);
}

// Fails: no GPU in this build.
int deploy_gpu_time(deploy_gpu *g, int n, int repeat, double *ms, int *graph, sc_err *err) {
    return sc_fail(err, DEPLOY_NO_GPU);
}

// Nothing to describe.
void deploy_gpu_describe(const deploy_gpu *g, int i, char *buf, size_t len) {
    if (len) buf[0] = 0;
}
