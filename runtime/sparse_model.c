// Exported models (docs/export-format.md): the fusion rule, offsets, the
// folded net, and the loader of the HDF5 file `export` writes. Every part of
// the file is checked against the graph rebuilt from the stored description:
// geometry, fusion, row pointers, ascending column indices in range, codes
// inside the codebook, finite values, BSR block sizes; the padded kernel
// layout is derived from the compact CSR (runtime/sparse_layout.c), for a
// BSR layer from its blocks (runtime/sparse_bsr.c).
#include "sparse_model.h"
#include "h5io.h"
#include "half.h"
#include "ops.h"

#include <stdint.h>

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Name of a value type as stored in the file.
const char *sparse_vtype_name(sparse_vtype v) {
    return v == SV_FP16 ? "fp16" : v == SV_CODEBOOK4 ? "codebook4" : "fp32";
}

// --- geometry and fusion ----------------------------------------------------

// Number of layers reading layer i's output; *only gets the reader when there
// is exactly one (an add reading i twice counts twice).
static int sm_readers(const net *nt, int i, int *only) {
    int n = 0;
    *only = -1;
    for (int j = 0; j < nt->nlayers; j++) {
        int here = layer_reads(&nt->layers[j], i);
        if (here) *only = j;
        n += here;
    }
    if (n != 1) *only = -1;
    return n;
}

// Fills the graph fields of l for conv/linear layer li of nt.
void sparse_layer_fusion(const net *nt, int li, sparse_layer *l) {
    const layer *L = &nt->layers[li];
    l->layer = li;
    op_of(L->kind)->sparse_geom(L, l);
    l->bn = l->relu_layer = l->pool_layer = -1;
    l->relu = l->pool_k = l->pool_stride = l->pool_pad = 0;
    int next, last = li;
    if (sm_readers(nt, last, &next) == 1 && nt->layers[next].kind == LK_BN) l->bn = last = next;
    if (sm_readers(nt, last, &next) == 1 && nt->layers[next].kind == LK_RELU) {
        l->relu = 1;
        l->relu_layer = last = next;
        if (sm_readers(nt, last, &next) == 1 && nt->layers[next].kind == LK_MAXPOOL) {
            const layer *M = &nt->layers[next];
            l->pool_layer = last = next;
            l->pool_k = M->k, l->pool_stride = M->stride, l->pool_pad = M->pad;
        }
    }
    l->out_layer = last;
}

// Offset into the zero-padded input of column index col.
int64_t sparse_layer_offset(const sparse_layer *l, int32_t col) {
    if (l->is_linear) return col;
    const int rs = l->R * l->S;
    const int64_t c = col / rs, r = (col % rs) / l->S, s = col % l->S;
    return (c * (l->H + 2 * l->pad) + r) * (l->W + 2 * l->pad) + s;
}

// --- the folded net ---------------------------------------------------------

// The sparse layer whose folded BN is layer bn, or NULL.
static const sparse_layer *sm_folding(const sparse_model *m, int bn) {
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].bn == bn) return &m->layers[i];
    return NULL;
}

// 1 when tensor t is stored in /params (not conv/linear, not a folded BN's).
int sparse_model_tensor_in_params(const sparse_model *m, int t) {
    const layer *L = &m->nt->layers[m->nt->tensors[t].layer];
    if (op_of(L->kind)->sparse_geom) return 0;
    return !(L->kind == LK_BN && sm_folding(m, m->nt->tensors[t].layer));
}

// Writes one layer's densified CSR and bias into the net.
static int sm_fill_layer(net *nt, const sparse_layer *l, sc_err *err) {
    const layer *L = &nt->layers[l->layer];
    const ptensor *wt = &nt->tensors[L->weight];
    float *w = net_tensor_data(nt, L->weight);  // (K, C*R*S)
    const size_t cols = (size_t)l->C * l->R * l->S;
    memset(w, 0, wt->count * sizeof *w);
    for (size_t k = 0; k < (size_t)l->K; k++)
        for (size_t j = k * l->nnz_row; j < (k + 1) * (size_t)l->nnz_row; j++)
            w[k * cols + (size_t)l->indices[j]] = l->values[j];
    float *mk = net_tensor_mask(nt, L->weight);
    for (size_t i = 0; wt->prunable && i < wt->count; i++) mk[i] = w[i] != 0.0f;
    float *b = L->bias >= 0 ? net_tensor_data(nt, L->bias) : NULL;  // (K)
    if (l->bn >= 0) {
        const layer *B = &nt->layers[l->bn];
        float *g = net_tensor_data(nt, B->gamma), *be = net_tensor_data(nt, B->beta);
        float *mu = net_tensor_data(nt, B->mean), *var = net_tensor_data(nt, B->var);
        for (int k = 0; k < l->K; k++) {
            g[k] = 1.0f, be[k] = l->bias[k], mu[k] = 0.0f, var[k] = 1.0f - B->eps;
            if (b) b[k] = 0.0f;
        }
        return 0;
    }
    for (int k = 0; k < l->K; k++) {
        if (b) b[k] = l->bias[k];
        else if (l->bias[k] != 0.0f)
            return sc_fail(err, "layer %s has a bias (%g) but neither a bias nor a folded BN in the net",
                           L->name, (double)l->bias[k]);
    }
    return 0;
}

