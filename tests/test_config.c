/*
 * test_config.c - DeepSpeed-style JSON config: values, batch derivation, legacy
 * forms, errors naming the JSON path, what is said of inert keys by value, lr schedules.
 * Not a fuzz target. Usage: test_config <dir with the tests/config fixtures>.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/dtype.h"
#include "zoffload/parse.h"

/* Values read from decimal literals: a tight mixed tolerance. */
#define CHECK_NEAR(a, ref) CHECK_CLOSE(a, ref, 1e-15, 1e-12)

/* ---- log capture ---- */
#define MAX_LOG 128
static char g_log[MAX_LOG][1024];
static int g_nlog;

static char g_info[MAX_LOG]
                  [1024]; /* the info lines beside the warnings, from the same g_nlog = 0 */
static int g_ninfo;

static void on_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level == ZO_LOG_INFO) {
    if (g_ninfo < MAX_LOG) snprintf(g_info[g_ninfo], sizeof g_info[0], "%s", msg);
    g_ninfo++;
    return;
  }
  if (level != ZO_LOG_WARN) return;
  if (g_nlog < MAX_LOG) snprintf(g_log[g_nlog], sizeof g_log[0], "%s", msg);
  g_nlog++;
}

/* Number of captured warnings that contain needle. */
static int count_log(const char *needle) {
  int n = 0;
  for (int i = 0; i < g_nlog && i < MAX_LOG; i++)
    if (strstr(g_log[i], needle)) n++;
  return n;
}

/* Number of captured info lines that contain needle. */
static int count_info(const char *needle) {
  int n = 0;
  for (int i = 0; i < g_ninfo && i < MAX_LOG; i++)
    if (strstr(g_info[i], needle)) n++;
  return n;
}

static zo_status parse_ws(const char *json, int ws, zo_config_t *cfg) {
  static const char *const app[] = {"model", "data", NULL};
  zo_config_opts o = {app, ws, NULL};
  return zo_config_parse(json, strlen(json), "t.json", &o, cfg);
}
static zo_status parse(const char *json, zo_config_t *cfg) { return parse_ws(json, 1, cfg); }

/* ---- valid configs ---- */

static void test_deepspeed_example(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/ds_zero_offload.json", dir);
  zo_config_t c;
  g_nlog = g_ninfo = 0;
  zo_status st = zo_config_load_file(path, NULL, &c);
  CHECK_EQ(st, ZO_OK);
  if (st) {
    fprintf(stderr, "  %s\n", zo_last_error());
    return;
  }
  CHECK_EQ(c.train_batch_size, 8);
  CHECK_EQ(c.train_micro_batch_size_per_gpu, 8);
  CHECK_EQ(c.gradient_accumulation_steps, 1);
  CHECK_EQ(c.steps_per_print, 100);
  CHECK_NEAR(c.gradient_clipping, 1.0);
  CHECK_EQ(c.optimizer.type, ZO_OPT_ADAM);
  CHECK_EQ(c.optimizer.adam_w_mode, 1); /* DeepSpeed: Adam defaults to adam_w_mode true */
  CHECK_NEAR(c.optimizer.lr, 0.00015);
  CHECK_NEAR(c.optimizer.beta1, 0.9);
  CHECK_NEAR(c.optimizer.beta2, 0.95);
  CHECK_NEAR(c.optimizer.eps, 1e-8);
  CHECK_NEAR(c.optimizer.weight_decay, 0.01);
  CHECK_EQ(c.optimizer.bias_correction, 1);
  CHECK_EQ(c.scheduler.type, ZO_SCHED_WARMUP_LR);
  CHECK_NEAR(c.scheduler.warmup_max_lr, 0.00015);
  CHECK_EQ(c.scheduler.warmup_num_steps, 1000);
  CHECK_EQ(c.scheduler.warmup_type_log, 1);
  CHECK_EQ(c.fp16.enabled, 1);
  CHECK_NEAR(c.fp16.loss_scale, 0.0);
  CHECK_EQ(c.fp16.initial_scale_power, 16);
  CHECK_EQ(c.fp16.loss_scale_window, 1000);
  CHECK_EQ(c.fp16.hysteresis, 2);
  CHECK_NEAR(c.fp16.min_loss_scale, 1.0);
  CHECK_EQ(c.bf16.enabled, 0);
  CHECK_EQ(c.zero.stage, 2);
  CHECK_EQ(c.zero.offload_optimizer.device, ZO_OFFLOAD_CPU);
  CHECK_EQ(c.zero.offload_optimizer.pin_memory, 1);
  CHECK_EQ(c.zero.offload_optimizer.buffer_count, 4);
  CHECK_NEAR(c.zero.offload_optimizer.ratio, 1.0);
  CHECK_EQ(c.zero.offload_param.device, ZO_OFFLOAD_NONE);
  CHECK_EQ(c.zero.overlap_comm, 1);
  CHECK_EQ(c.zero.reduce_bucket_size, 500000000);
  CHECK_EQ(c.zero.allgather_bucket_size, 500000000);
  CHECK_EQ(c.zero.sub_group_size, 1000000000);
  CHECK_EQ(c.aio.block_size, 1048576);
  CHECK_EQ(c.aio.queue_depth, 8);
  /* DeepSpeed's own example: wall_clock_breakdown (the Python front's), contiguous_gradients and
   * reduce_scatter true (what zoffload does by design), overlap_comm and the bucket sizes (acted on over
   * several ranks): not a word, not even at info level */
  for (int i = 0; i < g_nlog && i < MAX_LOG; i++) fprintf(stderr, "  warning: %s\n", g_log[i]);
  CHECK_EQ(g_nlog, 0);
  CHECK_EQ(count_log("contiguous_gradients"), 0);
  CHECK_EQ(count_log("reduce_scatter"), 0);
  CHECK_EQ(count_log("wall_clock_breakdown"), 0);
}

static void test_zero_infinity(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/zero_infinity_nvme.json", dir);
  static const char *const app[] = {"model", "data", NULL};
  zo_config_opts o = {app, 2, NULL};
  zo_config_t c;
  g_nlog = g_ninfo = 0;
  zo_status st = zo_config_load_file(path, &o, &c);
  CHECK_EQ(st, ZO_OK);
  if (st) {
    fprintf(stderr, "  %s\n", zo_last_error());
    return;
  }
  /* App blocks are skipped silently; every other key is acted on (offload_param.max_in_cpu too: the host cache of
   * nvme parameters, here with device "cpu" where DeepSpeed ignores it as well). */
  CHECK_EQ(g_nlog, 0);
  CHECK_EQ(count_log("max_in_cpu"), 0);
  for (int i = 0; i < g_nlog && i < MAX_LOG; i++) fprintf(stderr, "  warning: %s\n", g_log[i]);
  CHECK_EQ(c.train_batch_size, 16); /* 4 * 2 * world_size 2 */
  CHECK_EQ(c.bf16.enabled, 1);
  CHECK_EQ(c.optimizer.type, ZO_OPT_ADAMW);
  CHECK_EQ(c.optimizer.adam_w_mode, 1); /* AdamW ignores adam_w_mode: false */
  CHECK_NEAR(c.optimizer.weight_decay, 0.1);
  CHECK_EQ(c.scheduler.type, ZO_SCHED_WARMUP_COSINE_LR);
  CHECK_EQ(c.scheduler.total_num_steps, 1000);
  CHECK_EQ(c.scheduler.warmup_num_steps, 100);
  CHECK_EQ(c.scheduler.warmup_type_log, 0);
  CHECK_NEAR(c.scheduler.cos_min_ratio, 1e-4);
  CHECK_NEAR(c.scheduler.warmup_min_ratio, 0.0);
  CHECK_EQ(c.zero.stage, 3);
  CHECK_EQ(c.zero.overlap_comm, 1); /* stage 3 default */
  CHECK_EQ(c.zero.offload_optimizer.device, ZO_OFFLOAD_NVME);
  CHECK(strcmp(c.zero.offload_optimizer.nvme_path, "/local_nvme") == 0);
  CHECK_EQ(c.zero.offload_optimizer.pipeline_read, 1);
  CHECK_EQ(c.zero.offload_optimizer.pipeline_write, 1);
  CHECK_EQ(c.zero.offload_param.device, ZO_OFFLOAD_CPU);
  CHECK_EQ(c.zero.offload_param.pin_memory, 1);
  CHECK_EQ(c.zero.offload_param.buffer_count, 5);
  CHECK_EQ(c.zero.offload_param.buffer_size, 100000000);
  CHECK_EQ(c.zero.offload_param.max_in_cpu, 1000000000);
  CHECK_EQ(c.zero.offload_param.max_in_cpu_set, 1); /* written: the engine acts on it */
  CHECK_EQ(c.zero.sub_group_size, 100000000);
  CHECK_EQ(c.aio.block_size, 262144);
  CHECK_EQ(c.aio.queue_depth, 32);
  CHECK_EQ(c.zoffload.device_memory_limit, 64ll << 20);
  CHECK_EQ(c.zoffload.adam_threads, 2);

  char buf[8192];
  size_t n = zo_config_describe(&c, buf, sizeof buf);
  CHECK_EQ(n, strlen(buf));
  CHECK_HAS(buf, "zero_optimization.offload_optimizer.device = nvme\n");
  CHECK_HAS(buf, "zero_optimization.offload_optimizer.nvme_path = /local_nvme\n");
  CHECK_HAS(buf, "train_batch_size = 16\n");
  CHECK_HAS(buf, "scheduler.type = WarmupCosineLR\n");
  char small[16];
  size_t n2 = zo_config_describe(&c, small, sizeof small);
  CHECK_EQ(n2, n);
  CHECK_EQ(strlen(small), sizeof small - 1);
  CHECK_EQ(zo_config_describe(&c, NULL, 0), n);
}

static void test_defaults_and_values(void) {
  zo_config_t c;
  CHECK_EQ(parse("{\"train_micro_batch_size_per_gpu\": 2}", &c), ZO_OK);
  CHECK_EQ(c.scheduler.type, ZO_SCHED_NONE);
  CHECK_EQ(c.steps_per_print, 10);
  CHECK_NEAR(c.optimizer.lr, 1e-3);
  CHECK_NEAR(c.optimizer.beta2, 0.999);
  CHECK_EQ(c.zero.stage, 0);
  CHECK_EQ(c.zero.overlap_comm, 0);
  CHECK_EQ(c.zero.offload_param.buffer_count, 5);
  /* DeepSpeed's default, not acted on: not written */
  CHECK_EQ(c.zero.offload_param.max_in_cpu, 1000000000);
  CHECK_EQ(c.zero.offload_param.max_in_cpu_set, 0);
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 1, \"zero_optimization\": {\"offload_param\": {\"max_in_cpu\": 0}}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.zero.offload_param.max_in_cpu, 0);
  CHECK_EQ(c.zero.offload_param.max_in_cpu_set, 1); /* written, even as 0 */
  CHECK_EQ(parse("{\"train_micro_batch_size_per_gpu\": 2}", &c), ZO_OK);
  CHECK_EQ(c.aio.overlap_events, 1);
  CHECK_EQ(c.zoffload.device_memory_limit, 0);
  CHECK_EQ(c.zoffload.device_arena_bytes, 0);
  CHECK(c.zoffload.pinned_fraction == 0.85);
  CHECK(c.zoffload.comm_timeout_s == 600.0);

  /* Adam honours adam_w_mode; type is case-insensitive like DeepSpeed's. */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false}}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.optimizer.type, ZO_OPT_ADAM);
  CHECK_EQ(c.optimizer.adam_w_mode, 0);
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"adamw\", \"params\": {\"bias_correction\": false}}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.optimizer.type, ZO_OPT_ADAMW);
  CHECK_EQ(c.optimizer.adam_w_mode, 1);
  CHECK_EQ(c.optimizer.bias_correction, 0);

  /* Integer keys accept integral reals; byte sizes accept suffixes. */
  CHECK_EQ(parse("{\"train_batch_size\": 3.2e1, \"zero_optimization\": {\"sub_group_size\": 5e8}}",
                 &c),
           ZO_OK);
  CHECK_EQ(c.train_batch_size, 32);
  CHECK_EQ(c.zero.sub_group_size, 500000000);
  struct {
    const char *v;
    long long want;
  } sz[] = {
      {"123456", 123456},      {"\"1GB\"", 1000000000}, {"\"1.5 KiB\"", 1536},
      {"\"2gib\"", 2ll << 30}, {"\"80G\"", 80ll << 30}, /* as zo-train --device-memory-limit 80G: one parser (zo_parse_bytes) */
      {"\"4K\"", 4096},        {"\"4096\"", 4096}};
  for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
    char js[256];
    snprintf(js, sizeof js,
             "{\"train_batch_size\": 1, \"zoffload\": {\"device_memory_limit\": %s}}", sz[i].v);
    CHECK_EQ(parse(js, &c), ZO_OK);
    CHECK_EQ(c.zoffload.device_memory_limit, sz[i].want);
    snprintf(js, sizeof js, "{\"train_batch_size\": 1, \"zoffload\": {\"device_arena_bytes\": %s}}",
             sz[i].v);
    CHECK_EQ(parse(js, &c), ZO_OK);
    CHECK_EQ(c.zoffload.device_arena_bytes, sz[i].want);
  }
  /* device_arena_bytes also takes "fit" (what the engine holds), and nothing else that is not a byte count */
  CHECK_EQ(parse("{\"train_batch_size\": 1, \"zoffload\": {\"device_arena_bytes\": \"fit\"}}", &c),
           ZO_OK);
  CHECK_EQ(c.zoffload.device_arena_bytes, ZO_ARENA_FIT);
  char desc[8192];
  zo_config_describe(&c, desc, sizeof desc);
  CHECK(strstr(desc, "zoffload.device_arena_bytes = fit") != NULL);
  CHECK_EQ(parse("{\"train_batch_size\": 1, \"zoffload\": {\"device_arena_bytes\": \"fits\"}}", &c),
           ZO_ERR_CONFIG);
  CHECK(strstr(zo_last_error(), "zoffload.device_arena_bytes") != NULL);
}

