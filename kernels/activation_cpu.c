// CPU elementwise ops: ReLU forward/backward, residual add and gradient
// accumulation, fp32. Each element is written by one thread.
#include "activation.h"

// Below this many elements a loop stays on one thread.
#define ACT_PAR_MIN 65536

// y = max(x, 0); y may alias x.
void relu_forward_cpu(size_t n, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// dx = dy where y > 0, else 0; dx may alias dy.
void relu_backward_cpu(size_t n, const float *y, const float *dy, float *dx) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// y = a + b; y may alias a or b.
void add_forward_cpu(size_t n, const float *a, const float *b, float *y) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

// acc += x (gradient accumulation where an output feeds two layers).
void accumulate_cpu(size_t n, const float *x, float *acc) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}
