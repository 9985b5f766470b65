// Input preprocessing: uint8 CIFAR images to normalised fp32 with random crop
// (4-pixel reflect padding) and horizontal flip.
//
// For image i, output pixel (y, x) of channel ch reads source pixel (sy, sx):
//   xf = flip[i] ? (W - 1 - x) : x
//   sy = reflect(y + dy[i]), sx = reflect(xf + dx[i])
// where reflect(-1) = 1, reflect(W) = W - 2 (no edge repeat, like numpy's
// "reflect" mode). dx/dy may be NULL (0) and flip may be NULL (no flip).
// Value = (src / 255 - mean[ch]) / std[ch].
#ifndef SC_KERNELS_AUGMENT_H
#define SC_KERNELS_AUGMENT_H

#include <stdint.h>

// img (N, 3, H, W) bytes -> out (N, 3, H, W) fp32.
void augment_normalize_cpu(int n, int h, int w, const uint8_t *img, const int8_t *dx,
                           const int8_t *dy, const uint8_t *flip, const float mean[3],
                           const float std[3], float *out);

#endif
