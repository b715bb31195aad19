/*
 * fake_cudart.c - a stand-in libcudart for running the cuda device backend
 * (gpu/device_cuda.c) and test_device --backend cuda on machines without a
 * GPU. Not CUDA: "device memory" is host memory, streams are worker threads,
 * events are (stream, sequence number). It plays CUDA's documented WORST
 * cases, so a backend or test that leans on friendlier behaviour fails here:
 *  - host funcs of all streams run one at a time on ONE callback thread;
 *  - H2D/D2H copies with unregistered (pageable) host memory synchronize the
 *    stream in the caller and copy synchronously; H2H copies likewise;
 *  - cudaFree synchronizes every stream of the device;
 *  - every failure, cudaErrorNotReady from queries included, becomes the
 *    thread's last error and stays it through later successful calls until
 *    cudaGetLastError reads (and clears) it, as in CUDA;
 *  - work on a stream of a device other than the current one is refused;
 *  - copies are checked by kind against the allocation table, and host
 *    registrations must not overlap.
 *  - any use of a destroyed stream or event (synchronize, query, record,
 *    enqueue, destroy again) aborts with a message naming the call: real
 *    CUDA makes that undefined behaviour, so it must never pass quietly.
 *    Streams and events are kept in registries and never freed (a test
 *    harness), so a destroyed handle's address is never reused.
 *  - kernels (the library's device Adam, gpu/adam_device.cu) register and
 *    load; a launch fails with cudaErrorNotSupported as the thread's last
 *    error, which the launcher reports, unless a test provides a host
 *    emulation of that kernel (fake_cuda_emulate(), found with dlsym; the
 *    section at the end): then the launch queues it on the stream, to run
 *    later on the stream's worker in stream order, like a kernel.
 *  - asynchronous copies (device memory, or registered host memory) and
 *    memsets complete LATER on the stream's worker thread, after a short
 *    latency (FAKE_CUDA_LATENCY_US, default 50); their destination is
 *    filled with poison bytes (0xA5) when they are enqueued, so a host read
 *    before the stream or an event after the copy is synchronized (or
 *    queried complete) sees 0xA5, not the data. (A destination that an
 *    earlier, still pending copy reads is not poisoned: stream order makes
 *    that read legal.)
 *  - any CUDA call from inside a host func (cudaLaunchHostFunc) aborts with
 *    a message naming the call: CUDA forbids it.
 *  - a simulated fault is sticky for the context, as an illegal address in
 *    a kernel is: FAKE_CUDA_FAULT_AFTER=N makes the copy after the first N
 *    cudaMemcpyAsync calls fail with cudaErrorIllegalAddress (as does the
 *    test hook fake_cuda_inject_fault(), found with dlsym); from then on
 *    every call returns that error and cudaGetLastError does not clear it.
 *  - the legacy default stream (0, cudaStreamLegacy) synchronizes with the
 *    blocking streams of its device (created without
 *    cudaStreamNonBlocking): its work waits for their earlier work, and
 *    theirs for its earlier work. cudaStreamPerThread is a blocking stream
 *    of the calling thread's own.
 *  - cudaHostRegister is page-granular: ranges that share a page conflict
 *    (cudaErrorHostMemoryAlreadyRegistered); FAKE_CUDA_NOREG=1 refuses
 *    every registration, FAKE_CUDA_REG_LIMIT=bytes refuses one that would
 *    take the page-rounded total past it (cudaErrorMemoryAllocation, as a
 *    locked-memory limit does).
 *  - the properties are an H100 80GB's (name "Stand-in H100 80GB HBM3",
 *    sm_90, 132 SMs, 81559 MiB, a PCI id like one), and cudaMemGetInfo
 *    agrees with totalGlobalMem.
 *  - FAKE_CUDA_DEVICE_NOACCESS=1: device memory is not host memory either:
 *    cudaMalloc returns an inaccessible (PROT_NONE) range, and copies and
 *    memsets reach the bytes through a private alias, so a host read or
 *    write of a device pointer (memcmp, a cast into it) faults as on a GPU.
 *    A kernel emulation reaches device memory as a kernel does, through
 *    fake_cuda_hostview() (found with dlsym; the kernel section): the host
 *    address of a device pointer's bytes (the pointer itself in the default
 *    mode), so emulated kernels run in this mode too.
 * FAKE_CUDA_STATS=1 prints at exit how many copies went which way.
 * Only the calls zoffload and its tests make are provided.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAXDEV 8                   /* an HGX board's eight: one per rank of fake_nccl's 8 */
#define TOTAL_MEM (81559ull << 20) /* an H100 80GB HBM3's totalGlobalMem */
#define CTX_RESERVED (520ull << 20)
#define POISON 0xA5

static __thread int t_dev = 0;
static __thread cudaError_t t_last = cudaSuccess;
static __thread int t_in_cb = 0;                         /* this thread is running a host func */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* tables */
static int g_count = -1;
static int g_fault_ =
    cudaSuccess; /* sticky for the context once set (atomic: any thread may set it) */
#define g_fault ((cudaError_t)__atomic_load_n(&g_fault_, __ATOMIC_ACQUIRE))
static unsigned long long g_copies; /* cudaMemcpyAsync calls, for FAKE_CUDA_FAULT_AFTER */
/* FAKE_CUDA_STATS=1: at exit, how the copies and memsets went (to see that a test exercises the
 * async paths) */
