/*
 * engine_gradnv.c - gradients beside the optimizer state on NVMe (offload_optimizer "nvme"): each hand-over chunk
 * goes to grad.swp (the accumulation dtype, the state files' extents) through a few bounded I/O buffers, cast on
 * the first contribution of a step and read-added-written on later ones, with the norm taken from the final chunk
 * while it is in memory. ZeRO-Infinity swaps gradients out with the optimizer state (DeepSpeed
 * partitioned_optimizer_swapper.swap_out_gradients). Not here: the staging copies (engine_accum.c), the reduction
 * over ranks (engine_dp.c), reading a sub-group's gradient into its slot for Adam (engine_nvme.c).
 */
#include <math.h>

#include "engine_internal.h"
#include "zoffload/adam.h"

/* The norm's summation chunk (cpu_adam: ZO_SQNORM_CHUNK): a shard's squared norm is the sum, in order, of the
 * sums of its 64 Ki-element chunks, so adding chunk by chunk here gives the bits of the whole-shard pass. */
enum { GNV_NORM_CHUNK = 65536 };

size_t eng_gnv_el(const zo_engine_t *e) {
  size_t largest = 0;
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->shard_n > largest) largest = e->params[i]->shard_n;
  const int64_t rb = e->cfg.zero.reduce_bucket_size;
  size_t el = rb > 0 && (uint64_t)rb < largest ? (size_t)rb : largest;
  const int64_t sgs = e->cfg.zero.sub_group_size; /* no larger than a sub-group's buffer */
  if (sgs > 0 && (uint64_t)sgs < el) el = (size_t)sgs;
  size_t unit = eng_extent_unit_at(e, e->swap_align ? e->swap_align : 4096);
  if (unit < GNV_NORM_CHUNK) unit = GNV_NORM_CHUNK; /* both powers of two: the larger is a multiple of the other */
  size_t r;
  if (zo_size_round_up(el ? el : 1, unit, &r)) r = unit;
  return r;
}

/* Wait the write out of buffer @b, if any. */
static zo_status gnv_wait(zo_engine_t *e, int b) {
  if (!e->gnv_req[b]) return ZO_OK;
  return eng_swap_wait(e, e->swap, &e->gnv_req[b]);
}

zo_status eng_gnv_drain(zo_engine_t *e) {
  zo_status first = ZO_OK;
  for (int b = 0; b < e->gnv_n; b++) {
    zo_status st = gnv_wait(e, b);
    if (first == ZO_OK) first = st;
  }
  return first;
}

zo_status eng_gnv_put(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, const void *src, zo_dtype st, int add,
                      int last) {
  const size_t asz = zo_dtype_size(e->adtype), ssz = zo_dtype_size(st), unit = eng_extent_unit(e);
  for (size_t o = off; o < off + n; o += e->gnv_el) {
    const size_t m = off + n - o < e->gnv_el ? off + n - o : e->gnv_el;
    const int b = e->gnv_next;
    e->gnv_next = (e->gnv_next + 1) % e->gnv_n;
    void *buf = (char *)e->gnv_host.ptr + (size_t)b * e->gnv_el * asz;
    ZO_CHECK(gnv_wait(e, b));
    /* [o, o + m) lies at file_el + o: aligned at both ends (o is a multiple of the extent unit; the end is padded
     * up to one, inside the shard's padded extent) */
    const uint64_t n_el = zo_round_up(m, unit);
    if (add) {
      /* the last write of this range (from either buffer) may still be in flight: on disk before it is read */
      ZO_CHECK(eng_gnv_drain(e));
      zo_swap_req_t *rq;
      ZO_CHECK(eng_swap_io(e, 0, ST_GRAD, p->file_el + o, buf, n_el, &rq));
      zo_status rs = eng_swap_wait(e, e->swap, &rq);
      if (rs != ZO_OK) return zo_error_prefix(rs, "gradient of '%s' [%zu, %zu) from grad.swp", p->name, o, o + m);
    }
    eng_acc_add(buf, e->adtype, (const char *)src + (o - off) * ssz, st, m, add);
    if (last)
      for (size_t j = 0; j < m; j += GNV_NORM_CHUNK) {
        double s;
        const size_t k = m - j < GNV_NORM_CHUNK ? m - j : GNV_NORM_CHUNK;
        ZO_CHECK(zo_grad_sqnorm_ex((char *)buf + j * asz, e->adtype, k, ZO_SIMD_AUTO, 1, &s, NULL));
        p->sqnorm += s;
      }
    ZO_CHECK(eng_swap_io(e, 1, ST_GRAD, p->file_el + o, buf, n_el, &e->gnv_req[b]));
  }
  return ZO_OK;
}

zo_status eng_gnv_land(zo_engine_t *e, zo_param_t *p, zo_status st) {
  zo_status w = eng_gnv_drain(e); /* on disk before the sub-group's read may be issued */
  p->landed_st = st != ZO_OK ? st : w;
  p->nonfinite = !isfinite(p->sqnorm);
  atomic_store_explicit(&p->landed, 1, memory_order_release);
  return p->landed_st;
}
