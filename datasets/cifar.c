// CIFAR-10/100 binary readers: spec resolution, strict record checks, the
// seeded validation split and the per-channel training statistics.
#include "datasets/cifar.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "runtime/atomic.h"
#include "runtime/rng.h"

typedef enum { LAYOUT_CIFAR10, LAYOUT_CIFAR100 } cifar_layout;

// Stream id of the validation split's generator, apart from the loader's epoch
// streams (datasets/loader.c) and anything else drawn from the same seed.
#define VAL_STREAM 0x76616c73706c6974ULL
#define HOLDOUT_STREAM 0x686f6c646f7574ULL  // "holdout"

// --- small helpers ----------------------------------------------------------

// Joins dir and name into out (size cap); fails when the result would not fit.
static int path_join(char *out, size_t cap, const char *dir, const char *name, sc_err *err) {
    int k = snprintf(out, cap, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= cap) return sc_fail(err, "path too long (%s/%s)", dir, name);
    return 0;
}

// True when path names an existing regular file.
static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// True when path names an existing directory.
static int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// Creates dir and any missing parents (like mkdir -p).
static int dir_make(const char *dir, sc_err *err) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return sc_fail(err, "path too long (%s)", dir);
    for (char *p = buf + 1; ; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return sc_fail(err, "cannot create folder (%s): %s", buf, strerror(errno));
        if (c == '\0') break;
        *p = c;
    }
    if (!dir_exists(dir)) return sc_fail(err, "not a folder (%s)", dir);
    return 0;
}

// Copies the last path component of path (trailing slashes ignored) into out.
static void path_base(char *out, size_t cap, const char *path) {
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/') end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/') start--;
    size_t len = end - start;
    if (len >= cap) len = cap - 1;
    memcpy(out, path + start, len);
    out[len] = '\0';
}

// --- splits -----------------------------------------------------------------

// Frees a split's arrays and zeroes it.
void data_split_free(data_split *s) {
    free(s->images);
    free(s->labels);
    free(s->coarse);
    memset(s, 0, sizeof *s);
}

// Grows a split's arrays by `add` records (coarse labels when with_coarse).
static int split_grow(data_split *s, int add, int with_coarse, sc_err *err) {
    size_t n = (size_t)s->n + (size_t)add;
    if (add <= 0) return 0;
    uint8_t *img = realloc(s->images, n * CIFAR_IMAGE_BYTES);
    if (img) s->images = img;
    int *lab = realloc(s->labels, n * sizeof(int));
    if (lab) s->labels = lab;
    int *co = with_coarse ? realloc(s->coarse, n * sizeof(int)) : NULL;
    if (co) s->coarse = co;
    if (!img || !lab || (with_coarse && !co))
        return sc_fail(err, "out of memory (%zu images)", n);
    return 0;
}

// --- reading one file -------------------------------------------------------

#define READ_CHUNK 1024  // records read per fread (about 3 MB)

// Opens a file of rec-byte records and checks its size; expect > 0 also
// demands that exact record count. Returns the open file and the count.
static int file_open_records(const char *path, int rec, long expect, FILE **out, long *count,
                             sc_err *err) {
    struct stat st0;
    if (stat(path, &st0) != 0 && errno == ENOENT) return sc_fail(err, "missing file (%s)", path);
    FILE *f = sc_input_fopen(path, "dataset file", err);  // a FIFO is refused, never opened blocking
    if (!f) return -1;
    struct stat st;
    long long size = -1;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) size = (long long)st.st_size;
    int rc = 0;
    if (size < 0)
        rc = sc_fail(err, "not a regular file (%s)", path);
    else if (size == 0)
        rc = sc_fail(err, "empty file (%s)", path);
    else if (size % rec != 0)
        rc = sc_fail(err, "file size is not a whole number of %d-byte records (%s, %lld bytes)",
                     rec, path, size);
    else if (size / rec > 0x3fffffff)
        rc = sc_fail(err, "file too large (%s, %lld bytes)", path, size);
    else if (expect > 0 && size / rec != expect)
        rc = sc_fail(err, "expected %ld records, found %lld (%s)", expect, size / rec, path);
    if (rc) {
        fclose(f);
        return rc;
    }
    *out = f;
    *count = size / rec;
    return 0;
}

