/*
 * fake_nccl.c - a stand-in libnccl.so.2 for running the nccl collectives
 * backend (comm/comm_nccl.c) on 1 to 8 ranks, each its own process, against
 * the stand-in libcudart (fake_cudart.c), on machines without a GPU. Not
 * NCCL; its rules:
 *  - a communicator is a POSIX shared-memory segment named from the
 *    ncclUniqueId (ncclGetUniqueId makes a random one; the caller hands it to
 *    the other ranks, as with NCCL: comm_nccl.c broadcasts it over MPI or a
 *    TCP rendezvous). ncclCommInitRank maps it and waits until every rank
 *    has; then rank 0 unlinks the name, so nothing is left in /dev/shm. One
 *    rank maps private memory instead. Two ranks on one device (cudaGetDevice
 *    at ncclCommInitRank) are refused with ncclInvalidUsage, as NCCL's
 *    "Duplicate GPU detected": give each rank its own stand-in GPU
 *    (FAKE_CUDA_DEVICES=N, rank -> device as the caller picks).
 *  - every collective is a kernel on the caller's stream (an emulated launch
 *    of the stand-in runtime, run on that stream's worker in stream order,
 *    never on the one host-function thread), working in chunks of
 *    FN_SLOT_BYTES per rank: it deposits this rank's input in its slot of
 *    the segment, waits at a barrier until every rank has deposited for this
 *    collective, writes its output from all slots, and waits at a second
 *    barrier before any slot is reused.
 *  - results are fixed: a sum is taken over ranks 0, 1, ..., W-1 in that
 *    order, fp32 in fp32, fp64 in fp64, bf16 and fp16 in fp32 rounded once to
 *    nearest even; so every rank gets the same bits, run after run. Only
 *    ncclSum on those four types; gathers and broadcasts on any type.
 *  - the ranks must issue the same collectives in the same order on a
 *    communicator (its sequence number, call, count, type and root are
 *    compared after the first barrier): a mismatch aborts naming both.
 *  - a collective waiting for a peer whose process is gone, or whose
 *    communicator was aborted (ncclCommAbort), returns, and
 *    ncclCommGetAsyncError reports ncclRemoteError from then on; a wait
 *    longer than FAKE_NCCL_TIMEOUT_S (default 300) aborts the process with a
 *    message naming the call, so a lost peer never hangs a test for good.
 *  - ncclCommSplit is collective over the parent: ranks of one colour form
 *    a communicator in (key, parent rank) order, its segment named from the
 *    parent's name, the split's number and the colour.
 * Strict where NCCL is:
 *  - buffers must be device memory (cudaPointerGetAttributes, both ends of
 *    the range), else ncclInvalidArgument, as NCCL's pointer check;
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
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "half.h" /* base/: the 16-bit conversions comm/comm.c stages its reductions with */

/* The stand-in runtime's kernel machinery (fake_cudart.c), which nvcc's host stubs reach on a real build. */
void __cudaRegisterFunction(void **h, const char *host_fun, char *device_fun,
                            const char *device_name, int limit, uint3 *tid, uint3 *bid, dim3 *bdim,
                            dim3 *gdim, int *wsize);
cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *fun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kh, dim3 grid, dim3 block, void **args, size_t shmem,
                               cudaStream_t h);
int fake_cuda_emulate(const char *sub, void (*fn)(dim3, dim3, void **, size_t), int n_args,
                      const size_t *arg_sizes);
void *fake_cuda_hostview(const void *p);

#define FN_MAXRANKS 8
#define FN_SLOT_BYTES ((size_t)2 << 20) /* per rank and chunk */
#define FN_HDR_BYTES ((size_t)4096)
#define FN_MAGIC 0x666e636cu
#define FN_ID_TAG "fake_nccl:"
#define CMAGIC 0x6e63636c

enum { FN_ALL_REDUCE, FN_REDUCE_SCATTER, FN_ALL_GATHER, FN_BROADCAST };
static const char *const fn_call_name[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                           "ncclBroadcast"};

/* What each rank says it runs, compared after the first barrier of every chunk. */
typedef struct fn_desc {
  uint64_t seq, count;
  int32_t call, dtype, root, pad;
} fn_desc;

