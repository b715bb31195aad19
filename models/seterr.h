/*
 * seterr.h - printf into a caller's error buffer, the way zo-train's data
 * loader and model report errors (char *err, size_t errlen). Header only.
 */
#ifndef ZO_TRAIN_SETERR_H
#define ZO_TRAIN_SETERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* seterr() - format into @err (at most @errlen bytes, NUL-terminated); no-op when @err is NULL or @errlen is 0. */
static inline void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

#endif /* ZO_TRAIN_SETERR_H */
