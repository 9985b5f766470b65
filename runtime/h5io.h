// Shared HDF5 plumbing of the model-I/O files (runtime/model_io.c,
// runtime/quant_io.c, runtime/sparse_model.c, export/export_io.c): error
// reporting that names the file and HDF5's own message, quiet error stacks,
// string and half-precision types, attribute and dataset writers, checked
// dataset readers, fsync for atomic replacement. Only those files include it.
#ifndef SC_H5IO_H
#define SC_H5IO_H

#include <hdf5.h>

#include "error.h"
#include "net.h"

typedef struct {
    const char *path;  // the file, named in every message
    sc_err *err;
    hid_t file;
    const char *kind;  // readers: "model file" or "export file", as in "<kind> lacks /a/b"
    int checked;       // set by h5io_file_open_as: 1 the checksum verified, 2 an older file
                       // without one; 0 (never opened so): variable-length strings refused
} h5io;

// Copies HDF5's innermost error message of the current stack into buf ('' when none).
void h5io_last_message(char *buf, size_t len);

// Fills io->err with the failed call, the file, HDF5's innermost message and
// the source line; returns -1.
int h5io_fail(h5io *io, const char *expr, const char *src, int line);

// Jumps to the function's fail label when an HDF5 call returns < 0.
#define H5IO_CHECK(io, expr)                              \
    do {                                                  \
        if ((expr) < 0) {                                 \
            h5io_fail((io), #expr, __FILE__, __LINE__);   \
            goto fail;                                    \
        }                                                 \
    } while (0)

// Closes an HDF5 id when valid; a failed close turns rc into -1.
#define H5IO_CLOSE(io, fn, id, rc)                                             \
    do {                                                                       \
        if ((id) >= 0 && fn(id) < 0 && (rc) == 0)                              \
            (rc) = h5io_fail((io), #fn "(" #id ")", __FILE__, __LINE__);       \
        (id) = -1;                                                             \
    } while (0)

typedef struct {
    H5E_auto2_t func;
    void *data;
} h5io_quiet;

// Stops HDF5 from printing its error stack (we report errors ourselves).
void h5io_quiet_begin(h5io_quiet *q);
// Restores HDF5's previous error printing.
void h5io_quiet_end(const h5io_quiet *q);

// A fixed-length, null-terminated UTF-8 string type of size bytes (the
// longest string and its terminator; caller closes), -1 on failure.
hid_t h5io_str_type(h5io *io, size_t size);
// The IEEE half-precision file type (numpy float16; caller closes), -1 on failure.
hid_t h5io_half_type(h5io *io);

// Writes an attribute of n values (n == 0: a scalar).
int h5io_attr_write(h5io *io, hid_t obj, const char *name, hid_t ftype, hid_t mtype, int n,
                    const void *buf);
// Writes a fixed-length UTF-8 string attribute (its length plus the terminator).
int h5io_attr_str(h5io *io, hid_t obj, const char *name, const char *value);
// Writes a 32-bit integer attribute.
int h5io_attr_int(h5io *io, hid_t obj, const char *name, int v);
// Writes a 64-bit integer attribute.
int h5io_attr_i64(h5io *io, hid_t obj, const char *name, long long v);

// Writes a dataset of ndim dims (ndim == 0: a scalar); no data is written for 0 points.
int h5io_dset_write(h5io *io, hid_t loc, const char *name, hid_t ftype, hid_t mtype, int ndim,
                    const hsize_t *dims, const void *buf);

// Writes n strings as a 1-D dataset (ndim 1) or one string as a scalar (ndim 0),
// fixed-length (the longest plus the terminator).
int h5io_dset_strs(h5io *io, hid_t loc, const char *name, int ndim, int n,
                   const char *const *strs);
// Creates a group; returns its id or -1 (error filled).
hid_t h5io_group_create(h5io *io, hid_t loc, const char *name);
// Writes the root attributes that identify a model or export file and its
// net's input: format, format_version, arch, dataset, classes, in_c/h/w.
int h5io_root_attrs(h5io *io, const char *format, int version, const net *nt, const char *dataset);
// Writes the group /net: the description text and the input normalisation.
int h5io_net_write(h5io *io, const net *nt);

// --- reading ----------------------------------------------------------------
// Messages name an object as where/name ("/params", "w" -> "/params/w"; where
// "" or "/" -> "/w") and a missing one as "<io->kind> lacks /params/w (path)".

// Checks that io->path is a regular file whose checksum block matches its
// contents (a file without one, from an older version, loads with a notice
// on stderr), then opens it read-only (file close degree strong); returns
// the file id or -1 (error filled).
hid_t h5io_file_open(h5io *io);
// As h5io_file_open; notice = 0: no notice for a file without a checksum (for
// a second reader of a file already opened once).
hid_t h5io_file_open_as(h5io *io, int notice);
// Joins a group path and a name for messages into buf; returns buf.
const char *h5io_join(char *buf, size_t len, const char *where, const char *name);
// Fails ("<kind> lacks where/name") unless loc has a link called name.
int h5io_need_link(h5io *io, hid_t loc, const char *where, const char *name);
// Fails ("<what> is not numeric") unless type is an integer or float type.
int h5io_need_numeric(h5io *io, hid_t type, const char *what);
// Opens group loc/name, which must exist; returns its id or -1 (error filled).
hid_t h5io_group_open(h5io *io, hid_t loc, const char *where, const char *name);
// Opens dataset loc/name, which must exist; returns its id or -1 (error filled).
hid_t h5io_dset_open(h5io *io, hid_t loc, const char *where, const char *name);
// Number of elements of dataset loc/name, which must exist; -1 with the error filled.
long h5io_dset_len(h5io *io, hid_t loc, const char *where, const char *name);
// Reads dataset loc/name, which must exist and hold exactly n elements, as mtype.
int h5io_dset_read(h5io *io, hid_t loc, const char *where, const char *name, hid_t mtype,
                   size_t n, void *buf);
// As h5io_dset_read, and first fails unless the dataset's type is numeric.
int h5io_dset_read_num(h5io *io, hid_t loc, const char *where, const char *name, hid_t mtype,
                       size_t n, void *buf);

// Reads every string of the open attribute (is_attr) or dataset o (named
// `what` in messages) into a new array of *n malloc'd strings (plus a NULL).
// Fixed-length strings are read as stored; variable-length ones (files of
// older versions) only after h5io_file_open_as checked the file (io->checked),
// because libhdf5's variable-length reads are what damaged metadata crashes.
// NULL with the error filled.
char **h5io_strs_read(h5io *io, hid_t o, int is_attr, const char *what, hssize_t *n);
// As h5io_strs_read for exactly one string; a malloc'd copy or NULL.
char *h5io_str_read(h5io *io, hid_t o, int is_attr, const char *what);
// Frees n strings read by h5io_strs_read and their array.
void h5io_strs_free(char **s, hssize_t n);

// --- checksummed, atomic files -----------------------------------------------

// Stops libhdf5 from installing its exit handler; every entry point of this
// layer calls it first (tools and tests that use HDF5 directly call it too).
void h5io_init(void);

// Fills the open file io->file; returns 0 or -1 with io->err filled.
typedef int (*h5io_writer)(h5io *io, const void *ctx);

// The one HDF5 writer: creates "<path>.tmp.<pid>" with a 512-byte user
// block, runs fn on it (io->path names path in messages), flushes, closes,
// writes the CRC-32 of the contents into the user block, then replaces path
// atomically (runtime/atomic.h). Any failure leaves path as it was and no
// temporary behind.
int h5io_file_save(const char *path, h5io_writer fn, const void *ctx, sc_err *err);

// Writes the checksum block of a closed file written with a user block
// (h5io_file_save does it; tests that edit a file in place re-seal it).
int h5io_seal(const char *path, sc_err *err);

#endif
