/*
 * gpt.c - zo-train's GPT-2-style model (models/, library zo_gpt):
 * initialisation, forward, backward and sampling in float32 on the CPU
 * (OpenBLAS + OpenMP); the registry, buffer layout and create/destroy are in
 * gpt_alloc.c. Not an optimizer and not the training loop
 * (tools/zo-train/main.c); no mixed precision.
 */
#include "gpt.h"
#include "gpt_internal.h"

#include <cblas.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rng.h"
#include "sample.h"
#include "seterr.h"
#include "gemm_bf16.h"
#include "zoffload/adam.h" /* zo_cast */
#include "zoffload/status.h"

/* OpenBLAS extensions; declared here in case <cblas.h> of another BLAS lacks them. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

#define GPT_LN_EPS 1e-5f

/* ------------------------------------------------------------------ */
/* small helpers */

/* uniform in (0, 1], 24 bits */
static inline float u01(uint64_t r) { return ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f); }

/*
 * exp for the vectorisable loops: Cody-Waite reduction x = n*ln2 + r,
 * |r| <= ln2/2, degree-6 Taylor polynomial (relative error < 2e-7), then
 * scale by 2^n through the exponent bits. Inputs are clamped to [-87, 88].
 */
static inline float fast_expf(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  /* round to nearest by the 1.5*2^23 trick: vectorises, no libm call */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f; /* ln2 high part (exact in float) */
  r = r - n * -2.12194440e-4f;    /* ln2 low part */
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union {
    float f;
    int32_t i;
  } s;
  s.i = ((int32_t)n + 127) << 23;
  return p * s.f;
}

/* tanh(u) = 1 - 2/(exp(2u)+1): absolute error ~1e-7, exact limits at +-inf. */
static inline float fast_tanhf(float u) { return 1.0f - 2.0f / (fast_expf(2.0f * u) + 1.0f); }


const char *gpt_last_error(const gpt_model *m) { return m ? m->err : "gpt: NULL model"; }

/*
 * Threads per pass. Even above the work thresholds, a region's join waits for
 * its slowest thread, and a thread that shares its core with a busy process
 * arrives a scheduler slice late: the default config (L=4, C=128, T=128,
 * B=16, ~100 regions a step) took 639 ms a step with 2 threads beside three
 * busy processes on 2 cores, 286 to 291 ms with --threads 1, ~80 ms idle with
 * 2 (fair share 2.5x: 200 ms). So each forward and backward first counts the
 * runnable tasks of the machine (/proc/loadavg, field 4, at most every 10 ms)
 * and uses cores - others threads (at least 1, at most the cap), where
 * others = runnable - max(cap, our own runnable threads): every thread of
 * ours may be among the runnable (the caller, workers still spinning, and the
 * engine's copy and Adam threads, counted in /proc/self/task/TID/stat, state
 * R; runnable - cap alone took those for other processes, and the streamed
 * model's forward then ran on one thread after each step: 37 -> 47 ms on the
 * default config), so others is a lower bound and an idle machine keeps every
 * thread. OMP_DYNAMIC is no substitute: libgomp's dynamic
 * team size follows the 15-minute load average, and beside the same three
 * processes 10 steps of the default config had not finished after 10 minutes.
 */
/* gpt_set_threads(), else the OpenMP runtime's default; 0 until first used */
static int threads_cap;
static int threads_now;
static double threads_checked; /* zo_clock_s() of the last look at /proc/loadavg */

/* Runnable tasks on the machine, or -1 when /proc/loadavg cannot be read. */
static int runnable_tasks(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  if (!f) return -1;
  double l1, l5, l15;
  int running = -1, total;
  if (fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) != 5) running = -1;
  fclose(f);
  return running;
}

/* Threads of this process in state R (running or runnable), or -1 when /proc/self/task cannot be
 * read. */
static int own_runnable(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", de->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* the thread has exited */
    const size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    const char *rp =
        strrchr(buf, ')'); /* "tid (comm) S ...": comm may hold blanks and parentheses */
    if (rp && rp[1] == ' ' && rp[2] == 'R') n++;
  }
  closedir(d);
  return n;
}

static int threads_adapt = 1; /* gpt_set_thread_adapt() */

/* OpenBLAS on one thread of its own whatever the OpenMP team (gemm() below forks over tiles itself). The
 * OpenMP build's openblas_set_num_threads() also sets the OpenMP thread count, so that is put back after. */
static void blas_single(int omp_threads) {
  openblas_set_num_threads(1);
  omp_set_num_threads(omp_threads);
}

static void adapt_threads(void) {
  if (threads_cap == 0) {
    threads_cap = threads_now = omp_get_max_threads();
    blas_single(threads_cap);
  }
  if (!threads_adapt || threads_cap <= 1) return;
  const double t = zo_clock_s();
  if (t - threads_checked < 0.01) return;
  threads_checked = t;
  /* The two counts are not one snapshot: a thread of ours that stops or starts between them looks like another
   * process's. A real competitor stays runnable, so the fewest others of up to three looks is taken. */
  int others = INT_MAX;
  for (int look = 0; look < 3 && others > 0; look++) {
    const int own = own_runnable(), running = runnable_tasks();
    if (running < 0) return;
    const int o = running - (own > threads_cap ? own : threads_cap);
    if (o < others) others = o;
  }
  int n = others > 0 ? threads_cap - others : threads_cap;
  n = n < 1 ? 1 : n;
  if (n != threads_now) {
    omp_set_num_threads(n);
    threads_now = n;
  }
}

void gpt_set_threads(int n) {
  if (n < 1) return;
  blas_single(n);
  threads_cap = threads_now = n;
  threads_checked = 0;
}

void gpt_set_thread_adapt(int on) {
  threads_adapt = on != 0;
  if (!threads_adapt && threads_cap > 0 && threads_now != threads_cap) {
    omp_set_num_threads(threads_cap);
    threads_now = threads_cap;
  }
}

const char *gpt_blas_core(void) {
  const char *s = openblas_get_corename();
  return s ? s : "unknown";
}

/* ------------------------------------------------------------------ */
/* when to fork: parallel regions only above a work threshold */

