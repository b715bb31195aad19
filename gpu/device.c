/*
 * device.c - the backend-neutral front of zoffload/device.h: argument checks,
 * device memory accounting and the allocation table, stream/event lists, and
 * dispatch through the ops table. It moves no bytes itself (see device_host.c
 * and device_cuda.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_internal.h"

/* ------------------------------------------------------------ helpers */

const char *zo_copy_kind_name(zo_copy_kind kind) {
  switch (kind) {
    case ZO_COPY_H2D: return "H2D";
    case ZO_COPY_D2H: return "D2H";
    case ZO_COPY_D2D: return "D2D";
    case ZO_COPY_H2H: return "H2H";
  }
  return "?";
}

const char *zo_device_kind_name(zo_device_kind kind) {
  switch (kind) {
    case ZO_DEVICE_HOST: return "host";
    case ZO_DEVICE_CUDA: return "cuda";
    case ZO_DEVICE_AUTO: return "auto";
  }
  return "?";
}

zo_status zo_device_kind_parse(const char *name, zo_device_kind *out) {
  if (!name || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_kind_parse: %s is NULL",
                        !name ? "name" : "out");
  static const zo_device_kind kinds[] = {ZO_DEVICE_HOST, ZO_DEVICE_CUDA, ZO_DEVICE_AUTO};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (!strcmp(name, zo_device_kind_name(kinds[i]))) {
      *out = kinds[i];
      return ZO_OK;
    }
  return zo_error_set(ZO_ERR_INVALID_ARG,
                      "device kind \"%s\": expected \"auto\", \"cuda\" or \"host\"", name);
}

/* Dense bf16 peaks, TFLOP/s, from NVIDIA's product datasheets; first match wins. */
static const struct {
  int major, minor;
  const char *name;
  double tflops;
} k_bf16_peak[] = {
    {9, 0, "H100 PCIe", 756}, {9, 0, "H100 NVL", 835}, {9, 0, "H200 NVL", 835},
    {9, 0, "GH200", 989},     {9, 0, "H100", 989},     {9, 0, "H200", 989},
    {10, 0, "B200", 2250},    {8, 0, "A100", 312},     {8, 0, "A30", 165},
    {8, 9, "L40S", 362},      {8, 9, "L40", 181},      {8, 9, "L4", 121},
    {8, 9, "RTX 4090", 165},  {8, 6, "A40", 150},      {8, 6, "A10", 125},
    {8, 6, "RTX 3090", 71},
};

static int is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* 1 when @word occurs in @name with no letter or digit right before or after it. */
static int name_has_word(const char *name, const char *word) {
  size_t n = strlen(word);
  for (const char *p = strstr(name, word); p; p = strstr(p + 1, word))
    if ((p == name || !is_alnum(p[-1])) && !is_alnum(p[n])) return 1;
  return 0;
}

double zo_gpu_bf16_peak_tflops(int major, int minor, const char *name) {
  if (!name) return 0;
  for (size_t i = 0; i < sizeof k_bf16_peak / sizeof k_bf16_peak[0]; i++)
    if (k_bf16_peak[i].major == major && k_bf16_peak[i].minor == minor &&
        name_has_word(name, k_bf16_peak[i].name))
      return k_bf16_peak[i].tflops;
  return 0;
}

double zo_device_peak_tflops(const zo_device_t *dev) {
  if (!dev || dev->kind != ZO_DEVICE_CUDA) return 0;
  return zo_gpu_bf16_peak_tflops(dev->cc_major, dev->cc_minor, dev->model);
}

int zo_device_cuda_count(void) {
#if ZO_HAVE_CUDA
  return zo_device_cuda_probe(NULL, 0);
#else
  return 0;
#endif
}

/* The launchers' per-node rank variables, in the order they are consulted (zoffload/device.h). */
static const char *const k_local_rank_vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                                "MPI_LOCALRANKID", "SLURM_LOCALID"};

zo_status zo_device_local_rank(int *local_rank, const char **var) {
  if (!local_rank)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_local_rank: local_rank is NULL");
  for (size_t i = 0; i < sizeof k_local_rank_vars / sizeof k_local_rank_vars[0]; i++) {
    const char *name = k_local_rank_vars[i], *s = getenv(name);
    if (!s || !s[0]) continue; /* unset or empty: the next launcher's variable */
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0 || v > ZO_LOCAL_RANK_MAX || s[0] < '0' || s[0] > '9')
      return zo_error_set(ZO_ERR_CONFIG, "%s=\"%s\" is not a local rank (a decimal integer 0..%d)",
                          name, s, ZO_LOCAL_RANK_MAX);
    *local_rank = (int)v;
    if (var) *var = name;
    return ZO_OK;
  }
  *local_rank = 0;
  if (var) *var = NULL;
  return ZO_OK;
}

