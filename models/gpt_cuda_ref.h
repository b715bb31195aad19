/*
 * gpt_cuda_ref.h - host C references of the math the fused CUDA kernel set
 * (gpt_cuda.h, GPT_CUDA_KERNELS_FUSED) computes in a different form from
 * the CPU model (gpt.c) and the baseline CUDA kernels: the fused classifier
 * (an online max and sum over chunks of 8, the gradient scaled by 1/N in the
 * forward), the cuBLASLt GELU epilogues (GELU and its derivative on the fp32
 * accumulator plus bias, rounded once to bf16, the tanh approximation), and
 * the LayerNorm backward's fixed chunking of the weight and bias gradients.
 * Each is the target a GPU check (scripts/gpu.sh cuda_vs_host) compares the
 * kernels with, and tests/test_gpt_cuda_ref.c checks each against the CPU
 * model's form. Library zo_gpt_cuda_ref (models/, plain C, no CUDA).
 *
 * Pure functions of their arguments; thread-safe; no allocation except where
 * said. bf16 values are held in floats (gcr_bf16() rounds one).
 */
#ifndef ZO_TRAIN_GPT_CUDA_REF_H
#define ZO_TRAIN_GPT_CUDA_REF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* gcr_bf16() - @x rounded to the nearest bf16 (ties to even), as __float2bfloat16_rn; NaN stays
 * NaN. */
float gcr_bf16(float x);

/* gcr_gelu(), gcr_gelu_grad() - GELU, tanh approximation, and its derivative, in fp32 with libm's
 * tanhf. */
float gcr_gelu(float x);
float gcr_gelu_grad(float x);

/*
 * gcr_classifier_row() - the fused classifier on one row @x (@V logits):
 * per "thread" of @threads a running (max, sum of exp(x - max)) over its
 * chunks of 8 (chunk c at 8*(t + threads*k)), merged in thread order; then
 * *@loss = max + log(sum) - x[@target] and, with @dx, dx[v] =
 * (exp(x[v] - max) / sum - (v == target)) * @dscale. V must be a multiple of
 * 8 (the kernel's vector path); @dx may alias @x (the kernel writes in place).
 * Returns 0, or -1 (V not a multiple of 8, @threads < 1, target out of range).
 */
int gcr_classifier_row(const float *x, int V, int target, float dscale, int threads, float *loss,
                       float *dx);

/*
 * gcr_linear_gelu() - the GELU_AUX_BIAS epilogue of out = inp W^T + bias on
 * bf16-valued operands: acc = sum_k inp[n,k] W[o,k] in fp32 (k in order),
 * pre[n,o] = bf16(acc + bias[o]), out[n,o] = bf16(gelu(acc + bias[o])).
 * inp (N,IC), W (OC,IC), bias (OC), pre and out (N,OC).
 */
void gcr_linear_gelu(float *out, float *pre, const float *inp, const float *W, const float *bias,
                     int N, int IC, int OC);

/*
 * gcr_dgelu_bgrad() - the DGELU_BGRAD epilogue of dinp = dout W on
 * bf16-valued operands: acc = sum_o dout[n,o] W[o,i] in fp32, dinp[n,i] =
 * bf16(acc * gelu'(pre[n,i])), bgrad[i] += sum over n of the unrounded
 * products (fp32, rows in order). dout (N,OC), W (OC,IC), pre and dinp (N,IC).
 */
void gcr_dgelu_bgrad(float *dinp, float *bgrad, const float *dout, const float *W, const float *pre,
                     int N, int IC, int OC);

/*
 * gcr_layernorm_backward_chunked() - LayerNorm backward as the fused kernel
 * orders it: dinp (N,C) += rstd (w dy - mean(w dy) - xhat mean(w dy xhat))
 * per row; dw, db (C) += the sums over each of the fixed row chunks (R =
 * ceil(N / @chunks) rows each), the chunk sums added in order within groups
 * of @group chunks, the group sums then in group order (the kernel:
 * ZGF_LN_CHUNKS, ZGF_LN_GROUP). Returns 0, or -1 when @chunks or @group < 1
 * or out of memory (it allocates 6C floats).
 */
int gcr_layernorm_backward_chunked(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *mean, const float *rstd,
                                   const float *w, int N, int C, int chunks, int group);

/*
 * gcr_attention_causal() - causal attention as cuDNN's fused flash attention
 * computes it (gpt_cuda_attn.h), on bf16-valued q, k, v in the layout of the
 * c_attn product, qkv (B, T, 3, NH, hs) row-major: per (b, head, query i),
 * scores s_j = (q_i . k_j) / sqrt(hs) for j <= i in fp32, stats = max_j s_j
 * + log(sum_j exp(s_j - max)) (fp32, (B, NH, T)), out[b, i, head, :] =
 * bf16(sum_j exp(s_j - stats) v_j) with the sum in fp32: the probabilities are
 * never rounded to bf16 (the baseline's are, before att v). out (B, T, NH,
 * hs). Returns 0, or -1 (a dimension < 1).
 */
int gcr_attention_causal(float *out, float *stats, const float *qkv, int B, int T, int NH, int hs);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TRAIN_GPT_CUDA_REF_H */
