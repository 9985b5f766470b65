// CPU references of the deploy runtime's small ops on bordered NCHW tensors
// (kernels/deploy_ops.h). One plane per loop iteration, so the OpenMP split
// never changes a result.
#include "kernels/deploy_ops.h"

#include <string.h>

// Below this many elements a loop stays on one thread.
#define DOPS_PAR_MIN 65536

// --- geometry ---------------------------------------------------------------

// Floats (elements) of a whole tensor, borders included.
size_t dops_geom_count(const dops_geom *g) {
    return (size_t)g->n * g->c * (size_t)(g->h + 2 * g->b) * (size_t)(g->w + 2 * g->b);
}

// Element offset of interior pixel (y, x) of plane `plane`.
size_t dops_geom_at(const dops_geom *g, size_t plane, int y, int x) {
    const size_t hb = (size_t)(g->h + 2 * g->b), wb = (size_t)(g->w + 2 * g->b);
    return (plane * hb + (size_t)(y + g->b)) * wb + (size_t)(x + g->b);
}

// Number of planes (images times channels).
static size_t dops_planes(const dops_geom *g) { return (size_t)g->n * g->c; }

// --- elementwise ------------------------------------------------------------

// out interior (n, 3, h, w) = normalised bytes; see deploy_ops.h.
void dops_normalize_cpu(const dops_geom *out, const uint8_t *img, const float mean[3],
                        const float std[3], float *y) {
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float x = (float)v / 255.0f;
            x = x - mean[c];
            lut[c][v] = x / std[c];
        }
    const long planes = (long)dops_planes(out);
#pragma omp parallel for schedule(static) if (dops_geom_count(out) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        const uint8_t *src = img + (size_t)pl * out->h * out->w;
        const float *t = lut[pl % out->c];
        for (int r = 0; r < out->h; r++) {
            float *o = y + dops_geom_at(out, (size_t)pl, r, 0);
            for (int x = 0; x < out->w; x++) o[x] = t[src[r * out->w + x]];
        }
    }
}

// y = a + b, then ReLU when asked.
void dops_add_cpu(const dops_geom *ga, const float *a, const dops_geom *gb, const float *b,
                  const dops_geom *gy, float *y, int relu) {
    const long planes = (long)dops_planes(gy);
#pragma omp parallel for schedule(static) if (dops_geom_count(gy) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++)
        for (int r = 0; r < gy->h; r++) {
            const float *pa = a + dops_geom_at(ga, (size_t)pl, r, 0);
            const float *pb = b + dops_geom_at(gb, (size_t)pl, r, 0);
            float *o = y + dops_geom_at(gy, (size_t)pl, r, 0);
            for (int x = 0; x < gy->w; x++) {
                float v = pa[x] + pb[x];
                o[x] = relu && v < 0.0f ? 0.0f : v;
            }
        }
}

// y = max(x, 0).
void dops_relu_cpu(const dops_geom *gx, const float *x, const dops_geom *gy, float *y) {
    const long planes = (long)dops_planes(gy);
#pragma omp parallel for schedule(static) if (dops_geom_count(gy) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++)
        for (int r = 0; r < gy->h; r++) {
            const float *px = x + dops_geom_at(gx, (size_t)pl, r, 0);
            float *o = y + dops_geom_at(gy, (size_t)pl, r, 0);
            for (int c = 0; c < gy->w; c++) o[c] = px[c] > 0.0f ? px[c] : 0.0f;
        }
}

// y = x * scale[ch] + shift[ch], then ReLU when asked.
void dops_affine_cpu(const dops_geom *gx, const float *x, const float *scale,
                     const float *shift, const dops_geom *gy, float *y, int relu) {
    const long planes = (long)dops_planes(gy);
#pragma omp parallel for schedule(static) if (dops_geom_count(gy) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        const float s = scale[pl % gy->c], t = shift[pl % gy->c];
        for (int r = 0; r < gy->h; r++) {
            const float *px = x + dops_geom_at(gx, (size_t)pl, r, 0);
            float *o = y + dops_geom_at(gy, (size_t)pl, r, 0);
            for (int c = 0; c < gy->w; c++) {
                float v = px[c] * s + t;
                o[c] = relu && v < 0.0f ? 0.0f : v;
            }
        }
    }
}

