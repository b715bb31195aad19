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
  float lr;           /* learning rate, >= 0 */
  float beta1, beta2; /* each in [0, 1) */
  float eps;          /* >= 0, added to the bias-corrected sqrt(v) */
  float weight_decay; /* >= 0; meaning depends on @mode */
  zo_adam_mode mode;
  int bias_correction; /* 1: divide by 1-beta^t as torch.optim.Adam/AdamW do; 0: no correction */
  int64_t step;        /* 1-based step count t used for bias correction */
  /* every gradient is multiplied by this first (1/loss_scale times clip coefficient); 1.0f for
   * none */
  float grad_scale;
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
 * Runs the fused kernels of zo_adam_update() (fp32 states) on contiguous
 * per-thread ranges, so its bits equal zo_adam_update()'s.
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
ZO_API zo_status zo_adam_step(const zo_adam_hparams *hp, float *param, const float *grad,
                              float *exp_avg, float *exp_avg_sq, size_t n, zo_simd simd,
                              int n_threads);

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
ZO_API zo_status zo_adam_step_ex(const zo_adam_hparams *hp, float *param, const void *grad,
                                 zo_dtype grad_dtype, float *exp_avg, float *exp_avg_sq,
                                 void *param_out, zo_dtype out_dtype, size_t n, zo_simd simd,
                                 int n_threads);

/*
 * zo_grad_sqnorm() - sum of g*g over grad[0..n) in double, for gradient
 * clipping (no grad_scale applied: multiply by scale^2 yourself).
 * @grad:      float32[n] in host memory, any alignment; NULL allowed when n == 0.
 * @sqnorm:    out, the sum (0.0 for n == 0); inf or NaN when *nonfinite is 1.
 * @nonfinite: out, 1 when any element is inf or NaN, else 0. May be NULL.
 * Each float is squared exactly in double and added to one of 16 lane
 * accumulators (element i -> lane i % 16) within fixed 64 Ki-element chunks;
 * lanes (pairwise: lane k + lane k+8, then halves again) and then chunk
 * partials (in chunk order) are combined in a fixed order. The SIMD bodies
 * add with FMA, which rounds once exactly as add(acc, x*x) does because x*x
 * is exact in double. The result is therefore bit-identical for every
 * n_threads and every SIMD level.
 * Synchronous, thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG when sqnorm is
 * NULL or grad is NULL with n > 0, or simd is not an enum value;
 * ZO_ERR_UNSUPPORTED for an explicit level this CPU lacks;
 * ZO_ERR_OUT_OF_MEMORY when the partials array (8 bytes per chunk) cannot be
 * allocated.
 */
ZO_API zo_status zo_grad_sqnorm(const float *grad, size_t n, zo_simd simd, int n_threads,
                                double *sqnorm, int *nonfinite);

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
 * same bits. @n_threads: <= 0 means the OpenMP default. The AVX-512 path
 * writes dst with non-temporal stores when one thread's part is 4 MiB of dst
 * or more (dst is then not left in the caches).
 * Synchronous, thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG for a NULL
 * pointer with n > 0 or an unknown dtype.
 * Source: IEEE 754-2008 section 4.3.1 (roundTiesToEven); bfloat16 as in
 * Intel's BF16 whitepaper (2018) without its denormal flushing.
 */
ZO_API zo_status zo_cast(void *dst, zo_dtype dst_type, const void *src, zo_dtype src_type, size_t n,
                         int n_threads);

/*
 * zo_cast_ex() - zo_cast() at an explicit SIMD level (for tests and
 * benchmarks). Adds ZO_ERR_UNSUPPORTED for a level this CPU lacks and
 * ZO_ERR_INVALID_ARG for a simd value outside the enum.
 */
ZO_API zo_status zo_cast_ex(void *dst, zo_dtype dst_type, const void *src, zo_dtype src_type,
                            size_t n, zo_simd simd, int n_threads);

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

