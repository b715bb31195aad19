/*
 * comm_external.c - the `external` collectives backend: host buffers moved
 * by callbacks the caller supplies (zo_comm_external_ops, zoffload/comm.h),
 * e.g. the Python front's torch.distributed process groups under torchrun.
 * It turns the callbacks' results into statuses with the operation named;
 * the front (comm.c) checks arguments and stages 16-bit reductions in fp32
 * as it does for `mpi`.
 *
 * One transport of its own, for ranks on one host: a communicator made by
 * zo_comm_split() (the engine splits every communicator it is given) whose
 * ranks all share the host moves its data through a POSIX shared-memory
 * segment instead of the callbacks (gloo over loopback TCP moves well under
 * 1 GB/s on a small machine; a memcpy through shared memory several times
 * that). The callbacks still set it up (one all-gather of each rank's host
 * identity and the segment's name, one of whether it could map it) and
 * split it. ZO_COMM_EXTERNAL_SHM=0 in the environment of any rank keeps the
 * callbacks for everything.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base_internal.h"
#include "comm_internal.h"

_Static_assert(sizeof(void *) <= sizeof(((zo_comm_req_t *)0)->impl),
               "a handle must fit a request's impl");

struct ext_shm;

typedef struct ext_comm {
  zo_comm_external_ops ops;
  void *ctx;
  struct ext_shm *shm; /* the same-host transport, or NULL: the callbacks move the data */
} ext_comm;

static void **handle_of(zo_comm_req_t *r) { return (void **)(void *)r->impl; }

static const char *elem_name(zo_comm_elem t) { return t == ZO_COMM_ELEM_F64 ? "fp64" : "fp32"; }

