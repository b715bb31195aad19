/*
 * fake_nccl.c - a stand-in libnccl.so.2 for running the nccl collectives
 * backend (comm/comm_nccl.c) on one rank against the stand-in libcudart
 * (fake_cudart.c), on machines without a GPU. Not NCCL: only nranks == 1,
 * where every collective is a copy (or nothing, in place) enqueued on the
 * caller's stream through cudaMemcpyAsync. Strict where NCCL is:
 *  - buffers must be device memory (cudaPointerGetAttributes), else
 *    ncclInvalidArgument, as NCCL's pointer check;
 *  - any use of an aborted or destroyed communicator aborts with a message
 *    naming the call (undefined behaviour in NCCL).
 * Faults on demand, for the backend's error paths:
 *  - FAKE_NCCL_HANG=1: every collective enqueues a host function that never
 *    returns until ncclCommAbort() of its communicator (a peer that never
 *    joins: the kernel spins until the abort);
 *  - FAKE_NCCL_ASYNC_ERROR=1: the same, and ncclCommGetAsyncError() reports
 *    ncclRemoteError once the collective has started (a peer that failed).
 * Only the calls zoffload makes are provided.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMAGIC 0x6e63636c
struct ncclComm {
  int magic;
  int rank, nranks, dev;
  int alive;              /* 0 once aborted or destroyed */
  const char *killed_by;  /* "ncclCommAbort" or "ncclCommDestroy" */
  ncclResult_t async_err; /* guarded by g_mu */
  int hung;               /* collectives parked in hang_fn (guarded by g_mu) */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

static void __attribute__((noreturn)) dead_comm(const char *call, const struct ncclComm *c) {
  fprintf(stderr, "fake_nccl: %s on a communicator %p after its %s\n", call, (const void *)c,
          c->killed_by);
  fflush(stderr);
  abort();
}
/* A live communicator, NULL for NULL or a stranger; aborts when used after abort/destroy (never freed: a harness). */
#define live(c) live_as(c, __func__)
static struct ncclComm *live_as(ncclComm_t c, const char *call) {
  if (!c || c->magic != CMAGIC) return NULL;
  if (!c->alive) dead_comm(call, c);
  return c;
}

static int env_on(const char *k) {
  const char *s = getenv(k);
  return s && *s && strcmp(s, "0") != 0;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
const char *ncclGetLastError(ncclComm_t c) {
  (void)c;
  return "";
}
ncclResult_t ncclGetVersion(int *v) {
  if (!v) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, "fake_nccl", 9);
  return ncclSuccess;
}

static ncclComm_t new_comm(int dev) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->magic = CMAGIC, c->rank = 0, c->nranks = 1, c->dev = dev, c->alive = 1;
  return c;
}
ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  (void)id;
  if (!out) return ncclInvalidArgument;
  if (nranks != 1 || rank != 0) {
    fprintf(stderr, "fake_nccl: ncclCommInitRank(nranks %d, rank %d): only one rank is simulated\n",
            nranks, rank);
    return ncclInvalidUsage;
  }
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return ncclUnhandledCudaError;
  *out = new_comm(dev);
  return *out ? ncclSuccess : ncclSystemError;
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out,
                           ncclConfig_t *config) {
  (void)key, (void)config;
  struct ncclComm *c = live(comm);
  if (!c || !out) return ncclInvalidArgument;
  if (color == NCCL_SPLIT_NOCOLOR) {
    *out = NULL;
    return ncclSuccess;
  }
  *out = new_comm(c->dev);
  return *out ? ncclSuccess : ncclSystemError;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  struct ncclComm *c = live(comm);
  if (!c || !rank) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  struct ncclComm *c = live(comm);
  if (!c || !count) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *dev) {
  struct ncclComm *c = live(comm);
  if (!c || !dev) return ncclInvalidArgument;
  *dev = c->dev;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
  struct ncclComm *c = live(comm);
  if (!c || !err) return ncclInvalidArgument;
  pthread_mutex_lock(&g_mu);
  *err = c->async_err;
  pthread_mutex_unlock(&g_mu);
  return ncclSuccess;
}
/* Ends every collective of @comm parked in hang_fn (NCCL's abort makes its kernels return), then frees it. */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  struct ncclComm *c = live(comm);
  if (!c) return comm ? ncclInvalidArgument : ncclSuccess;
  pthread_mutex_lock(&g_mu);
  c->alive = 0;
  c->killed_by = "ncclCommAbort";
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  struct ncclComm *c = live(comm);
  if (!c) return comm ? ncclInvalidArgument : ncclSuccess;
  pthread_mutex_lock(&g_mu);
  if (c->hung) {
    pthread_mutex_unlock(&g_mu);
    fprintf(stderr,
            "fake_nccl: ncclCommDestroy with a collective still running (abort it first)\n");
    fflush(stderr);
    abort();
  }
  c->alive = 0;
  c->killed_by = "ncclCommDestroy";
  pthread_mutex_unlock(&g_mu);
  return ncclSuccess;
}

/* ---------------- collectives */

/* A host function on the stream: the collective that never completes until its communicator is aborted. */
static void hang_fn(void *arg) {
  struct ncclComm *c = arg;
  pthread_mutex_lock(&g_mu);
  if (env_on("FAKE_NCCL_ASYNC_ERROR")) c->async_err = ncclRemoteError;
  while (c->alive) pthread_cond_wait(&g_cv, &g_mu);
  c->hung--;
  pthread_mutex_unlock(&g_mu);
}

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}
static int on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* One rank: recv <- send (@n bytes), unless in place; or the hang of FAKE_NCCL_HANG / FAKE_NCCL_ASYNC_ERROR. */
static ncclResult_t coll(const char *call, ncclComm_t comm, const void *send, void *recv,
                         size_t count, ncclDataType_t t, cudaStream_t stream) {
  struct ncclComm *c = live_as(comm, call);
  const size_t esz = type_size(t);
  if (!c || !esz || count > (size_t)-1 / esz) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if (!on_device(send) || !on_device(recv)) {
    fprintf(stderr, "fake_nccl: %s: %s buffer %p is not device memory\n", call,
            on_device(send) ? "recv" : "send", on_device(send) ? recv : (void *)send);
    return ncclInvalidArgument;
  }
  if (env_on("FAKE_NCCL_HANG") || env_on("FAKE_NCCL_ASYNC_ERROR")) {
    pthread_mutex_lock(&g_mu);
    c->hung++;
    pthread_mutex_unlock(&g_mu);
    if (cudaLaunchHostFunc(stream, hang_fn, c) != cudaSuccess) return ncclUnhandledCudaError;
    return ncclSuccess;
  }
  if (send == recv) return ncclSuccess;
  return cudaMemcpyAsync(recv, send, count * esz, cudaMemcpyDeviceToDevice, stream) == cudaSuccess
             ? ncclSuccess
             : ncclUnhandledCudaError;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)op;
  return coll("ncclAllReduce", comm, send, recv, count, t, stream);
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recv_count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)op;
  return coll("ncclReduceScatter", comm, send, recv, recv_count, t, stream);
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t send_count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclAllGather", comm, send, recv, send_count, t, stream);
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (root != 0) return ncclInvalidArgument;
  return coll("ncclBroadcast", comm, send, recv, count, t, stream);
}
