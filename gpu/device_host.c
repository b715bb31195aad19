/*
 * device_host.c - the `host` device backend: an emulated device whose memory
 * is aligned host memory, whose streams are worker threads running a FIFO of
 * ops, and whose events are (stream, sequence number) pairs. It keeps CUDA's
 * ordering semantics; it is not a timing model of a GPU. Optionally it
 * emulates the PCIe link: H2D/D2H copies then take at least bytes / gbps
 * (one lane per direction shared by all streams; see zoffload/device.h),
 * until a stop request (zo_request_stop()) ends the emulation.
 *
 * Sequence numbers. Each stream counts ops enqueued (`issued`) and ops
 * finished (`completed`); op k (1-based) is complete iff completed >= k,
 * because one worker runs them in order. An event record stores the pair
 * (stream, issued at record time), so "event complete" is completed >= target
 * and needs no op in the queue; a re-record just stores a new pair. A
 * never-recorded event has no stream and is always complete.
 *
 * Memory ordering. All counters are read and written under the owning
 * stream's mutex. The worker finishes an op's memcpy, then locks, bumps
 * `completed`, broadcasts done_cv and unlocks; any thread that then locks the
 * same mutex and sees the new count (synchronize, query, a wait op on another
 * stream) is ordered after the copy by the mutex's release (unlock) /
 * acquire (lock) pair, so it also sees the copied bytes. Cross-stream waits
 * chain the same way: worker A unlock -> worker B lock of A's mutex -> B's
 * later ops. Only the reference counts are atomics (acq_rel on release).
 *
 * Lifetime. Streams are reference counted: the handle holds one reference,
 * each event recorded on the stream and each queued wait op holds one, so a
 * stream's counters outlive zo_stream_destroy() for as long as anyone can
 * still ask whether its work is complete (always yes by then).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jemalloc/jemalloc.h> /* MALLOCX_* flags only: the functions come from jemalloc_rt.h */

#include "jemalloc_rt.h"

#include "device_internal.h"

/* ------------------------------------------------------------ link emulation */

/* Backend state of one host device: the emulated link, lane 0 = H2D, 1 = D2H. */
typedef struct host_dev {
  pthread_mutex_t link_mu;  /* guards everything below */
  double gbps;              /* 0 = unlimited */
  int64_t busy_until_ns[2]; /* CLOCK_MONOTONIC time the lane's last reserved slot ends */
  unsigned long long bytes[2], copies[2];
  int64_t busy_ns[2], stall_ns[2];
  unsigned arena;  /* jemalloc arena of the device memory; 0: none (plain posix_memalign) */
  const zo_je *je; /* jemalloc's API when arena != 0 */
} host_dev;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * Sleep until CLOCK_MONOTONIC time @t, in slices of ZO_STOP_POLL_MS; a stop
 * request (zo_request_stop(), zoffload/status.h) ends the sleep: the link
 * stops throttling. The copy itself is already done, so the bytes are the
 * same, only sooner, and every wait behind it (stream, event, device
 * synchronize) completes as the queued work does.
 */
