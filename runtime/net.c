// Network graph: parses the plain-text description into layers, infers
// shapes, lays out parameter tensors in flat buffers, initialises weights.
#include "net.h"
#include "atomic.h"

#include <errno.h>
#include <math.h>
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

typedef struct {
    char kind[16];
    int npos;
    char pos[4][64];
    int nkv;
    char key[8][16], val[8][64];
} desc_line;

// Splits one description line into kind, positionals and key=value pairs.
static int line_split(char *text, desc_line *dl, int lineno, sc_err *err) {
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

// Parses a strictly positive-or-zero integer in [lo, hi].
static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

// Looks up key in the line's options; returns its value or NULL.
static const char *kv_get(const desc_line *dl, const char *key) {
    for (int i = 0; i < dl->nkv; i++)
        if (!strcmp(dl->key[i], key)) return dl->val[i];
    return NULL;
}

// Reads an optional integer option with a default.
static int kv_int(const desc_line *dl, const char *key, int def, int lo, int hi, int *out,
                  int lineno, sc_err *err) {
    const char *v = kv_get(dl, key);
    *out = def;
    if (v && parse_int(v, lo, hi, out))
        return sc_fail(err, "line %d: %s=%s is not an integer in [%d, %d]", lineno, key, v, lo, hi);
    return 0;
}

// Reads an optional float option with a default.
static int kv_float(const desc_line *dl, const char *key, float def, float *out, int lineno,
                    sc_err *err) {
    const char *v = kv_get(dl, key);
    *out = def;
    if (!v) return 0;
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d) || d < 0 || d > 1)
        return sc_fail(err, "line %d: %s=%s is not a number in [0, 1]", lineno, key, v);
    *out = (float)d;
    return 0;
}

// Checks that every option on the line is one the layer kind accepts.
static int kv_check(const desc_line *dl, const char *allowed, int lineno, sc_err *err) {
    for (int i = 0; i < dl->nkv; i++) {
        char pat[20];
        snprintf(pat, sizeof pat, " %s ", dl->key[i]);
        if (!strstr(allowed, pat))
            return sc_fail(err, "line %d: unknown option %s= for %s", lineno, dl->key[i], dl->kind);
    }
    return 0;
}

// --- building ---------------------------------------------------------------

typedef struct {
    net *nt;
    int cap_layers, cap_tensors;
} builder;

// Index of the layer called name, -1 for "input", -2 when unknown.
static int layer_find(const net *nt, const char *name) {
    if (!strcmp(name, "input")) return -1;
    for (int i = nt->nlayers - 1; i >= 0; i--)
        if (!strcmp(nt->layers[i].name, name)) return i;
    return -2;
}

