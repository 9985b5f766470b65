// Softmax cross-entropy with label smoothing eps: the target is
// (1 - eps) one_hot + eps / classes. Loss per image = -sum target * log softmax.
#ifndef SC_KERNELS_LOSS_H
#define SC_KERNELS_LOSS_H

// For logits (N, K) and labels (N): returns the summed loss over the batch and
// the number of top-1 hits (*correct; the first maximum wins ties). When
// dlogits is not NULL it receives (softmax - target) * grad_scale, (N, K);
// pass grad_scale = 1/N for the gradient of the mean loss.
double softmax_xent_cpu(int n, int k, const float *logits, const int *labels, float smoothing,
                        float grad_scale, float *dlogits, long *correct);

#endif
