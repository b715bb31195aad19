/*
 * pool.c - the persistent Adam thread pool: pthreads bound to physical cores
 * with hwloc, a FIFO of tasks, each run in phases split across all threads.
 * It holds no kernels (those are in fused.c / adam_avx*.c) and no engine logic.
 */
#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adam_internal.h"
#include "base_internal.h"
#include "nvtx.h"

/*
 * Memory ordering: every field of a task except next_tile and nonfinite is
 * written under pool->mu before the phase is published (gen++) and read by
 * workers after they take pool->mu and see the new gen; workers report the end
 * of their part under pool->mu, so the waiter, which also takes pool->mu,
 * sees every array write of the task. next_tile (the dynamic tile counter) and
 * nonfinite (an OR of flags) are atomics touched while the mutex is released.
 */

enum { K_ADAM = 0, K_FOR = 1, K_SQNORM = 2 };

struct zo_adam_task {
  struct zo_adam_task *next;             /* FIFO link */
  struct zo_adam_task *live_prev, *live_next; /* every handle not yet waited on, for destroy */
  int kind;
  int phase;     /* K_ADAM: 0 pre-scan (only with SKIP), 1 update */
  size_t n;      /* units of the task: elements, or chunks for K_SQNORM */
  size_t tile;   /* 0: one contiguous range per thread; else dynamic tiles of this many units */
  size_t align;  /* contiguous ranges start at multiples of this */
  int want;      /* threads that take part in the current phase: fewer than the pool's for small tasks (under mu) */
  int claimed;   /* threads that have taken part of the current phase so far (under mu) */
  int active;    /* threads that have not finished the current phase (under mu) */
  int done;      /* under mu */
  int skipped;
  atomic_size_t next_tile;
  atomic_int nonfinite;
  /* K_ADAM */
  zo_adam_job job;
  unsigned flags;
  /* K_FOR */
  void (*fn)(void *, size_t, size_t, int);
  void *arg;
  /* K_SQNORM */
  const void *g;
  zo_dtype gt;
  size_t n_elems;
  double *part;
};

struct zo_adam_pool {
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* workers: a new phase is published, or stop */
  pthread_cond_t done_cv; /* waiters: a task completed */
  struct zo_adam_task *head, *tail;
  struct zo_adam_task *urgent; /* the last ZO_ADAM_TASK_URGENT task queued and not yet completed, or NULL */
  struct zo_adam_task *live;
  uint64_t gen; /* bumped each time a phase is published */
  int stop;
  int nt;
  pthread_t *threads;
  int n_started;
  zo_simd simd;
  zo_adam_range_fn range;
  zo_scan_fn scan;
  zo_sqnorm_fn sqfn;
  size_t tile;
  char desc[512];
};

typedef struct {
  zo_adam_pool_t *pool;
  int index;
} worker_arg;

/*
 * Tiling. Measured on the 2-core EPYC (Zen 5, 2^26-element fp32 AdamW, 2
 * threads, 9 interleaved repetitions, machine shared with other jobs, load
 * average ~6): one contiguous range per thread 104.0 ms median (18.1 GB/s),
 * dynamic tiles of 16 Ki elements 81.4 ms, 256 Ki 76.0 ms (24.7 GB/s), 4 Mi
 * 80.5 ms. With another process on a core, a static split waits for the
 * slowest thread; 256 Ki-element tiles (1 MiB per fp32 stream) keep each
 * stream long enough for the prefetchers and balance the load. The auto
 * tile is therefore 256 Ki elements, shrunk for small shards so that every
 * thread gets about four tiles (never below 4 Ki elements).
 */
#define ZO_ADAM_TILE_AUTO ((size_t)1)
#define AUTO_TILE_MAX ((size_t)262144)
#define AUTO_TILE_MIN ((size_t)4096)
static size_t auto_tile(size_t n, int nt) {
  size_t t = (n + 4 * (size_t)nt - 1) / (4 * (size_t)nt);
  t = (t + 63) / 64 * 64;
  return t > AUTO_TILE_MAX ? AUTO_TILE_MAX : t < AUTO_TILE_MIN ? AUTO_TILE_MIN : t;
}
/* The task's tile from the pool's or the caller's setting: 0 contiguous, ZO_ADAM_TILE_AUTO auto, else as given. */
static size_t task_tile(size_t setting, size_t n, int nt) { return setting == ZO_ADAM_TILE_AUTO ? auto_tile(n, nt) : setting; }

