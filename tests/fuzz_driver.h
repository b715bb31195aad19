/*
 * fuzz_driver.h - the deterministic stand-in for libFuzzer's main() shared by
 * the four fuzz targets (fuzz_config.c, fuzz_engine_seq.c, fuzz_checkpoint.c,
 * fuzz_safetensors.c), for builds without clang's -fsanitize=fuzzer. Not a
 * coverage-guided fuzzer: a fixed seed, the same inputs every run.
 * Mutations: bit flips, byte insertions and deletions, an interesting integer
 * written over 1-8 bytes, splices of two corpus inputs, a token (a number for
 * an extreme, a control byte, a -dict= entry, a target's fuzz_add_token())
 * swapped in after a ':', and the target's own mutation when it sets
 * g_fz_mutate_custom (from LLVMFuzzerInitialize). Corpus: files and
 * directories on the command line plus the target's own seeds (fuzz_add_seed()
 * from LLVMFuzzerInitialize). A hang is an input past -timeout (SIGALRM,
 * saved as fuzz-hang.bin); a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, abort())
 * saves the input as fuzz-crash.bin, then goes on to the handler that was
 * there before (a sanitizer's, or the default). Prints "N executions in S s
 * ... 0 crashes, 0 hangs". Include once, before the target's own code that
 * uses it; it defines main() unless ZO_LIBFUZZER.
 */
#ifndef ZO_FUZZ_DRIVER_H
#define ZO_FUZZ_DRIVER_H

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

typedef struct fuzz_buf {
  uint8_t *p;
  size_t n;
} fuzz_buf;

static fuzz_buf *g_fz_corpus;
static int g_fz_n;
/* libFuzzer: the first corpus directory, where the seeds are written */
static const char *g_fz_seed_dir;

/* Add @n bytes as a corpus input: in memory for the driver, a file in the corpus directory under
 * libFuzzer. */
static void fuzz_add_seed(const char *name, const void *p, size_t n) {
  if (g_fz_seed_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_fz_seed_dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
      if (n) fwrite(p, 1, n, f);
      fclose(f);
    }
    return;
  }
  g_fz_corpus = realloc(g_fz_corpus, (size_t)(g_fz_n + 1) * sizeof *g_fz_corpus);
  fuzz_buf b = {malloc(n ? n : 1), n};
  if (n) memcpy(b.p, p, n);
  g_fz_corpus[g_fz_n++] = b;
}

/* libFuzzer passes its arguments to LLVMFuzzerInitialize: the first one that is a directory takes
 * the seeds. */
