// The key of a latency table on this machine's current GPU (GPU builds).
#include "prune/latency.h"

#include <stdio.h>

#include "kernels/common_gpu.h"

// Name and compute capability of the current device.
int lat_gpu_key(lat_key *key, sc_err *err) {
    gpu_devinfo d;
    SC_TRY(gpu_devinfo_query(-1, &d, err));
    snprintf(key->gpu, sizeof key->gpu, "%.*s", (int)sizeof key->gpu - 1, d.name);
    key->cc = gpu_devinfo_cc(&d);
    return 0;
}
