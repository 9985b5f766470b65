// The vector layout of the block-sparse convolution: applicability, tile
// geometry, packing and the plain-C walk of the kernel (kernels/bsconv_vec.h).
#include "kernels/bsconv_vec.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// 1 when the vector kernel can compute the layer, else 0 and why.
int bsconv_vec_applies(const bsconv_shape *s, const bsconv_bsr *w, char *why, int len) {
    const char *no = NULL;
    int P, Q;
    bsconv_out_size(s, &P, &Q);
    if (w->kb % BSV_NG) no = "the block's output channels are not a multiple of 8";
    else if (s->C % 8) no = "the input channels are not a multiple of 8";
    else if (w->rem_indptr) no = "a hybrid layer's single weights run on the halo kernel only";
    else if (s->pool > 2) no = "a pool wider than 2x2";
    else if ((long long)s->n * s->H * s->W * s->C > INT_MAX || (long long)s->n * P * Q * s->K > INT_MAX)
        no = "x or y past 31-bit indices";
    if (no && why) snprintf(why, (size_t)len, "%s", no);
    return !no;
}

// Largest multiple of m (>= m) at most v, or v itself when m is 1.
static int down_to(int v, int m) { return v < m ? m : v / m * m; }

// 8-row groups of a row order whose rows share a bank group.
int bsconv_vec_row_clashes(const bsv_geom *g, const unsigned char *order) {
    int n = 0;
    for (int m0 = 0; m0 < g->tm; m0 += 8) {
        unsigned seen = 0;
        int clash = 0;
        for (int m = m0; m < m0 + 8 && m < g->tm; m++) {
            int base, out;
            bsv_row(g, 0, order[m], &base, &out);
            clash |= (int)(seen >> (base / 8 % 8) & 1);
            seen |= 1u << (base / 8 % 8);
        }
        n += clash;
    }
    return n;
}

// Window positions from one image of a tile to the next: hr hw, or up to 7
// more where that leaves fewer 8-row groups of the row order on a shared
// bank group (2x2 planes: every image's window of 16 positions starts on
// the same bank group, and 18 puts the next image's rows on the other four).
static int image_pitch(bsv_geom *g) {
    int best = g->hr * g->hw, fewest = -1;
    for (int ip = g->hr * g->hw; g->ti > 1 && ip < g->hr * g->hw + 8; ip++) {
        g->ip = ip;
        unsigned char order[BSV_TM_MAX];
        bsconv_vec_row_order(g, 0, order);
        const int n = bsconv_vec_row_clashes(g, order);
        if (fewest < 0 || n < fewest) fewest = n, best = ip;
    }
    return best;
}

// The geometry of layer s with tiles of at most tm_max pixel rows.
void bsconv_vgeom_of(const bsconv_shape *s, int tm_max, bsv_geom *g) {
    memset(g, 0, sizeof *g);
    g->n = s->n, g->H = s->H, g->W = s->W, g->C = s->C, g->R = s->R, g->S = s->S;
    g->stride = s->stride, g->pad = s->pad;
    bsconv_out_size(s, &g->P, &g->Q);
    bsconv_y_size(s, &g->Po, &g->Qo);
    g->pool = s->pool == 2 ? 2 : 1;
    g->cp = g->pool == 2 ? g->Po * 2 : g->P, g->cq = g->pool == 2 ? g->Qo * 2 : g->Q;
    const int k = g->pool;  // tile sides are multiples of the pool, so no window straddles two tiles
    g->tq = down_to(g->cq < tm_max / k ? g->cq : tm_max / k, k);
    g->tr = down_to(g->cp < tm_max / g->tq ? g->cp : tm_max / g->tq, k);
    g->ti = g->tr >= g->cp && g->tq >= g->cq ? tm_max / (g->tr * g->tq) : 1;
    if (g->ti < 1) g->ti = 1;
    if (g->ti > g->n) g->ti = g->n;
    g->tm = g->ti * g->tr * g->tq;
    g->hr = (g->tr - 1) * g->stride + g->R, g->hw = (g->tq - 1) * g->stride + g->S, g->ldc = g->C + 8;
    g->nti = (g->n + g->ti - 1) / g->ti, g->ntr = (g->cp + g->tr - 1) / g->tr, g->ntq = (g->cq + g->tq - 1) / g->tq;
    g->ip = image_pitch(g);
}

