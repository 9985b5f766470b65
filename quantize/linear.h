// Linear fixed-point quantization (Pietron and Zurek eq. 5-7): a weight x becomes the
// integer q = clamp(round(x / scale) + zero_point, qmin, qmax) of `bits`
// bits and decodes to scale * (q - zero_point). Symmetric: zero_point 0 and
// q in [-(2^(b-1) - 1), 2^(b-1) - 1]; asymmetric: q in [-2^(b-1), 2^(b-1) - 1]
// with the zero point placing the range [lo, hi] (which always holds 0, so
// pruned zeros decode to exactly 0). The range ends (saturation levels) come
// from a GSL histogram of the kept weights: by default the clip that
// minimises the expected squared error (rounding error step^2 / 12 inside
// the range plus the squared distance of the clipped values outside), or
// the range of the values, or a percentile.
#ifndef SC_QUANTIZE_LINEAR_H
#define SC_QUANTIZE_LINEAR_H

#include <stddef.h>

#include "runtime/error.h"
#include "runtime/net.h"
#include "runtime/quant_io.h"

typedef enum { LQ_CLIP_MSE = 0, LQ_CLIP_MAX = 1, LQ_CLIP_PERCENTILE = 2 } linear_clip;

// Clip names in enum order, '|'-separated (for the CLI).
#define LINEAR_CLIPS "mse|max|percentile"

typedef struct {
    int bits;           // 8 or 16
    int symmetric;      // 1: zero point 0
    int per_channel;    // 1: one scale (and zero point) per output channel (dim 0)
    linear_clip clip;   // how the saturation levels are chosen
    double percentile;  // LQ_CLIP_PERCENTILE: symmetric keeps this percentile of |x|;
                        // asymmetric cuts (100 - P)% from each tail
    int bins;           // histogram bins (LQ_CLIP_MSE and LQ_CLIP_PERCENTILE)
} linear_cfg;

// Smallest and largest integer of the configuration.
void linear_qrange(const linear_cfg *c, int *qmin, int *qmax);

// Chooses the range [*lo, *hi] (lo <= 0 <= hi) for n values with a GSL
// histogram.
int linear_range(const float *x, size_t n, const linear_cfg *c, double *lo, double *hi,
                 sc_err *err);

// Scale and zero point for the range [lo, hi] (scale 1 for an empty range).
void linear_params(const linear_cfg *c, double lo, double hi, float *scale, int32_t *zp);

// The integer for x (clamped); *sat is set to 1 when x lies beyond the range.
int16_t linear_encode(const linear_cfg *c, float scale, int32_t zp, float x, int *sat);

// Quantizes tensor ti of nt into t (allocated here): per channel or per
// tensor, ranges from the kept weights, pruned weights get q = zero point.
// t->saturated counts the kept weights that were clipped. The net is not
// changed (decode with quant_tensor_decode).
int linear_quantize_tensor(const net *nt, int ti, const linear_cfg *c, quant_tensor *t,
                           sc_err *err);

#endif
