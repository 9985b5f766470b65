// Test scaffolding of the deploy runtime: builds an exported model
// (runtime/sparse_model.h) in memory from a net with random weights, random
// masks, random BN statistics and (optionally) codebook weights, the way the
// export tool does: BN folded into the conv, rows padded with explicit zeros
// to the layer's maximum, offsets into the padded input, fusion by
// sparse_layer_fusion(). Header-only so each test stays one binary.
#ifndef SC_TESTS_DEPLOY_TESTUTIL_H
#define SC_TESTS_DEPLOY_TESTUTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/net.h"
#include "runtime/rng.h"
#include "runtime/sparse_model.h"
#include "runtime/deploy_plan.h"
#include "tests/check.h"
#include "tests/testutil.h"

// What to fold and fuse when building a test model.
typedef struct {
    int fold_bn;      // 0: leave BNs to the plan as ops of their own
    int fuse_relu;    // 0: leave ReLUs after convs to the plan
    int fuse_pool;    // 0: leave max pools after ReLUs to the plan
    int codebook;     // 1: weights drawn from a 16-entry codebook (SV_CODEBOOK4)
    float sparsity;   // fraction of prunable weights set to zero
} tdm_opts;

// --- the net ----------------------------------------------------------------

// Randomises weights, BN statistics and masks of nt (codebook: every
// non-zero weight is one of 16 values, as quantize writes them).
static inline void tdm_net_randomize(net *nt, uint64_t seed, const tdm_opts *o, float cb[16]) {
    rng g;
    rng_seed(&g, seed, 11);
    tnet_randomize(nt, seed, 1);
    for (int i = 0; i < 16; i++) cb[i] = (rng_uniform(&g) - 0.5f) * 0.6f;
    cb[15] = 0.0f;  // the code of pruned weights and padding entries
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        float *d = net_tensor_data(nt, t), *mk = p->trainable ? net_tensor_mask(nt, t) : NULL;
        for (size_t i = 0; i < p->count; i++) {
            if (p->kind == PT_MEAN) d[i] = rng_uniform(&g) - 0.5f;
            if (p->kind == PT_VAR) d[i] = 0.5f + rng_uniform(&g);
            if (p->kind != PT_WEIGHT) continue;
            if (o->codebook) d[i] = cb[rng_below(&g, 15)];
            if (p->prunable && rng_uniform(&g) < o->sparsity) d[i] = 0.0f;
            mk[i] = d[i] != 0.0f;
        }
        // a few empty rows in the prunable weights
        if (p->kind == PT_WEIGHT && p->prunable && p->dims[0] > 2) {
            size_t cols = p->count / (size_t)p->dims[0];
            memset(d + cols, 0, cols * sizeof *d);
            memset(mk + cols, 0, cols * sizeof *mk);
        }
    }
}

// --- one sparse layer ---------------------------------------------------------

// Folded weights (K, cols) and bias (K) of conv/linear layer li, and the BN
// scale of each row (1 without a folded BN).
static inline void tdm_fold(const net *nt, const sparse_layer *l, float *w, float *bias,
                            float *scale) {
    const layer *L = &nt->layers[l->layer];
    const size_t cols = (size_t)l->C * l->R * l->S;
    const float *w0 = net_tensor_data(nt, L->weight);
    const float *b0 = L->bias >= 0 ? net_tensor_data(nt, L->bias) : NULL;
    for (int k = 0; k < l->K; k++) {
        float s = 1.0f, t = b0 ? b0[k] : 0.0f;
        if (l->bn >= 0) {
            const layer *B = &nt->layers[l->bn];
            const float *ga = net_tensor_data(nt, B->gamma), *be = net_tensor_data(nt, B->beta);
            const float *mu = net_tensor_data(nt, B->mean), *var = net_tensor_data(nt, B->var);
            double sd = ga[k] / sqrt((double)var[k] + B->eps);
            s = (float)sd;
            t = (float)((t - mu[k]) * sd + be[k]);
        }
        scale[k] = s, bias[k] = t;
        for (size_t c = 0; c < cols; c++) w[k * cols + c] = w0[k * cols + c] * s;
    }
}

// Index of v in the codebook (it is one of its entries), 0 when absent.
static inline int tdm_code(const float cb[16], float v) {
    for (int i = 0; i < 16; i++)
        if (cb[i] == v) return i;
    return 0;
}

