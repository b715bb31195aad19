/*
 * adam_device.cu - the device Adam kernels (fused Adam / AdamW update, squared
 * gradient norm, gradient accumulation) and their launches, behind gpu/adam_device.h. The element
 * arithmetic is base/adam_elem.h's zo_adam_elem_fused(), shared with CPU Adam;
 * this file is compiled with -fmad=false (no FMA contraction) so the kernel
 * performs the same float32 operations as cpu_adam (built -ffp-contract=off).
 * Not the argument checks (adam_device.c).
 */
#include <cuda_runtime.h>

#include "adam_device_internal.h"

#define ZO_DEV_ADAM_THREADS 256

__global__ void zo_adam_kernel(zo_adam_dev_job j) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < j.n; i += stride)
    (void)zo_adam_elem_fused(&j.c, i, j.param, j.grad, j.grad_dtype, j.exp_avg, j.exp_avg_sq,
                             j.state_dtype, j.param_out, j.out_dtype, j.seed, j.step32);
}

/* One partial per block: each thread's strided elements in double, then a fixed tree over the block. */
__global__ void zo_sqnorm_kernel(const void *g, zo_dtype gt, size_t n, double *partials) {
  __shared__ double acc[ZO_DEV_ADAM_THREADS];
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  double s = 0.0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double x = (double)zo_elem_load(g, gt, i);
    s += x * x;
  }
  acc[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = ZO_DEV_ADAM_THREADS / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) acc[threadIdx.x] += acc[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = acc[0];
}

/* One micro-batch into the accumulated gradient: engine_accum.c's eng_acc_add, element for element. */
__global__ void zo_grad_acc_kernel(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n,
                                   int add) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    zo_elem_store(dst, dt, i, (add ? zo_elem_load(dst, dt, i) : 0.0f) + zo_elem_load(src, st, i));
}

static unsigned grid_for(size_t n) {
  size_t blocks = (n + ZO_DEV_ADAM_THREADS - 1) / ZO_DEV_ADAM_THREADS;
  if (blocks > 65536) blocks = 65536; /* grid-stride beyond: 16.7M threads keep an H100 busy */
  return (unsigned)blocks;
}

extern "C" int zo_adam_device_launch(void *stream, const zo_adam_dev_job *j) {
  zo_adam_kernel<<<grid_for(j->n), ZO_DEV_ADAM_THREADS, 0, (cudaStream_t)stream>>>(*j);
  return (int)cudaGetLastError();
}

extern "C" int zo_sqnorm_device_launch(void *stream, const void *g, zo_dtype gt, size_t n,
                                       double *partials) {
  zo_sqnorm_kernel<<<ZO_DEV_SQNORM_BLOCKS, ZO_DEV_ADAM_THREADS, 0, (cudaStream_t)stream>>>(
      g, gt, n, partials);
  return (int)cudaGetLastError();
}

extern "C" int zo_grad_acc_device_launch(void *stream, void *dst, zo_dtype dt, const void *src,
                                         zo_dtype st, size_t n, int add) {
  zo_grad_acc_kernel<<<grid_for(n), ZO_DEV_ADAM_THREADS, 0, (cudaStream_t)stream>>>(dst, dt, src,
                                                                                    st, n, add);
  return (int)cudaGetLastError();
}

extern "C" const char *zo_adam_device_error_string(int err) {
  return cudaGetErrorString((cudaError_t)err);
}
