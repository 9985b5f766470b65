// The direct layout of the block-sparse convolution in plain C: the geometry,
// the unit codes and the kernel's loops as a walk (kernels/bsconv_direct.h).
#include "kernels/bsconv_direct.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The geometry of layer s.
void bsconv_dgeom_of(const bsconv_shape *s, bsconv_dgeom *g) {
    memset(g, 0, sizeof *g);
    g->n = s->n, g->H = s->H, g->W = s->W, g->C = s->C, g->K = s->K, g->stride = s->stride, g->pad = s->pad;
    bsconv_out_size(s, &g->P, &g->Q);
    bsconv_y_size(s, &g->Po, &g->Qo);
    g->pool = s->pool == 2 ? 2 : 1;
    const long long rows = g->pool == 2 ? (long long)s->n * g->Po * g->Qo * 4 : (long long)s->n * g->P * g->Q;
    g->rows = rows > INT32_MAX ? INT32_MAX : (int)rows;
}

// 1 when x, y and the pixel rows of layer s fit 31-bit indices (with room for a tap's offset).
static int bsd_fits(const bsconv_shape *s) {
    int P, Q;
    bsconv_out_size(s, &P, &Q);
    const long long lim = INT32_MAX - 65536LL * 16;
    return (long long)s->n * s->H * s->W * s->C <= lim && (long long)s->n * P * Q * s->K <= lim;
}

// 1 when the direct kernel applies.
int bsconv_direct_applies(const bsconv_shape *s, const bsconv_bsr *w, char *why, int len) {
    if (!bsconv_halo_applies(s, w, why, len)) return 0;
    if (bsconv_rem_count(w, s->K) > 0) {
        if (why) snprintf(why, (size_t)len, "the layer has a remainder (only the halo kernel runs it)");
        return 0;
    }
    if (bsd_fits(s)) return 1;
    if (why) snprintf(why, (size_t)len, "x or y has more than 2^31 elements");
    return 0;
}

// The codes with the chunk folded in.
void bsconv_direct_codes(const bsconv_hpack *h, uint32_t *du) {
    for (int i = 0; i < h->ngroups * h->nchunks; i++)
        for (int u = h->ustart[i]; u < h->ustart[i + 1]; u++) {
            const uint32_t c = h->units[u];
            du[u] = bsd_code((int)(c & 255u), (int)(c >> 8 & 255u), i % h->nchunks * h->cc + (int)(c >> 16) * 8);
        }
}

// acc (np) = group g's sums at conv pixel (img, p, q): every unit of the group, in order.
static void bsd_sums(const bsconv_dgeom *g, const bsconv_hpack *h, const uint32_t *du, int grp, int img, int p,
                     int q, const float *x, float *acc) {
    memset(acc, 0, (size_t)h->np * sizeof *acc);
    for (int u = h->ustart[grp * h->nchunks]; u < h->ustart[(grp + 1) * h->nchunks]; u++) {
        const int r = (int)(du[u] & 255u), sx = (int)(du[u] >> 8 & 255u), ch = (int)(du[u] >> 16);
        const int iy = p * g->stride - g->pad + r, ix = q * g->stride - g->pad + sx;
        if (iy < 0 || iy >= g->H || ix < 0 || ix >= g->W) continue;
        const float *a = x + (((size_t)img * g->H + iy) * g->W + ix) * g->C + ch;
        for (int k = 0; k < h->np; k++) {
            const float *wv = h->vals + ((size_t)u * h->nf + k / 8) * BSH_FRAG_VALS + (k % 8) * 8;
            for (int e = 0; e < 8; e++) acc[k] += a[e] * wv[e];  // lane (k % 8) * 4 + e / 2, value e % 2
        }
    }
}

// The kernel's loops in plain C: rows in order, each group's sums, the epilogue
// (with the pool, the max over each window's four rows).
void bsconv_direct_forward_cpu(const bsconv_shape *s, const bsconv_hpack *h, const float *bias, const float *x,
                               const float *z, float *y) {
    if (!bsd_fits(s)) return;
    bsconv_dgeom g;
    bsconv_dgeom_of(s, &g);
    uint32_t *du = malloc(((size_t)h->nunits + 1) * sizeof *du);
    float *acc = malloc((size_t)h->np * 4 * sizeof *acc);
    if (du && acc) bsconv_direct_codes(h, du);
    const int ww = g.pool == 2 ? 4 : 1;
    for (int m = 0; du && acc && m < g.rows; m += ww)
        for (int grp = 0; grp < h->ngroups; grp++) {
            int img = 0, p = 0, q = 0, out = 0;
            for (int a = 0; a < ww && bsd_pixel(&g, m + a, &img, &p, &q, &out); a++)
                bsd_sums(&g, h, du, grp, img, p, q, x, acc + (size_t)a * h->np);
            for (int j = 0; j < h->nk[grp]; j++) {
                const int k = h->k0[grp] + j;
                const size_t o = (size_t)out * s->K + k;
                float v = -INFINITY;
                for (int a = 0; a < ww; a++) v = fmaxf(v, bsconv_epi_cpu(s, acc[(size_t)a * h->np + j], bias, z, o, k));
                y[o] = v;
            }
        }
    free(du), free(acc);
}
