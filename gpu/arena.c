/*
 * arena.c - the defragmenting device arena of zoffload/arena.h: one device
 * reservation, TLSF bins for best fit, coalescing, stream-ordered frees and
 * compaction (arena_compact.c). It does not decide what stays on the
 * device (offload/ does) and touches no device bytes except through
 * zoffload/device.h copies.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "arena_internal.h"

static int log2_floor(uint64_t x) { return 63 - __builtin_clzll(x); }

/* ------------------------------------------------------------ segment records and events */

zo_arena_block_t *arena_seg_new(zo_arena_t *a, size_t off, size_t size, int state) {
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
int arena_uses_settle(zo_arena_t *a, zo_arena_block_t *s, int wait) {
  for (unsigned i = 0; i < s->n_uses;) {
    int done = 1;
    if (wait)
      zo_event_synchronize(s->uses[i].ev);
    else
      zo_event_query(s->uses[i].ev, &done);
    if (done) {
      ev_put(a, s->uses[i].ev);
      s->uses[i] = s->uses[--s->n_uses];
    } else {
      i++;
    }
  }
  return s->n_uses == 0;
}

void arena_seg_release(zo_arena_t *a, zo_arena_block_t *s) {
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
  arena_uses_settle(a, b, 0);
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

void arena_bin_insert(zo_arena_t *a, zo_arena_block_t *s) {
  int fl, sl;
  bin_of(s->size, &fl, &sl);
  s->bprev = NULL;
  s->bnext = a->bins[fl][sl];
  if (s->bnext) s->bnext->bprev = s;
  a->bins[fl][sl] = s;
  a->fl_map |= 1ull << fl;
  a->sl_map[fl] |= 1u << sl;
}

void arena_bin_remove(zo_arena_t *a, zo_arena_block_t *s) {
  int fl, sl;
  bin_of(s->size, &fl, &sl);
  if (s->bprev)
    s->bprev->bnext = s->bnext;
  else
    a->bins[fl][sl] = s->bnext;
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
size_t arena_largest_free(const zo_arena_t *a) {
  if (!a->fl_map) return 0;
  int fl = log2_floor(a->fl_map);
  int sl = log2_floor(a->sl_map[fl]);
  size_t best = 0;
  for (const zo_arena_block_t *s = a->bins[fl][sl]; s; s = s->bnext)
    if (s->size > best) best = s->size;
  return best;
}

/* Make @s (not in any list but the address list) free and merge it with free neighbours. */
void arena_make_free(zo_arena_t *a, zo_arena_block_t *s) {
  s->state = SEG_FREE;
  s->pins = 0;
  zo_arena_block_t *p = s->prev, *n = s->next;
  if (p && p->state == SEG_FREE) {
    arena_bin_remove(a, p);
    p->size += s->size;
    p->next = n;
    if (n) n->prev = p;
    arena_seg_release(a, s);
    s = p;
  }
  n = s->next;
  if (n && n->state == SEG_FREE) {
    arena_bin_remove(a, n);
    s->size += n->size;
    s->next = n->next;
    if (n->next) n->next->prev = s;
    arena_seg_release(a, n);
  }
  arena_bin_insert(a, s);
}

/* ------------------------------------------------------------ pending frees */

static void pending_unlink(zo_arena_t *a, zo_arena_block_t *s) {
  if (s->bprev)
    s->bprev->bnext = s->bnext;
  else
    a->pending = s->bnext;
  if (s->bnext) s->bnext->bprev = s->bprev;
  s->bprev = s->bnext = NULL;
}

/* Pending frees whose uses have completed become free (all of them, after waiting, with @wait). */
void arena_reclaim(zo_arena_t *a, int wait) {
  for (zo_arena_block_t *s = a->pending, *nx; s; s = nx) {
    nx = s->bnext;
    if (!arena_uses_settle(a, s, wait)) continue;
    pending_unlink(a, s);
    a->st.pending_bytes -= s->size;
    arena_make_free(a, s);
  }
}

/* ------------------------------------------------------------ trace */

static void trace_line(zo_arena_t *a, char op, uint64_t id, size_t nbytes) {
  if (!a->trace) return;
  if (op == 'a')
    fprintf(a->trace, "a %llu %zu\n", (unsigned long long)id, nbytes);
  else
    fprintf(a->trace, "%c %llu\n", op, (unsigned long long)id);
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
    return zo_error_set(ZO_ERR_SYSTEM, "zo_arena_create: cannot open trace file %s: %s", path,
                        strerror(errno));
  fprintf(a->trace, "# arena %zu\n", a->capacity);
  return ZO_OK;
}

/* ------------------------------------------------------------ create / destroy */

zo_status zo_arena_create(zo_device_t *dev, size_t capacity_bytes, const zo_arena_opts *opts,
                          zo_arena_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_create: out is NULL");
  *out = NULL;
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_create: dev is NULL");
  const size_t cap = capacity_bytes / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN;
  if (cap == 0)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_arena_create: capacity %zu bytes is below one block (%d bytes)",
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
  /* A compaction's overlapping moves stage through scratch_bytes past the
   * capacity (arena_compact.c): 1/64 of it, at least one block, at most
   * ARENA_SCRATCH_MAX. Where the device cannot give that much more, none. */
  size_t scratch = cap / 64 / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN;
  if (scratch < ZO_ARENA_ALIGN) scratch = ZO_ARENA_ALIGN;
  if (scratch > ARENA_SCRATCH_MAX) scratch = ARENA_SCRATCH_MAX;
  if (policy != ZO_ARENA_BEST_FIT || cap > SIZE_MAX - scratch)
    scratch = 0; /* never compacts; or no room */
  zo_status st = ZO_ERR_OUT_OF_MEMORY;
  if (scratch) {
    st = zo_device_malloc(dev, cap + scratch, (void **)&a->base);
    if (st != ZO_OK) scratch = 0;
  }
  if (!scratch) st = zo_device_malloc(dev, cap, (void **)&a->base);
  if (st != ZO_OK) {
    st = zo_error_prefix(st, "device arena of %zu bytes on %s", cap, zo_device_name(dev));
    goto fail;
  }
  a->capacity = cap;
  a->scratch_bytes = scratch;
  a->st.capacity = cap;
  ZO_CHECK_GOTO(zo_stream_create(dev, &a->stream), st, fail);
  a->head = arena_seg_new(a, 0, cap, SEG_FREE);
  if (!a->head) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_arena_create: out of host memory");
    goto fail;
  }
  arena_bin_insert(a, a->head);
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
    zo_debug("zo_arena_destroy: %zu blocks (%zu bytes) still live", a->st.n_live_blocks,
             a->st.live_bytes);
  for (zo_arena_block_t *s = a->head; s; s = s->next) arena_uses_settle(a, s, 1);
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

/* ------------------------------------------------------------ blocks */

static int is_live(const zo_arena_t *a, const zo_arena_block_t *b) {
  return b && b->magic == SEG_MAGIC && b->arena == a && b->state == SEG_LIVE;
}

static zo_status oom(zo_arena_t *a, size_t nbytes) {
  a->st.n_failed++;
  return zo_error_set(
      ZO_ERR_OUT_OF_MEMORY,
      "device arena: cannot allocate %zu bytes: %zu live (%zu pinned), %zu free of %zu, largest "
      "free block %zu",
      nbytes, a->st.live_bytes, a->st.pinned_bytes, a->capacity - a->st.live_bytes, a->capacity,
      arena_largest_free(a));
}

zo_status zo_arena_alloc(zo_arena_t *a, size_t nbytes, zo_arena_block_t **out) {
  if (out) *out = NULL;
  if (!a || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_alloc: %s is NULL", !a ? "arena" : "out");
  if (nbytes == 0) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_alloc: nbytes is 0");
  pthread_mutex_lock(&a->mu);
  if (nbytes > a->capacity) {
    const zo_status st = oom(a, nbytes);
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  const size_t size = arena_align_up(nbytes);
  arena_reclaim(a, 0);
  zo_arena_block_t *s = find(a, size);
  if (!s && a->pending) {
    arena_reclaim(a, 1);
    s = find(a, size);
  }
  if (!s && a->policy == ZO_ARENA_BEST_FIT && arena_compaction_may_fit(a, size) &&
      !(a->futile_gen == a->gen && size >= a->futile_size)) {
    const zo_status st = arena_compact_locked(a, size);
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
    zo_arena_block_t *rest = arena_seg_new(a, s->off + size, s->size - size, SEG_FREE);
    if (!rest) {
      pthread_mutex_unlock(&a->mu);
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_arena_alloc: out of host memory");
    }
    arena_bin_remove(a, s);
    rest->prev = s;
    rest->next = s->next;
    if (s->next) s->next->prev = rest;
    s->next = rest;
    s->size = size;
    arena_bin_insert(a, rest);
  } else {
    arena_bin_remove(a, s);
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
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_pin: %p is not a live block of this arena",
                        (void *)b);
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
    st = zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_unpin: %p is not a live block of this arena",
                      (void *)b);
  } else if (!b->pins) {
    st = zo_error_set(ZO_ERR_INVALID_USAGE, "zo_arena_unpin: block %llu (%zu bytes) is not pinned",
                      (unsigned long long)b->id, b->size);
  } else if ((st = use_add(a, b, last_use)) != ZO_OK) {
    st = zo_error_prefix(st, "zo_arena_unpin: block %llu: recording its last use",
                         (unsigned long long)b->id);
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
    st = zo_error_set(ZO_ERR_INVALID_ARG,
                      "zo_arena_free: %p is not a live block of this arena (freed twice?)",
                      (void *)b);
  } else if (b->pins > 1) {
    st = zo_error_set(ZO_ERR_INVALID_USAGE,
                      "zo_arena_free: block %llu (%zu bytes) is pinned %d times; unpin "
                      "all but the owner's pin first",
                      (unsigned long long)b->id, b->size, b->pins);
  } else if ((st = use_add(a, b, last_use)) != ZO_OK) {
    st = zo_error_prefix(st, "zo_arena_free: block %llu: recording its last use",
                         (unsigned long long)b->id);
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
  if (arena_uses_settle(a, b, 0)) {
    arena_make_free(a, b);
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
  if (!a || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_get_stats: %s is NULL", !a ? "arena" : "out");
  pthread_mutex_lock(&a->mu);
  *out = a->st;
  out->capacity = a->capacity;
  out->free_bytes = a->capacity - a->st.live_bytes;
  out->largest_free = arena_largest_free(a);
  out->fragmentation =
      out->free_bytes ? 1.0 - (double)out->largest_free / (double)out->free_bytes : 0.0;
  pthread_mutex_unlock(&a->mu);
  return ZO_OK;
}
