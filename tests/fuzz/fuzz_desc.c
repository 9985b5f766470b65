// libFuzzer harness: the network description parser (net_from_desc).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/net.h"

// Parses the input as description text for a 3x32x32 input and 10 classes.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    sc_err err = {{0}};
    net_free(net_from_desc("fuzz", text, 3, 32, 32, 10, &err));
    free(text);
    return 0;
}
