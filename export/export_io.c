// The HDF5 writer of export files: root attributes, /net, /history, /params
// (tensors that were not folded) and one compact CSR group per conv/linear
// layer (real non-zeros only, narrow column indices, 4-bit codes, shuffle +
// deflate), or a BSR group of its kept blocks (layers on their block grid;
// the file is then format_version 3), with a CSR subgroup "remainder" of the
// single weights beside them for hybrid layers (format_version 4), written to
// a temporary file that is synced and renamed over the target.
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


#define EWR_FILTER_MIN 1024   // raw bytes from which a dataset is chunked, shuffled, deflated
#define EWR_CHUNK_MAX (1 << 20)  // elements per chunk at most
#define EWR_DEFLATE 6         // zlib level

// --- HDF5 helpers -------------------------------------------------------------

typedef h5io ewr;

// Dataset creation properties for ndim dims of ftype: chunked (whole rows
// of the trailing dims, up to EWR_CHUNK_MAX values), shuffled (values wider
// than a byte) and deflated from EWR_FILTER_MIN raw bytes on.
static hid_t ewr_dcpl(ewr *io, hid_t ftype, int ndim, const hsize_t *dims) {
    hid_t p = -1;
    const size_t size = H5Tget_size(ftype);
    size_t n = 1, inner = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)dims[i], inner *= i ? (size_t)dims[i] : 1;
    H5IO_CHECK(io, p = H5Pcreate(H5P_DATASET_CREATE));
    if (n * size < EWR_FILTER_MIN) return p;
    hsize_t chunk[3] = {0, ndim > 1 ? dims[1] : 1, ndim > 2 ? dims[2] : 1};
    const size_t rows = EWR_CHUNK_MAX / inner ? EWR_CHUNK_MAX / inner : 1;
    chunk[0] = (hsize_t)(dims[0] < rows ? dims[0] : rows);
    H5IO_CHECK(io, H5Pset_chunk(p, ndim, chunk));
    if (size > 1) H5IO_CHECK(io, H5Pset_shuffle(p));
    H5IO_CHECK(io, H5Pset_deflate(p, EWR_DEFLATE));
    return p;
fail:
    if (p >= 0) H5Pclose(p);
    return -1;
}

// Writes a filtered dataset of ndim (1 to 3) dims (ewr_dcpl) and adds the
// bytes it takes in the file to *stored.
static int ewr_packed_nd(ewr *io, hid_t loc, const char *name, hid_t ftype, hid_t mtype, int ndim,
                         const hsize_t *dims, const void *buf, size_t *stored) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
    hid_t sp = -1, d = -1, dcpl = ewr_dcpl(io, ftype, ndim, dims);
    int rc = dcpl < 0 ? -1 : 0;
    if (rc == 0) {
        H5IO_CHECK(io, sp = H5Screate_simple(ndim, dims, NULL));
        H5IO_CHECK(io, d = H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        if (n) H5IO_CHECK(io, H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
        H5IO_CHECK(io, H5Dflush(d));  // chunks leave the cache: the storage size is final
        *stored += (size_t)H5Dget_storage_size(d);
    }
    goto done;
fail:
    rc = -1;
done:
    H5IO_CLOSE(io, H5Dclose, d, rc);
    H5IO_CLOSE(io, H5Sclose, sp, rc);
    H5IO_CLOSE(io, H5Pclose, dcpl, rc);
    return rc;
}

// Writes n values as a filtered 1-D dataset.
static int ewr_packed(ewr *io, hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t n,
                      const void *buf, size_t *stored) {
    hsize_t dims[1] = {(hsize_t)n};
    return ewr_packed_nd(io, loc, name, ftype, mtype, 1, dims, buf, stored);
}

// Writes floats as a filtered IEEE half dataset of ndim dims (rounded to
// nearest even).
static int ewr_packed_half(ewr *io, hid_t loc, const char *name, int ndim, const hsize_t *dims,
                           const float *v, size_t *stored) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);  // (n)
    if (!h) return sc_fail(io->err, "out of memory (%s)", io->path);
    for (size_t i = 0; i < n; i++) h[i] = half_from_float(v[i]);
    hid_t t = h5io_half_type(io);
    int rc = t < 0 ? -1 : ewr_packed_nd(io, loc, name, t, t, ndim, dims, h, stored);
    if (t >= 0) H5IO_CLOSE(io, H5Tclose, t, rc);
    free(h);
    return rc;
}

// --- one layer --------------------------------------------------------------

