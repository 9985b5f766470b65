// Minimal JSON: a pretty-printing writer with escaping and atomic file
// output, and a lookup of top-level keys for reading settings back.
#include "json.h"
#include "atomic.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// --- the text buffer --------------------------------------------------------

// Records the first failure; later calls become no-ops.
static void json_fail(json_writer *j, const char *why) {
    if (!j->failed) snprintf(j->why, sizeof j->why, "%s", why);
    j->failed = 1;
}

// Appends n bytes.
static void json_put(json_writer *j, const char *s, size_t n) {
    if (j->failed) return;
    if (j->len + n + 1 > j->cap) {
        size_t cap = (j->cap ? 2 * j->cap : 256) + n;
        char *b = realloc(j->buf, cap);
        if (!b) {
            json_fail(j, "out of memory");
            return;
        }
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

// Appends a NUL-terminated string.
static void json_puts(json_writer *j, const char *s) { json_put(j, s, strlen(s)); }

// Appends a string literal with JSON escapes, in quotes.
static void json_put_quoted(json_writer *j, const char *s) {
    json_put(j, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        const char *e = NULL;
        switch (*p) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (*p < 0x20) snprintf(esc, sizeof esc, "\\u%04x", *p), e = esc;
        }
        if (e) json_puts(j, e);
        else json_put(j, (const char *)p, 1);
    }
    json_put(j, "\"", 1);
}

// --- structure --------------------------------------------------------------

// Starts an empty document.
void json_init(json_writer *j) { memset(j, 0, sizeof *j); }

// Frees the text.
void json_free(json_writer *j) {
    free(j->buf);
    json_init(j);
}

// Writes the separator, indentation and key before a new value.
static void json_value_start(json_writer *j, const char *key) {
    if (j->failed) return;
    int obj = j->depth > 0 && j->in_object[j->depth - 1];
    if (j->depth == 0 && j->len > 0) {
        json_fail(j, "a second top-level value");
        return;
    }
    if (obj && !key) {
        json_fail(j, "a member without a key inside an object");
        return;
    }
    if (!obj && key) {
        json_fail(j, "a key outside an object");
        return;
    }
    if (j->depth > 0) {
        if (j->members[j->depth - 1]) json_put(j, ",", 1);
        j->members[j->depth - 1] = 1;
        json_put(j, "\n", 1);
        for (int i = 0; i < j->depth; i++) json_put(j, "  ", 2);
    }
    if (key) {
        json_put_quoted(j, key);
        json_put(j, ": ", 2);
    }
}

// Opens a container ('{' or '[').
static void json_open(json_writer *j, const char *key, int object) {
    json_value_start(j, key);
    if (j->failed) return;
    if (j->depth == JSON_MAX_DEPTH) {
        json_fail(j, "nested too deep");
        return;
    }
    json_put(j, object ? "{" : "[", 1);
    j->in_object[j->depth] = (unsigned char)object;
    j->members[j->depth] = 0;
    j->depth++;
}

// Closes the innermost container, which must be of the given kind.
static void json_close(json_writer *j, int object) {
    if (j->failed) return;
    if (j->depth == 0 || j->in_object[j->depth - 1] != object) {
        json_fail(j, object ? "unbalanced object end" : "unbalanced array end");
        return;
    }
    j->depth--;
    if (j->members[j->depth]) {
        json_put(j, "\n", 1);
        for (int i = 0; i < j->depth; i++) json_put(j, "  ", 2);
    }
    json_put(j, object ? "}" : "]", 1);
}

// Opens an object.
void json_object_begin(json_writer *j, const char *key) { json_open(j, key, 1); }
// Closes an object.
void json_object_end(json_writer *j) { json_close(j, 1); }
// Opens an array.
void json_array_begin(json_writer *j, const char *key) { json_open(j, key, 0); }
// Closes an array.
void json_array_end(json_writer *j) { json_close(j, 0); }

// --- values -----------------------------------------------------------------

// Adds a string (NULL: null).
void json_add_string(json_writer *j, const char *key, const char *value) {
    json_value_start(j, key);
    if (value) json_put_quoted(j, value);
    else json_puts(j, "null");
}

// Adds a number in its shortest exact form; NaN and infinities become null.
void json_add_number(json_writer *j, const char *key, double value) {
    json_value_start(j, key);
    if (!isfinite(value)) {
        json_puts(j, "null");
        return;
    }
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, value);
        if (strtod(buf, NULL) == value) break;
    }
    json_puts(j, buf);
}

// Adds an integer.
void json_add_int(json_writer *j, const char *key, long long value) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", value);
    json_value_start(j, key);
    json_puts(j, buf);
}

// Adds true or false.
void json_add_bool(json_writer *j, const char *key, int value) {
    json_value_start(j, key);
    json_puts(j, value ? "true" : "false");
}

// Adds null.
void json_add_null(json_writer *j, const char *key) {
    json_value_start(j, key);
    json_puts(j, "null");
}

// The finished text, or NULL when incomplete or failed.
const char *json_text(const json_writer *j) {
    if (j->failed || j->depth != 0 || j->len == 0) return NULL;
    return j->buf;
}

// --- output -----------------------------------------------------------------

// Writes text and a newline to f, flushing and syncing when asked.
static int json_put_file(FILE *f, const char *text, int sync) {
    if (fputs(text, f) < 0 || fputc('\n', f) < 0 || fflush(f) != 0) return -1;
    if (sync && fsync(fileno(f)) != 0) return -1;
    return 0;
}

