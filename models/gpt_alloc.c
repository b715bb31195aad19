/*
 * gpt_alloc.c - zo-train's GPT model (models/, zo_gpt): parameter registry
 * (names, shapes, layer groups), buffer layout, host bytes, create/destroy, and
 * the streamed mode's weight and gradient bindings. Not the passes (gpt.c) and
 * no math.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gemm_bf16.h"
#include "gpt_internal.h"
#include "seterr.h"

/* ------------------------------------------------------------------ */
/* configuration and parameters */

/* 1, and "model.<name>: <v> is out of range [lo, hi]" in @err, when @v is outside [lo, hi]; else 0. */
static int out_of_range(char *err, size_t errlen, const char *name, int v, int lo, int hi) {
  if (v >= lo && v <= hi) return 0;
  seterr(err, errlen, "model.%s: %d is out of range [%d, %d]", name, v, lo, hi);
  return 1;
}

int gpt_config_check(const gpt_config *c, char *err, size_t errlen) {
  if (!c) {
    seterr(err, errlen, "model: no configuration");
    return -1;
  }
  if (out_of_range(err, errlen, "n_layer", c->n_layer, 1, 1024) ||
      out_of_range(err, errlen, "d_model", c->d_model, 1, 65536))
    return -1;
  if (c->n_head < 1) {
    seterr(err, errlen, "model.n_head: %d must be >= 1", c->n_head);
    return -1;
  }
  if (c->d_model % c->n_head != 0) {
    seterr(err, errlen, "model.n_head: %d does not divide model.d_model %d", c->n_head, c->d_model);
    return -1;
  }
  if (out_of_range(err, errlen, "seq_len", c->seq_len, 1, 65536) ||
      out_of_range(err, errlen, "vocab", c->vocab, 2, 65536))
    return -1;
  return 0;
}

int gpt_num_params(const gpt_config *c) { return 4 + GPT_PARAMS_PER_LAYER * c->n_layer; }

static void spec_set(gpt_param_spec *s, const char *name, int rows, int cols, int ndim) {
  snprintf(s->name, sizeof s->name, "%s", name);
  s->ndim = ndim;
  s->shape[0] = rows;
  s->shape[1] = ndim == 2 ? cols : 1;
  s->n_elems = (size_t)rows * (size_t)s->shape[1];
}

void gpt_param_specs(const gpt_config *c, gpt_param_spec *out) {
  const int C = c->d_model;
  char nm[64];
  spec_set(&out[0], "wte", c->vocab, C, 2);
  spec_set(&out[1], "wpe", c->seq_len, C, 2);
  static const char *suffix[GPT_PARAMS_PER_LAYER] = {"ln_1.weight",        "ln_1.bias",
                                                     "attn.c_attn.weight", "attn.c_attn.bias",
                                                     "attn.c_proj.weight", "attn.c_proj.bias",
                                                     "ln_2.weight",        "ln_2.bias",
                                                     "mlp.c_fc.weight",    "mlp.c_fc.bias",
                                                     "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  static const int rows_x[GPT_PARAMS_PER_LAYER] = {1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1};
  static const int cols_x[GPT_PARAMS_PER_LAYER] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0};
  for (int l = 0; l < c->n_layer; l++) {
    for (int k = 0; k < GPT_PARAMS_PER_LAYER; k++) {
      snprintf(nm, sizeof nm, "h.%d.%s", l, suffix[k]);
      gpt_param_spec *s = &out[2 + GPT_PARAMS_PER_LAYER * l + k];
      if (cols_x[k])
        spec_set(s, nm, rows_x[k] * C, cols_x[k] * C, 2);
      else
        spec_set(s, nm, rows_x[k] * C, 1, 1);
    }
  }
  int f = 2 + GPT_PARAMS_PER_LAYER * c->n_layer;
  spec_set(&out[f], "ln_f.weight", C, 1, 1);
  spec_set(&out[f + 1], "ln_f.bias", C, 1, 1);
}

size_t gpt_total_elems(const gpt_config *c) {
  size_t C = (size_t)c->d_model;
  size_t per_layer =
      2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
  return (size_t)c->vocab * C + (size_t)c->seq_len * C + (size_t)c->n_layer * per_layer + 2 * C;
}

/* ------------------------------------------------------------------ */
/* create / destroy */

