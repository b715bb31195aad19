/*
 * test_pinned.c - the pinned host pool: sizes 1 B..64 MiB and alignments
 * 64..4096 come back aligned, writable and mlock'ed (VmLck), stats add up,
 * frees give memory back, and a tiny RLIMIT_MEMLOCK falls back with one warning.
 */
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pinned_internal.h"
#include "zo_test.h"
#include "zoffload/pinned.h"

/* ---- log capture ---- */
static int g_jemalloc; /* the pools have a jemalloc arena (see main) */

static int g_warnings, g_pin_warnings;
static char g_last_warning[1024];
static void count_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level == ZO_LOG_WARN) {
    __atomic_fetch_add(&g_warnings, 1, __ATOMIC_RELAXED);
    if (strstr(msg, "mlock")) __atomic_fetch_add(&g_pin_warnings, 1, __ATOMIC_RELAXED);
    snprintf(g_last_warning, sizeof g_last_warning, "%s", msg);
  }
}

/* VmLck of this process in bytes, from /proc/self/status; -1 if unreadable. */
static long long vm_locked_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmLck: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

static int all_bytes_are(const uint8_t *p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

/* Sizes 1 B .. 64 MiB, many odd; each with several alignments; all pinned. */
static void test_sizes_and_alignments(void) {
  static const size_t sizes[] = {1,
                                 7,
                                 63,
                                 64,
                                 100,
                                 1000,
                                 4095,
                                 4096,
                                 4097,
                                 12345,
                                 65536,
                                 65537,
                                 200000,
                                 (1u << 20) - 1,
                                 (1u << 20) + 3,
                                 3u << 20,
                                 (5u << 20) + 12345,
                                 16u << 20,
                                 (33u << 20) + 1,
                                 64u << 20};
  static const size_t aligns[] = {0, 64, 256, 4096};
  enum { NS = sizeof sizes / sizeof sizes[0], NA = sizeof aligns / sizeof aligns[0] };
  long long base_lck = vm_locked_bytes();
  REQUIRE(base_lck >= 0);

  zo_pinned_pool_t *pool = NULL;
  REQUIRE_OK(zo_pinned_pool_create(NULL, &pool));
  void *bufs[NS * NA];
  size_t requested = 0;
  int n = 0;
  for (int i = 0; i < NS; i++) {
    for (int a = 0; a < NA; a++) {
      size_t sz = sizes[i], al = aligns[a];
      if (sz >= (16u << 20) && a > 1)
        continue; /* keep the big ones to two alignments: < 1 GiB in all */
      void *p = NULL;
      if (!CHECK_OK(zo_pinned_alloc(pool, sz, al, a & 1, &p))) continue;
      bufs[n++] = p;
      requested += sz;
      size_t want_al = al ? al : 16;
      if (!CHECK_EQ((uintptr_t)p % want_al, 0))
        fprintf(stderr, "  size %zu align %zu: %p\n", sz, al, p);
      if (a & 1) CHECK(all_bytes_are(p, sz, 0));
      memset(p, (int)(i * 7 + a), sz);
      CHECK(all_bytes_are(p, sz, (uint8_t)(i * 7 + a)));
      if (!CHECK_EQ(zo_pinned_is_pinned(pool, p), 1))
        fprintf(stderr, "  size %zu align %zu\n", sz, al);
    }
  }
  /* Every buffer still holds its own pattern: no overlaps. */
  n = 0;
  for (int i = 0; i < NS; i++)
    for (int a = 0; a < NA; a++) {
      if (sizes[i] >= (16u << 20) && a > 1) continue;
      if (!CHECK(all_bytes_are(bufs[n], sizes[i], (uint8_t)(i * 7 + a))))
        fprintf(stderr, "  buffer %d (size %zu) was overwritten\n", n, sizes[i]);
      n++;
    }

  zo_pinned_stats_t s;
  REQUIRE_OK(zo_pinned_stats(pool, &s));
  long long lck = vm_locked_bytes();
  printf("  %d buffers, %zu bytes requested: allocated %zu, mapped %zu, pinned %zu; VmLck +%lld\n",
         n, requested, s.bytes_allocated, s.bytes_mapped, s.bytes_pinned, lck - base_lck);
  CHECK_EQ(s.n_allocs, n);
  CHECK_EQ(s.pinned, 1);
  CHECK_EQ(s.n_pin_failures, 0);
  CHECK_EQ(s.numa_node, -1);
  CHECK(s.bytes_allocated >= requested);
  CHECK(s.bytes_allocated <=
        requested + requested / 8 + (1u << 20)); /* size classes: well under 1/8 here */
  CHECK(s.bytes_mapped >= s.bytes_allocated);
  CHECK_EQ(s.bytes_pinned, s.bytes_mapped);
  CHECK_EQ(lck - base_lck, (long long)s.bytes_pinned); /* the kernel agrees on what is locked */

  for (int i = 0; i < n; i++) zo_pinned_free(pool, bufs[i]);
  zo_pinned_free(pool, NULL);
  REQUIRE_OK(zo_pinned_stats(pool, &s));
  CHECK_EQ(s.bytes_allocated, 0);
  CHECK_EQ(s.n_allocs, 0);
  REQUIRE_OK(zo_pinned_pool_trim(pool));
  REQUIRE_OK(zo_pinned_stats(pool, &s));
  lck = vm_locked_bytes();
  printf("  after free + trim: mapped %zu, pinned %zu (arena metadata); VmLck +%lld\n",
         s.bytes_mapped, s.bytes_pinned, lck - base_lck);
  CHECK(s.bytes_mapped <= (8u << 20)); /* metadata and retained slivers only */
  CHECK_EQ(lck - base_lck, (long long)s.bytes_pinned);
  zo_pinned_pool_destroy(pool);
  CHECK_EQ(vm_locked_bytes(), base_lck);
}

/* Freed memory is reused; zero-filling holds on reused memory too. */
static void test_reuse_and_zero(void) {
  zo_pinned_pool_t *pool = NULL;
  REQUIRE_OK(zo_pinned_pool_create(NULL, &pool));
  for (size_t sz = 100; sz <= (2u << 20); sz *= 9) {
    void *a = NULL, *b = NULL;
    REQUIRE_OK(zo_pinned_alloc(pool, sz, 64, 0, &a));
    memset(a, 0xab, sz);
    zo_pinned_free(pool, a);
    REQUIRE_OK(zo_pinned_alloc(pool, sz, 64, 1, &b));
    if (!CHECK(all_bytes_are(b, sz, 0)))
      fprintf(stderr, "  size %zu: reused buffer not zeroed\n", sz);
    zo_pinned_free(pool, b);
  }
  zo_pinned_stats_t s;
  REQUIRE_OK(zo_pinned_stats(pool, &s));
  CHECK_EQ(s.n_allocs, 0);
  zo_pinned_pool_destroy(pool);
}

/* decay_ms 0: a freed buffer is unlocked and unmapped at once, no trim needed. */
static void test_decay_zero(void) {
  zo_pinned_opts o = ZO_PINNED_OPTS_INIT;
  o.decay_ms = 0;
  zo_pinned_pool_t *pool = NULL;
  REQUIRE_OK(zo_pinned_pool_create(&o, &pool));
  zo_pinned_stats_t s0, s1, s2;
  REQUIRE_OK(zo_pinned_stats(pool, &s0));
  void *p = NULL;
  REQUIRE_OK(zo_pinned_alloc(pool, 8u << 20, 4096, 0, &p));
  memset(p, 1, 8u << 20);
  REQUIRE_OK(zo_pinned_stats(pool, &s1));
  CHECK(s1.bytes_pinned >= s0.bytes_pinned + (8u << 20));
  zo_pinned_free(pool, p);
  REQUIRE_OK(zo_pinned_stats(pool, &s2));
  CHECK_EQ(s2.bytes_pinned, s0.bytes_pinned);
  CHECK_EQ(s2.bytes_mapped, s0.bytes_mapped);
  /* An arena-sized buffer: its extent is decommitted (unlocked) on free. */
  REQUIRE_OK(zo_pinned_alloc(pool, 512u << 10, 64, 0, &p));
  memset(p, 1, 512u << 10);
  REQUIRE_OK(zo_pinned_stats(pool, &s1));
  zo_pinned_free(pool, p);
  REQUIRE_OK(zo_pinned_stats(pool, &s2));
  CHECK(s2.bytes_pinned + (512u << 10) <= s1.bytes_pinned);
  if (g_jemalloc)
    CHECK(s2.bytes_reserved >= s1.bytes_mapped); /* jemalloc keeps the addresses for reuse */
  zo_pinned_pool_destroy(pool);
}

static void test_bad_args(void) {
  zo_pinned_pool_t *pool = NULL;
  zo_pinned_opts o = ZO_PINNED_OPTS_INIT;
  CHECK_ST(zo_pinned_pool_create(&o, NULL), ZO_ERR_INVALID_ARG);
  o.numa_node = 4096;
  CHECK_ST(zo_pinned_pool_create(&o, &pool), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "NUMA node 4096");
  CHECK(pool == NULL);
  o = (zo_pinned_opts)ZO_PINNED_OPTS_INIT;
  o.pin = 2;
  CHECK_ST(zo_pinned_pool_create(&o, &pool), ZO_ERR_INVALID_ARG);
  o = (zo_pinned_opts)ZO_PINNED_OPTS_INIT;
  o.decay_ms = -5;
  CHECK_ST(zo_pinned_pool_create(&o, &pool), ZO_ERR_INVALID_ARG);

  REQUIRE_OK(zo_pinned_pool_create(NULL, &pool));
  void *p = (void *)1;
  CHECK_ST(zo_pinned_alloc(pool, 0, 64, 0, &p), ZO_ERR_INVALID_ARG);
  CHECK(p == NULL);
  CHECK_ST(zo_pinned_alloc(pool, 100, 48, 0, &p), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "alignment 48");
  CHECK_ST(zo_pinned_alloc(NULL, 100, 64, 0, &p), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_pinned_alloc(pool, 100, 64, 0, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_pinned_stats(pool, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_pinned_pool_trim(NULL), ZO_ERR_INVALID_ARG);
  int x;
  CHECK_EQ(zo_pinned_is_pinned(pool, &x), 0); /* not from the pool */
  zo_pinned_pool_destroy(pool);
  zo_pinned_pool_destroy(NULL);
}

/* A pool bound to NUMA node 0 (exists everywhere) hands out working memory. */
static void test_numa_node0(void) {
  zo_pinned_opts o = ZO_PINNED_OPTS_INIT;
  o.numa_node = 0;
  zo_pinned_pool_t *pool = NULL;
  REQUIRE_OK(zo_pinned_pool_create(&o, &pool));
  void *p = NULL;
  REQUIRE_OK(zo_pinned_alloc(pool, 3u << 20, 4096, 1, &p));
  CHECK(all_bytes_are(p, 3u << 20, 0));
  memset(p, 3, 3u << 20);
  zo_pinned_stats_t s;
  REQUIRE_OK(zo_pinned_stats(pool, &s));
  CHECK_EQ(s.numa_node, 0);
  CHECK_EQ(s.pinned, 1);
  zo_pinned_free(pool, p);
  zo_pinned_pool_destroy(pool);
}

/* The process-wide pool bound to a NUMA node chosen before it exists (the engine passes its GPU's): in a fresh
 * child process, node 0 (every machine has it) applies and shows in the pool's stats; a second call once the pool
 * exists, and a node the machine lacks, are refused and change nothing. */
static void test_host_numa(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int bad = zo_host_prefer_numa_node(100000) != -1; /* no such node */
    bad |= zo_host_prefer_numa_node(0) != 0;
    void *a = NULL;
    int pa = 0;
    bad |= zo_host_alloc(1 << 20, 1, &a, &pa) != ZO_OK;
    zo_pinned_stats_t st;
    bad |= !zo_host_pool() || zo_pinned_stats(zo_host_pool(), &st) != ZO_OK || st.numa_node != 0;
    bad |= zo_host_prefer_numa_node(0) != -1; /* the pool exists now */
    zo_host_free(a, 1 << 20, pa);
    _exit(bad);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The engine's calls: page aligned, zeroed, pinned; a wrong @pinned flag on free does no harm. */
static void test_host_calls(void) {
  void *a = NULL, *b = NULL;
  int pa = -1, pb = -1;
  REQUIRE_OK(zo_host_alloc((1u << 20) + 17, 1, &a, &pa));
  REQUIRE_OK(zo_host_alloc(5000, 0, &b, &pb));
  { /* a size whose page round-up wraps is refused as such (it became an mmap of 0 bytes: "cannot map 0 bytes") */
    void *h = NULL;
    CHECK_ST(zo_host_alloc(SIZE_MAX - 17, 0, &h, NULL), ZO_ERR_OUT_OF_MEMORY);
    CHECK_HAS(zo_last_error(), "18446744073709551598 bytes");
  }
  CHECK_EQ((uintptr_t)a % 4096, 0);
  CHECK_EQ((uintptr_t)b % 4096, 0);
  CHECK_EQ(pa, 1);
  CHECK_EQ(pb, 0);
  CHECK(all_bytes_are(a, (1u << 20) + 17, 0));
  CHECK(all_bytes_are(b, 5000, 0));
  memset(a, 9, (1u << 20) + 17);
  memset(b, 9, 5000);
  size_t pinned_with = zo_host_pinned_bytes();
  CHECK(pinned_with >= (1u << 20) + 17);
  zo_host_free(a, (1u << 20) + 17, 0); /* flag deliberately wrong */
  zo_host_free(b, 5000, 1);
  zo_host_free(NULL, 10, 1);
  CHECK(zo_host_pinned_bytes() + (1u << 20) <= pinned_with); /* decay 0: unlocked at once */
  CHECK_ST(zo_host_alloc(0, 1, &a, NULL), ZO_ERR_INVALID_ARG);
}

/* Two threads allocating and freeing at once. */
static void *churn(void *arg) {
  zo_pinned_pool_t *pool = arg;
  uint64_t rng = (uint64_t)(uintptr_t)&rng;
  void *live[64] = {0};
  size_t sz[64] = {0};
  long bad = 0;
  for (int it = 0; it < 4000; it++) {
    int k = (int)(zo_test_rand64(&rng) % 64);
    if (live[k]) {
      if (((uint8_t *)live[k])[sz[k] - 1] != (uint8_t)k) bad++;
      zo_pinned_free(pool, live[k]);
      live[k] = NULL;
    } else {
      sz[k] = 1 + zo_test_rand64(&rng) % (zo_test_rand64(&rng) % 8 == 0 ? (2u << 20) : 5000);
      if (zo_pinned_alloc(pool, sz[k], 64, 0, &live[k]) != ZO_OK) {
        bad++;
        continue;
      }
      memset(live[k], k, sz[k]);
    }
  }
  for (int k = 0; k < 64; k++) zo_pinned_free(pool, live[k]);
  return (void *)bad;
}

static void test_threads(void) {
  zo_pinned_pool_t *pool = NULL;
  REQUIRE_OK(zo_pinned_pool_create(NULL, &pool));
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn, pool);
  for (int i = 0; i < 2; i++) {
    void *bad;
    pthread_join(t[i], &bad);
    CHECK_EQ((long)bad, 0);
  }
  zo_pinned_stats_t s;
  REQUIRE_OK(zo_pinned_stats(pool, &s));
  CHECK_EQ(s.n_allocs, 0);
  CHECK_EQ(s.bytes_allocated, 0);
  CHECK_EQ(s.bytes_pinned, s.bytes_mapped);
  zo_pinned_pool_destroy(pool);
}

/* Remove CAP_IPC_LOCK (which lets root ignore RLIMIT_MEMLOCK) from this process. 0 or -errno. */
static int drop_ipc_lock(void) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) != 0) return -errno;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  if (syscall(SYS_capset, &hdr, data) != 0) return -errno;
  return 0;
}

