/*
 * test_gpt_grad.c - zo-train's GPT model against an independent, naive
 * double-precision forward written here: loss at init, forward agreement,
 * central-difference gradients of every parameter tensor, determinism,
 * accumulation, activation checkpointing (bitwise equal to keeping every
 * activation, same hook order, the bytes it saves), argument checks. Not a
 * speed test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "zo_test.h"

/* ---------------- naive double reference ---------------- */

typedef struct {
  gpt_config c;
  int np;
  double **p; /* [np] parameter tensors in double */
} ref_model;

static void lin(double *out, const double *in, const double *W, const double *b, int N, int IN,
                int OUT) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OUT; o++) {
      double s = b ? b[o] : 0.0;
      for (int i = 0; i < IN; i++) s += in[(size_t)n * IN + i] * W[(size_t)o * IN + i];
      out[(size_t)n * OUT + o] = s;
    }
}

static void lnorm(double *out, const double *in, const double *w, const double *b, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *x = in + (size_t)n * C;
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += x[c];
    mu /= C;
    for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
    var /= C;
    double rs = 1.0 / sqrt(var + 1e-5);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (x[c] - mu) * rs * w[c] + b[c];
  }
}

/* Mean cross-entropy of the naive model; logits_out (N,V) if not NULL. */
static double ref_forward(const ref_model *r, const uint8_t *inp, const uint8_t *tgt, int B, int T,
                          double *logits_out) {
  const int C = r->c.d_model, NH = r->c.n_head, V = r->c.vocab, hs = C / NH, N = B * T;
  double *x = calloc((size_t)N * C, sizeof(double)), *a = calloc((size_t)N * C, sizeof(double));
  double *qkv = calloc((size_t)N * 3 * C, sizeof(double)),
         *y = calloc((size_t)N * C, sizeof(double));
  double *t1 = calloc((size_t)N * C, sizeof(double)),
         *h = calloc((size_t)N * 4 * C, sizeof(double));
  double *lg = calloc((size_t)N * V, sizeof(double)), *sc = calloc((size_t)T, sizeof(double));
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      x[(size_t)n * C + c] = r->p[0][(size_t)inp[n] * C + c] + r->p[1][(size_t)(n % T) * C + c];
  for (int l = 0; l < r->c.n_layer; l++) {
    double **P = r->p + 2 + 12 * l;
    lnorm(a, x, P[0], P[1], N, C);
    lin(qkv, a, P[2], P[3], N, C, 3 * C);
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < NH; hh++)
        for (int t = 0; t < T; t++) {
          const double *q = qkv + ((size_t)b * T + t) * 3 * C + hh * hs;
          double mx = -1e300, s = 0;
          for (int u = 0; u <= t; u++) {
            const double *k = qkv + ((size_t)b * T + u) * 3 * C + C + hh * hs;
            double d = 0;
            for (int i = 0; i < hs; i++) d += q[i] * k[i];
            sc[u] = d / sqrt((double)hs);
            if (sc[u] > mx) mx = sc[u];
          }
          for (int u = 0; u <= t; u++) s += (sc[u] = exp(sc[u] - mx));
          double *o = y + ((size_t)b * T + t) * C + hh * hs;
          for (int i = 0; i < hs; i++) {
            double acc = 0;
            for (int u = 0; u <= t; u++)
              acc += sc[u] / s * qkv[((size_t)b * T + u) * 3 * C + 2 * C + hh * hs + i];
            o[i] = acc;
          }
        }
    lin(t1, y, P[4], P[5], N, C, C);
    for (size_t i = 0; i < (size_t)N * C; i++) x[i] += t1[i];
    lnorm(a, x, P[6], P[7], N, C);
    lin(h, a, P[8], P[9], N, C, 4 * C);
    for (size_t i = 0; i < (size_t)N * 4 * C; i++) {
      double v = h[i];
      h[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    lin(t1, h, P[10], P[11], N, 4 * C, C);
    for (size_t i = 0; i < (size_t)N * C; i++) x[i] += t1[i];
  }
  lnorm(a, x, r->p[r->np - 2], r->p[r->np - 1], N, C);
  lin(lg, a, r->p[0], NULL, N, C, V);
  double loss = 0;
  for (int n = 0; n < N; n++) {
    const double *z = lg + (size_t)n * V;
    double mx = z[0], s = 0;
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    if (tgt) loss += mx + log(s) - z[tgt[n]];
  }
  if (logits_out) memcpy(logits_out, lg, (size_t)N * V * sizeof(double));
  free(x), free(a), free(qkv), free(y), free(t1), free(h), free(lg), free(sc);
  return loss / N;
}

/* ---------------- helpers ---------------- */

static uint64_t rng_s = 12345;
static double urand(void) { /* uniform [-1, 1) */
  rng_s = rng_s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_s >> 11) / 4503599627370496.0 - 1.0;
}

