/* gemm_bf16.c - bf16 matrix products of the CPU model through oneDNN's matmul (gemm_bf16.h). */
#include "gemm_bf16.h"

#include <stdio.h>

#if !ZO_HAVE_ONEDNN /* built with -DZO_WITH_ONEDNN=OFF (the sanitizer builds) */
int gemm_bf16_1t(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                 int ldb, int accumulate, float *C, int ldc, char *err, size_t errlen) {
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb,
      (void)accumulate, (void)C;
  (void)ldc;
  if (err && errlen)
    snprintf(err, errlen, "bf16 matmul: zo-train was built without oneDNN (-DZO_WITH_ONEDNN=OFF)");
  return -1;
}
int gemm_bf16_prepare(int ta, int tb, int M, int N, int K, int lda, int ldb, int accumulate,
                      int ldc, char *err, size_t errlen) {
  return gemm_bf16_1t(ta, tb, M, N, K, NULL, lda, NULL, ldb, accumulate, NULL, ldc, err, errlen);
}
const char *gemm_bf16_isa(void) {
  return "unavailable: zo-train was built without oneDNN (-DZO_WITH_ONEDNN=OFF)";
}
#else

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One cached primitive: the product's shape and layout, and its scratchpad size. */
typedef struct prim {
  int key[9]; /* ta, tb, M, N, K, lda, ldb, ldc, accumulate */
  dnnl_primitive_t p;
  dnnl_memory_desc_t a_md, b_md, c_md, s_md;
  size_t scratch;
} prim;

#define CACHE_MAX 4096 /* shapes: a model has a few dozen (tile edges included) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_eng;
static prim *g_cache;
static int g_n;

static _Thread_local dnnl_stream_t t_stream;
static _Thread_local void *t_scratch;
static _Thread_local size_t t_scratch_bytes;

static const char *status_name(dnnl_status_t s) {
  switch (s) {
    case dnnl_out_of_memory: return " (out of memory)";
    case dnnl_invalid_arguments: return " (invalid arguments)";
    case dnnl_unimplemented:
      return " (unimplemented: no bf16 matmul for this CPU's instruction set)";
    case dnnl_runtime_error: return " (runtime error)";
    default: return "";
  }
}

static int fail(char *err, size_t errlen, const char *what, const int *key, dnnl_status_t s) {
  if (err && errlen)
    snprintf(
        err, errlen,
        "bf16 matmul %s (ta %d tb %d M %d N %d K %d lda %d ldb %d ldc %d acc %d): oneDNN status %d%s",
        what, key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7], key[8], (int)s,
        status_name(s));
  return -1;
}

/* Create the primitive of @key on one thread (its blocking must not depend on the caller's thread count). */
static int create(prim *e, const int *key, char *err, size_t errlen) {
  const int ta = key[0], tb = key[1], M = key[2], N = key[3], K = key[4], lda = key[5],
            ldb = key[6], ldc = key[7];
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  dnnl_dims_t as = {lda, 1}, bs = {ldb, 1}, cs = {ldc, 1};
  if (ta) as[0] = 1, as[1] = lda; /* A stored (K,M): element (m,k) at k*lda + m */
  if (tb) bs[0] = 1, bs[1] = ldb; /* B stored (N,K): element (k,n) at n*ldb + k */
  dnnl_status_t s;
  if ((s = dnnl_memory_desc_init_by_strides(&e->a_md, 2, ad, dnnl_bf16, as)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_strides(&e->b_md, 2, bd, dnnl_bf16, bs)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_strides(&e->c_md, 2, cd, dnnl_f32, cs)) != dnnl_success)
    return fail(err, errlen, "memory descriptor", key, s);
  dnnl_matmul_desc_t md;
  if ((s = dnnl_matmul_desc_init(&md, &e->a_md, &e->b_md, NULL, &e->c_md)) != dnnl_success)
    return fail(err, errlen, "descriptor", key, s);
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  if ((s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
      (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) !=
          dnnl_success)
    goto out;
  if (key[8]) { /* C += A B: the sum post-op reads C before it is written */
    if ((s = dnnl_post_ops_create(&po)) != dnnl_success ||
        (s = dnnl_post_ops_append_sum(po, 1.0f)) != dnnl_success ||
        (s = dnnl_primitive_attr_set_post_ops(attr, po)) != dnnl_success)
      goto out;
  }
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  s = dnnl_primitive_desc_create(&pd, &md, attr, g_eng, NULL);
  omp_set_num_threads(nt);
  if (s != dnnl_success) goto out;
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  e->s_md = *smd;
  e->scratch = dnnl_memory_desc_get_size(smd);
  s = dnnl_primitive_create(&e->p, pd);
out:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success) return fail(err, errlen, "creation", key, s);
  memcpy(e->key, key, sizeof e->key);
  return 0;
}

