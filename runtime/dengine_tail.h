// A chain of the dense engine's block-sparse convs on small planes (a
// residual network's last stages) run as one launch of the tail kernel
// (kernels/bsconv_tail_gpu.h; GPU builds only): one CTA per image keeps
// every activation of the chain in shared memory, so the chain costs its
// weights and its multiplies, not one window load per layer. The engine
// finds the chain, checks the tail against its own output and keeps it when
// the whole forward measures faster.
#ifndef SC_RUNTIME_DENGINE_TAIL_H
#define SC_RUNTIME_DENGINE_TAIL_H

#ifdef SC_HAVE_CUDA

#include "kernels/bsconv_tail_gpu.h"
#include "runtime/deploy_plan.h"

typedef struct detail detail;

// One conv of a chain as the engine runs it: plan op, the tensors it reads
// (input, residual or -1) and writes, and its ReLU (the fused add's, if any).
typedef struct {
    int op, in, res, out, relu;
} detail_conv;

// Builds the chain of n (2 to BST_MAX_OPS) convs of p (in plan order; the first one's input is
// the chain's input, the last one's output its output) for batches of up to
// nimg images; NULL (why in err) when a conv is not BSR with 16x8 blocks or
// the chain does not fit the kernel.
detail *detail_create(const gpu_ctx *g, const deploy_plan *p, const detail_conv *cv, int n, sc_err *err);

// The engine's view of plan op i for the search: kind 1, a conv (its
// tensors and ReLU in c; its output after any pool); 2, an add fused into
// a conv; 0, anything else.
typedef struct {
    int kind;
    detail_conv c;
} detail_op;

// A built chain and the plan ops [lo, hi) it covers.
typedef struct {
    detail *t;
    int lo, hi;
} detail_chain;

// Builds every chain the kernel takes into c[], at most max: ranges of a
// run of ops of kinds 1 and 2 (ops[0 .. p->nops)), from a conv, whose
// convs are 16x8 block-sparse on at most 64 output pixels, do not read the
// plan's input, and whose outputs but the last are not read after the
// range; longest first within each run. Their count; when none, why says
// the last reason a range was refused.
int detail_find_all(const gpu_ctx *g, const deploy_plan *p, const detail_op *ops, detail_chain *c, int max,
                    sc_err *why);

// The chain to keep of c[0 .. n) from the whole forward's times without a
// tail (ms[0]) and with each (ms[1 + k]): the fastest when it beats ms[0]
// (forced: c[0]); its index, the others freed, or -1 with every one freed
// and note (len bytes) saying why (why: the reason there are none; ms
// NULL: the timing failed, nothing kept).
int detail_pick(const deploy_plan *p, const detail_chain *c, int n, const double *ms, int forced, const char *why,
                char *note, size_t len);

// The tensors the chain reads (the first conv's input) and writes (the last conv's output).
void detail_io(const detail *t, int *in, int *out);

// Queues the chain on nimg images: x the first conv's input, y the last one's output (fp16 NHWC).
int detail_run(const gpu_ctx *g, const detail *t, int nimg, const void *x, void *y, sc_err *err);

// "bsconv tail k/n (one CTA per image, B KB of shared memory)" for the chain's conv k.
void detail_describe(const detail *t, int k, char *buf, size_t len);

void detail_free(detail *t);

#endif  // SC_HAVE_CUDA
#endif
