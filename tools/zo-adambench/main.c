/*
 * zo-adambench - measures the CPU Adam kernels against the machine's own memory
 * roofline: in one run, on the same buffers and the same pool threads, a stream
 * kernel with each variant's byte pattern, then each Adam variant.
 * Not a correctness test (tests/test_adam*.c are); the values it writes are junk.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <jansson.h>

#include "args.h"
#include "progress.h"
#include "stats.h"
#include "stream.h"
#include "zoffload/adam.h"

#define MAX_LIST 32
#define ALIGN_BYTES (2u << 20) /* 2 MiB: transparent huge pages can back every array */
#define PROBE_CALL_MIN_N \
  ((size_t)1 << 24) /* from this size on, each pool's store probe runs before its rounds */

/* ------------------------------------------------------------------ options */

typedef struct options {
  size_t sizes[MAX_LIST];
  int n_sizes;
  int threads[MAX_LIST]; /* 0 = all physical cores */
  int n_threads;
  int reps, warmup;
  zo_simd simd;
  const char *json_path;
  const char *variants; /* comma list or NULL for all */
  int thp, strict, quick;
} options;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: zo-adambench [options]\n"
      "Measure the CPU Adam kernels (zo_adam_pool_update) against an in-run memory roofline:\n"
      "a stream kernel with each variant's access pattern (same arrays, element sizes, vector width,\n"
      "regular and non-temporal stores), run on the same buffers and the same bound pool threads.\n\n"
      "  --sizes LIST      shard sizes in elements, comma separated; 2^K, K/M/G (binary) suffixes allowed\n"
      "                    (default: 2^20,2^24,2^26,2^28; 2^28 needs about 6.5 GiB of memory)\n"
      "  --threads LIST    pool thread counts, comma separated; 'all' = every physical core\n"
      "                    (default: 1,all)\n"
      "  --reps R          timed repetitions per figure; figures are medians, with min-max (default: 5)\n"
      "  --warmup W        untimed passes of every kernel first (default: 1)\n"
      "  --simd LEVEL      auto|scalar|avx2|avx512: level of the Adam kernels and the roofline kernels\n"
      "                    (default: auto = zo_simd_resolve(), which honours ZO_SIMD)\n"
      "  --variants LIST   Adam variants to run, comma separated (default: all):\n"
      "                    adamw_fp32g, adamw_fp32g_nont, adamw_bf16g_out, adamw_bf16g_out_nont,\n"
      "                    adamw_bf16g_out_bf16s, adamw_bf16g_out_bf16s_nont, adamw_fp16g_out, unfused_fp32g_cast,\n"
      "                    sqnorm_fp32g, sqnorm_bf16g (zo_adam_pool_sqnorm, against a read-only roofline)\n"
      "  --no-thp          do not madvise(MADV_HUGEPAGE) the buffers (default: advise huge pages)\n"
      "  --quick           tiny sizes (4099,65537), reps 1: a smoke run for tests\n"
      "  --json FILE       also write the figures as JSON to FILE (default: none)\n"
      "  --strict          exit 3 when a target is missed (default: exit 0; only errors fail)\n"
      "  -h, --help        this text\n"
      "Stores: the _nont variants pass ZO_ADAM_NO_NT_STORES (every store regular); the others stream param_out\n"
      "and store param, m, v as each pool chooses, by environment ZO_ADAM_STORES: auto (default) = the pool\n"
      "times both kinds (zo_adam_pool_probe_stores(), before the rounds when n >= 2^24, on scratch of 6 x 4 x\n"
      "its last-level cache) and streams only when the median of 3 timed pairs is >= 1.15x faster and none\n"
      "is slower; pairs disturbed by other processes are dropped, and while undecided the pool probes its\n"
      "first large updates instead; regular; nt. The stores column shows what was streamed (nt: p, m, v and\n"
      "param_out; out-nt: param_out only), the configuration line the pool's probe result.\n"
      "Targets checked at the end, at the largest size and the largest thread count:\n"
      "  1. adamw_fp32g >= 90%% of the p32_g32_s32 roofline (28 B/param)\n"
      "  2. adamw_bf16g_out >= 90%% of the p32_g16_s32_out16 roofline (28 B/param)\n"
      "  3. adamw_bf16g_out_bf16s params/s >= 1.25x adamw_bf16g_out params/s\n");
}

/* "2^K" (K <= 40), or a zo_tool_parse_bytes() count with a K, M or G suffix at most (elements, not
 * bytes: no T, "iB" or "B"): 1 .. 2^40 elements */
static int parse_size(const char *s, size_t *out) {
  if (s[0] == '2' && s[1] == '^') {
    int64_t k;
    if (zo_tool_parse_int(s + 2, 0, 40, &k)) return -1;
    *out = (size_t)1 << k;
    return 0;
  }
  uint64_t v;
  if (strpbrk(s, "TtiIBb") || zo_tool_parse_bytes(s, &v) || v == 0 || v > (1ull << 40)) return -1;
  *out = (size_t)v;
  return 0;
}

/* split a comma list (zo_tool_split_list); fn(token, index, ctx) per token; prints why and returns -1 on failure */
static int parse_list(const char *flag, const char *s,
                      int (*fn)(const char *tok, int index, void *ctx), void *ctx) {
  char bad[ZO_TOOL_LIST_MAX];
  int count = zo_tool_split_list(s, fn, ctx, bad, sizeof bad);
  if (count == -2)
    fprintf(stderr, "zo-adambench: error: %s: list too long\n", flag);
  else if (count == -1)
    fprintf(stderr, "zo-adambench: error: %s: bad item '%s' in '%s'\n", flag, bad, s);
  else if (count == 0)
    fprintf(stderr, "zo-adambench: error: %s: empty list\n", flag);
  return count > 0 ? 0 : -1;
}

static int add_size(const char *tok, int index, void *ctx) {
  options *o = ctx;
  if (index >= MAX_LIST) return -1;
  o->n_sizes = index + 1;
  return parse_size(tok, &o->sizes[index]);
}

