// Errors: library code returns 0 on success or -1 with an sc_err filled in;
// only a tool's main() prints and exits. Messages follow the CLI contract:
// "what went wrong (file, value)"; the tool adds its own name in front. The
// kernels own the type so that every layer above can use it
// (runtime/error.h adds the tools' exit codes).
#ifndef SC_KERNELS_ERROR_H
#define SC_KERNELS_ERROR_H

#include <stddef.h>

typedef struct {
    char msg[512];   // one line, no trailing newline, no tool prefix
} sc_err;

// Formats a message into err (when not NULL) and returns -1.
int sc_fail(sc_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prefixes err->msg with "context: " (e.g. a file name); returns -1.
int sc_wrap(sc_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Returns -1 from the calling function when expr returns non-zero.
#define SC_TRY(expr) do { if ((expr) != 0) return -1; } while (0)

#endif
