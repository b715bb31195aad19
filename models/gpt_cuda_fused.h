/*
 * gpt_cuda_fused.h - the element-wise and reduction kernels of the fused
 * kernel set (gpt_cuda.h, GPT_CUDA_KERNELS_FUSED), used by gpt_cuda.cu only
 * (CUDA C++, internal). After llm.c's train_gpt2.cu (fused_classifier,
 * layernorm_forward, fused_residual_forward, layernorm_backward), without
 * its atomics: every reduction has a fixed order, so results are
 * deterministic. 128-bit loads and stores (8 bf16) where a row's length is a
 * multiple of 8 and its pointers 16-byte aligned; otherwise each launcher
 * runs the baseline's kernel of the same meaning (gpt_cuda_internal.h).
 * Each queues on @s and returns cudaGetLastError(). Host references of the
 * math: gpt_cuda_ref.h.
 */
#ifndef ZO_TRAIN_GPT_CUDA_FUSED_H
#define ZO_TRAIN_GPT_CUDA_FUSED_H

#include "gpt_cuda_internal.h"

/*
 * The fused classifier, one block per row of logits (N,V), in place:
 * losses[n] = logsumexp(row) - row[targets[n]] and the row becomes
 * (softmax(row) - onehot(targets[n])) * dscale, from one online max/sum pass
 * and one writing pass. No logits survive.
 */
cudaError_t zgf_classifier(zgc_bf16 *logits, float *losses, const uint8_t *targets, int N, int V,
                           float dscale, cudaStream_t s);

/* LayerNorm forward as zgc_layernorm_forward(), one warp per row, 128-bit loads. */
cudaError_t zgf_layernorm_forward(zgc_bf16 *out, float *mean, float *rstd, const zgc_bf16 *inp,
                                  const zgc_bf16 *w, const zgc_bf16 *b, int N, int C,
                                  cudaStream_t s);

/* res_out (N,C) = res + y (one rounding), then out = LayerNorm(res_out) as
 * zgf_layernorm_forward(). */
cudaError_t zgf_residual_layernorm(zgc_bf16 *res_out, zgc_bf16 *out, float *mean, float *rstd,
                                   const zgc_bf16 *res, const zgc_bf16 *y, const zgc_bf16 *w,
                                   const zgc_bf16 *b, int N, int C, cudaStream_t s);

/* out (n) = res + y, 128-bit loads. */
cudaError_t zgf_residual(zgc_bf16 *out, const zgc_bf16 *res, const zgc_bf16 *y, size_t n,
                         cudaStream_t s);

/* zgf_layernorm_backward(): at most this many row chunks (one block each, so the rows of a large
 * batch are spread over every SM), their partials summed in groups of ZGF_LN_GROUP chunks. */
#define ZGF_LN_CHUNKS 2048
#define ZGF_LN_GROUP 64
#define ZGF_LN_GROUPS (ZGF_LN_CHUNKS / ZGF_LN_GROUP)

/*
 * LayerNorm backward as zgc_layernorm_backward() (dinp fp32 +=, dw, db +=):
 * one kernel over P = min(N, ZGF_LN_CHUNKS, @part_floats / 2C) fixed chunks
 * of rows (a block a chunk: the rows' input gradient, the chunk's dw, db
 * partials in shared memory into @part), then two fixed-order finishes (the
 * chunks by groups of ZGF_LN_GROUP into @part2, the groups into dw, db: one
 * rounding each); with @dinp_bf16 also the bf16 copy of the updated dinp
 * (the next product's operand). part: fp32 scratch of @part_floats (>= 2C);
 * part2: 2*ZGF_LN_GROUPS*C floats (and 2*ZGC_MAX_CHUNKS*C for the
 * baseline's kernels, which run where rows are not 128-bit-able or 2C floats
 * exceed 48 KiB of shared memory).
 */
cudaError_t zgf_layernorm_backward(float *dinp, zgc_bf16 *dinp_bf16, zgc_bf16 *dw, zgc_bf16 *db,
                                   const zgc_bf16 *dout, const zgc_bf16 *inp, const float *mean,
                                   const float *rstd, const zgc_bf16 *w, int N, int C, float *part,
                                   size_t part_floats, float *part2, cudaStream_t s);

/* g (K) += src (K), src fp32 (@src_f32) or bf16: a bias gradient from a cuBLASLt BGRAD epilogue. */
cudaError_t zgf_bias_grad_add(zgc_bf16 *g, const void *src, int src_f32, int K, cudaStream_t s);

#endif /* ZO_TRAIN_GPT_CUDA_FUSED_H */
