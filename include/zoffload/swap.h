/*
 * zoffload/swap.h - the NVMe tier: preallocated swap files (one per rank and
 * kind of state) in a private directory on a fast disk, extents allocated
 * inside them, read and written with io_uring and O_DIRECT in block_size
 * pieces, with optional CRC32C per chunk. It stores bytes at offsets; which
 * tensor lives in which extent is decided above it.
 * Model: DeepSpeed's aio handle (block_size pieces, queue_depth in flight)
 * done on liburing (read/write, read_fixed/write_fixed, fixed files, SQPOLL).
 */
#ifndef ZOFFLOAD_SWAP_H
#define ZOFFLOAD_SWAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

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
  size_t block_size;    /* bytes per io_uring request piece; 0: 1 MiB. Rounded up to a
                            multiple of zo_swap_alignment(); at most 1 GiB. DeepSpeed aio.block_size. */
  unsigned queue_depth; /* max pieces in flight across all requests; 0: 32; at most 32768.
                            DeepSpeed aio.queue_depth. */
  /* Fields below were added later; zero keeps the defaults described. */
  int rank;           /* names the private directory nvme_path/zoffload-rank<rank>; 0..99999999.
                            Ranks sharing one nvme_path must pass distinct values. */
  int register_files; /* 1: register every swap file with the ring (io_uring_register_files,
                            IOSQE_FIXED_FILE); if the kernel refuses, warn once and go on without. */
  int sqpoll;         /* 1: IORING_SETUP_SQPOLL (a kernel thread polls the submission queue);
                            if refused (EPERM, EINVAL), warn once and go on without. */
  unsigned sqpoll_idle_ms; /* SQPOLL thread idle time before it sleeps; 0: 1000 ms. */
  int checksum;            /* 1: every file created gets CRC32C per chunk, as if created with
                            zo_swap_file_opts.checksum = 1 (zoffload config "swap_checksum"). */
  unsigned pool_threads;   /* threads of the pread/pwrite fallback; 0: min(4, queue_depth). */
  int single_issuer;       /* 1: IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN (Linux 6.1+; ignored with
                            sqpoll): completions run only inside our own io_uring_enter. Then only
                            the thread that created the handle may submit, wait or poll (others get
                            ZO_ERR_SYSTEM "File exists"). If refused, warn once and go on without. */
  int progress_thread; /* 1: a library thread owns the ring and keeps queue_depth pieces in flight
                            while the caller computes, so a request larger than queue_depth x
                            block_size proceeds at disk speed without zo_swap_poll() calls. The
                            caller's functions then only queue requests and wait for the thread
                            (single_issuer is ignored). Completions post to that thread, never
                            interrupt the caller. A queued request starts at the thread's next
                            completion at the latest (one piece's time). 0: the ring moves only
                            inside the caller's submit, poll and wait. */
  size_t stripe_size;  /* zo_swap_create_striped() over several directories: bytes per stripe,
                            a multiple of zo_swap_alignment(); 0: 1 MiB. Ignored with one. */
  int latency_stats;   /* 1: time every piece from its issue to its completion, per direction,
                            for zo_swap_latency() (two clock reads a piece); 0: not kept. */
} zo_swap_opts;

/* Most directories one handle stripes its files across (zo_swap_create_striped). */
#define ZO_SWAP_MAX_PATHS 16

