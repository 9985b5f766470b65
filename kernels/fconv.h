// The fused dense convolution of the channels-last engine, its geometry and
// its plain-C reference: y = act(conv(x, w) + bias [+ z]) with
// x (n, H, W, C), w (K, R, S, C), bias (K), z and y (n, P, Q, K), all dense
// fp32 here (the GPU version, kernels/fconv_gpu.h, stores fp16/bf16/fp32).
// The GPU tuner checks every cuDNN plan against this before timing it.
#ifndef SC_KERNELS_FCONV_H
#define SC_KERNELS_FCONV_H

// What one fused convolution computes.
typedef struct {
    int n, C, H, W;       // batch, input channels, input plane
    int K, R, S;          // output channels, kernel rows and columns
    int stride, pad;      // the conv's stride and zero padding (both sides)
    int residual;         // 1: add z before the activation
    int relu;             // 1: ReLU last
} fconv_dims;

// Output plane size (P, Q).
void fconv_out(const fconv_dims *d, int *P, int *Q);

// y = act(conv(x, w) + bias [+ z]) for m images (m may be below d->n),
// summed in double; z is read only when d->residual.
void fconv_cpu(const fconv_dims *d, int m, const float *x, const float *w, const float *bias,
               const float *z, float *y);

#endif
