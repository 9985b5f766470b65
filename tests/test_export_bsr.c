// Tests of BSR layers in export files (docs/export-format.md): nets of odd
// shapes pruned on KxC block patterns (blocks narrowed to the gcd with the
// channels, empty block rows, layers with no block and with every block,
// fp32 / fp16 / 4-bit codebook values, kept weights that are zero) are
// written as BSR and read back: the file's version, the blocks against the
// masks, the block values against the padded CSR (mapped independently from
// (r, s, c) column order), the loaded layout against the CSR export of the
// same model, and the CPU deploy plan's and the dense executor's logits of
// both exports bit for bit. Masks off the grid, non-zero weights in pruned
// blocks, N:M and unstructured models are written as CSR (version 2);
// blocks that do not tile the channels are refused; damaged BSR groups give
// one clear error.
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/deploy_plan.h"
#include "runtime/half.h"
#include "runtime/pattern.h"
#include "runtime/quant_io.h"
#include "tests/check.h"
#include "tests/h5_tamper.h"
#include "tests/export_testutil.h"

static char g_dir[256];  // the temporary directory of this run (set once in main)

// Path of a file in the temporary directory.
static const char *tpath(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

// --- quantized nets ------------------------------------------------------------

// Snaps the kept weights of every conv/linear weight to a 16-entry fp16
// codebook and records quantize's form (k-means codebooks with indices).
static quant_model *bsr_quant(net *nt) {
    sc_err err = {{0}};
    int n = 0;
    for (int i = 0; i < nt->nlayers; i++) n += nt->layers[i].kind == LK_CONV || nt->layers[i].kind == LK_LINEAR;
    quant_model *q = quant_model_new(QM_KMEANS, n, &err);
    q->k = 16, q->bits = 4;
    for (int i = 0; i < nt->nlayers; i++) {
        if (nt->layers[i].kind != LK_CONV && nt->layers[i].kind != LK_LINEAR) continue;
        const int t = nt->layers[i].weight;
        quant_tensor *qt = &q->t[q->ntensors++];
        quant_tensor_alloc(qt, nt, t, 16, 0, &err);
        for (int c = 0; c < 16; c++) qt->codebook[c] = half_to_float(half_from_float(-0.3f + 0.04f * (float)c));
        float *w = net_tensor_data(nt, t), *mk = net_tensor_mask(nt, t);
        for (size_t e = 0; e < nt->tensors[t].count; e++) {
            int c = (int)((e * 7) % 16);
            qt->indices[e] = mk[e] != 0.0f ? (uint8_t)c : 0;
            w[e] = mk[e] != 0.0f ? qt->codebook[c] : 0.0f;
        }
    }
    return q;
}

// --- checks -------------------------------------------------------------------

// Dense (K, C*R*S) values of a layer from its blocks and remainder, mapping
// each entry's (r, s, c) column here (caller frees).
static float *dense_from_blocks(const sparse_layer *l) {
    const sparse_bsr *b = &l->bsr;
    const size_t cols = (size_t)l->C * l->R * l->S;
    float *d = calloc((size_t)l->K * cols + 1, sizeof *d);
    for (int bi = 0; bi < l->K / b->kb; bi++)
        for (int64_t e = b->indptr[bi]; e < b->indptr[bi + 1]; e++)
            for (int a = 0; a < b->kb; a++)
                for (int c = 0; c < b->cb; c++) {
                    const int col = b->indices[e] * b->cb + c;  // t*C + channel
                    const int tap = col / l->C, ch = col % l->C;
                    d[(size_t)(bi * b->kb + a) * cols + (size_t)ch * l->R * l->S + tap] =
                        b->values[(e * b->kb + a) * b->cb + c];
                }
    for (int k = 0; b->nrem && k < l->K; k++)  // a hybrid layer's remainder
        for (int64_t e = b->rem_indptr[k]; e < b->rem_indptr[k + 1]; e++) {
            const int tap = b->rem_indices[e] / l->C, ch = b->rem_indices[e] % l->C;
            d[(size_t)k * cols + (size_t)ch * l->R * l->S + tap] = b->rem_values[e];
        }
    return d;
}

// Dense (K, C*R*S) values of a layer from its padded CSR (caller frees).
static float *dense_from_rows(const sparse_layer *l) {
    const size_t cols = (size_t)l->C * l->R * l->S;
    float *d = calloc((size_t)l->K * cols + 1, sizeof *d);
    for (size_t k = 0; k < (size_t)l->K; k++)
        for (size_t j = k * l->nnz_row; j < (k + 1) * (size_t)l->nnz_row; j++)
            d[k * cols + (size_t)l->indices[j]] = l->values[j];
    return d;
}

// Units of geometry g whose every entry the mask keeps (a hybrid pattern's
// whole blocks; on a plain block grid, its kept blocks).
static size_t whole_units(const sc_pattern_geom *g, const float *mk) {
    size_t *idx = malloc(g->unit_size * sizeof *idx), n = 0;
    for (size_t u = 0; u < g->units; u++) {
        sc_pattern_unit_entries(g, u, idx);
        size_t k = 0;
        for (size_t j = 0; j < g->unit_size; j++) k += mk[idx[j]] != 0.0f;
        n += k == g->unit_size;
    }
    free(idx);
    return n;
}

// Checks every layer of m (loaded from a BSR export of nt on p): its block
// is the pattern's, its blocks are the mask's whole kept blocks, its block
// (and remainder) values are its padded CSR's, and its entries are the kept weights.
static void check_blocks(tctx *t, const char *what, const net *nt, const sparse_model *m,
                         const sc_pattern *p) {
    for (int i = 0; i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        const int wt = nt->layers[l->layer].weight;
        sc_pattern_geom g;
        sc_pattern_geom_of(p, nt, wt, &g);
        CHECK(t, l->bsr.kb == g.kb && l->bsr.cb == g.cb, "%s layer %d: block %dx%d, pattern %dx%d",
              what, i, l->bsr.kb, l->bsr.cb, g.kb, g.cb);
        if (l->bsr.kb != g.kb || l->bsr.cb != g.cb || !l->bsr.kb) continue;
        const size_t kept = whole_units(&g, net_tensor_mask(nt, wt));
        long mask_ones = 0;
        for (size_t e = 0; e < nt->tensors[wt].count; e++) mask_ones += net_tensor_mask(nt, wt)[e] != 0.0f;
        CHECK(t, (size_t)l->bsr.nblocks == kept && l->nnz == mask_ones,
              "%s layer %d: %ld blocks / %ld entries, the mask keeps %zu blocks / %ld weights", what, i,
              l->bsr.nblocks, l->nnz, kept, mask_ones);
        float *a = dense_from_blocks(l), *b = dense_from_rows(l);
        const size_t n = (size_t)l->K * l->C * l->R * l->S;
        CHECK(t, !memcmp(a, b, n * sizeof *a), "%s layer %d: block values differ from the padded CSR", what, i);
        free(a), free(b);
    }
}

// The root attribute format_version of an export file (-1 when unreadable).
static int file_version(const char *path) {
    int v = -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), a = f >= 0 ? H5Aopen(f, "format_version", H5P_DEFAULT) : -1;
    if (a >= 0) H5Aread(a, H5T_NATIVE_INT, &v), H5Aclose(a);
    if (f >= 0) H5Fclose(f);
    return v;
}

