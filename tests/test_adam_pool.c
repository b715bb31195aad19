/*
 * test_adam_pool.c - the Adam thread pool: results with 1, 2, 3 threads and
 * dynamic tiles equal single-threaded zo_adam_update() bit for bit; many async
 * tasks with poll and wait; SKIP_NONFINITE across threads; pool sqnorm and
 * parallel_for; submit_for (returns before its task runs, urgent tasks go ahead
 * of queued ones, ranges cover [0, n) once); create/destroy and argument errors.
 * Not a benchmark.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/adam.h"

static uint64_t g_rng = 0xfeedface12345678ull;

typedef struct {
  size_t n;
  float *p;
  void *g, *m, *v, *out;
} arrays;

static void arr_init(arrays *a, size_t n, zo_dtype gt, zo_dtype st, uint64_t seed) {
  uint64_t r = seed;
  a->n = n;
  a->p = malloc(n * 4);
  a->g = malloc(n * 4);
  a->m = malloc(n * 4);
  a->v = malloc(n * 4);
  a->out = malloc(n * 4);
  float *tmp = malloc(n * 4);
  for (size_t i = 0; i < n; i++) a->p[i] = zo_test_rand_pm1f(&r);
  for (size_t i = 0; i < n; i++) tmp[i] = zo_test_rand_pm1f(&r);
  zo_cast_ex(a->g, gt, tmp, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1);
  for (size_t i = 0; i < n; i++) tmp[i] = 0.1f * zo_test_rand_pm1f(&r);
  zo_cast_ex(a->m, st, tmp, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1);
  for (size_t i = 0; i < n; i++) tmp[i] = 0.01f * fabsf(zo_test_rand_pm1f(&r));
  zo_cast_ex(a->v, st, tmp, ZO_DTYPE_F32, n, ZO_SIMD_SCALAR, 1);
  memset(a->out, 0, n * 4);
  free(tmp);
}
static void arr_free(arrays *a) { free(a->p), free(a->g), free(a->m), free(a->v), free(a->out); }
static zo_adam_shard arr_shard(arrays *a, zo_dtype gt, zo_dtype st, uint64_t seed) {
  zo_adam_shard s = {a->p, a->g, gt, a->m, a->v, st, a->out, ZO_DTYPE_BF16, a->n, seed};
  return s;
}

/* Test 1: 1, 2, 3 threads, contiguous and tiled, every dtype pair: same bits as zo_adam_update on this thread. */
static void test_bit_identity(void) {
  const size_t n = 200003;
  static const zo_dtype gts[] = {ZO_DTYPE_F32, ZO_DTYPE_BF16, ZO_DTYPE_F16};
  for (int cfg = 0; cfg < 5;
       cfg++) { /* 1, 2, 3 threads auto tiles; 3 threads 4 Ki tiles; 3 contiguous */
    zo_adam_pool_opts o = {
        cfg < 3 ? cfg + 1 : 3, -1, 1, cfg == 3 ? 4096 : cfg == 4 ? ZO_ADAM_TILE_CONTIGUOUS : 0,
        ZO_SIMD_AUTO,          0,  0};
    zo_adam_pool_t *pool = NULL;
    REQUIRE_OK(zo_adam_pool_create(&o, &pool));
    printf("pool: %s\n", zo_adam_pool_describe(pool));
    CHECK_EQ(zo_adam_pool_threads(pool), o.n_threads);
    for (int gi = 0; gi < 3; gi++)
      for (int si = 0; si < 2; si++) {
        zo_dtype gt = gts[gi], st = si ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
        arrays a, b;
        arr_init(&a, n, gt, st, 42 + gi);
        arr_init(&b, n, gt, st, 42 + gi);
        for (int t = 1; t <= 2; t++) {
          zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, (zo_adam_mode)(t & 1),
                                1,     t,    0.5f};
          zo_adam_shard sa = arr_shard(&a, gt, st, 1000), sb = arr_shard(&b, gt, st, 1000);
          zo_adam_result ra = {-1, -1}, rb = {-1, -1};
          CHECK_OK(zo_adam_update(&hp, &sa, 0, ZO_SIMD_AUTO, &ra));
          CHECK_OK(zo_adam_pool_update(pool, &hp, &sb, 0, &rb));
          CHECK_EQ(ra.nonfinite, rb.nonfinite);
          CHECK_EQ(rb.skipped, 0);
        }
        char ctx[96];
        snprintf(ctx, sizeof ctx, "threads %d tile %zx grad %s state %s", o.n_threads, o.tile_elems,
                 zo_dtype_name(gt), zo_dtype_name(st));
        CHECK_BYTES(ctx, b.p, a.p, n * 4);
        CHECK_BYTES(ctx, b.m, a.m, n * zo_dtype_size(st));
        CHECK_BYTES(ctx, b.v, a.v, n * zo_dtype_size(st));
        CHECK_BYTES(ctx, b.out, a.out, n * 2);
        arr_free(&a);
        arr_free(&b);
      }
    zo_adam_pool_destroy(pool);
  }
}

