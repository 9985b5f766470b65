// Internals of the sparse conv GPU code shared by spconv.cu (kernels and
// launches) and spconv_plan.cu (variant lists, layouts, weight tables, the
// public API). CUDA sources only.
//
// Shared-memory tile of the tiled kernel, per image slot and channel of the
// current chunk: br rows (the band's input rows) of rp 4-byte words. A row
// holds the input columns split by phase (column mod stride) so that lanes
// owning consecutive output columns read consecutive words. fp32: one float
// per word, phase width pw = lc + (S-1)/stride. fp16: half2 words; each phase
// holds two copies of its columns, A (pairs 0-1, 2-3, ...) and B (pairs 1-2,
// 3-4, ...), np pairs each (pw = 2 np), so the two adjacent output columns of
// a thread always read one aligned half2.
//
// fp32 with CW columns per thread (SPK_PAIR, kernels/spconv_pairs.cu): slots
// of CW floats; unit column l computes conv columns l, l + H, ..., l + (CW-1) H
// (H = lc, units per row), so slot j of a phase holds the phase's columns j,
// j + H, ..., and every kernel column's CW inputs are one aligned slot; pw = lc
// + (S-1)/stride slots per phase, rp/cp/ip and record offsets count slots (the
// records hold byte offsets).
//
// Big pair blocks (spk_cfg.big 1, 2): the same kernel body and layout with 512
// threads (kg = 512 / ubp groups of rb channels) and one block per SM, so a
// staged chunk serves twice the channels and holds about twice the channels.
// occ3 / occ4 pair blocks (big 3, 4): the same layout with 256 threads and
// the tile capped so that 3 / 4 blocks fit an SM (H100: 75 / 56 KB).
//
// A 1x1 layer with stride s > 1 reaches the tiled and ell kernels as a
// stride-1 layer over every s-th input row and column (spk_args.vs = s): the
// tile then holds only the inputs its windows read (one phase, pb rows).
#ifndef SC_KERNELS_SPCONV_IMPL_H
#define SC_KERNELS_SPCONV_IMPL_H

#include <cuda_fp16.h>

#include "kernels/spconv_gpu.h"

enum spk_kind { SPK_PLAIN = 0, SPK_TILE = 1, SPK_ELL = 2, SPK_LINEAR = 3, SPK_PAIR = 4 };

// Division by a run-time constant as multiply-high, add and shift (x < 2^31).
struct spk_fdiv {
    uint32_t mul, shift;
};

// Everything a kernel reads, passed by value as a grid constant.
struct spk_args {
    const void *in;          // (n, C, Hb, Wb) bordered input
    void *out;               // (n, K, Po + 2 ob, Qo + 2 ob) bordered output
    const void *w;           // weight records of the variant
    const int *cptr;         // (K, nch + 1) first record of each chunk, per kernel row
                             // (ell and linear: nch = 1, so [0, row length))
    const int *perm;         // (K) output channel of kernel row k, or NULL (identity)
    const int32_t *goff;     // plain: (K, nnz) raw offsets (w: (K, nnz) floats)
    const float *bias;       // (K) or NULL
    const float *scale;      // (K) codebook row scale or NULL
    int n, K, C, nnz, nnzp;  // nnzp: records per row in memory (tile, linear)
    int R, S, stride, Hb, Wb, P, Q, Po, Qo, ob, relu;
    int pool, pk, ps, pp;    // pool: 1 when the fused pool is 2x2 stride 2 pad 0
    int rmin, cmin;          // first bordered row/column a window reads (in_border - pad)
    int vs;                  // view step: 1, or s for a 1x1 stride-s layer run by the tiled
                             // and ell kernels as stride 1 (stride = 1) over the view whose
                             // element (y, x) is bordered (rmin + y vs, cmin + x vs)
    // tile
    int nb, lc, g, ub, ubp, kb, ki, cc, nch, pb, br, rp, cp, ip, pw, np, bands;
    spk_fdiv f_rp, f_br, f_cc;
    // lanes-over-channels kernel (ell) and linear
    int et, cs, kbt, ebr, ebc, tiles_q, ntiles, red_off, lkb, ni;
    spk_fdiv f_plane, f_ebc, f_c;
    // codebook (index 16 and above: zero): fp32 values and half2 (v, v) bits
    float cbf[32];
    uint32_t cbh[32];
};

