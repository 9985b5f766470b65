// The CPU executor backend: runs a net with the plain-C reference kernels
// through the CPU hooks of each layer kind's registry row (runtime/ops.h);
// the state and its rules are described in runtime/exec_cpu_impl.h.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec_cpu_impl.h"
#include "kernels/activation.h"
#include "kernels/augment.h"
#include "kernels/loss.h"
#include "kernels/sgd.h"

// The CPU hooks of layer L's kind.
static const struct op_cpu *cpu_ops(const layer *L) { return op_of(L->kind)->cpu; }

// --- plan: checks, in-place ReLUs, gradient buffers ---------------------------

// Checks that every layer is something the CPU kernels can run.
static int cpu_plan_check(const net *nt, int max_batch, sc_err *err) {
    if (max_batch < 1) return sc_fail(err, "bad batch size (%d)", max_batch);
    if (nt->in_c != 3)
        return sc_fail(err, "the CPU executor needs 3-channel input (got %d)", nt->in_c);
    if (nt->nlayers < 1) return sc_fail(err, "the net has no layers");
    const layer *last = &nt->layers[nt->nlayers - 1];
    if (cpu_layer_size(last) != (size_t)nt->classes)
        return sc_fail(err, "the last layer gives %zu outputs, not %d classes",
                       cpu_layer_size(last), nt->classes);
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        if (L->nsrc < 1 || L->nsrc > LAYER_MAX_IN || L->srcs[0] != L->src)
            return sc_fail(err, "layer %s: bad input list", L->name);
        for (int k = 0; k < L->nsrc; k++)
            if (L->srcs[k] >= i || L->srcs[k] < -1)
                return sc_fail(err, "layer %s reads a later layer", L->name);
        if (cpu_ops(L)->check) SC_TRY(cpu_ops(L)->check(L, max_batch, err));
    }
    return 0;
}

// Points act[i] of every in-place layer (the ReLU) that is the sole reader
// of a layer not in place at that layer's buffer (its backward needs only
// its output); allocates the rest.
static int cpu_plan_acts(cpu_exec *e, sc_err *err) {
    const net *nt = e->nt;
    int *readers = calloc((size_t)nt->nlayers, sizeof *readers);
    if (!readers) return sc_fail(err, "out of memory");
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        for (int k = 0; k < L->nsrc; k++)
            if (L->srcs[k] >= 0) readers[L->srcs[k]]++;
    }
    int rc = 0;
    for (int i = 0; i < nt->nlayers && !rc; i++) {
        const layer *L = &nt->layers[i];
        if (cpu_ops(L)->inplace && L->nsrc == 1 && L->src >= 0 && readers[L->src] == 1 &&
            !cpu_ops(&nt->layers[L->src])->inplace) {
            e->act[i] = e->act[L->src];
            continue;
        }
        e->act[i] = cpu_alloc((size_t)e->max_batch * cpu_layer_size(L));
        e->owns[i] = 1;
        if (!e->act[i]) rc = sc_fail(err, "out of memory (activations of layer %s)", L->name);
    }
    free(readers);
    return rc;
}

// Takes a gradient buffer index from the free stack or makes a new one.
static int cpu_slot_take(int *stack, int *top, int *nslots) {
    return *top > 0 ? stack[--*top] : (*nslots)++;
}

