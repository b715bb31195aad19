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

#include "adam_elem.h"
#include "half.h"
#include "zoffload/adam.h"

/* zo_adam_consts and zo_adam_elem (one element of the update, no FMA: the module is built with
 * -ffp-contract=off): base/adam_elem.h, shared with the device kernel (gpu/adam_device.cu). */

/* Elements per sqnorm chunk (fixed, so the reduction order never depends on threads); lanes per chunk. */
#define ZO_SQNORM_CHUNK ((size_t)65536)
#define ZO_SQNORM_LANES 16

/* zo_f32_bits, zo_bits_f32 and the scalar bf16/fp16 conversions: base/half.h */

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
 * sqnorm: add g[i]^2 (g widened exactly from dtype gt, squared exactly in
 * double) to acc[i % 16]; n <= ZO_SQNORM_CHUNK, acc preset by the caller.
 */
typedef void (*zo_sqnorm_fn)(const void *g, zo_dtype gt, size_t n, double acc[ZO_SQNORM_LANES]);
void zo_sqnorm_lanes_scalar(const void *g, zo_dtype gt, size_t n, double acc[ZO_SQNORM_LANES]);
void zo_sqnorm_lanes_avx2(const void *g, zo_dtype gt, size_t n, double acc[ZO_SQNORM_LANES]);
void zo_sqnorm_lanes_avx512(const void *g, zo_dtype gt, size_t n, double acc[ZO_SQNORM_LANES]);

/*
 * AVX-512 casts stream dst (non-temporal stores) when one kernel call writes
 * at least this many bytes: beyond a core's L2 the lines would be evicted
 * before reuse anyway, and streaming saves their read-for-ownership (in
 * zo-adambench's cast roofline, 2 threads at 2^28: 57.9 GB/s streamed vs
 * 43.1 GB/s regular).
 */
#define ZO_CAST_NT_BYTES ((size_t)4 << 20)