/* The float buffers of a model, in allocation order. */
enum {
  BUF_PARAMS,
  BUF_GRADS,
  BUF_GSCRATCH,
  BUF_ENCODED,
  BUF_LN1,
  BUF_LN1_MEAN,
  BUF_LN1_RSTD,
  BUF_QKV,
  BUF_ATT,
  BUF_ATTY,
  BUF_RESIDUAL2,
  BUF_LN2,
  BUF_LN2_MEAN,
  BUF_LN2_RSTD,
  BUF_FCH,
  BUF_FCH_GELU,
  BUF_RESIDUAL3,
  BUF_LNF,
  BUF_LNF_MEAN,
  BUF_LNF_RSTD,
  BUF_LOGITS,
  BUF_PROBS,
  BUF_LOSSES,
  BUF_DRES,
  BUF_DBUF_C,
  BUF_DBUF_3C,
  BUF_DBUF_4C,
  BUF_DLOGITS,
  BUF_DATT,
  BUF_COUNT
};

/* a * b, or SIZE_MAX when it does not fit size_t (SIZE_MAX then poisons every later product and sum). */
static size_t mulz(size_t a, size_t b) {
  size_t r;
  return (a == SIZE_MAX || b == SIZE_MAX || __builtin_mul_overflow(a, b, &r)) ? SIZE_MAX : r;
}
static size_t addz(size_t a, size_t b) {
  size_t r;
  return (a == SIZE_MAX || b == SIZE_MAX || __builtin_add_overflow(a, b, &r)) ? SIZE_MAX : r;
}
/* bytes model_alloc() takes for n floats: rounded up to 64, at least 64 */
static size_t alloc_bytes(size_t n_floats) {
  size_t nb = mulz(n_floats, sizeof(float));
  if (nb == 0) nb = 64;
  return nb > SIZE_MAX - 63 ? SIZE_MAX : (nb + 63) & ~(size_t)63;
}

/* Floats of the parameter layout: each tensor padded to GPT_ALIGN_FLOATS
 * (the same sum gpt_create() forms from the offsets). */
static size_t param_layout_floats(const gpt_config *c) {
  const size_t C = (size_t)c->d_model, A = GPT_ALIGN_FLOATS;
#define PAD(n) (((n) + A - 1) / A * A)
  /* ln_1 w,b; attn.c_proj.bias; ln_2 w,b; mlp.c_proj.bias: C each */
  const size_t per_layer =
      6 * PAD(C) + PAD(3 * C * C) + PAD(3 * C) + PAD(C * C) + 2 * PAD(4 * C * C) + PAD(4 * C);
  return PAD((size_t)c->vocab * C) + PAD((size_t)c->seq_len * C) + (size_t)c->n_layer * per_layer +
         2 * PAD(C);
#undef PAD
}

/* Element counts of every float buffer for (c, max_batch, recompute); with
 * SIZE_MAX entries when a count does not fit size_t. */
static void buffer_floats(const gpt_config *c, int max_batch, int recompute, size_t n[BUF_COUNT]) {
  const size_t L = (size_t)c->n_layer, C = (size_t)c->d_model, V = (size_t)c->vocab;
  const size_t NH = (size_t)c->n_head, Tm = (size_t)c->seq_len;
  const size_t Lb = recompute ? 1 : L; /* blocks whose activations are kept */
  const size_t N = mulz((size_t)max_batch, Tm), NC = mulz(N, C);
  const size_t TT = mulz(mulz(mulz((size_t)max_batch, NH), Tm), Tm);
  const size_t P = param_layout_floats(c);
  n[BUF_PARAMS] = n[BUF_GRADS] = n[BUF_GSCRATCH] = P;
  n[BUF_ENCODED] = NC;
  n[BUF_LN1] = n[BUF_ATTY] = n[BUF_RESIDUAL2] = n[BUF_LN2] = mulz(Lb, NC);
  n[BUF_LN1_MEAN] = n[BUF_LN1_RSTD] = n[BUF_LN2_MEAN] = n[BUF_LN2_RSTD] = mulz(Lb, N);
  n[BUF_QKV] = mulz(mulz(Lb, NC), 3);
  n[BUF_ATT] = mulz(Lb, TT);
  n[BUF_FCH] = n[BUF_FCH_GELU] = mulz(mulz(Lb, NC), 4);
  n[BUF_RESIDUAL3] = mulz(L, NC); /* block outputs = next block's inputs: always kept */
  n[BUF_LNF] = NC;
  n[BUF_LNF_MEAN] = n[BUF_LNF_RSTD] = n[BUF_LOSSES] = N;
  n[BUF_LOGITS] = n[BUF_PROBS] = n[BUF_DLOGITS] = mulz(N, V);
  n[BUF_DRES] = n[BUF_DBUF_C] = NC;
  n[BUF_DBUF_3C] = mulz(NC, 3);
  n[BUF_DBUF_4C] = mulz(NC, 4);
  n[BUF_DATT] = TT;
}

