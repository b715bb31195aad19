/*
 * test_comm.c - the `self` collectives backend (one rank): rank/size/name,
 * all-gather, reduce-scatter and all-reduce results, in-place rules, argument
 * errors. Exit 0 pass, 1 fail. Multi-rank backends get their own tests.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/comm.h"

int main(void) {
  zo_comm_t *c = NULL;
  CHECK_OK(zo_comm_create_self(&c));
  if (!c) return 1;
  CHECK_EQ(zo_comm_rank(c), 0);
  CHECK_EQ(zo_comm_size(c), 1);
  CHECK(strcmp(zo_comm_backend(c), "self") == 0);
  CHECK_EQ(zo_comm_rank(NULL), -1);
  CHECK_EQ(zo_comm_size(NULL), 0);

  /* all-gather: recv = send (one rank), odd byte counts. */
  enum { N = 1031 };
  uint8_t send[N], recv[N + 8];
  for (int i = 0; i < N; i++) send[i] = (uint8_t)(i * 37 + 11);
  memset(recv, 0xee, sizeof recv);
  CHECK_OK(zo_comm_all_gather(c, send, recv, N));
  CHECK(memcmp(recv, send, N) == 0);
  CHECK_EQ(recv[N], 0xee); /* nothing past size * send_nbytes */
  CHECK_OK(zo_comm_all_gather(c, recv, recv, N)); /* in place: send == recv + rank*n */
  CHECK(memcmp(recv, send, N) == 0);
  CHECK_ST(zo_comm_all_gather(c, recv + 1, recv, N), ZO_ERR_INVALID_ARG); /* partial overlap */
  CHECK_ST(zo_comm_all_gather(c, NULL, recv, N), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_all_gather(NULL, send, recv, N), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_comm_all_gather(c, NULL, NULL, 0));

  /* reduce-scatter (sum over one rank = the block itself). */
  float fs[N], fr[N];
  double got[N], ref[N];
  for (int i = 0; i < N; i++) fs[i] = (float)i * 0.25f - 100.0f;
  memset(fr, 0, sizeof fr);
  CHECK_OK(zo_comm_reduce_scatter_f32(c, fs, fr, N));
  for (int i = 0; i < N; i++) {
    got[i] = fr[i];
    ref[i] = fs[i];
  }
  CHECK_CLOSE_ARRAY("reduce_scatter", got, ref, N, 0.0, 0.0);
  CHECK_OK(zo_comm_reduce_scatter_f32(c, fs, fs, N)); /* in place */
  CHECK_ST(zo_comm_reduce_scatter_f32(c, fs, fs + 1, N - 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_reduce_scatter_f32(c, fs, NULL, N), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_comm_reduce_scatter_f32(c, NULL, NULL, 0));

  /* all-reduce f64 in place: unchanged, including inf/nan flags. */
  double buf[5] = {1.5, -2.25, 1e300, INFINITY, 0.0};
  double want[5] = {1.5, -2.25, 1e300, INFINITY, 0.0};
  CHECK_OK(zo_comm_all_reduce_f64(c, buf, 5));
  CHECK_CLOSE_ARRAY("all_reduce", buf, want, 5, 0.0, 0.0);
  CHECK_ST(zo_comm_all_reduce_f64(c, NULL, 5), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_comm_all_reduce_f64(c, NULL, 0));

  CHECK_OK(zo_comm_barrier(c));
  CHECK_ST(zo_comm_barrier(NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_create_self(NULL), ZO_ERR_INVALID_ARG);
  zo_comm_destroy(c);
  zo_comm_destroy(NULL);

  return zo_test_finish("test_comm");
}