/*
 * Test 2: 24 async tasks on disjoint shards submitted at once (several odd
 * sizes, one with an inf gradient and SKIP), polled until done, waited in
 * reverse order; each equals its single-threaded update.
 */
static void test_async(void) {
  enum { NT = 24 };
  zo_adam_pool_opts o = {2, -1, 1, 0, ZO_SIMD_AUTO, 0, 0};
  zo_adam_pool_t *pool = NULL;
  REQUIRE_OK(zo_adam_pool_create(&o, &pool));
  arrays a[NT], b[NT];
  zo_adam_task_t *task[NT];
  zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, ZO_ADAM_MODE_ADAMW, 1, 3, 1.0f};
  for (int k = 0; k < NT; k++) {
    size_t n = 1 + zo_test_rand64(&g_rng) % 50000;
    arr_init(&a[k], n, ZO_DTYPE_BF16, ZO_DTYPE_F32, (uint64_t)k);
    arr_init(&b[k], n, ZO_DTYPE_BF16, ZO_DTYPE_F32, (uint64_t)k);
    if (k == 5) ((uint16_t *)a[k].g)[n / 2] = ((uint16_t *)b[k].g)[n / 2] = 0x7f80; /* +inf */
    zo_adam_shard s = arr_shard(&b[k], ZO_DTYPE_BF16, ZO_DTYPE_F32, 0);
    CHECK_OK(zo_adam_pool_submit(pool, &hp, &s, ZO_ADAM_SKIP_NONFINITE, &task[k]));
  }
  for (int k = 0; k < NT; k++) {
    zo_adam_shard s = arr_shard(&a[k], ZO_DTYPE_BF16, ZO_DTYPE_F32, 0);
    CHECK_OK(zo_adam_update(&hp, &s, ZO_ADAM_SKIP_NONFINITE, ZO_SIMD_AUTO, NULL));
  }
  int done = 0, polls = 0;
  while (!done && polls < 10000000) {
    CHECK_OK(zo_adam_task_poll(task[NT - 1], &done));
    polls++;
  }
  CHECK_EQ(done, 1);
  for (int k = NT - 1; k >= 0; k--) {
    CHECK_OK(zo_adam_task_poll(task[k], &done));
    CHECK_EQ(done, 1); /* tasks complete in submission order */
    zo_adam_result r = {-1, -1};
    CHECK_OK(zo_adam_task_wait(task[k], &r));
    CHECK_EQ(r.nonfinite, k == 5);
    CHECK_EQ(r.skipped, k == 5);
    CHECK_BYTES("async p", b[k].p, a[k].p, a[k].n * 4);
    CHECK_BYTES("async m", b[k].m, a[k].m, a[k].n * 4);
    CHECK_BYTES("async out", b[k].out, a[k].out, a[k].n * 2);
    arr_free(&a[k]);
    arr_free(&b[k]);
  }
  /* a task left unwaited is freed by destroy */
  arrays c;
  arr_init(&c, 1000, ZO_DTYPE_F32, ZO_DTYPE_F32, 7);
  zo_adam_shard s = arr_shard(&c, ZO_DTYPE_F32, ZO_DTYPE_F32, 0);
  zo_adam_task_t *t = NULL;
  CHECK_OK(zo_adam_pool_submit(pool, &hp, &s, 0, &t));
  zo_adam_pool_destroy(pool);
  arr_free(&c);
}

