// The GPU executor backend's table (runtime/exec_backend.h): create and
// destroy, batch staging, train/eval entry points, host copies, profiling.
// The state and the design are described in runtime/exec_gpu_impl.h; plans,
// passes and the step itself are in runtime/exec_gpu_step.cu.
#include "runtime/exec_gpu_impl.h"

// --- net checks and fused groups --------------------------------------------

// Checks that the GPU executor can run nt.
static int gx_check_net(const net *nt, int max_batch, sc_err *err) {
    if (max_batch < 1) return sc_fail(err, "bad batch size (%d)", max_batch);
    if (nt->in_c != 3) return sc_fail(err, "the GPU executor needs 3-channel input (got %d)", nt->in_c);
    if (nt->nlayers < 1) return sc_fail(err, "the net has no layers");
    const layer *last = &nt->layers[nt->nlayers - 1];
    if (last->c != nt->classes || last->h != 1 || last->w != 1)
        return sc_fail(err, "the GPU executor needs a last layer of shape (%d, 1, 1), got "
                       "(%d, %d, %d)", nt->classes, last->c, last->h, last->w);
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        if (!op_of(L->kind)->gpu)
            return sc_fail(err, "layer %s: the GPU executor cannot run a %s layer", L->name,
                           op_of(L->kind)->name);
        if (L->nsrc < 1 || L->nsrc > LAYER_MAX_IN || L->srcs[0] != L->src)
            return sc_fail(err, "layer %s: bad input list", L->name);
        for (int k = 0; k < L->nsrc; k++)
            if (L->srcs[k] >= i || L->srcs[k] < -1)
                return sc_fail(err, "layer %s reads a later layer", L->name);
    }
    return 0;
}

// Marks "bn, relu" and "bn, add, relu" runs whose inner outputs have no other
// reader as fused groups (fp16 training only): cuDNN's fused BN kernels are
// an optimisation of these particular kinds, so this rule names them.
static void gx_find_groups(gx_exec *e, const int *readers) {
    const net *nt = e->nt;
    if (e->dt != GDT_F16) return;
    for (int i = 0; i + 1 < nt->nlayers; i++) {
        const layer *B = &nt->layers[i], *N1 = &nt->layers[i + 1];
        if (B->kind != LK_BN || readers[i] != 1 || e->gl[i].role != ROLE_PLAIN) continue;
        if (N1->kind == LK_RELU && N1->src == i) {
            e->gl[i].role = ROLE_HEAD, e->gl[i].fuse = BN_FUSE_RELU;
            e->gl[i + 1].role = ROLE_TAIL, e->gl[i + 1].head = i;
            continue;
        }
        if (i + 2 >= nt->nlayers || N1->kind != LK_ADD || readers[i + 1] != 1) continue;
        const layer *N2 = &nt->layers[i + 2];
        if ((N1->srcs[0] == i) == (N1->srcs[1] == i) || N2->kind != LK_RELU || N2->src != i + 1)
            continue;
        e->gl[i].role = ROLE_HEAD, e->gl[i].fuse = BN_FUSE_ADD_RELU;
        e->gl[i + 1].role = ROLE_INNER;
        e->gl[i + 2].role = ROLE_TAIL, e->gl[i + 2].head = i;
    }
}

// Counts the readers of every layer's output; input channel padding follows:
// 8 (or SC_GPU_STEM_PAD) in fp16 when only layers that read it padded (convs)
// read the input, else none.
static int gx_plan_roles(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    int *readers = calloc((size_t)nt->nlayers, sizeof *readers), only_convs = 1;
    if (!readers) return sc_fail(err, "out of memory");
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        for (int k = 0; k < L->nsrc; k++) {
            if (L->srcs[k] >= 0) readers[L->srcs[k]]++;
            if (L->srcs[k] == -1 && !gx_ops(e, i)->reads_padded_input) only_convs = 0;
        }
    }
    const char *ev = getenv("SC_GPU_STEM_PAD");
    const int pad = ev && atoi(ev) >= 3 && atoi(ev) <= 16 ? atoi(ev) : 8;
    e->cpad = e->dt == GDT_F16 && only_convs ? pad : 3;
    gx_find_groups(e, readers);
    free(readers);
    return 0;
}

// --- allocation -------------------------------------------------------------

