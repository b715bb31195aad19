/*
 * arena.c - the defragmenting device arena of zoffload/arena.h: one device
 * reservation, TLSF bins for best fit, coalescing, stream-ordered frees and
 * compaction by device-to-device copies. It does not decide what stays on the
 * device (offload/ does) and touches no device bytes except through
 * zoffload/device.h copies.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base_internal.h"
#include "zoffload/arena.h"

/* Segment states. Segments tile the reservation in address order. */
enum { SEG_FREE = 0, SEG_LIVE = 1, SEG_PENDING = 2, SEG_DEAD = 3 /* record back in the pool */ };

/* TLSF geometry: 2^SL_BITS sub-classes per power of two; sizes in ZO_ARENA_ALIGN units. */
enum { SL_BITS = 5, SL_COUNT = 1 << SL_BITS, FL_COUNT = 64 - SL_BITS + 1 };
enum { BIN_SCAN = 16 };   /* blocks of one bin looked at for the best fit */
enum { SLAB_SEGS = 256 }; /* segment records allocated at a time */
#define SEG_MAGIC 0x7a6f6172656e61ull /* "zoarena" */

/* One recorded last use: the work enqueued on @s up to the record of @ev. */
typedef struct seg_use {
  zo_stream_t *s;
  zo_event_t *ev;
} seg_use;

/* A run of the reservation: free, live (the user's handle), or freed and
 * waiting for its uses (pending). Records are pooled per arena and never
 * returned to libc before zo_arena_destroy(), so a stale handle reads valid
 * memory (state SEG_DEAD or a reused record). */
struct zo_arena_block {
  uint64_t magic;
  zo_arena_t *arena;
  size_t off, size;                /* bytes from the reservation's base; multiples of ZO_ARENA_ALIGN */
  int state;                       /* SEG_* */
  int pins;                        /* live: pin count */
  uint64_t id;                     /* live/pending: allocation number (trace ids) */
  seg_use *uses;                   /* live/pending: last uses not known complete; [n_uses], capacity cap_uses */
  unsigned n_uses, cap_uses;
  zo_arena_block_t *prev, *next;   /* address order */
  zo_arena_block_t *bprev, *bnext; /* free: bin list; pending: pending list; dead: pool list */
};

typedef struct seg_slab {
  struct seg_slab *next;
  zo_arena_block_t segs[SLAB_SEGS];
} seg_slab;

