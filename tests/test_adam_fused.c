/*
 * test_adam_fused.c - zo_adam_update() (every grad/state/out dtype, mode and
 * bias-correction combination, every SIMD level) against a double-precision
 * reference written here, plus inf/NaN handling, stochastic rounding and
 * zo_grad_sqnorm_ex(). Not a benchmark; the pool has its own test.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "zo_test.h"
#include "zoffload/adam.h"

static uint64_t g_rng = 0x1234567887654321ull;
static double urand(double lo, double hi) { return zo_test_rand_uniform(&g_rng, lo, hi); }
static uint64_t rnd(void) { return zo_test_rand64(&g_rng); }

static const zo_simd k_levels[] = {ZO_SIMD_SCALAR, ZO_SIMD_AVX2, ZO_SIMD_AVX512};
static const zo_dtype k_dtypes[] = {ZO_DTYPE_F32, ZO_DTYPE_F16, ZO_DTYPE_BF16};

/* ---- exact conversions written independently of the library */
static float bits_f(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static uint32_t f_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
static double h2d(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return s ? -v : v;
}
static double b2d(uint16_t h) { return bits_f((uint32_t)h << 16); }
static uint16_t f2b_rne(float f) {
  uint32_t x = f_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  uint32_t lsb = (x >> 16) & 1u;
  return (uint16_t)((x + 0x7fffu + lsb) >> 16);
}
static double load_d(const void *a, zo_dtype t, size_t i) {
  return t == ZO_DTYPE_F32   ? ((const float *)a)[i]
         : t == ZO_DTYPE_F16 ? h2d(((const uint16_t *)a)[i])
                             : b2d(((const uint16_t *)a)[i]);
}

/* The documented stochastic-rounding hash (zoffload/adam.h), written from the header's text. */
static uint32_t fmix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}
static uint32_t sr_hash(uint64_t key, uint32_t t) {
  uint32_t s = fmix32(0x9e3779b9u * (uint32_t)(key >> 32) + 0x85ebca77u * t);
  uint32_t y = ((uint32_t)key + s) * 0x9e3779b1u;
  y ^= y >> 15;
  y *= 0x2c1b3c6du;
  return y ^ (y >> 16);
}
static uint16_t f2b_sr(float f, uint32_t r) { return (uint16_t)((f_bits(f) + r) >> 16); }

/* Double reference of one element, the formula of torch.optim.Adam/AdamW. */
static void ref_elem(const zo_adam_hparams *hp, double *p, double g, double *m, double *v) {
  double b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr, wd = hp->weight_decay;
  double bc1 = 1, bc2 = 1;
  if (hp->bias_correction) {
    bc1 = 1 - pow(b1, (double)hp->step);
    bc2 = 1 - pow(b2, (double)hp->step);
  }
  g *= hp->grad_scale;
  if (hp->mode == ZO_ADAM_MODE_L2)
    g += wd * *p;
  else
    *p *= 1 - lr * wd;
  *m = b1 * *m + (1 - b1) * g;
  *v = b2 * *v + (1 - b2) * g * g;
  *p -= lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + hp->eps);
}

/*
 * The float32 m and v of one element exactly as zoffload/adam.h specifies the
 * operation order (constants rounded to float once; this file has no FMA
 * contraction: x86-64 without -mfma).
 */
static void f32_update(const zo_adam_hparams *hp, float g, float m, float v, float p, float *mo,
                       float *vo) {
  float omb1 = (float)(1.0 - (double)hp->beta1), omb2 = (float)(1.0 - (double)hp->beta2);
  float gg = g * hp->grad_scale;
  if (hp->mode == ZO_ADAM_MODE_L2) gg = gg + hp->weight_decay * p;
  volatile float a = hp->beta1 * m, b = omb1 * gg, c = hp->beta2 * v, d = (omb2 * gg) * gg;
  *mo = a + b;
  *vo = c + d;
}

