// The halo layout of the block-sparse convolution (kernels/bsconv_halo.h):
// weights in unit order, the tile geometry, and the kernel's loops in plain C.
#include "kernels/bsconv_halo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Largest of 64, 32, 16, 8 dividing c (0 when none does).
static int bsh_chunk(int c) {
    for (int cc = 64; cc >= 8; cc /= 2)
        if (c % cc == 0) return cc;
    return 0;
}

// 1 when the halo kernel can compute the layer (else 0 and why).
int bsconv_halo_applies(const bsconv_shape *s, const bsconv_bsr *w, char *why, int len) {
    const char *no = NULL;
    if (w->cb % 8) no = "the block's input channels are not a multiple of 8";
    else if (w->kb % 8 && 8 % w->kb) no = "the block's output channels neither divide nor are a multiple of 8";
    else if (s->C % 8 || s->K % 8) no = "C or K is not a multiple of 8";
    else if (s->pool > 2) no = "only a 2x2 pool is fused";
    else if (s->stride > 2) no = "stride above 2";
    else if (w->kb > BSCONV_NMAX) no = "blocks of more than 64 output channels";
    if (no && why) snprintf(why, (size_t)len, "%s", no);
    return no == NULL;
}

// Counts group gi's units per chunk into cnt (nchunks) from packed layout p.
static void bsh_count(const bsconv_packed *p, int gi, int cc, int *cnt) {
    const bsconv_group *g = &p->grp[gi];
    for (int e = g->col0; e < g->col0 + g->steps * BSCONV_KSTEP; e += 8)
        if (p->cols[e] != BSCONV_PAD) cnt[(p->cols[e] >> 16) / cc]++;
}

// Copies the 8 columns from packed column e (one unit) into unit u of h.
static void bsh_put_unit(const bsconv_packed *p, int e, bsconv_hpack *h, int u, int cc) {
    const uint32_t code = p->cols[e], c = code >> 16;
    h->units[u] = (code & 0xFFFFu) | (uint32_t)((c % (uint32_t)cc) / 8) << 16;
    for (int f = 0; f < h->nf; f++)
        for (int lane = 0; lane < BSH_LANES; lane++)
            for (int k = 0; k < 2; k++)
                h->vals[((size_t)u * h->nf + f) * BSH_FRAG_VALS + lane * 2 + k] =
                    p->vals[bsconv_packed_at(p->np, e + (lane % 4) * 2 + k, f * 8 + lane / 4)];
}

// Fills group gi's units, chunk by chunk (next: the next free unit of each chunk).
static void bsh_fill(const bsconv_packed *p, int gi, bsconv_hpack *h, int *next) {
    const bsconv_group *g = &p->grp[gi];
    for (int e = g->col0; e < g->col0 + g->steps * BSCONV_KSTEP; e += 8)
        if (p->cols[e] != BSCONV_PAD) bsh_put_unit(p, e, h, next[(p->cols[e] >> 16) / h->cc]++, h->cc);
}

// Allocates h's arrays and sets ustart from the per-(group, chunk) counts.
static int bsh_alloc(bsconv_hpack *h, const int *cnt, sc_err *err) {
    const size_t ns = (size_t)h->ngroups * h->nchunks;
    h->k0 = malloc((size_t)h->ngroups * sizeof *h->k0);
    h->nk = malloc((size_t)h->ngroups * sizeof *h->nk);
    h->ustart = malloc((ns + 1) * sizeof *h->ustart);
    if (!h->k0 || !h->nk || !h->ustart) return sc_fail(err, "block-sparse conv: out of memory");
    long long n = 0;
    for (size_t i = 0; i < ns; i++) h->ustart[i] = (int32_t)n, n += cnt[i];
    h->ustart[ns] = (int32_t)n;
    if (n * h->nf * BSH_FRAG_VALS > INT32_MAX) return sc_fail(err, "block-sparse conv: %lld units", n);
    h->nunits = (int)n;
    h->units = malloc(((size_t)n + 1) * sizeof *h->units);
    h->vals = calloc((size_t)n * h->nf * BSH_FRAG_VALS + 1, sizeof *h->vals);
    return h->units && h->vals ? 0 : sc_fail(err, "block-sparse conv: out of memory (%lld units)", n);
}

