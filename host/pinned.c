/*
 * pinned.c - the pinned host pool: a jemalloc arena whose extent hooks mmap,
 * NUMA-bind (hwloc), mlock and, once a CUDA device exists, register memory
 * with CUDA (cudaHostRegister, through gpu/cuda_host.h), plus the engine's
 * zo_host_* calls on a process-wide pool. Not the process malloc. Where the
 * process cannot have jemalloc (base/jemalloc_rt.h: a Python interpreter
 * started without extra static TLS), every buffer is mapped on its own, as
 * buffers of DIRECT_MIN_BYTES and up always are: page granular, no arena.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <hwloc.h>
#include <jemalloc/jemalloc.h> /* types and MALLOCX_* flags only: the functions come from jemalloc_rt.h */

#include "base_internal.h"
#include "jemalloc_rt.h"
#include "cuda_host.h"
#include "pinned_internal.h"
#include "zoffload/pinned.h"

/*
 * Buffers of at least this many bytes are mapped on their own, at their exact
 * page count, instead of through the arena: jemalloc rounds large buffers up
 * to size classes 25% apart, pads them by a page (cache-oblivious layout) and,
 * with opt.retain, keeps the tail of every extent it grows for reuse until
 * the arena is destroyed. Pinned, those spares are locked RAM nobody uses.
 * At 1 MiB and up an mmap + mlock per buffer is cheap next to filling it.
 */
#define DIRECT_MIN_BYTES ((size_t)1 << 20)

/* One mmap the pool made: an extent from the alloc hook, or a direct buffer. */
typedef struct region {
  uintptr_t base;
  size_t len;  /* bytes mapped by the mmap, after trimming */
  size_t live; /* bytes of it not yet unmapped (jemalloc may return pieces) */
  int pinned;  /* mlock succeeded */
  int direct;  /* a direct buffer (not jemalloc's): freed whole by zo_pinned_free() */
} region;

/*
 * A committed (mapped read-write) range of a pinning pool, and whether it is
 * registered with CUDA. The ranges are disjoint and cover exactly the pool's
 * committed memory: one per mapping, split when jemalloc decommits part of
 * it. CUDA registrations cannot be split, so decommitting part of a range
 * unregisters it whole and registers what stays committed again.
 */
typedef struct crange {
  uintptr_t base;
  size_t len;
  int registered;
} crange;

struct zo_pinned_pool {
  extent_hooks_t hooks; /* first: the hooks get &hooks and cast back to the pool */
  const zo_je *je;      /* NULL: no jemalloc in this process, every buffer direct */
  unsigned arena;
  int have_arena;
  zo_pinned_opts opts;
  size_t page;
  hwloc_topology_t topo; /* only with numa_node >= 0 */
  hwloc_nodeset_t nodeset;
  pthread_mutex_t mu; /* guards regs/n_regs/cap_regs and crs/n_crs/cap_crs */
  region *regs;       /* mmap'ed, not malloc'ed: hooks run inside jemalloc */
  size_t n_regs, cap_regs;
  crange *crs; /* committed ranges, only when opts.pin (mmap'ed too) */
  size_t n_crs, cap_crs;
  struct zo_pinned_pool *prev_pool, *next_pool; /* g_pools, under g_pools_mu */
  atomic_size_t bytes_reserved, bytes_mapped, bytes_pinned, bytes_allocated, n_allocs,
      n_pin_failures, n_unpinned_live;
  atomic_size_t bytes_registered, n_register_failures;
  char reg_err[256]; /* the latest refused cudaHostRegister's error, under mu ("" when none) */
};

/* ------------------------------------------------------------ regions */

/* Room for one more entry of @esz bytes in the table *@tab of *@cap entries,
 * @n used: doubled (from 256) when full. The tables live in their own
 * mappings, not in malloc, which is jemalloc and may be re-entered from the
 * extent hooks that call this. 0, or -1 when it cannot grow. */
