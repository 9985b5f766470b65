// GPU crop/flip/normalise of uint8 CIFAR images into NHWC activations with
// zero-padded channels; one thread per output pixel.
#include "kernels/augment_gpu.h"
#include "kernels/device_gpu.h"

// Reflects v into [0, n) without repeating the edge (numpy "reflect"),
// periodically, so any offset maps inside the image.
__device__ __forceinline__ int aug_reflect(int v, int n) {
    if (n == 1) return 0;
    const int period = 2 * (n - 1);
    v %= period;
    if (v < 0) v += period;
    return v < n ? v : period - v;
}

// Channel statistics as kernel arguments.
struct aug_norm {
    float mean[3], std[3];
};

// out (N, H, W, cpad) from img (N, 3, H, W).
template <typename T>
__global__ void augment_kernel(int n, int h, int w, int cpad, const uint8_t *img,
                               const int8_t *dx, const int8_t *dy, const uint8_t *flip,
                               aug_norm nm, T *out) {
    const size_t total = (size_t)n * h * w;
    SC_GRID_LOOP(pix, total) {
        const int x = (int)(pix % w), y = (int)(pix / w % h), i = (int)(pix / ((size_t)w * h));
        const int xf = (flip && flip[i]) ? w - 1 - x : x;
        const int sy = aug_reflect(y + (dy ? dy[i] : 0), h);
        const int sx = aug_reflect(xf + (dx ? dx[i] : 0), w);
        const uint8_t *src = img + (size_t)i * 3 * h * w + (size_t)sy * w + sx;
        T *dst = out + pix * cpad;
        for (int ch = 0; ch < 3; ch++) {
            const float v = (float)src[(size_t)ch * h * w] / 255.0f;  // as the CPU rounds it
            dst[ch] = sc_fromf<T>((v - nm.mean[ch]) / nm.std[ch]);
        }
        for (int ch = 3; ch < cpad; ch++) dst[ch] = sc_fromf<T>(0.0f);
    }
}

// img (N, 3, H, W) bytes -> out (N, H, W, cpad) [dt].
extern "C" int augment_normalize_gpu(const gpu_ctx *g, gpu_dtype dt, int n, int h, int w,
                                     int cpad, const uint8_t *img, const int8_t *dx,
                                     const int8_t *dy, const uint8_t *flip, const float mean[3],
                                     const float std[3], void *out, sc_err *err) {
    if (cpad < 3) return sc_fail(err, "augment: channel padding %d below 3", cpad);
    if (n <= 0) return 0;
    aug_norm nm;
    for (int c = 0; c < 3; c++) {
        if (!(std[c] > 0.0f)) return sc_fail(err, "augment: std[%d] is %g", c, std[c]);
        nm.mean[c] = mean[c];
        nm.std[c] = std[c];
    }
    const size_t total = (size_t)n * h * w;
    SC_DISPATCH(dt, augment_kernel<T><<<sc_blocks(g, total, 256), 256, 0, g->stream>>>(
                        n, h, w, cpad, img, dx, dy, flip, nm, (T *)out));
    cudaCheckLaunch(err);
    return 0;
}
