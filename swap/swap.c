/*
 * swap.c - the NVMe tier: swap files in a private directory, transfers cut into
 * block_size pieces driven by io_uring (O_DIRECT), or pread/pwrite when the
 * ring is refused. Not a cache and not a layout: callers choose offsets.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <liburing.h>

#include "base_internal.h"
#include "swap_internal.h"
#include "zoffload/swap.h"

#define SWAP_DEFAULT_BLOCK (1u << 20)
#define SWAP_DEFAULT_QD 32u
#define SWAP_MAX_BLOCK ((size_t)1 << 30)
#define SWAP_MAX_QD 32768u
#define SWAP_MAX_RETRIES 16 /* -EAGAIN/-EINTR or no-progress short transfers per piece */

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

typedef struct zo_swap_piece zo_swap_piece_t;

struct zo_swap_piece {
  zo_swap_req_t *req;
  uint64_t off;  /* file byte offset of the piece */
  char *buf;     /* user buffer at that offset */
  size_t len;    /* piece length, bytes */
  size_t done;   /* bytes confirmed so far (aligned down under O_DIRECT) */
  unsigned retries;
  zo_swap_piece_t *next_free;
};

struct zo_swap_file {
  zo_swap_t *sw;
  zo_swap_file_t *prev, *next; /* sw->files */
  int fd;
  int direct;           /* opened with O_DIRECT */
  unsigned n_reqs;      /* requests not yet waited */
  uint64_t size;        /* bytes */
  char path[PATH_MAX + 256]; /* full path: dir + "/" + name */
  const char *name;     /* points into path */
};

struct zo_swap_req {
  zo_swap_t *sw;
  zo_swap_file_t *f;
  int is_write;
  char *buf;
  uint64_t off;
  size_t nbytes;
  size_t carved;        /* bytes already handed to pieces */
  unsigned n_inflight;  /* pieces issued and not completed */
  int queued;           /* on sw's pending list */
  int err;              /* first failure: -errno, or 1 for unexpected EOF; 0 none */
  uint64_t err_off;
  size_t err_len;
  zo_swap_req_t *pend_prev, *pend_next; /* FIFO of requests with bytes not yet carved */
  zo_swap_req_t *live_prev, *live_next; /* every request not yet waited */
};

struct zo_swap {
  char dir[PATH_MAX];
  int dirfd;
  size_t align;
  size_t block_size;
  unsigned qd;
  int use_uring;
  struct io_uring ring;
  int direct;               /* 0 once some file fell back to buffered I/O */
  zo_swap_file_t *files;
  zo_swap_piece_t *pieces;  /* [qd] */
  zo_swap_piece_t *free_pieces;
  unsigned n_inflight;      /* pieces prepared on the ring and not reaped */
  unsigned n_unsubmitted;   /* SQEs prepared but not yet accepted by io_uring_submit */
  zo_swap_req_t *pend_head, *pend_tail;
  zo_swap_req_t *live;
  int inject_k;             /* fault injection: completions left until it fires; 0 off */
  int inject_res;
  unsigned long n_completions; /* every piece completion, for tests */
  int refuse_direct;           /* test hook: pretend O_DIRECT opens fail with EINVAL */
};

/* ---- small helpers ---------------------------------------------------------------------- */

static int is_pow2(size_t x) { return x && !(x & (x - 1)); }

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

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
static size_t probe_alignment(zo_swap_t *sw) {
  size_t a = 0;
  unsigned maj = 0, min = 0;
  int fd = openat(sw->dirfd, ".align-probe", O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    struct zo_kstatx stx;
    memset(&stx, 0, sizeof stx);
    if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH | AT_STATX_SYNC_AS_STAT, STATX_DIOALIGN | STATX_BASIC_STATS,
                &stx) == 0) {
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
    unlinkat(sw->dirfd, ".align-probe", 0);
  }
  if (!a && maj) a = blockdev_logical_size(maj, min);
  if (!a || !is_pow2(a)) a = 4096;
  if (a < 512) a = 512;
  return a;
}

