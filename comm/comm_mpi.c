/*
 * comm_mpi.c - the `mpi` collectives backend: host buffers, MPI-3
 * non-blocking collectives (MPI_Iallgather, MPI_Ireduce_scatter_block,
 * MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) on a duplicate of the caller's
 * communicator with MPI_ERRORS_RETURN, so an MPI error becomes a zo_status
 * instead of an abort. Counts above INT_MAX elements go as a contiguous
 * datatype of a power-of-two block (MPI's counts are int).
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "comm_internal.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((zo_comm_req_t *)0)->impl),
               "MPI_Request must fit a request's impl");

typedef struct mpi_comm {
  MPI_Comm comm;
} mpi_comm;

static MPI_Request *req_of(zo_comm_req_t *r) { return (MPI_Request *)(void *)r->impl; }

static zo_status mpi_err(int rc, const char *what) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
  return zo_error_set(ZO_ERR_MPI, "comm mpi: %s: %s", what, s);
}
#define MPI_TRY(call, what)                            \
  do {                                                 \
    int rc_ = (call);                                  \
    if (rc_ != MPI_SUCCESS) return mpi_err(rc_, what); \
  } while (0)

static void on_exit_finalize(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

/* MPI up with a thread level the engine can use: initialized here when the caller has not. */
static zo_status mpi_init(void) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin)
      return zo_error_set(ZO_ERR_INVALID_USAGE,
                          "comm mpi: MPI was already finalized in this process");
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return mpi_err(rc, "MPI_Init_thread");
    atexit(on_exit_finalize); /* after the caller's last use; MPI cannot be initialized twice */
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED)
    return zo_error_set(
        ZO_ERR_UNSUPPORTED,
        "comm mpi: MPI gives thread level %d, the engine needs "
        "MPI_THREAD_SERIALIZED (%d): initialize MPI with MPI_Init_thread(MPI_THREAD_SERIALIZED)",
        provided, MPI_THREAD_SERIALIZED);
  return ZO_OK;
}

static const zo_comm_ops mpi_ops;

static zo_status wrap(MPI_Comm comm, zo_comm_t **out) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  mpi_comm *m = calloc(1, sizeof *m);
  zo_comm_t *c = m ? zo_comm_alloc(&mpi_ops, rank, size, m) : NULL;
  if (!c) {
    free(m);
    MPI_Comm_free(&comm);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm mpi: out of host memory");
  }
  m->comm = comm;
  *out = c;
  return ZO_OK;
}

zo_status zo_comm_mpi_create(const void *mpi_comm, zo_comm_t **out) {
  ZO_CHECK(mpi_init());
  MPI_Comm base = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD, dup;
  MPI_TRY(MPI_Comm_dup(base, &dup), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  return wrap(dup, out);
}

static void mpi_destroy(zo_comm_t *c) {
  mpi_comm *m = c->backend;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Comm_free(&m->comm);
  free(m);
}

static zo_status mpi_split(zo_comm_t *c, int color, int key, zo_comm_t **out) {
  mpi_comm *m = c->backend;
  MPI_Comm sub;
  MPI_TRY(MPI_Comm_split(m->comm, color, key, &sub), "MPI_Comm_split");
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  return wrap(sub, out);
}

/*
 * @n elements of @esz bytes as (count, datatype) with count <= INT_MAX: the
 * base type when it fits, else a committed contiguous block of 2^k elements
 * that divides n (freed after the call is posted: MPI keeps what it needs).
 */
static zo_status count_type(size_t n, MPI_Datatype base, const char *what, int *count,
                            MPI_Datatype *type, int *derived) {
  *derived = 0;
  if (n <= INT_MAX) {
    *count = (int)n, *type = base;
    return ZO_OK;
  }
  for (size_t blk = 2; blk <= (1u << 20); blk *= 2) {
    if (n % blk || n / blk > INT_MAX) continue;
    MPI_TRY(MPI_Type_contiguous((int)blk, base, type), "MPI_Type_contiguous");
    MPI_TRY(MPI_Type_commit(type), "MPI_Type_commit");
    *count = (int)(n / blk), *derived = 1;
    return ZO_OK;
  }
  return zo_error_set(ZO_ERR_INVALID_ARG,
                      "%s: %zu elements are more than one MPI call takes (INT_MAX, or a "
                      "multiple of a power of two up to 2^20 times that)",
                      what, n);
}

/* The datatype's reduction: a derived block type cannot be summed by MPI_SUM, so reductions keep int counts. */
static zo_status red_count(size_t n, const char *what, int *count) {
  if (n > INT_MAX)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "%s: %zu elements in one reduction; MPI takes at most %d: split it", what,
                        n, INT_MAX);
  *count = (int)n;
  return ZO_OK;
}

