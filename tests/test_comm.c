/*
 * test_comm.c - the collectives on any number of ranks.
 *   test_comm          the `self` backend: results, in-place rules, argument
 *                      errors, then the generic checks below on one rank;
 *   test_comm env      zo_comm_create_from_env() (under `mpirun -np N` the
 *                      `mpi` backend) and the generic checks on N ranks.
 * Generic checks: all-gather of odd byte counts (in place and not);
 * reduce-scatter and all-reduce in fp32, bf16 and fp16 (in place and not)
 * on small integers, whose sums are exact in any order, so the result must
 * equal the arithmetic here bit for bit; a 16-bit sum that needs rounding
 * equals round-to-nearest-even of the fp32 sum; f64 all-reduce; broadcast;
 * barrier; non-blocking forms started together and completed by test and
 * wait; a split into even and odd ranks.
 *   test_comm nccl     the same on the nccl backend (one GPU per rank; 77
 *                      without), plus collectives on device memory, host
 *                      buffers larger than the staging buffer (chunked) on a
 *                      GPU whose memory is otherwise full, an all-gather
 *                      from device memory into host memory, and sums that
 *                      round: the same bits on every rank (and, against the
 *                      stand-in libnccl, the sums in rank order). ctest runs
 *                      it on 1, 2 and 3 ranks against the stand-ins
 *                      (test_comm_nccl_fake, test_comm_nccl_fake_np2/_np3).
 *   test_comm nccl_fault hang|async_error
 *                      against the stand-in libnccl (tests/fake_nccl.c) with
 *                      FAKE_NCCL_HANG=1 or FAKE_NCCL_ASYNC_ERROR=1: the
 *                      collective ends in ZO_ERR_NCCL naming it, its bytes
 *                      and the rank count, the communicator is aborted and
 *                      refuses later work, and no CUDA error is left behind.
 *   test_comm external the `external` backend (zo_comm_create_external): two
 *                      ranks simulated by two threads whose callbacks meet at a
 *                      pthread barrier, the generic checks on both; then argument
 *                      errors, a callback's failure and its text, deferred
 *                      completion through test/wait, a missing split.
 * Exit 0 pass, 1 fail, 77 skip.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/comm.h"
#include "zoffload/device.h"

#define REQUIRE_OK_INT(expr)                                      \
  do {                                                            \
    if (!CHECK_OK(expr)) return zo_test_finish("test_comm nccl"); \
  } while (0)

static uint16_t ref_bf16(
    float f) { /* round to nearest even, written out here independently of the library */
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* binary16 of a finite float in the normal range or zero (the values here), round to nearest even, written
 * out here with frexpf/nearbyintf independently of the library's bit manipulation */
static uint16_t ref_f16(float f) {
  if (f == 0) return 0;
  int e;
  /* f = m 2^e, m in [0.5, 1): 11 significant bits */
  float q = nearbyintf(frexpf(fabsf(f), &e) * 2048.0f);
  if (q == 2048.0f) q = 1024.0f, e++;
  return (uint16_t)((f < 0 ? 0x8000 : 0) | ((e + 14) << 10) | ((int)q - 1024));
}
static float from_f16(uint16_t b) {
  if (!(b & 0x7fff)) return 0;
  float v = ldexpf((float)((b & 0x3ff) | 0x400), ((b >> 10) & 31) - 25);
  return b & 0x8000 ? -v : v;
}

/* Element i of block `blk` sent by rank q: a small integer, exact in every dtype and in every partial sum. */
static float val(int q, int blk, size_t i) { return (float)((q + 1) * (int)(i % 5) + blk - 3); }

static void store(zo_dtype t, void *buf, size_t i, float v) {
  if (t == ZO_DTYPE_F32)
    ((float *)buf)[i] = v;
  else
    ((uint16_t *)buf)[i] = t == ZO_DTYPE_BF16 ? ref_bf16(v) : ref_f16(v);
}
static float load(zo_dtype t, const void *buf, size_t i) {
  if (t == ZO_DTYPE_F32) return ((const float *)buf)[i];
  uint16_t b = ((const uint16_t *)buf)[i];
  return t == ZO_DTYPE_BF16 ? from_bf16(b) : from_f16(b);
}

