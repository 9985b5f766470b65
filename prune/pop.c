// The population of the pruning search on the host, and its state file.
#include "pop.h"
#include "runtime/atomic.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_MAGIC "SCPRUNE1"
#define STATE_VERSION 3u  // 2: predicted latency in the history; 3: measured latency checks

// --- allocation -------------------------------------------------------------

// Allocates the arrays of one solution; returns -1 when out of memory.
static int sol_alloc(prune_sol *s, int L, size_t nparam, size_t nbuf) {
    memset(s, 0, sizeof *s);
    s->sparsity = calloc((size_t)L, sizeof *s->sparsity);
    s->genome = calloc((size_t)L, sizeof *s->genome);
    s->param = calloc(nparam, sizeof *s->param);
    s->mask = calloc(nparam, sizeof *s->mask);
    s->mom = calloc(nparam, sizeof *s->mom);
    s->buf = calloc(nbuf ? nbuf : 1, sizeof *s->buf);
    s->acc = s->acc_prev = -1.0;
    s->cluster = -1;
    return s->sparsity && s->genome && s->param && s->mask && s->mom && s->buf ? 0 : -1;
}

// Frees the arrays of one solution.
static void sol_free(prune_sol *s) {
    free(s->sparsity);
    free(s->genome);
    free(s->param);
    free(s->mask);
    free(s->mom);
    free(s->buf);
}

// Allocates a population of n solutions.
prune_pop *prune_pop_create(int n, int L, const net *nt, sc_err *err) {
    if (n < 1 || L < 1) {
        sc_fail(err, "population needs at least one solution and one layer (%d, %d)", n, L);
        return NULL;
    }
    prune_pop *p = calloc(1, sizeof *p);
    if (!p) goto oom;
    p->n = n;
    p->L = L;
    p->nparam = nt->nparam;
    p->nbuf = nt->nbuf;
    p->sol = calloc((size_t)n, sizeof *p->sol);
    p->snap = calloc((size_t)n, sizeof *p->snap);
    p->sens = calloc((size_t)L, sizeof *p->sens);
    if (!p->sol || !p->snap || !p->sens) goto oom;
    for (int i = 0; i < n; i++) {
        if (sol_alloc(&p->sol[i], L, p->nparam, p->nbuf)) goto oom;
        if (sol_alloc(&p->snap[i], L, p->nparam, p->nbuf)) goto oom;
        p->sol[i].stream = i;
    }
    return p;
oom:
    prune_pop_free(p);
    sc_fail(err, "out of memory for a population of %d (%zu parameters each)", n,
            nt->nparam);
    return NULL;
}

// Frees a population.
void prune_pop_free(prune_pop *p) {
    if (!p) return;
    for (int i = 0; p->sol && i < p->n; i++) sol_free(&p->sol[i]);
    for (int i = 0; p->snap && i < p->n; i++) sol_free(&p->snap[i]);
    free(p->sol);
    free(p->snap);
    free(p->sens);
    free(p->hist);
    free(p);
}

// --- moving solutions -------------------------------------------------------

// Copies of at least this many bytes are split over the OpenMP threads in
// blocks of COPY_BLOCK bytes (a plain copy: any split gives the same bytes).
#define COPY_MIN (4u << 20)
#define COPY_BLOCK (1u << 20)

// memcpy of n bytes, spread over the threads when large.
static void pop_copy(void *dst, const void *src, size_t n) {
    if (n < COPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    char *d = dst;
    const char *s = src;
    long nb = (long)((n + COPY_BLOCK - 1) / COPY_BLOCK);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < nb; b++) {
        size_t at = (size_t)b * COPY_BLOCK, m = n - at < COPY_BLOCK ? n - at : COPY_BLOCK;
        memcpy(d + at, s + at, m);
    }
}

// Copies the sparsities and genome of one solution into another.
static void sol_copy_small(prune_sol *d, const prune_sol *s, int L) {
    memcpy(d->sparsity, s->sparsity, (size_t)L * sizeof *d->sparsity);
    memcpy(d->genome, s->genome, (size_t)L * sizeof *d->genome);
}

// Copies the weights, masks, buffers and momentum of one solution into another.
static void sol_copy_arrays(prune_sol *d, const prune_sol *s, size_t np, size_t nb) {
    pop_copy(d->param, s->param, np * sizeof *d->param);
    pop_copy(d->mask, s->mask, np * sizeof *d->mask);
    pop_copy(d->mom, s->mom, np * sizeof *d->mom);
    pop_copy(d->buf, s->buf, nb * sizeof *d->buf);
}

