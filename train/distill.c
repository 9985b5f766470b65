// Knowledge distillation from a frozen teacher (train/distill.h).
#include "train/distill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The targets of n rows.
double distill_targets(const float *logits, const int *labels, int n, int k, float alpha, float *soft) {
    const double a = alpha;
    double ent = 0.0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * k;
        float *q = soft + (size_t)i * k;
        double mx = z[0], se = 0.0;
        for (int j = 1; j < k; j++) mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < k; j++) se += exp(z[j] - mx);
        for (int j = 0; j < k; j++) {
            q[j] = (float)(a * (j == labels[i]) + (1.0 - a) * exp(z[j] - mx) / se);
            if (q[j] > 0.0f) ent -= (double)q[j] * log((double)q[j]);
        }
    }
    return ent;
}

// The buffers of a teacher of `batch` x `classes`.
static int distill_buffers(distill *d, int batch, int classes, float alpha, sc_err *err) {
    if (!(alpha >= 0.0f && alpha <= 1.0f)) return sc_fail(err, "distillation: alpha %g is not in [0, 1]", alpha);
    d->alpha = alpha, d->batch = batch, d->classes = classes;
    const size_t nz = (size_t)batch * (size_t)classes;
    d->tlogits = malloc(nz * sizeof *d->tlogits);
    d->soft = malloc(nz * sizeof *d->soft);
    if (!d->tlogits || !d->soft) return sc_fail(err, "distillation: out of memory");
    return 0;
}

// An executor on a copy of nt.
exec *distill_teacher_create(const net *nt, sc_device dev, sc_precision prec, int batch, net **copy, sc_err *err) {
    *copy = distill_net_copy(nt, err);
    exec *e = *copy ? exec_create(*copy, dev, prec, batch, err) : NULL;
    if (!e) {
        net_free(*copy);
        *copy = NULL;
    }
    return e;
}

// A teacher on its own copy of nt.
int distill_open(distill *d, const net *nt, sc_device dev, sc_precision prec, int batch, float alpha,
                 sc_err *err) {
    memset(d, 0, sizeof *d);
    int rc = distill_buffers(d, batch, nt->classes, alpha, err);
    if (!rc && !(d->e = distill_teacher_create(nt, dev, prec, batch, &d->nt, err))) rc = -1;
    d->own_exec = 1;
    if (rc) distill_close(d);
    return rc;
}

// A teacher on a borrowed executor.
int distill_borrow(distill *d, exec *e, int batch, int classes, float alpha, sc_err *err) {
    memset(d, 0, sizeof *d);
    d->e = e;
    const int rc = distill_buffers(d, batch, classes, alpha, err);
    if (rc) distill_close(d);
    return rc;
}

// The teacher's targets for batch b.
int distill_batch(distill *d, const exec_batch *b, exec_batch *out, sc_err *err) {
    if (b->n > d->batch) return sc_fail(err, "distillation: batch of %d images (the teacher takes %d)", b->n, d->batch);
    SC_TRY(exec_eval_batch(d->e, b, 0.0f, d->tlogits, err));
    d->ent_sum += distill_targets(d->tlogits, b->labels, b->n, d->classes, d->alpha, d->soft);
    *out = *b;
    out->soft = d->soft;
    return 0;
}

// Frees the teacher's buffers, and its net and executor when owned.
void distill_close(distill *d) {
    if (d->own_exec) exec_free(d->e);
    net_free(d->nt);
    free(d->tlogits), free(d->soft);
    memset(d, 0, sizeof *d);
}

// A copy of nt.
net *distill_net_copy(const net *nt, sc_err *err) {
    net *cp = net_from_desc(nt->arch, nt->desc, nt->in_c, nt->in_h, nt->in_w, nt->classes, err);
    if (!cp) return NULL;
    if (cp->nparam != nt->nparam || cp->nbuf != nt->nbuf || cp->nlayers != nt->nlayers) {
        net_free(cp);
        sc_fail(err, "copy of %s: the description gives another net", nt->arch);
        return NULL;
    }
    memcpy(cp->in_mean, nt->in_mean, sizeof cp->in_mean);
    memcpy(cp->in_std, nt->in_std, sizeof cp->in_std);
    memcpy(cp->param, nt->param, nt->nparam * sizeof *cp->param);
    memcpy(cp->mask, nt->mask, nt->nparam * sizeof *cp->mask);
    memcpy(cp->buf, nt->buf, nt->nbuf * sizeof *cp->buf);
    return cp;
}
