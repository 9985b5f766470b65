// Block-sparse convolution in plain C (kernels/bsconv.h): validation, the
// fp32 reference over the BSR structure, and the packed layout of the CUDA
// kernel with a plain-C walk over it.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsconv.h"

// --- shape and structure ------------------------------------------------------------

// Output plane size of the conv.
void bsconv_out_size(const bsconv_shape *s, int *P, int *Q) {
    *P = (s->H + 2 * s->pad - s->R) / s->stride + 1;
    *Q = (s->W + 2 * s->pad - s->S) / s->stride + 1;
}

// Output plane size of y.
void bsconv_y_size(const bsconv_shape *s, int *Po, int *Qo) {
    bsconv_out_size(s, Po, Qo);
    if (s->pool > 1) *Po /= s->pool, *Qo /= s->pool;
}

// Pool window side (1: no pool).
static int bsc_win(const bsconv_shape *s) { return s->pool > 1 ? s->pool : 1; }

// Checks the sizes of the shape; 0 or -1.
static int bsc_check_shape(const bsconv_shape *s, sc_err *err) {
    if (s->n < 1 || s->C < 1 || s->H < 1 || s->W < 1 || s->K < 1 || s->R < 1 || s->S < 1 ||
        s->stride < 1 || s->pad < 0)
        return sc_fail(err, "block-sparse conv: bad shape (n %d, C %d, H %d, W %d, K %d, R %d, "
                            "S %d, stride %d, pad %d)",
                       s->n, s->C, s->H, s->W, s->K, s->R, s->S, s->stride, s->pad);
    if (s->R > 255 || s->S > 255 || s->C > 65535)
        return sc_fail(err, "block-sparse conv: kernel %dx%d or %d channels too large (255, 65535)",
                       s->R, s->S, s->C);
    if (s->H + 2 * s->pad < s->R || s->W + 2 * s->pad < s->S)
        return sc_fail(err, "block-sparse conv: kernel %dx%d larger than the padded input %dx%d",
                       s->R, s->S, s->H + 2 * s->pad, s->W + 2 * s->pad);
    int P, Q;
    bsconv_out_size(s, &P, &Q);
    if (s->pool < 0 || s->pool == 3 || s->pool > 4 || P < bsc_win(s) || Q < bsc_win(s))
        return sc_fail(err, "block-sparse conv: pool %d (0, 1, 2 or 4, at most the %dx%d output)",
                       s->pool, P, Q);
    return 0;
}

// Checks that block row i lists each block column once (mark: ncb zeroed
// bytes, left zeroed); 0 or -1.
static int bsc_check_row(const bsconv_bsr *w, int i, int ncb, uint8_t *mark, sc_err *err) {
    int rc = 0;
    for (int32_t b = w->indptr[i]; b < w->indptr[i + 1]; b++) {
        const int32_t j = w->indices[b];
        if (j < 0 || j >= ncb) {
            rc = sc_fail(err, "block-sparse conv: block %d has column %d (%d block columns)", b, j, ncb);
            break;
        }
        if (mark[j]) {
            rc = sc_fail(err, "block-sparse conv: block row %d lists block column %d twice", i, j);
            break;
        }
        mark[j] = 1;
    }
    for (int32_t b = w->indptr[i]; b < w->indptr[i + 1]; b++)
        if (w->indices[b] >= 0 && w->indices[b] < ncb) mark[w->indices[b]] = 0;
    return rc;
}

// Entries of the remainder.
int32_t bsconv_rem_count(const bsconv_bsr *w, int K) { return w->rem_indptr ? w->rem_indptr[K] : 0; }

