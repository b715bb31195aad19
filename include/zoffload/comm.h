/*
 * zoffload/comm.h - collectives between the ranks of a data-parallel job:
 * all-gather of parameter shards, reduce-scatter of gradients, all-reduce of
 * norms and overflow flags, broadcast, barrier. Backends:
 *   self  one rank (world size 1): every collective is a copy or a no-op;
 *   mpi   host buffers between processes (Open MPI or any MPI-3 library),
 *         for CPU-only runs and the tests; built when CMake finds MPI;
 *   nccl  device buffers between GPUs, one per rank (zo_comm_create_nccl);
 *         built when CMake finds NCCL beside the CUDA toolkit;
 *   external  host buffers moved by collectives the caller supplies as
 *         function pointers (zo_comm_create_external): how the Python front
 *         runs the engine over torch.distributed under torchrun.
 * The engine borrows a communicator (zo_engine_create), so a framework that
 * runs tensor or pipeline parallelism elsewhere hands it its data-parallel
 * group only (zo_comm_split, or zo_comm_create_mpi of its own MPI_Comm).
 *
 * Contract (as in NCCL and MPI): every rank calls the same collectives in the
 * same order with the same sizes; one communicator must not be used by two
 * threads at once (the MPI backend asks MPI for MPI_THREAD_SERIALIZED).
 * Blocking calls return when the result is in the receive buffer; the i*
 * forms return once the operation is started and complete at
 * zo_comm_wait()/zo_comm_test(), with every buffer owned by the operation
 * until then. Layouts follow NCCL: in place is allowed where NCCL allows it,
 * other overlap of send and receive buffers is an error.
 *
 * Reductions are sums. fp32 reduces in fp32, bf16 and fp16 are widened to
 * fp32, reduced in fp32 and rounded back once (round to nearest even), so a
 * 16-bit reduction loses no more than one rounding. Summation order across
 * ranks is the backend's: the self backend is exact; MPI's order is its
 * algorithm's (Open MPI: fixed for a given size, message length and
 * algorithm choice, so repeated runs agree bit for bit).
 */
#ifndef ZOFFLOAD_COMM_H
#define ZOFFLOAD_COMM_H

#include <stddef.h>

#include "zoffload/device.h"
#include "zoffload/dtype.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_comm zo_comm_t;
typedef struct zo_comm_req zo_comm_req_t;

/*
 * Where a launcher put this process: rank and world size, the rank and
 * count on this node. Read from, in order of precedence, Open MPI's
 * OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE, then torchrun's and the
 * deepspeed launcher's RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE, then
 * PMI_RANK/PMI_SIZE (MPICH, Slurm); none set: rank 0 of 1.
 */
typedef struct zo_launch_info {
  int rank, world_size;       /* 0 <= rank < world_size */
  int local_rank, local_size; /* 0 <= local_rank < local_size (ranks on this node) */
  const char *source;         /* "openmpi", "torchrun", "pmi" or "none" (static string) */
} zo_launch_info;

/*
 * zo_launch_info_get() - fill @li from the environment (see zo_launch_info).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @li); ZO_ERR_CONFIG when a
 * variable is set but is not a number in range (the variable and its value
 * named), or rank >= world size. Thread-safe (reads the environment only).
 */
ZO_API zo_status zo_launch_info_get(zo_launch_info *li);

