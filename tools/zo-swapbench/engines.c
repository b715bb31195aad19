/*
 * engines.c - zo-swapbench's first two engines: the zoffload swap handle (one per ring variant, kept for
 * the whole sweep) and the O_DIRECT pread/pwrite thread baseline. Not fio (fio.c), not the sweep (sweep.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "stats.h"
#include "swapbench.h"

/* ---- host buffers --------------------------------------------------------------------------------- */

static void *buf_alloc(size_t n, size_t align) {
  void *p = NULL;
  if (align < 4096) align = 4096;
  if (posix_memalign(&p, align, n)) return NULL;
  /* Touch every page now, so no page fault lands in a timed region; a pattern, not zeros. */
  uint64_t *w = p;
  for (size_t i = 0; i < n / 8; i++) w[i] = 0x9e3779b97f4a7c15ull * (i + 1);
  return p;
}

/* ---- engine 1: zoffload swap -------------------------------------------------------------------- */

void zo_bench_close(zo_bench *zb) {
  zo_swap_destroy(zb->sw); /* closes and unlinks the file, removes the private directory */
  if (zb->buf) zo_pinned_free(zb->pool, zb->buf);
  zo_pinned_pool_destroy(zb->pool);
  memset(zb, 0, sizeof *zb);
}

/*
 * One measurement: the first @bytes of the file in SB_REQ_BYTES requests, a window of them
 * outstanding (enough to keep queue_depth pieces busy twice over, as the engine sees many tensors in
 * flight), the next submitted as the oldest completes; no new request after @max_sec. Returns 0 with
 * the seconds taken and the bytes moved, or -1 with the error printed.
 */
int zo_transfer(zo_bench *zb, int is_write, uint64_t bytes, double max_sec, meas *m) {
  size_t nreq = (size_t)((bytes + SB_REQ_BYTES - 1) / SB_REQ_BYTES);
  uint64_t inflight = (uint64_t)zo_swap_block_size(zb->sw) * zo_swap_queue_depth(zb->sw);
  size_t window = (size_t)((2 * inflight + SB_REQ_BYTES - 1) / SB_REQ_BYTES);
  if (window < 2) window = 2;
  if (window > nreq) window = nreq;
  zo_swap_req_t **reqs = calloc(nreq, sizeof *reqs);
  size_t *lens = calloc(nreq, sizeof *lens);
  if (!reqs || !lens) {
    free(reqs);
    free(lens);
    return -1;
  }
  int rc = 0;
  zo_swap_latency_reset(zb->sw);
  size_t head = 0, tail = 0; /* requests [tail, head) outstanding */
  uint64_t done = 0;
  double t0 = zo_clock_s(), deadline = max_sec > 0 ? t0 + max_sec : 0;
  while (rc == 0 && (tail < head || head < nreq)) {
    while (rc == 0 && head < nreq && head - tail < window &&
           !(deadline && head > tail && zo_clock_s() > deadline)) {
      uint64_t off = (uint64_t)head * SB_REQ_BYTES;
      size_t len = bytes - off < SB_REQ_BYTES ? (size_t)(bytes - off) : (size_t)SB_REQ_BYTES;
      char *b = zb->buf + (size_t)(off % zb->buf_bytes);
      if (b + len > zb->buf + zb->buf_bytes)
        b = zb->buf; /* buf_bytes is a multiple of SB_REQ_BYTES or >= bytes */
      zo_status st = is_write ? zo_swap_submit_write(zb->sw, zb->f, off, b, len, &reqs[head])
                              : zo_swap_submit_read(zb->sw, zb->f, off, b, len, &reqs[head]);
      if (st != ZO_OK) {
        fprintf(stderr, "\nzo-swapbench: submit: %s: %s\n", zo_status_string(st), zo_last_error());
        rc = -1;
        break;
      }
      lens[head++] = len;
    }
    if (deadline && zo_clock_s() > deadline) nreq = head; /* time is up: finish what is in flight */
    if (tail < head) {
      zo_status st = zo_swap_wait(zb->sw, reqs[tail]);
      if (st != ZO_OK && rc == 0) {
        fprintf(stderr, "\nzo-swapbench: %s: %s: %s\n", op_name[is_write], zo_status_string(st),
                zo_last_error());
        rc = -1;
      }
      done += lens[tail++];
    }
  }
  while (tail < head) zo_swap_wait(zb->sw, reqs[tail++]); /* after an error: collect the rest */
  m->sec = zo_clock_s() - t0;
  m->moved = done;
  m->gbps = m->sec > 0 ? (double)done / m->sec / 1e9 : 0;
  zo_swap_latency_t lat;
  if (zo_swap_latency(zb->sw, is_write, &lat) == ZO_OK && lat.n) {
    m->iops = m->sec > 0 ? (double)lat.n / m->sec : -1;
    m->p50_us = lat.p50_us;
    m->p99_us = lat.p99_us;
    m->p999_us = lat.p999_us;
  }
  free(reqs);
  free(lens);
  /* Let an SQPOLL thread go to sleep before anything else is timed (see SB_SQPOLL_IDLE_MS). */
  if (zb->sqpoll) usleep(2 * SB_SQPOLL_IDLE_MS * 1000);
  return rc;
}