// Logits (n, classes) of the CPU deploy plan of m (caller frees; NULL on failure).
static float *plan_logits(const sparse_model *m, int n, const uint8_t *img) {
    sc_err err = {{0}};
    deploy_plan *p = deploy_plan_build(m, &err);
    deploy_cpu *c = p ? deploy_cpu_create(p, n, &err) : NULL;
    float *lg = c ? malloc((size_t)n * m->nt->classes * sizeof *lg) : NULL;
    if (lg && deploy_cpu_forward(c, n, img, lg, &err) != 0) free(lg), lg = NULL;
    if (!lg) fprintf(stderr, "deploy plan: %s\n", err.msg);
    deploy_cpu_free(c);
    deploy_plan_free(p);
    return lg;
}

// n random images of nt's shape (caller frees).
static uint8_t *random_images(const net *nt, int n, uint64_t seed) {
    rng g;
    rng_seed(&g, seed, 9);
    const size_t sz = (size_t)n * 3 * nt->in_h * nt->in_w;
    uint8_t *img = malloc(sz);
    for (size_t i = 0; i < sz; i++) img[i] = (uint8_t)(rng_uniform(&g) * 256.0f);
    return img;
}

// Exports nt as BSR and as CSR (--bsr off) and compares: versions, blocks,
// the CSR layouts (same_layout: byte for byte), the deploy plan's and the
// dense executor's logits (bit for bit), and the folded model's logits.
static void compare_exports(tctx *t, const char *what, net *nt, const sc_pattern *p,
                            export_cfg cfg, int same_layout) {
    char a[512], b[512];
    cfg.pattern = p;
    export_info info;
    sparse_model *mb = tex_roundtrip(nt, &cfg, tpath(a, sizeof a, "bsr.h5"), &info);
    cfg.csr_only = 1;
    sparse_model *mc = tex_roundtrip(nt, &cfg, tpath(b, sizeof b, "csr.h5"), NULL);
    CHECK(t, mb && mc, "%s: export failed", what);
    if (!mb || !mc) goto done;
    CHECK(t, info.bsr_layers == mb->nlayers && !info.bsr_notice[0], "%s: %d BSR layers of %d (%s)", what,
          info.bsr_layers, mb->nlayers, info.bsr_notice);
    CHECK(t, file_version(a) == (p->dflt.rem > 0 ? 4 : 3) && file_version(b) == 2, "%s: versions %d (BSR), %d (CSR)",
          what, file_version(a), file_version(b));
    long nrem = 0;
    for (int i = 0; i < mb->nlayers; i++) nrem += mb->layers[i].bsr.nrem;
    CHECK(t, (nrem > 0) == (p->dflt.rem > 0), "%s: %ld singles in the remainders", what, nrem);
    for (int i = 0; i < mc->nlayers; i++) CHECK(t, mc->layers[i].bsr.kb == 0, "%s: --bsr off wrote BSR", what);
    check_blocks(t, what, nt, mb, p);
    if (same_layout) CHECK(t, tex_same_layout(mb, mc), "%s: BSR layout differs from CSR's", what);
    const int n = 5;
    uint8_t *img = random_images(nt, n, 77);
    float *pb = plan_logits(mb, n, img), *pc = plan_logits(mc, n, img);
    float *eb = tex_logits(mb->nt, n, img), *ec = tex_logits(mc->nt, n, img), *want = tex_logits(nt, n, img);
    const size_t sz = (size_t)n * nt->classes * sizeof(float);
    CHECK(t, pb && pc && !memcmp(pb, pc, sz), "%s: deploy plan logits of BSR and CSR differ", what);
    CHECK(t, eb && ec && !memcmp(eb, ec, sz), "%s: executor logits of BSR and CSR differ", what);
    double e = pb && want ? relerr((size_t)n * nt->classes, pb, want) : 1.0;
    CHECK(t, e < (cfg.half ? 3e-3 : 1e-4), "%s: plan vs unfolded net relative error %.3g", what, e);
    free(img), free(pb), free(pc), free(eb), free(ec), free(want);
done:
    sparse_model_free(mb);
    sparse_model_free(mc);
}

