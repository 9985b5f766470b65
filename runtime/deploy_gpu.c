// The GPU deploy executor (runtime/deploy_gpu.h): device tensors in the
// plan's precision, the candidates of every conv/linear op, op launches,
// the whole forward pass captured in one CUDA graph, forward and timing.
// Checking, tuning and the per-layer choice are in deploy_tune_gpu.c, the
// candidate table in deploy_cand_gpu.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/deploy_ops_gpu.h"
#include "runtime/deploy_gpu_impl.h"
#include "runtime/exec.h"

// --- small helpers ------------------------------------------------------------

// True when a GPU works in this build.
int deploy_gpu_available(sc_err *why) { return exec_gpu_available(why); }

// The GPU's name.
const char *deploy_gpu_device(const deploy_gpu *g) { return g->device; }

// Elements of the largest tensor per image.
size_t deploy_gpu_max_elems(const deploy_gpu *g) {
    size_t m = 0;
    for (int t = 0; t < g->p->ntensors; t++) {
        size_t e = deploy_tensor_elems(g->p, t);
        m = e > m ? e : m;
    }
    return m;
}

// Drops the captured graph.
void deploy_gpu_graph_reset(deploy_gpu *g) {
    if (g->graph) cudaGraphExecDestroy(g->graph);
    g->graph = NULL;
    g->graph_tried = 0;
}

// --- create / free ------------------------------------------------------------

// Frees the candidates of every op.
static void gpu_cands_free(deploy_gpu *g) {
    for (int i = 0; g->inst && i < g->p->nops; i++)
        for (int c = 0; c < g->ncand; c++) {
            deploy_inst *in = &g->inst[(size_t)i * g->ncand + c];
            if (in->st) g->cands[c].free(in->st);
        }
    free(g->inst);
}

// Frees a GPU plan (NULL is fine).
void deploy_gpu_free(deploy_gpu *g) {
    if (!g) return;
    if (g->g.stream) cudaStreamSynchronize(g->g.stream);
    deploy_gpu_graph_reset(g);
    gpu_cands_free(g);
    for (int t = 0; g->t && t < g->p->ntensors; t++) cudaFree(g->t[t]);
    for (int i = 0; g->scale && i < g->p->nops; i++) cudaFree(g->scale[i]), cudaFree(g->shift[i]);
    free(g->t), free(g->scale), free(g->shift), free(g->chosen), free(g->dense_pick);
    cudaFree(g->d_img), cudaFree(g->d_logits), cudaFree(g->scratch), cudaFree(g->staging);
    cudaFreeHost(g->h_logits);
    for (int e = 0; e < 2; e++)
        if (g->ev[e]) cudaEventDestroy(g->ev[e]);
    gpu_ctx_free(&g->g);
    free(g);
}

// Allocates the tensors (zeroed: borders stay zero), the image, logits,
// scratch and staging buffers and the events.
static int gpu_buffers(deploy_gpu *g, sc_err *err) {
    const deploy_plan *p = g->p;
    const net *nt = p->m->nt;
    const size_t big = (size_t)g->max_n * deploy_gpu_max_elems(g);
    if (!(g->t = calloc((size_t)(p->ntensors > 0 ? p->ntensors : 1), sizeof *g->t)))
        return sc_fail(err, "out of memory");
    for (int t = 0; t < p->ntensors; t++) {
        const size_t bytes = (size_t)g->max_n * deploy_tensor_elems(p, t) * g->esz;
        cudaCheck(err, cudaMalloc(&g->t[t], bytes));
        cudaCheck(err, cudaMemset(g->t[t], 0, bytes));
    }
    const size_t img = (size_t)g->max_n * nt->in_c * nt->in_h * nt->in_w;
    cudaCheck(err, cudaMalloc((void **)&g->d_img, img));
    cudaCheck(err, cudaMemset(g->d_img, 0, img));
    cudaCheck(err, cudaMalloc((void **)&g->d_logits, (size_t)g->max_n * nt->classes * sizeof(float)));
    cudaCheck(err, cudaMallocHost((void **)&g->h_logits, (size_t)g->max_n * nt->classes * sizeof(float)));
    cudaCheck(err, cudaMalloc(&g->scratch, big * g->esz));
    cudaCheck(err, cudaMalloc((void **)&g->staging, big * sizeof(float)));
    for (int e = 0; e < 2; e++) cudaCheck(err, cudaEventCreate(&g->ev[e]));
    return 0;
}

