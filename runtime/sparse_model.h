// An exported model in memory: the file `export` writes (docs/export-format.md)
// loaded for the deploy runtime. The file holds each conv and linear layer
// as compact CSR (real non-zeros only) or, when pruned on blocks, as BSR of
// its kept blocks (hybrid layers: plus a CSR remainder of single weights;
// kept in memory too: sparse_bsr); in memory every layer is held as
// CSR, one row per output channel, with batch norm folded into its weights
// and bias, every row padded to the layer's maximum number of non-zeros, and
// the column indices also given as offsets into the zero-padded input (Park
// et al.), all derived at load time (runtime/sparse_layout.c). The graph
// (layer list, shapes, residual links) is the net built from the stored
// description; BN layers that were folded are marked.
//
// Contract between export/ (writer, tests) and the deploy runtime (reader).
// Implemented in runtime/sparse_model.c (loader, HDF5 details confined there)
// and runtime/sparse_layout.c (the padded layout).
//
// Fusion (sparse_layer_fusion, the same rule for writer and reader): a conv
// or linear layer whose only reader is a BN folds that BN; the layer (or its
// folded BN) whose only reader is a ReLU fuses the ReLU; a fused ReLU whose
// only reader is a max pool fuses the pool. The sparse op's output then
// stands for the output of the last fused layer (out_layer).
#ifndef SC_SPARSE_MODEL_H
#define SC_SPARSE_MODEL_H

#include <stdint.h>

#include "error.h"
#include "net.h"

// The export file's format name and versions, one definition for writer and
// reader: version 2 holds compact CSR layers only, version 3 also BSR layers,
// version 4 also BSR layers with a remainder of single weights (a file is
// written at the lowest version that holds its layers, which older readers read).
#define SPARSE_FORMAT "sparsecnn-export"
#define SPARSE_FORMAT_VERSION_CSR 2
#define SPARSE_FORMAT_VERSION_BSR 3
#define SPARSE_FORMAT_VERSION_HYBRID 4

typedef enum { SV_FP32 = 0, SV_FP16 = 1, SV_CODEBOOK4 = 2 } sparse_vtype;

// A layer's real entries as the file stores them (compact CSR, padding
// dropped): row pointers, columns, and values (plain layers) or 4-bit codes
// packed two per byte (codebook layers).
typedef struct {
    int64_t *indptr;   // (K + 1)
    int32_t *indices;  // (nnz)
    float *values;     // (nnz), plain layers, else NULL
    uint8_t *codes;    // ((nnz + 1) / 2), codebook layers (zeroed), else NULL
} sparse_compact;

// The block structure of a layer stored as BSR (docs/export-format.md): the
// (K, R*S*C) matrix with its columns in (r, s, c) order, cut into blocks of
// kb rows x cb columns (kb divides K, cb divides C, so a block is kb output
// channels x cb input channels at one kernel tap), the kept blocks only, in
// scipy's bsr_matrix convention. Every entry of a kept block is a real entry
// of the layer (also in its padded CSR). For the block-sparse kernels.
typedef struct {
    int kb, cb;            // block rows x columns; 0 x 0 when the layer is not BSR
    long nblocks;          // kept blocks
    int64_t *indptr;       // (K/kb + 1) first block of each block row
    int32_t *indices;      // (nblocks) block column j, ascending within a block row: the
                           // block holds tap t = j*cb / C (t = r*S + s) and input channels
                           // j*cb % C .. + cb - 1 of output channels [kb*i, kb*(i+1))
    float *values;         // (nblocks, kb, cb) the entries decoded as sparse_layer.values
    uint8_t *codes;        // codebook layers: the 4-bit code of every entry in values
                           // order, two per byte, low nibble first; else NULL
    // The remainder of a hybrid layer (prune's pattern KxC+F): its real
    // entries outside whole kept blocks, CSR over the K rows of the same
    // (K, R*S*C) matrix; nrem 0 and the arrays NULL without one.
    long nrem;
    int64_t *rem_indptr;   // (K + 1)
    int32_t *rem_indices;  // (nrem) KRSC columns, ascending within a row
    float *rem_values;     // (nrem) decoded as values
    uint8_t *rem_codes;    // codebook layers: their 4-bit codes (as codes), else NULL
} sparse_bsr;

