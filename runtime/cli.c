// Table-driven command-line parsing with strict value checks, one-line
// usage errors and generated --help text.
#include "cli.h"
#include "atomic.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// --- messages ---------------------------------------------------------------

// Prints "tool: message" and a newline to stderr.
void cli_error(const char *tool, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", tool);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// Index of value among "a|b|c" choices, or -1.
int cli_choice_index(const char *choices, const char *value) {
    size_t n = strlen(value);
    int idx = 0;
    for (const char *p = choices; p && *p; idx++) {
        size_t len = strcspn(p, "|");
        if (n > 0 && len == n && !strncmp(p, value, n)) return idx;
        p += len;
        if (*p == '|') p++;
    }
    return -1;
}

// Says whether the option's numeric range is checked.
static int cli_ranged(const cli_opt *o) { return o->min < o->max; }

// Explains the allowed range: "must be between 1 and 100" or one-sided.
static void cli_range_text(const cli_opt *o, char *buf, size_t len) {
    double big = o->type == OPT_INT ? (double)INT_MAX : 1e300;
    int lo = cli_ranged(o) && o->min > -big, hi = cli_ranged(o) && o->max < big;
    if (lo && hi) snprintf(buf, len, "must be between %.10g and %.10g", o->min, o->max);
    else if (lo) snprintf(buf, len, "must be at least %.10g", o->min);
    else if (hi) snprintf(buf, len, "must be at most %.10g", o->max);
    else snprintf(buf, len, "out of range");
}

// Kind of integer an option wants, for "not a positive integer".
static const char *cli_int_kind(const cli_opt *o) {
    if (cli_ranged(o) && o->min >= 1) return "a positive integer";
    if (cli_ranged(o) && o->min >= 0) return "a non-negative integer";
    return "an integer";
}

// --- value parsing ----------------------------------------------------------

// Parses and stores an integer value, or prints why it is bad.
static int cli_set_int(const char *tool, const cli_opt *o, const char *s) {
    char *end, range[96];
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || !(s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9'))) {
        cli_error(tool, "--%s: not %s (%s)", o->name, cli_int_kind(o), s);
        return -1;
    }
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX ||
        (cli_ranged(o) && (v < o->min || v > o->max))) {
        cli_range_text(o, range, sizeof range);
        cli_error(tool, "--%s: %s (%s)", o->name, range, s);
        return -1;
    }
    *(int *)o->dst = (int)v;
    return 0;
}

// Parses and stores a finite decimal number, or prints why it is bad.
static int cli_set_float(const char *tool, const cli_opt *o, const char *s) {
    char *end, range[96];
    int ok = *s != '\0' && strspn(s, "0123456789+-.eE") == strlen(s);
    errno = 0;
    double v = ok ? strtod(s, &end) : 0;
    if (!ok || *end || end == s) {
        cli_error(tool, "--%s: not a number (%s)", o->name, s);
        return -1;
    }
    if (errno == ERANGE || !isfinite(v) || (cli_ranged(o) && (v < o->min || v > o->max))) {
        cli_range_text(o, range, sizeof range);
        cli_error(tool, "--%s: %s (%s)", o->name, range, s);
        return -1;
    }
    *(double *)o->dst = v;
    return 0;
}

// Stores a choice after checking it is one of the alternatives.
static int cli_set_choice(const char *tool, const cli_opt *o, const char *s) {
    if (cli_choice_index(o->choices, s) < 0) {
        char alts[256];
        snprintf(alts, sizeof alts, "%s", o->choices ? o->choices : "");
        for (char *p = alts; *p; p++)
            if (*p == '|') *p = ',';
        cli_error(tool, "--%s: must be one of %s (%s)", o->name, alts, s);
        return -1;
    }
    *(const char **)o->dst = s;
    return 0;
}

// Stores a value of any non-flag type.
static int cli_set(const char *tool, const cli_opt *o, const char *s) {
    switch (o->type) {
    case OPT_INT: return cli_set_int(tool, o, s);
    case OPT_FLOAT: return cli_set_float(tool, o, s);
    case OPT_CHOICE: return cli_set_choice(tool, o, s);
    case OPT_STRING:
        if (!*s) {
            cli_error(tool, "--%s: empty value", o->name);
            return -1;
        }
        *(const char **)o->dst = s;
        return 0;
    case OPT_FLAG: break;
    }
    *(int *)o->dst = atoi(s) != 0;
    return 0;
}

// Applies every option's default before the arguments are read.
static int cli_defaults(const cli_spec *spec) {
    for (int i = 0; i < spec->nopts; i++) {
        const cli_opt *o = &spec->opts[i];
        if (o->def) {
            if (cli_set(spec->tool, o, o->def) != 0) return -1;
        } else if (o->type == OPT_FLAG) {
            *(int *)o->dst = 0;
        } else if (o->type == OPT_STRING || o->type == OPT_CHOICE) {
            *(const char **)o->dst = NULL;
        }
    }
    return 0;
}

// --- option lookup ----------------------------------------------------------

