// Spatial batch normalisation over (N, C, HW) fp32, NCHW. Running statistics
// follow PyTorch: r = (1 - momentum) r + momentum batch, with the unbiased
// batch variance for the running var and the biased one for normalising.
#ifndef SC_KERNELS_BATCHNORM_H
#define SC_KERNELS_BATCHNORM_H

// Training-mode forward. save_mean/save_invstd (C) keep the batch mean and
// 1/sqrt(var + eps) for the backward pass.
void batchnorm_forward_train_cpu(int n, int c, int hw, const float *x, const float *gamma,
                                 const float *beta, float eps, float momentum,
                                 float *running_mean, float *running_var, float *y,
                                 float *save_mean, float *save_invstd);

// Inference-mode forward with the running statistics.
void batchnorm_forward_infer_cpu(int n, int c, int hw, const float *x, const float *gamma,
                                 const float *beta, const float *running_mean,
                                 const float *running_var, float eps, float *y);

// Backward of the training-mode forward: dx overwritten, dgamma and dbeta (C)
// overwritten.
void batchnorm_backward_cpu(int n, int c, int hw, const float *x, const float *dy,
                            const float *gamma, const float *save_mean,
                            const float *save_invstd, float *dx, float *dgamma, float *dbeta);

#endif