static void test_batch(void) {
  zo_config_t c;
  struct {
    const char *js;
    int ws;
    long long tb, mb, gas;
  } ok[] = {
      {"{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 2, 32, 4, 4},
      {"{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 4}", 2, 32, 4, 4},
      {"{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 4}", 2, 32, 4, 4},
      {"{\"train_batch_size\": 32}", 2, 32, 16, 1},
      {"{\"train_micro_batch_size_per_gpu\": 4}", 2, 8, 4, 1},
      {"{\"train_batch_size\": 24, \"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": 8}",
       0, 24, 3, 8},
      {"{\"train_batch_size\": 24, \"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": 2}",
       4, 24, 3, 2},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    zo_status st = parse_ws(ok[i].js, ok[i].ws, &c);
    CHECK_EQ(st, ZO_OK);
    if (st) {
      fprintf(stderr, "  case %zu: %s\n", i, zo_last_error());
      continue;
    }
    CHECK_EQ(c.train_batch_size, ok[i].tb);
    CHECK_EQ(c.train_micro_batch_size_per_gpu, ok[i].mb);
    CHECK_EQ(c.gradient_accumulation_steps, ok[i].gas);
  }
}

/* ---- errors ---- */

static void test_errors(void) {
  struct {
    const char *js;
    const char *want;
  } bad[] = {
      /* wrong type */
      {"{\"train_batch_size\": 8, \"gradient_clipping\": \"1.0\"}",
       "t.json: gradient_clipping: expected a number, got \"1.0\""},
      {"{\"train_batch_size\": \"auto\"}",
       "t.json: train_batch_size: \"auto\" is filled in by the HF Trainer, not by DeepSpeed; this application gives no values"},
      {"{\"train_batch_size\": true}", "t.json: train_batch_size: expected an integer, got true"},
      {"{\"train_batch_size\": 8.5}", "t.json: train_batch_size: expected an integer, got 8.5"},
      {"{\"train_batch_size\": 8, \"fp16\": {\"enabled\": 1}}",
       "t.json: fp16.enabled: expected true or false, got 1"},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": 0.9}}}",
       "t.json: optimizer.params.betas: expected an array of two numbers"},
      {"{\"train_batch_size\": 8, \"zero_optimization\": 2}",
       "t.json: zero_optimization: expected an object"},
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"offload_optimizer\": {\"pin_memory\": \"yes\"}}}",
       "t.json: zero_optimization.offload_optimizer.pin_memory: expected true or false, got \"yes\""},
      /* out of range */
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": -1}}}",
       "t.json: optimizer.params.lr: expected a number in [0, 100], got -1"},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [0.9, 1.0]}}}",
       "t.json: optimizer.params.betas[1]: expected a number in [0, 1), got 1"},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"eps\": 0}}}",
       "t.json: optimizer.params.eps: expected a number in [1.17549e-38, 1], got 0"},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"weight_decay\": -0.1}}}",
       "t.json: optimizer.params.weight_decay: expected a number in [0, 1e+06], got -0.1"},
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 4}}",
       "t.json: zero_optimization.stage: expected an integer in [0, 3], got 4"},
      {"{\"train_batch_size\": 8, \"aio\": {\"queue_depth\": 0}}",
       "t.json: aio.queue_depth: expected an integer in [1, 32768], got 0"},
      {"{\"train_batch_size\": 8, \"aio\": {\"block_size\": 1000}}",
       "t.json: aio.block_size: expected a positive multiple of 4096"},
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", \"buffer_count\": 0}}}",
       "t.json: zero_optimization.offload_optimizer.buffer_count: expected an integer in [1, "},
      {"{\"train_batch_size\": 8, \"gradient_clipping\": -1}",
       "t.json: gradient_clipping: expected a number >= 0, got -1"},
      {"{\"train_batch_size\": 0}", "t.json: train_batch_size: expected an integer >= 1, got 0"},
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"offload_optimizer\": {\"ratio\": 1.5}}}",
       "t.json: zero_optimization.offload_optimizer.ratio: expected a number in [0, 1], got 1.5"},
      {"{\"train_batch_size\": 8, \"fp16\": {\"min_loss_scale\": 0}}",
       "t.json: fp16.min_loss_scale: expected a number in (0, 1.84467e+19], got 0"},
      /* unknown enum */
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"offload_optimizer\": {\"device\": \"gpu\"}}}",
       "t.json: zero_optimization.offload_optimizer.device: expected \"none\", \"cpu\" or \"nvme\", got \"gpu\""},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"SGD\"}}",
       "t.json: optimizer.type: expected \"Adam\" or \"AdamW\", got \"SGD\""},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Lamb\"}}",
       "t.json: optimizer.type: expected \"Adam\" or \"AdamW\", got \"Lamb\""},
      {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"OneCycle\"}}",
       "t.json: scheduler.type: expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\", got \"OneCycle\""},
      {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"exp\"}}}",
       "t.json: scheduler.params.warmup_type: expected \"log\" or \"linear\", got \"exp\""},
      {"{\"train_batch_size\": 8, \"zoffload\": {\"device_memory_limit\": \"64XB\"}}",
       "t.json: zoffload.device_memory_limit: expected a byte count"},
      /* inconsistent or missing batch sizes */
      {"{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}",
       "t.json: train_batch_size: train_batch_size 32 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 * world_size 1"},
      {"{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4}",
       "train_batch_size 30 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 7 * world_size 1"},
      {"{\"gradient_accumulation_steps\": 2}", "t.json: train_batch_size: missing"},
      /* combinations */
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\"}}}",
       "t.json: zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\""},
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": null}}}",
       "t.json: zero_optimization.offload_param.nvme_path: required when device is \"nvme\""},
      {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": 10}}}",
       "t.json: scheduler.params.total_num_steps: missing (required by WarmupDecayLR)"},
      {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 100, \"warmup_max_lr\": 0.1}}}",
       "t.json: scheduler.params.warmup_max_lr: not a parameter of WarmupCosineLR"},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"max_grad_norm\": 1.0}}}",
       "t.json: optimizer.params.max_grad_norm: not an optimizer parameter"},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"momentum\": 0.9}}}",
       "t.json: optimizer.params.momentum: not a parameter of AdamW"},
      {"{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
       "t.json: bf16.enabled: fp16.enabled and bf16.enabled cannot both be true"},
      {"{\"train_batch_size\": 8, \"zero_optimization\": {\"cpu_offload\": true, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
       "t.json: zero_optimization.cpu_offload: deprecated form cannot be combined with zero_optimization.offload_optimizer"},
      {"{\"train_batch_size\": 8, \"optimizer\": {\"params\": {}}}",
       "t.json: optimizer.type: missing"},
      {"[1, 2]", "t.json: expected a JSON object at the top level, got an array"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    zo_config_t c;
    zo_status st = parse(bad[i].js, &c);
    if (st != ZO_ERR_CONFIG)
      FAIL_AT("case %zu: status %s, want ZO_ERR_CONFIG: %s", i, zo_status_string(st), bad[i].js);
    CHECK_HAS(zo_last_error(), bad[i].want);
  }
}

