/*
 * test_cast.c - zo_cast / zo_cast_ex between f32, bf16 and f16 against
 * reference conversions written here (bit-wise RNE for bf16, arithmetic in
 * double for f16), exhaustive over the 16-bit types, every SIMD level.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zoffload/adam.h"
#include "zo_test.h"

static uint64_t g_rng = 12345;
static uint64_t rnd64(void) { return zo_test_rand64(&g_rng); }

static float f_of(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

/* bf16 reference: look at the 16 dropped bits; above half rounds up, exactly half rounds to even. */
static uint16_t ref_f32_to_bf16(uint32_t x) {
  if ((x & 0x7fffffff) > 0x7f800000)
    return (uint16_t)((x >> 16) | 0x40); /* quiet NaN, payload truncated */
  uint32_t lower = x & 0xffff, up = x >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (up & 1)))
    up++; /* carries into the exponent, up to inf */
  return (uint16_t)up;
}

/* f16 reference by arithmetic: scale to the target quantum, rint (ties to even) in double, encode. */
static uint16_t ref_f32_to_f16(uint32_t x) {
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  float f = f_of(x);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
  double a = fabs((double)f);
  if (a >= 65520.0) return sign | 0x7c00;
  int e;
  frexp(a, &e);   /* a = fr * 2^e, fr in [0.5, 1) */
  int ue = e - 1; /* a in [2^ue, 2^(ue+1)) */
  if (ue < -14) ue = -14;
  double q = ldexp(1.0, ue - 10);
  double r = nearbyint(a / q) * q; /* exact scaling, RNE */
  if (r == 0) return sign;
  if (r < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)(r / ldexp(1.0, -24)));
  frexp(r, &e);
  ue = e - 1;
  if (ue > 15) return sign | 0x7c00;
  uint16_t mant = (uint16_t)(r / ldexp(1.0, ue) * 1024.0 - 1024.0);
  return (uint16_t)(sign | (uint16_t)((ue + 15) << 10) | mant);
}

/* f16 -> f32 reference; NaNs come back quiet (bit 22 set) with the payload shifted up. */
static uint32_t ref_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 31) return m ? (sign | 0x7fc00000u | ((uint32_t)m << 13)) : (sign | 0x7f800000u);
  double a = e == 0 ? ldexp((double)m, -24) : ldexp(1.0 + m / 1024.0, e - 15);
  return sign | bits_of((float)a);
}

static const zo_simd k_levels[] = {ZO_SIMD_SCALAR, ZO_SIMD_AVX2, ZO_SIMD_AVX512};

static const uint32_t k_edges[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000,
    0xff812345, 0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, 0x00800000, 0x80800000, 0x00000001,
    0x80000001, 0x007fffff, 0x00008000, 0x00018000, 0x00017fff, 0x00008001, 0x3f808000, 0x3f818000,
    0x3f807fff, 0x3f808001, 0x3f800000, 0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000,
    0xc77ff000, 0x38800000, 0x387fffff, 0x387fe000, 0x387ff000, 0x33800000, 0x33000000, 0x33000001,
    0xb3000001, 0x33c00000, 0x34400000, 0x34200000, 0x34600000, 0x38000000, 0x3f801000, 0x3f803000,
    0x3f802000, 0x3f800fff, 0x477fffff, 0x7effffff, 0x00400000,
};
#define N_EDGES (sizeof k_edges / sizeof *k_edges)

/* Fill x[0..n) with edge values then random bit patterns (any exponent) and random f16-range floats. */
static void fill_inputs(uint32_t *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (i < N_EDGES)
      x[i] = k_edges[i];
    else if (i % 3 == 0)
      x[i] = (uint32_t)rnd64();
    else if (i % 3 == 1) /* exponents 97..145: the f16 range incl. subnormals and overflow */
      x[i] = (uint32_t)(rnd64() & 0x807fffff) | ((uint32_t)(97 + rnd64() % 49) << 23);
    else /* ties and near-ties for both formats */
      x[i] = ((uint32_t)rnd64() & 0xffff0000u) |
             (uint32_t[]){0x8000, 0x7fff, 0x8001, 0x1000, 0x0fff, 0x3000}[rnd64() % 6];
  }
}

