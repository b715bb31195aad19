/*
 * adam_device_internal.h - the launches adam_device.cu exports to
 * adam_device.c (C linkage, CUDA errors as int). Not installed; present only
 * when the library is built with the CUDA compiler (ZO_HAVE_ADAM_KERNEL).
 */
#ifndef ZO_ADAM_DEVICE_INTERNAL_H
#define ZO_ADAM_DEVICE_INTERNAL_H

#include "adam_device.h"

#ifdef __cplusplus
extern "C" {
#endif
/* cudaError_t of the launch of the update / norm / accumulation kernel on @stream (a cudaStream_t); 0 when queued. */
int zo_adam_device_launch(void *stream, const zo_adam_dev_job *j);
int zo_sqnorm_device_launch(void *stream, const void *g, zo_dtype gt, size_t n, double *partials);
int zo_grad_acc_device_launch(void *stream, void *dst, zo_dtype dt, const void *src, zo_dtype st,
                              size_t n, int add);
const char *zo_adam_device_error_string(int err);
#ifdef __cplusplus
}
#endif

#endif /* ZO_ADAM_DEVICE_INTERNAL_H */