static void test_malformed(const char *dir) {
  zo_config_t c;
  /* "tru" on line 3; jansson reports the position where the bad token ends. */
  const char *js = "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}\n";
  CHECK_EQ(parse(js, &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "t.json:3:");
  CHECK_HAS(zo_last_error(), "malformed JSON: ");
  /* Trailing comma: the '}' at line 3, column 1 is the offending token. */
  CHECK_EQ(parse("{\n  \"train_batch_size\": 8,\n}", &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "t.json:3:1: malformed JSON: ");
  /* Duplicate keys are rejected, as DeepSpeed's loader does. */
  CHECK_EQ(parse("{\"train_batch_size\": 8,\n \"train_batch_size\": 16}", &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "t.json:2:");
  CHECK_HAS(zo_last_error(), "duplicate");
  /* Same error through a file: the message names the file. */
  char path[4096];
  snprintf(path, sizeof path, "%s/malformed.json", dir);
  CHECK_EQ(zo_config_load_file(path, NULL, &c), ZO_ERR_CONFIG);
  char want[4200];
  snprintf(want, sizeof want, "%s:3:", path);
  CHECK_HAS(zo_last_error(), want);
  /* Missing file. */
  CHECK_EQ(zo_config_load_file("/nonexistent-dir/cfg.json", NULL, &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "cannot read config '/nonexistent-dir/cfg.json': No such file or directory");
  /* Bad arguments are not config errors. */
  CHECK_EQ(zo_config_parse("{}", 2, "x", NULL, NULL), ZO_ERR_INVALID_ARG);
  zo_config_opts o = {NULL, -1, NULL};
  CHECK_EQ(zo_config_parse("{}", 2, "x", &o, &c), ZO_ERR_INVALID_ARG);
}

/* ---- warnings: one per inert or unknown key, none for app blocks ---- */

static void test_warnings(void) {
  const char *js =
      "{\"train_batch_size\": 8,\n"
      " \"frobnicate\": {\"a\": 1, \"b\": 2},\n"
      " \"tensorboard\": {\"enabled\": true},\n"
      " \"model\": {\"n_layer\": 2}, \"data\": {\"path\": \"x\"},\n"
      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"torch_adam\": true}},\n"
      " \"fp16\": {\"enabled\": false, \"auto_cast\": false},\n"
      " \"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 5e7, \"stage3_max_live_parameters\": 1e9,\n"
      "   \"stage3_max_reuse_distance\": 1e9, \"stage3_param_persistence_threshold\": 1e5,\n"
      "   \"stage3_gather_16bit_weights_on_model_save\": true,\n"
      "   \"offload_optimizer\": {\"device\": \"cpu\", \"fast_init\": false}},\n"
      " \"aio\": {\"intra_op_parallelism\": 2, \"single_submit\": false, \"overlap_events\": true, \"use_gds\": true},\n"
      " \"zoffload\": {\"adam_threads\": 1}\n"
      "}";
  /* warnings: an unknown block, and a value zoffload does not honour (use_gds true) */
  const char *want[] = {
      "config: frobnicate is not a DeepSpeed or zoffload key; ignored",
      "config: aio.use_gds is not supported",
  };
  /* info lines: knobs of mechanisms zoffload does not have, the training the same */
  const char *info[] = {
      "config: optimizer.params.torch_adam is not used by zoffload, and the training is the same: "
      "zoffload's CPU Adam runs the step",
      "config: aio.intra_op_parallelism is not used by zoffload, and the training is the same: NVMe I/O is "
      "io_uring",
      "config: aio.single_submit is not used by zoffload",
      "config: aio.overlap_events is not used by zoffload",
  };
  const size_t nwant = sizeof want / sizeof want[0], ninfo = sizeof info / sizeof info[0];
  for (int round = 0; round < 2; round++) { /* the same lines at every parse */
    zo_config_t c;
    g_nlog = g_ninfo = 0;
    zo_status st = parse(js, &c);
    CHECK_EQ(st, ZO_OK);
    if (st) fprintf(stderr, "  %s\n", zo_last_error());
    for (size_t i = 0; i < nwant; i++)
      if (count_log(want[i]) != 1)
        FAIL_AT("warning \"%s\" seen %d times, want 1", want[i], count_log(want[i]));
    for (size_t i = 0; i < ninfo; i++)
      if (count_info(info[i]) != 1)
        FAIL_AT("info \"%s\" seen %d times, want 1", info[i], count_info(info[i]));
    CHECK_EQ(g_nlog, nwant);
    CHECK_EQ(g_ninfo, ninfo);
    CHECK_EQ(count_log("config: model"), 0);
    CHECK_EQ(count_log("config: data"), 0);
    CHECK_EQ(count_log("frobnicate.a"), 0); /* an unknown block warns once, not per sub-key */
    /* the stage3_* budgets are acted on, ..._on_model_save true is what save_16bit_model() does; tensorboard
     * (the Python front's), fp16.auto_cast false and fast_init say nothing */
    CHECK_EQ(count_log("stage3_") + count_info("stage3_"), 0);
    CHECK_EQ(count_log("tensorboard") + count_log("auto_cast") + count_log("fast_init"), 0);
    if (g_nlog != (int)nwant)
      for (int i = 0; i < g_nlog && i < MAX_LOG; i++) fprintf(stderr, "  got: %s\n", g_log[i]);
    CHECK_EQ(c.zero.stage3_prefetch_bucket_size, 50000000);
    CHECK_EQ(c.aio.intra_op_parallelism, 2);
    CHECK_EQ(c.aio.use_gds, 1);
  }
}

/* ---- inert keys by value: silent where zoffload behaves as DeepSpeed, a warning where the run differs ---- */

static void test_inert_values(void) {
  static const struct {
    const char *json; /* after "{\"train_batch_size\": 8, " */
    const char *path; /* the path the line names */
    int level;        /* -1: nothing said; else ZO_LOG_WARN or ZO_LOG_INFO */
  } cases[] = {
      {"\"zero_optimization\": {\"reduce_scatter\": true}}", "reduce_scatter", -1},
      {"\"zero_optimization\": {\"reduce_scatter\": false}}", "zero_optimization.reduce_scatter",
       ZO_LOG_INFO},
      {"\"zero_optimization\": {\"allgather_partitions\": true}}", "allgather_partitions", -1},
      {"\"zero_optimization\": {\"allgather_partitions\": false}}",
       "zero_optimization.allgather_partitions", ZO_LOG_INFO},
      {"\"zero_optimization\": {\"contiguous_gradients\": false}}", "contiguous_gradients", -1},
      {"\"zero_optimization\": {\"zero_quantized_weights\": false}}", "zero_quantized", -1},
      {"\"zero_optimization\": {\"zero_quantized_weights\": true}}",
       "zero_optimization.zero_quantized_weights", ZO_LOG_WARN},
      {"\"zero_optimization\": {\"zero_hpz_partition_size\": 1}}", "hpz", -1},
      {"\"zero_optimization\": {\"zero_hpz_partition_size\": 8}}",
       "zero_optimization.zero_hpz_partition_size", ZO_LOG_WARN},
      {"\"zero_optimization\": {\"mics_shard_size\": -1}}", "mics", -1},
      {"\"zero_optimization\": {\"mics_shard_size\": 4}}", "zero_optimization.mics_shard_size",
       ZO_LOG_WARN},
      {"\"zero_optimization\": {\"load_from_fp32_weights\": false}}",
       "zero_optimization.load_from_fp32_weights", ZO_LOG_WARN},
      {"\"fp16\": {\"auto_cast\": false}}", "auto_cast", -1},
      {"\"fp16\": {\"auto_cast\": true}}", "fp16.auto_cast", ZO_LOG_WARN},
      {"\"bfloat16\": {\"bf16_optimizer_states\": true}}", "bfloat16.bf16_optimizer_states",
       ZO_LOG_WARN},
      {"\"flops_profiler\": {\"enabled\": false, \"profile_step\": 3}}", "flops_profiler", -1},
      {"\"flops_profiler\": {\"enabled\": true}}", "flops_profiler", ZO_LOG_WARN},
      {"\"memory_breakdown\": false}", "memory_breakdown", -1},
      {"\"memory_breakdown\": true}", "memory_breakdown", ZO_LOG_WARN},
      {"\"communication_data_type\": \"fp32\"}", "communication_data_type", -1},
      {"\"communication_data_type\": null}", "communication_data_type", -1},
      {"\"communication_data_type\": \"fp16\"}", "communication_data_type", ZO_LOG_WARN},
      {"\"gradient_allreduce_op\": \"mean\"}", "gradient_allreduce_op", -1},
      {"\"gradient_allreduce_op\": \"sum\"}", "gradient_allreduce_op", ZO_LOG_WARN},
      {"\"prescale_gradients\": true}", "prescale_gradients", ZO_LOG_INFO},
      {"\"activation_checkpointing\": {\"partition_activations\": false, \"number_checkpoints\": null}}",
       "activation_checkpointing", -1},
      {"\"activation_checkpointing\": {\"partition_activations\": true}}",
       "activation_checkpointing", ZO_LOG_WARN},
      {"\"wall_clock_breakdown\": true, \"csv_monitor\": {\"enabled\": true}, \"wandb\": {\"enabled\": true}}",
       "wall_clock_breakdown", -1},
      {"\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"last_batch_iteration\": -1}}}",
       "last_batch_iteration", -1},
      {"\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"last_batch_iteration\": 5}}}",
       "scheduler.params.last_batch_iteration", ZO_LOG_WARN},
  };
  char js[512], want[256];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(js, sizeof js, "{\"train_batch_size\": 8, %s", cases[i].json);
    zo_config_t c;
    g_nlog = g_ninfo = 0;
    zo_status st = parse(js, &c);
    CHECK_EQ(st, ZO_OK);
    if (st) fprintf(stderr, "  %s: %s\n", js, zo_last_error());
    int want_warn = cases[i].level == ZO_LOG_WARN, want_info = cases[i].level == ZO_LOG_INFO;
    if (g_nlog != want_warn || g_ninfo != want_info)
      FAIL_AT("%s: %d warnings and %d info lines, want %d and %d (%s)", js, g_nlog, g_ninfo,
              want_warn, want_info,
              g_nlog    ? g_log[0]
              : g_ninfo ? g_info[0]
                        : "nothing said");
    snprintf(want, sizeof want, "config: %s %s", cases[i].path,
             want_warn ? "is accepted but has no effect in zoffload" : "is not used by zoffload");
    if (cases[i].level >= 0 && count_log(want) + count_info(want) != 1)
      FAIL_AT("%s: want a line starting \"%s\", got \"%s\"", js, want,
              g_nlog ? g_log[0] : g_info[0]);
  }
  /* DeepSpeed's field names of the stage3_ budgets are acted on, one spelling at a time */
  zo_config_t c;
  g_nlog = g_ninfo = 0;
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": 123,"
          " \"max_live_parameters\": 456, \"max_reuse_distance\": 789, \"param_persistence_threshold\": 10}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.zero.stage3_prefetch_bucket_size, 123);
  CHECK_EQ(c.zero.stage3_max_live_parameters, 456);
  CHECK_EQ(c.zero.stage3_max_reuse_distance, 789);
  CHECK_EQ(c.zero.stage3_param_persistence_threshold, 10);
  CHECK_EQ(g_nlog + g_ninfo, 0);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zero_optimization\": {\"max_live_parameters\": 1,"
                 " \"stage3_max_live_parameters\": 2}}",
                 &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "t.json: zero_optimization.max_live_parameters: given together with "
                             "zero_optimization.stage3_max_live_parameters (the same setting)");
}

/* ---- unknown keys in a block zoffload reads: errors naming the closest known key (were warnings) ---- */

static void test_unknown_keys(void) {
  static const struct {
    const char *json, *msg;
  } errs[] = {
      {"\"zero_optimization\": {\"stag\": 2}",
       "t.json: zero_optimization.stag: not a DeepSpeed or zoffload key; did you mean zero_optimization.stage?"},
      {"\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"devise\": \"cpu\"}}",
       "t.json: zero_optimization.offload_optimizer.devise: not a DeepSpeed or zoffload key; did you mean "
       "zero_optimization.offload_optimizer.device?"},
      {"\"zero_optimisation\": {\"stage\": 2}",
       "t.json: zero_optimisation: not a DeepSpeed or zoffload key; did you mean zero_optimization?"},
      {"\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betaz\": [0.9, 0.99]}}",
       "t.json: optimizer.params.betaz: not a parameter of AdamW (it takes lr, betas, eps, weight_decay, "
       "bias_correction, adam_w_mode, amsgrad); DeepSpeed would reject it too; did you mean optimizer.params.betas?"},
      {"\"fp16\": {\"enabeld\": true}",
       "t.json: fp16.enabeld: not a DeepSpeed or zoffload key; did you mean fp16.enabled?"},
      {"\"zero_optimization\": {\"stage\": 3, \"leaf_module\": {\"class\": [\"X\"]}}",
       "t.json: zero_optimization.leaf_module.class: not a DeepSpeed or zoffload key; did you mean "
       "zero_optimization.leaf_module.classes?"},
      {"\"zero_optimization\": {\"stage\": 3, \"leaf_module\": {\"names\": [\"a\", 3]}}",
       "t.json: zero_optimization.leaf_module.names[1]: expected a string, got 3"},
      {"\"zero_optimization\": {\"stage\": 3, \"leaf_module\": [\"a\"]}",
       "t.json: zero_optimization.leaf_module: expected an object (classes, names, name_suffixes), got an array"},
      {"\"data_types\": {\"buffer_dtype\": \"int8\"}",
       "t.json: data_types.buffer_dtype: expected \"fp32\", \"bf16\" or \"fp16\", got \"int8\""},
      {"\"bf16\": {\"enable\": true}",
       "t.json: bf16.enable: not a DeepSpeed or zoffload key; did you mean bf16.enabled?"},
      {"\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\", \"buffer_sise\": 1}}",
       "t.json: zero_optimization.offload_param.buffer_sise: not a DeepSpeed or zoffload key; did you mean "
       "zero_optimization.offload_param.buffer_size?"},
      {"\"zero_optimization\": {\"stage3_max_live_parameter\": 1}",
       "t.json: zero_optimization.stage3_max_live_parameter: not a DeepSpeed or zoffload key; did you mean "
       "zero_optimization.stage3_max_live_parameters?"},
      {"\"zero_optimization\": {\"bogus_key\": 1}",
       "t.json: zero_optimization.bogus_key: not a DeepSpeed or zoffload key of zero_optimization (docs/configuration.md "
       "lists them)"},
      {"\"aio\": {\"queue_dept\": 8}",
       "t.json: aio.queue_dept: not a DeepSpeed or zoffload key; did you mean aio.queue_depth?"},
      {"\"zoffload\": {\"adam_thread\": 2}",
       "t.json: zoffload.adam_thread: not a DeepSpeed or zoffload key; did you mean zoffload.adam_threads?"},
      {"\"data_types\": {\"grad_acum_dtype\": \"fp32\"}",
       "t.json: data_types.grad_acum_dtype: not a DeepSpeed or zoffload key; did you mean data_types.grad_accum_dtype?"},
      {"\"optimizer\": {\"type\": \"Adam\", \"param\": {\"lr\": 1e-3}}",
       "t.json: optimizer.param: not a DeepSpeed or zoffload key; did you mean optimizer.params?"},
      /* a key one level too high: DeepSpeed silently ignores it there */
      {"\"optimizer\": {\"type\": \"Adam\", \"adam_w_mode\": false}",
       "t.json: optimizer.adam_w_mode: not a DeepSpeed or zoffload key; did you mean optimizer.params.adam_w_mode?"},
      {"\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_l\": 1e-3}}",
       "t.json: scheduler.params.warmup_max_l: not a parameter of WarmupLR (it takes warmup_min_lr, warmup_max_lr, "
       "warmup_num_steps, warmup_type); DeepSpeed would reject it too; did you mean scheduler.params.warmup_max_lr?"},
      {"\"tensorbord\": {\"enabled\": true}",
       "t.json: tensorbord: not a DeepSpeed or zoffload key; did you mean tensorboard?"},
      {"\"modle\": {}",
       "t.json: modle: not a DeepSpeed or zoffload key; did you mean model?"}, /* an app block */
      {"\"steps_per_print\": NaN", "t.json: steps_per_print: expected an integer, got NaN"},
      {"\"steps_per_print\": -Infinity",
       "t.json: steps_per_print: expected an integer, got -Infinity"},
      {"\"gradient_clipping\": Infinity",
       "t.json: gradient_clipping: expected a number, got Infinity"},
  };
  char js[1024];
  zo_config_t c;
  for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
    snprintf(js, sizeof js, "{\"train_batch_size\": 8, %s}", errs[i].json);
    zo_status st = parse(js, &c);
    if (st != ZO_ERR_CONFIG)
      FAIL_AT("%s: status %d, want ZO_ERR_CONFIG", errs[i].json, (int)st);
    else if (strcmp(zo_last_error(), errs[i].msg))
      FAIL_AT("%s:\n  got:  %s\n  want: %s", errs[i].json, zo_last_error(), errs[i].msg);
  }
  /* DeepSpeed's documented keys zoffload does not act on: one warning each, naming them (comms_logger and
   * data_types.param_dtype were "not a DeepSpeed or zoffload key") */
  const char *js2 =
      "{\"train_batch_size\": 8, \"comms_logger\": {\"enabled\": true, \"verbose\": false},\n"
      " \"flops_profiler\": {\"enabled\": false}, \"tensorboard\": {\"enabled\": false}, \"wandb\": {\"enabled\": false},\n"
      " \"csv_monitor\": {\"enabled\": false}, \"activation_checkpointing\": {\"partition_activations\": false},\n"
      " \"wall_clock_breakdown\": false, \"tensor_parallel\": {\"autotp_size\": 1},\n"
      " \"data_types\": {\"param_dtype\": \"bf16\", \"buffer_dtype\": \"bf16\"},\n"
      " \"zero_optimization\": {\"stage\": 3, \"grad_hooks\": true, \"leaf_module\": {\"classes\": \"A\", \"names\": [],\n"
      "                       \"name_suffixes\": [\"mlp\"]}},\n"
      " \"aio\": {\"block_size\": 1048576}, \"steps_per_print\": Infinity}";
  /* comms_logger enabled: asked for and not built (a warning); tensor_parallel and data_types.param_dtype:
   * the same training (info); the monitors, wall_clock_breakdown, activation_checkpointing all off and
   * grad_hooks true say nothing */
  g_nlog = g_ninfo = 0;
  zo_status st = parse(js2, &c);
  CHECK_EQ(st, ZO_OK);
  if (st) fprintf(stderr, "  %s\n", zo_last_error());
  CHECK_EQ(
      count_log(
          "config: comms_logger is accepted but has no effect in zoffload; wall_clock_breakdown "
          "shows the time in collectives (comm)"),
      1);
  CHECK_EQ(count_info("config: tensor_parallel is not used by zoffload"), 1);
  CHECK_EQ(count_info("config: data_types.param_dtype is not used by zoffload"), 1);
  for (int i = 0; i < g_nlog && i < MAX_LOG; i++) fprintf(stderr, "  warning: %s\n", g_log[i]);
  CHECK_EQ(g_nlog, 1);
  CHECK_EQ(g_ninfo, 2);
  CHECK_EQ(count_log("not a DeepSpeed or zoffload key"), 0);
  /* HF accelerate's "steps_per_print": float("inf") as Python's json.dumps writes it: never print */
  CHECK_EQ(c.steps_per_print, INT64_MAX);
  /* "Infinity" inside a string is a string: the literal is rewritten only outside strings */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"model\": {\"s\": \"Infinity \\\" NaN\"}, \"steps_per_print\": Infinity}",
          &c),
      ZO_OK);
  CHECK_EQ(c.steps_per_print, INT64_MAX);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"steps_per_print\": \"Infinity\"}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "t.json: steps_per_print: expected an integer, got \"Infinity\"");
  /* a name far from every known one at the top level stays the application's: a warning, as before */
  g_nlog = g_ninfo = 0;
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"my_experiment\": {\"x\": 1}}", &c), ZO_OK);
  CHECK_EQ(count_log("config: my_experiment is not a DeepSpeed or zoffload key; ignored"), 1);
  CHECK_EQ(g_nlog, 1);
  /* the rule behind every suggestion, the config's and the tools' flags': within 2 edits and a third of the
   * longer name */
  CHECK_EQ(zo_name_suggestion_distance("stag", 4, "stage"), 1);
  CHECK_EQ(zo_name_suggestion_distance("enabeld", 7, "enabled"), 1); /* a swap counts 1 */
  CHECK_EQ(zo_name_suggestion_distance("stpes=5", 5, "steps"), 1);   /* the first @n bytes */
  CHECK_EQ(zo_name_suggestion_distance("ab", 2, "abc"), 1);          /* 3 * 1 <= 3 */
  CHECK_EQ(zo_name_suggestion_distance("devse", 5, "device"), 2);    /* 3 * 2 <= 6 */
  CHECK_EQ(zo_name_suggestion_distance("zero_optimisation", 17, "zero_optimization"), 1);
  CHECK_EQ(zo_name_suggestion_distance("a", 1, "b"), ZO_NAME_DIST_MAX);           /* 3 * 1 > 1 */
  CHECK_EQ(zo_name_suggestion_distance("ab", 2, "xy"), ZO_NAME_DIST_MAX);         /* 3 * 2 > 2 */
  CHECK_EQ(zo_name_suggestion_distance("abcdef", 6, "uvwxyz"), ZO_NAME_DIST_MAX); /* 6 edits */
  CHECK_EQ(zo_name_suggestion_distance("abcdefgh", 8, "abcdefgh"), 0);
}

