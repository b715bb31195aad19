/*
 * test_param_cache.c - the host cache of nvme parameters (offload_param.max_in_cpu; eng_set_param_cache): with
 * parameters on nvme, the first tensors within the cache's budget keep their working copy in host memory
 * ("param_host") and the rest stay in params.swp. Training with any budget gives the same master and working
 * weights BIT FOR BIT as budget 0 (nothing cached): budgets 0, one that splits the tensors (the first two) and one
 * that holds all of them, set through the internal setter or the config key, with the optimizer state on cpu and on
 * nvme, clipping on (Adam at the step) and off (Adam as gradients land), and (one rank, host backend) on the device.
 * The device holds less than the model, so tensors are evicted and fetched again within a step. Cached tensors are
 * never read from disk: with the state off NVMe, a forward pass reads exactly the uncached tensors (strictly fewer
 * bytes with the split, none with every tensor cached, and then there is no params.swp at all). A checkpoint saved
 * with the split loads into engines with budget 0 and with everything cached and trains on to the bits of an
 * uninterrupted run. Run under `mpirun -np 2`: stage 3 partitions the working copies (each rank caches its blocks).
 * usage: test_param_cache [--backend host|cuda] [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip.
 */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#include "engine_internal.h" /* eng_set_param_cache, zo_param_t's pw_host */
#include "zo_test_backend.h"

enum { NP = 5, STEPS = 4 };
/* t1 (37 elements) is persistent (stage3_param_persistence_threshold 100); 11737 elements, 23474 bytes of bf16 */
static const size_t k_sizes[NP] = {3000, 37, 5000, 1200, 2500};
static zo_comm_t *g_comm;
static int R, W;
static char g_dir[4000];
static char g_ckpt
    [4096]; /* the checkpoint root: under rank 0's g_dir on every rank (a save is collective) */

/* The budget that caches the first two tensors (3037 elements on one rank; on two, their blocks 1500 + 19 of the
 * 3037 allowed, the third's 2500 not): the split. */
#define SPLIT ((size_t)3037)
#define BUDGET_CONFIG ((size_t)-2) /* run(): the budget the config's max_in_cpu gives, no setter */

typedef struct result {
  float *master[NP];     /* this rank's shard */
  uint16_t *working[NP]; /* the whole tensor, bf16, as fetched */
  int n_cached;          /* tensors whose working copy is in param_host */
  int swp_seen;          /* a params.swp under the nvme path while the engine lived */
  uint64_t window_read;  /* NVMe bytes read by one forward pass after training (see run()) */
  uint64_t window_want;  /* what reading every fetched tensor that is in params.swp once comes to */
  zo_engine_mem m;       /* at the end */
} result;

static void result_free(result *r) {
  for (int i = 0; i < NP; i++) free(r->master[i]), free(r->working[i]);
  memset(r, 0, sizeof *r);
}

static void config(zo_config_t *c, zo_offload_device otier, int clip) {
  zo_config_defaults(c);
  c->train_micro_batch_size_per_gpu = c->gradient_accumulation_steps = 1;
  c->train_batch_size = W;
  c->bf16.enabled = 1;
  c->optimizer.type = ZO_OPT_ADAMW;
  c->optimizer.adam_w_mode = 1;
  c->optimizer.lr = 1e-2;
  c->optimizer.weight_decay = 0.1;
  c->gradient_clipping = clip ? 1.0 : 0.0;
  c->zero.stage = 3;
  c->zero.sub_group_size = 4096;
  c->zero.offload_optimizer.device = otier;
  c->zero.offload_optimizer.buffer_count = 2;
  c->zero.offload_param.device = ZO_OFFLOAD_NVME;
  c->zero.offload_param.buffer_count = 2;
  c->zero.offload_param.pin_memory = otier == ZO_OFFLOAD_NVME; /* param_host pageable and pinned */
  c->zero.stage3_param_persistence_threshold = 100;
  c->zero.stage3_max_reuse_distance = 0;
  c->zero.stage3_prefetch_bucket_size = 6000;
  c->zoffload.adam_threads = 1;
  snprintf(c->zero.offload_optimizer.nvme_path, sizeof c->zero.offload_optimizer.nvme_path, "%s",
           g_dir);
  snprintf(c->zero.offload_param.nvme_path, sizeof c->zero.offload_param.nvme_path, "%s", g_dir);
}

