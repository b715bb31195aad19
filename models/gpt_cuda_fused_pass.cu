/*
 * gpt_cuda_fused_pass.cu - the fused kernel set's transformer block, forward
 * and backward (gpt_cuda.h, GPT_CUDA_KERNELS_FUSED): the linear layers
 * through cuBLASLt epilogues (gpt_cuda_lt.h), LayerNorm and residuals through
 * gpt_cuda_fused.h's kernels, attention as the baseline's. Each product
 * cuBLASLt has no algorithm for runs the baseline's kernels of the same
 * meaning. Also the kernel-class timing of both sets (events at class
 * changes).
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpt_cuda_fused.h"
#include "gpt_cuda_model.h"
#include "seterr.h"

/* ------------------------------------------------------------------ */
/* kernel-class timing */

void zgm_mark(gpt_cuda *m, int cls) {
  if (!m->timing) return;
  if (cls >= 0 && m->in_attn) cls = GPT_CUDA_TIME_ATTENTION;
  if (cls == m->cur_cls && m->n_ev > 0) return;
  if (m->n_ev == ZGM_TIME_EVENTS && zgm_timing_collect(m) != 0) return;
  const cudaError_t e = cudaEventRecord(m->ev[m->n_ev], m->stream);
  if (e != cudaSuccess) {
    if (m->time_err == cudaSuccess) m->time_err = e;
    return;
  }
  m->ev_cls[m->n_ev++] = cls;
  m->cur_cls = cls;
}

int zgm_timing_collect(gpt_cuda *m) {
  if (m->time_err != cudaSuccess) {
    const cudaError_t e = m->time_err;
    m->time_err = cudaSuccess;
    return zgm_fail_cuda(m, e, "cudaEventRecord", "kernel-class timing");
  }
  if (m->n_ev < 2) return 0;
  const int last = m->n_ev - 1;
  cudaError_t e = cudaEventSynchronize(m->ev[last]);
  if (e != cudaSuccess) return zgm_fail_cuda(m, e, "cudaEventSynchronize", "kernel-class timing");
  for (int i = 0; i < last; i++) {
    if (m->ev_cls[i] < 0) continue;
    float ms = 0.0f;
    e = cudaEventElapsedTime(&ms, m->ev[i], m->ev[i + 1]);
    if (e != cudaSuccess) return zgm_fail_cuda(m, e, "cudaEventElapsedTime", "kernel-class timing");
    m->time_ms[m->ev_cls[i]] += ms;
  }
  /* the last event starts the next span */
  cudaEvent_t t = m->ev[0];
  m->ev[0] = m->ev[last];
  m->ev[last] = t;
  m->ev_cls[0] = m->ev_cls[last];
  m->n_ev = 1;
  return 0;
}

int zgm_timing_enable(gpt_cuda *m, int on) {
  if (on && m->timing) return 0;
  if (!on) {
    if (m->ev) {
      (void)cudaStreamSynchronize(m->stream); /* no recorded event may be pending */
      for (int i = 0; i < ZGM_TIME_EVENTS; i++)
        if (m->ev[i]) (void)cudaEventDestroy(m->ev[i]);
    }
    free(m->ev);
    free(m->ev_cls);
    m->ev = NULL, m->ev_cls = NULL;
    m->timing = 0, m->n_ev = 0;
    return 0;
  }
  m->ev = (cudaEvent_t *)calloc(ZGM_TIME_EVENTS, sizeof *m->ev);
  m->ev_cls = (int *)calloc(ZGM_TIME_EVENTS, sizeof *m->ev_cls);
  if (!m->ev || !m->ev_cls) {
    free(m->ev);
    free(m->ev_cls);
    m->ev = NULL, m->ev_cls = NULL;
    seterr(m->err, sizeof m->err, "%s: out of host memory (timing events)", m->fn);
    return -1;
  }
  for (int i = 0; i < ZGM_TIME_EVENTS; i++) {
    const cudaError_t e = cudaEventCreate(&m->ev[i]);
    if (e != cudaSuccess) {
      m->ev[i] = NULL;
      m->timing = 1; /* so that the call below frees what was made */
      (void)zgm_timing_enable(m, 0);
      return zgm_fail_cuda(m, e, "cudaEventCreate", "kernel-class timing events");
    }
  }
  m->timing = 1, m->n_ev = 0, m->cur_cls = -1, m->time_err = cudaSuccess;
  m->time_ms[0] = m->time_ms[1] = m->time_ms[2] = 0.0;
  return 0;
}

