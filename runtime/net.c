// Network graph: parses the plain-text description into layers, infers
// shapes, lays out parameter tensors in flat buffers, initialises weights.
#include "net.h"
#include "atomic.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Bounds on what a description (or a file's attributes) may ask for: every
// product of sizes is formed in 64 bits and checked against these before it
// sizes memory.
#define NET_MAX_LAYERS 4096              // layers in one description
#define NET_MAX_ACT (1LL << 28)          // floats of one layer's output per image
#define NET_MAX_PARAMS (1LL << 31)       // floats of all parameters (8 GiB)

// --- parsing helpers --------------------------------------------------------

// Splits one description line into kind, positionals and key=value pairs.
static int line_split(char *text, op_line *dl, int lineno, sc_err *err) {
    memset(dl, 0, sizeof *dl);
    char *save = NULL;
    char *tok = strtok_r(text, " \t\r", &save);
    if (!tok) return 0;
    snprintf(dl->kind, sizeof dl->kind, "%s", tok);
    while ((tok = strtok_r(NULL, " \t\r", &save))) {
        char *eq = strchr(tok, '=');
        if (strlen(tok) >= 64) return sc_fail(err, "line %d: token too long (%.20s...)", lineno, tok);
        if (eq) {
            if (dl->nkv == 8) return sc_fail(err, "line %d: too many options", lineno);
            *eq = 0;
            snprintf(dl->key[dl->nkv], 16, "%s", tok);
            snprintf(dl->val[dl->nkv], 64, "%s", eq + 1);
            dl->nkv++;
        } else {
            if (dl->npos == 4) return sc_fail(err, "line %d: too many values", lineno);
            snprintf(dl->pos[dl->npos++], 64, "%s", tok);
        }
    }
    return 1;
}

// Checks that every option on the line is one the layer kind accepts.
static int kv_check(const op_line *dl, const char *allowed, int lineno, sc_err *err) {
    for (int i = 0; i < dl->nkv; i++) {
        char pat[20];
        snprintf(pat, sizeof pat, " %s ", dl->key[i]);
        if (!strstr(allowed, pat))
            return sc_fail(err, "line %d: unknown option %s= for %s", lineno, dl->key[i], dl->kind);
    }
    return 0;
}

// --- building ---------------------------------------------------------------

struct op_build {
    net *nt;
    int cap_layers, cap_tensors;
};
typedef op_build builder;

// The net being built.
net *op_build_net(op_build *b) { return b->nt; }

