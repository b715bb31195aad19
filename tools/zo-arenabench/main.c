/*
 * zo-arenabench - what a compaction of the device arena (zoffload/arena.h)
 * costs: it fragments an arena on purpose, forces compactions, and holds the
 * time per GB moved against a plain device-to-device zo_memcpy_async loop of
 * the same bytes in copies of the same mean size, measured in the same run.
 * On a CUDA GPU it also times the virtual-memory alternative (reserve an
 * address range once; create, map and unmap physical pages; remap a page to
 * another address), per GB, so copy and remap can be compared with figures.
 * It is a benchmark tool, not a test.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "progress.h"
#include "zoffload/arena.h"
#include "zoffload/device.h"
#include "zoffload/status.h"

#include "allocs.h"
#include "cuapi.h"

#define MIB (1024.0 * 1024.0)

typedef struct opts {
  zo_device_kind device;
  uint64_t capacity; /* bytes; 0 = per-device default */
  int rounds;
  const char *json;
  int no_vmm;
} opts;


static void usage(FILE *f) {
  fprintf(
      f,
      "usage: zo-arenabench [options]\n"
      "Fragments a device arena on purpose, forces compactions, and reports the time per GB they move\n"
      "against a plain device-to-device zo_memcpy_async loop of the same bytes (same mean copy size)\n"
      "measured in the same run. With --device cuda it also times CUDA virtual-memory remapping\n"
      "(cuMemAddressReserve once; cuMemCreate/cuMemMap/cuMemSetAccess, remap, cuMemUnmap/cuMemRelease\n"
      "per granularity-sized page), per GB.\n"
      "\n"
      "  --device D         host|cuda: the emulated device, or the CUDA GPU of LOCAL_RANK (default 0);\n"
      "                     cuda exits 77 with \"no CUDA device\" when there is none (default host)\n"
      "  --capacity BYTES   arena capacity, suffixes K M G (binary) (default 256M on host, 1G on cuda)\n"
      "  --rounds N         fragment-and-compact rounds per scenario (default 4)\n"
      "  --no-vmm           skip the CUDA virtual-memory measurement (default: measure it on cuda)\n"
      "  --json FILE        also write the figures as JSON to FILE (default: none)\n"
      "  --help             this text\n"
      "\n"
      "Scenarios: 'half' frees every other block of a full arena (holes as large as the blocks: moves\n"
      "rarely overlap); 'pinholes' frees 256-byte spacers between blocks (every move overlaps its source\n"
      "and stages through the arena's scratch, the worst case for copies). GB = 1e9 bytes.\n"
      "Then one step's allocations (a 24-layer model's weight fetches, three layers live, forward then\n"
      "backward; the widest model that fits half the capacity) timed on the arena and, on cuda, on\n"
      "cuMemAlloc/cuMemFree (cudaMalloc's path) and CUDA's stream-ordered caching pool\n"
      "(cuMemAllocAsync/cuMemFreeAsync): microseconds per alloc+free pair, --rounds rounds' median.\n"
      "Exit status: 0 done, 1 error, 2 bad flags, 77 --device cuda without a CUDA device.\n");
}

/* ------------------------------------------------------------ the D2D baseline */

/* GB/s of @total bytes copied device to device in copies of @chunk bytes, one stream, from the first
 * enqueue to the end of a synchronize, best of @reps. The copies walk a source and a destination
 * buffer of min(@total, @span) bytes each, so the bytes touched, and so the caches, are like a
 * compaction's. 0 on failure. */
