// The HDF5 writer of export files: root attributes, /net, /history, /params
// (tensors that were not folded) and one CSR group per conv/linear layer,
// written to a temporary file that is synced and renamed over the target.
#include "runtime/half.h"
#include "export/export_io.h"
#include "runtime/h5io.h"

#include "export/codebook.h"

#include <hdf5.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT_FORMAT "sparsecnn-export"
#define EXPORT_FORMAT_VERSION 1

// --- HDF5 helpers -------------------------------------------------------------

typedef h5io ewr;

// Writes a 1-D dataset of n values.
static int ewr_dset1(ewr *io, hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t n,
                     const void *buf) {
    hsize_t dims[1] = {(hsize_t)n};
    return h5io_dset_write(io, loc, name, ftype, mtype, 1, dims, buf);
}

// Writes n floats as an IEEE half dataset (rounded to nearest even).
static int ewr_dset_half(ewr *io, hid_t loc, const char *name, size_t n, const float *v) {
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);  // (n)
    if (!h) return sc_fail(io->err, "out of memory (%s)", io->path);
    for (size_t i = 0; i < n; i++) h[i] = half_from_float(v[i]);
    hid_t t = h5io_half_type(io);
    int rc = t < 0 ? -1 : ewr_dset1(io, loc, name, t, t, n, h);
    if (t >= 0) H5IO_CLOSE(io, H5Tclose, t, rc);
    free(h);
    return rc;
}

// --- one layer --------------------------------------------------------------

// 1 when indptr needs 64 bits.
static int ewr_indptr_wide(const sparse_layer *l) {
    return (long long)l->K * l->nnz_row > INT32_MAX;
}

// Bytes of a layer's arrays as stored.
size_t export_layer_bytes(const sparse_model *m, const sparse_layer *l) {
    const size_t n = (size_t)l->K * l->nnz_row, K = (size_t)l->K;
    size_t b = n * (l->vtype == SV_FP32 ? 4 : 2) + 2 * n * 4 + (K + 1) * (ewr_indptr_wide(l) ? 8 : 4) + K * 4;
    if (l->vtype == SV_CODEBOOK4)
        b += (n + 1) / 2 + (n + 7) / 8 + K * 4 +
             (size_t)l->ncodebook * (export_codebook_half_exact(l->codebook, l->ncodebook) ? 2 : 4);
    return b;
}

// Writes the scipy/anndata CSR attributes and the geometry/fusion ones.
static int ewr_layer_attrs(ewr *io, hid_t g, const sparse_model *m, const sparse_layer *l) {
    const long long shape[2] = {l->K, (long long)l->C * l->R * l->S};
    const int k[2] = {l->R, l->S};
    SC_TRY(h5io_attr_str(io, g, "encoding-type", "csr_matrix"));
    SC_TRY(h5io_attr_str(io, g, "encoding-version", "0.1.0"));
    SC_TRY(h5io_attr_write(io, g, "shape", H5T_STD_I64LE, H5T_NATIVE_LLONG, 2, shape));
    SC_TRY(h5io_attr_str(io, g, "kind", l->is_linear ? "linear" : "conv"));
    SC_TRY(h5io_attr_write(io, g, "k", H5T_STD_I32LE, H5T_NATIVE_INT, 2, k));
    const char *names[] = {"stride", "pad", "in_c", "in_h", "in_w", "out_c", "out_h", "out_w", "nnz_row"};
    const int vals[] = {l->stride, l->pad, l->C, l->H, l->W, l->K, l->P, l->Q, l->nnz_row};
    for (int i = 0; i < 9; i++) SC_TRY(h5io_attr_int(io, g, names[i], vals[i]));
    SC_TRY(h5io_attr_i64(io, g, "nnz", l->nnz));
    SC_TRY(h5io_attr_i64(io, g, "padding", (long long)l->K * l->nnz_row - l->nnz));
    SC_TRY(h5io_attr_str(io, g, "bn", l->bn >= 0 ? m->nt->layers[l->bn].name : ""));
    SC_TRY(h5io_attr_str(io, g, "values", sparse_vtype_name(l->vtype)));
    SC_TRY(h5io_attr_str(io, g, "activation", l->relu ? "relu" : "none"));
    SC_TRY(h5io_attr_str(io, g, "pool", l->pool_k ? "max" : "none"));
    if (!l->pool_k) return 0;
    SC_TRY(h5io_attr_int(io, g, "pool_size", l->pool_k));
    SC_TRY(h5io_attr_int(io, g, "pool_stride", l->pool_stride));
    return h5io_attr_int(io, g, "pool_pad", l->pool_pad);
}

// Writes indptr: row k starts at k * nnz_row (int32 unless it needs more).
static int ewr_indptr(ewr *io, hid_t g, const sparse_layer *l) {
    long long *p = malloc(((size_t)l->K + 1) * sizeof *p);  // (K + 1)
    if (!p) return sc_fail(io->err, "out of memory (%s)", io->path);
    for (int k = 0; k <= l->K; k++) p[k] = (long long)k * l->nnz_row;
    int rc = ewr_dset1(io, g, "indptr", ewr_indptr_wide(l) ? H5T_STD_I64LE : H5T_STD_I32LE,
                       H5T_NATIVE_LLONG, (size_t)l->K + 1, p);
    free(p);
    return rc;
}