// Checks the remainder's rows and columns against the shape; 0 or -1.
static int bsc_check_rem(const bsconv_shape *s, const bsconv_bsr *w, sc_err *err) {
    if (!w->rem_indptr) return 0;
    const int32_t *p = w->rem_indptr, cols = s->R * s->S * s->C;
    if (p[0] != 0) return sc_fail(err, "block-sparse conv: remainder indptr[0] = %d", p[0]);
    for (int k = 0; k < s->K; k++)
        if (p[k + 1] < p[k]) return sc_fail(err, "block-sparse conv: remainder indptr decreases at row %d", k);
    if (p[s->K] > 0 && (!w->rem_indices || !w->rem_data))
        return sc_fail(err, "block-sparse conv: remainder without indices or data");
    for (int k = 0; k < s->K; k++)
        for (int32_t j = p[k]; j < p[k + 1]; j++)
            if (w->rem_indices[j] < 0 || w->rem_indices[j] >= cols || (j > p[k] && w->rem_indices[j] <= w->rem_indices[j - 1]))
                return sc_fail(err, "block-sparse conv: remainder column %d of row %d out of range [0, %d) or "
                               "not ascending", w->rem_indices[j], k, cols);
    return 0;
}

// Checks the shape and the BSR structure against it.
int bsconv_check(const bsconv_shape *s, const bsconv_bsr *w, sc_err *err) {
    SC_TRY(bsc_check_shape(s, err));
    if (w->kb < 1 || w->cb < 1 || s->K % w->kb || s->C % w->cb)
        return sc_fail(err, "block-sparse conv: block %dx%d does not tile K %d x C %d", w->kb,
                       w->cb, s->K, s->C);
    if (!w->indptr || (!w->indices && w->indptr[s->K / w->kb] > 0))
        return sc_fail(err, "block-sparse conv: no indptr or indices");
    const int nbr = s->K / w->kb, ncb = s->R * s->S * (s->C / w->cb);
    if (w->indptr[0] != 0) return sc_fail(err, "block-sparse conv: indptr[0] = %d", w->indptr[0]);
    for (int i = 0; i < nbr; i++)
        if (w->indptr[i + 1] < w->indptr[i])
            return sc_fail(err, "block-sparse conv: indptr decreases at block row %d", i);
    if (w->indptr[nbr] > 0 && !w->data) return sc_fail(err, "block-sparse conv: no data");
    uint8_t *mark = calloc((size_t)ncb, 1);
    if (!mark) return sc_fail(err, "block-sparse conv: out of memory (%d block columns)", ncb);
    int rc = 0;
    for (int i = 0; i < nbr && !rc; i++) rc = bsc_check_row(w, i, ncb, mark, err);
    free(mark);
    return rc ? rc : bsc_check_rem(s, w, err);
}

// --- the reference ------------------------------------------------------------------

// act(acc + bias + z) of output channel k at output element index o.
float bsconv_epi_cpu(const bsconv_shape *s, float acc, const float *bias, const float *z,
                     size_t o, int k) {
    float v = acc + (bias ? bias[k] : 0.0f);
    if (z) v += z[o];
    return s->relu && v < 0.0f ? 0.0f : v;
}

// Sum over the blocks of output channel k's block row, and its remainder
// row, at output pixel (im, p, q).
static float bsc_dot(const bsconv_shape *s, const bsconv_bsr *w, const float *x, int im, int p,
                     int q, int k) {
    const int i = k / w->kb, kk = k % w->kb;
    float acc = 0.0f;
    for (int32_t b = w->indptr[i]; b < w->indptr[i + 1]; b++) {
        const int col = w->indices[b] * w->cb, tap = col / s->C, c0 = col % s->C;
        const int h = p * s->stride - s->pad + tap / s->S, x0 = q * s->stride - s->pad + tap % s->S;
        if (h < 0 || h >= s->H || x0 < 0 || x0 >= s->W) continue;
        const float *xp = x + (((size_t)im * s->H + h) * s->W + x0) * s->C + c0;
        const float *wp = w->data + ((size_t)b * w->kb + kk) * w->cb;
        for (int c = 0; c < w->cb; c++) acc += wp[c] * xp[c];
    }
    for (int32_t j = w->rem_indptr ? w->rem_indptr[k] : 0; w->rem_indptr && j < w->rem_indptr[k + 1]; j++) {
        const int col = w->rem_indices[j], tap = col / s->C;
        const int h = p * s->stride - s->pad + tap / s->S, x0 = q * s->stride - s->pad + tap % s->S;
        if (h >= 0 && h < s->H && x0 >= 0 && x0 < s->W)
            acc += w->rem_data[j] * x[(((size_t)im * s->H + h) * s->W + x0) * s->C + col % s->C];
    }
    return acc;
}