// Output, gradient and per-kind buffers of every layer.
static int gx_alloc_layers(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    const size_t es = gpu_dtype_size(e->dt);
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        gx_layer *G = &e->gl[i];
        G->size = (size_t)L->c * L->h * L->w;
        if (G->size > e->max_size) e->max_size = G->size;
        G->odt = (i == nt->nlayers - 1 && gx_ops(e, i)->fp32_head) ? GDT_F32 : e->dt;
        SC_TRY(gx_alloc(&G->out, (size_t)e->max_batch * G->size * gpu_dtype_size(G->odt), err));
        SC_TRY(gx_alloc(&G->grad, (size_t)e->max_batch * G->size * es, err));
        if (gx_ops(e, i)->setup) SC_TRY(gx_ops(e, i)->setup(e, i, err));
    }
    return 0;
}

// The multi-tensor segment table over every trainable tensor.
static int gx_segments(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    param_seg *s = calloc((size_t)nt->ntensors + 1, sizeof *s);
    if (!s) return sc_fail(err, "out of memory");
    int ns = 0;
    for (int t = 0; t < nt->ntensors; t++) {
        const ptensor *p = &nt->tensors[t];
        if (!p->trainable) continue;
        param_seg *q = &s[ns++];
        q->offset = p->offset;
        if (p->kind == PT_WEIGHT) {
            gx_ops(e, p->layer)->weight_seg(e, p->layer, p->offset, q);
        } else {
            q->kind = SEG_DIRECT, q->k = (int)p->count, q->c = q->hw = q->cw = 1;
        }
    }
    e->segs = param_segs_create(s, ns, err);
    free(s);
    return e->segs ? 0 : -1;
}

// Staging layout: hparams, labels, dx, dy, flip, images, soft targets (each aligned).
static void gx_stage_layout(gx_exec *e) {
    const size_t a = GX_STAGE_ALIGN, mb = (size_t)e->max_batch;
    size_t o = a;  // gpu_hparams first
    e->off_labels = o, o += (mb * sizeof(int) + a - 1) / a * a;
    e->off_dx = o, o += (mb + a - 1) / a * a;
    e->off_dy = o, o += (mb + a - 1) / a * a;
    e->off_flip = o, o += (mb + a - 1) / a * a;
    e->off_images = o, o += (mb * gx_img_bytes(e->nt) + a - 1) / a * a;
    e->off_soft = o, o += mb * (size_t)e->nt->classes * sizeof(float);
    e->stage_bytes = o;
}

// Sets the loss scaler to its initial state (scale 1 for fp32), in stream order.
static int gx_scaler_init(gx_exec *e, sc_err *err) {
    const float s0 = e->dt == GDT_F16 ? GX_SCALE_INIT : 1.0f;
    const gpu_scaler sc = {s0, 1.0f / s0, 0, 0};
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    return gpu_upload(e->scaler, &sc, sizeof sc, err);
}

// Flat vectors, staging buffers, statistics, loss scaler and scratch.
static int gx_alloc_state(gx_exec *e, sc_err *err) {
    const net *nt = e->nt;
    const size_t np = nt->nparam * sizeof(float), es = gpu_dtype_size(e->dt);
    SC_TRY(gx_alloc((void **)&e->param, np, err));
    SC_TRY(gx_alloc((void **)&e->mask, np, err));
    SC_TRY(gx_alloc((void **)&e->grad, np, err));
    SC_TRY(gx_alloc((void **)&e->mom, np, err));
    SC_TRY(gx_alloc((void **)&e->buf, nt->nbuf * sizeof(float), err));
    cudaCheck(err, cudaMemset(e->grad, 0, np));
    cudaCheck(err, cudaMemset(e->mom, 0, np));
    SC_TRY(gx_alloc(&e->input, (size_t)e->max_batch * nt->in_h * nt->in_w * e->cpad * es, err));
    for (int k = 0; k < 2; k++)
        SC_TRY(gx_alloc(&e->scratch[k], (size_t)e->max_batch * e->max_size * es, err));
    SC_TRY(gx_alloc((void **)&e->logits32, (size_t)e->max_batch * nt->classes * sizeof(float), err));
    gx_stage_layout(e);
    SC_TRY(gx_alloc((void **)&e->dstage, e->stage_bytes, err));
    for (int k = 0; k < 2; k++) {
        cudaCheck(err, cudaMallocHost((void **)&e->hstage[k], e->stage_bytes));
        memset(e->hstage[k], 0, e->stage_bytes);
        cudaCheck(err, cudaEventCreateWithFlags(&e->stage_ev[k], cudaEventDisableTiming));
    }
    SC_TRY(gx_alloc((void **)&e->stats, sizeof(gpu_stats), err));
    SC_TRY(gx_alloc((void **)&e->scaler, sizeof(gpu_scaler), err));
    cudaCheck(err, cudaMemset(e->stats, 0, sizeof(gpu_stats)));
    return gx_scaler_init(e, err);
}