/* In a child: memlock limit 64 KiB, no CAP_IPC_LOCK; the pool falls back with exactly one warning. */
static int fallback_child(void) {
  zo_test_failures = 0; /* count this process's checks only */
  int rc = drop_ipc_lock();
  if (rc != 0) {
    printf("  note: cannot drop CAP_IPC_LOCK (%s): fallback case skipped\n", strerror(-rc));
    return ZO_TEST_SKIP;
  }
  struct rlimit rl = {64 << 10, 64 << 10};
  if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
    printf("  note: setrlimit(RLIMIT_MEMLOCK): %s: fallback case skipped\n", strerror(errno));
    return ZO_TEST_SKIP;
  }
  zo_log_set_handler(count_log, NULL, ZO_LOG_WARN);
  zo_pinned_pool_t *pool = NULL;
  if (!CHECK_OK(zo_pinned_pool_create(NULL, &pool))) return 1;
  static const size_t sizes[] = {10, 5000, 70000, 1u << 20, (8u << 20) + 1};
  void *p[5];
  for (int i = 0; i < 5; i++) {
    if (!CHECK_OK(zo_pinned_alloc(pool, sizes[i], 4096, 1, &p[i]))) return 1;
    CHECK(all_bytes_are(p[i], sizes[i], 0));
    memset(p[i], i + 1, sizes[i]);
  }
  for (int i = 0; i < 5; i++) CHECK(all_bytes_are(p[i], sizes[i], (uint8_t)(i + 1)));
  CHECK_EQ(zo_pinned_is_pinned(pool, p[4]), 0);
  zo_pinned_stats_t s;
  CHECK_OK(zo_pinned_stats(pool, &s));
  CHECK_EQ(s.pinned, 0);
  CHECK(s.n_pin_failures >= 1);
  CHECK(s.bytes_pinned <= (64u << 10));
  CHECK_EQ(s.n_allocs, 5);
  /* The engine's path shares the same one warning. */
  void *h = NULL;
  int hp = -1;
  CHECK_OK(zo_host_alloc(3u << 20, 1, &h, &hp));
  CHECK_EQ(hp, 0);
  zo_host_free(h, 3u << 20, hp);
  for (int i = 0; i < 5; i++) zo_pinned_free(pool, p[i]);
  zo_pinned_pool_destroy(pool);
  CHECK_EQ(g_pin_warnings, 1);
  CHECK_EQ(g_warnings, 1);
  CHECK_HAS(g_last_warning, "RLIMIT_MEMLOCK is 65536 bytes");
  CHECK_HAS(g_last_warning, "ulimit -l");
  CHECK_HAS(g_last_warning, "limits.conf");
  CHECK_HAS(g_last_warning, "LimitMEMLOCK");
  printf("  fallback warning: %s\n", g_last_warning);
  return zo_test_failures ? 1 : 0;
}