// Uploads the scale and shift of every unfolded batch norm.
static int gpu_affines(deploy_gpu *g, sc_err *err) {
    const deploy_plan *p = g->p;
    g->scale = calloc((size_t)p->nops, sizeof *g->scale);
    g->shift = calloc((size_t)p->nops, sizeof *g->shift);
    if (!g->scale || !g->shift) return sc_fail(err, "out of memory");
    for (int i = 0; i < p->nops; i++) {
        const deploy_op *op = &p->ops[i];
        if (op->kind != DOP_AFFINE) continue;
        const size_t bytes = (size_t)p->tensors[op->out].c * sizeof(float);
        cudaCheck(err, cudaMalloc((void **)&g->scale[i], bytes));
        cudaCheck(err, cudaMalloc((void **)&g->shift[i], bytes));
        SC_TRY(gpu_upload(g->scale[i], op->scale, bytes, err));
        SC_TRY(gpu_upload(g->shift[i], op->shift, bytes, err));
    }
    return 0;
}

// Creates every applicable candidate of conv op i; the dense baseline is
// chosen. Only a dense baseline that cannot be made is an error.
static int gpu_op_cands(deploy_gpu *g, int i, const deploy_gpu_skip *skip, FILE *warn, sc_err *err) {
    const deploy_op *op = &g->p->ops[i];
    float *w = deploy_op_dense_weights(g->p, op);
    if (!w) return sc_fail(err, "out of memory");
    deploy_cand_args a = {.g = &g->g, .p = g->p, .op = op, .sl = deploy_op_layer(g->p, op),
                          .dense_w = w, .max_n = g->max_n};
    int rc = 0;
    for (int c = 0; c < g->ncand && !rc; c++) {
        const deploy_cand *cd = &g->cands[c];
        deploy_inst *in = &g->inst[(size_t)i * g->ncand + c];
        if (cd->prec != g->prec || (cd->applies && !cd->applies(&a)) || deploy_gpu_skipped(skip, i, c))
            continue;
        sc_err why = {{0}};
        in->st = cd->create(&a, &why);
        in->ok = in->st != NULL;
        if (!in->st && cd->dense) rc = sc_fail(err, "%s, %s: %s", op->name, cd->name, why.msg);
        else if (!in->st && warn)
            fprintf(warn, "deploy: warning: %s left out on %s: %s\n", cd->name, op->name, why.msg);
        if (cd->dense) g->chosen[i] = c;
    }
    free(w);
    if (!rc && g->chosen[i] < 0) rc = sc_fail(err, "%s: no dense baseline in this build", op->name);
    return rc;
}

// Creates the candidates of every conv/linear op that skip does not leave out.
static int gpu_cands(deploy_gpu *g, const deploy_gpu_skip *skip, FILE *warn, sc_err *err) {
    g->cands = deploy_cand_table(&g->ncand);
    if (g->ncand > DEPLOY_MAX_CANDS)
        return sc_fail(err, "%d candidates, DEPLOY_MAX_CANDS is %d", g->ncand, DEPLOY_MAX_CANDS);
    g->inst = calloc((size_t)g->p->nops * (size_t)g->ncand + 1, sizeof *g->inst);
    g->chosen = malloc((size_t)g->p->nops * sizeof *g->chosen);
    g->dense_pick = malloc((size_t)g->p->nops * sizeof *g->dense_pick);
    if (!g->inst || !g->chosen || !g->dense_pick) return sc_fail(err, "out of memory");
    for (int i = 0; i < g->p->nops; i++) {
        g->chosen[i] = g->dense_pick[i] = -1;
        if (g->p->ops[i].kind == DOP_CONV) SC_TRY(gpu_op_cands(g, i, skip, warn, err));
    }
    return 0;
}

// Names the device.
static int gpu_device_name(deploy_gpu *g, sc_err *err) {
    int dev;
    struct cudaDeviceProp prop;
    cudaCheck(err, cudaGetDevice(&dev));
    cudaCheck(err, cudaGetDeviceProperties(&prop, dev));
    snprintf(g->device, sizeof g->device, "%s", prop.name);
    return 0;
}

// Creates the GPU plan.
deploy_gpu *deploy_gpu_create(const deploy_plan *p, deploy_prec prec, int max_n,
                              const deploy_gpu_skip *skip, FILE *warn, sc_err *err) {
    sc_err why = {{0}};
    if (!deploy_gpu_available(&why)) {
        sc_fail(err, "%s", why.msg);
        return NULL;
    }
    deploy_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    g->p = p, g->prec = prec, g->max_n = g->cur_n = max_n;
    g->dt = prec == DP_FP16 ? GDT_F16 : GDT_F32;
    g->esz = gpu_dtype_size(g->dt);
    if (gpu_ctx_init(&g->g, err) || gpu_device_name(g, err) || gpu_buffers(g, err) ||
        gpu_affines(g, err) || gpu_cands(g, skip, warn, err)) {
        deploy_gpu_free(g);
        return NULL;
    }
    return g;
}

