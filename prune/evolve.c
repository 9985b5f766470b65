// Evolutionary operators of the pruning search (seed 001, Algorithm 1).
// See docs/prune.md for the reading of the algorithm and eqs. 2-4.
#include "evolve.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prune/gmp.h"

// --- configuration and schedule ---------------------------------------------

// Defaults for `iterations` iterations towards `target`.
void evolve_cfg_default(evolve_cfg *c, int iterations, double target) {
    *c = (evolve_cfg){.iterations = iterations, .target = target, .threshold = 1.0,
                      .ramp_begin = 0.0, .ramp_end = 0.75, .layer_frac = 0.5, .init_max = -1.0,
                      .s_max = 0.995, .mutate_sigma = 0.2, .sens_rate = 0.3,
                      .cluster_every = 5, .clusters = 0, .keep = 2, .patience = 3,
                      .chance = 0.0};
}

// Cubic floor of the overall sparsity after iteration iter.
double evolve_floor(const evolve_cfg *c, int iter) {
    if (c->iterations <= 0) return c->target;
    return gmp_sparsity_at(0.0, c->target, (double)iter / c->iterations, c->ramp_begin,
                           c->ramp_end);
}

// Random initial genomes; init_max < 0 means twice the first non-zero floor.
void evolve_init(prune_pop *p, const evolve_cfg *c, rng *r) {
    double hi = c->init_max;
    if (hi < 0.0) {
        double f = 0.0;
        for (int it = 1; it <= c->iterations && f <= 0.0; it++) f = evolve_floor(c, it);
        hi = fmin(c->target, 2.0 * f);
    }
    for (int i = 0; i < p->n; i++)
        for (int l = 0; l < p->L; l++) p->sol[i].genome[l] = hi * rng_uniform(r);
}

// --- planning a raise (eq. 4) -----------------------------------------------

// Robustness from sensitivities, scale-free.
void evolve_robustness(const double *sens, int L, double *rho) {
    double lo = DBL_MAX, mean = 0.0;
    for (int l = 0; l < L; l++) lo = fmin(lo, sens[l]);
    for (int l = 0; l < L; l++) mean += (sens[l] - lo) / L;
    for (int l = 0; l < L; l++) rho[l] = 1.0 / (1.0 + (sens[l] - lo) / (mean + 1e-12));
}

// Picks up to k layers without replacement with probability proportional to w.
static void pick_layers(const double *w, int L, int k, rng *r, int *chosen) {
    for (int l = 0; l < L; l++) chosen[l] = 0;
    for (int j = 0; j < k; j++) {
        double sum = 0.0;
        for (int l = 0; l < L; l++) sum += chosen[l] ? 0.0 : w[l];
        if (sum <= 0.0) return;
        double u = rng_uniform(r) * sum;
        int pick = -1;
        for (int l = 0; l < L; l++) {
            if (chosen[l] || w[l] <= 0.0) continue;
            pick = l;
            u -= w[l];
            if (u < 0.0) break;
        }
        chosen[pick] = 1;
    }
}

