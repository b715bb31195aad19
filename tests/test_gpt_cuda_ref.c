/*
 * test_gpt_cuda_ref.c - the host references of the fused CUDA kernel set
 * (models/gpt_cuda_ref.h) against the CPU model's math (models/gpt.c): the
 * fused classifier's losses against gpt_forward()'s loss on the same logits
 * (gpt_logits()) and its gradient against the two-pass softmax and central
 * differences; the GELU epilogues against double-precision GELU and the
 * baseline's two roundings (the bound the GPU check can hold them to); the
 * chunked LayerNorm backward against a double reference. No GPU needed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_cuda_ref.h"
#include "zo_test.h"

static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* One unit in the last place of bf16 at |x| (2^(e-7)); the smallest normal's for 0. */
static float bf16_ulp(float x) {
  int e;
  (void)frexpf(fabsf(x) > 1e-30f ? x : 1e-30f, &e);
  return ldexpf(1.0f, e - 8);
}

static void test_bf16(void) {
  CHECK(gcr_bf16(1.0f) == 1.0f);
  CHECK(gcr_bf16(1.0f + 0x1p-8f) == 1.0f);               /* a tie: to even */
  CHECK(gcr_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f); /* a tie: to even, upwards */
  CHECK(gcr_bf16(1.0f + 0x1p-7f) == 1.0f + 0x1p-7f);     /* representable */
  CHECK(gcr_bf16(-2.0f - 0x1p-9f) == -2.0f);
  CHECK(isnan(gcr_bf16(NAN)));
  CHECK(isinf(gcr_bf16(INFINITY)));
}

/* The fused classifier on the CPU model's own logits: the same mean loss as gpt_forward(). */
static void test_classifier_vs_model(void) {
  char err[256];
  const gpt_config cfg = {.n_layer = 1, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab = 256};
  const int B = 2, T = 8, N = B * T, V = cfg.vocab;
  gpt_model *m = NULL;
  if (gpt_create(&cfg, B, &m, err, sizeof err) != 0) {
    FAIL_AT("gpt_create: %s", err);
    return;
  }
  for (int i = 0; i < gpt_num_params(&cfg); i++) gpt_param_init(&cfg, i, 11, gpt_weight(m, i));
  /* larger logits than at init: scale wte (the LM head) so the softmax is far from uniform */
  float *wte = gpt_weight(m, 0);
  for (size_t i = 0; i < (size_t)V * cfg.d_model; i++) wte[i] *= 40.0f;
  uint8_t in[16], tg[16];
  uint64_t rs = 5;
  for (int n = 0; n < N; n++) in[n] = (uint8_t)(zo_test_rand64(&rs) % 256), tg[n] = in[(n + 1) % N];
  const float loss = gpt_forward(m, in, tg, B, T);
  REQUIRE(isfinite(loss));
  const float *logits = gpt_logits(m);
  float *dx = malloc((size_t)V * sizeof *dx);
  REQUIRE(dx != NULL);
  const int threads[] = {512, 7, 1};
  for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
    double sum = 0.0, max_dev = 0.0;
    for (int n = 0; n < N; n++) {
      const float *x = logits + (size_t)n * V;
      float l;
      REQUIRE(gcr_classifier_row(x, V, tg[n], 1.0f / N, threads[ti], &l, dx) == 0);
      sum += l;
      /* the gradient against the two-pass softmax in double, (p - onehot) / N */
      double mx = x[0], s = 0.0, dsum = 0.0;
      for (int v = 1; v < V; v++) mx = x[v] > mx ? x[v] : mx;
      for (int v = 0; v < V; v++) s += exp((double)x[v] - mx);
      for (int v = 0; v < V; v++) {
        const double want = (exp((double)x[v] - mx) / s - (v == tg[n])) / N;
        const double dev = fabs(dx[v] - want);
        max_dev = dev > max_dev ? dev : max_dev;
        dsum += dx[v];
      }
      CHECK(fabs(dsum) < 1e-6); /* softmax - onehot sums to 0 */
    }
    const double mean = sum / N;
    if (!CHECK(fabs(mean - loss) <= 2e-5 * fabs(loss)))
      printf("threads %d: reference mean loss %.7f, gpt_forward %.7f\n", threads[ti], mean, loss);
    if (!CHECK(max_dev < 1e-6 / N * 4))
      printf("threads %d: dlogits deviate by %.3g\n", threads[ti], max_dev);
  }
  printf("classifier: gpt_forward loss %.6f (N %d, V %d); reference rows agree\n", loss, N, V);
  free(dx);
  gpt_destroy(m);
}

