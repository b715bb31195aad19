/*
 * test_adam.c - zo_adam_step / zo_adam_step_ex / zo_grad_sqnorm against a
 * double-precision reference written here, across SIMD levels, thread counts,
 * unaligned odd-length shards and bad arguments. Not a benchmark.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zoffload/adam.h"
#include "zo_test.h"

/* ---- random numbers: zo_test.h's splitmix64 on one stream for the whole program */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd64(void) { return zo_test_rand64(&g_rng); }
static double rnd_uniform(double lo, double hi) { return zo_test_rand_uniform(&g_rng, lo, hi); }

/* Mixed tolerance |got - ref| <= atol + rtol*|ref| on float results (first 10 mismatches printed). Returns mismatches. */
static size_t close_f(const char *file, int line, const char *what, const char *ctx,
                      const float *got, const double *ref, size_t n, double atol, double rtol) {
  double *g = malloc(n * sizeof *g);
  char label[256];
  snprintf(label, sizeof label, "%s [%s]", what, ctx);
  for (size_t i = 0; i < n; i++) g[i] = got[i];
  size_t bad = zo_test_check_close_array(file, line, label, g, ref, n, atol, rtol);
  free(g);
  return bad;
}
#define CLOSE_F(what, ctx, got, ref, n, atol, rtol) \
  close_f(__FILE__, __LINE__, what, ctx, got, ref, n, atol, rtol)

/* Bit-for-bit equality of n floats (or any 4-byte words), labelled with ctx. Returns the differing byte count. */
static size_t same_bits_at(const char *file, int line, const char *what, const char *ctx,
                           const void *a, const void *b, size_t n_floats) {
  char label[256];
  snprintf(label, sizeof label, "%s [%s]", what, ctx);
  return zo_test_check_bytes(file, line, label, a, b, n_floats * 4);
}
#define SAME_BITS(what, ctx, a, b, n) same_bits_at(__FILE__, __LINE__, what, ctx, a, b, n)

/* Double-precision reference of one step, the formula of torch.optim.Adam/AdamW. */
static void ref_step(const zo_adam_hparams *hp, double *p, const double *g, double *m, double *v,
                     size_t n) {
  double b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr, wd = hp->weight_decay, eps = hp->eps;
  double bc1 = 1, bc2 = 1;
  if (hp->bias_correction) {
    bc1 = 1 - pow(b1, (double)hp->step);
    bc2 = 1 - pow(b2, (double)hp->step);
  }
  for (size_t i = 0; i < n; i++) {
    double gg = g[i] * (double)hp->grad_scale;
    if (hp->mode == ZO_ADAM_MODE_L2)
      gg += wd * p[i];
    else
      p[i] *= 1 - lr * wd;
    m[i] = b1 * m[i] + (1 - b1) * gg;
    v[i] = b2 * v[i] + (1 - b2) * gg * gg;
    double den = sqrt(v[i]) / sqrt(bc2) + eps;
    p[i] -= lr / bc1 * m[i] / den;
  }
}

static const zo_simd k_levels[] = {ZO_SIMD_SCALAR, ZO_SIMD_AVX2, ZO_SIMD_AVX512};

typedef struct {
  float lr, b1, b2, eps, wd, grad_scale, gmag;
} hset;
static const hset k_hsets[] = {
    {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 1.0f},
    {1e-2f, 0.8f, 0.99f, 1e-6f, 0.1f, 1.0f, 0.01f},
    {0.1f, 0.0f, 0.5f, 1e-3f, 0.0f, 1.0f, 3.0f},
    {3e-4f, 0.95f, 0.9999f, 1e-8f, 0.5f, 1.0f / 1024.0f, 1024.0f}, /* loss-scaled grads */
    {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.37f, 1e18f},             /* very large grads */
    {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 1e-20f}, /* tiny grads (float v goes denormal) */
};

/*
 * Test 1: every level x mode x bias correction x hyperparameter set, random
 * shards of length 1..5000 at offsets 1..15 floats, 5 steps each, against the
 * double reference. Tolerance: atol 1e-6, rtol 1e-5 on p, m and v (m and v
 * scaled by the gradient magnitude for the large-grad set: atol is then
 * 1e-6*gmag and 1e-6*gmag^2). Also asserts each level equals scalar bit for bit.
 */