/* ================================================================ fused update (issue 3) */

/*
 * zo_adam_shard - one shard to update. All arrays are host memory, n elements
 * each, any alignment (64-byte aligned is fastest: non-temporal stores are only
 * used on streams that are 64-byte aligned after the first few elements), and
 * must not overlap each other.
 */
typedef struct zo_adam_shard {
  float *param;               /* float32[n] fp32 master weights, updated in place */
  const void *grad;           /* grad_dtype[n], read only */
  zo_dtype grad_dtype;        /* ZO_DTYPE_F32, ZO_DTYPE_BF16 or ZO_DTYPE_F16 (widened exactly) */
  void *exp_avg, *exp_avg_sq; /* state_dtype[n] each: first moment m, second moment v, in place */
  /* ZO_DTYPE_F32 (default, as DeepSpeed) or ZO_DTYPE_BF16 (stochastic rounding) */
  zo_dtype state_dtype;
  /* out_dtype[n] copy of the updated weights (the copy the GPU fetches next); NULL: none */
  void *param_out;
  /* ZO_DTYPE_BF16, ZO_DTYPE_F16 or ZO_DTYPE_F32; ignored when param_out is NULL */
  zo_dtype out_dtype;
  size_t n;      /* elements, not bytes; 0 is a no-op */
  uint64_t seed; /* bf16 states only: added to the element index in the rounding hash (give every
                                 shard of a model a distinct seed, e.g. its offset in the flat parameter space) */
} zo_adam_shard;

enum {
  /* If any gradient element is inf/NaN: write NOTHING (param, m, v, param_out
   * untouched) and report it. Costs one read-only pre-scan of grad. */
  ZO_ADAM_SKIP_NONFINITE = 1u << 0,
  /* Force regular stores for every array (for measurements; overrides
   * ZO_ADAM_STORES). Otherwise the AVX-512 and AVX2 kernels stream
   * (non-temporal stores) param_out, the write-only stream, where it saves the
   * read-for-ownership, and stream param, m and v as the environment variable
   * ZO_ADAM_STORES says (read when a pool is created, and on every
   * zo_adam_update() / zo_adam_step_ex() call):
   *   auto (default, or unset): a pool measures which kind is faster once, on
   *         its own threads, during its first 64-byte aligned update tasks far
   *         bigger than its last-level caches, or at zo_adam_pool_probe_stores()
   *         (zo_adam_pool_describe() and zo_adam_pool_stores_nt() report the
   *         outcome); regular stores until then, and always outside pools;
   *   regular: regular stores for param, m and v;
   *   nt:      streaming stores for param, m and v;
   *   probe:   as auto, but the pool probes on its first update task whatever
   *            its size (tests of the probe; the timings then mean nothing).
   * Only 64-byte aligned streams are streamed. Store kinds never change a
   * result bit. Numbers in cpu_adam/adam_internal.h and cpu_adam/pool.c
   * ("Store probe"). The scalar kernel never streams. */
  ZO_ADAM_NO_NT_STORES = 1u << 1,
};

typedef struct zo_adam_result {
  int nonfinite; /* 1 if any gradient element was inf/NaN (fused into the update pass; with SKIP_NONFINITE found by the pre-scan) */
  int skipped;   /* 1 if nothing was written because of ZO_ADAM_SKIP_NONFINITE */
} zo_adam_result;

