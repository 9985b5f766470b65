// The `export` tool: turns a trained, pruned and optionally quantized model
// into the compact CSR file the deploy runtime loads (docs/export-format.md):
// BN folded, real non-zeros only (layers pruned on KxC blocks: BSR of their
// kept blocks), narrow column indices, values in fp32, fp16 or 4-bit
// codebook indices, HDF5 shuffle + deflate. Prints a per-layer
// size table and the file size against dense fp32.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/csr.h"
#include "export/export_io.h"
#include "runtime/cli.h"
#include "runtime/json.h"
#include "runtime/model_io.h"
#include "runtime/pattern.h"
#include "runtime/progress.h"
#include "runtime/quant_io.h"
#include "runtime/rundir.h"

#define TOOL "export"

// --- options ----------------------------------------------------------------

typedef struct {
    cli_common c;
    const char *output, *codebook, *runs, *bsr;
    int half;
    const char *model;   // positional, or NULL: the latest run's
} export_opts;

// Parses argv into o; returns CLI_OK, CLI_HELP or CLI_USAGE.
static int opts_parse(export_opts *o, int argc, char **argv) {
    cli_opt opts[] = {
        CLI_COMMON_OPTS(o->c),
        {.name = "output", .short_name = 'o', .type = OPT_STRING, .dst = &o->output,
         .metavar = "FILE", .help = "export file to write (default: model.csr.h5 next to the input)"},
        {.name = "half", .type = OPT_FLAG, .dst = &o->half,
         .help = "store the values in fp16 (default fp32; codebook layers store 4-bit codes)"},
        {.name = "codebook", .type = OPT_CHOICE, .dst = &o->codebook, .def = "auto",
         .choices = "auto|on|off",
         .help = "4-bit codebook indices: auto for the layers quantize gave <= 16 k-means centroids,\n"
                 "on for every layer (else derived from its <= 16 distinct values), or off"},
        {.name = "bsr", .type = OPT_CHOICE, .dst = &o->bsr, .def = "auto", .choices = "auto|off",
         .help = "block layers as scipy BSR: auto for the layers pruned on a KxC pattern whose mask\n"
                 "is on its block grid (prune --pattern; with a pattern KxC+F, the single weights\n"
                 "beside the blocks as a CSR remainder), off: every layer as CSR"},
        {.name = "runs", .type = OPT_STRING, .dst = &o->runs, .def = "runs", .metavar = "DIR",
         .help = "root of the run directories"},
    };
    return cli_parse_one(TOOL, "export [options] [MODEL]",
                         "Writes a model's conv and linear layers as compact CSR (BN folded, real non-zeros\n"
                         "only, narrow indices, 4-bit codes after quantize, compressed; layers pruned on\n"
                         "KxC blocks as BSR of their kept blocks) into an HDF5 file for the deploy\n"
                         "runtime, which derives its kernel layouts at load time. MODEL:\n"
                         "a model file (default: the latest run's model.quant.h5, else model.pruned.h5,\n"
                         "else model.h5). Runs on the CPU (--device is unused).",
                         opts, (int)(sizeof opts / sizeof *opts), argc, argv, &o->model);
}

// --- the run ----------------------------------------------------------------

typedef struct {
    export_opts o;
    net *nt;
    model_meta meta;
    sparse_model *m;
    quant_model *quant;  // quantize's codebooks of the input, or NULL
    export_info info;
    export_layer_size *sizes;  // (m->nlayers) bytes each layer takes in the file
    char in[PATH_MAX], out[PATH_MAX + 16];
    long long file_bytes, dense_bytes, nnz, padding, total;
    double t0, seconds;
} export_run;