// --- running ----------------------------------------------------------------------

// Queues one small (non-conv) op.
static int gpu_small_op(deploy_gpu *g, int i, int n, void *y, sc_err *err) {
    const deploy_plan *p = g->p;
    const deploy_op *op = &p->ops[i];
    const dops_geom gx = deploy_tensor_geom(p, op->in, n), gy = deploy_tensor_geom(p, op->out, n);
    const void *x = g->t[op->in];
    switch (op->kind) {
    case DOP_ADD: {
        const dops_geom g2 = deploy_tensor_geom(p, op->in2, n);
        return dops_add_gpu(&g->g, g->dt, &gx, x, &g2, g->t[op->in2], &gy, y, op->relu, err);
    }
    case DOP_RELU: return dops_relu_gpu(&g->g, g->dt, &gx, x, &gy, y, err);
    case DOP_AFFINE:
        return dops_affine_gpu(&g->g, g->dt, &gx, x, g->scale[i], g->shift[i], &gy, y, op->relu, err);
    case DOP_MAXPOOL:
    case DOP_AVGPOOL:
        return dops_pool_gpu(&g->g, g->dt, &gx, x, op->k, op->stride, op->pad,
                             op->kind == DOP_AVGPOOL, &gy, y, err);
    case DOP_GAP: return dops_gap_gpu(&g->g, g->dt, &gx, x, &gy, y, err);
    case DOP_COPY: return dops_copy_gpu(&g->g, g->dt, &gx, x, &gy, y, err);
    case DOP_CONCAT:
        for (int k = 0, off = 0; k < op->nin; k++) {
            const dops_geom gk = deploy_tensor_geom(p, op->ins[k], n);
            SC_TRY(dops_concat_gpu(&g->g, g->dt, &gk, g->t[op->ins[k]], off, &gy, y, err));
            off += gk.c;
        }
        return 0;
    case DOP_CONV: break;
    }
    return sc_fail(err, "op %s: not a small op", op->name);
}

// Queues op i with candidate c (-1: the chosen one) into out (NULL: its tensor).
int deploy_gpu_op(deploy_gpu *g, int i, int c, int n, void *out, sc_err *err) {
    const deploy_op *op = &g->p->ops[i];
    void *y = out ? out : g->t[op->out];
    if (op->kind != DOP_CONV) return gpu_small_op(g, i, n, y, err);
    c = c < 0 ? g->chosen[i] : c;
    deploy_inst *in = &g->inst[(size_t)i * g->ncand + c];
    if (!in->st) return sc_fail(err, "%s: %s does not apply", op->name, g->cands[c].name);
    return g->cands[c].forward(in->st, &g->g, n, g->t[op->in], y, err);
}

// Queues the whole forward for n images: normalisation, every op, logits to fp32.
int deploy_gpu_enqueue(deploy_gpu *g, int n, sc_err *err) {
    const deploy_plan *p = g->p;
    const net *nt = p->m->nt;
    const dops_geom gin = deploy_tensor_geom(p, p->input, n);
    SC_TRY(dops_normalize_gpu(&g->g, g->dt, &gin, g->d_img, nt->in_mean, nt->in_std,
                              g->t[p->input], err));
    for (int i = 0; i < p->nops; i++) SC_TRY(deploy_gpu_op(g, i, -1, n, NULL, err));
    const size_t nl = (size_t)n * nt->classes;
    if (g->dt == GDT_F16) return gpu_convert(&g->g, nl, GDT_F16, g->t[p->output], GDT_F32, g->d_logits, err);
    cudaCheck(err, cudaMemcpyAsync(g->d_logits, g->t[p->output], nl * sizeof(float),
                                   cudaMemcpyDeviceToDevice, g->g.stream));
    return 0;
}