/* dlogits is the derivative of the loss: central differences of the reference's own loss on one
 * row. */
static void test_classifier_derivative(void) {
  enum { V = 64 };
  float x[V], dx[V], xp[V];
  uint64_t rs = 9;
  for (int v = 0; v < V; v++) x[v] = 3.0f * zo_test_rand_pm1f(&rs);
  const int target = 17;
  float l0;
  REQUIRE(gcr_classifier_row(x, V, target, 1.0f, 4, &l0, dx) == 0);
  const float h = 1e-2f;
  for (int v = 0; v < V; v += 5) {
    float lp, lm;
    memcpy(xp, x, sizeof x);
    xp[v] = x[v] + h;
    REQUIRE(gcr_classifier_row(xp, V, target, 1.0f, 4, &lp, NULL) == 0);
    xp[v] = x[v] - h;
    REQUIRE(gcr_classifier_row(xp, V, target, 1.0f, 4, &lm, NULL) == 0);
    CHECK_CLOSE(dx[v], (lp - lm) / (2 * h), 2e-3, 1e-2);
  }
  /* in place (the kernel overwrites the logits) gives the same gradient */
  float y[V], l1;
  memcpy(y, x, sizeof x);
  REQUIRE(gcr_classifier_row(y, V, target, 1.0f, 4, &l1, y) == 0);
  CHECK(l1 == l0);
  CHECK(memcmp(y, dx, sizeof y) == 0);
  /* argument checks */
  float l;
  CHECK(gcr_classifier_row(x, 60, 0, 1.0f, 4, &l, NULL) == -1); /* not a multiple of 8 */
  CHECK(gcr_classifier_row(x, V, V, 1.0f, 4, &l, NULL) == -1);
  CHECK(gcr_classifier_row(x, V, 0, 1.0f, 0, &l, NULL) == -1);
}

static void test_gelu(void) {
  double max_f = 0.0, max_g = 0.0;
  for (int i = -600; i <= 600; i++) {
    const float x = (float)i / 100.0f;
    const double f = fabs(gcr_gelu(x) - gelu_d(x));
    const double g = fabs(gcr_gelu_grad(x) - (gelu_d(x + 1e-4) - gelu_d(x - 1e-4)) / 2e-4);
    max_f = f > max_f ? f : max_f;
    max_g = g > max_g ? g : max_g;
  }
  CHECK(max_f < 2e-6);
  CHECK(max_g < 1e-5);
  printf("gelu: max |fp32 - double| %.2g, derivative against central differences %.2g\n", max_f,
         max_g);
}

/* bf16-valued random array */
static void fill_bf16(float *a, size_t n, float scale, uint64_t *rs) {
  for (size_t i = 0; i < n; i++) a[i] = gcr_bf16(scale * zo_test_rand_pm1f(rs));
}

/*
 * The GELU epilogue against the baseline's form (the product rounded to
 * bf16 with the bias, then GELU of the rounded value, rounded again): the
 * pre-activations are equal; the outputs differ by at most the second
 * rounding plus GELU's slope (< 1.13) times half a bf16 unit of the input.
 */