static int table_reserve(void **tab, size_t *cap, size_t n, size_t esz) {
  if (n < *cap) return 0;
  size_t ncap = *cap ? *cap * 2 : 256;
  void *t =
      *tab ? mremap(*tab, *cap * esz, ncap * esz, MREMAP_MAYMOVE)
           : mmap(NULL, ncap * esz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (t == MAP_FAILED) return -1;
  *tab = t;
  *cap = ncap;
  return 0;
}

/* Append a region; 0 or -1 when the table cannot grow. Caller holds mu. */
static int regions_add(zo_pinned_pool_t *p, region r) {
  if (table_reserve((void **)&p->regs, &p->cap_regs, p->n_regs, sizeof(region))) return -1;
  p->regs[p->n_regs++] = r;
  return 0;
}

/* ------------------------------------------------ CUDA registration */
/*
 * Why cudaHostRegister and not cudaHostAlloc: the extent hooks own the
 * mapping (placement on a NUMA node, mlock, decommit of free extents by
 * remapping), so the memory must come from our mmap; registration pins what
 * we mapped. Not yet measured on a GPU: `zo-report --json` times pinning 256
 * MiB both ways and the H2D GB/s out of each (gpus[].pinning); decommit
 * churn with decay_ms 0 shows as pinned pool stats n_register_failures and
 * bytes_registered in zo-stepbench runs.
 *
 * Every range is unregistered BEFORE its pages are dropped or unmapped, and
 * registered only after they are mapped: CUDA must never hold a registration
 * over pages the kernel no longer backs the way it pinned them.
 */

static pthread_mutex_t g_pools_mu = PTHREAD_MUTEX_INITIALIZER;
static zo_pinned_pool_t *g_pools; /* live pools, walked when CUDA becomes active */

static void cr_register(zo_pinned_pool_t *p, crange *c) {
  if (c->registered || !zo_cuda_host_active()) return;
  if (zo_cuda_host_register((void *)c->base, c->len) == ZO_OK) {
    c->registered = 1;
    atomic_fetch_add(&p->bytes_registered, c->len);
    return;
  }
  atomic_fetch_add(&p->n_register_failures, 1);
  snprintf(p->reg_err, sizeof p->reg_err, "%s", zo_last_error());
  zo_warn_once(
      "pinned host pool: cannot register %zu bytes with CUDA (%s); that memory stays pageable for the GPU "
      "(mlock only): host<->device copies from it are staged by the driver, slower, and may block",
      c->len, zo_last_error());
}

/* Track [base, base+len), just committed, and register it when CUDA is active. Caller holds mu. */
static void cr_add(zo_pinned_pool_t *p, uintptr_t base, size_t len) {
  if (!p->opts.pin || len == 0) return;
  if (table_reserve((void **)&p->crs, &p->cap_crs, p->n_crs, sizeof(crange))) {
    zo_warn_once(
        "pinned host pool: cannot grow the table of committed ranges; %zu bytes will not be registered "
        "with CUDA",
        len);
    return;
  }
  crange *c = &p->crs[p->n_crs++];
  *c = (crange){base, len, 0};
  cr_register(p, c);
}

/*
 * [base, base+len) is about to be decommitted or unmapped: unregister every
 * range overlapping it, and keep (register again) the parts outside it.
 * Caller holds mu.
 */
static void cr_remove(zo_pinned_pool_t *p, uintptr_t base, size_t len) {
  const uintptr_t a = base, b = base + len;
  for (size_t i = 0; i < p->n_crs;) {
    crange c = p->crs[i];
    if (c.base >= b || c.base + c.len <= a) {
      i++;
      continue;
    }
    if (c.registered) {
      if (zo_cuda_host_unregister((void *)c.base) != ZO_OK)
        zo_warn_once("pinned host pool: %s; the pages stay locked by the driver", zo_last_error());
      atomic_fetch_sub(&p->bytes_registered, c.len);
    }
    p->crs[i] = p->crs[--p->n_crs]; /* i now holds the former last range: look at it next */
    /* Pieces appended at the end lie outside [a, b): the loop passes over them. */
    if (c.base < a) cr_add(p, c.base, a - c.base);
    if (c.base + c.len > b) cr_add(p, b, c.base + c.len - b);
  }
}

/* The activation hook: register what every live pool committed before a CUDA device existed. */
static void cr_on_cuda_active(void) {
  pthread_mutex_lock(&g_pools_mu);
  for (zo_pinned_pool_t *p = g_pools; p; p = p->next_pool) {
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_crs; i++) cr_register(p, &p->crs[i]);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&g_pools_mu);
}

static void cr_install_hook(void) { zo_cuda_host_set_activate_hook(cr_on_cuda_active); }

/* Index of the region holding @addr, or -1. Caller holds mu. */
static long regions_find(const zo_pinned_pool_t *p, uintptr_t addr) {
  for (size_t i = 0; i < p->n_regs; i++)
    if (addr >= p->regs[i].base && addr < p->regs[i].base + p->regs[i].len) return (long)i;
  return -1;
}

/* --------------------------------------------------------- map / unmap */

void zo_memlock_limits(char soft[32], char hard[32]) {
  struct rlimit rl = {0, 0};
  snprintf(soft, 32, "unknown");
  snprintf(hard, 32, "unknown");
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return;
  if (rl.rlim_cur == RLIM_INFINITY)
    snprintf(soft, 32, "unlimited");
  else
    snprintf(soft, 32, "%llu bytes", (unsigned long long)rl.rlim_cur);
  if (rl.rlim_max == RLIM_INFINITY)
    snprintf(hard, 32, "unlimited");
  else
    snprintf(hard, 32, "%llu bytes", (unsigned long long)rl.rlim_max);
}

