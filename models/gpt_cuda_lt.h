/*
 * gpt_cuda_lt.h - the fused kernel set's matmuls (gpt_cuda.h,
 * GPT_CUDA_KERNELS_FUSED): cuBLASLt with epilogues, bf16 A and B, fp32
 * accumulation, bf16 or fp32 D, and each problem's algorithm chosen once by
 * cublasLtMatmulAlgoGetHeuristic() and cached with its descriptors. Used by
 * gpt_cuda.cu only (CUDA C++, internal).
 *
 * Meaning (column-major, as cublasGemmEx; ta/tb 1 = transposed):
 *   D (M,N) = epilogue(alpha op(A) op(B) + beta D)
 * with the epilogues
 *   ZGC_EPI_NONE           nothing more
 *   ZGC_EPI_BIAS           D += bias (M) broadcast over the N columns
 *   ZGC_EPI_GELU_AUX_BIAS  aux (M,N) = acc + bias, D = gelu_tanh(aux) (both rounded
 *                          from fp32 once; beta must be 0)
 *   ZGC_EPI_DGELU_BGRAD    D = acc * gelu_tanh'(aux), bias_grad (M) = sum over the
 *                          N columns of D (beta must be 0)
 *   ZGC_EPI_BGRADB         bias_grad (N) = sum over k of op(B)'s rows, i.e. the
 *                          column sums of op(B) (K,N), besides D
 * where bias is bf16 and bias_grad is fp32 when cuBLASLt has an algorithm for
 * that, else bf16 (*@grad_f32 says which). Host reference of the math:
 * gpt_cuda_ref.h.
 *
 * Determinism: the cached algorithm is the same for every call of a problem,
 * reductions in the output type are excluded (CUBLASLT_REDUCTION_SCHEME_MASK
 * without OUTPUT_TYPE), one stream and a fixed workspace: results are
 * run-to-run reproducible on one GPU model, as cuBLAS documents.
 *
 * Thread-safety: a zgc_lt is used by one host thread at a time.
 */
#ifndef ZO_TRAIN_GPT_CUDA_LT_H
#define ZO_TRAIN_GPT_CUDA_LT_H

#include <cuda_runtime.h>
#include <stddef.h>

typedef struct zgc_lt zgc_lt;

typedef enum zgc_epi {
  ZGC_EPI_NONE = 0,
  ZGC_EPI_BIAS = 1,
  ZGC_EPI_GELU_AUX_BIAS = 2,
  ZGC_EPI_DGELU_BGRAD = 3,
  ZGC_EPI_BGRADB = 4
} zgc_epi;

/* zgc_lt_matmul()'s results besides success: no algorithm for the problem (the caller runs the
 * baseline's
 * kernels instead; also when a pointer is not 16-byte aligned), or a failure (message). */
#define ZGC_LT_OK 0
#define ZGC_LT_UNSUPPORTED 1
#define ZGC_LT_ERROR (-1)

/* Problems cached per handle; past it, a problem is planned on every call (correct, slower). */
#define ZGC_LT_CACHE 128

/*
 * zgc_lt_create() - a cuBLASLt handle using @ws (@ws_bytes of device memory,
 * shared with cuBLAS: same stream, so never used by both at once). Returns 0,
 * or -1 with a message in @err.
 */
int zgc_lt_create(void *ws, size_t ws_bytes, zgc_lt **out, char *err, size_t errlen);

/* zgc_lt_destroy() - the handle and the cached descriptors; NULL is accepted. */
void zgc_lt_destroy(zgc_lt *lt);

/* One product: shapes and leading dimensions as cublasGemmEx (column-major). */
typedef struct zgc_lt_problem {
  int ta, tb, M, N, K, lda, ldb, ldd;
  int d_f32;   /* D is fp32 (1) or bf16 (0) */
  zgc_epi epi; /* epilogue */
  int ld_aux;  /* GELU_AUX_BIAS / DGELU_BGRAD: leading dimension of aux */
  float alpha, beta;
} zgc_lt_problem;

/*
 * zgc_lt_matmul() - queue @p on @s with A, B, D and the epilogue's @bias
 * (bf16, BIAS / GELU_AUX_BIAS), @aux (bf16, GELU_AUX_BIAS written,
 * DGELU_BGRAD read) and @bias_grad (BGRAD epilogues; fp32 or bf16 as
 * *@grad_f32 returns). Returns ZGC_LT_OK, ZGC_LT_UNSUPPORTED (nothing
 * queued: the heuristic found no algorithm, or cublasLtMatmul answered
 * CUBLAS_STATUS_NOT_SUPPORTED; remembered, so the next call of the problem
 * answers at once), or ZGC_LT_ERROR with a message in @err.
 */
int zgc_lt_matmul(zgc_lt *lt, cudaStream_t s, const zgc_lt_problem *p, const void *A, const void *B,
                  void *D, const void *bias, void *aux, void *bias_grad, int *grad_f32, char *err,
                  size_t errlen);

/* zgc_lt_unsupported() - how many cached problems have no algorithm (each counted once). */
int zgc_lt_unsupported(const zgc_lt *lt);

#endif /* ZO_TRAIN_GPT_CUDA_LT_H */