/*
 * Threads per task. A phase is joined by every thread that takes part, and a
 * thread whose core another process holds joins a scheduler slice late
 * (milliseconds): before this limit, every task woke all the threads, and 40
 * steps of zo-train's tiny model (tests/configs/tiny.json, tensors of 32 to
 * 8 Ki elements, one task each) spent 3.4 to 4.8 ms a step in Adam beside
 * three busy processes on 2 cores, against 0.4 to 0.7 ms with one thread.
 * The fused Adam update moves ~30 bytes an element, ~1.5 ns an element on
 * one core of the 2-core EPYC; a second thread wins on an idle machine from
 * a few Ki elements, so the limit is set where a task is long enough
 * (64 Ki elements, ~100 us) that a late thread costs a fraction of it. Task
 * units other than elements (K_SQNORM's 64 Ki-element chunks) are each worth
 * a thread. A task never takes more threads than it has tiles.
 */
#define POOL_MIN_ELEMS_PER_THREAD ((size_t)65536)
static int task_threads(const zo_adam_pool_t *P, const struct zo_adam_task *T) {
  size_t want = T->kind == K_SQNORM ? T->n : (T->n + POOL_MIN_ELEMS_PER_THREAD - 1) / POOL_MIN_ELEMS_PER_THREAD;
  if (T->tile > 0) {
    size_t tiles = (T->n + T->tile - 1) / T->tile;
    if (tiles < want) want = tiles;
  }
  if (want > (size_t)P->nt) want = (size_t)P->nt;
  return want < 1 ? 1 : (int)want;
}

/* Bounds of thread t's contiguous part of [0, n), cut at multiples of align. */
static void static_range(size_t n, int nt, int t, size_t align, size_t *b, size_t *e) {
  size_t per = (n + (size_t)nt - 1) / (size_t)nt;
  per = (per + align - 1) / align * align;
  size_t lo = per * (size_t)t, hi = lo + per;
  *b = lo < n ? lo : n;
  *e = hi < n ? hi : n;
}

static void run_range(zo_adam_pool_t *P, struct zo_adam_task *T, int phase, size_t b, size_t e, int t) {
  switch (T->kind) {
    case K_ADAM:
      if (phase == 0 ? P->scan(T->job.g, T->job.gt, b, e) : P->range(&T->job, b, e))
        atomic_store_explicit(&T->nonfinite, 1, memory_order_relaxed);
      break;
    case K_FOR: T->fn(T->arg, b, e, t); break;
    case K_SQNORM:
      for (size_t k = b; k < e; k++) T->part[k] = zo_sqnorm_chunk(P->sqfn, T->g, T->gt, T->n_elems, k);
      break;
  }
}

/* Thread t runs part @slot (of T->want) of the phase: a contiguous range, or tiles taken dynamically. */
static void run_phase(zo_adam_pool_t *P, struct zo_adam_task *T, int phase, int t, int slot) {
  if (T->tile == 0) {
    size_t b, e;
    static_range(T->n, T->want, slot, T->align, &b, &e);
    if (e > b) run_range(P, T, phase, b, e, t);
    return;
  }
  for (;;) {
    size_t b = atomic_fetch_add_explicit(&T->next_tile, T->tile, memory_order_relaxed);
    if (b >= T->n) break;
    run_range(P, T, phase, b, b + T->tile < T->n ? b + T->tile : T->n, t);
  }
}

/*
 * Under mu: make the head task's current phase visible to the workers. The
 * first T->want workers to see it take part; the rest go back to sleep. Only
 * that many sleepers are woken (each signal wakes a different one); a worker
 * that is awake already (the one finishing the previous phase) sees the new
 * gen without a signal, so at least T->want workers come; @by_worker: that
 * worker publishes and will take a slot itself, so one signal fewer.
 */
static void publish(zo_adam_pool_t *P, int by_worker) {
  struct zo_adam_task *T = P->head;
  T->want = T->active = task_threads(P, T);
  T->claimed = 0;
  atomic_store_explicit(&T->next_tile, 0, memory_order_relaxed);
  P->gen++;
  if (T->want >= P->nt) {
    pthread_cond_broadcast(&P->work_cv);
  } else {
    for (int i = by_worker; i < T->want; i++) pthread_cond_signal(&P->work_cv);
  }
}

