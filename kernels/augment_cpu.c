// CPU reference of the input preprocessing (kernels/augment.h): random crop
// from a reflect-padded image, horizontal flip, and per-channel normalisation
// of uint8 CIFAR images into fp32. Every output value is computed by the same
// fp32 expression, so results are bit-identical across runs and thread counts.
#include "kernels/augment.h"

#include <stddef.h>

// --- helpers ----------------------------------------------------------------

// Maps a coordinate into [0, n) by mirror reflection without edge repeat
// (numpy "reflect"): -1 -> 1, n -> n - 2.
static int augment_reflect(int i, int n) {
    if (n == 1) return 0;
    int period = 2 * (n - 1);
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - i;
}

// Fills lut[c][v] = (v / 255 - mean[c]) / std[c] in fp32, for every byte v.
static void augment_lut_fill(const float mean[3], const float std[3], float lut[3][256]) {
    for (int c = 0; c < 3; c++) {
        for (int v = 0; v < 256; v++) {
            float x = (float)v / 255.0f;
            x = x - mean[c];
            lut[c][v] = x / std[c];
        }
    }
}

// --- kernel -----------------------------------------------------------------

#define AUGMENT_CHUNK 256  // output columns whose source columns are tabled at once

// Crops, flips and normalises one image: img (3, h, w) bytes -> out (3, h, w).
static void augment_image(int h, int w, const uint8_t *img, int dx, int dy, int flip,
                          const float lut[3][256], float *out) {
    int sx[AUGMENT_CHUNK];  // source column of each output column in the chunk
    for (int x0 = 0; x0 < w; x0 += AUGMENT_CHUNK) {
        int nx = w - x0 < AUGMENT_CHUNK ? w - x0 : AUGMENT_CHUNK;
        for (int k = 0; k < nx; k++) {
            int x = x0 + k;
            sx[k] = augment_reflect((flip ? w - 1 - x : x) + dx, w);
        }
        for (int c = 0; c < 3; c++) {
            for (int y = 0; y < h; y++) {
                const uint8_t *row = img + ((size_t)c * h + augment_reflect(y + dy, h)) * w;
                float *o = out + ((size_t)c * h + y) * w + x0;
                for (int k = 0; k < nx; k++) o[k] = lut[c][row[sx[k]]];
            }
        }
    }
}

// img (N, 3, H, W) bytes -> out (N, 3, H, W) fp32; see kernels/augment.h.
void augment_normalize_cpu(int n, int h, int w, const uint8_t *img, const int8_t *dx,
                           const int8_t *dy, const uint8_t *flip, const float mean[3],
                           const float std[3], float *out) {
    if (n <= 0 || h <= 0 || w <= 0) return;
    float lut[3][256];
    augment_lut_fill(mean, std, lut);
    size_t plane = (size_t)3 * h * w;
#pragma omp parallel for schedule(static) if ((size_t)n * h * w > 32768)
    for (int i = 0; i < n; i++)
        augment_image(h, w, img + i * plane, dx ? dx[i] : 0, dy ? dy[i] : 0, flip ? flip[i] : 0,
                      (const float(*)[256])lut, out + i * plane);
}
