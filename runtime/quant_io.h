// The quantized representation of a model (what `quantize` writes into the
// `/quant` group of a model file, docs/quantize.md) and its reading and
// writing. A quantized model file is an ordinary model file: `/params` hold
// the DECODED values exactly, so every tool loads it with model_load(); the
// compact form sits next to them:
//
//   k-means  per tensor a codebook (k centroids, fp16 or fp32 in the file)
//            and one uint8 index per weight; weight i decodes to
//            mask[i] ? codebook[indices[i]] : 0 (pruned weights hold index 0);
//            with row scales (quantize --row-scale, /quant version 2) also
//            one scale per output channel k, stored like the codebook, and
//            weight i of row k decodes to codebook[indices[i]] * row_scale[k]
//            (the product rounded once in float32)
//   linear   per tensor (or per output channel) a scale and a zero point and
//            one int8/int16 integer per weight; weight i of channel c decodes
//            to (float)(scale[c] * (float)(q[i] - zero_point[c])) (pruned
//            weights hold q = zero_point, so they decode to exactly 0)
//   half     every trainable tensor rounded to fp16; nothing per tensor but
//            the tensor's name (its /params values are fp16-exact)
//
// Typical use by a reader (export):
//
//   net *nt = model_load(path, &meta, &err);
//   quant_model *q = NULL;
//   if (quant_load(path, nt, &q, &err)) ...;   // q stays NULL: no /quant
//   for (int i = 0; q && i < q->ntensors; i++) {
//       const quant_tensor *t = &q->t[i];       // nt->tensors[t->tensor]
//       ... t->codebook[t->indices[j]] ...
//   }
//   quant_model_free(q);
#ifndef SC_QUANT_IO_H
#define SC_QUANT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "model_io.h"
#include "net.h"

typedef enum { QM_KMEANS = 0, QM_LINEAR = 1, QM_HALF = 2 } quant_method;

// Method names as stored in the file's `method` attributes, in enum order.
#define QUANT_METHODS "kmeans|linear|half"

typedef struct {
    int tensor;            // index into nt->tensors
    char name[48];         // the tensor's name (nt->tensors[tensor].name)
    size_t count;          // weights in the tensor
    // k-means
    int k;                 // centroids (2..256)
    float *codebook;       // (k) centroid values as decoded (fp16-exact when stored as fp16)
    uint8_t *indices;      // (count) centroid of each weight; 0 for pruned weights
    int nrows;             // k-means with row scales: dims[0]; else 0
    float *row_scale;      // (nrows) scale of each output channel (fp16-exact when the
                           // codebook is fp16), or NULL: decoded = codebook[idx] * row_scale[k]
    // linear
    int nscale;            // 1 (per tensor) or dims[0] (per output channel)
    float *scale;          // (nscale) step between two integers
    int32_t *zero_point;   // (nscale) integer that decodes to 0 (0 when symmetric)
    int16_t *q;            // (count) integers in [qmin, qmax] of `bits` bits
    long saturated;        // values clipped to the range when quantizing (not stored per
                           // tensor in the file: 0 after quant_load)
} quant_tensor;

typedef struct {
    quant_method method;
    int bits;              // linear: 8 or 16; k-means: index bits ceil(log2 k); half: 16
    int k;                 // k-means: centroids per tensor; else 0
    int codebook_fp16;     // k-means: 1 = codebooks stored as fp16, 0 = fp32
    int row_scale;         // k-means: 1 = every tensor has per-output-channel scales
    int per_channel;       // linear: 1 = one scale per output channel
    int symmetric;         // linear: 1 = zero points are 0
    int ntensors;
    quant_tensor *t;       // (ntensors) in nt->tensors order
} quant_model;

// Allocates an empty quant_model for a method with room for n tensors
// (zeroed; the caller fills it). NULL with err filled when out of memory.
quant_model *quant_model_new(quant_method method, int n, sc_err *err);

// Frees a quant_model and everything it owns (NULL is fine).
void quant_model_free(quant_model *q);

// Allocates the per-tensor arrays of t for tensor `tensor` of nt: k-means
// with k > 0 (codebook, indices), linear with nscale > 0 (scale, zero
// point, q). Zeroed.
int quant_tensor_alloc(quant_tensor *t, const net *nt, int tensor, int k, int nscale,
                       sc_err *err);

// Allocates t->row_scale for `rows` output channels (all 1), for a k-means
// tensor with row scales.
int quant_tensor_row_scale_alloc(quant_tensor *t, int rows, sc_err *err);

// Writes the decoded values of t into out (count floats) using the
// tensor's mask (count floats, 1 = kept; NULL = all kept). Every tool and
// reader decodes with this one function, so /params match bit for bit.
void quant_tensor_decode(const quant_model *q, const quant_tensor *t, const float *mask,
                         float *out);

// Writes the model like model_save() and adds /quant (when q is not NULL),
// all in one atomic replacement of path.
int quant_model_save(const char *path, const net *nt, const model_meta *meta,
                     const quant_model *q, sc_err *err);


// Reads /quant of a model file for the net model_load() read from the same
// file. *out is NULL when the file has no /quant. Checks every tensor's
// name, size, index range, integer range and row scales (positive, finite;
// files without them, version 1, load as before), and that decoding reproduces
// the net's /params exactly (an error names the first tensor that differs:
// the file was changed after quantization).
int quant_load(const char *path, const net *nt, quant_model **out, sc_err *err);

#endif
