// CPU reference convolution, NCHW fp32: im2col + cblas_sgemm for the forward
// pass, the gradient w.r.t. the input (sgemm + col2im) and the gradient
// w.r.t. the filters. Images are unfolded in groups so the column buffer stays
// bounded (about 16 MB).
//
// Threads: OpenMP only. BLAS runs single-threaded (these kernels set OpenBLAS
// to one thread: its spinning worker threads and OpenMP's fight over the same
// cores, which made a resnet20 step 3x slower on 2 cores), and each sgemm is
// split into column blocks whose bounds depend only on the shapes. So every
// output element is computed by one thread in a fixed order and results are
// bitwise identical run to run, whatever the thread count.
#include "conv2d.h"

#include <cblas.h>
#include <string.h>

// Column-buffer budget per group of images, in floats.
#define CONV2D_GROUP_FLOATS ((size_t)1 << 22)
// Below this many floats of work a loop stays on one thread.
#define CONV2D_PAR_MIN 32768
// Below this many multiply-adds an sgemm is not split.
#define CONV2D_GEMM_MIN 1000000.0

// --- dimensions -------------------------------------------------------------

// Fills d, computing p and q; returns -1 when the output would be empty.
int conv2d_dims_init(conv2d_dims *d, int n, int c, int h, int w, int k, int r, int s,
                     int stride, int pad) {
    if (n < 1 || c < 1 || h < 1 || w < 1 || k < 1 || r < 1 || s < 1 || stride < 1 || pad < 0)
        return -1;
    if (h + 2 * pad < r || w + 2 * pad < s) return -1;
    d->n = n, d->c = c, d->h = h, d->w = w;
    d->k = k, d->r = r, d->s = s;
    d->stride = stride, d->pad = pad;
    d->p = (h + 2 * pad - r) / stride + 1;
    d->q = (w + 2 * pad - s) / stride + 1;
    return 0;
}

// Rows of the unfolded matrix: C * R * S.
static size_t conv2d_crs(const conv2d_dims *d) { return (size_t)d->c * d->r * d->s; }

// Output pixels per image: P * Q.
static size_t conv2d_pq(const conv2d_dims *d) { return (size_t)d->p * d->q; }

// Images unfolded at once: as many as fit the column budget, at least one.
static int conv2d_group(const conv2d_dims *d) {
    size_t per = conv2d_pq(d) * (conv2d_crs(d) + (size_t)d->k);
    size_t g = CONV2D_GROUP_FLOATS / per;
    if (g < 1) g = 1;
    if (g > (size_t)d->n) g = (size_t)d->n;
    return (int)g;
}

// Floats of scratch memory the CPU functions below need.
size_t conv2d_cpu_workspace(const conv2d_dims *d) {
    return (size_t)conv2d_group(d) * conv2d_pq(d) * (conv2d_crs(d) + (size_t)d->k);
}

// Output columns [*lo, *hi) whose input column q*stride - pad + s is inside the image.
static void conv2d_valid_cols(const conv2d_dims *d, int s, int *lo, int *hi) {
    int a = d->pad - s > 0 ? (d->pad - s + d->stride - 1) / d->stride : 0;
    int last = d->w - 1 + d->pad - s;
    int b = last >= 0 ? last / d->stride + 1 : 0;
    if (b > d->q) b = d->q;
    if (a > b) a = b;
    *lo = a, *hi = b;
}

// --- blocked sgemm ----------------------------------------------------------

// Makes OpenBLAS single-threaded (OpenMP does the threading here).
static void conv2d_blas_serial(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// Row-major C (M, N) = op(A) op(B) + beta C, with op(B) (K, N); the N columns
// are cut into at most max_blocks blocks (widths a multiple of 16, fixed by
// the shapes alone), each one single-threaded sgemm on an OpenMP thread.
static void conv2d_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc, int max_blocks) {
    int nblk = (double)m * n * k < CONV2D_GEMM_MIN ? 1 : max_blocks;
    int width = ((n + nblk - 1) / nblk + 15) / 16 * 16;
    nblk = (n + width - 1) / width;
#pragma omp parallel for schedule(static) if (nblk > 1)
    for (int bi = 0; bi < nblk; bi++) {
        const int j0 = bi * width, nj = n - j0 < width ? n - j0 : width;
        const float *bp = tb == CblasNoTrans ? b + j0 : b + (size_t)j0 * ldb;
        cblas_sgemm(CblasRowMajor, ta, tb, m, nj, k, 1.0f, a, lda, bp, ldb, beta, c + j0, ldc);
    }
}

// --- im2col / col2im --------------------------------------------------------

