// The deploy tool's reports (runtime/deploy_report.h): per-layer table,
// end-to-end summary, JSON summary and the per-layer speedup chart (SVG).
#include "runtime/deploy_report.h"

#include "runtime/atomic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The per-layer time columns every JSON layer has (null when not measured).
static const char *const REPORT_COLS[] = {"cudnn_fp32", "cudnn_tf32", "cudnn_fp16",
                                          "sparse_fp32", "sparse_fp16", "cusparse"};
#define REPORT_NCOLS ((int)(sizeof REPORT_COLS / sizeof *REPORT_COLS))

// --- timings ----------------------------------------------------------------

// Allocates a timing for nops ops (NANs, chosen -1).
int deploy_timing_init(deploy_timing *t, int nops, int n, sc_err *err) {
    memset(t, 0, sizeof *t);
    size_t k = (size_t)(nops > 0 ? nops : 1);
    t->ms = malloc(k * sizeof *t->ms), t->err = malloc(k * sizeof *t->err);
    t->op_ms = malloc(k * sizeof *t->op_ms), t->chosen = malloc(k * sizeof *t->chosen);
    t->passed = malloc(k * sizeof *t->passed);
    if (!t->ms || !t->err || !t->op_ms || !t->chosen || !t->passed) {
        deploy_timing_free(t);
        return sc_fail(err, "out of memory");
    }
    t->n = n, t->nops = nops;
    for (int i = 0; i < nops; i++) {
        for (int c = 0; c < DEPLOY_MAX_CANDS; c++) t->ms[i][c] = t->err[i][c] = NAN, t->passed[i][c] = -1;
        t->op_ms[i] = NAN, t->chosen[i] = -1;
    }
    return 0;
}

// Frees a timing's arrays (a zeroed timing is fine).
void deploy_timing_free(deploy_timing *t) {
    free(t->ms), free(t->err), free(t->op_ms), free(t->chosen), free(t->passed);
    memset(t, 0, sizeof *t);
}

// --- leaving candidates out (deploy_gpu.h; plain C for every build) --------------

// 1 when word (len characters) names candidate c or its family (the name up to its first '_').
static int skip_matches(const char *word, size_t len, int c) {
    const char *n = deploy_cand_name(c), *u = strchr(n, '_');
    const size_t fam = u ? (size_t)(u - n) : strlen(n);
    return (strlen(n) == len || fam == len) && !strncmp(n, word, len);
}

// Parses --skip-candidates' list into a mask of candidate indices.
int deploy_cand_parse_skip(const char *list, unsigned *mask, sc_err *err) {
    *mask = 0;
    for (const char *s = list; deploy_cand_count() > 0;) {
        const size_t len = strcspn(s, ",");
        int hit = 0;
        for (int c = 0; c < deploy_cand_count(); c++) {
            if (!skip_matches(s, len, c)) continue;
            if (deploy_cand_dense(c))
                return sc_fail(err, "--skip-candidates: %s is a dense baseline and cannot be left out",
                               deploy_cand_name(c));
            *mask |= 1u << c, hit = 1;
        }
        if (!hit) return sc_fail(err, "--skip-candidates: '%.*s' is no candidate or family of this build", (int)len, s);
        if (!s[len]) break;
        s += len + 1;
    }
    return 0;
}

// Whether skip leaves candidate c out of op i (never a dense baseline).
int deploy_gpu_skipped(const deploy_gpu_skip *skip, int i, int c) {
    if (!skip || deploy_cand_dense(c)) return 0;
    if (skip->cands >> c & 1u) return 1;
    return deploy_cand_skips_zeros(c) && skip->act_sparsity && skip->act_sparsity[i] < skip->act_min;
}

// Images per second of one batch.
double deploy_ips(int n, double ms) { return ms > 0 && isfinite(ms) ? n * 1000.0 / ms : NAN; }

// The result of precision prec, or NULL when it did not run.
static const deploy_prec_result *rep_prec(const deploy_report *r, deploy_prec prec) {
    for (int i = 0; i < r->nprec; i++)
        if (r->pr[i].prec == prec && r->pr[i].ran) return &r->pr[i];
    return NULL;
}

// Index of the candidate called name, or -1.
static int rep_cand(const char *name) {
    for (int c = 0; c < deploy_cand_count(); c++)
        if (!strcmp(deploy_cand_name(c), name)) return c;
    return -1;
}

// Time of candidate c on op i at batch 1 (b1) or the batch size; NAN when unknown.
static double rep_ms(const deploy_report *r, int i, int c, int b1) {
    if (c < 0) return NAN;
    const deploy_prec_result *pr = rep_prec(r, deploy_cand_prec(c));
    if (!pr) return NAN;
    const deploy_timing *t = b1 ? &pr->t1 : &pr->tb;
    return t->ms ? t->ms[i][c] : NAN;
}

// 1 when candidate c failed its check on op i at the batch size (b1: at 1).
static int rep_failed(const deploy_report *r, int i, int c, int b1) {
    const deploy_prec_result *pr = c >= 0 ? rep_prec(r, deploy_cand_prec(c)) : NULL;
    const deploy_timing *t = pr ? (b1 ? &pr->t1 : &pr->tb) : NULL;
    return t && t->passed && t->passed[i][c] == 0;
}

// Whether candidate c is one of this toolkit's sparse kernels ("sparse*", "actsparse*").
static int rep_is_sparse(int c) {
    const char *n = deploy_cand_name(c);
    return !strncmp(n, "sparse", 6) || !strncmp(n, "actsparse", 9);
}