// Assigns gradient buffers by walking the backward order: a layer's output
// gradient needs a buffer from its last reader's backward until its own.
static int cpu_plan_grads(cpu_exec *e, sc_err *err) {
    const net *nt = e->nt;
    int *stack = malloc((size_t)nt->nlayers * sizeof *stack), top = 0, ns = 0;
    if (!stack) return sc_fail(err, "out of memory");
    for (int i = 0; i < nt->nlayers; i++) e->gslot[i] = -1;
    e->gslot[nt->nlayers - 1] = cpu_slot_take(stack, &top, &ns);
    for (int j = nt->nlayers - 1; j >= 0; j--) {
        if (e->gslot[j] < 0) continue;  // nothing downstream of j reaches the loss
        const layer *L = &nt->layers[j];
        const int *in = L->srcs;
        for (int k = 0; k < L->nsrc; k++) {
            e->gfirst[j][k] = 0;
            if (in[k] < 0) continue;
            if (e->gslot[in[k]] < 0) {
                e->gslot[in[k]] = cpu_slot_take(stack, &top, &ns);
                e->gfirst[j][k] = 1;
            }
        }
        stack[top++] = e->gslot[j];
    }
    free(stack);
    e->nslots = ns;
    e->slots = calloc((size_t)ns, sizeof *e->slots);
    if (!e->slots) return sc_fail(err, "out of memory");
    for (int s = 0; s < ns; s++)
        if (!(e->slots[s] = cpu_alloc((size_t)e->max_batch * e->max_size)))
            return sc_fail(err, "out of memory (gradient buffers)");
    return 0;
}

// Allocates every layer's own state (its row's setup) and the shared workspace.
static int cpu_plan_scratch(cpu_exec *e, sc_err *err) {
    const net *nt = e->nt;
    size_t work = 0;
    for (int i = 0; i < nt->nlayers; i++) {
        const struct op_cpu *oc = cpu_ops(&nt->layers[i]);
        size_t w = oc->workspace ? oc->workspace(&nt->layers[i], e->max_batch) : 0;
        work = w > work ? w : work;
        if (oc->setup) SC_TRY(oc->setup(e, i, err));
    }
    e->work = cpu_alloc(work);
    e->scratch = cpu_alloc((size_t)e->max_batch * e->max_size);
    if (!e->work || !e->scratch) return sc_fail(err, "out of memory (scratch buffers)");
    return 0;
}

// --- create / destroy -------------------------------------------------------

// Frees a CPU executor state (NULL is fine).
static void cpu_destroy(void *st) {
    cpu_exec *e = st;
    if (!e) return;
    for (int i = 0; i < e->nt->nlayers; i++) {
        if (e->act && e->owns && e->owns[i]) free(e->act[i]);
        if (e->save_mean) free(e->save_mean[i]);
        if (e->save_invstd) free(e->save_invstd[i]);
    }
    for (int s = 0; s < e->nslots && e->slots; s++) free(e->slots[s]);
    free(e->param), free(e->mask), free(e->buf), free(e->grad), free(e->mom), free(e->input);
    free(e->act), free(e->owns), free(e->save_mean), free(e->save_invstd), free(e->gslot);
    free(e->gfirst), free(e->slots), free(e->scratch), free(e->work);
    free(e);
}

// Allocates the flat per-net and per-layer arrays of the state.
static int cpu_alloc_arrays(cpu_exec *e, sc_err *err) {
    const net *nt = e->nt;
    const size_t nl = (size_t)nt->nlayers;
    e->param = cpu_alloc(nt->nparam), e->mask = cpu_alloc(nt->nparam);
    e->buf = cpu_alloc(nt->nbuf), e->grad = cpu_alloc(nt->nparam);
    e->mom = cpu_alloc(nt->nparam);
    e->input = cpu_alloc((size_t)e->max_batch * nt->in_c * nt->in_h * nt->in_w);
    e->act = calloc(nl, sizeof *e->act), e->owns = calloc(nl, 1);
    e->save_mean = calloc(nl, sizeof *e->save_mean);
    e->save_invstd = calloc(nl, sizeof *e->save_invstd);
    e->gslot = calloc(nl, sizeof *e->gslot), e->gfirst = calloc(nl, sizeof *e->gfirst);
    if (!e->param || !e->mask || !e->buf || !e->grad || !e->mom || !e->input || !e->act ||
        !e->owns || !e->save_mean || !e->save_invstd || !e->gslot || !e->gfirst)
        return sc_fail(err, "out of memory");
    return 0;
}