static void fill_init(gpt_model *m, const gpt_config *c, uint64_t seed) {
  for (int i = 0; i < gpt_num_params(c); i++) gpt_param_init(c, i, seed, gpt_weight(m, i));
}

/*
 * Gradient elements of @m not within atol + rtol*|want| of want = @mult * g1,
 * in float (atol = rtol = 0: equal values only, and an inf never matches).
 * @g1: the gradients of all @np tensors back to back. Prints the first with @what.
 */
static size_t grads_mismatch(gpt_model *m, const gpt_param_spec *specs, int np, const float *g1,
                             float mult, float atol, float rtol, const char *what) {
  size_t bad = 0, o = 0;
  for (int i = 0; i < np; i++) {
    const float *g = gpt_grad(m, i);
    for (size_t j = 0; j < specs[i].n_elems; j++) {
      const float want = mult * g1[o + j];
      if (!(fabsf(g[j] - want) <= atol + rtol * fabsf(want))) {
        if (bad == 0)
          fprintf(stderr, "%s:%d: %s[%zu] = %.9g %s, expected %.9g\n", __FILE__, __LINE__,
                  specs[i].name, j, g[j], what, want);
        bad++;
      }
    }
    o += specs[i].n_elems;
  }
  return bad;
}

/* A hook that records its calls as phase*100000 + group*2 + end. */
typedef struct {
  int n;
  int ev[256];
} hook_log;
static int record_hook(void *user, int phase, int group, int end) {
  hook_log *h = user;
  if (h->n < 256) h->ev[h->n] = phase * 100000 + group * 2 + end;
  h->n++;
  return 0;
}

/* bytes a buffer of n floats takes in gpt_create (rounded up to 64) */
static size_t rb(size_t n) { return (n * 4 + 63) / 64 * 64; }

