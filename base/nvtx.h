/*
 * nvtx.h - NVTX ranges for Nsight Systems timelines around the library's own
 * host work (swap I/O, CPU Adam, engine phases). Not a profiler and not
 * installed: with ZO_HAVE_NVTX 0 (no CUDA toolkit, or -DZO_WITH_NVTX=OFF)
 * every macro compiles to nothing and its arguments are not evaluated.
 *
 * nvtx3 is header-only. Until a tool is attached (nsys sets
 * NVTX_INJECTION64_PATH) each call is a load and a branch; no GPU, driver or
 * library is needed. Ranges are per thread: ZO_NVTX_POP() closes the latest
 * ZO_NVTX_PUSH*() of the calling thread, so push and pop on the same thread,
 * on every path out of the range.
 *
 *   ZO_NVTX_PUSH("adam");                          a constant name
 *   ZO_NVTX_PUSHF("swap read %s", name);           printf-style, formatted into
 *                                                  128 bytes (truncated) only
 *                                                  when ZO_HAVE_NVTX is 1
 *   ZO_NVTX_POP();
 */
#ifndef ZO_NVTX_H
#define ZO_NVTX_H

#ifndef ZO_HAVE_NVTX
#define ZO_HAVE_NVTX 0
#endif

#if ZO_HAVE_NVTX
#include <stdarg.h>
#include <stdio.h>
#include <nvtx3/nvToolsExt.h>

/* Longest range name ZO_NVTX_PUSHF() keeps, terminating NUL included. */
#define ZO_NVTX_NAME_MAX 128

static inline void zo_nvtx_pushf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void zo_nvtx_pushf(const char *fmt, ...) {
  char name[ZO_NVTX_NAME_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  nvtxRangePushA(name);
}

#define ZO_NVTX_PUSH(name) ((void)nvtxRangePushA(name))
#define ZO_NVTX_PUSHF(...) zo_nvtx_pushf(__VA_ARGS__)
#define ZO_NVTX_POP() ((void)nvtxRangePop())
#else
#define ZO_NVTX_PUSH(name) ((void)0)
#define ZO_NVTX_PUSHF(...) ((void)0)
#define ZO_NVTX_POP() ((void)0)
#endif

#endif /* ZO_NVTX_H */
