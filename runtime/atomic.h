// Atomic file replacement, the one way every tool writes a file: a temporary
// sibling "<path>.tmp.<pid>" is written, flushed and fsynced, renamed over
// path, and the directory fsynced. A write error leaves the previous file
// intact and no temporary behind; temporaries of dead processes (a killed
// write) are removed when the next write to the same path begins. A path
// that exists but is not a regular file (a device, FIFO, directory) is never
// replaced.
#ifndef SC_ATOMIC_H
#define SC_ATOMIC_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

typedef struct {
    char path[PATH_MAX];  // the target
    char dir[PATH_MAX];   // its directory ("." when path has none)
    char tmp[PATH_MAX];   // the temporary sibling being written
} sc_atomic;

// Checks that path can be written (its directory exists and is writable; path
// is absent or a regular file) without writing anything. Tools call it for
// every output before any work starts.
int sc_output_check(const char *path, sc_err *err);

// Step 1: checks path as sc_output_check does, removes stale temporaries of
// path and fills a (a->tmp is the file to write).
int sc_atomic_begin(sc_atomic *a, const char *path, sc_err *err);

// Step 2, after writing a->tmp (rc: the writer's result): on success fsync
// a->tmp, rename it over a->path and fsync the directory; on any failure
// remove a->tmp and return -1 (err keeps the writer's message when rc != 0).
int sc_atomic_end(sc_atomic *a, int rc, sc_err *err);

// Opens a->tmp for writing with stdio (mode "w" or "wb"); NULL with err filled.
FILE *sc_atomic_fopen(sc_atomic *a, const char *mode, sc_err *err);

// Closes f (opened by sc_atomic_fopen) and ends the write as sc_atomic_end;
// rc != 0 or a stream error (disk full, ...) fails it.
int sc_atomic_fclose(sc_atomic *a, FILE *f, int rc, sc_err *err);

// Writes len bytes to path atomically in one call.
int sc_atomic_write(const char *path, const void *data, size_t len, sc_err *err);

// Flushes a file or directory to disk (flags: e.g. O_DIRECTORY).
int sc_fsync_path(const char *path, int flags, sc_err *err);

// --- inputs -----------------------------------------------------------------

// Opens an input file read-only as a file descriptor after checking that it is
// a regular file (a FIFO or device never blocks: opened non-blocking, then
// refused); what names it in messages ("model file"). -1 with err filled.
int sc_input_open(const char *path, const char *what, sc_err *err);

// As sc_input_open, as a stdio stream ("rb").
FILE *sc_input_fopen(const char *path, const char *what, sc_err *err);

// CRC-32 (zlib's) and length of fd's bytes from offset `from` to the end;
// path names the file in messages. 0 or -1.
int sc_fd_crc32(int fd, long long from, const char *path, uint32_t *crc, unsigned long long *len, sc_err *err);

#endif