static void warn_pin_refused(size_t nbytes, int err) {
  char soft[32], hard[32];
  zo_memlock_limits(soft, hard);
  zo_warn_once(
      "pinned host pool: cannot pin %zu bytes (mlock: %s); RLIMIT_MEMLOCK is %s (hard limit %s). "
      "Falling back to pageable host memory: host<->device and NVMe transfers will be slower. "
      "Raise the limit with `ulimit -l unlimited` in the launching shell, a `memlock` line in "
      "/etc/security/limits.conf (e.g. `* - memlock unlimited`), or LimitMEMLOCK=infinity in the "
      "systemd unit; or grant CAP_IPC_LOCK",
      nbytes, strerror(err), soft, hard);
}

/*
 * Fault [addr, addr+len) in on several threads before mlock. mlock populates
 * a range on the calling thread, and the kernel clears each new page as it
 * faults it in: some 2.5 GB/s on one core, so the 108 GiB of gpt-10b's
 * optimizer state took about 45 s before its first step. Writing one byte per
 * page from up to PREFAULT_MAX_THREADS threads (each at least
 * PREFAULT_MIN_BYTES) spreads the clearing over the cores; mlock then finds
 * the pages resident. After the NUMA bind, so first touch obeys it. The bytes
 * written are zeros, what a fresh anonymous page holds anyway. A thread that
 * cannot be started leaves its range to the caller.
 */
#define PREFAULT_MIN_BYTES ((size_t)256 << 20)
#define PREFAULT_MAX_THREADS 16

typedef struct prefault_range {
  volatile uint8_t *base;
  size_t len, page;
} prefault_range;

static void *prefault_run(void *arg) {
  const prefault_range *r = arg;
  for (size_t off = 0; off < r->len; off += r->page) r->base[off] = 0;
  return NULL;
}

static void prefault_parallel(void *addr, size_t len, size_t page) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  size_t n = len / PREFAULT_MIN_BYTES;
  if (cpus > 0 && n > (size_t)cpus) n = (size_t)cpus;
  if (n > PREFAULT_MAX_THREADS) n = PREFAULT_MAX_THREADS;
  if (n < 2) return; /* one thread: mlock's own population is as fast */
  pthread_t tid[PREFAULT_MAX_THREADS];
  prefault_range rs[PREFAULT_MAX_THREADS];
  int started[PREFAULT_MAX_THREADS] = {0};
  const size_t pages = len / page, per = pages / n;
  for (size_t i = 0; i < n; i++) {
    const size_t first = i * per, count = i + 1 == n ? pages - first : per;
    rs[i] = (prefault_range){(volatile uint8_t *)addr + first * page, count * page, page};
    if (i > 0) started[i] = pthread_create(&tid[i], NULL, prefault_run, &rs[i]) == 0;
  }
  prefault_run(&rs[0]);
  for (size_t i = 1; i < n; i++) {
    if (started[i])
      pthread_join(tid[i], NULL);
    else
      prefault_run(&rs[i]);
  }
}

/*
 * Bind [addr, addr+len) to the pool's NUMA node and lock it when the pool
 * pins. Call before the first touch (mlock faults the pages in), so they land
 * on the node. Returns 1 when locked, 0 when pageable.
 */
static int place_and_lock(zo_pinned_pool_t *p, void *addr, size_t len) {
  if (p->topo && hwloc_set_area_membind(p->topo, addr, len, p->nodeset, HWLOC_MEMBIND_BIND,
                                        HWLOC_MEMBIND_BYNODESET) != 0)
    zo_warn_once(
        "pinned host pool: cannot bind memory to NUMA node %d (%s); pages go where first touch puts them",
        p->opts.numa_node, strerror(errno));
  if (!p->opts.pin) return 0;
  prefault_parallel(addr, len, p->page);
  if (mlock(addr, len) == 0) return 1;
  int err = errno;
  munlock(addr, len); /* in case part of it got locked */
  atomic_fetch_add(&p->n_pin_failures, 1);
  warn_pin_refused(len, err);
  return 0;
}

static void account(zo_pinned_pool_t *p, size_t len, int pinned, int sign) {
  if (sign > 0) {
    atomic_fetch_add(&p->bytes_mapped, len);
    atomic_fetch_add(pinned ? &p->bytes_pinned : &p->n_unpinned_live, len);
  } else {
    atomic_fetch_sub(&p->bytes_mapped, len);
    atomic_fetch_sub(pinned ? &p->bytes_pinned : &p->n_unpinned_live, len);
  }
}

/*
 * Map @size bytes aligned to @align (a power of two), place and lock them.
 * Pages come back zero (fresh anonymous memory) and resident when locked.
 * Returns NULL when mmap fails or the region table cannot grow.
 */
