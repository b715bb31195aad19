/*
 * test_adam_stores.c - the store kind of param, m, v (ZO_ADAM_STORES): every
 * setting (regular, nt, auto, probe) gives the same bits as the scalar
 * reference, in the pool at each SIMD level and in zo_adam_update(); the
 * pool's store probe (segments of one task, or pairs spread over tasks)
 * decides and reports, also when called explicitly; the probe's decision
 * rule on made-up timings.
 * Never asserts a timing: what the probe picks on this machine is printed only.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adam_stores.h"
#include "zo_test.h"
#include "zoffload/adam.h"

/* ---------------------------------------------------------------- decision rule */

static void test_decide(void) {
  double r;
  /* the Zen 3 of issue 40: streaming 2.7x faster */
  const double zr[3] = {0.30, 0.31, 0.29}, zn[3] = {0.11, 0.115, 0.108};
  CHECK_EQ(zo_adam_stores_decide(zr, zn, 3, &r, NULL), 1);
  CHECK_CLOSE(r, 0.31 / 0.115, 1e-12, 1e-12); /* the median of 2.73, 2.70, 2.69 */
  /* the Zen 5 here: streaming a few percent slower or faster */
  const double fr[3] = {1.00, 1.00, 1.00}, fn[3] = {1.03, 0.97, 1.01};
  CHECK_EQ(zo_adam_stores_decide(fr, fn, 3, &r, NULL), 0);
  CHECK_CLOSE(r, 1.0 / 1.01, 1e-12, 1e-12);
  /* the threshold is on the median: exactly ZO_STORES_NT_WIN streams, just below does not */
  const double one[3] = {1, 1, 1};
  double tn[3] = {1 / 1.05, 1 / ZO_STORES_NT_WIN, 1 / 1.3};
  CHECK_EQ(zo_adam_stores_decide(one, tn, 3, &r, NULL), 1);
  CHECK_CLOSE(r, ZO_STORES_NT_WIN, 1e-12, 1e-12);
  tn[1] = 1 / (ZO_STORES_NT_WIN - 1e-6);
  CHECK_EQ(zo_adam_stores_decide(one, tn, 3, &r, NULL), 0);
  /* a good median but one pair found streaming slower: regular */
  const double mixed[3] = {1 / 1.3, 1 / 1.25, 1 / 0.95};
  CHECK_EQ(zo_adam_stores_decide(one, mixed, 3, &r, NULL), 0);
  CHECK_CLOSE(r, 1.25, 1e-12, 1e-12);
  /* a pair exactly equal is not "faster": regular */
  const double tie[3] = {1 / 1.5, 1.0, 1 / 1.6};
  CHECK_EQ(zo_adam_stores_decide(one, tie, 3, &r, NULL), 0);
  /* an even count: the median is the mean of the middle two, order does not matter */
  const double four_r[4] = {1, 1, 1, 1}, four_n[4] = {1 / 1.4, 1 / 1.1, 1 / 1.3, 1 / 1.2};
  double low = 0;
  CHECK_EQ(zo_adam_stores_decide(four_r, four_n, 4, &r, &low), 1);
  CHECK_CLOSE(r, 1.25, 1e-12, 1e-12);
  /* the lowest pair's ratio, which the pool's description shows */
  CHECK_CLOSE(low, 1.1, 1e-12, 1e-12);
  /* one pair */
  CHECK_EQ(zo_adam_stores_decide(zr, zn, 1, NULL, NULL), 1);
  /* bad input: regular, ratio 0 */
  double bad[3] = {0.1, 0.0, 0.1};
  CHECK_EQ(zo_adam_stores_decide(one, bad, 3, &r, NULL), 0);
  CHECK_CLOSE(r, 0.0, 0, 0);
  bad[1] = -1;
  CHECK_EQ(zo_adam_stores_decide(bad, one, 3, &r, NULL), 0);
  bad[1] = NAN;
  CHECK_EQ(zo_adam_stores_decide(one, bad, 3, &r, NULL), 0);
  bad[1] = INFINITY;
  CHECK_EQ(zo_adam_stores_decide(bad, one, 3, &r, NULL), 0);
  CHECK_EQ(zo_adam_stores_decide(zr, zn, 0, &r, NULL), 0);
  CHECK_EQ(zo_adam_stores_decide(zr, zn, 65, &r, NULL), 0);
  CHECK_EQ(zo_adam_stores_decide(NULL, zn, 3, &r, NULL), 0);
  CHECK_CLOSE(r, 0.0, 0, 0);
}

