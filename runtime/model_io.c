// Model files in HDF5: the net (description, parameters, masks, BN buffers)
// and the training state, written atomically and read back with every part
// checked. The layout is documented in docs/model-format.md.
#include "h5io.h"
#include "model_io.h"

#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_FORMAT "sparsecnn-model"
#define MODEL_FORMAT_VERSION 1

// --- model_meta -------------------------------------------------------------

// Sets every field to its "unknown" value (accuracies -1, pointers NULL).
void model_meta_init(model_meta *m) {
    memset(m, 0, sizeof *m);
    m->val_accuracy = -1;
    m->test_accuracy = -1;
}

// Frees what a model_meta owns and re-initialises it.
void model_meta_free(model_meta *m) {
    if (!m) return;
    free(m->config);
    for (int i = 0; i < m->nhistory; i++) free(m->history[i]);
    free(m->history);
    free(m->momentum);
    model_meta_init(m);
}

// Appends a copy of line to the history; newlines become spaces.
int model_meta_add_history(model_meta *m, const char *line, sc_err *err) {
    char **h = realloc(m->history, (size_t)(m->nhistory + 1) * sizeof *h);
    if (!h) return sc_fail(err, "out of memory (history)");
    m->history = h;
    char *s = strdup(line ? line : "");
    if (!s) return sc_fail(err, "out of memory (history)");
    for (char *p = s; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    h[m->nhistory++] = s;
    return 0;
}

// --- HDF5 error handling ----------------------------------------------------

typedef h5io mio;


// --- writing ----------------------------------------------------------------

typedef enum { MG_PARAMS, MG_MASKS, MG_BUFFERS, MG_MOMENTUM } mio_kind;

// Says whether a tensor belongs in the group of that kind.
static int mio_kind_has(mio_kind k, const ptensor *t) {
    if (k == MG_MASKS) return t->prunable;
    if (k == MG_BUFFERS) return !t->trainable;
    return t->trainable;
}

// Group path of each kind, as it appears in the file.
static const char *mio_kind_path(mio_kind k) {
    static const char *const paths[] = {"/params", "/masks", "/buffers", "/optimizer/momentum"};
    return paths[k];
}

// Source floats of a tensor for a group kind.
static const float *mio_kind_src(mio_kind k, const net *nt, const model_meta *m,
                                 const ptensor *t) {
    if (k == MG_BUFFERS) return nt->buf + t->offset;
    if (k == MG_MASKS) return nt->mask + t->offset;
    if (k == MG_MOMENTUM) return m->momentum + t->offset;
    return nt->param + t->offset;
}

// Writes one tensor (float32, or uint8 0/1 for masks) into group g.
static int mio_tensor_write(mio *io, hid_t g, mio_kind k, const float *src, const ptensor *t) {
    hsize_t dims[4];
    for (int i = 0; i < t->ndim; i++) dims[i] = (hsize_t)t->dims[i];
    if (k != MG_MASKS)
        return h5io_dset_write(io, g, t->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t->ndim, dims,
                              src);
    uint8_t *m = malloc(t->count ? t->count : 1);  // (count)
    if (!m) return sc_fail(io->err, "out of memory (%s, %s)", io->path, t->name);
    for (size_t i = 0; i < t->count; i++) m[i] = src[i] != 0.0f;
    int rc = h5io_dset_write(io, g, t->name, H5T_STD_U8LE, H5T_NATIVE_UINT8, t->ndim, dims, m);
    free(m);
    return rc;
}

// Writes every tensor of one kind into the (already created) group g.
static int mio_tensors_write(mio *io, hid_t g, mio_kind k, const net *nt, const model_meta *m) {
    for (int i = 0; i < nt->ntensors; i++) {
        const ptensor *t = &nt->tensors[i];
        if (!mio_kind_has(k, t)) continue;
        if (!t->name[0] || strchr(t->name, '/') || !strcmp(t->name, "."))
            return sc_fail(io->err, "tensor name not usable in HDF5 (%s, '%s')", io->path, t->name);
        SC_TRY(mio_tensor_write(io, g, k, mio_kind_src(k, nt, m, t), t));
    }
    return 0;
}

// Creates a group and fills it with the tensors of one kind.
static int mio_group_write(mio *io, hid_t loc, const char *name, mio_kind k, const net *nt,
                           const model_meta *m) {
    hid_t g = h5io_group_create(io, loc, name);
    if (g < 0) return -1;
    int rc = mio_tensors_write(io, g, k, nt, m);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Writes the root attributes that identify the file and the net's input.
static int mio_root_write(mio *io, const net *nt, const model_meta *m) {
    SC_TRY(h5io_root_attrs(io, MODEL_FORMAT, MODEL_FORMAT_VERSION, nt, m->dataset));
    if (m->pattern[0]) SC_TRY(h5io_attr_str(io, io->file, "pattern", m->pattern));
    return 0;
}

// Writes /state attributes and /state/config.
static int mio_state_write_attrs(mio *io, hid_t g, const model_meta *m) {
    long long step = m->step;
    uint64_t seed = m->seed;
    SC_TRY(h5io_attr_int(io, g, "epoch", m->epoch));
    SC_TRY(h5io_attr_int(io, g, "epochs_total", m->epochs_total));
    SC_TRY(h5io_attr_write(io, g, "step", H5T_STD_I64LE, H5T_NATIVE_LLONG, 0, &step));
    SC_TRY(h5io_attr_write(io, g, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, &seed));
    SC_TRY(h5io_attr_write(io, g, "rng", H5T_STD_U64LE, H5T_NATIVE_UINT64, 4, m->rng_state.s));
    SC_TRY(h5io_attr_write(io, g, "val_accuracy", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0,
                          &m->val_accuracy));
    SC_TRY(h5io_attr_write(io, g, "test_accuracy", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0,
                          &m->test_accuracy));
    if (m->config) SC_TRY(h5io_dset_strs(io, g, "config", 0, 1, (const char *const *)&m->config));
    return 0;
}

// Writes /state and /history.
static int mio_state_write(mio *io, const model_meta *m) {
    hid_t g = h5io_group_create(io, io->file, "state");
    if (g < 0) return -1;
    int rc = mio_state_write_attrs(io, g, m);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    SC_TRY(rc);
    return h5io_dset_strs(io, io->file, "history", 1, m->nhistory,
                         (const char *const *)m->history);
}

// Writes /optimizer/momentum when the meta carries momentum.
static int mio_momentum_write(mio *io, const net *nt, const model_meta *m) {
    if (!m->momentum) return 0;
    hid_t g = h5io_group_create(io, io->file, "optimizer");
    if (g < 0) return -1;
    int rc = mio_group_write(io, g, "momentum", MG_MOMENTUM, nt, m);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Writes the whole model into the open file.
static int mio_write_all(mio *io, const net *nt, const model_meta *m) {
    SC_TRY(mio_root_write(io, nt, m));
    SC_TRY(h5io_net_write(io, nt));
    SC_TRY(mio_group_write(io, io->file, "params", MG_PARAMS, nt, m));
    SC_TRY(mio_group_write(io, io->file, "masks", MG_MASKS, nt, m));
    SC_TRY(mio_group_write(io, io->file, "buffers", MG_BUFFERS, nt, m));
    SC_TRY(mio_momentum_write(io, nt, m));
    return mio_state_write(io, m);
}

// --- saving -----------------------------------------------------------------

typedef struct {
    const net *nt;
    const model_meta *meta;
} mio_save_ctx;

// Writes the whole model into the open file io->file (the h5io_writer form).
static int mio_write_cb(h5io *io, const void *ctx) {
    const mio_save_ctx *c = ctx;
    return model_h5_write(io, c->nt, c->meta);
}

// Writes the model into the open file io->file.
int model_h5_write(h5io *io, const net *nt, const model_meta *meta) {
    model_meta dflt;
    if (!meta) {
        model_meta_init(&dflt);
        meta = &dflt;
    }
    return mio_write_all(io, nt, meta);
}

// Writes net and meta to path atomically (runtime/h5io.h: h5io_file_save).
int model_save(const char *path, const net *nt, const model_meta *meta, sc_err *err) {
    mio_save_ctx c = {nt, meta};
    return h5io_file_save(path, mio_write_cb, &c, err);
}

// --- reading: generic pieces ------------------------------------------------

// Reads an attribute of n values (n == 1 for a scalar) after checking it.
static int mio_attr_read(mio *io, hid_t obj, const char *where, const char *name, hid_t mtype,
                         hssize_t n, void *buf) {
    hid_t a = -1, t = -1, sp = -1;
    int rc = -1;
    char what[160];
    snprintf(what, sizeof what, "attribute %s of %s", name, where);
    htri_t ex = H5Aexists(obj, name);
    if (ex <= 0) return sc_fail(io->err, "model file lacks %s (%s)", what, io->path);
    H5IO_CHECK(io, a = H5Aopen(obj, name, H5P_DEFAULT));
    H5IO_CHECK(io, t = H5Aget_type(a));
    H5IO_CHECK(io, sp = H5Aget_space(a));
    if (h5io_need_numeric(io, t, what) != 0) goto fail;
    hssize_t got;
    H5IO_CHECK(io, got = H5Sget_simple_extent_npoints(sp));
    if (got != n) {
        sc_fail(io->err, "%s has %lld values, expected %lld (%s)", what, (long long)got,
                (long long)n, io->path);
        goto fail;
    }
    H5IO_CHECK(io, H5Aread(a, mtype, buf));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Sclose, sp, rc);
    H5IO_CLOSE(io, H5Tclose, t, rc);
    H5IO_CLOSE(io, H5Aclose, a, rc);
    return rc;
}

// Reads one string from an attribute (is_attr) or dataset named name under
// loc; returns a malloc'd copy or NULL with the error filled.
static char *mio_str_read(mio *io, hid_t loc, const char *where, const char *name, int is_attr) {
    char what[160];
    if (is_attr) snprintf(what, sizeof what, "attribute %s of %s", name, where);
    else h5io_join(what, sizeof what, where, name);
    if (is_attr ? H5Aexists(loc, name) <= 0 : H5Lexists(loc, name, H5P_DEFAULT) <= 0) {
        sc_fail(io->err, "model file lacks %s (%s)", what, io->path);
        return NULL;
    }
    hid_t o = -1;
    char *s = NULL;
    int rc = 0;
    H5IO_CHECK(io, o = is_attr ? H5Aopen(loc, name, H5P_DEFAULT) : H5Dopen2(loc, name, H5P_DEFAULT));
    s = h5io_str_read(io, o, is_attr, what);
fail:
    if (o >= 0) {
        if (is_attr) H5IO_CLOSE(io, H5Aclose, o, rc);
        else H5IO_CLOSE(io, H5Dclose, o, rc);
    }
    if (rc != 0) {
        free(s);
        return NULL;
    }
    return s;
}

// Formats dims as "(a, b, c)".
static void mio_dims_fmt(char *out, size_t len, int ndim, const hsize_t *d) {
    size_t o = (size_t)snprintf(out, len, "(");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (o < len) snprintf(out + o, len - o, ")");
}

// Checks a dataset's rank and dims against what the net needs.
static int mio_shape_check(mio *io, hid_t d, const char *what, int ndim, const hsize_t *want) {
    hid_t sp = -1;
    int rc = -1;
    hsize_t got[H5S_MAX_RANK];
    int nd;
    H5IO_CHECK(io, sp = H5Dget_space(d));
    H5IO_CHECK(io, nd = H5Sget_simple_extent_ndims(sp));
    H5IO_CHECK(io, H5Sget_simple_extent_dims(sp, got, NULL));
    int same = nd == ndim;
    for (int i = 0; same && i < nd; i++) same = got[i] == want[i];
    if (!same) {
        char a[96], b[96];
        mio_dims_fmt(a, sizeof a, nd, got);
        mio_dims_fmt(b, sizeof b, ndim, want);
        sc_fail(io->err, "%s has shape %s, the net needs %s (%s)", what, a, b, io->path);
        goto fail;
    }
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Sclose, sp, rc);
    return rc;
}

// Reads numeric dataset loc/name (shown as where/name) of the given shape
// into buf as mtype.
static int mio_dset_read(mio *io, hid_t loc, const char *where, const char *name, hid_t mtype,
                         int ndim, const hsize_t *dims, void *buf) {
    char what[256];
    h5io_join(what, sizeof what, where, name);
    hid_t d = h5io_dset_open(io, loc, where, name), t = -1;
    if (d < 0) return -1;
    int rc = -1;
    H5IO_CHECK(io, t = H5Dget_type(d));
    if (h5io_need_numeric(io, t, what) != 0) goto fail;
    if (H5Tget_class(t) != H5Tget_class(mtype)) {
        sc_fail(io->err, "%s has %s values, expected %s (%s)", what,
                H5Tget_class(t) == H5T_FLOAT ? "floating-point" : "integer",
                H5Tget_class(mtype) == H5T_FLOAT ? "floating-point" : "integer", io->path);
        goto fail;
    }
    if (mio_shape_check(io, d, what, ndim, dims) != 0) goto fail;
    H5IO_CHECK(io, H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Tclose, t, rc);
    H5IO_CLOSE(io, H5Dclose, d, rc);
    return rc;
}

// --- reading: the model -----------------------------------------------------

// Fails when one of n values of tensor where/name is NaN or infinite.
static int mio_finite_check(mio *io, const char *where, const char *name, const float *v,
                            size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            char full[256];
            return sc_fail(io->err, "%s: tensor %s holds NaN/Inf at index %zu", io->path,
                           h5io_join(full, sizeof full, where, name), i);
        }
    return 0;
}

