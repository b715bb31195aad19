/*
 * test_stop.c - zo_request_stop() (zoffload/status.h): on the host device, a
 * copy over an emulated link of 1e-9 GB/s (1 byte/s: 4096 s for 4 KiB) ends
 * once a stop is requested from another thread, and lands with the right
 * bytes; zo_stop_reset() brings the emulation back. It does not test signal
 * delivery (tests/zo_train_signal.sh does, through zo-train).
 * Exit 0 pass, 1 fail.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "zo_test.h"
#include "zoffload/device.h"

static void *stopper(void *arg) {
  (void)arg;
  struct timespec d = {0, 200 * 1000000L};
  nanosleep(&d, NULL);
  zo_request_stop();
  return NULL;
}

int main(void) {
  enum { N = 4096 };
  zo_device_t *dev = NULL;
  zo_stream_t *s = NULL;
  void *d = NULL;
  static unsigned char src[N], back[N];
  for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 7 + 1);
  CHECK(zo_stop_requested() == 0);
  CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, 0, &dev));
  CHECK_OK(zo_stream_create(dev, &s));
  CHECK_OK(zo_device_malloc(dev, N, &d));
  CHECK_OK(zo_device_set_link_gbps(dev, 1e-9));

  /* 1. A queued copy that the link would hold for 4096 s: a stop 0.2 s in ends the wait; the bytes landed. */
  pthread_t th;
  const double t0 = zo_clock_s();
  CHECK_OK(zo_memcpy_async(s, d, src, N, ZO_COPY_H2D));
  CHECK(pthread_create(&th, NULL, stopper, NULL) == 0);
  CHECK_OK(zo_stream_synchronize(s));
  const double waited = zo_clock_s() - t0;
  pthread_join(th, NULL);
  printf(
      "a 4 KiB copy over a 1 byte/s link: stop requested after 0.2 s, synchronize returned after %.3f s\n",
      waited);
  CHECK(waited < 600); /* generous: without the stop it is 4096 s */
  CHECK(zo_stop_requested() == 1);
  /* 2. While the stop stands, copies are not throttled (a synchronous one here), bytes unchanged. */
  CHECK_OK(zo_memcpy(dev, back, d, N, ZO_COPY_D2H));
  CHECK(memcmp(back, src, N) == 0);
  zo_link_stats ls;
  CHECK_OK(zo_device_link_stats(dev, &ls));
  CHECK(ls.h2d_bytes == N && ls.d2h_bytes == N);

  /* 3. zo_stop_reset() withdraws it: the link is emulated again (a 1 GB/s link, 1 MiB: >= 1 ms). */
  zo_stop_reset();
  CHECK(zo_stop_requested() == 0);
  CHECK_OK(zo_device_set_link_gbps(dev, 1.0));
  void *d2 = NULL;
  static unsigned char big[1 << 20];
  CHECK_OK(zo_device_malloc(dev, sizeof big, &d2));
  const double t1 = zo_clock_s();
  CHECK_OK(zo_memcpy(dev, d2, big, sizeof big, ZO_COPY_H2D));
  const double took = zo_clock_s() - t1;
  printf(
      "after zo_stop_reset(): 1 MiB over a 1 GB/s link took %.4f s (>= 0.001 s: emulated again)\n",
      took);
  CHECK(took >= 0.001);
  zo_device_free(dev, d2);
  zo_device_free(dev, d);
  zo_stream_destroy(s);
  zo_device_destroy(dev);
  return zo_test_finish("test_stop");
}
