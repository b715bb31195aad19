/*
 * stream.c - zo-adambench's roofline kernels: one pass over the arrays an Adam
 * variant reads and writes, at the same vector width, with trivial arithmetic.
 * Not Adam and not a general memory benchmark; see stream.h for the patterns.
 */
#include "stream.h"

#include <immintrin.h>
#include <string.h>

int stream_pattern_bytes(stream_pattern p) {
  switch (p) {
    case PAT_F32: return 28;
    case PAT_H16: return 28;
    case PAT_S16: return 20;
    case PAT_CAST: return 6;
    case PAT_RD32: return 4;
    case PAT_RD16: return 2;
    default: return 0;
  }
}

const char *stream_pattern_name(stream_pattern p) {
  switch (p) {
    case PAT_F32: return "p32_g32_s32";
    case PAT_H16: return "p32_g16_s32_out16";
    case PAT_S16: return "p32_g16_s16_out16";
    case PAT_CAST: return "cast_p32_out16";
    case PAT_RD32: return "read_g32";
    case PAT_RD16: return "read_g16";
    default: return "?";
  }
}

/*
 * Scalar bf16 widen and narrow for heads, tails and the scalar level. Kept here
 * on purpose, not shared with base/half.h: narrow16 TRUNCATES (the same
 * trivial arithmetic as the SIMD n512/n256 below, a shift), where half.h's
 * zo_f32_to_bf16 rounds to nearest even with a NaN check, which would make
 * the scalar reference do more work than its vector levels; widen16 equals
 * zo_bf16_to_f32 bit for bit, but half.h is private (not installed) and a
 * tool may include only public headers, whose casts (zo_cast) are array
 * calls, not inlinable per element.
 */
static inline float widen16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t narrow16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

/* One element of each pattern; the scalar level and every head and tail use it. */
static inline void elem(const stream_args *a, size_t i) {
  const float c = a->c;
  switch (a->pat) {
    case PAT_F32:
      a->p[i] += a->g[i] * c;
      a->m[i] += c;
      a->v[i] += c;
      break;
    case PAT_H16:
      a->p[i] += widen16(a->g16[i]) * c;
      a->m[i] += c;
      a->v[i] += c;
      a->out[i] = narrow16(a->p[i]);
      break;
    case PAT_S16:
      a->p[i] += widen16(a->g16[i]) * c;
      a->m16[i] = narrow16(widen16(a->m16[i]) + c);
      a->v16[i] = narrow16(widen16(a->v16[i]) + c);
      a->out[i] = narrow16(a->p[i]);
      break;
    case PAT_CAST: a->out[i] = narrow16(a->p[i]); break;
    default: break;
  }
}

/* read-only patterns: a plain sum, returned (added to the thread's sink by the caller) */
static float sum_scalar(const stream_args *a, size_t b, size_t e) {
  float s = 0;
  if (a->pat == PAT_RD32)
    for (size_t i = b; i < e; i++) s += a->g[i];
  else
    for (size_t i = b; i < e; i++) s += widen16(a->g16[i]);
  return s;
}

static float run_scalar(const stream_args *a, size_t b, size_t e) {
  if (a->pat == PAT_RD32 || a->pat == PAT_RD16) return sum_scalar(a, b, e);
  for (size_t i = b; i < e; i++) elem(a, i);
  return 0;
}

/* first index >= b at which p + i is 64-byte aligned (every array shares p's alignment) */
static size_t align_up(const stream_args *a, size_t b, size_t e) {
  uintptr_t addr = (uintptr_t)(a->p + b);
  size_t skip = ((64 - (addr & 63)) & 63) / sizeof(float);
  return b + skip < e ? b + skip : e;
}

/*
 * The vector passes, one body for both widths: STREAM_LOOPS expands inside run_avx512 and run_avx2,
 * each compiled with its own target attribute, with that width's vector type (VF), step (W, elements
 * per vector) and per-width helpers: loadf/storef for f32 vectors, widen/narrow/storeh for 16-bit
 * ones, fmadd and add. Expects i, e, c, nt, p, m, v, g, g16, m16, v16, out, acc0 and acc1 in scope;
 * leaves i at the first element the vector loop did not do (the caller's scalar tail does the rest).
 */