static prim *lookup(const int *key, char *err, size_t errlen) {
  prim *e = NULL;
  pthread_mutex_lock(&g_mu);
  dnnl_status_t s = dnnl_success;
  if (!g_eng && (s = dnnl_engine_create(&g_eng, dnnl_cpu, 0)) != dnnl_success) {
    g_eng = NULL;
    fail(err, errlen, "engine", key, s);
    goto out;
  }
  for (int i = 0; i < g_n; i++)
    if (!memcmp(g_cache[i].key, key, sizeof g_cache[i].key)) {
      e = &g_cache[i];
      goto out;
    }
  if (!g_cache && !(g_cache = calloc(CACHE_MAX, sizeof *g_cache))) {
    fail(err, errlen, "cache (out of memory)", key, dnnl_out_of_memory);
    goto out;
  }
  if (g_n == CACHE_MAX) {
    fail(err, errlen, "cache full (more than 4096 shapes)", key, dnnl_out_of_memory);
    goto out;
  }
  if (create(&g_cache[g_n], key, err, errlen) == 0) e = &g_cache[g_n++];
out:
  pthread_mutex_unlock(&g_mu);
  return e;
}

int gemm_bf16_1t(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                 int ldb, int accumulate, float *C, int ldc, char *err, size_t errlen) {
  const int key[9] = {!!ta, !!tb, M, N, K, lda, ldb, ldc, !!accumulate};
  if (M <= 0 || N <= 0) return 0;
  if (K <= 0) { /* an empty sum: C = 0, or C unchanged */
    if (!accumulate)
      for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
    return 0;
  }
  prim *e = lookup(key, err, errlen);
  if (!e) return -1;
  dnnl_status_t s;
  if (!t_stream &&
      (s = dnnl_stream_create(&t_stream, g_eng, dnnl_stream_default_flags)) != dnnl_success) {
    t_stream = NULL;
    return fail(err, errlen, "stream", key, s);
  }
  if (e->scratch > t_scratch_bytes) {
    free(t_scratch);
    t_scratch_bytes = 0;
    if (!(t_scratch = aligned_alloc(64, (e->scratch + 63) / 64 * 64)))
      return fail(err, errlen, "scratchpad (out of memory)", key, dnnl_out_of_memory);
    t_scratch_bytes = e->scratch;
  }
  dnnl_memory_t am = NULL, bm = NULL, cm = NULL, sm = NULL;
  if ((s = dnnl_memory_create(&am, &e->a_md, g_eng, (void *)A)) == dnnl_success &&
      (s = dnnl_memory_create(&bm, &e->b_md, g_eng, (void *)B)) == dnnl_success &&
      (s = dnnl_memory_create(&cm, &e->c_md, g_eng, C)) == dnnl_success &&
      (s = dnnl_memory_create(&sm, &e->s_md, g_eng, t_scratch)) == dnnl_success) {
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, am},
                               {DNNL_ARG_WEIGHTS, bm},
                               {DNNL_ARG_DST, cm},
                               {DNNL_ARG_SCRATCHPAD, sm}};
    if ((s = dnnl_primitive_execute(e->p, t_stream, 4, args)) == dnnl_success)
      s = dnnl_stream_wait(t_stream);
  }
  if (am) dnnl_memory_destroy(am);
  if (bm) dnnl_memory_destroy(bm);
  if (cm) dnnl_memory_destroy(cm);
  if (sm) dnnl_memory_destroy(sm);
  return s == dnnl_success ? 0 : fail(err, errlen, "execution", key, s);
}

int gemm_bf16_prepare(int ta, int tb, int M, int N, int K, int lda, int ldb, int accumulate,
                      int ldc, char *err, size_t errlen) {
  const int key[9] = {!!ta, !!tb, M, N, K, lda, ldb, ldc, !!accumulate};
  if (M <= 0 || N <= 0 || K <= 0) return 0; /* gemm_bf16_1t makes no primitive for these */
  return lookup(key, err, errlen) ? 0 : -1;
}

static char g_isa[320];
static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;

/* The implementation oneDNN picks for the forward product of a 64-token, 2560-channel layer. */
static void probe_isa(void) {
  char err[256];
  const int key[9] = {0, 1, 64, 2560, 2560, 2560, 2560, 2560, 0};
  prim *e = lookup(key, err, sizeof err);
  if (!e) {
    snprintf(g_isa, sizeof g_isa, "unavailable: %s", err);
    return;
  }
  const_dnnl_primitive_desc_t pd = NULL;
  const char *impl = NULL;
  if (dnnl_primitive_get_primitive_desc(e->p, &pd) == dnnl_success &&
      dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
    snprintf(g_isa, sizeof g_isa, "oneDNN %s", impl);
  else
    snprintf(g_isa, sizeof g_isa, "oneDNN (implementation not reported)");
}

const char *gemm_bf16_isa(void) {
  pthread_once(&g_isa_once, probe_isa);
  return g_isa;
}
#endif                 /* ZO_HAVE_ONEDNN */
