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

// A scratch directory with a fake export file (contents given) in it.
typedef struct {
    char dir[64], export_path[128], cache[128];
} scratch;

// Makes the directory and writes the export bytes.
static void scratch_make(scratch *s, const char *export_bytes) {
    snprintf(s->dir, sizeof s->dir, "/tmp/test_refcache.XXXXXX");
    if (!mkdtemp(s->dir)) s->dir[0] = 0;
    snprintf(s->export_path, sizeof s->export_path, "%s/m.h5", s->dir);
    snprintf(s->cache, sizeof s->cache, "%s/m.h5.cpuref", s->dir);
    FILE *f = fopen(s->export_path, "wb");
    if (f) fputs(export_bytes, f), fclose(f);
}

// Removes the files and the directory.
static void scratch_free(scratch *s) {
    unlink(s->export_path), unlink(s->cache), rmdir(s->dir);
}

// Test images: byte k of image i = i * 31 + k + salt.
static void images(uint8_t *im, int salt) {
    for (int i = 0; i < NIMG * IMGB; i++) im[i] = (uint8_t)(i / IMGB * 31 + i % IMGB + salt);
}

// A state over `done` images: pred[i] = i % 5, counts 10 * op + done.
static void state_fill(refcache_state *s, int done, int *pred, double *z, double *e) {
    for (int i = 0; i < NIMG; i++) pred[i] = i < done ? i % 5 : -1;
    for (int k = 0; k < NOPS; k++) z[k] = 10.0 * k + done, e[k] = 100.0 * (k + 1);
    *s = (refcache_state){done, NIMG, pred, z, e, done};
}

// Saves a 6-image prefix and loads it back; a 4-image run gets 4.
static void test_roundtrip(tctx *t) {
    scratch s;
    scratch_make(&s, "export one");
    uint8_t im[NIMG * IMGB];
    images(im, 0);
    refcache c;
    sc_err err = {{0}};
    CHECK(t, refcache_open(&c, s.cache, s.export_path, im, NIMG, IMGB, NOPS, &err) == 0, "%s", err.msg);
    int pred[NIMG], got[NIMG];
    double z[NOPS], e[NOPS], gz[NOPS], ge[NOPS];
    refcache_state st, back = {0, NIMG, got, gz, ge, 0};
    state_fill(&st, 6, pred, z, e);
    CHECK(t, refcache_save(&c, &st, &err) == 0, "%s", err.msg);
    CHECK(t, refcache_load(&c, &back) == 6, "loaded %d", back.done);
    CHECK(t, !memcmp(got, pred, sizeof pred), "predictions differ");
    CHECK(t, !memcmp(gz, z, sizeof z) && !memcmp(ge, e, sizeof e) && back.act_images == 6, "counts differ");
    int few[4];
    refcache_state small = {0, 4, few, gz, ge, 0};
    CHECK(t, refcache_load(&c, &small) == 4 && few[3] == 3 && small.act_images == 6, "cap 4: %d", small.done);
    scratch_free(&s);
}

// Another export, other test images, a truncated file: nothing loads.
static void test_mismatch(tctx *t) {
    scratch s;
    scratch_make(&s, "export one");
    uint8_t im[NIMG * IMGB];
    images(im, 0);
    refcache c, other;
    sc_err err = {{0}};
    int pred[NIMG];
    double z[NOPS], e[NOPS];
    refcache_state st;
    state_fill(&st, NIMG, pred, z, e);
    CHECK(t, refcache_open(&c, s.cache, s.export_path, im, NIMG, IMGB, NOPS, &err) == 0 &&
                 refcache_save(&c, &st, &err) == 0, "%s", err.msg);
    images(im, 1);
    refcache_open(&other, s.cache, s.export_path, im, NIMG, IMGB, NOPS, &err);
    CHECK(t, refcache_load(&other, &st) == 0, "other test images loaded");
    images(im, 0);
    refcache_open(&other, s.cache, s.export_path, im, NIMG, IMGB, NOPS + 1, &err);
    CHECK(t, refcache_load(&other, &st) == 0, "other op count loaded");
    FILE *f = fopen(s.export_path, "wb");
    if (f) fputs("export two", f), fclose(f);
    refcache_open(&other, s.cache, s.export_path, im, NIMG, IMGB, NOPS, &err);
    CHECK(t, refcache_load(&other, &st) == 0, "another export loaded");
    CHECK(t, refcache_load(&c, &st) == NIMG, "the matching key must still load");
    CHECK(t, truncate(s.cache, 40) == 0, "truncate");
    CHECK(t, refcache_load(&c, &st) == 0, "a truncated file loaded");
    scratch_free(&s);
}

// Path "": off (load 0, save a no-op); a missing directory: a message.
static void test_off_and_errors(tctx *t) {
    scratch s;
    scratch_make(&s, "export one");
    uint8_t im[NIMG * IMGB];
    images(im, 0);
    refcache c;
    sc_err err = {{0}};
    int pred[NIMG];
    double z[NOPS], e[NOPS];
    refcache_state st;
    state_fill(&st, 3, pred, z, e);
    CHECK(t, refcache_open(&c, "", s.export_path, im, NIMG, IMGB, NOPS, &err) == 0, "%s", err.msg);
    CHECK(t, refcache_save(&c, &st, &err) == 0 && refcache_load(&c, &st) == 0 && access(s.cache, F_OK) != 0,
          "an empty path wrote or loaded");
    char bad[160];
    snprintf(bad, sizeof bad, "%s/no/such/dir/c", s.dir);
    CHECK(t, refcache_open(&c, bad, s.export_path, im, NIMG, IMGB, NOPS, &err) == 0, "%s", err.msg);
    CHECK(t, refcache_save(&c, &st, &err) != 0 && err.msg[0], "saved into a missing directory");
    CHECK(t, refcache_open(&c, s.cache, "/tmp/test_refcache_no_export", im, NIMG, IMGB, NOPS, &err) != 0,
          "an unreadable export opened");
    scratch_free(&s);
}

int main(void) {
    tctx t = {.suite = "test_refcache"};
    RUN(&t, test_roundtrip);
    RUN(&t, test_mismatch);
    RUN(&t, test_off_and_errors);
    return check_finish(&t);
}