/* ------------------------------------------------------------------ */
/* cuBLASLt products, each with the baseline's kernels as the fallback */

/* One cuBLASLt product: 0 queued, 1 no algorithm (nothing queued; also under
 * ZO_GPT_CUDA_GEMM=reference), -1 error. */
static int lt(gpt_cuda *m, const char *what, const zgc_lt_problem *p, const void *A, const void *B,
              void *D, const void *bias, void *aux, void *bias_grad, int *grad_f32) {
  if (m->gemm_reference || !m->lt) return 1;
  zgm_mark(m, GPT_CUDA_TIME_GEMM);
  char e[256];
  const int rc =
      zgc_lt_matmul(m->lt, m->stream, p, A, B, D, bias, aux, bias_grad, grad_f32, e, sizeof e);
  if (rc == ZGC_LT_ERROR) {
    seterr(m->err, sizeof m->err, "%s: %s: %s", m->fn, what, e);
    return -1;
  }
  return rc == ZGC_LT_OK ? 0 : 1;
}

/* out (N,OC) = inp (N,IC) W^T + bias: the BIAS epilogue (bias on the fp32 sum, one rounding). */
static int linear_bias(gpt_cuda *m, const char *what, bf16 *out, const bf16 *inp, const bf16 *W,
                       const bf16 *bias, int N, int IC, int OC) {
  const zgc_lt_problem p = {1, 0, OC, N, IC, IC, IC, OC, 0, ZGC_EPI_BIAS, 0, 1.0f, 0.0f};
  const int rc = lt(m, what, &p, W, inp, out, bias, NULL, NULL, NULL);
  if (rc <= 0) return rc;
  KERN(zgc_bias_broadcast, (out, bias, N, OC, m->stream), what);
  return zgm_linear_forward(m, what, out, inp, W, N, IC, OC, 1.0f);
}

/* pre (N,OC) = inp W^T + bias, out = gelu(pre): the GELU_AUX_BIAS epilogue (pre is its aux
 * output). */
static int linear_gelu(gpt_cuda *m, const char *what, bf16 *out, bf16 *pre, const bf16 *inp,
                       const bf16 *W, const bf16 *bias, int N, int IC, int OC) {
  const zgc_lt_problem p = {1, 0, OC, N, IC, IC, IC, OC, 0, ZGC_EPI_GELU_AUX_BIAS, OC, 1.0f, 0.0f};
  const int rc = lt(m, what, &p, W, inp, out, bias, pre, NULL, NULL);
  if (rc <= 0) return rc;
  if (linear_bias(m, what, pre, inp, W, bias, N, IC, OC)) return -1;
  KERN(zgc_gelu_forward, (out, pre, (size_t)N * OC, m->stream), what);
  return 0;
}

/*
 * dinp (N,IC) = (dout W) * gelu'(pre), pre (N,IC) the GELU's input, and
 * gbias (IC) += column sums of dinp (the bias gradient of the product whose
 * output pre is): the DGELU_BGRAD epilogue. Scratch: m->b.part.
 */
static int linear_dinp_dgelu(gpt_cuda *m, const char *what, bf16 *dinp, const bf16 *dout,
                             const bf16 *W, const bf16 *pre, bf16 *gbias, int N, int IC, int OC) {
  const zgc_lt_problem p = {0, 0, IC, N, OC, IC, OC, IC, 0, ZGC_EPI_DGELU_BGRAD, IC, 1.0f, 0.0f};
  int gf32 = 0;
  const int rc = lt(m, what, &p, W, dout, dinp, NULL, (void *)pre, m->b.part, &gf32);
  if (rc < 0) return -1;
  if (rc == 0) {
    KERN(zgf_bias_grad_add, (gbias, m->b.part, gf32, IC, m->stream), what);
    return 0;
  }
  if (zgm_linear_dinp(m, what, dinp, dout, W, N, IC, OC)) return -1;
  KERN(zgc_gelu_backward, (dinp, pre, (size_t)N * IC, m->stream), what);
  KERN(zgc_colsum_add, (gbias, dinp, N, IC, m->b.part, m->stream), what);
  return 0;
}

