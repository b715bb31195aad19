/*
 * gpt_cuda_fused.cu - the fused kernel set's element-wise and reduction
 * kernels (API in gpt_cuda_fused.h): the fused classifier, vectorised
 * LayerNorm forward, residual + LayerNorm, LayerNorm backward in one pass
 * over each row chunk, the BGRAD bias-gradient add. bf16 in memory, fp32
 * inside, fixed-order reductions.
 */
#include <math.h>
#include <stdint.h>

#include "gpt_cuda_device.h"
#include "gpt_cuda_fused.h"

typedef zgc_bf16 bf16;

#define WARPS 8 /* warp-per-row kernels: 256 threads */
#define CLS_THREADS 512
#define LNB_THREADS 128          /* C = 768: 96 threads of 8 columns each */
#define LNB_MAX_SMEM (48 * 1024) /* the default dynamic shared memory limit, no opt-in */

/* ------------------------------------------------------------------ */
/* helpers */

/* 8 bf16 <-> 8 floats through one 128-bit access; @p 16-byte aligned. */
static __device__ __forceinline__ void load8(float f[8], const bf16 *p) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

static __device__ __forceinline__ void store8(bf16 *p, const float f[8]) {
  uint4 u;
  __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<uint4 *>(p) = u;
}

/* Online softmax state (max m, sum s of exp(x - m)) merged with another; -inf maxima carry
 * s = 0. */
static __device__ __forceinline__ void merge_ms(float &m, float &s, float m2, float s2) {
  const float M = fmaxf(m, m2);
  if (M == -INFINITY) return;
  s = s * expf(m - M) + s2 * expf(m2 - M);
  m = M;
}

/* ------------------------------------------------------------------ */
/* fused classifier */

/*
 * One block per row: pass 1 an online (max, sum of exp) per thread over its
 * elements, merged over the warp by shuffles and over the warps in warp
 * order; pass 2 writes the gradient over the row. The target's logit is read
 * before the merge's __syncthreads(), so before any thread writes the row.
 */
__global__ void classifier_kernel(bf16 *logits, float *losses, const uint8_t *targets, int N, int V,
                                  float dscale, int vec) {
  __shared__ float shm[32], shs[32], res[2];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int n = blockIdx.x; n < N; n += gridDim.x) {
    bf16 *row = logits + (size_t)n * V;
    const int t = targets[n];
    const float xt = __bfloat162float(row[t]);
    float m = -INFINITY, s = 0.0f;
    if (vec) {
      for (int c = threadIdx.x * 8; c < V; c += blockDim.x * 8) {
        float f[8];
        load8(f, row + c);
        float mc = f[0];
#pragma unroll
        for (int i = 1; i < 8; i++) mc = fmaxf(mc, f[i]);
        float sc = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) sc += expf(f[i] - mc);
        merge_ms(m, s, mc, sc);
      }
    } else {
      for (int c = threadIdx.x; c < V; c += blockDim.x)
        merge_ms(m, s, __bfloat162float(row[c]), 1.0f);
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      merge_ms(m, s, m2, s2);
    }
    __syncthreads(); /* the previous row's readers of res[] are done */
    if (lane == 0) shm[wid] = m, shs[wid] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      float M = shm[0], S = shs[0];
      for (int w = 1; w < nw; w++) merge_ms(M, S, shm[w], shs[w]);
      res[0] = M, res[1] = S;
    }
    __syncthreads();
    const float M = res[0], S = res[1], inv = 1.0f / S;
    if (threadIdx.x == 0) losses[n] = M + logf(S) - xt;
    if (vec) {
      for (int c = threadIdx.x * 8; c < V; c += blockDim.x * 8) {
        float f[8];
        load8(f, row + c);
#pragma unroll
        for (int i = 0; i < 8; i++)
          f[i] = (expf(f[i] - M) * inv - (c + i == t ? 1.0f : 0.0f)) * dscale;
        store8(row + c, f);
      }
    } else {
      for (int c = threadIdx.x; c < V; c += blockDim.x) {
        const float p = expf(__bfloat162float(row[c]) - M) * inv;
        row[c] = __float2bfloat16_rn((p - (c == t ? 1.0f : 0.0f)) * dscale);
      }
    }
  }
}

cudaError_t zgf_classifier(bf16 *logits, float *losses, const uint8_t *targets, int N, int V,
                           float dscale, cudaStream_t s) {
  const int vec = V % 8 == 0 && zgc_aligned16(logits);
  classifier_kernel<<<zgc_grid_cap((size_t)N), CLS_THREADS, 0, s>>>(logits, losses, targets, N, V,
                                                                    dscale, vec);
  return cudaGetLastError();
}