/* Casts between different dtypes (never equal): convert [0, n). bf16_native: use AVX512-BF16. */
typedef void (*zo_cast_fn)(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_scalar(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_avx2(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_avx512(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);
void zo_cast_kernel_avx512bf16(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n);

/* ================================================================ fused update (zo_adam_update, the pool) */

/* Everything one fused update needs; the range kernels read it and update [b, e) of the shard. */
typedef struct zo_adam_job {
  zo_adam_consts c;
  float *p;           /* float32[n] */
  const void *g;      /* gt[n] */
  void *m, *v;        /* st[n] each */
  void *out;          /* ot[n] or NULL */
  zo_dtype gt, st, ot;
  uint64_t seed;      /* bf16 state rounding: key = i + seed */
  uint32_t step32;    /* (uint32)hp->step */
  unsigned nt;        /* streams that may use non-temporal stores: ZO_NT_STATE (p, m, v), ZO_NT_OUT (param_out) */
} zo_adam_job;

enum { ZO_NT_STATE = 1u, ZO_NT_OUT = 2u };

/*
 * Non-temporal stores by default (ZO_ADAM_NO_NT_STORES clears them). Measured
 * on the 2-core EPYC (Zen 5, AVX-512 + BF16) with the AVX-512 kernel, 64-byte
 * aligned arrays, the pool, medians of 9-11 interleaved repetitions. The
 * machine was shared with other jobs (load average 6-8), so the spread is
 * wide (quartiles in the notes of issue 3); ms per update:
 *   2^26, 1 thread   fp32 grad: none 48.7, state 49.8
 *                    bf16 grad + bf16 out: none 67.3, state 71.8, out 64.5, both 61.0
 *                    + bf16 states: none 76.6, state 84.7, out 77.4, both 79.9
 *   2^26, 2 threads  fp32 grad: none 87.1, state 97.0
 *                    bf16 grad + bf16 out: none 86.6, state 77.5, out 71.7, both 81.0
 *   2^27, 1 thread   fp32 grad: none 195.7, state 206.8
 *                    bf16 grad + bf16 out: none 169.7, state 178.6, out 178.2, both 189.9
 *   2^27, 2 threads  fp32 grad: none 217.4, state 218.9
 *                    bf16 grad + bf16 out: none 206.3, state 176.3, out 145.9, both 202.4
 *                    + bf16 states: none 147.7, state 187.3, out 155.5, both 152.0
 * Streaming p, m, v never helped clearly (their lines were just read, so no
 * read-for-ownership is saved) and was often slower; streaming the
 * write-only param_out saves its read-for-ownership (2 of 28 bytes per
 * parameter for bf16) and was faster in 3 of the 5 comparisons, clearly so
 * with 2 threads. Default: stream param_out only. Re-measure on a quiet machine.
 * Issue 3 follow-up, bf16 states at 2^28 with 2 threads (load average 8-15,
 * three interleaved rounds): streaming p, m, v as well gave per-round paired
 * bf16-state/fp32-state ratios of 1.41, 1.27, 1.02 against 1.27, 1.33, 1.14
 * for param_out only: no clear difference, so the default stays.
 */
#ifndef ZO_ADAM_NT_DEFAULT
#define ZO_ADAM_NT_DEFAULT (ZO_NT_OUT)
#endif

/* Range kernels: update elements [b, e) of the job's shard; return 1 if any grad element there is inf/NaN. */
typedef int (*zo_adam_range_fn)(const zo_adam_job *j, size_t b, size_t e);
int zo_adam_range_scalar(const zo_adam_job *j, size_t b, size_t e);
int zo_adam_range_avx2(const zo_adam_job *j, size_t b, size_t e);
int zo_adam_range_avx512(const zo_adam_job *j, size_t b, size_t e);

/* Read-only pre-scan: 1 if any of g[b, e) (dtype gt) is inf/NaN. */
typedef int (*zo_scan_fn)(const void *g, zo_dtype gt, size_t b, size_t e);
int zo_scan_nonfinite_scalar(const void *g, zo_dtype gt, size_t b, size_t e);
int zo_scan_nonfinite_avx2(const void *g, zo_dtype gt, size_t b, size_t e);
int zo_scan_nonfinite_avx512(const void *g, zo_dtype gt, size_t b, size_t e);

/* zo_fmix32, zo_sr_base/mix/hash and zo_f32_to_bf16_sr: base/adam_elem.h */

/* Shared by adam.c, fused.c and pool.c. */
zo_status zo_adam_check_hparams(const zo_adam_hparams *hp);
void zo_adam_make_consts(const zo_adam_hparams *hp, zo_adam_consts *c);
zo_status zo_adam_resolve_simd(const char *what, zo_simd simd, zo_simd *out);
/* Validate (hp, sh, flags) and fill *j; lvl is an already-resolved level. */
zo_status zo_adam_job_init(const char *what, const zo_adam_hparams *hp, const zo_adam_shard *sh, unsigned flags,
                           zo_adam_job *j);
zo_adam_range_fn zo_adam_range_for(zo_simd lvl);
zo_scan_fn zo_scan_for(zo_simd lvl);
zo_sqnorm_fn zo_sqnorm_for(zo_simd lvl);
/* Sum of squares of chunk k (ZO_SQNORM_CHUNK elements, the last may be short) of a grad of any dtype, lanes summed. */
double zo_sqnorm_chunk(zo_sqnorm_fn fn, const void *g, zo_dtype gt, size_t n, size_t k);
/* zo_grad_sqnorm_ex() with the caller's name in messages (zo_grad_sqnorm() shares it). */
zo_status zo_sqnorm_run(const char *what, const void *grad, zo_dtype grad_dtype, size_t n, zo_simd simd,
                        int n_threads, double *sqnorm, int *nonfinite);
/* Combine chunk partials in order into the final sum. */
double zo_sqnorm_combine(const double *part, size_t nchunks);

#endif /* ZO_ADAM_INTERNAL_H */
