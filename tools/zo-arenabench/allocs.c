/*
 * allocs.c - one step's allocation pattern replayed on the device arena, cuMemAlloc/cuMemFree and
 * CUDA's stream-ordered pool (allocs.h).
 */
#include "allocs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuapi.h"
#include "stats.h"
#include "zoffload/status.h"

enum { LAYERS = 24, TENSORS = 12 };

/* One step of the trace: slot @slot allocated with @bytes, or freed (@bytes 0). */
typedef struct op {
  int slot;
  size_t bytes;
} op;

/* A GPT block's tensors, bf16: ln_1 weight and bias, qkv weight and bias, the attention projection
 * weight and bias, ln_2 weight and bias, the MLP's two weights and biases. */
static void layer_sizes(size_t d, size_t out[TENSORS]) {
  const size_t el[TENSORS] = {d, d, 3 * d * d, 3 * d, d * d,     d,
                              d, d, 4 * d * d, 4 * d, 4 * d * d, d};
  for (int i = 0; i < TENSORS; i++) out[i] = 2 * el[i];
}

static size_t layer_bytes(size_t d) {
  size_t s[TENSORS], n = 0;
  layer_sizes(d, s);
  for (int i = 0; i < TENSORS; i++) n += s[i];
  return n;
}

/* Forward: layer i's tensors allocated, then layer i - 2's freed (three layers live at most); the
 * rest freed at the end. Backward: the same from the last layer down. Slots: layer x tensor. */
static size_t build_ops(size_t d, op *ops, double *peak) {
  size_t sz[TENSORS], n = 0;
  double live = 0;
  layer_sizes(d, sz);
  *peak = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < LAYERS; k++) {
      const int l = pass ? LAYERS - 1 - k : k, old = pass ? l + 2 : l - 2;
      for (int t = 0; t < TENSORS; t++) {
        ops[n++] = (op){l * TENSORS + t, sz[t]};
        live += (double)sz[t];
      }
      if (live > *peak) *peak = live;
      if (old >= 0 && old < LAYERS)
        for (int t = 0; t < TENSORS; t++) {
          ops[n++] = (op){old * TENSORS + t, 0};
          live -= (double)sz[t];
        }
    }
    for (int k = 2; k >= 1; k--) {
      const int l = pass ? k - 1 : LAYERS - k;
      for (int t = 0; t < TENSORS; t++) {
        ops[n++] = (op){l * TENSORS + t, 0};
        live -= (double)sz[t];
      }
    }
  }
  return n;
}

/* The arena: frees ordered on @s, as the engine frees a released copy after the compute that read it.
 * 0, or -1 after printing the error. */
static int run_arena(zo_device_t *dev, zo_arena_t *a, const op *ops, size_t nops, int rounds,
                     double *times, alloc_result *r) {
  zo_arena_block_t *blk[LAYERS * TENSORS] = {0};
  zo_stream_t *s = NULL;
  zo_arena_stats as;
  size_t peak = 0;
  zo_status st = zo_stream_create(dev, &s);
  if (st != ZO_OK) goto fail;
  for (int k = 0; k <= rounds; k++) {
    const double t0 = zo_clock_s();
    for (size_t i = 0; i < nops; i++) {
      const op *o = &ops[i];
      if (o->bytes) {
        if ((st = zo_arena_alloc(a, o->bytes, &blk[o->slot])) != ZO_OK) goto fail;
        if (k ==
            0) { /* the warm-up round samples the live bytes (blocks rounded to the alignment) */
          if ((st = zo_arena_get_stats(a, &as)) != ZO_OK) goto fail;
          if (as.live_bytes > peak) peak = as.live_bytes;
        }
      } else {
        if ((st = zo_arena_free(a, blk[o->slot], s)) != ZO_OK) goto fail;
        blk[o->slot] = NULL;
      }
    }
    if ((st = zo_stream_synchronize(s)) != ZO_OK) goto fail;
    if (k) times[k - 1] = zo_clock_s() - t0; /* round 0 warms up */
  }
  r->peak_bytes = (double)peak;
  r->measured = 1;
  zo_stream_destroy(s);
  return 0;
fail:
  fprintf(stderr, "zo-arenabench: allocation trace on the arena: %s (%s)\n", zo_status_string(st),
          zo_last_error());
  for (int i = 0; i < LAYERS * TENSORS; i++)
    if (blk[i]) zo_arena_free(a, blk[i], NULL);
  zo_stream_destroy(s);
  return -1;
}