// Edit distance between a (length n) and b, for "did you mean".
static int cli_distance(const char *a, size_t n, const char *b) {
    size_t m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

// Finds an option by its long name (n characters of name).
static const cli_opt *cli_find_long(const cli_spec *spec, const char *name, size_t n) {
    for (int i = 0; i < spec->nopts; i++)
        if (strlen(spec->opts[i].name) == n && !strncmp(spec->opts[i].name, name, n))
            return &spec->opts[i];
    return NULL;
}

// Finds an option by its short letter.
static const cli_opt *cli_find_short(const cli_spec *spec, char c) {
    for (int i = 0; i < spec->nopts; i++)
        if (spec->opts[i].short_name && spec->opts[i].short_name == c) return &spec->opts[i];
    return NULL;
}

// Reports an unknown long option, suggesting the closest known name.
static int cli_unknown(const cli_spec *spec, const char *name, size_t n) {
    const char *best = NULL;
    int bestd = n < 4 ? 2 : 3;
    for (int i = 0; i < spec->nopts; i++) {
        int d = cli_distance(name, n, spec->opts[i].name);
        if (d < bestd) bestd = d, best = spec->opts[i].name;
    }
    if (best)
        cli_error(spec->tool, "unknown option --%.*s (did you mean --%s?)", (int)n, name, best);
    else
        cli_error(spec->tool, "unknown option --%.*s (see %s --help)", (int)n, name, spec->tool);
    return -1;
}

// --- parsing ----------------------------------------------------------------

// Takes the value of an option from the next argument; one starting with
// "--" is not taken (it is the next option, the value is missing).
static const char *cli_next_value(const cli_spec *spec, const cli_opt *o, int argc, char **argv,
                                  int *i) {
    if (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2)) {
        cli_error(spec->tool, "--%s: missing value", o->name);
        return NULL;
    }
    return argv[++*i];
}

// Parses one "--name", "--name=value" or "--name value" argument.
static int cli_long(const cli_spec *spec, int argc, char **argv, int *i) {
    const char *a = argv[*i] + 2, *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    const cli_opt *o = cli_find_long(spec, a, n);
    int off = 0;
    if (!o && n > 3 && !strncmp(a, "no-", 3)) {
        o = cli_find_long(spec, a + 3, n - 3);
        if (o && o->type != OPT_FLAG) o = NULL;
        off = 1;
    }
    if (!o) return cli_unknown(spec, a, n);
    if (o->type == OPT_FLAG) {
        if (eq) {
            cli_error(spec->tool, "--%s: takes no value (%s)", o->name, argv[*i]);
            return -1;
        }
        *(int *)o->dst = !off;
        return 0;
    }
    const char *v = eq ? eq + 1 : cli_next_value(spec, o, argc, argv, i);
    return v ? cli_set(spec->tool, o, v) : -1;
}

// Parses one "-o VALUE", "-oVALUE" or "-q" argument.
static int cli_short(const cli_spec *spec, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const cli_opt *o = cli_find_short(spec, a[1]);
    if (!o) {
        cli_error(spec->tool, "unknown option %s (see %s --help)", a, spec->tool);
        return -1;
    }
    if (o->type == OPT_FLAG) {
        if (a[2]) {
            cli_error(spec->tool, "-%c: takes no value (%s)", a[1], a);
            return -1;
        }
        *(int *)o->dst = 1;
        return 0;
    }
    const char *v = a[2] ? a + 2 : cli_next_value(spec, o, argc, argv, i);
    return v ? cli_set(spec->tool, o, v) : -1;
}

// Says whether -h or --help appears before any "--".
static int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) return 0;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    }
    return 0;
}

// Stores a positional argument, refusing more than the tool takes.
static int cli_positional(const cli_spec *spec, const char *a, const char **pos, int *npos) {
    if (spec->max_pos >= 0 && *npos >= spec->max_pos) {
        cli_error(spec->tool, "too many arguments (%s; usage: %s)", a, spec->usage);
        return -1;
    }
    pos[(*npos)++] = a;
    return 0;
}

// Parses the whole argument list (see cli.h).
int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, int *npos) {
    *npos = 0;
    if (cli_wants_help(argc, argv)) {
        cli_print_help(spec, stdout);
        return CLI_HELP;
    }
    if (cli_defaults(spec) != 0) return CLI_USAGE;
    int only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (!only_pos && !strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (only_pos || a[0] != '-' || a[1] == '\0') rc = cli_positional(spec, a, pos, npos);
        else if (a[1] == '-') rc = cli_long(spec, argc, argv, &i);
        else rc = cli_short(spec, argc, argv, &i);
        if (rc != 0) return CLI_USAGE;
    }
    if (*npos < spec->min_pos) {
        cli_error(spec->tool, "missing argument (usage: %s)", spec->usage);
        return CLI_USAGE;
    }
    return CLI_OK;
}

// cli_parse with at most one positional argument, stored in *pos (or NULL).
int cli_parse_one(const char *tool, const char *usage, const char *summary, const cli_opt *opts,
                  int nopts, int argc, char **argv, const char **pos) {
    cli_spec spec = {.tool = tool, .usage = usage, .summary = summary, .opts = opts, .nopts = nopts,
                     .min_pos = 0, .max_pos = 1};
    const char *p[1] = {NULL};
    int n = 0;
    int rc = cli_parse(&spec, argc, argv, p, &n);
    *pos = n ? p[0] : NULL;
    return rc;
}

