// The tail kernel of the block-sparse convolution (GPU builds only): a chain
// of block-sparse convs on small planes (resnet18's layer3 and layer4: 8x8
// and 4x4; vgg16's conv5-13 with their 2x2 max-pools) in one launch, one CTA per image, every activation of the chain in
// shared memory. A CTA loads its image's input once, then runs the convs one
// after the other between barriers (bias, residual add, ReLU on the
// accumulators), and stores the last output; only the weights come from
// global memory (L2) after the input. Each activation lies in shared memory
// as a plane with a ring of zeros (the padding of a 3x3 conv), 16-byte
// channel slots xor-swizzled by position. The weights are the halo kernel's
// units (kernels/bsconv_halo.h; 16-channel groups: 16x8 blocks) repacked in
// pairs for this kernel's m16n8k16 steps (bst_gpu_upload).
// Small planes are where the one-layer kernels are furthest from their
// bytes: a launch costs a whole window load, chunk by chunk, for a few
// pixels; here a layer costs its weights and its multiply.
#ifndef SC_KERNELS_BSCONV_TAIL_GPU_H
#define SC_KERNELS_BSCONV_TAIL_GPU_H

#ifdef SC_HAVE_CUDA

#include "kernels/bsconv_halo_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BST_MAX_OPS 12

// A conv's weights for the tail kernel (device): group g's unit pairs are
// [prange[g], prange[g + 1]); pair i's two units' codes (the tap's offset in
// input positions | the 8-channel slot << 8) are pcode[i], and lane l's four
// fp16x2 words of them (both units of fragment 0, then of fragment 1: the
// B operands of two m16n8k16 steps) are pvals[(i * 32 + l) * 4 ..]. A group
// with an odd count pads its last pair with the same code and zero weights.
typedef struct {
    int ngroups, npairs;
    int32_t *prange;
    int2 *pcode;
    uint32_t *pvals;
} bst_w;

// Repacks the halo weights h of layer s (16-channel groups) for the tail kernel
// on g's device (synchronised). 0 or -1.
int bst_gpu_upload(const gpu_ctx *g, const bsconv_shape *s, const bsconv_hpack *h, bst_w *w, sc_err *err);

// Frees the device arrays (a zeroed struct is fine).
void bst_gpu_free(bst_w *w);

// One conv of the chain: its geometry (s.n ignored; R = S = 1 or 3 with pad
// R / 2, stride 1 or 2, s.pool 0, 1 or 2: a 2x2 max-pool of an even plane,
// no residual then), its halo weights and bias (device, K floats, or NULL),
// and the shared-memory byte offsets of its input, its output and its
// residual (-1: none), each a plane of its own shape (the output's after the
// pool) with a ring of zeros, and with a pool of the unpooled output (pre: P
// x Q x K fp16, no ring). The output and pre must not overlap the input, the
// residual or each other; other ops may reuse a region once nothing later reads it.
typedef struct {
    bsconv_shape s;
    const bst_w *w;
    const float *bias;
    int in, out, res;
    int pre;  // s.pool == 2 only
} bst_op;

// Bytes of shared memory a plane of h x w x c (C a multiple of 64) takes with its ring.
long long bst_plane_bytes(int h, int w, int c);

// Bytes of op o's unpooled output at o->pre (P x Q x K fp16, no ring); 0 without a pool.
long long bst_pre_bytes(const bst_op *o);

// 1 when the chain can run in one CTA per image on g's device (else 0 and
// why): every op's shape, weights (16-channel groups), regions and the
// chain's shared memory; ops[0]'s input is x, the last op's output is y.
int bst_gpu_applies(const gpu_ctx *g, const bst_op *ops, int nops, char *why, int len);

// Allows the kernel the device's shared memory; 0 or -1.
int bst_gpu_prepare(const gpu_ctx *g, sc_err *err);

// Queues y (n, P, Q, K of the last op, after its pool) = the chain on x (n,
// H, W, C of the first op), fp16, one CTA per image, on g's stream.
int bst_gpu_run(const gpu_ctx *g, const bst_op *ops, int nops, int n, const void *x, void *y, sc_err *err);

#ifdef __cplusplus
}
#endif

#endif  // SC_HAVE_CUDA
#endif