/* One handle per ring variant for the whole sweep: created at the largest queue depth (the ring's
 * size), switched between block sizes and queue depths with zo_swap_set_queue(), one preallocated file
 * written once untimed. The host buffer comes from the pinned pool (mlocked, pre-touched). */
int zo_bench_open(zo_bench *zb, const opts *o, const bench_target *t, unsigned qd_max, variant v,
                  int rank) {
  memset(zb, 0, sizeof *zb);
  zo_swap_opts so;
  memset(&so, 0, sizeof so);
  so.block_size = (size_t)o->bs[0];
  so.queue_depth = qd_max;
  so.rank = rank;
  so.latency_stats = 1;
  so.stripe_size = (size_t)o->stripe;
#if SB_HAVE_SQPOLL
  so.sqpoll = v.sqpoll > 0;
  so.sqpoll_idle_ms = SB_SQPOLL_IDLE_MS;
#endif
#if SB_HAVE_REGBUF
  so.register_files = v.regbuf > 0; /* the "registered" variant registers the file and the buffer */
#endif
  zo_status st = zo_swap_create_striped(t->paths, (unsigned)t->n_paths, &so, &zb->sw);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-swapbench: %s: %s\n", zo_status_string(st), zo_last_error());
    return -1;
  }
  zb->sqpoll = zo_swap_uses_sqpoll(zb->sw);
  st = zo_swap_file_create(zb->sw, "swapbench.dat", o->size, &zb->f);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-swapbench: %s: %s\n", zo_status_string(st), zo_last_error());
    zo_bench_close(zb);
    return -1;
  }
  zb->buf_bytes = o->size < SB_BUF_BYTES ? (size_t)o->size : (size_t)SB_BUF_BYTES;
  zo_pinned_opts po = ZO_PINNED_OPTS_INIT;
  po.decay_ms = 0;
  st = zo_pinned_pool_create(&po, &zb->pool);
  if (st == ZO_OK)
    st = zo_pinned_alloc(zb->pool, zb->buf_bytes, zo_swap_alignment(zb->sw), 0, (void **)&zb->buf);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-swapbench: pinned buffer of %zu bytes: %s: %s\n", zb->buf_bytes,
            zo_status_string(st), zo_last_error());
    zo_bench_close(zb);
    return -1;
  }
  /* Touch every page now (mlock already faulted them in when it was granted), with a pattern. */
  uint64_t *w = (uint64_t *)zb->buf;
  for (size_t i = 0; i < zb->buf_bytes / 8; i++) w[i] = 0x9e3779b97f4a7c15ull * (i + 1);