struct zo_arena {
  zo_device_t *dev;
  zo_stream_t *stream; /* compaction copies */
  pthread_mutex_t mu;
  char *base;
  size_t capacity;
  zo_arena_policy policy;
  zo_arena_block_t *head; /* lowest address */
  zo_arena_block_t *bins[FL_COUNT][SL_COUNT];
  uint64_t fl_map;          /* bit fl: some bins[fl][*] non-empty */
  uint32_t sl_map[FL_COUNT]; /* bit sl: bins[fl][sl] non-empty */
  zo_arena_block_t *pending; /* freed blocks waiting for their uses */
  zo_arena_block_t *pool;    /* dead records */
  seg_slab *slabs;
  zo_event_t **ev_pool; /* idle events, [n_ev_pool] of cap_ev_pool */
  size_t n_ev_pool, cap_ev_pool;
  zo_arena_stats st; /* capacity, live/pending/pinned bytes and counters; the rest filled by get_stats */
  uint64_t next_id;
  FILE *trace;
  uint64_t gen;         /* frees and unpins so far: what can let a compaction do more */
  uint64_t futile_gen;  /* at this gen, a compaction could not make a hole of futile_size bytes */
  size_t futile_size;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t align_up(size_t x) { return (x + ZO_ARENA_ALIGN - 1) / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN; }

static int log2_floor(uint64_t x) { return 63 - __builtin_clzll(x); }

/* ------------------------------------------------------------ segment records and events */

static zo_arena_block_t *seg_new(zo_arena_t *a, size_t off, size_t size, int state) {
  if (!a->pool) {
    seg_slab *sl = calloc(1, sizeof *sl);
    if (!sl) return NULL;
    sl->next = a->slabs;
    a->slabs = sl;
    for (int i = SLAB_SEGS - 1; i >= 0; i--) {
      sl->segs[i].magic = SEG_MAGIC;
      sl->segs[i].arena = a;
      sl->segs[i].state = SEG_DEAD;
      sl->segs[i].bnext = a->pool;
      a->pool = &sl->segs[i];
    }
  }
  zo_arena_block_t *s = a->pool;
  a->pool = s->bnext;
  s->off = off;
  s->size = size;
  s->state = state;
  s->pins = 0;
  s->id = 0;
  s->n_uses = 0;
  s->prev = s->next = s->bprev = s->bnext = NULL;
  return s;
}

static void ev_put(zo_arena_t *a, zo_event_t *ev) {
  if (a->n_ev_pool == a->cap_ev_pool) {
    size_t cap = a->cap_ev_pool ? 2 * a->cap_ev_pool : 16;
    zo_event_t **p = realloc(a->ev_pool, cap * sizeof *p);
    if (!p) {
      zo_event_destroy(ev);
      return;
    }
    a->ev_pool = p;
    a->cap_ev_pool = cap;
  }
  a->ev_pool[a->n_ev_pool++] = ev;
}

static zo_status ev_get(zo_arena_t *a, zo_event_t **ev) {
  if (a->n_ev_pool) {
    *ev = a->ev_pool[--a->n_ev_pool];
    return ZO_OK;
  }
  return zo_event_create(a->dev, ev);
}

/* Forget every use of @s (known complete), returning the events to the pool. */
static void uses_clear(zo_arena_t *a, zo_arena_block_t *s) {
  for (unsigned i = 0; i < s->n_uses; i++) ev_put(a, s->uses[i].ev);
  s->n_uses = 0;
}

/* Drop the uses of @s that have completed (non-blocking, or all of them
 * after waiting when @wait). Returns 1 when none is left. An event that
 * reports an error counts as complete: its stream's failure surfaces at that
 * stream's synchronize; the bytes are the arena's again either way. */
static int uses_settle(zo_arena_t *a, zo_arena_block_t *s, int wait) {
  for (unsigned i = 0; i < s->n_uses;) {
    int done = 1;
    if (wait) zo_event_synchronize(s->uses[i].ev);
    else zo_event_query(s->uses[i].ev, &done);
    if (done) {
      ev_put(a, s->uses[i].ev);
      s->uses[i] = s->uses[--s->n_uses];
    } else {
      i++;
    }
  }
  return s->n_uses == 0;
}

static void seg_release(zo_arena_t *a, zo_arena_block_t *s) {
  uses_clear(a, s);
  s->state = SEG_DEAD;
  s->prev = s->next = s->bprev = NULL;
  s->bnext = a->pool;
  a->pool = s;
}

/* Record the work enqueued on @st up to now as a last use of @b. A stream
 * already in the list is re-recorded (its queue is in order, so the new
 * capture covers the old). On error @b is unchanged. */
static zo_status use_add(zo_arena_t *a, zo_arena_block_t *b, zo_stream_t *st) {
  if (!st) return ZO_OK;
  for (unsigned i = 0; i < b->n_uses; i++)
    if (b->uses[i].s == st) return zo_event_record(b->uses[i].ev, st);
  uses_settle(a, b, 0);
  if (b->n_uses == b->cap_uses) {
    unsigned cap = b->cap_uses ? 2 * b->cap_uses : 2;
    seg_use *u = realloc(b->uses, cap * sizeof *u);
    if (!u) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "device arena: out of host memory");
    b->uses = u;
    b->cap_uses = cap;
  }
  zo_event_t *ev;
  ZO_CHECK(ev_get(a, &ev));
  zo_status st_rec = zo_event_record(ev, st);
  if (st_rec != ZO_OK) {
    ev_put(a, ev);
    return st_rec;
  }
  b->uses[b->n_uses].s = st;
  b->uses[b->n_uses].ev = ev;
  b->n_uses++;
  return ZO_OK;
}

/* ------------------------------------------------------------ TLSF bins */

/* Bin of a size (bytes, aligned): below SL_COUNT units one bin per unit
 * (fl 0); above, fl = log2 class, sl = the next SL_BITS bits. */
static void bin_of(size_t size, int *fl, int *sl) {
  uint64_t u = size / ZO_ARENA_ALIGN;
  if (u < SL_COUNT) {
    *fl = 0;
    *sl = (int)u;
    return;
  }
  int f = log2_floor(u);
  *fl = f - SL_BITS + 1;
  *sl = (int)((u >> (f - SL_BITS)) & (SL_COUNT - 1));
}

static void bin_insert(zo_arena_t *a, zo_arena_block_t *s) {
  int fl, sl;
  bin_of(s->size, &fl, &sl);
  s->bprev = NULL;
  s->bnext = a->bins[fl][sl];
  if (s->bnext) s->bnext->bprev = s;
  a->bins[fl][sl] = s;
  a->fl_map |= 1ull << fl;
  a->sl_map[fl] |= 1u << sl;
}

static void bin_remove(zo_arena_t *a, zo_arena_block_t *s) {
  int fl, sl;
  bin_of(s->size, &fl, &sl);
  if (s->bprev) s->bprev->bnext = s->bnext;
  else a->bins[fl][sl] = s->bnext;
  if (s->bnext) s->bnext->bprev = s->bprev;
  s->bprev = s->bnext = NULL;
  if (!a->bins[fl][sl]) {
    a->sl_map[fl] &= ~(1u << sl);
    if (!a->sl_map[fl]) a->fl_map &= ~(1ull << fl);
  }
}

/* The smallest block holding @size among the first @limit of a bin list; an exact fit ends the scan. */
static zo_arena_block_t *best_in(zo_arena_block_t *s, size_t size, size_t limit) {
  zo_arena_block_t *best = NULL;
  for (size_t n = 0; s && n < limit; s = s->bnext, n++)
    if (s->size >= size && (!best || s->size < best->size)) {
      best = s;
      if (s->size == size) break;
    }
  return best;
}