/* ---- legacy forms ---- */

static void test_legacy(void) {
  zo_config_t c;
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zero_optimization\": true}", &c), ZO_OK);
  CHECK_EQ(c.zero.stage, 1);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zero_optimization\": false}", &c), ZO_OK);
  CHECK_EQ(c.zero.stage, 0);

  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.zero.offload_optimizer.device, ZO_OFFLOAD_CPU);
  CHECK_EQ(c.zero.offload_optimizer.pin_memory, 0); /* DeepSpeed's offload_optimizer default */
  CHECK_EQ(c.zero.offload_param.device, ZO_OFFLOAD_NONE);

  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true, "
          "\"cpu_offload_use_pin_memory\": true}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.zero.offload_optimizer.device, ZO_OFFLOAD_CPU);
  CHECK_EQ(c.zero.offload_optimizer.pin_memory, 1);

  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"cpu_offload\": true, "
          "\"cpu_offload_param\": true, \"cpu_offload_use_pin_memory\": true}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.zero.offload_param.device, ZO_OFFLOAD_CPU);
  CHECK_EQ(c.zero.offload_param.pin_memory, 1);
  CHECK_EQ(c.zero.offload_optimizer.pin_memory, 1);

  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"cpu_offload_params\": true}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.zero.offload_param.device, ZO_OFFLOAD_CPU);
  CHECK_EQ(c.zero.offload_param.pin_memory, 0);

  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zero_optimization\": {\"cpu_offload\": false}}", &c),
           ZO_OK);
  CHECK_EQ(c.zero.offload_optimizer.device, ZO_OFFLOAD_NONE);

  CHECK_EQ(parse("{\"train_batch_size\": 8, \"bfloat16\": {\"enabled\": true}}", &c), ZO_OK);
  CHECK_EQ(c.bf16.enabled, 1);
  g_nlog = g_ninfo = 0;
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"aio\": {\"thread_count\": 3}}", &c), ZO_OK);
  CHECK_EQ(c.aio.intra_op_parallelism, 3);
  CHECK_EQ(count_info("config: aio.thread_count is not used by zoffload"), 1);
  CHECK_EQ(g_nlog, 0);

  /* zoffload.optimizer_state_dtype: fp32 by default, bf16 on request, anything else named. */
  CHECK_EQ(parse("{\"train_batch_size\": 8}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.optimizer_state_dtype, ZO_DTYPE_F32);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"optimizer_state_dtype\": \"bf16\"}}",
                 &c),
           ZO_OK);
  CHECK_EQ(c.zoffload.optimizer_state_dtype, ZO_DTYPE_BF16);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"optimizer_state_dtype\": \"fp8\"}}",
                 &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.optimizer_state_dtype: expected \"fp32\" or \"bf16\"");
  /* data_types.grad_accum_dtype: not given -> -1 (the engine decides); fp32, bf16, fp16; others named with the
   * JSON path and the accepted values. */
  CHECK_EQ(parse("{\"train_batch_size\": 8}", &c), ZO_OK);
  CHECK_EQ(c.grad_accum_dtype, -1);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": \"fp32\"}}", &c),
           ZO_OK);
  CHECK_EQ(c.grad_accum_dtype, ZO_DTYPE_F32);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": \"bf16\"}}", &c),
           ZO_OK);
  CHECK_EQ(c.grad_accum_dtype, ZO_DTYPE_BF16);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": \"fp16\"}}", &c),
           ZO_OK);
  CHECK_EQ(c.grad_accum_dtype, ZO_DTYPE_F16);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": \"fp64\"}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "data_types.grad_accum_dtype: expected \"fp32\", \"bf16\" or \"fp16\"");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": 32}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "data_types.grad_accum_dtype");
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"zoffload\": {\"swap_checksum\": true, \"swap_sqpoll\": true}}",
          &c),
      ZO_OK);
  CHECK_EQ(c.zoffload.swap_checksum, 1);
  CHECK_EQ(c.zoffload.swap_sqpoll, 1);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"swap_checksum\": 1}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.swap_checksum");
  /* zoffload.allow_pageable_host: false by default (an unregistered pinned buffer fails finalize on CUDA), a bool */
  CHECK_EQ(parse("{\"train_batch_size\": 8}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.allow_pageable_host, 0);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"allow_pageable_host\": true}}", &c),
           ZO_OK);
  CHECK_EQ(c.zoffload.allow_pageable_host, 1);
  {
    char d[8192];
    zo_config_describe(&c, d, sizeof d);
    CHECK_HAS(d, "zoffload.allow_pageable_host = 1\n");
  }
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"allow_pageable_host\": 1}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.allow_pageable_host: expected true or false, got 1");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"allow_pageable_host\": \"yes\"}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.allow_pageable_host: expected true or false");
  /* zoffload.speeds: every figure 0 (not given) by default and not printed; given ones read verbatim and printed;
   * a value below the minimum, a wrong type, a block that is not an object and a misspelt key name the path. */
  CHECK_EQ(parse("{\"train_batch_size\": 8}", &c), ZO_OK);
  CHECK(c.zoffload.speeds.nvme_read_gbps == 0 && c.zoffload.speeds.nvme_write_gbps == 0);
  CHECK(c.zoffload.speeds.h2d_gbps == 0 && c.zoffload.speeds.d2h_gbps == 0 &&
        c.zoffload.speeds.adam_gparams_per_s == 0);
  {
    char d[8192];
    zo_config_describe(&c, d, sizeof d);
    CHECK(!strstr(d, "zoffload.speeds."));
  }
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": {\"nvme_read_gbps\": 3.5, \"nvme_write_gbps\": 2,"
          " \"h2d_gbps\": 24.5, \"d2h_gbps\": 0.001, \"adam_gparams_per_s\": 1.25}}}",
          &c),
      ZO_OK);
  CHECK(c.zoffload.speeds.nvme_read_gbps == 3.5);
  CHECK(c.zoffload.speeds.nvme_write_gbps == 2);
  CHECK(c.zoffload.speeds.h2d_gbps == 24.5);
  CHECK(c.zoffload.speeds.d2h_gbps == 0.001);
  CHECK(c.zoffload.speeds.adam_gparams_per_s == 1.25);
  {
    char d[8192];
    zo_config_describe(&c, d, sizeof d);
    CHECK_HAS(d, "zoffload.speeds.nvme_read_gbps = 3.5\n");
    CHECK_HAS(d, "zoffload.speeds.d2h_gbps = 0.001\n");
    CHECK_HAS(d, "zoffload.speeds.adam_gparams_per_s = 1.25\n");
  }
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": {\"h2d_gbps\": 0}}}", &c),
           ZO_OK);
  CHECK(c.zoffload.speeds.h2d_gbps == 0);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": {\"h2d_gbps\": 0.0001}}}",
                 &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(
      zo_last_error(),
      "zoffload.speeds.h2d_gbps: expected 0 (not given: measured) or a number in [0.001, 1e+06]");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": {\"nvme_read_gbps\": -1}}}",
                 &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.speeds.nvme_read_gbps: expected a number in [0, 1e+06]");
  CHECK_EQ(
      parse("{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": {\"adam_gparams_per_s\": 2e6}}}",
            &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.speeds.adam_gparams_per_s: expected a number in [0, 1e+06]");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": {\"d2h_gbps\": \"fast\"}}}",
                 &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.speeds.d2h_gbps: expected a number, got \"fast\"");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": 5}}", &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.speeds: expected an object");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"speeds\": {\"nvme_raed_gbps\": 1}}}",
                 &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "zoffload.speeds.nvme_raed_gbps: not a DeepSpeed or zoffload key; did you mean "
            "zoffload.speeds.nvme_read_gbps?");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"speds\": {}}}", &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "did you mean zoffload.speeds?");

  /* zoffload.device: "auto" by default; "cuda" and "host" by name; anything else names the path and the choices. */
  CHECK_EQ(parse("{\"train_batch_size\": 8}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.device_kind, ZO_DEVICE_AUTO);
  char desc[8192];
  zo_config_describe(&c, desc, sizeof desc);
  CHECK_HAS(desc, "zoffload.device = auto\n");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"device\": \"cuda\"}}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.device_kind, ZO_DEVICE_CUDA);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"device\": \"host\"}}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.device_kind, ZO_DEVICE_HOST);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"device\": \"auto\"}}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.device_kind, ZO_DEVICE_AUTO);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"device\": \"gpu\"}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "zoffload.device: expected \"auto\", \"cuda\" or \"host\", got \"gpu\"");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"device\": \"CUDA\"}}", &c),
           ZO_ERR_CONFIG);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"device\": 1}}", &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.device: expected \"auto\", \"cuda\" or \"host\", got 1");

  /* zoffload.comm: "auto" by default (not printed); "nccl" and "mpi" by name; anything else names the path and the
   * choices (an unknown backend must not pass as a warning: it decides whether a failed NCCL start is an error). */
  CHECK_EQ(parse("{\"train_batch_size\": 8}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.comm, ZO_COMM_AUTO);
  zo_config_describe(&c, desc, sizeof desc);
  CHECK(!strstr(desc, "zoffload.comm"));
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm\": \"nccl\"}}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.comm, ZO_COMM_NCCL);
  zo_config_describe(&c, desc, sizeof desc);
  CHECK_HAS(desc, "zoffload.comm = nccl\n");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm\": \"mpi\"}}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.comm, ZO_COMM_MPI);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm\": \"auto\"}}", &c), ZO_OK);
  CHECK_EQ(c.zoffload.comm, ZO_COMM_AUTO);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm\": \"gloo\"}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.comm: expected \"auto\", \"nccl\" or \"mpi\", got \"gloo\"");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm\": \"NCCL\"}}", &c),
           ZO_ERR_CONFIG);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm\": 1}}", &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.comm: expected \"auto\", \"nccl\" or \"mpi\", got 1");
  /* zoffload.comm_timeout_s: the NCCL watchdog, 600 s by default (not printed), in (0, 86400] */
  CHECK_EQ(parse("{\"train_batch_size\": 8}", &c), ZO_OK);
  CHECK(c.zoffload.comm_timeout_s == 600.0);
  zo_config_describe(&c, desc, sizeof desc);
  CHECK(!strstr(desc, "comm_timeout_s"));
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm_timeout_s\": 90}}", &c), ZO_OK);
  CHECK(c.zoffload.comm_timeout_s == 90.0);
  zo_config_describe(&c, desc, sizeof desc);
  CHECK_HAS(desc, "zoffload.comm_timeout_s = 90\n");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm_timeout_s\": 0}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.comm_timeout_s");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm_timeout_s\": 86401}}", &c),
           ZO_ERR_CONFIG);
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"comm_timeout_s\": \"10m\"}}", &c),
           ZO_ERR_CONFIG);
}

