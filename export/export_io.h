// The HDF5 writer of export files (layout in docs/export-format.md; the
// loader is runtime/sparse_model.c). Each conv/linear layer is a group
// /layers/<name> holding its compact CSR in the scipy/anndata convention
// (data, indices, indptr, attribute shape), or its blocks as a scipy
// bsr_matrix (layers with sparse_layer.bsr; also blocksize), plus bias, the
// codebook form and the layer's geometry and fusion attributes. Writes are atomic: a
// temporary file in the same directory, fsync, rename.
#ifndef SC_EXPORT_IO_H
#define SC_EXPORT_IO_H

#include <stddef.h>

#include "runtime/error.h"
#include "runtime/sparse_model.h"

// Bytes a layer's datasets take in the file (after the filters).
typedef struct {
    size_t indices;   // indices and indptr
    size_t values;    // data, or the 4-bit codes of a codebook layer
    size_t codebook;  // codebook and row_scale (codebook layers)
    size_t bias;      // bias
} export_layer_size;

// Writes m to path atomically with the given history lines (the input
// model's plus the export line, oldest first). sizes: NULL, or m->nlayers
// entries that get each layer's stored bytes.
int export_write(const char *path, const sparse_model *m, const char *const *history, int nhistory,
                 export_layer_size *sizes, sc_err *err);

#endif