#if SB_HAVE_REGBUF
  if (v.regbuf > 0) {
    struct iovec iov = {zb->buf, zb->buf_bytes};
    st = zo_swap_register_buffers(zb->sw, &iov, 1);
    /* e.g. RLIMIT_MEMLOCK too low: measure unregistered, reported as regbuf off */
    if (st != ZO_OK) {
      static int warned;
      if (!warned++)
        fprintf(stderr, "zo-swapbench: register buffers: %s: %s; measuring without\n",
                zo_status_string(st), zo_last_error());
    }
  }
#else
  (void)v;
#endif
  /* Write the whole file once, untimed, so reads hit written extents (an unwritten extent reads as
   * zeros without touching the disk) and timed writes overwrite allocated, written blocks. */
  meas fill;
  if (zo_swap_set_queue(zb->sw, 4 * MiB, qd_max < 8 ? qd_max : 8) != ZO_OK ||
      zo_transfer(zb, 1, o->size, 0, &fill) != 0) {
    zo_bench_close(zb);
    return -1;
  }
  return 0;
}

/* ---- engine 2: O_DIRECT pread/pwrite threads -------------------------------------------------------- */

/* Baseline: queue_depth threads (one thread at QD 1), each with its own block_size buffer, issuing
 * blocking pread/pwrite of block_size bytes. Thread t owns blocks t, t+Q, t+2Q, ... of the file
 * (disjoint interleaved stripes), so at any moment about Q sequential-neighbour blocks are in flight,
 * as with the ring. Short transfers are continued; errors stop that thread. */
typedef struct pr_shared {
  int fd, is_write;
  uint64_t size, bs; /* size: bytes to move at most, from offset 0 */
  double deadline;   /* no new block after this (zo_clock_s() clock); 0: none */
  uint64_t moved;    /* bytes moved, summed under mu */
  double *lat;       /* [size / bs + 1] seconds of each block's call(s), by block; < 0 not moved */
  unsigned nthreads;
  pthread_barrier_t start;
  int err;
  uint64_t err_off;
  pthread_mutex_t mu;
} pr_shared;

typedef struct pr_thread {
  pr_shared *sh;
  unsigned idx;
  char *buf;
  pthread_t tid;
} pr_thread;

