/*
 * engine_states.c - zo_engine_offload_states() / zo_engine_reload_states(): the engine's device memory moved to host
 * memory between training phases and back, bit for bit (DeepSpeed 0.16+'s offload_states), and the refusal of the
 * calls that need it meanwhile. Not here: where the regions are laid out (plan.c), the arena (gpu/arena.c).
 *
 * The engine's device memory is one arena (a single reservation) holding the device block, whose regions the plan
 * lays out at fixed offsets (per tensor: working weights, master, exp_avg, exp_avg_sq, gradient shard; then device
 * Adam's norm partials and upload stage, a rank's parameter blocks), plus, with parameter offload, the device
 * copies of fetched tensors (a cache of the host tier). Offloading copies every region of a named kind into one
 * host buffer and every other region through a temporary host buffer into one device allocation of their bytes,
 * drops the cache, and destroys the arena, so its reservation goes back to the device; reloading creates the arena
 * again, allocates the block and copies each region back to its offset. Each tensor's pointers follow (the place_*
 * functions below, the same arithmetic as finalize's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "pinned_internal.h"
#include "plan_internal.h"
#include "zoffload/budget.h"

/* One region of the device block: [off, off + bytes), of one kind, and whose pointer it is.
 * R_DP_RED, R_DP_GAT, R_PG_RING: the collectives' buffers of several ranks over NCCL (engine_dp.c, engine_dp3.c),
 * empty between steps: kind 0, neither copied nor kept, their owners pointed at the block again at reload. */
enum { R_WEIGHTS, R_STATE, R_GRAD, R_NORM, R_STAGE, R_PARAM_DEV, R_DP_RED, R_DP_GAT, R_PG_RING };
typedef struct st_region {
  size_t off, bytes;
  /* bytes its content has (0 for an empty shard), to order regions that share an offset */
  size_t nominal;
  unsigned kind; /* one zo_states_kind bit */
  int what, param, k;
  /* where it lies in the host copy (named kinds), or in the kept allocation and its staging */
  size_t buf_off;
} st_region;

/* e->states: from the first zo_engine_offload_states() to destroy; off 0 (and nothing held) while not offloaded. */
struct eng_states {
  unsigned off;   /* kinds moved to host memory; 0: nothing is offloaded */
  st_region *reg; /* every region of the device block, by offset */
  int n_reg;
  host_buf host; /* the named kinds' regions, each at its buf_off */
  void *keep;    /* device: the other regions, each at its buf_off; NULL when none */
  size_t keep_bytes;
  size_t block_bytes;         /* the device block's bytes (e->dev_block_bytes before) */
  size_t arena_bytes;         /* the arena's capacity before (reserved again at reload) */
  int fetch_ok;               /* working weights resident and kept: fetch and release still work */
  double offload_s, reload_s; /* the last offload's and reload's wall time */
};

static const char *const k_kind_names[] = {"optim_states", "hp_params", "lp_params", "lp_grads",
                                           "contiguous_grad_buffer"};

/* @kinds' DeepSpeed names, comma-separated, into @buf. */
static const char *kind_names(unsigned kinds, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int b = 0; b < 5; b++)
    if (kinds & (1u << b) && n < cap)
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", k_kind_names[b]);
  return buf;
}

/* ---------------------------------------------------------------- the calls that need the moved memory */

zo_status eng_states_check(const zo_engine_t *e, const char *what) {
  ZO_CHECK(eng_check_owner(e, what));
  if (!e || !e->states || !e->states->off) return ZO_OK;
  /* they touch no device memory of the engine (synchronize: nothing is in flight once offloaded) */
  static const char *const always[] = {"mem_info",       "nvme_busy",     "set_lr",
                                       "set_trace",      "synchronize",   "set_param_weight_decay",
                                       "offload_states", "reload_states", "states_info"};
  for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
    if (!strcmp(what, always[i])) return ZO_OK;
  if (e->states->fetch_ok && (!strcmp(what, "fetch") || !strcmp(what, "release"))) return ZO_OK;
  char names[160];
  return zo_error_set(
      ZO_ERR_INVALID_USAGE,
      "zo_engine_%s: the engine's %s are offloaded to host memory (offload_states); "
      "call reload_states first",
      what, kind_names(e->states->off, names, sizeof names));
}

void eng_states_host_mem(const struct eng_states *s, size_t *host_bytes, size_t *pinned_bytes) {
  if (!s) return;
  *host_bytes += s->host.nbytes;
  if (s->host.pinned) *pinned_bytes += s->host.nbytes;
}