static int add_threads(const char *tok, int index, void *ctx) {
  options *o = ctx;
  if (index >= MAX_LIST) return -1;
  o->n_threads = index + 1;
  if (strcmp(tok, "all") == 0) {
    o->threads[index] = 0;
    return 0;
  }
  int64_t v;
  if (zo_tool_parse_int(tok, 1, 4096, &v)) return -1;
  o->threads[index] = (int)v;
  return 0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
  int64_t v;
  if (zo_tool_parse_int(s, lo, hi, &v)) {
    fprintf(stderr, "zo-adambench: error: %s: expected an integer in [%d, %d], got '%s'\n", flag,
            lo, hi, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}


/* ------------------------------------------------------------------ variants */

typedef struct variant {
  const char *name;
  zo_dtype grad, state;
  int copy_out;
  zo_dtype out;
  unsigned flags;
  stream_pattern pat; /* roofline with the same byte pattern (unfused: PAT_F32 + PAT_CAST) */
  int unfused;        /* 1: Adam without copy-out, then a separate cast pass p -> bf16 */
  int sqnorm; /* 1: not Adam: zo_adam_pool_sqnorm() of the gradient (state/out fields unused) */
} variant;

static const variant k_variants[] = {
    {"adamw_fp32g", ZO_DTYPE_F32, ZO_DTYPE_F32, 0, ZO_DTYPE_F32, 0, PAT_F32, 0, 0},
    {"adamw_fp32g_nont", ZO_DTYPE_F32, ZO_DTYPE_F32, 0, ZO_DTYPE_F32, ZO_ADAM_NO_NT_STORES, PAT_F32,
     0, 0},
    {"adamw_bf16g_out", ZO_DTYPE_BF16, ZO_DTYPE_F32, 1, ZO_DTYPE_BF16, 0, PAT_H16, 0, 0},
    {"adamw_bf16g_out_nont", ZO_DTYPE_BF16, ZO_DTYPE_F32, 1, ZO_DTYPE_BF16, ZO_ADAM_NO_NT_STORES,
     PAT_H16, 0, 0},
    {"adamw_bf16g_out_bf16s", ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1, ZO_DTYPE_BF16, 0, PAT_S16, 0, 0},
    {"adamw_bf16g_out_bf16s_nont", ZO_DTYPE_BF16, ZO_DTYPE_BF16, 1, ZO_DTYPE_BF16,
     ZO_ADAM_NO_NT_STORES, PAT_S16, 0, 0},
    {"adamw_fp16g_out", ZO_DTYPE_F16, ZO_DTYPE_F32, 1, ZO_DTYPE_F16, 0, PAT_H16, 0, 0},
    {"unfused_fp32g_cast", ZO_DTYPE_F32, ZO_DTYPE_F32, 1, ZO_DTYPE_BF16, 0, PAT_F32, 1, 0},
    {"sqnorm_fp32g", ZO_DTYPE_F32, ZO_DTYPE_F32, 0, ZO_DTYPE_F32, 0, PAT_RD32, 0, 1},
    {"sqnorm_bf16g", ZO_DTYPE_BF16, ZO_DTYPE_F32, 0, ZO_DTYPE_F32, 0, PAT_RD16, 0, 1},
};
#define N_VARIANTS ((int)(sizeof k_variants / sizeof k_variants[0]))

static int variant_bytes(const variant *v) {
  if (v->sqnorm) return (int)zo_dtype_size(v->grad);
  int b = 4 + 4 + (int)zo_dtype_size(v->grad) +
          2 * 2 * (int)zo_dtype_size(v->state);                          /* p r/w, g, m v r/w */
  if (v->copy_out) b += v->unfused ? 4 + 2 : (int)zo_dtype_size(v->out); /* unfused: re-read p */
  return b;
}

static int variant_selected(const char *list, const char *name) {
  if (!list) return 1;
  size_t ln = strlen(name);
  for (const char *s = list; *s;) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == ln && strncmp(s, name, ln) == 0) return 1;
    if (!e) break;
    s = e + 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ buffers */

typedef struct buffers {
  size_t n;
  float *p, *g, *m, *v;                /* f32[n] */
  uint16_t *gb, *gh, *m16, *v16, *out; /* bf16 grad, fp16 grad, bf16 m v, 16-bit copy-out: [n] */
} buffers;

static void *big_alloc(size_t nbytes, int thp) {
  void *ptr = NULL;
  size_t rounded = (nbytes + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
  if (posix_memalign(&ptr, ALIGN_BYTES, rounded ? rounded : ALIGN_BYTES) != 0) return NULL;
  if (thp) (void)madvise(ptr, rounded, MADV_HUGEPAGE); /* advisory: ignore failure */
  return ptr;
}

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static float unit(uint64_t h) { return (float)(h >> 40) * (1.0f / 16777216.0f); } /* [0, 1) */
static uint16_t f32_bits_hi(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
/* float -> binary16 by truncation; valid for normal results (|x| in [2^-14, 65504]), which init keeps to */
static uint16_t f32_to_half_trunc(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int exp = (int)((u >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(sign | ((uint32_t)exp << 10) | ((u >> 13) & 0x3ffu));
}

/* first touch on the pool threads, so pages land where those threads run */
static void init_tile(void *arg, size_t b, size_t e, int thread) {
  (void)thread;
  const buffers *B = arg;
  for (size_t i = b; i < e; i++) {
    uint64_t h = mix64(i);
    float mag =
        1e-4f + unit(h) * 9.9e-3f; /* gradients in +-[1e-4, 1e-2): normal in fp16 and bf16 */
    float g = (h & 1) ? -mag : mag;
    B->g[i] = g;
    B->gb[i] = f32_bits_hi(g);
    B->gh[i] = f32_to_half_trunc(g);
    B->p[i] = 2.0f * unit(mix64(h)) - 1.0f;
    B->m[i] = 0.1f * g;
    B->v[i] = 1e-3f * g * g + 1e-12f;
    B->m16[i] = f32_bits_hi(B->m[i]);
    B->v16[i] = f32_bits_hi(B->v[i]);
    B->out[i] = 0;
  }
}

/* ------------------------------------------------------------------ timing */

typedef struct stats {
  double med, min, max; /* seconds */
} stats;

static stats summarize(const double *t, int r) {
  double s[256];
  memcpy(s, t, (size_t)r * sizeof *s);
  const double med = zo_tool_median(s, (size_t)r); /* sorts s */
  stats st = {med, s[0], s[r - 1]};
  return st;
}

/* ------------------------------------------------------------------ jobs */

/* a job is one timed kernel: a roofline stream (pattern x stores) or an Adam variant */
typedef struct job {
  int is_roof;
  stream_pattern pat;
  int nt;
  const variant *var;
  double t[256], t_cast[256]; /* per repetition; t_cast: the unfused variant's separate cast pass */
  int failed;
  int nonfinite;
  char err[256];
} job;

typedef struct run_ctx {
  zo_adam_pool_t *pool;
  buffers *B;
  size_t n;
  zo_simd level;
  zo_adam_hparams hp;
} run_ctx;

typedef struct cast_arg {
  float *p;
  uint16_t *out;
  zo_simd level;
  zo_status st[MAX_LIST * 8];
} cast_arg;

/* the unfused pipeline's second pass, on the same pool threads: zo_cast_ex per tile, one thread each */
static void cast_tile(void *arg, size_t b, size_t e, int thread) {
  cast_arg *c = arg;
  zo_status st = zo_cast_ex(c->out + b, ZO_DTYPE_BF16, c->p + b, ZO_DTYPE_F32, e - b, c->level, 1);
  if (st != ZO_OK && thread >= 0 && thread < (int)(sizeof c->st / sizeof c->st[0]))
    c->st[thread] = st;
}

/* runs a job once; returns seconds (and *t_cast for unfused), or -1 on error */
static float g_sink[4096];

static double run_job(run_ctx *R, job *J, double *t_cast) {
  buffers *B = R->B;
  *t_cast = 0;
  if (J->is_roof) {
    stream_args a = {.pat = J->pat,
                     .nt = J->nt,
                     .level = (int)R->level,
                     .c = 1e-9f,
                     .p = B->p,
                     .g = B->g,
                     .g16 = B->gb,
                     .m = B->m,
                     .v = B->v,
                     .m16 = B->m16,
                     .v16 = B->v16,
                     .out = B->out,
                     .sink = g_sink};
    double t0 = zo_clock_s();
    zo_status st = zo_adam_pool_parallel_for(R->pool, stream_tile, &a, R->n, 0);
    double t1 = zo_clock_s();
    if (st != ZO_OK) {
      snprintf(J->err, sizeof J->err, "zo_adam_pool_parallel_for: %s: %s", zo_status_string(st),
               zo_last_error());
      return -1;
    }
    return t1 - t0;
  }
  const variant *v = J->var;
  if (v->sqnorm) {
    double sq = 0;
    int nf = 0;
    const void *g = v->grad == ZO_DTYPE_F32    ? (const void *)B->g
                    : v->grad == ZO_DTYPE_BF16 ? (const void *)B->gb
                                               : B->gh;
    double t0 = zo_clock_s();
    zo_status st = zo_adam_pool_sqnorm(R->pool, g, v->grad, R->n, &sq, &nf);
    double t1 = zo_clock_s();
    if (st != ZO_OK) {
      snprintf(J->err, sizeof J->err, "zo_adam_pool_sqnorm: %s: %s", zo_status_string(st),
               zo_last_error());
      return -1;
    }
    if (nf || !(sq > 0)) J->nonfinite = 1;
    return t1 - t0;
  }
  zo_adam_shard sh;
  memset(&sh, 0, sizeof sh);
  sh.param = B->p;
  sh.grad = v->grad == ZO_DTYPE_F32    ? (const void *)B->g
            : v->grad == ZO_DTYPE_BF16 ? (const void *)B->gb
                                       : B->gh;
  sh.grad_dtype = v->grad;
  sh.state_dtype = v->state;
  sh.exp_avg = v->state == ZO_DTYPE_F32 ? (void *)B->m : (void *)B->m16;
  sh.exp_avg_sq = v->state == ZO_DTYPE_F32 ? (void *)B->v : (void *)B->v16;
  sh.param_out = v->copy_out && !v->unfused ? B->out : NULL;
  sh.out_dtype = v->out;
  sh.n = R->n;
  sh.seed = 12345;
  R->hp.step++;
  zo_adam_result res = {0, 0};
  double t0 = zo_clock_s();
  zo_status st = zo_adam_pool_update(R->pool, &R->hp, &sh, v->flags, &res);
  double t1 = zo_clock_s();
  if (st != ZO_OK) {
    snprintf(J->err, sizeof J->err, "zo_adam_pool_update: %s: %s", zo_status_string(st),
             zo_last_error());
    return -1;
  }
  if (res.nonfinite) J->nonfinite = 1;
  if (v->unfused) {
    cast_arg c;
    memset(&c, 0, sizeof c);
    c.p = B->p;
    c.out = B->out;
    c.level = R->level;
    double t2 = zo_clock_s();
    st = zo_adam_pool_parallel_for(R->pool, cast_tile, &c, R->n, 0);
    double t3 = zo_clock_s();
    for (size_t k = 0; st == ZO_OK && k < sizeof c.st / sizeof c.st[0]; k++) st = c.st[k];
    if (st != ZO_OK) {
      snprintf(J->err, sizeof J->err, "zo_cast_ex: %s: %s", zo_status_string(st), zo_last_error());
      return -1;
    }
    *t_cast = t3 - t2;
  }
  return t1 - t0;
}

/* ------------------------------------------------------------------ report */

typedef struct target_pick {
  double pct_fp32g, pct_bf16g, pps_bf16s, pps_bf16g_f32s;
  double best_fp32g, best_bf16g, best_pps_bf16s,
      best_pps_bf16g_f32s;                                 /* from the fastest repetitions */
  double paired_fp32g, paired_bf16g, paired_bf16s_speedup; /* median of per-round ratios */
  double t_bf16s[256], t_bf16g[256];
  int have_fp32g, have_bf16g, have_bf16s, have_bf16g_f32s;
} target_pick;

static double loadavg1(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

static void fmt_n(size_t n, char *buf, size_t len) {
  if (n && (n & (n - 1)) == 0)
    snprintf(buf, len, "2^%d", __builtin_ctzll((unsigned long long)n));
  else
    snprintf(buf, len, "%zu", n);
}


/* ------------------------------------------------------------------ command line */

static int known_variant(const char *tok, int index, void *ctx) {
  (void)index, (void)ctx;
  for (int i = 0; i < N_VARIANTS; i++)
    if (!strcmp(tok, k_variants[i].name)) return 0;
  return -1;
}

/* --variants: every listed name must be known, and the list not empty; prints why and returns -1 if not */
static int check_variants(const char *list) {
  char bad[ZO_TOOL_LIST_MAX];
  int count = zo_tool_split_list(list, known_variant, NULL, bad, sizeof bad);
  if (count == -1)
    fprintf(stderr, "zo-adambench: error: --variants: unknown variant '%s' (see --help)\n", bad);
  else if (count == -2)
    fprintf(stderr, "zo-adambench: error: --variants: list too long\n");
  else if (count == 0)
    fprintf(stderr, "zo-adambench: error: --variants: empty list\n");
  return count > 0 ? 0 : -1;
}

static int parse_simd(const char *s, zo_simd *out) {
  if (!strcmp(s, "auto"))
    *out = ZO_SIMD_AUTO;
  else if (!strcmp(s, "scalar"))
    *out = ZO_SIMD_SCALAR;
  else if (!strcmp(s, "avx2"))
    *out = ZO_SIMD_AVX2;
  else if (!strcmp(s, "avx512"))
    *out = ZO_SIMD_AVX512;
  else {
    fprintf(stderr, "zo-adambench: error: --simd: expected auto|scalar|avx2|avx512, got '%s'\n", s);
    return -1;
  }
  return 0;
}

/* the lists left empty get their defaults; --quick: tiny sizes, 1 rep unless --reps was given */
static void set_defaults(options *o, int reps_set) {
  if (o->quick) {
    if (!o->n_sizes) {
      o->sizes[0] = 4099;
      o->sizes[1] = 65537;
      o->n_sizes = 2;
    }
    if (!reps_set) o->reps = 1;
  }
  if (!o->n_sizes) {
    o->sizes[0] = (size_t)1 << 20;
    o->sizes[1] = (size_t)1 << 24;
    o->sizes[2] = (size_t)1 << 26;
    o->sizes[3] = (size_t)1 << 28;
    o->n_sizes = 4;
  }
  if (!o->n_threads) {
    o->threads[0] = 1;
    o->threads[1] = 0;
    o->n_threads = 2;
  }
}

/* getopt over argv into *o, defaults filled in. Returns -1 to go on, or the exit status (message printed). */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->reps = 5;
  o->warmup = 1;
  o->simd = ZO_SIMD_AUTO;
  o->thp = 1;
  int reps_set = 0;
  enum {
    OPT_SIZES = 256,
    OPT_THREADS,
    OPT_REPS,
    OPT_WARMUP,
    OPT_SIMD,
    OPT_VARIANTS,
    OPT_NOTHP,
    OPT_QUICK,
    OPT_JSON,
    OPT_STRICT
  };
  static const struct option longopts[] = {{"sizes", required_argument, 0, OPT_SIZES},
                                           {"threads", required_argument, 0, OPT_THREADS},
                                           {"reps", required_argument, 0, OPT_REPS},
                                           {"warmup", required_argument, 0, OPT_WARMUP},
                                           {"simd", required_argument, 0, OPT_SIMD},
                                           {"variants", required_argument, 0, OPT_VARIANTS},
                                           {"no-thp", no_argument, 0, OPT_NOTHP},
                                           {"quick", no_argument, 0, OPT_QUICK},
                                           {"json", required_argument, 0, OPT_JSON},
                                           {"strict", no_argument, 0, OPT_STRICT},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  int c;
  opterr = 0; /* zo_tool_option_error() says it in one line, with the nearest flag */
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
      case OPT_SIZES:
        o->n_sizes = 0;
        if (parse_list("--sizes", optarg, add_size, o)) return 2;
        break;
      case OPT_THREADS:
        o->n_threads = 0;
        if (parse_list("--threads", optarg, add_threads, o)) return 2;
        break;
      case OPT_REPS:
        if (parse_int("--reps", optarg, 1, 255, &o->reps)) return 2;
        reps_set = 1;
        break;
      case OPT_WARMUP:
        if (parse_int("--warmup", optarg, 0, 100, &o->warmup)) return 2;
        break;
      case OPT_SIMD:
        if (parse_simd(optarg, &o->simd)) return 2;
        break;
      case OPT_VARIANTS:
        if (check_variants(optarg)) return 2;
        o->variants = optarg;
        break;
      case OPT_NOTHP: o->thp = 0; break;
      case OPT_QUICK: o->quick = 1; break;
      case OPT_JSON: o->json_path = optarg; break;
      case OPT_STRICT: o->strict = 1; break;
      case 'h': usage(stdout); return 0;
      default: return zo_tool_option_error("zo-adambench", c, argc, argv, longopts);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "zo-adambench: error: unexpected argument '%s' (see --help)\n", argv[optind]);
    return 2;
  }
  set_defaults(o, reps_set);
  return -1;
}

/* ------------------------------------------------------------------ the run */

/* one run: what plan() sets up once and every (size, threads) configuration shares */
typedef struct bench {
  options o;
  zo_simd level;
  int all_cores;
  size_t nmax; /* the largest size and thread count: the targets are read there */
  int tmax;
  zo_adam_pool_opts popts;
  buffers B; /* n = nmax */
  job *jobs; /* [PAT_COUNT * 2 + N_VARIANTS], refilled per configuration */
  json_t *jroof, *jres;
  target_pick tp;
  int any_failed;
  zo_tool_progress prog; /* rounds of all configurations: (warmup + reps) x sizes x threads */
  int64_t rounds_done;
} bench;

static int alloc_buffers(buffers *B, size_t nmax, int thp) {
  B->n = nmax;
  B->p = big_alloc(nmax * 4, thp);
  B->g = big_alloc(nmax * 4, thp);
  B->m = big_alloc(nmax * 4, thp);
  B->v = big_alloc(nmax * 4, thp);
  B->gb = big_alloc(nmax * 2, thp);
  B->gh = big_alloc(nmax * 2, thp);
  B->m16 = big_alloc(nmax * 2, thp);
  B->v16 = big_alloc(nmax * 2, thp);
  B->out = big_alloc(nmax * 2, thp);
  return B->p && B->g && B->m && B->v && B->gb && B->gh && B->m16 && B->v16 && B->out ? 0 : -1;
}

static void free_buffers(buffers *B) {
  free(B->p), free(B->g), free(B->m), free(B->v), free(B->gb), free(B->gh), free(B->m16),
      free(B->v16), free(B->out);
}

/* the SIMD level, 'all' threads resolved, buffers allocated and first-touched on an all-cores pool, the
 * header printed. Returns -1 to go on, or the exit status (message printed). */
static int plan(bench *b) {
  options *o = &b->o;
  b->level = zo_simd_resolve(o->simd);
  if (b->level == ZO_SIMD_AUTO) {
    fprintf(stderr, "zo-adambench: error: --simd %s: not supported by this CPU/OS\n",
            zo_simd_name(o->simd));
    return 2;
  }
  /* all-cores pool: resolves 'all' and first-touches the buffers */
  b->popts = (zo_adam_pool_opts){
      .n_threads = 0, .numa_node = -1, .bind = 1, .tile_elems = 0, .simd = b->level};
  zo_adam_pool_t *touch_pool = NULL;
  zo_status st = zo_adam_pool_create(&b->popts, &touch_pool);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-adambench: error: zo_adam_pool_create: %s: %s\n", zo_status_string(st),
            zo_last_error());
    return 1;
  }
  b->all_cores = zo_adam_pool_threads(touch_pool);
  for (int i = 0; i < o->n_threads; i++)
    if (o->threads[i] == 0) o->threads[i] = b->all_cores;
  for (int i = 0; i < o->n_sizes; i++)
    if (o->sizes[i] > b->nmax) b->nmax = o->sizes[i];
  for (int i = 0; i < o->n_threads; i++)
    if (o->threads[i] > b->tmax) b->tmax = o->threads[i];

  size_t nmax = b->nmax;
  if (alloc_buffers(&b->B, nmax, o->thp)) {
    fprintf(stderr, "zo-adambench: error: cannot allocate %.2f GiB for n = %zu\n",
            26.0 * (double)nmax / (1 << 30), nmax);
    return 1;
  }
  double t0 = zo_clock_s();
  st = zo_adam_pool_parallel_for(touch_pool, init_tile, &b->B, nmax, 0);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-adambench: error: first touch: %s: %s\n", zo_status_string(st),
            zo_last_error());
    return 1;
  }
  double t_touch = zo_clock_s() - t0;

  printf("zo-adambench: simd %s (avx512_bf16 %s), all cores = %d, %s\n", zo_simd_name(b->level),
         zo_simd_has_avx512_bf16() ? "yes" : "no", b->all_cores, zo_adam_pool_describe(touch_pool));
  printf(
      "buffers: %.2f GiB for n <= %zu, first-touched on the pool in %.2f s, THP %s; reps %d after %d warm-up;"
      " load average %.2f\n",
      26.0 * (double)nmax / (1 << 30), nmax, t_touch, o->thp ? "advised" : "off", o->reps,
      o->warmup, loadavg1());
  printf(
      "figures: median [min-max] over reps; GB/s = nominal bytes per param (reads + writes) x params/s / 1e9;\n"
      "%%roof = GB/s over the in-run roofline with the same byte pattern (best of regular and NT stores);\n"
      "paired = median over rounds of roofline time / kernel time within the same round (robust to drift)\n");
  zo_adam_pool_destroy(touch_pool);
  return -1;
}

/* the job list: rooflines for every pattern (regular, and NT unless scalar), then the selected variants.
 * Returns the job count; *first_var: the first variant's index. */
static int plan_jobs(bench *b, int *first_var) {
  int nj = 0;
  memset(b->jobs, 0, (PAT_COUNT * 2 + N_VARIANTS) * sizeof *b->jobs);
  for (int p = 0; p < PAT_COUNT; p++)
    for (int nt = 0; nt <= (b->level == ZO_SIMD_SCALAR || p == PAT_RD32 || p == PAT_RD16 ? 0 : 1);
         nt++) {
      b->jobs[nj].is_roof = 1;
      b->jobs[nj].pat = (stream_pattern)p;
      b->jobs[nj].nt = nt;
      nj++;
    }
  *first_var = nj;
  for (int vi = 0; vi < N_VARIANTS; vi++)
    if (variant_selected(b->o.variants, k_variants[vi].name)) b->jobs[nj++].var = &k_variants[vi];
  return nj;
}

/* warm-up then timed rounds, interleaved: every kernel once per round, so drift and neighbours hit all of
 * them alike */
static void run_rounds(bench *b, run_ctx *R, int nj, int T) {
  char what[64];
  snprintf(what, sizeof what, "n = %zu, %d threads", R->n, T);
  for (int r = -b->o.warmup; r < b->o.reps;
       r++, zo_tool_progress_update(&b->prog, ++b->rounds_done, what))
    for (int j = 0; j < nj; j++) {
      job *J = &b->jobs[j];
      if (J->failed) continue;
      double tc;
      double t = run_job(R, J, &tc);
      if (t < 0) {
        J->failed = 1;
        b->any_failed = 1;
        fprintf(stderr, "zo-adambench: error: %s at n=%zu threads=%d: %s\n",
                J->is_roof ? stream_pattern_name(J->pat) : J->var->name, R->n, T, J->err);
        continue;
      }
      if (r >= 0) {
        J->t[r] = t;
        J->t_cast[r] = tc;
      }
    }
}

/* the rooflines of one configuration, per pattern */
typedef struct roofs {
  double best[PAT_COUNT],
      best_t[PAT_COUNT]; /* best of regular and NT: higher median GB/s, its median time */
  double reg[PAT_COUNT], nt[PAT_COUNT];
  double peak[PAT_COUNT], peak_tmin[PAT_COUNT]; /* from the fastest repetition */
  int best_job[PAT_COUNT];
  double unfused; /* the unfused pipeline: PAT_F32 then PAT_CAST back to back, GB/s */
} roofs;

/* prints the roofline rows (and their JSON) of jobs [0, first_var), fills *rf */
static void report_rooflines(bench *b, size_t n, int T, int first_var, roofs *rf) {
  const char *simd = zo_simd_name(b->level);
  memset(rf, 0, sizeof *rf);
  for (int p = 0; p < PAT_COUNT; p++) rf->best_job[p] = -1;
  for (int j = 0; j < first_var; j++) {
    job *J = &b->jobs[j];
    if (J->failed) continue;
    int bpp = stream_pattern_bytes(J->pat);
    stats s = summarize(J->t, b->o.reps);
    double gb = (double)bpp * (double)n / s.med / 1e9;
    double gbmin = (double)bpp * (double)n / s.max / 1e9,
           gbmax = (double)bpp * (double)n / s.min / 1e9;
    if (J->nt)
      rf->nt[J->pat] = gb;
    else
      rf->reg[J->pat] = gb;
    if (gbmax > rf->peak[J->pat]) {
      rf->peak[J->pat] = gbmax;
      rf->peak_tmin[J->pat] = s.min;
    }
    if (gb > rf->best[J->pat]) {
      rf->best[J->pat] = gb;
      rf->best_job[J->pat] = j;
      rf->best_t[J->pat] = s.med;
    }
    char sp[48];
    snprintf(sp, sizeof sp, "%.2f [%.2f-%.2f]", gb, gbmin, gbmax);
    printf("%-8s %-26s %-6s %-5s %-5s %-5s %4d %9.1f %17s %8s %15s %6s\n", "roofline",
           stream_pattern_name(J->pat), simd, "", "", "", bpp, (double)n / s.med / 1e6, sp,
           J->nt ? "nt" : "regular", "", "");
    json_t *e = json_pack("{s:s, s:s, s:i, s:I, s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i}",
                          "pattern", stream_pattern_name(J->pat), "simd", simd, "bytes_per_param",
                          bpp, "n", (json_int_t)n, "threads", T, "stores", J->nt ? "nt" : "regular",
                          "gbps", gb, "gbps_min", gbmin, "gbps_max", gbmax, "params_per_s",
                          (double)n / s.med, "seconds_median", s.med, "seconds_min", s.min,
                          "seconds_max", s.max, "reps", b->o.reps);
    json_array_append_new(b->jroof, e);
  }
  /* the unfused pipeline's roofline: the two passes back to back (sum of the best medians) */
  if (rf->best_t[PAT_F32] > 0 && rf->best_t[PAT_CAST] > 0) {
    rf->unfused = 34.0 * (double)n / (rf->best_t[PAT_F32] + rf->best_t[PAT_CAST]) / 1e9;
    printf("%-8s %-26s %-6s %-5s %-5s %-5s %4d %9.1f %17.2f %8s %15s %6s\n", "roofline",
           "p32_g32_s32+cast", simd, "", "", "", 34,
           (double)n / (rf->best_t[PAT_F32] + rf->best_t[PAT_CAST]) / 1e6, rf->unfused, "best",
           "(sum of 2)", "");
    json_array_append_new(b->jroof,
                          json_pack("{s:s, s:s, s:i, s:I, s:i, s:s, s:f, s:b}", "pattern",
                                    "p32_g32_s32+cast_p32_out16", "simd", simd, "bytes_per_param",
                                    34, "n", (json_int_t)n, "threads", T, "stores", "best", "gbps",
                                    rf->unfused, "derived", 1));
  }
  for (int p = 0; p < PAT_COUNT; p++)
    if (rf->best[p] > 0)
      json_array_append_new(b->jroof,
                            json_pack("{s:s, s:s, s:i, s:I, s:i, s:s, s:f, s:b}", "pattern",
                                      stream_pattern_name(p), "simd", simd, "bytes_per_param",
                                      stream_pattern_bytes(p), "n", (json_int_t)n, "threads", T,
                                      "stores", "best", "gbps", rf->best[p], "derived", 1));
}

/* one variant's figures at one configuration */
typedef struct var_figs {
  double tot[256]; /* per repetition: Adam (+ the unfused cast pass) seconds */
  stats s;
  int bpp;
  double pps, gb, gbmin, gbmax;
  double roof, pct;         /* against the best-of-medians roofline */
  double roof_pk, pct_best; /* the same from the fastest repetitions */
  double pct_paired;        /* median of per-round roofline time / variant time */
  const char *roofname, *stores;
  int pool_nt; /* zo_adam_pool_stores_nt(): 1 p, m, v streamed, 0 regular, -1 undecided (regular) */
  double probe_ratio; /* the pool's store probe: regular time / nt time, 0 when it has not run */
} var_figs;

static void variant_figures(const bench *b, size_t n, const job *J, const roofs *rf,
                            zo_adam_pool_t *pool, var_figs *f) {
  const variant *v = J->var;
  int reps = b->o.reps;
  for (int r = 0; r < reps; r++) f->tot[r] = J->t[r] + J->t_cast[r];
  f->s = summarize(f->tot, reps);
  f->bpp = variant_bytes(v);
  f->pps = (double)n / f->s.med, f->gb = (double)f->bpp * f->pps / 1e9;
  f->gbmin = (double)f->bpp * (double)n / f->s.max / 1e9,
  f->gbmax = (double)f->bpp * (double)n / f->s.min / 1e9;
  f->roof = v->unfused ? rf->unfused : rf->best[v->pat];
  f->roofname = v->unfused ? "p32_g32_s32+cast_p32_out16" : stream_pattern_name(v->pat);
  f->pct = f->roof > 0 ? 100.0 * f->gb / f->roof : 0;
  /* the same ratio from the fastest repetitions (min time of each): less exposed to neighbours' load */
  f->roof_pk =
      v->unfused
          ? (rf->peak_tmin[PAT_F32] > 0 && rf->peak_tmin[PAT_CAST] > 0
                 ? 34.0 * (double)n / (rf->peak_tmin[PAT_F32] + rf->peak_tmin[PAT_CAST]) / 1e9
                 : 0)
          : rf->peak[v->pat];
  f->pct_best = f->roof_pk > 0 ? 100.0 * f->gbmax / f->roof_pk : 0;
  /* paired: roofline time over Adam time within each round (they ran back to back), median over rounds */
  f->pct_paired = 0;
  int ja = v->unfused ? rf->best_job[PAT_F32] : rf->best_job[v->pat];
  int jb = v->unfused ? rf->best_job[PAT_CAST] : -1;
  if (ja >= 0 && (!v->unfused || jb >= 0)) {
    double ratio[256];
    for (int r = 0; r < reps; r++)
      ratio[r] = 100.0 * (b->jobs[ja].t[r] + (jb >= 0 ? b->jobs[jb].t[r] : 0)) / f->tot[r];
    f->pct_paired = summarize(ratio, reps).med;
  }
  /* what the kernel streamed: with ZO_ADAM_NO_NT_STORES or at the scalar level nothing; else param_out
     (when there is one) and p, m, v as the pool chose (ZO_ADAM_STORES; auto: its probe, before the rounds) */
  f->pool_nt = zo_adam_pool_stores_nt(pool, &f->probe_ratio);
  f->stores = v->sqnorm                                                         ? "none"
              : (v->flags & ZO_ADAM_NO_NT_STORES) || b->level == ZO_SIMD_SCALAR ? "regular"
              : f->pool_nt == 1                                                 ? "nt"
              : v->copy_out && !v->unfused                                      ? "out-nt"
                                                                                : "regular";
}

static json_t *variant_json(const bench *b, size_t n, int T, const job *J, const roofs *rf,
                            const var_figs *f) {
  const variant *v = J->var;
  json_t *e = json_pack(
      "{s:s, s:s, s:s, s:s, s:b, s:s, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:s, s:s, s:f, s:f, "
      "s:f, s:f, s:f, s:i, s:b, s:b}",
      "variant", v->name, "simd", zo_simd_name(b->level), "grad_dtype", zo_dtype_name(v->grad),
      "state_dtype", v->sqnorm ? "none" : zo_dtype_name(v->state), "copy_out", v->copy_out,
      "out_dtype", v->copy_out ? zo_dtype_name(v->out) : "none", "n", (json_int_t)n, "threads", T,
      "params_per_s", f->pps, "params_per_s_min", (double)n / f->s.max, "params_per_s_max",
      (double)n / f->s.min, "gbps", f->gb, "gbps_min", f->gbmin, "gbps_max", f->gbmax,
      "pct_of_roofline", f->pct, "bytes_per_param", f->bpp, "roofline_pattern", f->roofname,
      "stores", f->stores, "roofline_gbps", f->roof, "pct_of_roofline_regular_stores",
      (!v->unfused && rf->reg[v->pat] > 0) ? 100.0 * f->gb / rf->reg[v->pat] : 0.0,
      "pct_of_roofline_nt_stores",
      (!v->unfused && rf->nt[v->pat] > 0) ? 100.0 * f->gb / rf->nt[v->pat] : 0.0, "seconds_median",
      f->s.med, "seconds_max", f->s.max, "reps", b->o.reps, "unfused", v->unfused, "nonfinite",
      J->nonfinite);
  json_object_set_new(e, "seconds_min", json_real(f->s.min));
  json_object_set_new(e, "pct_of_roofline_best_of_reps", json_real(f->pct_best));
  json_object_set_new(e, "pct_of_roofline_paired", json_real(f->pct_paired));
  json_object_set_new(e, "roofline_gbps_best_of_reps", json_real(f->roof_pk));
  json_object_set_new(e, "mode", json_string(v->sqnorm ? "sqnorm" : "adamw"));
  json_object_set_new(e, "pool_pmv_stores",
                      json_string(f->pool_nt == 1   ? "nt"
                                  : f->pool_nt == 0 ? "regular"
                                                    : "undecided"));
  json_object_set_new(e, "store_probe_ratio", json_real(f->probe_ratio));
  if (v->unfused) {
    stats sc = summarize(J->t_cast, b->o.reps);
    json_object_set_new(e, "cast_seconds_median", json_real(sc.med));
  }
  return e;
}

/* the figures the three targets read, from the largest size and thread count */
static void pick_targets(target_pick *tp, const variant *v, size_t n, const var_figs *f) {
  if (!strcmp(v->name, "adamw_fp32g"))
    tp->pct_fp32g = f->pct, tp->best_fp32g = f->pct_best, tp->paired_fp32g = f->pct_paired,
    tp->have_fp32g = 1;
  if (!strcmp(v->name, "adamw_bf16g_out")) {
    tp->pct_bf16g = f->pct, tp->best_bf16g = f->pct_best, tp->paired_bf16g = f->pct_paired,
    tp->have_bf16g = 1;
    tp->pps_bf16g_f32s = f->pps, tp->best_pps_bf16g_f32s = (double)n / f->s.min,
    tp->have_bf16g_f32s = 1;
  }
  if (!strcmp(v->name, "adamw_bf16g_out_bf16s"))
    tp->pps_bf16s = f->pps, tp->best_pps_bf16s = (double)n / f->s.min, tp->have_bf16s = 1;
  if (!strcmp(v->name, "adamw_bf16g_out_bf16s")) memcpy(tp->t_bf16s, f->tot, sizeof f->tot);
  if (!strcmp(v->name, "adamw_bf16g_out")) memcpy(tp->t_bf16g, f->tot, sizeof f->tot);
}

/* one variant's row (and JSON) */
static void report_variant(bench *b, size_t n, int T, const job *J, const roofs *rf,
                           zo_adam_pool_t *pool) {
  const variant *v = J->var;
  const char *simd = zo_simd_name(b->level);
  if (J->failed) {
    printf("%-8s %-26s %-6s %-5s %-5s %-5s  FAILED: %s\n", "adam", v->name, simd,
           zo_dtype_name(v->grad), zo_dtype_name(v->state),
           v->copy_out ? zo_dtype_name(v->out) : "-", J->err);
    return;
  }
  var_figs f;
  variant_figures(b, n, J, rf, pool, &f);
  char sp[48], rfs[32];
  snprintf(sp, sizeof sp, "%.2f [%.2f-%.2f]", f.gb, f.gbmin, f.gbmax);
  snprintf(rfs, sizeof rfs, "%.2f", f.roof);
  printf("%-8s %-26s %-6s %-5s %-5s %-5s %4d %9.1f %17s %8s %15s %5.1f%% %6.1f%%%s\n",
         v->sqnorm ? "sqnorm" : "adam", v->name, simd, zo_dtype_name(v->grad),
         v->sqnorm ? "-" : zo_dtype_name(v->state), v->copy_out ? zo_dtype_name(v->out) : "-",
         f.bpp, f.pps / 1e6, sp, f.stores, rfs, f.pct, f.pct_paired,
         J->nonfinite ? (v->sqnorm ? " (nonfinite or zero norm!)" : " (nonfinite reported!)") : "");
  json_array_append_new(b->jres, variant_json(b, n, T, J, rf, &f));
  if (n == b->nmax && T == b->tmax) pick_targets(&b->tp, v, n, &f);
}

/* one (size, threads) configuration: its pool, the interleaved rounds, its rows. Returns -1 to go on, or
 * the exit status (message printed). */
static int run_config(bench *b, size_t n, int T) {
  zo_adam_pool_opts po = b->popts;
  po.n_threads = T;
  zo_adam_pool_t *pool = NULL;
  zo_status st = zo_adam_pool_create(&po, &pool);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-adambench: error: zo_adam_pool_create(%d threads): %s: %s\n", T,
            zo_status_string(st), zo_last_error());
    return 1;
  }
  /* the pool's store probe (ZO_ADAM_STORES auto) before anything is timed, on its own scratch (6 x 4 x LLC
     bytes), for the memory-bound sizes: else the first large update, or, when other processes disturb that,
     a timed one would probe. Smaller shards are never probed (their pools store p, m, v regularly). */
  double tp0 = zo_clock_s();
  st = n >= PROBE_CALL_MIN_N ? zo_adam_pool_probe_stores(pool) : ZO_OK;
  double t_probe = zo_clock_s() - tp0;
  if (st != ZO_OK)
    fprintf(stderr, "zo-adambench: warning: zo_adam_pool_probe_stores: %s: %s\n",
            zo_status_string(st), zo_last_error());
  int first_var;
  int nj = plan_jobs(b, &first_var);
  run_ctx R = {.pool = pool,
               .B = &b->B,
               .n = n,
               .level = b->level,
               .hp = {.lr = 1e-3f,
                      .beta1 = 0.9f,
                      .beta2 = 0.999f,
                      .eps = 1e-8f,
                      .weight_decay = 0.01f,
                      .mode = ZO_ADAM_MODE_ADAMW,
                      .bias_correction = 1,
                      .step = 0,
                      .grad_scale = 1.0f}};
  double la0 = loadavg1();
  run_rounds(b, &R, nj, T);
  zo_tool_progress_end(&b->prog); /* a bar on the terminal gives way to the table */
  char nbuf[32];
  fmt_n(n, nbuf, sizeof nbuf);
  printf("\n== n = %s (%zu), threads = %d: %s; ", nbuf, n, T, zo_adam_pool_describe(pool));
  if (n >= PROBE_CALL_MIN_N) printf("store probe call %.2f s; ", t_probe);
  printf("load average %.2f -> %.2f\n", la0, loadavg1());
  printf("%-8s %-26s %-6s %-5s %-5s %-5s %4s %9s %17s %8s %15s %6s %7s\n", "kind", "name", "simd",
         "grad", "state", "out", "B/p", "Mparam/s", "GB/s [min-max]", "stores", "roof GB/s",
         "%roof", "paired");
  roofs rf;
  report_rooflines(b, n, T, first_var, &rf);
  for (int j = first_var; j < nj; j++) report_variant(b, n, T, &b->jobs[j], &rf, pool);
  zo_adam_pool_destroy(pool);
  return -1;
}

