// The vector layout of the block-sparse convolution (kernels/bsconv.h): a
// fourth tensor-core kernel, for blocks of 8 output channels (kb a multiple
// of 8) of any width cb, above all the column vectors of the 8x1 pattern,
// which the halo and direct kernels cannot run (their units are 8
// consecutive input channels) and the gather kernel runs one scalar global
// load per element. The idea is the column-vector sparse encoding of Chen
// et al., "Efficient tensor core-based GPU kernels for structured sparsity
// under reduced precision" (SC'21), moved to an implicit-GEMM convolution:
// each group of 8 output channels keeps its own list of non-zero (r, s, c)
// columns, and an m16n8k16 MMA multiplies 16 of them at once for 16 output
// pixels.
//
// A CTA owns a tile of output pixels (ti images x tr conv rows x tq conv
// columns, at most 64) and stages the tile's whole input window (all C
// channels, zeros outside the image) in shared memory once, by 16-byte
// copies, each window position padded to C + 8 channels (16-byte aligned;
// 8 consecutive positions then start in different bank groups when C % 16 ==
// 0). Three orders keep a load's 32 two-byte reads off each other's banks:
// the pack splits each half k-step's columns so that the 4 columns one load
// reads differ in (c / 2) % 4 where they can (bsconv_vpack_build), the row
// tables take a tile's pixels so that each 8 a load reads sit in distinct
// bank groups (bsconv_vec_row_order: on small planes rows wrap into the next
// window row), and where a tile holds several images their windows are a
// few positions apart (bsv_geom.ip: on 2x2 planes every image's window
// would start on the same bank group). Its warps then take the
// CTA's groups in turn: per k-step of 16 columns a lane reads the codes of
// its 4 columns and its B fragment (the group's 16 x 8 weights, packed in
// fragment order), and for each 16-row slice of the tile builds its A
// fragment by 8 two-byte shared loads at (pixel's window base + column
// offset): the gather happens in shared memory, not in global memory. The
// epilogue is the halo kernel's (bias, residual, ReLU, a 2x2 max pool over
// window-ordered rows).
//
// This header: the packed weights (plain C), the tile geometry shared by the
// CUDA kernel and the plain-C walk (BSH_HD functions compile for both), and
// that walk, which runs the kernel's loops on the CPU so that the layout is
// tested without a GPU.
#ifndef SC_KERNELS_BSCONV_VEC_H
#define SC_KERNELS_BSCONV_VEC_H

#include <stdint.h>

#include "kernels/bsconv_halo.h"

// Output channels per group (the n of the MMA) and columns per k-step.
#define BSV_NG 8
#define BSV_KSTEP 16
// Largest tile in pixel rows (four 16-row slices).
#define BSV_TM_MAX 64
// Bytes ahead of the window in shared memory: the tile's y-pixel and window-base tables.
#define BSV_TABLE_BYTES (BSV_TM_MAX * 8)

// The weights of a layer in k-steps. Group g (output channels 8g .. 8g + 7)
// has k-steps gstart[g] .. gstart[g + 1] - 1, each 16 of its non-zero
// columns (padded with code 0 and zero weights). codes[st * 16 + j] is
// column j's c | s << 16 | r << 24; vals[(st * 32 + lane) * 4 + e] is the
// weight lane `lane` holds as element e of the MMA's B fragment: column
// 2 (lane % 4) + (e & 1) + 8 (e >> 1), channel 8g + lane / 4.
typedef struct {
    int ng, nsteps;
    int32_t *gstart;  // (ng + 1)
    uint32_t *codes;  // (nsteps * 16)
    float *vals;      // (nsteps * 128)
} bsconv_vpack;

// The geometry of one layer at one tile size (32-bit: bsconv_vec_applies bounds it).
typedef struct {
    int n, H, W, C, R, S, stride, pad;
    int P, Q;          // conv plane
    int pool;          // 1 or 2
    int Po, Qo;        // y plane
    int cp, cq;        // conv rows and columns computed (Po * pool, Qo * pool)
    int ti, tr, tq;    // tile: images x conv rows x conv columns
    int hr, hw, ldc;   // window rows and columns per image; elements per position (C + 8)
    int ip;            // window positions from one image to the next (hr hw, or a few more: bank groups)
    int tm;            // pixel rows of a tile (ti tr tq <= 64)
    int nti, ntr, ntq; // tiles along images, rows and columns
} bsv_geom;

