/*
 * arena_compact.c - compaction of the device arena (zoffload/arena.h): slide
 * unpinned blocks down, and evacuate one stretch between pinned blocks when
 * sliding cannot join the free space; device-to-device copies on the arena's
 * stream, each after the block's last use. Not here: placement, bins, frees
 * (arena.c).
 */
#include <stdlib.h>
#include <string.h>

#include "arena_internal.h"

/* ------------------------------------------------------------ compaction */

/* Bytes a compaction may stage an overlapping move through: the arena's
 * scratch, and free bytes no move of this slide writes (see slide()). */
typedef struct stage_area {
  char *at;
  size_t nbytes;
} stage_area;

/* Copy @size bytes from @src down to @dst (< src) on the arena's stream.
 * Where they overlap, either directly in ascending chunks of at most
 * (src - dst) bytes, so no copy overlaps itself and, in stream order, each
 * chunk only overwrites bytes earlier chunks have already read; or, when that
 * takes more copies, through @stage (which overlaps neither) in chunks of its
 * size, two copies each: ceil(size / stage) * 2 copies at most. */
static zo_status move_down(zo_arena_t *a, char *dst, char *src, size_t size, stage_area stage) {
  const size_t d = (size_t)(src - dst);
  const size_t direct = d >= size ? 1 : size / d + (size % d != 0);
  const size_t staged =
      stage.nbytes ? 2 * (size / stage.nbytes + (size % stage.nbytes != 0)) : SIZE_MAX;
  if (direct <= staged) {
    const size_t chunk = d < size ? d : size;
    for (size_t o = 0; o < size; o += chunk) {
      const size_t n = size - o < chunk ? size - o : chunk;
      ZO_CHECK(zo_memcpy_async(a->stream, dst + o, src + o, n, ZO_COPY_D2D));
      a->st.copies++;
    }
    return ZO_OK;
  }
  /* Ascending: writing dst + [o, o + n) overwrites only source bytes below
   * src + o + n - d, all of them read by this chunk's first copy or earlier. */
  for (size_t o = 0; o < size; o += stage.nbytes) {
    const size_t n = size - o < stage.nbytes ? size - o : stage.nbytes;
    ZO_CHECK(zo_memcpy_async(a->stream, stage.at, src + o, n, ZO_COPY_D2D));
    ZO_CHECK(zo_memcpy_async(a->stream, dst + o, stage.at, n, ZO_COPY_D2D));
    a->st.copies += 2;
  }
  return ZO_OK;
}

/* Whether a compaction could make a hole of @size: enough bytes not live,
 * and a stretch between pinned blocks at least that long. Pending bytes
 * count as free (a compaction waits for them). */
