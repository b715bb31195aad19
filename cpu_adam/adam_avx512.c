/*
 * adam_avx512.c - AVX-512 (F/BW/VL/DQ) bodies of the Adam update, the
 * squared-norm lanes and the dtype casts, 16 floats per step, masked tails.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq; only called after
 * the CPUID/XGETBV check in adam.c. The AVX512-BF16 cast carries its own target attribute.
 */
#include <immintrin.h>

#include "adam_internal.h"

#define AI static inline __attribute__((always_inline))

/*
 * 16 bf16 (in the low half of h) -> float32: one word permute that moves word
 * k to word 2k+1 and zeroes the even words (the mask), instead of a
 * zero-extend and a shift.
 */
AI __m512 widen_bf16(__m256i h) {
  const __m512i idx = _mm512_setr_epi32(0 << 16, 1 << 16, 2 << 16, 3 << 16, 4 << 16, 5 << 16,
                                        6 << 16, 7 << 16, 8 << 16, 9 << 16, 10 << 16, 11 << 16,
                                        12 << 16, 13 << 16, 14 << 16, 15 << 16);
  return _mm512_castsi512_ps(
      _mm512_maskz_permutexvar_epi16((__mmask32)0xaaaaaaaau, idx, _mm512_castsi256_si512(h)));
}

/* Load up to 16 elements of dtype t (lanes outside mask k read as 0) as float. */
AI __m512 load16(const void *a, zo_dtype t, __mmask16 k) {
  if (t == ZO_DTYPE_F32) return _mm512_maskz_loadu_ps(k, a);
  __m256i h = _mm256_maskz_loadu_epi16(k, a);
  if (t == ZO_DTYPE_F16) return _mm512_cvtph_ps(h);
  return widen_bf16(h);
}

