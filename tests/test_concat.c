// Tests of the concat layer kind (runtime/op_concat.c, kernels/concat.h):
// the CPU kernels against a direct index loop on awkward shapes in both
// tensor views (NCHW and NHWC), every output element written (poisoned
// buffers) and nothing past the end; the parser's shapes, inputs and
// errors; a DenseNet-style net overfitting one batch of random images
// through the CPU executor. The whole-net gradient check of a net with
// concats is in tests/test_exec_cpu.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/concat.h"
#include "runtime/exec.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "tests/check.h"
#include "tests/testutil.h"

// Forward: inputs of c[k] channels written into y (outer, ctot, inner), then
// each element compared with x_k[(o * c + ch) * inner + s]; backward: every
// input's slice read back (overwrite, then accumulate onto random values).
static void kernel_case(tctx *t, size_t outer, size_t inner, int nin, const int *c) {
    rng g;
    rng_seed(&g, outer * 31 + inner, 7);
    size_t cz = 0;
    for (int k = 0; k < nin; k++) cz += (size_t)c[k];
    const int ctot = (int)cz;
    const size_t ny = outer * cz * inner;
    float *dy = calloc(ny, sizeof *dy), *y = alloc_poisoned(ny);
    fill_uniform(&g, dy, ny, -1, 1);
    float *x[4];
    for (int k = 0, off = 0; k < nin; off += c[k], k++) {
        const size_t nx = outer * (size_t)c[k] * inner;
        x[k] = calloc(nx, sizeof *x[k]);
        fill_uniform(&g, x[k], nx, -1, 1);
        concat_forward_cpu(outer, c[k], inner, ctot, off, x[k], y);
    }
    CHECK(t, guard_ok(y, ny), "forward wrote past the output (%zu, %d, %zu)", outer, ctot, inner);
    size_t bad = 0, badb = 0;
    for (int k = 0, off = 0; k < nin; off += c[k], k++) {
        const size_t nx = outer * (size_t)c[k] * inner;
        float *pre = calloc(nx, sizeof *pre), *dx = alloc_poisoned(nx);
        concat_backward_cpu(outer, c[k], inner, ctot, off, dy, dx, 0);
        fill_uniform(&g, pre, nx, -1, 1);
        float *acc = calloc(nx, sizeof *acc);
        memcpy(acc, pre, nx * sizeof *acc);
        concat_backward_cpu(outer, c[k], inner, ctot, off, dy, acc, 1);
        for (size_t o = 0; o < outer; o++)
            for (int ch = 0; ch < c[k]; ch++)
                for (size_t s = 0; s < inner; s++) {
                    const size_t i = (o * c[k] + ch) * inner + s;
                    const size_t j = (o * ctot + off + ch) * inner + s;
                    bad += memcmp(&y[j], &x[k][i], sizeof(float)) != 0;
                    badb += dx[i] != dy[j] || acc[i] != pre[i] + dy[j];
                }
        CHECK(t, guard_ok(dx, nx), "backward wrote past input %d", k);
        free(dx), free(pre), free(acc), free(x[k]);
    }
    CHECK(t, bad == 0, "forward: %zu of %zu elements wrong or unwritten", bad, ny);
    CHECK(t, badb == 0, "backward: %zu elements wrong", badb);
    free(y), free(dy);
}

// Awkward shapes: NCHW (n, c, h*w) and NHWC (n*h*w, c, 1), 1 to 4 inputs.
static void test_kernels(tctx *t) {
    const int c3[3] = {3, 1, 5}, c2[2] = {7, 2}, c1[1] = {4}, c4[4] = {1, 1, 2, 9};
    kernel_case(t, 3, 7 * 5, 3, c3);
    kernel_case(t, 3 * 7 * 5, 1, 3, c3);
    kernel_case(t, 1, 1, 2, c2);
    kernel_case(t, 5, 13, 1, c1);
    kernel_case(t, 2 * 9, 1, 4, c4);
}

// Builds a net from a description for (3, 8, 8) input and 5 classes.
static net *cnet(const char *desc, sc_err *err) { return net_from_desc("t", desc, 3, 8, 8, 5, err); }

