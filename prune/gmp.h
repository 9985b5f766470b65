// Gradual magnitude pruning (Zhu & Gupta, 2017): the cubic sparsity schedule
//   s(t) = s_f + (s_i - s_f) * (1 - u)^3,  u = clamp((t - begin) / (end - begin), 0, 1)
// over training progress t in [0, 1], and uniform per-layer targets (or, with
// per-layer floors above the current value, water-filled ones). The
// evolutionary search uses the same schedule as the floor of its overall
// sparsity. One-shot pruning is the degenerate schedule (begin = end = 0).
#ifndef SC_PRUNE_GMP_H
#define SC_PRUNE_GMP_H

#include <stddef.h>

// Sparsity at progress t of a cubic ramp from s_init to s_final over [begin, end].
double gmp_sparsity_at(double s_init, double s_final, double t, double begin, double end);

// Sets all L per-layer targets to s.
void gmp_targets_uniform(int L, double s, double *target);

// Per-layer targets at overall sparsity v with per-layer floors lf (L):
// target_l = max(lf_l, u), u in [0, v] chosen so that sum target_l * count_l
// = v * sum count_l (water-filling; docs/prune.md "Per-layer floors"). When
// no lf_l is above v this is gmp_targets_uniform(L, v) exactly. When the
// floors alone pass v (sum lf_l * count_l > v * total) the targets are lf.
void gmp_targets_floored(const size_t *count, int L, double v, const double *lf,
                         double *target);

// Per-layer sparsity floor while the overall schedule stands at `now` on its
// way to `target` (--min-layer-sparsity, docs/prune.md "Latency-aware
// floor"): min_layer * (now / target), never above now; 0 when min_layer or
// target is 0. It reaches min_layer exactly when now reaches target.
double gmp_layer_floor(double min_layer, double target, double now);

// The same for one layer of --layer-floor, whose floor m may be above the
// target: gmp_layer_floor(m, target, now) when m <= target (the same bits),
// else m * (now / target) capped at s_max instead of at now.
double gmp_layer_floor_at(double m, double target, double now, double s_max);

#endif
