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

/* ---------------------------------------------------------------- fused update */

/* vcvtneps2bf16 through inline asm, so no function needs the avx512bf16 target attribute. */
AI __m256i cvtne_bf16_asm(__m512 f) {
  __m256i r;
  __asm__("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(f));
  return r;
}

/* RNE float32 -> bf16, 16 lanes packed to 16 bits; native: AVX512-BF16 with the denormal lanes redone. */
AI __m256i rne_bf16(__m512 f, int native) {
  if (!native) return _mm512_cvtepi32_epi16(bf16_bits16(f));
  __m256i r = cvtne_bf16_asm(f);
  __m512i ax = _mm512_and_si512(_mm512_castps_si512(f), _mm512_set1_epi32(0x7fffffff));
  __mmask16 den = _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(ax, ax), ax, _mm512_set1_epi32(0x00800000));
  if (__builtin_expect(den != 0, 0)) r = _mm256_mask_mov_epi16(r, den, _mm512_cvtepi32_epi16(bf16_bits16(f)));
  return r;
}

/* Stochastic rounding to bf16 by r (16-bit random per lane), NaN quieted; result in the low 16 bits of each lane. */
AI __m256i sr_bf16(__m512 f, __m512i r) {
  __m512i x = _mm512_castps_si512(f);
  __m512i t = _mm512_srli_epi32(_mm512_add_epi32(x, r), 16);
  __mmask16 isnan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  t = _mm512_mask_mov_epi32(t, isnan, _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(t);
}

/* zo_sr_hash for the 16 elements starting at global index i. */
AI __m512i sr_hash16(uint64_t seed, uint32_t step32, size_t i) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint64_t key = seed + (uint64_t)i;
  uint32_t lo0 = (uint32_t)key, hi = (uint32_t)(key >> 32);
  __m512i lo = _mm512_add_epi32(_mm512_set1_epi32((int)lo0), iota);
  __m512i x = _mm512_add_epi32(lo, _mm512_set1_epi32((int)(0x9e3779b9u * hi + 0x85ebca77u * step32)));
  /* lanes whose low word wrapped past 2^32 belong to hi + 1 */
  __mmask16 wrapped = _mm512_cmplt_epu32_mask(lo, _mm512_set1_epi32((int)lo0));
  x = _mm512_mask_add_epi32(x, wrapped, x, _mm512_set1_epi32((int)0x9e3779b9u));
#ifdef EXP_NOHASH
  return x;
#else
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x85ebca6bu));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 13));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0xc2b2ae35u));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
#endif
}

AI __m512 load_state16(const void *a, zo_dtype st, size_t i, __mmask16 k) {
  if (st == ZO_DTYPE_F32) return _mm512_maskz_loadu_ps(k, (const float *)a + i);
  __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)a + i);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Store helpers: full vectors (k all ones) may stream; partial ones are masked. */
AI void st_ps(float *a, __m512 x, __mmask16 k, int full, int nt) {
  if (full && nt)
    _mm512_stream_ps(a, x);
  else if (full)
    _mm512_storeu_ps(a, x);
  else
    _mm512_mask_storeu_ps(a, k, x);
}
AI void st_h16(uint16_t *a, __m256i x, __mmask16 k, int full, int nt) {
  if (full && nt)
    _mm256_stream_si256((__m256i *)a, x);
  else if (full)
    _mm256_storeu_si256((__m256i *)a, x);
  else
    _mm256_mask_storeu_epi16(a, k, x);
}

typedef struct {
  int p, m, v, o; /* stream with non-temporal stores */
} nt_set;