/*
 * zo_swap_create() - open the NVMe tier under @nvme_path.
 * @nvme_path: an existing, writable directory (ideally on an NVMe drive).
 *             The private directory nvme_path/zoffload-rank<R> (R = opts->rank)
 *             is made with mode 0700, holds every swap file and an owner
 *             marker ".zoffload-owner" (the owner's pid and the names of its
 *             swap files), and is locked with flock(LOCK_EX) on the directory
 *             itself for the life of the handle. It is made under a temporary
 *             name and moved into place with renameat2(RENAME_NOREPLACE), so
 *             other processes never see it unlocked or unmarked.
 * @opts:      see zo_swap_opts; NULL means all defaults.
 * @out:       receives the handle; set to NULL on failure.
 * If the private directory already exists: when its lock is held (a live run,
 * in this or another process) creation fails with ZO_ERR_INVALID_USAGE "swap
 * directory X is in use by a live process (pid N); use another nvme_path or
 * rank" (any number of processes may race to create and destroy it: one owns
 * it, the others get this refusal). When its lock is free (a dead run left
 * it), its swap files are removed and "removed stale swap directory X left by
 * pid N (K files)" is warned, but only when it carries a whole zoffload owner
 * marker and holds nothing but regular files that marker names; anything else
 * (no marker, another program's, an extra file or subdirectory) fails with
 * ZO_ERR_INVALID_ARG naming the directory and the first foreign entry, and
 * nothing in it is removed. A private directory that is a symbolic link, not
 * a directory, or owned by another user is refused (ZO_ERR_INVALID_ARG),
 * never followed.
 * Creates an io_uring of queue_depth entries (with SQPOLL and a sparse
 * fixed-file table when asked). If io_uring_queue_init fails (-ENOSYS on old
 * kernels, -EPERM in sandboxes that forbid it) the handle falls back to a
 * pool of pread/pwrite threads and warns once. The environment variable
 * ZO_SWAP_FORCE_PREAD=1 forces that fallback (for tests).
 * Ring setup flags, first one the kernel takes: with opts.sqpoll,
 * SQPOLL (the kernel takes no task-run flag with it); with opts.single_issuer,
 * SINGLE_ISSUER|DEFER_TASKRUN; then COOP_TASKRUN|TASKRUN_FLAG (Linux 5.19+:
 * completions are posted when this handle next enters the kernel, never by
 * interrupting the calling thread while it computes); then none.
 * ZO_SWAP_RING_FLAGS=none|coop|defer overrides that choice (for measurements;
 * unset or empty: the choice above): none, no task-run flag (SQPOLL still
 * with opts.sqpoll); coop, COOP_TASKRUN|TASKRUN_FLAG (Linux 5.19+); defer,
 * SINGLE_ISSUER|DEFER_TASKRUN (Linux 6.1+, liburing 2.3+), whatever
 * opts.single_issuer says, and with its rule: only the creating thread may
 * submit, wait or poll. Any other value, defer with opts.progress_thread (the
 * thread, not the creator, would submit: the kernel answers EEXIST), and coop
 * or defer with opts.sqpoll fail with ZO_ERR_INVALID_ARG naming the variable;
 * a named mode the kernel refuses fails with ZO_ERR_UNSUPPORTED naming what it
 * needs and the kernel release, never falling back to another mode or the pool.
 * Pieces are prepared as slots free up and handed to the kernel in one
 * io_uring_submit (or with the wait, io_uring_submit_and_wait) per batch.
 * SQPOLL note: the kernel poller spins on a CPU for sqpoll_idle_ms after the
 * last submission; on a machine with few cores keep that short.
 * The O_DIRECT alignment is measured here (see zo_swap_alignment()).
 * Synchronous. Returns ZO_OK; ZO_ERR_INVALID_ARG when an argument is NULL,
 * nvme_path is empty, too long, does not exist or is not a directory, opts is
 * out of range, or the private directory is a symlink, another user's, or
 * holds what zoffload did not make;
 * ZO_ERR_INVALID_USAGE when a live process holds the private directory;
 * ZO_ERR_UNSUPPORTED when the file system has no renameat2(RENAME_NOREPLACE)
 * or the kernel refuses the ring ZO_SWAP_RING_FLAGS names;
 * ZO_ERR_SYSTEM when the private directory cannot be made (not writable,
 * read-only file system, no space), a stale one cannot be emptied, or another
 * system call fails (threads, ring); ZO_ERR_OUT_OF_MEMORY. Messages name the
 * path and the errno text, e.g. "swap: nvme_path '/nope': No such file or
 * directory".
 */
ZO_API zo_status zo_swap_create(const char *nvme_path, const zo_swap_opts *opts, zo_swap_t **out);

