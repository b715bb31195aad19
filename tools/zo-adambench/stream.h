/*
 * stream.h - roofline kernels for zo-adambench: streams with the access
 * pattern of each Adam variant (same arrays, same element sizes, same vector
 * width, regular or non-temporal stores) and trivial arithmetic.
 * Not an optimizer: the values they write mean nothing.
 */
#ifndef ZO_ADAMBENCH_STREAM_H
#define ZO_ADAMBENCH_STREAM_H

#include <stddef.h>
#include <stdint.h>

/* Byte patterns, per parameter (reads + writes). */
typedef enum stream_pattern {
  PAT_F32 =
      0, /* read p g m v (f32), write p m v (f32): 16 + 12 = 28 B (fp32-grad Adam, no copy-out) */
  PAT_H16 =
      1, /* read p(4) g(2) m(4) v(4), write p m v (12) + out(2): 28 B (16-bit grads + 16-bit copy-out) */
  PAT_S16 = 2, /* read p(4) g(2) m(2) v(2), write p(4) m(2) v(2) out(2): 20 B (16-bit states too) */
  PAT_CAST = 3, /* read p(4), write out(2): 6 B (the separate cast pass of an unfused pipeline) */
  PAT_RD32 = 4, /* read g(4), sum it: 4 B (gradient squared-norm pass, fp32 gradients) */
  PAT_RD16 = 5, /* read g(2), sum it: 2 B (gradient squared-norm pass, 16-bit gradients) */
  PAT_COUNT
} stream_pattern;

/* Arrays one stream pass touches; all allocated with the same (>= 64-byte) alignment. */
typedef struct stream_args {
  stream_pattern pat;
  int nt;              /* 1: non-temporal stores for every written array */
  int level;           /* zo_simd value: 1 scalar, 2 avx2, 3 avx512 */
  float c;             /* the trivial constant: p += g*c; m += c; v += c */
  float *p;            /* f32[n] */
  const float *g;      /* f32[n] (PAT_F32) */
  const uint16_t *g16; /* bf16[n] (PAT_H16, PAT_S16) */
  float *m, *v;        /* f32[n] (PAT_F32, PAT_H16) */
  uint16_t *m16, *v16; /* bf16[n] (PAT_S16) */
  uint16_t *out;       /* 16-bit[n] (PAT_H16, PAT_S16, PAT_CAST) */
  /* float[threads]: the read-only patterns store their sums here, so nothing is elided */
  float *sink;
} stream_args;

/* bytes per parameter of a pattern (the figure GB/s are computed with) */
int stream_pattern_bytes(stream_pattern p);
const char *stream_pattern_name(stream_pattern p);

/* zo_adam_pool_parallel_for() callback: runs the pass over [begin, end). */
void stream_tile(void *arg, size_t begin, size_t end, int thread);

#endif