// Reads one tensor of a group kind into the net (or into momentum).
static int mio_tensor_read(mio *io, hid_t g, mio_kind k, net *nt, float *mom, const ptensor *t) {
    hsize_t dims[4];
    for (int i = 0; i < t->ndim; i++) dims[i] = (hsize_t)t->dims[i];
    const char *where = mio_kind_path(k);
    if (k == MG_PARAMS || k == MG_BUFFERS || k == MG_MOMENTUM) {
        float *dst = k == MG_PARAMS ? nt->param : k == MG_BUFFERS ? nt->buf : mom;
        SC_TRY(mio_dset_read(io, g, where, t->name, H5T_NATIVE_FLOAT, t->ndim, dims,
                             dst + t->offset));
        return mio_finite_check(io, where, t->name, dst + t->offset, t->count);
    }
    uint8_t *m = malloc(t->count ? t->count : 1);  // (count)
    if (!m) return sc_fail(io->err, "out of memory (%s)", io->path);
    int rc = mio_dset_read(io, g, where, t->name, H5T_NATIVE_UINT8, t->ndim, dims, m);
    for (size_t i = 0; rc == 0 && i < t->count; i++) {
        if (m[i] > 1)
            rc = sc_fail(io->err, "%s/%s holds mask value %d, expected 0 or 1 (%s)", where,
                         t->name, m[i], io->path);
        nt->mask[t->offset + i] = m[i] ? 1.0f : 0.0f;
    }
    free(m);
    return rc;
}

