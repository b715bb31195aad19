/*
 * test_pinned_cuda.c - the pinned pool's CUDA registration bookkeeping,
 * against a fake cudaHostRegister installed through gpu/cuda_host.h, so it
 * runs without a GPU: memory mapped before "the CUDA device" is registered at
 * activation, later memory when mapped; registrations never overlap, cover
 * exactly the committed bytes, are made on mapped read-write memory and
 * dropped before their pages go; pageable pools never register; a refused
 * registration warns once and the pool keeps working. Whether cudaHostRegister
 * itself accepts these ranges needs a GPU (test_device --backend cuda).
 * Exit 0 pass, 1 fail.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_host.h"
#include "pinned_internal.h"
#include "zo_test.h"
#include "zoffload/pinned.h"

/* ---- the fake: a table of registered ranges, checked on every call ---- */

typedef struct reg_rec {
  uintptr_t base;
  size_t len;
} reg_rec;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static reg_rec g_regs[1 << 14];
static size_t g_n_regs, g_reg_bytes, g_n_reg_calls, g_n_unreg_calls, g_violations;
static int g_fail; /* 1: refuse registrations */
static char g_first_violation[256];
static char g_maps
    [1 << 20]; /* /proc/self/maps, read without malloc (the fake runs inside jemalloc hooks) */

static void violation(const char *what, uintptr_t base, size_t len) {
  if (g_violations++ == 0)
    snprintf(g_first_violation, sizeof g_first_violation, "%s: [%#lx, +%zu)", what,
             (unsigned long)base, len);
}

/* 1 when every byte of [base, base+len) lies in read-write mappings. Caller holds g_mu. */
static int mapped_rw(uintptr_t base, size_t len) {
  int fd = open("/proc/self/maps", O_RDONLY);
  if (fd < 0) return 1; /* cannot tell: do not fail on it */
  size_t n = 0;
  ssize_t r;
  while (n < sizeof g_maps - 1 && (r = read(fd, g_maps + n, sizeof g_maps - 1 - n)) > 0)
    n += (size_t)r;
  close(fd);
  g_maps[n] = '\0';
  uintptr_t need = base, end = base + len;
  /* Mappings are listed in address order: walk them, extending the covered prefix. */
  for (char *line = g_maps; line && *line && need < end;) {
    unsigned long a, b;
    char perms[8];
    if (sscanf(line, "%lx-%lx %4s", &a, &b, perms) == 3 && a <= need && need < b) {
      if (perms[0] != 'r' || perms[1] != 'w') return 0;
      need = b;
    }
    line = strchr(line, '\n');
    if (line) line++;
  }
  return need >= end;
}

static zo_status fake_reg(void *ptr, size_t nbytes) {
  uintptr_t b = (uintptr_t)ptr;
  long pg = sysconf(_SC_PAGESIZE);
  pthread_mutex_lock(&g_mu);
  g_n_reg_calls++;
  if (g_fail) {
    pthread_mutex_unlock(&g_mu);
    return ZO_ERR_CUDA;
  }
  if (b % (uintptr_t)pg || nbytes % (size_t)pg || nbytes == 0)
    violation("register: not whole pages", b, nbytes);
  for (size_t i = 0; i < g_n_regs; i++)
    if (b < g_regs[i].base + g_regs[i].len && g_regs[i].base < b + nbytes)
      violation("register: overlap", b, nbytes);
  if (!mapped_rw(b, nbytes)) violation("register: not mapped read-write", b, nbytes);
  if (g_n_regs < sizeof g_regs / sizeof g_regs[0]) {
    g_regs[g_n_regs++] = (reg_rec){b, nbytes};
    g_reg_bytes += nbytes;
  } else {
    violation("register: fake table full", b, nbytes);
  }
  pthread_mutex_unlock(&g_mu);
  return ZO_OK;
}

static zo_status fake_unreg(void *ptr) {
  uintptr_t b = (uintptr_t)ptr;
  pthread_mutex_lock(&g_mu);
  g_n_unreg_calls++;
  size_t i = 0;
  while (i < g_n_regs && g_regs[i].base != b) i++;
  if (i == g_n_regs) {
    violation("unregister: not a registered base", b, 0);
  } else {
    if (!mapped_rw(b, g_regs[i].len)) violation("unregister: pages already gone", b, g_regs[i].len);
    g_reg_bytes -= g_regs[i].len;
    g_regs[i] = g_regs[--g_n_regs];
  }
  pthread_mutex_unlock(&g_mu);
  return ZO_OK;
}

