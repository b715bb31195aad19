/*
 * zoffload/pinned.h - the pinned host pool: page-locked host memory for the
 * middle tier, from a dedicated jemalloc arena whose extent hooks map, place
 * (NUMA, hwloc) and lock (mlock) every extent, and register it with CUDA once
 * a CUDA device exists. Not the process malloc.
 *
 * CUDA registration (built with CUDA only; stubs otherwise). Once the process
 * has created a zo_device_t of kind CUDA, every pool with opts.pin == 1
 * registers its memory with cudaHostRegister(..., cudaHostRegisterPortable),
 * so the GPU can DMA to and from it and zo_memcpy_async() on it never blocks:
 *  - memory mapped before that device was created is registered when it is
 *    created (each pinning pool is on a process-wide list);
 *  - memory mapped later is registered when mapped (extent commit, direct
 *    buffers), and unregistered before it is decommitted or unmapped;
 *  - registration is independent of mlock: an extent that mlock refused is
 *    still registered (the driver locks it); when registration fails, the
 *    memory stays as it was (mlock only, pageable for the GPU), ONE warning
 *    per process names the CUDA error, and the pool keeps working (the
 *    engine refuses such a buffer at zo_engine_finalize() unless
 *    zoffload.allow_pageable_host);
 *  - pools with opts.pin == 0 are never registered.
 * Registration (not cudaHostAlloc) because the extent hooks own the mapping.
 *
 * jemalloc is found at run time, not linked into libzoffload.so: the one
 * already in the process (a program linking it, LD_PRELOAD), else
 * libjemalloc.so.2 loaded privately (RTLD_LOCAL: it never becomes the
 * process's malloc). Where neither works (Debian's jemalloc cannot be loaded
 * into a running process without extra static TLS: start it with
 * GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384) or
 * ZOFFLOAD_NO_JEMALLOC=1 is set, a pool has no arena and maps every buffer on
 * its own in whole pages, as it always does from 1 MiB up; everything else
 * behaves the same. zo_host_allocator() says which.
 */
#ifndef ZOFFLOAD_PINNED_H
#define ZOFFLOAD_PINNED_H

#include <stddef.h>
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque pool: one jemalloc arena plus its extent bookkeeping. */
typedef struct zo_pinned_pool zo_pinned_pool_t;

/*
 * zo_pinned_opts - how a pool maps its extents. Start from
 * ZO_PINNED_OPTS_INIT (zero-filling the struct asks for NUMA node 0).
 */
typedef struct zo_pinned_opts {
  int numa_node; /* hwloc logical index of the NUMA node to bind extents to; -1: no binding (first touch) */
  int pin;      /* 1: mlock every extent (falls back to pageable when refused); 0: pageable pool */
  int decay_ms; /* how long freed extents stay mapped (and pinned) for reuse, in ms:
                    -1: jemalloc's default (10 s); 0: unmapped as soon as they are free */
} zo_pinned_opts;

#define ZO_PINNED_OPTS_INIT \
  { -1, 1, -1 }

/*
 * zo_pinned_stats_t - accounting of one pool, in bytes. Arena extents come in
 * page-size classes and hold the arena's own metadata (jemalloc places it in
 * the first extent it maps, about 2 MiB), so bytes_mapped >= bytes_allocated.
 * A freed extent keeps its addresses (bytes_reserved) but is decommitted -
 * unlocked, pages dropped - after opts.decay_ms or zo_pinned_pool_trim().
 */
typedef struct zo_pinned_stats {
  /* usable bytes of live zo_pinned_alloc() buffers (size classes, >= requested) */
  size_t bytes_allocated;
  /* bytes backed by memory: live buffers, metadata, free extents not yet decommitted */
  size_t bytes_mapped;
  size_t bytes_pinned; /* the part of bytes_mapped that is mlock'ed */
  /* address space held (>= bytes_mapped); given back when the pool is destroyed */
  size_t bytes_reserved;
  size_t n_allocs;       /* live buffers */
  size_t n_pin_failures; /* times mlock was refused (those extents stay pageable) */
  int pinned;    /* 1 when every mapped byte is pinned; 0 after a fallback or when opts.pin == 0 */
  int numa_node; /* the node extents are bound to, -1 for none */
  /* the part of bytes_mapped registered with CUDA (0 until a CUDA device exists) */
  size_t bytes_registered;
  /* times cudaHostRegister was refused (that memory stays mlock-only) */
  size_t n_register_failures;
} zo_pinned_stats_t;

/*
 * zo_pinned_pool_create() - a new pool on its own jemalloc arena.
 * @opts: NULL for ZO_PINNED_OPTS_INIT.
 * @out:  receives the pool; NULL on failure.
 * When mlock is refused (RLIMIT_MEMLOCK too low without CAP_IPC_LOCK, EPERM)
 * extents stay pageable and ONE warning per process names the limit in bytes
 * and how to raise it (ulimit -l, memlock in /etc/security/limits.conf,
 * LimitMEMLOCK= for systemd units); the pool keeps working. When binding to
 * @opts->numa_node is refused by the kernel, one warning says so and
 * memory goes where first touch puts it. CUDA registration: see the header
 * comment.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @out, numa_node < -1 or not a node
 * of this machine, pin not 0/1, decay_ms < -1); ZO_ERR_OUT_OF_MEMORY;
 * ZO_ERR_SYSTEM (jemalloc refused to create the arena, or hwloc failed).
 * Thread-safe. Source: jemalloc(3) "arenas.create" and extent_hooks_t.
 */