#if ZO_HAVE_CUDA
#define CU(call) CU_TRY(r->note, call)

/* cuMemAlloc/cuMemFree (@pool 0) or the default pool's cuMemAllocAsync/cuMemFreeAsync on a stream
 * (@pool 1), GPU @ordinal; failures go to r->note. */
static void run_cuda(int ordinal, int pool, const op *ops, size_t nops, int rounds, double *times,
                     alloc_result *r) {
  cu_api c;
  CUdevice cd;
  CUcontext ctx = NULL;
  CUstream s = NULL;
  CUmemoryPool mp = NULL;
  cuuint64_t old_threshold = 0, keep = UINT64_MAX, zero = 0, high = 0;
  int threshold_set = 0;
  CUdeviceptr p[LAYERS * TENSORS] = {0};
  if (cu_load(&c, r->note, sizeof r->note)) return;
  CU(c.Init(0));
  CU(c.DeviceGet(&cd, ordinal));
  CU(c.PrimaryCtxRetain(&ctx, cd));
  CU(c.CtxSetCurrent(ctx));
  if (pool) {
    int supported = 0;
    CU(c.DeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, cd));
    if (!supported) {
      snprintf(r->note, sizeof r->note, "GPU %d has no stream-ordered memory pools", ordinal);
      goto out;
    }
    CU(c.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(c.DeviceGetDefaultMemPool(&mp, cd));
    CU(c.MemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &old_threshold));
    /* cache every freed byte (keep), and reset the high-water mark (zero) */
    CU(c.MemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    threshold_set = 1;
    CU(c.MemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
  }
  for (int k = 0; k <= rounds; k++) {
    const double t0 = zo_clock_s();
    for (size_t i = 0; i < nops; i++) {
      const op *o = &ops[i];
      if (o->bytes) {
        if (pool)
          CU(c.MemAllocAsync(&p[o->slot], o->bytes, s));
        else
          CU(c.MemAlloc(&p[o->slot], o->bytes));
      } else {
        if (pool)
          CU(c.MemFreeAsync(p[o->slot], s));
        else
          CU(c.MemFree(p[o->slot]));
        p[o->slot] = 0;
      }
    }
    if (pool) CU(c.StreamSynchronize(s));
    if (k) times[k - 1] = zo_clock_s() - t0;
  }
  if (pool) { /* cuMemAlloc's peak is the trace's own (alloc_trace_run) */
    CU(c.MemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high));
    r->peak_bytes = (double)high;
  }
  r->measured = 1;
out:
  for (int i = 0; i < LAYERS * TENSORS; i++)
    if (p[i]) pool ? c.MemFreeAsync(p[i], s) : c.MemFree(p[i]);
  if (s) {
    c.StreamSynchronize(s);
    c.StreamDestroy(s);
  }
  if (threshold_set) { /* give the cached bytes back: the next measurement needs the room */
    c.MemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &old_threshold);
    c.MemPoolTrimTo(mp, 0);
  }
  if (ctx) c.PrimaryCtxRelease(cd);
}
#undef CU
#endif

