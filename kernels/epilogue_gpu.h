// The one bias + ReLU + max-pool epilogue of the GPU conv paths (CUDA
// sources only): cuDNN dense (kernels/dconv.cu, pooled or in place),
// cuSPARSE (kernels/spconv_cusparse.cu) and the plain sparse kernel
// (kernels/spconv.cu) all write their bordered NCHW output through it.
#ifndef SC_KERNELS_EPILOGUE_GPU_H
#define SC_KERNELS_EPILOGUE_GPU_H

#if defined(SC_HAVE_CUDA) && defined(__CUDACC__)

#include <math.h>

#include "kernels/device_gpu.h"

// Geometry of an epilogue: n images of K conv planes of P x Q, pooled to
// po x qo (pk 0: no pool, po = P, qo = Q) into an output with a border of ob.
struct sc_epi {
    int n, K, P, Q, po, qo, ob;
    const float *bias;  // (K) or NULL
    int relu, pk, ps, pp;
};

// Index of output element (i, k, y, x) in the bordered (n, K, po + 2 ob, qo + 2 ob) output.
__device__ __forceinline__ size_t sc_epi_out_at(const sc_epi &e, int i, int k, int y, int x) {
    return (((size_t)i * e.K + k) * (e.po + 2 * e.ob) + y + e.ob) * (e.qo + 2 * e.ob) + x + e.ob;
}

// Output (i, k, y, x) = max over its pool window of act(conv(i, k, p, q) +
// bias[k]) (no pool: the element itself; 0 when the window holds no conv pixel).
template <typename F>
__device__ __forceinline__ float sc_epi_value(const sc_epi &e, int i, int k, int y, int x, F conv) {
    const int w = e.pk > 0 ? e.pk : 1;
    const int p0 = e.pk > 0 ? y * e.ps - e.pp : y, q0 = e.pk > 0 ? x * e.ps - e.pp : x;
    const float b = e.bias ? __ldg(e.bias + k) : 0.0f;
    float m = -INFINITY;
    for (int a = 0; a < w; a++)
        for (int c = 0; c < w; c++) {
            const int p = p0 + a, q = q0 + c;
            if (p < 0 || p >= e.P || q < 0 || q >= e.Q) continue;
            const float v = conv(i, k, p, q) + b;
            m = fmaxf(m, e.relu ? fmaxf(v, 0.0f) : v);
        }
    return m == -INFINITY ? 0.0f : m;
}

// Writes every interior output element (grid-stride loop): out[...] =
// sc_epi_value(conv). conv(i, k, p, q) returns the raw conv value as float.
template <typename T, typename F>
__device__ __forceinline__ void sc_epi_run(const sc_epi &e, T *out, F conv) {
    const size_t total = (size_t)e.n * e.K * e.po * e.qo;
    SC_GRID_LOOP(idx, total) {
        const int x = (int)(idx % e.qo), y = (int)(idx / e.qo % e.po);
        const size_t pl = idx / ((size_t)e.qo * e.po);
        const int k = (int)(pl % e.K), i = (int)(pl / e.K);
        const float v = sc_epi_value(e, i, k, y, x, conv);
        out[sc_epi_out_at(e, i, k, y, x)] = sc_fromf<T>(v);
    }
}

#endif
#endif
