// Error message formatting shared by every module.
#include "kernels/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

// Formats a message into err (when not NULL) and returns -1.
int sc_fail(sc_err *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

// Prefixes err->msg with a formatted context and ": "; returns -1.
int sc_wrap(sc_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.200s: %.300s", head, old);
    return -1;
}
