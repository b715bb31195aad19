/*
 * test_gpt_threads.c - zo-train's GPT model forks parallel regions only for
 * work above its threshold: the tiny model's forward + backward forks none
 * (neither gpt.c's loops nor OpenBLAS), a model of the default config's size
 * does, and gradients are bitwise the same on 1, 2 and 3 threads; the
 * initial weights (gpt_param_init) fork above the threshold too and are
 * bitwise those of 1 thread and of the serial reference below. Counts
 * GOMP_parallel calls by defining it here (the executable's definition
 * precedes libgomp's for libopenblas too). The checks run under the
 * environment's OPENBLAS_CORETYPE, then again in a child under each of
 * Haswell, Zen and SkylakeX (OpenBLAS reads it when it loads; with its own
 * threading the Haswell kernels gave other bits on 2 threads). Not a speed
 * test: nothing here depends on how busy the machine is.
 */
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpt.h"
#include "zoffload/adam.h"
#include "rng.h"
#include "zo_test.h"

/* Regions asked for more than one thread: num_threads 1 is what gcc passes when an if clause is false. */
static long forks;

void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
  static void (*real)(void (*)(void *), void *, unsigned, unsigned);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "GOMP_parallel");
  if (num_threads != 1) __atomic_fetch_add(&forks, 1, __ATOMIC_RELAXED);
  real(fn, data, num_threads, flags);
}

/* One forward + backward of @c at batch B, full length; the forks it asked for. Gradients stay in the model. */
static long pass(gpt_model *m, const gpt_config *c, int B) {
  const int T = c->seq_len;
  uint8_t *inp = malloc((size_t)B * T), *tgt = malloc((size_t)B * T);
  for (int i = 0; i < B * T; i++)
    inp[i] = (uint8_t)((i * 37 + 11) % c->vocab), tgt[i] = (uint8_t)((i * 53 + 5) % c->vocab);
  gpt_zero_grad(m);
  const long f0 = forks;
  const float loss = gpt_forward(m, inp, tgt, B, T);
  CHECK(loss == loss);
  CHECK(gpt_backward(m, 1.0f) == 0);
  free(inp);
  free(tgt);
  return forks - f0;
}

/*
 * gpt_param_init()'s normals one pair after another, as it was before it forked: the scalar reference. Elements 2k
 * and 2k+1 of tensor @i are Box-Muller of splitmix64(key + 2k) and splitmix64(key + 2k + 1).
 */
static float u01_ref(uint64_t r) { return ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f); }
static void init_normal_ref(int i, uint64_t seed, float std, size_t n, float *out) {
  const uint64_t key = splitmix64(seed ^ splitmix64(0x5A17ull + (uint64_t)i));
  for (size_t j = 0; j < n; j += 2) {
    const uint64_t k = j / 2;
    const float u1 = u01_ref(splitmix64(key + 2 * k)), u2 = u01_ref(splitmix64(key + 2 * k + 1));
    const float rad = sqrtf(-2.0f * logf(u1)), th = 6.28318530717958647f * u2;
    out[j] = std * rad * cosf(th);
    if (j + 1 < n) out[j + 1] = std * rad * sinf(th);
  }
}

/*
 * Every tensor of @c initialised on 2 threads, on 1, and by the reference (the normal ones: wte, wpe, layer 0's qkv
 * weight at std 0.02 and its attention projection at 0.02 / sqrt(2 n_layer)): the same bits. Returns the regions
 * forked on 2 threads.
 */
static long check_init(const gpt_config *c, uint64_t seed) {
  const int np = gpt_num_params(c);
  gpt_param_spec *specs = calloc((size_t)np, sizeof *specs);
  gpt_param_specs(c, specs);
  size_t max_n = 0;
  for (int i = 0; i < np; i++) max_n = specs[i].n_elems > max_n ? specs[i].n_elems : max_n;
  float *a = malloc(max_n * sizeof(float)), *b = malloc(max_n * sizeof(float));
  long forked = 0;
  for (int i = 0; i < np; i++) {
    const size_t n = specs[i].n_elems;
    memset(a, 0xff, n * sizeof(float)); /* NaN: an element left unwritten differs */
    memset(b, 0xff, n * sizeof(float));
    gpt_set_threads(2);
    const long f0 = forks;
    gpt_param_init(c, i, seed, a);
    forked += forks - f0;
    gpt_set_threads(1);
    gpt_param_init(c, i, seed, b);
    CHECK_BYTES(specs[i].name, a, b, n * sizeof(float));
    if (i == 0 || i == 1 || i == 2 + GPT_P_QKV_W || i == 2 + GPT_P_ATTPROJ_W) {
      init_normal_ref(i, seed,
                      i == 2 + GPT_P_ATTPROJ_W ? 0.02f / sqrtf(2.0f * (float)c->n_layer) : 0.02f, n,
                      b);
      CHECK_BYTES(specs[i].name, a, b, n * sizeof(float));
    }
  }
  gpt_set_threads(2);
  free(a);
  free(b);
  free(specs);
  return forked;
}

static gpt_model *make(const gpt_config *c, int B) {
  char err[256];
  gpt_model *m = NULL;
  if (gpt_create(c, B, &m, err, sizeof err) != 0) {
    fprintf(stderr, "gpt_create: %s\n", err);
    exit(1);
  }
  for (int i = 0; i < gpt_num_params(c); i++) gpt_param_init(c, i, 1234, gpt_weight(m, i));
  return m;
}

