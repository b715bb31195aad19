/*
 * zoffload/arena.h - the defragmenting device arena: one reservation of
 * device memory per arena, carved into blocks, with best fit over segregated
 * size-class bins, coalescing of free neighbours, stream-ordered (deferred)
 * frees, and compaction that moves blocks not in use when a request fails
 * only because the free bytes are scattered. It holds no kernels and makes no
 * policy about what to cache (the engine's fetch coordinator does); it works
 * on every device backend of zoffload/device.h.
 *
 * Blocks and addresses. A block is a handle (zo_arena_block_t *), not an
 * address: a compaction may move a block that is not pinned, so the owner
 * asks for the address (zo_arena_pin(), or zo_arena_ptr() while pinned) each
 * time it starts using the block. A block is pinned from zo_arena_alloc()
 * until zo_arena_unpin(), and again from zo_arena_pin() to the next unpin;
 * pinned blocks are never moved. Every piece of device work that reads or
 * writes a block must be enqueued while it is pinned, and the unpin (or the
 * free) names the stream of that work, so a move (or a reuse) is ordered
 * after it.
 *
 * Algorithm. Two-level segregated fit (TLSF: M. Masmano, I. Ripoll,
 * A. Crespo, J. Real, "TLSF: a new dynamic memory allocator for real-time
 * systems", ECRTS 2004): free blocks sit in bins by size, 256-byte units
 * below 8 KiB one bin per size, above that power-of-two classes each split in
 * 32 linear sub-classes (a bin spans 1/32 of its size); two bitmaps find the
 * first non-empty bin in a few bit scans. A request takes the smallest block
 * among the first 16 of its own bin that fits, else the smallest among the
 * first 16 of the next non-empty bin (all of which fit), so placement is best
 * fit to within 1/32 of the size and no call walks a list of unbounded length
 * (the ZO_ARENA_FIRST_FIT_NO_COMPACT baseline does: it scans the blocks in
 * address order). A freed block merges with free neighbours at once
 * (boundary-tag coalescing, Knuth TAOCP vol. 1, 2.5).
 * Compaction, in two phases, both with device-to-device copies on the arena's
 * own stream, each move queued after the block's recorded last uses
 * (zo_stream_wait_event()):
 *  1. Slide (the sliding compaction of mark-compact collectors: Jones,
 *     Hosking & Moss, "The Garbage Collection Handbook", 2011, ch. 3): every
 *     unpinned live block, in address order, moves down to the end of the
 *     live block before it. Pinned blocks stay, so each stretch between two
 *     pinned blocks ends packed at its low end, its free bytes in one hole on
 *     top. Where source and destination overlap, the copy stages through
 *     the largest of the arena's scratch (see zo_arena_create()), a free
 *     hole no move of the slide writes, or a packed stretch's free top, in
 *     chunks of its size (two copies each); or, when that takes more copies,
 *     goes in ascending chunks of at most the distance moved, so in stream
 *     order no chunk overwrites bytes not yet read.
 *  2. Only when the request still does not fit because pinned blocks split the
 *     free bytes: pick the stretch (at least the request long) that needs the
 *     fewest bytes moved out, move unpinned blocks out of it into the holes
 *     of other stretches (the smallest block that is enough alone, else
 *     largest first, each to the best-fitting hole), and slide again. When no
 *     hole elsewhere takes a block that would be enough, that block's size
 *     becomes a sub-goal for another stretch first (a chain of up to 4 goals,
 *     at most 8 rounds). These moves never overlap their sources.
 * The arena then synchronizes its stream, so every move has completed when
 * zo_arena_alloc() returns. A compaction that could not make the hole is not
 * tried again for a request as large until a block is freed or unpinned.
 *
 * Thread-safety: every function may be called from any thread; one mutex per
 * arena serializes them. A compaction holds it while it waits for the last
 * uses of the blocks it moves and for its copies, so other threads' arena
 * calls wait as long.
 *
 * Lifetime: destroy the arena before its device (zo_device_destroy() frees
 * the reservation and the arena's stream and events under it).
 */
#ifndef ZOFFLOAD_ARENA_H
#define ZOFFLOAD_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/device.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_arena zo_arena_t;
typedef struct zo_arena_block zo_arena_block_t;

/* Alignment of every block's address and the granularity of its size, bytes. */
#define ZO_ARENA_ALIGN ZO_DEVICE_ALIGN

/* Placement policy. */
typedef enum zo_arena_policy {
  ZO_ARENA_BEST_FIT = 0, /* TLSF best fit; compacts when scattered free bytes block a request */
  ZO_ARENA_FIRST_FIT_NO_COMPACT =
      1, /* lowest-address free block that fits (a linear scan); never moves
                                        anything: the baseline for tests and benchmarks */
} zo_arena_policy;

/* Options of zo_arena_create(); a NULL pointer means all defaults (zero-initialized is the
 * same). */
