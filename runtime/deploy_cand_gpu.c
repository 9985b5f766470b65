// The table of candidate implementations of a conv/linear layer for the GPU
// deploy path (runtime/deploy_gpu_impl.h). The planner (deploy_tune_gpu.c)
// checks, times and picks among whatever this table lists, so a new
// algorithm is its kernel files plus one entry here.
//
//   sparse_fp32  direct sparse conv, fp32           (kernels/spconv_gpu.h)
//   cudnn_fp32   cuDNN dense, fp32, TF32 off        (kernels/dconv_gpu.h)  dense baseline
//   cudnn_tf32   cuDNN dense, TF32 tensor cores     (table only: not fp32 arithmetic)
//   cusparse     cuSPARSE im2col + SpMM, fp32       (kernels/spmm_gpu.h)
//   sparse_fp16  direct sparse conv, half2
//   sparse_cb4   direct sparse conv, 4-bit codebook weights (codebook exports)
//   cudnn_fp16   cuDNN dense, fp16 tensor cores, NCHW                     dense baseline
//   cudnn_fp16_nhwc  the same with cuDNN in NHWC (transposes in and out)   dense baseline
//   actsparse_fp32   activation-sparse conv: the input's non-zeros times the non-zero
//   actsparse_fp16   weights, fused max pool (kernels/actconv_gpu.h); fp16: fp16
//                    activations, fp32 weights and sums
// Where a precision has two dense entries, the all-dense network runs each
// layer with the faster of them (measured).
#include <stdlib.h>

#include "kernels/actconv_gpu.h"
#include "kernels/dconv_gpu.h"
#include "kernels/spconv_gpu.h"
#include "kernels/spmm_gpu.h"
#include "runtime/deploy_gpu_impl.h"

// --- direct sparse convolution (spconv_gpu) ---------------------------------------

// Uploads the layer for vtype vt.
static void *cand_sparse_create(const deploy_cand_args *a, spconv_gpu_vtype vt, sc_err *err) {
    const sparse_layer *sl = a->sl;
    return spconv_gpu_create(&a->op->desc, vt, vt == SPG_CB4 ? sl->codes : NULL,
                             vt == SPG_CB4 ? sl->codebook : NULL,
                             vt == SPG_CB4 ? sl->row_scale : NULL, err);
}

// fp32 activations and weights.
static void *cand_sparse32_create(const deploy_cand_args *a, sc_err *err) {
    return cand_sparse_create(a, SPG_FP32, err);
}

// fp16 activations and weights.
static void *cand_sparse16_create(const deploy_cand_args *a, sc_err *err) {
    return cand_sparse_create(a, SPG_FP16, err);
}

// fp16 activations, 4-bit codebook weights.
static void *cand_cb4_create(const deploy_cand_args *a, sc_err *err) {
    return cand_sparse_create(a, SPG_CB4, err);
}

// Only layers exported with codebook indices.
static int cand_cb4_applies(const deploy_cand_args *a) { return a->sl->codes != NULL; }

// Lets the kernel pick its fastest variant for batch n.
static int cand_sparse_tune(void *st, const gpu_ctx *g, int n, const void *in, void *out,
                            sc_err *err) {
    return spconv_gpu_tune(st, n, in, out, g->stream, NULL, err);
}

// out = layer(in).
static int cand_sparse_forward(void *st, const gpu_ctx *g, int n, const void *in, void *out,
                               sc_err *err) {
    return spconv_gpu_forward(st, n, in, out, g->stream, err);
}

// The variant in use.
static void cand_sparse_describe(const void *st, char *buf, size_t len) {
    spconv_gpu_describe(st, buf, len);
}

// Frees the layer.
static void cand_sparse_free(void *st) { spconv_gpu_free(st); }

// --- cuDNN dense (dconv_gpu) --------------------------------------------------------