// Unfolds images [i0, i0 + g) of x (N, C, H, W) into col (C*R*S, g*P*Q).
static void conv2d_im2col(const conv2d_dims *d, const float *x, int i0, int g, float *col) {
    const int crs = (int)conv2d_crs(d), rs = d->r * d->s;
    const size_t pq = conv2d_pq(d), ld = (size_t)g * pq, hw = (size_t)d->h * d->w;
#pragma omp parallel for schedule(static) if (ld * crs > CONV2D_PAR_MIN)
    for (int row = 0; row < crs; row++) {
        const int c = row / rs, r = (row / d->s) % d->r, s = row % d->s;
        int lo, hi;
        conv2d_valid_cols(d, s, &lo, &hi);
        for (int j = 0; j < g; j++) {
            const float *xp = x + ((size_t)(i0 + j) * d->c + c) * hw;
            float *dst = col + (size_t)row * ld + (size_t)j * pq;
            for (int p = 0; p < d->p; p++, dst += d->q) {
                const int ih = p * d->stride - d->pad + r;
                if (ih < 0 || ih >= d->h) {
                    memset(dst, 0, (size_t)d->q * sizeof *dst);
                    continue;
                }
                const long base = (long)ih * d->w + s - d->pad;  // input index at q = 0
                for (int q = 0; q < lo; q++) dst[q] = 0.0f;
                if (d->stride == 1)
                    memcpy(dst + lo, xp + base + lo, (size_t)(hi - lo) * sizeof *dst);
                else
                    for (int q = lo; q < hi; q++) dst[q] = xp[base + (long)q * d->stride];
                for (int q = hi; q < d->q; q++) dst[q] = 0.0f;
            }
        }
    }
}

// Folds col (C*R*S, g*P*Q) back into images [i0, i0 + g) of dx (N, C, H, W),
// overwriting them; each (image, channel) plane is summed by one thread.
static void conv2d_col2im(const conv2d_dims *d, const float *col, int i0, int g, float *dx) {
    const size_t pq = conv2d_pq(d), ld = (size_t)g * pq, hw = (size_t)d->h * d->w;
    const int planes = g * d->c;
#pragma omp parallel for schedule(static) if (ld * conv2d_crs(d) > CONV2D_PAR_MIN)
    for (int pl = 0; pl < planes; pl++) {
        const int j = pl / d->c, c = pl % d->c;
        float *dp = dx + ((size_t)(i0 + j) * d->c + c) * hw;
        memset(dp, 0, hw * sizeof *dp);
        for (int r = 0; r < d->r; r++) {
            for (int s = 0; s < d->s; s++) {
                int lo, hi;
                conv2d_valid_cols(d, s, &lo, &hi);
                const size_t row = ((size_t)c * d->r + r) * d->s + s;
                const float *src = col + row * ld + (size_t)j * pq;
                for (int p = 0; p < d->p; p++) {
                    const int ih = p * d->stride - d->pad + r;
                    if (ih < 0 || ih >= d->h) continue;
                    const long base = (long)ih * d->w + s - d->pad;
                    const float *sr = src + (size_t)p * d->q;
                    for (int q = lo; q < hi; q++) dp[base + (long)q * d->stride] += sr[q];
                }
            }
        }
    }
}

// --- layout moves between (N, K, PQ) and (K, g*PQ) ---------------------------

// Copies images [i0, i0 + g) of t (N, K, PQ) into m (K, g*PQ).
static void conv2d_gather(const conv2d_dims *d, const float *t, int i0, int g, float *m) {
    const size_t pq = conv2d_pq(d), ld = (size_t)g * pq;
    const int rows = g * d->k;
#pragma omp parallel for schedule(static) if (ld * d->k > CONV2D_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const int j = i / d->k, k = i % d->k;
        memcpy(m + (size_t)k * ld + (size_t)j * pq, t + ((size_t)(i0 + j) * d->k + k) * pq,
               pq * sizeof *m);
    }
}

// Writes m (K, g*PQ) plus bias (K, may be NULL) into images [i0, i0 + g) of
// y (N, K, PQ); m may already be y's storage when g == 1.
static void conv2d_scatter_bias(const conv2d_dims *d, const float *m, const float *bias, int i0,
                                int g, float *y) {
    const size_t pq = conv2d_pq(d), ld = (size_t)g * pq;
    const int rows = g * d->k;
#pragma omp parallel for schedule(static) if (ld * d->k > CONV2D_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const int j = i / d->k, k = i % d->k;
        const float b = bias ? bias[k] : 0.0f;
        const float *src = m + (size_t)k * ld + (size_t)j * pq;
        float *dst = y + ((size_t)(i0 + j) * d->k + k) * pq;
        for (size_t e = 0; e < pq; e++) dst[e] = src[e] + b;
    }
}