/* Test 3: SKIP_NONFINITE with 3 threads: an inf in the last thread's range leaves every array untouched. */
static void test_skip_threads(void) {
  const size_t n = 100001;
  zo_adam_pool_opts o = {3, -1, 1, 0, ZO_SIMD_AUTO, 0, 0};
  zo_adam_pool_t *pool = NULL;
  REQUIRE_OK(zo_adam_pool_create(&o, &pool));
  arrays a;
  arr_init(&a, n, ZO_DTYPE_F32, ZO_DTYPE_BF16, 3);
  ((float *)a.g)[n - 3] = NAN;
  char *copy = malloc(n * 14);
  memcpy(copy, a.p, n * 4), memcpy(copy + n * 4, a.m, n * 2), memcpy(copy + n * 6, a.v, n * 2);
  memcpy(copy + n * 8, a.out, n * 2);
  zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, ZO_ADAM_MODE_L2, 1, 1, 1.0f};
  zo_adam_shard s = arr_shard(&a, ZO_DTYPE_F32, ZO_DTYPE_BF16, 0);
  zo_adam_result r = {-1, -1};
  CHECK_OK(zo_adam_pool_update(pool, &hp, &s, ZO_ADAM_SKIP_NONFINITE, &r));
  CHECK_EQ(r.nonfinite, 1);
  CHECK_EQ(r.skipped, 1);
  CHECK_BYTES("skip p", a.p, copy, n * 4);
  CHECK_BYTES("skip m", a.m, copy + n * 4, n * 2);
  CHECK_BYTES("skip v", a.v, copy + n * 6, n * 2);
  CHECK_BYTES("skip out", a.out, copy + n * 8, n * 2);
  r.nonfinite = r.skipped = -1;
  CHECK_OK(zo_adam_pool_update(pool, &hp, &s, 0, &r)); /* fused detection without the pre-scan */
  CHECK_EQ(r.nonfinite, 1);
  CHECK_EQ(r.skipped, 0);
  free(copy);
  arr_free(&a);
  zo_adam_pool_destroy(pool);
}

/* Test 4: pool sqnorm equals zo_grad_sqnorm_ex bit for bit for 1-3 threads; parallel_for covers [0, n) once. */
static void for_fn(void *arg, size_t b, size_t e, int thread) {
  unsigned char *hits = arg;
  for (size_t i = b; i < e; i++) hits[i] += (unsigned char)(1 + 0 * thread);
}
static void test_sqnorm_for(void) {
  const size_t n = 1000003;
  uint16_t *g = malloc(n * 2);
  uint64_t r = 5;
  for (size_t i = 0; i < n; i++)
    g[i] = (uint16_t)(0x3c00 + (zo_test_rand64(&r) & 0x3ff)); /* bf16 ~ 0.0078..0.0156 */
  double ref = -1;
  CHECK_OK(zo_grad_sqnorm_ex(g, ZO_DTYPE_BF16, n, ZO_SIMD_AUTO, 1, &ref, NULL));
  unsigned char *hits = malloc(n);
  for (int nt = 1; nt <= 3; nt++) {
    zo_adam_pool_opts o = {nt, -1, nt != 2, 0, ZO_SIMD_AUTO, 0, 0};
    zo_adam_pool_t *pool = NULL;
    REQUIRE_OK(zo_adam_pool_create(&o, &pool));
    double s = -2;
    int nf = -1;
    CHECK_OK(zo_adam_pool_sqnorm(pool, g, ZO_DTYPE_BF16, n, &s, &nf));
    CHECK_EQ(nf, 0);
    if (memcmp(&s, &ref, 8)) FAIL_AT("pool sqnorm %d threads: %.17g != %.17g", nt, s, ref);
    static const size_t tiles[] = {0, 1000, ZO_ADAM_TILE_CONTIGUOUS};
    for (int ti = 0; ti < 3; ti++) {
      size_t tile = tiles[ti];
      memset(hits, 0, n);
      CHECK_OK(zo_adam_pool_parallel_for(pool, for_fn, hits, n, tile));
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) wrong += hits[i] != 1;
      if (!CHECK_EQ(wrong, 0)) fprintf(stderr, "  parallel_for %d threads tile %zx\n", nt, tile);
    }
    zo_adam_pool_destroy(pool);
  }
  free(hits);
  free(g);
}

/*
 * Test 4b: a task takes threads only for its size (one per 64 Ki elements, pool.c POOL_MIN_ELEMS_PER_THREAD):
 * a small parallel_for runs as one range on one thread, even split "one range per thread"; a large one on all.
 * Before, every task woke and split across every thread (a 1000-element contiguous task: 3 ranges on 3 threads).
 */