typedef struct zo_arena_opts {
  zo_arena_policy policy; /* default ZO_ARENA_BEST_FIT */
  /*
   * Record the allocation trace to this file (truncated at create), one line
   * per successful call, in call order: "a ID NBYTES" (alloc; NBYTES as
   * requested, before rounding), "f ID" (free), "p ID" (pin), "u ID" (unpin).
   * IDs count from 0 per arena in allocation order. The first line is
   * "# arena CAPACITY" (bytes). Lines are buffered and flushed by
   * zo_arena_destroy(). NULL: the environment variable ZO_ARENA_TRACE, when
   * set and not empty, names the file; then the process's first arena writes
   * that path and the k-th later one (k = 1, 2, ...) the path with ".k"
   * inserted before a ".trace" suffix (else appended), so arenas of one
   * process never share a file. tests/test_arena.c replays such files.
   */
  const char *trace_path;
} zo_arena_opts;

/*
 * What an arena holds and has done, from zo_arena_get_stats(). Bytes are
 * block sizes (requests rounded up to ZO_ARENA_ALIGN).
 * capacity == live_bytes + free_bytes; pending_bytes is part of free_bytes.
 */
typedef struct zo_arena_stats {
  size_t capacity;      /* bytes of the reservation */
  size_t live_bytes;    /* allocated blocks, pinned or not */
  size_t free_bytes;    /* capacity - live_bytes, including pending_bytes */
  size_t pending_bytes; /* freed with a stream, waiting for its work before reuse */
  size_t largest_free;  /* largest single block allocatable now without waiting or moving */
  /* 1 - largest_free / free_bytes; 0 when free_bytes == 0. Pending frees count as scattered until
   * reclaimed: 0 means the free bytes are one block now */
  double fragmentation;
  size_t pinned_bytes;    /* live blocks with a pin count > 0 (compaction may not move them) */
  size_t n_live_blocks;   /* live blocks */
  size_t peak_live_bytes; /* highest live_bytes since create */
  uint64_t n_allocs;      /* successful zo_arena_alloc() calls */
  uint64_t n_failed; /* zo_arena_alloc() calls that failed for want of memory (or a copy error) */
  uint64_t compactions; /* compactions run (zo_arena_alloc() and zo_arena_compact()) */
  uint64_t bytes_moved; /* bytes copied by compactions */
  /* zo_memcpy_async() calls compactions made (more than blocks moved when chunked or staged) */
  uint64_t copies;
  /* wall time inside compactions: waits for last uses, copies, bookkeeping */
  double compact_seconds;
} zo_arena_stats;

/*
 * zo_arena_create() - reserve @capacity_bytes of device memory on @dev and
 * make an arena of it.
 * @dev:            the device; must outlive the arena.
 * @capacity_bytes: bytes, rounded DOWN to ZO_ARENA_ALIGN; one zo_device_malloc()
 *                  of that size (counted in @dev's accounting at once), plus,
 *                  with ZO_ARENA_BEST_FIT, a compaction scratch of 1/64 of it
 *                  (at least ZO_ARENA_ALIGN, at most 64 MiB; not in capacity,
 *                  never handed out) that overlapping moves stage through, so
 *                  a block moved by less than its size costs at most
 *                  2 * ceil(size / scratch) copies. Where @dev cannot give the
 *                  extra bytes, the arena goes without the scratch.
 * @opts:           NULL for the defaults (best fit; trace only if ZO_ARENA_TRACE).
 * @out:            receives the arena; NULL on failure.
 * Also creates the arena's own stream (compaction copies). Synchronous.
 * Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @dev or @out,
 * @capacity_bytes below ZO_ARENA_ALIGN, unknown policy);
 * ZO_ERR_OUT_OF_MEMORY (the reservation, message from zo_device_malloc()
 * prefixed with the arena's size, or host memory); ZO_ERR_SYSTEM (the trace
 * file cannot be opened, path and errno in the message); errors of
 * zo_stream_create().
 */
ZO_API zo_status zo_arena_create(zo_device_t *dev, size_t capacity_bytes, const zo_arena_opts *opts,
                                 zo_arena_t **out);

/*
 * zo_arena_destroy() - synchronize the arena's stream, wait for the recorded
 * last uses of every block (pending frees and unpinned blocks), then free the
 * reservation, close the trace and release @a. Blocks still live become
 * invalid (a debug log line counts them); device work enqueued on them and
 * not named by an unpin or free must have completed (zo_device_free() is not
 * stream ordered). NULL is a no-op. Must not race with other calls on @a.
 */
ZO_API void zo_arena_destroy(zo_arena_t *a);