static void test_vs_reference(void) {
  enum { NSHARD = 12, NSTEP = 5, MAXN = 5000, PAD = 16 };
  float *buf = malloc(sizeof(float) * 4 * (MAXN + PAD));
  float *sbuf = malloc(sizeof(float) * 3 * (MAXN + PAD));
  double *dbuf = malloc(sizeof(double) * 4 * MAXN);
  for (size_t hs = 0; hs < sizeof k_hsets / sizeof *k_hsets; hs++)
    for (int mode = 0; mode < 2; mode++)
      for (int bc = 0; bc < 2; bc++)
        for (int shard = 0; shard < NSHARD; shard++) {
          const hset *H = &k_hsets[hs];
          size_t n = shard == 0 ? 1 : shard == 1 ? 15 : shard == 2 ? 17 : 1 + rnd64() % MAXN;
          size_t off = 1 + rnd64() % 15;
          double *rp = dbuf, *rg = dbuf + MAXN, *rm = dbuf + 2 * MAXN, *rv = dbuf + 3 * MAXN;
          float *p0 = malloc(n * sizeof(float)), *g0 = malloc(NSTEP * n * sizeof(float));
          for (size_t i = 0; i < n; i++) p0[i] = (float)rnd_uniform(-1, 1);
          for (size_t i = 0; i < NSTEP * n; i++) g0[i] = (float)(rnd_uniform(-1, 1) * H->gmag);
          float *sp = sbuf + off, *sm = sp + MAXN + PAD, *sv = sm + MAXN + PAD; /* scalar run */
          for (size_t li = 0; li < 3; li++) {
            zo_simd lvl = k_levels[li];
            if (!zo_simd_supported(lvl)) continue;
            float *p = buf + off, *g = p + MAXN + PAD, *m = g + MAXN + PAD, *v = m + MAXN + PAD;
            for (size_t i = 0; i < n; i++) {
              p[i] = p0[i];
              m[i] = v[i] = 0.0f;
              rp[i] = p0[i];
              rm[i] = rv[i] = 0.0;
            }
            char ctx[160];
            for (int t = 1; t <= NSTEP; t++) {
              zo_adam_hparams hp = {H->lr, H->b1, H->b2,        H->eps, H->wd, (zo_adam_mode)mode,
                                    bc,    t,     H->grad_scale};
              for (size_t i = 0; i < n; i++) g[i] = g0[(size_t)(t - 1) * n + i], rg[i] = g[i];
              CHECK_OK(zo_adam_step(&hp, p, g, m, v, n, lvl, 1));
              ref_step(&hp, rp, rg, rm, rv, n);
              snprintf(ctx, sizeof ctx, "%s hset %zu mode %d bc %d n %zu off %zu step %d",
                       zo_simd_name(lvl), hs, mode, bc, n, off, t);
              double sc = H->gmag > 1 ? H->gmag : 1;
              if (CLOSE_F("param", ctx, p, rp, n, 1e-6, 1e-5) ||
                  CLOSE_F("exp_avg", ctx, m, rm, n, 1e-6 * sc, 1e-5) ||
                  CLOSE_F("exp_avg_sq", ctx, v, rv, n, 1e-6 * sc * sc, 1e-5))
                goto next;
            }
            if (lvl == ZO_SIMD_SCALAR) {
              memcpy(sp, p, n * sizeof(float));
              memcpy(sm, m, n * sizeof(float));
              memcpy(sv, v, n * sizeof(float));
            } else {
              SAME_BITS("param vs scalar", ctx, p, sp, n);
              SAME_BITS("exp_avg vs scalar", ctx, m, sm, n);
              SAME_BITS("exp_avg_sq vs scalar", ctx, v, sv, n);
            }
          }
        next:
          free(p0);
          free(g0);
        }
  free(buf);
  free(sbuf);
  free(dbuf);
}

/* Test 2: n_threads 1, 2, 3 and default give identical bits on a shard large enough to split. */
static void test_threads(void) {
  const size_t n = 100003;
  float *base = malloc(4 * n * sizeof(float)), *ref = malloc(3 * n * sizeof(float)),
        *w = malloc(3 * n * sizeof(float));
  for (size_t i = 0; i < 4 * n; i++) base[i] = (float)rnd_uniform(-1, 1);
  for (size_t i = 0; i < n; i++) base[3 * n + i] = fabsf(base[3 * n + i]); /* v >= 0 */
  zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, ZO_ADAM_MODE_ADAMW, 1, 7, 0.5f};
  const int threads[] = {1, 2, 3, 0};
  for (size_t li = 0; li < 3; li++) {
    zo_simd lvl = k_levels[li];
    if (!zo_simd_supported(lvl)) continue;
    for (int ti = 0; ti < 4; ti++) {
      float *out = (li == 0 && ti == 0) ? ref : w;
      memcpy(out, base, n * sizeof(float));                 /* p */
      memcpy(out + n, base + 2 * n, 2 * n * sizeof(float)); /* m, v */
      CHECK_OK(zo_adam_step(&hp, out, base + n, out + n, out + 2 * n, n, lvl, threads[ti]));
      if (out != ref) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "%s n_threads %d", zo_simd_name(lvl), threads[ti]);
        SAME_BITS("p,m,v vs scalar/1 thread", ctx, out, ref, 3 * n);
      }
    }
  }
  free(base);
  free(ref);
  free(w);
}

