/*
 * test_fakecuda.c - the stand-in runtime (tests/fake_cudart.c) itself, and the
 * orders zoffload's callers must keep with it: a wrapped stream is destroyed
 * (zo_stream_destroy) before its native stream (cudaStreamDestroy), as
 * zo-train's train_model_destroy must do; any use of a destroyed stream or
 * event aborts the process with a message; a failed or not-ready call stays
 * the thread's last error until cudaGetLastError reads it.
 * Not a GPU test: run only against the stand-in (ctest test_fakecuda), where
 * the aborts are checked in child processes forked before any CUDA call.
 */
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
         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), buf, n && buf[n - 1] == '\n' ? "" : "\n");
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
  CHECK(cudaStreamQuery(raw) == cudaSuccess); /* zo_stream_destroy synchronized it and left it alive */
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

int main(void) {
  /* children first: fork before this process starts any stand-in thread */
  expect_abort("old destroy order", child_old_destroy_order,
               "fake_cudart: cudaStreamSynchronize on a destroyed stream");
  expect_abort("destroyed event", child_destroyed_event, "fake_cudart: cudaEventQuery on a destroyed event");
  expect_abort("stream destroyed twice", child_destroyed_stream_twice,
               "fake_cudart: cudaStreamDestroy on a destroyed stream");
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    printf("test_fakecuda: no CUDA device\n");
    return ZO_TEST_SKIP;
  }
  test_wrap_destroy_order();
  test_sticky_last_error();
  return zo_test_finish("test_fakecuda");
}