/* ---- learning-rate schedules vs DeepSpeed's formulas, computed by hand ---- */

static void test_lr(void) {
  zo_config_t c;
  const double PI = 3.14159265358979323846;

  /* No scheduler: the optimizer's lr at every step. */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.02}}}",
          &c),
      ZO_OK);
  CHECK_NEAR(zo_config_lr_at(&c, 1), 0.02);
  CHECK_NEAR(zo_config_lr_at(&c, 5000), 0.02);

  /* WarmupLR, log: step k runs at iteration k-2; step 1 at the constructor's min_lr. */
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                 "{\"warmup_min_lr\": 0.001, \"warmup_max_lr\": 0.011, \"warmup_num_steps\": 10}}}",
                 &c),
           ZO_OK);
  CHECK_NEAR(zo_config_lr_at(&c, 1), 0.001);
  CHECK_NEAR(zo_config_lr_at(&c, 2), 0.001); /* iteration 0: log(1) = 0 */
  CHECK_NEAR(zo_config_lr_at(&c, 5),
             0.001 + 0.01 * 0.6020599913279624); /* iteration 3: log(4)/log(10) */
  CHECK_NEAR(zo_config_lr_at(&c, 10),
             0.001 + 0.01 * 0.9542425094393249); /* iteration 8: log(9)/log(10) */
  CHECK_NEAR(zo_config_lr_at(&c, 11), 0.011);    /* iteration 9: log(10)/log(10) */
  CHECK_NEAR(zo_config_lr_at(&c, 12), 0.011);    /* iteration 10 >= warmup */
  CHECK_NEAR(zo_config_lr_at(&c, 100000), 0.011);
  CHECK_NEAR(zo_config_lr_at_iteration(&c, 3), zo_config_lr_at(&c, 5));

  /* WarmupLR, linear, warmup_num_steps 1 becomes max(2, 1) = 2. */
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                 "{\"warmup_max_lr\": 1.0, \"warmup_num_steps\": 1, \"warmup_type\": \"linear\"}}}",
                 &c),
           ZO_OK);
  CHECK_NEAR(zo_config_lr_at(&c, 2), 0.0);
  CHECK_NEAR(zo_config_lr_at(&c, 3), 0.5); /* iteration 1 / 2 */
  CHECK_NEAR(zo_config_lr_at(&c, 4), 1.0);

  /* WarmupDecayLR, linear: W=10, T=110. */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
          "{\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.1, \"warmup_num_steps\": 10, \"total_num_steps\": 110, "
          "\"warmup_type\": \"linear\"}}}",
          &c),
      ZO_OK);
  CHECK_NEAR(zo_config_lr_at(&c, 1), 0.0);
  CHECK_NEAR(zo_config_lr_at(&c, 7), 0.05);   /* iteration 5: 5/10 */
  CHECK_NEAR(zo_config_lr_at(&c, 12), 0.1);   /* iteration 10: (110-10)/100 */
  CHECK_NEAR(zo_config_lr_at(&c, 62), 0.05);  /* iteration 60: 50/100 */
  CHECK_NEAR(zo_config_lr_at(&c, 102), 0.01); /* iteration 100: 10/100 */
  CHECK_NEAR(zo_config_lr_at(&c, 200), 0.0);  /* clamped at 0 */

  /* WarmupCosineLR: lr 0.001, W=10, T=110, linear, warmup_min_ratio 0.1, cos_min_ratio 0.01. */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}, "
          "\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 110, "
          "\"warmup_num_steps\": 10, \"warmup_type\": \"linear\", \"warmup_min_ratio\": 0.1, \"cos_min_ratio\": 0.01}}}",
          &c),
      ZO_OK);
  CHECK_NEAR(zo_config_lr_at(&c, 1), 0.0);            /* constructor installs 0 */
  CHECK_NEAR(zo_config_lr_at(&c, 2), 0.001 * 0.1);    /* iteration 0 */
  CHECK_NEAR(zo_config_lr_at(&c, 7), 0.001 * 0.55);   /* iteration 5: 0.1 + 0.5*0.9 */
  CHECK_NEAR(zo_config_lr_at(&c, 111), 0.001 * 0.01); /* iteration 109: cos(pi) -> cos_min_ratio */
  CHECK_NEAR(zo_config_lr_at(&c, 62),                 /* iteration 60: real step 51 of 100 */
             0.001 * (0.01 + 0.99 * (1.0 + cos(PI * 51.0 / 100.0)) / 2.0));
  CHECK_NEAR(zo_config_lr_at(&c, 61),
             0.001 * (0.01 + 0.99 * 0.5)); /* iteration 59: real step 50: cos(pi/2)=0 */

  /* WarmupCosineLR, log warmup with defaults (warmup_min_ratio 0): iteration 3 of W=10. */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.5}}, "
          "\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 50, \"warmup_num_steps\": 10}}}",
          &c),
      ZO_OK);
  CHECK_NEAR(zo_config_lr_at(&c, 5), 0.5 * 0.6020599913279624);
}

/* ---- boundary values: every number read is range-checked, naming the key ---- */

typedef enum { K_I64, K_INT, K_DBL } kind_t;
typedef struct num_key {
  const char *fmt;  /* the document, %s where the value goes */
  const char *path; /* what the error must name */
  kind_t kind;
  size_t off;         /* the field in zo_config_t */
  double lo, hi;      /* accepted range (integers: exact below 2^53; see lo_i/hi_i) */
  int64_t lo_i, hi_i; /* integers */
  int lo_excl;        /* reals: lo excluded */
  int special; /* 1: betas (below 1 as float32), 2: host_link_gbps (0 or >= 0.1), 3: block_size (x4096),
                         4: zoffload.speeds.* (0 or >= 1e-3) */
} num_key;

#define TB "\"train_batch_size\": 8, "
#define IK(fmt, path, kind, field, lo, hi) \
  { fmt, path, kind, offsetof(zo_config_t, field), 0, 0, lo, hi, 0, 0 }
#define DK(fmt, path, field, lo, hi, excl, sp) \
  { fmt, path, K_DBL, offsetof(zo_config_t, field), lo, hi, 0, 0, excl, sp }
#define SCHED(t, k)                                                                          \
  "{" TB "\"scheduler\": {\"type\": \"" t "\", \"params\": {\"total_num_steps\": 2000, \"" k \
  "\": %s}}}"
#define ZERO(k) "{" TB "\"zero_optimization\": {\"" k "\": %s}}"
#define OPT(k) \
  "{" TB "\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false, \"" k "\": %s}}}"

