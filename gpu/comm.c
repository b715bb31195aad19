/*
 * comm.c - the collectives front (argument checks, buffer-layout rules) and
 * its ops table, with the `self` backend (one rank). It is not NCCL or MPI:
 * those backends plug into the same table later.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "zoffload/comm.h"

typedef struct zo_comm_ops {
  const char *name;
  void (*destroy)(zo_comm_t *c);
  /* Arguments already checked; sizes > 0. */
  zo_status (*all_gather)(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes);
  zo_status (*reduce_scatter_f32)(zo_comm_t *c, const float *send, float *recv, size_t recv_n);
  zo_status (*all_reduce_f64)(zo_comm_t *c, double *buf, size_t n);
  zo_status (*barrier)(zo_comm_t *c);
} zo_comm_ops;

struct zo_comm {
  const zo_comm_ops *ops;
  int rank, size;
  void *backend;
};

/* ------------------------------------------------------------ self backend */

static void self_destroy(zo_comm_t *c) { (void)c; }

static zo_status self_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes) {
  (void)c;
  if (send != recv) memcpy(recv, send, send_nbytes); /* front rejected partial overlap */
  return ZO_OK;
}

static zo_status self_reduce_scatter_f32(zo_comm_t *c, const float *send, float *recv, size_t recv_n) {
  (void)c;
  if (send != recv) memcpy(recv, send, recv_n * sizeof(float)); /* sum over one rank */
  return ZO_OK;
}

static zo_status self_all_reduce_f64(zo_comm_t *c, double *buf, size_t n) {
  (void)c;
  (void)buf;
  (void)n; /* the sum over one rank is the value itself */
  return ZO_OK;
}

static zo_status self_barrier(zo_comm_t *c) {
  (void)c;
  return ZO_OK;
}

static const zo_comm_ops self_ops = {
    .name = "self",
    .destroy = self_destroy,
    .all_gather = self_all_gather,
    .reduce_scatter_f32 = self_reduce_scatter_f32,
    .all_reduce_f64 = self_all_reduce_f64,
    .barrier = self_barrier,
};

/* ------------------------------------------------------------ front */

zo_status zo_comm_create_self(zo_comm_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_self: out is NULL");
  *out = NULL;
  zo_comm_t *c = calloc(1, sizeof *c);
  if (!c) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_comm_create_self: out of host memory");
  c->ops = &self_ops;
  c->rank = 0;
  c->size = 1;
  *out = c;
  return ZO_OK;
}

void zo_comm_destroy(zo_comm_t *c) {
  if (!c) return;
  c->ops->destroy(c);
  free(c);
}

int zo_comm_rank(const zo_comm_t *c) { return c ? c->rank : -1; }
int zo_comm_size(const zo_comm_t *c) { return c ? c->size : 0; }
const char *zo_comm_backend(const zo_comm_t *c) { return c ? c->ops->name : "(null)"; }

static int ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/*
 * Shared layout check of all-gather and reduce-scatter: the big buffer holds
 * size blocks of @block_nbytes; the small one is block @rank of it (in place)
 * or lies outside it.
 */
static zo_status check_blocks(const zo_comm_t *c, const char *what, const void *small, const void *big,
                              size_t block_nbytes) {
  size_t size = (size_t)c->size;
  if (block_nbytes > SIZE_MAX / size || (uintptr_t)big + block_nbytes * size < (uintptr_t)big)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: %d ranks x %zu bytes overflows", what, c->size,
                        block_nbytes);
  size_t big_nbytes = block_nbytes * size;
  const char *in_place = (const char *)big + (size_t)c->rank * block_nbytes;
  if (small != in_place && ranges_overlap(small, block_nbytes, big, big_nbytes))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "%s: buffers overlap but not in place (in place means the rank's own block "
                        "%p of the larger buffer %p, got %p)",
                        what, (const void *)in_place, big, small);
  return ZO_OK;
}

zo_status zo_comm_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes) {
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_all_gather: comm is NULL");
  if (send_nbytes == 0) return ZO_OK;
  if (!send || !recv)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_all_gather: %s is NULL", !send ? "send" : "recv");
  ZO_CHECK(check_blocks(c, "zo_comm_all_gather", send, recv, send_nbytes));
  return c->ops->all_gather(c, send, recv, send_nbytes);
}

zo_status zo_comm_reduce_scatter_f32(zo_comm_t *c, const float *send, float *recv, size_t recv_n) {
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_reduce_scatter_f32: comm is NULL");
  if (recv_n == 0) return ZO_OK;
  if (!send || !recv)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_reduce_scatter_f32: %s is NULL",
                        !send ? "send" : "recv");
  if (recv_n > SIZE_MAX / sizeof(float))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_reduce_scatter_f32: recv_n %zu overflows", recv_n);
  ZO_CHECK(check_blocks(c, "zo_comm_reduce_scatter_f32", recv, send, recv_n * sizeof(float)));
  return c->ops->reduce_scatter_f32(c, send, recv, recv_n);
}

zo_status zo_comm_all_reduce_f64(zo_comm_t *c, double *buf, size_t n) {
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_all_reduce_f64: comm is NULL");
  if (n == 0) return ZO_OK;
  if (!buf) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_all_reduce_f64: buf is NULL");
  return c->ops->all_reduce_f64(c, buf, n);
}

zo_status zo_comm_barrier(zo_comm_t *c) {
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_barrier: comm is NULL");
  return c->ops->barrier(c);
}
