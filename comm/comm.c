/*
 * comm.c - the collectives front (argument checks, buffer-layout rules, fp32
 * staging of 16-bit reductions, requests), the launcher's environment, and
 * the `self` backend (one rank). The mpi backend is comm_mpi.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "comm_internal.h"
#include "half.h"

/* ------------------------------------------------------------ launcher environment */

static zo_status env_int(const char *name, int lo, int *out, int *found) {
  const char *v = getenv(name);
  *found = 0;
  if (!v) return ZO_OK;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > INT_MAX)
    return zo_error_set(ZO_ERR_CONFIG, "launcher: %s='%s' is not a whole number >= %d", name, v,
                        lo);
  *out = (int)x;
  *found = 1;
  return ZO_OK;
}

zo_status zo_launch_info_get(zo_launch_info *li) {
  if (!li) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_launch_info_get: li is NULL");
  static const struct {
    const char *source, *rank, *size, *local_rank, *local_size;
  } k[] = {
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
  };
  *li = (zo_launch_info){0, 1, 0, 1, "none"};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    int rank = 0, size = 1, lr = 0, ls = 1, f_rank, f_size, f_lr, f_ls;
    ZO_CHECK(env_int(k[i].size, 1, &size, &f_size));
    ZO_CHECK(env_int(k[i].rank, 0, &rank, &f_rank));
    if (!f_size && !f_rank) continue;
    if (f_rank != f_size)
      return zo_error_set(ZO_ERR_CONFIG, "launcher: %s is set but %s is not",
                          f_rank ? k[i].rank : k[i].size, f_rank ? k[i].size : k[i].rank);
    if (rank >= size)
      return zo_error_set(ZO_ERR_CONFIG, "launcher: %s=%d is not below %s=%d", k[i].rank, rank,
                          k[i].size, size);
    ZO_CHECK(env_int(k[i].local_rank, 0, &lr, &f_lr));
    ZO_CHECK(env_int(k[i].local_size, 1, &ls, &f_ls));
    if (!f_lr) lr = 0, ls = 1;
    if (f_lr && !f_ls)
      ls = lr + 1 > size ? lr + 1 : size; /* torchrun always sets both; be lenient */
    if (lr >= ls)
      return zo_error_set(ZO_ERR_CONFIG, "launcher: %s=%d is not below %s=%d", k[i].local_rank, lr,
                          k[i].local_size, ls);
    *li = (zo_launch_info){rank, size, lr, ls, k[i].source};
    return ZO_OK;
  }
  return ZO_OK;
}

/* ------------------------------------------------------------ 16-bit <-> fp32 */

static void widen(const void *src, zo_dtype t, float *dst, size_t n) {
  const uint16_t *s = src;
  if (t == ZO_DTYPE_BF16)
    for (size_t i = 0; i < n; i++) dst[i] = zo_bf16_to_f32(s[i]);
  else
    for (size_t i = 0; i < n; i++) dst[i] = zo_f16_to_f32(s[i]);
}

static void narrow(const float *src, zo_dtype t, void *dst, size_t n) {
  uint16_t *d = dst;
  if (t == ZO_DTYPE_BF16)
    for (size_t i = 0; i < n; i++) d[i] = zo_f32_to_bf16(src[i]);
  else
    for (size_t i = 0; i < n; i++) d[i] = zo_f32_to_f16(src[i]);
}

/* ------------------------------------------------------------ self backend */

static void self_destroy(zo_comm_t *c) { (void)c; }

static zo_status self_split(zo_comm_t *c, int color, int key, zo_comm_t **out) {
  (void)c, (void)color, (void)key;
  return zo_comm_create_self(out);
}

static zo_status self_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes,
                                 zo_comm_req_t *r) {
  (void)c;
  if (send != recv) memcpy(recv, send, send_nbytes); /* front rejected partial overlap */
  r->complete = 1;
  return ZO_OK;
}

static zo_status self_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                     zo_red_type t, zo_comm_req_t *r) {
  (void)c;
  if (send != recv) memcpy(recv, send, recv_n * (t == ZO_RED_F64 ? 8 : 4)); /* sum over one rank */
  r->complete = 1;
  return ZO_OK;
}

static zo_status self_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_red_type t,
                                 zo_comm_req_t *r) {
  (void)c, (void)buf, (void)n, (void)t; /* the sum over one rank is the value itself */
  r->complete = 1;
  return ZO_OK;
}

static zo_status self_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root,
                                zo_comm_req_t *r) {
  (void)c, (void)buf, (void)nbytes, (void)root;
  r->complete = 1;
  return ZO_OK;
}