/*
 * dW (OC,IC) += dout^T inp (beta 1 on the caller's bf16 gradient) and, with
 * @gbias, gbias (OC) += column sums of dout: the BGRADB epilogue. Scratch:
 * m->b.part.
 */
static int linear_dweight(gpt_cuda *m, const char *what, bf16 *dW, bf16 *gbias, const bf16 *dout,
                          const bf16 *inp, int N, int IC, int OC) {
  if (gbias) {
    const zgc_lt_problem p = {0, 1, IC, OC, N, IC, OC, IC, 0, ZGC_EPI_BGRADB, 0, 1.0f, 1.0f};
    int gf32 = 0;
    const int rc = lt(m, what, &p, inp, dout, dW, NULL, NULL, m->b.part, &gf32);
    if (rc < 0) return -1;
    if (rc == 0) {
      KERN(zgf_bias_grad_add, (gbias, m->b.part, gf32, OC, m->stream), what);
      return 0;
    }
  }
  if (zgm_linear_dweight(m, what, dW, dout, inp, N, IC, OC)) return -1;
  if (gbias) KERN(zgc_colsum_add, (gbias, dout, N, OC, m->b.part, m->stream), what);
  return 0;
}

/* ------------------------------------------------------------------ */
/* cuDNN attention */

/*
 * 1 when cuDNN runs attention of the current shape (the forward and backward
 * decide alike: the answer is cached per shape), 0 for the baseline's, -1 on
 * a failure (message). Its stats (B, NH, T) fp32 live in the activation set's
 * scores buffer, which needs T >= 2 to hold them; q, k and v are read at
 * offsets of C elements in each qkv row, 16-byte aligned when hs % 8 == 0.
 */
static int cudnn_attention(gpt_cuda *m) {
  const int NH = m->cfg.n_head, hs = m->cfg.d_model / NH;
  if (!m->attn || m->gemm_reference) return 0;
  if (m->T < 2 || hs % 8) { /* stats need T >= 2; k, v at 16-byte offsets in the qkv rows */
    snprintf(
        m->attn_note, sizeof m->attn_note,
        "baseline attention for T %d, head size %d (cuDNN's needs T >= 2, head size a multiple "
        "of 8)",
        m->T, hs);
    return 0;
  }
  char e[320];
  const int rc =
      zga_ready(m->attn, m->B, m->T, NH, hs, m->b.cublas_ws, CUBLAS_WS_BYTES, e, sizeof e);
  if (rc < 0) {
    seterr(m->err, sizeof m->err, "%s: %s", m->fn, e);
    return -1;
  }
  if (rc == 0)
    snprintf(m->attn_note, sizeof m->attn_note, "%s", e);
  else
    m->attn_note[0] = 0;
  return rc;
}

/* ------------------------------------------------------------------ */
/* the block */

/* The baseline's attention of the fused block forward: the q|k|v product into dqkv, then gpt_cuda.cu's
 * attention (atty out) through d4c. */
static int attention_forward_baseline(gpt_cuda *m, int l, const acts *a) {
  const int C = m->cfg.d_model, N = m->B * m->T;
  const bf16 *const *w = m->w;
  char what[96];
  snprintf(what, sizeof what, "block %d attn.c_attn", l);
  if (linear_bias(m, what, m->b.dqkv, a->ln1, w[zgm_lp(l, GPT_P_QKV_W)], w[zgm_lp(l, GPT_P_QKV_B)],
                  N, C, 3 * C))
    return -1;
  return zgm_attention_forward(m, l, a, m->b.d4c);
}