/*
 * Every OpenMP region below (OpenBLAS itself runs on one thread; gemm()
 * forks over a product's tiles) is a fork and a join: the join waits for the
 * slowest thread, and when another process has taken that thread's core, the
 * wait is a slice of the scheduler's time, milliseconds, not the microsecond
 * a fork costs on an idle machine. Before the thresholds, 40 steps of tests/configs/tiny.json
 * (L=2, C=32, T=32, B=4, some 80 regions a step of 1 to 100 us of work each)
 * took 0.2 s idle and 12 to 21 s beside three busy processes on 2 cores.
 * So a loop forks only when its estimated single-core time is at least
 * GPT_PAR_MIN_NS, and a matrix product is cut into tiles only above the
 * same time (gemm() below).
 *
 * Costs, measured on the 2-core EPYC (Zen 5, AVX-512, gcc -O2 -march=native,
 * one core, L2-resident data): add or copy 0.1 ns an element, LayerNorm 0.3
 * (C=128) to 0.4 (C=32), GELU 0.56, softmax with its scalar max 1.5; OpenBLAS
 * sgemm 100 to 150 GFLOP/s on one core, ~0.015 ns a multiply-add. A fork
 * and join of two threads costs ~1 us idle with libgomp's spinning waits and
 * ~2.5 us with OMP_WAIT_POLICY=passive; two threads win on an idle machine
 * from ~2 us (GELU) to ~5 us (add) of work. OpenBLAS's 2-thread sgemm gains
 * nothing below ~25 M multiply-adds (ratios 0.2 at 0.5 M, 0.73 at 12.6 M,
 * 1.0 at 25 M, 1.15 to 1.3 at 100 M), far above its own threshold (0.26 M).
 * GPT_PAR_MIN_NS from tools/zo-contention-bench.sh (tiny config, 40 steps,
 * three busy processes, 2 cores, fair share 2.5x; median slowdown of 2 or 3
 * repetitions, machine shared with other jobs): threshold 0 (every region
 * forks) 66x with libgomp's default spin, 28x passive; 20 us 11.6x / 4.3x;
 * 50 us 2.3x / 4.2x; 200 us 2.4x / 3.1x; never 4.4x / 3.5x. The default
 * config forks the same big regions at 50 and 200 us (5.5x and 7.0x before
 * adapt_threads() below), so 50 us, which keeps more of them parallel idle.
 */
#ifndef GPT_PAR_MIN_NS
#define GPT_PAR_MIN_NS 50000.0
#endif
#define NS_ADD 0.15  /* add, copy, scale: per element */
#define NS_LN 0.4    /* LayerNorm, forward or one backward loop: per element */
#define NS_GELU 0.6  /* GELU forward; backward ~1.5x */
#define NS_EXP 1.5   /* softmax: per element */
#define NS_MAC 0.015 /* sgemm: per multiply-add */
#define NS_INIT 9.0  /* gpt_param_init's normals (splitmix64, logf, sincosf): per element */

/* 1 when work of this estimated single-core time is worth a parallel region. */
static inline int par(double ns) { return ns >= GPT_PAR_MIN_NS; }

/*
 * Matrix products: C (M,N) = alpha op(A) op(B) + beta C, row-major, cut into
 * output tiles whose shape is a function of (M, N, K) alone (gemm_tiles()),
 * each tile one single-threaded cblas_sgemm; the tiles fork over the team.
 * So every element of C is formed by the same call on the same operands
 * whatever the thread count (and whichever thread takes the tile), and the
 * products do not depend on it.
 *
 * OpenBLAS's own threading does not give that: it splits a product by its
 * thread count, and where the split falls changes an element's bits. With
 * OpenBLAS 0.3.21's Haswell kernels (OPENBLAS_CORETYPE Haswell, or Zen,
 * which uses them, on this EPYC) 1% to 16% of the elements of each product
 * of the default model differed between 1 and 2 threads (2048x128x128,
 * the attention projection: 25321 of 262144); with the SkylakeX kernels
 * none in these products, which nothing promises.
 *
 * The longer side of C is split: a tile repacks the operand of the other
 * side (OpenBLAS packs both for each call), so the repacking stays a
 * fraction of the product. A tile aims at GEMM_TILE_MAC multiply-adds or
 * more (~250 us; a fork is ~1 us), in a power of two of tiles, at most
 * one per GEMM_TILE_SIDE of the split side (and 2); below the work
 * threshold a product is one tile, on the calling thread. Inside a parallel
 * region (attention's per-head products) a product's tiles run in turn on
 * the calling thread. Forward + backward of the default model (L=4 C=128
 * T=128 B=16) on the 2-core EPYC (OpenBLAS's own pick, Cooperlake), best of
 * 5 x 20 passes, machine shared: OpenBLAS's threads 141.7 ms on 1 thread,
 * 76.7 on 2; tiles, side 256: 143.2 and 73.5; side 128: 144.3 and 74.6;
 * rows first, 64 at the least, at most 16 Mi multiply-adds: 147.5 and 75.4
 * (the transposed weight-gradient products, K = B*T, repack the most).
 */
#define GEMM_TILE_MAC (16.0 * 1024 * 1024)
#define GEMM_TILE_SIDE 256 /* a split side of L rows or columns: at most L / 256 tiles (and 2) */
#define GEMM_TILE_ALIGN \
  16 /* a tile's side: a multiple of the kernels' unroll (16 rows and columns cover them) */

static inline int div_up(long a, long b) { return (int)((a + b - 1) / b); }
static inline int round_up(int a, int b) { return div_up(a, b) * b; }

/* The tile of an (M,N,K) product: *mb rows by *nb columns (M and N: one tile). Depends on the shape
 * only. */
static void gemm_tiles(int M, int N, int K, int *mb, int *nb) {
  *mb = M, *nb = N;
  const double mac = (double)M * N * K;
  if (!par(mac * NS_MAC)) return;
  const int L =
      M >= N ? M
             : N; /* the longer side is split: the operand each tile repacks is the other side's */
  const long most = L / GEMM_TILE_SIDE > 2 ? L / GEMM_TILE_SIDE : 2;
  long want = 1; /* the largest power of two of tiles of GEMM_TILE_MAC each, at most @most */
  while (2 * want <= most && 2.0 * want * GEMM_TILE_MAC <= mac) want *= 2;
  if (want == 1) return;
  const int side = round_up(div_up(L, want), GEMM_TILE_ALIGN);
  if (M >= N)
    *mb = side;
  else
    *nb = side;
}

/*
 * One cblas_sgemm on the calling thread. The OpenMP build of OpenBLAS takes
 * its thread count from omp_get_max_threads() at each call (one thread inside
 * an active parallel region), so outside one the calling thread's OpenMP
 * thread count is 1 for the call and restored after.
 */
static void sgemm_1t(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc) {
  const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (nt > 1) omp_set_num_threads(1);
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (nt > 1) omp_set_num_threads(nt);
}