static void *map_region(zo_pinned_pool_t *p, size_t size, size_t align, int direct) {
  if (align < p->page) align = p->page;
  size_t extra = align - p->page;
  if (size > SIZE_MAX - extra) return NULL;
  uint8_t *raw =
      mmap(NULL, size + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t a = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
  if (a > (uintptr_t)raw) munmap(raw, a - (uintptr_t)raw);
  uintptr_t end = (uintptr_t)raw + size + extra;
  if (end > a + size) munmap((void *)(a + size), end - (a + size));
  void *addr = (void *)a;

  int pinned = place_and_lock(p, addr, size);
  region r = {a, size, size, pinned, direct};
  pthread_mutex_lock(&p->mu);
  int rc = regions_add(p, r);
  if (rc == 0) cr_add(p, a, size);
  pthread_mutex_unlock(&p->mu);
  if (rc != 0) {
    if (pinned) munlock(addr, size);
    munmap(addr, size);
    return NULL;
  }
  atomic_fetch_add(&p->bytes_reserved, size);
  account(p, size, pinned, +1);
  return addr;
}

/* Pinned flag of the region holding @addr; -1 when none does. */
static int region_pinned(zo_pinned_pool_t *p, const void *addr) {
  pthread_mutex_lock(&p->mu);
  long i = regions_find(p, (uintptr_t)addr);
  int pinned = i >= 0 ? p->regs[i].pinned : -1;
  pthread_mutex_unlock(&p->mu);
  return pinned;
}

/* Unlock (when @pinned) and drop the pages of [addr, addr+len), keeping the
 * addresses reserved (PROT_NONE, no backing). Returns 0, or -1 when the remap
 * failed (the pages then stay). */
static int drop_pages(void *addr, size_t len, int pinned) {
  if (pinned) munlock(addr, len);
  return mmap(addr, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
              0) == MAP_FAILED
             ? -1
             : 0;
}

/*
 * Give back [addr, addr+size), a piece of one region (jemalloc splits
 * extents); @committed says whether it still holds memory. The piece is
 * unlocked and its pages dropped, but its addresses stay reserved until the
 * whole region is given back, so a region is only ever unmapped whole and no
 * other mapping can have moved into part of it.
 */
static void unmap_range(zo_pinned_pool_t *p, void *addr, size_t size, int committed) {
  pthread_mutex_lock(&p->mu);
  long i = regions_find(p, (uintptr_t)addr);
  if (i < 0) { /* not ours: cannot happen under jemalloc's contract; leave it alone */
    pthread_mutex_unlock(&p->mu);
    return;
  }
  region r = p->regs[i];
  p->regs[i].live -= size < r.live ? size : r.live;
  int whole = p->regs[i].live == 0;
  if (whole) p->regs[i] = p->regs[--p->n_regs];
  if (whole)
    cr_remove(p, r.base, r.len);
  else
    cr_remove(p, (uintptr_t)addr, size);
  pthread_mutex_unlock(&p->mu);
  if (whole) {
    if (committed && r.pinned) munlock(addr, size);
    munmap((void *)r.base, r.len);
    atomic_fetch_sub(&p->bytes_reserved, r.len);
  } else {
    drop_pages(addr, size, committed && r.pinned);
  }
  if (committed) account(p, size, r.pinned, -1);
}

/* ------------------------------------------------------- extent hooks */
/*
 * jemalloc convention: bool hooks return false on success, true to refuse.
 * Address space is never given back while the arena lives (dalloc refused,
 * as jemalloc's own hooks do with opt.retain): a free extent is decommitted
 * instead, which unlocks it and drops its pages, and committed again, placed
 * and locked anew, when jemalloc reuses it.
 */

static zo_pinned_pool_t *pool_of(extent_hooks_t *h) { return (zo_pinned_pool_t *)(void *)h; }

static void *hook_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t alignment,
                        bool *zero, bool *commit, unsigned arena_ind) {
  (void)arena_ind;
  if (new_addr) return NULL; /* no growing in place; jemalloc then maps elsewhere */
  void *addr = map_region(pool_of(h), size, alignment, 0);
  if (!addr) return NULL;
  *zero = true;
  *commit = true;
  return addr;
}

/* Arena destroyed: its retained extents go back to the kernel. */
static void hook_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed,
                         unsigned arena_ind) {
  (void)arena_ind;
  unmap_range(pool_of(h), addr, size, committed);
}

/* Back [addr+offset, +length) with fresh zero pages again, placed and locked like its region. */
static bool hook_commit(extent_hooks_t *h, void *addr, size_t size, size_t offset, size_t length,
                        unsigned arena_ind) {
  (void)size, (void)arena_ind;
  zo_pinned_pool_t *p = pool_of(h);
  uint8_t *a = (uint8_t *)addr + offset;
  int want_pin = region_pinned(p, addr);
  if (want_pin < 0) return true;
  if (mmap(a, length, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
      MAP_FAILED)
    return true;
  int pinned = place_and_lock(p, a, length);
  if (pinned != want_pin) {
    /* A pinned region cannot take a pageable piece (or the accounting lies): refuse; jemalloc maps anew. */
    drop_pages(a, length, pinned);
    return true;
  }
  account(p, length, pinned, +1);
  pthread_mutex_lock(&p->mu);
  cr_add(p, (uintptr_t)a, length);
  pthread_mutex_unlock(&p->mu);
  return false;
}

/* Unlock [addr+offset, +length) and drop its pages, keeping the addresses. */
static bool hook_decommit(extent_hooks_t *h, void *addr, size_t size, size_t offset, size_t length,
                          unsigned arena_ind) {
  (void)size, (void)arena_ind;
  zo_pinned_pool_t *p = pool_of(h);
  uint8_t *a = (uint8_t *)addr + offset;
  int pinned = region_pinned(p, addr);
  if (pinned < 0) return true;
  pthread_mutex_lock(&p->mu);
  cr_remove(p, (uintptr_t)a, length);
  pthread_mutex_unlock(&p->mu);
  if (drop_pages(a, length, pinned)) {
    if (pinned && mlock(a, length) != 0) account(p, length, 1, -1), account(p, length, 0, +1);
    pthread_mutex_lock(&p->mu); /* the pages stayed: committed (and registered) again */
    cr_add(p, (uintptr_t)a, length);
    pthread_mutex_unlock(&p->mu);
    return true;
  }
  account(p, length, pinned, -1);
  return false;
}

static bool hook_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a, size_t size_b,
                       bool committed, unsigned arena_ind) {
  (void)h, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
  return false;
}

