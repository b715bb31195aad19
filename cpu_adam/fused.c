/*
 * fused.c - zo_adam_update() and zo_grad_sqnorm_ex(): argument checks, the job
 * set-up shared with the pool, and the scalar reference range kernel and scan.
 * It is not the fast path (adam_avx512.c / adam_avx2.c) and not the pool (pool.c).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "adam_internal.h"
#include "adam_stores.h"
#include "base_internal.h"

/* ---------------------------------------------------------------- scalar reference */

/* One element: zo_adam_elem_fused() of base/adam_elem.h, the very function the device kernel runs. */
int zo_adam_range_scalar(const zo_adam_job *j, size_t b, size_t e) {
  unsigned bad = 0;
  for (size_t i = b; i < e; i++)
    bad |= (unsigned)zo_adam_elem_fused(&j->c, i, j->p, j->g, j->gt, j->m, j->v, j->st, j->out,
                                        j->ot, j->seed, j->step32);
  return bad != 0;
}

int zo_scan_nonfinite_scalar(const void *g, zo_dtype gt, size_t b, size_t e) {
  unsigned bad = 0;
  for (size_t i = b; i < e; i++)
    bad |= (zo_f32_bits(zo_load_as_f32(g, gt, i)) & 0x7fffffffu) >= 0x7f800000u;
  return bad != 0;
}

zo_adam_range_fn zo_adam_range_for(zo_simd lvl) {
  return lvl == ZO_SIMD_AVX512 ? zo_adam_range_avx512
         : lvl == ZO_SIMD_AVX2 ? zo_adam_range_avx2
                               : zo_adam_range_scalar;
}
zo_scan_fn zo_scan_for(zo_simd lvl) {
  return lvl == ZO_SIMD_AVX512 ? zo_scan_nonfinite_avx512
         : lvl == ZO_SIMD_AVX2 ? zo_scan_nonfinite_avx2
                               : zo_scan_nonfinite_scalar;
}
zo_sqnorm_fn zo_sqnorm_for(zo_simd lvl) {
  return lvl == ZO_SIMD_AVX512 ? zo_sqnorm_lanes_avx512
         : lvl == ZO_SIMD_AVX2 ? zo_sqnorm_lanes_avx2
                               : zo_sqnorm_lanes_scalar;
}

/* ---------------------------------------------------------------- checks */

static int grad_dtype_ok(zo_dtype t) {
  return t == ZO_DTYPE_F32 || t == ZO_DTYPE_F16 || t == ZO_DTYPE_BF16;
}

zo_status zo_adam_job_init(const char *what, const zo_adam_hparams *hp, const zo_adam_shard *sh,
                           unsigned flags, zo_adam_job *j) {
  ZO_CHECK(zo_adam_check_hparams(hp));
  if (!sh) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: shard is NULL", what);
  if (flags & ~(unsigned)(ZO_ADAM_SKIP_NONFINITE | ZO_ADAM_NO_NT_STORES))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: unknown flag bits 0x%x", what,
                        flags & ~(unsigned)(ZO_ADAM_SKIP_NONFINITE | ZO_ADAM_NO_NT_STORES));
  if (!grad_dtype_ok(sh->grad_dtype))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: grad dtype %d is not F32, F16 or BF16", what,
                        (int)sh->grad_dtype);
  if (sh->state_dtype != ZO_DTYPE_F32 && sh->state_dtype != ZO_DTYPE_BF16)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: state dtype %d is not F32 or BF16", what,
                        (int)sh->state_dtype);
  if (sh->param_out && !grad_dtype_ok(sh->out_dtype))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: param_out dtype %d is not F32, F16 or BF16", what,
                        (int)sh->out_dtype);
  if (sh->n > 0 && (!sh->param || !sh->grad || !sh->exp_avg || !sh->exp_avg_sq))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s is NULL with n = %zu", what,
                        !sh->param     ? "param"
                        : !sh->grad    ? "grad"
                        : !sh->exp_avg ? "exp_avg"
                                       : "exp_avg_sq",
                        sh->n);
  memset(j, 0, sizeof *j);
  zo_adam_make_consts(hp, &j->c);
  j->p = sh->param;
  j->g = sh->grad;
  j->m = sh->exp_avg;
  j->v = sh->exp_avg_sq;
  j->out = sh->param_out;
  j->gt = sh->grad_dtype;
  j->st = sh->state_dtype;
  j->ot = sh->param_out ? sh->out_dtype : ZO_DTYPE_F32;
  j->seed = sh->seed;
  j->step32 = (uint32_t)hp->step;
  /* the pool replaces ZO_NT_STATE by its own choice (pool.c, adam_stores_setup); elsewhere auto means regular */
  j->nt = (flags & ZO_ADAM_NO_NT_STORES)
              ? 0u
              : (unsigned)(ZO_ADAM_NT_DEFAULT) |
                    (zo_adam_stores_env() == ZO_STORES_NT ? (unsigned)ZO_NT_STATE : 0u);
  return ZO_OK;
}

