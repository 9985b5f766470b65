// Tests of the export file beyond plain values: 4-bit codebook layers (from
// quantize's k-means codebooks and derived from distinct values; full
// 16-entry codebooks with padded rows; layers quantize left alone; k-means
// with row scales, whose exported values are the quantized weights bit for
// bit without BN and times the folded BN scale with it), the
// codebook errors and notices, and one clear error naming the file for
// every kind of damaged, tampered or foreign file given to the loader.
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "quantize/apply.h"
#include "runtime/half.h"
#include "runtime/model_io.h"
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

// --- quantized nets -----------------------------------------------------------

// Snaps every non-zero weight of tensor t to the nearest of k fp16-exact
// values spread over the tensor's range; fills cb (k) and, when idx is not
// NULL, each weight's index (0 for zeros).
static void snap_tensor(net *nt, int t, int k, float *cb, uint8_t *idx) {
    const ptensor *p = &nt->tensors[t];
    float *w = net_tensor_data(nt, t), lo = 0, hi = 0;
    for (size_t i = 0; i < p->count; i++) lo = fminf(lo, w[i]), hi = fmaxf(hi, w[i]);
    for (int c = 0; c < k; c++) {
        float v = lo + (hi - lo) * (c + 0.5f) / k;
        cb[c] = half_to_float(half_from_float(v == 0.0f ? 1e-3f : v));
    }
    for (size_t i = 0; i < p->count; i++) {
        int best = 0;
        for (int c = 1; c < k; c++) best = fabsf(w[i] - cb[c]) < fabsf(w[i] - cb[best]) ? c : best;
        if (idx) idx[i] = w[i] != 0.0f ? (uint8_t)best : 0;
        if (w[i] != 0.0f) w[i] = cb[best];
    }
}

// A quant_model of k-means codebooks of k entries for every prunable weight
// of nt (snapping the weights); the first conv is left alone.
static quant_model *make_quant(net *nt, int k) {
    sc_err err = {{0}};
    int n = 0;
    for (int t = 0; t < nt->ntensors; t++) n += nt->tensors[t].prunable;
    quant_model *q = quant_model_new(QM_KMEANS, n, &err);
    q->k = k, q->bits = k <= 16 ? 4 : 8;
    for (int t = 0; t < nt->ntensors; t++) {
        if (!nt->tensors[t].prunable) continue;
        quant_tensor *qt = &q->t[q->ntensors++];
        quant_tensor_alloc(qt, nt, t, k, 0, &err);
        snap_tensor(nt, t, k, qt->codebook, qt->indices);
    }
    return q;
}

// Checks codebook layers: codes and padding mask decode to the values, the
// mask marks exactly the explicit zeros.
static void check_codes(tctx *t, const sparse_model *m) {
    for (int i = 0; i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        if (l->vtype != SV_CODEBOOK4) continue;
        long real = 0, bad = 0;
        for (size_t j = 0; j < (size_t)l->K * l->nnz_row; j++) {
            int pad = (l->pad_mask[j / 8] >> (j % 8)) & 1, code = (l->codes[j / 2] >> (4 * (j % 2))) & 15;
            real += !pad;
            float want = pad ? 0.0f : l->codebook[code] * l->row_scale[j / (size_t)l->nnz_row];
            bad += l->values[j] != want || (!pad && code >= l->ncodebook);
        }
        CHECK(t, real == l->nnz && bad == 0, "layer %d: %ld real (nnz %ld), %ld bad codes", i, real,
              l->nnz, bad);
    }
}

