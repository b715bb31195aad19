/*
 * devadam_emu.h - host emulations of device Adam's kernels (gpu/adam_device.cu) for the stand-in runtime
 * (fake_cudart.c's fake_cuda_emulate, found with dlsym): written from each kernel's documented contract and
 * argument list, with base/adam_elem.h's element functions, so the engine's device-Adam path runs end to end
 * on a machine without a GPU. Not the kernels: what they must compute, thread by thread where the result
 * depends on the order (the norm partials' in-block tree). Include in a test that links the library and
 * runs with the stand-in on LD_LIBRARY_PATH; devadam_emu_install() returns 0 when it is not loaded.
 * Every device pointer an emulation touches (a kernel argument, or a member of the job struct) is read and written
 * through the stand-in's fake_cuda_hostview(), as only a kernel may: under FAKE_CUDA_DEVICE_NOACCESS the pointer
 * itself is not host-accessible, so a HOST access of device memory elsewhere (the engine, a test) still faults.
 */
#ifndef ZO_DEVADAM_EMU_H
#define ZO_DEVADAM_EMU_H

#include <dlfcn.h>
#include <stdlib.h>
#include <vector_types.h>

#include "adam_device.h"
#include "adam_elem.h"

/* fake_cuda_hostview(p): where the stand-in keeps the bytes of device pointer @p (p itself unless
 * FAKE_CUDA_DEVICE_NOACCESS); set by devadam_emu_install(). */
typedef void *(*devadam_hostview_fn)(const void *p);
static devadam_hostview_fn devadam_emu_hostview;
#define DV(p) devadam_emu_hostview(p) /* a kernel's view of device pointer p */

/* Launches that ran (on the streams' workers), per kernel: a test checks the device path really ran. */
static unsigned long devadam_emu_adam_runs, devadam_emu_norm_runs, devadam_emu_acc_runs;

/* zo_adam_kernel(zo_adam_dev_job j): the grid-stride loop, every element i < n once (elements independent). */
static void emu_adam_kernel(dim3 grid, dim3 block, void **args, size_t shmem) {
  (void)shmem;
  const zo_adam_dev_job *j =
      args[0]; /* the argument's copy: host memory; its pointers: device memory */
  __atomic_add_fetch(&devadam_emu_adam_runs, 1, __ATOMIC_RELAXED);
  if (!j->n) return;
  float *param = DV(j->param);
  const void *grad = DV(j->grad);
  void *exp_avg = DV(j->exp_avg), *exp_avg_sq = DV(j->exp_avg_sq);
  void *param_out = j->param_out ? DV(j->param_out) : NULL;
  const size_t stride = (size_t)grid.x * block.x;
  for (size_t b = 0; b < grid.x; b++)
    for (size_t t = 0; t < block.x; t++)
      for (size_t i = b * block.x + t; i < j->n; i += stride)
        (void)zo_adam_elem_fused(&j->c, i, param, grad, j->grad_dtype, exp_avg, exp_avg_sq,
                                 j->state_dtype, param_out, j->out_dtype, j->seed, j->step32);
}

/* zo_sqnorm_kernel(const void *g, zo_dtype gt, size_t n, double *partials): block b's thread t sums x*x (x
 * widened exactly, in double) over i = b*blockDim + t, stepping gridDim*blockDim; then the block's halving tree
 * (acc[t] += acc[t + w] for w = blockDim/2, /4, ..., 1); partials[b] = acc[0]. One partial per block:
 * ZO_DEV_SQNORM_BLOCKS of them for the engine's launch. */
static void emu_sqnorm_kernel(dim3 grid, dim3 block, void **args, size_t shmem) {
  (void)shmem;
  const void *g = DV(*(const void *const *)args[0]);
  const zo_dtype gt = *(const zo_dtype *)args[1];
  const size_t n = *(const size_t *)args[2];
  double *partials = DV(*(double *const *)args[3]);
  __atomic_add_fetch(&devadam_emu_norm_runs, 1, __ATOMIC_RELAXED);
  const size_t stride = (size_t)grid.x * block.x;
  double *acc = malloc(block.x * sizeof *acc);
  if (!acc) abort(); /* a test helper: 2 KiB */
  for (size_t b = 0; b < grid.x; b++) {
    for (size_t t = 0; t < block.x; t++) {
      double s = 0.0;
      for (size_t i = b * block.x + t; i < n; i += stride) {
        const double x = (double)zo_elem_load(g, gt, i);
        s += x * x;
      }
      acc[t] = s;
    }
    for (unsigned w = block.x / 2; w > 0; w /= 2)
      for (unsigned t = 0; t < w; t++) acc[t] += acc[t + w];
    partials[b] = acc[0];
  }
  free(acc);
}

/* zo_grad_acc_kernel(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n, int add): for every i < n
 * (grid-stride, elements independent) dst[i] = (add ? dst[i] : 0) + src[i] in float32, stored in dt. */
static void emu_acc_kernel(dim3 grid, dim3 block, void **args, size_t shmem) {
  (void)shmem;
  void *dst = DV(*(void *const *)args[0]);
  const zo_dtype dt = *(const zo_dtype *)args[1];
  const void *src = DV(*(const void *const *)args[2]);
  const zo_dtype st = *(const zo_dtype *)args[3];
  const size_t n = *(const size_t *)args[4];
  const int add = *(const int *)args[5];
  __atomic_add_fetch(&devadam_emu_acc_runs, 1, __ATOMIC_RELAXED);
  const size_t stride = (size_t)grid.x * block.x;
  for (size_t b = 0; b < grid.x; b++)
    for (size_t t = 0; t < block.x; t++)
      for (size_t i = b * block.x + t; i < n; i += stride)
        zo_elem_store(dst, dt, i,
                      (add ? zo_elem_load(dst, dt, i) : 0.0f) + zo_elem_load(src, st, i));
}

typedef void (*devadam_emu_fn)(dim3 grid, dim3 block, void **args, size_t shmem);
typedef int (*devadam_emulate_fn)(const char *sub, devadam_emu_fn fn, int n_args,
                                  const size_t *arg_sizes);

/* Register the emulations with the loaded stand-in. 1 when the three kernels are emulated, 0 when the stand-in
 * (or its emulation hook, or fake_cuda_hostview) is not loaded, -1 when it is but a kernel name matched nothing. */
static int devadam_emu_install(void) {
  devadam_emulate_fn emulate = (devadam_emulate_fn)dlsym(RTLD_DEFAULT, "fake_cuda_emulate");
  devadam_emu_hostview = (devadam_hostview_fn)dlsym(RTLD_DEFAULT, "fake_cuda_hostview");
  if (!emulate || !devadam_emu_hostview) return 0;
  const size_t adam_args[] = {sizeof(zo_adam_dev_job)};
  const size_t norm_args[] = {sizeof(const void *), sizeof(zo_dtype), sizeof(size_t),
                              sizeof(double *)};
  if (emulate("zo_adam_kernel", emu_adam_kernel, 1, adam_args) < 1) return -1;
  const size_t acc_args[] = {sizeof(void *),   sizeof(zo_dtype), sizeof(const void *),
                             sizeof(zo_dtype), sizeof(size_t),   sizeof(int)};
  if (emulate("zo_sqnorm_kernel", emu_sqnorm_kernel, 4, norm_args) < 1) return -1;
  if (emulate("zo_grad_acc_kernel", emu_acc_kernel, 6, acc_args) < 1) return -1;
  return 1;
}

#undef DV

#endif /* ZO_DEVADAM_EMU_H */
