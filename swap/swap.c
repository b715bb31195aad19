/*
 * swap.c - the NVMe tier's handle and transfers: requests cut into block_size
 * pieces driven by io_uring (O_DIRECT, fixed buffers and files, optional
 * SQPOLL), or by a small pool of pread/pwrite threads when the ring is refused,
 * optionally kept in flight by a progress thread. Not a cache and not a tensor
 * layout: callers choose extents. The swap files, their extents and CRC32C
 * records are swap_file.c; the private directory's ownership (lock, marker,
 * stale clean-up) is swap_dir.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base_internal.h"
#include "nvtx.h"
#include "swap_internal.h"
#include "swap_state.h"

#define SWAP_DEFAULT_BLOCK (1u << 20)
#define SWAP_DEFAULT_QD 32u
#define SWAP_MAX_BLOCK ((size_t)1 << 30)
#define SWAP_MAX_QD 32768u
#define SWAP_MAX_RETRIES 16     /* -EAGAIN/-EINTR or no-progress short transfers per piece */
#define SWAP_MAX_BUFFERS 16384u /* io_uring's limit on registered buffers */
#define SWAP_MAX_RANK 99999999

/* statx(2) with the kernel's own layout, so STATX_DIOALIGN works whatever libc headers say. */
#ifndef STATX_DIOALIGN
#define STATX_DIOALIGN 0x00002000U
#endif
#ifndef AT_STATX_SYNC_AS_STAT
#define AT_STATX_SYNC_AS_STAT 0x0000
#endif
struct zo_kstatx {
  uint32_t stx_mask, stx_blksize;
  uint64_t stx_attributes;
  uint32_t stx_nlink, stx_uid, stx_gid;
  uint16_t stx_mode, pad1;
  uint64_t stx_ino, stx_size, stx_blocks, stx_attributes_mask;
  uint64_t stx_times[8]; /* atime, btime, ctime, mtime: {s64 sec, u32 nsec, s32 pad} */
  uint32_t stx_rdev_major, stx_rdev_minor, stx_dev_major, stx_dev_minor;
  uint64_t stx_mnt_id;
  uint32_t stx_dio_mem_align, stx_dio_offset_align; /* Linux 6.1+ */
  uint64_t spare[12];
};
_Static_assert(sizeof(struct zo_kstatx) == 256, "struct statx is 256 bytes");


/* ---- small helpers ---------------------------------------------------------------------- */

static int is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* Logical block size of the block device holding @dev, or 0 when it cannot be asked. */
static size_t blockdev_logical_size(unsigned maj, unsigned min) {
  char p[64];
  snprintf(p, sizeof p, "/dev/block/%u:%u", maj, min);
  struct stat st;
  if (stat(p, &st) != 0 || !S_ISBLK(st.st_mode)) return 0;
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  int ssz = 0;
  size_t r = 0;
  if (ioctl(fd, BLKSSZGET, &ssz) == 0 && ssz > 0) r = (size_t)ssz;
  close(fd);
  return r;
}

/*
 * Measure the O_DIRECT alignment on the private directory: create a probe file
 * and ask statx for STATX_DIOALIGN (ext4/xfs/btrfs answer only for regular
 * files); fall back to the block device's logical block size, then 4096.
 */
static size_t probe_alignment(const zo_swap_dir_t *d) {
  size_t a = 0;
  unsigned maj = 0, min = 0;
  int fd = openat(d->fd, ".align-probe", O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    struct zo_kstatx stx;
    memset(&stx, 0, sizeof stx);
    if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH | AT_STATX_SYNC_AS_STAT,
                STATX_DIOALIGN | STATX_BASIC_STATS, &stx) == 0) {
      maj = stx.stx_dev_major;
      min = stx.stx_dev_minor;
      if ((stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
        a = stx.stx_dio_offset_align;
        if (stx.stx_dio_mem_align > a) a = stx.stx_dio_mem_align;
      }
    } else {
      struct stat st;
      if (fstat(fd, &st) == 0) {
        maj = major(st.st_dev);
        min = minor(st.st_dev);
      }
    }
    close(fd);
    unlinkat(d->fd, ".align-probe", 0);
  }
  if (!a && maj) a = blockdev_logical_size(maj, min);
  if (!a || !is_pow2(a)) a = 4096;
  if (a < 512) a = 512;
  return a;
}

/* Queue @r: at the tail, or, when urgent, after the urgent requests already queued. */
static void pend_push(zo_swap_t *sw, zo_swap_req_t *r) {
  zo_swap_req_t *at = NULL; /* insert before it; NULL: at the tail */
  if (r->urgent)
    for (at = sw->pend_head; at && at->urgent; at = at->pend_next) {}
  r->pend_next = at;
  r->pend_prev = at ? at->pend_prev : sw->pend_tail;
  if (r->pend_prev)
    r->pend_prev->pend_next = r;
  else
    sw->pend_head = r;
  if (at)
    at->pend_prev = r;
  else
    sw->pend_tail = r;
  r->queued = 1;
}

static void pend_remove(zo_swap_t *sw, zo_swap_req_t *r) {
  if (!r->queued) return;
  if (r->pend_prev)
    r->pend_prev->pend_next = r->pend_next;
  else
    sw->pend_head = r->pend_next;
  if (r->pend_next)
    r->pend_next->pend_prev = r->pend_prev;
  else
    sw->pend_tail = r->pend_prev;
  r->pend_prev = r->pend_next = NULL;
  r->queued = 0;
}

static void live_remove(zo_swap_t *sw, zo_swap_req_t *r) {
  if (r->live_prev)
    r->live_prev->live_next = r->live_next;
  else
    sw->live = r->live_next;
  if (r->live_next) r->live_next->live_prev = r->live_prev;
  sw->n_live--;
}

static int req_done(const zo_swap_req_t *r) {
  return (r->err || r->carved == r->nbytes) && r->n_inflight == 0;
}

static void req_fail(zo_swap_t *sw, zo_swap_req_t *r, int err, uint64_t off, size_t len) {
  if (r->err) return; /* keep the first failure */
  r->err = err;
  r->err_off = off;
  r->err_len = len;
  pend_remove(sw, r); /* do not start more pieces of a failed request */
}

/* ---- the completion path (0 / -errno inside) ---------------------------------------------- */

/*
 * Account one completion of piece @p with result @res (bytes or -errno).
 * Returns 1 when the piece must be issued again (for its remaining bytes),
 * 0 when it is finished, successfully or not. Runs on the caller's thread only.
 */
