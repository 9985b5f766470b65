// Reports of the prune tool: per-layer table, history CSV/JSON, the plot.
#include "report.h"
#include "runtime/atomic.h"
#include "runtime/ops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// --- per-layer figures ------------------------------------------------------

// "KxCxRxS" of a tensor into out.
static void tensor_shape(const ptensor *p, char *out, size_t len) {
    size_t k = 0;
    out[0] = 0;
    for (int d = 0; d < p->ndim && k < len; d++)
        k += (size_t)snprintf(out + k, len - k, d ? "x%d" : "%d", p->dims[d]);
}

// True for conv/linear weights (the rows of the table).
static int is_weight(const net *nt, int t) {
    const ptensor *p = &nt->tensors[t];
    return p->kind == PT_WEIGHT && op_of(nt->layers[p->layer].kind)->sparse_geom;
}

// The pattern geometry of tensor t under pat into g; 0 when pat is NULL,
// unstructured or t is not pruned (no block columns then).
static int layer_geom(const net *nt, int t, const sc_pattern *pat, sc_pattern_geom *g) {
    if (!pat || sc_pattern_is_unstructured(pat) || !nt->tensors[t].prunable) return 0;
    sc_pattern_geom_of(pat, nt, t, g);
    return 1;
}

// The block columns of a pruned layer: its own pattern (marked "*" when it
// is a fallback), kept / total units and, under KxC+F, the single weights.
static void table_blocks(FILE *f, const net *nt, int t, const sc_pattern *pat) {
    sc_pattern_geom g;
    char text[40];
    if (!layer_geom(nt, t, pat, &g)) return;
    sc_pattern_geom_format(&g, text, sizeof text);
    size_t kept = sc_pattern_units_kept(&g, nt->mask + nt->tensors[t].offset);
    fprintf(f, "  %s%s %zu/%zu blocks", text, g.fallback ? "*" : "", kept, g.units);
    if (g.kind == PAT_BLOCK && g.rem > 0.0)
        fprintf(f, ", %zu singles", sc_pattern_singles(&g, nt->mask + nt->tensors[t].offset));
}

// Prints the per-layer table.
void prune_report_table(FILE *f, const net *nt, const sc_pattern *pat) {
    size_t tot = 0, tnz = 0;
    fprintf(f, "%-28s %-14s %10s %10s %9s\n", "layer", "shape", "weights", "non-zeros",
            "sparsity");
    for (int t = 0; t < nt->ntensors; t++) {
        if (!is_weight(nt, t)) continue;
        const ptensor *p = &nt->tensors[t];
        char shape[64];
        tensor_shape(p, shape, sizeof shape);
        size_t nz = net_tensor_kept(nt, t);
        fprintf(f, "%-28s %-14s %10zu %10zu %8.2f%%%s", p->name, shape, p->count, nz,
                100.0 * (double)(p->count - nz) / (double)p->count,
                p->prunable ? "" : "  (not pruned)");
        table_blocks(f, nt, t, pat);
        fputc('\n', f);
        if (p->prunable) tot += p->count, tnz += nz;
    }
    fprintf(f, "%-28s %-14s %10zu %10zu %8.2f%%\n", "total (pruned layers)", "", tot, tnz,
            tot ? 100.0 * (double)(tot - tnz) / (double)tot : 0.0);
    fprintf(f, "compute: %.1f of %.1f MMAC per image kept, %.2f%% pruned by multiply-accumulates (what time "
               "follows; the weights' figure above counts every weight alike)\n",
            net_macs_kept(nt) / 1e6, net_macs(nt) / 1e6, 100.0 * net_mac_sparsity(nt));
    if (pat && !sc_pattern_is_unstructured(pat))
        fprintf(f, "blocks: the layer's own pattern (* = narrower than asked or unstructured: "
                "see docs/prune.md, \"Patterns\"), blocks with a kept weight / all\n");
}

// Adds a pruned layer's pattern fields: "pattern", "blocks", "blocks_kept",
// "blocks_kept_row_max" (block layers: the busiest row of kb output channels),
// "singles" (KxC+F layers: kept weights outside whole blocks),
// "pattern_fallback", "off_pattern".
static void json_blocks(json_writer *j, const net *nt, int t, const sc_pattern *pat) {
    sc_pattern_geom g;
    char text[40];
    if (!layer_geom(nt, t, pat, &g)) return;
    const float *mask = nt->mask + nt->tensors[t].offset;
    sc_pattern_geom_format(&g, text, sizeof text);
    json_add_string(j, "pattern", text);
    json_add_int(j, "blocks", (long long)g.units);
    json_add_int(j, "blocks_kept", (long long)sc_pattern_units_kept(&g, mask));
    if (g.kind == PAT_BLOCK) json_add_int(j, "blocks_kept_row_max", (long long)sc_pattern_row_max_kept(&g, mask));
    if (g.kind == PAT_BLOCK && g.rem > 0.0) json_add_int(j, "singles", (long long)sc_pattern_singles(&g, mask));
    json_add_bool(j, "pattern_fallback", g.fallback);
    json_add_int(j, "off_pattern", (long long)sc_pattern_violations(&g, mask));
}