static void test_from_f32(zo_dtype dt) {
  const size_t n = 200003;
  uint32_t *src = malloc((n + 16) * 4);
  uint16_t *dst = malloc((n + 16) * 2), *want = malloc(n * 2);
  fill_inputs(src, n);
  for (size_t i = 0; i < n; i++)
    want[i] = dt == ZO_DTYPE_BF16 ? ref_f32_to_bf16(src[i]) : ref_f32_to_f16(src[i]);
  for (size_t li = 0; li < 3; li++) {
    if (!zo_simd_supported(k_levels[li])) continue;
    for (int th = 1; th <= 2; th++)
      for (int rep = 0; rep < 6; rep++) { /* unaligned and odd sub-ranges exercise the tails */
        size_t off = rep == 0 ? 0 : rnd64() % 16;
        size_t len = rep == 0 ? n : 1 + rnd64() % 70;
        if (off + len > n) len = n - off;
        memset(dst, 0xab, (n + 16) * 2);
        CHECK_OK(zo_cast_ex(dst + 1, dt, src + off, ZO_DTYPE_F32, len, k_levels[li], th));
        int bad = 0;
        for (size_t i = 0; i < len && bad < 10; i++)
          if (dst[1 + i] != want[off + i]) {
            if (!bad)
              FAIL_AT("f32 0x%08x (%.9g) -> %s [%s, %d thr]: got 0x%04x want 0x%04x", src[off + i],
                      (double)f_of(src[off + i]), zo_dtype_name(dt), zo_simd_name(k_levels[li]), th,
                      dst[1 + i], want[off + i]);
            bad++;
          }
        if (dst[0] != 0xabab || dst[1 + len] != 0xabab) {
          FAIL_AT("%s [%s] wrote outside [0, %zu)", zo_dtype_name(dt), zo_simd_name(k_levels[li]),
                  len);
          bad++;
        }
      }
  }
  free(src);
  free(dst);
  free(want);
}

/* All 65536 values of bf16 / f16 widened, checked against the reference, then narrowed back. */
static void test_to_f32_exhaustive(zo_dtype st) {
  const size_t n = 65536;
  uint16_t *h = malloc((n + 8) * 2), *back = malloc(n * 2);
  uint32_t *f = malloc((n + 8) * 4);
  for (size_t i = 0; i < n; i++) h[1 + i] = (uint16_t)i;
  for (size_t li = 0; li < 3; li++) {
    if (!zo_simd_supported(k_levels[li])) continue;
    CHECK_OK(zo_cast_ex(f + 3, ZO_DTYPE_F32, h + 1, st, n, k_levels[li], 2));
    int bad = 0;
    for (size_t i = 0; i < n && bad < 10; i++) {
      uint32_t want = st == ZO_DTYPE_BF16 ? (uint32_t)i << 16 : ref_f16_to_f32((uint16_t)i);
      if (f[3 + i] != want) {
        if (!bad)
          FAIL_AT("%s 0x%04zx -> f32 [%s]: got 0x%08x want 0x%08x", zo_dtype_name(st), i,
                  zo_simd_name(k_levels[li]), f[3 + i], want);
        bad++;
      }
    }
    /* round trip: narrow back; identity except signalling NaNs, which come back quiet */
    CHECK_OK(zo_cast_ex(back, st, f + 3, ZO_DTYPE_F32, n, k_levels[li], 1));
    for (size_t i = 0; i < n && bad < 10; i++) {
      uint16_t want = (uint16_t)i;
      int nan = st == ZO_DTYPE_BF16 ? ((i & 0x7fff) > 0x7f80) : ((i & 0x7fff) > 0x7c00);
      if (nan) want |= st == ZO_DTYPE_BF16 ? 0x40 : 0x200;
      if (back[i] != want) {
        if (!bad)
          FAIL_AT("%s round trip 0x%04zx [%s]: got 0x%04x want 0x%04x", zo_dtype_name(st), i,
                  zo_simd_name(k_levels[li]), back[i], want);
        bad++;
      }
    }
  }
  free(h);
  free(back);
  free(f);
}

