/*
 * base.c - thread-local error messages and the log handler. Every module links
 * this file; it depends on nothing else in zoffload.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base_internal.h"

static _Thread_local char tl_error[1024];

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
    case ZO_ERR_INTERRUPTED: return "ZO_ERR_INTERRUPTED";
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

static atomic_int g_stop_mode;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "zo_request_stop must be async-signal-safe: atomic_int must be lock-free");

zo_status zo_request_stop(zo_stop_mode mode) {
  if (mode != ZO_STOP_DRAIN && mode != ZO_STOP_ABORT) return ZO_ERR_INVALID_ARG;
  int cur = atomic_load(&g_stop_mode);
  while (cur < (int)mode && !atomic_compare_exchange_weak(&g_stop_mode, &cur, (int)mode)) {
  }
  return ZO_OK;
}

zo_stop_mode zo_stop_requested(void) { return (zo_stop_mode)atomic_load(&g_stop_mode); }

void zo_stop_reset(void) { atomic_store(&g_stop_mode, ZO_STOP_NONE); }

int zo_cond_wait_slice(pthread_cond_t *cv, pthread_mutex_t *mu) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += ZO_STOP_POLL_MS * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
  }
  return pthread_cond_clockwait(cv, mu, CLOCK_MONOTONIC, &t);
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
