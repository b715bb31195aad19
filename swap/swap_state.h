/*
 * swap_state.h - the swap handle's private state, shared by the two halves of
 * the swap module: swap.c (the ring, the pread/pwrite pool, the progress
 * thread, requests) and swap_file.c (the swap files, their extents and CRC32C
 * records). Not installed and not for tests (their hooks are swap_internal.h).
 */
#ifndef ZO_SWAP_STATE_H
#define ZO_SWAP_STATE_H

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include <liburing.h>

#include "swap_dir.h"
#include "zoffload/swap.h"

#define SWAP_FILE_SLOTS 256u /* fixed-file table size with opts.register_files */
/* Piece latency histogram (opts.latency_stats): log-linear buckets of nanoseconds, 16 per power of
 * two (a bucket is at most 1/16 = 6% wide) from 32 ns to 2^40 ns; below 32 ns one bucket per ns. */
#define SWAP_LAT_SUB 16u
#define SWAP_LAT_BUCKETS (32u + 36u * SWAP_LAT_SUB)


typedef struct zo_swap_piece zo_swap_piece_t;
typedef struct zo_swap_ext zo_swap_ext_t;

/* One part of a striped swap file: the file of that name in one of the handle's other directories. */
typedef struct zo_swap_part {
  int fd;
  int slot;   /* index in the ring's fixed-file table, or -1 */
  char *path; /* full path (malloc'd) */
} zo_swap_part_t;

struct zo_swap_piece {
  zo_swap_req_t *req;
  uint64_t off; /* file byte offset of the piece */
  char *buf;    /* user buffer at that offset */
  size_t len;   /* piece length, bytes */
  size_t done;  /* bytes confirmed so far (aligned down under O_DIRECT) */
  unsigned retries;
  unsigned part;              /* which part of the file (0 on an unstriped handle) */
  uint64_t poff;              /* offset of the piece's first byte in that part */
  double t_issue;             /* zo_clock_s() when first issued (opts.latency_stats) */
  int res;                    /* pool path: result of the last pread/pwrite (bytes or -errno) */
  zo_swap_piece_t *next_free; /* free list, or the pool's work/done queues */
};

/* A free extent of a swap file; the list is sorted by offset and never has two touching. */
struct zo_swap_ext {
  uint64_t off, len; /* bytes */
  zo_swap_ext_t *next;
};

struct zo_swap_file {
  zo_swap_t *sw;
  zo_swap_file_t *prev, *next; /* sw->files */
  int fd;
  int slot;                /* index in the ring's fixed-file table, or -1 */
  int direct;              /* opened with O_DIRECT */
  unsigned n_reqs;         /* requests not yet waited */
  uint64_t size;           /* bytes */
  zo_swap_ext_t *free_ext; /* free extents, sorted by offset */
  uint64_t free_bytes;
  size_t csum_chunk; /* bytes per CRC; 0: no checksums */
  uint64_t n_chunks;
  uint32_t *crc;             /* [n_chunks] CRC32C of each chunk as last written whole */
  uint64_t *crc_valid;       /* [(n_chunks + 63) / 64] bit set: crc[c] is known */
  char path[PATH_MAX + 256]; /* full path: dir + "/" + name */
  const char *name;          /* points into path */
  /* Striped handle (n_dirs > 1): the file is cut in sw->stripe-byte stripes, stripe s in part
   * s % n_dirs at offset (s / n_dirs) * stripe. Part 0 is fd/slot/path above (each part's size is zo_swap_stripe_part_size()),
   * parts 1.. are xparts[0..n_dirs-2]. */
  zo_swap_part_t *xparts;
};

struct zo_swap_req {
  zo_swap_t *sw;
  zo_swap_file_t *f;
  int is_write;
  char *buf;
  uint64_t off;
  size_t nbytes;
  size_t carved;       /* bytes already handed to pieces */
  unsigned n_inflight; /* pieces issued and not completed */
  int queued;          /* on sw's pending list */
  int err;             /* first failure: -errno, or 1 for unexpected EOF; 0 none */
  int urgent;          /* queued ahead of requests that are not urgent */
  int busy_counted;    /* its completion was counted in the busy time (zo_swap_busy) */
  uint64_t err_off;
  size_t err_len;
  zo_swap_req_t *pend_prev, *pend_next; /* FIFO of requests with bytes not yet carved */
  zo_swap_req_t *live_prev, *live_next; /* every request not yet waited */
};

/* The pread/pwrite fallback: workers take pieces from work, run one call, put them on done. */
typedef struct zo_swap_pool {
  pthread_t *threads;
  unsigned n_threads;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  zo_swap_piece_t *work_head, *work_tail, *done_head, *done_tail;
  int stop;
} zo_swap_pool_t;