static zo_status self_barrier(zo_comm_t *c, zo_comm_req_t *r) {
  (void)c;
  r->complete = 1;
  return ZO_OK;
}

static zo_status self_wait(zo_comm_req_t *r) {
  (void)r;
  return ZO_OK;
}

static zo_status self_test(zo_comm_req_t *r, int *done) {
  (void)r;
  *done = 1;
  return ZO_OK;
}

static const zo_comm_ops self_ops = {
    .name = "self",
    .destroy = self_destroy,
    .split = self_split,
    .all_gather = self_all_gather,
    .reduce_scatter = self_reduce_scatter,
    .all_reduce = self_all_reduce,
    .broadcast = self_broadcast,
    .barrier = self_barrier,
    .wait = self_wait,
    .test = self_test,
};

/* ------------------------------------------------------------ communicators */

zo_comm_t *zo_comm_alloc(const zo_comm_ops *ops, int rank, int size, void *backend) {
  zo_comm_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->ops = ops, c->rank = rank, c->size = size, c->backend = backend;
  c->timeout_s = ZO_COMM_TIMEOUT_S_DEFAULT;
  return c;
}

zo_status zo_comm_create_self(zo_comm_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_self: out is NULL");
  *out = zo_comm_alloc(&self_ops, 0, 1, NULL);
  if (!*out) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "zo_comm_create_self: out of host memory");
  return ZO_OK;
}

#if !ZO_HAVE_NCCL
zo_status zo_comm_nccl_create(zo_device_t *dev, zo_comm_t *bootstrap, zo_comm_t **out) {
  (void)dev, (void)bootstrap, (void)out;
  return zo_error_set(ZO_ERR_UNSUPPORTED,
                      "comm: this zoffload was built without NCCL (the CUDA toolkit's NCCL was "
                      "not found at configure time)");
}
#endif

zo_status zo_comm_create_nccl(zo_device_t *dev, zo_comm_t *bootstrap, zo_comm_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_nccl: out is NULL");
  *out = NULL;
  if (!dev) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_nccl: dev is NULL");
  if (zo_device_get_kind(dev) != ZO_DEVICE_CUDA)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_nccl: device '%s' is not a CUDA device",
                        zo_device_name(dev));
  return zo_comm_nccl_create(dev, bootstrap, out);
}

#if !ZO_HAVE_MPI
zo_status zo_comm_mpi_create(const void *mpi_comm, zo_comm_t **out) {
  (void)mpi_comm, (void)out;
  return zo_error_set(ZO_ERR_UNSUPPORTED,
                      "comm: this zoffload was built without MPI (install libopenmpi-dev and "
                      "rebuild: scripts/deps.sh does)");
}
#endif

zo_status zo_comm_create_mpi(const void *mpi_comm, zo_comm_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_mpi: out is NULL");
  *out = NULL;
  return zo_comm_mpi_create(mpi_comm, out);
}

zo_status zo_comm_create_from_env(zo_comm_t **out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_create_from_env: out is NULL");
  *out = NULL;
  zo_launch_info li;
  ZO_CHECK(zo_launch_info_get(&li));
  if (li.world_size == 1) return zo_comm_create_self(out);
  zo_status st = zo_comm_mpi_create(NULL, out);
  if (st != ZO_OK)
    return zo_error_prefix(st, "comm: the launcher (%s) asks for %d ranks", li.source,
                           li.world_size);
  if (zo_comm_rank(*out) != li.rank || zo_comm_size(*out) != li.world_size) {
    st = zo_error_set(
        ZO_ERR_MPI,
        "comm: MPI says rank %d of %d, the launcher's variables (%s) say rank %d of %d; "
        "start every rank with the same launcher",
        zo_comm_rank(*out), zo_comm_size(*out), li.source, li.rank, li.world_size);
    zo_comm_destroy(*out);
    *out = NULL;
  }
  return st;
}