static double d2d_gbps(zo_device_t *dev, size_t total, size_t chunk, size_t span, int reps) {
  char *src = NULL, *dst = NULL;
  zo_stream_t *s = NULL;
  double best = 0;
  if (chunk == 0 || total == 0) return 0;
  if (span > total) span = total;
  if (span < chunk) span = chunk;
  span = span / chunk * chunk;
  if (zo_device_malloc(dev, span, (void **)&src) != ZO_OK ||
      zo_device_malloc(dev, span, (void **)&dst) != ZO_OK || zo_stream_create(dev, &s) != ZO_OK) {
    fprintf(stderr, "zo-arenabench: baseline buffers of %zu bytes: %s\n", span, zo_last_error());
    goto out;
  }
  /* Touch both (first-touch page faults on the host backend are not copy time). */
  if (zo_memset_async(s, src, 1, span) != ZO_OK || zo_memset_async(s, dst, 2, span) != ZO_OK ||
      zo_stream_synchronize(s) != ZO_OK)
    goto out;
  for (int r = 0; r < reps; r++) {
    size_t at = 0;
    const double t0 = zo_clock_s();
    for (size_t done = 0; done < total; done += chunk) {
      const size_t n = total - done < chunk ? total - done : chunk;
      if (zo_memcpy_async(s, dst + at, src + at, n, ZO_COPY_D2D) != ZO_OK) goto out;
      at = at + chunk >= span ? 0 : at + chunk;
    }
    if (zo_stream_synchronize(s) != ZO_OK) goto out;
    const double g = (double)total / (zo_clock_s() - t0) / 1e9;
    if (g > best) best = g;
  }
out:
  if (!best) fprintf(stderr, "zo-arenabench: baseline failed: %s\n", zo_last_error());
  zo_stream_destroy(s);
  if (src) zo_device_free(dev, src);
  if (dst) zo_device_free(dev, dst);
  return best;
}

/* ------------------------------------------------------------ fragment and compact */

typedef struct scenario {
  const char *name;
  int rounds, compactions;
  uint64_t bytes_moved, copies, allocs;
  double compact_seconds;
  double compact_gbps, baseline_gbps, ratio; /* ratio = compact_gbps / baseline_gbps */
  size_t mean_copy_bytes;
  double frag_before; /* mean fragmentation when the big request came */
  int ok;
} scenario;

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#define BCHECK(expr)                                                                \
  do {                                                                              \
    zo_status st_ = (expr);                                                         \
    if (st_ != ZO_OK) {                                                             \
      fprintf(stderr, "zo-arenabench: %s: %s (%s)\n", #expr, zo_status_string(st_), \
              zo_last_error());                                                     \
      goto fail;                                                                    \
    }                                                                               \
  } while (0)

/* One scenario on @a (empty on entry and exit): per round, fill the arena with blocks of random
 * sizes (pinholes: each followed by a 256-byte spacer), unpin them, free every other block (the
 * spacers), then ask for 3/4 of the free bytes in one block, which only a compaction can give.
 * @prog counts the rounds. */