static __attribute__((unused)) void fuzz_find_seed_dir(int argc, char **argv) {
  struct stat st;
  for (int i = 1; i < argc && !g_fz_seed_dir; i++)
    if (argv[i][0] != '-' && stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
      g_fz_seed_dir = argv[i];
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef ZO_LIBFUZZER
/* A target's own mutation step, or NULL: called for 2 in 10 mutation steps with the input @b (@n bytes, room
 * for @cap) and a position @at <= *n; it may change *n up to @cap. Set it from LLVMFuzzerInitialize. */
static void (*g_fz_mutate_custom)(uint8_t *b, size_t *n, size_t cap, size_t at);

static uint64_t g_fz_rng = 0x5eed2026u;
static uint64_t fz_rnd(void) { /* splitmix64 */
  uint64_t z = (g_fz_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void fz_add_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  uint8_t *p = malloc(1 << 20);
  size_t n = fread(p, 1, 1 << 20, f);
  fclose(f);
  fuzz_add_seed(path, p, n);
  free(p);
}

static void fz_add_path(const char *path) {
  struct stat st;
  if (stat(path, &st)) return;
  if (!S_ISDIR(st.st_mode)) {
    fz_add_file(path);
    return;
  }
  DIR *d = opendir(path);
  struct dirent *de;
  char p[4096];
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", path, de->d_name);
    fz_add_file(p);
  }
  if (d) closedir(d);
}

static void fz_splice(uint8_t *b, size_t *n, size_t cap, size_t at, size_t del, const void *ins,
                      size_t n_ins) {
  if (at > *n) at = *n;
  if (del > *n - at) del = *n - at;
  if (*n - del + n_ins > cap) n_ins = cap - (*n - del);
  memmove(b + at + n_ins, b + at + del, *n - at - del);
  memcpy(b + at, ins, n_ins);
  *n = *n - del + n_ins;
}

static const char *const k_fz_builtin[] = {"0",
                                           "-1",
                                           "1e308",
                                           "-1e308",
                                           "1e38",
                                           "9223372036854775807",
                                           "-9223372036854775808",
                                           "18446744073709551616",
                                           "281474976710657",
                                           "4611686018427387904",
                                           "null",
                                           "[]",
                                           "{}",
                                           "\"\"",
                                           "\"\\u001b[2J\"",
                                           "\"\\u0000\"",
                                           "\"ffffffff\"",
                                           "\"zzzzzzzz\"",
                                           "\"__metadata__\"",
                                           "\"F32\"",
                                           "\"BF16\"",
                                           "\"BOOL\"",
                                           "[0, 0]",
                                           "[1, 18446744073709551615]"};
/* k_fz_builtin, then the target's fuzz_add_token()s, then the -dict= entries */
static const char **g_fz_tokens;
static size_t g_fz_n_tokens;

/* A token for the ':' swap; @t must outlive the run (a literal, or memory never freed). */
static void fuzz_add_token(const char *t) {
  g_fz_tokens = realloc(g_fz_tokens, (g_fz_n_tokens + 1) * sizeof *g_fz_tokens);
  g_fz_tokens[g_fz_n_tokens++] = t;
}

/* libFuzzer's dictionary format: one entry a line, name="value" or "value", escapes \\ \" \xNN; #
 * comments. */
static void fz_load_dict(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) fprintf(stderr, "fuzz: cannot read -dict=%s\n", path);
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
    fuzz_add_token(out);
  }
  if (f) fclose(f);
}

static void fz_mutate(uint8_t *b, size_t *n, size_t cap) {
  int k = 1 + (int)(fz_rnd() % 4);
  while (k--) {
    size_t at = *n ? fz_rnd() % (*n + 1) : 0;
    switch (fz_rnd() % (g_fz_mutate_custom ? 10 : 8)) {
      case 0:
        if (*n) b[fz_rnd() % *n] ^= (uint8_t)(1u << (fz_rnd() % 8));
        break;
      case 1: {
        uint8_t c = (uint8_t)fz_rnd();
        fz_splice(b, n, cap, at, 0, &c, 1);
        break;
      }
      case 2: fz_splice(b, n, cap, at, 1 + fz_rnd() % 8, "", 0); break;
      case 3: { /* an interesting integer over 1-8 bytes (header lengths, offsets) */
        static const uint64_t v[] = {0,          1,          0x7f,       0x80,
                                     0xff,       0xffff,     0x7fffffff, 0xffffffffull,
                                     1ull << 62, UINT64_MAX, 100u << 20};
        uint64_t x = v[fz_rnd() % (sizeof v / sizeof v[0])];
        size_t w = 1 + fz_rnd() % 8;
        for (size_t i = 0; i < w && at + i < *n; i++) b[at + i] = (uint8_t)(x >> (8 * i));
        break;
      }
      case 4: { /* splice a piece of another input */
        const fuzz_buf *o = &g_fz_corpus[fz_rnd() % (uint64_t)g_fz_n];
        if (!o->n) break;
        size_t from = fz_rnd() % o->n, len = 1 + fz_rnd() % 64;
        if (len > o->n - from) len = o->n - from;
        fz_splice(b, n, cap, at, fz_rnd() % 16, o->p + from, len);
        break;
      }
      case 8:
      case 9: g_fz_mutate_custom(b, n, cap, at); break;
      default: { /* a value after a ':' swapped for a token */
        size_t i = at;
        while (i < *n && b[i] != ':') i++;
        if (i >= *n) break;
        size_t j = i + 1;
        while (j < *n && b[j] != ',' && b[j] != '}' && b[j] != '\n') j++;
        const char *t = g_fz_tokens[fz_rnd() % g_fz_n_tokens];
        fz_splice(b, n, cap, i + 1, j - i - 1, t, strlen(t));
        break;
      }
    }
  }
}