// Writes every layer's CSR and folded bias into m->nt.
int sparse_model_fill_net(sparse_model *m, sc_err *err) {
    for (int i = 0; i < m->nlayers; i++) SC_TRY(sm_fill_layer(m->nt, &m->layers[i], err));
    return 0;
}

// Frees a model and everything it owns.
void sparse_model_free(sparse_model *m) {
    if (!m) return;
    for (int i = 0; m->layers && i < m->nlayers; i++) {
        sparse_layer *l = &m->layers[i];
        free(l->indices), free(l->offsets), free(l->values), free(l->bias), free(l->codes);
        free(l->pad_mask), free(l->row_scale);
        sparse_bsr_free(&l->bsr);
    }
    free(m->layers);
    net_free(m->nt);
    free(m);
}

// The sparse layer for nt->layers[layer], or NULL.
const sparse_layer *sparse_model_find(const sparse_model *m, int layer) {
    for (int i = 0; m && i < m->nlayers; i++)
        if (m->layers[i].layer == layer) return &m->layers[i];
    return NULL;
}

// --- HDF5 reading: helpers --------------------------------------------------

typedef h5io sio;

// Closes an HDF5 id when valid (close errors are not interesting on reads).
#define SIO_CLOSE(fn, id)             \
    do {                              \
        if ((id) >= 0) (void)fn(id);  \
        (id) = -1;                    \
    } while (0)

// Fails unless loc has an attribute (is_attr) or a link called name.
static int sio_need(sio *io, hid_t loc, const char *where, const char *name, int is_attr) {
    if (!is_attr) return h5io_need_link(io, loc, where, name);
    htri_t ex = H5Aexists(loc, name);
    if (ex < 0) return h5io_fail(io, "H5Aexists(loc, name)", __FILE__, __LINE__);
    if (ex == 0)
        return sc_fail(io->err, "export file lacks attribute %s of %s (%s)", name, where, io->path);
    return 0;
}

// Reads string attribute (is_attr) or string dataset `name` under loc.
static char *sio_str(sio *io, hid_t loc, const char *where, const char *name, int is_attr) {
    if (sio_need(io, loc, where, name, is_attr) != 0) return NULL;
    char what[320];
    snprintf(what, sizeof what, "%s%s%s", where, is_attr ? " " : "/", name);
    hid_t o = is_attr ? H5Aopen(loc, name, H5P_DEFAULT) : H5Dopen2(loc, name, H5P_DEFAULT);
    if (o < 0) {
        h5io_fail(io, "open", __FILE__, __LINE__);
        return NULL;
    }
    char *s = h5io_str_read(io, o, is_attr, what);
    if (is_attr) H5Aclose(o);
    else H5Dclose(o);
    return s;
}

// Reads n numbers of attribute name of loc as mtype; fails unless it is
// numeric and holds exactly n values.
static int sio_attr_nums(sio *io, hid_t loc, const char *where, const char *name, hid_t mtype,
                         hsize_t n, void *buf) {
    SC_TRY(sio_need(io, loc, where, name, 1));
    char what[256];
    snprintf(what, sizeof what, "%s %s", where, name);
    hid_t a = -1, t = -1, sp = -1;
    int rc = -1;
    hssize_t got;
    H5IO_CHECK(io, a = H5Aopen(loc, name, H5P_DEFAULT));
    H5IO_CHECK(io, t = H5Aget_type(a));
    H5IO_CHECK(io, sp = H5Aget_space(a));
    if (h5io_need_numeric(io, t, what) != 0) goto fail;
    H5IO_CHECK(io, got = H5Sget_simple_extent_npoints(sp));
    if (got != (hssize_t)n) {
        sc_fail(io->err, "%s holds %lld values, expected %llu (%s)", what, (long long)got,
                (unsigned long long)n, io->path);
        goto fail;
    }
    if (n > 0) H5IO_CHECK(io, H5Aread(a, mtype, buf));
    rc = 0;
fail:
    SIO_CLOSE(H5Sclose, sp);
    SIO_CLOSE(H5Tclose, t);
    SIO_CLOSE(H5Aclose, a);
    return rc;
}

// Reads an integer attribute and checks it lies in [lo, hi].
static int sio_int(sio *io, hid_t loc, const char *where, const char *name, long lo, long hi,
                   long *out) {
    long long v = 0;
    SC_TRY(sio_attr_nums(io, loc, where, name, H5T_NATIVE_LLONG, 1, &v));
    if (v < lo || v > hi)
        return sc_fail(io->err, "%s attribute %s = %lld is out of range (%s)", where, name, v, io->path);
    *out = (long)v;
    return 0;
}

// Reads n floats of dataset name; a 2-byte float dataset is read as IEEE
// half and widened here (exact), anything else converted by HDF5.
static int sio_floats(sio *io, hid_t loc, const char *where, const char *name, hsize_t n,
                      float *out) {
    hid_t d = h5io_dset_open(io, loc, where, name);
    if (d < 0) return -1;
    hid_t t = H5Dget_type(d);
    int half = t >= 0 && H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 2;
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
    if (!half) return h5io_dset_read_num(io, loc, where, name, H5T_NATIVE_FLOAT, n, out);
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);  // (n)
    hid_t ht = h5io_half_type(io);
    int rc = !h ? sc_fail(io->err, "out of memory (%s)", io->path)
                : ht < 0 ? -1 : h5io_dset_read_num(io, loc, where, name, ht, n, h);
    for (hsize_t i = 0; rc == 0 && i < n; i++) out[i] = half_to_float(h[i]);
    if (ht >= 0) H5Tclose(ht);
    free(h);
    return rc;
}

