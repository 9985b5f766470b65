// Seed 001's Algorithm 2 on the GPU (runtime/deploy_gpu.h): for one batch
// size, fill every tensor with real activations, let candidates tune
// themselves, check every candidate of every op (and every small op)
// against the CPU reference with poisoned outputs, refill the tensors
// through checked implementations, time what passed on the op's real
// input, and run each op with the fastest.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/median.h"
#include "runtime/deploy_gpu_impl.h"

// Tolerances of the small ops (add, pools, ...): fp32 arithmetic in both,
// so only the summation order of the pools differs.
#define TUNE_TOL_SMALL32 1e-5
#define TUNE_TOL_SMALL16 1e-2
// Shortest stretch of work one timed replay covers (milliseconds).
#define TUNE_MIN_MS 0.05

// --- moving reference data ----------------------------------------------------

// The candidate state of op i, candidate c.
static deploy_inst *tune_inst(deploy_gpu *g, int i, int c) {
    return &g->inst[(size_t)i * g->ncand + c];
}

// Copies the first nref images of the CPU reference's tensor t into the
// plan's tensor t, converted to the plan's precision.
static int tune_upload(deploy_gpu *g, deploy_cpu *ref, int t, int nref, sc_err *err) {
    const size_t n = (size_t)nref * deploy_tensor_elems(g->p, t);
    const float *h = deploy_cpu_tensor(ref, t);
    if (g->dt == GDT_F32) {
        cudaCheck(err, cudaMemcpyAsync(g->t[t], h, n * sizeof *h, cudaMemcpyHostToDevice, g->g.stream));
        return 0;
    }
    cudaCheck(err, cudaMemcpyAsync(g->staging, h, n * sizeof *h, cudaMemcpyHostToDevice, g->g.stream));
    return gpu_convert(&g->g, n, GDT_F32, g->staging, GDT_F16, g->t[t], err);
}

// Copies n elements of a device buffer in the plan's precision to host floats.
static int tune_download(deploy_gpu *g, const void *dev, size_t n, float *host, sc_err *err) {
    const void *src = dev;
    if (g->dt == GDT_F16) {
        SC_TRY(gpu_convert(&g->g, n, GDT_F16, dev, GDT_F32, g->staging, err));
        src = g->staging;
    }
    cudaCheck(err, cudaMemcpyAsync(host, src, n * sizeof *host, cudaMemcpyDeviceToHost, g->g.stream));
    cudaCheck(err, cudaStreamSynchronize(g->g.stream));
    return 0;
}

// max |got - want| / max |want| over the interiors of the first nref images
// of op i's output; infinite when an interior value is NaN or a border
// element was written (the output was poisoned with NaNs).
static double tune_compare(deploy_gpu *g, deploy_cpu *ref, int i, int nref, const float *got) {
    const deploy_op *op = &g->p->ops[i];
    const dops_geom gy = deploy_tensor_geom(g->p, op->out, nref);
    const float *want = deploy_cpu_tensor(ref, op->out);
    const int hb = gy.h + 2 * gy.b, wb = gy.w + 2 * gy.b;
    double num = 0.0, den = 0.0;
    for (size_t pl = 0; pl < (size_t)gy.n * gy.c; pl++)
        for (int y = 0; y < hb; y++)
            for (int x = 0; x < wb; x++) {
                const size_t at = (pl * hb + y) * wb + x;
                int inside = y >= gy.b && y < gy.b + gy.h && x >= gy.b && x < gy.b + gy.w;
                if (!inside && !isnan(got[at])) return INFINITY;
                if (!inside) continue;
                double e = fabs((double)got[at] - want[at]);
                if (!(e <= num)) num = e;
                den = fabs(want[at]) > den ? fabs(want[at]) : den;
            }
    return den > 0 ? num / den : num > 0 ? INFINITY : 0.0;
}

// Runs op i with candidate c (-1: a small op) on the plan's tensors into the
// poisoned scratch buffer and compares the first nref images with the CPU's.
static int tune_check_one(deploy_gpu *g, deploy_cpu *ref, int i, int c, int nref, float *host,
                          double *e, sc_err *err) {
    const deploy_op *op = &g->p->ops[i];
    const size_t elems = deploy_tensor_elems(g->p, op->out);
    cudaCheck(err, cudaMemsetAsync(g->scratch, 0xff, (size_t)g->cur_n * elems * g->esz, g->g.stream));
    SC_TRY(deploy_gpu_op(g, i, c, g->cur_n, g->scratch, err));
    SC_TRY(tune_download(g, g->scratch, (size_t)nref * elems, host, err));
    *e = tune_compare(g, ref, i, nref, host);
    return 0;
}