// Fastest sparse candidate (rep_is_sparse) of precision prec on op i.
static double rep_sparse_ms(const deploy_report *r, int i, deploy_prec prec, int b1) {
    double best = NAN;
    for (int c = 0; c < deploy_cand_count(); c++) {
        double ms = rep_ms(r, i, c, b1);
        if (deploy_cand_prec(c) == prec && rep_is_sparse(c) &&
            isfinite(ms) && !(ms >= best) && !rep_failed(r, i, c, b1))
            best = ms;
    }
    return best;
}

// Fastest dense baseline time of op i in precision prec.
static double rep_dense_ms(const deploy_report *r, int i, deploy_prec prec, int b1) {
    double best = NAN;
    for (int c = 0; c < deploy_cand_count(); c++) {
        double ms = rep_ms(r, i, c, b1);
        if (deploy_cand_prec(c) == prec && deploy_cand_dense(c) && isfinite(ms) && !(ms >= best))
            best = ms;
    }
    return best;
}

// Dense cuDNN time over the best sparse time of op i in precision prec.
static double rep_speedup(const deploy_report *r, int i, deploy_prec prec, int b1) {
    return rep_dense_ms(r, i, prec, b1) / rep_sparse_ms(r, i, prec, b1);
}

// Name of the candidate chosen for op i by precision prec, or NULL.
static const char *rep_chosen(const deploy_report *r, int i, deploy_prec prec, int b1) {
    const deploy_prec_result *pr = rep_prec(r, prec);
    if (!pr) return NULL;
    const deploy_timing *t = b1 ? &pr->t1 : &pr->tb;
    return t->chosen && t->chosen[i] >= 0 ? deploy_cand_name(t->chosen[i]) : NULL;
}

// --- the table ----------------------------------------------------------------

// Prints a time cell ("-" when unknown, a '*' after it when it failed its check).
static void rep_cell(FILE *f, double ms, int width, int failed) {
    if (isfinite(ms) && failed) fprintf(f, " %*.3f*", width - 1, ms);
    else if (isfinite(ms)) fprintf(f, " %*.3f", width, ms);
    else fprintf(f, " %*s", width, "-");
}

// Prints a speedup cell ("-" when unknown).
static void rep_speed_cell(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, " %6.2fx", x);
    else fprintf(f, " %7s", "-");
}

// Whether the table has a column for candidate c (its precision ran, --skip-candidates kept it).
static int rep_column(const deploy_report *r, int c) {
    return rep_prec(r, deploy_cand_prec(c)) && !(r->skip_cands >> c & 1u);
}

// Whether the activation-sparsity filter left candidate c out of op i.
static int rep_filtered(const deploy_report *r, int i, int c) {
    const deploy_gpu_skip skip = {.act_sparsity = r->act_sparsity, .act_min = r->act_min};
    return r->gpu && deploy_gpu_skipped(&skip, i, c);
}

// Prints the header line of the table.
static void rep_table_head(FILE *f, const deploy_report *r) {
    fprintf(f, "%-24s %-18s %8s %7s", "layer", "shape", "sparsity", "act-sp");
    if (!r->gpu) {
        fprintf(f, " %11s\n", "cpu_ms");
        return;
    }
    for (int c = 0; c < deploy_cand_count(); c++)
        if (rep_column(r, c)) fprintf(f, " %11s", deploy_cand_name(c));
    fprintf(f, " %7s %7s  %s\n", "x fp32", "x fp16", "chosen");
}

// Prints what the sparse plans left out: --skip-candidates and the activation-sparsity filter.
static void rep_table_skips(FILE *f, const deploy_report *r) {
    if (!r->gpu) return;
    int any = 0;
    for (int c = 0; c < deploy_cand_count(); c++)
        if (r->skip_cands >> c & 1u) fprintf(f, "%s%s", any++ ? " " : "(left out on every layer: ", deploy_cand_name(c));
    if (any) fprintf(f, ", --skip-candidates)\n");
    if (r->act_min > 0)
        fprintf(f, "(skip: activation-sparse candidate not timed, the layer's act-sp is below %.0f%%, "
                   "--actsparse-min-zeros)\n", 100.0 * r->act_min);
}

// Prints the per-layer table (times in ms at the batch size).
void deploy_report_table(FILE *f, const deploy_plan *p, const deploy_report *r) {
    char shape[64];
    fprintf(f, "per layer, batch %d, median of %d, milliseconds:\n", r->batch, r->repeat);
    rep_table_head(f, r);
    double other = 0.0;
    for (int i = 0; i < p->nops; i++) {
        const deploy_op *op = &p->ops[i];
        const deploy_timing *tb = r->nprec ? &r->pr[0].tb : NULL;
        if (op->kind != DOP_CONV) {
            double ms = r->gpu ? (tb && tb->op_ms ? tb->op_ms[i] : NAN) : r->cpu_op_ms ? r->cpu_op_ms[i] : NAN;
            other += isfinite(ms) ? ms : 0.0;
            continue;
        }
        deploy_op_shape(p, op, shape, sizeof shape);
        fprintf(f, "%-24.24s %-18.18s %7.1f%%", op->name, shape, 100.0 * deploy_op_sparsity(p, op));
        const double as = r->act_sparsity ? r->act_sparsity[i] : NAN;
        if (isfinite(as)) fprintf(f, " %6.1f%%", 100.0 * as);
        else fprintf(f, " %7s", "-");
        if (!r->gpu) {
            rep_cell(f, r->cpu_op_ms ? r->cpu_op_ms[i] : NAN, 11, 0);
            fputc('\n', f);
            continue;
        }
        for (int c = 0; c < deploy_cand_count(); c++) {
            if (!rep_column(r, c)) continue;
            if (rep_filtered(r, i, c)) fprintf(f, " %11s", "skip");
            else rep_cell(f, rep_ms(r, i, c, 0), 11, rep_failed(r, i, c, 0));
        }
        double s32 = rep_speedup(r, i, DP_FP32, 0), s16 = rep_speedup(r, i, DP_FP16, 0);
        rep_speed_cell(f, s32);
        rep_speed_cell(f, s16);
        const char *c32 = rep_chosen(r, i, DP_FP32, 0), *c16 = rep_chosen(r, i, DP_FP16, 0);
        fprintf(f, "  %s%s%s\n", c32 ? c32 : "", c32 && c16 ? " " : "", c16 ? c16 : "");
    }
    fprintf(f, "%-24s %-18s %8s %7s", "other ops", "(add, pool, ...)", "", "");
    rep_cell(f, other, 11, 0);
    fputc('\n', f);
    if (r->act_images) fprintf(f, "(act-sp: zeros in the layer's input over %ld test images of the CPU reference)\n",
                               r->act_images);
    if (r->gpu) fprintf(f, "(* failed its check against the CPU reference: timed, never chosen)\n");
    rep_table_skips(f, r);
}