/* Best fit: the request's own bin (its blocks may be smaller than @size),
 * then the first non-empty bin above it, whose every block fits; the first
 * BIN_SCAN blocks of each. Only when both fail, all of the own bin (a fitting
 * block there may sit further down its list). */
static zo_arena_block_t *find_best(zo_arena_t *a, size_t size) {
  int fl, sl;
  bin_of(size, &fl, &sl);
  zo_arena_block_t *s = best_in(a->bins[fl][sl], size, BIN_SCAN);
  if (s) return s;
  uint32_t slm = sl + 1 < SL_COUNT ? a->sl_map[fl] & (~0u << (sl + 1)) : 0;
  int ffl = fl;
  if (!slm) {
    const uint64_t flm = fl + 1 < FL_COUNT ? a->fl_map & (~0ull << (fl + 1)) : 0;
    if (flm) {
      ffl = __builtin_ctzll(flm);
      slm = a->sl_map[ffl];
    }
  }
  if (slm) return best_in(a->bins[ffl][__builtin_ctz(slm)], size, BIN_SCAN);
  return best_in(a->bins[fl][sl], size, SIZE_MAX);
}

/* The baseline: lowest-address free block that fits (linear in the segments). */
static zo_arena_block_t *find_first(zo_arena_t *a, size_t size) {
  for (zo_arena_block_t *s = a->head; s; s = s->next)
    if (s->state == SEG_FREE && s->size >= size) return s;
  return NULL;
}

static zo_arena_block_t *find(zo_arena_t *a, size_t size) {
  return a->policy == ZO_ARENA_BEST_FIT ? find_best(a, size) : find_first(a, size);
}

/* Largest free block: the highest non-empty bin holds it (a walk of that bin only). */
static size_t largest_free(const zo_arena_t *a) {
  if (!a->fl_map) return 0;
  int fl = log2_floor(a->fl_map);
  int sl = log2_floor(a->sl_map[fl]);
  size_t best = 0;
  for (const zo_arena_block_t *s = a->bins[fl][sl]; s; s = s->bnext)
    if (s->size > best) best = s->size;
  return best;
}

/* Make @s (not in any list but the address list) free and merge it with free neighbours. */
static void make_free(zo_arena_t *a, zo_arena_block_t *s) {
  s->state = SEG_FREE;
  s->pins = 0;
  zo_arena_block_t *p = s->prev, *n = s->next;
  if (p && p->state == SEG_FREE) {
    bin_remove(a, p);
    p->size += s->size;
    p->next = n;
    if (n) n->prev = p;
    seg_release(a, s);
    s = p;
  }
  n = s->next;
  if (n && n->state == SEG_FREE) {
    bin_remove(a, n);
    s->size += n->size;
    s->next = n->next;
    if (n->next) n->next->prev = s;
    seg_release(a, n);
  }
  bin_insert(a, s);
}

/* ------------------------------------------------------------ pending frees */

static void pending_unlink(zo_arena_t *a, zo_arena_block_t *s) {
  if (s->bprev) s->bprev->bnext = s->bnext;
  else a->pending = s->bnext;
  if (s->bnext) s->bnext->bprev = s->bprev;
  s->bprev = s->bnext = NULL;
}

/* Pending frees whose uses have completed become free (all of them, after waiting, with @wait). */
static void reclaim(zo_arena_t *a, int wait) {
  for (zo_arena_block_t *s = a->pending, *nx; s; s = nx) {
    nx = s->bnext;
    if (!uses_settle(a, s, wait)) continue;
    pending_unlink(a, s);
    a->st.pending_bytes -= s->size;
    make_free(a, s);
  }
}

/* ------------------------------------------------------------ trace */

static void trace_line(zo_arena_t *a, char op, uint64_t id, size_t nbytes) {
  if (!a->trace) return;
  if (op == 'a') fprintf(a->trace, "a %llu %zu\n", (unsigned long long)id, nbytes);
  else fprintf(a->trace, "%c %llu\n", op, (unsigned long long)id);
}

/* Arenas that traced to ZO_ARENA_TRACE so far in this process. */
static atomic_uint g_env_traces;

static zo_status trace_open(zo_arena_t *a, const zo_arena_opts *opts) {
  const char *path = opts && opts->trace_path ? opts->trace_path : getenv("ZO_ARENA_TRACE");
  if (!path || !path[0]) return ZO_OK;
  char buf[4096];
  if (!(opts && opts->trace_path)) {
    unsigned k = atomic_fetch_add(&g_env_traces, 1);
    if (k) {
      size_t n = strlen(path);
      const size_t sfx = sizeof ".trace" - 1;
      int w;
      if (n > sfx && !strcmp(path + n - sfx, ".trace"))
        w = snprintf(buf, sizeof buf, "%.*s.%u.trace", (int)(n - sfx), path, k);
      else
        w = snprintf(buf, sizeof buf, "%s.%u", path, k);
      if (w < 0 || (size_t)w >= sizeof buf)
        return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_create: ZO_ARENA_TRACE path too long");
      path = buf;
    }
  }
  a->trace = fopen(path, "w");
  if (!a->trace)
    return zo_error_set(ZO_ERR_SYSTEM, "zo_arena_create: cannot open trace file %s: %s", path, strerror(errno));
  fprintf(a->trace, "# arena %zu\n", a->capacity);
  return ZO_OK;
}

