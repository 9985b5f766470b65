// Tests of the string types in written files: counting the string
// attributes and datasets of a file and how many are variable-length
// (H5Tis_variable_str), turning a written file into one of an older version
// (every string variable-length; optionally without the checksum block) with
// the raw HDF5 API.
#ifndef SC_TESTS_H5_STRINGS_H
#define SC_TESTS_H5_STRINGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "tests/h5_tamper.h"

#define H5S_MAX_OBJS 4096

typedef struct {
    char *path[H5S_MAX_OBJS];  // "." (the root) and every link below it
    int n;
} h5s_objs;

// Collects one link path (H5Lvisit callback).
static herr_t h5s_collect(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    h5s_objs *o = data;
    if (o->n >= H5S_MAX_OBJS) return -1;
    o->path[o->n++] = strdup(name);
    return 0;
}

// Fills o with the root and every object path of file f; 0 or -1.
static int h5s_objs_list(hid_t f, h5s_objs *o) {
    o->n = 0;
    o->path[o->n++] = strdup(".");
    return H5Lvisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, h5s_collect, o) < 0 ? -1 : 0;
}

// Frees the paths of o.
static void h5s_objs_free(h5s_objs *o) {
    for (int i = 0; i < o->n; i++) free(o->path[i]);
    o->n = 0;
}

// Adds type t to the counts when it is a string type.
static void h5s_count_type(hid_t t, int *nstr, int *nvlen) {
    if (H5Tget_class(t) != H5T_STRING) return;
    (*nstr)++;
    if (H5Tis_variable_str(t) > 0) (*nvlen)++;
}

// Counts the string attributes and datasets of a file and the
// variable-length ones among them; 0, or -1 when the file cannot be read.
static int h5s_count(const char *path, int *nstr, int *nvlen) {
    *nstr = *nvlen = 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    h5s_objs o;
    int rc = h5s_objs_list(f, &o);
    for (int i = 0; rc == 0 && i < o.n; i++) {
        hid_t obj = H5Oopen(f, o.path[i], H5P_DEFAULT);
        if (obj < 0) { rc = -1; break; }
        if (H5Iget_type(obj) == H5I_DATASET) {
            hid_t t = H5Dget_type(obj);
            h5s_count_type(t, nstr, nvlen);
            H5Tclose(t);
        }
        int na = H5Aget_num_attrs(obj);
        for (int k = 0; k < na; k++) {
            hid_t a = H5Aopen_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)k, H5P_DEFAULT,
                                     H5P_DEFAULT);
            hid_t t = H5Aget_type(a);
            h5s_count_type(t, nstr, nvlen);
            H5Tclose(t), H5Aclose(a);
        }
        H5Oclose(obj);
    }
    h5s_objs_free(&o);
    H5Fclose(f);
    return rc;
}

// Reads the n strings of a fixed-length string attribute or dataset o into
// a new array of n strings (NULL on failure).
static char **h5s_read_fixed(hid_t o, int is_attr, hid_t t, hssize_t n) {
    size_t sz = H5Tget_size(t);
    char *raw = calloc((size_t)n + 1, sz), **s = calloc((size_t)n + 1, sizeof *s);
    hid_t mt = H5Tcopy(t);
    H5Tset_strpad(mt, H5T_STR_NULLPAD);
    herr_t r = is_attr ? H5Aread(o, mt, raw) : H5Dread(o, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw);
    H5Tclose(mt);
    for (hssize_t i = 0; r >= 0 && i < n; i++) s[i] = strndup(raw + (size_t)i * sz, sz);
    free(raw);
    if (r < 0) free(s), s = NULL;
    return s;
}