// --- the summary ----------------------------------------------------------------

// The engine precision a plan is measured against: fp16 for the fp16 plan,
// TF32 for the fp32 plan (the fastest dense network on fp32 data).
static dengine_prec rep_engine_of(deploy_prec p) { return p == DP_FP16 ? DE_FP16 : DE_TF32; }

// Prints one precision's end-to-end lines: against the dense engine first,
// then against the old per-layer cuDNN plan (labelled as the weaker baseline).
static void rep_summary_prec(FILE *f, const deploy_report *r, const deploy_prec_result *pr) {
    const char *pn = deploy_prec_name(pr->prec);
    const deploy_engine_result *e = &r->eng[rep_engine_of(pr->prec)];
    const char *en = dengine_prec_name(rep_engine_of(pr->prec));
    fprintf(f, "%s sparse plan: test accuracy %.2f%%", pn, pr->test_acc);
    if (pr->compared)
        fprintf(f, " (first %ld images: %.2f%%, CPU reference %.2f%%, same top-1 on %ld)", pr->compared,
                pr->ref_acc, r->cpu_acc, pr->agree);
    fprintf(f, ", logits within %.2g of the CPU's\n", pr->logits_err);
    fprintf(f, "  batch %d: %.3f ms (%.0f img/s)%s", r->batch, pr->ms, deploy_ips(r->batch, pr->ms),
            pr->graph ? "" : " (no CUDA graph)");
    if (e->ran) fprintf(f, "; dense %s engine %.3f ms: %.2fx", en, e->ms, e->ms / pr->ms);
    fprintf(f, "\n  batch 1: %.3f ms", pr->lat_ms);
    if (e->ran) fprintf(f, "; dense %s engine %.3f ms: %.2fx", en, e->lat_ms, e->lat_ms / pr->lat_ms);
    fprintf(f, "\n  (weaker baseline, old per-layer cuDNN %s plan, NCHW%s: batch %d %.3f ms = %.2fx, "
               "batch 1 %.3f ms = %.2fx)\n",
            pn, pr->prec == DP_FP32 ? ", TF32 off" : ", transposes", r->batch, pr->dense_ms,
            pr->dense_ms / pr->ms, pr->dense_lat_ms, pr->dense_lat_ms / pr->lat_ms);
    if (pr->tb.dense_failed || pr->t1.dense_failed)
        fprintf(f, "  warning: the cuDNN baseline failed its check on %d layers at batch %d and %d at "
                   "batch 1 (timed anyway, never chosen)\n", pr->tb.dense_failed, r->batch,
                pr->t1.dense_failed);
}

// TFLOP/s of a conv op run in ms at batch n: dense (sparse 0) or useful (sparse 1, stored weights only).
static double rep_tflops(const deploy_plan *p, const deploy_op *op, int sparse, int n, double ms) {
    return 2.0 * deploy_op_macs(p, op, sparse) * n / (ms * 1e9);
}

// A plan precision's name.
const char *deploy_prec_name(deploy_prec p) { return p == DP_FP16 ? "fp16" : "fp32"; }

// 1 when the mixed plan keeps a tail launch with its whole-forward times.
static int rep_has_tail(const deploy_engine_result *m) {
    return isfinite(m->tail_ms) && m->tail_ms > 0.0 && isfinite(m->tail_off_ms) && m->tail_off_ms > 0.0;
}

// What the mixed plan runs op i on, in words ("" when nothing to say): the
// tail (path 3) runs the op inside one launch with its chain, not on the
// sparse path timed in the row.
static const char *rep_mixed_choice(const deploy_engine_result *m, int i) {
    if (m->op_path[i] == 3) return " tail";
    if (m->op_path[i]) return " sparse";
    return m->op_sparse_ms[i] < m->op_dense_ms[i] ? " cudnn (whole graph faster)" : "";
}