// x in [lo, hi] with x e^x = mu (mu >= 0), by bisection: the log-density cut
// of one layer at multiplier mu.
static double solve_xex(double mu, double lo, double hi) {
    if (lo * exp(lo) >= mu) return lo;
    if (hi * exp(hi) <= mu) return hi;
    for (int it = 0; it < 80; it++) {
        double mid = 0.5 * (lo + hi);
        if (mid * exp(mid) < mu) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

// Weights kept overall when every layer sits at x_l(lam) = the solution of
// 2 sens_l x e^x = lam n_l within [xlo_l, xhi]; x (L) receives the cuts.
static double kept_at(double lam, const double *sens, const prune_layers *pl, const double *xlo,
                      double xhi, double *x) {
    double kept = 0.0;
    for (int l = 0; l < pl->n; l++) {
        x[l] = solve_xex(lam * (double)pl->count[l] / (2.0 * sens[l]), xlo[l], xhi);
        kept += (double)pl->count[l] * exp(-x[l]);
    }
    return kept;
}

// Per-layer sparsities minimising sum_l sens_l * ln(1/d_l)^2 (d_l: density)
// with the overall sparsity at `floor`, no layer below lo[l] or above s_max.
void evolve_allocate(const double *sens, const prune_layers *pl, const double *lo, double floor,
                     double s_max, double *target) {
    int L = pl->n;
    double *xlo = calloc((size_t)L * 2, sizeof *xlo), *x = xlo + L;
    double xhi = -log(1.0 - s_max), want = (1.0 - floor) * (double)pl->total;
    if (!xlo) {
        for (int l = 0; l < L; l++) target[l] = fmax(lo[l], floor);
        return;
    }
    for (int l = 0; l < L; l++) xlo[l] = fmin(xhi, -log(fmax(1e-12, 1.0 - lo[l])));
    double a = -60.0, b = 60.0;  // log(lam)
    if (kept_at(0.0, sens, pl, xlo, xhi, x) <= want) {
        a = b = -INFINITY;  // already sparse enough
    } else if (kept_at(exp(b), sens, pl, xlo, xhi, x) > want) {
        a = b;  // every layer at s_max
    } else {
        for (int it = 0; it < 100; it++) {
            double mid = 0.5 * (a + b);
            if (kept_at(exp(mid), sens, pl, xlo, xhi, x) > want) a = mid;
            else b = mid;
        }
    }
    kept_at(exp(b), sens, pl, xlo, xhi, x);
    for (int l = 0; l < L; l++) target[l] = fmax(lo[l], 1.0 - exp(-x[l]));
    free(xlo);
}

// Effective sensitivities of a plan: floored at 5% of their mean (so no layer
// is free), halved in the layers chosen for pruning this round.
static void sens_effective(const double *sens, int L, const int *chosen, double *out) {
    double mean = 0.0;
    for (int l = 0; l < L; l++) mean += fmax(0.0, sens[l]) / L;
    double lo = 0.05 * mean + 1e-9;
    for (int l = 0; l < L; l++) out[l] = fmax(lo, sens[l]) * (chosen[l] ? 0.5 : 1.0);
}

// Floor of layer l at overall floor `floor`: its own (layer_floor) or lf0.
static double plan_floor(const evolve_cfg *c, int l, double floor, double lf0) {
    if (!c->layer_floor) return lf0;
    return gmp_layer_floor_at(c->layer_floor[l], c->target, floor, c->s_max);
}

// Targets for the next raise of solution s (see the header).
// Accuracy minus the latency penalty.
double evolve_fitness(const evolve_cfg *c, const prune_sol *s) {
    if (!c->lat || !(c->lat_target > 0.0)) return s->acc;
    double over = lat_predict(c->lat, s->sparsity) / c->lat_target - 1.0;
    return s->acc - (over > 0.0 ? c->lat_penalty * 100.0 * over : 0.0);
}

// Time saved per weight, relative to the layers' mean, clipped.
void evolve_lat_ratio(const evolve_cfg *c, const prune_layers *pl, const double *sp, double *r) {
    int L = pl->n;
    double mean = 0.0;
    for (int l = 0; l < L; l++) {
        r[l] = c->lat ? lat_layer_gain(c->lat, l, sp[l]) / (double)pl->count[l] : 1.0;
        mean += r[l] / L;
    }
    for (int l = 0; l < L; l++) r[l] = mean > 0.0 ? fmin(20.0, fmax(0.05, r[l] / mean)) : 1.0;
}

// Predicted ms of the allocation at overall sparsity v above `from` (sp: scratch).
static double reach_ms(const evolve_cfg *c, const prune_layers *pl, const double *w,
                       const double *from, double v, double *sp) {
    evolve_allocate(w, pl, from, v, c->s_max, sp);
    return lat_predict(c->lat, sp);
}

int evolve_lat_reach(const evolve_cfg *c, const prune_layers *pl, const double *from,
                     double target_ms, double *sparsity, double *ms) {
    int L = pl->n;
    double w[L > 0 ? L : 1], sp[L > 0 ? L : 1];  // a layer count: small, on the stack
    double a = prune_sparsity_overall(pl, from), b = fmax(a, c->s_max);
    int out = 0;
    evolve_lat_ratio(c, pl, from, w);
    for (int l = 0; l < L; l++) w[l] = 1.0 / w[l];
    if (reach_ms(c, pl, w, from, a, sp) <= target_ms) b = a;
    else if (reach_ms(c, pl, w, from, b, sp) > target_ms) out = 1;
    else
        for (int it = 0; it < 50; it++) {  // bisection: b always reaches the target
            double m = 0.5 * (a + b);
            if (reach_ms(c, pl, w, from, m, sp) <= target_ms) b = m;
            else a = m;
        }
    *ms = reach_ms(c, pl, w, from, b, sp);
    *sparsity = b;
    return out;
}

// Steps of a layer's search for its sparsity at a time multiplier.
#define TIME_STEPS 128

// Candidate k (0 to TIME_STEPS + t->G) of a layer's sparsity in [lo, hi]:
// TIME_STEPS even steps from lo, then the table's grid points (possibly outside [lo, hi]).
static double time_step(const lat_table *t, double lo, double hi, int k) {
    return k <= TIME_STEPS ? lo + (hi - lo) * k / TIME_STEPS : t->grid[k - TIME_STEPS - 1];
}

// Layer l's sparsity in [lo, hi] minimising sens * evolve_cost(s) + mu *
// (its table time at s), over the candidates of time_step.
static double time_pick(const lat_table *t, int l, double sens, double lo, double hi, double mu) {
    double best = lo, bv = sens * evolve_cost(lo) + mu * lat_layer_ms(t, l, lo);
    for (int k = 1; k <= TIME_STEPS + t->G; k++) {
        double s = time_step(t, lo, hi, k);
        if (s <= lo || s > hi) continue;
        double v = sens * evolve_cost(s) + mu * lat_layer_ms(t, l, s);
        if (v < bv) best = s, bv = v;
    }
    return best;
}

// Every layer's pick at multiplier mu into out; the table's prediction for them.
static double time_at(const double *sens, const lat_table *t, const double *lo, double s_max, double mu,
                      double *out) {
    for (int l = 0; l < t->L; l++) out[l] = time_pick(t, l, sens[l], lo[l], fmax(lo[l], s_max), mu);
    return lat_predict(t, out);
}

// The lowest candidate (time_step) in [lo, hi] at which layer l takes at most ms (hi when none is lower).
static double time_lowest(const lat_table *t, int l, double lo, double hi, double ms) {
    double best = hi;
    for (int k = 0; k <= TIME_STEPS + t->G; k++) {
        double s = time_step(t, lo, hi, k);
        if (s >= lo && s < best && lat_layer_ms(t, l, s) <= ms) best = s;
    }
    return best;
}

// Hands back the time a plan leaves under target_ms: while one can, the layer
// whose step down (to its lowest step that keeps the plan within target_ms)
// saves the most sens-weighted cost takes it. Each layer's pick jumps where
// its time bends, so the bisection's plan came out up to 5% under the target
// on vgg16's H200 tables (0.8-0.9% on the mean of random sensitivities and masks).
static void time_fill(const double *sens, const lat_table *t, const double *lo, double target_ms,
                      double *target) {
    for (int round = 0; round < 2 * t->L; round++) {
        double pred = lat_predict(t, target), gain = 1e-12, to = 0.0;
        int pick = -1;
        for (int l = 0; l < t->L; l++) {
            if (target[l] <= lo[l]) continue;
            double s = time_lowest(t, l, lo[l], target[l], target_ms - (pred - lat_layer_ms(t, l, target[l])));
            double g = sens[l] * (evolve_cost(target[l]) - evolve_cost(s));
            if (g > gain) gain = g, pick = l, to = s;
        }
        if (pick < 0) return;
        target[pick] = to;
    }
}

int evolve_allocate_time(const double *sens, const lat_table *t, const double *lo, double target_ms,
                         double s_max, double *target) {
    double a = -40.0, b = 40.0;  // log(mu)
    if (time_at(sens, t, lo, s_max, 0.0, target) <= target_ms) return 0;
    if (time_at(sens, t, lo, s_max, exp(b), target) > target_ms) return 1;
    for (int it = 0; it < 60; it++) {  // b always meets the target
        double m = 0.5 * (a + b);
        if (time_at(sens, t, lo, s_max, exp(m), target) <= target_ms) b = m;
        else a = m;
    }
    time_at(sens, t, lo, s_max, exp(b), target);
    time_fill(sens, t, lo, target_ms, target);
    return 0;
}

// The schedule's position: floor / c->target in [0, 1].
static double lat_share(const evolve_cfg *c, double floor) {
    return c->target > 0.0 ? fmin(1.0, fmax(0.0, floor / c->target)) : 1.0;
}

double evolve_lat_schedule(const evolve_cfg *c, double floor) {
    double dense = lat_dense_ms(c->lat);
    return dense - lat_share(c, floor) * (dense - c->lat_target);
}

// EVOLVE_ALLOC_RAMP: the allocation for the final target above lo, each
// layer taken to the schedule's share of it (never below lo).
static void ramp_plan(const evolve_cfg *c, const double *w, const double *lo, double floor, double *target) {
    evolve_allocate_time(w, c->lat, lo, c->lat_target, c->s_max, target);
    double f = lat_share(c, floor);
    for (int l = 0; l < c->lat->L; l++) target[l] = fmax(lo[l], f * target[l]);
}

// The layers a plan prunes further (chosen: drawn by robustness x time
// ratio x room above lo; ratio NULL: 1) and their effective sensitivities
// into w (rho: scratch for the robustness).
static void plan_pick(const evolve_cfg *c, const double *sens, const double *ratio, int L, const double *lo,
                      rng *r, int *chosen, double *rho, double *w) {
    evolve_robustness(sens, L, rho);
    for (int l = 0; l < L; l++) w[l] = rho[l] * (ratio ? ratio[l] : 1.0) * fmax(0.0, c->s_max - lo[l]);
    int k = (int)lround(c->layer_frac * L);
    pick_layers(w, L, k < 1 ? 1 : k, r, chosen);
    sens_effective(sens, L, chosen, w);
}

void evolve_plan(const prune_sol *s, const prune_layers *pl, const double *sens,
                 const evolve_cfg *c, double floor, rng *r, double *target) {
    int L = pl->n;
    double *rho = malloc((size_t)L * 4 * sizeof *rho), *w = rho + L, *lo = w + L, *ratio = lo + L;
    int *chosen = calloc((size_t)L, sizeof *chosen);
    double have = 0.0, extra = 0.0, want = floor * (double)pl->total;
    double lf = gmp_layer_floor(c->layer_min, c->target, floor);
    for (int l = 0; l < L; l++) {  // base: the mask, lifted to the layer floor
        double base = fmax(s->sparsity[l], plan_floor(c, l, floor, lf));
        target[l] = fmax(base, fmin(s->genome[l], c->s_max));
        have += base * (double)pl->count[l];
        extra += (target[l] - base) * (double)pl->count[l];
    }
    if (c->lat && c->lat_time) {  // by time, above the mask, the genome and the floors
        if (rho && chosen) {
            memcpy(lo, target, (size_t)L * sizeof *lo);
            plan_pick(c, sens, NULL, L, lo, r, chosen, rho, w);
            if (c->lat_time == EVOLVE_ALLOC_RAMP) ramp_plan(c, w, lo, floor, target);
            else evolve_allocate_time(w, c->lat, lo, evolve_lat_schedule(c, floor), c->s_max, target);
        }
        goto done;
    }
    if (have + extra > want) {  // the genome alone passes the floor: scale it down to it
        double lam = extra > 0.0 ? fmax(0.0, (want - have) / extra) : 0.0;
        for (int l = 0; l < L; l++) {
            double base = fmax(s->sparsity[l], plan_floor(c, l, floor, lf));
            target[l] = base + lam * (target[l] - base);
        }
        extra *= lam;
    }
    if (!rho || !chosen || want - have - extra <= 0.5) goto done;
    evolve_lat_ratio(c, pl, s->sparsity, ratio);
    plan_pick(c, sens, ratio, L, target, r, chosen, rho, w);
    for (int l = 0; l < L; l++) w[l] /= ratio[l];  // latency: cut where time is bought
    memcpy(lo, target, (size_t)L * sizeof *lo);
    evolve_allocate(w, pl, lo, floor, fmax(c->s_max, floor), target);
done:
    free(rho);
    free(chosen);
}

// --- sensitivities ----------------------------------------------------------

// ln(1 / (1 - s))^2, the cost feature of sparsity s.
double evolve_cost(double s) {
    double x = -log(fmax(1e-12, 1.0 - s));
    return x * x;
}

// Ridge weight pulling a layer's observed slope towards its current
// estimate, in units of the cost feature's squared spread across solutions.
#define SENS_RIDGE 0.1

// Per layer, the least-squares slope of the drop left after the other
// layers' current estimates (one backfitting sweep), shrunk towards the
// current estimate, clipped at 0 and folded into the EMA.
void evolve_sens_update(double *sens, int L, int n, const double *cost, const double *drop,
                        double rate) {
    if (n < 4) return;
    double *y = malloc((size_t)n * sizeof *y), *obs = malloc((size_t)L * sizeof *obs);
    for (int l = 0; l < L && y && obs; l++) {
        double cm = 0.0, ym = 0.0, sxy = 0.0, sxx = 0.0;
        for (int i = 0; i < n; i++) {
            y[i] = drop[i];
            for (int m = 0; m < L; m++)
                if (m != l) y[i] -= sens[m] * cost[i * L + m];
            cm += cost[i * L + l] / n;
            ym += y[i] / n;
        }
        for (int i = 0; i < n; i++) {
            double dx = cost[i * L + l] - cm;
            sxy += dx * (y[i] - ym);
            sxx += dx * dx;
        }
        // Ridge towards the current estimate: little contrast, little change.
        obs[l] = fmax(0.0, (sxy + SENS_RIDGE * sens[l]) / (sxx + SENS_RIDGE));
    }
    for (int l = 0; l < L && y && obs; l++) sens[l] = (1.0 - rate) * sens[l] + rate * obs[l];
    free(y);
    free(obs);
}

// --- mutation and crossover -------------------------------------------------

// A layer drawn with probability proportional to the time it can still save
// (gain x remaining density); uniform when none can.
static int lat_pick(const lat_table *t, const double *sp, int L, rng *r) {
    double sum = 0.0;
    for (int l = 0; l < L; l++) sum += lat_layer_gain(t, l, sp[l]) * (1.0 - sp[l]);
    double u = rng_uniform(r) * sum;
    if (!(sum > 0.0)) return (int)rng_below(r, (uint32_t)L);
    for (int l = 0; l < L; l++) {
        u -= lat_layer_gain(t, l, sp[l]) * (1.0 - sp[l]);
        if (u < 0.0) return l;
    }
    return L - 1;
}

// Genome = mask sparsity, raised in a random quarter of the layers.
void evolve_mutate(prune_sol *s, int L, const evolve_cfg *c, rng *r) {
    int m = L / 4 < 1 ? 1 : L / 4;
    for (int l = 0; l < L; l++) s->genome[l] = s->sparsity[l];
    for (int j = 0; j < m; j++) {
        int l = c->lat && rng_uniform(r) < 0.5 ? lat_pick(c->lat, s->sparsity, L, r)
                                               : (int)rng_below(r, (uint32_t)L);
        double d = fabs(c->mutate_sigma * rng_normal(r));
        s->genome[l] = fmin(c->s_max, s->sparsity[l] + d * (1.0 - s->sparsity[l]));
    }
}

// Child genome: parent a's sparsities, parent b's in random layers.
void evolve_crossover(prune_sol *child, const prune_sol *a, const prune_sol *b, int L, rng *r) {
    for (int l = 0; l < L; l++)
        child->genome[l] =
            fmax(child->sparsity[l], rng_uniform(r) < 0.5 ? b->sparsity[l] : a->sparsity[l]);
}

// --- k-means ----------------------------------------------------------------

// Squared Euclidean distance of two d-dim points.
static double dist2(const double *x, const double *y, int d) {
    double s = 0.0;
    for (int j = 0; j < d; j++) s += (x[j] - y[j]) * (x[j] - y[j]);
    return s;
}

// k-means++ seeding: the first centre uniformly, the others by squared distance.
static void kmeans_seed(const double *x, int n, int d, int k, rng *r, double *cen, double *dmin) {
    memcpy(cen, x + (size_t)rng_below(r, (uint32_t)n) * d, (size_t)d * sizeof *cen);
    for (int i = 0; i < n; i++) dmin[i] = dist2(x + (size_t)i * d, cen, d);
    for (int c = 1; c < k; c++) {
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += dmin[i];
        int pick = (int)rng_below(r, (uint32_t)n);
        if (sum > 0.0) {
            double u = rng_uniform(r) * sum;
            for (pick = 0; pick < n - 1 && (u -= dmin[pick]) >= 0.0; pick++) {}
        }
        memcpy(cen + (size_t)c * d, x + (size_t)pick * d, (size_t)d * sizeof *cen);
        for (int i = 0; i < n; i++)
            dmin[i] = fmin(dmin[i], dist2(x + (size_t)i * d, cen + (size_t)c * d, d));
    }
}

// Assigns every point to its nearest centre; returns how many changed.
static int kmeans_assign(const double *x, int n, int d, int k, const double *cen, int *assign) {
    int changed = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        double bd = DBL_MAX;
        for (int c = 0; c < k; c++) {
            double dd = dist2(x + (size_t)i * d, cen + (size_t)c * d, d);
            if (dd < bd) {
                bd = dd;
                best = c;
            }
        }
        changed += assign[i] != best;
        assign[i] = best;
    }
    return changed;
}

// Moves every centre to the mean of its points (empty clusters stay put).
static void kmeans_update(const double *x, int n, int d, int k, const int *assign, double *cen) {
    for (int c = 0; c < k; c++) {
        int m = 0;
        for (int i = 0; i < n; i++) m += assign[i] == c;
        if (!m) continue;
        for (int j = 0; j < d; j++) {
            double s = 0.0;
            for (int i = 0; i < n; i++)
                if (assign[i] == c) s += x[(size_t)i * d + j];
            cen[(size_t)c * d + j] = s / m;
        }
    }
}

// Clusters n points of d dims into k groups.
int evolve_kmeans(const double *x, int n, int d, int k, rng *r, int *assign, sc_err *err) {
    if (n < 1 || d < 1) return sc_fail(err, "k-means needs points (%d of %d dims)", n, d);
    k = k < 1 ? 1 : k > n ? n : k;
    double *cen = malloc(((size_t)k * d + (size_t)n) * sizeof *cen);
    if (!cen) return sc_fail(err, "out of memory (k-means)");
    kmeans_seed(x, n, d, k, r, cen, cen + (size_t)k * d);
    for (int i = 0; i < n; i++) assign[i] = -1;
    for (int it = 0; it < 50; it++) {
        if (!kmeans_assign(x, n, d, k, cen, assign)) break;
        kmeans_update(x, n, d, k, assign, cen);
    }
    free(cen);
    return 0;
}

// --- selection --------------------------------------------------------------

// A random admitted solution other than `not` when possible.
static int pick_admitted(const int *adm, int n, int not, rng *r) {
    int cnt = 0;
    for (int i = 0; i < n; i++) cnt += adm[i] && i != not;
    if (!cnt) return not;
    int j = (int)rng_below(r, (uint32_t)cnt);
    for (int i = 0; i < n; i++)
        if (adm[i] && i != not && j-- == 0) return i;
    return not;
}

// Index of the most accurate solution (first on ties).
static int most_accurate(const prune_pop *p, const evolve_cfg *c) {
    int b = 0;
    for (int i = 1; i < p->n; i++)
        if (evolve_fitness(c, &p->sol[i]) > evolve_fitness(c, &p->sol[b])) b = i;
    return b;
}

// Rewinds a rejected solution whose mask grew and gives it a new genome.
static void reject(prune_pop *p, int i, const double *cost, const int *adm, rng *r,
                   const evolve_cfg *c, prune_hist *h) {
    int grew = 0;
    for (int l = 0; l < p->L; l++) grew |= cost[i * p->L + l] > 0.0;
    p->sol[i].fails++;
    if (!grew) return;  // nothing to rewind: its mask did not change this round
    prune_sol_rewind(p, i);
    h->rewound++;
    int a = pick_admitted(adm, p->n, i, r), b = pick_admitted(adm, p->n, a, r);
    if (a != i && b != i && a != b && rng_uniform(r) < 0.5) {
        evolve_crossover(&p->sol[i], &p->sol[a], &p->sol[b], p->L, r);
        h->crossed++;
    } else {
        evolve_mutate(&p->sol[i], p->L, c, r);
        h->mutated++;
    }
}

// Replaces solution i by a copy of src with a mutated genome.
static void replace(prune_pop *p, int i, int src, const evolve_cfg *c, rng *r, prune_hist *h) {
    prune_sol_copy(p, i, src);
    evolve_mutate(&p->sol[i], p->L, c, r);
    h->replaced++;
}

// Thins crowded clusters: keeps the `keep` most accurate of each.
static int thin_clusters(prune_pop *p, const evolve_cfg *c, rng *r, prune_hist *h,
                         sc_err *err) {
    int n = p->n, L = p->L, k = c->clusters > 0 ? c->clusters : (n + 2) / 3;
    double *x = malloc((size_t)n * L * sizeof *x);
    int *as = malloc((size_t)n * 2 * sizeof *as), *rank = as + n;
    if (!x || !as) {
        free(x);
        free(as);
        return sc_fail(err, "out of memory (clustering)");
    }
    for (int i = 0; i < n; i++) memcpy(x + (size_t)i * L, p->sol[i].sparsity, (size_t)L * sizeof *x);
    int rc = evolve_kmeans(x, n, L, k, r, as, err);
    int best = most_accurate(p, c);
    for (int i = 0; i < n && !rc; i++) {  // rank within its cluster by fitness
        rank[i] = 0;
        double fi = evolve_fitness(c, &p->sol[i]);
        for (int j = 0; j < n; j++) {
            double fj = evolve_fitness(c, &p->sol[j]);
            if (as[j] == as[i] && (fj > fi || (fj == fi && j < i))) rank[i]++;
        }
    }
    for (int i = 0; i < n && !rc; i++) {
        p->sol[i].cluster = as[i];
        if (rank[i] >= c->keep && i != best) replace(p, i, best, c, r, h);
    }
    free(x);
    free(as);
    return rc;
}

// The selection step of one iteration (see the header).
int evolve_select(prune_pop *p, const evolve_cfg *c, int iter, const double *cost, rng *r,
                  prune_hist *h, sc_err *err) {
    int n = p->n;
    int *adm = calloc((size_t)n, sizeof *adm);
    double *drop = calloc((size_t)n, sizeof *drop);
    if (!adm || !drop) {
        free(adm);
        free(drop);
        return sc_fail(err, "out of memory (selection)");
    }
    double top = evolve_fitness(c, &p->sol[most_accurate(p, c)]), mean = 0.0;
    for (int i = 0; i < n; i++) {
        adm[i] = evolve_fitness(c, &p->sol[i]) >= top - c->threshold;
        drop[i] = p->sol[i].acc_prev - p->sol[i].acc;
        mean += p->sol[i].acc / n;
    }
    if (mean >= 1.5 * c->chance) evolve_sens_update(p->sens, p->L, n, cost, drop, c->sens_rate);
    for (int i = 0; i < n; i++) {
        if (!adm[i]) continue;
        memcpy(p->sol[i].genome, p->sol[i].sparsity, (size_t)p->L * sizeof(double));
        p->sol[i].fails = 0;
        p->sol[i].age++;
        h->admitted++;
    }
    for (int i = 0; i < n; i++)
        if (!adm[i]) reject(p, i, cost, adm, r, c, h);
    for (int i = 0; i < n; i++)
        if (!adm[i] && p->sol[i].fails >= c->patience) replace(p, i, pick_admitted(adm, n, i, r), c, r, h);
    int rc = 0;
    if (n > 1 && c->cluster_every > 0 && iter % c->cluster_every == 0)
        rc = thin_clusters(p, c, r, h, err);
    p->best = most_accurate(p, c);
    free(adm);
    free(drop);
    return rc;
}

// Fittest solution at or above min_sparsity overall.
int evolve_best(const prune_pop *p, const prune_layers *pl, const evolve_cfg *c, double min_sparsity) {
    int best = -1, sparsest = 0;
    double smax = -1.0;
    for (int i = 0; i < p->n; i++) {
        double s = prune_sparsity_overall(pl, p->sol[i].sparsity);
        if (s > smax) {
            smax = s;
            sparsest = i;
        }
        if (s + 1e-9 >= min_sparsity &&
            (best < 0 || evolve_fitness(c, &p->sol[i]) > evolve_fitness(c, &p->sol[best])))
            best = i;
    }
    return best >= 0 ? best : sparsest;
}
