// CIFAR-10/100 readers in the official binary layouts, the seeded validation
// split, per-channel statistics, and the synthetic CIFAR-format generator.
//
// Dataset specs (the names the tools take; docs/cli.md):
//   "cifar10"   <data_dir>/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin
//               (records of 1 label byte + 3072 image bytes, 10000 per file)
//   "cifar100"  <data_dir>/cifar-100-binary/{train,test}.bin
//               (records of 1 coarse + 1 fine label byte + 3072 image bytes,
//               50000 train / 10000 test)
//   "synthetic" <data_dir>/synthetic/{train,test}.bin in the CIFAR-100 layout,
//               generated on first use (deterministic, written atomically)
//   a folder    in either official layout, detected by the files present;
//               any whole number of records per file is accepted
// Image bytes are planar: 1024 R, then 1024 G, then 1024 B, rows top to bottom.
#ifndef SC_DATASETS_CIFAR_H
#define SC_DATASETS_CIFAR_H

#include <stdint.h>

#include "runtime/error.h"

#define CIFAR_SIDE 32
#define CIFAR_IMAGE_BYTES 3072   // 3 * 32 * 32
#define CIFAR10_RECORD 3073      // label + image
#define CIFAR100_RECORD 3074     // coarse label + fine label + image

// The default synthetic set written under <data_dir>/synthetic/.
#define SYNTHETIC_CLASSES 10
#define SYNTHETIC_TRAIN 5000
#define SYNTHETIC_TEST 1000
#define SYNTHETIC_SEED 1234

typedef struct {
    int n;
    uint8_t *images;  // (n, 3, 32, 32) planar bytes
    int *labels;      // (n) class ids (CIFAR-100: fine labels)
    int *coarse;      // (n) CIFAR-100 coarse labels, NULL otherwise
} data_split;

typedef struct {
    char name[64];          // "cifar10", "cifar100", "synthetic" or the folder's base name
    char path[1024];        // the folder read; dataset_open(path, ...) opens it again
    int classes;            // outputs a model needs (max label + 1 for non-official sets)
    int coarse_classes;     // CIFAR-100 layout: coarse label count; 0 otherwise
    data_split train, val, test;
    data_split holdout;     // optional: validation images kept from every decision (prune --holdout)
    float mean[3], std[3];  // per channel over `train`, in pixel/255 units
} dataset;

// Opens a dataset by spec (see above); data_dir NULL means "data". val_size:
// -1 = default (dataset_default_val_size), 0 = no validation split, else that
// many images. The validation images are a random subset of the training
// files drawn from `seed`, kept in file order; train keeps the rest in file
// order. On failure ds is left empty and err holds one line naming the file.
int dataset_open(const char *spec, const char *data_dir, int val_size, uint64_t seed,
                 dataset *ds, sc_err *err);

// Moves a seeded random subset of n validation images into ds->holdout (both
// keep file order), so that choices between runs (search settings) can be
// made on images the runs' own model selection never saw. n must be smaller
// than the validation split.
int dataset_carve_holdout(dataset *ds, int n, uint64_t seed, sc_err *err);

// Frees every split of ds and zeroes it (safe on a zeroed or freed dataset).
void dataset_free(dataset *ds);

// The default dataset of the tools: "cifar100" when
// <data_dir>/cifar-100-binary/train.bin exists, else "synthetic".
const char *dataset_default_name(const char *data_dir);

// Default validation size for a training set of ntrain images: 5000, or a
// tenth of the training set when that is smaller.
int dataset_default_val_size(int ntrain);

// Writes <dir>/train.bin and <dir>/test.bin in the CIFAR-100 binary layout: a
// small, learnable, deterministic synthetic set (class-dependent shapes and
// colours with noise and random placement). Fine labels are balanced over
// `classes` (1..100); the coarse label is fine / 5. Each file is written to a
// temporary name and renamed, so concurrent writers are safe. dir must exist.
int synthetic_write(const char *dir, int ntrain, int ntest, int classes, uint64_t seed,
                    sc_err *err);

// Frees a split's arrays and zeroes it.
void data_split_free(data_split *s);

#endif
