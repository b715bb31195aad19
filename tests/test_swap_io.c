/*
 * test_swap_io.c - swap engine data paths: round trips of many sizes, offsets
 * and queue depths with registered buffers, registered files and SQPOLL each
 * on and off, and on the pread/pwrite thread pool; many requests in flight
 * across files; injected faults on fixed buffers; the extent allocator.
 * Usage: test_swap_io [DIR]; swap dirs go under DIR (default $TMPDIR, else /tmp).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "swap_internal.h"
#include "zo_test.h"
#include "zoffload/swap.h"

#define CHECK_MSG(sub) CHECK_HAS(zo_last_error(), sub)

static uint64_t g_rng = 0x5EEDu;

static void fill_random(unsigned char *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = zo_test_rand64(&g_rng);
    memcpy(p + i, &v, 8);
  }
  for (; i < n; i++) p[i] = (unsigned char)zo_test_rand64(&g_rng);
}

static void *xalloc(size_t align, size_t n) {
  void *p = aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) {
    fprintf(stderr, "out of memory for %zu bytes\n", n);
    exit(1);
  }
  return p;
}

enum { F_FIXED_BUF = 1, F_FIXED_FILE = 2, F_SQPOLL = 4, F_POOL = 8, F_THREAD = 16 };

static zo_swap_t *open_swap(const char *root, size_t block, unsigned qd, int flags, int rank) {
  if (flags & F_POOL)
    setenv("ZO_SWAP_FORCE_PREAD", "1", 1);
  else
    unsetenv("ZO_SWAP_FORCE_PREAD");
  zo_swap_opts o = {.block_size = block,
                    .queue_depth = qd,
                    .rank = rank,
                    .register_files = !!(flags & F_FIXED_FILE),
                    .sqpoll = !!(flags & F_SQPOLL),
                    .sqpoll_idle_ms = 50,
                    .progress_thread = !!(flags & F_THREAD)};
  zo_swap_t *sw = NULL;
  CHECK_OK(zo_swap_create(root, &o, &sw));
  unsetenv("ZO_SWAP_FORCE_PREAD");
  if (sw) CHECK_EQ(zo_swap_uses_io_uring(sw), !(flags & F_POOL));
  return sw;
}

/*
 * One configuration: two files, a pinned-style arena (registered when asked),
 * random-size aligned transfers at random offsets, all submitted before any
 * wait so many are in flight across both files, then read back and compared.
 */