// Checks the labels of one raw record: fine < fine_limit, coarse < coarse_limit.
static int record_check_labels(const uint8_t *r, long i, int label_bytes, int fine_limit,
                               int coarse_limit, const char *path, sc_err *err) {
    int fine = r[label_bytes - 1];
    if (fine >= fine_limit)
        return sc_fail(err, "label out of range (%s, record %ld, label %d >= %d)", path, i, fine,
                       fine_limit);
    if (label_bytes == 2 && r[0] >= coarse_limit)
        return sc_fail(err, "coarse label out of range (%s, record %ld, label %d >= %d)", path, i,
                       r[0], coarse_limit);
    return 0;
}

// Reads `count` records from f in chunks and de-interleaves them into s
// (whose arrays already have room) from index s->n on.
static int split_fill_records(data_split *s, FILE *f, long count, int label_bytes,
                              int fine_limit, int coarse_limit, const char *path, sc_err *err) {
    int rec = label_bytes + CIFAR_IMAGE_BYTES;
    uint8_t *buf = malloc((size_t)READ_CHUNK * rec);  // (READ_CHUNK, rec) raw records
    if (!buf) return sc_fail(err, "out of memory reading file (%s)", path);
    for (long done = 0; done < count;) {
        long k = count - done < READ_CHUNK ? count - done : READ_CHUNK;
        size_t got = fread(buf, (size_t)rec, (size_t)k, f);
        if (got != (size_t)k) {
            free(buf);
            return sc_fail(err, "short read (%s, record %ld)", path, done + (long)got);
        }
        for (long i = 0; i < k; i++) {
            const uint8_t *r = buf + (size_t)i * rec;
            if (record_check_labels(r, done + i, label_bytes, fine_limit, coarse_limit, path,
                                    err)) {
                free(buf);
                return -1;
            }
            size_t j = (size_t)s->n + (size_t)(done + i);
            s->labels[j] = r[label_bytes - 1];
            if (label_bytes == 2) s->coarse[j] = r[0];
            memcpy(s->images + j * CIFAR_IMAGE_BYTES, r + label_bytes, CIFAR_IMAGE_BYTES);
        }
        done += k;
    }
    free(buf);
    return 0;
}

// Appends every record of one file to s (label_bytes 1: CIFAR-10, 2: CIFAR-100).
static int split_append_file(data_split *s, const char *path, int label_bytes, long expect,
                             int fine_limit, int coarse_limit, sc_err *err) {
    FILE *f = NULL;
    long count = 0;
    SC_TRY(file_open_records(path, label_bytes + CIFAR_IMAGE_BYTES, expect, &f, &count, err));
    int rc = split_grow(s, (int)count, label_bytes == 2, err);
    if (rc == 0)
        rc = split_fill_records(s, f, count, label_bytes, fine_limit, coarse_limit, path, err);
    fclose(f);
    if (rc == 0) s->n += (int)count;
    return rc;
}

// --- layouts ----------------------------------------------------------------

// Reads the CIFAR-10 layout (5 training batches + test batch) from ds->path.
static int dataset_load_cifar10(dataset *ds, int strict, sc_err *err) {
    char file[1200];
    for (int b = 1; b <= 5; b++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        SC_TRY(path_join(file, sizeof file, ds->path, name, err));
        SC_TRY(split_append_file(&ds->train, file, 1, strict ? 10000 : 0, 10, 0, err));
    }
    SC_TRY(path_join(file, sizeof file, ds->path, "test_batch.bin", err));
    SC_TRY(split_append_file(&ds->test, file, 1, strict ? 10000 : 0, 10, 0, err));
    ds->classes = 10;
    ds->coarse_classes = 0;
    return 0;
}