/* float32 -> bf16 bits (low half of each 32-bit lane), round to nearest even, NaN quieted. */
AI __m512i bf16_bits16(__m512 f) {
  __m512i x = _mm512_castps_si512(f);
  __m512i hi = _mm512_srli_epi32(x, 16);
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                   _mm512_and_si512(hi, _mm512_set1_epi32(1))));
  r = _mm512_srli_epi32(r, 16);
  __mmask16 isnan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(r, isnan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

AI void store16(void *a, zo_dtype t, __m512 f, __mmask16 k) {
  if (t == ZO_DTYPE_F32)
    _mm512_mask_storeu_ps(a, k, f);
  else if (t == ZO_DTYPE_F16)
    _mm256_mask_storeu_epi16(a, k,
                             _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    _mm256_mask_storeu_epi16(a, k, _mm512_cvtepi32_epi16(bf16_bits16(f)));
}

AI __mmask16 tail_mask(size_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* Squares of 16 floats added to the lanes i % 16 = 0-7 (a0) and 8-15 (a1); FMA is exact here (d*d fits a double). */
AI void sq16(__m512 x, __m512d *a0, __m512d *a1) {
  __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  *a0 = _mm512_fmadd_pd(d0, d0, *a0);
  *a1 = _mm512_fmadd_pd(d1, d1, *a1);
}

/*
 * Full vectors use plain (unmasked) loads: per-vector masked loads kept the
 * old loop at about 6 GB/s from DRAM. Two independent accumulator pairs per
 * lane group would change the order, so each lane keeps one chain; the
 * unroll only feeds it (a double add chain of 16 elements per 4 cycles is
 * far above what DRAM delivers).
 */
AI void sqnorm_body(const void *g, zo_dtype gt, size_t n, double acc[ZO_SQNORM_LANES]) {
  __m512d a0 = _mm512_loadu_pd(acc), a1 = _mm512_loadu_pd(acc + 8);
  const size_t gsz = zo_dtype_size(gt);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 x0 = load16((const char *)g + i * gsz, gt, (__mmask16)0xffff);
    __m512 x1 = load16((const char *)g + (i + 16) * gsz, gt, (__mmask16)0xffff);
    sq16(x0, &a0, &a1);
    sq16(x1, &a0, &a1);
  }
  /* masked-off lanes add +0.0, a no-op on sums >= +0 */
  for (; i < n; i += 16) sq16(load16((const char *)g + i * gsz, gt, tail_mask(n - i)), &a0, &a1);
  _mm512_storeu_pd(acc, a0);
  _mm512_storeu_pd(acc + 8, a1);
}

void zo_sqnorm_lanes_avx512(const void *g, zo_dtype gt, size_t n, double acc[ZO_SQNORM_LANES]) {
  if (gt == ZO_DTYPE_F32)
    sqnorm_body(g, ZO_DTYPE_F32, n, acc);
  else if (gt == ZO_DTYPE_BF16)
    sqnorm_body(g, ZO_DTYPE_BF16, n, acc);
  else
    sqnorm_body(g, ZO_DTYPE_F16, n, acc);
}

/*
 * Casts: a masked head until dst is 64-byte aligned, full vectors with plain
 * loads and stores (non-temporal when the call writes at least
 * ZO_CAST_NT_BYTES, so a large cast does not read dst's lines for
 * ownership), a masked tail. The old loop masked every load and store and
 * reached about 8 GB/s per thread.
 */
AI void store16_full(void *a, zo_dtype t, __m512 f, int nt) {
  if (t == ZO_DTYPE_F32) {
    if (nt)
      _mm512_stream_ps(a, f);
    else
      _mm512_storeu_ps(a, f);
    return;
  }
  __m256i h = t == ZO_DTYPE_F16 ? _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                : _mm512_cvtepi32_epi16(bf16_bits16(f));
  if (nt)
    _mm256_stream_si256((__m256i *)a, h);
  else
    _mm256_storeu_si256((__m256i *)a, h);
}

static inline int cast_head(const void *dst, size_t dsz, size_t n) {
  size_t mis = (uintptr_t)dst & 63;
  if (mis % dsz) return 0; /* never aligned: no head, no streaming */
  size_t h = ((64 - mis) & 63) / dsz;
  return (int)(h < n ? h : n);
}

AI void cast_body(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n) {
  const size_t ssz = zo_dtype_size(st), dsz = zo_dtype_size(dt);
  const size_t head = (size_t)cast_head(dst, dsz, n); /* up to 31 elements */
  size_t i = 0;
  for (; i < head; i += 16)
    store16((char *)dst + i * dsz, dt, load16((const char *)src + i * ssz, st, tail_mask(head - i)),
            tail_mask(head - i));
  i = head;
  int nt = n * dsz >= ZO_CAST_NT_BYTES && ((uintptr_t)((char *)dst + i * dsz) & 63) == 0;
  if (nt)
    for (; i + 16 <= n; i += 16)
      store16_full((char *)dst + i * dsz, dt, load16((const char *)src + i * ssz, st, 0xffff), 1);
  else
    for (; i + 16 <= n; i += 16)
      store16_full((char *)dst + i * dsz, dt, load16((const char *)src + i * ssz, st, 0xffff), 0);
  if (i < n)
    store16((char *)dst + i * dsz, dt, load16((const char *)src + i * ssz, st, tail_mask(n - i)),
            tail_mask(n - i));
  if (nt) _mm_sfence();
}

#define CAST_VARIANT(name, DT, ST) \
  static void name(void *dst, const void *src, size_t n) { cast_body(dst, DT, src, ST, n); }
CAST_VARIANT(cast_f32_bf16, ZO_DTYPE_BF16, ZO_DTYPE_F32)
CAST_VARIANT(cast_f32_f16, ZO_DTYPE_F16, ZO_DTYPE_F32)
CAST_VARIANT(cast_bf16_f32, ZO_DTYPE_F32, ZO_DTYPE_BF16)
CAST_VARIANT(cast_f16_f32, ZO_DTYPE_F32, ZO_DTYPE_F16)
CAST_VARIANT(cast_bf16_f16, ZO_DTYPE_F16, ZO_DTYPE_BF16)
CAST_VARIANT(cast_f16_bf16, ZO_DTYPE_BF16, ZO_DTYPE_F16)

void zo_cast_kernel_avx512(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n) {
  if (st == ZO_DTYPE_F32)
    (dt == ZO_DTYPE_BF16 ? cast_f32_bf16 : cast_f32_f16)(dst, src, n);
  else if (st == ZO_DTYPE_BF16)
    (dt == ZO_DTYPE_F32 ? cast_bf16_f32 : cast_bf16_f16)(dst, src, n);
  else
    (dt == ZO_DTYPE_F32 ? cast_f16_f32 : cast_f16_bf16)(dst, src, n);
}

/*
 * F32 -> BF16 with AVX512-BF16: vcvtne2ps2bf16 converts 32 floats into one
 * zmm. It rounds to nearest even and quiets NaN exactly like the integer
 * path, but treats denormal inputs as zero; vectors holding a denormal
 * (vfpclassps category 0x20) are redone with the integer trick, so every
 * level gives the same bits.
 */
__attribute__((target("avx512bf16"))) static inline __m512i cvt32_bf16(__m512 lo, __m512 hi) {
  __m512i r = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  if (__builtin_expect((_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) != 0,
                       0))
    r = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16_bits16(lo))),
                           _mm512_cvtepi32_epi16(bf16_bits16(hi)), 1);
  return r;
}

