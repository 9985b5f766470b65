// What the prune tool reports: the per-layer table (shape, weights,
// non-zeros, sparsity), the search history as CSV and JSON, and the
// accuracy-vs-sparsity plot (PNG through gnuplot when it is installed, else
// an SVG drawn by hand).
#ifndef SC_PRUNE_REPORT_H
#define SC_PRUNE_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "prune/pop.h"
#include "runtime/error.h"
#include "runtime/json.h"
#include "runtime/net.h"
#include "runtime/pattern.h"

// Prints one row per conv/linear weight and a total over the pruned layers;
// under a block or N:M pattern pat (NULL: unstructured) each pruned row also
// shows its own pattern and its kept / total blocks.
void prune_report_table(FILE *f, const net *nt, const sc_pattern *pat);

// Adds "layers": [{name, shape, weights, nonzeros, sparsity, pruned, floor}, ...];
// floor (one per prunable tensor, in tensor order: prune_layers) or NULL
// gives the pruned layers' "floor" (their sparsity floor at the end); under
// a pattern pat (NULL: unstructured) the pruned layers also get "pattern"
// (their own), "blocks", "blocks_kept", "pattern_fallback" and "off_pattern".
void prune_report_json_layers(json_writer *j, const net *nt, const double *floor,
                              const sc_pattern *pat);

// Adds "history": [{iteration, phase, target, best_val_accuracy, ...}, ...].
void prune_report_json_history(json_writer *j, const prune_pop *p);

// Writes the history as CSV (one row per iteration) atomically.
int prune_report_csv(const char *path, const prune_pop *p, sc_err *err);

// Draws best and mean validation accuracy against overall sparsity per
// iteration to <prefix>.png with gnuplot, or <prefix>.svg when gnuplot is
// missing or fails; out receives the file written.
int prune_report_plot(const char *prefix, const prune_pop *p, const char *title, char *out,
                      size_t outlen, sc_err *err);

// Writes the same plot as an SVG to path (no external program).
int prune_report_svg(const char *path, const prune_pop *p, const char *title, sc_err *err);

#endif