/*
 * zo_adam_update() - fused one-pass Adam/AdamW update of one shard on the
 * calling thread: reads param, grad, m, v; writes param, m, v and, when
 * sh->param_out is set, the updated weights in out_dtype. Nothing else is
 * touched.
 * @hp:    hyperparameters (as zo_adam_step(); grad_scale = 1/loss_scale times
 *         the clip coefficient, applied to the widened gradient first).
 * @sh:    the shard (see zo_adam_shard).
 * @flags: ZO_ADAM_SKIP_NONFINITE, ZO_ADAM_NO_NT_STORES, or 0.
 * @simd:  ZO_SIMD_AUTO (zo_simd_resolve(), honouring ZO_SIMD) or a level.
 * @res:   out, may be NULL; nonfinite = 1 when any grad element (before
 *         scaling) is inf or NaN; skipped = 1 when SKIP_NONFINITE left
 *         everything untouched. Without SKIP the update still runs (inf/NaN
 *         then propagate into param, m and v as in PyTorch).
 * Per element the float32 operations and their order are exactly those of
 * zo_adam_step() (no FMA contraction), so fp32-state results are bit-identical
 * to zo_adam_step_ex() and across SIMD levels and thread counts. The copy-out
 * is round-to-nearest-even of the updated fp32 weight, bit for bit as zo_cast().
 * bf16 states: m and v are widened exactly, the update is computed in float32
 * (the param update uses the unrounded float32 m and v), and the new m and v
 * are stored as bf16 with STOCHASTIC rounding: with key = i + seed (uint64,
 * i the element index within the shard), t = (uint32)hp->step, all
 * arithmetic mod 2^32:
 *   s = fmix32(0x9e3779b9*(uint32)(key>>32) + 0x85ebca77*t)
 *       (MurmurHash3 finalizer: x^=x>>16; x*=0x85ebca6b; x^=x>>13;
 *        x*=0xc2b2ae35; x^=x>>16; computed once per vector, not per element)
 *   y = ((uint32)key + s) * 0x9e3779b1 ;  y ^= y >> 15 ;  y *= 0x2c1b3c6d
 *   h = y ^ (y >> 16)
 *   m16 = (bits(m) + (h & 0xffff)) >> 16,  v16 = (bits(v) + (h >> 16)) >> 16
 * Per element that is two multiply-xorshift rounds (the key's high word and
 * the step are mixed once per vector). s changes with every step through a
 * full-avalanche mix and h is a bijection of (uint32)key + s, so over steps
 * each element's h is uniform, and m's and v's random bits are each uniform
 * on [0, 2^16). Measured (2^22 keys; 1024 elements x 4096 steps): 256-bin
 * chi-square of m's and v's bits 288 and 234 (255 degrees of freedom),
 * correlation between adjacent elements' bits and between steps below 0.001,
 * as the former per-element fmix32 gave; a single round left adjacent
 * elements correlated (-0.42).
 * (NaN is stored quieted as round-to-nearest does). This depends only on the
 * element index, seed and step, so results are deterministic and independent
 * of SIMD level, thread count and tiling. Why not round to nearest: with
 * beta2 = 0.999 a step changes v by (1-beta2)*(g^2 - v), about 0.1% of v when
 * g^2 is near v, while a bf16 ulp is 2^-7 (0.8%) of v: round-to-nearest maps
 * the new v back to the old one and v stalls; stochastic rounding moves it up
 * one ulp with probability equal to the fraction, so E[v16] = v.
 * Synchronous; thread-safe for disjoint shards. Returns ZO_OK;
 * ZO_ERR_INVALID_ARG for hp/sh NULL, a NULL array with n > 0 (param_out may
 * be NULL), an out-of-range hyperparameter (as zo_adam_step()), an unknown
 * grad/out dtype, a state dtype other than F32/BF16, unknown flag bits or a
 * simd value outside the enum; ZO_ERR_UNSUPPORTED for an explicit level this
 * CPU lacks. Source: Loshchilov & Hutter (2019); PyTorch torch/optim/adamw.py;
 * stochastic rounding as in Gupta et al., Deep Learning with Limited Numerical
 * Precision (2015).
 */
ZO_API zo_status zo_adam_update(const zo_adam_hparams *hp, const zo_adam_shard *sh, unsigned flags,
                                zo_simd simd, zo_adam_result *res);

