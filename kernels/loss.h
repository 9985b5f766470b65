// Softmax cross-entropy with label smoothing eps: the target is
// (1 - eps) one_hot + eps / classes. Loss per image = -sum target * log softmax.
// And the same cross-entropy against a given target distribution (soft
// targets, e.g. a teacher's softmax for knowledge distillation).
#ifndef SC_KERNELS_LOSS_H
#define SC_KERNELS_LOSS_H

// For logits (N, K) and labels (N): returns the summed loss over the batch and
// the number of top-1 hits (*correct; the first maximum wins ties). When
// dlogits is not NULL it receives (softmax - target) * grad_scale, (N, K);
// pass grad_scale = 1/N for the gradient of the mean loss.
double softmax_xent_cpu(int n, int k, const float *logits, const int *labels, float smoothing,
                        float grad_scale, float *dlogits, long *correct);

// For logits (N, K) and targets soft (N, K), each row a distribution q:
// returns the summed loss -sum_j q_j log softmax_j over the batch and the
// top-1 hits against labels (N) (*correct; labels may be NULL: no hits).
// When dlogits is not NULL it receives (softmax * sum_j q_j - q) * grad_scale,
// (N, K), which is (softmax - q) * grad_scale for rows summing to 1.
double soft_xent_cpu(int n, int k, const float *logits, const float *soft, const int *labels,
                     float grad_scale, float *dlogits, long *correct);

#endif