static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  int mb, nb;
  gemm_tiles(M, N, K, &mb, &nb);
  const int tm = div_up(M, mb), tn = div_up(N, nb);
  if (tm * tn == 1) {
    sgemm_1t(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  /* dynamic: a thread that lost its core for a while leaves its later tiles to the others */
#pragma omp parallel for schedule(dynamic, 1) if (!omp_in_parallel())
  for (int t = 0; t < tm * tn; t++) {
    const int i0 = (t / tn) * mb, j0 = (t % tn) * nb;
    const int m = M - i0 < mb ? M - i0 : mb, n = N - j0 < nb ? N - j0 : nb;
    const float *a = ta == CblasNoTrans ? A + (size_t)i0 * lda : A + i0;
    const float *b = tb == CblasNoTrans ? B + j0 : B + (size_t)j0 * ldb;
    sgemm_1t(ta, tb, m, n, K, alpha, a, lda, b, ldb, beta, C + (size_t)i0 * ldc + j0, ldc);
  }
}

/*
 * The bf16 products (gpt_set_gemm_bf16): the same tiles as gemm() (a function of
 * the shape), each tile one oneDNN call on one thread (gemm_bf16_1t), so the
 * bits do not depend on the thread count either. A failed tile marks the pass
 * failed (m->gemm_failed, its message in m->err); the caller's pass returns
 * the error at its end.
 */
static void gemm16(gpt_model *m, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                   const uint16_t *B, int ldb, int accumulate, float *C, int ldc) {
  int mb, nb;
  gemm_tiles(M, N, K, &mb, &nb);
  const int tm = div_up(M, mb), tn = div_up(N, nb);
#pragma omp parallel for schedule(dynamic, 1) if (tm * tn > 1 && !omp_in_parallel())
  for (int t = 0; t < tm * tn; t++) {
    const int i0 = (t / tn) * mb, j0 = (t % tn) * nb;
    const int mm = M - i0 < mb ? M - i0 : mb, n = N - j0 < nb ? N - j0 : nb;
    const uint16_t *a = ta ? A + i0 : A + (size_t)i0 * lda;
    const uint16_t *b = tb ? B + (size_t)j0 * ldb : B + j0;
    char err[sizeof m->err];
    if (gemm_bf16_1t(ta, tb, mm, n, K, a, lda, b, ldb, accumulate, C + (size_t)i0 * ldc + j0, ldc,
                     err, sizeof err)) {
#pragma omp critical(gpt_gemm16_err)
      if (!m->gemm_failed) {
        m->gemm_failed = 1;
        seterr(m->err, sizeof m->err, "%s", err);
      }
    }
  }
}

/* The primitive of every tile of one (M,N,K) bf16 product (gemm16's tiles), made now: 0, or -1 with
 * @err. */
static int prepare16(int ta, int tb, int M, int N, int K, int lda, int ldb, int accumulate, int ldc,
                     char *err, size_t errlen) {
  int mb, nb;
  gemm_tiles(M, N, K, &mb, &nb);
  const int ms[2] = {mb, M % mb},
            ns[2] = {nb, N % nb}; /* full tiles, and the edge ones (0: none) */
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      if (ms[a] > 0 && ns[b] > 0 &&
          gemm_bf16_prepare(ta, tb, ms[a], ns[b], K, lda, ldb, accumulate, ldc, err, errlen))
        return -1;
  return 0;
}

int gpt_gemm_bf16_probe(const gpt_config *c, int max_batch, char *err, size_t errlen) {
  const int C = c->d_model, N = max_batch * c->seq_len;
  const int io[4][2] = {{C, 3 * C},
                        {C, C},
                        {C, 4 * C},
                        {4 * C, C}}; /* (in, out) of qkv, attn proj, fc, fc proj */
  for (int p = 0; p < 4; p++) {
    const int Ci = io[p][0], OC = io[p][1];
    if (prepare16(0, 1, N, OC, Ci, Ci, Ci, 1, OC, err,
                  errlen) || /* forward: out (N,OC) = inp W^T (+ bias) */
        prepare16(0, 0, N, Ci, OC, OC, Ci, 0, Ci, err,
                  errlen) || /* backward: dinp (N,Ci) = dout W */
        /* backward: dW (OC,Ci) += dout^T inp */
        prepare16(1, 0, OC, Ci, N, OC, Ci, 1, Ci, err, errlen))
      return -1;
  }
  return 0;
}

void gpt_gemm_bf16_refusal(char *msg, size_t cap, int streamed, zo_dtype working) {
  snprintf(
      msg, cap,
      "train.cpu_gemm: \"bf16\" is for the CPU model with train.model_memory \"streamed\" and "
      "bf16.enabled (its products take the engine's bf16 working weights); this run has the CPU model%s, "
      "working dtype %s: set train.cpu_gemm to \"fp32\" or \"auto\"",
      streamed ? "" : " resident", zo_dtype_name(working));
}

int gpt_gemm_bf16_resolve(int mode, const gpt_config *c, int max_batch, int cuda, int streamed,
                          zo_dtype working, int *bf16, char *msg, size_t cap) {
  *bf16 = 0;
  msg[0] = 0;
  if (cuda || mode == GPT_GEMM_FP32) return 0; /* the CUDA model's products are bf16 already */
  const char *what = mode == GPT_GEMM_AUTO ? "\"auto\"" : "\"bf16\"";
  if (!streamed || working != ZO_DTYPE_BF16) {
    if (mode == GPT_GEMM_AUTO)
      return snprintf(
                 msg, cap,
                 "train.cpu_gemm \"auto\": fp32 products (OpenBLAS %s): bf16 products need the CPU "
                 "model with train.model_memory \"streamed\" and bf16.enabled; this run has%s working dtype %s",
                 gpt_blas_core(), streamed ? "" : " the model resident,", zo_dtype_name(working)),
             0;
    gpt_gemm_bf16_refusal(msg, cap, streamed, working);
    return -1;
  }
  char why[512];
  const double t0 = zo_clock_s();
  const int rc = gpt_gemm_bf16_probe(c, max_batch, why, sizeof why);
  const double ms = (zo_clock_s() - t0) * 1e3;
  /* what the CPU reports, and oneDNN's own ceiling when the environment sets one (oneDNN reads
   * either name) */
  const char *lim = getenv("ONEDNN_MAX_CPU_ISA") ? "ONEDNN_MAX_CPU_ISA"
                    : getenv("DNNL_MAX_CPU_ISA") ? "DNNL_MAX_CPU_ISA"
                                                 : NULL;
  char cpu[160];
  snprintf(cpu, sizeof cpu, "%s%s%s%s%s",
           zo_simd_has_avx512_bf16()           ? "AVX512_BF16"
           : zo_simd_supported(ZO_SIMD_AVX512) ? "AVX-512 without AVX512_BF16"
                                               : "no AVX-512",
           lim ? ", oneDNN held to " : "", lim ? getenv(lim) : "", lim ? " by " : "",
           lim ? lim : "");
  if (rc == 0) {
    *bf16 = 1;
    if (mode == GPT_GEMM_AUTO)
      snprintf(
          msg, cap,
          "train.cpu_gemm \"auto\": bf16 products (%s: every product of this model at micro-batch %d "
          "made in %.0f ms; CPU: %s)",
          gpt_gemm_bf16_isa(), max_batch, ms, cpu);
    return 0;
  }
  if (mode == GPT_GEMM_AUTO)
    return snprintf(
               msg, cap,
               "train.cpu_gemm \"auto\": fp32 products (OpenBLAS %s): this CPU (%s) cannot run "
               "oneDNN's bf16 products: %s",
               gpt_blas_core(), cpu, why),
           0;
  snprintf(
      msg, cap,
      "train.cpu_gemm: %s: this CPU (%s) cannot run oneDNN's bf16 products: %s; set train.cpu_gemm to "
      "\"auto\" (bf16 products where the CPU runs them, fp32 elsewhere) or \"fp32\"",
      what, cpu, why);
  return -1;
}

/* @n fp32 values to bf16 (round to nearest even), one thread: a product's activation operand, N x
 * (C or 4C). */
static void to_bf16(gpt_model *m, uint16_t *dst, const float *src, size_t n) {
  if (zo_cast(dst, ZO_DTYPE_BF16, src, ZO_DTYPE_F32, n, 1) != ZO_OK && !m->gemm_failed) {
    m->gemm_failed = 1;
    seterr(m->err, sizeof m->err, "bf16 products: rounding %zu activations to bf16 failed", n);
  }
}

/* ------------------------------------------------------------------ */
/* initialisation */

/*
 * One call per tensor; a 10B model is 9.68e9 elements at ~9 ns each on one
 * core (logf, sincosf: 88 s on the 2-core EPYC), so the normal tensors fork
 * over the pairs above the work threshold like the kernels below.
 */
void gpt_param_init(const gpt_config *c, int i, uint64_t seed, float *out) {
  int np = gpt_num_params(c);
  if (i < 0 || i >= np || !out) return;
  size_t n;
  int kind; /* 0 normal, 1 ones, 2 zeros */
  float std = 0.02f;
  const size_t C = (size_t)c->d_model;
  if (i == 0) {
    n = (size_t)c->vocab * C;
    kind = 0;
  } else if (i == 1) {
    n = (size_t)c->seq_len * C;
    kind = 0;
  } else if (i >= np - 2) {
    n = C;
    kind = i == np - 2 ? 1 : 2;
  } else {
    int k = (i - 2) % GPT_PARAMS_PER_LAYER;
    switch (k) {
      case GPT_P_LN1_W:
      case GPT_P_LN2_W:
        n = C;
        kind = 1;
        break;
      case GPT_P_LN1_B:
      case GPT_P_LN2_B:
      case GPT_P_ATTPROJ_B:
      case GPT_P_FCPROJ_B:
        n = C;
        kind = 2;
        break;
      case GPT_P_QKV_B:
        n = 3 * C;
        kind = 2;
        break;
      case GPT_P_FC_B:
        n = 4 * C;
        kind = 2;
        break;
      case GPT_P_QKV_W:
        n = 3 * C * C;
        kind = 0;
        break;
      case GPT_P_FC_W:
        n = 4 * C * C;
        kind = 0;
        break;
      case GPT_P_ATTPROJ_W:
        n = C * C;
        kind = 0;
        std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
        break;
      default: /* GPT_P_FCPROJ_W */
        n = 4 * C * C;
        kind = 0;
        std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
        break;
    }
  }
  if (kind == 1) {
    for (size_t j = 0; j < n; j++) out[j] = 1.0f;
    return;
  }
  if (kind == 2) {
    memset(out, 0, n * sizeof(float));
    return;
  }
  /* Box-Muller on pairs: elements 2k and 2k+1 share the counter k, and pair k is a function of (key, k) alone, so
   * the pairs split over any number of threads (static chunks) give the bits one thread gives. */
  const uint64_t key = splitmix64(seed ^ splitmix64(0x5A17ull + (uint64_t)i));
  const size_t pairs = n / 2 + (n & 1);
  adapt_threads();
#pragma omp parallel for schedule(static) if (par((double)n * NS_INIT))
  for (size_t k = 0; k < pairs; k++) {
    const size_t j = 2 * k;
    float u1 = u01(splitmix64(key + 2 * k));
    float u2 = u01(splitmix64(key + 2 * k + 1));
    float rad = sqrtf(-2.0f * logf(u1));
    float th = 6.28318530717958647f * u2;
    out[j] = std * rad * cosf(th);
    if (j + 1 < n) out[j + 1] = std * rad * sinf(th);
  }
}

/* ------------------------------------------------------------------ */
/* forward kernels */

static void encoder_forward(float *out, const uint8_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C) {
#pragma omp parallel for schedule(static) if (par((double)B * T * C * NS_ADD))
  for (int n = 0; n < B * T; n++) {
    const float *e = wte + (size_t)inp[n] * C;
    const float *p = wpe + (size_t)(n % T) * C;
    float *o = out + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
  }
}

/* out (N,C) = (inp - mean) * rstd * w + b per row; mean, rstd (N) kept for backward. */
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if (par((double)N * C * NS_LN))
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    float mu = s / (float)C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
      float d = x[c] - mu;
      v += d * d;
    }
    float rs = 1.0f / sqrtf(v / (float)C + GPT_LN_EPS);
    float *o = out + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - mu) * rs * w[c] + b[c];
    mean[n] = mu;
    rstd[n] = rs;
  }
}

