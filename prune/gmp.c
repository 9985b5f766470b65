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

// min_layer scaled by the schedule's progress towards the target, <= now.
double gmp_layer_floor(double min_layer, double target, double now) {
    if (!(min_layer > 0.0) || !(target > 0.0) || !(now > 0.0)) return 0.0;
    return fmin(now, min_layer * (now / target));
}
