/*
 * adam_ref.h - inputs and CPU Adam runs shared by test_adam_elem.c (the
 * element function of base/adam_elem.h on the host) and test_adam_device.c
 * (the device kernel): deterministic fp32 masters and gradients, the
 * hyperparameters of step t, and a run of zo_adam_update() as the reference.
 * Header only, one include per test program; not part of the library.
 */
#ifndef ZO_ADAM_REF_H
#define ZO_ADAM_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adam_internal.h"
#include "zoffload/adam.h"

/* A fixed xorshift stream in [-1, 1). */
static inline float ref_rand(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return (float)((double)(*s >> 11) * 0x1p-52 - 1.0);
}

/* Hyperparameters of step @t: AdamW or L2, bias correction on, a scaled gradient (clip / loss scale). */
static inline zo_adam_hparams ref_hparams(int adamw, int64_t t) {
  return (zo_adam_hparams){.lr = 1e-3f * (float)(1.0 + 0.1 * (double)t),
                           .beta1 = 0.9f,
                           .beta2 = 0.999f,
                           .eps = 1e-8f,
                           .weight_decay = 0.01f,
                           .mode = adamw ? ZO_ADAM_MODE_ADAMW : ZO_ADAM_MODE_L2,
                           .bias_correction = 1,
                           .step = t,
                           .grad_scale = 0.75f};
}

/* The gradient of step @t, element i, of dtype @gt into g (varies by step; |g| up to about 4). */
static inline void ref_grad(void *g, zo_dtype gt, size_t n, int64_t t) {
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)t * 0x100000001b3ull;
  for (size_t i = 0; i < n; i++) {
    float f = 4.0f * ref_rand(&s);
    if (gt == ZO_DTYPE_BF16)
      ((uint16_t *)g)[i] = zo_f32_to_bf16(f);
    else if (gt == ZO_DTYPE_F16)
      ((uint16_t *)g)[i] = zo_f32_to_f16(f);
    else
      ((float *)g)[i] = f;
  }
}

static inline void ref_master(float *p, size_t n) {
  uint64_t s = 12345;
  for (size_t i = 0; i < n; i++) p[i] = ref_rand(&s);
}

#endif /* ZO_ADAM_REF_H */
