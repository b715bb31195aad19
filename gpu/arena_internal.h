/*
 * arena_internal.h - what arena.c (blocks, bins, frees) shares with
 * arena_compact.c (compaction): the arena and segment records and the helpers
 * both use. Not installed. Every function here expects the arena's mutex held.
 */
#ifndef ZO_ARENA_INTERNAL_H
#define ZO_ARENA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "base_internal.h"
#include "zoffload/arena.h"

/* Segment states. Segments tile the reservation in address order. */
enum { SEG_FREE = 0, SEG_LIVE = 1, SEG_PENDING = 2, SEG_DEAD = 3 /* record back in the pool */ };

/* TLSF geometry: 2^SL_BITS sub-classes per power of two; sizes in ZO_ARENA_ALIGN units. */
enum { SL_BITS = 5, SL_COUNT = 1 << SL_BITS, FL_COUNT = 64 - SL_BITS + 1 };
enum { BIN_SCAN = 16 };                      /* blocks of one bin looked at for the best fit */
enum { SLAB_SEGS = 256 };                    /* segment records allocated at a time */
#define ARENA_SCRATCH_MAX ((size_t)64 << 20) /* bytes: bound of the compaction scratch */
#define SEG_MAGIC 0x7a6f6172656e61ull        /* "zoarena" */

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
  size_t off, size; /* bytes from the reservation's base; multiples of ZO_ARENA_ALIGN */
  int state;        /* SEG_* */
  int pins;         /* live: pin count */
  uint64_t id;      /* live/pending: allocation number (trace ids) */
  seg_use *uses;    /* live/pending: last uses not known complete; [n_uses], capacity cap_uses */
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
  /* past capacity in the same reservation: where overlapping compaction moves stage; may be 0 */
  size_t scratch_bytes;
  zo_arena_policy policy;
  zo_arena_block_t *head; /* lowest address */
  zo_arena_block_t *bins[FL_COUNT][SL_COUNT];
  uint64_t fl_map;           /* bit fl: some bins[fl][*] non-empty */
  uint32_t sl_map[FL_COUNT]; /* bit sl: bins[fl][sl] non-empty */
  zo_arena_block_t *pending; /* freed blocks waiting for their uses */
  zo_arena_block_t *pool;    /* dead records */
  seg_slab *slabs;
  zo_event_t **ev_pool; /* idle events, [n_ev_pool] of cap_ev_pool */
  size_t n_ev_pool, cap_ev_pool;
  /* capacity, live/pending/pinned bytes and counters; the rest filled by get_stats */
  zo_arena_stats st;
  uint64_t next_id;
  FILE *trace;
  uint64_t gen;        /* frees and unpins so far: what can let a compaction do more */
  uint64_t futile_gen; /* at this gen, a compaction could not make a hole of futile_size bytes */
  size_t futile_size;
};

static inline size_t arena_align_up(size_t x) { return zo_round_up(x, ZO_ARENA_ALIGN); }

/* ---------------------------------------------------------------- arena.c */

/* A segment record from the pool (NULL when host memory runs out), fields set. */
zo_arena_block_t *arena_seg_new(zo_arena_t *a, size_t off, size_t size, int state);
/* Give a record back to the pool (its recorded uses released). */
void arena_seg_release(zo_arena_t *a, zo_arena_block_t *s);
/* 1 when every recorded use of @s has completed (waiting for them with @wait). */
int arena_uses_settle(zo_arena_t *a, zo_arena_block_t *s, int wait);
/* Put free segment @s in / take it out of its TLSF bin. */
void arena_bin_insert(zo_arena_t *a, zo_arena_block_t *s);
void arena_bin_remove(zo_arena_t *a, zo_arena_block_t *s);
/* Largest free segment, bytes. */
size_t arena_largest_free(const zo_arena_t *a);
/* @s becomes free: coalesced with free neighbours, binned. */
void arena_make_free(zo_arena_t *a, zo_arena_block_t *s);
/* Pending frees whose uses are done (all, waiting, with @wait) become free. */
void arena_reclaim(zo_arena_t *a, int wait);

/* ---------------------------------------------------------------- arena_compact.c */

/* Whether a compaction could make a hole of @size bytes (free bytes, and a
 * stretch between pinned blocks that long). */
int arena_compaction_may_fit(const zo_arena_t *a, size_t size);
/* Compact so that a block of @want bytes fits (0: slide only). */
zo_status arena_compact_locked(zo_arena_t *a, size_t want);

#endif /* ZO_ARENA_INTERNAL_H */