/*
 * zo_arena_alloc() - a block of @nbytes rounded up to ZO_ARENA_ALIGN, at a
 * ZO_ARENA_ALIGN (256)-byte aligned address, returned PINNED (pin count 1:
 * never moved until zo_arena_unpin()); contents undefined.
 * In order: (1) pending frees whose work has completed become free (event
 * queries, never blocking); (2) best fit (or first fit); (3) if nothing fits
 * and frees are pending, waits for their work (blocking) and tries again;
 * (4) ZO_ARENA_BEST_FIT only: if compaction may make a hole big enough (the
 * bytes not live suffice, some stretch between pinned blocks is that long,
 * and no compaction since the last free or unpin failed for as much),
 * compacts (see the header comment), synchronizes the arena's stream and
 * tries again. A compaction copies every unpinned block above the lowest
 * hole once (phase 2 copies a few more) and waits for those blocks' last
 * uses; steps (3)-(4) hold the mutex.
 * Synchronous: returns when the block can be used by work enqueued after the
 * call on any stream (every move has completed).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @a or @out, @nbytes == 0);
 * ZO_ERR_OUT_OF_MEMORY ("device arena: cannot allocate N bytes: L live
 * (P pinned), F free of C, largest free block B", where F counts pending
 * bytes too; also when @nbytes exceeds the capacity; counted in n_failed); a
 * device error of a compaction copy (e.g. ZO_ERR_CUDA, prefixed "arena
 * compaction"; the block whose move failed has undefined contents). *@out
 * is NULL on failure.
 */
ZO_API zo_status zo_arena_alloc(zo_arena_t *a, size_t nbytes, zo_arena_block_t **out);

/*
 * zo_arena_ptr() - @b's device address now: stable while @b is pinned; an
 * unpinned block's address may change at the next compaction, so use
 * zo_arena_pin() to start using it. NULL for NULL. Thread-safe (takes the
 * arena's mutex).
 */
ZO_API void *zo_arena_ptr(const zo_arena_block_t *b);

/* zo_arena_size() - @b's size in bytes (the request rounded up to ZO_ARENA_ALIGN); 0 for NULL.
 * Thread-safe. */
ZO_API size_t zo_arena_size(const zo_arena_block_t *b);

/*
 * zo_arena_pin() - add one to @b's pin count: no compaction moves @b until
 * the count is back to 0. Pins nest (zo_arena_alloc() returns with count 1).
 * @ptr: may be NULL; receives the current address, stable while pinned.
 * Never blocks (a compaction in progress on another thread finishes first).
 * Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @a, @b not a live
 * block of @a).
 */
ZO_API zo_status zo_arena_pin(zo_arena_t *a, zo_arena_block_t *b, void **ptr);

/*
 * zo_arena_unpin() - subtract one from @b's pin count. Once it is 0 a
 * compaction may move @b, but only after the work enqueued on @last_use up to
 * this call has completed: an event is recorded on @last_use now and the move
 * waits for it with zo_stream_wait_event() (it also still waits for uses
 * named by earlier unpins on other streams that have not completed).
 * @last_use: the stream of the last device work on @b, or NULL when no
 *            enqueued work uses it.
 * Returns when recorded (never waits for work). Thread-safe. Returns ZO_OK;
 * ZO_ERR_INVALID_ARG (NULL @a, @b not a live block of @a, @last_use on
 * another device than @a's); ZO_ERR_INVALID_USAGE (pin count already 0).
 * On error nothing changes.
 */
ZO_API zo_status zo_arena_unpin(zo_arena_t *a, zo_arena_block_t *b, zo_stream_t *last_use);

/*
 * zo_arena_free() - give @b back; the handle is invalid after the call. @b
 * may still hold the pin of its allocation or of one zo_arena_pin() (count
 * <= 1: the owner's own pin, released with the free), not more. Its bytes are
 * handed out again only after the work enqueued on @last_use up to this call,
 * and the uses recorded by earlier unpins, have completed (a stream-ordered
 * free, like PyTorch's caching allocator after record_stream): until then
 * they count as pending_bytes; zo_arena_alloc() reclaims them.
 * @last_use: the stream of the last device work on @b, or NULL: none enqueued
 *            since the last unpin (with no earlier uses outstanding the
 *            bytes are free at once).
 * Returns when recorded (never waits for work). Thread-safe. NULL @b is a
 * no-op. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @a; @b not a live block of
 * @a, e.g. freed twice: caught as long as the handle's record was not
 * reused by a later zo_arena_alloc(); @last_use on another device);
 * ZO_ERR_INVALID_USAGE (pin count > 1: another user pinned it and has not
 * unpinned). On error nothing changes.
 */
ZO_API zo_status zo_arena_free(zo_arena_t *a, zo_arena_block_t *b, zo_stream_t *last_use);

/*
 * zo_arena_get_stats() - a consistent snapshot of @a's accounting into @out
 * (see zo_arena_stats). Named get_stats because the struct holds the name
 * zo_arena_stats. Thread-safe. Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL).
 */
ZO_API zo_status zo_arena_get_stats(zo_arena_t *a, zo_arena_stats *out);

/*
 * zo_arena_compact() - compact now, for tests, benchmarks and quiet
 * moments: wait for pending frees, then phase 1 of the header comment (the
 * slide; phase 2 needs a target size, which only zo_arena_alloc() has),
 * then synchronize the arena's stream. A no-op with
 * ZO_ARENA_FIRST_FIT_NO_COMPACT. Synchronous. Thread-safe. Returns ZO_OK;
 * ZO_ERR_INVALID_ARG (NULL @a); a device error of a copy.
 */
ZO_API zo_status zo_arena_compact(zo_arena_t *a);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_ARENA_H */