// --- HDF5 reading: the layers -----------------------------------------------

// Checks one integer attribute of a layer group against the graph's value.
static int sio_expect(sio *io, hid_t g, const char *where, const char *name, long want) {
    long v;
    SC_TRY(sio_int(io, g, where, name, -(1L << 40), 1L << 40, &v));
    if (v != want)
        return sc_fail(io->err, "%s attribute %s is %ld, the net has %ld (%s)", where, name, v,
                       want, io->path);
    return 0;
}

// Checks a string attribute of a layer group against the graph's value.
static int sio_expect_str(sio *io, hid_t g, const char *where, const char *name, const char *want) {
    char *s = sio_str(io, g, where, name, 1);
    if (!s) return -1;
    int same = !strcmp(s, want);
    if (!same)
        sc_fail(io->err, "%s attribute %s is '%s', the net has '%s' (%s)", where, name, s, want,
                io->path);
    free(s);
    return same ? 0 : -1;
}

// Checks the geometry and fusion attributes against the graph.
static int sio_layer_attrs(sio *io, hid_t g, const char *where, const sparse_layer *l) {
    long long shape[2], k[2];
    SC_TRY(sio_attr_nums(io, g, where, "shape", H5T_NATIVE_LLONG, 2, shape));
    if (shape[0] != l->K || shape[1] != (long long)l->C * l->R * l->S)
        return sc_fail(io->err, "%s has shape (%lld, %lld), the net needs (%d, %lld) (%s)", where,
                       shape[0], shape[1], l->K, (long long)l->C * l->R * l->S, io->path);
    SC_TRY(sio_attr_nums(io, g, where, "k", H5T_NATIVE_LLONG, 2, k));
    if (k[0] != l->R || k[1] != l->S)
        return sc_fail(io->err, "%s attribute k is (%lld, %lld), the net has (%d, %d) (%s)", where,
                       k[0], k[1], l->R, l->S, io->path);
    SC_TRY(sio_expect_str(io, g, where, "kind", l->is_linear ? "linear" : "conv"));
    const char *names[] = {"stride", "pad", "in_c", "in_h", "in_w", "out_c", "out_h", "out_w"};
    const long want[] = {l->stride, l->pad, l->C, l->H, l->W, l->K, l->P, l->Q};
    for (int i = 0; i < 8; i++) SC_TRY(sio_expect(io, g, where, names[i], want[i]));
    SC_TRY(sio_expect_str(io, g, where, "activation", l->relu ? "relu" : "none"));
    SC_TRY(sio_expect_str(io, g, where, "pool", l->pool_k ? "max" : "none"));
    if (!l->pool_k) return 0;
    SC_TRY(sio_expect(io, g, where, "pool_size", l->pool_k));
    SC_TRY(sio_expect(io, g, where, "pool_stride", l->pool_stride));
    return sio_expect(io, g, where, "pool_pad", l->pool_pad);
}

// Reads n floats of dataset where/name and fails on a NaN or infinity.
static int sio_finite(sio *io, hid_t g, const char *where, const char *name, size_t n, float *out) {
    SC_TRY(sio_floats(io, g, where, name, (hsize_t)n, out));
    long bad = sparse_first_nonfinite(out, n);
    if (bad >= 0)
        return sc_fail(io->err, "%s: tensor %s/%s holds NaN/Inf at index %ld", io->path, where, name,
                       bad);
    return 0;
}

// Reads indptr (K + 1) and checks it: from 0, non-decreasing, rows of at
// most cols entries, ending at nnz; sets l->nnz_row to the longest row.
static int sio_layer_indptr(sio *io, hid_t g, const char *where, sparse_layer *l, int64_t *p) {
    SC_TRY(h5io_dset_read_num(io, g, where, "indptr", H5T_NATIVE_INT64, (size_t)l->K + 1, p));
    const int64_t cols = (int64_t)l->C * l->R * l->S;
    l->nnz_row = 0;
    for (int k = 0; k <= l->K; k++) {
        const int64_t len = k ? p[k] - p[k - 1] : p[0];
        if ((k == 0 && p[0] != 0) || (k && (len < 0 || len > cols)) || (k == l->K && p[k] != l->nnz))
            return sc_fail(io->err, "%s: %s/indptr[%d] = %lld is not a row start (rows of 0 to %lld "
                           "entries from 0 to nnz %ld)", io->path, where, k, (long long)p[k],
                           (long long)cols, l->nnz);
        if (k && len > l->nnz_row) l->nnz_row = (int)len;
    }
    return 0;
}

