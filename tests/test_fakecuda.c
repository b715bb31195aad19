/*
 * test_fakecuda.c - the stand-in runtime (tests/fake_cudart.c) itself, and the
 * orders zoffload's callers must keep with it: a wrapped stream is destroyed
 * (zo_stream_destroy) before its native stream (cudaStreamDestroy), as
 * zo-train's train_model_destroy must do; any use of a destroyed stream or
 * event aborts the process with a message; a failed or not-ready call stays
 * the thread's last error until cudaGetLastError reads it; the destination
 * of an asynchronous copy or memset holds poison (0xA5) until it is
 * synchronized; a CUDA call from a host func aborts; a simulated fault is
 * sticky; the legacy default stream synchronizes with blocking streams;
 * cudaHostRegister is page-granular and can be limited; the properties are
 * a plausible H100's.
 * Not a GPU test: run only against the stand-in (ctest test_fakecuda), where
 * the aborts are checked in child processes forked before any CUDA call.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "zo_test.h"
#include "zoffload/device.h"

/* ------------------------------------------------------------ children: each aborts in the stand-in */

/* zo-train's old train_model_destroy order: the native stream first, then the handle that wraps it. */
static void child_old_destroy_order(void) {
  zo_device_t *dev = NULL;
  cudaStream_t raw = NULL;
  zo_stream_t *w = NULL;
  if (zo_device_create(ZO_DEVICE_CUDA, 0, 0, &dev) != ZO_OK) exit(3);
  if (cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) != cudaSuccess) exit(3);
  if (zo_stream_wrap(dev, (void *)raw, &w) != ZO_OK) exit(3);
  (void)cudaStreamDestroy(raw);
  zo_stream_destroy(w); /* synchronizes the destroyed native stream */
  zo_device_destroy(dev);
  exit(0);
}

static void child_destroyed_event(void) {
  cudaEvent_t ev = NULL;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) exit(3);
  if (cudaEventDestroy(ev) != cudaSuccess) exit(3);
  (void)cudaEventQuery(ev);
  exit(0);
}

static void child_destroyed_stream_twice(void) {
  cudaStream_t raw = NULL;
  if (cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) != cudaSuccess) exit(3);
  if (cudaStreamDestroy(raw) != cudaSuccess) exit(3);
  (void)cudaStreamDestroy(raw);
  exit(0);
}

/* A CUDA call from inside a host func: CUDA forbids it; the stand-in aborts naming the call. */
static void cb_calls_cuda(void *arg) {
  (void)arg;
  int d = 0;
  (void)cudaGetDevice(&d);
}
static void child_cuda_call_in_host_func(void) {
  cudaStream_t s = NULL;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) exit(3);
  if (cudaLaunchHostFunc(s, cb_calls_cuda, NULL) != cudaSuccess) exit(3);
  (void)cudaStreamSynchronize(s);
  exit(0);
}

/* A sticky fault: FAKE_CUDA_FAULT_AFTER=2 makes the third copy fail with cudaErrorIllegalAddress, and from then on
 * every call (raw or through zoffload) fails with it; cudaGetLastError returns it without clearing it. Exit status:
 * the number of failed checks. */
static void child_fault_after(void) {
  enum { N = 4096 };
  setenv("FAKE_CUDA_FAULT_AFTER", "2", 1);
  zo_device_t *dev = NULL;
  REQUIRE_OK(zo_device_create(ZO_DEVICE_CUDA, 0, 0, &dev));
  zo_stream_t *w = NULL;
  REQUIRE_OK(zo_stream_create(dev, &w));
  void *d = NULL;
  REQUIRE_OK(zo_device_malloc(dev, N, &d));
  static char h[N];
  CHECK_OK(zo_memcpy_async(w, d, h, N, ZO_COPY_H2D));
  CHECK_OK(zo_memcpy_async(w, h, d, N, ZO_COPY_D2H));
  CHECK_ST(zo_memcpy_async(w, d, h, N, ZO_COPY_H2D), ZO_ERR_CUDA);
  CHECK_HAS(zo_last_error(), "cudaErrorIllegalAddress");
  CHECK_ST(zo_stream_synchronize(w), ZO_ERR_CUDA); /* sticky: a later, valid call fails too */
  void *p = NULL;
  CHECK_EQ(cudaMalloc(&p, 256), cudaErrorIllegalAddress);
  CHECK_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  CHECK_EQ(cudaGetLastError(), cudaErrorIllegalAddress); /* not cleared by reading it */
  fflush(stdout);
  _exit(zo_test_failures);
}

/* The same through the test hook, with no copy at all. */
static void child_fault_hook(void) {
  void (*inject)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "fake_cuda_inject_fault");
  REQUIRE(inject);
  cudaStream_t s = NULL;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  inject(cudaErrorIllegalAddress);
  CHECK_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
  CHECK_EQ(cudaStreamQuery(s), cudaErrorIllegalAddress);
  CHECK_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  CHECK_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  fflush(stdout);
  _exit(zo_test_failures);
}

