/*
 * test_gpt_streamed.c - zo-train's GPT model in streamed mode
 * (gpt_create_streamed: weights and gradients bound per layer group through
 * the hook) against the resident model: bitwise the same losses, hook order,
 * per-micro-batch gradients, gradients summed over micro-batches and samples,
 * with and without activation checkpointing; unbound tensors fail the pass
 * with a message; the bytes it allocates. Not a speed test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "zo_test.h"

enum { MB = 3 }; /* micro-batches */

/*
 * The caller side of a streamed model, as an engine would be: the fp32
 * weights of every tensor in w[] (standing in for the engine's store), one
 * weight and one gradient scratch for group 0 and one of each for the group
 * in flight, and fp32 accumulators summed at each backward end(g).
 */
typedef struct {
  const gpt_config *c;
  gpt_model *m;
  const gpt_param_spec *specs;
  float **w;      /* [np] the weights */
  float *w0, *g0; /* group 0 scratch, gpt_group_elems(c, 0) floats */
  float *wg, *gg; /* the group in flight, gpt_max_group_elems(c) floats */
  float **acc;    /* [np] sum over micro-batches */
  float **last;   /* [np] the last backward's gradient, as taken at end(g) */
  int bind_grads; /* 0: bind weights only (a wrong hook) */
  int skip_param; /* >= 0: never bind this parameter's weights (a wrong hook) */
  int n, ev[512]; /* calls, as in test_gpt_grad: phase*100000 + group*2 + end */
  int max_live;   /* most groups bound at once besides group 0 */
  int live;
} feeder;

static float *alloc64(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0) abort();
  return p;
}

