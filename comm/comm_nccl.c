/*
 * comm_nccl.c - the `nccl` collectives backend: one GPU per rank, NCCL's
 * collectives (ncclAllGather, ncclReduceScatter, ncclAllReduce,
 * ncclBroadcast) queued on the communicator's own CUDA stream; a request is
 * a CUDA event recorded after the operation. Host buffers are staged, in
 * chunks, through one bounded device buffer allocated with the communicator
 * (ZO_COMM_NCCL_STAGE_BYTES), so the engine's host-side collectives (norms,
 * flags, host-resident tensors) work unchanged and never allocate device
 * memory behind the arena. Completion is polled (cudaEventQuery and
 * ncclCommGetAsyncError) against the communicator's watchdog
 * (zo_comm_set_timeout); a failure or a timeout aborts the communicator. The
 * ncclUniqueId of rank 0 reaches the others through a bootstrap communicator
 * (MPI) or a TCP rendezvous on MASTER_ADDR:MASTER_PORT, as torchrun sets
 * them. Compiled whenever nccl.h is found; libnccl itself is opened at the
 * first communicator (below); run only where there is a GPU.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "base_internal.h"
#include "comm_internal.h"

/* ------------------------------------------------------------ libnccl, loaded at first use */

/*
 * libzoffload does not link libnccl: a DT_NEEDED libnccl.so.2 would be loaded with the library (at `import zoffload`
 * in Python), and a process that then loads a newer NCCL by the same soname, as torch's CUDA wheels do, gets ours
 * instead and fails on the symbols it lacks (seen with torch 2.15: "libtorch_cuda.so: undefined symbol:
 * ncclCommResume"). So the first communicator opens NCCL with dlopen(RTLD_LOCAL), in this order:
 *   1. a libnccl.so.2 the process has already loaded (torch's, when torch came first): RTLD_NOLOAD, so one NCCL
 *      serves both (NCCL keeps its ABI within a major version);
 *   2. $ZO_NCCL_LIBRARY, a file path;
 *   3. "libnccl.so.2" through the loader's search (LD_LIBRARY_PATH, this library's RUNPATH, ld.so.cache);
 *   4. the libnccl found at build time (ZO_NCCL_LIBRARY_PATH).
 * What remains: a process that uses the nccl backend before it loads torch still holds our libnccl.so.2 when
 * torch's libraries ask for theirs (load torch first, as every training script does).
 */
typedef struct nccl_api {
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t *,
                            ncclConfig_t *); /* NCCL >= 2.18; may be NULL */
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*CommCount)(const ncclComm_t, int *);
  ncclResult_t (*CommUserRank)(const ncclComm_t, int *);
  const char *(*GetErrorString)(ncclResult_t);
  ncclResult_t (*GetVersion)(int *);
  ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
} nccl_api;

static nccl_api N;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static char nccl_load_err[768]; /* empty once loaded */

#ifndef ZO_NCCL_LIBRARY_PATH
#define ZO_NCCL_LIBRARY_PATH ""
#endif

