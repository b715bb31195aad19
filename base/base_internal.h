/*
 * base_internal.h - error recording, logging and check macros shared by every
 * module inside libzoffload. Not installed; public callers see zoffload/status.h.
 */
#ifndef ZO_BASE_INTERNAL_H
#define ZO_BASE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "zoffload/status.h"

/*
 * zo_error_set() - record a formatted message as this thread's last error and
 * return @st, so callers write `return zo_error_set(ZO_ERR_IO, "...")`.
 */
zo_status zo_error_set(zo_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* zo_error_prefix() - prepend "prefix: " to this thread's last error; returns @st. */
zo_status zo_error_prefix(zo_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* zo_log() - emit one log line through the installed handler. */
void zo_log(zo_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define zo_warn(...) zo_log(ZO_LOG_WARN, __VA_ARGS__)
#define zo_info(...) zo_log(ZO_LOG_INFO, __VA_ARGS__)
#define zo_debug(...) zo_log(ZO_LOG_DEBUG, __VA_ARGS__)

/* zo_log_once() - log the first time this call site is reached in the process; zo_warn_once() at WARN. */
#define zo_log_once(level, ...)                                           \
  do {                                                                    \
    static atomic_int zo_logged_;                                         \
    if (atomic_exchange(&zo_logged_, 1) == 0) zo_log(level, __VA_ARGS__); \
  } while (0)
#define zo_warn_once(...) zo_log_once(ZO_LOG_WARN, __VA_ARGS__)

/* ZO_CHECK_GOTO(expr, st, label): evaluate a zo_status expression; on failure store it in st and goto label. */
#define ZO_CHECK_GOTO(expr, st, label) \
  do {                                 \
    (st) = (expr);                     \
    if ((st) != ZO_OK) goto label;     \
  } while (0)

/* ZO_CHECK(expr): return the zo_status of expr when it is not ZO_OK. */
#define ZO_CHECK(expr)                  \
  do {                                  \
    zo_status zo_st_ = (expr);          \
    if (zo_st_ != ZO_OK) return zo_st_; \
  } while (0)

/*
 * Checked size arithmetic: the one way to multiply, add or round up byte and
 * element counts that come from user input (element counts, config sizes,
 * tool options). Each stores the result in *out and returns 0, or returns 1
 * and stores SIZE_MAX when the exact result does not fit in size_t; callers
 * refuse with a message naming the tensor or option:
 *   if (zo_size_mul(n, esz, &nbytes)) return zo_error_set(ZO_ERR_INVALID_ARG, "tensor '%s': ...", name);
 * @align of zo_size_round_up() is > 0.
 */
static inline int zo_size_mul(size_t a, size_t b, size_t *out) {
  if (__builtin_mul_overflow(a, b, out)) return *out = SIZE_MAX, 1;
  return 0;
}
static inline int zo_size_add(size_t a, size_t b, size_t *out) {
  if (__builtin_add_overflow(a, b, out)) return *out = SIZE_MAX, 1;
  return 0;
}
static inline int zo_size_round_up(size_t x, size_t align, size_t *out) {
  size_t t;
  if (__builtin_add_overflow(x, align - 1, &t)) return *out = SIZE_MAX, 1;
  *out = t / align * align;
  return 0;
}

/*
 * zo_round_up() - @x rounded up to a multiple of @align (> 0), unchecked: only
 * for values already bounded far below SIZE_MAX (sizes the engine has already
 * checked, small constants). Sizes from user input go through zo_size_round_up().
 */
static inline size_t zo_round_up(size_t x, size_t align) { return (x + align - 1) / align * align; }

/*
 * zo_pwrite_all() / zo_pread_all() - write or read all @n bytes of @buf at file
 * offset @off of @fd, retrying on EINTR and on short transfers. Return 0 when
 * all @n bytes moved; 1 when a call moved 0 bytes (end of file for a read);
 * -1 on an error, errno set. *@done (may be NULL) gets the bytes moved, so the
 * caller's message can name the offset (@off + *@done) where it stopped.
 * Thread-safe as pread/pwrite are.
 */
int zo_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, size_t *done);
int zo_pread_all(int fd, void *buf, size_t n, uint64_t off, size_t *done);

/*
 * Replacing a file whose directory others may write to (tmpfile.c says why it is safe):
 *   fd = zo_tmpfile_open(path, tmp, sizeof tmp);   write, fsync, close
 *   zo_tmpfile_place(tmp, path, &found);            unlink(tmp) when it did not place it
 * zo_tmpfile_open() - a new regular file beside @target named "DIR/.BASE.PID.N.tmp" (BASE: at most the first 200
 * bytes of @target's last component; N the first of 0..ZO_TMPFILE_TRIES-1 whose name is free), its name into @tmp
 * (@cap bytes). Made with O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0644 less the umask: nothing that exists
 * at a name is opened or followed, that name is skipped. Returns the descriptor, or -errno: -ENAMETOOLONG (@tmp too
 * small), -EISDIR (@target ends in '/'), -EEXIST (every name taken), or open's.
 * zo_tmpfile_target_check() - 0 when @target is absent or a regular file (lstat: a symbolic link is not one), 1 when
 * it is something else (its mode into *@found, may be NULL), -errno when lstat fails otherwise.
 * zo_tmpfile_place() - zo_tmpfile_target_check(@target), then rename(@tmp, @target): 0 placed; 1 refused (*@found
 * set, @tmp left for the caller to remove); -errno (lstat's or rename's).
 * zo_file_kind() - "a symbolic link", "a directory", "a character device", "a FIFO", ... for messages.
 * zo_tmpfile_sweep() - remove what writers killed before their rename left of @target: each entry of @target's
 * directory named exactly ".BASE.PID.N.tmp" (BASE as zo_tmpfile_open makes it for @target, truncation to 200 bytes
 * included; PID and N decimal as it prints them) whose PID zo_pid_gone() calls gone and which lstat(2) calls a
 * regular file; each removal logged at INFO naming its path. A link, FIFO, directory or device, another target's
 * leftover and a live process's (this one's included) stay. Best effort: an unreadable directory or a failed
 * unlink is skipped silently. Call it before zo_tmpfile_open. A PID is only checked on this host: a writer on
 * another host sharing the directory is not seen.
 * zo_pid_gone() - 1 when no process runs as @pid here (kill(pid, 0) fails with ESRCH); 0 when one runs (or may:
 * EPERM), for this process's own pid, and for @pid outside 1..INT_MAX.
 * zo_pid_exited() - zo_pid_gone(), or @pid has exited and its parent has not reaped it yet (a zombie:
 * /proc/@pid/stat state Z or X); for a peer process that must not be waited on once it has ended.
 */
#define ZO_TMPFILE_TRIES 100
int zo_tmpfile_open(const char *target, char *tmp, size_t cap);
int zo_tmpfile_target_check(const char *target, mode_t *found);
int zo_tmpfile_place(const char *tmp, const char *target, mode_t *found);
const char *zo_file_kind(mode_t mode);
void zo_tmpfile_sweep(const char *target);
int zo_pid_gone(long pid);
int zo_pid_exited(long pid);

/*
 * zo_tl_host_func - nonzero while the calling thread runs a stream host function (zo_launch_host_func): the host
 * device's stream threads set it around each one (gpu/device_host.c), the CUDA backend through a trampoline around
 * the caller's function on the driver's thread (gpu/device_cuda.c). Lets the engine check that no gradient work
 * runs inside one.
 */
extern _Thread_local int zo_tl_host_func;

#endif /* ZO_BASE_INTERNAL_H */
