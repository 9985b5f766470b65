// The CSR builder of `export` (Pietroń and Żurek, section 7): turns a loaded
// net into the in-memory form of an export file (runtime/sparse_model.h). Per
// conv and linear layer: batch norm folded into weights and bias (the stored
// entries are the unfolded weights' non-zeros, or the kept blocks of a layer
// stored as BSR: export/bsr.h; folding does not change them), one CSR row per
// output channel, rows padded to the layer's maximum with explicit zeros at
// the columns nearest the row's non-zeros (same input channel first), column
// indices as offsets into the padded input (Park et al.), and the values in
// fp32, fp16 or as 4-bit codebook indices.
#ifndef SC_EXPORT_CSR_H
#define SC_EXPORT_CSR_H

#include <stdint.h>

#include "runtime/error.h"
#include "runtime/net.h"
#include "runtime/pattern.h"
#include "runtime/quant_io.h"
#include "runtime/sparse_model.h"

typedef enum { EXPORT_CB_AUTO = 0, EXPORT_CB_ON = 1, EXPORT_CB_OFF = 2 } export_cb_mode;

typedef struct {
    int half;                 // plain values in fp16 (else fp32)
    export_cb_mode codebook;  // auto: 4-bit codes for the layers quantize gave a k-means
                              // codebook of <= 16 entries, plain values for the rest; on:
                              // also derive codebooks from the other layers' distinct
                              // values (an error beyond 16); off: plain values only
    const quant_model *quant; // quantize's compact form of the input (quant_load), or NULL
    const sc_pattern *pattern;// the masks' pattern (the model's attribute), or NULL: every
                              // layer CSR; KxC: layers on their block grid as BSR (bsr.h)
    int csr_only;             // 1: every layer as CSR whatever the pattern (--bsr off)
} export_cfg;

typedef struct {
    int pruned;               // 1 when some prunable weight is pruned (mask 0)
    int codebook_layers;      // layers stored as 4-bit codes
    char notice[320];         // why a quantized layer kept plain values, or ""
    int bsr_layers;           // layers stored as BSR
    char bsr_notice[320];     // why a block layer was stored as CSR (the first), or ""
} export_info;

// Builds the sparse model of nt (unchanged): a fresh copy of the graph whose
// weights are the exported ones (sparse_model_fill_net), the CSR layers and
// the value type. dataset is recorded in the model. NULL with err filled on
// failure (codebook on: a layer with more than 16 distinct values or
// centroids; a value beyond fp16's range; offsets beyond int32; memory).
sparse_model *export_build(const net *nt, const char *dataset, const export_cfg *cfg,
                           export_info *info, sc_err *err);

#endif
