// GPU batch norm plans on cuDNN: NHWC through the persistent "Ex" kernels
// (in fp16 optionally fused with ReLU or add + ReLU), falling back to the
// plain spatial kernels where cuDNN refuses the persistent ones.
#include <stdlib.h>

#include "kernels/batchnorm_gpu.h"

struct bn_gpu {
    gpu_dtype dt;
    int n, c, h, w;
    bn_fuse fuse;
    int ex;                        // 1: the Ex API (persistent), 0: the plain API
    cudnnBatchNormMode_t mode;
    cudnnBatchNormOps_t ops;
    cudnnTensorDescriptor_t xd;    // (N, C, H, W) NHWC; also y, z, dy, dx, dz
    cudnnTensorDescriptor_t pd;    // (1, C, 1, 1) fp32 parameters
    cudnnActivationDescriptor_t act;
    size_t ws_fwd, ws_bwd, reserve;
};

// --- plans ------------------------------------------------------------------

// The Ex workspace and reserve sizes of a plan.
static int bn_sizes(const gpu_ctx *g, bn_gpu *b, sc_err *err) {
    const cudnnTensorDescriptor_t zd = b->fuse == BN_FUSE_ADD_RELU ? b->xd : NULL;
    const cudnnActivationDescriptor_t act = b->fuse != BN_FUSE_NONE ? b->act : NULL;
    cudnnCheck(err, cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                        g->cudnn, b->mode, b->ops, b->xd, zd, b->xd, b->pd, act, &b->ws_fwd));
    cudnnCheck(err, cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                        g->cudnn, b->mode, b->ops, b->xd, b->xd, b->xd, zd, b->xd, b->pd, act,
                        &b->ws_bwd));
    cudnnCheck(err, cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                        g->cudnn, b->mode, b->ops, act, b->xd, &b->reserve));
    return 0;
}

// Creates descriptors and queries sizes: the persistent NHWC "Ex" kernels
// when cuDNN takes the combination, else (plain BN only) the spatial ones.
static int bn_plan_init(const gpu_ctx *g, bn_gpu *b, sc_err *err) {
    const cudnnDataType_t t = b->dt == GDT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    if (b->dt != GDT_F16 && b->fuse != BN_FUSE_NONE)
        return sc_fail(err, "bn plan: fused BN needs fp16 (got fp32, fusion %d)", (int)b->fuse);
    b->ops = b->fuse == BN_FUSE_RELU       ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
             : b->fuse == BN_FUSE_ADD_RELU ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
                                           : CUDNN_BATCHNORM_OPS_BN;
    cudnnCheck(err, cudnnCreateTensorDescriptor(&b->xd));
    cudnnCheck(err, cudnnCreateTensorDescriptor(&b->pd));
    cudnnCheck(err, cudnnCreateActivationDescriptor(&b->act));
    cudnnCheck(err, cudnnSetTensor4dDescriptor(b->xd, CUDNN_TENSOR_NHWC, t, b->n, b->c, b->h, b->w));
    cudnnCheck(err, cudnnSetActivationDescriptor(b->act, CUDNN_ACTIVATION_RELU,
                                                 CUDNN_NOT_PROPAGATE_NAN, 0.0));
    b->ex = 1;
    b->mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    cudnnCheck(err, cudnnDeriveBNTensorDescriptor(b->pd, b->xd, b->mode));
    if (bn_sizes(g, b, err) == 0) return 0;
    if (b->fuse != BN_FUSE_NONE) return -1;
    b->ex = 0;
    b->mode = CUDNN_BATCHNORM_SPATIAL;
    b->ws_fwd = b->ws_bwd = b->reserve = 0;
    cudnnCheck(err, cudnnDeriveBNTensorDescriptor(b->pd, b->xd, b->mode));
    return 0;
}

// Plans a BN over x (N, H, W, C).
extern "C" bn_gpu *bn_gpu_create(const gpu_ctx *g, gpu_dtype dt, int n, int c, int h, int w,
                                 bn_fuse fuse, sc_err *err) {
    bn_gpu *b = (bn_gpu *)calloc(1, sizeof *b);
    if (!b) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    b->dt = dt, b->n = n, b->c = c, b->h = h, b->w = w, b->fuse = fuse;
    if (bn_plan_init(g, b, err)) {
        bn_gpu_free(b);
        return NULL;
    }
    return b;
}

