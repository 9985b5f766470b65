// The CPU reference's results kept in a file (see runtime/deploy_refcache.h).
// Layout (native byte order, the machine that wrote it reads it): a header
// (magic, version, the key: export CRC-32 and size, test-image CRC-32, the
// running executable's CRC-32 (another build may compute otherwise), test
// images, plan ops; then images done and images counted), the predictions
// (test_n int32), the zero and element counts (nops doubles each).
#include "runtime/deploy_refcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/atomic.h"
#include "runtime/progress.h"

#define REFCACHE_MAGIC "SCCPUREF"
#define REFCACHE_VERSION 2

typedef struct {
    char magic[8];
    uint32_t version, export_crc, test_crc, tool_crc;
    uint64_t export_bytes;
    int32_t test_n, nops, done, pad2;
    int64_t act_images;
} refcache_header;

// CRC-32 and size of a file's bytes; -1 when it cannot be read.
static int file_crc(const char *path, uint32_t *crc, uint64_t *bytes, sc_err *err) {
    const int fd = sc_input_open(path, "export", err);
    if (fd < 0) return -1;
    unsigned long long len = 0;
    const int rc = sc_fd_crc32(fd, 0, path, crc, &len, err);
    close(fd);
    *bytes = len;
    return rc;
}

// Sets up the cache for this export and test set.
int refcache_open(refcache *c, const char *path, const char *export_path, const uint8_t *images,
                  int test_n, int image_bytes, int nops, sc_err *err) {
    memset(c, 0, sizeof *c);
    if (!path || !path[0]) return 0;
    if ((size_t)snprintf(c->path, sizeof c->path, "%s", path) >= sizeof c->path)
        return sc_fail(err, "--reference-cache: path too long");
    uLong t = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < test_n; i++) t = crc32(t, images + (size_t)i * image_bytes, (uInt)image_bytes);
    c->test_crc = (uint32_t)t, c->test_n = test_n, c->nops = nops;
    c->last_save = progress_clock();
    uint64_t tool_bytes;
    sc_err ignored = {{0}};
    if (file_crc("/proc/self/exe", &c->tool_crc, &tool_bytes, &ignored)) c->tool_crc = 0;  // no /proc: key without it
    return file_crc(export_path, &c->export_crc, &c->export_bytes, err);
}

// Says whether header h belongs to this export and test set.
static int header_matches(const refcache *c, const refcache_header *h) {
    return !memcmp(h->magic, REFCACHE_MAGIC, 8) && h->version == REFCACHE_VERSION &&
           h->export_crc == c->export_crc && h->export_bytes == c->export_bytes && h->test_crc == c->test_crc &&
           h->tool_crc == c->tool_crc &&
           h->test_n == c->test_n && h->nops == c->nops && h->done >= 0 && h->done <= h->test_n &&
           h->act_images >= 0;
}

// Fills s from a matching file; the images done (0 when none matches).
int refcache_load(const refcache *c, refcache_state *s) {
    if (!c->path[0]) return 0;
    FILE *f = fopen(c->path, "rb");
    if (!f) return 0;
    refcache_header h;
    int32_t *pred = malloc((size_t)c->test_n * sizeof *pred);
    double *z = malloc((size_t)c->nops * 2 * sizeof *z);
    int ok = pred && z && fread(&h, sizeof h, 1, f) == 1 && header_matches(c, &h) &&
             fread(pred, sizeof *pred, (size_t)c->test_n, f) == (size_t)c->test_n &&
             fread(z, sizeof *z, (size_t)c->nops * 2, f) == (size_t)c->nops * 2 && fgetc(f) == EOF;
    fclose(f);
    for (int i = 0; ok && i < h.done; i++) ok = pred[i] >= 0;
    if (ok) {
        const int done = h.done < s->cap ? h.done : s->cap;
        for (int i = 0; i < s->cap; i++) s->pred[i] = i < done ? pred[i] : -1;
        memcpy(s->act_z, z, (size_t)c->nops * sizeof *z);
        memcpy(s->act_e, z + c->nops, (size_t)c->nops * sizeof *z);
        s->done = done, s->act_images = (long)h.act_images;
    }
    free(pred), free(z);
    return ok ? s->done : 0;
}

// Writes s atomically.
int refcache_save(refcache *c, const refcache_state *s, sc_err *err) {
    if (!c->path[0]) return 0;
    refcache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, REFCACHE_MAGIC, 8);
    h.version = REFCACHE_VERSION, h.export_crc = c->export_crc, h.export_bytes = c->export_bytes;
    h.test_crc = c->test_crc, h.tool_crc = c->tool_crc, h.test_n = c->test_n, h.nops = c->nops, h.done = s->done;
    h.act_images = s->act_images;
    int32_t *pred = malloc((size_t)c->test_n * sizeof *pred);
    if (!pred) return sc_fail(err, "out of memory");
    if (s->done > s->cap || s->done > c->test_n) return free(pred), sc_fail(err, "reference cache: %d images done", s->done);
    for (int i = 0; i < c->test_n; i++) pred[i] = i < s->done ? s->pred[i] : -1;
    sc_atomic a;
    FILE *f = sc_atomic_begin(&a, c->path, err) ? NULL : sc_atomic_fopen(&a, "wb", err);
    int rc = f ? 0 : -1;
    if (f) {
        rc = fwrite(&h, sizeof h, 1, f) != 1 || fwrite(pred, sizeof *pred, (size_t)c->test_n, f) != (size_t)c->test_n ||
             fwrite(s->act_z, sizeof *s->act_z, (size_t)c->nops, f) != (size_t)c->nops ||
             fwrite(s->act_e, sizeof *s->act_e, (size_t)c->nops, f) != (size_t)c->nops;
        if (rc) sc_fail(err, "%s: write error", c->path);
        rc = sc_atomic_fclose(&a, f, rc, err);
    }
    free(pred);
    c->last_save = progress_clock();
    return rc;
}
