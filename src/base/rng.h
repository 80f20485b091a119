/* Small deterministic RNG (xorshift64* / splitmix64 seeding) used for
 * sampling, synthetic weights and training; state is owned by the caller. */
#ifndef SUBQ_BASE_RNG_H
#define SUBQ_BASE_RNG_H

#include <stdint.h>

/* Turn any seed (including 0) into a valid non-zero state. */
uint64_t rng_seed(uint64_t seed);
uint64_t rng_next_u64(uint64_t *state);
/* Uniform in [0, 1). */
float rng_uniform(uint64_t *state);
/* Standard normal (Box-Muller). */
float rng_normal(uint64_t *state);

#endif
