// Shared HDF5 plumbing of the model-I/O files (see runtime/h5io.h).
#include "h5io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// --- errors -----------------------------------------------------------------

typedef struct {
    char *buf;
    size_t len;
} h5io_msg;

// Keeps the innermost HDF5 error description (the most specific one).
static herr_t h5io_walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
    h5io_msg *m = data;
    if (n == 0 && e->desc) snprintf(m->buf, m->len, "%s", e->desc);
    return 0;
}

// Copies HDF5's innermost error message into buf.
void h5io_last_message(char *buf, size_t len) {
    if (len == 0) return;
    buf[0] = '\0';
    h5io_msg m = {buf, len};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5io_walk_cb, &m);
}

// Fills the error with the failed call, the file, HDF5's message and the source line.
int h5io_fail(h5io *io, const char *expr, const char *src, int line) {
    char h5msg[160];
    h5io_last_message(h5msg, sizeof h5msg);
    return sc_fail(io->err, "HDF5 call failed: %s (%s, HDF5: %s, at %s:%d)", expr, io->path,
                   h5msg[0] ? h5msg : "no details", src, line);
}

// Stops HDF5 from printing its error stack.
void h5io_quiet_begin(h5io_quiet *q) {
    if (H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data) < 0) q->func = NULL, q->data = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

// Restores HDF5's previous error printing.
void h5io_quiet_end(const h5io_quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

// --- types ------------------------------------------------------------------

// Creates a variable-length UTF-8 string type.
hid_t h5io_str_type(h5io *io) {
    hid_t t = -1;
    H5IO_CHECK(io, t = H5Tcopy(H5T_C_S1));
    H5IO_CHECK(io, H5Tset_size(t, H5T_VARIABLE));
    H5IO_CHECK(io, H5Tset_cset(t, H5T_CSET_UTF8));
    return t;
fail:
    if (t >= 0) H5Tclose(t);
    return -1;
}

// Creates the IEEE half-precision type: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
hid_t h5io_half_type(h5io *io) {
    hid_t t = -1;
    H5IO_CHECK(io, t = H5Tcopy(H5T_IEEE_F32LE));
    H5IO_CHECK(io, H5Tset_fields(t, 15, 10, 5, 0, 10));
    H5IO_CHECK(io, H5Tset_size(t, 2));
    H5IO_CHECK(io, H5Tset_ebias(t, 15));
    return t;
fail:
    if (t >= 0) H5Tclose(t);
    return -1;
}

// --- attributes -------------------------------------------------------------

// Writes an attribute of n values (n == 0: a scalar).
int h5io_attr_write(h5io *io, hid_t obj, const char *name, hid_t ftype, hid_t mtype, int n,
                    const void *buf) {
    hid_t sp = -1, a = -1;
    int rc = -1;
    hsize_t dims[1] = {(hsize_t)n};
    H5IO_CHECK(io, sp = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL));
    H5IO_CHECK(io, a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT));
    H5IO_CHECK(io, H5Awrite(a, mtype, buf));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Aclose, a, rc);
    H5IO_CLOSE(io, H5Sclose, sp, rc);
    return rc;
}

// Writes a string attribute.
int h5io_attr_str(h5io *io, hid_t obj, const char *name, const char *value) {
    hid_t t = h5io_str_type(io);
    if (t < 0) return -1;
    int rc = h5io_attr_write(io, obj, name, t, t, 0, &value);
    H5IO_CLOSE(io, H5Tclose, t, rc);
    return rc;
}

// Writes a 32-bit integer attribute.
int h5io_attr_int(h5io *io, hid_t obj, const char *name, int v) {
    return h5io_attr_write(io, obj, name, H5T_STD_I32LE, H5T_NATIVE_INT, 0, &v);
}

// Writes a 64-bit integer attribute.
int h5io_attr_i64(h5io *io, hid_t obj, const char *name, long long v) {
    return h5io_attr_write(io, obj, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, 0, &v);
}

// --- datasets ---------------------------------------------------------------