static void nccl_load_once(void) {
  const char *env = getenv("ZO_NCCL_LIBRARY");
  const char *tries[4] = {"libnccl.so.2", env && *env ? env : NULL, "libnccl.so.2",
                          ZO_NCCL_LIBRARY_PATH};
  void *h = NULL;
  const char *picked = NULL;
  size_t off = 0;
  for (int i = 0; i < 4 && !h; i++) {
    if (!tries[i] || !*tries[i]) continue;
    h = dlopen(tries[i], RTLD_LAZY | RTLD_LOCAL | (i == 0 ? RTLD_NOLOAD : 0));
    if (h) {
      picked = tries[i];
    } else if (i > 0 && off < sizeof nccl_load_err) {
      const char *why = dlerror();
      off += (size_t)snprintf(nccl_load_err + off, sizeof nccl_load_err - off, "%s%s",
                              off ? "; " : "", why ? why : tries[i]);
    }
  }
  if (!h) return;
  struct {
    void **slot;
    const char *name;
    int optional;
  } syms[] = {
      {(void **)&N.GetUniqueId, "ncclGetUniqueId", 0},
      {(void **)&N.CommInitRank, "ncclCommInitRank", 0},
      {(void **)&N.CommSplit, "ncclCommSplit", 1},
      {(void **)&N.CommDestroy, "ncclCommDestroy", 0},
      {(void **)&N.CommAbort, "ncclCommAbort", 0},
      {(void **)&N.CommGetAsyncError, "ncclCommGetAsyncError", 0},
      {(void **)&N.CommCount, "ncclCommCount", 0},
      {(void **)&N.CommUserRank, "ncclCommUserRank", 0},
      {(void **)&N.GetErrorString, "ncclGetErrorString", 0},
      {(void **)&N.GetVersion, "ncclGetVersion", 0},
      {(void **)&N.AllGather, "ncclAllGather", 0},
      {(void **)&N.ReduceScatter, "ncclReduceScatter", 0},
      {(void **)&N.AllReduce, "ncclAllReduce", 0},
      {(void **)&N.Broadcast, "ncclBroadcast", 0},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (!*syms[i].slot && !syms[i].optional) {
      snprintf(nccl_load_err, sizeof nccl_load_err, "%s has no %s", picked, syms[i].name);
      memset(&N, 0, sizeof N);
      return; /* the handle stays open: harmless, and closing a library the process shares is not ours to do */
    }
  }
  nccl_load_err[0] = 0;
  int v = 0;
  if (N.GetVersion(&v) == ncclSuccess) zo_debug("comm nccl: NCCL %d from %s", v, picked);
}

/* NCCL's entry points in N, or ZO_ERR_UNSUPPORTED naming every place looked in. Thread-safe
 * (pthread_once). */
static zo_status nccl_load(void) {
  if (pthread_once(&nccl_once, nccl_load_once) != 0)
    return zo_error_set(ZO_ERR_UNSUPPORTED, "comm nccl: loading libnccl: pthread_once failed");
  if (N.AllReduce) return ZO_OK;
  return zo_error_set(ZO_ERR_UNSUPPORTED,
                      "comm nccl: cannot load NCCL: %s (set ZO_NCCL_LIBRARY to a libnccl.so.2, "
                      "or put its directory on LD_LIBRARY_PATH)",
                      nccl_load_err[0] ? nccl_load_err : "not found");
}

typedef struct nccl_comm {
  ncclComm_t comm;
  cudaStream_t stream;
  zo_device_t *dev; /* borrowed: the caller's CUDA device, which must outlive the communicator */
  int ordinal;
  void *stage; /* device, ZO_COMM_NCCL_STAGE_BYTES: host buffers pass through it, chunk by chunk */
  int aborted; /* ncclCommAbort ran (watchdog or asynchronous error): every later operation is refused */
  char why[256]; /* what aborted it, for those refusals */
} nccl_comm;

/* What a request holds (in zo_comm_req_t.impl): the completion event, and what the watchdog's
 * message names. */
typedef struct nccl_req {
  cudaEvent_t done;
  const char *what; /* "all-gather", ... */
  /* the message: bytes of the whole receive (all-gather) or send (reduce-scatter) buffer */
  size_t nbytes;
  double t_start; /* CLOCK_MONOTONIC seconds when it was queued: the watchdog counts from here */
} nccl_req;
_Static_assert(sizeof(nccl_req) <= sizeof(((zo_comm_req_t *)0)->impl),
               "nccl_req must fit a request's impl");

static nccl_req *nreq(zo_comm_req_t *r) { return (nccl_req *)(void *)r->impl; }

/* Both clear the runtime's per-thread last error (cudaGetLastError), as gpu/device_cuda.c does: left there, our
 * failure (or NCCL's CUDA error behind ncclUnhandledCudaError) would fail the caller's next kernel launch check. */
static zo_status nccl_fail(ncclResult_t rc, const char *what) {
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_NCCL, "comm nccl: %s: %s", what, N.GetErrorString(rc));
}
static zo_status cuda_fail(cudaError_t rc, const char *what) {
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_CUDA, "comm nccl: %s: %s", what, cudaGetErrorString(rc));
}
#define NCCL_TRY(call, what)                             \
  do {                                                   \
    ncclResult_t rc_ = (call);                           \
    if (rc_ != ncclSuccess) return nccl_fail(rc_, what); \
  } while (0)
