// Shared by the libFuzzer harnesses: the input bytes written to a file that
// the reader under test opens by path. With SC_FUZZ_SEAL=1 in the
// environment a file that carries a checksum block gets it rewritten to
// match the mutated bytes, so the mutations reach libhdf5 and the project's
// own checks instead of stopping at the checksum.
#ifndef SC_FUZZ_UTIL_H
#define SC_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "runtime/h5io.h"

// Writes data to a per-process file named after tag; path receives its name.
static int fuzz_write_file(const char *tag, const uint8_t *data, size_t size, char *path,
                           size_t len) {
    snprintf(path, len, "/tmp/sc_fuzz_%s_%ld.h5", tag, (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = size && fwrite(data, 1, size, f) != size;
    if (fclose(f) != 0) bad = 1;
    const char *seal = getenv("SC_FUZZ_SEAL");
    if (!bad && seal && seal[0] == '1' && size >= 512 && !memcmp(data, "sparsecnn-crc32 ", 16))
        bad = h5io_seal(path, NULL) != 0;
    return bad ? -1 : 0;
}

// Aborts (a crash the fuzzer reports) when the reader left an HDF5 file or
// object open (the readers open files with the strong close degree, so
// closing the file closes what is left in it: the file must be closed on
// every path). Memory libhdf5 1.10 keeps after parsing a damaged file is the
// library's, not the reader's: tests/fuzz/lsan.supp suppresses leaks
// allocated inside libhdf5.
static void fuzz_no_open_ids(void) {
    const ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (n != 0) {
        fprintf(stderr, "fuzz: the reader left %zd HDF5 objects open\n", n);
        abort();
    }
}

#endif