/* The bias of a product into out (N,OC) before it: added (@accumulate) or copied into each row. */
static void bias_rows(float *out, const float *bias, int N, int OC, int accumulate) {
  if (!bias) return;
#pragma omp parallel for schedule(static) if (par((double)N * OC * NS_ADD))
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * OC;
    if (accumulate) {
#pragma omp simd
      for (int k = 0; k < OC; k++) o[k] += bias[k];
    } else {
      memcpy(o, bias, (size_t)OC * sizeof(float));
    }
  }
}

/*
 * out (N,OC) (+)= inp (N,C) W^T + bias, W (OC,C). With @accumulate the
 * product is added to what out holds (the residual stream).
 */
static void matmul_forward(float *out, const float *inp, const float *W, const float *bias, int N,
                           int C, int OC, int accumulate) {
  bias_rows(out, bias, N, OC, accumulate);
  float beta = (bias || accumulate) ? 1.0f : 0.0f;
  gemm(CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, W, C, beta, out, OC);
}

/* matmul_forward() with bf16 W (OC,C) and inp rounded to bf16 (gpt_set_gemm_bf16); bias and
 * accumulation as there. */
static void matmul_forward_bf16(gpt_model *m, float *out, const float *inp, const uint16_t *W,
                                const float *bias, int N, int C, int OC, int accumulate) {
  bias_rows(out, bias, N, OC, accumulate);
  to_bf16(m, m->act16, inp, (size_t)N * C);
  gemm16(m, 0, 1, N, OC, C, m->act16, C, W, C, bias || accumulate, out, OC);
}