// Adds a parameter tensor of the given dims to the layout; returns its index.
static int tensor_add(builder *b, int layer, const char *suffix, ptensor_kind kind, int ndim,
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

// Output size of a window op; -1 when empty.
static int window_out(int in, int k, int stride, int pad) {
    int span = in + 2 * pad - k;
    return span < 0 ? -1 : span / stride + 1;
}

// Fills the conv/pool specific fields of a layer and its output shape.
static int layer_window(layer *L, const desc_line *dl, int is_conv, int lineno, sc_err *err) {
    int need = is_conv ? 2 : 1;
    if (dl->npos != need)
        return sc_fail(err, "line %d: %s needs %s", lineno, dl->kind,
                       is_conv ? "out-channels and kernel size" : "a window size");
    int ch = L->in_c;
    if (is_conv && parse_int(dl->pos[0], 1, 65536, &ch))
        return sc_fail(err, "line %d: bad channel count (%s)", lineno, dl->pos[0]);
    if (parse_int(dl->pos[need - 1], 1, 64, &L->k))
        return sc_fail(err, "line %d: bad kernel size (%s)", lineno, dl->pos[need - 1]);
    SC_TRY(kv_int(dl, "stride", is_conv ? 1 : L->k, 1, 64, &L->stride, lineno, err));
    SC_TRY(kv_int(dl, "pad", 0, 0, 64, &L->pad, lineno, err));
    if (!is_conv && L->pad * 2 > L->k)
        return sc_fail(err, "line %d: pad %d larger than half the window %d", lineno, L->pad, L->k);
    L->c = ch;
    L->h = window_out(L->in_h, L->k, L->stride, L->pad);
    L->w = window_out(L->in_w, L->k, L->stride, L->pad);
    if (L->h < 1 || L->w < 1)
        return sc_fail(err, "line %d: %s output would be empty (input %dx%d)", lineno, dl->kind,
                       L->in_h, L->in_w);
    return 0;
}

// Adds the tensors a layer owns (weights, biases, BN parameters).
static int layer_tensors(builder *b, int li, const desc_line *dl, int lineno, sc_err *err) {
    layer *L = &b->nt->layers[li];
    int bias = 0;
    L->weight = L->bias = L->gamma = L->beta = L->mean = L->var = -1;
    if (L->kind == LK_CONV || L->kind == LK_LINEAR) {
        SC_TRY(kv_int(dl, "bias", 1, 0, 1, &bias, lineno, err));
        int cdims[4] = {L->c, L->in_c, L->k, L->k};
        long long fan = (long long)L->in_c * L->in_h * L->in_w;  // bounded by NET_MAX_ACT
        int ldims[2] = {L->c, (int)fan};
        int w = L->kind == LK_CONV ? tensor_add(b, li, "weight", PT_WEIGHT, 4, cdims, err)
                                   : tensor_add(b, li, "weight", PT_WEIGHT, 2, ldims, err);
        if (w < 0) return -1;
        b->nt->layers[li].weight = w;
        if (bias) {
            int bi = tensor_add(b, li, "bias", PT_BIAS, 1, &L->c, err);
            if (bi < 0) return -1;
            b->nt->layers[li].bias = bi;
        }
    } else if (L->kind == LK_BN) {
        const ptensor_kind kinds[4] = {PT_GAMMA, PT_BETA, PT_MEAN, PT_VAR};
        const char *names[4] = {"gamma", "beta", "mean", "var"};
        int idx[4];
        for (int i = 0; i < 4; i++)
            if ((idx[i] = tensor_add(b, li, names[i], kinds[i], 1, &L->c, err)) < 0) return -1;
        L = &b->nt->layers[li];
        L->gamma = idx[0], L->beta = idx[1], L->mean = idx[2], L->var = idx[3];
    }
    return 0;
}

// Parses the kind-specific part of one layer line into L.
static int layer_parse(net *nt, layer *L, const desc_line *dl, int lineno, sc_err *err) {
    const char *k = dl->kind;
    L->c = L->in_c, L->h = L->in_h, L->w = L->in_w;
    if (!strcmp(k, "conv") || !strcmp(k, "maxpool") || !strcmp(k, "avgpool")) {
        int conv = !strcmp(k, "conv");
        L->kind = conv ? LK_CONV : !strcmp(k, "maxpool") ? LK_MAXPOOL : LK_AVGPOOL;
        SC_TRY(kv_check(dl, conv ? " stride pad bias name from " : " stride pad name from ",
                        lineno, err));
        return layer_window(L, dl, conv, lineno, err);
    }
    if (!strcmp(k, "bn")) {
        L->kind = LK_BN;
        SC_TRY(kv_check(dl, " eps momentum name from ", lineno, err));
        SC_TRY(kv_float(dl, "eps", 1e-5f, &L->eps, lineno, err));
        return kv_float(dl, "momentum", 0.1f, &L->momentum, lineno, err);
    }
    if (!strcmp(k, "relu") || !strcmp(k, "gap")) {
        L->kind = k[0] == 'r' ? LK_RELU : LK_GAP;
        if (L->kind == LK_GAP) L->h = L->w = 1;
        return kv_check(dl, " name from ", lineno, err);
    }
    if (!strcmp(k, "add")) {
        L->kind = LK_ADD;
        SC_TRY(kv_check(dl, " name from ", lineno, err));
        if (dl->npos != 1) return sc_fail(err, "line %d: add needs the name of a layer", lineno);
        L->src2 = layer_find(nt, dl->pos[0]);
        if (L->src2 == -2) return sc_fail(err, "line %d: add: no layer called %s", lineno, dl->pos[0]);
        int c2 = L->src2 < 0 ? nt->in_c : nt->layers[L->src2].c;
        int h2 = L->src2 < 0 ? nt->in_h : nt->layers[L->src2].h;
        int w2 = L->src2 < 0 ? nt->in_w : nt->layers[L->src2].w;
        if (c2 != L->in_c || h2 != L->in_h || w2 != L->in_w)
            return sc_fail(err, "line %d: add: shapes differ (%dx%dx%d vs %dx%dx%d)", lineno,
                           L->in_c, L->in_h, L->in_w, c2, h2, w2);
        return 0;
    }
    if (!strcmp(k, "linear")) {
        L->kind = LK_LINEAR;
        SC_TRY(kv_check(dl, " bias name from ", lineno, err));
        if (dl->npos != 1) return sc_fail(err, "line %d: linear needs an output size", lineno);
        if (!strcmp(dl->pos[0], "classes")) L->c = nt->classes;
        else if (parse_int(dl->pos[0], 1, 1 << 20, &L->c))
            return sc_fail(err, "line %d: bad output size (%s)", lineno, dl->pos[0]);
        L->h = L->w = 1;
        return 0;
    }
    return sc_fail(err, "line %d: unknown layer kind (%s)", lineno, k);
}

// Appends one parsed line as a layer: source, name, shape, tensors.
static int layer_append(builder *b, const desc_line *dl, int lineno, sc_err *err) {
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
    L->src2 = -1;
    const char *from = kv_get(dl, "from");
    if (from && (L->src = layer_find(nt, from)) == -2)
        return sc_fail(err, "line %d: from=%s: no such layer", lineno, from);
    L->in_c = L->src < 0 ? nt->in_c : nt->layers[L->src].c;
    L->in_h = L->src < 0 ? nt->in_h : nt->layers[L->src].h;
    L->in_w = L->src < 0 ? nt->in_w : nt->layers[L->src].w;
    SC_TRY(layer_parse(nt, L, dl, lineno, err));
    if ((long long)L->c * L->h * L->w > NET_MAX_ACT)
        return sc_fail(err, "line %d: output of %dx%dx%d values is too large (over %lld)", lineno,
                       L->c, L->h, L->w, NET_MAX_ACT);
    const char *name = kv_get(dl, "name");
    if (name) snprintf(L->name, sizeof L->name, "%s", name);
    else snprintf(L->name, sizeof L->name, "%s%d", dl->kind, li + 1);
    if (layer_find(nt, L->name) != -2 || !strcmp(L->name, "input"))
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
        desc_line dl;
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

// Kaiming normal (fan_out) for conv, PyTorch's default uniform for linear.
void net_init_weights(net *nt, rng *r) {
    for (int t = 0; t < nt->ntensors; t++) {
        ptensor *p = &nt->tensors[t];
        const layer *L = &nt->layers[p->layer];
        float *d = net_tensor_data(nt, t);
        int fan_in = L->in_c * (L->kind == LK_CONV ? L->k * L->k : L->in_h * L->in_w);
        float bound = 1.0f / sqrtf((float)fan_in);
        for (size_t i = 0; i < p->count; i++) {
            switch (p->kind) {
            case PT_WEIGHT:
                d[i] = L->kind == LK_CONV ? rng_normal(r) * sqrtf(2.0f / (float)(L->c * L->k * L->k))
                                          : (2 * rng_uniform(r) - 1) * bound;
                break;
            case PT_BIAS: d[i] = (2 * rng_uniform(r) - 1) * bound; break;
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

// Multiply-accumulates of one image's forward pass (conv and linear).
double net_macs(const net *nt) {
    double macs = 0;
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        if (L->kind == LK_CONV) macs += (double)L->c * L->h * L->w * L->in_c * L->k * L->k;
        else if (L->kind == LK_LINEAR) macs += (double)L->c * L->in_c * L->in_h * L->in_w;
    }
    return macs;
}