static size_t fake_bytes(void) {
  pthread_mutex_lock(&g_mu);
  size_t n = g_reg_bytes;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* ---- log capture ---- */

static int g_reg_warnings;
static void on_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level == ZO_LOG_WARN && strstr(msg, "cannot register"))
    __atomic_fetch_add(&g_reg_warnings, 1, __ATOMIC_RELAXED);
}

/* A pinning pool registers exactly what it has committed (no refusals). */
static void check_pool_invariant(const char *when, zo_pinned_pool_t *p) {
  zo_pinned_stats_t s;
  CHECK_OK(zo_pinned_stats(p, &s));
  if (s.bytes_registered != s.bytes_mapped)
    FAIL_AT("%s: bytes_registered %zu != bytes_mapped %zu", when, s.bytes_registered,
            s.bytes_mapped);
}

typedef struct churn_arg {
  zo_pinned_pool_t *pool;
  unsigned seed;
  int fails;
} churn_arg;

/* Random sizes below and above the 1 MiB direct threshold, written, freed in random order. */
static void *churn(void *arg) {
  churn_arg *c = arg;
  void *live[32] = {0};
  size_t size[32] = {0};
  uint32_t x = c->seed;
  for (int i = 0; i < 2000; i++) {
    x = x * 1664525u + 1013904223u;
    int slot = (int)(x >> 27);
    if (live[slot]) {
      if (((uint8_t *)live[slot])[size[slot] - 1] != (uint8_t)slot) c->fails++;
      zo_pinned_free(c->pool, live[slot]);
      live[slot] = NULL;
    } else {
      size[slot] = (x & 0x100) ? 1 + ((x >> 8) & 0x3ffff) : 1 + ((x >> 4) & 0x1fffff);
      if (zo_pinned_alloc(c->pool, size[slot], 64, 0, &live[slot]) != ZO_OK) {
        c->fails++;
        continue;
      }
      ((uint8_t *)live[slot])[0] = (uint8_t)slot; /* touch both ends: mapped and writable */
      ((uint8_t *)live[slot])[size[slot] - 1] = (uint8_t)slot;
    }
  }
  for (int s = 0; s < 32; s++) zo_pinned_free(c->pool, live[s]);
  return NULL;
}