// cuDNN state plus the context it was made with (its forward needs it).
typedef struct {
    dconv_gpu *c;
    const gpu_ctx *g;
} cand_dconv;

// Creates the dense layer in precision pr.
static void *cand_dconv_create(const deploy_cand_args *a, dconv_prec pr, sc_err *err) {
    cand_dconv *s = calloc(1, sizeof *s);
    if (!s) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    s->g = a->g;
    s->c = dconv_gpu_create(a->g, &a->op->desc, a->dense_w, pr, a->max_n, err);
    if (!s->c) free(s), s = NULL;
    return s;
}

// cuDNN fp32, TF32 off.
static void *cand_cudnn32_create(const deploy_cand_args *a, sc_err *err) {
    return cand_dconv_create(a, DC_FP32, err);
}

// cuDNN with TF32 tensor cores.
static void *cand_tf32_create(const deploy_cand_args *a, sc_err *err) {
    return cand_dconv_create(a, DC_TF32, err);
}

// cuDNN fp16 tensor cores.
static void *cand_cudnn16_create(const deploy_cand_args *a, sc_err *err) {
    return cand_dconv_create(a, DC_FP16, err);
}

// cuDNN fp16 tensor cores working in NHWC (layout transposes included).
static void *cand_nhwc_create(const deploy_cand_args *a, sc_err *err) {
    return cand_dconv_create(a, DC_FP16_NHWC, err);
}

// out = dense layer(in).
static int cand_dconv_forward(void *st, const gpu_ctx *g, int n, const void *in, void *out,
                              sc_err *err) {
    cand_dconv *s = st;
    return dconv_gpu_forward(s->g, s->c, n, in, out, g->stream, err);
}

// cuDNN's algorithm.
static void cand_dconv_describe(const void *st, char *buf, size_t len) {
    dconv_gpu_describe(((const cand_dconv *)st)->c, buf, len);
}

// Frees the layer.
static void cand_dconv_free(void *st) {
    cand_dconv *s = st;
    if (s) dconv_gpu_free(s->c);
    free(s);
}

// --- cuSPARSE im2col + SpMM (spmm_gpu) -----------------------------------------------

// cuSPARSE state plus the context it was made with.
typedef struct {
    spmm_gpu *s;
    const gpu_ctx *g;
} cand_spmm;

// Uploads the layer for fp32 activations.
static void *cand_spmm_create(const deploy_cand_args *a, sc_err *err) {
    cand_spmm *s = calloc(1, sizeof *s);
    if (!s) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    s->g = a->g;
    s->s = spmm_gpu_create(a->g, &a->op->desc, GDT_F32, a->max_n, err);
    if (!s->s) free(s), s = NULL;
    return s;
}

// out = im2col(in) x CSR.
static int cand_spmm_forward(void *st, const gpu_ctx *g, int n, const void *in, void *out,
                             sc_err *err) {
    cand_spmm *s = st;
    return spmm_gpu_forward(s->g, s->s, n, in, out, g->stream, err);
}

// The SpMM algorithm.
static void cand_spmm_describe(const void *st, char *buf, size_t len) {
    spmm_gpu_describe(((const cand_spmm *)st)->s, buf, len);
}

// Frees the layer.
static void cand_spmm_free(void *st) {
    cand_spmm *s = st;
    if (s) spmm_gpu_free(s->s);
    free(s);
}

// --- activation-sparse convolution (actconv_gpu) ----------------------------------------

// fp32 activations.
static void *cand_act32_create(const deploy_cand_args *a, sc_err *err) {
    return actconv_gpu_create(a->g, &a->op->desc, GDT_F32, a->max_n, err);
}

// fp16 activations.
static void *cand_act16_create(const deploy_cand_args *a, sc_err *err) {
    return actconv_gpu_create(a->g, &a->op->desc, GDT_F16, a->max_n, err);
}