/* Under mu, by the last thread out of a phase: advance the head task or complete it. */
static void finish_phase(zo_adam_pool_t *P, struct zo_adam_task *T) {
  if (T->kind == K_ADAM && T->phase == 0) {
    if (atomic_load_explicit(&T->nonfinite, memory_order_relaxed)) {
      T->skipped = 1;
    } else {
      T->phase = 1;
      publish(P, 1);
      return;
    }
  }
  T->done = 1;
  if (P->urgent == T) P->urgent = NULL;
  P->head = T->next;
  if (!P->head) P->tail = NULL;
  pthread_cond_broadcast(&P->done_cv);
  if (P->head) publish(P, 1);
}

static void *worker_main(void *argp) {
  worker_arg *w = argp;
  zo_adam_pool_t *P = w->pool;
  int t = w->index;
  free(w);
  uint64_t seen = 0;
  pthread_mutex_lock(&P->mu);
  for (;;) {
    while (!P->stop && P->gen == seen) pthread_cond_wait(&P->work_cv, &P->mu);
    if (P->gen == seen) break; /* stop with nothing new */
    seen = P->gen;
    struct zo_adam_task *T = P->head;
    /* enough threads on this phase, or (woken for a phase that others ran to the end) nothing queued */
    if (!T || T->claimed == T->want) continue;
    const int slot = T->claimed++;
    int phase = T->phase;
    pthread_mutex_unlock(&P->mu);
    /* NVTX: one range per worker per phase; "adam" is the update, "adam scan" the inf/NaN pre-scan. */
    ZO_NVTX_PUSH(T->kind == K_ADAM  ? (phase == 0 ? "adam scan" : "adam")
                 : T->kind == K_FOR ? "adam pool for"
                                    : "grad norm");
    run_phase(P, T, phase, t, slot);
    ZO_NVTX_POP();
    pthread_mutex_lock(&P->mu);
    if (--T->active == 0) finish_phase(P, T);
  }
  pthread_mutex_unlock(&P->mu);
  return NULL;
}

/* ---------------------------------------------------------------- create / destroy */

/* Pick cores (cpusets singlified to one PU each) and bind the started threads; fills the description. */
static void bind_threads(zo_adam_pool_t *P, hwloc_topology_t topo, hwloc_bitmap_t *sets, int nsets, int bind) {
  char cores[256] = "";
  size_t len = 0;
  int bound = 0;
  if (bind && topo && nsets > 0) {
    bound = 1;
    for (int t = 0; t < P->nt; t++)
      if (hwloc_set_thread_cpubind(topo, P->threads[t], sets[t % nsets], HWLOC_CPUBIND_THREAD) != 0) bound = 0;
    if (!bound) zo_warn_once("zo_adam_pool: binding threads to cores failed; threads run unbound");
    for (int t = 0; t < P->nt && t < nsets && len + 12 < sizeof cores; t++)
      len += (size_t)snprintf(cores + len, sizeof cores - len, "%s%d", t ? "," : "", hwloc_bitmap_first(sets[t]));
  }
  char nodes[128] = "";
  if (topo && nsets > 0) {
    size_t nl = 0;
    int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nn && nl + 12 < sizeof nodes; i++) {
      hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
      int hit = 0;
      for (int s = 0; s < nsets && s < P->nt; s++) hit |= hwloc_bitmap_intersects(node->cpuset, sets[s]);
      if (hit) nl += (size_t)snprintf(nodes + nl, sizeof nodes - nl, "%s%u", nl ? "," : "", node->os_index);
    }
  }
  snprintf(P->desc, sizeof P->desc, "%d thread%s %s%s%s%s%s, %s, %s", P->nt, P->nt == 1 ? "" : "s",
           bound ? "bound to cores " : "unbound", bound ? cores : "", nodes[0] ? " (NUMA node " : "", nodes,
           nodes[0] ? ")" : "", zo_simd_name(P->simd), P->tile == ZO_ADAM_TILE_AUTO ? "dynamic tiles of up to 256 Ki elements"
           : P->tile                     ? "dynamic tiles"
                                         : "contiguous ranges");
  if (P->tile > ZO_ADAM_TILE_AUTO) {
    size_t dl = strlen(P->desc);
    snprintf(P->desc + dl, sizeof P->desc - dl, " of %zu elements", P->tile);
  }
}

