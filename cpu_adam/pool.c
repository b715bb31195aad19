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
#include <time.h>
#include <unistd.h>

#include "adam_internal.h"
#include "adam_stores.h"
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
  struct zo_adam_task *next;                  /* FIFO link */
  struct zo_adam_task *live_prev, *live_next; /* every handle not yet waited on, for destroy */
  int kind;
  int phase;    /* K_ADAM: 0 pre-scan (only with SKIP), 1 update */
  size_t n;     /* units of the task: elements, or chunks for K_SQNORM */
  size_t tile;  /* 0: one contiguous range per thread; else dynamic tiles of this many units */
  size_t align; /* contiguous ranges start at multiples of this */
  int want; /* threads that take part in the current phase: fewer than the pool's for small tasks (under mu) */
  int claimed; /* threads that have taken part of the current phase so far (under mu) */
  int active;  /* threads that have not finished the current phase (under mu) */
  int done;    /* under mu */
  int skipped;
  size_t seg_b,
      seg_e; /* the current phase covers units [seg_b, seg_e): [0, n), or one store-probe segment */
  atomic_size_t next_tile;
  atomic_int nonfinite;
  /* K_ADAM */
  zo_adam_job job;
  unsigned flags;
  int stores_set; /* the update phase's store kind is set (adam_stores_setup) */
  int probe_all; /* zo_adam_pool_probe_stores()'s scratch task: take every pair still missing, whatever the size */
  int probe_nseg;   /* > 0: the update phase runs as this many store-probe segments (under mu) */
  int probe_seg;    /* the running segment */
  size_t probe_per; /* elements per segment (the last may be shorter), a multiple of 64 */
  double seg_t0;    /* zo_clock_s() when the running segment was published */
  double seg_cpu;   /* CPU seconds the running segment's threads spent in it so far (under mu) */
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
  /* the last ZO_ADAM_TASK_URGENT task queued and not yet completed, or NULL */
  struct zo_adam_task *urgent;
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
  /* Store kind of param, m, v (see "Store probe" below); all under mu. */
  zo_adam_stores stores; /* ZO_ADAM_STORES at create */
  unsigned state_nt;     /* ZO_NT_STATE when the update tasks stream p, m, v, else 0 */
  int probe_pending;     /* auto: the probe has not decided yet */
  int probe_pairs;       /* pairs timed so far */
  double probe_t[2][ZO_STORES_PROBE_PAIRS]; /* seconds, [0 regular, 1 nt][pair]: the pairs kept */
  int probe_clean
      [ZO_STORES_PROBE_PAIRS]; /* the running task's pairs: both segments undisturbed so far */
  int probe_dropped;           /* pairs dropped because a thread lost its core during a segment */
  double probe_ratio;          /* once decided: median regular time / nt time */
  double probe_low;            /* and the lowest pair's */
  size_t llc_bytes;       /* the last-level caches of the pool's cores, summed (distinct caches) */
  size_t probe_seg_bytes; /* a probe segment touches at least this many bytes */
  unsigned desc_ver, stores_ver; /* desc is rebuilt when they differ */
  char desc_base[448];           /* threads, cores, SIMD, tiles */
  char desc[640];                /* desc_base and the store kind */
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
/* The task's tile from the pool's or the caller's setting: 0 contiguous, ZO_ADAM_TILE_AUTO auto,
 * else as given. */
