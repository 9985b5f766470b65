// GPU elementwise ops: ReLU forward/backward, residual add (+ReLU), gradient
// routing, per-channel bias forward/backward. fp32 or fp16 storage, fp32
// arithmetic; 16-byte packs when pointers and sizes allow.
#include "kernels/activation_gpu.h"
#include "kernels/device_gpu.h"

// --- the elementwise engine -------------------------------------------------

// y[i] = f(a[i], b[i], y[i]) over n elements, VEC at a time. Op provides
// `float operator()(float a, float b, float old)`; READ_OLD says whether the
// old destination value is loaded (accumulate) or not (overwrite).
template <typename T, int VEC, bool READ_OLD, typename Op>
__global__ void ew_kernel(size_t n, const T *a, const T *b, T *y, Op op) {
    const size_t packs = n / VEC;
    SC_GRID_LOOP(p, packs) {
        sc_pack<T> pa, pb, py;
        if constexpr (VEC > 1) {
            pa.raw = ((const uint4 *)a)[p];
            if (b) pb.raw = ((const uint4 *)b)[p];
            if (READ_OLD) py.raw = ((const uint4 *)y)[p];
        }
#pragma unroll
        for (int v = 0; v < VEC; v++) {
            const size_t i = p * VEC + v;
            const float av = VEC > 1 ? sc_tof(pa.v[v]) : sc_tof(a[i]);
            const float bv = b ? (VEC > 1 ? sc_tof(pb.v[v]) : sc_tof(b[i])) : 0.0f;
            const float ov = READ_OLD ? (VEC > 1 ? sc_tof(py.v[v]) : sc_tof(y[i])) : 0.0f;
            const T r = sc_fromf<T>(op(av, bv, ov));
            if (VEC > 1) py.v[v] = r;
            else y[i] = r;
        }
        if constexpr (VEC > 1) ((uint4 *)y)[p] = py.raw;
    }
}

// Launches ew_kernel with packs when possible.
template <typename T, bool READ_OLD, typename Op>
static int ew_launch(const gpu_ctx *g, size_t n, const void *a, const void *b, void *y, Op op,
                     sc_err *err) {
    if (n == 0) return 0;
    constexpr int VEC = 16 / sizeof(T);
    const int th = 256;
    if (sc_can_vec(n, VEC, a, b, y))
        ew_kernel<T, VEC, READ_OLD><<<sc_blocks(g, n / VEC, th), th, 0, g->stream>>>(
            n, (const T *)a, (const T *)b, (T *)y, op);
    else
        ew_kernel<T, 1, READ_OLD><<<sc_blocks(g, n, th), th, 0, g->stream>>>(
            n, (const T *)a, (const T *)b, (T *)y, op);
    cudaCheckLaunch(err);
    return 0;
}

// --- ops --------------------------------------------------------------------

// The per-element functions of the ops below (a, b: inputs; old: destination).
struct op_relu {
    __device__ float operator()(float a, float, float) const { return a > 0.0f ? a : 0.0f; }
};
struct op_relu_bwd {  // a = y, b = dy
    __device__ float operator()(float a, float b, float old) const {
        return old + (a > 0.0f ? b : 0.0f);
    }
};
struct op_add {
    int relu;
    __device__ float operator()(float a, float b, float) const {
        const float s = a + b;
        return relu && s < 0.0f ? 0.0f : s;
    }
};
struct op_acc {
    __device__ float operator()(float a, float, float old) const { return old + a; }
};

// y = max(x, 0).
extern "C" int relu_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *x,
                                void *y, sc_err *err) {
    SC_DISPATCH(dt, return ew_launch<T, false>(g, n, x, nullptr, y, op_relu{}, err));
    return 0;
}

// dx (+)= dy where y > 0.
extern "C" int relu_backward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *y,
                                 const void *dy, void *dx, int accumulate, sc_err *err) {
    if (accumulate) SC_DISPATCH(dt, return ew_launch<T, true>(g, n, y, dy, dx, op_relu_bwd{}, err));
    SC_DISPATCH(dt, return ew_launch<T, false>(g, n, y, dy, dx, op_relu_bwd{}, err));
    return 0;
}

// y = a + b (then ReLU).
extern "C" int add_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *a,
                               const void *b, void *y, int relu, sc_err *err) {
    SC_DISPATCH(dt, return ew_launch<T, false>(g, n, a, b, y, op_add{relu}, err));
    return 0;
}

// acc (+)= x.
extern "C" int accumulate_gpu(const gpu_ctx *g, gpu_dtype dt, size_t n, const void *x,
                              void *acc, int accumulate, sc_err *err) {
    if (accumulate) SC_DISPATCH(dt, return ew_launch<T, true>(g, n, x, nullptr, acc, op_acc{}, err));
    SC_DISPATCH(dt, return ew_launch<T, false>(g, n, x, nullptr, acc, op_acc{}, err));
    return 0;
}

// --- bias -------------------------------------------------------------------

// y (rows, C) += bias (C).
template <typename T>
__global__ void bias_forward_kernel(size_t rows, int c, const float *bias, T *y) {
    SC_GRID_LOOP(i, rows * (size_t)c) y[i] = sc_fromf<T>(sc_tof(y[i]) + bias[i % c]);
}

// db (C) += column sums of a chunk of rows of dy; blockDim (32, 8), one
// column per x-lane, grid (ceil(C / 32), row chunks).
template <typename T>
__global__ void bias_backward_kernel(size_t rows, int c, const T *dy, float *db) {
    __shared__ float part[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (col < c)
        for (size_t r = (size_t)blockIdx.y * 8 + threadIdx.y; r < rows; r += (size_t)gridDim.y * 8)
            s += sc_tof(dy[r * c + col]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < c) {
        for (int k = 1; k < 8; k++) s += part[k][threadIdx.x];
        atomicAdd(&db[col], s);
    }
}

// y (rows, C) [dt] += bias (C).
extern "C" int bias_forward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t rows, int c,
                                const float *bias, void *y, sc_err *err) {
    const size_t n = rows * (size_t)c;
    if (n == 0) return 0;
    SC_DISPATCH(dt, bias_forward_kernel<T><<<sc_blocks(g, n, 256), 256, 0, g->stream>>>(
                        rows, c, bias, (T *)y));
    cudaCheckLaunch(err);
    return 0;
}

// db (C) = column sums of dy (rows, C) [dt].
extern "C" int bias_backward_gpu(const gpu_ctx *g, gpu_dtype dt, size_t rows, int c,
                                 const void *dy, float *db, sc_err *err) {
    cudaCheck(err, cudaMemsetAsync(db, 0, (size_t)c * sizeof(float), g->stream));
    if (rows == 0) return 0;
    const unsigned gx = (unsigned)((c + 31) / 32);
    size_t gy = (rows + 255) / 256;
    const size_t cap = ((size_t)g->dev.sms * 8 + gx - 1) / gx;
    if (gy > cap) gy = cap;
    if (gy < 1) gy = 1;
    SC_DISPATCH(dt, bias_backward_kernel<T><<<dim3(gx, (unsigned)gy), dim3(32, 8), 0,
                                              g->stream>>>(rows, c, (const T *)dy, db));
    cudaCheckLaunch(err);
    return 0;
}