static void *pr_main(void *arg) {
  pr_thread *t = arg;
  pr_shared *sh = t->sh;
  pthread_barrier_wait(&sh->start);
  uint64_t moved = 0;
  for (uint64_t blk = t->idx; blk * sh->bs < sh->size; blk += sh->nthreads) {
    if (sh->deadline && moved && zo_clock_s() > sh->deadline) break;
    uint64_t off = blk * sh->bs;
    size_t len = sh->size - off < sh->bs ? (size_t)(sh->size - off) : (size_t)sh->bs;
    size_t done = 0;
    double t0 = zo_clock_s();
    while (done < len) {
      ssize_t n = sh->is_write ? pwrite(sh->fd, t->buf + done, len - done, (off_t)(off + done))
                               : pread(sh->fd, t->buf + done, len - done, (off_t)(off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        pthread_mutex_lock(&sh->mu);
        if (!sh->err) {
          sh->err = n < 0 ? errno : EIO;
          sh->err_off = off + done;
        }
        pthread_mutex_unlock(&sh->mu);
        return NULL;
      }
      done += (size_t)n;
    }
    sh->lat[blk] = zo_clock_s() - t0; /* blocks are disjoint between threads */
    moved += len;
  }
  pthread_mutex_lock(&sh->mu);
  sh->moved += moved;
  pthread_mutex_unlock(&sh->mu);
  return NULL;
}

/* The @q quantile (0..1) of @v[n], sorted ascending (nearest rank); -1 when n is 0. */
static double sb_quantile(const double *v, size_t n, double q) {
  if (!n) return -1;
  size_t k = (size_t)(q * (double)n + 0.999999);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return v[k - 1];
}

/* IOPS and latency percentiles of the blocks moved (lat < 0: not moved). */
static void pread_stats(double *lat, uint64_t nblk, double sec, meas *m) {
  size_t n = 0;
  for (uint64_t i = 0; i < nblk; i++)
    if (lat[i] >= 0) lat[n++] = lat[i] * 1e6;
  m->iops = sec > 0 ? (double)n / sec : -1;
  qsort(lat, n, sizeof *lat, zo_tool_cmp_double); /* once, for the three quantiles */
  m->p50_us = sb_quantile(lat, n, 0.50);
  m->p99_us = sb_quantile(lat, n, 0.99);
  m->p999_us = sb_quantile(lat, n, 0.999);
}

int pread_transfer(const char *path, int direct, int is_write, uint64_t size, double max_sec,
                   uint64_t bs, unsigned qd, meas *m, char *note, size_t note_n) {
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    snprintf(note, note_n, "open '%s': %s", path, strerror(errno));
    return -1;
  }
  pr_shared sh;
  memset(&sh, 0, sizeof sh);
  sh.fd = fd;
  sh.is_write = is_write;
  sh.size = size;
  sh.bs = bs;
  sh.nthreads = qd;
  const uint64_t nblk = (size + bs - 1) / bs;
  sh.lat = malloc((size_t)nblk * sizeof *sh.lat);
  for (uint64_t i = 0; sh.lat && i < nblk; i++) sh.lat[i] = -1;
  pthread_mutex_init(&sh.mu, NULL);
  pthread_barrier_init(&sh.start, NULL, qd + 1);
  pr_thread *th = calloc(qd, sizeof *th);
  int rc = 0;
  unsigned started = 0;
  if (!th || !sh.lat) {
    snprintf(note, note_n, "out of memory");
    rc = -1;
  }
  for (unsigned i = 0; th && i < qd; i++) {
    th[i].sh = &sh;
    th[i].idx = i;
    th[i].buf = buf_alloc((size_t)bs, 4096);
    if (!th[i].buf) {
      snprintf(note, note_n, "out of memory for %u buffers of %" PRIu64 " bytes", qd, bs);
      rc = -1;
      break;
    }
  }
  if (rc == 0) {
    for (; started < qd; started++) {
      int e = pthread_create(&th[started].tid, NULL, pr_main, &th[started]);
      if (e) {
        snprintf(note, note_n, "pthread_create: %s", strerror(e));
        rc = -1;
        break;
      }
    }
  }
  if (rc == 0) {
    double t0 = zo_clock_s();
    if (max_sec > 0) sh.deadline = t0 + max_sec; /* read by the threads after the barrier */
    pthread_barrier_wait(&sh.start);
    for (unsigned i = 0; i < qd; i++) pthread_join(th[i].tid, NULL);
    m->sec = zo_clock_s() - t0;
    m->moved = sh.moved;
    m->gbps = m->sec > 0 ? (double)sh.moved / m->sec / 1e9 : 0;
    pread_stats(sh.lat, nblk, m->sec, m);
    if (sh.err) {
      snprintf(note, note_n, "%s '%s' at offset %" PRIu64 ": %s", is_write ? "pwrite" : "pread",
               path, sh.err_off, strerror(sh.err));
      rc = -1;
    }
  } else if (started) {
    /* Threads already waiting on the barrier cannot be released without the missing ones; cancel them. */
    for (unsigned i = 0; i < started; i++) pthread_cancel(th[i].tid);
    for (unsigned i = 0; i < started; i++) pthread_join(th[i].tid, NULL);
  }
  if (th)
    for (unsigned i = 0; i < qd; i++) free(th[i].buf);
  free(th);
  free(sh.lat);
  pthread_barrier_destroy(&sh.start);
  pthread_mutex_destroy(&sh.mu);
  close(fd);
  return rc;
}