// Adds a parameter tensor of the given dims to the layout; returns its index.
int op_tensor_add(builder *b, int layer, const char *suffix, ptensor_kind kind, int ndim,
                  const int *dims, sc_err *err) {
    net *nt = b->nt;
    if (nt->ntensors == b->cap_tensors) {
        int cap = b->cap_tensors ? 2 * b->cap_tensors : 64;
        ptensor *t = realloc(nt->tensors, (size_t)cap * sizeof *t);
        if (!t) return sc_fail(err, "out of memory");
        nt->tensors = t;
        b->cap_tensors = cap;
    }
    ptensor *t = &nt->tensors[nt->ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s.%s", nt->layers[layer].name, suffix);
    t->kind = kind;
    t->layer = layer;
    t->ndim = ndim;
    long long count = 1;
    for (int i = 0; i < ndim; i++) {
        t->dims[i] = dims[i];
        count *= dims[i];
        if (count > NET_MAX_PARAMS)
            return sc_fail(err, "tensor %s is too large (over %lld values)", t->name,
                           NET_MAX_PARAMS);
    }
    t->count = (size_t)count;
    if ((long long)(nt->nparam + nt->nbuf) + count > NET_MAX_PARAMS)
        return sc_fail(err, "the net has too many parameters (over %lld at %s)", NET_MAX_PARAMS,
                       t->name);
    t->trainable = kind != PT_MEAN && kind != PT_VAR;
    if (t->trainable) {
        t->offset = nt->nparam;
        nt->nparam += t->count;
    } else {
        t->offset = nt->nbuf;
        nt->nbuf += t->count;
    }
    return nt->ntensors++;
}

// Parses the kind-specific part of one layer line into L through its
// registry row, then adds the tensors the layer owns.
static int layer_parse(builder *b, layer *L, const op_line *dl, int lineno, sc_err *err) {
    const int k = op_lookup(dl->kind);
    if (k < 0) return sc_fail(err, "line %d: unknown layer kind (%s)", lineno, dl->kind);
    L->kind = (layer_kind)k;
    L->c = L->in_c, L->h = L->in_h, L->w = L->in_w;
    SC_TRY(kv_check(dl, op_of(L->kind)->options, lineno, err));
    return op_of(L->kind)->parse(b->nt, L, dl, lineno, err);
}

// Adds the tensors a layer owns (weights, biases, BN parameters).
static int layer_tensors(builder *b, int li, const op_line *dl, int lineno, sc_err *err) {
    layer *L = &b->nt->layers[li];
    L->weight = L->bias = L->gamma = L->beta = L->mean = L->var = -1;
    const op_kind *op = op_of(L->kind);
    return op->tensors ? op->tensors(b, li, dl, lineno, err) : 0;
}

// Appends one parsed line as a layer: source, name, shape, tensors.
static int layer_append(builder *b, const op_line *dl, int lineno, sc_err *err) {
    net *nt = b->nt;
    if (nt->nlayers == b->cap_layers) {
        int cap = b->cap_layers ? 2 * b->cap_layers : 32;
        layer *l = realloc(nt->layers, (size_t)cap * sizeof *l);
        if (!l) return sc_fail(err, "out of memory");
        nt->layers = l;
        b->cap_layers = cap;
    }
    int li = nt->nlayers;
    if (li >= NET_MAX_LAYERS)
        return sc_fail(err, "line %d: more than %d layers", lineno, NET_MAX_LAYERS);
    layer *L = &nt->layers[li];
    memset(L, 0, sizeof *L);
    L->src = li - 1;
    const char *from = op_kv_get(dl, "from");
    if (from && (L->src = op_layer_find(nt, from)) == -2)
        return sc_fail(err, "line %d: from=%s: no such layer", lineno, from);
    L->nsrc = 1, L->srcs[0] = L->src;
    op_src_shape(nt, L->src, &L->in_c, &L->in_h, &L->in_w);
    SC_TRY(layer_parse(b, L, dl, lineno, err));
    if ((long long)L->c * L->h * L->w > NET_MAX_ACT)
        return sc_fail(err, "line %d: output of %dx%dx%d values is too large (over %lld)", lineno,
                       L->c, L->h, L->w, NET_MAX_ACT);
    const char *name = op_kv_get(dl, "name");
    if (name) snprintf(L->name, sizeof L->name, "%s", name);
    else snprintf(L->name, sizeof L->name, "%s%d", dl->kind, li + 1);
    if (op_layer_find(nt, L->name) != -2 || !strcmp(L->name, "input"))
        return sc_fail(err, "line %d: duplicate layer name (%s)", lineno, L->name);
    nt->nlayers++;
    return layer_tensors(b, li, dl, lineno, err);
}

// Allocates the flat buffers, sets masks to 1 and marks prunable tensors.
static int net_alloc(net *nt, sc_err *err) {
    nt->param = calloc(nt->nparam ? nt->nparam : 1, sizeof(float));
    nt->mask = malloc((nt->nparam ? nt->nparam : 1) * sizeof(float));
    nt->buf = calloc(nt->nbuf ? nt->nbuf : 1, sizeof(float));
    if (!nt->param || !nt->mask || !nt->buf) return sc_fail(err, "out of memory");
    for (size_t i = 0; i < nt->nparam; i++) nt->mask[i] = 1.0f;
    int first_conv = 1;
    for (int t = 0; t < nt->ntensors; t++) {
        ptensor *p = &nt->tensors[t];
        if (p->kind != PT_WEIGHT) continue;
        int is_conv = nt->layers[p->layer].kind == LK_CONV;
        p->prunable = !(is_conv && first_conv);
        if (is_conv) first_conv = 0;
    }
    for (int t = 0; t < nt->ntensors; t++)
        if (nt->tensors[t].kind == PT_VAR)
            for (size_t i = 0; i < nt->tensors[t].count; i++)
                nt->buf[nt->tensors[t].offset + i] = 1.0f;
    return 0;
}

// Fails unless desc is text: printable ASCII or UTF-8 bytes, tabs and line ends.
static int desc_text_check(const char *desc, sc_err *err) {
    int lineno = 1;
    for (const unsigned char *p = (const unsigned char *)desc; *p; p++) {
        if (*p == '\n') lineno++;
        else if (*p < 0x20 && *p != '\t' && *p != '\r')
            return sc_fail(err, "line %d: byte 0x%02x, the description is not text", lineno, *p);
        else if (*p == 0x7f)
            return sc_fail(err, "line %d: byte 0x7f, the description is not text", lineno);
    }
    return 0;
}

// Parses the whole description text into b->nt.
static int desc_parse(builder *b, const char *desc, sc_err *err) {
    SC_TRY(desc_text_check(desc, err));
    char *text = strdup(desc);
    if (!text) return sc_fail(err, "out of memory");
    int lineno = 0, rc = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && !rc;
         line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        op_line dl;
        int got = line_split(line, &dl, lineno, err);
        if (got < 0) rc = -1;
        else if (got > 0) rc = layer_append(b, &dl, lineno, err);
    }
    free(text);
    if (!rc && b->nt->nlayers == 0) rc = sc_fail(err, "the description has no layers");
    return rc;
}