/* Test 3: zero gradients: m and v decay, p moves only by weight decay. */
static void test_zero_grad(void) {
  const size_t n = 1000;
  float p[1000], g[1000], m[1000], v[1000];
  for (size_t li = 0; li < 3; li++) {
    zo_simd lvl = k_levels[li];
    if (!zo_simd_supported(lvl)) continue;
    for (int mode = 0; mode < 2; mode++) {
      for (size_t i = 0; i < n; i++)
        p[i] = (float)i - 500.0f, g[i] = 0.0f, m[i] = 0.0f, v[i] = 0.0f;
      zo_adam_hparams hp = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, (zo_adam_mode)mode, 1, 1, 1.0f};
      CHECK_OK(zo_adam_step(&hp, p, g, m, v, n, lvl, 1));
      int bad = 0;
      for (size_t i = 0; i < n && !bad; i++)
        if (p[i] != (float)i - 500.0f || m[i] != 0.0f || v[i] != 0.0f) {
          FAIL_AT("zero grad %s mode %d changed state at %zu: p %g m %g v %g", zo_simd_name(lvl),
                  mode, i, (double)p[i], (double)m[i], (double)v[i]);
          bad = 1;
        }
      /* with decoupled decay only the decay moves p: exactly p * (1 - lr*wd) when m = 0 */
      hp.weight_decay = 0.1f;
      hp.mode = ZO_ADAM_MODE_ADAMW;
      for (size_t i = 0; i < n; i++) p[i] = (float)i - 500.0f;
      CHECK_OK(zo_adam_step(&hp, p, g, m, v, n, lvl, 1));
      float decay = (float)(1.0 - 1e-2f * (double)0.1f);
      for (size_t i = 0; i < n; i++)
        if (p[i] != ((float)i - 500.0f) * decay) {
          FAIL_AT("AdamW zero grad at %zu: got %.9g want %.9g", i, (double)p[i],
                  (double)(((float)i - 500.0f) * decay));
          break;
        }
    }
  }
}

static uint16_t ref_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  uint32_t lower = x & 0xffff, up = x >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (up & 1))) up++;
  return (uint16_t)up;
}

/*
 * Test 4: zo_adam_step_ex with bf16 / f16 grads equals zo_adam_step on the
 * widened grads bit for bit; the fused bf16 / f32 copy-out equals the param
 * rounded here; every level agrees.
 */
