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

/* Elements per sqnorm chunk (fixed, so the reduction order never depends on threads); lanes per
 * chunk. */
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

/* ================================================================ fused update (zo_adam_update,
 * the pool) */

/* Everything one fused update needs; the range kernels read it and update [b, e) of the shard. */
typedef struct zo_adam_job {
  zo_adam_consts c;
  float *p;      /* float32[n] */
  const void *g; /* gt[n] */
  void *m, *v;   /* st[n] each */
  void *out;     /* ot[n] or NULL */
  zo_dtype gt, st, ot;
  uint64_t seed;   /* bf16 state rounding: key = i + seed */
  uint32_t step32; /* (uint32)hp->step */
  /* streams that may use non-temporal stores: ZO_NT_STATE (p, m, v), ZO_NT_OUT (param_out) */
  unsigned nt;
} zo_adam_job;

enum { ZO_NT_STATE = 1u, ZO_NT_OUT = 2u };

/*
 * Non-temporal stores. ZO_ADAM_NT_DEFAULT is what every update streams unless
 * ZO_ADAM_NO_NT_STORES clears it: param_out. Whether p, m, v stream
 * (ZO_NT_STATE) is not fixed here: ZO_ADAM_STORES=nt sets it, and by default
 * each pool measures it once (pool.c, "Store probe"; adam_stores.h), because
 * it is a property of the machine: the history below found no gain on this
 * project's Zen 5, and issue 40 found a 2.7x one on a Zen 3. Measured
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
 * Issue 40 (part 5): a user's AMD EPYC without AVX-512 (Zen 2/3 class), 2^28
 * at 2 threads: zo-adambench's p32_g32_s32 roofline 35.98 GB/s with
 * streaming stores, 13.43 GB/s with regular ones; adamw_fp32g (which then
 * streamed nothing) 13.21 GB/s = 36.7%, adamw_fp32g_nont 13.09, adamw_bf16g_out
 * 54.8% of its roofline. The kernel ran at the regular-store roofline: the
 * loss was the store kind, so p, m, v now follow the pool's probe. On the
 * 2-core Zen 5 (zo-adambench --sizes 2^28 --threads 2 --reps 5, three rounds
 * alternating the build before the probe and the one with it, load average
 * ~2.2 = the benchmark's own two threads; %roof of the best roofline, the
 * per-round paired figure in brackets):
 *   AVX2    roofline p32_g32_s32 regular/nt 57.5/56.6, 65.9/63.6, 65.8/64.4 GB/s;
 *           probe: nt 0.99x, 0.95x, 0.97x regular (lowest pair 0.92-0.93x), 0 pairs dropped -> regular
 *           adamw_fp32g      before 101.5 (101.4), 99.4 (99.7), 100.3 (100.1)
 *                            after  100.6 (100.0), 99.3 (99.8), 100.3 (100.4)
 *           adamw_bf16g_out  before 100.3 (100.1), 102.2 (101.7), 101.2 (101.2)
 *                            after  101.1 (102.0), 101.2 (101.0), 101.6 (101.7)
 *   AVX-512 roofline regular/nt 66.0/63.3, 66.1/63.4, 65.6/62.7 GB/s;
 *           probe: nt 0.94x, 0.99x, 0.97x regular (lowest 0.92-0.95x), 0 dropped -> regular
 *           adamw_fp32g      before 100.8 (101.0), 100.1 (100.1), 99.6 (99.7)
 *                            after  99.9 (100.1), 99.5 (99.3), 99.2 (99.4)
 *           adamw_bf16g_out  before 102.6 (102.7), 102.9 (103.0), 102.4 (102.5)
 *                            after  102.9 (103.0), 102.9 (102.6), 102.2 (102.3)
 * so here the probe keeps regular stores and nothing changes. Forcing
 * ZO_ADAM_STORES=nt (one run each): AVX2 adamw_fp32g 99.5% (98.4) against
 * adamw_fp32g_nont 100.2% (99.0); AVX-512 97.9% (98.3) against 100.1% (99.7),
 * adamw_bf16g_out 101.3% (101.5) against 102.2-102.9% with param_out only:
 * streaming p, m, v costs 1-2% here (3-5% in the roofline kernels), what a
 * wrong probe would cost. On the Zen 3 the probe's pairs should read about
 * 35.98 / 13.43 = 2.7x (its kernel tracked the regular-store roofline), far
 * above the 1.15x median the probe needs; not measured there yet.
 */
#ifndef ZO_ADAM_NT_DEFAULT
#define ZO_ADAM_NT_DEFAULT (ZO_NT_OUT)
#endif

/* Which streams of a range kernel's main loop use non-temporal stores (1) or regular ones (0). */
typedef struct zo_nt_set {
  int p, m, v, o;
} nt_set;

/*
 * ZO_NT_LOOP(LOOP, nt, has_out) - run LOOP(kinds) with the store kinds as
 * compile-time constants in the common cases (none; param_out only, the
 * default; all of p, m, v and param_out), so the vector loop carries no
 * per-store tests; any other mix runs LOOP(nt). Shared by the AVX2 and
 * AVX-512 range kernels, whose LOOP is their own vector body.
 */
#define ZO_NT_LOOP(LOOP, nt, has_out)                            \
  do {                                                           \
    const nt_set none_ = {0, 0, 0, 0}, out_only_ = {0, 0, 0, 1}; \
    const nt_set all_ = {1, 1, 1, (has_out)};                    \
    if (!((nt).p | (nt).m | (nt).v | (nt).o))                    \
      LOOP(none_);                                               \
    else if (!(nt).p && !(nt).m && !(nt).v && (nt).o)            \
      LOOP(out_only_);                                           \
    else if ((nt).p && (nt).m && (nt).v && (nt).o == (has_out))  \
      LOOP(all_);                                                \
    else                                                         \
      LOOP(nt);                                                  \
  } while (0)

/* Range kernels: update elements [b, e) of the job's shard; return 1 if any grad element there is
 * inf/NaN. */
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
zo_status zo_adam_job_init(const char *what, const zo_adam_hparams *hp, const zo_adam_shard *sh,
                           unsigned flags, zo_adam_job *j);
zo_adam_range_fn zo_adam_range_for(zo_simd lvl);
zo_scan_fn zo_scan_for(zo_simd lvl);
zo_sqnorm_fn zo_sqnorm_for(zo_simd lvl);
/* Sum of squares of chunk k (ZO_SQNORM_CHUNK elements, the last may be short) of a grad of any
 * dtype, lanes summed. */
double zo_sqnorm_chunk(zo_sqnorm_fn fn, const void *g, zo_dtype gt, size_t n, size_t k);
/* zo_grad_sqnorm_ex() with the caller's name in messages (zo_grad_sqnorm() shares it). */
zo_status zo_sqnorm_run(const char *what, const void *grad, zo_dtype grad_dtype, size_t n,
                        zo_simd simd, int n_threads, double *sqnorm, int *nonfinite);
/* Combine chunk partials in order into the final sum. */
double zo_sqnorm_combine(const double *part, size_t nchunks);

#endif /* ZO_ADAM_INTERNAL_H */
