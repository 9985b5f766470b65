// The direct layout of the block-sparse convolution (kernels/bsconv.h): a
// third tensor-core kernel for small planes (vgg16's 2x2 and 4x4 layers),
// where the halo kernel's window staging and its barriers are most of a CTA's
// time. It reads the halo kernel's packed weights (kernels/bsconv_halo.h:
// units of 8 input channels at one tap, per channel group) with each unit's
// chunk folded into its input channel, and multiplies without shared memory:
// every lane loads its A fragments (two input channels of one pixel, 4 bytes)
// straight from x, zero outside the image, and its B fragments from the
// packed weights, several units ahead of the MMAs (mma.m16n8k16 over unit
// pairs), so a warp's chain is a few load round trips, not a staged window per
// chunk. A warp owns 16 x MF consecutive pixel rows of one group; the rows are
// the conv pixels in order, or with a 2x2 pool the pooled windows' four
// pixels in turn (the epilogue takes their max across lanes).
//
// This header: the pixel-row mapping and the unit codes shared by the CUDA
// kernel and the plain-C walk (BSH_HD functions compile for both), and that
// walk, which runs the kernel's loops on the CPU so that the layout is tested
// without a GPU.
#ifndef SC_KERNELS_BSCONV_DIRECT_H
#define SC_KERNELS_BSCONV_DIRECT_H

#include <stdint.h>

#include "kernels/bsconv_halo.h"

// The geometry the direct kernel walks (32-bit: bsconv_direct_applies bounds it).
typedef struct {
    int n, H, W, C, K, stride, pad;
    int P, Q;    // conv plane
    int Po, Qo;  // y plane (P / 2, Q / 2 with the pool)
    int pool;    // 1: no pool; 2: a 2x2 max pool
    int rows;    // pixel rows: n P Q, or n Po Qo x 4 with the pool
} bsconv_dgeom;

// The geometry of layer s (no pool or a 2x2 pool, as the halo kernel's).
void bsconv_dgeom_of(const bsconv_shape *s, bsconv_dgeom *g);

// 1 when the direct kernel can compute the layer (the halo kernel applies and
// x, y and the pixel rows fit 31-bit indices), else 0 and why.
int bsconv_direct_applies(const bsconv_shape *s, const bsconv_bsr *w, char *why, int len);

// Unit code of the direct kernel: tap r, s and the unit's first input channel.
BSH_HD uint32_t bsd_code(int r, int s, int ch) { return (uint32_t)r | (uint32_t)s << 8 | (uint32_t)ch << 16; }

// The halo codes of h with each unit's chunk folded into its channel: du (h->nunits).
void bsconv_direct_codes(const bsconv_hpack *h, uint32_t *du);

// Pixel row m -> image, conv row and column, and the y pixel it writes; 0 past the rows.
BSH_HD int bsd_pixel(const bsconv_dgeom *g, int m, int *img, int *p, int *q, int *out) {
    if (m < 0 || m >= g->rows) return 0;
    if (g->pool == 2) {  // window w = m / 4, its pixel (m / 2 % 2, m % 2)
        const int w = m >> 2, d = m & 3;
        *img = w / (g->Po * g->Qo);
        *p = (w / g->Qo % g->Po) * 2 + (d >> 1);
        *q = (w % g->Qo) * 2 + (d & 1);
        *out = w;
    } else {
        *img = m / (g->P * g->Q);
        *p = m / g->Q % g->P;
        *q = m % g->Q;
        *out = m;
    }
    return 1;
}

// The kernel's loops in plain C (fp32): y as bsconv_forward_cpu gives it up to
// the order of the sums, for a layer bsconv_direct_applies accepts (else y is left alone).
void bsconv_direct_forward_cpu(const bsconv_shape *s, const bsconv_hpack *h, const float *bias, const float *x,
                               const float *z, float *y);

#endif