static void pend_push(zo_swap_t *sw, zo_swap_req_t *r) {
  r->pend_next = NULL;
  r->pend_prev = sw->pend_tail;
  if (sw->pend_tail)
    sw->pend_tail->pend_next = r;
  else
    sw->pend_head = r;
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
 * 0 when it is finished, successfully or not.
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

static void piece_release(zo_swap_t *sw, zo_swap_piece_t *p) {
  p->req->n_inflight--;
  p->req = NULL;
  p->next_free = sw->free_pieces;
  sw->free_pieces = p;
}

/* Prepare one SQE for the remaining bytes of @p. */
static int piece_prep_uring(zo_swap_t *sw, zo_swap_piece_t *p) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&sw->ring);
  if (!sqe) { /* cannot happen with pieces <= SQ entries, but be safe */
    int ret = io_uring_submit(&sw->ring);
    if (ret > 0) sw->n_unsubmitted -= (unsigned)ret > sw->n_unsubmitted ? sw->n_unsubmitted : (unsigned)ret;
    sqe = io_uring_get_sqe(&sw->ring);
    if (!sqe) return -EBUSY;
  }
  zo_swap_req_t *r = p->req;
  unsigned len = (unsigned)(p->len - p->done);
  if (r->is_write)
    io_uring_prep_write(sqe, r->f->fd, p->buf + p->done, len, p->off + p->done);
  else
    io_uring_prep_read(sqe, r->f->fd, p->buf + p->done, len, p->off + p->done);
  io_uring_sqe_set_data(sqe, p);
  sw->n_unsubmitted++;
  return 0;
}

/* Run piece @p to the end with pread/pwrite (the fallback path). */
static void piece_run_sync(zo_swap_t *sw, zo_swap_piece_t *p) {
  zo_swap_req_t *r = p->req;
  for (;;) {
    size_t len = p->len - p->done;
    ssize_t n = r->is_write ? pwrite(r->f->fd, p->buf + p->done, len, (off_t)(p->off + p->done))
                            : pread(r->f->fd, p->buf + p->done, len, (off_t)(p->off + p->done));
    int res = n < 0 ? -errno : (int)n;
    if (!piece_complete(sw, p, res)) break;
  }
}

static int ring_submit(zo_swap_t *sw) {
  if (!sw->use_uring || !sw->n_unsubmitted) return 0;
  int ret = io_uring_submit(&sw->ring);
  if (ret >= 0) {
    sw->n_unsubmitted = 0; /* liburing flushed every SQE into the ring */
    return 0;
  }
  if (ret == -EAGAIN || ret == -EBUSY || ret == -EINTR) return 0; /* stays queued; retried on wait */
  return ret;
}

/* Start as many pieces of pending requests as free slots allow, FIFO. */
static int pump(zo_swap_t *sw) {
  while (sw->free_pieces && sw->pend_head) {
    zo_swap_req_t *r = sw->pend_head;
    zo_swap_piece_t *p = sw->free_pieces;
    sw->free_pieces = p->next_free;
    size_t len = r->nbytes - r->carved;
    if (len > sw->block_size) len = sw->block_size;
    p->req = r;
    p->off = r->off + r->carved;
    p->buf = r->buf + r->carved;
    p->len = len;
    p->done = 0;
    p->retries = 0;
    r->carved += len;
    r->n_inflight++;
    if (r->carved == r->nbytes) pend_remove(sw, r);
    if (sw->use_uring) {
      int ret = piece_prep_uring(sw, p);
      if (ret < 0) {
        req_fail(sw, r, ret, p->off, p->len);
        piece_release(sw, p);
        return ret;
      }
      sw->n_inflight++;
    } else {
      piece_run_sync(sw, p);
      piece_release(sw, p);
    }
  }
  return ring_submit(sw);
}

