// Model files (checkpoints) in HDF5: the net (description text, parameters,
// masks, BN buffers) plus the training state needed to resume. The layout is
// documented in docs/model-format.md. Writes are atomic and checksummed
// (runtime/h5io.h: h5io_file_save).
#ifndef SC_MODEL_IO_H
#define SC_MODEL_IO_H

#include <stdint.h>

#include "error.h"
#include "net.h"
#include "pattern.h"
#include "rng.h"

typedef struct {
    char dataset[256];       // dataset name ("cifar100", "synthetic") or folder path
    int epoch;               // completed epochs of the current training run
    int epochs_total;        // epochs that run was asked for
    long step;               // completed optimizer steps
    uint64_t seed;
    rng rng_state;           // generator state at the end of `epoch`
    char *config;            // JSON text of the tool's settings, for --resume (owned, may be NULL)
    int nhistory;
    char **history;          // one line per step applied to the model (owned)
    double val_accuracy;     // percent, < 0 when unknown
    double test_accuracy;    // percent, < 0 when unknown
    float *momentum;         // (nparam) optimizer momentum, or NULL (owned)
    char pattern[SC_PATTERN_TEXT];  // the masks' sparsity pattern (runtime/pattern.h: "16x8",
                             // "2:4"); "" = unstructured. Root attribute `pattern`.
} model_meta;

// Sets every field to its "unknown" value (accuracies -1, pointers NULL).
void model_meta_init(model_meta *m);
// Frees what a model_meta owns and re-initialises it.
void model_meta_free(model_meta *m);
// Appends a line to the history (copied).
int model_meta_add_history(model_meta *m, const char *line, sc_err *err);

// Writes net and meta to path atomically (meta may be NULL).
int model_save(const char *path, const net *nt, const model_meta *meta, sc_err *err);

#ifdef SC_H5IO_H
// Writes the model into an open HDF5 file (io->file); for writers that add
// their own groups to a model file (runtime/quant_io.c). meta may be NULL.
int model_h5_write(h5io *io, const net *nt, const model_meta *meta);
#endif

// Reads a model file; fills meta when not NULL. Errors name the file and
// what is wrong (not HDF5, truncated, missing dataset, wrong shape, ...).
net *model_load(const char *path, model_meta *meta, sc_err *err);

#endif