/* The head of a segment (FN_HDR_BYTES), then one slot of FN_SLOT_BYTES per rank. Zero is a valid start. */
typedef struct fn_shm {
  uint32_t magic;              /* FN_MAGIC once the first rank mapped it */
  int32_t nranks;              /* set by the first rank; the others must agree */
  uint32_t bar_count, bar_gen; /* the collectives' barrier (kernels, in stream order) */
  uint32_t ctl_count, ctl_gen; /* the host calls' barrier (init, split) */
  uint32_t aborted;            /* 1 + the rank whose ncclCommAbort ended it, else 0 */
  int32_t pid[FN_MAXRANKS], dev[FN_MAXRANKS];
  int32_t color[FN_MAXRANKS], key[FN_MAXRANKS];
  fn_desc desc[FN_MAXRANKS];
} fn_shm;
_Static_assert(sizeof(fn_shm) <= FN_HDR_BYTES, "the segment's head must fit FN_HDR_BYTES");

struct ncclComm {
  int magic;
  int rank, nranks, dev;
  int alive;             /* 0 once aborted or destroyed (atomic) */
  const char *killed_by; /* "ncclCommAbort" or "ncclCommDestroy" */
  int async_err;         /* ncclResult_t (atomic) */
  int hung;              /* collectives parked in hang_fn (guarded by g_mu) */
  int inflight;          /* collectives enqueued and not finished (guarded by g_mu) */
  int running;           /* a collective kernel runs now (atomic): two at once is misuse */
  uint64_t seq;          /* collectives enqueued so far (caller's thread) */
  unsigned nsplit;       /* ncclCommSplit calls so far: names the children */
  char name[200];        /* the segment's name */
  fn_shm *shm;
  size_t map_bytes;
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
  if (!__atomic_load_n(&c->alive, __ATOMIC_ACQUIRE)) dead_comm(call, c);
  return c;
}

static int env_on(const char *k) {
  const char *s = getenv(k);
  return s && *s && strcmp(s, "0") != 0;
}
static double timeout_s(void) {
  const char *s = getenv("FAKE_NCCL_TIMEOUT_S");
  double t = s && *s ? strtod(s, NULL) : 300.0;
  return t > 0 ? t : 300.0;
}
static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
/* "fake_nccl:" and 32 random hex digits: the segment's name. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return ncclInvalidArgument;
  unsigned char r[16];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
    const uint64_t a = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(mono_s() * 1e9);
    for (size_t i = 0; i < sizeof r; i++)
      r[i] = (unsigned char)(a >> (8 * (i % 8))) ^ (unsigned char)i;
  }
  memset(id, 0, sizeof *id);
  int n = snprintf(id->internal, sizeof id->internal, "%s", FN_ID_TAG);
  for (size_t i = 0; i < sizeof r; i++)
    n += snprintf(id->internal + n, sizeof id->internal - (size_t)n, "%02x", r[i]);
  return ncclSuccess;
}

/* ---------------- waiting: futexes on the shared segment, bounded by the abort flags, the peers' lives, the timeout */