/* Gradient element j of tensor i at step s: a multiple of 1/64 in (-2, 2), the same on every rank (so the
 * reduction's sum is exact in any order). */
static float grad_of(int s, int i, size_t j) {
  uint64_t h = (uint64_t)(s * 131 + i) * 0xbf58476d1ce4e5b9ull ^ j * 0x94d049bbull;
  h ^= h >> 29;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 32;
  return (float)((int)(h % 255) - 127) / 64.0f;
}

static int g_swp_seen;
static int find_swp(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb;
  if (type == FTW_F && !strcmp(path + ftw->base, "params.swp")) g_swp_seen = 1;
  return 0;
}

/*
 * One engine of @c with cache budget @budget (BUDGET_CONFIG: the config's), on a device of @limit bytes: steps
 * @from + 1 .. @to after loading weights (seeded) or, with @load, the checkpoint there; with @save, a checkpoint
 * there at the end. Then master and fetched working weights into @out. Returns 0, or 1 after a failed check.
 */
static int run(const zo_config_t *c, size_t budget, size_t limit, int from, int to,
               const char *load, const char *save, result *out) {
  memset(out, 0, sizeof *out);
  zo_device_t *dev = NULL;
  zo_engine_t *e = NULL;
  zo_param_t *ps[NP];
  void *scratch = NULL;
  float *buf = malloc(5000 * 4);
  uint16_t *g16 = malloc(5000 * 2);
  int bad = 1;
  if (!CHECK_OK(zo_test_device_create(limit, &dev)) ||
      !CHECK_OK(zo_device_malloc(dev, 5000 * 2, &scratch)) ||
      !CHECK_OK(zo_engine_create(c, dev, g_comm, &e)))
    goto out;
  for (int i = 0; i < NP; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    if (!CHECK_OK(zo_engine_register_param(e, name, k_sizes[i], &ps[i]))) goto out;
  }
  if (budget != BUDGET_CONFIG && !CHECK_OK(eng_set_param_cache(e, budget))) goto out;
  if (!CHECK_OK(zo_engine_finalize(e))) goto out;
  CHECK_ST(eng_set_param_cache(e, 0), ZO_ERR_INVALID_USAGE); /* after finalize */
  for (int i = 0; i < NP; i++) out->n_cached += ps[i]->pw_host;
  g_swp_seen = 0;
  nftw(g_dir, find_swp, 8, FTW_PHYS);
  out->swp_seen = g_swp_seen;
  if (load) {
    if (!CHECK_OK(zo_engine_load(e, load, NULL))) goto out;
  } else {
    uint64_t seed = 7;
    for (int i = 0; i < NP; i++) {
      for (size_t j = 0; j < k_sizes[i]; j++) buf[j] = zo_test_rand_pm1f(&seed);
      if (!CHECK_OK(zo_engine_load_param(e, ps[i], buf))) goto out;
    }
  }
  const void *w;
  for (int s = from + 1; s <= to; s++) {
    for (int i = 0; i < NP; i++) /* forward */
      if (!CHECK_OK(zo_engine_fetch(e, ps[i], &w, NULL)) || !CHECK_OK(zo_engine_release(e, ps[i])))
        goto out;
    for (int i = NP - 1; i >= 0; i--) { /* backward: fetch, produce the gradient, hand it over */
      for (size_t j = 0; j < k_sizes[i]; j++) buf[j] = grad_of(s, i, j);
      if (!CHECK_OK(zo_engine_fetch(e, ps[i], &w, NULL)) ||
          !CHECK_OK(zo_cast(g16, ZO_DTYPE_BF16, buf, ZO_DTYPE_F32, k_sizes[i], 1)) ||
          !CHECK_OK(zo_memcpy(dev, scratch, g16, k_sizes[i] * 2, ZO_COPY_H2D)) ||
          !CHECK_OK(zo_engine_grad_ready(e, ps[i], scratch, ZO_DTYPE_BF16)) ||
          !CHECK_OK(zo_engine_grad_fence(e, NULL)) || !CHECK_OK(zo_engine_release(e, ps[i])))
        goto out;
    }
    if (!CHECK_OK(zo_engine_step(e, NULL))) goto out;
  }
  if (save && !CHECK_OK(zo_engine_save(e, save, NULL, NULL, 0))) goto out;
  /* One forward pass whose reads are deterministic: no tensor on the device (the prefetches the step started
   * landed, then every device copy dropped), fetched on demand (trace off: no prefetch), with every params.swp
   * write on disk and its write-back region freed (no fetch is served from the ring, as one may be while the write
   * is in flight). Each tensor is read once if it is in params.swp, never if it is cached. */
  if (!CHECK_OK(zo_engine_synchronize(e)) || !CHECK_OK(eng_settle_fetches(e))) goto out;
  for (int i = 0; i < NP; i++) {
    if (!CHECK_OK(eng_wb_drain(e, ps[i], 0, 0))) goto out;
    if (ps[i]->pstate == P_RESIDENT) eng_drop_device_copy(e, ps[i]);
    if (eng_pw_in_file(e, ps[i]))
      out->window_want += zo_round_up(eng_pw_held(e, ps[i]) * 2, e->swap_align);
  }
  if (!CHECK_OK(eng_wb_reap(e)) || !CHECK_OK(zo_engine_set_trace(e, 0))) goto out;
  CHECK_EQ(eng_wb_live(e->wb), 0);
  zo_engine_mem m0;
  if (!CHECK_OK(zo_engine_mem_info(e, &m0))) goto out;
  for (int i = 0; i < NP; i++)
    if (!CHECK_OK(zo_engine_fetch(e, ps[i], &w, NULL)) || !CHECK_OK(zo_engine_release(e, ps[i])))
      goto out;
  if (!CHECK_OK(zo_engine_mem_info(e, &out->m)) || !CHECK_OK(zo_engine_set_trace(e, 1))) goto out;
  out->window_read = out->m.nvme_read_bytes - m0.nvme_read_bytes;
  for (int i = 0; i < NP;
       i++) { /* master and working weights after the steps (the pass above changed nothing) */
    size_t shard_n;
    out->master[i] = malloc(k_sizes[i] * 4);
    out->working[i] = malloc(k_sizes[i] * 2);
    if (!CHECK_OK(zo_engine_get_master(e, ps[i], out->master[i], NULL, &shard_n)) ||
        !CHECK_OK(zo_engine_fetch(e, ps[i], &w, NULL)) ||
        !CHECK_OK(zo_memcpy(dev, out->working[i], w, k_sizes[i] * 2, ZO_COPY_D2H)) ||
        !CHECK_OK(zo_engine_release(e, ps[i])))
      goto out;
    memset(out->master[i] + shard_n, 0, (k_sizes[i] - shard_n) * 4); /* past this rank's shard */
  }
  bad = 0;
out:
  zo_engine_destroy(e);
  if (scratch) zo_device_free(dev, scratch);
  zo_device_destroy(dev);
  free(buf);
  free(g16);
  return bad;
}