/* Back to "nothing offloaded": the host copy, the kept allocation and the region list freed. */
static void states_clear(zo_engine_t *e, struct eng_states *s) {
  eng_host_buf_free(&s->host);
  if (s->keep) zo_device_free(e->dev, s->keep);
  free(s->reg);
  s->reg = NULL, s->keep = NULL;
  s->n_reg = 0, s->off = 0, s->keep_bytes = 0, s->fetch_ok = 0;
}

void eng_states_free(zo_engine_t *e) {
  struct eng_states *s = e->states;
  if (!s) return;
  states_clear(e, s);
  free(s);
  e->states = NULL;
}

/* ---------------------------------------------------------------- the device block's regions */

static int region_cmp(const void *a, const void *b) {
  const st_region *x = a, *y = b;
  if (x->off != y->off) return x->off < y->off ? -1 : 1;
  return (x->nominal > y->nominal) - (x->nominal < y->nominal);
}

static void add_region(st_region *r, int *n, size_t off, size_t nominal, unsigned kind, int what,
                       int param, int k) {
  if (off == SIZE_MAX) return;
  r[*n] = (st_region){
      .off = off, .nominal = nominal, .kind = kind, .what = what, .param = param, .k = k};
  (*n)++;
}

/* Every region the plan placed in the device block, in address order, each extending to the next one's offset
 * (the last to the block's end), so that together they cover every byte of it. */
static zo_status list_regions(const zo_engine_t *e, st_region **out, int *n_out) {
  const zo_plan *pl = e->plan;
  const size_t wsz = zo_dtype_size(e->wdtype), gsz = zo_dtype_size(e->adtype);
  st_region *r = calloc((size_t)e->n_params * 5 + 6, sizeof *r);
  if (!r) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "offload_states: out of host memory");
  int n = 0;
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    const size_t *off = pl->tensor[i].dev_off;
    add_region(r, &n, off[0], p->n * wsz, ZO_STATES_LP_PARAMS, R_WEIGHTS, i, 0);
    add_region(r, &n, off[1], p->shard_n * e->esz[ST_MASTER], ZO_STATES_HP_PARAMS, R_STATE, i,
               ST_MASTER);
    for (int k = ST_EXP_AVG; k <= ST_EXP_AVG_SQ; k++)
      add_region(r, &n, off[1 + k], p->shard_n * e->esz[k], ZO_STATES_OPTIM, R_STATE, i, k);
    add_region(r, &n, off[4], p->shard_n * gsz, ZO_STATES_LP_GRADS, R_GRAD, i, 0);
  }
  add_region(r, &n, pl->dev_norm_off, 1, ZO_STATES_GRAD_BUFFER, R_NORM, -1, 0);
  add_region(r, &n, pl->dev_stage_off, 1, ZO_STATES_GRAD_BUFFER, R_STAGE, -1, 0);
  add_region(r, &n, pl->dev_param_off, pl->pw_total_el * wsz, ZO_STATES_LP_PARAMS, R_PARAM_DEV, -1,
             0);
  add_region(r, &n, pl->dp_dev_grad_off, 1, 0, R_DP_RED, -1, 0);
  add_region(r, &n, pl->dp_dev_gather_off, 1, 0, R_DP_GAT, -1, 0);
  add_region(r, &n, pl->dev_pg_ring_off, 1, 0, R_PG_RING, -1, 0);
  qsort(r, (size_t)n, sizeof *r, region_cmp);
  for (int j = 0; j < n; j++) {
    const size_t end = j + 1 < n ? r[j + 1].off : e->dev_block_bytes;
    r[j].bytes = end - r[j].off;
  }
  *out = r, *n_out = n;
  return ZO_OK;
}

/* Point region @r's owner at @addr (NULL: the region is not in device memory now). */
static void place_region(zo_engine_t *e, const st_region *r, char *addr) {
  switch (r->what) {
    case R_WEIGHTS: e->params[r->param]->weights = addr; break;
    case R_STATE: e->params[r->param]->state[r->k] = addr; break;
    case R_GRAD: e->params[r->param]->grad = addr; break;
    case R_NORM: e->dnorm_dev = (double *)addr; break;
    case R_STAGE: e->dstage_dev = addr; break;
    case R_PARAM_DEV: e->param_dev = addr; break;
    default: break; /* the collectives' buffers: eng_dp_rebase, eng_pg_rebase (place_all) */
  }
}