/* A callback's return as a status, with @what and the callback's own text (ops.error) in the message. */
static zo_status ext_err(const ext_comm *x, int rc, const char *what) {
  if (rc == 0) return ZO_OK;
  zo_status st = rc > 0 && rc <= ZO_ERR_CORRUPT ? (zo_status)rc : ZO_ERR_SYSTEM;
  char msg[512] = "";
  if (x->ops.error) {
    x->ops.error(x->ctx, msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
  }
  return zo_error_set(st, "comm external: %s failed (callback returned %d)%s%s", what, rc,
                      msg[0] ? ": " : "", msg);
}

/* The start of every operation: finished at once when the callback gave no handle. */
static zo_status ext_started(const ext_comm *x, int rc, zo_comm_req_t *r, const char *what) {
  if (rc != 0) {
    *handle_of(r) = NULL;
    return ext_err(x, rc, what);
  }
  if (!*handle_of(r)) r->complete = 1;
  return ZO_OK;
}

/* ------------------------------------------------------------ same-host shared memory */

/*
 * The segment: a header line (rank 0's nonce), one control line per rank, then per rank two slots of
 * SHM_SLOT_BYTES. Every operation moves in chunks that every rank numbers alike (g, counted over the
 * communicator's life): a rank copies its part of chunk g into its slot g % 2 once every peer has finished chunk
 * g - 2 (done >= g - 2), publishes posted = g, waits until every peer's posted >= g, reads (or sums, in rank
 * order, so every rank gets the same bits) what it needs from the slots, and publishes done = g. Counters are
 * 32-bit futex words compared modulo 2^32; stores are release and loads acquire, so a slot's bytes are visible
 * before the counter that announces them. Operations run one at a time in the order they were started, by a
 * progress thread of the communicator's own, so that one completes while the caller computes, as gloo's worker
 * threads do, and those of two communicators never wait for each other (the engine starts its gradient
 * reductions and its parameter gathers on two, in orders that may differ between ranks); or by the caller's
 * thread when it waits for one and the progress thread has not started it (after SHM_HANDOFF_S the progress
 * thread takes it): the caller is on a core already, and every hand-over between threads costs a wake-up.
 * Waits spin for SHM_SPIN_S, then sleep on the futex. Measured on 2 cores, 2 ranks (the Python front's stage 3
 * on a small Llama): 346-381 ms a step against gloo's 553-602 when each rank's OpenMP threads fit its cores
 * (OMP_NUM_THREADS=1, or OMP_WAIT_POLICY=passive), but 1126 against 573 when 2 ranks x 2 OpenMP threads that spin
 * between parallel regions share the 2 cores: every wake-up then waits for a spinner's time slice. The zoffload
 * launcher sets OMP_NUM_THREADS to the cores a rank has, as torchrun does.
 */
enum { SHM_SLOT_BYTES = 2 << 20, SHM_LINE = 128, SHM_MAX_RANKS = 256 };
/* How long a wait for a peer spins before it sleeps on the futex, seconds (see shm_await). */
static const double SHM_SPIN_S = 2e-3;
/* How long an operation waits for its caller to run it before the progress thread does, seconds (shm_main). */
static const double SHM_HANDOFF_S = 1e-3;

typedef struct shm_ctl {
  _Atomic uint32_t posted; /* the last chunk this rank's slot holds */
  char pad0[60];
  _Atomic uint32_t done; /* the last chunk this rank has finished reading */
  int32_t pid;           /* to tell a peer that is gone from one that is slow */
  char pad1[56];
} shm_ctl;
_Static_assert(sizeof(shm_ctl) == SHM_LINE, "one control line");

typedef enum { SHM_AG, SHM_RS, SHM_AR, SHM_BC, SHM_BAR } shm_kind;

typedef struct shm_op {
  shm_kind kind;
  const char *send; /* AG, RS */
  char *recv;       /* AG, RS; AR and BC: the buffer */
  size_t n;         /* AG: bytes per rank; BC: bytes; RS: elements per rank; AR: elements */
  zo_comm_elem elem;
  int root;
  double t_start; /* now_s() when started */
  int done;       /* under ext_shm.mu */
  zo_status st;
  char err[256];
  struct shm_op *next;
} shm_op;

typedef struct ext_shm {
  char *base;
  size_t nbytes;
  int rank, size;
  uint32_t g; /* chunks started (the progress thread's) */
  zo_status
      failed; /* after a failure the ranks are out of step: every later operation fails (the thread's) */
  char why[256];
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* an operation queued, finished, or stop */
  shm_op *head, *tail; /* started and not finished, in order */
  int running; /* a thread runs head: the progress thread, or one waiting for an operation */
  int stop;
} ext_shm;

static size_t shm_ctl_bytes(int size) { return zo_round_up((size_t)(size + 1) * SHM_LINE, 4096); }
static uint64_t *shm_nonce(const ext_shm *s) { return (uint64_t *)(void *)s->base; }
static shm_ctl *ctl_of(const ext_shm *s, int q) {
  return (shm_ctl *)(void *)(s->base + (size_t)(q + 1) * SHM_LINE);
}
static char *slot_of(const ext_shm *s, int q, uint32_t g) {
  return s->base + shm_ctl_bytes(s->size) + ((size_t)q * 2 + (g & 1)) * SHM_SLOT_BYTES;
}

static void publish(_Atomic uint32_t *w, uint32_t g) {
  atomic_store_explicit(w, g, memory_order_release);
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0); /* not private: peers' */
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}


/* Wait until every peer's posted (@done: done) counter has reached @g: spins for SHM_SPIN_S (a peer on a core
 * answers within microseconds), then sleeps on the futex, checking every 100 ms that the peer still exists. */
static int shm_await(ext_shm *s, int done, uint32_t g, char *err, size_t cap) {
  for (int q = 0; q < s->size; q++) {
    if (q == s->rank) continue;
    _Atomic uint32_t *w = done ? &ctl_of(s, q)->done : &ctl_of(s, q)->posted;
    double spin_until = 0;
    for (unsigned spins = 0;; spins++) {
      const uint32_t v = atomic_load_explicit(w, memory_order_acquire);
      if ((int32_t)(v - g) >= 0) break;
      if (spins % 256 || (spin_until == 0 && (spin_until = now_s() + SHM_SPIN_S)) ||
          now_s() < spin_until) {
        spin_pause();
        continue;
      }
      const struct timespec ts = {0, 100 * 1000 * 1000};
      syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
      const pid_t pid = ctl_of(s, q)->pid;
      if (zo_pid_exited(pid)) {
        snprintf(err, cap, "rank %d (pid %d) is gone", q, (int)pid);
        return 1;
      }
    }
  }
  return 0;
}