/*
 * zo_comm_create_self() - a communicator of one rank (rank 0, size 1): every
 * collective is a local copy or a no-op. Thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @out); ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_comm_create_self(zo_comm_t **out);

/*
 * zo_comm_create_mpi() - a communicator over MPI.
 * @mpi_comm: pointer to an MPI_Comm (the caller's data-parallel group); it is
 *            duplicated (MPI_Comm_dup), so the caller keeps and frees its own.
 *            NULL: MPI_COMM_WORLD.
 * MPI is initialized here (MPI_Init_thread asking for MPI_THREAD_SERIALIZED)
 * when the caller has not done so, and finalized when the last communicator
 * that did so is destroyed; a caller that initialized MPI itself must have
 * asked for MPI_THREAD_SERIALIZED or more. Errors come back as statuses
 * (the duplicate has MPI_ERRORS_RETURN), never as an abort by this library;
 * a peer that dies is reported by the launcher (mpirun ends the job).
 * Collective over the ranks of @mpi_comm. Not thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @out); ZO_ERR_UNSUPPORTED when the
 * library was built without MPI, or the thread level MPI gives is too low
 * (both named); ZO_ERR_MPI (MPI's error string); ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_comm_create_mpi(const void *mpi_comm, zo_comm_t **out);

/*
 * zo_comm_create_nccl() - a communicator over NCCL between the GPUs of the
 * ranks, one GPU (@dev, a CUDA device) per rank.
 * @bootstrap: a communicator over the same ranks (e.g. `mpi`) used once to
 *             hand rank 0's ncclUniqueId to the others and taken as the
 *             rank order; NULL: one rank when the launcher started one, else
 *             a TCP rendezvous on MASTER_ADDR:MASTER_PORT (torchrun's
 *             variables, with RANK and WORLD_SIZE), rank 0 listening, for up to
 *             ZO_NCCL_RENDEZVOUS_TIMEOUT seconds (default 300).
 * Buffers are device memory of @dev or host memory: host buffers (any size;
 * meant for small things such as norms) are staged, in chunks, through one
 * device buffer of ZO_COMM_NCCL_STAGE_BYTES that the communicator allocates
 * at creation (each split its own), so it comes out of the GPU before an
 * engine's arena measures what is free. A collective not complete within
 * zo_comm_set_timeout()'s watchdog, or whose peer failed, aborts the
 * communicator (see there). A host buffer larger than a chunk (the stage
 * divided by the rank count) takes one NCCL call per chunk and a device
 * buffer one call, so for such sizes every rank must pass the same kind of
 * memory (all device, or not). Operations run on the
 * communicator's own CUDA stream (zo_comm_stream()); a call returns once its
 * work is queued there (the i* forms) or done (blocking forms), and it reads
 * its inputs when the stream gets to it: make @c's stream wait for the
 * producing stream first (zo_stream_wait_event), or synchronize. bf16 and
 * fp16 are reduced by NCCL in their own type (NCCL's per-hop rounding), not
 * staged in fp32. Collective over the ranks. Not thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL argument, @dev not CUDA);
 * ZO_ERR_UNSUPPORTED (built without NCCL; several ranks, no @bootstrap and no
 * MASTER_ADDR/MASTER_PORT); ZO_ERR_NCCL / ZO_ERR_CUDA (the call and NCCL's
 * message named); ZO_ERR_SYSTEM (the rendezvous, host:port and errno named).
 */
ZO_API zo_status zo_comm_create_nccl(zo_device_t *dev, zo_comm_t *bootstrap, zo_comm_t **out);

/* Device memory an nccl communicator holds for staging host buffers (zo_comm_create_nccl), bytes. */
#define ZO_COMM_NCCL_STAGE_BYTES ((size_t)16 << 20)

/*
 * Element types of an external communicator's reductions. fp32 and fp64
 * only: the front widens bf16 and fp16 to fp32 before a callback sees them
 * (see "Reductions are sums" above) and rounds the result back itself.
 */
typedef enum zo_comm_elem { ZO_COMM_ELEM_F32 = 0, ZO_COMM_ELEM_F64 = 1 } zo_comm_elem;

