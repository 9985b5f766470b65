// Host side of the sparse conv GPU code (kernels/spconv_gpu.h): the layer's
// entries decomposed into (channel, kernel row, kernel column), the variant
// list for a batch size with each variant's shared-memory layout, the weight
// tables a variant reads, tuning by timing, and the public API.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/device_gpu.h"
#include "kernels/spconv_impl.h"

// Tile caps by choice (the device's own limits may be lower: spg_smem_cap).
#define SPG_TILE_SMEM (100 * 1024)  // two tiled blocks per SM
#define SPG_BIG_HEADROOM (8 * 1024) // big pair blocks leave this much of the SM's shared memory
#define SPG_MAX_SMEM (200 * 1024)   // ell and linear
#define SPG_MAX_VARIANTS 256
#ifdef SC_TEST_PLANT_WRONG  // test builds: each variant followed at the end by a wrong copy
#define SPG_LIST_CAP (2 * SPG_MAX_VARIANTS)
#else
#define SPG_LIST_CAP SPG_MAX_VARIANTS
#endif
// Check tolerances against the plain kernel (max |variant - plain| / max |plain|).
#define SPG_TOL32 1e-4f
#define SPG_TOL16 2e-2f

// --- small helpers ------------------------------------------------------------

// Shared memory one block may use when `per_sm` blocks share an SM of the
// layer's device, at most `want` (H100: 1 -> 227 KB, 3 -> 75 KB, 4 -> 56 KB).
static long spg_smem_cap(const spconv_gpu *g, int per_sm, long want) {
    const gpu_devinfo *d = &g->dev;
    const long fit = (long)d->smem_sm / per_sm - d->smem_reserved;
    return std::min(want, std::min(fit, (long)d->smem_block_optin));
}

// Smallest multiple of m that is >= x.
static int spg_roundup(int x, int m) { return (x + m - 1) / m * m; }

// ceil(x / y) for positive y.
static int spg_cdiv(int x, int y) { return (x + y - 1) / y; }

// Raw bits of half2 (h, h) for a float h (round to nearest).
static uint32_t spg_h2bits(float v) {
    const __half h = __float2half_rn(v);
    uint16_t b;
    memcpy(&b, &h, 2);
    return (uint32_t)b | ((uint32_t)b << 16);
}

// A float rounded to fp16 and back.
static float spg_round_half(float v) { return __half2float(__float2half_rn(v)); }

// Device copy of a host array (NULL in, NULL out), complete on return: a
// pageable cudaMemcpy may still be in flight when it returns, and kernels on
// a non-blocking stream do not wait for it.
static int spg_upload(void **dst, const void *src, size_t bytes, sc_err *err) {
    *dst = NULL;
    if (!src) return 0;
    cudaCheck(err, cudaMalloc(dst, bytes ? bytes : 16));
    return gpu_upload(*dst, src, bytes, err);
}

// --- entries --------------------------------------------------------------------

// Orders the rows by descending count of non-zeros (ties: by index) into g->perm.
static int spg_order(spconv_gpu *g, sc_err *err) {
    const int K = g->d.K, nnz = g->d.nnz_row;
    g->perm = (int *)malloc((size_t)K * sizeof(int));
    if (!g->perm) return sc_fail(err, "out of memory");
    std::vector<int> len(K, 0);
    for (int k = 0; k < K; k++) {
        g->perm[k] = k;
        for (int j = 0; j < nnz; j++) len[k] += g->e_code[(size_t)k * nnz + j] != 16;
    }
    std::stable_sort(g->perm, g->perm + K, [&](int x, int y) { return len[x] > len[y]; });
    return 0;
}

// Sorts each row by offset and splits every offset into channel, kernel row
// and kernel column; window_ok = 0 when one falls outside its conv window.
static int spg_entries(spconv_gpu *g, const spconv_desc *d, const uint8_t *codes, sc_err *err) {
    const int nnz = d->nnz_row;
    const size_t n = (size_t)d->K * nnz, m = n ? n : 1;
    g->e_c = (int *)malloc(m * sizeof(int)), g->e_r = (int *)malloc(m * sizeof(int));
    g->e_s = (int *)malloc(m * sizeof(int)), g->e_v = (float *)malloc(m * sizeof(float));
    g->e_code = (uint8_t *)malloc(m);
    if (!g->e_c || !g->e_r || !g->e_s || !g->e_v || !g->e_code) return sc_fail(err, "out of memory");
    const long plane = (long)g->hb * g->wb;
    std::vector<int> idx(nnz);
    g->window_ok = 1, g->nnz_real = 0;
    for (int k = 0; k < d->K; k++) {
        const int32_t *off = d->offsets + (size_t)k * nnz;
        for (int j = 0; j < nnz; j++) idx[j] = j;
        std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return off[x] < off[y]; });
        for (int jj = 0; jj < nnz; jj++) {
            const size_t src = (size_t)k * nnz + idx[jj], dst = (size_t)k * nnz + jj;
            const long o = off[idx[jj]];
            const int c = (int)(o / plane), rem = (int)(o % plane);
            const int r = rem / g->wb - g->rmin, s = rem % g->wb - g->cmin;
            if (o < 0 || c >= d->C || r < 0 || r >= d->R || s < 0 || s >= d->S) g->window_ok = 0;
            const float v = d->values[src];
            int code = codes ? (codes[src / 2] >> (4 * (src & 1))) & 15 : 0;
            if (v == 0.0f) code = 16;
            else g->nnz_real++;
            g->e_c[dst] = c, g->e_r[dst] = r, g->e_s[dst] = s, g->e_v[dst] = v;
            g->e_code[dst] = (uint8_t)code;
        }
    }
    return spg_order(g, err);
}

// Uploads bias, row scale and the plain kernel's decoded weights and offsets.
static int spg_upload_layer(spconv_gpu *g, const spconv_desc *d, const uint8_t *codes,
                            const float *row_scale, sc_err *err) {
    const size_t n = (size_t)d->K * d->nnz_row;
    SC_TRY(spg_upload((void **)&g->d_bias, d->bias, (size_t)d->K * sizeof(float), err));
    if (g->vt == SPG_CB4)
        SC_TRY(spg_upload((void **)&g->d_scale, row_scale, (size_t)d->K * sizeof(float), err));
    std::vector<float> gw(n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        float v = d->values[i];
        if (g->vt == SPG_CB4 && v != 0.0f) {
            const int code = (codes[i / 2] >> (4 * (i & 1))) & 15;
            v = g->cbf[code] * (row_scale ? row_scale[i / d->nnz_row] : 1.0f);
        }
        gw[i] = v;
    }
    SC_TRY(spg_upload((void **)&g->d_gw, gw.data(), n * sizeof(float), err));
    SC_TRY(spg_upload((void **)&g->d_goff, d->offsets, n * sizeof(int32_t), err));
    return 0;
}