// Reads the real entries' column indices and checks them: in range and
// strictly ascending within each row of indptr p.
static int sio_layer_index(sio *io, hid_t g, const char *where, const sparse_layer *l,
                           const int64_t *p, int32_t *idx) {
    SC_TRY(h5io_dset_read_num(io, g, where, "indices", H5T_NATIVE_INT32, (size_t)l->nnz, idx));
    const int32_t cols = l->C * l->R * l->S;
    for (int k = 0; k < l->K; k++)
        for (int64_t j = p[k]; j < p[k + 1]; j++)
            if (idx[j] < 0 || idx[j] >= cols || (j > p[k] && idx[j] <= idx[j - 1]))
                return sc_fail(io->err, "%s: %s/indices[%lld] = %d is out of range [0, %d) or not "
                               "ascending in row %d", io->path, where, (long long)j, idx[j], cols, k);
    return 0;
}

// Reads a codebook layer's codebook, row scales and packed 4-bit codes of
// the real entries into codes, and checks every code is in the codebook.
static int sio_layer_codes(sio *io, hid_t g, const char *where, sparse_layer *l, uint8_t *codes) {
    long nc = h5io_dset_len(io, g, where, "codebook");
    if (nc < 0) return -1;
    if (nc < 1 || nc > 16)
        return sc_fail(io->err, "%s: %s/codebook has %ld entries, expected 1 to 16", io->path, where,
                       nc);
    l->ncodebook = (int)nc;
    SC_TRY(sio_finite(io, g, where, "codebook", (size_t)nc, l->codebook));
    SC_TRY(sio_finite(io, g, where, "row_scale", (size_t)l->K, l->row_scale));
    SC_TRY(h5io_dset_read_num(io, g, where, "codes", H5T_NATIVE_UINT8, ((size_t)l->nnz + 1) / 2,
                              codes));
    for (long j = 0; j < l->nnz; j++) {
        const int code = (codes[j / 2] >> (4 * (j % 2))) & 15;
        if (code >= l->ncodebook)
            return sc_fail(io->err, "%s: %s/codes[%ld] = %d is beyond the codebook of %d", io->path,
                           where, j, code, l->ncodebook);
    }
    return 0;
}

// Reads the layer's value type attribute; it must agree with the file's.
static int sio_layer_vtype(sio *io, hid_t g, const char *where, sparse_layer *l, sparse_vtype vt) {
    char *s = sio_str(io, g, where, "values", 1);
    if (!s) return -1;
    l->vtype = !strcmp(s, "fp16") ? SV_FP16 : !strcmp(s, "codebook4") ? SV_CODEBOOK4 : SV_FP32;
    int ok = !strcmp(s, sparse_vtype_name(l->vtype)) && (l->vtype == vt || vt == SV_CODEBOOK4);
    if (!ok)
        sc_fail(io->err, "%s attribute values is '%s', not possible in a %s file (%s)", where, s,
                sparse_vtype_name(vt), io->path);
    free(s);
    return ok ? 0 : -1;
}

// Reads the compact arrays (indptr p, indices idx, values vals or codes)
// and the padded ones' inputs (bias, codebook, row scales), then pads.
static int sio_layer_arrays(sio *io, hid_t g, const char *where, sparse_layer *l, int64_t *p,
                            int32_t *idx, float *vals, uint8_t *codes) {
    SC_TRY(sio_layer_indptr(io, g, where, l, p));
    SC_TRY(sio_layer_index(io, g, where, l, p, idx));
    SC_TRY(sparse_layer_alloc(l, io->err));
    SC_TRY(sio_finite(io, g, where, "bias", (size_t)l->K, l->bias));
    if (l->vtype == SV_CODEBOOK4) SC_TRY(sio_layer_codes(io, g, where, l, codes));
    else SC_TRY(sio_finite(io, g, where, "data", (size_t)l->nnz, vals));
    return sparse_layer_expand(l, p, idx, vals, l->vtype == SV_CODEBOOK4 ? codes : NULL, io->err);
}

// --- HDF5 reading: BSR layers ------------------------------------------------

// Fails unless dataset where/name has exactly the dims want (rank dimensions).
static int sio_dims(sio *io, hid_t g, const char *where, const char *name, int rank,
                    const hsize_t *want) {
    hid_t d = h5io_dset_open(io, g, where, name), sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t dims[4] = {0};
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1, ok = nd == rank;
    if (ok && H5Sget_simple_extent_dims(sp, dims, NULL) < 0) ok = 0;
    for (int i = 0; ok && i < rank; i++) ok = dims[i] == want[i];
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (d < 0) return -1;
    if (!ok)
        return sc_fail(io->err, "%s: %s/%s is not of shape (%llu, %llu, %llu)", io->path, where, name,
                       (unsigned long long)want[0], (unsigned long long)want[1],
                       (unsigned long long)want[2]);
    return 0;
}

// Reads the blocksize and nnz of a BSR layer: blocks that tile the layer's
// channels, nnz a whole number of blocks.
static int sio_bsr_shape(sio *io, hid_t g, const char *where, sparse_layer *l) {
    long long bs[2];
    SC_TRY(sio_attr_nums(io, g, where, "blocksize", H5T_NATIVE_LLONG, 2, bs));
    if (bs[0] < 1 || bs[1] < 1 || bs[0] > l->K || bs[1] > l->C || l->K % bs[0] || l->C % bs[1])
        return sc_fail(io->err, "%s attribute blocksize (%lld, %lld) does not tile %d output x %d "
                       "input channels (%s)", where, bs[0], bs[1], l->K, l->C, io->path);
    l->bsr.kb = (int)bs[0], l->bsr.cb = (int)bs[1];
    const long cells = (long)l->K * l->C * l->R * l->S, blk = (long)bs[0] * bs[1];
    SC_TRY(sio_int(io, g, where, "nnz", 0, cells < INT32_MAX ? cells : INT32_MAX, &l->nnz));
    if (l->nnz % blk)
        return sc_fail(io->err, "%s attribute nnz = %ld is not a whole number of %lld x %lld blocks (%s)",
                       where, l->nnz, bs[0], bs[1], io->path);
    l->bsr.nblocks = l->nnz / blk;
    return 0;
}