/* ------------------------------------------------------------------ */
/* LayerNorm forward, residual + LayerNorm: one warp per row, lane owns chunks (lane + 32 k) * 8 */

/* mean and rstd of row @x (C, a multiple of 8) by one warp: two passes over the row, as gpt.c. */
static __device__ __forceinline__ void row_stats(const bf16 *x, int C, int lane, float *mu,
                                                 float *rs) {
  float sum = 0.0f;
  for (int c = lane * 8; c < C; c += 256) {
    float f[8];
    load8(f, x + c);
#pragma unroll
    for (int i = 0; i < 8; i++) sum += f[i];
  }
  const float m = zgc_warp_sum(sum) / (float)C;
  float v = 0.0f;
  for (int c = lane * 8; c < C; c += 256) {
    float f[8];
    load8(f, x + c);
#pragma unroll
    for (int i = 0; i < 8; i++) v += (f[i] - m) * (f[i] - m);
  }
  *mu = m;
  *rs = 1.0f / sqrtf(zgc_warp_sum(v) / (float)C + 1e-5f);
}

static __device__ __forceinline__ void row_normalize(bf16 *o, const bf16 *x, const bf16 *w,
                                                     const bf16 *b, int C, int lane, float mu,
                                                     float rs) {
  for (int c = lane * 8; c < C; c += 256) {
    float f[8], fw[8], fb[8];
    load8(f, x + c);
    load8(fw, w + c);
    load8(fb, b + c);
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = (f[i] - mu) * rs * fw[i] + fb[i];
    store8(o + c, f);
  }
}

__global__ void layernorm_forward_vec_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                                             const bf16 *w, const bf16 *b, int N, int C) {
  const int lane = threadIdx.x & 31;
  for (int n = blockIdx.x * WARPS + (threadIdx.x >> 5); n < N; n += gridDim.x * WARPS) {
    const bf16 *x = inp + (size_t)n * C;
    float mu, rs;
    row_stats(x, C, lane, &mu, &rs);
    row_normalize(out + (size_t)n * C, x, w, b, C, lane, mu, rs);
    if (lane == 0) mean[n] = mu, rstd[n] = rs;
  }
}

/* The row's sum is written first: each lane re-reads only the chunks it wrote (its own writes are
 * visible). */
__global__ void residual_layernorm_kernel(bf16 *res_out, bf16 *out, float *mean, float *rstd,
                                          const bf16 *res, const bf16 *y, const bf16 *w,
                                          const bf16 *b, int N, int C) {
  const int lane = threadIdx.x & 31;
  for (int n = blockIdx.x * WARPS + (threadIdx.x >> 5); n < N; n += gridDim.x * WARPS) {
    const size_t o = (size_t)n * C;
    for (int c = lane * 8; c < C; c += 256) {
      float f[8], g[8];
      load8(f, res + o + c);
      load8(g, y + o + c);
#pragma unroll
      for (int i = 0; i < 8; i++) f[i] += g[i];
      store8(res_out + o + c, f);
    }
    float mu, rs;
    row_stats(res_out + o, C, lane, &mu, &rs);
    row_normalize(out + o, res_out + o, w, b, C, lane, mu, rs);
    if (lane == 0) mean[n] = mu, rstd[n] = rs;
  }
}

static int rows_vec_ok(int C, const void *a, const void *b, const void *c, const void *d,
                       const void *e) {
  return C % 8 == 0 && zgc_aligned16(a) && zgc_aligned16(b) && zgc_aligned16(c) &&
         zgc_aligned16(d) && zgc_aligned16(e);
}

cudaError_t zgf_layernorm_forward(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                                  const bf16 *w, const bf16 *b, int N, int C, cudaStream_t s) {
  if (!rows_vec_ok(C, out, inp, w, b, NULL))
    return zgc_layernorm_forward(out, mean, rstd, inp, w, b, N, C, s);
  layernorm_forward_vec_kernel<<<zgc_grid_cap(((size_t)N + WARPS - 1) / WARPS), WARPS * 32, 0, s>>>(
      out, mean, rstd, inp, w, b, N, C);
  return cudaGetLastError();
}