static size_t task_tile(size_t setting, size_t n, int nt) {
  return setting == ZO_ADAM_TILE_AUTO ? auto_tile(n, nt) : setting;
}

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
  const size_t n = T->seg_e - T->seg_b;
  size_t want =
      T->kind == K_SQNORM ? n : (n + POOL_MIN_ELEMS_PER_THREAD - 1) / POOL_MIN_ELEMS_PER_THREAD;
  if (T->tile > 0) {
    size_t tiles = (n + T->tile - 1) / T->tile;
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

static void run_range(zo_adam_pool_t *P, struct zo_adam_task *T, int phase, size_t b, size_t e,
                      int t) {
  switch (T->kind) {
    case K_ADAM:
      if (phase == 0 ? P->scan(T->job.g, T->job.gt, b, e) : P->range(&T->job, b, e))
        atomic_store_explicit(&T->nonfinite, 1, memory_order_relaxed);
      break;
    case K_FOR: T->fn(T->arg, b, e, t); break;
    case K_SQNORM:
      for (size_t k = b; k < e; k++)
        T->part[k] = zo_sqnorm_chunk(P->sqfn, T->g, T->gt, T->n_elems, k);
      break;
  }
}

/* Thread t runs part @slot (of T->want) of the phase's [seg_b, seg_e): a contiguous range, or tiles taken
 * dynamically. */
static void run_phase(zo_adam_pool_t *P, struct zo_adam_task *T, int phase, int t, int slot) {
  const size_t sb = T->seg_b, se = T->seg_e;
  if (T->tile == 0) {
    size_t b, e;
    static_range(se - sb, T->want, slot, T->align, &b, &e);
    if (e > b) run_range(P, T, phase, sb + b, sb + e, t);
    return;
  }
  for (;;) {
    size_t b = atomic_fetch_add_explicit(&T->next_tile, T->tile, memory_order_relaxed);
    if (b >= se) break;
    run_range(P, T, phase, b, b + T->tile < se ? b + T->tile : se, t);
  }
}

/*
 * Store probe. Whether streaming (non-temporal) stores of param, m and v pay
 * depends on the machine, not on the kernel: on a Zen 3 EPYC (AVX2 only,
 * issue 40) zo-adambench's 28 B/param roofline ran at 35.98 GB/s with
 * streaming stores and 13.43 GB/s with regular ones, and the fp32-grad update
 * (which then streamed nothing) at 13.21 GB/s; on the 2-core Zen 5 EPYC this
 * project is measured on, the two rooflines are within a few percent (numbers
 * in adam_internal.h). So with ZO_ADAM_STORES=auto (the default) each pool
 * measures once, on its own threads and on the shard of the first update task
 * that is far bigger than the pool's last-level caches: that task's update
 * phase runs as 2k equal segments (k <= ZO_STORES_PROBE_PAIRS pairs), each
 * touching at least probe_seg_bytes, alternately with regular and streaming
 * p, m, v stores (pair q runs regular first when q is even, streaming first
 * when odd, so neither kind always follows the other). Each segment is timed
 * from its publication to its last thread's end. A pair counts only when in
 * both its segments the threads were on their cores >= PROBE_MIN_BUSY of the
 * time (thread CPU time over threads x wall time): on the 2-core EPYC while
 * another job built (load average 1.5-2.3), 128 MiB segments took 3.5-5 ms
 * undisturbed (busy 0.83-0.99, pair ratios 0.89-1.03) and up to 22 ms when a
 * thread lost its core (busy 0.18-0.75), which made single probes read 0.21x
 * to 1.56x without the filter; 2^27-element fp32 shards cut in 6 segments
 * (its own arrays) took 9.6-10.2 ms undisturbed (busy 0.83-0.95) and up to
 * 49 ms disturbed. Dropped pairs are timed again on later tasks. Once
 * ZO_STORES_PROBE_PAIRS pairs are in (from one task or several),
 * zo_adam_stores_decide() picks the kind for every later task. The probe
 * costs no extra memory traffic: it is the task's own work, and the store
 * kind never changes a result bit (the segments are ranges of the same
 * element-wise update, as tiles are). Tasks with ZO_ADAM_NO_NT_STORES, with
 * p, m or v not 64-byte aligned, or too small are not probed; until the
 * decision, p, m, v get regular stores. zo_adam_pool_probe_stores() runs the
 * same probe at once on scratch arrays.
 */
#define PROBE_LLC_FACTOR 4 /* a segment touches >= this many times the pool's LLC bytes */
#define PROBE_MIN_SEG_BYTES ((size_t)64 << 20) /* and at least this */
#define PROBE_MAX_SEG_BYTES \
  ((size_t)512 << 20) /* and at most this (pools over many L3s: 2 x 256 MiB of L3 -> 2x) */
#define PROBE_TEST_SEG_ELEMS \
  ((size_t)4096) /* ZO_ADAM_STORES=probe: segments of at least this many elements */
#define ZO_STR_(x) #x
#define ZO_STR(x) ZO_STR_(x)
#define PROBE_CALL_ATTEMPTS 12 /* zo_adam_pool_probe_stores(): runs of its scratch update at most */
#define PROBE_MIN_BUSY \
  0.8 /* a segment counts when its threads' CPU time is >= this x threads x wall time */
#define LLC_FALLBACK_BYTES ((size_t)32 << 20) /* when hwloc reports no cache */

/* CPU time of the calling thread, seconds. */
static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Segment s of the running probe is timed for pair q: 1 when it streams p, m, v. */
static int probe_seg_nt(int q, int s) { return (q % 2 == 0) == (s % 2 == 1); }

/* Under mu: point T at probe segment T->probe_seg (its range and store kind). */
static void probe_segment_set(zo_adam_pool_t *P, struct zo_adam_task *T) {
  int s = T->probe_seg;
  T->seg_b = (size_t)s * T->probe_per;
  T->seg_e = T->seg_b + T->probe_per < T->n ? T->seg_b + T->probe_per : T->n;
  unsigned nt = probe_seg_nt(P->probe_pairs + s / 2, s) ? (unsigned)ZO_NT_STATE : 0u;
  T->job.nt = (T->job.nt & ~(unsigned)ZO_NT_STATE) | nt;
}

/* Under mu, when the first update phase of T is published: its store kind, and the probe if T is
 * one. */
static void adam_stores_setup(zo_adam_pool_t *P, struct zo_adam_task *T) {
  T->stores_set = 1;
  if (T->flags & ZO_ADAM_NO_NT_STORES) return; /* job.nt is 0: every store regular */
  zo_adam_job *j = &T->job;
  j->nt = (j->nt & ~(unsigned)ZO_NT_STATE) | P->state_nt;
  if (!P->probe_pending) return;
  const size_t ssz = zo_dtype_size(j->st), osz = j->out ? zo_dtype_size(j->ot) : 0;
  if (((uintptr_t)j->p | (uintptr_t)j->m | (uintptr_t)j->v) & 63)
    return;                                                    /* would not stream everywhere */
  const size_t bpe = 4 + zo_dtype_size(j->gt) + 2 * ssz + osz; /* bytes touched per element */
  const size_t seg_min =
      P->stores == ZO_STORES_PROBE ? PROBE_TEST_SEG_ELEMS : (P->probe_seg_bytes + bpe - 1) / bpe;
  const size_t left = (size_t)(ZO_STORES_PROBE_PAIRS - P->probe_pairs);
  size_t k = T->probe_all && T->n >= 2 * left * PROBE_TEST_SEG_ELEMS ? left : T->n / (2 * seg_min);
  if (k == 0) return;
  if (k > left) k = left;
  T->probe_nseg = (int)(2 * k);
  T->probe_seg = 0;
  for (size_t q = 0; q < k; q++) P->probe_clean[P->probe_pairs + q] = 1;
  T->probe_per = ((T->n + 2 * k - 1) / (2 * k) + 63) / 64 *
                 64; /* n >= 2k * 4096: every segment is non-empty */
  probe_segment_set(P, T);
}

/* Under mu, by the last thread out of a probe segment: record its time; 1 when T has another segment to run
 * (set up, to be published), 0 when the update phase is complete (decided, when enough pairs are in). */
static int probe_segment_done(zo_adam_pool_t *P, struct zo_adam_task *T) {
  const int s = T->probe_seg, q = P->probe_pairs + s / 2;
  const double wall = zo_clock_s() - T->seg_t0;
  P->probe_t[probe_seg_nt(q, s)][q] = wall;
  /* undisturbed: its threads were on their cores nearly all the segment (a thread that loses its core to
     another process for one time slice, ~3 ms, doubles a 3 ms segment's wall time) */
  if (!(T->seg_cpu >= PROBE_MIN_BUSY * (double)T->want * wall) && P->stores != ZO_STORES_PROBE)
    P->probe_clean[q] =
        0; /* (ZO_ADAM_STORES=probe keeps every pair: its tiny segments are never "busy") */
  if (++T->probe_seg < T->probe_nseg) {
    probe_segment_set(P, T);
    return 1;
  }
  /* keep the clean pairs, in order; the dropped ones are timed again on a later task */
  const int first = P->probe_pairs, npairs = T->probe_nseg / 2;
  for (int k = first; k < first + npairs; k++) {
    if (!P->probe_clean[k]) {
      P->probe_dropped++;
      continue;
    }
    P->probe_t[0][P->probe_pairs] = P->probe_t[0][k];
    P->probe_t[1][P->probe_pairs] = P->probe_t[1][k];
    P->probe_pairs++;
  }
  T->probe_nseg = 0;
  if (P->probe_pairs >= ZO_STORES_PROBE_PAIRS) {
    int nt = zo_adam_stores_decide(P->probe_t[0], P->probe_t[1], ZO_STORES_PROBE_PAIRS,
                                   &P->probe_ratio, &P->probe_low);
    P->state_nt = nt ? (unsigned)ZO_NT_STATE : 0u;
    P->probe_pending = 0;
  }
  P->stores_ver++; /* the description's counts changed */
  return 0;
}

/* The last-level caches (the outermost data or unified cache above each of the pool's cores), each counted
 * once; LLC_FALLBACK_BYTES when the topology has none. */
static size_t pool_llc_bytes(hwloc_topology_t topo, hwloc_bitmap_t *sets, int nsets, int nt) {
  size_t sum = 0;
  hwloc_obj_t seen[64];
  int nseen = 0;
  for (int t = 0; topo && t < nt && t < nsets; t++) {
    hwloc_obj_t llc = NULL;
    for (hwloc_obj_t o = hwloc_get_obj_covering_cpuset(topo, sets[t]); o; o = o->parent)
      if (hwloc_obj_type_is_cache(o->type) && o->attr &&
          o->attr->cache.type != HWLOC_OBJ_CACHE_INSTRUCTION)
        llc = o;
    int dup = 0;
    for (int i = 0; i < nseen; i++) dup |= seen[i] == llc;
    if (!llc || dup) continue;
    if (nseen < 64) seen[nseen++] = llc;
    sum += (size_t)llc->attr->cache.size;
  }
  return sum ? sum : LLC_FALLBACK_BYTES;
}

/* Under mu (or before the threads see P): P->desc from desc_base and the store kind. */
static void pool_compose_desc(zo_adam_pool_t *P) {
  char mib[32];
  const char *src = P->stores == ZO_STORES_NT ? "ZO_ADAM_STORES=nt" : "ZO_ADAM_STORES=regular";
  if (P->simd == ZO_SIMD_SCALAR)
    snprintf(P->desc, sizeof P->desc, "%s, p/m/v stores regular (the scalar kernel never streams)",
             P->desc_base);
  else if (P->probe_pending)
    snprintf(P->desc, sizeof P->desc,
             "%s, p/m/v stores regular until probed (auto: %d of %d pairs timed, %d dropped; "
             "probes a 64-byte aligned update of >= %s per segment)",
             P->desc_base, P->probe_pairs, ZO_STORES_PROBE_PAIRS, P->probe_dropped,
             P->stores == ZO_STORES_PROBE
                 ? "4 Ki elements"
                 : zo_format_bytes(mib, sizeof mib, (double)P->probe_seg_bytes));
  else if (P->stores == ZO_STORES_AUTO || P->stores == ZO_STORES_PROBE)
    snprintf(
        P->desc, sizeof P->desc,
        "%s, p/m/v stores %s (probe: nt %.2fx regular, median of %d pairs, lowest %.2fx, %d dropped%s)",
        P->desc_base, P->state_nt ? "nt" : "regular", P->probe_ratio, ZO_STORES_PROBE_PAIRS,
        P->probe_low, P->probe_dropped,
        P->state_nt ? ""
                    : "; nt needs a median >= " ZO_STR(ZO_STORES_NT_WIN) "x and every pair > 1x");
  else
    snprintf(P->desc, sizeof P->desc, "%s, p/m/v stores %s (%s)", P->desc_base,
             P->state_nt ? "nt" : "regular", src);
  P->desc_ver = P->stores_ver;
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
  if (T->kind == K_ADAM && T->phase == 1 && !T->stores_set) adam_stores_setup(P, T);
  T->want = T->active = task_threads(P, T);
  T->claimed = 0;
  atomic_store_explicit(&T->next_tile, T->seg_b, memory_order_relaxed);
  if (T->probe_nseg) {
    T->seg_cpu = 0;
    T->seg_t0 = zo_clock_s();
  }
  P->gen++;
  if (T->want >= P->nt) {
    pthread_cond_broadcast(&P->work_cv);
  } else {
    for (int i = by_worker; i < T->want; i++) pthread_cond_signal(&P->work_cv);
  }
}

/* Under mu, by the last thread out of a phase: advance the head task or complete it. */
static void finish_phase(zo_adam_pool_t *P, struct zo_adam_task *T) {
  if (T->kind == K_ADAM && T->phase == 1 && T->probe_nseg) {
    if (probe_segment_done(P, T)) {
      publish(P, 1); /* the next segment */
      return;
    }
  }
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
    /* enough threads on this phase, or (woken for a phase that others ran to the end) nothing
     * queued */
    if (!T || T->claimed == T->want) continue;
    const int slot = T->claimed++;
    int phase = T->phase;
    const int timed = T->kind == K_ADAM &&
                      T->probe_nseg > 0; /* a store-probe segment: count this thread's CPU time */
    pthread_mutex_unlock(&P->mu);
    const double cpu0 = timed ? thread_cpu_s() : 0;
    /* NVTX: one range per worker per phase; "adam" is the update, "adam scan" the inf/NaN
     * pre-scan. */
    ZO_NVTX_PUSH(T->kind == K_ADAM  ? (phase == 0 ? "adam scan" : "adam")
                 : T->kind == K_FOR ? "adam pool for"
                                    : "grad norm");
    run_phase(P, T, phase, t, slot);
    ZO_NVTX_POP();
    const double cpu = timed ? thread_cpu_s() - cpu0 : 0;
    pthread_mutex_lock(&P->mu);
    T->seg_cpu += cpu;
    if (--T->active == 0) finish_phase(P, T);
  }
  pthread_mutex_unlock(&P->mu);
  return NULL;
}

