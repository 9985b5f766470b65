// The population spread over ranks: assignment and array moves. See
// prune/pop_dist.h and the MPI section of docs/prune.md.
#include "pop_dist.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// --- assignment -----------------------------------------------------------------

// Contiguous home shares.
void prune_pop_home(int *owner, int n, int size) {
    for (int i = 0; i < n; i++) owner[i] = (int)((long)i * size / n);
}

// Per-rank quotas for na solutions: na / size each, one more for the
// (na % size) ranks that hold most of them now (lower rank first on ties).
static void assign_quota(const int *held, int size, int na, int *quota) {
    int extra = na % size;
    for (int r = 0; r < size; r++) quota[r] = na / size;
    for (int e = 0; e < extra; e++) {
        int b = -1;
        for (int r = 0; r < size; r++)
            if (quota[r] == na / size && (b < 0 || held[r] > held[b])) b = r;
        quota[b]++;
    }
}

// Balanced assignment keeping owners where possible (see the header).
int prune_pop_assign(const int *owner, const int *active, int n, int size, int *want) {
    int *held = calloc((size_t)size * 3, sizeof *held), *quota = held + size, *cnt = quota + size;
    int na = 0, moves = 0;
    memcpy(want, owner, (size_t)n * sizeof *want);
    if (!held) return 0;  // out of memory: keep every owner (correct, unbalanced)
    for (int i = 0; i < n; i++)
        if (active[i] && owner[i] >= 0 && owner[i] < size) held[owner[i]]++, na++;
        else if (active[i]) na++;
    assign_quota(held, size, na, quota);
    for (int i = 0; i < n; i++) {  // keep what fits
        int o = owner[i];
        if (!active[i]) continue;
        if (o >= 0 && o < size && cnt[o] < quota[o]) cnt[o]++;
        else want[i] = -1;
    }
    for (int i = 0, r = 0; i < n; i++) {  // the rest to the ranks with room
        if (!active[i] || want[i] >= 0) continue;
        while (cnt[r] >= quota[r]) r++;
        want[i] = r;
        cnt[r]++;
        moves++;
    }
    free(held);
    return moves;
}

// --- arrays of one solution ---------------------------------------------------------

// Sends the arrays of solution i to rank `to`.
static int arrays_send(dist *d, const prune_pop *p, int i, int to, sc_err *err) {
    const prune_sol *s = &p->sol[i];
    size_t np = p->nparam * sizeof(float), nb = p->nbuf * sizeof(float);
    SC_TRY(dist_send(d, s->param, np, to, err));
    SC_TRY(dist_send(d, s->mask, np, to, err));
    SC_TRY(dist_send(d, s->mom, np, to, err));
    return dist_send(d, s->buf, nb, to, err);
}

// Receives the arrays of solution i from rank `from`.
static int arrays_recv(dist *d, prune_pop *p, int i, int from, sc_err *err) {
    prune_sol *s = &p->sol[i];
    size_t np = p->nparam * sizeof(float), nb = p->nbuf * sizeof(float);
    SC_TRY(dist_recv(d, s->param, np, from, err));
    SC_TRY(dist_recv(d, s->mask, np, from, err));
    SC_TRY(dist_recv(d, s->mom, np, from, err));
    return dist_recv(d, s->buf, nb, from, err);
}

// Copies the arrays of solution src (held by rank a) into solution dst on
// rank b: a local copy when a == b, else a send and a receive.
static int arrays_move(dist *d, prune_pop *p, int dst, int src, int a, int b, sc_err *err) {
    int me = dist_rank(d);
    if (a == b) {
        if (me == a) prune_sol_arrays_copy(p, dst, src);
        return 0;
    }
    if (me == a) return arrays_send(d, p, src, b, err);
    if (me == b) return arrays_recv(d, p, dst, a, err);
    return 0;
}

// --- moves, replay, gather ------------------------------------------------------------

// Moves solutions to their new owners.
int prune_pop_move(dist *d, prune_pop *p, int *owner, const int *want, sc_err *err) {
    for (int i = 0; i < p->n; i++) {
        if (want[i] == owner[i]) continue;
        SC_TRY(arrays_move(d, p, i, i, owner[i], want[i], err));
        owner[i] = want[i];
    }
    return 0;
}

// Replays the log in order.
int prune_pop_replay(dist *d, prune_pop *p, const int *owner, prune_oplog *log, sc_err *err) {
    int me = dist_rank(d);
    if (log->lost) {
        int lost = log->lost;
        log->n = log->lost = 0;
        return sc_fail(err, "selection log overflow (%d entries lost)", lost);
    }
    for (int k = 0; k < log->n; k++) {
        const prune_op *o = &log->op[k];
        if (o->kind == PRUNE_OP_REWIND) {
            if (owner[o->dst] == me) prune_sol_arrays_rewind(p, o->dst);
        } else {
            SC_TRY(arrays_move(d, p, o->dst, o->src, owner[o->src], owner[o->dst], err));
        }
    }
    log->n = 0;
    return 0;
}

// Solution i's arrays from its owner to rank `to`.
int prune_pop_fetch(dist *d, prune_pop *p, const int *owner, int i, int to, sc_err *err) {
    return arrays_move(d, p, i, i, owner[i], to, err);
}

