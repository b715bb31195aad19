/*
 * zoffload/dtype.h - element types of tensors the library moves and updates.
 * Header only; the conversions themselves live in zoffload/adam.h (zo_cast).
 */
#ifndef ZOFFLOAD_DTYPE_H
#define ZOFFLOAD_DTYPE_H

#include <stddef.h>

typedef enum zo_dtype {
  ZO_DTYPE_F32 = 0,  /* IEEE binary32 */
  ZO_DTYPE_F16 = 1,  /* IEEE binary16 */
  ZO_DTYPE_BF16 = 2, /* bfloat16: the upper 16 bits of a binary32 */
} zo_dtype;

/* zo_dtype_size() - bytes per element of @t (4 or 2). */
static inline size_t zo_dtype_size(zo_dtype t) { return t == ZO_DTYPE_F32 ? 4 : 2; }

/* zo_dtype_name() - "fp32", "fp16" or "bf16". */
static inline const char *zo_dtype_name(zo_dtype t) {
  return t == ZO_DTYPE_F32 ? "fp32" : t == ZO_DTYPE_F16 ? "fp16" : "bf16";
}

#endif /* ZOFFLOAD_DTYPE_H */