/* ---------------------------------------------------------------- bits */

typedef struct {
  size_t n;
  char *blk[5];
  float *p;
  void *g, *m, *v, *out;
} arrays;

/* n elements per array, each 64-byte aligned plus @skew elements (skew 1: nothing may stream), deterministic. */
static void arr_init(arrays *a, size_t n, size_t skew, zo_dtype gt, zo_dtype st) {
  uint64_t r = 0x5eed0123456789abull;
  a->n = n;
  for (int k = 0; k < 5; k++) {
    a->blk[k] = aligned_alloc(64, ((n + skew) * 4 + 63) / 64 * 64);
    REQUIRE(a->blk[k] != NULL);
  }
  a->p = (float *)a->blk[0] + skew;
  a->g = a->blk[1] + skew * zo_dtype_size(gt);
  a->m = a->blk[2] + skew * zo_dtype_size(st);
  a->v = a->blk[3] + skew * zo_dtype_size(st);
  a->out = a->blk[4] + skew * 2;
  float *tmp = malloc(n * 4);
  REQUIRE(tmp != NULL);
  for (size_t i = 0; i < n; i++) a->p[i] = zo_test_rand_pm1f(&r);
  for (size_t i = 0; i < n; i++) tmp[i] = zo_test_rand_pm1f(&r);
  REQUIRE_OK(zo_cast_ex(a->g, gt, tmp, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1));
  for (size_t i = 0; i < n; i++) tmp[i] = 0.1f * zo_test_rand_pm1f(&r);
  REQUIRE_OK(zo_cast_ex(a->m, st, tmp, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1));
  for (size_t i = 0; i < n; i++) tmp[i] = 0.01f * fabsf(zo_test_rand_pm1f(&r));
  REQUIRE_OK(zo_cast_ex(a->v, st, tmp, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1));
  memset(a->out, 0, n * 2);
  free(tmp);
}
static void arr_free(arrays *a) {
  for (int k = 0; k < 5; k++) free(a->blk[k]);
}
static zo_adam_shard arr_shard(arrays *a, zo_dtype gt, zo_dtype st, int with_out) {
  zo_adam_shard s = {a->p,          a->g, gt, a->m, a->v, st, with_out ? a->out : NULL,
                     ZO_DTYPE_BF16, a->n, 77};
  return s;
}
static void check_same(const char *ctx, arrays *got, arrays *ref, zo_dtype st) {
  CHECK_BYTES(ctx, got->p, ref->p, ref->n * 4);
  CHECK_BYTES(ctx, got->m, ref->m, ref->n * zo_dtype_size(st));
  CHECK_BYTES(ctx, got->v, ref->v, ref->n * zo_dtype_size(st));
  CHECK_BYTES(ctx, got->out, ref->out, ref->n * 2);
}

static const char *const k_settings[] = {"regular", "nt", "auto", "probe"};

/*
 * Each setting x SIMD level x (grad, state, copy-out) kind, aligned and
 * skewed arrays: two steps in a 2-thread pool and with zo_adam_update() give
 * the scalar reference's bits (scalar never streams). n = 100003 > 6 x 4096:
 * with "probe" the first aligned task is cut into 3 pairs of segments.
 */