// Builds the unit-order weights from the packed layout p.
static int bsh_from_packed(const bsconv_packed *p, bsconv_hpack *h, sc_err *err) {
    h->np = p->np, h->nf = p->np / 8, h->ngroups = p->ngroups;
    int *cnt = calloc((size_t)h->ngroups * h->nchunks + 1, sizeof *cnt);
    if (!cnt) return sc_fail(err, "block-sparse conv: out of memory");
    for (int gi = 0; gi < h->ngroups; gi++) bsh_count(p, gi, h->cc, cnt + (size_t)gi * h->nchunks);
    int rc = bsh_alloc(h, cnt, err);
    for (int gi = 0; !rc && gi < h->ngroups; gi++) {
        h->k0[gi] = p->grp[gi].k0, h->nk[gi] = p->grp[gi].nk;
        int *next = cnt + (size_t)gi * h->nchunks;
        for (int c = 0; c < h->nchunks; c++) next[c] = h->ustart[gi * h->nchunks + c];
        bsh_fill(p, gi, h, next);
    }
    free(cnt);
    return rc;
}

// Sorts the remainder of w into h's (group, chunk, channel) lists (the
// groups' k0/nk cover every output channel once): counts into rstart, then
// places each entry in row order.
static int bsh_rem_build(const bsconv_shape *s, const bsconv_bsr *w, bsconv_hpack *h, sc_err *err) {
    h->nrem = bsconv_rem_count(w, s->K);
    if (!h->nrem) return 0;
    const size_t ns = (size_t)h->ngroups * h->nchunks * h->np;
    h->rstart = calloc(ns + 1, sizeof *h->rstart);
    h->rcode = malloc((size_t)h->nrem * sizeof *h->rcode);
    h->rvals = malloc((size_t)h->nrem * sizeof *h->rvals);
    int32_t *next = calloc(ns + 1, sizeof *next);  // (ns + 1)
    if (!h->rstart || !h->rcode || !h->rvals || !next) {
        free(next);
        return sc_fail(err, "block-sparse conv: out of memory");
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int g = 0; g < h->ngroups; g++)
            for (int k = h->k0[g]; k < h->k0[g] + h->nk[g]; k++)
                for (int32_t j = w->rem_indptr[k]; j < w->rem_indptr[k + 1]; j++) {
                    const int col = w->rem_indices[j], tap = col / s->C, ch = col % s->C, e = ch % h->cc;
                    const long slot = ((long)g * h->nchunks + ch / h->cc) * h->np + (k - h->k0[g]);
                    if (pass == 0) {
                        h->rstart[slot + 1]++;
                        continue;
                    }
                    const int32_t at = next[slot]++;
                    h->rcode[at] = (uint32_t)(tap / s->S) | (uint32_t)(tap % s->S) << 8 | (uint32_t)(e / 8) << 16 |
                                   (uint32_t)(e % 8) << 24;
                    h->rvals[at] = w->rem_data[j];
                }
        if (pass == 0)
            for (size_t i = 0; i < ns; i++) h->rstart[i + 1] += h->rstart[i], next[i] = h->rstart[i];
    }
    free(next);
    return 0;
}

// Builds the halo weights of a checked layer that the kernel applies to.
int bsconv_hpack_build(const bsconv_shape *s, const bsconv_bsr *w, bsconv_hpack *h, sc_err *err) {
    memset(h, 0, sizeof *h);
    char why[120];
    if (!bsconv_halo_applies(s, w, why, sizeof why)) return sc_fail(err, "block-sparse conv: %s", why);
    bsconv_packed p;
    SC_TRY(bsconv_pack(s, w, &p, err));
    h->cc = bsh_chunk(s->C), h->nchunks = s->C / h->cc;
    int rc = bsh_from_packed(&p, h, err);
    if (!rc) rc = bsh_rem_build(s, w, h, err);
    bsconv_packed_free(&p);
    if (rc) bsconv_hpack_free(h);
    return rc;
}

// Frees the arrays.
void bsconv_hpack_free(bsconv_hpack *h) {
    free(h->k0), free(h->nk), free(h->ustart), free(h->units), free(h->vals);
    free(h->rstart), free(h->rcode), free(h->rvals);
    memset(h, 0, sizeof *h);
}

// --- the tile ---------------------------------------------------------------------------

// a < b ? a : b.
static int bsh_min(int a, int b) { return a < b ? a : b; }

// log2 of a power of two.
static int bsh_log2(int v) {
    int l = 0;
    while ((1 << l) < v) l++;
    return l;
}