/* Reap every available CQE; with @wait, block for at least one first. */
static int reap(zo_swap_t *sw, int wait) {
  if (!sw->use_uring) return 0;
  if (wait) {
    int ret = io_uring_submit_and_wait(&sw->ring, 1);
    if (ret >= 0) {
      sw->n_unsubmitted = 0;
    } else if (ret == -EAGAIN || ret == -EBUSY || ret == -EINTR) {
      struct io_uring_cqe *cqe;
      ret = io_uring_wait_cqe(&sw->ring, &cqe);
      if (ret < 0 && ret != -EINTR && ret != -EAGAIN) return ret;
    } else {
      return ret;
    }
  }
  unsigned head, n = 0;
  struct io_uring_cqe *cqe;
  io_uring_for_each_cqe(&sw->ring, head, cqe) {
    zo_swap_piece_t *p = io_uring_cqe_get_data(cqe);
    n++;
    sw->n_inflight--;
    if (piece_complete(sw, p, cqe->res)) {
      int ret = piece_prep_uring(sw, p);
      if (ret == 0) {
        sw->n_inflight++;
        continue;
      }
      req_fail(sw, p->req, ret, p->off + p->done, p->len - p->done);
    }
    piece_release(sw, p);
  }
  io_uring_cq_advance(&sw->ring, n);
  return 0;
}

/* ---- public edge: -errno becomes zo_status here ------------------------------------------ */

static zo_status sys_status(int err) {
  return err == ENOMEM ? ZO_ERR_OUT_OF_MEMORY : ZO_ERR_SYSTEM;
}

