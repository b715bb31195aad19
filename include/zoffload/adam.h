/*
 * zoffload/adam.h - CPU Adam / AdamW on host-memory shards, gradient norms and
 * dtype casts, with a scalar reference and AVX2 / AVX-512 bodies picked at run
 * time. All calls are synchronous; none keeps a pointer after it returns.
 */
#ifndef ZOFFLOAD_ADAM_H
#define ZOFFLOAD_ADAM_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/dtype.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zo_adam_mode {
  ZO_ADAM_MODE_L2 = 0,    /* Adam: weight decay added to the gradient (torch.optim.Adam) */
  ZO_ADAM_MODE_ADAMW = 1, /* decoupled weight decay (torch.optim.AdamW) */
} zo_adam_mode;

typedef enum zo_simd {
  ZO_SIMD_AUTO = 0,   /* resolve with zo_simd_resolve() */
  ZO_SIMD_SCALAR = 1, /* plain C, the reference */
  ZO_SIMD_AVX2 = 2,   /* AVX2 + FMA + F16C */
  ZO_SIMD_AVX512 = 3, /* AVX-512 F, BW, VL, DQ (+ BF16 for casts when present) */
} zo_simd;

typedef struct zo_adam_hparams {
  float lr;             /* learning rate, >= 0 */
  float beta1, beta2;   /* each in [0, 1) */
  float eps;            /* >= 0, added to the bias-corrected sqrt(v) */
  float weight_decay;   /* >= 0; meaning depends on @mode */
  zo_adam_mode mode;
  int bias_correction;  /* 1: divide by 1-beta^t as torch.optim.Adam/AdamW do; 0: no correction */
  int64_t step;         /* 1-based step count t used for bias correction */
  float grad_scale;     /* every gradient is multiplied by this first (1/loss_scale times clip coefficient); 1.0f for none */
} zo_adam_hparams;

/*
 * zo_adam_step() - one Adam/AdamW update of a shard, in place.
 * @hp:         hyperparameters, read only.
 * @param:      float32[n] master weights, updated in place.
 * @grad:       float32[n], read only.
 * @exp_avg:    float32[n] first moment m, updated in place.
 * @exp_avg_sq: float32[n] second moment v, updated in place.
 * @n:          element count, not bytes; 0 is a no-op (pointers may then be NULL).
 * @simd:       ZO_SIMD_AUTO picks via zo_simd_resolve(), or an explicit level.
 * @n_threads:  OpenMP threads; <= 0 means the OpenMP default. Shards shorter
 *              than about 16 Ki elements per thread use fewer threads.
 * Host memory, any alignment. param, exp_avg and exp_avg_sq must not overlap
 * each other or grad. Per element, with g = grad * grad_scale (float32 math,
 * the same operation order as torch.optim.Adam/AdamW with foreach=False):
 *   L2:    g = g + weight_decay * p        AdamW: p = p * (1 - lr*weight_decay)
 *   m = beta1*m + (1-beta1)*g ;  v = beta2*v + ((1-beta2)*g)*g
 *   denom = sqrt(v)/sqrt(bc2) + eps ;  p = p - (lr/bc1) * (m/denom)
 * with bc1 = 1-beta1^t, bc2 = 1-beta2^t computed in double once per call
 * (bc1 = bc2 = 1 without bias correction). No FMA contraction is used, so the
 * result is bit-identical for every SIMD level and every n_threads.
 * Synchronous: returns when the whole shard is updated. Thread-safe for
 * disjoint shards (each call runs its own OpenMP team).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG when hp is NULL, a pointer is NULL with
 * n > 0, step < 1 with bias correction, a hyperparameter is out of range
 * (lr, eps or weight_decay negative or NaN, a beta outside [0, 1)), or mode or
 * simd is not one of the enum values; ZO_ERR_UNSUPPORTED when an explicit
 * simd level is not supported by this CPU/OS. Message via zo_last_error().
 * Source: Kingma & Ba, Adam (2015); Loshchilov & Hutter, AdamW (2019);
 * PyTorch torch/optim/adam.py _single_tensor_adam.
 */
ZO_API zo_status zo_adam_step(const zo_adam_hparams *hp, float *param, const float *grad, float *exp_avg,
                              float *exp_avg_sq, size_t n, zo_simd simd, int n_threads);

/*
 * zo_adam_step_ex() - zo_adam_step() with a low-precision gradient and a fused
 * copy-out of the updated parameters (one pass over memory instead of two).
 * @grad:        grad_dtype[n]: ZO_DTYPE_F32, ZO_DTYPE_BF16 or ZO_DTYPE_F16
 *               (widened exactly to float32, then scaled by grad_scale).
 * @param_out:   out_dtype[n] or NULL for none; receives the updated param
 *               converted as zo_cast() does (round to nearest even). Must not
 *               overlap the other arrays.
 * @out_dtype:   ZO_DTYPE_F32, ZO_DTYPE_BF16 or ZO_DTYPE_F16; ignored when
 *               param_out is NULL.
 * Everything else, including results and errors, as zo_adam_step(); an
 * unknown dtype gives ZO_ERR_INVALID_ARG.
 */