/* Merge only pieces of one mmap, so every extent is pinned or pageable as a whole. */
static bool hook_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
                       bool committed, unsigned arena_ind) {
  (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
  zo_pinned_pool_t *p = pool_of(h);
  pthread_mutex_lock(&p->mu);
  long ia = regions_find(p, (uintptr_t)addr_a), ib = regions_find(p, (uintptr_t)addr_b);
  pthread_mutex_unlock(&p->mu);
  return !(ia >= 0 && ia == ib);
}

/* ------------------------------------------------------------- pool */

static zo_status arena_ctl_size(const zo_je *je, unsigned arena, const char *name, size_t v) {
  char key[64];
  snprintf(key, sizeof key, "arena.%u.%s", arena, name);
  int rc = je->mallctl(key, NULL, NULL, &v, sizeof v);
  if (rc)
    return zo_error_set(ZO_ERR_SYSTEM, "pinned host pool: mallctl(\"%s\", %zu): %s", key, v,
                        strerror(rc));
  return ZO_OK;
}

static zo_status arena_ctl_ssize(const zo_je *je, unsigned arena, const char *name, ssize_t v) {
  char key[64];
  snprintf(key, sizeof key, "arena.%u.%s", arena, name);
  int rc = je->mallctl(key, NULL, NULL, &v, sizeof v);
  if (rc)
    return zo_error_set(ZO_ERR_SYSTEM, "pinned host pool: mallctl(\"%s\", %zd): %s", key, v,
                        strerror(rc));
  return ZO_OK;
}

zo_status zo_pinned_pool_create(const zo_pinned_opts *opts, zo_pinned_pool_t **out) {
  static const zo_pinned_opts defaults = ZO_PINNED_OPTS_INIT;
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "pinned host pool: out is NULL");
  *out = NULL;
  if (!opts) opts = &defaults;
  if (opts->numa_node < -1 || (opts->pin != 0 && opts->pin != 1) || opts->decay_ms < -1)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "pinned host pool: bad options (numa_node %d, pin %d, decay_ms %d)",
                        opts->numa_node, opts->pin, opts->decay_ms);
  zo_pinned_pool_t *p = calloc(1, sizeof *p);
  if (!p) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "pinned host pool: out of host memory");
  p->opts = *opts;
  p->page = (size_t)sysconf(_SC_PAGESIZE);
  pthread_mutex_init(&p->mu, NULL);
  zo_status st = ZO_OK;
  if (opts->pin) {
    /* On the list before the first extent is mapped, so a CUDA activation from now on finds it. */
    static pthread_once_t hook_once = PTHREAD_ONCE_INIT;
    pthread_once(&hook_once, cr_install_hook);
    pthread_mutex_lock(&g_pools_mu);
    p->next_pool = g_pools;
    if (g_pools) g_pools->prev_pool = p;
    g_pools = p;
    pthread_mutex_unlock(&g_pools_mu);
  }

  if (opts->numa_node >= 0) {
    if (hwloc_topology_init(&p->topo) != 0) {
      p->topo = NULL;
      st = zo_error_set(ZO_ERR_SYSTEM, "pinned host pool: hwloc_topology_init failed");
      goto fail;
    }
    if (hwloc_topology_load(p->topo) != 0) {
      st = zo_error_set(ZO_ERR_SYSTEM, "pinned host pool: hwloc_topology_load failed");
      goto fail;
    }
    int n_nodes = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_NUMANODE);
    hwloc_obj_t node =
        hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_NUMANODE, (unsigned)opts->numa_node);
    if (!node) {
      st = zo_error_set(ZO_ERR_INVALID_ARG,
                        "pinned host pool: NUMA node %d does not exist (this machine has %d)",
                        opts->numa_node, n_nodes);
      goto fail;
    }
    p->nodeset = hwloc_bitmap_dup(node->nodeset);
    if (!p->nodeset) {
      st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "pinned host pool: out of host memory");
      goto fail;
    }
  }

  p->je = zo_je_get();
  if (!p->je) {
    zo_log_once(ZO_LOG_INFO,
                "pinned host pool: no jemalloc (%s): each pinned buffer is mapped on its own, in "
                "whole pages",
                zo_je_why());
    *out = p;
    return ZO_OK;
  }
  /* Everything the hooks touch is ready: jemalloc maps the arena's metadata through them right away. */
  p->hooks = (extent_hooks_t){.alloc = hook_alloc,
                              .dalloc = NULL, /* refused: see "extent hooks" above */
                              .destroy = hook_destroy,
                              .commit = hook_commit,
                              .decommit = hook_decommit,
                              .purge_lazy =
                                  NULL, /* refused: pages of a locked extent stay until decommit */
                              .purge_forced = NULL,
                              .split = hook_split,
                              .merge = hook_merge};
  extent_hooks_t *hp = &p->hooks;
  size_t sz = sizeof p->arena;
  int rc = p->je->mallctl("arenas.create", &p->arena, &sz, &hp, sizeof hp);
  if (rc) {
    st = zo_error_set(ZO_ERR_SYSTEM, "pinned host pool: jemalloc arenas.create: %s", strerror(rc));
    goto fail;
  }
  p->have_arena = 1;
  /* Grow extents by what is asked, not exponentially: retained spare extents would stay pinned. */
  ZO_CHECK_GOTO(arena_ctl_size(p->je, p->arena, "retain_grow_limit", p->page), st, fail);
  if (opts->decay_ms >= 0) {
    ZO_CHECK_GOTO(arena_ctl_ssize(p->je, p->arena, "dirty_decay_ms", opts->decay_ms), st, fail);
    ZO_CHECK_GOTO(arena_ctl_ssize(p->je, p->arena, "muzzy_decay_ms", opts->decay_ms), st, fail);
  }
  *out = p;
  return ZO_OK;
