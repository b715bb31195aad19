/*
 * adam_elem.h - one element of the fused Adam / AdamW update, shared by CPU
 * Adam (cpu_adam/: the scalar reference and, operation for operation, its
 * SIMD bodies) and the device Adam kernel (gpu/adam_device.cu). Host C and
 * CUDA (__host__ __device__ under nvcc). Not the loops, the dispatch or the
 * argument checks; not installed.
 *
 * The rule (Kingma & Ba, Adam, 2015; AdamW's decoupled decay: Loshchilov &
 * Hutter, 2019), in float32, in this order, with no FMA contraction (cpu_adam
 * is built with -ffp-contract=off, adam_device.cu with -fmad=false; IEEE
 * division and square root on both), so every caller gets the same bits:
 *   g  = grad * grad_scale;  L2: g += wd * p   AdamW: p *= 1 - lr * wd
 *   m  = b1 * m + (1 - b1) * g
 *   v  = b2 * v + ((1 - b2) * g) * g
 *   p -= (lr / bc1) * (m / (sqrt(v) / sqrt(bc2) + eps))
 * bc1 = 1 - b1^t, bc2 = 1 - b2^t (1 without bias correction), folded into the
 * consts once per call (zo_adam_make_consts, cpu_adam/adam.c).
 */
#ifndef ZO_ADAM_ELEM_H
#define ZO_ADAM_ELEM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "half.h"
#include "zoffload/dtype.h"

/* Constants of one update call, already rounded to float32 once. */
typedef struct zo_adam_consts {
  float b1, omb1; /* beta1, 1 - beta1 */
  float b2, omb2; /* beta2, 1 - beta2 */
  float eps;
  float step_size; /* lr / bc1 */
  float sqrt_bc2;  /* sqrt(bc2) */
  float wd;        /* L2 mode: weight_decay added to g */
  float decay;     /* AdamW mode: 1 - lr*weight_decay */
  float grad_scale;
  int l2; /* 1: L2 mode, 0: AdamW */
} zo_adam_consts;

/*
 * One element of the update (the rule above). Every SIMD body performs
 * exactly these float32 operations in this order, which makes all levels,
 * and the device kernel, bit-identical.
 */
static inline ZO_HD void zo_adam_elem(const zo_adam_consts *c, float *p, float g, float *m,
                                      float *v) {
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

/* MurmurHash3's 32-bit finalizer (used once per vector / per 2^32 keys, not per element). */
static inline ZO_HD uint32_t zo_fmix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}
/*
 * The stochastic-rounding hash of zoffload/adam.h. zo_sr_base() mixes the
 * key's high word and the step (fmix32, once per vector: a full avalanche, so
 * every step gets an unrelated offset); per element two multiply-xorshift
 * rounds remain (with one, neighbouring elements' bits were correlated:
 * -0.42 between adjacent elements' v bits). Low 16 bits round m, high 16 v.
 */
#define ZO_SR_MUL1 0x9e3779b1u
#define ZO_SR_MUL2 0x2c1b3c6du
static inline ZO_HD uint32_t zo_sr_base(uint32_t key_hi, uint32_t step32) {
  return zo_fmix32(0x9e3779b9u * key_hi + 0x85ebca77u * step32);
}
static inline ZO_HD uint32_t zo_sr_mix(uint32_t x) {
  x *= ZO_SR_MUL1;
  x ^= x >> 15;
  x *= ZO_SR_MUL2;
  return x ^ (x >> 16);
}
static inline ZO_HD uint32_t zo_sr_hash(uint64_t key, uint32_t step32) {
  return zo_sr_mix((uint32_t)key + zo_sr_base((uint32_t)(key >> 32), step32));
}
/* float32 -> bf16 with stochastic rounding by r in [0, 65536); NaN quieted as zo_f32_to_bf16(). */
static inline ZO_HD uint16_t zo_f32_to_bf16_sr(float f, uint32_t r) {
  uint32_t x = zo_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + r) >> 16);
}

/* Element i of an array of dtype @t (F32, F16, BF16) as float32 (exact), and back (round to nearest even). */
static inline ZO_HD float zo_elem_load(const void *a, zo_dtype t, size_t i) {
  if (t == ZO_DTYPE_BF16) return zo_bf16_to_f32(((const uint16_t *)a)[i]);
  if (t == ZO_DTYPE_F16) return zo_f16_to_f32(((const uint16_t *)a)[i]);
  return ((const float *)a)[i];
}
static inline ZO_HD void zo_elem_store(void *a, zo_dtype t, size_t i, float f) {
  if (t == ZO_DTYPE_BF16)
    ((uint16_t *)a)[i] = zo_f32_to_bf16(f);
  else if (t == ZO_DTYPE_F16)
    ((uint16_t *)a)[i] = zo_f32_to_f16(f);
  else
    ((float *)a)[i] = f;
}

/*
 * The whole fused step of element @i, as cpu_adam's scalar range kernel and
 * the device kernel run it: p (fp32 master), the gradient g (dtype @gt), the
 * moments m and v (@st: F32, or BF16 stored with stochastic rounding keyed by
 * seed + i and @step32), and, when @out is not NULL, the working copy out[i]
 * (@ot, round to nearest even) written from the new p in the same pass.
 * Returns 1 when the gradient element is inf or NaN (the update is applied
 * anyway; callers that skip scan first).
 */
static inline ZO_HD int zo_adam_elem_fused(const zo_adam_consts *c, size_t i, float *p,
                                           const void *g, zo_dtype gt, void *m, void *v,
                                           zo_dtype st, void *out, zo_dtype ot, uint64_t seed,
                                           uint32_t step32) {
  float gf = zo_elem_load(g, gt, i);
  int bad = (zo_f32_bits(gf) & 0x7fffffffu) >= 0x7f800000u;
  float pp = p[i];
  float mm = st == ZO_DTYPE_BF16 ? zo_bf16_to_f32(((const uint16_t *)m)[i]) : ((const float *)m)[i];
  float vv = st == ZO_DTYPE_BF16 ? zo_bf16_to_f32(((const uint16_t *)v)[i]) : ((const float *)v)[i];
  zo_adam_elem(c, &pp, gf, &mm, &vv);
  p[i] = pp;
  if (st == ZO_DTYPE_BF16) {
    uint32_t h = zo_sr_hash(seed + i, step32);
    ((uint16_t *)m)[i] = zo_f32_to_bf16_sr(mm, h & 0xffffu);
    ((uint16_t *)v)[i] = zo_f32_to_bf16_sr(vv, h >> 16);
  } else {
    ((float *)m)[i] = mm;
    ((float *)v)[i] = vv;
  }
  if (out) zo_elem_store(out, ot, i, pp);
  return bad;
}

#endif /* ZO_ADAM_ELEM_H */
