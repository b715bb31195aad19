/*
 * rng.h - splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom
 * number generators", 2014) for zo-train: the data split hash, batch starts,
 * weight init and sampling. Header only; not for cryptography.
 */
#ifndef ZO_TRAIN_RNG_H
#define ZO_TRAIN_RNG_H

#include <stdint.h>

#define SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ull

/* splitmix64() - @z plus the golden-ratio gamma, then the finaliser: a 64-bit hash of @z. */
static inline uint64_t splitmix64(uint64_t z) {
  z += SPLITMIX64_GAMMA;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* splitmix64_next() - advance the stream state *@state by the gamma; returns splitmix64() of the new state. */
static inline uint64_t splitmix64_next(uint64_t *state) {
  *state += SPLITMIX64_GAMMA;
  return splitmix64(*state);
}

#endif /* ZO_TRAIN_RNG_H */