/*
 * zo_swap_create_striped() - zo_swap_create() over @n_paths directories
 * (1..ZO_SWAP_MAX_PATHS; one is exactly zo_swap_create(nvme_paths[0])), for
 * several drives: each directory gets its own private directory (same rules,
 * locks and stale-run clean-up as above), and every swap file of the handle is
 * one file of its name in each, the logical file cut in opts.stripe_size
 * stripes dealt round-robin: stripe s lives in directory s % n_paths at offset
 * (s / n_paths) * stripe_size. Pieces never cross a stripe, so each stays one
 * O_DIRECT request on one drive. queue_depth counts per directory: the ring
 * has queue_depth x n_paths entries and up to that many pieces are in flight
 * (queue_depth x n_paths must stay <= 32768). The alignment is the largest of
 * the directories'. Extents, checksums and offsets are the logical file's;
 * the I/O error messages name the part's path and offset in it.
 * Returns as zo_swap_create(), plus ZO_ERR_INVALID_ARG when n_paths is 0 or
 * too many, an entry is NULL, a directory is given twice (the message names
 * both indices), or stripe_size is not a multiple of the alignment; a failing
 * directory's message starts "nvme_path[i]: " with its index.
 */
ZO_API zo_status zo_swap_create_striped(const char *const *nvme_paths, unsigned n_paths,
                                        const zo_swap_opts *opts, zo_swap_t **out);

/* zo_swap_n_dirs() - directories the handle stripes across (1 unless zo_swap_create_striped). */
ZO_API unsigned zo_swap_n_dirs(const zo_swap_t *sw);

/* zo_swap_stripe_size() - bytes per stripe (0 on a handle with one directory). */
ZO_API size_t zo_swap_stripe_size(const zo_swap_t *sw);

/* Piece latencies of one direction since create or zo_swap_latency_reset(), in microseconds. */
typedef struct zo_swap_latency {
  uint64_t n;                     /* pieces completed */
  double mean_us, max_us;         /* exact */
  double p50_us, p99_us, p999_us; /* from a log-linear histogram: within 6% */
} zo_swap_latency_t;

/*
 * zo_swap_latency() - completion latency of the pieces (the block_size I/O
 * requests handed to the kernel or the pread/pwrite pool) of reads
 * (@is_write 0) or writes (1): from the piece's first issue to the completion
 * the handle reaps (resubmissions of a short transfer included), as fio's
 * clat. Needs opts.latency_stats (else n is 0). Thread-safe (the handle's
 * lock). Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL).
 */
ZO_API zo_status zo_swap_latency(zo_swap_t *sw, int is_write, zo_swap_latency_t *out);

/* zo_swap_latency_reset() - forget the latencies recorded so far (no request may be outstanding). */
ZO_API void zo_swap_latency_reset(zo_swap_t *sw);

/*
 * zo_swap_destroy() - close and unlink every swap file and the owner marker,
 * remove the private directory, then release its lock, stop the fallback threads,
 * free the ring and every request not yet waited for.
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

/* zo_swap_block_size() - piece size in bytes actually used (after defaults, rounding and zo_swap_set_queue()). */
ZO_API size_t zo_swap_block_size(const zo_swap_t *sw);

/* zo_swap_queue_depth() - max pieces in flight actually used (after defaults and zo_swap_set_queue()). */
ZO_API unsigned zo_swap_queue_depth(const zo_swap_t *sw);

/*
 * zo_swap_set_queue() - change the piece size and the pieces in flight of an
 * idle handle, keeping its ring, files (and their data), registered files and
 * buffers: how zo-swapbench sweeps block sizes and queue depths on one file.
 * @block_size: bytes per piece, rounded up to zo_swap_alignment(), at most
 *              1 GiB; 0 keeps the current one.
 * @queue_depth: pieces in flight at most, 1..the queue_depth given at create
 *              (the ring's size); 0 keeps the current one.
 * Synchronous. Returns ZO_OK; ZO_ERR_INVALID_ARG (sw NULL, block_size over
 * 1 GiB, queue_depth over the create-time one); ZO_ERR_INVALID_USAGE while a
 * request has not been waited for. On error nothing changes.
 */
ZO_API zo_status zo_swap_set_queue(zo_swap_t *sw, size_t block_size, unsigned queue_depth);

/*
 * zo_swap_is_direct() - 1 if swap files are opened with O_DIRECT, 0 once a
 * file system refused O_DIRECT and files are buffered (warned once).
 */
ZO_API int zo_swap_is_direct(const zo_swap_t *sw);

/* zo_swap_uses_io_uring() - 1 if I/O goes through io_uring, 0 on the pread/pwrite fallback. */
ZO_API int zo_swap_uses_io_uring(const zo_swap_t *sw);

/* zo_swap_uses_sqpoll() - 1 if the ring was set up with IORING_SETUP_SQPOLL, else 0. */
ZO_API int zo_swap_uses_sqpoll(const zo_swap_t *sw);

