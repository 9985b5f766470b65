// The deploy plan on the CPU (runtime/deploy_plan.h): convolutions and
// linear layers with the direct sparse reference (spconv_forward_cpu), the
// other ops with kernels/deploy_ops_cpu.c. One zero-initialised buffer per
// tensor; nothing ever writes a border, so borders stay zero. This is the
// reference the GPU path and the accuracy check are measured against.
#include <stdlib.h>
#include <string.h>

#include "kernels/actconv.h"
#include "kernels/deploy_ops.h"
#include "kernels/spconv.h"
#include "runtime/deploy_plan.h"

struct deploy_cpu {
    const deploy_plan *p;
    int max_n;
    float **t;  // per tensor (max_n, c, h + 2 border, w + 2 border)
};

// --- create / free ----------------------------------------------------------

// Frees a CPU executor (NULL is fine).
void deploy_cpu_free(deploy_cpu *c) {
    if (!c) return;
    for (int i = 0; c->t && i < c->p->ntensors; i++) free(c->t[i]);
    free(c->t), free(c);
}

// Allocates every tensor for up to max_n images.
deploy_cpu *deploy_cpu_create(const deploy_plan *p, int max_n, sc_err *err) {
    if (max_n < 1) {
        sc_fail(err, "bad batch size (%d)", max_n);
        return NULL;
    }
    deploy_cpu *c = calloc(1, sizeof *c);
    if (!c || !(c->t = calloc((size_t)p->ntensors, sizeof *c->t))) {
        free(c);
        sc_fail(err, "out of memory");
        return NULL;
    }
    c->p = p, c->max_n = max_n;
    for (int i = 0; i < p->ntensors; i++) {
        c->t[i] = calloc((size_t)max_n * deploy_tensor_elems(p, i), sizeof(float));
        if (!c->t[i]) {
            deploy_cpu_free(c);
            sc_fail(err, "out of memory (activations for %d images)", max_n);
            return NULL;
        }
    }
    return c;
}

// --- running ----------------------------------------------------------------

// Runs op i on the first n images.
void deploy_cpu_op(deploy_cpu *c, int i, int n) {
    const deploy_plan *p = c->p;
    const deploy_op *op = &p->ops[i];
    const dops_geom gx = deploy_tensor_geom(p, op->in, n), gy = deploy_tensor_geom(p, op->out, n);
    const float *x = c->t[op->in];
    float *y = c->t[op->out];
    switch (op->kind) {
    case DOP_CONV: spconv_forward_cpu(&op->desc, n, x, y); break;
    case DOP_ADD: {
        const dops_geom g2 = deploy_tensor_geom(p, op->in2, n);
        dops_add_cpu(&gx, x, &g2, c->t[op->in2], &gy, y, op->relu);
        break;
    }
    case DOP_RELU: dops_relu_cpu(&gx, x, &gy, y); break;
    case DOP_AFFINE: dops_affine_cpu(&gx, x, op->scale, op->shift, &gy, y, op->relu); break;
    case DOP_MAXPOOL:
    case DOP_AVGPOOL:
        dops_pool_cpu(&gx, x, op->k, op->stride, op->pad, op->kind == DOP_AVGPOOL, &gy, y);
        break;
    case DOP_GAP: dops_gap_cpu(&gx, x, &gy, y); break;
    case DOP_COPY: dops_copy_cpu(&gx, x, &gy, y); break;
    case DOP_CONCAT:
        for (int k = 0, off = 0; k < op->nin; k++) {
            const dops_geom gk = deploy_tensor_geom(p, op->ins[k], n);
            dops_concat_cpu(&gk, c->t[op->ins[k]], off, &gy, y);
            off += gk.c;
        }
        break;
    }
}

// Normalises n images into the input tensor, runs every op, copies the logits.
int deploy_cpu_forward(deploy_cpu *c, int n, const uint8_t *images, float *logits,
                       sc_err *err) {
    const deploy_plan *p = c->p;
    if (n < 1 || n > c->max_n)
        return sc_fail(err, "batch of %d images (the plan takes 1 to %d)", n, c->max_n);
    const net *nt = p->m->nt;
    const dops_geom gin = deploy_tensor_geom(p, p->input, n);
    dops_normalize_cpu(&gin, images, nt->in_mean, nt->in_std, c->t[p->input]);
    for (int i = 0; i < p->nops; i++) deploy_cpu_op(c, i, n);
    if (logits) memcpy(logits, c->t[p->output], (size_t)n * nt->classes * sizeof *logits);
    return 0;
}

// Adds to zeros[i] and elems[i] the zeros and the elements of the input
// interior of every conv/linear op i over the first n images of the last forward.
void deploy_cpu_act_zeros(const deploy_cpu *c, int n, double *zeros, double *elems) {
    for (int i = 0; i < c->p->nops; i++) {
        const deploy_op *op = &c->p->ops[i];
        if (op->kind != DOP_CONV) continue;
        const double e = (double)n * op->desc.C * op->desc.H * op->desc.W;
        zeros[i] += actconv_zero_fraction(&op->desc, n, c->t[op->in]) * e;
        elems[i] += e;
    }
}

// Tensor t's buffer.
float *deploy_cpu_tensor(const deploy_cpu *c, int t) { return c->t[t]; }

// Top-1 hits of logits (n, classes) against labels (first maximum wins).
long deploy_count_correct(int n, int classes, const float *logits, const int *labels) {
    long hits = 0;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (row[k] > row[best]) best = k;
        hits += best == labels[i];
    }
    return hits;
}