/* The cores the threads may run on: one singlified cpuset per core (or PU), of
 * one NUMA node when asked, this rank's share when several ranks share the
 * machine. topo is NULL when hwloc has no topology (threads run unbound). */
typedef struct {
  hwloc_topology_t topo;
  hwloc_bitmap_t *sets;
  int nsets;
} core_sets;

static void core_sets_free(core_sets *cs) {
  for (int i = 0; i < cs->nsets; i++) hwloc_bitmap_free(cs->sets[i]);
  free(cs->sets);
  if (cs->topo) hwloc_topology_destroy(cs->topo);
  memset(cs, 0, sizeof *cs);
}

/* The options with their defaults, checked; the SIMD level they resolve to. */
static zo_status pool_opts_check(const zo_adam_pool_opts *opts, zo_adam_pool_opts *o, zo_simd *lvl) {
  *o = (zo_adam_pool_opts){.n_threads = 0, .numa_node = -1, .bind = 1, .tile_elems = 0, .simd = ZO_SIMD_AUTO};
  if (opts) *o = *opts;
  if (o->share_count < 0 || o->share_index < 0 || (o->share_count > 1 && o->share_index >= o->share_count))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: share_index %d of share_count %d", o->share_index,
                        o->share_count);
  if (o->n_threads < 0 || o->n_threads > 1024)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: n_threads = %d, expected 0..1024", o->n_threads);
  *lvl = ZO_SIMD_SCALAR;
  return zo_adam_resolve_simd("zo_adam_pool_create", o->simd, lvl);
}

/* NUMA node @numa_node of the topology in *node (NULL when numa_node < 0). */
static zo_status pool_find_node(hwloc_topology_t topo, int numa_node, hwloc_obj_t *node) {
  *node = NULL;
  if (numa_node < 0) return ZO_OK;
  int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nn; i++) {
    hwloc_obj_t x = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    if ((int)x->os_index == numa_node) *node = x;
  }
  if (!*node)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: NUMA node %d does not exist (%d nodes)", numa_node,
                        nn);
  return ZO_OK;
}

/* Keep this rank's share (index of count) of the core sets. */
static void pool_take_share(core_sets *cs, int index, int count) {
  int lo = (int)((long)index * cs->nsets / count);
  int hi = (int)((long)(index + 1) * cs->nsets / count);
  if (hi <= lo) lo = index % cs->nsets, hi = lo + 1;
  for (int i = 0; i < cs->nsets; i++)
    if (i < lo || i >= hi) hwloc_bitmap_free(cs->sets[i]);
  memmove(cs->sets, cs->sets + lo, (size_t)(hi - lo) * sizeof *cs->sets);
  cs->nsets = hi - lo;
}

/* Fill *cs from the machine's topology (see core_sets); on error *cs holds
 * what was gathered so far, for core_sets_free. */