/* ---------------------------------------------------------------- create / destroy */

/* Pick cores (cpusets singlified to one PU each) and bind the started threads; fills the
 * description. */
static void bind_threads(zo_adam_pool_t *P, hwloc_topology_t topo, hwloc_bitmap_t *sets, int nsets,
                         int bind) {
  char cores[256] = "";
  size_t len = 0;
  int bound = 0;
  if (bind && topo && nsets > 0) {
    bound = 1;
    for (int t = 0; t < P->nt; t++)
      if (hwloc_set_thread_cpubind(topo, P->threads[t], sets[t % nsets], HWLOC_CPUBIND_THREAD) != 0)
        bound = 0;
    if (!bound) zo_warn_once("zo_adam_pool: binding threads to cores failed; threads run unbound");
    for (int t = 0; t < P->nt && t < nsets && len + 12 < sizeof cores; t++)
      len += (size_t)snprintf(cores + len, sizeof cores - len, "%s%d", t ? "," : "",
                              hwloc_bitmap_first(sets[t]));
  }
  char nodes[128] = "";
  if (topo && nsets > 0) {
    size_t nl = 0;
    int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nn && nl + 12 < sizeof nodes; i++) {
      hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
      int hit = 0;
      for (int s = 0; s < nsets && s < P->nt; s++)
        hit |= hwloc_bitmap_intersects(node->cpuset, sets[s]);
      if (hit)
        nl +=
            (size_t)snprintf(nodes + nl, sizeof nodes - nl, "%s%u", nl ? "," : "", node->os_index);
    }
  }
  snprintf(P->desc_base, sizeof P->desc_base, "%d thread%s %s%s%s%s%s, %s, %s", P->nt,
           P->nt == 1 ? "" : "s", bound ? "bound to cores " : "unbound", bound ? cores : "",
           nodes[0] ? " (NUMA node " : "", nodes, nodes[0] ? ")" : "", zo_simd_name(P->simd),
           P->tile == ZO_ADAM_TILE_AUTO ? "dynamic tiles of up to 256 Ki elements"
           : P->tile                    ? "dynamic tiles"
                                        : "contiguous ranges");
  if (P->tile > ZO_ADAM_TILE_AUTO) {
    size_t dl = strlen(P->desc_base);
    snprintf(P->desc_base + dl, sizeof P->desc_base - dl, " of %zu elements", P->tile);
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
static zo_status pool_opts_check(const zo_adam_pool_opts *opts, zo_adam_pool_opts *o,
                                 zo_simd *lvl) {
  *o = (zo_adam_pool_opts){
      .n_threads = 0, .numa_node = -1, .bind = 1, .tile_elems = 0, .simd = ZO_SIMD_AUTO};
  if (opts) *o = *opts;
  if (o->share_count < 0 || o->share_index < 0 ||
      (o->share_count > 1 && o->share_index >= o->share_count))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: share_index %d of share_count %d",
                        o->share_index, o->share_count);
  if (o->n_threads < 0 || o->n_threads > 1024)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: n_threads = %d, expected 0..1024",
                        o->n_threads);
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
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_adam_pool_create: NUMA node %d does not exist (%d nodes)", numa_node,
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
      return zo_error_set(
          ZO_ERR_SYSTEM,
          "zo_adam_pool_create: hwloc topology unavailable, cannot select NUMA node %d",
          o->numa_node);
    zo_warn_once("zo_adam_pool: hwloc topology unavailable; threads run unbound");
    return ZO_OK;
  }
  hwloc_obj_t node;
  ZO_CHECK(pool_find_node(cs->topo, o->numa_node, &node));
  hwloc_obj_type_t type =
      hwloc_get_nbobjs_by_type(cs->topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  int nobj = hwloc_get_nbobjs_by_type(cs->topo, type);
  cs->sets = calloc((size_t)(nobj > 0 ? nobj : 1), sizeof *cs->sets);
  if (!cs->sets)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_create: cannot allocate %d cpusets",
                        nobj);
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
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_create: NUMA node %d has no cores",
                        o->numa_node);
  if (o->share_count > 1 && cs->nsets > 0)
    pool_take_share(cs, o->share_index, o->share_count); /* this rank's share */
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
    if (!w)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                          "zo_adam_pool_create: out of memory starting thread %d", t);
    w->pool = P;
    w->index = t;
    int rc = pthread_create(&P->threads[t], NULL, worker_main, w);
    if (rc != 0) {
      free(w);
      return zo_error_set(ZO_ERR_SYSTEM,
                          "zo_adam_pool_create: pthread_create for thread %d of %d: %s", t, nt,
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
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                      "zo_adam_pool_create: cannot allocate a pool of %d threads", nt);
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
  P->llc_bytes = pool_llc_bytes(cs.topo, cs.sets, cs.nsets, nt);
  core_sets_free(&cs);
  P->probe_seg_bytes = PROBE_LLC_FACTOR * P->llc_bytes;
  if (P->probe_seg_bytes < PROBE_MIN_SEG_BYTES) P->probe_seg_bytes = PROBE_MIN_SEG_BYTES;
  if (P->probe_seg_bytes > PROBE_MAX_SEG_BYTES) P->probe_seg_bytes = PROBE_MAX_SEG_BYTES;
  /* no task can run before *out is returned, so these need no lock */
  P->stores = zo_adam_stores_env();
  P->state_nt = P->stores == ZO_STORES_NT && lvl != ZO_SIMD_SCALAR ? (unsigned)ZO_NT_STATE : 0u;
  P->probe_pending =
      (P->stores == ZO_STORES_AUTO || P->stores == ZO_STORES_PROBE) && lvl != ZO_SIMD_SCALAR;
  pool_compose_desc(P);
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
const char *zo_adam_pool_describe(const zo_adam_pool_t *cP) {
  if (!cP) return "";
  zo_adam_pool_t *P = (zo_adam_pool_t *)cP; /* the text is rebuilt once the probe has decided */
  pthread_mutex_lock(&P->mu);
  if (P->desc_ver != P->stores_ver) pool_compose_desc(P);
  pthread_mutex_unlock(&P->mu);
  return P->desc;
}

int zo_adam_pool_stores_nt(const zo_adam_pool_t *cP, double *probe_ratio) {
  if (probe_ratio) *probe_ratio = 0;
  if (!cP) return 0;
  zo_adam_pool_t *P = (zo_adam_pool_t *)cP;
  pthread_mutex_lock(&P->mu);
  int r = P->probe_pending ? -1 : P->state_nt ? 1 : 0;
  if (probe_ratio && !P->probe_pending) *probe_ratio = P->probe_ratio;
  pthread_mutex_unlock(&P->mu);
  return r;
}

/* ---------------------------------------------------------------- tasks */

/* zo_adam_pool_probe_stores()'s first touch: zero [b, e) of its four float arrays. */
static void probe_zero_range(void *arg, size_t b, size_t e, int thread) {
  float **a = arg;
  (void)thread;
  for (int k = 0; k < 4; k++) memset(a[k] + b, 0, (e - b) * sizeof(float));
}


/* Queue T (under mu): at the tail, or (@urgent) behind the running head and the urgent tasks queued
 * before it. */
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

zo_status zo_adam_pool_submit(zo_adam_pool_t *P, const zo_adam_hparams *hp, const zo_adam_shard *sh,
                              unsigned flags, zo_adam_task_t **task) {
  if (!P || !task)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit: %s is NULL",
                        !P ? "pool" : "task");
  *task = NULL;
  zo_adam_job j;
  ZO_CHECK(zo_adam_job_init("zo_adam_pool_submit", hp, sh, flags, &j));
  struct zo_adam_task *T = task_new(P);
  if (!T) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_submit: cannot allocate a task");
  T->kind = K_ADAM;
  T->job = j;
  T->flags = flags;
  T->n = sh->n;
  T->seg_e = sh->n;
  T->tile = task_tile(P->tile, sh->n, P->nt);
  T->align = 64;
  T->phase = (flags & ZO_ADAM_SKIP_NONFINITE) ? 0 : 1;
  submit_task(P, T, 0);
  *task = T;
  return ZO_OK;
}

