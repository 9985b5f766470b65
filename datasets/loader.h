// Batches for the executor (runtime/exec.h exec_batch) from one data split.
//
// Training mode (shuffle_augment = 1): each epoch visits the images in a
// permutation drawn from a generator seeded with (seed, epoch); from the same
// stream each image gets a crop offset dx, dy uniform in [-4, 4] and a flip
// with probability 0.5. The last partial batch is dropped. The epoch's
// batches depend only on (seed, epoch), so resuming at epoch e reproduces it.
//
// Evaluation mode (shuffle_augment = 0): file order, no crop or flip (dx, dy
// and flip are NULL in the batch), the last partial batch is kept.
#ifndef SC_DATASETS_LOADER_H
#define SC_DATASETS_LOADER_H

#include <stdint.h>

#include "datasets/cifar.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/rng.h"

#define LOADER_MAX_SHIFT 4  // crop offsets are uniform in [-4, 4]

typedef struct {
    const data_split *split;  // not owned
    int batch;                // images per batch
    int train;                // 1 = shuffle + augment, 0 = evaluation order
    uint64_t seed;
    int epoch;                // current epoch (set by loader_start_epoch)
    int pos;                  // next position in perm
    int *perm;                // (split->n) visiting order of this epoch
    uint8_t *images;          // (batch, 3, 32, 32) the current batch
    int *labels;              // (batch)
    int8_t *dx, *dy;          // (split->n) crop offsets by position in perm (training)
    uint8_t *flip;            // (split->n) 1 = mirror, by position in perm (training)
} loader;

// Sets up a loader over s (which must outlive it) and starts epoch 0.
int loader_init(loader *l, const data_split *s, int batch, int shuffle_augment, uint64_t seed,
                sc_err *err);
// Frees the loader's buffers and zeroes it.
void loader_free(loader *l);
// Starts epoch `epoch`: a fresh permutation and augmentation stream.
void loader_start_epoch(loader *l, int epoch);
// Fills b with the next batch (pointers into the loader's buffers, valid until
// the next call); returns 1 when a batch was produced, 0 when the epoch is done.
int loader_next(loader *l, exec_batch *b);
// Moves to batch `index` of the current epoch (e.g. resuming mid-epoch);
// the batches that follow are the same as when reached in order.
void loader_seek(loader *l, int index);
// Number of batches loader_next produces per epoch.
int loader_batches_per_epoch(const loader *l);

#endif
