// Tests of the HDF5 model files: exact round trips, atomic writes, and a
// clear error naming the file for every kind of damaged or foreign file.
#include <dirent.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/model_io.h"
#include "tests/check.h"
#include "tests/h5_strings.h"
#include "tests/h5_tamper.h"

static const char *DESC = "conv 4 3 pad=1 bias=0\nbn\nrelu\nconv 6 3 stride=2\ngap\nlinear classes\n";

static char g_dir[256];  // a fresh temporary directory for this run

// --- helpers ----------------------------------------------------------------

// Joins the temp dir and a file name into a static-per-call buffer.
static const char *tmp_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

// Builds the small test net (awkward 3x7x9 input, 5 classes) with random
// parameters, masks with zeros and random BN buffers.
static net *make_net(uint64_t seed) {
    sc_err err = {{0}};
    net *nt = net_from_desc("tiny", DESC, 3, 7, 9, 5, &err);
    if (!nt) {
        fprintf(stderr, "net_from_desc: %s\n", err.msg);
        return NULL;
    }
    rng r;
    rng_seed(&r, seed, 0);
    for (size_t i = 0; i < nt->nparam; i++) nt->param[i] = rng_normal(&r);
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        float *d = net_tensor_data(nt, t);
        if (!p->trainable)
            for (size_t i = 0; i < p->count; i++) d[i] = 0.1f + rng_uniform(&r);
        if (!p->prunable) continue;
        float *m = net_tensor_mask(nt, t);
        for (size_t i = 0; i < p->count; i++)
            if (rng_uniform(&r) < 0.4f) m[i] = 0.0f, d[i] = 0.0f;
    }
    for (int c = 0; c < 3; c++) nt->in_mean[c] = rng_uniform(&r), nt->in_std[c] = rng_uniform(&r);
    return nt;
}

// Fills a meta with every field set to something recognisable.
static void make_meta(model_meta *m, const net *nt, uint64_t seed) {
    sc_err err;
    model_meta_init(m);
    snprintf(m->dataset, sizeof m->dataset, "data/my cifar");
    m->epoch = 7;
    m->epochs_total = 30;
    m->step = 123456789012L;
    m->seed = 0xfedcba9876543210ULL;
    rng_seed(&m->rng_state, seed, 3);
    m->config = strdup("{\"lr\": 0.4, \"model\": \"tiny\", \"note\": \"a \\\"quoted\\\" word\"}");
    m->val_accuracy = 41.25;
    m->test_accuracy = 40.5;
    model_meta_add_history(m, "train --model tiny synthetic", &err);
    model_meta_add_history(m, "", &err);
    model_meta_add_history(m, "prune --population 8 (\xc3\xa9l\xc3\xa8ve)\nsecond line", &err);
    m->momentum = malloc(nt->nparam * sizeof(float));
    rng r;
    rng_seed(&r, seed, 9);
    for (size_t i = 0; i < nt->nparam; i++) m->momentum[i] = rng_normal(&r);
}

// Saves a fresh net+meta to name inside the temp dir; returns 0 on success.
static int save_good(const char *path) {
    net *nt = make_net(11);
    model_meta m;
    make_meta(&m, nt, 11);
    sc_err err = {{0}};
    int rc = model_save(path, nt, &m, &err);
    if (rc) fprintf(stderr, "model_save: %s\n", err.msg);
    net_free(nt);
    model_meta_free(&m);
    return rc;
}

// Copies the first n bytes of src to dst (n < 0: everything).
static int copy_file(const char *src, const char *dst, long n) {
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    if (!a || !b) return -1;
    char buf[4096];
    size_t k;
    long done = 0;
    while ((k = fread(buf, 1, sizeof buf, a)) > 0) {
        if (n >= 0 && done + (long)k > n) k = (size_t)(n - done);
        fwrite(buf, 1, k, b);
        done += (long)k;
        if (n >= 0 && done >= n) break;
    }
    fclose(a);
    return fclose(b);
}