static void test_fused(void) {
  const size_t n = 3001;
  float *p0 = malloc(n * 4), *gf = malloc(n * 4), *p = malloc(n * 4), *m = malloc(n * 4),
        *v = malloc(n * 4);
  float *pr = malloc(n * 4), *mr = malloc(n * 4), *vr = malloc(n * 4), *outf = malloc(n * 4);
  uint16_t *gh = malloc(n * 2), *outh = malloc(n * 2);
  for (size_t i = 0; i < n; i++) p0[i] = (float)rnd_uniform(-2, 2);
  zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, ZO_ADAM_MODE_L2, 1, 3, 1.0f};
  for (int gt = 0; gt < 3; gt++) {
    for (size_t i = 0; i < n; i++) {
      float x = (float)rnd_uniform(-1, 1);
      gh[i] = ref_bf16(x);
      uint32_t b = (uint32_t)gh[i] << 16;
      memcpy(&gf[i], &b, 4);
    }
    if (gt == ZO_DTYPE_F16) {
      CHECK_OK(zo_cast(gh, ZO_DTYPE_F16, gf, ZO_DTYPE_F32, n,
                       1)); /* bf16 values are exact in f16 here */
      CHECK_OK(zo_cast(gf, ZO_DTYPE_F32, gh, ZO_DTYPE_F16, n, 1));
    }
    const void *gptr = gt == ZO_DTYPE_F32 ? (const void *)gf : (const void *)gh;
    for (size_t i = 0; i < n; i++) pr[i] = p0[i], mr[i] = 0.01f, vr[i] = 0.02f;
    CHECK_OK(zo_adam_step(&hp, pr, gf, mr, vr, n, ZO_SIMD_SCALAR, 1));
    for (int ot = -1; ot < 3; ot++)
      for (size_t li = 0; li < 3; li++) {
        zo_simd lvl = k_levels[li];
        if (!zo_simd_supported(lvl)) continue;
        for (size_t i = 0; i < n; i++) p[i] = p0[i], m[i] = 0.01f, v[i] = 0.02f;
        void *out = ot < 0 ? NULL : ot == ZO_DTYPE_F32 ? (void *)outf : (void *)outh;
        memset(outh, 0, n * 2);
        CHECK_OK(zo_adam_step_ex(&hp, p, gptr, (zo_dtype)gt, m, v, out, (zo_dtype)(ot < 0 ? 0 : ot),
                                 n, lvl, 2));
        char ctx[64];
        snprintf(ctx, sizeof ctx, "%s grad %s out %s", zo_simd_name(lvl),
                 zo_dtype_name((zo_dtype)gt), ot < 0 ? "none" : zo_dtype_name((zo_dtype)ot));
        SAME_BITS("fused param", ctx, p, pr, n);
        SAME_BITS("fused exp_avg", ctx, m, mr, n);
        SAME_BITS("fused exp_avg_sq", ctx, v, vr, n);
        if (ot == ZO_DTYPE_F32) SAME_BITS("fused f32 copy", ctx, outf, pr, n);
        for (size_t i = 0; ot == ZO_DTYPE_BF16 && i < n; i++)
          if (outh[i] != ref_bf16(pr[i])) {
            FAIL_AT("fused bf16 copy [%s] at %zu: 0x%04x vs 0x%04x", ctx, i, outh[i],
                    ref_bf16(pr[i]));
            break;
          }
        if (ot == ZO_DTYPE_F16) {
          uint16_t *want = malloc(n * 2);
          CHECK_OK(zo_cast_ex(want, ZO_DTYPE_F16, pr, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1));
          CHECK(memcmp(want, outh, n * 2) == 0);
          free(want);
        }
      }
  }
  free(p0), free(gf), free(p), free(m), free(v), free(pr), free(mr), free(vr), free(outf), free(gh),
      free(outh);
}