#define CUDA_TRY(call, what)                             \
  do {                                                   \
    cudaError_t rc_ = (call);                            \
    if (rc_ != cudaSuccess) return cuda_fail(rc_, what); \
  } while (0)

/* ------------------------------------------------------------ rendezvous (no bootstrap
 * communicator) */

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int write_all(int fd, const void *p, size_t n) {
  for (size_t d = 0; d < n;) {
    ssize_t k = write(fd, (const char *)p + d, n - d);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    d += (size_t)k;
  }
  return 0;
}
static int read_all(int fd, void *p, size_t n) {
  for (size_t d = 0; d < n;) {
    ssize_t k = read(fd, (char *)p + d, n - d);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    d += (size_t)k;
  }
  return 0;
}

/*
 * Rank 0 listens on MASTER_PORT and sends @id to world - 1 connections; the
 * others connect to MASTER_ADDR:MASTER_PORT (retrying while rank 0 starts)
 * and read it. Bounded by ZO_NCCL_RENDEZVOUS_TIMEOUT seconds.
 */
static zo_status rendezvous(int rank, int world, ncclUniqueId *id) {
  const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  if (!addr || !port)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "comm nccl: %d ranks and no bootstrap communicator: set MASTER_ADDR and "
                        "MASTER_PORT (as torchrun does) or pass an mpi communicator",
                        world);
  const char *tv = getenv("ZO_NCCL_RENDEZVOUS_TIMEOUT");
  char *end = NULL;
  const double tset = tv && *tv ? strtod(tv, &end) : 300.0;
  if (tv && *tv && (!end || *end || !(tset >= 1.0 && tset <= 86400.0)))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "comm nccl: ZO_NCCL_RENDEZVOUS_TIMEOUT=%.40s: expected seconds in [1, "
                        "86400]",
                        tv);
  const double timeout = tset, t0 = mono_s();
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = rank == 0 ? AI_PASSIVE : 0};
  struct addrinfo *ai = NULL;
  int gai = getaddrinfo(rank == 0 ? NULL : addr, port, &hints, &ai);
  if (gai != 0)
    return zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous %s:%s: %s", addr, port,
                        gai_strerror(gai));
  zo_status st = ZO_OK;
  if (rank == 0) {
    int ls = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, world) != 0) {
      st = zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous: listening on port %s: %s", port,
                        strerror(errno));
    }
    for (int got = 1; st == ZO_OK && got < world; got++) {
      struct pollfd pf = {.fd = ls, .events = POLLIN};
      const int left_ms = (int)((timeout - (mono_s() - t0)) * 1e3);
      if (left_ms <= 0 || poll(&pf, 1, left_ms) <= 0) {
        st =
            zo_error_set(ZO_ERR_SYSTEM,
                         "comm nccl: rendezvous: %d of %d ranks connected to port %s within %.0f s "
                         "(ZO_NCCL_RENDEZVOUS_TIMEOUT)",
                         got - 1, world - 1, port, timeout);
        break;
      }
      int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
      if (fd < 0 || write_all(fd, id, sizeof *id) != 0)
        st = zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous: sending the NCCL id: %s",
                          strerror(errno));
      if (fd >= 0) close(fd);
    }
    if (ls >= 0) close(ls);
  } else {
    for (;;) {
      int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        if (read_all(fd, id, sizeof *id) != 0)
          st = zo_error_set(ZO_ERR_SYSTEM,
                            "comm nccl: rendezvous: reading the NCCL id from %s:%s: %s", addr, port,
                            strerror(errno));
        close(fd);
        break;
      }
      if (fd >= 0) close(fd);
      if (mono_s() - t0 > timeout) {
        st = zo_error_set(ZO_ERR_SYSTEM,
                          "comm nccl: rendezvous: rank 0 at %s:%s did not answer within %.0f s "
                          "(ZO_NCCL_RENDEZVOUS_TIMEOUT)",
                          addr, port, timeout);
        break;
      }
      usleep(100000);
    }
  }
  freeaddrinfo(ai);
  return st;
}

/* ------------------------------------------------------------ buffers */

/* 1 when @p is device (or managed) memory NCCL can use directly; host memory, pinned or not, is
 * staged. */
static int on_device(const void *p) {
  struct cudaPointerAttributes at;
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    (void)
        cudaGetLastError(); /* an unregistered host pointer may leave an error behind on old runtimes */
    return 0;
  }
  return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

