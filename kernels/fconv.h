// The fused dense convolution of the channels-last engine, its geometry and
// its plain-C reference: y = act(conv(x, w) + bias [+ z]) with
// x (n, H, W, C), w (K, R, S, C), bias (K), z and y (n, P, Q, K), all dense
// fp32 here (the GPU version, kernels/fconv_gpu.h, stores fp16/bf16/fp32).
// The GPU tuner checks every cuDNN plan against this before timing it.
#ifndef SC_KERNELS_FCONV_H
#define SC_KERNELS_FCONV_H

#include <stddef.h>

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

// The same sums on magnitudes: mag = conv(|x|, |w|) + |bias| [+ |z|], no
// activation. It bounds the rounding error of any order of the sums.
void fconv_cpu_mag(const fconv_dims *d, int m, const float *x, const float *w, const float *bias,
                   const float *z, float *mag);

// The rounding a stored fused convolution may show against fconv_cpu on the
// same stored inputs, per element (N. J. Higham, "Accuracy and Stability of
// Numerical Algorithms", the dot product bound; M. Fasi, N. J. Higham,
// M. Mikaitis, S. Pranesh, "Numerical behavior of NVIDIA tensor cores":
// accumulation with truncation, hence u_acc twice the round-to-nearest unit):
//   |got - want| <= u_out |want| + (terms u_acc + u_prod) mag + tiny
typedef struct {
    double u_out;    // unit roundoff of the stored output (fp16 2^-11)
    double u_acc;    // of one addition of the sums (fp32 accumulation with truncation: 2^-23)
    double u_prod;   // of the products' inputs inside the math (TF32: 2^-10; exact products: 0)
    double tiny;     // absolute floor: the output type's subnormal spacing
    int terms;       // fconv_terms
} fconv_tol;

// Products summed per output element (R * S * C) plus the bias and residual adds.
int fconv_terms(const fconv_dims *d);

// max over n elements of |got - want| / (the bound of t at that element):
// at most 1 means within rounding; a NaN gives infinity.
double fconv_check_ratio(size_t n, const float *got, const float *want, const float *mag, const fconv_tol *t);

#endif
