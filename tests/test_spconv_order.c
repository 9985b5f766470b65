// Bit-identity of the tiled CPU sparse convolution (kernels/spconv_cpu.c) with a
// straightforward copy of the old per-plane loop (tests/spconv_cpu_old.h) on random
// layers of awkward shapes: strides 1, 2 and 3, pools with and without padding, borders
// wider than the padding, planes not a multiple of the 4x8 and 4x4 tiles, 2x2 planes, no
// bias and no ReLU, sparsities 0%, 50%, 95% and 100%, linear layers, 1 and 3 images.
// Weights and inputs are scaled by random powers of two (2^-20 .. 2^20), and with cancel
// each row starts with +2^40 and has -2^40 times the same input element in its middle, so
// the terms between are summed onto a large value and round to its grid, those after do
// not, and the float output (the small remainder) shows which were rounded: a change of
// the summation order changes output bits, and test_order_matters shows the comparison
// sees one.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/spconv.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/spconv_cases.h"
#include "tests/spconv_cpu_old.h"

// Awkward shapes; the density column is replaced by each sparsity in turn.
static const spc_shape shapes[] = {
    {"3x3 32x32 tiles", 5, 4, 32, 32, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"3x3 4x4 tiles", 6, 9, 4, 4, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"3x3 odd 13x11", 7, 5, 13, 11, 3, 3, 1, 1, 2, 0, 0, 0, 0, 0, 1, 1.0, 0, 0},
    {"3x3 s2 16x16 border 2", 6, 4, 16, 16, 3, 3, 2, 1, 2, 1, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"5x5 p2 pool 2/2", 5, 3, 12, 12, 5, 5, 1, 2, 2, 1, 2, 2, 0, 1, 1, 1.0, 0, 0},
    {"pool 3/2/1 9x9", 4, 3, 9, 9, 3, 3, 1, 1, 1, 2, 3, 2, 1, 1, 0, 1.0, 0, 0},
    {"1x1 s2 8x7", 9, 6, 8, 7, 1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 1, 1.0, 0, 0},
    {"1x1 s3 pad 1", 7, 5, 11, 10, 1, 1, 3, 1, 2, 1, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"1x3 3x15", 5, 4, 3, 15, 1, 3, 1, 1, 2, 1, 0, 0, 0, 0, 1, 1.0, 0, 0},
    {"8x8 pool 2/2 C40", 5, 40, 8, 8, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 1.0, 0, 0},
    {"7x7 s2 -> 4x4", 6, 11, 7, 7, 3, 3, 2, 1, 2, 0, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"linear", 11, 37, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"3x3 2x2 C20", 5, 20, 2, 2, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"3x3 no bias no relu 10x16", 4, 3, 10, 16, 3, 3, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1.0, 0, 0},
    {"linear no relu", 10, 64, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1.0, 0, 0},
};

// Scales a layer's weights and the interior of its inputs by 2^-20 .. 2^20.
static void widen(spc_layer *L, float *x, size_t nx, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 3);
    const size_t nv = (size_t)L->d.K * L->d.nnz_row;
    for (size_t i = 0; i < nv; i++) L->val[i] = ldexpf(L->val[i], (int)rng_below(&r, 41) - 20);
    for (size_t i = 0; i < nx; i++) x[i] = ldexpf(x[i], (int)rng_below(&r, 41) - 20);
}

// Row k's first entry becomes +2^40, its middle one -2^40 at the first's
// offset: they cancel exactly, but the entries between round against 2^40 x.
static void cancel(spc_layer *L) {
    const int n = L->d.nnz_row;
    for (int k = 0; n >= 2 && k < L->d.K; k++) {
        const size_t u = (size_t)k * n, v = u + n / 2;
        L->val[u] = 0x1p40f, L->val[v] = -0x1p40f, L->off[v] = L->off[u];
    }
}

// Elements where the new and the old kernel differ in any bit on one layer;
// wide: weights and inputs scaled by 2^-20 .. 2^20, else cancelling rows;
// reverse: the old kernel runs on rows with their entries in reverse order.
static size_t diff_bits(const spc_shape *s, int n, uint64_t seed, int wide, int reverse) {
    spc_layer L;
    spc_layer_make(&L, s, SPC_FP32, seed);
    const size_t nx = spc_in_elems(&L.d, n), no = spc_out_elems(&L, n);
    float *x = spc_input(&L.d, n, 0, seed + 1);
    if (wide) widen(&L, x, nx, seed + 2);
    else cancel(&L);
    float *a = calloc(no, sizeof *a), *b = calloc(no, sizeof *b);
    spconv_forward_cpu(&L.d, n, x, a);
    for (int k = 0; reverse && k < L.d.K; k++)
        for (int j = 0; j < L.d.nnz_row / 2; j++) {
            const size_t u = (size_t)k * L.d.nnz_row + j, v = (size_t)(k + 1) * L.d.nnz_row - 1 - j;
            const int32_t o = L.off[u];
            const float w = L.val[u];
            L.off[u] = L.off[v], L.val[u] = L.val[v], L.off[v] = o, L.val[v] = w;
        }
    spold_forward(&L.d, n, x, b);
    size_t bad = 0;
    for (size_t i = 0; i < no; i++) bad += memcmp(a + i, b + i, sizeof *a) != 0;
    free(x), free(a), free(b);
    spc_layer_free(&L);
    return bad;
}

// Every shape at every sparsity, 1 and 3 images, wide and cancelling: no bit differs.
static void test_bit_identical(tctx *t) {
    const double dens[] = {1.0, 0.5, 0.05, 0.0};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int di = 0; di < 4; di++)
            for (int n = 1; n <= 3; n += 2) {
                spc_shape s = shapes[i];
                s.density = dens[di];
                for (int wide = 0; wide < 2; wide++) {
                    const size_t bad = diff_bits(&s, n, 1000 + 10 * i + di, wide, 0);
                    CHECK(t, bad == 0, "%s density %.2f n=%d wide %d: %zu elements differ",
                          s.name, dens[di], n, wide, bad);
                }
            }
}

// The comparison sees a change of summation order: with each row reversed
// for the old kernel, most dense cancelling layers differ in some output bits.
static void test_order_matters(tctx *t) {
    const size_t ns = sizeof shapes / sizeof *shapes;
    size_t seen = 0;
    for (size_t i = 0; i < ns; i++) seen += diff_bits(&shapes[i], 2, 77 + i, 0, 1) > 0;
    CHECK(t, seen * 2 > ns, "reversed rows changed outputs on only %zu of %zu shapes", seen, ns);
}

// Runs every test; exit status 1 when one failed.
int main(void) {
    tctx t = {.suite = "test_spconv_order"};
    RUN(&t, test_bit_identical);
    RUN(&t, test_order_matters);
    return check_finish(&t);
}