// What a walk over the output pixels reads and writes.
typedef struct {
    const bsconv_shape *s;
    const bsconv_bsr *w;       // the BSR walk
    const bsconv_packed *pk;   // the packed walk
    const float *bias, *x, *z;
    float *y;
} bsc_walk;

// Writes the K outputs of y pixel (im, po, qo), which start at element o.
typedef void (*bsc_pixel_fn)(const bsc_walk *wk, int im, int po, int qo, size_t o);

// Calls fn for every pixel of y.
static void bsc_each_pixel(const bsc_walk *wk, bsc_pixel_fn fn) {
    int Po, Qo;
    bsconv_y_size(wk->s, &Po, &Qo);
    for (int im = 0; im < wk->s->n; im++)
        for (int p = 0; p < Po; p++)
            for (int q = 0; q < Qo; q++) fn(wk, im, p, q, (((size_t)im * Po + p) * Qo + q) * wk->s->K);
}

// One y pixel over the BSR blocks, one output channel at a time (the max
// over the pool window of the conv pixels' activations).
static void bsc_pixel_bsr(const bsc_walk *wk, int im, int po, int qo, size_t o) {
    const int win = bsc_win(wk->s);
    for (int k = 0; k < wk->s->K; k++) {
        float m = -INFINITY;
        for (int a = 0; a < win * win; a++) {
            const float acc = bsc_dot(wk->s, wk->w, wk->x, im, po * win + a / win, qo * win + a % win, k);
            m = fmaxf(m, bsconv_epi_cpu(wk->s, acc, wk->bias, wk->z, o + k, k));
        }
        wk->y[o + k] = m;
    }
}

// y = pool(act(conv(x, w) + bias [+ z])) over the BSR blocks, one output element at a time.
void bsconv_forward_cpu(const bsconv_shape *s, const bsconv_bsr *w, const float *bias,
                        const float *x, const float *z, float *y) {
    const bsc_walk wk = {s, w, NULL, bias, x, z, y};
    bsc_each_pixel(&wk, bsc_pixel_bsr);
}

// --- the packed layout --------------------------------------------------------------

// Smallest of 8, 16, 32, 64 that holds n channels.
static int bsc_round_np(int n) {
    int np = BSCONV_NFRAG;
    while (np < n) np *= 2;
    return np;
}

// Block rows per group (kb < 8: merged to reach 8 channels) and groups per
// block row (kb > BSCONV_NMAX: slices of BSCONV_NMAX channels).
static void bsc_group_split(int kb, int *rows, int *slices) {
    *rows = kb < BSCONV_NFRAG ? (BSCONV_NFRAG + kb - 1) / kb : 1;
    *slices = kb > BSCONV_NMAX ? (kb + BSCONV_NMAX - 1) / BSCONV_NMAX : 1;
}

// Block rows [*br0, *br1) and channels [k0, k0 + nk) of group gi.
static void bsc_group_rows(const bsconv_shape *s, const bsconv_bsr *w, int gi, int *br0,
                           int *br1, bsconv_group *g) {
    int rows, slices;
    bsc_group_split(w->kb, &rows, &slices);
    const int nbr = s->K / w->kb;
    *br0 = gi / slices * rows;
    *br1 = *br0 + rows < nbr ? *br0 + rows : nbr;
    g->k0 = *br0 * w->kb + gi % slices * BSCONV_NMAX;
    const int end = slices > 1 ? g->k0 + BSCONV_NMAX : *br1 * w->kb;
    const int kend = (*br0 + 1) * w->kb;
    g->nk = (slices > 1 && end > kend ? kend : end) - g->k0;
}

// Marks the block columns of block rows [br0, br1) in mark (ncb bytes) and
// returns how many distinct ones there are.
static int bsc_mark(const bsconv_bsr *w, int br0, int br1, uint8_t *mark) {
    int n = 0;
    for (int i = br0; i < br1; i++)
        for (int32_t b = w->indptr[i]; b < w->indptr[i + 1]; b++) {
            n += !mark[w->indices[b]];
            mark[w->indices[b]] = 1;
        }
    return n;
}

