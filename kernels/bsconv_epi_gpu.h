// The register epilogue of the tensor-core block-sparse convolutions (CUDA
// sources only): the halo, direct and vector kernels (kernels/bsconv_halo.cu,
// kernels/bsconv_direct.cu, kernels/bsconv_vec.cu) leave their sums in m16n8
// accumulator fragments, rows = output pixels, columns = output channels, and
// write them through these functions. A is the kernel's argument struct: it
// must have z, y (device pointers of element type T), bias, K and relu.
// (C++ only: tests/halo_emu.sh also builds it as host code.)
#ifndef SC_KERNELS_BSCONV_EPI_GPU_H
#define SC_KERNELS_BSCONV_EPI_GPU_H

#if defined(SC_HAVE_CUDA) && defined(__cplusplus)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// Stores two floats at p as 16-bit values.
__device__ __forceinline__ void bsh_st2(__half *p, float u, float v) { *(__half2 *)p = __floats2half2_rn(u, v); }
__device__ __forceinline__ void bsh_st2(__nv_bfloat16 *p, float u, float v) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(u, v);
}

// Two 16-bit values packed in u as floats.
template <typename T> __device__ __forceinline__ float2 bsh_unpack2(uint32_t u);
template <> __device__ __forceinline__ float2 bsh_unpack2<__half>(uint32_t u) {
    return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}
template <> __device__ __forceinline__ float2 bsh_unpack2<__nv_bfloat16>(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}

// Adds the residual z to the warp's accumulators before anything is stored,
// with every load issued before the first is used: out-of-range rows and
// channels load z[0] and add 0, so no branch splits the loads.
template <typename T, int MF, int NF, typename A>
__device__ __forceinline__ void bsh_add_residual(const A &a, const int *out, int k, int nk, int lane,
                                                 float (*acc)[NF][4]) {
    static_assert(MF * 2 * NF <= 64, "one bit per residual load");
    const uint32_t *z = (const uint32_t *)a.z;
    uint32_t zr[MF][2][NF];
    unsigned long long ok = 0;
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int pix = out[mf * 16 + (lane >> 2) + h * 8];
#pragma unroll
            for (int f = 0; f < NF; f++) {
                const bool in = pix >= 0 && f * 8 < nk;
                zr[mf][h][f] = __ldg(z + (in ? ((size_t)pix * a.K + k + f * 8) >> 1 : 0));
                ok |= (unsigned long long)in << ((mf * 2 + h) * NF + f);
            }
        }
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int f = 0; f < NF; f++) {
                if (!(ok >> ((mf * 2 + h) * NF + f) & 1)) continue;
                const float2 zz = bsh_unpack2<T>(zr[mf][h][f]);
                acc[mf][f][h * 2] += zz.x, acc[mf][f][h * 2 + 1] += zz.y;
            }
}

// The bias of channels k + f * 8 + {0, 1} for the warp's fragments f (zeros
// without a bias, and for f * 8 >= nk).
template <int NF, typename A>
__device__ __forceinline__ void bsh_bias(const A &a, int k, int nk, float2 *bias) {
#pragma unroll
    for (int f = 0; f < NF; f++)
        bias[f] = a.bias && f * 8 < nk ? make_float2(__ldg(a.bias + k + f * 8), __ldg(a.bias + k + f * 8 + 1))
                                       : make_float2(0.0f, 0.0f);
}

// Calls piece(i, p) for every 16-byte piece p < pieces of the staged rows
// i < rows, spread over the CTA's threads: where pieces divides the CTA, a
// thread keeps one piece index and steps rows (no division per piece).
template <typename F> __device__ __forceinline__ void bsh_for_pieces(int rows, int pieces, F piece) {
    if (blockDim.x % pieces == 0) {
        const int p = threadIdx.x % pieces, step = blockDim.x / pieces;
        for (int i = threadIdx.x / pieces; i < rows; i += step) piece(i, p);
    } else {
        for (int q = threadIdx.x; q < rows * pieces; q += blockDim.x) {
            const int i = q / pieces;
            piece(i, q - i * pieces);
        }
    }
}

// Writes the warp's accumulators of the group of nk channels from k0:
// fragment (mf, f) holds rows mf * 16 + lane / 4 (+ 8) and channels k0 + f *
// 8 + 2 (lane % 4) + {0, 1}; the bias
// is read once per channel pair and the y pixel once per row. With POOL,
// the max over each window's 4 rows (lanes 4 and 8 apart) is stored by its
// first lane.
template <typename T, int MF, int NF, bool POOL, typename A>
__device__ __forceinline__ void bsh_epilogue(const A &a, const int *out, int k0, int nk, int lane,
                                             float (*acc)[NF][4]) {
    const int k = k0 + (lane & 3) * 2;
    float2 bias[NF];
    bsh_bias<NF>(a, k, nk, bias);
    if (!POOL && a.z) bsh_add_residual<T, MF, NF>(a, out, k, nk, lane, acc);
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int pix = out[mf * 16 + (lane >> 2) + h * 8];
            const long long o = (long long)pix * a.K + k;
#pragma unroll
            for (int f = 0; f < NF; f++) {
                if (f * 8 >= nk) break;  // nk is a multiple of 8: the same for the whole warp
                float v0 = acc[mf][f][h * 2] + bias[f].x, v1 = acc[mf][f][h * 2 + 1] + bias[f].y;
                if (a.relu) v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
                if (POOL) {
#pragma unroll
                    for (int off = 4; off <= 8; off <<= 1) {
                        v0 = fmaxf(v0, __shfl_xor_sync(0xffffffffu, v0, off));
                        v1 = fmaxf(v1, __shfl_xor_sync(0xffffffffu, v1, off));
                    }
                    if ((lane >> 2 & 3) != 0) continue;
                }
                if (pix >= 0) bsh_st2((T *)a.y + o + f * 8, v0, v1);
            }
        }
}

#endif  // SC_HAVE_CUDA && __cplusplus
#endif