// Fills l's CSR arrays from dense folded weights w (K, cols): non-zeros per
// row, padded with explicit zeros at the first unused columns, ascending.
static inline void tdm_csr(sparse_layer *l, const float *w, const float *w_unfolded,
                           const float *scale, const float cb[16]) {
    const size_t cols = (size_t)l->C * l->R * l->S;
    int maxrow = 0;
    l->nnz = 0;
    for (int k = 0; k < l->K; k++) {
        int nz = 0;
        for (size_t c = 0; c < cols; c++) nz += w[k * cols + c] != 0.0f;
        maxrow = nz > maxrow ? nz : maxrow;
        l->nnz += nz;
    }
    l->nnz_row = maxrow;
    size_t n = (size_t)l->K * maxrow;
    l->indices = malloc((n + 1) * sizeof *l->indices);
    l->offsets = malloc((n + 1) * sizeof *l->offsets);
    l->values = malloc((n + 1) * sizeof *l->values);
    l->codes = cb ? calloc(n / 2 + 2, 1) : NULL;
    for (int k = 0; k < l->K; k++) {
        int nz = 0, pad;
        for (size_t c = 0; c < cols; c++) nz += w[k * cols + c] != 0.0f;
        pad = maxrow - nz;
        size_t j = (size_t)k * maxrow;
        for (size_t c = 0; c < cols; c++) {
            int take = w[k * cols + c] != 0.0f;
            if (!take && pad > 0) take = 1, pad--;
            if (!take) continue;
            l->indices[j] = (int32_t)c;
            l->offsets[j] = (int32_t)sparse_layer_offset(l, (int32_t)c);
            l->values[j] = w[k * cols + c];
            if (cb) {
                int code = tdm_code(cb, w[k * cols + c] != 0.0f ? w_unfolded[k * cols + c] : 0.0f);
                l->codes[j / 2] |= (uint8_t)(code << (4 * (j & 1)));
                l->values[j] = cb[code] * scale[k];
            }
            j++;
        }
    }
}

// Builds sparse layer s for conv/linear layer li of nt.
static inline void tdm_layer(const net *nt, int li, const tdm_opts *o, const float cb[16],
                             sparse_layer *l) {
    memset(l, 0, sizeof *l);
    sparse_layer_fusion(nt, li, l);
    if (!o->fold_bn) {
        l->bn = -1;
        l->relu = l->pool_k = l->pool_stride = l->pool_pad = 0;
        l->relu_layer = l->pool_layer = -1;
        l->out_layer = li;
    }
    if (!o->fuse_relu || !o->fuse_pool) l->pool_k = l->pool_stride = l->pool_pad = 0, l->pool_layer = -1;
    if (!o->fuse_relu) l->relu = 0, l->relu_layer = -1;
    l->out_layer = l->pool_layer >= 0 ? l->pool_layer : l->relu_layer >= 0 ? l->relu_layer
                   : l->bn >= 0 ? l->bn : li;
    const size_t cols = (size_t)l->C * l->R * l->S;
    float *w = malloc((size_t)l->K * cols * sizeof *w), *scale = malloc((size_t)l->K * sizeof *scale);
    l->bias = malloc((size_t)l->K * sizeof *l->bias);
    tdm_fold(nt, l, w, l->bias, scale);
    int cbk = o->codebook;
    tdm_csr(l, w, net_tensor_data(nt, nt->layers[li].weight), scale, cbk ? cb : NULL);
    if (cbk) {
        memcpy(l->codebook, cb, 16 * sizeof *cb);
        l->row_scale = scale;
    } else {
        free(scale);
    }
    free(w);
}

// --- the model ----------------------------------------------------------------

// Builds a test model over nt (not owned: free with tdm_free, then net_free).
static inline sparse_model *tdm_build(net *nt, const tdm_opts *o, uint64_t seed) {
    float cb[16];
    tdm_net_randomize(nt, seed, o, cb);
    sparse_model *m = calloc(1, sizeof *m);
    m->nt = nt;
    m->vtype = o->codebook ? SV_CODEBOOK4 : SV_FP32;
    snprintf(m->dataset, sizeof m->dataset, "synthetic");
    for (int i = 0; i < nt->nlayers; i++)
        m->nlayers += nt->layers[i].kind == LK_CONV || nt->layers[i].kind == LK_LINEAR;
    m->layers = calloc((size_t)m->nlayers, sizeof *m->layers);
    for (int i = 0, s = 0; i < nt->nlayers; i++)
        if (nt->layers[i].kind == LK_CONV || nt->layers[i].kind == LK_LINEAR)
            tdm_layer(nt, i, o, cb, &m->layers[s++]);
    return m;
}

// Frees a test model but not its net.
static inline void tdm_free(sparse_model *m) {
    for (int i = 0; m && i < m->nlayers; i++) {
        sparse_layer *l = &m->layers[i];
        free(l->indices), free(l->offsets), free(l->values), free(l->bias), free(l->codes);
        free(l->row_scale);
    }
    if (m) free(m->layers);
    free(m);
}