// quantize's 16-entry codebooks (full: no code left for zero) with padded
// rows: codebook layers for the quantized tensors, fp32 for the first conv,
// values exact, logits within 1e-5 and the same predictions.
static void test_codebook_quant(tctx *t) {
    char p[512], out[512];
    net *nt = tex_net("tinyres", TEX_RES_DESC, 13, 11, 7);
    tex_randomize(nt, 14, 0.75f, 1);
    quant_model *q = make_quant(nt, 16);
    model_meta meta;
    model_meta_init(&meta);
    sc_err err = {{0}};
    CHECK(t, quant_model_save(tpath(p, sizeof p, "q.h5"), nt, &meta, q, &err) == 0, "save: %s", err.msg);
    model_meta_free(&meta);
    quant_model_free(q);
    q = NULL;
    net *ld = model_load(p, NULL, &err);
    CHECK(t, ld && quant_load(p, ld, &q, &err) == 0 && q, "load: %s", err.msg);
    export_cfg cfg = {.quant = q};
    export_info info;
    sparse_model *m = ld ? tex_roundtrip(ld, &cfg, tpath(out, sizeof out, "q.csr.h5"), &info) : NULL;
    CHECK(t, m != NULL, "export failed");
    if (m) {
        CHECK(t, m->vtype == SV_CODEBOOK4 && info.codebook_layers == 5 && !info.notice[0],
              "vtype %d, %d codebook layers, notice '%s'", m->vtype, info.codebook_layers, info.notice);
        CHECK(t, m->layers[0].vtype == SV_FP32 && !m->layers[0].codes, "the first conv is not fp32");
        int full = 0;
        for (int i = 1; i < m->nlayers; i++) full += m->layers[i].ncodebook == 16 && m->layers[i].nnz < (long)m->layers[i].K * m->layers[i].nnz_row;
        CHECK(t, full > 0, "no full codebook with padded rows was tested");
        check_codes(t, m);
        tbatch tb;
        tbatch_make(&tb, 20, 13, 11, 7, 15, 1, 0, 0);
        float *want = tex_logits(ld, 20, tb.img), *got = tex_logits(m->nt, 20, tb.img);
        float *direct = tex_csr_forward(m, 20, tb.img);
        double e1 = relerr(140, got, want), e2 = relerr(140, direct, want);
        CHECK(t, e1 <= 1e-5 && e2 <= 1e-5, "rel err %.3g / %.3g", e1, e2);
        CHECK(t, tex_pred_diff(got, want, 20, 7) == 0, "predictions differ");
        printf("  codebook4 (quantize, k=16): %d codebook layers, worst logit rel err %.2g\n",
               info.codebook_layers, fmax(e1, e2));
        free(want), free(got), free(direct);
        tbatch_free(&tb);
    }
    sparse_model_free(m);
    quant_model_free(q);
    net_free(ld);
    net_free(nt);
}

// Scales row k of every prunable weight of nt by exp(u), u in [-2, 2].
static void skew_rows(net *nt, uint64_t seed) {
    rng g;
    rng_seed(&g, seed, 4);
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        if (!p->prunable) continue;
        float *w = net_tensor_data(nt, t);
        const size_t per = p->count / (size_t)p->dims[0];
        for (int k = 0; k < p->dims[0]; k++) {
            const float f = expf(4.0f * rng_uniform(&g) - 2.0f);
            for (size_t i = (size_t)k * per; i < (size_t)(k + 1) * per; i++) w[i] *= f;
        }
    }
}

// Checks the codebook layers of m against the quantized net ld and its
// row-scaled q: codebook = quantize's, row_scale = quantize's times the BN
// scale (exactly quantize's without BN), and without BN every real entry's
// value is the quantized weight bit for bit.
static void check_rows_export(tctx *t, const net *ld, const quant_model *q, const sparse_model *m) {
    for (int i = 0; i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        if (l->vtype != SV_CODEBOOK4) continue;
        const layer *L = &ld->layers[l->layer];
        const quant_tensor *qt = NULL;
        for (int j = 0; j < q->ntensors; j++)
            if (q->t[j].tensor == L->weight) qt = &q->t[j];
        CHECK(t, qt && qt->row_scale, "%s: no row-scaled quant tensor", L->name);
        if (!qt || !qt->row_scale) continue;
        CHECK(t, l->ncodebook == qt->k && !memcmp(l->codebook, qt->codebook, (size_t)qt->k * sizeof(float)),
              "%s: codebook is not quantize's", L->name);
        const float *w = net_tensor_data(ld, L->weight);
        const int cols = l->C * l->R * l->S;
        long bad_s = 0, bad_v = 0;
        for (int k = 0; k < l->K; k++) {
            double bn = 1.0;
            if (l->bn >= 0) {
                const layer *B = &ld->layers[l->bn];
                bn = net_tensor_data(ld, B->gamma)[k] / sqrt((double)net_tensor_data(ld, B->var)[k] + B->eps);
            }
            bad_s += fabs(l->row_scale[k] - qt->row_scale[k] * bn) > 1e-6 * fabs(qt->row_scale[k] * bn) ||
                     (l->bn < 0 && l->row_scale[k] != qt->row_scale[k]);
            for (int j = k * l->nnz_row; l->bn < 0 && j < (k + 1) * l->nnz_row; j++) {
                const float want = w[(size_t)k * cols + l->indices[j]];
                bad_v += memcmp(&l->values[j], &want, sizeof want) != 0;
            }
        }
        CHECK(t, bad_s == 0, "%s: %ld row scales are not quantize's times the BN scale", L->name, bad_s);
        CHECK(t, bad_v == 0, "%s: %ld values differ from the quantized weights", L->name, bad_v);
    }
}