// Builds a net from description text.
net *net_from_desc(const char *arch, const char *desc, int in_c, int in_h, int in_w,
                   int classes, sc_err *err) {
    if (in_c < 1 || in_h < 1 || in_w < 1 || classes < 1 ||
        (long long)in_c * in_h * in_w > NET_MAX_ACT) {
        sc_fail(err, "bad input shape %dx%dx%d or class count %d", in_c, in_h, in_w, classes);
        return NULL;
    }
    net *nt = calloc(1, sizeof *nt);
    if (!nt) {
        sc_fail(err, "out of memory");
        return NULL;
    }
    builder b = {.nt = nt};
    snprintf(nt->arch, sizeof nt->arch, "%s", arch);
    nt->in_c = in_c, nt->in_h = in_h, nt->in_w = in_w, nt->classes = classes;
    for (int i = 0; i < 3; i++) nt->in_mean[i] = 0.5f, nt->in_std[i] = 0.25f;
    nt->desc = strdup(desc);
    int rc = nt->desc ? desc_parse(&b, desc, err) : sc_fail(err, "out of memory");
    if (!rc) {
        layer *last = &nt->layers[nt->nlayers - 1];
        long long outs = (long long)last->c * last->h * last->w;
        if (outs != classes)
            rc = sc_fail(err, "the last layer gives %lld outputs, not %d classes", outs, classes);
    }
    if (!rc) rc = net_alloc(nt, err);
    if (rc) {
        net_free(nt);
        return NULL;
    }
    return nt;
}

// Reads a whole small text file (a regular file under 1 MiB); NULL with err filled.
static char *file_slurp(const char *path, sc_err *err) {
    FILE *f = sc_input_fopen(path, "network description", err);
    if (!f) return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n < 0 || n >= (1 << 20))
        sc_fail(err, "network description too large or unreadable (%s, %ld bytes)", path, n);
    else if (fseek(f, 0, SEEK_SET) != 0 || !(s = malloc((size_t)n + 1)))
        sc_fail(err, "cannot read network description (%s)", path);
    else if (fread(s, 1, (size_t)n, f) != (size_t)n) {
        sc_fail(err, "cannot read network description (%s)", path);
        free(s);
        s = NULL;
    } else if (memchr(s, 0, (size_t)n)) {
        sc_fail(err, "network description is not text, it holds a NUL byte (%s)", path);
        free(s);
        s = NULL;
    } else {
        s[n] = 0;
    }
    fclose(f);
    return s;
}