// --- layouts --------------------------------------------------------------------

// Fields every variant shares.
static void spg_base_args(const spconv_gpu *g, spk_cfg *c) {
    const spconv_desc *d = &g->d;
    spk_args *a = &c->a;
    a->K = d->K, a->C = d->C, a->nnz = d->nnz_row, a->nnzp = spg_roundup(d->nnz_row, 4);
    a->R = d->R, a->S = d->S, a->stride = d->stride, a->Hb = g->hb, a->Wb = g->wb;
    a->P = d->P, a->Q = d->Q, a->Po = g->po, a->Qo = g->qo, a->ob = d->out_border;
    a->relu = d->relu, a->pool = g->pool2, a->pk = d->pool_k, a->ps = d->pool_stride;
    a->pp = d->pool_pad, a->rmin = g->rmin, a->cmin = g->cmin, a->vs = 1;
    a->bias = g->d_bias;
    a->scale = g->vt == SPG_CB4 && c->kind != SPK_PLAIN ? g->d_scale : NULL;
    a->goff = g->d_goff;
    a->perm = NULL;  // set by spg_select
    if (c->kind == SPK_PLAIN) a->w = g->d_gw;
    memcpy(a->cbf, g->cbf, sizeof a->cbf);
    memcpy(a->cbh, g->cbh, sizeof a->cbh);
}

// Shared-memory bank conflicts of the tiled kernel's unit bases (slots of cw
// words; a warp's access of cw-word slots is served 32/cw lanes at a time):
// the sum over lane groups of the most distinct slots one bank group serves.
static int spg_conflicts(const spk_args *a, int rs, int rp, int ip, int cw) {
    const int lanes = 32 / cw;
    int cost = 0;
    for (int w0 = 0; w0 < a->ub; w0 += lanes) {
        int cnt[32] = {0}, deg = 0;
        for (int u = w0; u < a->ub && u < w0 + lanes; u++) {
            const int l = u % a->lc, i = (u / a->lc) % a->nb, gq = u / (a->lc * a->nb);
            const int b = (i * ip + gq * rs * a->stride * rp + l) % lanes;
            deg = std::max(deg, ++cnt[b]);
        }
        cost += deg;
    }
    return cost;
}

// Picks row and image pitch paddings with the fewest bank conflicts.
static void spg_tile_pads(spk_args *a, int rs, int rp0, int cw) {
    int best = -1;
    for (int rpad = 0; rpad < 8; rpad++)
        for (int ipad = 0; ipad < 32; ipad++) {
            const int rp = rp0 + rpad, ip = a->cc * a->br * rp + ipad;
            const int cost = spg_conflicts(a, rs, rp, ip, cw);
            if (best >= 0 && cost >= best) continue;
            best = cost, a->rp = rp, a->cp = a->br * rp, a->ip = ip;
        }
}

// Units per tile row of a tiled variant: fp32 one column each, fp16 and cb4
// a column pair, SPK_PAIR cw columns (with a pool an even count).
static int spg_tile_units(const spconv_gpu *g, const spk_cfg *c) {
    const int pool = g->pool2;
    if (c->kind == SPK_PAIR)
        return pool ? spg_roundup(spg_cdiv(2 * g->qo, c->cw), 2) : spg_cdiv(g->d.Q, c->cw);
    if (g->vt == SPG_FP32) return pool ? 2 * g->qo : g->d.Q;
    return pool ? g->qo : (g->d.Q + 1) / 2;
}

// Threads per block, block slots of the device (SMs x blocks per SM, for
// the ki loop) and tile cap of a tiled variant: 256 threads, two blocks per SM;
// big pair blocks 512 threads, one per SM; occ3 / occ4 pair blocks 256
// threads, three / four per SM.
static void spg_tile_family(const spconv_gpu *g, const spk_cfg *c, int *thr, int *slots,
                            long *cap) {
    const int big = c->kind == SPK_PAIR ? c->big : 0;
    const int per_sm = big == 1 || big == 2 ? 1 : big >= 3 ? big : 2;
    *thr = per_sm == 1 ? 512 : 256;
    *slots = g->dev.sms * per_sm;
    const long big_tile = (long)g->dev.smem_sm - SPG_BIG_HEADROOM;  // 220 KB on Hopper
    const long want = per_sm == 1 ? big_tile : per_sm == 2 ? SPG_TILE_SMEM : LONG_MAX;
    *cap = spg_smem_cap(g, per_sm, want);
}

// Layout of the tiled kernel for (rs, rb, nb) at batch n (SPK_TILE, and
// SPK_PAIR with cw columns per unit; big pair blocks: 512 threads, one block
// per SM, the SM's shared memory less SPG_BIG_HEADROOM of tile; occ3 / occ4: the smaller tile caps);
// -1 when it does not apply.
static int spg_layout_tile(const spconv_gpu *g, int n, spk_cfg *c) {
    const spconv_desc *d = &g->d;
    spk_args *a = &c->a;
    const int pair = c->kind == SPK_PAIR, cw = pair ? c->cw : 1;
    int thr, slots;
    long cap;
    spg_tile_family(g, c, &thr, &slots, &cap);
    const int fp32 = g->vt == SPG_FP32 && !pair, pool = g->pool2, rs = c->rs;
    if (pool && (rs & 1)) return -1;
    if (pair && g->vt != SPG_FP32) return -1;
    const int rows = pool ? 2 * g->po : d->P;
    a->lc = spg_tile_units(g, c);
    a->nb = c->nb;
    if (a->lc * a->nb > 256) return -1;  // units per block <= 256 (big blocks too)
    a->g = c->g1 ? 1 : std::min(std::max(1, 128 / (a->lc * a->nb)), spg_cdiv(rows, rs));
    if (c->gd > 1) a->g = std::max(1, a->g / c->gd);
    a->ub = a->lc * a->nb * a->g, a->ubp = spg_roundup(a->ub, 32);
    if (a->ubp > 256) return -1;
    const int kg = std::max(1, thr / a->ubp);
    c->threads = a->ubp * kg, a->kb = kg * c->rb;
    a->pb = a->g * rs, a->bands = spg_cdiv(rows, a->pb);
    a->br = (a->pb - 1) * a->stride + d->R;  // a->stride: the view's (spg_view)
    const int emax = (d->S - 1) / a->stride;
    a->pw = fp32 || pair ? a->lc + emax : 2 * (a->lc + emax / 2), a->np = a->pw / 2;
    const int rp0 = a->stride * a->pw;
    long cc = d->C;  // channels per chunk: as many as fit, then re-checked with the pads
    for (int pass = 0; pass < 4; pass++) {  // sizes in slots of cw words
        const long words = cap / (4 * cw) - 2 * (rp0 + 8);
        const long per_ch = (long)a->br * (pass ? a->rp : rp0);
        cc = std::min<long>(cc, (words / a->nb - 32) / per_ch);
        if (cc < 1) return -1;
        a->nch = spg_cdiv(d->C, (int)cc), a->cc = spg_cdiv(d->C, a->nch);
        spg_tile_pads(a, rs, rp0, cw);
        c->smem = (size_t)(2 * a->rp + a->nb * a->ip) * 4 * cw;
        if ((long)c->smem <= cap) break;
        cc = a->cc - 1;
    }
    if ((long)c->smem > cap || a->rp > c->threads) return -1;  // staging: a line per pass
    a->f_rp = spk_fdiv_make(a->rp), a->f_br = spk_fdiv_make(a->br), a->f_cc = spk_fdiv_make(a->cc);
    if (pair) a->nnzp = spg_roundup(d->nnz_row + a->nch, 4);  // segments padded to even lengths
    const int kblocks = spg_cdiv(d->K, a->kb), others = a->bands * spg_cdiv(n, a->nb);
    a->ki = 1;
    while (a->nch == 1 && 2 * a->ki <= kblocks && spg_cdiv(kblocks, 2 * a->ki) * others >= slots)
        a->ki *= 2;
    return 0;
}

