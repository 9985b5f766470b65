// The prune tool's options: the struct they parse into and their cli.h table
// (prune/prune_main.c parses, resolves the auto ones and runs).
#ifndef SC_PRUNE_OPTS_H
#define SC_PRUNE_OPTS_H

#include "prune/latency_setup.h"
#include "prune/search.h"
#include "runtime/cli.h"

typedef struct {
    cli_common c;
    const char *method, *from, *model, *lr, *sched, *warmup, *epochs, *finetune, *ramp_end;
    const char *halve_every;
    const char *layer_floor;  // --layer-floor SPEC (NULL: none)
    const char *pattern;      // --pattern P (runtime/pattern.h)
    const char *objective;    // --objective auto|sparsity|latency (auto resolved by auto_set)
    const char *lat_target, *lat_table;  // --latency-target, --latency-table
    int lat_batch;            // --latency-batch
    const char *lat_alloc;    // --latency-allocation time|ramp|sparsity
    double lat_penalty;       // --latency-penalty
    int lat_checks;           // --latency-checks
    int target_given;         // --target-sparsity was given (re-pruning defaults to the model's)
    int lat_target_given;     // --latency-target was given
    int objective_auto, pattern_auto;  // --objective, --pattern were auto (resolved by auto_set)
    const char *precision;
    const char *data_dir, *runs, *output;
    int population, iterations, batches, batch, nesterov, augment, val_size, holdout;
    int resume, stop_after, scan_images, grad_steps, keep_state;
    double threshold, target, min_layer, alpha, beta, momentum, wd, smoothing, time_limit, save_interval;
    double distill;  // --distill ALPHA (< 0: off)
    const char *dataset;  // positional, or from the model file, or the default
} prune_opts;

