/*
 * gpt_cuda.cu - zo-train's GPT model on a CUDA GPU (models/, library
 * zo_gpt_cuda; API in gpt_cuda.h): the device memory plan, cuBLAS GEMMs,
 * forward, backward with optional per-block recompute, sampling. The
 * element-wise and reduction kernels are in gpt_cuda_kernels.cu. Not an
 * optimizer; weights and gradients are the caller's.
 */
#include "gpt_cuda.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_cuda_fused.h"
#include "gpt_cuda_internal.h"
#include "gpt_cuda_model.h"
#include "rng.h"
#include "sample.h"
#include "seterr.h"

/* ------------------------------------------------------------------ */
/* errors */

/* Message "<call>: <what>: <call text> failed: <name> (<string>)" and return -1. */
int zgm_fail_cuda(gpt_cuda *m, cudaError_t e, const char *call, const char *what) {
  seterr(m->err, sizeof m->err, "%s: %s: %s failed: %s (%s)", m->fn, what, call,
         cudaGetErrorName(e), cudaGetErrorString(e));
  return -1;
}

int zgm_fail_blas(gpt_cuda *m, cublasStatus_t st, const char *call, const char *what) {
  seterr(m->err, sizeof m->err, "%s: %s: %s failed: %s (%s)", m->fn, what, call,
         cublasGetStatusName(st), cublasGetStatusString(st));
  return -1;
}

/* ------------------------------------------------------------------ */
/* memory plan: one allocation, each buffer rounded up to 256 bytes */

typedef struct carver {
  char *base; /* NULL: count only */
  size_t off;
} carver;

