// CPU masked SGD step (momentum, Nesterov, weight decay; PyTorch semantics),
// elementwise, so every element is written by one thread.
#include "sgd.h"

// Below this many elements the loop stays on one thread.
#define SGD_PAR_MIN 65536

// One update of w, mom from grad; mask zeros keep w and mom exactly zero.
void sgd_step_cpu(size_t n, float *w, const float *grad, float *mom, const float *mask, float lr,
                  float momentum, float weight_decay, int nesterov) {
#pragma omp parallel for schedule(static) if (n > SGD_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float m = mask[i];
        const float g = (grad[i] + weight_decay * w[i]) * m;
        const float v = (momentum * mom[i] + g) * m;
        const float step = nesterov ? g + momentum * v : v;
        mom[i] = v;
        w[i] = (w[i] - lr * step) * m;
    }
}