static void roundtrip(const char *root, size_t block, unsigned qd, int flags) {
  zo_swap_t *sw = open_swap(root, block, qd, flags, 0);
  if (!sw) return;
  if ((flags & F_SQPOLL) && !zo_swap_uses_sqpoll(sw))
    printf("note: SQPOLL refused by the kernel; case run without it\n");
  if ((flags & F_FIXED_FILE) && !zo_swap_uses_fixed_files(sw))
    printf("note: registered files refused by the kernel; case run without them\n");
  const size_t a = zo_swap_alignment(sw);
  const size_t file_bytes = 3u << 20;
  zo_swap_file_t *f[2] = {NULL, NULL};
  CHECK_OK(zo_swap_file_create(sw, "exp_avg.swp", file_bytes, &f[0]));
  CHECK_OK(zo_swap_file_create(sw, "exp_avg_sq.swp", file_bytes, &f[1]));
  if (!f[0] || !f[1]) {
    zo_swap_destroy(sw);
    return;
  }
  if (flags & F_FIXED_FILE) CHECK_EQ(zo_swap_uses_fixed_files(sw), 1);
  /* Arena: src (what we write) and dst (what we read) halves, both registered when asked. */
  unsigned char *src = xalloc(a, 2 * file_bytes), *dst = xalloc(a, 2 * file_bytes);
  fill_random(src, 2 * file_bytes);
  memset(dst, 0xEE, 2 * file_bytes);
  if (flags & F_FIXED_BUF) {
    struct iovec iov[2] = {{src, 2 * file_bytes}, {dst, 2 * file_bytes}};
    zo_status st = zo_swap_register_buffers(sw, iov, 2);
    if (st == ZO_ERR_OUT_OF_MEMORY) {
      printf("note: cannot register buffers (%s); case run unregistered\n", zo_last_error());
    } else {
      CHECK_OK(st);
      CHECK_EQ(zo_swap_n_registered_buffers(sw), (flags & F_POOL) ? 0 : 2);
    }
  }
  /* Cut each file into random extents [off, off+len) covering it exactly, in shuffled order. */
  enum { MAXR = 64 };
  struct {
    int fi;
    uint64_t off;
    size_t len;
  } rq[2 * MAXR];
  int n = 0;
  for (int fi = 0; fi < 2; fi++) {
    uint64_t off = 0;
    while (off < file_bytes && n < (fi + 1) * MAXR) {
      size_t units =
          1 + zo_test_rand64(&g_rng) % (3 * block / a + 2); /* up to ~3 blocks: many pieces */
      size_t len = units * a;
      if (len > file_bytes - off) len = file_bytes - off;
      rq[n].fi = fi;
      rq[n].off = off;
      rq[n].len = len;
      n++;
      off += len;
    }
    if (off < file_bytes) { /* extend the last one to the end */
      rq[n - 1].len += file_bytes - off;
    }
  }
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(zo_test_rand64(&g_rng) % (uint64_t)(i + 1));
    __typeof__(rq[0]) t = rq[i];
    rq[i] = rq[j];
    rq[j] = t;
  }
  zo_swap_req_t *h[2 * MAXR];
  for (int i = 0; i < n; i++)
    CHECK_OK(zo_swap_submit_write(sw, f[rq[i].fi], rq[i].off,
                                  src + rq[i].fi * file_bytes + rq[i].off, rq[i].len, &h[i]));
  /* Poll the last one until done, then wait all in submission order. */
  int done = 0;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (double el = 0; !done && el < 20.0;) {
    if (!CHECK_OK(zo_swap_poll(sw, h[n - 1], &done))) break;
    clock_gettime(CLOCK_MONOTONIC, &t);
    el = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
  }
  CHECK_EQ(done, 1); /* polling alone drives every request to completion */
  for (int i = 0; i < n; i++) CHECK_OK(zo_swap_wait(sw, h[i]));
  for (int i = 0; i < n; i++)
    CHECK_OK(zo_swap_submit_read(sw, f[rq[i].fi], rq[i].off,
                                 dst + rq[i].fi * file_bytes + rq[i].off, rq[i].len, &h[i]));
  for (int i = n - 1; i >= 0; i--) CHECK_OK(zo_swap_wait(sw, h[i]));
  char what[160];
  snprintf(
      what, sizeof what,
      "roundtrip block %zu qd %u fixedbuf %d fixedfile %d sqpoll %d pool %d thread %d (%d requests)",
      block, qd, !!(flags & F_FIXED_BUF), !!(flags & F_FIXED_FILE), !!(flags & F_SQPOLL),
      !!(flags & F_POOL), !!(flags & F_THREAD), n);
  CHECK_BYTES(what, dst, src, 2 * file_bytes);
  /* Unaligned-to-registration: a buffer outside the arena still works (unregistered path). */
  unsigned char *other = xalloc(a, 3 * a);
  CHECK_OK(zo_swap_read(sw, f[1], a, other, 3 * a));
  CHECK_BYTES("read into an unregistered buffer", other, src + file_bytes + a, 3 * a);
  free(other);
  printf("ok: %s  [%s]\n", what, zo_swap_describe(sw));
  zo_swap_destroy(sw);
  free(src);
  free(dst);
}

