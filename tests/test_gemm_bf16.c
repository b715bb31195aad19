/*
 * test_gemm_bf16.c - the CPU model's bf16 products (models/gemm_bf16.h) against a reference written here:
 * the same bf16 operands widened to double and summed in double. Every layout the model uses (A and B plain or
 * transposed, leading dimensions wider than the rows), overwrite and accumulate, shapes with odd edges; each
 * element within the fp32 accumulation bound K * 2^-23 * sum|a*b| (plus the initial C when accumulating), two
 * calls give the same bits, and the kernel oneDNN picked is named.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
#include "zo_test.h"

static uint64_t g_rng = 777;

static float f_of_bf16(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* a random bf16 in about [-2, 2] (finite, normal or zero) */
static uint16_t rnd_bf16(void) {
  const double u = (double)(zo_test_rand64(&g_rng) >> 11) / 9007199254740992.0 * 4.0 - 2.0;
  float f = (float)u;
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)(x >> 16); /* truncation: any bf16 will do as an operand */
}

static void one(int ta, int tb, int M, int N, int K, int pad, int acc) {
  const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
               nc = (size_t)M * ldc;
  uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
  float *C = malloc(nc * 4), *C0 = malloc(nc * 4), *C2 = malloc(nc * 4);
  REQUIRE(A && B && C && C0 && C2);
  for (size_t i = 0; i < na; i++) A[i] = rnd_bf16();
  for (size_t i = 0; i < nb; i++) B[i] = rnd_bf16();
  for (size_t i = 0; i < nc; i++)
    C0[i] = acc ? (float)((int)(zo_test_rand64(&g_rng) % 2001) - 1000) / 500.0f : 0.0f;
  memcpy(C, C0, nc * 4);
  memcpy(C2, C0, nc * 4);
  char err[512];
  int rc = gemm_bf16_1t(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc, err, sizeof err);
  if (rc) printf("  %s\n", err);
  REQUIRE(rc == 0);
  REQUIRE(gemm_bf16_1t(ta, tb, M, N, K, A, lda, B, ldb, acc, C2, ldc, err, sizeof err) == 0);
  int bad = 0;
  for (int i = 0; i < M && bad < 5; i++)
    for (int j = 0; j < N && bad < 5; j++) {
      double s = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        const double a = f_of_bf16(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
        const double b = f_of_bf16(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
        s += a * b;
        mag += fabs(a * b);
      }
      const double c0 = C0[(size_t)i * ldc + j], want = (acc ? c0 : 0.0) + s;
      const double tol = (K + 2) * ldexp(1.0, -23) * (mag + fabs(c0)) + 1e-30;
      const double got = C[(size_t)i * ldc + j];
      if (!(fabs(got - want) <= tol)) {
        bad++;
        FAIL_AT(
            "ta %d tb %d M %d N %d K %d acc %d: C[%d][%d] = %.9g, reference %.9g (tolerance %.3g)",
            ta, tb, M, N, K, acc, i, j, got, want, tol);
      }
    }
  /* the padding between rows is not written */
  for (int i = 0; i < M; i++)
    for (int j = N; j < ldc; j++) CHECK(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
  CHECK(memcmp(C, C2, nc * 4) == 0);
  free(A), free(B), free(C), free(C0), free(C2);
}

int main(void) {
  const char *isa = gemm_bf16_isa();
  printf("kernel: %s\n", isa);
  if (!strncmp(isa, "unavailable", 11)) {
    printf("skip: oneDNN made no bf16 matmul on this CPU\n");
    return ZO_TEST_SKIP;
  }
  /* the model's four layouts: forward (tb), input gradient (plain), weight gradient (ta) */
  static const int shapes[][3] = {
      {64, 96, 32}, {37, 61, 129}, {128, 512, 64}, {1, 17, 300}, {256, 33, 5}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int acc = 0; acc < 2; acc++)
          one(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], (int)(s % 3) * 7, acc);
  /* K = 0: C = 0 or unchanged; M or N = 0: nothing */
  float c[4] = {1, 2, 3, 4};
  uint16_t z = 0;
  char err[256];
  CHECK(gemm_bf16_1t(0, 0, 2, 2, 0, &z, 1, &z, 2, 1, c, 2, err, sizeof err) == 0 && c[0] == 1 &&
        c[3] == 4);
  CHECK(gemm_bf16_1t(0, 0, 2, 2, 0, &z, 1, &z, 2, 0, c, 2, err, sizeof err) == 0 && c[0] == 0 &&
        c[3] == 0);
  CHECK(gemm_bf16_1t(0, 0, 0, 2, 3, &z, 3, &z, 2, 0, c, 2, err, sizeof err) == 0);
  return zo_test_finish("test_gemm_bf16");
}
