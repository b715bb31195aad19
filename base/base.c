/*
 * base.c - thread-local error messages and the log handler, and the small
 * helpers every module shares (the clock, byte sizes, whole-buffer pread and
 * pwrite). Every module links this file; it depends on nothing else in zoffload.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base_internal.h"

static _Thread_local char tl_error[1024];
_Thread_local int zo_tl_host_func;

const char *zo_status_string(zo_status s) {
  switch (s) {
    case ZO_OK: return "ZO_OK";
    case ZO_ERR_INVALID_ARG: return "ZO_ERR_INVALID_ARG";
    case ZO_ERR_INVALID_USAGE: return "ZO_ERR_INVALID_USAGE";
    case ZO_ERR_OUT_OF_MEMORY: return "ZO_ERR_OUT_OF_MEMORY";
    case ZO_ERR_SYSTEM: return "ZO_ERR_SYSTEM";
    case ZO_ERR_IO: return "ZO_ERR_IO";
    case ZO_ERR_UNSUPPORTED: return "ZO_ERR_UNSUPPORTED";
    case ZO_ERR_CUDA: return "ZO_ERR_CUDA";
    case ZO_ERR_NCCL: return "ZO_ERR_NCCL";
    case ZO_ERR_MPI: return "ZO_ERR_MPI";
    case ZO_ERR_CONFIG: return "ZO_ERR_CONFIG";
    case ZO_ERR_CORRUPT: return "ZO_ERR_CORRUPT";
  }
  return "ZO_ERR_UNKNOWN";
}

const char *zo_last_error(void) { return tl_error; }

zo_status zo_error_set(zo_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_error, sizeof tl_error, fmt, ap);
  va_end(ap);
  return st;
}

zo_status zo_error_prefix(zo_status st, const char *fmt, ...) {
  char prefix[512], old[sizeof tl_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, tl_error, sizeof old);
  snprintf(tl_error, sizeof tl_error, "%.500s: %.500s", prefix, old);
  return st;
}

/* ---- the stop request: one lock-free atomic, so a signal handler may raise it */

static atomic_int g_stop;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2,
               "zo_request_stop must be async-signal-safe: atomic_int must be lock-free");

void zo_request_stop(void) { atomic_store(&g_stop, 1); }

int zo_stop_requested(void) { return atomic_load_explicit(&g_stop, memory_order_relaxed); }

void zo_stop_reset(void) { atomic_store(&g_stop, 0); }

double zo_clock_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *zo_format_bytes(char *buf, size_t cap, double bytes) {
  static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (bytes >= 1024 && i < 5) bytes /= 1024, i++;
  snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", bytes, u[i]);
  return buf;
}

/* zo_pwrite_all() / zo_pread_all(): see base_internal.h. One loop for both directions. */
static int io_all(int fd, char *buf, size_t n, uint64_t off, size_t *done, int write) {
  size_t d = 0;
  int rc = 0;
  while (d < n) {
    ssize_t k = write ? pwrite(fd, buf + d, n - d, (off_t)(off + d))
                      : pread(fd, buf + d, n - d, (off_t)(off + d));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      rc = k == 0 ? 1 : -1;
      break;
    }
    d += (size_t)k;
  }
  if (done) *done = d;
  return rc;
}

int zo_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, size_t *done) {
  return io_all(fd, (char *)(uintptr_t)buf, n, off, done, 1);
}

int zo_pread_all(int fd, void *buf, size_t n, uint64_t off, size_t *done) {
  return io_all(fd, buf, n, off, done, 0);
}

const char *zo_escape(char *out, size_t cap, const void *s, size_t n) {
  if (!out || cap == 0) return out;
  if (!s) {
    snprintf(out, cap, "(null)");
    return out;
  }
  static const char hex[] = "0123456789abcdef";
  const unsigned char *b = s;
  size_t o = 0, total = 0;
  for (size_t i = 0; i < n && total < cap; i++)
    total += b[i] >= 0x20 && b[i] <= 0x7e && b[i] != '\\' ? 1 : 4;
  const size_t reserve = total < cap ? 0 : 3; /* it does not all fit: keep room for "..." */
  for (size_t i = 0; i < n; i++) {
    const int plain = b[i] >= 0x20 && b[i] <= 0x7e && b[i] != '\\';
    const size_t need = plain ? 1 : 4;
    if (o + need + reserve >= cap) {
      if (cap >= 4) {
        while (o + 3 >= cap) o--;
        memcpy(out + o, "...", 3);
        o += 3;
      }
      break;
    }
    if (plain) {
      out[o++] = (char)b[i];
    } else {
      out[o++] = '\\', out[o++] = 'x', out[o++] = hex[b[i] >> 4], out[o++] = hex[b[i] & 15];
    }
  }
  out[o < cap ? o : cap - 1] = 0;
  return out;
}

static zo_log_handler g_handler;
static void *g_handler_user;
static int g_max_level = -1; /* -1: not yet read from ZO_LOG_LEVEL */

static int level_from_env(void) {
  const char *s = getenv("ZO_LOG_LEVEL");
  if (!s) return ZO_LOG_WARN;
  if (!strcmp(s, "error")) return ZO_LOG_ERROR;
  if (!strcmp(s, "info")) return ZO_LOG_INFO;
  if (!strcmp(s, "debug")) return ZO_LOG_DEBUG;
  return ZO_LOG_WARN;
}

void zo_log_set_handler(zo_log_handler fn, void *user, zo_log_level max_level) {
  g_handler = fn;
  g_handler_user = user;
  g_max_level = (int)max_level;
}

void zo_log(zo_log_level level, const char *fmt, ...) {
  if (g_max_level < 0) g_max_level = level_from_env();
  if ((int)level > g_max_level) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (g_handler) {
    g_handler(level, line, g_handler_user);
    return;
  }
  static const char *names[] = {"error", "warning", "info", "debug"};
  fprintf(stderr, "zoffload: %s: %s\n", names[level], line);
}