// Layout of the channels-along-lanes kernel; -1 when it does not apply.
static int spg_layout_ell(const spconv_gpu *g, spk_cfg *c) {
    const spconv_desc *d = &g->d;
    spk_args *a = &c->a;
    if (g->pool2 && (c->et & 1)) return -1;
    const int rows = g->pool2 ? 2 * g->po : d->P, cols = g->pool2 ? 2 * g->qo : d->Q;
    a->et = c->et, a->cs = c->cs, a->kbt = c->kbt, a->ni = c->ni;
    a->ebr = (c->et - 1) * a->stride + d->R, a->ebc = (c->et - 1) * a->stride + d->S;
    const size_t es = g->vt == SPG_FP32 ? 4 : 2;
    const size_t tile = (size_t)c->ni * d->C * a->ebr * a->ebc * es;
    a->red_off = (int)((tile + 15) / 16 * 4);
    c->threads = c->kbt * c->cs;
    c->smem = (size_t)a->red_off * 4 + ((size_t)c->threads * c->ni * c->et * c->et + 32) * 4;
    if ((long)c->smem > spg_smem_cap(g, 1, SPG_MAX_SMEM)) return -1;
    a->tiles_q = spg_cdiv(cols, c->et), a->ntiles = spg_cdiv(rows, c->et) * a->tiles_q;
    a->f_plane = spk_fdiv_make(a->ebr * a->ebc), a->f_ebc = spk_fdiv_make(a->ebc);
    return 0;
}

// Layout of the sparse linear kernel; -1 when the input does not fit.
static int spg_layout_linear(const spconv_gpu *g, spk_cfg *c) {
    c->threads = 256;
    c->smem = ((size_t)32 * (g->d.C + 1) + 32) * 4;
    c->a.lkb = c->lkb, c->a.f_c = spk_fdiv_make(g->d.C);
    return (long)c->smem > spg_smem_cap(g, 1, SPG_MAX_SMEM) ? -1 : 0;
}

// Describes a 1x1 layer with stride s > 1 to a tiled or ell variant as a
// stride-1 layer over the view of every s-th input row and column (element
// (y, x) at bordered (rmin + y s, cmin + x s)), so that the kernel stages only
// the inputs its windows read; other layers keep vs = 1.
static void spg_view(const spconv_gpu *g, spk_args *a) {
    if (g->d.R == 1 && g->d.S == 1 && g->d.stride > 1) a->vs = g->d.stride, a->stride = 1;
}

// Fills variant c's layout for batch n; -1 when it does not apply.
static int spg_layout(const spconv_gpu *g, int n, spk_cfg *c) {
    spg_base_args(g, c);
    switch (c->kind) {
    case SPK_TILE:
    case SPK_PAIR: spg_view(g, &c->a); return spg_layout_tile(g, n, c);
    case SPK_ELL: spg_view(g, &c->a); return spg_layout_ell(g, c);
    case SPK_LINEAR: return spg_layout_linear(g, c);
    default: c->threads = 256, c->smem = 0; return 0;
    }
}

// --- variant list ---------------------------------------------------------------

// Appends variant c when it applies to batch n and fits the device.
static void spg_add(const spconv_gpu *g, int n, spk_cfg c, spk_cfg *out, int *m) {
    if (*m < SPG_MAX_VARIANTS && spg_layout(g, n, &c) == 0 &&
        (long)c.smem <= g->dev.smem_block_optin)
        out[(*m)++] = c;
}

// The channels-along-lanes variants with ni images per block (tile sides
// from et_min; ni > 1 only where an instance exists: et 1 and 2 with 2 or 4, et 1
// with 16).
static void spg_add_ell(const spconv_gpu *g, int n, int et_min, int ni, spk_cfg *out, int *m) {
    static const int kc[][2] = {{32, 2}, {32, 8}, {64, 1}, {64, 4}, {128, 2}};
    for (int et = et_min; et <= 4; et *= 2) {
        if ((ni > 1 && ni <= 4 && et > 2) || (ni == 16 && et > 1)) continue;
        for (int i = 0; i < 5; i++) {
            spk_cfg c = {};
            c.kind = SPK_ELL, c.et = et, c.ni = ni, c.kbt = kc[i][0], c.cs = kc[i][1];
            spg_add(g, n, c, out, m);
        }
    }
}

// After tiled variant c (listed or not): the same with the fewest times
// fewer row groups per block (gd 2, 4, 8) that make C fit one chunk, when c
// itself needs several and >= 3/4 of the smaller block's lanes have a unit. With
// several chunks each block stages only kb output channels' worth of input
// (ki = 1), so a tall band costs K / kb stagings of the whole input; a
// shorter band stages it once per band and lets the richer (rs, cw) variants
// compete on small-C layers (resnet18 layer1: 64 channels of 32x32).
static void spg_add_gfit(const spconv_gpu *g, int n, spk_cfg c, spk_cfg *out, int *m) {
    spk_cfg t = c;
    if (spg_layout(g, n, &t) == 0 && t.a.nch == 1) return;
    const int g0 = t.a.g;  // 0 when the layout stopped before setting it
    for (int gd = 2; gd <= 8; gd *= 2) {
        t = c;
        t.gd = gd;
        if (spg_layout(g, n, &t) != 0 || t.a.g >= g0 || t.a.nch > 1) continue;
        if (4 * t.a.ub >= 3 * t.a.ubp) spg_add(g, n, t, out, m);
        return;
    }
}