static int run_scenario(zo_device_t *dev, zo_arena_t *a, size_t cap, int pinholes, int rounds,
                        scenario *sc, zo_tool_progress *prog) {
  enum { MAXB = 1 << 16 };
  zo_arena_block_t **blk = calloc(MAXB, sizeof *blk);
  uint64_t rng = pinholes ? 0x5eed2 : 0x5eed1;
  zo_arena_stats s0, s1;
  if (!blk) return -1;
  memset(sc, 0, sizeof *sc);
  sc->name = pinholes ? "pinholes" : "half";
  sc->rounds = rounds;
  BCHECK(zo_arena_get_stats(a, &s0));
  double frag = 0;
  for (int r = 0; r < rounds; r++) {
    zo_tool_progress_update(prog, (int64_t)pinholes * rounds + r, sc->name); /* rounds done */
    size_t n = 0;
    const size_t lo = cap / 128 > 256 ? cap / 128 : 256, hi = cap / 32 > lo ? cap / 32 : lo;
    for (;;) {
      zo_arena_stats st;
      BCHECK(zo_arena_get_stats(a, &st));
      size_t want = lo + (size_t)(rng_next(&rng) % (hi - lo + 1));
      want = (want + ZO_ARENA_ALIGN - 1) / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN;
      if (want + (pinholes ? ZO_ARENA_ALIGN : 0) > st.largest_free || n + 2 > MAXB) break;
      BCHECK(zo_arena_alloc(a, want, &blk[n]));
      BCHECK(zo_arena_unpin(a, blk[n++], NULL));
      if (pinholes) {
        BCHECK(zo_arena_alloc(a, ZO_ARENA_ALIGN, &blk[n]));
        BCHECK(zo_arena_unpin(a, blk[n++], NULL));
      }
      sc->allocs += pinholes ? 2 : 1;
    }
    for (size_t i = 1; i < n; i += 2) {
      BCHECK(zo_arena_free(a, blk[i], NULL));
      blk[i] = NULL;
    }
    zo_arena_stats st;
    BCHECK(zo_arena_get_stats(a, &st));
    frag += st.fragmentation;
    size_t big = st.free_bytes / 4 * 3 / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN;
    if (big <= st.largest_free) big = st.largest_free + ZO_ARENA_ALIGN; /* must not fit as it is */
    zo_arena_block_t *b = NULL;
    BCHECK(zo_arena_alloc(a, big, &b));
    BCHECK(zo_arena_free(a, b, NULL));
    for (size_t i = 0; i < n; i++)
      if (blk[i]) BCHECK(zo_arena_free(a, blk[i], NULL));
  }
  BCHECK(zo_arena_get_stats(a, &s1));
  sc->compactions = (int)(s1.compactions - s0.compactions);
  sc->bytes_moved = s1.bytes_moved - s0.bytes_moved;
  sc->copies = s1.copies - s0.copies;
  sc->compact_seconds = s1.compact_seconds - s0.compact_seconds;
  sc->frag_before = rounds ? frag / rounds : 0;
  sc->mean_copy_bytes = sc->copies ? (size_t)(sc->bytes_moved / sc->copies) : 0;
  sc->compact_gbps =
      sc->compact_seconds > 0 ? (double)sc->bytes_moved / sc->compact_seconds / 1e9 : 0;
  sc->baseline_gbps = d2d_gbps(dev, sc->bytes_moved, sc->mean_copy_bytes, cap / 2, 3);
  sc->ratio = sc->baseline_gbps > 0 ? sc->compact_gbps / sc->baseline_gbps : 0;
  sc->ok = sc->compactions > 0 && sc->baseline_gbps > 0;
  free(blk);
  return 0;
fail:
  free(blk);
  return -1;
}

/* ------------------------------------------------------------ CUDA virtual memory */

typedef struct vmm {
  int measured;
  char note[256];
  size_t granularity; /* bytes per page (recommended granularity) */
  int pages;
  double reserve_s; /* one cuMemAddressReserve of 2 x pages x granularity */
  double create_s, map_s, remap_s, unmap_s, release_s; /* totals over all pages */
} vmm;

static double s_per_gb(double s, double bytes) { return bytes > 0 ? s / (bytes / 1e9) : 0; }

