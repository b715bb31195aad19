/*
 * fuzz_config.c - fuzz target over the config parser and what consumes a
 * parsed config: zo_config_parse() with and without "auto" values, then
 * zo_config_describe() and the learning-rate schedule at a few steps.
 * Built two ways (tests/fuzz.cmake):
 *   - with clang's libFuzzer (-fsanitize=fuzzer): LLVMFuzzerTestOneInput is
 *     the entry point, coverage-guided, run with a time limit;
 *   - without it: the main() below, a deterministic mutation driver (fixed
 *     seed: the same inputs every run) over the corpus given on the command
 *     line: bit flips, byte insertions and deletions, splices of two corpus
 *     files, JSON-aware swaps (a number for an extreme, a value for "auto",
 *     a key doubled), for a number of executions or seconds.
 * Either way under ASan + UBSan in the sanitizer build. A crash is the
 * sanitizer's report and a non-zero exit; a hang is an input taking longer
 * than the time limit (SIGALRM). Every accepted config is also checked
 * against the invariants zoffload/config.h documents (check_invariants():
 * train_batch_size == micro * gas * world without overflow, every integer
 * and real within its range, reals representable in float32): a violation
 * prints "fuzz_config: INVARIANT: ..." and aborts, the input saved as
 * fuzz-crash.json (the deterministic driver; libFuzzer saves its own).
 * Boundary values (0, 1, -1, 2^31+-1, 2^32+-1, 2^62, 2^63-1, 1e-50, 1e40,
 * NaN, their real forms) come from tests/fuzz_config.dict (libFuzzer's
 * -dict=; the driver reads it too) and the seeds tests/config/fuzz_seed_*.
 * Prints "N executions in S s, 0 crashes, 0 hangs" when done. In the style
 * of zstd's tests/fuzz.
 */
#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "zoffload/config.h"

static void quiet(zo_log_level lvl, const char *msg, void *user) { (void)lvl, (void)msg, (void)user; }

static void save_input(const char *name); /* the driver's: the input running now, to a file */

/* A documented invariant of an accepted config does not hold: say which, keep the input, abort (a crash). */
static __attribute__((noreturn)) void broken(const char *what, long double got) {
  fprintf(stderr, "fuzz_config: INVARIANT: %s (got %.21Lg); input saved as fuzz-crash.json\n", what, got);
  save_input("fuzz-crash.json");
  abort();
}
#define INV_RANGE(x, lo, hi, what) \
  do { if (!((long double)(x) >= (long double)(lo) && (long double)(x) <= (long double)(hi))) broken(what, (x)); } while (0)
/* 0, or a finite normal float32 of either sign (what Adam computes in) */
#define INV_F32(x, what) \
  do { if ((x) != 0 && !(fabs(x) >= FLT_MIN && fabs(x) <= FLT_MAX)) broken(what " is 0, subnormal or inf as float32", (x)); } while (0)

