// Test scaffolding of the export tool: random pruned nets (also pruned on
// KxC blocks, for BSR layers) with random BN
// statistics, a temporary directory, the dense CPU executor's logits, an
// independent BN folding in double precision, and a direct forward pass of
// an exported model from its CSR rows and offsets (what a sparse kernel
// computes, written as plain loops). Header-only so each test stays one
// self-contained binary.
#ifndef SC_TESTS_EXPORT_TESTUTIL_H
#define SC_TESTS_EXPORT_TESTUTIL_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/csr.h"
#include "export/export_io.h"
#include "kernels/augment.h"
#include "kernels/pool.h"
#include "runtime/exec.h"
#include "runtime/net.h"
#include "runtime/pattern.h"
#include "runtime/rng.h"
#include "runtime/sparse_model.h"
#include "tests/testutil.h"

// A residual net on 13x11 images: stem conv+BN+ReLU+max pool (all fused), a
// block with a 3x3 stride-2 conv, a 1x1 stride-2 projection shortcut, BN
// before the add, a BN after the add (not foldable), a conv with its own
// bias and a BN whose output feeds a ReLU and an add (so the ReLU is not
// fused), global pooling and a linear head.
static const char *const TEX_RES_DESC =
    "conv 8 3 pad=1 bias=0 name=conv1\nbn name=bn1\nrelu name=relu1\nmaxpool 2 name=pool1\n"
    "conv 12 3 stride=2 pad=1 bias=0 name=b.conv1\nbn name=b.bn1\nrelu name=b.relu1\n"
    "conv 12 3 pad=1 bias=0 name=b.conv2\nbn name=b.bn2\n"
    "conv 12 1 stride=2 bias=0 name=b.short from=pool1\nbn name=b.sbn\n"
    "add b.bn2 name=b.add\nbn name=b.post\nrelu name=b.out\n"
    "conv 10 3 pad=1 name=c3\nbn name=bn3\nrelu name=relu3\nadd bn3 name=tail\n"
    "gap name=gap\nlinear classes name=fc\n";

// --- temporary directory ----------------------------------------------------