zo_status zo_swap_create(const char *nvme_path, const zo_swap_opts *opts, zo_swap_t **out) {
  if (out) *out = NULL;
  if (!nvme_path || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: zo_swap_create: %s is NULL", !out ? "out" : "nvme_path");
  if (!nvme_path[0]) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path is empty");
  size_t block = opts && opts->block_size ? opts->block_size : SWAP_DEFAULT_BLOCK;
  unsigned qd = opts && opts->queue_depth ? opts->queue_depth : SWAP_DEFAULT_QD;
  if (block > SWAP_MAX_BLOCK)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: block_size %zu bytes exceeds the maximum %zu", block, SWAP_MAX_BLOCK);
  if (qd > SWAP_MAX_QD)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: queue_depth %u exceeds the maximum %u", qd, SWAP_MAX_QD);

  struct stat st;
  if (stat(nvme_path, &st) != 0) {
    int e = errno;
    return zo_error_set(e == ENOENT || e == ENOTDIR || e == ENAMETOOLONG || e == ELOOP ? ZO_ERR_INVALID_ARG : ZO_ERR_SYSTEM,
                        "swap: nvme_path '%s': %s", nvme_path, strerror(e));
  }
  if (!S_ISDIR(st.st_mode))
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path '%s': %s", nvme_path, strerror(ENOTDIR));

  zo_swap_t *sw = calloc(1, sizeof *sw);
  if (!sw) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for the handle");
  sw->dirfd = -1;
  size_t plen = strlen(nvme_path);
  while (plen > 1 && nvme_path[plen - 1] == '/') plen--;
  int n = snprintf(sw->dir, sizeof sw->dir, "%.*s/zoffload-%ld-XXXXXX", (int)plen, nvme_path, (long)getpid());
  if (n < 0 || (size_t)n + 256 >= sizeof sw->dir) {
    free(sw);
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path '%s': %s", nvme_path, strerror(ENAMETOOLONG));
  }
  if (!mkdtemp(sw->dir)) {
    int e = errno;
    free(sw);
    return zo_error_set(e == ENOMEM ? ZO_ERR_OUT_OF_MEMORY : ZO_ERR_SYSTEM, "swap: nvme_path '%s': %s", nvme_path, strerror(e));
  }
  zo_status st_ret = ZO_OK;
  sw->dirfd = open(sw->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (sw->dirfd < 0) {
    int e = errno;
    st_ret = zo_error_set(sys_status(e), "swap: open '%s': %s", sw->dir, strerror(e));
    goto err;
  }
  sw->align = probe_alignment(sw);
  sw->block_size = round_up(block, sw->align);
  if (sw->block_size > SWAP_MAX_BLOCK) sw->block_size = SWAP_MAX_BLOCK;
  sw->qd = qd;
  sw->direct = 1;
  sw->pieces = calloc(qd, sizeof *sw->pieces);
  if (!sw->pieces) {
    st_ret = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for %u piece descriptors", qd);
    goto err;
  }
  for (unsigned i = 0; i < qd; i++) sw->pieces[i].next_free = i + 1 < qd ? &sw->pieces[i + 1] : NULL;
  sw->free_pieces = &sw->pieces[0];

  const char *force = getenv("ZO_SWAP_FORCE_PREAD");
  if (force && force[0] && strcmp(force, "0") != 0) {
    zo_info("swap: ZO_SWAP_FORCE_PREAD set, using synchronous pread/pwrite");
  } else {
    int ret = io_uring_queue_init(qd, &sw->ring, 0);
    if (ret == 0) {
      sw->use_uring = 1;
    } else {
      zo_warn_once("swap: io_uring_queue_init(%u) failed: %s; falling back to synchronous pread/pwrite", qd,
                   strerror(-ret));
    }
  }
  *out = sw;
  return ZO_OK;
err:
  if (sw->dirfd >= 0) close(sw->dirfd);
  rmdir(sw->dir);
  free(sw->pieces);
  free(sw);
  return st_ret;
}

void zo_swap_destroy(zo_swap_t *sw) {
  if (!sw) return;
  if (sw->use_uring) {
    if (sw->n_inflight) zo_warn("swap: destroy with %u pieces in flight; reaping them, results dropped", sw->n_inflight);
    while (sw->pend_head) pend_remove(sw, sw->pend_head); /* start nothing new */
    while (sw->n_inflight)
      if (reap(sw, 1) < 0) break;
  }
  unsigned n_live = 0;
  while (sw->live) {
    zo_swap_req_t *r = sw->live;
    sw->live = r->live_next;
    free(r);
    n_live++;
  }
  if (n_live) zo_warn("swap: destroy freed %u requests that were never waited", n_live);
  while (sw->files) {
    zo_swap_file_t *f = sw->files;
    sw->files = f->next;
    close(f->fd);
    if (unlinkat(sw->dirfd, f->name, 0) != 0) zo_warn("swap: unlink '%s': %s", f->path, strerror(errno));
    free(f);
  }
  if (sw->use_uring) io_uring_queue_exit(&sw->ring);
  if (sw->dirfd >= 0) close(sw->dirfd);
  if (rmdir(sw->dir) != 0) zo_warn("swap: rmdir '%s': %s", sw->dir, strerror(errno));
  free(sw->pieces);
  free(sw);
}

size_t zo_swap_alignment(const zo_swap_t *sw) { return sw ? sw->align : 4096; }
size_t zo_swap_block_size(const zo_swap_t *sw) { return sw ? sw->block_size : 0; }
unsigned zo_swap_queue_depth(const zo_swap_t *sw) { return sw ? sw->qd : 0; }
int zo_swap_is_direct(const zo_swap_t *sw) { return sw ? sw->direct : 0; }
int zo_swap_uses_io_uring(const zo_swap_t *sw) { return sw ? sw->use_uring : 0; }
const char *zo_swap_dir(const zo_swap_t *sw) { return sw ? sw->dir : ""; }
uint64_t zo_swap_file_size(const zo_swap_file_t *f) { return f ? f->size : 0; }
const char *zo_swap_file_path(const zo_swap_file_t *f) { return f ? f->path : ""; }

zo_status zo_swap_file_create(zo_swap_t *sw, const char *name, uint64_t nbytes, zo_swap_file_t **out) {
  if (out) *out = NULL;
  if (!sw || !name || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: zo_swap_file_create: %s is NULL", !sw ? "sw" : !name ? "name" : "out");
  size_t nl = strlen(name);
  if (!nl || nl >= 200 || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: bad swap file name '%s' (need 1..199 bytes, no '/', not . or ..)", name);
  if (nbytes > (uint64_t)INT64_MAX)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: file '%s': size %" PRIu64 " bytes too large", name, nbytes);

  zo_swap_file_t *f = calloc(1, sizeof *f);
  if (!f) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for file '%s'", name);
  f->sw = sw;
  f->size = nbytes;
  snprintf(f->path, sizeof f->path, "%s/%.199s", sw->dir, name);
  f->name = f->path + strlen(sw->dir) + 1;
  const int flags = O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC;
  zo_status st = ZO_OK;
  f->direct = 1;
  if (sw->refuse_direct) {
    f->fd = -1;
    errno = EINVAL;
  } else {
    f->fd = openat(sw->dirfd, name, flags | O_DIRECT, 0600);
  }
  if (f->fd < 0 && errno == EINVAL) {
    /* Some file systems create the file and then refuse O_DIRECT: start over buffered. */
    unlinkat(sw->dirfd, name, 0);
    f->direct = 0;
    f->fd = openat(sw->dirfd, name, flags, 0600);
    if (f->fd >= 0) {
      sw->direct = 0;
      zo_warn_once("O_DIRECT refused on %s, using buffered I/O", sw->dir);
    }
  }
  if (f->fd < 0) {
    int e = errno;
    st = zo_error_set(e == EEXIST ? ZO_ERR_INVALID_ARG : e == ENOSPC || e == EDQUOT ? ZO_ERR_IO : sys_status(e),
                      "swap: create '%s': %s", f->path, strerror(e));
    free(f);
    return st;
  }
  if (nbytes) {
    int rc = fallocate(f->fd, 0, 0, (off_t)nbytes);
    int e = rc ? errno : 0;
    if (rc && (e == EOPNOTSUPP || e == ENOSYS)) {
      rc = ftruncate(f->fd, (off_t)nbytes);
      e = rc ? errno : 0;
    }
    if (rc) {
      st = zo_error_set(e == ENOSPC || e == EDQUOT || e == EFBIG ? ZO_ERR_IO : sys_status(e),
                        "swap: preallocate '%s' to %" PRIu64 " bytes: %s", f->path, nbytes, strerror(e));
      close(f->fd);
      unlinkat(sw->dirfd, name, 0);
      free(f);
      return st;
    }
  }
  f->next = sw->files;
  if (sw->files) sw->files->prev = f;
  sw->files = f;
  *out = f;
  return ZO_OK;
}

zo_status zo_swap_file_remove(zo_swap_t *sw, zo_swap_file_t *f) {
  if (!f) return ZO_OK;
  if (!sw || f->sw != sw) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: file '%s' does not belong to this swap", f->path);
  if (f->n_reqs)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "swap: remove '%s': %u requests not yet waited", f->path, f->n_reqs);
  if (f->prev)
    f->prev->next = f->next;
  else
    sw->files = f->next;
  if (f->next) f->next->prev = f->prev;
  close(f->fd);
  zo_status st = ZO_OK;
  if (unlinkat(sw->dirfd, f->name, 0) != 0) {
    int e = errno;
    st = zo_error_set(ZO_ERR_SYSTEM, "swap: unlink '%s': %s", f->path, strerror(e));
  }
  free(f);
  return st;
}

static zo_status submit(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf, size_t nbytes, int is_write,
                        zo_swap_req_t **out) {
  const char *op = is_write ? "write" : "read";
  if (out) *out = NULL;
  if (!sw || !f || !buf || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s: %s is NULL", op, !sw ? "sw" : !f ? "file" : !buf ? "buf" : "req");
  if (f->sw != sw) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s: file '%s' belongs to another swap", op, f->path);
  size_t a = sw->align;
  if ((uintptr_t)buf % a)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s '%s': buffer %p is not aligned to %zu bytes", op, f->path, buf, a);
  if (offset % a)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s '%s': offset %" PRIu64 " is not a multiple of %zu bytes", op,
                        f->path, offset, a);
  if (nbytes == 0 || nbytes % a)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: %s '%s': length %zu bytes is not a nonzero multiple of %zu bytes", op,
                        f->path, nbytes, a);
  if (offset > f->size || nbytes > f->size - offset)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: %s '%s': offset %" PRIu64 " + length %zu bytes is past the file size %" PRIu64, op,
                        f->path, offset, nbytes, f->size);
  zo_swap_req_t *r = calloc(1, sizeof *r);
  if (!r) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for a request");
  r->sw = sw;
  r->f = f;
  r->is_write = is_write;
  r->buf = buf;
  r->off = offset;
  r->nbytes = nbytes;
  r->live_next = sw->live;
  if (sw->live) sw->live->live_prev = r;
  sw->live = r;
  f->n_reqs++;
  pend_push(sw, r);
  /* A failing io_uring_submit leaves the SQEs in the ring; wait/poll retry and report it. */
  (void)pump(sw);
  *out = r;
  return ZO_OK;
}

zo_status zo_swap_submit_read(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf, size_t nbytes,
                              zo_swap_req_t **req) {
  return submit(sw, f, offset, buf, nbytes, 0, req);
}

zo_status zo_swap_submit_write(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, const void *buf, size_t nbytes,
                               zo_swap_req_t **req) {
  return submit(sw, f, offset, (void *)buf, nbytes, 1, req);
}

zo_status zo_swap_poll(zo_swap_t *sw, zo_swap_req_t *req, int *done) {
  if (done) *done = 0;
  if (!sw || !req || !done) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: poll: %s is NULL", !sw ? "sw" : !req ? "req" : "done");
  if (req->sw != sw) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: poll: request belongs to another swap");
  int ret = pump(sw);
  if (ret == 0) ret = reap(sw, 0);
  if (ret == 0) ret = pump(sw); /* reaping freed slots */
  if (ret < 0) return zo_error_set(ZO_ERR_SYSTEM, "swap: poll on '%s': io_uring: %s", sw->dir, strerror(-ret));
  *done = req_done(req);
  return ZO_OK;
}

zo_status zo_swap_wait(zo_swap_t *sw, zo_swap_req_t *req) {
  if (!sw || !req) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: wait: %s is NULL", !sw ? "sw" : "req");
  if (req->sw != sw) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: wait: request belongs to another swap");
  while (!req_done(req)) {
    int ret = pump(sw);
    if (ret == 0 && !req_done(req)) {
      if (sw->n_inflight == 0) ret = -EPROTO; /* nothing can complete it: a bug, never a hang */
      else ret = reap(sw, 1);
    }
    if (ret < 0) return zo_error_set(ZO_ERR_SYSTEM, "swap: wait on '%s': io_uring: %s", req->f->path, strerror(-ret));
  }
  zo_status st = ZO_OK;
  if (req->err == 1)
    st = zo_error_set(ZO_ERR_IO, "swap: read '%s' at offset %" PRIu64 ", length %zu bytes: unexpected end of file",
                      req->f->path, req->err_off, req->err_len);
  else if (req->err)
    st = zo_error_set(ZO_ERR_IO, "swap: %s '%s' at offset %" PRIu64 ", length %zu bytes: %s",
                      req->is_write ? "write" : "read", req->f->path, req->err_off, req->err_len, strerror(-req->err));
  pend_remove(sw, req);
  live_remove(sw, req);
  req->f->n_reqs--;
  free(req);
  return st;
}

zo_status zo_swap_read(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, void *buf, size_t nbytes) {
  zo_swap_req_t *r;
  ZO_CHECK(zo_swap_submit_read(sw, f, offset, buf, nbytes, &r));
  return zo_swap_wait(sw, r);
}

zo_status zo_swap_write(zo_swap_t *sw, zo_swap_file_t *f, uint64_t offset, const void *buf, size_t nbytes) {
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