// Reads and checks the block rows' indptr and the block columns (ascending
// within a block row, in range); sets l->nnz_row to the longest row.
static int sio_bsr_index(sio *io, hid_t g, const char *where, sparse_layer *l) {
    sparse_bsr *b = &l->bsr;
    const int rows = l->K / b->kb;
    const int32_t bcols = l->R * l->S * (l->C / b->cb);
    b->indptr = malloc(((size_t)rows + 1) * sizeof *b->indptr);
    b->indices = malloc(((size_t)b->nblocks + 1) * sizeof *b->indices);
    if (!b->indptr || !b->indices) return sc_fail(io->err, "out of memory (%s)", io->path);
    SC_TRY(h5io_dset_read_num(io, g, where, "indptr", H5T_NATIVE_INT64, (size_t)rows + 1, b->indptr));
    SC_TRY(h5io_dset_read_num(io, g, where, "indices", H5T_NATIVE_INT32, (size_t)b->nblocks, b->indices));
    const int64_t *p = b->indptr;
    int64_t most = 0;
    for (int i = 0; i <= rows; i++) {
        const int64_t len = i ? p[i] - p[i - 1] : p[0];
        if ((i == 0 && p[0] != 0) || (i && (len < 0 || len > bcols)) || p[i] > b->nblocks ||
            (i == rows && p[i] != b->nblocks))
            return sc_fail(io->err, "%s: %s/indptr[%d] = %lld is not a block row start (rows of 0 to %d "
                           "blocks from 0 to %ld)", io->path, where, i, (long long)p[i], bcols, b->nblocks);
        if (i && len > most) most = len;
        for (int64_t j = i ? p[i - 1] : 0; i && j < p[i]; j++)
            if (b->indices[j] < 0 || b->indices[j] >= bcols || (j > p[i - 1] && b->indices[j] <= b->indices[j - 1]))
                return sc_fail(io->err, "%s: %s/indices[%lld] = %d is out of range [0, %d) or not "
                               "ascending in block row %d", io->path, where, (long long)j, b->indices[j],
                               bcols, i - 1);
    }
    l->nnz_row = (int)(most * b->cb);
    return 0;
}

// Decodes the 4-bit codes of a BSR codebook layer into its block values.
static void sio_bsr_decode(sparse_layer *l) {
    sparse_bsr *b = &l->bsr;
    for (int i = 0; i < l->K / b->kb; i++)
        for (int64_t e = b->indptr[i] * b->kb * b->cb; e < b->indptr[i + 1] * b->kb * b->cb; e++) {
            const int code = (b->codes[e / 2] >> (4 * (e % 2))) & 15;
            b->values[e] = l->codebook[code] * l->row_scale[i * b->kb + (int)((e / b->cb) % b->kb)];
        }
}

// Reads the block values: data (nblocks, kb, cb), or the codebook form.
static int sio_bsr_values(sio *io, hid_t g, const char *where, sparse_layer *l) {
    sparse_bsr *b = &l->bsr;
    const size_t n = (size_t)l->nnz;
    b->values = malloc((n ? n : 1) * sizeof *b->values);
    b->codes = l->vtype == SV_CODEBOOK4 ? calloc(n / 2 + 1, 1) : NULL;
    if (!b->values || (l->vtype == SV_CODEBOOK4 && !b->codes))
        return sc_fail(io->err, "out of memory (%s)", io->path);
    if (l->vtype != SV_CODEBOOK4) {
        const hsize_t dims[3] = {(hsize_t)b->nblocks, (hsize_t)b->kb, (hsize_t)b->cb};
        SC_TRY(sio_dims(io, g, where, "data", 3, dims));
        return sio_finite(io, g, where, "data", n, b->values);
    }
    SC_TRY(sio_layer_codes(io, g, where, l, b->codes));
    sio_bsr_decode(l);
    return 0;
}

// --- HDF5 reading: the remainder of hybrid layers ----------------------------

