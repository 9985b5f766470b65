// The block-sparse conv's plain-C reference (kernels/bsconv.h) against an
// independent dense direct convolution in double, on random layers of
// awkward shapes: strides 1 and 2, 1x1 and 3x3 (and 5x3) kernels, padding,
// blocks 8x1, 16x1, 16x8, 32x8, narrow (2x1, 3x3, 4x4, 1x1) and wide (72x8,
// 128x8) ones, C not a multiple of 8, empty block rows, block sparsity
// 0% to 100%, bias / residual / ReLU on and off, 2x2 and 4x4 max pools. The packed layout of the
// CUDA kernel (bsconv_pack) and the loops of the halo and direct kernels are
// walked in plain C on the same cases, the packed invariants are checked, bad layers are rejected, and the comparison is
// shown to catch a planted error.
//
// Tolerance: fp32 accumulation against double, |err| <= 1e-5 * sum |terms|.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv.h"
#include "kernels/bsconv_direct.h"
#include "kernels/bsconv_halo.h"
#include "kernels/bsconv_vec.h"
#include "tests/bsconv_cases.h"
#include "tests/check.h"

#define TOL_ABS 1e-5

// The cases both walks are checked on.
static const bsc_case CASES[] = {
    // n  C   H   W   K  R  S st pad kb cb  sparsity empty bias res relu pool
    {2, 16, 7, 5, 16, 3, 3, 1, 1, 8, 1, 0.5, 0, 1, 0, 1, 0},
    {3, 24, 9, 9, 32, 3, 3, 2, 1, 16, 8, 0.5, 1, 1, 1, 1, 0},
    {1, 32, 6, 11, 48, 1, 1, 1, 0, 16, 1, 0.9, 0, 0, 1, 0, 0},
    {2, 16, 8, 7, 64, 1, 1, 2, 0, 32, 8, 0.5, 0, 1, 0, 0, 0},
    {1, 12, 5, 6, 10, 3, 3, 1, 1, 2, 1, 0.3, 1, 1, 1, 1, 0},   // kb < 8: merged rows
    {2, 9, 7, 7, 12, 3, 3, 2, 1, 4, 3, 0.5, 0, 1, 0, 1, 0},    // C, cb not multiples of 8
    {1, 12, 5, 5, 8, 5, 3, 1, 2, 4, 4, 0.0, 0, 0, 0, 1, 0},    // dense, 5x3
    {1, 16, 6, 6, 144, 3, 3, 1, 1, 72, 8, 0.6, 1, 1, 1, 0, 0}, // kb > 64: slices
    {1, 8, 4, 5, 128, 1, 1, 1, 0, 128, 8, 0.0, 0, 1, 0, 1, 0}, // one 128-wide block row
    {2, 16, 5, 5, 24, 3, 3, 1, 1, 8, 8, 1.0, 0, 1, 1, 1, 0},   // all blocks pruned
    {1, 16, 9, 7, 16, 3, 3, 2, 0, 8, 1, 0.95, 0, 1, 0, 0, 0},
    {1, 3, 11, 11, 8, 3, 3, 1, 1, 1, 1, 0.5, 0, 1, 0, 1, 0},   // first layer, 1x1 blocks
    {2, 16, 9, 7, 16, 3, 3, 1, 1, 8, 8, 0.5, 0, 1, 0, 1, 2},    // 2x2 max pool, odd plane
    {1, 12, 10, 9, 20, 3, 3, 1, 1, 4, 4, 0.3, 1, 1, 0, 0, 2},   // pool without ReLU, kb < 8
    {1, 8, 9, 9, 16, 1, 1, 1, 0, 16, 1, 0.5, 0, 1, 0, 1, 4},    // 4x4 max pool
    {3, 96, 5, 6, 32, 3, 3, 1, 1, 16, 8, 0.7, 1, 1, 1, 1, 0},   // 3 chunks of 32, several images per tile
    {2, 40, 7, 9, 24, 3, 3, 2, 1, 8, 8, 0.5, 0, 1, 0, 1, 0},    // chunks of 8 channels, stride 2
    {2, 64, 6, 7, 16, 3, 3, 1, 1, 4, 8, 0.5, 0, 1, 0, 1, 2},    // kb 4 (merged rows), 2x2 pool
    {1, 128, 4, 4, 64, 3, 3, 1, 1, 64, 8, 0.8, 0, 1, 1, 1, 0},  // 64-channel groups, 2 chunks
    {4, 16, 3, 3, 8, 1, 1, 1, 0, 8, 16, 0.0, 0, 1, 0, 1, 0},    // cb 16, dense
    {2, 32, 13, 11, 16, 3, 3, 2, 1, 16, 8, 0.5, 0, 1, 0, 0, 2}, // stride 2 and a pool
    {3, 24, 9, 11, 16, 1, 1, 2, 0, 8, 8, 0.5, 0, 1, 1, 0, 0},   // 1x1 stride 2, odd plane, residual
    {2, 32, 9, 9, 24, 3, 3, 1, 1, 8, 1, 0.9, 1, 1, 1, 1, 0},    // 8x1, an empty row, residual
    {1, 16, 10, 6, 16, 3, 3, 1, 1, 8, 2, 0.5, 0, 1, 0, 1, 2},   // 8x2 and a 2x2 pool
    {5, 8, 3, 2, 40, 3, 3, 1, 1, 8, 1, 0.99, 0, 0, 1, 0, 0},    // a tiny plane, many images per tile
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

// Which walk a comparison runs: the reference, the gather kernel's packed
// layout, the halo kernel's loops with 32-, 64- or 128-pixel tiles, then
// 32-pixel tiles with the chunks split in two and in one slice per chunk,
// the direct kernel's loops, and the vector kernel's with 16-, 32- or 64-pixel tiles.
enum { WALK_REF, WALK_PACKED, WALK_HALO32, WALK_HALO64, WALK_HALO128, WALK_SPLIT2, WALK_SPLITALL, WALK_DIRECT,
       WALK_VEC16, WALK_VEC32, WALK_VEC64 };

// The vector kernel's loops with tiles of at most tm pixels; 1 when the kernel does not apply.
static int run_vec(const bsc_layer *L, int tm, float *y, sc_err *err) {
    if (!bsconv_vec_applies(&L->s, &L->w, NULL, 0)) return 1;
    bsconv_vpack p;
    SC_TRY(bsconv_vpack_build(&L->s, &L->w, &p, err));
    const int rc = bsconv_vec_forward_cpu(&L->s, &p, tm, L->bias, L->x, L->z, y, err);
    bsconv_vpack_free(&p);
    return rc;
}

// The direct kernel's loops; 1 when the kernel does not apply.
static int run_direct(const bsc_layer *L, float *y, sc_err *err) {
    if (!bsconv_direct_applies(&L->s, &L->w, NULL, 0)) return 1;
    bsconv_hpack h;
    SC_TRY(bsconv_hpack_build(&L->s, &L->w, &h, err));
    bsconv_direct_forward_cpu(&L->s, &h, L->bias, L->x, L->z, y);
    bsconv_hpack_free(&h);
    return 0;
}

// The halo kernel's loops with tiles of tm pixels, the chunks in nsplit slices
// (0: one per chunk); 1 when the kernel does not apply.
static int run_halo(const bsc_layer *L, int tm, int nsplit, float *y, sc_err *err) {
    if (!bsconv_halo_applies(&L->s, &L->w, NULL, 0)) return 1;
    bsconv_hpack h;
    SC_TRY(bsconv_hpack_build(&L->s, &L->w, &h, err));
    bsconv_htile t;
    bsconv_htile_pick(&L->s, tm, h.cc, &t);
    bsconv_halo_forward_cpu(&L->s, &h, &t, nsplit ? nsplit : h.nchunks, L->bias, L->x, L->z, y);
    bsconv_hpack_free(&h);
    return 0;
}

// Runs one walk of layer L into y; returns 0, -1 (packing failed) or 1 (the walk does not apply).
static int run_walk(const bsc_layer *L, int walk, float *y, sc_err *err) {
    if (walk == WALK_REF) {
        bsconv_forward_cpu(&L->s, &L->w, L->bias, L->x, L->z, y);
        return 0;
    }
    if (walk == WALK_DIRECT) return run_direct(L, y, err);
    if (walk >= WALK_VEC16) return run_vec(L, 16 << (walk - WALK_VEC16), y, err);
    if (walk == WALK_SPLIT2 || walk == WALK_SPLITALL) return run_halo(L, 32, walk == WALK_SPLIT2 ? 2 : 0, y, err);
    if (walk >= WALK_HALO32) return run_halo(L, 32 << (walk - WALK_HALO32), 1, y, err);
    bsconv_packed pk;
    SC_TRY(bsconv_pack(&L->s, &L->w, &pk, err));
    bsconv_packed_forward_cpu(&L->s, &pk, L->bias, L->x, L->z, y);
    bsconv_packed_free(&pk);
    return 0;
}

// Checks one walk against the dense double conv on every case it applies to
// (counted), the layers hybrid with a remainder of this density when rem > 0.
static void check_walk_rem(tctx *t, int walk, double rem, int *applied) {
    for (int ci = 0; ci < NCASES; ci++) {
        bsc_layer L;
        char name[160];
        sc_err err = {{0}};
        bsc_case_name(&CASES[ci], name, sizeof name);
        bsc_make(&CASES[ci], 100 + ci, &L);
        if (rem > 0) {
            bsc_add_rem(&L, rem, 900 + ci);
            snprintf(name + strlen(name), sizeof name - strlen(name), " rem %d", L.rem_indptr[L.s.K]);
        }
        CHECK(t, bsconv_check(&L.s, &L.w, &err) == 0, "%s: %s", name, err.msg);
        float *wd = bsc_dense_weights(&L), *y = malloc(L.ny * sizeof *y);
        double *want = malloc(L.ny * sizeof *want), *scale = malloc(L.ny * sizeof *scale);
        for (size_t i = 0; i < L.ny; i++) y[i] = NAN;
        bsc_dense_conv(&L, wd, 0, want);
        bsc_dense_conv(&L, wd, 1, scale);
        size_t at;
        const int rc = run_walk(&L, walk, y, &err);
        CHECK(t, rc >= 0, "%s: %s", name, err.msg);
        if (rc == 1) {
            free(wd), free(y), free(want), free(scale);
            bsc_free(&L);
            continue;
        }
        *applied += 1;
        const double e = bsc_worst(y, want, scale, L.ny, 0.0, TOL_ABS, &at);
        CHECK(t, e <= 1.0, "%s: y[%zu] = %.9g, want %.9g (%.3g x tolerance)", name, at, y[at],
              want[at], e);
        free(wd), free(y), free(want), free(scale);
        bsc_free(&L);
    }
}

// Checks one walk on the cases as generated (no remainder).
static void check_walk(tctx *t, int walk, int *applied) { check_walk_rem(t, walk, 0.0, applied); }

// The BSR reference against the dense conv.
static void test_reference_vs_dense(tctx *t) {
    int n = 0;
    check_walk(t, WALK_REF, &n);
}

// The kernel's packed layout, walked in C, against the dense conv.
static void test_packed_vs_dense(tctx *t) {
    int n = 0;
    check_walk(t, WALK_PACKED, &n);
}

// The halo kernel's loops, in C, against the dense conv, three tile sizes;
// the kernel applies to the cases with 8-channel aligned blocks.
static void test_halo_vs_dense(tctx *t) {
    for (int w = WALK_HALO32; w <= WALK_HALO128; w++) {
        int n = 0;
        check_walk(t, w, &n);
        CHECK(t, n == 11, "the halo walk ran %d cases (11 apply)", n);
    }
}

// The split variants' loops in C: the chunks in two slices and in one slice
// per chunk, each slice summed apart, against the dense conv.
static void test_halo_split_vs_dense(tctx *t) {
    for (int w = WALK_SPLIT2; w <= WALK_SPLITALL; w++) {
        int n = 0;
        check_walk(t, w, &n);
        CHECK(t, n == 11, "the split walk ran %d cases (11 apply)", n);
    }
}

// The direct kernel's loops, in C, against the dense conv (the same cases as the halo kernel's).
static void test_direct_vs_dense(tctx *t) {
    int n = 0;
    check_walk(t, WALK_DIRECT, &n);
    CHECK(t, n == 11, "the direct walk ran %d cases (11 apply)", n);
}

// The vector kernel's loops, in C, against the dense conv, three tile sizes;
// the kernel applies to the cases with blocks of 8k output channels, C a
// multiple of 8 and no 4x4 pool.
static void test_vec_vs_dense(tctx *t) {
    for (int w = WALK_VEC16; w <= WALK_VEC64; w++) {
        int n = 0;
        check_walk(t, w, &n);
        CHECK(t, n == 18, "the vector walk ran %d cases (18 apply)", n);
    }
}

// The vector tiles cover the y plane: over all tiles and rows, each y pixel
// is written by exactly pool^2 rows (a whole window), rows stay within tm and
// every read of a row's window (any tap, any channel) stays in the window.
static void test_vec_tiles(tctx *t) {
    const bsconv_shape shapes[] = {
        {128, 64, 32, 32, 64, 3, 3, 1, 1, 1, 0}, {128, 64, 32, 32, 128, 3, 3, 2, 1, 1, 0},
        {128, 512, 4, 4, 512, 3, 3, 1, 1, 1, 0}, {7, 24, 9, 11, 16, 3, 3, 1, 1, 1, 2},
        {5, 16, 2, 3, 8, 3, 3, 1, 1, 0, 2},      {3, 8, 13, 7, 8, 1, 1, 2, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int tm = 16; tm <= 64; tm *= 2) {
            bsv_geom g;
            bsconv_vgeom_of(&shapes[i], tm, &g);
            const size_t ny = (size_t)g.n * g.Po * g.Qo;
            int *hits = calloc(ny, sizeof *hits), bad = g.tm > tm || g.tm < 1;
            const long long win = (bsconv_vec_smem(&g) - BSV_TABLE_BYTES) / 2;
            const uint32_t last = (uint32_t)(g.C - 1) | (uint32_t)(g.S - 1) << 16 | (uint32_t)(g.R - 1) << 24;
            for (int tt = 0; tt < g.nti * g.ntr * g.ntq; tt++)
                for (int m = 0; m < tm; m++) {
                    int base, out;
                    bsv_row(&g, tt, m, &base, &out);
                    if (out < 0) continue;
                    hits[out]++;
                    bad |= m >= g.tm || base + bsv_off(&g, last) >= win;
                }
            for (size_t o = 0; o < ny; o++) bad |= hits[o] != g.pool * g.pool;
            CHECK(t, !bad, "shape %zu, tiles of %d: a y pixel missed or written twice, or a read past the window", i, tm);
            free(hits);
        }
}

// 1 when each 8 slots of row order `order` (stride 1, no pool) hold pixels
// at window positions ii ip + rr hw + qq whose 16-byte slots differ mod 8,
// the position computed from the row's place in the tile, not from bsv_row.
static int order_spread(const bsv_geom *g, const unsigned char *order) {
    for (int m0 = 0; m0 < g->tm; m0 += 8) {
        unsigned seen = 0;
        for (int m = m0; m < m0 + 8 && m < g->tm; m++) {
            const int r = order[m], ii = r / (g->tr * g->tq), rr = r / g->tq % g->tr, qq = r % g->tq;
            const unsigned bit = 1u << ((ii * g->ip + rr * g->hw + qq) * g->ldc / 8 % 8);
            if (seen & bit) return 0;
            seen |= bit;
        }
    }
    return 1;
}

// The vector kernel's row order is a permutation of the tile's rows
// (identity past tm and where kept), never has more clashing 8-row groups
// than the tile's own order, and has none on a 4x4 plane in tiles of two
// images (whose own order wraps rows 6 and 7 onto rows 0 and 1's banks) nor
// on a 2x2 plane in tiles of 8 images (the image pitch moves every other
// image's window onto the other bank groups).
static void test_vec_row_order(tctx *t) {
    const bsconv_shape shapes[] = {
        {128, 64, 32, 32, 64, 3, 3, 1, 1, 1, 0}, {128, 512, 4, 4, 512, 3, 3, 1, 1, 1, 0},
        {128, 256, 8, 8, 256, 3, 3, 1, 1, 1, 0}, {128, 512, 2, 2, 512, 3, 3, 1, 1, 1, 0},
        {7, 24, 9, 11, 16, 3, 3, 1, 1, 1, 0},    {3, 8, 13, 7, 8, 1, 1, 2, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int tm = 16; tm <= 64; tm *= 2)
            for (int keep = 0; keep < 2; keep++) {
                bsv_geom g;
                bsconv_vgeom_of(&shapes[i], tm, &g);
                unsigned char order[BSV_TM_MAX], own[BSV_TM_MAX];
                bsconv_vec_row_order(&g, keep, order);
                int seen[BSV_TM_MAX] = {0}, bad = 0;
                for (int m = 0; m < BSV_TM_MAX; m++) {
                    own[m] = (unsigned char)m;
                    bad |= order[m] >= BSV_TM_MAX || seen[order[m]]++ || (m >= g.tm && order[m] != m) ||
                           (keep && order[m] != m);
                }
                const int have = bsconv_vec_row_clashes(&g, order), was = bsconv_vec_row_clashes(&g, own);
                bad |= have > was || ((i == 1 || i == 3) && tm == 32 && !keep && !order_spread(&g, order));
                CHECK(t, !bad, "shape %zu, tiles of %d, keep %d: not a permutation, or %d clashing groups (own order %d)",
                      i, tm, keep, have, was);
            }
}

// The vector pack deals each group's columns over its half-steps (k 0-7,
// 8-15) by bank group in the transposed window: 16-byte row (s C + c) hrp +
// r mod 8, hrp = (7 stride + R) | 1, computed here independently. A
// half-step may hold two codes of one bank group only where the group has
// more columns of it than there are half-steps; codes stay in the filter.
static void test_vec_bank_groups(tctx *t) {
    int n = 0, bad = 0;
    for (int si = 0; si < BSC_GPU_SHAPES; si++)
        for (int pi = 1; pi <= 3; pi++) {  // 50%, 95%, 99%
            const bsc_case c = bsc_gpu_case(si, pi);
            bsc_layer L;
            bsc_make(&c, 7 + (uint64_t)si, &L);
            bsconv_vpack p;
            sc_err err;
            if (!bsconv_vec_applies(&L.s, &L.w, NULL, 0) || bsconv_vpack_build(&L.s, &L.w, &p, &err)) {
                bsc_free(&L);
                continue;
            }
            const unsigned hrp = (unsigned)((7 * L.s.stride + L.s.R) | 1);
            for (int g = 0; g < p.ng; g++) {
                const int s0 = p.gstart[g], nh = 2 * (p.gstart[g + 1] - s0);
                int per[8] = {0};  // the group's real columns (a non-zero weight) per bank group
                for (int k = s0 * BSV_KSTEP; k < p.gstart[g + 1] * BSV_KSTEP; k++) {
                    const uint32_t cd = p.codes[k];
                    const int st = k / BSV_KSTEP, kk = k % BSV_KSTEP;
                    bad |= (int)(cd & 0xFFFFu) >= L.s.C || (int)(cd >> 16 & 255u) >= L.s.S || (int)(cd >> 24) >= L.s.R;
                    int real = 0;  // vals layout: kernels/bsconv_vec.h (lane 4 n + k % 8 / 2, element k % 2 + 2 (k / 8))
                    for (int nn = 0; nn < BSV_NG; nn++)
                        real |= p.vals[((size_t)st * 32 + nn * 4 + (kk % 8) / 2) * 4 + (kk & 1) + 2 * (kk / 8)] != 0.0f;
                    if (real) per[(((cd >> 16 & 255u) * (unsigned)L.s.C + (cd & 0xFFFFu)) * hrp + (cd >> 24)) & 7u]++;
                }
                for (int h = 0; h < nh; h++) {
                    int seen[8] = {0};
                    for (int k = 0; k < 8; k++) {
                        const uint32_t cd = p.codes[(s0 + h / 2) * BSV_KSTEP + (h % 2) * 8 + k];
                        const int x = (int)((((cd >> 16 & 255u) * (unsigned)L.s.C + (cd & 0xFFFFu)) * hrp + (cd >> 24)) & 7u);
                        bad |= seen[x]++ && per[x] <= nh;
                    }
                }
            }
            n++;
            bsconv_vpack_free(&p);
            bsc_free(&L);
        }
    CHECK(t, n > 10 && !bad, "%d layers packed; a half-step holds two codes of one bank group it need not, or a code "
                            "leaves the filter", n);
}

// Pairs of one lane class ((c / 2) % 4) among the 4 codes at k = k0 + side + 2 i.
static int class_clashes(const uint32_t *codes, int k0, int side) {
    int n = 0;
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            n += (codes[k0 + side + 2 * i] >> 1 & 3u) == (codes[k0 + side + 2 * j] >> 1 & 3u);
    return n;
}

// The fewest same-class pairs any split of the 8 codes at k0 .. k0 + 7 into two 4s has (all 70 tried).
static int fewest_clashes(const uint32_t *codes, int k0) {
    int best = 99;
    for (unsigned m = 0; m < 256; m++) {
        if (__builtin_popcount(m) != 4) continue;
        uint32_t a[8];
        for (int k = 0, e = 0, o = 1; k < 8; k++) {
            if (m >> k & 1) a[e] = codes[k0 + k], e += 2;
            else a[o] = codes[k0 + k], o += 2;
        }
        const int n = class_clashes(a, 0, 0) + class_clashes(a, 0, 1);
        if (n < best) best = n;
    }
    return best;
}

// The vector pack puts each half-step's columns on its even and odd k (one
// shared load each) with as few pairs of one lane class (c / 2) % 4 as any
// split of those 8 columns has: such a pair reads one bank for two pixels.
static void test_vec_lane_classes(tctx *t) {
    int n = 0, bad = 0, halves = 0;
    for (int si = 0; si < BSC_GPU_SHAPES; si++)
        for (int pi = 1; pi <= 3; pi++) {
            const bsc_case c = bsc_gpu_case(si, pi);
            bsc_layer L;
            bsc_make(&c, 11 + (uint64_t)si, &L);
            bsconv_vpack p;
            sc_err err;
            if (!bsconv_vec_applies(&L.s, &L.w, NULL, 0) || bsconv_vpack_build(&L.s, &L.w, &p, &err)) {
                bsc_free(&L);
                continue;
            }
            for (int k0 = 0; k0 < p.nsteps * BSV_KSTEP; k0 += 8, halves++) {
                const int have = class_clashes(p.codes, k0, 0) + class_clashes(p.codes, k0, 1);
                bad += have != fewest_clashes(p.codes, k0);
            }
            n++;
            bsconv_vpack_free(&p);
            bsc_free(&L);
        }
    CHECK(t, n > 10 && !bad, "%d layers packed; %d of %d half-steps have more same-class pairs than they need", n, bad,
          halves);
}

// The direct codes keep each unit's tap and put its chunk into the channel:
// chunk c's slot j is input channel c cc + 8 j (three chunks of 32 here).
static void test_direct_codes(tctx *t) {
    bsc_layer L;
    bsconv_hpack h;
    sc_err err = {{0}};
    bsc_make(&CASES[15], 7, &L);
    CHECK(t, bsconv_hpack_build(&L.s, &L.w, &h, &err) == 0, "%s", err.msg);
    CHECK(t, h.nchunks == 3 && h.cc == 32, "%d chunks of %d", h.nchunks, h.cc);
    uint32_t *du = malloc(((size_t)h.nunits + 1) * sizeof *du);
    bsconv_direct_codes(&h, du);
    int bad = 0, seen[3] = {0};
    for (int i = 0; i < h.ngroups * h.nchunks; i++)
        for (int u = h.ustart[i]; u < h.ustart[i + 1]; u++) {
            const int c = i % h.nchunks, ch = (int)(du[u] >> 16);
            bad += (du[u] & 0xFFFFu) != (h.units[u] & 0xFFFFu) || ch != c * 32 + (int)(h.units[u] >> 16) * 8;
            seen[c]++;
        }
    CHECK(t, bad == 0, "%d of %d codes wrong", bad, h.nunits);
    CHECK(t, seen[0] && seen[1] && seen[2], "units in chunks %d %d %d", seen[0], seen[1], seen[2]);
    free(du);
    bsconv_hpack_free(&h);
    bsc_free(&L);
}

// Every slice of every split is a non-empty run of chunks, and the slices
// cover the chunks in order, each once.
static void test_split_range(tctx *t) {
    for (int n = 1; n <= 70; n++)
        for (int k = 1; k <= n; k++) {
            int next = 0;
            for (int z = 0; z < k; z++) {
                int c0, c1;
                bsh_split_range(z, k, n, &c0, &c1);
                CHECK(t, c0 == next && c1 > c0, "%d chunks in %d: slice %d is [%d, %d)", n, k, z, c0, c1);
                next = c1;
            }
            CHECK(t, next == n, "%d chunks in %d slices end at %d", n, k, next);
        }
}

// The halo tile covers the plane: every tile's pixels within tm, windows within the
// tile for a pool, the grid reaches the last image, row and column, and a 1x1
// stride-2 conv's window holds just the tile's pixels.
static void test_halo_tiles(tctx *t) {
    const int planes[][4] = {{128, 32, 32, 0}, {128, 16, 16, 0}, {128, 4, 4, 0}, {3, 9, 11, 2}, {1, 7, 5, 0},
                             {2, 64, 64, 2}, {5, 3, 200, 0}};
    for (int i = 0; i < (int)(sizeof planes / sizeof planes[0]); i++)
        for (int tm = 32; tm <= 128; tm *= 2) {
            bsconv_shape s = {.n = planes[i][0], .C = 64, .H = planes[i][1], .W = planes[i][2], .K = 64,
                              .R = 3, .S = 3, .stride = 1, .pad = 1, .pool = planes[i][3]};
            bsconv_htile h;
            bsconv_htile_pick(&s, tm, 64, &h);
            CHECK(t, h.ti * h.tr * h.tq <= tm && h.ti >= 1 && h.tr >= 1 && h.tq >= 1, "plane %d tm %d: %dx%dx%d",
                  i, tm, h.ti, h.tr, h.tq);
            CHECK(t, h.nti * h.ti >= s.n && h.ntr * h.tr >= h.pc && h.ntq * h.tq >= h.qc, "plane %d tm %d: grid", i, tm);
            CHECK(t, h.win == 1 || (h.tr % 2 == 0 && h.tq % 2 == 0), "plane %d tm %d: odd pool tile", i, tm);
            s.R = s.S = 1, s.pad = 0, s.stride = 2, s.pool = 0;  // a 1x1 stride-2 shortcut: no halo, no gaps
            bsconv_htile_pick(&s, tm, 64, &h);
            CHECK(t, h.hr == h.tr && h.hw == h.tq && h.sub == 2 && h.ps == 1, "plane %d tm %d: 1x1 window %dx%d for %dx%d",
                  i, tm, h.hr, h.hw, h.tr, h.tq);
        }
}

// Checks the packed layout's invariants for one layer.
static void check_layout(tctx *t, const char *name, const bsc_layer *L, const bsconv_packed *p) {
    CHECK(t, p->np == 8 || p->np == 16 || p->np == 32 || p->np == 64, "%s: np %d", name, p->np);
    CHECK(t, p->vec == (L->w.cb % 8 == 0), "%s: vec %d", name, p->vec);
    int covered = 0, col = 0;
    for (int gi = 0; gi < p->ngroups; gi++) {
        const bsconv_group *g = &p->grp[gi];
        CHECK(t, g->k0 == covered && g->nk >= 1 && g->nk <= p->np, "%s: group %d k0 %d nk %d", name,
              gi, g->k0, g->nk);
        CHECK(t, g->col0 == col && g->col0 % BSCONV_KSTEP == 0, "%s: group %d col0 %d", name, gi,
              g->col0);
        covered += g->nk, col += g->steps * BSCONV_KSTEP;
        for (int e = g->col0; e < col && p->vec; e += 8)  // runs of 8 at one tap, or all padding
            for (int i = 1; i < 8; i++)
                CHECK(t, p->cols[e] == BSCONV_PAD ? p->cols[e + i] == BSCONV_PAD
                                                  : p->cols[e + i] == p->cols[e] + ((uint32_t)i << 16),
                      "%s: column %d", name, e + i);
    }
    CHECK(t, covered == L->s.K && col == p->ncols, "%s: %d channels, %d columns", name, covered, col);
}

// Groups tile the channels, columns are padded to k-steps, vector runs hold.
static void test_pack_layout(tctx *t) {
    for (int ci = 0; ci < NCASES; ci++) {
        bsc_layer L;
        bsconv_packed p;
        sc_err err = {{0}};
        char name[160];
        bsc_case_name(&CASES[ci], name, sizeof name);
        bsc_make(&CASES[ci], 200 + ci, &L);
        if (bsconv_pack(&L.s, &L.w, &p, &err)) {
            CHECK(t, 0, "%s: %s", name, err.msg);
        } else {
            check_layout(t, name, &L, &p);
            bsconv_packed_free(&p);
        }
        bsc_free(&L);
    }
}

// Expects bsconv_check to reject (s, w) with a message.
static void expect_reject(tctx *t, const char *what, const bsconv_shape *s, const bsconv_bsr *w) {
    sc_err err = {{0}};
    const int rc = bsconv_check(s, w, &err);
    CHECK(t, rc == -1 && err.msg[0], "%s accepted", what);
    if (rc == -1) printf("  rejected %s: %s\n", what, err.msg);
}

// Bad blocks, indices, indptr and shapes are refused with a message.
static void test_check_rejects(tctx *t) {
    const bsconv_shape s = {1, 16, 5, 5, 16, 3, 3, 1, 1, 0, 0};
    int32_t indptr[3] = {0, 1, 2}, indices[2] = {0, 17};
    float data[2 * 8 * 8] = {0};
    bsconv_bsr w = {.kb = 8, .cb = 8, .indptr = indptr, .indices = indices, .data = data};
    sc_err err = {{0}};
    CHECK(t, bsconv_check(&s, &w, &err) == 0, "valid layer: %s", err.msg);
    bsconv_shape s12 = s;
    s12.C = 12;  // C not a multiple of cb = 8
    expect_reject(t, "C 12 with cb 8", &s12, &w);
    bsconv_bsr wk = w;
    wk.kb = 6;
    expect_reject(t, "K 16 with kb 6", &s, &wk);
    indices[1] = 18;  // 3*3*16/8 = 18 block columns
    expect_reject(t, "block column out of range", &s, &w);
    indices[1] = 0, indptr[1] = 2;  // row 0: columns 0 and 0
    expect_reject(t, "repeated block column", &s, &w);
    indptr[1] = 3, indptr[2] = 2;
    expect_reject(t, "decreasing indptr", &s, &w);
    indptr[0] = 1, indptr[1] = 1;
    expect_reject(t, "indptr[0] = 1", &s, &w);
    indptr[0] = 0;
    bsconv_shape sb = s;
    sb.R = 300;
    expect_reject(t, "300-row kernel", &sb, &w);
    sb = s, sb.stride = 0;
    expect_reject(t, "stride 0", &sb, &w);
    sb = s, sb.H = 1, sb.pad = 0;
    expect_reject(t, "kernel larger than the input", &sb, &w);
    sb = s, sb.pool = 3;
    expect_reject(t, "3x3 pool", &sb, &w);
    sb = s, sb.pool = 4, sb.H = 3;  // P = 3
    expect_reject(t, "4x4 pool of a 3-row output", &sb, &w);
}

// The comparison fails on a planted error: one packed weight changed, one
// output element left NaN, one output off by a few ulps too many.
static void test_catches_planted(tctx *t) {
    bsc_layer L;
    bsconv_packed p;
    sc_err err = {{0}};
    bsc_make(&CASES[1], 300, &L);
    float *wd = bsc_dense_weights(&L), *y = malloc(L.ny * sizeof *y);
    double *want = malloc(L.ny * sizeof *want), *scale = malloc(L.ny * sizeof *scale);
    bsc_dense_conv(&L, wd, 0, want);
    bsc_dense_conv(&L, wd, 1, scale);
    size_t at;
    if (bsconv_pack(&L.s, &L.w, &p, &err) == 0) {
        int e = 0;
        while (p.cols[e] == BSCONV_PAD) e++;
        // channel 0 of the group holding the first real column
        p.vals[(size_t)(e / BSCONV_KSTEP) * (p.np / BSCONV_NFRAG) * BSCONV_KSTEP * BSCONV_NFRAG +
               (size_t)(e % BSCONV_KSTEP) * BSCONV_NFRAG] += 0.25f;
        bsconv_packed_forward_cpu(&L.s, &p, L.bias, L.x, L.z, y);
        CHECK(t, bsc_worst(y, want, scale, L.ny, 0.0, TOL_ABS, &at) > 1.0, "planted weight missed");
        bsconv_packed_free(&p);
    } else {
        CHECK(t, 0, "pack: %s", err.msg);
    }
    bsconv_forward_cpu(&L.s, &L.w, L.bias, L.x, L.z, y);
    CHECK(t, bsc_worst(y, want, scale, L.ny, 0.0, TOL_ABS, &at) <= 1.0, "reference");
    y[L.ny / 2] = NAN;
    CHECK(t, bsc_worst(y, want, scale, L.ny, 0.0, TOL_ABS, &at) > 1.0, "NaN missed");
    y[L.ny / 2] = (float)(want[L.ny / 2] + 3 * TOL_ABS * scale[L.ny / 2]);
    CHECK(t, bsc_worst(y, want, scale, L.ny, 0.0, TOL_ABS, &at) > 1.0, "3x tolerance missed");
    free(wd), free(y), free(want), free(scale);
    bsc_free(&L);
}

// Hybrid layers (blocks plus a remainder of single weights, sparse and
// dense): the reference and the halo kernel's loops (three tiles, both
// splits) against the dense conv of blocks plus singles; the direct kernel
// takes none with singles.
static void test_hybrid_vs_dense(tctx *t) {
    const double dens[] = {0.02, 0.3};
    for (int d = 0; d < 2; d++) {
        int n = 0;
        check_walk_rem(t, WALK_REF, dens[d], &n);
        for (int w = WALK_HALO32; w <= WALK_SPLITALL; w++) {
            n = 0;
            check_walk_rem(t, w, dens[d], &n);
            CHECK(t, n == 11, "walk %d, remainder density %g: %d cases (11 apply)", w, dens[d], n);
        }
        n = 0;
        check_walk_rem(t, WALK_DIRECT, dens[d], &n);
        CHECK(t, n == 1, "the direct walk took %d layers (1: the dense one, no room for singles)", n);
    }
}

// The halo walk of a hybrid layer misses the dense conv of its blocks alone
// (the remainder counts), and a remainder that is not ascending, or out of
// range, or whose indptr decreases, is refused.
static void test_hybrid_counts_and_rejects(tctx *t) {
    bsc_layer L;
    sc_err err = {{0}};
    bsc_make(&CASES[1], 5, &L);
    float *wd = bsc_dense_weights(&L);  // blocks only
    bsc_add_rem(&L, 0.05, 6);
    CHECK(t, L.rem_indptr[L.s.K] > 2, "%d singles", L.rem_indptr[L.s.K]);
    double *want = malloc(L.ny * sizeof *want), *scale = malloc(L.ny * sizeof *scale);
    float *y = malloc(L.ny * sizeof *y);
    bsc_dense_conv(&L, wd, 0, want);
    bsc_dense_conv(&L, wd, 1, scale);
    size_t at;
    CHECK(t, run_walk(&L, WALK_HALO64, y, &err) == 0, "%s", err.msg);
    CHECK(t, bsc_worst(y, want, scale, L.ny, 0.0, TOL_ABS, &at) > 1.0, "the remainder changed nothing");
    int32_t *ix = L.rem_indices, k = 0;
    while (L.rem_indptr[k + 1] - L.rem_indptr[k] < 2) k++;
    const int32_t j = L.rem_indptr[k], keep = ix[j];
    ix[j] = ix[j + 1];  // a repeated column
    expect_reject(t, "repeated remainder column", &L.s, &L.w);
    ix[j] = L.s.R * L.s.S * L.s.C;
    expect_reject(t, "remainder column out of range", &L.s, &L.w);
    ix[j] = keep;
    L.rem_indptr[1] = L.rem_indptr[2] + 1;
    expect_reject(t, "remainder indptr decreasing", &L.s, &L.w);
    free(wd), free(want), free(scale), free(y);
    bsc_free(&L);
}

int main(void) {
    tctx t = {.suite = "test_bsconv_cpu"};
    RUN(&t, test_reference_vs_dense);
    RUN(&t, test_packed_vs_dense);
    RUN(&t, test_halo_vs_dense);
    RUN(&t, test_halo_split_vs_dense);
    RUN(&t, test_direct_vs_dense);
    RUN(&t, test_direct_codes);
    RUN(&t, test_vec_vs_dense);
    RUN(&t, test_vec_tiles);
    RUN(&t, test_vec_bank_groups);
    RUN(&t, test_vec_lane_classes);
    RUN(&t, test_vec_row_order);
    RUN(&t, test_split_range);
    RUN(&t, test_halo_tiles);
    RUN(&t, test_pack_layout);
    RUN(&t, test_check_rejects);
    RUN(&t, test_catches_planted);
    RUN(&t, test_hybrid_vs_dense);
    RUN(&t, test_hybrid_counts_and_rejects);
    return check_finish(&t);
}
