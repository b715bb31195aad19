/*
 * test_budget.c - the start-up budget (zoffload/budget.h) refuses each tier
 * that cannot fit, before anything is allocated, with a message naming the
 * tier, the bytes and the key to change: device memory under a device limit,
 * host memory past MemAvailable, NVMe past the free space of nvme_path; and a
 * configuration that fits passes. Tensors of up to 4e12 elements are only
 * registered, never finalized, so nothing that size is allocated. Pinned
 * memory over zoffload.pinned_fraction of MemTotal (a stand-in MemTotal,
 * ZO_TEST_MEMTOTAL) is refused; over RLIMIT_MEMLOCK it is a warning by design,
 * and root's CAP_IPC_LOCK lifts the limit, so that is not tested here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/budget.h"
#include "zoffload/engine.h"

static void base_config(zo_config_t *c) {
  zo_config_defaults(c);
  c->train_batch_size = c->train_micro_batch_size_per_gpu = 1;
  c->gradient_accumulation_steps = 1;
  c->bf16.enabled = 1;
  c->zero.stage = 2;
  c->zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  c->zoffload.adam_threads = 1;
}

/* Budget of one tensor of @n elements on @cfg (device limit @limit bytes, 0 = none); the message of
 * zo_budget_check() in @msg. Returns its status. */
static zo_status budget_of(const zo_config_t *cfg, size_t n, size_t limit, zo_budget *b, char *msg,
                           size_t cap) {
  zo_device_t *dev = NULL;
  zo_engine_t *e = NULL;
  zo_param_t *p;
  msg[0] = 0;
  if (zo_device_create(ZO_DEVICE_HOST, 0, limit, &dev) != ZO_OK ||
      zo_engine_create(cfg, dev, NULL, &e) != ZO_OK ||
      zo_engine_register_param(e, "h.0.mlp.c_fc.weight", n, &p) != ZO_OK ||
      zo_engine_budget(e, NULL, b) != ZO_OK) {
    snprintf(msg, cap, "setup: %s", zo_last_error());
    zo_engine_destroy(e);
    zo_device_destroy(dev);
    return ZO_ERR_INVALID_USAGE;
  }
  zo_status st = zo_budget_check(b);
  if (st != ZO_OK) snprintf(msg, cap, "%s", zo_last_error());
  zo_engine_destroy(e);
  zo_device_destroy(dev);
  return st;
}