// Clears what bsc_mark set.
static void bsc_unmark(const bsconv_bsr *w, int br0, int br1, uint8_t *mark) {
    for (int i = br0; i < br1; i++)
        for (int32_t b = w->indptr[i]; b < w->indptr[i + 1]; b++) mark[w->indices[b]] = 0;
}

// Fills every group's channels and columns and the totals; 0 or -1 when the
// packed layer would be too large.
static int bsc_plan(const bsconv_shape *s, const bsconv_bsr *w, bsconv_packed *p,
                    uint8_t *mark, sc_err *err) {
    int64_t col = 0;
    int maxnk = 1;
    for (int gi = 0; gi < p->ngroups; gi++) {
        bsconv_group *g = &p->grp[gi];
        int br0, br1;
        bsc_group_rows(s, w, gi, &br0, &br1, g);
        const int64_t n = (int64_t)bsc_mark(w, br0, br1, mark) * w->cb;
        bsc_unmark(w, br0, br1, mark);
        g->col0 = (int32_t)col;
        g->steps = (int32_t)((n + BSCONV_KSTEP - 1) / BSCONV_KSTEP);
        col += (int64_t)g->steps * BSCONV_KSTEP;
        if (g->nk > maxnk) maxnk = g->nk;
        if (col * BSCONV_NMAX > INT32_MAX)
            return sc_fail(err, "block-sparse conv: packed layer too large (%lld columns)",
                           (long long)col);
    }
    p->ncols = (int)col;
    p->np = bsc_round_np(maxnk);
    return 0;
}

// Index in vals of packed column e, group channel j.
size_t bsconv_packed_at(int np, int e, int j) {
    return ((size_t)(e / BSCONV_KSTEP) * (np / BSCONV_NFRAG) + j / BSCONV_NFRAG) *
               (BSCONV_KSTEP * BSCONV_NFRAG) +
           (size_t)(e % BSCONV_KSTEP) * BSCONV_NFRAG + j % BSCONV_NFRAG;
}

// Column code of KRSC column col.
static uint32_t bsc_code(const bsconv_shape *s, int col) {
    const int tap = col / s->C, c = col % s->C;
    return (uint32_t)(tap / s->S) | (uint32_t)(tap % s->S) << 8 | (uint32_t)c << 16;
}

// Writes group gi's columns and values; pos (ncb ints, all -1) is left all -1.
static void bsc_fill_group(const bsconv_shape *s, const bsconv_bsr *w, bsconv_packed *p, int gi,
                           uint8_t *mark, int32_t *pos, int ncb) {
    const bsconv_group *g = &p->grp[gi];
    int br0, br1;
    bsconv_group tmp;
    bsc_group_rows(s, w, gi, &br0, &br1, &tmp);
    bsc_mark(w, br0, br1, mark);
    int e = g->col0;
    for (int j = 0; j < ncb; j++) {
        if (!mark[j]) continue;
        pos[j] = e;
        for (int c = 0; c < w->cb; c++) p->cols[e++] = bsc_code(s, j * w->cb + c);
    }
    while (e < g->col0 + g->steps * BSCONV_KSTEP) p->cols[e++] = BSCONV_PAD;
    for (int i = br0; i < br1; i++)
        for (int32_t b = w->indptr[i]; b < w->indptr[i + 1]; b++)
            for (int kk = 0; kk < w->kb; kk++) {
                const int j = i * w->kb + kk - g->k0;
                if (j < 0 || j >= g->nk) continue;
                for (int c = 0; c < w->cb; c++)
                    p->vals[bsconv_packed_at(p->np, pos[w->indices[b]] + c, j)] =
                        w->data[((size_t)b * w->kb + kk) * w->cb + c];
            }
    for (int i = br0; i < br1; i++)
        for (int32_t b = w->indptr[i]; b < w->indptr[i + 1]; b++) pos[w->indices[b]] = -1;
    bsc_unmark(w, br0, br1, mark);
}

