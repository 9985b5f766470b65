// The tail kernel's test chains (kernels/bsconv_tail_gpu.h), shared by the
// GPU test (tests/gpu_test_tail.c) and the CPU emulation of the kernel
// (tests/halo_emu): the chains' shapes and shared-memory regions, their
// random 16x8 block-sparse layers, and the plain-C chain they are checked
// against. Header-only (static inline), C and C++.
#ifndef SC_TESTS_TAIL_CASES_H
#define SC_TESTS_TAIL_CASES_H

#include <math.h>
#include <stdlib.h>

#include "runtime/half.h"
#include "tests/bsconv_cases.h"

#define TAIL_MAXOPS 10

// One conv of a test chain: input channels and plane, output channels, kernel,
// stride, ReLU, the ops whose outputs are its input and residual (-1: x, none),
// the shared-memory regions of its input, output and residual, and a 2x2
// max-pool after it (pool 2) with the region of its unpooled output.
typedef struct {
    int C, H, K, R, stride, relu, src, rsrc, in, out, res, pool, pre;
} tail_spec;

// resnet18's layer3 (16x16x128 in, 8x8x256 out) then layer4 (4x4x512 out): two basic blocks each.
static const tail_spec R18_TAIL[TAIL_MAXOPS] = {
    {128, 16, 256, 3, 2, 1, -1, -1, 0, 82944, -1, 0, 0},    {128, 16, 256, 1, 2, 0, -1, -1, 0, 134144, -1, 0, 0},
    {256, 8, 256, 3, 1, 1, 0, 1, 82944, 0, 134144, 0, 0},   {256, 8, 256, 3, 1, 1, 2, -1, 0, 82944, -1, 0, 0},
    {256, 8, 256, 3, 1, 1, 3, 2, 82944, 134144, 0, 0, 0},   {256, 8, 512, 3, 2, 1, 4, -1, 134144, 0, -1, 0, 0},
    {256, 8, 512, 1, 2, 0, 4, -1, 134144, 36864, -1, 0, 0}, {512, 4, 512, 3, 1, 1, 5, 6, 0, 73728, 36864, 0, 0},
    {512, 4, 512, 3, 1, 1, 7, -1, 73728, 0, -1, 0, 0},      {512, 4, 512, 3, 1, 1, 8, 7, 0, 36864, 73728, 0, 0}};

// resnet18's layer4 alone (8x8x256 in).
static const tail_spec R18_L4[5] = {
    {256, 8, 512, 3, 2, 1, -1, -1, 0, 51200, -1, 0, 0},      {256, 8, 512, 1, 2, 0, -1, -1, 0, 88064, -1, 0, 0},
    {512, 4, 512, 3, 1, 1, 0, 1, 51200, 124928, 88064, 0, 0}, {512, 4, 512, 3, 1, 1, 2, -1, 124928, 51200, -1, 0, 0},
    {512, 4, 512, 3, 1, 1, 3, 2, 51200, 88064, 124928, 0, 0}};

// vgg16's conv5-13 (8x8x128 in, 1x1x512 out): a 2x2 max-pool after conv7, conv10 and conv13.
static const tail_spec VGG_TAIL[9] = {
    {128, 8, 256, 3, 1, 1, -1, -1, 0, 51200, -1, 0, 0},      {256, 8, 256, 3, 1, 1, 0, -1, 51200, 0, -1, 0, 0},
    {256, 8, 256, 3, 1, 1, 1, -1, 0, 51200, -1, 2, 102400},  {256, 4, 512, 3, 1, 1, 2, -1, 51200, 0, -1, 0, 0},
    {512, 4, 512, 3, 1, 1, 3, -1, 0, 51200, -1, 0, 0},       {512, 4, 512, 3, 1, 1, 4, -1, 51200, 0, -1, 2, 102400},
    {512, 2, 512, 3, 1, 1, 5, -1, 0, 51200, -1, 0, 0},       {512, 2, 512, 3, 1, 1, 6, -1, 51200, 0, -1, 0, 0},
    {512, 2, 512, 3, 1, 1, 7, -1, 0, 51200, -1, 2, 102400}};

