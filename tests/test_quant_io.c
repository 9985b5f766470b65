// Tests of the /quant group of quantized model files: every method round-
// trips exactly through quant_model_save / model_load / quant_load, a file
// without /quant gives NULL, and a file whose /params no longer match its
// /quant, or whose /quant is damaged, is refused with a clear message.
// k-means with row scales (version 2) round-trips too; files without them
// stay version 1 and load with no row scales.
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gsl/gsl_errno.h>

#include "quantize/apply.h"
#include "runtime/model_io.h"
#include "runtime/quant_io.h"
#include "tests/testutil.h"
#include "tests/h5_tamper.h"

static const char *DESC = "conv 5 3 pad=1 bias=0 name=c1\nbn name=b1\nrelu\n"
                          "conv 7 3 stride=2 name=c2\ngap\nlinear classes name=fc\n";

// --- helpers --------------------------------------------------------------------

// A small net (awkward 3x7x9 input, 5 classes), random weights, ~half pruned.
static net *make_net(uint64_t seed) {
    sc_err err = {{0}};
    net *nt = net_from_desc("tiny", DESC, 3, 7, 9, 5, &err);
    if (!nt) return NULL;
    tnet_randomize(nt, seed, 1);
    rng r;
    rng_seed(&r, seed, 4);
    for (int k = 0; k < nt->ntensors; k++) {
        if (!nt->tensors[k].prunable) continue;
        float *w = net_tensor_data(nt, k), *m = net_tensor_mask(nt, k);
        for (size_t i = 0; i < nt->tensors[k].count; i++)
            if (rng_uniform(&r) < 0.5f) m[i] = 0.0f, w[i] = 0.0f;
    }
    return nt;
}

// A fresh temporary directory and a file path in it.
static void tmp_file(char *dir, size_t dlen, char *path, size_t plen, const char *name) {
    snprintf(dir, dlen, "/tmp/test_quant_io.XXXXXX");
    if (!mkdtemp(dir)) dir[0] = 0;
    snprintf(path, plen, "%s/%s", dir, name);
}

// Removes the file and the directory.
static void tmp_clean(const char *dir, const char *path) {
    unlink(path);
    rmdir(dir);
}

// Configuration number m: k-means fp16 / fp32, linear 8 per channel
// asymmetric / 16 per layer symmetric, half, k-means with row scales fp16
// (k 16) / fp32 (k 5).
static quant_cfg cfg_of(int m) {
    const int km = m < 2 || m >= 5, fp16 = m == 0 || m == 5;
    quant_cfg c = {.method = km ? QM_KMEANS : m < 4 ? QM_LINEAR : QM_HALF,
                   .codebook_fp16 = fp16, .seed = 5};
    c.km = (kmeans_cfg){.k = fp16 ? 16 : 5, .init = KM_INIT_KPP, .max_iter = 50, .fp16 = fp16,
                        .row_scale = m >= 5};
    c.lin = (linear_cfg){.bits = m == 2 ? 8 : 16, .symmetric = m == 3, .per_channel = m == 2,
                         .clip = LQ_CLIP_MSE, .bins = 128};
    return c;
}

// Compares two quantized tensors field by field.
static void same_tensor(tctx *t, const quant_model *q, const quant_tensor *a, const quant_tensor *b) {
    CHECK(t, a->tensor == b->tensor && a->count == b->count && !strcmp(a->name, b->name),
          "tensor %s vs %s", a->name, b->name);
    if (q->method == QM_KMEANS) {
        CHECK(t, a->k == b->k && !memcmp(a->codebook, b->codebook, (size_t)a->k * sizeof(float)),
              "%s: codebook differs", a->name);
        CHECK(t, !memcmp(a->indices, b->indices, a->count), "%s: indices differ", a->name);
        CHECK(t, a->nrows == b->nrows && !a->row_scale == !b->row_scale, "%s: row scales %d vs %d",
              a->name, a->nrows, b->nrows);
        CHECK(t, !a->row_scale || !b->row_scale ||
                 !memcmp(a->row_scale, b->row_scale, (size_t)a->nrows * sizeof(float)),
              "%s: row scales differ", a->name);
    }
    if (q->method == QM_LINEAR) {
        CHECK(t, a->nscale == b->nscale, "%s: %d vs %d scales", a->name, a->nscale, b->nscale);
        CHECK(t, !memcmp(a->scale, b->scale, (size_t)a->nscale * sizeof(float)) &&
                 !memcmp(a->zero_point, b->zero_point, (size_t)a->nscale * sizeof(int32_t)),
              "%s: scales or zero points differ", a->name);
        CHECK(t, !memcmp(a->q, b->q, a->count * sizeof(int16_t)), "%s: integers differ", a->name);
    }
}