// The file type of column indices: the narrowest of uint8, uint16, int32
// holding every column below cols.
static hid_t ewr_index_type(long long cols) {
    return cols <= 256 ? H5T_STD_U8LE : cols <= 65536 ? H5T_STD_U16LE : H5T_STD_I32LE;
}

// Extracts l's real entries (those without their padding bit) into c.
static int sparse_compact_make(ewr *io, const sparse_layer *l, sparse_compact *c) {
    const int cb = l->vtype == SV_CODEBOOK4;
    if (sparse_compact_alloc(c, l->K, l->nnz, l->vtype)) return sc_fail(io->err, "out of memory (%s)", io->path);
    int64_t e = 0;
    c->indptr[0] = 0;
    for (size_t k = 0; k < (size_t)l->K; k++) {
        for (size_t j = k * l->nnz_row; j < (k + 1) * (size_t)l->nnz_row; j++) {
            if ((l->pad_mask[j / 8] >> (j % 8)) & 1) continue;
            if (e >= l->nnz) return sc_fail(io->err, "layer has more real entries than nnz %ld", l->nnz);
            c->indices[e] = l->indices[j];
            if (cb) c->codes[e / 2] |= (uint8_t)(((l->codes[j / 2] >> (4 * (j % 2))) & 15) << (4 * (e % 2)));
            else c->values[e] = l->values[j];
            e++;
        }
        c->indptr[k + 1] = e;
    }
    return e == l->nnz ? 0 : sc_fail(io->err, "layer has %lld real entries, nnz says %ld", (long long)e, l->nnz);
}

// Writes the scipy/anndata CSR attributes and the geometry/fusion ones.
static int ewr_layer_attrs(ewr *io, hid_t g, const sparse_model *m, const sparse_layer *l) {
    const long long shape[2] = {l->K, (long long)l->C * l->R * l->S};
    const int k[2] = {l->R, l->S};
    const int bsr = l->bsr.kb > 0, block[2] = {l->bsr.kb, l->bsr.cb};
    SC_TRY(h5io_attr_str(io, g, "encoding-type", bsr ? "bsr_matrix" : "csr_matrix"));
    SC_TRY(h5io_attr_str(io, g, "encoding-version", "0.1.0"));
    SC_TRY(h5io_attr_write(io, g, "shape", H5T_STD_I64LE, H5T_NATIVE_LLONG, 2, shape));
    if (bsr) SC_TRY(h5io_attr_write(io, g, "blocksize", H5T_STD_I32LE, H5T_NATIVE_INT, 2, block));
    SC_TRY(h5io_attr_str(io, g, "kind", l->is_linear ? "linear" : "conv"));
    SC_TRY(h5io_attr_write(io, g, "k", H5T_STD_I32LE, H5T_NATIVE_INT, 2, k));
    const char *names[] = {"stride", "pad", "in_c", "in_h", "in_w", "out_c", "out_h", "out_w"};
    const int vals[] = {l->stride, l->pad, l->C, l->H, l->W, l->K, l->P, l->Q};
    for (int i = 0; i < 8; i++) SC_TRY(h5io_attr_int(io, g, names[i], vals[i]));
    SC_TRY(h5io_attr_i64(io, g, "nnz", bsr ? (long long)l->bsr.nblocks * l->bsr.kb * l->bsr.cb : l->nnz));
    SC_TRY(h5io_attr_str(io, g, "bn", l->bn >= 0 ? m->nt->layers[l->bn].name : ""));
    SC_TRY(h5io_attr_str(io, g, "values", sparse_vtype_name(l->vtype)));
    SC_TRY(h5io_attr_str(io, g, "activation", l->relu ? "relu" : "none"));
    SC_TRY(h5io_attr_str(io, g, "pool", l->pool_k ? "max" : "none"));
    if (!l->pool_k) return 0;
    SC_TRY(h5io_attr_int(io, g, "pool_size", l->pool_k));
    SC_TRY(h5io_attr_int(io, g, "pool_stride", l->pool_stride));
    return h5io_attr_int(io, g, "pool_pad", l->pool_pad);
}

// Writes a codebook layer's codes, codebook (fp16 when every entry is
// fp16-exact, else fp32) and row scales.
static int ewr_layer_codes(ewr *io, hid_t g, const sparse_layer *l, const uint8_t *codes, size_t n,
                           export_layer_size *sz) {
    SC_TRY(ewr_packed(io, g, "codes", H5T_STD_U8LE, H5T_NATIVE_UINT8, (n + 1) / 2, codes, &sz->values));
    const hsize_t ncb[1] = {(hsize_t)l->ncodebook};
    if (export_codebook_half_exact(l->codebook, l->ncodebook))
        SC_TRY(ewr_packed_half(io, g, "codebook", 1, ncb, l->codebook, &sz->codebook));
    else
        SC_TRY(ewr_packed(io, g, "codebook", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                          (size_t)l->ncodebook, l->codebook, &sz->codebook));
    return ewr_packed(io, g, "row_scale", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, (size_t)l->K,
                      l->row_scale, &sz->codebook);
}

