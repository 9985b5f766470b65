// Tests that edit a written HDF5 file in place with the raw HDF5 API close it
// with tamper_close, which re-seals the file's checksum block, so that the
// reader's own checks (not the checksum) meet the edit.
#ifndef SC_TESTS_H5_TAMPER_H
#define SC_TESTS_H5_TAMPER_H

#include "runtime/h5io.h"

// Closes f and rewrites its checksum block to match the edited contents.
static inline herr_t tamper_close(hid_t f) {
    char name[4096];
    ssize_t n = H5Fget_name(f, name, sizeof name);
    herr_t rc = H5Fclose(f);
    if (rc >= 0 && n > 0 && (size_t)n < sizeof name && h5io_seal(name, NULL) != 0) rc = -1;
    return rc;
}

#endif
