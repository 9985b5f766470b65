// Tests of the export: fp16 conversion, row padding, and export -> file ->
// sparse_model_load on lenet and a small residual net (BN, residual add, a
// 1x1 strided shortcut, max pool, an unfoldable BN): the CSR equals the
// BN-folded weights computed independently, offsets match the geometry,
// rows are padded with zeros next to the non-zeros, the fusion flags are the
// expected ones, and the logits of the loaded model (CPU executor on the
// folded graph, and a direct CSR forward) equal the original model's:
// within 1e-5 relative in fp32, within fp16's tolerance in fp16, with the
// same predictions on a synthetic test set.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/cifar.h"
#include "runtime/half.h"
#include "runtime/model_io.h"
#include "runtime/quant_io.h"
#include "tests/check.h"
#include "tests/export_testutil.h"

typedef struct {
    char dir[256];
} ctx;

static ctx g_ctx;  // the temporary directory of this run (set once in main)

// Path of a file in the temporary directory.
static const char *tpath(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_ctx.dir, name);
    return buf;
}

// --- fp16 -------------------------------------------------------------------

// The value of a finite half from its bit fields, computed in double (an
// independent reference for the conversions in runtime/half.c).
static double half_ref_value(uint32_t h) {
    int e = (int)((h >> 10) & 0x1fu), m = (int)(h & 0x3ffu);
    double v = e ? ldexp(1024.0 + m, e - 25) : ldexp((double)m, -24);
    return (h & 0x8000u) ? -v : v;
}

// The nearest finite positive half to a >= 0 (ties to the even mantissa), by
// bisection over the ordered positive halves; 0x7c00 (inf) beyond 65520.
static uint32_t half_ref_round(double a) {
    if (a >= 65520.0) return 0x7c00u;
    uint32_t lo = 0, hi = 0x7bffu;  // half_ref_value is increasing on [0, 0x7bff]
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (half_ref_value(mid) <= a) lo = mid;
        else hi = mid;
    }
    if (a >= half_ref_value(hi)) return hi;
    double dl = a - half_ref_value(lo), dh = half_ref_value(hi) - a;
    return dl < dh ? lo : dh < dl ? hi : (lo & 1u) ? hi : lo;
}

// Every half survives half -> float -> half and widens to its reference
// value; random floats round to the reference's nearest half.
static void test_half(tctx *t) {
    int bad = 0, wide = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00u) == 0x7c00u) continue;  // inf and NaN
        bad += half_from_float(half_to_float((uint16_t)h)) != h;
        wide += (double)half_to_float((uint16_t)h) != half_ref_value(h);
    }
    CHECK(t, bad == 0 && wide == 0, "%d halves do not round trip, %d widen wrongly", bad, wide);
    rng g;
    rng_seed(&g, 5, 0);
    int diff = 0;
    for (int i = 0; i < 200000; i++) {
        float x = ldexpf(rng_uniform(&g) - 0.5f, (int)rng_below(&g, 44) - 28);
        if (i % 7 == 0) x = half_to_float((uint16_t)rng_below(&g, 0x7c00u)) * 1.00048828125f;
        uint32_t want = half_ref_round(fabs((double)x)) | (x < 0 ? 0x8000u : 0);
        diff += half_from_float(x) != want && !(x == 0.0f && (want & 0x7fffu) == 0);
    }
    CHECK(t, diff == 0, "%d of 200000 floats round differently from the reference", diff);
    CHECK(t, isinf(half_to_float(half_from_float(70000.0f))), "70000 is not inf");
    CHECK(t, half_to_float(half_from_float(65519.0f)) == 65504.0f, "65519");
}

// --- row padding ----------------------------------------------------------------

// Key of a zero column as the padding rule orders them (same channel first,
// then distance to the nearest non-zero, then the column), brute force.
static uint64_t ref_key(const float *w, int cols, int rs, int c) {
    uint64_t best = UINT64_MAX;
    for (int u = 0; u < cols; u++) {
        if (w[u] == 0.0f) continue;
        uint64_t k = (uint64_t)(u / rs != c / rs) << 40 | (uint64_t)abs(u - c) << 20 | (uint64_t)c;
        if (k < best) best = k;
    }
    return best == UINT64_MAX ? (uint64_t)c : best;
}