/* bf16 <-> f16 (through f32) and same-type copies; all levels agree with the composed references. */
static void test_cross_and_copy(void) {
  const size_t n = 65536;
  uint16_t *h = malloc(n * 2), *o = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
  for (size_t li = 0; li < 3; li++) {
    if (!zo_simd_supported(k_levels[li])) continue;
    int bad = 0;
    CHECK_OK(zo_cast_ex(o, ZO_DTYPE_F16, h, ZO_DTYPE_BF16, n, k_levels[li], 2));
    for (size_t i = 0; i < n && bad < 10; i++) {
      uint16_t want = ref_f32_to_f16((uint32_t)i << 16);
      if (o[i] != want) {
        if (!bad)
          FAIL_AT("bf16 0x%04zx -> f16 [%s]: got 0x%04x want 0x%04x", i, zo_simd_name(k_levels[li]),
                  o[i], want);
        bad++;
      }
    }
    CHECK_OK(zo_cast_ex(o, ZO_DTYPE_BF16, h, ZO_DTYPE_F16, n, k_levels[li], 2));
    for (size_t i = 0; i < n && bad < 10; i++) {
      uint16_t want = ref_f32_to_bf16(ref_f16_to_f32((uint16_t)i));
      if (o[i] != want) {
        if (!bad)
          FAIL_AT("f16 0x%04zx -> bf16 [%s]: got 0x%04x want 0x%04x", i, zo_simd_name(k_levels[li]),
                  o[i], want);
        bad++;
      }
    }
    memset(o, 0, n * 2);
    CHECK_OK(zo_cast_ex(o, ZO_DTYPE_BF16, h, ZO_DTYPE_BF16, n, k_levels[li], 2));
    if (memcmp(o, h, n * 2) != 0) FAIL_AT("bf16 copy differs"), bad++;
  }
  uint32_t fs[100], fd[100];
  for (int i = 0; i < 100; i++) fs[i] = (uint32_t)rnd64();
  CHECK_OK(zo_cast(fd, ZO_DTYPE_F32, fs, ZO_DTYPE_F32, 100, 1));
  if (memcmp(fs, fd, sizeof fs) != 0) FAIL_AT("f32 copy differs");
  free(h);
  free(o);
}

/* f32 -> bf16 -> f32 -> bf16 is stable, and |x - bf16(x)| <= half an ulp of bf16 for normal finite x. */
static void test_round_trip_f32(void) {
  const size_t n = 100000;
  uint32_t *x = malloc(n * 4), *y = malloc(n * 4);
  uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
  for (size_t i = 0; i < n; i++)
    x[i] = (uint32_t)(rnd64() & 0x807fffff) | ((uint32_t)(1 + rnd64() % 253) << 23);
  CHECK_OK(zo_cast(a, ZO_DTYPE_BF16, x, ZO_DTYPE_F32, n, 0));
  CHECK_OK(zo_cast(y, ZO_DTYPE_F32, a, ZO_DTYPE_BF16, n, 0));
  CHECK_OK(zo_cast(b, ZO_DTYPE_BF16, y, ZO_DTYPE_F32, n, 0));
  int bad = 0;
  for (size_t i = 0; i < n && bad < 10; i++) {
    double xv = f_of(x[i]), yv = f_of(y[i]);
    int e;
    frexp(xv, &e);
    double half_ulp = ldexp(1.0, e - 1 - 8); /* bf16 has 8 significant bits */
    if (a[i] != b[i] || !(fabs(xv - yv) <= half_ulp)) {
      if (!bad)
        FAIL_AT("bf16 round trip of %.9g: got %.9g (0x%04x then 0x%04x), |diff| %.3g > %.3g", xv,
                yv, a[i], b[i], fabs(xv - yv), half_ulp);
      bad++;
    }
  }
  free(x), free(y), free(a), free(b);
}