zo_status zo_device_local_ordinal(int n_devices, int *ordinal) {
  if (!ordinal) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_local_ordinal: ordinal is NULL");
  if (n_devices < 0)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_device_local_ordinal: n_devices is %d, expected >= 0", n_devices);
  int lr;
  const char *var;
  ZO_CHECK(zo_device_local_rank(&lr, &var));
  if (n_devices > 0 && lr >= n_devices) {
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    return zo_error_set(
        ZO_ERR_CONFIG,
        "%s=%d, but this process sees %d CUDA device%s (CUDA_VISIBLE_DEVICES%s%s): one rank per GPU "
        "needs local ranks 0..%d; start fewer ranks per node, or make more GPUs visible",
        var, lr, n_devices, n_devices == 1 ? "" : "s", cvd ? "=" : " unset", cvd ? cvd : "",
        n_devices - 1);
  }
  *ordinal = lr;
  return ZO_OK;
}

int zo_device_default_ordinal(void) {
  int lr;
  if (zo_device_local_rank(&lr, NULL) != ZO_OK) {
    zo_warn_once("%s; using device 0", zo_last_error());
    return 0;
  }
  return lr;
}

/* Index of the first record with base > p (upper bound). Caller holds mem_mu. */
static size_t alloc_upper_bound(const zo_device_t *dev, uintptr_t p) {
  size_t lo = 0, hi = dev->n_allocs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (dev->allocs[mid].base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

zo_range_where zo_device_range_where(zo_device_t *dev, const void *p, size_t nbytes) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t b = a + nbytes; /* one past the end; callers reject wrap-around */
  zo_range_where w = ZO_RANGE_HOST;
  pthread_mutex_lock(&dev->mem_mu);
  size_t i = alloc_upper_bound(dev, a); /* allocs[i-1].base <= a < allocs[i].base */
  if (i > 0) {
    const zo_alloc_rec *r = &dev->allocs[i - 1];
    if (a < r->base + r->nbytes)
      w = (b <= r->base + r->nbytes) ? ZO_RANGE_DEVICE : ZO_RANGE_PARTIAL;
  }
  if (w == ZO_RANGE_HOST && i < dev->n_allocs && dev->allocs[i].base < b) w = ZO_RANGE_PARTIAL;
  pthread_mutex_unlock(&dev->mem_mu);
  return w;
}

static zo_status check_side(zo_device_t *dev, const char *what, const char *side, const void *p,
                            size_t nbytes, int want_device, zo_copy_kind kind) {
  zo_range_where w = zo_device_range_where(dev, p, nbytes);
  /* Not ours but the runtime's device memory of this GPU (a framework's tensor): accepted. */
  char why[128] = "";
  if (want_device && w == ZO_RANGE_HOST && dev->ops->foreign_device_mem &&
      dev->ops->foreign_device_mem(dev, p, nbytes, why, sizeof why))
    return ZO_OK;
  if (want_device && w != ZO_RANGE_DEVICE)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "%s: %s copy: %s %p + %zu bytes is not inside one live device allocation "
                        "of %s%s%s%s",
                        what, zo_copy_kind_name(kind), side, p, nbytes, dev->name,
                        w == ZO_RANGE_PARTIAL ? " (it runs past an allocation's end)" : "",
                        why[0] ? " nor device memory of this GPU: the CUDA runtime says " : "",
                        why);
  if (!want_device && w != ZO_RANGE_HOST)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "%s: %s copy: %s %p + %zu bytes overlaps device memory of %s but the copy "
                        "kind says host memory",
                        what, zo_copy_kind_name(kind), side, p, nbytes, dev->name);
  return ZO_OK;
}