static void generic(zo_comm_t *c) {
  const int R = zo_comm_rank(c), W = zo_comm_size(c);
  char what[128];

  /* all-gather: odd byte counts, out of place and in place */
  enum { NB = 1031 };
  uint8_t *send = malloc(NB), *recv = malloc((size_t)NB * W + 8);
  for (int i = 0; i < NB; i++) send[i] = (uint8_t)(i * 37 + 11 * R + 5);
  memset(recv, 0xee, (size_t)NB * W + 8);
  CHECK_OK(zo_comm_all_gather(c, send, recv, NB));
  int bad = 0;
  for (int r = 0; r < W; r++)
    for (int i = 0; i < NB; i++) bad += recv[(size_t)r * NB + i] != (uint8_t)(i * 37 + 11 * r + 5);
  CHECK_EQ(bad, 0);
  CHECK_EQ(recv[(size_t)NB * W], 0xee); /* nothing past size * send_nbytes */
  memset(recv, 0, (size_t)NB * W);
  memcpy(recv + (size_t)R * NB, send, NB);
  CHECK_OK(zo_comm_all_gather(c, recv + (size_t)R * NB, recv, NB)); /* in place */
  bad = 0;
  for (int r = 0; r < W; r++)
    for (int i = 0; i < NB; i++) bad += recv[(size_t)r * NB + i] != (uint8_t)(i * 37 + 11 * r + 5);
  CHECK_EQ(bad, 0);
  free(send);
  free(recv);

  /* reduce-scatter and all-reduce in every dtype */
  static const zo_dtype dts[] = {ZO_DTYPE_F32, ZO_DTYPE_BF16, ZO_DTYPE_F16};
  enum { N = 517 };
  for (int d = 0; d < 3; d++) {
    const zo_dtype t = dts[d];
    const size_t esz = zo_dtype_size(t);
    char *sb = malloc((size_t)W * N * esz), *rb = malloc(N * esz);
    for (int in_place = 0; in_place < 2; in_place++) {
      for (int blk = 0; blk < W; blk++)
        for (size_t i = 0; i < N; i++) store(t, sb, (size_t)blk * N + i, val(R, blk, i));
      void *dst = in_place ? sb + (size_t)R * N * esz : rb;
      CHECK_OK(zo_comm_reduce_scatter(c, sb, dst, N, t));
      bad = 0;
      for (size_t i = 0; i < N; i++) {
        float want = 0;
        for (int q = 0; q < W; q++) want += val(q, R, i);
        bad += load(t, dst, i) != want;
      }
      snprintf(what, sizeof what, "reduce_scatter %s%s: %d wrong elements", zo_dtype_name(t),
               in_place ? " in place" : "", bad);
      if (bad) FAIL_AT("%s", what);
    }
    /* all-reduce: rank q holds val(q, 0, i) */
    for (size_t i = 0; i < N; i++) store(t, rb, i, val(R, 0, i));
    CHECK_OK(zo_comm_all_reduce(c, rb, N, t));
    bad = 0;
    for (size_t i = 0; i < N; i++) {
      float want = 0;
      for (int q = 0; q < W; q++) want += val(q, 0, i);
      bad += load(t, rb, i) != want;
    }
    if (bad) FAIL_AT("all_reduce %s: %d wrong elements", zo_dtype_name(t), bad);
    /* a 16-bit sum that needs rounding: one rounding of the exact fp32 sum, to nearest even */
    if (t != ZO_DTYPE_F32) {
      float mine =
          1.0f + 0.0078125f * (float)(2 * R + 1); /* 1 + (2R+1) 2^-7: exact in bf16 and fp16 */
      store(t, rb, 0, mine);
      CHECK_OK(zo_comm_all_reduce(c, rb, 1, t));
      float sum = 0;
      for (int q = 0; q < W; q++) sum += 1.0f + 0.0078125f * (float)(2 * q + 1);
      uint16_t want = t == ZO_DTYPE_BF16 ? ref_bf16(sum) : ref_f16(sum);
      CHECK_EQ(((uint16_t *)rb)[0], want);
    }
    free(sb);
    free(rb);
  }

  /* f64 all-reduce: flags and norms, inf passes through */
  double buf[4] = {1.5 * (R + 1), -2.0, R == W - 1 ? INFINITY : 0.0, 1e300 / W};
  CHECK_OK(zo_comm_all_reduce_f64(c, buf, 4));
  CHECK_CLOSE(buf[0], 1.5 * W * (W + 1) / 2, 0, 0);
  CHECK_CLOSE(buf[1], -2.0 * W, 0, 0);
  CHECK(isinf(buf[2]));
  CHECK_CLOSE(buf[3], 1e300, 0, 1e-12);

  /* broadcast from the last rank */
  char bc[333];
  for (int i = 0; i < 333; i++) bc[i] = (char)(R == W - 1 ? i * 3 + 1 : 0);
  CHECK_OK(zo_comm_broadcast(c, bc, sizeof bc, W - 1));
  bad = 0;
  for (int i = 0; i < 333; i++) bad += bc[i] != (char)(i * 3 + 1);
  CHECK_EQ(bad, 0);
  CHECK_OK(zo_comm_barrier(c));

  /* non-blocking: a reduce-scatter (bf16, in place), an all-gather and an all-reduce in flight at once */
  uint16_t *rs = malloc((size_t)W * N * 2);
  float *ag = malloc((size_t)W * N * 4), *ar = malloc(N * 4);
  for (int blk = 0; blk < W; blk++)
    for (size_t i = 0; i < N; i++) rs[(size_t)blk * N + i] = ref_bf16(val(R, blk, i));
  for (size_t i = 0; i < N; i++)
    ag[(size_t)R * N + i] = (float)R * 1000 + (float)i, ar[i] = (float)i;
  zo_comm_req_t *q1 = NULL, *q2 = NULL, *q3 = NULL;
  CHECK_OK(zo_comm_ireduce_scatter(c, rs, rs + (size_t)R * N, N, ZO_DTYPE_BF16, &q1));
  CHECK_OK(zo_comm_iall_gather(c, ag + (size_t)R * N, ag, N * 4, &q2));
  CHECK_OK(zo_comm_iall_reduce(c, ar, N, ZO_DTYPE_F32, &q3));
  int done = 0, polls = 0;
  while (!done && q2) {
    CHECK_OK(zo_comm_test(q2, &done));
    polls++;
  }
  CHECK_OK(zo_comm_wait(q3));
  CHECK_OK(zo_comm_wait(q1));
  bad = 0;
  for (size_t i = 0; i < N; i++) {
    float want = 0;
    for (int q = 0; q < W; q++) want += val(q, R, i);
    bad += from_bf16(rs[(size_t)R * N + i]) != want;
    bad += ar[i] != (float)i * (float)W;
    for (int r = 0; r < W; r++) bad += ag[(size_t)r * N + i] != (float)r * 1000 + (float)i;
  }
  CHECK_EQ(bad, 0);
  CHECK(polls >= 1);
  free(rs);
  free(ag);
  free(ar);

  /* a split: even and odd ranks */
  zo_comm_t *sub = NULL;
  CHECK_OK(zo_comm_split(c, R % 2, R, &sub));
  if (sub) {
    CHECK_EQ(zo_comm_size(sub), (W + 1 - R % 2) / 2);
    CHECK_EQ(zo_comm_rank(sub), R / 2);
    double r = R;
    CHECK_OK(zo_comm_all_reduce_f64(sub, &r, 1));
    double want = 0;
    for (int q = R % 2; q < W; q += 2) want += q;
    CHECK_CLOSE(r, want, 0, 0);
    zo_comm_destroy(sub);
  }
  printf("ok: generic collectives on %d rank%s (backend %s), rank %d\n", W, W == 1 ? "" : "s",
         zo_comm_backend(c), R);
}

