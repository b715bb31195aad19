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

/* zo_save_opts.on_removed: each checkpoint keep_last removed, and each leftover of a killed save, on stdout */
static void on_removed(const char *path, int leftover, void *user) {
  const int keep_last = *(const int *)user;
  if (leftover)
    printf("zo-train: checkpoint: removed '%s', left by an interrupted save\n", path);
  else
    printf("zo-train: checkpoint: keep_last %d: removed '%s'\n", keep_last, path);
}

int train_ckpt_save(zo_engine_t *eng, const char *root, const train_position *pos, uint64_t seed,
                    const gpt_config *model, int keep_last, char *saved, size_t saved_len,
                    char *err, size_t errlen) {
  char rng[24], sd[24];
  snprintf(rng, sizeof rng, "%016" PRIx64, pos->rng); /* hex strings: JSON integers stop at 2^63 */
  snprintf(sd, sizeof sd, "%016" PRIx64, seed);
  json_t *app = json_pack("{s:s, s:I, s:s, s:I, s:s, s:{s:i, s:i, s:i, s:i, s:i}}", "tool",
                          "zo-train", "step", (json_int_t)pos->step, "batch_rng", rng, "skipped",
                          (json_int_t)pos->skipped, "seed", sd, "model", "n_layer", model->n_layer,
                          "n_head", model->n_head, "d_model", model->d_model, "seq_len",
                          model->seq_len, "vocab", model->vocab);
  char *text = app ? json_dumps(app, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(app);
  if (!text) {
    seterr(err, errlen, "checkpoint: out of memory");
    return -1;
  }
  zo_save_opts o = {.tag = pos->step,
                    .app_state = text,
                    .keep_last = keep_last,
                    .on_removed = on_removed,
                    .user = &keep_last};
  zo_status st = zo_engine_save(eng, root, &o, saved, saved_len);
  free(text);
  if (st != ZO_OK) {
    seterr(err, errlen, "%s", zo_last_error());
    return -1;
  }
  return 0;
}

/* 16 hex digits, as train_ckpt_save writes a 64-bit value */
static int is_hex16(const char *s) {
  size_t n = 0;
  for (; s[n]; n++)
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f') ||
          (s[n] >= 'A' && s[n] <= 'F')))
      return 0;
  return n == 16;
}

int train_ckpt_load(zo_engine_t *eng, const char *path, const gpt_config *model,
                    train_position *pos, char *err, size_t errlen) {
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
  if (!app ||
      json_unpack(app, "{s:s, s:I, s:s, s:I, s:s, s:{s:i, s:i, s:i, s:i, s:i}}", "tool", &tool,
                  "step", &step, "batch_rng", &rng, "skipped", &skipped, "seed", &sd, "model",
                  "n_layer", &L, "n_head", &H, "d_model", &C, "seq_len", &S, "vocab", &V) ||
      strcmp(tool, "zo-train")) {
    json_decref(app);
    seterr(
        err, errlen,
        "checkpoint '%s': its app_state is not zo-train's (step, batch_rng, skipped, seed, model)",
        path);
    return -1;
  }
  if (L != model->n_layer || H != model->n_head || C != model->d_model || S != model->seq_len ||
      V != model->vocab) {
    seterr(
        err, errlen,
        "checkpoint '%s': saved for model %d layers, %d heads, d_model %d, seq_len %d, vocab %d; the "
        "config says %d, %d, %d, %d, %d",
        path, L, H, C, S, V, model->n_layer, model->n_head, model->d_model, model->seq_len,
        model->vocab);
    json_decref(app);
    return -1;
  }
  /* Each field in its range and consistent with the engine's own count: a step that disagrees would resume the
   * data order and schedule at another place than the weights */
  const int64_t applied = zo_engine_steps_applied(eng);
  char esc[64];
  const char *bad = NULL;
  if (step < 0 || skipped < 0 || skipped > step)
    bad = "step, skipped: expected 0 <= skipped <= step";
  else if (step - skipped != applied)
    bad = "step - skipped: not the engine's applied step count";
  else if (!is_hex16(rng))
    bad = "batch_rng: expected 16 hex digits";
  else if (!is_hex16(sd))
    bad = "seed: expected 16 hex digits";
  if (bad) {
    seterr(
        err, errlen,
        "checkpoint '%s': manifest.json: app_state.%s (step %lld, skipped %lld, engine step %lld, batch_rng \"%s\")",
        path, bad, (long long)step, (long long)skipped, (long long)applied,
        zo_escape(esc, sizeof esc, rng, strlen(rng)));
    json_decref(app);
    return -1;
  }
  pos->step = step;
  pos->skipped = skipped;
  pos->rng = strtoull(rng, NULL, 16);
  pos->seed = strtoull(sd, NULL, 16);
  json_decref(app);
  return 0;
}