// Creates the CPU state for nt and copies in its parameters, masks and buffers.
static void *cpu_create(net *nt, sc_precision prec, int max_batch, sc_err *err) {
    if (prec != PREC_FP32) {
        sc_fail(err, "the CPU executor runs fp32 only (fp16 needs the GPU)");
        return NULL;
    }
    if (cpu_plan_check(nt, max_batch, err)) return NULL;
    cpu_exec *e = calloc(1, sizeof *e);
    if (!e) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    e->nt = nt;
    e->max_batch = max_batch;
    for (int i = 0; i < nt->nlayers; i++)
        if (cpu_layer_size(&nt->layers[i]) > e->max_size)
            e->max_size = cpu_layer_size(&nt->layers[i]);
    if (cpu_alloc_arrays(e, err) || cpu_plan_acts(e, err) || cpu_plan_grads(e, err) ||
        cpu_plan_scratch(e, err)) {
        cpu_destroy(e);
        return NULL;
    }
    memcpy(e->param, nt->param, nt->nparam * sizeof *e->param);
    memcpy(e->mask, nt->mask, nt->nparam * sizeof *e->mask);
    memcpy(e->buf, nt->buf, nt->nbuf * sizeof *e->buf);
    return e;
}

// --- forward ----------------------------------------------------------------

// Checks a batch, normalises its images into e->input and runs every layer.
static int cpu_forward(cpu_exec *e, const exec_batch *b, int train, sc_err *err) {
    const net *nt = e->nt;
    if (b->n < 1 || b->n > e->max_batch)
        return sc_fail(err, "batch of %d images (the executor takes 1 to %d)", b->n,
                       e->max_batch);
    if (!b->images || !b->labels) return sc_fail(err, "batch without images or labels");
    for (int i = 0; i < b->n; i++)
        if (b->labels[i] < 0 || b->labels[i] >= nt->classes)
            return sc_fail(err, "label out of range (image %d, label %d, %d classes)", i,
                           b->labels[i], nt->classes);
    augment_normalize_cpu(b->n, nt->in_h, nt->in_w, b->images, b->dx, b->dy, b->flip,
                          nt->in_mean, nt->in_std, e->input);
    for (int i = 0; i < nt->nlayers; i++) cpu_ops(&nt->layers[i])->forward(e, i, b->n, train);
    return 0;
}

// --- backward ---------------------------------------------------------------

// Where layer j's backward writes the gradient of its input k.
float *cpu_grad_target(cpu_exec *e, int j, int k) {
    const int src = e->nt->layers[j].srcs[k];
    if (src < 0) return NULL;
    return e->gfirst[j][k] ? e->slots[e->gslot[src]] : e->scratch;
}

// Adds the scratch buffer into input k's gradient when it was not the first writer.
void cpu_grad_done(cpu_exec *e, int j, int k, size_t count) {
    const int src = e->nt->layers[j].srcs[k];
    if (src >= 0 && !e->gfirst[j][k]) accumulate_cpu(count, e->scratch, e->slots[e->gslot[src]]);
}

// --- train / eval -----------------------------------------------------------

// Adds one batch's loss and hits to the running statistics.
static void cpu_stats_add(cpu_exec *e, double loss, long hits, int n) {
    e->stats.loss_sum += loss;
    e->stats.correct += hits;
    e->stats.count += n;
}

// One SGD step: forward (training BN), loss (soft targets when the batch
// has them), backward, masked update.
static int cpu_train_step(void *st, const exec_batch *b, const exec_hparams *h, sc_err *err) {
    cpu_exec *e = st;
    const net *nt = e->nt;
    SC_TRY(cpu_forward(e, b, 1, err));
    const int last = nt->nlayers - 1;
    long hits = 0;
    double loss = b->soft ? soft_xent_cpu(b->n, nt->classes, e->act[last], b->soft, b->labels,
                                          1.0f / (float)b->n, e->slots[e->gslot[last]], &hits)
                          : softmax_xent_cpu(b->n, nt->classes, e->act[last], b->labels,
                                             h->label_smoothing, 1.0f / (float)b->n,
                                             e->slots[e->gslot[last]], &hits);
    for (int j = last; j >= 0; j--)
        if (e->gslot[j] >= 0)
            cpu_ops(&nt->layers[j])->backward(e, j, b->n, e->slots[e->gslot[j]]);
    sgd_step_cpu(nt->nparam, e->param, e->grad, e->mom, e->mask, h->lr, h->momentum,
                 h->weight_decay, h->nesterov);
    cpu_stats_add(e, loss, hits, b->n);
    return 0;
}

