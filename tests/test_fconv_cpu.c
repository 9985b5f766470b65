// The channels-last fused convolution's CPU reference (kernels/fconv.h)
// against the NCHW training convolution (kernels/conv2d.h) on random inputs
// of awkward shapes: strides 1 and 2, 1x1 / 3x3 / 5x3 kernels, padding,
// residual and ReLU epilogues.
#include <math.h>
#include <stdlib.h>

#include "kernels/conv2d.h"
#include "kernels/fconv.h"
#include "tests/check.h"

// Uniform in [-1, 1) from a small LCG (deterministic per seed).
static float urand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// Max |fconv_cpu - act(conv2d + z)| for one shape (NaN on a shape error).
static double one_case(const fconv_dims *d, unsigned seed) {
    conv2d_dims c;
    if (conv2d_dims_init(&c, d->n, d->C, d->H, d->W, d->K, d->R, d->S, d->stride, d->pad)) return NAN;
    const size_t nx = (size_t)d->n * d->C * d->H * d->W, nw = (size_t)d->K * d->C * d->R * d->S;
    const size_t ny = (size_t)d->n * d->K * c.p * c.q;
    float *x = malloc(nx * 4), *xh = malloc(nx * 4), *w = malloc(nw * 4), *wh = malloc(nw * 4);
    float *b = malloc(d->K * 4), *z = malloc(ny * 4), *zh = malloc(ny * 4), *y = malloc(ny * 4);
    float *yh = malloc(ny * 4), *work = malloc((conv2d_cpu_workspace(&c) + 1) * 4);
    double worst = NAN;
    if (x && xh && w && wh && b && z && zh && y && yh && work) {
        for (size_t i = 0; i < nx; i++) x[i] = urand(&seed);
        for (size_t i = 0; i < nw; i++) w[i] = urand(&seed);
        for (int k = 0; k < d->K; k++) b[k] = urand(&seed);
        for (size_t i = 0; i < ny; i++) z[i] = urand(&seed);
        // NCHW / KCRS -> NHWC / KRSC copies
        for (int i = 0; i < d->n; i++)
            for (int ch = 0; ch < d->C; ch++)
                for (int p = 0; p < d->H * d->W; p++)
                    xh[((size_t)i * d->H * d->W + p) * d->C + ch] = x[((size_t)i * d->C + ch) * d->H * d->W + p];
        for (int k = 0; k < d->K; k++)
            for (int ch = 0; ch < d->C; ch++)
                for (int t = 0; t < d->R * d->S; t++)
                    wh[((size_t)k * d->R * d->S + t) * d->C + ch] = w[((size_t)k * d->C + ch) * d->R * d->S + t];
        for (int i = 0; i < d->n; i++)
            for (int k = 0; k < d->K; k++)
                for (int p = 0; p < c.p * c.q; p++)
                    zh[((size_t)i * c.p * c.q + p) * d->K + k] = z[((size_t)i * d->K + k) * c.p * c.q + p];
        conv2d_forward_cpu(&c, x, w, b, y, work);
        fconv_cpu(d, d->n, xh, wh, b, zh, yh);
        worst = 0.0;
        for (int i = 0; i < d->n; i++)
            for (int k = 0; k < d->K; k++)
                for (int p = 0; p < c.p * c.q; p++) {
                    const size_t o = ((size_t)i * d->K + k) * c.p * c.q + p;
                    double v = y[o] + (d->residual ? z[o] : 0.0f);
                    if (d->relu && v < 0) v = 0;
                    const double e = fabs(v - yh[((size_t)i * c.p * c.q + p) * d->K + k]);
                    if (!(e <= worst)) worst = e;
                }
    }
    free(x), free(xh), free(w), free(wh), free(b), free(z), free(zh), free(y), free(yh), free(work);
    return worst;
}

// Awkward shapes, every epilogue.
static void test_shapes(tctx *t) {
    const fconv_dims cases[] = {
        {.n = 2, .C = 3, .H = 7, .W = 5, .K = 5, .R = 3, .S = 3, .stride = 1, .pad = 1},
        {.n = 3, .C = 8, .H = 9, .W = 9, .K = 7, .R = 3, .S = 3, .stride = 2, .pad = 1, .relu = 1},
        {.n = 1, .C = 13, .H = 6, .W = 11, .K = 4, .R = 1, .S = 1, .stride = 1, .pad = 0, .residual = 1},
        {.n = 2, .C = 5, .H = 8, .W = 7, .K = 6, .R = 5, .S = 3, .stride = 2, .pad = 2, .residual = 1, .relu = 1},
        {.n = 2, .C = 16, .H = 4, .W = 4, .K = 9, .R = 3, .S = 3, .stride = 1, .pad = 0, .relu = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const double e = one_case(&cases[i], 7u + (unsigned)i);
        CHECK(t, e <= 1e-4, "case %zu: max error %g", i, e);
    }
}

int main(void) {
    tctx t = {.suite = "test_fconv_cpu"};
    RUN(&t, test_shapes);
    return check_finish(&t);
}
