/*
 * adam_device.c - the checks and error mapping in front of the device Adam
 * launches (adam_device.h). The kernels are adam_device.cu's, built only with
 * the CUDA compiler (ZO_HAVE_ADAM_KERNEL); without it every call answers
 * ZO_ERR_UNSUPPORTED. Not the arithmetic (base/adam_elem.h).
 */
#include <stdio.h>

#include "adam_device.h"
#include "device_internal.h"
#if ZO_HAVE_ADAM_KERNEL
#include "adam_device_internal.h"
#endif

int zo_adam_device_available(const zo_device_t *dev, char *why, size_t cap) {
  if (!dev) {
    if (why && cap) snprintf(why, cap, "no device");
    return 0;
  }
  return zo_adam_device_kind_available(dev->kind, why, cap);
}

int zo_adam_device_kind_available(zo_device_kind kind, char *why, size_t cap) {
  const char *no = NULL;
  if (kind != ZO_DEVICE_CUDA)
    no =
        "device Adam runs on CUDA devices only (a host device's memory is host memory: CPU Adam updates it)";
  else if (!ZO_HAVE_ADAM_KERNEL)
    no =
        "this zoffload was built without the CUDA compiler, so it has no device Adam kernel (rebuild with nvcc "
        "on PATH or CMAKE_CUDA_COMPILER set)";
  if (no && why && cap) snprintf(why, cap, "%s", no);
  return no == NULL;
}

static int dtype_ok(zo_dtype t) {
  return t == ZO_DTYPE_F32 || t == ZO_DTYPE_F16 || t == ZO_DTYPE_BF16;
}

/* ZO_OK when @s is a stream of a device that runs the kernels; else the refusal naming @what. */
static zo_status check_stream(const char *what, zo_stream_t *s) {
  if (!s) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: stream is NULL", what);
  char why[256];
  if (!zo_adam_device_available(s->dev, why, sizeof why))
    return zo_error_set(ZO_ERR_UNSUPPORTED, "%s on device '%s': %s", what, s->dev->name, why);
  return ZO_OK;
}

#if ZO_HAVE_ADAM_KERNEL
static zo_status launched(const char *what, int err, size_t n) {
  if (err == 0) return ZO_OK;
  return zo_error_set(ZO_ERR_CUDA, "%s of %zu elements: kernel launch failed: %s", what, n,
                      zo_adam_device_error_string(err));
}
#endif

zo_status zo_adam_device_step(zo_stream_t *s, const zo_adam_dev_job *j) {
  static const char what[] = "zo_adam_device_step";
  if (!j) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: job is NULL", what);
  if (!dtype_ok(j->grad_dtype) ||
      (j->state_dtype != ZO_DTYPE_F32 && j->state_dtype != ZO_DTYPE_BF16) ||
      (j->param_out && !dtype_ok(j->out_dtype)))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "%s: dtypes grad %d, state %d, out %d: expected grad and out F32, F16 "
                        "or BF16, state F32 or BF16",
                        what, (int)j->grad_dtype, (int)j->state_dtype, (int)j->out_dtype);
  if (j->n && (!j->param || !j->grad || !j->exp_avg || !j->exp_avg_sq))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s is NULL with n = %zu", what,
                        !j->param     ? "param"
                        : !j->grad    ? "grad"
                        : !j->exp_avg ? "exp_avg"
                                      : "exp_avg_sq",
                        j->n);
  ZO_CHECK(check_stream(what, s));
  if (!j->n) return ZO_OK;
#if ZO_HAVE_ADAM_KERNEL
  return launched(what, zo_adam_device_launch(zo_stream_native(s), j), j->n);
#else
  return ZO_ERR_UNSUPPORTED; /* check_stream() refused already */
#endif
}

zo_status zo_grad_sqnorm_device(zo_stream_t *s, const void *g, zo_dtype gt, size_t n,
                                double *partials) {
  static const char what[] = "zo_grad_sqnorm_device";
  if (!dtype_ok(gt))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: grad dtype %d is not F32, F16 or BF16", what,
                        (int)gt);
  if (!partials || (n && !g))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s is NULL", what, partials ? "g" : "partials");
  ZO_CHECK(check_stream(what, s));
#if ZO_HAVE_ADAM_KERNEL
  return launched(what, zo_sqnorm_device_launch(zo_stream_native(s), g, gt, n, partials), n);
#else
  return ZO_ERR_UNSUPPORTED;
#endif
}

zo_status zo_grad_acc_device(zo_stream_t *s, void *dst, zo_dtype dt, const void *src, zo_dtype st,
                             size_t n, int add) {
  static const char what[] = "zo_grad_acc_device";
  if (!dtype_ok(dt) || !dtype_ok(st))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: dtypes dst %d, src %d: expected F32, F16 or BF16",
                        what, (int)dt, (int)st);
  if (n && (!dst || !src))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s is NULL with n = %zu", what,
                        dst ? "src" : "dst", n);
  ZO_CHECK(check_stream(what, s));
  if (!n) return ZO_OK;
#if ZO_HAVE_ADAM_KERNEL
  return launched(what, zo_grad_acc_device_launch(zo_stream_native(s), dst, dt, src, st, n, add),
                  n);
#else
  (void)add;
  return ZO_ERR_UNSUPPORTED;
#endif
}