static void futex_wake_all(uint32_t *w) {
  syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
static void futex_wait_ms(uint32_t *w, uint32_t val, long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* The communicator ended under a waiting collective: by a peer's abort or exit, or by our own abort. */
static void remote_failed(struct ncclComm *c) {
  __atomic_store_n(&c->async_err, ncclRemoteError, __ATOMIC_RELEASE);
}

/* 1 when process @p has exited: gone, or a zombie its parent has not reaped yet (/proc/@p/stat state Z or X). The
 * library's zo_pid_exited() (base/tmpfile.c) is not reachable from this stand-in libnccl, which links no zoffload code. */
static int pid_gone(pid_t p) {
  if (kill(p, 0) != 0) return errno == ESRCH;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *rp = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* Wait until *@gen leaves @g: 0; -1 when the communicator ended (aborted here or by a peer, a peer gone). */
static int fn_wait(struct ncclComm *c, uint32_t *gen, uint32_t g, const char *call,
                   unsigned long long seq) {
  fn_shm *h = c->shm;
  const double t0 = mono_s(), limit = timeout_s();
  double next_check = t0 + 0.1;
  for (;;) {
    if (__atomic_load_n(gen, __ATOMIC_ACQUIRE) != g) return 0;
    if (!__atomic_load_n(&c->alive, __ATOMIC_ACQUIRE)) return -1;
    const uint32_t ab = __atomic_load_n(&h->aborted, __ATOMIC_ACQUIRE);
    if (ab) {
      if (ab != (uint32_t)c->rank + 1) remote_failed(c);
      return -1;
    }
    const double now = mono_s();
    if (now >= next_check) {
      next_check = now + 0.1;
      for (int q = 0; q < c->nranks; q++) {
        const pid_t p = (pid_t)__atomic_load_n(&h->pid[q], __ATOMIC_ACQUIRE);
        if (q != c->rank && p > 0 && pid_gone(p)) {
          fprintf(stderr, "fake_nccl: %s (collective %llu): rank %d (pid %d) is gone\n", call, seq,
                  q, (int)p);
          remote_failed(c);
          return -1;
        }
      }
      if (now - t0 > limit) {
        fprintf(stderr,
                "fake_nccl: %s (collective %llu) on rank %d of %d waited %.0f s for its peers "
                "(FAKE_NCCL_TIMEOUT_S)\n",
                call, seq, c->rank, c->nranks, now - t0);
        fflush(stderr);
        abort();
      }
    }
    futex_wait_ms(gen, g, 20);
  }
}

/* Every rank of @c at (*count, *gen): 0, or -1 when the communicator ended meanwhile. */
static int fn_barrier(struct ncclComm *c, uint32_t *count, uint32_t *gen, const char *call,
                      unsigned long long seq) {
  const uint32_t g = __atomic_load_n(gen, __ATOMIC_ACQUIRE);
  if (__atomic_fetch_add(count, 1, __ATOMIC_ACQ_REL) == (uint32_t)c->nranks - 1) {
    __atomic_store_n(count, 0,
                     __ATOMIC_RELAXED); /* before gen moves: nobody arrives again before */
    __atomic_fetch_add(gen, 1, __ATOMIC_RELEASE);
    futex_wake_all(gen);
    return 0;
  }
  return fn_wait(c, gen, g, call, seq);
}

/* ---------------- communicators */

/* Map the segment @name as @rank of @nranks on @dev and wait for every rank (@call names the caller). */
static ncclResult_t fn_join(ncclComm_t *out, const char *name, int nranks, int rank, int dev,
                            const char *call) {
  size_t bytes;
  if (__builtin_mul_overflow((size_t)nranks, FN_SLOT_BYTES, &bytes) ||
      __builtin_add_overflow(bytes, FN_HDR_BYTES, &bytes))
    return ncclInvalidArgument;
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->magic = CMAGIC, c->rank = rank, c->nranks = nranks, c->dev = dev, c->alive = 1;
  c->map_bytes = bytes;
  snprintf(c->name, sizeof c->name, "%s", name);
  void *p = MAP_FAILED;
  if (nranks == 1) {
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  } else {
    int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size != 0 && (size_t)st.st_size != bytes) {
      fprintf(stderr,
              "fake_nccl: %s(nranks %d, rank %d): the other ranks said another rank count\n", call,
              nranks, rank);
      close(fd);
      free(c);
      return ncclInvalidUsage;
    }
    if (fd >= 0 && (st.st_size != 0 || ftruncate(fd, (off_t)bytes) == 0))
      p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
  }
  if (p == MAP_FAILED) {
    fprintf(stderr, "fake_nccl: %s: mapping %zu bytes of shared memory %s: %s\n", call, bytes, name,
            strerror(errno));
    free(c);
    return ncclSystemError;
  }
  fn_shm *h = c->shm = p;
  uint32_t zero = 0;
  __atomic_compare_exchange_n(&h->magic, &zero, FN_MAGIC, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  int32_t z = 0;
  if (!__atomic_compare_exchange_n(&h->nranks, &z, nranks, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      z != nranks) {
    fprintf(stderr, "fake_nccl: %s(nranks %d, rank %d): the other ranks said nranks %d\n", call,
            nranks, rank, z);
    munmap(p, bytes);
    free(c);
    return ncclInvalidUsage;
  }
  int32_t none = 0;
  if (!__atomic_compare_exchange_n(&h->pid[rank], &none, (int32_t)getpid(), 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    fprintf(stderr, "fake_nccl: %s: rank %d joined twice (pids %d and %d)\n", call, rank, (int)none,
            (int)getpid());
    munmap(p, bytes);
    free(c);
    return ncclInvalidUsage;
  }
  __atomic_store_n(&h->dev[rank], dev, __ATOMIC_RELEASE);
  /* every rank has mapped it: the name can go */
  if (fn_barrier(c, &h->ctl_count, &h->ctl_gen, call, 0) != 0) {
    munmap(p, bytes);
    free(c);
    return ncclRemoteError;
  }
  if (nranks > 1 && rank == 0) shm_unlink(name);
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  if (!out) return ncclInvalidArgument;
  if (nranks < 1 || nranks > FN_MAXRANKS || rank < 0 || rank >= nranks) {
    fprintf(stderr,
            "fake_nccl: ncclCommInitRank(nranks %d, rank %d): 1 to %d ranks are simulated\n",
            nranks, rank, FN_MAXRANKS);
    return ncclInvalidArgument;
  }
  const size_t tag = sizeof FN_ID_TAG - 1;
  if (strncmp(id.internal, FN_ID_TAG, tag) != 0 ||
      strnlen(id.internal, sizeof id.internal) != tag + 32) {
    fprintf(stderr, "fake_nccl: ncclCommInitRank: the unique id is not one of ncclGetUniqueId's\n");
    return ncclInvalidArgument;
  }
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return ncclUnhandledCudaError;
  char name[200];
  snprintf(name, sizeof name, "/fake_nccl.%.32s", id.internal + tag);
  ncclResult_t r = fn_join(out, name, nranks, rank, dev, "ncclCommInitRank");
  if (r != ncclSuccess) return r;
  const fn_shm *h = (*out)->shm;
  for (int q = 0; q < nranks; q++)
    for (int p = 0; p < q; p++)
      if (h->dev[p] == h->dev[q]) {
        fprintf(stderr,
                "fake_nccl: ncclCommInitRank: ranks %d and %d are both on device %d (NCCL: "
                "Duplicate GPU detected); give each rank its own (FAKE_CUDA_DEVICES)\n",
                p, q, h->dev[q]);
        munmap((*out)->shm, (*out)->map_bytes);
        free(*out);
        *out = NULL;
        return ncclInvalidUsage;
      }
  return ncclSuccess;
}

/* Collective over the parent: every rank deposits (colour, key), then each colour's ranks join their own segment. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out,
                           ncclConfig_t *config) {
  (void)config;
  struct ncclComm *c = live(comm);
  if (!c || !out || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) return ncclInvalidArgument;
  fn_shm *h = c->shm;
  const unsigned n = c->nsplit++;
  h->color[c->rank] = color, h->key[c->rank] = key;
  if (fn_barrier(c, &h->ctl_count, &h->ctl_gen, "ncclCommSplit", n) != 0) return ncclRemoteError;
  int size = 0, rank = 0;
  for (int q = 0; q < c->nranks; q++) {
    if (h->color[q] != color) continue;
    size++;
    rank += h->key[q] < key || (h->key[q] == key && q < c->rank);
  }
  /* everyone has read the colours before the next split writes them */
  if (fn_barrier(c, &h->ctl_count, &h->ctl_gen, "ncclCommSplit", n) != 0) return ncclRemoteError;
  if (color == NCCL_SPLIT_NOCOLOR) {
    *out = NULL;
    return ncclSuccess;
  }
  char name[200];
  if ((size_t)snprintf(name, sizeof name, "%s.s%uc%d", c->name, n, color) >= sizeof name - 8)
    return ncclInternalError;
  return fn_join(out, name, size, rank, c->dev, "ncclCommSplit");
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
  *err = (ncclResult_t)__atomic_load_n(&c->async_err, __ATOMIC_ACQUIRE);
  return ncclSuccess;
}
/* Ends every collective of @comm (parked in hang_fn, or waiting for peers: NCCL's abort makes its kernels return),
 * and tells the peers, whose waiting collectives return with ncclRemoteError. The segment stays mapped (a harness). */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  struct ncclComm *c = live(comm);
  if (!c) return comm ? ncclInvalidArgument : ncclSuccess;
  pthread_mutex_lock(&g_mu);
  __atomic_store_n(&c->alive, 0, __ATOMIC_RELEASE);
  c->killed_by = "ncclCommAbort";
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  uint32_t zero = 0;
  __atomic_compare_exchange_n(&c->shm->aborted, &zero, (uint32_t)c->rank + 1, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  futex_wake_all(&c->shm->bar_gen);
  futex_wake_all(&c->shm->ctl_gen);
  return ncclSuccess;
}
/* Waits for this rank's collectives of @comm to finish, then unmaps it. Aborts when one can never finish. */
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
  while (c->inflight > 0) pthread_cond_wait(&g_cv, &g_mu);
  __atomic_store_n(&c->alive, 0, __ATOMIC_RELEASE);
  c->killed_by = "ncclCommDestroy";
  pthread_mutex_unlock(&g_mu);
  munmap(c->shm, c->map_bytes);
  c->shm = NULL;
  return ncclSuccess;
}

/* ---------------- element types */

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
static int summable(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat16;
}
/* out[i] = in[0][i] + in[1][i] + ... + in[W-1][i], in that order (see the top). */
static void fn_sum(void *out, const char *const *in, int W, size_t k, ncclDataType_t t) {
  for (size_t i = 0; i < k; i++) {
    if (t == ncclFloat64) {
      double s, x;
      memcpy(&s, in[0] + i * 8, 8);
      for (int q = 1; q < W; q++) memcpy(&x, in[q] + i * 8, 8), s += x;
      memcpy((char *)out + i * 8, &s, 8);
    } else if (t == ncclFloat32) {
      float s, x;
      memcpy(&s, in[0] + i * 4, 4);
      for (int q = 1; q < W; q++) memcpy(&x, in[q] + i * 4, 4), s += x;
      memcpy((char *)out + i * 4, &s, 4);
    } else {
      const int bf = t == ncclBfloat16;
      float s = 0;
      for (int q = 0; q < W; q++) {
        uint16_t b;
        memcpy(&b, in[q] + i * 2, 2);
        const float x = bf ? zo_bf16_to_f32(b) : zo_f16_to_f32(b);
        s = q ? s + x : x;
      }
      const uint16_t r = bf ? zo_f32_to_bf16(s) : zo_f32_to_f16(s);
      memcpy((char *)out + i * 2, &r, 2);
    }
  }
}

/* ---------------- collectives */

/* A host function on the stream: the collective that never completes until its communicator is aborted. */
static void hang_fn(void *arg) {
  struct ncclComm *c = arg;
  pthread_mutex_lock(&g_mu);
  if (env_on("FAKE_NCCL_ASYNC_ERROR")) remote_failed(c);
  while (__atomic_load_n(&c->alive, __ATOMIC_ACQUIRE)) pthread_cond_wait(&g_cv, &g_mu);
  c->hung--;
  pthread_mutex_unlock(&g_mu);
}

/* One collective as its kernel sees it: host views of the buffers (fake_cuda_hostview), element counts. */
typedef struct fn_job {
  struct ncclComm *c;
  int call;
  ncclDataType_t t;
  size_t esz;
  size_t count; /* all-reduce, broadcast: elements; reduce-scatter: received; all-gather: sent */
  int root;
  uint64_t seq;
  const char *send;
  char *recv;
} fn_job;

static void __attribute__((noreturn)) mismatch(const fn_job *j, int q, const fn_desc *d) {
  const fn_desc *m = &j->c->shm->desc[j->c->rank];
  fprintf(stderr,
          "fake_nccl: ranks disagree on collective %llu of a communicator: rank %d runs %s of %llu "
          "(type %d, root %d) and rank %d %s of %llu (type %d, root %d, its collective %llu)\n",
          (unsigned long long)j->seq, j->c->rank, fn_call_name[m->call],
          (unsigned long long)m->count, m->dtype, m->root, q,
          d->call >= 0 && d->call < 4 ? fn_call_name[d->call] : "?", (unsigned long long)d->count,
          d->dtype, d->root, (unsigned long long)d->seq);
  fflush(stderr);
  abort();
}

/* The kernel: chunk by chunk, deposit, barrier, compute from every rank's slot, barrier (see the top). */
static void fn_run(fn_job *j) {
  struct ncclComm *c = j->c;
  fn_shm *h = c->shm;
  const int W = c->nranks, R = c->rank;
  const char *call = fn_call_name[j->call];
  if (__atomic_exchange_n(&c->running, 1, __ATOMIC_ACQ_REL)) {
    fprintf(stderr, "fake_nccl: %s: two collectives of one communicator run at once\n", call);
    fflush(stderr);
    abort();
  }
  char *const base = (char *)h + FN_HDR_BYTES, *const mine = base + (size_t)R * FN_SLOT_BYTES;
  const size_t per = j->call == FN_REDUCE_SCATTER ? (size_t)W * j->esz : j->esz;
  const size_t cap = FN_SLOT_BYTES / per, n = j->count, es = j->esz;
  const char *in[FN_MAXRANKS];
  for (size_t off = 0; off < n; off += cap) {
    const size_t k = n - off < cap ? n - off : cap, kb = k * es;
    switch (j->call) {
      case FN_REDUCE_SCATTER:
        for (int q = 0; q < W; q++)
          memcpy(mine + (size_t)q * kb, j->send + ((size_t)q * n + off) * es, kb);
        break;
      case FN_BROADCAST:
        if (R == j->root) memcpy(mine, j->send + off * es, kb);
        break;
      default: memcpy(mine, j->send + off * es, kb);
    }
    h->desc[R] = (fn_desc){
        .seq = j->seq, .count = n, .call = j->call, .dtype = (int32_t)j->t, .root = j->root};
    if (fn_barrier(c, &h->bar_count, &h->bar_gen, call, (unsigned long long)j->seq) != 0) break;
    for (int q = 0; q < W; q++) {
      const fn_desc *d = &h->desc[q];
      if (d->seq != j->seq || d->count != n || d->call != j->call || d->dtype != (int32_t)j->t ||
          d->root != j->root)
        mismatch(j, q, d);
    }
    switch (j->call) {
      case FN_ALL_GATHER:
        for (int q = 0; q < W; q++)
          memcpy(j->recv + ((size_t)q * n + off) * es, base + (size_t)q * FN_SLOT_BYTES, kb);
        break;
      case FN_BROADCAST:
        memcpy(j->recv + off * es, base + (size_t)j->root * FN_SLOT_BYTES, kb);
        break;
      case FN_REDUCE_SCATTER:
        for (int q = 0; q < W; q++) in[q] = base + (size_t)q * FN_SLOT_BYTES + (size_t)R * kb;
        fn_sum(j->recv + off * es, in, W, k, j->t);
        break;
      default:
        for (int q = 0; q < W; q++) in[q] = base + (size_t)q * FN_SLOT_BYTES;
        fn_sum(j->recv + off * es, in, W, k, j->t);
    }
    if (fn_barrier(c, &h->bar_count, &h->bar_gen, call, (unsigned long long)j->seq) != 0) break;
  }
  __atomic_store_n(&c->running, 0, __ATOMIC_RELEASE);
  pthread_mutex_lock(&g_mu);
  c->inflight--;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  free(j);
}
static void fn_kernel_emu(dim3 grid, dim3 block, void **args, size_t shmem) {
  (void)grid, (void)block, (void)shmem;
  fn_job *j;
  memcpy(&j, args[0], sizeof j);
  fn_run(j);
}

static char fn_kernel_stub; /* the "host function" the kernel is registered under */
static int fn_kernel_ok;
static void fn_kernel_register(void) {
  static char dev_name[] = "fake_nccl_collective_kernel";
  __cudaRegisterFunction(NULL, &fn_kernel_stub, dev_name, dev_name, -1, NULL, NULL, NULL, NULL,
                         NULL);
  const size_t sz = sizeof(fn_job *);
  fn_kernel_ok = fake_cuda_emulate(dev_name, fn_kernel_emu, 1, &sz) >= 1;
}

static int on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
/* @n bytes at @p: device memory of one allocation (both ends, one host view) */
static int on_device_range(const void *p, size_t n) {
  if (!on_device(p) || !on_device((const char *)p + n - 1)) return 0;
  return (char *)fake_cuda_hostview(p) + (n - 1) ==
         (char *)fake_cuda_hostview((const char *)p + n - 1);
}

/* Checks, then the collective's kernel on @stream; or the hang of FAKE_NCCL_HANG / FAKE_NCCL_ASYNC_ERROR.
 * @count as the call's (see fn_job); @send_n, @recv_n: the buffers' elements. */
static ncclResult_t coll(int call, ncclComm_t comm, const void *send, void *recv, size_t count,
                         size_t send_n, size_t recv_n, ncclDataType_t t, ncclRedOp_t op, int root,
                         cudaStream_t stream) {
  const char *name = fn_call_name[call];
  struct ncclComm *c = live_as(comm, name);
  const size_t esz = type_size(t);
  size_t sb, rb;
  if (!c || !esz || __builtin_mul_overflow(send_n, esz, &sb) ||
      __builtin_mul_overflow(recv_n, esz, &rb))
    return ncclInvalidArgument;
  if ((call == FN_ALL_REDUCE || call == FN_REDUCE_SCATTER) && (op != ncclSum || !summable(t))) {
    fprintf(stderr, "fake_nccl: %s: only ncclSum of fp32, fp64, bf16 or fp16 (op %d, type %d)\n",
            name, (int)op, (int)t);
    return ncclInvalidArgument;
  }
  if (root < 0 || root >= c->nranks) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  const int send_used = call != FN_BROADCAST || c->rank == root;
  const int send_ok = !send_used || on_device_range(send, sb), recv_ok = on_device_range(recv, rb);
  if (!send_ok || !recv_ok) {
    fprintf(stderr, "fake_nccl: %s: %s buffer %p (%zu bytes) is not device memory\n", name,
            send_ok ? "recv" : "send", send_ok ? recv : (void *)send, send_ok ? rb : sb);
    return ncclInvalidArgument;
  }
  if (env_on("FAKE_NCCL_HANG") || env_on("FAKE_NCCL_ASYNC_ERROR")) {
    pthread_mutex_lock(&g_mu);
    c->hung++;
    pthread_mutex_unlock(&g_mu);
    if (cudaLaunchHostFunc(stream, hang_fn, c) != cudaSuccess) return ncclUnhandledCudaError;
    return ncclSuccess;
  }
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, fn_kernel_register);
  if (!fn_kernel_ok) {
    fprintf(stderr, "fake_nccl: %s: the stand-in libcudart does not run its kernel\n", name);
    return ncclInternalError;
  }
  fn_job *j = calloc(1, sizeof *j);
  if (!j) return ncclSystemError;
  *j = (fn_job){.c = c,
                .call = call,
                .t = t,
                .esz = esz,
                .count = count,
                .root = root,
                .seq = ++c->seq,
                .send = send_used ? fake_cuda_hostview(send) : NULL,
                .recv = fake_cuda_hostview(recv)};
  cudaKernel_t k = NULL;
  pthread_mutex_lock(&g_mu);
  c->inflight++;
  pthread_mutex_unlock(&g_mu);
  void *args[1] = {&j};
  const dim3 one = {1, 1, 1};
  if (__cudaGetKernel(&k, &fn_kernel_stub) != cudaSuccess ||
      __cudaLaunchKernel(k, one, one, args, 0, stream) != cudaSuccess) {
    pthread_mutex_lock(&g_mu);
    c->inflight--;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    c->seq--;
    free(j);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return coll(FN_ALL_REDUCE, comm, send, recv, count, count, count, t, op, 0, stream);
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recv_count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  struct ncclComm *c = live(comm);
  size_t send_n;
  if (!c || __builtin_mul_overflow(recv_count, (size_t)c->nranks, &send_n))
    return ncclInvalidArgument;
  return coll(FN_REDUCE_SCATTER, comm, send, recv, recv_count, send_n, recv_count, t, op, 0,
              stream);
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t send_count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  struct ncclComm *c = live(comm);
  size_t recv_n;
  if (!c || __builtin_mul_overflow(send_count, (size_t)c->nranks, &recv_n))
    return ncclInvalidArgument;
  return coll(FN_ALL_GATHER, comm, send, recv, send_count, send_count, recv_n, t, ncclSum, 0,
              stream);
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return coll(FN_BROADCAST, comm, send, recv, count, count, count, t, ncclSum, root, stream);
}