// Writes a layer's datasets from its compact form: indptr, indices, bias,
// and data (fp32 or fp16) or the codebook form.
static int ewr_layer_data(ewr *io, hid_t g, const sparse_layer *l, const sparse_compact *c,
                          export_layer_size *sz) {
    const size_t nnz = (size_t)l->nnz, K = (size_t)l->K;
    const long long cols = (long long)l->C * l->R * l->S;
    SC_TRY(ewr_packed(io, g, "indptr", nnz > INT32_MAX ? H5T_STD_I64LE : H5T_STD_I32LE,
                      H5T_NATIVE_INT64, K + 1, c->indptr, &sz->indices));
    SC_TRY(ewr_packed(io, g, "indices", ewr_index_type(cols), H5T_NATIVE_INT32, nnz, c->indices,
                      &sz->indices));
    SC_TRY(ewr_packed(io, g, "bias", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, K, l->bias, &sz->bias));
    if (l->vtype == SV_CODEBOOK4) return ewr_layer_codes(io, g, l, c->codes, nnz, sz);
    const hsize_t dims[1] = {(hsize_t)nnz};
    if (l->vtype == SV_FP16) return ewr_packed_half(io, g, "data", 1, dims, c->values, &sz->values);
    return ewr_packed(io, g, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, nnz, c->values, &sz->values);
}

// Writes a BSR layer's datasets from l->bsr: indptr over the block rows,
// the block columns, bias, and data (nblocks, kb, cb) in fp32 or fp16 or
// the codebook form (codes of the block entries in data order).
static int ewr_layer_bsr(ewr *io, hid_t g, const sparse_layer *l, export_layer_size *sz) {
    const sparse_bsr *b = &l->bsr;
    const size_t rows = (size_t)(l->K / b->kb), nb = (size_t)b->nblocks;
    const long long bcols = (long long)l->R * l->S * (l->C / b->cb);
    SC_TRY(ewr_packed(io, g, "indptr", nb > INT32_MAX ? H5T_STD_I64LE : H5T_STD_I32LE,
                      H5T_NATIVE_INT64, rows + 1, b->indptr, &sz->indices));
    SC_TRY(ewr_packed(io, g, "indices", ewr_index_type(bcols), H5T_NATIVE_INT32, nb, b->indices,
                      &sz->indices));
    SC_TRY(ewr_packed(io, g, "bias", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, (size_t)l->K, l->bias, &sz->bias));
    if (l->vtype == SV_CODEBOOK4) return ewr_layer_codes(io, g, l, b->codes, nb * b->kb * b->cb, sz);
    const hsize_t dims[3] = {(hsize_t)nb, (hsize_t)b->kb, (hsize_t)b->cb};
    if (l->vtype == SV_FP16) return ewr_packed_half(io, g, "data", 3, dims, b->values, &sz->values);
    return ewr_packed_nd(io, g, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, dims, b->values, &sz->values);
}

// Writes the remainder's datasets (CSR of the layer's (K, R*S*C) matrix: its
// attributes, indptr, indices, data or codes) into group r.
static int ewr_rem_data(ewr *io, hid_t r, const sparse_layer *l, export_layer_size *sz) {
    const sparse_bsr *b = &l->bsr;
    const size_t n = (size_t)b->nrem;
    const long long cols = (long long)l->C * l->R * l->S, shape[2] = {l->K, cols};
    SC_TRY(h5io_attr_str(io, r, "encoding-type", "csr_matrix"));
    SC_TRY(h5io_attr_str(io, r, "encoding-version", "0.1.0"));
    SC_TRY(h5io_attr_write(io, r, "shape", H5T_STD_I64LE, H5T_NATIVE_LLONG, 2, shape));
    SC_TRY(h5io_attr_i64(io, r, "nnz", b->nrem));
    SC_TRY(ewr_packed(io, r, "indptr", n > INT32_MAX ? H5T_STD_I64LE : H5T_STD_I32LE, H5T_NATIVE_INT64,
                      (size_t)l->K + 1, b->rem_indptr, &sz->indices));
    SC_TRY(ewr_packed(io, r, "indices", ewr_index_type(cols), H5T_NATIVE_INT32, n, b->rem_indices, &sz->indices));
    if (l->vtype == SV_CODEBOOK4)
        return ewr_packed(io, r, "codes", H5T_STD_U8LE, H5T_NATIVE_UINT8, (n + 1) / 2, b->rem_codes, &sz->values);
    const hsize_t dims[1] = {(hsize_t)n};
    if (l->vtype == SV_FP16) return ewr_packed_half(io, r, "data", 1, dims, b->rem_values, &sz->values);
    return ewr_packed(io, r, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, n, b->rem_values, &sz->values);
}