static zo_status pool_core_sets(const zo_adam_pool_opts *o, core_sets *cs) {
  if (hwloc_topology_init(&cs->topo) != 0 || hwloc_topology_load(cs->topo) != 0) {
    if (cs->topo) hwloc_topology_destroy(cs->topo);
    cs->topo = NULL;
    if (o->numa_node >= 0)
      return zo_error_set(ZO_ERR_SYSTEM, "zo_adam_pool_create: hwloc topology unavailable, cannot select NUMA node %d",
                          o->numa_node);
    zo_warn_once("zo_adam_pool: hwloc topology unavailable; threads run unbound");
    return ZO_OK;
  }
  hwloc_obj_t node;
  ZO_CHECK(pool_find_node(cs->topo, o->numa_node, &node));
  hwloc_obj_type_t type = hwloc_get_nbobjs_by_type(cs->topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  int nobj = hwloc_get_nbobjs_by_type(cs->topo, type);
  cs->sets = calloc((size_t)(nobj > 0 ? nobj : 1), sizeof *cs->sets);
  if (!cs->sets) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_create: cannot allocate %d cpusets", nobj);
  for (int i = 0; i < nobj; i++) {
    hwloc_obj_t c = hwloc_get_obj_by_type(cs->topo, type, i);
    if (!c->cpuset || hwloc_bitmap_iszero(c->cpuset)) continue;
    if (node && !hwloc_bitmap_isincluded(c->cpuset, node->cpuset)) continue;
    hwloc_bitmap_t s = hwloc_bitmap_dup(c->cpuset);
    if (!s) continue;
    hwloc_bitmap_singlify(s);
    cs->sets[cs->nsets++] = s;
  }
  if (node && cs->nsets == 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: NUMA node %d has no cores", o->numa_node);
  if (o->share_count > 1 && cs->nsets > 0) pool_take_share(cs, o->share_index, o->share_count); /* this rank's share */
  return ZO_OK;
}

/* Stop and join the threads started so far, free the pool (a partial one too). */
static void pool_free(zo_adam_pool_t *P) {
  if (!P) return;
  if (P->n_started) {
    pthread_mutex_lock(&P->mu);
    P->stop = 1;
    pthread_cond_broadcast(&P->work_cv);
    pthread_mutex_unlock(&P->mu);
    for (int t = 0; t < P->n_started; t++) pthread_join(P->threads[t], NULL);
  }
  if (P->threads) {
    pthread_mutex_destroy(&P->mu);
    pthread_cond_destroy(&P->work_cv);
    pthread_cond_destroy(&P->done_cv);
  }
  free(P->threads);
  free(P);
}

/* Start P's nt threads (P->n_started counts those running, for pool_free). */
static zo_status pool_start_threads(zo_adam_pool_t *P, int nt) {
  for (int t = 0; t < nt; t++) {
    worker_arg *w = malloc(sizeof *w);
    if (!w) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_create: out of memory starting thread %d", t);
    w->pool = P;
    w->index = t;
    int rc = pthread_create(&P->threads[t], NULL, worker_main, w);
    if (rc != 0) {
      free(w);
      return zo_error_set(ZO_ERR_SYSTEM, "zo_adam_pool_create: pthread_create for thread %d of %d: %s", t, nt,
                          strerror(rc));
    }
    P->n_started++;
  }
  return ZO_OK;
}

zo_status zo_adam_pool_create(const zo_adam_pool_opts *opts, zo_adam_pool_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: out is NULL");
  *out = NULL;
  zo_adam_pool_opts o;
  zo_simd lvl;
  ZO_CHECK(pool_opts_check(opts, &o, &lvl));

  zo_status st = ZO_OK;
  core_sets cs = {0};
  zo_adam_pool_t *P = NULL;
  ZO_CHECK_GOTO(pool_core_sets(&o, &cs), st, fail);
  int nt = o.n_threads;
  if (nt == 0) nt = cs.nsets > 0 ? cs.nsets : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nt < 1) nt = 1;

  P = calloc(1, sizeof *P);
  if (!P || !(P->threads = calloc((size_t)nt, sizeof *P->threads))) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_create: cannot allocate a pool of %d threads", nt);
    goto fail;
  }
  P->nt = nt;
  P->simd = lvl;
  P->range = zo_adam_range_for(lvl);
  P->scan = zo_scan_for(lvl);
  P->sqfn = zo_sqnorm_for(lvl);
  P->tile = o.tile_elems == ZO_ADAM_TILE_CONTIGUOUS ? 0
            : o.tile_elems                          ? (o.tile_elems + 63) / 64 * 64
                                                    : ZO_ADAM_TILE_AUTO;
  pthread_mutex_init(&P->mu, NULL);
  pthread_cond_init(&P->work_cv, NULL);
  pthread_cond_init(&P->done_cv, NULL);
  ZO_CHECK_GOTO(pool_start_threads(P, nt), st, fail);
  bind_threads(P, cs.topo, cs.sets, cs.nsets, o.bind);
  core_sets_free(&cs);
  *out = P;
  return ZO_OK;

fail:
  pool_free(P);
  core_sets_free(&cs);
  return st;
}