// Bytes of shared memory a CTA of geometry g needs.
long long bsconv_vec_smem(const bsv_geom *g) {
    return BSV_TABLE_BYTES + ((long long)(g->ti - 1) * g->ip + g->hr * g->hw) * g->ldc * 2;
}

// The order of a tile's pixel rows in the kernel's tables (greedy, in the tile's order).
void bsconv_vec_row_order(const bsv_geom *g, int keep, unsigned char *order) {
    for (int m = 0; m < BSV_TM_MAX; m++) order[m] = (unsigned char)m;
    if (keep) return;
    int bank[BSV_TM_MAX], used[BSV_TM_MAX] = {0};
    for (int r = 0; r < g->tm; r++) {
        int base, out;
        bsv_row(g, 0, r, &base, &out);  // tile 0 holds every row of a tile, at the same bases
        bank[r] = base / 8 % 8;         // base in elements: 16-byte slot base / 8
    }
    for (int m = 0; m < g->tm; m++) {
        int pick = -1;
        unsigned banks = 0;
        for (int k = m & ~7; k < m; k++) banks |= 1u << bank[order[k]];
        for (int r = 0; r < g->tm && pick < 0; r++)
            if (!used[r] && !(banks >> bank[r] & 1)) pick = r;
        for (int r = 0; r < g->tm && pick < 0; r++)
            if (!used[r]) pick = r;  // no bank group left free: the next unused row
        used[pick] = 1, order[m] = (unsigned char)pick;
    }
}

// Frees the packed arrays.
void bsconv_vpack_free(bsconv_vpack *p) {
    free(p->gstart);
    free(p->codes);
    free(p->vals);
    memset(p, 0, sizeof *p);
}

// Index in vals of the weight of column k (0-15) of k-step st, channel n of
// the group: the element k % 2 + 2 (k / 8) of lane 4n + k % 8 / 2.
static size_t bsv_val_at(int st, int k, int n) {
    return ((size_t)st * 32 + n * 4 + (k % 8) / 2) * 4 + (k & 1) + 2 * (k / 8);
}

// Column code of filter tap `tap`, channel c.
static uint32_t code_of(const bsconv_shape *s, int tap, int c) {
    return (uint32_t)c | (uint32_t)(tap % s->S) << 16 | (uint32_t)(tap / s->S) << 24;
}

// The bank group of column `code` in the transposed window of the 8x8-pixel
// tiles (bsconv_vec_gpu.h's variants 6-7: 7 stride + R window rows made odd,
// hrp): its 16-byte row (s C + c) hrp + r, mod 8. An ldmatrix phase reads 8
// columns' rows at once, one wavefront where their bank groups differ.
static int tp_slot(const bsconv_shape *s, uint32_t code) {
    const unsigned hrp = (unsigned)((7 * s->stride + s->R) | 1);
    return (int)((((code >> 16 & 255u) * (unsigned)s->C + (code & 0xFFFFu)) * hrp + (code >> 24)) & 7u);
}

// A padding column (zero weights) of bank group `slot`: channel c at tap 0, c hrp = slot mod 8.
static uint32_t pad_code(const bsconv_shape *s, int slot) {
    for (int c = 0; c < 8; c++)
        if (tp_slot(s, code_of(s, 0, c)) == slot) return code_of(s, 0, c);
    return 0;  // unreachable: hrp is odd, so c = 0..7 meets every group
}