static void test_linear_gelu(void) {
  enum { N = 6, IC = 24, OC = 40 };
  float inp[N * IC], W[OC * IC], bias[OC], out[N * OC], pre[N * OC];
  uint64_t rs = 21;
  fill_bf16(inp, N * IC, 2.0f, &rs);
  fill_bf16(W, OC * IC, 0.5f, &rs);
  fill_bf16(bias, OC, 0.5f, &rs);
  gcr_linear_gelu(out, pre, inp, W, bias, N, IC, OC);
  int bad = 0, differ = 0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      float acc = 0.0f;
      for (int k = 0; k < IC; k++) acc += inp[n * IC + k] * W[o * IC + k];
      const float pre_base = gcr_bf16(acc + bias[o]);
      const float out_base = gcr_bf16(gcr_gelu(pre_base));
      const float o_f = out[n * OC + o];
      bad += pre[n * OC + o] != pre_base;
      const float bound = 1.13f * 0.5f * bf16_ulp(pre_base) + bf16_ulp(o_f);
      bad += fabsf(o_f - out_base) > bound;
      differ += o_f != out_base;
      bad += fabsf(o_f - (float)gelu_d(acc + bias[o])) > 0.5f * bf16_ulp(o_f) + 1e-6f;
    }
  CHECK_EQ(bad, 0);
  printf("linear+gelu epilogue: %d of %d outputs differ from the baseline's two roundings (within "
         "the bound)\n",
         differ, N * OC);
}

/* DGELU_BGRAD against double: dinp within one bf16 rounding, the bias gradient within fp32 sums. */
static void test_dgelu_bgrad(void) {
  enum { N = 8, IC = 32, OC = 12 };
  float dout[N * OC], W[OC * IC], pre[N * IC], dinp[N * IC], bg[IC];
  uint64_t rs = 33;
  fill_bf16(dout, N * OC, 1.0f, &rs);
  fill_bf16(W, OC * IC, 0.5f, &rs);
  fill_bf16(pre, N * IC, 3.0f, &rs);
  for (int i = 0; i < IC; i++) bg[i] = 0.25f; /* added to */
  gcr_dgelu_bgrad(dinp, bg, dout, W, pre, N, IC, OC);
  int bad = 0;
  for (int i = 0; i < IC; i++) {
    double sum = 0.0;
    for (int n = 0; n < N; n++) {
      double acc = 0.0;
      for (int o = 0; o < OC; o++) acc += (double)dout[n * OC + o] * W[o * IC + i];
      const double h = 1e-4, x = pre[n * IC + i];
      const double d = acc * (gelu_d(x + h) - gelu_d(x - h)) / (2 * h);
      sum += d;
      bad += fabs(dinp[n * IC + i] - d) > 0.5 * bf16_ulp((float)d) + 1e-5;
    }
    bad += fabs(bg[i] - (0.25 + sum)) > 1e-4;
  }
  CHECK_EQ(bad, 0);
}

/* Chunked LayerNorm backward against double, for several chunk counts (1 is gpt.c's row order). */
static void test_layernorm_backward(void) {
  enum { N = 37, C = 24 };
  float x[N * C], dy[N * C], w[C], mean[N], rstd[N];
  uint64_t rs = 44;
  for (int i = 0; i < N * C; i++)
    x[i] = 2.0f * zo_test_rand_pm1f(&rs), dy[i] = zo_test_rand_pm1f(&rs);
  for (int c = 0; c < C; c++) w[c] = 1.0f + 0.3f * zo_test_rand_pm1f(&rs);
  double dxw[N * C], dww[C] = {0}, dbw[C] = {0};
  for (int n = 0; n < N; n++) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += x[n * C + c];
    mu /= C;
    for (int c = 0; c < C; c++) var += (x[n * C + c] - mu) * (x[n * C + c] - mu);
    const double r = 1.0 / sqrt(var / C + 1e-5);
    mean[n] = (float)mu, rstd[n] = (float)r;
    double a = 0, b = 0;
    for (int c = 0; c < C; c++) {
      const double xh = (x[n * C + c] - mu) * r;
      a += w[c] * dy[n * C + c], b += w[c] * dy[n * C + c] * xh;
      dww[c] += dy[n * C + c] * xh, dbw[c] += dy[n * C + c];
    }
    a /= C, b /= C;
    for (int c = 0; c < C; c++) {
      const double xh = (x[n * C + c] - mu) * r;
      dxw[n * C + c] = 0.5 + r * (w[c] * dy[n * C + c] - a - xh * b);
    }
  }
  const int chunks[] = {1, 4, 128, 37}, group[] = {64, 3, 64, 5};
  for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
    float dx[N * C], dw[C], db[C];
    for (int i = 0; i < N * C; i++) dx[i] = 0.5f;
    for (int c = 0; c < C; c++) dw[c] = db[c] = 0.0f;
    REQUIRE(gcr_layernorm_backward_chunked(dx, dw, db, dy, x, mean, rstd, w, N, C, chunks[k],
                                           group[k]) == 0);
    int bad = 0;
    for (int i = 0; i < N * C; i++) bad += fabs(dx[i] - dxw[i]) > 1e-4;
    for (int c = 0; c < C; c++) bad += fabs(dw[c] - dww[c]) > 1e-4 || fabs(db[c] - dbw[c]) > 1e-4;
    if (!CHECK_EQ(bad, 0)) printf("chunks %d\n", chunks[k]);
  }
  float dx[1], dw[1], db[1];
  CHECK(gcr_layernorm_backward_chunked(dx, dw, db, dy, x, mean, rstd, w, 1, 1, 0, 64) == -1);
  CHECK(gcr_layernorm_backward_chunked(dx, dw, db, dy, x, mean, rstd, w, 1, 1, 1, 0) == -1);
}

