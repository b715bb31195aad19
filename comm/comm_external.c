/*
 * comm_external.c - the `external` collectives backend: host buffers moved
 * by callbacks the caller supplies (zo_comm_external_ops, zoffload/comm.h),
 * e.g. the Python front's torch.distributed process groups under torchrun.
 * Not a transport of its own: it turns the callbacks' results into statuses
 * with the operation named; the front (comm.c) checks arguments and stages
 * 16-bit reductions in fp32 as it does for `mpi`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "comm_internal.h"

_Static_assert(sizeof(void *) <= sizeof(((zo_comm_req_t *)0)->impl),
               "a handle must fit a request's impl");

typedef struct ext_comm {
  zo_comm_external_ops ops;
  void *ctx;
} ext_comm;

static void **handle_of(zo_comm_req_t *r) { return (void **)(void *)r->impl; }

static const char *elem_name(zo_comm_elem t) { return t == ZO_COMM_ELEM_F64 ? "fp64" : "fp32"; }

/* A callback's return as a status, with @what and the callback's own text (ops.error) in the message. */
static zo_status ext_err(const ext_comm *x, int rc, const char *what) {
  if (rc == 0) return ZO_OK;
  zo_status st = rc > 0 && rc <= ZO_ERR_CORRUPT ? (zo_status)rc : ZO_ERR_SYSTEM;
  char msg[512] = "";
  if (x->ops.error) {
    x->ops.error(x->ctx, msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
  }
  return zo_error_set(st, "comm external: %s failed (callback returned %d)%s%s", what, rc,
                      msg[0] ? ": " : "", msg);
}

/* The start of every operation: finished at once when the callback gave no handle. */
static zo_status ext_started(const ext_comm *x, int rc, zo_comm_req_t *r, const char *what) {
  if (rc != 0) {
    *handle_of(r) = NULL;
    return ext_err(x, rc, what);
  }
  if (!*handle_of(r)) r->complete = 1;
  return ZO_OK;
}

static const zo_comm_ops ext_ops;

static zo_status wrap(const zo_comm_external_ops *ops, void *ctx, int rank, int size,
                      zo_comm_t **out) {
  ext_comm *x = calloc(1, sizeof *x);
  zo_comm_t *c = x ? zo_comm_alloc(&ext_ops, rank, size, x) : NULL;
  if (!c) {
    free(x);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm external: out of host memory");
  }
  x->ops = *ops, x->ctx = ctx;
  *out = c;
  return ZO_OK;
}

zo_status zo_comm_create_external(const zo_comm_external_ops *ops, void *ctx, int rank,
                                  int world_size, zo_comm_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_external: out is NULL");
  *out = NULL;
  if (!ops) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_external: ops is NULL");
  const struct {
    const char *name;
    int set;
  } need[] = {{"all_gather", !!ops->all_gather},
              {"reduce_scatter", !!ops->reduce_scatter},
              {"all_reduce", !!ops->all_reduce},
              {"broadcast", !!ops->broadcast},
              {"barrier", !!ops->barrier},
              {"wait", !!ops->wait},
              {"test", !!ops->test}};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!need[i].set)
      return zo_error_set(ZO_ERR_INVALID_ARG,
                          "zo_comm_create_external: ops->%s is NULL (every callback but split, "
                          "destroy and error is required)",
                          need[i].name);
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "zo_comm_create_external: rank %d of world size %d; want "
                        "0 <= rank < world size",
                        rank, world_size);
  return wrap(ops, ctx, rank, world_size, out);
}

static void ext_destroy(zo_comm_t *c) {
  ext_comm *x = c->backend;
  if (x->ops.destroy) x->ops.destroy(x->ctx);
  free(x);
}

static zo_status ext_split(zo_comm_t *c, int color, int key, zo_comm_t **out) {
  ext_comm *x = c->backend;
  if (!x->ops.split)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "comm external: the caller's ops have no split (the engine duplicates "
                        "the communicator it is given: supply ops->split)");
  void *nctx = NULL;
  int nrank = -1, nsize = 0;
  ZO_CHECK(ext_err(x, x->ops.split(x->ctx, color, key, &nctx, &nrank, &nsize), "split"));
  if (nsize < 1 || nrank < 0 || nrank >= nsize) {
    if (x->ops.destroy) x->ops.destroy(nctx);
    return zo_error_set(ZO_ERR_INVALID_USAGE, "comm external: split gave rank %d of world size %d",
                        nrank, nsize);
  }
  zo_status st = wrap(&x->ops, nctx, nrank, nsize, out);
  if (st != ZO_OK && x->ops.destroy) x->ops.destroy(nctx);
  return st;
}

static zo_status ext_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes,
                                zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  char what[96];
  snprintf(what, sizeof what, "all_gather of %zu bytes per rank", send_nbytes);
  return ext_started(x, x->ops.all_gather(x->ctx, send, recv, send_nbytes, handle_of(r)), r, what);
}

static zo_status ext_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                    zo_red_type t, zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  const zo_comm_elem e = t == ZO_RED_F64 ? ZO_COMM_ELEM_F64 : ZO_COMM_ELEM_F32;
  char what[96];
  snprintf(what, sizeof what, "reduce_scatter of %zu %s elements per rank", recv_n, elem_name(e));
  return ext_started(x, x->ops.reduce_scatter(x->ctx, send, recv, recv_n, e, handle_of(r)), r,
                     what);
}

static zo_status ext_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_red_type t,
                                zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  const zo_comm_elem e = t == ZO_RED_F64 ? ZO_COMM_ELEM_F64 : ZO_COMM_ELEM_F32;
  char what[96];
  snprintf(what, sizeof what, "all_reduce of %zu %s elements", n, elem_name(e));
  return ext_started(x, x->ops.all_reduce(x->ctx, buf, n, e, handle_of(r)), r, what);
}

static zo_status ext_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root, zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  char what[96];
  snprintf(what, sizeof what, "broadcast of %zu bytes from rank %d", nbytes, root);
  return ext_started(x, x->ops.broadcast(x->ctx, buf, nbytes, root, handle_of(r)), r, what);
}

static zo_status ext_barrier(zo_comm_t *c, zo_comm_req_t *r) {
  ext_comm *x = c->backend;
  return ext_started(x, x->ops.barrier(x->ctx, handle_of(r)), r, "barrier");
}

static zo_status ext_wait(zo_comm_req_t *r) {
  ext_comm *x = r->c->backend;
  return ext_err(x, x->ops.wait(x->ctx, *handle_of(r)), "wait");
}

static zo_status ext_test(zo_comm_req_t *r, int *done) {
  ext_comm *x = r->c->backend;
  int d = 0;
  ZO_CHECK(ext_err(x, x->ops.test(x->ctx, *handle_of(r), &d), "test"));
  *done = d != 0;
  return ZO_OK;
}

static const zo_comm_ops ext_ops = {
    .name = "external",
    .destroy = ext_destroy,
    .split = ext_split,
    .all_gather = ext_all_gather,
    .reduce_scatter = ext_reduce_scatter,
    .all_reduce = ext_all_reduce,
    .broadcast = ext_broadcast,
    .barrier = ext_barrier,
    .wait = ext_wait,
    .test = ext_test,
};