#if ZO_HAVE_CUDA
/* Time the virtual-memory path on GPU @ordinal over about @bytes (at most 1024 pages). */
static void measure_vmm(int ordinal, size_t bytes, vmm *v) {
  cu_api c;
  CUdevice cd;
  CUcontext ctx = NULL;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle *hs = NULL;
  int n = 0, supported = 0, mapped = 0, remapped = 0;
  size_t reserved = 0, g = 0;
  memset(v, 0, sizeof *v);
#define CU(call) CU_TRY(v->note, call)
  if (cu_load(&c, v->note, sizeof v->note)) return;
  CU(c.Init(0));
  CU(c.DeviceGet(&cd, ordinal));
  CU(c.DeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cd));
  if (!supported) {
    snprintf(v->note, sizeof v->note, "GPU %d does not support virtual memory management", ordinal);
    return;
  }
  CU(c.PrimaryCtxRetain(&ctx, cd));
  CU(c.CtxSetCurrent(ctx));
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = cd;
  CU(c.GetGranularity(&v->granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  g = v->granularity;
  n = (int)(bytes / g);
  if (n < 1) n = 1;
  if (n > 1024) n = 1024;
  hs = calloc((size_t)n, sizeof *hs);
  if (!hs) {
    snprintf(v->note, sizeof v->note, "out of host memory");
    goto out;
  }
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  double t0 = zo_clock_s();
  CU(c.AddressReserve(&va, 2 * (size_t)n * g, g, 0, 0));
  reserved = 2 * (size_t)n * g;
  v->reserve_s = zo_clock_s() - t0;
  for (int i = 0; i < n; i++) { /* physical pages */
    t0 = zo_clock_s();
    CU(c.Create(&hs[i], g, &prop, 0));
    v->create_s += zo_clock_s() - t0;
  }
  for (; mapped < n; mapped++) { /* map into the first half */
    t0 = zo_clock_s();
    CU(c.Map(va + (size_t)mapped * g, g, 0, hs[mapped], 0));
    CU(c.SetAccess(va + (size_t)mapped * g, g, &acc, 1));
    v->map_s += zo_clock_s() - t0;
  }
  for (
      ; remapped < n;
      remapped++) { /* move each page to the second half: what a compaction would do instead of a copy */
    const CUdeviceptr from = va + (size_t)remapped * g, to = va + (size_t)(n + remapped) * g;
    t0 = zo_clock_s();
    CU(c.Unmap(from, g));
    CU(c.Map(to, g, 0, hs[remapped], 0));
    CU(c.SetAccess(to, g, &acc, 1));
    v->remap_s += zo_clock_s() - t0;
  }
  t0 = zo_clock_s();
  for (int i = 0; i < n; i++) CU(c.Unmap(va + (size_t)(n + i) * g, g));
  v->unmap_s = zo_clock_s() - t0;
  mapped = remapped = 0;
  t0 = zo_clock_s();
  for (int i = 0; i < n; i++) {
    CU(c.Release(hs[i]));
    hs[i] = 0;
  }
  v->release_s = zo_clock_s() - t0;
  v->pages = n;
  v->measured = 1;
out:
  /* On an error part way, undo what is left (errors ignored). */
  for (int i = 0; i < remapped; i++) c.Unmap(va + (size_t)(n + i) * g, g);
  for (int i = remapped; i < mapped; i++) c.Unmap(va + (size_t)i * g, g);
  for (int i = 0; hs && i < n; i++)
    if (hs[i]) c.Release(hs[i]);
  if (reserved) c.AddressFree(va, reserved);
  if (ctx) c.PrimaryCtxRelease(cd);
  free(hs);
#undef CU
}
#endif

/* ------------------------------------------------------------ main */

static json_t *scenario_json(const scenario *s) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(s->name));
  json_object_set_new(o, "rounds", json_integer(s->rounds));
  json_object_set_new(o, "allocs", json_integer((json_int_t)s->allocs));
  json_object_set_new(o, "compactions", json_integer(s->compactions));
  json_object_set_new(o, "fragmentation_before", json_real(s->frag_before));
  json_object_set_new(o, "bytes_moved", json_integer((json_int_t)s->bytes_moved));
  json_object_set_new(o, "copies", json_integer((json_int_t)s->copies));
  json_object_set_new(o, "mean_copy_bytes", json_integer((json_int_t)s->mean_copy_bytes));
  json_object_set_new(o, "compact_seconds", json_real(s->compact_seconds));
  json_object_set_new(o, "compact_s_per_gb",
                      json_real(s_per_gb(s->compact_seconds, (double)s->bytes_moved)));
  json_object_set_new(o, "compact_gbps", json_real(s->compact_gbps));
  json_object_set_new(o, "baseline_gbps", json_real(s->baseline_gbps));
  json_object_set_new(o, "baseline_s_per_gb",
                      json_real(s->baseline_gbps > 0 ? 1.0 / s->baseline_gbps : 0));
  json_object_set_new(o, "ratio", json_real(s->ratio));
  json_object_set_new(o, "ok", json_boolean(s->ok));
  return o;
}