/*
 * The collectives of an external communicator (zo_comm_create_external),
 * supplied by the caller: each one starts an operation between the ranks on
 * host memory and either finishes it before returning (*@handle = NULL) or
 * hands back a non-NULL *@handle that @wait or @test completes later. The
 * library's front has checked every argument first (no NULL buffer, sizes
 * > 0 and not overflowing, @root in range, legal overlap), so a callback sees
 * only the layouts described here:
 *   all_gather      @send_nbytes bytes from every rank; rank r's block to
 *                   recv + r * send_nbytes. @send may be the rank's own block
 *                   of @recv (in place).
 *   reduce_scatter  @send holds size blocks of @recv_n elements; rank r gets
 *                   the sum over ranks of block r at @recv. @recv may be the
 *                   rank's own block of @send (in place), and the other blocks
 *                   of @send may be overwritten.
 *   all_reduce      element-wise sum over ranks of @n elements at @buf, in place.
 *   broadcast       @nbytes bytes at @buf of rank @root to every rank's @buf.
 *   barrier         returns (or completes) when every rank has entered.
 * Every buffer stays valid and untouched by the library until the operation
 * completes; a callback that keeps working on it after returning a handle
 * must be done with it when @wait returns or @test reports *@done = 1.
 * Sizes are bytes (all_gather, broadcast) or elements of @elem (reductions).
 *   wait   block until @handle's operation completed; the handle is then dead.
 *   test   *@done = 1 when complete (the handle is then dead), else 0; never blocks.
 *   split  optional (NULL: zo_comm_split() returns ZO_ERR_UNSUPPORTED): MPI_Comm_split
 *          semantics; a new context with this rank's position in the new group.
 *          The engine splits its caller's communicator once (color 0: a duplicate) and,
 *          at stage 3 on several ranks, once more: operations on different
 *          communicators may be started in a different order on different ranks, so
 *          the new group must progress independently of its parent (its own
 *          connection or queue), or ranks deadlock.
 *   destroy  optional: called once from zo_comm_destroy(); @ctx is dead after.
 *   error  optional: the text of the last failure on @ctx, written NUL-terminated
 *          into @msg[@cap]; it becomes part of the library's message.
 * Returns of the int callbacks: 0 (ZO_OK), or a zo_status saying whose fault
 * it was (e.g. ZO_ERR_SYSTEM, ZO_ERR_NCCL); other non-zero values are taken
 * as ZO_ERR_SYSTEM. A failed start must leave *@handle NULL.
 * Threads: the engine calls a communicator's callbacks from the thread that
 * calls its public zo_engine_* functions (one at a time per engine: the
 * engine is not thread-safe), never from its Adam, swap or copy threads; a
 * communicator and its splits may be called from that one thread in any
 * interleaving. Callbacks must not call back into the same communicator.
 */
typedef struct zo_comm_external_ops {
  int (*all_gather)(void *ctx, const void *send, void *recv, size_t send_nbytes, void **handle);
  int (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t recv_n, zo_comm_elem elem,
                        void **handle);
  int (*all_reduce)(void *ctx, void *buf, size_t n, zo_comm_elem elem, void **handle);
  int (*broadcast)(void *ctx, void *buf, size_t nbytes, int root, void **handle);
  int (*barrier)(void *ctx, void **handle);
  int (*wait)(void *ctx, void *handle);
  int (*test)(void *ctx, void *handle, int *done);
  int (*split)(void *ctx, int color, int key, void **new_ctx, int *new_rank, int *new_size);
  void (*destroy)(void *ctx);
  void (*error)(void *ctx, char *msg, size_t cap);
} zo_comm_external_ops;

/*
 * zo_comm_create_external() - a communicator whose collectives are @ops
 * (copied: the caller need not keep the struct) on @ctx, this process being
 * @rank of @world_size. Host buffers only (zo_comm_stream() is NULL), like
 * `mpi`. zo_comm_backend() gives "external". Not collective: the caller has
 * set up its group already. @ctx belongs to the communicator until
 * @ops->destroy is called from zo_comm_destroy().
 * A zo_comm_split() of it whose ranks all share this host moves data through
 * POSIX shared memory (a segment of world size x 2 slots x 2 MiB in
 * /dev/shm, sums in rank order, a progress thread per communicator) instead
 * of the callbacks, which then only set it up; the environment variable
 * ZO_COMM_EXTERNAL_SHM=0 on any rank turns that off; a segment that cannot be made
 * falls back to the callbacks (comm_external.c).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @ops or @out, a required callback
 * (all but split, destroy, error) NULL, @world_size < 1, @rank outside
 * [0, @world_size)); ZO_ERR_OUT_OF_MEMORY. Collectives on it return the
 * callbacks' statuses with the operation and sizes named, and the @error
 * text when given. Thread-safe.
 */
ZO_API zo_status zo_comm_create_external(const zo_comm_external_ops *ops, void *ctx, int rank,
                                         int world_size, zo_comm_t **out);