/* out[i] = the sum over ranks, in rank order, of @n elements at byte @off of every rank's slot for chunk @g. */
static void shm_sum(const ext_shm *s, uint32_t g, size_t off, size_t n, zo_comm_elem e, void *out) {
  if (e == ZO_COMM_ELEM_F64) {
    double *o = out;
    memcpy(o, slot_of(s, 0, g) + off, n * sizeof *o);
    for (int q = 1; q < s->size; q++) {
      const double *x = (const double *)(const void *)(slot_of(s, q, g) + off);
      for (size_t i = 0; i < n; i++) o[i] += x[i];
    }
  } else {
    float *o = out;
    memcpy(o, slot_of(s, 0, g) + off, n * sizeof *o);
    for (int q = 1; q < s->size; q++) {
      const float *x = (const float *)(const void *)(slot_of(s, q, g) + off);
      for (size_t i = 0; i < n; i++) o[i] += x[i];
    }
  }
}

/* Run @op chunk by chunk (the progress thread). In place is allowed as for every backend: an all-gather's @send
 * a block of @recv, a reduce-scatter's @recv this rank's block of @send; a chunk only writes what it has read. */
static int shm_run(ext_shm *s, shm_op *op) {
  const int W = s->size, me = s->rank;
  const size_t esz = op->elem == ZO_COMM_ELEM_F64 ? 8 : 4;
  size_t per = SHM_SLOT_BYTES; /* units a chunk moves: bytes (AG, BC) or elements (RS, AR) */
  if (op->kind == SHM_RS) per = SHM_SLOT_BYTES / ((size_t)W * esz);
  if (op->kind == SHM_AR) per = SHM_SLOT_BYTES / esz;
  const size_t total = op->kind == SHM_BAR ? 0 : op->n;
  size_t at = 0;
  do {
    const size_t len = total - at < per ? total - at : per;
    const uint32_t g = ++s->g;
    char *mine = slot_of(s, me, g);
    if (shm_await(s, 1, g - 2, op->err, sizeof op->err)) return 1; /* slot g % 2 read by everyone */
    if (op->kind == SHM_AG)
      memcpy(mine, op->send + at, len);
    else if (op->kind == SHM_BC && me == op->root)
      memcpy(mine, op->recv + at, len);
    else if (op->kind == SHM_RS)
      for (int d = 0; d < W; d++)
        memcpy(mine + (size_t)d * len * esz, op->send + ((size_t)d * op->n + at) * esz, len * esz);
    else if (op->kind == SHM_AR)
      memcpy(mine, op->recv + at * esz, len * esz);
    publish(&ctl_of(s, me)->posted, g);
    if (shm_await(s, 0, g, op->err, sizeof op->err)) return 1;
    if (op->kind == SHM_AG)
      for (int q = 0; q < W; q++) memcpy(op->recv + (size_t)q * op->n + at, slot_of(s, q, g), len);
    else if (op->kind == SHM_BC && me != op->root)
      memcpy(op->recv + at, slot_of(s, op->root, g), len);
    else if (op->kind == SHM_RS)
      shm_sum(s, g, (size_t)me * len * esz, len, op->elem, op->recv + at * esz);
    else if (op->kind == SHM_AR)
      shm_sum(s, g, 0, len, op->elem, op->recv + at * esz);
    publish(&ctl_of(s, me)->done, g);
    at += len;
  } while (at < total);
  return 0;
}

/* Run the oldest queued operation (called with mu held and no operation running; returns with mu held). */
static void shm_run_head(ext_shm *s) {
  shm_op *op = s->head;
  s->running = 1;
  pthread_mutex_unlock(&s->mu);
  zo_status st = s->failed;
  if (st != ZO_OK) {
    snprintf(op->err, sizeof op->err, "an earlier operation failed: %.200s", s->why);
  } else if (shm_run(s, op)) {
    st = s->failed = ZO_ERR_SYSTEM;
    snprintf(s->why, sizeof s->why, "%s", op->err);
  }
  pthread_mutex_lock(&s->mu);
  s->head = op->next;
  if (!s->head) s->tail = NULL;
  op->st = st, op->done = 1;
  s->running = 0;
  pthread_cond_broadcast(&s->cv);
}