// Creates a fresh directory under /tmp into dir (len >= 64); 0 on success.
static inline int tex_dir_make(char *dir, size_t len) {
    snprintf(dir, len, "/tmp/sc_export_test.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

// Removes a flat directory and the files in it.
static inline void tex_dir_remove(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

// --- nets ---------------------------------------------------------------------

// Builds a net from description text (desc) or a built-in name (desc NULL).
static inline net *tex_net(const char *arch, const char *desc, int h, int w, int classes) {
    sc_err err = {{0}};
    net *nt = desc ? net_from_desc(arch, desc, 3, h, w, classes, &err)
                   : net_create(arch, 3, h, w, classes, &err);
    if (!nt) fprintf(stderr, "net: %s\n", err.msg);
    return nt;
}

// Randomises nt: weights and biases, BN gammas/betas and running statistics,
// the input normalisation, and prunes every prunable weight row by row with
// sparsities drawn around `sparsity` (the second row of each layer entirely
// when prune_row is set), zeroing pruned weights.
static inline void tex_randomize(net *nt, uint64_t seed, float sparsity, int prune_row) {
    rng g;
    rng_seed(&g, seed, 21);
    tnet_randomize(nt, seed, 1);
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        float *d = net_tensor_data(nt, t);
        if (p->kind == PT_MEAN) fill_uniform(&g, d, p->count, -0.3f, 0.3f);
        if (p->kind == PT_VAR) fill_uniform(&g, d, p->count, 0.2f, 2.0f);
        if (!p->prunable || sparsity <= 0.0f) continue;
        float *mk = net_tensor_mask(nt, t);
        const size_t rows = (size_t)p->dims[0], cols = p->count / rows;
        for (size_t k = 0; k < rows; k++) {
            float s = sparsity + (rng_uniform(&g) - 0.5f) * 0.3f;
            for (size_t c = 0; c < cols; c++)
                if (rng_uniform(&g) < s || (prune_row && k == 1)) mk[k * cols + c] = 0.0f, d[k * cols + c] = 0.0f;
        }
    }
    for (int c = 0; c < 3; c++) nt->in_mean[c] = 0.4f + 0.1f * c, nt->in_std[c] = 0.2f + 0.05f * c;
}

// Logits (n, classes) of the dense CPU executor on nt (caller frees).
static inline float *tex_logits(net *nt, int n, const uint8_t *img) {
    sc_err err = {{0}};
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, n, &err);
    if (!e) {
        fprintf(stderr, "exec_create: %s\n", err.msg);
        return NULL;
    }
    int *labels = calloc((size_t)n, sizeof *labels);
    float *lg = malloc((size_t)n * nt->classes * sizeof *lg);
    exec_batch b = {n, img, labels, NULL, NULL, NULL, NULL};
    if (exec_eval_batch(e, &b, 0.0f, lg, &err)) {
        fprintf(stderr, "exec_eval_batch: %s\n", err.msg);
        free(lg), lg = NULL;
    }
    exec_free(e);
    free(labels);
    return lg;
}

// Number of images whose top-1 class differs between two logit sets.
static inline int tex_pred_diff(const float *a, const float *b, int n, int classes) {
    int diff = 0;
    for (int i = 0; i < n; i++) {
        int ia = 0, ib = 0;
        for (int c = 1; c < classes; c++) {
            if (a[i * classes + c] > a[i * classes + ia]) ia = c;
            if (b[i * classes + c] > b[i * classes + ib]) ib = c;
        }
        diff += ia != ib;
    }
    return diff;
}

// --- nets pruned on blocks (BSR layers) ---------------------------------------

// Odd shapes: a 3-channel stem (12 outputs), a strided conv of 12 -> 20
// channels with BN and ReLU fused, a 1x1 conv with its own bias (20 -> 8), a
// linear head of 8 -> 10 classes.
static const char *const TEX_BLOCK_DESC =
    "conv 12 3 pad=1 bias=0 name=conv1\nbn name=bn1\nrelu name=relu1\n"
    "conv 20 3 stride=2 pad=1 bias=0 name=c2\nbn name=bn2\nrelu name=relu2\n"
    "conv 8 1 name=c3\nrelu name=relu3\ngap name=gap\nlinear classes name=fc\n";

// How one layer's blocks are pruned.
typedef enum { BP_RANDOM, BP_NONE_KEPT, BP_ALL_KEPT, BP_EMPTY_ROW } bp_mode;

// Prunes weight tensor t of nt on p's blocks: each block kept with
// probability keep (BP_RANDOM; BP_EMPTY_ROW also prunes the first block row),
// none or all kept; pruned weights are zeroed.
static inline void tex_block_prune(net *nt, int t, const sc_pattern *p, float keep, bp_mode mode, rng *g) {
    sc_pattern_geom geo;
    sc_pattern_geom_of(p, nt, t, &geo);
    float *w = net_tensor_data(nt, t), *mk = net_tensor_mask(nt, t);
    size_t *idx = malloc(geo.unit_size * sizeof *idx);
    const size_t per_row = geo.units / (size_t)(geo.K / geo.kb);  // blocks of a block row
    for (size_t u = 0; u < geo.units; u++) {
        int kept = mode == BP_ALL_KEPT || (mode != BP_NONE_KEPT && rng_uniform(g) < keep);
        if (mode == BP_EMPTY_ROW && u < per_row) kept = 0;
        sc_pattern_unit_entries(&geo, u, idx);
        for (size_t j = 0; j < geo.unit_size; j++) {
            mk[idx[j]] = kept ? 1.0f : 0.0f;
            if (!kept) w[idx[j]] = 0.0f;
        }
    }
    free(idx);
}

// A random TEX_BLOCK_DESC net on 9x7 images pruned on pattern p: conv1 all kept,
// c2 with its first block row empty, c3 with no block (none_c3) or random
// blocks, fc random.
static inline net *tex_block_net(const sc_pattern *p, float keep, int none_c3, uint64_t seed) {
    net *nt = tex_net("bsrnet", TEX_BLOCK_DESC, 9, 7, 10);
    if (!nt) return NULL;
    tex_randomize(nt, seed, 0.0f, 0);
    rng g;
    rng_seed(&g, seed, 5);
    const bp_mode modes[4] = {BP_ALL_KEPT, BP_EMPTY_ROW, none_c3 ? BP_NONE_KEPT : BP_RANDOM, BP_RANDOM};
    for (int i = 0, n = 0; i < nt->nlayers; i++)
        if (nt->layers[i].kind == LK_CONV || nt->layers[i].kind == LK_LINEAR)
            tex_block_prune(nt, nt->layers[i].weight, p, keep, modes[n++ % 4], &g);
    return nt;
}

// --- exporting ----------------------------------------------------------------

// 1 when the loaded model b has the built model a's padded layout: nnz_row,
// indices, offsets, values, padding mask and codes of every layer (the file
// holds the compact CSR; the loader derives the rest).
static inline int tex_same_layout(const sparse_model *a, const sparse_model *b) {
    if (a->nlayers != b->nlayers) return 0;
    for (int i = 0; i < a->nlayers; i++) {
        const sparse_layer *x = &a->layers[i], *y = &b->layers[i];
        const size_t n = (size_t)x->K * x->nnz_row;
        if (x->nnz_row != y->nnz_row || x->nnz != y->nnz || x->vtype != y->vtype ||
            memcmp(x->indices, y->indices, n * 4) || memcmp(x->offsets, y->offsets, n * 4) ||
            memcmp(x->values, y->values, n * 4) || memcmp(x->bias, y->bias, (size_t)x->K * 4) ||
            memcmp(x->pad_mask, y->pad_mask, (n + 7) / 8) ||
            (x->codes && memcmp(x->codes, y->codes, (n + 1) / 2))) {
            fprintf(stderr, "layer %d: the loaded layout differs from the built one\n", i);
            return 0;
        }
    }
    return 1;
}

// 1 when the loaded model b has the built model a's block structure (BSR
// layers): block size, indptr, indices, values and codes of every layer, and
// its remainder (hybrid layers).
static inline int tex_same_blocks(const sparse_model *a, const sparse_model *b) {
    for (int i = 0; i < a->nlayers && i < b->nlayers; i++) {
        const sparse_bsr *x = &a->layers[i].bsr, *y = &b->layers[i].bsr;
        const size_t n = (size_t)x->nblocks * x->kb * x->cb, rows = x->kb ? (size_t)(a->layers[i].K / x->kb) : 0;
        if (x->kb != y->kb || x->cb != y->cb || x->nblocks != y->nblocks ||
            (x->kb && (memcmp(x->indptr, y->indptr, (rows + 1) * 8) ||
                       memcmp(x->indices, y->indices, (size_t)x->nblocks * 4) ||
                       memcmp(x->values, y->values, n * 4) || (!x->codes) != (!y->codes) ||
                       (x->codes && memcmp(x->codes, y->codes, (n + 1) / 2))))) {
            fprintf(stderr, "layer %d: the loaded blocks differ from the built ones\n", i);
            return 0;
        }
        const size_t r = (size_t)x->nrem, K = (size_t)a->layers[i].K;
        if (x->nrem != y->nrem ||
            (r && (memcmp(x->rem_indptr, y->rem_indptr, (K + 1) * 8) || memcmp(x->rem_indices, y->rem_indices, r * 4) ||
                   memcmp(x->rem_values, y->rem_values, r * 4) || (!x->rem_codes) != (!y->rem_codes) ||
                   (x->rem_codes && memcmp(x->rem_codes, y->rem_codes, (r + 1) / 2))))) {
            fprintf(stderr, "layer %d: the loaded remainder differs from the built one\n", i);
            return 0;
        }
    }
    return 1;
}

// Exports nt to path (build + write) with cfg and loads it back, checking
// that the loaded layout (and block structure) is the built one; NULL on failure (message on
// stderr). info may be NULL.
static inline sparse_model *tex_roundtrip(const net *nt, const export_cfg *cfg, const char *path,
                                          export_info *info) {
    sc_err err = {{0}};
    export_info dummy;
    sparse_model *m = export_build(nt, "synthetic", cfg, info ? info : &dummy, &err);
    const char *hist[2] = {"train: test", "export: test"};
    if (!m || export_write(path, m, hist, 2, NULL, &err) != 0) {
        fprintf(stderr, "export: %s\n", err.msg);
        sparse_model_free(m);
        return NULL;
    }
    sparse_model *ld = sparse_model_load(path, &err);
    if (!ld) fprintf(stderr, "sparse_model_load: %s\n", err.msg);
    if (ld && (!tex_same_layout(m, ld) || !tex_same_blocks(m, ld))) {
        sparse_model_free(ld);
        ld = NULL;
    }
    sparse_model_free(m);
    return ld;
}

// Dense BN-folded weights (K, cols) and bias (K) of conv/linear layer li of
// the ORIGINAL net, folding BN layer bn (-1: none), in double (caller frees).
static inline double *tex_folded(const net *nt, int li, int bn, double **bias) {
    const layer *L = &nt->layers[li];
    const ptensor *wt = &nt->tensors[L->weight];
    const size_t K = (size_t)wt->dims[0], cols = wt->count / K;
    double *w = malloc(wt->count * sizeof *w);
    *bias = malloc(K * sizeof **bias);
    const float *src = net_tensor_data(nt, L->weight);
    for (size_t k = 0; k < K; k++) {
        double b = L->bias >= 0 ? net_tensor_data(nt, L->bias)[k] : 0.0, s = 1.0, sh = b;
        if (bn >= 0) {
            const layer *B = &nt->layers[bn];
            s = net_tensor_data(nt, B->gamma)[k] / sqrt((double)net_tensor_data(nt, B->var)[k] + B->eps);
            sh = (b - net_tensor_data(nt, B->mean)[k]) * s + net_tensor_data(nt, B->beta)[k];
        }
        for (size_t c = 0; c < cols; c++) w[k * cols + c] = src[k * cols + c] * s;
        (*bias)[k] = sh;
    }
    return w;
}

// Loads path and checks the error mentions the file and `want`.
static inline void expect_load_error(tctx *t, const char *path, const char *want) {
    sc_err err = {{0}};
    sparse_model *m = sparse_model_load(path, &err);
    CHECK(t, !m, "%s loaded (expected: %s)", path, want);
    CHECK(t, strstr(err.msg, want) && strstr(err.msg, path), "message '%s' lacks '%s' or the file", err.msg, want);
    sparse_model_free(m);
}

// --- a direct forward pass from the CSR rows ----------------------------------

// One sparse layer on n inputs x (n, C, H, W): the conv through offsets into
// a zero-padded copy, bias, fused ReLU and max pool, into out.
static inline void tex_spconv(const sparse_layer *l, int n, const float *x, float *out) {
    const int Hp = l->H + 2 * l->pad, Wp = l->W + 2 * l->pad;
    float *xp = calloc((size_t)l->C * Hp * Wp, sizeof *xp);     // (C, Hp, Wp)
    float *y = malloc((size_t)l->K * l->P * l->Q * sizeof *y);  // (K, P, Q)
    pool_dims pd;
    if (l->pool_k) pool_dims_init(&pd, 1, l->K, l->P, l->Q, l->pool_k, l->pool_stride, l->pool_pad);
    const size_t osz = l->pool_k ? (size_t)l->K * pd.p * pd.q : (size_t)l->K * l->P * l->Q;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * l->C * l->H * l->W;
        for (int c = 0; c < l->C; c++)
            for (int r = 0; r < l->H; r++)
                memcpy(xp + ((size_t)c * Hp + r + l->pad) * Wp + l->pad, xi + ((size_t)c * l->H + r) * l->W,
                       (size_t)l->W * sizeof *xp);
        for (int k = 0; k < l->K; k++)
            for (int p = 0; p < l->P; p++)
                for (int q = 0; q < l->Q; q++) {
                    const float *base = xp + (size_t)p * l->stride * Wp + (size_t)q * l->stride;
                    float acc = l->bias[k];
                    for (size_t j = (size_t)k * l->nnz_row; j < (size_t)(k + 1) * l->nnz_row; j++)
                        acc += l->values[j] * base[l->offsets[j]];
                    y[((size_t)k * l->P + p) * l->Q + q] = l->relu && acc < 0 ? 0.0f : acc;
                }
        if (l->pool_k) maxpool_forward_cpu(&pd, y, out + (size_t)i * osz);
        else memcpy(out + (size_t)i * osz, y, osz * sizeof *y);
    }
    free(xp), free(y);
}