/* A copy between any two of host and device memory: cudaMemcpyDefault (unified addressing) picks the direction,
 * so a send buffer that is device memory is never copied as if it were host memory. */
static zo_status copy(nccl_comm *m, void *dst, const void *src, size_t n) {
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, m->stream),
           "cudaMemcpyAsync (staging a host buffer)");
  return ZO_OK;
}

/* After the operation: the completion event, and what the watchdog names. */
static zo_status finish(nccl_comm *m, zo_comm_req_t *r, const char *what, size_t nbytes) {
  nccl_req *q = nreq(r);
  q->what = what, q->nbytes = nbytes, q->t_start = mono_s();
  CUDA_TRY(cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming), "cudaEventCreate");
  cudaError_t e = cudaEventRecord(q->done, m->stream);
  if (e != cudaSuccess) {
    (void)cudaEventDestroy(q->done);
    return cuda_fail(e, "cudaEventRecord");
  }
  return ZO_OK;
}

static ncclDataType_t nccl_type(zo_red_type t) {
  switch (t) {
    case ZO_RED_F64: return ncclFloat64;
    case ZO_RED_BF16: return ncclBfloat16;
    case ZO_RED_F16: return ncclFloat16;
    default: return ncclFloat32;
  }
}
static size_t red_size(zo_red_type t) { return t == ZO_RED_F64 ? 8 : t == ZO_RED_F32 ? 4 : 2; }

/* ------------------------------------------------------------ operations */

/* The device, and a communicator that has not been aborted. */
static zo_status ready(const nccl_comm *m, const char *what) {
  if (m->aborted)
    return zo_error_set(ZO_ERR_INVALID_USAGE,
                        "comm nccl: %s on a communicator that was aborted (%s); destroy it", what,
                        m->why);
  CUDA_TRY(cudaSetDevice(m->ordinal), "cudaSetDevice");
  return ZO_OK;
}

/*
 * Host buffers pass through m->stage (S = ZO_COMM_NCCL_STAGE_BYTES) in chunks, each an in-place collective on the
 * stage, all on the communicator's stream so that a chunk's copies in wait for the previous chunk's copies out:
 *   all-gather      chunk of k bytes per rank: own bytes into block `rank` of k, gather, W blocks out; k <= S / W
 *   reduce-scatter  chunk of k elements per rank: W blocks of k in, reduce-scatter, block `rank` out
 *   all-reduce, broadcast: k <= S bytes in, the operation, out.
 * A buffer that is device memory is used directly when every buffer of the operation is.
 */
static zo_status nc_all_gather(zo_comm_t *c, const void *send, void *recv, size_t nbytes,
                               zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(ready(m, "all-gather"));
  const size_t W = (size_t)c->size, R = (size_t)c->rank;
  size_t total;
  if (zo_size_mul(nbytes, W, &total))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "comm nccl: all-gather of %zu bytes from %zu ranks overflows", nbytes, W);
  if (on_device(recv) && on_device(send)) {
    NCCL_TRY(N.AllGather(send, recv, nbytes, ncclUint8, m->comm, m->stream), "ncclAllGather");
    return finish(m, r, "all-gather", total);
  }
  const size_t cs = ZO_COMM_NCCL_STAGE_BYTES / W;
  if (cs == 0)
    return zo_error_set(ZO_ERR_UNSUPPORTED, "comm nccl: %zu ranks: host-buffer staging too small",
                        W);
  char *st = m->stage;
  for (size_t off = 0; off < nbytes; off += cs) {
    const size_t k = nbytes - off < cs ? nbytes - off : cs;
    ZO_CHECK(copy(m, st + R * k, (const char *)send + off, k));
    NCCL_TRY(N.AllGather(st + R * k, st, k, ncclUint8, m->comm, m->stream), "ncclAllGather");
    for (size_t q = 0; q < W; q++)
      ZO_CHECK(copy(m, (char *)recv + q * nbytes + off, st + q * k, k));
  }
  return finish(m, r, "all-gather", total);
}

