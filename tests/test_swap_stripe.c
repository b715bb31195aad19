/*
 * test_swap_stripe.c - a swap handle striped over 2 and 3 directories
 * (zo_swap_create_striped): random aligned transfers crossing stripe
 * boundaries read back what was written, on the ring, the pread/pwrite pool
 * and the progress thread; the bytes on disk sit in the part and offset
 * zo_swap_file_locate() names (round-robin stripes); misaligned requests and a
 * directory given twice are refused; the piece latency percentiles are ordered.
 * Usage: test_swap_stripe [DIR]; swap dirs go under DIR (default $TMPDIR, else /tmp).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/swap.h"

static uint64_t g_rng = 0x57121Eu;

static void fill_random(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = zo_test_rand64(&g_rng);
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

enum { M_RING = 0, M_POOL = 1, M_THREAD = 2 };

/* The bytes of part files on disk match @want (the logical file) where locate says they are. */
static void check_on_disk(zo_swap_file_t *f, const unsigned char *want, uint64_t size) {
  unsigned n = zo_swap_file_n_parts(f);
  int fds[8];
  for (unsigned i = 0; i < n; i++) {
    fds[i] = open(zo_swap_file_part_path(f, i), O_RDONLY);
    CHECK(fds[i] >= 0);
  }
  unsigned char *got = malloc(size);
  uint64_t total = 0, per_part[8] = {0};
  for (uint64_t off = 0; off < size;) {
    unsigned part;
    uint64_t poff, contig;
    if (!CHECK_OK(zo_swap_file_locate(f, off, &part, &poff, &contig))) break;
    CHECK(part < n);
    CHECK(contig > 0 && contig <= size - off);
    if (pread(fds[part], got + off, contig, (off_t)poff) != (ssize_t)contig) {
      FAIL_AT("pread part %u at %llu", part, (unsigned long long)poff);
      break;
    }
    per_part[part] += contig;
    total += contig;
    off += contig;
  }
  CHECK_EQ(total, size);
  for (unsigned i = 0; i < n; i++) CHECK(per_part[i] > 0); /* every directory holds stripes */
  CHECK_BYTES("bytes on disk, by the stripe map", got, want, size);
  for (unsigned i = 0; i < n; i++) {
    struct stat st;
    if (fds[i] >= 0 && fstat(fds[i], &st) == 0) CHECK_EQ((uint64_t)st.st_size, per_part[i]);
    close(fds[i]);
  }
  free(got);
}