/* The progress thread: runs operations while the caller does something else. */
static void *shm_main(void *arg) {
  ext_shm *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while ((!s->head || s->running) && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (s->stop) break;
    /* an operation its caller waits for soon (a reduction without overlap_comm) is the caller's to run: one
     * hand-over between threads fewer, each of which may cost a time slice on a busy machine */
    const double due = s->head->t_start + SHM_HANDOFF_S;
    if (now_s() < due) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      const double wait = due - now_s() > 0 ? due - now_s() : 0;
      ts.tv_nsec += (long)(wait * 1e9);
      ts.tv_sec += ts.tv_nsec / 1000000000L, ts.tv_nsec %= 1000000000L;
      pthread_cond_timedwait(&s->cv, &s->mu, &ts);
      continue;
    }
    shm_run_head(s);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Queue @tmpl for the progress thread; its handle is the queued copy. Returns when queued. */
static zo_status shm_start(ext_shm *s, shm_op tmpl, zo_comm_req_t *r) {
  shm_op *op = malloc(sizeof *op);
  if (!op) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm external: out of host memory");
  *op = tmpl;
  op->next = NULL, op->done = 0, op->st = ZO_OK, op->err[0] = 0, op->t_start = now_s();
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  *handle_of(r) = op;
  return ZO_OK;
}

static zo_status shm_finish(ext_shm *s, zo_comm_req_t *r, int wait, int *done) {
  shm_op *op = *handle_of(r);
  pthread_mutex_lock(&s->mu);
  for (double spin_until = 0; wait && !op->done;) {
    if (s->head && !s->running) {
      shm_run_head(s); /* the caller's thread is scheduled already: it moves the data itself */
    } else if (spin_until == 0 ||
               now_s() < spin_until) { /* the progress thread runs it: spin, as shm_await */
      if (spin_until == 0) spin_until = now_s() + SHM_SPIN_S;
      pthread_mutex_unlock(&s->mu);
      for (int i = 0; i < 256; i++) spin_pause();
      pthread_mutex_lock(&s->mu);
    } else {
      pthread_cond_wait(&s->cv, &s->mu);
    }
  }
  *done = op->done;
  pthread_mutex_unlock(&s->mu);
  if (!*done) return ZO_OK;
  const zo_status st = op->st;
  static const char *const names[] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast",
                                      "barrier"};
  if (st != ZO_OK)
    zo_error_set(st, "comm external: %s over shared memory (rank %d of %d) failed: %s",
                 names[op->kind], s->rank, s->size, op->err);
  free(op);
  *handle_of(r) = NULL;
  return st;
}

static void shm_free(ext_shm *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->th, NULL);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  munmap(s->base, s->nbytes);
  free(s);
}

/* A callback all-gather, waited for. */
static int cb_all_gather(const ext_comm *x, const void *send, void *recv, size_t nbytes) {
  void *h = NULL;
  int rc = x->ops.all_gather(x->ctx, send, recv, nbytes, &h);
  if (rc == 0 && h) rc = x->ops.wait(x->ctx, h);
  return rc;
}

typedef struct shm_hello {
  char host[64];
  char boot[40]; /* /proc/sys/kernel/random/boot_id: containers may share a host name */
  int32_t on, pid;
  uint64_t
      nonce; /* rank 0's, written at the segment's start: a mapping of the same name elsewhere fails */
  char name[48];
} shm_hello;

/*
 * Give @x (rank @rank of @size, just split) the shared-memory transport when every rank is on this host and
 * none has ZO_COMM_EXTERNAL_SHM=0: rank 0 creates the segment (its pages reserved now, so a full /dev/shm is an
 * error here, not a SIGBUS later), all-gathers its name with every rank's host, the others map it, a second
 * all-gather says whether all could, and rank 0 unlinks the name (the mappings stay). Collective; every rank
 * reaches the same verdict. ZO_OK without the transport when it does not apply; an error only from a callback
 * or from starting the progress thread.
 */