// Builds a built-in architecture or the description in a file.
net *net_create(const char *arch, int in_c, int in_h, int in_w, int classes, sc_err *err) {
    char *desc = NULL;
    char name[64];
    if (strchr(arch, '/') || strchr(arch, '.')) {
        if (!(desc = file_slurp(arch, err))) return NULL;
        const char *base = strrchr(arch, '/') ? strrchr(arch, '/') + 1 : arch;
        snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "."), base);
    } else {
        if (!(desc = net_arch_desc(arch, err))) return NULL;
        snprintf(name, sizeof name, "%s", arch);
    }
    net *nt = net_from_desc(name, desc, in_c, in_h, in_w, classes, err);
    if (!nt && desc != NULL && (strchr(arch, '/') || strchr(arch, '.'))) sc_wrap(err, "%s", arch);
    free(desc);
    return nt;
}

// --- weights and queries ----------------------------------------------------

// Weights and biases as each kind's registry row draws them (conv: Kaiming
// normal, fan_out; linear: PyTorch's default uniform), gamma and var 1,
// beta and mean 0.
void net_init_weights(net *nt, rng *r) {
    for (int t = 0; t < nt->ntensors; t++) {
        ptensor *p = &nt->tensors[t];
        const layer *L = &nt->layers[p->layer];
        float *d = net_tensor_data(nt, t);
        for (size_t i = 0; i < p->count; i++) {
            switch (p->kind) {
            case PT_WEIGHT: case PT_BIAS: d[i] = op_of(L->kind)->init(L, p, r); break;
            case PT_GAMMA: case PT_VAR: d[i] = 1.0f; break;
            case PT_BETA: case PT_MEAN: d[i] = 0.0f; break;
            }
        }
    }
    for (size_t i = 0; i < nt->nparam; i++) nt->param[i] *= nt->mask[i];
}

// Frees a net and everything it owns.
void net_free(net *nt) {
    if (!nt) return;
    free(nt->desc);
    free(nt->layers);
    free(nt->tensors);
    free(nt->param);
    free(nt->mask);
    free(nt->buf);
    free(nt);
}

// Index of the tensor with that name, or -1.
int net_tensor_find(const net *nt, const char *name) {
    for (int t = 0; t < nt->ntensors; t++)
        if (!strcmp(nt->tensors[t].name, name)) return t;
    return -1;
}

// The longest prefix of name among prefix[0 .. n).
int net_prefix_longest(const char *name, const char *const *prefix, int n) {
    int best = -1;
    size_t blen = 0;
    for (int k = 0; k < n; k++) {
        size_t len = strlen(prefix[k]);
        if (len > blen && !strncmp(name, prefix[k], len)) best = k, blen = len;
    }
    return best;
}

// The first prefix that starts no prunable tensor's name.
int net_prefix_unmatched(const net *nt, const char *const *prefix, int n) {
    for (int k = 0; k < n; k++) {
        int hit = 0;
        for (int t = 0; t < nt->ntensors && !hit; t++)
            hit = nt->tensors[t].prunable && !strncmp(nt->tensors[t].name, prefix[k], strlen(prefix[k]));
        if (!hit) return k;
    }
    return -1;
}