/* Injected faults with fixed buffers and files: -EIO names the offset; a short count is resumed. */
static void faults(const char *root, int flags) {
  const size_t B = 64 * 1024;
  zo_swap_t *sw = open_swap(root, B, 1, flags, 0); /* qd 1: completions in order */
  if (!sw) return;
  const size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "master.swp", 8 * B, &f));
  unsigned char *src = xalloc(a, 8 * B), *dst = xalloc(a, 8 * B);
  fill_random(src, 8 * B);
  struct iovec iov[2] = {{src, 8 * B}, {dst, 8 * B}};
  if (f && zo_swap_register_buffers(sw, iov, 2) == ZO_OK) {
    /* the 3rd piece of a write fails with EIO: offset 2*B named */
    zo_swap_test_inject(sw, 3, -EIO);
    CHECK_ST(zo_swap_write(sw, f, 0, src, 8 * B), ZO_ERR_IO);
    char want[64];
    snprintf(want, sizeof want, "offset %zu, length %zu", 2 * B, B);
    CHECK_MSG(want);
    CHECK_MSG("Input/output error");
    CHECK_MSG("master.swp");
    /* ENOSPC from the disk mid-read */
    CHECK_OK(zo_swap_write(sw, f, 0, src, 8 * B));
    zo_swap_test_inject(sw, 5, -ENOSPC);
    CHECK_ST(zo_swap_read(sw, f, 0, dst, 8 * B), ZO_ERR_IO);
    CHECK_MSG("No space left on device");
    /* a short count on a read is resumed and the data is intact */
    unsigned long before = zo_swap_test_completions(sw);
    zo_swap_test_inject(sw, 2, (int)a);
    memset(dst, 0, 8 * B);
    CHECK_OK(zo_swap_read(sw, f, 0, dst, 8 * B));
    CHECK_EQ(zo_swap_test_completions(sw) - before, 9); /* 8 pieces + one resumption */
    CHECK_BYTES("read after a resumed short transfer", dst, src, 8 * B);
    /* a short write is resumed too */
    zo_swap_test_inject(sw, 4, (int)(3 * a));
    fill_random(src, 8 * B);
    CHECK_OK(zo_swap_write(sw, f, 0, src, 8 * B));
    CHECK_OK(zo_swap_read(sw, f, 0, dst, 8 * B));
    CHECK_BYTES("data after a resumed short write", dst, src, 8 * B);
  } else {
    CHECK(0);
  }
  zo_swap_destroy(sw);
  free(src);
  free(dst);
}

/*
 * An urgent read overtakes bulk transfers not yet started. Without the
 * progress thread the ring moves only inside our calls, so the order is
 * deterministic: with queue depth 2 and a 64-piece write queued first, the
 * urgent read completes while most of the write has not started. With the
 * thread the same must hold for the data and the request states (the write's
 * completion is not timed: the thread may finish it meanwhile).
 */
static void urgent(const char *root, int flags) {
  const size_t B = 64 * 1024, NB = 64;
  zo_swap_t *sw = open_swap(root, B, 2, flags, 0);
  if (!sw) return;
  const size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "bulk.swp", (NB + 1) * B, &f));
  unsigned char *bulk = xalloc(a, NB * B), *tail = xalloc(a, B), *got = xalloc(a, B);
  fill_random(bulk, NB * B);
  fill_random(tail, B);
  CHECK_OK(zo_swap_write(sw, f, NB * B, tail, B));
  zo_swap_req_t *w = NULL, *r = NULL, *late = NULL;
  CHECK_OK(zo_swap_submit_write(sw, f, 0, bulk, NB * B, &w));
  CHECK_OK(zo_swap_submit_read(sw, f, NB * B, got, B, &late)); /* plain: behind the write */
  CHECK_OK(zo_swap_submit_read_urgent(sw, f, NB * B, got, B, &r));
  CHECK_OK(zo_swap_wait(sw, r));
  CHECK_BYTES("urgent read", got, tail, B);
  int done = 1, late_done = 1;
  CHECK_OK(zo_swap_poll(sw, w, &done));
  CHECK_OK(zo_swap_poll(sw, late, &late_done));
  if (!(flags & F_THREAD)) {
    CHECK_EQ(done, 0);      /* the urgent read went ahead of ~60 pieces of the write */
    CHECK_EQ(late_done, 0); /* the plain read did not */
  }
  CHECK_OK(zo_swap_wait(sw, w));
  CHECK_OK(zo_swap_wait(sw, late));
  CHECK_BYTES("plain read after the bulk write", got, tail, B);
  CHECK_OK(zo_swap_read(sw, f, 0, bulk, B));
  zo_swap_destroy(sw);
  printf("ok: urgent read ahead of a 64-piece write, thread %d\n", !!(flags & F_THREAD));
  free(bulk);
  free(tail);
  free(got);
}