// --- staging ----------------------------------------------------------------

// Checks batch size and labels.
static int gx_check_batch(gx_exec *e, const exec_batch *b, sc_err *err) {
    if (b->n < 1 || b->n > e->max_batch)
        return sc_fail(err, "batch of %d images (the executor takes 1 to %d)", b->n, e->max_batch);
    if (!b->images || !b->labels) return sc_fail(err, "batch without images or labels");
    for (int i = 0; i < b->n; i++)
        if (b->labels[i] < 0 || b->labels[i] >= e->nt->classes)
            return sc_fail(err, "label out of range (image %d, label %d, %d classes)", i,
                           b->labels[i], e->nt->classes);
    return 0;
}

// Copies the batch, hyper-parameters and soft targets ((n, classes), or NULL)
// into a pinned buffer and queues its upload.
static int gx_stage(gx_exec *e, const exec_batch *b, const gpu_hparams *hp, const float *soft,
                    sc_err *err) {
    const int k = e->stage_cur, n = b->n;
    unsigned char *h = e->hstage[k];
    cudaCheck(err, cudaEventSynchronize(e->stage_ev[k]));  // its last upload is done
    memcpy(h, hp, sizeof *hp);
    memcpy(h + e->off_labels, b->labels, (size_t)n * sizeof(int));
    if (b->dx) memcpy(h + e->off_dx, b->dx, (size_t)n);
    else memset(h + e->off_dx, 0, (size_t)n);
    if (b->dy) memcpy(h + e->off_dy, b->dy, (size_t)n);
    else memset(h + e->off_dy, 0, (size_t)n);
    if (b->flip) memcpy(h + e->off_flip, b->flip, (size_t)n);
    else memset(h + e->off_flip, 0, (size_t)n);
    memcpy(h + e->off_images, b->images, (size_t)n * gx_img_bytes(e->nt));
    size_t bytes = e->off_images + (size_t)n * gx_img_bytes(e->nt);
    const size_t soft_bytes = (size_t)n * e->nt->classes * sizeof(float);
    if (soft) memcpy(h + e->off_soft, soft, soft_bytes), bytes = e->off_soft + soft_bytes;
    e->soft_mode = soft != NULL;
    cudaCheck(err, cudaMemcpyAsync(e->dstage, h, bytes, cudaMemcpyHostToDevice, e->g.stream));
    cudaCheck(err, cudaEventRecord(e->stage_ev[k], e->g.stream));
    e->stage_cur = 1 - k;
    return 0;
}

// --- backend: create / destroy ----------------------------------------------

// Frees everything a GPU executor state holds (NULL is fine).
static void gx_destroy(void *st) {
    gx_exec *e = st;
    if (!e) return;
    if (e->g.stream) cudaStreamSynchronize(e->g.stream);
    for (int k = 0; k < GX_MAX_PLANS; k++) gx_plan_free(e, &e->plans[k]);
    for (int i = 0; e->gl && i < e->nt->nlayers; i++) {
        gx_layer *G = &e->gl[i];
        cudaFree(G->out), cudaFree(G->grad), cudaFree(G->wwork), cudaFree(G->gwork);
        cudaFree(G->save_mean), cudaFree(G->save_invstd), cudaFree(G->stage), cudaFree(G->reserve);
    }
    param_segs_free(e->segs);
    cudaFree(e->ws), cudaFree(e->input), cudaFree(e->scratch[0]), cudaFree(e->scratch[1]);
    cudaFree(e->logits32), cudaFree(e->param), cudaFree(e->mask), cudaFree(e->grad);
    cudaFree(e->mom), cudaFree(e->buf), cudaFree(e->dstage), cudaFree(e->stats);
    cudaFree(e->scaler);
    for (int k = 0; k < 2; k++) {
        if (e->hstage[k]) cudaFreeHost(e->hstage[k]);
        if (e->stage_ev[k]) cudaEventDestroy(e->stage_ev[k]);
    }
    gpu_ctx_free(&e->g);
    free(e->gl), free(e->gseen);
    free(e);
}

static int gx_write_net(void *st, sc_err *err);

