#include "base/rng.h"

#include <math.h>

uint64_t rng_seed(uint64_t seed) {
    /* splitmix64 scrambles the seed so nearby seeds give unrelated streams */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 0x2545F4914F6CDD1Dull;
}

uint64_t rng_next_u64(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float rng_uniform(uint64_t *s) { return (float)(rng_next_u64(s) >> 40) * (1.0f / 16777216.0f); }

float rng_normal(uint64_t *s) {
    float u1 = rng_uniform(s), u2 = rng_uniform(s);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}