// quantize --row-scale (k 16, fp16) on LeNet (no BN: exact values) and the
// residual net (BN folded into the row scales): codebook layers decode to
// the quantized weights, logits within 1e-5, the same predictions.
static void test_codebook_rows(tctx *t) {
    for (int v = 0; v < 2; v++) {
        char p[512], out[512];
        net *nt = v ? tex_net("tinyres", TEX_RES_DESC, 13, 11, 7) : tex_net("lenet", NULL, 32, 32, 10);
        tex_randomize(nt, 40 + v, 0.75f, 1);
        skew_rows(nt, 40 + v);
        quant_cfg qc = {.method = QM_KMEANS, .codebook_fp16 = 1, .skip_first = 1, .seed = 2,
                        .km = {.k = 16, .init = KM_INIT_BEST, .max_iter = 100, .fp16 = 1, .row_scale = 1}};
        quant_model *q = NULL;
        model_meta meta;
        model_meta_init(&meta);
        sc_err err = {{0}};
        CHECK(t, quant_net_apply(nt, &qc, &q, &err) == 0, "quantize: %s", err.msg);
        CHECK(t, q && quant_model_save(tpath(p, sizeof p, "rows.h5"), nt, &meta, q, &err) == 0,
              "save: %s", err.msg);
        model_meta_free(&meta);
        quant_model_free(q);
        q = NULL;
        net *ld = model_load(p, NULL, &err);
        CHECK(t, ld && quant_load(p, ld, &q, &err) == 0 && q && q->row_scale, "load: %s", err.msg);
        export_cfg cfg = {.quant = q};
        export_info info;
        sparse_model *m = ld && q ? tex_roundtrip(ld, &cfg, tpath(out, sizeof out, "rows.csr.h5"), &info) : NULL;
        CHECK(t, m != NULL, "export failed");
        if (m) {
            CHECK(t, m->vtype == SV_CODEBOOK4 && info.codebook_layers == m->nlayers - 1,
                  "vtype %d, %d codebook layers of %d", m->vtype, info.codebook_layers, m->nlayers);
            check_codes(t, m);
            check_rows_export(t, ld, q, m);
            const int h = v ? 13 : 32, w = v ? 11 : 32, classes = v ? 7 : 10;
            tbatch tb;
            tbatch_make(&tb, 20, h, w, classes, 15, 1, 0, 0);
            float *want = tex_logits(ld, 20, tb.img), *got = tex_logits(m->nt, 20, tb.img);
            float *direct = tex_csr_forward(m, 20, tb.img);
            double e1 = relerr((size_t)20 * classes, got, want), e2 = relerr((size_t)20 * classes, direct, want);
            CHECK(t, e1 <= 1e-5 && e2 <= 1e-5, "rel err %.3g / %.3g", e1, e2);
            CHECK(t, tex_pred_diff(got, want, 20, classes) == 0, "predictions differ");
            printf("  codebook4 (quantize --row-scale, k=16, %s): %d codebook layers, worst logit rel err %.2g\n",
                   v ? "BN folded" : "no BN", info.codebook_layers, fmax(e1, e2));
            free(want), free(got), free(direct);
            tbatch_free(&tb);
        }
        sparse_model_free(m);
        quant_model_free(q);
        net_free(ld);
        net_free(nt);
    }
}