// Frees a plan (NULL is fine).
extern "C" void bn_gpu_free(bn_gpu *b) {
    if (!b) return;
    if (b->xd) cudnnDestroyTensorDescriptor(b->xd);
    if (b->pd) cudnnDestroyTensorDescriptor(b->pd);
    if (b->act) cudnnDestroyActivationDescriptor(b->act);
    free(b);
}

// Shared scratch bytes.
extern "C" size_t bn_gpu_workspace(const bn_gpu *b) {
    return b->ws_fwd > b->ws_bwd ? b->ws_fwd : b->ws_bwd;
}

// Bytes kept from forward to backward.
extern "C" size_t bn_gpu_reserve(const bn_gpu *b) { return b->reserve; }

// --- running ----------------------------------------------------------------

// Training forward with batch statistics.
extern "C" int bn_gpu_forward_train(const gpu_ctx *g, const bn_gpu *b, const void *x,
                                    const void *z, void *y, const float *gamma,
                                    const float *beta, float eps, float momentum,
                                    float *running_mean, float *running_var, float *save_mean,
                                    float *save_invstd, void *ws, void *reserve, sc_err *err) {
    const float one = 1.0f, zero = 0.0f;
    if (!b->ex) {
        cudnnCheck(err, cudnnBatchNormalizationForwardTraining(
                            g->cudnn, b->mode, &one, &zero, b->xd, x, b->xd, y, b->pd, gamma,
                            beta, (double)momentum, running_mean, running_var, (double)eps,
                            save_mean, save_invstd));
        return 0;
    }
    const int add = b->fuse == BN_FUSE_ADD_RELU;
    cudnnCheck(err, cudnnBatchNormalizationForwardTrainingEx(
                        g->cudnn, b->mode, b->ops, &one, &zero, b->xd, x, add ? b->xd : NULL,
                        add ? z : NULL, b->xd, y, b->pd, gamma, beta, (double)momentum,
                        running_mean, running_var, (double)eps, save_mean, save_invstd,
                        b->fuse != BN_FUSE_NONE ? b->act : NULL, ws, b->ws_fwd, reserve,
                        b->reserve));
    return 0;
}

// Inference forward with the running statistics.
extern "C" int bn_gpu_forward_infer(const gpu_ctx *g, const bn_gpu *b, const void *x, void *y,
                                    const float *gamma, const float *beta,
                                    const float *running_mean, const float *running_var,
                                    float eps, sc_err *err) {
    const float one = 1.0f, zero = 0.0f;
    cudnnCheck(err, cudnnBatchNormalizationForwardInference(
                        g->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, b->xd, x, b->xd, y,
                        b->pd, gamma, beta, running_mean, running_var, (double)eps));
    return 0;
}

// Backward of the training forward.
extern "C" int bn_gpu_backward(const gpu_ctx *g, const bn_gpu *b, const void *x, const void *y,
                               const void *dy, void *dz, void *dx, const float *gamma,
                               const float *beta, float *dgamma, float *dbeta, float eps,
                               const float *save_mean, const float *save_invstd, void *ws,
                               void *reserve, sc_err *err) {
    const float one = 1.0f, zero = 0.0f;
    if (!b->ex) {
        cudnnCheck(err, cudnnBatchNormalizationBackward(
                            g->cudnn, b->mode, &one, &zero, &one, &zero, b->xd, x, b->xd, dy,
                            b->xd, dx, b->pd, gamma, dgamma, dbeta, (double)eps, save_mean,
                            save_invstd));
        return 0;
    }
    const int add = b->fuse == BN_FUSE_ADD_RELU, act = b->fuse != BN_FUSE_NONE;
    cudnnCheck(err, cudnnBatchNormalizationBackwardEx(
                        g->cudnn, b->mode, b->ops, &one, &zero, &one, &zero, b->xd, x,
                        act ? b->xd : NULL, act ? y : NULL, b->xd, dy, add ? b->xd : NULL,
                        add ? dz : NULL, b->xd, dx, b->pd, gamma, beta, dgamma, dbeta,
                        (double)eps, save_mean, save_invstd, act ? b->act : NULL, ws,
                        b->ws_bwd, reserve, b->reserve));
    return 0;
}