typedef struct {
  float lr, b1, b2, eps, wd, scale;
  double gmag[3]; /* gradient magnitude for F32, F16, BF16 grads */
} hset;
static const hset k_hsets[] = {
    {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, {1, 1, 1}},
    {1e-2f, 0.8f, 0.99f, 1e-6f, 0.1f, 1.0f / 1024, {1024, 1024, 1024}}, /* loss-scaled */
    {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.37f, {1e18, 3e4, 1e18}},      /* very large */
    {1e-3f,
     0.9f,
     0.999f,
     1e-8f,
     0.01f,
     1.0f,
     {1e-20, 1e-6, 1e-20}},                           /* very small (f16: subnormal) */
    {0.1f, 0.0f, 0.5f, 1e-3f, 0.0f, 1.0f, {0, 0, 0}}, /* zero gradients */
};

/* Random shard: arrays at odd offsets into padded buffers. */
typedef struct {
  size_t n;
  float *p;
  void *g, *m, *v, *out;
  char *mem[5];
} shardbuf;
static void sb_alloc(shardbuf *s, size_t n, zo_dtype gt, zo_dtype st, zo_dtype ot, int has_out) {
  s->n = n;
  size_t sz[5] = {4, zo_dtype_size(gt), zo_dtype_size(st), zo_dtype_size(st), zo_dtype_size(ot)};
  void **dst[5] = {(void **)&s->p, &s->g, &s->m, &s->v, &s->out};
  int aligned =
      rnd() % 3 == 0; /* a third: every array 64-byte aligned (the streaming-store path) */
  for (int k = 0; k < 5; k++) {
    s->mem[k] = aligned_alloc(64, (n * sz[k] + 128 + 63) / 64 * 64);
    size_t off =
        aligned ? 0 : (1 + rnd() % 15) * sz[k]; /* else element-aligned, never 64-byte aligned */
    *dst[k] = s->mem[k] + off;
  }
  if (!has_out) s->out = NULL;
}
static void sb_free(shardbuf *s) {
  for (int k = 0; k < 5; k++) free(s->mem[k]);
}
static void store_f(void *a, zo_dtype t, size_t i, float f) {
  if (t == ZO_DTYPE_F32)
    ((float *)a)[i] = f;
  else
    CHECK_OK(zo_cast_ex((uint16_t *)a + i, t, &f, ZO_DTYPE_F32, 1, ZO_SIMD_SCALAR, 1));
}

/*
 * Test 1: all combinations x levels against the double reference, 3 steps on
 * shards of odd lengths at unaligned addresses. Tolerances (mixed,
 * |got-ref| <= atol + rtol*|ref|): param atol 1e-6 rtol 1e-5; fp32 m, v:
 * atol 1e-6*s, 1e-6*s^2, rtol 1e-5 (s = the scaled gradient magnitude);
 * bf16 m, v: rtol 2^-6 (two bf16 ulp) plus the same atol, against the double
 * value, and after each step the reference adopts the stored bf16 state.
 * Also: every level equals scalar bit for bit; fp32-state results equal
 * zo_adam_step_ex() bit for bit; param_out equals RNE(param) bit for bit.
 */
