/*
 * adam.c - CPU feature detection and SIMD level choice, zo_adam_step[_ex]
 * (thin OpenMP wrappers over the fused range kernels of fused.c), zo_cast and
 * the scalar reference sqnorm and cast kernels (also the AVX2 tails).
 * It is not the fast path: the vector bodies live in adam_avx2.c / adam_avx512.c.
 */
#include <cpuid.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "adam_internal.h"
#include "base_internal.h"

/* ---------------------------------------------------------------- CPU features */

enum { FEAT_AVX2 = 1, FEAT_AVX512 = 2, FEAT_AVX512_BF16 = 4 };
static atomic_int g_feat = -1;

static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static int detect_features(void) {
  unsigned a, b, c, d;
  int f = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return 0;
  uint64_t xcr0 = xgetbv0();
  int ymm_os = (xcr0 & 0x6) == 0x6;             /* XMM and YMM state */
  int zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  unsigned max_sub = a;
  int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1,
      avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
  if (ymm_os && avx2 && fma && f16c) f |= FEAT_AVX2;
  if ((f & FEAT_AVX2) && zmm_os && avx512f && avx512dq && avx512bw && avx512vl) f |= FEAT_AVX512;
  if ((f & FEAT_AVX512) && max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
      ((a >> 5) & 1))
    f |= FEAT_AVX512_BF16;
  return f;
}

static int features(void) {
  int f = atomic_load(&g_feat);
  if (f < 0) {
    f = detect_features();
    atomic_store(&g_feat, f);
  }
  return f;
}

zo_simd zo_simd_best(void) {
  int f = features();
  return (f & FEAT_AVX512) ? ZO_SIMD_AVX512 : (f & FEAT_AVX2) ? ZO_SIMD_AVX2 : ZO_SIMD_SCALAR;
}

int zo_simd_supported(zo_simd s) {
  switch (s) {
    case ZO_SIMD_AUTO:
    case ZO_SIMD_SCALAR: return 1;
    case ZO_SIMD_AVX2: return (features() & FEAT_AVX2) != 0;
    case ZO_SIMD_AVX512: return (features() & FEAT_AVX512) != 0;
  }
  return 0;
}

int zo_simd_has_avx512_bf16(void) { return (features() & FEAT_AVX512_BF16) != 0; }

const char *zo_simd_name(zo_simd s) {
  switch (s) {
    case ZO_SIMD_AUTO: return "auto";
    case ZO_SIMD_SCALAR: return "scalar";
    case ZO_SIMD_AVX2: return "avx2";
    case ZO_SIMD_AVX512: return "avx512";
  }
  return "unknown";
}

zo_simd zo_simd_resolve(zo_simd requested) {
  if (requested != ZO_SIMD_AUTO) return zo_simd_supported(requested) ? requested : ZO_SIMD_AUTO;
  const char *env = getenv("ZO_SIMD");
  if (!env || !*env) return zo_simd_best();
  zo_simd want = ZO_SIMD_AUTO;
  if (!strcmp(env, "scalar"))
    want = ZO_SIMD_SCALAR;
  else if (!strcmp(env, "avx2"))
    want = ZO_SIMD_AVX2;
  else if (!strcmp(env, "avx512"))
    want = ZO_SIMD_AVX512;
  if (want == ZO_SIMD_AUTO) {
    zo_warn_once("ZO_SIMD=%s is not one of scalar, avx2, avx512; using %s", env,
                 zo_simd_name(zo_simd_best()));
    return zo_simd_best();
  }
  if (!zo_simd_supported(want)) {
    zo_warn_once("ZO_SIMD=%s is not supported by this CPU; using %s", env,
                 zo_simd_name(zo_simd_best()));
    return zo_simd_best();
  }
  return want;
}

/* Resolve @simd for a call named @what, or record the error. */
zo_status zo_adam_resolve_simd(const char *what, zo_simd simd, zo_simd *out) {
  if ((int)simd < ZO_SIMD_AUTO || (int)simd > ZO_SIMD_AVX512)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: simd level %d is not a zo_simd value", what,
                        (int)simd);
  zo_simd r = zo_simd_resolve(simd);
  if (r == ZO_SIMD_AUTO)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "%s: SIMD level %s is not supported by this CPU/OS (best is %s)", what,
                        zo_simd_name(simd), zo_simd_name(zo_simd_best()));
  *out = r;
  return ZO_OK;
}

/* ---------------------------------------------------------------- threading */