// One variant: its kernel, tile parameters and the derived launch layout.
struct spk_cfg {
    int kind;
    int rs, rb, nb;      // tile: conv rows per unit, channels per thread, images per block
    int g1;              // tile: one row group per block (more blocks for small batches)
    int gd;              // tile: the default row groups per block divided by gd (0, 1: as
                         // is; listed only where the smaller band fits C in one chunk)
    int cw;              // pair: output columns per thread (2 or 4)
    int big;             // pair: 1, 2: 512-thread blocks, one per SM, tile up to the SM's shared memory less 8 KB
                         // (small planes: more output channels per staged chunk); 2 also
                         // loads each row's first records during the row before; 3, 4
                         // ("occ3", "occ4"): 256-thread blocks, 3 or 4 per SM (fewer
                         // registers and accumulators, tile up to 75 / 56 KB)
    int et, cs, kbt;     // ell: tile side, splits per row, channels per block
    int ni;              // ell: images per block
    int lkb;             // linear: channels per block
    int planted;         // test builds (SC_TEST_PLANT_WRONG): a fast wrong copy (empty rows)
    int threads;
    size_t smem;         // dynamic shared memory bytes
    spk_args a;          // layout (device pointers and n filled later)
};

// A layer on the device.
struct spconv_gpu {
    gpu_devinfo dev;          // the device the layer lives on (queried at create)
    spconv_desc d;            // geometry; its array pointers are not kept
    spconv_gpu_vtype vt;
    int hb, wb, po, qo, rmin, cmin;
    int linear;               // H = W = R = S = 1, no borders, no pool
    int pool2;                // fused pool is 2x2 stride 2 pad 0
    int window_ok;            // every offset lies in its conv window (tile/ell/linear usable)
    long nnz_real;            // non-zero weights
    int compact;              // 1: variants skip explicit zeros and run rows by length
    int *perm;                // (K) rows by descending count of non-zeros (stable);
                              // each variant deals them out its own way
    // host copies, each row sorted by offset: channel, kernel row, kernel column,
    // value (decoded) and code (16: zero)
    int *e_c, *e_r, *e_s;
    float *e_v;
    uint8_t *e_code;
    float cbf[32];
    uint32_t cbh[32];
    // device
    float *d_bias, *d_scale;  // (K) or NULL
    float *d_gw;              // (K, nnz) decoded weights, original order (plain kernel)
    int32_t *d_goff;          // (K, nnz) raw offsets
    int *d_perm;              // (K) the chosen variant's row order (layer row of kernel row)
    void *d_w;                // records of the chosen variant
    int *d_cptr;              // its chunk table (tile)
    spk_cfg cfg;              // chosen variant
    int cfg_n, cfg_v;         // batch and index it was listed under
    float ms;                 // tuned median time (ms), 0 when not tuned
    int nskip;                // variants the last tune skipped (failed or wrong)
    char skip_note[200];      // why the first of them was skipped
};

// A kernel's host entry (all kernels take the arguments by value).
typedef void (*spk_fn)(spk_args);

// The SPK_PAIR kernel for (rs, rb, cw) with fused 2x2 pool or not, for
// 256-thread blocks (big 0) or 512-thread ones (big 1; 2: with the next row's
// first records loaded early), or 256-thread ones with 3 or 4 blocks per SM
// (big 3, 4); NULL: no such instance; kernels/spconv_pairs.cu.
spk_fn spk_pair_fn(int rs, int rb, int cw, int pool, int big);

// Divisor for spk_fdiv (d >= 1).
spk_fdiv spk_fdiv_make(uint32_t d);

// Launches variant cfg for n images (cfg->a holds every pointer but in/out)
// on a device with `sms` SMs.
int spk_launch(const spk_cfg *cfg, int vt, int sms, int n, const void *in, void *out,
               cudaStream_t st, sc_err *err);

// Lets cfg's kernel use the shared memory it needs on device dev (call
// before launching); fails when the device has too little.
int spk_prepare(const spk_cfg *cfg, int vt, const gpu_devinfo *dev, sc_err *err);

#endif