typedef struct {
  int calls;
  unsigned threads; /* bit per thread index seen */
  pthread_mutex_t mu;
} for_seen;
static void seen_fn(void *arg, size_t b, size_t e, int thread) {
  for_seen *s = arg;
  (void)b, (void)e;
  pthread_mutex_lock(&s->mu);
  s->calls++;
  s->threads |= 1u << thread;
  pthread_mutex_unlock(&s->mu);
}
static void test_small_tasks(void) {
  zo_adam_pool_opts o = {3, -1, 0, 0, ZO_SIMD_AUTO, 0, 0};
  zo_adam_pool_t *pool = NULL;
  REQUIRE_OK(zo_adam_pool_create(&o, &pool));
  for (int rep = 0; rep < 50; rep++) { /* any of the three may take it; always one */
    for_seen s = {0, 0, PTHREAD_MUTEX_INITIALIZER};
    CHECK_OK(zo_adam_pool_parallel_for(pool, seen_fn, &s, 1000, ZO_ADAM_TILE_CONTIGUOUS));
    if (!CHECK_EQ(s.calls, 1) || !CHECK_EQ(__builtin_popcount(s.threads), 1)) break;
  }
  for_seen s = {0, 0, PTHREAD_MUTEX_INITIALIZER};
  CHECK_OK(zo_adam_pool_parallel_for(pool, seen_fn, &s, 3 * 65536, ZO_ADAM_TILE_CONTIGUOUS));
  CHECK_EQ(s.calls, 3);
  CHECK_EQ(s.threads, 7);
  s = (for_seen){0, 0, PTHREAD_MUTEX_INITIALIZER};
  CHECK_OK(zo_adam_pool_parallel_for(pool, seen_fn, &s, 2 * 65536, ZO_ADAM_TILE_CONTIGUOUS));
  CHECK_EQ(s.calls, 2);
  CHECK_EQ(__builtin_popcount(s.threads), 2);
  zo_adam_pool_destroy(pool);
}

/* Test 5: defaults and errors. */
static void test_errors(void) {
  zo_adam_pool_t *pool = NULL;
  REQUIRE_OK(zo_adam_pool_create(NULL, &pool));
  printf("default pool: %s\n", zo_adam_pool_describe(pool));
  CHECK(zo_adam_pool_threads(pool) >= 1);
  CHECK_HAS(zo_adam_pool_describe(pool), "thread");
  zo_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, ZO_ADAM_MODE_ADAMW, 1, 1, 1.0f};
  zo_adam_shard s = {0};
  s.n = 10;
  zo_adam_task_t *t = NULL;
  CHECK_ST(zo_adam_pool_submit(pool, &hp, &s, 0, &t), ZO_ERR_INVALID_ARG);
  CHECK(t == NULL);
  CHECK_ST(zo_adam_pool_submit(NULL, &hp, &s, 0, &t), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_task_wait(NULL, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_pool_parallel_for(pool, NULL, NULL, 10, 0), ZO_ERR_INVALID_ARG);
  zo_adam_pool_destroy(pool);
  zo_adam_pool_destroy(NULL);
  zo_adam_pool_opts o = {1, 4096, 1, 0, ZO_SIMD_AUTO, 0, 0};
  CHECK_ST(zo_adam_pool_create(&o, &pool), ZO_ERR_INVALID_ARG);
  o.numa_node = -1;
  o.n_threads = -2;
  CHECK_ST(zo_adam_pool_create(&o, &pool), ZO_ERR_INVALID_ARG);
  o.n_threads = 1;
  o.numa_node = 0; /* node 0 exists on every machine */
  CHECK_OK(zo_adam_pool_create(&o, &pool));
  CHECK_HAS(zo_adam_pool_describe(pool), "NUMA node 0");
  zo_adam_pool_destroy(pool);
  o.numa_node = -1;
  o.share_count = 2, o.share_index = 2;
  CHECK_ST(zo_adam_pool_create(&o, &pool), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "share_index 2 of share_count 2");
}

/* Ranks on one machine: two shares of the cores are disjoint (when there are two cores or more), and their
 * union is every core the default pool binds. */
static void test_core_shares(void) {
  zo_adam_pool_t *pool = NULL;
  char all[512], part[2][512];
  CHECK_OK(zo_adam_pool_create(NULL, &pool));
  snprintf(all, sizeof all, "%s", zo_adam_pool_describe(pool));
  zo_adam_pool_destroy(pool);
  const char *c = strstr(all, "cores ");
  if (!c) {
    printf("note: threads unbound here (%s); core shares not checked\n", all);
    return;
  }
  int ncores = 1;
  for (const char *q = c + 6; *q && *q != ' '; q++) ncores += *q == ',';
  for (int i = 0; i < 2; i++) {
    zo_adam_pool_opts o = {0, -1, 1, 0, ZO_SIMD_AUTO, i, 2};
    CHECK_OK(zo_adam_pool_create(&o, &pool));
    snprintf(part[i], sizeof part[i], "%s", pool ? zo_adam_pool_describe(pool) : "");
    zo_adam_pool_destroy(pool);
  }
  printf("core shares: all: %s | share 0: %s | share 1: %s\n", all, part[0], part[1]);
  /* the first core of each share */
  const char *a = strstr(part[0], "cores "), *b = strstr(part[1], "cores ");
  CHECK(a && b);
  if (a && b && ncores >= 2) CHECK(atoi(a + 6) != atoi(b + 6));
}

