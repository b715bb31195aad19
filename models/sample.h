/*
 * sample.h - the generation loop both model backends share (gpt_sample() in
 * gpt.c, gpt_cuda_sample() in gpt_cuda.cu): the prompt (or a lone '\n'), then
 * per new byte one forward over the last seq_len tokens and sample_token() on
 * the last position's logits. Header only (C and CUDA C++); each backend
 * supplies its token check and its forward. Not a tokenizer, not batched.
 */
#ifndef ZO_TRAIN_SAMPLE_H
#define ZO_TRAIN_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "seterr.h"

typedef struct gen_backend {
  void *model;
  const char *fn;     /* names the argument and memory messages: "gpt_sample" */
  const char *memory; /* "memory" or "host memory": what ran out */
  char *err;          /* the model's error buffer */
  size_t errlen;
  int seq_len, vocab;
  int want_scratch; /* 1: forward_last gets Vb floats of scratch to write the logits into */
  /* 0, or -1 with the model's error set: every id of toks[0 .. n-1] is < vocab. */
  int (*check)(void *model, const uint8_t *toks, size_t n);
  /* The first @Vb logits of the last position of a forward over toks[0 .. T-1] (the model's own row, or
   * @scratch filled), or NULL with the model's error set. */
  const float *(*forward_last)(void *model, const uint8_t *toks, int T, int Vb, float *scratch);
} gen_backend;

/* What gen_sample() returns: which steps ran decides what the backend resets. */
enum {
  GEN_OK = 0,
  GEN_ERR_FORWARD = -1, /* a forward failed (the prompt was checked; forwards may have run) */
  GEN_ERR_PROMPT = -2,  /* the prompt holds an id >= vocab; no forward ran */
  GEN_ERR_SETUP = -3,   /* bad arguments or out of memory; nothing checked, nothing ran */
};

/*
 * gen_sample() - @n_new bytes after @prompt (@prompt_len >= 0 bytes; none:
 * a lone '\n', or 0 when vocab <= '\n') into @out: greedy when @temperature
 * <= 0 else softmax(logits / temperature) sampled with splitmix64 seeded by
 * @seed; only ids < min(vocab, 256) are emitted. Returns a GEN_* code; the
 * error is in @g->err.
 */
static inline int gen_sample(const gen_backend *g, const uint8_t *prompt, int prompt_len, int n_new,
                             float temperature, uint64_t seed, uint8_t *out) {
  if (n_new < 0 || prompt_len < 0 || (prompt_len > 0 && !prompt) || (n_new > 0 && !out)) {
    seterr(g->err, g->errlen, "%s: bad arguments (prompt_len %d, n_new %d)", g->fn, prompt_len,
           n_new);
    return GEN_ERR_SETUP;
  }
  const int S = g->seq_len, V = g->vocab;
  const int Vb = V < 256 ? V : 256; /* only byte ids can be emitted */
  const size_t cap = (size_t)(prompt_len > 0 ? prompt_len : 1) + (size_t)n_new;
  const size_t scratch_bytes = (size_t)Vb * sizeof(float) * (g->want_scratch ? 2 : 1);
  uint8_t *buf = (uint8_t *)malloc(cap);
  float *p = (float *)malloc(scratch_bytes); /* sample_token's Vb floats, then forward_last's */
  if (!buf || !p) {
    free(buf);
    free(p);
    seterr(g->err, g->errlen, "%s: out of %s (%zu bytes)", g->fn, g->memory, cap + scratch_bytes);
    return GEN_ERR_SETUP;
  }
  float *scratch = g->want_scratch ? p + Vb : NULL;
  size_t len;
  if (prompt_len > 0) {
    memcpy(buf, prompt, (size_t)prompt_len);
    len = (size_t)prompt_len;
  } else {
    buf[0] = '\n' < Vb ? '\n' : 0;
    len = 1;
  }
  int rc = g->check(g->model, buf, len) != 0 ? GEN_ERR_PROMPT : GEN_OK;
  uint64_t rng = seed;
  for (int i = 0; i < n_new && rc == GEN_OK; i++) {
    const int T = len < (size_t)S ? (int)len : S;
    const float *lg = g->forward_last(g->model, buf + len - (size_t)T, T, Vb, scratch);
    if (!lg) {
      rc = GEN_ERR_FORWARD;
      break;
    }
    const int pick = sample_token(lg, Vb, temperature, &rng, p);
    buf[len++] = (uint8_t)pick;
    out[i] = (uint8_t)pick;
  }
  free(buf);
  free(p);
  return rc;
}

#endif /* ZO_TRAIN_SAMPLE_H */
