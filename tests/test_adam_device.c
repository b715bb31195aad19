/*
 * test_adam_device.c - device Adam (gpu/adam_device.h) on a real GPU against
 * CPU Adam (zo_adam_update): sizes 1, 1000 and 2^20 + 3 (not multiples of
 * the 256-thread block), 10 steps, fp32 and bf16 state, AdamW and L2, with a
 * bf16 gradient and working copy (the engine's bf16 run) and fp32 ones; and
 * the device squared norm against zo_grad_sqnorm_ex; the accumulation kernel
 * against the host add, bit for bit. Prints the largest
 * absolute and relative differences and the tolerance. Tolerance for the
 * master weights and moments: |a - b| <= 1e-6 + 1e-5 |ref| (the kernel is built
 * with -fmad=false and IEEE div/sqrt, so bitwise equality is expected and the
 * count of differing elements is printed; the tolerance only absorbs a 1-ulp
 * difference should a toolkit contract anyway); working copies within one
 * unit of their dtype's rounding of that. Norm: relative 1e-12 (double sums
 * in a different order). Exit 77 without a CUDA GPU or without the kernels.
 */
#include <stdio.h>

#include "adam_device.h"
#include "adam_ref.h"
#include "zo_test.h"
#include "zoffload/device.h"

static double max_abs, max_rel;
static size_t n_diff_bits;

/* Compare @n floats of @got (device result) to @ref; element counts past the tolerance are failures. */
static void cmp(const char *what, const float *got, const float *ref, size_t n, double atol,
                double rtol) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    const double a = got[i], r = ref[i], d = fabs(a - r);
    if (memcmp(&got[i], &ref[i], 4)) n_diff_bits++;
    if (d > max_abs) max_abs = d;
    if (r != 0 && d / fabs(r) > max_rel) max_rel = d / fabs(r);
    if (!(d <= atol + rtol * fabs(r)) && bad++ < 1)
      FAIL_AT("%s: element %zu: device %.9g vs cpu %.9g (|diff| %.3g > %.3g + %.3g |ref|)", what, i,
              a, r, d, atol, rtol);
  }
  if (bad > 1) FAIL_AT("%s: %zu elements past the tolerance", what, bad);
}

static void widen(float *dst, const void *src, zo_dtype t, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = zo_elem_load(src, t, i);
}

