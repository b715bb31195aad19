/*
 * device_internal.h - what device.c (the backend-neutral front) shares with
 * the backends (device_host.c, device_cuda.c): the ops table, the common
 * parts of the handles, and the allocation table. Not installed.
 */
#ifndef ZO_DEVICE_INTERNAL_H
#define ZO_DEVICE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base_internal.h"
#include "zoffload/device.h"

/*
 * Backend ops. device.c validates arguments (NULL handles, copy kinds and
 * pointer ranges, device matching) before calling these, does the memory
 * accounting around mem_alloc/mem_free, and keeps the lists of open streams
 * and events. A backend only moves bytes and keeps order.
 */
typedef struct zo_device_ops {
  const char *backend; /* "host", "cuda" */
  int host_addressable;
  /* Raw device memory: @nbytes > 0, result ZO_DEVICE_ALIGN aligned. */
  zo_status (*mem_alloc)(zo_device_t *dev, size_t nbytes, void **dptr);
  void (*mem_free)(zo_device_t *dev, void *dptr);
  /* Backend state teardown, called last (no streams, events or allocations left). */
  void (*destroy)(zo_device_t *dev);
  zo_status (*synchronize)(zo_device_t *dev);
  /* Allocate and initialise a backend stream whose first member is zo_stream_t. */
  zo_status (*stream_create)(zo_device_t *dev, zo_stream_t **out);
  /* The same around a caller-owned native stream; NULL: the backend has none (ZO_ERR_UNSUPPORTED). */
  zo_status (*stream_wrap)(zo_device_t *dev, void *native, zo_stream_t **out);
  /* The native stream of @s; NULL when the backend has none. */
  void *(*stream_native)(zo_stream_t *s);
  /* Wait for @s's work, then free it (a wrapped native stream is not destroyed). */
  void (*stream_destroy)(zo_stream_t *s);
  zo_status (*memcpy_async)(zo_stream_t *s, void *dst, const void *src, size_t nbytes,
                            zo_copy_kind kind);
  zo_status (*memset_async)(zo_stream_t *s, void *dptr, int value, size_t nbytes);
  zo_status (*launch_host_func)(zo_stream_t *s, void (*fn)(void *), void *arg);
  zo_status (*stream_synchronize)(zo_stream_t *s);
  zo_status (*stream_query)(zo_stream_t *s, int *idle);
  zo_status (*event_create)(zo_device_t *dev, zo_event_t **out);
  void (*event_destroy)(zo_event_t *ev);
  zo_status (*event_record)(zo_event_t *ev, zo_stream_t *s);
  zo_status (*event_query)(zo_event_t *ev, int *done);
  zo_status (*event_synchronize)(zo_event_t *ev);
  zo_status (*stream_wait_event)(zo_stream_t *s, zo_event_t *ev);
  zo_status (*memcpy_sync)(zo_device_t *dev, void *dst, const void *src, size_t nbytes,
                           zo_copy_kind kind);
  /* Host-device link emulation; NULL when the backend has a real link (CUDA). */
  zo_status (*set_link_gbps)(zo_device_t *dev, double gbps);
  /* Link counters; NULL when the backend keeps none. */
  zo_status (*link_stats)(const zo_device_t *dev, zo_link_stats *out);
  /* Bytes the backend itself can still allocate (CUDA: cudaMemGetInfo's free);
   * NULL when only the limit bounds it (host). */
  zo_status (*mem_backend_free)(zo_device_t *dev, size_t *free_bytes);
  /* Device memory the engine did not allocate (CUDA: a framework's cudaMalloc, e.g. torch's gradients):
   * 1 when the runtime says the first and last byte of [p, p+nbytes) are device (or managed) memory of
   * this device; else 0 with @why (@cap bytes) saying what the runtime knows it as instead ("host memory",
   * "device memory of cuda:1"). Called only for ranges outside the allocation table. NULL: only the table
   * counts as device memory (host: what zo_device_malloc returned). Thread-safe. */
  int (*foreign_device_mem)(zo_device_t *dev, const void *p, size_t nbytes, char *why, size_t cap);
} zo_device_ops;

