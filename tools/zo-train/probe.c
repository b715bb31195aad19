/*
 * probe.c - the CPU model's compute measured on this machine (probe.h): a forward and a backward of 1- and
 * 2-layer cuts of the run's model at its micro-batch, kernels and threads, kept in the speeds cache. Not the
 * planner (predict.c) and not a benchmark: a few passes, once per machine and model.
 */
#include "probe.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "train_model.h"
#include "zoffload/adam.h"
#include "zoffload/budget.h"
#include "zoffload/dtype.h"
#include "zoffload/speeds.h"
#include "zoffload/status.h"

#define PROBE_PASSES 3   /* timed passes per cut, the median kept (after one untimed) */
#define PROBE_MIN_S 0.02 /* a cut whose passes are shorter gets up to PROBE_MAX_PASSES */
#define PROBE_MAX_PASSES 9
#define PROBE_MEM_SHARE \
  4 /* the probe takes at most 1/PROBE_MEM_SHARE of the host memory available */
#define PROBE_BUDGET_S 4.0 /* nor more than about this many seconds by the cost model */

/* One cut's buffers: group 0 (wte, wpe), one block's tensors (every block binds the same: the values do not
 * change the time), ln_f. Offsets in elements, 64-byte aligned in every dtype. */
typedef struct probe {
  const gpt_config *full;
  gpt_config cut;
  int bf16;     /* the blocks' products take the working copy (bf16) as their operand */
  int streamed; /* do what zo-train's streamed hook does (model.c): cast each fetched working copy
                                into the fp32 scratch, each gradient into the hand-over dtype */
  zo_dtype work, hand; /* working dtype, hand-over dtype */
  void *src, *ring;    /* the working copies (work), the hand-over buffer (hand) */
  float *w, *g;        /* fp32 weights and gradients of every role */
  size_t
      off[2 + GPT_PARAMS_PER_LAYER + 2]; /* wte, wpe, the block's tensors, ln_f weight and bias */
  size_t len[2 + GPT_PARAMS_PER_LAYER + 2]; /* their elements */
  size_t n;                                 /* elements in each buffer */
  gpt_model *m;
  char err[512];
} probe;

/* The role of parameter @i of a cut of @L layers: its slot in probe.off. */
static int role(int i, int L) {
  if (i < 2) return i;
  if (i < 2 + GPT_PARAMS_PER_LAYER * L) return 2 + (i - 2) % GPT_PARAMS_PER_LAYER;
  return 2 + GPT_PARAMS_PER_LAYER + (i - 2 - GPT_PARAMS_PER_LAYER * L);
}

/* @n elements from @s (dtype @st) to @d (dtype @dt), on every thread as model.c casts */
static int cast(void *d, zo_dtype dt, const void *s, zo_dtype st, size_t n) {
  if (dt == st) return memcpy(d, s, n * zo_dtype_size(dt)), 0;
  return zo_cast(d, dt, s, st, n, 0) == ZO_OK ? 0 : -1;
}

static int hook(void *user, int phase, int group, int end) {
  probe *p = user;
  int first, count;
  gpt_group_params(&p->cut, group, &first, &count);
  for (int i = first; i < first + count; i++) {
    const int r = role(i, p->cut.n_layer);
    const size_t o = p->off[r];
    if (end) { /* backward: the gradient handed over */
      if (phase == GPT_HOOK_BACKWARD && p->streamed &&
          cast((char *)p->ring + o * zo_dtype_size(p->hand), p->hand, p->g + o, ZO_DTYPE_F32,
               p->len[r]))
        return -1;
      continue;
    }
    const void *wc = (const char *)p->src + o * zo_dtype_size(p->work);
    int rc;
    if (p->bf16 && gpt_gemm_bf16_param(&p->cut, i))
      rc = gpt_bind_weight_bf16(p->m, i, wc);
    else if (p->streamed && cast(p->w + o, ZO_DTYPE_F32, wc, p->work, p->len[r]))
      return -1;
    else
      rc = gpt_bind_weight(p->m, i, p->w + o);
    if (rc || (phase == GPT_HOOK_BACKWARD && gpt_bind_grad(p->m, i, p->g + o))) return -1;
  }
  return 0;
}