/* Below this many elements per thread a team costs more than it saves. */
#define MIN_ELEMS_PER_THREAD ((size_t)16384)

static int pick_threads(int n_threads, size_t n) {
  int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
  size_t by_size = (n + MIN_ELEMS_PER_THREAD - 1) / MIN_ELEMS_PER_THREAD;
  if (by_size < (size_t)nt) nt = (int)by_size;
  return nt < 1 ? 1 : nt;
}

/* Per-thread range [*b, *e) of [0, n), split into nt contiguous pieces whose boundaries are multiples of 64. */
static void thread_range(size_t n, int nt, int t, size_t *b, size_t *e) {
  size_t per = (n + (size_t)nt - 1) / (size_t)nt;
  per = (per + 63) & ~(size_t)63;
  size_t lo = per * (size_t)t, hi = lo + per;
  *b = lo < n ? lo : n;
  *e = hi < n ? hi : n;
}

/* ---------------------------------------------------------------- scalar reference */

void zo_sqnorm_lanes_scalar(const void *g, zo_dtype gt, size_t n, double acc[ZO_SQNORM_LANES]) {
  for (size_t i = 0; i < n; i++) {
    double x = (double)zo_load_as_f32(g, gt, i);
    acc[i % ZO_SQNORM_LANES] += x * x;
  }
}

void zo_cast_kernel_scalar(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n) {
  for (size_t i = 0; i < n; i++) zo_store_from_f32(dst, dt, i, zo_load_as_f32(src, st, i));
}

/* ---------------------------------------------------------------- Adam */

static int dtype_ok(zo_dtype t) {
  return t == ZO_DTYPE_F32 || t == ZO_DTYPE_F16 || t == ZO_DTYPE_BF16;
}

zo_status zo_adam_check_hparams(const zo_adam_hparams *hp) {
  if (!hp) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_step: hparams is NULL");
  if (!(hp->lr >= 0.0f))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_step: lr = %g, expected >= 0", (double)hp->lr);
  if (!(hp->eps >= 0.0f))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_step: eps = %g, expected >= 0",
                        (double)hp->eps);
  if (!(hp->weight_decay >= 0.0f))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_step: weight_decay = %g, expected >= 0",
                        (double)hp->weight_decay);
  if (!(hp->beta1 >= 0.0f && hp->beta1 < 1.0f))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_step: beta1 = %g, expected in [0, 1)",
                        (double)hp->beta1);
  if (!(hp->beta2 >= 0.0f && hp->beta2 < 1.0f))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_step: beta2 = %g, expected in [0, 1)",
                        (double)hp->beta2);
  if (hp->mode != ZO_ADAM_MODE_L2 && hp->mode != ZO_ADAM_MODE_ADAMW)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_adam_step: mode = %d, expected ZO_ADAM_MODE_L2 or ZO_ADAM_MODE_ADAMW",
                        (int)hp->mode);
  if (hp->bias_correction && hp->step < 1)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_adam_step: step = %lld with bias correction, expected >= 1",
                        (long long)hp->step);
  return ZO_OK;
}

void zo_adam_make_consts(const zo_adam_hparams *hp, zo_adam_consts *c) {
  double bc1 = 1.0, bc2 = 1.0;
  if (hp->bias_correction) {
    bc1 = 1.0 - pow((double)hp->beta1, (double)hp->step);
    bc2 = 1.0 - pow((double)hp->beta2, (double)hp->step);
  }
  c->b1 = hp->beta1;
  c->omb1 = (float)(1.0 - (double)hp->beta1);
  c->b2 = hp->beta2;
  c->omb2 = (float)(1.0 - (double)hp->beta2);
  c->eps = hp->eps;
  c->step_size = (float)((double)hp->lr / bc1);
  c->sqrt_bc2 = (float)sqrt(bc2);
  c->l2 = hp->mode == ZO_ADAM_MODE_L2;
  c->wd = hp->weight_decay;
  c->decay = (float)(1.0 - (double)hp->lr * (double)hp->weight_decay);
  c->grad_scale = hp->grad_scale;
}