static int piece_complete(zo_swap_t *sw, zo_swap_piece_t *p, int res) {
  zo_swap_req_t *r = p->req;
  sw->n_completions++;
  if (sw->inject_k > 0 && --sw->inject_k == 0) res = sw->inject_res;
  size_t left = p->len - p->done;
  if (res < 0) {
    if ((res == -EAGAIN || res == -EINTR) && p->retries++ < SWAP_MAX_RETRIES) return 1;
    req_fail(sw, r, res, p->off + p->done, left);
    return 0;
  }
  if (res == 0) {
    if (!r->is_write) {
      req_fail(sw, r, 1, p->off + p->done, left); /* unexpected end of file */
      return 0;
    }
    if (p->retries++ < SWAP_MAX_RETRIES) return 1;
    req_fail(sw, r, -EIO, p->off + p->done, left);
    return 0;
  }
  size_t got = (size_t)res;
  if (got >= left) { /* complete (a count above what was asked is treated as complete) */
    p->done = p->len;
    return 0;
  }
  /* Short transfer: resume. O_DIRECT needs an aligned restart point; redoing the
   * partial block is harmless (a read reads it again, a write writes the same bytes). */
  size_t before = p->done;
  p->done += got;
  if (r->f->direct) p->done = p->done / sw->align * sw->align;
  if (p->done == before && p->retries++ >= SWAP_MAX_RETRIES) {
    req_fail(sw, r, -EIO, p->off + p->done, p->len - p->done);
    return 0;
  }
  return 1;
}

/* A request complete (done or failed, every piece back): its bytes and the time its direction was busy. */
static void busy_done(zo_swap_t *sw, zo_swap_req_t *r) {
  if (r->busy_counted || !req_done(r)) return;
  const int w = r->is_write != 0;
  r->busy_counted = 1;
  sw->busy_bytes[w] += r->nbytes;
  if (sw->busy_n[w] && --sw->busy_n[w] == 0) sw->busy_s[w] += zo_clock_s() - sw->busy_t0[w];
}

static void piece_release(zo_swap_t *sw, zo_swap_piece_t *p) {
  zo_swap_req_t *r = p->req;
  if (sw->lat_on) zo_swap_lat_record(sw, r->is_write, zo_clock_s() - p->t_issue);
  p->req->n_inflight--;
  busy_done(sw, r);
  p->req = NULL;
  p->next_free = sw->free_pieces;
  sw->free_pieces = p;
}

/* Index of the registered buffer holding [buf, buf+len), or -1. */
static int find_fixed_buf(const zo_swap_t *sw, const char *buf, size_t len) {
  for (unsigned i = 0; i < sw->n_bufs; i++) {
    const char *b = sw->bufs[i].iov_base;
    if (buf >= b && len <= sw->bufs[i].iov_len && (size_t)(buf - b) <= sw->bufs[i].iov_len - len)
      return (int)i;
  }
  return -1;
}

/* Prepare one SQE for the remaining bytes of @p. */
static int piece_prep_uring(zo_swap_t *sw, zo_swap_piece_t *p) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&sw->ring);
  for (int tries = 0; !sqe && tries < 64;
       tries++) { /* cannot happen with pieces <= SQ entries, but be safe */
    int ret = io_uring_submit(&sw->ring);
    if (ret > 0)
      sw->n_unsubmitted -= (unsigned)ret > sw->n_unsubmitted ? sw->n_unsubmitted : (unsigned)ret;
    if (sw->sqpoll) io_uring_sqring_wait(&sw->ring);
    sqe = io_uring_get_sqe(&sw->ring);
  }
  if (!sqe) return -EBUSY;
  zo_swap_req_t *r = p->req;
  unsigned len = (unsigned)(p->len - p->done);
  char *buf = p->buf + p->done;
  uint64_t off = p->poff + p->done;
  int fixed;
  int fd = zo_swap_part_fd(r->f, p->part, 1, &fixed);
  int bi = sw->n_bufs ? find_fixed_buf(sw, buf, len) : -1;
  if (bi >= 0) {
    if (r->is_write)
      io_uring_prep_write_fixed(sqe, fd, buf, len, off, bi);
    else
      io_uring_prep_read_fixed(sqe, fd, buf, len, off, bi);
  } else if (r->is_write) {
    io_uring_prep_write(sqe, fd, buf, len, off);
  } else {
    io_uring_prep_read(sqe, fd, buf, len, off);
  }
  if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, p);
  sw->n_unsubmitted++;
  return 0;
}

/* ---- the pread/pwrite thread pool (fallback when io_uring is refused) --------------------- */

/* Append @p to the FIFO [*head .. *tail] linked through next_free (caller holds the pool's mutex). */
static void fifo_push(zo_swap_piece_t **head, zo_swap_piece_t **tail, zo_swap_piece_t *p) {
  p->next_free = NULL;
  if (*tail)
    (*tail)->next_free = p;
  else
    *head = p;
  *tail = p;
}

static void *pool_main(void *arg) {
  zo_swap_pool_t *pl = arg;
  pthread_mutex_lock(&pl->mu);
  for (;;) {
    while (!pl->stop && !pl->work_head) pthread_cond_wait(&pl->work_cv, &pl->mu);
    if (pl->stop) break;
    zo_swap_piece_t *p = pl->work_head;
    pl->work_head = p->next_free;
    if (!pl->work_head) pl->work_tail = NULL;
    pthread_mutex_unlock(&pl->mu);
    /* The piece and its request are not touched by the owner while queued here. */
    zo_swap_req_t *r = p->req;
    size_t len = p->len - p->done;
    int fixed;
    int fd = zo_swap_part_fd(r->f, p->part, 0, &fixed);
    ssize_t n = r->is_write ? pwrite(fd, p->buf + p->done, len, (off_t)(p->poff + p->done))
                            : pread(fd, p->buf + p->done, len, (off_t)(p->poff + p->done));
    p->res = n < 0 ? -errno : (int)n;
    pthread_mutex_lock(&pl->mu);
    fifo_push(&pl->done_head, &pl->done_tail, p);
    pthread_cond_signal(&pl->done_cv);
  }
  pthread_mutex_unlock(&pl->mu);
  return NULL;
}

static void pool_push(zo_swap_t *sw, zo_swap_piece_t *p) {
  zo_swap_pool_t *pl = &sw->pool;
  pthread_mutex_lock(&pl->mu);
  fifo_push(&pl->work_head, &pl->work_tail, p);
  pthread_cond_signal(&pl->work_cv);
  pthread_mutex_unlock(&pl->mu);
}

static int pool_start(zo_swap_t *sw, unsigned n) {
  zo_swap_pool_t *pl = &sw->pool;
  pl->threads = calloc(n, sizeof *pl->threads);
  if (!pl->threads) return -ENOMEM;
  pthread_mutex_init(&pl->mu, NULL);
  pthread_cond_init(&pl->work_cv, NULL);
  pthread_cond_init(&pl->done_cv, NULL);
  sw->pool_started = 1;
  for (unsigned i = 0; i < n; i++) {
    int e = pthread_create(&pl->threads[i], NULL, pool_main, pl);
    if (e) return -e;
    pl->n_threads++;
  }
  return 0;
}

