// Sparsity patterns: parsing, per-layer geometry, units and checks. See
// runtime/pattern.h and docs/prune.md ("Patterns").
#include "pattern.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- text -------------------------------------------------------------------

// Parses a whole decimal integer in [lo, hi] from s[0..len); -1 when invalid.
static int parse_int(const char *s, size_t len, int lo, int hi) {
    if (len == 0 || len > 4) return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v >= lo && v <= hi ? v : -1;
}

// Splits s at its only `sep` into two integers in [lo, hi]; 0 on success.
static int parse_pair(const char *s, char sep, int lo, int hi, int *a, int *b) {
    const char *p = strchr(s, sep);
    if (!p || strchr(p + 1, sep)) return -1;
    *a = parse_int(s, (size_t)(p - s), lo, hi);
    *b = parse_int(p + 1, strlen(p + 1), lo, hi);
    return *a < 0 || *b < 0 ? -1 : 0;
}

// Parses the remainder share F of "KxC+F" (a decimal fraction, 0 < F < 1); -1 when invalid.
static double parse_share(const char *s) {
    char *end;
    if (!((*s >= '0' && *s <= '9') || *s == '.')) return -1.0;
    double f = strtod(s, &end);
    return *end == '\0' && f > 0.0 && f < 1.0 ? f : -1.0;
}

// Parses one pattern (no prefix) into p.
static int parse_one(const char *s, sc_pattern_one *p, sc_err *err) {
    memset(p, 0, sizeof *p);
    if (!strcmp(s, "unstructured")) return 0;
    if (strchr(s, ':')) {
        p->kind = PAT_NM;
        if (parse_pair(s, ':', 1, 32, &p->n, &p->m) || p->n >= p->m)
            return sc_fail(err, "not an N:M pattern with 1 <= N < M <= 32 (%s)", s);
        return 0;
    }
    p->kind = PAT_BLOCK;
    char blk[16];
    const char *plus = strchr(s, '+');
    size_t bl = plus ? (size_t)(plus - s) : strlen(s);
    if (bl < sizeof blk) memcpy(blk, s, bl);
    blk[bl < sizeof blk ? bl : 0] = '\0';
    if (parse_pair(blk, 'x', 1, 256, &p->k, &p->c) || p->k * p->c < 2 ||
        (plus && (p->rem = parse_share(plus + 1)) < 0.0))
        return sc_fail(err, "not unstructured, KxC (1 <= K, C <= 256, not 1x1), KxC+F (0 < F < 1) or N:M (%s)", s);
    return 0;
}

// Parses one item of a per-layer pattern (net_prefix_items' callback): a
// PREFIX=P rule of the sc_pattern ctx, or the bare P of its default.
static int parse_item(void *ctx, const char *prefix, size_t plen, const char *value, sc_err *err) {
    sc_pattern *p = ctx;
    if (!prefix) return parse_one(value, &p->dflt, err);
    if (plen >= SC_PATTERN_PREFIX)
        return sc_fail(err, "item '%.*s=%s': the prefix must have 1 to %d characters", (int)plen, prefix, value,
                       SC_PATTERN_PREFIX - 1);
    if (p->nrules == SC_PATTERN_RULES)
        return sc_fail(err, "more than %d prefixes (%.*s)", SC_PATTERN_RULES, (int)plen, prefix);
    memcpy(p->prefix[p->nrules], prefix, plen);
    p->prefix[p->nrules][plen] = '\0';
    if (parse_one(value, &p->rule[p->nrules], NULL))
        return sc_fail(err, "item '%.*s=%s': not unstructured, KxC, KxC+F or N:M", (int)plen, prefix, value);
    p->nrules++;
    return 0;
}

// Parses a pattern string.
int sc_pattern_parse(const char *s, sc_pattern *p, sc_err *err) {
    memset(p, 0, sizeof *p);
    if (!s) return 0;
    if (strchr(s, ',') || strchr(s, '=')) return net_prefix_items(s, 1, parse_item, p, err);
    return parse_one(s, &p->dflt, err);
}

// Canonical text of one pattern.
static void format_one(const sc_pattern_one *p, char *out, size_t len) {
    if (p->kind == PAT_BLOCK && p->rem > 0.0) snprintf(out, len, "%dx%d+%g", p->k, p->c, p->rem);
    else if (p->kind == PAT_BLOCK) snprintf(out, len, "%dx%d", p->k, p->c);
    else if (p->kind == PAT_NM) snprintf(out, len, "%d:%d", p->n, p->m);
    else snprintf(out, len, "unstructured");
}

// Canonical text of a pattern: the rules in their order, then the other layers' pattern unless unstructured.
void sc_pattern_format(const sc_pattern *p, char *out, size_t len) {
    if (!p->nrules) {
        format_one(&p->dflt, out, len);
        return;
    }
    char one[32];
    size_t o = 0;
    for (int i = 0; i < p->nrules && o < len; i++) {
        format_one(&p->rule[i], one, sizeof one);
        int w = snprintf(out + o, len - o, "%s%s=%s", i ? "," : "", p->prefix[i], one);
        o += w > 0 ? (size_t)w : 0;
    }
    if (p->dflt.kind == PAT_UNSTRUCTURED || o >= len) return;
    format_one(&p->dflt, one, sizeof one);
    snprintf(out + o, len - o, ",%s", one);
}