// Adds the per-layer array to a JSON object.
void prune_report_json_layers(json_writer *j, const net *nt, const double *floor,
                              const sc_pattern *pat) {
    int k = 0;  // index among the prunable tensors
    json_array_begin(j, "layers");
    for (int t = 0; t < nt->ntensors; t++) {
        int l = nt->tensors[t].prunable ? k++ : -1;
        if (!is_weight(nt, t)) continue;
        const ptensor *p = &nt->tensors[t];
        char shape[64];
        tensor_shape(p, shape, sizeof shape);
        size_t nz = net_tensor_kept(nt, t);
        json_object_begin(j, NULL);
        json_add_string(j, "name", p->name);
        json_add_string(j, "shape", shape);
        json_add_int(j, "weights", (long long)p->count);
        json_add_int(j, "nonzeros", (long long)nz);
        json_add_number(j, "sparsity", (double)(p->count - nz) / (double)p->count);
        json_add_bool(j, "pruned", p->prunable);
        if (floor && l >= 0) json_add_number(j, "floor", floor[l]);
        json_blocks(j, nt, t, pat);
        json_object_end(j);
    }
    json_array_end(j);
}

// --- history ----------------------------------------------------------------

// Name of a history phase.
static const char *phase_name(int phase) {
    return phase == 0 ? "start" : phase == 1 ? "prune" : "finetune";
}

// Adds the history array to a JSON object.
void prune_report_json_history(json_writer *j, const prune_pop *p) {
    json_array_begin(j, "history");
    for (int i = 0; i < p->nhist; i++) {
        const prune_hist *h = &p->hist[i];
        json_object_begin(j, NULL);
        json_add_int(j, "iteration", h->iter);
        json_add_string(j, "phase", phase_name(h->phase));
        json_add_number(j, "target_sparsity", h->target);
        json_add_number(j, "best_val_accuracy", h->best_acc);
        json_add_number(j, "mean_val_accuracy", h->mean_acc);
        json_add_number(j, "best_sparsity", h->best_sparsity);
        json_add_number(j, "mean_sparsity", h->mean_sparsity);
        json_add_int(j, "images", h->images);
        json_add_number(j, "seconds", h->seconds);
        json_add_int(j, "admitted", h->admitted);
        json_add_int(j, "rewound", h->rewound);
        json_add_int(j, "mutated", h->mutated);
        json_add_int(j, "crossed", h->crossed);
        json_add_int(j, "replaced", h->replaced);
        json_add_number(j, "best_predicted_latency_ms", h->best_latency_ms);
        json_add_number(j, "mean_predicted_latency_ms", h->mean_latency_ms);
        json_add_number(j, "measured_latency_ms", h->measured_latency_ms);  // a latency check's
        json_add_number(j, "latency_scale", h->lat_scale);
        json_object_end(j);
    }
    json_array_end(j);
}

// Writes milliseconds v and then sep, or only sep when v is not finite (an empty field).
static void csv_ms(FILE *f, double v, char sep) {
    if (isfinite(v)) fprintf(f, "%.5f", v);
    fputc(sep, f);
}

// Writes the history CSV.
int prune_report_csv(const char *path, const prune_pop *p, sc_err *err) {
    sc_atomic a;
    SC_TRY(sc_atomic_begin(&a, path, err));
    FILE *f = sc_atomic_fopen(&a, "w", err);
    if (!f) return -1;
    fprintf(f, "iteration,phase,target_sparsity,best_val_accuracy,mean_val_accuracy,"
               "best_sparsity,mean_sparsity,images,seconds,admitted,rewound,mutated,crossed,"
               "replaced,best_predicted_latency_ms,mean_predicted_latency_ms,measured_latency_ms\n");
    for (int i = 0; i < p->nhist; i++) {
        const prune_hist *h = &p->hist[i];
        fprintf(f, "%d,%s,%.6f,%.4f,%.4f,%.6f,%.6f,%ld,%.2f,%d,%d,%d,%d,%d,", h->iter,
                phase_name(h->phase), h->target, h->best_acc, h->mean_acc, h->best_sparsity,
                h->mean_sparsity, h->images, h->seconds, h->admitted, h->rewound, h->mutated,
                h->crossed, h->replaced);
        csv_ms(f, h->best_latency_ms, ',');  // empty: no latency model
        csv_ms(f, h->mean_latency_ms, ',');
        csv_ms(f, h->measured_latency_ms, '\n');  // empty: not checked
    }
    return sc_atomic_fclose(&a, f, 0, err);
}

