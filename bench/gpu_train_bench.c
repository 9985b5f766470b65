// Times training steps of the GPU executor on random bytes (never zeros):
// warm-up, then windows of steps timed by wall clock around a synchronising
// exec_stats_take (throughput, host staging included); median over windows.
// Then one profiled eager step for the per-layer split, and the executor's
// description (algorithms, fusion, graph).
//
//   gpu_train_bench [arch] [fp16|fp32] [batch] [windows] [steps-per-window]
//   defaults:        resnet18 fp16 512 7 20   (CIFAR-100 shapes: 3x32x32, 100 classes)
//
// Build (GPU build of the library first):
//   gcc -O2 -std=gnu11 -I. -DSC_HAVE_CUDA -I/usr/local/cuda/include -fopenmp
//       bench/gpu_train_bench.c build-gpu/libsparsecnn.a (the Makefile LDLIBS) -o ...
// (bench/gpu_bench.sh does this).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/exec_backend.h"
#include "runtime/exec_gpu.h"
#include "runtime/net.h"
#include "runtime/rng.h"

// Seconds on a monotonic clock.
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// qsort order of doubles.
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Per-layer profile table, largest first.
static void print_profile(const net *nt, const float *fwd, const float *bwd, const float *oth) {
    int *idx = malloc(nt->nlayers * sizeof *idx);
    double tf = 0, tb = 0;
    for (int i = 0; i < nt->nlayers; i++) idx[i] = i, tf += fwd[i], tb += bwd[i];
    for (int i = 0; i < nt->nlayers; i++)  // selection sort by fwd + bwd
        for (int j = i + 1; j < nt->nlayers; j++)
            if (fwd[idx[j]] + bwd[idx[j]] > fwd[idx[i]] + bwd[idx[i]]) {
                int k = idx[i];
                idx[i] = idx[j], idx[j] = k;
            }
    printf("profile (one eager step, ms): forward %.3f, backward %.3f, prep+cast %.3f, "
           "loss %.3f, grad gather %.3f, sgd %.3f\n", tf, tb, oth[0], oth[1], oth[2], oth[3]);
    printf("  %-22s %8s %8s  %s\n", "layer", "fwd", "bwd", "shape out");
    for (int k = 0; k < nt->nlayers && k < 40; k++) {
        const layer *L = &nt->layers[idx[k]];
        printf("  %-22s %8.3f %8.3f  %dx%dx%d\n", L->name, fwd[idx[k]], bwd[idx[k]], L->c, L->h,
               L->w);
    }
    free(idx);
}

// Creates the executor, times the steps, profiles one, describes the plan.
int main(int argc, char **argv) {
    const char *arch = argc > 1 ? argv[1] : "resnet18";
    const sc_precision prec = argc > 2 && !strcmp(argv[2], "fp32") ? PREC_FP32 : PREC_FP16;
    const int batch = argc > 3 ? atoi(argv[3]) : 512;
    const int windows = argc > 4 ? atoi(argv[4]) : 7, per = argc > 5 ? atoi(argv[5]) : 20;
    sc_err err = {{0}};
    const exec_backend *be = exec_gpu_backend(&err);
    net *nt = be ? net_create(arch, 3, 32, 32, 100, &err) : NULL;
    if (!nt) {
        fprintf(stderr, "gpu_train_bench: %s\n", err.msg);
        return 1;
    }
    rng g;
    rng_seed(&g, 1, 0);
    net_init_weights(nt, &g);
    double t0 = now();
    void *st = be->create(nt, prec, batch, &err);
    if (!st) {
        fprintf(stderr, "gpu_train_bench: %s\n", err.msg);
        return 1;
    }
    printf("%s %s batch %d: executor created in %.2f s\n", arch, prec == PREC_FP16 ? "fp16" : "fp32",
           batch, now() - t0);
    const int nb = 4;  // rotate among a few random batches
    uint8_t *img = malloc((size_t)nb * batch * 3072), *flip = malloc((size_t)nb * batch);
    int8_t *dx = malloc((size_t)nb * batch), *dy = malloc((size_t)nb * batch);
    int *lab = malloc((size_t)nb * batch * sizeof *lab);
    for (size_t i = 0; i < (size_t)nb * batch * 3072; i++) img[i] = (uint8_t)rng_below(&g, 256);
    for (int i = 0; i < nb * batch; i++) {
        lab[i] = (int)rng_below(&g, 100), flip[i] = (uint8_t)rng_below(&g, 2);
        dx[i] = (int8_t)((int)rng_below(&g, 9) - 4), dy[i] = (int8_t)((int)rng_below(&g, 9) - 4);
    }
    exec_batch b[4];
    for (int k = 0; k < nb; k++)
        b[k] = (exec_batch){batch, img + (size_t)k * batch * 3072, lab + k * batch, dx + k * batch,
                            dy + k * batch, flip + k * batch};
    const exec_hparams h = {0.05f, 0.9f, 5e-4f, 1, 0.1f};
    exec_stats s;
    int rc = 0;
    for (int i = 0; i < 10 && !rc; i++) rc = be->train_step(st, &b[i % nb], &h, &err);
    if (!rc) rc = be->stats_take(st, &s, &err);
    double *w = calloc(windows, sizeof *w);
    for (int k = 0; k < windows && !rc; k++) {
        double a = now();
        for (int i = 0; i < per && !rc; i++) rc = be->train_step(st, &b[i % nb], &h, &err);
        if (!rc) rc = be->stats_take(st, &s, &err);
        w[k] = (now() - a) / per;
        printf("window %d: %.3f ms/step, %.0f images/s, loss %.3f, skipped %ld\n", k, w[k] * 1e3,
               batch / w[k], s.loss_sum / (s.count ? s.count : 1), s.skipped);
    }
    if (rc) {
        fprintf(stderr, "gpu_train_bench: %s\n", err.msg);
        return 1;
    }
    qsort(w, windows, sizeof *w, cmp_double);
    printf("RESULT %s %s batch %d: median %.3f ms/step = %.0f images/s (min %.3f, max %.3f); "
           "%.2f s per 45000-image epoch\n", arch, prec == PREC_FP16 ? "fp16" : "fp32", batch,
           w[windows / 2] * 1e3, batch / w[windows / 2], w[0] * 1e3, w[windows - 1] * 1e3,
           45000.0 / batch * w[windows / 2]);
    float *fwd = calloc(nt->nlayers, sizeof *fwd), *bwd = calloc(nt->nlayers, sizeof *bwd), oth[4];
    if (exec_gpu_profile_step(st, &b[0], &h, fwd, bwd, oth, &err) == 0)
        print_profile(nt, fwd, bwd, oth);
    else
        fprintf(stderr, "profile: %s\n", err.msg);
    char *desc = malloc(1 << 16);
    exec_gpu_describe(st, desc, 1 << 16);
    printf("%s", desc);
    be->destroy(st);
    net_free(nt);
    free(img), free(flip), free(dx), free(dy), free(lab), free(w), free(fwd), free(bwd), free(desc);
    return 0;
}