/*
 * Causal multi-head attention. qkv (B,T,3C) -> out (B,T,C); att
 * (B,NH,T,T) keeps the softmax (zero above the diagonal). Per (b,h):
 * S = q k^T / sqrt(hs), att = causal softmax(S), out_h = att v. The small
 * matmuls run single-threaded inside the OpenMP loop (OpenBLAS does not
 * nest threads inside a parallel region).
 */
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH) {
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  /* per (b,h): two T*T*hs products and a T*T softmax (half of it masked) */
#pragma omp parallel for schedule( \
    static) if (par((double)B * NH * T * T * (2.0 * hs * NS_MAC + NS_EXP / 2)))
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *k = q + C;
    const float *v = q + 2 * C;
    float *a = att + (size_t)bh * T * T;
    gemm(CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
    for (int i = 0; i < T; i++) {
      float *row = a + (size_t)i * T;
      float mx = row[0];
      for (int j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int j = 0; j <= i; j++) {
        float e = fast_expf(row[j] - mx);
        row[j] = e;
        s += e;
      }
      float inv = 1.0f / s;
#pragma omp simd
      for (int j = 0; j <= i; j++) row[j] *= inv;
      for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
    float *o = out + (size_t)b * T * C + (size_t)h * hs;
    gemm(CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, C3, 0.0f, o, C);
  }
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* GELU, tanh approximation (Hendrycks & Gimpel, 2016): 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715
 * x^3))). */
static void gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (par((double)n * NS_GELU))
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_K * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + fast_tanhf(u));
  }
}

/* probs (N,V) = softmax(logits); losses (N) = -log probs[target]. */
static void softmax_xent_forward(float *probs, float *losses, const float *logits,
                                 const uint8_t *targets, int N, int V) {
#pragma omp parallel for schedule(static) if (par((double)N * V * NS_EXP))
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * V;
    float *p = probs + (size_t)n * V;
    float mx = l[0];
    for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < V; v++) {
      float e = fast_expf(l[v] - mx);
      p[v] = e;
      s += e;
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int v = 0; v < V; v++) p[v] *= inv;
    /* log-sum-exp form: exact for tiny probabilities */
    losses[n] = mx + logf(s) - l[targets[n]];
  }
}

/* ------------------------------------------------------------------ */
/* forward */

/* Parameter i's weights: in the model (resident) or bound by the caller (streamed). */
static const float *W(gpt_model *m, int i) {
  return m->streamed ? (const float *)m->bind[i] : m->params_mem + m->offsets[i];
}
/* Backward writes into the scratch gradient; gpt_backward() then adds it to
 * grads_mem. Streamed: straight into the caller's bound buffer. */
static float *G(gpt_model *m, int i) {
  return m->streamed ? (float *)m->bind[m->n_params + i] : m->gscratch + m->offsets[i];
}

/* The products of block parameter @wi: bf16 when gpt_set_gemm_bf16() made it one of those (its
 * binding is bf16). */
static void mm_forward(gpt_model *m, float *out, const float *inp, int wi, int bi, int N, int C,
                       int OC, int acc) {
  if (m->gemm_bf16 && gpt_gemm_bf16_param(&m->cfg, wi))
    matmul_forward_bf16(m, out, inp, (const uint16_t *)m->bind[wi], W(m, bi), N, C, OC, acc);
  else
    matmul_forward(out, inp, W(m, wi), W(m, bi), N, C, OC, acc);
}

void gpt_set_hook(gpt_model *m, gpt_hook_fn fn, void *user) {
  m->hook = fn;
  m->hook_user = user;
}

/*
 * Streamed mode, after the hook: at a begin, every tensor of the group must
 * have a weight bound (and in backward a gradient buffer, zeroed here); at an
 * end, the group's bindings are dropped. -1 with a message naming the first
 * unbound tensor.
 */
static int stream_group(gpt_model *m, int phase, int group, int end) {
  int first, count;
  gpt_group_params(&m->cfg, group, &first, &count);
  const char *fn = phase ? "gpt_backward" : "gpt_forward";
  for (int i = first; i < first + count; i++) {
    void **w = &m->bind[i], **g = &m->bind[m->n_params + i];
    if (end) {
      *w = *g = NULL;
    } else if (!*w || (phase == GPT_HOOK_BACKWARD && !*g)) {
      seterr(m->err, sizeof m->err,
             "%s: %s (parameter %d) has no %s bound at the begin of group %d", fn, m->specs[i].name,
             i, *w ? "gradient buffer (gpt_bind_grad)" : "weights (gpt_bind_weight)", group);
      return -1;
    } else if (phase == GPT_HOOK_BACKWARD) {
      memset(*g, 0, m->specs[i].n_elems * sizeof(float));
    }
  }
  return 0;
}

/* Call the hook; non-zero aborts the pass with an error message. */
static int hook(gpt_model *m, int phase, int group, int end) {
  if (m->hook && m->hook(m->hook_user, phase, group, end)) {
    seterr(m->err, sizeof m->err, "%s: layer hook failed at group %d",
           phase ? "gpt_backward" : "gpt_forward", group);
    return -1;
  }
  return m->streamed ? stream_group(m, phase, group, end) : 0;
}

/* Backward end of a group: add its gradients from gscratch into the
 * accumulated gradients (the only rounding of the accumulation), then hook. */
static int group_done(gpt_model *m, int group) {
  if (m->streamed) return hook(m, GPT_HOOK_BACKWARD, group, 1); /* the caller takes the gradients */
  int first, count;
  gpt_group_params(&m->cfg, group, &first, &count);
  const size_t lo = m->offsets[first];
  const size_t hi = first + count < m->n_params ? m->offsets[first + count] : m->n_floats;
  float *g = m->grads_mem;
  const float *sc = m->gscratch;
#pragma omp parallel for simd schedule(static) if (par((double)(hi - lo) * NS_ADD))
  for (size_t i = lo; i < hi; i++) g[i] += sc[i];
  return hook(m, GPT_HOOK_BACKWARD, group, 1);
}

