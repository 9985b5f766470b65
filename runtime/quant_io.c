// The /quant group of a quantized model file: writing it next to what
// model_save() writes (one atomic replacement), reading and checking it,
// decoding, and fp16 rounding. The layout is documented in docs/quantize.md.
#include "h5io.h"
#include "quant_io.h"
#include "half.h"

#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUANT_VERSION 1          // files without row scales
#define QUANT_VERSION_ROWS 2     // k-means with row scales (older readers refuse them)

// --- the in-memory form -----------------------------------------------------

// Allocates an empty quant_model with room for n tensors.
quant_model *quant_model_new(quant_method method, int n, sc_err *err) {
    quant_model *q = calloc(1, sizeof *q);
    if (q) q->t = calloc(n > 0 ? (size_t)n : 1, sizeof *q->t);
    if (!q || !q->t) {
        free(q);
        sc_fail(err, "out of memory (quantized model)");
        return NULL;
    }
    q->method = method;
    q->codebook_fp16 = 1;
    return q;
}

// Frees one tensor's arrays.
static void quant_tensor_free(quant_tensor *t) {
    free(t->codebook), free(t->indices), free(t->scale), free(t->zero_point), free(t->q);
    free(t->row_scale);
    memset(t, 0, sizeof *t);
}

// Frees a quant_model and everything it owns.
void quant_model_free(quant_model *q) {
    if (!q) return;
    for (int i = 0; i < q->ntensors; i++) quant_tensor_free(&q->t[i]);
    free(q->t);
    free(q);
}

// Allocates the per-tensor arrays of one quantized tensor (zeroed).
int quant_tensor_alloc(quant_tensor *t, const net *nt, int tensor, int k, int nscale,
                       sc_err *err) {
    const ptensor *p = &nt->tensors[tensor];
    memset(t, 0, sizeof *t);
    t->tensor = tensor;
    snprintf(t->name, sizeof t->name, "%s", p->name);
    t->count = p->count;
    size_t n = p->count ? p->count : 1;
    int bad = 0;
    if (k > 0) {
        t->k = k;
        t->codebook = calloc((size_t)k, sizeof *t->codebook);
        t->indices = calloc(n, sizeof *t->indices);
        bad = !t->codebook || !t->indices;
    }
    if (nscale > 0) {
        t->nscale = nscale;
        t->scale = calloc((size_t)nscale, sizeof *t->scale);
        t->zero_point = calloc((size_t)nscale, sizeof *t->zero_point);
        t->q = calloc(n, sizeof *t->q);
        bad = bad || !t->scale || !t->zero_point || !t->q;
    }
    if (!bad) return 0;
    quant_tensor_free(t);
    return sc_fail(err, "out of memory (quantized %s)", p->name);
}

// Allocates the row scales of a k-means tensor (all 1).
int quant_tensor_row_scale_alloc(quant_tensor *t, int rows, sc_err *err) {
    free(t->row_scale);
    t->nrows = 0;
    t->row_scale = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *t->row_scale);
    if (!t->row_scale) return sc_fail(err, "out of memory (row scales of %s)", t->name);
    t->nrows = rows;
    for (int k = 0; k < rows; k++) t->row_scale[k] = 1.0f;
    return 0;
}

// Decodes a k-means tensor: codebook[index], times its row's scale when it has them.
static void quant_kmeans_decode(const quant_tensor *t, const float *mask, float *out) {
    if (!t->row_scale) {
        for (size_t i = 0; i < t->count; i++)
            out[i] = mask && mask[i] == 0.0f ? 0.0f : t->codebook[t->indices[i]];
        return;
    }
    const size_t per = t->count / (size_t)t->nrows;  // weights per row
    for (size_t r = 0, i = 0; r < (size_t)t->nrows; r++) {
        const float s = t->row_scale[r];
        for (size_t e = i + per; i < e; i++)  // the product rounded once, to float32
            out[i] = mask && mask[i] == 0.0f ? 0.0f : t->codebook[t->indices[i]] * s;
    }
}