static void test_bits(void) {
  const size_t n = 100003;
  static const zo_simd lv[] = {ZO_SIMD_SCALAR, ZO_SIMD_AVX2, ZO_SIMD_AVX512};
  static const struct {
    zo_dtype gt, st;
    int out;
  } kinds[] = {{ZO_DTYPE_F32, ZO_DTYPE_F32, 0},
               {ZO_DTYPE_BF16, ZO_DTYPE_F32, 1},
               {ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1}};
  for (int s = 0; s < 4; s++)
    for (int li = 0; li < 3; li++) {
      if (!zo_simd_supported(lv[li])) continue;
      for (int skew = 0; skew <= 1; skew++) {
        REQUIRE(setenv("ZO_ADAM_STORES", k_settings[s], 1) == 0);
        zo_adam_pool_opts o = {2, -1, 1, 0, lv[li], 0, 0};
        zo_adam_pool_t *pool = NULL;
        REQUIRE_OK(zo_adam_pool_create(&o, &pool));
        const int scalar = lv[li] == ZO_SIMD_SCALAR;
        int want0 = scalar ? 0 : s == 0 ? 0 : s == 1 ? 1 : -1; /* before any task */
        CHECK_EQ(zo_adam_pool_stores_nt(pool, NULL), want0);
        for (int ki = 0; ki < 3; ki++) {
          arrays ref, got, upd;
          zo_dtype gt = kinds[ki].gt, st = kinds[ki].st;
          arr_init(&ref, n, (size_t)skew, gt, st);
          arr_init(&got, n, (size_t)skew, gt, st);
          arr_init(&upd, n, (size_t)skew, gt, st);
          for (int t = 1; t <= 2; t++) {
            zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, (zo_adam_mode)(t & 1),
                                  1,     t,    0.5f};
            zo_adam_shard a = arr_shard(&ref, gt, st, kinds[ki].out),
                          b = arr_shard(&got, gt, st, kinds[ki].out),
                          c = arr_shard(&upd, gt, st, kinds[ki].out);
            CHECK_OK(zo_adam_update(&hp, &a, 0, ZO_SIMD_SCALAR, NULL));
            CHECK_OK(zo_adam_pool_update(pool, &hp, &b, 0, NULL));
            CHECK_OK(zo_adam_update(&hp, &c, 0, lv[li], NULL));
          }
          char ctx[128];
          snprintf(ctx, sizeof ctx, "ZO_ADAM_STORES=%s %s skew %d grad %s state %s out %d: pool",
                   k_settings[s], zo_simd_name(lv[li]), skew, zo_dtype_name(gt), zo_dtype_name(st),
                   kinds[ki].out);
          check_same(ctx, &got, &ref, st);
          snprintf(ctx, sizeof ctx, "ZO_ADAM_STORES=%s %s skew %d grad %s state %s out %d: update",
                   k_settings[s], zo_simd_name(lv[li]), skew, zo_dtype_name(gt), zo_dtype_name(st),
                   kinds[ki].out);
          check_same(ctx, &upd, &ref, st);
          arr_free(&ref);
          arr_free(&got);
          arr_free(&upd);
        }
        /* what the pool chose: fixed by the setting, except that a probe (aligned tasks only) picks either kind */
        double ratio = -1;
        int nt = zo_adam_pool_stores_nt(pool, &ratio);
        const char *d = zo_adam_pool_describe(pool);
        if (scalar || s < 2) {
          CHECK_EQ(nt, want0);
          CHECK_CLOSE(ratio, 0.0, 0, 0);
          CHECK(strstr(d, scalar ? "(the scalar kernel never streams)"
                          : s    ? "(ZO_ADAM_STORES=nt)"
                                 : "(ZO_ADAM_STORES=regular)") != NULL);
        } else if (s == 2 || skew) {
          /* auto: 100003 elements are far below any last-level cache x 24 */
          CHECK_EQ(nt, -1);
          CHECK(strstr(d, "until probed") != NULL);
        } else {
          CHECK(nt == 0 || nt == 1);
          CHECK(ratio > 0);
          CHECK(strstr(d, "(probe: nt ") != NULL);
          printf("probe (%s, 3 pairs of ~16 Ki-element segments, in cache: means nothing): %s\n",
                 zo_simd_name(lv[li]), d);
        }
        zo_adam_pool_destroy(pool);
      }
    }
  unsetenv("ZO_ADAM_STORES");
}

/*
 * The probe's pairs spread over tasks: with "probe", a task of 2 x 4096 to
 * 4 x 4096 - 1 elements holds one pair, so the pool decides at the third
 * such task; a task with ZO_ADAM_NO_NT_STORES, a skipped one and a
 * misaligned one count for nothing. Every task keeps the reference bits.
 */
