// Stand-in for CPU-only builds: there is no GPU to key a latency table on.
#include "prune/latency.h"

// No GPU in this build.
int lat_gpu_key(lat_key *key, sc_err *err) {
    (void)key;
    return sc_fail(err, "this build has no GPU support");
}