// Prints the mixed plan's choice per conv that has a sparse path: the
// engine's cuDNN time against the fastest checked sparse path, both timed
// alone on the op's real input at the batch size, and what runs it (a
// sparse path faster alone goes back to cuDNN when the whole graph is).
static void rep_summary_mixed_layers(FILE *f, const deploy_plan *p, const deploy_report *r) {
    const deploy_engine_result *m = &r->mixed;
    if (!m->op_dense_ms || !m->op_sparse_ms || !m->op_path) return;
    fprintf(f, "  per layer in the engine, batch %d, ms (each path alone on the layer's input; gain: cudnn - "
               "sparse alone, and the whole graph's time on cudnn - with the layer sparse; TFLOP/s: cudnn's "
               "of the dense layer, sparse's useful, 2 x stored weights x output pixels / time):\n"
               "  %-24s %10s %10s %8s %10s %10s %8s %8s\n", r->batch, "layer", "cudnn", "sparse", "x cudnn",
               "gain alone", "in graph", "TF cudnn", "TF sp");
    for (int i = 0; i < p->nops; i++) {
        const double dn = m->op_dense_ms[i], sp = m->op_sparse_ms[i];
        const double gg = m->op_graph_gain_ms ? m->op_graph_gain_ms[i] : NAN;
        if (!isfinite(dn) || !isfinite(sp)) continue;
        fprintf(f, "  %-24s %10.4f %10.4f %7.2fx %10.4f", p->ops[i].name, dn, sp, dn / sp, dn - sp);
        if (isfinite(gg)) fprintf(f, " %10.4f", gg);
        else fprintf(f, " %10s", "-");
        fprintf(f, " %8.1f %8.1f%s\n", rep_tflops(p, &p->ops[i], 0, r->batch, dn),
                rep_tflops(p, &p->ops[i], 1, r->batch, sp), rep_mixed_choice(m, i));
    }
    if (rep_has_tail(m))
        fprintf(f, "  the layers marked tail run in one launch, not on the path timed in their row: the whole "
                   "forward takes %.4f ms with it, %.4f ms with them on their one-layer paths (%.2fx)\n",
                m->tail_ms, m->tail_off_ms, m->tail_off_ms / m->tail_ms);
    else if (m->tail_note[0])
        fprintf(f, "  no tail launch (a chain of small-plane block-sparse convs in one kernel): %s\n", m->tail_note);
}

// Prints the dense engine's lines (one per precision that ran).
static void rep_summary_engines(FILE *f, const deploy_plan *p, const deploy_report *r) {
    int any = 0;
    for (int k = 0; k < DE_NPREC; k++) any |= r->eng[k].ran;
    if (!any) return;
    fprintf(f, "dense engine (cuDNN graph API, NHWC, BN folded, fused epilogues, one CUDA graph):\n");
    for (int k = 0; k < DE_NPREC; k++) {
        const deploy_engine_result *e = &r->eng[k];
        if (!e->ran) continue;
        fprintf(f, "  %s: batch %d %.3f ms (%.0f img/s), batch 1 %.3f ms; test accuracy %.2f%%",
                dengine_prec_name((dengine_prec)k), r->batch, e->ms, deploy_ips(r->batch, e->ms),
                e->lat_ms, e->test_acc);
        if (e->compared) fprintf(f, " (same top-1 as the CPU on %ld of %ld)", e->agree, e->compared);
        fprintf(f, ", logits within %.2g; built in %.1f s\n", e->logits_err, e->build_s);
    }
    const deploy_engine_result *m = &r->mixed, *e = &r->eng[DE_FP16];
    if (!m->ran) return;
    fprintf(f, "mixed fp16 plan (the fp16 engine, each conv on the sparse kernel where that measures faster, "
               "layout conversions included):\n  batch %d %.3f ms = %.2fx over the fp16 engine, batch 1 %.3f ms "
               "= %.2fx; test accuracy %.2f%%; %d sparse layer%s%s%s\n",
            r->batch, m->ms, e->ms / m->ms, m->lat_ms, e->lat_ms / m->lat_ms, m->test_acc, m->nsparse,
            m->nsparse == 1 ? "" : "s", m->nsparse ? ": " : "", m->sparse);
    fprintf(f, "  against its own all-cuDNN forward, alternating rounds (no drift between two builds): batch %d "
               "%.3f vs %.3f ms = %.2fx, batch 1 %.3f vs %.3f ms = %.2fx\n",
            r->batch, m->ab_ms, m->ab_dense_ms, m->ab_dense_ms / m->ab_ms, m->ab_lat_ms, m->ab_dense_lat_ms,
            m->ab_dense_lat_ms / m->ab_lat_ms);
    const double *a = m->pdl_ms, *b = m->pdl_lat_ms;
    if (isfinite(a[1]))
        fprintf(f, "  block-sparse kernels as programmatic dependent launches (each may start while the kernel "
                   "before it ends; the next let in after the main loop / from the start) against plain launches, "
                   "alternating rounds: batch %d %.3f / %.3f vs %.3f ms = %.2fx / %.2fx, batch 1 %.3f / %.3f vs "
                   "%.3f ms = %.2fx / %.2fx\n",
                r->batch, a[1], a[2], a[0], a[0] / a[1], a[0] / a[2], b[1], b[2], b[0], b[0] / b[1], b[0] / b[2]);
    rep_summary_mixed_layers(f, p, r);
}

// The run's result: its fastest plan against its fastest dense engine.
typedef struct {
    const char *plan, *key;   // the fastest plan in words and as a JSON name (NULL: none ran)
    double ms, lat_ms, acc;   // its batch and batch-1 times and test accuracy
    int eng;                  // the dense engine fastest at the batch size (-1: none ran)
    double eng_ms, eng_lat_ms;
} rep_result;

// Takes the plan (ms, lat, acc) as the result's when it is faster than the one there.
static void rep_result_offer(rep_result *o, const char *plan, const char *key, double ms, double lat,
                             double acc) {
    if (!(ms > 0.0) || (o->plan && ms >= o->ms)) return;
    o->plan = plan, o->key = key, o->ms = ms, o->lat_ms = lat, o->acc = acc;
}

