/*
 * ckpt.h - zo-train's side of checkpoints: what the training loop adds to the
 * engine's checkpoint (zoffload/checkpoint.h) so a resumed run continues bit
 * for bit: the step it stopped after, the batch sampler's RNG state, skipped
 * steps, and the seed and model it was started with. Not the engine's state.
 */
#ifndef ZO_TRAIN_CKPT_H
#define ZO_TRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "zoffload/engine.h"

/* The training loop's position. */
typedef struct train_position {
  int64_t step;    /* optimizer steps done (including skipped ones) */
  uint64_t rng;    /* splitmix64 state of the training batch sampler after that step */
  int64_t skipped; /* fp16 overflow steps so far */
  uint64_t seed;   /* train.seed (or --seed) of the run that saved it: set by train_ckpt_load() */
} train_position;

/*
 * train_ckpt_save() - zo_engine_save() under @root (step directory named by
 * pos->step) with the position, @seed and @model as app_state; keeps the
 * newest @keep_last (0: all). Returns 0, or -1 with the engine's message in
 * @err (@errlen bytes).
 */
int train_ckpt_save(zo_engine_t *eng, const char *root, const train_position *pos, uint64_t seed,
                    const gpt_config *model, int keep_last, char *saved, size_t saved_len,
                    char *err, size_t errlen);

/*
 * train_ckpt_load() - zo_engine_load() of @path (a checkpoint directory, or
 * a root whose `latest` names one) and the position saved with it. The
 * model saved must equal @model (else an error naming the field). Returns
 * 0, or -1 with a message in @err.
 */
int train_ckpt_load(zo_engine_t *eng, const char *path, const gpt_config *model,
                    train_position *pos, char *err, size_t errlen);

#endif /* ZO_TRAIN_CKPT_H */
