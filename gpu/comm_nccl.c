/*
 * comm_nccl.c - the `nccl` collectives backend: one GPU per rank, NCCL's
 * collectives (ncclAllGather, ncclReduceScatter, ncclAllReduce,
 * ncclBroadcast) queued on the communicator's own CUDA stream; a request is
 * a CUDA event recorded after the operation. Host buffers are staged
 * through device memory allocated on that stream (cudaMallocAsync), so the
 * engine's small host-side collectives (norms, flags) work unchanged. The
 * ncclUniqueId of rank 0 reaches the others through a bootstrap communicator
 * (MPI) or a TCP rendezvous on MASTER_ADDR:MASTER_PORT, as torchrun sets
 * them. Compiled whenever NCCL is found; run only where there is a GPU.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "base_internal.h"
#include "comm_internal.h"

typedef struct nccl_comm {
  ncclComm_t comm;
  cudaStream_t stream;
  zo_device_t *dev;   /* borrowed: the caller's CUDA device, which must outlive the communicator */
  int ordinal;
} nccl_comm;

/* What a request holds (in zo_comm_req_t.impl): the completion event, and host staging to copy back and free. */
typedef struct nccl_req {
  cudaEvent_t done;
  void *dev_tmp;      /* device staging of a host buffer (freed on the stream after the copy back) */
} nccl_req;
_Static_assert(sizeof(nccl_req) <= sizeof(((zo_comm_req_t *)0)->impl), "nccl_req must fit a request's impl");

static nccl_req *nreq(zo_comm_req_t *r) { return (nccl_req *)(void *)r->impl; }

/* Both clear the runtime's per-thread last error (cudaGetLastError), as gpu/device_cuda.c does: left there, our
 * failure (or NCCL's CUDA error behind ncclUnhandledCudaError) would fail the caller's next kernel launch check. */
static zo_status nccl_fail(ncclResult_t rc, const char *what) {
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_NCCL, "comm nccl: %s: %s", what, ncclGetErrorString(rc));
}
static zo_status cuda_fail(cudaError_t rc, const char *what) {
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_CUDA, "comm nccl: %s: %s", what, cudaGetErrorString(rc));
}
#define NCCL_TRY(call, what)                           \
  do {                                                 \
    ncclResult_t rc_ = (call);                         \
    if (rc_ != ncclSuccess) return nccl_fail(rc_, what); \
  } while (0)
#define CUDA_TRY(call, what)                           \
  do {                                                 \
    cudaError_t rc_ = (call);                          \
    if (rc_ != cudaSuccess) return cuda_fail(rc_, what); \
  } while (0)

/* ------------------------------------------------------------ rendezvous (no bootstrap communicator) */

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
    return zo_error_set(ZO_ERR_UNSUPPORTED, "comm nccl: %d ranks and no bootstrap communicator: set MASTER_ADDR and "
                        "MASTER_PORT (as torchrun does) or pass an mpi communicator", world);
  const char *tv = getenv("ZO_NCCL_RENDEZVOUS_TIMEOUT");
  const double timeout = tv && atof(tv) > 0 ? atof(tv) : 300.0, t0 = mono_s();
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = rank == 0 ? AI_PASSIVE : 0};
  struct addrinfo *ai = NULL;
  int gai = getaddrinfo(rank == 0 ? NULL : addr, port, &hints, &ai);
  if (gai != 0)
    return zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous %s:%s: %s", addr, port, gai_strerror(gai));
  zo_status st = ZO_OK;
  if (rank == 0) {
    int ls = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, world) != 0) {
      st = zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous: listening on port %s: %s", port, strerror(errno));
    }
    for (int got = 1; st == ZO_OK && got < world; got++) {
      struct pollfd pf = {.fd = ls, .events = POLLIN};
      const int left_ms = (int)((timeout - (mono_s() - t0)) * 1e3);
      if (left_ms <= 0 || poll(&pf, 1, left_ms) <= 0) {
        st = zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous: %d of %d ranks connected to port %s within %.0f s "
                          "(ZO_NCCL_RENDEZVOUS_TIMEOUT)", got - 1, world - 1, port, timeout);
        break;
      }
      int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
      if (fd < 0 || write_all(fd, id, sizeof *id) != 0)
        st = zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous: sending the NCCL id: %s", strerror(errno));
      if (fd >= 0) close(fd);
    }
    if (ls >= 0) close(ls);
  } else {
    for (;;) {
      int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        if (read_all(fd, id, sizeof *id) != 0)
          st = zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous: reading the NCCL id from %s:%s: %s", addr, port,
                            strerror(errno));
        close(fd);
        break;
      }
      if (fd >= 0) close(fd);
      if (mono_s() - t0 > timeout) {
        st = zo_error_set(ZO_ERR_SYSTEM, "comm nccl: rendezvous: rank 0 at %s:%s did not answer within %.0f s "
                          "(ZO_NCCL_RENDEZVOUS_TIMEOUT)", addr, port, timeout);
        break;
      }
      usleep(100000);
    }
  }
  freeaddrinfo(ai);
  return st;
}