// 1 when the prefix of item (its first plen characters) is also that of an
// earlier item of list (item points into list).
static int prefix_seen(const char *list, const char *item, size_t plen) {
    for (const char *p = list; p < item;) {
        const char *c = strchr(p, ','), *eq = strchr(p, '=');
        if (eq && (!c || eq < c) && (size_t)(eq - p) == plen && !strncmp(p, item, plen)) return 1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

// Splits a per-layer list at commas and checks each item's shape before fn.
int net_prefix_items(const char *spec, int bare, net_prefix_item_fn fn, void *ctx, sc_err *err) {
    if (!spec || !*spec) return sc_fail(err, "empty list (want PREFIX=X[,PREFIX=X...])");
    if (strlen(spec) >= NET_PREFIX_TEXT)
        return sc_fail(err, "longer than %d characters (%.60s...)", NET_PREFIX_TEXT - 1, spec);
    char buf[NET_PREFIX_TEXT];
    int bares = 0;
    for (const char *p = spec;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == 0) return sc_fail(err, "empty item in '%s' (a stray comma?)", spec);
        memcpy(buf, p, len);
        buf[len] = '\0';
        char *eq = strchr(buf, '=');
        if (!eq && !bare) return sc_fail(err, "no '=' in item '%s' (want PREFIX=X)", buf);
        if (!eq && bares++) return sc_fail(err, "more than one item without a prefix in '%s'", spec);
        if (eq == buf) return sc_fail(err, "empty prefix in item '%s'", buf);
        size_t plen = eq ? (size_t)(eq - buf) : 0;
        if (eq && prefix_seen(spec, p, plen)) return sc_fail(err, "prefix '%.*s' given twice", (int)plen, p);
        SC_TRY(fn(ctx, eq ? p : NULL, plen, eq ? eq + 1 : buf, err));
        if (!c) return 0;
        p = c + 1;
    }
}

// Pointer to a tensor's values.
float *net_tensor_data(const net *nt, int t) {
    const ptensor *p = &nt->tensors[t];
    return (p->trainable ? nt->param : nt->buf) + p->offset;
}

// Pointer to a trainable tensor's mask (NULL for buffers).
float *net_tensor_mask(const net *nt, int t) {
    const ptensor *p = &nt->tensors[t];
    return p->trainable ? nt->mask + p->offset : NULL;
}

// Fraction of zero mask entries over the prunable tensors.
double net_sparsity(const net *nt) {
    size_t total = 0, zero = 0;
    for (int t = 0; t < nt->ntensors; t++) {
        if (!nt->tensors[t].prunable) continue;
        const float *m = net_tensor_mask(nt, t);
        for (size_t i = 0; i < nt->tensors[t].count; i++) zero += m[i] == 0.0f;
        total += nt->tensors[t].count;
    }
    return total ? (double)zero / (double)total : 0.0;
}

// Multiply-accumulates of one image's forward pass (as the registry counts them).
double net_macs(const net *nt) {
    double macs = 0;
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        if (op_of(L->kind)->macs) macs += op_of(L->kind)->macs(L);
    }
    return macs;
}

// Non-zero mask entries of tensor t.
size_t net_tensor_kept(const net *nt, int t) {
    const ptensor *p = &nt->tensors[t];
    size_t kept = 0;
    for (size_t k = 0; k < p->count; k++) kept += nt->mask[p->offset + k] != 0.0f;
    return kept;
}

// Multiply-accumulates left when the pruned weights' products are skipped.
double net_macs_kept(const net *nt) {
    double macs = 0;
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        if (!op_of(L->kind)->macs) continue;
        const double share = L->weight < 0 ? 1.0
                                           : (double)net_tensor_kept(nt, L->weight) / (double)nt->tensors[L->weight].count;
        macs += op_of(L->kind)->macs(L) * share;
    }
    return macs;
}

// Share of the multiply-accumulates the pruned weights remove (0 without any).
double net_mac_sparsity(const net *nt) {
    const double macs = net_macs(nt);
    return macs > 0 ? 1.0 - net_macs_kept(nt) / macs : 0.0;
}

// How many of layer L's inputs are layer i's output.
int layer_reads(const layer *L, int i) {
    int n = 0;
    for (int k = 0; k < L->nsrc; k++) n += L->srcs[k] == i;
    return n;
}
