// Deterministic random numbers (xoshiro256**, seeded by splitmix64). The whole
// state is four words so checkpoints can store and restore it exactly.
#ifndef SC_RNG_H
#define SC_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rng;

// Seeds the generator from one 64-bit seed and a stream id (e.g. an epoch).
void rng_seed(rng *r, uint64_t seed, uint64_t stream);
// Next 64 random bits.
uint64_t rng_next(rng *r);
// Uniform float in [0, 1).
float rng_uniform(rng *r);
// Uniform integer in [0, n) without modulo bias; n > 0.
uint32_t rng_below(rng *r, uint32_t n);
// Standard normal sample (Box-Muller; uses two uniforms per call).
float rng_normal(rng *r);
// Fisher-Yates shuffle of an int array.
void rng_shuffle(rng *r, int *a, int n);

#endif