// out = layer(in) from in's non-zeros.
static int cand_act_forward(void *st, const gpu_ctx *g, int n, const void *in, void *out, sc_err *err) {
    return actconv_gpu_forward(st, n, in, out, g->stream, err);
}

// The tile sizes.
static void cand_act_describe(const void *st, char *buf, size_t len) { actconv_gpu_describe(st, buf, len); }

// Frees the layer.
static void cand_act_free(void *st) { actconv_gpu_free(st); }

// --- the table ---------------------------------------------------------------------

#define CAND_SPARSE .tune = cand_sparse_tune, .forward = cand_sparse_forward, \
                    .describe = cand_sparse_describe, .free = cand_sparse_free
#define CAND_DCONV .forward = cand_dconv_forward, .describe = cand_dconv_describe, \
                   .free = cand_dconv_free
#define CAND_ACT .forward = cand_act_forward, .describe = cand_act_describe, .free = cand_act_free

static const deploy_cand CANDS[] = {
    {.name = "sparse_fp32", .prec = DP_FP32, .choosable = 1, .tol = 1e-4,
     .create = cand_sparse32_create, CAND_SPARSE},
    {.name = "cudnn_fp32", .prec = DP_FP32, .choosable = 1, .dense = 1, .tol = 1e-4,
     .create = cand_cudnn32_create, CAND_DCONV},
    {.name = "cudnn_tf32", .prec = DP_FP32, .choosable = 0, .tol = 1e-2,
     .create = cand_tf32_create, CAND_DCONV},
    {.name = "cusparse", .prec = DP_FP32, .choosable = 1, .tol = 1e-4,
     .create = cand_spmm_create, .forward = cand_spmm_forward, .describe = cand_spmm_describe,
     .free = cand_spmm_free},
    {.name = "sparse_fp16", .prec = DP_FP16, .choosable = 1, .tol = 3e-2,
     .create = cand_sparse16_create, CAND_SPARSE},
    {.name = "sparse_cb4", .prec = DP_FP16, .choosable = 1, .tol = 3e-2,
     .applies = cand_cb4_applies, .create = cand_cb4_create, CAND_SPARSE},
    {.name = "cudnn_fp16", .prec = DP_FP16, .choosable = 1, .dense = 1, .tol = 3e-2,
     .create = cand_cudnn16_create, CAND_DCONV},
    {.name = "cudnn_fp16_nhwc", .prec = DP_FP16, .choosable = 1, .dense = 1, .tol = 3e-2,
     .create = cand_nhwc_create, CAND_DCONV},
    {.name = "actsparse_fp32", .prec = DP_FP32, .choosable = 1, .tol = 1e-4, .skips_zeros = 1,
     .create = cand_act32_create, CAND_ACT},
    {.name = "actsparse_fp16", .prec = DP_FP16, .choosable = 1, .tol = 3e-2, .skips_zeros = 1,
     .create = cand_act16_create, CAND_ACT},
};

// The table and its length.
const deploy_cand *deploy_cand_table(int *n) {
    *n = (int)(sizeof CANDS / sizeof *CANDS);
    return CANDS;
}

// --- the names the reports use (deploy_gpu.h) ------------------------------------------

// Number of candidates.
int deploy_cand_count(void) { return (int)(sizeof CANDS / sizeof *CANDS); }

// Candidate i's name.
const char *deploy_cand_name(int i) { return CANDS[i].name; }

// The precision candidate i serves.
deploy_prec deploy_cand_prec(int i) { return CANDS[i].prec; }

// Whether candidate i may run a layer.
int deploy_cand_choosable(int i) { return CANDS[i].choosable; }

// Whether candidate i is its precision's dense baseline.
int deploy_cand_dense(int i) { return CANDS[i].dense; }

// Candidate i's check tolerance.
double deploy_cand_tol(int i) { return CANDS[i].tol; }

// Whether candidate i skips its input's zeros.
int deploy_cand_skips_zeros(int i) { return CANDS[i].skips_zeros; }
