// Errors of the library and the tools: the sc_err type and its helpers
// (kernels/error.h) plus the exit codes every tool uses.
#ifndef SC_ERROR_H
#define SC_ERROR_H

#include "kernels/error.h"

// Exit codes of every tool (docs/cli.md): success, bad input, bad usage.
enum { SC_EXIT_OK = 0, SC_EXIT_INPUT = 1, SC_EXIT_USAGE = 2 };

#endif