/* An urgent write overtakes bulk transfers not yet started, as an urgent read does (same setting as above): a
 * 64-piece plain read queued first is mostly not started when the urgent write completes; the data lands. */
static void urgent_write(const char *root, int flags) {
  const size_t B = 64 * 1024, NB = 64;
  zo_swap_t *sw = open_swap(root, B, 2, flags, 0);
  if (!sw) return;
  const size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "bulk.swp", (NB + 1) * B, &f));
  unsigned char *bulk = xalloc(a, NB * B), *tail = xalloc(a, B), *got = xalloc(a, B);
  fill_random(bulk, NB * B);
  fill_random(tail, B);
  CHECK_OK(zo_swap_write(sw, f, 0, bulk, NB * B));
  zo_swap_req_t *r = NULL, *w = NULL;
  CHECK_OK(zo_swap_submit_read(sw, f, 0, bulk, NB * B, &r));
  CHECK_OK(zo_swap_submit_write_urgent(sw, f, NB * B, tail, B, &w));
  CHECK_OK(zo_swap_wait(sw, w));
  int done = 1;
  CHECK_OK(zo_swap_poll(sw, r, &done));
  if (!(flags & F_THREAD))
    CHECK_EQ(done, 0); /* the urgent write went ahead of ~60 pieces of the read */
  CHECK_OK(zo_swap_wait(sw, r));
  CHECK_OK(zo_swap_read(sw, f, NB * B, got, B));
  CHECK_BYTES("urgent write", got, tail, B);
  zo_swap_destroy(sw);
  printf("ok: urgent write ahead of a 64-piece read, thread %d\n", !!(flags & F_THREAD));
  free(bulk);
  free(tail);
  free(got);
}