/* Kinds the engine holds in device memory: the regions of the block, and with parameter offload the device
 * copies of fetched tensors (working weights, in the arena). */
static unsigned held_kinds(const zo_engine_t *e, const st_region *r, int n) {
  unsigned k = e->ptier != ZO_OFFLOAD_NONE ? ZO_STATES_LP_PARAMS : 0;
  for (int j = 0; j < n; j++)
    if (r[j].nominal) k |= r[j].kind;
  return k;
}

/* ---------------------------------------------------------------- offload */

/* Between zo_engine_step() and the next micro-batch's first hand-over, nothing fetched. */
static zo_status at_rest(const zo_engine_t *e) {
  if (e->n_grads)
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "offload_states: %d gradient(s) were handed over since the last step; call it "
        "between step() and the next micro-batch's backward",
        e->n_grads);
  if (eng_acc_pending(e->acc))
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "offload_states: %d tensor(s) hold accumulated micro-batch gradients of the step "
        "in progress; call it between step() and the next micro-batch's backward",
        eng_acc_pending(e->acc));
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->in_use)
      return zo_error_set(
          ZO_ERR_INVALID_USAGE,
          "offload_states: tensor '%s' is fetched (%d fetch(es) not released); release it "
          "first",
          e->params[i]->name, e->params[i]->in_use);
  return ZO_OK;
}

/* The pinned budget (zoffload.pinned_fraction of MemTotal, as the start-up budget's pinned line) has room for
 * @nbytes more besides what the process-wide pool holds. */
static int pin_fits(const zo_engine_t *e, size_t nbytes) {
  size_t total = SIZE_MAX;
  if (zo_plan_mem_total(&total) != ZO_OK || total == SIZE_MAX) return 1;
  const size_t cap = (size_t)((double)total * zo_plan_pinned_fraction(&e->cfg)),
               used = zo_host_pinned_bytes();
  return used <= cap && nbytes <= cap - used;
}

/* A host buffer of @nbytes for @what: pinned when @pin and the budget allows, else pageable; ZO_ERR_OUT_OF_MEMORY
 * naming the bytes needed and available. */
static zo_status host_copy_alloc(const zo_engine_t *e, host_buf *b, size_t nbytes, int pin,
                                 const char *what) {
  memset(b, 0, sizeof *b);
  if (!nbytes) return ZO_OK;
  char src[160] = "";
  const size_t avail = zo_host_memory_available(src, sizeof src);
  if (nbytes > avail)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "offload_states: %s needs %zu bytes of host memory, %zu are available (%s)",
                        what, nbytes, avail, src);
  if (pin && !pin_fits(e, nbytes)) {
    zo_info(
        "offload_states: %s (%zu bytes) is pageable: page-locked it would pass zoffload.pinned_fraction "
        "of MemTotal",
        what, nbytes);
    pin = 0;
  }
  zo_status st = eng_host_buf_alloc(b, nbytes, pin);
  if (st != ZO_OK)
    return zo_error_prefix(st, "offload_states: %s (%zu bytes of host memory, %zu available)", what,
                           nbytes, avail);
  return ZO_OK;
}

/* Queue the copies of the regions of kinds in @mask between the block at @blk and @buf (each at its buf_off) on the
 * copy stream: into the regions with @in, out of them without. */
static zo_status copy_regions(zo_engine_t *e, const struct eng_states *s, char *blk, char *buf,
                              unsigned mask, int in) {
  for (int j = 0; j < s->n_reg; j++) {
    const st_region *r = &s->reg[j];
    if (!(r->kind & mask) || !r->bytes) continue; /* kind 0 (empty between steps): never copied */
    char *d = blk + r->off, *h = buf + r->buf_off;
    ZO_CHECK(zo_memcpy_async(e->copy_stream, in ? d : h, in ? h : d, r->bytes,
                             in ? ZO_COPY_H2D : ZO_COPY_D2H));
    if (in)
      e->ctr.h2d_bytes += r->bytes;
    else
      e->ctr.d2h_bytes += r->bytes;
  }
  return ZO_OK;
}

/* The arena again, of @s->arena_bytes (with zoffload.device_arena_bytes 0 and less free now: what create_arena()
 * takes by default, when that holds the engine's need), and the block in it. On an error neither exists. */