/*
 * As block_forward() in gpt_cuda.cu. With cuDNN's attention the q|k|v rows
 * go to a->qkvr as the product leaves them and the softmax statistics to
 * a->att; else as the baseline's. Scratch: dqkv (q,k,v rows), d4c (the
 * attention output by head), dB (projections' outputs); never dA, which
 * holds the bf16 residual gradient when this runs as backward's recompute.
 */
int zgm_block_forward_fused(gpt_cuda *m, int l, const acts *a, const bf16 *res_in, bf16 *res_out) {
  const int B = m->B, T = m->T, C = m->cfg.d_model, NH = m->cfg.n_head, hs = C / NH, N = B * T;
  const size_t NC = (size_t)N * C;
  const bf16 *const *w = m->w;
  const bufs *b = &m->b;
  cudaStream_t s = m->stream;
  char what[96];
#define WHAT(x) (snprintf(what, sizeof what, "block %d %s", l, (x)), what)
  KERN(zgf_layernorm_forward,
       (a->ln1, a->ln1_mean, a->ln1_rstd, res_in, w[zgm_lp(l, GPT_P_LN1_W)],
        w[zgm_lp(l, GPT_P_LN1_B)], N, C, s),
       WHAT("ln_1"));
  const int cudnn = cudnn_attention(m);
  if (cudnn < 0) return -1;
  if (cudnn) { /* q, k, v read in place by cuDNN: the product's rows are kept for backward */
    if (linear_bias(m, WHAT("attn.c_attn"), a->qkvr, a->ln1, w[zgm_lp(l, GPT_P_QKV_W)],
                    w[zgm_lp(l, GPT_P_QKV_B)], N, C, 3 * C))
      return -1;
    zgm_mark(m, GPT_CUDA_TIME_ATTENTION); /* cuDNN's kernels, timed as one class */
    char e[320];
    if (zga_forward(m->attn, s, a->atty, (float *)a->att, a->qkvr, B, T, NH, hs, e, sizeof e)) {
      seterr(m->err, sizeof m->err, "%s: %s: %s", m->fn, WHAT("attention"), e);
      return -1;
    }
  } else if (attention_forward_baseline(m, l, a)) {
    return -1;
  }
  if (linear_bias(m, WHAT("attn.c_proj"), b->dB, a->atty, w[zgm_lp(l, GPT_P_ATTPROJ_W)],
                  w[zgm_lp(l, GPT_P_ATTPROJ_B)], N, C, C))
    return -1;
  KERN(zgf_residual_layernorm,
       (a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, res_in, b->dB, w[zgm_lp(l, GPT_P_LN2_W)],
        w[zgm_lp(l, GPT_P_LN2_B)], N, C, s),
       WHAT("residual 2 + ln_2"));
  if (linear_gelu(m, WHAT("mlp.c_fc + gelu"), a->fcg, a->fch, a->ln2, w[zgm_lp(l, GPT_P_FC_W)],
                  w[zgm_lp(l, GPT_P_FC_B)], N, C, 4 * C))
    return -1;
  if (res_out) {
    if (linear_bias(m, WHAT("mlp.c_proj"), b->dB, a->fcg, w[zgm_lp(l, GPT_P_FCPROJ_W)],
                    w[zgm_lp(l, GPT_P_FCPROJ_B)], N, 4 * C, C))
      return -1;
    KERN(zgf_residual, (res_out, a->res2, b->dB, NC, s), WHAT("residual 3"));
  }
#undef WHAT
  return 0;
}


/*
 * As block_backward() in gpt_cuda.cu, with dA holding bf16(dres) on entry
 * and, on return, bf16 of the updated dres (the next block's operand).
 */