/* What zoffload/config.h promises of every config zo_config_parse() accepts, with @ws ranks. */
static void check_invariants(const zo_config_t *c, int ws) {
  int64_t mg, prod = 0;
  if (c->train_micro_batch_size_per_gpu < 1) broken("train_micro_batch_size_per_gpu >= 1", c->train_micro_batch_size_per_gpu);
  if (c->gradient_accumulation_steps < 1) broken("gradient_accumulation_steps >= 1", c->gradient_accumulation_steps);
  if (__builtin_mul_overflow(c->train_micro_batch_size_per_gpu, c->gradient_accumulation_steps, &mg) ||
      __builtin_mul_overflow(mg, (int64_t)ws, &prod))
    broken("micro * gas * world_size fits in int64 (an accepted batch whose product overflows)",
           (long double)c->train_micro_batch_size_per_gpu * c->gradient_accumulation_steps * ws);
  if (c->train_batch_size != prod) broken("train_batch_size == micro * gas * world_size", c->train_batch_size);
  INV_RANGE(c->steps_per_print, 1, INT64_MAX, "steps_per_print in [1, 2^63-1]");
  INV_RANGE(c->gradient_clipping, 0, FLT_MAX, "gradient_clipping in [0, FLT_MAX]");
  INV_F32(c->gradient_clipping, "gradient_clipping");
  INV_RANGE(c->optimizer.lr, 0, ZO_CONFIG_LR_MAX, "optimizer.lr in [0, 100]");
  INV_F32(c->optimizer.lr, "optimizer.lr");
  if (!((float)c->optimizer.beta1 < 1.0f && c->optimizer.beta1 >= 0)) broken("beta1 in [0, 1) as float32", c->optimizer.beta1);
  if (!((float)c->optimizer.beta2 < 1.0f && c->optimizer.beta2 >= 0)) broken("beta2 in [0, 1) as float32", c->optimizer.beta2);
  INV_F32(c->optimizer.beta1, "beta1");
  INV_F32(c->optimizer.beta2, "beta2");
  INV_RANGE(c->optimizer.eps, FLT_MIN, 1, "optimizer.eps in [FLT_MIN, 1] (> 0 as float32)");
  INV_RANGE(c->optimizer.weight_decay, 0, ZO_CONFIG_WEIGHT_DECAY_MAX, "optimizer.weight_decay in [0, 1e6]");
  INV_F32(c->optimizer.weight_decay, "optimizer.weight_decay");
  if (c->optimizer.adam_w_mode) {
    double lr = c->optimizer.lr;
    if (c->scheduler.type == ZO_SCHED_WARMUP_LR || c->scheduler.type == ZO_SCHED_WARMUP_DECAY_LR)
      lr = fmax(c->scheduler.warmup_min_lr, c->scheduler.warmup_max_lr);
    if (lr * c->optimizer.weight_decay > 1) broken("decoupled weight_decay * peak lr <= 1", lr * c->optimizer.weight_decay);
  }
  INV_RANGE(c->scheduler.warmup_min_lr, 0, ZO_CONFIG_LR_MAX, "scheduler.warmup_min_lr in [0, 100]");
  INV_RANGE(c->scheduler.warmup_max_lr, 0, ZO_CONFIG_LR_MAX, "scheduler.warmup_max_lr in [0, 100]");
  INV_F32(c->scheduler.warmup_min_lr, "scheduler.warmup_min_lr");
  INV_F32(c->scheduler.warmup_max_lr, "scheduler.warmup_max_lr");
  INV_RANGE(c->scheduler.warmup_num_steps, 0, INT64_MAX, "scheduler.warmup_num_steps >= 0");
  INV_RANGE(c->scheduler.total_num_steps, 0, INT64_MAX, "scheduler.total_num_steps >= 0");
  INV_RANGE(c->scheduler.cos_min_ratio, 0, 1, "scheduler.cos_min_ratio in [0, 1]");
  INV_RANGE(c->scheduler.warmup_min_ratio, 0, 1, "scheduler.warmup_min_ratio in [0, 1]");
  INV_RANGE(c->fp16.loss_scale, 0, ZO_CONFIG_LOSS_SCALE_MAX, "fp16.loss_scale in [0, 2^64]");
  INV_F32(c->fp16.loss_scale, "fp16.loss_scale");
  INV_RANGE(c->fp16.initial_scale_power, 0, 64, "fp16.initial_scale_power in [0, 64]");
  INV_RANGE(c->fp16.loss_scale_window, 1, INT64_MAX, "fp16.loss_scale_window >= 1");
  INV_RANGE(c->fp16.hysteresis, 1, 1 << 30, "fp16.hysteresis in [1, 2^30]");
  if (!(c->fp16.min_loss_scale > 0 && c->fp16.min_loss_scale <= ZO_CONFIG_LOSS_SCALE_MAX))
    broken("fp16.min_loss_scale in (0, 2^64]", c->fp16.min_loss_scale);
  INV_F32(c->fp16.min_loss_scale, "fp16.min_loss_scale");
  INV_RANGE(c->zero.stage, 0, 3, "zero_optimization.stage in [0, 3]");
  INV_RANGE(c->zero.offload_optimizer.buffer_count, 1, 1 << 20, "offload_optimizer.buffer_count in [1, 2^20]");
  INV_RANGE(c->zero.offload_optimizer.ratio, 0, 1, "offload_optimizer.ratio in [0, 1]");
  INV_RANGE(c->zero.offload_param.buffer_count, 1, 1 << 20, "offload_param.buffer_count in [1, 2^20]");
  INV_RANGE(c->zero.offload_param.buffer_size, 1, ZO_CONFIG_MAX_ELEMS, "offload_param.buffer_size in [1, 2^56]");
  INV_RANGE(c->zero.offload_param.max_in_cpu, 0, ZO_CONFIG_MAX_ELEMS, "offload_param.max_in_cpu in [0, 2^56]");
  INV_RANGE(c->zero.sub_group_size, 1, ZO_CONFIG_MAX_ELEMS, "sub_group_size in [1, 2^56]");
  const int64_t elems[] = {c->zero.stage3_prefetch_bucket_size, c->zero.stage3_max_live_parameters,
                           c->zero.stage3_max_reuse_distance, c->zero.stage3_param_persistence_threshold,
                           c->zero.reduce_bucket_size, c->zero.allgather_bucket_size};
  for (size_t i = 0; i < sizeof elems / sizeof elems[0]; i++)
    INV_RANGE(elems[i], 0, ZO_CONFIG_MAX_ELEMS, "a zero_optimization element count in [0, 2^56]");
  INV_RANGE(c->aio.block_size, 4096, ZO_CONFIG_MAX_BLOCK_SIZE, "aio.block_size in [4096, 2^30]");
  if (c->aio.block_size % 4096) broken("aio.block_size a multiple of 4096", c->aio.block_size);
  INV_RANGE(c->aio.queue_depth, 1, 32768, "aio.queue_depth in [1, 32768]");
  INV_RANGE(c->aio.intra_op_parallelism, 1, 1 << 16, "aio.intra_op_parallelism in [1, 2^16]");
  INV_RANGE(c->zoffload.adam_threads, 0, 4096, "zoffload.adam_threads in [0, 4096]");
  INV_RANGE(c->zoffload.device_memory_limit, 0, INT64_MAX, "zoffload.device_memory_limit >= 0");
  if (c->zoffload.device_arena_bytes != ZO_ARENA_FIT)
    INV_RANGE(c->zoffload.device_arena_bytes, 0, INT64_MAX, "zoffload.device_arena_bytes >= 0 or fit");
  if (c->zoffload.host_link_gbps != 0)
    INV_RANGE(c->zoffload.host_link_gbps, ZO_CONFIG_LINK_GBPS_MIN, ZO_CONFIG_LINK_GBPS_MAX,
              "zoffload.host_link_gbps 0 or in [0.1, 1e6]");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int init;
  if (!init) {
    zo_log_set_handler(quiet, NULL, ZO_LOG_DEBUG); /* warnings are expected; every path of the logger still runs */
    init = 1;
  }
  static const char *const app[] = {"model", "data", "train", NULL};
  zo_config_auto a;
  zo_config_auto_init(&a);
  a.hidden_size = 4096, a.train_micro_batch_size_per_gpu = 2, a.gradient_accumulation_steps = 4;
  a.lr = 1e-4, a.beta1 = 0.9, a.beta2 = 0.95, a.eps = 1e-8, a.weight_decay = 0.1, a.gradient_clipping = 1.0;
  a.warmup_num_steps = 100, a.total_num_steps = 1000, a.fp16 = 0, a.bf16 = 1;
  for (int pass = 0; pass < 2; pass++) {
    zo_config_opts o = {app, pass ? 3 : 1, pass ? NULL : &a};
    zo_config_t cfg;
    if (zo_config_parse((const char *)data, size, "fuzz", &o, &cfg) != ZO_OK) {
      if (!zo_last_error()[0]) broken("every refusal has a message", 0); /* zo-train printed "error: " and nothing */
      continue;
    }
    check_invariants(&cfg, o.world_size);
    char buf[256];
    size_t need = zo_config_describe(&cfg, buf, sizeof buf);
    char *full = malloc(need + 1);
    if (full && zo_config_describe(&cfg, full, need + 1) != need) abort();
    free(full);
    static const int64_t steps[] = {1, 2, 3, 1000, INT64_MAX / 2};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
      volatile double lr = zo_config_lr_at(&cfg, steps[i]);
      (void)lr;
    }
  }
  return 0;
}