/* Run @fn in a child; it must exit 0 (its checks print their own failures). */
static void expect_exit0(const char *name, void (*fn)(void)) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    fn();
    _exit(zo_test_failures ? 1 : 0); /* (a REQUIRE that failed returned early) */
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  printf("%s: child %s %d\n", name, WIFSIGNALED(status) ? "killed by signal" : "exited",
         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Run @fn in a child; it must die of SIGABRT with @msg on its stderr. */
static void expect_abort(const char *name, void (*fn)(void), const char *msg) {
  int fd[2];
  REQUIRE(pipe(fd) == 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    fn();
    exit(0);
  }
  close(fd[1]);
  char buf[4096];
  size_t n = 0;
  ssize_t r;
  while (n < sizeof buf - 1 && (r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
  close(fd[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  printf("%s: child %s %d; stderr: %s%s", name, WIFSIGNALED(status) ? "killed by signal" : "exited",
         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), buf,
         n && buf[n - 1] == '\n' ? "" : "\n");
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  CHECK_HAS(buf, msg);
}

/* ------------------------------------------------------------ in this process */

/* The fixed order: the wrapping handle first (it synchronizes the live native stream), then the native stream. */
static void test_wrap_destroy_order(void) {
  enum { N = 4096 };
  zo_device_t *dev = NULL;
  CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, 0, &dev));
  REQUIRE(dev);
  void *d = NULL;
  CHECK_OK(zo_device_malloc(dev, N, &d));
  cudaStream_t raw = NULL;
  REQUIRE(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) == cudaSuccess);
  zo_stream_t *w = NULL;
  CHECK_OK(zo_stream_wrap(dev, (void *)raw, &w));
  CHECK_OK(zo_memset_async(w, d, 0x5a, N));
  zo_stream_destroy(w);
  /* zo_stream_destroy synchronized it and left it alive */
  CHECK(cudaStreamQuery(raw) == cudaSuccess);
  CHECK(cudaStreamDestroy(raw) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK_OK(zo_device_free(dev, d));
  zo_device_destroy(dev);
}

static atomic_int g_release;
static void block_until_released(void *arg) {
  (void)arg;
  while (!atomic_load(&g_release)) usleep(1000);
}

/* Like CUDA: a not-ready query (or any failure) stays the last error through later successful calls, until read. */
static void test_sticky_last_error(void) {
  cudaStream_t s = NULL;
  cudaEvent_t ev = NULL;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  atomic_store(&g_release, 0);
  CHECK(cudaLaunchHostFunc(s, block_until_released, NULL) == cudaSuccess);
  CHECK(cudaEventRecord(ev, s) == cudaSuccess);
  CHECK(cudaEventQuery(ev) == cudaErrorNotReady);
  int n = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess); /* a success leaves the error */
  CHECK(cudaStreamGetFlags(s, &(unsigned){0}) == cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaErrorNotReady);
  CHECK_EQ(cudaGetLastError(), cudaSuccess); /* read once, cleared */
  atomic_store(&g_release, 1);
  CHECK(cudaEventSynchronize(ev) == cudaSuccess);
  CHECK(cudaEventQuery(ev) == cudaSuccess);
  CHECK(cudaSetDevice(-1) == cudaErrorInvalidDevice);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);

  /* zoffload's own not-ready query leaves nothing behind (gpu/device_cuda.c clears it). */
  zo_device_t *dev = NULL;
  CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, 0, &dev));
  REQUIRE(dev);
  zo_stream_t *w = NULL;
  zo_event_t *e = NULL;
  CHECK_OK(zo_stream_create(dev, &w));
  CHECK_OK(zo_event_create(dev, &e));
  atomic_store(&g_release, 0);
  CHECK_OK(zo_launch_host_func(w, block_until_released, NULL));
  CHECK_OK(zo_event_record(e, w));
  int done = 1, idle = 1;
  CHECK_OK(zo_event_query(e, &done));
  CHECK_OK(zo_stream_query(w, &idle));
  CHECK(!done && !idle);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  atomic_store(&g_release, 1);
  CHECK_OK(zo_event_synchronize(e));
  zo_event_destroy(e);
  zo_stream_destroy(w);
  zo_device_destroy(dev);
  CHECK(cudaEventDestroy(ev) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
}

/* An asynchronous copy or memset: its destination holds 0xA5 until the stream is synchronized, so a host read that
 * skips the sync sees poison, not data. The stream's copies start after 1 s (FAKE_CUDA_LATENCY_US), so the query
 * right after the read finds them not finished; a runtime that completes them at once fails here. */
