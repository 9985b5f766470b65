// Device helpers of the sparse conv kernels shared by spconv.cu and
// spconv_pairs.cu (CUDA sources only): fast division, element loads and
// stores, the activation and the output index.
#ifndef SC_KERNELS_SPCONV_DEV_H
#define SC_KERNELS_SPCONV_DEV_H

#include "kernels/spconv_impl.h"

// --- device helpers ---------------------------------------------------------

// x / d for x < 2^31.
__device__ __forceinline__ uint32_t spk_div(uint32_t x, spk_fdiv f) {
    return (__umulhi(x, f.mul) + x) >> f.shift;
}

// Element load widened to float (read-only path).
__device__ __forceinline__ float spk_ld(const float *p, size_t i) { return __ldg(p + i); }
__device__ __forceinline__ float spk_ld(const __half *p, size_t i) {
    return __half2float(__ldg(p + i));
}

// Element store from float (fp16 rounds to nearest).
__device__ __forceinline__ void spk_st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void spk_st(__half *p, size_t i, float v) {
    p[i] = __float2half_rn(v);
}

// half2 from its 32 raw bits.
__device__ __forceinline__ __half2 spk_h2(uint32_t b) {
    __half2 h;
    memcpy(&h, &b, 4);
    return h;
}

// Bias, codebook row scale and ReLU applied to a conv sum of row k.
__device__ __forceinline__ float spk_act(const spk_args &a, int k, float acc) {
    const float sc = a.scale ? __ldg(a.scale + k) : 1.0f;
    const float y = fmaf(acc, sc, a.bias ? __ldg(a.bias + k) : 0.0f);
    return a.relu ? fmaxf(y, 0.0f) : y;
}

// Output channel of kernel row k (rows may run in order of their length).
__device__ __forceinline__ int spk_chan(const spk_args &a, int k) {
    return a.perm ? __ldg(a.perm + k) : k;
}

// First and end record of kernel row k (ell, linear: one chunk per row).
__device__ __forceinline__ int2 spk_row_span(const spk_args &a, int k) {
    return make_int2(__ldg(a.cptr + 2 * k), __ldg(a.cptr + 2 * k + 1));
}

// Index of output element (po, qo) of plane (img, k) in the bordered output.
__device__ __forceinline__ size_t spk_out_at(const spk_args &a, int img, int k, int po, int qo) {
    const int hob = a.Po + 2 * a.ob, wob = a.Qo + 2 * a.ob;
    return (((size_t)img * a.K + k) * hob + po + a.ob) * wob + qo + a.ob;
}

#endif