static const num_key k_num_keys[] = {
    IK("{\"train_batch_size\": %s}", "train_batch_size", K_I64, train_batch_size, 1, INT64_MAX),
    IK("{\"train_micro_batch_size_per_gpu\": %s}", "train_micro_batch_size_per_gpu", K_I64,
       train_micro_batch_size_per_gpu, 1, INT64_MAX),
    IK("{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %s}",
       "gradient_accumulation_steps", K_I64, gradient_accumulation_steps, 1, INT64_MAX),
    IK("{" TB "\"steps_per_print\": %s}", "steps_per_print", K_I64, steps_per_print, 1, INT64_MAX),
    IK(SCHED("WarmupDecayLR", "warmup_num_steps"), "scheduler.params.warmup_num_steps", K_I64,
       scheduler.warmup_num_steps, 0, INT64_MAX),
    IK("{" TB
       "\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": %s}}}",
       "scheduler.params.total_num_steps", K_I64, scheduler.total_num_steps, 1, INT64_MAX),
    IK("{" TB "\"fp16\": {\"initial_scale_power\": %s}}", "fp16.initial_scale_power", K_INT,
       fp16.initial_scale_power, 0, 64),
    IK("{" TB "\"fp16\": {\"loss_scale_window\": %s}}", "fp16.loss_scale_window", K_I64,
       fp16.loss_scale_window, 1, INT64_MAX),
    IK("{" TB "\"fp16\": {\"hysteresis\": %s}}", "fp16.hysteresis", K_INT, fp16.hysteresis, 1,
       1 << 30),
    IK(ZERO("stage"), "zero_optimization.stage", K_INT, zero.stage, 0, 3),
    IK(ZERO("sub_group_size"), "zero_optimization.sub_group_size", K_I64, zero.sub_group_size, 1,
       ZO_CONFIG_MAX_ELEMS),
    IK(ZERO("stage3_prefetch_bucket_size"), "zero_optimization.stage3_prefetch_bucket_size", K_I64,
       zero.stage3_prefetch_bucket_size, 0, ZO_CONFIG_MAX_ELEMS),
    IK(ZERO("stage3_max_live_parameters"), "zero_optimization.stage3_max_live_parameters", K_I64,
       zero.stage3_max_live_parameters, 0, ZO_CONFIG_MAX_ELEMS),
    IK(ZERO("stage3_max_reuse_distance"), "zero_optimization.stage3_max_reuse_distance", K_I64,
       zero.stage3_max_reuse_distance, 0, ZO_CONFIG_MAX_ELEMS),
    IK(ZERO("stage3_param_persistence_threshold"),
       "zero_optimization.stage3_param_persistence_threshold", K_I64,
       zero.stage3_param_persistence_threshold, 0, ZO_CONFIG_MAX_ELEMS),
    IK(ZERO("reduce_bucket_size"), "zero_optimization.reduce_bucket_size", K_I64,
       zero.reduce_bucket_size, 0, ZO_CONFIG_MAX_ELEMS),
    IK(ZERO("allgather_bucket_size"), "zero_optimization.allgather_bucket_size", K_I64,
       zero.allgather_bucket_size, 0, ZO_CONFIG_MAX_ELEMS),
    IK("{" TB "\"zero_optimization\": {\"offload_optimizer\": {\"buffer_count\": %s}}}",
       "zero_optimization.offload_optimizer.buffer_count", K_INT,
       zero.offload_optimizer.buffer_count, 1, 1 << 20),
    IK("{" TB "\"zero_optimization\": {\"offload_param\": {\"buffer_count\": %s}}}",
       "zero_optimization.offload_param.buffer_count", K_INT, zero.offload_param.buffer_count, 1,
       1 << 20),
    IK("{" TB "\"zero_optimization\": {\"offload_param\": {\"buffer_size\": %s}}}",
       "zero_optimization.offload_param.buffer_size", K_I64, zero.offload_param.buffer_size, 1,
       ZO_CONFIG_MAX_ELEMS),
    IK("{" TB "\"zero_optimization\": {\"offload_param\": {\"max_in_cpu\": %s}}}",
       "zero_optimization.offload_param.max_in_cpu", K_I64, zero.offload_param.max_in_cpu, 0,
       ZO_CONFIG_MAX_ELEMS),
    {"{" TB "\"aio\": {\"block_size\": %s}}", "aio.block_size", K_I64,
     offsetof(zo_config_t, aio.block_size), 0, 0, 4096, ZO_CONFIG_MAX_BLOCK_SIZE, 0, 3},
    IK("{" TB "\"aio\": {\"queue_depth\": %s}}", "aio.queue_depth", K_I64, aio.queue_depth, 1,
       32768),
    IK("{" TB "\"aio\": {\"intra_op_parallelism\": %s}}", "aio.intra_op_parallelism", K_INT,
       aio.intra_op_parallelism, 1, 1 << 16),
    IK("{" TB "\"zoffload\": {\"adam_threads\": %s}}", "zoffload.adam_threads", K_INT,
       zoffload.adam_threads, 0, 4096),
    IK("{" TB "\"zoffload\": {\"delayed_param_update_warmup_steps\": %s}}",
       "zoffload.delayed_param_update_warmup_steps", K_I64,
       zoffload.delayed_param_update_warmup_steps, 0, INT64_MAX),
    IK("{" TB "\"zoffload\": {\"device_memory_limit\": %s}}", "zoffload.device_memory_limit", K_I64,
       zoffload.device_memory_limit, 0, INT64_MAX),
    IK("{" TB "\"zoffload\": {\"device_arena_bytes\": %s}}", "zoffload.device_arena_bytes", K_I64,
       zoffload.device_arena_bytes, 0, INT64_MAX),
    DK("{" TB "\"gradient_clipping\": %s}", "gradient_clipping", gradient_clipping, 0, FLT_MAX, 0,
       0),
    DK(OPT("lr"), "optimizer.params.lr", optimizer.lr, 0, 100, 0, 0),
    DK(OPT("eps"), "optimizer.params.eps", optimizer.eps, FLT_MIN, 1, 0, 0),
    DK(OPT("weight_decay"), "optimizer.params.weight_decay", optimizer.weight_decay, 0, 1e6, 0, 0),
    DK("{" TB "\"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [%s, 0.999]}}}",
       "optimizer.params.betas[0]", optimizer.beta1, 0, 1, 0, 1),
    DK("{" TB "\"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [0.9, %s]}}}",
       "optimizer.params.betas[1]", optimizer.beta2, 0, 1, 0, 1),
    DK(SCHED("WarmupDecayLR", "warmup_min_lr"), "scheduler.params.warmup_min_lr",
       scheduler.warmup_min_lr, 0, 100, 0, 0),
    DK(SCHED("WarmupDecayLR", "warmup_max_lr"), "scheduler.params.warmup_max_lr",
       scheduler.warmup_max_lr, 0, 100, 0, 0),
    DK(SCHED("WarmupCosineLR", "cos_min_ratio"), "scheduler.params.cos_min_ratio",
       scheduler.cos_min_ratio, 0, 1, 0, 0),
    DK(SCHED("WarmupCosineLR", "warmup_min_ratio"), "scheduler.params.warmup_min_ratio",
       scheduler.warmup_min_ratio, 0, 1, 0, 0),
    DK("{" TB "\"fp16\": {\"loss_scale\": %s}}", "fp16.loss_scale", fp16.loss_scale, 0,
       18446744073709551616.0, 0, 0),
    DK("{" TB "\"fp16\": {\"min_loss_scale\": %s}}", "fp16.min_loss_scale", fp16.min_loss_scale, 0,
       18446744073709551616.0, 1, 0),
    DK("{" TB "\"zero_optimization\": {\"offload_optimizer\": {\"ratio\": %s}}}",
       "zero_optimization.offload_optimizer.ratio", zero.offload_optimizer.ratio, 0, 1, 0, 0),
    DK("{" TB "\"zoffload\": {\"host_link_gbps\": %s}}", "zoffload.host_link_gbps",
       zoffload.host_link_gbps, 0, 1e6, 0, 2),
    DK("{" TB "\"zoffload\": {\"pinned_fraction\": %s}}", "zoffload.pinned_fraction",
       zoffload.pinned_fraction, 0, 1, 1, 0),
    DK("{" TB "\"zoffload\": {\"comm_timeout_s\": %s}}", "zoffload.comm_timeout_s",
       zoffload.comm_timeout_s, 0, 86400, 1, 0),
    DK("{" TB "\"zoffload\": {\"speeds\": {\"nvme_read_gbps\": %s}}}",
       "zoffload.speeds.nvme_read_gbps", zoffload.speeds.nvme_read_gbps, 0, 1e6, 0, 4),
    DK("{" TB "\"zoffload\": {\"speeds\": {\"nvme_write_gbps\": %s}}}",
       "zoffload.speeds.nvme_write_gbps", zoffload.speeds.nvme_write_gbps, 0, 1e6, 0, 4),
    DK("{" TB "\"zoffload\": {\"speeds\": {\"h2d_gbps\": %s}}}", "zoffload.speeds.h2d_gbps",
       zoffload.speeds.h2d_gbps, 0, 1e6, 0, 4),
    DK("{" TB "\"zoffload\": {\"speeds\": {\"d2h_gbps\": %s}}}", "zoffload.speeds.d2h_gbps",
       zoffload.speeds.d2h_gbps, 0, 1e6, 0, 4),
    DK("{" TB "\"zoffload\": {\"speeds\": {\"adam_gparams_per_s\": %s}}}",
       "zoffload.speeds.adam_gparams_per_s", zoffload.speeds.adam_gparams_per_s, 0, 1e6, 0, 4),
};

/* The boundary values: integer literals, their real forms, and the reals that are not the same in float32. */
static const char *const k_values[] = {
    "0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "2147483649",
    "4294967295",
    "4294967296",
    "4294967297",
    "4294967312",
    "4611686018427387904",
    "9223372036854775807",
    "-9223372036854775808",
    "72057594037927936",
    "72057594037927937",
    "1073741824",
    "1073745920",
    "2147483648.0",
    "4.294967296e9",
    "4.611686018427387904e18",
    "9.2233720368547758e18",
    "1e-50",
    "1e-40",
    "1e-38",
    "1.2e-38",
    "1e40",
    "3.5e38",
    "3.4e38",
    "1e-9",
    "0.1",
    "0.09999",
    "0.5",
    "0.9999999999",
    "0.99999994",
    "1.0",
    "-0.0",
    "100",
    "100.5",
    "1e6",
    "1000001",
    "64",
    "65",
    "0.001",
    "0.00099",
};

/* Whether @k accepts @val (the text in the document), as its documented range says; *@x: the value as read. */
static int num_expected_ok(const num_key *k, const char *val, long double *x) {
  const int is_int_literal = !strpbrk(val, ".eE");
  if (is_int_literal)
    *x = (long double)strtoll(val, NULL, 10);
  else
    *x = (long double)strtod(val, NULL); /* a JSON real is a double */
  if (k->kind != K_DBL) {
    if (*x != floorl(*x)) return 0;
    if (!is_int_literal && !(*x >= -9223372036854775808.0L && *x < 9223372036854775808.0L))
      return 0;
    if (*x < (long double)k->lo_i || *x > (long double)k->hi_i) return 0;
    if (k->special == 3 && fmodl(*x, 4096) != 0) return 0;
    return 1;
  }
  const double d = (double)*x;
  *x = d; /* a real key holds a double */
  if (k->lo_excl ? !(d > k->lo) : !(d >= k->lo)) return 0;
  if (!(d <= k->hi)) return 0;
  if (k->special == 1 && !((float)d < 1.0f)) return 0;
  if (k->special == 2 && d != 0 && d < 0.1) return 0;
  if (k->special == 4 && d != 0 && d < 1e-3) return 0;
  return d == 0 || (fabs(d) >= FLT_MIN && fabs(d) <= FLT_MAX);
}