// Runs one non-sparse layer L (BN that was not folded, ReLU, pools, add).
static inline void tex_plain(const net *nt, const layer *L, int n, const float *x, const float *x2,
                             float *y) {
    const size_t hw = (size_t)L->in_h * L->in_w, sz = (size_t)L->in_c * hw * n;
    pool_dims pd;
    if (L->kind == LK_BN) {
        const float *g = net_tensor_data(nt, L->gamma), *b = net_tensor_data(nt, L->beta);
        const float *mu = net_tensor_data(nt, L->mean), *v = net_tensor_data(nt, L->var);
        for (size_t i = 0; i < sz; i++) {
            const int c = (int)((i / hw) % (size_t)L->in_c);
            y[i] = (float)(g[c] * (x[i] - mu[c]) / sqrt((double)v[c] + L->eps) + b[c]);
        }
    } else if (L->kind == LK_RELU) {
        for (size_t i = 0; i < sz; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
    } else if (L->kind == LK_ADD) {
        for (size_t i = 0; i < sz; i++) y[i] = x[i] + x2[i];
    } else if (L->kind == LK_GAP) {
        gap_forward_cpu(n, L->in_c, (int)hw, x, y);
    } else {
        pool_dims_init(&pd, n, L->in_c, L->in_h, L->in_w, L->k, L->stride, L->pad);
        if (L->kind == LK_MAXPOOL) maxpool_forward_cpu(&pd, x, y);
        else avgpool_forward_cpu(&pd, x, y);
    }
}

// Logits (n, classes) of an exported model computed from its CSR layers
// (fused BN/ReLU/pool skipped as layers of their own); caller frees.
static inline float *tex_csr_forward(const sparse_model *m, int n, const uint8_t *img) {
    const net *nt = m->nt;
    float **act = calloc((size_t)nt->nlayers, sizeof *act);
    char *fused = calloc((size_t)nt->nlayers, 1);
    float *in = malloc((size_t)n * 3 * nt->in_h * nt->in_w * sizeof *in);
    augment_normalize_cpu(n, nt->in_h, nt->in_w, img, NULL, NULL, NULL, nt->in_mean, nt->in_std, in);
    for (int i = 0; i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        if (l->bn >= 0) fused[l->bn] = 1;
        if (l->relu_layer >= 0) fused[l->relu_layer] = 1;
        if (l->pool_layer >= 0) fused[l->pool_layer] = 1;
    }
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        const float *x = L->src < 0 ? in : act[L->src];
        if (fused[i]) continue;
        const sparse_layer *l = sparse_model_find(m, i);
        const layer *O = l ? &nt->layers[l->out_layer] : L;
        float *y = malloc((size_t)n * O->c * O->h * O->w * sizeof *y);
        if (l) tex_spconv(l, n, x, y);
        else tex_plain(nt, L, n, x, L->kind == LK_ADD ? (L->srcs[1] < 0 ? in : act[L->srcs[1]]) : NULL, y);
        act[l ? l->out_layer : i] = y;
    }
    float *out = act[nt->nlayers - 1];
    act[nt->nlayers - 1] = NULL;
    for (int i = 0; i < nt->nlayers; i++) free(act[i]);
    free(act), free(fused), free(in);
    return out;
}

#endif
