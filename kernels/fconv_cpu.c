// Plain-C reference of the fused channels-last convolution (kernels/fconv.h).
#include <stddef.h>

#include "kernels/fconv.h"

// Output plane size (P, Q).
void fconv_out(const fconv_dims *d, int *P, int *Q) {
    *P = (d->H + 2 * d->pad - d->R) / d->stride + 1;
    *Q = (d->W + 2 * d->pad - d->S) / d->stride + 1;
}

// Sum over the window of output pixel (p, q) of one image for channel k.
static double fconv_dot(const fconv_dims *d, const float *img, const float *wk, int p, int q) {
    double acc = 0.0;
    for (int r = 0; r < d->R; r++) {
        const int h = p * d->stride - d->pad + r;
        if (h < 0 || h >= d->H) continue;
        for (int s = 0; s < d->S; s++) {
            const int w = q * d->stride - d->pad + s;
            if (w < 0 || w >= d->W) continue;
            const float *x = img + ((size_t)h * d->W + w) * d->C;
            const float *v = wk + ((size_t)r * d->S + s) * d->C;
            for (int c = 0; c < d->C; c++) acc += (double)v[c] * x[c];
        }
    }
    return acc;
}

// y = act(conv(x, w) + bias [+ z]) for m images.
void fconv_cpu(const fconv_dims *d, int m, const float *x, const float *w, const float *bias,
               const float *z, float *y) {
    int P, Q;
    fconv_out(d, &P, &Q);
    const size_t in_img = (size_t)d->H * d->W * d->C, wrow = (size_t)d->R * d->S * d->C;
    for (int i = 0; i < m; i++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int k = 0; k < d->K; k++) {
                    const size_t o = (((size_t)i * P + p) * Q + q) * d->K + k;
                    double v = fconv_dot(d, x + i * in_img, w + k * wrow, p, q) + bias[k];
                    if (d->residual) v += z[o];
                    y[o] = d->relu && v < 0.0 ? 0.0f : (float)v;
                }
}