// vgg16's conv8-13 alone (4x4x256 in, 1x1x512 out): a 2x2 max-pool after conv10 and conv13.
static const tail_spec VGG_LATE[6] = {
    {256, 4, 512, 3, 1, 1, -1, -1, 0, 36864, -1, 0, 0},      {512, 4, 512, 3, 1, 1, 0, -1, 36864, 0, -1, 0, 0},
    {512, 4, 512, 3, 1, 1, 1, -1, 0, 36864, -1, 2, 73728},   {512, 2, 512, 3, 1, 1, 2, -1, 36864, 0, -1, 0, 0},
    {512, 2, 512, 3, 1, 1, 3, -1, 0, 36864, -1, 0, 0},       {512, 2, 512, 3, 1, 1, 4, -1, 36864, 0, -1, 2, 73728}};

// Rounds n host floats to fp16 values in place.
static inline void tail_round16(float *h, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = half_to_float(half_from_float(h[i]));
}

// The chain's layers L[0..nops) for n images at block sparsity spars (op 2
// with an empty block row when empty): weights scaled by 1 / sqrt(kept
// fan-in), so that ten convs keep the activations inside fp16's range, and
// they and the input rounded to fp16.
static inline void tail_layers_make(bsc_layer *L, const tail_spec *sp, int nops, int n, double spars, int empty,
                                    uint64_t seed) {
    for (int k = 0; k < nops; k++) {
        const tail_spec *s = &sp[k];
        const bsc_case cs = {n, s->C, s->H, s->H, s->K, s->R, s->R, s->stride, s->R / 2, 16, 8, spars,
                             empty && k == 2, 1, 0, s->relu, s->pool};
        bsc_make(&cs, seed + (uint64_t)k, &L[k]);
        const double fan = (1.0 - spars) * s->R * s->R * s->C, scale = 1.0 / sqrt(fan > 1.0 ? fan : 1.0);
        for (size_t e = 0; e < (size_t)L[k].nblocks * 16 * 8; e++) L[k].data[e] *= (float)scale;
        tail_round16(L[k].data, (size_t)L[k].nblocks * 16 * 8);
    }
    tail_round16(L[0].x, L[0].nx);
}

// Worst error of got (the last op's output) against the plain-C chain (each
// conv's output rounded to fp16, as the kernel keeps it), in units of the
// tolerance (fp16 rounding of y over the last conv's scale); *at: where.
static inline double tail_worst(bsc_layer *L, const tail_spec *sp, int nops, const float *got, size_t *at) {
    float *out[TAIL_MAXOPS];
    for (int k = 0; k < nops; k++) {
        const tail_spec *s = &sp[k];
        out[k] = (float *)malloc(L[k].ny * 4);
        bsconv_forward_cpu(&L[k].s, &L[k].w, L[k].bias, s->src < 0 ? L[0].x : out[s->src],
                           s->rsrc < 0 ? NULL : out[s->rsrc], out[k]);
        tail_round16(out[k], L[k].ny);
    }
    const int l = nops - 1;
    const size_t ny = L[l].ny;
    float *keep_x = L[l].x, *wd = bsc_dense_weights(&L[l]);
    double *want = (double *)malloc(ny * 8), *scale = (double *)malloc(ny * 8);
    L[l].x = sp[l].src < 0 ? L[0].x : out[sp[l].src], L[l].z = sp[l].rsrc < 0 ? NULL : out[sp[l].rsrc];
    bsc_dense_conv(&L[l], wd, 1, scale);  // sum |w| |x| + |bias| + |z| per output
    L[l].x = keep_x, L[l].z = NULL;
    for (size_t i = 0; i < ny; i++) want[i] = out[l][i];
    const double ur = 1.0 / 2048;
    const double worst = bsc_worst(got, want, scale, ny, 1.01 * ur, 2.02 * ur, at);
    free(wd), free(want), free(scale);
    for (int k = 0; k < nops; k++) free(out[k]);
    return worst;
}

#endif