static void test_fallback(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = fallback_child();
    fflush(stdout);
    _exit(rc);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == ZO_TEST_SKIP) return; /* the child printed why */
  CHECK_EQ(WEXITSTATUS(status), 0);
}

/* zo_host_jemalloc(): the same facts as zo_host_allocator()'s sentence, in parts (what zo-report prints) */
static void test_jemalloc_parts(void) {
  const char *ver = "x", *detail = NULL;
  char sentence[640];
  CHECK_EQ(zo_host_jemalloc(&ver, &detail), g_jemalloc);
  REQUIRE(detail);
  if (g_jemalloc) {
    REQUIRE(ver);
    snprintf(sentence, sizeof sentence, "jemalloc %s (%s)", ver, detail);
    CHECK_EQ(strcmp(detail, "in the process"), 0);
  } else {
    CHECK(ver == NULL);
    snprintf(sentence, sizeof sentence, "page mappings (no jemalloc: %s)", detail);
  }
  CHECK_HAS(zo_host_allocator(), sentence); /* and no more: */
  CHECK_EQ(strlen(zo_host_allocator()), strlen(sentence));
  CHECK_EQ(zo_host_jemalloc(NULL, NULL), g_jemalloc);
}

int main(void) {
  zo_log_set_handler(count_log, NULL, ZO_LOG_WARN);
  /* Run twice by ctest: as linked (jemalloc is this program's allocator, so the pool finds it in the process)
   * and with ZOFFLOAD_NO_JEMALLOC=1 (test_pinned_nojemalloc: every buffer mapped on its own, as in a Python
   * interpreter started without extra static TLS). Every check below holds either way unless marked. */
  const char *nojem = getenv("ZOFFLOAD_NO_JEMALLOC");
  g_jemalloc = !(nojem && *nojem && strcmp(nojem, "0") != 0);
  printf("allocator: %s\n", zo_host_allocator());
  CHECK_EQ(strncmp(zo_host_allocator(),
                   g_jemalloc ? "jemalloc 5." : "page mappings (no jemalloc: ZOFFLOAD_NO_JEMALLOC",
                   g_jemalloc ? 11 : 48),
           0);
  test_jemalloc_parts();
  printf("sizes and alignments\n");
  test_sizes_and_alignments();
  printf("reuse and zero\n");
  test_reuse_and_zero();
  printf("decay 0\n");
  test_decay_zero();
  printf("bad arguments\n");
  test_bad_args();
  printf("numa node 0\n");
  int w0 = g_warnings;
  test_numa_node0();
  if (g_warnings != w0) printf("  note: %s\n", g_last_warning);
  printf("engine calls\n");
  test_host_numa();
  test_host_calls();
  printf("threads\n");
  test_threads();
  CHECK_EQ(g_pin_warnings, 0); /* no pinning warning while mlock works */
  printf("fallback under RLIMIT_MEMLOCK 64 KiB\n");
  test_fallback();
  return zo_test_finish("test_pinned");
}