zo_status zo_device_check_copy(zo_device_t *dev, const char *what, void *dst, const void *src,
                               size_t nbytes, zo_copy_kind kind) {
  if (kind < ZO_COPY_H2D || kind > ZO_COPY_H2H)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: unknown copy kind %d", what, (int)kind);
  if (!dst || !src)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s copy of %zu bytes with NULL %s", what,
                        zo_copy_kind_name(kind), nbytes, !dst ? "dst" : "src");
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (d + nbytes < d || s + nbytes < s)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %zu bytes wrap the address space", what, nbytes);
  if (d < s + nbytes && s < d + nbytes)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s copy of %zu bytes: src %p and dst %p overlap",
                        what, zo_copy_kind_name(kind), nbytes, src, dst);
  int src_dev = (kind == ZO_COPY_D2H || kind == ZO_COPY_D2D);
  int dst_dev = (kind == ZO_COPY_H2D || kind == ZO_COPY_D2D);
  ZO_CHECK(check_side(dev, what, "src", src, nbytes, src_dev, kind));
  ZO_CHECK(check_side(dev, what, "dst", dst, nbytes, dst_dev, kind));
  return ZO_OK;
}

/* ------------------------------------------------------------ device */

zo_status zo_device_create(zo_device_kind kind, int ordinal, size_t mem_limit_bytes,
                           zo_device_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_create: out is NULL");
  *out = NULL;
  if (ordinal < 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_create: ordinal %d < 0", ordinal);
  if (kind != ZO_DEVICE_HOST && kind != ZO_DEVICE_CUDA && kind != ZO_DEVICE_AUTO)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_create: unknown device kind %d", (int)kind);
#if ZO_HAVE_CUDA
  if (kind == ZO_DEVICE_AUTO)
    kind = zo_device_cuda_probe(NULL, 0) > 0 ? ZO_DEVICE_CUDA : ZO_DEVICE_HOST;
#else
  if (kind == ZO_DEVICE_AUTO) kind = ZO_DEVICE_HOST;
  if (kind == ZO_DEVICE_CUDA)
    return zo_error_set(
        ZO_ERR_UNSUPPORTED,
        "zo_device_create(cuda:%d): CUDA backend not built (zoffload was configured without the "
        "CUDA toolkit or with -DZO_WITH_CUDA=OFF)",
        ordinal);
#endif

  zo_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_device_create: out of host memory");
  int rc = pthread_mutex_init(&dev->mem_mu, NULL);
  if (rc) {
    free(dev);
    return zo_error_set(ZO_ERR_SYSTEM, "zo_device_create: pthread_mutex_init: %s", strerror(rc));
  }
  rc = pthread_mutex_init(&dev->list_mu, NULL);
  if (rc) {
    pthread_mutex_destroy(&dev->mem_mu);
    free(dev);
    return zo_error_set(ZO_ERR_SYSTEM, "zo_device_create: pthread_mutex_init: %s", strerror(rc));
  }
  dev->kind = kind;
  dev->ordinal = ordinal;
  dev->numa_node = -1;
  dev->limit = mem_limit_bytes ? mem_limit_bytes : SIZE_MAX;
  zo_status st;
#if ZO_HAVE_CUDA
  if (kind == ZO_DEVICE_CUDA) {
    st = zo_device_cuda_init(dev); /* names the device and sets the limit 0 means */
  } else
#endif
  {
    if (mem_limit_bytes) {
      char b[32];
      zo_format_bytes(b, sizeof b, (double)mem_limit_bytes);
      snprintf(dev->name, sizeof dev->name, "host (emulated device, limit %s)", b);
    } else {
      snprintf(dev->name, sizeof dev->name, "host (emulated device, no memory limit)");
    }
    st = zo_device_host_init(dev);
  }
  if (st != ZO_OK) {
    pthread_mutex_destroy(&dev->list_mu);
    pthread_mutex_destroy(&dev->mem_mu);
    free(dev);
    return zo_error_prefix(st, "zo_device_create");
  }
  *out = dev;
  return ZO_OK;
}

void zo_device_destroy(zo_device_t *dev) {
  if (!dev) return;
  zo_status st = zo_device_synchronize(dev);
  if (st != ZO_OK)
    zo_warn("zo_device_destroy(%s): queued work failed: %s", dev->name, zo_last_error());
  /* Streams first (their workers may hold references used by waits), then events. */
  while (dev->streams) zo_stream_destroy(dev->streams);
  while (dev->events) zo_event_destroy(dev->events);
  if (dev->n_allocs)
    zo_debug("zo_device_destroy(%s): freeing %zu allocations (%zu bytes) still live", dev->name,
             dev->n_allocs, dev->used);
  for (size_t i = 0; i < dev->n_allocs; i++) dev->ops->mem_free(dev, (void *)dev->allocs[i].base);
  free(dev->allocs);
  dev->ops->destroy(dev);
  pthread_mutex_destroy(&dev->list_mu);
  pthread_mutex_destroy(&dev->mem_mu);
  free(dev);
}

zo_device_kind zo_device_get_kind(const zo_device_t *dev) { return dev->kind; }

const char *zo_device_name(const zo_device_t *dev) { return dev ? dev->name : "(null device)"; }

int zo_device_ordinal(const zo_device_t *dev) { return dev ? dev->ordinal : -1; }
int zo_device_numa_node(const zo_device_t *dev) { return dev ? dev->numa_node : -1; }

int zo_device_host_addressable(const zo_device_t *dev) {
  return dev ? dev->ops->host_addressable : 0;
}

zo_status zo_device_malloc(zo_device_t *dev, size_t nbytes, void **dptr) {
  if (dptr) *dptr = NULL;
  if (!dev || !dptr)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_malloc: %s is NULL", !dev ? "dev" : "dptr");
  if (nbytes == 0) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_malloc: nbytes is 0");

  /* Reserve the bytes first so concurrent mallocs cannot overshoot the limit. */
  pthread_mutex_lock(&dev->mem_mu);
  if (nbytes > dev->limit - dev->used) {
    size_t used = dev->used, limit = dev->limit;
    pthread_mutex_unlock(&dev->mem_mu);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "device memory: cannot allocate %zu bytes: %zu in use of limit %zu", nbytes,
                        used, limit);
  }
  dev->used += nbytes;
  pthread_mutex_unlock(&dev->mem_mu);

  void *p = NULL;
  zo_status st = dev->ops->mem_alloc(dev, nbytes, &p);

  pthread_mutex_lock(&dev->mem_mu);
  if (st != ZO_OK) {
    dev->used -= nbytes;
    pthread_mutex_unlock(&dev->mem_mu);
    return st;
  }
  if (dev->n_allocs == dev->cap_allocs) {
    size_t cap = dev->cap_allocs ? 2 * dev->cap_allocs : 64;
    zo_alloc_rec *t = realloc(dev->allocs, cap * sizeof *t);
    if (!t) {
      dev->used -= nbytes;
      pthread_mutex_unlock(&dev->mem_mu);
      dev->ops->mem_free(dev, p);
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                          "zo_device_malloc: allocation table: out of host memory");
    }
    dev->allocs = t;
    dev->cap_allocs = cap;
  }
  size_t i = alloc_upper_bound(dev, (uintptr_t)p);
  memmove(&dev->allocs[i + 1], &dev->allocs[i], (dev->n_allocs - i) * sizeof dev->allocs[0]);
  dev->allocs[i].base = (uintptr_t)p;
  dev->allocs[i].nbytes = nbytes;
  dev->n_allocs++;
  if (dev->used > dev->peak) dev->peak = dev->used;
  pthread_mutex_unlock(&dev->mem_mu);
  *dptr = p;
  return ZO_OK;
}

