// Tests of kernels/augment_cpu.c: hand-computed crops, reflections and flips,
// the normalisation formula, NULL arguments, and a naive re-implementation
// (explicit padded image, crop, mirror) on random inputs of awkward shapes,
// with poisoned outputs, guard values after the buffer and 1 vs 2 threads.
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/augment.h"
#include "runtime/rng.h"
#include "tests/check.h"

static const float mean0[3] = {0, 0, 0}, std1[3] = {1, 1, 1};

// --- hand-computed cases ----------------------------------------------------

// Fills one (3, 4, 5) image with byte value c * 100 + y * 10 + x.
static void hand_image(uint8_t *img) {
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 5; x++) img[(c * 4 + y) * 5 + x] = (uint8_t)(c * 100 + y * 10 + x);
}

// Runs one 4x5 image with (dx, dy, flip) and checks every value against the
// expected source rows and columns (same for each channel).
static void hand_case(tctx *t, int dx, int dy, int flip, const int rows[4], const int cols[5]) {
    uint8_t img[60];
    float out[60];
    hand_image(img);
    int8_t ddx = (int8_t)dx, ddy = (int8_t)dy;
    uint8_t f = (uint8_t)flip;
    augment_normalize_cpu(1, 4, 5, img, &ddx, &ddy, &f, mean0, std1, out);
    int bad = 0;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 5; x++) {
                float want = (float)(c * 100 + rows[y] * 10 + cols[x]) / 255.0f;
                bad += out[(c * 4 + y) * 5 + x] != want;
            }
    CHECK(t, bad == 0, "dx %d dy %d flip %d: %d values wrong", dx, dy, flip, bad);
}

// Crop offsets with reflection at both edges, flips before the offset.
static void test_hand_crops(tctx *t) {
    const int id_r[4] = {0, 1, 2, 3}, id_c[5] = {0, 1, 2, 3, 4};
    hand_case(t, 0, 0, 0, id_r, id_c);
    hand_case(t, 1, 0, 0, id_r, (const int[5]){1, 2, 3, 4, 3});
    hand_case(t, -2, 0, 0, id_r, (const int[5]){2, 1, 0, 1, 2});
    hand_case(t, 3, 0, 0, id_r, (const int[5]){3, 4, 3, 2, 1});
    hand_case(t, 0, 0, 1, id_r, (const int[5]){4, 3, 2, 1, 0});
    hand_case(t, 1, 0, 1, id_r, (const int[5]){3, 4, 3, 2, 1});  // xf = 4 - x, then + 1
    hand_case(t, -1, 0, 1, id_r, (const int[5]){3, 2, 1, 0, 1});
    hand_case(t, 0, -1, 0, (const int[4]){1, 0, 1, 2}, id_c);
    hand_case(t, 0, 3, 0, (const int[4]){3, 2, 1, 0}, id_c);
    hand_case(t, 0, 1, 0, (const int[4]){1, 2, 3, 2}, id_c);
    hand_case(t, 2, -2, 1, (const int[4]){2, 1, 0, 1}, (const int[5]){2, 3, 4, 3, 2});
}

// (v / 255 - mean) / std per channel, in fp32.
static void test_hand_normalise(tctx *t) {
    uint8_t img[3 * 2] = {0, 255, 51, 102, 128, 7};  // (1, 3, 1, 2)
    const float mean[3] = {0.5f, 0.25f, 0.0f}, std[3] = {0.5f, 2.0f, 0.25f};
    float out[6];
    augment_normalize_cpu(1, 1, 2, img, NULL, NULL, NULL, mean, std, out);
    CHECK_CLOSE(t, out[0], -1.0, 1e-6);
    CHECK_CLOSE(t, out[1], 1.0, 1e-6);
    CHECK_CLOSE(t, out[2], (0.2 - 0.25) / 2.0, 1e-6);
    CHECK_CLOSE(t, out[3], (0.4 - 0.25) / 2.0, 1e-6);
    CHECK_CLOSE(t, out[4], (128 / 255.0) / 0.25, 1e-6);
    CHECK_CLOSE(t, out[5], (7 / 255.0) / 0.25, 1e-6);
    float want = ((float)51 / 255.0f - 0.25f) / 2.0f;
    CHECK(t, out[2] == want, "not the fp32 formula: %.9g vs %.9g", out[2], want);
}

// NULL dx/dy means no offset and NULL flip means no flip, per argument.
static void test_null_args(tctx *t) {
    uint8_t img[2 * 60];
    float a[120], b[120];
    hand_image(img);
    hand_image(img + 60);
    const int8_t zero[2] = {0, 0}, dx[2] = {1, -1}, dy[2] = {-1, 2};
    const uint8_t nof[2] = {0, 0}, fl[2] = {1, 0};
    augment_normalize_cpu(2, 4, 5, img, NULL, NULL, NULL, mean0, std1, a);
    augment_normalize_cpu(2, 4, 5, img, zero, zero, nof, mean0, std1, b);
    CHECK(t, memcmp(a, b, sizeof a) == 0, "all NULL differs from zeros");
    augment_normalize_cpu(2, 4, 5, img, dx, NULL, fl, mean0, std1, a);
    augment_normalize_cpu(2, 4, 5, img, dx, zero, fl, mean0, std1, b);
    CHECK(t, memcmp(a, b, sizeof a) == 0, "dy NULL differs from zeros");
    augment_normalize_cpu(2, 4, 5, img, NULL, dy, NULL, mean0, std1, a);
    augment_normalize_cpu(2, 4, 5, img, zero, dy, nof, mean0, std1, b);
    CHECK(t, memcmp(a, b, sizeof a) == 0, "dx/flip NULL differs from zeros");
}