int alloc_trace_run(zo_device_t *dev, zo_arena_t *a, size_t cap, int ordinal, int rounds,
                    alloc_trace *t) {
  static const char *const names[ALLOC_KINDS] = {"arena", "cuMemAlloc", "cuMemAllocAsync pool"};
  memset(t, 0, sizeof *t);
  size_t d = 4096;
  while (d > 64 && 3 * layer_bytes(d) > cap / 2) d /= 2;
  t->d_model = (int)d, t->layers = LAYERS, t->tensors = TENSORS, t->rounds = rounds;
  op *ops = malloc(4 * LAYERS * TENSORS * sizeof *ops);
  double *times = malloc((size_t)rounds * sizeof *times);
  if (!ops || !times) {
    free(ops);
    free(times);
    fprintf(stderr, "zo-arenabench: out of host memory\n");
    return -1;
  }
  const size_t nops = build_ops(d, ops, &t->trace_peak_bytes);
  t->pairs = nops / 2;
  for (int k = 0; k < ALLOC_KINDS; k++) {
    alloc_result *r = &t->r[k];
    r->name = names[k];
    if (k == ALLOC_ARENA) {
      if (run_arena(dev, a, ops, nops, rounds, times, r)) {
        free(ops);
        free(times);
        return -1;
      }
    } else if (zo_device_get_kind(dev) != ZO_DEVICE_CUDA) {
      snprintf(r->note, sizeof r->note, "not on the host device");
    } else {
#if ZO_HAVE_CUDA
      run_cuda(ordinal, k == ALLOC_POOL, ops, nops, rounds, times, r);
      if (k == ALLOC_CUMEMALLOC)
        r->peak_bytes = t->trace_peak_bytes; /* what it asked for, unrounded */
#else
      (void)ordinal;
      snprintf(r->note, sizeof r->note, "built without CUDA");
#endif
    }
    if (r->measured) {
      r->round_ms = zo_tool_median(times, (size_t)rounds) * 1e3;
      r->us_per_pair = r->round_ms * 1e3 / (double)t->pairs;
    }
  }
  free(ops);
  free(times);
  return 0;
}

void alloc_trace_print(const alloc_trace *t) {
  printf(
      "allocation trace: one step's weight fetches of a %d-layer model of d_model %d (%d tensors a "
      "layer, three layers live, %.1f MiB at most), %llu alloc+free pairs a round, median of %d "
      "rounds:\n",
      t->layers, t->d_model, t->tensors, t->trace_peak_bytes / 1048576.0,
      (unsigned long long)t->pairs, t->rounds);
  for (int k = 0; k < ALLOC_KINDS; k++) {
    const alloc_result *r = &t->r[k];
    if (r->measured)
      printf("  %-21s %9.2f us a pair, %9.3f ms a round, peak %.1f MiB\n", r->name, r->us_per_pair,
             r->round_ms, r->peak_bytes / 1048576.0);
    else
      printf("  %-21s not measured (%s)\n", r->name, r->note);
  }
}

json_t *alloc_trace_json(const alloc_trace *t) {
  json_t *o = json_object(), *arr = json_array();
  json_object_set_new(o, "d_model", json_integer(t->d_model));
  json_object_set_new(o, "layers", json_integer(t->layers));
  json_object_set_new(o, "tensors_per_layer", json_integer(t->tensors));
  json_object_set_new(o, "pairs_per_round", json_integer((json_int_t)t->pairs));
  json_object_set_new(o, "trace_peak_bytes", json_real(t->trace_peak_bytes));
  json_object_set_new(o, "rounds", json_integer(t->rounds));
  for (int k = 0; k < ALLOC_KINDS; k++) {
    const alloc_result *r = &t->r[k];
    json_t *e = json_object();
    json_object_set_new(e, "allocator", json_string(r->name));
    json_object_set_new(e, "measured", json_boolean(r->measured));
    if (r->measured) {
      json_object_set_new(e, "us_per_pair", json_real(r->us_per_pair));
      json_object_set_new(e, "round_ms", json_real(r->round_ms));
      json_object_set_new(e, "peak_bytes", json_real(r->peak_bytes));
    } else {
      json_object_set_new(e, "note", json_string(r->note));
    }
    json_array_append_new(arr, e);
  }
  json_object_set_new(o, "allocators", arr);
  return o;
}
