// Tests of the CPU activation-sparse convolution (kernels/actconv_cpu.c):
// the offset decoding against spconv_offsets, the layer checks, the
// non-zero lists against a direct scan, and the output against the direct
// sparse reference (spconv_forward_cpu) and an independent dense convolution
// in double, on the cases of tests/actconv_cases.h (odd C/K/H/W, strides 1
// and 2, pads 0-2, 1x1/3x3/5x5, all-zero and all-non-zero inputs, 0/50/95%
// weight sparsity, pools fused and not), outputs poisoned so unwritten
// elements and touched borders show.
//
// Tolerances: against spconv 1e-6 (both sum in double and round once; only
// the order of the additions differs), against the dense double loop 1e-5.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/actconv.h"
#include "kernels/spconv.h"
#include "tests/actconv_cases.h"
#include "tests/check.h"
#include "tests/spconv_cases.h"
#include "tests/testutil.h"

#define TOL_SPCONV 1e-6
#define TOL_DENSE 1e-5

// --- decoding, checks, lists ------------------------------------------------------

// Every column of a few geometries decodes back to its (c, r, s).
static void test_decode(tctx *t) {
    const int geo[][5] = {{3, 3, 1, 1, 1}, {3, 3, 2, 1, 2}, {1, 1, 2, 0, 1}, {5, 5, 1, 2, 2}, {1, 3, 1, 1, 2}};
    for (size_t g = 0; g < sizeof geo / sizeof *geo; g++) {
        spconv_desc d = {0};
        d.K = 1, d.C = 4, d.R = geo[g][0], d.S = geo[g][1], d.stride = geo[g][2];
        d.pad = geo[g][3], d.in_border = geo[g][4], d.H = 6, d.W = 5;
        const int crs = d.C * d.R * d.S;
        int32_t *idx = malloc((size_t)crs * sizeof *idx), *off = malloc((size_t)crs * sizeof *off);
        for (int j = 0; j < crs; j++) idx[j] = j;
        d.nnz_row = crs;
        spconv_offsets(&d, idx, off);
        int bad = 0;
        for (int j = 0; j < crs; j++) {
            int c, r, s;
            bad += actconv_decode(&d, off[j], &c, &r, &s) != 0 || c * d.R * d.S + r * d.S + s != j;
        }
        CHECK(t, bad == 0, "geometry %zu: %d columns decode wrongly", g, bad);
        int c, r, s;
        CHECK(t, actconv_decode(&d, -1, &c, &r, &s) != 0, "negative offset accepted");
        CHECK(t, actconv_decode(&d, (d.H + 2 * d.in_border) * (d.W + 2 * d.in_border) * d.C, &c, &r, &s) != 0,
              "offset past the last channel accepted");
        free(idx), free(off);
    }
}

// Bad layers are refused with a reason, good ones accepted.
static void test_check(tctx *t) {
    spconv_desc d;
    spc_geometry(&acv_cases[0].s, &d);
    sc_err err = {{0}};
    CHECK(t, actconv_check(&d, &err) == 0, "good layer refused: %s", err.msg);
    spconv_desc b = d;
    b.in_border = 0;
    CHECK(t, actconv_check(&b, &err) != 0 && strstr(err.msg, "border"), "border < pad: %s", err.msg);
    b = d, b.P++;
    CHECK(t, actconv_check(&b, &err) != 0, "wrong P accepted");
    b = d, b.W = 70000, b.Q = (b.W + 2 * b.pad - b.S) / b.stride + 1;
    CHECK(t, actconv_check(&b, &err) != 0, "width 70000 accepted");
    b = d, b.pool_k = 2, b.pool_stride = 0;
    CHECK(t, actconv_check(&b, &err) != 0, "pool stride 0 accepted");
    b = d, b.K = 0;
    CHECK(t, actconv_check(&b, &err) != 0, "K 0 accepted");
}

// The lists hold exactly the interior's non-zeros of each row, in column order.
static void test_lists(tctx *t) {
    const acv_case *c = &acv_cases[1];
    spc_layer L;
    spc_layer_make(&L, &c->s, SPC_FP32, 7);
    const int n = 3, ib = L.d.in_border, hb = L.d.H + 2 * ib, wb = L.d.W + 2 * ib;
    float *x = spc_input(&L.d, n, 0, 8);
    acv_sparsify(&L.d, n, x, c->zeros, 9);
    actconv_nz z;
    sc_err err = {{0}};
    if (actconv_nz_alloc(&z, &L.d, n, &err)) {
        CHECK(t, 0, "alloc: %s", err.msg);
        return;
    }
    actconv_nz_build(&L.d, n, x, &z);
    long bad = 0, zeros = 0;
    for (long row = 0; row < (long)n * L.d.C * L.d.H; row++) {
        const float *xr = x + ((size_t)(row / L.d.H) * hb + row % L.d.H + ib) * wb + ib;
        int k = 0;
        for (int q = 0; q < L.d.W; q++) {
            zeros += xr[q] == 0.0f;
            if (xr[q] == 0.0f) continue;
            bad += k >= z.cnt[row] || z.col[row * L.d.W + k] != q || z.val[row * L.d.W + k] != xr[q];
            k++;
        }
        bad += k != z.cnt[row];
    }
    CHECK(t, bad == 0, "%ld list entries wrong", bad);
    const double frac = actconv_zero_fraction(&L.d, n, x);
    CHECK(t, fabs(frac - (double)zeros / ((double)n * L.d.C * L.d.H * L.d.W)) < 1e-12,
          "zero fraction %g", frac);
    CHECK(t, frac > 0.4 && frac < 0.6, "zero fraction %g, asked 0.5", frac);
    actconv_nz_free(&z);
    free(x);
    spc_layer_free(&L);
}