static void run(zo_device_t *dev, zo_stream_t *s, size_t n, zo_dtype gt, zo_dtype st, zo_dtype ot,
                int adamw) {
  const size_t gs = zo_dtype_size(gt), ss = zo_dtype_size(st), os = zo_dtype_size(ot);
  float *p = malloc(n * 4), *hp_dev = malloc(n * 4), *w0 = calloc(n, 4), *w1 = calloc(n, 4);
  char *g = malloc(n * gs), *m = calloc(n, ss), *v = calloc(n, ss), *o = malloc(n * os);
  char *hm = malloc(n * ss), *hv = malloc(n * ss), *ho = malloc(n * os);
  void *dp, *dg, *dm, *dv, *dout;
  CHECK_OK(zo_device_malloc(dev, n * 4, &dp));
  CHECK_OK(zo_device_malloc(dev, n * gs, &dg));
  CHECK_OK(zo_device_malloc(dev, n * ss, &dm));
  CHECK_OK(zo_device_malloc(dev, n * ss, &dv));
  CHECK_OK(zo_device_malloc(dev, n * os, &dout));
  ref_master(p, n);
  CHECK_OK(zo_memcpy(dev, dp, p, n * 4, ZO_COPY_H2D));
  CHECK_OK(zo_memcpy(dev, dm, m, n * ss, ZO_COPY_H2D));
  CHECK_OK(zo_memcpy(dev, dv, v, n * ss, ZO_COPY_H2D));
  const uint64_t seed = 77;
  for (int64_t t = 1; t <= 10; t++) {
    zo_adam_hparams hp = ref_hparams(adamw, t);
    ref_grad(g, gt, n, t);
    /* zo_memcpy() runs on the device's private stream, unordered with @s: the previous step's kernel may still
     * read dg, so wait for it before dg is overwritten (as run_acc does). */
    CHECK_OK(zo_stream_synchronize(s));
    CHECK_OK(zo_memcpy(dev, dg, g, n * gs, ZO_COPY_H2D));
    zo_adam_dev_job j = {.param = dp,
                         .grad = dg,
                         .exp_avg = dm,
                         .exp_avg_sq = dv,
                         .param_out = dout,
                         .grad_dtype = gt,
                         .state_dtype = st,
                         .out_dtype = ot,
                         .n = n,
                         .seed = seed,
                         .step32 = (uint32_t)t};
    zo_adam_make_consts(&hp, &j.c);
    CHECK_OK(zo_adam_device_step(s, &j));
    zo_adam_shard sh = {.param = p,
                        .grad = g,
                        .grad_dtype = gt,
                        .exp_avg = m,
                        .exp_avg_sq = v,
                        .state_dtype = st,
                        .param_out = o,
                        .out_dtype = ot,
                        .n = n,
                        .seed = seed};
    CHECK_OK(zo_adam_update(&hp, &sh, 0, ZO_SIMD_AUTO, NULL));
  }
  CHECK_OK(zo_stream_synchronize(s));
  CHECK_OK(zo_memcpy(dev, hp_dev, dp, n * 4, ZO_COPY_D2H));
  CHECK_OK(zo_memcpy(dev, hm, dm, n * ss, ZO_COPY_D2H));
  CHECK_OK(zo_memcpy(dev, hv, dv, n * ss, ZO_COPY_D2H));
  CHECK_OK(zo_memcpy(dev, ho, dout, n * os, ZO_COPY_D2H));
  char what[160];
  snprintf(what, sizeof what, "n %zu grad %s state %s out %s %s", n, zo_dtype_name(gt),
           zo_dtype_name(st), zo_dtype_name(ot), adamw ? "AdamW" : "L2");
  const double sr =
      st == ZO_DTYPE_BF16 ? 8e-3 : 0; /* a 1-ulp bf16 step, should a master differ by one */
  char w[200];
  snprintf(w, sizeof w, "%s master", what), cmp(w, hp_dev, p, n, 1e-6, 1e-5);
  widen(w0, hm, st, n), widen(w1, m, st, n);
  snprintf(w, sizeof w, "%s exp_avg", what), cmp(w, w0, w1, n, 1e-6, 1e-5 + sr);
  widen(w0, hv, st, n), widen(w1, v, st, n);
  snprintf(w, sizeof w, "%s exp_avg_sq", what), cmp(w, w0, w1, n, 1e-6, 1e-5 + sr);
  widen(w0, ho, ot, n), widen(w1, o, ot, n);
  snprintf(w, sizeof w, "%s working copy", what),
      cmp(w, w0, w1, n, 1e-6, ot == ZO_DTYPE_F32 ? 1e-5 : 8e-3);
  /* the norm of the last gradient */
  double *dpart, part[ZO_DEV_SQNORM_BLOCKS], sq_cpu = 0, sq_dev = 0;
  int nonfinite = 0;
  CHECK_OK(zo_device_malloc(dev, sizeof part, (void **)&dpart));
  CHECK_OK(zo_grad_sqnorm_device(s, dg, gt, n, dpart));
  CHECK_OK(zo_stream_synchronize(s));
  CHECK_OK(zo_memcpy(dev, part, dpart, sizeof part, ZO_COPY_D2H));
  for (int b = 0; b < ZO_DEV_SQNORM_BLOCKS; b++) sq_dev += part[b];
  CHECK_OK(zo_grad_sqnorm_ex(g, gt, n, ZO_SIMD_AUTO, 1, &sq_cpu, &nonfinite));
  if (!(fabs(sq_dev - sq_cpu) <= 1e-12 * sq_cpu))
    FAIL_AT("%s: sqnorm device %.17g vs cpu %.17g", what, sq_dev, sq_cpu);
  zo_device_free(dev, dpart);
  zo_device_free(dev, dp), zo_device_free(dev, dg), zo_device_free(dev, dm),
      zo_device_free(dev, dv);
  zo_device_free(dev, dout);
  free(p), free(hp_dev), free(w0), free(w1), free(g), free(m), free(v), free(o), free(hm), free(hv),
      free(ho);
}

