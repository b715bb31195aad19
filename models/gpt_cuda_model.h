/*
 * gpt_cuda_model.h - the insides of a gpt_cuda (gpt_cuda.h) shared by
 * gpt_cuda.cu (memory plan, create, the baseline passes, the public calls)
 * and gpt_cuda_fused_pass.cu (the fused kernel set's block passes and the
 * kernel-class timing). CUDA C++, internal; not part of the C API.
 */
#ifndef ZO_TRAIN_GPT_CUDA_MODEL_H
#define ZO_TRAIN_GPT_CUDA_MODEL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gpt_cuda.h"
#include "gpt_cuda_internal.h"
#include "gpt_cuda_attn.h"
#include "gpt_cuda_lt.h"

typedef zgc_bf16 bf16;

#define ALIGN_BYTES 256
#define ZGM_TIME_EVENTS 4096               /* kernel-class timing: events in the pool */
#define CUBLAS_WS_BYTES ((size_t)32 << 20) /* cuBLAS' recommended workspace on Hopper */

/* One transformer block's saved activations; N = B*T rows of the current forward. */
typedef struct acts {
  bf16 *ln1;       /* (N, C)  LayerNorm 1 output */
  float *ln1_mean; /* (N) */
  float *ln1_rstd; /* (N) */
  bf16 *qkvr;      /* (3, B, NH, T, hs)  q | k | v by head */
  bf16 *att;       /* (B, NH, T, T)  causal softmax, 0 above the diagonal (scores in place first) */
  bf16 *atty;      /* (N, C)  attention output before c_proj */
  bf16 *res2;      /* (N, C)  residual + attention branch */
  bf16 *ln2;       /* (N, C) */
  float *ln2_mean; /* (N) */
  float *ln2_rstd; /* (N) */
  bf16 *fch;       /* (N, 4C)  c_fc output (GELU input) */
  bf16 *fcg;       /* (N, 4C)  GELU output */
} acts;

/* Everything else carved from the one allocation. */
typedef struct bufs {
  bf16 **resid; /* [L+1] of (N, C): resid[l] = input of block l, resid[L] = last block's output */
  bf16 *lnf;    /* (N, C) */
  float *lnf_mean;  /* (N) */
  float *lnf_rstd;  /* (N) */
  bf16 *logits;     /* (N, V); dlogits in place during backward */
  float *lse;       /* (N)  logsumexp of each row */
  float *losses;    /* (N) */
  float *loss;      /* (1)  mean loss */
  uint8_t *inputs;  /* (N) */
  uint8_t *targets; /* (N) */
  int *tok_pos;     /* (N)  positions sorted by token id (stable) */
  int *tok_off;     /* (257) start of each token id's positions in tok_pos */
  float *dres;      /* (N, C)  fp32 gradient of the residual stream */
  bf16 *dA;         /* (N, C)  bf16 copy of dres; attention output by head; forward scratch */
  bf16 *dB;         /* (N, C)  d LN outputs, d atty; forward c_proj scratch */
  bf16 *dqkv;       /* (N, 3C) d qkv; forward qkv scratch */
  bf16 *d4c;        /* (N, 4C) d fch; d q|k|v by head */
  bf16 *datt;       /* (B, NH, T, T) */
  float *gwte32;    /* (V, C)  this backward's wte gradient before its one rounding */
  float *part;      /* (ZGC_MAX_CHUNKS, 4C) column-sum partials */
  void *cublas_ws;  /* CUBLAS_WS_BYTES */
} bufs;

struct gpt_cuda {
  gpt_config cfg;
  int max_batch, recompute, n_params, n_sets;
  gpt_param_spec *specs; /* [n_params] */
  const bf16 **w;        /* [n_params] caller's weights */
  bf16 **g;              /* [n_params] caller's gradients */
  cudaStream_t stream;
  int own_stream;
  cublasHandle_t blas;
  int gemm_reference; /* ZO_GPT_CUDA_GEMM=reference: every GEMM by zgc_gemm_reference(), none by cuBLAS */
  cudaEvent_t staged; /* recorded after the host-to-device copies of the pinned staging buffers */
  void *mem;          /* the one device allocation */
  size_t mem_bytes;
  bufs b;
  acts *sets;     /* [n_sets] */
  bf16 **resid_v; /* storage of b.resid */
  void *pinned;   /* host staging */
  uint8_t *h_inputs, *h_targets;
  int *h_tok_off, *h_tok_pos;
  float *h_loss;
  bf16 *h_logits; /* (256) last row's first logits for sampling */
  gpt_hook_fn hook;
  void *hook_user;
  gpt_cuda_kernels kernels; /* gpt_cuda_set_kernels(); BASELINE after create */
  zgc_lt *lt;               /* cuBLASLt plans of the fused set (made by gpt_cuda_set_kernels) */
  zga *attn;                /* the fused set's cuDNN attention; NULL: the baseline's attention */
  int attn_tried;           /* zga_create() was tried (once) */
  char attn_note[320]; /* why attention is the baseline's (zga_create's or zga_ready's message) */
  cudaEvent_t loss_ev; /* recorded after the loss's copy to h_loss */
  int loss_queued;     /* a forward with targets queued its loss copy since create */
  /* kernel-class timing (gpt_cuda_set_kernel_times) */
  int timing, in_attn, cur_cls, n_ev;
  cudaEvent_t *ev;      /* [ZGM_TIME_EVENTS] */
  int *ev_cls;          /* class of the span each event starts; -1: not counted */
  double time_ms[3];    /* added up since the last gpt_cuda_kernel_times() */
  cudaError_t time_err; /* the first failure of an event call while timing */
  int B, T, have_targets;
  const char *fn; /* the public call running, for messages */
  char err[512];
  char dev_name[300];
};