zo_status zo_comm_split(zo_comm_t *c, int color, int key, zo_comm_t **out) {
  if (!c || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_split: %s is NULL", !c ? "comm" : "out");
  *out = NULL;
  if (color < 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_split: color %d is negative", color);
  zo_status st = c->ops->split(c, color, key, out);
  if (st == ZO_OK && *out)
    (*out)->timeout_s = c->timeout_s; /* a split keeps its parent's watchdog */
  return st;
}

zo_status zo_comm_set_timeout(zo_comm_t *c, double seconds) {
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_set_timeout: comm is NULL");
  if (!(seconds > 0 && seconds <= ZO_COMM_TIMEOUT_S_MAX))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_set_timeout: %g s is outside (0, %g]", seconds,
                        (double)ZO_COMM_TIMEOUT_S_MAX);
  c->timeout_s = seconds;
  return ZO_OK;
}

void zo_comm_destroy(zo_comm_t *c) {
  if (!c) return;
  for (int i = 0; i < ZO_COMM_STAGE_CACHE; i++) free(c->stage_free[i]);
  c->ops->destroy(c);
  free(c);
}

int zo_comm_rank(const zo_comm_t *c) { return c ? c->rank : -1; }
int zo_comm_size(const zo_comm_t *c) { return c ? c->size : 0; }
const char *zo_comm_backend(const zo_comm_t *c) { return c ? c->ops->name : "(null)"; }
zo_stream_t *zo_comm_stream(const zo_comm_t *c) { return c ? c->stream : NULL; }

/* ------------------------------------------------------------ fp32 staging */

/* A buffer of at least @n floats: a cached one when one is large enough (the smallest such), else new. */
static float *stage_get(zo_comm_t *c, size_t n, size_t *got) {
  int best = -1;
  for (int i = 0; i < ZO_COMM_STAGE_CACHE; i++)
    if (c->stage_free[i] && c->stage_free_n[i] >= n &&
        (best < 0 || c->stage_free_n[i] < c->stage_free_n[best]))
      best = i;
  if (best >= 0) {
    float *p = c->stage_free[best];
    *got = c->stage_free_n[best];
    c->stage_free[best] = NULL;
    return p;
  }
  *got = n;
  return malloc(n * sizeof(float));
}

/* Keep @p for later (replacing the smallest cached one when the cache is full), or free it. */
static void stage_put(zo_comm_t *c, float *p, size_t n) {
  if (!p) return;
  int slot = -1;
  for (int i = 0; i < ZO_COMM_STAGE_CACHE && slot < 0; i++)
    if (!c->stage_free[i]) slot = i;
  if (slot < 0) {
    slot = 0;
    for (int i = 1; i < ZO_COMM_STAGE_CACHE; i++)
      if (c->stage_free_n[i] < c->stage_free_n[slot]) slot = i;
    if (c->stage_free_n[slot] >= n) {
      free(p);
      return;
    }
    free(c->stage_free[slot]);
  }
  c->stage_free[slot] = p;
  c->stage_free_n[slot] = n;
}

/* ------------------------------------------------------------ requests */

static zo_status req_new(zo_comm_t *c, zo_comm_req_t **out) {
  zo_comm_req_t *r = calloc(1, sizeof *r);
  if (!r) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "comm: out of host memory for a request");
  r->c = c;
  *out = r;
  return ZO_OK;
}

/* The work after the backend finished: the in-place move, the 16-bit rounding; frees @r. */
static void req_finish(zo_comm_req_t *r) {
  if (r->move_bytes) memmove(r->move_dst, r->move_src, r->move_bytes);
  if (r->stage) narrow(r->stage_result, r->out_dtype, r->out, r->out_n);
  stage_put(r->c, r->stage, r->stage_n);
  free(r);
}

zo_status zo_comm_wait(zo_comm_req_t *r) {
  if (!r) return ZO_OK;
  zo_status st = r->complete ? ZO_OK : r->c->ops->wait(r);
  if (st != ZO_OK) {
    stage_put(r->c, r->stage, r->stage_n);
    free(r);
    return st;
  }
  req_finish(r);
  return ZO_OK;
}

zo_status zo_comm_test(zo_comm_req_t *r, int *done) {
  if (!r || !done)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_test: %s is NULL", !r ? "req" : "done");
  *done = 0;
  zo_status st = ZO_OK;
  int fin = r->complete;
  if (!fin) st = r->c->ops->test(r, &fin);
  if (st != ZO_OK) {
    stage_put(r->c, r->stage, r->stage_n);
    free(r);
    *done = 1;
    return st;
  }
  if (fin) {
    req_finish(r);
    *done = 1;
  }
  return ZO_OK;
}

/* Start with @start's status: on an error the request is freed and *req stays NULL. */
static zo_status started(zo_status st, zo_comm_req_t *r, zo_comm_req_t **req) {
  if (st != ZO_OK) {
    stage_put(r->c, r->stage, r->stage_n);
    free(r);
    return st;
  }
  *req = r;
  return ZO_OK;
}

/* ------------------------------------------------------------ collectives */