typedef struct sparse_layer {
    int layer;             // index of the conv or linear layer in nt->layers
    int bn;                // index of the BN layer folded into it, -1 when none
    int is_linear;         // 1: linear layer (R = S = 1, H = W = 1, C = in features)
    int K, C, R, S;        // rows (output channels) and the kernel; columns = C * R * S
    int stride, pad;       // conv geometry (linear: 1, 0)
    int H, W, P, Q;        // input and output spatial size (before any fused pooling)
    long nnz;              // real non-zeros (explicit padding zeros not counted)
    int nnz_row;           // entries per row after padding; row k is [k*nnz_row, (k+1)*nnz_row)
    int32_t *indices;      // (K, nnz_row) column c*R*S + r*S + s of the (K, C*R*S) matrix,
                           // ascending within a row
    int32_t *offsets;      // (K, nnz_row) (c*(H+2pad) + r)*(W+2pad) + s: offset into the
                           // zero-padded input plane stack (linear: equal to indices)
    float *values;         // (K, nnz_row) BN-folded weights decoded to fp32 (fp16 layers:
                           // the fp16 values widened; codebook layers: codebook[code] *
                           // row_scale[k] in fp32); explicit padding zeros are 0
    float *bias;           // (K) BN-folded bias (zeros when the layer has neither)
    sparse_vtype vtype;    // how THIS layer is stored: SV_CODEBOOK4 only for layers with a
                           // codebook (a codebook4 file keeps layers that quantize left
                           // alone, e.g. the first conv, as fp32/fp16); codes, ncodebook,
                           // codebook and row_scale are set for SV_CODEBOOK4 layers only
                           // (else NULL / 0); pad_mask for every layer
    uint8_t *codes;        // ((K*nnz_row)+1)/2 bytes, two 4-bit indices per byte, low nibble
                           // first, in values order; padding entries hold code 0
    uint8_t *pad_mask;     // ((K*nnz_row)+7)/8 bytes, bit j%8 of byte j/8 (LSB first) set
                           // for the explicit padding zeros (their value is 0 whatever the
                           // code: a full 16-entry codebook has no code for zero)
    int ncodebook;         // codebook entries in use (1..16)
    float codebook[16];    // the codebook widened to fp32 (stored as fp16 when every entry
                           // is fp16-exact, as quantize writes it), UNFOLDED (the quantized
                           // weights before BN folding); entries past ncodebook are 0
    float *row_scale;      // (K) BN scale of each row, fp32 (1 without BN): value j of row
                           // k = pad(j) ? 0 : codebook[code(j)] * row_scale[k]
    int relu;              // 1 when a ReLU follows the (folded) layer directly
    int pool_k, pool_stride, pool_pad;  // max pool that follows the ReLU; pool_k 0: none
    int relu_layer;        // index of the fused ReLU in nt->layers, -1 when none
    int pool_layer;        // index of the fused max pool in nt->layers, -1 when none
    int out_layer;         // last layer fused into this one (the layer itself, its BN, ReLU
                           // or pool): the sparse op's output is that layer's output
    sparse_bsr bsr;        // the block structure when the layer is stored as BSR (bsr.kb
                           // > 0): its blocks and remainder hold the same entries as the
                           // padded CSR above
} sparse_layer;

typedef struct {
    net *nt;               // the graph with the exported (folded) weights: every conv and
                           // linear weight is its CSR densified, its bias the folded bias;
                           // a folded BN is made identity-plus-bias (gamma 1, mean 0,
                           // var 1 - eps, beta = the folded bias, and the conv's own bias
                           // 0), so the CPU executor runs nt as a check of the file;
                           // BNs that were not folded keep their parameters (/params)
    char dataset[256];     // dataset the model was trained on
    sparse_vtype vtype;    // the file's value type: SV_CODEBOOK4 when some layer has a
                           // codebook (see sparse_layer.vtype), else SV_FP32 or SV_FP16
    int version;           // format_version of the file it was loaded from (0: built)
    int nlayers;
    sparse_layer *layers;  // every conv and linear layer, in nt->layers order
} sparse_model;

// Loads an export file. Errors name the file and the part that is wrong.
sparse_model *sparse_model_load(const char *path, sc_err *err);

// Frees a loaded model (NULL is fine).
void sparse_model_free(sparse_model *m);

// The sparse layer for nt->layers[layer], or NULL.
const sparse_layer *sparse_model_find(const sparse_model *m, int layer);

// --- helpers shared by the writer (export/) and the loader ------------------