zo_status zo_adam_task_poll(zo_adam_task_t *T, int *done) {
  if (!T || !done)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_task_poll: %s is NULL", !T ? "task" : "done");
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

zo_status zo_adam_pool_update(zo_adam_pool_t *P, const zo_adam_hparams *hp, const zo_adam_shard *sh,
                              unsigned flags, zo_adam_result *res) {
  if (res) res->nonfinite = res->skipped = 0;
  zo_adam_task_t *T = NULL;
  ZO_CHECK(zo_adam_pool_submit(P, hp, sh, flags, &T));
  return zo_adam_task_wait(T, res);
}

zo_status zo_adam_pool_submit_for(zo_adam_pool_t *P,
                                  void (*fn)(void *arg, size_t begin, size_t end, int thread),
                                  void *arg, size_t n, size_t tile, unsigned flags,
                                  zo_adam_task_t **task) {
  if (!task) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: task is NULL");
  *task = NULL;
  if (!P || !fn)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: %s is NULL",
                        !P ? "pool" : "fn");
  if (n == 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: n is 0 (nothing to run)");
  if (flags & ~(unsigned)ZO_ADAM_TASK_URGENT)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_submit_for: unknown flags 0x%x", flags);
  struct zo_adam_task *T = task_new(P);
  if (!T)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_submit_for: cannot allocate a task");
  T->kind = K_FOR;
  T->fn = fn;
  T->arg = arg;
  T->n = n;
  T->seg_e = n;
  T->tile = tile == ZO_ADAM_TILE_CONTIGUOUS ? 0 : tile ? tile : task_tile(P->tile, n, P->nt);
  T->align = 64;
  T->phase = 1;
  submit_task(P, T, (flags & ZO_ADAM_TASK_URGENT) != 0);
  *task = T;
  return ZO_OK;
}

zo_status zo_adam_pool_parallel_for(zo_adam_pool_t *P,
                                    void (*fn)(void *arg, size_t begin, size_t end, int thread),
                                    void *arg, size_t n, size_t tile) {
  if (!P || !fn)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_parallel_for: %s is NULL",
                        !P ? "pool" : "fn");
  if (n == 0) return ZO_OK;
  zo_adam_task_t *T;
  ZO_CHECK(zo_adam_pool_submit_for(P, fn, arg, n, tile, 0, &T));
  return zo_adam_task_wait(T, NULL);
}

