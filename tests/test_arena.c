/*
 * test_arena.c - the defragmenting device arena (zoffload/arena.h) on the host
 * device backend: alignment, best fit, coalescing, stream-ordered frees,
 * compaction that never moves pinned blocks and moves the others only after
 * their last use, stats arithmetic, every error path, trace recording, and a
 * short two-thread stress. Then trace replay: every *.trace file of the
 * directory in argv[1] plus adversarial synthetic traces, at a capacity of
 * the trace's peak live bytes plus a stated slack, with best fit and
 * compaction (no failure allowed, every block's bytes checked after every
 * compaction) and with first fit without compaction (failures counted; the
 * adversarial traces must fail there). Device bytes are only read or written
 * through zo_memcpy/zo_memcpy_async, as on a GPU.
 *
 * usage: test_arena [--backend host|cuda] [TRACE_DIR]    Exit 0 pass, 1 fail,
 * 77 when --backend cuda finds no CUDA device. The cuda backend runs the same
 * tests (ctest test_arena_fakecuda: against the stand-in tests/fake_cudart.c,
 * whose copies land later and poison their destination until synchronized).
 * Trace format (what ZO_ARENA_TRACE records, see zoffload/arena.h): one event
 * per line, "a ID NBYTES", "f ID", "p ID", "u ID"; "#" starts a comment, and
 * a "# arena ..." line after events starts a new trace (a file written by
 * several arenas).
 */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/arena.h"
#include "zoffload/device.h"
#include "zoffload/pinned.h"

#define KB 1024u
#define ALIGN_UP(x) (((x) + ZO_ARENA_ALIGN - 1) / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN)

static zo_device_t *g_dev;                     /* the backend under test, unlimited */
static zo_device_kind g_kind = ZO_DEVICE_HOST; /* --backend */
/* host buffers of asynchronous copies: pinned, as CUDA needs them to be */
static zo_pinned_pool_t *g_pool;

/* A host buffer that an asynchronous copy may use: pageable memory would make CUDA's copy synchronous in the
 * caller (and stall it behind a gate). */
static void *pinned(size_t n, int zero) {
  void *p = NULL;
  return zo_pinned_alloc(g_pool, n, 64, zero, &p) == ZO_OK ? p : NULL;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ gates: host funcs used as slow
 * "kernels" */

typedef struct gate {
  atomic_int open;
  int delay_ms; /* opener thread: open after this long */
} gate;

/* Blocks the stream until the gate opens (or 10 s pass, so a bug cannot hang ctest). */
static void gate_wait_fn(void *arg) {
  gate *g = arg;
  for (int i = 0; i < 10000 && !atomic_load(&g->open); i++) sleep_ms(1);
}

static void *opener_main(void *arg) {
  gate *g = arg;
  sleep_ms(g->delay_ms);
  atomic_store(&g->open, 1);
  return NULL;
}

/* ------------------------------------------------------------ patterns */

/* Word i of the pattern of @seed: distinct per block and position, so a lost, stale or misplaced
 * word shows. */
static void pattern(void *buf, size_t nbytes, uint64_t seed) {
  uint64_t *w = buf;
  const uint64_t k = (seed + 1) * 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < nbytes / 8; i++) w[i] = k ^ (i * 0xd1b54a32d192ed03ull);
}

static uint8_t *g_host_a, *g_host_b; /* scratch, g_host_cap bytes each */
static size_t g_host_cap;

static int ensure_host(size_t n) {
  if (n <= g_host_cap) return 0;
  free(g_host_a);
  free(g_host_b);
  g_host_a = malloc(n);
  g_host_b = malloc(n);
  g_host_cap = n;
  return g_host_a && g_host_b ? 0 : -1;
}

/* Write the pattern of @seed into the whole block (synchronous H2D). */
static int fill_block(zo_arena_block_t *b, uint64_t seed) {
  const size_t n = zo_arena_size(b);
  if (ensure_host(n)) return -1;
  pattern(g_host_a, n, seed);
  return zo_memcpy(g_dev, zo_arena_ptr(b), g_host_a, n, ZO_COPY_H2D) == ZO_OK ? 0 : -1;
}

/* 1 when the block holds the pattern of @seed; else prints where it differs (file:line of the
 * caller). */
static int block_ok_at(const char *file, int line, zo_arena_block_t *b, uint64_t seed,
                       const char *what) {
  const size_t n = zo_arena_size(b);
  if (ensure_host(n)) return zo_test_fail_at(file, line, "out of host memory");
  pattern(g_host_a, n, seed);
  zo_status st = zo_memcpy(g_dev, g_host_b, zo_arena_ptr(b), n, ZO_COPY_D2H);
  if (st != ZO_OK)
    return zo_test_fail_at(file, line, "%s: D2H copy failed: %s", what, zo_last_error());
  if (!memcmp(g_host_a, g_host_b, n)) return 1;
  size_t i = 0;
  while (g_host_a[i] == g_host_b[i]) i++;
  return zo_test_fail_at(file, line,
                         "%s: block of %zu bytes (pattern %llu) differs from byte %zu on", what, n,
                         (unsigned long long)seed, i);
}
#define BLOCK_OK(b, seed, what) block_ok_at(__FILE__, __LINE__, (b), (seed), (what))

static zo_arena_t *mk_arena(size_t cap, zo_arena_policy policy) {
  zo_arena_opts o = {policy, NULL};
  zo_arena_t *a = NULL;
  if (!CHECK_OK(zo_arena_create(g_dev, cap, &o, &a))) return NULL;
  return a;
}

static zo_arena_stats stats_of(zo_arena_t *a) {
  zo_arena_stats s;
  memset(&s, 0, sizeof s);
  CHECK_OK(zo_arena_get_stats(a, &s));
  return s;
}

static char *ptr_of(zo_arena_block_t *b) { return zo_arena_ptr(b); }

/* ------------------------------------------------------------ unit cases */

static void test_alignment(void) {
  size_t used0 = 0, used1 = 0;
  CHECK_OK(zo_device_mem_info(g_dev, &used0, NULL, NULL));
  zo_arena_t *a = mk_arena(64 * KB + 100, ZO_ARENA_BEST_FIT); /* rounded down to 64 KiB */
  REQUIRE(a);
  CHECK_OK(zo_device_mem_info(g_dev, &used1, NULL, NULL));
  CHECK_EQ(used1 - used0,
           64 * KB + 64 * KB / 64); /* one reservation: the rounded capacity and a 1/64 scratch */
  CHECK_EQ(stats_of(a).capacity, 64 * KB);
  const size_t sizes[] = {1, 255, 256, 257, 1000, 4096, 5000, 511};
  enum { N = sizeof sizes / sizeof sizes[0] };
  zo_arena_block_t *b[N];
  char *base = NULL;
  for (int i = 0; i < N; i++) {
    REQUIRE_OK(zo_arena_alloc(a, sizes[i], &b[i]));
    char *p = ptr_of(b[i]);
    if (i == 0) base = p;
    CHECK_EQ((uintptr_t)p % 256, 0);
    CHECK_EQ((uintptr_t)p % ZO_DEVICE_ALIGN, 0);
    CHECK_EQ(zo_arena_size(b[i]), ALIGN_UP(sizes[i]));
    CHECK(p >= base && p + zo_arena_size(b[i]) <= base + 64 * KB);
  }
  for (int i = 0; i < N; i++) /* no two blocks overlap */
    for (int j = i + 1; j < N; j++) {
      char *pi = ptr_of(b[i]), *pj = ptr_of(b[j]);
      CHECK(pi + zo_arena_size(b[i]) <= pj || pj + zo_arena_size(b[j]) <= pi);
    }
  for (int i = 0; i < N; i++) CHECK(fill_block(b[i], (uint64_t)i) == 0);
  for (int i = 0; i < N; i++) BLOCK_OK(b[i], (uint64_t)i, "alignment");
  zo_arena_destroy(a);
  CHECK_OK(zo_device_mem_info(g_dev, &used1, NULL, NULL));
  CHECK_EQ(used1, used0);
  printf("alignment: ok\n");
}