#ifdef ZO_LIBFUZZER
static void save_input(const char *name) { (void)name; } /* libFuzzer writes crash-<sha1> itself */
#else
/* ---------------- the deterministic driver ---------------- */

typedef struct buf {
  uint8_t *p;
  size_t n;
} buf;

static uint64_t g_rng = 0x5eed2026u;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static buf *g_corpus;
static int g_n;

static void add_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  buf b = {malloc(1 << 20), 0};
  b.n = fread(b.p, 1, 1 << 20, f);
  fclose(f);
  g_corpus = realloc(g_corpus, (size_t)(g_n + 1) * sizeof *g_corpus);
  g_corpus[g_n++] = b;
}

static void add_path(const char *path) {
  struct stat st;
  if (stat(path, &st)) return;
  if (!S_ISDIR(st.st_mode)) {
    add_file(path);
    return;
  }
  DIR *d = opendir(path);
  struct dirent *de;
  char p[4096];
  while (d && (de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l > 5 && !strcmp(de->d_name + l - 5, ".json")) {
      snprintf(p, sizeof p, "%s/%s", path, de->d_name);
      add_file(p);
    }
  }
  if (d) closedir(d);
}

/* Replace [at, at + del) of *b with @ins (@n_ins bytes), keeping at most @cap bytes. */
static void splice_in(uint8_t *b, size_t *n, size_t cap, size_t at, size_t del, const void *ins, size_t n_ins) {
  if (at > *n) at = *n;
  if (del > *n - at) del = *n - at;
  if (*n - del + n_ins > cap) n_ins = cap - (*n - del);
  memmove(b + at + n_ins, b + at + del, *n - at - del);
  memcpy(b + at, ins, n_ins);
  *n = *n - del + n_ins;
}