static zo_status mpi_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes,
                                zo_comm_req_t *r) {
  mpi_comm *m = c->backend;
  int count = 0, derived = 0;
  MPI_Datatype t = MPI_BYTE;
  ZO_CHECK(count_type(send_nbytes, MPI_BYTE, "zo_comm_all_gather", &count, &t, &derived));
  const int in_place = send == (const char *)recv + (size_t)c->rank * send_nbytes;
  int rc =
      MPI_Iallgather(in_place ? MPI_IN_PLACE : send, count, t, recv, count, t, m->comm, req_of(r));
  if (derived) MPI_Type_free(&t);
  return rc == MPI_SUCCESS ? ZO_OK : mpi_err(rc, "MPI_Iallgather");
}

static zo_status mpi_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                    zo_red_type t, zo_comm_req_t *r) {
  mpi_comm *m = c->backend;
  int count = 0;
  ZO_CHECK(red_count(recv_n, "zo_comm_reduce_scatter", &count));
  const size_t esz = t == ZO_RED_F64 ? 8 : 4;
  const MPI_Datatype dt = t == ZO_RED_F64 ? MPI_DOUBLE : MPI_FLOAT;
  int rc;
  if (recv == (const char *)send + (size_t)c->rank * recv_n * esz) {
    /* MPI's in-place form leaves the result at the start of the buffer; NCCL's rule wants it at the rank's block */
    rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, (void *)send, count, dt, MPI_SUM, m->comm,
                                   req_of(r));
    if (c->rank) r->move_dst = recv, r->move_src = send, r->move_bytes = recv_n * esz;
  } else {
    rc = MPI_Ireduce_scatter_block(send, recv, count, dt, MPI_SUM, m->comm, req_of(r));
  }
  return rc == MPI_SUCCESS ? ZO_OK : mpi_err(rc, "MPI_Ireduce_scatter_block");
}

static zo_status mpi_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_red_type t,
                                zo_comm_req_t *r) {
  mpi_comm *m = c->backend;
  int count = 0;
  ZO_CHECK(red_count(n, "zo_comm_all_reduce", &count));
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, count, t == ZO_RED_F64 ? MPI_DOUBLE : MPI_FLOAT,
                          MPI_SUM, m->comm, req_of(r));
  return rc == MPI_SUCCESS ? ZO_OK : mpi_err(rc, "MPI_Iallreduce");
}

static zo_status mpi_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root, zo_comm_req_t *r) {
  mpi_comm *m = c->backend;
  int count = 0, derived = 0;
  MPI_Datatype t = MPI_BYTE;
  ZO_CHECK(count_type(nbytes, MPI_BYTE, "zo_comm_broadcast", &count, &t, &derived));
  int rc = MPI_Ibcast(buf, count, t, root, m->comm, req_of(r));
  if (derived) MPI_Type_free(&t);
  return rc == MPI_SUCCESS ? ZO_OK : mpi_err(rc, "MPI_Ibcast");
}

static zo_status mpi_barrier(zo_comm_t *c, zo_comm_req_t *r) {
  mpi_comm *m = c->backend;
  MPI_TRY(MPI_Ibarrier(m->comm, req_of(r)), "MPI_Ibarrier");
  return ZO_OK;
}

static zo_status mpi_wait(zo_comm_req_t *r) {
  MPI_TRY(MPI_Wait(req_of(r), MPI_STATUS_IGNORE), "MPI_Wait");
  return ZO_OK;
}

static zo_status mpi_test(zo_comm_req_t *r, int *done) {
  MPI_TRY(MPI_Test(req_of(r), done, MPI_STATUS_IGNORE), "MPI_Test");
  return ZO_OK;
}

static const zo_comm_ops mpi_ops = {
    .name = "mpi",
    .destroy = mpi_destroy,
    .split = mpi_split,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .wait = mpi_wait,
    .test = mpi_test,
};