/* Median seconds of a forward + backward of @p's cut of @L layers at @B x seq_len tokens; < 0 on failure. */
static double time_cut(probe *p, int L, int B, int recompute, const uint8_t *in,
                       const uint8_t *tg) {
  p->cut = *p->full;
  p->cut.n_layer = L;
  char err[256];
  if (gpt_create_streamed(&p->cut, B, recompute, &p->m, err, sizeof err)) {
    snprintf(p->err, sizeof p->err, "%s", err);
    return -1;
  }
  double t[PROBE_MAX_PASSES], sum = 0;
  int n = 0, ok = !p->bf16 || gpt_set_gemm_bf16(p->m) == 0;
  gpt_set_hook(p->m, hook, p);
  for (int pass = -1; ok && n < PROBE_MAX_PASSES && (n < PROBE_PASSES || sum < PROBE_MIN_S);
       pass++) {
    const double t0 = zo_clock_s();
    const float loss = gpt_forward(p->m, in, tg, B, p->cut.seq_len);
    ok = loss == loss && gpt_backward(p->m, 1.0f) == 0;
    if (pass >= 0) sum += t[n++] = zo_clock_s() - t0;
  }
  if (!ok) snprintf(p->err, sizeof p->err, "%s", gpt_last_error(p->m));
  gpt_destroy(p->m);
  p->m = NULL;
  if (!ok) return -1;
  qsort(t, (size_t)n, sizeof *t, zo_tool_cmp_double);
  return t[n / 2];
}

