/*
 * gpt_cuda_device.h - what both kernel sets' files (gpt_cuda_kernels.cu, the
 * baseline; gpt_cuda_fused.cu, with gpt_cuda_lt.cu) launch and reduce with: the
 * cap on a grid-stride loop's blocks, the 16-byte alignment test of vectorised
 * and cuBLASLt operands, and the warp butterfly reductions. CUDA C++, included
 * by those .cu files only.
 */
#ifndef ZO_TRAIN_GPT_CUDA_DEVICE_H
#define ZO_TRAIN_GPT_CUDA_DEVICE_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define ZGC_MAX_GRID \
  (1u << 20) /* blocks a launch asks for at most: grid-stride loops cover the rest */

/* @blocks clamped to [1, ZGC_MAX_GRID]: a launch's grid for a grid-stride loop (host code). */
static inline unsigned zgc_grid_cap(size_t blocks) {
  if (blocks < 1) blocks = 1;
  return blocks > ZGC_MAX_GRID ? ZGC_MAX_GRID : (unsigned)blocks;
}

/* @p on a 16-byte boundary (NULL is): 128-bit loads and stores, and cuBLASLt's operands, need it (host code). */
static inline int zgc_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Butterfly reductions over a full warp (all 32 lanes active): every lane ends with the same
 * value, summed (or maxed) in a fixed order, so results are deterministic. */
static __device__ __forceinline__ float zgc_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ float zgc_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

#endif