// Net (and momentum) -> solution i.
void prune_sol_store(prune_pop *p, int i, const net *nt, const float *mom) {
    prune_sol *s = &p->sol[i];
    pop_copy(s->param, nt->param, p->nparam * sizeof *s->param);
    pop_copy(s->mask, nt->mask, p->nparam * sizeof *s->mask);
    pop_copy(s->buf, nt->buf, p->nbuf * sizeof *s->buf);
    if (mom) pop_copy(s->mom, mom, p->nparam * sizeof *s->mom);
}

// Solution i -> net (and momentum).
void prune_sol_load(const prune_pop *p, int i, net *nt, float *mom) {
    const prune_sol *s = &p->sol[i];
    pop_copy(nt->param, s->param, p->nparam * sizeof *s->param);
    pop_copy(nt->mask, s->mask, p->nparam * sizeof *s->mask);
    pop_copy(nt->buf, s->buf, p->nbuf * sizeof *s->buf);
    if (mom) pop_copy(mom, s->mom, p->nparam * sizeof *s->mom);
}

// Appends one entry of array work to the population's log.
static void defer_add(prune_pop *p, int kind, int dst, int src) {
    prune_oplog *g = p->defer;
    if (g->n >= g->cap) {
        g->lost++;
        return;
    }
    g->op[g->n++] = (prune_op){.kind = kind, .dst = dst, .src = src};
}

// Copies solution src into dst; dst keeps its own data stream.
void prune_sol_copy(prune_pop *p, int dst, int src) {
    if (dst == src) return;
    prune_sol *d = &p->sol[dst];
    const prune_sol *s = &p->sol[src];
    sol_copy_small(d, s, p->L);
    if (p->defer) defer_add(p, PRUNE_OP_COPY, dst, src);
    else sol_copy_arrays(d, s, p->nparam, p->nbuf);
    d->acc = s->acc;
    d->acc_prev = s->acc_prev;
    d->age = 0;
    d->fails = 0;
    d->cluster = s->cluster;
}

// Solution i's small fields -> its snapshot.
void prune_sol_snapshot_small(prune_pop *p, int i) {
    prune_sol *d = &p->snap[i];
    const prune_sol *s = &p->sol[i];
    sol_copy_small(d, s, p->L);
    d->acc = s->acc;
    d->acc_prev = s->acc_prev;
}

// Solution i -> its snapshot.
void prune_sol_snapshot(prune_pop *p, int i) {
    prune_sol_snapshot_small(p, i);
    sol_copy_arrays(&p->snap[i], &p->sol[i], p->nparam, p->nbuf);
}

// Snapshot -> solution i; the genome (the caller's to change) and the data
// stream position (images seen stay seen) are kept.
void prune_sol_rewind(prune_pop *p, int i) {
    prune_sol *d = &p->sol[i];
    const prune_sol *s = &p->snap[i];
    memcpy(d->sparsity, s->sparsity, (size_t)p->L * sizeof *d->sparsity);
    if (p->defer) defer_add(p, PRUNE_OP_REWIND, i, i);
    else prune_sol_arrays_rewind(p, i);
    d->acc = s->acc;
    d->acc_prev = s->acc_prev;
    d->age = 0;
}

// The arrays of solution src -> solution dst.
void prune_sol_arrays_copy(prune_pop *p, int dst, int src) {
    if (dst != src) sol_copy_arrays(&p->sol[dst], &p->sol[src], p->nparam, p->nbuf);
}

// The arrays of solution i's snapshot -> solution i.
void prune_sol_arrays_rewind(prune_pop *p, int i) {
    sol_copy_arrays(&p->sol[i], &p->snap[i], p->nparam, p->nbuf);
}

// Appends one history row, growing the array.
int prune_pop_add_hist(prune_pop *p, const prune_hist *h, sc_err *err) {
    if (p->nhist == p->cap_hist) {
        int cap = p->cap_hist ? 2 * p->cap_hist : 64;
        prune_hist *nh = realloc(p->hist, (size_t)cap * sizeof *nh);
        if (!nh) return sc_fail(err, "out of memory (history)");
        p->hist = nh;
        p->cap_hist = cap;
    }
    p->hist[p->nhist++] = *h;
    return 0;
}

// --- state file: checksummed stream -----------------------------------------

typedef struct {
    FILE *f;
    uint64_t hash;  // FNV-1a 64 of every byte so far
    int bad;        // an I/O call failed or the file ended early
} sstream;

// Folds bytes into the running FNV-1a hash.
static void ss_hash(sstream *s, const void *data, size_t n) {
    const unsigned char *b = data;
    uint64_t h = s->hash;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    s->hash = h;
}

