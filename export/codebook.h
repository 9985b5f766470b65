// Codebooks of the export: which layers are stored as 4-bit indices into a
// per-layer codebook of at most 16 unfolded weight values, taken from
// quantize's k-means codebooks (runtime/quant_io.h) or, with --codebook on,
// derived from a layer's distinct non-zero values.
#ifndef SC_EXPORT_CODEBOOK_H
#define SC_EXPORT_CODEBOOK_H

#include <stddef.h>
#include <stdint.h>

#include "export/csr.h"

typedef struct {
    int use;               // 1: the layer is stored as 4-bit codes
    int n;                 // codebook entries (1..16)
    float cb[16];          // the entries (quantize's order, or ascending when derived)
    const uint8_t *qidx;   // quantize's centroid index of every weight, or NULL (derived:
                           // codes are found by value)
    const float *qscale;   // quantize's scale of every output channel (--row-scale; the
                           // unfolded weight of row k is cb[code] * qscale[k]), or NULL
} export_codebook;

// Plans the codebook of every layer of m (fusion and scan done): cbs gets
// m->nlayers entries. Auto mode keeps plain values (with a notice in info)
// for a quantized layer whose codebook does not fit in 4 bits; on mode
// fails there and for a layer with more than 16 distinct values.
int export_codebook_plan(const net *nt, const sparse_model *m, const export_cfg *cfg,
                         export_codebook *cbs, export_info *info, sc_err *err);

// Code of weight i of the layer's weight tensor, whose value is w (non-zero).
int export_codebook_code(const export_codebook *cb, size_t i, float w);

// 1 when every entry is exactly representable in fp16.
int export_codebook_half_exact(const float *cb, int n);

#endif