int main(void) {
  zo_log_set_handler(on_log, NULL, ZO_LOG_WARN);

  /* Before activation: a pinning pool A and a pageable pool B, each with small and direct buffers. */
  zo_pinned_opts oa = ZO_PINNED_OPTS_INIT, ob = ZO_PINNED_OPTS_INIT;
  oa.decay_ms = 0; /* free extents are decommitted at once: exercises unregister-and-split */
  ob.pin = 0;
  zo_pinned_pool_t *A = NULL, *B = NULL;
  CHECK_OK(zo_pinned_pool_create(&oa, &A));
  CHECK_OK(zo_pinned_pool_create(&ob, &B));
  if (!A || !B) return zo_test_finish("test_pinned_cuda");
  static const size_t sizes[] = {100, 5000, 70000, 300000, 2u << 20, (3u << 20) + 5};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  void *a[NS], *b[NS];
  for (int i = 0; i < NS; i++) {
    CHECK_OK(zo_pinned_alloc(A, sizes[i], 0, 1, &a[i]));
    CHECK_OK(zo_pinned_alloc(B, sizes[i], 0, 1, &b[i]));
  }
  CHECK_EQ(zo_cuda_host_active(), 0);
  CHECK_EQ(zo_pinned_is_registered(A, a[0]), 0);
  zo_pinned_stats_t s;
  CHECK_OK(zo_pinned_stats(A, &s));
  CHECK_EQ(s.bytes_registered, 0);
  CHECK_EQ(g_n_reg_calls, 0);
  CHECK_ST(zo_cuda_host_register(a[0], 4096),
           ZO_ERR_UNSUPPORTED); /* nothing to register with yet */

  /* "The first CUDA device": A's committed memory gets registered, B's never. */
  zo_cuda_host_set_fake(fake_reg, fake_unreg);
  CHECK_EQ(zo_cuda_host_active(), 1);
  for (int i = 0; i < NS; i++) {
    if (!CHECK_EQ(zo_pinned_is_registered(A, a[i]), 1)) fprintf(stderr, "  size %zu\n", sizes[i]);
    CHECK_EQ(zo_pinned_is_registered(B, b[i]), 0);
  }
  check_pool_invariant("after activation", A);
  CHECK_OK(zo_pinned_stats(A, &s));
  CHECK_EQ(fake_bytes(), s.bytes_registered);
  CHECK_OK(zo_pinned_stats(B, &s));
  CHECK_EQ(s.bytes_registered, 0);

  /* After activation: new buffers register when mapped; frees and trims unregister first. */
  for (int i = 0; i < NS; i += 2) {
    zo_pinned_free(A, a[i]);
    zo_pinned_free(B, b[i]);
  }
  check_pool_invariant("after frees", A);
  void *c[NS];
  for (int i = 0; i < NS; i++) {
    CHECK_OK(zo_pinned_alloc(A, sizes[NS - 1 - i] + 17, 4096, 0, &c[i]));
    if (c[i]) memset(c[i], 0x5a, sizes[NS - 1 - i] + 17);
    CHECK_EQ(zo_pinned_is_registered(A, c[i]), 1);
  }
  CHECK_OK(zo_pinned_pool_trim(A));
  check_pool_invariant("after trim", A);

  /* Many threads churning: the ranges stay disjoint and exact. */
  pthread_t t[4];
  churn_arg ca[4];
  for (int i = 0; i < 4; i++) {
    ca[i] = (churn_arg){A, 101u + (unsigned)i, 0};
    pthread_create(&t[i], NULL, churn, &ca[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(ca[i].fails, 0);
  }
  CHECK_OK(zo_pinned_pool_trim(A));
  check_pool_invariant("after churn", A);
  CHECK_OK(zo_pinned_stats(A, &s));
  CHECK_EQ(fake_bytes(), s.bytes_registered);
  CHECK_EQ(s.n_register_failures, 0);
  printf("churn: %zu registrations, %zu unregistrations, %zu bytes registered now\n", g_n_reg_calls,
         g_n_unreg_calls, s.bytes_registered);
  CHECK(g_n_unreg_calls > 0);

  /* The engine's process-wide pool, created after activation, registers too. */
  void *e = NULL;
  int pinned = -1;
  CHECK_OK(zo_host_alloc(5u << 20, 1, &e, &pinned));
  CHECK_EQ(zo_pinned_is_registered(zo_host_pool(), e), 1);
  zo_host_free(e, 5u << 20, pinned);

  /* Destroying a pool drops every registration it made, before unmapping. */
  for (int i = 1; i < NS; i += 2) zo_pinned_free(A, a[i]);
  /* c[] is left allocated on purpose: destroy discards it with the arena. */
  zo_pinned_pool_destroy(A);
  zo_pinned_pool_destroy(B);
  zo_pinned_stats_t hs;
  CHECK_OK(zo_pinned_stats(zo_host_pool(), &hs));
  CHECK_EQ(fake_bytes(), hs.bytes_registered); /* only the process pool's (its metadata) remains */

  /* Refused registrations: the pool keeps working, pageable for the GPU, one warning. */
  zo_pinned_pool_t *C = NULL;
  CHECK_OK(zo_pinned_pool_create(&oa, &C));
  if (!C) return zo_test_finish("test_pinned_cuda");
  pthread_mutex_lock(&g_mu);
  g_fail = 1;
  pthread_mutex_unlock(&g_mu);
  void *f1 = NULL, *f2 = NULL;
  CHECK_OK(zo_pinned_alloc(C, 2u << 20, 0, 1, &f1));
  CHECK_OK(zo_pinned_alloc(C, 3u << 20, 0, 1, &f2));
  CHECK_EQ(zo_pinned_is_registered(C, f1), 0);
  CHECK_EQ(zo_pinned_is_registered(C, f2), 0);
  if (f1) memset(f1, 1, 2u << 20);
  CHECK_OK(zo_pinned_stats(C, &s));
  CHECK(s.n_register_failures >= 2);
  CHECK_EQ(g_reg_warnings, 1);
  pthread_mutex_lock(&g_mu);
  g_fail = 0;
  pthread_mutex_unlock(&g_mu);
  void *f3 = NULL;
  CHECK_OK(zo_pinned_alloc(C, 2u << 20, 0, 1, &f3));
  CHECK_EQ(zo_pinned_is_registered(C, f3), 1);
  zo_pinned_free(C, f1);
  zo_pinned_free(C, f2);
  zo_pinned_free(C, f3);
  zo_pinned_pool_destroy(C);
  CHECK_EQ(g_reg_warnings, 1);

  if (g_violations)
    FAIL_AT("%zu fake-registration violations; first: %s", g_violations, g_first_violation);
  return zo_test_finish("test_pinned_cuda");
}
