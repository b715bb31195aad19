/*
 * adam_avx2.c - AVX2 (+F16C) bodies of the Adam update, the squared-norm lanes
 * and the dtype casts, 8 floats per step with scalar tails from adam_internal.h.
 * Compiled with -mavx2 -mfma -mf16c; only called after the CPUID check in adam.c.
 */
#include <immintrin.h>

#include "adam_internal.h"

#define AI static inline __attribute__((always_inline))

/* Load 8 grads of dtype gt at a as float. */
AI __m256 load8(const void *a, zo_dtype gt) {
  if (gt == ZO_DTYPE_F32) return _mm256_loadu_ps((const float *)a);
  __m128i h = _mm_loadu_si128((const __m128i *)a);
  if (gt == ZO_DTYPE_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* float32 -> bf16 bits in the low half of each 32-bit lane, round to nearest even, NaN quieted. */
AI __m256i bf16_bits8(__m256 f) {
  __m256i x = _mm256_castps_si256(f);
  __m256i hi = _mm256_srli_epi32(x, 16);
  __m256i r = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1))));
  r = _mm256_srli_epi32(r, 16);
  __m256i nanv = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  __m256 isnan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(nanv), isnan));
}

AI void store8(void *a, zo_dtype ot, __m256 f) {
  if (ot == ZO_DTYPE_F32) {
    _mm256_storeu_ps((float *)a, f);
  } else if (ot == ZO_DTYPE_F16) {
    _mm_storeu_si128((__m128i *)a, _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    __m256i r = bf16_bits8(f);
    _mm_storeu_si128((__m128i *)a, _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
}

/* gt, ot and has_out are compile-time constants in every instantiation below. */
AI void adam_body(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v, void *out,
                  zo_dtype ot, int has_out, size_t n) {
  const __m256 b1 = _mm256_set1_ps(c->b1), omb1 = _mm256_set1_ps(c->omb1);
  const __m256 b2 = _mm256_set1_ps(c->b2), omb2 = _mm256_set1_ps(c->omb2);
  const __m256 eps = _mm256_set1_ps(c->eps), ss = _mm256_set1_ps(c->step_size);
  const __m256 sbc2 = _mm256_set1_ps(c->sqrt_bc2), wd = _mm256_set1_ps(c->wd);
  const __m256 decay = _mm256_set1_ps(c->decay), gs = _mm256_set1_ps(c->grad_scale);
  const int l2 = c->l2;
  const size_t gsz = zo_dtype_size(gt), osz = zo_dtype_size(ot);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pv = _mm256_loadu_ps(p + i);
    __m256 gv = _mm256_mul_ps(load8((const char *)g + i * gsz, gt), gs);
    if (l2)
      gv = _mm256_add_ps(gv, _mm256_mul_ps(wd, pv));
    else
      pv = _mm256_mul_ps(pv, decay);
    __m256 mv = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(omb1, gv));
    __m256 vv = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(omb2, gv), gv));
    __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), sbc2), eps);
    pv = _mm256_sub_ps(pv, _mm256_mul_ps(ss, _mm256_div_ps(mv, den)));
    _mm256_storeu_ps(p + i, pv);
    _mm256_storeu_ps(m + i, mv);
    _mm256_storeu_ps(v + i, vv);
    if (has_out) store8((char *)out + i * osz, ot, pv);
  }
  if (i < n)
    zo_adam_kernel_scalar(c, p + i, (const char *)g + i * gsz, gt, m + i, v + i,
                          has_out ? (void *)((char *)out + i * osz) : NULL, ot, n - i);
}

#define ADAM_VARIANT(name, GT, OT, HAS)                                                                       \
  static void name(const zo_adam_consts *c, float *p, const void *g, float *m, float *v, void *out, size_t n) { \
    adam_body(c, p, g, GT, m, v, out, OT, HAS, n);                                                              \
  }
ADAM_VARIANT(adam_f32_none, ZO_DTYPE_F32, ZO_DTYPE_F32, 0)
ADAM_VARIANT(adam_f32_f32, ZO_DTYPE_F32, ZO_DTYPE_F32, 1)
ADAM_VARIANT(adam_f32_bf16, ZO_DTYPE_F32, ZO_DTYPE_BF16, 1)
ADAM_VARIANT(adam_f32_f16, ZO_DTYPE_F32, ZO_DTYPE_F16, 1)
ADAM_VARIANT(adam_bf16_none, ZO_DTYPE_BF16, ZO_DTYPE_F32, 0)
ADAM_VARIANT(adam_bf16_f32, ZO_DTYPE_BF16, ZO_DTYPE_F32, 1)
ADAM_VARIANT(adam_bf16_bf16, ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1)
ADAM_VARIANT(adam_bf16_f16, ZO_DTYPE_BF16, ZO_DTYPE_F16, 1)
ADAM_VARIANT(adam_f16_none, ZO_DTYPE_F16, ZO_DTYPE_F32, 0)
ADAM_VARIANT(adam_f16_f32, ZO_DTYPE_F16, ZO_DTYPE_F32, 1)
ADAM_VARIANT(adam_f16_bf16, ZO_DTYPE_F16, ZO_DTYPE_BF16, 1)
ADAM_VARIANT(adam_f16_f16, ZO_DTYPE_F16, ZO_DTYPE_F16, 1)