int main(void) {
  char err[256];
  const gpt_config cfg = {.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab = 256};
  const int B = 2, T = 8, N = B * T;
  gpt_model *m = NULL;
  if (gpt_create(&cfg, B, &m, err, sizeof err) != 0) {
    fprintf(stderr, "gpt_create: %s\n", err);
    return 1;
  }
  const int np = gpt_num_params(&cfg);
  gpt_param_spec *specs = calloc((size_t)np, sizeof *specs);
  gpt_param_specs(&cfg, specs);

  /* registry */
  CHECK(np == 28);
  CHECK(strcmp(specs[0].name, "wte") == 0 && specs[0].shape[0] == 256 && specs[0].shape[1] == 16);
  CHECK(strcmp(specs[1].name, "wpe") == 0 && specs[1].shape[0] == 8);
  CHECK(strcmp(specs[4].name, "h.0.attn.c_attn.weight") == 0 && specs[4].shape[0] == 48 &&
        specs[4].shape[1] == 16);
  CHECK(strcmp(specs[12].name, "h.0.mlp.c_proj.weight") == 0 && specs[12].shape[0] == 16 &&
        specs[12].shape[1] == 64);
  CHECK(strcmp(specs[14].name, "h.1.ln_1.weight") == 0 && specs[14].ndim == 1);
  CHECK(strcmp(specs[27].name, "ln_f.bias") == 0);
  size_t tot = 0;
  for (int i = 0; i < np; i++) tot += specs[i].n_elems;
  CHECK(tot == gpt_total_elems(&cfg));

  /* config errors */
  gpt_config bad = {.n_layer = 2, .n_head = 5, .d_model = 128, .seq_len = 8, .vocab = 256};
  CHECK(gpt_config_check(&bad, err, sizeof err) != 0);
  CHECK(strcmp(err, "model.n_head: 5 does not divide model.d_model 128") == 0);
  bad = cfg;
  bad.vocab = 70000;
  CHECK(gpt_config_check(&bad, err, sizeof err) != 0 && strstr(err, "model.vocab") != NULL);
  gpt_model *m2 = NULL;
  CHECK(gpt_create(&cfg, 0, &m2, err, sizeof err) != 0 && m2 == NULL);

  /* init: order independence and statistics */
  {
    size_t n = specs[4].n_elems;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    gpt_param_init(&cfg, 4, 7, a);
    gpt_param_init(&cfg, 6, 7, b); /* another (smaller) tensor in between */
    gpt_param_init(&cfg, 4, 7, b);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0);
    double s = 0, s2 = 0;
    for (size_t j = 0; j < n; j++) s += a[j], s2 += (double)a[j] * a[j];
    CHECK_CLOSE(sqrt(s2 / n), 0.02, 0.002, 0.0);
    gpt_param_init(&cfg, 4, 8, b);
    CHECK(memcmp(a, b, n * sizeof(float)) != 0);
    free(a), free(b);
  }

  uint8_t inp[16], tgt[16];
  for (int n = 0; n < N; n++) {
    inp[n] = (uint8_t)(97 + (n * 7) % 26);
    tgt[n] = (uint8_t)(97 + (n * 7 + 7) % 26);
  }

  /* loss at init ~ ln(V) */
  fill_init(m, &cfg, 1);
  float l0 = gpt_forward(m, inp, tgt, B, T);
  CHECK_CLOSE(l0, log(256.0), 0.1, 0.0);

  /* perturb so that every path matters (non-uniform attention, LN gains != 1, biases != 0) */
  for (int i = 0; i < np; i++) {
    float *w = gpt_weight(m, i);
    for (size_t j = 0; j < specs[i].n_elems; j++) w[j] += (float)(0.3 * urand());
  }
  ref_model r = {.c = cfg, .np = np};
  r.p = calloc((size_t)np, sizeof(double *));
  for (int i = 0; i < np; i++) {
    r.p[i] = malloc(specs[i].n_elems * sizeof(double));
    for (size_t j = 0; j < specs[i].n_elems; j++) r.p[i][j] = gpt_weight(m, i)[j];
  }

  /* forward agrees with the double reference, for full and short T */
  const float lf = gpt_forward(m, inp, tgt, B, T);
  const double ld = ref_forward(&r, inp, tgt, B, T, NULL);
  printf("loss: float %.7f, double reference %.7f\n", lf, ld);
  CHECK_CLOSE(lf, ld, 1e-5, 1e-5);
  {
    double *lgd = malloc((size_t)3 * 5 * 256 * sizeof(double));
    uint8_t inp5[10];
    for (int b = 0; b < 2; b++) memcpy(inp5 + b * 5, inp + b * T, 5);
    CHECK(gpt_forward(m, inp5, NULL, 2, 5) == 0.0f);
    const float *lg = gpt_logits(m);
    ref_forward(&r, inp5, NULL, 2, 5, lgd);
    int bad_n = 0;
    for (int i = 0; i < 10 * 256 && bad_n < 10; i++) {
      if (!(fabs(lg[i] - lgd[i]) <= 1e-5 + 1e-5 * fabs(lgd[i]))) {
        if (bad_n == 0)
          fprintf(stderr, "%s:%d: logits[%d] = %.9g, reference %.9g\n", __FILE__, __LINE__, i,
                  lg[i], lgd[i]);
        bad_n++;
      }
    }
    CHECK(bad_n == 0);
    free(lgd);
  }

  /* forward determinism (bitwise) */
  {
    float a = gpt_forward(m, inp, tgt, B, T);
    float *lg1 = malloc((size_t)N * 256 * sizeof(float));
    memcpy(lg1, gpt_logits(m), (size_t)N * 256 * sizeof(float));
    float b = gpt_forward(m, inp, tgt, B, T);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    CHECK(memcmp(lg1, gpt_logits(m), (size_t)N * 256 * sizeof(float)) == 0);
    free(lg1);
  }

  /* gradients vs central differences of the double reference.
   * Tolerance: |g - fd| <= atol + rtol*|fd| with atol = 1e-5 * max|fd| over the
   * tensor's samples (at least 1e-8) and rtol = 1e-4. h = 1e-4 in double. */
  gpt_zero_grad(m);
  (void)gpt_forward(m, inp, tgt, B, T);
  CHECK(gpt_backward(m, 1.0f) == 0);
  const int K = 8;
  int mismatches = 0;
  double worst = 0;
  for (int i = 0; i < np; i++) {
    size_t n = specs[i].n_elems;
    size_t idx[8];
    double fd[8];
    double mx = 0;
    for (int s = 0; s < K; s++) {
      idx[s] = s == 0 ? 0 : s == 1 ? n - 1 : (size_t)((urand() + 1.0) * 0.5 * n) % n;
      if (i == 0 && s >= 2)
        idx[s] = (size_t)inp[s] * 16 + (size_t)s % 16; /* rows that are also inputs */
      double *w = &r.p[i][idx[s]], keep = *w, h = 1e-4;
      *w = keep + h;
      double lp = ref_forward(&r, inp, tgt, B, T, NULL);
      *w = keep - h;
      double lm = ref_forward(&r, inp, tgt, B, T, NULL);
      *w = keep;
      fd[s] = (lp - lm) / (2 * h);
      if (fabs(fd[s]) > mx) mx = fabs(fd[s]);
    }
    double atol = 1e-5 * mx > 1e-8 ? 1e-5 * mx : 1e-8, rtol = 1e-4;
    const float *g = gpt_grad(m, i);
    for (int s = 0; s < K; s++) {
      double e = fabs(g[idx[s]] - fd[s]);
      double rel = e / (atol + rtol * fabs(fd[s]));
      if (rel > worst) worst = rel;
      if (!(e <= atol + rtol * fabs(fd[s]))) {
        if (mismatches < 10)
          fprintf(stderr,
                  "%s:%d: grad %s[%zu] = %.9g, finite difference %.9g (atol %.3g, rtol %.3g)\n",
                  __FILE__, __LINE__, specs[i].name, idx[s], g[idx[s]], fd[s], atol, rtol);
        mismatches++;
      }
    }
    if (mismatches >= 10) break;
  }
  printf("gradient check: %d tensors x %d elements, %d mismatches, worst error/tolerance %.3f\n",
         np, K, mismatches, worst);
  CHECK(mismatches == 0);

  /* backward twice accumulates exactly 2x; loss_mult scales */
  {
    size_t tot_n = 0;
    for (int i = 0; i < np; i++) tot_n += specs[i].n_elems;
    float *g1 = malloc(tot_n * sizeof(float));
    gpt_zero_grad(m);
    (void)gpt_forward(m, inp, tgt, B, T);
    CHECK(gpt_backward(m, 1.0f) == 0);
    size_t o = 0;
    for (int i = 0; i < np; i++) {
      memcpy(g1 + o, gpt_grad(m, i), specs[i].n_elems * sizeof(float));
      o += specs[i].n_elems;
    }
    CHECK(gpt_backward(m, 1.0f) == 0);
    size_t bad2 = grads_mismatch(m, specs, np, g1, 2.0f, 0.0f, 0.0f, "after two backwards");
    CHECK(bad2 == 0);
    gpt_zero_grad(m);
    CHECK(gpt_backward(m, 0.25f) == 0);
    size_t badh = grads_mismatch(m, specs, np, g1, 0.25f, 1e-9f, 1e-5f, "with loss_mult 0.25");
    CHECK(badh == 0);
    free(g1);
  }

  /* activation checkpointing: same loss and gradients bit for bit, same
   * hook order, on a full and a shorter (B,T), and the bytes it saves */
  {
    gpt_model *mr = NULL;
    CHECK(gpt_create_ex(&cfg, B, 1, &mr, err, sizeof err) == 0);
    CHECK(gpt_recompute(mr) == 1 && gpt_recompute(m) == 0);
    for (int i = 0; i < np; i++)
      memcpy(gpt_weight(mr, i), gpt_weight(m, i), specs[i].n_elems * sizeof(float));
    const int shapes[2][2] = {{B, T}, {1, 5}};
    for (int k = 0; k < 2; k++) {
      const int b = shapes[k][0], t = shapes[k][1];
      hook_log h0 = {0}, h1 = {0};
      gpt_set_hook(m, record_hook, &h0);
      gpt_set_hook(mr, record_hook, &h1);
      gpt_zero_grad(m);
      gpt_zero_grad(mr);
      const float a = gpt_forward(m, inp, tgt, b, t), c = gpt_forward(mr, inp, tgt, b, t);
      CHECK(memcmp(&a, &c, sizeof a) == 0);
      CHECK(gpt_backward(m, 3.0f) == 0 && gpt_backward(mr, 3.0f) == 0);
      size_t diff = 0;
      for (int i = 0; i < np; i++)
        if (memcmp(gpt_grad(m, i), gpt_grad(mr, i), specs[i].n_elems * sizeof(float)) != 0) {
          if (diff == 0)
            fprintf(stderr, "%s:%d: gradient of %s differs with recompute (B %d, T %d)\n", __FILE__,
                    __LINE__, specs[i].name, b, t);
          diff++;
        }
      CHECK(diff == 0);
      CHECK(h0.n == h1.n && h0.n == 2 * (2 * (cfg.n_layer + 2)));
      CHECK(memcmp(h0.ev, h1.ev, (size_t)h0.n * sizeof(int)) == 0);
      printf(
          "recompute (B %d, T %d): loss %.7f both ways, %zu of %d gradients differ, %d hook calls each\n",
          b, t, c, diff, np, h1.n);
    }
    gpt_set_hook(m, NULL, NULL);
    /* what it saves: L-1 blocks of ln1, atty, residual2, ln2 (N x C), qkv (3NC),
     * fch, fch_gelu (4NC each), four LayerNorm statistics (N) and att (B NH T T) */
    const size_t Nn = (size_t)B * cfg.seq_len, NC = Nn * cfg.d_model;
    const size_t TT = (size_t)B * cfg.n_head * cfg.seq_len * cfg.seq_len, L = (size_t)cfg.n_layer;
    size_t saved = 0;
    const size_t per_block[] = {NC, NC, NC, NC, 3 * NC, 4 * NC, 4 * NC, Nn, Nn, Nn, Nn, TT};
    for (size_t k = 0; k < sizeof per_block / sizeof per_block[0]; k++)
      saved += rb(L * per_block[k]) - rb(per_block[k]);
    const size_t full = gpt_host_bytes(&cfg, B, 0), ckpt = gpt_host_bytes(&cfg, B, 1);
    printf("gpt_host_bytes: %zu without, %zu with activation checkpointing (saves %zu)\n", full,
           ckpt, full - ckpt);
    CHECK(full - ckpt == saved && saved == 16640);
    /* a lower bound from the buffers alone: 3 parameter layouts and the activations */
    CHECK(full > 3 * gpt_total_elems(&cfg) * sizeof(float) + L * 15 * NC * sizeof(float));
    gpt_destroy(mr);
    /* sizes beyond size_t are refused before anything is allocated */
    const gpt_config huge = {
        .n_layer = 1024, .n_head = 65536, .d_model = 65536, .seq_len = 65536, .vocab = 256};
    CHECK(gpt_host_bytes(&huge, 1 << 30, 1) == SIZE_MAX);
    gpt_model *mh = NULL;
    CHECK(gpt_create_ex(&huge, 1 << 30, 1, &mh, err, sizeof err) != 0 && mh == NULL);
    CHECK(strstr(err, "overflow size_t") != NULL);
    CHECK(gpt_host_bytes(&cfg, 0, 0) == SIZE_MAX);
  }

  /* bad arguments: no crash, NaN / -1 */
  CHECK(isnan(gpt_forward(m, inp, tgt, B + 1, T)));
  CHECK(strstr(gpt_last_error(m), "bad arguments") != NULL);
  CHECK(isnan(gpt_forward(m, inp, tgt, B, T + 1)));
  CHECK(gpt_weight(m, np) == NULL && gpt_grad(m, -1) == NULL);

  /* sampling refused before anything ran (sample.h GEN_ERR_SETUP): the message names the call and the last
   * forward's targets stay; n_new 0 runs no forward but still ends them */
  CHECK(!isnan(gpt_forward(m, inp, tgt, B, T)));
  CHECK(gpt_sample(m, NULL, 0, 4, 0.0f, 1, NULL) == -1);
  CHECK(strstr(gpt_last_error(m), "gpt_sample: bad arguments (prompt_len 0, n_new 4)") != NULL);
  CHECK(gpt_sample(m, (const uint8_t *)"abc", -1, 4, 0.0f, 1, NULL) == -1);
  CHECK(gpt_backward(m, 1.0f) == 0);
  CHECK(!isnan(gpt_forward(m, inp, tgt, B, T)));
  CHECK(gpt_sample(m, (const uint8_t *)"abc", 3, 0, 0.0f, 1, NULL) == 0);
  CHECK(gpt_backward(m, 1.0f) != 0);

  /* sampling: deterministic per seed; backward refused afterwards */
  {
    uint8_t s1[12], s2[12];
    CHECK(gpt_sample(m, (const uint8_t *)"abc", 3, 12, 1.0f, 99, s1) == 0);
    CHECK(gpt_sample(m, (const uint8_t *)"abc", 3, 12, 1.0f, 99, s2) == 0);
    CHECK(memcmp(s1, s2, 12) == 0);
    CHECK(gpt_sample(m, NULL, 0, 12, 0.0f, 1, s1) == 0);
    CHECK(gpt_backward(m, 1.0f) != 0);
  }

  for (int i = 0; i < np; i++) free(r.p[i]);
  free(r.p);
  free(specs);
  gpt_destroy(m);
  gpt_destroy(NULL);
  return zo_test_finish("test_gpt_grad");
}