// --- the output ---------------------------------------------------------------------

// One case for n images: actconv against spconv and the dense double loop.
static void one_case(tctx *t, const acv_case *c, int n, uint64_t seed) {
    spc_layer L;
    spc_layer_make(&L, &c->s, SPC_FP32, seed);
    float *x = spc_input(&L.d, n, 0, seed + 1);
    acv_sparsify(&L.d, n, x, c->zeros, seed + 2);
    const size_t no = spc_out_elems(&L, n);
    float *got = alloc_poisoned(no), *want = alloc_poisoned(no), *dense = alloc_poisoned(no);
    double *dd = malloc((size_t)n * L.d.K * L.po * L.qo * sizeof *dd);
    actconv_nz z;
    sc_err err = {{0}};
    CHECK(t, actconv_check(&L.d, &err) == 0, "%s: check: %s", c->s.name, err.msg);
    if (actconv_nz_alloc(&z, &L.d, n, &err) == 0) {
        actconv_nz_build(&L.d, n, x, &z);
        actconv_forward_cpu(&L.d, n, &z, got);
        actconv_nz_free(&z);
    }
    spconv_forward_cpu(&L.d, n, x, want);
    spc_dense_ref(&L, n, x, dd);
    const int ob = L.d.out_border, hob = L.po + 2 * ob, wob = L.qo + 2 * ob;
    for (size_t i = 0; i < (size_t)n * L.d.K * L.po * L.qo; i++) {  // dense into the bordered layout
        const size_t pl = i / ((size_t)L.po * L.qo), e = i % ((size_t)L.po * L.qo);
        dense[(pl * hob + e / L.qo + ob) * wob + e % L.qo + ob] = (float)dd[i];
    }
    size_t border = 0, b2 = 0;
    const double e1 = acv_out_err(&L, n, got, want, &border), e2 = acv_out_err(&L, n, got, dense, &b2);
    CHECK(t, e1 <= TOL_SPCONV && border == 0 && guard_ok(got, no),
          "%s n=%d: vs spconv rel err %.3g, %zu border elements written", c->s.name, n, e1, border);
    CHECK(t, e2 <= TOL_DENSE, "%s n=%d: vs dense rel err %.3g", c->s.name, n, e2);
    free(x), free(got), free(want), free(dense), free(dd);
    spc_layer_free(&L);
}

// Every case with 1 and 3 images.
static void test_cases(tctx *t) {
    for (int c = 0; c < ACV_NCASES; c++) {
        one_case(t, &acv_cases[c], 1, 100 + 10 * (uint64_t)c);
        one_case(t, &acv_cases[c], 3, 105 + 10 * (uint64_t)c);
    }
}

// A zero input gives pool(relu(bias)) in every pixel (no product at all).
static void test_zero_input(tctx *t) {
    const acv_case *c = &acv_cases[9];
    spc_layer L;
    spc_layer_make(&L, &c->s, SPC_FP32, 55);
    const int n = 2;
    float *x = calloc(spc_in_elems(&L.d, n), sizeof *x);
    const size_t no = spc_out_elems(&L, n);
    float *got = alloc_poisoned(no);
    actconv_nz z;
    sc_err err = {{0}};
    if (actconv_nz_alloc(&z, &L.d, n, &err) == 0) {
        actconv_nz_build(&L.d, n, x, &z);
        actconv_forward_cpu(&L.d, n, &z, got);
        actconv_nz_free(&z);
    }
    const int ob = L.d.out_border, hob = L.po + 2 * ob, wob = L.qo + 2 * ob;
    long bad = 0;
    for (size_t i = 0; i < no; i++) {
        const int y = (int)(i / wob % hob), q = (int)(i % wob), k = (int)(i / ((size_t)hob * wob) % L.d.K);
        if (spc_is_border(y, q, hob, wob, ob)) continue;
        const float b = L.bias[k] > 0.0f ? L.bias[k] : 0.0f;
        bad += got[i] != b;
    }
    CHECK(t, bad == 0, "%ld pixels differ from relu(bias)", bad);
    CHECK(t, actconv_zero_fraction(&L.d, n, x) == 1.0, "zero fraction of zeros");
    free(x), free(got);
    spc_layer_free(&L);
}

int main(void) {
    tctx t = {.suite = "test_actconv"};
    RUN(&t, test_decode);
    RUN(&t, test_check);
    RUN(&t, test_lists);
    RUN(&t, test_cases);
    RUN(&t, test_zero_input);
    return check_finish(&t);
}