static unsigned long long g_n_async, g_n_poison_now, g_n_poison_late, g_n_pageable, g_n_host_funcs;
static void print_stats(void) {
  fprintf(
      stderr,
      "fake_cudart: %llu async copies/memsets (%llu poisoned at enqueue, %llu when started), %llu pageable or "
      "H2H copies (synchronous), %llu host funcs\n",
      g_n_async, g_n_poison_now, g_n_poison_late, g_n_pageable, g_n_host_funcs);
}
__attribute__((constructor)) static void fake_init(void) {
  if (getenv("FAKE_CUDA_STATS")) atexit(print_stats);
}

static cudaError_t fail(cudaError_t e) {
  t_last = e;
  return e;
}
#define OK() cudaSuccess

/* A CUDA call from a host func: CUDA forbids it ("Host functions must not make any CUDA API
 * calls"). */
static void __attribute__((noreturn)) call_in_callback(const char *call) {
  fprintf(
      stderr,
      "fake_cudart: %s called from inside a host func (cudaLaunchHostFunc): CUDA forbids CUDA calls there\n",
      call);
  fflush(stderr);
  abort();
}
/* Every API call starts here: no call from a host func; after a fault, every call returns it. */
#define ENTER()                                       \
  do {                                                \
    if (t_in_cb) call_in_callback(__func__);          \
    if (g_fault != cudaSuccess) return fail(g_fault); \
  } while (0)

/* The test hook: the context takes a sticky fault now (e.g. cudaErrorIllegalAddress). */
void fake_cuda_inject_fault(int e) { __atomic_store_n(&g_fault_, e, __ATOMIC_RELEASE); }

/* FAKE_CUDA_DEVICES: how many GPUs to pretend (default 1, at most MAXDEV). */
static int count(void) {
  if (g_count < 0) {
    const char *s = getenv("FAKE_CUDA_DEVICES");
    g_count = s ? atoi(s) : 1;
    if (g_count > MAXDEV) g_count = MAXDEV;
  }
  return g_count;
}

/* ---------------- allocations and registrations */
typedef struct rng {
  uintptr_t base;
  size_t len;
  int dev;
  char *alias; /* FAKE_CUDA_DEVICE_NOACCESS: where the bytes of [base, base + len) are; else NULL */
} rng;
static rng g_alloc[1 << 16];
static size_t g_nalloc, g_used[MAXDEV];
static rng g_reg[1 << 16];   /* registered ranges as asked for */
static rng g_regpg[1 << 16]; /* the same, rounded out to whole pages (what CUDA pins) */
static size_t g_nreg, g_regbytes;

static int find(rng *t, size_t n, const void *p, size_t len) {
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < n; i++)
    if (a >= t[i].base && a + len <= t[i].base + t[i].len) return (int)i;
  return -1;
}
static int is_dev(const void *p, size_t n) {
  pthread_mutex_lock(&g_mu);
  int r = find(g_alloc, g_nalloc, p, n) >= 0;
  pthread_mutex_unlock(&g_mu);
  return r;
}
/* The host address of the bytes at @p: its alias when @p is device memory under
 * FAKE_CUDA_DEVICE_NOACCESS. */
static void *hostview(const void *p) {
  pthread_mutex_lock(&g_mu);
  int i = find(g_alloc, g_nalloc, p, 1);
  void *r =
      i >= 0 && g_alloc[i].alias ? g_alloc[i].alias + ((uintptr_t)p - g_alloc[i].base) : (void *)p;
  pthread_mutex_unlock(&g_mu);
  return r;
}
static int is_reg(const void *p, size_t n) {
  pthread_mutex_lock(&g_mu);
  int r = find(g_reg, g_nreg, p, n) >= 0;
  pthread_mutex_unlock(&g_mu);
  return r;
}

/* ---------------- callback thread: every host func of every stream */
typedef struct cb {
  struct cb *next;
  void (*fn)(void *);
  void *arg;
  int done;
} cb;
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cb_cv = PTHREAD_COND_INITIALIZER, cb_done = PTHREAD_COND_INITIALIZER;
static cb *cb_head, *cb_tail;
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;
static void *cb_thread(void *a) {
  (void)a;
  pthread_mutex_lock(&cb_mu);
  for (;;) {
    while (!cb_head) pthread_cond_wait(&cb_cv, &cb_mu);
    cb *c = cb_head;
    cb_head = c->next;
    if (!cb_head) cb_tail = NULL;
    pthread_mutex_unlock(&cb_mu);
    t_in_cb = 1;
    c->fn(c->arg);
    t_in_cb = 0;
    pthread_mutex_lock(&cb_mu);
    c->done = 1;
    pthread_cond_broadcast(&cb_done);
  }
  return NULL;
}
static void cb_start(void) {
  pthread_t t;
  pthread_create(&t, NULL, cb_thread, NULL);
  pthread_detach(t);
}
static void run_on_cb_thread(void (*fn)(void *), void *arg) {
  pthread_once(&cb_once, cb_start);
  cb c = {NULL, fn, arg, 0};
  pthread_mutex_lock(&cb_mu);
  if (cb_tail)
    cb_tail->next = &c;
  else
    cb_head = &c;
  cb_tail = &c;
  pthread_cond_signal(&cb_cv);
  while (!c.done) pthread_cond_wait(&cb_done, &cb_mu);
  pthread_mutex_unlock(&cb_mu);
}