void zo_adam_pool_destroy(zo_adam_pool_t *P) {
  if (!P) return;
  pthread_mutex_lock(&P->mu);
  while (P->head) pthread_cond_wait(&P->done_cv, &P->mu);
  P->stop = 1;
  pthread_cond_broadcast(&P->work_cv);
  pthread_mutex_unlock(&P->mu);
  for (int t = 0; t < P->n_started; t++) pthread_join(P->threads[t], NULL);
  while (P->live) {
    struct zo_adam_task *T = P->live;
    P->live = T->live_next;
    free(T);
  }
  pthread_mutex_destroy(&P->mu);
  pthread_cond_destroy(&P->work_cv);
  pthread_cond_destroy(&P->done_cv);
  free(P->threads);
  free(P);
}

int zo_adam_pool_threads(const zo_adam_pool_t *P) { return P ? P->nt : 0; }
const char *zo_adam_pool_describe(const zo_adam_pool_t *P) { return P ? P->desc : ""; }

/* ---------------------------------------------------------------- tasks */


/* Queue T (under mu): at the tail, or (@urgent) behind the running head and the urgent tasks queued before it. */
static void enqueue(zo_adam_pool_t *P, struct zo_adam_task *T, int urgent) {
  T->next = NULL;
  T->live_prev = NULL;
  T->live_next = P->live;
  if (P->live) P->live->live_prev = T;
  P->live = T;
  struct zo_adam_task *after = urgent && P->head ? (P->urgent ? P->urgent : P->head) : P->tail;
  if (urgent) P->urgent = T;
  if (after) {
    T->next = after->next;
    after->next = T;
    if (P->tail == after) P->tail = T;
  } else {
    P->head = P->tail = T;
  }
  if (P->head == T) publish(P, 0);
}

/* Each task remembers its pool for wait/poll. */
typedef struct {
  struct zo_adam_task t;
  zo_adam_pool_t *pool;
} task_box;

static struct zo_adam_task *task_new(zo_adam_pool_t *P) {
  task_box *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->pool = P;
  atomic_init(&b->t.next_tile, 0);
  atomic_init(&b->t.nonfinite, 0);
  return &b->t;
}
static zo_adam_pool_t *task_pool(struct zo_adam_task *T) { return ((task_box *)T)->pool; }

static zo_status submit_task(zo_adam_pool_t *P, struct zo_adam_task *T, int urgent) {
  pthread_mutex_lock(&P->mu);
  enqueue(P, T, urgent);
  pthread_mutex_unlock(&P->mu);
  return ZO_OK;
}

zo_status zo_adam_pool_submit(zo_adam_pool_t *P, const zo_adam_hparams *hp, const zo_adam_shard *sh, unsigned flags,
                              zo_adam_task_t **task) {
  if (!P || !task) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit: %s is NULL", !P ? "pool" : "task");
  *task = NULL;
  zo_adam_job j;
  ZO_CHECK(zo_adam_job_init("zo_adam_pool_submit", hp, sh, flags, &j));
  struct zo_adam_task *T = task_new(P);
  if (!T) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_submit: cannot allocate a task");
  T->kind = K_ADAM;
  T->job = j;
  T->flags = flags;
  T->n = sh->n;
  T->tile = task_tile(P->tile, sh->n, P->nt);
  T->align = 64;
  T->phase = (flags & ZO_ADAM_SKIP_NONFINITE) ? 0 : 1;
  submit_task(P, T, 0);
  *task = T;
  return ZO_OK;
}

zo_status zo_adam_task_poll(zo_adam_task_t *T, int *done) {
  if (!T || !done) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_task_poll: %s is NULL", !T ? "task" : "done");
  zo_adam_pool_t *P = task_pool(T);
  pthread_mutex_lock(&P->mu);
  *done = T->done;
  pthread_mutex_unlock(&P->mu);
  return ZO_OK;
}

/* Wait for T, unlink it from the live list; the caller frees it. */
static void wait_task(zo_adam_pool_t *P, struct zo_adam_task *T) {
  pthread_mutex_lock(&P->mu);
  while (!T->done) pthread_cond_wait(&P->done_cv, &P->mu);
  if (T->live_prev)
    T->live_prev->live_next = T->live_next;
  else
    P->live = T->live_next;
  if (T->live_next) T->live_next->live_prev = T->live_prev;
  pthread_mutex_unlock(&P->mu);
}

zo_status zo_adam_task_wait(zo_adam_task_t *T, zo_adam_result *res) {
  if (res) res->nonfinite = res->skipped = 0;
  if (!T) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_task_wait: task is NULL");
  wait_task(task_pool(T), T);
  if (res) {
    res->nonfinite = atomic_load_explicit(&T->nonfinite, memory_order_relaxed);
    res->skipped = T->skipped;
  }
  free((task_box *)T);
  return ZO_OK;
}