/* One 16-lane fused update at element i; returns the nonfinite lanes of the raw gradient. */
AI __mmask16 fused16(const zo_adam_job *j, zo_dtype gt, zo_dtype st, zo_dtype ot, int has_out, int native, size_t i,
                     __mmask16 k, int full, nt_set nt) {
  const zo_adam_consts *c = &j->c;
  __m512 graw = load16((const char *)j->g + i * zo_dtype_size(gt), gt, k);
  __mmask16 bad = _mm512_fpclass_ps_mask(graw, 0x99); /* QNaN | +inf | -inf | SNaN */
  __m512 pv = _mm512_maskz_loadu_ps(k, j->p + i);
  __m512 gv = _mm512_mul_ps(graw, _mm512_set1_ps(c->grad_scale));
  if (c->l2)
    gv = _mm512_add_ps(gv, _mm512_mul_ps(_mm512_set1_ps(c->wd), pv));
  else
    pv = _mm512_mul_ps(pv, _mm512_set1_ps(c->decay));
  __m512 mv = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c->b1), load_state16(j->m, st, i, k)),
                            _mm512_mul_ps(_mm512_set1_ps(c->omb1), gv));
  __m512 vv = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c->b2), load_state16(j->v, st, i, k)),
                            _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(c->omb2), gv), gv));
  __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), _mm512_set1_ps(c->sqrt_bc2)), _mm512_set1_ps(c->eps));
  pv = _mm512_sub_ps(pv, _mm512_mul_ps(_mm512_set1_ps(c->step_size), _mm512_div_ps(mv, den)));
  st_ps(j->p + i, pv, k, full, nt.p);
  if (st == ZO_DTYPE_F32) {
    st_ps((float *)j->m + i, mv, k, full, nt.m);
    st_ps((float *)j->v + i, vv, k, full, nt.v);
  } else {
    __m512i h = sr_hash16(j->seed, j->step32, i);
    __m512i rm = _mm512_and_si512(h, _mm512_set1_epi32(0xffff)), rv = _mm512_srli_epi32(h, 16);
    __m256i m16, v16;
    if (__builtin_expect((_mm512_cmp_ps_mask(mv, mv, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(vv, vv, _CMP_UNORD_Q)) == 0, 1)) {
      /* no NaN: add the random bits and gather the high halves of m and v with one permute */
      const __m512i hi_words = _mm512_setr_epi32(0x00030001, 0x00070005, 0x000b0009, 0x000f000d, 0x00130011, 0x00170015,
                                                 0x001b0019, 0x001f001d, 0x00230021, 0x00270025, 0x002b0029, 0x002f002d,
                                                 0x00330031, 0x00370035, 0x003b0039, 0x003f003d);
      __m512i both = _mm512_permutex2var_epi16(_mm512_add_epi32(_mm512_castps_si512(mv), rm), hi_words,
                                               _mm512_add_epi32(_mm512_castps_si512(vv), rv));
      m16 = _mm512_castsi512_si256(both);
      v16 = _mm512_extracti64x4_epi64(both, 1);
    } else {
      m16 = sr_bf16(mv, rm);
      v16 = sr_bf16(vv, rv);
    }
    st_h16((uint16_t *)j->m + i, m16, k, full, nt.m);
    st_h16((uint16_t *)j->v + i, v16, k, full, nt.v);
  }
  if (has_out) {
    if (ot == ZO_DTYPE_F32)
      st_ps((float *)j->out + i, pv, k, full, nt.o);
    else if (ot == ZO_DTYPE_F16)
      st_h16((uint16_t *)j->out + i, _mm512_cvtps_ph(pv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), k, full,
             nt.o);
    else
      st_h16((uint16_t *)j->out + i, rne_bf16(pv, native), k, full, nt.o);
  }
  return bad & k;
}

static inline int aligned_to(const void *a, size_t bytes) { return ((uintptr_t)a & (bytes - 1)) == 0; }

/*
 * Range [b, e): a masked head until param is 64-byte aligned, full vectors
 * (streaming the streams that are aligned for it when j->nt allows), a
 * masked tail. gt, st, ot, has_out, native are constants in every instance.
 */
AI int fused_body(const zo_adam_job *j, size_t b, size_t e, zo_dtype gt, zo_dtype st, zo_dtype ot, int has_out,
                  int native) {
  __mmask16 bad = 0;
  size_t i = b;
  nt_set none = {0, 0, 0, 0};
  size_t head = ((64 - ((uintptr_t)(j->p + i) & 63)) & 63) / 4;
  if (head > e - i) head = e - i;
  if (head) {
    bad |= fused16(j, gt, st, ot, has_out, native, i, (__mmask16)((1u << head) - 1u), 0, none);
    i += head;
  }
  const size_t ssz = zo_dtype_size(st), osz = zo_dtype_size(ot);
  nt_set nt = {0, 0, 0, 0};
  if (j->nt & ZO_NT_STATE) {
    nt.p = aligned_to(j->p + i, 64);
    nt.m = aligned_to((char *)j->m + i * ssz, 16 * ssz);
    nt.v = aligned_to((char *)j->v + i * ssz, 16 * ssz);
  }
  if (has_out && (j->nt & ZO_NT_OUT)) nt.o = aligned_to((char *)j->out + i * osz, 16 * osz);
  int any_nt = nt.p | nt.m | nt.v | nt.o;
  if (any_nt)
    for (; i + 16 <= e; i += 16) bad |= fused16(j, gt, st, ot, has_out, native, i, (__mmask16)0xffff, 1, nt);
  else
    for (; i + 16 <= e; i += 16) bad |= fused16(j, gt, st, ot, has_out, native, i, (__mmask16)0xffff, 1, none);
  if (i < e) bad |= fused16(j, gt, st, ot, has_out, native, i, tail_mask(e - i), 0, none);
  if (any_nt) _mm_sfence(); /* order the streaming stores before whatever publishes completion */
  return bad != 0;
}