static void test_combinations(void) {
  enum { NSTEP = 3, NSHARD = 3 };
  int combos = 0;
  for (size_t hs = 0; hs < sizeof k_hsets / sizeof *k_hsets; hs++)
    for (int gi = 0; gi < 3; gi++)
      for (int si = 0; si < 2; si++)
        for (int oi = 0; oi < 4; oi++)
          for (int mode = 0; mode < 2; mode++)
            for (int bc = 0; bc < 2; bc++)
              for (int sh = 0; sh < NSHARD; sh++) {
                const hset *H = &k_hsets[hs];
                zo_dtype gt = k_dtypes[gi], st = si ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
                zo_dtype ot = oi ? k_dtypes[oi - 1] : ZO_DTYPE_F32;
                size_t n = sh == 0 ? 1 + rnd() % 40 : 1 + 2 * (rnd() % 400);
                uint64_t seed = rnd() % 3 == 0 ? 0xfffffffffffffff0ull + rnd() % 8
                                               : rnd(); /* also wrap the key */
                double gmag = H->gmag[gi];
                /* initial state and NSTEP gradients, as doubles exactly representable in the dtypes */
                float *p0 = malloc(n * 4), *m0 = malloc(n * 4), *v0 = malloc(n * 4),
                      *gs = malloc(NSTEP * n * 4);
                for (size_t i = 0; i < n; i++) {
                  p0[i] = (float)urand(-1, 1);
                  m0[i] = (float)(urand(-0.1, 0.1) * gmag * H->scale);
                  v0[i] = (float)(urand(0, 0.01) * gmag * gmag * H->scale * H->scale);
                }
                for (size_t i = 0; i < NSTEP * n; i++) gs[i] = (float)(urand(-1, 1) * gmag);
                float *sc_p = malloc(n * 4);
                char *sc_m = malloc(n * 4), *sc_v = malloc(n * 4), *sc_o = malloc(n * 4);
                combos++;
                for (int li = 0; li < 3; li++) {
                  zo_simd lvl = k_levels[li];
                  if (!zo_simd_supported(lvl)) continue;
                  shardbuf S;
                  sb_alloc(&S, n, gt, st, ot, oi != 0);
                  double *rp = malloc(n * 8), *rm = malloc(n * 8), *rv = malloc(n * 8);
                  for (size_t i = 0; i < n; i++) {
                    S.p[i] = p0[i];
                    store_f(S.m, st, i, m0[i]);
                    store_f(S.v, st, i, v0[i]);
                    rp[i] = p0[i];
                    rm[i] = load_d(S.m, st, i);
                    rv[i] = load_d(S.v, st, i);
                  }
                  char ctx[200];
                  int bad = 0;
                  for (int t = 1; t <= NSTEP && !bad; t++) {
                    zo_adam_hparams hp = {H->lr, H->b1, H->b2,   H->eps, H->wd, (zo_adam_mode)mode,
                                          bc,    t,     H->scale};
                    for (size_t i = 0; i < n; i++) store_f(S.g, gt, i, gs[(size_t)(t - 1) * n + i]);
                    zo_adam_shard shd = {S.p, S.g, gt, S.m, S.v, st, S.out, ot, n, seed};
                    /* fp32 states: the same step through zo_adam_step_ex must give the same bits */
                    float *xp = NULL, *xm = NULL, *xv = NULL;
                    char *xo = NULL;
                    if (st == ZO_DTYPE_F32) {
                      xp = malloc(n * 4), xm = malloc(n * 4), xv = malloc(n * 4),
                      xo = malloc(n * 4);
                      memcpy(xp, S.p, n * 4), memcpy(xm, S.m, n * 4), memcpy(xv, S.v, n * 4);
                      CHECK_OK(
                          zo_adam_step_ex(&hp, xp, S.g, gt, xm, xv, oi ? xo : NULL, ot, n, lvl, 1));
                    }
                    double *pp_prev = malloc(n * 8), *pm_prev = malloc(n * 8),
                           *pv_prev = malloc(n * 8);
                    for (size_t i = 0; i < n; i++)
                      pp_prev[i] = S.p[i], pm_prev[i] = load_d(S.m, st, i),
                      pv_prev[i] = load_d(S.v, st, i);
                    zo_adam_result res = {-1, -1};
                    CHECK_OK(zo_adam_update(&hp, &shd, 0, lvl, &res));
                    CHECK_EQ(res.nonfinite, 0);
                    CHECK_EQ(res.skipped, 0);
                    snprintf(ctx, sizeof ctx,
                             "%s hset %zu grad %s state %s out %s mode %d bc %d n %zu step %d",
                             zo_simd_name(lvl), hs, zo_dtype_name(gt), zo_dtype_name(st),
                             oi ? zo_dtype_name(ot) : "none", mode, bc, n, t);
                    double s = gmag * H->scale > 1 ? gmag * H->scale : 1;
                    double *gotp = malloc(n * 8), *gotm = malloc(n * 8), *gotv = malloc(n * 8);
                    for (size_t i = 0; i < n; i++) {
                      ref_elem(&hp, &rp[i], load_d(S.g, gt, i), &rm[i], &rv[i]);
                      gotp[i] = S.p[i];
                      gotm[i] = load_d(S.m, st, i);
                      gotv[i] = load_d(S.v, st, i);
                    }
                    double srt = st == ZO_DTYPE_BF16 ? 1.0 / 64 : 1e-5; /* bf16: 2 ulp */
                    bad += CHECK_CLOSE_ARRAY(ctx, gotp, rp, n, 1e-6, 1e-5) != 0;
                    bad += CHECK_CLOSE_ARRAY(ctx, gotm, rm, n, 1e-6 * s, srt) != 0;
                    bad += CHECK_CLOSE_ARRAY(ctx, gotv, rv, n, 1e-6 * s * s, srt) != 0;
                    if (st == ZO_DTYPE_BF16) {
                      /* the documented hash applied to the float32 update (emulated here op by op) gives the
                         stored bf16 bits exactly */
                      for (size_t i = 0; i < n && !bad; i++) {
                        uint32_t h = sr_hash(seed + i, (uint32_t)t);
                        float mf, vf;
                        f32_update(&hp, (float)load_d(S.g, gt, i), (float)pm_prev[i],
                                   (float)pv_prev[i], (float)pp_prev[i], &mf, &vf);
                        uint16_t gm = ((uint16_t *)S.m)[i], gv = ((uint16_t *)S.v)[i];
                        if (gm != f2b_sr(mf, h & 0xffff) || gv != f2b_sr(vf, h >> 16))
                          bad += !FAIL_AT(
                              "%s: bf16 state %zu: m 0x%04x vs SR 0x%04x, v 0x%04x vs 0x%04x", ctx,
                              i, gm, f2b_sr(mf, h & 0xffff), gv, f2b_sr(vf, h >> 16));
                      }
                      for (size_t i = 0; i < n; i++) rm[i] = gotm[i], rv[i] = gotv[i];
                    }
                    if (oi) { /* copy-out == RNE(updated fp32 param), bit for bit */
                      char *want = malloc(n * 4);
                      CHECK_OK(zo_cast_ex(want, ot, S.p, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1));
                      bad += CHECK_BYTES(ctx, S.out, want, n * zo_dtype_size(ot)) != 0;
                      if (ot == ZO_DTYPE_BF16)
                        for (size_t i = 0; i < n; i++)
                          if (((uint16_t *)S.out)[i] != f2b_rne(S.p[i])) {
                            bad += !FAIL_AT("%s: out[%zu] 0x%04x != RNE 0x%04x", ctx, i,
                                            ((uint16_t *)S.out)[i], f2b_rne(S.p[i]));
                            break;
                          }
                      free(want);
                    }
                    if (xp) {
                      bad += CHECK_BYTES(ctx, S.p, xp, n * 4) != 0;
                      bad += CHECK_BYTES(ctx, S.m, xm, n * 4) != 0;
                      bad += CHECK_BYTES(ctx, S.v, xv, n * 4) != 0;
                      if (oi) bad += CHECK_BYTES(ctx, S.out, xo, n * zo_dtype_size(ot)) != 0;
                      free(xp), free(xm), free(xv), free(xo);
                    }
                    free(gotp), free(gotm), free(gotv), free(pp_prev), free(pm_prev), free(pv_prev);
                  }
                  if (!bad) { /* every level equals scalar, bit for bit */
                    if (lvl == ZO_SIMD_SCALAR) {
                      memcpy(sc_p, S.p, n * 4);
                      memcpy(sc_m, S.m, n * zo_dtype_size(st));
                      memcpy(sc_v, S.v, n * zo_dtype_size(st));
                      if (oi) memcpy(sc_o, S.out, n * zo_dtype_size(ot));
                    } else {
                      CHECK_BYTES(ctx, S.p, sc_p, n * 4);
                      CHECK_BYTES(ctx, S.m, sc_m, n * zo_dtype_size(st));
                      CHECK_BYTES(ctx, S.v, sc_v, n * zo_dtype_size(st));
                      if (oi) CHECK_BYTES(ctx, S.out, sc_o, n * zo_dtype_size(ot));
                    }
                  }
                  free(rp), free(rm), free(rv);
                  sb_free(&S);
                  if (zo_test_failures > 20) {
                    fprintf(stderr, "too many failures, stopping\n");
                    exit(1);
                  }
                }
                free(p0), free(m0), free(v0), free(gs), free(sc_p), free(sc_m), free(sc_v),
                    free(sc_o);
              }
  printf("combinations: %d shards checked at every supported level\n", combos);
}

