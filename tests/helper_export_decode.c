// Test helper: prints the toolkit's own decode of an export file, for the
// Python check of the documented h5py + scipy reader (tests/export_check.py).
//
//     build/helpers/export_decode FILE.csr.h5 > decoded.txt
//
// Per conv/linear layer, three lines: "NAME K COLS", the dense (K, COLS)
// BN-folded weights from the loaded padded rows (row-major), and the K
// biases, every number printed with 9 significant digits (exact for fp32).
#include <stdio.h>
#include <stdlib.h>

#include "runtime/sparse_model.h"

// Prints n floats on one line.
static void print_floats(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++) printf(i ? " %.9g" : "%.9g", (double)v[i]);
    printf("\n");
}

// Prints one layer: its header line, dense weights and bias.
static int print_layer(const sparse_model *m, const sparse_layer *l) {
    const size_t cols = (size_t)l->C * l->R * l->S;
    float *w = calloc((size_t)l->K * cols + 1, sizeof *w);  // (K, cols)
    if (!w) return -1;
    for (size_t k = 0; k < (size_t)l->K; k++)
        for (size_t j = k * l->nnz_row; j < (k + 1) * (size_t)l->nnz_row; j++)
            w[k * cols + (size_t)l->indices[j]] = l->values[j];
    printf("%s %d %zu\n", m->nt->layers[l->layer].name, l->K, cols);
    print_floats(w, (size_t)l->K * cols);
    print_floats(l->bias, (size_t)l->K);
    free(w);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: export_decode FILE\n");
        return 2;
    }
    sc_err err = {{0}};
    sparse_model *m = sparse_model_load(argv[1], &err);
    if (!m) {
        fprintf(stderr, "export_decode: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < m->nlayers; i++) rc = print_layer(m, &m->layers[i]);
    sparse_model_free(m);
    return rc ? 1 : 0;
}