fail:
  zo_pinned_pool_destroy(p);
  return st;
}

void zo_pinned_pool_destroy(zo_pinned_pool_t *p) {
  if (!p) return;
  if (p->opts.pin) { /* off the list first: an activation cannot register what is going away */
    pthread_mutex_lock(&g_pools_mu);
    if (p->prev_pool)
      p->prev_pool->next_pool = p->next_pool;
    else if (g_pools == p)
      g_pools = p->next_pool;
    if (p->next_pool) p->next_pool->prev_pool = p->prev_pool;
    pthread_mutex_unlock(&g_pools_mu);
  }
  if (p->have_arena) {
    char key[64];
    snprintf(key, sizeof key, "arena.%u.destroy", p->arena);
    int rc = p->je->mallctl(key, NULL, NULL, NULL, 0);
    if (rc)
      zo_warn("pinned host pool: jemalloc %s: %s; its extents stay mapped", key, strerror(rc));
    if (rc) goto out; /* jemalloc may still use them */
  }
  /* Direct buffers never freed, and anything jemalloc did not hand back. */
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < p->n_regs; i++) cr_remove(p, p->regs[i].base, p->regs[i].len);
  pthread_mutex_unlock(&p->mu);
  for (size_t i = 0; i < p->n_regs; i++) {
    region *r = &p->regs[i];
    if (r->pinned) munlock((void *)r->base, r->len);
    munmap((void *)r->base, r->len);
  }
  if (p->regs) munmap(p->regs, p->cap_regs * sizeof(region));
  if (p->crs) munmap(p->crs, p->cap_crs * sizeof(crange));
out:
  if (p->nodeset) hwloc_bitmap_free(p->nodeset);
  if (p->topo) hwloc_topology_destroy(p->topo);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static int arena_flags(const zo_pinned_pool_t *p, size_t align) {
  return MALLOCX_ARENA(p->arena) | MALLOCX_ALIGN(align) | MALLOCX_TCACHE_NONE;
}

zo_status zo_pinned_alloc(zo_pinned_pool_t *p, size_t nbytes, size_t align, int zero, void **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "pinned alloc: out is NULL");
  *out = NULL;
  if (!p || nbytes == 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "pinned alloc: %s", p ? "nbytes is 0" : "pool is NULL");
  if (align == 0) align = 16;
  if (align & (align - 1))
    return zo_error_set(ZO_ERR_INVALID_ARG, "pinned alloc: alignment %zu is not a power of two",
                        align);

  int flags = arena_flags(p, align);
  size_t pages = nbytes > SIZE_MAX - p->page ? SIZE_MAX : (nbytes + p->page - 1) & ~(p->page - 1);
  if (nbytes >= DIRECT_MIN_BYTES || !p->have_arena) {
    if (pages == SIZE_MAX)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "pinned alloc: %zu bytes is too large", nbytes);
    void *a = map_region(p, pages, align, 1);
    if (!a)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "pinned alloc: cannot map %zu bytes: %s", pages,
                          strerror(errno));
    atomic_fetch_add(&p->bytes_allocated, pages);
    atomic_fetch_add(&p->n_allocs, 1);
    *out = a; /* fresh anonymous pages are zero */
    return ZO_OK;
  }
  void *a = p->je->mallocx(nbytes, flags | (zero ? MALLOCX_ZERO : 0));
  if (!a)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "pinned alloc: cannot allocate %zu bytes (alignment %zu)", nbytes, align);
  atomic_fetch_add(&p->bytes_allocated, p->je->sallocx(a, 0));
  atomic_fetch_add(&p->n_allocs, 1);
  *out = a;
  return ZO_OK;
}