// Compares the first nref images of the plan's tensor t (downloaded into
// host) with the CPU's: 0 when the interior matches (exactly in fp32, to
// fp16 rounding in fp16) and the border is zero; 1 when the interior
// differs, 2 when the border was written.
static int tune_input_changed(deploy_gpu *g, deploy_cpu *ref, int t, int nref, float *host,
                              sc_err *err, int *changed) {
    const size_t n = (size_t)nref * deploy_tensor_elems(g->p, t);
    const float *want = deploy_cpu_tensor(ref, t);
    const double tol = g->dt == GDT_F16 ? 1.0 / 1024 : 0.0;
    SC_TRY(tune_download(g, g->t[t], n, host, err));
    *changed = 0;
    for (size_t i = 0; i < n && !*changed; i++) {
        if (want[i] == 0.0f && host[i] != 0.0f) *changed = 2;  // borders (and zeros) stay zero
        else if (!(fabs((double)host[i] - want[i]) <= tol * fmax(1.0, fabs(want[i])))) *changed = 1;
    }
    if (*changed == 2) {  // a written zero of the interior counts as an interior change
        const dops_geom gx = deploy_tensor_geom(g->p, t, nref);
        const int hb = gx.h + 2 * gx.b, wb = gx.w + 2 * gx.b;
        for (size_t i = 0; i < n; i++) {
            int y = (int)(i / wb % hb), x = (int)(i % wb);
            int inside = y >= gx.b && y < gx.b + gx.h && x >= gx.b && x < gx.b + gx.w;
            if (want[i] == 0.0f && host[i] != 0.0f && !inside) return 0;
        }
        *changed = 1;
    }
    return 0;
}

// Checks one candidate c of conv op i (or the small op, c = -1) on freshly
// uploaded inputs: *e gets its error, *wrote 1 or 2 when it changed an input
// (interior or border).
static int tune_check_cand(deploy_gpu *g, deploy_cpu *ref, int i, int c, int nref, float *host,
                           double *e, int *wrote, sc_err *err) {
    int ins[LAYER_MAX_IN], w2 = 0;
    const int nin = deploy_op_inputs(&g->p->ops[i], ins);
    for (int k = 0; k < nin; k++) SC_TRY(tune_upload(g, ref, ins[k], nref, err));
    SC_TRY(tune_check_one(g, ref, i, c, nref, host, e, err));
    *wrote = 0;
    for (int k = 0; k < nin; k++) {
        SC_TRY(tune_input_changed(g, ref, ins[k], nref, host, err, &w2));
        *wrote = *wrote ? *wrote : w2;
    }
    return 0;
}

// Checks op i: every live candidate of a conv op, or the small op itself.
// Candidates off by more than their tolerance, or that write into their
// input, are marked not ok.
static int tune_check_op(deploy_gpu *g, deploy_cpu *ref, int i, int nref, deploy_timing *t,
                         float *host, FILE *warn, sc_err *err) {
    const deploy_op *op = &g->p->ops[i];
    static const char *const where[3] = {"", "its input", "its input's border"};
    double e;
    int wrote;
    if (op->kind != DOP_CONV) {
        SC_TRY(tune_check_cand(g, ref, i, -1, nref, host, &e, &wrote, err));
        double tol = g->dt == GDT_F16 ? TUNE_TOL_SMALL16 : TUNE_TOL_SMALL32;
        if (!(e <= tol) || wrote)
            return sc_fail(err, "%s: GPU result off the CPU reference by %.3g%s%s", op->name, e,
                           wrote ? ", and it wrote into " : "", where[wrote]);
        return 0;
    }
    for (int c = 0; c < g->ncand; c++) {
        deploy_inst *in = tune_inst(g, i, c);
        if (!in->st) continue;
        SC_TRY(tune_check_cand(g, ref, i, c, nref, host, &e, &wrote, err));
        t->err[i][c] = wrote ? INFINITY : e;
        in->ok = !wrote && e <= g->cands[c].tol;
        in->wrote = wrote;
        t->passed[i][c] = (signed char)in->ok;
        if (!in->ok && warn && wrote)
            fprintf(warn, "deploy: warning: %s on %s wrote into %s at batch %d; not used\n",
                    g->cands[c].name, op->name, where[wrote], g->cur_n);
        else if (!in->ok && warn)
            fprintf(warn, "deploy: warning: %s on %s is off the CPU reference by %.3g (tolerance %g) "
                          "at batch %d; not used\n", g->cands[c].name, op->name, e, g->cands[c].tol,
                    g->cur_n);
    }
    return 0;
}

