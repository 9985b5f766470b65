// Non-linear quantization with k-means codebooks (seed 001 eq. 8-9, Deep
// Compression): the kept (mask 1) weights of one tensor are clustered in
// 1-D into k centroids; each weight is replaced by its nearest centroid.
// Pruned weights are neither clustered nor changed: they stay exactly zero.
#ifndef SC_QUANTIZE_KMEANS_H
#define SC_QUANTIZE_KMEANS_H

#include <stddef.h>

#include <gsl/gsl_rng.h>

#include "runtime/error.h"
#include "runtime/net.h"
#include "runtime/quant_io.h"

typedef enum { KM_INIT_LINEAR = 0, KM_INIT_DENSITY = 1, KM_INIT_KPP = 2, KM_INIT_BEST = 3 } kmeans_init;

// Initialisation names in enum order, '|'-separated (for the CLI).
#define KMEANS_INITS "linear|density|kmeans++|best"

// k-means++ starts tried by KM_INIT_BEST (besides linear and density).
#define KMEANS_BEST_KPP 3

typedef struct {
    int k;              // centroids, 2..256
    kmeans_init init;   // linear: evenly spaced over [min, max]; density: evenly
                        // spaced quantiles; kmeans++: D^2 sampling (GSL RNG);
                        // best: Lloyd from each of linear, density and
                        // KMEANS_BEST_KPP k-means++ draws, the lowest squared error wins
    int max_iter;       // Lloyd iterations at most (stops earlier when stable)
    int fp16;           // 1: centroids are rounded to fp16 before the final assignment
} kmeans_cfg;

// Clusters n values (any order) into c->k centroids with Lloyd's algorithm
// from the chosen initialisation; an empty cluster is re-seeded at the value
// farthest from its centroid. centroids receives k values in ascending
// order (duplicates when there are fewer distinct values than k); *iters
// (may be NULL) the Lloyd iterations run (of the winner for best); *sse
// (may be NULL) the sum of squared distances to the nearest centroid. r is
// used by kmeans++ and best only.
int kmeans_1d(const float *x, size_t n, const kmeans_cfg *c, gsl_rng *r, double *centroids,
              int *iters, double *sse, sc_err *err);

// Index of the centroid nearest to v among k ascending centroids (the lower
// one on a tie).
int kmeans_nearest(const float *centroids, int k, float v);

// Quantizes tensor ti of nt into t (allocated here, see quant_tensor_alloc):
// clusters its kept weights, stores the codebook (fp16-rounded when c->fp16)
// and each kept weight's nearest centroid; pruned weights get index 0. The
// net is not changed (decode with quant_tensor_decode).
int kmeans_quantize_tensor(const net *nt, int ti, const kmeans_cfg *c, gsl_rng *r,
                           quant_tensor *t, int *iters, sc_err *err);

#endif