// Sets up the state: context, layers, segments, buffers, the max_batch plan.
static int gx_setup(gx_exec *e, sc_err *err) {
    SC_TRY(gpu_ctx_init(&e->g, err));  // the selected device's properties, not device 0's
    snprintf(e->name, sizeof e->name, "%s", e->g.dev.name);
    e->gl = calloc((size_t)e->nt->nlayers, sizeof *e->gl);
    e->gseen = calloc((size_t)e->nt->nlayers, 1);
    if (!e->gl || !e->gseen) return sc_fail(err, "out of memory");
    SC_TRY(gx_plan_roles(e, err));
    SC_TRY(gx_alloc_layers(e, err));
    SC_TRY(gx_alloc_state(e, err));
    SC_TRY(gx_segments(e, err));
    SC_TRY(gx_write_net(e, err));
    cudaCheck(err, cudaDeviceSynchronize());  // setup memsets ran on the legacy stream
    return gx_plan_get(e, e->max_batch, 1, err) ? 0 : -1;
}

// Creates the GPU state for nt and uploads its parameters, masks and buffers.
static void *gx_create(net *nt, sc_precision prec, int max_batch, sc_err *err) {
    if (gx_check_net(nt, max_batch, err)) return NULL;
    gx_exec *e = calloc(1, sizeof *e);
    if (!e) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    e->nt = nt, e->prec = prec, e->max_batch = max_batch;
    e->dt = prec == PREC_FP16 ? GDT_F16 : GDT_F32;
    const char *ev = getenv("SC_GPU_GRAPH");
    e->use_graphs = !(ev && !strcmp(ev, "0"));
    if (gx_setup(e, err)) {
        gx_destroy(e);
        return NULL;
    }
    return e;
}

// --- backend: steps ---------------------------------------------------------

// One SGD step on the GPU (soft targets when the batch has them).
static int gx_train_step(void *st, const exec_batch *b, const exec_hparams *h, sc_err *err) {
    gx_exec *e = st;
    SC_TRY(gx_check_batch(e, b, err));
    gx_plan *p = gx_plan_get(e, b->n, 1, err);
    if (!p) return -1;
    const gpu_hparams hp = {h->lr, h->momentum, h->weight_decay, h->label_smoothing,
                            h->nesterov, {0, 0, 0}};
    SC_TRY(gx_stage(e, b, &hp, b->soft, err));
    SC_TRY(gx_step_run(e, p, err));
    e->work_stale = 1;
    return 0;
}

// Inference-mode forward; statistics on the device, logits copied when asked.
static int gx_eval_batch(void *st, const exec_batch *b, float smoothing, float *logits,
                         sc_err *err) {
    gx_exec *e = st;
    const int last = e->nt->nlayers - 1, k = e->nt->classes;
    SC_TRY(gx_check_batch(e, b, err));
    gx_plan *p = gx_plan_get(e, b->n, 0, err);
    if (!p) return -1;
    const gpu_hparams hp = {0.0f, 0.0f, 0.0f, smoothing, 0, {0, 0, 0}};
    SC_TRY(gx_stage(e, b, &hp, NULL, err));
    if (e->work_stale) SC_TRY(param_cast_gpu(&e->g, e->segs, e->param, err));
    e->work_stale = 0;
    SC_TRY(gx_forward(e, p, b->n, 0, err));
    const gx_layer *G = &e->gl[last];
    SC_TRY(softmax_xent_gpu(&e->g, G->odt, e->dt, b->n, k, G->out, gx_labels(e), gx_hp(e), 1.0f,
                            NULL, NULL, e->stats, err));
    if (!logits) return 0;
    const size_t cnt = (size_t)b->n * k;
    const void *src = G->out;
    if (G->odt != GDT_F32) {
        SC_TRY(gpu_convert(&e->g, cnt, G->odt, G->out, GDT_F32, e->logits32, err));
        src = e->logits32;
    }
    cudaCheck(err, cudaMemcpyAsync(logits, src, cnt * sizeof(float), cudaMemcpyDeviceToHost,
                                   e->g.stream));
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    return 0;
}

// Returns and resets the device statistics (synchronises).
static int gx_stats_take(void *st, exec_stats *out, sc_err *err) {
    gx_exec *e = st;
    gpu_stats s;
    cudaCheck(err, cudaMemcpyAsync(&s, e->stats, sizeof s, cudaMemcpyDeviceToHost, e->g.stream));
    cudaCheck(err, cudaMemsetAsync(e->stats, 0, sizeof s, e->g.stream));
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    cudaCheck(err, cudaGetLastError());
    out->loss_sum = s.loss_sum;
    out->correct = (long)s.correct;
    out->count = (long)s.count;
    out->skipped = (long)s.skipped;
    return 0;
}

