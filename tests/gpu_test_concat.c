// The GPU concat kernels (kernels/concat_gpu.h) against the CPU reference
// (kernels/concat.h) on random inputs of awkward shapes, in fp32 and fp16
// storage and in both views (NHWC as the executor uses it, NCHW): the
// forward into an output poisoned with NaN (an unwritten element fails),
// the backward overwriting a poisoned gradient and accumulating onto random
// values. Copies are exact, so the tolerance is 0 except for the fp16
// accumulation (one fp16 rounding of the sum). The executor with concats
// against the CPU one: tests/gpu_test_exec.c. Skipped without a GPU.
#include "kernels/concat.h"
#include "kernels/concat_gpu.h"
#include "tests/gpu_testutil.h"

// Forward and backward of inputs with c[k] channels, viewed as (outer, c, inner).
static void concat_case(tctx *t, gpu_dtype dt, size_t outer, size_t inner, int nin,
                        const int *c) {
    genv E, *e = &E;
    if (!genv_open(t, e, outer * 7 + inner + dt)) return;
    int ctot = 0;
    for (int k = 0; k < nin; k++) ctot += c[k];
    const size_t ny = outer * (size_t)ctot * inner;
    float *dyh = hrand(e, ny, -1, 1), *ref = hzero(ny), *got = hzero(ny);
    void *dy = dput(e, dt, ny, dyh), *y = dalloc(e, ny * gpu_dtype_size(dt));
    char what[96];
    for (int k = 0, off = 0; k < nin; off += c[k], k++) {
        const size_t nx = outer * (size_t)c[k] * inner;
        float *x = hrand(e, nx, -1, 1), *pre = hrand(e, nx, -1, 1), *rb = hzero(nx);
        float *gb = hzero(nx);
        void *dx = dput(e, dt, nx, x), *dp = dput(e, dt, nx, pre);
        void *dg = dalloc(e, nx * gpu_dtype_size(dt));
        snprintf(what, sizeof what, "concat %s (%zu, %d of %d at %d, %zu)", dtn(dt), outer, c[k],
                 ctot, off, inner);
        concat_forward_cpu(outer, c[k], inner, ctot, off, x, ref);
        GTRY(t, e, concat_forward_gpu(&e->g, dt, outer, c[k], inner, ctot, off, dx, y, &e->err));
        concat_backward_cpu(outer, c[k], inner, ctot, off, dyh, rb, 0);
        GTRY(t, e, concat_backward_gpu(&e->g, dt, outer, c[k], inner, ctot, off, dy, dg, 0,
                                       &e->err));
        dget(e, dt, nx, dg, gb);
        CHECK_REL(t, what, nx, gb, rb, 0.0);
        concat_backward_cpu(outer, c[k], inner, ctot, off, dyh, pre, 1);
        GTRY(t, e, concat_backward_gpu(&e->g, dt, outer, c[k], inner, ctot, off, dy, dp, 1,
                                       &e->err));
        dget(e, dt, nx, dp, gb);
        CHECK_REL(t, what, nx, gb, pre, dt == GDT_F16 ? 1e-3 : 0.0);
    out:
        free(x), free(pre), free(rb), free(gb);
    }
    dget(e, dt, ny, y, got);
    CHECK_REL(t, "concat forward", ny, got, ref, 0.0);
    free(dyh), free(ref), free(got);
    genv_close(e);
}

// Awkward shapes in both dtypes and views, 1 to 4 inputs.
static void test_concat(tctx *t) {
    if (!gpu_here(t)) return;
    const int c3[3] = {3, 1, 5}, c2[2] = {7, 2}, c4[4] = {1, 1, 2, 9}, c1[1] = {33};
    for (int dt = 0; dt < 2; dt++) {
        concat_case(t, (gpu_dtype)dt, 3 * 7 * 5, 1, 3, c3);
        concat_case(t, (gpu_dtype)dt, 3, 7 * 5, 3, c3);
        concat_case(t, (gpu_dtype)dt, 1, 1, 2, c2);
        concat_case(t, (gpu_dtype)dt, 2 * 9, 1, 4, c4);
        concat_case(t, (gpu_dtype)dt, 128 * 8 * 8, 1, 1, c1);
    }
}

// Runs every test; exit status 1 when one failed.
int main(void) {
    tctx t = {.suite = "gpu_test_concat"};
    RUN(&t, test_concat);
    return check_finish(&t);
}