// Reads every tensor of one kind from group g and checks that the group
// holds nothing else.
static int mio_tensors_read(mio *io, hid_t g, mio_kind k, net *nt, float *mom) {
    hsize_t want = 0;
    for (int i = 0; i < nt->ntensors; i++) {
        if (!mio_kind_has(k, &nt->tensors[i])) continue;
        SC_TRY(mio_tensor_read(io, g, k, nt, mom, &nt->tensors[i]));
        want++;
    }
    H5G_info_t info;
    if (H5Gget_info(g, &info) < 0) return h5io_fail(io, "H5Gget_info(g)", __FILE__, __LINE__);
    if (info.nlinks != want)
        return sc_fail(io->err, "%s holds %llu entries, the net has %llu (%s)", mio_kind_path(k),
                       (unsigned long long)info.nlinks, (unsigned long long)want, io->path);
    return 0;
}

// Opens the group of a kind under loc and reads its tensors.
static int mio_group_read(mio *io, hid_t loc, const char *where, const char *name, mio_kind k,
                          net *nt, float *mom) {
    hid_t g = h5io_group_open(io, loc, where, name);
    if (g < 0) return -1;
    int rc = mio_tensors_read(io, g, k, nt, mom);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Checks the format attributes that mark a sparsecnn model file.
static int mio_format_check(mio *io) {
    if (H5Aexists(io->file, "format") <= 0)
        return sc_fail(io->err, "not a sparsecnn model file, no 'format' attribute (%s)", io->path);
    char *fmt = mio_str_read(io, io->file, "/", "format", 1);
    if (!fmt) return -1;
    int ok = !strcmp(fmt, MODEL_FORMAT);
    if (!ok) sc_fail(io->err, "not a sparsecnn model file, format is '%s' (%s)", fmt, io->path);
    free(fmt);
    if (!ok) return -1;
    int ver = 0;
    SC_TRY(mio_attr_read(io, io->file, "/", "format_version", H5T_NATIVE_INT, 1, &ver));
    if (ver != MODEL_FORMAT_VERSION)
        return sc_fail(io->err, "unsupported model format version %d, this build reads %d (%s)",
                       ver, MODEL_FORMAT_VERSION, io->path);
    return 0;
}

// Reads /net/input_mean and /net/input_std (finite; std positive).
static int mio_input_norm_read(mio *io, hid_t g, net *nt) {
    hsize_t three[1] = {3};
    SC_TRY(mio_dset_read(io, g, "/net", "input_mean", H5T_NATIVE_FLOAT, 1, three, nt->in_mean));
    SC_TRY(mio_dset_read(io, g, "/net", "input_std", H5T_NATIVE_FLOAT, 1, three, nt->in_std));
    SC_TRY(mio_finite_check(io, "/net", "input_mean", nt->in_mean, 3));
    SC_TRY(mio_finite_check(io, "/net", "input_std", nt->in_std, 3));
    for (int c = 0; c < 3; c++)
        if (!(nt->in_std[c] > 0))
            return sc_fail(io->err, "%s: /net/input_std[%d] = %g, must be positive", io->path, c,
                           nt->in_std[c]);
    return 0;
}

// Fails when /net/description is a built-in architecture's text (its first
// line "# NAME (sparsecnn built-in)") under another name than the arch
// attribute, or claims the arch's name but differs from its text.
static int mio_arch_check(mio *io, const char *arch, const char *desc) {
    char name[64];
    if (sscanf(desc, "# %63s (sparsecnn built-in)", name) != 1 ||
        !strstr(desc, "(sparsecnn built-in)"))
        return 0;
    int same = !strcmp(name, arch);
    if (same) {
        char *want = net_arch_desc(arch, NULL);
        same = want && !strcmp(want, desc);
        free(want);
    }
    if (same) return 0;
    return sc_fail(io->err, "arch attribute '%s' disagrees with /net/description (built-in %s) "
                            "(%s)", arch, name, io->path);
}

// Reads the root attributes and /net, and rebuilds the graph.
static net *mio_net_build(mio *io, char *dataset, size_t dslen) {
    int dims[4];  // classes, in_c, in_h, in_w
    const char *names[4] = {"classes", "in_c", "in_h", "in_w"};
    for (int i = 0; i < 4; i++) {
        if (mio_attr_read(io, io->file, "/", names[i], H5T_NATIVE_INT, 1, &dims[i]) != 0)
            return NULL;
        if (dims[i] <= 0 || dims[i] > (1 << 20)) {
            sc_fail(io->err, "bad %s %d (%s)", names[i], dims[i], io->path);
            return NULL;
        }
    }
    char *arch = mio_str_read(io, io->file, "/", "arch", 1);
    char *ds = arch ? mio_str_read(io, io->file, "/", "dataset", 1) : NULL;
    hid_t g = ds ? h5io_group_open(io, io->file, "/", "net") : -1;
    char *desc = g >= 0 ? mio_str_read(io, g, "/net", "description", 0) : NULL;
    net *nt = NULL;
    if (desc && strlen(ds) >= dslen) {
        sc_fail(io->err, "dataset name too long (%s)", io->path);
    } else if (desc && mio_arch_check(io, arch, desc) != 0) {
        // error filled
    } else if (desc) {
        snprintf(dataset, dslen, "%s", ds);
        nt = net_from_desc(arch, desc, dims[1], dims[2], dims[3], dims[0], io->err);
        if (!nt) sc_wrap(io->err, "bad network description in %s", io->path);
    }
    if (nt && mio_input_norm_read(io, g, nt) != 0) {
        net_free(nt);
        nt = NULL;
    }
    int rc = 0;
    H5IO_CLOSE(io, H5Gclose, g, rc);
    if (rc != 0) {
        net_free(nt);
        nt = NULL;
    }
    free(arch);
    free(ds);
    free(desc);
    return nt;
}

// Reads /state attributes into meta.
static int mio_state_attrs_read(mio *io, hid_t g, model_meta *m) {
    long long step = 0;
    SC_TRY(mio_attr_read(io, g, "/state", "epoch", H5T_NATIVE_INT, 1, &m->epoch));
    SC_TRY(mio_attr_read(io, g, "/state", "epochs_total", H5T_NATIVE_INT, 1, &m->epochs_total));
    SC_TRY(mio_attr_read(io, g, "/state", "step", H5T_NATIVE_LLONG, 1, &step));
    SC_TRY(mio_attr_read(io, g, "/state", "seed", H5T_NATIVE_UINT64, 1, &m->seed));
    SC_TRY(mio_attr_read(io, g, "/state", "rng", H5T_NATIVE_UINT64, 4, m->rng_state.s));
    SC_TRY(mio_attr_read(io, g, "/state", "val_accuracy", H5T_NATIVE_DOUBLE, 1,
                         &m->val_accuracy));
    SC_TRY(mio_attr_read(io, g, "/state", "test_accuracy", H5T_NATIVE_DOUBLE, 1,
                         &m->test_accuracy));
    m->step = (long)step;
    htri_t ex = H5Lexists(g, "config", H5P_DEFAULT);
    if (ex < 0) return h5io_fail(io, "H5Lexists(config)", __FILE__, __LINE__);
    if (ex > 0 && !(m->config = mio_str_read(io, g, "/state", "config", 0))) return -1;
    return 0;
}

// Reads /history into meta.
static int mio_history_read(mio *io, model_meta *m) {
    hid_t d = h5io_dset_open(io, io->file, "/", "history");
    if (d < 0) return -1;
    int rc = -1;
    hssize_t n = 0;
    char **h = h5io_strs_read(io, d, 0, "/history", &n);
    if (h) {
        m->history = h;
        m->nhistory = (int)n;
        rc = 0;
    }
    H5IO_CLOSE(io, H5Dclose, d, rc);
    return rc;
}

// Reads /optimizer/momentum into meta when the file has it.
static int mio_momentum_read(mio *io, const net *nt, model_meta *m) {
    htri_t ex = H5Lexists(io->file, "optimizer", H5P_DEFAULT);
    if (ex < 0) return h5io_fail(io, "H5Lexists(optimizer)", __FILE__, __LINE__);
    if (ex == 0) return 0;
    hid_t g = h5io_group_open(io, io->file, "/", "optimizer");
    if (g < 0) return -1;
    int rc = -1;
    m->momentum = calloc(nt->nparam ? nt->nparam : 1, sizeof(float));  // (nparam)
    if (!m->momentum) sc_fail(io->err, "out of memory (%s)", io->path);
    else rc = mio_group_read(io, g, "/optimizer", "momentum", MG_MOMENTUM, (net *)nt,
                             m->momentum);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// Reads the optional root attribute `pattern` (absent: unstructured, "").
static int mio_pattern_read(mio *io, model_meta *m) {
    if (H5Aexists(io->file, "pattern") <= 0) return 0;
    char *p = mio_str_read(io, io->file, "/", "pattern", 1);
    if (!p) return -1;
    snprintf(m->pattern, sizeof m->pattern, "%s", p);
    free(p);
    return 0;
}

// Reads the training state: /state, /history and momentum.
static int mio_meta_read(mio *io, const net *nt, model_meta *m) {
    hid_t g = h5io_group_open(io, io->file, "/", "state");
    if (g < 0) return -1;
    int rc = mio_state_attrs_read(io, g, m);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    SC_TRY(rc);
    SC_TRY(mio_history_read(io, m));
    SC_TRY(mio_pattern_read(io, m));
    return mio_momentum_read(io, nt, m);
}

// Reads the whole model from the open file.
static net *mio_read_all(mio *io, model_meta *m) {
    if (mio_format_check(io) != 0) return NULL;
    char dataset[sizeof m->dataset];
    net *nt = mio_net_build(io, dataset, sizeof dataset);
    if (!nt) return NULL;
    for (size_t i = 0; i < nt->nparam; i++) nt->mask[i] = 1.0f;
    int rc = mio_group_read(io, io->file, "/", "params", MG_PARAMS, nt, NULL);
    if (rc == 0) rc = mio_group_read(io, io->file, "/", "masks", MG_MASKS, nt, NULL);
    if (rc == 0) rc = mio_group_read(io, io->file, "/", "buffers", MG_BUFFERS, nt, NULL);
    if (rc == 0 && m) {
        snprintf(m->dataset, sizeof m->dataset, "%s", dataset);
        rc = mio_meta_read(io, nt, m);
    }
    if (rc != 0) {
        net_free(nt);
        return NULL;
    }
    return nt;
}

// Reads a model file; fills meta when not NULL (meta is re-initialised
// first and left empty on failure).
net *model_load(const char *path, model_meta *meta, sc_err *err) {
    if (meta) model_meta_init(meta);
    mio io = {.path = path, .err = err, .file = -1, .kind = "model file"};
    h5io_quiet q;
    h5io_quiet_begin(&q);
    net *nt = NULL;
    io.file = h5io_file_open(&io);
    if (io.file >= 0) {
        nt = mio_read_all(&io, meta);
        int rc = 0;
        H5IO_CLOSE(&io, H5Fclose, io.file, rc);
        if (rc != 0) {
            net_free(nt);
            nt = NULL;
        }
    }
    h5io_quiet_end(&q);
    if (!nt && meta) model_meta_free(meta);
    return nt;
}