static void self_only(void) {
  zo_comm_t *c = NULL;
  CHECK_OK(zo_comm_create_self(&c));
  if (!c) return;
  CHECK_EQ(zo_comm_rank(c), 0);
  CHECK_EQ(zo_comm_size(c), 1);
  CHECK(strcmp(zo_comm_backend(c), "self") == 0);
  CHECK_EQ(zo_comm_rank(NULL), -1);
  CHECK_EQ(zo_comm_size(NULL), 0);

  uint8_t buf[64];
  float fs[16];
  CHECK_ST(zo_comm_all_gather(c, buf + 1, buf, 32), ZO_ERR_INVALID_ARG); /* partial overlap */
  CHECK_ST(zo_comm_all_gather(c, NULL, buf, 8), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_all_gather(NULL, buf, buf, 8), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_comm_all_gather(c, NULL, NULL, 0));
  CHECK_ST(zo_comm_reduce_scatter_f32(c, fs, fs + 1, 8), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_reduce_scatter_f32(c, fs, NULL, 8), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_comm_reduce_scatter_f32(c, NULL, NULL, 0));
  CHECK_ST(zo_comm_reduce_scatter(c, fs, fs, 4, (zo_dtype)7), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_all_reduce(c, fs, 4, (zo_dtype)7), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_all_reduce(c, NULL, 4, ZO_DTYPE_BF16), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_all_reduce_f64(c, NULL, 5), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_comm_all_reduce_f64(c, NULL, 0));
  CHECK_ST(zo_comm_broadcast(c, buf, 8, 1), ZO_ERR_INVALID_ARG); /* root outside [0, 1) */
  CHECK_HAS(zo_last_error(), "root 1");
  CHECK_ST(zo_comm_broadcast(c, NULL, 8, 0), ZO_ERR_INVALID_ARG);
  zo_comm_req_t *r = (zo_comm_req_t *)buf;
  CHECK_ST(zo_comm_iall_gather(c, NULL, buf, 8, &r), ZO_ERR_INVALID_ARG);
  CHECK(r == NULL); /* nothing started on an error */
  int done;
  CHECK_ST(zo_comm_test(NULL, &done), ZO_ERR_INVALID_ARG);
  CHECK_OK(zo_comm_wait(NULL));
  CHECK_ST(zo_comm_barrier(NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_create_self(NULL), ZO_ERR_INVALID_ARG);
  zo_comm_t *s2 = NULL;
  CHECK_ST(zo_comm_split(c, -1, 0, &s2), ZO_ERR_INVALID_ARG);
  generic(c);
  zo_comm_destroy(c);
  zo_comm_destroy(NULL);

  /* the launcher's variables */
  zo_launch_info li;
  unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("PMI_RANK"),
      unsetenv("PMI_SIZE");
  setenv("RANK", "3", 1), setenv("WORLD_SIZE", "4", 1), setenv("LOCAL_RANK", "1", 1),
      setenv("LOCAL_WORLD_SIZE", "2", 1);
  CHECK_OK(zo_launch_info_get(&li));
  CHECK_EQ(li.rank, 3);
  CHECK_EQ(li.world_size, 4);
  CHECK_EQ(li.local_rank, 1);
  CHECK_EQ(li.local_size, 2);
  CHECK(strcmp(li.source, "torchrun") == 0);
  setenv("RANK", "4", 1);
  CHECK_ST(zo_launch_info_get(&li), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "RANK=4 is not below WORLD_SIZE=4");
  setenv("RANK", "x1", 1);
  CHECK_ST(zo_launch_info_get(&li), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "RANK='x1'");
  unsetenv("RANK");
  CHECK_ST(zo_launch_info_get(&li), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "WORLD_SIZE is set but RANK is not");
  unsetenv("WORLD_SIZE"), unsetenv("LOCAL_RANK"), unsetenv("LOCAL_WORLD_SIZE");
  CHECK_OK(zo_launch_info_get(&li));
  CHECK_EQ(li.world_size, 1);
  CHECK(strcmp(li.source, "none") == 0);
  zo_comm_t *e = NULL;
  CHECK_OK(zo_comm_create_from_env(&e)); /* one rank: self */
  CHECK(e && strcmp(zo_comm_backend(e), "self") == 0);
  zo_comm_destroy(e);
}

/* Rank q's element i for the rounding checks: a float of 24 significant bits, whose sums round. */
static float rough(int q, size_t i) {
  uint32_t h = (uint32_t)(q + 1) * 0x9e3779b9u ^ (uint32_t)i * 0x85ebca6bu;
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
  return ((float)(h & 0xffffff) - 8388608.0f) * (1.0f / 4096.0f) * (1.0f + (float)(i % 7));
}

/*
 * Sums that round, in device memory: an fp32 all-reduce gives the same bits on every rank (gathered and compared);
 * against the stand-in libnccl (tests/fake_nccl.c: sums in rank order) the all-reduce and a reduce-scatter equal
 * ((x_0 + x_1) + x_2) + ... in fp32 bit for bit, and a bf16 all-reduce that sum of the bf16 inputs, rounded once.
 */
static void same_bits_across_ranks(zo_device_t *dev, zo_comm_t *c) {
  const int W = zo_comm_size(c), R = zo_comm_rank(c);
  const int standin = dlsym(RTLD_DEFAULT, "fake_cuda_hostview") != NULL;
  enum { N = 3001 };
  float *x = malloc((size_t)W * N * 4), *all = malloc((size_t)W * N * 4), *want = malloc(N * 4);
  void *d = NULL, *dg = NULL;
  if (!CHECK_OK(zo_device_malloc(dev, (size_t)W * N * 4, &d)) ||
      !CHECK_OK(zo_device_malloc(dev, (size_t)W * N * 4, &dg)))
    return;
  for (size_t i = 0; i < N; i++) {
    x[i] = rough(R, i);
    float s = rough(0, i);
    for (int q = 1; q < W; q++) s += rough(q, i);
    want[i] = s;
  }
  CHECK_OK(zo_memcpy(dev, d, x, N * 4, ZO_COPY_H2D));
  CHECK_OK(zo_comm_all_reduce(c, d, N, ZO_DTYPE_F32));
  CHECK_OK(zo_comm_all_gather(c, d, dg, N * 4)); /* every rank's result, to compare */
  CHECK_OK(zo_memcpy(dev, all, dg, (size_t)W * N * 4, ZO_COPY_D2H));
  int differ = 0, off_order = 0;
  for (int q = 0; q < W; q++) differ += memcmp(all + (size_t)q * N, all, N * 4) != 0;
  for (size_t i = 0; i < N; i++) off_order += memcmp(&all[(size_t)R * N + i], &want[i], 4) != 0;
  if (differ) FAIL_AT("fp32 all-reduce: %d rank(s) got other bits than rank 0", differ);
  if (standin && off_order)
    FAIL_AT("fp32 all-reduce: %d of %d elements are not the sum in rank order", off_order, N);
  /* reduce-scatter: block b of rank q is rough(q, b * N + i); this rank gets block R summed */
  for (int b = 0; b < W; b++)
    for (size_t i = 0; i < N; i++) x[(size_t)b * N + i] = rough(R, (size_t)b * N + i);
  CHECK_OK(zo_memcpy(dev, d, x, (size_t)W * N * 4, ZO_COPY_H2D));
  CHECK_OK(zo_comm_reduce_scatter(c, d, dg, N, ZO_DTYPE_F32));
  CHECK_OK(zo_memcpy(dev, all, dg, N * 4, ZO_COPY_D2H));
  int rs_off = 0;
  for (size_t i = 0; i < N; i++) {
    const size_t j = (size_t)R * N + i;
    float s = rough(0, j);
    for (int q = 1; q < W; q++) s += rough(q, j);
    rs_off += memcmp(&all[i], &s, 4) != 0;
  }
  if (standin && rs_off)
    FAIL_AT("fp32 reduce-scatter: %d of %d elements are not the sum in rank order", rs_off, N);
  /* bf16: the inputs rounded to bf16, summed in fp32 in rank order, rounded once */
  uint16_t *hb = malloc(N * 2);
  for (size_t i = 0; i < N; i++) hb[i] = ref_bf16(rough(R, i));
  CHECK_OK(zo_memcpy(dev, d, hb, N * 2, ZO_COPY_H2D));
  CHECK_OK(zo_comm_all_reduce(c, d, N, ZO_DTYPE_BF16));
  CHECK_OK(zo_memcpy(dev, hb, d, N * 2, ZO_COPY_D2H));
  int bf_off = 0;
  for (size_t i = 0; i < N; i++) {
    float s = from_bf16(ref_bf16(rough(0, i)));
    for (int q = 1; q < W; q++) s += from_bf16(ref_bf16(rough(q, i)));
    bf_off += hb[i] != ref_bf16(s);
  }
  if (standin && bf_off)
    FAIL_AT("bf16 all-reduce: %d of %d elements are not the rank-order sum rounded once", bf_off,
            N);
  if (!differ && (!standin || (!off_order && !rs_off && !bf_off)))
    printf(
        "ok: nccl on %d rank%s: an fp32 all-reduce that rounds has the same bits on every rank%s\n",
        W, W == 1 ? "" : "s",
        standin
            ? "; it, a reduce-scatter and a bf16 all-reduce are the sums in rank order (stand-in)"
            : "");
  free(hb), free(x), free(all), free(want);
  zo_device_free(dev, d);
  zo_device_free(dev, dg);
}

/*
 * test_comm nccl: the generic checks on the nccl backend (host buffers, staged through the GPU), then device
 * buffers: a bf16 all-reduce and an in-place fp32 reduce-scatter in GPU memory. One GPU per rank: under mpirun
 * with fewer GPUs than ranks, or without a GPU, it skips (77).
 */
static int nccl_main(void) {
  zo_comm_t *boot = NULL;
  if (!CHECK_OK(zo_comm_create_from_env(&boot))) return zo_test_finish("test_comm nccl");
  const int W = zo_comm_size(boot), R = zo_comm_rank(boot);
  if (zo_device_cuda_count() < (W > 1 ? W : 1)) {
    printf("skip: %d CUDA device(s) for %d rank(s): the nccl backend needs one GPU per rank\n",
           zo_device_cuda_count(), W);
    zo_comm_destroy(boot);
    return ZO_TEST_SKIP;
  }
  zo_device_t *dev = NULL;
  zo_comm_t *c = NULL;
  if (!CHECK_OK(
          zo_device_create(ZO_DEVICE_CUDA, W > 1 ? R : zo_device_default_ordinal(), 0, &dev)) ||
      !CHECK_OK(zo_comm_create_nccl(dev, W > 1 ? boot : NULL, &c)))
    return zo_test_finish("test_comm nccl");
  CHECK(strcmp(zo_comm_backend(c), "nccl") == 0);
  CHECK(zo_comm_stream(c) != NULL);
  generic(c);
  enum { N = 4099 };
  uint16_t *h = malloc(N * 2);
  float *hf = malloc((size_t)W * N * 4);
  void *d = NULL, *df = NULL;
  REQUIRE_OK_INT(zo_device_malloc(dev, N * 2, &d));
  REQUIRE_OK_INT(zo_device_malloc(dev, (size_t)W * N * 4, &df));
  for (size_t i = 0; i < N; i++) h[i] = ref_bf16(val(R, 0, i));
  for (int b = 0; b < W; b++)
    for (size_t i = 0; i < N; i++) hf[(size_t)b * N + i] = val(R, b, i);
  CHECK_OK(zo_memcpy(dev, d, h, N * 2, ZO_COPY_H2D));
  CHECK_OK(zo_memcpy(dev, df, hf, (size_t)W * N * 4, ZO_COPY_H2D));
  CHECK_OK(zo_comm_all_reduce(c, d, N, ZO_DTYPE_BF16));
  CHECK_OK(zo_comm_reduce_scatter(c, df, (float *)df + (size_t)R * N, N, ZO_DTYPE_F32));
  CHECK_OK(zo_memcpy(dev, h, d, N * 2, ZO_COPY_D2H));
  CHECK_OK(zo_memcpy(dev, hf, df, (size_t)W * N * 4, ZO_COPY_D2H));
  int bad = 0;
  for (size_t i = 0; i < N; i++) {
    float a = 0, b = 0;
    for (int q = 0; q < W; q++) a += val(q, 0, i), b += val(q, R, i);
    bad += from_bf16(h[i]) != a;
    bad += hf[(size_t)R * N + i] != b;
  }
  CHECK_EQ(bad, 0);
  printf(
      "ok: nccl on %d rank%s: device-memory bf16 all-reduce and fp32 in-place reduce-scatter of %d elements exact\n",
      W, W == 1 ? "" : "s", N);
  /* all-gather from device memory into host memory (the send buffer is copied by its own kind, not as host) */
  uint16_t *hg = malloc((size_t)W * N * 2);
  memset(hg, 0, (size_t)W * N * 2);
  for (size_t i = 0; i < N; i++) h[i] = (uint16_t)(i * 7 + R);
  CHECK_OK(zo_memcpy(dev, d, h, N * 2, ZO_COPY_H2D));
  CHECK_OK(zo_comm_all_gather(c, d, hg, N * 2));
  bad = 0;
  for (int q = 0; q < W; q++)
    for (size_t i = 0; i < N; i++) bad += hg[(size_t)q * N + i] != (uint16_t)(i * 7 + q);
  CHECK_EQ(bad, 0);
  free(hg);
  zo_device_free(dev, d);
  zo_device_free(dev, df);
  d = df = NULL;
  same_bits_across_ranks(dev, c);
  /* Host buffers larger than the staging buffer, on a GPU otherwise full (as after the arena took its share):
   * they go through the communicator's bounded staging in chunks, allocating no device memory. */
  enum { FILL_MAX = 1 << 14 };
  void **fill = calloc(FILL_MAX, sizeof *fill);
  int nfill = 0;
  for (size_t sz = (size_t)1 << 30; sz >= ((size_t)1 << 20); sz >>= 5)
    while (nfill < FILL_MAX && zo_device_malloc(dev, sz, &fill[nfill]) == ZO_OK) nfill++;
  size_t avail = 0;
  CHECK_OK(zo_device_mem_available(dev, &avail));
  CHECK(avail < ZO_COMM_NCCL_STAGE_BYTES);
  const size_t BIG =
      ZO_COMM_NCCL_STAGE_BYTES + ZO_COMM_NCCL_STAGE_BYTES / 2 + 3; /* bytes per rank: 2 chunks */
  /* all-reduce twice: pageable, then page-locked (cudaHostRegister: the copies back are asynchronous, so the
   * result is read only after the collective's completion covers them) */
  const size_t ar_bytes = (BIG / 4 * 4 + 4095) / 4096 * 4096;
  float *ar = aligned_alloc(4096, ar_bytes);
  int (*host_register)(void *, size_t, unsigned) =
      (int (*)(void *, size_t, unsigned))dlsym(RTLD_DEFAULT, "cudaHostRegister");
  int (*host_unregister)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "cudaHostUnregister");
  for (int pinned = 0; pinned < 2; pinned++) {
    if (pinned && (!host_register || !host_unregister || host_register(ar, ar_bytes, 0) != 0)) {
      FAIL_AT("cudaHostRegister of %zu bytes failed", ar_bytes);
      break;
    }
    for (size_t i = 0; i < BIG / 4; i++) ar[i] = (float)(i % 1000) + (float)R;
    CHECK_OK(zo_comm_all_reduce(c, ar, BIG / 4, ZO_DTYPE_F32));
    bad = 0;
    for (size_t i = 0; i < BIG / 4; i++)
      bad += ar[i] != (float)W * (float)(i % 1000) + (float)(W * (W - 1) / 2);
    if (bad)
      FAIL_AT("all_reduce of %zu floats in %s host memory: %d wrong", BIG / 4,
              pinned ? "pinned" : "pageable", bad);
    if (pinned) host_unregister(ar);
  }
  free(ar);
  uint8_t *gs = malloc(BIG), *gr = malloc(BIG * (size_t)W);
  for (size_t i = 0; i < BIG; i++) gs[i] = (uint8_t)(i * 13 + (size_t)R);
  CHECK_OK(zo_comm_all_gather(c, gs, gr, BIG));
  bad = 0;
  for (int q = 0; q < W; q++)
    for (size_t i = 0; i < BIG; i++)
      bad += gr[(size_t)q * BIG + i] != (uint8_t)(i * 13 + (size_t)q);
  CHECK_EQ(bad, 0);
  for (size_t i = 0; i < BIG; i++) gs[i] = (uint8_t)(R == 0 ? i * 5 + 1 : 0);
  CHECK_OK(zo_comm_broadcast(c, gs, BIG, 0));
  bad = 0;
  for (size_t i = 0; i < BIG; i++) bad += gs[i] != (uint8_t)(i * 5 + 1);
  CHECK_EQ(bad, 0);
  free(gs), free(gr);
  const size_t RN = BIG / 2; /* bf16 elements per rank's block: 2 chunks */
  uint16_t *rsb = malloc(RN * 2 * (size_t)W);
  for (int b = 0; b < W; b++)
    for (size_t i = 0; i < RN; i++) rsb[(size_t)b * RN + i] = ref_bf16(val(R, b, i));
  CHECK_OK(zo_comm_reduce_scatter(c, rsb, rsb + (size_t)R * RN, RN, ZO_DTYPE_BF16)); /* in place */
  bad = 0;
  for (size_t i = 0; i < RN; i++) {
    float want = 0;
    for (int q = 0; q < W; q++) want += val(q, R, i);
    bad += from_bf16(rsb[(size_t)R * RN + i]) != want;
  }
  CHECK_EQ(bad, 0);
  free(rsb);
  CHECK_OK(zo_comm_barrier(c));
  for (int i = 0; i < nfill; i++) zo_device_free(dev, fill[i]);
  free(fill);
  printf(
      "ok: nccl host buffers of %zu bytes per rank (over %zu bytes of staging) on a full GPU (%zu bytes free), "
      "and an all-gather from device into host memory\n",
      BIG, (size_t)ZO_COMM_NCCL_STAGE_BYTES, avail);
  free(h), free(hf);
  zo_comm_destroy(c);
  zo_device_destroy(dev);
  zo_comm_destroy(boot);
  return zo_test_finish("test_comm nccl");
}