// Writes the document to path atomically ("-": stdout).
int json_write_file(const json_writer *j, const char *path, sc_err *err) {
    const char *text = json_text(j);
    if (!text)
        return sc_fail(err, "JSON summary not written: %s (%s)",
                       j->failed ? j->why : "document incomplete", path);
    if (!strcmp(path, "-")) {
        if (json_put_file(stdout, text, 0) != 0)
            return sc_fail(err, "cannot write JSON to stdout (%s)", strerror(errno));
        return 0;
    }
    sc_atomic a;
    SC_TRY(sc_atomic_begin(&a, path, err));
    FILE *f = sc_atomic_fopen(&a, "w", err);
    if (!f) return sc_wrap(err, "cannot write JSON summary");
    int rc = json_put_file(f, text, 0);
    if (rc != 0) sc_fail(err, "cannot write JSON summary (%s, %s)", path, strerror(errno));
    return sc_atomic_fclose(&a, f, rc, err);
}

// --- reading ----------------------------------------------------------------

// Skips whitespace.
static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

// Skips a string starting at its opening quote; NULL when unterminated.
static const char *json_skip_string(const char *p) {
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && !*++p) return NULL;
    return *p == '"' ? p + 1 : NULL;
}

// Skips one value of any kind; NULL when malformed.
static const char *json_skip_value(const char *p) {
    p = json_ws(p);
    if (*p == '"') return json_skip_string(p);
    if (*p != '{' && *p != '[') {
        const char *s = p;
        while (*p && !strchr(",}] \t\r\n", *p)) p++;
        return p > s ? p : NULL;
    }
    int depth = 0;
    while (*p) {
        if (*p == '"') {
            if (!(p = json_skip_string(p))) return NULL;
            continue;
        }
        if (*p == '{' || *p == '[') depth++;
        else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
        p++;
    }
    return NULL;
}

// Appends the UTF-8 encoding of code point c at *o (room checked by caller).
static size_t json_utf8(unsigned c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xc0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3f)), 2;
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 0x3f));
        return o[2] = (char)(0x80 | (c & 0x3f)), 3;
    }
    o[0] = (char)(0xf0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 0x3f));
    o[2] = (char)(0x80 | (c >> 6 & 0x3f)), o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

// Reads 4 hex digits; -1 when malformed.
static long json_hex4(const char *p) {
    char h[5] = {0};
    for (int i = 0; i < 4; i++)
        if (!(h[i] = p[i]) || !strchr("0123456789abcdefABCDEF", p[i])) return -1;
    return strtol(h, NULL, 16);
}

// Decodes the string at p (at its quote) into out; -1 when malformed or too long.
static int json_unescape(const char *p, char *out, size_t len) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    size_t o = 0;
    for (p++; *p != '"'; p++) {
        char tmp[4];
        size_t n = 1;
        tmp[0] = *p;
        if (!*p) return -1;
        if (*p == '\\') {
            const char *k = *++p ? strchr(from, *p) : NULL;
            if (k) {
                tmp[0] = to[k - from];
            } else if (*p == 'u') {
                long c = json_hex4(p + 1), lo = -1;
                if (c < 0) return -1;
                p += 4;
                if (c >= 0xd800 && c < 0xdc00 && p[1] == '\\' && p[2] == 'u' &&
                    (lo = json_hex4(p + 3)) >= 0xdc00 && lo < 0xe000) {
                    c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
                    p += 6;
                }
                n = json_utf8((unsigned)c, tmp);
            } else {
                return -1;
            }
        }
        if (o + n >= len) return -1;
        memcpy(out + o, tmp, n);
        o += n;
    }
    out[o] = '\0';
    return 0;
}

// Returns the start of key's value among the top-level members, or NULL.
const char *json_find(const char *text, const char *key) {
    const char *p = json_ws(text);
    if (*p++ != '{') return NULL;
    char name[256];
    for (;;) {
        p = json_ws(p);
        if (*p != '"' || json_unescape(p, name, sizeof name) != 0) return NULL;
        if (!(p = json_skip_string(p))) return NULL;
        p = json_ws(p);
        if (*p++ != ':') return NULL;
        p = json_ws(p);
        if (!strcmp(name, key)) return p;
        if (!(p = json_skip_value(p))) return NULL;
        p = json_ws(p);
        if (*p++ != ',') return NULL;
    }
}

// Reads a number member.
int json_get_number(const char *text, const char *key, double *out) {
    const char *v = json_find(text, key);
    if (!v || !*v || !strchr("-0123456789", *v)) return -1;
    char *end;
    double d = strtod(v, &end);
    if (end == v) return -1;
    *out = d;
    return 0;
}

// Reads a boolean member.
int json_get_bool(const char *text, const char *key, int *out) {
    const char *v = json_find(text, key);
    if (v && !strncmp(v, "true", 4)) return *out = 1, 0;
    if (v && !strncmp(v, "false", 5)) return *out = 0, 0;
    return -1;
}

// Reads a string member, unescaped.
int json_get_string(const char *text, const char *key, char *out, size_t outlen) {
    const char *v = json_find(text, key);
    if (!v || *v != '"' || outlen == 0) return -1;
    return json_unescape(v, out, outlen);
}
