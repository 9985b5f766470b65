// libFuzzer harness: the quantized model reader (model_load, then quant_load).
#include "runtime/model_io.h"
#include "runtime/quant_io.h"
#include "tests/fuzz/fuzz_util.h"

// Loads the input as a quantized model file; every outcome but a crash is fine.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    if (fuzz_write_file("quant", data, size, path, sizeof path) != 0) return 0;
    sc_err err = {{0}};
    net *nt = model_load(path, NULL, &err);
    quant_model *q = NULL;
    if (nt && quant_load(path, nt, &q, &err) == 0) quant_model_free(q);
    net_free(nt);
    fuzz_no_open_ids();
    unlink(path);
    return 0;
}