// The fp32 tiled variants with cw = 2 or 4 columns per thread (SPK_PAIR; the
// (rs, rb, cw) with an instance in spconv_pairs.cu), nb images per block as
// the one-column ones.
static void spg_add_pairs(const spconv_gpu *g, int n, spk_cfg *out, int *m) {
    static const int rrw[][3] = {{1, 8, 2}, {2, 4, 2}, {4, 2, 2}, {4, 4, 2}, {2, 8, 2},
                                 {1, 4, 4}, {2, 2, 4}, {2, 4, 4}, {4, 2, 4}};
    for (int i = 0; i < 9; i++)
        for (int nb = 1; nb <= 16; nb *= 2) {
            spk_cfg c = {};
            c.kind = SPK_PAIR, c.rs = rrw[i][0], c.rb = rrw[i][1], c.cw = rrw[i][2], c.nb = nb;
            if (nb > 1 && (nb > n || spg_tile_units(g, &c) * nb > 64)) continue;
            if (!spk_pair_fn(c.rs, c.rb, c.cw, g->pool2, 0)) continue;
            spg_add(g, n, c, out, m);
            const spk_cfg *last = *m > 0 ? &out[*m - 1] : NULL;
            const int more = nb == 1 && n <= 16 && last && last->kind == SPK_PAIR && last->a.g > 1;
            spg_add_gfit(g, n, c, out, m);
            if (more) {
                c.g1 = 1;  // small batch: one row group per block for more blocks
                spg_add(g, n, c, out, m);
            }
        }
}

// The big (512-thread, one block per SM) pair variants, for conv planes of at
// most 64 pixels (8x8, 4x4 and odd small planes): each staged chunk serves
// twice the output channels of the 256-thread blocks and the tile holds about
// twice the channels (bench/kernels_small.md); nb images per block as the pair
// list where at least half the lanes have a unit, no short-band or one-group
// copies.
static void spg_add_big(const spconv_gpu *g, int n, spk_cfg *out, int *m) {
    static const int rrw[][3] = {{1, 8, 2}, {2, 4, 2}, {2, 8, 2}, {4, 4, 2},
                                 {1, 4, 4}, {2, 4, 4}, {4, 2, 4}};
    if (g->d.P * g->d.Q > 64) return;
    for (int big = 1; big <= 2; big++)  // 2: the next row's first records loaded early
        for (int i = 0; i < 7; i++)
            for (int nb = 1; nb <= 16; nb *= 2) {
                spk_cfg c = {};
                c.kind = SPK_PAIR, c.rs = rrw[i][0], c.rb = rrw[i][1], c.cw = rrw[i][2], c.nb = nb;
                c.big = big;
                if (nb > 1 && (nb > n || spg_tile_units(g, &c) * nb > 64)) continue;
                if (!spk_pair_fn(c.rs, c.rb, c.cw, g->pool2, big)) continue;
                spk_cfg t = c;  // listed where at least half the lanes have a unit
                if (spg_layout(g, n, &t) == 0 && 2 * t.a.ub >= t.a.ubp) spg_add(g, n, c, out, m);
            }
}

// The occ3 / occ4 pair variant of (rs, rb, cw, nb) with the band height (gd
// 1-8) that gives the widest channel block kb with >= 3/4 of the lanes busy
// (ties: fewest chunks, then the tallest band); -1 when none applies.
static int spg_occ_pick(const spconv_gpu *g, int n, spk_cfg c, spk_cfg *best) {
    int found = -1;
    for (int gd = 1; gd <= 8; gd *= 2) {  // a gd that changes nothing ties and is skipped
        spk_cfg t = c;
        t.gd = gd;
        if (spg_layout(g, n, &t) != 0 || 4 * t.a.ub < 3 * t.a.ubp) continue;
        if (found == 0 && (t.a.kb < best->a.kb || (t.a.kb == best->a.kb &&
                                                   t.a.nch >= best->a.nch)))
            continue;
        *best = t, found = 0;
    }
    return found;
}

// The pair variants with 3 or 4 blocks of 256 threads per SM (occ3: 16
// accumulators, <= 80 registers, <= 75 KB tile; occ4: 8, <= 64, <= 56 KB):
// more warps to hide the latencies the 2-block variants wait on, for more
// staging per FMA (bench/kernels_small.md). Listed at batch >= 32 where the
// grid has more blocks than two per SM (else they add no warps), every
// (instance, nb) once with the band of spg_occ_pick; after every other
// variant, so no older index moves.
static void spg_add_occ(const spconv_gpu *g, int n, spk_cfg *out, int *m) {
    static const int rrw[2][4][3] = {{{2, 4, 2}, {4, 2, 2}, {2, 2, 4}, {1, 4, 4}},
                                     {{2, 2, 2}, {4, 1, 2}, {2, 1, 4}, {1, 2, 4}}};
    if (n < 32) return;
    for (int occ = 3; occ <= 4; occ++)
        for (int i = 0; i < 4; i++)
            for (int nb = 1; nb <= 16; nb *= 2) {
                const int *r = rrw[occ - 3][i];
                spk_cfg c = {}, t;
                c.kind = SPK_PAIR, c.rs = r[0], c.rb = r[1], c.cw = r[2], c.nb = nb, c.big = occ;
                if (nb > 1 && (nb > n || spg_tile_units(g, &c) * nb > 64)) continue;
                if (!spk_pair_fn(c.rs, c.rb, c.cw, g->pool2, occ)) continue;
                if (spg_occ_pick(g, n, c, &t) != 0 || *m >= SPG_MAX_VARIANTS) continue;
                const long blocks = (long)t.a.bands * spg_cdiv(n, t.a.nb) *
                                    spg_cdiv(g->d.K, t.a.kb * t.a.ki);
                if (blocks > 2L * g->dev.sms) out[(*m)++] = t;  // else <= 2 per SM would run
            }
}

#ifdef SC_TEST_PLANT_WRONG
// Test builds: appends a copy of every variant but the plain one whose rows
// are empty (bias and ReLU only: faster than the original and wrong, so a
// tuner that timed before checking would pick one), then a copy that asks
// for more shared memory than any GPU has. Returns the new count.
static int spg_plant(spk_cfg *out, int m) {
    int k = m;
    for (int v = 1; v < m; v++) out[k] = out[v], out[k++].planted = 1;
    if (m > 1) out[k] = out[1], out[k].planted = 2, out[k++].smem = (size_t)1 << 30;
    return k;
}
#endif

