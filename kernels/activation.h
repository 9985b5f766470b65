// Elementwise ops: ReLU and the residual add, fp32.
#ifndef SC_KERNELS_ACTIVATION_H
#define SC_KERNELS_ACTIVATION_H

#include <stddef.h>

// y = max(x, 0); y may alias x.
void relu_forward_cpu(size_t n, const float *x, float *y);
// dx = dy where y > 0, else 0; dx may alias dy.
void relu_backward_cpu(size_t n, const float *y, const float *dy, float *dx);
// y = a + b; y may alias a or b.
void add_forward_cpu(size_t n, const float *a, const float *b, float *y);
// acc += x (gradient accumulation where an output feeds two layers).
void accumulate_cpu(size_t n, const float *x, float *acc);

#endif
