/*
 * device_cuda.c - the `cuda` device backend: device memory from cudaMalloc,
 * CUDA's own streams and events, copies with cudaMemcpyAsync. Plain C on the
 * CUDA runtime API (compiled by the C compiler, linked with cudart); it holds
 * no kernels and emulates nothing: the ordering is CUDA's, as
 * zoffload/device.h describes it.
 *
 * Errors. Every CUDA call is checked. A failure becomes ZO_ERR_CUDA with
 * "<call> on cuda:N: <cudaGetErrorString> (<cudaGetErrorName>)", and the
 * runtime's per-thread last error is cleared after it (cudaGetLastError), so
 * that a framework checking cudaGetLastError() after its own kernel launches
 * does not trip over ours; an error that poisons the context (illegal
 * address) comes back from every later call anyway. Each stream keeps the
 * first failure met while enqueueing to it or waiting on it as its sticky
 * error, under its mutex.
 *
 * Threads. Any host thread may call in: every entry first makes the device
 * current on the calling thread (cudaGetDevice, and cudaSetDevice when it
 * differs). Not restored afterwards: restoring a thread that had no device
 * yet would create a context on GPU 0.
 *
 * Link counters. There is no emulation (set_link_gbps is NULL, so device.c
 * answers ZO_ERR_UNSUPPORTED), but H2D/D2H bytes and copies are counted when
 * enqueued, so tools can report the traffic.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_host.h"
#include "device_internal.h"

typedef struct cuda_dev {
  cudaStream_t sync_stream;               /* private, non-blocking: zo_memcpy() runs here */
  pthread_mutex_t link_mu;                /* guards the counters */
  unsigned long long bytes[2], copies[2]; /* [0] H2D, [1] D2H */
} cuda_dev;

typedef struct cuda_stream {
  zo_stream_t base; /* must be first */
  cudaStream_t st;
  int owned;   /* 0: wrapped, the caller's */
  uint64_t id; /* for messages */
  pthread_mutex_t mu;
  zo_status err; /* sticky: the first failure */
  char err_msg[768];
} cuda_stream;

typedef struct cuda_event {
  zo_event_t base; /* must be first */
  cudaEvent_t ev;
} cuda_event;

static atomic_uint_fast64_t g_stream_ids;

/* ------------------------------------------------------------ errors */

/* ZO_ERR_CUDA "<what> on cuda:N: <string> (<name>)"; clears the runtime's last error. */
static zo_status __attribute__((format(printf, 3, 4)))
cu_fail(cudaError_t e, int ordinal, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_CUDA, "%s on cuda:%d: %s (%s)", what, ordinal, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

/* Make @ordinal the calling thread's current device. */
static zo_status use_device(int ordinal) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == ordinal) return ZO_OK;
  cudaError_t e = cudaSetDevice(ordinal);
  if (e != cudaSuccess) return cu_fail(e, ordinal, "cudaSetDevice(%d)", ordinal);
  return ZO_OK;
}

