/*
 * adam_internal.h - per-call constants, scalar element helpers and the kernel
 * entry points shared by adam.c (dispatch, scalar reference) and the SIMD
 * bodies. Not installed. The SIMD kernels here do no argument checking.
 */
#ifndef ZO_ADAM_INTERNAL_H
#define ZO_ADAM_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "zoffload/adam.h"

/* Constants of one zo_adam_step call, already rounded to float32 once. */
typedef struct zo_adam_consts {
  float b1, omb1;     /* beta1, 1 - beta1 */
  float b2, omb2;     /* beta2, 1 - beta2 */
  float eps;
  float step_size;    /* lr / bc1 */
  float sqrt_bc2;     /* sqrt(bc2) */
  float wd;           /* L2 mode: weight_decay added to g */
  float decay;        /* AdamW mode: 1 - lr*weight_decay */
  float grad_scale;
  int l2;             /* 1: L2 mode, 0: AdamW */
} zo_adam_consts;

/* Elements per sqnorm chunk (fixed, so the reduction order never depends on threads). */
#define ZO_SQNORM_CHUNK ((size_t)65536)
#define ZO_SQNORM_LANES 16

/*
 * One element of the update. Every SIMD body performs exactly these float32
 * operations in this order (no FMA; the module is built with
 * -ffp-contract=off), which makes all levels bit-identical.
 */
static inline void zo_adam_elem(const zo_adam_consts *c, float *p, float g, float *m, float *v) {
  float pp = *p;
  float gg = g * c->grad_scale;
  if (c->l2)
    gg = gg + c->wd * pp;
  else
    pp = pp * c->decay;
  float mm = c->b1 * *m + c->omb1 * gg;
  float vv = c->b2 * *v + (c->omb2 * gg) * gg;
  float den = sqrtf(vv) / c->sqrt_bc2 + c->eps;
  pp = pp - c->step_size * (mm / den);
  *p = pp;
  *m = mm;
  *v = vv;
}

static inline uint32_t zo_f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
static inline float zo_bits_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* float32 -> bfloat16 bits, round to nearest even, NaN quieted (bit 6 set), denormals kept. */
static inline uint16_t zo_f32_to_bf16(float f) {
  uint32_t x = zo_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline float zo_bf16_to_f32(uint16_t h) { return zo_bits_f32((uint32_t)h << 16); }

/* float32 -> binary16 bits, round to nearest even, overflow to inf, NaN quieted (bit 9 set). */
static inline uint16_t zo_f32_to_f16(float f) {
  uint32_t x = zo_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: ties to even go to inf */
  if (ax >= 0x38800000u) {                                    /* >= 2^-14: normal half */
    uint32_t r = (ax - 0x38000000u) + 0xfffu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25 (a tie at 2^-25 goes to even 0) */
  uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e; /* 14..24: units of 2^-24 */
  uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

/* binary16 bits -> float32, exact; a signalling NaN becomes quiet as F16C does. */
static inline float zo_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
  if (e == 0x1f) return zo_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e) return zo_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
  return zo_bits_f32(sign | zo_f32_bits((float)m * 0x1p-24f));
}

/* Load element i of a grad array of dtype @t as float (exact). */
static inline float zo_load_as_f32(const void *a, zo_dtype t, size_t i) {
  switch (t) {
    case ZO_DTYPE_BF16: return zo_bf16_to_f32(((const uint16_t *)a)[i]);
    case ZO_DTYPE_F16: return zo_f16_to_f32(((const uint16_t *)a)[i]);
    default: return ((const float *)a)[i];
  }
}
static inline void zo_store_from_f32(void *a, zo_dtype t, size_t i, float f) {
  switch (t) {
    case ZO_DTYPE_BF16: ((uint16_t *)a)[i] = zo_f32_to_bf16(f); break;
    case ZO_DTYPE_F16: ((uint16_t *)a)[i] = zo_f32_to_f16(f); break;
    default: ((float *)a)[i] = f; break;
  }
}

/*
 * Adam kernels: update [0, n) of the arrays (callers pass offset pointers).
 * grad has dtype gt; out (may be NULL) receives the new param as ot.
 */
typedef void (*zo_adam_kernel_fn)(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v,
                                  void *out, zo_dtype ot, size_t n);
void zo_adam_kernel_scalar(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v,
                           void *out, zo_dtype ot, size_t n);
void zo_adam_kernel_avx2(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v, void *out,
                         zo_dtype ot, size_t n);
void zo_adam_kernel_avx512(const zo_adam_consts *c, float *p, const void *g, zo_dtype gt, float *m, float *v,
                           void *out, zo_dtype ot, size_t n);

/* sqnorm: add g[i]^2 (exact in double) to acc[i % 16]; n < ZO_SQNORM_CHUNK, acc preset by caller. */
typedef void (*zo_sqnorm_fn)(const float *g, size_t n, double acc[ZO_SQNORM_LANES]);
void zo_sqnorm_lanes_scalar(const float *g, size_t n, double acc[ZO_SQNORM_LANES]);
void zo_sqnorm_lanes_avx2(const float *g, size_t n, double acc[ZO_SQNORM_LANES]);
void zo_sqnorm_lanes_avx512(const float *g, size_t n, double acc[ZO_SQNORM_LANES]);

/* Casts between different dtypes (never equal): convert [0, n). bf16_native: use AVX512-BF16. */
typedef void (*zo_cast_fn)(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_scalar(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_avx2(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_avx512(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_avx512bf16(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);

#endif /* ZO_ADAM_INTERNAL_H */