// --- help -------------------------------------------------------------------

// Writes the left column of an option's help line ("  -o, --output FILE").
static int cli_help_left(const cli_opt *o, char *buf, size_t len) {
    const char *mv = o->metavar;
    if (!mv) {
        static const char *const dflt[] = {"", "N", "X", "STR", ""};
        mv = o->type == OPT_CHOICE ? o->choices : dflt[o->type];
    }
    char sh[8] = "    ";
    if (o->short_name) snprintf(sh, sizeof sh, "-%c, ", o->short_name);
    return snprintf(buf, len, "  %s--%s%s%s", sh, o->name, *mv ? " " : "", mv);
}

// Prints help text indented to column col, continuing lines after '\n'.
static void cli_help_text(FILE *f, const char *text, int col) {
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n') fprintf(f, "%*s", col, "");
    }
}

// Prints one option's help line with its default.
static void cli_help_opt(FILE *f, const cli_opt *o, int col) {
    char left[160];
    int n = cli_help_left(o, left, sizeof left);
    if (n + 2 > col) fprintf(f, "%s\n%*s", left, col, "");
    else fprintf(f, "%-*s", col, left);
    cli_help_text(f, o->help ? o->help : "", col);
    if (o->type == OPT_FLAG && o->def && atoi(o->def))
        fprintf(f, " (default: on; --no-%s turns it off)", o->name);
    else if (o->type != OPT_FLAG && o->def)
        fprintf(f, " (default: %s)", o->def);
    fputc('\n', f);
}

// Prints usage, summary and every option with its default to f.
void cli_print_help(const cli_spec *spec, FILE *f) {
    fprintf(f, "usage: %s\n", spec->usage);
    if (spec->summary) fprintf(f, "\n%s\n", spec->summary);
    fprintf(f, "\noptions:\n");
    int col = 0;
    char left[160];
    for (int i = 0; i < spec->nopts; i++) {
        int n = cli_help_left(&spec->opts[i], left, sizeof left) + 2;
        if (n > col && n <= 32) col = n;
    }
    if (col < 20) col = 20;
    for (int i = 0; i < spec->nopts; i++) cli_help_opt(f, &spec->opts[i], col);
    fprintf(f, "%-*s%s\n", col, "  -h, --help", "show this help and exit");
}

// --- settings stored for --resume ---------------------------------------------

// How many argv entries starting at a are left out: 0, 1 or 2 (with a value).
static int args_skipped(const char *a, const char *const *skip) {
    for (int k = 0; skip && skip[k]; k++) {
        size_t n = strlen(skip[k]);
        int valued = n > 0 && skip[k][n - 1] == '=';
        if (!valued && !strcmp(a, skip[k])) return 1;
        if (valued && !strncmp(a, skip[k], n)) return 1;             // --name=value
        if (valued && !strncmp(a, skip[k], n - 1) && !a[n - 1]) return 2;  // --name value
    }
    return 0;
}

// Joins argv[1..] into newline-separated text without the skipped options.
char *cli_args_join(int argc, char **argv, const char *const *skip) {
    size_t len = 1;
    for (int i = 1; i < argc; i++) len += strlen(argv[i]) + 1;
    char *s = calloc(len, 1);
    for (int i = 1; s && i < argc; i++) {
        int k = args_skipped(argv[i], skip);
        if (k) {
            i += k - 1;
            continue;
        }
        strcat(s, argv[i]);
        strcat(s, "\n");
    }
    return s;
}

// The value of opt in joined argument text, or none.
int cli_args_int(const char *args, const char *opt, int none) {
    for (const char *p = args; p && (p = strstr(p, opt)) != NULL; p++) {
        const char *v = p + strlen(opt);
        if (*v == '=' || *v == '\n') return atoi(v + 1);
    }
    return none;
}

// argv[0], the stored arguments, then argv[1..], for one combined parse.
char **cli_args_merge(const char *stored, int argc, char **argv, int *out_argc) {
    int n = 1;
    for (const char *p = stored; *p; p++) n += *p == '\n';
    char **v = calloc((size_t)(n + argc + 1), sizeof *v);
    char *copy = strdup(stored);
    if (!v || !copy) {
        free(v);
        free(copy);
        return NULL;
    }
    int k = 0;
    v[k++] = argv[0];
    char *save = NULL;
    for (char *t = strtok_r(copy, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) v[k++] = t;
    for (int i = 1; i < argc; i++) v[k++] = argv[i];
    *out_argc = k;
    return v;
}

// Checks the output file and the --json file before any work.
int cli_outputs_check(const cli_common *c, const char *out, sc_err *err) {
    if (out && out[0]) SC_TRY(sc_output_check(out, err));
    if (c->json && strcmp(c->json, "-")) SC_TRY(sc_output_check(c->json, err));
    return 0;
}