// Checks the remainder's rows p (K + 1: from 0, non-decreasing, ending at
// nrem) and columns (in range, ascending, none inside a kept block; mark:
// bcols scratch bytes); sets l->nnz_row to the longest row of blocks and singles.
static int sio_rem_check(sio *io, const char *where, sparse_layer *l, uint8_t *mark) {
    const sparse_bsr *b = &l->bsr;
    const int64_t *p = b->rem_indptr;
    const int32_t cols = l->C * l->R * l->S, *ix = b->rem_indices;
    if (p[0] != 0 || p[l->K] != b->nrem)
        return sc_fail(io->err, "%s: %s/indptr runs from %lld to %lld, not 0 to nnz %ld", io->path, where,
                       (long long)p[0], (long long)p[l->K], b->nrem);
    for (int k = 0; k < l->K; k++) {
        const int bi = k / b->kb;
        for (int64_t e = b->indptr[bi]; e < b->indptr[bi + 1]; e++) mark[b->indices[e]] = 1;
        int bad = p[k + 1] < p[k] || p[k + 1] > b->nrem || p[k + 1] - p[k] > cols;
        for (int64_t j = p[k]; !bad && j < p[k + 1]; j++)
            bad = ix[j] < 0 || ix[j] >= cols || (j > p[k] && ix[j] <= ix[j - 1]) || mark[ix[j] / b->cb];
        for (int64_t e = b->indptr[bi]; e < b->indptr[bi + 1]; e++) mark[b->indices[e]] = 0;
        if (bad)
            return sc_fail(io->err, "%s: %s row %d: indptr or indices out of range, not ascending, or inside a kept "
                           "block", io->path, where, k);
        const int64_t len = (b->indptr[bi + 1] - b->indptr[bi]) * b->cb + p[k + 1] - p[k];
        if (len > l->nnz_row) l->nnz_row = (int)len;
    }
    return 0;
}

// Reads the structure of a hybrid layer's remainder (group r, shown as
// where; after sio_bsr_index): nnz, indptr and indices into l->bsr.
static int sio_rem_index(sio *io, hid_t r, const char *where, sparse_layer *l) {
    sparse_bsr *b = &l->bsr;
    const long cells = (long)l->K * l->C * l->R * l->S;
    SC_TRY(sio_expect_str(io, r, where, "encoding-type", "csr_matrix"));
    SC_TRY(sio_int(io, r, where, "nnz", 0, cells - l->nnz, &b->nrem));
    const size_t n = (size_t)b->nrem + 1;
    b->rem_indptr = malloc(((size_t)l->K + 1) * sizeof *b->rem_indptr);
    b->rem_indices = malloc(n * sizeof *b->rem_indices);
    b->rem_values = malloc(n * sizeof *b->rem_values);
    b->rem_codes = l->vtype == SV_CODEBOOK4 ? calloc(n / 2 + 1, 1) : NULL;
    uint8_t *mark = calloc((size_t)l->R * l->S * (l->C / b->cb) + 1, 1);  // (block columns)
    int rc = !b->rem_indptr || !b->rem_indices || !b->rem_values || !mark || (l->vtype == SV_CODEBOOK4 && !b->rem_codes)
                 ? sc_fail(io->err, "out of memory (%s)", io->path) : 0;
    if (!rc) rc = h5io_dset_read_num(io, r, where, "indptr", H5T_NATIVE_INT64, (size_t)l->K + 1, b->rem_indptr);
    if (!rc) rc = h5io_dset_read_num(io, r, where, "indices", H5T_NATIVE_INT32, (size_t)b->nrem, b->rem_indices);
    if (!rc) rc = sio_rem_check(io, where, l, mark);
    free(mark);
    return rc;
}

// Reads the remainder's values (data, or codes of the layer's codebook, decoded).
static int sio_rem_values(sio *io, hid_t r, const char *where, sparse_layer *l) {
    sparse_bsr *b = &l->bsr;
    if (l->vtype != SV_CODEBOOK4) return sio_finite(io, r, where, "data", (size_t)b->nrem, b->rem_values);
    SC_TRY(h5io_dset_read_num(io, r, where, "codes", H5T_NATIVE_UINT8, ((size_t)b->nrem + 1) / 2, b->rem_codes));
    for (int k = 0; k < l->K; k++)
        for (int64_t e = b->rem_indptr[k]; e < b->rem_indptr[k + 1]; e++) {
            const int code = (b->rem_codes[e / 2] >> (4 * (e % 2))) & 15;
            if (code >= l->ncodebook)
                return sc_fail(io->err, "%s: %s/codes[%lld] = %d is beyond the codebook of %d", io->path, where,
                               (long long)e, code, l->ncodebook);
            b->rem_values[e] = l->codebook[code] * l->row_scale[k];
        }
    return 0;
}

// Opens the layer's remainder group when the file's version has them and the
// layer holds one (*r -1 otherwise; where receives its name). 0 or -1.
static int sio_rem_open(sio *io, hid_t g, const char *lwhere, int version, hid_t *r, char *where, size_t len) {
    *r = -1;
    snprintf(where, len, "%s/remainder", lwhere);
    if (version < SPARSE_FORMAT_VERSION_HYBRID) return 0;
    const htri_t ex = H5Lexists(g, "remainder", H5P_DEFAULT);
    if (ex < 0) return h5io_fail(io, "H5Lexists(remainder)", __FILE__, __LINE__);
    if (ex > 0) *r = h5io_group_open(io, g, lwhere, "remainder");
    return ex > 0 && *r < 0 ? -1 : 0;
}