static zo_status reserve(zo_engine_t *e, const struct eng_states *s) {
  zo_status st = zo_arena_create(e->dev, s->arena_bytes, NULL, &e->arena);
  if (st == ZO_ERR_OUT_OF_MEMORY && e->cfg.zoffload.device_arena_bytes <= 0) {
    size_t avail = 0;
    ZO_CHECK(zo_device_mem_available(e->dev, &avail));
    const size_t cap = eng_arena_default_bytes(e, avail) / ZO_DEVICE_ALIGN * ZO_DEVICE_ALIGN;
    const size_t need =
        e->plan->device_need_bytes > s->block_bytes ? e->plan->device_need_bytes : s->block_bytes;
    if (cap >= need && cap >= ZO_DEVICE_ALIGN)
      st = zo_arena_create(e->dev, cap, NULL, &e->arena);
    else
      return zo_error_set(
          ZO_ERR_OUT_OF_MEMORY,
          "reload_states: the engine needs %zu bytes of device memory (%zu before the "
          "offload), %zu are free",
          need, s->arena_bytes, avail);
  }
  if (st != ZO_OK) {
    e->arena = NULL;
    return zo_error_prefix(st, "reload_states: device arena of %zu bytes", s->arena_bytes);
  }
  if (!s->block_bytes) return ZO_OK;
  st = zo_arena_alloc(e->arena, s->block_bytes, &e->dev_blk); /* pinned for the engine's life */
  if (st != ZO_OK) {
    zo_arena_destroy(e->arena);
    e->arena = NULL, e->dev_blk = NULL;
    return zo_error_prefix(st, "reload_states: device block of %zu bytes", s->block_bytes);
  }
  e->dev_block = zo_arena_ptr(e->dev_blk);
  return ZO_OK;
}

/* Free the block and the arena: their device memory goes back to the device. */
static void release(zo_engine_t *e) {
  if (e->dev_blk) zo_arena_free(e->arena, e->dev_blk, NULL);
  zo_arena_destroy(
      e->arena); /* waits for the last uses of every block, then frees the reservation */
  e->arena = NULL, e->dev_blk = NULL, e->dev_block = NULL;
}

/* The kept regions from the staging @tmp into a new device allocation s->keep. */
static zo_status keep_alloc(zo_engine_t *e, struct eng_states *s, const host_buf *tmp) {
  if (!s->keep_bytes) return ZO_OK;
  zo_status st = zo_device_malloc(e->dev, s->keep_bytes, &s->keep);
  if (st != ZO_OK) {
    s->keep = NULL;
    return zo_error_prefix(st, "offload_states: device memory for the kinds kept (%zu bytes)",
                           s->keep_bytes);
  }
  return eng_dev_copy(e, s->keep, tmp->ptr, s->keep_bytes, ZO_COPY_H2D);
}

/* Every region's owner pointed where its bytes are: the block when it exists, else the kept allocation (kinds not
 * offloaded) or nowhere. */
static void place_all(zo_engine_t *e, const struct eng_states *s, int in_block) {
  for (int j = 0; j < s->n_reg; j++) {
    const st_region *r = &s->reg[j];
    char *a = in_block              ? (char *)e->dev_block + r->off
              : !(r->kind & s->off) ? (char *)s->keep + r->buf_off
                                    : NULL;
    place_region(e, r, a);
  }
  /* several ranks over NCCL: their collectives' buffers in the block, or nowhere while offloaded */
  eng_dp_rebase(e, e->plan);
  eng_pg_rebase(e, e->plan);
}

/* Drop every device copy of an offloaded parameter (the host tier has its weights): the arena goes. */
static zo_status drop_device_copies(zo_engine_t *e) {
  if (e->ptier == ZO_OFFLOAD_NONE && !e->pdev) return ZO_OK;
  ZO_CHECK(eng_settle_fetches(e));
  if (eng_dp3(e)) ZO_CHECK(eng_pg_drop_pending(e));
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->blk) eng_drop_device_copy(e, e->params[i]);
  return ZO_OK;
}