zo_status zo_adam_pool_sqnorm(zo_adam_pool_t *P, const void *grad, zo_dtype grad_dtype, size_t n,
                              double *sqnorm, int *nonfinite) {
  if (!P) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_sqnorm: pool is NULL");
  if (!sqnorm) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_sqnorm: sqnorm is NULL");
  *sqnorm = 0.0;
  if (nonfinite) *nonfinite = 0;
  if (grad_dtype != ZO_DTYPE_F32 && grad_dtype != ZO_DTYPE_F16 && grad_dtype != ZO_DTYPE_BF16)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_adam_pool_sqnorm: grad dtype %d is not F32, F16 or BF16",
                        (int)grad_dtype);
  if (n == 0) return ZO_OK;
  if (!grad)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_sqnorm: grad is NULL with n = %zu", n);
  size_t nchunks = (n + ZO_SQNORM_CHUNK - 1) / ZO_SQNORM_CHUNK;
  double *part = malloc(nchunks * sizeof *part);
  struct zo_adam_task *T = part ? task_new(P) : NULL;
  if (!T) {
    free(part);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "zo_adam_pool_sqnorm: cannot allocate %zu chunk partials", nchunks);
  }
  T->kind = K_SQNORM;
  T->g = grad;
  T->gt = grad_dtype;
  T->n_elems = n;
  T->part = part;
  T->n = nchunks;
  T->seg_e = nchunks;
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