/* Holes of 4, 2 and 3 KiB (in that address order) between 1 KiB guards; then requests. */
static void test_best_fit(void) {
  for (int pol = 0; pol < 2; pol++) {
    zo_arena_t *a = mk_arena(64 * KB, pol ? ZO_ARENA_FIRST_FIT_NO_COMPACT : ZO_ARENA_BEST_FIT);
    REQUIRE(a);
    const size_t layout[] = {1 * KB, 4 * KB, 1 * KB, 2 * KB, 1 * KB, 3 * KB, 1 * KB};
    zo_arena_block_t *b[7];
    char *p[7];
    for (int i = 0; i < 7; i++) {
      REQUIRE_OK(zo_arena_alloc(a, layout[i], &b[i]));
      p[i] = ptr_of(b[i]);
    }
    CHECK_OK(zo_arena_free(a, b[1], NULL));
    CHECK_OK(zo_arena_free(a, b[3], NULL));
    CHECK_OK(zo_arena_free(a, b[5], NULL));
    zo_arena_block_t *x, *y, *z;
    REQUIRE_OK(zo_arena_alloc(a, 1536, &x));
    if (!pol) {
      CHECK(ptr_of(x) == p[3]); /* the 2 KiB hole: smallest that fits */
      REQUIRE_OK(zo_arena_alloc(a, 2560, &y));
      CHECK(ptr_of(y) == p[5]); /* the 3 KiB hole */
      REQUIRE_OK(zo_arena_alloc(a, 3584, &z));
      CHECK(ptr_of(z) == p[1]); /* the 4 KiB hole */
      zo_arena_stats s = stats_of(a);
      CHECK_EQ(s.compactions, 0);
      CHECK_EQ(s.live_bytes, 4 * KB + 1536 + 2560 + 3584);
    } else {
      CHECK(ptr_of(x) == p[1]); /* first fit: the lowest hole */
    }
    zo_arena_destroy(a);
  }
  /* Sizes above 8 KiB go to logarithmic bins: holes of 40, 24 and 33 KiB, request 30 KiB -> the 33
   * KiB one. */
  zo_arena_t *a = mk_arena(512 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  const size_t layout[] = {1 * KB, 40 * KB, 1 * KB, 24 * KB, 1 * KB, 33 * KB, 1 * KB};
  zo_arena_block_t *b[7];
  for (int i = 0; i < 7; i++) REQUIRE_OK(zo_arena_alloc(a, layout[i], &b[i]));
  char *p33 = ptr_of(b[5]), *p40 = ptr_of(b[1]);
  for (int i = 1; i < 7; i += 2) CHECK_OK(zo_arena_free(a, b[i], NULL));
  zo_arena_block_t *x, *y;
  REQUIRE_OK(zo_arena_alloc(a, 30 * KB, &x));
  CHECK(ptr_of(x) == p33);
  REQUIRE_OK(zo_arena_alloc(a, 40 * KB, &y)); /* exact fit beats the big tail */
  CHECK(ptr_of(y) == p40);
  zo_arena_destroy(a);
  /* 16384 and 16640 bytes share a bin. Seventeen 16384-byte holes freed after one of 16640 (bins are
   * LIFO): the fitting block is 18th in its bin, past the bounded scan, and no bin above holds any;
   * it is still found (without a compaction, which could not help: every block is pinned). */
  enum { NH = 18 };
  a = mk_arena(16640 + (NH - 1) * 16384 + NH * 256, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_arena_block_t *hole[NH], *guard[NH], *z;
  for (int i = 0; i < NH; i++) {
    REQUIRE_OK(zo_arena_alloc(a, i ? 16384 : 16640, &hole[i]));
    REQUIRE_OK(zo_arena_alloc(a, 256, &guard[i]));
  }
  char *p0 = ptr_of(hole[0]);
  for (int i = 0; i < NH; i++) CHECK_OK(zo_arena_free(a, hole[i], NULL));
  CHECK_EQ(stats_of(a).largest_free, 16640);
  REQUIRE_OK(zo_arena_alloc(a, 16640, &z));
  CHECK(ptr_of(z) == p0);
  CHECK_EQ(stats_of(a).compactions, 0);
  zo_arena_destroy(a);
  printf("best fit: ok\n");
}

static void test_coalesce(void) {
  zo_arena_t *a = mk_arena(4 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_arena_block_t *b[4];
  for (int i = 0; i < 4; i++) REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &b[i]));
  char *p0 = ptr_of(b[0]);
  CHECK(fill_block(b[3], 3) == 0);
  CHECK_OK(zo_arena_free(a, b[0], NULL));
  CHECK_OK(zo_arena_free(a, b[2], NULL));
  zo_arena_stats s = stats_of(a);
  CHECK_EQ(s.free_bytes, 2 * KB);
  CHECK_EQ(s.largest_free, 1 * KB);
  CHECK_CLOSE(s.fragmentation, 0.5, 0, 0);
  CHECK_OK(zo_arena_free(a, b[1], NULL)); /* joins both neighbours: one 3 KiB block */
  s = stats_of(a);
  CHECK_EQ(s.free_bytes, 3 * KB);
  CHECK_EQ(s.largest_free, 3 * KB);
  CHECK_CLOSE(s.fragmentation, 0.0, 0, 0);
  CHECK_EQ(s.n_live_blocks, 1);
  zo_arena_block_t *x;
  REQUIRE_OK(zo_arena_alloc(a, 3 * KB, &x));
  CHECK(ptr_of(x) == p0);
  CHECK_EQ(stats_of(a).compactions, 0);
  BLOCK_OK(b[3], 3, "coalesce: neighbour untouched");
  /* The tail merges too: free the last two, then the whole arena is one block again. */
  CHECK_OK(zo_arena_free(a, b[3], NULL));
  CHECK_OK(zo_arena_free(a, x, NULL));
  s = stats_of(a);
  CHECK_EQ(s.largest_free, 4 * KB);
  CHECK_EQ(s.live_bytes, 0);
  zo_arena_destroy(a);
  printf("coalesce: ok\n");
}

/* A free with a stream whose work (a read of the block) waits behind a gate: the bytes are not handed
 * out before the gate opens, neither by the non-blocking reclaim nor by the blocking one. */
static void test_deferred_free(void) {
  zo_arena_t *a = mk_arena(6 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_stream_t *s = NULL;
  REQUIRE_OK(zo_stream_create(g_dev, &s));
  zo_arena_block_t *A, *B, *C, *D;
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &A));
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &B));
  char *pA = ptr_of(A), *pB = ptr_of(B);
  CHECK(fill_block(A, 100) == 0);
  uint8_t *readback = pinned(2 * KB, 1), *want = malloc(2 * KB);
  REQUIRE(readback && want);
  pattern(want, 2 * KB, 100);
  gate g = {0, 150};
  CHECK_OK(zo_launch_host_func(s, gate_wait_fn, &g));
  CHECK_OK(zo_memcpy_async(s, readback, pA, 2 * KB, ZO_COPY_D2H)); /* the last use of A */
  CHECK_OK(zo_arena_free(a, A, s));
  zo_arena_stats st = stats_of(a);
  CHECK_EQ(st.pending_bytes, 2 * KB);
  CHECK_EQ(st.live_bytes, 2 * KB);
  CHECK_EQ(st.free_bytes, 4 * KB);   /* pending included */
  CHECK_EQ(st.largest_free, 2 * KB); /* the tail; A's bytes are not allocatable yet */
  CHECK_CLOSE(st.fragmentation, 0.5, 0, 0);
  /* Room elsewhere: taken without waiting, A's bytes untouched. */
  double t0 = zo_clock_s();
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &C));
  CHECK(zo_clock_s() - t0 < 0.1);
  CHECK(ptr_of(C) != pA);
  CHECK(ptr_of(C) == pB + 2 * KB);
  CHECK_EQ(atomic_load(&g.open), 0);
  /* No room: the allocation waits for the gate, then reuses A's bytes. */
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, opener_main, &g) == 0);
  t0 = zo_clock_s();
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &D));
  const double waited = zo_clock_s() - t0;
  CHECK_EQ(atomic_load(&g.open), 1);
  CHECK(waited > 0.1);
  CHECK(ptr_of(D) == pA);
  CHECK(fill_block(D, 200) == 0); /* overwrite at once: the read must have happened before */
  CHECK_OK(zo_stream_synchronize(s));
  CHECK_BYTES("deferred free: last use read", readback, want, 2 * KB);
  pthread_join(th, NULL);
  st = stats_of(a);
  CHECK_EQ(st.pending_bytes, 0);
  CHECK_EQ(st.compactions, 0);
  /* A free whose stream is idle by the next alloc is reclaimed without blocking. */
  CHECK_OK(zo_arena_free(a, B, s));
  CHECK_OK(zo_stream_synchronize(s));
  zo_arena_block_t *E;
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &E));
  CHECK(ptr_of(E) == pB);
  CHECK_EQ(stats_of(a).pending_bytes, 0);
  /* Uses on two streams: free waits for both (the first named by an unpin, the second by the
   * free). */
  zo_stream_t *s2 = NULL;
  REQUIRE_OK(zo_stream_create(g_dev, &s2));
  gate g1 = {0, 0}, g2 = {0, 0};
  CHECK_OK(zo_launch_host_func(s, gate_wait_fn, &g1));
  CHECK_OK(zo_arena_unpin(a, E, s));
  CHECK_OK(zo_arena_pin(a, E, NULL));
  /* (CUDA runs the host funcs of all streams on one thread: there s2's gate would wait behind s's,
   * so s2 has none) */
  if (g_kind == ZO_DEVICE_HOST) CHECK_OK(zo_launch_host_func(s2, gate_wait_fn, &g2));
  CHECK_OK(zo_arena_free(a, E, s2));
  CHECK_EQ(stats_of(a).pending_bytes, 2 * KB);
  atomic_store(&g2.open, 1);
  CHECK_OK(zo_stream_synchronize(s2));
  zo_arena_block_t *F = NULL;
  CHECK_OK(zo_arena_free(a, C, NULL));
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &F)); /* C's bytes; E's are still held by s's gate */
  CHECK(ptr_of(F) != pB);
  CHECK_EQ(stats_of(a).pending_bytes, 2 * KB);
  atomic_store(&g1.open, 1);
  CHECK_OK(zo_stream_synchronize(s));
  zo_arena_block_t *G = NULL;
  CHECK_OK(zo_arena_free(a, F, NULL));
  CHECK_OK(zo_arena_free(a, D, NULL));
  REQUIRE_OK(zo_arena_alloc(a, 6 * KB, &G));
  CHECK_EQ(stats_of(a).pending_bytes, 0);
  CHECK_OK(zo_arena_free(a, G, NULL));
  zo_stream_destroy(s2);
  zo_stream_destroy(s);
  zo_arena_destroy(a);
  zo_pinned_free(g_pool, readback);
  free(want);
  printf("deferred free: ok (blocked %.0f ms behind the gate)\n", waited * 1e3);
}

