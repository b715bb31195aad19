/*
 * zoffload/swap.h - the NVMe tier: swap files in a private directory on a fast
 * disk, read and written with io_uring and O_DIRECT in block_size pieces.
 * It stores bytes at offsets; extent layout and checksums live above it.
 * Model: DeepSpeed's aio handle (block_size pieces, queue_depth in flight)
 * done on liburing (io_uring_prep_read/write, one SQE per piece).
 */
#ifndef ZOFFLOAD_SWAP_H
#define ZOFFLOAD_SWAP_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Thread-safety, for every function below: a zo_swap_t, its files and its
 * requests are used by one thread at a time (the caller serialises). Two
 * different zo_swap_t may be used from two threads concurrently. Errors are
 * also described by zo_last_error() on the calling thread.
 */
typedef struct zo_swap zo_swap_t;           /* one io_uring + one private directory */
typedef struct zo_swap_file zo_swap_file_t; /* one preallocated swap file in that directory */
typedef struct zo_swap_req zo_swap_req_t;   /* one outstanding read or write */

typedef struct zo_swap_opts {
  size_t block_size;     /* bytes per io_uring request piece; 0: 1 MiB. Rounded up to a
                            multiple of zo_swap_alignment(); at most 1 GiB. DeepSpeed aio.block_size. */
  unsigned queue_depth;  /* max pieces in flight across all requests; 0: 32; at most 32768.
                            DeepSpeed aio.queue_depth. */
} zo_swap_opts;

/*
 * zo_swap_create() - open the NVMe tier under @nvme_path.
 * @nvme_path: an existing, writable directory (ideally on an NVMe drive).
 *             The private directory nvme_path/zoffload-<pid>-XXXXXX is made
 *             with mkdtemp (mode 0700); every swap file lives in it.
 * @opts:      block size and queue depth; NULL means all defaults.
 * @out:       receives the handle; set to NULL on failure.
 * Creates an io_uring of queue_depth entries. If io_uring_queue_init fails
 * (-ENOSYS on old kernels, -EPERM in sandboxes that forbid it) the handle
 * falls back to synchronous pread/pwrite and warns once. The environment
 * variable ZO_SWAP_FORCE_PREAD=1 forces that fallback (for tests).
 * The O_DIRECT alignment is measured here (see zo_swap_alignment()).
 * Synchronous. Returns ZO_OK; ZO_ERR_INVALID_ARG when an argument is NULL,
 * nvme_path is empty, too long, does not exist or is not a directory, or
 * opts is out of range; ZO_ERR_SYSTEM when the private directory cannot be
 * made (not writable, read-only file system, no space) or another system
 * call fails; ZO_ERR_OUT_OF_MEMORY. Messages name the path and the errno
 * text, e.g. "swap: nvme_path '/nope': No such file or directory".
 */
ZO_API zo_status zo_swap_create(const char *nvme_path, const zo_swap_opts *opts, zo_swap_t **out);

/*
 * zo_swap_destroy() - close and unlink every swap file, remove the private
 * directory, free the ring and every request not yet waited for.
 * The caller must have waited all its requests first; pieces still in the
 * kernel are reaped (their results dropped, with a warning) so no memory is
 * freed under the kernel, but nothing pending is started. NULL is a no-op.
 */
ZO_API void zo_swap_destroy(zo_swap_t *sw);

/*
 * zo_swap_alignment() - alignment in bytes that buffers, file offsets and
 * lengths passed to the read/write calls must have: the O_DIRECT alignment of
 * the file system under nvme_path (statx STATX_DIOALIGN: the larger of the
 * memory and offset alignments; else the logical block size of the backing
 * block device; else 4096), never less than 512, a power of two. It does not
 * change after a fallback to buffered I/O, so callers lay data out the same
 * way either way. Thread-safe (read only).
 */
ZO_API size_t zo_swap_alignment(const zo_swap_t *sw);

/* zo_swap_block_size() - piece size in bytes actually used (after defaults and rounding). */
ZO_API size_t zo_swap_block_size(const zo_swap_t *sw);

/* zo_swap_queue_depth() - max pieces in flight actually used (after defaults). */
ZO_API unsigned zo_swap_queue_depth(const zo_swap_t *sw);

/*
 * zo_swap_is_direct() - 1 if swap files are opened with O_DIRECT, 0 once a
 * file system refused O_DIRECT and files are buffered (warned once).
 */
ZO_API int zo_swap_is_direct(const zo_swap_t *sw);

/* zo_swap_uses_io_uring() - 1 if I/O goes through io_uring, 0 on the pread/pwrite fallback. */
ZO_API int zo_swap_uses_io_uring(const zo_swap_t *sw);

/* zo_swap_dir() - the private directory path; valid until zo_swap_destroy(). */
ZO_API const char *zo_swap_dir(const zo_swap_t *sw);

