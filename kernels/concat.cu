// Channel concatenation on the GPU (kernels/concat_gpu.h): one grid-stride
// loop over the input's elements, each mapped to its place in the output's
// channel slice; fp32 arithmetic when accumulating.
#include "kernels/concat_gpu.h"
#include "kernels/device_gpu.h"

// Index in the (outer, ctot, inner) tensor of element i of the (outer, c, inner) slice at off.
__device__ static inline size_t concat_index(size_t i, size_t run, size_t stride, size_t shift) {
    return (i / run) * stride + shift + i % run;
}

// y slice = x.
template <typename T>
__global__ void concat_forward_kernel(size_t n, size_t run, size_t stride, size_t shift,
                                      const T *x, T *y) {
    SC_GRID_LOOP(i, n) y[concat_index(i, run, stride, shift)] = x[i];
}

// dx (+)= dy slice.
template <typename T, bool ACC>
__global__ void concat_backward_kernel(size_t n, size_t run, size_t stride, size_t shift,
                                       const T *dy, T *dx) {
    SC_GRID_LOOP(i, n) {
        const T v = dy[concat_index(i, run, stride, shift)];
        dx[i] = ACC ? sc_fromf<T>(sc_tof(dx[i]) + sc_tof(v)) : v;
    }
}

// Copies x into its channel slice of y.
extern "C" int concat_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t outer, int c,
                                  size_t inner, int ctot, int off, const void *x, void *y,
                                  sc_err *err) {
    const size_t run = (size_t)c * inner, n = outer * run;
    if (n == 0) return 0;
    SC_DISPATCH3(dt, concat_forward_kernel<T><<<sc_blocks(g, n, 256), 256, 0, g->stream>>>(
                        n, run, (size_t)ctot * inner, (size_t)off * inner, (const T *)x, (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// dx (+)= the channel slice of dy.
extern "C" int concat_backward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t outer, int c,
                                   size_t inner, int ctot, int off, const void *dy, void *dx,
                                   int accumulate, sc_err *err) {
    const size_t run = (size_t)c * inner, n = outer * run;
    const size_t stride = (size_t)ctot * inner, shift = (size_t)off * inner;
    if (n == 0) return 0;
    const unsigned blocks = sc_blocks(g, n, 256);
    if (accumulate)
        SC_DISPATCH3(dt, concat_backward_kernel<T, true><<<blocks, 256, 0, g->stream>>>(
                            n, run, stride, shift, (const T *)dy, (T *)dx));
    else
        SC_DISPATCH3(dt, concat_backward_kernel<T, false><<<blocks, 256, 0, g->stream>>>(
                            n, run, stride, shift, (const T *)dy, (T *)dx));
    cudaCheckLaunch(err);
    return 0;
}
