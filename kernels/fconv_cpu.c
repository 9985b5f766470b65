// Plain-C reference of the fused channels-last convolution (kernels/fconv.h).
#include <math.h>
#include <stddef.h>

#include "kernels/fconv.h"

// Output plane size (P, Q).
void fconv_out(const fconv_dims *d, int *P, int *Q) {
    *P = (d->H + 2 * d->pad - d->R) / d->stride + 1;
    *Q = (d->W + 2 * d->pad - d->S) / d->stride + 1;
}

// Sum over the window of output pixel (p, q) of one image for channel k (of
// the magnitudes |w| |x| when mag).
static double fconv_dot(const fconv_dims *d, const float *img, const float *wk, int p, int q, int mag) {
    double acc = 0.0;
    for (int r = 0; r < d->R; r++) {
        const int h = p * d->stride - d->pad + r;
        if (h < 0 || h >= d->H) continue;
        for (int s = 0; s < d->S; s++) {
            const int w = q * d->stride - d->pad + s;
            if (w < 0 || w >= d->W) continue;
            const float *x = img + ((size_t)h * d->W + w) * d->C;
            const float *v = wk + ((size_t)r * d->S + s) * d->C;
            if (mag)
                for (int c = 0; c < d->C; c++) acc += fabs((double)v[c] * x[c]);
            else
                for (int c = 0; c < d->C; c++) acc += (double)v[c] * x[c];
        }
    }
    return acc;
}

// The sums of m images into out: act(conv(x, w) + bias [+ z]), or with mag
// the same over magnitudes without the activation.
static void fconv_run(const fconv_dims *d, int m, const float *x, const float *w, const float *bias,
                      const float *z, float *out, int mag) {
    int P, Q;
    fconv_out(d, &P, &Q);
    const size_t in_img = (size_t)d->H * d->W * d->C, wrow = (size_t)d->R * d->S * d->C;
    for (int i = 0; i < m; i++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int k = 0; k < d->K; k++) {
                    const size_t o = (((size_t)i * P + p) * Q + q) * d->K + k;
                    const double dot = fconv_dot(d, x + i * in_img, w + k * wrow, p, q, mag);
                    double v = dot + (mag ? fabs((double)bias[k]) : bias[k]);
                    if (d->residual) v += mag ? fabs((double)z[o]) : z[o];
                    out[o] = !mag && d->relu && v < 0.0 ? 0.0f : (float)v;
                }
}

// y = act(conv(x, w) + bias [+ z]) for m images.
void fconv_cpu(const fconv_dims *d, int m, const float *x, const float *w, const float *bias,
               const float *z, float *y) {
    fconv_run(d, m, x, w, bias, z, y, 0);
}

// mag = conv(|x|, |w|) + |bias| [+ |z|] for m images.
void fconv_cpu_mag(const fconv_dims *d, int m, const float *x, const float *w, const float *bias,
                   const float *z, float *mag) {
    fconv_run(d, m, x, w, bias, z, mag, 1);
}

// Products per output element plus the bias and residual adds.
int fconv_terms(const fconv_dims *d) { return d->R * d->S * d->C + 1 + (d->residual != 0); }

// max |got - want| / bound over n elements; infinite on a NaN.
double fconv_check_ratio(size_t n, const float *got, const float *want, const float *mag, const fconv_tol *t) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]);
        if (isnan(e)) return INFINITY;
        const double bound = t->u_out * fabs((double)want[i]) + (t->terms * t->u_acc + t->u_prod) * mag[i] + t->tiny;
        const double r = e == 0.0 ? 0.0 : bound > 0.0 ? e / bound : INFINITY;
        worst = r > worst ? r : worst;
    }
    return worst;
}