static void test_poison_until_sync(void) {
  enum { N = 8192 };
  cudaStream_t fast = NULL, s = NULL;
  REQUIRE(cudaStreamCreateWithFlags(&fast, cudaStreamNonBlocking) == cudaSuccess);
  setenv("FAKE_CUDA_LATENCY_US", "1000000", 1); /* read by the worker of each new stream */
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  unsetenv("FAKE_CUDA_LATENCY_US");
  unsigned char *h = aligned_alloc(4096, N), *want = malloc(N);
  REQUIRE(h && want);
  memset(h, 0, N);
  REQUIRE(cudaHostRegister(h, N, cudaHostRegisterDefault) == cudaSuccess);
  void *d = NULL;
  REQUIRE(cudaMalloc(&d, N) == cudaSuccess);
  for (int i = 0; i < N; i++) want[i] = (unsigned char)(i * 7 + 1);
  memcpy(h, want, N);
  /* H2D from registered memory, then D2H back into it after a memset of the host copy */
  CHECK(cudaMemcpyAsync(d, h, N, cudaMemcpyHostToDevice, fast) == cudaSuccess);
  CHECK(cudaStreamSynchronize(fast) == cudaSuccess);
  memset(h, 0, N);
  CHECK(cudaMemcpyAsync(h, d, N, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  unsigned char first = h[0], last = h[N - 1]; /* no sync: a missing-sync bug */
  CHECK_EQ(cudaStreamQuery(s),
           cudaErrorNotReady); /* (fails only after a 1 s stall between these two lines) */
  (void)cudaGetLastError();
  CHECK_EQ(first, 0xA5);
  CHECK_EQ(last, 0xA5);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK_BYTES("D2H after sync", h, want, N);
  /* a memset: poison until synchronized, then the value */
  CHECK(cudaMemsetAsync(d, 0x3c, N, s) == cudaSuccess);
  first = ((unsigned char *)d)[0]; /* (the stand-in's device memory is host memory) */
  CHECK_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  (void)cudaGetLastError();
  CHECK_EQ(first, 0xA5);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK_EQ(((unsigned char *)d)[N - 1], 0x3c);
  CHECK(cudaHostUnregister(h) == cudaSuccess);
  CHECK(cudaFree(d) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(fast) == cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  free(h);
  free(want);
}

/* 1 when @s stays not ready for 100 ms of polling (it waits on a gate), 0 when it completes. */
static int stays_blocked(cudaStream_t s) {
  for (int i = 0; i < 100; i++) {
    if (cudaStreamQuery(s) == cudaSuccess) return 0;
    (void)cudaGetLastError();
    usleep(1000);
  }
  return 1;
}

/* The legacy default stream waits for earlier work of blocking streams, and they for its earlier work; a
 * non-blocking stream waits for neither, the per-thread default stream only for the legacy stream. */
static void test_legacy_stream(void) {
  enum { N = 4096 };
  cudaStream_t b = NULL, nb = NULL;
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamDefault) == cudaSuccess); /* blocking */
  REQUIRE(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking) == cudaSuccess);
  void *d = NULL;
  REQUIRE(cudaMalloc(&d, 2 * N) == cudaSuccess);
  /* blocking stream gated: the legacy stream's memset waits, the non-blocking stream's does not */
  atomic_store(&g_release, 0);
  CHECK(cudaLaunchHostFunc(b, block_until_released, NULL) == cudaSuccess);
  /* the per-thread default stream syncs with the legacy stream only, not with other blocking streams */
  CHECK(cudaMemsetAsync((char *)d + N, 4, N, cudaStreamPerThread) == cudaSuccess);
  /* (a hang here: the ctest timeout) */
  CHECK(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  CHECK(cudaMemsetAsync(d, 1, N, cudaStreamLegacy) == cudaSuccess);
  CHECK(cudaMemsetAsync((char *)d + N, 2, N, nb) == cudaSuccess);
  CHECK(cudaStreamSynchronize(nb) == cudaSuccess); /* (a hang here: the ctest timeout) */
  CHECK(stays_blocked(cudaStreamLegacy));
  atomic_store(&g_release, 1);
  CHECK(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  CHECK_EQ(((unsigned char *)d)[0], 1);
  /* legacy stream gated: the blocking stream's memset waits */
  atomic_store(&g_release, 0);
  CHECK(cudaLaunchHostFunc(0, block_until_released, NULL) == cudaSuccess);
  CHECK(cudaMemsetAsync(d, 3, N, b) == cudaSuccess);
  CHECK(stays_blocked(b));
  atomic_store(&g_release, 1);
  CHECK(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK_EQ(((unsigned char *)d)[N - 1], 3);
  CHECK(cudaStreamSynchronize(0) == cudaSuccess);
  CHECK(cudaFree(d) == cudaSuccess);
  CHECK(cudaStreamDestroy(nb) == cudaSuccess);
  CHECK(cudaStreamDestroy(b) == cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
}

/* cudaHostRegister pins whole pages: two buffers that share a page conflict; FAKE_CUDA_REG_LIMIT caps the total. */
static void test_host_register_pages(void) {
  long pg = sysconf(_SC_PAGESIZE);
  char *buf = aligned_alloc((size_t)pg, (size_t)pg * 4);
  REQUIRE(buf);
  CHECK(cudaHostRegister(buf, 100, cudaHostRegisterDefault) == cudaSuccess);
  CHECK_EQ(cudaHostRegister(buf + 200, 100, cudaHostRegisterDefault),
           cudaErrorHostMemoryAlreadyRegistered);
  CHECK_EQ(cudaGetLastError(), cudaErrorHostMemoryAlreadyRegistered);
  /* the next page: fine */
  CHECK(cudaHostRegister(buf + pg, 100, cudaHostRegisterDefault) == cudaSuccess);
  CHECK(cudaHostUnregister(buf) == cudaSuccess);
  CHECK(cudaHostUnregister(buf + pg) == cudaSuccess);
  char lim[32];
  snprintf(lim, sizeof lim, "%ld", 2 * pg);
  setenv("FAKE_CUDA_REG_LIMIT", lim, 1);
  CHECK(cudaHostRegister(buf, (size_t)pg, cudaHostRegisterDefault) == cudaSuccess);
  /* counts one whole page */
  CHECK(cudaHostRegister(buf + pg, 1, cudaHostRegisterDefault) == cudaSuccess);
  CHECK_EQ(cudaHostRegister(buf + 2 * pg, 1, cudaHostRegisterDefault), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  CHECK(cudaHostUnregister(buf + pg) == cudaSuccess);
  CHECK(cudaHostRegister(buf + 2 * pg, 1, cudaHostRegisterDefault) == cudaSuccess); /* room again */
  CHECK(cudaHostUnregister(buf) == cudaSuccess);
  CHECK(cudaHostUnregister(buf + 2 * pg) == cudaSuccess);
  unsetenv("FAKE_CUDA_REG_LIMIT");
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  free(buf);
}

/* A plausible device: an H100 80GB's properties, and cudaMemGetInfo agreeing with them. */
static void test_properties(void) {
  struct cudaDeviceProp p;
  REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  printf("test_properties: %s, sm_%d%d, %d SMs, %zu bytes, PCI %04x:%02x:%02x.0\n", p.name, p.major,
         p.minor, p.multiProcessorCount, p.totalGlobalMem, (unsigned)p.pciDomainID,
         (unsigned)p.pciBusID, (unsigned)p.pciDeviceID);
  CHECK_HAS(p.name, "Stand-in H100 80GB HBM3");
  CHECK_EQ(p.major, 9);
  CHECK_EQ(p.minor, 0);
  CHECK_EQ(p.multiProcessorCount, 132);
  CHECK(p.totalGlobalMem >= 80000000000ull && p.totalGlobalMem < 90000000000ull);
  CHECK(p.pciBusID > 0);
  CHECK_EQ(p.warpSize, 32);
  size_t fr = 0, tot = 0;
  CHECK(cudaMemGetInfo(&fr, &tot) == cudaSuccess);
  CHECK_EQ(tot, p.totalGlobalMem);
  CHECK(fr < tot);
  zo_device_t *dev = NULL;
  CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, 0, &dev));
  REQUIRE(dev);
  CHECK_HAS(zo_device_name(dev), "Stand-in H100 80GB HBM3 (sm_90");
  zo_device_destroy(dev);
}

int main(void) {
  /* children first: fork before this process starts any stand-in thread */
  expect_abort("old destroy order", child_old_destroy_order,
               "fake_cudart: cudaStreamSynchronize on a destroyed stream");
  expect_abort("destroyed event", child_destroyed_event,
               "fake_cudart: cudaEventQuery on a destroyed event");
  expect_abort("stream destroyed twice", child_destroyed_stream_twice,
               "fake_cudart: cudaStreamDestroy on a destroyed stream");
  expect_abort("CUDA call in a host func", child_cuda_call_in_host_func,
               "fake_cudart: cudaGetDevice called from inside a host func");
  expect_exit0("sticky fault (FAKE_CUDA_FAULT_AFTER=2)", child_fault_after);
  expect_exit0("sticky fault (fake_cuda_inject_fault)", child_fault_hook);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    printf("test_fakecuda: no CUDA device\n");
    return ZO_TEST_SKIP;
  }
  test_wrap_destroy_order();
  test_sticky_last_error();
  test_poison_until_sync();
  test_legacy_stream();
  test_host_register_pages();
  test_properties();
  return zo_test_finish("test_fakecuda");
}
