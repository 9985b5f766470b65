// Run directories (docs/cli.md): every step writes into
// <runs>/<dataset>-<model>-<YYYYmmdd-HHMMSS>[-N]/ and <runs>/latest points at
// the newest one, so the next tool finds its input without file names.
#ifndef SC_RUNDIR_H
#define SC_RUNDIR_H

#include <stddef.h>

#include "error.h"

// Creates directory path and its missing parents (mkdir -p; mode 0777 & umask).
int rundir_mkdirs(const char *path, sc_err *err);

// Joins dir and name with one '/' into out; fails when out is too small.
int rundir_join(char *out, size_t outlen, const char *dir, const char *name, sc_err *err);

// Makes a new run directory under runs_root (created when missing) named
// after the dataset and model (paths reduced to their base names, a model
// file's extension dropped, odd characters replaced by '_') and the local
// time, with "-2", "-3", ... when that name exists, then points
// <runs_root>/latest at it (a relative symlink replaced atomically).
// out receives "<runs_root>/<name>".
int rundir_create(const char *runs_root, const char *dataset, const char *model, char *out,
                  size_t outlen, sc_err *err);

// Resolves <runs_root>/latest to "<runs_root>/<name>" in out; an error
// "no previous run in runs/ (run train first)" when there is none.
int rundir_latest(const char *runs_root, char *out, size_t outlen, sc_err *err);

// Finds the first existing regular file among the NULL-terminated candidate
// names (e.g. {"model.quant.h5", "model.pruned.h5", "model.h5", NULL}) in
// the latest run directory; out receives its path. The error names the
// directory and every candidate when none exists.
int rundir_find_input(const char *runs_root, const char *const *candidates, char *out,
                      size_t outlen, sc_err *err);

#endif
