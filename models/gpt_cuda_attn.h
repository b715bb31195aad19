/*
 * gpt_cuda_attn.h - causal attention of the fused kernel set (gpt_cuda.h,
 * GPT_CUDA_KERNELS_FUSED) through cuDNN's fused flash attention (SDPA),
 * forward and deterministic backward, built with the header-only
 * cudnn-frontend (gpt_cuda_attn.cu; only when the build found its headers,
 * ZO_GPT_CUDA_CUDNN). libcudnn.so.9 is loaded at zga_create(), not linked:
 * a machine without it runs the baseline's attention. Used by
 * gpt_cuda_fused_pass.cu only (CUDA C++, internal).
 *
 * Layouts (row-major, bf16): qkv (B, T, 3, NH, hs), the c_attn product as it
 * is, with q, k, v each read through strides (no permute); out (B, T, NH, hs)
 * = (B*T, C), the c_proj input; stats (B, NH, T) fp32, the logsumexp of each
 * score row kept for backward; dqkv as qkv. Scale 1/sqrt(hs), causal mask
 * (key j <= query i), fp32 softmax and accumulation.
 *
 * Graphs (a forward and a backward per (B, T, NH, hs)) are built once by the
 * first zga_ready() of the shape and cached. The backward is cuDNN's
 * deterministic algorithm: same bits run to run.
 *
 * Thread-safety: a zga is used by one host thread at a time.
 */
#ifndef ZO_TRAIN_GPT_CUDA_ATTN_H
#define ZO_TRAIN_GPT_CUDA_ATTN_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>

typedef struct zga zga;

/*
 * zga_create() - load libcudnn.so.9 and create a cuDNN handle. Returns 0, or
 * -1 with the reason in @err (built without cudnn-frontend, the library not
 * found, handle creation failed): the caller then runs the baseline's
 * attention.
 */
int zga_create(zga **out, char *err, size_t errlen);

/* zga_destroy() - the handle, the cached graphs and an own workspace; NULL is accepted. */
void zga_destroy(zga *a);

/*
 * zga_ready() - whether cuDNN runs attention of this shape: builds and
 * caches the forward and backward graphs on first use. Returns 1 (ready), 0
 * (cuDNN has no engine for the shape: the baseline's attention; remembered,
 * and its reason in @err at every call) or -1 with a message (a failure: an exception, cudaMalloc of a
 * workspace). The workspace both graphs share is @ws (@ws_bytes) when large
 * enough, else one cudaMalloc'd here (kept, grown as needed).
 */
int zga_ready(zga *a, int B, int T, int NH, int hs, void *ws, size_t ws_bytes, char *err,
              size_t errlen);

/*
 * zga_forward(), zga_backward() - queue the pass on @s for a shape
 * zga_ready() accepted. Forward: out and stats from qkv. Backward: dqkv from
 * dout (the gradient of out), qkv, out and stats of the same forward.
 * Return 0, or -1 with a message.
 */
int zga_forward(zga *a, cudaStream_t s, __nv_bfloat16 *out, float *stats, const __nv_bfloat16 *qkv,
                int B, int T, int NH, int hs, char *err, size_t errlen);
int zga_backward(zga *a, cudaStream_t s, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                 const __nv_bfloat16 *qkv, const __nv_bfloat16 *out, const float *stats, int B,
                 int T, int NH, int hs, char *err, size_t errlen);

#endif /* ZO_TRAIN_GPT_CUDA_ATTN_H */