// --- naive re-implementation ------------------------------------------------

// Reflects i into [0, n) once (enough for |offset| <= n - 1).
static int naive_reflect(int i, int n) { return i < 0 ? -i : i >= n ? 2 * n - 2 - i : i; }

// Pads each image by 4 (reflect), crops the window at (4 + dy, 4 + dx),
// mirrors the crop when flipped, then normalises.
static void naive_augment(int n, int h, int w, const uint8_t *img, const int8_t *dx,
                          const int8_t *dy, const uint8_t *flip, const float *mean,
                          const float *std, float *out) {
    int hp = h + 8, wp = w + 8;
    uint8_t *pad = malloc((size_t)3 * hp * wp);  // (3, h + 8, w + 8)
    for (int i = 0; i < n; i++) {
        const uint8_t *src = img + (size_t)i * 3 * h * w;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < hp; y++)
                for (int x = 0; x < wp; x++)
                    pad[(c * hp + y) * wp + x] =
                        src[(c * h + naive_reflect(y - 4, h)) * w + naive_reflect(x - 4, w)];
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    int cx = flip[i] ? w - 1 - x : x;  // mirror the cropped window
                    uint8_t v = pad[(c * hp + y + 4 + dy[i]) * wp + cx + 4 + dx[i]];
                    out[(((size_t)i * 3 + c) * h + y) * w + x] =
                        ((float)v / 255.0f - mean[c]) / std[c];
                }
    }
    free(pad);
}

// Random images of awkward shapes agree exactly with the naive version; the
// output is poisoned first and guard values after it must stay untouched.
static void test_random_vs_naive(tctx *t) {
    const int shapes[][3] = {{7, 32, 32}, {5, 5, 9},   {3, 9, 5},
                             {4, 17, 31}, {1, 6, 300}, {33, 32, 32}};
    rng r;
    rng_seed(&r, 2024, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], h = shapes[s][1], w = shapes[s][2];
        size_t count = (size_t)n * 3 * h * w;
        uint8_t *img = malloc(count), *flip = malloc((size_t)n);
        int8_t *dx = malloc((size_t)n), *dy = malloc((size_t)n);
        float *out = malloc((count + 16) * sizeof(float)), *ref = malloc(count * sizeof(float));
        for (size_t k = 0; k < count; k++) img[k] = (uint8_t)rng_below(&r, 256);
        for (int i = 0; i < n; i++) {
            dx[i] = (int8_t)((i + (int)rng_below(&r, 9)) % 9 - 4);
            dy[i] = (int8_t)((int)rng_below(&r, 9) - 4);
            flip[i] = (uint8_t)rng_below(&r, 2);
        }
        float mean[3], std[3];
        for (int c = 0; c < 3; c++) mean[c] = rng_uniform(&r), std[c] = 0.1f + rng_uniform(&r);
        for (size_t k = 0; k < count + 16; k++) out[k] = NAN;
        for (size_t k = count; k < count + 16; k++) out[k] = -12345.0f;
        augment_normalize_cpu(n, h, w, img, dx, dy, flip, mean, std, out);
        naive_augment(n, h, w, img, dx, dy, flip, mean, std, ref);
        long bad = 0, guard = 0;
        for (size_t k = 0; k < count; k++) bad += !(out[k] == ref[k]);
        for (size_t k = count; k < count + 16; k++) guard += out[k] != -12345.0f;
        CHECK(t, bad == 0, "shape (%d, 3, %d, %d): %ld of %zu values differ", n, h, w, bad, count);
        CHECK(t, guard == 0, "shape (%d, 3, %d, %d): wrote past the end", n, h, w);
        free(img), free(flip), free(dx), free(dy), free(out), free(ref);
    }
}

// The output is bit-identical with one thread and with several.
static void test_threads_deterministic(tctx *t) {
    int n = 37;
    size_t count = (size_t)n * 3072;
    uint8_t *img = malloc(count), flip[37];
    int8_t dx[37], dy[37];
    float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float));
    rng r;
    rng_seed(&r, 5, 1);
    for (size_t k = 0; k < count; k++) img[k] = (uint8_t)rng_next(&r);
    for (int i = 0; i < n; i++)
        dx[i] = (int8_t)(rng_below(&r, 9) - 4), dy[i] = (int8_t)(rng_below(&r, 9) - 4),
        flip[i] = (uint8_t)rng_below(&r, 2);
    const float mean[3] = {0.507f, 0.4865f, 0.441f}, std[3] = {0.267f, 0.256f, 0.276f};
    int old = omp_get_max_threads();
    omp_set_num_threads(1);
    augment_normalize_cpu(n, 32, 32, img, dx, dy, flip, mean, std, a);
    omp_set_num_threads(old > 1 ? old : 2);
    augment_normalize_cpu(n, 32, 32, img, dx, dy, flip, mean, std, b);
    omp_set_num_threads(old);
    CHECK(t, memcmp(a, b, count * sizeof(float)) == 0, "1 thread and %d threads differ", old);
    free(img), free(a), free(b);
}

int main(void) {
    tctx t = {.suite = "test_augment"};
    RUN(&t, test_hand_crops);
    RUN(&t, test_hand_normalise);
    RUN(&t, test_null_args);
    RUN(&t, test_random_vs_naive);
    RUN(&t, test_threads_deterministic);
    return check_finish(&t);
}
