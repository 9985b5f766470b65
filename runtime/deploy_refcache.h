// The CPU reference's results kept in a file (deploy --reference-cache): the
// top-1 class of the first test images run so far and the zero counts of each
// conv input over them, keyed by the export's bytes, the dataset's whole
// test split and the running executable's bytes (a rebuilt deploy
// recomputes). A run that finds a matching file takes those images as done
// and runs only the rest (a run over fewer images, --test-images, leaves a prefix
// that a later run continues); an interrupted run loses at most the images
// since its last save.
#ifndef SC_DEPLOY_REFCACHE_H
#define SC_DEPLOY_REFCACHE_H

#include <stdint.h>

#include "runtime/error.h"

typedef struct {
    char path[1100];        // the cache file; empty: no cache
    uint32_t export_crc;    // CRC-32 of the export file
    uint64_t export_bytes;  // its size
    uint32_t test_crc;      // CRC-32 of the test images
    uint32_t tool_crc;      // CRC-32 of the running executable (0: unknown)
    int test_n, nops;       // images of the test split, plan ops
    double last_save;       // progress_clock() of the last save
} refcache;

// The CPU reference's state over the first `done` test images.
typedef struct {
    int done;              // images [0, done) have a prediction
    int cap;               // entries of pred (the images this run uses, at most test_n)
    int *pred;             // (cap) top-1 per image, -1 where not run
    double *act_z, *act_e; // (nops) zeros and elements of each conv op's input over those images
    long act_images;       // images the counts cover
} refcache_state;

// Sets up the cache at path for this export and the test split's test_n
// images (hashes both);
// path NULL or "" leaves it off. -1 when the export cannot be read.
int refcache_open(refcache *c, const char *path, const char *export_path, const uint8_t *images,
                  int test_n, int image_bytes, int nops, sc_err *err);

// Fills s from the file when it matches this export and test set; returns
// the images done that fit s->cap (0: no file, another model, or a damaged
// file); the counts may cover more images (s->act_images).
int refcache_load(const refcache *c, refcache_state *s);

// Writes s to the file (atomically: a temporary file, then a rename).
int refcache_save(refcache *c, const refcache_state *s, sc_err *err);

#endif
