/*
 * zoffload/comm.h - collectives between the ranks of a data-parallel job:
 * all-gather of parameter shards, reduce-scatter of gradients, all-reduce of
 * norms and overflow flags, barrier. Backends: `self` (one rank, world size
 * 1) now; `nccl` and `mpi` later. Buffers are host memory for now.
 *
 * Contract (as in NCCL/MPI): every rank calls the same collectives in the same
 * order with the same sizes; calls are synchronous (they return when the
 * result is in the receive buffer); one communicator must not be used by two
 * threads at once. Layouts follow NCCL: in-place is allowed where NCCL allows
 * it, other overlap of send and receive buffers is an error.
 */
#ifndef ZOFFLOAD_COMM_H
#define ZOFFLOAD_COMM_H

#include <stddef.h>

#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_comm zo_comm_t;

/*
 * zo_comm_create_self() - a communicator of one rank (rank 0, size 1): every
 * collective is a local copy or a no-op. Thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @out); ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_comm_create_self(zo_comm_t **out);

/* zo_comm_destroy() - free @c. NULL is a no-op. No collective may be in flight. */
ZO_API void zo_comm_destroy(zo_comm_t *c);

/* zo_comm_rank() - this process's rank in [0, size); -1 for NULL. */
ZO_API int zo_comm_rank(const zo_comm_t *c);

/* zo_comm_size() - number of ranks (world size); 0 for NULL. */
ZO_API int zo_comm_size(const zo_comm_t *c);

/* zo_comm_backend() - "self", later "nccl" or "mpi"; "(null)" for NULL. */
ZO_API const char *zo_comm_backend(const zo_comm_t *c);

/*
 * zo_comm_all_gather() - each rank contributes @send_nbytes bytes at @send;
 * @recv receives size * @send_nbytes bytes: rank r's block at
 * recv + r * send_nbytes. Units: bytes, any alignment. In place when
 * @send == @recv + rank * @send_nbytes (NCCL's in-place rule); other overlap
 * is an error. @send_nbytes == 0 is a no-op. Synchronous.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @c, NULL buffer with
 * @send_nbytes > 0, size * @send_nbytes overflows, illegal overlap).
 */
ZO_API zo_status zo_comm_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes);

/*
 * zo_comm_reduce_scatter_f32() - sum reduce-scatter of float32.
 * @send: float32[size * recv_n], block r = send[r*recv_n .. (r+1)*recv_n).
 * @recv: float32[recv_n]; rank r receives the element-wise sum over ranks of
 *        their block r. In place when @recv == @send + rank * @recv_n.
 * @recv_n: elements, not bytes. 0 is a no-op. Summation order across ranks
 * is the backend's (NCCL: ring order), so results may differ in the last bits
 * between backends. Synchronous.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @c, NULL buffer with @recv_n > 0,
 * size overflow, illegal overlap).
 */
ZO_API zo_status zo_comm_reduce_scatter_f32(zo_comm_t *c, const float *send, float *recv,
                                            size_t recv_n);

/*
 * zo_comm_all_reduce_f64() - element-wise sum over ranks of double[n] at
 * @buf, in place (gradient norms, overflow flags). @n: elements; 0 is a
 * no-op. Synchronous. Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL @c, NULL
 * @buf with @n > 0).
 */
ZO_API zo_status zo_comm_all_reduce_f64(zo_comm_t *c, double *buf, size_t n);

/*
 * zo_comm_barrier() - returns when every rank has entered the barrier.
 * Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL @c).
 */
ZO_API zo_status zo_comm_barrier(zo_comm_t *c);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_COMM_H */