/* 8 blocks of 1 KiB, A..H; B, D, G freed; C and F stay pinned; A, E, H unpinned. The pinned blocks cut
 * the arena into three 2 KiB stretches, so 3 KiB cannot be made (not even tried). 2 KiB can: the slide
 * packs each stretch (E to D's place, H to G's), then A moves out of the lowest stretch into the hole
 * left above E, across the pinned C. C and F never move; every block keeps its bytes. */
static void test_compaction_pinned(void) {
  zo_arena_t *a = mk_arena(8 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_arena_block_t *b[8];
  char *p[8];
  for (int i = 0; i < 8; i++) {
    REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &b[i]));
    p[i] = ptr_of(b[i]);
    CHECK(fill_block(b[i], (uint64_t)i) == 0);
  }
  char *base = p[0];
  CHECK_OK(zo_arena_free(a, b[1], NULL));
  CHECK_OK(zo_arena_free(a, b[3], NULL));
  CHECK_OK(zo_arena_free(a, b[6], NULL));
  CHECK_OK(zo_arena_unpin(a, b[0], NULL));
  CHECK_OK(zo_arena_unpin(a, b[4], NULL));
  CHECK_OK(zo_arena_unpin(a, b[7], NULL));
  zo_arena_block_t *big = NULL;
  CHECK_ST(zo_arena_alloc(a, 3 * KB, &big), ZO_ERR_OUT_OF_MEMORY);
  CHECK(big == NULL);
  CHECK_HAS(zo_last_error(),
            "cannot allocate 3072 bytes: 5120 live (2048 pinned), 3072 free of 8192");
  CHECK_HAS(zo_last_error(), "largest free block 1024");
  CHECK_EQ(stats_of(a).compactions, 0); /* it could not have helped: not tried */
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &big));
  zo_arena_stats s = stats_of(a);
  CHECK_EQ(s.compactions, 1);
  CHECK_EQ(s.bytes_moved, 3 * KB);
  CHECK(ptr_of(b[2]) == p[2]); /* pinned: not moved */
  CHECK(ptr_of(b[5]) == p[5]);
  CHECK(ptr_of(big) == base);
  CHECK(ptr_of(b[4]) == base + 3 * KB);
  CHECK(ptr_of(b[0]) == base + 4 * KB);
  CHECK(ptr_of(b[7]) == base + 6 * KB);
  const int live[] = {0, 2, 4, 5, 7};
  for (int i = 0; i < 5; i++)
    BLOCK_OK(b[live[i]], (uint64_t)live[i], "compaction around pinned blocks");
  CHECK_EQ(s.free_bytes, 1 * KB);
  void *pp = NULL;
  CHECK_OK(zo_arena_pin(a, b[4], &pp));
  CHECK(pp == base + 3 * KB);
  /* Everything packed: an explicit compaction moves nothing. */
  CHECK_OK(zo_arena_compact(a));
  s = stats_of(a);
  CHECK_EQ(s.compactions, 2);
  CHECK_EQ(s.bytes_moved, 3 * KB);
  zo_arena_destroy(a);
  printf("compaction keeps pinned blocks: ok\n");
}

/* A compaction that cannot make the hole is not repeated for as much until a free or an unpin:
 * pinned A | unpinned X (3 KiB) | 1 KiB hole | pinned P | 2 KiB hole. 3 KiB needs X moved out, and
 * no hole outside its stretch holds it. */
static void test_compaction_futile(void) {
  zo_arena_t *a = mk_arena(8 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_arena_block_t *A, *X, *h1, *P, *h2, *n = NULL;
  REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &A));
  REQUIRE_OK(zo_arena_alloc(a, 3 * KB, &X));
  REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &h1));
  REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &P));
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &h2));
  char *pX = ptr_of(X);
  CHECK(fill_block(X, 9) == 0);
  CHECK_OK(zo_arena_unpin(a, X, NULL));
  CHECK_OK(zo_arena_free(a, h1, NULL));
  CHECK_OK(zo_arena_free(a, h2, NULL));
  CHECK_ST(zo_arena_alloc(a, 3 * KB, &n), ZO_ERR_OUT_OF_MEMORY);
  CHECK_EQ(stats_of(a).compactions, 1); /* tried: the stretch X..hole is 4 KiB long */
  CHECK_ST(zo_arena_alloc(a, 3 * KB, &n), ZO_ERR_OUT_OF_MEMORY);
  CHECK_ST(zo_arena_alloc(a, 4 * KB, &n), ZO_ERR_OUT_OF_MEMORY);
  CHECK_EQ(stats_of(a).compactions, 1);      /* nothing changed since: not tried again */
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &n)); /* fits without moving */
  CHECK_OK(zo_arena_free(a, n, NULL));
  CHECK_ST(zo_arena_alloc(a, 3 * KB, &n), ZO_ERR_OUT_OF_MEMORY);
  CHECK_EQ(stats_of(a).compactions, 2); /* a free since: tried again */
  CHECK(ptr_of(X) == pX);
  BLOCK_OK(X, 9, "futile compaction");
  char *pP = ptr_of(P);
  CHECK(fill_block(P, 10) == 0);
  CHECK_OK(
      zo_arena_unpin(a, P, NULL)); /* now X's stretch reaches the end: P slides down by 1 KiB */
  REQUIRE_OK(zo_arena_alloc(a, 3 * KB, &n));
  CHECK_EQ(stats_of(a).compactions, 3);
  CHECK(ptr_of(X) == pX);
  CHECK(ptr_of(P) == pP - 1 * KB);
  CHECK(ptr_of(n) == pP);
  BLOCK_OK(P, 10, "after compaction");
  BLOCK_OK(X, 9, "after compaction");
  CHECK_EQ(stats_of(a).n_failed, 4);
  zo_arena_destroy(a);
  printf("futile compaction not repeated: ok\n");
}

/* The unpin names a stream whose last use of U (a write of a new pattern) waits behind a gate: the
 * compaction must move U only after that write, so U holds the new pattern at its new address. */