// Lists the variants for batch n (index 0: the plain kernel); returns the count.
static int spg_candidates(const spconv_gpu *g, int n, spk_cfg *out) {
    int m = 0;
    spk_cfg c = {};
    c.kind = SPK_PLAIN;
    spg_add(g, n, c, out, &m);
    if (!g->window_ok) return m;
    if (g->linear) {
        for (int lkb = 32; lkb <= 128; lkb *= 4) {
            c = spk_cfg{};
            c.kind = SPK_LINEAR, c.lkb = lkb;
            spg_add(g, n, c, out, &m);
        }
        spg_add_ell(g, n, 1, 1, out, &m);
        if (n > 16) spg_add_ell(g, n, 1, 16, out, &m);
        return m;
    }
    if (g->d.pool_k > 0 && !g->pool2) return m;
    static const int rsrb[][2] = {{1, 2}, {1, 4}, {1, 8}, {2, 2}, {2, 4}, {2, 8}, {4, 2}, {4, 4}};
    const int q = g->vt == SPG_FP32 ? g->d.Q : (g->d.Q + 1) / 2;
    for (int i = 0; i < 8; i++)
        for (int nb = 1; nb <= 16; nb *= 2) {
            if (nb > 1 && (nb > n || q * nb > 64)) continue;
            c = spk_cfg{};
            c.kind = SPK_TILE, c.rs = rsrb[i][0], c.rb = rsrb[i][1], c.nb = nb;
            spg_add(g, n, c, out, &m);
            const int more = nb == 1 && n <= 16 && m > 0 && out[m - 1].kind == SPK_TILE &&
                             out[m - 1].a.g > 1;
            spg_add_gfit(g, n, c, out, &m);
            if (more) {
                c.g1 = 1;  // small batch: one row group per block for more blocks
                spg_add(g, n, c, out, &m);
            }
        }
    if (g->vt == SPG_FP32) spg_add_pairs(g, n, out, &m);
    if (g->vt == SPG_FP32) spg_add_big(g, n, out, &m);
    const int et_min = g->pool2 || g->d.P * g->d.Q > 4 ? 2 : 1;
    if (n <= 16) spg_add_ell(g, n, et_min, 1, out, &m);
    if (n > 16 && g->d.P * g->d.Q <= 64) {  // small planes: several images per block
        spg_add_ell(g, n, et_min, 2, out, &m);
        spg_add_ell(g, n, et_min, 4, out, &m);
        spg_add_ell(g, n, 4, 1, out, &m);
    }
    if (g->vt == SPG_FP32) spg_add_occ(g, n, out, &m);
#ifdef SC_TEST_PLANT_WRONG
    m = spg_plant(out, m);
#endif
    return m;
}

// --- weight tables ----------------------------------------------------------------

// Word offset of entry (channel in chunk cl, kernel row r, kernel column s) in
// the tile of variant c (SPK_PAIR: byte offset of the slot).
static int spg_tile_offset(const spconv_gpu *g, const spk_cfg *c, int cl, int r, int s) {
    const spk_args *a = &c->a;
    const int st = a->stride, ph = s % st, e = s / st;
    const int one = g->vt == SPG_FP32;  // one column per word, or the slot of cw columns
    const int col = one ? ph * a->pw + e : ph * a->pw + (e & 1) * a->np + (e >> 1);
    const int off = cl * a->cp + r * a->rp + col;
    return c->kind == SPK_PAIR ? off * 4 * c->cw : off;
}

// Whether variant c is one of the tiled kernels (chunk table, rows in groups of rb).
static int spg_tiled(const spk_cfg *c) { return c->kind == SPK_TILE || c->kind == SPK_PAIR; }

// One record: fp32 (value, offset); fp16 (half2 value, offset); cb4 offset << 5 | code.
static void spg_record(const spconv_gpu *g, size_t e, int off, int half2, uint8_t *dst) {
    if (g->vt == SPG_CB4) {
        const uint32_t p = ((uint32_t)off << 5) | g->e_code[e];
        memcpy(dst, &p, 4);
        return;
    }
    uint32_t w[2];
    const float v = g->vt == SPG_FP16 ? spg_round_half(g->e_v[e]) : g->e_v[e];
    if (half2) w[0] = spg_h2bits(v);
    else memcpy(&w[0], &v, 4);
    memcpy(&w[1], &off, 4);
    memcpy(dst, w, 8);
}

// Record offset of entry e for variant c (tile: chunk-local word; ell: in
// the tile of all channels; linear: the channel); *ch receives its chunk.
static int spg_entry_offset(const spconv_gpu *g, const spk_cfg *c, size_t e, int *ch) {
    const spk_args *a = &c->a;
    *ch = spg_tiled(c) ? g->e_c[e] / a->cc : 0;
    if (spg_tiled(c)) return spg_tile_offset(g, c, g->e_c[e] - *ch * a->cc, g->e_r[e], g->e_s[e]);
    if (c->kind == SPK_ELL) return (g->e_c[e] * a->ebr + g->e_r[e]) * a->ebc + g->e_s[e];
    return g->e_c[e];
}

// Layer row of each kernel row of variant c (K): compact, the tiled kernel's
// rows dealt to its groups of rb rows (one warp's) in serpentine order of
// length, so that every warp and block gets about the same number of records
// (the whole grid often runs in one wave: the heaviest block sets the time);
// the other kernels run rows by descending length (similar rows side by side
// in a warp). Not compact: the layer's order.
static void spg_variant_order(const spconv_gpu *g, const spk_cfg *c, std::vector<int> &perm) {
    const int K = g->d.K, rb = spg_tiled(c) ? c->rb : 1, groups = K / rb;
    perm.resize(K);
    for (int t = 0; t < K; t++) {
        int kr = t;  // the shortest K % rb rows end the order as one partial group
        if (t < groups * rb) {
            const int round = t / groups, i = t % groups;
            kr = ((round & 1) ? groups - 1 - i : i) * rb + round;
        }
        perm[kr] = g->compact ? g->perm[t] : t;
    }
}

