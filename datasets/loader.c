// Batch loader: per-epoch seeded permutation and crop/flip draws, and a memcpy
// gather of each batch's images into one host buffer.
#include "datasets/loader.h"

#include <stdlib.h>
#include <string.h>

// Stream ids of the epochs' generators ("load" in the high word), apart from
// the streams other modules draw from the same seed.
#define LOADER_STREAM 0x6c6f616400000000ULL

// --- setup ------------------------------------------------------------------

// Sets up a loader over s and starts epoch 0.
int loader_init(loader *l, const data_split *s, int batch, int shuffle_augment, uint64_t seed,
                sc_err *err) {
    memset(l, 0, sizeof *l);
    if (batch < 1) return sc_fail(err, "bad batch size (%d)", batch);
    if (s->n < 0 || (s->n > 0 && (!s->images || !s->labels)))
        return sc_fail(err, "bad data split (%d images)", s->n);
    if (shuffle_augment && s->n < batch)
        return sc_fail(err, "batch size larger than the training split (%d > %d images)", batch,
                       s->n);
    l->split = s;
    l->batch = batch;
    l->train = shuffle_augment ? 1 : 0;
    l->seed = seed;
    size_t n = (size_t)(s->n > 0 ? s->n : 1);
    l->perm = malloc(n * sizeof(int));
    l->images = malloc((size_t)batch * CIFAR_IMAGE_BYTES);
    l->labels = malloc((size_t)batch * sizeof(int));
    l->dx = malloc(n);
    l->dy = malloc(n);
    l->flip = malloc(n);
    if (!l->perm || !l->images || !l->labels || !l->dx || !l->dy || !l->flip) {
        loader_free(l);
        return sc_fail(err, "out of memory (loader for batch %d, %d images)", batch, s->n);
    }
    loader_start_epoch(l, 0);
    return 0;
}

// Frees the loader's buffers and zeroes it.
void loader_free(loader *l) {
    free(l->perm);
    free(l->images);
    free(l->labels);
    free(l->dx);
    free(l->dy);
    free(l->flip);
    memset(l, 0, sizeof *l);
}

// --- epochs and batches -----------------------------------------------------

// Starts an epoch: identity order in evaluation mode; in training mode a
// permutation, then per position dx, dy and flip, all from (seed, epoch).
void loader_start_epoch(loader *l, int epoch) {
    int n = l->split->n;
    l->epoch = epoch;
    l->pos = 0;
    rng r;
    rng_seed(&r, l->seed, LOADER_STREAM | (uint64_t)(uint32_t)epoch);
    for (int i = 0; i < n; i++) l->perm[i] = i;
    if (!l->train) return;
    rng_shuffle(&r, l->perm, n);
    const uint32_t span = 2 * LOADER_MAX_SHIFT + 1;
    for (int i = 0; i < n; i++) {
        l->dx[i] = (int8_t)((int)rng_below(&r, span) - LOADER_MAX_SHIFT);
        l->dy[i] = (int8_t)((int)rng_below(&r, span) - LOADER_MAX_SHIFT);
        l->flip[i] = (uint8_t)rng_below(&r, 2);
    }
}

// Moves to batch `index` of the current epoch (clamped to the epoch's end).
void loader_seek(loader *l, int index) {
    long pos = (long)(index < 0 ? 0 : index) * l->batch;
    l->pos = pos > l->split->n ? l->split->n : (int)pos;
}

// Batches per epoch: full batches only in training mode, else rounded up.
int loader_batches_per_epoch(const loader *l) {
    int n = l->split->n;
    return l->train ? n / l->batch : (n + l->batch - 1) / l->batch;
}

// Gathers the next batch into the loader's buffers and points b at them.
int loader_next(loader *l, exec_batch *b) {
    const data_split *s = l->split;
    int left = s->n - l->pos;
    int n = left < l->batch ? left : l->batch;
    if (n <= 0 || (l->train && n < l->batch)) return 0;
    for (int i = 0; i < n; i++) {
        int k = l->perm[l->pos + i];
        memcpy(l->images + (size_t)i * CIFAR_IMAGE_BYTES,
               s->images + (size_t)k * CIFAR_IMAGE_BYTES, CIFAR_IMAGE_BYTES);
        l->labels[i] = s->labels[k];
    }
    b->n = n;
    b->images = l->images;
    b->labels = l->labels;
    b->dx = l->train ? l->dx + l->pos : NULL;
    b->dy = l->train ? l->dy + l->pos : NULL;
    b->flip = l->train ? l->flip + l->pos : NULL;
    b->soft = NULL;  // hard labels
    l->pos += n;
    return 1;
}