/* Extent allocator: aligned first fit, free with coalescing, full file, double free. */
static void extents(const char *root) {
  zo_swap_t *sw = open_swap(root, 0, 0, 0, 0);
  if (!sw) return;
  const uint64_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "exp_avg.swp", 10 * a + 7, &f)); /* tail of 7 bytes unusable */
  if (!f) {
    zo_swap_destroy(sw);
    return;
  }
  CHECK_EQ(zo_swap_file_free_bytes(f), 10 * a);
  uint64_t o[6];
  CHECK_OK(zo_swap_extent_alloc(f, 1, &o[0]));     /* rounds up to a */
  CHECK_OK(zo_swap_extent_alloc(f, a + 1, &o[1])); /* 2a */
  CHECK_OK(zo_swap_extent_alloc(f, 3 * a, &o[2])); /* 3a */
  CHECK_OK(zo_swap_extent_alloc(f, 2 * a, &o[3])); /* 2a */
  CHECK_EQ(o[0], 0);
  CHECK_EQ(o[1], a);
  CHECK_EQ(o[2], 3 * a);
  CHECK_EQ(o[3], 6 * a);
  CHECK_EQ(zo_swap_file_free_bytes(f), 2 * a);
  /* full: 3a does not fit in the 2a left; message names file, size and free bytes */
  CHECK_ST(zo_swap_extent_alloc(f, 3 * a, &o[4]), ZO_ERR_OUT_OF_MEMORY);
  CHECK_MSG("exp_avg.swp");
  char want[128];
  snprintf(want, sizeof want, "no free extent of %llu bytes (%llu bytes free",
           (unsigned long long)(3 * a), (unsigned long long)(2 * a));
  CHECK_MSG(want);
  /* free the 2nd and 4th: holes of 2a at a and 2a at 6a (+2a tail at 8a coalesces with the 4th) */
  CHECK_OK(zo_swap_extent_free(f, o[1], a + 1));
  CHECK_OK(zo_swap_extent_free(f, o[3], 2 * a));
  CHECK_EQ(zo_swap_file_free_bytes(f), 6 * a);
  CHECK_EQ(zo_swap_file_largest_free(f), 4 * a);
  /* first fit: 2a goes into the hole at a */
  CHECK_OK(zo_swap_extent_alloc(f, 2 * a, &o[4]));
  CHECK_EQ(o[4], a);
  /* 4a goes to 6a (coalesced) */
  CHECK_OK(zo_swap_extent_alloc(f, 4 * a, &o[5]));
  CHECK_EQ(o[5], 6 * a);
  CHECK_EQ(zo_swap_file_free_bytes(f), 0);
  /* double free and bad frees are refused */
  CHECK_OK(zo_swap_extent_free(f, o[5], 4 * a));
  CHECK_ST(zo_swap_extent_free(f, o[5], 4 * a), ZO_ERR_INVALID_ARG);
  CHECK_MSG("double free");
  CHECK_ST(zo_swap_extent_free(f, 7 * a, a), ZO_ERR_INVALID_ARG);     /* inside free space */
  CHECK_ST(zo_swap_extent_free(f, 1, a), ZO_ERR_INVALID_ARG);         /* misaligned */
  CHECK_ST(zo_swap_extent_free(f, 9 * a, 5 * a), ZO_ERR_INVALID_ARG); /* past the end */
  CHECK_ST(zo_swap_extent_alloc(f, 0, &o[5]), ZO_ERR_INVALID_ARG);
  /* free everything in scrambled order: one extent of the whole file again */
  CHECK_OK(zo_swap_extent_free(f, o[2], 3 * a));
  CHECK_OK(zo_swap_extent_free(f, o[0], 1));
  CHECK_OK(zo_swap_extent_free(f, o[4], 2 * a));
  CHECK_EQ(zo_swap_file_free_bytes(f), 10 * a);
  CHECK_EQ(zo_swap_file_largest_free(f), 10 * a);
  uint64_t all;
  CHECK_OK(zo_swap_extent_alloc(f, 10 * a, &all));
  CHECK_EQ(all, 0);
  /* random alloc/free churn against a shadow bitmap: no overlap, all freed returns to one extent */
  CHECK_OK(zo_swap_extent_free(f, 0, 10 * a));
  zo_swap_file_t *g = NULL;
  const uint64_t units = 512;
  CHECK_OK(zo_swap_file_create(sw, "master.swp", units * a, &g));
  unsigned char used[512] = {0};
  struct {
    uint64_t off, n;
  } live[256];
  int nl = 0, bad = 0;
  for (int it = 0; it < 4000 && g; it++) {
    if (nl < 256 && (zo_test_rand64(&g_rng) & 1)) {
      uint64_t n = 1 + zo_test_rand64(&g_rng) % 16, off;
      if (zo_swap_extent_alloc(g, n * a - (a / 2), &off) != ZO_OK) continue;
      for (uint64_t u = off / a; u < off / a + n; u++) bad += used[u]++ != 0;
      live[nl].off = off;
      live[nl].n = n;
      nl++;
    } else if (nl) {
      int k = (int)(zo_test_rand64(&g_rng) % (uint64_t)nl);
      CHECK_OK(zo_swap_extent_free(g, live[k].off, live[k].n * a));
      for (uint64_t u = live[k].off / a; u < live[k].off / a + live[k].n; u++) used[u] = 0;
      live[k] = live[--nl];
    }
  }
  CHECK_EQ(bad, 0);
  while (nl) {
    nl--;
    CHECK_OK(zo_swap_extent_free(g, live[nl].off, live[nl].n * a));
  }
  CHECK_EQ(zo_swap_file_largest_free(g), units * a);
  zo_swap_destroy(sw);
}