// --codebook on derives codebooks from distinct values (the first conv too
// when it has few); more than 16 values is an error; auto leaves a layer
// with 32 centroids in plain values with a notice, on refuses it.
static void test_codebook_modes(tctx *t) {
    char p[512];
    sc_err err = {{0}};
    export_info info;
    net *nt = tex_net("lenet", NULL, 32, 32, 10);
    tex_randomize(nt, 15, 0.6f, 0);
    export_cfg on = {.codebook = EXPORT_CB_ON};
    sparse_model *m = export_build(nt, "", &on, &info, &err);
    CHECK(t, !m && strstr(err.msg, "layer conv1 has 450 distinct values; run quantize --centroids 16 first"),
          "error: %s", err.msg);
    sparse_model_free(m);
    float cb[16];
    for (int i = 0; i < nt->ntensors; i++)
        if (nt->tensors[i].kind == PT_WEIGHT) snap_tensor(nt, i, i == 0 ? 5 : 16, cb, NULL);
    m = tex_roundtrip(nt, &on, tpath(p, sizeof p, "on.h5"), &info);
    CHECK(t, m && m->vtype == SV_CODEBOOK4 && info.codebook_layers == 5, "derived codebooks");
    if (m) {
        CHECK(t, m->layers[0].ncodebook == 5 && m->layers[1].ncodebook == 16, "codebook sizes %d %d",
              m->layers[0].ncodebook, m->layers[1].ncodebook);
        check_codes(t, m);
        tbatch tb;
        tbatch_make(&tb, 8, 32, 32, 10, 16, 1, 0, 0);
        float *want = tex_logits(nt, 8, tb.img), *got = tex_logits(m->nt, 8, tb.img);
        CHECK(t, relerr(80, got, want) <= 1e-5, "rel err %.3g", relerr(80, got, want));
        free(want), free(got);
        tbatch_free(&tb);
    }
    sparse_model_free(m);
    net_free(nt);
    nt = tex_net("lenet", NULL, 32, 32, 10);
    tex_randomize(nt, 16, 0.6f, 0);
    snap_tensor(nt, 0, 5, cb, NULL);  // conv1: few values, so on mode reaches conv2
    quant_model *q = make_quant(nt, 32);
    export_cfg cfg = {.quant = q, .half = 1};
    m = export_build(nt, "", &cfg, &info, &err);
    CHECK(t, m && m->vtype == SV_FP16 && info.codebook_layers == 0 &&
             strstr(info.notice, "layer conv2 has 32 centroids"), "auto with k=32: notice '%s'", info.notice);
    sparse_model_free(m);
    cfg.codebook = EXPORT_CB_ON;
    m = export_build(nt, "", &cfg, &info, &err);
    CHECK(t, !m && strstr(err.msg, "32 centroids"), "on with k=32: %s", err.msg);
    sparse_model_free(m);
    quant_model_free(q);
    net_free(nt);
}

// --- damaged and foreign files ------------------------------------------------------

// A codebook file with a NaN in a codebook or a row scale is refused.
static void test_bad_codebook(tctx *t) {
    char good[512], p[512];
    net *nt = tex_net("tinyres", TEX_RES_DESC, 13, 11, 7);
    tex_randomize(nt, 19, 0.7f, 0);
    quant_model *q = make_quant(nt, 8);
    export_cfg cfg = {.quant = q};
    sparse_model *m = tex_roundtrip(nt, &cfg, tpath(good, sizeof good, "cb.h5"), NULL);
    CHECK(t, m && m->layers[1].vtype == SV_CODEBOOK4, "codebook export failed");
    sparse_model_free(m);
    quant_model_free(q);
    tamper_copy(good, tpath(p, sizeof p, "cb_nan1.h5"));
    tamper_nan(p, "/layers/b.conv1/codebook", 3);
    expect_load_error(t, p, "tensor /layers/b.conv1/codebook holds NaN/Inf at index 3");
    tamper_copy(good, tpath(p, sizeof p, "cb_nan2.h5"));
    tamper_nan(p, "/layers/b.conv2/row_scale", 4);
    expect_load_error(t, p, "tensor /layers/b.conv2/row_scale holds NaN/Inf at index 4");
    net_free(nt);
}