// Writes strings s as a new variable-length attribute or dataset `name` of
// loc with dataspace sp; 0 or -1.
static int h5s_write_vlen(hid_t loc, const char *name, int is_attr, hid_t sp, char **s) {
    hid_t vt = H5Tcopy(H5T_C_S1);
    H5Tset_size(vt, H5T_VARIABLE);
    H5Tset_cset(vt, H5T_CSET_UTF8);
    hid_t o = is_attr ? H5Acreate2(loc, name, vt, sp, H5P_DEFAULT, H5P_DEFAULT)
                      : H5Dcreate2(loc, name, vt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = o < 0 ? -1 : is_attr ? H5Awrite(o, vt, s) : H5Dwrite(o, vt, H5S_ALL, H5S_ALL, H5P_DEFAULT, s);
    if (o >= 0) is_attr ? H5Aclose(o) : H5Dclose(o);
    H5Tclose(vt);
    return r < 0 ? -1 : 0;
}

// Replaces fixed-length string attribute or dataset `name` of loc (open as
// o) by a variable-length one with the same strings; 0, 1 (not a fixed-length
// string: left alone) or -1.
static int h5s_to_vlen_one(hid_t loc, hid_t o, const char *name, int is_attr) {
    hid_t t = is_attr ? H5Aget_type(o) : H5Dget_type(o);
    hid_t sp = is_attr ? H5Aget_space(o) : H5Dget_space(o);
    int rc = 1;
    if (H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0) {
        hssize_t n = H5Sget_simple_extent_npoints(sp);
        char **s = h5s_read_fixed(o, is_attr, t, n);
        rc = -1;
        if (s) {
            is_attr ? H5Aclose(o) : H5Dclose(o);
            herr_t del = is_attr ? H5Adelete(loc, name) : H5Ldelete(loc, name, H5P_DEFAULT);
            rc = del < 0 ? -1 : h5s_write_vlen(loc, name, is_attr, sp, s);
            for (hssize_t i = 0; i < n; i++) free(s[i]);
            free(s);
            o = -1;
        }
    }
    if (o >= 0) is_attr ? H5Aclose(o) : H5Dclose(o);
    H5Tclose(t), H5Sclose(sp);
    return rc;
}

// Turns every fixed-length string attribute and dataset of object obj
// (path p of file f) into a variable-length one; the number turned, or -1.
static int h5s_to_vlen_obj(hid_t f, const char *p) {
    hid_t obj = H5Oopen(f, p, H5P_DEFAULT);
    if (obj < 0) return -1;
    int done = 0, rc = 0;
    char names[64][64];
    int na = H5Aget_num_attrs(obj);
    for (int k = 0; k < na && k < 64; k++)
        if (H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)k, names[k], 64,
                               H5P_DEFAULT) < 0) rc = -1;
    for (int k = 0; rc >= 0 && k < na && k < 64; k++) {
        rc = h5s_to_vlen_one(obj, H5Aopen(obj, names[k], H5P_DEFAULT), names[k], 1);
        done += rc == 0;
    }
    int is_dset = H5Iget_type(obj) == H5I_DATASET;
    H5Oclose(obj);
    if (rc >= 0 && is_dset) {
        rc = h5s_to_vlen_one(f, H5Dopen2(f, p, H5P_DEFAULT), p, 0);
        done += rc == 0;
    }
    return rc < 0 ? -1 : done;
}

// Rewrites every fixed-length string of a file as a variable-length one (as
// files of earlier versions hold them) and re-seals a file with a checksum
// block; the number of strings turned, or -1.
static int h5s_to_vlen(const char *path) {
    FILE *fp = fopen(path, "rb");
    char head[16] = {0};
    int sealed = fp && fread(head, 1, sizeof head, fp) == sizeof head &&
                 !memcmp(head, "sparsecnn-crc32 ", 16);
    if (fp) fclose(fp);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return -1;
    h5s_objs o;
    int rc = h5s_objs_list(f, &o), done = 0;
    for (int i = 0; rc == 0 && i < o.n; i++) {
        int k = h5s_to_vlen_obj(f, o.path[i]);
        if (k < 0) rc = -1;
        else done += k;
    }
    h5s_objs_free(&o);
    herr_t r = sealed ? tamper_close(f) : H5Fclose(f);
    return rc < 0 || r < 0 ? -1 : done;
}

// Copies one root attribute (index k) of src to dst (fixed-size types); 0 or -1.
static int h5s_copy_root_attr(hid_t src, hid_t dst, int k) {
    hid_t a = H5Aopen_by_idx(src, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)k, H5P_DEFAULT,
                             H5P_DEFAULT);
    char name[64];
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    size_t bytes = H5Tget_size(t) * (size_t)H5Sget_simple_extent_npoints(sp);
    void *buf = calloc(bytes + 1, 1);
    herr_t r = H5Aget_name(a, sizeof name, name) < 0 ? -1 : H5Aread(a, t, buf);
    hid_t b = r < 0 ? -1 : H5Acreate2(dst, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (b < 0 || H5Awrite(b, t, buf) < 0) r = -1;
    if (b >= 0) H5Aclose(b);
    free(buf);
    H5Tclose(t), H5Sclose(sp), H5Aclose(a);
    return r < 0 ? -1 : 0;
}

// Copies one root link of src into dst (H5Literate callback).
static herr_t h5s_copy_link(hid_t src, const char *name, const H5L_info_t *info, void *dst) {
    return H5Ocopy(src, name, *(hid_t *)dst, name, H5P_DEFAULT, H5P_DEFAULT);
}

// Writes dst as a file of a version before checksums: every object and root
// attribute of src in a plain HDF5 file without a user block; 0 or -1.
static int h5s_copy_unsealed(const char *src, const char *dst) {
    hid_t a = H5Fopen(src, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t b = a < 0 ? -1 : H5Fcreate(dst, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || b < 0 ? -1 : 0;
    if (rc == 0 && H5Literate(a, H5_INDEX_NAME, H5_ITER_INC, NULL, h5s_copy_link, &b) < 0) rc = -1;
    hid_t ra = rc == 0 ? H5Gopen2(a, "/", H5P_DEFAULT) : -1;
    hid_t rb = rc == 0 ? H5Gopen2(b, "/", H5P_DEFAULT) : -1;
    int na = ra >= 0 && rb >= 0 ? H5Aget_num_attrs(ra) : -1;
    if (na < 0) rc = -1;
    for (int k = 0; rc == 0 && k < na; k++) rc = h5s_copy_root_attr(ra, rb, k);
    if (ra >= 0) H5Gclose(ra);
    if (rb >= 0) H5Gclose(rb);
    if (b >= 0 && H5Fclose(b) < 0) rc = -1;
    if (a >= 0) H5Fclose(a);
    return rc;
}

#endif