static void test_compaction_after_last_use(void) {
  zo_arena_t *a = mk_arena(4 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_stream_t *s = NULL;
  REQUIRE_OK(zo_stream_create(g_dev, &s));
  zo_arena_block_t *X, *U, *Z, *N = NULL;
  REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &X));
  REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &U));
  REQUIRE_OK(zo_arena_alloc(a, 2 * KB, &Z));
  char *base = ptr_of(X), *pU = ptr_of(U);
  CHECK(fill_block(U, 1) == 0);
  uint8_t *p2 = pinned(1 * KB, 0);
  REQUIRE(p2);
  pattern(p2, 1 * KB, 2);
  gate g = {0, 150};
  CHECK_OK(zo_launch_host_func(s, gate_wait_fn, &g));
  CHECK_OK(zo_memcpy_async(s, pU, p2, 1 * KB, ZO_COPY_H2D));
  CHECK_OK(zo_arena_unpin(a, U, s));
  CHECK_OK(zo_arena_free(a, X, NULL));
  CHECK_OK(zo_arena_free(a, Z, NULL));
  zo_arena_stats st = stats_of(a);
  CHECK_EQ(st.free_bytes, 3 * KB);
  CHECK_EQ(st.largest_free, 2 * KB);
  CHECK_CLOSE(st.fragmentation, 1.0 - 2.0 / 3.0, 1e-15, 0);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, opener_main, &g) == 0);
  const double t0 = zo_clock_s();
  REQUIRE_OK(zo_arena_alloc(a, 3 * KB, &N));
  const double waited = zo_clock_s() - t0;
  CHECK_EQ(atomic_load(&g.open), 1);
  CHECK(waited > 0.1);
  CHECK(ptr_of(U) == base);
  CHECK(ptr_of(N) == base + 1 * KB);
  CHECK(fill_block(N, 3) == 0);
  BLOCK_OK(U, 2, "moved after its last use");
  st = stats_of(a);
  CHECK_EQ(st.compactions, 1);
  CHECK_EQ(st.bytes_moved, 1 * KB);
  CHECK(st.compact_seconds > 0.1);
  pthread_join(th, NULL);
  zo_stream_destroy(s);
  zo_arena_destroy(a);
  zo_pinned_free(g_pool, p2);
  printf("compaction waits for the last use: ok (%.0f ms)\n", waited * 1e3);
}

/* A 256-byte hole under a 3 KiB block: the move overlaps itself, and stages through the 3840-byte free
 * top (two copies) rather than going in 256-byte chunks (twelve). */
static void test_compaction_overlap(void) {
  zo_arena_t *a = mk_arena(8 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_arena_block_t *H, *V, *W, *N;
  REQUIRE_OK(zo_arena_alloc(a, 256, &H));
  REQUIRE_OK(zo_arena_alloc(a, 3000, &V));
  REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &W));
  char *base = ptr_of(H);
  CHECK(fill_block(V, 7) == 0);
  CHECK(fill_block(W, 8) == 0);
  CHECK_OK(zo_arena_unpin(a, V, NULL));
  CHECK_OK(zo_arena_unpin(a, W, NULL));
  CHECK_OK(zo_arena_free(a, H, NULL));
  REQUIRE_OK(zo_arena_alloc(a, 4 * KB, &N)); /* 256 + 3840 free, largest 3840 */
  zo_arena_stats s = stats_of(a);
  CHECK_EQ(s.compactions, 1);
  CHECK_EQ(s.bytes_moved, 3072 + 1024);
  CHECK_EQ(s.copies, 2 + 2); /* each block to the free top and back down */
  CHECK(ptr_of(V) == base);
  CHECK(ptr_of(W) == base + 3072);
  CHECK(ptr_of(N) == base + 4096);
  BLOCK_OK(V, 7, "overlapping move");
  BLOCK_OK(W, 8, "overlapping move");
  CHECK_EQ(s.free_bytes, 0);
  CHECK_CLOSE(s.fragmentation, 0.0, 0, 0);
  zo_arena_destroy(a);
  printf("overlapping moves staged through a free hole: ok\n");
}

/* Pinholes: the arena full of (block, 256-byte spacer) pairs; free the spacers and ask for their bytes in
 * one block. Block i slides down by 256 * i, overlapping itself; with no free hole bigger than 256 bytes,
 * each move stages through the arena's scratch (capacity / 64 = 16 KiB here, past the capacity): at most
 * 2 * ceil(block / scratch) = 2 copies per block (125 in all), where chunks of the distance moved took
 * sum_i ceil(16128 / (256 * i)) = 330. Then again on a device whose limit leaves no room for the scratch:
 * the arena goes without it, and the moves go in those chunks, to the same places with the same bytes. */
enum { PH_NB = 64, PH_BLK = 16 * 1024 - 256, PH_SPACER = 256 };
static void pinholes_run(int with_scratch) {
  const size_t cap = (size_t)PH_NB * (PH_BLK + PH_SPACER), scratch = cap / 64;
  zo_device_t *saved = g_dev, *lim = NULL;
  if (!with_scratch) {
    REQUIRE_OK(zo_device_create(g_kind, 0, cap, &lim));
    g_dev = lim;
  }
  zo_arena_t *a = mk_arena(cap, ZO_ARENA_BEST_FIT);
  zo_arena_block_t *b[PH_NB], *sp[PH_NB], *big = NULL;
  if (!a) goto out;
  for (int i = 0; i < PH_NB; i++) {
    if (!CHECK_OK(zo_arena_alloc(a, PH_BLK, &b[i])) ||
        !CHECK_OK(zo_arena_alloc(a, PH_SPACER, &sp[i])))
      goto out;
  }
  char *base = ptr_of(b[0]);
  CHECK_EQ(stats_of(a).free_bytes, 0);
  for (int i = 0; i < PH_NB; i++) {
    CHECK(fill_block(b[i], 900 + (uint64_t)i) == 0);
    CHECK_OK(zo_arena_unpin(a, b[i], NULL));
    CHECK_OK(zo_arena_free(a, sp[i], NULL));
  }
  if (!CHECK_OK(zo_arena_alloc(a, (size_t)PH_NB * PH_SPACER, &big))) goto out;
  zo_arena_stats s = stats_of(a);
  CHECK_EQ(s.compactions, 1);
  CHECK_EQ(s.bytes_moved, (uint64_t)(PH_NB - 1) * PH_BLK); /* all but block 0 */
  const uint64_t bound = (uint64_t)(PH_NB - 1) * 2 * ((PH_BLK + scratch - 1) / scratch);
  printf("pinholes%s: %d blocks of %d bytes moved in %llu copies (bound %llu)\n",
         with_scratch ? "" : ", no scratch", PH_NB - 1, PH_BLK, (unsigned long long)s.copies,
         (unsigned long long)bound);
  if (with_scratch)
    CHECK(s.copies <= bound);
  else
    CHECK_EQ(s.copies, 330);
  for (int i = 0; i < PH_NB; i++) {
    CHECK(ptr_of(b[i]) == base + (size_t)i * PH_BLK);
    BLOCK_OK(b[i], 900 + (uint64_t)i, "pinholes");
  }
  CHECK(ptr_of(big) == base + (size_t)PH_NB * PH_BLK);
  CHECK_EQ(s.free_bytes, 0);
out:
  zo_arena_destroy(a);
  g_dev = saved;
  zo_device_destroy(lim);
}

static void test_compaction_pinholes(void) {
  pinholes_run(1);
  pinholes_run(0);
  printf("pinholes: ok\n");
}

