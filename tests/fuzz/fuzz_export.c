// libFuzzer harness: the export file reader (sparse_model_load).
#include "runtime/sparse_model.h"
#include "tests/fuzz/fuzz_util.h"

// Loads the input as an export file; every outcome but a crash is fine.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    if (fuzz_write_file("export", data, size, path, sizeof path) != 0) return 0;
    sc_err err = {{0}};
    sparse_model *m = sparse_model_load(path, &err);
    sparse_model_free(m);
    fuzz_no_open_ids();
    unlink(path);
    return 0;
}
