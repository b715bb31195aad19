/*
 * gpt_cuda_internal.h - the kernel launchers of gpt_cuda_kernels.cu, used by
 * gpt_cuda.cu only (CUDA C++, not part of the C API in gpt_cuda.h). Each one
 * queues one kernel on @s and returns cudaGetLastError() after the launch.
 * Shapes with N = B*T rows; bf16 is __nv_bfloat16; "+=" means the kernel adds
 * to what the buffer holds. CPU references: the same-named functions of gpt.c.
 */
#ifndef ZO_TRAIN_GPT_CUDA_INTERNAL_H
#define ZO_TRAIN_GPT_CUDA_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

typedef __nv_bfloat16 zgc_bf16;

/* Column-sum partials use at most this many row chunks (a fixed split of N, so sums are deterministic). */
#define ZGC_MAX_CHUNKS 64

/* out (N,C) = wte[inp[n]] + wpe[n % T]. */
cudaError_t zgc_encoder_forward(zgc_bf16 *out, const uint8_t *inp, const zgc_bf16 *wte,
                                const zgc_bf16 *wpe, int B, int T, int C, cudaStream_t s);
/* out (N,C) = (inp - mean) * rstd * w + b per row; mean, rstd (N) fp32 kept. */
cudaError_t zgc_layernorm_forward(zgc_bf16 *out, float *mean, float *rstd, const zgc_bf16 *inp,
                                  const zgc_bf16 *w, const zgc_bf16 *b, int N, int C,
                                  cudaStream_t s);
/* out (N,OC) = bias broadcast over rows (then a GEMM with beta = 1 adds x W^T: one rounding). */
cudaError_t zgc_bias_broadcast(zgc_bf16 *out, const zgc_bf16 *bias, int N, int OC, cudaStream_t s);
/* out (N,C) = (res + bias) + y. */
cudaError_t zgc_residual_bias(zgc_bf16 *out, const zgc_bf16 *res, const zgc_bf16 *y,
                              const zgc_bf16 *bias, int N, int C, cudaStream_t s);
/* Heads layout: out (P,B,NH,T,hs) <- in (B,T,P*C); from_heads is the inverse. P = 3 (q,k,v) or 1. */
cudaError_t zgc_to_heads(zgc_bf16 *out, const zgc_bf16 *in, int B, int T, int NH, int hs, int P,
                         cudaStream_t s);
cudaError_t zgc_from_heads(zgc_bf16 *out, const zgc_bf16 *in, int B, int T, int NH, int hs, int P,
                           cudaStream_t s);
/* In place over rows of att (BH,T,T) holding scaled scores: causal softmax, 0 above the diagonal. */
cudaError_t zgc_softmax_causal_forward(zgc_bf16 *att, int BH, int T, cudaStream_t s);
/* In place: datt (BH,T,T) holds dL/d att; becomes dL/d scores * scale (0 above the diagonal). */
cudaError_t zgc_softmax_causal_backward(zgc_bf16 *datt, const zgc_bf16 *att, int BH, int T,
                                        float scale, cudaStream_t s);
/* out (n) = gelu(inp); backward in place: d (n) *= gelu'(inp). */
cudaError_t zgc_gelu_forward(zgc_bf16 *out, const zgc_bf16 *inp, size_t n, cudaStream_t s);
cudaError_t zgc_gelu_backward(zgc_bf16 *d, const zgc_bf16 *inp, size_t n, cudaStream_t s);
/* lse (N), losses (N) = lse - logits[target] from logits (N,V). */
cudaError_t zgc_xent_forward(float *lse, float *losses, const zgc_bf16 *logits,
                             const uint8_t *targets, int N, int V, cudaStream_t s);
/* In place over logits (N,V): (softmax - onehot(target)) * dscale. */
cudaError_t zgc_xent_backward(zgc_bf16 *logits, const float *lse, const uint8_t *targets, int N,
                              int V, float dscale, cudaStream_t s);
/*
 * The reference GEMM: cublasGemmStridedBatchedEx's meaning (column-major; C (M,Nn) = alpha op(A) op(B) + beta C for
 * each of @batch matrices, A, B bf16, C bf16 (@c_f32 0) or fp32, fp32 accumulation over k in order 0..K-1; C is not
 * read when beta is 0) by one thread per element of C. Slow (no tiling) and plain on purpose: only for runs under
 * compute-sanitizer's racecheck, whose kernel filter fails on cuBLAS's Hopper kernels (docs/gpu-runs/), so that
 * every kernel launched is ours and small. @ta, @tb: 1 for the transpose (CUBLAS_OP_T), 0 for CUBLAS_OP_N.
 */
cudaError_t zgc_gemm_reference(int ta, int tb, int M, int Nn, int K, float alpha, const zgc_bf16 *A,
                               int lda, long long sA, const zgc_bf16 *B, int ldb, long long sB,
                               float beta, void *C, int c_f32, int ldc, long long sC, int batch,
                               cudaStream_t s);
/* out[0] = mean of losses (N), summed in double in a fixed order. */
cudaError_t zgc_mean(float *out, const float *losses, int N, cudaStream_t s);
/* out (n) = (bf16) in (n). */
cudaError_t zgc_f32_to_bf16(zgc_bf16 *out, const float *in, size_t n, cudaStream_t s);
/* g (K) += column sums of x (N,K); part: fp32 scratch of ZGC_MAX_CHUNKS*K. */
cudaError_t zgc_colsum_add(zgc_bf16 *g, const zgc_bf16 *x, int N, int K, float *part,
                           cudaStream_t s);
/* dinp (N,C) fp32 += LayerNorm input gradient; dw, db (C) += weight, bias gradients; part: 2*ZGC_MAX_CHUNKS*C. */
cudaError_t zgc_layernorm_backward(float *dinp, zgc_bf16 *dw, zgc_bf16 *db, const zgc_bf16 *dout,
                                   const zgc_bf16 *inp, const float *mean, const float *rstd,
                                   const zgc_bf16 *w, int N, int C, float *part, cudaStream_t s);
/* dw[c] += sum over p < P of part[p][c], db[c] += of part[p][C + c], in p order, each rounded to bf16 once: the last
 * pass of zgc_layernorm_backward (and of the fused set's, over its groups). */
cudaError_t zgc_layernorm_backward_finish(zgc_bf16 *dw, zgc_bf16 *db, const float *part, int P,
                                          int C, cudaStream_t s);
/* gwpe rows 0..T-1 (T,C) += sum over b of dres (B,T,C) fp32. */
cudaError_t zgc_wpe_backward(zgc_bf16 *gwpe, const float *dres, int B, int T, int C,
                             cudaStream_t s);
/*
 * gwte (V,C) += gwte32 (V,C) + sum of dres rows of each token: rows of token v
 * (v < 256) are pos[off[v] .. off[v+1]-1], ascending.
 */
cudaError_t zgc_wte_backward(zgc_bf16 *gwte, const float *gwte32, const float *dres, const int *off,
                             const int *pos, int V, int C, cudaStream_t s);

#endif /* ZO_TRAIN_GPT_CUDA_INTERNAL_H */