/* The runtime's per-thread last error, read (and cleared) through whatever libcudart the library loaded. */
static int cuda_last_error(void) {
  int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "cudaGetLastError");
  return get ? get() : 0;
}

/*
 * test_comm nccl_fault hang|async_error: against tests/fake_nccl.c with FAKE_NCCL_HANG=1 (a collective that never
 * completes) or FAKE_NCCL_ASYNC_ERROR=1 (a peer that failed: never completes, and ncclCommGetAsyncError says so).
 * Either ends in ZO_ERR_NCCL naming the collective, its bytes and the rank count (hang: after the 1 s timeout set
 * here; async_error: at once, under the default 600 s), the communicator aborted.
 */
static int nccl_fault_main(const char *mode) {
  const int hang = !strcmp(mode, "hang");
  if (!hang && strcmp(mode, "async_error")) {
    fprintf(stderr, "test_comm nccl_fault: mode '%s' is not hang or async_error\n", mode);
    return 1;
  }
  if (!getenv(hang ? "FAKE_NCCL_HANG" : "FAKE_NCCL_ASYNC_ERROR")) {
    printf("skip: test_comm nccl_fault %s runs against the stand-in libnccl with %s=1\n", mode,
           hang ? "FAKE_NCCL_HANG" : "FAKE_NCCL_ASYNC_ERROR");
    return ZO_TEST_SKIP;
  }
  zo_device_t *dev = NULL;
  zo_comm_t *c = NULL;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, 0, &dev)) ||
      !CHECK_OK(zo_comm_create_nccl(dev, NULL, &c)))
    return zo_test_finish("test_comm nccl_fault");
  CHECK_ST(zo_comm_set_timeout(c, 0), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "outside (0, 86400]");
  if (hang) CHECK_OK(zo_comm_set_timeout(c, 1.0));
  void *d = NULL;
  REQUIRE_OK_INT(zo_device_malloc(dev, 4096, &d));
  zo_comm_req_t *q = NULL;
  CHECK_OK(zo_comm_iall_reduce(c, d, 1024, ZO_DTYPE_F32, &q));
  int done = 1;
  if (hang) { /* a poll of a collective still running: not done, and cudaErrorNotReady not left behind */
    CHECK_OK(zo_comm_test(q, &done));
    CHECK_EQ(done, 0);
    CHECK_EQ(cuda_last_error(), 0);
  }
  CHECK_ST(zo_comm_wait(q), ZO_ERR_NCCL);
  const char *msg = zo_last_error();
  printf("error as reported: %s\n", msg);
  CHECK_HAS(msg, "all-reduce of 4096 bytes over 1 rank");
  CHECK_HAS(msg, "the communicator was aborted (ncclCommAbort)");
  CHECK_HAS(msg, hang ? "not complete after" : "NCCL reported an asynchronous error");
  if (hang) CHECK_HAS(msg, "zoffload.comm_timeout_s");
  CHECK_EQ(cuda_last_error(), 0);
  CHECK_ST(zo_comm_barrier(c), ZO_ERR_INVALID_USAGE); /* aborted: refused, naming why */
  CHECK_HAS(zo_last_error(),
            "barrier on a communicator that was aborted (all-reduce of 4096 bytes");
  /* returns: the aborted collective's stream drains; no ncclCommDestroy after the abort */
  zo_comm_destroy(c);
  zo_device_free(dev, d);
  zo_device_destroy(dev);
  return zo_test_finish("test_comm nccl_fault");
}


