// libFuzzer harness: the CIFAR loader (dataset_open on a folder whose
// train.bin and test.bin hold the input).
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datasets/cifar.h"

// Writes data as dir/name; 0 on success.
static int put(const char *dir, const char *name, const uint8_t *data, size_t size) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    int bad = size && fwrite(data, 1, size, f) != size;
    return fclose(f) != 0 || bad ? -1 : 0;
}

// Opens a CIFAR-100-layout folder made of the input; every outcome but a crash is fine.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[256], p[512];
    snprintf(dir, sizeof dir, "/tmp/sc_fuzz_cifar_%ld", (long)getpid());
    mkdir(dir, 0700);
    if (put(dir, "train.bin", data, size) == 0 && put(dir, "test.bin", data, size) == 0) {
        dataset ds;
        sc_err err = {{0}};
        if (dataset_open(dir, "/nonexistent", 0, 1, &ds, &err) == 0) dataset_free(&ds);
    }
    snprintf(p, sizeof p, "%s/train.bin", dir), unlink(p);
    snprintf(p, sizeof p, "%s/test.bin", dir), unlink(p);
    rmdir(dir);
    return 0;
}