// Shapes and inputs: channels summed in order, the first input from= or the
// previous layer, "input" as a name, a layer named twice; no tensors.
static void test_parse(tctx *t) {
    sc_err err = {0};
    net *nt = cnet("conv 4 3 pad=1 name=a\n"
                   "conv 6 1 name=b\n"
                   "concat a input a name=j\n"
                   "conv 2 1 from=a\n"
                   "concat j from=b name=k\n"
                   "gap\nlinear classes\n", &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return;
    const layer *J = &nt->layers[2], *K = &nt->layers[4];
    CHECK(t, J->kind == LK_CONCAT && J->c == 6 + 4 + 3 + 4 && J->h == 8 && J->w == 8,
          "j: kind %d shape %dx%dx%d", J->kind, J->c, J->h, J->w);
    CHECK(t, J->nsrc == 4 && J->src == 1 && J->srcs[0] == 1 && J->srcs[1] == 0 &&
          J->srcs[2] == -1 && J->srcs[3] == 0, "j inputs");
    CHECK(t, K->nsrc == 2 && K->src == 1 && K->srcs[1] == 2 && K->c == 6 + 17, "k inputs/shape");
    CHECK(t, layer_reads(J, 0) == 2 && layer_reads(J, -1) == 1, "layer_reads");
    int own = 0;
    for (int i = 0; i < nt->ntensors; i++) own += nt->tensors[i].layer == 2 || nt->tensors[i].layer == 4;
    CHECK(t, own == 0, "concat owns %d tensors", own);
    net_free(nt);
}

// Errors name the line and the problem.
static void test_parse_errors(tctx *t) {
    const struct { const char *desc, *want; } cases[] = {
        {"conv 4 3 name=a\nconcat\ngap\nlinear classes\n", "line 2: concat needs"},
        {"conv 4 3 name=a\nconcat zz\ngap\nlinear classes\n", "no layer called zz"},
        {"conv 4 3 name=a\nconcat input\ngap\nlinear classes\n", "input 6x6"},
        {"conv 4 3 name=a\nconcat a bias=0\ngap\nlinear classes\n", "unknown option bias="},
        {"conv 4 3 name=a\nconcat a a a a a\ngap\nlinear classes\n", "too many values"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sc_err err = {0};
        net *nt = cnet(cases[i].desc, &err);
        CHECK(t, nt == NULL && strstr(err.msg, cases[i].want), "case %zu: got \"%s\"", i,
              nt ? "(built)" : err.msg);
        net_free(nt);
    }
}

// A DenseNet-style net (each block joins its input with a new conv's output)
// overfits one batch: the loss falls below a fifth of its start.
static void test_overfit(tctx *t) {
    sc_err err = {0};
    net *nt = cnet("conv 6 3 pad=1 name=c0\nrelu name=r0\n"
                   "conv 4 3 pad=1\nrelu\nconcat r0 name=d1\n"
                   "conv 4 3 pad=1\nrelu\nconcat d1\n"
                   "maxpool 2\ngap\nlinear classes\n", &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return;
    rng g;
    rng_seed(&g, 9, 0);
    net_init_weights(nt, &g);
    exec *e = exec_create(nt, DEV_CPU, PREC_FP32, 8, &err);
    CHECK(t, e != NULL, "%s", err.msg);
    tbatch tb;
    tbatch_make(&tb, 8, 8, 8, 5, 9, 1, 1, 0);
    exec_hparams h = {.lr = 0.05f, .momentum = 0.9f};
    exec_stats st;
    double first = 0, last = 0;
    for (int s = 0; e && s < 60; s++) {
        CHECK(t, exec_train_step(e, &tb.b, &h, &err) == 0, "%s", err.msg);
        exec_stats_take(e, &st, &err);
        last = st.loss_sum / st.count;
        if (s == 0) first = last;
    }
    CHECK(t, isfinite(last) && last < first / 5, "loss %.4f -> %.4f", first, last);
    tbatch_free(&tb);
    exec_free(e);
    net_free(nt);
}

// Runs every test; exit status 1 when one failed.
int main(void) {
    tctx t = {.suite = "test_concat"};
    RUN(&t, test_kernels);
    RUN(&t, test_parse);
    RUN(&t, test_parse_errors);
    RUN(&t, test_overfit);
    return check_finish(&t);
}
