// Stand-in for the channels-last dense engine in CPU-only builds: every
// entry point says there is no GPU.
#include <math.h>

#include "runtime/dengine.h"

// The precision's name.
const char *dengine_prec_name(dengine_prec p) {
    return p == DE_FP16 ? "fp16" : p == DE_BF16 ? "bf16" : "tf32";
}

// Fails: no GPU in this build.
dengine *dengine_create(const deploy_plan *p, dengine_prec prec, int n, const uint8_t *images,
                        int repeat, sc_err *err) {
    sc_fail(err, "this build has no GPU support (nvcc or cuDNN was missing at build time)");
    return NULL;
}

// Fails: no GPU in this build.
dengine *dengine_create_mixed(const deploy_plan *p, int n, const uint8_t *images, int repeat,
                              int force, sc_err *err) {
    return dengine_create(p, DE_FP16, n, images, repeat, err);
}

// No sparse ops without an engine.
int dengine_op_sparse(const dengine *e, int i) { return 0; }

// No tail without an engine.
void dengine_tail_ms(const dengine *e, double *with_ms, double *without_ms) { *with_ms = *without_ms = NAN; }

// No tail without an engine.
const char *dengine_tail_note(const dengine *e) { return ""; }

// Nothing to free.
void dengine_free(dengine *e) { (void)e; }

// Never reached without an engine.
int dengine_forward(dengine *e, int m, const uint8_t *images, float *logits, sc_err *err) {
    return sc_fail(err, "no GPU in this build");
}

// Never reached without an engine.
int dengine_forward_eager(dengine *e, int m, const uint8_t *images, float *logits, sc_err *err) {
    return sc_fail(err, "no GPU in this build");
}

// No tensors without an engine.
int dengine_op_tensor(const dengine *e, int i) { return -1; }

// Never reached without an engine.
int dengine_tensor(dengine *e, int t, int m, float *host, sc_err *err) {
    return sc_fail(err, "no GPU in this build");
}

// Never reached without an engine.
int dengine_time(dengine *e, int repeat, double *ms, sc_err *err) {
    return sc_fail(err, "no GPU in this build");
}

// Never reached without an engine.
int dengine_time_vs_dense(dengine *e, int repeat, double *ms, double *dense_ms, sc_err *err) {
    return sc_fail(err, "no GPU in this build");
}

// Never reached without an engine.
int dengine_time_pdl(dengine *e, int repeat, double ms[DE_PDL_MODES], sc_err *err) {
    for (int m = 0; m < DE_PDL_MODES; m++) ms[m] = NAN;
    return sc_fail(err, "no GPU in this build");
}

// No op times without an engine.
double dengine_op_ms(const dengine *e, int i) { return NAN; }

// No path times without an engine.
void dengine_op_paths_ms(const dengine *e, int i, double *dense_ms, double *sparse_ms, double *graph_gain_ms) {
    *dense_ms = *sparse_ms = *graph_gain_ms = NAN;
}

// Never reached without an engine.
int dengine_op_graph_ms(dengine *e, int i, int copies, int repeat, double *ms, sc_err *err) {
    *ms = NAN;
    return sc_fail(err, "no GPU in this build");
}

// Never reached without an engine.
int dengine_op_graph_gain_alone(dengine *e, int i, int repeat, double *gain_ms, sc_err *err) {
    *gain_ms = NAN;
    return sc_fail(err, "no GPU in this build");
}

// Never reached without an engine.
int dengine_graph_ms_with(dengine *e, const unsigned char *sparse, int repeat, double *ms, sc_err *err) {
    *ms = NAN;
    return sc_fail(err, "no GPU in this build");
}

// No description without an engine.
void dengine_op_describe(const dengine *e, int i, char *buf, size_t len) {
    if (len) buf[0] = 0;
}