// --- plot -------------------------------------------------------------------

// Axis ranges of the history: sparsity in [0, 1], accuracy padded.
static void plot_ranges(const prune_pop *p, double *ylo, double *yhi) {
    double lo = 100.0, hi = 0.0;
    for (int i = 0; i < p->nhist; i++) {
        lo = fmin(lo, fmin(p->hist[i].best_acc, p->hist[i].mean_acc));
        hi = fmax(hi, fmax(p->hist[i].best_acc, p->hist[i].mean_acc));
    }
    if (hi < lo) lo = 0.0, hi = 100.0;
    *ylo = fmax(0.0, floor(lo / 5.0) * 5.0 - 5.0);
    *yhi = fmin(100.0, ceil(hi / 5.0) * 5.0 + 5.0);
    if (*yhi <= *ylo) *yhi = *ylo + 10.0;
}

// Writes one SVG polyline (and its points) of best (which = 0) or mean accuracy.
static void svg_series(FILE *f, const prune_pop *p, int which, double ylo, double yhi,
                       const char *colour) {
    const double X0 = 70, Y0 = 40, W = 540, H = 320;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", colour);
    for (int i = 0; i < p->nhist; i++) {
        const prune_hist *h = &p->hist[i];
        double sx = which ? h->mean_sparsity : h->best_sparsity, a = which ? h->mean_acc : h->best_acc;
        fprintf(f, "%.1f,%.1f ", X0 + W * sx, Y0 + H * (1.0 - (a - ylo) / (yhi - ylo)));
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; i < p->nhist; i++) {
        const prune_hist *h = &p->hist[i];
        double sx = which ? h->mean_sparsity : h->best_sparsity, a = which ? h->mean_acc : h->best_acc;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", X0 + W * sx,
                Y0 + H * (1.0 - (a - ylo) / (yhi - ylo)), colour);
    }
}

// Writes the axes, ticks and labels of the SVG plot.
static void svg_axes(FILE *f, double ylo, double yhi, const char *title) {
    const double X0 = 70, Y0 = 40, W = 540, H = 320;
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n",
            X0, Y0, W, H);
    for (int k = 0; k <= 10; k++) {
        double x = X0 + W * k / 10.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>\n", x, Y0, x, Y0 + H);
        fprintf(f, "<text x=\"%.1f\" y=\"%g\" font-size=\"11\" text-anchor=\"middle\">%.1f</text>\n", x,
                Y0 + H + 16, k / 10.0);
    }
    for (int k = 0; k <= 5; k++) {
        double y = Y0 + H * (1.0 - k / 5.0);
        fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", X0, y, X0 + W, y);
        fprintf(f, "<text x=\"%g\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.1f</text>\n", X0 - 6,
                y + 4, ylo + (yhi - ylo) * k / 5.0);
    }
    fprintf(f, "<text x=\"%g\" y=\"24\" font-size=\"14\" text-anchor=\"middle\">", X0 + W / 2);
    for (const char *c = title; *c; c++) {  // escape the title
        if (*c == '<') fputs("&lt;", f);
        else if (*c == '&') fputs("&amp;", f);
        else fputc(*c, f);
    }
    fprintf(f, "</text>\n<text x=\"%g\" y=\"%g\" font-size=\"12\" text-anchor=\"middle\">overall "
               "sparsity of the pruned layers</text>\n", X0 + W / 2, Y0 + H + 36);
    fprintf(f, "<text x=\"16\" y=\"%g\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 %g)\">"
               "validation accuracy (%%)</text>\n", Y0 + H / 2, Y0 + H / 2);
}

// Latency objective: history rows labelled with their best predicted latency
// (every step-th one and the last), so that at most about 10 labels show; 0
// when the history has no predicted latency.
static int lat_label_step(const prune_pop *p) {
    if (p->nhist < 1 || isnan(p->hist[p->nhist - 1].best_latency_ms)) return 0;
    return p->nhist > 10 ? (p->nhist + 9) / 10 : 1;
}