/* Test: zo_adam_pool_submit_for. A first task holds the one-thread pool until released, so the submits behind it
 * return while nothing of theirs has run; then they run urgent ones first (in order), the rest in order. */
typedef struct {
  atomic_int release, started;
  int order[8], n_order;
  unsigned char *hits;
} sf_state;
static sf_state g_sf;
static void sf_block(void *arg, size_t b, size_t e, int thread) {
  (void)arg, (void)b, (void)e, (void)thread;
  atomic_store(&g_sf.started, 1);
  while (!atomic_load(&g_sf.release)) sched_yield();
}
static void sf_mark(void *arg, size_t b, size_t e, int thread) {
  (void)thread;
  for (size_t i = b; i < e; i++) g_sf.hits[i]++;
  if (b == 0) g_sf.order[g_sf.n_order++] = (int)(intptr_t)arg; /* one thread: no race */
}
static void test_submit_for(void) {
  zo_adam_pool_opts o = {1, -1, 0, 0, ZO_SIMD_AUTO, 0, 0};
  zo_adam_pool_t *pool = NULL;
  REQUIRE_OK(zo_adam_pool_create(&o, &pool));
  const size_t n = 100000;
  g_sf.hits = calloc(n, 1);
  zo_adam_task_t *t[5] = {0};
  CHECK_OK(zo_adam_pool_submit_for(pool, sf_block, NULL, 1, 0, 0, &t[0]));
  while (!atomic_load(&g_sf.started)) sched_yield();
  /* ids 1, 2 plain; 3, 4 urgent: expected run order 3 4 1 2 */
  static const unsigned fl[5] = {0, 0, 0, ZO_ADAM_TASK_URGENT, ZO_ADAM_TASK_URGENT};
  static const size_t tiles[5] = {0, 0, 1000, ZO_ADAM_TILE_CONTIGUOUS, 64};
  for (int i = 1; i < 5; i++) {
    CHECK_OK(
        zo_adam_pool_submit_for(pool, sf_mark, (void *)(intptr_t)i, n, tiles[i], fl[i], &t[i]));
  }
  int done = -1;
  CHECK_OK(zo_adam_task_poll(t[4], &done));
  CHECK_EQ(done, 0);
  CHECK_EQ(g_sf.n_order, 0); /* submit returned before anything of theirs ran */
  atomic_store(&g_sf.release, 1);
  for (int i = 0; i < 5; i++) CHECK_OK(zo_adam_task_wait(t[i], NULL));
  CHECK_EQ(g_sf.n_order, 4);
  static const int want[4] = {3, 4, 1, 2};
  for (int i = 0; i < 4 && i < g_sf.n_order; i++)
    if (!CHECK_EQ(g_sf.order[i], want[i])) fprintf(stderr, "  run order position %d\n", i);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += g_sf.hits[i] != 4;
  CHECK_EQ(wrong, 0);
  /* errors: nothing queued, *task NULL */
  zo_adam_task_t *x = (zo_adam_task_t *)&o;
  CHECK_ST(zo_adam_pool_submit_for(pool, sf_mark, NULL, 0, 0, 0, &x), ZO_ERR_INVALID_ARG);
  CHECK(x == NULL);
  x = (zo_adam_task_t *)&o;
  CHECK_ST(zo_adam_pool_submit_for(pool, sf_mark, NULL, 10, 0, 0x80, &x), ZO_ERR_INVALID_ARG);
  CHECK(x == NULL);
  CHECK_ST(zo_adam_pool_submit_for(NULL, sf_mark, NULL, 10, 0, 0, &x), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_pool_submit_for(pool, NULL, NULL, 10, 0, 0, &x), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_adam_pool_submit_for(pool, sf_mark, NULL, 10, 0, 0, NULL), ZO_ERR_INVALID_ARG);
  free(g_sf.hits);
  zo_adam_pool_destroy(pool);
}

int main(void) {
  test_core_shares();
  test_bit_identity();
  test_async();
  test_skip_threads();
  test_sqnorm_for();
  test_small_tasks();
  test_errors();
  test_submit_for();
  return zo_test_finish("test_adam_pool");
}