// Writes a codebook layer's codes, padding mask, codebook (fp16 when every
// entry is fp16-exact, else fp32) and row scales.
static int ewr_layer_codes(ewr *io, hid_t g, const sparse_layer *l, size_t n) {
    SC_TRY(ewr_dset1(io, g, "codes", H5T_STD_U8LE, H5T_NATIVE_UINT8, (n + 1) / 2, l->codes));
    SC_TRY(ewr_dset1(io, g, "pad_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, (n + 7) / 8, l->pad_mask));
    if (export_codebook_half_exact(l->codebook, l->ncodebook))
        SC_TRY(ewr_dset_half(io, g, "codebook", (size_t)l->ncodebook, l->codebook));
    else
        SC_TRY(ewr_dset1(io, g, "codebook", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                         (size_t)l->ncodebook, l->codebook));
    return ewr_dset1(io, g, "row_scale", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, (size_t)l->K, l->row_scale);
}

// Writes a layer's datasets: data in fp32, or fp16 for fp16 and codebook layers.
static int ewr_layer_data(ewr *io, hid_t g, const sparse_layer *l) {
    const size_t n = (size_t)l->K * l->nnz_row;
    if (l->vtype == SV_FP32)
        SC_TRY(ewr_dset1(io, g, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, n, l->values));
    else
        SC_TRY(ewr_dset_half(io, g, "data", n, l->values));
    SC_TRY(ewr_dset1(io, g, "indices", H5T_STD_I32LE, H5T_NATIVE_INT32, n, l->indices));
    SC_TRY(ewr_indptr(io, g, l));
    SC_TRY(ewr_dset1(io, g, "offsets", H5T_STD_I32LE, H5T_NATIVE_INT32, n, l->offsets));
    SC_TRY(ewr_dset1(io, g, "bias", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, (size_t)l->K, l->bias));
    return l->vtype == SV_CODEBOOK4 ? ewr_layer_codes(io, g, l, n) : 0;
}

// Writes /layers with one group per conv/linear layer.
static int ewr_layers(ewr *io, const sparse_model *m) {
    hid_t gl = h5io_group_create(io, io->file, "layers");
    if (gl < 0) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        hid_t g = h5io_group_create(io, gl, m->nt->layers[l->layer].name);
        if (g < 0) {
            rc = -1;
            break;
        }
        rc = ewr_layer_attrs(io, g, m, l);
        if (rc == 0) rc = ewr_layer_data(io, g, l);
        H5IO_CLOSE(io, H5Gclose, g, rc);
    }
    H5IO_CLOSE(io, H5Gclose, gl, rc);
    return rc;
}

// --- the file -----------------------------------------------------------------

// Writes the root attributes.
static int ewr_root(ewr *io, const sparse_model *m) {
    const net *nt = m->nt;
    hid_t r = io->file;
    SC_TRY(h5io_attr_str(io, r, "format", EXPORT_FORMAT));
    SC_TRY(h5io_attr_int(io, r, "format_version", EXPORT_FORMAT_VERSION));
    SC_TRY(h5io_attr_str(io, r, "arch", nt->arch));
    SC_TRY(h5io_attr_str(io, r, "dataset", m->dataset));
    SC_TRY(h5io_attr_int(io, r, "classes", nt->classes));
    SC_TRY(h5io_attr_int(io, r, "in_c", nt->in_c));
    SC_TRY(h5io_attr_int(io, r, "in_h", nt->in_h));
    SC_TRY(h5io_attr_int(io, r, "in_w", nt->in_w));
    return h5io_attr_str(io, r, "values", sparse_vtype_name(m->vtype));
}

// Writes /net: description and input normalisation.
static int ewr_net(ewr *io, const net *nt) {
    hid_t g = h5io_group_create(io, io->file, "net");
    if (g < 0) return -1;
    const char *desc = nt->desc ? nt->desc : "";
    int rc = h5io_dset_strs(io, g, "description", 0, 1, &desc);
    if (rc == 0) rc = ewr_dset1(io, g, "input_mean", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, nt->in_mean);
    if (rc == 0) rc = ewr_dset1(io, g, "input_std", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, nt->in_std);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Writes /params: the tensors that were not folded into a CSR layer.
static int ewr_params(ewr *io, const sparse_model *m) {
    hid_t g = h5io_group_create(io, io->file, "params");
    if (g < 0) return -1;
    int rc = 0;
    for (int t = 0; rc == 0 && t < m->nt->ntensors; t++) {
        if (!sparse_model_tensor_in_params(m, t)) continue;
        const ptensor *p = &m->nt->tensors[t];
        hsize_t dims[4];
        for (int i = 0; i < p->ndim; i++) dims[i] = (hsize_t)p->dims[i];
        rc = h5io_dset_write(io, g, p->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, p->ndim, dims,
                      net_tensor_data(m->nt, t));
    }
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Writes everything into the open file.
static int ewr_all(ewr *io, const sparse_model *m, const char *const *history, int nhistory) {
    SC_TRY(ewr_root(io, m));
    SC_TRY(ewr_net(io, m->nt));
    SC_TRY(h5io_dset_strs(io, io->file, "history", 1, nhistory, history));
    SC_TRY(ewr_params(io, m));
    return ewr_layers(io, m);
}

// --- saving -------------------------------------------------------------------

typedef struct {
    const sparse_model *m;
    const char *const *history;
    int nhistory;
} ewr_ctx;

// Writes the whole file into the open io->file (the h5io_writer form).
static int ewr_cb(h5io *io, const void *ctx) {
    const ewr_ctx *c = ctx;
    return ewr_all(io, c->m, c->history, c->nhistory);
}

// Writes m to path atomically, with a checksum (runtime/h5io.h: h5io_file_save).
int export_write(const char *path, const sparse_model *m, const char *const *history, int nhistory,
                 sc_err *err) {
    ewr_ctx c = {m, history, nhistory};
    return h5io_file_save(path, ewr_cb, &c, err);
}