static void pool_stop(zo_swap_t *sw) {
  zo_swap_pool_t *pl = &sw->pool;
  if (!sw->pool_started) return;
  pthread_mutex_lock(&pl->mu);
  pl->stop = 1;
  pthread_cond_broadcast(&pl->work_cv);
  pthread_mutex_unlock(&pl->mu);
  for (unsigned i = 0; i < pl->n_threads; i++) pthread_join(pl->threads[i], NULL);
  pthread_mutex_destroy(&pl->mu);
  pthread_cond_destroy(&pl->work_cv);
  pthread_cond_destroy(&pl->done_cv);
  free(pl->threads);
  sw->pool_started = 0;
}

/* Hand the remaining bytes of @p to the ring or the pool; counts it in flight. */
static int piece_issue(zo_swap_t *sw, zo_swap_piece_t *p) {
  if (sw->use_uring) {
    int ret = piece_prep_uring(sw, p);
    if (ret < 0) return ret;
  } else {
    pool_push(sw, p);
  }
  sw->n_inflight++;
  return 0;
}

static int ring_submit(zo_swap_t *sw) {
  if (!sw->use_uring || !sw->n_unsubmitted) return 0;
  int ret = io_uring_submit(&sw->ring);
  if (ret >= 0) {
    sw->n_unsubmitted = 0; /* liburing flushed every SQE into the ring */
    return 0;
  }
  if (ret == -EAGAIN || ret == -EBUSY || ret == -EINTR)
    return 0; /* stays queued; retried on wait */
  return ret;
}

/* Start as many pieces of pending requests as free slots allow, FIFO. With @submit, hand the
 * prepared SQEs to the kernel in one io_uring_submit; without, the caller's next
 * io_uring_submit_and_wait carries them (one system call for both). */
static int pump(zo_swap_t *sw, int submit) {
  while (sw->free_pieces && sw->pend_head) {
    zo_swap_req_t *r = sw->pend_head;
    zo_swap_piece_t *p = sw->free_pieces;
    sw->free_pieces = p->next_free;
    size_t len = r->nbytes - r->carved;
    if (len > sw->block_size) len = sw->block_size;
    p->req = r;
    p->off = r->off + r->carved;
    uint64_t contig; /* a piece never crosses a stripe: it is one request on one drive */
    zo_swap_stripe_map(sw, p->off, &p->part, &p->poff, &contig);
    if (len > contig) len = (size_t)contig;
    if (sw->lat_on) p->t_issue = zo_clock_s();
    p->buf = r->buf + r->carved;
    p->len = len;
    p->done = 0;
    p->retries = 0;
    r->carved += len;
    r->n_inflight++;
    if (r->carved == r->nbytes) pend_remove(sw, r);
    int ret = piece_issue(sw, p);
    if (ret < 0) {
      req_fail(sw, r, ret, p->off, p->len);
      piece_release(sw, p);
      return ret;
    }
  }
  return submit ? ring_submit(sw) : 0;
}

/* Account a finished attempt of @p: issue it again or release it. */
static void piece_settle(zo_swap_t *sw, zo_swap_piece_t *p, int res) {
  sw->n_inflight--;
  if (piece_complete(sw, p, res)) {
    int ret = piece_issue(sw, p);
    if (ret == 0) return;
    req_fail(sw, p->req, ret, p->off + p->done, p->len - p->done);
  }
  piece_release(sw, p);
}

static int reap_pool(zo_swap_t *sw, int wait) {
  zo_swap_pool_t *pl = &sw->pool;
  pthread_mutex_lock(&pl->mu);
  while (wait && !pl->done_head) pthread_cond_wait(&pl->done_cv, &pl->mu);
  zo_swap_piece_t *p = pl->done_head;
  pl->done_head = pl->done_tail = NULL;
  pthread_mutex_unlock(&pl->mu);
  while (p) {
    zo_swap_piece_t *next = p->next_free;
    piece_settle(sw, p, p->res);
    p = next;
  }
  return 0;
}

/* Hand the prepared SQEs to the kernel and block until at least one
 * completion is posted (a transient -EAGAIN/-EBUSY/-EINTR on submit: just wait). */
static int ring_wait(zo_swap_t *sw) {
  int ret = io_uring_submit_and_wait(&sw->ring, 1);
  if (ret >= 0) {
    sw->n_unsubmitted = 0;
    return 0;
  }
  if (ret != -EAGAIN && ret != -EBUSY && ret != -EINTR) return ret;
  struct io_uring_cqe *cqe;
  ret = io_uring_wait_cqe(&sw->ring, &cqe);
  return ret < 0 && ret != -EINTR && ret != -EAGAIN ? ret : 0;
}

/* Reap every available completion; with @wait, block for at least one first. */
static int reap(zo_swap_t *sw, int wait) {
  if (!sw->use_uring) return reap_pool(sw, wait);
  if (wait) {
    int ret = ring_wait(sw);
    if (ret < 0) return ret;
  } else if ((sw->ring_flags & (IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN)) &&
             sw->n_inflight && !io_uring_cq_ready(&sw->ring)) {
    /* COOP/DEFER_TASKRUN post completions when we next enter the kernel: enter, without waiting. */
    int ret = io_uring_get_events(&sw->ring);
    if (ret < 0 && ret != -EAGAIN && ret != -EBUSY && ret != -EINTR) return ret;
  }
  unsigned head, n = 0;
  struct io_uring_cqe *cqe;
  io_uring_for_each_cqe(&sw->ring, head, cqe) {
    n++;
    piece_settle(sw, io_uring_cqe_get_data(cqe), cqe->res);
  }
  io_uring_cq_advance(&sw->ring, n);
  return 0;
}

/* ---- the progress thread (opts.progress_thread) -------------------------------------------- */

static void bg_lock(zo_swap_t *sw) {
  if (sw->bg) pthread_mutex_lock(&sw->mu);
}

static void bg_unlock(zo_swap_t *sw) {
  if (sw->bg) pthread_mutex_unlock(&sw->mu);
}

/* Block until at least one piece completes. Called by the thread without mu:
 * it is the only user of the ring and of n_unsubmitted. */
static int bg_block(zo_swap_t *sw) {
  if (!sw->use_uring) {
    zo_swap_pool_t *pl = &sw->pool;
    pthread_mutex_lock(&pl->mu);
    while (!pl->done_head) pthread_cond_wait(&pl->done_cv, &pl->mu);
    pthread_mutex_unlock(&pl->mu);
    return 0;
  }
  return ring_wait(sw);
}

/*
 * The thread: start pieces of queued requests as slots free up, block in the
 * kernel for completions, settle them, wake waiters; sleep when nothing is in
 * flight. A request queued while the thread blocks with pieces in flight is
 * started at the next completion (one piece time at most). On a ring failure
 * it records bg_err, wakes everyone and stops: waits then fail with
 * ZO_ERR_SYSTEM.
 */