// --- forward and backward ---------------------------------------------------

// y (N, K, P, Q) = conv(x (N, C, H, W), wt (K, C, R, S)) + bias (K) (bias may be NULL).
void conv2d_forward_cpu(const conv2d_dims *d, const float *x, const float *wt,
                        const float *bias, float *y, float *work) {
    conv2d_blas_serial();
    const int g = conv2d_group(d), crs = (int)conv2d_crs(d);
    const size_t pq = conv2d_pq(d);
    float *col = work;                              // (C*R*S, g*P*Q)
    float *out = work + (size_t)g * pq * crs;       // (K, g*P*Q)
    for (int i0 = 0; i0 < d->n; i0 += g) {
        const int gn = d->n - i0 < g ? d->n - i0 : g;
        const int ld = (int)(gn * pq);
        float *o = gn == 1 ? y + (size_t)i0 * d->k * pq : out;
        conv2d_im2col(d, x, i0, gn, col);
        conv2d_gemm(CblasNoTrans, CblasNoTrans, d->k, ld, crs, wt, crs, col, ld, 0.0f, o, ld, 8);
        if (gn > 1 || bias) conv2d_scatter_bias(d, o, bias, i0, gn, y);
    }
}

// dy of images [i0, i0+gn) as one (K, gn*P*Q) matrix: dy itself for one
// image, else gathered into buf.
static const float *conv2d_dy_group(const conv2d_dims *d, const float *dy, int i0, int gn,
                                    float *buf) {
    if (gn == 1) return dy + (size_t)i0 * d->k * conv2d_pq(d);
    conv2d_gather(d, dy, i0, gn, buf);
    return buf;
}

// dx (N, C, H, W) = gradient w.r.t. the input, overwritten.
void conv2d_backward_data_cpu(const conv2d_dims *d, const float *dy, const float *wt,
                              float *dx, float *work) {
    conv2d_blas_serial();
    const int g = conv2d_group(d), crs = (int)conv2d_crs(d);
    const size_t pq = conv2d_pq(d);
    float *col = work;                              // (C*R*S, g*P*Q)
    float *dyg = work + (size_t)g * pq * crs;       // (K, g*P*Q)
    for (int i0 = 0; i0 < d->n; i0 += g) {
        const int gn = d->n - i0 < g ? d->n - i0 : g;
        const int ld = (int)(gn * pq);
        const float *m = conv2d_dy_group(d, dy, i0, gn, dyg);
        conv2d_gemm(CblasTrans, CblasNoTrans, crs, ld, d->k, wt, crs, m, ld, 0.0f, col, ld, 8);
        conv2d_col2im(d, col, i0, gn, dx);
    }
}

// dbias (K) = sum of dy (N, K, PQ) over images and pixels, in double.
static void conv2d_bias_grad(const conv2d_dims *d, const float *dy, float *dbias) {
    const size_t pq = conv2d_pq(d);
#pragma omp parallel for schedule(static) if ((size_t)d->n * d->k * pq > CONV2D_PAR_MIN)
    for (int k = 0; k < d->k; k++) {
        double sum = 0.0;
        for (int i = 0; i < d->n; i++) {
            const float *p = dy + ((size_t)i * d->k + k) * pq;
            for (size_t e = 0; e < pq; e++) sum += p[e];
        }
        dbias[k] = (float)sum;
    }
}

// dw (K, C, R, S) and dbias (K, may be NULL) = gradients w.r.t. weights and
// bias, overwritten (not accumulated).
void conv2d_backward_filter_cpu(const conv2d_dims *d, const float *x, const float *dy,
                                float *dw, float *dbias, float *work) {
    conv2d_blas_serial();
    const int g = conv2d_group(d), crs = (int)conv2d_crs(d);
    const size_t pq = conv2d_pq(d);
    float *col = work;                              // (C*R*S, g*P*Q)
    float *dyg = work + (size_t)g * pq * crs;       // (K, g*P*Q)
    for (int i0 = 0; i0 < d->n; i0 += g) {
        const int gn = d->n - i0 < g ? d->n - i0 : g;
        const int ld = (int)(gn * pq);
        const float *m = conv2d_dy_group(d, dy, i0, gn, dyg);
        conv2d_im2col(d, x, i0, gn, col);
        // dW (K, CRS) += dy (K, gPQ) col^T: each column block re-packs dy, so few blocks.
        conv2d_gemm(CblasNoTrans, CblasTrans, d->k, crs, ld, m, ld, col, ld,
                    i0 == 0 ? 0.0f : 1.0f, dw, crs, 4);
    }
    if (dbias) conv2d_bias_grad(d, dy, dbias);
}
