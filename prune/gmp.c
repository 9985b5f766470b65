// Gradual magnitude pruning: the cubic schedule of Zhu & Gupta (2017).
#include "gmp.h"

#include <math.h>

// Cubic ramp s_f + (s_i - s_f)(1 - u)^3 with u the progress through [begin, end].
double gmp_sparsity_at(double s_init, double s_final, double t, double begin, double end) {
    double u;
    if (t < begin) u = 0.0;
    else if (end <= begin || t >= end) u = 1.0;
    else u = (t - begin) / (end - begin);
    double r = 1.0 - u;
    return s_final + (s_init - s_final) * r * r * r;
}

// The same target for every layer.
void gmp_targets_uniform(int L, double s, double *target) {
    for (int i = 0; i < L; i++) target[i] = s;
}

// Weights pruned over the layers when every layer sits at max(lf_l, u).
static double floored_sum(const size_t *count, int L, const double *lf, double u) {
    double sum = 0.0;
    for (int l = 0; l < L; l++) sum += fmax(lf[l], u) * (double)count[l];
    return sum;
}

// Water-filling: the level u by bisection, then solved exactly over the
// layers that sit at it.
void gmp_targets_floored(const size_t *count, int L, double v, const double *lf,
                         double *target) {
    int above = 0;
    double total = 0.0;
    for (int l = 0; l < L; l++) {
        above |= lf[l] > v;
        total += (double)count[l];
    }
    if (!above) {
        gmp_targets_uniform(L, v, target);
        return;
    }
    double want = v * total, lo = 0.0, hi = v;
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi);
        if (floored_sum(count, L, lf, mid) < want) lo = mid;
        else hi = mid;
    }
    double fixed = 0.0, free_n = 0.0, u = hi;  // layers above the level keep their floor
    for (int l = 0; l < L; l++) {
        if (lf[l] < hi) free_n += (double)count[l];
        else fixed += lf[l] * (double)count[l];
    }
    if (free_n > 0.0) u = fmin(v, fmax(0.0, (want - fixed) / free_n));
    for (int l = 0; l < L; l++) target[l] = fmax(lf[l], u);
}

// min_layer scaled by the schedule's progress towards the target, <= now.
double gmp_layer_floor(double min_layer, double target, double now) {
    if (!(min_layer > 0.0) || !(target > 0.0) || !(now > 0.0)) return 0.0;
    return fmin(now, min_layer * (now / target));
}

// gmp_layer_floor for m <= target, else capped at s_max.
double gmp_layer_floor_at(double m, double target, double now, double s_max) {
    if (m <= target) return gmp_layer_floor(m, target, now);
    if (!(target > 0.0) || !(now > 0.0)) return 0.0;
    return fmin(s_max, m * (now / target));
}