/* ------------------------------------------------------------ create / destroy */

zo_status zo_arena_create(zo_device_t *dev, size_t capacity_bytes, const zo_arena_opts *opts, zo_arena_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_create: out is NULL");
  *out = NULL;
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_create: dev is NULL");
  const size_t cap = capacity_bytes / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN;
  if (cap == 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_create: capacity %zu bytes is below one block (%d bytes)",
                        capacity_bytes, ZO_ARENA_ALIGN);
  const zo_arena_policy policy = opts ? opts->policy : ZO_ARENA_BEST_FIT;
  if (policy != ZO_ARENA_BEST_FIT && policy != ZO_ARENA_FIRST_FIT_NO_COMPACT)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_create: unknown policy %d", (int)policy);
  zo_arena_t *a = calloc(1, sizeof *a);
  if (!a) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_arena_create: out of host memory");
  pthread_mutex_init(&a->mu, NULL);
  a->dev = dev;
  a->policy = policy;
  a->futile_gen = UINT64_MAX;
  zo_status st = zo_device_malloc(dev, cap, (void **)&a->base);
  if (st != ZO_OK) {
    st = zo_error_prefix(st, "device arena of %zu bytes on %s", cap, zo_device_name(dev));
    goto fail;
  }
  a->capacity = cap;
  a->st.capacity = cap;
  ZO_CHECK_GOTO(zo_stream_create(dev, &a->stream), st, fail);
  a->head = seg_new(a, 0, cap, SEG_FREE);
  if (!a->head) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_arena_create: out of host memory");
    goto fail;
  }
  bin_insert(a, a->head);
  ZO_CHECK_GOTO(trace_open(a, opts), st, fail);
  *out = a;
  return ZO_OK;
fail:
  zo_arena_destroy(a);
  return st;
}

