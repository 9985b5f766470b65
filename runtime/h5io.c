// Shared HDF5 plumbing of the model-I/O files (see runtime/h5io.h).
#define _GNU_SOURCE  // program_invocation_short_name, for the notice
#include "h5io.h"

#include "atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static int h5io_input_check(h5io *io, const char *kind, int notice, int *sealed);

// --- errors -----------------------------------------------------------------

typedef struct {
    char *buf;
    size_t len;
} h5io_msg;

// Keeps the innermost HDF5 error description (the most specific one) on one
// line; a system error's long description ("file write failed: time = ...,
// error message = 'No space left on device', ...") is cut to its message.
static herr_t h5io_walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
    h5io_msg *m = data;
    if (n != 0 || !e->desc) return 0;
    const char *sys = strstr(e->desc, "error message = '");
    const char *colon = strchr(e->desc, ':');
    if (sys && colon && colon < sys) {
        sys += strlen("error message = '");
        snprintf(m->buf, m->len, "%.*s: %.*s", (int)(colon - e->desc), e->desc,
                 (int)strcspn(sys, "'"), sys);
    } else {
        snprintf(m->buf, m->len, "%s", e->desc);
    }
    for (char *p = m->buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
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
    h5io_init();
    if (H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data) < 0) q->func = NULL, q->data = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