/* ------------------------------------------------------------ test_comm external */

/* Ranks simulated by threads of this process: a collective publishes each rank's buffer in slot[rank], meets the
 * others at the barrier, computes, and meets them again before anyone reuses a buffer. */
enum { XW_MAX = 4 };
typedef struct xworld {
  int size;
  pthread_barrier_t bar;
  const void *slot[XW_MAX];
  int color[XW_MAX], key[XW_MAX];
  struct xworld *made[XW_MAX]; /* split: the world each colour's lowest rank made */
} xworld;
typedef struct xctx {
  xworld *w;
  int rank;
  int fail_next; /* the next all_reduce fails with this status */
  int defer;     /* all_reduce hands back a handle whose first test says "not yet" */
  int tests, destroyed;
  int heap; /* freed by x_destroy */
} xctx;

static xworld *xworld_new(int size) {
  xworld *w = calloc(1, sizeof *w);
  w->size = size;
  pthread_barrier_init(&w->bar, NULL, (unsigned)size);
  return w;
}
static void xsync(xctx *x) { pthread_barrier_wait(&x->w->bar); }

static int x_all_gather(void *ctx, const void *send, void *recv, size_t nb, void **h) {
  xctx *x = ctx;
  void *mine =
      malloc(nb); /* in place: @send is a block of @recv, which the others' copies overwrite */
  memcpy(mine, send, nb);
  x->w->slot[x->rank] = mine;
  xsync(x);
  for (int r = 0; r < x->w->size; r++) memcpy((char *)recv + (size_t)r * nb, x->w->slot[r], nb);
  xsync(x);
  free(mine);
  *h = NULL;
  return 0;
}

