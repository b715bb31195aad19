/*
 * test_swap_crc.c - CRC32C per chunk on swap files: the check value of the
 * CRC itself, a byte flipped on disk caught on read (ZO_ERR_CORRUPT naming
 * file, offset, length, both CRCs), partial-chunk writes, failed writes.
 * Usage: test_swap_crc [DIR]; swap dirs go under DIR (default $TMPDIR, else /tmp).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "swap_internal.h"
#include "zo_test.h"
#include "zoffload/swap.h"

#define CHECK_MSG(sub) CHECK_HAS(zo_last_error(), sub)

static uint64_t g_rng = 0xC0FFEEu;

static void fill_random(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(zo_test_rand64(&g_rng) >> 56);
}

static void *xalloc(size_t align, size_t n) {
  void *p = aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) {
    fprintf(stderr, "out of memory for %zu bytes\n", n);
    exit(1);
  }
  return p;
}

/* Flip one byte of @path at @off through a separate descriptor (buffered; O_DIRECT reads flush it). */
static int flip_byte(const char *path, off_t off) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  unsigned char b;
  int ok = pread(fd, &b, 1, off) == 1;
  b ^= 0x10;
  ok = ok && pwrite(fd, &b, 1, off) == 1 && fsync(fd) == 0;
  close(fd);
  return ok ? 0 : -1;
}

