// Command-line options shared by the tools that train (train, prune): SGD,
// loss, augmentation and precision settings, with one meaning and one
// default everywhere. The tool's option struct needs the fields momentum,
// wd, smoothing (float or double as cli.h's OPT_FLOAT wants), nesterov,
// augment (int) and precision (const char *).
#ifndef SC_TRAIN_CLI_H
#define SC_TRAIN_CLI_H

#include "runtime/cli.h"

// The shared entries of a cli_opt table, for options struct pointer o.
#define TRAIN_SGD_OPTS(o)                                                                    \
    {.name = "momentum", .type = OPT_FLOAT, .dst = &(o)->momentum, .def = "0.9", .min = 0,     \
     .max = 0.999, .help = "SGD momentum"},                                                    \
    {.name = "nesterov", .type = OPT_FLAG, .dst = &(o)->nesterov, .def = "1",                  \
     .help = "Nesterov momentum (off: plain momentum)"},                                       \
    {.name = "wd", .type = OPT_FLOAT, .dst = &(o)->wd, .def = "5e-4", .min = 0, .max = 1,      \
     .help = "weight decay (on all parameters)"},                                              \
    {.name = "smoothing", .type = OPT_FLOAT, .dst = &(o)->smoothing, .def = "0.1", .min = 0,   \
     .max = 0.999, .help = "label smoothing"},                                                 \
    {.name = "augment", .type = OPT_FLAG, .dst = &(o)->augment, .def = "1",                    \
     .help = "random crop (4-pixel reflect pad) and flip"},                                    \
    {.name = "precision", .type = OPT_CHOICE, .dst = &(o)->precision, .def = "auto",           \
     .choices = "auto|fp16|fp32",                                                              \
     .help = "fp16: mixed precision on the GPU (auto: fp16 on GPU, fp32 on CPU)"}

#endif