// Largest value of a[0..n) plus one (0 for an empty array).
static int labels_count(const int *a, int n) {
    int m = -1;
    for (int i = 0; i < n; i++)
        if (a[i] > m) m = a[i];
    return m + 1;
}

// Reads the CIFAR-100 layout (train.bin, test.bin) from ds->path.
static int dataset_load_cifar100(dataset *ds, int strict, sc_err *err) {
    char file[1200];
    SC_TRY(path_join(file, sizeof file, ds->path, "train.bin", err));
    SC_TRY(split_append_file(&ds->train, file, 2, strict ? 50000 : 0, 100, 20, err));
    SC_TRY(path_join(file, sizeof file, ds->path, "test.bin", err));
    SC_TRY(split_append_file(&ds->test, file, 2, strict ? 10000 : 0, 100, 20, err));
    if (ds->train.n == 50000 && ds->test.n == 10000) {
        ds->classes = 100;
        ds->coarse_classes = 20;
        return 0;
    }
    int a = labels_count(ds->train.labels, ds->train.n);
    int b = labels_count(ds->test.labels, ds->test.n);
    ds->classes = a > b ? a : b;
    a = labels_count(ds->train.coarse, ds->train.n);
    b = labels_count(ds->test.coarse, ds->test.n);
    ds->coarse_classes = a > b ? a : b;
    return 0;
}

// Picks the layout of a user-given folder from the files present.
static int folder_detect_layout(const char *dir, cifar_layout *out, sc_err *err) {
    char a[1200], b[1200];
    SC_TRY(path_join(a, sizeof a, dir, "train.bin", err));
    SC_TRY(path_join(b, sizeof b, dir, "test.bin", err));
    if (file_exists(a) || file_exists(b)) {
        *out = LAYOUT_CIFAR100;
        return 0;
    }
    SC_TRY(path_join(a, sizeof a, dir, "data_batch_1.bin", err));
    SC_TRY(path_join(b, sizeof b, dir, "test_batch.bin", err));
    if (file_exists(a) || file_exists(b)) {
        *out = LAYOUT_CIFAR10;
        return 0;
    }
    return sc_fail(err, "no CIFAR binary files in folder (%s): expected train.bin and test.bin "
                   "or data_batch_1..5.bin and test_batch.bin", dir);
}

// Generates <dir>/{train,test}.bin with the default synthetic set when absent.
static int synthetic_ensure(const char *dir, sc_err *err) {
    char a[1200], b[1200];
    SC_TRY(path_join(a, sizeof a, dir, "train.bin", err));
    SC_TRY(path_join(b, sizeof b, dir, "test.bin", err));
    if (file_exists(a) && file_exists(b)) return 0;
    SC_TRY(dir_make(dir, err));
    return synthetic_write(dir, SYNTHETIC_TRAIN, SYNTHETIC_TEST, SYNTHETIC_CLASSES,
                           SYNTHETIC_SEED, err);
}

// Resolves a spec into ds->name/path, the layout and whether counts are strict.
static int dataset_resolve(const char *spec, const char *data_dir, dataset *ds,
                           cifar_layout *layout, int *strict, sc_err *err) {
    const char *sub = NULL, *hint = NULL;
    *strict = 1;
    if (strcmp(spec, "cifar10") == 0) {
        *layout = LAYOUT_CIFAR10;
        sub = "cifar-10-batches-bin";
        hint = "datasets/download.sh cifar10";
    } else if (strcmp(spec, "cifar100") == 0) {
        *layout = LAYOUT_CIFAR100;
        sub = "cifar-100-binary";
        hint = "datasets/download.sh cifar100";
    } else if (strcmp(spec, "synthetic") == 0) {
        *layout = LAYOUT_CIFAR100;
        *strict = 0;
        sub = "synthetic";
    }
    if (sub) {
        snprintf(ds->name, sizeof ds->name, "%s", spec);
        SC_TRY(path_join(ds->path, sizeof ds->path, data_dir, sub, err));
        if (!hint) return synthetic_ensure(ds->path, err);
        if (!dir_exists(ds->path))
            return sc_fail(err, "%s not found (%s): run %s or pass --data-dir", spec, ds->path,
                           hint);
        return 0;
    }
    if (!dir_exists(spec))
        return sc_fail(err, "unknown dataset (%s): expected cifar10, cifar100, synthetic or a "
                       "folder with CIFAR binary files", spec);
    if (strlen(spec) >= sizeof ds->path) return sc_fail(err, "path too long (%s)", spec);
    *strict = 0;
    snprintf(ds->path, sizeof ds->path, "%s", spec);
    path_base(ds->name, sizeof ds->name, spec);
    if (!ds->name[0]) snprintf(ds->name, sizeof ds->name, "dataset");
    return folder_detect_layout(spec, layout, err);
}