/* ------------------------------------------------------------ buffers */

/* Device pointer for @p (@n bytes): @p itself when it is device memory, else staged into *tmp (copied in when
 * @copy_in). */
static zo_status dev_ptr(nccl_comm *m, const void *p, size_t n, int copy_in, void **tmp, void **out) {
  *out = NULL; /* set on every path that returns ZO_OK; NULL otherwise (gcc cannot see through CUDA_TRY) */
  struct cudaPointerAttributes at;
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e == cudaSuccess && (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged)) {
    *out = (void *)p;
    return ZO_OK;
  }
  (void)cudaGetLastError(); /* an unregistered host pointer may leave an error behind on old runtimes */
  CUDA_TRY(cudaMallocAsync(tmp, n, m->stream), "cudaMallocAsync (staging a host buffer)");
  if (copy_in) CUDA_TRY(cudaMemcpyAsync(*tmp, p, n, cudaMemcpyHostToDevice, m->stream), "cudaMemcpyAsync");
  *out = *tmp;
  return ZO_OK;
}

/* After the operation: a staged result (@n bytes at @src) back to host @host, the staging @tmp freed; then the
 * completion event. */
static zo_status finish(nccl_comm *m, zo_comm_req_t *r, void *host, const void *src, size_t n, void *tmp) {
  if (tmp) {
    CUDA_TRY(cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, m->stream), "cudaMemcpyAsync");
    CUDA_TRY(cudaFreeAsync(tmp, m->stream), "cudaFreeAsync");
  }
  CUDA_TRY(cudaEventCreateWithFlags(&nreq(r)->done, cudaEventDisableTiming), "cudaEventCreate");
  CUDA_TRY(cudaEventRecord(nreq(r)->done, m->stream), "cudaEventRecord");
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

static zo_status set_dev(const nccl_comm *m) {
  CUDA_TRY(cudaSetDevice(m->ordinal), "cudaSetDevice");
  return ZO_OK;
}

static zo_status nc_all_gather(zo_comm_t *c, const void *send, void *recv, size_t nbytes, zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(set_dev(m));
  const size_t total = nbytes * (size_t)c->size;
  void *tmp = NULL, *d_recv;
  ZO_CHECK(dev_ptr(m, recv, total, 0, &tmp, &d_recv));
  const int in_place = send == (const char *)recv + (size_t)c->rank * nbytes;
  const void *d_send = (char *)d_recv + (size_t)c->rank * nbytes;
  if (tmp) { /* staged: this rank's block into place */
    CUDA_TRY(cudaMemcpyAsync((void *)d_send, send, nbytes, cudaMemcpyHostToDevice, m->stream), "cudaMemcpyAsync");
  } else if (!in_place) {
    void *t2 = NULL, *ds;
    ZO_CHECK(dev_ptr(m, send, nbytes, 1, &t2, &ds));
    d_send = ds;
    NCCL_TRY(ncclAllGather(d_send, d_recv, nbytes, ncclUint8, m->comm, m->stream), "ncclAllGather");
    if (t2) CUDA_TRY(cudaFreeAsync(t2, m->stream), "cudaFreeAsync");
    return finish(m, r, NULL, NULL, 0, NULL);
  }
  NCCL_TRY(ncclAllGather(d_send, d_recv, nbytes, ncclUint8, m->comm, m->stream), "ncclAllGather");
  return finish(m, r, recv, tmp, total, tmp);
}

static zo_status nc_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n, zo_red_type t,
                                   zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(set_dev(m));
  const size_t esz = red_size(t), total = recv_n * esz * (size_t)c->size;
  void *tmp = NULL, *d_send;
  ZO_CHECK(dev_ptr(m, send, total, 1, &tmp, &d_send));
  const int in_place = recv == (const char *)send + (size_t)c->rank * recv_n * esz;
  void *d_recv = (char *)d_send + (size_t)c->rank * recv_n * esz, *t2 = NULL;
  if (!in_place) ZO_CHECK(dev_ptr(m, recv, recv_n * esz, 0, &t2, &d_recv));
  NCCL_TRY(ncclReduceScatter(d_send, d_recv, recv_n, nccl_type(t), ncclSum, m->comm, m->stream), "ncclReduceScatter");
  if (in_place) return finish(m, r, recv, d_recv, recv_n * esz, tmp); /* staged: the result lies inside tmp */
  if (tmp) CUDA_TRY(cudaFreeAsync(tmp, m->stream), "cudaFreeAsync");
  return finish(m, r, recv, t2, recv_n * esz, t2);
}