/* the three targets: one line each, appended to @jt; returns 1 when one was missed */
static int report_targets(bench *b, json_t *jt) {
  target_pick *tp = &b->tp;
  char nb[32];
  fmt_n(b->nmax, nb, sizeof nb);
  printf("\ntargets (n = %s, %d threads%s):\n", nb, b->tmax,
         b->tmax == b->all_cores ? " = all cores" : ", NOT all cores");
  int missed = 0;
  if (tp->have_bf16s && tp->have_bf16g_f32s) {
    double ratio[256];
    for (int r = 0; r < b->o.reps; r++) ratio[r] = tp->t_bf16g[r] / tp->t_bf16s[r];
    tp->paired_bf16s_speedup = summarize(ratio, b->o.reps).med;
  }
  struct {
    const char *name;
    int have;
    double value, need, best, paired;
    const char *unit, *what;
  } tg[3] = {
      {"fp32g_pct_of_roofline", tp->have_fp32g, tp->pct_fp32g, 90.0, tp->best_fp32g,
       tp->paired_fp32g, "%", "adamw_fp32g vs p32_g32_s32 roofline (28 B/param)"},
      {"bf16g_out_pct_of_roofline", tp->have_bf16g, tp->pct_bf16g, 90.0, tp->best_bf16g,
       tp->paired_bf16g, "%", "adamw_bf16g_out vs p32_g16_s32_out16 roofline (28 B/param)"},
      {"bf16_state_speedup", tp->have_bf16s && tp->have_bf16g_f32s,
       tp->pps_bf16g_f32s > 0 ? tp->pps_bf16s / tp->pps_bf16g_f32s : 0, 1.25,
       tp->best_pps_bf16g_f32s > 0 ? tp->best_pps_bf16s / tp->best_pps_bf16g_f32s : 0,
       tp->paired_bf16s_speedup, "x",
       "adamw_bf16g_out_bf16s params/s over adamw_bf16g_out params/s"},
  };
  for (int i = 0; i < 3; i++) {
    const char *verdict = !tg[i].have ? "N/A " : tg[i].value >= tg[i].need ? "PASS" : "MISS";
    if (tg[i].have && tg[i].value < tg[i].need) missed = 1;
    if (tg[i].have)
      printf(
          "  %s target %d: %s: %.3g%s (need >= %.3g%s; from medians; per-round paired median %.3g%s,"
          " fastest reps %.3g%s)\n",
          verdict, i + 1, tg[i].what, tg[i].value, tg[i].unit, tg[i].need, tg[i].unit, tg[i].paired,
          tg[i].unit, tg[i].best, tg[i].unit);
    else
      printf("  %s target %d: %s: not measured (variant not selected or failed)\n", verdict, i + 1,
             tg[i].what);
    json_array_append_new(jt,
                          json_pack("{s:s, s:s, s:b, s:f, s:f, s:f, s:f, s:s}", "target",
                                    tg[i].name, "verdict", verdict, "measured", tg[i].have, "value",
                                    tg[i].value, "need", tg[i].need, "value_best_of_reps",
                                    tg[i].best, "value_paired", tg[i].paired, "what", tg[i].what));
  }
  return missed;
}