zo_status zo_engine_offload_states(zo_engine_t *e, unsigned kinds, int pin_memory) {
  ENG_CHECK_OWNER(e, "offload_states");
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "offload_states: engine is NULL");
  if (!kinds || (kinds & ~(unsigned)ZO_STATES_ALL))
    return zo_error_set(
        ZO_ERR_INVALID_ARG,
        "offload_states: kinds 0x%x: a non-empty set of ZO_STATES_* bits (0x%x: all)", kinds,
        (unsigned)ZO_STATES_ALL);
  if (!e->finalized || e->fin_failed)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "offload_states: engine not finalized");
  char names[160], names2[160];
  if (e->states && e->states->off) { /* already offloaded: fine when nothing more is named */
    const unsigned more = kinds & held_kinds(e, e->states->reg, e->states->n_reg) & ~e->states->off;
    if (!more) return ZO_OK;
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "offload_states: %s already offloaded; reload_states before offloading %s too",
        kind_names(e->states->off, names, sizeof names), kind_names(more, names2, sizeof names2));
  }
  const double t0 = zo_clock_s();
  if (!e->states && !(e->states = calloc(1, sizeof *e->states)))
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "offload_states: out of host memory");
  struct eng_states *s = e->states;
  host_buf tmp = {0};
  zo_status st = list_regions(e, &s->reg, &s->n_reg);
  if (st != ZO_OK) goto fail;
  const unsigned move = kinds & held_kinds(e, s->reg, s->n_reg);
  if (!move) { /* every named kind lives in host memory or on NVMe already */
    zo_info("offload_states: %s: none in device memory; nothing moved",
            kind_names(kinds, names, sizeof names));
    goto fail; /* st is ZO_OK */
  }
  if ((st = at_rest(e)) != ZO_OK || (st = zo_engine_synchronize(e)) != ZO_OK ||
      (st = drop_device_copies(e)) != ZO_OK)
    goto fail;
  /* every stream of the device: compute queued by the caller may still read the working weights (a forward
   * before this call), and a communicator's stream the collectives' buffers */
  if ((st = zo_device_synchronize(e->dev)) != ZO_OK) goto fail;
  /* from here on the regions split by it; on a failure below states_clear() makes it 0 again */
  s->off = move;
  size_t host_bytes = 0;
  for (int j = 0; j < s->n_reg; j++) {
    if (!s->reg[j].kind) continue; /* empty between steps: not kept either */
    size_t *at = s->reg[j].kind & s->off ? &host_bytes : &s->keep_bytes;
    s->reg[j].buf_off = *at;
    *at += zo_round_up(s->reg[j].bytes, ZO_DEVICE_ALIGN);
  }
  s->block_bytes = e->dev_block_bytes;
  s->fetch_ok = e->ptier == ZO_OFFLOAD_NONE && !(s->off & ZO_STATES_LP_PARAMS);
  if ((st = host_copy_alloc(e, &s->host, host_bytes, pin_memory, "the offloaded states' copy")) !=
          ZO_OK ||
      (st = host_copy_alloc(e, &tmp, s->keep_bytes, 0, "the staging of the states kept")) != ZO_OK)
    goto fail;
  char *blk = e->dev_block;
  if ((st = copy_regions(e, s, blk, s->host.ptr, s->off, 0)) != ZO_OK ||
      (st = copy_regions(e, s, blk, tmp.ptr, ~s->off, 0)) != ZO_OK ||
      (st = zo_stream_synchronize(e->copy_stream)) != ZO_OK)
    goto fail;
  zo_arena_stats as;
  if ((st = zo_arena_get_stats(e->arena, &as)) != ZO_OK) goto fail;
  s->arena_bytes = as.capacity;
  size_t used0 = 0;
  zo_device_mem_info(e->dev, &used0, NULL, NULL);
  release(e);
  if ((st = keep_alloc(e, s, &tmp)) != ZO_OK) {
    /* the device was just given more than that back: only a failing device gets here. Put everything back. */
    char why[512];
    snprintf(why, sizeof why, "%s", zo_last_error());
    if (s->keep) zo_device_free(e->dev, s->keep);
    s->keep = NULL;
    zo_status st2 = reserve(e, s);
    if (st2 == ZO_OK) st2 = copy_regions(e, s, e->dev_block, s->host.ptr, s->off, 1);
    if (st2 == ZO_OK) st2 = copy_regions(e, s, e->dev_block, tmp.ptr, ~s->off, 1);
    if (st2 == ZO_OK) st2 = zo_stream_synchronize(e->copy_stream);
    if (st2 != ZO_OK) e->fin_failed = 1; /* its memory is gone: only destroy is accepted */
    st = zo_error_set(st, "%s%s", why,
                      st2 == ZO_OK
                          ? "; the engine's memory was put back"
                          : "; putting the engine's memory back failed too: destroy the engine");
    if (st2 == ZO_OK) place_all(e, s, 1);
    goto fail;
  }
  eng_host_buf_free(&tmp);
  place_all(e, s, 0);
  e->dev_block_bytes = s->keep_bytes;
  size_t used1 = 0;
  zo_device_mem_info(e->dev, &used1, NULL, NULL);
  s->offload_s = zo_clock_s() - t0;
  if (s->host.nbytes)
    zo_info(
        "offload_states: %s: %zu bytes to %s host memory, %zu kept in device memory; the device's memory "
        "in use %zu -> %zu bytes (%.3f s)",
        kind_names(s->off, names, sizeof names), s->host.nbytes,
        s->host.pinned ? "page-locked" : "pageable", s->keep_bytes, used0, used1, s->offload_s);
  else /* parameter offload with the optimizer off the device: the arena held only copies of fetched tensors */
    zo_info(
        "offload_states: %s: the device copies of offloaded parameters dropped and the arena given back; "
        "the device's memory in use %zu -> %zu bytes (%.3f s)",
        kind_names(s->off, names, sizeof names), used0, used1, s->offload_s);
  return ZO_OK;