/* ---------------- streams */
enum {
  OP_COPY,
  OP_SET,
  OP_FN,
  OP_WAIT,
  OP_KERNEL /* an emulated kernel: fn(arg) on the worker (kernel section) */
};
typedef struct op {
  struct op *next;
  int type;
  uint64_t seq;
  void *dst;
  const void *src;
  size_t n;
  int val;
  void (*fn)(void *);
  void *arg;
  struct CUstream_st *ws;
  uint64_t wtarget;
  int poison_at_start; /* the destination could not be poisoned at enqueue time: poison it when the op starts */
} op;

struct CUstream_st {
  int magic;
  int dev;
  unsigned flags;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  op *head, *tail;
  op *cur;               /* the op the worker runs now (off the list) */
  useconds_t latency_us; /* before each copy or memset starts */
  uint64_t issued, completed;
  int stop, alive;
  pthread_t th;
  struct CUstream_st *next_all;
};
#define SMAGIC 0x5eed5eed
static struct CUstream_st *g_streams;         /* all ever created (never freed: a harness) */
static struct CUstream_st *g_default[MAXDEV]; /* the legacy default stream of each device */
/* this thread's per-thread default stream (a blocking one) */
static __thread struct CUstream_st *t_ptds[MAXDEV];

/* A use of a destroyed stream or event: undefined behaviour on real CUDA, so never a quiet error
 * here. */
static void __attribute__((noreturn))
use_after_destroy(const char *call, const char *what, const void *h) {
  fprintf(
      stderr,
      "fake_cudart: %s on a destroyed %s %p (used after its cudaStreamDestroy/cudaEventDestroy)\n",
      call, what, h);
  fflush(stderr);
  abort();
}

/* FAKE_CUDA_LATENCY_US: how long a copy or memset takes to start on its worker (default 50 us). */
static useconds_t latency_us(void) {
  const char *e = getenv("FAKE_CUDA_LATENCY_US");
  return e ? (useconds_t)atol(e) : 50;
}

static void *worker(void *a) {
  struct CUstream_st *s = a;
  useconds_t lat = s->latency_us;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    if (!s->head) break;
    op *o = s->head;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->cur = o;
    pthread_mutex_unlock(&s->mu);
    if (o->poison_at_start) memset(o->dst, POISON, o->n);
    if ((o->type == OP_COPY || o->type == OP_SET || o->type == OP_KERNEL) && lat) usleep(lat);
    switch (o->type) {
      case OP_COPY: memcpy(o->dst, o->src, o->n); break;
      case OP_SET: memset(o->dst, o->val, o->n); break;
      case OP_FN: run_on_cb_thread(o->fn, o->arg); break;
      case OP_KERNEL:
        o->fn(o->arg);
        break; /* on this worker, in stream order; frees its own argument */
      case OP_WAIT:
        pthread_mutex_lock(&o->ws->mu);
        while (o->ws->completed < o->wtarget) pthread_cond_wait(&o->ws->done, &o->ws->mu);
        pthread_mutex_unlock(&o->ws->mu);
        break;
    }
    pthread_mutex_lock(&s->mu);
    s->completed = o->seq;
    s->cur = NULL;
    pthread_cond_broadcast(&s->done);
    free(o);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static struct CUstream_st *new_stream(int dev, unsigned flags) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  s->magic = SMAGIC;
  s->dev = dev;
  s->flags = flags;
  s->alive = 1;
  s->latency_us =
      latency_us(); /* (here, not in the worker: the caller's environment at creation) */
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  pthread_create(&s->th, NULL, worker, s);
  pthread_mutex_lock(&g_mu);
  s->next_all = g_streams;
  g_streams = s;
  pthread_mutex_unlock(&g_mu);
  return s;
}

/* Resolve a handle; NULL when invalid, abort when destroyed. 0 and cudaStreamLegacy map to the current device's
 * legacy default stream, cudaStreamPerThread to this thread's own (blocking: it syncs with the legacy stream only). */
#define resolve(h) resolve_as(h, __func__)
static struct CUstream_st *resolve_as(cudaStream_t h, const char *call) {
  if (h == cudaStreamPerThread) {
    if (!t_ptds[t_dev]) t_ptds[t_dev] = new_stream(t_dev, 0);
    return t_ptds[t_dev];
  }
  if (h == NULL || h == cudaStreamLegacy) {
    pthread_mutex_lock(&g_mu);
    if (!g_default[t_dev]) {
      pthread_mutex_unlock(&g_mu);
      struct CUstream_st *s = new_stream(t_dev, 0);
      pthread_mutex_lock(&g_mu);
      if (!g_default[t_dev]) g_default[t_dev] = s;
    }
    struct CUstream_st *s = g_default[t_dev];
    pthread_mutex_unlock(&g_mu);
    return s;
  }
  struct CUstream_st *s = (struct CUstream_st *)h;
  pthread_mutex_lock(&g_mu);
  int ok = 0, dead = 0;
  for (struct CUstream_st *it = g_streams; it; it = it->next_all)
    if (it == s) {
      ok = it->alive;
      dead = !it->alive;
    }
  pthread_mutex_unlock(&g_mu);
  if (dead) use_after_destroy(call, "stream", h);
  return ok ? s : NULL;
}