// --- timing -----------------------------------------------------------------------

// Milliseconds of one run of op i with candidate c (events around plain launches).
static int tune_once(deploy_gpu *g, int i, int c, int reps, double *ms, sc_err *err) {
    float x = 0.0f;
    cudaCheck(err, cudaEventRecord(g->ev[0], g->g.stream));
    for (int k = 0; k < reps; k++) SC_TRY(deploy_gpu_op(g, i, c, g->cur_n, g->scratch, err));
    cudaCheck(err, cudaEventRecord(g->ev[1], g->g.stream));
    cudaCheck(err, cudaEventSynchronize(g->ev[1]));
    cudaCheck(err, cudaEventElapsedTime(&x, g->ev[0], g->ev[1]));
    *ms = x / reps;
    return 0;
}

// A graph of k runs of op i with candidate c, or NULL when capture fails.
static cudaGraphExec_t tune_graph(deploy_gpu *g, int i, int c, int k) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    sc_err e = {{0}};
    if (cudaStreamBeginCapture(g->g.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return NULL;
    int rc = 0;
    for (int r = 0; r < k && !rc; r++) rc = deploy_gpu_op(g, i, c, g->cur_n, g->scratch, &e);
    if (cudaStreamEndCapture(g->g.stream, &graph) == cudaSuccess && !rc &&
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
        exec = NULL;
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return exec;
}

// Median milliseconds of op i with candidate c (-1: a small op) over
// `repeat` replays of a graph of k runs, k chosen so a replay lasts at
// least TUNE_MIN_MS; plain launches when capture fails.
static int tune_time(deploy_gpu *g, int i, int c, int repeat, double *ms, sc_err *err) {
    double first, *v = malloc((size_t)repeat * sizeof *v);
    if (!v) return sc_fail(err, "out of memory");
    int rc = tune_once(g, i, c, 2, &first, err);  // warm-up and an estimate
    int k = first > 0 ? (int)ceil(TUNE_MIN_MS / first) : 64;
    k = k < 1 ? 1 : k > 64 ? 64 : k;
    cudaGraphExec_t graph = rc ? NULL : tune_graph(g, i, c, k);
    for (int r = 0; r < repeat && !rc; r++) {
        if (!graph) {
            rc = tune_once(g, i, c, k, &v[r], err);
            continue;
        }
        float x = 0.0f;
        if (cudaEventRecord(g->ev[0], g->g.stream) != cudaSuccess ||
            cudaGraphLaunch(graph, g->g.stream) != cudaSuccess ||
            cudaEventRecord(g->ev[1], g->g.stream) != cudaSuccess ||
            cudaEventSynchronize(g->ev[1]) != cudaSuccess ||
            cudaEventElapsedTime(&x, g->ev[0], g->ev[1]) != cudaSuccess)
            rc = sc_fail(err, "%s: timing failed (%s)", g->p->ops[i].name,
                         cudaGetErrorString(cudaGetLastError()));
        v[r] = (double)x / k;
    }
    if (graph) cudaGraphExecDestroy(graph);
    *ms = rc ? NAN : sc_median(v, repeat);
    free(v);
    return rc;
}

// Times every live, checked candidate of op i (or the small op) and picks the fastest.
static int tune_time_op(deploy_gpu *g, int i, int repeat, deploy_timing *t, sc_err *err) {
    if (g->p->ops[i].kind != DOP_CONV) return tune_time(g, i, -1, repeat, &t->op_ms[i], err);
    int best = -1, dense = -1;
    for (int c = 0; c < g->ncand; c++) {
        const deploy_inst *in = tune_inst(g, i, c);
        if (!in->st || in->wrote) continue;  // a failed check: timed for the table, never chosen
        SC_TRY(tune_time(g, i, c, repeat, &t->ms[i][c], err));
        if (in->ok && g->cands[c].choosable && (best < 0 || t->ms[i][c] < t->ms[i][best])) best = c;
        if (g->cands[c].dense && (dense < 0 || t->ms[i][c] < t->ms[i][dense])) dense = c;  // may have failed
    }
    if (best < 0) return sc_fail(err, "%s: no implementation passed its check", g->p->ops[i].name);
    g->dense_pick[i] = dense;
    t->dense_failed += dense >= 0 && !tune_inst(g, i, dense)->ok;
    t->chosen[i] = best;
    t->op_ms[i] = t->ms[i][best];
    return 0;
}

// --- Algorithm 2 ------------------------------------------------------------------------

// Fills every tensor: n images through the all-dense plan (plain launches).
static int tune_fill(deploy_gpu *g, int n, const uint8_t *images, sc_err *err) {
    const net *nt = g->p->m->nt;
    cudaCheck(err, cudaMemcpyAsync(g->d_img, images, (size_t)n * nt->in_c * nt->in_h * nt->in_w,
                                   cudaMemcpyHostToDevice, g->g.stream));
    SC_TRY(deploy_gpu_choose_dense(g, err));
    SC_TRY(deploy_gpu_enqueue(g, n, err));
    cudaCheck(err, cudaStreamSynchronize(g->g.stream));
    return 0;
}

// Runs the n images again through implementations that passed their check
// (the first choosable one of each op), so every op is timed on correct
// activations. Fails when an op has none.
static int tune_refill(deploy_gpu *g, int n, sc_err *err) {
    for (int i = 0; i < g->p->nops; i++) {
        if (g->p->ops[i].kind != DOP_CONV) continue;
        g->chosen[i] = -1;
        for (int c = 0; c < g->ncand && g->chosen[i] < 0; c++)
            if (tune_inst(g, i, c)->ok && g->cands[c].choosable) g->chosen[i] = c;
        if (g->chosen[i] < 0)
            return sc_fail(err, "%s: no implementation passed its check", g->p->ops[i].name);
    }
    deploy_gpu_graph_reset(g);
    SC_TRY(deploy_gpu_enqueue(g, n, err));
    cudaCheck(err, cudaStreamSynchronize(g->g.stream));
    return 0;
}

// Lets every candidate that tunes itself do so for batch n.
static int tune_cands(deploy_gpu *g, int n, sc_err *err) {
    for (int i = 0; i < g->p->nops; i++)
        for (int c = 0; c < g->ncand && g->p->ops[i].kind == DOP_CONV; c++) {
            deploy_inst *in = tune_inst(g, i, c);
            if (!in->st || !g->cands[c].tune) continue;
            if (g->cands[c].tune(in->st, &g->g, n, g->t[g->p->ops[i].in], g->scratch, err))
                return sc_wrap(err, "%s, %s", g->p->ops[i].name, g->cands[c].name);
        }
    return 0;
}

// Checks, times and chooses at batch n; see deploy_gpu.h.
int deploy_gpu_tune(deploy_gpu *g, int n, const uint8_t *images, deploy_cpu *ref, int nref,
                    int repeat, deploy_timing *t, FILE *warn, sc_err *err) {
    if (n < 1 || n > g->max_n) return sc_fail(err, "batch %d (the plan holds 1 to %d)", n, g->max_n);
    if (nref < 1 || nref > n) return sc_fail(err, "check images %d (1 to %d)", nref, n);
    g->cur_n = n;
    deploy_gpu_graph_reset(g);
    t->n = n;
    t->dense_failed = 0;
    for (size_t k = 0; k < (size_t)g->p->nops * g->ncand; k++)
        g->inst[k].ok = g->inst[k].st != NULL, g->inst[k].wrote = 0;
    for (int i = 0; i < g->p->nops; i++) g->dense_pick[i] = -1;
    SC_TRY(tune_fill(g, n, images, err));
    SC_TRY(tune_cands(g, n, err));
    float *host = malloc((size_t)nref * deploy_gpu_max_elems(g) * sizeof *host);
    if (!host) return sc_fail(err, "out of memory");
    int rc = 0;
    for (int i = 0; i < g->p->nops && !rc; i++) rc = tune_check_op(g, ref, i, nref, t, host, warn, err);
    free(host);
    SC_TRY(rc);
    SC_TRY(tune_refill(g, n, err));
    for (int i = 0; i < g->p->nops; i++) SC_TRY(tune_time_op(g, i, repeat, t, err));
    return deploy_gpu_choose(g, t->chosen, err);
}
