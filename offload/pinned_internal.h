/*
 * pinned_internal.h - page-locked host buffers for the middle tier.
 * A thin mmap + mlock allocator with byte accounting; the jemalloc-arena pool
 * with NUMA placement replaces its insides later without changing callers.
 */
#ifndef ZO_PINNED_INTERNAL_H
#define ZO_PINNED_INTERNAL_H

#include <stddef.h>
#include "zoffload/status.h"

/*
 * zo_host_alloc() - zero-filled host buffer of @nbytes, page aligned (4096).
 * @pin: 1 to lock it in RAM (mlock). When the lock is refused (RLIMIT_MEMLOCK
 * too low, EPERM) the buffer stays pageable and one warning names the limit
 * and how to raise it; *@pinned tells the caller which it got.
 * Returns ZO_OK, ZO_ERR_INVALID_ARG (nbytes 0), ZO_ERR_OUT_OF_MEMORY.
 * Thread-safe.
 */
zo_status zo_host_alloc(size_t nbytes, int pin, void **out, int *pinned);

/* zo_host_free() - release a buffer from zo_host_alloc(); NULL ok. */
void zo_host_free(void *ptr, size_t nbytes, int pinned);

/* zo_host_pinned_bytes() - bytes currently locked by zo_host_alloc(). */
size_t zo_host_pinned_bytes(void);

#endif