static uint64_t enqueue_raw(struct CUstream_st *s, op *o) {
  pthread_mutex_lock(&s->mu);
  o->seq = ++s->issued;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  return o->seq;
}
static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  return (uintptr_t)a < (uintptr_t)b + bn && (uintptr_t)b < (uintptr_t)a + an;
}

/* The destination of a copy or memset @o about to be enqueued on @s holds poison until the op runs. Poisoned now
 * unless something earlier in @s may still legally read it (a pending copy from it, a host func, a wait on another
 * stream's work); then when the op starts on the worker, after all of that has run. */
static void poison(struct CUstream_st *s, op *o) {
  int now = !(o->type == OP_COPY && overlaps(o->dst, o->n, o->src, o->n));
  pthread_mutex_lock(&s->mu);
  for (op *it = s->cur ? s->cur : s->head; now && it; it = it == s->cur ? s->head : it->next)
    if (it->type == OP_FN || it->type == OP_WAIT || it->type == OP_KERNEL ||
        (it->type == OP_COPY && overlaps(o->dst, o->n, it->src, it->n)))
      now = 0;
  pthread_mutex_unlock(&s->mu);
  __atomic_add_fetch(&g_n_async, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(now ? &g_n_poison_now : &g_n_poison_late, 1, __ATOMIC_RELAXED);
  if (now)
    memset(o->dst, POISON, o->n);
  else
    o->poison_at_start = 1;
}

/* The legacy default stream synchronizes with the blocking streams of its device: before @o, a wait on their issued
 * work (when @s is the legacy stream) or on the legacy stream's issued work (when @s is blocking). */
static void implicit_sync(struct CUstream_st *s) {
  if (s->flags & cudaStreamNonBlocking) return;
  struct CUstream_st *other[64];
  int n = 0;
  pthread_mutex_lock(&g_mu);
  struct CUstream_st *legacy = g_default[s->dev];
  if (s == legacy) {
    for (struct CUstream_st *it = g_streams; it; it = it->next_all)
      if (it != s && it->alive && it->dev == s->dev && !(it->flags & cudaStreamNonBlocking) &&
          n < 64)
        other[n++] = it;
  } else if (legacy) {
    other[n++] = legacy;
  }
  pthread_mutex_unlock(&g_mu);
  for (int i = 0; i < n; i++) {
    pthread_mutex_lock(&other[i]->mu);
    uint64_t t = other[i]->issued, c = other[i]->completed;
    pthread_mutex_unlock(&other[i]->mu);
    if (c >= t) continue;
    op *w = calloc(1, sizeof *w);
    w->type = OP_WAIT;
    w->ws = other[i];
    w->wtarget = t;
    enqueue_raw(s, w);
  }
}

static uint64_t enqueue(struct CUstream_st *s, op *o) {
  implicit_sync(s);
  if (o->type == OP_COPY || o->type == OP_SET) poison(s, o);
  return enqueue_raw(s, o);
}

static void sync_stream(struct CUstream_st *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t t = s->issued;
  while (s->completed < t) pthread_cond_wait(&s->done, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

/* ---------------- API */
const char *cudaGetErrorString(cudaError_t e) {
  if (t_in_cb) call_in_callback(__func__);
  switch (e) {
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorHostMemoryAlreadyRegistered:
      return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
      return "pointer does not correspond to a registered memory region";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "fake error";
  }
}
const char *cudaGetErrorName(cudaError_t e) {
  if (t_in_cb) call_in_callback(__func__);
  switch (e) {
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorFake";
  }
}
cudaError_t cudaGetLastError(void) {
  if (t_in_cb) call_in_callback(__func__);
  if (g_fault != cudaSuccess) return g_fault; /* sticky: reading it does not clear it */
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}
cudaError_t cudaGetDeviceCount(int *n) {
  ENTER();
  *n = count();
  return OK();
}
cudaError_t cudaGetDevice(int *d) {
  ENTER();
  *d = t_dev;
  return OK();
}
cudaError_t cudaSetDevice(int d) {
  ENTER();
  if (d < 0 || d >= count()) return fail(cudaErrorInvalidDevice);
  t_dev = d;
  return OK();
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
  ENTER();
  if (d < 0 || d >= count()) return fail(cudaErrorInvalidDevice);
  static const int bus[MAXDEV] = {0x18, 0x2a, 0x3a, 0x5d,
                                  0x9a, 0xab, 0xba, 0xdb}; /* an HGX H100 board's eight */
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "Stand-in H100 80GB HBM3");
  for (int i = 0; i < 16; i++) p->uuid.bytes[i] = (char)(0x5a ^ (i * 17) ^ d);
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = TOTAL_MEM;
  p->totalConstMem = 65536;
  p->sharedMemPerBlock = 49152;
  p->sharedMemPerBlockOptin = 232448;
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxBlocksPerMultiProcessor = 32;
  p->l2CacheSize = 50 << 20;
  p->persistingL2CacheMaxSize = 32 << 20;
  p->memoryBusWidth = 5120;
  p->textureAlignment = 512;
  p->asyncEngineCount = 3;
  p->concurrentKernels = 1;
  p->unifiedAddressing = 1;
  p->canMapHostMemory = 1;
  p->ECCEnabled = 1;
  p->pciDomainID = 0;
  p->pciBusID = bus[d];
  p->pciDeviceID = 0;
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->cooperativeLaunch = 1;
  p->memoryPoolsSupported = 1;
  return OK();
}
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot) {
  ENTER();
  pthread_mutex_lock(&g_mu);
  *tot = TOTAL_MEM;
  *fr = TOTAL_MEM - CTX_RESERVED - g_used[t_dev];
  pthread_mutex_unlock(&g_mu);
  return OK();
}
cudaError_t cudaMalloc(void **p, size_t n) {
  ENTER();
  *p = NULL;
  pthread_mutex_lock(&g_mu);
  if (n > TOTAL_MEM - CTX_RESERVED - g_used[t_dev]) {
    pthread_mutex_unlock(&g_mu);
    return fail(cudaErrorMemoryAllocation);
  }
  pthread_mutex_unlock(&g_mu);
  const size_t len = (n + 4095) & ~(size_t)4095;
  char *alias = NULL;
  void *q;
  if (getenv(
          "FAKE_CUDA_DEVICE_NOACCESS")) { /* the range the caller gets, inaccessible; the bytes elsewhere */
    q = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    alias = q == MAP_FAILED ? NULL : aligned_alloc(4096, len);
    if (!alias) {
      if (q != MAP_FAILED) munmap(q, len);
      return fail(cudaErrorMemoryAllocation);
    }
  } else {
    q = aligned_alloc(512, (n + 511) & ~(size_t)511);
    if (!q) return fail(cudaErrorMemoryAllocation);
  }
  pthread_mutex_lock(&g_mu);
  g_alloc[g_nalloc++] = (rng){(uintptr_t)q, n, t_dev, alias};
  g_used[t_dev] += n;
  pthread_mutex_unlock(&g_mu);
  *p = q;
  return OK();
}
cudaError_t cudaFree(void *p) {
  ENTER();
  if (!p) return OK();
  /* worst case: synchronize every stream of the device */
  pthread_mutex_lock(&g_mu);
  struct CUstream_st *list = g_streams;
  pthread_mutex_unlock(&g_mu);
  for (struct CUstream_st *s = list; s; s = s->next_all)
    if (s->alive && s->dev == t_dev) sync_stream(s);
  pthread_mutex_lock(&g_mu);
  size_t i = 0;
  while (i < g_nalloc && g_alloc[i].base != (uintptr_t)p) i++;
  if (i == g_nalloc) {
    pthread_mutex_unlock(&g_mu);
    return fail(cudaErrorInvalidValue);
  }
  if (g_alloc[i].dev != t_dev)
    fprintf(stderr, "fake_cudart: cudaFree of a cuda:%d pointer on cuda:%d\n", g_alloc[i].dev,
            t_dev);
  g_used[g_alloc[i].dev] -= g_alloc[i].len;
  char *alias = g_alloc[i].alias;
  const size_t len = (g_alloc[i].len + 4095) & ~(size_t)4095;
  g_alloc[i] = g_alloc[--g_nalloc];
  pthread_mutex_unlock(&g_mu);
  if (alias) {
    munmap(p, len);
    free(alias);
  } else {
    free(p);
  }
  return OK();
}
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) {
  ENTER();
  (void)flags;
  if (!p || !n) return fail(cudaErrorInvalidValue);
  if (getenv("FAKE_CUDA_NOREG")) return fail(cudaErrorNotSupported); /* registration refused */
  /* CUDA pins whole pages: two ranges that share a page conflict even when the bytes do not */
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)p & ~(pg - 1), hi = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
  const char *lim = getenv("FAKE_CUDA_REG_LIMIT");
  pthread_mutex_lock(&g_mu);
  for (size_t i = 0; i < g_nreg; i++)
    if (lo < g_regpg[i].base + g_regpg[i].len && g_regpg[i].base < hi) {
      pthread_mutex_unlock(&g_mu);
      return fail(cudaErrorHostMemoryAlreadyRegistered);
    }
  if (lim && g_regbytes + (hi - lo) > (size_t)strtoull(lim, NULL, 10)) { /* a locked-memory limit */
    pthread_mutex_unlock(&g_mu);
    return fail(cudaErrorMemoryAllocation);
  }
  g_regpg[g_nreg] = (rng){lo, hi - lo, -1, NULL};
  g_reg[g_nreg++] = (rng){(uintptr_t)p, n, -1, NULL};
  g_regbytes += hi - lo;
  pthread_mutex_unlock(&g_mu);
  return OK();
}
cudaError_t cudaHostUnregister(void *p) {
  ENTER();
  pthread_mutex_lock(&g_mu);
  size_t i = 0;
  while (i < g_nreg && g_reg[i].base != (uintptr_t)p) i++;
  if (i == g_nreg) {
    pthread_mutex_unlock(&g_mu);
    return fail(cudaErrorHostMemoryNotRegistered);
  }
  g_regbytes -= g_regpg[i].len;
  g_reg[i] = g_reg[--g_nreg];
  g_regpg[i] = g_regpg[g_nreg];
  pthread_mutex_unlock(&g_mu);
  return OK();
}
cudaError_t cudaStreamCreate(cudaStream_t *out) {
  return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags) {
  ENTER();
  *out = (cudaStream_t)new_stream(t_dev, flags);
  return OK();
}
cudaError_t cudaStreamDestroy(cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = resolve(h);
  if (!s || s == g_default[s->dev] || s == t_ptds[s->dev])
    return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->th, NULL); /* (real CUDA returns at once and finishes later; fine) */
  pthread_mutex_lock(&g_mu);
  s->alive = 0;
  pthread_mutex_unlock(&g_mu);
  return OK();
}
cudaError_t cudaStreamGetFlags(cudaStream_t h, unsigned *f) {
  ENTER();
  struct CUstream_st *s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  *f = s->flags;
  return OK();
}
cudaError_t cudaStreamGetDevice(cudaStream_t h, int *d) {
  ENTER();
  struct CUstream_st *s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  *d = s->dev;
  return OK();
}
cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  sync_stream(s);
  return OK();
}
cudaError_t cudaStreamQuery(cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&s->mu);
  int idle = s->completed == s->issued;
  pthread_mutex_unlock(&s->mu);
  return idle ? OK() : fail(cudaErrorNotReady);
}
/* Stream usable for enqueueing from this thread: valid and of the current device. */
#define usable(h) usable_as(h, __func__)
static struct CUstream_st *usable_as(cudaStream_t h, const char *call) {
  struct CUstream_st *s = resolve_as(h, call);
  if (!s) return NULL;
  if (s->dev != t_dev) {
    fprintf(stderr, "fake_cudart: work on a stream of cuda:%d while cuda:%d is current\n", s->dev,
            t_dev);
    return NULL;
  }
  return s;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = usable(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (k == cudaMemcpyDefault) /* unified addressing: the direction from the pointers */
    k = is_dev(src, n) ? (is_dev(dst, n) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                       : (is_dev(dst, n) ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  int src_dev = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
  int dst_dev = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
  if (is_dev(src, n) != src_dev || is_dev(dst, n) != dst_dev) {
    fprintf(stderr, "fake_cudart: cudaMemcpyAsync kind %d does not match the pointers\n", (int)k);
    return fail(cudaErrorInvalidValue);
  }
  const void *host = k == cudaMemcpyHostToDevice ? src : k == cudaMemcpyDeviceToHost ? dst : NULL;
  dst = hostview(dst), src = hostview(src); /* FAKE_CUDA_DEVICE_NOACCESS */
  if (getenv("FAKE_CUDA_FAULT_AFTER") && __atomic_add_fetch(&g_copies, 1, __ATOMIC_RELAXED) >
                                             strtoull(getenv("FAKE_CUDA_FAULT_AFTER"), NULL, 10)) {
    fprintf(
        stderr,
        "fake_cudart: FAKE_CUDA_FAULT_AFTER=%s: simulated illegal address, sticky from here on\n",
        getenv("FAKE_CUDA_FAULT_AFTER"));
    fake_cuda_inject_fault(cudaErrorIllegalAddress);
    return fail(g_fault);
  }
  if (k == cudaMemcpyHostToHost || (host && !is_reg(host, n))) {
    __atomic_add_fetch(&g_n_pageable, 1, __ATOMIC_RELAXED);
    implicit_sync(s);
    sync_stream(s); /* pageable: synchronous in the caller */
    memcpy(dst, src, n);
    return OK();
  }
  op *o = calloc(1, sizeof *o);
  o->type = OP_COPY;
  o->dst = dst;
  o->src = src;
  o->n = n;
  enqueue(s, o);
  return OK();
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = usable(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (!is_dev(p, n)) return fail(cudaErrorInvalidValue);
  op *o = calloc(1, sizeof *o);
  o->type = OP_SET;
  o->dst = hostview(p);
  o->val = v;
  o->n = n;
  enqueue(s, o);
  return OK();
}
cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *arg) {
  ENTER();
  struct CUstream_st *s = usable(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  op *o = calloc(1, sizeof *o);
  __atomic_add_fetch(&g_n_host_funcs, 1, __ATOMIC_RELAXED);
  o->type = OP_FN;
  o->fn = fn;
  o->arg = arg;
  enqueue(s, o);
  return OK();
}

/* ---------------- events */
struct CUevent_st {
  int dev;
  pthread_mutex_t mu;
  struct CUstream_st *s;
  uint64_t target;
  int alive;
  struct CUevent_st *next_all;
};
/* all ever created (never freed: a destroyed one stays, marked dead) */
static struct CUevent_st *g_events;

/* 1 when @e is a live event, 0 when unknown (or NULL); aborts when destroyed. */
#define live_event(e) live_event_as(e, __func__)
static int live_event_as(cudaEvent_t e, const char *call) {
  if (!e) return 0;
  int ok = 0, dead = 0;
  pthread_mutex_lock(&g_mu);
  for (struct CUevent_st *it = g_events; it; it = it->next_all)
    if (it == e) {
      ok = it->alive;
      dead = !it->alive;
    }
  pthread_mutex_unlock(&g_mu);
  if (dead) use_after_destroy(call, "event", e);
  return ok;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  ENTER();
  (void)flags;
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  ev->dev = t_dev;
  ev->alive = 1;
  pthread_mutex_init(&ev->mu, NULL);
  pthread_mutex_lock(&g_mu);
  ev->next_all = g_events;
  g_events = ev;
  pthread_mutex_unlock(&g_mu);
  *e = ev;
  return OK();
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  ENTER();
  if (!live_event(e)) return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&g_mu);
  e->alive = 0; /* not freed: streams keep their own copy of a wait */
  pthread_mutex_unlock(&g_mu);
  return OK();
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h) {
  ENTER();
  if (!live_event(e)) return fail(cudaErrorInvalidResourceHandle);
  struct CUstream_st *s = usable(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (e->dev != s->dev) return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&s->mu);
  uint64_t t = s->issued;
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_lock(&e->mu);
  e->s = s;
  e->target = t;
  pthread_mutex_unlock(&e->mu);
  return OK();
}
static void snap(cudaEvent_t e, struct CUstream_st **s, uint64_t *t) {
  pthread_mutex_lock(&e->mu);
  *s = e->s;
  *t = e->target;
  pthread_mutex_unlock(&e->mu);
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  ENTER();
  if (!live_event(e)) return fail(cudaErrorInvalidResourceHandle);
  struct CUstream_st *s;
  uint64_t t;
  snap(e, &s, &t);
  if (!s) return OK();
  pthread_mutex_lock(&s->mu);
  int done = s->completed >= t;
  pthread_mutex_unlock(&s->mu);
  return done ? OK() : fail(cudaErrorNotReady);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  ENTER();
  if (!live_event(e)) return fail(cudaErrorInvalidResourceHandle);
  struct CUstream_st *s;
  uint64_t t;
  snap(e, &s, &t);
  if (!s) return OK();
  pthread_mutex_lock(&s->mu);
  while (s->completed < t) pthread_cond_wait(&s->done, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return OK();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned flags) {
  ENTER();
  (void)flags;
  if (!live_event(e)) return fail(cudaErrorInvalidResourceHandle);
  struct CUstream_st *s = usable(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  struct CUstream_st *w;
  uint64_t t;
  snap(e, &w, &t);
  if (!w) return OK();
  op *o = calloc(1, sizeof *o);
  o->type = OP_WAIT;
  o->ws = w;
  o->wtarget = t;
  enqueue(s, o);
  return OK();
}

/* ---------------- pointer attributes (CUDA 11+ semantics: unknown host memory is
 * cudaMemoryTypeUnregistered) */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  ENTER();
  if (!a) return fail(cudaErrorInvalidValue);
  memset(a, 0, sizeof *a);
  a->type = cudaMemoryTypeUnregistered;
  a->device = -2; /* CUDA leaves it meaningless for unregistered memory */
  pthread_mutex_lock(&g_mu);
  int i = find(g_alloc, g_nalloc, p, 1);
  if (i >= 0) {
    a->type = cudaMemoryTypeDevice;
    a->device = g_alloc[i].dev;
    a->devicePointer = (void *)p;
  } else if (find(g_reg, g_nreg, p, 1) >= 0) {
    a->type = cudaMemoryTypeHost;
    a->device = t_dev;
    a->hostPointer = a->devicePointer = (void *)p;
  }
  pthread_mutex_unlock(&g_mu);
  return OK();
}

/* ---------------------------------------------------------------- kernels: registered; run when a test emulates them
 * (kept at the end of the file: the emulation's own section.)
 * nvcc 13's host stub of a kernel (crt/host_runtime.h, non-legacy __cudaLaunch) does, per <<<grid, block, shmem,
 * stream>>>(args): __cudaPushCallConfiguration (0: go on), then in the stub __cudaGetKernel(&handle, stub) once
 * (a function-local static), __cudaPopCallConfiguration, and __cudaLaunchKernel(handle, grid, block, args, shmem,
 * stream) with args[i] pointing at the stub's copy of parameter i. Here a registered kernel's handle is its
 * registration; a launch of a kernel that a test emulates (fake_cuda_emulate) copies the arguments and queues
 * the emulation as an op of the stream: it runs later on the stream's worker, in stream order, after the same
 * latency as a copy, and a later copy into memory it may read is poisoned only when it starts. A launch of any
 * other kernel fails with cudaErrorNotSupported as the thread's last error. */
typedef void (*fake_kernel_fn)(dim3 grid, dim3 block, void **args, size_t shmem);
#define FK_MAXARGS 16
typedef struct fake_kernel { /* one __cudaRegisterFunction */
  const void *host_fun;
  char *name; /* the device function's (mangled) name */
  struct fake_kernel *next;
} fake_kernel;
typedef struct fake_emu { /* one fake_cuda_emulate */
  char *sub;
  fake_kernel_fn fn;
  int n_args;
  size_t sizes[FK_MAXARGS];
  struct fake_emu *next;
} fake_emu;
typedef struct
    fake_launch { /* an emulated launch in flight: the argument copies and the configuration */
  fake_kernel_fn fn;
  dim3 grid, block;
  size_t shmem;
  void *args[FK_MAXARGS];
  max_align_t data[]; /* the arguments, each at a 16-byte-aligned offset */
} fake_launch;
static fake_kernel *g_kernels;
static fake_emu *g_emus;
static __thread struct {
  dim3 grid, block;
  size_t shmem;
  cudaStream_t s;
  int set;
} t_cfg; /* pushed, not popped */

/* The registration nvcc emits for every .cu with kernels (so a program holding them loads on the
 * stand-in). */
void **__cudaRegisterFatBinary(void *fat_cubin) {
  static void *handle;
  (void)fat_cubin;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
void __cudaUnregisterFatBinary(void **h) { (void)h; }
void __cudaRegisterFunction(void **h, const char *host_fun, char *device_fun,
                            const char *device_name, int limit, uint3 *tid, uint3 *bid, dim3 *bdim,
                            dim3 *gdim, int *wsize) {
  (void)h, (void)device_fun, (void)limit, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
  fake_kernel *k = calloc(1, sizeof *k);
  k->host_fun = host_fun;
  k->name = strdup(device_name ? device_name : "?");
  pthread_mutex_lock(&g_mu);
  k->next = g_kernels;
  g_kernels = k;
  pthread_mutex_unlock(&g_mu);
}

/*
 * The test hook (found with dlsym): launches of every registered kernel whose device name contains @sub run
 * @fn(grid, block, args, shmem) on the stream's worker, args[i] pointing at a copy of argument i (@n_args of
 * them, @arg_sizes[i] bytes each, as the kernel's parameter list declares them). Returns how many registered
 * kernels match (0: none, the launch of those stays refused), -1 on bad arguments. Call before the launches;
 * a later call for the same kernel takes precedence.
 */
int fake_cuda_emulate(const char *sub, fake_kernel_fn fn, int n_args, const size_t *arg_sizes) {
  if (!sub || !fn || n_args < 0 || n_args > FK_MAXARGS || (n_args && !arg_sizes)) return -1;
  fake_emu *m = calloc(1, sizeof *m);
  m->sub = strdup(sub);
  m->fn = fn;
  m->n_args = n_args;
  for (int i = 0; i < n_args; i++) m->sizes[i] = arg_sizes[i];
  int matched = 0;
  pthread_mutex_lock(&g_mu);
  m->next = g_emus;
  g_emus = m;
  for (fake_kernel *k = g_kernels; k; k = k->next) matched += strstr(k->name, sub) != NULL;
  pthread_mutex_unlock(&g_mu);
  return matched;
}

/* The test hook (found with dlsym) for kernel emulations: the host address of the bytes at @p, which an emulation
 * reads and writes in place of device pointer @p (a kernel argument, or a pointer inside one). Under
 * FAKE_CUDA_DEVICE_NOACCESS that is the allocation's private alias (@p itself faults on a host access); otherwise,
 * and for any pointer that is not device memory, @p. Thread-safe; not a CUDA call (allowed in an emulation). */
void *fake_cuda_hostview(const void *p) { return hostview(p); }

/* A <<<>>> launch: the configuration is kept for the stub's pop (0: the stub goes on to launch). */
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream) {
  t_cfg.grid = grid, t_cfg.block = block, t_cfg.shmem = shmem, t_cfg.s = stream, t_cfg.set = 1;
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream) {
  if (!t_cfg.set) return fail(cudaErrorInvalidConfiguration);
  *grid = t_cfg.grid, *block = t_cfg.block, *shmem = t_cfg.shmem, *(cudaStream_t *)stream = t_cfg.s;
  t_cfg.set = 0;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *fun) {
  *k = NULL;
  pthread_mutex_lock(&g_mu);
  for (fake_kernel *it = g_kernels; it && !*k; it = it->next)
    if (it->host_fun == fun) *k = (cudaKernel_t)it;
  pthread_mutex_unlock(&g_mu);
  return *k ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}
static void run_launch(void *arg) {
  fake_launch *l = arg;
  l->fn(l->grid, l->block, l->args, l->shmem);
  free(l);
}
cudaError_t __cudaLaunchKernel(cudaKernel_t kh, dim3 grid, dim3 block, void **args, size_t shmem,
                               cudaStream_t h) {
  ENTER();
  fake_kernel *k = (fake_kernel *)kh;
  if (!k) return fail(cudaErrorInvalidDeviceFunction);
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
      (uint64_t)block.x * block.y * block.z > 1024)
    return fail(cudaErrorInvalidConfiguration);
  fake_emu *m = NULL;
  pthread_mutex_lock(&g_mu);
  for (fake_emu *it = g_emus; it && !m; it = it->next)
    if (strstr(k->name, it->sub)) m = it;
  pthread_mutex_unlock(&g_mu);
  if (!m)
    return fail(cudaErrorNotSupported); /* no kernel runs on the CPU unless a test emulates it */
  struct CUstream_st *s = usable(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  size_t total = 0, off[FK_MAXARGS];
  for (int i = 0; i < m->n_args; i++) off[i] = total, total += (m->sizes[i] + 15) / 16 * 16;
  fake_launch *l = calloc(1, sizeof *l + total);
  l->fn = m->fn, l->grid = grid, l->block = block, l->shmem = shmem;
  for (int i = 0; i < m->n_args; i++) {
    l->args[i] = (char *)l->data + off[i];
    memcpy(l->args[i], args[i], m->sizes[i]);
  }
  op *o = calloc(1, sizeof *o);
  o->type = OP_KERNEL;
  o->fn = run_launch;
  o->arg = l;
  enqueue(s, o);
  return OK();
}