// --- backend: host copies ---------------------------------------------------

// Queues a copy on the executor's stream and waits for it.
static int gx_copy(gx_exec *e, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                   sc_err *err) {
    if (bytes) cudaCheck(err, cudaMemcpyAsync(dst, src, bytes, kind, e->g.stream));
    cudaCheck(err, cudaStreamSynchronize(e->g.stream));
    return 0;
}

// Copies parameters, masks and BN buffers into the net.
static int gx_read_net(void *st, sc_err *err) {
    gx_exec *e = st;
    net *nt = e->nt;
    const size_t np = nt->nparam * sizeof(float);
    SC_TRY(gx_copy(e, nt->param, e->param, np, cudaMemcpyDeviceToHost, err));
    SC_TRY(gx_copy(e, nt->mask, e->mask, np, cudaMemcpyDeviceToHost, err));
    return gx_copy(e, nt->buf, e->buf, nt->nbuf * sizeof(float), cudaMemcpyDeviceToHost, err);
}

// Uploads the net's parameters, masks and BN buffers.
static int gx_write_net(void *st, sc_err *err) {
    gx_exec *e = st;
    const net *nt = e->nt;
    const size_t np = nt->nparam * sizeof(float);
    SC_TRY(gx_copy(e, e->param, nt->param, np, cudaMemcpyHostToDevice, err));
    SC_TRY(gx_copy(e, e->mask, nt->mask, np, cudaMemcpyHostToDevice, err));
    SC_TRY(gx_copy(e, e->buf, nt->buf, nt->nbuf * sizeof(float), cudaMemcpyHostToDevice, err));
    e->work_stale = 1;
    return 0;
}

// Copies the momentum buffer out.
static int gx_read_momentum(void *st, float *mom, sc_err *err) {
    gx_exec *e = st;
    return gx_copy(e, mom, e->mom, e->nt->nparam * sizeof(float), cudaMemcpyDeviceToHost, err);
}

// Copies a momentum buffer in.
static int gx_write_momentum(void *st, const float *mom, sc_err *err) {
    gx_exec *e = st;
    return gx_copy(e, e->mom, mom, e->nt->nparam * sizeof(float), cudaMemcpyHostToDevice, err);
}

// Copies the last step's unscaled gradient out (zeros before the first step).
static int gx_read_grad(void *st, float *grad, sc_err *err) {
    gx_exec *e = st;
    return gx_copy(e, grad, e->grad, e->nt->nparam * sizeof(float), cudaMemcpyDeviceToHost, err);
}

// Backend entry: the loss scaler back to its initial state.
static int gx_reset_scaler(void *st, sc_err *err) { return gx_scaler_init(st, err); }

// The GPU's name.
static const char *gx_device_name(const void *st) { return ((const gx_exec *)st)->name; }

// --- profiling and description ----------------------------------------------

// Creates n timing events.
static int gx_events(cudaEvent_t *ev, int n, sc_err *err) {
    for (int i = 0; i < n; i++) cudaCheck(err, cudaEventCreate(&ev[i]));
    return 0;
}

// Milliseconds between two recorded events.
static float gx_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