/* zo_swap_uses_fixed_files() - 1 if swap files are registered with the ring (IOSQE_FIXED_FILE), else 0. */
ZO_API int zo_swap_uses_fixed_files(const zo_swap_t *sw);

/* zo_swap_n_registered_buffers() - buffers registered by zo_swap_register_buffers() (0 on the fallback). */
ZO_API unsigned zo_swap_n_registered_buffers(const zo_swap_t *sw);

/*
 * zo_swap_describe() - one line saying what is active, e.g.
 * "io_uring qd 32, block 1048576 B, O_DIRECT align 4096 B, fixed files, 2 fixed
 * buffers, no sqpoll, rank 0, dir /nvme/zoffload-rank0" or
 * "pread/pwrite pool (4 threads), ...". Valid until the next call on @sw.
 */
ZO_API const char *zo_swap_describe(zo_swap_t *sw);

/*
 * zo_swap_register_buffers() - register @n host buffers with the ring
 * (io_uring_register_buffers), replacing any registered before. Afterwards a
 * read or write whose buffer range lies inside one registered buffer is issued
 * with io_uring_prep_read_fixed/write_fixed (no per-I/O page pinning); others
 * go as before. @iov: n entries {base, len}; n == 0 (or iov NULL) unregisters.
 * Buffers must stay mapped until unregistered or destroy. The kernel pins the
 * pages and charges them to RLIMIT_MEMLOCK (unless CAP_IPC_LOCK).
 * Synchronous; no request may be outstanding. On the pread/pwrite fallback
 * it records nothing and returns ZO_OK. Returns ZO_OK; ZO_ERR_INVALID_ARG
 * (iov NULL with n > 0, an empty or NULL entry, n > 16384);
 * ZO_ERR_INVALID_USAGE when requests are outstanding; ZO_ERR_OUT_OF_MEMORY
 * when the kernel cannot pin them (ENOMEM: the message names RLIMIT_MEMLOCK);
 * ZO_ERR_SYSTEM for other io_uring_register_buffers failures. On failure no
 * buffers are registered; I/O still works, unregistered.
 */
ZO_API zo_status zo_swap_register_buffers(zo_swap_t *sw, const struct iovec *iov, unsigned n);

/* zo_swap_dir() - the private directory path; valid until zo_swap_destroy(). */
ZO_API const char *zo_swap_dir(const zo_swap_t *sw);

/*
 * zo_swap_file_create() - create swap file @name in the private directory
 * (zo_swap_file_create_ex() with no options).
 * @name:   a plain file name: not empty, no '/' and no control characters,
 *          not ".", "..", ".zoffload-owner" or ".align-probe", < 200 bytes.
 *          It is recorded in the owner marker before the file is made (see
 *          zo_swap_create()).
 * @nbytes: size in bytes, preallocated with fallocate (ftruncate when the file
 *          system says EOPNOTSUPP: then blocks are allocated on first write).
 *          Usually a multiple of zo_swap_alignment(), since every transfer is.
 * Opened O_CREAT|O_EXCL|O_NOFOLLOW|O_RDWR|O_DIRECT|O_CLOEXEC, mode 0600. If
 * the file system refuses O_DIRECT (EINVAL), the file is reopened buffered and
 * "O_DIRECT refused on <dir>, using buffered I/O" is warned once.
 * With opts.register_files the file takes a slot in the ring's file table.
 * Synchronous. Returns ZO_OK; ZO_ERR_INVALID_ARG for a NULL argument, a bad
 * name or a name that already exists; ZO_ERR_IO when the disk has no room
 * (ENOSPC, EDQUOT) or the size passes RLIMIT_FSIZE (EFBIG), naming the file,
 * offset 0 and length; ZO_ERR_SYSTEM for other
 * open/fallocate failures; ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_swap_file_create(zo_swap_t *sw, const char *name, uint64_t nbytes,
                                     zo_swap_file_t **out);

/* Options of one swap file; zero-initialised means no checksums. */
typedef struct zo_swap_file_opts {
  int checksum;          /* 1: keep a CRC32C (Castagnoli) of every chunk written, verify on read */
  size_t checksum_chunk; /* bytes per CRC; 0: zo_swap_alignment(). A multiple of the alignment.
                            Host memory: 4 bytes + 1 bit per chunk (0.1% of the file at 4 KiB). */
} zo_swap_file_opts;