/* The accumulation kernel (zo_grad_acc_device) against the engine's host add (eng_acc_add: the same float32
 * sum, rounded to the accumulation dtype once): 3 micro-batches of @st into @dt, bit for bit. */
static void run_acc(zo_device_t *dev, zo_stream_t *s, size_t n, zo_dtype dt, zo_dtype st) {
  const size_t ds = zo_dtype_size(dt), ss = zo_dtype_size(st);
  char *g = malloc(n * ss), *ref = malloc(n * ds), *got = malloc(n * ds);
  void *dg, *dacc;
  CHECK_OK(zo_device_malloc(dev, n * ss, &dg));
  CHECK_OK(zo_device_malloc(dev, n * ds, &dacc));
  for (int mb = 0; mb < 3; mb++) {
    ref_grad(g, st, n, mb + 1);
    CHECK_OK(zo_memcpy(dev, dg, g, n * ss, ZO_COPY_H2D));
    CHECK_OK(zo_grad_acc_device(s, dacc, dt, dg, st, n, mb > 0));
    CHECK_OK(zo_stream_synchronize(s)); /* dg is overwritten next */
    for (size_t i = 0; i < n; i++)
      zo_elem_store(ref, dt, i,
                    (mb > 0 ? zo_elem_load(ref, dt, i) : 0.0f) + zo_elem_load(g, st, i));
  }
  CHECK_OK(zo_memcpy(dev, got, dacc, n * ds, ZO_COPY_D2H));
  if (memcmp(got, ref, n * ds))
    FAIL_AT("grad accumulation n %zu %s into %s: device sum differs from the host's", n,
            zo_dtype_name(st), zo_dtype_name(dt));
  zo_device_free(dev, dg), zo_device_free(dev, dacc);
  free(g), free(ref), free(got);
}

int main(void) {
  if (zo_device_cuda_count() < 1) {
    printf("test_adam_device: SKIP: no CUDA GPU\n");
    return ZO_TEST_SKIP;
  }
  zo_device_t *dev;
  zo_stream_t *s;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, SIZE_MAX, &dev))) return 1;
  char why[256];
  if (!zo_adam_device_available(dev, why, sizeof why)) {
    printf("test_adam_device: SKIP: %s\n", why);
    zo_device_destroy(dev);
    return ZO_TEST_SKIP;
  }
  CHECK_OK(zo_stream_create(dev, &s));
  static const size_t sizes[] = {1, 1000, ((size_t)1 << 20) + 3};
  for (int k = 0; k < 3; k++)
    for (int adamw = 0; adamw < 2; adamw++) {
      run(dev, s, sizes[k], ZO_DTYPE_F32, ZO_DTYPE_F32, ZO_DTYPE_F32, adamw);
      run(dev, s, sizes[k], ZO_DTYPE_BF16, ZO_DTYPE_F32, ZO_DTYPE_BF16, adamw);
      run(dev, s, sizes[k], ZO_DTYPE_BF16, ZO_DTYPE_BF16, ZO_DTYPE_BF16, adamw);
    }
  for (int k = 0; k < 3; k++) {
    run_acc(dev, s, sizes[k], ZO_DTYPE_F32, ZO_DTYPE_BF16);
    run_acc(dev, s, sizes[k], ZO_DTYPE_F32, ZO_DTYPE_F32);
    run_acc(dev, s, sizes[k], ZO_DTYPE_BF16, ZO_DTYPE_BF16);
  }
  printf(
      "test_adam_device: %s: 18 configurations x 10 steps: max |diff| %.3g, max rel diff %.3g, %zu float(s) "
      "not bitwise equal; tolerance |diff| <= 1e-6 + 1e-5 |ref| (bf16 state and working copies: + one bf16 "
      "rounding, 8e-3 |ref|)\n",
      zo_device_name(dev), max_abs, max_rel, n_diff_bits);
  zo_stream_destroy(s);
  zo_device_destroy(dev);
  return zo_test_finish("test_adam_device");
}