// --- validation split and statistics ----------------------------------------

// Default validation size: 5000, or a tenth of the training set when smaller.
int dataset_default_val_size(int ntrain) {
    int tenth = ntrain / 10;
    return tenth < 5000 ? tenth : 5000;
}

// Moves a seeded random subset of `count` images of `from` (partial
// Fisher-Yates on generator stream `stream`) into the empty split `to`; both
// keep file order.
static int split_move_random(data_split *from, data_split *to, int count, uint64_t seed,
                             uint64_t stream, sc_err *err) {
    int n = from->n;
    int *idx = malloc((size_t)n * sizeof(int));
    uint8_t *pick = calloc((size_t)n, 1);
    if (!idx || !pick || split_grow(to, count, from->coarse != NULL, err)) {
        free(idx);
        free(pick);
        return sc_fail(err, "out of memory (split of %d images)", count);
    }
    rng r;
    rng_seed(&r, seed, stream);
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = 0; i < count; i++) {  // partial Fisher-Yates: idx[0..count) chosen
        int j = i + (int)rng_below(&r, (uint32_t)(n - i));
        int tmp = idx[i];
        idx[i] = idx[j];
        idx[j] = tmp;
        pick[idx[i]] = 1;
    }
    int nv = 0, nt = 0;
    for (int i = 0; i < n; i++) {
        data_split *d = pick[i] ? to : from;
        int j = pick[i] ? nv++ : nt++;
        if (d == from && j == i) continue;
        memcpy(d->images + (size_t)j * CIFAR_IMAGE_BYTES,
               from->images + (size_t)i * CIFAR_IMAGE_BYTES, CIFAR_IMAGE_BYTES);
        d->labels[j] = from->labels[i];
        if (from->coarse) d->coarse[j] = from->coarse[i];
    }
    to->n = nv;
    from->n = nt;
    free(idx);
    free(pick);
    return 0;
}

// Moves a seeded random subset of val_size training images into ds->val;
// both parts keep file order.
static int dataset_split_val(dataset *ds, int val_size, uint64_t seed, sc_err *err) {
    int n = ds->train.n;
    if (val_size < -1) return sc_fail(err, "bad validation size (%d)", val_size);
    if (val_size == -1) val_size = dataset_default_val_size(n);
    if (val_size == 0) return 0;
    if (val_size >= n)
        return sc_fail(err, "validation split too large (%s, %d of %d training images)",
                       ds->path, val_size, n);
    return split_move_random(&ds->train, &ds->val, val_size, seed, VAL_STREAM, err);
}

// Moves a seeded random subset of n validation images into ds->holdout.
int dataset_carve_holdout(dataset *ds, int n, uint64_t seed, sc_err *err) {
    if (n <= 0) return 0;
    if (ds->holdout.n) return sc_fail(err, "the held-out split exists already (%s)", ds->path);
    if (n >= ds->val.n)
        return sc_fail(err, "held-out split too large (%d of %d validation images; raise --val-size)",
                       n, ds->val.n);
    return split_move_random(&ds->val, &ds->holdout, n, seed, HOLDOUT_STREAM, err);
}

// Adds a thread's partial histogram to the total (one thread at a time) and clears it.
static void hist_add(uint64_t hist[3][256], uint32_t part[3][256]) {
#pragma omp critical(cifar_hist)
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) hist[c][v] += part[c][v];
    memset(part, 0, sizeof(uint32_t) * 3 * 256);
}