static zo_status shm_setup(ext_comm *x, int rank, int size) {
  if (size < 2 || size > SHM_MAX_RANKS) return ZO_OK;
  static _Atomic unsigned made;
  shm_hello me = {0}, *all = calloc((size_t)size, sizeof *all);
  int32_t ok = 1, *oks = calloc((size_t)size, sizeof *oks);
  if (!all || !oks) {
    free(all), free(oks);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm external: out of host memory");
  }
  gethostname(me.host, sizeof me.host - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(me.boot, sizeof me.boot, f)) me.boot[0] = 0;
    fclose(f);
  }
  const char *env = getenv("ZO_COMM_EXTERNAL_SHM");
  me.on = !(env && !strcmp(env, "0")), me.pid = (int32_t)getpid();
  const size_t nbytes = shm_ctl_bytes(size) + (size_t)size * 2 * SHM_SLOT_BYTES;
  ext_shm tmp = {.base = MAP_FAILED, .nbytes = nbytes, .rank = rank, .size = size};
  int fd = -1;
  if (rank == 0 && me.on) {
    snprintf(me.name, sizeof me.name, "/zo-ext-%d-%u", (int)getpid(), atomic_fetch_add(&made, 1));
    fd = shm_open(me.name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 && posix_fallocate(fd, 0, (off_t)nbytes) == 0)
      tmp.base = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (tmp.base == MAP_FAILED) {
      me.on = 0;
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      me.nonce = ((uint64_t)getpid() << 40) ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec;
      *shm_nonce(&tmp) = me.nonce;
    }
  }
  zo_status st = ZO_OK;
  int rc = cb_all_gather(x, &me, all, sizeof me);
  if (rc) {
    st = ext_err(x, rc, "all_gather of the shared-memory set-up");
  } else {
    for (int q = 0; q < size; q++)
      ok &= all[q].on && !strcmp(all[q].host, all[0].host) && !strcmp(all[q].boot, all[0].boot);
    if (ok && rank != 0) {
      fd = shm_open(all[0].name, O_RDWR, 0);
      if (fd >= 0) tmp.base = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ok = tmp.base != MAP_FAILED && *shm_nonce(&tmp) == all[0].nonce;
    }
    if (ok) ctl_of(&tmp, rank)->pid = me.pid;
    rc = cb_all_gather(x, &ok, oks, sizeof ok);
    if (rc) st = ext_err(x, rc, "all_gather of the shared-memory set-up");
    for (int q = 0; q < size; q++) ok &= oks[q];
  }
  if (rank == 0 && me.name[0]) shm_unlink(me.name); /* every rank has mapped it, or given up */
  if (fd >= 0) close(fd);
  free(all), free(oks);
  if (st != ZO_OK || !ok) {
    if (tmp.base != MAP_FAILED) munmap(tmp.base, nbytes);
    return st;
  }
  ext_shm *s = malloc(sizeof *s);
  if (!s) {
    munmap(tmp.base, nbytes);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm external: out of host memory");
  }
  *s = tmp;
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);
  const int err = pthread_create(&s->th, NULL, shm_main, s);
  if (err) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    munmap(s->base, nbytes);
    free(s);
    return zo_error_set(ZO_ERR_SYSTEM,
                        "comm external: starting the shared-memory progress thread: %s",
                        strerror(err));
  }
  x->shm = s;
  return ZO_OK;
}

static const zo_comm_ops ext_ops;

static zo_status wrap(const zo_comm_external_ops *ops, void *ctx, int rank, int size,
                      zo_comm_t **out) {
  ext_comm *x = calloc(1, sizeof *x);
  zo_comm_t *c = x ? zo_comm_alloc(&ext_ops, rank, size, x) : NULL;
  if (!c) {
    free(x);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm external: out of host memory");
  }
  x->ops = *ops, x->ctx = ctx;
  *out = c;
  return ZO_OK;
}

zo_status zo_comm_create_external(const zo_comm_external_ops *ops, void *ctx, int rank,
                                  int world_size, zo_comm_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_external: out is NULL");
  *out = NULL;
  if (!ops) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_external: ops is NULL");
  const struct {
    const char *name;
    int set;
  } need[] = {{"all_gather", !!ops->all_gather},
              {"reduce_scatter", !!ops->reduce_scatter},
              {"all_reduce", !!ops->all_reduce},
              {"broadcast", !!ops->broadcast},
              {"barrier", !!ops->barrier},
              {"wait", !!ops->wait},
              {"test", !!ops->test}};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!need[i].set)
      return zo_error_set(ZO_ERR_INVALID_ARG,
                          "zo_comm_create_external: ops->%s is NULL (every callback but split, "
                          "destroy and error is required)",
                          need[i].name);
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_comm_create_external: rank %d of world size %d; want "
                        "0 <= rank < world size",
                        rank, world_size);
  return wrap(ops, ctx, rank, world_size, out);
}

static void ext_destroy(zo_comm_t *c) {
  ext_comm *x = c->backend;
  shm_free(x->shm);
  if (x->ops.destroy) x->ops.destroy(x->ctx);
  free(x);
}