// Builds and uploads variant c's records, chunk table and row order into
// *dw, *dcp, *dperm: kernel row kr holds layer row perm[kr] (compact: without
// its explicit zeros), chunk table (K, nch + 1) with nch = 1 for ell and linear.
// SPK_PAIR: each row's segment of a chunk padded to an even length with zero
// records (value 0, offset 0).
static int spg_tables(const spconv_gpu *g, const spk_cfg *c, void **dw, int **dcp, int **dperm,
                      sc_err *err) {
    const spk_args *a = &c->a;
    const int K = a->K, nnz = a->nnz, nch = spg_tiled(c) ? a->nch : 1;
    const size_t rs = g->vt == SPG_CB4 ? 4 : 8;
    const size_t rows = c->kind == SPK_ELL ? (size_t)nnz : (size_t)K;
    const size_t pitch = c->kind == SPK_ELL ? (size_t)K : (size_t)a->nnzp;
    std::vector<uint8_t> rec(std::max<size_t>(rows * pitch * rs, 16), 0);
    std::vector<int> cptr((size_t)K * (nch + 1), 0);
    std::vector<int> fill(nch), perm;
    spg_variant_order(g, c, perm);
    for (int kr = 0; kr < K; kr++) {
        const int k = perm[kr];
        int *cp = &cptr[(size_t)kr * (nch + 1)];
        for (int j = 0; j < nnz; j++) {  // chunk sizes first: records are grouped by chunk
            const size_t e = (size_t)k * nnz + j;
            int ch;
            spg_entry_offset(g, c, e, &ch);
            if (!(g->compact && g->e_code[e] == 16)) cp[ch + 1]++;
        }
        if (c->kind == SPK_PAIR)
            for (int ch = 0; ch < nch; ch++) cp[ch + 1] = spg_roundup(cp[ch + 1], 2);
        for (int ch = 0; ch < nch; ch++) cp[ch + 1] += cp[ch], fill[ch] = cp[ch];
#ifdef SC_TEST_PLANT_WRONG
        if (c->planted == 1) std::fill(cp, cp + nch + 1, 0);  // the kernel sees empty rows
#endif
        for (int j = 0; j < nnz; j++) {
            const size_t e = (size_t)k * nnz + j;
            int ch;
            const int off = spg_entry_offset(g, c, e, &ch);
            if (g->compact && g->e_code[e] == 16) continue;
            if (off >= (1 << 26)) return sc_fail(err, "spconv: tile offset %d too large", off);
            const int jj = fill[ch]++;
            const size_t at = c->kind == SPK_ELL ? (size_t)jj * K + kr : (size_t)kr * a->nnzp + jj;
            spg_record(g, e, off, c->kind == SPK_TILE && g->vt == SPG_FP16, &rec[at * rs]);
        }
    }
    SC_TRY(spg_upload(dw, rec.data(), rec.size(), err));
    SC_TRY(spg_upload((void **)dcp, cptr.data(), cptr.size() * 4, err));
    SC_TRY(spg_upload((void **)dperm, perm.data(), (size_t)K * sizeof(int), err));
    return 0;
}

// --- selection --------------------------------------------------------------------

// Makes cfg the chosen variant: builds its tables and frees the previous ones.
static int spg_select(spconv_gpu *g, const spk_cfg *cfg, sc_err *err) {
    void *dw = NULL;
    int *dcp = NULL, *dperm = NULL;
    if ((cfg->kind != SPK_PLAIN && spg_tables(g, cfg, &dw, &dcp, &dperm, err)) ||
        spk_prepare(cfg, g->vt, &g->dev, err)) {
        cudaFree(dw), cudaFree(dcp), cudaFree(dperm);
        return -1;
    }
    cudaFree(g->d_w), cudaFree(g->d_cptr), cudaFree(g->d_perm);
    g->d_w = dw, g->d_cptr = dcp, g->d_perm = dperm, g->cfg = *cfg;
    if (cfg->kind != SPK_PLAIN) g->cfg.a.w = dw;
    g->cfg.a.cptr = dcp, g->cfg.a.perm = dperm;
    return 0;
}

// Index of a reasonable variant without timing: a tiled one (default band)
// with 8 accumulators per thread and the fewest idle lanes, else the last listed.
static int spg_default(const spk_cfg *c, int m) {
    int best = m - 1;
    double score = -1.0;
    for (int i = 0; i < m; i++) {
        if (c[i].kind != SPK_TILE || c[i].gd > 1 || c[i].planted) continue;
        const double s = (double)c[i].a.ub / c[i].a.ubp + (c[i].rs * c[i].rb == 8 ? 1.0 : 0.0);
        if (s > score) score = s, best = i;
    }
    return best;
}