// Writes the decoded values of t into out.
void quant_tensor_decode(const quant_model *q, const quant_tensor *t, const float *mask,
                         float *out) {
    if (q->method == QM_KMEANS) {
        quant_kmeans_decode(t, mask, out);
        return;
    }
    if (q->method != QM_LINEAR) return;
    const size_t per = t->count / (size_t)t->nscale;  // weights per scale
    for (size_t i = 0; i < t->count; i++) {
        const size_t c = i / per;
        const float steps = (float)((int32_t)t->q[i] - t->zero_point[c]);
        out[i] = t->scale[c] * steps;
    }
}

// --- HDF5 plumbing ----------------------------------------------------------

typedef h5io qio;

// --- writing ----------------------------------------------------------------

// Writes a k-means tensor: codebook (fp16 or fp32), row scales (the same
// type, when present) and indices shaped as the weight.
static int qio_kmeans_write(qio *io, hid_t g, const quant_model *q, const quant_tensor *t,
                            const ptensor *p) {
    hsize_t dims[4], kd[1] = {(hsize_t)t->k}, rd[1] = {(hsize_t)t->nrows};
    for (int i = 0; i < p->ndim; i++) dims[i] = (hsize_t)p->dims[i];
    if (q->row_scale && (!t->row_scale || t->nrows != p->dims[0]))
        return sc_fail(io->err, "%s: row scales missing (%s)", p->name, io->path);
    hid_t ft = q->codebook_fp16 ? h5io_half_type(io) : H5T_IEEE_F32LE;
    if (ft < 0) return -1;
    int rc = h5io_dset_write(io, g, "codebook", ft, H5T_NATIVE_FLOAT, 1, kd, t->codebook);
    if (rc == 0 && q->row_scale)
        rc = h5io_dset_write(io, g, "row_scale", ft, H5T_NATIVE_FLOAT, 1, rd, t->row_scale);
    if (q->codebook_fp16) H5IO_CLOSE(io, H5Tclose, ft, rc);
    SC_TRY(rc);
    return h5io_dset_write(io, g, "indices", H5T_STD_U8LE, H5T_NATIVE_UINT8, p->ndim, dims,
                          t->indices);
}

// Writes a linear tensor: scale, zero_point ((nscale)) and q (int8/int16).
static int qio_linear_write(qio *io, hid_t g, const quant_model *q, const quant_tensor *t,
                            const ptensor *p) {
    hsize_t dims[4], sd[1] = {(hsize_t)t->nscale};
    for (int i = 0; i < p->ndim; i++) dims[i] = (hsize_t)p->dims[i];
    SC_TRY(h5io_dset_write(io, g, "scale", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, sd, t->scale));
    SC_TRY(h5io_dset_write(io, g, "zero_point", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, sd,
                          t->zero_point));
    hid_t ft = q->bits == 8 ? H5T_STD_I8LE : H5T_STD_I16LE;
    return h5io_dset_write(io, g, "q", ft, H5T_NATIVE_INT16, p->ndim, dims, t->q);
}

