// Channel concatenation (DenseNet-style joins), fp32 CPU reference. A tensor
// is viewed as (outer, c, inner): NCHW is (n, c, h*w), NHWC (n*h*w, c, 1).
// Input k of a concat owns channels [off, off + c) of the output's ctot.
#ifndef SC_KERNELS_CONCAT_H
#define SC_KERNELS_CONCAT_H

#include <stddef.h>

// Copies x (outer, c, inner) into channels [off, off + c) of y (outer, ctot, inner).
void concat_forward_cpu(size_t outer, int c, size_t inner, int ctot, int off, const float *x,
                        float *y);

// dx (outer, c, inner) = channels [off, off + c) of dy (outer, ctot, inner);
// accumulate = 1 adds to dx instead.
void concat_backward_cpu(size_t outer, int c, size_t inner, int ctot, int off, const float *dy,
                         float *dx, int accumulate);

#endif