int arena_compaction_may_fit(const zo_arena_t *a, size_t size) {
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
      arena_seg_release(a, s); /* free: no uses (pending ones were reclaimed first) */
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
      zo_arena_block_t *g = arena_seg_new(a, at, end - at, SEG_FREE);
      if (g) {
        g->prev = prev;
        if (prev)
          prev->next = g;
        else
          a->head = g;
        prev = g;
        arena_bin_insert(a, g);
      }
    }
    if (!s) break;
    s->prev = prev;
    if (prev)
      prev->next = s;
    else
      a->head = s;
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
 * ends up packed at its low end with its free bytes on top). An overlapping
 * move stages through the largest of: the arena's scratch (past capacity),
 * the largest free segment while it lies wholly above the block moved (no
 * move before reaches it: each writes only below its own source's end), and
 * the largest free top of a stretch already packed (below a pinned block, no
 * later move writes there). */
static zo_status slide(zo_arena_t *a, size_t *moved) {
  size_t cur = 0;
  zo_status st = ZO_OK;
  const zo_arena_block_t *big = NULL; /* largest free segment, offsets not moved */
  for (const zo_arena_block_t *s = a->head; s; s = s->next)
    if (s->state == SEG_FREE && (!big || s->size > big->size)) big = s;
  stage_area top = {NULL, 0}; /* largest free top of a packed stretch */
  for (zo_arena_block_t *s = a->head; s; s = s->next) {
    if (s->state != SEG_LIVE) continue;
    if (s->pins || s->off == cur) {
      if (s->pins && s->off - cur > top.nbytes) top = (stage_area){a->base + cur, s->off - cur};
      cur = s->off + s->size;
      continue;
    }
    stage_area stage = {a->base + a->capacity, a->scratch_bytes};
    if (top.nbytes > stage.nbytes) stage = top;
    if (big && big->off < s->off + s->size) big = NULL; /* passed: moves may land on it */
    if (big && big->size > stage.nbytes) stage = (stage_area){a->base + big->off, big->size};
    /* After its last uses. The stream also already waits for the uses of
     * every block moved before, whose old bytes this move may overwrite. */
    st = wait_uses(a, s);
    if (st == ZO_OK) st = move_down(a, a->base + cur, a->base + s->off, s->size, stage);
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
  size_t sub_size, sub_lo,
      sub_hi; /* sub-goal: a hole of sub_size outside stretch [sub_lo, sub_hi); 0 = none */
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
static void evac_planner(zo_arena_t *a, size_t want, const size_t (*ex)[2], int n_ex, evac_work *w,
                         evac_plan *p) {
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
      if (s->state == SEG_FREE)
        fr += s->size;
      else
        w->cand[n++].blk = s; /* live, unpinned */
      if (s == last) break;
    }
    first = after;
    if (hi - lo < want || fr >= want || excluded_stretch(ex, n_ex, lo, hi)) continue;
    const size_t need = want - fr;
    size_t nh = 0;
    for (zo_arena_block_t *s = a->head; s; s = s->next)
      if (s->state == SEG_FREE && (s->off < lo || s->off >= hi) &&
          !excluded_off(ex, n_ex, s->off)) {
        w->holes[nh] = s;
        w->room[nh++] = s->size;
      }
    qsort(w->cand, n, sizeof *w->cand, by_size_desc);
    size_t evac = 0, n_mv = 0, single = SIZE_MAX,
           enough = 0; /* enough: smallest block >= need, bytes */
    for (size_t i = 0; i < n && w->cand[i].blk->size >= need;
         i++) { /* descending: the last is the smallest */
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
    zo_arena_block_t *vac = arena_seg_new(a, s->off, s->size, SEG_FREE);
    if (!vac) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "device arena: out of host memory");
    zo_status st = wait_uses(a, s);
    if (st == ZO_OK)
      st = zo_memcpy_async(a->stream, a->base + f->off, a->base + s->off, s->size, ZO_COPY_D2D);
    if (st != ZO_OK) {
      arena_seg_release(a, vac);
      return st;
    }
    a->st.copies++;
    *moved += s->size;
    vac->prev = s->prev; /* vac takes s's place in the address list */
    vac->next = s->next;
    if (s->prev)
      s->prev->next = vac;
    else
      a->head = vac;
    if (s->next) s->next->prev = vac;
    arena_bin_remove(a, f); /* s goes before f, at f's start */
    s->prev = f->prev;
    s->next = f;
    if (f->prev)
      f->prev->next = s;
    else
      a->head = s;
    f->prev = s;
    s->off = f->off;
    f->off += s->size;
    f->size -= s->size;
    if (f->size == 0) {
      s->next = f->next;
      if (f->next) f->next->prev = s;
      arena_seg_release(a, f);
    } else {
      arena_bin_insert(a, f);
    }
    arena_make_free(a, vac);
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
  evac_work w = {malloc(n_seg * sizeof *w.holes), malloc(n_seg * sizeof *w.room),
                 malloc(n_seg * sizeof *w.cand)};
  evac_plan p = {malloc(n_seg * sizeof *p.mv), 0, 0, 0, 0, 0};
  zo_status st = ZO_OK;
  if (!w.holes || !w.room || !w.cand || !p.mv) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "device arena: out of host memory");
    goto out;
  }
  for (int round = 0; round < 2 * EVAC_DEPTH && arena_largest_free(a) < want; round++) {
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
zo_status arena_compact_locked(zo_arena_t *a, size_t want) {
  const double t0 = zo_clock_s();
  arena_reclaim(a, 1);
  size_t moved = 0;
  zo_status st = slide(a, &moved);
  if (st == ZO_OK && want && arena_largest_free(a) < want) st = evacuate(a, want, &moved);
  const zo_status sync = zo_stream_synchronize(a->stream);
  if (st == ZO_OK) st = sync;
  /* Every use the stream waited for is complete now. */
  for (zo_arena_block_t *s = a->head; s; s = s->next)
    if (s->state == SEG_LIVE && !s->pins) arena_uses_settle(a, s, 0);
  a->st.compactions++;
  a->st.bytes_moved += moved;
  const double dt = zo_clock_s() - t0;
  a->st.compact_seconds += dt;
  if (st != ZO_OK) return zo_error_prefix(st, "arena compaction");
  zo_debug("device arena: compacted, %zu bytes moved in %.3f ms", moved, dt * 1e3);
  return ZO_OK;
}

zo_status zo_arena_compact(zo_arena_t *a) {
  if (!a) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_arena_compact: arena is NULL");
  if (a->policy != ZO_ARENA_BEST_FIT) return ZO_OK;
  pthread_mutex_lock(&a->mu);
  const zo_status st = arena_compact_locked(a, 0);
  pthread_mutex_unlock(&a->mu);
  return st;
}