/* A failed measurement: @st, with the reason in @how. */
static zo_status fail(char *how, size_t how_cap, zo_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static zo_status fail(char *how, size_t how_cap, zo_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(how, how_cap, fmt, ap);
  va_end(ap);
  return st;
}

typedef struct probe_args {
  const gpt_config *c;
  int B, recompute, bf16, streamed, threads;
  double cost_rate; /* FLOP/s by the cost model: the probe's own time estimated before it starts */
  zo_dtype work, hand;
} probe_args;

/* zo_speeds_measure_fn: seconds of compute a micro-batch = t(1 layer) + (L - 1) x (t(2 layers) - t(1 layer)). */
static zo_status measure(void *ctx, double *value, char *how, size_t how_cap) {
  const probe_args *a = ctx;
  const gpt_config *c = a->c;
  probe p = {.full = c, .bf16 = a->bf16, .streamed = a->streamed, .work = a->work, .hand = a->hand};
  gpt_param_spec *specs = NULL;
  uint8_t *in = NULL, *tg = NULL;
  zo_status st = ZO_OK;
  /* the tensors of a 1-block cut, one slot per role (gpt_param_specs order: wte, wpe, the block, ln_f) */
  gpt_config one = *c;
  one.n_layer = 1;
  const int np = gpt_num_params(&one);
  if (np != 2 + GPT_PARAMS_PER_LAYER + 2 || !(specs = calloc((size_t)np, sizeof *specs)))
    return fail(how, how_cap, ZO_ERR_OUT_OF_MEMORY, "out of host memory");
  gpt_param_specs(&one, specs);
  for (int i = 0; i < np; i++) {
    p.off[i] = p.n;
    p.len[i] = specs[i].n_elems;
    p.n += (specs[i].n_elems + 31) / 32 * 32;
  }
  const int L = c->n_layer > 1 ? 2 : 1;
  gpt_config two = *c;
  two.n_layer = L;
  const size_t wsz = zo_dtype_size(a->work), hsz = zo_dtype_size(a->hand);
  const double need = (double)p.n * (8 + wsz + hsz) +
                      (double)gpt_streamed_host_bytes(&two, a->B, a->recompute) +
                      (a->bf16 ? (double)gpt_gemm_bf16_bytes(&two, a->B) : 0);
  /* the passes of both cuts (with recompute a forward more in backward), by the cost model */
  const double est = (PROBE_PASSES + 1) * (double)a->B * c->seq_len * (a->recompute ? 4.0 / 3 : 1) *
                     (gpt_flops_per_token(&one, c->seq_len) +
                      (L > 1 ? gpt_flops_per_token(&two, c->seq_len) : 0)) /
                     a->cost_rate;
  if (est > PROBE_BUDGET_S) {
    st = fail(how, how_cap, ZO_ERR_UNSUPPORTED,
              "the probe would take about %.0f s by the cost model (more than "
              "%.0f s)",
              est, PROBE_BUDGET_S);
    goto out;
  }
  char asrc[160];
  const size_t avail = zo_host_memory_available(asrc, sizeof asrc);
  if (avail != SIZE_MAX && need > (double)avail / PROBE_MEM_SHARE) {
    st = fail(how, how_cap, ZO_ERR_OUT_OF_MEMORY,
              "a %d-layer cut needs %.2f GiB, more than 1/%d of the %.2f GiB "
              "available (%s)",
              L, need / 1073741824.0, PROBE_MEM_SHARE, (double)avail / 1073741824.0, asrc);
    goto out;
  }
  const size_t T = (size_t)c->seq_len, tok = (size_t)a->B * T;
  p.w = aligned_alloc(64, p.n * sizeof(float));
  p.g = aligned_alloc(64, p.n * sizeof(float));
  p.src = aligned_alloc(64, p.n * wsz);
  p.ring = aligned_alloc(64, p.n * hsz);
  in = malloc(tok), tg = malloc(tok);
  if (!p.w || !p.g || !p.src || !p.ring || !in || !tg) {
    st = fail(how, how_cap, ZO_ERR_OUT_OF_MEMORY, "out of host memory for %.2f GiB",
              need / 1073741824.0);
    goto out;
  }
  uint64_t x =
      0x9e3779b97f4a7c15ull; /* small weights (|w| < 0.02), LayerNorm scales near 1: finite losses */
  for (size_t i = 0; i < p.n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p.w[i] = ((float)(x >> 40) / 16777216.0f - 0.5f) * 0.04f;
  }
  for (int i = 0; i < np; i++)
    if (specs[i].ndim == 1 && strstr(specs[i].name, "ln") && strstr(specs[i].name, "weight"))
      for (size_t k = 0; k < specs[i].n_elems; k++) p.w[p.off[i] + k] += 1.0f;
  if (cast(p.src, a->work, p.w, ZO_DTYPE_F32, p.n)) {
    st = fail(how, how_cap, ZO_ERR_UNSUPPORTED, "the weights cannot be cast to %s",
              zo_dtype_name(a->work));
    goto out;
  }
  const int V = c->vocab < 256 ? c->vocab : 256;
  for (size_t i = 0; i < tok; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    in[i] = (uint8_t)((x >> 33) % (uint64_t)V);
    tg[i] = (uint8_t)((x >> 45) % (uint64_t)V);
  }
  const double t1 = time_cut(&p, 1, a->B, a->recompute, in, tg);
  const double t2 = t1 >= 0 && L > 1 ? time_cut(&p, 2, a->B, a->recompute, in, tg) : t1;
  if (t1 < 0 || t2 < 0) {
    st = fail(how, how_cap, ZO_ERR_UNSUPPORTED, "a pass of the %d-layer cut failed: %s",
              t1 < 0 ? 1 : 2, p.err);
    goto out;
  }
  /* a layer that measured no time (noise on a tiny model) counts as half the 1-layer cut */
  const double layer = L > 1 && t2 > t1 ? t2 - t1 : t1 / 2;
  *value = t1 + (c->n_layer - 1) * layer;
  snprintf(how, how_cap,
           "forward+backward of 1- and 2-layer cuts at micro-batch %d: %.3g + %d x %.3g ms, %d "
           "thread%s, %s products",
           a->B, t1 * 1e3, c->n_layer - 1, layer * 1e3, a->threads, a->threads == 1 ? "" : "s",
           a->bf16 ? "bf16" : "fp32");
out:
  free(p.w);
  free(p.g);
  free(p.src);
  free(p.ring);
  free(in);
  free(tg);
  free(specs);
  return st;
}

double train_compute_probe(const gpt_config *c, int B, int recompute, int gemm_bf16, int streamed,
                           zo_dtype work, zo_dtype hand, int threads, int fixed_threads,
                           double cost_rate, char *src, size_t cap) {
  /* everything the time depends on besides the host: the model, the batch, the kernels and the threads */
  char key[512];
  snprintf(key, sizeof key,
           "zo-train cpu compute per micro-batch: L=%d C=%d NH=%d T=%d V=%d B=%d recompute=%d "
           "streamed=%d work=%s hand=%s products=%s blas=%s threads=%d%s onednn_isa=%s",
           c->n_layer, c->d_model, c->n_head, c->seq_len, c->vocab, B, recompute, streamed,
           zo_dtype_name(work), zo_dtype_name(hand), gemm_bf16 ? gpt_gemm_bf16_isa() : "fp32",
           gpt_blas_core(), threads, fixed_threads ? " fixed" : "",
           getenv("ONEDNN_MAX_CPU_ISA") ? getenv("ONEDNN_MAX_CPU_ISA") : "auto");
  for (char *s = key; *s; s++)
    if (*s < 0x20 || *s > 0x7e) *s = '?';
  probe_args a = {.c = c,
                  .B = B,
                  .recompute = recompute,
                  .bf16 = gemm_bf16,
                  .streamed = streamed,
                  .threads = threads,
                  .work = work,
                  .hand = hand,
                  .cost_rate = cost_rate > 0 ? cost_rate : 1e9};
  double v = 0;
  if (zo_speeds_figure(key, measure, &a, 0, &v, src, cap) != ZO_OK) return 0;
  return v;
}
