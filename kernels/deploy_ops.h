// The deploy runtime's small ops on bordered NCHW activations: every tensor
// is (n, c, h + 2 b, w + 2 b) with a border of b zeros around each plane kept
// in memory, so a following convolution reads its zero padding from memory
// (kernels/spconv.h). These ops read and write only the interiors: an output
// border is never written (the caller keeps it zero).
//
// Plain-C references here (deploy_ops_cpu.c); the CUDA versions, fp32 and
// fp16 storage, are in deploy_ops.cu with their API in deploy_ops_gpu.h.
#ifndef SC_KERNELS_DEPLOY_OPS_H
#define SC_KERNELS_DEPLOY_OPS_H

#include <stddef.h>
#include <stdint.h>

// A bordered activation tensor's geometry.
typedef struct {
    int n, c, h, w;  // images, channels, plane size without the border
    int b;           // zeros around each plane in memory
} dops_geom;

// Floats (elements) of a whole tensor, borders included.
size_t dops_geom_count(const dops_geom *g);

// Element offset of interior pixel (y, x) of plane `plane` (= image * c + channel).
size_t dops_geom_at(const dops_geom *g, size_t plane, int y, int x);

// out interior (n, 3, h, w) = (img / 255 - mean[ch]) / std[ch] for img (n, 3, h, w)
// bytes, the same fp32 expression as augment_normalize_cpu.
void dops_normalize_cpu(const dops_geom *out, const uint8_t *img, const float mean[3],
                        const float std[3], float *y);

// y = a + b (relu: then max(., 0)); all three of the same n, c, h, w.
void dops_add_cpu(const dops_geom *ga, const float *a, const dops_geom *gb, const float *b,
                  const dops_geom *gy, float *y, int relu);

// y = max(x, 0).
void dops_relu_cpu(const dops_geom *gx, const float *x, const dops_geom *gy, float *y);

// y = x * scale[ch] + shift[ch] (an unfolded inference batch norm); relu: then max(., 0).
void dops_affine_cpu(const dops_geom *gx, const float *x, const float *scale,
                     const float *shift, const dops_geom *gy, float *y, int relu);

// Max pool (k, stride, pad; padding never wins) or, avg = 1, average pool
// (padding counts as zeros, divisor k*k) from gx to gy (gy->h, gy->w the
// pooled size).
void dops_pool_cpu(const dops_geom *gx, const float *x, int k, int stride, int pad, int avg,
                   const dops_geom *gy, float *y);

// Global average pool: y (n, c, 1, 1) interior = mean over each plane of x.
void dops_gap_cpu(const dops_geom *gx, const float *x, const dops_geom *gy, float *y);

// Copies the interior of x into y (another border; used to flatten a bordered
// tensor for a linear layer).
void dops_copy_cpu(const dops_geom *gx, const float *x, const dops_geom *gy, float *y);

// Copies the interior of x's channels into y's channels [off, off + gx->c)
// (same images, height and width; each tensor with its own border): one
// input of a channel concatenation.
void dops_concat_cpu(const dops_geom *gx, const float *x, int off, const dops_geom *gy, float *y);

#endif