// Inference-mode forward; accumulates statistics and optionally copies logits.
static int cpu_eval_batch(void *st, const exec_batch *b, float smoothing, float *logits,
                          sc_err *err) {
    cpu_exec *e = st;
    const net *nt = e->nt;
    SC_TRY(cpu_forward(e, b, 0, err));
    const float *z = e->act[nt->nlayers - 1];  // (n, classes)
    long hits = 0;
    double loss = softmax_xent_cpu(b->n, nt->classes, z, b->labels, smoothing, 1.0f, NULL, &hits);
    cpu_stats_add(e, loss, hits, b->n);
    if (logits) memcpy(logits, z, (size_t)b->n * nt->classes * sizeof *logits);
    return 0;
}

// --- host copies ------------------------------------------------------------

// Returns and resets the accumulated statistics.
static int cpu_stats_take(void *st, exec_stats *out, sc_err *err) {
    cpu_exec *e = st;
    *out = e->stats;
    memset(&e->stats, 0, sizeof e->stats);
    return 0;
}

// Copies parameters, masks and BN buffers into the net.
static int cpu_read_net(void *st, sc_err *err) {
    cpu_exec *e = st;
    net *nt = e->nt;
    memcpy(nt->param, e->param, nt->nparam * sizeof *e->param);
    memcpy(nt->mask, e->mask, nt->nparam * sizeof *e->mask);
    memcpy(nt->buf, e->buf, nt->nbuf * sizeof *e->buf);
    return 0;
}

// Copies the net's parameters, masks and BN buffers in.
static int cpu_write_net(void *st, sc_err *err) {
    cpu_exec *e = st;
    const net *nt = e->nt;
    memcpy(e->param, nt->param, nt->nparam * sizeof *e->param);
    memcpy(e->mask, nt->mask, nt->nparam * sizeof *e->mask);
    memcpy(e->buf, nt->buf, nt->nbuf * sizeof *e->buf);
    return 0;
}

// Copies the momentum buffer out.
static int cpu_read_momentum(void *st, float *mom, sc_err *err) {
    cpu_exec *e = st;
    memcpy(mom, e->mom, e->nt->nparam * sizeof *mom);
    return 0;
}

// Copies a momentum buffer in.
static int cpu_write_momentum(void *st, const float *mom, sc_err *err) {
    cpu_exec *e = st;
    memcpy(e->mom, mom, e->nt->nparam * sizeof *mom);
    return 0;
}

// Copies the last step's gradient out (zeros before the first step).
static int cpu_read_grad(void *st, float *grad, sc_err *err) {
    cpu_exec *e = st;
    memcpy(grad, e->grad, e->nt->nparam * sizeof *grad);
    return 0;
}

// The CPU backend's device name.
static const char *cpu_device_name(const void *st) { return "cpu"; }

// --- table ------------------------------------------------------------------

static const exec_backend cpu_backend = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .train_step = cpu_train_step,
    .eval_batch = cpu_eval_batch,
    .stats_take = cpu_stats_take,
    .read_net = cpu_read_net,
    .write_net = cpu_write_net,
    .read_momentum = cpu_read_momentum,
    .write_momentum = cpu_write_momentum,
    .read_grad = cpu_read_grad,
    .device_name = cpu_device_name,
};

// The CPU backend; always present.
const exec_backend *exec_cpu_backend(void) { return &cpu_backend; }