// 1 when the vector kernel can compute the layer (kb a multiple of 8, C a
// multiple of 8, no remainder, no pool or a 2x2 pool, 31-bit indices), else
// 0 and why (len bytes).
int bsconv_vec_applies(const bsconv_shape *s, const bsconv_bsr *w, char *why, int len);

// The geometry of layer s with tiles of at most tm_max pixel rows (16, 32 or 64).
void bsconv_vgeom_of(const bsconv_shape *s, int tm_max, bsv_geom *g);

// Bytes of shared memory a CTA of geometry g needs (table and window).
long long bsconv_vec_smem(const bsv_geom *g);

// The order of a tile's pixel rows in the kernel's tables: slot m holds row
// order[m] (BSV_TM_MAX entries; identity past tm). One shared load of the
// gather reads a column for 8 consecutive slots, so each 8 slots get rows at
// window positions in distinct bank groups (16-byte slots mod 8) where the
// tile has them; on small planes the tile's own order puts the rows that
// wrap into the next window row on the first ones' banks. keep: the tile's
// own order (the transposed window and the pool, whose fragments and pool
// windows depend on it).
void bsconv_vec_row_order(const bsv_geom *g, int keep, unsigned char *order);

// The 8-slot groups of row order `order` (bsconv_vec_row_order's) that hold
// two rows whose window bases share a bank group (16-byte slot mod 8).
int bsconv_vec_row_clashes(const bsv_geom *g, const unsigned char *order);

// Builds the vector weights of a layer the kernel applies to. 0 or -1.
int bsconv_vpack_build(const bsconv_shape *s, const bsconv_bsr *w, bsconv_vpack *p, sc_err *err);

// Frees what bsconv_vpack_build allocated (a zeroed struct is fine).
void bsconv_vpack_free(bsconv_vpack *p);

// Runs the kernel's loops in plain C (fp32) at tile size tm_max: y as
// bsconv_forward_cpu computes it. Stages a window per tile. 0 or -1.
int bsconv_vec_forward_cpu(const bsconv_shape *s, const bsconv_vpack *p, int tm_max, const float *bias,
                           const float *x, const float *z, float *y, sc_err *err);

// Window offset (elements) of column code `code` from a pixel's base.
BSH_HD int bsv_off(const bsv_geom *g, uint32_t code) {
    return ((int)(code >> 24) * g->hw + (int)(code >> 16 & 255u)) * g->ldc + (int)(code & 0xFFFFu);
}

// Tile t -> its first image, conv row and conv column.
BSH_HD void bsv_tile(const bsv_geom *g, int t, int *img0, int *p0, int *q0) {
    *img0 = t / (g->ntr * g->ntq) * g->ti;
    *p0 = t / g->ntq % g->ntr * g->tr;
    *q0 = t % g->ntq * g->tq;
}

// Pixel row m of tile t: its window base (elements; 0 when the row is past
// the layer) and the y pixel it writes (-1: none). With the pool the rows
// go window by window, the four pixels of a 2x2 window consecutive.
BSH_HD void bsv_row(const bsv_geom *g, int t, int m, int *base, int *out) {
    int ii, rr, qq;
    if (g->pool == 2) {
        const int w = m >> 2, d = m & 3, wq = g->tq / 2, wr = g->tr / 2;
        ii = w / (wr * wq);
        rr = w / wq % wr * 2 + (d >> 1);
        qq = w % wq * 2 + (d & 1);
    } else {
        ii = m / (g->tr * g->tq);
        rr = m / g->tq % g->tr;
        qq = m % g->tq;
    }
    int img0, p0, q0;
    bsv_tile(g, t, &img0, &p0, &q0);
    const int img = img0 + ii, p = p0 + rr, q = q0 + qq;
    if (m >= g->tm || img >= g->n || p >= g->cp || q >= g->cq) {
        *base = 0, *out = -1;
        return;
    }
    *base = (ii * g->ip + rr * g->stride * g->hw + qq * g->stride) * g->ldc;
    *out = g->pool == 2 ? (img * g->Po + p / 2) * g->Qo + q / 2 : (img * g->P + p) * g->Q + q;
}

#endif