/* --json FILE: rooflines, results and targets (takes the arrays); returns -1 when the file cannot be written */
static int write_json(bench *b, json_t *jt) {
  if (!b->o.json_path) {
    json_decref(b->jroof);
    json_decref(b->jres);
    json_decref(jt);
    return 0;
  }
  int rc = 0;
  json_t *root =
      json_pack("{s:o, s:o, s:o}", "roofline", b->jroof, "results", b->jres, "targets", jt);
  json_object_set_new(root, "simd", json_string(zo_simd_name(b->level)));
  json_object_set_new(root, "avx512_bf16", json_boolean(zo_simd_has_avx512_bf16()));
  json_object_set_new(root, "all_cores", json_integer(b->all_cores));
  json_object_set_new(root, "reps", json_integer(b->o.reps));
  json_object_set_new(root, "warmup", json_integer(b->o.warmup));
  json_object_set_new(root, "thp", json_boolean(b->o.thp));
  json_object_set_new(root, "load_average_end", json_real(loadavg1()));
  if (json_dump_file(root, b->o.json_path, JSON_INDENT(2)) != 0) {
    fprintf(stderr, "zo-adambench: error: cannot write %s: %s\n", b->o.json_path, strerror(errno));
    rc = -1;
  }
  json_decref(root);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* each table as it is done, on a pipe too */
  static bench b;                   /* static: the timing arrays are a few hundred KiB */
  int rc = parse_options(argc, argv, &b.o);
  if (rc >= 0) return rc;
  rc = plan(&b);
  if (rc >= 0) return rc;

  b.jroof = json_array(), b.jres = json_array();
  b.jobs = calloc(PAT_COUNT * 2 + N_VARIANTS, sizeof *b.jobs);
  if (!b.jobs) return 1;
  /* elapsed time and ETA on stderr: a bar on a terminal, a line every 10 s on a pipe */
  zo_tool_progress_start(&b.prog, "zo-adambench", "rounds",
                         (int64_t)b.o.n_sizes * b.o.n_threads * (b.o.warmup + b.o.reps), 10.0);
  for (int si = 0; si < b.o.n_sizes; si++)
    for (int ti = 0; ti < b.o.n_threads; ti++)
      if ((rc = run_config(&b, b.o.sizes[si], b.o.threads[ti])) >= 0) return rc;

  json_t *jt = json_array();
  int missed = report_targets(&b, jt);
  rc = b.any_failed ? 1 : (b.o.strict && missed) ? 3 : 0;
  if (write_json(&b, jt)) rc = 1;
  free(b.jobs);
  free_buffers(&b.B);
  return rc;
}