static void *progress_main(void *arg) {
  zo_swap_t *sw = arg;
  pthread_mutex_lock(&sw->mu);
  for (;;) {
    int ret = pump(sw, 0);
    if (ret == 0 && sw->n_inflight == 0) {
      pthread_cond_broadcast(&sw->done_cv);
      if (sw->bg_stop) break;
      pthread_cond_wait(&sw->bg_cv, &sw->mu);
      continue;
    }
    if (ret == 0) {
      pthread_mutex_unlock(&sw->mu);
      ret = bg_block(sw);
      pthread_mutex_lock(&sw->mu);
    }
    if (ret == 0) ret = sw->use_uring ? reap(sw, 0) : reap_pool(sw, 0);
    if (ret < 0) {
      sw->bg_err = ret;
      pthread_cond_broadcast(&sw->done_cv);
      break;
    }
    pthread_cond_broadcast(&sw->done_cv);
  }
  pthread_mutex_unlock(&sw->mu);
  return NULL;
}

static int bg_start(zo_swap_t *sw) {
  pthread_mutex_init(&sw->mu, NULL);
  pthread_cond_init(&sw->bg_cv, NULL);
  pthread_cond_init(&sw->done_cv, NULL);
  sw->bg = 1;
  int e = pthread_create(&sw->bg_thread, NULL, progress_main, sw);
  if (e) {
    sw->bg = 0;
    pthread_cond_destroy(&sw->done_cv);
    pthread_cond_destroy(&sw->bg_cv);
    pthread_mutex_destroy(&sw->mu);
    return -e;
  }
  return 0;
}

/* Stop the thread after the pieces in flight have completed; nothing queued is started. */
static void bg_stop(zo_swap_t *sw) {
  if (!sw->bg) return;
  pthread_mutex_lock(&sw->mu);
  while (sw->pend_head) pend_remove(sw, sw->pend_head);
  sw->bg_stop = 1;
  pthread_cond_signal(&sw->bg_cv);
  pthread_mutex_unlock(&sw->mu);
  pthread_join(sw->bg_thread, NULL);
  pthread_cond_destroy(&sw->done_cv);
  pthread_cond_destroy(&sw->bg_cv);
  pthread_mutex_destroy(&sw->mu);
  sw->bg = 0;
}

/* ---- the ring --------------------------------------------------------------------------- */

/* Setup flags tried in order, the first the kernel takes wins: SQPOLL alone on opts.sqpoll;
 * SINGLE_ISSUER|DEFER_TASKRUN (6.1) on opts.single_issuer: completions run only when we ask for
 * them; COOP_TASKRUN|TASKRUN_FLAG (5.19): completions wait for our next io_uring_enter instead of
 * interrupting the thread; then none. */
static int ring_try(zo_swap_t *sw, unsigned flags, unsigned idle_ms) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = flags;
  p.sq_thread_idle = idle_ms;
  return io_uring_queue_init_params(sw->qd_max * sw->n_dirs, &sw->ring, &p);
}

/* ZO_SWAP_RING_FLAGS, the measurement override of the setup flags. */
enum ring_mode { RING_AUTO, RING_NONE, RING_COOP, RING_DEFER };

/*
 * Read ZO_SWAP_RING_FLAGS into *@mode and check it against @opts before
 * anything is made. Unset or empty: RING_AUTO. "defer" needs the creating
 * thread to submit and reap everything (IORING_SETUP_DEFER_TASKRUN requires
 * IORING_SETUP_SINGLE_ISSUER, and the kernel answers EEXIST to any other task
 * entering the ring): it conflicts with opts.progress_thread, whose thread
 * submits (that EEXIST was the "File exists" every transfer got), and with
 * opts.sqpoll, with which the kernel takes no task-run flag; so does "coop".
 */
static zo_status ring_env(const zo_swap_opts *opts, enum ring_mode *mode) {
  const char *env = getenv("ZO_SWAP_RING_FLAGS");
  *mode = RING_AUTO;
  if (!env || !env[0]) return ZO_OK;
  if (!strcmp(env, "none"))
    *mode = RING_NONE;
  else if (!strcmp(env, "coop"))
    *mode = RING_COOP;
  else if (!strcmp(env, "defer"))
    *mode = RING_DEFER;
  else
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: ZO_SWAP_RING_FLAGS='%s' is not one of none, coop, defer (or unset)",
                        env);
  if (*mode == RING_DEFER && opts && opts->progress_thread)
    return zo_error_set(
        ZO_ERR_INVALID_ARG,
        "swap: ZO_SWAP_RING_FLAGS=defer cannot be used with opts.progress_thread: "
        "IORING_SETUP_DEFER_TASKRUN needs IORING_SETUP_SINGLE_ISSUER, one thread that submits and "
        "reaps every request, and the creating thread is not the progress thread that submits "
        "(the kernel would answer EEXIST, \"File exists\"); unset it or use coop or none");
  if (*mode != RING_NONE && opts && opts->sqpoll)
    return zo_error_set(
        ZO_ERR_INVALID_ARG,
        "swap: ZO_SWAP_RING_FLAGS=%s cannot be used with opts.sqpoll: the kernel takes no task-run "
        "flag with IORING_SETUP_SQPOLL; unset it or use none",
        env);
  return ZO_OK;
}

/* Open the ring. With ZO_SWAP_RING_FLAGS set, a refused mode is an error naming what it needs,
 * not a quiet fallback to another mode or to the pool: the measurement asked for that mode. */