// Fills l's graph fields for conv/linear layer li of nt: layer, bn,
// is_linear, K, C, R, S, stride, pad, H, W, P, Q, relu, pool_*, relu_layer,
// pool_layer, out_layer (the fusion rule above). Arrays are left alone.
void sparse_layer_fusion(const net *nt, int li, sparse_layer *l);

// Offset into the zero-padded input of column index col of layer l:
// (c*(H+2pad) + r)*(W+2pad) + s for col = c*R*S + r*S + s (linear: col).
int64_t sparse_layer_offset(const sparse_layer *l, int32_t col);

// 1 when tensor t of m->nt is stored in the file's /params: it belongs to
// neither a conv/linear layer nor a folded BN (normally none).
int sparse_model_tensor_in_params(const sparse_model *m, int t);

// Writes every layer's CSR (densified) and folded bias into m->nt, makes the
// folded BNs identity-plus-bias and sets the masks of the prunable weights
// to (weight != 0). Fails when a bias has nowhere to go.
int sparse_model_fill_net(sparse_model *m, sc_err *err);

// Columns of one padded row: the non-zero columns of w (cols floats) plus
// the zero columns nearest to them (a column in the same input channel, i.e.
// the same block of rs columns, before any other; then by distance; then the
// lower column) until there are nnz_row (<= cols), ascending, into idx. A
// row without non-zeros gets columns 0..nnz_row-1. scratch: 3*cols + 3
// entries. Returns the number of non-zeros (at most nnz_row is required).
int sparse_row_columns(const float *w, int cols, int rs, int nnz_row, int32_t *idx,
                       uint32_t *scratch);

// Allocates l's padded arrays for K rows of l->nnz_row entries after l->vtype
// is set (pad_mask and codes zeroed; codes and row_scale for codebook layers).
int sparse_layer_alloc(sparse_layer *l, sc_err *err);

// Allocates c for K rows and nnz entries of value type v (the export writer
// and the CSR reader); -1 when out of memory. Free with sparse_compact_free
// either way.
int sparse_compact_alloc(sparse_compact *c, int K, long nnz, sparse_vtype v);
void sparse_compact_free(sparse_compact *c);

// Builds l's padded layout from its compact CSR, after l->nnz_row is set to
// the longest row and sparse_layer_alloc: indptr (K + 1) over the real entries, idx their columns (valid and ascending within each row), and
// their values vals (plain layers) or their 4-bit codes packed two per byte,
// low nibble first (codebook layers; l->codebook and l->row_scale set, the
// values decoded as codebook[code] * row_scale[k]). Fills indices,
// offsets, values, pad_mask and codes (sparse_row_columns padding).
int sparse_layer_expand(sparse_layer *l, const int64_t *indptr, const int32_t *idx,
                        const float *vals, const uint8_t *codes, sc_err *err);

// --- BSR layers (runtime/sparse_bsr.c) --------------------------------------

// Column of the (K, R*S*C) matrix (taps outer, channels inner) of column col
// = c*R*S + t of the (K, C*R*S) one, and back.
int32_t sparse_col_krsc(const sparse_layer *l, int32_t col);
int32_t sparse_col_kcrs(const sparse_layer *l, int32_t col);

// Fills l->bsr with blocks of kb x cb from l's padded CSR (built): fails
// unless kb divides K, cb divides C and the real entries are exactly whole
// blocks of that grid (then l->bsr is left empty). hybrid: the blocks whose
// entries are all real are the blocks, and every other real entry goes to
// the remainder instead of failing.
int sparse_bsr_build(sparse_layer *l, int kb, int cb, int hybrid, sc_err *err);

// The compact CSR of l->bsr and its remainder (read from a file;
// l->codebook and row_scale set for codebook layers): every entry, columns
// ascending. indptr (K + 1), idx and vals (bsr.nblocks*kb*cb + bsr.nrem),
// codes (half that, rounded up, zeroed; codebook layers only, else NULL);
// sets l->nnz and l->nnz_row. scratch: C*R*S entries.
void sparse_bsr_to_csr(sparse_layer *l, int64_t *indptr, int32_t *idx, float *vals,
                       uint8_t *codes, int32_t *scratch);

// Frees l->bsr's arrays and empties it.
void sparse_bsr_free(sparse_bsr *b);

// Index of the first NaN or infinity of v (n values), or -1.
long sparse_first_nonfinite(const float *v, size_t n);

// Name of a value type as stored in the file: "fp32", "fp16", "codebook4".
const char *sparse_vtype_name(sparse_vtype v);

#endif