/* Record @st (the message is this thread's last error) as @s's sticky error when it has none; returns @st. */
static zo_status stream_fail(cuda_stream *s, zo_status st) {
  pthread_mutex_lock(&s->mu);
  if (s->err == ZO_OK) {
    s->err = st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s", zo_last_error());
  }
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* @s's sticky error, re-raised as this thread's last error; ZO_OK when none. */
static zo_status stream_sticky(cuda_stream *s) {
  char msg[sizeof s->err_msg];
  pthread_mutex_lock(&s->mu);
  zo_status err = s->err;
  if (err != ZO_OK) memcpy(msg, s->err_msg, sizeof msg);
  pthread_mutex_unlock(&s->mu);
  return err == ZO_OK ? ZO_OK : zo_error_set(err, "%s", msg);
}

static enum cudaMemcpyKind cuda_kind(zo_copy_kind kind) {
  switch (kind) {
    case ZO_COPY_H2D: return cudaMemcpyHostToDevice;
    case ZO_COPY_D2H: return cudaMemcpyDeviceToHost;
    case ZO_COPY_D2D: return cudaMemcpyDeviceToDevice;
    case ZO_COPY_H2H: return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault; /* not reached: device.c rejects unknown kinds */
}

static void count_link(zo_device_t *dev, zo_copy_kind kind, size_t nbytes) {
  if (kind != ZO_COPY_H2D && kind != ZO_COPY_D2H) return;
  cuda_dev *cd = dev->backend;
  int lane = kind == ZO_COPY_D2H;
  pthread_mutex_lock(&cd->link_mu);
  cd->bytes[lane] += nbytes;
  cd->copies[lane]++;
  pthread_mutex_unlock(&cd->link_mu);
}

/* ------------------------------------------------------------ memory */

static zo_status cuda_mem_alloc(zo_device_t *dev, size_t nbytes, void **dptr) {
  ZO_CHECK(use_device(dev->ordinal));
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, nbytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    char fb[32] = "?", tb[32] = "?";
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      zo_format_bytes(fb, sizeof fb, (double)free_b);
      zo_format_bytes(tb, sizeof tb, (double)total_b);
    } else {
      (void)cudaGetLastError();
    }
    return zo_error_set(
        ZO_ERR_OUT_OF_MEMORY,
        "device memory: %s: cudaMalloc of %zu bytes failed: out of memory (%s free of %s on the GPU)",
        dev->name, nbytes, fb, tb);
  }
  if (e != cudaSuccess) return cu_fail(e, dev->ordinal, "cudaMalloc(%zu bytes)", nbytes);
  if ((uintptr_t)p % ZO_DEVICE_ALIGN) { /* cudaMalloc promises 256; check rather than trust */
    cudaFree(p);
    return zo_error_set(ZO_ERR_CUDA,
                        "cudaMalloc(%zu bytes) on cuda:%d returned %p, not %d-byte aligned", nbytes,
                        dev->ordinal, p, ZO_DEVICE_ALIGN);
  }
  *dptr = p;
  return ZO_OK;
}

static zo_status cuda_mem_backend_free(zo_device_t *dev, size_t *free_bytes) {
  ZO_CHECK(use_device(dev->ordinal));
  size_t total_b = 0;
  cudaError_t e = cudaMemGetInfo(free_bytes, &total_b);
  if (e != cudaSuccess) return cu_fail(e, dev->ordinal, "cudaMemGetInfo");
  return ZO_OK;
}

static void cuda_mem_free(zo_device_t *dev, void *dptr) {
  if (use_device(dev->ordinal) != ZO_OK) {
    zo_warn("zo_device_free(%s): %s; %p leaks", dev->name, zo_last_error(), dptr);
    return;
  }
  cudaError_t e = cudaFree(dptr);
  if (e != cudaSuccess) {
    cu_fail(e, dev->ordinal, "cudaFree(%p)", dptr);
    zo_warn("zo_device_free(%s): %s", dev->name, zo_last_error());
  }
}

static void cuda_destroy(zo_device_t *dev) {
  cuda_dev *cd = dev->backend;
  if (!cd) return;
  if (use_device(dev->ordinal) == ZO_OK) {
    cudaError_t e = cudaStreamDestroy(cd->sync_stream);
    if (e != cudaSuccess) {
      cu_fail(e, dev->ordinal, "cudaStreamDestroy(private copy stream)");
      zo_debug("zo_device_destroy(%s): %s", dev->name, zo_last_error());
    }
  }
  pthread_mutex_destroy(&cd->link_mu);
  free(cd);
  dev->backend = NULL;
}

/* ------------------------------------------------------------ streams */

static zo_status stream_new(zo_device_t *dev, cuda_stream **out) {
  cuda_stream *s = calloc(1, sizeof *s);
  if (!s) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_stream_create: out of host memory");
  int rc = pthread_mutex_init(&s->mu, NULL);
  if (rc) {
    free(s);
    return zo_error_set(ZO_ERR_SYSTEM, "zo_stream_create: pthread_mutex_init: %s", strerror(rc));
  }
  s->base.dev = dev;
  s->id = atomic_fetch_add(&g_stream_ids, 1) + 1;
  *out = s;
  return ZO_OK;
}