// Random images (n, 3, h, w) bytes from (seed, stream 5); caller frees.
static inline uint8_t *tdm_images(int n, int h, int w, uint64_t seed) {
    rng g;
    rng_seed(&g, seed, 5);
    uint8_t *img = malloc((size_t)n * 3 * h * w);
    for (size_t i = 0; i < (size_t)n * 3 * h * w; i++) img[i] = (uint8_t)rng_below(&g, 256);
    return img;
}

// A residual net on 13x11 images: projection shortcut (1x1 stride 2 reading
// a bordered tensor), add+ReLU, padded max pool, pad-2 conv, average pool,
// global pool, a linear that reads a bordered tensor, and an add of two linears.
// DenseNet-style joins (G. Huang et al., "Densely Connected Convolutional
// Networks"): concats of a conv and earlier outputs, one reading a ReLU and
// a concat, unfolded BNs on joined channels, a transition with an average
// pool, odd sizes.
static const char *const DENSE_DESC =
    "conv 8 3 pad=1 bias=0 name=c0\n"
    "bn name=b1 from=c0\nrelu name=r1\nconv 12 1 bias=0 name=c1\nbn name=b2\nrelu name=r2\n"
    "conv 4 3 pad=1 bias=0 name=c2\nconcat c0 name=cat1\n"
    "bn name=b3\nrelu name=r3\nconv 5 3 pad=1 bias=0 name=c3\nconcat cat1 r3 name=cat2\n"
    "bn name=tb\nrelu name=tr\nconv 7 1 bias=0 name=tc\navgpool 2 name=tp\n"
    "bn name=fb\nrelu name=fr\ngap name=pool\nlinear classes name=fc\n";

static const char *const RES_DESC =
    "conv 8 3 pad=1 bias=0 name=c1\nbn name=b1\nrelu name=r1\n"
    "conv 8 3 pad=1 bias=0 name=c2\nbn name=b2\nadd r1 name=a1\nrelu name=o1\n"
    "conv 12 1 stride=2 bias=0 name=sc from=o1\nbn name=scb\n"
    "conv 12 3 stride=2 pad=1 bias=0 name=c3 from=o1\nbn name=b3\nrelu name=r3\n"
    "conv 12 3 pad=1 bias=0 name=c4\nbn name=b4\nadd scb name=a2\nrelu name=o2\n"
    "maxpool 3 stride=2 pad=1 name=mp\n"
    "conv 10 3 pad=2 name=c5\nrelu name=r5\nmaxpool 2 name=mp5\n"
    "avgpool 2 stride=1 name=ap\ngap name=g\nlinear classes name=fa\n"
    "linear classes name=fb from=mp\nadd fa name=sum\n";

// --- a model, its plan and the CPU logits (GPU tests) ---------------------------

#define NIMG 5  // batch of the GPU tests (check images: all of them)

typedef struct {
    net *nt;
    sparse_model *m;
    deploy_plan *p;
    deploy_cpu *cpu;
    uint8_t *img;
    float *want;  // (NIMG, classes) CPU logits
} tdm_fixture;

// Builds the model, its plan and the CPU logits.
static inline int tdm_fixture_make(tctx *t, tdm_fixture *f, const char *arch, const char *desc, int h, int w,
                        const tdm_opts *o, uint64_t seed) {
    sc_err err = {{0}};
    memset(f, 0, sizeof *f);
    f->nt = desc ? net_from_desc(arch, desc, 3, h, w, 7, &err) : net_create(arch, 3, h, w, 10, &err);
    CHECK(t, f->nt != NULL, "net: %s", err.msg);
    if (!f->nt) return -1;
    f->m = tdm_build(f->nt, o, seed);
    f->p = deploy_plan_build(f->m, &err);
    CHECK(t, f->p != NULL, "plan: %s", err.msg);
    if (!f->p) return -1;
    f->cpu = deploy_cpu_create(f->p, NIMG, &err);
    f->img = tdm_images(NIMG, h, w, seed);
    f->want = malloc((size_t)NIMG * f->nt->classes * sizeof *f->want);
    CHECK(t, f->cpu && deploy_cpu_forward(f->cpu, NIMG, f->img, f->want, &err) == 0, "cpu: %s", err.msg);
    return 0;
}

// Frees a fixture.
static inline void tdm_fixture_free(tdm_fixture *f) {
    deploy_cpu_free(f->cpu);
    deploy_plan_free(f->p);
    tdm_free(f->m);
    net_free(f->nt);
    free(f->img), free(f->want);
}

#endif