// Builds the packed layout of a checked layer.
int bsconv_pack(const bsconv_shape *s, const bsconv_bsr *w, bsconv_packed *p, sc_err *err) {
    memset(p, 0, sizeof *p);
    SC_TRY(bsconv_check(s, w, err));
    int rows, slices;
    bsc_group_split(w->kb, &rows, &slices);
    const int nbr = s->K / w->kb, ncb = s->R * s->S * (s->C / w->cb);
    p->ngroups = (nbr + rows - 1) / rows * slices;
    p->vec = w->cb % 8 == 0;
    p->grp = calloc((size_t)p->ngroups, sizeof *p->grp);
    uint8_t *mark = calloc((size_t)ncb, 1);
    int32_t *pos = malloc((size_t)ncb * sizeof *pos);
    int rc = !p->grp || !mark || !pos ? sc_fail(err, "block-sparse conv: out of memory")
                                      : bsc_plan(s, w, p, mark, err);
    if (!rc) {
        p->cols = malloc(((size_t)p->ncols + 1) * sizeof *p->cols);
        p->vals = calloc((size_t)p->ncols * p->np + 1, sizeof *p->vals);
        if (!p->cols || !p->vals) rc = sc_fail(err, "block-sparse conv: out of memory (%d columns)", p->ncols);
    }
    if (!rc) {
        for (int j = 0; j < ncb; j++) pos[j] = -1;
        for (int gi = 0; gi < p->ngroups; gi++) bsc_fill_group(s, w, p, gi, mark, pos, ncb);
    }
    free(mark);
    free(pos);
    if (rc) bsconv_packed_free(p);
    return rc;
}

// Frees the packed arrays.
void bsconv_packed_free(bsconv_packed *p) {
    free(p->grp);
    free(p->cols);
    free(p->vals);
    memset(p, 0, sizeof *p);
}

// Accumulates group g's packed columns at output pixel (im, p, q) into acc (np).
static void bsc_packed_dot(const bsconv_shape *s, const bsconv_packed *pk, const bsconv_group *g,
                           const float *x, int im, int p, int q, float *acc) {
    for (int e = g->col0; e < g->col0 + g->steps * BSCONV_KSTEP; e++) {
        const uint32_t code = pk->cols[e];
        if (code == BSCONV_PAD) continue;
        const int h = p * s->stride - s->pad + (int)(code & 255u);
        const int x0 = q * s->stride - s->pad + (int)(code >> 8 & 255u);
        if (h < 0 || h >= s->H || x0 < 0 || x0 >= s->W) continue;
        const float xv = x[(((size_t)im * s->H + h) * s->W + x0) * s->C + (code >> 16)];
        for (int j = 0; j < pk->np; j++) acc[j] += xv * pk->vals[bsconv_packed_at(pk->np, e, j)];
    }
}

// One y pixel over the packed groups (the max over the pool window).
static void bsc_pixel_packed(const bsc_walk *wk, int im, int po, int qo, size_t o) {
    const int win = bsc_win(wk->s);
    for (int gi = 0; gi < wk->pk->ngroups; gi++) {
        const bsconv_group *g = &wk->pk->grp[gi];
        float m[BSCONV_NMAX];
        for (int j = 0; j < g->nk; j++) m[j] = -INFINITY;
        for (int a = 0; a < win * win; a++) {
            float acc[BSCONV_NMAX] = {0};
            bsc_packed_dot(wk->s, wk->pk, g, wk->x, im, po * win + a / win, qo * win + a % win, acc);
            for (int j = 0; j < g->nk; j++)
                m[j] = fmaxf(m[j], bsconv_epi_cpu(wk->s, acc[j], wk->bias, wk->z, o + g->k0 + j, g->k0 + j));
        }
        for (int j = 0; j < g->nk; j++) wk->y[o + g->k0 + j] = m[j];
    }
}

// The kernel's loop over the packed layout, in plain C.
void bsconv_packed_forward_cpu(const bsconv_shape *s, const bsconv_packed *pk, const float *bias,
                               const float *x, const float *z, float *y) {
    const bsc_walk wk = {s, NULL, pk, bias, x, z, y};
    bsc_each_pixel(&wk, bsc_pixel_packed);
}