static void stream_free(cuda_stream *s) {
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static zo_status cuda_stream_create(zo_device_t *dev, zo_stream_t **out) {
  ZO_CHECK(use_device(dev->ordinal));
  cuda_stream *s = NULL;
  ZO_CHECK(stream_new(dev, &s));
  /* Non-blocking: no implicit synchronization with the legacy default stream (0). */
  cudaError_t e = cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    stream_free(s);
    return cu_fail(e, dev->ordinal, "cudaStreamCreateWithFlags(non-blocking)");
  }
  s->owned = 1;
  *out = &s->base;
  return ZO_OK;
}

static zo_status cuda_stream_wrap(zo_device_t *dev, void *native, zo_stream_t **out) {
  ZO_CHECK(use_device(dev->ordinal));
  cudaStream_t st = (cudaStream_t)native;
  unsigned flags = 0;
  cudaError_t e = cudaStreamGetFlags(st, &flags); /* a cheap validity check of the handle */
  if (e != cudaSuccess)
    return cu_fail(e, dev->ordinal, "zo_stream_wrap: cudaStreamGetFlags(%p)", native);
#if CUDART_VERSION >= 12080
  int owner = -1;
  e = cudaStreamGetDevice(st, &owner);
  if (e != cudaSuccess)
    return cu_fail(e, dev->ordinal, "zo_stream_wrap: cudaStreamGetDevice(%p)", native);
  if (owner != dev->ordinal)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_stream_wrap(%s): stream %p belongs to cuda:%d",
                        dev->name, native, owner);
#endif
  cuda_stream *s = NULL;
  ZO_CHECK(stream_new(dev, &s));
  s->st = st;
  s->owned = 0;
  *out = &s->base;
  return ZO_OK;
}

static void *cuda_stream_native(zo_stream_t *st) { return (void *)((cuda_stream *)st)->st; }

static void cuda_stream_destroy(zo_stream_t *st) {
  cuda_stream *s = (cuda_stream *)st;
  int ordinal = st->dev->ordinal;
  if (use_device(ordinal) != ZO_OK) {
    zo_warn("zo_stream_destroy: stream %llu: %s; the CUDA stream leaks", (unsigned long long)s->id,
            zo_last_error());
    stream_free(s);
    return;
  }
  cudaError_t e = cudaStreamSynchronize(s->st);
  if (e != cudaSuccess) {
    cu_fail(e, ordinal, "cudaStreamSynchronize(stream %llu)", (unsigned long long)s->id);
    zo_debug("zo_stream_destroy: %s", zo_last_error());
  }
  if (s->err != ZO_OK)
    zo_debug("zo_stream_destroy: stream %llu had failed: %s", (unsigned long long)s->id,
             s->err_msg);
  if (s->owned) {
    e = cudaStreamDestroy(s->st);
    if (e != cudaSuccess) {
      cu_fail(e, ordinal, "cudaStreamDestroy(stream %llu)", (unsigned long long)s->id);
      zo_warn("zo_stream_destroy: %s", zo_last_error());
    }
  }
  stream_free(s);
}

/* H2H: CUDA runs a host-to-host cudaMemcpyAsync synchronously in the caller; as a host func it
 * keeps stream order and returns when enqueued. */
typedef struct h2h_op {
  void *dst;
  const void *src;
  size_t nbytes;
} h2h_op;

static void h2h_fn(void *arg) {
  h2h_op *op = arg;
  memcpy(op->dst, op->src, op->nbytes);
  free(op);
}

