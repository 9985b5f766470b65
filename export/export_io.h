// The HDF5 writer of export files (layout in docs/export-format.md; the
// loader is runtime/sparse_model.c). Each conv/linear layer is a group
// /layers/<name> holding its CSR in the scipy/anndata convention (data,
// indices, indptr, attribute shape) plus offsets, bias, the codebook form
// and the layer's geometry and fusion attributes. Writes are atomic: a
// temporary file in the same directory, fsync, rename.
#ifndef SC_EXPORT_IO_H
#define SC_EXPORT_IO_H

#include <stddef.h>

#include "runtime/error.h"
#include "runtime/sparse_model.h"

// Writes m to path atomically with the given history lines (the input
// model's plus the export line, oldest first).
int export_write(const char *path, const sparse_model *m, const char *const *history, int nhistory,
                 sc_err *err);

// Bytes of a layer's arrays as stored (data, indices, indptr, offsets, bias,
// and codes, pad_mask, codebook, row_scale for codebook layers).
size_t export_layer_bytes(const sparse_model *m, const sparse_layer *l);

#endif
