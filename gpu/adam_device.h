/*
 * adam_device.h - device Adam: the fused Adam / AdamW update and the squared
 * gradient norm as CUDA kernels on a zo_stream_t, for optimizer state that
 * lives in device memory (zero_optimization.offload_optimizer.device "none"
 * on a GPU). The arithmetic is base/adam_elem.h's, the very function CPU Adam
 * (cpu_adam/) runs; this is only the launch. Not the hyperparameter schedule
 * (the engine's) and not installed: the engine (offload/engine_step.c) is the
 * caller.
 *
 * Source of the algorithm: Kingma & Ba, "Adam" (ICLR 2015); the decoupled
 * weight decay of AdamW: Loshchilov & Hutter, "Decoupled Weight Decay
 * Regularization" (ICLR 2019). Same rule, same decay modes, same bias
 * correction and epsilon placement as zo_adam_update() (zoffload/adam.h).
 */
#ifndef ZO_ADAM_DEVICE_H
#define ZO_ADAM_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "adam_elem.h"
#include "zoffload/device.h"
#include "zoffload/dtype.h"

/* One fused update of n elements, every pointer device memory of the stream's device. */
typedef struct zo_adam_dev_job {
  zo_adam_consts c; /* zo_adam_make_consts() of the step's hyperparameters */
  float *param;     /* float32[n]: fp32 master weights, updated in place; 4-byte aligned */
  const void *grad; /* grad_dtype[n] (F32, F16, BF16), read only */
  void *exp_avg;    /* state_dtype[n] (F32, or BF16 with stochastic rounding), updated in place */
  void *exp_avg_sq; /* state_dtype[n] */
  /* out_dtype[n]: the working copy written from the new master in the same pass; or NULL */
  void *param_out;
  zo_dtype grad_dtype, state_dtype, out_dtype;
  size_t n;        /* elements, not bytes; 0 is a no-op */
  uint64_t seed;   /* bf16 state rounding key of element i: seed + i (as zo_adam_shard.seed) */
  uint32_t step32; /* (uint32_t) the 1-based step, for the rounding hash */
} zo_adam_dev_job;

/* Blocks of zo_grad_sqnorm_device(): the number of partial sums it writes. */
#define ZO_DEV_SQNORM_BLOCKS 256

/*
 * zo_adam_device_available() - whether @dev runs device Adam: 1 for a CUDA
 * device when this library was built with the CUDA compiler (the kernels
 * exist), else 0 with @why (@cap bytes, may be NULL) saying why. Host devices
 * answer 0: their "device" memory is host memory and CPU Adam updates it.
 * Thread-safe.
 */
int zo_adam_device_available(const zo_device_t *dev, char *why, size_t cap);
/* The same for a device of @kind (HOST or CUDA), before any device exists (a dry run).
 * Thread-safe. */
int zo_adam_device_kind_available(zo_device_kind kind, char *why, size_t cap);

/*
 * zo_adam_device_step() - queue the fused update of @j on @s (one kernel
 * launch: every element read once and written once, 256 threads a block,
 * grid-stride). Returns when enqueued; the update is complete when @s
 * reaches this point (zo_stream_synchronize, or an event recorded after it).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL stream or job, a NULL array with
 * n > 0, a dtype outside the lists above); ZO_ERR_UNSUPPORTED when
 * zo_adam_device_available() is 0; ZO_ERR_CUDA when the launch fails (the
 * runtime's message; the thread's last CUDA error is cleared). Thread-safe
 * for different streams.
 */
zo_status zo_adam_device_step(zo_stream_t *s, const zo_adam_dev_job *j);

/*
 * zo_grad_sqnorm_device() - queue the squared L2 norm of @g (@gt[n], device
 * memory) on @s as ZO_DEV_SQNORM_BLOCKS partial sums in double into
 * @partials (device memory, double[ZO_DEV_SQNORM_BLOCKS], 8-byte aligned):
 * each element widened exactly and squared in double, the partials reduced
 * in a fixed order, so the result does not depend on timing. The sum of the
 * partials is +inf or NaN when any element is inf or NaN (the overflow
 * check). Returns when enqueued; errors as zo_adam_device_step().
 */
zo_status zo_grad_sqnorm_device(zo_stream_t *s, const void *g, zo_dtype gt, size_t n,
                                double *partials);

/*
 * zo_grad_acc_device() - queue the accumulation of one micro-batch's gradient
 * on @s: dst[i] = (add ? dst[i] : 0) + src[i] for i < @n, in float32 (each
 * element widened exactly), stored in @dt (round to nearest even), one
 * grid-stride kernel; the arithmetic of the engine's host add (eng_acc_add,
 * offload/engine_accum.c), so a device sum and a host sum of the same
 * micro-batches in the same order are the same bits. @dst: @dt[n] (F32, F16,
 * BF16), @src: @st[n], both device memory of @s's device, not overlapping.
 * Returns when enqueued; errors as zo_adam_device_step().
 */
zo_status zo_grad_acc_device(zo_stream_t *s, void *dst, zo_dtype dt, const void *src, zo_dtype st,
                             size_t n, int add);

#endif /* ZO_ADAM_DEVICE_H */