/*
 * This program again under OPENBLAS_CORETYPE=@core (set here, before the fork: the child only execs); its exit status,
 * 0 pass, 1 fail, 77 for a child that did not run.
 */
static int run_child(const char *core) {
  setenv("OPENBLAS_CORETYPE", core, 1);
  setenv("ZO_TEST_GPT_THREADS_CHILD", "1", 1);
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "test_gpt_threads", (char *)NULL);
    _exit(77);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 77;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(void) {
  const int child = getenv("ZO_TEST_GPT_THREADS_CHILD") != NULL;
  printf("OPENBLAS_CORETYPE %s: OpenBLAS %s\n",
         getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset", gpt_blas_core());
  /* a team of 2 whatever this machine has: the thresholds decide, not the core count */
  gpt_set_threads(2);
  gpt_set_thread_adapt(0);

  /* tests/configs/tiny.json's model: every region is below the threshold (main's code forked ~80 a pass) */
  const gpt_config tiny = {.n_layer = 2, .n_head = 2, .d_model = 32, .seq_len = 32, .vocab = 256};
  gpt_model *m = make(&tiny, 4);
  (void)pass(m, &tiny, 4); /* warm-up: OpenBLAS and libgomp set up */
  const long f_tiny = pass(m, &tiny, 4);
  printf("tiny model (L=2 C=32 T=32 B=4): %ld regions forked in a forward + backward\n", f_tiny);
  CHECK_EQ(f_tiny, 0);
  gpt_destroy(m);

  /* initial weights: a model of tensors of at most 4 Ki elements (37 us of work) stays on one thread; an odd-length
   * wpe (seq_len 1023 x d_model 33: the last pair has one element) and default.json's model fork, same bits */
  const gpt_config small = {.n_layer = 1, .n_head = 2, .d_model = 16, .seq_len = 16, .vocab = 256};
  const long f_init_small = check_init(&small, 1234);
  const gpt_config odd = {.n_layer = 1, .n_head = 3, .d_model = 33, .seq_len = 1023, .vocab = 256};
  const long f_init_odd = check_init(&odd, 99);
  const gpt_config dflt = {.n_layer = 4, .n_head = 4, .d_model = 128, .seq_len = 128, .vocab = 256};
  const long f_init_big = check_init(&dflt, 1337);
  printf(
      "initial weights forked %ld (small), %ld (odd wpe), %ld (default model) regions; same bits on 1 and 2 "
      "threads and as the serial reference\n",
      f_init_small, f_init_odd, f_init_big);
  CHECK_EQ(f_init_small, 0);
  CHECK(f_init_odd > 0);
  CHECK(f_init_big > 0);

  /* configs/default.json's model: the big loops and products still fork */
  const gpt_config big = {.n_layer = 4, .n_head = 4, .d_model = 128, .seq_len = 128, .vocab = 256};
  m = make(&big, 16);
  const long f_big = pass(m, &big, 16);
  printf("default model (L=4 C=128 T=128 B=16): %ld regions forked in a forward + backward\n",
         f_big);
  CHECK(f_big > 0);

  /* the thread count does not change a bit of the gradients */
  const int np = gpt_num_params(&big);
  const size_t total = gpt_total_elems(&big);
  float *g2 = malloc(total * sizeof(float));
  float *at = g2;
  gpt_param_spec *specs = calloc((size_t)np, sizeof *specs);
  gpt_param_specs(&big, specs);
  for (int i = 0; i < np; i++) {
    memcpy(at, gpt_grad(m, i), specs[i].n_elems * sizeof(float));
    at += specs[i].n_elems;
  }
  const int failed_before = zo_test_failures;
  for (int nt = 1; nt <= 3;
       nt += 2) { /* and an odd team: the tiles of a product do not follow the team size */
    gpt_set_threads(nt);
    (void)pass(m, &big, 16);
    at = g2;
    for (int i = 0; i < np; i++) {
      CHECK_BYTES(specs[i].name, gpt_grad(m, i), at, specs[i].n_elems * sizeof(float));
      at += specs[i].n_elems;
    }
  }
  if (zo_test_failures == failed_before)
    printf("default model: gradients the same bits on 1, 2 and 3 threads\n");
  free(specs);
  free(g2);
  gpt_destroy(m);
  if (!child) {
    /* a core type runs only where the CPU executes its kernels (beyond it the child dies of SIGILL): Haswell and
     * Zen need AVX2 and FMA, SkylakeX AVX-512 (zo_simd_supported: F, DQ, BW, VL and the OS's ZMM state) */
    static const char *const cores[] = {"Haswell", "Zen", "SkylakeX"};
    const int runs[] = {zo_simd_supported(ZO_SIMD_AVX2), zo_simd_supported(ZO_SIMD_AVX2),
                        zo_simd_supported(ZO_SIMD_AVX512)};
    for (int i = 0; i < 3; i++) {
      if (!runs[i]) {
        printf("OPENBLAS_CORETYPE %s: skipped, this CPU has no %s\n", cores[i],
               i == 2 ? "AVX-512" : "AVX2");
        continue;
      }
      const int rc = run_child(cores[i]);
      if (rc == 77) printf("OPENBLAS_CORETYPE %s: the child did not run\n", cores[i]);
      CHECK_EQ(rc == 77 ? 0 : rc, 0); /* a failing child printed its file:line */
    }
  }
  return zo_test_finish(child ? "test_gpt_threads (child)" : "test_gpt_threads");
}