/* @got's master and working weights equal @ref's, bit for bit. */
static int same_bits(const result *got, const result *ref, const char *what) {
  size_t bad = 0;
  for (int i = 0; i < NP; i++) {
    char name[96];
    snprintf(name, sizeof name, "%s: master t%d", what, i);
    bad += CHECK_BYTES(name, got->master[i], ref->master[i], k_sizes[i] * 4);
    snprintf(name, sizeof name, "%s: working t%d", what, i);
    bad += CHECK_BYTES(name, got->working[i], ref->working[i], k_sizes[i] * 2);
  }
  return bad == 0;
}

/* Elements this rank holds of the first @n tensors' working copies (stage 3: their blocks on several ranks). */
static size_t held_el(int n) {
  size_t s = 0;
  for (int i = 0; i < n; i++) s += W > 1 ? (k_sizes[i] + (size_t)W - 1) / (size_t)W : k_sizes[i];
  return s;
}

/* Device bytes: the gradient scratch (10000) and about 16 KiB of working copies, below the 23474 of the model. */
static const size_t k_limit = 10000 + 16 * 1024;

static void test_budgets(zo_offload_device otier, int clip) {
  const char *label_o = zo_offload_device_name(otier);
  /* offload_optimizer "none": master, moments and gradients in device memory too (14 bytes an element, aligned) */
  const size_t limit = k_limit + (otier == ZO_OFFLOAD_NONE ? 200 * 1024 : 0);
  if (otier == ZO_OFFLOAD_NONE && zo_test_kind == ZO_DEVICE_CUDA) {
    printf("skip optimizer none: device Adam with offload_param \"nvme\" is refused on cuda\n");
    return;
  }
  zo_config_t c;
  config(&c, otier, clip);
  result r[4];
  static const size_t budgets[3] = {0, SPLIT, SIZE_MAX};
  static const char *const names[4] = {"budget 0", "budget 3037 (split)", "budget all",
                                       "max_in_cpu 3037"};
  int bad = 0;
  for (int k = 0; k < 3; k++) bad |= run(&c, budgets[k], limit, 0, STEPS, NULL, NULL, &r[k]);
  c.zero.offload_param.max_in_cpu = (int64_t)SPLIT,
  c.zero.offload_param.max_in_cpu_set = 1; /* the config's key */
  bad |= run(&c, BUDGET_CONFIG, limit, 0, STEPS, NULL, NULL, &r[3]);
  if (bad) goto out;
  static const int want_cached[4] = {0, 2, NP, 2};
  for (int k = 0; k < 4; k++) {
    char what[128];
    snprintf(what, sizeof what, "optimizer %s, clip %d, %s", label_o, clip, names[k]);
    bad |= !CHECK_EQ(r[k].n_cached, want_cached[k]);
    bad |= !same_bits(&r[k], &r[0], what);
    /* params.swp exists while some tensor is read from it; the working weights' bytes are both tiers' */
    bad |= !CHECK_EQ(r[k].swp_seen, want_cached[k] < NP);
    if (want_cached[k] == NP) bad |= !CHECK_EQ(r[k].m.param_bytes, held_el(NP) * 2);
    bad |= !CHECK(r[k].m.param_bytes >= held_el(want_cached[k]) * 2);
  }
  /* Cached tensors read nothing from disk. The optimizer state on cpu (or the device) leaves params.swp the only
   * NVMe traffic: the forward pass after training reads exactly the uncached tensors, strictly fewer with the
   * split, none with every tensor cached (then nothing was read or written in the whole run either). The state on
   * nvme adds reads whose count depends on when its writes land (read-ahead), so only the bits are compared. */
  if (otier != ZO_OFFLOAD_NVME) {
    for (int k = 0; k < 4; k++) bad |= !CHECK_EQ(r[k].window_read, r[k].window_want);
    bad |= !CHECK(r[1].window_read < r[0].window_read);
    bad |= !CHECK_EQ(r[2].window_read, 0);
    bad |= !CHECK_EQ(r[3].window_read, r[1].window_read);
    bad |= !CHECK_EQ(r[2].m.nvme_read_bytes, 0);
    bad |= !CHECK_EQ(r[2].m.nvme_write_bytes, 0);
    bad |= !CHECK(r[1].m.nvme_write_bytes <
                  r[0].m.nvme_write_bytes); /* one params.swp write per uncached update */
  }
  if (!bad)
    printf(
        "ok   optimizer %-4s clip %d rank %d of %d: same bits with 0/2/5 tensors cached; a forward pass reads "
        "%llu -> %llu -> %llu bytes; the run reads %llu -> %llu -> %llu, writes %llu -> %llu -> %llu\n",
        label_o, clip, R, W, (unsigned long long)r[0].window_read,
        (unsigned long long)r[1].window_read, (unsigned long long)r[2].window_read,
        (unsigned long long)r[0].m.nvme_read_bytes, (unsigned long long)r[1].m.nvme_read_bytes,
        (unsigned long long)r[2].m.nvme_read_bytes, (unsigned long long)r[0].m.nvme_write_bytes,
        (unsigned long long)r[1].m.nvme_write_bytes, (unsigned long long)r[2].m.nvme_write_bytes);
out:
  for (int k = 0; k < 4; k++) result_free(&r[k]);
}