static zo_status ext_split(zo_comm_t *c, int color, int key, zo_comm_t **out) {
  ext_comm *x = c->backend;
  if (!x->ops.split)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "comm external: the caller's ops have no split (the engine duplicates "
                        "the communicator it is given: supply ops->split)");
  void *nctx = NULL;
  int nrank = -1, nsize = 0;
  ZO_CHECK(ext_err(x, x->ops.split(x->ctx, color, key, &nctx, &nrank, &nsize), "split"));
  if (nsize < 1 || nrank < 0 || nrank >= nsize) {
    if (x->ops.destroy) x->ops.destroy(nctx);
    return zo_error_set(ZO_ERR_INVALID_USAGE, "comm external: split gave rank %d of world size %d",
                        nrank, nsize);
  }
  zo_status st = wrap(&x->ops, nctx, nrank, nsize, out);
  if (st != ZO_OK) {
    if (x->ops.destroy) x->ops.destroy(nctx);
    return st;
  }
  st = shm_setup((*out)->backend, nrank, nsize);
  if (st != ZO_OK) {
    zo_comm_destroy(*out);
    *out = NULL;
  }
  return st;
}

static zo_status ext_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes,
                                zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  if (x->shm)
    return shm_start(x->shm, (shm_op){.kind = SHM_AG, .send = send, .recv = recv, .n = send_nbytes},
                     r);
  char what[96];
  snprintf(what, sizeof what, "all_gather of %zu bytes per rank", send_nbytes);
  return ext_started(x, x->ops.all_gather(x->ctx, send, recv, send_nbytes, handle_of(r)), r, what);
}

static zo_status ext_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                    zo_red_type t, zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  const zo_comm_elem e = t == ZO_RED_F64 ? ZO_COMM_ELEM_F64 : ZO_COMM_ELEM_F32;
  if (x->shm)
    return shm_start(x->shm,
                     (shm_op){.kind = SHM_RS, .send = send, .recv = recv, .n = recv_n, .elem = e},
                     r);
  char what[96];
  snprintf(what, sizeof what, "reduce_scatter of %zu %s elements per rank", recv_n, elem_name(e));
  return ext_started(x, x->ops.reduce_scatter(x->ctx, send, recv, recv_n, e, handle_of(r)), r,
                     what);
}

static zo_status ext_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_red_type t,
                                zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  const zo_comm_elem e = t == ZO_RED_F64 ? ZO_COMM_ELEM_F64 : ZO_COMM_ELEM_F32;
  if (x->shm) return shm_start(x->shm, (shm_op){.kind = SHM_AR, .recv = buf, .n = n, .elem = e}, r);
  char what[96];
  snprintf(what, sizeof what, "all_reduce of %zu %s elements", n, elem_name(e));
  return ext_started(x, x->ops.all_reduce(x->ctx, buf, n, e, handle_of(r)), r, what);
}

static zo_status ext_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root, zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  if (x->shm)
    return shm_start(x->shm, (shm_op){.kind = SHM_BC, .recv = buf, .n = nbytes, .root = root}, r);
  char what[96];
  snprintf(what, sizeof what, "broadcast of %zu bytes from rank %d", nbytes, root);
  return ext_started(x, x->ops.broadcast(x->ctx, buf, nbytes, root, handle_of(r)), r, what);
}

static zo_status ext_barrier(zo_comm_t *c, zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  if (x->shm) return shm_start(x->shm, (shm_op){.kind = SHM_BAR}, r);
  return ext_started(x, x->ops.barrier(x->ctx, handle_of(r)), r, "barrier");
}

static zo_status ext_wait(zo_comm_req_t *r) {
  ext_comm *x = r->c->backend;
  int done;
  if (x->shm) return shm_finish(x->shm, r, 1, &done);
  return ext_err(x, x->ops.wait(x->ctx, *handle_of(r)), "wait");
}

static zo_status ext_test(zo_comm_req_t *r, int *done) {
  ext_comm *x = r->c->backend;
  if (x->shm) return shm_finish(x->shm, r, 0, done);
  int d = 0;
  ZO_CHECK(ext_err(x, x->ops.test(x->ctx, *handle_of(r), &d), "test"));
  *done = d != 0;
  return ZO_OK;
}

static const zo_comm_ops ext_ops = {
    .name = "external",
    .destroy = ext_destroy,
    .split = ext_split,
    .all_gather = ext_all_gather,
    .reduce_scatter = ext_reduce_scatter,
    .all_reduce = ext_all_reduce,
    .broadcast = ext_broadcast,
    .barrier = ext_barrier,
    .wait = ext_wait,
    .test = ext_test,
};