// --- tests ----------------------------------------------------------------------

// BSR round trips over patterns (narrowed blocks), value types and densities,
// with an empty block row, a layer with every block and one with none.
static void test_roundtrip(tctx *t) {
    const char *pats[] = {"16x8", "8x1", "4x4", "3x2"};
    for (int pi = 0; pi < 4; pi++)
        for (int v = 0; v < 3; v++)
            for (int d = 0; d < 2; d++) {
                sc_err err = {{0}};
                sc_pattern p;
                CHECK(t, sc_pattern_parse(pats[pi], &p, &err) == 0, "%s", err.msg);
                net *nt = tex_block_net(&p, d ? 0.1f : 0.5f, d, 100 + 10 * pi + v);
                quant_model *q = v == 2 ? bsr_quant(nt) : NULL;
                export_cfg cfg = {.half = v == 1, .quant = q};
                char what[96];
                snprintf(what, sizeof what, "%s %s keep %.1f", pats[pi], v == 0 ? "fp32" : v == 1 ? "fp16" : "codebook4",
                         d ? 0.1 : 0.5);
                compare_exports(t, what, nt, &p, cfg, 1);
                quant_model_free(q);
                net_free(nt);
            }
}

// Kept weights that are zero (as linear quantization rounds small ones) are
// explicit zeros of their blocks: still BSR, counted in nnz; the deploy
// logits equal the CSR export's (which drops them) bit for bit.
static void test_kept_zeros(tctx *t) {
    sc_err err = {{0}};
    sc_pattern p;
    sc_pattern_parse("4x4", &p, &err);
    net *nt = tex_block_net(&p, 0.6f, 0, 31);
    int zeroed = 0;
    for (int i = 0; i < nt->nlayers; i++) {
        if (nt->layers[i].kind != LK_CONV) continue;
        const int wt = nt->layers[i].weight;
        float *w = net_tensor_data(nt, wt), *mk = net_tensor_mask(nt, wt);
        for (size_t e = 0; e < nt->tensors[wt].count; e += 7)
            if (mk[e] != 0.0f) w[e] = 0.0f, zeroed++;
    }
    CHECK(t, zeroed > 10, "only %d kept weights zeroed", zeroed);
    compare_exports(t, "kept zeros", nt, &p, (export_cfg){0}, 0);
    net_free(nt);
}