/* A checkpoint saved after 2 steps with the split continues, loaded with budget 0 and with every tensor cached,
 * to the bits of 4 uninterrupted steps (the checkpoint holds master weights; each engine rebuilds its working
 * copies, in params.swp or param_host, from them). */
static void test_checkpoint(zo_offload_device otier) {
  zo_config_t c;
  config(&c, otier, 1);
  const char *root = g_ckpt;
  result ref, half, got[2];
  memset(got, 0, sizeof got);
  int bad = run(&c, 0, k_limit, 0, STEPS, NULL, NULL, &ref);
  bad |= run(&c, SPLIT, k_limit, 0, STEPS / 2, NULL, root, &half);
  static const size_t budgets[2] = {0, SIZE_MAX};
  for (int k = 0; k < 2 && !bad; k++) {
    bad |= run(&c, budgets[k], k_limit, STEPS / 2, STEPS, root, NULL, &got[k]);
    if (!bad)
      bad |= !same_bits(&got[k], &ref,
                        k ? "resumed with every tensor cached" : "resumed with budget 0");
  }
  if (!bad)
    printf(
        "ok   checkpoint of the split (optimizer %s, rank %d of %d) resumed with 0 and 5 tensors cached: the bits "
        "of an uninterrupted run\n",
        otier == ZO_OFFLOAD_CPU ? "cpu" : "nvme", R, W);
  result_free(&ref), result_free(&half), result_free(&got[0]), result_free(&got[1]);
  if (R == 0) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  }
  CHECK_OK(zo_comm_barrier(g_comm));
}