static zo_status nc_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_red_type t, zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(set_dev(m));
  const size_t bytes = n * red_size(t);
  void *tmp = NULL, *d;
  ZO_CHECK(dev_ptr(m, buf, bytes, 1, &tmp, &d));
  NCCL_TRY(ncclAllReduce(d, d, n, nccl_type(t), ncclSum, m->comm, m->stream), "ncclAllReduce");
  return finish(m, r, buf, tmp, bytes, tmp);
}

static zo_status nc_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root, zo_comm_req_t *r) {
  nccl_comm *m = c->backend;
  ZO_CHECK(set_dev(m));
  void *tmp = NULL, *d;
  ZO_CHECK(dev_ptr(m, buf, nbytes, c->rank == root, &tmp, &d));
  NCCL_TRY(ncclBroadcast(d, d, nbytes, ncclUint8, root, m->comm, m->stream), "ncclBroadcast");
  return finish(m, r, buf, tmp, nbytes, tmp);
}

static zo_status nc_barrier(zo_comm_t *c, zo_comm_req_t *r) {
  /* an all-reduce of one element of the communicator's scratch: complete once every rank has entered */
  nccl_comm *m = c->backend;
  ZO_CHECK(set_dev(m));
  void *d = NULL;
  CUDA_TRY(cudaMallocAsync(&d, sizeof(float), m->stream), "cudaMallocAsync");
  CUDA_TRY(cudaMemsetAsync(d, 0, sizeof(float), m->stream), "cudaMemsetAsync");
  NCCL_TRY(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, m->comm, m->stream), "ncclAllReduce");
  CUDA_TRY(cudaFreeAsync(d, m->stream), "cudaFreeAsync");
  return finish(m, r, NULL, NULL, 0, NULL);
}

/* A request whose event completed: NCCL's asynchronous errors (a peer that failed) are checked too. */
static zo_status done_check(zo_comm_req_t *r, cudaError_t e) {
  nccl_comm *m = r->c->backend;
  if (cudaEventDestroy(nreq(r)->done) != cudaSuccess) (void)cudaGetLastError();
  if (e != cudaSuccess) return cuda_fail(e, "waiting for a collective");
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(m->comm, &async) == ncclSuccess && async != ncclSuccess)
    return nccl_fail(async, "a collective failed");
  return ZO_OK;
}

static zo_status nc_wait(zo_comm_req_t *r) { return done_check(r, cudaEventSynchronize(nreq(r)->done)); }

static zo_status nc_test(zo_comm_req_t *r, int *done) {
  cudaError_t e = cudaEventQuery(nreq(r)->done);
  *done = e != cudaErrorNotReady;
  if (!*done) {
    (void)cudaGetLastError(); /* not an error: leave nothing for the caller's next cudaGetLastError() */
    return ZO_OK;
  }
  return done_check(r, e);
}

static zo_status nc_split(zo_comm_t *c, int color, int key, zo_comm_t **out);

static void nc_destroy(zo_comm_t *c) {
  nccl_comm *m = c->backend;
  cudaSetDevice(m->ordinal);
  cudaStreamSynchronize(m->stream);
  ncclCommDestroy(m->comm);
  zo_stream_destroy(c->stream); /* owns m->stream */
  (void)cudaGetLastError();    /* the unchecked calls above leave nothing behind */
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
  nccl_comm *m = st == ZO_OK ? calloc(1, sizeof *m) : NULL;
  zo_comm_t *c = m ? zo_comm_alloc(&nccl_ops, rank, size, m) : NULL;
  if (!c) {
    free(m);
    zo_stream_destroy(s);
    ncclCommDestroy(comm);
    return st != ZO_OK ? st : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm nccl: out of host memory");
  }
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
  ncclComm_t sub;
  NCCL_TRY(ncclCommSplit(m->comm, color, key, &sub, NULL), "ncclCommSplit");
  int rank = 0, size = 0;
  ncclCommUserRank(sub, &rank);
  ncclCommCount(sub, &size);
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
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) NCCL_TRY(ncclGetUniqueId(&id), "ncclGetUniqueId");
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
  NCCL_TRY(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
  return wrap(dev, comm, rank, world, out);
}