/*
 * zo_grad_sqnorm_ex() - zo_grad_sqnorm() for a gradient of any dtype.
 * @grad: grad_dtype[n] (F32, BF16 or F16), widened exactly to float first.
 * @n_threads: OpenMP threads, <= 0: the OpenMP default.
 * Same lane/chunk summation order as zo_grad_sqnorm(), so the result is
 * bit-identical for every SIMD level and thread count, and for F32 equals
 * zo_grad_sqnorm(). @nonfinite may be NULL. Errors as zo_grad_sqnorm(), plus
 * ZO_ERR_INVALID_ARG for an unknown dtype.
 */
ZO_API zo_status zo_grad_sqnorm_ex(const void *grad, zo_dtype grad_dtype, size_t n, zo_simd simd,
                                   int n_threads, double *sqnorm, int *nonfinite);

/* ---------------------------------------------------------------- thread pool */

/* zo_adam_pool_opts.tile_elems / parallel_for tile: one contiguous range per thread. */
#define ZO_ADAM_TILE_CONTIGUOUS ((size_t)-1)

/* Persistent thread pool for Adam (opaque). */
typedef struct zo_adam_pool zo_adam_pool_t;
/* A queued task (an update, or zo_adam_pool_submit_for()'s ranges; opaque); completed and freed by
 * zo_adam_task_wait(). */
typedef struct zo_adam_task zo_adam_task_t;

typedef struct zo_adam_pool_opts {
  int n_threads; /* 0: one per physical core (hwloc), of numa_node when that is >= 0 */
  int numa_node; /* -1: any; else use only the cores of this NUMA node (the GPU's node when there is a GPU) */
  int bind; /* 1: bind each thread to one physical core with hwloc (default when opts is NULL); 0: no binding */
  /* 0 (default, measured best under load): threads take tiles dynamically, 256 Ki elements each
   * (fewer for small shards: about 4 per thread, at least 4 Ki); ZO_ADAM_TILE_CONTIGUOUS: one
   * contiguous range per thread; else tiles of this many elements (rounded up to 64) */
  size_t tile_elems;
  zo_simd simd; /* ZO_SIMD_AUTO: zo_simd_resolve() at create time */
  int share_index; /* with share_count > 1: the cores (of numa_node) are split in share_count contiguous groups */
  int share_count; /* and the pool takes group share_index, so ranks on one machine (local rank of local size)
                        do not bind to the same cores; more shares than cores: one core each, wrapping around.
                        0 or 1: every core */
} zo_adam_pool_opts;

/*
 * zo_adam_pool_create() - start the pool's threads (once; they sleep on a
 * condition variable when idle). @opts NULL: all physical cores, bound, no
 * NUMA restriction, auto tiles, SIMD auto. More threads than cores
 * wrap around the cores. A binding failure (or no hwloc topology) warns once
 * and the threads run unbound. Returns ZO_OK and *out; ZO_ERR_INVALID_ARG for
 * out NULL, n_threads < 0 or > 1024, a numa_node that does not exist, or a
 * bad simd value; ZO_ERR_UNSUPPORTED for an explicit simd level this CPU
 * lacks; ZO_ERR_OUT_OF_MEMORY; ZO_ERR_SYSTEM when a thread cannot be started.
 */
ZO_API zo_status zo_adam_pool_create(const zo_adam_pool_opts *opts, zo_adam_pool_t **out);

/*
 * zo_adam_pool_destroy() - wait for every queued task to finish, stop and
 * join the threads, free the pool and any task handles not yet waited on
 * (do not use them afterwards). NULL is a no-op. Do not call concurrently
 * with other calls on the same pool.
 */
ZO_API void zo_adam_pool_destroy(zo_adam_pool_t *pool);

/* zo_adam_pool_threads() - number of worker threads (0 for NULL). */
ZO_API int zo_adam_pool_threads(const zo_adam_pool_t *pool);