// Reads a BSR layer (encoding-type bsr_matrix) and derives its padded CSR.
static int sio_bsr_body(sio *io, hid_t g, const char *where, sparse_layer *l, int version) {
    char rwhere[320];
    hid_t r;
    SC_TRY(sio_bsr_shape(io, g, where, l));
    SC_TRY(sio_bsr_index(io, g, where, l));
    SC_TRY(sio_rem_open(io, g, where, version, &r, rwhere, sizeof rwhere));
    int rc = r >= 0 ? sio_rem_index(io, r, rwhere, l) : 0;
    if (!rc) rc = sparse_layer_alloc(l, io->err);
    if (!rc) rc = sio_finite(io, g, where, "bias", (size_t)l->K, l->bias);
    if (!rc) rc = sio_bsr_values(io, g, where, l);
    if (!rc && r >= 0) rc = sio_rem_values(io, r, rwhere, l);
    SIO_CLOSE(H5Gclose, r);
    SC_TRY(rc);
    const size_t n = (size_t)l->nnz + (size_t)l->bsr.nrem + 1, cols = (size_t)l->C * l->R * l->S;
    int64_t *p = malloc(((size_t)l->K + 1) * sizeof *p);  // (K + 1)
    int32_t *idx = malloc(n * sizeof *idx);                // (nnz)
    float *vals = malloc(n * sizeof *vals);                // (nnz)
    int32_t *scratch = malloc((cols + 1) * sizeof *scratch);  // (cols)
    uint8_t *codes = l->vtype == SV_CODEBOOK4 ? calloc(n / 2 + 1, 1) : NULL;  // ((nnz + 1) / 2)
    rc = !p || !idx || !vals || !scratch || (l->vtype == SV_CODEBOOK4 && !codes)
             ? sc_fail(io->err, "out of memory (%s)", io->path) : 0;
    if (rc == 0) {
        sparse_bsr_to_csr(l, p, idx, vals, codes, scratch);
        rc = sparse_layer_expand(l, p, idx, vals, codes, io->err);
    }
    free(p), free(idx), free(vals), free(scratch), free(codes);
    return rc;
}

// Reads a CSR layer's body (encoding-type csr_matrix).
static int sio_csr_body(sio *io, hid_t g, const char *where, sparse_layer *l) {
    SC_TRY(sio_int(io, g, where, "nnz", 0, (long)l->K * l->C * l->R * l->S, &l->nnz));
    sparse_compact c = {0};
    int rc = sparse_compact_alloc(&c, l->K, l->nnz, l->vtype)
                 ? sc_fail(io->err, "out of memory (%s)", io->path)
                 : sio_layer_arrays(io, g, where, l, c.indptr, c.indices, c.values, c.codes);
    sparse_compact_free(&c);
    return rc;
}

// Reads one layer's group after its attributes were checked: its value
// type, then a CSR or (format version 3 on) a BSR body.
static int sio_layer_body(sio *io, hid_t g, const char *where, sparse_layer *l, const sparse_model *m) {
    SC_TRY(sio_layer_vtype(io, g, where, l, m->vtype));
    char *enc = sio_str(io, g, where, "encoding-type", 1);
    if (!enc) return -1;
    const int bsr = !strcmp(enc, "bsr_matrix"), csr = !strcmp(enc, "csr_matrix");
    int rc = 0;
    if (!bsr && !csr)
        rc = sc_fail(io->err, "%s attribute encoding-type is '%s', not csr_matrix or bsr_matrix (%s)",
                     where, enc, io->path);
    else if (bsr && m->version < 3)
        rc = sc_fail(io->err, "%s is a bsr_matrix in a format version %d file (BSR needs version 3) (%s)",
                     where, m->version, io->path);
    free(enc);
    if (rc) return rc;
    return bsr ? sio_bsr_body(io, g, where, l, m->version) : sio_csr_body(io, g, where, l);
}

// Reads /layers/<name> of one conv or linear layer.
static int sio_layer_read(sio *io, hid_t layers, sparse_model *m, sparse_layer *l) {
    const char *name = m->nt->layers[l->layer].name;
    char where[96];
    snprintf(where, sizeof where, "/layers/%s", name);
    hid_t g = h5io_group_open(io, layers, "/layers", name);
    if (g < 0) return -1;
    int rc = sio_layer_attrs(io, g, where, l);
    if (rc == 0) rc = sio_layer_body(io, g, where, l, m);
    H5Gclose(g);
    return rc;
}

// Reads every conv and linear layer; /layers must hold exactly those.
static int sio_layers_read(sio *io, sparse_model *m) {
    const net *nt = m->nt;
    for (int i = 0; i < nt->nlayers; i++)
        m->nlayers += op_of(nt->layers[i].kind)->sparse_geom != NULL;
    m->layers = calloc((size_t)(m->nlayers ? m->nlayers : 1), sizeof *m->layers);
    if (!m->layers) return sc_fail(io->err, "out of memory (%s)", io->path);
    for (int i = 0, n = 0; i < nt->nlayers; i++)
        if (op_of(nt->layers[i].kind)->sparse_geom)
            sparse_layer_fusion(nt, i, &m->layers[n++]);
    hid_t g = h5io_group_open(io, io->file, "", "layers");
    if (g < 0) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < m->nlayers; i++) rc = sio_layer_read(io, g, m, &m->layers[i]);
    H5G_info_t info;
    if (rc == 0 && H5Gget_info(g, &info) < 0) rc = h5io_fail(io, "H5Gget_info", __FILE__, __LINE__);
    if (rc == 0 && info.nlinks != (hsize_t)m->nlayers)
        rc = sc_fail(io->err, "/layers holds %llu groups, the net has %d conv/linear layers (%s)",
                     (unsigned long long)info.nlinks, m->nlayers, io->path);
    H5Gclose(g);
    return rc;
}

