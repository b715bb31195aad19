/*
 * zoffload/status.h - result codes, the per-thread error message, logging.
 * Every public zoffload call returns a zo_status; 0 is success. This header
 * holds no state of its own; the message and log handler live in libzoffload.
 */
#ifndef ZOFFLOAD_STATUS_H
#define ZOFFLOAD_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ZO_BUILDING)
#define ZO_API __attribute__((visibility("default")))
#else
#define ZO_API
#endif

/*
 * zo_status - what went wrong and whose fault it was. The numbers are part of
 * the ABI and never change once released; new codes are only appended.
 */
typedef enum zo_status {
  ZO_OK = 0,
  ZO_ERR_INVALID_ARG = 1,   /* caller passed a bad value (NULL, 0 length, misaligned pointer) */
  ZO_ERR_INVALID_USAGE = 2, /* calls in the wrong order or on a handle in the wrong state */
  ZO_ERR_OUT_OF_MEMORY = 3, /* host, pinned or device memory exhausted (message says which) */
  ZO_ERR_SYSTEM = 4, /* a system call failed for a reason other than I/O (errno in message) */
  ZO_ERR_IO = 5, /* a read or write failed or came back short (file, offset, length in message) */
  ZO_ERR_UNSUPPORTED = 6, /* feature not built in or not available on this machine */
  ZO_ERR_CUDA = 7,        /* a CUDA runtime call failed */
  ZO_ERR_NCCL = 8,        /* an NCCL call failed */
  ZO_ERR_MPI = 9,         /* an MPI call failed */
  ZO_ERR_CONFIG =
      10, /* a config file is malformed or has a wrong type or value (JSON path in message) */
  ZO_ERR_CORRUPT = 11, /* data read back does not match what was written (checksum) */
} zo_status;

/*
 * zo_status_string() - constant name of a status, e.g. "ZO_ERR_IO".
 * Never NULL; unknown values give "ZO_ERR_UNKNOWN". Thread-safe.
 */
ZO_API const char *zo_status_string(zo_status s);

/*
 * zo_last_error() - human-readable message of the last call that failed on
 * the calling thread (like ncclGetLastError), naming the thing involved: a
 * JSON path, a file and offset, a tensor name. "" when no call has failed.
 * The string stays valid until the next failing zoffload call on this thread.
 * Thread-safe (the message is thread-local).
 */
ZO_API const char *zo_last_error(void);

/*
 * Stopping: a process-wide request, made from a signal handler (SIGTERM,
 * SIGINT) or any thread, that the library's artificial waits honour within
 * ZO_STOP_POLL_MS: the host device's emulated link (zo_device_set_link_gbps)
 * stops throttling, so copies complete at memory speed with the same bytes.
 * Every other wait in the library is for real, bounded work (a copy, an Adam
 * task, an NVMe transfer, a collective) and completes as that work does; it
 * is never abandoned, because the library orders frees and reuse after those
 * waits: a wait that gave up early would leave a copy or a transfer running
 * into freed memory. So a step in progress when the stop is requested
 * finishes correctly, and an engine can then be saved (zo_engine_save) and
 * destroyed as usual. Stopping the program is the caller's part: zo-train
 * finishes the step, saves it and exits 128 + the signal.
 */

/* How often, at most, a sleeping emulated copy looks at the stop request (milliseconds). */
#define ZO_STOP_POLL_MS 50

/*
 * zo_request_stop() - request a stop (above). Async-signal-safe (one store to
 * a lock-free atomic: no locks, no allocation, no message) and thread-safe.
 */
ZO_API void zo_request_stop(void);

/* zo_stop_requested() - 1 once zo_request_stop() was called (and not withdrawn), else 0. Async-signal-safe. */
ZO_API int zo_stop_requested(void);

/*
 * zo_stop_reset() - withdraw the stop request, e.g. after an interactive
 * interrupt the caller chose to survive: the link is emulated again from the
 * next copy. Async-signal-safe, thread-safe.
 */
ZO_API void zo_stop_reset(void);

/*
 * zo_escape() - @n bytes of untrusted text (file content, a name read from a
 * file) made safe to print: bytes outside printable ASCII (0x20..0x7e) and
 * the backslash become \xNN, so no control or escape sequence reaches a
 * terminal. Writes at most @cap bytes to @out (NUL-terminated; @cap >= 4),
 * ending in "..." when the escaped text did not fit. @s may hold NUL bytes
 * (@n counts them) and may be NULL (gives "(null)"). Returns @out, to be
 * used inline in a format. Thread-safe (no state).
 */
ZO_API const char *zo_escape(char *out, size_t cap, const void *s, size_t n);

/*
 * zo_clock_s() - a monotonic clock (CLOCK_MONOTONIC), in seconds since an
 * unspecified start; only differences between two readings mean anything.
 * Thread-safe (no state).
 */
ZO_API double zo_clock_s(void);

/*
 * zo_format_bytes() - @bytes (>= 0) as a human size with binary units:
 * "123 B" below 1 KiB (no decimals), else one decimal and the largest unit
 * up to PiB that keeps the number >= 1: "64.0 MiB", "79.1 GiB", "1.5 PiB".
 * Writes at most @cap bytes to @buf (NUL-terminated, truncated when it does
 * not fit; 16 bytes always suffice below 1e6 PiB). Returns @buf, to be used
 * inline in a format. Thread-safe (no state).
 */
ZO_API const char *zo_format_bytes(char *buf, size_t cap, double bytes);

typedef enum zo_log_level {
  ZO_LOG_ERROR = 0,
  ZO_LOG_WARN = 1,
  ZO_LOG_INFO = 2,
  ZO_LOG_DEBUG = 3,
} zo_log_level;

/*
 * zo_log_handler - receives every log line the library emits (no trailing
 * newline). May be called from any library thread, concurrently.
 */
typedef void (*zo_log_handler)(zo_log_level level, const char *msg, void *user);

/*
 * zo_log_set_handler() - route library log lines to @fn (NULL restores the
 * default, which writes "zoffload: warning: ..." lines to stderr) and drop
 * lines above @max_level. The environment variable ZO_LOG_LEVEL
 * (error|warn|info|debug) sets the default level; warn if unset.
 * Not thread-safe against concurrent logging: call it before starting work.
 */
ZO_API void zo_log_set_handler(zo_log_handler fn, void *user, zo_log_level max_level);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_STATUS_H */