// Finds the input (argument or latest run) and the output path.
static int paths_set(export_run *r, sc_err *err) {
    if (r->o.model) {
        if (snprintf(r->in, sizeof r->in, "%s", r->o.model) >= (int)sizeof r->in)
            return sc_fail(err, "path too long (%s)", r->o.model);
    } else {
        const char *cand[] = {"model.quant.h5", "model.pruned.h5", "model.h5", NULL};
        SC_TRY(rundir_find_input(r->o.runs, cand, r->in, sizeof r->in, err));
    }
    struct stat a, b;
    if (r->o.output) {
        snprintf(r->out, sizeof r->out, "%s", r->o.output);
        if (stat(r->in, &a) == 0 && stat(r->out, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return sc_fail(err, "the output would overwrite the input model (%s)", r->out);
        return cli_outputs_check(&r->o.c, r->out, err);
    }
    const char *slash = strrchr(r->in, '/');
    if (!slash) snprintf(r->out, sizeof r->out, "model.csr.h5");
    else snprintf(r->out, sizeof r->out, "%.*s/model.csr.h5", (int)(slash - r->in), r->in);
    return cli_outputs_check(&r->o.c, r->out, err);
}

// Loads the model and builds the sparse form.
static int build(export_run *r, sc_err *err) {
    r->nt = model_load(r->in, &r->meta, err);
    if (!r->nt) return -1;
    export_cfg cfg = {.half = r->o.half,
                      .codebook = (export_cb_mode)cli_choice_index("auto|on|off", r->o.codebook)};
    if (cfg.codebook != EXPORT_CB_OFF) SC_TRY(quant_load(r->in, r->nt, &r->quant, err));
    cfg.quant = r->quant;
    sc_pattern pat;
    if (sc_pattern_parse(r->meta.pattern[0] ? r->meta.pattern : NULL, &pat, err) != 0)
        return sc_wrap(err, "pattern attribute of %s", r->in);
    cfg.pattern = &pat;
    cfg.csr_only = !strcmp(r->o.bsr, "off");
    r->m = export_build(r->nt, r->meta.dataset, &cfg, &r->info, err);
    if (!r->m) return sc_wrap(err, "%s", r->in);
    r->sizes = calloc((size_t)(r->m->nlayers ? r->m->nlayers : 1), sizeof *r->sizes);
    if (!r->sizes) return sc_fail(err, "out of memory");
    for (int i = 0; i < r->m->nlayers; i++) {
        const sparse_layer *l = &r->m->layers[i];
        long long cells = (long long)l->K * l->C * l->R * l->S;
        r->nnz += l->nnz;
        r->total += cells;
        r->padding += (long long)l->K * l->nnz_row - l->nnz;
        r->dense_bytes += 4 * (cells + l->K);
    }
    return 0;
}

// Appends the export line to the history and writes the file.
static int write_out(export_run *r, sc_err *err) {
    char line[PATH_MAX + 256], bsr[48] = "";
    if (r->info.bsr_layers) snprintf(bsr, sizeof bsr, " (%d as BSR blocks)", r->info.bsr_layers);
    snprintf(line, sizeof line,
             "export: %s values, %d layers%s, %lld of %lld weights %s%s, from %s",
             sparse_vtype_name(r->m->vtype), r->m->nlayers, bsr, r->nnz, r->total,
             r->info.bsr_layers ? "stored" : "non-zero", r->info.pruned ? "" : " (not pruned: dense rows)",
             r->in);
    SC_TRY(model_meta_add_history(&r->meta, line, err));
    SC_TRY(export_write(r->out, r->m, (const char *const *)r->meta.history, r->meta.nhistory,
                        r->sizes, err));
    struct stat st;
    r->file_bytes = stat(r->out, &st) == 0 ? (long long)st.st_size : -1;
    return 0;
}

// --- reports ------------------------------------------------------------------

// Formats a layer's weight shape: "K x C x R x S" (conv) or "K x C" (linear).
static void shape_fmt(const sparse_layer *l, char *out, size_t len) {
    if (l->is_linear) snprintf(out, len, "%dx%d", l->K, l->C);
    else snprintf(out, len, "%dx%dx%dx%d", l->K, l->C, l->R, l->S);
}

// Percentage a / b (0 when b is 0).
static double pct(double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; }

// Stored bytes of a layer (every dataset).
static size_t size_total(const export_layer_size *s) {
    return s->indices + s->values + s->codebook + s->bias;
}

// Dense fp32 bytes of a layer's weights and bias.
static long long dense_bytes(const sparse_layer *l) {
    return 4 * ((long long)l->K * l->C * l->R * l->S + l->K);
}

// A layer's storage: "csr", or "bsr KBxCB" with its block ("+rem": with a
// remainder of single weights).
static void layout_fmt(const sparse_layer *l, char *out, size_t len) {
    if (l->bsr.kb > 0) snprintf(out, len, "bsr %dx%d%s", l->bsr.kb, l->bsr.cb, l->bsr.nrem ? "+rem" : "");
    else snprintf(out, len, "csr");
}

// Prints one row of the size table.
static void table_row(const char *name, const char *shape, long nnz, double sparsity,
                      const export_layer_size *s, long long dense, const char *layout) {
    const size_t b = size_total(s);
    printf("%-24s %-16s %10ld %8.2f%% %9zu %9zu %8zu %7zu %10zu %11lld %7.1fx%s%s\n", name, shape, nnz,
           sparsity, s->indices, s->values, s->codebook, s->bias, b, dense,
           b ? (double)dense / (double)b : 0.0, layout[0] ? "  " : "", layout);
}

// Prints the per-layer size table, the totals and the closing line.
static void table_print(const export_run *r) {
    const sparse_model *m = r->m;
    printf("%-24s %-16s %10s %9s %9s %9s %8s %7s %10s %11s %8s  %s\n", "layer", "shape", "nnz",
           "sparsity", "indices", "values", "codebook", "bias", "bytes", "dense_fp32", "ratio", "layout");
    export_layer_size tot = {0};
    for (int i = 0; i < m->nlayers; i++) {
        const sparse_layer *l = &m->layers[i];
        const export_layer_size *s = &r->sizes[i];
        char shape[64], layout[48];
        shape_fmt(l, shape, sizeof shape);
        layout_fmt(l, layout, sizeof layout);
        double cells = (double)l->K * l->C * l->R * l->S;
        table_row(m->nt->layers[l->layer].name, shape, l->nnz, 100.0 - pct((double)l->nnz, cells), s,
                  dense_bytes(l), layout);
        tot.indices += s->indices, tot.values += s->values, tot.codebook += s->codebook, tot.bias += s->bias;
    }
    table_row("total", "", (long)r->nnz, 100.0 - pct((double)r->nnz, (double)r->total), &tot,
              r->dense_bytes, "");
    printf("exported %s (%s): %d layers, sparsity %.2f%% (pruned layers %.2f%%), values %s; "
           "file %lld bytes vs dense fp32 %lld bytes (%.2fx, %.1fx smaller); %s\n",
           m->nt->arch, m->dataset[0] ? m->dataset : "unknown dataset", m->nlayers,
           100.0 - pct((double)r->nnz, (double)r->total), 100.0 * net_sparsity(r->nt),
           sparse_vtype_name(m->vtype), r->file_bytes, r->dense_bytes,
           r->dense_bytes > 0 ? (double)r->file_bytes / r->dense_bytes : 0.0,
           r->file_bytes > 0 ? (double)r->dense_bytes / r->file_bytes : 0.0, r->out);
}

// Adds a layer's stored bytes as the JSON object "bytes" and its ratio.
static void json_sizes(json_writer *j, const export_layer_size *s, long long dense) {
    json_object_begin(j, "bytes");
    json_add_int(j, "indices", (long long)s->indices);
    json_add_int(j, "values", (long long)s->values);
    json_add_int(j, "codebook", (long long)s->codebook);
    json_add_int(j, "bias", (long long)s->bias);
    json_add_int(j, "total", (long long)size_total(s));
    json_object_end(j);
    json_add_int(j, "dense_fp32_bytes", dense);
    json_add_number(j, "ratio_to_dense", dense ? (double)size_total(s) / (double)dense : 0.0);
}

// Adds one layer's object to the JSON layers array.
static void json_layer(json_writer *j, const sparse_model *m, const sparse_layer *l,
                       const export_layer_size *s) {
    const long long cells = (long long)l->K * l->C * l->R * l->S;
    const long long pad = (long long)l->K * l->nnz_row - l->nnz;
    json_object_begin(j, NULL);
    json_add_string(j, "name", m->nt->layers[l->layer].name);
    json_add_string(j, "kind", l->is_linear ? "linear" : "conv");
    json_add_string(j, "values", sparse_vtype_name(l->vtype));
    json_add_string(j, "layout", l->bsr.kb > 0 ? "bsr" : "csr");
    if (l->bsr.kb > 0) {
        json_array_begin(j, "blocksize");
        json_add_int(j, NULL, l->bsr.kb);
        json_add_int(j, NULL, l->bsr.cb);
        json_array_end(j);
        json_add_int(j, "blocks", l->bsr.nblocks);
        json_add_int(j, "singles", l->bsr.nrem);
    }
    json_array_begin(j, "shape");
    json_add_int(j, NULL, l->K);
    json_add_int(j, NULL, (long long)l->C * l->R * l->S);
    json_array_end(j);
    json_add_int(j, "nnz", l->nnz);
    json_add_number(j, "sparsity", cells ? 1.0 - (double)l->nnz / cells : 0.0);
    json_add_int(j, "nnz_row", l->nnz_row);
    json_add_int(j, "padding", pad);
    json_add_number(j, "padding_overhead", l->nnz ? (double)pad / l->nnz : 0.0);
    json_sizes(j, s, dense_bytes(l));
    json_add_string(j, "bn", l->bn >= 0 ? m->nt->layers[l->bn].name : NULL);
    json_add_string(j, "activation", l->relu ? "relu" : "none");
    json_add_string(j, "pool", l->pool_k ? "max" : "none");
    json_object_end(j);
}

// Writes the JSON summary (--json).
static int summary_json(const export_run *r, sc_err *err) {
    if (!r->o.c.json) return 0;
    json_writer j;
    json_init(&j);
    json_object_begin(&j, NULL);
    json_add_string(&j, "tool", TOOL);
    json_add_string(&j, "dataset", r->m->dataset);
    json_add_string(&j, "model", r->m->nt->arch);
    json_add_string(&j, "input", r->in);
    json_add_string(&j, "output", r->out);
    json_add_string(&j, "values", sparse_vtype_name(r->m->vtype));
    json_add_bool(&j, "pruned", r->info.pruned);
    json_add_string(&j, "notice", r->info.notice[0] ? r->info.notice : NULL);
    json_add_int(&j, "bsr_layers", r->info.bsr_layers);
    json_add_string(&j, "bsr_notice", r->info.bsr_notice[0] ? r->info.bsr_notice : NULL);
    json_add_number(&j, "sparsity", net_sparsity(r->nt));
    json_add_number(&j, "weight_sparsity", r->total ? 1.0 - (double)r->nnz / r->total : 0.0);
    json_add_int(&j, "nnz", r->nnz);
    json_add_int(&j, "padding", r->padding);
    json_add_number(&j, "padding_overhead", r->nnz ? (double)r->padding / r->nnz : 0.0);
    json_add_int(&j, "file_bytes", r->file_bytes);
    json_add_int(&j, "dense_fp32_bytes", r->dense_bytes);
    json_add_number(&j, "ratio_to_dense", r->dense_bytes ? (double)r->file_bytes / r->dense_bytes : 0.0);
    json_add_number(&j, "seconds", r->seconds);
    json_array_begin(&j, "layers");
    for (int i = 0; i < r->m->nlayers; i++) json_layer(&j, r->m, &r->m->layers[i], &r->sizes[i]);
    json_array_end(&j);
    json_object_end(&j);
    int rc = json_write_file(&j, r->o.c.json, err);
    json_free(&j);
    return rc;
}

// Runs the tool after option parsing; returns an exit status.
static int export_tool(export_run *r) {
    sc_err err = {{0}};
    r->t0 = progress_clock();
    int rc = paths_set(r, &err) || build(r, &err);
    if (!rc && !r->info.pruned)
        log_line(stderr, r->o.c.quiet, "export: model is not pruned; exporting dense rows (%s)", r->in);
    if (!rc && r->info.notice[0]) log_line(stderr, r->o.c.quiet, "export: %s", r->info.notice);
    if (!rc && r->info.bsr_notice[0]) log_line(stderr, r->o.c.quiet, "export: %s", r->info.bsr_notice);
    if (!rc) rc = write_out(r, &err);
    r->seconds = progress_clock() - r->t0;
    if (!rc) table_print(r);
    if (!rc) rc = summary_json(r, &err);
    if (rc) cli_error(TOOL, "%s", err.msg);
    sparse_model_free(r->m);
    free(r->sizes);
    quant_model_free(r->quant);
    net_free(r->nt);
    model_meta_free(&r->meta);
    return rc ? SC_EXIT_INPUT : SC_EXIT_OK;
}

int main(int argc, char **argv) {
    export_run r;
    memset(&r, 0, sizeof r);
    model_meta_init(&r.meta);
    int rc = opts_parse(&r.o, argc, argv);
    if (rc == CLI_HELP) return SC_EXIT_OK;
    if (rc != CLI_OK) return SC_EXIT_USAGE;
    return export_tool(&r);
}