/*
 * Test 2: inf/NaN gradients at the head, middle and tail of a shard, each
 * level and grad dtype: the flag is raised; with ZO_ADAM_SKIP_NONFINITE every
 * array is byte-for-byte unchanged; without it the update runs. A clean shard
 * reports 0.
 */
static void test_nonfinite(void) {
  const size_t n = 1001;
  for (int li = 0; li < 3; li++) {
    zo_simd lvl = k_levels[li];
    if (!zo_simd_supported(lvl)) continue;
    for (int gi = 0; gi < 3; gi++)
      for (int si = 0; si < 2; si++)
        for (int where = 0; where < 4; where++)
          for (int kind = 0; kind < 3; kind++) {
            zo_dtype gt = k_dtypes[gi], st = si ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
            shardbuf S;
            sb_alloc(&S, n, gt, st, ZO_DTYPE_BF16, 1);
            for (size_t i = 0; i < n; i++) {
              S.p[i] = (float)urand(-1, 1);
              store_f(S.g, gt, i, (float)urand(-1, 1));
              store_f(S.m, st, i, 0.01f);
              store_f(S.v, st, i, 0.001f);
              ((uint16_t *)S.out)[i] = 0xabcd;
            }
            size_t pos = where == 0 ? 0 : where == 1 ? n / 2 : where == 2 ? n - 1 : (size_t)-1;
            float badv = kind == 0 ? INFINITY : kind == 1 ? -INFINITY : NAN;
            if (pos != (size_t)-1) store_f(S.g, gt, pos, badv);
            size_t ssz = zo_dtype_size(st);
            char *cp = malloc(n * 4), *cm = malloc(n * ssz), *cv = malloc(n * ssz),
                 *co = malloc(n * 2);
            memcpy(cp, S.p, n * 4), memcpy(cm, S.m, n * ssz), memcpy(cv, S.v, n * ssz),
                memcpy(co, S.out, n * 2);
            zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, ZO_ADAM_MODE_ADAMW,
                                  1,     3,    1.0f};
            zo_adam_shard shd = {S.p, S.g, gt, S.m, S.v, st, S.out, ZO_DTYPE_BF16, n, 7};
            zo_adam_result res = {-1, -1};
            CHECK_OK(zo_adam_update(&hp, &shd, ZO_ADAM_SKIP_NONFINITE, lvl, &res));
            char ctx[128];
            snprintf(ctx, sizeof ctx, "%s grad %s state %s pos %zd kind %d", zo_simd_name(lvl),
                     zo_dtype_name(gt), zo_dtype_name(st), (ssize_t)pos, kind);
            int dirty = pos != (size_t)-1;
            if (!CHECK_EQ(res.nonfinite, dirty) || !CHECK_EQ(res.skipped, dirty))
              fprintf(stderr, "  [%s]\n", ctx);
            if (dirty) {
              CHECK_BYTES(ctx, S.p, cp, n * 4);
              CHECK_BYTES(ctx, S.m, cm, n * ssz);
              CHECK_BYTES(ctx, S.v, cv, n * ssz);
              CHECK_BYTES(ctx, S.out, co, n * 2);
              /* without SKIP: flagged, and the update runs (param changes somewhere) */
              res.nonfinite = res.skipped = -1;
              CHECK_OK(zo_adam_update(&hp, &shd, 0, lvl, &res));
              if (!CHECK_EQ(res.nonfinite, 1) || !CHECK_EQ(res.skipped, 0))
                fprintf(stderr, "  [%s]\n", ctx);
              CHECK(memcmp(S.p, cp, n * 4) != 0);
            } else {
              CHECK(memcmp(S.p, cp, n * 4) != 0);
            }
            free(cp), free(cm), free(cv), free(co);
            sb_free(&S);
          }
  }
}