// Writes a dataset of ndim dims (ndim == 0: a scalar).
int h5io_dset_write(h5io *io, hid_t loc, const char *name, hid_t ftype, hid_t mtype, int ndim,
                    const hsize_t *dims, const void *buf) {
    hid_t sp = -1, d = -1;
    int rc = -1;
    H5IO_CHECK(io, sp = ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(ndim, dims, NULL));
    H5IO_CHECK(io, d = H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    hssize_t npts;
    H5IO_CHECK(io, npts = H5Sget_simple_extent_npoints(sp));
    if (npts > 0) H5IO_CHECK(io, H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Dclose, d, rc);
    H5IO_CLOSE(io, H5Sclose, sp, rc);
    return rc;
}

// Writes n strings as a 1-D dataset (ndim 1) or one string as a scalar (ndim 0).
int h5io_dset_strs(h5io *io, hid_t loc, const char *name, int ndim, int n,
                   const char *const *strs) {
    hid_t t = h5io_str_type(io);
    if (t < 0) return -1;
    hsize_t dims[1] = {(hsize_t)n};
    int rc = h5io_dset_write(io, loc, name, t, t, ndim, dims, strs);
    H5IO_CLOSE(io, H5Tclose, t, rc);
    return rc;
}

// Creates a group; returns its id or -1.
hid_t h5io_group_create(h5io *io, hid_t loc, const char *name) {
    hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) h5io_fail(io, "H5Gcreate2", __FILE__, __LINE__);
    return g;
}

// --- reading ----------------------------------------------------------------

// Checks that the file is a readable HDF5 file, then opens it read-only.
hid_t h5io_file_open(h5io *io) {
    const char *kind = io->kind ? io->kind : "HDF5 file";
    struct stat st;
    if (stat(io->path, &st) != 0) {
        sc_fail(io->err, "cannot read %s (%s, %s)", kind, io->path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        sc_fail(io->err, "%s is a directory (%s)", kind, io->path);
        return -1;
    }
    if (H5Fis_hdf5(io->path) <= 0) {
        sc_fail(io->err, "not an HDF5 file (%s, %lld bytes)", io->path, (long long)st.st_size);
        return -1;
    }
    hid_t fapl = -1, f = -1;
    int rc = 0;
    H5IO_CHECK(io, fapl = H5Pcreate(H5P_FILE_ACCESS));
    H5IO_CHECK(io, H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
    f = H5Fopen(io->path, H5F_ACC_RDONLY, fapl);
    if (f < 0) {
        char h5msg[160];
        h5io_last_message(h5msg, sizeof h5msg);
        sc_fail(io->err, "HDF5 file damaged or truncated (%s, HDF5: %s)", io->path,
                h5msg[0] ? h5msg : "cannot open");
    }
fail:
    H5IO_CLOSE(io, H5Pclose, fapl, rc);
    return rc == 0 ? f : -1;
}

// Joins a group path and a name for messages: ("/", "a") -> "/a".
const char *h5io_join(char *buf, size_t len, const char *where, const char *name) {
    size_t w = strlen(where);
    snprintf(buf, len, "%s%s%s", where, w && where[w - 1] == '/' ? "" : "/", name);
    return buf;
}

// Fails unless loc has a link called name.
int h5io_need_link(h5io *io, hid_t loc, const char *where, const char *name) {
    htri_t ex = H5Lexists(loc, name, H5P_DEFAULT);
    if (ex < 0) return h5io_fail(io, "H5Lexists(loc, name, H5P_DEFAULT)", __FILE__, __LINE__);
    if (ex > 0) return 0;
    char full[256];
    return sc_fail(io->err, "%s lacks %s (%s)", io->kind ? io->kind : "HDF5 file",
                   h5io_join(full, sizeof full, where, name), io->path);
}

// Fails unless type is an integer or float type.
int h5io_need_numeric(h5io *io, hid_t type, const char *what) {
    H5T_class_t c = H5Tget_class(type);
    if (c == H5T_NO_CLASS) return h5io_fail(io, "H5Tget_class(type)", __FILE__, __LINE__);
    if (c == H5T_INTEGER || c == H5T_FLOAT) return 0;
    return sc_fail(io->err, "%s is not numeric (%s)", what, io->path);
}

// Opens a group that must exist.
hid_t h5io_group_open(h5io *io, hid_t loc, const char *where, const char *name) {
    if (h5io_need_link(io, loc, where, name) != 0) return -1;
    hid_t g = H5Gopen2(loc, name, H5P_DEFAULT);
    if (g < 0) h5io_fail(io, "H5Gopen2(loc, name, H5P_DEFAULT)", __FILE__, __LINE__);
    return g;
}

// Opens a dataset that must exist.
hid_t h5io_dset_open(h5io *io, hid_t loc, const char *where, const char *name) {
    if (h5io_need_link(io, loc, where, name) != 0) return -1;
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) h5io_fail(io, "H5Dopen2(loc, name, H5P_DEFAULT)", __FILE__, __LINE__);
    return d;
}

// Number of elements of open dataset d, or -1 (error filled).
static hssize_t h5io_dset_npoints(h5io *io, hid_t d) {
    hid_t sp = -1;
    hssize_t n = -1;
    int rc = -1;
    H5IO_CHECK(io, sp = H5Dget_space(d));
    H5IO_CHECK(io, n = H5Sget_simple_extent_npoints(sp));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Sclose, sp, rc);
    return rc ? -1 : n;
}