// --- round trips ------------------------------------------------------------------

// The int attribute /quant/<name> of a file (-1 when unreadable).
static int quant_attr(const char *path, const char *name) {
    int v = -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    if (H5Aexists_by_name(f, "quant", name, H5P_DEFAULT) > 0) {
        hid_t a = H5Aopen_by_name(f, "quant", name, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0 && H5Aread(a, H5T_NATIVE_INT, &v) < 0) v = -1;
        if (a >= 0) H5Aclose(a);
    }
    tamper_close(f);
    return v;
}

// Saves, loads and compares one configuration.
static void roundtrip(tctx *t, int m) {
    char dir[64], path[128];
    tmp_file(dir, sizeof dir, path, sizeof path, "q.h5");
    net *nt = make_net(20 + m);
    quant_cfg c = cfg_of(m);
    quant_model *q = NULL, *back = NULL;
    sc_err err = {{0}};
    CHECK(t, quant_net_apply(nt, &c, &q, &err) == 0, "apply: %s", err.msg);
    CHECK(t, q && quant_model_save(path, nt, NULL, q, &err) == 0, "save: %s", err.msg);
    net *n2 = model_load(path, NULL, &err);
    CHECK(t, n2 != NULL, "model_load: %s", err.msg);
    if (n2) {
        CHECK(t, !memcmp(n2->param, nt->param, nt->nparam * sizeof(float)), "params differ");
        CHECK(t, quant_load(path, n2, &back, &err) == 0 && back, "quant_load %d: %s", m, err.msg);
    }
    if (q && back) {
        CHECK(t, back->method == q->method && back->bits == q->bits && back->k == q->k &&
                 back->ntensors == q->ntensors, "header differs (method %d)", m);
        CHECK(t, back->method != QM_KMEANS || back->codebook_fp16 == q->codebook_fp16, "codebook type");
        CHECK(t, back->row_scale == (m >= 5) && q->row_scale == (m >= 5), "row_scale flag %d: %d",
              m, back->row_scale);
        CHECK(t, quant_attr(path, "version") == (m >= 5 ? 2 : 1), "version %d",
              quant_attr(path, "version"));
        CHECK(t, (quant_attr(path, "row_scale") == 1) == (m >= 5), "row_scale attribute");
        CHECK(t, back->method != QM_LINEAR ||
                 (back->per_channel == q->per_channel && back->symmetric == q->symmetric), "linear flags");
        for (int i = 0; i < q->ntensors && i < back->ntensors; i++) same_tensor(t, q, &q->t[i], &back->t[i]);
    }
    quant_model_free(q), quant_model_free(back);
    net_free(nt), net_free(n2);
    tmp_clean(dir, path);
}

// Every method round-trips exactly.
static void test_roundtrip_all(tctx *t) {
    for (int m = 0; m < 7; m++) roundtrip(t, m);
}

// A plain model file has no /quant: NULL and no error.
static void test_no_quant(tctx *t) {
    char dir[64], path[128];
    tmp_file(dir, sizeof dir, path, sizeof path, "plain.h5");
    net *nt = make_net(3);
    quant_model *q = (quant_model *)1;
    sc_err err = {{0}};
    CHECK(t, model_save(path, nt, NULL, &err) == 0, "%s", err.msg);
    CHECK(t, quant_load(path, nt, &q, &err) == 0 && q == NULL, "quant_load: %s", err.msg);
    net_free(nt);
    tmp_clean(dir, path);
}

// /params changed after quantization: refused, naming the tensor.
static void test_stale_params(tctx *t) {
    char dir[64], path[128];
    tmp_file(dir, sizeof dir, path, sizeof path, "stale.h5");
    net *nt = make_net(4);
    quant_cfg c = cfg_of(0);
    quant_model *q = NULL, *back = NULL;
    sc_err err = {{0}};
    CHECK(t, quant_net_apply(nt, &c, &q, &err) == 0, "%s", err.msg);
    int k = net_tensor_find(nt, "c2.weight");
    float *w = net_tensor_data(nt, k), *m = net_tensor_mask(nt, k);
    size_t i = 0;
    while (m[i] == 0.0f) i++;
    w[i] += 0.001f;  // a kept weight no longer equal to its centroid
    CHECK(t, quant_model_save(path, nt, NULL, q, &err) == 0, "%s", err.msg);
    CHECK(t, quant_load(path, nt, &back, &err) != 0 && back == NULL, "stale params accepted");
    CHECK(t, strstr(err.msg, "c2.weight") && strstr(err.msg, path), "message: %s", err.msg);
    quant_model_free(q);
    net_free(nt);
    tmp_clean(dir, path);
}

