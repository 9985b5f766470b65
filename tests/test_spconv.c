// Tests of the CPU direct sparse convolution (kernels/spconv_cpu.c): offsets
// against hand-computed values, output sizes, and the reference against an
// independent dense convolution in double (densified weights, padding by
// bounds checks, pooling done separately) on random layers of awkward shapes
// and sparsities (0%, 50%, 90%, 99%, a row with no non-zero, skewed row
// lengths), with outputs
// poisoned so that unwritten elements and touched borders show.
//
// Tolerance: max |got - want| / max |want| <= 1e-5 (both sum in double; the
// float output rounds at 6e-8; a missing or misplaced term is >= 1e-2).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/spconv.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/spconv_cases.h"
#include "tests/testutil.h"

#define TOL 1e-5

// Awkward shapes: odd sizes, strides 1, 2 and 3 (1x1), paddings 0-2, borders
// wider than the padding, pools with and without padding, small planes with
// many channels (what the GPU's big pair blocks run).
static const spc_shape shapes[] = {
    {"3x3 odd", 7, 5, 9, 9, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.5, 0, 0},
    {"3x3 s2 wide border", 6, 4, 11, 13, 3, 3, 2, 1, 2, 1, 0, 0, 0, 1, 1, 0.9, 0, 0},
    {"5x5 p2 pool", 5, 3, 12, 12, 5, 5, 1, 2, 2, 1, 2, 2, 0, 1, 1, 0.5, 0, 0},
    {"1x1 s2", 9, 6, 8, 7, 1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 1, 0.5, 0, 0},
    {"1x1 s3 pad 1 empty row", 7, 5, 11, 10, 1, 1, 3, 1, 2, 1, 0, 0, 0, 1, 1, 0.1, 1, 0},
    {"pool 3/2/1", 4, 3, 9, 9, 3, 3, 1, 1, 1, 2, 3, 2, 1, 1, 0, 0.9, 0, 0},
    {"dense", 3, 4, 6, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1.0, 0, 0},
    {"99% + empty row", 8, 9, 7, 7, 3, 3, 1, 1, 1, 0, 2, 2, 0, 1, 1, 0.01, 1, 0},
    {"1x3 no relu", 5, 4, 3, 15, 1, 3, 1, 1, 2, 1, 0, 0, 0, 0, 1, 0.5, 0, 0},
    {"linear", 11, 37, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0.5, 0, 0},
    {"empty layer", 4, 3, 5, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0.0, 0, 0},
    {"small 4x4 C300 pool", 9, 300, 4, 4, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0.05, 1, 0},
    {"small 7x7 s2 -> 4x4 skewed", 13, 31, 7, 7, 3, 3, 2, 1, 2, 0, 0, 0, 0, 1, 1, 0.1, 0, 0.8},
};

// --- offsets and sizes ------------------------------------------------------------

// Offsets of a few columns against values worked out by hand.
static void test_offsets(tctx *t) {
    spconv_desc d = {0};
    d.K = 1, d.C = 2, d.R = 3, d.S = 3, d.stride = 1, d.pad = 1, d.H = 4, d.W = 4;
    d.in_border = 2, d.nnz_row = 4;  // bordered planes 8 x 8, window origin shifted by 1
    const int32_t idx[4] = {0, 4, 8, 9 + 3 * 1 + 2};
    const int32_t want[4] = {1 * 8 + 1, 2 * 8 + 2, 3 * 8 + 3, (8 + 2) * 8 + 3};
    int32_t off[4];
    spconv_offsets(&d, idx, off);
    for (int i = 0; i < 4; i++) CHECK(t, off[i] == want[i], "offset %d: %d, want %d", i, off[i], want[i]);
    d.in_border = 1;  // border equal to the padding: column s of row r at r * 6 + s
    spconv_offsets(&d, idx, off);
    CHECK(t, off[1] == 1 * 6 + 1 && off[3] == (6 + 1) * 6 + 2, "border 1: %d %d", off[1], off[3]);
}

// Output sizes with and without pooling.
static void test_out_size(tctx *t) {
    spconv_desc d = {0};
    int po, qo;
    d.P = 7, d.Q = 8;
    spconv_out_size(&d, &po, &qo);
    CHECK(t, po == 7 && qo == 8, "no pool: %dx%d", po, qo);
    d.pool_k = 2, d.pool_stride = 2;
    spconv_out_size(&d, &po, &qo);
    CHECK(t, po == 3 && qo == 4, "pool 2/2: %dx%d", po, qo);
    d.pool_k = 3, d.pool_pad = 1;
    spconv_out_size(&d, &po, &qo);
    CHECK(t, po == 4 && qo == 4, "pool 3/2/1: %dx%d", po, qo);
}

// --- reference against dense --------------------------------------------------