typedef void (*variant_fn)(const zo_adam_consts *, float *, const void *, float *, float *, void *, size_t);
/* [grad dtype][out: 0 none, 1 + dtype] */
static const variant_fn k_variants[3][4] = {
    [ZO_DTYPE_F32] = {adam_f32_none, adam_f32_f32, adam_f32_f16, adam_f32_bf16},
    [ZO_DTYPE_F16] = {adam_f16_none, adam_f16_f32, adam_f16_f16, adam_f16_bf16},
    [ZO_DTYPE_BF16] = {adam_bf16_none, adam_bf16_f32, adam_bf16_f16, adam_bf16_bf16},
};

void zo_adam_kernel_avx2(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v, void *out,
                         zo_dtype ot, size_t n) {
  k_variants[gt][out ? 1 + (int)ot : 0](c, p, g, m, v, out, n);
}

void zo_sqnorm_lanes_avx2(const float *g, size_t n, double acc[ZO_SQNORM_LANES]) {
  /* a0: lanes 0-3, a1: 4-7, a2: 8-11, a3: 12-15, matching element i -> lane i % 16 */
  __m256d a0 = _mm256_loadu_pd(acc), a1 = _mm256_loadu_pd(acc + 4);
  __m256d a2 = _mm256_loadu_pd(acc + 8), a3 = _mm256_loadu_pd(acc + 12);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 x0 = _mm256_loadu_ps(g + i), x1 = _mm256_loadu_ps(g + i + 8);
    __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x0)), d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x0, 1));
    __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(x1)), d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(x1, 1));
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
    a2 = _mm256_add_pd(a2, _mm256_mul_pd(d2, d2));
    a3 = _mm256_add_pd(a3, _mm256_mul_pd(d3, d3));
  }
  _mm256_storeu_pd(acc, a0);
  _mm256_storeu_pd(acc + 4, a1);
  _mm256_storeu_pd(acc + 8, a2);
  _mm256_storeu_pd(acc + 12, a3);
  /* i is a multiple of 16 here, so the scalar tail keeps the lane mapping */
  if (i < n) zo_sqnorm_lanes_scalar(g + i, n - i, acc);
}

void zo_cast_kernel_avx2(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n) {
  size_t i = 0;
  const size_t ssz = zo_dtype_size(st), dsz = zo_dtype_size(dt);
  if (st == ZO_DTYPE_F32 && dt == ZO_DTYPE_BF16) {
    for (; i + 8 <= n; i += 8) store8((uint16_t *)dst + i, ZO_DTYPE_BF16, _mm256_loadu_ps((const float *)src + i));
  } else if (st == ZO_DTYPE_F32 && dt == ZO_DTYPE_F16) {
    for (; i + 8 <= n; i += 8) store8((uint16_t *)dst + i, ZO_DTYPE_F16, _mm256_loadu_ps((const float *)src + i));
  } else if (st == ZO_DTYPE_BF16 && dt == ZO_DTYPE_F32) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps((float *)dst + i, load8((const uint16_t *)src + i, ZO_DTYPE_BF16));
  } else if (st == ZO_DTYPE_F16 && dt == ZO_DTYPE_F32) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps((float *)dst + i, load8((const uint16_t *)src + i, ZO_DTYPE_F16));
  } else if (st == ZO_DTYPE_BF16 && dt == ZO_DTYPE_F16) {
    for (; i + 8 <= n; i += 8)
      store8((uint16_t *)dst + i, ZO_DTYPE_F16, load8((const uint16_t *)src + i, ZO_DTYPE_BF16));
  } else if (st == ZO_DTYPE_F16 && dt == ZO_DTYPE_BF16) {
    for (; i + 8 <= n; i += 8)
      store8((uint16_t *)dst + i, ZO_DTYPE_BF16, load8((const uint16_t *)src + i, ZO_DTYPE_F16));
  }
  if (i < n) zo_cast_kernel_scalar((char *)dst + i * dsz, dt, (const char *)src + i * ssz, st, n - i);
}