/* Ten 1 KiB blocks; free 1, 3, 4, 7: free 4 KiB in holes of 1, 2 and 1 KiB. */
static void test_stats(void) {
  zo_arena_t *a = mk_arena(10 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  zo_arena_block_t *b[10];
  for (int i = 0; i < 10; i++) REQUIRE_OK(zo_arena_alloc(a, 1000, &b[i]));
  zo_arena_stats s = stats_of(a);
  CHECK_EQ(s.capacity, 10 * KB);
  CHECK_EQ(s.live_bytes, 10 * KB);
  CHECK_EQ(s.pinned_bytes, 10 * KB);
  CHECK_EQ(s.free_bytes, 0);
  CHECK_EQ(s.largest_free, 0);
  CHECK_CLOSE(s.fragmentation, 0.0, 0, 0);
  const int gone[] = {1, 3, 4, 7};
  for (int i = 0; i < 4; i++) CHECK_OK(zo_arena_free(a, b[gone[i]], NULL));
  s = stats_of(a);
  CHECK_EQ(s.live_bytes, 6 * KB);
  CHECK_EQ(s.free_bytes, 4 * KB);
  CHECK_EQ(s.largest_free, 2 * KB);
  CHECK_CLOSE(s.fragmentation, 0.5, 0, 0);
  CHECK_EQ(s.n_live_blocks, 6);
  CHECK_EQ(s.peak_live_bytes, 10 * KB);
  CHECK_EQ(s.n_allocs, 10);
  CHECK_EQ(s.capacity, s.live_bytes + s.free_bytes);
  zo_arena_block_t *x = NULL;
  CHECK_ST(zo_arena_alloc(a, 5 * KB, &x), ZO_ERR_OUT_OF_MEMORY); /* more than is free */
  CHECK_ST(zo_arena_alloc(a, 4 * KB, &x), ZO_ERR_OUT_OF_MEMORY); /* all live blocks pinned */
  CHECK_HAS(zo_last_error(),
            "cannot allocate 4096 bytes: 6144 live (6144 pinned), 4096 free of 10240");
  s = stats_of(a);
  CHECK_EQ(s.n_failed, 2);
  CHECK_EQ(s.compactions, 0);
  const int kept[] = {0, 2, 5, 6, 8, 9};
  for (int i = 0; i < 6; i++) {
    CHECK(fill_block(b[kept[i]], 50 + (uint64_t)kept[i]) == 0);
    CHECK_OK(zo_arena_unpin(a, b[kept[i]], NULL));
  }
  CHECK_EQ(stats_of(a).pinned_bytes, 0);
  REQUIRE_OK(zo_arena_alloc(a, 4 * KB, &x));
  s = stats_of(a);
  CHECK_EQ(s.compactions, 1);
  CHECK_EQ(s.bytes_moved, 5 * KB); /* 2, 5, 6, 8, 9 slide down; 0 stays */
  CHECK_EQ(s.copies, 5);           /* each gap >= its block: one copy each */
  CHECK_EQ(s.live_bytes, 10 * KB);
  CHECK_EQ(s.pinned_bytes, 4 * KB);
  CHECK_EQ(s.n_allocs, 11);
  CHECK_EQ(s.n_failed, 2);
  CHECK_EQ(s.free_bytes, 0);
  CHECK_CLOSE(s.fragmentation, 0.0, 0, 0);
  for (int i = 0; i < 6; i++) BLOCK_OK(b[kept[i]], 50 + (uint64_t)kept[i], "stats compaction");
  zo_arena_destroy(a);
  printf("stats: ok\n");
}

static void test_errors(void) {
  zo_arena_t *a = NULL, *o = NULL;
  zo_arena_opts bad = {(zo_arena_policy)7, NULL};
  CHECK_ST(zo_arena_create(NULL, 4096, NULL, &a), ZO_ERR_INVALID_ARG);
  CHECK(a == NULL);
  CHECK_ST(zo_arena_create(g_dev, 4096, NULL, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_create(g_dev, 0, NULL, &a), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_create(g_dev, 255, NULL, &a), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "255");
  CHECK_ST(zo_arena_create(g_dev, 4096, &bad, &a), ZO_ERR_INVALID_ARG);
  zo_arena_opts tr = {ZO_ARENA_BEST_FIT, "/nonexistent-dir-zo/arena.trace"};
  CHECK_ST(zo_arena_create(g_dev, 4096, &tr, &a), ZO_ERR_SYSTEM);
  CHECK_HAS(zo_last_error(), "/nonexistent-dir-zo/arena.trace");
  CHECK(a == NULL);
  zo_device_t *small = NULL;
  REQUIRE_OK(zo_device_create(g_kind, g_kind == ZO_DEVICE_HOST ? 1 : 0, 64 * KB, &small));
  CHECK_ST(zo_arena_create(small, 128 * KB, NULL, &a), ZO_ERR_OUT_OF_MEMORY);
  CHECK_HAS(zo_last_error(), "device arena of 131072 bytes");
  CHECK(a == NULL);
  size_t used = 1;
  CHECK_OK(zo_device_mem_info(small, &used, NULL, NULL));
  CHECK_EQ(used, 0);

  REQUIRE_OK(zo_arena_create(g_dev, 8 * KB, NULL, &a));
  REQUIRE_OK(zo_arena_create(g_dev, 8 * KB, NULL, &o));
  zo_arena_block_t *b = (zo_arena_block_t *)1, *ob = NULL, *c = NULL;
  CHECK_ST(zo_arena_alloc(NULL, 16, &b), ZO_ERR_INVALID_ARG);
  CHECK(b == NULL);
  CHECK_ST(zo_arena_alloc(a, 16, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_alloc(a, 0, &b), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_alloc(a, 8 * KB + 1, &b), ZO_ERR_OUT_OF_MEMORY);
  CHECK_HAS(zo_last_error(), "cannot allocate 8193 bytes");
  CHECK_ST(zo_arena_alloc(a, SIZE_MAX, &b), ZO_ERR_OUT_OF_MEMORY);
  CHECK_EQ(stats_of(a).n_failed, 2);
  REQUIRE_OK(zo_arena_alloc(a, 1 * KB, &b));
  REQUIRE_OK(zo_arena_alloc(o, 1 * KB, &ob));

  CHECK(zo_arena_ptr(NULL) == NULL);
  CHECK_EQ(zo_arena_size(NULL), 0);
  /* pin */
  CHECK_ST(zo_arena_pin(NULL, b, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_pin(a, NULL, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_pin(a, ob, NULL), ZO_ERR_INVALID_ARG); /* another arena's block */
  CHECK_HAS(zo_last_error(), "not a live block");
  /* unpin */
  CHECK_ST(zo_arena_unpin(NULL, b, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_unpin(a, NULL, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_unpin(a, ob, NULL), ZO_ERR_INVALID_ARG);
  zo_stream_t *foreign = NULL;
  REQUIRE_OK(zo_stream_create(small, &foreign));
  CHECK_ST(zo_arena_unpin(a, b, foreign), ZO_ERR_INVALID_ARG); /* a stream of another device */
  CHECK_EQ(stats_of(a).pinned_bytes, 1 * KB);                  /* nothing changed */
  CHECK_ST(zo_arena_free(a, b, foreign), ZO_ERR_INVALID_ARG);
  CHECK_EQ(stats_of(a).live_bytes, 1 * KB);
  CHECK_OK(zo_arena_unpin(a, b, NULL));
  CHECK_ST(zo_arena_unpin(a, b, NULL), ZO_ERR_INVALID_USAGE); /* not pinned */
  CHECK_HAS(zo_last_error(), "not pinned");
  /* free */
  CHECK_OK(zo_arena_pin(a, b, NULL));
  CHECK_OK(zo_arena_pin(a, b, NULL));
  CHECK_ST(zo_arena_free(a, b, NULL), ZO_ERR_INVALID_USAGE); /* pinned twice */
  CHECK_HAS(zo_last_error(), "pinned 2 times");
  CHECK_OK(zo_arena_unpin(a, b, NULL));
  CHECK_ST(zo_arena_free(NULL, b, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_free(a, ob, NULL), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_arena_free(a, NULL, NULL));
  CHECK_OK(zo_arena_free(a, b, NULL));                     /* pinned once (the owner's pin): fine */
  CHECK_ST(zo_arena_free(a, b, NULL), ZO_ERR_INVALID_ARG); /* freed twice */
  CHECK_HAS(zo_last_error(), "freed twice");
  CHECK_ST(zo_arena_pin(a, b, NULL), ZO_ERR_INVALID_ARG); /* use after free */
  CHECK_ST(zo_arena_unpin(a, b, NULL), ZO_ERR_INVALID_ARG);
  /* stats, compact */
  zo_arena_stats st;
  CHECK_ST(zo_arena_get_stats(NULL, &st), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_get_stats(a, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_arena_compact(NULL), ZO_ERR_INVALID_ARG);
  /* Out of memory, with the numbers in the message. */
  REQUIRE_OK(zo_arena_alloc(a, 4 * KB, &c));
  zo_arena_block_t *d = NULL;
  CHECK_ST(zo_arena_alloc(a, 4097, &d), ZO_ERR_OUT_OF_MEMORY);
  CHECK_HAS(zo_last_error(),
            "device arena: cannot allocate 4097 bytes: 4096 live (4096 pinned), 4096 free of "
            "8192, largest free block 4096");
  CHECK(d == NULL);
  zo_arena_destroy(NULL);
  zo_arena_destroy(a); /* with a live block: allowed */
  zo_arena_destroy(o);
  zo_stream_destroy(foreign);
  zo_device_destroy(small);
  printf("errors: ok\n");
}

/* ------------------------------------------------------------ traces */

typedef struct tr_ev {
  char op; /* 'a', 'f', 'p', 'u' */
  uint32_t id;
  size_t nbytes; /* 'a' only */
} tr_ev;

typedef struct trace {
  char name[160];
  tr_ev *ev;
  size_t n, cap;
  uint32_t n_ids;   /* highest id + 1 */
  size_t peak_live; /* bytes, sizes rounded to ZO_ARENA_ALIGN */
  size_t n_allocs;
  int adversarial; /* must fail with first fit */
} trace;

static int tr_push(trace *t, char op, uint32_t id, size_t nbytes) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 256;
    tr_ev *e = realloc(t->ev, cap * sizeof *e);
    if (!e) return -1;
    t->ev = e;
    t->cap = cap;
  }
  t->ev[t->n++] = (tr_ev){op, id, nbytes};
  if (id + 1 > t->n_ids) t->n_ids = id + 1;
  return 0;
}

/* Check the event order (alloc before use, pin counts never negative, no use after free) and
 * compute the peak live bytes. 0, or -1 after printing the first bad event. */
static int tr_analyze(trace *t) {
  enum { NONE = 0, LIVE = 1, GONE = 2 };
  uint8_t *state = calloc(t->n_ids ? t->n_ids : 1, 1);
  int *pins = calloc(t->n_ids ? t->n_ids : 1, sizeof *pins);
  if (!state || !pins) return -1;
  size_t live = 0;
  int rc = 0;
  t->peak_live = 0;
  t->n_allocs = 0;
  for (size_t i = 0; i < t->n && !rc; i++) {
    const tr_ev *e = &t->ev[i];
    const char *bad = NULL;
    switch (e->op) {
      case 'a':
        if (state[e->id] != NONE)
          bad = "id allocated twice";
        else if (e->nbytes == 0)
          bad = "zero bytes";
        else {
          state[e->id] = LIVE;
          pins[e->id] = 1;
          live += ALIGN_UP(e->nbytes);
          if (live > t->peak_live) t->peak_live = live;
          t->n_allocs++;
        }
        break;
      case 'f': {
        if (state[e->id] != LIVE)
          bad = "free of a block not live";
        else if (pins[e->id] > 1)
          bad = "free of a block pinned more than once";
        else {
          state[e->id] = GONE;
          size_t sz = 0;
          for (size_t j = 0; j < i; j++)
            if (t->ev[j].op == 'a' && t->ev[j].id == e->id) sz = ALIGN_UP(t->ev[j].nbytes);
          live -= sz;
        }
        break;
      }
      case 'p':
        if (state[e->id] != LIVE)
          bad = "pin of a block not live";
        else
          pins[e->id]++;
        break;
      case 'u':
        if (state[e->id] != LIVE)
          bad = "unpin of a block not live";
        else if (pins[e->id] == 0)
          bad = "unpin of a block not pinned";
        else
          pins[e->id]--;
        break;
      default: bad = "unknown op";
    }
    if (bad) {
      fprintf(stderr, "%s: event %zu (%c %u): %s\n", t->name, i, e->op, e->id, bad);
      rc = -1;
    }
  }
  free(state);
  free(pins);
  return rc;
}

/* Load @path into traces appended to *@ts (one per "# arena" section with events). 0 or -1. */
static int tr_load(const char *path, const char *base, trace **ts, size_t *nts) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    return -1;
  }
  char line[256];
  int lineno = 0, rc = 0, section = 0;
  trace *cur = NULL;
  while (fgets(line, sizeof line, f) && !rc) {
    lineno++;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\n' || !*p) continue;
    if (*p == '#') {
      if (!strncmp(p, "# arena", 7) && cur && cur->n) cur = NULL; /* a new arena's events follow */
      continue;
    }
    if (!cur) {
      trace *nt = realloc(*ts, (*nts + 1) * sizeof *nt);
      if (!nt) {
        rc = -1;
        break;
      }
      *ts = nt;
      cur = &nt[(*nts)++];
      memset(cur, 0, sizeof *cur);
      if (section++)
        snprintf(cur->name, sizeof cur->name, "%s#%d", base, section);
      else
        snprintf(cur->name, sizeof cur->name, "%s", base);
    }
    char op;
    unsigned long long id, nb = 0;
    int n = sscanf(p, "%c %llu %llu", &op, &id, &nb);
    int ok = (op == 'a' && n == 3) || ((op == 'f' || op == 'p' || op == 'u') && n >= 2);
    if (!ok || id >= (1ull << 26) || nb > (1ull << 40)) {
      fprintf(stderr, "%s:%d: bad trace line: %s", path, lineno, line);
      rc = -1;
      break;
    }
    if (tr_push(cur, op, (uint32_t)id, (size_t)nb)) rc = -1;
  }
  fclose(f);
  return rc;
}

/* ---- synthetic adversarial traces (sizes deliberately not multiples of 256) ---- */

typedef struct gen {
  trace *t;
  uint32_t next;
} gen;

static uint32_t g_a(gen *g, size_t nbytes) {
  tr_push(g->t, 'a', g->next, nbytes);
  return g->next++;
}
static void g_op(gen *g, char op, uint32_t id) { tr_push(g->t, op, id, 0); }

/* Small and large blocks alternate; the large ones go, then a request for half of them at once. The
 * small ones live into the next round, and the sizes alternate between two shapes round by round. */
static void gen_alternating(trace *t) {
  gen g = {t, 0};
  enum { ROUNDS = 12, PAIRS = 16 };
  uint32_t prev_small[PAIRS], small[PAIRS], large[PAIRS];
  for (int r = 0; r < ROUNDS; r++) {
    const size_t S = r % 2 ? 3000 : 5100, L = r % 2 ? 40000 : 24500;
    for (int i = 0; i < PAIRS; i++) {
      small[i] = g_a(&g, S + (size_t)i * 8);
      g_op(&g, 'u', small[i]);
      large[i] = g_a(&g, L);
      g_op(&g, 'u', large[i]);
    }
    for (int i = 0; i < PAIRS; i++) g_op(&g, 'f', large[i]);
    if (r)
      for (int i = 0; i < PAIRS; i++) g_op(&g, 'f', prev_small[i]);
    uint32_t big = g_a(&g, (PAIRS / 2) * L);
    g_op(&g, 'u', big);
    g_op(&g, 'f', big);
    memcpy(prev_small, small, sizeof small);
  }
  for (int i = 0; i < PAIRS; i++) g_op(&g, 'f', prev_small[i]);
}

/* Per step, large short-lived blocks each followed by a small long-lived one (living 6 steps, unpinned;
 * the step's last one stays pinned for the step), then a gather buffer of three large ones at once. */
static void gen_small_long_lived(trace *t) {
  gen g = {t, 0};
  enum { STEPS = 24, PER = 8, LIFE = 6 };
  uint32_t smalls[STEPS][PER];
  for (int s = 0; s < STEPS; s++) {
    uint32_t large[PER];
    for (int k = 0; k < PER; k++) {
      large[k] = g_a(&g, 20000 + (size_t)k * 1000);
      smalls[s][k] = g_a(&g, 700 + (size_t)((s * PER + k) % 5) * 300);
      if (k != PER - 1) g_op(&g, 'u', smalls[s][k]);
      g_op(&g, 'u', large[k]);
      g_op(&g, 'f', large[k]);
    }
    uint32_t gather = g_a(&g, 3 * 24000);
    g_op(&g, 'f', gather);
    g_op(&g, 'u', smalls[s][PER - 1]);
    if (s >= LIFE)
      for (int k = 0; k < PER; k++) g_op(&g, 'f', smalls[s - LIFE][k]);
  }
  for (int s = STEPS - LIFE; s < STEPS; s++)
    for (int k = 0; k < PER; k++) g_op(&g, 'f', smalls[s][k]);
}

/* A sawtooth: each block a little bigger than the one before, which is freed right after, with a small
 * long-lived block left between them; the holes are always too small for the next one. */
static void gen_sawtooth(trace *t) {
  gen g = {t, 0};
  enum { CYCLES = 3, TEETH = 24 };
  for (int c = 0; c < CYCLES; c++) {
    uint32_t keep[TEETH], prev = UINT32_MAX;
    for (int k = 0; k < TEETH; k++) {
      uint32_t x = g_a(&g, (size_t)(k + 1) * 12000 + (size_t)c * 100);
      keep[k] = g_a(&g, 2000 + (size_t)k * 16);
      g_op(&g, 'u', keep[k]);
      if (prev != UINT32_MAX) g_op(&g, 'f', prev);
      g_op(&g, 'u', x);
      prev = x;
    }
    g_op(&g, 'f', prev);
    for (int k = 0; k < TEETH; k++) g_op(&g, 'f', keep[k]);
  }
}

/* ---- replay ---- */

typedef struct replay_result {
  size_t capacity;
  uint64_t failed, compactions, bytes_moved, checks;
  double seconds;
} replay_result;

/* Slack added to the peak live bytes to get the replay capacity (see main's summary line). */
static size_t slack_of(size_t peak) {
  size_t s = ALIGN_UP(peak / 8);
  return s < 16 * KB ? 16 * KB : s;
}

/* Check every live block's bytes. */
static void verify_all(const trace *t, zo_arena_block_t **blk, replay_result *r) {
  for (uint32_t id = 0; id < t->n_ids; id++)
    if (blk[id]) {
      char what[200];
      snprintf(what, sizeof what, "%s: block %u after compaction %llu", t->name, id,
               (unsigned long long)r->compactions);
      if (!BLOCK_OK(blk[id], id, what)) return;
      r->checks++;
    }
}

/* Replay @t at @capacity. With @check, fill every block with its id's pattern and check all live blocks
 * after each compaction and at the end; last uses are real: a D2H read of the block on a stream, named
 * by the unpin or the free (so moves and reuses wait for it). */
static void replay(const trace *t, zo_arena_policy policy, size_t capacity, int check,
                   zo_stream_t *s, replay_result *r) {
  memset(r, 0, sizeof *r);
  r->capacity = capacity;
  zo_arena_t *a = mk_arena(capacity, policy);
  if (!a) return;
  zo_arena_block_t **blk = calloc(t->n_ids ? t->n_ids : 1, sizeof *blk);
  int *pins = calloc(t->n_ids ? t->n_ids : 1, sizeof *pins);
  size_t maxb = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->ev[i].op == 'a' && t->ev[i].nbytes > maxb) maxb = t->ev[i].nbytes;
  uint8_t *sink = malloc(ALIGN_UP(maxb) + 1);
  if (!CHECK(blk && pins && sink)) goto out;
  const double t0 = zo_clock_s();
  uint64_t seen_compactions = 0;
  for (size_t i = 0; i < t->n; i++) {
    const tr_ev *e = &t->ev[i];
    zo_arena_block_t *b = blk[e->id];
    if (e->op != 'a' && !b) continue; /* its allocation failed */
    switch (e->op) {
      case 'a': {
        /* The reads queued so far complete first, so which frees are still pending (and so where
         * blocks go) does not depend on timing: the replay is deterministic. */
        if (s) CHECK_OK(zo_stream_synchronize(s));
        zo_status st = zo_arena_alloc(a, e->nbytes, &blk[e->id]);
        if (st == ZO_ERR_OUT_OF_MEMORY) {
          if (policy == ZO_ARENA_BEST_FIT && r->failed < 3)
            fprintf(stderr, "%s: event %zu (a %u %zu): %s\n", t->name, i, e->id, e->nbytes,
                    zo_last_error());
          r->failed++;
          break;
        }
        if (!CHECK_OK(st)) goto out;
        pins[e->id] = 1;
        if (check) {
          CHECK(fill_block(blk[e->id], e->id) == 0);
          zo_arena_stats as = stats_of(a);
          if (as.compactions != seen_compactions) {
            seen_compactions = as.compactions;
            r->compactions = as.compactions;
            verify_all(t, blk, r);
          }
        }
        break;
      }
      case 'u':
        if (check && s)
          CHECK_OK(zo_memcpy_async(s, sink, zo_arena_ptr(b), zo_arena_size(b), ZO_COPY_D2H));
        CHECK_OK(zo_arena_unpin(a, b, check ? s : NULL));
        pins[e->id]--;
        break;
      case 'p':
        CHECK_OK(zo_arena_pin(a, b, NULL));
        pins[e->id]++;
        break;
      case 'f': {
        const int use = check && s && pins[e->id] > 0; /* device work only on a pinned block */
        if (use) CHECK_OK(zo_memcpy_async(s, sink, zo_arena_ptr(b), zo_arena_size(b), ZO_COPY_D2H));
        if (check) BLOCK_OK(b, e->id, "before free");
        CHECK_OK(zo_arena_free(a, b, use ? s : NULL));
        blk[e->id] = NULL;
        break;
      }
    }
  }
  if (check) verify_all(t, blk, r);
  if (s) CHECK_OK(zo_stream_synchronize(s));
  r->seconds = zo_clock_s() - t0;
  zo_arena_stats as = stats_of(a);
  r->compactions = as.compactions;
  r->bytes_moved = as.bytes_moved;
  CHECK_EQ(as.n_failed, r->failed);
  CHECK_EQ(as.n_allocs + as.n_failed, t->n_allocs);
out:
  zo_arena_destroy(a);
  free(blk);
  free(pins);
  free(sink);
}

static int cmp_str(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

static void test_traces(const char *dir) {
  trace *ts = NULL;
  size_t nts = 0;
  if (dir) {
    DIR *d = opendir(dir);
    if (!d) {
      FAIL_AT("cannot open trace directory %s", dir);
    } else {
      char **names = NULL;
      size_t nn = 0;
      struct dirent *de;
      while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 6 && !strcmp(de->d_name + l - 6, ".trace")) {
          names = realloc(names, (nn + 1) * sizeof *names);
          names[nn++] = strdup(de->d_name);
        }
      }
      closedir(d);
      if (nn) qsort(names, nn, sizeof *names, cmp_str);
      for (size_t i = 0; i < nn; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (tr_load(path, names[i], &ts, &nts)) FAIL_AT("cannot load trace %s", path);
        free(names[i]);
      }
      free(names);
      CHECK(nts > 0); /* the repository ships some */
    }
  } else {
    printf("traces: no directory given, synthetic traces only\n");
  }
  const size_t n_files = nts;
  ts = realloc(ts, (nts + 3) * sizeof *ts);
  REQUIRE(ts);
  void (*gens[3])(trace *) = {gen_alternating, gen_small_long_lived, gen_sawtooth};
  const char *gnames[3] = {"synthetic:alternating", "synthetic:small-long-lived",
                           "synthetic:sawtooth"};
  for (int i = 0; i < 3; i++) {
    trace *t = &ts[nts++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", gnames[i]);
    t->adversarial = 1;
    gens[i](t);
  }
  zo_stream_t *s = NULL;
  REQUIRE_OK(zo_stream_create(g_dev, &s));
  printf(
      "\ntrace replay: capacity = peak live (sizes rounded to 256) + slack max(peak/8, 16 KiB)\n");
  printf("%-30s %7s %11s %11s %11s %12s %10s %9s\n", "trace", "allocs", "peak_live", "capacity",
         "compactions", "bytes_moved", "ff_failed", "bf_ms");
  for (size_t i = 0; i < nts; i++) {
    trace *t = &ts[i];
    if (tr_analyze(t)) {
      FAIL_AT("trace %s is not well formed", t->name);
      continue;
    }
    if (!t->n_allocs) continue;
    const size_t cap = t->peak_live + slack_of(t->peak_live);
    replay_result bf, ff;
    const int fails0 = zo_test_failures;
    replay(t, ZO_ARENA_BEST_FIT, cap, 1, s, &bf);
    replay(t, ZO_ARENA_FIRST_FIT_NO_COMPACT, cap, 0, NULL, &ff);
    printf("%-30s %7zu %11zu %11zu %11llu %12llu %10llu %9.1f\n", t->name, t->n_allocs,
           t->peak_live, cap, (unsigned long long)bf.compactions,
           (unsigned long long)bf.bytes_moved, (unsigned long long)ff.failed, bf.seconds * 1e3);
    if (bf.failed)
      FAIL_AT("%s: %llu allocations failed with best fit and compaction", t->name,
              (unsigned long long)bf.failed);
    if (t->adversarial) {
      if (!ff.failed)
        FAIL_AT("%s: adversarial, yet first fit without compaction never failed", t->name);
      if (!bf.compactions) FAIL_AT("%s: adversarial, yet best fit never compacted", t->name);
    }
    if (zo_test_failures != fails0) fprintf(stderr, "  (failures above: trace %s)\n", t->name);
  }
  printf("%zu trace file section(s) from %s, 3 synthetic\n\n", n_files, dir ? dir : "(none)");
  zo_stream_destroy(s);
  for (size_t i = 0; i < nts; i++) free(ts[i].ev);
  free(ts);
}

/* ------------------------------------------------------------ trace recording */

static int read_file(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
  fclose(f);
  return 0;
}

static void test_trace_record(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/zo-arena-trace-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  REQUIRE(mkdtemp(dir));
  char path[320], buf[1024];
  snprintf(path, sizeof path, "%s/rec.trace", dir);
  zo_arena_opts o = {ZO_ARENA_BEST_FIT, path};
  zo_arena_t *a = NULL;
  REQUIRE_OK(zo_arena_create(g_dev, 4096, &o, &a));
  zo_arena_block_t *b0, *b1, *bad = NULL;
  REQUIRE_OK(zo_arena_alloc(a, 1000, &b0));
  REQUIRE_OK(zo_arena_alloc(a, 300, &b1));
  CHECK_ST(zo_arena_alloc(a, 4000, &bad), ZO_ERR_OUT_OF_MEMORY); /* failures are not recorded */
  CHECK_OK(zo_arena_unpin(a, b0, NULL));
  CHECK_ST(zo_arena_unpin(a, b0, NULL), ZO_ERR_INVALID_USAGE);
  CHECK_OK(zo_arena_pin(a, b0, NULL));
  CHECK_OK(zo_arena_free(a, b1, NULL));
  CHECK_OK(zo_arena_free(a, b0, NULL));
  zo_arena_destroy(a);
  CHECK(read_file(path, buf, sizeof buf) == 0);
  CHECK_HAS(buf, "# arena 4096\na 0 1000\na 1 300\nu 0\np 0\nf 1\nf 0\n");
  CHECK_EQ(strlen(buf), strlen("# arena 4096\na 0 1000\na 1 300\nu 0\np 0\nf 1\nf 0\n"));
  trace *ts = NULL;
  size_t nts = 0;
  CHECK(tr_load(path, "rec.trace", &ts, &nts) == 0);
  CHECK_EQ(nts, 1);
  if (nts == 1) {
    CHECK_EQ(ts[0].n, 6);
    CHECK(tr_analyze(&ts[0]) == 0);
    CHECK_EQ(ts[0].peak_live, 1024 + 512);
  }
  for (size_t i = 0; i < nts; i++) free(ts[i].ev);
  free(ts);
  /* The environment variable: the first arena of the process takes the path, the next one
   * ".1.trace". */
  char envp[320], env1[320];
  snprintf(envp, sizeof envp, "%s/env.trace", dir);
  snprintf(env1, sizeof env1, "%s/env.1.trace", dir);
  setenv("ZO_ARENA_TRACE", envp, 1);
  zo_arena_t *e0 = NULL, *e1 = NULL;
  CHECK_OK(zo_arena_create(g_dev, 8192, NULL, &e0));
  CHECK_OK(zo_arena_create(g_dev, 4096, NULL, &e1));
  unsetenv("ZO_ARENA_TRACE");
  zo_arena_block_t *x;
  if (e1 && zo_arena_alloc(e1, 5, &x) == ZO_OK) CHECK_OK(zo_arena_free(e1, x, NULL));
  zo_arena_destroy(e0);
  zo_arena_destroy(e1);
  CHECK(read_file(envp, buf, sizeof buf) == 0);
  CHECK(!strcmp(buf, "# arena 8192\n"));
  CHECK(read_file(env1, buf, sizeof buf) == 0);
  CHECK(!strcmp(buf, "# arena 4096\na 0 5\nf 0\n"));
  unlink(path);
  unlink(envp);
  unlink(env1);
  rmdir(dir);
  printf("trace recording: ok\n");
}

/* ------------------------------------------------------------ threads */

typedef struct stress_arg {
  zo_arena_t *a;
  int tid;
  int errors;
} stress_arg;

/* Each thread keeps up to 12 blocks, allocates, pins, unpins and frees at random, and checks the
 * first word of its blocks (it owns them; the other thread's compactions may move them). */
static void *stress_main(void *arg) {
  stress_arg *sa = arg;
  enum { K = 12 };
  zo_arena_block_t *b[K] = {0};
  uint64_t tag[K] = {0};
  uint64_t rng = 0x1234u + (uint64_t)sa->tid;
  for (int it = 0; it < 3000; it++) {
    int k = (int)(zo_test_rand64(&rng) % K);
    if (!b[k]) {
      size_t n = 256 + zo_test_rand64(&rng) % (12 * KB);
      zo_status st = zo_arena_alloc(sa->a, n, &b[k]);
      if (st == ZO_ERR_OUT_OF_MEMORY) continue;
      if (st != ZO_OK) {
        sa->errors++;
        continue;
      }
      tag[k] = ((uint64_t)sa->tid << 32) | (uint64_t)it;
      if (zo_memcpy(g_dev, zo_arena_ptr(b[k]), &tag[k], 8, ZO_COPY_H2D) != ZO_OK) sa->errors++;
      if (zo_arena_unpin(sa->a, b[k], NULL) != ZO_OK) sa->errors++;
    } else if (zo_test_rand64(&rng) % 3) {
      void *p = NULL;
      uint64_t got = 0;
      if (zo_arena_pin(sa->a, b[k], &p) != ZO_OK) sa->errors++;
      if (zo_memcpy(g_dev, &got, p, 8, ZO_COPY_D2H) != ZO_OK || got != tag[k]) sa->errors++;
      if (zo_arena_unpin(sa->a, b[k], NULL) != ZO_OK) sa->errors++;
    } else {
      if (zo_arena_free(sa->a, b[k], NULL) != ZO_OK) sa->errors++;
      b[k] = NULL;
    }
  }
  for (int k = 0; k < K; k++)
    if (b[k] && zo_arena_free(sa->a, b[k], NULL) != ZO_OK) sa->errors++;
  return NULL;
}

static void test_threads(void) {
  zo_arena_t *a = mk_arena(160 * KB, ZO_ARENA_BEST_FIT);
  REQUIRE(a);
  stress_arg args[2] = {{a, 1, 0}, {a, 2, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&th[i], NULL, stress_main, &args[i]) == 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK_EQ(args[0].errors, 0);
  CHECK_EQ(args[1].errors, 0);
  zo_arena_stats s = stats_of(a);
  CHECK_EQ(s.live_bytes, 0);
  CHECK_EQ(s.n_live_blocks, 0);
  CHECK_EQ(s.largest_free, 160 * KB);
  printf("two threads: ok (%llu allocs, %llu failed, %llu compactions)\n",
         (unsigned long long)s.n_allocs, (unsigned long long)s.n_failed,
         (unsigned long long)s.compactions);
  zo_arena_destroy(a);
}

int main(int argc, char **argv) {
  unsetenv("ZO_ARENA_TRACE"); /* this program's arenas record only where it asks */
  if (argc >= 3 && !strcmp(argv[1], "--backend")) {
    if (!strcmp(argv[2], "cuda")) {
      g_kind = ZO_DEVICE_CUDA;
    } else if (strcmp(argv[2], "host")) {
      fprintf(stderr, "usage: test_arena [--backend host|cuda] [TRACE_DIR]\n");
      return 1;
    }
    argc -= 2;
    argv += 2;
  }
  /* the pool before the device: a CUDA device registers the pool's memory when it is created */
  zo_pinned_opts po = ZO_PINNED_OPTS_INIT;
  if (zo_pinned_pool_create(&po, &g_pool) != ZO_OK) {
    fprintf(stderr, "test_arena: cannot create a pinned pool: %s\n", zo_last_error());
    return 1;
  }
  if (g_kind == ZO_DEVICE_CUDA && zo_device_cuda_count() == 0) {
    printf("test_arena: no CUDA device, skipped\n");
    return ZO_TEST_SKIP;
  }
  if (zo_device_create(g_kind, 0, 0, &g_dev) != ZO_OK) {
    fprintf(stderr, "test_arena: cannot create the %s device: %s\n", zo_device_kind_name(g_kind),
            zo_last_error());
    return 1;
  }
  printf("test_arena: %s\n", zo_device_name(g_dev));
  test_alignment();
  test_best_fit();
  test_coalesce();
  test_deferred_free();
  test_compaction_pinned();
  test_compaction_futile();
  test_compaction_after_last_use();
  test_compaction_overlap();
  test_compaction_pinholes();
  test_stats();
  test_errors();
  test_trace_record();
  test_threads();
  test_traces(argc > 1 ? argv[1] : NULL);
  zo_device_destroy(g_dev);
  free(g_host_a);
  free(g_host_b);
  zo_pinned_pool_destroy(g_pool);
  return zo_test_finish("test_arena");
}
