// Test helper for the string types of written files (tests/cli_strings.sh):
//
//     build/helpers/h5strings count FILE        prints "N strings, M variable-length"
//     build/helpers/h5strings vlen FILE         rewrites every string variable-length
//                                               (as earlier versions wrote them), re-sealed
//     build/helpers/h5strings unsealed SRC DST  DST: SRC's objects without the checksum block
//
// Exit 0 on success, 1 on failure.
#include <stdio.h>
#include <string.h>

#include "runtime/h5io.h"
#include "tests/h5_strings.h"

int main(int argc, char **argv) {
    h5io_init();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (argc == 3 && !strcmp(argv[1], "count")) {
        int n, v;
        if (h5s_count(argv[2], &n, &v) != 0) return 1;
        printf("%d strings, %d variable-length\n", n, v);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "vlen")) {
        int n = h5s_to_vlen(argv[2]);
        if (n < 0) return 1;
        printf("%d strings made variable-length\n", n);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "unsealed")) return h5s_copy_unsealed(argv[2], argv[3]) ? 1 : 0;
    fprintf(stderr, "usage: h5strings count FILE | vlen FILE | unsealed SRC DST\n");
    return 2;
}
