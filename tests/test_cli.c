// Tests of the tool helpers: option parsing (good and bad argument lists,
// help text), run directories, the progress display and the JSON writer.
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/cli.h"
#include "runtime/json.h"
#include "runtime/progress.h"
#include "runtime/rng.h"
#include "runtime/rundir.h"
#include "tests/check.h"

static char g_dir[256];  // temporary directory of this run

// --- capturing stdout/stderr ------------------------------------------------

typedef struct {
    int fd, saved;
    char path[300];
} capture;

// Starts sending file descriptor fd (1 or 2) into a temporary file.
static void capture_begin(capture *c, int fd) {
    fflush(stdout);
    fflush(stderr);
    snprintf(c->path, sizeof c->path, "%s/capture.%d", g_dir, fd);
    int out = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    c->fd = fd;
    c->saved = dup(fd);
    dup2(out, fd);
    close(out);
}

// Restores the descriptor and returns what was written (static buffer).
static const char *capture_end(capture *c) {
    static char buf[16384];
    fflush(stdout);
    fflush(stderr);
    dup2(c->saved, c->fd);
    close(c->saved);
    FILE *f = fopen(c->path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    unlink(c->path);
    return buf;
}

// --- a tool-like option table -----------------------------------------------

typedef struct {
    cli_common c;
    int epochs, verbose, nesterov;
    double lr;
    const char *output, *sched;
} opts_t;

// Fills a spec for a pretend "train" tool writing into o.
static cli_spec make_spec(opts_t *o, cli_opt *tab, int min_pos, int max_pos) {
    cli_opt t[] = {
        CLI_COMMON_OPTS(o->c),
        {.name = "epochs", .type = OPT_INT, .dst = &o->epochs, .def = "30", .min = 1,
         .max = 10000, .help = "epochs to train"},
        {.name = "lr", .type = OPT_FLOAT, .dst = &o->lr, .def = "0.4", .min = 0, .max = 10,
         .help = "peak learning rate"},
        {.name = "output", .short_name = 'o', .type = OPT_STRING, .dst = &o->output,
         .metavar = "FILE", .help = "model file\n(default: in the run directory)"},
        {.name = "sched", .type = OPT_CHOICE, .dst = &o->sched, .def = "onecycle",
         .choices = "onecycle|cosine|constant", .help = "learning-rate schedule"},
        {.name = "verbose", .short_name = 'v', .type = OPT_FLAG, .dst = &o->verbose,
         .help = "say more"},
        {.name = "nesterov", .type = OPT_FLAG, .dst = &o->nesterov, .def = "1",
         .help = "Nesterov momentum"},
    };
    memcpy(tab, t, sizeof t);
    return (cli_spec){.tool = "train", .usage = "train [options] DATASET",
                      .summary = "Trains a CNN.", .opts = tab,
                      .nopts = (int)(sizeof t / sizeof t[0]), .min_pos = min_pos,
                      .max_pos = max_pos};
}

// Splits a space-separated argument string into argv (static storage).
static int split_args(const char *s, char **argv, char *store, size_t len) {
    snprintf(store, len, "train %s", s);
    int n = 0;
    for (char *tok = strtok(store, " "); tok && n < 63; tok = strtok(NULL, " ")) argv[n++] = tok;
    argv[n] = NULL;
    return n;
}

// Parses args with stderr captured; returns the status and the message.
static int parse_str(opts_t *o, const char *args, const char **pos, int *npos, const char **msg) {
    static char store[1024];
    char *argv[64];
    cli_opt tab[16];
    cli_spec spec = make_spec(o, tab, 1, 1);
    int argc = split_args(args, argv, store, sizeof store);
    capture c;
    capture_begin(&c, 2);
    int rc = cli_parse(&spec, argc, argv, pos, npos);
    *msg = capture_end(&c);
    return rc;
}

// --- cli tests --------------------------------------------------------------

// Defaults apply, and every accepted spelling sets its option.
static void test_cli_good(tctx *t) {
    opts_t o;
    memset(&o, 0x5a, sizeof o);
    const char *pos[4], *msg;
    int n;
    int rc = parse_str(&o, "cifar100", pos, &n, &msg);
    CHECK(t, rc == CLI_OK && n == 1 && !strcmp(pos[0], "cifar100"), "rc %d n %d %s", rc, n, msg);
    CHECK(t, o.epochs == 30 && o.lr == 0.4 && !strcmp(o.sched, "onecycle"), "defaults");
    CHECK(t, !o.verbose && o.nesterov && !o.output && !o.c.json && !o.c.quiet, "flag defaults");
    CHECK(t, !strcmp(o.c.device, "auto") && o.c.seed == 1, "common defaults");
    rc = parse_str(&o, "--epochs=7 --lr 0.05 -o m.h5 --sched=cosine -v --no-nesterov "
                       "--device gpu --seed 0 -q --json out.json synthetic", pos, &n, &msg);
    CHECK(t, rc == CLI_OK, "rc %d: %s", rc, msg);
    CHECK(t, o.epochs == 7 && o.lr == 0.05 && !strcmp(o.output, "m.h5"), "values");
    CHECK(t, !strcmp(o.sched, "cosine") && o.verbose && !o.nesterov, "choice/flags");
    CHECK(t, !strcmp(o.c.device, "gpu") && o.c.seed == 0 && o.c.quiet, "common");
    CHECK(t, !strcmp(o.c.json, "out.json") && n == 1 && !strcmp(pos[0], "synthetic"), "json/pos");
    rc = parse_str(&o, "-ofile.h5 --lr=1e-3 --lr=+2.5E-1 --epochs 10000 -- --not-an-option",
                   pos, &n, &msg);
    CHECK(t, rc == CLI_OK && !strcmp(o.output, "file.h5") && o.lr == 0.25, "rc %d: %s", rc, msg);
    CHECK(t, o.epochs == 10000 && n == 1 && !strcmp(pos[0], "--not-an-option"), "after --");
    rc = parse_str(&o, "--lr 0 -", pos, &n, &msg);
    CHECK(t, rc == CLI_OK && o.lr == 0 && n == 1 && !strcmp(pos[0], "-"), "'-' positional");
    CHECK(t, msg[0] == '\0', "no message on success: %s", msg);
}

// cli_parse_one: the one positional argument, or NULL without one; a second
// one is a usage error.
static void test_cli_parse_one(tctx *t) {
    opts_t o;
    cli_opt tab[16];
    cli_spec spec = make_spec(&o, tab, 0, 1);
    const char *pos = "unset";
    char *one[] = {"tool", "--epochs", "5", "cifar10"}, *none[] = {"tool", "-v"};
    int rc = cli_parse_one("tool", "tool [DATASET]", "x", spec.opts, spec.nopts, 4, one, &pos);
    CHECK(t, rc == CLI_OK && pos && !strcmp(pos, "cifar10") && o.epochs == 5, "rc %d", rc);
    rc = cli_parse_one("tool", "tool [DATASET]", "x", spec.opts, spec.nopts, 2, none, &pos);
    CHECK(t, rc == CLI_OK && !pos && o.verbose, "rc %d, no positional", rc);
    char *two[] = {"tool", "a", "b"};
    capture c;
    capture_begin(&c, 2);
    rc = cli_parse_one("tool", "tool [DATASET]", "x", spec.opts, spec.nopts, 3, two, &pos);
    const char *msg = capture_end(&c);
    CHECK(t, rc == CLI_USAGE, "two positionals: rc %d %s", rc, msg);
}

// Every kind of bad argument list gives exit 2 and one precise line.
static void test_cli_bad(tctx *t) {
    static const char *cases[][2] = {
        {"--epochs abc d", "train: --epochs: not a positive integer (abc)\n"},
        {"--epochs 0 d", "train: --epochs: must be between 1 and 10000 (0)\n"},
        {"--epochs 10001 d", "must be between 1 and 10000 (10001)"},
        {"--epochs 1e3 d", "not a positive integer (1e3)"},
        {"--epochs 2.5 d", "not a positive integer (2.5)"},
        {"--epochs= d", "not a positive integer ()"},
        {"--epochs 99999999999999 d", "(99999999999999)"},
        {"--seed -1 d", "train: --seed: must be at least 0 (-1)\n"},
        {"--seed x d", "--seed: not a non-negative integer (x)"},
        {"--lr abc d", "train: --lr: not a number (abc)\n"},
        {"--lr 1e d", "--lr: not a number (1e)"},
        {"--lr nan d", "--lr: not a number (nan)"},
        {"--lr inf d", "--lr: not a number (inf)"},
        {"--lr -inf d", "--lr: not a number (-inf)"},
        {"--lr 0x10 d", "--lr: not a number (0x10)"},
        {"--lr 1e999 d", "--lr: must be between 0 and 10 (1e999)"},
        {"--lr -0.5 d", "--lr: must be between 0 and 10 (-0.5)"},
        {"--lr 1..2 d", "--lr: not a number (1..2)"},
        {"--device tpu d", "train: --device: must be one of cpu,gpu,auto (tpu)\n"},
        {"--sched= d", "--sched: must be one of onecycle,cosine,constant ()"},
        {"d --device", "train: --device: missing value\n"},
        {"--output --quiet d", "train: --output: missing value\n"},
        {"d -o", "--output: missing value"},
        {"--quiet=1 d", "train: --quiet: takes no value (--quiet=1)\n"},
        {"-q1 d", "-q: takes no value (-q1)"},
        {"--epoch 3 d", "train: unknown option --epoch (did you mean --epochs?)\n"},
        {"--no-epochs d", "unknown option --no-epochs"},
        {"--zzzzzz d", "train: unknown option --zzzzzz (see train --help)\n"},
        {"-z d", "train: unknown option -z (see train --help)\n"},
        {"a b", "train: too many arguments (b; usage: train [options] DATASET)\n"},
        {"", "train: missing argument (usage: train [options] DATASET)\n"},
        {"--json= d", "train: --json: empty value\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        opts_t o;
        const char *pos[4], *msg;
        int n;
        int rc = parse_str(&o, cases[i][0], pos, &n, &msg);
        CHECK(t, rc == CLI_USAGE, "'%s' gave %d", cases[i][0], rc);
        CHECK(t, strstr(msg, cases[i][1]) != NULL, "'%s': got '%s' want '%s'", cases[i][0], msg,
              cases[i][1]);
        const char *nl = strchr(msg, '\n');
        CHECK(t, nl && nl[1] == '\0', "'%s': not one line: '%s'", cases[i][0], msg);
    }
}

// Random argument lists never crash; each ends in OK or one error line.
static void test_cli_fuzz(tctx *t) {
    static const char *pool[] = {"--epochs", "3", "-5", "--lr", "1e-2", "abc", "--device", "cpu",
                                 "-o", "--", "-", "x.h5", "--quiet", "-q", "--sched", "cosine",
                                 "--no-nesterov", "--json", "", "=", "--lr=", "--seed=12"};
    rng r;
    rng_seed(&r, 42, 0);
    for (int it = 0; it < 500; it++) {
        char *argv[10] = {"train"};
        int argc = 1 + (int)rng_below(&r, 8);
        for (int i = 1; i < argc; i++)
            argv[i] = (char *)pool[rng_below(&r, sizeof pool / sizeof pool[0])];
        opts_t o;
        cli_opt tab[16];
        cli_spec spec = make_spec(&o, tab, 0, 2);
        const char *pos[4];
        int n;
        capture c;
        capture_begin(&c, 2);
        int rc = cli_parse(&spec, argc, argv, pos, &n);
        const char *msg = capture_end(&c);
        CHECK(t, rc == CLI_OK || rc == CLI_USAGE, "rc %d", rc);
        CHECK(t, rc == CLI_OK ? !msg[0] : !strncmp(msg, "train: ", 7) && strchr(msg, '\n') ==
              msg + strlen(msg) - 1, "rc %d message '%s'", rc, msg);
        CHECK(t, n >= 0 && n <= 2, "npos %d", n);
    }
}

// Numbers written exactly come back exactly.
static void test_cli_numbers(tctx *t) {
    rng r;
    rng_seed(&r, 7, 0);
    for (int it = 0; it < 200; it++) {
        opts_t o;
        const char *pos[2], *msg;
        int n, e = 1 + (int)rng_below(&r, 10000);
        double lr = rng_uniform(&r) * pow(10, -(int)rng_below(&r, 8));
        char args[128];
        snprintf(args, sizeof args, "--epochs %d --lr %.17g d", e, lr);
        int rc = parse_str(&o, args, pos, &n, &msg);
        CHECK(t, rc == CLI_OK && o.epochs == e && o.lr == lr, "%s -> %d %.17g", args, o.epochs,
              o.lr);
    }
}

// --help prints usage and every option with its default, and returns 1.
static void test_cli_help(tctx *t) {
    opts_t o;
    cli_opt tab[16];
    cli_spec spec = make_spec(&o, tab, 1, 1);
    char *argv[] = {"train", "--epochs", "bad", "--help", NULL};
    const char *pos[2];
    int n;
    capture c;
    capture_begin(&c, 1);
    int rc = cli_parse(&spec, 4, argv, pos, &n);
    const char *out = capture_end(&c);
    CHECK(t, rc == CLI_HELP, "rc %d", rc);
    CHECK(t, strstr(out, "usage: train [options] DATASET") && strstr(out, "Trains a CNN."),
          "usage: %s", out);
    for (int i = 0; i < spec.nopts; i++) {
        char want[96];
        snprintf(want, sizeof want, "--%s", tab[i].name);
        CHECK(t, strstr(out, want) != NULL, "help lacks %s", want);
        if (tab[i].def && tab[i].type != OPT_FLAG) {
            snprintf(want, sizeof want, "(default: %s)", tab[i].def);
            CHECK(t, strstr(out, want) != NULL, "help lacks %s", want);
        }
    }
    CHECK(t, strstr(out, "-o, --output FILE") && strstr(out, "--device cpu|gpu|auto"), "%s", out);
    CHECK(t, strstr(out, "--no-nesterov turns it off") && strstr(out, "-h, --help"), "%s", out);
    CHECK(t, cli_choice_index("cpu|gpu|auto", "gpu") == 1, "choice index");
    CHECK(t, cli_choice_index("cpu|gpu|auto", "gp") == -1, "partial choice");
    CHECK(t, cli_choice_index("cpu|gpu|auto", "") == -1, "empty choice");
}

// --- run directories --------------------------------------------------------

// Creates runs, follows runs/latest and finds inputs by preference.
static void test_rundir(tctx *t) {
    char root[400], a[512], b[512], path[600];
    sc_err err = {{0}};
    snprintf(root, sizeof root, "%s/runs", g_dir);
    CHECK(t, rundir_latest(root, a, sizeof a, &err) != 0, "latest before any run");
    CHECK(t, strstr(err.msg, "no previous run in") && strstr(err.msg, "run train first"), "%s",
          err.msg);
    CHECK(t, rundir_create(root, "data/cifar-100-binary/", "nets/my net.txt", a, sizeof a,
                           &err) == 0, "create: %s", err.msg);
    CHECK(t, strstr(a, "/runs/cifar-100-binary-my_net-") != NULL, "name %s", a);
    CHECK(t, rundir_create(root, "data/cifar-100-binary/", "nets/my net.txt", b, sizeof b,
                           &err) == 0, "create: %s", err.msg);
    CHECK(t, strcmp(a, b) != 0, "two runs share %s", a);
    CHECK(t, rundir_latest(root, path, sizeof path, &err) == 0 && !strcmp(path, b),
          "latest %s want %s (%s)", path, b, err.msg);
    struct stat st;
    snprintf(path, sizeof path, "%s/.latest.tmp.%ld", root, (long)getpid());
    CHECK(t, lstat(path, &st) != 0, "temporary link left");

    const char *cands[] = {"model.quant.h5", "model.pruned.h5", "model.h5", NULL};
    CHECK(t, rundir_find_input(root, cands, path, sizeof path, &err) != 0, "found in empty run");
    CHECK(t, strstr(err.msg, "model.quant.h5, model.pruned.h5 or model.h5") &&
          strstr(err.msg, b), "%s", err.msg);
    const char *names[] = {"model.h5", "model.pruned.h5"};
    for (int i = 0; i < 2; i++) {
        char f[600];
        rundir_join(f, sizeof f, b, names[i], &err);
        fclose(fopen(f, "w"));
        CHECK(t, rundir_find_input(root, cands, path, sizeof path, &err) == 0, "%s", err.msg);
        CHECK(t, !strcmp(path, f), "found %s want %s", path, f);
    }
    rundir_join(path, sizeof path, b, "model.quant.h5", &err);
    mkdir(path, 0777);  // a directory is not an input file
    CHECK(t, rundir_find_input(root, cands, path, sizeof path, &err) == 0 &&
          strstr(path, "model.pruned.h5"), "%s", path);
}

// mkdir -p makes nested paths, refuses files, and a dangling latest is reported.
static void test_rundir_edges(tctx *t) {
    char p[400], out[500];
    sc_err err = {{0}};
    snprintf(p, sizeof p, "%s/x/y//z/", g_dir);
    CHECK(t, rundir_mkdirs(p, &err) == 0 && rundir_mkdirs(p, &err) == 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s/x/file", g_dir);
    fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/x/file/sub", g_dir);
    CHECK(t, rundir_mkdirs(p, &err) != 0 && strstr(err.msg, "x/file"), "%s", err.msg);
    snprintf(p, sizeof p, "%s/runs2", g_dir);
    mkdir(p, 0777);
    snprintf(out, sizeof out, "%s/latest", p);
    CHECK(t, symlink("gone", out) == 0, "symlink");
    CHECK(t, rundir_latest(p, out, sizeof out, &err) != 0 && strstr(err.msg, "missing run"),
          "%s", err.msg);
    CHECK(t, rundir_create(p, "synthetic", "lenet", out, sizeof out, &err) == 0, "%s", err.msg);
    CHECK(t, strstr(out, "runs2/synthetic-lenet-2") != NULL, "name %s", out);
    char tiny[8];
    CHECK(t, rundir_join(tiny, sizeof tiny, "abcdef", "ghij", &err) != 0, "overflow accepted");
}

// --- progress ---------------------------------------------------------------

// Reads a whole small file into a static buffer.
static const char *slurp(const char *path) {
    static char buf[16384];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    return buf;
}

// Counts occurrences of character c in s.
static int count_char(const char *s, char c) {
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

// In a file (not a terminal): plain lines, no '\r'; quiet: nothing.
static void test_progress_plain(tctx *t) {
    char path[400];
    snprintf(path, sizeof path, "%s/progress.log", g_dir);
    FILE *f = fopen(path, "w");
    progress p;
    progress_start(&p, f, "epoch 1/3", 50, 0);
    CHECK(t, p.tty == 0, "a file is not a terminal");
    for (int i = 1; i <= 50; i++) progress_update(&p, i, "loss 2.31");  // default 10 s interval
    p.interval = 0;
    progress_update(&p, 50, "loss 1.50 acc 41.2%");
    progress_finish(&p, NULL);
    log_line(f, 0, "val %.1f%%", 40.5);
    log_line(f, 1, "hidden");
    progress q;
    progress_start(&q, f, "quiet", 10, 1);
    progress_update(&q, 10, "x");
    progress_finish(&q, "y");
    fclose(f);
    const char *s = slurp(path);
    CHECK(t, count_char(s, '\r') == 0 && !strchr(s, '\x1b'), "redraw in a log: %s", s);
    CHECK(t, count_char(s, '\n') == 3, "expected 3 lines: '%s'", s);
    CHECK(t, strstr(s, "epoch 1/3: 50/50 (100%)") && strstr(s, "loss 1.50 acc 41.2%"), "%s", s);
    CHECK(t, strstr(s, "epoch 1/3: 50/50 done in 0:00"), "%s", s);
    CHECK(t, strstr(s, "val 40.5%\n") && !strstr(s, "hidden") && !strstr(s, "quiet"), "%s", s);
}

// Forced terminal mode: redraws with '\r', throttled, newline at the end.
static void test_progress_tty(tctx *t) {
    char path[400], buf[32];
    snprintf(path, sizeof path, "%s/progress.tty", g_dir);
    FILE *f = fopen(path, "w");
    progress p;
    progress_start(&p, f, "eval", 0, 0);
    p.tty = 1;
    p.total = 100000;
    for (long i = 1; i <= 100000; i++) progress_update(&p, i, "acc 50.0%");
    progress_log(&p, "a note");
    progress_finish(&p, "acc 51.0%");
    fclose(f);
    const char *s = slurp(path);
    int redraws = count_char(s, '\r');
    CHECK(t, redraws >= 3 && redraws <= 30, "%d redraws", redraws);
    CHECK(t, strstr(s, "[####################] 100000/100000") && strstr(s, "acc 51.0%\x1b[K\n"),
          "%s", s);
    CHECK(t, strstr(s, "\r\x1b[Ka note\n"), "log line not on its own line");
    progress_fmt_time(59.6, buf, sizeof buf);
    CHECK(t, !strcmp(buf, "1:00"), "%s", buf);
    progress_fmt_time(3725, buf, sizeof buf);
    CHECK(t, !strcmp(buf, "1:02:05"), "%s", buf);
    progress_fmt_time(NAN, buf, sizeof buf);
    CHECK(t, !strcmp(buf, "?"), "%s", buf);
}

// A resumed task: the items done before count in done/total, not in the rate.
static void test_progress_resume(tctx *t) {
    char path[400];
    snprintf(path, sizeof path, "%s/progress.resume", g_dir);
    FILE *f = fopen(path, "w");
    progress p;
    progress_start(&p, f, "ref", 1000, 0);
    progress_resume(&p, 900);
    p.t0 -= 10.0;  // 10 s into this run
    progress_finish(&p, NULL);
    fclose(f);
    const char *s = slurp(path);
    CHECK(t, strstr(s, "ref: 900/1000 done in 0:10 (0.000/s)") != NULL, "%s", s);
    f = fopen(path, "w");
    progress_start(&p, f, "ref", 1000, 0);
    progress_resume(&p, 900);
    p.t0 -= 10.0, p.interval = 0;
    progress_update(&p, 950, NULL);  // 50 in 10 s: 5/s, 50 left: 10 s
    fclose(f);
    s = slurp(path);
    CHECK(t, strstr(s, "950/1000 (95%) 5.0/s elapsed 0:10 eta 0:10") != NULL, "%s", s);
}

// --- json -------------------------------------------------------------------

// Escapes, nulls for NaN/inf, nesting; the text reads back through the
// lookup functions and (when present) Python's json module.
static void test_json(tctx *t) {
    json_writer j;
    json_init(&j);
    json_object_begin(&j, NULL);
    json_add_string(&j, "tool", "train");
    json_add_string(&j, "odd \"key\"", "a \"q\" \\ b\nc\td\x01 \xc3\xa9");
    json_add_number(&j, "nan", NAN);
    json_add_number(&j, "inf", -INFINITY);
    json_add_number(&j, "acc", 71.25);
    json_add_number(&j, "tenth", 0.1);
    json_add_int(&j, "big", -1234567890123LL);
    json_add_bool(&j, "flag", 1);
    json_add_string(&j, "none", NULL);
    json_array_begin(&j, "history");
    for (int e = 1; e <= 2; e++) {
        json_object_begin(&j, NULL);
        json_add_int(&j, "epoch", e);
        json_add_number(&j, "loss", e == 2 ? NAN : 2.5);
        json_object_end(&j);
    }
    json_array_end(&j);
    json_array_begin(&j, "empty");
    json_array_end(&j);
    json_add_number(&j, "last", 1e-300);
    json_object_end(&j);
    const char *s = json_text(&j);
    CHECK(t, s != NULL, "text: %s", j.why);
    if (!s) return;
    char str[128];
    double d;
    int b;
    CHECK(t, strstr(s, "\"nan\": null") && strstr(s, "\"inf\": null"), "%s", s);
    CHECK(t, strstr(s, "\"tenth\": 0.1,") && strstr(s, "\\u0001"), "%s", s);
    CHECK(t, json_get_string(s, "odd \"key\"", str, sizeof str) == 0 &&
          !strcmp(str, "a \"q\" \\ b\nc\td\x01 \xc3\xa9"), "string back: %s", str);
    CHECK(t, json_get_number(s, "acc", &d) == 0 && d == 71.25, "acc");
    CHECK(t, json_get_number(s, "big", &d) == 0 && d == -1234567890123.0, "big");
    CHECK(t, json_get_number(s, "last", &d) == 0 && d == 1e-300, "last (after nested)");
    CHECK(t, json_get_number(s, "nan", &d) != 0, "null read as a number");
    CHECK(t, json_get_bool(s, "flag", &b) == 0 && b == 1, "flag");
    CHECK(t, json_get_string(s, "missing", str, sizeof str) != 0, "missing key found");
    CHECK(t, json_get_string(s, "tool", str, 3) != 0, "too long string accepted");
    CHECK(t, json_get_string("{\"u\": \"\\u00e9\\ud83d\\ude00\"}", "u", str, sizeof str) == 0 &&
          !strcmp(str, "\xc3\xa9\xf0\x9f\x98\x80"), "unicode escapes: %s", str);
    char path[400], cmd[700];
    sc_err err = {{0}};
    snprintf(path, sizeof path, "%s/summary.json", g_dir);
    CHECK(t, json_write_file(&j, path, &err) == 0, "%s", err.msg);
    const char *back = slurp(path);
    CHECK(t, strlen(back) == strlen(s) + 1 && !strncmp(back, s, strlen(s)), "file content");
    if (access("/usr/bin/python3", X_OK) == 0) {
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"import json,sys; d=json.load(open('%s'));"
                 " sys.exit(0 if d['history'][1]['loss'] is None and d['tool']=='train' else 1)\"",
                 path);
        CHECK(t, system(cmd) == 0, "python's json rejects the file");
    }
    json_free(&j);
}

// Misuse is caught and nothing is written; numbers survive exactly.
static void test_json_misuse(tctx *t) {
    json_writer j;
    sc_err err = {{0}};
    char path[400];
    snprintf(path, sizeof path, "%s/bad.json", g_dir);
    json_init(&j);
    json_object_begin(&j, NULL);
    json_add_int(&j, NULL, 3);  // no key inside an object
    json_object_end(&j);
    CHECK(t, json_text(&j) == NULL && json_write_file(&j, path, &err) != 0, "misuse accepted");
    CHECK(t, strstr(err.msg, "without a key") && access(path, F_OK) != 0, "%s", err.msg);
    json_free(&j);
    json_object_begin(&j, NULL);
    CHECK(t, json_text(&j) == NULL, "unfinished document accepted");
    json_array_end(&j);
    CHECK(t, j.failed, "unbalanced end accepted");
    json_free(&j);
    rng r;
    rng_seed(&r, 3, 0);
    json_object_begin(&j, NULL);
    double vals[50];
    for (int i = 0; i < 50; i++) {
        char k[16];
        snprintf(k, sizeof k, "v%d", i);
        vals[i] = (rng_uniform(&r) - 0.5) * pow(10, (int)rng_below(&r, 40) - 20);
        json_add_number(&j, k, vals[i]);
    }
    json_object_end(&j);
    for (int i = 0; i < 50; i++) {
        char k[16];
        double d = 0;
        snprintf(k, sizeof k, "v%d", i);
        CHECK(t, json_get_number(json_text(&j), k, &d) == 0 && d == vals[i], "%s", k);
    }
    json_free(&j);
}

// Removes the temporary tree (depth-limited, only what the tests made).
static void cleanup(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (strstr(g_dir, "sc_cli_")) (void)!system(cmd);
}

// Stored settings: skipped options (flags, valued in both spellings) are left
// out, and a merge puts the stored arguments before the current ones.
static void test_cli_args_store(tctx *t) {
    char *argv[] = {"prune", "--resume", "--stop-after", "3", "--lr=0.2", "--time-limit=9",
                    "-o", "x.h5", "cifar100"};
    const char *const skip[] = {"--resume", "--stop-after=", "--time-limit=", NULL};
    char *s = cli_args_join(9, argv, skip);
    CHECK(t, s && !strcmp(s, "--lr=0.2\n-o\nx.h5\ncifar100\n"), "joined: %s", s ? s : "(null)");
    char *cur[] = {"prune", "--quiet"};
    int n = 0;
    char **v = s ? cli_args_merge(s, 2, cur, &n) : NULL;
    CHECK(t, v && n == 6 && !strcmp(v[0], "prune") && !strcmp(v[1], "--lr=0.2") &&
             !strcmp(v[4], "cifar100") && !strcmp(v[5], "--quiet"), "merged %d", n);
    char *all = cli_args_join(9, argv, NULL);
    CHECK(t, all && strstr(all, "--resume\n--stop-after\n3\n"), "no skip list keeps all");
    CHECK(t, cli_args_int(all, "--stop-after", -1) == 3 && cli_args_int(all, "--time-limit", -1) == 9 &&
             cli_args_int(all, "--val-size", -1) == -1 && cli_args_int(NULL, "--lr", 7) == 7,
          "stored option values");
    free(all);
    free(s);
}

int main(void) {
    tctx t = {.suite = "test_cli"};
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/sc_cli_XXXXXX", tmp);
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(&t, test_cli_good);
    RUN(&t, test_cli_parse_one);
    RUN(&t, test_cli_bad);
    RUN(&t, test_cli_fuzz);
    RUN(&t, test_cli_numbers);
    RUN(&t, test_cli_help);
    RUN(&t, test_rundir);
    RUN(&t, test_rundir_edges);
    RUN(&t, test_progress_plain);
    RUN(&t, test_progress_tty);
    RUN(&t, test_progress_resume);
    RUN(&t, test_json);
    RUN(&t, test_json_misuse);
    RUN(&t, test_cli_args_store);
    cleanup();
    return check_finish(&t);
}