/*
 * zo_adam_pool_describe() - e.g. "2 threads bound to cores 0,1 (NUMA node 0),
 * avx512, dynamic tiles of up to 256 Ki elements, p/m/v stores regular
 * (probe: nt 0.97x regular, median of 3 pairs, lowest 0.93x, 0 dropped; ...)".
 * Valid as long as the pool; the store part is rewritten while the store
 * probe times pairs and when it decides (see ZO_ADAM_NO_NT_STORES): call
 * again after updates to see it. "" for NULL.
 */
ZO_API const char *zo_adam_pool_describe(const zo_adam_pool_t *pool);

/*
 * zo_adam_pool_stores_nt() - how the pool's update tasks store param, m and v
 * (ZO_ADAM_STORES, ZO_ADAM_NO_NT_STORES): 1 streaming (non-temporal), 0
 * regular, -1 not decided yet (auto, no task big enough so far: regular
 * meanwhile). @probe_ratio (may be NULL): when the probe has decided, the
 * median of its paired regular-time / streaming-time ratios (> 1: streaming
 * was faster); else 0. 0 and 0 for NULL.
 */
ZO_API int zo_adam_pool_stores_nt(const zo_adam_pool_t *pool, double *probe_ratio);

/*
 * zo_adam_pool_probe_stores() - run the store probe now (ZO_ADAM_STORES auto
 * or probe, not decided yet; else a no-op returning ZO_OK), for callers whose
 * update tasks are too small to be probed (each pair of probe segments must
 * touch 8x the last-level cache bytes of the pool's cores, 128 MiB to
 * 1 GiB): an fp32 update of zeroed scratch arrays on the pool's threads,
 * 6 x 4 x LLC bytes in all, 384 MiB to 3 GiB (768 MiB for one 32 MiB L3),
 * allocated, first-touched and freed here; 0.23-0.30 s on the idle 2-core
 * EPYC, mostly page faults. Pairs of timings disturbed by other processes
 * are dropped and the update run again, 12 runs at most (~25 ms each here):
 * on a busy machine the probe may stay undecided (later large tasks go on
 * probing). Queued behind earlier tasks; synchronous. Returns ZO_OK (see
 * zo_adam_pool_stores_nt() for the outcome), ZO_ERR_INVALID_ARG for a NULL
 * pool, ZO_ERR_OUT_OF_MEMORY when the scratch cannot be allocated.
 */
ZO_API zo_status zo_adam_pool_probe_stores(zo_adam_pool_t *pool);

/*
 * zo_adam_pool_submit() - queue a zo_adam_update() of one shard. @hp and @sh
 * are copied; the arrays must stay valid and untouched until the task
 * completes. Returns when the task is queued (it has not necessarily started).
 * Tasks run one after another in submission order, each split across the
 * pool threads, one per 64 Ki elements (a smaller task runs on one thread,
 * which costs nothing to wake the others); the calling thread does not take
 * part. With
 * ZO_ADAM_SKIP_NONFINITE all threads first pre-scan the gradient (read only)
 * and the update phase runs only if it is clean. Results are bit-identical to
 * zo_adam_update() at the pool's SIMD level for any thread count and tiling.
 * Argument errors are found here, not at wait: returns ZO_OK and *task, or
 * the statuses of zo_adam_update() (nothing queued) and ZO_ERR_OUT_OF_MEMORY.
 * Thread-safe: several threads may submit to one pool.
 */
ZO_API zo_status zo_adam_pool_submit(zo_adam_pool_t *pool, const zo_adam_hparams *hp,
                                     const zo_adam_shard *sh, unsigned flags,
                                     zo_adam_task_t **task);

/* zo_adam_task_poll() - nonblocking: *done = 1 when the task has completed. ZO_ERR_INVALID_ARG for
 * NULL arguments. */
ZO_API zo_status zo_adam_task_poll(zo_adam_task_t *task, int *done);

/*
 * zo_adam_task_wait() - block until the task completes, store its result in
 * @res (may be NULL), free the task and return its status (ZO_OK; tasks that
 * were validated at submit cannot fail later). Call exactly once per task.
 */