// Fills group g's k-steps from step st: the columns of block row i, channel
// slice j. The columns, sorted by bank group (tp_slot), are dealt to the
// group's half-steps (k 0-7 and 8-15 of each k-step) in turn, so a half-step
// holds two columns of one bank group only where that group has more columns
// than there are half-steps; padding takes the groups a half-step lacks.
// code and slot: scratch of the group's column count.
static void pack_group(const bsconv_shape *s, const bsconv_bsr *w, int i, int j, int st, bsconv_vpack *p,
                       uint32_t *code, int *slot) {
    int n = 0, cnt[8] = {0}, first[9] = {0};
    for (int b = w->indptr[i]; b < w->indptr[i + 1]; b++)
        for (int cc = 0; cc < w->cb; cc++, n++) {
            const int kc = w->indices[b] * w->cb + cc;
            code[n] = code_of(s, kc / s->C, kc % s->C);
            cnt[slot[n] = tp_slot(s, code[n])]++;
        }
    for (int x = 0; x < 8; x++) first[x + 1] = first[x] + cnt[x];
    const int nh = 2 * ((n + BSV_KSTEP - 1) / BSV_KSTEP);
    int col = 0;
    for (int b = w->indptr[i]; b < w->indptr[i + 1]; b++)
        for (int cc = 0; cc < w->cb; cc++, col++) {
            const int idx = first[slot[col]]++, h = idx % nh;  // rank in slot order, then its half-step
            const int step = st + h / 2, k = (h % 2) * 8 + idx / nh;
            p->codes[step * BSV_KSTEP + k] = code[col];
            for (int n8 = 0; n8 < BSV_NG; n8++)
                p->vals[bsv_val_at(step, k, n8)] = w->data[((size_t)b * w->kb + j * BSV_NG + n8) * w->cb + cc];
        }
    for (int h = 0; h < nh; h++) {  // padding: the bank groups this half-step lacks
        const int step = st + h / 2, k0 = (h % 2) * 8, real = n / nh + (h < n % nh);
        unsigned have = 0;
        for (int k = 0; k < real; k++) have |= 1u << tp_slot(s, p->codes[step * BSV_KSTEP + k0 + k]);
        for (int k = real, x = 0; k < 8; k++, x++) {
            while (x < 7 && (have >> x & 1)) x++;
            p->codes[step * BSV_KSTEP + k0 + k] = pad_code(s, x);
            have |= 1u << x;
        }
    }
}

// The shared-memory bank class of column `code` in the plain window: one
// load of the gather reads 4 columns (k = 2 l + e + 8 h for lanes l % 4 =
// 0..3) for 8 pixels whose window positions sit 4 banks apart, so column c
// lands in bank 4 (pixel + tap position) + c / 2 mod 32 and two of the 4
// columns meet in a bank exactly when their (c / 2) % 4 are equal.
static int lane_class(uint32_t code) { return (int)(code >> 1 & 3u); }

// Permutes the 8 columns of the half-step at k-step st, k0 (codes with their
// weights) so that its even k (read by one load) and its odd k (another)
// hold as few pairs of one lane class as any split does: each class's
// columns are split evenly between the two sides, and the odd one out of
// each odd-sized class goes to the sides in turn (as many are left as the
// sides lack, and it is an even number). The half-step keeps its columns,
// so the transposed window's dealing (pack_group) holds.
static void deal_lanes(bsconv_vpack *p, int st, int k0) {
    uint32_t code[8];
    float val[8][BSV_NG];
    int cnt[4] = {0}, seen[4] = {0}, next[2] = {0, 1}, odd = 0;
    for (int k = 0; k < 8; k++) {
        code[k] = p->codes[st * BSV_KSTEP + k0 + k];
        cnt[lane_class(code[k])]++;
        for (int n = 0; n < BSV_NG; n++) val[k][n] = p->vals[bsv_val_at(st, k0 + k, n)];
    }
    for (int k = 0; k < 8; k++) {
        const int c = lane_class(code[k]), r = seen[c]++;
        const int side = r < cnt[c] / 2 * 2 ? r & 1 : odd++ & 1;
        const int to = next[side];
        next[side] += 2;
        p->codes[st * BSV_KSTEP + k0 + to] = code[k];
        for (int n = 0; n < BSV_NG; n++) p->vals[bsv_val_at(st, k0 + to, n)] = val[k][n];
    }
}

