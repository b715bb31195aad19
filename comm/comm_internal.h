/*
 * comm_internal.h - the collectives front (comm.c) and its backends
 * (self in comm.c, mpi in comm_mpi.c, nccl in comm_nccl.c, external in
 * comm_external.c). The front checks arguments, stages
 * 16-bit reductions in fp32 and owns requests; a backend only starts fp32,
 * fp64 and byte operations and completes them. Not installed.
 */
#ifndef ZO_COMM_INTERNAL_H
#define ZO_COMM_INTERNAL_H

#include <stddef.h>

#include "zoffload/comm.h"
#include "zoffload/device.h"

/* Element types a backend reduces; the 16-bit ones only reach a backend with native_16bit. */
typedef enum { ZO_RED_F32 = 0, ZO_RED_F64 = 1, ZO_RED_BF16 = 2, ZO_RED_F16 = 3 } zo_red_type;

typedef struct zo_comm_ops {
  const char *name;
  int native_16bit; /* reduces bf16 and fp16 itself (NCCL); else the front stages them in fp32 */
  void (*destroy)(zo_comm_t *c);
  zo_status (*split)(zo_comm_t *c, int color, int key, zo_comm_t **out);
  /* Start an operation; arguments checked, sizes > 0. Completion through wait/test. An operation
   * that a backend finishes at once sets r->complete. */
  zo_status (*all_gather)(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes,
                          zo_comm_req_t *r);
  /* In place (recv == send + rank * recv_n) allowed. */
  zo_status (*reduce_scatter)(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                              zo_red_type t, zo_comm_req_t *r);
  zo_status (*all_reduce)(zo_comm_t *c, void *buf, size_t n, zo_red_type t, zo_comm_req_t *r);
  zo_status (*broadcast)(zo_comm_t *c, void *buf, size_t nbytes, int root, zo_comm_req_t *r);
  zo_status (*barrier)(zo_comm_t *c, zo_comm_req_t *r);
  zo_status (*wait)(zo_comm_req_t *r); /* block until complete (not called when r->complete) */
  zo_status (*test)(zo_comm_req_t *r, int *done); /* never blocks */
} zo_comm_ops;

enum { ZO_COMM_STAGE_CACHE = 4 };

struct zo_comm {
  const zo_comm_ops *ops;
  int rank, size;
  void *backend;
  zo_stream_t *stream; /* nccl: the stream its operations run on; else NULL */
  double timeout_s; /* zo_comm_set_timeout(): nccl's watchdog, seconds from a collective's start */
  /* fp32 staging buffers of finished 16-bit reductions, kept for the next ones (a fresh 10 MB malloc costs its
   * page faults at every call) */
  float *stage_free[ZO_COMM_STAGE_CACHE];
  size_t stage_free_n[ZO_COMM_STAGE_CACHE]; /* elements */
};

struct zo_comm_req {
  zo_comm_t *c;
  int complete; /* the backend has finished (self: at start) */
  /* After completion: move `move_bytes` from move_src to move_dst (MPI's in-place reduce-scatter leaves the
   * result at the start of the buffer, NCCL's rule wants it at the rank's block). */
  void *move_dst;
  const void *move_src;
  size_t move_bytes;
  /* 16-bit reductions: fp32 staging, rounded into out[out_n] of out_dtype after completion. */
  float *stage;
  size_t stage_n; /* elements of stage */
  const float *stage_result;
  void *out;
  size_t out_n;
  zo_dtype out_dtype;
  unsigned char impl[64]; /* the backend's handle (an MPI_Request) */
};

zo_comm_t *zo_comm_alloc(const zo_comm_ops *ops, int rank, int size, void *backend);

/* The mpi backend (comm_mpi.c) and the nccl one (comm_nccl.c); ZO_ERR_UNSUPPORTED stubs in comm.c without them. */
zo_status zo_comm_mpi_create(const void *mpi_comm, zo_comm_t **out);
zo_status zo_comm_nccl_create(zo_device_t *dev, zo_comm_t *bootstrap, zo_comm_t **out);

#endif /* ZO_COMM_INTERNAL_H */
