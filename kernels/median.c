// The median of a few measurements (kernels/median.h).
#include "kernels/median.h"

#include <math.h>
#include <stdlib.h>

// Orders two doubles for qsort.
static int median_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Sorts v ascending and returns its middle element.
double sc_median(double *v, int n) {
    if (n < 1) return NAN;
    qsort(v, (size_t)n, sizeof *v, median_cmp);
    return v[n / 2];
}