/* 1 when @ptr is the start of a direct buffer of @p (its length in *len). */
static int find_direct(zo_pinned_pool_t *p, const void *ptr, size_t *len) {
  int found = 0;
  pthread_mutex_lock(&p->mu);
  long i = regions_find(p, (uintptr_t)ptr);
  if (i >= 0 && p->regs[i].direct && p->regs[i].base == (uintptr_t)ptr) {
    found = 1;
    *len = p->regs[i].len;
  }
  pthread_mutex_unlock(&p->mu);
  return found;
}

void zo_pinned_free(zo_pinned_pool_t *p, void *ptr) {
  if (!p || !ptr) return;
  size_t len;
  if (find_direct(p, ptr, &len)) {
    unmap_range(p, ptr, len, 1);
    atomic_fetch_sub(&p->bytes_allocated, len);
  } else {
    atomic_fetch_sub(&p->bytes_allocated, p->je->sallocx(ptr, 0));
    p->je->dallocx(ptr, MALLOCX_TCACHE_NONE);
  }
  atomic_fetch_sub(&p->n_allocs, 1);
}

int zo_pinned_is_registered(zo_pinned_pool_t *p, const void *ptr) {
  if (!p || !ptr) return 0;
  int reg = 0;
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < p->n_crs; i++)
    if ((uintptr_t)ptr >= p->crs[i].base && (uintptr_t)ptr < p->crs[i].base + p->crs[i].len) {
      reg = p->crs[i].registered;
      break;
    }
  pthread_mutex_unlock(&p->mu);
  return reg;
}

/* Bytes of [@ptr, @ptr + @nbytes) that no registered range of @p covers; *@why the pool's latest registration
 * error. The committed ranges are disjoint, so the covered parts add up to at most @nbytes. */
static size_t unregistered_in(zo_pinned_pool_t *p, const void *ptr, size_t nbytes, char *why,
                              size_t why_len) {
  const uintptr_t a = (uintptr_t)ptr, b = nbytes > UINTPTR_MAX - a ? UINTPTR_MAX : a + nbytes;
  size_t covered = 0;
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < p->n_crs; i++) {
    const crange *c = &p->crs[i];
    if (!c->registered) continue;
    const uintptr_t lo = c->base > a ? c->base : a,
                    hi = c->base + c->len < b ? c->base + c->len : b;
    if (lo < hi) covered += hi - lo;
  }
  if (why && why_len) snprintf(why, why_len, "%s", p->reg_err);
  pthread_mutex_unlock(&p->mu);
  return covered < nbytes ? nbytes - covered : 0;
}

int zo_pinned_is_pinned(zo_pinned_pool_t *p, const void *ptr) {
  if (!p || !ptr) return 0;
  pthread_mutex_lock(&p->mu);
  long i = regions_find(p, (uintptr_t)ptr);
  int pinned = i >= 0 && p->regs[i].pinned;
  pthread_mutex_unlock(&p->mu);
  return pinned;
}

/* 1 when @ptr lies in a region of @p (any buffer, any offset). */
static int pool_owns(zo_pinned_pool_t *p, const void *ptr) {
  pthread_mutex_lock(&p->mu);
  long i = regions_find(p, (uintptr_t)ptr);
  pthread_mutex_unlock(&p->mu);
  return i >= 0;
}

static pthread_once_t g_allocator_once = PTHREAD_ONCE_INIT;
static char g_allocator[640];

static void allocator_init(void) {
  const zo_je *je = zo_je_get();
  if (je)
    snprintf(g_allocator, sizeof g_allocator, "jemalloc %s (%s)", je->version, je->source);
  else
    snprintf(g_allocator, sizeof g_allocator, "page mappings (no jemalloc: %s)", zo_je_why());
}

const char *zo_host_allocator(void) {
  pthread_once(&g_allocator_once, allocator_init);
  return g_allocator;
}

int zo_host_jemalloc(const char **version, const char **detail) {
  const zo_je *je = zo_je_get();
  if (version) *version = je ? je->version : NULL;
  if (detail) *detail = je ? je->source : zo_je_why();
  return je != NULL;
}