static zo_status cuda_memcpy_async(zo_stream_t *st, void *dst, const void *src, size_t nbytes,
                                   zo_copy_kind kind) {
  cuda_stream *s = (cuda_stream *)st;
  zo_device_t *dev = st->dev;
  zo_status rc = use_device(dev->ordinal);
  if (rc != ZO_OK) return stream_fail(s, rc);
  cudaError_t e;
  if (kind == ZO_COPY_H2H) {
    h2h_op *op = malloc(sizeof *op);
    if (!op)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_memcpy_async: H2H copy: out of host memory");
    *op = (h2h_op){dst, src, nbytes};
    e = cudaLaunchHostFunc(s->st, h2h_fn, op);
    if (e != cudaSuccess) {
      free(op);
      return stream_fail(s, cu_fail(e, dev->ordinal,
                                    "cudaLaunchHostFunc(H2H copy of %zu bytes, stream %llu)",
                                    nbytes, (unsigned long long)s->id));
    }
    return ZO_OK;
  }
  e = cudaMemcpyAsync(dst, src, nbytes, cuda_kind(kind), s->st);
  if (e != cudaSuccess)
    return stream_fail(s, cu_fail(e, dev->ordinal,
                                  "cudaMemcpyAsync(%s, %zu bytes, %p -> %p, stream %llu)",
                                  zo_copy_kind_name(kind), nbytes, src, dst,
                                  (unsigned long long)s->id));
  count_link(dev, kind, nbytes);
  return ZO_OK;
}

static zo_status cuda_memset_async(zo_stream_t *st, void *dptr, int value, size_t nbytes) {
  cuda_stream *s = (cuda_stream *)st;
  zo_status rc = use_device(st->dev->ordinal);
  if (rc != ZO_OK) return stream_fail(s, rc);
  cudaError_t e = cudaMemsetAsync(dptr, value, nbytes, s->st);
  if (e != cudaSuccess)
    return stream_fail(s, cu_fail(e, st->dev->ordinal,
                                  "cudaMemsetAsync(%p, %d, %zu bytes, stream %llu)", dptr, value,
                                  nbytes, (unsigned long long)s->id));
  return ZO_OK;
}

/* The caller's host function, run through host_func_tramp so that zo_tl_host_func (base_internal.h) is set while
 * it runs, as the host backend's stream threads do: the engine counts gradient bytes processed inside one. The pair
 * is freed by the trampoline (it runs exactly once once enqueued) or by the failed launch. No CUDA call inside. */
typedef struct host_func_op {
  void (*fn)(void *);
  void *arg;
} host_func_op;

static void host_func_tramp(void *p) {
  host_func_op op = *(host_func_op *)p;
  free(p);
  int was = zo_tl_host_func;
  zo_tl_host_func = 1;
  op.fn(op.arg);
  zo_tl_host_func = was;
}

static zo_status cuda_launch_host_func(zo_stream_t *st, void (*fn)(void *), void *arg) {
  cuda_stream *s = (cuda_stream *)st;
  zo_status rc = use_device(st->dev->ordinal);
  if (rc != ZO_OK) return stream_fail(s, rc);
  host_func_op *op = malloc(sizeof *op);
  if (!op) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_launch_host_func: out of host memory");
  *op = (host_func_op){fn, arg};
  cudaError_t e = cudaLaunchHostFunc(s->st, host_func_tramp, op);
  if (e != cudaSuccess) {
    free(op);
    return stream_fail(s, cu_fail(e, st->dev->ordinal, "cudaLaunchHostFunc(stream %llu)",
                                  (unsigned long long)s->id));
  }
  return ZO_OK;
}

static zo_status cuda_stream_synchronize(zo_stream_t *st) {
  cuda_stream *s = (cuda_stream *)st;
  zo_status rc = use_device(st->dev->ordinal);
  if (rc != ZO_OK) return stream_fail(s, rc);
  cudaError_t e = cudaStreamSynchronize(s->st);
  if (e != cudaSuccess)
    stream_fail(s, cu_fail(e, st->dev->ordinal, "cudaStreamSynchronize(stream %llu)",
                           (unsigned long long)s->id));
  return stream_sticky(s);
}

static zo_status cuda_stream_query(zo_stream_t *st, int *idle) {
  cuda_stream *s = (cuda_stream *)st;
  *idle = 1;
  zo_status rc = use_device(st->dev->ordinal);
  if (rc != ZO_OK) return stream_fail(s, rc);
  cudaError_t e = cudaStreamQuery(s->st);
  if (e == cudaErrorNotReady) {
    (void)
        cudaGetLastError(); /* "not ready" is an answer, not an error (as PyTorch clears it too) */
    *idle = 0;
  } else if (e != cudaSuccess) {
    stream_fail(s, cu_fail(e, st->dev->ordinal, "cudaStreamQuery(stream %llu)",
                           (unsigned long long)s->id));
  }
  return stream_sticky(s);
}

