// What the quantize tool reports per conv/linear weight and in total: kept
// weights, distinct non-zero values, the error against the original weights,
// saturated values, and three model sizes (docs/quantize.md):
//   dense fp32       4 bytes per weight;
//   sparse           CSR of the kept (mask 1) weights, one row per output
//                    channel: fp32 values + int32 column indices + int32 row
//                    pointers (rows + 1);
//   sparse+codebook  the same CSR with each value as its quantized code:
//                    ceil(kept * b / 8) bytes of b-bit codes (k-means
//                    b = ceil(log2 k), linear b = bits, half 16) plus the
//                    codebook (k * 2 bytes in fp16, k * 4 in fp32; row
//                    scales add one such value per output channel) or the
//                    scales (4 bytes each) and zero points (4 bytes each,
//                    asymmetric only); tensors left in fp32 count as sparse.
// Biases, batch-norm parameters and statistics are not in these figures;
// they are reported once as other_fp32_bytes.
#ifndef SC_QUANTIZE_REPORT_H
#define SC_QUANTIZE_REPORT_H

#include <stdio.h>

#include "runtime/error.h"
#include "runtime/json.h"
#include "runtime/net.h"
#include "runtime/quant_io.h"

typedef struct {
    int tensor;           // index into nt->tensors (a conv or linear weight)
    int qi;               // index into q->t, -1 when left in fp32
    size_t weights, kept; // all weights, kept (mask 1) weights
    int rows;             // output channels
    long distinct;        // distinct non-zero values among the kept weights (row
                          // scales: the most in one output channel)
    double rmse, max_err; // kept weights: quantized against original
    long saturated;       // linear: kept weights clipped to the range
    long dense_bytes, sparse_bytes, packed_bytes;
} quant_layer_stat;

typedef struct {
    int n;
    quant_layer_stat *rows;  // (n) one per conv/linear weight, in tensor order
    size_t weights, kept;
    long distinct_max;       // largest count of distinct non-zero values of a quantized tensor
                             // (row scales: of one output channel of a quantized tensor)
    long saturated;
    long dense_bytes, sparse_bytes, packed_bytes, other_bytes;
} quant_report;

// Builds the report for the quantized net nt, its compact form q and the
// parameters before quantization (orig, nparam floats).
int quant_report_build(const net *nt, const float *orig, const quant_model *q, quant_report *r,
                       sc_err *err);

// Frees the rows.
void quant_report_free(quant_report *r);

// Prints one row per conv/linear weight and the totals.
void quant_report_table(FILE *f, const net *nt, const quant_model *q, const quant_report *r);

// Adds "sizes": {...} and "layers": [...] to the open JSON object.
void quant_report_json(json_writer *j, const net *nt, const quant_model *q, const quant_report *r);

// Short description of the method ("k-means 16 (4-bit, fp16 codebook)").
void quant_report_method(const quant_model *q, char *out, size_t len);

#endif