// Runs the reference on a poisoned output and checks interior, border and guard.
static void check_case(tctx *t, const spc_shape *s, int n, uint64_t seed) {
    spc_layer L;
    spc_layer_make(&L, s, SPC_FP32, seed);
    float *x = spc_input(&L.d, n, 0, seed + 1);
    const size_t no = spc_out_elems(&L, n), ni = (size_t)n * L.d.K * L.po * L.qo;
    float *out = alloc_poisoned(no);
    double *want = malloc((ni ? ni : 1) * sizeof *want);
    spconv_forward_cpu(&L.d, n, x, out);
    spc_dense_ref(&L, n, x, want);
    const int ob = L.d.out_border, hob = L.po + 2 * ob, wob = L.qo + 2 * ob;
    float *got = malloc((ni ? ni : 1) * sizeof *got);
    const float pv = poison_value();
    int border_bad = 0;
    for (size_t pl = 0; pl < (size_t)n * L.d.K; pl++)
        for (int y = 0; y < hob; y++)
            for (int q = 0; q < wob; q++) {
                const float v = out[(pl * hob + y) * wob + q];
                if (spc_is_border(y, q, hob, wob, ob)) border_bad += memcmp(&v, &pv, 4) != 0;
                else got[(pl * L.po + y - ob) * L.qo + q - ob] = v;
            }
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ni; i++) {
        const double e = fabs(got[i] - want[i]);
        num = isnan(got[i]) ? INFINITY : fmax(num, e), den = fmax(den, fabs(want[i]));
    }
    const double rel = den > 0 ? num / den : num;
    CHECK(t, rel <= TOL, "%s n=%d: rel err %.3g", s->name, n, rel);
    CHECK(t, border_bad == 0, "%s: %d border elements written", s->name, border_bad);
    CHECK(t, guard_ok(out, no), "%s: write past the end", s->name);
    free(x), free(out), free(want), free(got);
    spc_layer_free(&L);
}

// Every shape against the dense reference for one and three images.
static void test_reference(tctx *t) {
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        check_case(t, &shapes[i], 1, 100 + i);
        check_case(t, &shapes[i], 3, 200 + i);
    }
}

// The same layer at sparsities 0%, 50%, 90% and 99%.
static void test_sparsities(tctx *t) {
    const double dens[] = {1.0, 0.5, 0.1, 0.01};
    for (int i = 0; i < 4; i++) {
        spc_shape s = {"sparsity", 6, 7, 8, 9, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 1, dens[i], i == 3, 0};
        check_case(t, &s, 2, 300 + i);
    }
}

// Skewed row lengths (log-normal, like real pruned masks): the longest row
// well above the mean, explicit zeros padding the others, and the reference
// still right, at 90% and 99% with an empty row.
static void test_skewed(tctx *t) {
    spc_shape s = {"skewed", 64, 16, 6, 7, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0.1, 0, 0.7};
    spc_layer L;
    spc_layer_make(&L, &s, SPC_FP32, 41);
    long kept = 0;
    int longest = 0;
    for (int k = 0; k < s.K; k++) {
        int c = 0;
        for (int j = 0; j < L.d.nnz_row; j++) c += L.val[(size_t)k * L.d.nnz_row + j] != 0.0f;
        kept += c, longest = c > longest ? c : longest;
    }
    const double ratio = longest * (double)s.K / (double)(kept ? kept : 1);
    CHECK(t, longest == L.d.nnz_row && ratio > 2.0 && ratio < 6.0,
          "skewed rows: longest %d of %d entries, %.2f x the mean", longest, L.d.nnz_row, ratio);
    spc_layer_free(&L);
    check_case(t, &s, 2, 400);
    s.density = 0.01, s.empty_row = 1, s.K = 9;
    check_case(t, &s, 3, 401);
}

// The order of a row's entries does not change the result.
static void test_row_order(tctx *t) {
    spc_layer L;
    spc_layer_make(&L, &shapes[0], SPC_FP32, 7);
    float *x = spc_input(&L.d, 2, 0, 8);
    const size_t no = spc_out_elems(&L, 2);
    float *a = calloc(no, sizeof *a), *b = calloc(no, sizeof *b);
    spconv_forward_cpu(&L.d, 2, x, a);
    const int nnz = L.d.nnz_row;
    for (int k = 0; k < L.d.K; k++)  // reverse each row
        for (int j = 0; j < nnz / 2; j++) {
            const size_t u = (size_t)k * nnz + j, v = (size_t)k * nnz + nnz - 1 - j;
            int32_t o = L.off[u];
            float w = L.val[u];
            L.off[u] = L.off[v], L.val[u] = L.val[v], L.off[v] = o, L.val[v] = w;
        }
    spconv_forward_cpu(&L.d, 2, x, b);
    CHECK(t, relerr(no, b, a) <= 1e-6, "reversed rows differ: %.3g", relerr(no, b, a));
    free(x), free(a), free(b);
    spc_layer_free(&L);
}

// Runs every test; exit status 1 when one failed.
int main(void) {
    tctx t = {.suite = "test_spconv"};
    RUN(&t, test_offsets);
    RUN(&t, test_out_size);
    RUN(&t, test_reference);
    RUN(&t, test_sparsities);
    RUN(&t, test_skewed);
    RUN(&t, test_row_order);
    return check_finish(&t);
}