// Writes /quant/<name> for one tensor.
static int qio_tensor_write(qio *io, hid_t quant, const net *nt, const quant_model *q,
                            const quant_tensor *t) {
    const ptensor *p = &nt->tensors[t->tensor];
    hid_t g = -1;
    int rc = -1;
    H5IO_CHECK(io, g = h5io_group_create(io, quant, p->name));
    rc = h5io_attr_str(io, g, "method", q->method == QM_KMEANS ? "kmeans"
                                       : q->method == QM_LINEAR ? "linear" : "half");
    if (rc == 0 && q->method == QM_KMEANS) rc = qio_kmeans_write(io, g, q, t, p);
    if (rc == 0 && q->method == QM_LINEAR) rc = qio_linear_write(io, g, q, t, p);
fail:
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Writes the /quant attributes.
static int qio_attrs_write(qio *io, hid_t g, const quant_model *q) {
    static const char *const names[] = {"kmeans", "linear", "half"};
    SC_TRY(h5io_attr_str(io, g, "method", names[q->method]));
    const int rows = q->method == QM_KMEANS && q->row_scale;
    SC_TRY(h5io_attr_int(io, g, "version", rows ? QUANT_VERSION_ROWS : QUANT_VERSION));
    if (rows) SC_TRY(h5io_attr_int(io, g, "row_scale", 1));
    SC_TRY(h5io_attr_int(io, g, "bits", q->bits));
    SC_TRY(h5io_attr_int(io, g, "k", q->method == QM_KMEANS ? q->k : 0));
    SC_TRY(h5io_attr_str(io, g, "codebook_type", q->method != QM_KMEANS ? ""
                                                : q->codebook_fp16 ? "float16" : "float32"));
    SC_TRY(h5io_attr_int(io, g, "per_channel", q->method == QM_LINEAR && q->per_channel));
    SC_TRY(h5io_attr_int(io, g, "symmetric", q->method == QM_LINEAR && q->symmetric));
    return h5io_attr_int(io, g, "tensors", q->ntensors);
}

// Adds /quant to the open file.
static int qio_write_all(qio *io, const net *nt, const quant_model *q) {
    hid_t g = -1;
    int rc = -1;
    H5IO_CHECK(io, g = h5io_group_create(io, io->file, "quant"));
    rc = qio_attrs_write(io, g, q);
    for (int i = 0; rc == 0 && i < q->ntensors; i++) {
        if (q->t[i].tensor < 0 || q->t[i].tensor >= nt->ntensors)
            rc = sc_fail(io->err, "quantized tensor %d is not in the net (%s)", i, io->path);
        else rc = qio_tensor_write(io, g, nt, q, &q->t[i]);
    }
fail:
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

typedef struct {
    const net *nt;
    const model_meta *meta;
    const quant_model *q;
} qio_save_ctx;

// Writes the model and, when there is one, /quant into the open file.
static int qio_write_cb(h5io *io, const void *ctx) {
    const qio_save_ctx *c = ctx;
    SC_TRY(model_h5_write(io, c->nt, c->meta));
    if (c->q && qio_write_all(io, c->nt, c->q) != 0)
        return sc_wrap(io->err, "writing /quant of %s", io->path);
    return 0;
}

// The model and /quant in one atomic, checksummed write.
int quant_model_save(const char *path, const net *nt, const model_meta *meta,
                     const quant_model *q, sc_err *err) {
    qio_save_ctx c = {nt, meta, q};
    return h5io_file_save(path, qio_write_cb, &c, err);
}

// --- reading ----------------------------------------------------------------

// Reads a scalar attribute of obj as mtype; a missing one is an error.
static int qio_attr_read(qio *io, hid_t obj, const char *where, const char *name, hid_t mtype,
                         void *buf) {
    htri_t ex = H5Aexists(obj, name);
    if (ex <= 0) return sc_fail(io->err, "%s lacks attribute %s (%s)", where, name, io->path);
    hid_t a = -1;
    int rc = -1;
    H5IO_CHECK(io, a = H5Aopen(obj, name, H5P_DEFAULT));
    H5IO_CHECK(io, H5Aread(a, mtype, buf));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Aclose, a, rc);
    return rc;
}

// Reads a string attribute (fixed length, or variable length from an older
// file) into out.
static int qio_attr_str_read(qio *io, hid_t obj, const char *where, const char *name, char *out,
                             size_t len) {
    htri_t ex = H5Aexists(obj, name);
    if (ex <= 0) return sc_fail(io->err, "%s lacks attribute %s (%s)", where, name, io->path);
    hid_t a = -1;
    int rc = -1;
    char what[160];
    snprintf(what, sizeof what, "attribute %s of %s", name, where);
    H5IO_CHECK(io, a = H5Aopen(obj, name, H5P_DEFAULT));
    char *s = h5io_str_read(io, a, 1, what);
    if (s) {
        snprintf(out, len, "%s", s);
        free(s);
        rc = 0;
    }
fail:
    H5IO_CLOSE(io, H5Aclose, a, rc);
    return rc;
}

// Reads the /quant attributes into q.
static int qio_attrs_read(qio *io, hid_t g, quant_model *q, int *ntensors) {
    char method[32], cb[32];
    int version = 0;
    SC_TRY(qio_attr_str_read(io, g, "/quant", "method", method, sizeof method));
    SC_TRY(qio_attr_read(io, g, "/quant", "version", H5T_NATIVE_INT, &version));
    if (version != QUANT_VERSION && version != QUANT_VERSION_ROWS)
        return sc_fail(io->err, "/quant version %d, this build reads %d and %d (%s)", version,
                       QUANT_VERSION, QUANT_VERSION_ROWS, io->path);
    if (!strcmp(method, "kmeans")) q->method = QM_KMEANS;
    else if (!strcmp(method, "linear")) q->method = QM_LINEAR;
    else if (!strcmp(method, "half")) q->method = QM_HALF;
    else return sc_fail(io->err, "/quant method '%s' is not one of kmeans, linear, half (%s)",
                        method, io->path);
    SC_TRY(qio_attr_read(io, g, "/quant", "bits", H5T_NATIVE_INT, &q->bits));
    SC_TRY(qio_attr_read(io, g, "/quant", "k", H5T_NATIVE_INT, &q->k));
    SC_TRY(qio_attr_str_read(io, g, "/quant", "codebook_type", cb, sizeof cb));
    SC_TRY(qio_attr_read(io, g, "/quant", "per_channel", H5T_NATIVE_INT, &q->per_channel));
    SC_TRY(qio_attr_read(io, g, "/quant", "symmetric", H5T_NATIVE_INT, &q->symmetric));
    SC_TRY(qio_attr_read(io, g, "/quant", "tensors", H5T_NATIVE_INT, ntensors));
    q->codebook_fp16 = !strcmp(cb, "float16");
    q->row_scale = 0;
    if (version == QUANT_VERSION_ROWS)
        SC_TRY(qio_attr_read(io, g, "/quant", "row_scale", H5T_NATIVE_INT, &q->row_scale));
    if (q->row_scale && (q->row_scale != 1 || q->method != QM_KMEANS))
        return sc_fail(io->err, "/quant row_scale = %d with method %s: only k-means has row "
                       "scales (%s)", q->row_scale, method, io->path);
    if (q->method == QM_KMEANS && (q->k < 2 || q->k > 256))
        return sc_fail(io->err, "/quant k = %d, must be 2..256 (%s)", q->k, io->path);
    if (q->method == QM_LINEAR && q->bits != 8 && q->bits != 16)
        return sc_fail(io->err, "/quant bits = %d, must be 8 or 16 (%s)", q->bits, io->path);
    return 0;
}

// Reads and checks a k-means tensor's codebook and indices.
static int qio_kmeans_read(qio *io, hid_t g, const char *where, quant_model *q,
                           quant_tensor *t) {
    long k = h5io_dset_len(io, g, where, "codebook");
    if (k < 0) return -1;
    if (k != q->k) return sc_fail(io->err, "%s/codebook holds %ld centroids, /quant says %d (%s)",
                                  where, k, q->k, io->path);
    SC_TRY(h5io_dset_read(io, g, where, "codebook", H5T_NATIVE_FLOAT, (size_t)k, t->codebook));
    for (long c = 0; c < k; c++)
        if (!isfinite(t->codebook[c]))
            return sc_fail(io->err, "%s: tensor %s/codebook holds NaN/Inf at index %ld", io->path,
                           where, c);
    SC_TRY(h5io_dset_read(io, g, where, "indices", H5T_NATIVE_UINT8, t->count, t->indices));
    for (size_t i = 0; i < t->count; i++)
        if (t->indices[i] >= k)
            return sc_fail(io->err, "%s/indices[%zu] = %d, beyond the %ld centroids (%s)", where,
                           i, t->indices[i], k, io->path);
    if (!q->row_scale) {
        if (H5Lexists(g, "row_scale", H5P_DEFAULT) > 0)
            return sc_fail(io->err, "%s/row_scale present though /quant has no row scales (%s)",
                           where, io->path);
        return 0;
    }
    SC_TRY(h5io_dset_read(io, g, where, "row_scale", H5T_NATIVE_FLOAT, (size_t)t->nrows,
                          t->row_scale));
    for (int r = 0; r < t->nrows; r++)
        if (!(isfinite(t->row_scale[r]) && t->row_scale[r] > 0))
            return sc_fail(io->err, "%s/row_scale[%d] = %g, must be positive and finite (%s)",
                           where, r, t->row_scale[r], io->path);
    return 0;
}

// Reads and checks a linear tensor's scales, zero points and integers.
static int qio_linear_read(qio *io, hid_t g, const char *where, const quant_model *q,
                           quant_tensor *t, const ptensor *p) {
    long ns = h5io_dset_len(io, g, where, "scale");
    if (ns < 0) return -1;
    if (ns != 1 && ns != p->dims[0])
        return sc_fail(io->err, "%s/scale holds %ld values, expected 1 or %d (%s)", where, ns,
                       p->dims[0], io->path);
    t->nscale = (int)ns;
    SC_TRY(h5io_dset_read(io, g, where, "scale", H5T_NATIVE_FLOAT, (size_t)ns, t->scale));
    SC_TRY(h5io_dset_read(io, g, where, "zero_point", H5T_NATIVE_INT32, (size_t)ns,
                          t->zero_point));
    SC_TRY(h5io_dset_read(io, g, where, "q", H5T_NATIVE_INT16, t->count, t->q));
    const int qmin = q->bits == 8 ? -128 : -32768, qmax = q->bits == 8 ? 127 : 32767;
    for (long c = 0; c < ns; c++)
        if (!(isfinite(t->scale[c]) && t->scale[c] > 0) || t->zero_point[c] < qmin ||
            t->zero_point[c] > qmax)
            return sc_fail(io->err, "%s: bad scale %g or zero point %d in channel %ld (%s)", where,
                           t->scale[c], t->zero_point[c], c, io->path);
    for (size_t i = 0; i < t->count; i++)
        if (t->q[i] < qmin || t->q[i] > qmax)
            return sc_fail(io->err, "%s/q[%zu] = %d, beyond %d bits (%s)", where, i, t->q[i],
                           q->bits, io->path);
    return 0;
}

// Checks that decoding t reproduces the net's parameters exactly.
static int qio_match_check(qio *io, const net *nt, const quant_model *q, const quant_tensor *t) {
    const ptensor *p = &nt->tensors[t->tensor];
    const float *w = nt->param + p->offset, *m = nt->mask + p->offset;
    if (q->method == QM_HALF) {
        for (size_t i = 0; i < t->count; i++)
            if (half_round(w[i], NULL) != w[i])
                return sc_fail(io->err, "/params/%s[%zu] = %.9g is not an fp16 value though "
                               "/quant says half (%s)", p->name, i, w[i], io->path);
        return 0;
    }
    float *d = malloc((t->count ? t->count : 1) * sizeof *d);  // (count)
    if (!d) return sc_fail(io->err, "out of memory (%s)", io->path);
    quant_tensor_decode(q, t, m, d);
    size_t bad = t->count;
    for (size_t i = 0; i < t->count && bad == t->count; i++)
        if (d[i] != w[i]) bad = i;
    int rc = 0;
    if (bad < t->count)
        rc = sc_fail(io->err, "/quant/%s does not decode to /params/%s (index %zu: %.9g vs "
                     "%.9g); the model changed after quantization (%s)", p->name, p->name, bad,
                     d[bad], w[bad], io->path);
    free(d);
    return rc;
}

// Reads /quant/<name> of tensor `ti` into t.
static int qio_tensor_read(qio *io, hid_t quant, const net *nt, quant_model *q, int ti,
                           quant_tensor *t) {
    const ptensor *p = &nt->tensors[ti];
    char where[96], method[32];
    snprintf(where, sizeof where, "/quant/%s", p->name);
    int lin = q->method == QM_LINEAR;
    SC_TRY(quant_tensor_alloc(t, nt, ti, q->method == QM_KMEANS ? q->k : 0,
                              lin ? p->dims[0] : 0, io->err));
    if (q->method == QM_KMEANS && q->row_scale)
        SC_TRY(quant_tensor_row_scale_alloc(t, p->dims[0], io->err));
    hid_t g = -1;
    int rc = -1;
    H5IO_CHECK(io, g = H5Gopen2(quant, p->name, H5P_DEFAULT));
    rc = qio_attr_str_read(io, g, where, "method", method, sizeof method);
    if (rc == 0 && strcmp(method, q->method == QM_KMEANS ? "kmeans" : lin ? "linear" : "half"))
        rc = sc_fail(io->err, "%s method '%s' differs from /quant's (%s)", where, method, io->path);
    if (rc == 0 && q->method == QM_KMEANS) rc = qio_kmeans_read(io, g, where, q, t);
    if (rc == 0 && lin) rc = qio_linear_read(io, g, where, q, t, p);
    if (rc == 0) rc = qio_match_check(io, nt, q, t);
fail:
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Reads every /quant/<name> present, in the net's tensor order, and checks
// that /quant holds nothing else.
static int qio_tensors_read(qio *io, hid_t g, const net *nt, quant_model *q, int want) {
    for (int i = 0; i < nt->ntensors; i++) {
        htri_t ex = H5Lexists(g, nt->tensors[i].name, H5P_DEFAULT);
        if (ex < 0) return h5io_fail(io, "H5Lexists(tensor)", __FILE__, __LINE__);
        if (ex == 0) continue;
        if (!nt->tensors[i].trainable || q->ntensors >= want)
            return sc_fail(io->err, "/quant/%s is not expected (%s)", nt->tensors[i].name, io->path);
        quant_tensor *t = &q->t[q->ntensors++];  // counted first: freed on failure too
        SC_TRY(qio_tensor_read(io, g, nt, q, i, t));
    }
    H5G_info_t info;
    if (H5Gget_info(g, &info) < 0) return h5io_fail(io, "H5Gget_info(/quant)", __FILE__, __LINE__);
    if (info.nlinks != (hsize_t)q->ntensors || q->ntensors != want)
        return sc_fail(io->err, "/quant holds %llu entries, %d name tensors of the net and %d "
                       "are expected (%s)", (unsigned long long)info.nlinks, q->ntensors, want,
                       io->path);
    return 0;
}

// Reads /quant from the open file.
static int qio_read_all(qio *io, const net *nt, quant_model **out) {
    hid_t g = -1;
    int rc = -1, want = 0;
    quant_model *q = quant_model_new(QM_KMEANS, nt->ntensors, io->err);
    if (!q) return -1;
    H5IO_CHECK(io, g = H5Gopen2(io->file, "quant", H5P_DEFAULT));
    rc = qio_attrs_read(io, g, q, &want);
    if (rc == 0 && (want < 0 || want > nt->ntensors))
        rc = sc_fail(io->err, "/quant says %d tensors, the net has %d (%s)", want, nt->ntensors,
                     io->path);
    if (rc == 0) rc = qio_tensors_read(io, g, nt, q, want);
fail:
    H5IO_CLOSE(io, H5Gclose, g, rc);
    if (rc) quant_model_free(q);
    else *out = q;
    return rc;
}

// Opens the file, and reads /quant when it has one.
int quant_load(const char *path, const net *nt, quant_model **out, sc_err *err) {
    *out = NULL;
    qio io = {.path = path, .err = err, .file = -1, .kind = "model file"};
    h5io_quiet s;
    h5io_quiet_begin(&s);
    int rc = -1;
    io.file = h5io_file_open_as(&io, 0);  // model_load gave the notice
    if (io.file >= 0) {
        htri_t ex = H5Lexists(io.file, "quant", H5P_DEFAULT);
        if (ex < 0) h5io_fail(&io, "H5Lexists(/quant)", __FILE__, __LINE__);
        else rc = ex == 0 ? 0 : qio_read_all(&io, nt, out);
    }
    H5IO_CLOSE(&io, H5Fclose, io.file, rc);
    h5io_quiet_end(&s);
    if (rc && *out) {
        quant_model_free(*out);
        *out = NULL;
    }
    return rc;
}