/* 1 for the buffers a streamed model does not have: the three parameter layouts. */
static int resident_only(int k) { return k == BUF_PARAMS || k == BUF_GRADS || k == BUF_GSCRATCH; }

/* gpt_host_bytes() / gpt_streamed_host_bytes(): the bytes create allocates, in its order. */
static size_t host_bytes(const gpt_config *c, int max_batch, int recompute, int streamed) {
  if (!c || max_batch < 1 || gpt_config_check(c, NULL, 0) != 0) return SIZE_MAX;
  size_t n[BUF_COUNT], total = sizeof(gpt_model);
  buffer_floats(c, max_batch, recompute, n);
  for (int k = 0; k < BUF_COUNT; k++)
    if (!(streamed && resident_only(k))) total = addz(total, alloc_bytes(n[k]));
  const size_t N = mulz((size_t)max_batch, (size_t)c->seq_len);
  total = addz(total, mulz(N, 2)); /* inputs, targets */
  /* specs, and the offsets (resident) or the weight and gradient bindings (streamed) */
  const size_t per_param =
      sizeof(gpt_param_spec) + (streamed ? 2 * sizeof(void *) : sizeof(size_t));
  total = addz(total, mulz((size_t)gpt_num_params(c), per_param));
  return total;
}

size_t gpt_host_bytes(const gpt_config *c, int max_batch, int recompute) {
  return host_bytes(c, max_batch, recompute, 0);
}

size_t gpt_streamed_host_bytes(const gpt_config *c, int max_batch, int recompute) {
  return host_bytes(c, max_batch, recompute, 1);
}

int gpt_recompute(const gpt_model *m) { return m ? m->recompute : 0; }
int gpt_streamed(const gpt_model *m) { return m ? m->streamed : 0; }

/* The allocations of create, each counted into m->allocated (gpt_allocated_bytes()). */
static void *m_calloc(gpt_model *m, size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p) m->allocated += n * size; /* n * size fits: calloc checks it */
  return p;
}
static void *m_malloc(gpt_model *m, size_t nb) {
  void *p = malloc(nb);
  if (p) m->allocated += nb;
  return p;
}
static void *m_memalign64(gpt_model *m, size_t nb) {
  void *p = NULL;
  if (posix_memalign(&p, 64, nb) != 0) return NULL;
  m->allocated += nb;
  return p;
}

static int create(const gpt_config *c, int max_batch, int recompute, int streamed, gpt_model **out,
                  char *err, size_t errlen);

int gpt_create(const gpt_config *c, int max_batch, gpt_model **out, char *err, size_t errlen) {
  return gpt_create_ex(c, max_batch, 0, out, err, errlen);
}

int gpt_create_ex(const gpt_config *c, int max_batch, int recompute, gpt_model **out, char *err,
                  size_t errlen) {
  return create(c, max_batch, recompute, 0, out, err, errlen);
}

int gpt_create_streamed(const gpt_config *c, int max_batch, int recompute, gpt_model **out,
                        char *err, size_t errlen) {
  return create(c, max_batch, recompute, 1, out, err, errlen);
}

