/*
 * gpt_internal.h - the inside of a gpt_model, shared by gpt.c (the passes)
 * and gpt_alloc.c (parameter registry, buffer layout, create/destroy and the
 * streamed mode's bindings). Not part of the model's API (gpt.h).
 */
#ifndef ZO_TRAIN_GPT_INTERNAL_H
#define ZO_TRAIN_GPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

#define GPT_ALIGN_FLOATS 16 /* 64 bytes */

struct gpt_model {
  gpt_config cfg;
  int max_batch;
  int recompute; /* activation checkpointing: per-block buffers hold one block */
  int n_params;
  gpt_param_spec *specs; /* [n_params] */
  size_t *offsets;       /* [n_params], in floats, into params_mem and grads_mem (resident mode) */
  size_t n_floats;       /* length of params_mem / grads_mem including padding */
  float *params_mem; /* every weight tensor, each 64-byte aligned (resident mode; NULL streamed) */
  float *grads_mem;  /* the same layout for gradients (resident mode; NULL streamed) */
  float *gscratch;   /* the same layout: one backward's gradient before it is added to grads_mem */
  gpt_hook_fn hook;  /* layer-group hook (NULL: none) */
  void *hook_user;

  /* Activations, sized for max_batch x seq_len; a forward with (B,T) uses the
   * first B*T rows of each, laid out as (B,T,...). Shapes with N = B*T; the
   * per-block ones marked (L, ...) hold one block (slot 0) when recompute is
   * on, and the block's forward is run again in backward (see block_forward). */
  float *encoded;   /* (N, C)        wte[tok] + wpe[t] */
  float *ln1;       /* (L, N, C)     LayerNorm 1 output */
  float *ln1_mean;  /* (L, N) */
  float *ln1_rstd;  /* (L, N) */
  float *qkv;       /* (L, N, 3C)    q | k | v, heads inside each part */
  float *att;       /* (L, B, NH, T, T) softmax of causal scores, 0 above the diagonal */
  float *atty;      /* (L, N, C)     attention output before c_proj */
  float *residual2; /* (L, N, C)     residual + attention branch */
  float *ln2;       /* (L, N, C) */
  float *ln2_mean;  /* (L, N) */
  float *ln2_rstd;  /* (L, N) */
  float *fch;       /* (L, N, 4C)    c_fc output (GELU input) */
  float *fch_gelu;  /* (L, N, 4C)    GELU output */
  float *residual3; /* (L, N, C)     block output */
  float *lnf;       /* (N, C)        final LayerNorm output */
  float *lnf_mean;  /* (N) */
  float *lnf_rstd;  /* (N) */
  float *logits;    /* (N, V) */
  float *probs;     /* (N, V)        softmax(logits), kept for backward */
  float *losses;    /* (N)           per-position cross-entropy */

  /* Backward scratch. */
  float *dres;    /* (N, C)  gradient of the residual stream */
  float *dbuf_c;  /* (N, C)  dLN outputs, d atty */
  float *dbuf_3c; /* (N, 3C) d qkv */
  float *dbuf_4c; /* (N, 4C) d fch_gelu, then d fch in place */
  float *dlogits; /* (N, V) */
  float *datt;    /* (B, NH, T, T) d att, then d scores in place */

  uint8_t *inputs;  /* (N) of the last forward */
  uint8_t *targets; /* (N) of the last forward */
  int B, T;         /* of the last forward */
  int have_targets; /* the last forward kept what backward needs */

  double t_fwd, t_bwd;
  /* Streamed mode (gpt_create_streamed): bind[i] is parameter i's bound
   * weight (const float *), bind[n_params + i] its bound gradient; NULL when
   * unbound. NULL in resident mode. */
  void **bind;
  size_t allocated; /* bytes allocated by create, counted by gpt_alloc.c's helper */
  /* gpt_set_gemm_bf16(): the four products of each block in bf16 (gemm_bf16.h); the bound weights of those
   * tensors are bf16 (bind[i] a const uint16_t *), act16 and dout16 the activations rounded to bf16
   * (max_batch x seq_len x 4C each); gemm_failed: a product failed in this pass (message in err) */
  int gemm_bf16, gemm_failed;
  uint16_t *act16, *dout16;
  /* 59, not 64: the fields above keep sizeof(gpt_model), which
   * gpt_host_bytes() counts, at its size before streamed mode */
  void *allocs[59];
  int n_allocs;
  int streamed; /* 1: weights and gradients come through gpt_bind_weight/grad */
  char err[256];
};

/* Index of parameter k (GPT_P_*) of block l. */
static inline int LP(int l, int k) { return 2 + GPT_PARAMS_PER_LAYER * l + k; }

#endif /* ZO_TRAIN_GPT_INTERNAL_H */