zo_status zo_pinned_pool_trim(zo_pinned_pool_t *p) {
  if (!p) return zo_error_set(ZO_ERR_INVALID_ARG, "pinned trim: pool is NULL");
  if (!p->have_arena) return ZO_OK; /* direct buffers only: nothing is held back */
  char key[64];
  snprintf(key, sizeof key, "arena.%u.purge", p->arena);
  int rc = p->je->mallctl(key, NULL, NULL, NULL, 0);
  if (rc) return zo_error_set(ZO_ERR_SYSTEM, "pinned trim: mallctl(\"%s\"): %s", key, strerror(rc));
  return ZO_OK;
}

zo_status zo_pinned_stats(zo_pinned_pool_t *p, zo_pinned_stats_t *s) {
  if (!p || !s) return zo_error_set(ZO_ERR_INVALID_ARG, "pinned stats: NULL argument");
  s->bytes_allocated = atomic_load(&p->bytes_allocated);
  s->bytes_mapped = atomic_load(&p->bytes_mapped);
  s->bytes_reserved = atomic_load(&p->bytes_reserved);
  s->bytes_pinned = atomic_load(&p->bytes_pinned);
  s->n_allocs = atomic_load(&p->n_allocs);
  s->n_pin_failures = atomic_load(&p->n_pin_failures);
  s->pinned = p->opts.pin && atomic_load(&p->n_unpinned_live) == 0;
  s->numa_node = p->opts.numa_node;
  s->bytes_registered = atomic_load(&p->bytes_registered);
  s->n_register_failures = atomic_load(&p->n_register_failures);
  return ZO_OK;
}

/* ------------------------------------------- engine-facing zo_host_* */

static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static zo_pinned_pool_t *_Atomic g_default; /* read by zo_host_free() without the once */
static zo_status g_default_st;
static char g_default_err[256];

static int g_default_numa = -1; /* hwloc logical index of zo_host_prefer_numa_node()'s node */

int zo_host_prefer_numa_node(int os_node) {
  if (atomic_load(&g_default) || os_node < 0) return -1;
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) return -1;
  int logical = -1;
  if (hwloc_topology_load(t) == 0) {
    hwloc_obj_t n = hwloc_get_numanode_obj_by_os_index(t, (unsigned)os_node);
    if (n) logical = (int)n->logical_index;
  }
  hwloc_topology_destroy(t);
  if (logical < 0) return -1;
  g_default_numa = logical;
  return 0;
}

static void default_pool_init(void) {
  zo_pinned_opts o = ZO_PINNED_OPTS_INIT;
  o.decay_ms = 0; /* engine buffers are few and long-lived: give pinned RAM back at once */
  o.numa_node = g_default_numa;
  zo_pinned_pool_t *p = NULL;
  g_default_st = zo_pinned_pool_create(&o, &p);
  atomic_store(&g_default, p);
  if (g_default_st != ZO_OK) snprintf(g_default_err, sizeof g_default_err, "%s", zo_last_error());
}

static size_t round_page(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) & ~(pg - 1);
}

zo_status zo_host_alloc(size_t nbytes, int pin, void **out, int *pinned) {
  if (!out || nbytes == 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "host alloc: nbytes must be > 0");
  *out = NULL;
  if (pinned) *pinned = 0;
  if (!pin) {
    size_t len;
    if (zo_size_round_up(nbytes, (size_t)sysconf(_SC_PAGESIZE),
                         &len)) /* round_page() would wrap to 0 */
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                          "host alloc: %zu bytes is more than the address space holds", nbytes);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "host alloc: cannot map %zu bytes: %s",
                          round_page(nbytes), strerror(errno));
    *out = p;
    return ZO_OK;
  }
  pthread_once(&g_default_once, default_pool_init);
  if (g_default_st != ZO_OK) return zo_error_set(g_default_st, "host alloc: %s", g_default_err);
  ZO_CHECK(zo_pinned_alloc(g_default, nbytes, 4096, 1, out));
  if (pinned) *pinned = zo_pinned_is_pinned(g_default, *out);
  return ZO_OK;
}

void zo_host_free(void *ptr, size_t nbytes, int pinned) {
  (void)pinned; /* ownership is looked up, so a wrong flag cannot unbalance the accounting */
  if (!ptr) return;
  if (g_default && pool_owns(g_default, ptr)) {
    zo_pinned_free(g_default, ptr);
    return;
  }
  munmap(ptr, round_page(nbytes));
}

size_t zo_host_pinned_bytes(void) {
  zo_pinned_stats_t s;
  if (!g_default || zo_pinned_stats(g_default, &s) != ZO_OK) return 0;
  return s.bytes_pinned;
}

size_t zo_host_unregistered_bytes(const void *ptr, size_t nbytes, char *why, size_t why_len) {
  if (why && why_len) why[0] = 0;
  if (!ptr || !nbytes) return 0;
  zo_pinned_pool_t *p = g_default;
  if (!p || !pool_owns(p, ptr)) return nbytes; /* not the pool's: plain pageable memory */
  return unregistered_in(p, ptr, nbytes, why, why_len);
}

zo_pinned_pool_t *zo_host_pool(void) {
  pthread_once(&g_default_once, default_pool_init);
  return g_default;
}