zo_status zo_device_free(zo_device_t *dev, void *dptr) {
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_free: dev is NULL");
  if (!dptr) return ZO_OK;
  pthread_mutex_lock(&dev->mem_mu);
  size_t i = alloc_upper_bound(dev, (uintptr_t)dptr);
  if (i == 0 || dev->allocs[i - 1].base != (uintptr_t)dptr) {
    pthread_mutex_unlock(&dev->mem_mu);
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_device_free: %p is not a live pointer from zo_device_malloc on %s "
                        "(freed twice, interior pointer, or another device)",
                        dptr, dev->name);
  }
  dev->used -= dev->allocs[i - 1].nbytes;
  memmove(&dev->allocs[i - 1], &dev->allocs[i], (dev->n_allocs - i) * sizeof dev->allocs[0]);
  dev->n_allocs--;
  pthread_mutex_unlock(&dev->mem_mu);
  dev->ops->mem_free(dev, dptr);
  return ZO_OK;
}

zo_status zo_device_mem_info(const zo_device_t *dev, size_t *used_bytes, size_t *peak_bytes,
                             size_t *limit_bytes) {
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_mem_info: dev is NULL");
  zo_device_t *d = (zo_device_t *)dev; /* the lock is not part of the logical state */
  pthread_mutex_lock(&d->mem_mu);
  if (used_bytes) *used_bytes = d->used;
  if (peak_bytes) *peak_bytes = d->peak;
  if (limit_bytes) *limit_bytes = d->limit;
  pthread_mutex_unlock(&d->mem_mu);
  return ZO_OK;
}