static void fill_nan(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static int feed_hook(void *user, int phase, int group, int end) {
  feeder *f = user;
  if (f->n < 512) f->ev[f->n] = phase * 100000 + group * 2 + end;
  f->n++;
  int first, count;
  gpt_group_params(f->c, group, &first, &count);
  float *ws = group == 0 ? f->w0 : f->wg, *gs = group == 0 ? f->g0 : f->gg;
  const size_t cap = group == 0 ? gpt_group_elems(f->c, 0) : gpt_max_group_elems(f->c);
  if (!end) {
    if (group != 0 && ++f->live > f->max_live) f->max_live = f->live;
    fill_nan(gs, cap); /* the model must zero what it accumulates into */
    size_t o = 0;
    for (int i = first; i < first + count; i++) {
      const size_t n = f->specs[i].n_elems;
      memcpy(ws + o, f->w[i], n * sizeof(float));
      if (i != f->skip_param && gpt_bind_weight(f->m, i, ws + o) != 0) return -1;
      if (phase == GPT_HOOK_BACKWARD && f->bind_grads && gpt_bind_grad(f->m, i, gs + o) != 0)
        return -1;
      o += (n + 15) / 16 * 16;
    }
    if (o != gpt_group_elems(f->c, group)) return -1;
    return 0;
  }
  if (group != 0) f->live--;
  if (phase == GPT_HOOK_BACKWARD) {
    size_t o = 0;
    for (int i = first; i < first + count; i++) {
      const size_t n = f->specs[i].n_elems;
      for (size_t j = 0; j < n; j++) f->acc[i][j] += gs[o + j];
      memcpy(f->last[i], gs + o, n * sizeof(float));
      o += (n + 15) / 16 * 16;
    }
  }
  /* the model must not touch a group's memory after its end */
  fill_nan(ws, cap);
  fill_nan(gs, cap);
  return 0;
}

/* A hook that records the calls and binds nothing. */
static int idle_hook(void *user, int phase, int group, int end) {
  (void)user, (void)phase, (void)group, (void)end;
  return 0;
}

/* Tensors of @np whose float32 contents differ bitwise between a[i] and b[i]; prints the first. */
static int tensors_differ(const gpt_param_spec *specs, int np, float **a, float *const *b,
                          const char *what) {
  int diff = 0;
  for (int i = 0; i < np; i++)
    if (memcmp(a[i], b[i], specs[i].n_elems * sizeof(float)) != 0) {
      if (diff == 0) {
        size_t j = 0;
        while (j < specs[i].n_elems && memcmp(&a[i][j], &b[i][j], sizeof(float)) == 0) j++;
        fprintf(stderr, "%s:%d: %s: %s[%zu] = %.9g streamed, %.9g resident\n", __FILE__, __LINE__,
                what, specs[i].name, j, a[i][j], b[i][j]);
      }
      diff++;
    }
  return diff;
}

int main(void) {
  char err[256];
  const gpt_config cfg = {.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab = 256};
  const int B = 2, T = 8, N = B * T;
  const int np = gpt_num_params(&cfg);
  gpt_param_spec *specs = calloc((size_t)np, sizeof *specs);
  gpt_param_specs(&cfg, specs);

  /* weights: GPT-2 init plus a perturbation, so that every path matters */
  float **w = calloc((size_t)np, sizeof *w), **acc = calloc((size_t)np, sizeof *acc);
  float **last = calloc((size_t)np, sizeof *last), *mbg[MB][64];
  uint64_t r = 777;
  for (int i = 0; i < np; i++) {
    const size_t n = specs[i].n_elems;
    w[i] = alloc64(n), acc[i] = alloc64(n), last[i] = alloc64(n);
    for (int k = 0; k < MB; k++) mbg[k][i] = alloc64(n);
    gpt_param_init(&cfg, i, 3, w[i]);
    for (size_t j = 0; j < n; j++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      w[i][j] += 0.3f * (float)((double)(r >> 11) / 4503599627370496.0 - 1.0);
    }
  }
  /* three micro-batches, the last one shorter (B 1, T 5) */
  uint8_t inp[MB][16], tgt[MB][16];
  const int mb_b[MB] = {B, B, 1}, mb_t[MB] = {T, T, 5};
  for (int k = 0; k < MB; k++)
    for (int n = 0; n < N; n++) {
      inp[k][n] = (uint8_t)(97 + (n * 7 + 3 * k) % 26);
      tgt[k][n] = (uint8_t)(97 + (n * 7 + 7 + 5 * k) % 26);
    }
  const float loss_mult = 1024.0f / MB; /* loss scale over accumulation steps */

  CHECK(gpt_group_elems(&cfg, 0) == 256 * 16 + 8 * 16);
  CHECK(gpt_max_group_elems(&cfg) == gpt_group_elems(&cfg, 1) && gpt_group_elems(&cfg, 3) == 32);
  CHECK(gpt_group_elems(&cfg, 1) == 6 * 16 + 48 * 16 + 48 + 16 * 16 + 2 * 64 * 16 + 64);

  for (int rc = 0; rc <= 1; rc++) {
    gpt_model *mr = NULL, *ms = NULL;
    CHECK(gpt_create_ex(&cfg, B, rc, &mr, err, sizeof err) == 0);
    if (gpt_create_streamed(&cfg, B, rc, &ms, err, sizeof err) != 0) {
      fprintf(stderr, "gpt_create_streamed: %s\n", err);
      return 1;
    }
    CHECK(gpt_streamed(ms) == 1 && gpt_streamed(mr) == 0 && gpt_recompute(ms) == rc);
    CHECK(gpt_weight(ms, 0) == NULL && gpt_grad(ms, 0) == NULL);

    /* bytes: the arithmetic against the counter in gpt_alloc.c's allocation helpers, which every
     * allocation of create goes through (malloc's own statistics are not portable: the build may link
     * jemalloc, where mallinfo2() reports nothing) */
    const size_t want = gpt_streamed_host_bytes(&cfg, B, rc);
    printf(
        "recompute %d: gpt_streamed_host_bytes %zu, allocated %zu; gpt_host_bytes %zu, allocated %zu\n",
        rc, want, gpt_allocated_bytes(ms), gpt_host_bytes(&cfg, B, rc), gpt_allocated_bytes(mr));
    CHECK_EQ(gpt_allocated_bytes(ms), want);
    CHECK_EQ(gpt_allocated_bytes(mr), gpt_host_bytes(&cfg, B, rc));
    /* the difference is exactly the three parameter layouts less the table's change */
    size_t layout = 0;
    for (int g = 0; g < gpt_num_groups(&cfg); g++) layout += gpt_group_elems(&cfg, g);
    CHECK_EQ(gpt_host_bytes(&cfg, B, rc) - want,
             3 * layout * sizeof(float) - (size_t)np * sizeof(size_t));

    feeder f = {.c = &cfg,
                .m = ms,
                .specs = specs,
                .w = w,
                .acc = acc,
                .last = last,
                .bind_grads = 1,
                .skip_param = -1};
    f.w0 = alloc64(gpt_group_elems(&cfg, 0)), f.g0 = alloc64(gpt_group_elems(&cfg, 0));
    f.wg = alloc64(gpt_max_group_elems(&cfg)), f.gg = alloc64(gpt_max_group_elems(&cfg));
    gpt_set_hook(ms, feed_hook, &f);
    for (int i = 0; i < np; i++) memcpy(gpt_weight(mr, i), w[i], specs[i].n_elems * sizeof(float));

    /* per micro-batch (resident zeroed before each): losses, hook order and gradients bitwise */
    for (int i = 0; i < np; i++) memset(acc[i], 0, specs[i].n_elems * sizeof(float));
    int bad_loss = 0, bad_grad = 0;
    for (int k = 0; k < MB; k++) {
      gpt_zero_grad(mr);
      f.n = 0;
      const float lr = gpt_forward(mr, inp[k], tgt[k], mb_b[k], mb_t[k]);
      const float ls = gpt_forward(ms, inp[k], tgt[k], mb_b[k], mb_t[k]);
      if (isnan(ls)) fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, gpt_last_error(ms));
      CHECK(gpt_backward(mr, loss_mult) == 0);
      CHECK(gpt_backward(ms, loss_mult) == 0);
      bad_loss += memcmp(&lr, &ls, sizeof lr) != 0;
      CHECK(f.n == 4 * (cfg.n_layer + 2));
      /* the order gpt.h documents */
      int want_ev[64], e = 0;
      const int L = cfg.n_layer;
      want_ev[e++] = 0;
      for (int g = 1; g <= L; g++) want_ev[e++] = 2 * g, want_ev[e++] = 2 * g + 1;
      want_ev[e++] = 2 * (L + 1), want_ev[e++] = 2 * (L + 1) + 1, want_ev[e++] = 1;
      want_ev[e++] = 100000, want_ev[e++] = 100000 + 2 * (L + 1),
      want_ev[e++] = 100000 + 2 * (L + 1) + 1;
      for (int g = L; g >= 1; g--) want_ev[e++] = 100000 + 2 * g, want_ev[e++] = 100000 + 2 * g + 1;
      want_ev[e++] = 100001;
      CHECK(e == f.n && memcmp(want_ev, f.ev, (size_t)e * sizeof(int)) == 0);
      float *rg[64];
      for (int i = 0; i < np; i++)
        rg[i] = gpt_grad(mr, i), memcpy(mbg[k][i], last[i], specs[i].n_elems * 4);
      bad_grad += tensors_differ(specs, np, last, rg, "per-micro-batch gradient");
      printf("recompute %d, micro-batch %d (B %d, T %d): loss %.7f resident, %.7f streamed\n", rc,
             k, mb_b[k], mb_t[k], lr, ls);
    }
    CHECK(bad_loss == 0);
    CHECK(bad_grad == 0);
    CHECK(f.max_live == 1);

    /* summed over the micro-batches: resident gpt_grad() accumulates (g += scratch per element, from 0),
     * the caller adds each end(g) buffer into acc from 0: the same additions in the same order, so bitwise */
    gpt_zero_grad(mr);
    for (int k = 0; k < MB; k++) {
      (void)gpt_forward(mr, inp[k], tgt[k], mb_b[k], mb_t[k]);
      CHECK(gpt_backward(mr, loss_mult) == 0);
    }
    float *rg[64];
    for (int i = 0; i < np; i++) rg[i] = gpt_grad(mr, i);
    const int bad_acc = tensors_differ(specs, np, acc, rg, "gradient summed over micro-batches");
    CHECK(bad_acc == 0);
    /* and the sum is a sum of different micro-batches' gradients (the comparison can fail) */
    CHECK(memcmp(mbg[0][4], mbg[1][4], specs[4].n_elems * 4) != 0);
    printf(
        "recompute %d: %d micro-batches: %d losses, %d per-micro-batch tensors, %d summed tensors differ "
        "bitwise (of %d)\n",
        rc, MB, bad_loss, bad_grad, bad_acc, np);

    /* sampling: the streamed model fetches through the hook (forward phase only), same bytes */
    {
      uint8_t s1[10], s2[10];
      f.n = 0;
      CHECK(gpt_sample(mr, (const uint8_t *)"abc", 3, 10, 0.8f, 5, s1) == 0);
      CHECK(gpt_sample(ms, (const uint8_t *)"abc", 3, 10, 0.8f, 5, s2) == 0);
      CHECK(memcmp(s1, s2, sizeof s1) == 0);
      CHECK(f.n == 10 * 2 * (cfg.n_layer + 2));
      int bwd = 0;
      for (int i = 0; i < f.n && i < 512; i++) bwd += f.ev[i] >= 100000;
      CHECK(bwd == 0);
      /* sampling ends the last forward's targets, as resident */
      CHECK(gpt_backward(ms, 1.0f) != 0);
    }

    /* unbound tensors: an error naming the tensor, never a crash */
    {
      gpt_set_hook(ms, NULL, NULL);
      CHECK(isnan(gpt_forward(ms, inp[0], tgt[0], B, T)));
      CHECK(
          strcmp(
              gpt_last_error(ms),
              "gpt_forward: wte (parameter 0) has no weights (gpt_bind_weight) bound at the begin of group 0") ==
          0);
      printf("no hook: %s\n", gpt_last_error(ms));
      /* bindings do not outlive their pass: a hook that binds nothing after a good pass fails too */
      gpt_set_hook(ms, feed_hook, &f);
      CHECK(!isnan(gpt_forward(ms, inp[0], tgt[0], B, T)));
      gpt_set_hook(ms, idle_hook, NULL);
      CHECK(isnan(gpt_forward(ms, inp[0], tgt[0], B, T)));
      CHECK(strstr(gpt_last_error(ms), "gpt_forward: wte (parameter 0) has no weights") != NULL);
      /* one tensor missing in a block group */
      gpt_set_hook(ms, feed_hook, &f);
      f.skip_param = 2 + 12 + 2; /* h.1.attn.c_attn.weight */
      CHECK(isnan(gpt_forward(ms, inp[0], tgt[0], B, T)));
      CHECK(strcmp(gpt_last_error(ms),
                   "gpt_forward: h.1.attn.c_attn.weight (parameter 16) has no weights "
                   "(gpt_bind_weight) bound at the begin of group 2") == 0);
      printf("one tensor unbound: %s\n", gpt_last_error(ms));
      f.skip_param = -1;
      /* weights but no gradient buffers in backward */
      CHECK(!isnan(gpt_forward(ms, inp[0], tgt[0], B, T)));
      f.bind_grads = 0;
      CHECK(gpt_backward(ms, 1.0f) == -1);
      CHECK(strcmp(gpt_last_error(ms),
                   "gpt_backward: wte (parameter 0) has no gradient buffer (gpt_bind_grad) "
                   "bound at the begin of group 0") == 0);
      printf("no gradient buffers: %s\n", gpt_last_error(ms));
      f.bind_grads = 1;
      CHECK(gpt_backward(ms, 1.0f) == 0); /* the forward's targets survive a failed backward */
      /* bind refusals */
      CHECK(gpt_bind_weight(ms, np, w[0]) == -1 &&
            strstr(gpt_last_error(ms), "out of range [0, 27]") != NULL);
      CHECK(gpt_bind_grad(ms, 0, w[0] + 1) == -1 && strstr(gpt_last_error(ms), "wte: ") != NULL &&
            strstr(gpt_last_error(ms), "not 64-byte aligned") != NULL);
      CHECK(gpt_bind_weight(mr, 0, w[0]) == -1 &&
            strstr(gpt_last_error(mr), "not created with gpt_create_streamed()") != NULL);
    }
    free(f.w0), free(f.g0), free(f.wg), free(f.gg);
    gpt_destroy(mr);
    gpt_destroy(ms);
  }

  /* sizes: refused beyond size_t; a 2e9-parameter model, batch 1, recompute on */
  {
    const gpt_config huge = {
        .n_layer = 1024, .n_head = 65536, .d_model = 65536, .seq_len = 65536, .vocab = 256};
    CHECK(gpt_streamed_host_bytes(&huge, 1 << 30, 1) == SIZE_MAX);
    CHECK(gpt_streamed_host_bytes(&cfg, 0, 1) == SIZE_MAX);
    gpt_model *mh = NULL;
    CHECK(gpt_create_streamed(&huge, 1 << 30, 1, &mh, err, sizeof err) != 0 && mh == NULL);
    CHECK(strncmp(err, "gpt_create_streamed: the model's buffers", 40) == 0 &&
          strstr(err, "overflow size_t"));
    const gpt_config big = {
        .n_layer = 26, .n_head = 20, .d_model = 2560, .seq_len = 64, .vocab = 256};
    const size_t rs = gpt_host_bytes(&big, 1, 1), st = gpt_streamed_host_bytes(&big, 1, 1);
    printf(
        "d_model 2560, n_layer 26, n_head 20, seq_len 64, vocab 256, batch 1, recompute on: %zu parameters; "
        "resident %zu bytes, streamed %zu bytes; group 0 %zu floats, largest other group %zu floats\n",
        gpt_total_elems(&big), rs, st, gpt_group_elems(&big, 0), gpt_max_group_elems(&big));
    /* C = 2560 pads nothing: the three layouts are 3 x 4 bytes a parameter, less the offsets table */
    CHECK_EQ(rs - st, 3 * gpt_total_elems(&big) * sizeof(float) -
                          (size_t)gpt_num_params(&big) * sizeof(size_t));
    CHECK(st < (size_t)64 << 20);
  }

  for (int i = 0; i < np; i++) {
    free(w[i]), free(acc[i]), free(last[i]);
    for (int k = 0; k < MB; k++) free(mbg[k][i]);
  }
  free(w), free(acc), free(last), free(specs);
  return zo_test_finish("test_gpt_streamed");
}