static int create(const gpt_config *c, int max_batch, int recompute, int streamed, gpt_model **out,
                  char *err, size_t errlen) {
  const char *fn = streamed ? "gpt_create_streamed" : "gpt_create";
  if (!out) {
    seterr(err, errlen, "%s: out is NULL", fn);
    return -1;
  }
  *out = NULL;
  if (gpt_config_check(c, err, errlen) != 0) return -1;
  if (max_batch < 1) {
    seterr(err, errlen, "%s: max_batch %d must be >= 1", fn, max_batch);
    return -1;
  }
  const size_t want = host_bytes(c, max_batch, recompute, streamed);
  if (want == SIZE_MAX) {
    seterr(err, errlen,
           "%s: the model's buffers (%d layers, d_model %d, %d heads, batch %d x %d, vocab %d) "
           "overflow size_t",
           fn, c->n_layer, c->d_model, c->n_head, max_batch, c->seq_len, c->vocab);
    return -1;
  }
  gpt_model *m = calloc(1, sizeof *m);
  if (!m) {
    seterr(err, errlen, "%s: out of memory (%zu bytes)", fn, sizeof *m);
    return -1;
  }
  m->allocated = sizeof *m;
  m->cfg = *c;
  m->max_batch = max_batch;
  m->recompute = recompute ? 1 : 0;
  m->streamed = streamed;
  m->n_params = gpt_num_params(c);
  m->specs = m_calloc(m, (size_t)m->n_params, sizeof *m->specs);
  if (streamed)
    m->bind = m_calloc(m, 2 * (size_t)m->n_params, sizeof *m->bind);
  else
    m->offsets = m_calloc(m, (size_t)m->n_params, sizeof *m->offsets);
  if (!m->specs || (streamed ? !m->bind : !m->offsets)) {
    gpt_destroy(m);
    seterr(err, errlen, "%s: out of memory (parameter table)", fn);
    return -1;
  }
  gpt_param_specs(c, m->specs);
  size_t off = 0;
  for (int i = 0; !streamed && i < m->n_params; i++) {
    m->offsets[i] = off;
    off += (m->specs[i].n_elems + GPT_ALIGN_FLOATS - 1) / GPT_ALIGN_FLOATS * GPT_ALIGN_FLOATS;
  }
  m->n_floats = off; /* 0 when streamed */

  size_t n[BUF_COUNT];
  buffer_floats(c, max_batch, m->recompute, n);
  float **slot[BUF_COUNT] = {
      [BUF_PARAMS] = &m->params_mem,
      [BUF_GRADS] = &m->grads_mem,
      [BUF_GSCRATCH] = &m->gscratch,
      [BUF_ENCODED] = &m->encoded,
      [BUF_LN1] = &m->ln1,
      [BUF_LN1_MEAN] = &m->ln1_mean,
      [BUF_LN1_RSTD] = &m->ln1_rstd,
      [BUF_QKV] = &m->qkv,
      [BUF_ATT] = &m->att,
      [BUF_ATTY] = &m->atty,
      [BUF_RESIDUAL2] = &m->residual2,
      [BUF_LN2] = &m->ln2,
      [BUF_LN2_MEAN] = &m->ln2_mean,
      [BUF_LN2_RSTD] = &m->ln2_rstd,
      [BUF_FCH] = &m->fch,
      [BUF_FCH_GELU] = &m->fch_gelu,
      [BUF_RESIDUAL3] = &m->residual3,
      [BUF_LNF] = &m->lnf,
      [BUF_LNF_MEAN] = &m->lnf_mean,
      [BUF_LNF_RSTD] = &m->lnf_rstd,
      [BUF_LOGITS] = &m->logits,
      [BUF_PROBS] = &m->probs,
      [BUF_LOSSES] = &m->losses,
      [BUF_DRES] = &m->dres,
      [BUF_DBUF_C] = &m->dbuf_c,
      [BUF_DBUF_3C] = &m->dbuf_3c,
      [BUF_DBUF_4C] = &m->dbuf_4c,
      [BUF_DLOGITS] = &m->dlogits,
      [BUF_DATT] = &m->datt,
  };
  int ok =
      streamed || m->n_floats == n[BUF_PARAMS]; /* param_layout_floats() agrees with the offsets */
  for (int k = 0; ok && k < BUF_COUNT; k++) {
    if (streamed && resident_only(k)) continue; /* the caller binds weights and gradients */
    void *p = NULL;
    if (m->n_allocs >= (int)(sizeof m->allocs / sizeof m->allocs[0]) ||
        !(p = m_memalign64(m, alloc_bytes(n[k])))) {
      ok = 0;
      break;
    }
    m->allocs[m->n_allocs++] = p;
    *slot[k] = p;
  }
  const size_t N = (size_t)max_batch * (size_t)c->seq_len;
  m->inputs = ok ? m_malloc(m, N) : NULL;
  m->targets = ok ? m_malloc(m, N) : NULL;
  if (!ok || !m->inputs || !m->targets) {
    const size_t total = m->allocated;
    gpt_destroy(m);
    seterr(
        err, errlen,
        "%s: out of memory after %zu of %zu bytes (model %d layers, d_model %d, batch %d x %d%s)",
        fn, total, want, c->n_layer, c->d_model, max_batch, c->seq_len,
        recompute ? ", activation checkpointing" : "");
    return -1;
  }
  if (!streamed) {
    memset(m->params_mem, 0, m->n_floats * sizeof(float));
    memset(m->grads_mem, 0, m->n_floats * sizeof(float));
  }
  *out = m;
  return 0;
}