/*
 * zo_comm_stream() - the stream @c's operations run on: an NCCL
 * communicator's; NULL for `self` and `mpi`, whose operations work on host
 * memory from the calling thread. Borrowed; lives as long as @c.
 */
ZO_API zo_stream_t *zo_comm_stream(const zo_comm_t *c);

/*
 * zo_comm_create_from_env() - the communicator a launcher asks for: `self`
 * when zo_launch_info_get() finds one rank, else `mpi` over MPI_COMM_WORLD,
 * checked against the launcher's rank and size.
 * Returns ZO_OK; errors of zo_launch_info_get() and zo_comm_create_mpi();
 * ZO_ERR_UNSUPPORTED when several ranks are asked for and the library has no
 * MPI (the variables and the fix named); ZO_ERR_MPI when MPI's rank or size
 * disagree with the launcher's variables.
 */
ZO_API zo_status zo_comm_create_from_env(zo_comm_t **out);

/*
 * zo_comm_split() - sub-communicators (MPI_Comm_split semantics): ranks
 * passing the same @color form one, ordered by @key then by rank. Collective
 * over @c. For `self`, a copy. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL
 * argument, @color < 0); ZO_ERR_MPI; ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_comm_split(zo_comm_t *c, int color, int key, zo_comm_t **out);

/* The default and the largest watchdog of zo_comm_set_timeout(), seconds. */
#define ZO_COMM_TIMEOUT_S_DEFAULT 600.0
#define ZO_COMM_TIMEOUT_S_MAX 86400.0

/*
 * zo_comm_set_timeout() - the watchdog of @c's collectives: an NCCL
 * collective not complete @seconds after it was started (or one whose peer
 * failed, ncclCommGetAsyncError, at once) makes zo_comm_wait()/zo_comm_test()
 * abort the communicator (ncclCommAbort) and return ZO_ERR_NCCL naming the
 * collective, its bytes and the rank count; every later operation on @c is
 * then ZO_ERR_INVALID_USAGE (destroy it and make a new one). @seconds in
 * (0, ZO_COMM_TIMEOUT_S_MAX]; default ZO_COMM_TIMEOUT_S_DEFAULT (600 s, the
 * config key zoffload.comm_timeout_s). `self` and `mpi` keep it and ignore it
 * (MPI has no portable abort of one operation). Splits inherit it. Not
 * thread-safe with operations on @c. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL
 * @c, @seconds outside the range, named).
 */
ZO_API zo_status zo_comm_set_timeout(zo_comm_t *c, double seconds);

/* zo_comm_destroy() - free @c. NULL is a no-op. No operation may be in flight. */
ZO_API void zo_comm_destroy(zo_comm_t *c);

/* zo_comm_rank() - this process's rank in [0, size); -1 for NULL. */
ZO_API int zo_comm_rank(const zo_comm_t *c);

/* zo_comm_size() - number of ranks (world size); 0 for NULL. */
ZO_API int zo_comm_size(const zo_comm_t *c);

/* zo_comm_backend() - "self", "mpi", "nccl" or "external"; "(null)" for NULL. */
ZO_API const char *zo_comm_backend(const zo_comm_t *c);

/*
 * zo_comm_all_gather() - each rank contributes @send_nbytes bytes at @send;
 * @recv receives size * @send_nbytes bytes: rank r's block at
 * recv + r * send_nbytes. Units: bytes, any alignment. In place when
 * @send == @recv + rank * @send_nbytes (NCCL's in-place rule); other overlap
 * is an error. @send_nbytes == 0 is a no-op.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @c, NULL buffer with
 * @send_nbytes > 0, size * @send_nbytes overflows, illegal overlap);
 * ZO_ERR_MPI.
 */
ZO_API zo_status zo_comm_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes);

