/*
 * rng.h - splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom
 * number generators", 2014) for zo-train: the data split hash, batch starts,
 * weight init and sampling (sample_token). Header only; not for cryptography.
 */
#ifndef ZO_TRAIN_RNG_H
#define ZO_TRAIN_RNG_H

#include <math.h>
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

/*
 * sample_token() - the next token from the logits @lg[0 .. n-1] of one
 * position: the arg-max when @temperature <= 0 (the first on ties), else a
 * draw from softmax(lg / temperature) with splitmix64_next(@rng), 53 bits
 * of uniform. @p is scratch of n floats. Shared by both model backends so
 * that they sample alike.
 */
static inline int sample_token(const float *lg, int n, float temperature, uint64_t *rng, float *p) {
  int pick = 0;
  if (temperature <= 0.0f) {
    for (int v = 1; v < n; v++)
      if (lg[v] > lg[pick]) pick = v;
    return pick;
  }
  float mx = lg[0];
  for (int v = 1; v < n; v++) mx = lg[v] > mx ? lg[v] : mx;
  double sum = 0.0;
  for (int v = 0; v < n; v++) {
    p[v] = expf((lg[v] - mx) / temperature);
    sum += p[v];
  }
  const double u = (double)(splitmix64_next(rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
  double cum = 0.0;
  for (int v = 0; v < n; v++) {
    cum += p[v];
    if (u < cum) return v;
  }
  return n - 1;
}

#endif /* ZO_TRAIN_RNG_H */