static const uint8_t *volatile g_fz_cur;
static volatile size_t g_fz_cur_n;

static void fz_on_alarm(int sig) {
  (void)sig;
  static const char msg[] =
      "fuzz: HANG: one input ran past the time limit (saved as fuzz-hang.bin)\n";
  int fd = open("fuzz-hang.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    if (write(fd, (const void *)g_fz_cur, g_fz_cur_n)) {}
    close(fd);
  }
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(2);
}

/* A crash: the input saved as fuzz-crash.bin, then the handler that was there before (the sanitizer's or the
 * default): a fault returns to the faulting instruction and faults again, a raise()d signal is raised again. */
static struct sigaction g_fz_old_act[NSIG];
static void fz_on_crash(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  static const char msg[] = "fuzz: CRASH: the input is saved as fuzz-crash.bin\n";
  int fd =
      open("fuzz-crash.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644); /* async-signal-safe calls only */
  if (fd >= 0) {
    if (write(fd, (const void *)g_fz_cur, g_fz_cur_n)) {}
    close(fd);
  }
  if (write(2, msg, sizeof msg - 1)) {}
  sigaction(sig, &g_fz_old_act[sig], NULL);
  if (si->si_code <= 0) raise(sig); /* sent (abort(), kill), not a fault */
}

static double fz_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* TARGET [-runs=N] [-max_total_time=S] [-timeout=S] [-dict=FILE] [CORPUS_FILE_OR_DIR...] (libFuzzer's flag
 * names; its other flags are ignored) */
int main(int argc, char **argv) {
  long runs = 10000, max_s = 0, timeout_s = 5;
  for (size_t i = 0; i < sizeof k_fz_builtin / sizeof k_fz_builtin[0]; i++)
    fuzz_add_token(k_fz_builtin[i]);
  const char *dict = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "-runs=", 6))
      runs = atol(argv[i] + 6);
    else if (!strncmp(argv[i], "-dict=", 6))
      dict = argv[i] + 6;
    else if (!strncmp(argv[i], "-max_total_time=", 16))
      max_s = atol(argv[i] + 16);
    else if (!strncmp(argv[i], "-timeout=", 9))
      timeout_s = atol(argv[i] + 9);
    else
      fz_add_path(argv[i]);
  }
  LLVMFuzzerInitialize(&argc, &argv); /* adds the target's own seeds, tokens, mutation */
  if (dict) fz_load_dict(dict);
  if (!g_fz_n) {
    fprintf(stderr, "%s: no corpus\n", argv[0]);
    return 2;
  }
  signal(SIGALRM, fz_on_alarm);
  static const int crash_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fz_on_crash;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof crash_sigs / sizeof crash_sigs[0]; i++)
    sigaction(crash_sigs[i], &sa, &g_fz_old_act[crash_sigs[i]]);
  const size_t cap = 1 << 16;
  uint8_t *b = malloc(cap);
  const double t0 = fz_now();
  long done = 0;
  for (int i = 0; i < g_fz_n; i++, done++) {
    g_fz_cur = g_fz_corpus[i].p, g_fz_cur_n = g_fz_corpus[i].n;
    alarm((unsigned)timeout_s);
    LLVMFuzzerTestOneInput(g_fz_corpus[i].p, g_fz_corpus[i].n);
  }
  while (done < runs && (!max_s || fz_now() - t0 < (double)max_s)) {
    const fuzz_buf *s = &g_fz_corpus[fz_rnd() % (uint64_t)g_fz_n];
    size_t n = s->n < cap ? s->n : cap;
    memcpy(b, s->p, n);
    fz_mutate(b, &n, cap);
    g_fz_cur = b, g_fz_cur_n = n;
    alarm((unsigned)timeout_s);
    LLVMFuzzerTestOneInput(b, n);
    done++;
  }
  alarm(0);
  printf(
      "%s: %ld executions in %.1f s (deterministic driver, seed 0x5eed2026, %d corpus inputs, %zu tokens), "
      "0 crashes, 0 hangs\n",
      argv[0], done, fz_now() - t0, g_fz_n, g_fz_n_tokens);
  free(b);
  return 0;
}
#endif
#endif /* ZO_FUZZ_DRIVER_H */
