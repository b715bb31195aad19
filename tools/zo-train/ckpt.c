/*
 * ckpt.c - zo-train's app_state in checkpoints (JSON via jansson): the
 * training position saved beside the engine's state and read back on resume.
 */
#include "ckpt.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seterr.h"
#include "zoffload/checkpoint.h"

int train_ckpt_save(zo_engine_t *eng, const char *root, const train_position *pos, uint64_t seed,
                    const gpt_config *model, int keep_last, char *saved, size_t saved_len, char *err, size_t errlen) {
  char rng[24], sd[24];
  snprintf(rng, sizeof rng, "%016" PRIx64, pos->rng); /* hex strings: JSON integers stop at 2^63 */
  snprintf(sd, sizeof sd, "%016" PRIx64, seed);
  json_t *app = json_pack("{s:s, s:I, s:s, s:I, s:s, s:{s:i, s:i, s:i, s:i, s:i}}", "tool", "zo-train", "step",
                          (json_int_t)pos->step, "batch_rng", rng, "skipped", (json_int_t)pos->skipped, "seed", sd,
                          "model", "n_layer", model->n_layer, "n_head", model->n_head, "d_model", model->d_model,
                          "seq_len", model->seq_len, "vocab", model->vocab);
  char *text = app ? json_dumps(app, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(app);
  if (!text) {
    seterr(err, errlen, "checkpoint: out of memory");
    return -1;
  }
  zo_save_opts o = {.tag = pos->step, .app_state = text, .keep_last = keep_last};
  zo_status st = zo_engine_save(eng, root, &o, saved, saved_len);
  free(text);
  if (st != ZO_OK) {
    seterr(err, errlen, "%s", zo_last_error());
    return -1;
  }
  return 0;
}

int train_ckpt_load(zo_engine_t *eng, const char *path, const gpt_config *model, train_position *pos, char *err,
                    size_t errlen) {
  char *text = NULL;
  if (zo_engine_load(eng, path, &text) != ZO_OK) {
    seterr(err, errlen, "%s", zo_last_error());
    return -1;
  }
  json_error_t je;
  json_t *app = text ? json_loads(text, 0, &je) : NULL;
  free(text);
  const char *tool = NULL, *rng = NULL, *sd = NULL;
  json_int_t step = -1, skipped = 0;
  int L = 0, H = 0, C = 0, S = 0, V = 0;
  if (!app || json_unpack(app, "{s:s, s:I, s:s, s:I, s:s, s:{s:i, s:i, s:i, s:i, s:i}}", "tool", &tool, "step", &step,
                          "batch_rng", &rng, "skipped", &skipped, "seed", &sd, "model", "n_layer", &L, "n_head", &H,
                          "d_model", &C, "seq_len", &S, "vocab", &V) ||
      strcmp(tool, "zo-train") || step < 0) {
    json_decref(app);
    seterr(err, errlen, "checkpoint '%s': its app_state is not zo-train's (step, batch_rng, skipped, seed, model)", path);
    return -1;
  }
  if (L != model->n_layer || H != model->n_head || C != model->d_model || S != model->seq_len || V != model->vocab) {
    seterr(err, errlen, "checkpoint '%s': saved for model %d layers, %d heads, d_model %d, seq_len %d, vocab %d; the "
           "config says %d, %d, %d, %d, %d", path, L, H, C, S, V, model->n_layer, model->n_head, model->d_model,
           model->seq_len, model->vocab);
    json_decref(app);
    return -1;
  }
  pos->step = step;
  pos->skipped = skipped;
  pos->rng = strtoull(rng, NULL, 16);
  json_decref(app);
  return 0;
}