/* Registration rules: arguments, outstanding requests, unregistering. */
static void registration(const char *root) {
  zo_swap_t *sw = open_swap(root, 0, 4, F_FIXED_FILE, 0);
  if (!sw) return;
  const size_t a = zo_swap_alignment(sw);
  unsigned char *buf = xalloc(a, 4 * a);
  memset(buf, 1, 4 * a);
  struct iovec bad = {NULL, 4096};
  CHECK_ST(zo_swap_register_buffers(sw, &bad, 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_register_buffers(sw, NULL, 2), ZO_ERR_INVALID_ARG);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "m.swp", 4 * a, &f));
  zo_swap_req_t *r = NULL;
  struct iovec iov = {buf, 4 * a};
  CHECK_OK(zo_swap_submit_write(sw, f, 0, buf, 4 * a, &r));
  CHECK_ST(zo_swap_register_buffers(sw, &iov, 1), ZO_ERR_INVALID_USAGE);
  CHECK_OK(zo_swap_wait(sw, r));
  CHECK_OK(zo_swap_register_buffers(sw, &iov, 1));
  CHECK_EQ(zo_swap_n_registered_buffers(sw), 1);
  CHECK(strstr(zo_swap_describe(sw), "1 fixed buffers") != NULL);
  CHECK_OK(zo_swap_register_buffers(sw, NULL, 0));
  CHECK_EQ(zo_swap_n_registered_buffers(sw), 0);
  /* remove and re-create files: fixed-file slots are reused */
  for (int i = 0; i < 300; i++) {
    CHECK_OK(zo_swap_file_remove(sw, f));
    f = NULL;
    CHECK_OK(zo_swap_file_create(sw, "m.swp", 4 * a, &f));
    if (!f) break;
  }
  if (f) {
    CHECK_OK(zo_swap_write(sw, f, 0, buf, 4 * a));
    unsigned char *back = xalloc(a, 4 * a);
    CHECK_OK(zo_swap_read(sw, f, 0, back, 4 * a));
    CHECK_BYTES("after slot reuse", back, buf, 4 * a);
    free(back);
  }
  zo_swap_destroy(sw);
  free(buf);
}

int main(int argc, char **argv) {
  char root[4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-swap-io", root, sizeof root))
    return ZO_TEST_SKIP;
  printf("swap test directory: %s\n", root);
  static const struct {
    size_t block;
    unsigned qd;
  } shapes[] = {{4096, 1}, {64 * 1024, 4}, {128 * 1024, 32}, {1 << 20, 128}};
  for (int flags = 0; flags < 32; flags++) {
    if ((flags & F_POOL) && (flags & (F_FIXED_FILE | F_SQPOLL))) continue; /* ring-only options */
    /* the progress thread: with plain, pool, fixed buffers+files, and SQPOLL */
    if ((flags & F_THREAD) && flags != F_THREAD && flags != (F_THREAD | F_POOL) &&
        flags != (F_THREAD | F_FIXED_BUF | F_FIXED_FILE) && flags != (F_THREAD | F_SQPOLL))
      continue;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      if (flags && flags != F_POOL && flags != F_THREAD && s != 1 && s != 3)
        continue; /* full sweeps: plain, pool, thread */
      roundtrip(root, shapes[s].block, shapes[s].qd, flags);
    }
  }
  faults(root, 0);
  faults(root, F_FIXED_BUF | F_FIXED_FILE);
  faults(root, F_SQPOLL | F_FIXED_FILE);
  faults(root, F_POOL);
  faults(root, F_THREAD | F_FIXED_BUF | F_FIXED_FILE);
  faults(root, F_THREAD | F_POOL);
  urgent(root, 0);
  urgent(root, F_THREAD);
  urgent(root, F_POOL);
  urgent_write(root, 0);
  urgent_write(root, F_THREAD);
  urgent_write(root, F_POOL);
  extents(root);
  registration(root);
  CHECK_EQ(zo_test_count_entries(root), 0);
  if (rmdir(root) != 0) FAIL_AT("rmdir %s: %s", root, strerror(errno));
  return zo_test_finish("test_swap_io");
}