/*
 * zo_comm_reduce_scatter() - sum reduce-scatter.
 * @send:  @dtype[size * recv_n], block r = send[r*recv_n .. (r+1)*recv_n).
 * @recv:  @dtype[recv_n]; rank r receives the element-wise sum over ranks of
 *         their block r. In place when @recv == @send + rank * @recv_n.
 * @recv_n: elements, not bytes. 0 is a no-op.
 * @dtype: fp32, bf16 or fp16 (16-bit types reduced in fp32, see above).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @c, NULL buffer with @recv_n > 0,
 * size overflow, illegal overlap, unknown dtype); ZO_ERR_OUT_OF_MEMORY (the
 * fp32 staging of a 16-bit reduction); ZO_ERR_MPI.
 */
ZO_API zo_status zo_comm_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                        zo_dtype dtype);

/* zo_comm_reduce_scatter_f32() - zo_comm_reduce_scatter() of fp32. */
ZO_API zo_status zo_comm_reduce_scatter_f32(zo_comm_t *c, const float *send, float *recv,
                                            size_t recv_n);

/*
 * zo_comm_all_reduce() - element-wise sum over ranks of @dtype[n] at @buf,
 * in place. @n: elements; 0 is a no-op. 16-bit types reduced in fp32.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @c, NULL @buf with @n > 0, unknown
 * dtype); ZO_ERR_OUT_OF_MEMORY; ZO_ERR_MPI.
 */
ZO_API zo_status zo_comm_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_dtype dtype);

/*
 * zo_comm_all_reduce_f64() - element-wise sum over ranks of double[n] at
 * @buf, in place (gradient norms, overflow flags). @n: elements; 0 is a
 * no-op. Returns ZO_OK, ZO_ERR_INVALID_ARG (NULL @c, NULL @buf with n > 0)
 * or ZO_ERR_MPI.
 */
ZO_API zo_status zo_comm_all_reduce_f64(zo_comm_t *c, double *buf, size_t n);

/*
 * zo_comm_broadcast() - @nbytes bytes at @buf of rank @root replace @buf on
 * every other rank. 0 bytes is a no-op. Returns ZO_OK; ZO_ERR_INVALID_ARG
 * (NULL @c, NULL @buf with nbytes > 0, @root outside [0, size)); ZO_ERR_MPI.
 */
ZO_API zo_status zo_comm_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root);

/*
 * zo_comm_barrier() - returns when every rank has entered the barrier.
 * Returns ZO_OK, ZO_ERR_INVALID_ARG (NULL @c) or ZO_ERR_MPI.
 */
ZO_API zo_status zo_comm_barrier(zo_comm_t *c);

/*
 * Non-blocking forms: the same arguments, checks and results as the blocking
 * call, plus *@req, set to a request that zo_comm_wait() or a zo_comm_test()
 * reporting completion frees. Return once the operation is started (MPI's
 * non-blocking collective posted; for self, already complete). The buffers
 * belong to the operation until it completes; a 16-bit result is written
 * into @recv/@buf at completion (the fp32 staging is the request's). On an
 * error nothing is started and *@req is NULL. Operations complete in any
 * order, but every rank must start them in the same order. MPI progresses
 * them inside MPI calls: zo_comm_test() (or any other call on @c) moves them
 * on; the engine calls it at each of its entry points.
 */
ZO_API zo_status zo_comm_iall_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes,
                                     zo_comm_req_t **req);
ZO_API zo_status zo_comm_ireduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                         zo_dtype dtype, zo_comm_req_t **req);
ZO_API zo_status zo_comm_iall_reduce(zo_comm_t *c, void *buf, size_t n, zo_dtype dtype,
                                     zo_comm_req_t **req);
ZO_API zo_status zo_comm_ibroadcast(zo_comm_t *c, void *buf, size_t nbytes, int root,
                                    zo_comm_req_t **req);

/*
 * zo_comm_wait() - block until @req completes, write its result, free it.
 * NULL @req is a no-op returning ZO_OK. Returns ZO_OK or ZO_ERR_MPI (the
 * request is freed either way).
 */
ZO_API zo_status zo_comm_wait(zo_comm_req_t *req);

/*
 * zo_comm_test() - *@done = 1 when @req has completed (its result written and
 * the request freed: do not use it again), else 0; never blocks.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @req or @done); ZO_ERR_MPI (the
 * request is freed and *@done is 1).
 */
ZO_API zo_status zo_comm_test(zo_comm_req_t *req, int *done);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_COMM_H */