static int check_tokens(gpt_model *m, const uint8_t *t, size_t n, const char *what) {
  if (m->cfg.vocab >= 256) return 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i] >= m->cfg.vocab) {
      seterr(m->err, sizeof m->err, "gpt_forward: %s[%zu] = %d is not < vocab %d", what, i, t[i],
             m->cfg.vocab);
      return -1;
    }
  }
  return 0;
}

/* Where block l's activations live: slot l, or slot 0 with recompute. */
typedef struct block_acts {
  const float *res; /* block input (N, C): encoded or the previous block's residual3 */
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *r2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fcg;
  float *r3; /* block output (N, C), always slot l */
} block_acts;

static block_acts block_slot(gpt_model *m, int l) {
  const size_t Nn = (size_t)m->B * m->T, NC = Nn * m->cfg.d_model;
  const size_t TT = (size_t)m->B * m->cfg.n_head * m->T * m->T;
  const size_t s = m->recompute ? 0 : (size_t)l;
  block_acts a;
  a.res = l == 0 ? m->encoded : m->residual3 + (size_t)(l - 1) * NC;
  a.ln1 = m->ln1 + s * NC, a.ln1_mean = m->ln1_mean + s * Nn, a.ln1_rstd = m->ln1_rstd + s * Nn;
  a.qkv = m->qkv + s * NC * 3, a.att = m->att + s * TT, a.atty = m->atty + s * NC,
  a.r2 = m->residual2 + s * NC;
  a.ln2 = m->ln2 + s * NC, a.ln2_mean = m->ln2_mean + s * Nn, a.ln2_rstd = m->ln2_rstd + s * Nn;
  a.fch = m->fch + s * NC * 4, a.fcg = m->fch_gelu + s * NC * 4;
  a.r3 = m->residual3 + (size_t)l * NC;
  return a;
}

/*
 * Block l's forward on the current (B,T) from its input. With @to_output 0
 * (the recompute in backward) it stops before mlp.c_proj: everything the
 * backward reads is formed, and residual3[l], which backward does not read,
 * is left as the forward wrote it. Same operations in the same order as the
 * forward, so a recomputed activation is bitwise the one the forward made
 * (the gradient check compares the two modes).
 */
static void block_forward(gpt_model *m, int l, int to_output) {
  const int B = m->B, T = m->T, N = B * T, C = m->cfg.d_model, NH = m->cfg.n_head;
  const size_t NC = (size_t)N * C;
  block_acts a = block_slot(m, l);
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.res, W(m, LP(l, GPT_P_LN1_W)),
                    W(m, LP(l, GPT_P_LN1_B)), N, C);
  mm_forward(m, a.qkv, a.ln1, LP(l, GPT_P_QKV_W), LP(l, GPT_P_QKV_B), N, C, 3 * C, 0);
  attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
  memcpy(a.r2, a.res, NC * sizeof(float));
  mm_forward(m, a.r2, a.atty, LP(l, GPT_P_ATTPROJ_W), LP(l, GPT_P_ATTPROJ_B), N, C, C, 1);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.r2, W(m, LP(l, GPT_P_LN2_W)),
                    W(m, LP(l, GPT_P_LN2_B)), N, C);
  mm_forward(m, a.fch, a.ln2, LP(l, GPT_P_FC_W), LP(l, GPT_P_FC_B), N, C, 4 * C, 0);
  gelu_forward(a.fcg, a.fch, NC * 4);
  if (!to_output) return;
  memcpy(a.r3, a.r2, NC * sizeof(float));
  mm_forward(m, a.r3, a.fcg, LP(l, GPT_P_FCPROJ_W), LP(l, GPT_P_FCPROJ_B), N, 4 * C, C, 1);
}

float gpt_forward(gpt_model *m, const uint8_t *inputs, const uint8_t *targets, int B, int T) {
  if (!m) return NAN;
  m->err[0] =
      0; /* a NaN loss with no message is a numeric one (non-finite weights), not a failure */
  if (!inputs || B < 1 || B > m->max_batch || T < 1 || T > m->cfg.seq_len) {
    seterr(m->err, sizeof m->err,
           "gpt_forward: bad arguments (inputs %p, B %d of max %d, T %d of max %d)",
           (const void *)inputs, B, m->max_batch, T, m->cfg.seq_len);
    return NAN;
  }
  const size_t Nn = (size_t)B * T;
  if (check_tokens(m, inputs, Nn, "inputs") != 0) return NAN;
  if (targets && check_tokens(m, targets, Nn, "targets") != 0) return NAN;
  adapt_threads();
  double t0 = zo_clock_s();

  const int L = m->cfg.n_layer, C = m->cfg.d_model, V = m->cfg.vocab;
  const int N = B * T;
  const size_t NC = Nn * C;
  memcpy(m->inputs, inputs, Nn);
  if (targets) memcpy(m->targets, targets, Nn);
  m->B = B;
  m->T = T;
  m->have_targets = 0;
  m->gemm_failed = 0;
  if (m->streamed)
    memset(m->bind, 0, 2 * (size_t)m->n_params * sizeof *m->bind); /* bound in the hook only */

  if (hook(m, GPT_HOOK_FORWARD, 0, 0)) return NAN;
  encoder_forward(m->encoded, inputs, W(m, 0), W(m, 1), B, T, C);
  for (int l = 0; l < L; l++) {
    if (hook(m, GPT_HOOK_FORWARD, l + 1, 0)) return NAN;
    block_forward(m, l, 1);
    if (m->gemm_failed) return NAN; /* a bf16 product failed: m->err names it */
    if (hook(m, GPT_HOOK_FORWARD, l + 1, 1)) return NAN;
  }
  const int f = m->n_params - 2;
  if (hook(m, GPT_HOOK_FORWARD, L + 1, 0)) return NAN;
  layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->residual3 + (size_t)(L - 1) * NC, W(m, f),
                    W(m, f + 1), N, C);
  if (hook(m, GPT_HOOK_FORWARD, L + 1, 1)) return NAN;
  matmul_forward(m->logits, m->lnf, W(m, 0), NULL, N, C, V, 0);
  if (hook(m, GPT_HOOK_FORWARD, 0, 1)) return NAN;

  float loss = 0.0f;
  if (targets) {
    softmax_xent_forward(m->probs, m->losses, m->logits, targets, N, V);
    double s = 0.0;
    for (int n = 0; n < N; n++) s += m->losses[n];
    loss = (float)(s / (double)N);
    m->have_targets = 1;
  }
  m->t_fwd += zo_clock_s() - t0;
  return loss;
}