static zo_status ring_open(zo_swap_t *sw, const zo_swap_opts *opts, enum ring_mode mode) {
  int ret = -EINVAL;
  unsigned idle = opts && opts->sqpoll_idle_ms ? opts->sqpoll_idle_ms : 1000;
  int single = opts && opts->single_issuer &&
               !opts->progress_thread; /* the thread, not the creator, submits */
  struct utsname un;
  const char *kernel = uname(&un) == 0 ? un.release : "unknown";
  if (opts && opts->sqpoll) {
    /* The kernel refuses the task-run flags with SQPOLL (its thread completes requests itself). */
    ret = ring_try(sw, IORING_SETUP_SQPOLL, idle);
    if (ret == 0) {
      sw->ring_flags = IORING_SETUP_SQPOLL;
      sw->sqpoll = 1;
    } else {
      zo_warn_once("swap: io_uring SQPOLL refused (%s); continuing without it", strerror(-ret));
    }
  }
  if (ret != 0 && (mode == RING_DEFER || (mode == RING_AUTO && single))) {
    unsigned f = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    ret = ring_try(sw, f, 0);
    if (ret == 0)
      sw->ring_flags = f;
    else if (mode == RING_DEFER)
      return zo_error_set(
          ZO_ERR_UNSUPPORTED,
          "swap: ZO_SWAP_RING_FLAGS=defer: io_uring_queue_init(%u) with IORING_SETUP_SINGLE_ISSUER|"
          "IORING_SETUP_DEFER_TASKRUN refused: %s (needs Linux 6.1+ and liburing 2.3+; kernel %s)",
          sw->qd_max, strerror(-ret), kernel);
    else
      zo_warn_once("swap: io_uring SINGLE_ISSUER|DEFER_TASKRUN refused (%s); continuing without",
                   strerror(-ret));
  }
  if (ret != 0 && (mode == RING_COOP || mode == RING_AUTO)) {
    ret = ring_try(sw, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, 0);
    if (ret == 0)
      sw->ring_flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    else if (mode == RING_COOP)
      return zo_error_set(
          ZO_ERR_UNSUPPORTED,
          "swap: ZO_SWAP_RING_FLAGS=coop: io_uring_queue_init(%u) with IORING_SETUP_COOP_TASKRUN|"
          "IORING_SETUP_TASKRUN_FLAG refused: %s (needs Linux 5.19+ and liburing 2.2+; kernel %s)",
          sw->qd_max, strerror(-ret), kernel);
  }
  if (ret != 0) {
    ret = ring_try(sw, 0, 0);
    sw->ring_flags = 0;
  }
  if (ret != 0 && mode != RING_AUTO)
    return zo_error_set(
        ZO_ERR_UNSUPPORTED,
        "swap: ZO_SWAP_RING_FLAGS=none: io_uring_queue_init(%u) failed: %s (kernel %s)", sw->qd_max,
        strerror(-ret), kernel);
  if (ret != 0) {
    zo_warn_once(
        "swap: io_uring_queue_init(%u) failed: %s; falling back to a pool of pread/pwrite threads",
        sw->qd, strerror(-ret));
    return ZO_OK;
  }
  sw->use_uring = 1;
  if (opts && opts->register_files) {
    ret = io_uring_register_files_sparse(&sw->ring, SWAP_FILE_SLOTS);
    if (ret == 0)
      sw->fixed_files = 1;
    else
      zo_warn_once("swap: io_uring_register_files refused (%s); using plain file descriptors",
                   strerror(-ret));
  }
  return ZO_OK;
}

/* ---- public edge: -errno becomes zo_status here ------------------------------------------ */

/* @opts' block size, queue depth and rank (defaults filled in) and the ring mode ZO_SWAP_RING_FLAGS
 * asks for. */
static zo_status create_check_opts(const zo_swap_opts *opts, size_t *block, unsigned *qd, int *rank,
                                   enum ring_mode *ring_mode) {
  *block = opts && opts->block_size ? opts->block_size : SWAP_DEFAULT_BLOCK;
  *qd = opts && opts->queue_depth ? opts->queue_depth : SWAP_DEFAULT_QD;
  *rank = opts ? opts->rank : 0;
  if (*block > SWAP_MAX_BLOCK)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: block_size %zu bytes exceeds the maximum %zu",
                        *block, SWAP_MAX_BLOCK);
  if (*qd > SWAP_MAX_QD)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: queue_depth %u exceeds the maximum %u", *qd,
                        SWAP_MAX_QD);
  if (*rank < 0 || *rank > SWAP_MAX_RANK)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: rank %d out of range 0..%d", *rank,
                        SWAP_MAX_RANK);
  return ring_env(opts, ring_mode);
}

/* The one directory of zo_swap_create: an existing one (several: zo_swap_paths_check). */
static zo_status create_check_dir(const char *nvme_path) {
  if (!nvme_path[0]) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path is empty");
  struct stat st;
  if (stat(nvme_path, &st) != 0) {
    int e = errno;
    return zo_error_set(e == ENOENT || e == ENOTDIR || e == ENAMETOOLONG || e == ELOOP
                            ? ZO_ERR_INVALID_ARG
                            : ZO_ERR_SYSTEM,
                        "swap: nvme_path '%s': %s", nvme_path, strerror(e));
  }
  if (!S_ISDIR(st.st_mode))
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path '%s': %s", nvme_path,
                        strerror(ENOTDIR));
  return ZO_OK;
}

zo_status zo_swap_create(const char *nvme_path, const zo_swap_opts *opts, zo_swap_t **out) {
  if (out) *out = NULL;
  if (!nvme_path || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: zo_swap_create: %s is NULL",
                        !out ? "out" : "nvme_path");
  return zo_swap_create_striped(&nvme_path, 1, opts, out);
}

/* The piece descriptors of queue depth @qd per directory, all free. */
static void pieces_reset(zo_swap_t *sw, unsigned qd) {
  const unsigned n = qd * sw->n_dirs;
  for (unsigned i = 0; i < n; i++) {
    sw->pieces[i].req = NULL;
    sw->pieces[i].next_free = i + 1 < n ? &sw->pieces[i + 1] : NULL;
  }
  sw->free_pieces = &sw->pieces[0];
}

/* The striping arguments: n paths, none NULL, queue depth x n within the ring's limit. */
static zo_status create_check_paths(const char *const *paths, unsigned n, unsigned qd) {
  if (n == 0 || n > ZO_SWAP_MAX_PATHS)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %u nvme_paths; need 1..%u", n,
                        ZO_SWAP_MAX_PATHS);
  for (unsigned i = 0; i < n; i++)
    if (!paths[i]) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path[%u] is NULL", i);
  if ((uint64_t)qd * n > SWAP_MAX_QD)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: queue_depth %u x %u directories exceeds the maximum %u", qd, n,
                        SWAP_MAX_QD);
  return ZO_OK;
}

/* The O_DIRECT alignment (the largest of the directories') and the stripe size (@want, 0: 1 MiB). */
static zo_status create_align(zo_swap_t *sw, size_t want_stripe) {
  sw->align = 0;
  for (unsigned i = 0; i < sw->n_dirs; i++) {
    size_t a = probe_alignment(zo_swap_dir_at(sw, i));
    if (a > sw->align) sw->align = a;
  }
  sw->stripe = want_stripe ? want_stripe : SWAP_DEFAULT_BLOCK;
  if (sw->n_dirs > 1 && (sw->stripe % sw->align || sw->stripe > SWAP_MAX_BLOCK))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: stripe_size %zu bytes is not a multiple of the O_DIRECT alignment "
                        "%zu bytes (at most %zu)",
                        (size_t)sw->stripe, sw->align, SWAP_MAX_BLOCK);
  return ZO_OK;
}