zo_status zo_device_mem_available(zo_device_t *dev, size_t *bytes) {
  if (bytes) *bytes = 0;
  if (!dev || !bytes)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_mem_available: NULL argument");
  pthread_mutex_lock(&dev->mem_mu);
  size_t avail = dev->limit == SIZE_MAX
                     ? SIZE_MAX
                     : dev->limit - (dev->used < dev->limit ? dev->used : dev->limit);
  pthread_mutex_unlock(&dev->mem_mu);
  if (dev->ops->mem_backend_free) {
    size_t b = 0;
    ZO_CHECK(dev->ops->mem_backend_free(dev, &b));
    if (b < avail) avail = b;
  }
  *bytes = avail;
  return ZO_OK;
}

zo_status zo_device_synchronize(zo_device_t *dev) {
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_synchronize: dev is NULL");
  return dev->ops->synchronize(dev);
}

/* ------------------------------------------------------------ streams */

/* Put a new backend stream on @dev's list. */
static void stream_link(zo_device_t *dev, zo_stream_t *s) {
  s->dev = dev;
  pthread_mutex_lock(&dev->list_mu);
  s->prev = NULL;
  s->next = dev->streams;
  if (dev->streams) dev->streams->prev = s;
  dev->streams = s;
  pthread_mutex_unlock(&dev->list_mu);
}

zo_status zo_stream_create(zo_device_t *dev, zo_stream_t **out) {
  if (out) *out = NULL;
  if (!dev || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_stream_create: %s is NULL", !dev ? "dev" : "out");
  zo_stream_t *s = NULL;
  ZO_CHECK(dev->ops->stream_create(dev, &s));
  stream_link(dev, s);
  *out = s;
  return ZO_OK;
}

zo_status zo_stream_wrap(zo_device_t *dev, void *native_stream, zo_stream_t **out) {
  if (out) *out = NULL;
  if (!dev || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_stream_wrap: %s is NULL", !dev ? "dev" : "out");
  if (!dev->ops->stream_wrap)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "zo_stream_wrap(%s): the %s backend has no native streams to wrap",
                        dev->name, dev->ops->backend);
  zo_stream_t *s = NULL;
  ZO_CHECK(dev->ops->stream_wrap(dev, native_stream, &s));
  stream_link(dev, s);
  *out = s;
  return ZO_OK;
}

void *zo_stream_native(zo_stream_t *s) {
  if (!s || !s->dev->ops->stream_native) return NULL;
  return s->dev->ops->stream_native(s);
}

void zo_stream_destroy(zo_stream_t *s) {
  if (!s) return;
  zo_device_t *dev = s->dev;
  pthread_mutex_lock(&dev->list_mu);
  if (s->prev)
    s->prev->next = s->next;
  else
    dev->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&dev->list_mu);
  dev->ops->stream_destroy(s);
}

zo_status zo_memcpy_async(zo_stream_t *s, void *dst, const void *src, size_t nbytes,
                          zo_copy_kind kind) {
  if (!s) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_memcpy_async: stream is NULL");
  if (nbytes == 0) return ZO_OK;
  ZO_CHECK(zo_device_check_copy(s->dev, "zo_memcpy_async", dst, src, nbytes, kind));
  return s->dev->ops->memcpy_async(s, dst, src, nbytes, kind);
}

zo_status zo_memset_async(zo_stream_t *s, void *dptr, int value, size_t nbytes) {
  if (!s) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_memset_async: stream is NULL");
  if (nbytes == 0) return ZO_OK;
  if (!dptr) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_memset_async: dptr is NULL");
  if ((uintptr_t)dptr + nbytes < (uintptr_t)dptr ||
      zo_device_range_where(s->dev, dptr, nbytes) != ZO_RANGE_DEVICE)
    return zo_error_set(
        ZO_ERR_INVALID_ARG,
        "zo_memset_async: %p + %zu bytes is not inside one live device allocation of %s", dptr,
        nbytes, s->dev->name);
  return s->dev->ops->memset_async(s, dptr, value, nbytes);
}

zo_status zo_launch_host_func(zo_stream_t *s, void (*fn)(void *arg), void *arg) {
  if (!s || !fn)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_launch_host_func: %s is NULL",
                        !s ? "stream" : "fn");
  return s->dev->ops->launch_host_func(s, fn, arg);
}