/*
 * zo_swap_file_create_ex() - zo_swap_file_create() with options @fo (NULL:
 * none; the handle's opts.checksum also turns checksums on).
 * Checksums: a write records the CRC32C of every chunk it covers whole, and
 * forgets those of chunks it covers in part; when a read completes, every
 * chunk it covers whole that has a recorded CRC is verified. A mismatch makes
 * zo_swap_wait() return ZO_ERR_CORRUPT naming the file, the chunk's offset and
 * length, and the expected and computed CRC: a flipped bit on disk is an
 * error, never silently wrong data. A failed write forgets the CRCs of its
 * range. With the default chunk (the alignment) every transfer is verified.
 * Same returns as zo_swap_file_create(), plus ZO_ERR_INVALID_ARG when
 * checksum_chunk is not a multiple of zo_swap_alignment().
 * Source: CRC32C, Castagnoli et al. (1993), iSCSI RFC 3720; computed by
 * Intel ISA-L crc32_iscsi().
 */
ZO_API zo_status zo_swap_file_create_ex(zo_swap_t *sw, const char *name, uint64_t nbytes,
                                        const zo_swap_file_opts *fo, zo_swap_file_t **out);

/* zo_swap_file_checksummed() - 1 if @f keeps CRC32Cs, else 0. */
ZO_API int zo_swap_file_checksummed(const zo_swap_file_t *f);

/*
 * zo_swap_extent_alloc() - reserve @nbytes bytes (rounded up to
 * zo_swap_alignment()) inside @f, first fit over a free list sorted by
 * offset; *offset receives the start (a multiple of the alignment). A new
 * file is one free extent of its whole size (rounded down to the alignment).
 * Synchronous; the same thread rules as the file. Returns ZO_OK;
 * ZO_ERR_INVALID_ARG (NULL, nbytes 0); ZO_ERR_OUT_OF_MEMORY when no free
 * extent is large enough, naming the file, the requested size, the free bytes
 * and the largest free extent (or host memory ran out).
 */
ZO_API zo_status zo_swap_extent_alloc(zo_swap_file_t *f, uint64_t nbytes, uint64_t *offset);

/*
 * zo_swap_extent_free() - return an extent from zo_swap_extent_alloc(): the
 * same offset and nbytes (rounded up the same way). Neighbouring free extents
 * are coalesced. Checksums recorded for the range are forgotten.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL, misaligned, out of the file, or
 * overlapping free space: a double free), naming file, offset and length.
 */
ZO_API zo_status zo_swap_extent_free(zo_swap_file_t *f, uint64_t offset, uint64_t nbytes);

/* zo_swap_file_free_bytes() - bytes not allocated by zo_swap_extent_alloc(). */
ZO_API uint64_t zo_swap_file_free_bytes(const zo_swap_file_t *f);

/* zo_swap_file_largest_free() - bytes of the largest free extent. */
ZO_API uint64_t zo_swap_file_largest_free(const zo_swap_file_t *f);

/*
 * zo_swap_crc32c() - CRC32C (Castagnoli, reflected, init and final xor
 * 0xFFFFFFFF) of @nbytes bytes, continuing from @crc: pass 0 to start, and the
 * previous result to extend (crc32c("123456789") == 0xE3069283).
 * Thread-safe. Computed by ISA-L crc32_iscsi() (SSE4.2/PCLMUL/AVX-512).
 */
ZO_API uint32_t zo_swap_crc32c(uint32_t crc, const void *buf, size_t nbytes);

/*
 * zo_swap_file_remove() - close and unlink one swap file before destroy.
 * Returns ZO_OK (also for f == NULL); ZO_ERR_INVALID_USAGE, leaving the file
 * alone, while a request on it has not been waited for; ZO_ERR_INVALID_ARG
 * when f belongs to another zo_swap_t.
 */
ZO_API zo_status zo_swap_file_remove(zo_swap_t *sw, zo_swap_file_t *f);

/* zo_swap_file_size() - size in bytes given at creation. */
ZO_API uint64_t zo_swap_file_size(const zo_swap_file_t *f);