/*
 * Test 3: why stochastic rounding: with beta2 = 0.999, v0 = 1 and g^2 = 1.5
 * every step, v(t) = 1.5 - 0.5*0.999^t. Round-to-nearest bf16 would keep v at
 * 1.0 forever; the mean of the bf16 v over 4096 elements after 1000 steps
 * must be within 1% of v(1000) = 1.316. Also m tracks g (beta1 0.9).
 */
static void test_sr_tracks(void) {
  const size_t n = 4096;
  uint16_t *m = malloc(n * 2), *v = malloc(n * 2);
  float *p = malloc(n * 4), *g = malloc(n * 4);
  for (size_t i = 0; i < n; i++) m[i] = 0, v[i] = 0x3f80, p[i] = 0, g[i] = (float)sqrt(1.5);
  zo_adam_shard shd = {p, g, ZO_DTYPE_F32, m, v, ZO_DTYPE_BF16, NULL, ZO_DTYPE_F32, n, 99};
  for (int t = 1; t <= 1000; t++) {
    zo_adam_hparams hp = {0.0f, 0.9f, 0.999f, 1e-8f, 0.0f, ZO_ADAM_MODE_ADAMW, 0, t, 1.0f};
    CHECK_OK(zo_adam_update(&hp, &shd, 0, ZO_SIMD_AUTO, NULL));
  }
  double sv = 0, sm = 0;
  for (size_t i = 0; i < n; i++) sv += b2d(v[i]), sm += b2d(m[i]);
  double want_v = 1.5 - 0.5 * pow(0.999, 1000);
  CHECK_CLOSE(sv / n, want_v, 0.0, 0.01);
  CHECK_CLOSE(sm / n, sqrt(1.5), 0.0, 0.01);
  free(m), free(v), free(p), free(g);
}