/* ---------------------------------------------------------------- store probe on scratch */

/* Under mu: the pairs the probe still needs, 0 when it is not pending. */
static size_t probe_missing(const zo_adam_pool_t *P) {
  return P->probe_pending ? (size_t)(ZO_STORES_PROBE_PAIRS - P->probe_pairs) : 0;
}

zo_status zo_adam_pool_probe_stores(zo_adam_pool_t *P) {
  if (!P) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_adam_pool_probe_stores: pool is NULL");
  pthread_mutex_lock(&P->mu);
  const size_t seg_bytes =
      P->stores == ZO_STORES_PROBE ? PROBE_TEST_SEG_ELEMS * 16 : P->probe_seg_bytes;
  const size_t pairs = probe_missing(P);
  pthread_mutex_unlock(&P->mu);
  if (!pairs) return ZO_OK;
  /* fp32 param, grad, m, v (16 bytes an element, no copy-out), all zero: the update keeps them
   * zero */
  const size_t n = (2 * pairs * seg_bytes / 16 + 63) / 64 * 64, nbytes = n * 4;
  float *a[4] = {NULL, NULL, NULL, NULL};
  zo_status st = ZO_OK;
  for (int k = 0; k < 4 && st == ZO_OK; k++)
    if (!(a[k] = aligned_alloc(64, nbytes))) {
      char b[32];
      st = zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "zo_adam_pool_probe_stores: cannot allocate 4 x %s of scratch",
                        zo_format_bytes(b, sizeof b, (double)nbytes));
    }
  if (st == ZO_OK) {
    /* first touch on the pool's threads, so the pages sit where its tasks' pages do */
    ZO_CHECK_GOTO(zo_adam_pool_parallel_for(P, probe_zero_range, a, n, 0), st, done);
    const zo_adam_hparams hp = {.lr = 1e-3f,
                                .beta1 = 0.9f,
                                .beta2 = 0.999f,
                                .eps = 1e-8f,
                                .weight_decay = 0.0f,
                                .mode = ZO_ADAM_MODE_ADAMW,
                                .bias_correction = 1,
                                .step = 1,
                                .grad_scale = 1.0f};
    const zo_adam_shard sh = {.param = a[0],
                              .grad = a[1],
                              .grad_dtype = ZO_DTYPE_F32,
                              .exp_avg = a[2],
                              .exp_avg_sq = a[3],
                              .state_dtype = ZO_DTYPE_F32,
                              .n = n};
    zo_adam_job j;
    ZO_CHECK_GOTO(zo_adam_job_init("zo_adam_pool_probe_stores", &hp, &sh, 0, &j), st, done);
    /* pairs disturbed by other processes are dropped: a few more runs of the scratch update, then give up
       (regular stores meanwhile; a later large task may still complete the probe) */
    for (int attempt = 0; attempt < PROBE_CALL_ATTEMPTS && st == ZO_OK; attempt++) {
      pthread_mutex_lock(&P->mu);
      const size_t missing = probe_missing(P);
      pthread_mutex_unlock(&P->mu);
      if (!missing) break;
      struct zo_adam_task *T = task_new(P);
      if (!T) {
        st =
            zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_adam_pool_probe_stores: cannot allocate a task");
        goto done;
      }
      T->kind = K_ADAM;
      T->job = j;
      T->n = T->seg_e = n;
      T->tile = task_tile(P->tile, n, P->nt);
      T->align = 64;
      T->phase = 1;
      T->probe_all = 1;
      submit_task(P, T, 0);
      st = zo_adam_task_wait(T, NULL);
    }
  }
done:
  for (int k = 0; k < 4; k++) free(a[k]);
  return st;
}
