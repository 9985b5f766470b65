// Quantizing a whole net: which tensors, with which method, and the decoded
// values written back into the net's parameters (so every forward pass from
// then on runs the quantized weights, not a simulation of them).
#ifndef SC_QUANTIZE_APPLY_H
#define SC_QUANTIZE_APPLY_H

#include <stdint.h>

#include "quantize/kmeans.h"
#include "quantize/linear.h"
#include "runtime/error.h"
#include "runtime/net.h"
#include "runtime/quant_io.h"

typedef struct {
    quant_method method;
    kmeans_cfg km;        // QM_KMEANS (km.row_scale: a scale per output channel; km.net_h:
                          // (nparam) sensitivities for weighted k-means, or NULL)
    int codebook_fp16;    // QM_KMEANS: 1 = fp16 codebooks (km.fp16 follows it)
    linear_cfg lin;       // QM_LINEAR
    int skip_first;       // k-means/linear: leave the first conv weight in fp32
    int skip_last;        // k-means/linear: leave the last linear weight in fp32
    uint64_t seed;        // k-means++ draws (a GSL generator per tensor)
} quant_cfg;

// Marks in sel (ntensors entries) the tensors the configuration quantizes:
// k-means and linear every conv and linear weight (PT_WEIGHT) but the
// skipped ones, half every trainable tensor. Returns how many.
int quant_net_select(const net *nt, const quant_cfg *c, int *sel);

// Quantizes the selected tensors of nt, returns their compact form in *out
// and replaces their values in nt->param by the decoded ones (pruned
// weights stay exactly 0). Fails when nothing is selected.
int quant_net_apply(net *nt, const quant_cfg *c, quant_model **out, sc_err *err);

// Writes the decoded values of every tensor of q into nt->param.
void quant_net_decode(net *nt, const quant_model *q);

// Index bits of one weight: ceil(log2 k) for k-means, bits for linear, 16 for half.
int quant_index_bits(const quant_model *q);

#endif