/* Test 4: the rounding depends on index + seed only: one shard equals two halves with seeds s and s + k. */
static void test_seed_split(void) {
  const size_t n = 3001, k = 1234;
  uint64_t seed = 0xffffffffull - 700; /* the key's low word wraps inside the shard */
  for (int li = 0; li < 3; li++) {
    zo_simd lvl = k_levels[li];
    if (!zo_simd_supported(lvl)) continue;
    float *p = malloc(n * 4), *g = malloc(n * 4), *p2 = malloc(n * 4);
    uint16_t *m = malloc(n * 2), *v = malloc(n * 2), *m2 = malloc(n * 2), *v2 = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
      p[i] = p2[i] = (float)urand(-1, 1);
      g[i] = (float)urand(-1, 1);
      m[i] = m2[i] = f2b_rne((float)urand(-0.1, 0.1));
      v[i] = v2[i] = f2b_rne((float)urand(0, 0.1));
    }
    zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, ZO_ADAM_MODE_ADAMW, 1, 5, 1.0f};
    zo_adam_shard a = {p, g, ZO_DTYPE_F32, m, v, ZO_DTYPE_BF16, NULL, ZO_DTYPE_F32, n, seed};
    CHECK_OK(zo_adam_update(&hp, &a, 0, lvl, NULL));
    zo_adam_shard b1 = {p2, g, ZO_DTYPE_F32, m2, v2, ZO_DTYPE_BF16, NULL, ZO_DTYPE_F32, k, seed};
    zo_adam_shard b2 = {p2 + k,        g + k, ZO_DTYPE_F32, m2 + k, v2 + k,
                        ZO_DTYPE_BF16, NULL,  ZO_DTYPE_F32, n - k,  seed + k};
    CHECK_OK(zo_adam_update(&hp, &b1, 0, lvl, NULL));
    CHECK_OK(zo_adam_update(&hp, &b2, 0, lvl, NULL));
    CHECK_BYTES("seed split m", m2, m, n * 2);
    CHECK_BYTES("seed split v", v2, v, n * 2);
    CHECK_BYTES("seed split p", p2, p, n * 4);
    free(p), free(g), free(p2), free(m), free(v), free(m2), free(v2);
  }
}