// --- pooling ----------------------------------------------------------------

// Max (or, avg = 1, average) of window (p, q) of one interior plane.
static float dops_window(const dops_geom *gx, const float *x, size_t pl, int k, int stride,
                         int pad, int avg, int p, int q) {
    const int y0 = p * stride - pad, x0 = q * stride - pad;
    float best = 0.0f, sum = 0.0f;
    int seen = 0;
    for (int i = y0; i < y0 + k; i++) {
        if (i < 0 || i >= gx->h) continue;
        const float *row = x + dops_geom_at(gx, pl, i, 0);
        for (int j = x0; j < x0 + k; j++) {
            if (j < 0 || j >= gx->w) continue;
            sum += row[j];
            if (!seen || row[j] > best) best = row[j];
            seen = 1;
        }
    }
    return avg ? sum / (float)(k * k) : best;
}

// Max or average pool from gx to gy.
void dops_pool_cpu(const dops_geom *gx, const float *x, int k, int stride, int pad, int avg,
                   const dops_geom *gy, float *y) {
    const long planes = (long)dops_planes(gy);
#pragma omp parallel for schedule(static) if (dops_geom_count(gx) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++)
        for (int p = 0; p < gy->h; p++) {
            float *o = y + dops_geom_at(gy, (size_t)pl, p, 0);
            for (int q = 0; q < gy->w; q++)
                o[q] = dops_window(gx, x, (size_t)pl, k, stride, pad, avg, p, q);
        }
}

// Global average pool into the single interior pixel of each output plane.
void dops_gap_cpu(const dops_geom *gx, const float *x, const dops_geom *gy, float *y) {
    const long planes = (long)dops_planes(gy);
    const double hw = (double)gx->h * gx->w;
#pragma omp parallel for schedule(static) if (dops_geom_count(gx) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        double sum = 0.0;
        for (int r = 0; r < gx->h; r++) {
            const float *px = x + dops_geom_at(gx, (size_t)pl, r, 0);
            for (int c = 0; c < gx->w; c++) sum += px[c];
        }
        y[dops_geom_at(gy, (size_t)pl, 0, 0)] = (float)(sum / hw);
    }
}

// Copies x's interior into y's channels [off, off + gx->c).
void dops_concat_cpu(const dops_geom *gx, const float *x, int off, const dops_geom *gy, float *y) {
    const long planes = (long)dops_planes(gx);
#pragma omp parallel for schedule(static) if (dops_geom_count(gx) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        const size_t img = (size_t)pl / (size_t)gx->c, ch = (size_t)pl % (size_t)gx->c;
        const size_t to = img * (size_t)gy->c + (size_t)off + ch;
        for (int r = 0; r < gx->h; r++)
            memcpy(y + dops_geom_at(gy, to, r, 0), x + dops_geom_at(gx, (size_t)pl, r, 0),
                   (size_t)gx->w * sizeof *y);
    }
}

// Copies the interior of x into y.
void dops_copy_cpu(const dops_geom *gx, const float *x, const dops_geom *gy, float *y) {
    const long planes = (long)dops_planes(gy);
#pragma omp parallel for schedule(static) if (dops_geom_count(gy) > DOPS_PAR_MIN)
    for (long pl = 0; pl < planes; pl++)
        for (int r = 0; r < gy->h; r++)
            memcpy(y + dops_geom_at(gy, (size_t)pl, r, 0), x + dops_geom_at(gx, (size_t)pl, r, 0),
                   (size_t)gy->w * sizeof *y);
}
