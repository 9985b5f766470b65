// The median of a few measurements: the one helper every timing loop uses
// (plain C, no allocation).
#ifndef SC_KERNELS_MEDIAN_H
#define SC_KERNELS_MEDIAN_H

#ifdef __cplusplus
extern "C" {
#endif

// Sorts v (n) ascending in place and returns v[n / 2]; NAN when n < 1.
double sc_median(double *v, int n);

#ifdef __cplusplus
}
#endif

#endif