// Every kind of bad file gives an error naming the file and the part.
static void test_bad_files(tctx *t) {
    char good[512], p[512];
    net *nt = tex_net("tinyres", TEX_RES_DESC, 13, 11, 7);
    tex_randomize(nt, 17, 0.7f, 0);
    export_cfg cfg = {0};
    sparse_model *m = tex_roundtrip(nt, &cfg, tpath(good, sizeof good, "good.h5"), NULL);
    CHECK(t, m != NULL, "export failed");
    sparse_model_free(m);
    expect_load_error(t, tpath(p, sizeof p, "missing.h5"), "cannot read export file");
    FILE *f = fopen(tpath(p, sizeof p, "junk.h5"), "w");
    fputs("not an hdf5 file\n", f), fclose(f);
    expect_load_error(t, p, "not an HDF5 file");
    struct stat st;
    stat(good, &st);
    FILE *a = fopen(good, "rb"), *b = fopen(tpath(p, sizeof p, "trunc.h5"), "wb");
    char *buf = malloc((size_t)st.st_size);
    size_t got = fread(buf, 1, (size_t)st.st_size, a);
    fwrite(buf, 1, got / 2, b), fclose(a), fclose(b), free(buf);
    expect_load_error(t, p, "damaged or truncated");
    sc_err err = {{0}};
    CHECK(t, model_save(tpath(p, sizeof p, "model.h5"), nt, NULL, &err) == 0, "model_save: %s", err.msg);
    expect_load_error(t, p, "format is 'sparsecnn-model': run export on it first");
    const struct { const char *what, *want; } cases[] = {
        {"index range", "indices[1] = 255 is out of range [0, 72)"},
        {"ascending", "indices[1] = 0 is out of range [0, 72) or not ascending in row 0"},
        {"activation", "attribute activation is 'none'"},
        {"missing", "lacks /layers/fc"},
        {"indptr", "/layers/c3/indptr[1] = "},
        {"version", "export format version 1 is not read by this build (it reads versions 2 to 4)"},
        {"data NaN", "tensor /layers/b.conv2/data holds NaN/Inf at index 5"},
        {"bias NaN", "tensor /layers/fc/bias holds NaN/Inf at index 2"}};
    for (int i = 0; i < 8; i++) {
        snprintf(p, sizeof p, "%s/tampered%d.h5", g_dir, i);
        tamper_copy(good, p);
        if (i == 0) tamper_int(p, "/layers/b.conv1/indices", 1, 1000);
        if (i == 1) tamper_int(p, "/layers/b.conv1/indices", 1, -1000);
        if (i == 2) tamper_attr(p, "/layers/conv1", "activation", "none");
        if (i == 3) tamper_delete(p, "/layers/fc");
        if (i == 4) tamper_int(p, "/layers/c3/indptr", 1, -1000);
        if (i == 5) {
            hid_t h = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT), at = H5Aopen(h, "format_version", H5P_DEFAULT);
            int v = 1;
            H5Awrite(at, H5T_NATIVE_INT, &v), H5Aclose(at), tamper_close(h);
        }
        if (i == 6) tamper_nan(p, "/layers/b.conv2/data", 5);
        if (i == 7) tamper_nan(p, "/layers/fc/bias", 2);
        expect_load_error(t, p, cases[i].want);
    }
    test_bad_codebook(t);
    net_free(nt);
}

// A write into a missing directory fails and leaves nothing behind.
static void test_write_errors(tctx *t) {
    char p[512];
    net *nt = tex_net("lenet", NULL, 32, 32, 10);
    tex_randomize(nt, 18, 0.5f, 0);
    export_cfg cfg = {0};
    export_info info;
    sc_err err = {{0}};
    sparse_model *m = export_build(nt, "", &cfg, &info, &err);
    const char *h[1] = {"x"};
    CHECK(t, m && export_write(tpath(p, sizeof p, "nodir/x.h5"), m, h, 1, NULL, &err) != 0 &&
             strstr(err.msg, "directory does not exist"), "error: %s", err.msg);
    struct stat st;
    CHECK(t, stat(p, &st) != 0, "a file was left behind");
    sparse_model_free(m);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_export_io"};
    if (tex_dir_make(g_dir, sizeof g_dir) != 0) {
        printf("test_export_io: cannot make a temporary directory\n");
        return 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    RUN(&t, test_codebook_quant);
    RUN(&t, test_codebook_rows);
    RUN(&t, test_codebook_modes);
    RUN(&t, test_bad_files);
    RUN(&t, test_write_errors);
    tex_dir_remove(g_dir);
    return check_finish(&t);
}