// The tool's own options (after the common ones).
#define PRUNE_OPTS(o)                                                                          \
    {.name = "method", .type = OPT_CHOICE, .dst = &(o)->method, .def = "evolve",               \
     .choices = PRUNE_METHODS, .help = "evolutionary search, gradual or one-shot magnitude"},  \
    {.name = "from", .type = OPT_STRING, .dst = &(o)->from, .metavar = "FILE",                 \
     .help = "start from this trained model ('latest': runs/latest/model.h5); default: from scratch"}, \
    {.name = "model", .short_name = 'm', .type = OPT_STRING, .dst = &(o)->model,               \
     .metavar = "NAME", .help = "architecture from scratch (default resnet18); with --from it must match"}, \
    {.name = "target-sparsity", .type = OPT_FLOAT, .dst = &(o)->target, .def = "0.9",         \
     .help = "overall sparsity of the pruned layers, in [0, 1)"},                              \
    {.name = "min-layer-sparsity", .type = OPT_FLOAT, .dst = &(o)->min_layer, .def = "0",      \
     .metavar = "X", .help = "every pruned layer at least this sparse at the end, in [0, target]\n" \
     "(keeps FLOP-heavy early layers fast on the sparse kernel; 0: no floor)"},                \
    {.name = "layer-floor", .type = OPT_STRING, .dst = &(o)->layer_floor, .metavar = "SPEC",  \
     .help = "per-layer floors at the end: PREFIX=X[,PREFIX=X...]; a pruned layer takes the X of\n" \
     "the longest PREFIX its tensor name starts with (else --min-layer-sparsity); X in\n"      \
     "[0, 0.995], may pass the target when the floors fit it (e.g. layer1=0.98,layer2=0.97)"}, \
    {.name = "pattern", .type = OPT_STRING, .dst = &(o)->pattern, .def = "auto",               \
     .metavar = "P", .help = "masks on a pattern: unstructured, KxC (blocks of K output x C input channels at\n" \
     "one tap, e.g. 16x8), KxC+F (those blocks plus up to a share F of each layer's kept\n"   \
     "weights as single weights, e.g. 16x8+0.2: exported as blocks plus a remainder;\n"       \
     "for accuracy studies: at fp16 the singles make it slower than dense, so deploy\n"        \
     "runs such layers dense) or N:M (N kept of every M input channels, e.g. 2:4);\n"        \
     "per layer: PREFIX=P[,PREFIX=P...][,P], each layer on the P of the longest PREFIX its\n" \
     "tensor name starts with, else the bare P (default unstructured), e.g.\n"              \
     "layer3=16x8,layer4=16x8 (blocks on those layers only, the rest unstructured);\n"     \
     "--from a model pruned off P: re-prunes it onto P at its sparsity, then\n"              \
     "fine-tunes (auto: " PRUNE_AUTO_PATTERN " for a latency run at fp16 from scratch, whose\n" \
     "sparse kernels are the block ones; else unstructured)"},                                  \
    {.name = "objective", .type = OPT_CHOICE, .dst = &(o)->objective, .def = "auto",           \
     .choices = "auto|sparsity|latency", .help = "evolve: reach --target-sparsity, or a latency on this GPU\n" \
     "(fitness: accuracy under the predicted latency; see --latency-target); auto: latency\n" \
     "for a search on a GPU from scratch that names no sparsity (--target-sparsity,\n" \
     "--min-layer-sparsity, --layer-floor), else sparsity (also when the default target\n" \
     "is out of the network's reach)"},                                                        \
    {.name = "latency-target", .type = OPT_STRING, .dst = &(o)->lat_target, .def = "1.1x",     \
     .metavar = "X|Nx", .help = "latency objective: milliseconds at --latency-batch, or Nx for N times\n" \
     "faster than the dense network of the same precision (per the latency table); see\n" \
     "--latency-allocation"},                                                                  \
    {.name = "latency-allocation", .type = OPT_CHOICE, .dst = &(o)->lat_alloc, .def = "time",    \
     .choices = "time|ramp|sparsity", .help = "latency objective without --target-sparsity: each round's per-layer\n" \
     "sparsities spend the least sensitivity for the scheduled predicted time (the overall\n" \
     "sparsity follows); ramp: for the final target, every layer taken there along the\n"    \
     "schedule; sparsity: meet an overall sparsity raised until the best meets the target"}, \
    {.name = "latency-batch", .type = OPT_INT, .dst = &(o)->lat_batch, .def = "128", .min = 1, \
     .max = 65536, .help = "latency objective: images per forward pass the latency is for"},   \
    {.name = "latency-table", .type = OPT_STRING, .dst = &(o)->lat_table, .metavar = "FILE",   \
     .help = "latency objective: per-layer times from this JSON file (default: measured on this GPU\n" \
     "on the plan that runs the model, fp16: the mixed fp16 engine, fp32: deploy's per-layer plan,\n" \
     "cached in the run directory and kept for later runs in <runs>/latency; no GPU: a FLOP model)"}, \
    {.name = "latency-penalty", .type = OPT_FLOAT, .dst = &(o)->lat_penalty, .def = "1", .min = 0, \
     .max = 1e6, .help = "latency objective: fitness points lost per percent of predicted latency over the target"}, \
    {.name = "latency-checks", .type = OPT_INT, .dst = &(o)->lat_checks, .def = "3", .min = 0,  \
     .max = 1000, .metavar = "N", .help = "latency objective on a GPU: measure the best solution's whole graph N times\n" \
     "while the schedule ramps (from half way to the target to where it reaches it); each\n" \
     "measurement rescales the table's predictions, phased in over the iterations up to\n" \
     "the next, so the run lands on its target (0: never)"}, \
    {.name = "population", .type = OPT_INT, .dst = &(o)->population, .def = "8", .min = 1,     \
     .max = 1024, .help = "evolve: solutions in the population"},                             \
    {.name = "iterations", .type = OPT_INT, .dst = &(o)->iterations, .def = "30", .min = 1,    \
     .max = 1000000, .help = "evolve: search iterations (each trains every solution)"},        \
    {.name = "batches", .type = OPT_INT, .dst = &(o)->batches, .def = "50", .min = 1,          \
     .max = 100000000, .help = "batches per round (between two mask updates)"},               \
    {.name = "finetune", .type = OPT_STRING, .dst = &(o)->finetune, .def = "auto",             \
     .metavar = "N", .help = "evolve: rounds training the winner after the search (auto: population * iterations / 3)"}, \
    {.name = "halve-every", .type = OPT_STRING, .dst = &(o)->halve_every, .def = "auto",       \
     .metavar = "N", .help = "evolve: search iterations between halvings of the solutions that train; the\n" \
     "survivors train population/active rounds each (auto: 1, after every iteration; 0: never)"}, \
    {.name = "threshold", .type = OPT_FLOAT, .dst = &(o)->threshold, .def = "1.0", .min = 0,   \
     .max = 100, .help = "evolve: admit solutions within this many accuracy points of the best"}, \
    {.name = "alpha", .type = OPT_FLOAT, .dst = &(o)->alpha, .def = "1.0", .min = 0,           \
     .max = 1e6, .help = "evolve: weight of |w| in the mask coefficient (eq. 2)"},             \
    {.name = "beta", .type = OPT_FLOAT, .dst = &(o)->beta, .def = "0.5", .min = 0, .max = 1e6, \
     .help = "evolve: weight of |gradient| in the mask coefficient (eq. 2)"},                  \
    {.name = "epochs", .type = OPT_STRING, .dst = &(o)->epochs, .def = "auto", .metavar = "X", \
     .help = "gmp/oneshot: training epochs (auto: as many images as evolve with these settings)"}, \
    {.name = "ramp-end", .type = OPT_STRING, .dst = &(o)->ramp_end, .def = "auto",             \
     .metavar = "X", .help = "fraction of the pruning rounds (evolve: of the search) by which the target is\n"  \
     "reached (auto: evolve 0.75, gmp 0.5625, the same share of all images as evolve's default)"}, \
    {.name = "scan-images", .type = OPT_INT, .dst = &(o)->scan_images, .def = "2000", .min = 0, \
     .max = 1000000, .help = "evolve --from: validation images for the initial sensitivity scan (0: none)"}, \
    {.name = "distill", .type = OPT_FLOAT, .dst = &(o)->distill, .def = "-1", .min = -1, .max = 1, \
     .metavar = "ALPHA", .help = "--from: train against the start model's outputs (knowledge distillation, Hinton et\n" \
     "al. 2015): targets ALPHA x the label + (1 - ALPHA) x the start model's softmax,\n" \
     "e.g. 0.5 (-1: off, the label-smoothed labels)"},                                          \
    {.name = "grad-steps", .type = OPT_INT, .dst = &(o)->grad_steps, .def = "4", .min = 1,     \
     .max = 1000000, .help = "evolve: last steps of a round whose |gradient| is averaged"},    \
    {.name = "batch", .short_name = 'b', .type = OPT_INT, .dst = &(o)->batch, .def = "512",    \
     .min = 1, .max = 65536, .help = "images per step"},                                       \
    {.name = "lr", .type = OPT_STRING, .dst = &(o)->lr, .def = "auto", .metavar = "X",         \
     .help = "peak learning rate (auto: train's from scratch, a tenth of it from a model)"},    \
    {.name = "sched", .type = OPT_CHOICE, .dst = &(o)->sched, .def = "auto",                   \
     .choices = "auto|onecycle|cosine|constant",                                               \
     .help = "learning-rate schedule over the run (auto: onecycle from scratch, else cosine)"}, \
    {.name = "warmup", .type = OPT_STRING, .dst = &(o)->warmup, .def = "auto", .metavar = "X", \
     .help = "fraction of the steps spent warming up (auto: 0.25 from scratch, else 0)"},      \
    TRAIN_SGD_OPTS(o),                                                                         \
    {.name = "val-size", .type = OPT_INT, .dst = &(o)->val_size, .def = "-1", .min = -1,       \
     .max = 1000000, .help = "validation images held out of the training set (-1: 5000, or a tenth)"}, \
    {.name = "holdout", .type = OPT_INT, .dst = &(o)->holdout, .def = "0", .min = 0,           \
     .max = 1000000, .metavar = "N", .help = "validation images kept out of the fitness too, for choosing\n" \
     "search settings between runs; reported as holdout_accuracy (0: none)"},                 \
    {.name = "data-dir", .type = OPT_STRING, .dst = &(o)->data_dir, .def = "data",             \
     .metavar = "DIR", .help = "where cifar10/cifar100/synthetic live"},                       \
    {.name = "runs", .type = OPT_STRING, .dst = &(o)->runs, .def = "runs", .metavar = "DIR",   \
     .help = "root of the run directories"},                                                   \
    {.name = "output", .short_name = 'o', .type = OPT_STRING, .dst = &(o)->output,             \
     .metavar = "FILE", .help = "pruned model to write (default: <run dir>/model.pruned.h5)"}, \
    {.name = "resume", .type = OPT_FLAG, .dst = &(o)->resume,                                  \
     .help = "continue the run of -o FILE or runs/latest from its last finished iteration"},   \
    {.name = "stop-after", .type = OPT_INT, .dst = &(o)->stop_after, .def = "0", .min = 0,     \
     .max = 1000000, .help = "stop once this many iterations are done (0: all); --resume continues"}, \
    {.name = "time-limit", .type = OPT_FLOAT, .dst = &(o)->time_limit, .def = "0", .min = 0,   \
     .max = 1e9, .help = "stop after the iteration that passes this many seconds (0: none)"},  \
    {.name = "save-interval", .type = OPT_FLOAT, .dst = &(o)->save_interval, .def = "30",     \
     .min = 0, .max = 1e9, .help = "seconds between state saves (0: every iteration; always on stop and at the end)"}, \
    {.name = "keep-state", .type = OPT_FLAG, .dst = &(o)->keep_state,                          \
     .help = "keep the resumable state (<output>.state) of a finished run (a stopped run always keeps it)"}

#endif