#define FUSED_VARIANT(name, GT, ST, OT, HAS, NATIVE) \
  static int name(const zo_adam_job *j, size_t b, size_t e) { return fused_body(j, b, e, GT, ST, OT, HAS, NATIVE); }
#define FUSED_FOR_GT(gname, GT)                                                                  \
  FUSED_VARIANT(fz_##gname##_f32_none, GT, ZO_DTYPE_F32, ZO_DTYPE_F32, 0, 0)                     \
  FUSED_VARIANT(fz_##gname##_f32_f32, GT, ZO_DTYPE_F32, ZO_DTYPE_F32, 1, 0)                      \
  FUSED_VARIANT(fz_##gname##_f32_f16, GT, ZO_DTYPE_F32, ZO_DTYPE_F16, 1, 0)                      \
  FUSED_VARIANT(fz_##gname##_f32_bf16, GT, ZO_DTYPE_F32, ZO_DTYPE_BF16, 1, 0)                    \
  FUSED_VARIANT(fz_##gname##_f32_bf16n, GT, ZO_DTYPE_F32, ZO_DTYPE_BF16, 1, 1)                   \
  FUSED_VARIANT(fz_##gname##_bf16_none, GT, ZO_DTYPE_BF16, ZO_DTYPE_F32, 0, 0)                   \
  FUSED_VARIANT(fz_##gname##_bf16_f32, GT, ZO_DTYPE_BF16, ZO_DTYPE_F32, 1, 0)                    \
  FUSED_VARIANT(fz_##gname##_bf16_f16, GT, ZO_DTYPE_BF16, ZO_DTYPE_F16, 1, 0)                    \
  FUSED_VARIANT(fz_##gname##_bf16_bf16, GT, ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1, 0)                  \
  FUSED_VARIANT(fz_##gname##_bf16_bf16n, GT, ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1, 1)
FUSED_FOR_GT(g32, ZO_DTYPE_F32)
FUSED_FOR_GT(g16, ZO_DTYPE_F16)
FUSED_FOR_GT(gb16, ZO_DTYPE_BF16)

typedef int (*fused_fn)(const zo_adam_job *, size_t, size_t);
/* [grad dtype][state: 0 f32, 1 bf16][out: 0 none, 1 f32, 2 f16, 3 bf16, 4 bf16 native] */
#define ROW(g) {{fz_##g##_f32_none, fz_##g##_f32_f32, fz_##g##_f32_f16, fz_##g##_f32_bf16, fz_##g##_f32_bf16n}, \
                {fz_##g##_bf16_none, fz_##g##_bf16_f32, fz_##g##_bf16_f16, fz_##g##_bf16_bf16, fz_##g##_bf16_bf16n}}
static const fused_fn k_fused[3][2][5] = {
    [ZO_DTYPE_F32] = ROW(g32),
    [ZO_DTYPE_F16] = ROW(g16),
    [ZO_DTYPE_BF16] = ROW(gb16),
};

int zo_adam_range_avx512(const zo_adam_job *j, size_t b, size_t e) {
  if (e <= b) return 0;
  int o = 0;
  if (j->out) o = j->ot == ZO_DTYPE_F32 ? 1 : j->ot == ZO_DTYPE_F16 ? 2 : (zo_simd_has_avx512_bf16() ? 4 : 3);
  return k_fused[j->gt][j->st == ZO_DTYPE_BF16][o](j, b, e);
}

int zo_scan_nonfinite_avx512(const void *g, zo_dtype gt, size_t b, size_t e) {
  __mmask16 bad = 0;
  const size_t gsz = zo_dtype_size(gt);
  size_t i = b;
  if (gt == ZO_DTYPE_F32) {
    for (; i + 16 <= e; i += 16) bad |= _mm512_fpclass_ps_mask(_mm512_loadu_ps((const float *)g + i), 0x99);
  } else {
    /* 16-bit floats: exponent all ones <=> (h & 0x7fff) >= limit; 32 lanes per step */
    const __m512i lim = _mm512_set1_epi16(gt == ZO_DTYPE_F16 ? 0x7c00 : 0x7f80);
    const __m512i absm = _mm512_set1_epi16(0x7fff);
    __mmask32 b32 = 0;
    for (; i + 32 <= e; i += 32)
      b32 |= _mm512_cmpge_epu16_mask(_mm512_and_si512(_mm512_loadu_si512((const uint16_t *)g + i), absm), lim);
    bad = b32 != 0;
  }
  for (; i < e; i += 16) {
    __mmask16 k = tail_mask(e - i);
    bad |= _mm512_fpclass_ps_mask(load16((const char *)g + i * gsz, gt, k), 0x99) & k;
  }
  return bad != 0;
}