zo_status zo_swap_create_striped(const char *const *nvme_paths, unsigned n_paths,
                                 const zo_swap_opts *opts, zo_swap_t **out) {
  if (out) *out = NULL;
  if (!nvme_paths || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: zo_swap_create_striped: %s is NULL",
                        !out ? "out" : "nvme_paths");
  size_t block = 0;
  unsigned qd = 0;
  int rank = 0;
  enum ring_mode ring_mode = RING_AUTO;
  ZO_CHECK(create_check_opts(opts, &block, &qd, &rank, &ring_mode));
  ZO_CHECK(create_check_paths(nvme_paths, n_paths, qd));
  ZO_CHECK(n_paths > 1 ? zo_swap_paths_check(nvme_paths, n_paths)
                       : create_check_dir(nvme_paths[0]));

  zo_swap_t *sw = calloc(1, sizeof *sw);
  if (!sw) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for the handle");
  sw->rank = rank;
  sw->n_dirs = 1;
  sw->checksum_default = opts && opts->checksum;
  sw->lat_on = opts && opts->latency_stats;
  zo_status st_ret = zo_swap_dir_open(&sw->pdir, nvme_paths[0], rank);
  if (st_ret != ZO_OK) { /* zo_swap_dir_close() removes only a directory we own */
    if (n_paths > 1) zo_error_prefix(st_ret, "nvme_path[0]");
    goto err;
  }
  if ((st_ret = zo_swap_dirs_open(sw, nvme_paths, n_paths, rank)) != ZO_OK) goto err;
  if ((st_ret = create_align(sw, opts ? opts->stripe_size : 0)) != ZO_OK) goto err;
  sw->block_size = zo_round_up(block, sw->align);
  if (sw->block_size > SWAP_MAX_BLOCK) sw->block_size = SWAP_MAX_BLOCK;
  sw->qd = sw->qd_max = qd;
  sw->direct = 1;
  sw->pieces = calloc((size_t)qd * sw->n_dirs, sizeof *sw->pieces);
  if (!sw->pieces) {
    st_ret = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for %u piece descriptors",
                          qd * sw->n_dirs);
    goto err;
  }
  pieces_reset(sw, qd);

  const char *force = getenv("ZO_SWAP_FORCE_PREAD");
  if (force && force[0] && strcmp(force, "0") != 0)
    zo_info("swap: ZO_SWAP_FORCE_PREAD set, using a pool of pread/pwrite threads");
  else if ((st_ret = ring_open(sw, opts, ring_mode)) != ZO_OK)
    goto err;
  if (!sw->use_uring) {
    unsigned nt = opts && opts->pool_threads ? opts->pool_threads : (qd < 4 ? qd : 4) * sw->n_dirs;
    int ret = pool_start(sw, nt);
    if (ret < 0) {
      st_ret = zo_error_set(sys_status(-ret), "swap: cannot start %u pread/pwrite threads: %s", nt,
                            strerror(-ret));
      goto err;
    }
  }
  if (opts && opts->progress_thread) {
    int ret = bg_start(sw);
    if (ret < 0) {
      st_ret = zo_error_set(sys_status(-ret), "swap: cannot start the progress thread: %s",
                            strerror(-ret));
      goto err;
    }
  }
  *out = sw;
  return ZO_OK;
err:
  pool_stop(sw);
  if (sw->use_uring) io_uring_queue_exit(&sw->ring);
  zo_swap_dirs_close(sw);
  zo_swap_dir_close(&sw->pdir);
  free(sw->pieces);
  free(sw);
  return st_ret;
}

void zo_swap_destroy(zo_swap_t *sw) {
  if (!sw) return;
  if (sw->n_inflight)
    zo_warn("swap: destroy with %u pieces in flight; reaping them, results dropped",
            sw->n_inflight);
  bg_stop(sw); /* lets the pieces in flight complete, starts nothing new */
  while (sw->pend_head) pend_remove(sw, sw->pend_head); /* start nothing new */
  while (sw->n_inflight)
    if (reap(sw, 1) < 0) break;
  pool_stop(sw);
  unsigned n_live = 0;
  while (sw->live) {
    zo_swap_req_t *r = sw->live;
    sw->live = r->live_next;
    free(r);
    n_live++;
  }
  if (n_live) zo_warn("swap: destroy freed %u requests that were never waited", n_live);
  zo_swap_files_close_all(sw);
  if (sw->use_uring) io_uring_queue_exit(&sw->ring);
  zo_swap_dirs_close(sw);
  zo_swap_dir_close(&sw->pdir);
  free(sw->bufs);
  free(sw->pieces);
  free(sw);
}

size_t zo_swap_alignment(const zo_swap_t *sw) { return sw ? sw->align : 4096; }
size_t zo_swap_block_size(const zo_swap_t *sw) { return sw ? sw->block_size : 0; }
unsigned zo_swap_queue_depth(const zo_swap_t *sw) { return sw ? sw->qd : 0; }

zo_status zo_swap_set_queue(zo_swap_t *sw, size_t block_size, unsigned queue_depth) {
  if (!sw) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: set_queue: sw is NULL");
  if (block_size > SWAP_MAX_BLOCK)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: set_queue: block_size %zu bytes exceeds the maximum %zu", block_size,
                        SWAP_MAX_BLOCK);
  if (queue_depth > sw->qd_max)
    return zo_error_set(
        ZO_ERR_INVALID_ARG,
        "swap: set_queue: queue_depth %u exceeds %u, the queue_depth the handle was created with",
        queue_depth, sw->qd_max);
  if (sw->n_live) /* no request: the progress thread, if any, is asleep and holds no piece */
    return zo_error_set(ZO_ERR_INVALID_USAGE, "swap: set_queue with %u requests outstanding",
                        sw->n_live);
  if (block_size) {
    sw->block_size = zo_round_up(block_size, sw->align);
    if (sw->block_size > SWAP_MAX_BLOCK) sw->block_size = SWAP_MAX_BLOCK;
  }
  if (queue_depth) {
    sw->qd = queue_depth;
    pieces_reset(sw, queue_depth);
  }
  return ZO_OK;
}
int zo_swap_is_direct(const zo_swap_t *sw) { return sw ? sw->direct : 0; }
int zo_swap_uses_io_uring(const zo_swap_t *sw) { return sw ? sw->use_uring : 0; }
int zo_swap_uses_sqpoll(const zo_swap_t *sw) { return sw ? sw->sqpoll : 0; }
int zo_swap_uses_fixed_files(const zo_swap_t *sw) { return sw ? sw->fixed_files : 0; }
unsigned zo_swap_n_registered_buffers(const zo_swap_t *sw) { return sw ? sw->n_bufs : 0; }
const char *zo_swap_dir(const zo_swap_t *sw) { return sw ? sw->pdir.path : ""; }