/* Check a CUDA call (or a zgc_ launcher, which returns cudaGetLastError()); on failure return -1
 * from the caller. */
#define CU(call, desc)                                                 \
  do {                                                                 \
    cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) return zgm_fail_cuda(m, e_, #call, (desc)); \
  } while (0)
/* A kernel launcher: the message names the kernel rather than the argument list. */
#define KERN(name, args, desc)                                                   \
  do {                                                                           \
    zgm_mark(m, GPT_CUDA_TIME_OTHER);                                            \
    cudaError_t e_ = name args;                                                  \
    if (e_ != cudaSuccess) return zgm_fail_cuda(m, e_, "kernel " #name, (desc)); \
  } while (0)

/* Message "<call>: <what>: <call text> failed: <name> (<string>)" into m->err; return -1. */
int zgm_fail_cuda(gpt_cuda *m, cudaError_t e, const char *call, const char *what);
int zgm_fail_blas(gpt_cuda *m, cublasStatus_t st, const char *call, const char *what);

/* fp32 capacity of m->b.d4c ((Nm, 4C) bf16), the fused LayerNorm backward's chunk partials when it is free. */
static inline size_t zgm_d4c_floats(const gpt_cuda *m) {
  return (size_t)2 * m->max_batch * m->cfg.seq_len * m->cfg.d_model;
}

/* Index of parameter @k of layer @l in gpt_param_specs() order. */
static inline int zgm_lp(int l, int k) { return 2 + GPT_PARAMS_PER_LAYER * l + k; }

/* Call the hook (a timing mark first: hook work is not counted); non-zero aborts the pass with a
 * message. */
int zgm_hook(gpt_cuda *m, int phase, int group, int end);

/* Parameters first..first+count-1 must have weights (@want_w) and gradients (@want_g) set; -1 with
 * a message. */
int zgm_need(gpt_cuda *m, int first, int count, int want_w, int want_g);

/*
 * Column-major cuBLAS GEMM on row-major tensors, bf16 A and B, fp32 compute:
 * C = alpha op(A) op(B) + beta C, C of type @ctype (bf16 or fp32); strided
 * batched when @batch > 1; a timing mark of class GEMM (attention inside an
 * attention span). @what names the tensor for the error message.
 */
int zgm_gemm(gpt_cuda *m, const char *what, cublasOperation_t ta, cublasOperation_t tb, int M,
             int Nn, int K, float alpha, const void *A, int lda, long long sA, const void *B,
             int ldb, long long sB, float beta, void *Cp, cudaDataType_t ctype, int ldc,
             long long sC, int batch);

/*
 * The baseline's causal attention of block @l (both kernel sets run it where cuDNN's is not used): q|k|v rows in
 * m->b.dqkv to a->qkvr by head, a->att the (B, NH, T, T) probabilities, the output rows into a->atty through
 * @scratch ((B, NH, T, hs) bf16). Its backward: dy rows in m->b.dB to dq|dk|dv rows in m->b.dqkv, through dA,
 * d4c and datt. 0, or -1 with the error set.
 */
int zgm_attention_forward(gpt_cuda *m, int l, const acts *a, zgc_bf16 *scratch);
int zgm_attention_backward(gpt_cuda *m, int l, const acts *a);

/* out (N,OC) = inp (N,IC) W^T, W (OC,IC); beta 1 adds to what out holds. */
int zgm_linear_forward(gpt_cuda *m, const char *what, zgc_bf16 *out, const zgc_bf16 *inp,
                       const zgc_bf16 *W, int N, int IC, int OC, float beta);
/* Its backward's two products (plain GEMMs, both kernel sets): dinp (N,IC) = dout (N,OC) W
 * (overwritten); dW (OC,IC) += dout^T inp (beta 1 on the caller's bf16 gradient: fp32
 * accumulation, one rounding). 0, or -1 with the error set. */
int zgm_linear_dinp(gpt_cuda *m, const char *what, zgc_bf16 *dinp, const zgc_bf16 *dout,
                    const zgc_bf16 *W, int N, int IC, int OC);
int zgm_linear_dweight(gpt_cuda *m, const char *what, zgc_bf16 *dW, const zgc_bf16 *dout,
                       const zgc_bf16 *inp, int N, int IC, int OC);

/*
 * zgm_mark() - while timing, record an event when the kernel class changes:
 * @cls one of GPT_CUDA_TIME_* (attention while m->in_attn), or -1 for work
 * not counted (hooks, copies). No-op when not timing. A failure is kept in
 * m->time_err for gpt_cuda_kernel_times().
 */
void zgm_mark(gpt_cuda *m, int cls);

/* The fused set's block passes: the meaning of gpt_cuda.cu's block_forward() and block_backward().
 * The fused
 * backward expects m->b.dA to hold the bf16 copy of dres on entry (the fused LayerNorm backwards
 * write it). */
int zgm_block_forward_fused(gpt_cuda *m, int l, const acts *a, const zgc_bf16 *res_in,
                            zgc_bf16 *res_out);
int zgm_block_backward_fused(gpt_cuda *m, int l, const acts *a, const zgc_bf16 *res_in);

/* Timing pool: create (on) or free (off) the events; add up the recorded spans. 0, or -1 with a
 * message. */
int zgm_timing_enable(gpt_cuda *m, int on);
int zgm_timing_collect(gpt_cuda *m);

#endif /* ZO_TRAIN_GPT_CUDA_MODEL_H */