static void xsum(xctx *x, size_t off, size_t n, zo_comm_elem t, void *out) {
  for (size_t i = 0; i < n; i++) {
    double s = 0;
    for (int r = 0; r < x->w->size; r++)
      s += t == ZO_COMM_ELEM_F64 ? ((const double *)x->w->slot[r])[off + i]
                                 : ((const float *)x->w->slot[r])[off + i];
    if (t == ZO_COMM_ELEM_F64)
      ((double *)out)[i] = s;
    else
      ((float *)out)[i] = (float)s; /* small integers in generic(): exact either way */
  }
}

static int x_reduce_scatter(void *ctx, const void *send, void *recv, size_t n, zo_comm_elem t,
                            void **h) {
  xctx *x = ctx;
  const size_t esz = t == ZO_COMM_ELEM_F64 ? 8 : 4;
  void *tmp = malloc(n * esz);
  x->w->slot[x->rank] = send;
  xsync(x);
  xsum(x, (size_t)x->rank * n, n, t, tmp);
  xsync(x); /* everyone has read the blocks before @recv (maybe one of them) is written */
  memcpy(recv, tmp, n * esz);
  free(tmp);
  *h = NULL;
  return 0;
}

static int x_all_reduce(void *ctx, void *buf, size_t n, zo_comm_elem t, void **h) {
  xctx *x = ctx;
  if (x->fail_next) {
    int st = x->fail_next;
    x->fail_next = 0;
    return st;
  }
  const size_t esz = t == ZO_COMM_ELEM_F64 ? 8 : 4;
  void *tmp = malloc(n * esz);
  x->w->slot[x->rank] = buf;
  xsync(x);
  xsum(x, 0, n, t, tmp);
  xsync(x);
  memcpy(buf, tmp, n * esz);
  free(tmp);
  *h = x->defer ? (void *)x : NULL;
  return 0;
}