// Hand-made rows and random rows: ascending, every non-zero kept, and no
// unchosen zero column nearer than a chosen one.
static void test_row_columns(tctx *t) {
    int32_t idx[64];
    uint32_t scratch[3 * 64 + 3];
    float w[64] = {0};
    w[4] = 1;
    sparse_row_columns(w, 9, 9, 3, idx, scratch);
    CHECK(t, idx[0] == 3 && idx[1] == 4 && idx[2] == 5, "got %d %d %d, want 3 4 5", idx[0], idx[1], idx[2]);
    memset(w, 0, sizeof w);
    w[2] = 1;  // channels of 3 columns: 1 and 0 (same channel) beat 3 (next channel)
    sparse_row_columns(w, 6, 3, 3, idx, scratch);
    CHECK(t, idx[0] == 0 && idx[1] == 1 && idx[2] == 2, "got %d %d %d, want 0 1 2", idx[0], idx[1], idx[2]);
    memset(w, 0, sizeof w);
    int n = sparse_row_columns(w, 10, 5, 4, idx, scratch);
    CHECK(t, n == 0 && idx[0] == 0 && idx[3] == 3, "empty row: n %d, %d..%d", n, idx[0], idx[3]);
    rng g;
    rng_seed(&g, 9, 0);
    for (int trial = 0; trial < 300; trial++) {
        const int rs = 1 + (int)rng_below(&g, 9), cols = rs * (1 + (int)rng_below(&g, 6));
        int nz = 0;
        for (int c = 0; c < cols; c++) nz += (w[c] = rng_uniform(&g) < 0.2f ? 1.0f : 0.0f) != 0;
        const int nnz_row = nz + (int)rng_below(&g, (uint32_t)(cols - nz + 1));
        CHECK(t, sparse_row_columns(w, cols, rs, nnz_row, idx, scratch) == nz, "trial %d: count", trial);
        char in[64] = {0};
        uint64_t worst_in = 0, best_out = UINT64_MAX;
        for (int j = 0; j < nnz_row; j++) {
            CHECK(t, j == 0 || idx[j] > idx[j - 1], "trial %d: not ascending at %d", trial, j);
            in[idx[j]] = 1;
        }
        for (int c = 0; c < cols; c++) {
            if (w[c] != 0.0f) {
                CHECK(t, in[c], "trial %d: non-zero column %d dropped", trial, c);
                continue;
            }
            uint64_t k = ref_key(w, cols, rs, c);
            if (in[c] && k > worst_in) worst_in = k;
            if (!in[c] && k < best_out) best_out = k;
        }
        CHECK(t, worst_in <= best_out || best_out == UINT64_MAX, "trial %d: a nearer zero column was skipped", trial);
    }
}

// --- checks of one exported model --------------------------------------------------

// Checks every layer's CSR against the original net's folded weights:
// uniform rows, ascending indices, offsets, real values and padding zeros.
static void check_csr(tctx *t, const net *orig, const sparse_model *m, double tol) {
    for (int i = 0; i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        const char *name = orig->layers[l->layer].name;
        double *bias, *w = tex_folded(orig, l->layer, l->bn, &bias);
        const float *raw = net_tensor_data(orig, orig->layers[l->layer].weight);
        const int cols = l->C * l->R * l->S, Hp = l->H + 2 * l->pad, Wp = l->W + 2 * l->pad;
        long real = 0, bad_val = 0, bad_off = 0, bad_order = 0, max_row = 0;
        for (int k = 0; k < l->K; k++) {
            long row = 0;
            for (int c = 0; c < cols; c++) row += raw[(size_t)k * cols + c] != 0.0f;
            max_row = row > max_row ? row : max_row;
            for (int j = k * l->nnz_row; j < (k + 1) * l->nnz_row; j++) {
                const int col = l->indices[j], c = col / (l->R * l->S);
                const int r = (col % (l->R * l->S)) / l->S, s = col % l->S;
                bad_order += j > k * l->nnz_row && col <= l->indices[j - 1];
                bad_off += l->offsets[j] != (l->is_linear ? col : (c * Hp + r) * Wp + s);
                const double want = w[(size_t)k * cols + col];
                real += raw[(size_t)k * cols + col] != 0.0f;
                bad_val += fabs(l->values[j] - want) > tol * fmax(fabs(want), 1e-3);
            }
            CHECK(t, fabs(l->bias[k] - bias[k]) <= 1e-5 * fmax(1.0, fabs(bias[k])), "%s bias[%d] %g vs %g",
                  name, k, (double)l->bias[k], bias[k]);
        }
        CHECK(t, l->nnz_row == max_row, "%s: nnz_row %d, longest row %ld", name, l->nnz_row, max_row);
        CHECK(t, real == l->nnz, "%s: %ld real entries, nnz %ld", name, real, l->nnz);
        CHECK(t, !bad_order && !bad_off && !bad_val, "%s: %ld unordered, %ld bad offsets, %ld bad values",
              name, bad_order, bad_off, bad_val);
        free(w), free(bias);
    }
}

