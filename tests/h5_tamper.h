// Tests that edit a written HDF5 file in place with the raw HDF5 API close it
// with tamper_close, which re-seals the file's checksum block, so that the
// reader's own checks (not the checksum) meet the edit.
#ifndef SC_TESTS_H5_TAMPER_H
#define SC_TESTS_H5_TAMPER_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <hdf5.h>

#include "runtime/h5io.h"

// Closes f and rewrites its checksum block to match the edited contents.
static inline herr_t tamper_close(hid_t f) {
    char name[4096];
    ssize_t n = H5Fget_name(f, name, sizeof name);
    herr_t rc = H5Fclose(f);
    if (rc >= 0 && n > 0 && (size_t)n < sizeof name && h5io_seal(name, NULL) != 0) rc = -1;
    return rc;
}


// Sets int attribute name of object obj (an existing attribute) to v.
static inline void tamper_attr_int(const char *path, const char *obj, const char *name, int v) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), o = H5Oopen(f, obj, H5P_DEFAULT);
    hid_t a = H5Aopen(o, name, H5P_DEFAULT), sp = H5Aget_space(a);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    int vals[8] = {v, v, v, v, v, v, v, v};
    if (n >= 1 && n <= 8) H5Awrite(a, H5T_NATIVE_INT, vals);
    H5Sclose(sp), H5Aclose(a), H5Oclose(o), tamper_close(f);
}

// Copies file a to b (0 on success).
static inline int tamper_copy(const char *a, const char *b) {
    FILE *f = fopen(a, "rb"), *g = fopen(b, "wb");
    char buf[65536];
    size_t n;
    int rc = f && g ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, f)) > 0) rc = fwrite(buf, 1, n, g) == n ? 0 : -1;
    if (f) fclose(f);
    if (g) fclose(g);
    return rc;
}

// Adds `delta` to element `at` of an int32 dataset of a copy of the file.
static inline void tamper_int(const char *path, const char *dset, int at, int delta) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), d = H5Dopen2(f, dset, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    int *v = malloc((size_t)n * sizeof *v);
    H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    v[at] += delta;
    H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
    H5Sclose(sp), H5Dclose(d), tamper_close(f);
}

// Sets element `at` of a float dataset (any float type) of a file to NaN.
static inline void tamper_nan(const char *path, const char *dset, int at) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), d = H5Dopen2(f, dset, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    float *v = malloc((size_t)n * sizeof *v);
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    v[at] = NAN;
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
    H5Sclose(sp), H5Dclose(d), tamper_close(f);
}

// Replaces string attribute name of object obj with value.
static inline void tamper_attr(const char *path, const char *obj, const char *name, const char *value) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), o = H5Oopen(f, obj, H5P_DEFAULT);
    H5Adelete(o, name);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, &value);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t), H5Oclose(o), tamper_close(f);
}

// Removes a link from a copy of the file.
static inline void tamper_delete(const char *path, const char *link) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    H5Ldelete(f, link, H5P_DEFAULT);
    tamper_close(f);
}

#endif
