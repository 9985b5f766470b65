// GPU backend stand-in for CPU-only builds (compiled only without nvcc).
#include "exec_backend.h"

// No GPU backend in this build.
const exec_backend *exec_gpu_backend(sc_err *err) {
    sc_fail(err, "this build has no GPU support (nvcc or cuDNN was missing at build time)");
    return NULL;
}

// No GPU to select in this build.
int exec_gpu_select(int ordinal, sc_err *err) {
    (void)ordinal, (void)err;
    return 0;
}