static void test_boundaries(void) {
  int cases = 0, refused = 0;
  for (size_t i = 0; i < sizeof k_num_keys / sizeof k_num_keys[0]; i++) {
    const num_key *k = &k_num_keys[i];
    for (size_t j = 0; j < sizeof k_values / sizeof k_values[0]; j++) {
      char js[1024];
      snprintf(js, sizeof js, k->fmt, k_values[j]);
      long double x;
      const int want_ok = num_expected_ok(k, k_values[j], &x);
      zo_config_t c;
      g_nlog = g_ninfo = 0;
      const zo_status st = parse(js, &c);
      cases++;
      if (want_ok) {
        if (st != ZO_OK) {
          FAIL_AT("%s = %s: refused, want accepted: %s", k->path, k_values[j], zo_last_error());
          continue;
        }
        const char *f = (const char *)&c + k->off;
        long double got = k->kind == K_I64   ? (long double)*(const int64_t *)f
                          : k->kind == K_INT ? (long double)*(const int *)f
                                             : (long double)*(const double *)f;
        if (got != x) FAIL_AT("%s = %s: read %Lg", k->path, k_values[j], got);
      } else {
        refused++;
        if (st != ZO_ERR_CONFIG) {
          FAIL_AT("%s = %s: status %s, want ZO_ERR_CONFIG naming the key", k->path, k_values[j],
                  zo_status_string(st));
          continue;
        }
        /* the key and the value or range, never an empty or generic message */
        if (!strstr(zo_last_error(), k->path) && !strstr(zo_last_error(), "malformed JSON"))
          FAIL_AT("%s = %s: the message does not name the key: %s", k->path, k_values[j],
                  zo_last_error());
      }
    }
  }
  printf("  boundaries: %d cases over %zu keys, %d refused, each naming its key\n", cases,
         sizeof k_num_keys / sizeof k_num_keys[0], refused);

  zo_config_t c;
  /* the batch product, overflow-checked (was: signed overflow, then "batch 0 ... fits") */
  CHECK_EQ(
      parse(
          "{\"train_micro_batch_size_per_gpu\": 4611686018427387904, \"gradient_accumulation_steps\": 4}",
          &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(
      zo_last_error(),
      "t.json: train_micro_batch_size_per_gpu: train_micro_batch_size_per_gpu "
      "4611686018427387904 * gradient_accumulation_steps 4 * world_size 1 does not fit in 64 bits");
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 9223372036854775807, \"train_micro_batch_size_per_gpu\": 4611686018427387904, "
          "\"gradient_accumulation_steps\": 4}",
          &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "does not fit in 64 bits");
  CHECK_EQ(parse_ws("{\"train_micro_batch_size_per_gpu\": 4611686018427387904}", 3, &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "* world_size 3 does not fit in 64 bits");
  CHECK_EQ(
      parse_ws(
          "{\"train_micro_batch_size_per_gpu\": 2147483649, \"gradient_accumulation_steps\": 2147483647}",
          2, &c),
      ZO_OK);
  CHECK_EQ(c.train_batch_size, 2147483649LL * 2147483647LL * 2);
  /* the library has no int */
  CHECK_EQ(parse("{\"train_micro_batch_size_per_gpu\": 4294967312}", &c), ZO_OK);
  CHECK_EQ(c.train_micro_batch_size_per_gpu, 4294967312LL);
  /* NaN and infinities are not JSON; Python writes them (json.dumps): refused, naming the key (steps_per_print's
   * Infinity aside: see test_unknown_keys) */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"eps\": NaN}}}",
          &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "t.json: optimizer.params.eps: expected a number, got NaN");
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"gradient_clipping\": 1e999}", &c), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "t.json:1:");
  /* eps 1e-50 was 0 as float (eps 0 refused): NaN weights on a zero gradient */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"eps\": 1e-50}}}",
          &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "t.json: optimizer.params.eps: expected a number in [1.17549e-38, 1], got 1e-50");
  /* decoupled weight decay past 1 / lr: the weights' factor 1 - lr * wd is negative (1e40 gave NaN weights) */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, "
          "\"weight_decay\": 1e40}}}",
          &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "t.json: optimizer.params.weight_decay: expected a number in [0, 1e+06], got 1e+40");
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, "
          "\"weight_decay\": 1000}}}",
          &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "t.json: optimizer.params.weight_decay: 1000 times the peak learning rate 0.003 "
            "(optimizer.params.lr) is 3 > 1");
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, "
          "\"weight_decay\": 300}}, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": 0.01}}}",
          &c),
      ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "(scheduler.params.warmup_max_lr) is 3 > 1");
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, "
          "\"weight_decay\": 300}}}",
          &c),
      ZO_OK);
  /* L2: Adam normalises the decay term */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false, "
          "\"lr\": 0.003, \"weight_decay\": 1000}}}",
          &c),
      ZO_OK);
  /* the emulated link: 1e-9 GB/s hung zo-train */
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"zoffload\": {\"host_link_gbps\": 1e-9}}", &c),
           ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(),
            "t.json: zoffload.host_link_gbps: expected 0 (no emulated link) or a number in [0.1, "
            "1e+06] GB/s, got 1e-09");
}

/* ---- 200,000 unknown keys: 8 named, then one line with the count (was: 200,000 lines) ---- */

static void test_many_unknown(void) {
  const int n = 200000;
  char *js = malloc((size_t)n * 24 + 64);
  REQUIRE(js);
  size_t len = (size_t)sprintf(js, "{\"train_batch_size\": 8");
  for (int i = 0; i < n; i++) len += (size_t)sprintf(js + len, ", \"k%d\": %d", i, i);
  strcpy(js + len, "}");
  zo_config_t c;
  for (int round = 0; round < 2; round++) { /* per parse, not per process */
    g_nlog = g_ninfo = 0;
    CHECK_EQ(zo_config_parse(js, strlen(js), "t.json", NULL, &c), ZO_OK);
    CHECK_EQ(g_nlog, 9);
    CHECK_EQ(count_log("is not a DeepSpeed or zoffload key; ignored"), 8);
    CHECK_EQ(
        count_log(
            "config: ... and 199992 more keys that are not DeepSpeed or zoffload keys (200000 in all); "
            "ignored"),
        1);
  }
  g_nlog = g_ninfo = 0; /* eight or fewer: no summary line */
  CHECK_EQ(
      parse(
          "{\"train_batch_size\": 8, \"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5, \"f\": 6, \"g\": 7, "
          "\"h\": 8}",
          &c),
      ZO_OK);
  CHECK_EQ(g_nlog, 8);
  CHECK_EQ(count_log("more keys"), 0);
  free(js);
}

/* ---- an unknown key's warning quotes the key escaped, as the errors do (was: raw ESC and BEL bytes) ---- */

static void test_unknown_key_escaped(void) {
  zo_config_t c;
  g_nlog = g_ninfo = 0;
  CHECK_EQ(parse("{\"train_batch_size\": 8, \"k\\u001b[31mX\\u0007\\u00ff\": 1}", &c), ZO_OK);
  CHECK_EQ(g_nlog, 1);
  CHECK_EQ(count_log(
               "config: k\\x1b[31mX\\x07\\xc3\\xbf is not a DeepSpeed or zoffload key; ignored"),
           1);
  for (int i = 0; i < g_nlog && i < MAX_LOG; i++)
    for (const unsigned char *b = (const unsigned char *)g_log[i]; *b; b++)
      if (*b < 0x20 || *b > 0x7e)
        FAIL_AT("warning %d holds the raw byte 0x%02x: %s", i, *b, g_log[i]);
}

/* ---- zo_offload_device_parse(): the one tier-name parser (config, zo-train, zo-stepbench) ---- */

static void test_offload_device_parse(void) {
  static const zo_offload_device tiers[] = {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME};
  for (size_t i = 0; i < 3; i++) { /* round trip with zo_offload_device_name() */
    zo_offload_device d = (zo_offload_device)-1;
    CHECK_EQ(zo_offload_device_parse(zo_offload_device_name(tiers[i]), &d), ZO_OK);
    CHECK_EQ((int)d, (int)tiers[i]);
  }
  static const char *const bad[] = {"", "CPU", "Nvme", "cpu ", "gpu", "?", "nvme0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    zo_offload_device d = ZO_OFFLOAD_NVME;
    CHECK_EQ(zo_offload_device_parse(bad[i], &d), ZO_ERR_INVALID_ARG);
    CHECK_EQ((int)d, (int)ZO_OFFLOAD_NVME); /* unchanged */
  }
  CHECK_HAS(zo_last_error(), "offload device \"nvme0\": expected \"none\", \"cpu\" or \"nvme\"");
  zo_offload_device d;
  CHECK_EQ(zo_offload_device_parse(NULL, &d), ZO_ERR_INVALID_ARG);
  CHECK_EQ(zo_offload_device_parse("cpu", NULL), ZO_ERR_INVALID_ARG);
}

/* ---- zo_config_get_*(): every path of the table reads what the parser resolved ---- */

typedef struct want_key {
  const char *path;
  zo_config_value_type type;
  int64_t i;     /* I64, BOOL */
  double f;      /* F64 */
  const char *s; /* STR */
} want_key;