static void *take(carver *cv, size_t nbytes) {
  const size_t o = cv->off;
  cv->off += (nbytes + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
  return cv->base ? (void *)(cv->base + o) : NULL;
}

/*
 * Lay out every device buffer for (@c, @max_batch, @recompute) from @base;
 * with @base NULL only counts. @b, @sets (n_sets entries) and @resid (L+1)
 * may be NULL when counting. Returns the total bytes (gpt_cuda_device_bytes).
 */
static size_t plan(const gpt_config *c, int max_batch, int recompute, char *base, bufs *b,
                   acts *sets, bf16 **resid) {
  const size_t L = (size_t)c->n_layer, C = (size_t)c->d_model, V = (size_t)c->vocab;
  const size_t NH = (size_t)c->n_head, Tm = (size_t)c->seq_len;
  const size_t N = (size_t)max_batch * Tm, NC = N * C, TT = (size_t)max_batch * NH * Tm * Tm;
  const size_t n_sets = recompute ? 1 : L;
  carver cv = {base, 0};
  bufs tb;
  acts ta;
  if (!b) b = &tb;
  for (size_t s = 0; s < n_sets; s++) {
    acts *a = sets ? &sets[s] : &ta;
    a->ln1 = (bf16 *)take(&cv, 2 * NC);
    a->ln1_mean = (float *)take(&cv, 4 * N);
    a->ln1_rstd = (float *)take(&cv, 4 * N);
    a->qkvr = (bf16 *)take(&cv, 6 * NC);
    a->att = (bf16 *)take(&cv, 2 * TT);
    a->atty = (bf16 *)take(&cv, 2 * NC);
    a->res2 = (bf16 *)take(&cv, 2 * NC);
    a->ln2 = (bf16 *)take(&cv, 2 * NC);
    a->ln2_mean = (float *)take(&cv, 4 * N);
    a->ln2_rstd = (float *)take(&cv, 4 * N);
    a->fch = (bf16 *)take(&cv, 8 * NC);
    a->fcg = (bf16 *)take(&cv, 8 * NC);
  }
  for (size_t l = 0; l <= L; l++) {
    bf16 *p = (bf16 *)take(&cv, 2 * NC);
    if (resid) resid[l] = p;
  }
  b->resid = resid;
  b->lnf = (bf16 *)take(&cv, 2 * NC);
  b->lnf_mean = (float *)take(&cv, 4 * N);
  b->lnf_rstd = (float *)take(&cv, 4 * N);
  b->logits = (bf16 *)take(&cv, 2 * N * V);
  b->lse = (float *)take(&cv, 4 * N);
  b->losses = (float *)take(&cv, 4 * N);
  b->loss = (float *)take(&cv, 4);
  b->inputs = (uint8_t *)take(&cv, N);
  b->targets = (uint8_t *)take(&cv, N);
  b->tok_pos = (int *)take(&cv, 4 * N);
  b->tok_off = (int *)take(&cv, 4 * 257);
  b->dres = (float *)take(&cv, 4 * NC);
  b->dA = (bf16 *)take(&cv, 2 * NC);
  b->dB = (bf16 *)take(&cv, 2 * NC);
  b->dqkv = (bf16 *)take(&cv, 6 * NC);
  b->d4c = (bf16 *)take(&cv, 8 * NC);
  b->datt = (bf16 *)take(&cv, 2 * TT);
  b->gwte32 = (float *)take(&cv, 4 * V * C);
  b->part = (float *)take(&cv, 4 * (size_t)ZGC_MAX_CHUNKS * 4 * C);
  b->cublas_ws = take(&cv, CUBLAS_WS_BYTES);
  return cv.off;
}

extern "C" size_t gpt_cuda_device_bytes(const gpt_config *c, int max_batch, int recompute) {
  if (gpt_config_check(c, NULL, 0) != 0 || max_batch < 1) return 0;
  return plan(c, max_batch, recompute, NULL, NULL, NULL, NULL);
}

/* ------------------------------------------------------------------ */
/* create / destroy */

/* The host side of a new model: its config, the parameter tables and the activation sets; NULL (with @err) when
 * out of host memory. */
static gpt_cuda *create_host(const gpt_config *c, int max_batch, int recompute, char *err,
                             size_t errlen) {
  gpt_cuda *m = (gpt_cuda *)calloc(1, sizeof *m);
  if (!m) {
    seterr(err, errlen, "gpt_cuda_create: out of host memory (%zu bytes)", sizeof *m);
    return NULL;
  }
  m->fn = "gpt_cuda_create";
  m->cfg = *c;
  m->max_batch = max_batch;
  m->recompute = recompute ? 1 : 0;
  m->n_params = gpt_num_params(c);
  m->n_sets = m->recompute ? 1 : c->n_layer;
  m->specs = (gpt_param_spec *)calloc((size_t)m->n_params, sizeof *m->specs);
  m->w = (const bf16 **)calloc((size_t)m->n_params, sizeof *m->w);
  m->g = (bf16 **)calloc((size_t)m->n_params, sizeof *m->g);
  m->sets = (acts *)calloc((size_t)m->n_sets, sizeof *m->sets);
  m->resid_v = (bf16 **)calloc((size_t)c->n_layer + 1, sizeof *m->resid_v);
  if (!m->specs || !m->w || !m->g || !m->sets || !m->resid_v) {
    gpt_cuda_destroy(m);
    seterr(err, errlen, "gpt_cuda_create: out of host memory (parameter tables)");
    return NULL;
  }
  gpt_param_specs(c, m->specs);
  snprintf(m->dev_name, sizeof m->dev_name, "unknown GPU");
  return m;
}

/* The current GPU's name, the model's stream (the caller's @stream, or its own) and the staging event. */
static int create_gpu_stream(gpt_cuda *m, void *stream) {
  int dev = 0;
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, dev);
  if (e != cudaSuccess)
    return zgm_fail_cuda(m, e, "cudaGetDevice/cudaGetDeviceProperties", "finding the GPU");
  snprintf(m->dev_name, sizeof m->dev_name, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  if (stream) {
    m->stream = (cudaStream_t)stream;
  } else {
    e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
      return zgm_fail_cuda(m, e, "cudaStreamCreateWithFlags", "the model's stream");
    m->own_stream = 1;
  }
  e = cudaEventCreateWithFlags(&m->staged, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    m->staged = NULL;
    return zgm_fail_cuda(m, e, "cudaEventCreateWithFlags", "the staging event");
  }
  e = cudaEventCreateWithFlags(&m->loss_ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    m->loss_ev = NULL;
    return zgm_fail_cuda(m, e, "cudaEventCreateWithFlags", "the loss event");
  }
  return 0;
}

/* The device block of activations (laid out by plan()) and the pinned staging for @N tokens. */
static int create_memory(gpt_cuda *m, size_t N) {
  const gpt_config *c = &m->cfg;
  m->mem_bytes = plan(c, m->max_batch, m->recompute, NULL, NULL, NULL, NULL);
  cudaError_t e = cudaMalloc(&m->mem, m->mem_bytes);
  if (e != cudaSuccess) {
    m->mem = NULL;
    char what[200];
    snprintf(what, sizeof what,
             "%zu bytes of activations (%d layers, d_model %d, batch %d x %d, recompute %d)",
             m->mem_bytes, c->n_layer, c->d_model, m->max_batch, c->seq_len, m->recompute);
    return zgm_fail_cuda(m, e, "cudaMalloc", what);
  }
  plan(c, m->max_batch, m->recompute, (char *)m->mem, &m->b, m->sets, m->resid_v);
  const size_t pinned_bytes = 2 * N + 4 * 257 + 4 * N + 4 + 2 * 256;
  e = cudaMallocHost(&m->pinned, pinned_bytes);
  if (e != cudaSuccess) {
    m->pinned = NULL;
    return zgm_fail_cuda(m, e, "cudaMallocHost", "pinned staging for tokens");
  }
  /* 4-byte items first so every pointer is aligned */
  char *hp = (char *)m->pinned;
  m->h_tok_pos = (int *)hp;
  m->h_tok_off = (int *)(hp + 4 * N);
  m->h_loss = (float *)(hp + 4 * N + 4 * 257);
  m->h_logits = (bf16 *)(hp + 4 * N + 4 * 257 + 4);
  m->h_inputs = (uint8_t *)(hp + 4 * N + 4 * 257 + 4 + 2 * 256);
  m->h_targets = m->h_inputs + N;
  return 0;
}

/* The cuBLAS handle on the model's stream, with its workspace and fp32 accumulation. */
static int create_blas(gpt_cuda *m) {
  cublasStatus_t st = cublasCreate(&m->blas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    m->blas = NULL;
    return zgm_fail_blas(m, st, "cublasCreate", "the cuBLAS handle");
  }
  st = cublasSetStream(m->blas, m->stream);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasSetWorkspace(m->blas, m->b.cublas_ws, CUBLAS_WS_BYTES);
  /* fp32 accumulation all the way: no split-K reductions in the bf16 output type */
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasSetMathMode(m->blas,
                           (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  if (st != CUBLAS_STATUS_SUCCESS)
    return zgm_fail_blas(m, st, "cublasSetStream/cublasSetWorkspace/cublasSetMathMode",
                         "configuring the cuBLAS handle");
  return 0;
}

extern "C" int gpt_cuda_create(const gpt_config *c, int max_batch, int recompute, void *stream,
                               gpt_cuda **out, char *err, size_t errlen) {
  if (!out) {
    seterr(err, errlen, "gpt_cuda_create: out is NULL");
    return -1;
  }
  *out = NULL;
  if (gpt_config_check(c, err, errlen) != 0) return -1;
  if (max_batch < 1 || (long long)max_batch * c->seq_len > 0x7fffffffLL) {
    seterr(err, errlen,
           "gpt_cuda_create: max_batch %d must be >= 1 with max_batch * seq_len (%d) < 2^31",
           max_batch, c->seq_len);
    return -1;
  }
  gpt_cuda *m = create_host(c, max_batch, recompute, err, errlen);
  if (!m) return -1;
  const size_t N = (size_t)max_batch * c->seq_len;
  int rc = create_gpu_stream(m, stream);
  if (rc == 0) rc = create_memory(m, N);
  if (rc == 0) rc = create_blas(m);
  const char *gemm_env = getenv("ZO_GPT_CUDA_GEMM");
  m->gemm_reference = gemm_env && strcmp(gemm_env, "reference") == 0;
  if (rc != 0) {
    seterr(err, errlen, "%s", m->err);
    gpt_cuda_destroy(m);
    return -1;
  }
  m->err[0] = 0;
  *out = m;
  return 0;
}

extern "C" void gpt_cuda_destroy(gpt_cuda *m) {
  if (!m) return;
  if (m->stream)
    (void)cudaStreamSynchronize(m->stream); /* nothing queued may still use the buffers */
  (void)zgm_timing_enable(m, 0);
  zgc_lt_destroy(m->lt);
  zga_destroy(m->attn);
  if (m->blas) (void)cublasDestroy(m->blas);
  if (m->mem) (void)cudaFree(m->mem);
  if (m->pinned) (void)cudaFreeHost(m->pinned);
  if (m->staged) (void)cudaEventDestroy(m->staged);
  if (m->loss_ev) (void)cudaEventDestroy(m->loss_ev);
  if (m->own_stream && m->stream) (void)cudaStreamDestroy(m->stream);
  free(m->specs);
  free(m->w);
  free(m->g);
  free(m->sets);
  free(m->resid_v);
  free(m);
}

extern "C" void *gpt_cuda_stream(gpt_cuda *m) { return m ? (void *)m->stream : NULL; }

extern "C" void gpt_cuda_set_weight(gpt_cuda *m, int i, const void *w_bf16) {
  if (m && i >= 0 && i < m->n_params) m->w[i] = (const bf16 *)w_bf16;
}

extern "C" void gpt_cuda_set_grad(gpt_cuda *m, int i, void *g_bf16) {
  if (m && i >= 0 && i < m->n_params) m->g[i] = (bf16 *)g_bf16;
}

extern "C" void gpt_cuda_set_hook(gpt_cuda *m, gpt_hook_fn fn, void *user) {
  if (!m) return;
  m->hook = fn;
  m->hook_user = user;
}

extern "C" const char *gpt_cuda_last_error(const gpt_cuda *m) {
  return m ? m->err : "gpt_cuda: NULL model";
}
extern "C" const char *gpt_cuda_device_name(const gpt_cuda *m) { return m ? m->dev_name : "none"; }

/* ------------------------------------------------------------------ */
/* kernel sets and timing */

extern "C" int gpt_cuda_set_kernels(gpt_cuda *m, gpt_cuda_kernels k) {
  if (!m) return -1;
  m->fn = "gpt_cuda_set_kernels";
  if (k != GPT_CUDA_KERNELS_BASELINE && k != GPT_CUDA_KERNELS_FUSED) {
    seterr(m->err, sizeof m->err, "gpt_cuda_set_kernels: unknown kernel set %d", (int)k);
    return -1;
  }
  if (k == GPT_CUDA_KERNELS_FUSED && !m->lt) {
    char e[256];
    if (zgc_lt_create(m->b.cublas_ws, CUBLAS_WS_BYTES, &m->lt, e, sizeof e) != 0) {
      seterr(m->err, sizeof m->err, "gpt_cuda_set_kernels: the cuBLASLt handle: %s", e);
      return -1;
    }
  }
  if (k == GPT_CUDA_KERNELS_FUSED && !m->attn_tried) { /* without it: the baseline's attention */
    m->attn_tried = 1;
    if (zga_create(&m->attn, m->attn_note, sizeof m->attn_note) != 0) m->attn = NULL;
  }
  m->kernels = k;
  m->have_targets = 0; /* a forward of the other set does not suit this set's backward */
  return 0;
}

extern "C" gpt_cuda_kernels gpt_cuda_get_kernels(const gpt_cuda *m) {
  return m ? m->kernels : GPT_CUDA_KERNELS_BASELINE;
}

extern "C" int gpt_cuda_fallbacks(const gpt_cuda *m) { return m ? zgc_lt_unsupported(m->lt) : 0; }

extern "C" const char *gpt_cuda_attention(const gpt_cuda *m) {
  if (!m || m->kernels != GPT_CUDA_KERNELS_FUSED) return "baseline";
  if (m->attn && !m->attn_note[0]) return "cudnn";
  return m->attn_note[0] ? m->attn_note : "baseline";
}

extern "C" int gpt_cuda_set_kernel_times(gpt_cuda *m, int on) {
  if (!m) return -1;
  m->fn = "gpt_cuda_set_kernel_times";
  return zgm_timing_enable(m, on);
}

extern "C" int gpt_cuda_kernel_times(gpt_cuda *m, double ms[3]) {
  if (!m || !ms) return -1;
  m->fn = "gpt_cuda_kernel_times";
  ms[0] = ms[1] = ms[2] = 0.0;
  if (!m->timing) {
    seterr(m->err, sizeof m->err,
           "gpt_cuda_kernel_times: timing is off (gpt_cuda_set_kernel_times)");
    return -1;
  }
  zgm_mark(m, -1);
  if (zgm_timing_collect(m) != 0) return -1;
  for (int i = 0; i < 3; i++) ms[i] = m->time_ms[i], m->time_ms[i] = 0.0;
  return 0;
}

/* ------------------------------------------------------------------ */
/* helpers of the passes */

int zgm_hook(gpt_cuda *m, int phase, int group, int end) {
  zgm_mark(m, -1);
  if (!m->hook || !m->hook(m->hook_user, phase, group, end)) return 0;
  seterr(m->err, sizeof m->err, "%s: layer hook failed at group %d (%s)", m->fn, group,
         end ? "end" : "begin");
  return -1;
}

int zgm_need(gpt_cuda *m, int first, int count, int want_w, int want_g) {
  for (int i = first; i < first + count; i++) {
    if (want_w && !m->w[i]) {
      seterr(m->err, sizeof m->err, "%s: weight %d (%s) is not set (gpt_cuda_set_weight)", m->fn, i,
             m->specs[i].name);
      return -1;
    }
    if (want_g && !m->g[i]) {
      seterr(m->err, sizeof m->err, "%s: gradient %d (%s) is not set (gpt_cuda_set_grad)", m->fn, i,
             m->specs[i].name);
      return -1;
    }
  }
  return 0;
}

int zgm_gemm(gpt_cuda *m, const char *what, cublasOperation_t ta, cublasOperation_t tb, int M,
             int Nn, int K, float alpha, const void *A, int lda, long long sA, const void *B,
             int ldb, long long sB, float beta, void *Cp, cudaDataType_t ctype, int ldc,
             long long sC, int batch) {
  cublasStatus_t st;
  zgm_mark(m, GPT_CUDA_TIME_GEMM);
  if (m->gemm_reference) {
    const cudaError_t e =
        zgc_gemm_reference(ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, M, Nn, K, alpha, (const bf16 *)A,
                           lda, sA, (const bf16 *)B, ldb, sB, beta, Cp, ctype == CUDA_R_32F, ldc,
                           sC, batch, m->stream);
    return e == cudaSuccess ? 0 : zgm_fail_cuda(m, e, "kernel zgc_gemm_reference", what);
  }
  if (batch == 1) {
    st = cublasGemmEx(m->blas, ta, tb, M, Nn, K, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb,
                      &beta, Cp, ctype, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return zgm_fail_blas(m, st, "cublasGemmEx", what);
  } else {
    st = cublasGemmStridedBatchedEx(m->blas, ta, tb, M, Nn, K, &alpha, A, CUDA_R_16BF, lda, sA, B,
                                    CUDA_R_16BF, ldb, sB, &beta, Cp, ctype, ldc, sC, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
      return zgm_fail_blas(m, st, "cublasGemmStridedBatchedEx", what);
  }
  return 0;
}

int zgm_linear_forward(gpt_cuda *m, const char *what, bf16 *out, const bf16 *inp, const bf16 *W,
                       int N, int IC, int OC, float beta) {
  return zgm_gemm(m, what, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, 1.0f, W, IC, 0, inp, IC, 0, beta,
                  out, CUDA_R_16BF, OC, 0, 1);
}

int zgm_linear_dinp(gpt_cuda *m, const char *what, bf16 *dinp, const bf16 *dout, const bf16 *W,
                    int N, int IC, int OC) {
  return zgm_gemm(m, what, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, 1.0f, W, IC, 0, dout, OC, 0, 0.0f,
                  dinp, CUDA_R_16BF, IC, 0, 1);
}

int zgm_linear_dweight(gpt_cuda *m, const char *what, bf16 *dW, const bf16 *dout, const bf16 *inp,
                       int N, int IC, int OC) {
  return zgm_gemm(m, what, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, 1.0f, inp, IC, 0, dout, OC, 0, 1.0f,
                  dW, CUDA_R_16BF, IC, 0, 1);
}

/*
 * Backward of out = inp W^T + b with dout (N,OC): dinp (N,IC) = dout W
 * (overwritten), dW (OC,IC) += dout^T inp, db (OC) += column sums.
 */
static int linear_backward(gpt_cuda *m, const char *what, bf16 *dinp, bf16 *dW, bf16 *db,
                           const bf16 *dout, const bf16 *inp, const bf16 *W, int N, int IC,
                           int OC) {
  char w[160];
  snprintf(w, sizeof w, "%s: d input", what);
  if (zgm_linear_dinp(m, w, dinp, dout, W, N, IC, OC)) return -1;
  snprintf(w, sizeof w, "%s: d weight", what);
  if (zgm_linear_dweight(m, w, dW, dout, inp, N, IC, OC)) return -1;
  snprintf(w, sizeof w, "%s: d bias", what);
  KERN(zgc_colsum_add, (db, dout, N, OC, m->b.part, m->stream), w);
  return 0;
}

int zgm_attention_forward(gpt_cuda *m, int l, const acts *a, bf16 *scratch) {
  const int B = m->B, T = m->T, C = m->cfg.d_model, NH = m->cfg.n_head, hs = C / NH;
  const size_t NC = (size_t)B * T * C;
  cudaStream_t s = m->stream;
  char what[96];
#define WHAT(x) (snprintf(what, sizeof what, "block %d %s", l, (x)), what)
  m->in_attn = 1;
  KERN(zgc_to_heads, (a->qkvr, m->b.dqkv, B, T, NH, hs, 3, s), WHAT("q,k,v to heads"));
  const bf16 *q = a->qkvr, *k = q + NC, *v = k + NC;
  const long long sTh = (long long)T * hs, sTT = (long long)T * T;
  /* scores (T,T) = q k^T / sqrt(hs) per (b, head) */
  if (zgm_gemm(m, WHAT("attention scores q k^T"), CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs,
               1.0f / sqrtf((float)hs), k, hs, sTh, q, hs, sTh, 0.0f, a->att, CUDA_R_16BF, T, sTT,
               B * NH))
    return -1;
  KERN(zgc_softmax_causal_forward, (a->att, B * NH, T, s), WHAT("attention softmax"));
  /* y (T,hs) = att v per (b, head), into @scratch by head */
  if (zgm_gemm(m, WHAT("attention att v"), CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, sTh,
               a->att, T, sTT, 0.0f, scratch, CUDA_R_16BF, hs, sTh, B * NH))
    return -1;
  KERN(zgc_from_heads, (a->atty, scratch, B, T, NH, hs, 1, s), WHAT("attention output from heads"));
  m->in_attn = 0;
#undef WHAT
  return 0;
}

int zgm_attention_backward(gpt_cuda *m, int l, const acts *a) {
  const int B = m->B, T = m->T, C = m->cfg.d_model, NH = m->cfg.n_head, hs = C / NH;
  const size_t NC = (size_t)B * T * C;
  const bufs *b = &m->b;
  cudaStream_t s = m->stream;
  char what[96];
#define WHAT(x) (snprintf(what, sizeof what, "block %d %s backward", l, (x)), what)
  /* dy by head into dA, dq|dk|dv by head into d4c */
  m->in_attn = 1;
  KERN(zgc_to_heads, (b->dA, b->dB, B, T, NH, hs, 1, s), WHAT("attention output grad to heads"));
  const bf16 *q = a->qkvr, *k = q + NC, *v = k + NC;
  bf16 *dq = b->d4c, *dk = dq + NC, *dv = dk + NC;
  const long long sTh = (long long)T * hs, sTT = (long long)T * T;
  /* datt (T,T) = dy v^T */
  if (zgm_gemm(m, WHAT("attention d att = dy v^T"), CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs,
               sTh, b->dA, hs, sTh, 0.0f, b->datt, CUDA_R_16BF, T, sTT, B * NH))
    return -1;
  /* dv (T,hs) = att^T dy */
  if (zgm_gemm(m, WHAT("attention dv = att^T dy"), CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, b->dA,
               hs, sTh, a->att, T, sTT, 0.0f, dv, CUDA_R_16BF, hs, sTh, B * NH))
    return -1;
  KERN(zgc_softmax_causal_backward, (b->datt, a->att, B * NH, T, 1.0f / sqrtf((float)hs), s),
       WHAT("attention softmax"));
  /* dq (T,hs) = dS k; dk (T,hs) = dS^T q */
  if (zgm_gemm(m, WHAT("attention dq = dS k"), CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, hs, sTh,
               b->datt, T, sTT, 0.0f, dq, CUDA_R_16BF, hs, sTh, B * NH))
    return -1;
  if (zgm_gemm(m, WHAT("attention dk = dS^T q"), CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, hs,
               sTh, b->datt, T, sTT, 0.0f, dk, CUDA_R_16BF, hs, sTh, B * NH))
    return -1;
  KERN(zgc_from_heads, (b->dqkv, b->d4c, B, T, NH, hs, 3, s), WHAT("dq,dk,dv from heads"));
  m->in_attn = 0;
#undef WHAT
  return 0;
}

/*
 * Forward of block @l from @res_in into activation set @a; with @res_out
 * also the block output (the last projection and residual), which the
 * recompute in backward does not need. Scratch: dqkv, dA, dB.
 */
static int block_forward(gpt_cuda *m, int l, const acts *a, const bf16 *res_in, bf16 *res_out) {
  const int C = m->cfg.d_model, N = m->B * m->T;
  const size_t NC = (size_t)N * C;
  const bf16 *const *w = m->w;
  cudaStream_t s = m->stream;
  char what[96];
#define WHAT(x) (snprintf(what, sizeof what, "block %d %s", l, (x)), what)
  KERN(zgc_layernorm_forward,
       (a->ln1, a->ln1_mean, a->ln1_rstd, res_in, w[zgm_lp(l, GPT_P_LN1_W)],
        w[zgm_lp(l, GPT_P_LN1_B)], N, C, s),
       WHAT("ln_1"));
  KERN(zgc_bias_broadcast, (m->b.dqkv, w[zgm_lp(l, GPT_P_QKV_B)], N, 3 * C, s),
       WHAT("attn.c_attn bias"));
  if (zgm_linear_forward(m, WHAT("attn.c_attn"), m->b.dqkv, a->ln1, w[zgm_lp(l, GPT_P_QKV_W)], N, C,
                         3 * C, 1.0f))
    return -1;
  if (zgm_attention_forward(m, l, a, m->b.dA)) return -1;
  if (zgm_linear_forward(m, WHAT("attn.c_proj"), m->b.dB, a->atty, w[zgm_lp(l, GPT_P_ATTPROJ_W)], N,
                         C, C, 0.0f))
    return -1;
  KERN(zgc_residual_bias, (a->res2, res_in, m->b.dB, w[zgm_lp(l, GPT_P_ATTPROJ_B)], N, C, s),
       WHAT("residual 2"));
  KERN(zgc_layernorm_forward,
       (a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w[zgm_lp(l, GPT_P_LN2_W)],
        w[zgm_lp(l, GPT_P_LN2_B)], N, C, s),
       WHAT("ln_2"));
  KERN(zgc_bias_broadcast, (a->fch, w[zgm_lp(l, GPT_P_FC_B)], N, 4 * C, s), WHAT("mlp.c_fc bias"));
  if (zgm_linear_forward(m, WHAT("mlp.c_fc"), a->fch, a->ln2, w[zgm_lp(l, GPT_P_FC_W)], N, C, 4 * C,
                         1.0f))
    return -1;
  KERN(zgc_gelu_forward, (a->fcg, a->fch, NC * 4, s), WHAT("gelu"));
  if (res_out) {
    if (zgm_linear_forward(m, WHAT("mlp.c_proj"), m->b.dB, a->fcg, w[zgm_lp(l, GPT_P_FCPROJ_W)], N,
                           4 * C, C, 0.0f))
      return -1;
    KERN(zgc_residual_bias, (res_out, a->res2, m->b.dB, w[zgm_lp(l, GPT_P_FCPROJ_B)], N, C, s),
         WHAT("residual 3"));
  }
#undef WHAT
  return 0;
}

/*
 * Backward of block @l with activations @a and input @res_in: dres (fp32)
 * holds dL/d block output on entry and dL/d block input on return; the
 * block's gradients are added. Scratch: dA, dB, dqkv, d4c, datt.
 */
static int block_backward(gpt_cuda *m, int l, const acts *a, const bf16 *res_in) {
  const int C = m->cfg.d_model, N = m->B * m->T;
  const size_t NC = (size_t)N * C;
  const bf16 *const *w = m->w;
  bf16 *const *g = m->g;
  const bufs *b = &m->b;
  cudaStream_t s = m->stream;
  char what[96];
#define WHAT(x) (snprintf(what, sizeof what, "block %d %s backward", l, (x)), what)
  /* block output = res2 + fcg Wfp^T + bfp */
  KERN(zgc_f32_to_bf16, (b->dA, b->dres, NC, s), WHAT("residual grad to bf16"));
  if (linear_backward(m, WHAT("mlp.c_proj"), b->d4c, g[zgm_lp(l, GPT_P_FCPROJ_W)],
                      g[zgm_lp(l, GPT_P_FCPROJ_B)], b->dA, a->fcg, w[zgm_lp(l, GPT_P_FCPROJ_W)], N,
                      4 * C, C))
    return -1;
  KERN(zgc_gelu_backward, (b->d4c, a->fch, NC * 4, s), WHAT("gelu"));
  /* fch = ln2 Wfc^T + bfc */
  if (linear_backward(m, WHAT("mlp.c_fc"), b->dB, g[zgm_lp(l, GPT_P_FC_W)],
                      g[zgm_lp(l, GPT_P_FC_B)], b->d4c, a->ln2, w[zgm_lp(l, GPT_P_FC_W)], N, C,
                      4 * C))
    return -1;
  KERN(zgc_layernorm_backward,
       (b->dres, g[zgm_lp(l, GPT_P_LN2_W)], g[zgm_lp(l, GPT_P_LN2_B)], b->dB, a->res2, a->ln2_mean,
        a->ln2_rstd, w[zgm_lp(l, GPT_P_LN2_W)], N, C, b->part, s),
       WHAT("ln_2"));
  /* res2 = res_in + atty Wp^T + bp */
  KERN(zgc_f32_to_bf16, (b->dA, b->dres, NC, s), WHAT("residual grad to bf16"));
  if (linear_backward(m, WHAT("attn.c_proj"), b->dB, g[zgm_lp(l, GPT_P_ATTPROJ_W)],
                      g[zgm_lp(l, GPT_P_ATTPROJ_B)], b->dA, a->atty, w[zgm_lp(l, GPT_P_ATTPROJ_W)],
                      N, C, C))
    return -1;
  if (zgm_attention_backward(m, l, a)) return -1;
  /* qkv = ln1 Wqkv^T + bqkv */
  if (linear_backward(m, WHAT("attn.c_attn"), b->dB, g[zgm_lp(l, GPT_P_QKV_W)],
                      g[zgm_lp(l, GPT_P_QKV_B)], b->dqkv, a->ln1, w[zgm_lp(l, GPT_P_QKV_W)], N, C,
                      3 * C))
    return -1;
  KERN(zgc_layernorm_backward,
       (b->dres, g[zgm_lp(l, GPT_P_LN1_W)], g[zgm_lp(l, GPT_P_LN1_B)], b->dB, res_in, a->ln1_mean,
        a->ln1_rstd, w[zgm_lp(l, GPT_P_LN1_W)], N, C, b->part, s),
       WHAT("ln_1"));
#undef WHAT
  return 0;
}

static int check_tokens(gpt_cuda *m, const uint8_t *t, size_t n, const char *what) {
  if (m->cfg.vocab >= 256) return 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i] >= m->cfg.vocab) {
      seterr(m->err, sizeof m->err, "%s: %s[%zu] = %d is not < vocab %d", m->fn, what, i, t[i],
             m->cfg.vocab);
      return -1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* forward */

/*
 * Queue a forward on @inputs (and @targets: the loss, and with the fused set
 * the gradient of the logits). @sync: wait for the stream at the end (the
 * baseline's gpt_cuda_forward) and store the loss in *@loss; else the loss's
 * copy is followed by m->loss_ev (gpt_cuda_loss()).
 */
static int forward_pass(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B, int T,
                        int sync, float *loss) {
  const int L = m->cfg.n_layer, C = m->cfg.d_model, V = m->cfg.vocab, N = B * T;
  const size_t Nn = (size_t)N;
  const bufs *b = &m->b;
  cudaStream_t s = m->stream;
  const int fused = m->kernels == GPT_CUDA_KERNELS_FUSED;
  *loss = 0.0f;
  m->have_targets = 0;
  m->in_attn = 0;
  m->B = B;
  m->T = T;

  /* Stage the tokens (and, with targets, the positions of each token id for the wte gradient) in pinned
   * memory; the previous forward's copies out of it must be done first. */
  CU(cudaEventSynchronize(m->staged), "waiting for the previous token copies");
  zgm_mark(m, -1);
  memcpy(m->h_inputs, inputs, Nn);
  CU(cudaMemcpyAsync(b->inputs, m->h_inputs, Nn, cudaMemcpyHostToDevice, s), "copying inputs");
  if (targets) {
    memcpy(m->h_targets, targets, Nn);
    int *off = m->h_tok_off;
    memset(off, 0, 257 * sizeof(int));
    for (size_t n = 0; n < Nn; n++) off[inputs[n] + 1]++;
    for (int v = 0; v < 256; v++) off[v + 1] += off[v];
    int fill[256];
    memcpy(fill, off, sizeof fill);
    for (size_t n = 0; n < Nn; n++) m->h_tok_pos[fill[inputs[n]]++] = (int)n;
    CU(cudaMemcpyAsync(b->targets, m->h_targets, Nn, cudaMemcpyHostToDevice, s), "copying targets");
    CU(cudaMemcpyAsync(b->tok_off, m->h_tok_off, 257 * sizeof(int), cudaMemcpyHostToDevice, s),
       "copying token offsets");
    CU(cudaMemcpyAsync(b->tok_pos, m->h_tok_pos, Nn * sizeof(int), cudaMemcpyHostToDevice, s),
       "copying token positions");
  }
  CU(cudaEventRecord(m->staged, s), "recording the staging event");

  if (zgm_hook(m, GPT_HOOK_FORWARD, 0, 0) || zgm_need(m, 0, 2, 1, 0)) return -1;
  KERN(zgc_encoder_forward, (b->resid[0], b->inputs, m->w[0], m->w[1], B, T, C, s),
       "embedding (wte + wpe)");
  for (int l = 0; l < L; l++) {
    if (zgm_hook(m, GPT_HOOK_FORWARD, l + 1, 0) ||
        zgm_need(m, zgm_lp(l, 0), GPT_PARAMS_PER_LAYER, 1, 0))
      return -1;
    const acts *a = &m->sets[m->recompute ? 0 : l];
    if (fused ? zgm_block_forward_fused(m, l, a, b->resid[l], b->resid[l + 1])
              : block_forward(m, l, a, b->resid[l], b->resid[l + 1]))
      return -1;
    if (zgm_hook(m, GPT_HOOK_FORWARD, l + 1, 1)) return -1;
  }
  const int f = m->n_params - 2;
  if (zgm_hook(m, GPT_HOOK_FORWARD, L + 1, 0) || zgm_need(m, f, 2, 1, 0)) return -1;
  if (fused)
    KERN(zgf_layernorm_forward,
         (b->lnf, b->lnf_mean, b->lnf_rstd, b->resid[L], m->w[f], m->w[f + 1], N, C, s), "ln_f");
  else
    KERN(zgc_layernorm_forward,
         (b->lnf, b->lnf_mean, b->lnf_rstd, b->resid[L], m->w[f], m->w[f + 1], N, C, s), "ln_f");
  if (zgm_hook(m, GPT_HOOK_FORWARD, L + 1, 1)) return -1;
  if (zgm_need(m, 0, 1, 1, 0)) return -1;
  if (zgm_linear_forward(m, "LM head (logits = ln_f wte^T)", b->logits, b->lnf, m->w[0], N, C, V,
                         0.0f))
    return -1;
  if (zgm_hook(m, GPT_HOOK_FORWARD, 0, 1)) return -1;
  if (targets) {
    if (fused) /* losses, and (softmax - onehot) / N over the logits: backward scales by loss_mult */
      KERN(zgf_classifier, (b->logits, b->losses, b->targets, N, V, 1.0f / (float)N, s),
           "fused classifier");
    else
      KERN(zgc_xent_forward, (b->lse, b->losses, b->logits, b->targets, N, V, s), "cross-entropy");
    KERN(zgc_mean, (b->loss, b->losses, N, s), "mean loss");
    zgm_mark(m, -1);
    CU(cudaMemcpyAsync(m->h_loss, b->loss, sizeof(float), cudaMemcpyDeviceToHost, s),
       "copying the loss");
    CU(cudaEventRecord(m->loss_ev, s), "recording the loss event");
    m->loss_queued = 1;
  }
  zgm_mark(m, -1);
  if (sync) {
    CU(cudaStreamSynchronize(s), "end of the forward pass");
    if (targets) *loss = *m->h_loss;
  }
  if (targets) m->have_targets = 1;
  return 0;
}

/* The checks of gpt_cuda_forward's arguments; 0, or -1 with a message. */
static int forward_args(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B, int T) {
  if (!inputs || B < 1 || B > m->max_batch || T < 1 || T > m->cfg.seq_len) {
    seterr(m->err, sizeof m->err, "%s: bad arguments (inputs %p, B %d of max %d, T %d of max %d)",
           m->fn, (const void *)inputs, B, m->max_batch, T, m->cfg.seq_len);
    return -1;
  }
  const size_t n = (size_t)B * T;
  if (check_tokens(m, inputs, n, "inputs") != 0) return -1;
  if (targets && check_tokens(m, targets, n, "targets") != 0) return -1;
  return 0;
}

extern "C" float gpt_cuda_forward(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B,
                                  int T) {
  if (!m) return NAN;
  m->fn = "gpt_cuda_forward";
  m->err[0] =
      0; /* a NaN loss with no message is a numeric one (non-finite weights), not a failure */
  if (forward_args(m, inputs, targets, B, T) != 0) return NAN;
  float loss;
  if (forward_pass(m, inputs, targets, B, T, 1, &loss) != 0) {
    m->have_targets = 0;
    return NAN;
  }
  return loss;
}

extern "C" int gpt_cuda_forward_async(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets,
                                      int B, int T) {
  if (!m) return -1;
  m->fn = "gpt_cuda_forward_async";
  m->err[0] = 0;
  float unused;
  if (forward_args(m, inputs, targets, B, T) != 0 ||
      forward_pass(m, inputs, targets, B, T, 0, &unused) != 0) {
    m->have_targets = 0;
    return -1;
  }
  return 0;
}

extern "C" float gpt_cuda_loss(gpt_cuda *m) {
  if (!m) return NAN;
  m->fn = "gpt_cuda_loss";
  m->err[0] = 0;
  if (!m->loss_queued) {
    seterr(m->err, sizeof m->err, "gpt_cuda_loss: no forward with targets was queued");
    return NAN;
  }
  const cudaError_t e = cudaEventSynchronize(m->loss_ev);
  if (e != cudaSuccess) {
    zgm_fail_cuda(m, e, "cudaEventSynchronize", "waiting for the loss");
    return NAN;
  }
  return *m->h_loss;
}

/* ------------------------------------------------------------------ */
/* backward */

static int backward_pass(gpt_cuda *m, float loss_mult) {
  const int L = m->cfg.n_layer, C = m->cfg.d_model, V = m->cfg.vocab;
  const int B = m->B, T = m->T, N = B * T;
  const size_t NC = (size_t)N * C;
  const bufs *b = &m->b;
  cudaStream_t s = m->stream;
  const int fused = m->kernels == GPT_CUDA_KERNELS_FUSED;
  m->have_targets = 0; /* the logits become dlogits: a second backward needs a new forward */
  m->in_attn = 0;

  if (zgm_hook(m, GPT_HOOK_BACKWARD, 0, 0) || zgm_need(m, 0, 1, 1, 0)) return -1;
  /* dlogits = (softmax - onehot(target)) * loss_mult / N, in place; the fused classifier wrote
   * (softmax - onehot) / N in the forward, and the two products below scale it by loss_mult */
  const float alpha = fused ? loss_mult : 1.0f;
  if (!fused)
    KERN(zgc_xent_backward, (b->logits, b->lse, b->targets, N, V, loss_mult / (float)N, s),
         "cross-entropy backward");
  /* logits = lnf wte^T: dlnf (N,C) = dlogits wte into dB; the wte part of this backward in fp32 */
  if (zgm_gemm(m, "LM head backward: d ln_f", CUBLAS_OP_N, CUBLAS_OP_N, C, N, V, alpha, m->w[0], C,
               0, b->logits, V, 0, 0.0f, b->dB, CUDA_R_16BF, C, 0, 1))
    return -1;
  if (zgm_gemm(m, "LM head backward: d wte (fp32)", CUBLAS_OP_N, CUBLAS_OP_T, C, V, N, alpha,
               b->lnf, C, 0, b->logits, V, 0, 0.0f, b->gwte32, CUDA_R_32F, C, 0, 1))
    return -1;

  const int f = m->n_params - 2;
  if (zgm_hook(m, GPT_HOOK_BACKWARD, L + 1, 0) || zgm_need(m, f, 2, 1, 1)) return -1;
  zgm_mark(m, GPT_CUDA_TIME_OTHER);
  CU(cudaMemsetAsync(b->dres, 0, NC * sizeof(float), s), "zeroing the residual gradient");
  if (fused) /* also dA = bf16(dres), the first block's operand */
    KERN(zgf_layernorm_backward,
         (b->dres, b->dA, m->g[f], m->g[f + 1], b->dB, b->resid[L], b->lnf_mean, b->lnf_rstd,
          m->w[f], N, C, (float *)b->d4c, zgm_d4c_floats(m), b->part, s),
         "ln_f backward");
  else
    KERN(zgc_layernorm_backward,
         (b->dres, m->g[f], m->g[f + 1], b->dB, b->resid[L], b->lnf_mean, b->lnf_rstd, m->w[f], N,
          C, b->part, s),
         "ln_f backward");
  if (zgm_hook(m, GPT_HOOK_BACKWARD, L + 1, 1)) return -1;

  for (int l = L - 1; l >= 0; l--) {
    if (zgm_hook(m, GPT_HOOK_BACKWARD, l + 1, 0) ||
        zgm_need(m, zgm_lp(l, 0), GPT_PARAMS_PER_LAYER, 1, 1))
      return -1;
    const acts *a = &m->sets[m->recompute ? 0 : l];
    if (fused) {
      if (m->recompute && zgm_block_forward_fused(m, l, a, b->resid[l], NULL)) return -1;
      if (zgm_block_backward_fused(m, l, a, b->resid[l])) return -1;
    } else {
      if (m->recompute && block_forward(m, l, a, b->resid[l], NULL)) return -1;
      if (block_backward(m, l, a, b->resid[l])) return -1;
    }
    if (zgm_hook(m, GPT_HOOK_BACKWARD, l + 1, 1)) return -1;
  }
  if (zgm_need(m, 0, 2, 0, 1)) return -1;
  KERN(zgc_wpe_backward, (m->g[1], b->dres, B, T, C, s), "wpe backward");
  KERN(zgc_wte_backward, (m->g[0], b->gwte32, b->dres, b->tok_off, b->tok_pos, V, C, s),
       "wte backward");
  if (zgm_hook(m, GPT_HOOK_BACKWARD, 0, 1)) return -1;
  zgm_mark(m, -1);
  return 0;
}

extern "C" int gpt_cuda_backward(gpt_cuda *m, float loss_mult) {
  if (!m) return -1;
  m->fn = "gpt_cuda_backward";
  if (!m->have_targets) {
    seterr(m->err, sizeof m->err, "gpt_cuda_backward: no forward with targets to differentiate");
    return -1;
  }
  return backward_pass(m, loss_mult);
}

/* ------------------------------------------------------------------ */
/* sampling */

/* The first @Vb logits of row @row of the last forward, to the host as float. */
static int last_logits(gpt_cuda *m, int row, int Vb, float *out) {
  const bf16 *src = m->b.logits + (size_t)row * m->cfg.vocab;
  CU(cudaMemcpyAsync(m->h_logits, src, (size_t)Vb * sizeof(bf16), cudaMemcpyDeviceToHost,
                     m->stream),
     "copying the last logits");
  CU(cudaStreamSynchronize(m->stream), "sampling");
  for (int v = 0; v < Vb; v++) out[v] = __bfloat162float(m->h_logits[v]);
  return 0;
}

static int sample_check(void *model, const uint8_t *toks, size_t n) {
  return check_tokens((gpt_cuda *)model, toks, n, "prompt");
}

static const float *sample_forward_last(void *model, const uint8_t *toks, int T, int Vb,
                                        float *scratch) {
  gpt_cuda *m = (gpt_cuda *)model;
  float r = 0.0f;
  m->fn = "gpt_cuda_sample";
  if (forward_pass(m, toks, NULL, 1, T, 1, &r) != 0 || last_logits(m, T - 1, Vb, scratch) != 0)
    return NULL;
  return scratch;
}

extern "C" int gpt_cuda_sample(gpt_cuda *m, const uint8_t *prompt, int prompt_len, int n_new,
                               float temperature, uint64_t seed, uint8_t *out) {
  if (!m) return -1;
  m->fn = "gpt_cuda_sample";
  const gen_backend g = {
      m, "gpt_cuda_sample", "host memory",      m->err, sizeof m->err, m->cfg.seq_len, m->cfg.vocab,
      1, sample_check,      sample_forward_last};
  gpt_hook_fn saved = m->hook; /* sampling computes with the weights already set */
  m->hook = NULL;
  const int rc = gen_sample(&g, prompt, prompt_len, n_new, temperature, seed, out);
  m->hook = saved;
  if (rc != GEN_ERR_SETUP) m->have_targets = 0;
  return rc == GEN_OK ? 0 : -1;
}