// Captures the forward at cur_n into a graph (once per change); a failed
// capture leaves plain launches.
static int gpu_graph_make(deploy_gpu *g, sc_err *err) {
    if (g->graph || g->graph_tried) return 0;
    g->graph_tried = 1;
    cudaGraph_t graph = NULL;
    cudaCheck(err, cudaStreamBeginCapture(g->g.stream, cudaStreamCaptureModeThreadLocal));
    sc_err cap = {{0}};
    int rc = deploy_gpu_enqueue(g, g->cur_n, &cap);
    cudaError_t e = cudaStreamEndCapture(g->g.stream, &graph);
    if (rc == 0 && e == cudaSuccess && cudaGraphInstantiate(&g->graph, graph, 0) != cudaSuccess)
        g->graph = NULL;
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture is not an error: plain launches follow
    return 0;
}

// Runs the forward at cur_n: the graph when there is one, else plain launches.
static int gpu_run(deploy_gpu *g, sc_err *err) {
    SC_TRY(gpu_graph_make(g, err));
    if (!g->graph) return deploy_gpu_enqueue(g, g->cur_n, err);
    cudaCheck(err, cudaGraphLaunch(g->graph, g->g.stream));
    return 0;
}

// Runs the plan on n images and copies the logits out.
int deploy_gpu_forward(deploy_gpu *g, int n, const uint8_t *images, float *logits, sc_err *err) {
    const net *nt = g->p->m->nt;
    if (n < 1 || n > g->cur_n)
        return sc_fail(err, "batch of %d images (the plan runs 1 to %d)", n, g->cur_n);
    const size_t img = (size_t)nt->in_c * nt->in_h * nt->in_w;
    cudaCheck(err, cudaMemcpyAsync(g->d_img, images, (size_t)n * img, cudaMemcpyHostToDevice,
                                   g->g.stream));
    SC_TRY(gpu_run(g, err));
    const size_t bytes = (size_t)n * nt->classes * sizeof(float);
    cudaCheck(err, cudaMemcpyAsync(g->h_logits, g->d_logits, bytes, cudaMemcpyDeviceToHost, g->g.stream));
    cudaCheck(err, cudaStreamSynchronize(g->g.stream));
    if (logits) memcpy(logits, g->h_logits, bytes);
    return 0;
}

// gpu_run as a gpu_run_fn.
static int gpu_run_fn_(void *g, sc_err *err) { return gpu_run(g, err); }

// Median milliseconds of `repeat` forward passes (graph replays) at n.
int deploy_gpu_time(deploy_gpu *g, int n, int repeat, double *ms, int *graph, sc_err *err) {
    if (n != g->cur_n) return sc_fail(err, "timing at batch %d, the plan is tuned for %d", n, g->cur_n);
    int rc = gpu_time_median(&g->g, gpu_run_fn_, g, 3, repeat, ms, err);
    *graph = g->graph != NULL;
    return rc ? sc_wrap(err, "timing the forward") : 0;
}

// Makes every conv op run its precision's dense baseline: the fastest dense
// entry of the last tuning, else the first one (even one that failed its
// check: the all-dense network is a speed baseline; deploy_timing counts it).
int deploy_gpu_choose_dense(deploy_gpu *g, sc_err *err) {
    for (int i = 0; i < g->p->nops; i++) {
        if (g->p->ops[i].kind != DOP_CONV) continue;
        int d = g->dense_pick[i];
        for (int c = 0; c < g->ncand && d < 0; c++)
            if (g->cands[c].dense && g->inst[(size_t)i * g->ncand + c].st &&
                !g->inst[(size_t)i * g->ncand + c].wrote)
                d = c;
        if (d < 0) return sc_fail(err, "%s: no dense baseline", g->p->ops[i].name);
        g->chosen[i] = d;
    }
    deploy_gpu_graph_reset(g);
    return 0;
}

// Makes every conv op run the given candidates.
int deploy_gpu_choose(deploy_gpu *g, const int *chosen, sc_err *err) {
    for (int i = 0; i < g->p->nops; i++) {
        if (g->p->ops[i].kind != DOP_CONV) continue;
        int c = chosen[i];
        if (c < 0 || c >= g->ncand || !g->inst[(size_t)i * g->ncand + c].ok)
            return sc_fail(err, "%s: candidate %d cannot run it", g->p->ops[i].name, c);
        g->chosen[i] = c;
    }
    deploy_gpu_graph_reset(g);
    return 0;
}

// Describes the implementation chosen for op i.
void deploy_gpu_describe(const deploy_gpu *g, int i, char *buf, size_t len) {
    if (g->p->ops[i].kind != DOP_CONV || g->chosen[i] < 0) {
        snprintf(buf, len, "deploy_ops");
        return;
    }
    const deploy_inst *in = &g->inst[(size_t)i * g->ncand + g->chosen[i]];
    g->cands[g->chosen[i]].describe(in->st, buf, len);
}