static int x_broadcast(void *ctx, void *buf, size_t nb, int root, void **h) {
  xctx *x = ctx;
  x->w->slot[x->rank] = buf;
  xsync(x);
  if (x->rank != root) memcpy(buf, x->w->slot[root], nb);
  xsync(x);
  *h = NULL;
  return 0;
}

static int x_barrier(void *ctx, void **h) {
  xsync(ctx);
  *h = NULL;
  return 0;
}

static int x_wait(void *ctx, void *h) { return h == ctx ? 0 : ZO_ERR_INVALID_USAGE; }

static int x_test(void *ctx, void *h, int *done) {
  xctx *x = ctx;
  *done = ++x->tests > 1; /* "not yet" the first time */
  return h == ctx ? 0 : ZO_ERR_INVALID_USAGE;
}

static int x_split(void *ctx, int color, int key, void **nctx, int *nrank, int *nsize) {
  xctx *x = ctx;
  xworld *w = x->w;
  w->color[x->rank] = color, w->key[x->rank] = key;
  xsync(x);
  int lowest = x->rank, size = 0, rank = 0;
  for (int r = 0; r < w->size; r++) {
    if (w->color[r] != color) continue;
    if (r < lowest) lowest = r;
    size++;
    if (w->key[r] < key || (w->key[r] == key && r < x->rank)) rank++;
  }
  if (lowest == x->rank) w->made[x->rank] = xworld_new(size);
  xsync(x);
  xctx *n = calloc(1, sizeof *n);
  n->w = w->made[lowest], n->rank = rank, n->heap = 1;
  xsync(x);
  *nctx = n, *nrank = rank, *nsize = size;
  return 0;
}