int main(int argc, char **argv) {
  int rc = zo_test_backend_arg("test_param_cache", "[SCRATCH_BASE]", &argc, &argv);
  if (rc) return rc;
  rc = zo_test_rank_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-pcache", &g_comm, g_dir,
                                sizeof g_dir);
  if (rc) return rc;
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);
  snprintf(g_ckpt, sizeof g_ckpt, "%s/ckpt", g_dir);
  CHECK_OK(zo_comm_broadcast(g_comm, g_ckpt, sizeof g_ckpt,
                             0)); /* every rank saves into rank 0's root */
  for (int clip = 0; clip < 2; clip++) {
    test_budgets(ZO_OFFLOAD_CPU, clip);
    test_budgets(ZO_OFFLOAD_NVME, clip);
  }
  if (W == 1)
    test_budgets(ZO_OFFLOAD_NONE, 1); /* stage 3 with the state on the device: one rank only */
  test_checkpoint(ZO_OFFLOAD_CPU);
  test_checkpoint(ZO_OFFLOAD_NVME);
  CHECK_OK(zo_comm_barrier(g_comm));
  CHECK_EQ(zo_test_count_entries(g_dir), 0); /* every swap file removed */
  rmdir(g_dir);
  zo_comm_destroy(g_comm);
  return zo_test_finish("test_param_cache");
}