void zo_arena_destroy(zo_arena_t *a) {
  if (!a) return;
  if (a->stream) zo_stream_synchronize(a->stream);
  if (a->st.n_live_blocks)
    zo_debug("zo_arena_destroy: %zu blocks (%zu bytes) still live", a->st.n_live_blocks, a->st.live_bytes);
  for (zo_arena_block_t *s = a->head; s; s = s->next) uses_settle(a, s, 1);
  for (seg_slab *sl = a->slabs, *nx; sl; sl = nx) {
    nx = sl->next;
    for (int i = 0; i < SLAB_SEGS; i++) free(sl->segs[i].uses);
    free(sl);
  }
  for (size_t i = 0; i < a->n_ev_pool; i++) zo_event_destroy(a->ev_pool[i]);
  free(a->ev_pool);
  zo_stream_destroy(a->stream);
  if (a->base) zo_device_free(a->dev, a->base);
  if (a->trace) fclose(a->trace);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* ------------------------------------------------------------ compaction */

/* Copy @size bytes from @src down to @dst (< src) on the arena's stream;
 * where they overlap, in ascending chunks of at most (src - dst) bytes, so no
 * copy overlaps itself and, in stream order, each chunk only overwrites bytes
 * earlier chunks have already read. */
static zo_status move_down(zo_arena_t *a, char *dst, char *src, size_t size) {
  const size_t d = (size_t)(src - dst);
  const size_t chunk = d < size ? d : size;
  for (size_t o = 0; o < size; o += chunk) {
    const size_t n = size - o < chunk ? size - o : chunk;
    ZO_CHECK(zo_memcpy_async(a->stream, dst + o, src + o, n, ZO_COPY_D2D));
    a->st.copies++;
  }
  return ZO_OK;
}

/* Whether a compaction could make a hole of @size: enough bytes not live,
 * and a stretch between pinned blocks at least that long. Pending bytes
 * count as free (a compaction waits for them). */
static int compaction_may_fit(const zo_arena_t *a, size_t size) {
  if (a->capacity - a->st.live_bytes < size) return 0;
  size_t start = 0;
  for (const zo_arena_block_t *s = a->head; s; s = s->next)
    if (s->state == SEG_LIVE && s->pins) {
      if (s->off - start >= size) return 1;
      start = s->off + s->size;
    }
  return a->capacity - start >= size;
}

/* Rebuild the free segments and bins from the live blocks' offsets (address order kept). */
static void rebuild_free(zo_arena_t *a) {
  memset(a->bins, 0, sizeof a->bins);
  memset(a->sl_map, 0, sizeof a->sl_map);
  a->fl_map = 0;
  zo_arena_block_t *live = NULL, **tail = &live;
  for (zo_arena_block_t *s = a->head, *nx; s; s = nx) {
    nx = s->next;
    if (s->state == SEG_LIVE) {
      *tail = s;
      tail = &s->next;
    } else {
      seg_release(a, s); /* free: no uses (pending ones were reclaimed first) */
    }
  }
  *tail = NULL;
  a->head = NULL;
  zo_arena_block_t *prev = NULL;
  size_t at = 0;
  for (zo_arena_block_t *s = live;;) {
    zo_arena_block_t *nx = s ? s->next : NULL;
    const size_t end = s ? s->off : a->capacity;
    if (end > at) {
      /* Records released just above are reused (there are never more gaps
       * than free segments before), so this does not allocate; if it ever
       * failed the gap would only be lost until the next compaction. */
      zo_arena_block_t *g = seg_new(a, at, end - at, SEG_FREE);
      if (g) {
        g->prev = prev;
        if (prev) prev->next = g;
        else a->head = g;
        prev = g;
        bin_insert(a, g);
      }
    }
    if (!s) break;
    s->prev = prev;
    if (prev) prev->next = s;
    else a->head = s;
    prev = s;
    at = s->off + s->size;
    s = nx;
  }
  if (prev) prev->next = NULL;
}

/* Queue the waits for @s's last uses on the arena's stream. */
static zo_status wait_uses(zo_arena_t *a, const zo_arena_block_t *s) {
  for (unsigned i = 0; i < s->n_uses; i++) ZO_CHECK(zo_stream_wait_event(a->stream, s->uses[i].ev));
  return ZO_OK;
}

/* Phase 1: slide every unpinned live block down to the end of the live
 * block before it (pinned blocks stay; each stretch between pinned blocks
 * ends up packed at its low end with its free bytes on top). */
static zo_status slide(zo_arena_t *a, size_t *moved) {
  size_t cur = 0;
  zo_status st = ZO_OK;
  for (zo_arena_block_t *s = a->head; s; s = s->next) {
    if (s->state != SEG_LIVE) continue;
    if (s->pins || s->off == cur) {
      cur = s->off + s->size;
      continue;
    }
    /* After its last uses. The stream also already waits for the uses of
     * every block moved before, whose old bytes this move may overwrite. */
    st = wait_uses(a, s);
    if (st == ZO_OK) st = move_down(a, a->base + cur, a->base + s->off, s->size);
    if (st != ZO_OK) break; /* a partial copy: this block's bytes are undefined */
    *moved += s->size;
    s->off = cur;
    cur += s->size;
  }
  rebuild_free(a); /* the offsets are final (copies in flight: stream order covers them) */
  return st;
}

/* Phase 2, after a slide left no hole of the wanted size because pinned
 * blocks split the free bytes. A stretch is a maximal run of segments with
 * no pinned block; after a slide each stretch is packed at its low end with
 * its free bytes in one hole on top, and its bounds never move (pinned
 * blocks do not). A plan for @want picks, for each stretch at least @want
 * long, unpinned blocks in it whose bytes, moved into free holes of other
 * stretches, bring its free bytes to @want (the smallest single block that
 * is enough, else largest first; each into the best-fitting hole), and keeps
 * the stretch needing the fewest bytes moved. When no stretch has a plan,
 * it names a sub-goal instead: the smallest block that would be enough on
 * its own, for which a hole must first be made in another stretch. */
typedef struct evac_move {
  zo_arena_block_t *blk, *hole;
} evac_move;

typedef struct evac_plan {
  evac_move *mv; /* [n] */
  size_t n, cost;
  size_t sub_size, sub_lo, sub_hi; /* sub-goal: a hole of sub_size outside stretch [sub_lo, sub_hi); 0 = none */
} evac_plan;

typedef struct evac_work {
  zo_arena_block_t **holes;
  size_t *room;
  evac_move *cand;
} evac_work;

static int by_size_desc(const void *x, const void *y) {
  const zo_arena_block_t *a = ((const evac_move *)x)->blk, *b = ((const evac_move *)y)->blk;
  return a->size < b->size ? 1 : a->size > b->size ? -1 : (a->off > b->off) - (a->off < b->off);
}

/* Best-fitting hole (index) for @size among @nh, or SIZE_MAX. */
static size_t best_hole(const size_t *room, size_t nh, size_t size) {
  size_t h = SIZE_MAX;
  for (size_t k = 0; k < nh; k++)
    if (room[k] >= size && (h == SIZE_MAX || room[k] < room[h])) h = k;
  return h;
}

#define PINNED_SEG(s) ((s)->state == SEG_LIVE && (s)->pins)

enum { EVAC_DEPTH = 4 }; /* goals in a chain: the request, then sub-goals */

/* Whether [@lo, @hi) is, or @off lies in, one of the @n_ex excluded stretches @ex. */
static int excluded_stretch(const size_t (*ex)[2], int n_ex, size_t lo, size_t hi) {
  for (int i = 0; i < n_ex; i++)
    if (ex[i][0] == lo && ex[i][1] == hi) return 1;
  return 0;
}
static int excluded_off(const size_t (*ex)[2], int n_ex, size_t off) {
  for (int i = 0; i < n_ex; i++)
    if (off >= ex[i][0] && off < ex[i][1]) return 1;
  return 0;
}

/* Plan for a hole of @want in a stretch not among the @n_ex stretches @ex (the goals this one
 * serves), moving blocks only into holes outside those too. */
static void evac_planner(zo_arena_t *a, size_t want, const size_t (*ex)[2], int n_ex, evac_work *w, evac_plan *p) {
  p->n = 0;
  p->cost = SIZE_MAX;
  p->sub_size = 0;
  for (zo_arena_block_t *first = a->head; first;) {
    if (PINNED_SEG(first)) {
      first = first->next;
      continue;
    }
    zo_arena_block_t *last = first;
    while (last->next && !PINNED_SEG(last->next)) last = last->next;
    zo_arena_block_t *after = last->next;
    const size_t lo = first->off, hi = last->off + last->size;
    size_t fr = 0, n = 0;
    for (zo_arena_block_t *s = first;; s = s->next) {
      if (s->state == SEG_FREE) fr += s->size;
      else w->cand[n++].blk = s; /* live, unpinned */
      if (s == last) break;
    }
    first = after;
    if (hi - lo < want || fr >= want || excluded_stretch(ex, n_ex, lo, hi)) continue;
    const size_t need = want - fr;
    size_t nh = 0;
    for (zo_arena_block_t *s = a->head; s; s = s->next)
      if (s->state == SEG_FREE && (s->off < lo || s->off >= hi) && !excluded_off(ex, n_ex, s->off)) {
        w->holes[nh] = s;
        w->room[nh++] = s->size;
      }
    qsort(w->cand, n, sizeof *w->cand, by_size_desc);
    size_t evac = 0, n_mv = 0, single = SIZE_MAX, enough = 0; /* enough: smallest block >= need, bytes */
    for (size_t i = 0; i < n && w->cand[i].blk->size >= need; i++) { /* descending: the last is the smallest */
      enough = w->cand[i].blk->size;
      if (best_hole(w->room, nh, w->cand[i].blk->size) != SIZE_MAX) single = i;
    }
    if (single != SIZE_MAX) {
      w->cand[0].hole = w->holes[best_hole(w->room, nh, w->cand[single].blk->size)];
      w->cand[0].blk = w->cand[single].blk;
      evac = w->cand[0].blk->size;
      n_mv = 1;
    } else {
      for (size_t i = 0; i < n && evac < need; i++) {
        const size_t h = best_hole(w->room, nh, w->cand[i].blk->size);
        if (h == SIZE_MAX) continue;
        w->room[h] -= w->cand[i].blk->size;
        evac += w->cand[i].blk->size;
        w->cand[n_mv].blk = w->cand[i].blk;
        w->cand[n_mv++].hole = w->holes[h];
      }
    }
    if (evac >= need) {
      if (evac < p->cost) {
        memcpy(p->mv, w->cand, n_mv * sizeof *p->mv);
        p->n = n_mv;
        p->cost = evac;
      }
    } else if (enough && (!p->sub_size || enough < p->sub_size)) {
      p->sub_size = enough;
      p->sub_lo = lo;
      p->sub_hi = hi;
    }
  }
}

/* Move each planned block to the low end of its hole (another stretch: no overlap); its old bytes
 * become free. */
static zo_status evac_run(zo_arena_t *a, const evac_plan *p, size_t *moved) {
  for (size_t i = 0; i < p->n; i++) {
    zo_arena_block_t *s = p->mv[i].blk, *f = p->mv[i].hole;
    zo_arena_block_t *vac = seg_new(a, s->off, s->size, SEG_FREE);
    if (!vac) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "device arena: out of host memory");
    zo_status st = wait_uses(a, s);
    if (st == ZO_OK) st = zo_memcpy_async(a->stream, a->base + f->off, a->base + s->off, s->size, ZO_COPY_D2D);
    if (st != ZO_OK) {
      seg_release(a, vac);
      return st;
    }
    a->st.copies++;
    *moved += s->size;
    vac->prev = s->prev; /* vac takes s's place in the address list */
    vac->next = s->next;
    if (s->prev) s->prev->next = vac;
    else a->head = vac;
    if (s->next) s->next->prev = vac;
    bin_remove(a, f); /* s goes before f, at f's start */
    s->prev = f->prev;
    s->next = f;
    if (f->prev) f->prev->next = s;
    else a->head = s;
    f->prev = s;
    s->off = f->off;
    f->off += s->size;
    f->size -= s->size;
    if (f->size == 0) {
      s->next = f->next;
      if (f->next) f->next->prev = s;
      seg_release(a, f);
    } else {
      bin_insert(a, f);
    }
    make_free(a, vac);
  }
  return ZO_OK;
}