// Writes n bytes and hashes them.
static void ss_put(sstream *s, const void *data, size_t n) {
    if (s->bad || n == 0) return;
    if (fwrite(data, 1, n, s->f) != n) s->bad = 1;
    ss_hash(s, data, n);
}

// Reads n bytes and hashes them.
static void ss_get(sstream *s, void *data, size_t n) {
    if (s->bad || n == 0) return;
    if (fread(data, 1, n, s->f) != n) {
        s->bad = 1;
        memset(data, 0, n);
        return;
    }
    ss_hash(s, data, n);
}

// Writes a mask of n floats as bits.
static void ss_put_mask(sstream *s, const float *mask, size_t n) {
    unsigned char byte[4096];
    for (size_t i = 0; i < n; i += 8 * sizeof byte) {
        size_t m = n - i < 8 * sizeof byte ? n - i : 8 * sizeof byte;
        memset(byte, 0, sizeof byte);
        for (size_t j = 0; j < m; j++)
            if (mask[i + j] != 0.0f) byte[j / 8] |= (unsigned char)(1u << (j % 8));
        ss_put(s, byte, (m + 7) / 8);
    }
}

// Reads a mask of n floats written as bits.
static void ss_get_mask(sstream *s, float *mask, size_t n) {
    unsigned char byte[4096];
    for (size_t i = 0; i < n; i += 8 * sizeof byte) {
        size_t m = n - i < 8 * sizeof byte ? n - i : 8 * sizeof byte;
        ss_get(s, byte, (m + 7) / 8);
        for (size_t j = 0; j < m; j++) mask[i + j] = (byte[j / 8] >> (j % 8)) & 1u ? 1.0f : 0.0f;
    }
}

// --- state file: layout -----------------------------------------------------

typedef struct {
    char magic[8];
    uint32_t version, hist_size;
    int32_t n, L, iter, best, nhist, pad;
    uint64_t nparam, nbuf, config_len;
    int64_t images;
    double seconds;
} state_head;

// Writes (wr = 1) or reads n bytes.
static void ss_io(sstream *s, void *data, size_t n, int wr) {
    if (wr) ss_put(s, data, n);
    else ss_get(s, data, n);
}

// Writes (wr = 1) or reads one solution's fields and arrays.
static void ss_sol(sstream *s, prune_sol *x, int L, size_t np, size_t nb, int wr) {
    int32_t ints[4] = {x->stream, x->age, x->fails, x->cluster};
    int64_t batches = x->batches;
    ss_io(s, &x->acc, sizeof x->acc, wr);
    ss_io(s, &x->acc_prev, sizeof x->acc_prev, wr);
    ss_io(s, &batches, sizeof batches, wr);
    ss_io(s, ints, sizeof ints, wr);
    ss_io(s, x->sparsity, (size_t)L * sizeof *x->sparsity, wr);
    ss_io(s, x->genome, (size_t)L * sizeof *x->genome, wr);
    ss_io(s, x->param, np * sizeof *x->param, wr);
    if (wr) ss_put_mask(s, x->mask, np);
    else ss_get_mask(s, x->mask, np);
    ss_io(s, x->mom, np * sizeof *x->mom, wr);
    ss_io(s, x->buf, nb * sizeof *x->buf, wr);
    x->batches = batches;
    x->stream = ints[0];
    x->age = ints[1];
    x->fails = ints[2];
    x->cluster = ints[3];
}

// Writes the whole state through the stream.
static void state_write(sstream *s, const prune_pop *p, const char *config) {
    state_head h = {.version = STATE_VERSION, .hist_size = sizeof(prune_hist), .n = p->n,
                    .L = p->L, .iter = p->iter, .best = p->best, .nhist = p->nhist,
                    .nparam = p->nparam, .nbuf = p->nbuf,
                    .config_len = config ? strlen(config) : 0, .images = p->images,
                    .seconds = p->seconds};
    memcpy(h.magic, STATE_MAGIC, 8);
    ss_put(s, &h, sizeof h);
    ss_put(s, config, h.config_len);
    ss_put(s, p->sens, (size_t)p->L * sizeof *p->sens);
    ss_put(s, p->hist, (size_t)p->nhist * sizeof *p->hist);
    for (int i = 0; i < p->n; i++) ss_sol(s, &p->sol[i], p->L, p->nparam, p->nbuf, 1);
    uint64_t sum = s->hash;
    ss_put(s, &sum, sizeof sum);
}