int zgm_block_backward_fused(gpt_cuda *m, int l, const acts *a, const bf16 *res_in) {
  const int B = m->B, T = m->T, C = m->cfg.d_model, NH = m->cfg.n_head, hs = C / NH, N = B * T;
  const bf16 *const *w = m->w;
  bf16 *const *g = m->g;
  const bufs *b = &m->b;
  cudaStream_t s = m->stream;
  char what[96];
#define WHAT(x) (snprintf(what, sizeof what, "block %d %s backward", l, (x)), what)
  /* block output = res2 + gelu(fch) Wfp^T + bfp; fch = ln2 Wfc^T + bfc */
  if (linear_dweight(m, WHAT("mlp.c_proj weight"), g[zgm_lp(l, GPT_P_FCPROJ_W)],
                     g[zgm_lp(l, GPT_P_FCPROJ_B)], b->dA, a->fcg, N, 4 * C, C))
    return -1;
  if (linear_dinp_dgelu(m, WHAT("mlp.c_proj input + gelu"), b->d4c, b->dA,
                        w[zgm_lp(l, GPT_P_FCPROJ_W)], a->fch, g[zgm_lp(l, GPT_P_FC_B)], N, 4 * C,
                        C))
    return -1;
  if (linear_dweight(m, WHAT("mlp.c_fc weight"), g[zgm_lp(l, GPT_P_FC_W)], NULL, b->d4c, a->ln2, N,
                     C, 4 * C))
    return -1;
  if (zgm_linear_dinp(m, WHAT("mlp.c_fc input"), b->dB, b->d4c, w[zgm_lp(l, GPT_P_FC_W)], N, C,
                      4 * C))
    return -1;
  KERN(zgf_layernorm_backward,
       (b->dres, b->dA, g[zgm_lp(l, GPT_P_LN2_W)], g[zgm_lp(l, GPT_P_LN2_B)], b->dB, a->res2,
        a->ln2_mean, a->ln2_rstd, w[zgm_lp(l, GPT_P_LN2_W)], N, C, (float *)b->d4c,
        zgm_d4c_floats(m), b->part, s),
       WHAT("ln_2"));
  /* res2 = res_in + atty Wp^T + bp */
  if (linear_dweight(m, WHAT("attn.c_proj weight"), g[zgm_lp(l, GPT_P_ATTPROJ_W)],
                     g[zgm_lp(l, GPT_P_ATTPROJ_B)], b->dA, a->atty, N, C, C))
    return -1;
  if (zgm_linear_dinp(m, WHAT("attn.c_proj input"), b->dB, b->dA, w[zgm_lp(l, GPT_P_ATTPROJ_W)], N,
                      C, C))
    return -1;
  const int cudnn = cudnn_attention(m); /* the forward's answer: cached per shape */
  if (cudnn < 0) return -1;
  if (cudnn) { /* dq|dk|dv rows into dqkv from dy (dB), the kept q|k|v rows, output and stats */
    zgm_mark(m, GPT_CUDA_TIME_ATTENTION); /* cuDNN's kernels, timed as one class */
    char e[320];
    if (zga_backward(m->attn, s, b->dqkv, b->dB, a->qkvr, a->atty, (const float *)a->att, B, T, NH,
                     hs, e, sizeof e)) {
      seterr(m->err, sizeof m->err, "%s: %s: %s", m->fn, WHAT("attention"), e);
      return -1;
    }
  } else if (zgm_attention_backward(m, l, a)) {
    return -1;
  }
  /* qkv = ln1 Wqkv^T + bqkv */
  if (linear_dweight(m, WHAT("attn.c_attn weight"), g[zgm_lp(l, GPT_P_QKV_W)],
                     g[zgm_lp(l, GPT_P_QKV_B)], b->dqkv, a->ln1, N, C, 3 * C))
    return -1;
  if (zgm_linear_dinp(m, WHAT("attn.c_attn input"), b->dB, b->dqkv, w[zgm_lp(l, GPT_P_QKV_W)], N, C,
                      3 * C))
    return -1;
  KERN(zgf_layernorm_backward,
       (b->dres, b->dA, g[zgm_lp(l, GPT_P_LN1_W)], g[zgm_lp(l, GPT_P_LN1_B)], b->dB, res_in,
        a->ln1_mean, a->ln1_rstd, w[zgm_lp(l, GPT_P_LN1_W)], N, C, (float *)b->d4c,
        zgm_d4c_floats(m), b->part, s),
       WHAT("ln_1"));
#undef WHAT
  return 0;
}