// Runs one eager training step with events around every layer.
int exec_gpu_profile_step(void *st, const exec_batch *b, const exec_hparams *h, float *fwd_ms,
                          float *bwd_ms, float other_ms[4], sc_err *err) {
    gx_exec *e = st;
    const int nl = e->nt->nlayers;
    SC_TRY(gx_check_batch(e, b, err));
    gx_plan *p = gx_plan_get(e, b->n, 1, err);
    if (!p) return -1;
    gx_prof pr = {calloc((size_t)nl + 1, sizeof(cudaEvent_t)),
                  calloc((size_t)nl + 1, sizeof(cudaEvent_t)), {0}};
    int rc = pr.fwd && pr.bwd ? 0 : sc_fail(err, "out of memory");
    if (!rc) rc = gx_events(pr.fwd, nl + 1, err) || gx_events(pr.bwd, nl + 1, err) ||
                  gx_events(pr.other, 5, err);
    const gpu_hparams hp = {h->lr, h->momentum, h->weight_decay, h->label_smoothing,
                            h->nesterov, {0, 0, 0}};
    if (!rc) rc = gx_stage(e, b, &hp, b->soft, err);
    e->prof = &pr;
    if (!rc) rc = gx_step_ops(e, p, err);
    e->prof = NULL;
    e->work_stale = 1;
    if (!rc && cudaStreamSynchronize(e->g.stream) != cudaSuccess)
        rc = sc_fail(err, "profiled step failed: %s", cudaGetErrorString(cudaGetLastError()));
    for (int i = 0; !rc && i < nl; i++) {
        fwd_ms[i] = gx_ms(pr.fwd[i], pr.fwd[i + 1]);
        bwd_ms[i] = gx_ms(pr.bwd[i + 1], pr.bwd[i]);
    }
    if (!rc) {
        other_ms[0] = gx_ms(pr.other[0], pr.fwd[0]);
        other_ms[1] = gx_ms(pr.fwd[nl], pr.other[1]);
        other_ms[2] = gx_ms(pr.other[2], pr.other[3]);
        other_ms[3] = gx_ms(pr.other[3], pr.other[4]);
    }
    for (int i = 0; i <= nl; i++) {
        if (pr.fwd && pr.fwd[i]) cudaEventDestroy(pr.fwd[i]);
        if (pr.bwd && pr.bwd[i]) cudaEventDestroy(pr.bwd[i]);
    }
    for (int i = 0; i < 5; i++)
        if (pr.other[i]) cudaEventDestroy(pr.other[i]);
    free(pr.fwd), free(pr.bwd);
    return rc;
}

// Describes precision, padding, fusion, algorithms, workspace and graph use.
void exec_gpu_describe(const void *st, char *buf, size_t len) {
    const gx_exec *e = st;
    size_t o = 0;
    const gx_plan *p = NULL;
    for (int k = 0; k < GX_MAX_PLANS; k++)
        if (e->plans[k].n == e->max_batch) p = &e->plans[k];
    o += (size_t)snprintf(buf + o, len - o, "%s, %s, input channels padded to %d, workspace %zu MB, "
                          "graph %s %s\n", e->name, e->dt == GDT_F16 ? "fp16" : "fp32", e->cpad,
                          e->ws_bytes >> 20, !p ? "-" : p->graph_state == 1 ? "yes"
                          : p->graph_state < 0 ? "failed:" : "not yet", p ? p->graph_err : "");
    for (int i = 0; i < e->nt->nlayers && o < len; i++) {
        const layer *L = &e->nt->layers[i];
        const gx_layer *G = &e->gl[i];
        char a[200] = "";
        if (p && p->conv && p->conv[i]) conv_gpu_describe(p->conv[i], a, sizeof a);
        if (G->role == ROLE_HEAD)
            snprintf(a, sizeof a, "fused %s", G->fuse == BN_FUSE_RELU ? "bn+relu" : "bn+add+relu");
        o += (size_t)snprintf(buf + o, len - o, "  %-24s %s\n", L->name, a);
    }
}

// --- table ------------------------------------------------------------------

static const exec_backend gpu_backend = {
    .name = "gpu",
    .create = gx_create,
    .destroy = gx_destroy,
    .train_step = gx_train_step,
    .eval_batch = gx_eval_batch,
    .stats_take = gx_stats_take,
    .read_net = gx_read_net,
    .write_net = gx_write_net,
    .read_momentum = gx_read_momentum,
    .write_momentum = gx_write_momentum,
    .read_grad = gx_read_grad,
    .reset_scaler = gx_reset_scaler,
    .device_name = gx_device_name,
};

// The GPU backend, or NULL (err says why) when no CUDA device can be used.
const exec_backend *exec_gpu_backend(sc_err *err) {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        sc_fail(err, "no usable GPU (%s)", cudaGetErrorString(rc));
        return NULL;
    }
    if (count < 1) {
        sc_fail(err, "no GPU found");
        return NULL;
    }
    gpu_devinfo d;
    if (gpu_devinfo_query(-1, &d, err)) return NULL;
    if (gpu_devinfo_cc(&d) < GPU_MIN_CC) {
        sc_fail(err, "GPU %s has compute capability %d.%d; the GPU code needs %d.%d or newer",
                d.name, d.cc_major, d.cc_minor, GPU_MIN_CC / 10, GPU_MIN_CC % 10);
        return NULL;
    }
    return &gpu_backend;
}

// Makes GPU ordinal % count current for this thread (no GPU: nothing to do).
int exec_gpu_select(int ordinal, sc_err *err) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaCheck(err, cudaSetDevice(ordinal % count));
    return 0;
}
