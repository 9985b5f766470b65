// What the deploy tool reports: the per-layer table (shape, sparsity, cuDNN
// time per precision, sparse time, cuSPARSE, speedup, chosen), the end-to-end
// summary against the all-dense network, the JSON summary and the per-layer
// speedup chart (an SVG written directly).
#ifndef SC_RUNTIME_DEPLOY_REPORT_H
#define SC_RUNTIME_DEPLOY_REPORT_H

#include <stdio.h>

#include "runtime/dengine.h"
#include "runtime/deploy_gpu.h"
#include "runtime/deploy_plan.h"
#include "runtime/json.h"

// Everything measured for one plan precision on the GPU.
typedef struct {
    deploy_prec prec;
    int ran;                     // 1 when this precision ran
    deploy_timing tb, t1;        // per op at the batch size and at batch 1
    double test_acc;             // percent over the test images
    double ms, dense_ms;         // forward of one batch (median), sparse plan and all-dense
    double lat_ms, dense_lat_ms; // forward of one image (median)
    int graph;                   // the forward ran as one CUDA graph
    long agree, compared;        // test images whose top-1 equals the CPU reference's
    double ref_acc;              // percent over the images the CPU reference ran
    double logits_err;           // max |gpu - cpu| / max |cpu| of the logits, check images
    char failed[512];            // why this plan stopped (empty: it ran); its figures are left out
} deploy_prec_result;

// "fp16" or "fp32".
const char *deploy_prec_name(deploy_prec p);

// What one precision of the channels-last dense engine (runtime/dengine.h) measured.
typedef struct {
    int ran;                     // 1 when the engine was built and measured
    double ms, lat_ms;           // forward of one batch and of one image (median)
    double test_acc;             // percent over the test images
    long agree, compared;        // test images whose top-1 equals the CPU reference's
    double logits_err;           // max |gpu - cpu| / max |cpu| of the logits, check images
    double build_s;              // seconds to build and tune it (both batch sizes)
    int nsparse;                 // mixed plan: convs run sparse at the batch size
    char sparse[1024];           // mixed plan: their names, space-separated, a block-sparse
                                 // one with its kernel, "c2(bsconv 16x8 v2)" (truncated)
    double *op_dense_ms;         // mixed plan (nops, else NULL): each conv's cuDNN time in the
    double *op_sparse_ms;        // engine and its fastest checked sparse path (NAN: none), at
                                 // the batch size, each timed alone on the op's real input
    signed char *op_path;        // mixed plan (nops, else NULL): what runs each op at the batch
                                 // size, dengine_op_sparse's 0 (cuDNN), 1 or 2 (sparse), 3 (the tail)
    double *op_graph_gain_ms;    // mixed plan (nops, else NULL): whole forward on cuDNN minus
                                 // with the op sparse, for the ops faster sparse alone (NAN: other)
    double tail_ms, tail_off_ms;  // mixed plan with a tail launch: the whole forward with it and with
                                  // its convs on their one-layer paths (NAN or 0: no tail)
    char tail_note[512];          // mixed plan without a tail launch: why ("": none looked for)
    double ab_ms, ab_dense_ms;   // mixed plan: the plan and its own all-cuDNN forward timed in
    double ab_lat_ms, ab_dense_lat_ms;  // alternating rounds (dengine_time_vs_dense), batch and 1
    double pdl_ms[DE_PDL_MODES];      // mixed plan: by launch mode (dengine_time_pdl: plain, dependent
    double pdl_lat_ms[DE_PDL_MODES];  // after the main loop, from the start), batch and 1; NAN: not timed
} deploy_engine_result;

// The whole run.
typedef struct {
    const char *input, *dataset, *arch, *device;
    const char *dense_note;      // what the all-dense baseline is, in words
    int gpu;                     // 1: the GPU path ran; 0: the CPU path only
    int batch, repeat;
    long test_images;
    double sparsity;
    double mac_sparsity;         // deploy_plan_mac_sparsity
    int nprec;
    deploy_prec_result pr[2];    // in the order run; pr[0] is the primary plan
    deploy_engine_result eng[DE_NPREC];  // the dense engine per precision (the yardstick)
    deploy_engine_result mixed;  // the fp16 engine with sparse layers where they pay
    long cpu_images;             // test images run through the CPU plan (0: none)
    double cpu_acc;              // their top-1 accuracy, percent
    double cpu_ms, cpu_lat_ms;   // CPU plan: one batch, one image
    double cpu_dense_ms, cpu_dense_lat_ms;  // dense CPU executor on the folded net
    double *cpu_op_ms;           // (nops) CPU plan time of each op at the batch size
    double *act_sparsity;        // (nops) fraction of zeros in each conv op's input interior over
                                 // the images the CPU reference ran (NAN: not measured)
    long act_images;             // those images
    unsigned skip_cands;         // candidates left out on every layer (--skip-candidates)
    double act_min;              // zero-skipping candidates left out where act_sparsity < act_min
    double seconds;
    double load_seconds;         // sparse_model_load of the export file (read, check, pad)
    char chart[1100];            // chart file written ("" when none)
} deploy_report;

// Allocates a timing for nops ops (NANs, chosen -1); 0 or -1.
// (Declared in deploy_gpu.h; implemented here for every build.)

// Prints the per-layer table.
void deploy_report_table(FILE *f, const deploy_plan *p, const deploy_report *r);

// Prints accuracy and the end-to-end figures against the all-dense network.
void deploy_report_summary(FILE *f, const deploy_plan *p, const deploy_report *r);

// Writes the JSON summary (every field of docs/deploy.md) into j.
void deploy_report_json(json_writer *j, const deploy_plan *p, const deploy_report *r);

// Draws the per-layer speedup over cuDNN (one bar per precision) as an SVG.
int deploy_report_chart(const char *path, const deploy_plan *p, const deploy_report *r,
                        sc_err *err);

// Images per second of one batch of n images taking ms milliseconds (NAN when unknown).
double deploy_ips(int n, double ms);

#endif
