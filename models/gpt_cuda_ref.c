/*
 * gpt_cuda_ref.c - host references of the fused CUDA kernel set's math (API
 * in gpt_cuda_ref.h): plain loops in the kernels' order, fp32 as the kernels
 * compute, bf16 rounding where they round.
 */
#include "gpt_cuda_ref.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

float gcr_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return x; /* NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  memcpy(&r, &u, sizeof r);
  return r;
}

float gcr_gelu(float x) {
  const float u = GELU_K * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

float gcr_gelu_grad(float x) {
  const float u = GELU_K * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  const float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* (m, s) merged with (m2, s2), as merge_ms() in gpt_cuda_fused.cu. */
static void merge_ms(float *m, float *s, float m2, float s2) {
  const float M = *m > m2 ? *m : m2;
  if (M == -INFINITY) return;
  *s = *s * expf(*m - M) + s2 * expf(m2 - M);
  *m = M;
}

int gcr_classifier_row(const float *x, int V, int target, float dscale, int threads, float *loss,
                       float *dx) {
  if (V < 8 || V % 8 != 0 || threads < 1 || target < 0 || target >= V) return -1;
  const float xt = x[target];
  float M = -INFINITY, S = 0.0f;
  for (int t = 0; t < threads; t++) { /* each thread's running state, then merged in thread order */
    float m = -INFINITY, s = 0.0f;
    for (int c = t * 8; c < V; c += threads * 8) {
      float mc = x[c];
      for (int i = 1; i < 8; i++) mc = x[c + i] > mc ? x[c + i] : mc;
      float sc = 0.0f;
      for (int i = 0; i < 8; i++) sc += expf(x[c + i] - mc);
      merge_ms(&m, &s, mc, sc);
    }
    merge_ms(&M, &S, m, s);
  }
  *loss = M + logf(S) - xt;
  if (dx) {
    const float inv = 1.0f / S;
    for (int v = 0; v < V; v++)
      dx[v] = (expf(x[v] - M) * inv - (v == target ? 1.0f : 0.0f)) * dscale;
  }
  return 0;
}

void gcr_linear_gelu(float *out, float *pre, const float *inp, const float *W, const float *bias,
                     int N, int IC, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      float acc = 0.0f;
      for (int k = 0; k < IC; k++) acc += inp[(size_t)n * IC + k] * W[(size_t)o * IC + k];
      const float z = acc + bias[o];
      pre[(size_t)n * OC + o] = gcr_bf16(z);
      out[(size_t)n * OC + o] = gcr_bf16(gcr_gelu(z));
    }
}

void gcr_dgelu_bgrad(float *dinp, float *bgrad, const float *dout, const float *W, const float *pre,
                     int N, int IC, int OC) {
  for (int i = 0; i < IC; i++) {
    float sum = 0.0f;
    for (int n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int o = 0; o < OC; o++) acc += dout[(size_t)n * OC + o] * W[(size_t)o * IC + i];
      const float d = acc * gcr_gelu_grad(pre[(size_t)n * IC + i]);
      dinp[(size_t)n * IC + i] = gcr_bf16(d);
      sum += d;
    }
    bgrad[i] += sum;
  }
}

int gcr_attention_causal(float *out, float *stats, const float *qkv, int B, int T, int NH, int hs) {
  if (B < 1 || T < 1 || NH < 1 || hs < 1) return -1;
  const size_t C = (size_t)NH * hs, row = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float *q = qkv + ((size_t)b * T + i) * row + (size_t)h * hs;
        float mx = -INFINITY;
        for (int j = 0; j <= i; j++) {
          const float *k = qkv + ((size_t)b * T + j) * row + C + (size_t)h * hs;
          float s = 0.0f;
          for (int d = 0; d < hs; d++) s += q[d] * k[d];
          s *= scale;
          mx = s > mx ? s : mx;
        }
        float sum = 0.0f;
        for (int j = 0; j <= i; j++) {
          const float *k = qkv + ((size_t)b * T + j) * row + C + (size_t)h * hs;
          float s = 0.0f;
          for (int d = 0; d < hs; d++) s += q[d] * k[d];
          sum += expf(s * scale - mx);
        }
        const float lse = mx + logf(sum);
        stats[((size_t)b * NH + h) * T + i] = lse;
        float *o = out + ((size_t)b * T + i) * C + (size_t)h * hs;
        for (int d = 0; d < hs; d++) o[d] = 0.0f;
        for (int j = 0; j <= i; j++) {
          const float *k = qkv + ((size_t)b * T + j) * row + C + (size_t)h * hs;
          const float *v = k + C;
          float s = 0.0f;
          for (int d = 0; d < hs; d++) s += q[d] * k[d];
          const float p = expf(s * scale - lse);
          for (int d = 0; d < hs; d++) o[d] += p * v[d];
        }
        for (int d = 0; d < hs; d++) o[d] = gcr_bf16(o[d]);
      }
  return 0;
}

int gcr_layernorm_backward_chunked(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *mean, const float *rstd,
                                   const float *w, int N, int C, int chunks, int group) {
  if (chunks < 1 || group < 1) return -1;
  float *acc = malloc((size_t)2 * C * sizeof *acc);
  if (!acc) return -1;
  int R = (N + chunks - 1) / chunks;
  if (R < 1) R = 1;
  float *sw = calloc((size_t)2 * C, sizeof *sw); /* the groups' sums, in group order */
  float *sg = calloc((size_t)2 * C, sizeof *sg); /* the chunks' sums of the group in progress */
  if (!sw || !sg) {
    free(acc);
    free(sw);
    free(sg);
    return -1;
  }
  int p = 0; /* chunk index */
  for (int n0 = 0; n0 < N; n0 += R, p++) {
    const int n1 = n0 + R < N ? n0 + R : N;
    memset(acc, 0, (size_t)2 * C * sizeof *acc);
    for (int n = n0; n < n1; n++) {
      const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
      const float mu = mean[n], rs = rstd[n];
      float a = 0.0f, b = 0.0f;
      for (int c = 0; c < C; c++) {
        const float g = w[c] * dy[c];
        a += g;
        b += g * ((x[c] - mu) * rs);
      }
      a /= (float)C;
      b /= (float)C;
      for (int c = 0; c < C; c++) {
        const float xh = (x[c] - mu) * rs;
        dinp[(size_t)n * C + c] += rs * (w[c] * dy[c] - a - xh * b);
        acc[c] += dy[c] * xh;
        acc[C + c] += dy[c];
      }
    }
    for (int c = 0; c < 2 * C; c++) sg[c] += acc[c];
    if ((p + 1) % group == 0 || n0 + R >= N) { /* the group's last chunk */
      for (int c = 0; c < 2 * C; c++) sw[c] += sg[c], sg[c] = 0.0f;
    }
  }
  for (int c = 0; c < C; c++) dw[c] += sw[c], db[c] += sw[C + c];
  free(sg);
  free(sw);
  free(acc);
  return 0;
}