/*
 * Flash attention's form against the baseline's (probabilities rounded to
 * bf16 before att v) and against double: the reference's output is within one
 * bf16 rounding of the exact value, the stats are the exact logsumexp, and the
 * causal mask holds (changing a later key or value changes no earlier output).
 */
static void test_attention(void) {
  enum { B = 2, T = 9, NH = 2, HS = 8, C = NH * HS };
  float qkv[B * T * 3 * C], out[B * T * C], stats[B * NH * T];
  uint64_t rs = 55;
  fill_bf16(qkv, sizeof qkv / sizeof *qkv, 1.5f, &rs);
  REQUIRE(gcr_attention_causal(out, stats, qkv, B, T, NH, HS) == 0);
  int bad = 0, differ = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float *q = qkv + (b * T + i) * 3 * C + h * HS;
        double sc[T], mx = -1e300, sum = 0.0;
        for (int j = 0; j <= i; j++) {
          const float *k = qkv + (b * T + j) * 3 * C + C + h * HS;
          double s = 0.0;
          for (int d = 0; d < HS; d++) s += (double)q[d] * k[d];
          sc[j] = s / sqrt((double)HS);
          mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int j = 0; j <= i; j++) sum += exp(sc[j] - mx);
        bad += fabs(stats[(b * NH + h) * T + i] - (mx + log(sum))) > 1e-5;
        for (int d = 0; d < HS; d++) {
          double o = 0.0;
          float ob = 0.0f; /* the baseline's: bf16 probabilities, then att v rounded once */
          for (int j = 0; j <= i; j++) {
            const float v = qkv[(b * T + j) * 3 * C + 2 * C + h * HS + d];
            o += exp(sc[j] - mx) / sum * v;
            ob += gcr_bf16((float)(exp(sc[j] - mx) / sum)) * v;
          }
          const float got = out[(b * T + i) * C + h * HS + d];
          bad += fabs(got - o) > 0.5 * bf16_ulp((float)o) + 1e-6;
          differ += got != gcr_bf16(ob);
        }
      }
  CHECK_EQ(bad, 0);
  /* causality: a changed last key and value move only the last query's output */
  float out2[B * T * C], stats2[B * NH * T];
  for (int d = 0; d < 2 * C; d++) qkv[(T - 1) * 3 * C + C + d] += 0.5f;
  REQUIRE(gcr_attention_causal(out2, stats2, qkv, B, T, NH, HS) == 0);
  CHECK(memcmp(out, out2, (size_t)(T - 1) * C * sizeof *out) == 0);
  CHECK(memcmp(out + (T - 1) * C, out2 + (T - 1) * C, C * sizeof *out) != 0);
  CHECK(gcr_attention_causal(out, stats, qkv, 0, T, NH, HS) == -1);
  printf(
      "attention: %d of %d outputs differ from the baseline's bf16 probabilities (flash attention "
      "keeps them in fp32)\n",
      differ, B * T * C);
}

int main(void) {
  test_bf16();
  test_classifier_vs_model();
  test_classifier_derivative();
  test_gelu();
  test_linear_gelu();
  test_dgelu_bgrad();
  test_layernorm_backward();
  test_attention();
  return zo_test_finish("test_gpt_cuda_ref");
}