ZO_API zo_status zo_adam_task_wait(zo_adam_task_t *task, zo_adam_result *res);

/* zo_adam_pool_update() - zo_adam_pool_submit() then zo_adam_task_wait(). */
ZO_API zo_status zo_adam_pool_update(zo_adam_pool_t *pool, const zo_adam_hparams *hp,
                                     const zo_adam_shard *sh, unsigned flags, zo_adam_result *res);

/*
 * zo_adam_pool_sqnorm() - zo_grad_sqnorm_ex() on the pool threads, queued
 * behind earlier tasks; synchronous. Same bits as zo_grad_sqnorm_ex() for any
 * thread count. Errors as zo_grad_sqnorm_ex(), plus ZO_ERR_INVALID_ARG for a
 * NULL pool.
 */
ZO_API zo_status zo_adam_pool_sqnorm(zo_adam_pool_t *pool, const void *grad, zo_dtype grad_dtype,
                                     size_t n, double *sqnorm, int *nonfinite);

/*
 * zo_adam_pool_parallel_for() - run fn(arg, begin, end, thread) over [0, n)
 * on the pool's (bound) threads, e.g. a benchmark's roofline kernel. @tile:
 * 0 = the pool's tiling (the one Adam tasks of n elements get);
 * ZO_ADAM_TILE_CONTIGUOUS = one range per thread taking part (one thread per
 * 64 Ki elements, at most the pool's), split at multiples of 64 elements;
 * else tiles of that many elements taken dynamically. thread is in
 * [0, zo_adam_pool_threads()). Queued behind
 * earlier tasks; synchronous (returns when every range is done). Returns
 * ZO_OK, ZO_ERR_INVALID_ARG for a NULL pool or fn, ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_adam_pool_parallel_for(zo_adam_pool_t *pool,
                                           void (*fn)(void *arg, size_t begin, size_t end,
                                                      int thread),
                                           void *arg, size_t n, size_t tile);

/* zo_adam_pool_submit_for() @flags: run before every task queued without it that has not started
 * yet. */
#define ZO_ADAM_TASK_URGENT 1u

/*
 * zo_adam_pool_submit_for() - the asynchronous zo_adam_pool_parallel_for():
 * queue fn(arg, begin, end, thread) over [0, @n) (split and tiled as there;
 * @n = 1 runs one function call, fn(arg, 0, 1, thread), on one pool thread)
 * and return when it is queued, without waiting: it has not necessarily
 * started. Complete it with zo_adam_task_wait() (exactly once; blocks until
 * every range has run) or test it with zo_adam_task_poll(); the ranges' writes
 * are visible to the thread that saw it complete there. Tasks run one at a
 * time in submission order, except that a task submitted with
 * ZO_ADAM_TASK_URGENT (@flags; else 0) goes ahead of the tasks queued without
 * it that have not started (behind the running one and earlier urgent ones).
 * So a task queued after another, from one thread and with the same flags or
 * the earlier one urgent, sees that one's writes. @fn must not wait for tasks
 * of the same pool (they queue behind it: deadlock); it returns nothing, so
 * it reports failures through @arg. Returns ZO_OK and *task;
 * ZO_ERR_INVALID_ARG for a NULL pool, fn or task, n == 0 or unknown flags
 * (nothing queued, *task NULL); ZO_ERR_OUT_OF_MEMORY. Thread-safe: any
 * thread may submit, a stream host function (zo_launch_host_func) included:
 * it allocates the handle and takes the pool's mutex briefly, makes no CUDA
 * call and waits for no task.
 */
ZO_API zo_status zo_adam_pool_submit_for(
    zo_adam_pool_t *pool, void (*fn)(void *arg, size_t begin, size_t end, int thread), void *arg,
    size_t n, size_t tile, unsigned flags, zo_adam_task_t **task);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_ADAM_H */