/* Every stream of the handle (wrapped ones too), under list_mu so none is destroyed meanwhile. */
static zo_status cuda_synchronize(zo_device_t *dev) {
  zo_status first = ZO_OK;
  char msg[1024] = "";
  pthread_mutex_lock(&dev->list_mu);
  for (zo_stream_t *it = dev->streams; it; it = it->next) {
    zo_status st = cuda_stream_synchronize(it);
    if (st != ZO_OK && first == ZO_OK) {
      first = st;
      snprintf(msg, sizeof msg, "%s", zo_last_error());
    }
  }
  pthread_mutex_unlock(&dev->list_mu);
  return first == ZO_OK ? ZO_OK : zo_error_set(first, "%s", msg);
}

/* ------------------------------------------------------------ events */

static zo_status cuda_event_create(zo_device_t *dev, zo_event_t **out) {
  ZO_CHECK(use_device(dev->ordinal));
  cuda_event *ev = calloc(1, sizeof *ev);
  if (!ev) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_event_create: out of host memory");
  /* No timing: cheaper to record and query, and the only kind cudaStreamWaitEvent needs. */
  cudaError_t e = cudaEventCreateWithFlags(&ev->ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    free(ev);
    return cu_fail(e, dev->ordinal, "cudaEventCreateWithFlags(disable timing)");
  }
  *out = &ev->base;
  return ZO_OK;
}

/* CUDA releases an event still pending or waited on once the work completes. */
static void cuda_event_destroy(zo_event_t *e) {
  cuda_event *ev = (cuda_event *)e;
  int ordinal = e->dev->ordinal;
  if (use_device(ordinal) == ZO_OK) {
    cudaError_t err = cudaEventDestroy(ev->ev);
    if (err != cudaSuccess) {
      cu_fail(err, ordinal, "cudaEventDestroy");
      zo_warn("zo_event_destroy: %s", zo_last_error());
    }
  } else {
    zo_warn("zo_event_destroy: %s; the CUDA event leaks", zo_last_error());
  }
  free(ev);
}

static zo_status cuda_event_record(zo_event_t *e, zo_stream_t *st) {
  cuda_stream *s = (cuda_stream *)st;
  zo_status rc = use_device(st->dev->ordinal);
  if (rc != ZO_OK) return stream_fail(s, rc);
  cudaError_t err = cudaEventRecord(((cuda_event *)e)->ev, s->st);
  if (err != cudaSuccess)
    return stream_fail(s, cu_fail(err, st->dev->ordinal, "cudaEventRecord(stream %llu)",
                                  (unsigned long long)s->id));
  return ZO_OK;
}

/* A never-recorded event: cudaEventQuery and cudaEventSynchronize return cudaSuccess, as device.h wants. */
static zo_status cuda_event_query(zo_event_t *e, int *done) {
  *done = 1;
  ZO_CHECK(use_device(e->dev->ordinal));
  cudaError_t err = cudaEventQuery(((cuda_event *)e)->ev);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *done = 0;
    return ZO_OK;
  }
  if (err != cudaSuccess) return cu_fail(err, e->dev->ordinal, "cudaEventQuery");
  return ZO_OK;
}

static zo_status cuda_event_synchronize(zo_event_t *e) {
  ZO_CHECK(use_device(e->dev->ordinal));
  cudaError_t err = cudaEventSynchronize(((cuda_event *)e)->ev);
  if (err != cudaSuccess) return cu_fail(err, e->dev->ordinal, "cudaEventSynchronize");
  return ZO_OK;
}

/* Captures the event's current record at call time (CUDA semantics); @e may be of another GPU. */
static zo_status cuda_stream_wait_event(zo_stream_t *st, zo_event_t *e) {
  cuda_stream *s = (cuda_stream *)st;
  zo_status rc = use_device(st->dev->ordinal);
  if (rc != ZO_OK) return stream_fail(s, rc);
  cudaError_t err = cudaStreamWaitEvent(s->st, ((cuda_event *)e)->ev, 0);
  if (err != cudaSuccess)
    return stream_fail(s, cu_fail(err, st->dev->ordinal,
                                  "cudaStreamWaitEvent(stream %llu, event of cuda:%d)",
                                  (unsigned long long)s->id, e->dev->ordinal));
  return ZO_OK;
}