/*
 * Test 5: zo_grad_sqnorm_ex for each dtype against a double sum (rtol 1e-12),
 * bit-identical across levels and n_threads 1, 2, 3; F32 equals
 * zo_grad_sqnorm(); inf gives nonfinite.
 */
static void test_sqnorm(void) {
  const size_t n = 300007;
  for (int gi = 0; gi < 3; gi++) {
    zo_dtype gt = k_dtypes[gi];
    char *g = malloc(n * 4 + 8);
    void *ga = g + zo_dtype_size(gt); /* unaligned */
    double ref = 0;
    for (size_t i = 0; i < n; i++) {
      store_f(ga, gt, i, (float)urand(-2, 2));
      double x = load_d(ga, gt, i);
      ref += x * x;
    }
    double first = -1;
    for (int li = 0; li < 3; li++) {
      if (!zo_simd_supported(k_levels[li])) continue;
      for (int nt = 1; nt <= 3; nt++) {
        double s = -1;
        int nf = -1;
        CHECK_OK(zo_grad_sqnorm_ex(ga, gt, n, k_levels[li], nt, &s, &nf));
        CHECK_EQ(nf, 0);
        CHECK_CLOSE(s, ref, 0.0, 1e-12);
        if (first < 0) first = s;
        if (memcmp(&s, &first, 8) != 0)
          FAIL_AT("sqnorm %s %s threads %d: %.17g != %.17g", zo_dtype_name(gt),
                  zo_simd_name(k_levels[li]), nt, s, first);
      }
    }
    if (gt == ZO_DTYPE_F32) {
      double s0 = -1;
      CHECK_OK(zo_grad_sqnorm((const float *)ga, n, ZO_SIMD_AUTO, 2, &s0, NULL));
      CHECK(memcmp(&s0, &first, 8) == 0);
    }
    store_f(ga, gt, n / 3, INFINITY);
    int nf = 0;
    double s = 0;
    CHECK_OK(zo_grad_sqnorm_ex(ga, gt, n, ZO_SIMD_AUTO, 2, &s, &nf));
    CHECK_EQ(nf, 1);
    free(g);
  }
}