// Writes a hybrid layer's remainder as its subgroup "remainder" (none: nothing).
static int ewr_layer_rem(ewr *io, hid_t g, const sparse_layer *l, export_layer_size *sz) {
    if (!l->bsr.nrem) return 0;
    hid_t r = h5io_group_create(io, g, "remainder");
    if (r < 0) return -1;
    int rc = ewr_rem_data(io, r, l, sz);
    H5IO_CLOSE(io, H5Gclose, r, rc);
    return rc;
}

// Writes one layer's group (attributes and compact arrays).
static int ewr_layer(ewr *io, hid_t g, const sparse_model *m, const sparse_layer *l,
                     export_layer_size *sz) {
    sparse_compact c = {0};
    memset(sz, 0, sizeof *sz);
    int rc = ewr_layer_attrs(io, g, m, l);
    if (rc == 0 && l->bsr.kb > 0) {
        if ((long)l->bsr.nblocks * l->bsr.kb * l->bsr.cb + l->bsr.nrem != l->nnz)
            return sc_fail(io->err, "layer has %ld blocks and %ld singles for %ld entries", l->bsr.nblocks,
                           l->bsr.nrem, l->nnz);
        SC_TRY(ewr_layer_bsr(io, g, l, sz));
        return ewr_layer_rem(io, g, l, sz);
    }
    if (rc == 0) rc = sparse_compact_make(io, l, &c);
    if (rc == 0) rc = ewr_layer_data(io, g, l, &c, sz);
    sparse_compact_free(&c);
    return rc;
}

// Writes /layers with one group per conv/linear layer.
static int ewr_layers(ewr *io, const sparse_model *m, export_layer_size *sizes) {
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
        export_layer_size scratch;
        rc = ewr_layer(io, g, m, l, sizes ? &sizes[i] : &scratch);
        H5IO_CLOSE(io, H5Gclose, g, rc);
    }
    H5IO_CLOSE(io, H5Gclose, gl, rc);
    return rc;
}

// --- the file -----------------------------------------------------------------

// Writes the root attributes.
static int ewr_root(ewr *io, const sparse_model *m) {
    int ver = SPARSE_FORMAT_VERSION_CSR;
    for (int i = 0; i < m->nlayers; i++) {
        const sparse_bsr *b = &m->layers[i].bsr;
        const int v = b->nrem ? SPARSE_FORMAT_VERSION_HYBRID : b->kb > 0 ? SPARSE_FORMAT_VERSION_BSR : ver;
        if (v > ver) ver = v;
    }
    SC_TRY(h5io_root_attrs(io, SPARSE_FORMAT, ver, m->nt, m->dataset));
    return h5io_attr_str(io, io->file, "values", sparse_vtype_name(m->vtype));
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
static int ewr_all(ewr *io, const sparse_model *m, const char *const *history, int nhistory,
                   export_layer_size *sizes) {
    SC_TRY(ewr_root(io, m));
    SC_TRY(h5io_net_write(io, m->nt));
    SC_TRY(h5io_dset_strs(io, io->file, "history", 1, nhistory, history));
    SC_TRY(ewr_params(io, m));
    return ewr_layers(io, m, sizes);
}

// --- saving -------------------------------------------------------------------

typedef struct {
    const sparse_model *m;
    const char *const *history;
    int nhistory;
    export_layer_size *sizes;
} ewr_ctx;

// Writes the whole file into the open io->file (the h5io_writer form).
static int ewr_cb(h5io *io, const void *ctx) {
    const ewr_ctx *c = ctx;
    return ewr_all(io, c->m, c->history, c->nhistory, c->sizes);
}

// Writes m to path atomically, with a checksum (runtime/h5io.h: h5io_file_save).
int export_write(const char *path, const sparse_model *m, const char *const *history, int nhistory,
                 export_layer_size *sizes, sc_err *err) {
    ewr_ctx c = {m, history, nhistory, sizes};
    return h5io_file_save(path, ewr_cb, &c, err);
}