// The tile of tm pixel rows for layer s.
void bsconv_htile_pick(const bsconv_shape *s, int tm, int cc, bsconv_htile *t) {
    int po, qo;
    bsconv_y_size(s, &po, &qo);
    memset(t, 0, sizeof *t);
    t->tm = tm, t->win = s->pool == 2 ? 2 : 1;
    t->pc = po * t->win, t->qc = qo * t->win;
    t->tq = bsh_min(t->qc, t->win == 2 ? tm / 2 : tm);
    t->tr = bsh_min(t->pc, tm / t->tq);
    if (t->win == 2) t->tr &= ~1;
    t->ti = bsh_min(s->n, tm / (t->tr * t->tq));
    t->sub = s->R == 1 && s->S == 1 ? s->stride : 1, t->ps = s->stride / t->sub;
    t->hr = (t->tr - 1) * t->ps + s->R, t->hw = (t->tq - 1) * t->ps + s->S;
    t->nti = (s->n + t->ti - 1) / t->ti;
    t->ntr = (t->pc + t->tr - 1) / t->tr, t->ntq = (t->qc + t->tq - 1) / t->tq;
    t->swz = bsh_log2(8 / (cc / 8)) + (t->ps > 1);
}

// Tiles in the grid.
long long bsconv_htile_count(const bsconv_htile *t) { return (long long)t->nti * t->ntr * t->ntq; }

// Bytes of one chunk's window.
long long bsconv_htile_bytes(const bsconv_htile *t, int cc) {
    return (long long)t->ti * t->hr * t->hw * cc * 2;
}

// --- the kernel's loops in plain C ------------------------------------------------------

// What one tile's walk reads and writes.
typedef struct {
    const bsconv_shape *s;
    const bsconv_hpack *h;
    const bsconv_htile *t;
    const float *bias, *x, *z;
    float *y;
    int i0, r0, q0;  // the tile's origin
    float *win;      // the window of one chunk, slot-swizzled (8 floats per slot)
    float *acc;      // (tm * np) of one group
} bsh_walk;

// Stages chunk c of the tile's input window into wk->win (zeros outside x).
static void bsh_stage(const bsh_walk *wk, int c) {
    const bsconv_shape *s = wk->s;
    const bsconv_htile *t = wk->t;
    const int nch = wk->h->cc / 8;
    for (int ti = 0; ti < t->ti; ti++)
        for (int yy = 0; yy < t->hr; yy++)
            for (int xx = 0; xx < t->hw; xx++)
                for (int j = 0; j < nch; j++) {
                    const int img = wk->i0 + ti, h = wk->r0 * s->stride - s->pad + yy * t->sub;
                    const int w = wk->q0 * s->stride - s->pad + xx * t->sub;
                    const int in = img < s->n && h >= 0 && h < s->H && w >= 0 && w < s->W;
                    float *dst = wk->win + (size_t)bsh_slot(t, bsh_pos(t, ti, yy, xx), j, nch) * 8;
                    for (int e = 0; e < 8; e++)
                        dst[e] = in ? wk->x[(((size_t)img * s->H + h) * s->W + w) * s->C +
                                            c * wk->h->cc + j * 8 + e]
                                    : 0.0f;
                }
}

// acc += the units of group g in chunk c, for every tile pixel.
static void bsh_units(const bsh_walk *wk, int g, int c) {
    const bsconv_hpack *h = wk->h;
    const bsconv_htile *t = wk->t;
    const int nch = h->cc / 8;
    for (int u = h->ustart[g * h->nchunks + c]; u < h->ustart[g * h->nchunks + c + 1]; u++) {
        const uint32_t code = h->units[u];
        const int r = (int)(code & 255u), sx = (int)(code >> 8 & 255u), j = (int)(code >> 16);
        for (int i = 0; i < t->tm; i++) {
            int ti, tr, tq;
            if (!bsh_pixel(t, i, &ti, &tr, &tq)) continue;
            const int p = bsh_pos(t, ti, tr * t->ps + r, tq * t->ps + sx);
            const float *a = wk->win + (size_t)bsh_slot(t, p, j, nch) * 8;
            for (int k = 0; k < h->np; k++) {
                const int f = k / 8, lane = (k % 8) * 4;
                for (int e = 0; e < 8; e++)
                    wk->acc[(size_t)i * h->np + k] +=
                        a[e] * h->vals[((size_t)u * h->nf + f) * BSH_FRAG_VALS + (lane + e / 2) * 2 + e % 2];
            }
        }
    }
}

