// A small JSON writer for the tools' --json summaries (and the config text
// stored in model files), plus a tiny reader that looks up top-level keys of
// an object, enough to restore settings on --resume.
//
//   json_writer j; json_init(&j);
//   json_object_begin(&j, NULL);
//   json_add_string(&j, "tool", "train");
//   json_add_number(&j, "val_accuracy", 71.5);        // NaN/inf are written as null
//   json_array_begin(&j, "history");
//   json_object_begin(&j, NULL); json_add_int(&j, "epoch", 1); json_object_end(&j);
//   json_array_end(&j);
//   json_object_end(&j);
//   if (json_write_file(&j, path, &err) != 0) ...;    // atomic; "-" = stdout
//   json_free(&j);
//
// Misuse (a key missing inside an object, unbalanced ends, too deep) and
// out-of-memory are remembered and reported by json_write_file/json_text.
#ifndef SC_JSON_H
#define SC_JSON_H

#include <stddef.h>

#include "error.h"

#define JSON_MAX_DEPTH 32

typedef struct {
    char *buf;        // the text so far, NUL-terminated (owned)
    size_t len, cap;
    int depth;        // open containers
    unsigned char in_object[JSON_MAX_DEPTH];  // 1: object, 0: array
    unsigned char members[JSON_MAX_DEPTH];    // 1 once the container has a member
    int failed;       // misuse or out of memory seen
    char why[96];     // what went wrong first
} json_writer;

// --- writing ----------------------------------------------------------------

// Starts an empty document.
void json_init(json_writer *j);
// Frees the text.
void json_free(json_writer *j);

// Opens an object / array. key: the member name inside an object; NULL at
// the top level and inside arrays. Each begin needs its end.
void json_object_begin(json_writer *j, const char *key);
void json_object_end(json_writer *j);
void json_array_begin(json_writer *j, const char *key);
void json_array_end(json_writer *j);

// Adds a member (inside an object, key required) or an element (inside an
// array, key NULL). Strings are escaped; a NULL string is null; a NaN or
// infinite number is null.
void json_add_string(json_writer *j, const char *key, const char *value);
void json_add_number(json_writer *j, const char *key, double value);
void json_add_int(json_writer *j, const char *key, long long value);
void json_add_bool(json_writer *j, const char *key, int value);
void json_add_null(json_writer *j, const char *key);

// The finished text (no trailing newline), or NULL when the document is
// incomplete or something failed (why in j->why).
const char *json_text(const json_writer *j);

// Writes the finished document plus a newline to path atomically (a
// temporary file in the same directory, then rename); "-" writes to stdout.
int json_write_file(const json_writer *j, const char *path, sc_err *err);

// --- reading top-level keys -------------------------------------------------

// Looks up key among the top-level members of the object in text and
// returns a pointer to the start of its value, or NULL (missing, or text
// is not an object).
const char *json_find(const char *text, const char *key);

// Reads a number member; -1 when missing or not a number (null included).
int json_get_number(const char *text, const char *key, double *out);

// Reads a boolean member (true/false); -1 when missing or not a boolean.
int json_get_bool(const char *text, const char *key, int *out);

// Reads a string member, unescaped, into out; -1 when missing, not a
// string or longer than outlen - 1 bytes.
int json_get_string(const char *text, const char *key, char *out, size_t outlen);

#endif
