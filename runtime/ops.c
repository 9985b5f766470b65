// The op registry's table (one row per line of runtime/ops_list.h) and the
// parsing helpers the kinds' parsers share.
#include "ops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP(ID, name) extern const op_kind op_##name;
#include "ops_list.h"
#undef OP

static const op_kind *const op_table[LK_COUNT] = {
#define OP(ID, name) [LK_##ID] = &op_##name,
#include "ops_list.h"
#undef OP
};

// The descriptor of kind k.
const op_kind *op_of(layer_kind k) { return op_table[k]; }

// The kind whose keyword is name, or -1.
int op_lookup(const char *name) {
    for (int k = 0; k < LK_COUNT; k++)
        if (!strcmp(op_table[k]->name, name)) return k;
    return -1;
}

// Parses an integer in [lo, hi].
int op_parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

// Looks up key in the line's options; returns its value or NULL.
const char *op_kv_get(const op_line *dl, const char *key) {
    for (int i = 0; i < dl->nkv; i++)
        if (!strcmp(dl->key[i], key)) return dl->val[i];
    return NULL;
}

// Reads an optional integer option with a default.
int op_kv_int(const op_line *dl, const char *key, int def, int lo, int hi, int *out, int lineno,
              sc_err *err) {
    const char *v = op_kv_get(dl, key);
    *out = def;
    if (v && op_parse_int(v, lo, hi, out))
        return sc_fail(err, "line %d: %s=%s is not an integer in [%d, %d]", lineno, key, v, lo, hi);
    return 0;
}

// Reads an optional float option with a default.
int op_kv_float(const op_line *dl, const char *key, float def, float *out, int lineno,
                sc_err *err) {
    const char *v = op_kv_get(dl, key);
    *out = def;
    if (!v) return 0;
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d) || d < 0 || d > 1)
        return sc_fail(err, "line %d: %s=%s is not a number in [0, 1]", lineno, key, v);
    *out = (float)d;
    return 0;
}

// Index of the layer called name, -1 for "input", -2 when unknown.
int op_layer_find(const net *nt, const char *name) {
    if (!strcmp(name, "input")) return -1;
    for (int i = nt->nlayers - 1; i >= 0; i--)
        if (!strcmp(nt->layers[i].name, name)) return i;
    return -2;
}

// Shape of layer i's output (-1: the network input).
void op_src_shape(const net *nt, int i, int *c, int *h, int *w) {
    *c = i < 0 ? nt->in_c : nt->layers[i].c;
    *h = i < 0 ? nt->in_h : nt->layers[i].h;
    *w = i < 0 ? nt->in_w : nt->layers[i].w;
}

// Output size of a window op; -1 when empty.
static int window_out(int in, int k, int stride, int pad) {
    int span = in + 2 * pad - k;
    return span < 0 ? -1 : span / stride + 1;
}

// Fills the window fields (k, stride, pad) of a conv or pool layer and its
// output shape; a conv's first positional is its channel count.
int op_window(layer *L, const op_line *dl, int is_conv, int lineno, sc_err *err) {
    int need = is_conv ? 2 : 1;
    if (dl->npos != need)
        return sc_fail(err, "line %d: %s needs %s", lineno, dl->kind,
                       is_conv ? "out-channels and kernel size" : "a window size");
    int ch = L->in_c;
    if (is_conv && op_parse_int(dl->pos[0], 1, 65536, &ch))
        return sc_fail(err, "line %d: bad channel count (%s)", lineno, dl->pos[0]);
    if (op_parse_int(dl->pos[need - 1], 1, 64, &L->k))
        return sc_fail(err, "line %d: bad kernel size (%s)", lineno, dl->pos[need - 1]);
    SC_TRY(op_kv_int(dl, "stride", is_conv ? 1 : L->k, 1, 64, &L->stride, lineno, err));
    SC_TRY(op_kv_int(dl, "pad", 0, 0, 64, &L->pad, lineno, err));
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

// Adds a weight tensor of the given dims and, unless bias=0, a bias of the
// layer's output channels (conv and linear).
int op_weight_bias(op_build *b, int li, int ndim, const int *dims, const op_line *dl,
                   int lineno, sc_err *err) {
    int bias = 0;
    SC_TRY(op_kv_int(dl, "bias", 1, 0, 1, &bias, lineno, err));
    const int w = op_tensor_add(b, li, "weight", PT_WEIGHT, ndim, dims, err);
    if (w < 0) return -1;
    op_build_net(b)->layers[li].weight = w;
    if (!bias) return 0;
    const int bi = op_tensor_add(b, li, "bias", PT_BIAS, 1, &op_build_net(b)->layers[li].c, err);
    if (bi < 0) return -1;
    op_build_net(b)->layers[li].bias = bi;
    return 0;
}