/* Test 6: ZO_ADAM_NO_NT_STORES changes no bit (64-byte aligned arrays, so the default streams param_out). */
static void test_no_nt(void) {
  const size_t n = 10007;
  for (int li = 0; li < 3; li++) {
    zo_simd lvl = k_levels[li];
    if (!zo_simd_supported(lvl)) continue;
    float *p[2], *m[2], *v[2];
    uint16_t *o[2];
    float *g = aligned_alloc(64, 40064);
    for (size_t i = 0; i < n; i++) g[i] = (float)urand(-1, 1);
    for (int k = 0; k < 2; k++) {
      p[k] = aligned_alloc(64, 40064), m[k] = aligned_alloc(64, 40064),
      v[k] = aligned_alloc(64, 40064);
      o[k] = aligned_alloc(64, 20032);
      uint64_t r = 11;
      for (size_t i = 0; i < n; i++)
        p[k][i] = zo_test_rand_pm1f(&r), m[k][i] = 0.01f * zo_test_rand_pm1f(&r), v[k][i] = 0.01f,
        o[k][i] = 0;
      zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, ZO_ADAM_MODE_ADAMW, 1, 2, 1.0f};
      zo_adam_shard s = {p[k],         g,    ZO_DTYPE_F32,  m[k], v[k],
                         ZO_DTYPE_F32, o[k], ZO_DTYPE_BF16, n,    0};
      CHECK_OK(zo_adam_update(&hp, &s, k ? ZO_ADAM_NO_NT_STORES : 0, lvl, NULL));
    }
    CHECK_BYTES("no-nt p", p[1], p[0], n * 4);
    CHECK_BYTES("no-nt m", m[1], m[0], n * 4);
    CHECK_BYTES("no-nt v", v[1], v[0], n * 4);
    CHECK_BYTES("no-nt out", o[1], o[0], n * 2);
    for (int k = 0; k < 2; k++) free(p[k]), free(m[k]), free(v[k]), free(o[k]);
    free(g);
  }
}

/* Test 7: argument errors. */
static void test_errors(void) {
  float p[4] = {0}, g[4] = {0}, m[4] = {0}, v[4] = {0};
  zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, ZO_ADAM_MODE_ADAMW, 1, 1, 1.0f};
  zo_adam_shard s = {p, g, ZO_DTYPE_F32, m, v, ZO_DTYPE_F32, NULL, ZO_DTYPE_F32, 4, 0};
  CHECK_OK(zo_adam_update(&hp, &s, 0, ZO_SIMD_AUTO, NULL));
  CHECK_ST(zo_adam_update(NULL, &s, 0, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_update(&hp, NULL, 0, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_update(&hp, &s, 0x80, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_update(&hp, &s, 0, (zo_simd)9, NULL), ZO_ERR_INVALID_ARG);
  zo_adam_shard b = s;
  b.state_dtype = ZO_DTYPE_F16;
  CHECK_ST(zo_adam_update(&hp, &b, 0, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  b = s;
  b.grad_dtype = (zo_dtype)7;
  CHECK_ST(zo_adam_update(&hp, &b, 0, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  b = s;
  b.exp_avg = NULL;
  CHECK_ST(zo_adam_update(&hp, &b, 0, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  b.n = 0;
  CHECK_OK(zo_adam_update(&hp, &b, 0, ZO_SIMD_AUTO, NULL));
  b = s;
  b.param_out = p;
  b.out_dtype = (zo_dtype)5;
  CHECK_ST(zo_adam_update(&hp, &b, 0, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  zo_adam_hparams bad = hp;
  bad.beta2 = 1.0f;
  CHECK_ST(zo_adam_update(&bad, &s, 0, ZO_SIMD_AUTO, NULL), ZO_ERR_INVALID_ARG);
  double sq;
  CHECK_ST(zo_grad_sqnorm_ex(g, (zo_dtype)3, 4, ZO_SIMD_AUTO, 1, &sq, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_grad_sqnorm_ex(NULL, ZO_DTYPE_F32, 4, ZO_SIMD_AUTO, 1, &sq, NULL),
           ZO_ERR_INVALID_ARG);
}

int main(void) {
  test_combinations();
  test_nonfinite();
  test_sr_tracks();
  test_seed_split();
  test_sqnorm();
  test_no_nt();
  test_errors();
  return zo_test_finish("test_adam_fused");
}