static const char *const k_builtin[] = {
    "\"auto\"", "0", "-1", "1e308", "-1e308", "1e-320", "9223372036854775807", "18446744073709551616",
    "NaN", "true", "null", "[]", "{}", "\"\"", "\"nvme\"", "\"cpu\"", "\"none\"", "\"bf16\"", "0.5", "3",
    "\"WarmupDecayLR\"", "\"WarmupCosineLR\"", "\"/\"", "\"\\u0000\"", "[1e9, 1e9]", "1e9", "{\"device\": \"nvme\"}",
};
static const char **k_tokens; /* k_builtin, then the -dict= file's entries */
static size_t n_tokens;

/* libFuzzer's dictionary format: one entry a line, name="value" or "value", escapes \\ \" \xNN; # comments. */
static void load_dict(const char *path) {
  for (size_t i = 0; i < sizeof k_builtin / sizeof k_builtin[0]; i++) {
    k_tokens = realloc(k_tokens, (n_tokens + 1) * sizeof *k_tokens);
    k_tokens[n_tokens++] = k_builtin[i];
  }
  FILE *f = path ? fopen(path, "r") : NULL;
  if (path && !f) fprintf(stderr, "fuzz_config: cannot read -dict=%s\n", path);
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *q = strchr(line, '"'), *end = strrchr(line, '"');
    if (line[0] == '#' || !q || end == q) continue;
    char *out = malloc((size_t)(end - q)), *o = out;
    for (char *p = q + 1; p < end; p++) {
      if (*p == '\\' && p + 1 < end && p[1] == 'x' && p + 3 < end) {
        *o++ = (char)strtol((char[]){p[2], p[3], 0}, NULL, 16);
        p += 3;
      } else if (*p == '\\' && p + 1 < end) {
        *o++ = *++p;
      } else {
        *o++ = *p;
      }
    }
    *o = 0;
    k_tokens = realloc(k_tokens, (n_tokens + 1) * sizeof *k_tokens);
    k_tokens[n_tokens++] = out;
  }
  if (f) fclose(f);
}