static int ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/*
 * Shared layout check of all-gather and reduce-scatter: the big buffer holds
 * size blocks of @block_nbytes; the small one is block @rank of it (in place)
 * or lies outside it.
 */
static zo_status check_blocks(const zo_comm_t *c, const char *what, const void *small,
                              const void *big, size_t block_nbytes) {
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

static zo_status check_dtype(const char *what, zo_dtype t) {
  if (t != ZO_DTYPE_F32 && t != ZO_DTYPE_BF16 && t != ZO_DTYPE_F16)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: dtype %d is not fp32, bf16 or fp16", what, (int)t);
  return ZO_OK;
}

/*
 * The start every non-blocking call shares: *@req cleared, @c checked, a request made in *@r. An operation on no
 * data (@empty) is complete at once: it is handed out in *@req and *@r is NULL. Returns the argument errors.
 */
static zo_status begin(zo_comm_t *c, const char *what, zo_comm_req_t **req, int empty,
                       zo_comm_req_t **r) {
  *r = NULL;
  if (!req) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: req is NULL", what);
  *req = NULL;
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: comm is NULL", what);
  zo_comm_req_t *n = NULL;
  ZO_CHECK(req_new(c, &n));
  if (empty) {
    n->complete = 1;
    *req = n;
  } else {
    *r = n;
  }
  return ZO_OK;
}

zo_status zo_comm_iall_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes,
                              zo_comm_req_t **req) {
  zo_comm_req_t *r;
  ZO_CHECK(begin(c, "zo_comm_all_gather", req, send_nbytes == 0, &r));
  if (!r) return ZO_OK;
  zo_status st = ZO_OK;
  if (!send || !recv)
    st =
        zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_all_gather: %s is NULL", !send ? "send" : "recv");
  if (st == ZO_OK) st = check_blocks(c, "zo_comm_all_gather", send, recv, send_nbytes);
  if (st == ZO_OK) st = c->ops->all_gather(c, send, recv, send_nbytes, r);
  return started(st, r, req);
}

/*
 * A 16-bit reduction: natively when the backend reduces 16-bit types (*native = 1, nothing done here), else fp32
 * staging of @n elements of @src, widened now; after completion @out_n elements from stage + @result_off are
 * rounded back into @out (req_finish).
 */
static zo_status stage16(zo_comm_t *c, zo_comm_req_t *r, const char *what, const void *src,
                         size_t n, zo_dtype t, size_t result_off, void *out, size_t out_n) {
  if (!(r->stage = stage_get(c, n, &r->stage_n)))
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "%s: out of host memory staging %zu %s elements in fp32", what, n,
                        zo_dtype_name(t));
  widen(src, t, r->stage, n);
  r->stage_result = r->stage + result_off;
  r->out = out, r->out_n = out_n, r->out_dtype = t;
  return ZO_OK;
}

/* The backend's element type for a reduction of @t: its own 16-bit type when it reduces those natively. */
static zo_red_type red_type(const zo_comm_t *c, zo_dtype t) {
  if (t == ZO_DTYPE_F32 || !c->ops->native_16bit) return ZO_RED_F32;
  return t == ZO_DTYPE_BF16 ? ZO_RED_BF16 : ZO_RED_F16;
}

zo_status zo_comm_ireduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                  zo_dtype dtype, zo_comm_req_t **req) {
  static const char what[] = "zo_comm_reduce_scatter";
  ZO_CHECK(check_dtype(what, dtype));
  zo_comm_req_t *r;
  ZO_CHECK(begin(c, what, req, recv_n == 0, &r));
  if (!r) return ZO_OK;
  zo_status st = ZO_OK;
  const size_t esz = zo_dtype_size(dtype), size = (size_t)c->size;
  if (!send || !recv)
    st = zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s is NULL", what, !send ? "send" : "recv");
  if (st == ZO_OK && recv_n > SIZE_MAX / 4 / size)
    st = zo_error_set(ZO_ERR_INVALID_ARG, "%s: recv_n %zu overflows", what, recv_n);
  if (st == ZO_OK) st = check_blocks(c, what, recv, send, recv_n * esz);
  const zo_red_type rt = red_type(c, dtype);
  if (st == ZO_OK && dtype != ZO_DTYPE_F32 &&
      rt == ZO_RED_F32) { /* reduced in place in fp32 staging */
    st = stage16(c, r, what, send, size * recv_n, dtype, (size_t)c->rank * recv_n, recv, recv_n);
    if (st == ZO_OK)
      st = c->ops->reduce_scatter(c, r->stage, (float *)r->stage_result, recv_n, ZO_RED_F32, r);
  } else if (st == ZO_OK) {
    st = c->ops->reduce_scatter(c, send, recv, recv_n, rt, r);
  }
  return started(st, r, req);
}