// Reads the tensors of the layers that were not folded from /params.
static int sio_params_read(sio *io, sparse_model *m) {
    hid_t g = h5io_group_open(io, io->file, "", "params");
    if (g < 0) return -1;
    int rc = 0;
    for (int t = 0; rc == 0 && t < m->nt->ntensors; t++)
        if (sparse_model_tensor_in_params(m, t))
            rc = h5io_dset_read_num(io, g, "/params", m->nt->tensors[t].name, H5T_NATIVE_FLOAT,
                                    m->nt->tensors[t].count, net_tensor_data(m->nt, t));
    H5Gclose(g);
    return rc;
}

// --- HDF5 reading: the file -------------------------------------------------

// Checks the format attributes and reads the value type.
static int sio_format(sio *io, sparse_model *m) {
    if (H5Aexists(io->file, "format") <= 0)
        return sc_fail(io->err, "not a sparsecnn export file, no 'format' attribute (%s)", io->path);
    char *fmt = sio_str(io, io->file, "/", "format", 1);
    if (!fmt) return -1;
    int ok = !strcmp(fmt, SPARSE_FORMAT);
    if (!ok)
        sc_fail(io->err, "not a sparsecnn export file, format is '%s'%s (%s)", fmt,
                strcmp(fmt, "sparsecnn-model") ? "" : ": run export on it first", io->path);
    free(fmt);
    if (!ok) return -1;
    long ver;
    SC_TRY(sio_int(io, io->file, "/", "format_version", -(1L << 30), 1L << 30, &ver));
    if (ver < SPARSE_FORMAT_VERSION_CSR || ver > SPARSE_FORMAT_VERSION_HYBRID)
        return sc_fail(io->err, "%s: export format version %ld is not read by this build (it reads "
                       "versions %d to %d): run export again on the model", io->path, ver,
                       SPARSE_FORMAT_VERSION_CSR, SPARSE_FORMAT_VERSION_HYBRID);
    m->version = (int)ver;
    char *vt = sio_str(io, io->file, "/", "values", 1);
    if (!vt) return -1;
    m->vtype = !strcmp(vt, "fp16") ? SV_FP16 : !strcmp(vt, "codebook4") ? SV_CODEBOOK4 : SV_FP32;
    ok = !strcmp(vt, sparse_vtype_name(m->vtype));
    if (!ok) sc_fail(io->err, "unknown value type '%s' (%s)", vt, io->path);
    free(vt);
    return ok ? 0 : -1;
}

// Reads the root attributes and /net and rebuilds the graph.
static int sio_net(sio *io, sparse_model *m) {
    const char *names[4] = {"classes", "in_c", "in_h", "in_w"};
    long dims[4];
    for (int i = 0; i < 4; i++) SC_TRY(sio_int(io, io->file, "/", names[i], 1, 1L << 20, &dims[i]));
    char *arch = sio_str(io, io->file, "/", "arch", 1);
    char *ds = arch ? sio_str(io, io->file, "/", "dataset", 1) : NULL;
    hid_t g = ds ? h5io_group_open(io, io->file, "", "net") : -1;
    char *desc = g >= 0 ? sio_str(io, g, "/net", "description", 0) : NULL;
    int rc = -1;
    if (desc) {
        snprintf(m->dataset, sizeof m->dataset, "%s", ds);
        m->nt = net_from_desc(arch, desc, (int)dims[1], (int)dims[2], (int)dims[3], (int)dims[0],
                              io->err);
        if (!m->nt) sc_wrap(io->err, "bad network description in %s", io->path);
        else if (h5io_dset_read_num(io, g, "/net", "input_mean", H5T_NATIVE_FLOAT, 3,
                                    m->nt->in_mean) == 0 &&
                 h5io_dset_read_num(io, g, "/net", "input_std", H5T_NATIVE_FLOAT, 3,
                                    m->nt->in_std) == 0)
            rc = 0;
    }
    if (g >= 0) H5Gclose(g);
    free(arch), free(ds), free(desc);
    return rc;
}

// Reads everything from the open file into m.
static int sio_read_all(sio *io, sparse_model *m) {
    SC_TRY(sio_format(io, m));
    SC_TRY(sio_net(io, m));
    SC_TRY(sio_layers_read(io, m));
    SC_TRY(sio_params_read(io, m));
    return sparse_model_fill_net(m, io->err);
}

// Loads an export file.
sparse_model *sparse_model_load(const char *path, sc_err *err) {
    sio io = {.path = path, .err = err, .file = -1, .kind = "export file"};
    h5io_quiet q;
    h5io_quiet_begin(&q);
    sparse_model *m = calloc(1, sizeof *m);
    int rc = m ? 0 : sc_fail(err, "out of memory (%s)", path);
    if (rc == 0 && (io.file = h5io_file_open(&io)) < 0) rc = -1;
    if (rc == 0) rc = sio_read_all(&io, m);
    if (io.file >= 0 && H5Fclose(io.file) < 0 && rc == 0)
        rc = h5io_fail(&io, "H5Fclose", __FILE__, __LINE__);
    h5io_quiet_end(&q);
    if (rc != 0) {
        sparse_model_free(m);
        return NULL;
    }
    return m;
}
