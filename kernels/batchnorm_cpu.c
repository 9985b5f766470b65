// CPU reference batch normalisation over (N, C, HW), NCHW fp32. Channel sums
// are accumulated in double, one channel per thread, in a fixed order.
#include "batchnorm.h"

#include <math.h>
#include <stddef.h>

// Below this many elements a loop stays on one thread.
#define BN_PAR_MIN 32768

// --- forward ----------------------------------------------------------------

// Mean and biased variance of channel ch of x (N, C, HW), two passes in double.
static void bn_channel_stats(int n, int c, int hw, const float *x, int ch, double *mean,
                             double *var) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        const float *p = x + ((size_t)i * c + ch) * hw;
        for (int e = 0; e < hw; e++) sum += p[e];
    }
    const double m = (double)n * hw, mu = sum / m;
    double sq = 0.0;
    for (int i = 0; i < n; i++) {
        const float *p = x + ((size_t)i * c + ch) * hw;
        for (int e = 0; e < hw; e++) {
            const double t = p[e] - mu;
            sq += t * t;
        }
    }
    *mean = mu;
    *var = sq / m;
}

// y = x * scale + shift over channel ch of (N, C, HW).
static void bn_channel_apply(int n, int c, int hw, const float *x, int ch, float scale,
                             float shift, float *y) {
    for (int i = 0; i < n; i++) {
        const size_t off = ((size_t)i * c + ch) * hw;
        for (int e = 0; e < hw; e++) y[off + e] = x[off + e] * scale + shift;
    }
}

// Training-mode forward. save_mean/save_invstd (C) keep the batch mean and
// 1/sqrt(var + eps) for the backward pass.
void batchnorm_forward_train_cpu(int n, int c, int hw, const float *x, const float *gamma,
                                 const float *beta, float eps, float momentum,
                                 float *running_mean, float *running_var, float *y,
                                 float *save_mean, float *save_invstd) {
    const double m = (double)n * hw;
#pragma omp parallel for schedule(static) if (m * c > BN_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        double mean, var;
        bn_channel_stats(n, c, hw, x, ch, &mean, &var);
        const double invstd = 1.0 / sqrt(var + eps);
        const double unbiased = m > 1.0 ? var * m / (m - 1.0) : var;
        running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
        running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
        save_mean[ch] = (float)mean;
        save_invstd[ch] = (float)invstd;
        const double scale = gamma[ch] * invstd;
        bn_channel_apply(n, c, hw, x, ch, (float)scale, (float)(beta[ch] - mean * scale), y);
    }
}

// Inference-mode forward with the running statistics.
void batchnorm_forward_infer_cpu(int n, int c, int hw, const float *x, const float *gamma,
                                 const float *beta, const float *running_mean,
                                 const float *running_var, float eps, float *y) {
#pragma omp parallel for schedule(static) if ((double)n * hw * c > BN_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        const double scale = gamma[ch] / sqrt((double)running_var[ch] + eps);
        const double shift = beta[ch] - running_mean[ch] * scale;
        bn_channel_apply(n, c, hw, x, ch, (float)scale, (float)shift, y);
    }
}

// --- backward ---------------------------------------------------------------

// Backward of the training-mode forward: dx overwritten, dgamma and dbeta (C)
// overwritten.
void batchnorm_backward_cpu(int n, int c, int hw, const float *x, const float *dy,
                            const float *gamma, const float *save_mean,
                            const float *save_invstd, float *dx, float *dgamma, float *dbeta) {
    const double m = (double)n * hw;
#pragma omp parallel for schedule(static) if (m * c > BN_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        const double mu = save_mean[ch], is = save_invstd[ch];
        double sdy = 0.0, sdyx = 0.0;  // sum dy, sum dy * xhat
        for (int i = 0; i < n; i++) {
            const size_t off = ((size_t)i * c + ch) * hw;
            for (int e = 0; e < hw; e++) {
                sdy += dy[off + e];
                sdyx += dy[off + e] * ((x[off + e] - mu) * is);
            }
        }
        dbeta[ch] = (float)sdy;
        dgamma[ch] = (float)sdyx;
        // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
        const double k = gamma[ch] * is, mdy = sdy / m, mdyx = sdyx / m;
        for (int i = 0; i < n; i++) {
            const size_t off = ((size_t)i * c + ch) * hw;
            for (int e = 0; e < hw; e++) {
                const double xh = (x[off + e] - mu) * is;
                dx[off + e] = (float)(k * (dy[off + e] - mdy - xh * mdyx));
            }
        }
    }
}