__global__ void residual_kernel(bf16 *out, const bf16 *res, const bf16 *y, size_t n8) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
       i += (size_t)gridDim.x * blockDim.x) {
    float f[8], g[8];
    load8(f, res + i * 8);
    load8(g, y + i * 8);
#pragma unroll
    for (int k = 0; k < 8; k++) f[k] += g[k];
    store8(out + i * 8, f);
  }
}

__global__ void residual_scalar_kernel(bf16 *out, const bf16 *res, const bf16 *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16_rn(__bfloat162float(res[i]) + __bfloat162float(y[i]));
}

cudaError_t zgf_residual(bf16 *out, const bf16 *res, const bf16 *y, size_t n, cudaStream_t s) {
  if (n % 8 == 0 && zgc_aligned16(out) && zgc_aligned16(res) && zgc_aligned16(y)) {
    const size_t n8 = n / 8;
    residual_kernel<<<zgc_grid_cap((n8 + 255) / 256), 256, 0, s>>>(out, res, y, n8);
  } else {
    residual_scalar_kernel<<<zgc_grid_cap((n + 255) / 256), 256, 0, s>>>(out, res, y, n);
  }
  return cudaGetLastError();
}

cudaError_t zgf_residual_layernorm(bf16 *res_out, bf16 *out, float *mean, float *rstd,
                                   const bf16 *res, const bf16 *y, const bf16 *w, const bf16 *b,
                                   int N, int C, cudaStream_t s) {
  if (!rows_vec_ok(C, res_out, out, res, y, w) || !zgc_aligned16(b)) {
    cudaError_t e = zgf_residual(res_out, res, y, (size_t)N * C, s);
    if (e != cudaSuccess) return e;
    return zgc_layernorm_forward(out, mean, rstd, res_out, w, b, N, C, s);
  }
  residual_layernorm_kernel<<<zgc_grid_cap(((size_t)N + WARPS - 1) / WARPS), WARPS * 32, 0, s>>>(
      res_out, out, mean, rstd, res, y, w, b, N, C);
  return cudaGetLastError();
}

/* ------------------------------------------------------------------ */
/* LayerNorm backward */

/* Sums of (a, b) over the block into every thread; @sh: 66 floats; a leading sync guards the reuse
 * of sh. */
static __device__ __forceinline__ void block_sum2(float *a, float *b, float *sh) {
  float x = zgc_warp_sum(*a), y = zgc_warp_sum(*b);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sh[w] = x, sh[32 + w] = y;
  __syncthreads();
  if (w == 0) {
    x = lane < nw ? sh[lane] : 0.0f;
    y = lane < nw ? sh[32 + lane] : 0.0f;
    x = zgc_warp_sum(x);
    y = zgc_warp_sum(y);
    if (lane == 0) sh[64] = x, sh[65] = y;
  }
  __syncthreads();
  *a = sh[64];
  *b = sh[65];
}

/*
 * Block p takes rows [p*R, min(N, (p+1)*R)); thread t owns columns 8t + 8*blockDim*k, so its
 * shared-memory accumulators acc[c] (dw) and acc[C + c] (db) are its own: no races, a fixed order.
 */
__global__ void layernorm_backward_fused_kernel(float *dinp, bf16 *dinp_bf16, float *part,
                                                const bf16 *dout, const bf16 *inp,
                                                const float *mean, const float *rstd, const bf16 *w,
                                                int N, int C, int R) {
  extern __shared__ float acc[]; /* 2C */
  __shared__ float sh[66];
  const int p = blockIdx.x;
  const int n0 = p * R, n1 = n0 + R < N ? n0 + R : N;
  const int stride = blockDim.x * 8;
  for (int c = threadIdx.x * 8; c < C; c += stride)
#pragma unroll
    for (int i = 0; i < 8; i++) acc[c + i] = 0.0f, acc[C + c + i] = 0.0f;
  for (int n = n0; n < n1; n++) {
    const bf16 *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    const float mu = mean[n], rs = rstd[n];
    float a = 0.0f, b = 0.0f;
    for (int c = threadIdx.x * 8; c < C; c += stride) {
      float fx[8], fd[8], fw[8];
      load8(fx, x + c);
      load8(fd, dy + c);
      load8(fw, w + c);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float g = fw[i] * fd[i];
        a += g;
        b += g * ((fx[i] - mu) * rs);
      }
    }
    block_sum2(&a, &b, sh);
    a /= (float)C;
    b /= (float)C;
    float *dx = dinp + (size_t)n * C;
    for (int c = threadIdx.x * 8; c < C; c += stride) {
      float fx[8], fd[8], fw[8], o[8];
      load8(fx, x + c);
      load8(fd, dy + c);
      load8(fw, w + c);
      float4 *d4 = reinterpret_cast<float4 *>(dx + c);
      float4 lo = d4[0], hi = d4[1];
      o[0] = lo.x, o[1] = lo.y, o[2] = lo.z, o[3] = lo.w;
      o[4] = hi.x, o[5] = hi.y, o[6] = hi.z, o[7] = hi.w;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float xh = (fx[i] - mu) * rs;
        o[i] += rs * (fw[i] * fd[i] - a - xh * b);
        acc[c + i] += fd[i] * xh;
        acc[C + c + i] += fd[i];
      }
      d4[0] = make_float4(o[0], o[1], o[2], o[3]);
      d4[1] = make_float4(o[4], o[5], o[6], o[7]);
      if (dinp_bf16) store8(dinp_bf16 + (size_t)n * C + c, o);
    }
  }
  float *pp = part + (size_t)p * 2 * C;
  for (int c = threadIdx.x * 8; c < C; c += stride)