// Per-channel mean and (population) standard deviation of s, in pixel/255 units.
static void split_channel_stats(const data_split *s, float mean[3], float std[3]) {
    uint64_t hist[3][256];
    memset(hist, 0, sizeof hist);
#pragma omp parallel
    {
        uint32_t part[3][256];  // this thread's counts; flushed before they could overflow
        memset(part, 0, sizeof part);
        int since = 0;
#pragma omp for schedule(static) nowait
        for (int i = 0; i < s->n; i++) {
            const uint8_t *img = s->images + (size_t)i * CIFAR_IMAGE_BYTES;
            for (int c = 0; c < 3; c++)
                for (int k = 0; k < 1024; k++) part[c][img[c * 1024 + k]]++;
            if (++since == 4096) {
                hist_add(hist, part);
                since = 0;
            }
        }
        hist_add(hist, part);
    }
    for (int c = 0; c < 3; c++) {
        double n = 0, sum = 0, sq = 0;
        for (int v = 0; v < 256; v++) {
            n += (double)hist[c][v];
            sum += (double)hist[c][v] * v;
            sq += (double)hist[c][v] * v * v;
        }
        double m = n > 0 ? sum / n : 0, var = n > 0 ? sq / n - m * m : 0;
        mean[c] = (float)(m / 255.0);
        std[c] = (float)(sqrt(var > 0 ? var : 0) / 255.0);
        if (!(std[c] > 0)) std[c] = 1.0f;  // constant channel: avoid dividing by zero
    }
}

// --- open / free ------------------------------------------------------------

// Fails when every training label is the same class (nothing to learn; a
// classifier would report 100%).
static int labels_check(const dataset *ds, sc_err *err) {
    const data_split *s = &ds->train;
    for (int i = 1; i < s->n; i++)
        if (s->labels[i] != s->labels[0]) return 0;
    return sc_fail(err, "the training data holds a single class (%s, %d images, all label %d)",
                   ds->path, s->n, s->n ? s->labels[0] : -1);
}

// Opens a dataset by spec; see cifar.h.
int dataset_open(const char *spec, const char *data_dir, int val_size, uint64_t seed,
                 dataset *ds, sc_err *err) {
    memset(ds, 0, sizeof *ds);
    if (!spec || !*spec) return sc_fail(err, "no dataset given");
    if (!data_dir || !*data_dir) data_dir = "data";
    cifar_layout layout = LAYOUT_CIFAR100;
    int strict = 1, rc = dataset_resolve(spec, data_dir, ds, &layout, &strict, err);
    if (rc == 0)
        rc = layout == LAYOUT_CIFAR10 ? dataset_load_cifar10(ds, strict, err)
                                      : dataset_load_cifar100(ds, strict, err);
    int folder = strcmp(spec, ds->path) == 0;  // a user-given folder, not a name
    if (rc == 0 && folder && ds->train.n == 50000 && ds->test.n == 10000)
        snprintf(ds->name, sizeof ds->name, "%s",
                 layout == LAYOUT_CIFAR10 ? "cifar10" : "cifar100");
    if (rc == 0) rc = labels_check(ds, err);
    if (rc == 0) rc = dataset_split_val(ds, val_size, seed, err);
    if (rc != 0) {
        dataset_free(ds);
        return -1;
    }
    split_channel_stats(&ds->train, ds->mean, ds->std);
    return 0;
}

// Frees every split of ds and zeroes it.
void dataset_free(dataset *ds) {
    data_split_free(&ds->train);
    data_split_free(&ds->val);
    data_split_free(&ds->test);
    data_split_free(&ds->holdout);
    memset(ds, 0, sizeof *ds);
}

// "cifar100" when its training file exists under data_dir, else "synthetic".
const char *dataset_default_name(const char *data_dir) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/cifar-100-binary/train.bin", data_dir);
    return stat(path, &st) == 0 ? "cifar100" : "synthetic";
}