static zo_status nc_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                   zo_red_type t, zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(ready(m, "reduce-scatter"));
  const size_t W = (size_t)c->size, R = (size_t)c->rank, esz = red_size(t);
  size_t blk, total;
  if (zo_size_mul(recv_n, esz, &blk) || zo_size_mul(blk, W, &total))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "comm nccl: reduce-scatter of %zu elements to %zu ranks overflows", recv_n,
                        W);
  if (on_device(send) && on_device(recv)) {
    NCCL_TRY(N.ReduceScatter(send, recv, recv_n, nccl_type(t), ncclSum, m->comm, m->stream),
             "ncclReduceScatter");
    return finish(m, r, "reduce-scatter", total);
  }
  const size_t ce = ZO_COMM_NCCL_STAGE_BYTES / (W * esz);
  if (ce == 0)
    return zo_error_set(ZO_ERR_UNSUPPORTED, "comm nccl: %zu ranks: host-buffer staging too small",
                        W);
  char *st = m->stage;
  for (size_t off = 0; off < recv_n; off += ce) {
    const size_t k = recv_n - off < ce ? recv_n - off : ce, kb = k * esz;
    for (size_t q = 0; q < W; q++)
      ZO_CHECK(copy(m, st + q * kb, (const char *)send + q * blk + off * esz, kb));
    NCCL_TRY(N.ReduceScatter(st, st + R * kb, k, nccl_type(t), ncclSum, m->comm, m->stream),
             "ncclReduceScatter");
    ZO_CHECK(copy(m, (char *)recv + off * esz, st + R * kb,
                  kb)); /* in place: block R at off, read above */
  }
  return finish(m, r, "reduce-scatter", total);
}

static zo_status nc_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_red_type t, zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(ready(m, "all-reduce"));
  const size_t esz = red_size(t);
  size_t bytes;
  if (zo_size_mul(n, esz, &bytes))
    return zo_error_set(ZO_ERR_INVALID_ARG, "comm nccl: all-reduce of %zu elements overflows", n);
  if (on_device(buf)) {
    NCCL_TRY(N.AllReduce(buf, buf, n, nccl_type(t), ncclSum, m->comm, m->stream), "ncclAllReduce");
    return finish(m, r, "all-reduce", bytes);
  }
  const size_t ce = ZO_COMM_NCCL_STAGE_BYTES / esz;
  for (size_t off = 0; off < n; off += ce) {
    const size_t k = n - off < ce ? n - off : ce;
    char *h = (char *)buf + off * esz;
    ZO_CHECK(copy(m, m->stage, h, k * esz));
    NCCL_TRY(N.AllReduce(m->stage, m->stage, k, nccl_type(t), ncclSum, m->comm, m->stream),
             "ncclAllReduce");
    ZO_CHECK(copy(m, h, m->stage, k * esz));
  }
  return finish(m, r, "all-reduce", bytes);
}

static zo_status nc_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root, zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(ready(m, "broadcast"));
  if (on_device(buf)) {
    NCCL_TRY(N.Broadcast(buf, buf, nbytes, ncclUint8, root, m->comm, m->stream), "ncclBroadcast");
    return finish(m, r, "broadcast", nbytes);
  }
  for (size_t off = 0; off < nbytes; off += ZO_COMM_NCCL_STAGE_BYTES) {
    const size_t k =
        nbytes - off < ZO_COMM_NCCL_STAGE_BYTES ? nbytes - off : ZO_COMM_NCCL_STAGE_BYTES;
    char *h = (char *)buf + off;
    if (c->rank == root) ZO_CHECK(copy(m, m->stage, h, k));
    NCCL_TRY(N.Broadcast(m->stage, m->stage, k, ncclUint8, root, m->comm, m->stream),
             "ncclBroadcast");
    if (c->rank != root) ZO_CHECK(copy(m, h, m->stage, k));
  }
  return finish(m, r, "broadcast", nbytes);
}

static zo_status nc_barrier(zo_comm_t *c, zo_comm_req_t *r) {
  /* an all-reduce of one float of the staging buffer: complete once every rank has entered */
  nccl_comm *m = c->backend;
  ZO_CHECK(ready(m, "barrier"));
  CUDA_TRY(cudaMemsetAsync(m->stage, 0, sizeof(float), m->stream), "cudaMemsetAsync");
  NCCL_TRY(N.AllReduce(m->stage, m->stage, 1, ncclFloat32, ncclSum, m->comm, m->stream),
           "ncclAllReduce");
  return finish(m, r, "barrier", sizeof(float));
}

