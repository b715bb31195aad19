/*
 * config_auto.c - "auto" in DeepSpeed configs, resolved as the Hugging Face
 * Trainer resolves it (transformers/integrations/deepspeed.py,
 * HfTrainerDeepSpeedConfig.trainer_config_process / trainer_config_finalize)
 * from what the application knows (zo_config_auto). A rewrite of the JSON
 * tree before config.c parses it; not the parser.
 */
#include "config_auto.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base_internal.h"

void zo_config_auto_init(zo_config_auto *a) {
  if (!a) return;
  a->hidden_size = a->train_micro_batch_size_per_gpu = a->gradient_accumulation_steps = -1;
  a->lr = a->beta1 = a->beta2 = a->eps = a->weight_decay = a->gradient_clipping = NAN;
  a->warmup_num_steps = a->total_num_steps = -1;
  a->fp16 = a->bf16 = -1;
}

typedef enum { V_INT, V_REAL, V_BOOL, V_BETAS } vkind;

/* One key HF fills in: where, and how from zo_config_auto. */
typedef struct auto_key {
  const char *block, *sub, *key; /* root[block][sub][key]; block/sub NULL: one level less */
  const char *needs;             /* the zo_config_auto field(s), for messages and the log */
} auto_key;

static const auto_key k_keys[] = {
    {NULL, NULL, "train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu"},
    {NULL, NULL, "gradient_accumulation_steps", "gradient_accumulation_steps"},
    {NULL, NULL, "train_batch_size",
     "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size"},
    {NULL, NULL, "gradient_clipping", "gradient_clipping"},
    {"optimizer", "params", "lr", "lr"},
    {"optimizer", "params", "betas", "beta1, beta2"},
    {"optimizer", "params", "eps", "eps"},
    {"optimizer", "params", "weight_decay", "weight_decay"},
    {"scheduler", "params", "warmup_min_lr", "0"},
    {"scheduler", "params", "warmup_max_lr", "lr"},
    {"scheduler", "params", "warmup_num_steps", "warmup_num_steps"},
    {"scheduler", "params", "total_num_steps", "total_num_steps"},
    {"fp16", NULL, "enabled", "fp16"},
    {"bf16", NULL, "enabled", "bf16"},
    {"zero_optimization", NULL, "reduce_bucket_size", "hidden_size^2"},
    {"zero_optimization", NULL, "stage3_prefetch_bucket_size", "0.9 * hidden_size^2"},
    {"zero_optimization", NULL, "stage3_param_persistence_threshold", "10 * hidden_size"},
};

/* a * b into *out; 0 when that overflows int64_t */
static int mul_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* The value for key @i, or NULL when @a does not know it; *@overflow set when it does not fit in 64 bits. */
static json_t *value_of(int i, const zo_config_auto *a, int ws, int *overflow) {
  const int64_t h = a->hidden_size, mb = a->train_micro_batch_size_per_gpu,
                gas = a->gradient_accumulation_steps;
  int64_t x, y;
  *overflow = 0;
  switch (i) {
    case 0: return mb >= 1 ? json_integer(mb) : NULL;
    case 1: return gas >= 1 ? json_integer(gas) : NULL;
    case 2:
      if (mb < 1 || gas < 1) return NULL;
      if (!mul_i64(mb, gas, &x) || !mul_i64(x, ws, &y)) return *overflow = 1, NULL;
      return json_integer(y);
    case 3: return isnan(a->gradient_clipping) ? NULL : json_real(a->gradient_clipping);
    case 4: return isnan(a->lr) ? NULL : json_real(a->lr);
    case 5:
      return isnan(a->beta1) || isnan(a->beta2) ? NULL : json_pack("[f, f]", a->beta1, a->beta2);
    case 6: return isnan(a->eps) ? NULL : json_real(a->eps);
    case 7: return isnan(a->weight_decay) ? NULL : json_real(a->weight_decay);
    case 8: return json_integer(0);
    case 9: return isnan(a->lr) ? NULL : json_real(a->lr);
    case 10: return a->warmup_num_steps >= 0 ? json_integer(a->warmup_num_steps) : NULL;
    case 11: return a->total_num_steps >= 1 ? json_integer(a->total_num_steps) : NULL;
    case 12: return a->fp16 >= 0 ? json_boolean(a->fp16) : NULL;
    case 13: return a->bf16 >= 0 ? json_boolean(a->bf16) : NULL;
    case 14:
    case 15:
      if (h < 1) return NULL;
      if (!mul_i64(h, h, &x)) return *overflow = 1, NULL;
      return json_integer(i == 14 ? x : (json_int_t)(0.9 * (double)x)); /* 0.9 x < x: fits */
    case 16:
      if (h < 1) return NULL;
      if (!mul_i64(h, 10, &x)) return *overflow = 1, NULL;
      return json_integer(x);
  }
  return NULL;
}

static int is_auto(const json_t *v) {
  return json_is_string(v) && !strcmp(json_string_value(v), "auto");
}

zo_status cfg_fill_auto(json_t *root, const zo_config_auto *a, int world_size, const char *src) {
  const int n = (int)(sizeof k_keys / sizeof k_keys[0]);
  for (int i = 0; i < n; i++) {
    const auto_key *k = &k_keys[i];
    json_t *obj = root;
    if (k->block) obj = json_object_get(obj, k->block);
    if (obj && k->sub) obj = json_object_get(obj, k->sub);
    if (!json_is_object(obj) || !is_auto(json_object_get(obj, k->key))) continue;
    char path[160];
    snprintf(path, sizeof path, "%s%s%s%s%s", k->block ? k->block : "", k->block ? "." : "",
             k->sub ? k->sub : "", k->sub ? "." : "", k->key);
    if (!a)
      return zo_error_set(
          ZO_ERR_CONFIG,
          "%s: %s: \"auto\" is filled in by the HF Trainer, not by DeepSpeed; this "
          "application gives no values for \"auto\" (zo_config_opts.auto_values): write a value",
          src, path);
    int overflow;
    json_t *v = value_of(i, a, world_size, &overflow);
    if (overflow)
      return zo_error_set(ZO_ERR_CONFIG,
                          "%s: %s: \"auto\" would be %s, which does not fit in 64 bits: write a "
                          "value",
                          src, path, k->needs);
    if (!v)
      return zo_error_set(ZO_ERR_CONFIG,
                          "%s: %s: \"auto\" needs %s from the application, which did not give it: "
                          "write a value",
                          src, path, k->needs);
    char *shown = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10));
    zo_info("config: %s \"auto\" -> %s (%s)", path, shown ? shown : "?", k->needs);
    free(shown);
    if (json_object_set_new(obj, k->key, v))
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "%s: %s: out of memory filling in \"auto\"", src,
                          path);
  }
  return ZO_OK;
}
