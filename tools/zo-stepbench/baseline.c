/*
 * baseline.c - zo-stepbench's disk baseline: what a plain io_uring O_DIRECT
 * loop (fio-style, same block size and queue depth) reaches on the swap path.
 * Not the engine's swapping; main.c compares the two.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stepbench.h"
#include "zoffload/status.h"

/*
 * One pass over [0, size) of @fd with @qd requests of @bs bytes in flight
 * (io_uring, O_DIRECT). Returns seconds, or a negative value on error (message printed).
 */
static double uring_pass(struct io_uring *ring, int fd, int is_write, uint64_t size, size_t bs,
                         unsigned qd, char **bufs) {
  uint64_t next = 0, done = 0;
  unsigned inflight = 0;
  int *slot_free = calloc(qd, sizeof *slot_free);
  if (!slot_free) return -1;
  for (unsigned i = 0; i < qd; i++) slot_free[i] = 1;
  double t0 = zo_clock_s();
  while (done < size) {
    while (inflight < qd && next < size) {
      unsigned k = 0;
      while (!slot_free[k]) k++;
      size_t len = size - next < bs ? (size_t)(size - next) : bs;
      struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
      if (!sqe) break;
      if (is_write)
        io_uring_prep_write(sqe, fd, bufs[k], (unsigned)len, next);
      else
        io_uring_prep_read(sqe, fd, bufs[k], (unsigned)len, next);
      io_uring_sqe_set_data64(sqe, ((uint64_t)k << 48) | (uint64_t)len);
      slot_free[k] = 0;
      next += len;
      inflight++;
    }
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0) {
      fprintf(stderr, "zo-stepbench: baseline: io_uring_submit: %s\n", strerror(-rc));
      free(slot_free);
      return -1;
    }
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      uint64_t d = io_uring_cqe_get_data64(cqe);
      size_t want = (size_t)(d & ((1ull << 48) - 1));
      if (cqe->res != (int)want) {
        fprintf(stderr, "zo-stepbench: baseline: %s of %zu bytes returned %d (%s)\n",
                is_write ? "write" : "read", want, cqe->res,
                cqe->res < 0 ? strerror(-cqe->res) : "short");
        free(slot_free);
        return -1;
      }
      slot_free[d >> 48] = 1;
      done += want;
      inflight--;
      n++;
    }
    io_uring_cq_advance(ring, n);
  }
  double t = zo_clock_s() - t0;
  free(slot_free);
  return t;
}


/* Write @size bytes once (untimed, makes real extents), then time a read pass and a write pass. */
int run_baseline(const char *dir, uint64_t size, size_t bs, unsigned qd, baseline *b) {
  memset(b, 0, sizeof *b);
  size = (size + 4095) / 4096 * 4096;
  b->bytes = size;
  char path[4200];
  snprintf(path, sizeof path, "%s/zo-stepbench-baseline.%d", dir, (int)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
  if (fd < 0) {
    fprintf(stderr, "zo-stepbench: baseline: cannot open '%s' with O_DIRECT: %s\n", path,
            strerror(errno));
    return -1;
  }
  unlink(path); /* gone when closed, whatever happens */
  int rc = -1;
  char **bufs = calloc(qd, sizeof *bufs);
  struct io_uring ring;
  int have_ring = 0;
  if (!bufs) goto out;
  for (unsigned i = 0; i < qd; i++) {
    if (posix_memalign((void **)&bufs[i], 4096, bs)) goto out;
    memset(bufs[i], (int)(0x5a + i), bs);
  }
  if (posix_fallocate(fd, 0, (off_t)size) != 0) {
    fprintf(stderr, "zo-stepbench: baseline: cannot preallocate %" PRIu64 " bytes in '%s'\n", size,
            dir);
    goto out;
  }
  int e = io_uring_queue_init(qd < 4096 ? qd * 2 : 8192, &ring, 0);
  if (e < 0) {
    fprintf(stderr, "zo-stepbench: baseline: io_uring_queue_init: %s\n", strerror(-e));
    goto out;
  }
  have_ring = 1;
  if (uring_pass(&ring, fd, 1, size, bs, qd, bufs) < 0) goto out;
  b->read_s = uring_pass(&ring, fd, 0, size, bs, qd, bufs);
  if (b->read_s < 0) goto out;
  b->write_s = uring_pass(&ring, fd, 1, size, bs, qd, bufs);
  if (b->write_s < 0) goto out;
  fdatasync(fd);
  b->read_gbps = (double)size / b->read_s / 1e9;
  b->write_gbps = (double)size / b->write_s / 1e9;
  b->gbps = 2.0 * (double)size / (b->read_s + b->write_s) / 1e9;
  b->ok = 1;
  rc = 0;
out:
  if (have_ring) io_uring_queue_exit(&ring);
  if (bufs)
    for (unsigned i = 0; i < qd; i++) free(bufs[i]);
  free(bufs);
  close(fd);
  return rc;
}