#define STREAM_LOOPS(VF, W, loadf, storef, widen, narrow, storeh, fmadd, add)   \
  switch (a->pat) {                                                             \
    case PAT_F32:                                                               \
      for (; i + (W) <= e; i += (W)) {                                          \
        VF pp = fmadd(loadf(g + i), c, loadf(p + i));                           \
        VF mm = add(loadf(m + i), c);                                           \
        VF vv = add(loadf(v + i), c);                                           \
        storef(p + i, pp, nt);                                                  \
        storef(m + i, mm, nt);                                                  \
        storef(v + i, vv, nt);                                                  \
      }                                                                         \
      break;                                                                    \
    case PAT_H16:                                                               \
      for (; i + (W) <= e; i += (W)) {                                          \
        VF pp = fmadd(widen(g16 + i), c, loadf(p + i));                         \
        VF mm = add(loadf(m + i), c);                                           \
        VF vv = add(loadf(v + i), c);                                           \
        storef(p + i, pp, nt);                                                  \
        storef(m + i, mm, nt);                                                  \
        storef(v + i, vv, nt);                                                  \
        storeh(out + i, narrow(pp), nt);                                        \
      }                                                                         \
      break;                                                                    \
    case PAT_S16:                                                               \
      for (; i + (W) <= e; i += (W)) {                                          \
        VF pp = fmadd(widen(g16 + i), c, loadf(p + i));                         \
        VF mm = add(widen(m16 + i), c);                                         \
        VF vv = add(widen(v16 + i), c);                                         \
        storef(p + i, pp, nt);                                                  \
        storeh(m16 + i, narrow(mm), nt);                                        \
        storeh(v16 + i, narrow(vv), nt);                                        \
        storeh(out + i, narrow(pp), nt);                                        \
      }                                                                         \
      break;                                                                    \
    case PAT_CAST:                                                              \
      for (; i + (W) <= e; i += (W)) storeh(out + i, narrow(loadf(p + i)), nt); \
      break;                                                                    \
    case PAT_RD32: /* two accumulators: two loads in flight per step */         \
      for (; i + 2 * (W) <= e; i += 2 * (W)) {                                  \
        acc0 = add(acc0, loadf(g + i));                                         \
        acc1 = add(acc1, loadf(g + i + (W)));                                   \
      }                                                                         \
      break;                                                                    \
    case PAT_RD16:                                                              \
      for (; i + 2 * (W) <= e; i += 2 * (W)) {                                  \
        acc0 = add(acc0, widen(g16 + i));                                       \
        acc1 = add(acc1, widen(g16 + i + (W)));                                 \
      }                                                                         \
      break;                                                                    \
    default: break;                                                             \
  }

/* ---- AVX-512: 16 elements per step (f32 in a zmm, 16-bit in a ymm) ---- */
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

T512 static inline __m512 w512(const uint16_t *s) {
  __m256i h = _mm256_loadu_si256((const __m256i *)s);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
T512 static inline __m256i n512(__m512 f) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
}
T512 static inline void st512(float *d, __m512 x, int nt) {
  if (nt)
    _mm512_stream_ps(d, x);
  else
    _mm512_storeu_ps(d, x);
}
T512 static inline void st256i(uint16_t *d, __m256i x, int nt) {
  if (nt)
    _mm256_stream_si256((__m256i *)d, x);
  else
    _mm256_storeu_si256((__m256i *)d, x);
}

T512 static float run_avx512(const stream_args *a, size_t b, size_t e) {
  size_t i = align_up(a, b, e);
  float s = run_scalar(a, b, i);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  const __m512 c = _mm512_set1_ps(a->c);
  const int nt = a->nt;
  float *p = a->p, *m = a->m, *v = a->v;
  const float *g = a->g;
  const uint16_t *g16 = a->g16;
  uint16_t *m16 = a->m16, *v16 = a->v16, *out = a->out;
  STREAM_LOOPS(__m512, 16, _mm512_loadu_ps, st512, w512, n512, st256i, _mm512_fmadd_ps,
               _mm512_add_ps)
  s += run_scalar(a, i, e) + _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  if (nt) _mm_sfence();
  return s;
}

/* ---- AVX2: 8 elements per step (f32 in a ymm, 16-bit in an xmm) ---- */
#define T256 __attribute__((target("avx2,fma")))

T256 static inline __m256 w256(const uint16_t *s) {
  __m128i h = _mm_loadu_si128((const __m128i *)s);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
T256 static inline __m128i n256(__m256 f) {
  __m256i u = _mm256_srli_epi32(_mm256_castps_si256(f), 16);
  __m256i pk = _mm256_packus_epi32(u, u); /* per 128-bit lane: lo4 lo4 | hi4 hi4 */
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(pk, 0x08));
}
T256 static inline void st256(float *d, __m256 x, int nt) {
  if (nt)
    _mm256_stream_ps(d, x);
  else
    _mm256_storeu_ps(d, x);
}
T256 static inline void st128i(uint16_t *d, __m128i x, int nt) {
  if (nt)
    _mm_stream_si128((__m128i *)d, x);
  else
    _mm_storeu_si128((__m128i *)d, x);
}

T256 static float run_avx2(const stream_args *a, size_t b, size_t e) {
  size_t i = align_up(a, b, e);
  float s = run_scalar(a, b, i);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256 c = _mm256_set1_ps(a->c);
  const int nt = a->nt;
  float *p = a->p, *m = a->m, *v = a->v;
  const float *g = a->g;
  const uint16_t *g16 = a->g16;
  uint16_t *m16 = a->m16, *v16 = a->v16, *out = a->out;
  STREAM_LOOPS(__m256, 8, _mm256_loadu_ps, st256, w256, n256, st128i, _mm256_fmadd_ps,
               _mm256_add_ps)
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_add_ps(acc0, acc1));
  for (int k = 0; k < 8; k++) s += lanes[k];
  s += run_scalar(a, i, e);
  if (nt) _mm_sfence();
  return s;
}

void stream_tile(void *arg, size_t begin, size_t end, int thread) {
  const stream_args *a = arg;
  float s;
  if (a->level == 3)
    s = run_avx512(a, begin, end);
  else if (a->level == 2)
    s = run_avx2(a, begin, end);
  else
    s = run_scalar(a, begin, end);
  if (a->sink && thread >= 0) a->sink[thread] += s; /* one slot per thread: no race */
}
