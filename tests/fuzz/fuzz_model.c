// libFuzzer harness: the model file reader (model_load).
#include "runtime/model_io.h"
#include "tests/fuzz/fuzz_util.h"

// Loads the input as a model file; every outcome but a crash is fine.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    if (fuzz_write_file("model", data, size, path, sizeof path) != 0) return 0;
    sc_err err = {{0}};
    model_meta m;
    net *nt = model_load(path, &m, &err);
    if (nt) model_meta_free(&m);
    net_free(nt);
    fuzz_no_open_ids();
    unlink(path);
    return 0;
}
