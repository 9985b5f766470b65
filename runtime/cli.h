// Command-line parsing shared by every tool: a table of options, each with
// a type, a destination, a default (as text) and a help line. The parser
// applies the defaults, reads --name=value / --name value / -o VALUE,
// checks numbers, ranges and choices, collects positionals and prints one
// error line "tool: --epochs: not a positive integer (abc)" on bad usage.
// The common options of every tool are in docs/cli.md.
#ifndef SC_CLI_H
#define SC_CLI_H

#include <stdio.h>

#include "error.h"

typedef enum {
    OPT_FLAG,    // no value; dst int* set to 1 (--no-NAME sets 0)
    OPT_INT,     // dst int*
    OPT_FLOAT,   // dst double*
    OPT_STRING,  // dst const char** (points into argv or at def)
    OPT_CHOICE,  // dst const char**; one of `choices` ("cpu|gpu|auto")
} cli_opt_type;

typedef struct {
    const char *name;      // long name without dashes: "epochs" -> --epochs
    char short_name;       // 'o' for -o, or 0
    cli_opt_type type;
    void *dst;             // see cli_opt_type
    const char *def;       // default as text, applied before parsing and shown in
                           // --help; NULL: flags 0, strings NULL, numbers keep the
                           // caller's value
    const char *help;      // one line (may contain '\n' for more)
    const char *choices;   // OPT_CHOICE: alternatives separated by '|'
    double min, max;       // OPT_INT/OPT_FLOAT range, checked only when min < max
    const char *metavar;   // value name in --help ("FILE"); NULL: N, X, STR or the choices
} cli_opt;

typedef struct {
    const char *tool;      // "train": prefix of every error line
    const char *usage;     // "train [options] DATASET"
    const char *summary;   // a sentence or two under the usage line in --help
    const cli_opt *opts;
    int nopts;
    int min_pos, max_pos;  // positional arguments allowed; max_pos < 0: no limit
} cli_spec;

// Exit statuses of cli_parse (besides SC_EXIT_* in error.h).
enum { CLI_OK = 0, CLI_HELP = 1, CLI_USAGE = 2 };

// Parses argv[1..argc-1]: applies every default, then the options, and
// stores positional arguments in pos (room for max_pos entries, or argc
// when max_pos < 0) with their count in *npos. `--` ends the options.
// Returns CLI_OK; CLI_HELP after printing help to stdout for -h/--help
// (the tool exits 0); CLI_USAGE after printing one error line to stderr
// (the tool exits 2).
int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, int *npos);

// cli_parse for a tool of at most one positional argument: the spec is
// tool, usage, summary and opts (nopts); *pos gets the argument or NULL.
int cli_parse_one(const char *tool, const char *usage, const char *summary, const cli_opt *opts,
                  int nopts, int argc, char **argv, const char **pos);

// Prints usage, summary and every option with its default to f.
void cli_print_help(const cli_spec *spec, FILE *f);

// Prints "tool: message" and a newline to stderr.
void cli_error(const char *tool, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Index of value among "a|b|c" choices, or -1.
int cli_choice_index(const char *choices, const char *value);

// --- settings stored in a model file for --resume ---------------------------

// Joins argv[1..] into newline-separated text, leaving out the options in
// `skip` (NULL-terminated; "--resume" is a flag, "--stop-after=" takes a
// value, given as "--stop-after N" or "--stop-after=N"); skip may be NULL.
// Caller frees; NULL when out of memory.
char *cli_args_join(int argc, char **argv, const char *const *skip);

// The integer value of option opt (e.g. "--val-size") in text joined by
// cli_args_join (given as "opt=N" or "opt\nN"), or none when it has none.
int cli_args_int(const char *args, const char *opt, int none);

// Builds argv[0], the stored arguments, then argv[1..]: one vector for a
// combined parse in which the current options win. The vector and its
// strings live for the rest of the process. NULL when out of memory.
char **cli_args_merge(const char *stored, int argc, char **argv, int *out_argc);

// --- the options every tool has ---------------------------------------------

typedef struct {
    const char *device;    // "cpu", "gpu" or "auto"
    int seed;              // random seed
    int quiet;             // 1: no progress display, only errors and the result
    const char *json;      // summary file, or NULL ("-" = stdout)
} cli_common;

// Checks before any work that the tool's output file and its --json file
// (unless "-") can be written: directory exists and is writable, the path is
// absent or a regular file (runtime/atomic.h: sc_output_check).
int cli_outputs_check(const cli_common *c, const char *out, sc_err *err);

// Table entries for the common options, to put inside a tool's cli_opt array:
//   static cli_common c; cli_opt opts[] = {CLI_COMMON_OPTS(c), {...tool's own...}};
#define CLI_COMMON_OPTS(c)                                                                 \
    {.name = "device", .type = OPT_CHOICE, .dst = &(c).device, .def = "auto",              \
     .choices = "cpu|gpu|auto", .help = "where to run (auto: the GPU when one works)"},    \
    {.name = "seed", .type = OPT_INT, .dst = &(c).seed, .def = "1", .min = 0,              \
     .max = 2147483647, .help = "random seed"},                                            \
    {.name = "quiet", .short_name = 'q', .type = OPT_FLAG, .dst = &(c).quiet,              \
     .help = "no progress display; print only errors and the result"},                     \
    {.name = "json", .type = OPT_STRING, .dst = &(c).json, .metavar = "FILE",              \
     .help = "write a machine-readable summary (JSON) to FILE ('-': stdout)"}

#endif