static void mutate(uint8_t *b, size_t *n, size_t cap) {
  int k = 1 + (int)(rnd() % 4);
  while (k--) {
    size_t at = *n ? rnd() % (*n + 1) : 0;
    switch (rnd() % 7) {
      case 0: if (*n) b[rnd() % *n] ^= (uint8_t)(1u << (rnd() % 8)); break; /* bit flip */
      case 1: { uint8_t c = (uint8_t)rnd(); splice_in(b, n, cap, at, 0, &c, 1); break; } /* insert a byte */
      case 2: splice_in(b, n, cap, at, 1 + rnd() % 8, "", 0); break;              /* delete bytes */
      case 3: { /* splice a piece of another corpus file */
        const buf *o = &g_corpus[rnd() % (uint64_t)g_n];
        if (!o->n) break;
        size_t from = rnd() % o->n, len = 1 + rnd() % 64;
        if (len > o->n - from) len = o->n - from;
        splice_in(b, n, cap, at, rnd() % 16, o->p + from, len);
        break;
      }
      case 4: case 5: { /* a value after a ':' swapped for a token */
        size_t i = at;
        while (i < *n && b[i] != ':') i++;
        if (i >= *n) break;
        size_t j = i + 1;
        while (j < *n && b[j] != ',' && b[j] != '}' && b[j] != '\n') j++;
        const char *t = k_tokens[rnd() % n_tokens];
        splice_in(b, n, cap, i + 1, j - i - 1, t, strlen(t));
        break;
      }
      case 6: { /* a "key": value pair doubled */
        size_t i = at;
        while (i < *n && b[i] != '"') i++;
        size_t j = i + 1;
        while (j < *n && b[j] != ',' && b[j] != '\n') j++;
        if (j < *n && j - i < 256) {
          uint8_t tmp[256];
          memcpy(tmp, b + i, j - i + 1);
          splice_in(b, n, cap, j + 1, 0, tmp, j - i + 1);
        }
        break;
      }
    }
  }
}

static const uint8_t *volatile g_cur; /* the input running now, saved by on_alarm */
static volatile size_t g_cur_n;

static void save_input(const char *name) {
  int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    if (write(fd, (const void *)g_cur, g_cur_n)) {}
    close(fd);
  }
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "fuzz_config: HANG: one input ran past the time limit (saved as fuzz-hang.json)\n";
  int fd = open("fuzz-hang.json", O_WRONLY | O_CREAT | O_TRUNC, 0644); /* async-signal-safe calls only */
  if (fd >= 0) {
    if (write(fd, (const void *)g_cur, g_cur_n)) {}
    close(fd);
  }
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(2);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* fuzz_config [-runs=N] [-max_total_time=S] [-timeout=S] [-dict=FILE] CORPUS... (libFuzzer's flag names) */
int main(int argc, char **argv) {
  long runs = 100000, max_s = 0, timeout_s = 2;
  const char *dict = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "-runs=", 6)) runs = atol(argv[i] + 6);
    else if (!strncmp(argv[i], "-dict=", 6)) dict = argv[i] + 6;
    else if (!strncmp(argv[i], "-max_total_time=", 16)) max_s = atol(argv[i] + 16);
    else if (!strncmp(argv[i], "-timeout=", 9)) timeout_s = atol(argv[i] + 9);
    else add_path(argv[i]);
  }
  if (!g_n) {
    fprintf(stderr, "usage: fuzz_config [-runs=N] [-max_total_time=S] [-timeout=S] [-dict=FILE] CORPUS_FILE_OR_DIR...\n");
    return 2;
  }
  load_dict(dict);
  signal(SIGALRM, on_alarm);
  const size_t cap = 1 << 16;
  uint8_t *b = malloc(cap);
  const double t0 = now_s();
  long done = 0;
  for (int i = 0; i < g_n; i++, done++) { /* the corpus itself first */
    g_cur = g_corpus[i].p, g_cur_n = g_corpus[i].n;
    alarm((unsigned)timeout_s);
    LLVMFuzzerTestOneInput(g_corpus[i].p, g_corpus[i].n);
  }
  while (done < runs && (!max_s || now_s() - t0 < (double)max_s)) {
    const buf *s = &g_corpus[rnd() % (uint64_t)g_n];
    size_t n = s->n < cap ? s->n : cap;
    memcpy(b, s->p, n);
    mutate(b, &n, cap);
    g_cur = b, g_cur_n = n;
    alarm((unsigned)timeout_s);
    LLVMFuzzerTestOneInput(b, n);
    done++;
  }
  alarm(0);
  printf("fuzz_config: %ld executions in %.1f s (deterministic driver, seed 0x5eed2026, %d corpus files, %zu "
         "dictionary tokens), 0 crashes, 0 hangs, 0 broken invariants\n", done, now_s() - t0, g_n, n_tokens);
  free(b);
  return 0;
}
#endif