// Compares the loaded model's logits (executor on the folded graph and the
// direct CSR forward) with the original's; returns the worst relative error.
static double check_logits(tctx *t, const char *what, net *orig, sparse_model *m, int n,
                           const uint8_t *img, double tol, int same_preds) {
    float *want = tex_logits(orig, n, img), *got = tex_logits(m->nt, n, img);
    float *direct = tex_csr_forward(m, n, img);
    const size_t cnt = (size_t)n * orig->classes;
    double e1 = INFINITY, e2 = INFINITY;
    if (want && got && direct) {
        e1 = relerr(cnt, got, want), e2 = relerr(cnt, direct, want);
        CHECK(t, e1 <= tol, "%s: executor on the folded net: rel err %.3g > %g", what, e1, tol);
        CHECK(t, e2 <= tol, "%s: direct CSR forward: rel err %.3g > %g", what, e2, tol);
        if (same_preds) {
            int d1 = tex_pred_diff(got, want, n, orig->classes), d2 = tex_pred_diff(direct, want, n, orig->classes);
            CHECK(t, d1 == 0 && d2 == 0, "%s: %d / %d of %d predictions differ", what, d1, d2, n);
        }
    } else {
        CHECK(t, 0, "%s: no logits", what);
    }
    free(want), free(got), free(direct);
    return fmax(e1, e2);
}

// --- whole models ---------------------------------------------------------------------

// lenet (biases, no BN, fused ReLU+pool, linears) pruned to ~70% with an
// empty row per layer: fp32 file, same predictions on a synthetic test set.
static void test_lenet_fp32(tctx *t) {
    char p[512], dd[512];
    net *nt = tex_net("lenet", NULL, 32, 32, 10);
    tex_randomize(nt, 3, 0.7f, 1);
    export_cfg cfg = {0};
    export_info info;
    sparse_model *m = tex_roundtrip(nt, &cfg, tpath(p, sizeof p, "lenet.csr.h5"), &info);
    CHECK(t, m != NULL, "export failed");
    if (m) {
        CHECK(t, info.pruned && m->vtype == SV_FP32 && m->nlayers == 5, "pruned %d vtype %d layers %d",
              info.pruned, m->vtype, m->nlayers);
        check_csr(t, nt, m, 1e-6);
        const sparse_layer *c2 = &m->layers[1];
        CHECK(t, c2->relu && c2->pool_k == 2 && c2->bn < 0 && !strcmp(nt->layers[c2->out_layer].name, "maxpool6"),
              "conv2 fusion: relu %d pool %d out %s", c2->relu, c2->pool_k, nt->layers[c2->out_layer].name);
        CHECK(t, !m->layers[4].relu && m->layers[4].is_linear, "fc3 fused a ReLU");
        dataset ds;
        sc_err err = {{0}};
        int rc = synthetic_write(g_ctx.dir, 32, 200, 10, 77, &err);
        if (rc == 0) rc = dataset_open(g_ctx.dir, NULL, 0, 1, &ds, &err);
        CHECK(t, rc == 0, "synthetic data: %s", err.msg);
        if (rc == 0) {
            double e = check_logits(t, "lenet test set", nt, m, ds.test.n, ds.test.images, 1e-5, 1);
            printf("  lenet fp32: %d test images, worst logit rel err %.2g\n", ds.test.n, e);
            dataset_free(&ds);
        }
        unlink(tpath(dd, sizeof dd, "train.bin")), unlink(tpath(dd, sizeof dd, "test.bin"));
    }
    sparse_model_free(m);
    net_free(nt);
}

// Expected fusion of the residual test net: conv layer, folded BN, fused
// ReLU, fused pool, output layer.
static void check_res_fusion(tctx *t, const sparse_model *m) {
    static const char *const want[][5] = {
        {"conv1", "bn1", "relu1", "pool1", "pool1"},  {"b.conv1", "b.bn1", "b.relu1", "-", "b.relu1"},
        {"b.conv2", "b.bn2", "-", "-", "b.bn2"},     {"b.short", "b.sbn", "-", "-", "b.sbn"},
        {"c3", "bn3", "-", "-", "bn3"},        {"fc", "-", "-", "-", "fc"}};
    const net *nt = m->nt;
    CHECK(t, m->nlayers == 6, "%d sparse layers", m->nlayers);
    for (int i = 0; i < m->nlayers && i < 6; i++) {
        const sparse_layer *l = &m->layers[i];
        const int idx[5] = {l->layer, l->bn, l->relu_layer, l->pool_layer, l->out_layer};
        for (int f = 0; f < 5; f++) {
            const char *got = idx[f] < 0 ? "-" : nt->layers[idx[f]].name;
            CHECK(t, !strcmp(got, want[i][f]), "layer %s field %d: %s, want %s", want[i][0], f, got, want[i][f]);
        }
        CHECK(t, l->relu == (l->relu_layer >= 0) && (l->pool_k > 0) == (l->pool_layer >= 0), "%s flags", want[i][0]);
    }
}

