/*
 * gemm_bf16.h - the CPU model's bf16 matrix products (train.cpu_gemm "bf16"):
 * bf16 operands, fp32 accumulation and fp32 result, as the CUDA model computes
 * (and as torch's bf16 autocast on the CPU does), through oneDNN's matmul
 * (brgemm kernels: AVX512_BF16 where the CPU has it, oneDNN's emulation on
 * other AVX-512 CPUs). Not part of libzoffload: the model of zo-train only
 * (models/, part of zo_gpt).
 *
 * Why: at the model shapes of the large presets (64 tokens, d_model 2560)
 * OpenBLAS 0.3.21's sgemm runs at 71-89 GFLOP/s a core on this project's
 * EPYC and oneDNN 2.6's bf16 matmul at 162-184 (docs/placement.md), and the
 * weights need no cast: the engine's bf16 working copy is the operand.
 *
 * Determinism: one call runs on the calling thread only (the primitive is
 * created for one thread, and oneDNN runs serially inside an OpenMP parallel
 * region), so a product tiled by shape alone (gpt.c) gives the same bits on
 * any thread count. Results differ from the fp32 path (the operands are
 * rounded to bf16).
 */
#ifndef ZO_TRAIN_GEMM_BF16_H
#define ZO_TRAIN_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

/*
 * gemm_bf16_1t() - C (M,N) = op(A) op(B) (accumulate 0) or C += op(A) op(B)
 * (accumulate 1), row-major: op(A) is (M,K), A stored (M,K) with leading
 * dimension lda, or (K,M) when @ta (A transposed); op(B) is (K,N), B stored
 * (K,N) with ldb, or (N,K) when @tb. A and B are bf16 (uint16 bit patterns),
 * C fp32 with ldc. Sizes are elements. One thread (the caller's). The
 * primitive for each (shape, layout, accumulate) is created once and cached
 * (thread-safe); the scratchpad is the calling thread's own.
 * Returns 0, or -1 with a message in @err (@errlen bytes) naming the shape
 * and oneDNN's status (creation failed, out of memory); C is then unchanged
 * or partly written.
 */
int gemm_bf16_1t(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                 int ldb, int accumulate, float *C, int ldc, char *err, size_t errlen);

/*
 * gemm_bf16_prepare() - make and cache the primitive gemm_bf16_1t() would use
 * for this shape, layout and @accumulate, without running it. Returns 0, or
 * -1 with a message in @err naming the shape and oneDNN's status (creation
 * failed: e.g. no bf16 matmul for this CPU; out of memory). Thread-safe.
 */
int gemm_bf16_prepare(int ta, int tb, int M, int N, int K, int lda, int ldb, int accumulate,
                      int ldc, char *err, size_t errlen);

/* gemm_bf16_isa() - the kernel oneDNN picked for a representative product (e.g. "brg:avx512_core_bf16"), for the
 * log; "unavailable: ..." when oneDNN cannot make one. */
const char *gemm_bf16_isa(void);

#endif /* ZO_TRAIN_GEMM_BF16_H */