zo_status zo_stream_synchronize(zo_stream_t *s) {
  if (!s) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_stream_synchronize: stream is NULL");
  return s->dev->ops->stream_synchronize(s);
}

zo_status zo_stream_query(zo_stream_t *s, int *idle) {
  if (!s || !idle)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_stream_query: %s is NULL", !s ? "stream" : "idle");
  return s->dev->ops->stream_query(s, idle);
}

/* ------------------------------------------------------------ events */

zo_status zo_event_create(zo_device_t *dev, zo_event_t **out) {
  if (out) *out = NULL;
  if (!dev || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_event_create: %s is NULL", !dev ? "dev" : "out");
  zo_event_t *ev = NULL;
  ZO_CHECK(dev->ops->event_create(dev, &ev));
  ev->dev = dev;
  pthread_mutex_lock(&dev->list_mu);
  ev->prev = NULL;
  ev->next = dev->events;
  if (dev->events) dev->events->prev = ev;
  dev->events = ev;
  pthread_mutex_unlock(&dev->list_mu);
  *out = ev;
  return ZO_OK;
}

void zo_event_destroy(zo_event_t *ev) {
  if (!ev) return;
  zo_device_t *dev = ev->dev;
  pthread_mutex_lock(&dev->list_mu);
  if (ev->prev)
    ev->prev->next = ev->next;
  else
    dev->events = ev->next;
  if (ev->next) ev->next->prev = ev->prev;
  pthread_mutex_unlock(&dev->list_mu);
  dev->ops->event_destroy(ev);
}

zo_status zo_event_record(zo_event_t *ev, zo_stream_t *s) {
  if (!ev || !s)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_event_record: %s is NULL",
                        !ev ? "event" : "stream");
  if (ev->dev != s->dev)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_event_record: event of device %d recorded on a stream of device %d",
                        ev->dev->ordinal, s->dev->ordinal);
  return s->dev->ops->event_record(ev, s);
}

zo_status zo_event_query(zo_event_t *ev, int *done) {
  if (!ev || !done)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_event_query: %s is NULL", !ev ? "event" : "done");
  return ev->dev->ops->event_query(ev, done);
}

zo_status zo_event_synchronize(zo_event_t *ev) {
  if (!ev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_event_synchronize: event is NULL");
  return ev->dev->ops->event_synchronize(ev);
}

zo_status zo_stream_wait_event(zo_stream_t *s, zo_event_t *ev) {
  if (!ev || !s)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_stream_wait_event: %s is NULL",
                        !ev ? "event" : "stream");
  if (ev->dev->ops != s->dev->ops)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_stream_wait_event: event of backend %s, stream of backend %s",
                        ev->dev->ops->backend, s->dev->ops->backend);
  return s->dev->ops->stream_wait_event(s, ev);
}

/* ------------------------------------------------------------ sync copy */

zo_status zo_memcpy(zo_device_t *dev, void *dst, const void *src, size_t nbytes,
                    zo_copy_kind kind) {
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_memcpy: dev is NULL");
  if (nbytes == 0) return ZO_OK;
  ZO_CHECK(zo_device_check_copy(dev, "zo_memcpy", dst, src, nbytes, kind));
  return dev->ops->memcpy_sync(dev, dst, src, nbytes, kind);
}

/* ------------------------------------------------------------ link emulation */

zo_status zo_device_set_link_gbps(zo_device_t *dev, double gbps) {
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_set_link_gbps: dev is NULL");
  if (!(gbps >= 0.0) || gbps > 1e9)
    return zo_error_set(
        ZO_ERR_INVALID_ARG,
        "zo_device_set_link_gbps(%s): gbps %g is not a number in [0, 1e9] (0 = unlimited)",
        dev->name, gbps);
  if (!dev->ops->set_link_gbps)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "zo_device_set_link_gbps(%s): the %s backend has a real host-device link; "
                        "emulation is for the host backend only",
                        dev->name, dev->ops->backend);
  return dev->ops->set_link_gbps(dev, gbps);
}

zo_status zo_device_link_stats(const zo_device_t *dev, zo_link_stats *out) {
  if (!dev || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_device_link_stats: %s is NULL",
                        dev ? "out" : "dev");
  memset(out, 0, sizeof *out);
  if (!dev->ops->link_stats)
    return zo_error_set(ZO_ERR_UNSUPPORTED, "zo_device_link_stats(%s): not kept by the %s backend",
                        dev->name, dev->ops->backend);
  return dev->ops->link_stats(dev, out);
}