// The fastest of the mixed fp16 plan and the sparse plans, and the fastest dense engine, at the batch size.
static rep_result rep_result_pick(const deploy_report *r) {
    rep_result o = {.eng = -1};
    if (r->mixed.ran) rep_result_offer(&o, "the mixed fp16 plan", "mixed_fp16", r->mixed.ms, r->mixed.lat_ms,
                                       r->mixed.test_acc);
    for (int i = 0; i < r->nprec; i++)
        if (r->pr[i].ran)
            rep_result_offer(&o, r->pr[i].prec == DP_FP16 ? "the fp16 sparse plan" : "the fp32 sparse plan",
                             deploy_prec_name(r->pr[i].prec), r->pr[i].ms, r->pr[i].lat_ms,
                             r->pr[i].test_acc);
    for (int k = 0; k < DE_NPREC; k++)
        if (r->eng[k].ran && r->eng[k].ms > 0.0 && (o.eng < 0 || r->eng[k].ms < o.eng_ms))
            o.eng = k, o.eng_ms = r->eng[k].ms, o.eng_lat_ms = r->eng[k].lat_ms;
    return o;
}

// Prints the closing line: the fastest plan against the fastest dense engine (the yardstick a user
// would otherwise run), or that the dense engine is faster.
static void rep_summary_result(FILE *f, const deploy_report *r) {
    rep_result o = rep_result_pick(r);
    if (!o.plan || o.eng < 0) return;
    const char *en = dengine_prec_name((dengine_prec)o.eng);
    if (o.ms < o.eng_ms)
        fprintf(f, "result: %s is the fastest: batch %d %.3f ms = %.2fx the fastest dense engine (%s, %.3f ms), "
                   "batch 1 %.3f ms = %.2fx (%.3f ms); test accuracy %.2f%%\n",
                o.plan, r->batch, o.ms, o.eng_ms / o.ms, en, o.eng_ms, o.lat_ms, o.eng_lat_ms / o.lat_ms,
                o.eng_lat_ms, o.acc);
    else
        fprintf(f, "result: the dense %s engine is the fastest (batch %d %.3f ms); the fastest sparse plan, "
                   "%s, runs %.2fx of its speed (%.3f ms): run the dense engine\n",
                en, r->batch, o.eng_ms, o.plan, o.eng_ms / o.ms, o.ms);
}

// Prints accuracy and the end-to-end figures.
void deploy_report_summary(FILE *f, const deploy_plan *p, const deploy_report *r) {
    fprintf(f, "deploy: %s on %s, %.1f%% sparse (prunable layers; %.1f%% of the multiply-accumulates), %ld test "
               "images, %s\n", r->arch, r->dataset, 100.0 * r->sparsity, 100.0 * r->mac_sparsity, r->test_images,
            r->device);
    fprintf(f, "loaded %s in %.3f s\n", r->input ? r->input : "", r->load_seconds);
    if (r->cpu_images)
        fprintf(f, "CPU reference: test accuracy %.2f%% on %s%ld images\n", r->cpu_acc,
                r->cpu_images < r->test_images ? "the first " : "", r->cpu_images);
    if (!r->gpu) {
        fprintf(f, "CPU path (no GPU): batch %d %.1f ms (%.0f img/s), dense CPU executor %.1f ms "
                   "(%.0f img/s); batch 1 %.2f ms, dense %.2f ms\n",
                r->batch, r->cpu_ms, deploy_ips(r->batch, r->cpu_ms), r->cpu_dense_ms,
                deploy_ips(r->batch, r->cpu_dense_ms), r->cpu_lat_ms, r->cpu_dense_lat_ms);
        return;
    }
    rep_summary_engines(f, p, r);
    for (int i = 0; i < r->nprec; i++)
        if (r->pr[i].ran) rep_summary_prec(f, r, &r->pr[i]);
        else if (r->pr[i].failed[0])
            fprintf(f, "%s per-layer plan: failed, its figures are left out: %s\n",
                    deploy_prec_name(r->pr[i].prec), r->pr[i].failed);
    if (r->dense_note) fprintf(f, "baselines: %s\n", r->dense_note);
    rep_summary_result(f, r);
}

// --- JSON -----------------------------------------------------------------------

// Adds the per-candidate times and choices of op i at one batch size.
static void rep_json_times(json_writer *j, const deploy_report *r, int i, int b1) {
    for (int k = 0; k < REPORT_NCOLS; k++) {
        char key[48];
        snprintf(key, sizeof key, "%s_ms", REPORT_COLS[k]);
        json_add_number(j, key, rep_ms(r, i, rep_cand(REPORT_COLS[k]), b1));
    }
    for (int c = 0; c < deploy_cand_count(); c++) {  // candidates beyond the fixed columns
        int fixed = 0;
        for (int k = 0; k < REPORT_NCOLS; k++) fixed |= !strcmp(REPORT_COLS[k], deploy_cand_name(c));
        char key[48];
        snprintf(key, sizeof key, "%s_ms", deploy_cand_name(c));
        if (!fixed) json_add_number(j, key, rep_ms(r, i, c, b1));
    }
    json_add_number(j, "speedup_fp32", rep_speedup(r, i, DP_FP32, b1));
    json_add_number(j, "speedup_fp16", rep_speedup(r, i, DP_FP16, b1));
    json_add_string(j, "chosen_fp32", rep_chosen(r, i, DP_FP32, b1));
    json_add_string(j, "chosen_fp16", rep_chosen(r, i, DP_FP16, b1));
    json_array_begin(j, "failed_checks");
    for (int c = 0; c < deploy_cand_count(); c++)
        if (rep_failed(r, i, c, b1)) json_add_string(j, NULL, deploy_cand_name(c));
    json_array_end(j);
}