static json_t *vmm_json(const vmm *v) {
  if (!v) return json_null();
  json_t *o = json_object();
  json_object_set_new(o, "measured", json_boolean(v->measured));
  json_object_set_new(o, "note", json_string(v->note));
  json_object_set_new(o, "granularity", json_integer((json_int_t)v->granularity));
  json_object_set_new(o, "pages", json_integer(v->pages));
  const double b = (double)v->pages * (double)v->granularity;
  json_object_set_new(o, "bytes", json_integer((json_int_t)b));
  json_object_set_new(o, "reserve_s", json_real(v->reserve_s));
  json_object_set_new(o, "create_s_per_gb", json_real(s_per_gb(v->create_s, b)));
  json_object_set_new(o, "map_s_per_gb", json_real(s_per_gb(v->map_s, b)));
  json_object_set_new(o, "remap_s_per_gb", json_real(s_per_gb(v->remap_s, b)));
  json_object_set_new(o, "unmap_s_per_gb", json_real(s_per_gb(v->unmap_s, b)));
  json_object_set_new(o, "release_s_per_gb", json_real(s_per_gb(v->release_s, b)));
  return o;
}

/* getopt over argv into *o, the capacity defaulted per device. Returns -1 to go on, or the exit status
 * (message printed). */
static int parse_options(int argc, char **argv, opts *o) {
  *o = (opts){ZO_DEVICE_HOST, 0, 4, NULL, 0};
  enum { OPT_DEVICE = 1, OPT_CAPACITY, OPT_ROUNDS, OPT_JSON, OPT_NO_VMM, OPT_HELP };
  static const struct option lo[] = {{"device", required_argument, 0, OPT_DEVICE},
                                     {"capacity", required_argument, 0, OPT_CAPACITY},
                                     {"rounds", required_argument, 0, OPT_ROUNDS},
                                     {"json", required_argument, 0, OPT_JSON},
                                     {"no-vmm", no_argument, 0, OPT_NO_VMM},
                                     {"help", no_argument, 0, OPT_HELP},
                                     {0, 0, 0, 0}};
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
    switch (c) {
      case OPT_DEVICE:
        if (!strcmp(optarg, "host"))
          o->device = ZO_DEVICE_HOST;
        else if (!strcmp(optarg, "cuda"))
          o->device = ZO_DEVICE_CUDA;
        else {
          fprintf(stderr, "zo-arenabench: --device: '%s' is not host or cuda\n", optarg);
          return 2;
        }
        break;
      case OPT_CAPACITY:
        if (zo_tool_parse_bytes(optarg, &o->capacity) || o->capacity < 64 * 1024) {
          fprintf(stderr, "zo-arenabench: --capacity: '%s' is not a byte count of at least 64K\n",
                  optarg);
          return 2;
        }
        break;
      case OPT_ROUNDS: {
        int64_t v;
        if (zo_tool_parse_int(optarg, 1, 1000, &v)) {
          fprintf(stderr, "zo-arenabench: --rounds: '%s' is not an integer in [1, 1000]\n", optarg);
          return 2;
        }
        o->rounds = (int)v;
        break;
      }
      case OPT_JSON: o->json = optarg; break;
      case OPT_NO_VMM: o->no_vmm = 1; break;
      case OPT_HELP: usage(stdout); return 0;
      default: return zo_tool_option_error("zo-arenabench", c, argc, argv, lo);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "zo-arenabench: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!o->capacity) o->capacity = o->device == ZO_DEVICE_CUDA ? 1024ull << 20 : 256ull << 20;
  return -1;
}

/* Touch the whole reservation once (first-touch page faults are not compaction time). 0, or -1 (printed). */
static int touch_arena(zo_device_t *dev, zo_arena_t *a, size_t cap) {
  zo_arena_block_t *all = NULL;
  zo_stream_t *s = NULL;
  BCHECK(zo_arena_alloc(a, cap, &all));
  BCHECK(zo_stream_create(dev, &s));
  BCHECK(zo_memset_async(s, zo_arena_ptr(all), 0, cap));
  BCHECK(zo_stream_synchronize(s));
  zo_stream_destroy(s);
  BCHECK(zo_arena_free(a, all, NULL));
  return 0;
fail:
  return -1;
}

static void print_scenarios(const scenario *sc) {
  printf("%-9s %6s %11s %8s %9s %10s %11s %12s %11s %9s %6s\n", "scenario", "rounds", "compactions",
         "frag", "moved_MB", "copies", "copy_bytes", "compact_s/GB", "compact_GB/s", "d2d_GB/s",
         "ratio");
  for (int i = 0; i < 2; i++)
    printf("%-9s %6d %11d %8.3f %9.1f %10" PRIu64 " %11zu %12.4f %11.2f %9.2f %6.3f\n", sc[i].name,
           sc[i].rounds, sc[i].compactions, sc[i].frag_before, (double)sc[i].bytes_moved / 1e6,
           sc[i].copies, sc[i].mean_copy_bytes,
           s_per_gb(sc[i].compact_seconds, (double)sc[i].bytes_moved), sc[i].compact_gbps,
           sc[i].baseline_gbps, sc[i].ratio);
  printf(
      "  ratio = compaction GB/s over the plain D2D loop of the same bytes in copies of the same mean size\n"
      "  (compaction time: waits for pending frees and last uses, copies, bookkeeping, the final synchronize)\n");
}

/* --device cuda without --no-vmm: the virtual-memory figures into *v (the arena is destroyed first, its
 * memory is needed) and printed. Returns v, or NULL when not measured. */
static vmm *run_vmm(const opts *o, int ordinal, size_t cap, zo_arena_t **a, const scenario *sc,
                    vmm *v) {
  memset(v, 0, sizeof *v);
  if (o->device != ZO_DEVICE_CUDA || o->no_vmm) return NULL;
#if ZO_HAVE_CUDA
  zo_arena_destroy(*a); /* give its memory back: the pages need room */
  *a = NULL;
  measure_vmm(ordinal, cap, v);
#else
  (void)ordinal, (void)cap, (void)a;
  snprintf(v->note, sizeof v->note, "built without CUDA");
#endif
  if (v->measured) {
    const double b = (double)v->pages * (double)v->granularity;
    printf(
        "vmm: %d pages of %zu KiB (%.1f MiB): reserve %.1f us once; per GB: create %.4f s, map+access %.4f s, "
        "remap (unmap+map+access) %.4f s, unmap %.4f s, release %.4f s\n",
        v->pages, v->granularity / 1024, b / MIB, v->reserve_s * 1e6, s_per_gb(v->create_s, b),
        s_per_gb(v->map_s, b), s_per_gb(v->remap_s, b), s_per_gb(v->unmap_s, b),
        s_per_gb(v->release_s, b));
    printf("  copy vs remap: compaction (half) %.4f s/GB, plain D2D %.4f s/GB, remap %.4f s/GB\n",
           s_per_gb(sc[0].compact_seconds, (double)sc[0].bytes_moved),
           sc[0].baseline_gbps > 0 ? 1.0 / sc[0].baseline_gbps : 0, s_per_gb(v->remap_s, b));
  } else {
    printf("vmm: not measured (%s)\n", v->note);
  }
  return v;
}

/* --json FILE; 0, or -1 when it cannot be written (printed) */
static int write_json(const opts *o, zo_device_t *dev, size_t cap, const scenario *sc,
                      const vmm *vp, const alloc_trace *at) {
  json_t *root = json_object();
  json_object_set_new(root, "device", json_string(o->device == ZO_DEVICE_CUDA ? "cuda" : "host"));
  json_object_set_new(root, "device_name", json_string(zo_device_name(dev)));
  json_object_set_new(root, "capacity", json_integer((json_int_t)cap));
  json_object_set_new(root, "rounds", json_integer(o->rounds));
  json_object_set_new(root, "compact_s_per_gb",
                      json_real(s_per_gb(sc[0].compact_seconds, (double)sc[0].bytes_moved)));
  json_object_set_new(root, "baseline_s_per_gb",
                      json_real(sc[0].baseline_gbps > 0 ? 1.0 / sc[0].baseline_gbps : 0));
  json_object_set_new(root, "ratio", json_real(sc[0].ratio));
  json_t *arr = json_array();
  for (int i = 0; i < 2; i++) json_array_append_new(arr, scenario_json(&sc[i]));
  json_object_set_new(root, "scenarios", arr);
  json_object_set_new(root, "vmm", vmm_json(vp));
  json_object_set_new(root, "allocation_trace", alloc_trace_json(at));
  json_object_set_new(
      root, "definitions",
      json_string(
          "GB = 1e9 bytes; ratio = compact_gbps / baseline_gbps; top-level figures are "
          "scenario 'half'; baseline: one stream of D2D zo_memcpy_async of the same bytes "
          "in copies of mean_copy_bytes walking buffers of min(bytes, capacity / 2), best of 3; vmm: CUDA driver virtual memory, "
          "null on the host device"));
  int rc = 0;
  if (json_dump_file(root, o->json, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
    fprintf(stderr, "zo-arenabench: cannot write JSON to '%s'\n", o->json);
    rc = -1;
  }
  json_decref(root);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* each result as it is done, on a pipe too */
  opts o;
  int rc = parse_options(argc, argv, &o);
  if (rc >= 0) return rc;

  zo_device_t *dev = NULL;
  zo_arena_t *a = NULL;
  const int ordinal = o.device == ZO_DEVICE_CUDA ? zo_device_default_ordinal() : 0;
  zo_status st = zo_device_create(o.device, ordinal, 0, &dev);
  if (o.device == ZO_DEVICE_CUDA && st == ZO_ERR_UNSUPPORTED) {
    fprintf(stderr, "zo-arenabench: --device cuda: no CUDA device (%s)\n", zo_last_error());
    return 77;
  }
  if (st != ZO_OK) {
    fprintf(stderr, "zo-arenabench: device: %s\n", zo_last_error());
    return 1;
  }
  rc = 1;
  const size_t cap = (size_t)o.capacity / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN;
  printf("zo-arenabench: %s, arena %.1f MiB, %d round(s) per scenario\n", zo_device_name(dev),
         (double)cap / MIB, o.rounds);
  if ((st = zo_arena_create(dev, cap, NULL, &a)) != ZO_OK) {
    fprintf(stderr, "zo-arenabench: arena: %s\n", zo_last_error());
    goto done;
  }
  if (touch_arena(dev, a, cap)) goto done;
  scenario sc[2];
  zo_tool_progress prog; /* elapsed and ETA on stderr: a bar on a terminal, a line every 10 s */
  zo_tool_progress_start(&prog, "zo-arenabench", "rounds", 2 * (int64_t)o.rounds, 10.0);
  for (int i = 0; i < 2; i++)
    if (run_scenario(dev, a, cap, i, o.rounds, &sc[i], &prog)) goto done;
  zo_tool_progress_end(&prog);
  print_scenarios(sc);
  alloc_trace at; /* one step's allocations on the arena and on CUDA's allocators */
  if (alloc_trace_run(dev, a, cap, ordinal, o.rounds, &at)) goto done;
  alloc_trace_print(&at);
  vmm v;
  vmm *vp = run_vmm(&o, ordinal, cap, &a, sc, &v);
  if (o.json && write_json(&o, dev, cap, sc, vp, &at)) goto done;
  rc = (sc[0].ok && sc[1].ok) ? 0 : 1;
  if (rc) fprintf(stderr, "zo-arenabench: a scenario did not compact or its baseline failed\n");
done:
  zo_arena_destroy(a);
  zo_device_destroy(dev);
  return rc;
}