// Median of 7 timed runs (after 2 warm-ups) of the chosen variant; stops
// early with the second warm-up's time when that exceeds cutoff.
static int spg_time(const spconv_gpu *g, int n, const void *in, void *out, cudaStream_t st,
                    float cutoff, float *ms, sc_err *err) {
    cudaEvent_t e0, e1;
    cudaCheck(err, cudaEventCreate(&e0));
    cudaCheck(err, cudaEventCreate(&e1));
    float t[9];
    int rc = 0, r = 0;
    for (; r < 9 && !rc; r++) {
        if (cudaEventRecord(e0, st) != cudaSuccess) rc = sc_fail(err, "spconv: event record");
        if (!rc) rc = spconv_gpu_forward(g, n, in, out, st, err);
        if (!rc && cudaEventRecord(e1, st) != cudaSuccess) rc = sc_fail(err, "spconv: event record");
        if (!rc && cudaEventSynchronize(e1) != cudaSuccess)
            rc = sc_fail(err, "spconv: %s", cudaGetErrorString(cudaGetLastError()));
        if (!rc) cudaEventElapsedTime(&t[r], e0, e1);
        if (!rc && r == 1 && t[1] > cutoff) break;
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    if (rc) return -1;
    if (r < 9) {
        *ms = t[1];
        return 0;
    }
    std::sort(t + 2, t + 9);
    *ms = t[5];
    return 0;
}

// --- checking ---------------------------------------------------------------------

// Device buffers of a tune's checks: the plain kernel's output, a variant's
// (both bordered, for n images) and the two error maxima.
struct spg_check {
    void *ref, *got;
    unsigned *acc;
    size_t elems;
};

// acc[0] = max |got - ref|, acc[1] = max |ref| (as float bits) over n outputs.
// Where ref holds the poison (NaN: no output there) got must hold it too; a
// NaN in got elsewhere counts as an infinite error.
template <typename T>
__global__ void spg_diff_kernel(size_t n, const T *ref, const T *got, unsigned *acc) {
    float e = 0.0f, m = 0.0f;
    SC_GRID_LOOP(i, n) {
        const float r = sc_tof(ref[i]), v = sc_tof(got[i]);
        if (isnan(r)) e = isnan(v) ? e : INFINITY;
        else e = isnan(v) ? INFINITY : fmaxf(e, fabsf(v - r)), m = fmaxf(m, fabsf(r));
    }
    atomicMax(acc, __float_as_uint(e));
    atomicMax(acc + 1, __float_as_uint(m));
}

// Bytes of one check buffer.
static size_t spg_check_bytes(const spconv_gpu *g, const spg_check *c) {
    return c->elems * (g->vt == SPG_FP32 ? 4 : 2);
}

// Allocates the check buffers for batch n.
static int spg_check_alloc(const spconv_gpu *g, int n, spg_check *c, sc_err *err) {
    const int ob = g->d.out_border;
    c->elems = (size_t)n * g->d.K * (g->po + 2 * ob) * (g->qo + 2 * ob);
    cudaCheck(err, cudaMalloc(&c->ref, spg_check_bytes(g, c)));
    cudaCheck(err, cudaMalloc(&c->got, spg_check_bytes(g, c)));
    cudaCheck(err, cudaMalloc(&c->acc, 2 * sizeof(unsigned)));
    return 0;
}

// Frees the check buffers (a zeroed struct is fine).
static void spg_check_free(spg_check *c) {
    cudaFree(c->ref), cudaFree(c->got), cudaFree(c->acc);
    *c = spg_check{};
}

// Runs the chosen variant into buf poisoned first (every bit set: NaN) and waits.
static int spg_run_poisoned(const spconv_gpu *g, int n, const void *in, void *buf, size_t bytes,
                            cudaStream_t st, sc_err *err) {
    cudaCheck(err, cudaMemsetAsync(buf, 0xFF, bytes, st));
    SC_TRY(spconv_gpu_forward(g, n, in, buf, st, err));
    cudaCheck(err, cudaStreamSynchronize(st));
    return 0;
}

// The reference: the plain kernel (list entry 0) on the input, into c->ref.
static int spg_reference(spconv_gpu *g, const spk_cfg *plain, int n, const void *in,
                         spg_check *c, cudaStream_t st, sc_err *err) {
    SC_TRY(spg_select(g, plain, err));
    return spg_run_poisoned(g, n, in, c->ref, spg_check_bytes(g, c), st, err);
}

// *rel = max |variant - reference| / max |reference| of the chosen variant.
static int spg_check_variant(const spconv_gpu *g, int n, const void *in, spg_check *c,
                             cudaStream_t st, float *rel, sc_err *err) {
    SC_TRY(spg_run_poisoned(g, n, in, c->got, spg_check_bytes(g, c), st, err));
    cudaCheck(err, cudaMemsetAsync(c->acc, 0, 2 * sizeof(unsigned), st));
    const unsigned bl = sc_blocks_on(g->dev.sms, c->elems, 256);
    if (g->vt == SPG_FP32)
        spg_diff_kernel<<<bl, 256, 0, st>>>(c->elems, (const float *)c->ref,
                                            (const float *)c->got, c->acc);
    else
        spg_diff_kernel<<<bl, 256, 0, st>>>(c->elems, (const __half *)c->ref,
                                            (const __half *)c->got, c->acc);
    cudaCheckLaunch(err);
    unsigned h[2];
    cudaCheck(err, cudaMemcpyAsync(h, c->acc, sizeof h, cudaMemcpyDeviceToHost, st));
    cudaCheck(err, cudaStreamSynchronize(st));
    float e, m;
    memcpy(&e, &h[0], 4), memcpy(&m, &h[1], 4);
    *rel = m > 0.0f ? e / m : e;
    return 0;
}

// Counts variant v as skipped and notes why when it is the first.
static void spg_note_skip(spconv_gpu *g, int v, const char *why) {
    (void)cudaGetLastError();  // a failed launch's error is not sticky: clear it
    if (g->nskip++ == 0) snprintf(g->skip_note, sizeof g->skip_note, "variant %d: %.170s", v, why);
}

// Builds variant v (cfg), checks it against the reference in c and times
// it into *t; 0 when it passed, else -1 with the variant noted as skipped.
static int spg_try(spconv_gpu *g, const spk_cfg *cfg, int v, int n, const void *in, void *out,
                   cudaStream_t st, spg_check *c, float cutoff, float *t) {
    sc_err why = {{0}};
    const float tol = g->vt == SPG_FP32 ? SPG_TOL32 : SPG_TOL16;
    float rel = 0.0f;
    int rc = spg_select(g, cfg, &why);
    if (!rc) rc = spg_check_variant(g, n, in, c, st, &rel, &why);
    if (!rc && !(rel <= tol))
        rc = sc_fail(&why, "off the plain kernel by %.3g (tolerance %g)", rel, (double)tol);
    if (!rc) rc = spg_time(g, n, in, out, st, cutoff, t, &why);
    if (rc) spg_note_skip(g, v, why.msg);
    return rc;
}

// --- public API -------------------------------------------------------------------

// Uploads a layer and picks a default variant for a large batch.
extern "C" spconv_gpu *spconv_gpu_create(const spconv_desc *d, spconv_gpu_vtype vt,
                                         const uint8_t *codes, const float *codebook,
                                         const float *row_scale, sc_err *err) {
    if (vt == SPG_CB4 && (!codes || !codebook)) {
        sc_fail(err, "spconv: codebook layer without codes or codebook");
        return NULL;
    }
    spconv_gpu *g = (spconv_gpu *)calloc(1, sizeof *g);
    if (!g) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    if (gpu_devinfo_query(-1, &g->dev, err)) {
        free(g);
        return NULL;
    }
    g->d = *d, g->vt = vt, g->compact = 1;
    g->hb = d->H + 2 * d->in_border, g->wb = d->W + 2 * d->in_border;
    g->rmin = g->cmin = d->in_border - d->pad;
    spconv_out_size(d, &g->po, &g->qo);
    g->pool2 = d->pool_k == 2 && d->pool_stride == 2 && d->pool_pad == 0;
    g->linear = d->H == 1 && d->W == 1 && d->R == 1 && d->S == 1 && d->in_border == 0 &&
                d->out_border == 0 && d->pool_k == 0 && d->pad == 0;
    for (int i = 0; i < 16 && vt == SPG_CB4; i++) g->cbf[i] = codebook[i];
    for (int i = 0; i < 32; i++) g->cbh[i] = spg_h2bits(g->cbf[i]);
    spk_cfg *list = (spk_cfg *)malloc(SPG_LIST_CAP * sizeof *list);
    int rc = !list ? sc_fail(err, "out of memory") : 0;
    if (!rc && (d->K <= 0 || d->C <= 0 || d->nnz_row < 0 || d->P <= 0 || d->Q <= 0 ||
                d->in_border < d->pad || g->po <= 0 || g->qo <= 0))
        rc = sc_fail(err, "spconv: bad layer shape (K %d, C %d, P %d, Q %d, border %d, pad %d)",
                     d->K, d->C, d->P, d->Q, d->in_border, d->pad);
    if (!rc) rc = spg_entries(g, d, codes, err);
    if (!rc) rc = spg_upload_layer(g, d, codes, row_scale, err);
    if (!rc) {
        const int m = spg_candidates(g, 128, list);
        const int v = spg_default(list, m);
        rc = spg_select(g, &list[v], err);
        g->cfg_n = 128, g->cfg_v = v;
    }
    free(list);
    if (rc) {
        spconv_gpu_free(g);
        return NULL;
    }
    return g;
}

// Number of variants listed for batch n.
extern "C" int spconv_gpu_nvariants(const spconv_gpu *g, int n) {
    spk_cfg *list = (spk_cfg *)malloc(SPG_LIST_CAP * sizeof *list);
    const int m = list ? spg_candidates(g, n < 1 ? 1 : n, list) : 0;
    free(list);
    return m;
}

// Makes variant v of the list for batch n the one forward runs.
extern "C" int spconv_gpu_use(spconv_gpu *g, int n, int v, sc_err *err) {
    spk_cfg *list = (spk_cfg *)malloc(SPG_LIST_CAP * sizeof *list);
    if (!list) return sc_fail(err, "out of memory");
    const int m = spg_candidates(g, n < 1 ? 1 : n, list);
    int rc = v < 0 || v >= m ? sc_fail(err, "spconv: variant %d of %d", v, m) : 0;
    if (!rc) rc = spg_select(g, &list[v], err);
    if (!rc) g->cfg_n = n, g->cfg_v = v;
    free(list);
    return rc;
}

// Switches explicit-zero skipping and the row order on or off, and rebuilds
// the chosen variant's tables (the variant list stays the same).
extern "C" int spconv_gpu_compact(spconv_gpu *g, int on, sc_err *err) {
    g->compact = on ? 1 : 0;
    return spconv_gpu_use(g, g->cfg_n, g->cfg_v, err);
}

// Checks every variant for batch n against the plain kernel, times those
// that agree and keeps the fastest; a variant that cannot be built, fails or
// disagrees is skipped (counted, the first reason noted). The plain kernel
// is the fallback when no other variant passes.
extern "C" int spconv_gpu_tune(spconv_gpu *g, int n, const void *in, void *out, cudaStream_t st,
                               float *ms, sc_err *err) {
    n = n < 1 ? 1 : n;
    spk_cfg *list = (spk_cfg *)malloc(SPG_LIST_CAP * sizeof *list);
    if (!list) return sc_fail(err, "out of memory");
    const int m = spg_candidates(g, n, list);
    spg_check c = {};
    int best = -1;
    float best_ms = INFINITY;
    g->nskip = 0, g->skip_note[0] = 0;
    int rc = spg_check_alloc(g, n, &c, err);
    if (!rc) rc = spg_reference(g, &list[0], n, in, &c, st, err);
    for (int v = 1; v < m && !rc; v++) {
        float t = INFINITY;
        if (spg_try(g, &list[v], v, n, in, out, st, &c, 3.0f * best_ms, &t) == 0 && t < best_ms)
            best_ms = t, best = v;
    }
    if (!rc && best < 0) {  // nothing but the plain kernel: it is the reference, so it passes
        best = 0;
        rc = spg_select(g, &list[0], err) || spg_time(g, n, in, out, st, INFINITY, &best_ms, err);
    }
    if (!rc) rc = spg_select(g, &list[best], err);
    spg_check_free(&c);
    free(list);
    if (rc) return -1;
    g->cfg_n = n, g->cfg_v = best, g->ms = best_ms;
    if (ms) *ms = best_ms;
    return 0;
}

// Number of variants the last tune skipped; note (may be NULL) receives why
// the first of them was.
extern "C" int spconv_gpu_skipped(const spconv_gpu *g, char *note, size_t len) {
    if (note && len) snprintf(note, len, "%s", g->skip_note);
    return g->nskip;
}

// out = layer(in) for n images (capturable).
extern "C" int spconv_gpu_forward(const spconv_gpu *g, int n, const void *in, void *out,
                                  cudaStream_t st, sc_err *err) {
    return spk_launch(&g->cfg, (int)g->vt, g->dev.sms, n, in, out, st, err);
}

// One line describing the chosen variant.
extern "C" void spconv_gpu_describe(const spconv_gpu *g, char *buf, size_t len) {
    static const char *vts[] = {"fp32", "fp16", "cb4"};
    const spk_cfg *c = &g->cfg;
    const spk_args *a = &c->a;
    char t[64] = "";
    if (a->vs > 1) snprintf(t, sizeof t, " view s%d", a->vs);  // 1x1 stride s as a view
    if (c->gd > 1) snprintf(t + strlen(t), sizeof t - strlen(t), " gd%d", c->gd);  // short bands
    if (c->big)  // 512-thread pair blocks (pf: next row's first records loaded early),
                 // or 3 / 4 pair blocks per SM
        snprintf(t + strlen(t), sizeof t - strlen(t), "%s",
                 c->big == 1 ? " big" : c->big == 2 ? " big pf" : c->big == 3 ? " occ3" : " occ4");
    if (g->ms > 0) snprintf(t + strlen(t), sizeof t - strlen(t), " %.4f ms @%d", g->ms, g->cfg_n);
    if (g->nskip > 0) snprintf(t + strlen(t), sizeof t - strlen(t), " (%d skipped)", g->nskip);
    if (c->planted) snprintf(t + strlen(t), sizeof t - strlen(t), " planted");
    if (!g->compact && c->kind != SPK_PLAIN)
        snprintf(t + strlen(t), sizeof t - strlen(t), " padded");
    if (c->kind == SPK_TILE)
        snprintf(buf, len, "tile %s rs%d rb%d nb%d g%d units %d/%d thr %d kb %dx%d chunks %dx%d "
                 "smem %zuK bands %d%s", vts[g->vt], c->rs, c->rb, c->nb, a->g, a->ub, a->ubp,
                 c->threads, a->kb, a->ki, a->nch, a->cc, c->smem >> 10, a->bands, t);
    else if (c->kind == SPK_PAIR)
        snprintf(buf, len, "pair %s cw%d rs%d rb%d nb%d g%d units %d/%d thr %d kb %dx%d chunks "
                 "%dx%d smem %zuK bands %d%s", vts[g->vt], c->cw, c->rs, c->rb, c->nb, a->g, a->ub,
                 a->ubp, c->threads, a->kb, a->ki, a->nch, a->cc, c->smem >> 10, a->bands, t);
    else if (c->kind == SPK_ELL)
        snprintf(buf, len, "ell %s et%d ni%d kbt%d cs%d smem %zuK%s", vts[g->vt], c->et, c->ni,
                 c->kbt, c->cs, c->smem >> 10, t);
    else if (c->kind == SPK_LINEAR)
        snprintf(buf, len, "linear %s kb%d%s", vts[g->vt], c->lkb, t);
    else
        snprintf(buf, len, "plain %s%s", vts[g->vt], t);
}

// Useful multiply-adds of one forward for n images.
extern "C" double spconv_gpu_macs(const spconv_gpu *g, int n) {
    return (double)g->nnz_real * g->d.P * g->d.Q * n;
}

// Frees a layer (NULL is fine).
extern "C" void spconv_gpu_free(spconv_gpu *g) {
    if (!g) return;
    cudaFree(g->d_bias), cudaFree(g->d_scale), cudaFree(g->d_gw), cudaFree(g->d_goff);
    cudaFree(g->d_w), cudaFree(g->d_cptr), cudaFree(g->d_perm);
    free(g->perm), free(g->e_c), free(g->e_r), free(g->e_s), free(g->e_v), free(g->e_code);
    free(g);
}
