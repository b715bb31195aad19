/*
 * pinned_internal.h - the engine's calls for host buffers of the middle tier,
 * on a process-wide pinned pool (zoffload/pinned.h). Not installed; the pool
 * itself, with NUMA placement and statistics, is public in zoffload/pinned.h.
 */
#ifndef ZO_PINNED_INTERNAL_H
#define ZO_PINNED_INTERNAL_H

#include <stddef.h>
#include "zoffload/pinned.h"
#include "zoffload/status.h"

/* The locked-memory limit (RLIMIT_MEMLOCK), soft and hard, each as "N bytes" or "unlimited" ("unknown" when
 * getrlimit fails), for messages that tell how to raise it. Thread-safe. */
void zo_memlock_limits(char soft[32], char hard[32]);

/*
 * zo_host_alloc() - zero-filled host buffer of @nbytes, page aligned (4096).
 * @pin: 1 to take it from the process-wide pinned pool (created on first use:
 * no NUMA binding, decay 0 so freed buffers are unlocked and unmapped at
 * once); 0 for a plain pageable mmap. When mlock is refused (RLIMIT_MEMLOCK
 * too low, EPERM) the buffer stays pageable and one warning per process names
 * the limit and how to raise it; *@pinned (may be NULL) tells the caller which
 * it got. Returns ZO_OK, ZO_ERR_INVALID_ARG (NULL out, nbytes 0),
 * ZO_ERR_OUT_OF_MEMORY, ZO_ERR_SYSTEM (the pool could not be created).
 * Thread-safe.
 */
zo_status zo_host_alloc(size_t nbytes, int pin, void **out, int *pinned);

/*
 * zo_host_free() - release a buffer from zo_host_alloc(); NULL ok. Whether it
 * came from the pinned pool is looked up from the address, so @pinned is
 * ignored (kept for callers); @nbytes must be the size given to zo_host_alloc().
 * Thread-safe.
 */
void zo_host_free(void *ptr, size_t nbytes, int pinned);

/*
 * zo_host_pinned_bytes() - bytes the process-wide pool holds mlock'ed: live
 * buffers rounded to their size class, plus the arena's metadata (about
 * 2 MiB once the pool exists). 0 before the first pinned zo_host_alloc().
 */
size_t zo_host_pinned_bytes(void);

/*
 * zo_host_prefer_numa_node() - bind the process-wide pool's memory to NUMA node @os_node (the kernel's number,
 * e.g. zo_device_numa_node() of the process's GPU). Only before the pool exists (the first pinned
 * zo_host_alloc()); returns 0 when it will apply, -1 when the pool already exists or @os_node is not a node of
 * this machine (nothing changes).
 */
int zo_host_prefer_numa_node(int os_node);

/*
 * zo_host_unregistered_bytes() - bytes of the buffer [@ptr, @ptr + @nbytes)
 * (from zo_host_alloc()) that are NOT registered with CUDA (cudaHostRegister):
 * 0 when all of it is, @nbytes for a pageable buffer, one not from the pinned
 * pool, or before a CUDA device exists. @why (may be NULL, @why_len bytes)
 * receives the latest refused registration's error message ("" when none was
 * refused). The engine's start-up check (zo_engine_finalize() on a CUDA
 * device) reads it. Thread-safe.
 */
size_t zo_host_unregistered_bytes(const void *ptr, size_t nbytes, char *why, size_t why_len);

/* zo_host_pool() - the process-wide pool (created on first call), NULL if it cannot be created. */
zo_pinned_pool_t *zo_host_pool(void);

#endif