fail:
  eng_host_buf_free(&tmp);
  states_clear(e, s);
  return st;
}

/* ---------------------------------------------------------------- reload */

zo_status zo_engine_reload_states(zo_engine_t *e) {
  ENG_CHECK_OWNER(e, "reload_states");
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "reload_states: engine is NULL");
  struct eng_states *s = e->states;
  if (!s || !s->off) return ZO_OK;
  const double t0 = zo_clock_s();
  /* the kept regions to host memory first, so the whole device is free for the arena */
  host_buf tmp = {0};
  zo_status st = host_copy_alloc(e, &tmp, s->keep_bytes, 0, "the staging of the states kept");
  if (st != ZO_OK) return st;
  if (s->keep_bytes) {
    st = eng_dev_copy(e, tmp.ptr, s->keep, s->keep_bytes, ZO_COPY_D2H);
    if (st != ZO_OK) {
      eng_host_buf_free(&tmp);
      return zo_error_prefix(st, "reload_states: the states kept in device memory");
    }
    zo_device_free(e->dev, s->keep);
    s->keep = NULL;
  }
  st = reserve(e, s);
  if (st == ZO_OK) {
    st = copy_regions(e, s, e->dev_block, s->host.ptr, s->off, 1);
    if (st == ZO_OK) st = copy_regions(e, s, e->dev_block, tmp.ptr, ~s->off, 1);
    if (st == ZO_OK) st = zo_stream_synchronize(e->copy_stream);
    if (st != ZO_OK) release(e);
  }
  if (st != ZO_OK) { /* still offloaded: the kept regions back into device memory */
    char why[512];
    snprintf(why, sizeof why, "%s", zo_last_error());
    zo_status st2 = keep_alloc(e, s, &tmp);
    eng_host_buf_free(&tmp);
    if (st2 != ZO_OK) e->fin_failed = 1;
    return zo_error_set(st, "%s%s", why,
                        st2 == ZO_OK
                            ? " (the engine stays offloaded; reload_states again once the device "
                              "has room)"
                            : "; the states kept in device memory could not be put back either: "
                              "destroy the engine");
  }
  eng_host_buf_free(&tmp);
  place_all(e, s, 1);
  e->dev_block_bytes = s->block_bytes;
  s->reload_s = zo_clock_s() - t0;
  char names[160];
  zo_info("reload_states: %s back in device memory (arena of %zu bytes, %.3f s)",
          kind_names(s->off, names, sizeof names), s->arena_bytes, s->reload_s);
  states_clear(e, s);
  return ZO_OK;
}

zo_status zo_engine_states_info(const zo_engine_t *e, zo_states_info *out) {
  ENG_CHECK_OWNER(e, "states_info");
  if (!e || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "states_info: NULL argument");
  memset(out, 0, sizeof *out);
  const struct eng_states *s = e->states;
  if (s && s->off) {
    for (int j = 0; j < s->n_reg; j++) /* the kept regions */
      if (s->reg[j].nominal && !(s->reg[j].kind & s->off)) out->held |= s->reg[j].kind;
  } else if (e->finalized && !e->fin_failed) {
    st_region *r = NULL;
    int n = 0;
    ZO_CHECK(list_regions(e, &r, &n));
    out->held = held_kinds(e, r, n);
    free(r);
  }
  if (!s) return ZO_OK;
  out->offload_s = s->offload_s, out->reload_s = s->reload_s;
  if (!s->off) return ZO_OK;
  out->offloaded = s->off;
  out->host_bytes = s->host.nbytes;
  out->host_pinned = s->host.pinned;
  out->kept_device_bytes = s->keep_bytes;
  out->released_bytes = s->arena_bytes;
  return ZO_OK;
}
