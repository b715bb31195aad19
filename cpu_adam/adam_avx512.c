/*
 * adam_avx512.c - AVX-512 (F/BW/VL/DQ) bodies of the Adam update, the
 * squared-norm lanes and the dtype casts, 16 floats per step, masked tails.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq; only called after
 * the CPUID/XGETBV check in adam.c. The AVX512-BF16 cast carries its own target attribute.
 */
#include <immintrin.h>

#include "adam_internal.h"

#define AI static inline __attribute__((always_inline))

/* Load up to 16 elements of dtype t (lanes outside mask k read as 0) as float. */
AI __m512 load16(const void *a, zo_dtype t, __mmask16 k) {
  if (t == ZO_DTYPE_F32) return _mm512_maskz_loadu_ps(k, a);
  __m256i h = _mm256_maskz_loadu_epi16(k, a);
  if (t == ZO_DTYPE_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* float32 -> bf16 bits (low half of each 32-bit lane), round to nearest even, NaN quieted. */
AI __m512i bf16_bits16(__m512 f) {
  __m512i x = _mm512_castps_si512(f);
  __m512i hi = _mm512_srli_epi32(x, 16);
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1))));
  r = _mm512_srli_epi32(r, 16);
  __mmask16 isnan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(r, isnan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

AI void store16(void *a, zo_dtype t, __m512 f, __mmask16 k) {
  if (t == ZO_DTYPE_F32)
    _mm512_mask_storeu_ps(a, k, f);
  else if (t == ZO_DTYPE_F16)
    _mm256_mask_storeu_epi16(a, k, _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    _mm256_mask_storeu_epi16(a, k, _mm512_cvtepi32_epi16(bf16_bits16(f)));
}

AI __mmask16 tail_mask(size_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u); }

/* One 16-lane update at element i; lanes outside k are neither read nor written. */
AI void adam16(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v, void *out,
               zo_dtype ot, int has_out, size_t i, __mmask16 k) {
  const size_t gsz = zo_dtype_size(gt), osz = zo_dtype_size(ot);
  __m512 pv = _mm512_maskz_loadu_ps(k, p + i);
  __m512 gv = _mm512_mul_ps(load16((const char *)g + i * gsz, gt, k), _mm512_set1_ps(c->grad_scale));
  if (c->l2)
    gv = _mm512_add_ps(gv, _mm512_mul_ps(_mm512_set1_ps(c->wd), pv));
  else
    pv = _mm512_mul_ps(pv, _mm512_set1_ps(c->decay));
  __m512 mv = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c->b1), _mm512_maskz_loadu_ps(k, m + i)),
                            _mm512_mul_ps(_mm512_set1_ps(c->omb1), gv));
  __m512 vv = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c->b2), _mm512_maskz_loadu_ps(k, v + i)),
                            _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(c->omb2), gv), gv));
  __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), _mm512_set1_ps(c->sqrt_bc2)), _mm512_set1_ps(c->eps));
  pv = _mm512_sub_ps(pv, _mm512_mul_ps(_mm512_set1_ps(c->step_size), _mm512_div_ps(mv, den)));
  _mm512_mask_storeu_ps(p + i, k, pv);
  _mm512_mask_storeu_ps(m + i, k, mv);
  _mm512_mask_storeu_ps(v + i, k, vv);
  if (has_out) store16((char *)out + i * osz, ot, pv, k);
}

/*
 * gt, ot and has_out are compile-time constants in every instantiation below.
 * Full vectors use an all-ones constant mask (the compiler emits plain loads
 * and stores); only the last partial vector is masked.
 */
AI void adam_body(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v, void *out,
                  zo_dtype ot, int has_out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) adam16(c, p, g, gt, m, v, out, ot, has_out, i, (__mmask16)0xffff);
  if (i < n) adam16(c, p, g, gt, m, v, out, ot, has_out, i, tail_mask(n - i));
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

void zo_adam_kernel_avx512(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v,
                           void *out, zo_dtype ot, size_t n) {
  k_variants[gt][out ? 1 + (int)ot : 0](c, p, g, m, v, out, n);
}

void zo_sqnorm_lanes_avx512(const float *g, size_t n, double acc[ZO_SQNORM_LANES]) {
  /* a0: lanes 0-7, a1: lanes 8-15 (element i -> lane i % 16); masked-off lanes add +0.0, a no-op on sums >= +0 */
  __m512d a0 = _mm512_loadu_pd(acc), a1 = _mm512_loadu_pd(acc + 8);
  for (size_t i = 0; i < n; i += 16) {
    __m512 x = _mm512_maskz_loadu_ps(tail_mask(n - i), g + i);
    __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    a0 = _mm512_add_pd(a0, _mm512_mul_pd(d0, d0));
    a1 = _mm512_add_pd(a1, _mm512_mul_pd(d1, d1));
  }
  _mm512_storeu_pd(acc, a0);
  _mm512_storeu_pd(acc + 8, a1);
}

/* The cast body; native_bf16 selects vcvtneps2bf16 (only instantiated under the avx512bf16 target). */
#define CAST_BODY(F32_TO_BF16)                                                                      \
  for (size_t i = 0; i < n; i += 16) {                                                              \
    __mmask16 k = tail_mask(n - i);                                                                 \
    const void *s = (const char *)src + i * ssz;                                                    \
    void *d = (char *)dst + i * dsz;                                                                \
    if (st == ZO_DTYPE_F32 && dt == ZO_DTYPE_BF16) {                                                \
      F32_TO_BF16(d, _mm512_maskz_loadu_ps(k, s), k);                                               \
    } else {                                                                                        \
      store16(d, dt, load16(s, st, k), k);                                                          \
    }                                                                                               \
  }

#define F32_TO_BF16_INT(d, f, k) store16((d), ZO_DTYPE_BF16, (f), (k))

void zo_cast_kernel_avx512(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n) {
  const size_t ssz = zo_dtype_size(st), dsz = zo_dtype_size(dt);
  CAST_BODY(F32_TO_BF16_INT)
}

/*
 * vcvtneps2bf16 rounds to nearest even and quiets NaN exactly like the integer
 * path, but treats denormal inputs as zero; lanes holding a nonzero denormal
 * are redone with the integer trick so every level gives the same bits.
 */
__attribute__((target("avx512bf16"))) static inline void f32_to_bf16_native(void *d, __m512 f, __mmask16 k) {
  __m256i r = (__m256i)_mm512_cvtneps_pbh(f);
  __m512i ax = _mm512_and_si512(_mm512_castps_si512(f), _mm512_set1_epi32(0x7fffffff));
  __mmask16 den = _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(ax, ax), ax, _mm512_set1_epi32(0x00800000));
  if (den & k) r = _mm256_mask_mov_epi16(r, den, _mm512_cvtepi32_epi16(bf16_bits16(f)));
  _mm256_mask_storeu_epi16(d, k, r);
}

__attribute__((target("avx512bf16"))) void zo_cast_kernel_avx512bf16(void *dst, zo_dtype dt, const void *src,
                                                                      zo_dtype st, size_t n) {
  const size_t ssz = zo_dtype_size(st), dsz = zo_dtype_size(dt);
  CAST_BODY(f32_to_bf16_native)
}