static void test_get(void) {
  /* every value differs from its default, so a path reading the wrong field shows */
  const char *j =
      "{\"train_batch_size\": 24, \"train_micro_batch_size_per_gpu\": 3, \"gradient_clipping\": 0.5,"
      " \"steps_per_print\": 7, \"data_types\": {\"grad_accum_dtype\": \"bf16\"},"
      " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 2e-4, \"betas\": [0.8, 0.99], \"eps\": 1e-6,"
      "   \"weight_decay\": 0.25, \"bias_correction\": false, \"adam_w_mode\": false}},"
      " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 11, \"total_num_steps\": 99,"
      "   \"warmup_type\": \"linear\", \"cos_min_ratio\": 0.125, \"warmup_min_ratio\": 0.0625}},"
      " \"fp16\": {\"enabled\": true, \"loss_scale\": 128, \"initial_scale_power\": 12, \"loss_scale_window\": 77,"
      "   \"hysteresis\": 3, \"min_loss_scale\": 0.5},"
      " \"zero_optimization\": {\"stage\": 3, \"sub_group_size\": 1234,"
      "   \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/oo\", \"pin_memory\": true,"
      "     \"buffer_count\": 6, \"pipeline_read\": false, \"pipeline_write\": false, \"ratio\": 0.75},"
      "   \"offload_param\": {\"device\": \"cpu\", \"nvme_path\": \"/op\", \"pin_memory\": true, \"buffer_count\": 7,"
      "     \"buffer_size\": 4321, \"max_in_cpu\": 5432},"
      "   \"stage3_prefetch_bucket_size\": 111, \"stage3_max_live_parameters\": 222,"
      "   \"stage3_max_reuse_distance\": 333, \"stage3_param_persistence_threshold\": 444, \"overlap_comm\": false,"
      "   \"reduce_bucket_size\": 555, \"allgather_bucket_size\": 666, \"contiguous_gradients\": false},"
      " \"aio\": {\"block_size\": 8192, \"queue_depth\": 16, \"intra_op_parallelism\": 2, \"single_submit\": true,"
      "   \"overlap_events\": false, \"use_gds\": false},"
      " \"zoffload\": {\"device\": \"host\", \"device_memory_limit\": 65536, \"adam_threads\": 3,"
      "   \"optimizer_state_dtype\": \"bf16\", \"swap_checksum\": true, \"swap_sqpoll\": true,"
      "   \"delayed_param_update_warmup_steps\": 17, \"host_link_gbps\": 12.5,"
      "   \"device_arena_bytes\": \"fit\", \"comm\": \"mpi\", \"comm_timeout_s\": 90,"
      "   \"pinned_fraction\": 0.5, \"allow_pageable_host\": true, \"placement\": \"auto\","
      "   \"placement_host_bytes\": \"3GiB\", \"optimizer_max_in_cpu\": 7654, \"early_adam\": false, \"speeds\": {\"nvme_read_gbps\": 3.25,"
      "   \"nvme_write_gbps\": 1.5, \"h2d_gbps\": 22, \"d2h_gbps\": 21.5, \"adam_gparams_per_s\": 0.75}}}";
  static const want_key want[] = {
      {"train_batch_size", ZO_CONFIG_I64, 24, 0, NULL},
      {"train_micro_batch_size_per_gpu", ZO_CONFIG_I64, 3, 0, NULL},
      {"gradient_accumulation_steps", ZO_CONFIG_I64, 8, 0, NULL}, /* derived: 24 / 3 / 1 */
      {"gradient_clipping", ZO_CONFIG_F64, 0, 0.5, NULL},
      {"data_types.grad_accum_dtype", ZO_CONFIG_STR, 0, 0, "bf16"},
      {"steps_per_print", ZO_CONFIG_I64, 7, 0, NULL},
      {"optimizer.type", ZO_CONFIG_STR, 0, 0, "Adam"},
      {"optimizer.params.adam_w_mode", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"optimizer.params.lr", ZO_CONFIG_F64, 0, 2e-4, NULL},
      {"optimizer.params.betas[0]", ZO_CONFIG_F64, 0, 0.8, NULL},
      {"optimizer.params.betas[1]", ZO_CONFIG_F64, 0, 0.99, NULL},
      {"optimizer.params.eps", ZO_CONFIG_F64, 0, 1e-6, NULL},
      {"optimizer.params.weight_decay", ZO_CONFIG_F64, 0, 0.25, NULL},
      {"optimizer.params.bias_correction", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"scheduler.type", ZO_CONFIG_STR, 0, 0, "WarmupCosineLR"},
      {"scheduler.params.warmup_min_lr", ZO_CONFIG_F64, 0, 0,
       NULL}, /* defaults: cosine has no lrs */
      {"scheduler.params.warmup_max_lr", ZO_CONFIG_F64, 0, 1e-3, NULL},
      {"scheduler.params.warmup_num_steps", ZO_CONFIG_I64, 11, 0, NULL},
      {"scheduler.params.warmup_type", ZO_CONFIG_STR, 0, 0, "linear"},
      {"scheduler.params.total_num_steps", ZO_CONFIG_I64, 99, 0, NULL},
      {"scheduler.params.cos_min_ratio", ZO_CONFIG_F64, 0, 0.125, NULL},
      {"scheduler.params.warmup_min_ratio", ZO_CONFIG_F64, 0, 0.0625, NULL},
      {"fp16.enabled", ZO_CONFIG_BOOL, 1, 0, NULL},
      {"fp16.loss_scale", ZO_CONFIG_F64, 0, 128, NULL},
      {"fp16.initial_scale_power", ZO_CONFIG_I64, 12, 0, NULL},
      {"fp16.loss_scale_window", ZO_CONFIG_I64, 77, 0, NULL},
      {"fp16.hysteresis", ZO_CONFIG_I64, 3, 0, NULL},
      {"fp16.min_loss_scale", ZO_CONFIG_F64, 0, 0.5, NULL},
      {"bf16.enabled", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"zero_optimization.stage", ZO_CONFIG_I64, 3, 0, NULL},
      {"zero_optimization.offload_optimizer.device", ZO_CONFIG_STR, 0, 0, "nvme"},
      {"zero_optimization.offload_optimizer.nvme_path", ZO_CONFIG_STR, 0, 0, "/oo"},
      {"zero_optimization.offload_optimizer.pin_memory", ZO_CONFIG_BOOL, 1, 0, NULL},
      {"zero_optimization.offload_optimizer.buffer_count", ZO_CONFIG_I64, 6, 0, NULL},
      {"zero_optimization.offload_optimizer.pipeline_read", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"zero_optimization.offload_optimizer.pipeline_write", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"zero_optimization.offload_optimizer.ratio", ZO_CONFIG_F64, 0, 0.75, NULL},
      {"zero_optimization.offload_param.device", ZO_CONFIG_STR, 0, 0, "cpu"},
      {"zero_optimization.offload_param.nvme_path", ZO_CONFIG_STR, 0, 0, "/op"},
      {"zero_optimization.offload_param.pin_memory", ZO_CONFIG_BOOL, 1, 0, NULL},
      {"zero_optimization.offload_param.buffer_count", ZO_CONFIG_I64, 7, 0, NULL},
      {"zero_optimization.offload_param.buffer_size", ZO_CONFIG_I64, 4321, 0, NULL},
      {"zero_optimization.offload_param.max_in_cpu", ZO_CONFIG_I64, 5432, 0, NULL},
      {"zero_optimization.sub_group_size", ZO_CONFIG_I64, 1234, 0, NULL},
      {"zero_optimization.stage3_prefetch_bucket_size", ZO_CONFIG_I64, 111, 0, NULL},
      {"zero_optimization.stage3_max_live_parameters", ZO_CONFIG_I64, 222, 0, NULL},
      {"zero_optimization.stage3_max_reuse_distance", ZO_CONFIG_I64, 333, 0, NULL},
      {"zero_optimization.stage3_param_persistence_threshold", ZO_CONFIG_I64, 444, 0, NULL},
      {"zero_optimization.overlap_comm", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"zero_optimization.reduce_bucket_size", ZO_CONFIG_I64, 555, 0, NULL},
      {"zero_optimization.allgather_bucket_size", ZO_CONFIG_I64, 666, 0, NULL},
      {"zero_optimization.contiguous_gradients", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"aio.block_size", ZO_CONFIG_I64, 8192, 0, NULL},
      {"aio.queue_depth", ZO_CONFIG_I64, 16, 0, NULL},
      {"aio.intra_op_parallelism", ZO_CONFIG_I64, 2, 0, NULL},
      {"aio.single_submit", ZO_CONFIG_BOOL, 1, 0, NULL},
      {"aio.overlap_events", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"aio.use_gds", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"zoffload.device", ZO_CONFIG_STR, 0, 0, "host"},
      {"zoffload.device_memory_limit", ZO_CONFIG_I64, 65536, 0, NULL},
      {"zoffload.adam_threads", ZO_CONFIG_I64, 3, 0, NULL},
      {"zoffload.optimizer_state_dtype", ZO_CONFIG_STR, 0, 0, "bf16"},
      {"zoffload.swap_checksum", ZO_CONFIG_BOOL, 1, 0, NULL},
      {"zoffload.swap_sqpoll", ZO_CONFIG_BOOL, 1, 0, NULL},
      {"zoffload.delayed_param_update", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"zoffload.delayed_param_update_warmup_steps", ZO_CONFIG_I64, 17, 0, NULL},
      {"zoffload.host_link_gbps", ZO_CONFIG_F64, 0, 12.5, NULL},
      {"zoffload.device_arena_bytes", ZO_CONFIG_I64, ZO_ARENA_FIT, 0, NULL},
      {"zoffload.comm", ZO_CONFIG_STR, 0, 0, "mpi"},
      {"zoffload.comm_timeout_s", ZO_CONFIG_F64, 0, 90, NULL},
      {"zoffload.pinned_fraction", ZO_CONFIG_F64, 0, 0.5, NULL},
      {"zoffload.allow_pageable_host", ZO_CONFIG_BOOL, 1, 0, NULL},
      {"zoffload.placement", ZO_CONFIG_STR, 0, 0, "auto"},
      {"zoffload.optimizer_max_in_cpu", ZO_CONFIG_I64, 7654, 0, NULL},
      {"zoffload.placement_host_bytes", ZO_CONFIG_I64, 3221225472, 0, NULL},
      {"zoffload.early_adam", ZO_CONFIG_BOOL, 0, 0, NULL},
      {"zoffload.speeds.nvme_read_gbps", ZO_CONFIG_F64, 0, 3.25, NULL},
      {"zoffload.speeds.nvme_write_gbps", ZO_CONFIG_F64, 0, 1.5, NULL},
      {"zoffload.speeds.h2d_gbps", ZO_CONFIG_F64, 0, 22, NULL},
      {"zoffload.speeds.d2h_gbps", ZO_CONFIG_F64, 0, 21.5, NULL},
      {"zoffload.speeds.adam_gparams_per_s", ZO_CONFIG_F64, 0, 0.75, NULL},
  };
  size_t n_want = sizeof want / sizeof want[0];
  zo_config_t c;
  CHECK_EQ(parse(j, &c), ZO_OK);
  /* the table lists exactly these paths: a new line in it needs its value here */
  size_t n = 0;
  zo_config_value_type t;
  while (zo_config_key_at(n, &t)) n++;
  CHECK_EQ((long long)n, (long long)n_want);
  CHECK(zo_config_key_at(n, NULL) == NULL);
  for (size_t i = 0; i < n_want; i++) {
    const want_key *w = &want[i];
    CHECK_EQ((int)zo_config_key_type(w->path), (int)w->type);
    int64_t iv = -12345;
    double fv = -1;
    int bv = -1;
    const char *sv = NULL;
    switch (w->type) {
      case ZO_CONFIG_I64:
        CHECK_EQ(zo_config_get_i64(&c, w->path, &iv), ZO_OK);
        if (iv != w->i)
          fprintf(stderr, "  %s = %lld, want %lld\n", w->path, (long long)iv, (long long)w->i);
        CHECK(iv == w->i);
        CHECK_EQ(zo_config_get_f64(&c, w->path, &fv),
                 ZO_ERR_INVALID_ARG); /* wrong type, *out unchanged */
        CHECK(fv == -1);
        break;
      case ZO_CONFIG_F64:
        CHECK_EQ(zo_config_get_f64(&c, w->path, &fv), ZO_OK);
        if (fv != w->f) fprintf(stderr, "  %s = %.17g, want %.17g\n", w->path, fv, w->f);
        CHECK(fv == w->f);
        CHECK_EQ(zo_config_get_i64(&c, w->path, &iv), ZO_ERR_INVALID_ARG);
        CHECK(iv == -12345);
        break;
      case ZO_CONFIG_BOOL:
        CHECK_EQ(zo_config_get_bool(&c, w->path, &bv), ZO_OK);
        if (bv != w->i) fprintf(stderr, "  %s = %d, want %lld\n", w->path, bv, (long long)w->i);
        CHECK(bv == w->i);
        CHECK_EQ(zo_config_get_str(&c, w->path, &sv), ZO_ERR_INVALID_ARG);
        break;
      case ZO_CONFIG_STR:
        CHECK_EQ(zo_config_get_str(&c, w->path, &sv), ZO_OK);
        if (!sv || strcmp(sv, w->s))
          fprintf(stderr, "  %s = \"%s\", want \"%s\"\n", w->path, sv ? sv : "(null)", w->s);
        CHECK(sv && !strcmp(sv, w->s));
        CHECK_EQ(zo_config_get_bool(&c, w->path, &bv), ZO_ERR_INVALID_ARG);
        break;
    }
  }
  /* the defaults' names: no scheduler block, grad_accum_dtype not given, AdamW */
  CHECK_EQ(parse("{\"train_batch_size\": 2, \"optimizer\": {\"type\": \"AdamW\"}}", &c), ZO_OK);
  const char *sv = NULL;
  CHECK_EQ(zo_config_get_str(&c, "scheduler.type", &sv), ZO_OK);
  CHECK(!strcmp(sv, "none"));
  CHECK_EQ(zo_config_get_str(&c, "data_types.grad_accum_dtype", &sv), ZO_OK);
  CHECK(!strcmp(sv, ""));
  CHECK_EQ(zo_config_get_str(&c, "optimizer.type", &sv), ZO_OK);
  CHECK(!strcmp(sv, "AdamW"));
  CHECK_EQ(zo_config_get_str(&c, "zero_optimization.offload_param.device", &sv), ZO_OK);
  CHECK(!strcmp(sv, "none"));
  int64_t iv = 0;
  CHECK_EQ(zo_config_get_i64(&c, "gradient_accumulation_steps", &iv), ZO_OK);
  CHECK(iv == 1); /* only train_batch_size: gas = 1 (DeepSpeed) */
  CHECK(iv == c.gradient_accumulation_steps);
  /* errors name the path and the type */
  iv = 42;
  CHECK_EQ(zo_config_get_i64(&c, "zero_optimization.stag", &iv), ZO_ERR_INVALID_ARG);
  CHECK(iv == 42);
  CHECK_HAS(zo_last_error(),
            "config path \"zero_optimization.stag\": not a key zo_config_get_i64 reads");
  CHECK_EQ(zo_config_get_i64(&c, "optimizer.params.lr", &iv), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(),
            "config path \"optimizer.params.lr\" is a real (zo_config_get_f64), not an integer");
  CHECK_EQ(zo_config_get_str(&c, "zero_optimization.stage", &sv), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "is an integer (zo_config_get_i64), not a string");
  CHECK_EQ(zo_config_get_i64(&c, "", &iv), ZO_ERR_INVALID_ARG);
  CHECK_EQ(zo_config_get_i64(NULL, "zero_optimization.stage", &iv), ZO_ERR_INVALID_ARG);
  CHECK_EQ(zo_config_get_i64(&c, NULL, &iv), ZO_ERR_INVALID_ARG);
  CHECK_EQ(zo_config_get_i64(&c, "zero_optimization.stage", NULL), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "zo_config_get_i64: out is NULL");
  CHECK_EQ((int)zo_config_key_type("zero_optimization.stag"), 0);
  CHECK_EQ((int)zo_config_key_type(NULL), 0);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "tests/config";
  zo_log_set_handler(on_log, NULL, ZO_LOG_DEBUG);
  test_deepspeed_example(dir);
  test_zero_infinity(dir);
  test_defaults_and_values();
  test_batch();
  test_errors();
  test_malformed(dir);
  test_warnings();
  test_inert_values();
  test_unknown_keys();
  test_legacy();
  test_lr();
  test_boundaries();
  test_many_unknown();
  test_unknown_key_escaped();
  test_offload_device_parse();
  test_get();
  return zo_test_finish("test_config");
}