zo_status zo_comm_iall_reduce(zo_comm_t *c, void *buf, size_t n, zo_dtype dtype,
                              zo_comm_req_t **req) {
  static const char what[] = "zo_comm_all_reduce";
  ZO_CHECK(check_dtype(what, dtype));
  zo_comm_req_t *r;
  ZO_CHECK(begin(c, what, req, n == 0, &r));
  if (!r) return ZO_OK;
  zo_status st = ZO_OK;
  if (!buf) st = zo_error_set(ZO_ERR_INVALID_ARG, "%s: buf is NULL", what);
  if (st == ZO_OK && n > SIZE_MAX / sizeof(float))
    st = zo_error_set(ZO_ERR_INVALID_ARG, "%s: n %zu overflows", what, n);
  const zo_red_type rt = red_type(c, dtype);
  if (st == ZO_OK && dtype != ZO_DTYPE_F32 && rt == ZO_RED_F32) {
    st = stage16(c, r, what, buf, n, dtype, 0, buf, n);
    if (st == ZO_OK) st = c->ops->all_reduce(c, r->stage, n, ZO_RED_F32, r);
  } else if (st == ZO_OK) {
    st = c->ops->all_reduce(c, buf, n, rt, r);
  }
  return started(st, r, req);
}

zo_status zo_comm_ibroadcast(zo_comm_t *c, void *buf, size_t nbytes, int root,
                             zo_comm_req_t **req) {
  if (c && (root < 0 || root >= c->size))
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_broadcast: root %d outside [0, %d)", root,
                        c->size);
  zo_comm_req_t *r;
  ZO_CHECK(begin(c, "zo_comm_broadcast", req, nbytes == 0, &r));
  if (!r) return ZO_OK;
  zo_status st = buf ? c->ops->broadcast(c, buf, nbytes, root, r)
                     : zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_broadcast: buf is NULL");
  return started(st, r, req);
}

zo_status zo_comm_all_gather(zo_comm_t *c, const void *send, void *recv, size_t send_nbytes) {
  zo_comm_req_t *r = NULL;
  ZO_CHECK(zo_comm_iall_gather(c, send, recv, send_nbytes, &r));
  return zo_comm_wait(r);
}

zo_status zo_comm_reduce_scatter(zo_comm_t *c, const void *send, void *recv, size_t recv_n,
                                 zo_dtype dtype) {
  zo_comm_req_t *r = NULL;
  ZO_CHECK(zo_comm_ireduce_scatter(c, send, recv, recv_n, dtype, &r));
  return zo_comm_wait(r);
}

zo_status zo_comm_reduce_scatter_f32(zo_comm_t *c, const float *send, float *recv, size_t recv_n) {
  return zo_comm_reduce_scatter(c, send, recv, recv_n, ZO_DTYPE_F32);
}

zo_status zo_comm_all_reduce(zo_comm_t *c, void *buf, size_t n, zo_dtype dtype) {
  zo_comm_req_t *r = NULL;
  ZO_CHECK(zo_comm_iall_reduce(c, buf, n, dtype, &r));
  return zo_comm_wait(r);
}

zo_status zo_comm_broadcast(zo_comm_t *c, void *buf, size_t nbytes, int root) {
  zo_comm_req_t *r = NULL;
  ZO_CHECK(zo_comm_ibroadcast(c, buf, nbytes, root, &r));
  return zo_comm_wait(r);
}

zo_status zo_comm_all_reduce_f64(zo_comm_t *c, double *buf, size_t n) {
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_all_reduce_f64: comm is NULL");
  if (n == 0) return ZO_OK;
  if (!buf) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_all_reduce_f64: buf is NULL");
  zo_comm_req_t *r = NULL;
  ZO_CHECK(req_new(c, &r));
  ZO_CHECK(started(c->ops->all_reduce(c, buf, n, ZO_RED_F64, r), r, &r));
  return zo_comm_wait(r);
}

zo_status zo_comm_barrier(zo_comm_t *c) {
  if (!c) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_comm_barrier: comm is NULL");
  zo_comm_req_t *r = NULL;
  ZO_CHECK(req_new(c, &r));
  ZO_CHECK(started(c->ops->barrier(c, r), r, &r));
  return zo_comm_wait(r);
}