/*
 * zo_swap_file_create() - create swap file @name in the private directory.
 * @name:   a plain file name: not empty, no '/', not "." or "..", < 200 bytes.
 * @nbytes: size in bytes, preallocated with fallocate (ftruncate when the file
 *          system says EOPNOTSUPP: then blocks are allocated on first write).
 *          Usually a multiple of zo_swap_alignment(), since every transfer is.
 * Opened O_CREAT|O_EXCL|O_NOFOLLOW|O_RDWR|O_DIRECT|O_CLOEXEC, mode 0600. If
 * the file system refuses O_DIRECT (EINVAL), the file is reopened buffered and
 * "O_DIRECT refused on <dir>, using buffered I/O" is warned once.
 * Synchronous. Returns ZO_OK; ZO_ERR_INVALID_ARG for a NULL argument, a bad
 * name or a name that already exists; ZO_ERR_IO when the disk has no room
 * (ENOSPC, EDQUOT, EFBIG), naming the file and size; ZO_ERR_SYSTEM for other
 * open/fallocate failures; ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_swap_file_create(zo_swap_t *sw, const char *name, uint64_t nbytes,
                                     zo_swap_file_t **out);

/*
 * zo_swap_file_remove() - close and unlink one swap file before destroy.
 * Returns ZO_OK (also for f == NULL); ZO_ERR_INVALID_USAGE, leaving the file
 * alone, while a request on it has not been waited for; ZO_ERR_INVALID_ARG
 * when f belongs to another zo_swap_t.
 */
ZO_API zo_status zo_swap_file_remove(zo_swap_t *sw, zo_swap_file_t *f);

/* zo_swap_file_size() - size in bytes given at creation. */
ZO_API uint64_t zo_swap_file_size(const zo_swap_file_t *f);

/* zo_swap_file_path() - full path of the file; valid until it is removed. */
ZO_API const char *zo_swap_file_path(const zo_swap_file_t *f);

/*
 * zo_swap_submit_read() / zo_swap_submit_write() - queue a transfer of
 * @nbytes bytes between @buf and file @f at byte @offset.
 * @buf, @offset, @nbytes: multiples of zo_swap_alignment() (else
 *          ZO_ERR_INVALID_ARG naming which one); nbytes > 0;
 *          offset + nbytes <= zo_swap_file_size(f).
 * The transfer is cut into block_size pieces; at most queue_depth pieces are
 * in flight across all outstanding requests. Requests beyond that wait their
 * turn inside the library (FIFO): submission never fails because the ring is
 * full. Returns when queued (some pieces may already be submitted to the
 * kernel; on the pread/pwrite fallback the transfer is already done). *req is
 * completed, and freed, only by zo_swap_wait(); zo_swap_poll() tells whether
 * it is done. The caller must not touch @buf until zo_swap_wait() returns.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL, misaligned, zero length, out of
 * range, file of another handle); ZO_ERR_OUT_OF_MEMORY. Errors of the
 * transfer, and of io_uring_submit itself, are reported by zo_swap_wait()
 * and zo_swap_poll().
 */
ZO_API zo_status zo_swap_submit_read(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf,
                                     size_t nbytes, zo_swap_req_t **req);
ZO_API zo_status zo_swap_submit_write(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset,
                                      const void *buf, size_t nbytes, zo_swap_req_t **req);

/*
 * zo_swap_wait() - block until @req is complete, free it, return its status.
 * Every completion's result is checked: a short transfer (0 < res < piece
 * length) is resubmitted for the remaining bytes until done (under O_DIRECT
 * from the last aligned byte); -EAGAIN/-EINTR are retried a few times.
 * Returns ZO_OK; ZO_ERR_IO with a message naming the file path, the byte
 * offset and length of the first failing piece and strerror(-res) (e.g. EIO,
 * ENOSPC), or "unexpected end of file" for a read returning 0; later pieces
 * of a failed request are not started. ZO_ERR_INVALID_ARG when req is NULL or
 * belongs to another handle (req is then not freed); ZO_ERR_SYSTEM when
 * waiting on the ring fails (req is then not freed; wait again or destroy).
 */
ZO_API zo_status zo_swap_wait(zo_swap_t *sw, zo_swap_req_t *req);

/*
 * zo_swap_poll() - nonblocking progress: submit what fits, reap completions,
 * set *done = 1 when @req is complete (then call zo_swap_wait() to collect its
 * status and free it), else 0. Returns ZO_OK, ZO_ERR_INVALID_ARG (NULL, or
 * req of another handle) or ZO_ERR_SYSTEM (ring failure).
 */
ZO_API zo_status zo_swap_poll(zo_swap_t *sw, zo_swap_req_t *req, int *done);

/* zo_swap_read() / zo_swap_write() - synchronous: submit + wait; same rules and errors. */
ZO_API zo_status zo_swap_read(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf,
                              size_t nbytes);
ZO_API zo_status zo_swap_write(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, const void *buf,
                               size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_SWAP_H */
