// Non-linear quantization with k-means codebooks (Pietron and Zurek eq. 8-9, Deep
// Compression): the kept (mask 1) weights of one tensor are clustered in
// 1-D into k centroids; each weight is replaced by its nearest centroid.
// Pruned weights are neither clustered nor changed: they stay exactly zero.
//
// Sensitivity-weighted k-means (Choi, El-Khamy, Lee 2017, "Towards the limit
// of network quantization"): with a weight h_i >= 0 per value (the diagonal
// of the Hessian of the loss, approximated by the empirical Fisher,
// quantize/fisher.h) Lloyd minimises sum h_i (w_i - c_idx(i))^2. Each
// centroid becomes the h-weighted mean of its members (the plain mean when
// their h sum to 0); the assignment stays the nearest centroid, because for
// a fixed weight i the term h_i (w_i - c)^2 is smallest at the nearest c
// whatever h_i is. The starts are weighted too: density takes weighted
// quantiles, k-means++ samples by h_i D^2 (the first centroid by h_i), best
// compares weighted squared errors, and an empty cluster is re-seeded at the
// value with the largest h_i D^2. Per tensor the weights are divided by
// their mean over the kept weights and lifted to at least KMEANS_H_FLOOR
// (of that mean): the Fisher diagonal spans many orders of magnitude, and
// the floor keeps every weight in play (none is ignored outright, so no
// cluster is placed by a handful of weights alone) while leaving the
// ordering of the large ones intact. Equal weights (all h the same, zero
// included) are plain k-means bit for bit.
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
    int fp16;           // 1: centroids (and row scales) are rounded to fp16 before the
                        // final assignment
    int row_scale;      // 1: one scale s_k per output channel; the k centroids are
                        // shared by the normalised weights w / s_k (kmeans_quantize_rows)
    const float *net_h; // (nparam) sensitivity h of every parameter of the net being
                        // quantized, indexed like nt->param (only kept weights are read;
                        // >= 0, finite), or NULL: plain k-means. Read by
                        // kmeans_quantize_tensor / _rows, which normalise it per tensor
                        // (kmeans_weights_normalise); kmeans_1d_weighted takes its
                        // weights as an argument instead.
} kmeans_cfg;

// Smallest normalised sensitivity (per tensor, relative to the mean over its
// kept weights) a weight gets in weighted k-means.
#define KMEANS_H_FLOOR 1e-3f

// Rounds of (k-means on w / s, least-squares refit of s) with row scales.
#define KMEANS_ROW_ROUNDS 4

// Clusters n values (any order) into c->k centroids with Lloyd's algorithm
// from the chosen initialisation; an empty cluster is re-seeded at the value
// farthest from its centroid. centroids receives k values in ascending
// order (duplicates when there are fewer distinct values than k); *iters
// (may be NULL) the Lloyd iterations run (of the winner for best); *sse
// (may be NULL) the sum of squared distances to the nearest centroid. r is
// used by kmeans++ and best only.
int kmeans_1d(const float *x, size_t n, const kmeans_cfg *c, gsl_rng *r, double *centroids,
              int *iters, double *sse, sc_err *err);

// kmeans_1d with a weight h[i] >= 0 (finite) per value, minimising
// sum h_i (x_i - c)^2 (see the top of this file); h NULL, or all h equal,
// is exactly kmeans_1d. *sse is the weighted squared error. c->net_h is not
// read. Fails on a negative or non-finite weight.
int kmeans_1d_weighted(const float *x, const float *h, size_t n, const kmeans_cfg *c, gsl_rng *r,
                       double *centroids, int *iters, double *sse, sc_err *err);

// Normalises n sensitivities in place for weighted k-means: divided by their
// mean, then at least KMEANS_H_FLOOR; all 1 when they sum to 0. Fails on a
// negative or non-finite value (name: the tensor, for the message).
int kmeans_weights_normalise(float *h, size_t n, const char *name, sc_err *err);

// The sensitivities c->net_h of tensor ti's kept weights, in tensor order,
// normalised by kmeans_weights_normalise, into h (as many floats as kept
// weights). Fails without c->net_h or on a bad value.
int kmeans_tensor_weights(const net *nt, int ti, const kmeans_cfg *c, float *h, sc_err *err);

// Index of the centroid nearest to v among k ascending centroids (the lower
// one on a tie).
int kmeans_nearest(const float *centroids, int k, float v);

// Rounds k centroids c into the stored codebook cb (to fp16 when c->fp16);
// fails when one does not fit (name: the tensor, for the message).
int kmeans_codebook_round(const double *c, const kmeans_cfg *cfg, const char *name, float *cb,
                          sc_err *err);

// Quantizes tensor ti of nt into t (allocated here, see quant_tensor_alloc):
// clusters its kept weights, stores the codebook (fp16-rounded when c->fp16)
// and each kept weight's nearest centroid; pruned weights get index 0. The
// net is not changed (decode with quant_tensor_decode). With c->net_h the
// clustering is sensitivity-weighted (kmeans_1d_weighted, the tensor's kept
// h normalised by kmeans_weights_normalise). With c->row_scale it runs
// kmeans_quantize_rows instead (*iters is then 0).
int kmeans_quantize_tensor(const net *nt, int ti, const kmeans_cfg *c, gsl_rng *r,
                           quant_tensor *t, int *iters, sc_err *err);

// k-means with a scale per output channel k: s_k starts at the RMS of the
// row's kept weights; then KMEANS_ROW_ROUNDS times: k centroids from the
// normalised kept weights w / s_k of the whole tensor, each weight's
// nearest centroid c_j, and s_k refit by least squares for the row
// (sum w c_j / sum c_j^2); the round with the least relative squared
// error of the decoded weights fp32(c_j * s_k) against w (each row's error
// over the row's mean square: a BN after the layer normalises every output
// channel) is kept. Scales are stored like the centroids (fp16-rounded
// when c->fp16, at least 2^-24); a row without kept weights gets 1. *sse
// (may be NULL): the plain squared error of the kept round. With c->net_h
// (normalised per tensor as above) the clustering of w / s_k, the scale
// fit (sum h w c_j / sum h c_j^2) and the relative error that picks the
// round are all weighted by h.
int kmeans_quantize_rows(const net *nt, int ti, const kmeans_cfg *c, gsl_rng *r,
                         quant_tensor *t, double *sse, sc_err *err);

#endif