// Restores HDF5's previous error printing.
void h5io_quiet_end(const h5io_quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

// --- types ------------------------------------------------------------------

// Creates a fixed-length, null-terminated UTF-8 string type of size bytes.
hid_t h5io_str_type(h5io *io, size_t size) {
    hid_t t = -1;
    H5IO_CHECK(io, t = H5Tcopy(H5T_C_S1));
    H5IO_CHECK(io, H5Tset_size(t, size));
    H5IO_CHECK(io, H5Tset_strpad(t, H5T_STR_NULLTERM));
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

// Writes a fixed-length string attribute.
int h5io_attr_str(h5io *io, hid_t obj, const char *name, const char *value) {
    hid_t t = h5io_str_type(io, strlen(value) + 1);
    if (t < 0) return -1;
    int rc = h5io_attr_write(io, obj, name, t, t, 0, value);
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

// Writes n strings as a 1-D dataset (ndim 1) or one string as a scalar
// (ndim 0), packed into fixed-length slots of the longest one's size.
int h5io_dset_strs(h5io *io, hid_t loc, const char *name, int ndim, int n,
                   const char *const *strs) {
    size_t size = 1;
    for (int i = 0; i < n; i++)
        if (strlen(strs[i]) + 1 > size) size = strlen(strs[i]) + 1;
    char *packed = calloc(n > 0 ? (size_t)n : 1, size);
    if (!packed) return sc_fail(io->err, "out of memory (%s)", io->path);
    for (int i = 0; i < n; i++) memcpy(packed + (size_t)i * size, strs[i], strlen(strs[i]));
    hid_t t = h5io_str_type(io, size);
    int rc = -1;
    if (t >= 0) {
        hsize_t dims[1] = {(hsize_t)n};
        rc = h5io_dset_write(io, loc, name, t, t, ndim, dims, packed);
        H5IO_CLOSE(io, H5Tclose, t, rc);
    }
    free(packed);
    return rc;
}

// Creates a group; returns its id or -1.
hid_t h5io_group_create(h5io *io, hid_t loc, const char *name) {
    hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) h5io_fail(io, "H5Gcreate2", __FILE__, __LINE__);
    return g;
}

// Writes the root attributes shared by model and export files.
int h5io_root_attrs(h5io *io, const char *format, int version, const net *nt, const char *dataset) {
    hid_t r = io->file;
    SC_TRY(h5io_attr_str(io, r, "format", format));
    SC_TRY(h5io_attr_int(io, r, "format_version", version));
    SC_TRY(h5io_attr_str(io, r, "arch", nt->arch));
    SC_TRY(h5io_attr_str(io, r, "dataset", dataset));
    SC_TRY(h5io_attr_int(io, r, "classes", nt->classes));
    SC_TRY(h5io_attr_int(io, r, "in_c", nt->in_c));
    SC_TRY(h5io_attr_int(io, r, "in_h", nt->in_h));
    return h5io_attr_int(io, r, "in_w", nt->in_w);
}

// Writes /net: description and input normalisation.
int h5io_net_write(h5io *io, const net *nt) {
    hid_t g = h5io_group_create(io, io->file, "net");
    if (g < 0) return -1;
    hsize_t three[1] = {3};
    const char *desc = nt->desc ? nt->desc : "";
    int rc = h5io_dset_strs(io, g, "description", 0, 1, &desc);
    if (rc == 0)
        rc = h5io_dset_write(io, g, "input_mean", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, three, nt->in_mean);
    if (rc == 0)
        rc = h5io_dset_write(io, g, "input_std", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, three, nt->in_std);
    H5IO_CLOSE(io, H5Gclose, g, rc);
    return rc;
}

// --- reading ----------------------------------------------------------------

// Checks that the file is a regular, intact HDF5 file, then opens it read-only.
hid_t h5io_file_open(h5io *io) { return h5io_file_open_as(io, 1); }

// As h5io_file_open, with or without the notice for a file without a checksum.
hid_t h5io_file_open_as(h5io *io, int notice) {
    const char *kind = io->kind ? io->kind : "HDF5 file";
    h5io_init();
    int sealed = 0;
    if (h5io_input_check(io, kind, notice, &sealed) != 0) return -1;
    htri_t is_hdf5 = H5Fis_hdf5(io->path);
    if (is_hdf5 > 0 && sealed < 0) {  // a user block, but not a readable checksum block
        sc_fail(io->err, "file damaged: its checksum block is unreadable (%s)", io->path);
        return -1;
    }
    if (is_hdf5 <= 0) {
        struct stat st;
        long long size = stat(io->path, &st) == 0 ? (long long)st.st_size : -1;
        sc_fail(io->err, "not an HDF5 file (%s, %lld bytes)", io->path, size);
        return -1;
    }
    hid_t fapl = -1, f = -1;
    int rc = 0;
    H5IO_CHECK(io, fapl = H5Pcreate(H5P_FILE_ACCESS));
    H5IO_CHECK(io, H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
    f = H5Fopen(io->path, H5F_ACC_RDONLY, fapl);
    io->checked = f < 0 ? 0 : sealed == 1 ? 1 : 2;
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

// --- reading strings ----------------------------------------------------------

// Most bytes of strings one attribute or dataset may hold (a description of
// the most layers a net may have is well under 1 MiB).
#define H5IO_STR_MAX (64u << 20)

// Frees n strings and their array.
void h5io_strs_free(char **s, hssize_t n) {
    if (!s) return;
    for (hssize_t i = 0; i < n; i++) free(s[i]);
    free(s);
}

// Reads n fixed-length strings of file type ftype into out (copies).
static int h5io_strs_fixed(h5io *io, hid_t o, int is_attr, hid_t ftype, hssize_t n,
                           const char *what, char **out) {
    size_t sz = H5Tget_size(ftype);
    if (sz == 0 || sz > H5IO_STR_MAX / (size_t)n)
        return sc_fail(io->err, "%s: %lld strings of %zu bytes, more than %u MiB (%s)", what,
                       (long long)n, sz, H5IO_STR_MAX >> 20, io->path);
    char *raw = calloc((size_t)n, sz);
    if (!raw) return sc_fail(io->err, "out of memory (%s)", io->path);
    hid_t mt = -1;
    int rc = -1;
    H5IO_CHECK(io, mt = H5Tcopy(ftype));
    H5IO_CHECK(io, H5Tset_strpad(mt, H5T_STR_NULLPAD));  // a full slot keeps its last byte
    if (is_attr) H5IO_CHECK(io, H5Aread(o, mt, raw));
    else H5IO_CHECK(io, H5Dread(o, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw));
    rc = 0;
    for (hssize_t i = 0; i < n && rc == 0; i++) {
        out[i] = strndup(raw + (size_t)i * sz, sz);
        if (!out[i]) rc = sc_fail(io->err, "out of memory (%s)", io->path);
    }
fail:
    H5IO_CLOSE(io, H5Tclose, mt, rc);
    free(raw);
    return rc;
}

// Reads n variable-length strings of file type ftype into out (copies);
// refused unless the file went through the checksum check at open.
static int h5io_strs_vlen(h5io *io, hid_t o, int is_attr, hid_t ftype, hssize_t n,
                          const char *what, char **out) {
    if (!io->checked)
        return sc_fail(io->err, "%s is a variable-length string in a file not checked at open "
                                "(%s)", what, io->path);
    if ((size_t)n > H5IO_STR_MAX / sizeof(char *))
        return sc_fail(io->err, "%s: %lld strings, too many (%s)", what, (long long)n, io->path);
    char **raw = calloc((size_t)n, sizeof *raw);
    if (!raw) return sc_fail(io->err, "out of memory (%s)", io->path);
    hid_t mt = -1;
    int rc = -1;
    H5T_cset_t cs;
    H5IO_CHECK(io, cs = H5Tget_cset(ftype));
    H5IO_CHECK(io, mt = H5Tcopy(H5T_C_S1));
    H5IO_CHECK(io, H5Tset_size(mt, H5T_VARIABLE));
    H5IO_CHECK(io, H5Tset_cset(mt, cs));
    if (is_attr) H5IO_CHECK(io, H5Aread(o, mt, raw));
    else H5IO_CHECK(io, H5Dread(o, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw));
    rc = 0;
    for (hssize_t i = 0; i < n; i++) {
        out[i] = strdup(raw[i] ? raw[i] : "");
        if (!out[i] && rc == 0) rc = sc_fail(io->err, "out of memory (%s)", io->path);
        if (raw[i]) H5free_memory(raw[i]);
    }
fail:
    free(raw);
    H5IO_CLOSE(io, H5Tclose, mt, rc);
    return rc;
}

// Reads every string of an attribute or dataset (fixed length, or variable
// length in a checked file) into a new array; *n receives the count.
char **h5io_strs_read(h5io *io, hid_t o, int is_attr, const char *what, hssize_t *n) {
    hid_t t = -1, sp = -1;
    char **out = NULL;
    int rc = -1;
    *n = 0;
    H5IO_CHECK(io, t = is_attr ? H5Aget_type(o) : H5Dget_type(o));
    H5IO_CHECK(io, sp = is_attr ? H5Aget_space(o) : H5Dget_space(o));
    if (H5Tget_class(t) != H5T_STRING) {
        sc_fail(io->err, "%s is not a string (%s)", what, io->path);
        goto fail;
    }
    H5IO_CHECK(io, *n = H5Sget_simple_extent_npoints(sp));
    if ((size_t)*n >= H5IO_STR_MAX) {
        sc_fail(io->err, "%s: %lld strings, too many (%s)", what, (long long)*n, io->path);
        goto fail;
    }
    out = calloc((size_t)*n + 1, sizeof *out);
    if (!out) {
        sc_fail(io->err, "out of memory (%s)", io->path);
        goto fail;
    }
    htri_t vl;
    H5IO_CHECK(io, vl = H5Tis_variable_str(t));
    rc = 0;
    if (*n > 0)
        rc = vl ? h5io_strs_vlen(io, o, is_attr, t, *n, what, out)
                : h5io_strs_fixed(io, o, is_attr, t, *n, what, out);
fail:
    H5IO_CLOSE(io, H5Sclose, sp, rc);
    H5IO_CLOSE(io, H5Tclose, t, rc);
    if (rc != 0) {
        h5io_strs_free(out, out ? *n : 0);
        return NULL;
    }
    return out;
}

// Reads the one string of an attribute or dataset into a new buffer.
char *h5io_str_read(h5io *io, hid_t o, int is_attr, const char *what) {
    hssize_t n = 0;
    char **s = h5io_strs_read(io, o, is_attr, what, &n);
    if (!s) return NULL;
    if (n != 1) {
        sc_fail(io->err, "%s holds %lld strings, expected 1 (%s)", what, (long long)n, io->path);
        h5io_strs_free(s, n);
        return NULL;
    }
    char *one = s[0];
    free(s);
    return one;
}

// --- checksummed, atomic files -----------------------------------------------
// A written file starts with a 512-byte HDF5 user block (which libhdf5 and
// h5py skip) holding "sparsecnn-crc32 <crc> <bytes>": the CRC-32 of every
// byte after the block and their count. Readers verify it before libhdf5
// parses anything, so a damaged file never reaches the library.

#define H5IO_UB 512
#define H5IO_UB_MAGIC "sparsecnn-crc32 "
#define H5IO_MIB (1u << 20)

// Makes libhdf5 install no exit handler (it crashes on ids left by a failed
// close); called before any other HDF5 call of a tool.
void h5io_init(void) {
    (void)H5dont_atexit();  // fails harmlessly on every call after the first
}

// Writes the checksum of a closed HDF5 file (with a user block) into its block.
int h5io_seal(const char *path, sc_err *err) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return sc_fail(err, "cannot reopen (%s, %s)", path, strerror(errno));
    uint32_t crc;
    unsigned long long len;
    int rc = sc_fd_crc32(fd, H5IO_UB, path, &crc, &len, err);
    char ub[64] = {0};
    int n = snprintf(ub, sizeof ub, H5IO_UB_MAGIC "%08x %llu\n", crc, len);
    if (rc == 0 && pwrite(fd, ub, (size_t)n, 0) != n)
        rc = sc_fail(err, "cannot write checksum (%s, %s)", path, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = sc_fail(err, "cannot write checksum (%s, %s)", path, strerror(errno));
    return rc;
}

// Reads an n-byte little-endian unsigned field (n <= 8).
static uint64_t h5io_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

// Checks the superblock of an HDF5 file without a checksum (read unverified)
// before libhdf5 parses it: version 0-3, addresses and lengths of 2, 4 or 8
// bytes, base address 0, end-of-file address within the file's size bytes,
// the root group's object header below it, and no driver information or
// free-space block (v0/1) or an extension below it (v2/3), as every HDF5
// writer leaves them. Others are refused: libhdf5 1.10 sizes buffers from
// these fields before it checks them (fuzzing found 130-byte files on which
// it allocated 2-4 GB).
static int h5io_superblock_check(const unsigned char *sb, ssize_t got, unsigned long long size,
                                 const char *path, sc_err *err) {
    int version = got > 8 ? sb[8] : -1;
    int so = version < 0 ? 0 : version <= 1 ? sb[13] : sb[9];
    int sl = version < 0 ? 0 : version <= 1 ? sb[14] : sb[10];
    int ok_size = (so == 2 || so == 4 || so == 8) && (sl == 2 || sl == 4 || sl == 8);
    if (got < 16 || version > 3 || !ok_size)
        return sc_fail(err, "HDF5 file damaged or truncated (%s, superblock version %d with "
                            "%d-byte addresses and %d-byte lengths)", path, version, so, sl);
    const unsigned char *a = sb + (version == 0 ? 24 : version == 1 ? 28 : 12);
    int naddr = version <= 1 ? 6 : 4;  // v0/1 up to the root entry's header address
    uint64_t undef = so == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * so)) - 1, f[6];
    if (a + naddr * so > sb + got)
        return sc_fail(err, "HDF5 file damaged or truncated (%s, short superblock)", path);
    for (int i = 0; i < naddr; i++) f[i] = h5io_le(a + i * so, so);
    uint64_t eof = f[2], root = version <= 1 ? f[5] : f[3];
    int extra_ok = version <= 1 ? f[1] == undef && f[3] == undef : f[1] == undef || f[1] < eof;
    if (f[0] != 0 || eof > size || root >= eof || !extra_ok)
        return sc_fail(err, "HDF5 file damaged or truncated (%s, superblock addresses: base %llu, "
                            "end of file %llu of %llu bytes, root %llu)", path,
                       (unsigned long long)f[0], (unsigned long long)eof, size,
                       (unsigned long long)root);
    return 0;
}

// Verifies an open file's checksum; *sealed = 1 when it has one, 0 for an
// HDF5 file without one (an older version's), -1 for anything else.
static int h5io_verify(int fd, const char *path, int *sealed, sc_err *err) {
    char ub[128] = {0};
    ssize_t got = pread(fd, ub, sizeof ub - 1, 0);
    if (got < 0) return sc_fail(err, "cannot read (%s, %s)", path, strerror(errno));
    *sealed = got >= (ssize_t)strlen(H5IO_UB_MAGIC) && !memcmp(ub, H5IO_UB_MAGIC, strlen(H5IO_UB_MAGIC));
    if (!*sealed) *sealed = got >= 8 && !memcmp(ub, "\211HDF\r\n\032\n", 8) ? 0 : -1;
    struct stat st;
    if (*sealed == 0 && fstat(fd, &st) != 0)
        return sc_fail(err, "cannot stat (%s, %s)", path, strerror(errno));
    if (*sealed == 0)
        return h5io_superblock_check((const unsigned char *)ub, got,
                                     (unsigned long long)st.st_size, path, err);
    if (*sealed != 1) return 0;
    unsigned want_crc = 0;
    unsigned long long want_len = 0, len;
    uint32_t crc;
    if (sscanf(ub + strlen(H5IO_UB_MAGIC), "%8x %llu", &want_crc, &want_len) != 2)
        return sc_fail(err, "damaged checksum block (%s)", path);
    SC_TRY(sc_fd_crc32(fd, H5IO_UB, path, &crc, &len, err));
    if (len != want_len)
        return sc_fail(err, "file damaged or truncated: %llu bytes where its checksum block "
                            "says %llu (%s)", len + H5IO_UB, want_len + H5IO_UB, path);
    if (crc != want_crc)
        return sc_fail(err, "file damaged: checksum mismatch (%s, crc32 %08x, stored %08x)", path,
                       crc, want_crc);
    return 0;
}

// Checks that path is a regular file with a valid checksum (or none: an
// older file, loaded with a notice on stderr).
static int h5io_input_check(h5io *io, const char *kind, int notice, int *sealed) {
    int fd = sc_input_open(io->path, kind, io->err);
    if (fd < 0) return -1;
    int rc = h5io_verify(fd, io->path, sealed, io->err);
    close(fd);
    if (rc == 0 && *sealed == 0 && notice)
        fprintf(stderr, "%s: notice: %s has no checksum (written by an older version); "
                        "loading it unverified\n", program_invocation_short_name, io->path);
    return rc;
}

// Creates path's temporary file with a user block (file close degree
// strong; HDF5 1.10 object formats, whose chunk indexes of small filtered
// datasets take a fraction of the 1.8 B-trees' bytes).
static int h5io_create(h5io *io, const char *tmp) {
    hid_t fapl = -1, fcpl = -1;
    int rc = -1;
    H5IO_CHECK(io, fapl = H5Pcreate(H5P_FILE_ACCESS));
    H5IO_CHECK(io, H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
    H5IO_CHECK(io, H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST));
    H5IO_CHECK(io, fcpl = H5Pcreate(H5P_FILE_CREATE));
    H5IO_CHECK(io, H5Pset_userblock(fcpl, H5IO_UB));
    H5IO_CHECK(io, io->file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Pclose, fcpl, rc);
    H5IO_CLOSE(io, H5Pclose, fapl, rc);
    return rc;
}

// Creates the temporary file, runs the writer, flushes and closes it.
static int h5io_save_tmp(h5io *io, const char *tmp, h5io_writer fn, const void *ctx) {
    int rc = -1;
    io->file = -1;
    if (h5io_create(io, tmp) != 0) goto fail;
    if (fn(io, ctx) != 0) goto fail;
    H5IO_CHECK(io, H5Fflush(io->file, H5F_SCOPE_GLOBAL));
    rc = 0;
fail:
    H5IO_CLOSE(io, H5Fclose, io->file, rc);
    return rc;
}

// Writes an HDF5 file atomically through fn, with a checksum block.
int h5io_file_save(const char *path, h5io_writer fn, const void *ctx, sc_err *err) {
    h5io_init();
    sc_atomic a;
    SC_TRY(sc_atomic_begin(&a, path, err));
    h5io io = {.path = path, .err = err, .file = -1};
    h5io_quiet q;
    h5io_quiet_begin(&q);
    int rc = h5io_save_tmp(&io, a.tmp, fn, ctx);
    h5io_quiet_end(&q);
    if (rc == 0) rc = h5io_seal(a.tmp, err);
    return sc_atomic_end(&a, rc, err);
}
