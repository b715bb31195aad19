/*
 * test_adam_elem.c - the shared element function of base/adam_elem.h
 * (zo_adam_elem_fused: what the device Adam kernel runs per element), called
 * here from host C in a plain loop, against cpu_adam's fused step
 * (zo_adam_update) at every SIMD level this CPU has: 10 steps, fp32 and bf16
 * state, AdamW and L2, fp32/bf16/fp16 gradients and working copies, sizes
 * that are not multiples of any vector width. Tolerance: none, bit-for-bit
 * (both sides are float32 without FMA contraction: cpu_adam is built with
 * -ffp-contract=off and this file includes the same inline function; the
 * device kernel gets the same guarantee from -fmad=false and IEEE div/sqrt,
 * checked on a GPU by test_adam_device). Not the kernel itself.
 */
#include <stdio.h>

#include "adam_elem.h"
#include "adam_ref.h"
#include "zo_test.h"

/* One configuration: @steps steps of both, then every array compared bitwise. */
static void run(size_t n, zo_dtype gt, zo_dtype st, zo_dtype ot, int adamw, zo_simd lvl) {
  const size_t gs = zo_dtype_size(gt), ss = zo_dtype_size(st), os = zo_dtype_size(ot);
  float *p0 = malloc(n * 4), *p1 = malloc(n * 4);
  char *g = malloc(n * gs), *m0 = calloc(n, ss), *v0 = calloc(n, ss), *m1 = calloc(n, ss),
       *v1 = calloc(n, ss);
  char *o0 = malloc(n * os), *o1 = malloc(n * os);
  ref_master(p0, n);
  memcpy(p1, p0, n * 4);
  const uint64_t seed = 1000003;
  for (int64_t t = 1; t <= 10; t++) {
    zo_adam_hparams hp = ref_hparams(adamw, t);
    ref_grad(g, gt, n, t);
    zo_adam_shard sh = {.param = p0,
                        .grad = g,
                        .grad_dtype = gt,
                        .exp_avg = m0,
                        .exp_avg_sq = v0,
                        .state_dtype = st,
                        .param_out = o0,
                        .out_dtype = ot,
                        .n = n,
                        .seed = seed};
    CHECK_OK(zo_adam_update(&hp, &sh, 0, lvl, NULL));
    zo_adam_consts c;
    zo_adam_make_consts(&hp, &c);
    for (size_t i = 0; i < n; i++)
      zo_adam_elem_fused(&c, i, p1, g, gt, m1, v1, st, o1, ot, seed, (uint32_t)t);
  }
  char what[160];
  snprintf(what, sizeof what, "n %zu grad %s state %s out %s %s simd %d", n, zo_dtype_name(gt),
           zo_dtype_name(st), zo_dtype_name(ot), adamw ? "AdamW" : "L2", (int)lvl);
  size_t bad = 0;
  bad += memcmp(p0, p1, n * 4) != 0;
  bad += memcmp(m0, m1, n * ss) != 0;
  bad += memcmp(v0, v1, n * ss) != 0;
  bad += memcmp(o0, o1, n * os) != 0;
  if (bad) {
    size_t i = 0;
    while (i < n && p0[i] == p1[i]) i++;
    FAIL_AT(
        "%s: %zu of master/exp_avg/exp_avg_sq/out differ bitwise (first master difference at %zu: %.9g vs %.9g)",
        what, bad, i, i < n ? p0[i] : 0.0, i < n ? p1[i] : 0.0);
  }
  free(p0), free(p1), free(g), free(m0), free(v0), free(m1), free(v1), free(o0), free(o1);
}

int main(void) {
  static const zo_simd lvls[] = {ZO_SIMD_SCALAR, ZO_SIMD_AVX2, ZO_SIMD_AVX512};
  static const size_t sizes[] = {1, 17, 1000, 4099};
  int levels = 0;
  for (int l = 0; l < 3; l++) {
    if (!zo_simd_supported(lvls[l])) continue;
    levels++;
    for (int k = 0; k < 4; k++)
      for (int adamw = 0; adamw < 2; adamw++) {
        run(sizes[k], ZO_DTYPE_F32, ZO_DTYPE_F32, ZO_DTYPE_F32, adamw, lvls[l]);
        run(sizes[k], ZO_DTYPE_BF16, ZO_DTYPE_F32, ZO_DTYPE_BF16, adamw, lvls[l]);
        run(sizes[k], ZO_DTYPE_BF16, ZO_DTYPE_BF16, ZO_DTYPE_BF16, adamw, lvls[l]);
        run(sizes[k], ZO_DTYPE_F16, ZO_DTYPE_F32, ZO_DTYPE_F16, adamw, lvls[l]);
      }
  }
  printf(
      "test_adam_elem: zo_adam_elem_fused vs zo_adam_update at %d SIMD level(s), 10 steps, 128 configurations "
      "each: tolerance 0 (bitwise)\n",
      levels);
  return zo_test_finish("test_adam_elem");
}