// Number of elements of a dataset that must exist.
long h5io_dset_len(h5io *io, hid_t loc, const char *where, const char *name) {
    hid_t d = h5io_dset_open(io, loc, where, name);
    if (d < 0) return -1;
    hssize_t n = h5io_dset_npoints(io, d);
    int rc = n < 0 ? -1 : 0;
    H5IO_CLOSE(io, H5Dclose, d, rc);
    return rc ? -1 : (long)n;
}

// Reads open dataset d (where/name) after checking its type (when numeric)
// and that it holds exactly n elements.
static int h5io_dset_read_id(h5io *io, hid_t d, const char *where, const char *name, int numeric,
                             hid_t mtype, size_t n, void *buf) {
    char what[256];
    h5io_join(what, sizeof what, where, name);
    hid_t t = -1;
    int rc = -1;
    if (numeric) {
        H5IO_CHECK(io, t = H5Dget_type(d));
        if (h5io_need_numeric(io, t, what) != 0) goto fail;
    }
    hssize_t got = h5io_dset_npoints(io, d);
    if (got < 0) goto fail;
    if ((size_t)got != n) {
        sc_fail(io->err, "%s holds %lld values, expected %zu (%s)", what, (long long)got, n,
                io->path);
        goto fail;
    }
    if (n > 0) H5IO_CHECK(io, H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Tclose, t, rc);
    return rc;
}

// Opens, checks and reads a dataset, then closes it.
static int h5io_dset_read_as(h5io *io, hid_t loc, const char *where, const char *name,
                             int numeric, hid_t mtype, size_t n, void *buf) {
    hid_t d = h5io_dset_open(io, loc, where, name);
    if (d < 0) return -1;
    int rc = h5io_dset_read_id(io, d, where, name, numeric, mtype, n, buf);
    H5IO_CLOSE(io, H5Dclose, d, rc);
    return rc;
}

// Reads a dataset that must exist and hold exactly n elements.
int h5io_dset_read(h5io *io, hid_t loc, const char *where, const char *name, hid_t mtype,
                   size_t n, void *buf) {
    return h5io_dset_read_as(io, loc, where, name, 0, mtype, n, buf);
}

// Reads a numeric dataset that must exist and hold exactly n elements.
int h5io_dset_read_num(h5io *io, hid_t loc, const char *where, const char *name, hid_t mtype,
                       size_t n, void *buf) {
    return h5io_dset_read_as(io, loc, where, name, 1, mtype, n, buf);
}

// --- atomic replacement -----------------------------------------------------

// Flushes a file or directory to disk.
int h5io_fsync_path(const char *path, int flags, sc_err *err) {
    int fd = open(path, O_RDONLY | flags);
    if (fd < 0) return sc_fail(err, "cannot open for fsync (%s, %s)", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) return sc_fail(err, "fsync failed (%s, %s)", path, strerror(e));
    return 0;
}

// The existing directory of path and a temporary name next to it.
int h5io_atomic_begin(const char *path, const char *suffix, char *dir, char *tmp, size_t len,
                      sc_err *err) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n >= len || snprintf(tmp, len, "%s%s.%ld", path, suffix, (long)getpid()) >= (int)len)
        return sc_fail(err, "path too long (%s)", path);
    if (!slash) snprintf(dir, len, ".");
    else if (n == 0) snprintf(dir, len, "/");
    else snprintf(dir, len, "%.*s", (int)n, path);
    struct stat st;
    if (stat(dir, &st) != 0) return sc_fail(err, "directory does not exist (%s, %s)", dir, path);
    if (!S_ISDIR(st.st_mode)) return sc_fail(err, "not a directory (%s, %s)", dir, path);
    return 0;
}

// fsync tmp, rename it over path, fsync dir; tmp removed on any failure.
int h5io_atomic_end(const char *tmp, const char *path, const char *dir, int rc, sc_err *err) {
    if (rc == 0) rc = h5io_fsync_path(tmp, 0, err);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = sc_fail(err, "cannot rename temporary file (%s, %s)", path, strerror(errno));
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    return h5io_fsync_path(dir, O_DIRECTORY, err);
}