// Writes the best solutions' predicted latencies beside their points.
static void svg_latency(FILE *f, const prune_pop *p, double ylo, double yhi) {
    const double X0 = 70, Y0 = 40, W = 540, H = 320;
    int step = lat_label_step(p);
    for (int i = 0; step && i < p->nhist; i++) {
        const prune_hist *h = &p->hist[i];
        if ((i % step && i != p->nhist - 1) || isnan(h->best_latency_ms)) continue;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"#2c3e50\">%.3g ms</text>\n",
                X0 + W * h->best_sparsity + 4, Y0 + H * (1.0 - (h->best_acc - ylo) / (yhi - ylo)) - 4,
                h->best_latency_ms);
    }
}

// Writes the SVG plot.
int prune_report_svg(const char *path, const prune_pop *p, const char *title, sc_err *err) {
    sc_atomic a;
    double ylo, yhi;
    SC_TRY(sc_atomic_begin(&a, path, err));
    FILE *f = sc_atomic_fopen(&a, "w", err);
    if (!f) return -1;
    plot_ranges(p, &ylo, &yhi);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"420\" "
               "font-family=\"sans-serif\">\n<rect width=\"640\" height=\"420\" fill=\"white\"/>\n");
    svg_axes(f, ylo, yhi, title);
    svg_series(f, p, 1, ylo, yhi, "#999999");
    svg_series(f, p, 0, ylo, yhi, "#c0392b");
    svg_latency(f, p, ylo, yhi);
    fprintf(f, "<text x=\"80\" y=\"58\" font-size=\"12\" fill=\"#c0392b\">best</text>\n"
               "<text x=\"80\" y=\"74\" font-size=\"12\" fill=\"#999999\">mean</text>\n</svg>\n");
    return sc_atomic_fclose(&a, f, 0, err);
}

// Runs gnuplot on an inline-data script writing a PNG; 0 on success.
static int plot_gnuplot(const char *png, const prune_pop *p, const char *title) {
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) return -1;
    sc_atomic a;
    if (sc_atomic_begin(&a, png, NULL) != 0) return -1;
    const char *tmp = a.tmp;
    FILE *g = popen("gnuplot >/dev/null 2>&1", "w");
    if (!g) return -1;
    double ylo, yhi;
    plot_ranges(p, &ylo, &yhi);
    fprintf(g, "set terminal pngcairo size 800,520\nset output '%s'\n", tmp);
    fprintf(g, "set title \"");
    for (const char *c = title; *c; c++) fputc(*c == '"' || *c == '\\' ? '\'' : *c, g);
    fprintf(g, "\" noenhanced\nset xlabel 'overall sparsity of the pruned layers'\n"
               "set ylabel 'validation accuracy (%%)'\nset xrange [0:1]\nset yrange [%g:%g]\n"
               "set grid\nset key left bottom\n$d << EOD\n", ylo, yhi);
    int step = lat_label_step(p);
    for (int i = 0; i < p->nhist; i++)
        fprintf(g, "%.6f %.4f %.6f %.4f %.4g\n", p->hist[i].best_sparsity, p->hist[i].best_acc,
                p->hist[i].mean_sparsity, p->hist[i].mean_acc,
                step && (i % step == 0 || i == p->nhist - 1) ? p->hist[i].best_latency_ms : -1.0);
    fprintf(g, "EOD\nplot $d using 3:4 with linespoints lc rgb '#999999' title 'mean', "
               "$d using 1:2 with linespoints lc rgb '#c0392b' lw 2 title 'best'%s\n",
            step ? ", $d using 1:2:($5 >= 0 ? sprintf('%.3g ms', $5) : '') with labels offset 1,1 "
                   "font ',8' tc rgb '#2c3e50' title 'predicted latency'" : "");
    int rc = pclose(g);
    return sc_atomic_end(&a, rc != 0 || access(tmp, F_OK) != 0 ? -1 : 0, NULL);
}

// PNG through gnuplot, else a hand-written SVG.
int prune_report_plot(const char *prefix, const prune_pop *p, const char *title, char *out,
                      size_t outlen, sc_err *err) {
    if (snprintf(out, outlen, "%s.png", prefix) >= (int)outlen)
        return sc_fail(err, "path too long (%s)", prefix);
    if (plot_gnuplot(out, p, title) == 0) return 0;
    snprintf(out, outlen, "%s.svg", prefix);
    return prune_report_svg(out, p, title, err);
}