// The residual net in fp32 and fp16: fusion, CSR, logits, the unfolded BN.
static void test_resnet(tctx *t) {
    char p[512];
    net *nt = tex_net("tinyres", TEX_RES_DESC, 13, 11, 7);
    tex_randomize(nt, 4, 0.8f, 1);
    tbatch tb;
    tbatch_make(&tb, 24, 13, 11, 7, 8, 1, 0, 0);
    for (int half = 0; half <= 1; half++) {
        export_cfg cfg = {.half = half};
        sparse_model *m = tex_roundtrip(nt, &cfg, tpath(p, sizeof p, half ? "res16.h5" : "res32.h5"), NULL);
        CHECK(t, m != NULL, "export failed (half %d)", half);
        if (!m) continue;
        CHECK(t, m->vtype == (half ? SV_FP16 : SV_FP32), "vtype %d", m->vtype);
        check_res_fusion(t, m);
        check_csr(t, nt, m, half ? 1e-3 : 1e-6);
        int post = net_tensor_find(m->nt, "b.post.gamma");
        CHECK(t, post >= 0 && sparse_model_tensor_in_params(m, post) &&
                 !memcmp(net_tensor_data(m->nt, post), net_tensor_data(nt, post), 12 * sizeof(float)),
              "b.post was not kept in /params");
        double e = check_logits(t, half ? "resnet fp16" : "resnet fp32", nt, m, tb.b.n, tb.img,
                                half ? 2e-3 : 1e-5, !half);
        printf("  residual net %s: worst logit rel err %.2g\n", half ? "fp16" : "fp32", e);
        sparse_model_free(m);
    }
    tbatch_free(&tb);
    net_free(nt);
}

// fp16 on lenet: predictions agree wherever the original's top-2 margin is
// wider than twice the largest logit error.
static void test_lenet_fp16(tctx *t) {
    char p[512];
    net *nt = tex_net("lenet", NULL, 32, 32, 10);
    tex_randomize(nt, 6, 0.9f, 0);
    tbatch tb;
    tbatch_make(&tb, 64, 32, 32, 10, 12, 1, 0, 0);
    export_cfg cfg = {.half = 1};
    sparse_model *m = tex_roundtrip(nt, &cfg, tpath(p, sizeof p, "lenet16.h5"), NULL);
    float *want = tex_logits(nt, tb.b.n, tb.img), *got = m ? tex_logits(m->nt, tb.b.n, tb.img) : NULL;
    CHECK(t, m && want && got, "export or logits failed");
    if (want && got) {
        double maxerr = 0;
        for (int i = 0; i < tb.b.n * 10; i++) maxerr = fmax(maxerr, fabs(got[i] - want[i]));
        CHECK(t, relerr((size_t)tb.b.n * 10, got, want) <= 2e-3, "rel err %.3g", relerr((size_t)tb.b.n * 10, got, want));
        int bad = 0;
        for (int i = 0; i < tb.b.n; i++) {
            const float *w = want + i * 10, *g = got + i * 10;
            int a = 0, b = 0;
            for (int c = 1; c < 10; c++) a = w[c] > w[a] ? c : a, b = g[c] > g[b] ? c : b;
            float second = -INFINITY;
            for (int c = 0; c < 10; c++)
                if (c != a && w[c] > second) second = w[c];
            bad += a != b && w[a] - second > 2 * maxerr;
        }
        CHECK(t, bad == 0, "%d confident predictions changed in fp16", bad);
    }
    free(want), free(got);
    sparse_model_free(m);
    tbatch_free(&tb);
    net_free(nt);
}

// An unpruned model is exported with dense rows and flagged.
static void test_unpruned(tctx *t) {
    char p[512];
    net *nt = tex_net("lenet", NULL, 32, 32, 10);
    tex_randomize(nt, 2, 0.0f, 0);
    export_cfg cfg = {0};
    export_info info;
    sparse_model *m = tex_roundtrip(nt, &cfg, tpath(p, sizeof p, "dense.h5"), &info);
    CHECK(t, m && !info.pruned, "pruned flag %d", info.pruned);
    for (int i = 0; m && i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        CHECK(t, l->nnz_row == l->C * l->R * l->S && l->nnz == (long)l->K * l->nnz_row,
              "layer %d: nnz_row %d of %d", i, l->nnz_row, l->C * l->R * l->S);
    }
    sparse_model_free(m);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_export"};
    if (tex_dir_make(g_ctx.dir, sizeof g_ctx.dir) != 0) {
        printf("test_export: cannot make a temporary directory\n");
        return 1;
    }
    RUN(&t, test_half);
    RUN(&t, test_row_columns);
    RUN(&t, test_lenet_fp32);
    RUN(&t, test_resnet);
    RUN(&t, test_lenet_fp16);
    RUN(&t, test_unpruned);
    tex_dir_remove(g_ctx.dir);
    return check_finish(&t);
}