/* ---------------------------------------------------------------- zo_adam_update */

zo_status zo_adam_update(const zo_adam_hparams *hp, const zo_adam_shard *sh, unsigned flags,
                         zo_simd simd, zo_adam_result *res) {
  if (res) res->nonfinite = res->skipped = 0;
  zo_adam_job j;
  ZO_CHECK(zo_adam_job_init("zo_adam_update", hp, sh, flags, &j));
  zo_simd lvl = ZO_SIMD_SCALAR;
  ZO_CHECK(zo_adam_resolve_simd("zo_adam_update", simd, &lvl));
  if (sh->n == 0) return ZO_OK;
  if (flags & ZO_ADAM_SKIP_NONFINITE) {
    if (zo_scan_for(lvl)(j.g, j.gt, 0, sh->n)) {
      if (res) res->nonfinite = res->skipped = 1;
      return ZO_OK;
    }
  }
  int bad = zo_adam_range_for(lvl)(&j, 0, sh->n);
  if (res) res->nonfinite = bad;
  return ZO_OK;
}

/* ---------------------------------------------------------------- zo_grad_sqnorm_ex */

static double lanes_sum16(const double acc[ZO_SQNORM_LANES]) {
  /* fixed pairwise tree: (0+8),(1+9)... then halves again */
  double t[ZO_SQNORM_LANES];
  memcpy(t, acc, sizeof t);
  for (int w = ZO_SQNORM_LANES / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; i++) t[i] = t[i] + t[i + w];
  return t[0];
}

double zo_sqnorm_chunk(zo_sqnorm_fn fn, const void *g, zo_dtype gt, size_t n, size_t k) {
  size_t b = k * ZO_SQNORM_CHUNK, e = b + ZO_SQNORM_CHUNK < n ? b + ZO_SQNORM_CHUNK : n;
  double acc[ZO_SQNORM_LANES] = {0};
  fn((const char *)g + b * zo_dtype_size(gt), gt, e - b, acc);
  return lanes_sum16(acc);
}

double zo_sqnorm_combine(const double *part, size_t nchunks) {
  double s = 0.0;
  for (size_t k = 0; k < nchunks; k++) s += part[k];
  return s;
}

zo_status zo_sqnorm_run(const char *what, const void *grad, zo_dtype grad_dtype, size_t n,
                        zo_simd simd, int n_threads, double *sqnorm, int *nonfinite) {
  if (!sqnorm) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: sqnorm is NULL", what);
  *sqnorm = 0.0;
  if (nonfinite) *nonfinite = 0;
  if (!grad_dtype_ok(grad_dtype))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: grad dtype %d is not F32, F16 or BF16", what,
                        (int)grad_dtype);
  zo_simd lvl = ZO_SIMD_SCALAR;
  ZO_CHECK(zo_adam_resolve_simd(what, simd, &lvl));
  if (n == 0) return ZO_OK;
  if (!grad) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: grad is NULL with n = %zu", what, n);
  zo_sqnorm_fn fn = zo_sqnorm_for(lvl);
  size_t nchunks = (n + ZO_SQNORM_CHUNK - 1) / ZO_SQNORM_CHUNK;
  double stack_part[64];
  double *part = stack_part;
  if (nchunks > 64) {
    part = malloc(nchunks * sizeof *part);
    if (!part)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu chunk partials", what,
                          nchunks);
  }
  int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
  if ((size_t)nt > nchunks) nt = (int)nchunks;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (size_t k = 0; k < nchunks; k++) part[k] = zo_sqnorm_chunk(fn, grad, grad_dtype, n, k);
  double s = zo_sqnorm_combine(part, nchunks);
  if (part != stack_part) free(part);
  *sqnorm = s;
  /* Squares of finite floats cannot overflow a double sum, so a nonfinite sum means a nonfinite input. */
  if (nonfinite) *nonfinite = !isfinite(s);
  return ZO_OK;
}

zo_status zo_grad_sqnorm_ex(const void *grad, zo_dtype grad_dtype, size_t n, zo_simd simd,
                            int n_threads, double *sqnorm, int *nonfinite) {
  return zo_sqnorm_run("zo_grad_sqnorm_ex", grad, grad_dtype, n, simd, n_threads, sqnorm,
                       nonfinite);
}
