// The network graph: a list of layers in execution order, the named parameter
// tensors, and three flat float buffers (trainable parameters, their masks,
// BN running statistics). Every net is built from a plain-text description
// (built-in architectures are generated as such text), so a model file that
// stores the text can always rebuild the same graph.
#ifndef SC_NET_H
#define SC_NET_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "rng.h"

// --- layers -----------------------------------------------------------------

// Layer kinds: one per row of the op registry (runtime/ops_list.h, whose
// comments say what each computes; runtime/ops.h holds each kind's hooks).

typedef enum {
#define OP(ID, name) LK_##ID,
#include "ops_list.h"
#undef OP
    LK_COUNT
} layer_kind;

#define LAYER_MAX_IN 8   // inputs of one layer

typedef struct {
    layer_kind kind;
    char name[32];       // unique within the net, e.g. "conv1", "layer2.0.bn2"
    int src;             // layer whose output feeds this one; -1 = network input
    int nsrc;            // inputs read (1; add and concat read more)
    int srcs[LAYER_MAX_IN];  // every input in order, srcs[0] == src
    int in_c, in_h, in_w;  // input shape per image
    int c, h, w;         // output shape per image
    int k, stride, pad;  // conv/pool window, stride, padding
    int weight, bias;    // conv/linear: indices into net.tensors, -1 if none
    int gamma, beta;     // bn: indices into net.tensors
    int mean, var;       // bn: indices into net.tensors (buffers)
    float eps, momentum; // bn: epsilon, running-average momentum (PyTorch's meaning)
} layer;

// --- parameter tensors ------------------------------------------------------

typedef enum { PT_WEIGHT, PT_BIAS, PT_GAMMA, PT_BETA, PT_MEAN, PT_VAR } ptensor_kind;

typedef struct {
    char name[48];       // "<layer name>.weight", ".bias", ".gamma", ".beta", ".mean", ".var"
    ptensor_kind kind;
    int layer;           // owning layer
    int ndim, dims[4];   // conv weight (K, C, R, S); linear weight (out, in); else (C)
    size_t count;        // product of dims
    size_t offset;       // into net.param (trainable) or net.buf (PT_MEAN, PT_VAR)
    int trainable;       // 1: lives in param/mask; 0: lives in buf
    int prunable;        // conv and linear weights, except the first conv
} ptensor;

// --- the net ----------------------------------------------------------------

typedef struct {
    char arch[64];       // "resnet18", ..., or the description file's base name
    char *desc;          // the description text the graph was built from (owned)
    int in_c, in_h, in_w, classes;
    float in_mean[3], in_std[3];  // input normalisation (per channel, pixel/255 units)
    int nlayers;
    layer *layers;
    int ntensors;
    ptensor *tensors;
    size_t nparam;       // trainable floats
    float *param;        // (nparam) weights, biases, gammas, betas
    float *mask;         // (nparam) 1 = keep, 0 = pruned; 1 for every non-prunable entry
    size_t nbuf;
    float *buf;          // (nbuf) BN running means and variances
} net;

// Names of the built-in architectures, NULL-terminated.
extern const char *const net_arch_names[];

// Returns the description text of a built-in architecture (caller frees), or
// NULL with err filled when the name is unknown.
char *net_arch_desc(const char *arch, sc_err *err);

// The peak learning rate `train --lr auto` uses for an architecture (batch
// 512, one-cycle, chosen on the validation split): 0.4 for the ResNets, VGGs
// and DenseNet (their convs start Kaiming-normal over fan-out and sit before a
// batch norm, so a smaller rate barely moves them), 0.05 otherwise.
double net_arch_auto_lr(const char *arch);

// Builds a net from description text for images (in_c, in_h, in_w) and
// `classes` outputs; parameters are allocated, masks set to 1, weights zeroed.
net *net_from_desc(const char *arch, const char *desc, int in_c, int in_h, int in_w,
                   int classes, sc_err *err);

// Builds a built-in architecture by name or, when `arch` names a readable
// file, the description in that file.
net *net_create(const char *arch, int in_c, int in_h, int in_w, int classes, sc_err *err);

// Initialises weights (Kaiming normal, fan_out, for conv; PyTorch's uniform
// for linear), biases 0, gamma 1, beta 0, running mean 0 and var 1.
void net_init_weights(net *nt, rng *r);

// Frees a net and everything it owns (NULL is fine).
void net_free(net *nt);

// Index of the tensor with that name, or -1.
int net_tensor_find(const net *nt, const char *name);

// Per-layer options by name prefix (--layer-floor, per-layer --pattern):
// the index of the longest of prefix[0 .. n) that name starts with, -1 when none.
int net_prefix_longest(const char *name, const char *const *prefix, int n);

// The index of the first of prefix[0 .. n) that starts no prunable tensor's
// name of nt, -1 when each starts one.
int net_prefix_unmatched(const net *nt, const char *const *prefix, int n);

// One item of a per-layer list: PREFIX=VALUE (prefix, plen > 0) or, where
// bare items are allowed, VALUE alone (prefix NULL, plen 0); value is
// NUL-terminated. 0 or -1 (with a message in err).
typedef int (*net_prefix_item_fn)(void *ctx, const char *prefix, size_t plen, const char *value,
                                  sc_err *err);

// Splits spec (PREFIX=VALUE[,PREFIX=VALUE...], at most NET_PREFIX_TEXT - 1
// characters) at commas and hands each item to fn in order; fails naming the
// item on an empty spec or item, an empty prefix, a prefix given twice, more
// than one bare item, or, with bare 0, any bare item.
#define NET_PREFIX_TEXT 512
int net_prefix_items(const char *spec, int bare, net_prefix_item_fn fn, void *ctx, sc_err *err);

// Pointer to a tensor's data (in param or buf) and, for trainable ones, its mask.
float *net_tensor_data(const net *nt, int t);
float *net_tensor_mask(const net *nt, int t);

// Fraction of zero mask entries over the prunable tensors (0 when none).
double net_sparsity(const net *nt);

// Multiply-accumulate count of one image's forward pass.
double net_macs(const net *nt);

// The same without the products of pruned weights: each layer's count times
// the kept share of its weights' mask (1 for a layer without weights). Time
// follows this, not the share of weights pruned: a network pruned 95% by
// weights keeps far more of its compute when its large-plane layers keep more.
double net_macs_kept(const net *nt);

// 1 - net_macs_kept / net_macs: the share of the compute pruned (0 when no MACs).
double net_mac_sparsity(const net *nt);

// Non-zero mask entries of tensor t.
size_t net_tensor_kept(const net *nt, int t);

// How many of layer L's inputs are layer i's output (-1: the network input).
int layer_reads(const layer *L, int i);

#endif