const char *zo_swap_describe(zo_swap_t *sw) {
  if (!sw) return "no swap";
  char eng[64];
  if (sw->use_uring)
    snprintf(eng, sizeof eng, "io_uring%s qd %u",
             sw->ring_flags & IORING_SETUP_DEFER_TASKRUN  ? " (defer_taskrun)"
             : sw->ring_flags & IORING_SETUP_COOP_TASKRUN ? " (coop_taskrun)"
                                                          : "",
             sw->qd);
  else
    snprintf(eng, sizeof eng, "pread/pwrite pool (%u threads) qd %u", sw->pool.n_threads, sw->qd);
  unsigned n_csum = 0;
  for (zo_swap_file_t *f = sw->files; f; f = f->next) n_csum += f->csum_chunk != 0;
  int len = snprintf(
      sw->desc, sizeof sw->desc,
      "%s%s, block %zu B, %s align %zu B, %s, %u fixed buffers, %s, %u checksummed files, rank %d, dir %s",
      eng, sw->bg ? " + progress thread" : "", sw->block_size, sw->direct ? "O_DIRECT" : "buffered",
      sw->align, sw->fixed_files ? "fixed files" : "no fixed files", sw->n_bufs,
      sw->sqpoll ? "sqpoll" : "no sqpoll", n_csum, sw->rank, sw->pdir.path);
  for (unsigned i = 1; i < sw->n_dirs && len > 0 && (size_t)len < sizeof sw->desc; i++)
    len += snprintf(sw->desc + len, sizeof sw->desc - (size_t)len, " + %s", sw->xdirs[i - 1].path);
  if (sw->n_dirs > 1 && len > 0 && (size_t)len < sizeof sw->desc)
    snprintf(sw->desc + len, sizeof sw->desc - (size_t)len, " (striped, %zu B stripes, qd per dir)",
             (size_t)sw->stripe);
  return sw->desc;
}

zo_status zo_swap_register_buffers(zo_swap_t *sw, const struct iovec *iov, unsigned n) {
  if (!sw) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: register_buffers: sw is NULL");
  if (n && !iov)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: register_buffers: iov is NULL with n = %u", n);
  if (n > SWAP_MAX_BUFFERS)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: register_buffers: %u buffers, at most %u", n,
                        SWAP_MAX_BUFFERS);
  for (unsigned i = 0; i < n; i++)
    if (!iov[i].iov_base || !iov[i].iov_len)
      return zo_error_set(ZO_ERR_INVALID_ARG, "swap: register_buffers: buffer %u is NULL or empty",
                          i);
  if (sw->n_live)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "swap: register_buffers with %u requests outstanding",
                        sw->n_live);
  if (!sw->use_uring) return ZO_OK;
  if (sw->n_bufs) {
    io_uring_unregister_buffers(&sw->ring);
    free(sw->bufs);
    sw->bufs = NULL;
    sw->n_bufs = 0;
  }
  if (!n) return ZO_OK;
  struct iovec *copy = malloc(n * sizeof *copy);
  if (!copy)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for %u buffer descriptors", n);
  memcpy(copy, iov, n * sizeof *copy);
  int ret = io_uring_register_buffers(&sw->ring, copy, n);
  if (ret < 0) {
    free(copy);
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) total += iov[i].iov_len;
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
      if (rl.rlim_cur == RLIM_INFINITY)
        snprintf(lim, sizeof lim, "unlimited");
      else
        snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)rl.rlim_cur);
    }
    return zo_error_set(
        ret == -ENOMEM ? ZO_ERR_OUT_OF_MEMORY : ZO_ERR_SYSTEM,
        "swap: io_uring_register_buffers(%u buffers, %zu bytes): %s (RLIMIT_MEMLOCK %s; raise it "
        "with ulimit -l or limits.conf)",
        n, total, strerror(-ret), lim);
  }
  sw->bufs = copy;
  sw->n_bufs = n;
  return ZO_OK;
}

/* ---- transfers ---------------------------------------------------------------------------- */

static zo_status submit_req(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf,
                            size_t nbytes, int is_write, int urgent, zo_swap_req_t **out) {
  const char *op = is_write ? "write" : "read";
  if (out) *out = NULL;
  if (!sw || !f || !buf || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s: %s is NULL", op,
                        !sw    ? "sw"
                        : !f   ? "file"
                        : !buf ? "buf"
                               : "req");
  if (f->sw != sw)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s: file '%s' belongs to another swap", op,
                        f->path);
  size_t a = sw->align;
  if ((uintptr_t)buf % a)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s '%s': buffer %p is not aligned to %zu bytes",
                        op, f->path, buf, a);
  if (offset % a)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: %s '%s': offset %" PRIu64 " is not a multiple of %zu bytes", op,
                        f->path, offset, a);
  if (nbytes == 0 || nbytes % a)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: %s '%s': length %zu bytes is not a nonzero multiple of %zu bytes",
                        op, f->path, nbytes, a);
  if (offset > f->size || nbytes > f->size - offset)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: %s '%s': offset %" PRIu64
                        " + length %zu bytes is past the file size %" PRIu64,
                        op, f->path, offset, nbytes, f->size);
  zo_swap_req_t *r = calloc(1, sizeof *r);
  if (!r) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for a request");
  if (is_write) zo_swap_crc_record(f, offset, buf, nbytes);
  r->sw = sw;
  r->f = f;
  r->is_write = is_write;
  r->buf = buf;
  r->off = offset;
  r->nbytes = nbytes;
  r->urgent = urgent;
  bg_lock(sw);
  if (sw->busy_n[is_write != 0]++ == 0) sw->busy_t0[is_write != 0] = zo_clock_s();
  r->live_next = sw->live;
  if (sw->live) sw->live->live_prev = r;
  sw->live = r;
  sw->n_live++;
  f->n_reqs++;
  pend_push(sw, r);
  if (sw->bg) {
    pthread_cond_signal(&sw->bg_cv);
  } else {
    /* a failing io_uring_submit leaves the SQEs in the ring; wait/poll retry and report it */
    (void)pump(sw, 1);
  }
  bg_unlock(sw);
  *out = r;
  return ZO_OK;
}

/* The file's name without its directory, for NVTX range names. */
static inline const char *nvtx_file_name(const zo_swap_file_t *f) {
  if (!f) return "?";
  const char *slash = strrchr(f->path, '/');
  return slash ? slash + 1 : f->path;
}

/* NVTX range "swap read NAME" / "swap write NAME" around the submit (the wait has its own). */
static zo_status submit(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf, size_t nbytes,
                        int is_write, int urgent, zo_swap_req_t **out) {
  ZO_NVTX_PUSHF("swap %s %s", is_write ? "write" : "read", nvtx_file_name(f));
  zo_status st = submit_req(sw, f, offset, buf, nbytes, is_write, urgent, out);
  ZO_NVTX_POP();
  return st;
}

zo_status zo_swap_submit_read(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf,
                              size_t nbytes, zo_swap_req_t **req) {
  return submit(sw, f, offset, buf, nbytes, 0, 0, req);
}

zo_status zo_swap_submit_read_urgent(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf,
                                     size_t nbytes, zo_swap_req_t **req) {
  return submit(sw, f, offset, buf, nbytes, 0, 1, req);
}

zo_status zo_swap_submit_write(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, const void *buf,
                               size_t nbytes, zo_swap_req_t **req) {
  return submit(sw, f, offset, (void *)buf, nbytes, 1, 0, req);
}