zo_status zo_adam_pool_update(zo_adam_pool_t *P, const zo_adam_hparams *hp, const zo_adam_shard *sh, unsigned flags,
                              zo_adam_result *res) {
  if (res) res->nonfinite = res->skipped = 0;
  zo_adam_task_t *T = NULL;
  ZO_CHECK(zo_adam_pool_submit(P, hp, sh, flags, &T));
  return zo_adam_task_wait(T, res);
}

zo_status zo_adam_pool_submit_for(zo_adam_pool_t *P, void (*fn)(void *arg, size_t begin, size_t end, int thread),
                                   void *arg, size_t n, size_t tile, unsigned flags, zo_adam_task_t **task) {
  if (!task) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: task is NULL");
  *task = NULL;
  if (!P || !fn)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: %s is NULL", !P ? "pool" : "fn");
  if (n == 0) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: n is 0 (nothing to run)");
  if (flags & ~(unsigned)ZO_ADAM_TASK_URGENT)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: unknown flags 0x%x", flags);
  struct zo_adam_task *T = task_new(P);
  if (!T) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_submit_for: cannot allocate a task");
  T->kind = K_FOR;
  T->fn = fn;
  T->arg = arg;
  T->n = n;
  T->tile = tile == ZO_ADAM_TILE_CONTIGUOUS ? 0 : tile ? tile : task_tile(P->tile, n, P->nt);
  T->align = 64;
  T->phase = 1;
  submit_task(P, T, (flags & ZO_ADAM_TASK_URGENT) != 0);
  *task = T;
  return ZO_OK;
}

zo_status zo_adam_pool_parallel_for(zo_adam_pool_t *P, void (*fn)(void *arg, size_t begin, size_t end, int thread),
                                    void *arg, size_t n, size_t tile) {
  if (!P || !fn)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_parallel_for: %s is NULL", !P ? "pool" : "fn");
  if (n == 0) return ZO_OK;
  zo_adam_task_t *T;
  ZO_CHECK(zo_adam_pool_submit_for(P, fn, arg, n, tile, 0, &T));
  return zo_adam_task_wait(T, NULL);
}

zo_status zo_adam_pool_sqnorm(zo_adam_pool_t *P, const void *grad, zo_dtype grad_dtype, size_t n, double *sqnorm,
                              int *nonfinite) {
  if (!P) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_sqnorm: pool is NULL");
  if (!sqnorm) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_sqnorm: sqnorm is NULL");
  *sqnorm = 0.0;
  if (nonfinite) *nonfinite = 0;
  if (grad_dtype != ZO_DTYPE_F32 && grad_dtype != ZO_DTYPE_F16 && grad_dtype != ZO_DTYPE_BF16)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_sqnorm: grad dtype %d is not F32, F16 or BF16",
                        (int)grad_dtype);
  if (n == 0) return ZO_OK;
  if (!grad) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_sqnorm: grad is NULL with n = %zu", n);
  size_t nchunks = (n + ZO_SQNORM_CHUNK - 1) / ZO_SQNORM_CHUNK;
  double *part = malloc(nchunks * sizeof *part);
  struct zo_adam_task *T = part ? task_new(P) : NULL;
  if (!T) {
    free(part);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_sqnorm: cannot allocate %zu chunk partials", nchunks);
  }
  T->kind = K_SQNORM;
  T->g = grad;
  T->gt = grad_dtype;
  T->n_elems = n;
  T->part = part;
  T->n = nchunks;
  /* dynamic tiles of 4 chunks (256 Ki elements, as Adam's auto tiles): a thread slowed by other load does not
     hold up the rest; each chunk's partial has a fixed slot, so the result does not depend on who sums it */
  T->tile = nchunks >= 8 * (size_t)P->nt ? 4 : 0;
  T->align = 1;
  T->phase = 1;
  submit_task(P, T, 0);
  zo_status st = zo_adam_task_wait(T, NULL);
  double s = zo_sqnorm_combine(part, nchunks);
  free(part);
  *sqnorm = s;
  if (nonfinite) *nonfinite = !isfinite(s);
  return st;
}