/* Phase 2 driver. Each round follows the chain request -> sub-goal -> ...
 * (at most EVAC_DEPTH goals, each excluding the stretches of the goals
 * before it) to the first goal with a plan, runs that plan and slides, which
 * gathers the freed bytes; then starts again from the request. Stops when
 * the request fits, after 2 * EVAC_DEPTH rounds, or when no chain ends in a
 * plan. */
static zo_status evacuate(zo_arena_t *a, size_t want, size_t *moved) {
  size_t n_seg = 0;
  for (zo_arena_block_t *s = a->head; s; s = s->next) n_seg++;
  evac_work w = {malloc(n_seg * sizeof *w.holes), malloc(n_seg * sizeof *w.room), malloc(n_seg * sizeof *w.cand)};
  evac_plan p = {malloc(n_seg * sizeof *p.mv), 0, 0, 0, 0, 0};
  zo_status st = ZO_OK;
  if (!w.holes || !w.room || !w.cand || !p.mv) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "device arena: out of host memory");
    goto out;
  }
  for (int round = 0; round < 2 * EVAC_DEPTH && largest_free(a) < want; round++) {
    size_t ex[EVAC_DEPTH][2], goal = want;
    int n_ex = 0;
    p.n = 0;
    for (int depth = 0; depth < EVAC_DEPTH; depth++) {
      evac_planner(a, goal, (const size_t(*)[2])ex, n_ex, &w, &p);
      if (p.n || !p.sub_size) break;
      ex[n_ex][0] = p.sub_lo;
      ex[n_ex][1] = p.sub_hi;
      n_ex++;
      goal = p.sub_size;
    }
    if (!p.n) break;
    st = evac_run(a, &p, moved);
    if (st == ZO_OK) st = slide(a, moved);
    if (st != ZO_OK) break;
  }