// True when every layer is unstructured under p.
int sc_pattern_is_unstructured(const sc_pattern *p) {
    for (int i = 0; i < p->nrules; i++)
        if (p->rule[i].kind != PAT_UNSTRUCTURED) return 0;
    return p->dflt.kind == PAT_UNSTRUCTURED;
}

// True when some layer is on a hybrid KxC+F pattern.
int sc_pattern_has_hybrid(const sc_pattern *p) {
    for (int i = 0; i < p->nrules; i++)
        if (p->rule[i].rem > 0.0) return 1;
    return p->dflt.rem > 0.0;
}

// A short name of p for file names.
void sc_pattern_tag(const sc_pattern *p, char *out, size_t len) {
    char text[SC_PATTERN_TEXT];
    sc_pattern_format(p, text, sizeof text);
    if (!p->nrules) {
        snprintf(out, len, "%s", text);
        return;
    }
    uint32_t h = 2166136261u;  // FNV-1a
    for (const char *c = text; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    snprintf(out, len, "perlayer-%08x", (unsigned)h);
}

// The prefixes of p's rules as an array of strings.
static void rule_prefixes(const sc_pattern *p, const char **out) {
    for (int i = 0; i < p->nrules; i++) out[i] = p->prefix[i];
}

// Fails naming a rule whose prefix starts no prunable tensor's name.
int sc_pattern_check_names(const sc_pattern *p, const net *nt, sc_err *err) {
    const char *pfx[SC_PATTERN_RULES];
    rule_prefixes(p, pfx);
    const int k = net_prefix_unmatched(nt, pfx, p->nrules);
    return k < 0 ? 0 : sc_fail(err, "prefix '%s' matches no prunable layer", p->prefix[k]);
}

// --- geometry -----------------------------------------------------------------

// Greatest common divisor of two positive integers.
static int gcd(int a, int b) {
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// Sets g to the unstructured geometry of a tensor of `count` entries.
static void geom_unstructured(sc_pattern_geom *g, size_t count, int fallback) {
    g->kind = PAT_UNSTRUCTURED;
    g->kb = g->cb = 1;
    g->n = g->m = 0;
    g->units = count;
    g->unit_size = 1;
    g->fallback = fallback;
}

// Geometry of tensor t under p.
void sc_pattern_geom_of(const sc_pattern *pat, const net *nt, int t, sc_pattern_geom *g) {
    const ptensor *w = &nt->tensors[t];
    const char *pfx[SC_PATTERN_RULES];
    rule_prefixes(pat, pfx);
    const int r = net_prefix_longest(w->name, pfx, pat->nrules);
    const sc_pattern_one *p = r >= 0 ? &pat->rule[r] : &pat->dflt;
    memset(g, 0, sizeof *g);
    g->K = w->dims[0];
    g->C = w->ndim > 1 ? w->dims[1] : 1;
    g->RS = w->ndim == 4 ? w->dims[2] * w->dims[3] : 1;
    geom_unstructured(g, w->count, 0);
    if (p->kind == PAT_BLOCK) {
        g->kind = PAT_BLOCK;
        g->kb = gcd(g->K, p->k);
        g->cb = gcd(g->C, p->c);
        g->unit_size = (size_t)g->kb * (size_t)g->cb;
        g->units = w->count / g->unit_size;
        g->fallback = g->kb != p->k || g->cb != p->c;
        g->rem = p->rem;
        if (g->unit_size == 1) geom_unstructured(g, w->count, 1), g->rem = 0.0;
    } else if (p->kind == PAT_NM) {
        if (g->C % p->m != 0) {
            geom_unstructured(g, w->count, 1);
            return;
        }
        g->kind = PAT_NM;
        g->kb = 1;
        g->cb = p->m;
        g->n = p->n;
        g->m = p->m;
        g->unit_size = (size_t)p->m;
        g->units = w->count / g->unit_size;
    }
}

// Text of a layer's own pattern.
void sc_pattern_geom_format(const sc_pattern_geom *g, char *out, size_t len) {
    sc_pattern_one p = {.kind = g->kind, .k = g->kb, .c = g->cb, .n = g->n, .m = g->m, .rem = g->rem};
    format_one(&p, out, len);
}

// --- units --------------------------------------------------------------------

// Unit of entry i: ((k / kb) * RS + tap) * (C / cb) + c / cb.
size_t sc_pattern_unit_of(const sc_pattern_geom *g, size_t i) {
    if (g->kind == PAT_UNSTRUCTURED) return i;
    size_t rs = i % (size_t)g->RS, c = (i / (size_t)g->RS) % (size_t)g->C;
    size_t k = i / ((size_t)g->RS * (size_t)g->C);
    return ((k / (size_t)g->kb) * (size_t)g->RS + rs) * (size_t)(g->C / g->cb) + c / (size_t)g->cb;
}

// Entries of unit u, k outer and c inner (increasing).
void sc_pattern_unit_entries(const sc_pattern_geom *g, size_t u, size_t *idx) {
    if (g->kind == PAT_UNSTRUCTURED) {
        idx[0] = u;
        return;
    }
    size_t cblocks = (size_t)(g->C / g->cb), cj = u % cblocks, rest = u / cblocks;
    size_t rs = rest % (size_t)g->RS, ki = rest / (size_t)g->RS, n = 0;
    for (size_t k = ki * (size_t)g->kb; k < (ki + 1) * (size_t)g->kb; k++)
        for (size_t c = cj * (size_t)g->cb; c < (cj + 1) * (size_t)g->cb; c++)
            idx[n++] = (k * (size_t)g->C + c) * (size_t)g->RS + rs;
}

// Kept entries of every unit into kept (units); 0 on success, -1 out of memory.
static int units_count(const sc_pattern_geom *g, const float *mask, unsigned *kept) {
    size_t *idx = malloc(g->unit_size * sizeof *idx);
    if (!idx) return -1;
    for (size_t u = 0; u < g->units; u++) {
        sc_pattern_unit_entries(g, u, idx);
        unsigned k = 0;
        for (size_t j = 0; j < g->unit_size; j++) k += mask[idx[j]] != 0.0f;
        kept[u] = k;
    }
    free(idx);
    return 0;
}

// Units with a kept entry, or with `viol` set, the entries breaking the pattern.
static size_t units_scan(const sc_pattern_geom *g, const float *mask, int viol) {
    unsigned *kept = malloc((g->units ? g->units : 1) * sizeof *kept);
    if (!kept || units_count(g, mask, kept)) {
        free(kept);
        return (size_t)-1;
    }
    size_t r = 0;
    for (size_t u = 0; u < g->units; u++) {
        if (!viol) r += kept[u] > 0;
        else if (g->kind == PAT_NM) r += kept[u] > (unsigned)g->n ? kept[u] - (unsigned)g->n : 0;
        else if (g->kind == PAT_BLOCK) r += kept[u] < g->unit_size ? kept[u] : 0;
    }
    free(kept);
    return r;
}

// Units with at least one kept entry ((size_t)-1 when out of memory).
size_t sc_pattern_units_kept(const sc_pattern_geom *g, const float *mask) {
    return units_scan(g, mask, 0);
}

// The most kept blocks of one block row (units are in k block, tap, c block order).
size_t sc_pattern_row_max_kept(const sc_pattern_geom *g, const float *mask) {
    if (g->kind != PAT_BLOCK || !g->units) return 0;
    unsigned *kept = malloc(g->units * sizeof *kept);
    if (!kept || units_count(g, mask, kept)) {
        free(kept);
        return (size_t)-1;
    }
    const size_t per_row = g->units / (size_t)(g->K / g->kb);
    size_t best = 0;
    for (size_t r0 = 0; r0 < g->units; r0 += per_row) {
        size_t n = 0;
        for (size_t u = r0; u < r0 + per_row; u++) n += kept[u] > 0;
        best = n > best ? n : best;
    }
    free(kept);
    return best;
}

// Entries that break the pattern ((size_t)-1 when out of memory).
size_t sc_pattern_violations(const sc_pattern_geom *g, const float *mask) {
    if (g->kind == PAT_UNSTRUCTURED) return 0;
    size_t v = units_scan(g, mask, 1);
    if (g->kind != PAT_BLOCK || g->rem <= 0.0 || v == (size_t)-1) return v;
    size_t kept = 0, n = (size_t)g->K * (size_t)g->C * (size_t)g->RS;
    for (size_t i = 0; i < n; i++) kept += mask[i] != 0.0f;
    size_t most = sc_pattern_singles_max(g, kept);
    return v > most ? v - most : 0;
}

// Kept entries outside whole kept blocks ((size_t)-1 when out of memory).
size_t sc_pattern_singles(const sc_pattern_geom *g, const float *mask) {
    return g->kind == PAT_BLOCK ? units_scan(g, mask, 1) : 0;
}

// floor(x) of a share times a count, a hair above so that 0.3 x 10 is 3.
static size_t share_floor(double x) { return (size_t)floor(x + 1e-9); }

// floor(rem x kept), the remainder a block layer may hold.
size_t sc_pattern_singles_max(const sc_pattern_geom *g, size_t kept) {
    return g->kind == PAT_BLOCK && g->rem > 0.0 ? share_floor(g->rem * (double)kept) : 0;
}

// floor(rem / (1 - rem) x block_weights), the singles that fit beside those blocks.
size_t sc_pattern_singles_cap(const sc_pattern_geom *g, size_t block_weights) {
    return g->kind == PAT_BLOCK && g->rem > 0.0 ? share_floor(g->rem / (1.0 - g->rem) * (double)block_weights) : 0;
}
