// Timing harness of the CPU direct sparse convolution (build/helpers/spconv_bench): the
// resnet18 3x3 layers (64 at 32x32, 128 at 16x16, 256 at 8x8, 512 at 4x4) dense and 95%
// sparse, and the 128x64 stride-2 layer, batch 32, the current kernel against the old
// loop (tests/spconv_cpu_old.h); prints images/s of each and whether the outputs are
// bit-identical. Threads from OMP_NUM_THREADS.
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "kernels/spconv.h"
#include "tests/spconv_cases.h"
#include "tests/spconv_cpu_old.h"

// Seconds for reps runs of the new (old 0) or old (old 1) kernel.
static double bench_time(const spc_layer *L, int n, const float *x, float *y, int old, int reps) {
    const double t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++) {
        if (old) spold_forward(&L->d, n, x, y);
        else spconv_forward_cpu(&L->d, n, x, y);
    }
    return (omp_get_wtime() - t0) / reps;
}

// Times one 3x3 layer (pad 1) both ways and prints a row.
static void bench_layer(int K, int C, int H, int stride, double density, int n, int reps) {
    spc_shape s = {"bench", K, C, H, H, 3, 3, stride, 1, 1, 1, 0, 0, 0, 1, 1, density, 0, 0};
    spc_layer L;
    spc_layer_make(&L, &s, SPC_FP32, 11);
    float *x = spc_input(&L.d, n, 0, 12);
    const size_t no = spc_out_elems(&L, n);
    float *a = calloc(no, sizeof *a), *b = calloc(no, sizeof *b);
    const double to = bench_time(&L, n, x, a, 1, reps), tn = bench_time(&L, n, x, b, 0, reps);
    printf("%4dx%-4d %2dx%-2d s%d %5.0f%%  nnz_row %5d  old %8.2f img/s  new %8.2f img/s  x%.2f  %s\n",
           K, C, H, H, stride, 100.0 * (1.0 - density), L.d.nnz_row, n / to, n / tn, to / tn,
           memcmp(a, b, no * sizeof *a) ? "DIFFERENT" : "bit-identical");
    free(x), free(a), free(b);
    spc_layer_free(&L);
}

// Every layer dense and 95% sparse; argv[1] reps (default 1), argv[2] batch (32).
int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 1, n = argc > 2 ? atoi(argv[2]) : 32;
    printf("threads %d, batch %d, reps %d\n", omp_get_max_threads(), n, reps);
    const int K[] = {64, 128, 256, 512}, H[] = {32, 16, 8, 4};
    for (int i = 0; i < 4; i++) {
        bench_layer(K[i], K[i], H[i], 1, 1.0, n, reps);
        bench_layer(K[i], K[i], H[i], 1, 0.05, n, reps);
    }
    bench_layer(128, 64, 32, 2, 1.0, n, reps);  // the first stride-2 layer (generic tiles)
    bench_layer(128, 64, 32, 2, 0.05, n, reps);
    return 0;
}