/* zo_swap_file_path() - full path of the file (its first part when striped); valid until it is removed. */
ZO_API const char *zo_swap_file_path(const zo_swap_file_t *f);

/* zo_swap_file_n_parts() - files on disk that make up @f: zo_swap_n_dirs() of its handle. */
ZO_API unsigned zo_swap_file_n_parts(const zo_swap_file_t *f);

/* zo_swap_file_part_path() - full path of part @part (0..n_parts-1); "" when out of range. */
ZO_API const char *zo_swap_file_part_path(const zo_swap_file_t *f, unsigned part);

/*
 * zo_swap_file_locate() - where byte @offset of @f is on disk, for callers
 * that read the files directly (a checkpoint copying them): *part (index for
 * zo_swap_file_part_path), *part_offset in that file, and *contig_bytes, how
 * many bytes from there on are contiguous in it (to the end of the stripe, or
 * of the file when not striped). Returns ZO_OK, or ZO_ERR_INVALID_ARG for a
 * NULL argument or an offset at or past the file size.
 */
ZO_API zo_status zo_swap_file_locate(const zo_swap_file_t *f, uint64_t offset, unsigned *part,
                                     uint64_t *part_offset, uint64_t *contig_bytes);

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
 * kernel, or handed to the pread/pwrite threads on the fallback). *req is
 * completed, and freed, only by zo_swap_wait(); zo_swap_poll() tells whether
 * it is done. Many requests, on any files, may be outstanding at once.
 * A write to a checksummed file computes the CRC32Cs here, on the caller's
 * thread, before returning. The caller must not touch @buf until
 * zo_swap_wait() returns.
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
 * zo_swap_submit_read_urgent() - zo_swap_submit_read(), but queued ahead of
 * every request that is not urgent and has bytes not yet started (behind
 * earlier urgent ones): pieces already in flight finish first, so the read
 * starts within queue_depth piece completions however much is queued. For
 * reads something waits on now (a parameter fetch) while bulk transfers
 * (optimizer state) stream. Same arguments, rules and errors.
 */
ZO_API zo_status zo_swap_submit_read_urgent(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset,
                                            void *buf, size_t nbytes, zo_swap_req_t **req);

/*
 * zo_swap_submit_write_urgent() - zo_swap_submit_write(), queued as
 * zo_swap_submit_read_urgent() queues a read: ahead of every request that is
 * not urgent and has bytes not yet started, behind earlier urgent ones. For
 * small writes the caller's buffer must come back from soon (the gradient
 * hand-over's buffers) while bulk transfers stream. Urgent requests keep their
 * order among themselves; a read of a range must still wait for the write of
 * it. Same arguments, rules and errors as zo_swap_submit_write().
 */
ZO_API zo_status zo_swap_submit_write_urgent(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset,
                                             const void *buf, size_t nbytes, zo_swap_req_t **req);

/*
 * zo_swap_wait() - block until @req is complete, free it, return its status.
 * Every completion's result is checked: a short transfer (0 < res < piece
 * length) is resubmitted for the remaining bytes until done (under O_DIRECT
 * from the last aligned byte); -EAGAIN/-EINTR are retried a few times.
 * Returns ZO_OK; ZO_ERR_IO with a message naming the file path, the byte
 * offset and length of the first failing piece and strerror(-res) (e.g. EIO,
 * ENOSPC), or "unexpected end of file" for a read returning 0; later pieces
 * of a failed request are not started. ZO_ERR_CORRUPT when a read of a
 * checksummed file fails verification (file, offset, length, expected and
 * got CRC in the message; the buffer holds what was read). ZO_ERR_INVALID_ARG when req is NULL or
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

/*
 * zo_swap_busy() - for each direction ([0] reads, [1] writes) since
 * zo_swap_create(): the seconds during which at least one request of that
 * direction was submitted and not yet complete (@busy_s; a request in
 * flight now counts up to now), and the bytes of the requests that have
 * completed (@bytes). Bytes over busy time is the throughput the disk gave
 * this handle's own I/O, reads and writes in flight together as they were
 * (zoffload/placement.h's step-time model takes it from the last step).
 * Thread-safe (the handle's lock). Returns ZO_OK or ZO_ERR_INVALID_ARG.
 */
ZO_API zo_status zo_swap_busy(zo_swap_t *sw, double busy_s[2], uint64_t bytes[2]);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_SWAP_H */