/* ------------------------------------------------------------ sync copy, link counters */

static zo_status cuda_memcpy_sync(zo_device_t *dev, void *dst, const void *src, size_t nbytes,
                                  zo_copy_kind kind) {
  if (kind == ZO_COPY_H2H) {
    memcpy(dst, src, nbytes);
    return ZO_OK;
  }
  cuda_dev *cd = dev->backend;
  ZO_CHECK(use_device(dev->ordinal));
  cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, cuda_kind(kind), cd->sync_stream);
  if (e != cudaSuccess)
    return cu_fail(e, dev->ordinal, "zo_memcpy: cudaMemcpyAsync(%s, %zu bytes, %p -> %p)",
                   zo_copy_kind_name(kind), nbytes, src, dst);
  count_link(dev, kind, nbytes);
  e = cudaStreamSynchronize(cd->sync_stream);
  if (e != cudaSuccess)
    return cu_fail(e, dev->ordinal, "zo_memcpy: cudaStreamSynchronize after a %s copy of %zu bytes",
                   zo_copy_kind_name(kind), nbytes);
  return ZO_OK;
}

static zo_status cuda_link_stats(const zo_device_t *dev, zo_link_stats *out) {
  cuda_dev *cd = dev->backend;
  pthread_mutex_lock(&cd->link_mu);
  out->h2d_bytes = cd->bytes[0];
  out->d2h_bytes = cd->bytes[1];
  out->h2d_copies = cd->copies[0];
  out->d2h_copies = cd->copies[1];
  pthread_mutex_unlock(&cd->link_mu);
  return ZO_OK; /* gbps, busy and stall stay 0: the link is real and not timed here */
}

/* What the runtime knows the byte at @p as: 1 device (or managed) memory of cuda:@ordinal; else 0 and @why. */
static int ptr_on_device(const void *p, int ordinal, char *why, size_t cap) {
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) { /* before CUDA 11, host memory it never saw is an error */
    (void)cudaGetLastError();
    snprintf(why, cap, "memory it does not know (cudaPointerGetAttributes: %s)",
             cudaGetErrorName(e));
    return 0;
  }
  if ((a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) && a.device == ordinal)
    return 1;
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
    snprintf(why, cap, "%s memory of cuda:%d",
             a.type == cudaMemoryTypeDevice ? "device" : "managed", a.device);
  else if (a.type == cudaMemoryTypeHost)
    snprintf(why, cap, "host memory (registered or pinned)");
  else
    snprintf(why, cap, "host memory");
  return 0;
}

/* A framework's device memory (torch's tensors): its first and last byte on this GPU. */
static int cuda_foreign_device_mem(zo_device_t *dev, const void *p, size_t nbytes, char *why,
                                   size_t cap) {
  if (use_device(dev->ordinal) != ZO_OK) {
    snprintf(why, cap, "nothing: %s", zo_last_error());
    return 0;
  }
  if (!ptr_on_device(p, dev->ordinal, why, cap)) return 0;
  char last[96];
  if (nbytes > 1 && !ptr_on_device((const char *)p + nbytes - 1, dev->ordinal, last, sizeof last)) {
    snprintf(why, cap, "its last byte is %s", last);
    return 0;
  }
  return 1;
}

static const zo_device_ops cuda_ops = {
    .backend = "cuda",
    .host_addressable = 0,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .destroy = cuda_destroy,
    .synchronize = cuda_synchronize,
    .stream_create = cuda_stream_create,
    .stream_wrap = cuda_stream_wrap,
    .stream_native = cuda_stream_native,
    .stream_destroy = cuda_stream_destroy,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .launch_host_func = cuda_launch_host_func,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .memcpy_sync = cuda_memcpy_sync,
    .set_link_gbps = NULL, /* device.c: ZO_ERR_UNSUPPORTED */
    .link_stats = cuda_link_stats,
    .mem_backend_free = cuda_mem_backend_free,
    .foreign_device_mem = cuda_foreign_device_mem,
};