static void roundtrip(char dirs[][4096], unsigned n_dirs, int mode, size_t block) {
  const char *paths[3] = {dirs[0], dirs[1], dirs[2]};
  const size_t stripe = 64 * 1024;
  zo_swap_opts o = {.block_size = block,
                    .queue_depth = 8,
                    .register_files = 1,
                    .stripe_size = stripe,
                    .latency_stats = 1,
                    .progress_thread = mode == M_THREAD};
  if (mode == M_POOL)
    setenv("ZO_SWAP_FORCE_PREAD", "1", 1);
  else
    unsetenv("ZO_SWAP_FORCE_PREAD");
  zo_swap_t *sw = NULL;
  zo_status st = zo_swap_create_striped(paths, n_dirs, &o, &sw);
  unsetenv("ZO_SWAP_FORCE_PREAD");
  if (!CHECK_OK(st)) return;
  CHECK_EQ(zo_swap_n_dirs(sw), n_dirs);
  CHECK_EQ(zo_swap_stripe_size(sw), stripe);
  CHECK_HAS(zo_swap_describe(sw), "striped");
  const size_t a = zo_swap_alignment(sw);
  /* 37 stripes and a part of one: the last part ends inside a stripe */
  const uint64_t size = 37 * stripe + 5 * a;
  zo_swap_file_t *f = NULL;
  if (!CHECK_OK(zo_swap_file_create(sw, "state.swp", size, &f))) goto out;
  CHECK_EQ(zo_swap_file_n_parts(f), n_dirs);
  unsigned char *want = aligned_alloc(a, size), *got = aligned_alloc(a, size);
  fill_random(want, size);
  memset(got, 0xEE, size);
  /* write in random aligned chunks (most cross a stripe boundary), all in flight before a wait */
  zo_swap_req_t *reqs[256];
  int nr = 0;
  for (uint64_t off = 0; off < size && nr < 256;) {
    uint64_t len = (zo_test_rand64(&g_rng) % (3 * stripe / a) + 1) * a;
    if (len > size - off) len = size - off;
    CHECK_OK(zo_swap_submit_write(sw, f, off, want + off, (size_t)len, &reqs[nr++]));
    off += len;
  }
  for (int i = 0; i < nr; i++) CHECK_OK(zo_swap_wait(sw, reqs[i]));
  /* read back in other chunks, starting off a stripe boundary */
  nr = 0;
  for (uint64_t off = 0; off < size && nr < 256;) {
    uint64_t len = (zo_test_rand64(&g_rng) % (5 * stripe / a) + 1) * a;
    if (len > size - off) len = size - off;
    CHECK_OK(zo_swap_submit_read(sw, f, off, got + off, (size_t)len, &reqs[nr++]));
    off += len;
  }
  for (int i = 0; i < nr; i++) CHECK_OK(zo_swap_wait(sw, reqs[i]));
  CHECK_BYTES("striped read-back", got, want, size);
  /* a single read across three stripes at an odd aligned offset */
  memset(got, 0, 3 * stripe);
  CHECK_OK(zo_swap_read(sw, f, stripe - a, got, 2 * stripe + 2 * a));
  CHECK_BYTES("read across stripes", got, want + stripe - a, 2 * stripe + 2 * a);
  check_on_disk(f, want, size);
  /* misaligned requests are refused as on one directory */
  zo_swap_req_t *r = NULL;
  CHECK_ST(zo_swap_submit_read(sw, f, a / 2, got, a, &r), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_submit_read(sw, f, 0, got, a + 1, &r), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_submit_write(sw, f, 0, want + 1, a, &r), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_submit_read(sw, f, size - a, got, 2 * a, &r), ZO_ERR_INVALID_ARG);
  /* latencies: both directions seen, percentiles in order */
  for (int w = 0; w < 2; w++) {
    zo_swap_latency_t l;
    CHECK_OK(zo_swap_latency(sw, w, &l));
    CHECK(l.n >= size / (block < stripe ? block : stripe));
    CHECK(l.p50_us > 0 && l.p50_us <= l.p99_us && l.p99_us <= l.p999_us && l.p999_us <= l.max_us);
  }
  zo_swap_latency_reset(sw);
  zo_swap_latency_t l0;
  CHECK_OK(zo_swap_latency(sw, 0, &l0));
  CHECK_EQ(l0.n, 0);
  free(want);
  free(got);
out:
  zo_swap_destroy(sw);
  for (unsigned i = 0; i < n_dirs; i++) CHECK_EQ(zo_test_count_entries(dirs[i]), 0);
}

int main(int argc, char **argv) {
  char root[4096], dirs[3][4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-swap-stripe", root, sizeof root))
    return ZO_TEST_SKIP;
  for (int i = 0; i < 3; i++) {
    snprintf(dirs[i], sizeof dirs[i], "%.4000s/d%d", root, i);
    if (mkdir(dirs[i], 0700) != 0) return FAIL_AT("mkdir %s", dirs[i]), 1;
  }
  for (unsigned n = 2; n <= 3; n++)
    for (int mode = M_RING; mode <= M_THREAD; mode++) {
      roundtrip(dirs, n, mode, 16 * 1024);  /* pieces inside a stripe */
      roundtrip(dirs, n, mode, 256 * 1024); /* pieces cut at the stripe's end */
    }
  /* one directory twice (another spelling of it): refused naming both entries */
  char again[4200];
  snprintf(again, sizeof again, "%s/../d0", dirs[1]);
  const char *dup[2] = {dirs[0], again};
  zo_swap_t *sw = NULL;
  CHECK_ST(zo_swap_create_striped(dup, 2, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "nvme_path[1]");
  CHECK_HAS(zo_last_error(), "nvme_path[0]");
  const char *missing[2] = {dirs[0], "/nonexistent-zoffload-dir"};
  CHECK_ST(zo_swap_create_striped(missing, 2, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "nvme_path[1]");
  zo_swap_opts bad = {.stripe_size = 1000};
  const char *two[2] = {dirs[0], dirs[1]};
  CHECK_ST(zo_swap_create_striped(two, 2, &bad, &sw), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "stripe_size");
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(zo_test_count_entries(dirs[i]), 0);
    rmdir(dirs[i]);
  }
  rmdir(root);
  return zo_test_finish("test_swap_stripe");
}