void gpt_destroy(gpt_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_allocs; i++) free(m->allocs[i]);
  free(m->act16);
  free(m->dout16);
  free(m->specs);
  free(m->offsets);
  free(m->bind);
  free(m->inputs);
  free(m->targets);
  free(m);
}

const gpt_config *gpt_get_config(const gpt_model *m) { return m ? &m->cfg : NULL; }

float *gpt_weight(gpt_model *m, int i) {
  if (!m || m->streamed || i < 0 || i >= m->n_params) return NULL;
  return m->params_mem + m->offsets[i];
}

float *gpt_grad(gpt_model *m, int i) {
  if (!m || m->streamed || i < 0 || i >= m->n_params) return NULL;
  return m->grads_mem + m->offsets[i];
}

void gpt_zero_grad(gpt_model *m) {
  if (m && !m->streamed) memset(m->grads_mem, 0, m->n_floats * sizeof(float));
}

size_t gpt_allocated_bytes(const gpt_model *m) { return m ? m->allocated : 0; }

/* gpt_bind_weight() / gpt_bind_grad(): slot @k of the binding table (0 weights, 1 gradients). */
static int bind(gpt_model *m, int i, int k, void *p, const char *fn) {
  if (!m) return -1;
  if (!m->streamed) {
    seterr(m->err, sizeof m->err, "%s: the model was not created with gpt_create_streamed()", fn);
    return -1;
  }
  if (i < 0 || i >= m->n_params) {
    seterr(m->err, sizeof m->err, "%s: parameter %d is out of range [0, %d]", fn, i,
           m->n_params - 1);
    return -1;
  }
  if ((uintptr_t)p % 64 != 0) {
    seterr(m->err, sizeof m->err, "%s: %s: %p is not 64-byte aligned", fn, m->specs[i].name, p);
    return -1;
  }
  m->bind[(size_t)k * m->n_params + i] = p;
  return 0;
}

int gpt_bind_weight(gpt_model *m, int i, const float *w) {
  if (m && m->gemm_bf16 && gpt_gemm_bf16_param(&m->cfg, i)) {
    seterr(m->err, sizeof m->err,
           "gpt_bind_weight: %s computes in bf16 (gpt_set_gemm_bf16): gpt_bind_weight_bf16",
           m->specs[i].name);
    return -1;
  }
  return bind(m, i, 0, (void *)w, "gpt_bind_weight");
}

int gpt_bind_weight_bf16(gpt_model *m, int i, const uint16_t *w) {
  if (m && (!m->gemm_bf16 || !gpt_gemm_bf16_param(&m->cfg, i))) {
    seterr(m->err, sizeof m->err,
           "gpt_bind_weight_bf16: parameter %d is not a bf16 product's weight%s", i,
           m->gemm_bf16 ? "" : " (gpt_set_gemm_bf16 not called)");
    return -1;
  }
  return bind(m, i, 0, (void *)w, "gpt_bind_weight_bf16");
}

int gpt_gemm_bf16_param(const gpt_config *c, int i) {
  if (i < 2 || i >= 2 + GPT_PARAMS_PER_LAYER * c->n_layer) return 0;
  const int k = (i - 2) % GPT_PARAMS_PER_LAYER;
  return k == GPT_P_QKV_W || k == GPT_P_ATTPROJ_W || k == GPT_P_FC_W || k == GPT_P_FCPROJ_W;
}