// Adds "layers": one object per conv/linear op.
static void rep_json_layers(json_writer *j, const deploy_plan *p, const deploy_report *r) {
    char shape[64];
    json_array_begin(j, "layers");
    for (int i = 0; i < p->nops; i++) {
        const deploy_op *op = &p->ops[i];
        if (op->kind != DOP_CONV) continue;
        deploy_op_shape(p, op, shape, sizeof shape);
        json_object_begin(j, NULL);
        json_add_string(j, "name", op->name);
        json_add_string(j, "shape", shape);
        json_add_number(j, "sparsity", deploy_op_sparsity(p, op));
        json_add_number(j, "act_sparsity", r->act_sparsity ? r->act_sparsity[i] : NAN);
        json_add_int(j, "nnz", deploy_op_layer(p, op)->nnz);
        json_add_int(j, "nnz_row", deploy_op_layer(p, op)->nnz_row);
        int filtered = 0;
        for (int c = 0; c < deploy_cand_count(); c++) filtered |= rep_filtered(r, i, c);
        json_add_bool(j, "actsparse_filtered", filtered);
        rep_json_times(j, r, i, 0);
        const char *ch = r->nprec ? rep_chosen(r, i, r->pr[0].prec, 0) : NULL;
        json_add_string(j, "chosen", r->gpu ? ch : "cpu");
        json_add_number(j, "cpu_ms", r->cpu_op_ms ? r->cpu_op_ms[i] : NAN);
        json_object_begin(j, "batch1");
        rep_json_times(j, r, i, 1);
        json_object_end(j);
        json_object_end(j);
    }
    json_array_end(j);
}

// Adds name and name_batch1: the speedups base_ms / ms and base_lat / lat
// (one batch, one image).
static void rep_json_speedups(json_writer *j, const char *name, double base_ms, double base_lat, double ms,
                              double lat) {
    char name1[64];
    snprintf(name1, sizeof name1, "%s_batch1", name);
    json_add_number(j, name, base_ms / ms);
    json_add_number(j, name1, base_lat / lat);
}

// Adds a dense engine's (or the mixed plan's) accuracy and its agreement with
// the CPU reference.
static void rep_json_engine_check(json_writer *j, const deploy_engine_result *e) {
    json_add_number(j, "test_accuracy", e->test_acc);
    json_add_int(j, "cpu_agreement_images", e->agree);
    json_add_int(j, "cpu_compared_images", e->compared);
    json_add_number(j, "logits_max_rel_err", e->logits_err);
}

// Adds "result": the fastest plan and the fastest dense engine (rep_result_pick; null when either is missing).
static void rep_json_result(json_writer *j, const deploy_report *r) {
    rep_result o = rep_result_pick(r);
    if (!o.plan || o.eng < 0) {
        json_add_null(j, "result");
        return;
    }
    json_object_begin(j, "result");
    json_add_string(j, "plan", o.key);
    json_add_number(j, "batch_ms", o.ms);
    json_add_number(j, "batch1_ms", o.lat_ms);
    json_add_number(j, "test_accuracy", o.acc);
    json_add_string(j, "engine_precision", dengine_prec_name((dengine_prec)o.eng));
    json_add_number(j, "engine_batch_ms", o.eng_ms);
    json_add_number(j, "engine_batch1_ms", o.eng_lat_ms);
    rep_json_speedups(j, "speedup", o.eng_ms, o.eng_lat_ms, o.ms, o.lat_ms);
    json_object_end(j);
}

// Adds "plan_errors": precision -> why its per-layer plan stopped (only those that did).
static void rep_json_plan_errors(json_writer *j, const deploy_report *r) {
    json_object_begin(j, "plan_errors");
    for (int i = 0; i < r->nprec; i++)
        if (r->pr[i].failed[0]) json_add_string(j, deploy_prec_name(r->pr[i].prec), r->pr[i].failed);
    json_object_end(j);
}

// Adds "plans": one object per precision that ran.
static void rep_json_plans(json_writer *j, const deploy_report *r) {
    json_array_begin(j, "plans");
    for (int i = 0; i < r->nprec; i++) {
        const deploy_prec_result *pr = &r->pr[i];
        if (!pr->ran) continue;
        json_object_begin(j, NULL);
        json_add_string(j, "precision", deploy_prec_name(pr->prec));
        json_add_number(j, "test_accuracy", pr->test_acc);
        json_add_number(j, "images_per_second", deploy_ips(r->batch, pr->ms));
        json_add_number(j, "dense_images_per_second", deploy_ips(r->batch, pr->dense_ms));
        json_add_number(j, "latency_ms_batch1", pr->lat_ms);
        json_add_number(j, "dense_latency_ms_batch1", pr->dense_lat_ms);
        const deploy_engine_result *e = &r->eng[rep_engine_of(pr->prec)];
        json_add_string(j, "engine_precision", dengine_prec_name(rep_engine_of(pr->prec)));
        rep_json_speedups(j, "engine_speedup", e->ran ? e->ms : NAN, e->ran ? e->lat_ms : NAN, pr->ms,
                          pr->lat_ms);
        json_add_string(j, "dense_baseline", "old per-layer cuDNN plan (NCHW)");
        rep_json_speedups(j, "speedup", pr->dense_ms, pr->dense_lat_ms, pr->ms, pr->lat_ms);
        json_add_bool(j, "cuda_graph", pr->graph);
        json_add_int(j, "cpu_agreement_images", pr->agree);
        json_add_int(j, "cpu_compared_images", pr->compared);
        json_add_number(j, "accuracy_on_reference_images", pr->ref_acc);
        json_add_number(j, "logits_max_rel_err", pr->logits_err);
        json_add_int(j, "dense_check_failures", pr->tb.dense_failed);
        json_add_int(j, "dense_check_failures_batch1", pr->t1.dense_failed);
        json_object_end(j);
    }
    json_array_end(j);
}