/* One live allocation; the table is sorted by base and ranges never overlap. */
typedef struct zo_alloc_rec {
  uintptr_t base;
  size_t nbytes;
} zo_alloc_rec;

/* Common head of every stream handle; a backend's stream struct starts with it. */
struct zo_stream {
  zo_device_t *dev;
  zo_stream_t *prev, *next; /* dev->streams list, under dev->list_mu */
};

/* Common head of every event handle; a backend's event struct starts with it. */
struct zo_event {
  zo_device_t *dev;
  zo_event_t *prev, *next; /* dev->events list, under dev->list_mu */
};

struct zo_device {
  const zo_device_ops *ops;
  zo_device_kind kind;
  int ordinal;
  char name[320];         /* CUDA device names run to 256 bytes */
  char model[256];        /* CUDA: the GPU's product name (cudaDeviceProp.name); host: "" */
  int cc_major, cc_minor; /* CUDA: compute capability; host: 0 */
  int numa_node; /* NUMA node (OS index) of the GPU's PCI device from sysfs; -1: unknown or host */

  /* Memory accounting (bytes), all under mem_mu. */
  pthread_mutex_t mem_mu;
  zo_alloc_rec *allocs; /* [n_allocs], sorted by base */
  size_t n_allocs, cap_allocs;
  size_t used, peak, limit; /* limit SIZE_MAX: unlimited */

  /* Open streams and events, under list_mu. */
  pthread_mutex_t list_mu;
  zo_stream_t *streams;
  zo_event_t *events;

  void *backend; /* backend-private state */
};

/* Where a byte range lies relative to the device's live allocations. */
typedef enum zo_range_where {
  ZO_RANGE_HOST = 0,    /* overlaps no allocation */
  ZO_RANGE_DEVICE = 1,  /* wholly inside one allocation */
  ZO_RANGE_PARTIAL = 2, /* overlaps device memory but is not inside one allocation */
} zo_range_where;

/* zo_device_range_where() - classify [p, p+nbytes), nbytes > 0. Thread-safe (takes mem_mu). */
zo_range_where zo_device_range_where(zo_device_t *dev, const void *p, size_t nbytes);

/*
 * zo_device_check_copy() - validate a copy's pointers against @kind and the
 * current allocation table. Returns ZO_OK or ZO_ERR_INVALID_ARG with a
 * message prefixed by @what ("zo_memcpy_async"). Thread-safe.
 */
zo_status zo_device_check_copy(zo_device_t *dev, const char *what, void *dst, const void *src,
                               size_t nbytes, zo_copy_kind kind);

/* zo_device_host_init() - install the host backend on @dev (device_host.c). */
zo_status zo_device_host_init(zo_device_t *dev);

#if ZO_HAVE_CUDA
/*
 * zo_device_cuda_init() - install the cuda backend on @dev (device_cuda.c):
 * @dev->ordinal is set and checked against the device count; sets the name,
 * and the limit to the GPU's total memory when @dev->limit is SIZE_MAX.
 * Returns ZO_OK, ZO_ERR_UNSUPPORTED (no CUDA device), ZO_ERR_INVALID_ARG
 * (ordinal out of range), ZO_ERR_CUDA, ZO_ERR_OUT_OF_MEMORY, ZO_ERR_SYSTEM.
 */
zo_status zo_device_cuda_init(zo_device_t *dev);

/*
 * zo_device_cuda_probe() - the number of CUDA devices (cudaGetDeviceCount),
 * 0 when none or the call failed; then @why (may be NULL) gets the reason.
 */
int zo_device_cuda_probe(char *why, size_t cap);
#endif

#endif /* ZO_DEVICE_INTERNAL_H */