// Exports nt on pattern s (cfg's other fields as given) and returns the
// number of BSR layers; notice gets the export's bsr_notice.
static int bsr_count(net *nt, const char *s, export_cfg cfg, char *notice, size_t len) {
    sc_err err = {{0}};
    sc_pattern p;
    if (sc_pattern_parse(s, &p, &err) != 0) return -1;
    cfg.pattern = &p;
    export_info info;
    sparse_model *m = export_build(nt, "", &cfg, &info, &err);
    int n = m ? info.bsr_layers : -1;
    if (notice) snprintf(notice, len, "%s", info.bsr_notice);
    sparse_model_free(m);
    return n;
}

// Layers off their grid, with a non-zero weight in a pruned block, or with a
// kept zero their derived codebook cannot code fall back to CSR with a
// notice naming them; N:M and unstructured models are all CSR (version 2).
static void test_fallbacks(tctx *t) {
    sc_err err = {{0}};
    sc_pattern p;
    sc_pattern_parse("4x4", &p, &err);
    net *nt = tex_block_net(&p, 0.5f, 0, 41);
    const int c2 = nt->layers[3].weight;  // c2: (20, 12, 3, 3), blocks 4x4
    char notice[320];
    float *mk = net_tensor_mask(nt, c2), *w = net_tensor_data(nt, c2);
    size_t e = 0;
    while (mk[e] == 0.0f) e++;
    mk[e] = 0.0f, w[e] = 0.0f;  // a kept block loses one entry
    CHECK(t, bsr_count(nt, "4x4", (export_cfg){0}, notice, sizeof notice) == 3 && strstr(notice, "layer c2") &&
             strstr(notice, "off its 4x4 block grid"), "off the grid: %s", notice);
    mk[e] = 1.0f, w[e] = 0.5f;
    CHECK(t, bsr_count(nt, "4x4", (export_cfg){0}, notice, sizeof notice) == 4 && !notice[0], "restored: %s", notice);
    size_t z = 0;
    while (mk[z] != 0.0f) z++;
    w[z] = 0.25f;  // a pruned block holds a weight
    CHECK(t, bsr_count(nt, "4x4", (export_cfg){0}, notice, sizeof notice) == 3 && strstr(notice, "layer c2") &&
             strstr(notice, "holds a non-zero weight"), "weight in a pruned block: %s", notice);
    w[z] = 0.0f;
    CHECK(t, bsr_count(nt, "2:4", (export_cfg){0}, NULL, 0) == 0 &&
             bsr_count(nt, "unstructured", (export_cfg){0}, NULL, 0) == 0, "N:M or unstructured wrote BSR");
    net_free(nt);
    // derived codebooks (--codebook on): a kept zero has no code
    nt = tex_block_net(&p, 0.5f, 0, 43);
    quant_model_free(bsr_quant(nt));  // at most 16 distinct values per layer
    export_cfg on = {.codebook = EXPORT_CB_ON};
    CHECK(t, bsr_count(nt, "4x4", on, notice, sizeof notice) == 4, "derived codebooks: %s", notice);
    w = net_tensor_data(nt, c2), mk = net_tensor_mask(nt, c2);
    for (e = 0; mk[e] == 0.0f;) e++;
    w[e] = 0.0f;
    CHECK(t, bsr_count(nt, "4x4", on, notice, sizeof notice) == 3 && strstr(notice, "no code"),
          "kept zero, derived codebook: %s", notice);
    net_free(nt);
}