// Builds the vector weights of a layer the kernel applies to.
int bsconv_vpack_build(const bsconv_shape *s, const bsconv_bsr *w, bsconv_vpack *p, sc_err *err) {
    memset(p, 0, sizeof *p);
    SC_TRY(bsconv_check(s, w, err));
    char why[120];
    if (!bsconv_vec_applies(s, w, why, sizeof why)) return sc_fail(err, "block-sparse conv: vector kernel: %s", why);
    const int per = w->kb / BSV_NG;
    p->ng = s->K / BSV_NG;
    p->gstart = calloc((size_t)p->ng + 1, sizeof *p->gstart);
    if (!p->gstart) return sc_fail(err, "block-sparse conv: out of memory");
    for (int g = 0; g < p->ng; g++) {
        const int i = g / per, cols = (w->indptr[i + 1] - w->indptr[i]) * w->cb;
        p->gstart[g + 1] = p->gstart[g] + (cols + BSV_KSTEP - 1) / BSV_KSTEP;
    }
    p->nsteps = p->gstart[p->ng];
    p->codes = calloc((size_t)p->nsteps * BSV_KSTEP + 1, sizeof *p->codes);
    p->vals = calloc((size_t)p->nsteps * 128 + 1, sizeof *p->vals);
    if (!p->codes || !p->vals) {
        bsconv_vpack_free(p);
        return sc_fail(err, "block-sparse conv: out of memory");
    }
    int most = 0;  // the most columns of any group: the scratch pack_group needs
    for (int i = 0; i < p->ng / per; i++)
        if ((w->indptr[i + 1] - w->indptr[i]) * w->cb > most) most = (w->indptr[i + 1] - w->indptr[i]) * w->cb;
    uint32_t *code = malloc(((size_t)most + 1) * sizeof *code);
    int *slot = malloc(((size_t)most + 1) * sizeof *slot);
    if (!code || !slot) {
        free(code), free(slot);
        bsconv_vpack_free(p);
        return sc_fail(err, "block-sparse conv: out of memory");
    }
    for (int g = 0; g < p->ng; g++) pack_group(s, w, g / per, g % per, p->gstart[g], p, code, slot);
    free(code), free(slot);
    for (int st = 0; st < p->nsteps; st++) deal_lanes(p, st, 0), deal_lanes(p, st, 8);
    return 0;
}

// Window position pos of tile t: the input pixel it holds, as an element
// offset of x (channel 0), or -1 for zeros (outside the image or the batch).
static long long walk_src(const bsv_geom *g, int t, int pos) {
    int img0, p0, q0;
    bsv_tile(g, t, &img0, &p0, &q0);
    const int ii = pos / g->ip, yy = pos % g->ip / g->hw, xx = pos % g->ip % g->hw;
    if (yy >= g->hr) return -1;  // between two images' windows
    const int img = img0 + ii, h = p0 * g->stride - g->pad + yy, w = q0 * g->stride - g->pad + xx;
    if (img >= g->n || h < 0 || h >= g->H || w < 0 || w >= g->W) return -1;
    return (((long long)img * g->H + h) * g->W + w) * g->C;
}

// Stages tile t's window of x into win (zeros outside the image), as the kernel does.
static void walk_stage(const bsv_geom *g, int t, const float *x, float *win) {
    const int npos = (g->ti - 1) * g->ip + g->hr * g->hw;
    for (int pos = 0; pos < npos; pos++) {
        const long long src = walk_src(g, t, pos);
        for (int c = 0; c < g->ldc; c++) win[(size_t)pos * g->ldc + c] = src >= 0 && c < g->C ? x[src + c] : 0.0f;
    }
}

// Group gi's sum for the pixel at window base `base`, channel n of the group.
static float walk_sum(const bsv_geom *g, const bsconv_vpack *p, int gi, int n, const float *win, int base) {
    float acc = 0.0f;
    for (int st = p->gstart[gi]; st < p->gstart[gi + 1]; st++)
        for (int k = 0; k < BSV_KSTEP; k++)
            acc += p->vals[bsv_val_at(st, k, n)] * win[base + bsv_off(g, p->codes[st * BSV_KSTEP + k])];
    return acc;
}

// Runs the kernel's loops in plain C at tile size tm_max.
int bsconv_vec_forward_cpu(const bsconv_shape *s, const bsconv_vpack *p, int tm_max, const float *bias,
                           const float *x, const float *z, float *y, sc_err *err) {
    bsv_geom g;
    bsconv_vgeom_of(s, tm_max, &g);
    float *win = malloc((size_t)(bsconv_vec_smem(&g) - BSV_TABLE_BYTES) / 2 * sizeof *win);
    if (!win) return sc_fail(err, "block-sparse conv: out of memory");
    const int ntiles = g.nti * g.ntr * g.ntq;
    for (int t = 0; t < ntiles; t++) {
        walk_stage(&g, t, x, win);
        for (int m = 0; m < g.tm; m++) {
            int base, out;
            bsv_row(&g, t, m, &base, &out);
            if (out < 0) continue;
            for (int gi = 0; gi < p->ng; gi++)
                for (int n = 0; n < BSV_NG; n++) {
                    const int k = gi * BSV_NG + n;
                    const size_t o = (size_t)out * s->K + k;
                    const float v = bsconv_epi_cpu(s, walk_sum(&g, p, gi, n, win, base), bias, z, o, k);
                    y[o] = g.pool == 2 && m % 4 ? (v > y[o] ? v : y[o]) : v;  // a window's first row writes
                }
        }
    }
    free(win);
    return 0;
}
