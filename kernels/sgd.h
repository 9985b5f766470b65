// Masked SGD update with momentum, Nesterov and weight decay (PyTorch semantics):
//   g = (grad + wd * w) * mask
//   mom = momentum * mom + g          (then mom *= mask)
//   step = nesterov ? g + momentum * mom : mom
//   w = (w - lr * step) * mask
// Pruned weights, their gradients and their momentum stay exactly zero.
#ifndef SC_KERNELS_SGD_H
#define SC_KERNELS_SGD_H

#include <stddef.h>

void sgd_step_cpu(size_t n, float *w, const float *grad, float *mom, const float *mask, float lr,
                  float momentum, float weight_decay, int nesterov);

#endif