out:
  free(w.holes);
  free(w.room);
  free(w.cand);
  free(p.mv);
  return st;
}

#undef PINNED_SEG

/* Compact (caller holds the mutex): wait for pending frees (a move may
 * overwrite their bytes), slide, and when that leaves no hole of @want
 * bytes (0: no target), evacuate; then synchronize. */
static zo_status compact(zo_arena_t *a, size_t want) {
  const double t0 = now_s();
  reclaim(a, 1);
  size_t moved = 0;
  zo_status st = slide(a, &moved);
  if (st == ZO_OK && want && largest_free(a) < want) st = evacuate(a, want, &moved);
  const zo_status sync = zo_stream_synchronize(a->stream);
  if (st == ZO_OK) st = sync;
  /* Every use the stream waited for is complete now. */
  for (zo_arena_block_t *s = a->head; s; s = s->next)
    if (s->state == SEG_LIVE && !s->pins) uses_settle(a, s, 0);
  a->st.compactions++;
  a->st.bytes_moved += moved;
  const double dt = now_s() - t0;
  a->st.compact_seconds += dt;
  if (st != ZO_OK) return zo_error_prefix(st, "arena compaction");
  zo_debug("device arena: compacted, %zu bytes moved in %.3f ms", moved, dt * 1e3);
  return ZO_OK;
}

zo_status zo_arena_compact(zo_arena_t *a) {
  if (!a) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_compact: arena is NULL");
  if (a->policy != ZO_ARENA_BEST_FIT) return ZO_OK;
  pthread_mutex_lock(&a->mu);
  const zo_status st = compact(a, 0);
  pthread_mutex_unlock(&a->mu);
  return st;
}

/* ------------------------------------------------------------ blocks */

static int is_live(const zo_arena_t *a, const zo_arena_block_t *b) {
  return b && b->magic == SEG_MAGIC && b->arena == a && b->state == SEG_LIVE;
}

static zo_status oom(zo_arena_t *a, size_t nbytes) {
  a->st.n_failed++;
  return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                      "device arena: cannot allocate %zu bytes: %zu live (%zu pinned), %zu free of %zu, largest "
                      "free block %zu",
                      nbytes, a->st.live_bytes, a->st.pinned_bytes, a->capacity - a->st.live_bytes, a->capacity,
                      largest_free(a));
}