#pragma unroll
    for (int i = 0; i < 8; i++) pp[c + i] = acc[c + i], pp[C + c + i] = acc[C + c + i];
}

/* part2[g][k] = sum of part[p][k] over the chunks p of group g, in order; k < 2C (dw then db). */
__global__ void layernorm_backward_group_kernel(float *part2, const float *part, int P, int C) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
  if (k >= 2 * C) return;
  const int p0 = g * ZGF_LN_GROUP, p1 = p0 + ZGF_LN_GROUP < P ? p0 + ZGF_LN_GROUP : P;
  float acc = 0.0f;
  for (int p = p0; p < p1; p++) acc += part[(size_t)p * 2 * C + k];
  part2[(size_t)g * 2 * C + k] = acc;
}

cudaError_t zgf_layernorm_backward(float *dinp, bf16 *dinp_bf16, bf16 *dw, bf16 *db,
                                   const bf16 *dout, const bf16 *inp, const float *mean,
                                   const float *rstd, const bf16 *w, int N, int C, float *part,
                                   size_t part_floats, float *part2, cudaStream_t s) {
  const size_t smem = (size_t)2 * C * sizeof(float);
  size_t cap = part_floats / (2 * (size_t)C); /* chunks the scratch holds */
  if (cap > ZGF_LN_CHUNKS) cap = ZGF_LN_CHUNKS;
  if (smem > LNB_MAX_SMEM || cap < 1 || !rows_vec_ok(C, dinp, dinp_bf16, dout, inp, w)) {
    cudaError_t e = zgc_layernorm_backward(dinp, dw, db, dout, inp, mean, rstd, w, N, C, part2, s);
    if (e != cudaSuccess || !dinp_bf16) return e;
    return zgc_f32_to_bf16(dinp_bf16, dinp, (size_t)N * C, s);
  }
  int P = N < (int)cap ? N : (int)cap;
  const int R = (N + P - 1) / P;
  P = (N + R - 1) / R;
  const int G = (P + ZGF_LN_GROUP - 1) / ZGF_LN_GROUP;
  layernorm_backward_fused_kernel<<<(unsigned)P, LNB_THREADS, smem, s>>>(dinp, dinp_bf16, part,
                                                                         dout, inp, mean, rstd, w,
                                                                         N, C, R);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const dim3 grid((unsigned)((2 * C + 255) / 256), (unsigned)G);
  layernorm_backward_group_kernel<<<grid, 256, 0, s>>>(part2, part, P, C);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  /* dw, db += the groups' sums, in group order: the baseline's last pass */
  return zgc_layernorm_backward_finish(dw, db, part2, G, C, s);
}

/* ------------------------------------------------------------------ */
/* bias gradient of a BGRAD epilogue into the caller's bf16 gradient */

__global__ void bias_grad_add_kernel(bf16 *g, const void *src, int src_f32, int K) {
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < K; k += gridDim.x * blockDim.x) {
    const float v = src_f32 ? ((const float *)src)[k] : __bfloat162float(((const bf16 *)src)[k]);
    g[k] = __float2bfloat16_rn(__bfloat162float(g[k]) + v);
  }
}

cudaError_t zgf_bias_grad_add(bf16 *g, const void *src, int src_f32, int K, cudaStream_t s) {
  bias_grad_add_kernel<<<zgc_grid_cap(((size_t)K + 255) / 256), 256, 0, s>>>(g, src, src_f32, K);
  return cudaGetLastError();
}