// Overwrites /quant/<name>/indices[0] with a value beyond the codebook.
static int poke_index(const char *path, const char *name, uint8_t v) {
    char dset[128];
    snprintf(dset, sizeof dset, "/quant/%s/indices", name);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return -1;
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    uint8_t *buf = NULL;
    int rc = -1;
    if (d >= 0) {
        hid_t sp = H5Dget_space(d);
        hssize_t n = H5Sget_simple_extent_npoints(sp);
        buf = malloc((size_t)n);
        if (H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0) {
            buf[0] = v;
            rc = H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0 ? -1 : 0;
        }
        H5Sclose(sp);
        H5Dclose(d);
    }
    free(buf);
    tamper_close(f);
    return rc;
}

// An index beyond the codebook is refused, naming the dataset.
static void test_bad_index(tctx *t) {
    char dir[64], path[128];
    tmp_file(dir, sizeof dir, path, sizeof path, "badidx.h5");
    net *nt = make_net(6);
    quant_cfg c = cfg_of(1);  // k = 5
    quant_model *q = NULL, *back = NULL;
    sc_err err = {{0}};
    CHECK(t, quant_net_apply(nt, &c, &q, &err) == 0, "%s", err.msg);
    CHECK(t, quant_model_save(path, nt, NULL, q, &err) == 0, "%s", err.msg);
    CHECK(t, poke_index(path, "fc.weight", 200) == 0, "could not edit the file");
    CHECK(t, quant_load(path, nt, &back, &err) != 0 && back == NULL, "bad index accepted");
    CHECK(t, strstr(err.msg, "/quant/fc.weight/indices"), "message: %s", err.msg);
    quant_model_free(q);
    net_free(nt);
    tmp_clean(dir, path);
}

// Overwrites /quant/<name>/row_scale[0] with v (converted to the file's type).
static int poke_row_scale(const char *path, const char *name, float v) {
    char dset[128];
    snprintf(dset, sizeof dset, "/quant/%s/row_scale", name);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return -1;
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    float *buf = NULL;
    int rc = -1;
    if (d >= 0) {
        hid_t sp = H5Dget_space(d);
        hssize_t n = H5Sget_simple_extent_npoints(sp);
        buf = malloc((size_t)n * sizeof *buf);
        if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0) {
            buf[0] = v;
            rc = H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0 ? -1 : 0;
        }
        H5Sclose(sp);
        H5Dclose(d);
    }
    free(buf);
    tamper_close(f);
    return rc;
}

// A row scale that is not positive, or that no longer decodes to /params,
// is refused naming the tensor.
static void test_bad_row_scale(tctx *t) {
    const float bad[2] = {-0.5f, 1000.0f};
    for (int b = 0; b < 2; b++) {
        char dir[64], path[128];
        tmp_file(dir, sizeof dir, path, sizeof path, "badscale.h5");
        net *nt = make_net(8 + b);
        quant_cfg c = cfg_of(5);
        quant_model *q = NULL, *back = NULL;
        sc_err err = {{0}};
        CHECK(t, quant_net_apply(nt, &c, &q, &err) == 0, "%s", err.msg);
        CHECK(t, quant_model_save(path, nt, NULL, q, &err) == 0, "%s", err.msg);
        CHECK(t, poke_row_scale(path, "c2.weight", bad[b]) == 0, "could not edit the file");
        CHECK(t, quant_load(path, nt, &back, &err) != 0 && back == NULL, "row scale %g accepted",
              bad[b]);
        CHECK(t, strstr(err.msg, b ? "does not decode" : "/quant/c2.weight/row_scale") &&
                 strstr(err.msg, "c2.weight"), "message: %s", err.msg);
        quant_model_free(q);
        net_free(nt);
        tmp_clean(dir, path);
    }
}

// Saving into a missing directory fails and leaves nothing behind.
static void test_save_missing_dir(tctx *t) {
    net *nt = make_net(7);
    quant_cfg c = cfg_of(4);
    quant_model *q = NULL;
    sc_err err = {{0}};
    CHECK(t, quant_net_apply(nt, &c, &q, &err) == 0, "%s", err.msg);
    CHECK(t, quant_model_save("/tmp/no/such/dir/q.h5", nt, NULL, q, &err) != 0, "saved");
    CHECK(t, strstr(err.msg, "no/such/dir"), "message: %s", err.msg);
    quant_model_free(q);
    net_free(nt);
}

int main(void) {
    gsl_set_error_handler_off();
    tctx t = {.suite = "test_quant_io"};
    RUN(&t, test_roundtrip_all);
    RUN(&t, test_no_quant);
    RUN(&t, test_stale_params);
    RUN(&t, test_bad_index);
    RUN(&t, test_bad_row_scale);
    RUN(&t, test_save_missing_dir);
    return check_finish(&t);
}
