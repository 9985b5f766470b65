// Tests of datasets/: both CIFAR layouts read back exactly, every bad input
// gives a one-line error naming the file, the validation split, the channel
// statistics, the synthetic generator and the batch loader. All files are
// written by the tests under a fresh temporary folder.
#define _GNU_SOURCE
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "datasets/cifar.h"
#include "datasets/loader.h"
#include "runtime/rng.h"
#include "tests/check.h"

// --- temporary files --------------------------------------------------------

// Removes one entry found by nftw.
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

// Removes a folder and everything below it.
static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

// Makes a fresh temporary folder; path receives its name.
static int tmp_make(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/sc_test_datasets_XXXXXX");
    return mkdtemp(path) ? 0 : -1;
}

// Joins dir and name into a static-free buffer out.
static void join(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

// Writes size bytes to path; returns 0 on success.
static int file_put(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t got = fwrite(data, 1, size, f);
    return (fclose(f) == 0 && got == size) ? 0 : -1;
}

// Reads a whole file into a new buffer; size receives its length.
static uint8_t *file_get(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

// Overwrites one byte of a file at offset.
static int file_poke(const char *path, long offset, uint8_t v) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    int ok = fseek(f, offset, SEEK_SET) == 0 && fputc(v, f) != EOF;
    return fclose(f) == 0 && ok ? 0 : -1;
}

// True when two files exist and hold the same bytes.
static int files_equal(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    uint8_t *x = file_get(a, &na), *y = file_get(b, &nb);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

// --- fake CIFAR files with known bytes --------------------------------------

// Image bytes of record `id` of a split tagged `tag`; the id sits in bytes 0-1.
static void fake_image(uint8_t *img, int id, int tag) {
    img[0] = (uint8_t)(id & 255);
    img[1] = (uint8_t)(id >> 8);
    img[2] = (uint8_t)tag;
    for (int k = 3; k < CIFAR_IMAGE_BYTES; k++) img[k] = (uint8_t)(id * 131 + k * 7 + tag * 13);
}

// CIFAR-10 label of record id (tag 0 train, 1 test).
static int fake_label10(int id, int tag) { return (id * 7 + 3 + tag) % 10; }

// CIFAR-100 fine label of record id, below `fine` classes.
static int fake_label100(int id, int tag, int fine) { return (id * 37 + tag) % fine; }

// Writes ids [first, first + n) as CIFAR-10 records to path.
static int fake_write10(const char *path, int first, int n, int tag) {
    uint8_t *buf = malloc((size_t)n * CIFAR10_RECORD);
    for (int i = 0; i < n; i++) {
        uint8_t *r = buf + (size_t)i * CIFAR10_RECORD;
        r[0] = (uint8_t)fake_label10(first + i, tag);
        fake_image(r + 1, first + i, tag);
    }
    int rc = file_put(path, buf, (size_t)n * CIFAR10_RECORD);
    free(buf);
    return rc;
}

// Writes a CIFAR-10 folder: 5 batches of per_batch records and a test batch.
static int fake_cifar10(const char *dir, int per_batch, int ntest) {
    char p[1200];
    mkdir(dir, 0777);
    for (int b = 1; b <= 5; b++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        join(p, sizeof p, dir, name);
        if (fake_write10(p, (b - 1) * per_batch, per_batch, 0)) return -1;
    }
    join(p, sizeof p, dir, "test_batch.bin");
    return fake_write10(p, 0, ntest, 1);
}

// Writes n CIFAR-100 records (ids 0..n-1) to path with labels below `fine`.
static int fake_write100(const char *path, int n, int tag, int fine) {
    uint8_t *buf = malloc((size_t)n * CIFAR100_RECORD);
    for (int i = 0; i < n; i++) {
        uint8_t *r = buf + (size_t)i * CIFAR100_RECORD;
        r[1] = (uint8_t)fake_label100(i, tag, fine);
        r[0] = (uint8_t)(r[1] / 5);
        fake_image(r + 2, i, tag);
    }
    int rc = file_put(path, buf, (size_t)n * CIFAR100_RECORD);
    free(buf);
    return rc;
}

// Writes a CIFAR-100 folder with train.bin and test.bin.
static int fake_cifar100(const char *dir, int ntrain, int ntest, int fine) {
    char p[1200];
    mkdir(dir, 0777);
    join(p, sizeof p, dir, "train.bin");
    if (fake_write100(p, ntrain, 0, fine)) return -1;
    join(p, sizeof p, dir, "test.bin");
    return fake_write100(p, ntest, 1, fine);
}

// Id stored in image i of a split.
static int split_id(const data_split *s, int i) {
    const uint8_t *img = s->images + (size_t)i * CIFAR_IMAGE_BYTES;
    return img[0] | img[1] << 8;
}

// True when img (3, 32, 32) is exactly fake record id of tag.
static int image_is(const uint8_t *img, int id, int tag) {
    uint8_t want[CIFAR_IMAGE_BYTES];
    fake_image(want, id, tag);
    return memcmp(img, want, CIFAR_IMAGE_BYTES) == 0;
}

// True when image i of s is exactly fake record id of tag.
static int split_image_is(const data_split *s, int i, int id, int tag) {
    return image_is(s->images + (size_t)i * CIFAR_IMAGE_BYTES, id, tag);
}

// --- reading both layouts ---------------------------------------------------

// A CIFAR-10 folder reads back byte for byte, in file order.
static void test_cifar10_roundtrip(tctx *t) {
    char tmp[256], dir[512];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(dir, sizeof dir, tmp, "c10");
    CHECK(t, fake_cifar10(dir, 7, 5) == 0, "write");
    dataset ds;
    sc_err err = {0};
    int rc = dataset_open(dir, "unused", 0, 1, &ds, &err);
    CHECK(t, rc == 0, "open failed: %s", err.msg);
    if (rc == 0) {
        CHECK(t, ds.train.n == 35 && ds.test.n == 5 && ds.val.n == 0, "counts %d %d %d", ds.train.n,
              ds.test.n, ds.val.n);
        CHECK(t, ds.classes == 10 && ds.coarse_classes == 0, "classes %d", ds.classes);
        CHECK(t, !ds.train.coarse && !ds.test.coarse, "coarse labels on CIFAR-10");
        CHECK(t, strcmp(ds.name, "c10") == 0, "name %s", ds.name);
        CHECK(t, strcmp(ds.path, dir) == 0, "path %s", ds.path);
        int bad = 0;
        for (int i = 0; i < 35; i++)
            bad += !split_image_is(&ds.train, i, i, 0) || ds.train.labels[i] != fake_label10(i, 0);
        for (int i = 0; i < 5; i++)
            bad += !split_image_is(&ds.test, i, i, 1) || ds.test.labels[i] != fake_label10(i, 1);
        CHECK(t, bad == 0, "%d records differ", bad);
    }
    dataset_free(&ds);
    rm_tree(tmp);
}

// A CIFAR-100 folder reads back with both label bytes; classes = max + 1.
static void test_cifar100_roundtrip(tctx *t) {
    char tmp[256], dir[512];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(dir, sizeof dir, tmp, "c100/");  // trailing slash: name is still "c100"
    CHECK(t, fake_cifar100(dir, 23, 9, 47) == 0, "write");
    dataset ds;
    sc_err err = {0};
    int rc = dataset_open(dir, NULL, 0, 1, &ds, &err);
    CHECK(t, rc == 0, "open failed: %s", err.msg);
    if (rc == 0) {
        CHECK(t, ds.train.n == 23 && ds.test.n == 9, "counts %d %d", ds.train.n, ds.test.n);
        CHECK(t, strcmp(ds.name, "c100") == 0, "name %s", ds.name);
        int maxl = 0;
        for (int i = 0; i < 23; i++)
            maxl = fake_label100(i, 0, 47) > maxl ? fake_label100(i, 0, 47) : maxl;
        for (int i = 0; i < 9; i++)
            maxl = fake_label100(i, 1, 47) > maxl ? fake_label100(i, 1, 47) : maxl;
        CHECK(t, ds.classes == maxl + 1, "classes %d, want %d", ds.classes, maxl + 1);
        CHECK(t, ds.coarse_classes == maxl / 5 + 1, "coarse classes %d", ds.coarse_classes);
        CHECK(t, ds.train.coarse && ds.test.coarse, "no coarse labels");
        int bad = 0;
        for (int i = 0; i < 23 && ds.train.coarse; i++) {
            int fine = fake_label100(i, 0, 47);
            bad += !split_image_is(&ds.train, i, i, 0) || ds.train.labels[i] != fine ||
                   ds.train.coarse[i] != fine / 5;
        }
        for (int i = 0; i < 9 && ds.test.coarse; i++) {
            int fine = fake_label100(i, 1, 47);
            bad += !split_image_is(&ds.test, i, i, 1) || ds.test.labels[i] != fine ||
                   ds.test.coarse[i] != fine / 5;
        }
        CHECK(t, bad == 0, "%d records differ", bad);
    }
    dataset_free(&ds);
    rm_tree(tmp);
}

// Real CIFAR-100 under data/ (when the lead has fetched it) opens fast and right.
static void test_real_cifar100(tctx *t) {
    if (access("data/cifar-100-binary/train.bin", R_OK) != 0) {
        SKIP(t, "no data/cifar-100-binary");
        return;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    dataset ds;
    sc_err err = {0};
    int rc = dataset_open("cifar100", "data", -1, 42, &ds, &err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double sec = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
    CHECK(t, rc == 0, "open failed: %s", err.msg);
    if (rc == 0) {
        CHECK(t, ds.train.n == 45000 && ds.val.n == 5000 && ds.test.n == 10000, "counts");
        CHECK(t, ds.classes == 100 && ds.coarse_classes == 20, "classes %d", ds.classes);
        CHECK(t, strcmp(ds.name, "cifar100") == 0, "name %s", ds.name);
        CHECK(t, fabsf(ds.mean[0] - 0.507f) < 0.003f && fabsf(ds.std[0] - 0.267f) < 0.003f,
              "R mean/std %g %g", ds.mean[0], ds.std[0]);
        CHECK(t, sec < 2.0, "opening took %.2f s", sec);
    }
    dataset_free(&ds);
}

// --- bad inputs -------------------------------------------------------------

// Opens spec and expects failure with a message containing both a and b.
static void expect_error(tctx *t, const char *spec, const char *data_dir, int val_size,
                         const char *a, const char *b) {
    dataset ds;
    sc_err err = {0};
    int rc = dataset_open(spec, data_dir, val_size, 1, &ds, &err);
    CHECK(t, rc == -1, "opening %s should fail", spec);
    CHECK(t, strstr(err.msg, a) && (!b || strstr(err.msg, b)), "message '%s' lacks '%s' / '%s'",
          err.msg, a, b ? b : "");
    CHECK(t, strchr(err.msg, '\n') == NULL, "message has a newline");
    CHECK(t, ds.train.n == 0 && ds.train.images == NULL, "dataset not left empty");
    if (rc == 0) dataset_free(&ds);
}

// Missing files, truncated or padded files, empty files.
static void test_bad_files(tctx *t) {
    char tmp[256], c10[512], c100[512], p[1200];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(c10, sizeof c10, tmp, "c10");
    join(c100, sizeof c100, tmp, "c100");
    fake_cifar10(c10, 4, 4);
    fake_cifar100(c100, 12, 6, 100);
    join(p, sizeof p, c10, "data_batch_3.bin");
    unlink(p);
    expect_error(t, c10, NULL, 0, "missing file", "data_batch_3.bin");
    fake_write10(p, 8, 4, 0);
    CHECK(t, truncate(p, 4 * CIFAR10_RECORD - 100) == 0, "truncate");
    expect_error(t, c10, NULL, 0, "not a whole number of 3073-byte records", "data_batch_3.bin");
    CHECK(t, truncate(p, 4 * CIFAR10_RECORD + 1) == 0, "extend");
    expect_error(t, c10, NULL, 0, "not a whole number", "data_batch_3.bin");
    CHECK(t, truncate(p, 0) == 0, "empty");
    expect_error(t, c10, NULL, 0, "empty file", "data_batch_3.bin");
    join(p, sizeof p, c100, "test.bin");
    unlink(p);
    expect_error(t, c100, NULL, 0, "missing file", "test.bin");
    fake_write100(p, 6, 1, 100);
    CHECK(t, truncate(p, 5 * CIFAR100_RECORD + 3073) == 0, "truncate");
    expect_error(t, c100, NULL, 0, "3074-byte records", "test.bin");
    rm_tree(tmp);
}

// Labels out of range in either layout, named by file and record.
static void test_bad_labels(tctx *t) {
    char tmp[256], c10[512], c100[512], p[1200];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(c10, sizeof c10, tmp, "c10");
    join(c100, sizeof c100, tmp, "c100");
    fake_cifar10(c10, 4, 6);
    fake_cifar100(c100, 12, 6, 100);
    join(p, sizeof p, c10, "test_batch.bin");
    file_poke(p, 4L * CIFAR10_RECORD, 10);
    expect_error(t, c10, NULL, 0, "label out of range", "test_batch.bin, record 4, label 10");
    join(p, sizeof p, c100, "train.bin");
    file_poke(p, 7L * CIFAR100_RECORD + 1, 100);
    expect_error(t, c100, NULL, 0, "label out of range", "train.bin, record 7, label 100");
    file_poke(p, 7L * CIFAR100_RECORD + 1, 99);
    file_poke(p, 2L * CIFAR100_RECORD, 20);
    expect_error(t, c100, NULL, 0, "coarse label out of range", "record 2, label 20");
    file_poke(p, 2L * CIFAR100_RECORD, 19);
    dataset ds;
    sc_err err = {0};
    CHECK(t, dataset_open(c100, NULL, 0, 1, &ds, &err) == 0, "fixed file fails: %s", err.msg);
    dataset_free(&ds);
    rm_tree(tmp);
}

// Names: unknown names, official counts enforced, missing official folders.
static void test_bad_names(tctx *t) {
    char tmp[256], dir[512], p[1200];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    expect_error(t, "cifar1000", tmp, 0, "unknown dataset", "cifar1000");
    expect_error(t, "", tmp, 0, "no dataset", NULL);
    expect_error(t, tmp, NULL, 0, "no CIFAR binary files in folder", tmp);
    expect_error(t, "cifar10", tmp, 0, "cifar10 not found", "download.sh");
    expect_error(t, "cifar100", tmp, 0, "cifar100 not found", "cifar-100-binary");
    join(dir, sizeof dir, tmp, "cifar-10-batches-bin");
    fake_cifar10(dir, 3, 3);
    expect_error(t, "cifar10", tmp, 0, "expected 10000 records, found 3", "data_batch_1.bin");
    join(dir, sizeof dir, tmp, "cifar-100-binary");
    fake_cifar100(dir, 5, 5, 100);
    expect_error(t, "cifar100", tmp, 0, "expected 50000 records, found 5", "train.bin");
    join(p, sizeof p, tmp, "notadir");
    file_put(p, "x", 1);
    expect_error(t, p, NULL, 0, "unknown dataset", "notadir");
    rm_tree(tmp);
}

// --- validation split -------------------------------------------------------

// Opens a folder with a given validation size and seed; returns 0 on success.
static int open_split(const char *dir, int val, uint64_t seed, dataset *ds) {
    sc_err err = {0};
    int rc = dataset_open(dir, NULL, val, seed, ds, &err);
    if (rc) fprintf(stderr, "  open: %s\n", err.msg);
    return rc;
}

// Split is disjoint, covers the training files, keeps file order, is seeded.
static void test_val_split(tctx *t) {
    char tmp[256], dir[512];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(dir, sizeof dir, tmp, "c100");
    fake_cifar100(dir, 211, 7, 100);
    dataset a, b, c;
    CHECK(t, open_split(dir, 37, 5, &a) == 0, "open a");
    CHECK(t, open_split(dir, 37, 5, &b) == 0, "open b");
    CHECK(t, open_split(dir, 37, 6, &c) == 0, "open c");
    CHECK(t, a.val.n == 37 && a.train.n == 174 && a.test.n == 7, "sizes %d %d", a.val.n, a.train.n);
    int seen[211] = {0}, bad = 0, order = 0;
    for (int i = 0; i < a.train.n; i++) {
        int id = split_id(&a.train, i);
        seen[id]++;
        bad += !split_image_is(&a.train, i, id, 0) ||
               a.train.labels[i] != fake_label100(id, 0, 100) ||
               a.train.coarse[i] != a.train.labels[i] / 5;
        order += i > 0 && id <= split_id(&a.train, i - 1);
    }
    for (int i = 0; i < a.val.n; i++) {
        int id = split_id(&a.val, i);
        seen[id]++;
        bad += !split_image_is(&a.val, i, id, 0) || a.val.labels[i] != fake_label100(id, 0, 100) ||
               a.val.coarse[i] != a.val.labels[i] / 5;
        order += i > 0 && id <= split_id(&a.val, i - 1);
    }
    int once = 0;
    for (int i = 0; i < 211; i++) once += seen[i] == 1;
    CHECK(t, once == 211, "%d of 211 images in exactly one part", once);
    CHECK(t, bad == 0 && order == 0, "%d wrong records, %d out of order", bad, order);
    int same = b.val.n == a.val.n, diff = 0;
    for (int i = 0; same && i < a.val.n; i++) same = split_id(&a.val, i) == split_id(&b.val, i);
    for (int i = 0; i < a.val.n && i < c.val.n; i++)
        diff += split_id(&a.val, i) != split_id(&c.val, i);
    CHECK(t, same, "same seed gives a different split");
    CHECK(t, diff > 0, "different seeds give the same split");
    dataset_free(&a);
    dataset_free(&b);
    dataset_free(&c);
    CHECK(t, open_split(dir, -1, 9, &a) == 0, "open default");
    CHECK(t, a.val.n == 21 && a.train.n == 190, "default split %d / %d", a.val.n, a.train.n);
    dataset_free(&a);
    expect_error(t, dir, NULL, 211, "validation split too large", "211 of 211");
    expect_error(t, dir, NULL, -2, "bad validation size", NULL);
    rm_tree(tmp);
}

// The held-out split comes out of the validation split: together they are
// the same images as the validation split without it, disjoint, in file
// order, seeded, and the training split does not change.
static void test_holdout(tctx *t) {
    char tmp[256], dir[512];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(dir, sizeof dir, tmp, "c100");
    fake_cifar100(dir, 211, 7, 100);
    dataset a, b;
    sc_err err = {0};
    CHECK(t, open_split(dir, 40, 5, &a) == 0 && open_split(dir, 40, 5, &b) == 0, "open");
    CHECK(t, dataset_carve_holdout(&b, 15, 5, &err) == 0, "carve: %s", err.msg);
    CHECK(t, b.val.n == 25 && b.holdout.n == 15 && b.train.n == a.train.n, "sizes %d %d %d",
          b.val.n, b.holdout.n, b.train.n);
    int seen[211] = {0}, order = 0, train_same = 1;
    for (int i = 0; i < a.val.n; i++) seen[split_id(&a.val, i)] = 1;
    for (int i = 0; i < b.val.n; i++) seen[split_id(&b.val, i)] += 2;
    for (int i = 0; i < b.holdout.n; i++) {
        seen[split_id(&b.holdout, i)] += 4;
        order += i > 0 && split_id(&b.holdout, i) <= split_id(&b.holdout, i - 1);
    }
    int val_ok = 0, hold_ok = 0, stray = 0;
    for (int i = 0; i < 211; i++) {
        val_ok += seen[i] == 3;
        hold_ok += seen[i] == 5;
        stray += seen[i] != 0 && seen[i] != 3 && seen[i] != 5;
    }
    for (int i = 0; i < a.train.n; i++) train_same &= split_id(&a.train, i) == split_id(&b.train, i);
    CHECK(t, val_ok == 25 && hold_ok == 15 && stray == 0, "val %d holdout %d stray %d", val_ok,
          hold_ok, stray);
    CHECK(t, order == 0 && train_same, "holdout out of order (%d) or train changed", order);
    CHECK(t, dataset_carve_holdout(&b, 1, 5, &err) != 0 && strstr(err.msg, "exists"),
          "second carve: %s", err.msg);
    dataset_free(&a);
    CHECK(t, open_split(dir, 40, 5, &a) == 0, "reopen");
    CHECK(t, dataset_carve_holdout(&a, 40, 5, &err) != 0 && strstr(err.msg, "too large"),
          "holdout as large as val: %s", err.msg);
    dataset_free(&a);
    dataset_free(&b);
    rm_tree(tmp);
}

// The default validation size: 5000, or a tenth of a smaller training set.
static void test_val_default(tctx *t) {
    CHECK(t, dataset_default_val_size(50000) == 5000, "50000");
    CHECK(t, dataset_default_val_size(60000) == 5000, "60000");
    CHECK(t, dataset_default_val_size(49999) == 4999, "49999");
    CHECK(t, dataset_default_val_size(5000) == 500, "5000");
    CHECK(t, dataset_default_val_size(9) == 0, "9");
}

// --- statistics -------------------------------------------------------------

// Mean and std by hand on two images, and against a naive two-pass loop.
static void test_mean_std(tctx *t) {
    char tmp[256], dir[512], p[1200];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(dir, sizeof dir, tmp, "c100");
    mkdir(dir, 0777);
    static uint8_t rec[2][CIFAR100_RECORD];
    const uint8_t val[2][3] = {{0, 255, 51}, {255, 255, 102}};
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 3; c++) memset(rec[i] + 2 + c * 1024, val[i][c], 1024);
    rec[1][1] = 1;  // two classes: a single-class set is refused
    join(p, sizeof p, dir, "train.bin");
    file_put(p, rec, sizeof rec);
    join(p, sizeof p, dir, "test.bin");
    file_put(p, rec, CIFAR100_RECORD);
    dataset ds;
    CHECK(t, open_split(dir, 0, 1, &ds) == 0, "open hand case");
    CHECK_CLOSE(t, ds.mean[0], 0.5, 1e-6);
    CHECK_CLOSE(t, ds.std[0], 0.5, 1e-6);
    CHECK_CLOSE(t, ds.mean[1], 1.0, 1e-6);
    CHECK_CLOSE(t, ds.std[1], 1.0, 1e-6);  // constant channel: std 1, not 0
    CHECK_CLOSE(t, ds.mean[2], 0.3, 1e-6);
    CHECK_CLOSE(t, ds.std[2], 0.1, 1e-6);
    dataset_free(&ds);
    // Random bytes: statistics over the post-split training part only.
    int n = 57;
    uint8_t *buf = malloc((size_t)n * CIFAR100_RECORD);
    rng r;
    rng_seed(&r, 77, 0);
    for (size_t k = 0; k < (size_t)n * CIFAR100_RECORD; k++) buf[k] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < n; i++)
        buf[(size_t)i * CIFAR100_RECORD] %= 20, buf[(size_t)i * CIFAR100_RECORD + 1] %= 100;
    join(p, sizeof p, dir, "train.bin");
    file_put(p, buf, (size_t)n * CIFAR100_RECORD);
    free(buf);
    for (int v = 0; v <= 11; v += 11) {
        CHECK(t, open_split(dir, v, 3, &ds) == 0, "open random");
        for (int c = 0; c < 3; c++) {
            double m = 0, q = 0, cnt = (double)ds.train.n * 1024;
            for (int i = 0; i < ds.train.n; i++)
                for (int k = 0; k < 1024; k++)
                    m += ds.train.images[(size_t)i * 3072 + c * 1024 + k] / 255.0;
            m /= cnt;
            for (int i = 0; i < ds.train.n; i++)
                for (int k = 0; k < 1024; k++) {
                    double d = ds.train.images[(size_t)i * 3072 + c * 1024 + k] / 255.0 - m;
                    q += d * d;
                }
            CHECK_CLOSE(t, ds.mean[c], m, 1e-6);
            CHECK_CLOSE(t, ds.std[c], sqrt(q / cnt), 1e-6);
        }
        dataset_free(&ds);
    }
    rm_tree(tmp);
}

// --- synthetic --------------------------------------------------------------

// Same arguments give the same bytes; another seed gives other bytes.
static void test_synthetic_deterministic(tctx *t) {
    char tmp[256], a[512], b[512], c[512], pa[1200], pb[1200];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(a, sizeof a, tmp, "a");
    join(b, sizeof b, tmp, "b");
    join(c, sizeof c, tmp, "c");
    mkdir(a, 0777), mkdir(b, 0777), mkdir(c, 0777);
    sc_err err = {0};
    CHECK(t, synthetic_write(a, 301, 97, 10, 77, &err) == 0, "write a: %s", err.msg);
    CHECK(t, synthetic_write(b, 301, 97, 10, 77, &err) == 0, "write b: %s", err.msg);
    CHECK(t, synthetic_write(c, 301, 97, 10, 78, &err) == 0, "write c: %s", err.msg);
    const char *names[2] = {"train.bin", "test.bin"};
    for (int s = 0; s < 2; s++) {
        join(pa, sizeof pa, a, names[s]);
        join(pb, sizeof pb, b, names[s]);
        CHECK(t, files_equal(pa, pb), "%s differs between two runs", names[s]);
        join(pb, sizeof pb, c, names[s]);
        CHECK(t, !files_equal(pa, pb), "%s same for another seed", names[s]);
    }
    size_t size = 0;
    join(pa, sizeof pa, a, "train.bin");
    uint8_t *buf = file_get(pa, &size);
    CHECK(t, size == 301u * CIFAR100_RECORD, "train.bin size %zu", size);
    int count[10] = {0}, bad = 0;
    for (int i = 0; buf && i < 301; i++) {
        int fine = buf[(size_t)i * CIFAR100_RECORD + 1], coarse = buf[(size_t)i * CIFAR100_RECORD];
        if (fine >= 10 || coarse != fine / 5)
            bad++;
        else
            count[fine]++;
    }
    free(buf);
    CHECK(t, bad == 0, "%d bad labels", bad);
    for (int k = 0; k < 10; k++)
        CHECK(t, count[k] == 30 || count[k] == 31, "class %d: %d", k, count[k]);
    CHECK(t, synthetic_write(a, 10, 10, 101, 1, &err) == -1, "101 classes accepted");
    CHECK(t, synthetic_write(a, 0, 10, 10, 1, &err) == -1, "0 images accepted");
    rm_tree(tmp);
}

// "synthetic" generates the default set once, identical to synthetic_write.
static void test_synthetic_open(tctx *t) {
    char tmp[256], data[512], ref[512], pa[1200], pb[1200];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(data, sizeof data, tmp, "data/nested");  // parents are created
    join(ref, sizeof ref, tmp, "ref");
    mkdir(ref, 0777);
    dataset ds;
    sc_err err = {0};
    int rc = dataset_open("synthetic", data, -1, 1, &ds, &err);
    CHECK(t, rc == 0, "open: %s", err.msg);
    if (rc == 0) {
        CHECK(t, strcmp(ds.name, "synthetic") == 0, "name %s", ds.name);
        CHECK(t, ds.classes == SYNTHETIC_CLASSES, "classes %d", ds.classes);
        CHECK(t, ds.train.n == 4500 && ds.val.n == 500 && ds.test.n == 1000, "sizes");
        dataset_free(&ds);
    }
    CHECK(t,
          synthetic_write(ref, SYNTHETIC_TRAIN, SYNTHETIC_TEST, SYNTHETIC_CLASSES, SYNTHETIC_SEED,
                          &err) == 0,
          "ref: %s", err.msg);
    join(pa, sizeof pa, data, "synthetic/train.bin");
    join(pb, sizeof pb, ref, "train.bin");
    CHECK(t, files_equal(pa, pb), "generated train.bin differs from synthetic_write");
    struct stat before, after;
    stat(pa, &before);
    CHECK(t, dataset_open("synthetic", data, 0, 1, &ds, &err) == 0, "reopen: %s", err.msg);
    stat(pa, &after);
    CHECK(t, before.st_ino == after.st_ino, "reopening regenerated the files");
    CHECK(t, ds.train.n == 5000, "reopen size %d", ds.train.n);
    dataset_free(&ds);
    rm_tree(tmp);
}

#define RF 193  // ridge features: (3, 8, 8) block means + a constant

// Block means (3, 8, 8) of 4x4 pixels in [0, 1], then 1.
static void ridge_features(const uint8_t *img, double *f) {
    for (int c = 0; c < 3; c++)
        for (int by = 0; by < 8; by++)
            for (int bx = 0; bx < 8; bx++) {
                int s = 0;
                for (int y = 0; y < 4; y++)
                    for (int x = 0; x < 4; x++) s += img[c * 1024 + (by * 4 + y) * 32 + bx * 4 + x];
                f[(c * 8 + by) * 8 + bx] = s / (16 * 255.0);
            }
    f[RF - 1] = 1;
}

// Test accuracy of a ridge-regression classifier (one-hot targets) on block means.
static double ridge_accuracy(const data_split *tr, const data_split *te) {
    static double a[RF][RF + 10];  // (X^T X + I | X^T Y), solved in place
    double f[RF];
    memset(a, 0, sizeof a);
    for (int i = 0; i < tr->n; i++) {
        ridge_features(tr->images + (size_t)i * 3072, f);
        for (int p = 0; p < RF; p++) {
            for (int q = 0; q < RF; q++) a[p][q] += f[p] * f[q];
            a[p][RF + tr->labels[i]] += f[p];
        }
    }
    for (int p = 0; p < RF; p++) a[p][p] += 1.0;
    for (int p = 0; p < RF; p++)  // Gauss-Jordan; the matrix is symmetric positive definite
        for (int q = 0; q < RF; q++) {
            if (q == p) continue;
            double m = a[q][p] / a[p][p];
            for (int k = p; k < RF + 10; k++) a[q][k] -= m * a[p][k];
        }
    int hit = 0;
    for (int i = 0; i < te->n; i++) {
        ridge_features(te->images + (size_t)i * 3072, f);
        int best = 0;
        double bs = -1e30;
        for (int k = 0; k < 10; k++) {
            double s = 0;
            for (int p = 0; p < RF; p++) s += f[p] * a[p][RF + k] / a[p][p];
            if (s > bs) bs = s, best = k;
        }
        hit += best == te->labels[i];
    }
    return hit / (double)te->n;
}

// Per-class mean colours differ, and a linear classifier beats chance but not by far.
static void test_synthetic_separable(tctx *t) {
    char tmp[256];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    sc_err err = {0};
    CHECK(t, synthetic_write(tmp, 2000, 500, 10, 5, &err) == 0, "write: %s", err.msg);
    dataset ds;
    CHECK(t, open_split(tmp, 0, 1, &ds) == 0, "open");
    double col[10][3] = {{0}};
    int cnt[10] = {0};
    for (int i = 0; i < ds.train.n; i++) {
        int k = ds.train.labels[i];
        cnt[k]++;
        for (int c = 0; c < 3; c++) {
            long s = 0;
            for (int p = 0; p < 1024; p++) s += ds.train.images[(size_t)i * 3072 + c * 1024 + p];
            col[k][c] += s / 1024.0;
        }
    }
    double mind = 1e9;
    for (int a = 0; a < 10; a++)
        for (int c = 0; c < 3; c++) col[a][c] /= cnt[a] ? cnt[a] : 1;
    for (int a = 0; a < 10; a++)
        for (int b = a + 1; b < 10; b++) {
            double d = 0;
            for (int c = 0; c < 3; c++) d += (col[a][c] - col[b][c]) * (col[a][c] - col[b][c]);
            mind = fmin(mind, sqrt(d));
        }
    CHECK(t, mind > 2.0, "two classes share a mean colour (distance %.2f)", mind);
    double acc = ridge_accuracy(&ds.train, &ds.test);
    CHECK(t, acc > 0.25 && acc < 0.9, "linear classifier accuracy %.3f", acc);
    dataset_free(&ds);
    rm_tree(tmp);
}

// Two processes generating the synthetic set at once both succeed.
static void test_synthetic_concurrent(tctx *t) {
    char tmp[256], ref[512], data[512], pa[1200], pb[1200];
    CHECK(t, tmp_make(tmp, sizeof tmp) == 0, "mkdtemp");
    join(data, sizeof data, tmp, "data");
    join(ref, sizeof ref, tmp, "ref");
    mkdir(ref, 0777);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {  // exec at once: libgomp is not usable in a forked child
            execl("/proc/self/exe", "test_datasets", "--open-synthetic", data, (char *)NULL);
            _exit(127);
        }
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        CHECK(t, kids[k] > 0 && waitpid(kids[k], &st, 0) == kids[k], "wait");
        CHECK(t, WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d failed", k);
    }
    sc_err err = {0};
    synthetic_write(ref, SYNTHETIC_TRAIN, SYNTHETIC_TEST, SYNTHETIC_CLASSES, SYNTHETIC_SEED, &err);
    const char *names[2] = {"train.bin", "test.bin"};
    for (int s = 0; s < 2; s++) {
        snprintf(pa, sizeof pa, "%s/synthetic/%s", data, names[s]);
        join(pb, sizeof pb, ref, names[s]);
        CHECK(t, files_equal(pa, pb), "%s differs", names[s]);
    }
    snprintf(pa, sizeof pa, "%s/synthetic", data);
    DIR *d = opendir(pa);
    int extra = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        extra += e->d_name[0] != '.'
                     ? strcmp(e->d_name, "train.bin") && strcmp(e->d_name, "test.bin")
                     : strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    CHECK(t, extra == 0, "%d stray files left", extra);
    rm_tree(tmp);
}

// --- loader -----------------------------------------------------------------

// An in-memory split of n images whose bytes 0-1 hold the index; label = i % 10.
static data_split split_make(int n) {
    data_split s = {n, malloc((size_t)n * 3072 + 1), malloc((size_t)n * sizeof(int) + 1), NULL};
    for (int i = 0; i < n; i++) {
        fake_image(s.images + (size_t)i * 3072, i, 0);
        s.labels[i] = i % 10;
    }
    return s;
}

// One training epoch: each image at most once, labels follow images, offsets in range.
static int epoch_check(tctx *t, loader *l, int n, int expect_batches) {
    int *seen = calloc((size_t)n, sizeof(int));
    int batches = 0, bad = 0, range = 0;
    exec_batch b;
    while (loader_next(l, &b)) {
        batches++;
        bad += b.n != l->batch || !b.dx || !b.dy || !b.flip;
        for (int i = 0; i < b.n && b.dx; i++) {
            int id = b.images[(size_t)i * 3072] | b.images[(size_t)i * 3072 + 1] << 8;
            bad +=
                id >= n || b.labels[i] != id % 10 || !image_is(b.images + (size_t)i * 3072, id, 0);
            if (id < n) seen[id]++;
            range += b.dx[i] < -4 || b.dx[i] > 4 || b.dy[i] < -4 || b.dy[i] > 4 || b.flip[i] > 1;
        }
    }
    int twice = 0, covered = 0;
    for (int i = 0; i < n; i++) twice += seen[i] > 1, covered += seen[i] == 1;
    free(seen);
    CHECK(t, batches == expect_batches, "%d batches, want %d", batches, expect_batches);
    CHECK(t, bad == 0 && range == 0 && twice == 0, "bad %d, out of range %d, repeated %d", bad,
          range, twice);
    return covered;
}

// Training mode covers every image once per epoch, drops the tail, is seeded.
static void test_loader_train(tctx *t) {
    data_split s = split_make(100), s2 = split_make(103);
    loader l;
    sc_err err = {0};
    CHECK(t, loader_init(&l, &s, 10, 1, 7, &err) == 0, "init: %s", err.msg);
    CHECK(t, loader_batches_per_epoch(&l) == 10, "batches per epoch");
    CHECK(t, epoch_check(t, &l, 100, 10) == 100, "epoch 0 misses images");
    loader_start_epoch(&l, 1);
    CHECK(t, epoch_check(t, &l, 100, 10) == 100, "epoch 1 misses images");
    loader_free(&l);
    CHECK(t, loader_init(&l, &s2, 10, 1, 7, &err) == 0, "init: %s", err.msg);
    CHECK(t, loader_batches_per_epoch(&l) == 10, "tail not dropped");
    CHECK(t, epoch_check(t, &l, 103, 10) == 100, "epoch of 103 should use 100 images");
    loader_free(&l);
    // Offsets use all of [-4, 4]; flips are about half.
    data_split big = split_make(2000);
    CHECK(t, loader_init(&l, &big, 2000, 1, 3, &err) == 0, "init big");
    exec_batch b;
    int hist[9] = {0}, flips = 0;
    if (loader_next(&l, &b))
        for (int i = 0; i < b.n; i++) hist[b.dx[i] + 4]++, hist[b.dy[i] + 4]++, flips += b.flip[i];
    for (int k = 0; k < 9; k++)
        CHECK(t, hist[k] > 300 && hist[k] < 600, "offset %d: %d", k - 4, hist[k]);
    CHECK(t, flips > 900 && flips < 1100, "flips %d of 2000", flips);
    loader_free(&l);
    data_split_free(&s);
    data_split_free(&s2);
    data_split_free(&big);
}

// Copies a whole epoch's batches (ids, dx, dy, flip) into rec; returns batches.
static int epoch_record(loader *l, int *rec) {
    exec_batch b;
    int k = 0, nb = 0;
    while (loader_next(l, &b)) {
        nb++;
        for (int i = 0; i < b.n; i++, k += 4) {
            rec[k] = b.images[(size_t)i * 3072] | b.images[(size_t)i * 3072 + 1] << 8;
            rec[k + 1] = b.dx[i], rec[k + 2] = b.dy[i], rec[k + 3] = b.flip[i];
        }
    }
    return nb;
}

// Same (seed, epoch) gives the same batches in any order of epochs; others differ.
static void test_loader_deterministic(tctx *t) {
    data_split s = split_make(77);
    loader a, b, c;
    sc_err err = {0};
    CHECK(t, loader_init(&a, &s, 8, 1, 11, &err) == 0, "init a");
    CHECK(t, loader_init(&b, &s, 8, 1, 11, &err) == 0, "init b");
    CHECK(t, loader_init(&c, &s, 8, 1, 12, &err) == 0, "init c");
    static int r0[77 * 4], r1[77 * 4], r2[77 * 4], r3[77 * 4], r4[77 * 4];
    epoch_record(&a, r0);  // a: epoch 0
    loader_start_epoch(&a, 1);
    epoch_record(&a, r1);  // a: epoch 1
    loader_start_epoch(&b, 5);
    epoch_record(&b, r2);  // b: epoch 5 first ...
    loader_start_epoch(&b, 1);
    epoch_record(&b, r3);  // ... then epoch 1 (a resume)
    epoch_record(&c, r4);  // c: other seed, epoch 0
    CHECK(t, memcmp(r1, r3, sizeof r1) == 0, "epoch 1 not reproduced");
    CHECK(t, memcmp(r0, r1, sizeof r0) != 0, "epochs 0 and 1 are the same");
    CHECK(t, memcmp(r1, r2, sizeof r1) != 0, "epochs 1 and 5 are the same");
    CHECK(t, memcmp(r0, r4, sizeof r0) != 0, "seeds 11 and 12 give the same epoch");
    // Seeking to batch 3 gives the same batches as reading on from the start.
    loader_start_epoch(&b, 1);
    loader_seek(&b, 3);
    static int r5[77 * 4];
    CHECK(t, epoch_record(&b, r5) == 6, "batches after seek");
    CHECK(t, memcmp(r5, r1 + 3 * 8 * 4, 6 * 8 * 4 * sizeof(int)) == 0, "seek differs");
    loader_free(&a);
    loader_free(&b);
    loader_free(&c);
    data_split_free(&s);
}

// Evaluation mode: file order, no augmentation, the partial last batch kept.
static void test_loader_eval(tctx *t) {
    data_split s = split_make(103);
    loader l;
    sc_err err = {0};
    CHECK(t, loader_init(&l, &s, 10, 0, 7, &err) == 0, "init");
    CHECK(t, loader_batches_per_epoch(&l) == 11, "batches %d", loader_batches_per_epoch(&l));
    for (int e = 0; e < 2; e++) {
        loader_start_epoch(&l, e);
        exec_batch b;
        int next = 0, nb = 0, bad = 0, last = 0;
        while (loader_next(&l, &b)) {
            nb++;
            last = b.n;
            bad += b.dx != NULL || b.dy != NULL || b.flip != NULL;
            for (int i = 0; i < b.n; i++, next++)
                bad += (b.images[(size_t)i * 3072] | b.images[(size_t)i * 3072 + 1] << 8) != next ||
                       b.labels[i] != next % 10;
        }
        CHECK(t, nb == 11 && last == 3 && next == 103 && bad == 0, "nb %d last %d next %d bad %d",
              nb, last, next, bad);
    }
    loader_free(&l);
    data_split empty = {0};
    CHECK(t, loader_init(&l, &empty, 10, 0, 7, &err) == 0, "empty eval split");
    exec_batch b;
    CHECK(t, loader_batches_per_epoch(&l) == 0 && loader_next(&l, &b) == 0, "empty split");
    loader_free(&l);
    CHECK(t, loader_init(&l, &s, 0, 0, 7, &err) == -1, "batch 0 accepted");
    CHECK(t, loader_init(&l, &s, 104, 1, 7, &err) == -1 && strstr(err.msg, "104"),
          "training batch larger than the split accepted");
    data_split_free(&s);
}

// Gathering a batch of 512 images stays well under two milliseconds.
static void test_loader_speed(tctx *t) {
    data_split s = split_make(4096);
    loader l;
    sc_err err = {0};
    CHECK(t, loader_init(&l, &s, 512, 1, 1, &err) == 0, "init");
    exec_batch b;
    struct timespec t0, t1;
    int nb = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int e = 0; e < 4; e++) {
        loader_start_epoch(&l, e);
        while (loader_next(&l, &b)) nb++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6) / nb;
#ifdef __SANITIZE_ADDRESS__
    const double limit = 20.0;  // make test SANITIZE=1: instrumented code is several times slower
#else
    const double limit = 2.0;
#endif
    CHECK(t, nb == 32 && ms < limit, "%d batches, %.3f ms per batch (epoch start included)", nb,
          ms);
    loader_free(&l);
    data_split_free(&s);
}

// --- main -------------------------------------------------------------------

// Child of test_synthetic_concurrent: opens "synthetic" under data_dir.
static int child_open_synthetic(const char *data_dir) {
    dataset ds;
    sc_err err = {0};
    int rc = dataset_open("synthetic", data_dir, -1, 1, &ds, &err);
    if (rc) fprintf(stderr, "  child: %s\n", err.msg);
    rc = rc == 0 && ds.train.n == 4500 ? 0 : 1;
    dataset_free(&ds);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--open-synthetic") == 0) return child_open_synthetic(argv[2]);
    tctx t = {.suite = "test_datasets"};
    RUN(&t, test_cifar10_roundtrip);
    RUN(&t, test_cifar100_roundtrip);
    RUN(&t, test_real_cifar100);
    RUN(&t, test_bad_files);
    RUN(&t, test_bad_labels);
    RUN(&t, test_bad_names);
    RUN(&t, test_val_split);
    RUN(&t, test_holdout);
    RUN(&t, test_val_default);
    RUN(&t, test_mean_std);
    RUN(&t, test_synthetic_deterministic);
    RUN(&t, test_synthetic_open);
    RUN(&t, test_synthetic_separable);
    RUN(&t, test_synthetic_concurrent);
    RUN(&t, test_loader_train);
    RUN(&t, test_loader_deterministic);
    RUN(&t, test_loader_eval);
    RUN(&t, test_loader_speed);
    return check_finish(&t);
}