struct zo_swap {
  zo_swap_dir_t pdir;   /* the private directory, owned (swap_dir.c); the first of n_dirs */
  unsigned n_dirs;      /* directories the files are striped across (1: not striped) */
  zo_swap_dir_t *xdirs; /* [n_dirs - 1] the others, in the order given */
  uint64_t stripe;      /* bytes per stripe when n_dirs > 1 (a multiple of align) */
  int rank;
  size_t align;
  size_t block_size;
  unsigned qd;     /* pieces in flight at most now per directory (zo_swap_set_queue) */
  unsigned qd_max; /* queue_depth at create; the ring has qd_max * n_dirs entries and pieces */
  int use_uring;
  int sqpoll;          /* ring set up with IORING_SETUP_SQPOLL */
  unsigned ring_flags; /* IORING_SETUP_* the ring was created with */
  int fixed_files;     /* sparse fixed-file table registered */
  unsigned char slot_used[SWAP_FILE_SLOTS];
  struct iovec *bufs; /* [n_bufs] registered buffers */
  unsigned n_bufs;
  int checksum_default; /* opts.checksum */
  struct io_uring ring;
  zo_swap_pool_t pool;
  int pool_started;
  int direct; /* 0 once some file fell back to buffered I/O */
  zo_swap_file_t *files;
  zo_swap_piece_t *pieces; /* [qd] */
  zo_swap_piece_t *free_pieces;
  unsigned n_inflight;    /* pieces issued (ring or pool) and not reaped */
  unsigned n_unsubmitted; /* SQEs prepared but not yet accepted by io_uring_submit */
  unsigned n_live;        /* requests not yet waited */
  /* zo_swap_busy(): per direction ([0] reads, [1] writes), the requests submitted and not yet complete, since
   * when some have been, the seconds with at least one in flight and the bytes of those completed */
  unsigned busy_n[2];
  double busy_t0[2], busy_s[2];
  uint64_t busy_bytes[2];
  zo_swap_req_t *pend_head, *pend_tail;
  zo_swap_req_t *live;
  int inject_k; /* fault injection: completions left until it fires; 0 off */
  int inject_res;
  unsigned long n_completions;            /* every piece completion, for tests */
  int refuse_direct;                      /* test hook: pretend O_DIRECT opens fail with EINVAL */
  int lat_on;                             /* opts.latency_stats */
  uint64_t lat_hist[2][SWAP_LAT_BUCKETS]; /* [read, write] piece latencies (issue to completion) */
  double lat_max[2];                      /* seconds */
  char desc[PATH_MAX + 256];              /* zo_swap_describe() */

  /* opts.progress_thread: a library thread owns the ring (or the pool's
   * completion queue) and keeps queue_depth pieces in flight whether or not
   * the caller calls in. Callers then only queue requests and wait on done_cv;
   * mu guards the request lists, the pieces and the counters both touch. */
  int bg;
  pthread_t bg_thread;
  pthread_mutex_t mu;
  pthread_cond_t bg_cv;   /* the thread: a request was queued, or stop */
  pthread_cond_t done_cv; /* callers: pieces completed */
  int bg_stop;
  int bg_err; /* -errno: the ring failed under the thread (sticky) */
};

/* The category of a failed system call's errno: out of memory, else system. */
static inline zo_status sys_status(int err) {
  return err == ENOMEM ? ZO_ERR_OUT_OF_MEMORY : ZO_ERR_SYSTEM;
}

/* ---- swap_file.c, as the transfers and the handle use it (0 / -errno never crosses) ------------ */

/* Close, unlink and free every file of @sw (destroy); an unlink that fails is a warning. */
void zo_swap_files_close_all(zo_swap_t *sw);

/* Record the CRCs of the chunks that @buf (file range [off, off+n)) covers whole; forget partial ones. */
void zo_swap_crc_record(zo_swap_file_t *f, uint64_t off, const char *buf, size_t n);

/* Verify the chunks a completed read covers whole; ZO_ERR_CORRUPT on the first mismatch. */
zo_status zo_swap_crc_verify(zo_swap_file_t *f, uint64_t off, const char *buf, size_t n);

/* Forget the CRCs of the chunks [off, off+nbytes) touches (their bytes on disk are unknown). */
void zo_swap_crc_forget(zo_swap_file_t *f, uint64_t off, uint64_t nbytes);

/* ---- swap_stripe.c: the handle's other directories and the stripe map ------------------------- */

/* Directory @i of the handle (0: pdir). */
zo_swap_dir_t *zo_swap_dir_at(zo_swap_t *sw, unsigned i);

/* Each of @paths[n] an existing directory, none given twice (another spelling included); errors
 * name the entry's index. Sets the last error. */
zo_status zo_swap_paths_check(const char *const *paths, unsigned n);

/* Open the private directories of @paths[1..n) as sw->xdirs (n_dirs = n). Sets the last error. */
zo_status zo_swap_dirs_open(zo_swap_t *sw, const char *const *paths, unsigned n, int rank);

/* Close the other directories (zo_swap_dir_close each); safe when none. */
void zo_swap_dirs_close(zo_swap_t *sw);

/* Where logical byte @off of a file lives: part *part at *poff, with *contig bytes of the stripe from
 * there on (UINT64_MAX on an unstriped handle). */
void zo_swap_stripe_map(const zo_swap_t *sw, uint64_t off, unsigned *part, uint64_t *poff,
                        uint64_t *contig);

/* Bytes of a logical file of @nbytes that part @part holds. */
uint64_t zo_swap_stripe_part_size(const zo_swap_t *sw, uint64_t nbytes, unsigned part);

/* The descriptor (or fixed slot, *fixed = 1) of part @part of @f. */
int zo_swap_part_fd(const zo_swap_file_t *f, unsigned part, int use_slot, int *fixed);

/* The path of part @part of @f. */
const char *zo_swap_part_path(const zo_swap_file_t *f, unsigned part);

/* Record one piece latency of @sec seconds (caller holds the handle's lock when bg). */
void zo_swap_lat_record(zo_swap_t *sw, int is_write, double sec);

/* Percentiles of the recorded latencies of one direction (caller holds the lock). */
zo_status zo_swap_latency_of(const zo_swap_t *sw, int is_write, zo_swap_latency_t *out);

#endif /* ZO_SWAP_STATE_H */