// Adds "layers": the mixed plan's cuDNN and best sparse time (and TFLOP/s at batch n) of every conv
// with a sparse path, and what runs it.
static void rep_json_mixed_layers(json_writer *j, const deploy_plan *p, const deploy_engine_result *m, int n) {
    if (!m->op_dense_ms || !m->op_sparse_ms) return;
    json_array_begin(j, "layers");
    for (int i = 0; i < p->nops; i++) {
        if (!isfinite(m->op_dense_ms[i]) || !isfinite(m->op_sparse_ms[i])) continue;
        json_object_begin(j, NULL);
        json_add_string(j, "name", p->ops[i].name);
        json_add_number(j, "cudnn_ms", m->op_dense_ms[i]);
        json_add_number(j, "sparse_ms", m->op_sparse_ms[i]);
        json_add_number(j, "cudnn_tflops", rep_tflops(p, &p->ops[i], 0, n, m->op_dense_ms[i]));
        json_add_number(j, "sparse_useful_tflops", rep_tflops(p, &p->ops[i], 1, n, m->op_sparse_ms[i]));
        if (m->op_path) json_add_string(j, "runs", m->op_path[i] == 3 ? "tail" : m->op_path[i] ? "sparse" : "cudnn");
        if (m->op_graph_gain_ms && isfinite(m->op_graph_gain_ms[i]))
            json_add_number(j, "graph_gain_ms", m->op_graph_gain_ms[i]);
        json_object_end(j);
    }
    json_array_end(j);
}

// Adds "dense_engine": one object per engine precision that ran.
static void rep_json_engines(json_writer *j, const deploy_plan *p, const deploy_report *r) {
    json_array_begin(j, "dense_engine");
    for (int k = 0; k < DE_NPREC; k++) {
        const deploy_engine_result *e = &r->eng[k];
        if (!e->ran) continue;
        json_object_begin(j, NULL);
        json_add_string(j, "engine", "cudnn-graph-nhwc");
        json_add_string(j, "precision", dengine_prec_name((dengine_prec)k));
        json_add_number(j, "batch_ms", e->ms);
        json_add_number(j, "batch1_ms", e->lat_ms);
        json_add_number(j, "images_per_second", deploy_ips(r->batch, e->ms));
        rep_json_engine_check(j, e);
        json_add_number(j, "build_seconds", e->build_s);
        json_object_end(j);
    }
    json_array_end(j);
    const deploy_engine_result *m = &r->mixed, *e = &r->eng[DE_FP16];
    if (!m->ran) return;
    json_object_begin(j, "mixed_fp16");
    json_add_number(j, "batch_ms", m->ms);
    json_add_number(j, "batch1_ms", m->lat_ms);
    rep_json_speedups(j, "engine_speedup", e->ms, e->lat_ms, m->ms, m->lat_ms);
    json_object_begin(j, "alternating");  // the plan against its own all-cuDNN forward, in alternating rounds
    json_add_number(j, "batch_ms", m->ab_ms);
    json_add_number(j, "dense_batch_ms", m->ab_dense_ms);
    json_add_number(j, "batch1_ms", m->ab_lat_ms);
    json_add_number(j, "dense_batch1_ms", m->ab_dense_lat_ms);
    rep_json_speedups(j, "speedup", m->ab_dense_ms, m->ab_dense_lat_ms, m->ab_ms, m->ab_lat_ms);
    json_object_end(j);
    json_object_begin(j, "dependent_launch");  // block-sparse kernels as programmatic dependent launches
    json_add_number(j, "batch_ms", m->pdl_ms[1]);  // the next kernel let in after the main loop,
    json_add_number(j, "early_batch_ms", m->pdl_ms[2]);  // from the start, or plain launches
    json_add_number(j, "plain_batch_ms", m->pdl_ms[0]);  // (null: not timed), alternating rounds
    json_add_number(j, "batch1_ms", m->pdl_lat_ms[1]);
    json_add_number(j, "early_batch1_ms", m->pdl_lat_ms[2]);
    json_add_number(j, "plain_batch1_ms", m->pdl_lat_ms[0]);
    json_object_end(j);
    json_object_begin(j, "tail");  // the whole forward with the tail launch and without it (null: no tail)
    json_add_number(j, "batch_ms", rep_has_tail(m) ? m->tail_ms : NAN);
    json_add_number(j, "without_batch_ms", rep_has_tail(m) ? m->tail_off_ms : NAN);
    json_add_string(j, "note", rep_has_tail(m) ? "" : m->tail_note);  // why there is none
    json_object_end(j);
    rep_json_engine_check(j, m);
    json_add_int(j, "sparse_layers", m->nsparse);
    json_add_string(j, "sparse_layer_names", m->sparse);
    rep_json_mixed_layers(j, p, m, r->batch);
    json_object_end(j);
}