/* A thin wrapper over the fused range kernels of zo_adam_update() (fp32 states, no seed), split over OpenMP. */
zo_status zo_adam_step_ex(const zo_adam_hparams *hp, float *param, const void *grad,
                          zo_dtype grad_dtype, float *exp_avg, float *exp_avg_sq, void *param_out,
                          zo_dtype out_dtype, size_t n, zo_simd simd, int n_threads) {
  ZO_CHECK(zo_adam_check_hparams(hp));
  if (!dtype_ok(grad_dtype))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_step: grad dtype %d is not F32, F16 or BF16",
                        (int)grad_dtype);
  if (param_out && !dtype_ok(out_dtype))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_adam_step: param_out dtype %d is not F32, F16 or BF16", (int)out_dtype);
  zo_simd lvl = ZO_SIMD_SCALAR;
  ZO_CHECK(zo_adam_resolve_simd("zo_adam_step", simd, &lvl));
  if (n == 0) return ZO_OK;
  zo_adam_shard sh = {param,        grad,      grad_dtype, exp_avg, exp_avg_sq,
                      ZO_DTYPE_F32, param_out, out_dtype,  n,       0};
  zo_adam_job j;
  ZO_CHECK(zo_adam_job_init("zo_adam_step", hp, &sh, 0, &j));
  zo_adam_range_fn fn = zo_adam_range_for(lvl);
  int nt = pick_threads(n_threads, n);
  if (nt == 1) {
    fn(&j, 0, n);
    return ZO_OK;
  }
#pragma omp parallel num_threads(nt)
  {
    /* The team may be smaller than asked (nesting, thread limits): ranges follow the real team size. */
    size_t b, e;
    thread_range(n, omp_get_num_threads(), omp_get_thread_num(), &b, &e);
    if (e > b) fn(&j, b, e);
  }
  return ZO_OK;
}

zo_status zo_adam_step(const zo_adam_hparams *hp, float *param, const float *grad, float *exp_avg,
                       float *exp_avg_sq, size_t n, zo_simd simd, int n_threads) {
  return zo_adam_step_ex(hp, param, grad, ZO_DTYPE_F32, exp_avg, exp_avg_sq, NULL, ZO_DTYPE_F32, n,
                         simd, n_threads);
}

/* ---------------------------------------------------------------- gradient norm */

zo_status zo_grad_sqnorm(const float *grad, size_t n, zo_simd simd, int n_threads, double *sqnorm,
                         int *nonfinite) {
  return zo_sqnorm_run("zo_grad_sqnorm", grad, ZO_DTYPE_F32, n, simd, n_threads, sqnorm, nonfinite);
}

/* ---------------------------------------------------------------- casts */

zo_status zo_cast_ex(void *dst, zo_dtype dst_type, const void *src, zo_dtype src_type, size_t n,
                     zo_simd simd, int n_threads) {
  if (!dtype_ok(dst_type) || !dtype_ok(src_type))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_cast: dtype %d -> %d, expected F32, F16 or BF16",
                        (int)src_type, (int)dst_type);
  zo_simd lvl = ZO_SIMD_SCALAR;
  ZO_CHECK(zo_adam_resolve_simd("zo_cast", simd, &lvl));
  if (n == 0) return ZO_OK;
  if (!dst || !src)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_cast: %s is NULL with n = %zu",
                        !dst ? "dst" : "src", n);
  size_t ssz = zo_dtype_size(src_type), dsz = zo_dtype_size(dst_type);
  int nt = pick_threads(n_threads, n);
  if (src_type == dst_type) {
    if (dst == src) return ZO_OK;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      size_t b, e;
      thread_range(n, omp_get_num_threads(), omp_get_thread_num(), &b, &e);
      if (e > b) memcpy((char *)dst + b * dsz, (const char *)src + b * ssz, (e - b) * ssz);
    }
    return ZO_OK;
  }
  zo_cast_fn fn = zo_cast_kernel_scalar;
  if (lvl == ZO_SIMD_AVX512)
    fn = zo_simd_has_avx512_bf16() ? zo_cast_kernel_avx512bf16 : zo_cast_kernel_avx512;
  else if (lvl == ZO_SIMD_AVX2)
    fn = zo_cast_kernel_avx2;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    size_t b, e;
    thread_range(n, omp_get_num_threads(), omp_get_thread_num(), &b, &e);
    if (e > b) fn((char *)dst + b * dsz, dst_type, (const char *)src + b * ssz, src_type, e - b);
  }
  return ZO_OK;
}

zo_status zo_cast(void *dst, zo_dtype dst_type, const void *src, zo_dtype src_type, size_t n,
                  int n_threads) {
  return zo_cast_ex(dst, dst_type, src, src_type, n, ZO_SIMD_AUTO, n_threads);
}
