// Tests of deploy's CPU-reference cache (runtime/deploy_refcache.h): a saved
// prefix loads back exactly; a run over fewer images gets only what fits it;
// another export, another test set or a truncated file loads nothing; path ""
// is off; a save into a missing directory fails with a message.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/deploy_refcache.h"
#include "tests/check.h"

#define NIMG 10
#define IMGB 7  // bytes per image (any size works)
#define NOPS 3

// One case: a scratch directory with a fake export, test images, the cache
// opened on them, and a state to save.
typedef struct {
    char dir[64], export_path[128], cache[128];
    uint8_t im[NIMG * IMGB];
    refcache c;
    sc_err err;
    int pred[NIMG];
    double z[NOPS], e[NOPS];
    refcache_state st;  // over `done` images: pred[i] = i % 5, counts 10 * op + done
} fixture;

// Test images: byte k of image i = i * 31 + k + salt.
static void images(uint8_t *im, int salt) {
    for (int i = 0; i < NIMG * IMGB; i++) im[i] = (uint8_t)(i / IMGB * 31 + i % IMGB + salt);
}

// Writes the fake export's bytes.
static void export_write(const fixture *f, const char *bytes) {
    FILE *o = fopen(f->export_path, "wb");
    if (o) fputs(bytes, o), fclose(o);
}

// Makes the case with `done` images in its state; 0 when the cache opened.
static int fixture_make(fixture *f, int done) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/test_refcache.XXXXXX");
    if (!mkdtemp(f->dir)) f->dir[0] = 0;
    snprintf(f->export_path, sizeof f->export_path, "%s/m.h5", f->dir);
    snprintf(f->cache, sizeof f->cache, "%s/m.h5.cpuref", f->dir);
    export_write(f, "export one");
    images(f->im, 0);
    for (int i = 0; i < NIMG; i++) f->pred[i] = i < done ? i % 5 : -1;
    for (int k = 0; k < NOPS; k++) f->z[k] = 10.0 * k + done, f->e[k] = 100.0 * (k + 1);
    f->st = (refcache_state){done, NIMG, f->pred, f->z, f->e, done};
    return refcache_open(&f->c, f->cache, f->export_path, f->im, NIMG, IMGB, NOPS, &f->err);
}

// Removes the files and the directory.
static void fixture_free(fixture *f) {
    unlink(f->export_path), unlink(f->cache), rmdir(f->dir);
}

// Saves a 6-image prefix and loads it back; a 4-image run gets 4.
static void test_roundtrip(tctx *t) {
    fixture f;
    CHECK(t, fixture_make(&f, 6) == 0 && refcache_save(&f.c, &f.st, &f.err) == 0, "%s", f.err.msg);
    int got[NIMG], few[4];
    double gz[NOPS], ge[NOPS];
    refcache_state back = {0, NIMG, got, gz, ge, 0}, small = {0, 4, few, gz, ge, 0};
    CHECK(t, refcache_load(&f.c, &back) == 6, "loaded %d", back.done);
    CHECK(t, !memcmp(got, f.pred, sizeof got), "predictions differ");
    CHECK(t, !memcmp(gz, f.z, sizeof gz) && !memcmp(ge, f.e, sizeof ge) && back.act_images == 6, "counts differ");
    CHECK(t, refcache_load(&f.c, &small) == 4 && few[3] == 3 && small.act_images == 6, "cap 4: %d", small.done);
    fixture_free(&f);
}

// Another export, other test images, a truncated file: nothing loads.
static void test_mismatch(tctx *t) {
    fixture f;
    refcache other;
    CHECK(t, fixture_make(&f, NIMG) == 0 && refcache_save(&f.c, &f.st, &f.err) == 0, "%s", f.err.msg);
    images(f.im, 1);
    refcache_open(&other, f.cache, f.export_path, f.im, NIMG, IMGB, NOPS, &f.err);
    CHECK(t, refcache_load(&other, &f.st) == 0, "other test images loaded");
    images(f.im, 0);
    refcache_open(&other, f.cache, f.export_path, f.im, NIMG, IMGB, NOPS + 1, &f.err);
    CHECK(t, refcache_load(&other, &f.st) == 0, "other op count loaded");
    export_write(&f, "export two");
    refcache_open(&other, f.cache, f.export_path, f.im, NIMG, IMGB, NOPS, &f.err);
    CHECK(t, refcache_load(&other, &f.st) == 0, "another export loaded");
    CHECK(t, refcache_load(&f.c, &f.st) == NIMG, "the matching key must still load");
    CHECK(t, truncate(f.cache, 40) == 0, "truncate");
    CHECK(t, refcache_load(&f.c, &f.st) == 0, "a truncated file loaded");
    fixture_free(&f);
}

// Path "": off (load 0, save a no-op); a missing directory: a message.
static void test_off_and_errors(tctx *t) {
    fixture f;
    CHECK(t, fixture_make(&f, 3) == 0, "%s", f.err.msg);
    CHECK(t, refcache_open(&f.c, "", f.export_path, f.im, NIMG, IMGB, NOPS, &f.err) == 0, "%s", f.err.msg);
    CHECK(t, refcache_save(&f.c, &f.st, &f.err) == 0 && refcache_load(&f.c, &f.st) == 0 && access(f.cache, F_OK) != 0,
          "an empty path wrote or loaded");
    char bad[160];
    snprintf(bad, sizeof bad, "%s/no/such/dir/c", f.dir);
    CHECK(t, refcache_open(&f.c, bad, f.export_path, f.im, NIMG, IMGB, NOPS, &f.err) == 0, "%s", f.err.msg);
    CHECK(t, refcache_save(&f.c, &f.st, &f.err) != 0 && f.err.msg[0], "saved into a missing directory");
    CHECK(t, refcache_open(&f.c, f.cache, "/tmp/test_refcache_no_export", f.im, NIMG, IMGB, NOPS, &f.err) != 0,
          "an unreadable export opened");
    fixture_free(&f);
}

int main(void) {
    tctx t = {.suite = "test_refcache"};
    RUN(&t, test_roundtrip);
    RUN(&t, test_mismatch);
    RUN(&t, test_off_and_errors);
    return check_finish(&t);
}