// acc += the remainder of group g in chunk c, for every tile pixel (the
// window's element of each entry: its unit's slot, then its place in it).
static void bsh_rem(const bsh_walk *wk, int g, int c) {
    const bsconv_hpack *h = wk->h;
    const bsconv_htile *t = wk->t;
    for (int j = 0; h->nrem && j < h->np; j++) {
        const long sl = ((long)g * h->nchunks + c) * h->np + j;
        for (int32_t e = h->rstart[sl]; e < h->rstart[sl + 1]; e++) {
            const uint32_t code = h->rcode[e];
            const int r = (int)(code & 255u), sx = (int)(code >> 8 & 255u), u8 = (int)(code >> 16 & 255u);
            for (int i = 0; i < t->tm; i++) {
                int ti, tr, tq;
                if (!bsh_pixel(t, i, &ti, &tr, &tq)) continue;
                const int p = bsh_pos(t, ti, tr * t->ps + r, tq * t->ps + sx);
                const float *a = wk->win + (size_t)bsh_slot(t, p, u8, h->cc / 8) * 8;
                wk->acc[(size_t)i * h->np + j] += h->rvals[e] * a[code >> 24];
            }
        }
    }
}

// y element of tile pixel i, channel k (the pooled pixel with a pool); -1 past the plane.
static long long bsh_out(const bsh_walk *wk, int i, int k) {
    const bsconv_htile *t = wk->t;
    int ti, tr, tq;
    if (!bsh_pixel(t, i, &ti, &tr, &tq)) return -1;
    const int img = wk->i0 + ti, r = wk->r0 + tr, q = wk->q0 + tq;
    if (img >= wk->s->n || r >= t->pc || q >= t->qc) return -1;
    const int qo = t->qc / t->win, po = t->pc / t->win;
    return (((long long)img * po + r / t->win) * qo + q / t->win) * wk->s->K + k;
}

// Writes group g's outputs of the tile (the max over each window's 4 pixels with a pool).
static void bsh_epilogue(const bsh_walk *wk, int g) {
    const bsconv_hpack *h = wk->h;
    const int ww = wk->t->win * wk->t->win;
    for (int i = 0; i < wk->t->tm; i += ww)
        for (int j = 0; j < h->nk[g]; j++) {
            const int k = h->k0[g] + j;
            const long long o = bsh_out(wk, i, k);
            if (o < 0) continue;
            float m = -INFINITY;
            for (int a = 0; a < ww; a++)
                m = fmaxf(m, bsconv_epi_cpu(wk->s, wk->acc[(size_t)(i + a) * h->np + j], wk->bias,
                                            wk->z, (size_t)o, k));
            wk->y[o] = m;
        }
}

// Group g of the current tile into wk->acc: slice by slice into part, each
// slice's sums added to acc in slice order.
static void bsh_group(bsh_walk *wk, int g, int nsplit, float *acc, float *part) {
    const size_t n = (size_t)wk->t->tm * wk->h->np;
    memset(acc, 0, n * sizeof *acc);
    wk->acc = part;
    for (int zz = 0; zz < nsplit; zz++) {
        int c0, c1;
        bsh_split_range(zz, nsplit, wk->h->nchunks, &c0, &c1);
        memset(part, 0, n * sizeof *part);
        for (int c = c0; c < c1; c++) {
            bsh_stage(wk, c);
            bsh_units(wk, g, c);
            bsh_rem(wk, g, c);
        }
        for (size_t i = 0; i < n; i++) acc[i] += part[i];
    }
    wk->acc = acc;
}

// The kernel's loops in plain C.
void bsconv_halo_forward_cpu(const bsconv_shape *s, const bsconv_hpack *h, const bsconv_htile *t, int nsplit,
                             const float *bias, const float *x, const float *z, float *y) {
    bsh_walk wk = {s, h, t, bias, x, z, y, 0, 0, 0, NULL, NULL};
    const size_t n = (size_t)t->tm * h->np;
    wk.win = malloc((size_t)bsconv_htile_bytes(t, h->cc) * 2 + 64);
    float *acc = malloc(n * sizeof *acc), *part = malloc(n * sizeof *part);
    const long long tiles = bsconv_htile_count(t);
    if (nsplit < 1 || nsplit > h->nchunks) nsplit = 1;
    for (int tile = 0; wk.win && acc && part && tiles <= INT32_MAX && tile < tiles; tile++) {
        bsh_tile_origin(t, tile, &wk.i0, &wk.r0, &wk.q0);
        for (int g = 0; g < h->ngroups; g++) {
            bsh_group(&wk, g, nsplit, acc, part);
            bsh_epilogue(&wk, g);
        }
    }
    free(wk.win);
    free(acc), free(part);
}