static void x_destroy(
    void *ctx) { /* the worlds are left to the process: ranks destroy in any order */
  xctx *x = ctx;
  x->destroyed++;
  if (x->heap) free(x);
}

static void x_error(void *ctx, char *msg, size_t cap) {
  (void)ctx;
  snprintf(msg, cap, "peer rank 1 is gone");
}

static const zo_comm_external_ops x_ops = {.all_gather = x_all_gather,
                                           .reduce_scatter = x_reduce_scatter,
                                           .all_reduce = x_all_reduce,
                                           .broadcast = x_broadcast,
                                           .barrier = x_barrier,
                                           .wait = x_wait,
                                           .test = x_test,
                                           .split = x_split,
                                           .destroy = x_destroy,
                                           .error = x_error};

static void *x_rank_main(void *arg) {
  xctx *x = arg;
  zo_comm_t *c = NULL;
  CHECK_OK(zo_comm_create_external(&x_ops, x, x->rank, x->w->size, &c));
  if (!c) return NULL;
  CHECK(strcmp(zo_comm_backend(c), "external") == 0);
  CHECK_EQ(zo_comm_rank(c), x->rank);
  CHECK_EQ(zo_comm_size(c), x->w->size);
  CHECK(zo_comm_stream(c) == NULL);
  generic(c);
  zo_comm_destroy(c); /* x_destroy frees x */
  return NULL;
}

static int external_main(void) {
  /* two ranks */
  xworld *w = xworld_new(2);
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    xctx *x = calloc(1, sizeof *x);
    x->w = w, x->rank = r, x->heap = 1;
    pthread_create(&th[r], NULL, x_rank_main, x);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);

  /* one rank: arguments, errors, deferred completion */
  xctx one = {.w = xworld_new(1), .rank = 0}; /* on the stack: x_destroy leaves it alone */
  zo_comm_t *c = NULL;
  CHECK_ST(zo_comm_create_external(NULL, &one, 0, 1, &c), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_create_external(&x_ops, &one, 0, 1, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_comm_create_external(&x_ops, &one, 1, 1, &c), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "rank 1 of world size 1");
  CHECK_ST(zo_comm_create_external(&x_ops, &one, 0, 0, &c), ZO_ERR_INVALID_ARG);
  zo_comm_external_ops partial = x_ops;
  partial.test = NULL;
  CHECK_ST(zo_comm_create_external(&partial, &one, 0, 1, &c), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "ops->test is NULL");
  CHECK(c == NULL);

  partial = x_ops;
  partial.split = NULL, partial.destroy = NULL, partial.error = NULL; /* the optional ones */
  CHECK_OK(zo_comm_create_external(&partial, &one, 0, 1, &c));
  zo_comm_t *sub = NULL;
  CHECK_ST(zo_comm_split(c, 0, 0, &sub), ZO_ERR_UNSUPPORTED);
  CHECK_HAS(zo_last_error(), "no split");
  one.fail_next = 99; /* not a zo_status: taken as ZO_ERR_SYSTEM */
  float f[4] = {1, 2, 3, 4};
  CHECK_ST(zo_comm_all_reduce(c, f, 4, ZO_DTYPE_F32), ZO_ERR_SYSTEM);
  CHECK_HAS(zo_last_error(), "callback returned 99");
  zo_comm_destroy(c);

  CHECK_OK(zo_comm_create_external(&x_ops, &one, 0, 1, &c));
  one.fail_next = ZO_ERR_NCCL;
  CHECK_ST(zo_comm_all_reduce(c, f, 4, ZO_DTYPE_F32), ZO_ERR_NCCL);
  CHECK_HAS(
      zo_last_error(),
      "comm external: all_reduce of 4 fp32 elements failed (callback returned 8): peer rank 1 is gone");
  one.defer = 1; /* a handle: completed by test (after one "not yet") or wait */
  zo_comm_req_t *r = NULL;
  CHECK_OK(zo_comm_iall_reduce(c, f, 4, ZO_DTYPE_F32, &r));
  int done = -1;
  CHECK_OK(zo_comm_test(r, &done));
  CHECK_EQ(done, 0);
  CHECK_OK(zo_comm_test(r, &done));
  CHECK_EQ(done, 1);
  uint16_t h16[3] = {0x3f80, 0x4000, 0x4040}; /* bf16 1, 2, 3: staged in fp32, sum over one rank */
  CHECK_OK(
      zo_comm_all_reduce(c, h16, 3, ZO_DTYPE_BF16)); /* the blocking form waits on the handle */
  CHECK_EQ(h16[2], 0x4040);
  CHECK_EQ(one.tests, 2);
  zo_comm_destroy(c);
  CHECK_EQ(one.destroyed, 1);
  return zo_test_finish("test_comm external");
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "nccl_fault")) return nccl_fault_main(argv[2]);
  if (argc > 1 && !strcmp(argv[1], "external")) return external_main();
  if (argc > 1 && !strcmp(argv[1], "nccl")) return nccl_main();
  if (argc > 1 && !strcmp(argv[1], "env")) {
    zo_comm_t *c = NULL;
    CHECK_OK(zo_comm_create_from_env(&c));
    if (!c) return zo_test_finish("test_comm env");
    zo_launch_info li;
    CHECK_OK(zo_launch_info_get(&li));
    CHECK_EQ(zo_comm_size(c), li.world_size);
    CHECK_EQ(zo_comm_rank(c), li.rank);
    generic(c);
    zo_comm_destroy(c);
    return zo_test_finish("test_comm env");
  }
  self_only();
  return zo_test_finish("test_comm");
}