/* ------------------------------------------------------------ completion and the watchdog */

/* Abort the communicator (NCCL's kernels of it return, so its stream drains) and say why, naming
 * the request. */
static zo_status abort_comm(zo_comm_req_t *r, const char *why) {
  nccl_comm *m = r->c->backend;
  const nccl_req *q = nreq(r);
  if (!m->aborted) (void)N.CommAbort(m->comm);
  m->aborted = 1;
  snprintf(m->why, sizeof m->why, "%s of %zu bytes over %d rank%s: %s", q->what, q->nbytes,
           r->c->size, r->c->size == 1 ? "" : "s", why);
  if (cudaEventDestroy(nreq(r)->done) != cudaSuccess) (void)cudaGetLastError();
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_NCCL, "comm nccl: %s; the communicator was aborted (ncclCommAbort)",
                      m->why);
}

/*
 * One poll of @r: *done = 1 when it completed (ZO_OK) or failed (the error). A peer's failure
 * (ncclCommGetAsyncError) or a collective older than the communicator's timeout aborts the communicator.
 */
static zo_status poll_once(zo_comm_req_t *r, int *done) {
  nccl_comm *m = r->c->backend;
  nccl_req *q = nreq(r);
  *done = 1;
  if (m->aborted) { /* another request's failure aborted the communicator: this one never completes */
    if (cudaEventDestroy(q->done) != cudaSuccess) (void)cudaGetLastError();
    return zo_error_set(ZO_ERR_NCCL,
                        "comm nccl: %s of %zu bytes: the communicator was aborted (%s)", q->what,
                        q->nbytes, m->why);
  }
  ncclResult_t async = ncclSuccess;
  ncclResult_t ar = N.CommGetAsyncError(m->comm, &async);
  if (ar != ncclSuccess) async = ar;
  if (async != ncclSuccess && async != ncclInProgress) {
    char why[160];
    snprintf(why, sizeof why, "NCCL reported an asynchronous error: %s", N.GetErrorString(async));
    return abort_comm(r, why);
  }
  cudaError_t e = cudaEventQuery(q->done);
  if (e == cudaSuccess) {
    if (cudaEventDestroy(q->done) != cudaSuccess) (void)cudaGetLastError();
    return ZO_OK;
  }
  (void)
      cudaGetLastError(); /* cudaErrorNotReady (or the failure) is not left as the thread's last error */
  if (e != cudaErrorNotReady) {
    char why[160];
    snprintf(why, sizeof why, "waiting for it: %s", cudaGetErrorString(e));
    return abort_comm(r, why);
  }
  const double age = mono_s() - q->t_start, limit = r->c->timeout_s;
  if (age > limit) {
    char why[160];
    snprintf(why, sizeof why,
             "not complete after %.1f s (the timeout, zoffload.comm_timeout_s, is %g s)", age,
             limit);
    return abort_comm(r, why);
  }
  *done = 0;
  return ZO_OK;
}

/* Block: poll, spinning briefly, then sleeping 10 us doubling to 1 ms between polls (a collective that takes
 * longer than a few ms pays at most 1 ms of latency; the CPU stays free for the Adam pool). */
static zo_status nc_wait(zo_comm_req_t *r) {
  long sleep_ns = 0;
  for (int polls = 0;; polls++) {
    int done = 0;
    zo_status st = poll_once(r, &done);
    if (done) return st;
    if (polls < 64) continue;
    sleep_ns = sleep_ns ? (sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2) : 10000;
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
  }
}

static zo_status nc_test(zo_comm_req_t *r, int *done) { return poll_once(r, done); }

static zo_status nc_split(zo_comm_t *c, int color, int key, zo_comm_t **out);

static void nc_destroy(zo_comm_t *c) {
  nccl_comm *m = c->backend;
  cudaSetDevice(m->ordinal);
  cudaStreamSynchronize(m->stream); /* after an abort too: NCCL's aborted kernels have returned */
  if (!m->aborted) N.CommDestroy(m->comm); /* ncclCommAbort freed it */
  if (m->stage) cudaFree(m->stage);
  zo_stream_destroy(c->stream); /* owns m->stream */
  (void)cudaGetLastError();     /* the unchecked calls above leave nothing behind */
  free(m);
}