static void test_probe_over_tasks(void) {
  zo_simd lvl = zo_simd_best();
  if (lvl == ZO_SIMD_SCALAR) {
    printf("test_probe_over_tasks: no AVX2, the scalar kernel never streams: skipped\n");
    return;
  }
  REQUIRE(setenv("ZO_ADAM_STORES", "probe", 1) == 0);
  zo_adam_pool_opts o = {2, -1, 1, 0, lvl, 0, 0};
  zo_adam_pool_t *pool = NULL;
  REQUIRE_OK(zo_adam_pool_create(&o, &pool));
  const size_t n = 3 * 4096 + 17;
  /* task kinds in order: no-NT flag, skipped (inf grad), misaligned, then three probed ones */
  const int want_after[6] = {-1, -1, -1, -1, -1, 0 /* 0 or 1 */};
  for (int k = 0; k < 6; k++) {
    arrays ref, got;
    arr_init(&ref, n, k == 2 ? 1 : 0, ZO_DTYPE_BF16, ZO_DTYPE_F32);
    arr_init(&got, n, k == 2 ? 1 : 0, ZO_DTYPE_BF16, ZO_DTYPE_F32);
    unsigned flags = k == 0 ? ZO_ADAM_NO_NT_STORES : k == 1 ? ZO_ADAM_SKIP_NONFINITE : 0;
    if (k == 1) ((uint16_t *)ref.g)[n / 3] = ((uint16_t *)got.g)[n / 3] = 0x7f80; /* +inf */
    zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, ZO_ADAM_MODE_ADAMW, 1, 1 + k, 1.0f};
    zo_adam_shard a = arr_shard(&ref, ZO_DTYPE_BF16, ZO_DTYPE_F32, 1);
    zo_adam_shard b = arr_shard(&got, ZO_DTYPE_BF16, ZO_DTYPE_F32, 1);
    zo_adam_result ra = {-1, -1}, rb = {-1, -1};
    CHECK_OK(zo_adam_update(&hp, &a, flags, ZO_SIMD_SCALAR, &ra));
    CHECK_OK(zo_adam_pool_update(pool, &hp, &b, flags, &rb));
    CHECK_EQ(rb.skipped, k == 1);
    CHECK_EQ(ra.nonfinite, rb.nonfinite);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "probe over tasks, task %d", k);
    check_same(ctx, &got, &ref, ZO_DTYPE_F32);
    int nt = zo_adam_pool_stores_nt(pool, NULL);
    if (k < 5)
      CHECK_EQ(nt, want_after[k]);
    else
      CHECK(nt == 0 || nt == 1);
    arr_free(&ref);
    arr_free(&got);
  }
  printf("probe over tasks: %s\n", zo_adam_pool_describe(pool));
  zo_adam_pool_destroy(pool);
  unsetenv("ZO_ADAM_STORES");
}

/* An unknown value warns and acts as auto; NULL pools. */
static void test_misc(void) {
  REQUIRE(setenv("ZO_ADAM_STORES", "sometimes", 1) == 0);
  CHECK_EQ(zo_adam_stores_env(), ZO_STORES_AUTO);
  REQUIRE(setenv("ZO_ADAM_STORES", "nt", 1) == 0);
  CHECK_EQ(zo_adam_stores_env(), ZO_STORES_NT);
  unsetenv("ZO_ADAM_STORES");
  CHECK_EQ(zo_adam_stores_env(), ZO_STORES_AUTO);
  double r = -1;
  CHECK_EQ(zo_adam_pool_stores_nt(NULL, &r), 0);
  CHECK_CLOSE(r, 0.0, 0, 0);
  CHECK_ST(zo_adam_pool_probe_stores(NULL), ZO_ERR_INVALID_ARG);
}

/* The explicit probe on scratch: decides at once ("probe": tiny segments), then is a no-op; fixed settings
 * make it a no-op. ("auto" would allocate 6 x max(4 x LLC, 64 MiB): not in a quick test.) */
static void test_probe_call(void) {
  zo_simd lvl = zo_simd_best();
  if (lvl == ZO_SIMD_SCALAR) return;
  for (int s = 0; s < 2; s++) {
    REQUIRE(setenv("ZO_ADAM_STORES", s ? "probe" : "regular", 1) == 0);
    zo_adam_pool_opts o = {2, -1, 1, 0, lvl, 0, 0};
    zo_adam_pool_t *pool = NULL;
    REQUIRE_OK(zo_adam_pool_create(&o, &pool));
    CHECK_EQ(zo_adam_pool_stores_nt(pool, NULL), s ? -1 : 0);
    CHECK_OK(zo_adam_pool_probe_stores(pool));
    double r = 0;
    int nt = zo_adam_pool_stores_nt(pool, &r);
    if (s) {
      CHECK(nt == 0 || nt == 1);
      CHECK(r > 0);
    } else {
      CHECK_EQ(nt, 0);
    }
    CHECK_OK(zo_adam_pool_probe_stores(pool)); /* decided: nothing to do */
    CHECK_EQ(zo_adam_pool_stores_nt(pool, NULL), nt);
    printf("explicit probe, ZO_ADAM_STORES=%s: %s\n", s ? "probe" : "regular",
           zo_adam_pool_describe(pool));
    zo_adam_pool_destroy(pool);
  }
  unsetenv("ZO_ADAM_STORES");
}

int main(void) {
  test_decide();
  test_misc();
  test_bits();
  test_probe_over_tasks();
  test_probe_call();
  return zo_test_finish("test_adam_stores");
}