static const zo_budget_line *line(const zo_budget *b, zo_tier t) {
  for (int i = 0; i < b->n_lines; i++)
    if (b->line[i].tier == t) return &b->line[i];
  return NULL;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  zo_config_t cfg;
  zo_budget b;
  char msg[2048];

  /* fits: 1e6 elements, optimizer state on cpu */
  base_config(&cfg);
  CHECK_OK(budget_of(&cfg, 1000000, 0, &b, msg, sizeof msg));
  CHECK(b.fits);
  CHECK(line(&b, ZO_TIER_HOST) && line(&b, ZO_TIER_HOST)->engine_bytes >= 1000000 * 12);

  /* device: bf16 working weights of 1e6 elements (2 MB) under a 1 MiB device limit */
  CHECK_ST(budget_of(&cfg, 1000000, 1 << 20, &b, msg, sizeof msg), ZO_ERR_OUT_OF_MEMORY);
  printf("device: %s\n", msg);
  CHECK(!b.fits && line(&b, ZO_TIER_DEVICE) && !line(&b, ZO_TIER_DEVICE)->fits);
  CHECK(line(&b, ZO_TIER_DEVICE)->need >= 2000000);
  CHECK_HAS(msg, "device memory");
  CHECK_HAS(msg, "offload_param");

  /* host: 4e11 elements with fp32 master weights and Adam state in host memory (4.8 TB) */
  CHECK_ST(budget_of(&cfg, 400000000000ull, 0, &b, msg, sizeof msg), ZO_ERR_OUT_OF_MEMORY);
  printf("host: %s\n", msg);
  CHECK(line(&b, ZO_TIER_HOST) && !line(&b, ZO_TIER_HOST)->fits);
  CHECK_HAS(msg, "host memory: needs ");
  CHECK_HAS(msg, "offload_optimizer.device");

  /* nvme: 4e12 elements of state and working weights on nvme (56 TB) against the free space of @dir */
  base_config(&cfg);
  cfg.zero.stage = 3;
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  cfg.zero.offload_param.device = ZO_OFFLOAD_NVME;
  cfg.zero.sub_group_size = 1000000;
  cfg.zero.stage3_max_live_parameters = cfg.zero.offload_param.buffer_size =
      4000000000000ll; /* hold the tensor */
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s",
           dir);
  snprintf(cfg.zero.offload_param.nvme_path, sizeof cfg.zero.offload_param.nvme_path, "%s", dir);
  CHECK_ST(budget_of(&cfg, 4000000000000ull, 0, &b, msg, sizeof msg), ZO_ERR_OUT_OF_MEMORY);
  printf("nvme: %s\n", msg);
  CHECK(line(&b, ZO_TIER_NVME) && !line(&b, ZO_TIER_NVME)->fits);
  CHECK_HAS(msg, "nvme space at ");
  CHECK_HAS(msg, "nvme_path");

  /* host, through the host cache of nvme parameters: offload_param.max_in_cpu written as 1e12 keeps 4e11 bf16
   * working weights (800 GB) in host memory; the advice names the key */
  cfg.zero.offload_param.max_in_cpu = 1000000000000ll, cfg.zero.offload_param.max_in_cpu_set = 1;
  CHECK_ST(budget_of(&cfg, 400000000000ull, 0, &b, msg, sizeof msg), ZO_ERR_OUT_OF_MEMORY);
  printf("host, nvme parameters cached: %s\n", msg);
  CHECK(line(&b, ZO_TIER_HOST) && !line(&b, ZO_TIER_HOST)->fits);
  CHECK(line(&b, ZO_TIER_HOST) && line(&b, ZO_TIER_HOST)->engine_bytes >= 800000000000ull);
  CHECK_HAS(msg, "offload_param.max_in_cpu");
  cfg.zero.offload_param.max_in_cpu_set =
      0; /* not written: nothing cached (the tensor passes through staging) */
  budget_of(&cfg, 400000000000ull, 0, &b, msg, sizeof msg);
  CHECK(!strstr(msg, "max_in_cpu"));

  /* host, through the pinned sub-group buffers: DeepSpeed's default sub_group_size (1e9) with state on nvme */
  cfg.zero.sub_group_size = 1000000000;
  cfg.zero.offload_param.device = ZO_OFFLOAD_NONE;
  cfg.zero.stage = 2;
  cfg.zero.offload_optimizer.buffer_count = 4;
  CHECK_ST(budget_of(&cfg, 2000000000, 0, &b, msg, sizeof msg), ZO_ERR_OUT_OF_MEMORY);
  printf("sub-groups: %s\n", msg);
  CHECK_HAS(msg, "sub_group_size");

  /* pinned: at most zoffload.pinned_fraction (default 0.85) of MemTotal, here a stand-in MemTotal of 256 MiB
   * (ZO_TEST_MEMTOTAL); 2e7 elements of pinned fp32 master weights, Adam state and gradients (> 240 MB) are
   * refused, naming the rule and what to change; unpinned, or with a larger fraction of a larger machine, they fit. */
  setenv("ZO_TEST_MEMTOTAL", "268435456", 1);
  base_config(&cfg);
  cfg.zero.offload_optimizer.pin_memory = 1;
  CHECK_ST(budget_of(&cfg, 20000000, 0, &b, msg, sizeof msg), ZO_ERR_OUT_OF_MEMORY);
  printf("pinned: %s\n", msg);
  CHECK(line(&b, ZO_TIER_PINNED) && !line(&b, ZO_TIER_PINNED)->fits);
  CHECK(line(&b, ZO_TIER_PINNED) &&
        line(&b, ZO_TIER_PINNED)->available <= (size_t)(268435456 * 0.85));
  CHECK_HAS(msg, "pinned memory: needs ");
  CHECK_HAS(msg, "85% of MemTotal");
  CHECK_HAS(msg, "offload_optimizer.device to \"nvme\"");
  CHECK_HAS(msg, "pin_memory");
  CHECK_HAS(msg, "sub_group_size");
  cfg.zero.offload_optimizer.pin_memory = 0;
  CHECK_OK(budget_of(&cfg, 20000000, 0, &b, msg, sizeof msg));
  cfg.zero.offload_optimizer.pin_memory = 1;
  cfg.zoffload.pinned_fraction = 1.0;
  setenv("ZO_TEST_MEMTOTAL", "1073741824", 1);
  CHECK_OK(budget_of(&cfg, 20000000, 0, &b, msg, sizeof msg));
  CHECK(line(&b, ZO_TIER_PINNED) && line(&b, ZO_TIER_PINNED)->fits);

  /* a ZO_TEST_MEMTOTAL that is not a byte count in [1, SIZE_MAX - 1] is refused naming it (was: "-1" read as
   * SIZE_MAX, so the 2e7 pinned elements "fit" any fraction of an unlimited machine; "1e9" silently ignored) */
  cfg.zoffload.pinned_fraction = 0.85;
  static const char *const bad[] = {
      "-1", "1e9", "64G", " 5", "+5", "0", "18446744073709551615", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("ZO_TEST_MEMTOTAL", bad[i], 1);
    char want[64];
    snprintf(want, sizeof want, "ZO_TEST_MEMTOTAL='%s'", bad[i]);
    CHECK_ST(budget_of(&cfg, 20000000, 0, &b, msg, sizeof msg),
             ZO_ERR_INVALID_USAGE); /* a setup failure */
    CHECK_HAS(msg, want);
    CHECK_HAS(msg, "expected a byte count in [1, ");
  }
  printf("ZO_TEST_MEMTOTAL=-1: %s\n", (setenv("ZO_TEST_MEMTOTAL", "-1", 1),
                                       budget_of(&cfg, 20000000, 0, &b, msg, sizeof msg), msg));
  setenv("ZO_TEST_MEMTOTAL", "", 1); /* empty: as unset, /proc/meminfo */
  CHECK_OK(budget_of(&cfg, 1000, 0, &b, msg, sizeof msg));
  unsetenv("ZO_TEST_MEMTOTAL");
  return zo_test_finish("test_budget");
}