size_t gpt_gemm_bf16_bytes(const gpt_config *c, int max_batch) {
  size_t n; /* two scratches of max_batch x seq_len x 4C bf16, each rounded up to 64 bytes */
  if (__builtin_mul_overflow((size_t)max_batch * (size_t)c->seq_len, 4 * (size_t)c->d_model * 2,
                             &n) ||
      __builtin_add_overflow(n, (size_t)63, &n))
    return SIZE_MAX;
  return n / 64 * 64 * 2;
}

int gpt_set_gemm_bf16(gpt_model *m) {
  if (!m) return -1;
  if (!m->streamed) {
    seterr(m->err, sizeof m->err,
           "gpt_set_gemm_bf16: bf16 products need a streamed model (gpt_create_streamed)");
    return -1;
  }
  if (m->gemm_bf16) return 0;
  const char *isa = gemm_bf16_isa();
  if (!strncmp(isa, "unavailable", 11)) {
    seterr(m->err, sizeof m->err, "gpt_set_gemm_bf16: bf16 products %s", isa);
    return -1;
  }
  const size_t bytes = gpt_gemm_bf16_bytes(&m->cfg, m->max_batch);
  if (bytes == SIZE_MAX || !(m->act16 = aligned_alloc(64, bytes / 2)) ||
      !(m->dout16 = aligned_alloc(64, bytes / 2))) {
    free(m->act16);
    m->act16 = NULL;
    seterr(m->err, sizeof m->err, "gpt_set_gemm_bf16: out of memory (2 x %zu bytes)", bytes / 2);
    return -1;
  }
  m->allocated += bytes;
  m->gemm_bf16 = 1;
  return 0;
}

const char *gpt_gemm_bf16_isa(void) { return gemm_bf16_isa(); }
int gpt_bind_grad(gpt_model *m, int i, float *g) { return bind(m, i, 1, g, "gpt_bind_grad"); }

const float *gpt_logits(const gpt_model *m) { return m ? m->logits : NULL; }
double gpt_forward_seconds(const gpt_model *m) { return m ? m->t_fwd : 0.0; }
double gpt_backward_seconds(const gpt_model *m) { return m ? m->t_bwd : 0.0; }

/* ------------------------------------------------------------------ */
/* layer groups */

int gpt_num_groups(const gpt_config *c) { return c->n_layer + 2; }

void gpt_group_params(const gpt_config *c, int group, int *first, int *count) {
  if (group <= 0)
    *first = 0, *count = 2;
  else if (group <= c->n_layer)
    *first = LP(group - 1, 0), *count = GPT_PARAMS_PER_LAYER;
  else
    *first = 2 + GPT_PARAMS_PER_LAYER * c->n_layer, *count = 2;
}

size_t gpt_group_elems(const gpt_config *c, int group) {
  const size_t C = (size_t)c->d_model, A = GPT_ALIGN_FLOATS;
#define PAD(n) (((n) + A - 1) / A * A)
  /* no overflow for a config that passes gpt_config_check(): at most 4 * 65536^2 per tensor */
  if (group <= 0) return PAD((size_t)c->vocab * C) + PAD((size_t)c->seq_len * C);
  if (group > c->n_layer) return 2 * PAD(C);
  return 6 * PAD(C) + PAD(3 * C * C) + PAD(3 * C) + PAD(C * C) + 2 * PAD(4 * C * C) + PAD(4 * C);
#undef PAD
}

double gpt_flops_per_token(const gpt_config *c, int T) {
  return 6.0 * (double)gpt_total_elems(c) + 12.0 * c->n_layer * (double)c->d_model * T;
}

size_t gpt_group_layout(const gpt_config *c, const gpt_param_spec *specs, int group,
                        size_t elem_bytes, size_t align_bytes, size_t *off) {
  int first, count;
  gpt_group_params(c, group, &first, &count);
  size_t b =
      0; /* no overflow for a config that passes gpt_config_check(): at most 12 tensors of 4 * 65536^2 */
  for (int i = first; i < first + count; i++) {
    if (off) off[i] = b / elem_bytes;
    b += (specs[i].n_elems * elem_bytes + align_bytes - 1) / align_bytes * align_bytes;
  }
  return b;
}

size_t gpt_max_group_elems(const gpt_config *c) {
  size_t mx = 0;
  for (int g = 1; g < gpt_num_groups(c); g++) {
    const size_t n = gpt_group_elems(c, g);
    mx = n > mx ? n : mx;
  }
  return mx;
}