ZO_API zo_status zo_pinned_pool_create(const zo_pinned_opts *opts, zo_pinned_pool_t **out);

/*
 * zo_pinned_pool_destroy() - destroy the arena, unlock and unmap every extent.
 * Buffers still allocated from @pool are discarded with it (jemalloc
 * "arena.<i>.destroy"): free them first. NULL is a no-op. Not thread-safe
 * against calls on the same pool.
 */
ZO_API void zo_pinned_pool_destroy(zo_pinned_pool_t *pool);

/*
 * zo_pinned_alloc() - a buffer of @nbytes from @pool, aligned to @align bytes.
 * @nbytes: bytes, >= 1; any size. Below 1 MiB buffers come from the arena
 *          (small ones share pinned slabs; jemalloc size classes); 1 MiB and
 *          up get a mapping of their own, rounded up to whole pages only, and
 *          go back to the kernel on free (jemalloc would round them up to size
 *          classes 25% apart and keep grown extents' tails locked).
 * @align:  a power of two, or 0 for 16; up to the page size is cheap, larger
 *          alignments are honoured too.
 * @out:    receives the buffer; NULL on failure.
 * The contents are zero only when @zero is 1. The buffer is pinned when the
 * pool is and the extent it lies in could be locked (zo_pinned_is_pinned()).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL pool or out, nbytes 0, align not a
 * power of two); ZO_ERR_OUT_OF_MEMORY (mapping failed; the message names the
 * size). Thread-safe (the arena has its own locks; no thread cache is used).
 */
ZO_API zo_status zo_pinned_alloc(zo_pinned_pool_t *pool, size_t nbytes, size_t align, int zero,
                                 void **out);

/*
 * zo_pinned_free() - return a buffer from zo_pinned_alloc() on @pool; NULL is
 * a no-op. A buffer of 1 MiB or more is unlocked and unmapped at once; the
 * extent of a smaller one stays pinned for reuse for opts.decay_ms (or until
 * zo_pinned_pool_trim()). Thread-safe.
 */
ZO_API void zo_pinned_free(zo_pinned_pool_t *pool, void *ptr);

/*
 * zo_pinned_is_pinned() - 1 when the buffer @ptr of @pool lies in an
 * mlock'ed extent, 0 when pageable or not from @pool. Thread-safe.
 */
ZO_API int zo_pinned_is_pinned(zo_pinned_pool_t *pool, const void *ptr);

/*
 * zo_pinned_is_registered() - 1 when the buffer @ptr of @pool lies in memory
 * registered with CUDA (see the header comment), so copies between it and a
 * CUDA device are DMA and never block; 0 otherwise (no CUDA device yet,
 * registration failed, opts.pin == 0, not from @pool). Thread-safe.
 */
ZO_API int zo_pinned_is_registered(zo_pinned_pool_t *pool, const void *ptr);

/*
 * zo_pinned_pool_trim() - decommit (unlock, drop the pages of) every free
 * extent now instead of after opts.decay_ms (jemalloc "arena.<i>.purge"). Returns ZO_OK or
 * ZO_ERR_INVALID_ARG (NULL pool), ZO_ERR_SYSTEM. Thread-safe.
 */
ZO_API zo_status zo_pinned_pool_trim(zo_pinned_pool_t *pool);

/*
 * zo_pinned_stats() - fill @s with @pool's accounting (see zo_pinned_stats_t).
 * A consistent snapshot only while no other thread allocates or frees.
 * Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL argument). Thread-safe.
 */
ZO_API zo_status zo_pinned_stats(zo_pinned_pool_t *pool, zo_pinned_stats_t *s);

/*
 * zo_host_allocator() - what pinned pools allocate small buffers with, for
 * reports: "jemalloc <version> (in the process)", "jemalloc <version>
 * (loaded privately)", or "page mappings (no jemalloc: <reason>)". A static
 * string, fixed on first call. Thread-safe.
 */
ZO_API const char *zo_host_allocator(void);

/*
 * zo_host_jemalloc() - the jemalloc that pinned pools use, in parts, for
 * reports that want fields rather than zo_host_allocator()'s sentence.
 * Returns 1 when there is one: *@version is its mallctl "version" and
 * *@detail where it came from ("in the process" or "loaded privately").
 * Returns 0 when there is none: *@version is NULL and *@detail says why
 * (e.g. "ZOFFLOAD_NO_JEMALLOC=1 is set"). Either pointer may be
 * NULL. Static strings, fixed on first call. Thread-safe.
 */
ZO_API int zo_host_jemalloc(const char **version, const char **detail);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_PINNED_H */