/* ------------------------------------------------------------------ */
/* backward kernels */

/* dst[k] += sum_n src[n*K + k], parallel over 16-column blocks (fixed order per column). */
static void colsum_add(float *dst, const float *src, int N, int K) {
  const int nblk = (K + 15) / 16;
#pragma omp parallel for schedule(static) if (par((double)N * K * NS_ADD))
  for (int blk = 0; blk < nblk; blk++) {
    int k0 = blk * 16, k1 = k0 + 16 < K ? k0 + 16 : K;
    float acc[16] = {0};
    for (int n = 0; n < N; n++) {
      const float *s = src + (size_t)n * K;
      for (int k = k0; k < k1; k++) acc[k - k0] += s[k];
    }
    for (int k = k0; k < k1; k++) dst[k] += acc[k - k0];
  }
}

/*
 * Backward of out = inp W^T + b: dinp (N,C) = dout W (overwritten, or added
 * when @dinp_acc), dW (OC,C) += dout^T inp, dbias (OC) += column sums.
 */
static void matmul_backward(float *dinp, float *dW, float *dbias, const float *dout,
                            const float *inp, const float *Wt, int N, int C, int OC, int dinp_acc) {
  gemm(CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, Wt, C, dinp_acc ? 1.0f : 0.0f, dinp,
       C);
  gemm(CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dW, C);
  if (dbias) colsum_add(dbias, dout, N, OC);
}

/* matmul_backward() with bf16 W and dout, inp rounded to bf16 (gpt_set_gemm_bf16); dW accumulates
 * in fp32. */
static void matmul_backward_bf16(gpt_model *m, float *dinp, float *dW, float *dbias,
                                 const float *dout, const float *inp, const uint16_t *Wt, int N,
                                 int C, int OC, int dinp_acc) {
  to_bf16(m, m->dout16, dout, (size_t)N * OC);
  to_bf16(m, m->act16, inp, (size_t)N * C);
  gemm16(m, 0, 0, N, C, OC, m->dout16, OC, Wt, C, dinp_acc, dinp, C);
  gemm16(m, 1, 0, OC, C, N, m->dout16, OC, m->act16, C, 1, dW, C);
  if (dbias) colsum_add(dbias, dout, N, OC);
}

static void mm_backward(gpt_model *m, float *dinp, int wi, int bi, const float *dout,
                        const float *inp, int N, int C, int OC) {
  if (m->gemm_bf16 && gpt_gemm_bf16_param(&m->cfg, wi))
    matmul_backward_bf16(m, dinp, G(m, wi), G(m, bi), dout, inp, (const uint16_t *)m->bind[wi], N,
                         C, OC, 0);
  else
    matmul_backward(dinp, G(m, wi), G(m, bi), dout, inp, W(m, wi), N, C, OC, 0);
}

/*
 * LayerNorm backward: dinp (N,C) += rstd * (w*dout - mean(w*dout) - xhat *
 * mean(w*dout*xhat)), dw (C) += sum_n dout*xhat, db (C) += sum_n dout,
 * with xhat = (inp - mean) * rstd recomputed.
 */
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *mean, const float *rstd,
                               const float *w, int N, int C) {
#pragma omp parallel for schedule(static) if (par((double)N * C * NS_LN))
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    float *dx = dinp + (size_t)n * C;
    const float mu = mean[n], rs = rstd[n];
    float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
    for (int c = 0; c < C; c++) {
      float xh = (x[c] - mu) * rs;
      float g = w[c] * dy[c];
      a += g;
      b += g * xh;
    }
    a /= (float)C;
    b /= (float)C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float xh = (x[c] - mu) * rs;
      dx[c] += rs * (w[c] * dy[c] - a - xh * b);
    }
  }
  const int nblk = (C + 15) / 16;
#pragma omp parallel for schedule(static) if (par((double)N * C * NS_LN))
  for (int blk = 0; blk < nblk; blk++) {
    int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
    float aw[16] = {0}, ab[16] = {0};
    for (int n = 0; n < N; n++) {
      const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
      const float mu = mean[n], rs = rstd[n];
      for (int c = c0; c < c1; c++) {
        aw[c - c0] += dy[c] * (x[c] - mu) * rs;
        ab[c - c0] += dy[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += aw[c - c0];
      db[c] += ab[c - c0];
    }
  }
}

/* In place: d (n) holds dL/d gelu(x); becomes dL/dx. */
static void gelu_backward(float *d, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (par((double)n * NS_GELU * 1.5))
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_K * (x + 0.044715f * x * x * x);
    float t = fast_tanhf(u);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    d[i] *= g;
  }
}

/*
 * Attention backward, per (b,h): datt = dout v^T, dv = att^T dout,
 * dS = att * (datt - rowsum(att*datt)) / sqrt(hs) (causal), dq = dS k,
 * dk = dS^T q. dqkv (B,T,3C) is overwritten; datt (B,NH,T,T) is scratch.
 */
static void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH) {
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  /* per (b,h): four T*T*hs products and two passes over the causal T*T half */
#pragma omp parallel for schedule( \
    static) if (par((double)B * NH * T * T * (4.0 * hs * NS_MAC + NS_ADD)))
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const size_t base = (size_t)b * T * C3 + (size_t)h * hs;
    const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
    float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
    const float *a = att + (size_t)bh * T * T;
    float *da = datt + (size_t)bh * T * T;
    const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
    gemm(CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, da, T);
    gemm(CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C, 0.0f, dv, C3);
    for (int i = 0; i < T; i++) {
      const float *ar = a + (size_t)i * T;
      float *dr = da + (size_t)i * T;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int j = 0; j <= i; j++) s += ar[j] * dr[j];
#pragma omp simd
      for (int j = 0; j <= i; j++) dr[j] = ar[j] * (dr[j] - s) * scale;
      for (int j = i + 1; j < T; j++) dr[j] = 0.0f;
    }
    gemm(CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, k, C3, 0.0f, dq, C3);
    gemm(CblasTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, q, C3, 0.0f, dk, C3);
  }
}

/* dwte[tok] += dres, dwpe[t] += dres; wpe over t in parallel, wte in row order (ids repeat). */
static void encoder_backward(float *dwte, float *dwpe, const float *dres, const uint8_t *inp, int B,
                             int T, int C) {
#pragma omp parallel for schedule(static) if (par((double)B * T * C * NS_ADD))
  for (int t = 0; t < T; t++) {
    float *dp = dwpe + (size_t)t * C;
    for (int b = 0; b < B; b++) {
      const float *d = dres + ((size_t)b * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) dp[c] += d[c];
    }
  }
  for (int n = 0; n < B * T; n++) {
    float *de = dwte + (size_t)inp[n] * C;
    const float *d = dres + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) de[c] += d[c];
  }
}