// Loads path and checks that it fails with a message naming path and containing want.
static void expect_load_error(tctx *t, const char *path, const char *want) {
    sc_err err = {{0}};
    model_meta m;
    net *nt = model_load(path, &m, &err);
    CHECK(t, nt == NULL, "loading %s should fail", path);
    CHECK(t, strstr(err.msg, path) != NULL, "message does not name the file: %s", err.msg);
    CHECK(t, strstr(err.msg, want) != NULL, "message lacks '%s': %s", want, err.msg);
    CHECK(t, m.history == NULL && m.config == NULL && m.momentum == NULL, "meta not reset");
    net_free(nt);
}

// Opens a copy of a good file for editing with the raw HDF5 API.
static hid_t edit_copy(const char *good, const char *path) {
    if (copy_file(good, path, -1) != 0) return -1;
    return H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
}

// Writes a float dataset of the given dims (for corrupting copies).
static void put_floats(hid_t loc, const char *name, int nd, const hsize_t *dims) {
    hid_t sp = H5Screate_simple(nd, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(sp);
}

// --- tests ------------------------------------------------------------------

// Everything saved comes back bitwise equal.
static void test_round_trip(tctx *t) {
    char path[512];
    tmp_path(path, sizeof path, "rt.h5");
    net *a = make_net(5);
    CHECK(t, a != NULL, "net");
    if (!a) return;
    model_meta ma, mb;
    make_meta(&ma, a, 5);
    sc_err err = {{0}};
    CHECK(t, model_save(path, a, &ma, &err) == 0, "save: %s", err.msg);
    net *b = model_load(path, &mb, &err);
    CHECK(t, b != NULL, "load: %s", err.msg);
    if (b) {
        CHECK(t, !strcmp(a->arch, b->arch) && !strcmp(a->desc, b->desc), "arch/desc");
        CHECK(t, b->in_c == 3 && b->in_h == 7 && b->in_w == 9 && b->classes == 5, "shape");
        CHECK(t, a->nparam == b->nparam && a->nbuf == b->nbuf, "sizes");
        CHECK(t, !memcmp(a->param, b->param, a->nparam * sizeof(float)), "params differ");
        CHECK(t, !memcmp(a->mask, b->mask, a->nparam * sizeof(float)), "masks differ");
        CHECK(t, !memcmp(a->buf, b->buf, a->nbuf * sizeof(float)), "buffers differ");
        CHECK(t, !memcmp(a->in_mean, b->in_mean, sizeof a->in_mean), "mean");
        CHECK(t, !memcmp(a->in_std, b->in_std, sizeof a->in_std), "std");
        CHECK(t, net_sparsity(a) > 0.1 && net_sparsity(a) == net_sparsity(b), "sparsity");
        CHECK(t, mb.momentum && !memcmp(ma.momentum, mb.momentum, a->nparam * sizeof(float)),
              "momentum differs");
        CHECK(t, !strcmp(ma.dataset, mb.dataset), "dataset %s", mb.dataset);
        CHECK(t, mb.epoch == 7 && mb.epochs_total == 30 && mb.step == 123456789012L, "counters");
        CHECK(t, mb.seed == ma.seed && !memcmp(&ma.rng_state, &mb.rng_state, sizeof ma.rng_state),
              "seed/rng");
        CHECK(t, mb.val_accuracy == 41.25 && mb.test_accuracy == 40.5, "accuracies");
        CHECK(t, mb.config && !strcmp(ma.config, mb.config), "config %s", mb.config);
        CHECK(t, mb.nhistory == 3, "history has %d lines", mb.nhistory);
        for (int i = 0; i < mb.nhistory && i < 3; i++)
            CHECK(t, !strcmp(ma.history[i], mb.history[i]), "history line %d: %s", i,
                  mb.history[i]);
        CHECK(t, strchr(ma.history[2], '\n') == NULL, "newline kept in history");
    }
    net_free(a);
    net_free(b);
    model_meta_free(&ma);
    model_meta_free(&mb);
}

// Without meta the file still loads, with "unknown" state and no momentum.
static void test_no_meta(tctx *t) {
    char path[512];
    tmp_path(path, sizeof path, "nometa.h5");
    net *a = make_net(6);
    sc_err err = {{0}};
    CHECK(t, model_save(path, a, NULL, &err) == 0, "save: %s", err.msg);
    model_meta m;
    net *b = model_load(path, &m, &err);
    CHECK(t, b != NULL, "load: %s", err.msg);
    CHECK(t, m.val_accuracy == -1 && m.test_accuracy == -1 && !m.momentum && !m.config, "meta");
    CHECK(t, m.nhistory == 0 && m.dataset[0] == 0, "history %d", m.nhistory);
    if (b) CHECK(t, !memcmp(a->param, b->param, a->nparam * sizeof(float)), "params");
    net *c = model_load(path, NULL, &err);
    CHECK(t, c != NULL, "load without meta: %s", err.msg);
    net_free(a);
    net_free(b);
    net_free(c);
    model_meta_free(&m);
}

// A built-in architecture with dotted tensor names round-trips too.
static void test_builtin_arch(tctx *t) {
    char path[512];
    tmp_path(path, sizeof path, "resnet20.h5");
    sc_err err = {{0}};
    net *a = net_create("resnet20", 3, 32, 32, 100, &err);
    CHECK(t, a != NULL, "net_create: %s", err.msg);
    if (!a) return;
    rng r;
    rng_seed(&r, 1, 1);
    net_init_weights(a, &r);
    CHECK(t, model_save(path, a, NULL, &err) == 0, "save: %s", err.msg);
    net *b = model_load(path, NULL, &err);
    CHECK(t, b != NULL, "load: %s", err.msg);
    if (b) {
        CHECK(t, b->ntensors == a->ntensors && !strcmp(b->arch, "resnet20"), "tensors");
        CHECK(t, !memcmp(a->param, b->param, a->nparam * sizeof(float)), "params");
    }
    net_free(a);
    net_free(b);
}

// Saving leaves no temporary file; overwriting replaces the old file.
static void test_atomic(tctx *t) {
    char path[512];
    tmp_path(path, sizeof path, "atomic.h5");
    CHECK(t, save_good(path) == 0, "first save");
    CHECK(t, save_good(path) == 0, "overwrite");
    DIR *d = opendir(g_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        CHECK(t, strstr(e->d_name, ".tmp.") == NULL, "temporary file left: %s", e->d_name);
    if (d) closedir(d);
    sc_err err = {{0}};
    net *nt = model_load(path, NULL, &err);
    CHECK(t, nt != NULL, "load after overwrite: %s", err.msg);
    net_free(nt);
}

// Saving into a directory that does not exist fails and names it.
static void test_missing_dir(tctx *t) {
    char path[512];
    tmp_path(path, sizeof path, "no/such/dir/m.h5");
    net *a = make_net(1);
    sc_err err = {{0}};
    CHECK(t, model_save(path, a, NULL, &err) != 0, "save should fail");
    CHECK(t, strstr(err.msg, "no/such/dir") != NULL, "message: %s", err.msg);
    net_free(a);
}

// Foreign, empty, truncated and missing files each give a clear error.
static void test_bad_files(tctx *t) {
    char good[512], path[512];
    tmp_path(good, sizeof good, "good.h5");
    CHECK(t, save_good(good) == 0, "save");
    FILE *f = fopen(tmp_path(path, sizeof path, "text.h5"), "w");
    fputs("this is not HDF5 at all\n", f);
    fclose(f);
    expect_load_error(t, path, "not an HDF5 file");
    fclose(fopen(tmp_path(path, sizeof path, "empty.h5"), "w"));
    expect_load_error(t, path, "not an HDF5 file");
    struct stat st;
    stat(good, &st);
    long cuts[] = {st.st_size / 2, st.st_size - 100, 600};
    for (int i = 0; i < 3; i++) {
        copy_file(good, tmp_path(path, sizeof path, "trunc.h5"), cuts[i]);
        expect_load_error(t, path, "truncated");
    }
    expect_load_error(t, tmp_path(path, sizeof path, "absent.h5"), "No such file");
}

// Files with parts missing, wrong shapes or foreign content name the part.
static void test_damaged_parts(tctx *t) {
    char good[512], path[512];
    tmp_path(good, sizeof good, "good2.h5");
    CHECK(t, save_good(good) == 0, "save");
    // tensor names come from net.c: take them from a fresh net
    net *nt = make_net(1);
    char miss[128];
    snprintf(miss, sizeof miss, "/params/%s", nt->tensors[nt->ntensors - 1].name);
    hid_t f = edit_copy(good, tmp_path(path, sizeof path, "noparam.h5"));
    H5Ldelete(f, miss, H5P_DEFAULT);
    tamper_close(f);
    expect_load_error(t, path, miss);

    const ptensor *w = &nt->tensors[0];  // first conv weight, (4, 3, 3, 3)
    snprintf(miss, sizeof miss, "/params/%s", w->name);
    f = edit_copy(good, tmp_path(path, sizeof path, "wrongdims.h5"));
    H5Ldelete(f, miss, H5P_DEFAULT);
    hsize_t dims[4] = {4, 3, 3, 2};
    put_floats(f, miss, 4, dims);
    tamper_close(f);
    expect_load_error(t, path, "has shape (4, 3, 3, 2), the net needs (4, 3, 3, 3)");

    f = edit_copy(good, tmp_path(path, sizeof path, "extra.h5"));
    put_floats(f, "/params/stray.weight", 1, dims);
    tamper_close(f);
    expect_load_error(t, path, "/params holds");

    f = edit_copy(good, tmp_path(path, sizeof path, "nomasks.h5"));
    H5Ldelete(f, "/masks", H5P_DEFAULT);
    tamper_close(f);
    expect_load_error(t, path, "lacks /masks");

    f = edit_copy(good, tmp_path(path, sizeof path, "nostate.h5"));
    H5Adelete(f, "in_h");
    tamper_close(f);
    expect_load_error(t, path, "in_h");

    f = edit_copy(good, tmp_path(path, sizeof path, "format.h5"));
    H5Adelete(f, "format");
    tamper_close(f);
    expect_load_error(t, path, "not a sparsecnn model");

    f = edit_copy(good, tmp_path(path, sizeof path, "nohist.h5"));
    H5Ldelete(f, "/history", H5P_DEFAULT);
    tamper_close(f);
    expect_load_error(t, path, "lacks /history");

    f = edit_copy(good, tmp_path(path, sizeof path, "baddesc.h5"));
    H5Ldelete(f, "/net/description", H5P_DEFAULT);
    tamper_close(f);
    expect_load_error(t, path, "lacks /net/description");
    net_free(nt);
}

// A mask value other than 0 and 1 is rejected.
static void test_bad_mask(tctx *t) {
    char good[512], path[512];
    tmp_path(good, sizeof good, "good3.h5");
    CHECK(t, save_good(good) == 0, "save");
    net *nt = make_net(1);
    int w = -1;
    for (int i = 0; i < nt->ntensors && w < 0; i++)
        if (nt->tensors[i].prunable) w = i;
    char name[128];
    snprintf(name, sizeof name, "/masks/%s", nt->tensors[w].name);
    hid_t f = edit_copy(good, tmp_path(path, sizeof path, "badmask.h5"));
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    uint8_t *m = calloc(nt->tensors[w].count, 1);
    m[nt->tensors[w].count - 1] = 7;
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, m);
    H5Dclose(d);
    tamper_close(f);
    expect_load_error(t, path, "mask value 7");
    free(m);
    net_free(nt);
}

// Loads path and checks that its strings equal those of the model in good.
static void same_strings(tctx *t, const char *good, const char *path) {
    sc_err e1 = {{0}}, e2 = {{0}};
    model_meta a, b;
    net *na = model_load(good, &a, &e1), *nb = model_load(path, &b, &e2);
    CHECK(t, na && nb, "load: %s / %s", e1.msg, e2.msg);
    if (na && nb) {
        CHECK(t, !strcmp(na->desc, nb->desc) && !strcmp(na->arch, nb->arch), "net differs");
        CHECK(t, !strcmp(a.dataset, b.dataset), "dataset '%s' vs '%s'", a.dataset, b.dataset);
        CHECK(t, a.config && b.config && !strcmp(a.config, b.config), "config differs");
        CHECK(t, a.nhistory == b.nhistory, "%d vs %d history lines", a.nhistory, b.nhistory);
        for (int i = 0; i < a.nhistory && i < b.nhistory; i++)
            CHECK(t, !strcmp(a.history[i], b.history[i]), "history line %d differs", i);
    }
    if (na) model_meta_free(&a);
    if (nb) model_meta_free(&b);
    net_free(na), net_free(nb);
}

// Written strings are fixed-length; a file of an earlier version (every
// string variable-length, with or without a checksum block) loads with the
// same strings; a variable-length string is refused by a reader whose file
// did not go through the checksum check at open.
static void test_string_types(tctx *t) {
    char good[512], vl[512], old[512];
    tmp_path(good, sizeof good, "str.h5");
    tmp_path(vl, sizeof vl, "str_vlen.h5");
    tmp_path(old, sizeof old, "str_old.h5");
    CHECK(t, save_good(good) == 0, "save");
    int n = 0, nv = -1;
    CHECK(t, h5s_count(good, &n, &nv) == 0 && n >= 6 && nv == 0, "%d strings, %d variable", n, nv);
    CHECK(t, copy_file(good, vl, -1) == 0 && h5s_to_vlen(vl) == n, "variable-length copy");
    CHECK(t, h5s_count(vl, &n, &nv) == 0 && nv == n, "%d strings, %d variable", n, nv);
    same_strings(t, good, vl);
    CHECK(t, h5s_copy_unsealed(good, old) == 0 && h5s_to_vlen(old) == n, "older file");
    same_strings(t, good, old);
    sc_err err = {{0}};
    h5io io = {.path = vl, .err = &err, .file = H5Fopen(vl, H5F_ACC_RDONLY, H5P_DEFAULT)};
    hid_t a = H5Aopen(io.file, "format", H5P_DEFAULT);
    char *s = h5io_str_read(&io, a, 1, "attribute format of /");
    CHECK(t, !s && strstr(err.msg, "variable-length string in a file not checked"), "%s", err.msg);
    free(s);
    io.checked = 1;  // as h5io_file_open_as sets it after the checksum verified
    s = h5io_str_read(&io, a, 1, "attribute format of /");
    CHECK(t, s && !strcmp(s, "sparsecnn-model"), "read '%s' (%s)", s ? s : "(null)", err.msg);
    free(s);
    H5Aclose(a), H5Fclose(io.file);
}

// A file without a checksum (read unverified) whose superblock declares
// an end of file past its size, or 32-byte addresses, is refused before
// libhdf5 parses it (fuzzing: such 130-byte files made libhdf5 allocate
// 2-4 GB); the file as written loads.
static void test_legacy_superblock(tctx *t) {
    char good[512], old[512];
    tmp_path(good, sizeof good, "sb.h5");
    tmp_path(old, sizeof old, "sb_old.h5");
    CHECK(t, save_good(good) == 0 && h5s_copy_unsealed(good, old) == 0, "older file");
    sc_err err = {{0}};
    model_meta m;
    net *nt = model_load(old, &m, &err);
    CHECK(t, nt != NULL, "the older file loads: %s", err.msg);
    if (nt) model_meta_free(&m);
    net_free(nt);
    FILE *f = fopen(old, "r+b");
    unsigned char sb[16] = {0};
    CHECK(t, f && fread(sb, 1, 16, f) == 16 && sb[8] <= 1 && sb[13] == 8, "superblock v%d", sb[8]);
    unsigned char eof[8] = {0, 0, 0, 0, 0, 0, 0, 0x40};  // 2^62: past the file's end
    if (f) {
        fseek(f, 40, SEEK_SET);  // v0: base, free space, then the end-of-file address
        fwrite(eof, 1, sizeof eof, f);
        fclose(f);
    }
    expect_load_error(t, old, "superblock addresses: base 0, end of file 4611686018427387904");
    f = fopen(old, "r+b");
    if (f) {
        fseek(f, 13, SEEK_SET);
        fputc(32, f);
        fclose(f);
    }
    expect_load_error(t, old, "superblock version 0 with 32-byte addresses");
}

// Removes the temporary directory and what is in it.
static void cleanup_dir(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    char p[600];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(g_dir);
}

int main(void) {
    tctx t = {.suite = "test_model_io"};
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/sc_model_io_XXXXXX", tmp);
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // the tests' own corrupting calls stay quiet
    RUN(&t, test_round_trip);
    RUN(&t, test_no_meta);
    RUN(&t, test_builtin_arch);
    RUN(&t, test_atomic);
    RUN(&t, test_missing_dir);
    RUN(&t, test_bad_files);
    RUN(&t, test_damaged_parts);
    RUN(&t, test_bad_mask);
    RUN(&t, test_string_types);
    RUN(&t, test_legacy_superblock);
    cleanup_dir();
    return check_finish(&t);
}