// Saves the state atomically (runtime/atomic.h).
int prune_state_save(const char *path, const prune_pop *p, const char *config, sc_err *err) {
    sc_atomic a;
    SC_TRY(sc_atomic_begin(&a, path, err));
    sstream s = {.f = sc_atomic_fopen(&a, "wb", err), .hash = 1469598103934665603ull};
    if (!s.f) return -1;
    state_write(&s, p, config);
    int rc = s.bad ? sc_fail(err, "cannot write state file (%s, %s)", path, strerror(errno)) : 0;
    return sc_atomic_fclose(&a, s.f, rc, err);
}

// Reads and checks the header against the net; fills h.
static int state_head_read(sstream *s, const char *path, const net *nt, int L, state_head *h,
                           sc_err *err) {
    ss_get(s, h, sizeof *h);
    if (s->bad || memcmp(h->magic, STATE_MAGIC, 8) != 0)
        return sc_fail(err, "not a prune state file (%s)", path);
    if (h->version != STATE_VERSION || h->hist_size != sizeof(prune_hist))
        return sc_fail(err, "prune state file of another version (%s, %u)", path, h->version);
    if (h->nparam != nt->nparam || h->nbuf != nt->nbuf || h->L != L)
        return sc_fail(err, "prune state file is for another net (%s, %llu parameters)", path,
                       (unsigned long long)h->nparam);
    if (h->n < 1 || h->n > 100000 || h->nhist < 0 || h->nhist > 10000000 ||
        h->config_len > (1u << 24))
        return sc_fail(err, "corrupt prune state file (%s)", path);
    return 0;
}

// Reads the body after the header into a new population.
static prune_pop *state_body_read(sstream *s, const state_head *h, const net *nt, char **config,
                                  sc_err *err) {
    prune_pop *p = prune_pop_create(h->n, h->L, nt, err);
    char *cfg = calloc(h->config_len + 1, 1);
    if (!p || !cfg) {
        free(cfg);
        prune_pop_free(p);
        if (p) sc_fail(err, "out of memory");
        return NULL;
    }
    p->iter = h->iter;
    p->best = h->best;
    p->images = h->images;
    p->seconds = h->seconds;
    ss_get(s, cfg, h->config_len);
    ss_get(s, p->sens, (size_t)p->L * sizeof *p->sens);
    p->hist = calloc((size_t)h->nhist + 1, sizeof *p->hist);
    p->nhist = p->cap_hist = p->hist ? h->nhist : 0;
    if (p->hist) ss_get(s, p->hist, (size_t)h->nhist * sizeof *p->hist);
    else s->bad = 1;
    for (int i = 0; i < p->n; i++) ss_sol(s, &p->sol[i], p->L, p->nparam, p->nbuf, 0);
    *config = cfg;
    return p;
}

// Loads a state file and verifies its checksum.
prune_pop *prune_state_load(const char *path, const net *nt, int L, char **config, sc_err *err) {
    sstream s = {.f = sc_input_fopen(path, "prune state file", err),
                 .hash = 1469598103934665603ull};
    state_head h;
    *config = NULL;
    if (!s.f) return NULL;
    prune_pop *p = NULL;
    if (state_head_read(&s, path, nt, L, &h, err) == 0) p = state_body_read(&s, &h, nt, config, err);
    if (p) {
        uint64_t want = s.hash, got = 0;
        ss_get(&s, &got, sizeof got);
        char extra;
        if (s.bad || got != want || fread(&extra, 1, 1, s.f) == 1 || p->best < 0 ||
            p->best >= p->n) {
            sc_fail(err, "corrupt or truncated prune state file (%s)", path);
            prune_pop_free(p);
            free(*config);
            *config = NULL;
            p = NULL;
        }
    }
    fclose(s.f);
    return p;
}

// Reads only the settings text of a state file (checked in full by
// prune_state_load later).
int prune_state_config(const char *path, char **config, sc_err *err) {
    sstream s = {.f = sc_input_fopen(path, "prune state file", err),
                 .hash = 1469598103934665603ull};
    state_head h;
    *config = NULL;
    if (!s.f) return -1;
    ss_get(&s, &h, sizeof h);
    int rc = 0;
    if (s.bad || memcmp(h.magic, STATE_MAGIC, 8) != 0) rc = sc_fail(err, "not a prune state file (%s)", path);
    else if (h.config_len > (1u << 24)) rc = sc_fail(err, "corrupt prune state file (%s)", path);
    char *cfg = rc ? NULL : calloc(h.config_len + 1, 1);
    if (!rc && !cfg) rc = sc_fail(err, "out of memory");
    if (!rc) ss_get(&s, cfg, h.config_len);
    if (!rc && s.bad) rc = sc_fail(err, "truncated prune state file (%s)", path);
    fclose(s.f);
    if (rc) free(cfg);
    else *config = cfg;
    return rc;
}