__attribute__((target("avx512bf16"))) static void cast_f32_bf16_native(uint16_t *dst,
                                                                       const float *src, size_t n) {
  const size_t head = (size_t)cast_head(dst, 2, n); /* up to 31 elements */
  size_t i = 0;
  for (; i < head; i += 16)
    store16(dst + i, ZO_DTYPE_BF16, load16(src + i, ZO_DTYPE_F32, tail_mask(head - i)),
            tail_mask(head - i));
  i = head;
  int nt = n * 2 >= ZO_CAST_NT_BYTES && ((uintptr_t)(dst + i) & 63) == 0;
  if (nt)
    for (; i + 32 <= n; i += 32)
      _mm512_stream_si512((void *)(dst + i),
                          cvt32_bf16(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16)));
  else
    for (; i + 32 <= n; i += 32)
      _mm512_storeu_si512(dst + i,
                          cvt32_bf16(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16)));
  for (; i < n; i += 16)
    store16(dst + i, ZO_DTYPE_BF16, load16(src + i, ZO_DTYPE_F32, tail_mask(n - i)),
            tail_mask(n - i));
  if (nt) _mm_sfence();
}

void zo_cast_kernel_avx512bf16(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n) {
  if (st == ZO_DTYPE_F32 && dt == ZO_DTYPE_BF16)
    cast_f32_bf16_native(dst, src, n);
  else
    zo_cast_kernel_avx512(dst, dt, src, st, n);
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
  __mmask16 den = _mm512_fpclass_ps_mask(f, 0x20); /* denormal, either sign */
  if (__builtin_expect(den != 0, 0))
    r = _mm256_mask_mov_epi16(r, den, _mm512_cvtepi32_epi16(bf16_bits16(f)));
  return r;
}

/* Stochastic rounding to bf16 by r (16-bit random per lane), NaN quieted; result in the low 16 bits of each lane. */
AI __m256i sr_bf16(__m512 f, __m512i r) {
  __m512i x = _mm512_castps_si512(f);
  __m512i t = _mm512_srli_epi32(_mm512_add_epi32(x, r), 16);
  __mmask16 isnan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  t = _mm512_mask_mov_epi32(t, isnan,
                            _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(t);
}

/*
 * zo_sr_hash for the 16 elements starting at global index i, less its last
 * xorshift (y, with h = y ^ (y >> 16)); base = zo_sr_base(high word of seed + i, step).
 */
AI __m512i sr_y16(const zo_adam_job *j, uint32_t base, size_t i) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint64_t key = j->seed + (uint64_t)i;
  uint32_t lo0 = (uint32_t)key;
  __m512i x = _mm512_add_epi32(_mm512_set1_epi32((int)(lo0 + base)), iota);
  if (__builtin_expect(lo0 > 0xfffffff0u, 0)) {
    /* lanes whose low word wrapped past 2^32 belong to the next high word */
    __m512i lo = _mm512_add_epi32(_mm512_set1_epi32((int)lo0), iota);
    __mmask16 wrapped = _mm512_cmplt_epu32_mask(lo, _mm512_set1_epi32((int)lo0));
    uint32_t base1 = zo_sr_base((uint32_t)(key >> 32) + 1u, j->step32);
    x = _mm512_mask_add_epi32(x, wrapped, lo, _mm512_set1_epi32((int)base1));
  }
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)ZO_SR_MUL1));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  return _mm512_mullo_epi32(x, _mm512_set1_epi32((int)ZO_SR_MUL2));
}