static const zo_comm_ops nccl_ops = {
    .name = "nccl",
    .native_16bit = 1,
    .destroy = nc_destroy,
    .split = nc_split,
    .all_gather = nc_all_gather,
    .reduce_scatter = nc_reduce_scatter,
    .all_reduce = nc_all_reduce,
    .broadcast = nc_broadcast,
    .barrier = nc_barrier,
    .wait = nc_wait,
    .test = nc_test,
};

/* Wrap an initialized ncclComm_t with a new stream on @dev. */
static zo_status wrap(zo_device_t *dev, ncclComm_t comm, int rank, int size, zo_comm_t **out) {
  zo_stream_t *s = NULL;
  zo_status st = zo_stream_create(dev, &s);
  void *stage = NULL;
  /* the staging of host buffers, bounded, taken now: before an engine's arena sizes itself */
  if (st == ZO_OK) {
    cudaError_t e = cudaSetDevice(zo_device_ordinal(dev));
    if (e == cudaSuccess) e = cudaMalloc(&stage, ZO_COMM_NCCL_STAGE_BYTES);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      stage = NULL;
      st = zo_error_set(
          e == cudaErrorMemoryAllocation ? ZO_ERR_OUT_OF_MEMORY : ZO_ERR_CUDA,
          "comm nccl: %zu bytes of device memory for staging host buffers (cudaMalloc): %s",
          (size_t)ZO_COMM_NCCL_STAGE_BYTES, cudaGetErrorString(e));
    }
  }
  nccl_comm *m = st == ZO_OK ? calloc(1, sizeof *m) : NULL;
  zo_comm_t *c = m ? zo_comm_alloc(&nccl_ops, rank, size, m) : NULL;
  if (!c) {
    free(m);
    if (stage && cudaFree(stage) != cudaSuccess) (void)cudaGetLastError();
    zo_stream_destroy(s);
    N.CommDestroy(comm);
    return st != ZO_OK ? st : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm nccl: out of host memory");
  }
  m->stage = stage;
  m->comm = comm;
  m->stream = (cudaStream_t)zo_stream_native(s);
  m->dev = dev;
  m->ordinal = zo_device_ordinal(dev);
  c->stream = s;
  *out = c;
  return ZO_OK;
}

/* The device of a split: the parent's, kept in the stream's device. */
static zo_status nc_split(zo_comm_t *c, int color, int key, zo_comm_t **out) {
  nccl_comm *m = c->backend;
  ZO_CHECK(ready(m, "split"));
  ncclComm_t sub;
  if (!N.CommSplit)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "comm nccl: split: this libnccl has no ncclCommSplit (NCCL 2.18 or later)");
  NCCL_TRY(N.CommSplit(m->comm, color, key, &sub, NULL), "ncclCommSplit");
  int rank = 0, size = 0;
  N.CommUserRank(sub, &rank);
  N.CommCount(sub, &size);
  return wrap(m->dev, sub, rank, size, out);
}

zo_status zo_comm_nccl_create(zo_device_t *dev, zo_comm_t *bootstrap, zo_comm_t **out) {
  int rank = 0, world = 1;
  if (bootstrap) {
    rank = zo_comm_rank(bootstrap), world = zo_comm_size(bootstrap);
  } else {
    zo_launch_info li;
    ZO_CHECK(zo_launch_info_get(&li));
    rank = li.rank, world = li.world_size;
  }
  ZO_CHECK(nccl_load());
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) NCCL_TRY(N.GetUniqueId(&id), "ncclGetUniqueId");
  if (world > 1) {
    if (bootstrap) {
      zo_status st = zo_comm_broadcast(bootstrap, &id, sizeof id, 0);
      if (st != ZO_OK) return zo_error_prefix(st, "comm nccl: handing out the NCCL id");
    } else {
      ZO_CHECK(rendezvous(rank, world, &id));
    }
  }
  CUDA_TRY(cudaSetDevice(zo_device_ordinal(dev)), "cudaSetDevice");
  ncclComm_t comm;
  NCCL_TRY(N.CommInitRank(&comm, world, id, rank), "ncclCommInitRank");
  return wrap(dev, comm, rank, world, out);
}