/* Test 5: errors. */
static void test_errors(void) {
  float x[4] = {0};
  zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, ZO_ADAM_MODE_ADAMW, 1, 1, 1.0f};
  CHECK_ST(zo_adam_step(NULL, x, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  CHECK(zo_last_error()[0] != '\0');
  CHECK_ST(zo_adam_step(&hp, NULL, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  CHECK(strstr(zo_last_error(), "param") != NULL);
  CHECK_ST(zo_adam_step(&hp, x, NULL, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_step(&hp, x, x, NULL, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_step(&hp, x, x, x, NULL, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_adam_step(&hp, NULL, NULL, NULL, NULL, 0, ZO_SIMD_AUTO, 1)); /* n = 0: no-op */
  zo_adam_hparams bad = hp;
  bad.step = 0;
  CHECK_ST(zo_adam_step(&bad, x, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  CHECK(strstr(zo_last_error(), "step") != NULL);
  bad.bias_correction = 0; /* step 0 is fine without bias correction */
  CHECK_OK(zo_adam_step(&bad, x, x, x, x, 4, ZO_SIMD_AUTO, 1));
  bad = hp, bad.beta1 = 1.0f;
  CHECK_ST(zo_adam_step(&bad, x, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  bad = hp, bad.beta2 = -0.1f;
  CHECK_ST(zo_adam_step(&bad, x, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  bad = hp, bad.lr = NAN;
  CHECK_ST(zo_adam_step(&bad, x, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  bad = hp, bad.eps = -1.0f;
  CHECK_ST(zo_adam_step(&bad, x, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  bad = hp, bad.mode = (zo_adam_mode)5;
  CHECK_ST(zo_adam_step(&bad, x, x, x, x, 4, ZO_SIMD_AUTO, 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_step(&hp, x, x, x, x, 4, (zo_simd)9, 1), ZO_ERR_INVALID_ARG);
  CHECK_EQ(zo_adam_step_ex(&hp, x, x, (zo_dtype)7, x, x, NULL, ZO_DTYPE_F32, 4, ZO_SIMD_AUTO, 1),
           ZO_ERR_INVALID_ARG);
  for (size_t li = 1; li < 3; li++)
    if (!zo_simd_supported(k_levels[li])) {
      CHECK_ST(zo_adam_step(&hp, x, x, x, x, 4, k_levels[li], 1), ZO_ERR_UNSUPPORTED);
      CHECK(strstr(zo_last_error(), zo_simd_name(k_levels[li])) != NULL);
      CHECK_EQ(zo_simd_resolve(k_levels[li]), ZO_SIMD_AUTO);
    } else {
      CHECK_EQ(zo_simd_resolve(k_levels[li]), k_levels[li]);
    }
  double s;
  CHECK_ST(zo_grad_sqnorm(x, 4, ZO_SIMD_AUTO, 1, NULL, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_grad_sqnorm(NULL, 4, ZO_SIMD_AUTO, 1, &s, NULL), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_grad_sqnorm(NULL, 0, ZO_SIMD_AUTO, 1, &s, NULL));
  CHECK(s == 0.0);

  /* ZO_SIMD environment variable */
  setenv("ZO_SIMD", "scalar", 1);
  CHECK_EQ(zo_simd_resolve(ZO_SIMD_AUTO), ZO_SIMD_SCALAR);
  setenv("ZO_SIMD", "bogus", 1);
  CHECK_EQ(zo_simd_resolve(ZO_SIMD_AUTO), zo_simd_best());
  unsetenv("ZO_SIMD");
  CHECK_EQ(zo_simd_resolve(ZO_SIMD_AUTO), zo_simd_best());
  CHECK(strcmp(zo_simd_name(ZO_SIMD_AVX512), "avx512") == 0 &&
        strcmp(zo_simd_name(ZO_SIMD_AUTO), "auto") == 0);
}

/* Test 6: sqnorm vs a double reference (rtol 1e-12), bit-identical across threads and levels, nonfinite flag. */
static void test_sqnorm(void) {
  const size_t sizes[] = {1, 15, 16, 17, 1000, 65536, 65537, 300001};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    size_t n = sizes[si];
    float *buf = malloc((n + 16) * sizeof(float));
    float *g = buf + 1 + rnd64() % 15;
    long double ref = 0;
    for (size_t i = 0; i < n; i++) {
      g[i] = (float)rnd_uniform(-3, 3);
      ref += (long double)g[i] * g[i];
    }
    double first = -1;
    const int threads[] = {1, 2, 3};
    for (size_t li = 0; li < 3; li++) {
      if (!zo_simd_supported(k_levels[li])) continue;
      for (int ti = 0; ti < 3; ti++) {
        double s = -1;
        int nf = -1;
        CHECK_OK(zo_grad_sqnorm(g, n, k_levels[li], threads[ti], &s, &nf));
        CHECK_EQ(nf, 0);
        if (!CHECK_CLOSE(s, (double)ref, 0.0, 1e-12))
          FAIL_AT("  (sqnorm n %zu %s threads %d)", n, zo_simd_name(k_levels[li]), threads[ti]);
        if (first < 0)
          first = s;
        else if (memcmp(&first, &s, sizeof s) != 0)
          FAIL_AT("sqnorm n %zu %s threads %d not bit-identical: %.17g vs %.17g", n,
                  zo_simd_name(k_levels[li]), threads[ti], s, first);
      }
    }
    /* inf and NaN at a random position (including tails) */
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int b = 0; b < 3; b++) {
      size_t pos = rnd64() % n;
      float keep = g[pos];
      g[pos] = bad[b];
      for (size_t li = 0; li < 3; li++) {
        if (!zo_simd_supported(k_levels[li])) continue;
        double s = 0;
        int nf = 0;
        CHECK_OK(zo_grad_sqnorm(g, n, k_levels[li], 2, &s, &nf));
        CHECK_EQ(nf, 1);
        CHECK(!isfinite(s));
      }
      g[pos] = keep;
    }
    free(buf);
  }
}

int main(void) {
  printf("simd best: %s, avx512_bf16: %d\n", zo_simd_name(zo_simd_best()),
         zo_simd_has_avx512_bf16());
  test_vs_reference();
  printf("vs reference: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_threads();
  printf("threads: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_zero_grad();
  printf("zero grad: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_fused();
  printf("fused: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_errors();
  printf("errors: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_sqnorm();
  printf("sqnorm: %s\n", zo_test_failures ? "FAIL" : "ok");
  return zo_test_finish("test_adam");
}