ZO_API zo_status zo_adam_step_ex(const zo_adam_hparams *hp, float *param, const void *grad, zo_dtype grad_dtype,
                                 float *exp_avg, float *exp_avg_sq, void *param_out, zo_dtype out_dtype, size_t n,
                                 zo_simd simd, int n_threads);

/*
 * zo_grad_sqnorm() - sum of g*g over grad[0..n) in double, for gradient
 * clipping (no grad_scale applied: multiply by scale^2 yourself).
 * @grad:      float32[n] in host memory, any alignment; NULL allowed when n == 0.
 * @sqnorm:    out, the sum (0.0 for n == 0); inf or NaN when *nonfinite is 1.
 * @nonfinite: out, 1 when any element is inf or NaN, else 0. May be NULL.
 * Each float is squared exactly in double and added to one of 16 lane
 * accumulators (element i -> lane i % 16) within fixed 64 Ki-element chunks;
 * lanes and then chunk partials are combined in a fixed order. The result is
 * therefore bit-identical for every n_threads and every SIMD level.
 * Synchronous, thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG when sqnorm is
 * NULL or grad is NULL with n > 0, or simd is not an enum value;
 * ZO_ERR_UNSUPPORTED for an explicit level this CPU lacks;
 * ZO_ERR_OUT_OF_MEMORY when the partials array (8 bytes per chunk) cannot be
 * allocated.
 */
ZO_API zo_status zo_grad_sqnorm(const float *grad, size_t n, zo_simd simd, int n_threads, double *sqnorm,
                                int *nonfinite);

/*
 * zo_cast() - convert n elements between dtypes: F32<->BF16, F32<->F16,
 * BF16<->F16 (through float32, so one rounding) and same-type copies.
 * @dst: dst_type[n]; @src: src_type[n]; must not overlap (except dst == src
 *       with equal types, a no-op). Any alignment. @n: elements, not bytes.
 * F32 -> BF16/F16 round to nearest, ties to even; denormals are kept (not
 * flushed); overflow goes to inf as IEEE does; NaN stays NaN with the sign and
 * the top payload bits kept and the quiet bit set. Widening is exact (a half
 * signalling NaN becomes quiet; a bf16 one is widened bit for bit).
 * Uses the level from zo_simd_resolve(ZO_SIMD_AUTO); all levels give the
 * same bits. @n_threads: <= 0 means the OpenMP default.
 * Synchronous, thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG for a NULL
 * pointer with n > 0 or an unknown dtype.
 * Source: IEEE 754-2008 section 4.3.1 (roundTiesToEven); bfloat16 as in
 * Intel's BF16 whitepaper (2018) without its denormal flushing.
 */
ZO_API zo_status zo_cast(void *dst, zo_dtype dst_type, const void *src, zo_dtype src_type, size_t n, int n_threads);

/*
 * zo_cast_ex() - zo_cast() at an explicit SIMD level (for tests and
 * benchmarks). Adds ZO_ERR_UNSUPPORTED for a level this CPU lacks and
 * ZO_ERR_INVALID_ARG for a simd value outside the enum.
 */
ZO_API zo_status zo_cast_ex(void *dst, zo_dtype dst_type, const void *src, zo_dtype src_type, size_t n,
                            zo_simd simd, int n_threads);

/*
 * zo_simd_best() - best level the CPU and OS support: AVX-512 needs F, BW,
 * VL, DQ in CPUID and OS-enabled opmask/ZMM state in XCR0 (XGETBV); AVX2
 * needs AVX2, FMA, F16C and OS-enabled YMM state. Never returns AUTO.
 * Detected once, thread-safe.
 */
ZO_API zo_simd zo_simd_best(void);

/*
 * zo_simd_supported() - 1 when level @s can run here (SCALAR always; AUTO
 * counts as supported), 0 otherwise, including values outside the enum.
 */
ZO_API int zo_simd_supported(zo_simd s);

/*
 * zo_simd_has_avx512_bf16() - 1 when CPUID reports AVX512_BF16 (and AVX-512
 * is usable), so zo_cast's AVX-512 path uses vcvtneps2bf16.
 */
ZO_API int zo_simd_has_avx512_bf16(void);

/*
 * zo_simd_resolve() - the level a call will use.
 * ZO_SIMD_AUTO: the environment variable ZO_SIMD (scalar|avx2|avx512) forces a
 * level if the CPU has it (otherwise, or for an unknown word, a warning once and
 * then zo_simd_best()); unset or empty: zo_simd_best().
 * An explicit level is returned unchanged when supported; an unsupported or
 * out-of-range level returns ZO_SIMD_AUTO, which zo_adam_step() and friends
 * report as ZO_ERR_UNSUPPORTED naming the level. Reads the environment on every
 * call (do not setenv concurrently). Thread-safe otherwise.
 */
ZO_API zo_simd zo_simd_resolve(zo_simd requested);

/* zo_simd_name() - "auto", "scalar", "avx2", "avx512", or "unknown". Never NULL. */
ZO_API const char *zo_simd_name(zo_simd s);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_ADAM_H */
