// Sparsity patterns of pruning masks (docs/prune.md, "Patterns"): which sets
// of weights are pruned together, so that a kernel can skip whole blocks.
//   unstructured  any single weight (the default)
//   KxC           blocks of K consecutive output channels x C consecutive
//                 input channels at one kernel tap (r, s); linear layers:
//                 K outputs x C inputs. A layer whose K (or C) is not a
//                 multiple of the asked K (or C) takes gcd(K, asked) (gcd(C,
//                 asked)): the widest block that tiles it exactly.
//   KxC+F         hybrid: KxC blocks, and up to a share F (0 < F < 1) of each
//                 block layer's kept weights as single weights outside whole
//                 blocks (the block part for tensor cores, a small
//                 unstructured remainder; e.g. 16x8+0.2).
//   N:M           at most N kept of every M consecutive input channels at
//                 one (k, r, s); a layer whose C is not a multiple of M
//                 stays unstructured.
// Per layer: "PREFIX=P,...[,P]" puts each weight tensor whose name starts
// with PREFIX on P (the longest matching PREFIX wins) and every other layer
// on the bare P (unstructured when none is given), e.g.
// "layer3=16x8,layer4=16x8": blocks only where a block kernel can pay.
// A pattern is a property of the masks only: weights (K, C, R, S) keep their
// layout; the model file records the pattern (root attribute `pattern`), and
// each layer's geometry follows from it, the layer's name and its shape.
#ifndef SC_PATTERN_H
#define SC_PATTERN_H

#include <stddef.h>

#include "error.h"
#include "net.h"

typedef enum { PAT_UNSTRUCTURED = 0, PAT_BLOCK = 1, PAT_NM = 2 } sc_pattern_kind;

// Most per-layer rules in one pattern, the longest prefix, the longest text.
#define SC_PATTERN_RULES 16
#define SC_PATTERN_PREFIX 48
#define SC_PATTERN_TEXT NET_PREFIX_TEXT

// One pattern, as one layer is pruned on it.
typedef struct {
    sc_pattern_kind kind;
    int k, c;    // PAT_BLOCK: block of k output x c input channels
    int n, m;    // PAT_NM: at most n kept of every m input channels
    double rem;  // PAT_BLOCK: share of a layer's kept weights allowed outside whole blocks (0: none)
} sc_pattern_one;

// A network's pattern: one for every layer, or per-layer rules by name.
typedef struct {
    sc_pattern_one dflt;                               // the layers no rule names
    int nrules;                                        // rules (0: every layer on dflt)
    char prefix[SC_PATTERN_RULES][SC_PATTERN_PREFIX];  // tensor-name prefixes
    sc_pattern_one rule[SC_PATTERN_RULES];             // their patterns
} sc_pattern;

// One weight tensor under a pattern: its own block (after the fallbacks)
// and how its entries group into units (blocks, or N:M groups).
typedef struct {
    sc_pattern_kind kind;  // PAT_UNSTRUCTURED when the pattern does not apply
    int K, C, RS;          // output channels, input channels, kernel taps (R*S; 1 for linear)
    int kb, cb;            // PAT_BLOCK: the layer's block (kb divides K, cb divides C)
    int n, m;              // PAT_NM: the layer's N and M
    double rem;            // PAT_BLOCK: the pattern's remainder share (0: whole blocks only)
    size_t units;          // blocks (PAT_BLOCK), groups (PAT_NM), weights (unstructured)
    size_t unit_size;      // weights per block or group (1 when unstructured)
    int fallback;          // 1 when the layer's block is narrower than asked or the
                           // pattern does not apply (reported per layer)
} sc_pattern_geom;

// Parses "unstructured", "KxC" (1 <= K, C <= 256, K * C >= 2), "KxC+F"
// (0 < F < 1, a decimal fraction) or "N:M" (1 <= N < M <= 32), or a
// comma-separated list of PREFIX=P items and at most one bare P (the other
// layers' pattern); fails with a message naming the string or the item.
int sc_pattern_parse(const char *s, sc_pattern *p, sc_err *err);

// Canonical text of a pattern ("unstructured", "16x8", "16x8+0.2", "2:4",
// "layer3=16x8,layer4=16x8") into out.
void sc_pattern_format(const sc_pattern *p, char *out, size_t len);

// True when every layer is unstructured under p.
int sc_pattern_is_unstructured(const sc_pattern *p);

// True when some layer is on a hybrid KxC+F pattern.
int sc_pattern_has_hybrid(const sc_pattern *p);

// A short name of p for file names: its text, or "perlayer-" and a hash of
// the text when it has rules.
void sc_pattern_tag(const sc_pattern *p, char *out, size_t len);

// Fails naming the first rule whose prefix starts no prunable tensor's name of nt.
int sc_pattern_check_names(const sc_pattern *p, const net *nt, sc_err *err);

// The geometry of conv/linear weight tensor t of nt under pattern p (the
// rule of the longest prefix of its name, else p->dflt).
void sc_pattern_geom_of(const sc_pattern *p, const net *nt, int t, sc_pattern_geom *g);

// Text of a layer's own pattern ("16x8", "4x8", "2:4", "unstructured") into out.
void sc_pattern_geom_format(const sc_pattern_geom *g, char *out, size_t len);

// Unit (block or N:M group; the entry itself when unstructured) of entry i,
// units numbered in (k block, tap, c block) order.
size_t sc_pattern_unit_of(const sc_pattern_geom *g, size_t i);

// Entries of unit u into idx (unit_size of them, increasing).
void sc_pattern_unit_entries(const sc_pattern_geom *g, size_t u, size_t *idx);

// Units with at least one kept entry of a mask of g's tensor.
size_t sc_pattern_units_kept(const sc_pattern_geom *g, const float *mask);

// Block layers: the most blocks with a kept entry in one block row (kb output
// channels; the block-sparse kernels take as long as their busiest rows);
// 0 for other layers, (size_t)-1 when out of memory.
size_t sc_pattern_row_max_kept(const sc_pattern_geom *g, const float *mask);

// Entries that break the pattern in a mask: for blocks, kept entries of
// blocks that are not all kept (with a remainder share F: those past
// floor(F x the kept entries)); for N:M, kept entries past the N-th of a
// group; 0 for unstructured layers and masks on the pattern.
size_t sc_pattern_violations(const sc_pattern_geom *g, const float *mask);

// Block layers: kept entries outside whole kept blocks (the remainder of a
// KxC+F pattern); 0 for other layers, (size_t)-1 when out of memory.
size_t sc_pattern_singles(const sc_pattern_geom *g, const float *mask);

// The most single entries a block layer with `kept` kept entries may hold
// under its remainder share: floor(rem x kept).
size_t sc_pattern_singles_max(const sc_pattern_geom *g, size_t kept);

// The most single entries beside `block_weights` entries in whole blocks that
// keep within the share: floor(rem / (1 - rem) x block_weights).
size_t sc_pattern_singles_cap(const sc_pattern_geom *g, size_t block_weights);

#endif
