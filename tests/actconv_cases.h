// Cases of the activation-sparse convolution tests (tests/test_actconv.c and
// tests/gpu_test_actconv.c): layers of awkward shapes from spconv_cases.h
// (odd C/K/H/W, strides 1 and 2, pads 0-2, 1x1, 3x3 and 5x5, 0/50/95%
// weight sparsity, pools fused or not, a linear layer) each with a fraction
// of zeros in its input (0: every element non-zero, 1: all zero), and the
// comparison of a bordered output with a reference (interior within a
// tolerance, border still poisoned). Header-only, like spconv_cases.h.
#ifndef SC_TESTS_ACTCONV_CASES_H
#define SC_TESTS_ACTCONV_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/spconv.h"
#include "runtime/rng.h"
#include "tests/spconv_cases.h"

// A layer shape and the fraction of its input that is zero.
typedef struct {
    spc_shape s;
    double zeros;
} acv_case;

// name, K, C, H, W, R, S, stride, pad, in border, out border, pool k/stride/pad, relu,
// bias, weight density, empty row, skew; input zero fraction.
static const acv_case acv_cases[] = {
    {{"3x3 odd", 7, 5, 9, 11, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, 0.6},
    {{"3x3 s2 wide border 95%", 9, 6, 13, 11, 3, 3, 2, 1, 2, 1, 0, 0, 0, 1, 1, 0.05, 1, 0}, 0.5},
    {{"3x3 p0 dense weights", 5, 3, 8, 7, 3, 3, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1.0, 0, 0}, 0.3},
    {{"1x1 s1", 11, 13, 7, 9, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 0.5, 0, 0}, 0.7},
    {{"1x1 s2 p0", 6, 9, 9, 8, 1, 1, 2, 0, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, 0.5},
    {{"1x1 s2 p1", 5, 4, 7, 7, 1, 1, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, 0.4},
    {{"pool 2/2 odd", 8, 5, 9, 9, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.5, 0, 0}, 0.5},
    {{"pool 3/2/1 95%", 4, 3, 9, 10, 3, 3, 1, 1, 1, 2, 3, 2, 1, 1, 0, 0.05, 0, 0}, 0.5},
    {{"s2 pool", 6, 5, 12, 13, 3, 3, 2, 1, 1, 0, 2, 2, 0, 1, 1, 0.5, 0, 0}, 0.8},
    {{"all-zero input", 5, 4, 7, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.5, 0, 0}, 1.0},
    {{"all-zero input pool", 5, 4, 8, 8, 3, 3, 1, 1, 1, 1, 2, 2, 0, 0, 1, 0.5, 0, 0}, 1.0},
    {{"all-non-zero input", 6, 5, 8, 8, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, 0.0},
    {{"95% pool no relu", 10, 7, 11, 9, 3, 3, 1, 1, 1, 1, 2, 2, 0, 0, 1, 0.05, 1, 0}, 0.5},
    {{"1x1 dense all-non-zero", 7, 6, 5, 5, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1.0, 0, 0}, 0.0},
    {{"linear", 11, 37, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0.5, 0, 0}, 0.5},
    {{"5x5 p2", 5, 3, 12, 12, 5, 5, 1, 2, 2, 1, 0, 0, 0, 1, 1, 0.5, 0, 0}, 0.5},
    {{"32x32 90% skewed", 24, 16, 32, 32, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.1, 0, 0.8}, 0.6},
    {{"K70 C40 8x8", 70, 40, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0.3, 0, 0}, 0.5},
    {{"16x16 pool K40 95%", 40, 20, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.05, 0, 0}, 0.7},
    {{"17x15 s2 pool 3/2/1", 33, 9, 17, 15, 3, 3, 2, 1, 1, 1, 3, 2, 1, 1, 1, 0.5, 0, 0}, 0.5},
};
#define ACV_NCASES ((int)(sizeof acv_cases / sizeof *acv_cases))

// Sets a fraction `zeros` of the interior of a bordered input (from
// spc_input) to zero: every element when zeros >= 1, none when zeros <= 0.
static inline void acv_sparsify(const spconv_desc *d, int n, float *x, double zeros, uint64_t seed) {
    rng r;
    rng_seed(&r, seed, 29);
    const int ib = d->in_border, hb = d->H + 2 * ib, wb = d->W + 2 * ib;
    for (size_t pl = 0; pl < (size_t)n * d->C; pl++)
        for (int y = 0; y < d->H; y++)
            for (int q = 0; q < d->W; q++) {
                float *v = &x[(pl * hb + y + ib) * wb + q + ib];
                if (zeros >= 1.0 || (zeros > 0.0 && rng_uniform(&r) < zeros)) *v = 0.0f;
                else if (*v == 0.0f) *v = 0.5f;  // "all non-zero" means all
            }
}

// Max |got - ref| / max |ref| over the interior of a bordered output of n
// images (a NaN counts as infinite; num alone when ref is all zero); *border
// receives how many border elements of got are not NaN (they must stay
// poisoned).
static inline double acv_out_err(const spc_layer *L, int n, const float *got, const float *ref,
                                 size_t *border) {
    const int ob = L->d.out_border, hob = L->po + 2 * ob, wob = L->qo + 2 * ob;
    const size_t no = (size_t)n * L->d.K * hob * wob;
    double num = 0.0, den = 0.0;
    *border = 0;
    for (size_t i = 0; i < no; i++) {
        const int y = (int)(i / wob % hob), x = (int)(i % wob);
        if (spc_is_border(y, x, hob, wob, ob)) {
            *border += !isnan(got[i]);
            continue;
        }
        const double e = isnan(got[i]) ? INFINITY : fabs((double)got[i] - ref[i]);
        num = e > num ? e : num;
        den = fabs(ref[i]) > den ? fabs(ref[i]) : den;
    }
    return den > 0 ? num / den : num;
}

#endif