/*
 * Large casts (8 MiB of dst per call: the AVX-512 path streams dst with
 * non-temporal stores and converts F32 -> BF16 32 at a time) at dst offsets
 * of 0 and 1 element equal the scalar level byte for byte, 1 and 2 threads.
 */
static void test_large(void) {
  const size_t n = (size_t)4 << 20;
  uint32_t *src = malloc(n * 4);
  uint16_t *want = malloc(n * 2), *got = aligned_alloc(64, n * 2 + 64);
  fill_inputs(src, n);
  for (size_t i = 0; i < 64; i++)
    src[n / 2 + i] = 0x00000001u + (uint32_t)i * 0x10001u; /* denormals mid-array */
  const zo_dtype dts[] = {ZO_DTYPE_BF16, ZO_DTYPE_F16};
  for (int di = 0; di < 2; di++) {
    CHECK_OK(zo_cast_ex(want, dts[di], src, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1));
    for (size_t li = 1; li < 3; li++) {
      if (!zo_simd_supported(k_levels[li])) continue;
      for (int off = 0; off < 2; off++)
        for (int th = 1; th <= 2; th++) {
          char what[96];
          snprintf(what, sizeof what, "large f32 -> %s [%s, dst offset %d, %d thr]",
                   zo_dtype_name(dts[di]), zo_simd_name(k_levels[li]), off, th);
          memset(got, 0xab, n * 2 + 64);
          CHECK_OK(zo_cast_ex(got + off, dts[di], src, ZO_DTYPE_F32, n, k_levels[li], th));
          CHECK_BYTES(what, got + off, want, n * 2);
          CHECK_EQ(got[off + n], 0xabab);
        }
    }
  }
  free(src), free(want), free(got);
}

static void test_errors(void) {
  float f[4] = {0};
  uint16_t h[4];
  CHECK_ST(zo_cast(NULL, ZO_DTYPE_BF16, f, ZO_DTYPE_F32, 4, 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_cast(h, ZO_DTYPE_BF16, NULL, ZO_DTYPE_F32, 4, 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_cast(h, (zo_dtype)9, f, ZO_DTYPE_F32, 4, 1), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_cast(NULL, ZO_DTYPE_BF16, NULL, ZO_DTYPE_F32, 0, 1));
  CHECK_ST(zo_cast_ex(h, ZO_DTYPE_BF16, f, ZO_DTYPE_F32, 4, (zo_simd)17, 1), ZO_ERR_INVALID_ARG);
}

int main(void) {
  printf("simd best: %s, avx512_bf16: %d\n", zo_simd_name(zo_simd_best()),
         zo_simd_has_avx512_bf16());
  test_from_f32(ZO_DTYPE_BF16);
  printf("f32 -> bf16: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_from_f32(ZO_DTYPE_F16);
  printf("f32 -> f16: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_to_f32_exhaustive(ZO_DTYPE_BF16);
  printf("bf16 -> f32 (all 65536) + round trip: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_to_f32_exhaustive(ZO_DTYPE_F16);
  printf("f16 -> f32 (all 65536) + round trip: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_cross_and_copy();
  printf("bf16 <-> f16, copies: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_round_trip_f32();
  printf("f32 round trip: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_large();
  printf("large casts: %s\n", zo_test_failures ? "FAIL" : "ok");
  test_errors();
  printf("errors: %s\n", zo_test_failures ? "FAIL" : "ok");
  return zo_test_finish("test_cast");
}