// Keeps each pruned weight of every conv/linear layer with probability p
// (value random, non-zero): single weights beside the blocks, as a hybrid
// pattern's masks hold them. Returns how many.
static int add_singles(net *nt, float p, uint64_t seed) {
    rng g;
    rng_seed(&g, seed, 13);
    int n = 0;
    for (int i = 0; i < nt->nlayers; i++) {
        if (nt->layers[i].kind != LK_CONV && nt->layers[i].kind != LK_LINEAR) continue;
        const int wt = nt->layers[i].weight;
        float *w = net_tensor_data(nt, wt), *mk = net_tensor_mask(nt, wt);
        for (size_t e = 0; e < nt->tensors[wt].count; e++)
            if (mk[e] == 0.0f && rng_uniform(&g) < p) mk[e] = 1.0f, w[e] = 0.1f + 0.5f * rng_uniform(&g), n++;
    }
    return n;
}

// Hybrid layers (KxC+F): BSR of the whole kept blocks plus a CSR remainder of
// the singles (format version 4), read back alike; blocks and remainder are
// the padded CSR's entries, and the deploy plan's and executor's logits equal
// the CSR export's bit for bit, in fp32, fp16 and 4-bit codebooks.
static void test_hybrid(tctx *t) {
    const char *pats[] = {"4x4+0.2", "3x2+0.1"};
    for (int pi = 0; pi < 2; pi++)
        for (int v = 0; v < 3; v++) {
            sc_err err = {{0}};
            sc_pattern p;
            CHECK(t, sc_pattern_parse(pats[pi], &p, &err) == 0, "%s", err.msg);
            net *nt = tex_block_net(&p, 0.4f, 0, 500 + 10 * pi + v);
            CHECK(t, add_singles(nt, 0.08f, 600 + pi) > 20, "%s: too few singles", pats[pi]);
            quant_model *q = v == 2 ? bsr_quant(nt) : NULL;
            export_cfg cfg = {.half = v == 1, .quant = q};
            char what[96];
            snprintf(what, sizeof what, "hybrid %s %s", pats[pi], v == 0 ? "fp32" : v == 1 ? "fp16" : "codebook4");
            compare_exports(t, what, nt, &p, cfg, 1);
            quant_model_free(q);
            net_free(nt);
        }
}

