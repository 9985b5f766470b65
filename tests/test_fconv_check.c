// The fp16 engine's check of a cuDNN plan (kernels/fconv.h: fconv_check_ratio
// with the rounding bound of fconv_cpu_mag) on an emulated GPU result: the
// same fp16-stored inputs, products summed in fp32 with truncation in another
// order, the sum rounded to fp16. A well-conditioned layer passes and so does
// a layer whose bias cancels most of its sums (batch norm folded into an
// untrained net's weights: a large scale and a shift of the opposite sign),
// which the old check (max |y - CPU| <= 2e-3 max |CPU|) rejected for every
// plan; a value off by more than rounding is rejected in both, and a small
// output off by 1e-3 of the largest (accepted by the old check) is rejected.
#include <math.h>
#include <stdlib.h>

#include "kernels/fconv.h"
#include "runtime/half.h"
#include "tests/check.h"

// Uniform in [-1, 1) from a small LCG (deterministic per seed).
static float urand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// x rounded to fp16 and back.
static float f16(float x) { return half_to_float(half_from_float(x)); }

// a + b in fp32, rounded toward zero (tensor-core accumulation).
static float add_trunc(float a, float b) {
    const double t = (double)a + b;
    float f = (float)t;
    if (fabs((double)f) > fabs(t)) f = nextafterf(f, 0.0f);
    return f;
}

// The emulated GPU: channels summed from the last, fp32 truncating adds, then
// bias and the epilogue, the output rounded to fp16 (no residual).
static void emulate(const fconv_dims *d, const float *x, const float *w, const float *b, float *y) {
    int P, Q;
    fconv_out(d, &P, &Q);
    for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++)
            for (int k = 0; k < d->K; k++) {
                float acc = 0.0f;
                for (int c = d->C - 1; c >= 0; c--)
                    for (int r = d->R - 1; r >= 0; r--)
                        for (int s = d->S - 1; s >= 0; s--) {
                            const int h = p * d->stride - d->pad + r, v = q * d->stride - d->pad + s;
                            if (h < 0 || h >= d->H || v < 0 || v >= d->W) continue;
                            const float xv = x[((size_t)h * d->W + v) * d->C + c];
                            acc = add_trunc(acc, w[(((size_t)k * d->R + r) * d->S + s) * d->C + c] * xv);
                        }
                acc = add_trunc(acc, b[k]);
                y[((size_t)p * Q + q) * d->K + k] = f16(d->relu && acc < 0.0f ? 0.0f : acc);
            }
}

// The old criterion: max |got - want| / max |want|.
static double old_rel(size_t n, const float *got, const float *want) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)got[i] - want[i]));
        den = fmax(den, fabs((double)want[i]));
    }
    return num / den;
}

typedef struct {
    fconv_dims d;
    size_t ny;
    float *x, *w, *b, *want, *mag, *got;
    fconv_tol tol;
} layer;

// Fills a layer: fp16 inputs 0.5 +- spread, weights of scale `scale`, biases
// that cancel `cancel` of each channel's mean sum; computes the CPU's result,
// the magnitudes and the emulated GPU's result.
static int layer_make(layer *L, int C, int K, int HW, float spread, float scale, float cancel, unsigned seed) {
    L->d = (fconv_dims){.n = 1, .C = C, .H = HW, .W = HW, .K = K, .R = 3, .S = 3, .stride = 1, .pad = 1,
                        .relu = 1};
    const size_t nx = (size_t)C * HW * HW, nw = (size_t)K * 9 * C;
    L->ny = (size_t)K * HW * HW;
    L->x = malloc(nx * 4), L->w = malloc(nw * 4), L->b = malloc(K * 4);
    L->want = malloc(L->ny * 4), L->mag = malloc(L->ny * 4), L->got = malloc(L->ny * 4);
    if (!L->x || !L->w || !L->b || !L->want || !L->mag || !L->got) return -1;
    for (size_t i = 0; i < nx; i++) L->x[i] = f16(0.5f + spread * urand(&seed));
    for (size_t i = 0; i < nw; i++) L->w[i] = f16(scale * (0.02f + 0.1f * urand(&seed)));
    for (int k = 0; k < K; k++) {  // the mean sum of channel k over an interior pixel
        double m = 0.0;
        for (int i = 0; i < 9 * C; i++) m += 0.5 * L->w[(size_t)k * 9 * C + i];
        L->b[k] = f16((float)(-cancel * m) + 0.5f * urand(&seed));
    }
    fconv_cpu(&L->d, 1, L->x, L->w, L->b, NULL, L->want);
    fconv_cpu_mag(&L->d, 1, L->x, L->w, L->b, NULL, L->mag);
    emulate(&L->d, L->x, L->w, L->b, L->got);
    L->tol = (fconv_tol){.u_out = 0x1p-11, .u_acc = 0x1p-23, .tiny = 0x1p-24, .terms = fconv_terms(&L->d)};
    return 0;
}