static int sleep_until_ns(int64_t t) {
  while (!zo_stop_requested()) {
    int64_t now = mono_ns();
    if (now >= t) return 0;
    int64_t until = t - now > ZO_STOP_POLL_MS * 1000000LL ? now + ZO_STOP_POLL_MS * 1000000LL : t;
    struct timespec ts = {(time_t)(until / 1000000000LL), (long)(until % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
  }
  return 1; /* cut short by a stop request */
}

/*
 * The one place host bytes cross the emulated link. H2D and D2H copies
 * reserve a slot of nbytes / gbps on their direction's lane, starting when
 * the lane is free (FIFO in the order callers reach the mutex), memcpy, then
 * sleep until the slot ends. Other kinds are a plain memcpy.
 */
static void link_memcpy(zo_device_t *dev, void *dst, const void *src, size_t nbytes,
                        zo_copy_kind kind) {
  host_dev *hd = dev->backend;
  if (!hd || (kind != ZO_COPY_H2D && kind != ZO_COPY_D2H)) {
    memcpy(dst, src, nbytes);
    return;
  }
  int lane = kind == ZO_COPY_D2H;
  int64_t end = 0;
  pthread_mutex_lock(&hd->link_mu);
  hd->bytes[lane] += nbytes;
  hd->copies[lane]++;
  if (hd->gbps > 0 && !zo_stop_requested()) {
    int64_t now = mono_ns();
    int64_t start = hd->busy_until_ns[lane] > now ? hd->busy_until_ns[lane] : now;
    int64_t len = (int64_t)((double)nbytes / hd->gbps + 0.5); /* bytes / (GB/s) = ns */
    end = start + len;
    hd->busy_until_ns[lane] = end;
    hd->busy_ns[lane] += len;
    hd->stall_ns[lane] += start - now;
  }
  pthread_mutex_unlock(&hd->link_mu);
  memcpy(dst, src, nbytes);
  if (end && sleep_until_ns(end)) {
    /* Stopped: give the lane back, so that the slots reserved before the stop do not hold the copies that follow
     * zo_stop_reset() (the busy time stays counted as reserved). */
    pthread_mutex_lock(&hd->link_mu);
    const int64_t now = mono_ns();
    if (hd->busy_until_ns[lane] > now) hd->busy_until_ns[lane] = now;
    pthread_mutex_unlock(&hd->link_mu);
  }
}

static zo_status host_set_link_gbps(zo_device_t *dev, double gbps) {
  host_dev *hd = dev->backend;
  pthread_mutex_lock(&hd->link_mu);
  hd->gbps = gbps;
  pthread_mutex_unlock(&hd->link_mu);
  return ZO_OK;
}

static zo_status host_link_stats(const zo_device_t *dev, zo_link_stats *out) {
  host_dev *hd = dev->backend;
  pthread_mutex_lock(&hd->link_mu);
  out->gbps = hd->gbps;
  out->h2d_bytes = hd->bytes[0];
  out->d2h_bytes = hd->bytes[1];
  out->h2d_copies = hd->copies[0];
  out->d2h_copies = hd->copies[1];
  out->h2d_busy_s = (double)hd->busy_ns[0] * 1e-9;
  out->d2h_busy_s = (double)hd->busy_ns[1] * 1e-9;
  out->h2d_stall_s = (double)hd->stall_ns[0] * 1e-9;
  out->d2h_stall_s = (double)hd->stall_ns[1] * 1e-9;
  pthread_mutex_unlock(&hd->link_mu);
  return ZO_OK;
}

typedef struct host_stream host_stream;

typedef enum host_op_type { OP_COPY, OP_MEMSET, OP_HOST_FUNC, OP_WAIT } host_op_type;

typedef struct host_op {
  struct host_op *next;
  host_op_type type;
  uint64_t seq; /* 1-based position in the stream */
  union {
    struct {
      void *dst;
      const void *src;
      size_t nbytes;
      zo_copy_kind kind;
    } copy;
    struct {
      void *dptr;
      int value;
      size_t nbytes;
    } set;
    struct {
      void (*fn)(void *);
      void *arg;
    } func;
    struct {
      host_stream *t; /* holds a reference */
      uint64_t target;
    } wait;
  } u;
} host_op;

struct host_stream {
  zo_stream_t base; /* must be first */
  atomic_int refs;
  uint64_t id; /* for messages */
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* worker: ops arrived or stop */
  pthread_cond_t done_cv; /* waiters: completed advanced */
  host_op *head, *tail;   /* FIFO of ops not yet started */
  uint64_t issued, completed;
  int stop;
  zo_status err; /* sticky: the first failed op */
  char err_msg[768];
  pthread_t thread;
};

typedef struct host_event {
  zo_event_t base; /* must be first */
  pthread_mutex_t mu;
  host_stream *s;  /* NULL: never recorded; else holds a reference */
  uint64_t target; /* complete when s->completed >= target */
} host_event;

static atomic_uint_fast64_t g_stream_ids;

/* ------------------------------------------------------------ stream refs */

static void stream_retain(host_stream *s) {
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

static void stream_release(host_stream *s) {
  if (!s) return;
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_cond_destroy(&s->done_cv);
  pthread_cond_destroy(&s->work_cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* Block until s->completed >= target. */
static void stream_wait_seq(host_stream *s, uint64_t target) {
  pthread_mutex_lock(&s->mu);
  while (s->completed < target) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ worker */

static zo_status run_op(host_stream *s, host_op *op) {
  zo_device_t *dev = s->base.dev;
  switch (op->type) {
    case OP_COPY: {
      /* The pointers were checked at enqueue; check again in case memory was
       * freed while the copy sat in the queue (a use-after-free on a GPU). */
      zo_status st = zo_device_check_copy(dev, "stream op", op->u.copy.dst, op->u.copy.src,
                                          op->u.copy.nbytes, op->u.copy.kind);
      if (st != ZO_OK)
        return zo_error_prefix(ZO_ERR_INVALID_USAGE,
                               "stream %llu op %llu (%s copy of %zu bytes): memory was freed or "
                               "changed before the copy ran, copy skipped",
                               (unsigned long long)s->id, (unsigned long long)op->seq,
                               zo_copy_kind_name(op->u.copy.kind), op->u.copy.nbytes);
      link_memcpy(dev, op->u.copy.dst, op->u.copy.src, op->u.copy.nbytes, op->u.copy.kind);
      return ZO_OK;
    }
    case OP_MEMSET:
      if (zo_device_range_where(dev, op->u.set.dptr, op->u.set.nbytes) != ZO_RANGE_DEVICE)
        return zo_error_set(ZO_ERR_INVALID_USAGE,
                            "stream %llu op %llu (memset of %zu bytes at %p): memory was freed "
                            "before the memset ran, memset skipped",
                            (unsigned long long)s->id, (unsigned long long)op->seq,
                            op->u.set.nbytes, op->u.set.dptr);
      memset(op->u.set.dptr, op->u.set.value, op->u.set.nbytes);
      return ZO_OK;
    case OP_HOST_FUNC:
      zo_tl_host_func = 1; /* base_internal.h */
      op->u.func.fn(op->u.func.arg);
      zo_tl_host_func = 0;
      return ZO_OK;
    case OP_WAIT:
      stream_wait_seq(op->u.wait.t, op->u.wait.target);
      stream_release(op->u.wait.t);
      return ZO_OK;
  }
  return ZO_OK;
}

static void *stream_worker(void *arg) {
  host_stream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work_cv, &s->mu);
    if (!s->head) break; /* stop requested and nothing queued */
    host_op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);

    zo_status st = run_op(s, op);

    pthread_mutex_lock(&s->mu);
    if (st != ZO_OK && s->err == ZO_OK) {
      s->err = st;
      snprintf(s->err_msg, sizeof s->err_msg, "%s", zo_last_error());
    }
    s->completed = op->seq; /* release: published by the unlock below */
    pthread_cond_broadcast(&s->done_cv);
    free(op);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static zo_status enqueue(host_stream *s, host_op *op) {
  op->next = NULL;
  pthread_mutex_lock(&s->mu);
  op->seq = ++s->issued;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  return ZO_OK;
}

static host_op *op_new(host_op_type type, const char *what) {
  host_op *op = calloc(1, sizeof *op);
  if (!op)
    zo_error_set(ZO_ERR_OUT_OF_MEMORY, "%s: cannot allocate a stream op: out of host memory", what);
  else
    op->type = type;
  return op;
}

/* ------------------------------------------------------------ memory */

/*
 * Device memory comes from a jemalloc arena of its own that never returns
 * freed pages to the kernel (dirty and muzzy decay off): like memory on a GPU
 * it stays resident, so a tensor fetched into memory a released one held
 * does not page-fault on its first copy. Measured with zo-stepbench (40M
 * params, 8 layers, 30 ms/layer, params and state on cpu, 48 MiB limit): with
 * the default arena, jemalloc's purging made the next allocations fault
 * again, and one step in two waited 9-45 ms per layer for its
 * host-to-device copies (sys time up to 33%).
 */
static zo_status host_mem_alloc(zo_device_t *dev, size_t nbytes, void **dptr) {
  host_dev *hd = dev->backend;
  if (hd && hd->arena) {
    void *q = hd->je->mallocx(nbytes, MALLOCX_ALIGN(ZO_DEVICE_ALIGN) | MALLOCX_ARENA(hd->arena) |
                                          MALLOCX_TCACHE_NONE);
    if (!q)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                          "device memory: %s: host allocation of %zu bytes failed", dev->name,
                          nbytes);
    *dptr = q;
    return ZO_OK;
  }
  void *p = NULL;
  int rc = posix_memalign(&p, ZO_DEVICE_ALIGN, nbytes);
  if (rc)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "device memory: %s: host allocation of %zu bytes failed: %s", dev->name,
                        nbytes, strerror(rc));
  *dptr = p;
  return ZO_OK;
}

static void host_mem_free(zo_device_t *dev, void *dptr) {
  host_dev *hd = dev->backend;
  if (hd && hd->arena)
    hd->je->dallocx(dptr, MALLOCX_TCACHE_NONE);
  else
    free(dptr);
}

static void host_destroy(zo_device_t *dev) {
  host_dev *hd = dev->backend;
  if (!hd) return;
  if (hd->arena) { /* every allocation is freed by now: give the arena's memory back */
    char key[64];
    snprintf(key, sizeof key, "arena.%u.destroy", hd->arena);
    hd->je->mallctl(key, NULL, NULL, NULL, 0);
  }
  pthread_mutex_destroy(&hd->link_mu);
  free(hd);
  dev->backend = NULL;
}

/* ------------------------------------------------------------ streams */

static zo_status host_stream_create(zo_device_t *dev, zo_stream_t **out) {
  (void)dev;
  host_stream *s = calloc(1, sizeof *s);
  if (!s) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_stream_create: out of host memory");
  atomic_init(&s->refs, 1);
  s->id = atomic_fetch_add(&g_stream_ids, 1) + 1;
  s->base.dev = dev;
  int rc = pthread_mutex_init(&s->mu, NULL);
  if (rc) goto fail_mu;
  rc = pthread_cond_init(&s->work_cv, NULL);
  if (rc) goto fail_work;
  rc = pthread_cond_init(&s->done_cv, NULL);
  if (rc) goto fail_done;
  rc = pthread_create(&s->thread, NULL, stream_worker, s);
  if (rc) goto fail_thread;
  *out = &s->base;
  return ZO_OK;

fail_thread:
  pthread_cond_destroy(&s->done_cv);
fail_done:
  pthread_cond_destroy(&s->work_cv);
fail_work:
  pthread_mutex_destroy(&s->mu);
fail_mu:
  free(s);
  return zo_error_set(ZO_ERR_SYSTEM, "zo_stream_create: cannot start the stream's worker: %s",
                      strerror(rc));
}

static void host_stream_destroy(zo_stream_t *st) {
  host_stream *s = (host_stream *)st;
  pthread_mutex_lock(&s->mu);
  while (s->completed < s->issued) pthread_cond_wait(&s->done_cv, &s->mu);
  if (s->err != ZO_OK)
    zo_debug("zo_stream_destroy: stream %llu had failed: %s", (unsigned long long)s->id,
             s->err_msg);
  s->stop = 1;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  stream_release(s);
}

static zo_status host_memcpy_async(zo_stream_t *st, void *dst, const void *src, size_t nbytes,
                                   zo_copy_kind kind) {
  host_op *op = op_new(OP_COPY, "zo_memcpy_async");
  if (!op) return ZO_ERR_OUT_OF_MEMORY;
  op->u.copy.dst = dst;
  op->u.copy.src = src;
  op->u.copy.nbytes = nbytes;
  op->u.copy.kind = kind;
  return enqueue((host_stream *)st, op);
}

static zo_status host_memset_async(zo_stream_t *st, void *dptr, int value, size_t nbytes) {
  host_op *op = op_new(OP_MEMSET, "zo_memset_async");
  if (!op) return ZO_ERR_OUT_OF_MEMORY;
  op->u.set.dptr = dptr;
  op->u.set.value = value;
  op->u.set.nbytes = nbytes;
  return enqueue((host_stream *)st, op);
}

static zo_status host_launch_host_func(zo_stream_t *st, void (*fn)(void *), void *arg) {
  host_op *op = op_new(OP_HOST_FUNC, "zo_launch_host_func");
  if (!op) return ZO_ERR_OUT_OF_MEMORY;
  op->u.func.fn = fn;
  op->u.func.arg = arg;
  return enqueue((host_stream *)st, op);
}

static zo_status sticky(host_stream *s, zo_status err, const char *msg) {
  if (err == ZO_OK) return ZO_OK;
  (void)s; /* the stored message already names the stream and the op */
  return zo_error_set(err, "%s", msg);
}

static zo_status host_stream_synchronize(zo_stream_t *st) {
  host_stream *s = (host_stream *)st;
  char msg[sizeof s->err_msg];
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->issued;
  while (s->completed < target) pthread_cond_wait(&s->done_cv, &s->mu);
  zo_status err = s->err;
  if (err != ZO_OK) memcpy(msg, s->err_msg, sizeof msg);
  pthread_mutex_unlock(&s->mu);
  return sticky(s, err, msg);
}

static zo_status host_stream_query(zo_stream_t *st, int *idle) {
  host_stream *s = (host_stream *)st;
  char msg[sizeof s->err_msg];
  pthread_mutex_lock(&s->mu);
  *idle = s->completed == s->issued;
  zo_status err = s->err;
  if (err != ZO_OK) memcpy(msg, s->err_msg, sizeof msg);
  pthread_mutex_unlock(&s->mu);
  return sticky(s, err, msg);
}

static zo_status host_synchronize(zo_device_t *dev) {
  zo_status first = ZO_OK;
  char msg[1024] = "";
  host_stream **snap = NULL;
  uint64_t *targets = NULL;
  size_t n = 0;

  pthread_mutex_lock(&dev->list_mu);
  for (zo_stream_t *it = dev->streams; it; it = it->next) n++;
  if (n) {
    snap = malloc(n * sizeof *snap);
    targets = malloc(n * sizeof *targets);
  }
  if (n && (!snap || !targets)) {
    /* No memory for a snapshot: wait while holding the list lock instead. */
    for (zo_stream_t *it = dev->streams; it; it = it->next) {
      zo_status st = host_stream_synchronize(it);
      if (st != ZO_OK && first == ZO_OK) {
        first = st;
        snprintf(msg, sizeof msg, "%s", zo_last_error());
      }
    }
    pthread_mutex_unlock(&dev->list_mu);
    free(snap);
    free(targets);
    return first == ZO_OK ? ZO_OK : zo_error_set(first, "%s", msg);
  }
  size_t i = 0;
  for (zo_stream_t *it = dev->streams; it; it = it->next, i++) {
    host_stream *s = (host_stream *)it;
    stream_retain(s);
    snap[i] = s;
    pthread_mutex_lock(&s->mu);
    targets[i] = s->issued;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&dev->list_mu);

  for (i = 0; i < n; i++) {
    host_stream *s = snap[i];
    pthread_mutex_lock(&s->mu);
    while (s->completed < targets[i]) pthread_cond_wait(&s->done_cv, &s->mu);
    if (s->err != ZO_OK && first == ZO_OK) {
      first = s->err;
      snprintf(msg, sizeof msg, "%s", s->err_msg);
    }
    pthread_mutex_unlock(&s->mu);
    stream_release(s);
  }
  free(snap);
  free(targets);
  return first == ZO_OK ? ZO_OK : zo_error_set(first, "%s", msg);
}

/* ------------------------------------------------------------ events */

static zo_status host_event_create(zo_device_t *dev, zo_event_t **out) {
  (void)dev;
  host_event *ev = calloc(1, sizeof *ev);
  if (!ev) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_event_create: out of host memory");
  int rc = pthread_mutex_init(&ev->mu, NULL);
  if (rc) {
    free(ev);
    return zo_error_set(ZO_ERR_SYSTEM, "zo_event_create: pthread_mutex_init: %s", strerror(rc));
  }
  *out = &ev->base;
  return ZO_OK;
}

static void host_event_destroy(zo_event_t *e) {
  host_event *ev = (host_event *)e;
  stream_release(ev->s);
  pthread_mutex_destroy(&ev->mu);
  free(ev);
}

/* The event's current capture, with a reference on the stream (NULL: never recorded). */
static host_stream *event_snapshot(host_event *ev, uint64_t *target) {
  pthread_mutex_lock(&ev->mu);
  host_stream *s = ev->s;
  if (s) stream_retain(s);
  *target = ev->target;
  pthread_mutex_unlock(&ev->mu);
  return s;
}

static zo_status host_event_record(zo_event_t *e, zo_stream_t *st) {
  host_event *ev = (host_event *)e;
  host_stream *s = (host_stream *)st;
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->issued;
  pthread_mutex_unlock(&s->mu);
  stream_retain(s);
  pthread_mutex_lock(&ev->mu);
  host_stream *old = ev->s;
  ev->s = s;
  ev->target = target;
  pthread_mutex_unlock(&ev->mu);
  stream_release(old);
  return ZO_OK;
}

static zo_status host_event_query(zo_event_t *e, int *done) {
  uint64_t target;
  host_stream *s = event_snapshot((host_event *)e, &target);
  if (!s) {
    *done = 1;
    return ZO_OK;
  }
  pthread_mutex_lock(&s->mu);
  *done = s->completed >= target;
  pthread_mutex_unlock(&s->mu);
  stream_release(s);
  return ZO_OK;
}

static zo_status host_event_synchronize(zo_event_t *e) {
  uint64_t target;
  host_stream *s = event_snapshot((host_event *)e, &target);
  if (!s) return ZO_OK;
  stream_wait_seq(s, target);
  stream_release(s);
  return ZO_OK;
}

static zo_status host_stream_wait_event(zo_stream_t *st, zo_event_t *e) {
  uint64_t target;
  host_stream *t = event_snapshot((host_event *)e, &target);
  if (!t) return ZO_OK; /* never recorded: nothing to wait for */
  pthread_mutex_lock(&t->mu);
  int done = t->completed >= target;
  pthread_mutex_unlock(&t->mu);
  if (done) { /* already complete; the lock above orders later ops of st after it */
    stream_release(t);
    return ZO_OK;
  }
  host_op *op = op_new(OP_WAIT, "zo_stream_wait_event");
  if (!op) {
    stream_release(t);
    return ZO_ERR_OUT_OF_MEMORY;
  }
  op->u.wait.t = t; /* the op owns the reference */
  op->u.wait.target = target;
  return enqueue((host_stream *)st, op);
}

static zo_status host_memcpy_sync(zo_device_t *dev, void *dst, const void *src, size_t nbytes,
                                  zo_copy_kind kind) {
  link_memcpy(dev, dst, src, nbytes, kind);
  return ZO_OK;
}

static const zo_device_ops host_ops = {
    .backend = "host",
    .host_addressable = 1,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .destroy = host_destroy,
    .synchronize = host_synchronize,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .memcpy_async = host_memcpy_async,
    .memset_async = host_memset_async,
    .launch_host_func = host_launch_host_func,
    .stream_synchronize = host_stream_synchronize,
    .stream_query = host_stream_query,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_synchronize = host_event_synchronize,
    .stream_wait_event = host_stream_wait_event,
    .memcpy_sync = host_memcpy_sync,
    .set_link_gbps = host_set_link_gbps,
    .link_stats = host_link_stats,
};

zo_status zo_device_host_init(zo_device_t *dev) {
  host_dev *hd = calloc(1, sizeof *hd);
  if (!hd) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "host backend: out of host memory");
  int rc = pthread_mutex_init(&hd->link_mu, NULL);
  if (rc) {
    free(hd);
    return zo_error_set(ZO_ERR_SYSTEM, "host backend: pthread_mutex_init: %s", strerror(rc));
  }
  /* A resident arena for device memory; without one (no jemalloc, or it refuses) plain posix_memalign. */
  unsigned ind = 0;
  size_t sz = sizeof ind;
  ssize_t never = -1;
  char key[64];
  const zo_je *je = zo_je_get();
  if (je && je->mallctl("arenas.create", &ind, &sz, NULL, 0) == 0 && ind) {
    snprintf(key, sizeof key, "arena.%u.dirty_decay_ms", ind);
    int ok = je->mallctl(key, NULL, NULL, &never, sizeof never) == 0;
    snprintf(key, sizeof key, "arena.%u.muzzy_decay_ms", ind);
    ok = ok && je->mallctl(key, NULL, NULL, &never, sizeof never) == 0;
    if (ok) {
      hd->arena = ind;
      hd->je = je;
    }
  }
  dev->ops = &host_ops;
  dev->backend = hd;
  return ZO_OK;
}