// Every solution's arrays to rank 0.
int prune_pop_gather(dist *d, prune_pop *p, const int *owner, sc_err *err) {
    for (int i = 0; i < p->n; i++) SC_TRY(prune_pop_fetch(d, p, owner, i, 0, err));
    return 0;
}

// Every solution's arrays from rank 0 to its owner.
int prune_pop_scatter(dist *d, prune_pop *p, const int *owner, sc_err *err) {
    for (int i = 0; i < p->n; i++) SC_TRY(arrays_move(d, p, i, i, 0, owner[i], err));
    return 0;
}

// --- sharing the small fields ------------------------------------------------------------

typedef struct {
    unsigned char *b;
    size_t n, cap;  // bytes used (written or read), room
    int rd;         // 1: reading from b, 0: appending to it
    int bad;        // out of memory or read past the end
} pack;

// Appends or reads `bytes` bytes.
static void pk_io(pack *k, void *x, size_t bytes) {
    if (k->bad || bytes == 0) return;
    if (k->n + bytes > k->cap) {
        size_t cap = 2 * (k->n + bytes) + 4096;
        unsigned char *nb = k->rd ? NULL : realloc(k->b, cap);
        if (!nb) {
            k->bad = 1;
            return;
        }
        k->b = nb;
        k->cap = cap;
    }
    if (k->rd) memcpy(x, k->b + k->n, bytes);
    else memcpy(k->b + k->n, x, bytes);
    k->n += bytes;
}

typedef struct {
    int32_t n, L, iter, best, nhist, pad;
    int64_t images;
    double seconds;
    uint64_t config_len;
} share_head;

// Writes or reads every small field after the header.
static void pk_body(pack *k, prune_pop *p, char *config, size_t config_len) {
    pk_io(k, config, config_len);
    pk_io(k, p->sens, (size_t)p->L * sizeof *p->sens);
    pk_io(k, p->hist, (size_t)p->nhist * sizeof *p->hist);
    for (int i = 0; i < p->n; i++) {
        prune_sol *s = &p->sol[i];
        pk_io(k, &s->acc, sizeof s->acc);
        pk_io(k, &s->acc_prev, sizeof s->acc_prev);
        pk_io(k, &s->batches, sizeof s->batches);
        pk_io(k, &s->stream, sizeof s->stream);
        pk_io(k, &s->age, sizeof s->age);
        pk_io(k, &s->fails, sizeof s->fails);
        pk_io(k, &s->cluster, sizeof s->cluster);
        pk_io(k, s->sparsity, (size_t)p->L * sizeof *s->sparsity);
        pk_io(k, s->genome, (size_t)p->L * sizeof *s->genome);
    }
}

// Rank 0: the header and body of its population into k.
static void share_pack(pack *k, prune_pop *p, char *config) {
    share_head h = {.n = p->n, .L = p->L, .iter = p->iter, .best = p->best, .nhist = p->nhist,
                    .images = p->images, .seconds = p->seconds,
                    .config_len = config ? strlen(config) : 0};
    pk_io(k, &h, sizeof h);
    pk_body(k, p, config, h.config_len);
}

// Other ranks: a new population and settings text from k.
static prune_pop *share_unpack(pack *k, const net *nt, char **config, sc_err *err) {
    share_head h;
    pk_io(k, &h, sizeof h);
    prune_pop *p = k->bad ? NULL : prune_pop_create(h.n, h.L, nt, err);
    if (!p) return NULL;
    p->iter = h.iter;
    p->best = h.best;
    p->images = h.images;
    p->seconds = h.seconds;
    p->hist = calloc((size_t)h.nhist + 1, sizeof *p->hist);
    p->nhist = p->cap_hist = h.nhist;
    *config = calloc(h.config_len + 1, 1);
    if (!p->hist || !*config) {
        prune_pop_free(p);
        free(*config);
        *config = NULL;
        sc_fail(err, "out of memory");
        return NULL;
    }
    pk_body(k, p, *config, h.config_len);
    return p;
}

// Rank 0's small fields to every rank.
int prune_pop_share(dist *d, prune_pop **p, const net *nt, char **config, sc_err *err) {
    if (dist_size(d) < 2) return 0;
    pack k = {0};
    uint64_t len = 0;
    int me = dist_rank(d);
    if (me == 0) share_pack(&k, *p, *config);
    len = k.bad ? 0 : k.n;
    SC_TRY(dist_bcast(d, &len, sizeof len, 0, err));
    if (len == 0) return sc_fail(err, "out of memory (sharing the population)");
    if (me != 0 && !(k.b = malloc(len))) return sc_fail(err, "out of memory (%llu bytes)", (unsigned long long)len);
    k.cap = len;
    int rc = dist_bcast(d, k.b, len, 0, err);
    if (!rc && me != 0) {
        k.rd = 1;
        k.n = 0;
        *config = NULL;
        *p = share_unpack(&k, nt, config, err);
        rc = *p ? 0 : -1;
        if (!rc && k.bad) rc = sc_fail(err, "short population message (%llu bytes)", (unsigned long long)len);
    }
    free(k.b);
    return rc;
}