int gpt_backward(gpt_model *m, float loss_mult) {
  if (!m) return -1;
  if (!m->have_targets) {
    seterr(m->err, sizeof m->err, "gpt_backward: no forward with targets to differentiate");
    return -1;
  }
  adapt_threads();
  double t0 = zo_clock_s();
  const int L = m->cfg.n_layer, C = m->cfg.d_model, NH = m->cfg.n_head, V = m->cfg.vocab;
  const int B = m->B, T = m->T, N = B * T;
  const size_t NC = (size_t)N * C;
  const float dscale = loss_mult / (float)N;
  /* One backward's gradient is formed in gscratch and added at the end, so
   * accumulation over calls is a single rounding per element (two equal
   * backwards give exactly 2x). */
  m->gemm_failed = 0;
  if (m->streamed) /* bound in the hook only; each gradient buffer is zeroed at its group's begin */
    memset(m->bind, 0, 2 * (size_t)m->n_params * sizeof *m->bind);
  else
    memset(m->gscratch, 0, m->n_floats * sizeof(float));

  /* d loss / d logits = (probs - onehot(target)) / N * loss_mult */
  {
    const float *probs = m->probs;
    float *dl = m->dlogits;
    const uint8_t *tg = m->targets;
#pragma omp parallel for schedule(static) if (par((double)N * V * NS_ADD))
    for (int n = 0; n < N; n++) {
      const float *p = probs + (size_t)n * V;
      float *d = dl + (size_t)n * V;
#pragma omp simd
      for (int v = 0; v < V; v++) d[v] = p[v] * dscale;
      d[tg[n]] -= dscale;
    }
  }
  /* logits = lnf wte^T (tied) */
  if (hook(m, GPT_HOOK_BACKWARD, 0, 0)) return -1;
  matmul_backward(m->dbuf_c, G(m, 0), NULL, m->dlogits, m->lnf, W(m, 0), N, C, V, 0);
  const int f = m->n_params - 2;
  memset(m->dres, 0, NC * sizeof(float));
  if (hook(m, GPT_HOOK_BACKWARD, L + 1, 0)) return -1;
  layernorm_backward(m->dres, G(m, f), G(m, f + 1), m->dbuf_c, m->residual3 + (size_t)(L - 1) * NC,
                     m->lnf_mean, m->lnf_rstd, W(m, f), N, C);
  if (group_done(m, L + 1)) return -1;

  for (int l = L - 1; l >= 0; l--) {
    if (hook(m, GPT_HOOK_BACKWARD, l + 1, 0)) return -1;
    if (m->recompute) block_forward(m, l, 0);
    const block_acts a = block_slot(m, l);
    const float *res = a.res, *ln1 = a.ln1, *qkv = a.qkv, *att = a.att, *atty = a.atty, *r2 = a.r2,
                *ln2 = a.ln2;
    const float *fch = a.fch, *fcg = a.fcg;
    /* r3 = r2 + fcg Wfp^T + bfp */
    mm_backward(m, m->dbuf_4c, LP(l, GPT_P_FCPROJ_W), LP(l, GPT_P_FCPROJ_B), m->dres, fcg, N, 4 * C,
                C);
    gelu_backward(m->dbuf_4c, fch, NC * 4);
    /* fch = ln2 Wfc^T + bfc */
    mm_backward(m, m->dbuf_c, LP(l, GPT_P_FC_W), LP(l, GPT_P_FC_B), m->dbuf_4c, ln2, N, C, 4 * C);
    layernorm_backward(m->dres, G(m, LP(l, GPT_P_LN2_W)), G(m, LP(l, GPT_P_LN2_B)), m->dbuf_c, r2,
                       a.ln2_mean, a.ln2_rstd, W(m, LP(l, GPT_P_LN2_W)), N, C);
    /* r2 = res + atty Wp^T + bp */
    mm_backward(m, m->dbuf_c, LP(l, GPT_P_ATTPROJ_W), LP(l, GPT_P_ATTPROJ_B), m->dres, atty, N, C,
                C);
    attention_backward(m->dbuf_3c, m->datt, m->dbuf_c, qkv, att, B, T, C, NH);
    /* qkv = ln1 Wqkv^T + bqkv */
    mm_backward(m, m->dbuf_c, LP(l, GPT_P_QKV_W), LP(l, GPT_P_QKV_B), m->dbuf_3c, ln1, N, C, 3 * C);
    layernorm_backward(m->dres, G(m, LP(l, GPT_P_LN1_W)), G(m, LP(l, GPT_P_LN1_B)), m->dbuf_c, res,
                       a.ln1_mean, a.ln1_rstd, W(m, LP(l, GPT_P_LN1_W)), N, C);
    if (m->gemm_failed) return -1; /* a bf16 product failed: m->err names it */
    if (group_done(m, l + 1)) return -1;
  }
  encoder_backward(G(m, 0), G(m, 1), m->dres, m->inputs, B, T, C);
  if (group_done(m, 0)) return -1;
  m->t_bwd += zo_clock_s() - t0;
  return 0;
}

/* ------------------------------------------------------------------ */
/* sampling */

static int sample_check(void *model, const uint8_t *toks, size_t n) {
  return check_tokens((gpt_model *)model, toks, n, "prompt");
}

/* resident: sampling computes with the weights already in the model, no hook;
 * streamed: the weights come through the hook's bindings, so it stays */
static const float *sample_forward_last(void *model, const uint8_t *toks, int T, int Vb,
                                        float *scratch) {
  (void)Vb, (void)scratch;
  gpt_model *m = model;
  gpt_hook_fn saved = m->hook;
  if (!m->streamed) m->hook = NULL;
  float r = gpt_forward(m, toks, NULL, 1, T);
  m->hook = saved;
  return isnan(r) ? NULL : m->logits + (size_t)(T - 1) * m->cfg.vocab;
}

int gpt_sample(gpt_model *m, const uint8_t *prompt, int prompt_len, int n_new, float temperature,
               uint64_t seed, uint8_t *out) {
  if (!m) return -1;
  const gen_backend g = {
      m, "gpt_sample", "memory",           m->err, sizeof m->err, m->cfg.seq_len, m->cfg.vocab,
      0, sample_check, sample_forward_last};
  const int rc = gen_sample(&g, prompt, prompt_len, n_new, temperature, seed, out);
  if (rc == GEN_OK || rc == GEN_ERR_FORWARD) m->have_targets = 0;
  return rc == GEN_OK ? 0 : -1;
}