zo_status zo_swap_submit_write_urgent(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset,
                                      const void *buf, size_t nbytes, zo_swap_req_t **req) {
  return submit(sw, f, offset, (void *)buf, nbytes, 1, 1, req);
}

zo_status zo_swap_poll(zo_swap_t *sw, zo_swap_req_t *req, int *done) {
  if (done) *done = 0;
  if (!sw || !req || !done)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: poll: %s is NULL",
                        !sw    ? "sw"
                        : !req ? "req"
                               : "done");
  if (req->sw != sw)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: poll: request belongs to another swap");
  if (sw->bg) {
    pthread_mutex_lock(&sw->mu);
    int ret = sw->bg_err;
    *done = req_done(req);
    pthread_mutex_unlock(&sw->mu);
    if (ret < 0 && !*done)
      return zo_error_set(ZO_ERR_SYSTEM, "swap: poll on '%s': io_uring (progress thread): %s",
                          sw->pdir.path, strerror(-ret));
    return ZO_OK;
  }
  int ret = pump(sw, 1);
  if (ret == 0) ret = reap(sw, 0);
  if (ret == 0) ret = pump(sw, 1); /* reaping freed slots */
  if (ret < 0)
    return zo_error_set(ZO_ERR_SYSTEM, "swap: poll on '%s': io_uring: %s", sw->pdir.path,
                        strerror(-ret));
  *done = req_done(req);
  return ZO_OK;
}

static zo_status wait_req(zo_swap_t *sw, zo_swap_req_t *req) {
  if (!sw || !req)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: wait: %s is NULL", !sw ? "sw" : "req");
  if (req->sw != sw)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: wait: request belongs to another swap");
  if (sw->bg) {
    pthread_mutex_lock(&sw->mu);
    while (!req_done(req) && !sw->bg_err) pthread_cond_wait(&sw->done_cv, &sw->mu);
    int ret = sw->bg_err;
    if (!req_done(req)) {
      pthread_mutex_unlock(&sw->mu);
      return zo_error_set(ZO_ERR_SYSTEM, "swap: wait on '%s': io_uring (progress thread): %s",
                          req->f->path, strerror(-ret));
    }
  }
  while (!sw->bg && !req_done(req)) {
    int ret = pump(sw, 0); /* submitted by reap()'s io_uring_submit_and_wait, or just below */
    if (ret == 0 && req_done(req)) ret = ring_submit(sw); /* others' pieces just prepared */
    if (ret == 0 && !req_done(req)) {
      if (sw->n_inflight == 0)
        ret = -EPROTO; /* nothing can complete it: a bug, never a hang */
      else
        ret = reap(sw, 1);
    }
    if (ret < 0)
      return zo_error_set(ZO_ERR_SYSTEM, "swap: wait on '%s': io_uring: %s", req->f->path,
                          strerror(-ret));
  }
  /* refill the slots freed by the last completions; errors resurface on the next wait */
  if (!sw->bg) (void)pump(sw, 1);
  pend_remove(sw, req);
  live_remove(sw, req);
  bg_unlock(sw); /* the request is ours alone now: verify without holding up the progress thread */
  zo_status st = ZO_OK;
  unsigned epart = 0;
  uint64_t eoff = req->err_off, econtig;
  if (req->err) zo_swap_stripe_map(sw, req->err_off, &epart, &eoff, &econtig);
  if (req->err == 1)
    st = zo_error_set(ZO_ERR_IO,
                      "swap: read '%s' at offset %" PRIu64
                      ", length %zu bytes: unexpected end of file",
                      zo_swap_part_path(req->f, epart), eoff, req->err_len);
  else if (req->err)
    st = zo_error_set(ZO_ERR_IO, "swap: %s '%s' at offset %" PRIu64 ", length %zu bytes: %s",
                      req->is_write ? "write" : "read", zo_swap_part_path(req->f, epart), eoff,
                      req->err_len, strerror(-req->err));
  if (req->err && req->is_write)
    zo_swap_crc_forget(req->f, req->off, req->nbytes); /* the disk holds unknown bytes */
  if (!req->err && !req->is_write) st = zo_swap_crc_verify(req->f, req->off, req->buf, req->nbytes);
  req->f->n_reqs--;
  free(req);
  return st;
}

/* NVTX range "swap read wait NAME" / "swap write wait NAME": the time the caller blocks, CRC check included. */
zo_status zo_swap_wait(zo_swap_t *sw, zo_swap_req_t *req) {
  ZO_NVTX_PUSHF("swap %s wait %s", req && req->is_write ? "write" : "read",
                nvtx_file_name(req ? req->f : NULL));
  zo_status st = wait_req(sw, req);
  ZO_NVTX_POP();
  return st;
}

zo_status zo_swap_read(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf,
                       size_t nbytes) {
  zo_swap_req_t *r;
  ZO_CHECK(zo_swap_submit_read(sw, f, offset, buf, nbytes, &r));
  return zo_swap_wait(sw, r);
}

zo_status zo_swap_write(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, const void *buf,
                        size_t nbytes) {
  zo_swap_req_t *r;
  ZO_CHECK(zo_swap_submit_write(sw, f, offset, buf, nbytes, &r));
  return zo_swap_wait(sw, r);
}

void zo_swap_test_inject(zo_swap_t *sw, int kth_completion, int res) {
  if (!sw) return;
  sw->inject_k = kth_completion > 0 ? kth_completion : 0;
  sw->inject_res = res;
}

unsigned long zo_swap_test_completions(const zo_swap_t *sw) { return sw ? sw->n_completions : 0; }

void zo_swap_test_refuse_direct(zo_swap_t *sw) {
  if (sw) sw->refuse_direct = 1;
}

zo_status zo_swap_busy(zo_swap_t *sw, double busy_s[2], uint64_t bytes[2]) {
  if (!sw || !busy_s || !bytes)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: busy: NULL argument");
  bg_lock(sw);
  const double now = zo_clock_s();
  for (int w = 0; w < 2; w++) {
    busy_s[w] = sw->busy_s[w] + (sw->busy_n[w] ? now - sw->busy_t0[w] : 0);
    bytes[w] = sw->busy_bytes[w];
  }
  bg_unlock(sw);
  return ZO_OK;
}

zo_status zo_swap_latency(zo_swap_t *sw, int is_write, zo_swap_latency_t *out) {
  if (!sw || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: latency: NULL argument");
  bg_lock(sw);
  zo_status st = zo_swap_latency_of(sw, is_write, out);
  bg_unlock(sw);
  return st;
}

void zo_swap_latency_reset(zo_swap_t *sw) {
  if (!sw) return;
  bg_lock(sw);
  memset(sw->lat_hist, 0, sizeof sw->lat_hist);
  sw->lat_max[0] = sw->lat_max[1] = 0;
  bg_unlock(sw);
}