AI __m512 load_state16(const void *a, zo_dtype st, size_t i, __mmask16 k) {
  if (st == ZO_DTYPE_F32) return _mm512_maskz_loadu_ps(k, (const float *)a + i);
  return widen_bf16(_mm256_maskz_loadu_epi16(k, (const uint16_t *)a + i));
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

/* One 16-lane fused update at element i; returns the nonfinite lanes of the raw gradient. */
AI __mmask16 fused16(const zo_adam_job *j, zo_dtype gt, zo_dtype st, zo_dtype ot, int has_out,
                     int native, size_t i, __mmask16 k, int full, nt_set nt, uint32_t hi0,
                     uint32_t base0) {
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
  __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), _mm512_set1_ps(c->sqrt_bc2)),
                             _mm512_set1_ps(c->eps));
  pv = _mm512_sub_ps(pv, _mm512_mul_ps(_mm512_set1_ps(c->step_size), _mm512_div_ps(mv, den)));
  st_ps(j->p + i, pv, k, full, nt.p);
  if (st == ZO_DTYPE_F32) {
    st_ps((float *)j->m + i, mv, k, full, nt.m);
    st_ps((float *)j->v + i, vv, k, full, nt.v);
  } else {
    uint32_t hi = (uint32_t)((j->seed + (uint64_t)i) >> 32);
    __m512i y = sr_y16(j, __builtin_expect(hi == hi0, 1) ? base0 : zo_sr_base(hi, j->step32), i);
    /* h = y ^ (y >> 16): its high half is y's, so rv = y >> 16 and rm = (y ^ rv) & 0xffff (one ternary-logic op) */
    __m512i rv = _mm512_srli_epi32(y, 16);
    __m512i rm =
        _mm512_ternarylogic_epi32(y, rv, _mm512_set1_epi32(0xffff), 0x28); /* (a ^ b) & c */
    __m256i m16, v16;
    /* neither m nor v is NaN */
    if (__builtin_expect(_mm512_cmp_ps_mask(mv, vv, _CMP_UNORD_Q) == 0, 1)) {
      /* no NaN: add the random bits and gather the high halves of m and v with one permute */
      const __m512i hi_words =
          _mm512_setr_epi32(0x00030001, 0x00070005, 0x000b0009, 0x000f000d, 0x00130011, 0x00170015,
                            0x001b0019, 0x001f001d, 0x00230021, 0x00270025, 0x002b0029, 0x002f002d,
                            0x00330031, 0x00370035, 0x003b0039, 0x003f003d);
      __m512i both =
          _mm512_permutex2var_epi16(_mm512_add_epi32(_mm512_castps_si512(mv), rm), hi_words,
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
      st_h16((uint16_t *)j->out + i,
             _mm512_cvtps_ph(pv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), k, full, nt.o);
    else
      st_h16((uint16_t *)j->out + i, rne_bf16(pv, native), k, full, nt.o);
  }
  return bad & k;
}

static inline int aligned_to(const void *a, size_t bytes) {
  return ((uintptr_t)a & (bytes - 1)) == 0;
}

/*
 * Range [b, e): a masked head until param is 64-byte aligned, full vectors
 * (streaming the streams that are aligned for it when j->nt allows), a
 * masked tail. gt, st, ot, has_out, native are constants in every instance.
 */
AI int fused_body(const zo_adam_job *jp, size_t b, size_t e, zo_dtype gt, zo_dtype st, zo_dtype ot,
                  int has_out, int native) {
  /* A private copy: stores through the float arrays could alias *jp, which made the compiler reload every
     pointer and constant after each store; the copy's address does not escape, so they stay in registers. */
  const zo_adam_job jl = *jp;
  const zo_adam_job *j = &jl;
  __mmask16 bad = 0;
  size_t i = b;
  nt_set none = {0, 0, 0, 0};
  const uint32_t hi0 = (uint32_t)((j->seed + (uint64_t)b) >> 32);
  const uint32_t base0 = st == ZO_DTYPE_BF16 ? zo_sr_base(hi0, j->step32) : 0;
  size_t head = ((64 - ((uintptr_t)(j->p + i) & 63)) & 63) / 4;
  if (head > e - i) head = e - i;
  if (head) {
    bad |= fused16(j, gt, st, ot, has_out, native, i, (__mmask16)((1u << head) - 1u), 0, none, hi0,
                   base0);
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
  /* ZO_NT_LOOP (adam_internal.h): the store kinds as constants in the common cases */
#define MAIN_LOOP(NTS)         \
  for (; i + 16 <= e; i += 16) \
  bad |= fused16(j, gt, st, ot, has_out, native, i, (__mmask16)0xffff, 1, NTS, hi0, base0)
  ZO_NT_LOOP(MAIN_LOOP, nt, has_out);
#undef MAIN_LOOP
  if (i < e)
    bad |= fused16(j, gt, st, ot, has_out, native, i, tail_mask(e - i), 0, none, hi0, base0);
  if (any_nt) _mm_sfence(); /* order the streaming stores before whatever publishes completion */
  return bad != 0;
}

#define FUSED_VARIANT(name, GT, ST, OT, HAS, NATIVE)          \
  static int name(const zo_adam_job *j, size_t b, size_t e) { \
    return fused_body(j, b, e, GT, ST, OT, HAS, NATIVE);      \
  }
#define FUSED_FOR_GT(gname, GT)                                                 \
  FUSED_VARIANT(fz_##gname##_f32_none, GT, ZO_DTYPE_F32, ZO_DTYPE_F32, 0, 0)    \
  FUSED_VARIANT(fz_##gname##_f32_f32, GT, ZO_DTYPE_F32, ZO_DTYPE_F32, 1, 0)     \
  FUSED_VARIANT(fz_##gname##_f32_f16, GT, ZO_DTYPE_F32, ZO_DTYPE_F16, 1, 0)     \
  FUSED_VARIANT(fz_##gname##_f32_bf16, GT, ZO_DTYPE_F32, ZO_DTYPE_BF16, 1, 0)   \
  FUSED_VARIANT(fz_##gname##_f32_bf16n, GT, ZO_DTYPE_F32, ZO_DTYPE_BF16, 1, 1)  \
  FUSED_VARIANT(fz_##gname##_bf16_none, GT, ZO_DTYPE_BF16, ZO_DTYPE_F32, 0, 0)  \
  FUSED_VARIANT(fz_##gname##_bf16_f32, GT, ZO_DTYPE_BF16, ZO_DTYPE_F32, 1, 0)   \
  FUSED_VARIANT(fz_##gname##_bf16_f16, GT, ZO_DTYPE_BF16, ZO_DTYPE_F16, 1, 0)   \
  FUSED_VARIANT(fz_##gname##_bf16_bf16, GT, ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1, 0) \
  FUSED_VARIANT(fz_##gname##_bf16_bf16n, GT, ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1, 1)
FUSED_FOR_GT(g32, ZO_DTYPE_F32)
FUSED_FOR_GT(g16, ZO_DTYPE_F16)
FUSED_FOR_GT(gb16, ZO_DTYPE_BF16)

typedef int (*fused_fn)(const zo_adam_job *, size_t, size_t);
/* [grad dtype][state: 0 f32, 1 bf16][out: 0 none, 1 f32, 2 f16, 3 bf16, 4 bf16 native] */
#define ROW(g)                                                                      \
  {                                                                                 \
    {fz_##g##_f32_none, fz_##g##_f32_f32, fz_##g##_f32_f16, fz_##g##_f32_bf16,      \
     fz_##g##_f32_bf16n},                                                           \
    {                                                                               \
      fz_##g##_bf16_none, fz_##g##_bf16_f32, fz_##g##_bf16_f16, fz_##g##_bf16_bf16, \
          fz_##g##_bf16_bf16n                                                       \
    }                                                                               \
  }
static const fused_fn k_fused[3][2][5] = {
    [ZO_DTYPE_F32] = ROW(g32),
    [ZO_DTYPE_F16] = ROW(g16),
    [ZO_DTYPE_BF16] = ROW(gb16),
};

int zo_adam_range_avx512(const zo_adam_job *j, size_t b, size_t e) {
  if (e <= b) return 0;
  int o = 0;
  if (j->out)
    o = j->ot == ZO_DTYPE_F32 ? 1 : j->ot == ZO_DTYPE_F16 ? 2 : (zo_simd_has_avx512_bf16() ? 4 : 3);
  return k_fused[j->gt][j->st == ZO_DTYPE_BF16][o](j, b, e);
}

int zo_scan_nonfinite_avx512(const void *g, zo_dtype gt, size_t b, size_t e) {
  __mmask16 bad = 0;
  const size_t gsz = zo_dtype_size(gt);
  size_t i = b;
  if (gt == ZO_DTYPE_F32) {
    for (; i + 16 <= e; i += 16)
      bad |= _mm512_fpclass_ps_mask(_mm512_loadu_ps((const float *)g + i), 0x99);
  } else {
    /* 16-bit floats: exponent all ones <=> (h & 0x7fff) >= limit; 32 lanes per step */
    const __m512i lim = _mm512_set1_epi16(gt == ZO_DTYPE_F16 ? 0x7c00 : 0x7f80);
    const __m512i absm = _mm512_set1_epi16(0x7fff);
    __mmask32 b32 = 0;
    for (; i + 32 <= e; i += 32)
      b32 |= _mm512_cmpge_epu16_mask(_mm512_and_si512(_mm512_loadu_si512((const uint16_t *)g + i),
                                                      absm),
                                     lim);
    bad = b32 != 0;
  }
  for (; i < e; i += 16) {
    __mmask16 k = tail_mask(e - i);
    bad |= _mm512_fpclass_ps_mask(load16((const char *)g + i * gsz, gt, k), 0x99) & k;
  }
  return bad != 0;
}
