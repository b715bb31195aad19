/*
 * half.h - scalar conversions between float32 and the 16-bit floats
 * (bfloat16, IEEE binary16), bit-exact and portable (no _Float16, which
 * some compilers lack on x86 without AVX512-FP16). Shared by cpu_adam/ (the
 * scalar kernels and tails) and comm/comm.c (16-bit reductions staged in
 * fp32), and by the device Adam kernel (gpu/adam_device.cu). Not installed.
 */
#ifndef ZO_HALF_H
#define ZO_HALF_H

#include <stdint.h>
#include <string.h>

/* Host and device: under nvcc every helper here is also a __device__ function (gpu/adam_device.cu uses them). */
#ifndef ZO_HD
#ifdef __CUDACC__
#define ZO_HD __host__ __device__
#else
#define ZO_HD
#endif
#endif

static inline ZO_HD uint32_t zo_f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
static inline ZO_HD float zo_bits_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* float32 -> bfloat16 bits, round to nearest even, NaN quieted (bit 6 set), denormals kept. */
static inline ZO_HD uint16_t zo_f32_to_bf16(float f) {
  uint32_t x = zo_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline ZO_HD float zo_bf16_to_f32(uint16_t h) { return zo_bits_f32((uint32_t)h << 16); }

/* float32 -> binary16 bits, round to nearest even, overflow to inf, NaN quieted (bit 9 set). */
static inline ZO_HD uint16_t zo_f32_to_f16(float f) {
  uint32_t x = zo_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: ties to even go to inf */
  if (ax >= 0x38800000u) {                                  /* >= 2^-14: normal half */
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
static inline ZO_HD float zo_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
  if (e == 0x1f) return zo_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e) return zo_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
  return zo_bits_f32(sign | zo_f32_bits((float)m * 0x1p-24f));
}

#endif /* ZO_HALF_H */