// Writes the JSON summary into j.
void deploy_report_json(json_writer *j, const deploy_plan *p, const deploy_report *r) {
    const deploy_prec_result *pr = r->gpu && r->nprec ? &r->pr[0] : NULL;
    const int lost = pr && !pr->ran;  // the primary plan stopped: its figures are null
    json_object_begin(j, NULL);
    json_add_string(j, "tool", "deploy");
    json_add_string(j, "dataset", r->dataset);
    json_add_string(j, "model", r->arch);
    json_add_string(j, "input", r->input);
    json_add_null(j, "output");
    json_add_string(j, "device", r->device);
    json_add_string(j, "precision", pr ? deploy_prec_name(pr->prec) : "fp32");
    json_add_int(j, "batch", r->batch);
    json_add_int(j, "repeat", r->repeat);
    json_add_int(j, "test_images", r->test_images);
    json_add_number(j, "test_accuracy", lost ? NAN : pr ? pr->test_acc : r->cpu_acc);
    json_add_number(j, "cpu_reference_accuracy", r->cpu_images ? r->cpu_acc : NAN);
    json_add_int(j, "cpu_reference_images", r->cpu_images);
    json_add_number(j, "sparsity", r->sparsity);
    json_add_number(j, "mac_sparsity", r->mac_sparsity);
    json_add_int(j, "act_sparsity_images", r->act_images);
    json_add_number(j, "actsparse_min_zeros", r->act_min);
    json_array_begin(j, "skipped_candidates");
    for (int c = 0; c < deploy_cand_count(); c++)
        if (r->skip_cands >> c & 1u) json_add_string(j, NULL, deploy_cand_name(c));
    json_array_end(j);
    json_add_number(j, "images_per_second", lost ? NAN : deploy_ips(r->batch, pr ? pr->ms : r->cpu_ms));
    json_add_number(j, "dense_images_per_second",
                    lost ? NAN : deploy_ips(r->batch, pr ? pr->dense_ms : r->cpu_dense_ms));
    json_add_number(j, "latency_ms_batch1", lost ? NAN : pr ? pr->lat_ms : r->cpu_lat_ms);
    json_add_number(j, "dense_latency_ms_batch1", lost ? NAN : pr ? pr->dense_lat_ms : r->cpu_dense_lat_ms);
    json_add_string(j, "dense_baseline", r->dense_note);
    json_add_number(j, "seconds", r->seconds);
    json_add_number(j, "load_seconds", r->load_seconds);
    json_add_string(j, "chart", r->chart[0] ? r->chart : NULL);
    const deploy_engine_result *e = pr ? &r->eng[rep_engine_of(pr->prec)] : NULL;
    json_add_string(j, "engine_precision", pr ? dengine_prec_name(rep_engine_of(pr->prec)) : NULL);
    const int eran = e && e->ran;
    rep_json_speedups(j, "engine_speedup", eran ? e->ms : NAN, eran ? e->lat_ms : NAN, pr && !lost ? pr->ms : NAN,
                      pr && !lost ? pr->lat_ms : NAN);
    rep_json_result(j, r);
    rep_json_engines(j, p, r);
    rep_json_plans(j, r);
    rep_json_plan_errors(j, r);
    rep_json_layers(j, p, r);
    json_object_end(j);
}

// --- the chart ---------------------------------------------------------------------

// Y pixel of a speedup on the chart's log2 axis from 2^lo to 2^hi.
static double rep_chart_y(double v, int lo, int hi) {
    double l = log2(v);
    l = l < lo ? lo : l > hi ? hi : l;
    return 60.0 + (hi - l) / (double)(hi - lo) * 300.0;
}

// Writes the chart's axes and labels for n layers.
static void rep_chart_axes(FILE *f, int n, int lo, int hi, const char *title, int width) {
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n",
            width / 2, title);
    for (int e = lo; e <= hi; e++) {
        double y = rep_chart_y(pow(2.0, e), lo, hi);
        fprintf(f, "<line x1=\"70\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/>\n", y,
                70 + n * 30 + 10, y, e == 0 ? "#000" : "#ddd");
        fprintf(f, "<text x=\"64\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%gx</text>\n",
                y + 4, pow(2.0, e));
    }
    fprintf(f, "<text x=\"16\" y=\"210\" font-size=\"12\" transform=\"rotate(-90 16 210)\" "
               "text-anchor=\"middle\">speedup over cuDNN (log scale)</text>\n");
}

// Draws one layer's bars (fp32 blue, fp16 orange) and its rotated name.
static void rep_chart_layer(FILE *f, const deploy_report *r, const deploy_op *op, int i, int slot,
                            int lo, int hi) {
    const char *colour[2] = {"#2c7fb8", "#f28e2b"};
    const double x0 = 75.0 + slot * 30.0, y1 = rep_chart_y(1.0, lo, hi);
    for (int pr = 0; pr < 2; pr++) {
        double s = rep_speedup(r, i, (deploy_prec)pr, 0);
        if (!isfinite(s) || s <= 0) continue;
        double y = rep_chart_y(s, lo, hi);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"11\" height=\"%.1f\" fill=\"%s\"><title>%s "
                   "%s %.2fx</title></rect>\n", x0 + pr * 12, y < y1 ? y : y1, fabs(y1 - y),
                colour[pr], op->name, deploy_prec_name((deploy_prec)pr), s);
    }
    fprintf(f, "<text font-size=\"10\" transform=\"translate(%.1f 372) rotate(60)\">%s</text>\n",
            x0 + 6, op->name);
}

// Writes the per-layer speedup chart as an SVG.
int deploy_report_chart(const char *path, const deploy_plan *p, const deploy_report *r,
                        sc_err *err) {
    int n = 0, lo = -3, hi = 4;
    for (int i = 0; i < p->nops; i++) {
        if (p->ops[i].kind != DOP_CONV) continue;
        n++;
        for (int pr = 0; pr < 2; pr++) {
            double s = rep_speedup(r, i, (deploy_prec)pr, 0);
            if (isfinite(s) && s > 0 && log2(s) > hi) hi = (int)ceil(log2(s));
            if (isfinite(s) && s > 0 && log2(s) < lo) lo = (int)floor(log2(s));
        }
    }
    sc_atomic a;
    if (sc_atomic_begin(&a, path, err)) return -1;
    FILE *f = sc_atomic_fopen(&a, "w", err);
    if (!f) return -1;
    int width = 70 + n * 30 + 30;
    char title[256];
    snprintf(title, sizeof title, "%s on %s, batch %d: sparse vs cuDNN per layer (blue fp32, orange fp16)",
             r->arch, r->dataset, r->batch);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"480\" "
               "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width < 640 ? 640 : width);
    rep_chart_axes(f, n, lo, hi, title, width < 640 ? 640 : width);
    for (int i = 0, slot = 0; i < p->nops; i++)
        if (p->ops[i].kind == DOP_CONV) rep_chart_layer(f, r, &p->ops[i], i, slot++, lo, hi);
    fprintf(f, "</svg>\n");
    return sc_atomic_fclose(&a, f, 0, err);
}
