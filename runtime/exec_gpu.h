// GPU-only extras of the GPU executor backend (runtime/exec_gpu.c) for
// benchmarks and tests that hold the backend's state directly
// (exec_gpu_backend()->create(...)). Everything else goes through exec.h.
//
// Environment (for experiments): SC_GPU_GRAPH=0 turns off the capture of
// training steps into CUDA graphs (every step then runs as separate
// launches); SC_GPU_STEM_PAD=N pads the 3 input channels to N (3..16,
// default 8) in fp16.
#ifndef SC_EXEC_GPU_H
#define SC_EXEC_GPU_H

#include <stddef.h>

#include "exec.h"

// One training step run without a graph, with CUDA events around every
// layer's forward and backward: fwd_ms and bwd_ms (nlayers) receive each
// layer's times (a fused BN group's forward shows on its BN, its backward
// on its last layer), other_ms[4]
// the input preparation + weight cast, the loss, the gradient gather and the
// optimizer (SGD + loss scale). Synchronises.
int exec_gpu_profile_step(void *st, const exec_batch *b, const exec_hparams *h, float *fwd_ms,
                          float *bwd_ms, float other_ms[4], sc_err *err);

// Writes a multi-line description of the executor: precision, input channel
// padding, fused BN groups, each conv layer's chosen cuDNN algorithms at the
// largest batch, workspace bytes and whether training steps run as a graph.
void exec_gpu_describe(const void *st, char *buf, size_t len);

#endif