// sparse_bsr_build refuses blocks that do not tile the channels (C not a
// multiple of cb, K not of kb) and entries that are not whole blocks (hybrid:
// puts them in the remainder instead).
static void test_build_refusals(tctx *t) {
    sc_err err = {{0}};
    sc_pattern p;
    sc_pattern_parse("4x4", &p, &err);
    net *nt = tex_block_net(&p, 0.5f, 0, 51);
    export_cfg cfg = {.pattern = &p};
    export_info info;
    sparse_model *m = export_build(nt, "", &cfg, &info, &err);
    CHECK(t, m && info.bsr_layers == 4, "export: %s", err.msg);
    if (!m) goto done;
    sparse_layer *l = &m->layers[1];  // c2: K 20, C 12
    CHECK(t, sparse_bsr_build(l, 4, 4, 0, &err) == 0 && l->bsr.kb == 4, "rebuild 4x4: %s", err.msg);
    CHECK(t, sparse_bsr_build(l, 4, 8, 0, &err) != 0 && strstr(err.msg, "do not tile") && l->bsr.kb == 0,
          "C 12 not a multiple of 8: %s", err.msg);
    CHECK(t, sparse_bsr_build(l, 8, 4, 0, &err) != 0 && strstr(err.msg, "do not tile"), "K 20 not a multiple of 8");
    CHECK(t, sparse_bsr_build(l, 4, 6, 0, &err) != 0 && strstr(err.msg, "not on the grid"),
          "4x4 blocks are not whole 4x6 blocks: %s", err.msg);
    CHECK(t, sparse_bsr_build(l, 2, 2, 0, &err) == 0 && l->bsr.nblocks > 0, "2x2 (finer grid): %s", err.msg);
    // hybrid: the whole 4x6 blocks stay blocks, every other entry goes to the remainder
    CHECK(t, sparse_bsr_build(l, 4, 6, 1, &err) == 0 && l->bsr.kb == 4 && l->bsr.nrem > 0 &&
             l->bsr.nblocks * 24 + l->bsr.nrem == l->nnz, "hybrid 4x6: %ld blocks, %ld singles of %ld: %s",
          l->bsr.nblocks, l->bsr.nrem, l->nnz, err.msg);
    CHECK(t, sparse_bsr_build(l, 4, 4, 1, &err) == 0 && l->bsr.nrem == 0, "hybrid on the grid: %ld singles",
          l->bsr.nrem);
done:
    sparse_model_free(m);
    net_free(nt);
}

// Damaged BSR groups give one clear error naming the file; an older
// reader's version (2) with a BSR group is refused.
static void test_bad_files(tctx *t) {
    char good[512], p[512];
    sc_err err = {{0}};
    sc_pattern pat;
    sc_pattern_parse("4x4", &pat, &err);
    net *nt = tex_block_net(&pat, 0.5f, 0, 61);
    quant_model *q = bsr_quant(nt);
    export_cfg cfg = {.pattern = &pat, .quant = q};
    sparse_model *m = tex_roundtrip(nt, &cfg, tpath(good, sizeof good, "good.h5"), NULL);
    CHECK(t, m && m->layers[1].bsr.kb == 4, "export failed");
    sparse_model_free(m);
    const struct { const char *what, *want; } cases[] = {
        {"version 2", "/layers/conv1 is a bsr_matrix in a format version 2 file"},
        {"blocksize", "/layers/c2 attribute blocksize (3, 3) does not tile 20 output x 12 input channels"},
        {"block index", "/layers/c2/indices[1] = "},
        {"indptr", "/layers/fc/indptr[1] = "},
        {"encoding", "/layers/c3 attribute encoding-type is 'coo_matrix'"},
        {"nnz", "/layers/c3 attribute nnz = 5 is not a whole number of 4 x 4 blocks"},
        {"version 5", "export format version 5 is not read by this build (it reads versions 2 to 4)"}};
    for (int i = 0; i < 7; i++) {
        snprintf(p, sizeof p, "%s/bad%d.h5", g_dir, i);
        tamper_copy(good, p);
        if (i == 0) tamper_attr_int(p, "/", "format_version", 2);
        if (i == 1) tamper_attr_int(p, "/layers/c2", "blocksize", 3);
        if (i == 2) tamper_int(p, "/layers/c2/indices", 1, 1000);
        if (i == 3) tamper_int(p, "/layers/fc/indptr", 1, 1000);
        if (i == 4) tamper_attr(p, "/layers/c3", "encoding-type", "coo_matrix");
        if (i == 5) tamper_attr_int(p, "/layers/c3", "nnz", 5);
        if (i == 6) tamper_attr_int(p, "/", "format_version", 5);
        expect_load_error(t, p, cases[i].want);
    }
    quant_model_free(q);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_export_bsr"};
    if (tex_dir_make(g_dir, sizeof g_dir) != 0) {
        printf("test_export_bsr: cannot make a temporary directory\n");
        return 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    RUN(&t, test_roundtrip);
    RUN(&t, test_kept_zeros);
    RUN(&t, test_hybrid);
    RUN(&t, test_fallbacks);
    RUN(&t, test_build_refusals);
    RUN(&t, test_bad_files);
    tex_dir_remove(g_dir);
    return check_finish(&t);
}
