/*
 * test_swap.c - the NVMe swap tier: round trips, deep queues, both I/O paths,
 * argument and path errors, file modes and cleanup, injected I/O faults.
 * Usage: test_swap [DIR]; swap dirs go under DIR (default $TMPDIR, else /tmp).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "swap_internal.h"
#include "zoffload/swap.h"
#include "zo_test.h"

/* The last error message must contain @sub. */
#define CHECK_MSG(sub) CHECK_HAS(zo_last_error(), sub)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static void fill_random(unsigned char *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rnd();
    memcpy(p + i, &v, 8);
  }
  for (; i < n; i++) p[i] = (unsigned char)rnd();
}

static void *xalloc(size_t align, size_t n) {
  void *p = aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) {
    fprintf(stderr, "out of memory for %zu bytes\n", n);
    exit(1);
  }
  return p;
}

static zo_swap_t *open_swap(const char *root, size_t block, unsigned qd, int force_pread) {
  if (force_pread)
    setenv("ZO_SWAP_FORCE_PREAD", "1", 1);
  else
    unsetenv("ZO_SWAP_FORCE_PREAD");
  zo_swap_opts o = {.block_size = block, .queue_depth = qd};
  zo_swap_t *sw = NULL;
  CHECK_ST(zo_swap_create(root, &o, &sw), ZO_OK);
  unsetenv("ZO_SWAP_FORCE_PREAD");
  if (sw) CHECK_EQ(zo_swap_uses_io_uring(sw), !force_pread);
  return sw;
}

