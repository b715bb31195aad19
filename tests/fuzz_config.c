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
 * than the time limit (SIGALRM). Prints "N executions in S s, 0 crashes,
 * 0 hangs" when done. In the style of zstd's tests/fuzz.
 */
#include <dirent.h>
#include <fcntl.h>
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
      if (!zo_last_error()[0]) abort(); /* every refusal has a message */
      continue;
    }
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

#ifndef ZO_LIBFUZZER
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

static const char *const k_tokens[] = {
    "\"auto\"", "0", "-1", "1e308", "-1e308", "1e-320", "9223372036854775807", "18446744073709551616",
    "NaN", "true", "null", "[]", "{}", "\"\"", "\"nvme\"", "\"cpu\"", "\"none\"", "\"bf16\"", "0.5", "3",
    "\"WarmupDecayLR\"", "\"WarmupCosineLR\"", "\"/\"", "\"\\u0000\"", "[1e9, 1e9]", "1e9", "{\"device\": \"nvme\"}",
};

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
        const char *t = k_tokens[rnd() % (sizeof k_tokens / sizeof k_tokens[0])];
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

/* fuzz_config [-runs=N] [-max_total_time=S] [-timeout=S] CORPUS... (libFuzzer's flag names) */
int main(int argc, char **argv) {
  long runs = 100000, max_s = 0, timeout_s = 2;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "-runs=", 6)) runs = atol(argv[i] + 6);
    else if (!strncmp(argv[i], "-max_total_time=", 16)) max_s = atol(argv[i] + 16);
    else if (!strncmp(argv[i], "-timeout=", 9)) timeout_s = atol(argv[i] + 9);
    else add_path(argv[i]);
  }
  if (!g_n) {
    fprintf(stderr, "usage: fuzz_config [-runs=N] [-max_total_time=S] [-timeout=S] CORPUS_FILE_OR_DIR...\n");
    return 2;
  }
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
  printf("fuzz_config: %ld executions in %.1f s (deterministic driver, seed 0x5eed2026, %d corpus files), "
         "0 crashes, 0 hangs\n", done, now_s() - t0, g_n);
  free(b);
  return 0;
}
#endif