zo_status zo_arena_alloc(zo_arena_t *a, size_t nbytes, zo_arena_block_t **out) {
  if (out) *out = NULL;
  if (!a || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_alloc: %s is NULL", !a ? "arena" : "out");
  if (nbytes == 0) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_alloc: nbytes is 0");
  pthread_mutex_lock(&a->mu);
  if (nbytes > a->capacity) {
    const zo_status st = oom(a, nbytes);
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  const size_t size = align_up(nbytes);
  reclaim(a, 0);
  zo_arena_block_t *s = find(a, size);
  if (!s && a->pending) {
    reclaim(a, 1);
    s = find(a, size);
  }
  if (!s && a->policy == ZO_ARENA_BEST_FIT && compaction_may_fit(a, size) &&
      !(a->futile_gen == a->gen && size >= a->futile_size)) {
    const zo_status st = compact(a, size);
    if (st != ZO_OK) {
      a->st.n_failed++;
      pthread_mutex_unlock(&a->mu);
      return st;
    }
    s = find(a, size);
    if (!s) { /* the layout is a fixed point until a free or an unpin: do not compact again for as much */
      a->futile_gen = a->gen;
      a->futile_size = size;
    }
  }
  if (!s) {
    const zo_status st = oom(a, nbytes);
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  if (s->size > size) { /* split: the tail stays free */
    zo_arena_block_t *rest = seg_new(a, s->off + size, s->size - size, SEG_FREE);
    if (!rest) {
      pthread_mutex_unlock(&a->mu);
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_arena_alloc: out of host memory");
    }
    bin_remove(a, s);
    rest->prev = s;
    rest->next = s->next;
    if (s->next) s->next->prev = rest;
    s->next = rest;
    s->size = size;
    bin_insert(a, rest);
  } else {
    bin_remove(a, s);
  }
  s->state = SEG_LIVE;
  s->pins = 1;
  s->id = a->next_id++;
  a->st.live_bytes += size;
  a->st.pinned_bytes += size;
  a->st.n_live_blocks++;
  a->st.n_allocs++;
  if (a->st.live_bytes > a->st.peak_live_bytes) a->st.peak_live_bytes = a->st.live_bytes;
  trace_line(a, 'a', s->id, nbytes);
  pthread_mutex_unlock(&a->mu);
  *out = s;
  return ZO_OK;
}

void *zo_arena_ptr(const zo_arena_block_t *b) {
  if (!b) return NULL;
  zo_arena_t *a = b->arena;
  pthread_mutex_lock(&a->mu);
  void *p = a->base + b->off;
  pthread_mutex_unlock(&a->mu);
  return p;
}

size_t zo_arena_size(const zo_arena_block_t *b) { return b ? b->size : 0; }

zo_status zo_arena_pin(zo_arena_t *a, zo_arena_block_t *b, void **ptr) {
  if (!a) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_pin: arena is NULL");
  pthread_mutex_lock(&a->mu);
  if (!is_live(a, b)) {
    pthread_mutex_unlock(&a->mu);
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_pin: %p is not a live block of this arena", (void *)b);
  }
  if (b->pins++ == 0) a->st.pinned_bytes += b->size;
  if (ptr) *ptr = a->base + b->off;
  trace_line(a, 'p', b->id, 0);
  pthread_mutex_unlock(&a->mu);
  return ZO_OK;
}

zo_status zo_arena_unpin(zo_arena_t *a, zo_arena_block_t *b, zo_stream_t *last_use) {
  if (!a) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_unpin: arena is NULL");
  pthread_mutex_lock(&a->mu);
  zo_status st = ZO_OK;
  if (!is_live(a, b)) {
    st = zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_unpin: %p is not a live block of this arena", (void *)b);
  } else if (!b->pins) {
    st = zo_error_set(ZO_ERR_INVALID_USAGE, "zo_arena_unpin: block %llu (%zu bytes) is not pinned",
                      (unsigned long long)b->id, b->size);
  } else if ((st = use_add(a, b, last_use)) != ZO_OK) {
    st = zo_error_prefix(st, "zo_arena_unpin: block %llu: recording its last use", (unsigned long long)b->id);
  } else {
    if (--b->pins == 0) a->st.pinned_bytes -= b->size;
    a->gen++;
    trace_line(a, 'u', b->id, 0);
  }
  pthread_mutex_unlock(&a->mu);
  return st;
}

zo_status zo_arena_free(zo_arena_t *a, zo_arena_block_t *b, zo_stream_t *last_use) {
  if (!a) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_free: arena is NULL");
  if (!b) return ZO_OK;
  pthread_mutex_lock(&a->mu);
  zo_status st = ZO_OK;
  if (!is_live(a, b)) {
    st = zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_free: %p is not a live block of this arena (freed twice?)",
                      (void *)b);
  } else if (b->pins > 1) {
    st = zo_error_set(ZO_ERR_INVALID_USAGE, "zo_arena_free: block %llu (%zu bytes) is pinned %d times; unpin "
                      "all but the owner's pin first", (unsigned long long)b->id, b->size, b->pins);
  } else if ((st = use_add(a, b, last_use)) != ZO_OK) {
    st = zo_error_prefix(st, "zo_arena_free: block %llu: recording its last use", (unsigned long long)b->id);
  }
  if (st != ZO_OK) {
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  a->gen++;
  trace_line(a, 'f', b->id, 0);
  if (b->pins) a->st.pinned_bytes -= b->size;
  b->pins = 0;
  a->st.live_bytes -= b->size;
  a->st.n_live_blocks--;
  if (uses_settle(a, b, 0)) {
    make_free(a, b);
  } else {
    b->state = SEG_PENDING;
    a->st.pending_bytes += b->size;
    b->bprev = NULL;
    b->bnext = a->pending;
    if (a->pending) a->pending->bprev = b;
    a->pending = b;
  }
  pthread_mutex_unlock(&a->mu);
  return ZO_OK;
}

zo_status zo_arena_get_stats(zo_arena_t *a, zo_arena_stats *out) {
  if (!a || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_get_stats: %s is NULL", !a ? "arena" : "out");
  pthread_mutex_lock(&a->mu);
  *out = a->st;
  out->capacity = a->capacity;
  out->free_bytes = a->capacity - a->st.live_bytes;
  out->largest_free = largest_free(a);
  out->fragmentation = out->free_bytes ? 1.0 - (double)out->largest_free / (double)out->free_bytes : 0.0;
  pthread_mutex_unlock(&a->mu);
  return ZO_OK;
}