/* nvme_path that is missing, not a directory, under a file, or not writable. */
static void test_create_errors(const char *root) {
  zo_swap_t *sw = (zo_swap_t *)1;
  char p[4096];
  snprintf(p, sizeof p, "%s/nope", root);
  CHECK_ST(zo_swap_create(p, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK(sw == NULL);
  CHECK_MSG(p);
  CHECK_MSG("No such file or directory");

  char file[4096];
  snprintf(file, sizeof file, "%s/plain", root);
  FILE *fp = fopen(file, "w");
  CHECK(fp != NULL);
  if (fp) fclose(fp);
  CHECK_ST(zo_swap_create(file, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG(file);
  CHECK_MSG("Not a directory");
  snprintf(p, sizeof p, "%s/plain/sub", root);
  CHECK_ST(zo_swap_create(p, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG(p);
  CHECK_MSG("Not a directory");
  unlink(file);

  CHECK_ST(zo_swap_create(NULL, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_create("", NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_create(root, NULL, NULL), ZO_ERR_INVALID_ARG);
  zo_swap_opts big = {.queue_depth = 1u << 20};
  CHECK_ST(zo_swap_create(root, &big, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG("queue_depth");

  /* Not writable: chmod 0500. Root ignores permission bits, so there it may succeed. */
  snprintf(p, sizeof p, "%s/ro", root);
  CHECK_EQ(mkdir(p, 0700), 0);
  CHECK_EQ(chmod(p, 0500), 0);
  zo_status st = zo_swap_create(p, NULL, &sw);
  if (geteuid() == 0 && st == ZO_OK) {
    printf("note: running as root, a 0500 directory is still writable; read-only case covered by "
           "'plain/sub' (ENOTDIR) only\n");
    zo_swap_destroy(sw);
  } else {
    CHECK_ST(st, ZO_ERR_SYSTEM);
    CHECK_MSG(p);
    CHECK_MSG("Permission denied");
  }
  chmod(p, 0700);
  CHECK_EQ(zo_test_count_entries(p), 0);
  rmdir(p);
}

/* Modes, preallocation, names, and that destroy leaves nothing behind. */
static void test_layout(const char *root, int force_pread) {
  zo_swap_t *sw = open_swap(root, 0, 0, force_pread);
  if (!sw) return;
  size_t a = zo_swap_alignment(sw);
  CHECK(a >= 512 && (a & (a - 1)) == 0);
  CHECK_EQ(zo_swap_block_size(sw), 1 << 20);
  CHECK_EQ(zo_swap_queue_depth(sw), 32);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", zo_swap_dir(sw));
  CHECK(strncmp(dir, root, strlen(root)) == 0);
  CHECK(strstr(dir, "/zoffload-") != NULL);
  struct stat st;
  CHECK_EQ(stat(dir, &st), 0);
  CHECK_EQ(st.st_mode & 07777, 0700);
  CHECK_EQ(zo_test_count_entries(dir), 1); /* the lock file only: the alignment probe is gone */

  zo_swap_file_t *f = NULL, *g = NULL, *h = NULL;
  uint64_t n = 3 * (1 << 20) + 5 * a;
  CHECK_ST(zo_swap_file_create(sw, "params.swp", n, &f), ZO_OK);
  CHECK_ST(zo_swap_file_create(sw, "m.swp", 0, &g), ZO_OK);
  CHECK_ST(zo_swap_file_create(sw, "v.swp", 1 << 20, &h), ZO_OK);
  if (!f || !g || !h) {
    zo_swap_destroy(sw);
    return;
  }
  if (!zo_swap_is_direct(sw))
    printf("note: O_DIRECT not available under %s, files are buffered\n", root);
  printf("%s: alignment %zu bytes, O_DIRECT %d, io_uring %d\n", force_pread ? "pread" : "io_uring",
         a, zo_swap_is_direct(sw), zo_swap_uses_io_uring(sw));
  CHECK_EQ(zo_swap_file_size(f), n);
  CHECK_EQ(stat(zo_swap_file_path(f), &st), 0);
  CHECK_EQ(st.st_mode & 07777, 0600);
  CHECK_EQ(st.st_size, n);
  CHECK((uint64_t)st.st_blocks * 512 >= n); /* preallocated, not sparse */
  CHECK_EQ(zo_test_count_entries(dir), 4);  /* 3 files + the lock file */

  zo_swap_file_t *dup = NULL;
  CHECK_ST(zo_swap_file_create(sw, "params.swp", 4096, &dup), ZO_ERR_INVALID_ARG);
  CHECK_MSG("params.swp");
  CHECK(dup == NULL);
  CHECK_ST(zo_swap_file_create(sw, "a/b", 4096, &dup), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_file_create(sw, "..", 4096, &dup), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_file_create(sw, "", 4096, &dup), ZO_ERR_INVALID_ARG);

  /* Remove one early; a file with a request outstanding refuses. */
  unsigned char *buf = xalloc(a, a);
  memset(buf, 7, a);
  zo_swap_req_t *r = NULL;
  CHECK_ST(zo_swap_submit_write(sw, h, 0, buf, a, &r), ZO_OK);
  CHECK_ST(zo_swap_file_remove(sw, h), ZO_ERR_INVALID_USAGE);
  CHECK_ST(zo_swap_wait(sw, r), ZO_OK);
  CHECK_ST(zo_swap_file_remove(sw, h), ZO_OK);
  CHECK_EQ(zo_test_count_entries(dir), 3);
  free(buf);

  zo_swap_destroy(sw);
  errno = 0;
  CHECK_EQ(stat(dir, &st), -1);
  CHECK_EQ(errno, ENOENT);
  CHECK_EQ(zo_test_count_entries(root), 0);
}

/* Write-then-read of many sizes and offsets, sync and async calls. */
static void test_roundtrip(const char *root, int force_pread) {
  zo_swap_t *sw = open_swap(root, 0, 0, force_pread);
  if (!sw) return;
  size_t a = zo_swap_alignment(sw);
  const size_t MiB = 1 << 20;
  const uint64_t fsize = 24 * MiB;
  zo_swap_file_t *f = NULL;
  CHECK_ST(zo_swap_file_create(sw, "rt.swp", fsize, &f), ZO_OK);
  if (!f) {
    zo_swap_destroy(sw);
    return;
  }
  const size_t sizes[] = {a,
                          2 * a,
                          3 * a,
                          64 * 1024,
                          MiB - a,
                          MiB,
                          MiB + a,
                          2 * MiB + MiB / 2,
                          5 * MiB + 3 * a,
                          9 * MiB - a,
                          9 * MiB,
                          9 * MiB + 7 * a};
  const size_t nsz = sizeof sizes / sizeof sizes[0];
  unsigned char *src = xalloc(a, 10 * MiB), *dst = xalloc(a, 10 * MiB);
  for (size_t i = 0; i < nsz; i++) {
    size_t n = sizes[i];
    uint64_t offs[3] = {0, a, 0};
    uint64_t slots = (fsize - n) / a;
    offs[2] = (rnd() % (slots + 1)) * a;
    offs[1] = n + a <= fsize ? a : 0;
    for (int k = 0; k < 3; k++) {
      uint64_t off = offs[k];
      fill_random(src, n);
      memset(dst, 0xA5, n);
      if (k == 1) { /* async calls plus poll */
        zo_swap_req_t *r = NULL;
        CHECK_ST(zo_swap_submit_write(sw, f, off, src, n, &r), ZO_OK);
        if (r) CHECK_ST(zo_swap_wait(sw, r), ZO_OK);
        r = NULL;
        CHECK_ST(zo_swap_submit_read(sw, f, off, dst, n, &r), ZO_OK);
        int done = 0;
        for (int spins = 0; r && !done && spins < 1000000; spins++)
          CHECK_ST(zo_swap_poll(sw, r, &done), ZO_OK);
        if (r) CHECK_ST(zo_swap_wait(sw, r), ZO_OK);
      } else {
        CHECK_ST(zo_swap_write(sw, f, off, src, n), ZO_OK);
        CHECK_ST(zo_swap_read(sw, f, off, dst, n), ZO_OK);
      }
      char what[128];
      snprintf(what, sizeof what, "%s size %zu offset %llu", force_pread ? "pread" : "io_uring", n,
               (unsigned long long)off);
      if (CHECK_BYTES(what, dst, src, n)) break;
    }
  }
  /* Last block of the file. */
  fill_random(src, a);
  CHECK_ST(zo_swap_write(sw, f, fsize - a, src, a), ZO_OK);
  memset(dst, 0, a);
  CHECK_ST(zo_swap_read(sw, f, fsize - a, dst, a), ZO_OK);
  CHECK_BYTES("last block", dst, src, a);
  free(src);
  free(dst);
  zo_swap_destroy(sw);
}

/* 64 requests in flight with queue_depth 4: they queue inside the library. */
static void test_concurrent(const char *root, int force_pread) {
  zo_swap_t *sw = open_swap(root, 64 * 1024, 4, force_pread);
  if (!sw) return;
  size_t a = zo_swap_alignment(sw);
  enum { NREQ = 64 };
  const size_t slot = 512 * 1024;
  zo_swap_file_t *f = NULL;
  CHECK_ST(zo_swap_file_create(sw, "cc.swp", NREQ * slot, &f), ZO_OK);
  if (!f) {
    zo_swap_destroy(sw);
    return;
  }
  unsigned char *src = xalloc(a, NREQ * slot), *dst = xalloc(a, NREQ * slot);
  size_t len[NREQ];
  zo_swap_req_t *rq[NREQ];
  fill_random(src, NREQ * slot);
  memset(dst, 0x5A, NREQ * slot);
  for (int i = 0; i < NREQ; i++) {
    len[i] = (1 + rnd() % (slot / a)) * a;
    rq[i] = NULL;
    CHECK_ST(zo_swap_submit_write(sw, f, (uint64_t)i * slot, src + i * slot, len[i], &rq[i]),
             ZO_OK);
  }
  int done = 0;
  if (rq[NREQ - 1]) CHECK_ST(zo_swap_poll(sw, rq[NREQ - 1], &done), ZO_OK);
  for (int i = NREQ - 1; i >= 0; i--) /* wait in reverse order */
    if (rq[i]) CHECK_ST(zo_swap_wait(sw, rq[i]), ZO_OK);
  for (int i = 0; i < NREQ; i++) {
    rq[i] = NULL;
    CHECK_ST(zo_swap_submit_read(sw, f, (uint64_t)i * slot, dst + i * slot, len[i], &rq[i]), ZO_OK);
  }
  int order[NREQ];
  for (int i = 0; i < NREQ; i++) order[i] = i;
  for (int i = NREQ - 1; i > 0; i--) { /* wait in random order */
    int j = (int)(rnd() % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int k = 0; k < NREQ; k++)
    if (rq[order[k]]) CHECK_ST(zo_swap_wait(sw, rq[order[k]]), ZO_OK);
  for (int i = 0; i < NREQ; i++) {
    char what[96];
    snprintf(what, sizeof what, "%s request %d (%zu bytes)", force_pread ? "pread" : "io_uring", i,
             len[i]);
    if (CHECK_BYTES(what, dst + i * slot, src + i * slot, len[i])) break;
  }
  free(src);
  free(dst);
  zo_swap_destroy(sw);
}

/* Misaligned and out-of-range arguments are refused, naming which. */
static void test_misaligned(const char *root) {
  zo_swap_t *sw = open_swap(root, 0, 0, 0);
  if (!sw) return;
  size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_ST(zo_swap_file_create(sw, "mis.swp", 16 * a, &f), ZO_OK);
  if (!f) {
    zo_swap_destroy(sw);
    return;
  }
  unsigned char *buf = xalloc(a, 4 * a);
  zo_swap_req_t *r = (zo_swap_req_t *)1;
  CHECK_ST(zo_swap_submit_write(sw, f, 0, buf + a / 2, a, &r), ZO_ERR_INVALID_ARG);
  CHECK_MSG("buffer");
  CHECK(r == NULL);
  CHECK_ST(zo_swap_submit_read(sw, f, a / 2, buf, a, &r), ZO_ERR_INVALID_ARG);
  CHECK_MSG("offset");
  CHECK_ST(zo_swap_submit_read(sw, f, 0, buf, a + 1, &r), ZO_ERR_INVALID_ARG);
  CHECK_MSG("length");
  CHECK_ST(zo_swap_submit_read(sw, f, 0, buf, 0, &r), ZO_ERR_INVALID_ARG);
  CHECK_MSG("length");
  CHECK_ST(zo_swap_read(sw, f, 15 * a, buf, 2 * a), ZO_ERR_INVALID_ARG);
  CHECK_MSG("past the file size");
  CHECK_MSG(zo_swap_file_path(f));
  CHECK_ST(zo_swap_write(sw, f, 0, buf + 1, a), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_submit_read(sw, f, 0, NULL, a, &r), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_wait(sw, NULL), ZO_ERR_INVALID_ARG);
  int done;
  CHECK_ST(zo_swap_poll(sw, NULL, &done), ZO_ERR_INVALID_ARG);
  /* The handle still works afterwards. */
  memset(buf, 0x3C, a);
  CHECK_ST(zo_swap_write(sw, f, 15 * a, buf, a), ZO_OK);
  free(buf);
  zo_swap_destroy(sw);
}

/* Injected completion results: errors name the piece, short counts are resumed. */
static void test_faults(const char *root, int force_pread) {
  const size_t B = 64 * 1024;
  zo_swap_t *sw = open_swap(root, B, 1, force_pread); /* queue depth 1: completions in order */
  if (!sw) return;
  size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_ST(zo_swap_file_create(sw, "fault.swp", 16 * B, &f), ZO_OK);
  if (!f) {
    zo_swap_destroy(sw);
    return;
  }
  const char *path = zo_swap_file_path(f);
  unsigned char *src = xalloc(a, 4 * B), *dst = xalloc(a, 4 * B);
  char want[256];
  const uint64_t off = 8 * B;

  fill_random(src, 4 * B);
  zo_swap_test_inject(sw, 2, -EIO); /* 2nd of 4 pieces */
  CHECK_ST(zo_swap_write(sw, f, off, src, 4 * B), ZO_ERR_IO);
  CHECK_MSG(path);
  snprintf(want, sizeof want, "offset %llu, length %zu bytes", (unsigned long long)(off + B), B);
  CHECK_MSG(want);
  CHECK_MSG(strerror(EIO));
  CHECK_MSG("write");

  zo_swap_test_inject(sw, 3, -ENOSPC);
  CHECK_ST(zo_swap_write(sw, f, off, src, 4 * B), ZO_ERR_IO);
  snprintf(want, sizeof want, "offset %llu, length %zu bytes", (unsigned long long)(off + 2 * B),
           B);
  CHECK_MSG(want);
  CHECK_MSG(strerror(ENOSPC));

  zo_swap_test_inject(sw, 4, -EIO);
  memset(dst, 0, 4 * B);
  CHECK_ST(zo_swap_read(sw, f, off, dst, 4 * B), ZO_ERR_IO);
  snprintf(want, sizeof want, "offset %llu, length %zu bytes", (unsigned long long)(off + 3 * B),
           B);
  CHECK_MSG(want);
  CHECK_MSG("read");

  zo_swap_test_inject(sw, 1, 0); /* read returning 0 */
  CHECK_ST(zo_swap_read(sw, f, off, dst, 4 * B), ZO_ERR_IO);
  CHECK_MSG("unexpected end of file");
  snprintf(want, sizeof want, "offset %llu", (unsigned long long)off);
  CHECK_MSG(want);

  /* Short counts: unaligned on the write, aligned on the read; resumed, data intact. */
  fill_random(src, 4 * B);
  unsigned long c0 = zo_swap_test_completions(sw);
  zo_swap_test_inject(sw, 2, 1000);
  CHECK_ST(zo_swap_write(sw, f, off, src, 4 * B), ZO_OK);
  CHECK_EQ(zo_swap_test_completions(sw) - c0, 5); /* 4 pieces + 1 resubmission */
  memset(dst, 0, 4 * B);
  c0 = zo_swap_test_completions(sw);
  zo_swap_test_inject(sw, 1, (int)(3 * a));
  CHECK_ST(zo_swap_read(sw, f, off, dst, 4 * B), ZO_OK);
  CHECK_EQ(zo_swap_test_completions(sw) - c0, 5);
  CHECK_BYTES("short count resumed", dst, src, 4 * B);
  memset(dst, 0, 4 * B);
  zo_swap_test_inject(sw, 3, 777);
  CHECK_ST(zo_swap_read(sw, f, off, dst, 4 * B), ZO_OK);
  CHECK_BYTES("unaligned short read resumed", dst, src, 4 * B);
  memset(dst, 0, 4 * B);
  zo_swap_test_inject(sw, 0, 0);
  CHECK_ST(zo_swap_read(sw, f, off, dst, 4 * B), ZO_OK);
  CHECK_BYTES("clean read after faults", dst, src, 4 * B);

  /* A failed request among others in flight: only it fails. */
  zo_swap_req_t *r[3] = {NULL, NULL, NULL};
  zo_swap_test_inject(sw, 6, -EIO); /* 6th completion: a piece of the 2nd request */
  for (int i = 0; i < 3; i++)
    CHECK_ST(zo_swap_submit_write(sw, f, (uint64_t)i * 4 * B, src, 4 * B, &r[i]), ZO_OK);
  if (r[0]) CHECK_ST(zo_swap_wait(sw, r[0]), ZO_OK);
  if (r[1]) CHECK_ST(zo_swap_wait(sw, r[1]), ZO_ERR_IO);
  snprintf(want, sizeof want, "offset %llu", (unsigned long long)(4 * B + B));
  CHECK_MSG(want);
  if (r[2]) CHECK_ST(zo_swap_wait(sw, r[2]), ZO_OK);
  free(src);
  free(dst);
  zo_swap_destroy(sw);
}

/* No room for the preallocation: ZO_ERR_IO naming file and size (via RLIMIT_FSIZE -> EFBIG). */
static void test_prealloc_limit(const char *root) {
  zo_swap_t *sw = open_swap(root, 0, 0, 0);
  if (!sw) return;
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 1 << 20;
  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
    printf("note: cannot lower RLIMIT_FSIZE, preallocation failure not covered\n");
  } else {
    zo_swap_file_t *f = NULL;
    CHECK_ST(zo_swap_file_create(sw, "huge.swp", 64ull << 20, &f), ZO_ERR_IO);
    CHECK(f == NULL);
    CHECK_MSG("huge.swp");
    CHECK_MSG("67108864 bytes");
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK_EQ(zo_test_count_entries(zo_swap_dir(sw)), 1); /* the lock file only */
  }
  zo_swap_destroy(sw);
}

static int g_warnings;
static char g_last_warning[1024];
static void capture_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level == ZO_LOG_WARN) {
    g_warnings++;
    snprintf(g_last_warning, sizeof g_last_warning, "%s", msg);
  }
}

/* Destroy with requests never waited: pieces in the kernel are reaped, nothing leaks, a warning says so. */
static void test_destroy_unwaited(const char *root) {
  zo_swap_t *sw = open_swap(root, 64 * 1024, 4, 0);
  if (!sw) return;
  size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_ST(zo_swap_file_create(sw, "left.swp", 8u << 20, &f), ZO_OK);
  unsigned char *buf = xalloc(a, 1 << 20);
  fill_random(buf, 1 << 20);
  zo_swap_req_t *r = NULL;
  for (int i = 0; f && i < 8; i++)
    CHECK_ST(zo_swap_submit_write(sw, f, (uint64_t)i << 20, buf, 1 << 20, &r), ZO_OK);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", zo_swap_dir(sw));
  g_warnings = 0;
  zo_log_set_handler(capture_log, NULL, ZO_LOG_WARN);
  zo_swap_destroy(sw);
  zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
  CHECK(g_warnings >= 1);
  CHECK_HAS(g_last_warning, "never waited");
  struct stat st;
  CHECK_EQ(stat(dir, &st), -1);
  free(buf);
}

/* O_DIRECT refused: files reopen buffered, one warning, same alignment, data intact. */
static void test_buffered_fallback(const char *root) {
  zo_swap_t *sw = open_swap(root, 64 * 1024, 2, 0);
  if (!sw) return;
  size_t a = zo_swap_alignment(sw);
  zo_swap_test_refuse_direct(sw);
  g_warnings = 0;
  g_last_warning[0] = 0;
  zo_log_set_handler(capture_log, NULL, ZO_LOG_WARN);
  zo_swap_file_t *f = NULL, *g = NULL;
  CHECK_ST(zo_swap_file_create(sw, "buf1.swp", 1 << 20, &f), ZO_OK);
  CHECK_ST(zo_swap_file_create(sw, "buf2.swp", 1 << 20, &g), ZO_OK);
  zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
  CHECK_EQ(g_warnings, 1);
  if (!strstr(g_last_warning, "O_DIRECT refused on ") || !strstr(g_last_warning, zo_swap_dir(sw)))
    FAIL_AT("warning '%s' should say 'O_DIRECT refused on %s'", g_last_warning, zo_swap_dir(sw));
  CHECK_EQ(zo_swap_is_direct(sw), 0);
  CHECK_EQ(zo_swap_alignment(sw), a);
  if (f) {
    struct stat st;
    CHECK_EQ(stat(zo_swap_file_path(f), &st), 0);
    CHECK_EQ(st.st_mode & 07777, 0600);
    unsigned char *src = xalloc(a, 256 * 1024), *dst = xalloc(a, 256 * 1024);
    fill_random(src, 256 * 1024);
    /* unaligned short count, resumed exactly on a buffered file */
    zo_swap_test_inject(sw, 2, 1001);
    CHECK_ST(zo_swap_write(sw, f, a, src, 256 * 1024), ZO_OK);
    memset(dst, 0, 256 * 1024);
    CHECK_ST(zo_swap_read(sw, f, a, dst, 256 * 1024), ZO_OK);
    CHECK_BYTES("buffered round trip", dst, src, 256 * 1024);
    CHECK_ST(zo_swap_write(sw, f, 1, src, a), ZO_ERR_INVALID_ARG); /* alignment still enforced */
    free(src);
    free(dst);
  }
  zo_swap_destroy(sw);
}

int main(int argc, char **argv) {
  char root[4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-swap", root, sizeof root))
    return ZO_TEST_SKIP;
  printf("swap test directory: %s\n", root);

  test_create_errors(root);
  test_layout(root, 0);
  test_layout(root, 1);
  test_misaligned(root);
  for (int force = 0; force <= 1; force++) {
    test_roundtrip(root, force);
    test_concurrent(root, force);
    test_faults(root, force);
  }
  test_prealloc_limit(root);
  test_destroy_unwaited(root);
  test_buffered_fallback(root);

  CHECK_EQ(zo_test_count_entries(root), 0);
  if (rmdir(root) != 0) FAIL_AT("rmdir %s: %s", root, strerror(errno));
  return zo_test_finish("test_swap");
}
