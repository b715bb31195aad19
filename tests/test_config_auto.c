/*
 * test_config_auto.c - "auto" values (zoffload/config.h, zo_config_auto):
 * each key the HF Trainer fills in gets the application's value with HF's
 * formula (hidden_size^2, 0.9 hidden_size^2, 10 hidden_size, micro * gas *
 * world), logged once; a missing value, or "auto" at a key HF does not fill
 * in, is ZO_ERR_CONFIG naming the key; and the ZeRO-3 NVMe config as the HF
 * docs write it (tests/configs/hf_zero3_nvme.json) parses with the values and
 * is refused by name without them.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/config.h"

static char g_log[8192];
static void capture(zo_log_level lvl, const char *msg, void *user) {
  (void)lvl, (void)user;
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof g_log - n, "%s\n", msg);
}
static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

static zo_status parse(const char *json, const zo_config_auto *a, int ws, zo_config_t *cfg) {
  zo_config_opts o = {NULL, ws, a};
  g_log[0] = 0;
  return zo_config_parse(json, strlen(json), "t.json", &o, cfg);
}

int main(int argc, char **argv) {
  zo_log_set_handler(capture, NULL, ZO_LOG_INFO);
  zo_config_auto a;
  zo_config_auto_init(&a);
  CHECK(a.hidden_size == -1 && isnan(a.lr) && a.bf16 == -1);
  a.hidden_size = 768;
  a.train_micro_batch_size_per_gpu = 4;
  a.gradient_accumulation_steps = 3;
  a.lr = 3e-4, a.beta1 = 0.9, a.beta2 = 0.95, a.eps = 1e-8, a.weight_decay = 0.1;
  a.gradient_clipping = 1.0;
  a.warmup_num_steps = 10, a.total_num_steps = 100;
  a.fp16 = 0, a.bf16 = 1;
  zo_config_t cfg;

  const char *all =
      "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\","
      " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\", \"eps\": \"auto\","
      " \"weight_decay\": \"auto\"}},"
      " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\","
      " \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}},"
      " \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},"
      " \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\","
      " \"stage3_param_persistence_threshold\": \"auto\"}}";
  CHECK_OK(parse(all, &a, 2, &cfg));
  CHECK_EQ(cfg.train_micro_batch_size_per_gpu, 4);
  CHECK_EQ(cfg.gradient_accumulation_steps, 3);
  CHECK_EQ(cfg.train_batch_size, 4 * 3 * 2);
  CHECK(cfg.gradient_clipping == 1.0);
  CHECK(cfg.optimizer.lr == 3e-4 && cfg.optimizer.beta1 == 0.9 && cfg.optimizer.beta2 == 0.95);
  CHECK(cfg.optimizer.eps == 1e-8 && cfg.optimizer.weight_decay == 0.1);
  CHECK(cfg.scheduler.warmup_min_lr == 0 && cfg.scheduler.warmup_max_lr == 3e-4);
  CHECK_EQ(cfg.scheduler.warmup_num_steps, 10);
  CHECK_EQ(cfg.scheduler.total_num_steps, 100);
  CHECK(!cfg.fp16.enabled && cfg.bf16.enabled);
  CHECK_EQ(cfg.zero.reduce_bucket_size, 768 * 768);
  CHECK_EQ(cfg.zero.stage3_prefetch_bucket_size, 530841); /* int(0.9 * 768 * 768) = int(530841.6) */
  CHECK_EQ(cfg.zero.stage3_param_persistence_threshold, 7680);
  printf("%s", g_log);
  /* each filled key logged exactly once, with its value and where it came from */
  CHECK_EQ(count(g_log, "\"auto\" ->"), 17);
  CHECK_EQ(count(g_log, "zero_optimization.reduce_bucket_size \"auto\" -> 589824 (hidden_size^2)"),
           1);
  CHECK_EQ(count(g_log, "optimizer.params.betas \"auto\" -> [0.9,0.95]"), 1);
  CHECK_EQ(count(g_log, "train_batch_size \"auto\" -> 24"), 1);

  /* a value the application did not give: the key and the field it needs */
  a.hidden_size = -1;
  CHECK_ST(
      parse("{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": \"auto\"}}",
            &a, 1, &cfg),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "t.json: zero_optimization.reduce_bucket_size: \"auto\" needs hidden_size^2");
  /* no values at all */
  CHECK_ST(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": \"auto\"}}}",
          NULL, 1, &cfg),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "optimizer.params.lr: \"auto\" is filled in by the HF Trainer");
  /* "auto" where HF fills nothing in stays a type error naming the key */
  a.hidden_size = 768;
  CHECK_ST(parse("{\"train_batch_size\": 8, \"zero_optimization\": {\"sub_group_size\": \"auto\"}}",
                 &a, 1, &cfg),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zero_optimization.sub_group_size: expected");
  /* explicit values are left alone */
  CHECK_OK(parse("{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": 1000}}",
                 &a, 1, &cfg));
  CHECK_EQ(cfg.zero.reduce_bucket_size, 1000);
  CHECK_EQ(count(g_log, "\"auto\" ->"), 0);

  /* products that do not fit in 64 bits: refused naming the key (was signed overflow: 2^32 squared wrapped to 0) */
  a.hidden_size = (int64_t)1 << 32;
  CHECK_ST(
      parse("{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": \"auto\"}}",
            &a, 1, &cfg),
      ZO_ERR_CONFIG);
  CHECK_HAS(
      zo_last_error(),
      "t.json: zero_optimization.reduce_bucket_size: \"auto\" would be hidden_size^2, which does "
      "not fit in 64 bits");
  CHECK_ST(
      parse(
          "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage3_prefetch_bucket_size\": \"auto\"}}",
          &a, 1, &cfg),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zero_optimization.stage3_prefetch_bucket_size: \"auto\" would be");
  a.hidden_size = INT64_MAX / 4;
  CHECK_ST(
      parse(
          "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage3_param_persistence_threshold\": \"auto\"}}",
          &a, 1, &cfg),
      ZO_ERR_CONFIG);
  CHECK_HAS(
      zo_last_error(),
      "zero_optimization.stage3_param_persistence_threshold: \"auto\" would be 10 * hidden_size");
  a.hidden_size = 768;
  a.train_micro_batch_size_per_gpu = (int64_t)1 << 62;
  a.gradient_accumulation_steps = 4;
  CHECK_ST(parse("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\"}",
                 &a, 1, &cfg),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "t.json: train_batch_size: \"auto\" would be train_micro_batch_size_per_gpu * "
            "gradient_accumulation_steps * world_size, which does not fit in 64 bits");
  a.train_micro_batch_size_per_gpu = 4, a.gradient_accumulation_steps = 3;

  /* the HF docs' ZeRO-3 NVMe config */
  if (argc > 1) {
    zo_config_opts o = {NULL, 1, &a};
    g_log[0] = 0;
    CHECK_OK(zo_config_load_file(argv[1], &o, &cfg));
    CHECK(cfg.zero.stage == 3 && cfg.zero.offload_optimizer.device == ZO_OFFLOAD_NVME &&
          cfg.zero.offload_param.device == ZO_OFFLOAD_NVME);
    CHECK_EQ(cfg.train_batch_size, 12);
    CHECK_EQ(cfg.zero.stage3_param_persistence_threshold, 7680);
    CHECK_EQ(count(g_log, "\"auto\" ->"), 16); /* every "auto" of the file */
    o.auto_values = NULL;
    CHECK_ST(zo_config_load_file(argv[1], &o, &cfg), ZO_ERR_CONFIG);
    CHECK_HAS(zo_last_error(), "hf_zero3_nvme.json: ");
    CHECK_HAS(zo_last_error(), "\"auto\"");
  }
  zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
  return zo_test_finish("test_config_auto");
}