/* ------------------------------------------------------------ probe, init */

int zo_device_cuda_probe(char *why, size_t cap) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why)
      snprintf(why, cap, "cudaGetDeviceCount: %s (%s)%s", cudaGetErrorString(e),
               cudaGetErrorName(e),
               e == cudaErrorInsufficientDriver
                   ? "; no NVIDIA driver is loaded, or it is older than the CUDA runtime"
               : e == cudaErrorNoDevice ? "; check CUDA_VISIBLE_DEVICES"
                                        : "");
    return 0;
  }
  if (n <= 0 && why) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(why, cap, "cudaGetDeviceCount found 0 devices%s%s%s",
             vis ? " (CUDA_VISIBLE_DEVICES=\"" : "", vis ? vis : "", vis ? "\")" : "");
  }
  return n > 0 ? n : 0;
}

zo_status zo_device_cuda_init(zo_device_t *dev) {
  const int ord = dev->ordinal;
  char why[256];
  int n = zo_device_cuda_probe(why, sizeof why);
  if (n <= 0) return zo_error_set(ZO_ERR_UNSUPPORTED, "no CUDA device: %s", why);
  if (ord >= n) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "cuda:%d: only %d CUDA device%s visible (ordinals 0..%d)%s%s%s", ord, n,
                        n == 1 ? " is" : "s are", n - 1, vis ? "; CUDA_VISIBLE_DEVICES=\"" : "",
                        vis ? vis : "", vis ? "\"" : "");
  }
  ZO_CHECK(use_device(ord));
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, ord);
  if (e != cudaSuccess) return cu_fail(e, ord, "cudaGetDeviceProperties(%d)", ord);

  cuda_dev *cd = calloc(1, sizeof *cd);
  if (!cd) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
  int rc = pthread_mutex_init(&cd->link_mu, NULL);
  if (rc) {
    free(cd);
    return zo_error_set(ZO_ERR_SYSTEM, "cuda backend: pthread_mutex_init: %s", strerror(rc));
  }
  e = cudaStreamCreateWithFlags(&cd->sync_stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    pthread_mutex_destroy(&cd->link_mu);
    free(cd);
    return cu_fail(e, ord, "cudaStreamCreateWithFlags(private copy stream)");
  }

  char total[32], limit[48] = "";
  zo_format_bytes(total, sizeof total, (double)prop.totalGlobalMem);
  if (dev->limit == SIZE_MAX) {
    dev->limit = prop.totalGlobalMem; /* 0 = the whole GPU */
  } else {
    char lb[32];
    zo_format_bytes(lb, sizeof lb, (double)dev->limit);
    snprintf(limit, sizeof limit, ", limit %s", lb);
  }
  prop.name[sizeof prop.name - 1] = '\0';
  snprintf(dev->model, sizeof dev->model, "%s", prop.name);
  /* the NUMA node its PCI device hangs off, for binding host threads and pinned memory near it */
  char numa_path[96];
  snprintf(numa_path, sizeof numa_path, "/sys/bus/pci/devices/%04x:%02x:%02x.0/numa_node",
           (unsigned)prop.pciDomainID, (unsigned)prop.pciBusID, (unsigned)prop.pciDeviceID);
  FILE *nf = fopen(numa_path, "r");
  if (nf) {
    if (fscanf(nf, "%d", &dev->numa_node) != 1 || dev->numa_node < 0) dev->numa_node = -1;
    fclose(nf);
  }
  dev->cc_major = prop.major;
  dev->cc_minor = prop.minor;
  snprintf(dev->name, sizeof dev->name, "cuda:%d %s (sm_%d%d, %s%s)", ord, prop.name, prop.major,
           prop.minor, total, limit);
  dev->ops = &cuda_ops;
  dev->backend = cd;
  /* Pinned host pools of the process start registering their memory with CUDA. */
  zo_cuda_host_activate(ord);
  return ZO_OK;
}
