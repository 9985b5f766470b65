// The op registry: every layer kind is one descriptor (op_kind) naming its
// description keyword and options, its parser and shape rule, its parameter
// tensors and their initialisation, and the hooks of each consumer: the CPU
// executor (struct op_cpu, runtime/exec_cpu_impl.h), the GPU executor
// (struct op_gpu, runtime/exec_gpu_impl.h), the deploy planner and the
// exporter. The parser, the executors, the planner, the exporter and
// fine-tuning iterate over the registry instead of switching on kinds.
//
// A kind's descriptor lives in runtime/op_<kind>.c (with its CPU hooks) and
// its GPU hooks in runtime/op_<kind>_gpu.c (GPU builds only); its row is one
// line of runtime/ops_list.h. docs/architecture.md, "Adding an op", walks
// through the steps.
#ifndef SC_OPS_H
#define SC_OPS_H

#include <stddef.h>

#include "error.h"
#include "net.h"
#include "rng.h"

// One description line split into keyword, positionals and key=value options.
typedef struct {
    char kind[16];
    int npos;
    char pos[4][64];
    int nkv;
    char key[8][16], val[8][64];
} op_line;

typedef struct op_build op_build;  // the net being built (runtime/net.c)
struct op_cpu;                     // CPU executor hooks (runtime/exec_cpu_impl.h)
struct op_gpu;                     // GPU executor hooks (runtime/exec_gpu_impl.h)
struct plan_builder;               // the deploy plan being built (runtime/deploy_plan.c)
struct sparse_layer;               // an exported layer (runtime/sparse_model.h)

typedef struct {
    const char *name;     // description keyword, e.g. "conv"
    const char *options;  // accepted key= options, each with a space either side
    // Parses the positionals and options into L (inputs and input shape set,
    // output shape preset to the input's) and sets the output shape.
    int (*parse)(const net *nt, layer *L, const op_line *dl, int lineno, sc_err *err);
    // Adds the layer's parameter tensors (op_tensor_add); NULL: it has none.
    int (*tensors)(op_build *b, int li, const op_line *dl, int lineno, sc_err *err);
    // One initial value of weight or bias tensor p (called in element order).
    float (*init)(const layer *L, const ptensor *p, rng *r);
    // Multiply-accumulates of one image's forward pass; NULL: none counted.
    double (*macs)(const layer *L);
    int running_stats;    // training updates running statistics (fine-tuning reruns them)
    const struct op_cpu *cpu;  // CPU executor hooks
    const struct op_gpu *gpu;  // GPU executor hooks; NULL in CPU-only builds
    // Adds the layer's deploy op(s); NULL: deploy cannot run this kind.
    int (*deploy)(struct plan_builder *b, int i, sc_err *err);
    // Fills the geometry of the layer's exported sparse weights; NULL: the
    // kind has no weights that export writes as a sparse layer.
    void (*sparse_geom)(const layer *L, struct sparse_layer *l);
} op_kind;

// The descriptor of kind k.
const op_kind *op_of(layer_kind k);

// The kind whose keyword is name, or -1.
int op_lookup(const char *name);

// The GPU hooks of a row in this build: `OP_GPU_HOOKS(op_conv_gpu)` names
// the struct in GPU builds and is NULL in CPU-only ones.
#ifdef SC_HAVE_CUDA
#define OP_GPU_HOOKS(x) (&(x))
#else
#define OP_GPU_HOOKS(x) NULL
#endif

// --- helpers for parsers (runtime/ops.c) --------------------------------------

// Parses an integer in [lo, hi]; 0 on success.
int op_parse_int(const char *s, int lo, int hi, int *out);

// Value of option key on the line, or NULL.
const char *op_kv_get(const op_line *dl, const char *key);

// Optional integer option in [lo, hi] with a default.
int op_kv_int(const op_line *dl, const char *key, int def, int lo, int hi, int *out, int lineno,
              sc_err *err);

// Optional float option in [0, 1] with a default.
int op_kv_float(const op_line *dl, const char *key, float def, float *out, int lineno,
                sc_err *err);

// Window fields (k, stride, pad options) and output shape of a conv
// (positionals: channels, kernel) or pool (positional: window) layer.
int op_window(layer *L, const op_line *dl, int is_conv, int lineno, sc_err *err);

// Index of the layer called name among nt's layers so far, -1 for "input",
// -2 when there is none.
int op_layer_find(const net *nt, const char *name);

// Shape (c, h, w) of layer i's output (-1: the network input).
void op_src_shape(const net *nt, int i, int *c, int *h, int *w);

// Adds parameter tensor "<layer name>.<suffix>" to the net being built;
// returns its index, -1 with err filled.
int op_tensor_add(op_build *b, int layer, const char *suffix, ptensor_kind kind, int ndim,
                  const int *dims, sc_err *err);

// The net being built.
net *op_build_net(op_build *b);

// Adds layer li's weight tensor (dims) and, unless the line says bias=0, its
// bias (conv and linear).
int op_weight_bias(op_build *b, int li, int ndim, const int *dims, const op_line *dl,
                   int lineno, sc_err *err);

#endif