/* Standard check values: crc32c("123456789") = 0xE3069283; chaining equals one pass. */
static void crc_values(void) {
  const char *s = "123456789";
  CHECK_EQ(zo_swap_crc32c(0, s, 9), 0xE3069283u);
  CHECK_EQ(zo_swap_crc32c(zo_swap_crc32c(0, s, 4), s + 4, 5), 0xE3069283u);
  CHECK_EQ(zo_swap_crc32c(0, "", 0), 0);
  unsigned char zeros[32] = {0};
  CHECK_EQ(zo_swap_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4: 32 bytes of zeros */
}

static void corruption(const char *root, int force_pread, int via_handle_opt) {
  if (force_pread) setenv("ZO_SWAP_FORCE_PREAD", "1", 1);
  zo_swap_opts o = {.block_size = 64 * 1024, .queue_depth = 8, .checksum = via_handle_opt};
  zo_swap_t *sw = NULL;
  CHECK_OK(zo_swap_create(root, &o, &sw));
  unsetenv("ZO_SWAP_FORCE_PREAD");
  if (!sw) return;
  const size_t a = zo_swap_alignment(sw);
  const size_t n = 1u << 20;
  zo_swap_file_opts fo = {.checksum = !via_handle_opt};
  zo_swap_file_t *f = NULL, *plain = NULL;
  CHECK_OK(zo_swap_file_create_ex(sw, "exp_avg_sq.swp", n, &fo, &f));
  if (!via_handle_opt) CHECK_OK(zo_swap_file_create(sw, "plain.swp", n, &plain));
  if (!f) {
    zo_swap_destroy(sw);
    return;
  }
  CHECK_EQ(zo_swap_file_checksummed(f), 1);
  if (plain) CHECK_EQ(zo_swap_file_checksummed(plain), 0);
  unsigned char *src = xalloc(a, n), *dst = xalloc(a, n);
  fill_random(src, n);
  CHECK_OK(zo_swap_write(sw, f, 0, src, n));
  CHECK_OK(zo_swap_read(sw, f, 0, dst, n));
  CHECK_BYTES("clean read", dst, src, n);
  /* flip one byte at 300000 on disk: the chunk containing it is named */
  const off_t bad = 300000;
  REQUIRE(flip_byte(zo_swap_file_path(f), bad) == 0);
  CHECK_ST(zo_swap_read(sw, f, 0, dst, n), ZO_ERR_CORRUPT);
  char want[160];
  uint64_t c0 = (uint64_t)bad / a * a;
  snprintf(want, sizeof want, "at offset %llu, length %zu bytes: CRC32C mismatch",
           (unsigned long long)c0, a);
  CHECK_MSG(want);
  CHECK_MSG("exp_avg_sq.swp");
  snprintf(want, sizeof want, "expected 0x%08x", zo_swap_crc32c(0, src + c0, a));
  CHECK_MSG(want);
  /* a read that does not touch the bad chunk passes; one that covers it fails (async path too) */
  CHECK_OK(zo_swap_read(sw, f, 0, dst, c0));
  zo_swap_req_t *r = NULL;
  CHECK_OK(zo_swap_submit_read(sw, f, c0, dst, a, &r));
  CHECK_ST(zo_swap_wait(sw, r), ZO_ERR_CORRUPT);
  /* rewriting the chunk heals it */
  CHECK_OK(zo_swap_write(sw, f, c0, src + c0, a));
  CHECK_OK(zo_swap_read(sw, f, 0, dst, n));
  CHECK_BYTES("after rewrite", dst, src, n);
  /* a failed write forgets its CRCs: the disk holds unknown bytes, not an error to read */
  zo_swap_test_inject(sw, 1, -EIO);
  CHECK_ST(zo_swap_write(sw, f, 0, src, 64 * 1024), ZO_ERR_IO);
  CHECK_OK(zo_swap_read(sw, f, 0, dst, 64 * 1024));
  /* an extent freed forgets its CRCs too */
  uint64_t off = 0;
  zo_swap_file_t *g = NULL;
  zo_swap_file_opts big = {.checksum = 1, .checksum_chunk = 16 * a};
  CHECK_OK(zo_swap_file_create_ex(sw, "master.swp", 64 * a, &big, &g));
  if (g) {
    CHECK_OK(zo_swap_extent_alloc(g, 32 * a, &off));
    CHECK_OK(zo_swap_write(sw, g, off, src, 32 * a));
    REQUIRE(flip_byte(zo_swap_file_path(g), (off_t)(off + 20 * a)) == 0);
    CHECK_ST(zo_swap_read(sw, g, off, dst, 32 * a), ZO_ERR_CORRUPT);
    snprintf(want, sizeof want, "offset %llu, length %zu", (unsigned long long)(off + 16 * a),
             16 * a);
    CHECK_MSG(want);
    /* a partial-chunk write makes that chunk unverifiable, never a false error */
    CHECK_OK(zo_swap_write(sw, g, off + 16 * a, src, a));
    CHECK_OK(zo_swap_read(sw, g, off, dst, 32 * a));
    CHECK_OK(zo_swap_extent_free(g, off, 32 * a));
    REQUIRE(flip_byte(zo_swap_file_path(g), (off_t)(off + 2 * a)) == 0);
    CHECK_OK(zo_swap_read(sw, g, off, dst, 16 * a)); /* forgotten at free */
    zo_swap_file_opts odd = {.checksum = 1, .checksum_chunk = a + 1};
    zo_swap_file_t *h = NULL;
    CHECK_ST(zo_swap_file_create_ex(sw, "odd.swp", 4 * a, &odd, &h), ZO_ERR_INVALID_ARG);
  }
  /* a file without checksums returns the flipped byte silently (what checksums are for) */
  if (plain) {
    CHECK_OK(zo_swap_write(sw, plain, 0, src, n));
    REQUIRE(flip_byte(zo_swap_file_path(plain), bad) == 0);
    CHECK_OK(zo_swap_read(sw, plain, 0, dst, n));
    CHECK(dst[bad] != src[bad]);
  }
  printf("ok: corruption caught (%s)\n", zo_swap_describe(sw));
  zo_swap_destroy(sw);
  free(src);
  free(dst);
}

int main(int argc, char **argv) {
  char root[4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-swap-crc", root, sizeof root))
    return ZO_TEST_SKIP;
  crc_values();
  corruption(root, 0, 0);
  corruption(root, 1, 0);
  corruption(root, 0, 1);
  CHECK_EQ(zo_test_count_entries(root), 0);
  if (rmdir(root) != 0) FAIL_AT("rmdir %s: %s", root, strerror(errno));
  return zo_test_finish("test_swap_crc");
}