static void layer_free(layer *L) {
    free(L->x), free(L->w), free(L->b), free(L->want), free(L->mag), free(L->got);
}

// Index of the largest |want| and of the smallest non-zero |want|.
static void extremes(const layer *L, size_t *big, size_t *small) {
    *big = *small = 0;
    for (size_t i = 0; i < L->ny; i++) {
        if (fabs(L->want[i]) > fabs(L->want[*big])) *big = i;
        if (L->want[i] != 0.0f && (L->want[*small] == 0.0f || fabs(L->want[i]) < fabs(L->want[*small]))) *small = i;
    }
}

// A well-conditioned layer (weights ~0.1, small biases): within rounding;
// planted errors rejected, one of them accepted by the old check.
static void test_plain(tctx *t) {
    layer L;
    CHECK(t, layer_make(&L, 37, 11, 9, 0.5f, 1.0f, 0.0f, 3) == 0, "out of memory");
    const double r = fconv_check_ratio(L.ny, L.got, L.want, L.mag, &L.tol);
    CHECK(t, r <= 1.0, "emulated fp16 plan off by %.3g of its bound", r);
    size_t big, small;
    extremes(&L, &big, &small);
    const float keep = L.got[big];
    L.got[big] = L.want[big] * 1.01f;  // 1% off the largest output
    CHECK(t, fconv_check_ratio(L.ny, L.got, L.want, L.mag, &L.tol) > 1.0, "1%% off the largest accepted");
    L.got[big] = keep;
    L.got[small] = L.want[small] + 1e-3f * fabsf(L.want[big]);  // the old check let this pass
    CHECK(t, old_rel(L.ny, L.got, L.want) <= 2e-3, "precondition: the old check accepts it");
    CHECK(t, fconv_check_ratio(L.ny, L.got, L.want, L.mag, &L.tol) > 1.0,
          "a small output off by 1e-3 of the largest accepted");
    L.got[small] = NAN;
    CHECK(t, isinf(fconv_check_ratio(L.ny, L.got, L.want, L.mag, &L.tol)), "NaN not rejected");
    layer_free(&L);
}

// Folded batch norm of an untrained layer: inputs of little variance (0.5 +-
// 0.01), so the folded scale is large (weights 300x) and the folded shift
// cancels the mean sum. Rounding of the sums is large against the small
// outputs: the old check fails, the bound holds; a planted error of 30x the
// rounding bound is still rejected.
static void test_cancellation(tctx *t) {
    layer L;
    CHECK(t, layer_make(&L, 128, 16, 8, 0.01f, 300.0f, 1.0f, 5) == 0, "out of memory");
    const double old = old_rel(L.ny, L.got, L.want), r = fconv_check_ratio(L.ny, L.got, L.want, L.mag, &L.tol);
    CHECK(t, old > 2e-3, "precondition: the old check rejects this layer (%.3g)", old);
    CHECK(t, r <= 1.0, "cancelling layer off by %.3g of its bound (old criterion %.3g)", r, old);
    size_t big, small;
    extremes(&L, &big, &small);
    const double bound = L.tol.u_out * fabs(L.want[big]) + L.tol.terms * L.tol.u_acc * L.mag[big];
    L.got[big] = (float)(L.want[big] + 30.0 * bound);
    CHECK(t, fconv_check_ratio(L.ny, L.got, L.want, L.mag, &L.tol) > 1.0, "30x the bound accepted");
    layer_free(&L);
}

int main(void) {
    tctx t = {.suite = "test_fconv_check"};
    RUN(&t, test_plain);
    RUN(&t, test_cancellation);
    return check_finish(&t);
}
