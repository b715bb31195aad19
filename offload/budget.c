/*
 * budget.c - the start-up budget (zoffload/budget.h): every tier's bytes of
 * the memory plan (plan.c, what zo_engine_finalize() allocates) against what
 * the machine has. Not here: any sizing of the engine's buffers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "engine_internal.h"
#include "plan_internal.h"
#include "zoffload/budget.h"

const char *zo_tier_name(zo_tier t) {
  switch (t) {
    case ZO_TIER_DEVICE: return "device";
    case ZO_TIER_HOST: return "host";
    case ZO_TIER_PINNED: return "pinned";
    case ZO_TIER_NVME: return "nvme";
  }
  return "?";
}

/* Human size for messages: "46.0 GiB"; "unlimited" for SIZE_MAX (no limit). */
static const char *hsize(char *buf, size_t n, size_t b) {
  if (b == SIZE_MAX) return snprintf(buf, n, "unlimited"), buf;
  return zo_format_bytes(buf, n, (double)b);
}

/* ------------------------------------------------------------ what is there */

/* MemAvailable of /proc/meminfo, bytes; SIZE_MAX when unreadable. */
static size_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return SIZE_MAX;
  char line[256];
  size_t kb = SIZE_MAX;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
  fclose(f);
  return kb == SIZE_MAX ? SIZE_MAX : kb * 1024;
}

/* MemTotal of /proc/meminfo into *@out, bytes; SIZE_MAX when unreadable. ZO_TEST_MEMTOTAL (bytes), when set and
 * not empty, stands in for it, so tests can size the pinned rule against a machine of any size (zoffload/budget.h):
 * decimal digits only, in [1, SIZE_MAX - 1], else ZO_ERR_INVALID_ARG naming it (strtoull alone took "-1" as
 * SIZE_MAX, "no limit", and ignored "1e9" or "64G" without a word). */
double zo_plan_pinned_fraction(const zo_config_t *c) {
  const double frac = c->zoffload.pinned_fraction;
  return frac > 0 && frac <= 1 ? frac : ZO_CONFIG_PINNED_FRACTION;
}

zo_status zo_plan_mem_total(size_t *out) {
  const char *t = getenv("ZO_TEST_MEMTOTAL");
  if (t && *t) {
    char *end, et[64];
    errno = 0;
    unsigned long long v =
        t[0] >= '0' && t[0] <= '9' ? strtoull(t, &end, 10) : 0; /* no sign, no blank */
    if (t[0] < '0' || t[0] > '9' || errno || *end || v == 0 || v >= SIZE_MAX)
      return zo_error_set(
          ZO_ERR_INVALID_ARG,
          "budget: environment variable ZO_TEST_MEMTOTAL='%s': expected a byte "
          "count in [1, %zu] (it stands in for MemTotal; unset it to use /proc/meminfo)",
          zo_escape(et, sizeof et, t, strlen(t)), SIZE_MAX - 1);
    *out = (size_t)v;
    return ZO_OK;
  }
  *out = SIZE_MAX;
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return ZO_OK;
  char line[256];
  size_t kb = SIZE_MAX;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %zu kB", &kb) == 1) break;
  fclose(f);
  *out = kb == SIZE_MAX || kb > SIZE_MAX / 1024 ? SIZE_MAX : kb * 1024;
  return ZO_OK;
}

static int read_u64_file(const char *path, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char buf[64] = {0};
  int ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  if (!ok) return -1;
  if (!strncmp(buf, "max", 3)) return *v = UINT64_MAX, 0;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(buf, &end, 10);
  if (errno || end == buf) return -1;
  *v = x;
  return 0;
}

/* Room left under the cgroup v2 memory.max of this process's cgroup and its
 * ancestors (min over them of max - current); SIZE_MAX when none is set. */
static size_t cgroup_room(char *which, size_t wn) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return SIZE_MAX;
  char line[1024], rel[1024] = "";
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "0::", 3)) {
      snprintf(rel, sizeof rel, "%.1000s", line + 3);
      rel[strcspn(rel, "\n")] = 0;
      break;
    }
  fclose(f);
  size_t room = SIZE_MAX;
  for (;;) {
    char path[1100];
    uint64_t max, cur;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", rel);
    if (read_u64_file(path, &max) == 0 && max != UINT64_MAX) {
      snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", rel);
      if (read_u64_file(path, &cur) != 0) cur = 0;
      size_t r = cur < max ? (size_t)(max - cur) : 0;
      if (r < room) {
        room = r;
        snprintf(which, wn, "cgroup %s memory.max", rel[0] ? rel : "/");
      }
    }
    char *slash = strrchr(rel, '/');
    if (!slash || !rel[0]) break;
    *slash = 0;
  }
  return room;
}

static size_t memlock_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  FILE *f = fopen("/proc/self/status", "r"); /* CAP_IPC_LOCK (bit 14 of CapEff) lifts the limit */
  if (f) {
    char line[256];
    unsigned long long cap = 0;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "CapEff: %llx", &cap) == 1) break;
    fclose(f);
    if (cap & (1ull << 14)) return SIZE_MAX;
  }
  return (size_t)rl.rlim_cur;
}

/* Free bytes for an unprivileged writer on the file system of @path (or of its nearest existing parent). */
static size_t fs_free(const char *path, dev_t *fsid) {
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  struct statvfs sv;
  struct stat st;
  while (statvfs(p, &sv) != 0) {
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) {
      snprintf(p, sizeof p, "%s", slash == p ? "/" : ".");
      if (statvfs(p, &sv) != 0) return SIZE_MAX;
      break;
    }
    *slash = 0;
  }
  *fsid = stat(p, &st) == 0 ? st.st_dev : 0;
  return (size_t)sv.f_bavail * sv.f_frsize;
}

/* ------------------------------------------------------------ the budget */

/* @need fits in @available (SIZE_MAX: no limit); a saturated need never does. */
static int fits_in(size_t need, size_t available) { return need != SIZE_MAX && need <= available; }

static zo_budget_line *add_line(zo_budget *b, zo_tier t, const char *where) {
  zo_budget_line *l = &b->line[b->n_lines++];
  memset(l, 0, sizeof *l);
  l->tier = t;
  l->fits = 1;
  snprintf(l->where, sizeof l->where, "%.255s", where);
  return l;
}

zo_status zo_engine_budget(zo_engine_t *e, const size_t app[4], zo_budget *out) {
  return zo_engine_budget_for(e, ZO_DEVICE_AUTO, app, out);
}

zo_status zo_engine_budget_for(zo_engine_t *e, zo_device_kind kind, const size_t app[4],
                               zo_budget *out) {
  if (!e || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "budget: NULL argument");
  zo_plan *plan;
  ZO_CHECK(zo_plan_make(e, "budget", kind, &plan));
  zo_status st = zo_plan_budget(e, plan, app, out);
  zo_plan_free(plan);
  return st;
}

/* Device line: the resident block, and with parameter offload room for the largest tensor; advice when it does not fit. */
static zo_status budget_device(const zo_engine_t *e, const zo_plan *p, const size_t app[4],
                               zo_budget *out, zo_budget_line **ld_out) {
  const int pres = e->ptier == ZO_OFFLOAD_NONE;
  const size_t dev_state = p->dev_state_bytes, largest_dev = p->largest_dev_bytes;
  const size_t dev = p->device_need_bytes;
  char a[32], b2[32];
  zo_budget_line *ld = *ld_out = add_line(out, ZO_TIER_DEVICE, zo_device_name(e->dev));
  ld->engine_bytes = dev;
  ld->app_bytes = app[ZO_TIER_DEVICE];
  ld->need = add_sat(dev, app[ZO_TIER_DEVICE]);
  ZO_CHECK(zo_device_mem_available(e->dev, &ld->available));
  snprintf(ld->source, sizeof ld->source, "%s",
           zo_device_get_kind(e->dev) == ZO_DEVICE_CUDA
               ? "cudaMemGetInfo, under zoffload.device_memory_limit"
           : ld->available == SIZE_MAX ? "host device, no zoffload.device_memory_limit"
                                       : "zoffload.device_memory_limit");
  if (!fits_in(ld->need, ld->available)) {
    ld->fits = 0;
    if (e->tier == ZO_OFFLOAD_NONE)
      snprintf(ld->advice, sizeof ld->advice,
               "set zero_optimization.offload_optimizer.device to \"cpu\" (moves "
               "%s of master weights, Adam state and gradients to host memory)",
               hsize(a, sizeof a, dev_state));
    else if (pres)
      snprintf(
          ld->advice, sizeof ld->advice,
          "set zero_optimization.offload_param.device to \"cpu\" (ZeRO stage 3: "
          "the device then holds at least the largest tensor, %s, instead of all %s of working weights)",
          hsize(a, sizeof a, largest_dev), hsize(b2, sizeof b2, dev));
    else
      snprintf(ld->advice, sizeof ld->advice,
               "raise zoffload.device_memory_limit by at least %zu bytes, or use a "
               "device with more memory (the largest tensor alone needs %s)",
               ld->need - ld->available, hsize(a, sizeof a, largest_dev));
  }
  return ZO_OK;
}

/* Host advice, NVMe optimizer tier: a smaller sub_group_size that fits (@over bytes too many), else lower it. */
static int host_advice_sub_group(const zo_engine_t *e, const zo_plan *p, zo_budget_line *lh,
                                 size_t over) {
  const size_t wsz = p->wsz,
               state_esz =
                   p->state_esz + zo_dtype_size(e->adtype); /* a slot holds the gradient too */
  const size_t sg_bytes = zo_plan_sum(p, "sub_group_buffers.");
  const int nbuf = p->n_slots;
  char a[32];
  int n = 0;
  /* Each element of sub_group_size costs nbuf x (state + gradient) bytes, plus two working-dtype elements of the
   * write-back ring. */
  const int ring = p->wb_bytes > 0; /* parameters on nvme, not all cached in host memory */
  const size_t per = (size_t)nbuf * state_esz + (ring ? 2 * wsz : 0);
  const size_t now = sg_bytes + (ring ? 2 * p->slot_el * wsz : 0);
  if (now > over) {
    size_t fit = (now - over) / per, unit = p->extent_unit;
    fit = fit / unit * unit;
    if (fit >= unit)
      n += snprintf(lh->advice + n, sizeof lh->advice - n,
                    "set zero_optimization.sub_group_size to at most %zu "
                    "(now %" PRId64 ": %d buffer sets x %zu elements x %zu bytes = %s pinned)",
                    fit, e->cfg.zero.sub_group_size, nbuf, p->slot_el, state_esz,
                    hsize(a, sizeof a, sg_bytes));
  }
  if (!n)
    n += snprintf(lh->advice + n, sizeof lh->advice - n,
                  "lower zero_optimization.sub_group_size and "
                  "offload_optimizer.buffer_count (%d buffer sets of %zu elements hold %s)",
                  nbuf, p->slot_el, hsize(a, sizeof a, sg_bytes));
  return n;
}

/* Host advice when the host line does not fit: what to offload further, or whose bytes leave too little. */
static void host_advice(const zo_engine_t *e, const zo_plan *p, const size_t app[4],
                        const zo_budget_line *ld, zo_budget_line *lh) {
  const size_t state_host = zo_plan_sum(p, "state_host."),
               param_host = zo_plan_sum(p, "param_host");
  const size_t sg_bytes = zo_plan_sum(p, "sub_group_buffers.");
  const size_t over = lh->need > lh->available ? lh->need - lh->available : 0;
  char a[32];
  int n = 0;
  if (e->tier == ZO_OFFLOAD_NVME && sg_bytes) n += host_advice_sub_group(e, p, lh, over);
  if (e->tier == ZO_OFFLOAD_CPU && state_host)
    n += snprintf(lh->advice + n, sizeof lh->advice - n,
                  "%sset zero_optimization.offload_optimizer.device to "
                  "\"nvme\" (moves %s of master weights and Adam state to nvme_path)",
                  n ? "; or " : "", hsize(a, sizeof a, state_host));
  if (e->ptier == ZO_OFFLOAD_CPU && (size_t)n < sizeof lh->advice)
    n += snprintf(lh->advice + n, sizeof lh->advice - n,
                  "%sset zero_optimization.offload_param.device to \"nvme\" "
                  "(moves %s of working weights to nvme_path)",
                  n ? "; or " : "", hsize(a, sizeof a, param_host));
  if (e->ptier == ZO_OFFLOAD_NVME && param_host && (size_t)n < sizeof lh->advice)
    n += snprintf(
        lh->advice + n, sizeof lh->advice - n,
        "%slower zero_optimization.offload_param.max_in_cpu (now "
        "%zu elements: the working weights of the first %d tensors, %s, are cached in host memory)",
        n ? "; or " : "", e->pcache_el, p->pcache_tensors, hsize(a, sizeof a, param_host));
  if (!n && zo_device_get_kind(e->dev) == ZO_DEVICE_HOST && ld->need > over)
    n += snprintf(lh->advice + n, sizeof lh->advice - n,
                  "set zoffload.device_memory_limit or offload more: the "
                  "host device's %s are host memory",
                  hsize(a, sizeof a, ld->need));
  if (!n && (size_t)n < sizeof lh->advice)
    snprintf(lh->advice, sizeof lh->advice,
             "the caller's own %s (e.g. the model) leave too little: use a smaller "
             "model or batch, or a machine with more memory",
             hsize(a, sizeof a, app[ZO_TIER_HOST]));
}

size_t zo_host_memory_available(char *source, size_t cap) {
  size_t avail = mem_available();
  char cg[160] = "";
  const size_t room = cgroup_room(cg, sizeof cg);
  if (source && cap) snprintf(source, cap, "%s", room < avail ? cg : "MemAvailable");
  return room < avail ? room : avail;
}

/* Host line (plus the device bytes on a host device, whose memory is host memory): MemAvailable or the cgroup. */
static void budget_host(const zo_engine_t *e, const zo_plan *p, const size_t app[4], zo_budget *out,
                        const zo_budget_line *ld) {
  char a[32];
  zo_budget_line *lh = add_line(out, ZO_TIER_HOST, "host");
  lh->engine_bytes = p->host_bytes;
  lh->app_bytes = app[ZO_TIER_HOST];
  lh->need = add_sat(add_sat(p->host_bytes, app[ZO_TIER_HOST]),
                     zo_device_get_kind(e->dev) == ZO_DEVICE_HOST ? ld->need : 0);
  size_t avail = zo_host_memory_available(lh->source, sizeof lh->source);
  if (zo_device_get_kind(e->dev) == ZO_DEVICE_HOST)
    snprintf(lh->source + strlen(lh->source), sizeof lh->source - strlen(lh->source),
             "; includes the host device's %s", hsize(a, sizeof a, ld->need));
  lh->available = avail;
  if (!fits_in(lh->need, lh->available)) {
    lh->fits = 0;
    host_advice(e, p, app, ld, lh);
  }
}

/* Pinned line: refused over zoffload.pinned_fraction of MemTotal (page-locked memory cannot be reclaimed: the OS,
 * the driver, a data loader and the page cache need the rest); over RLIMIT_MEMLOCK below that, a warning (the pool
 * falls back to pageable memory). */
static zo_status budget_pinned(const zo_engine_t *e, const zo_plan *p, const size_t app[4],
                               zo_budget *out) {
  char a[32], b2[32];
  size_t total = SIZE_MAX;
  ZO_CHECK(zo_plan_mem_total(&total));
  zo_budget_line *lp = add_line(out, ZO_TIER_PINNED, "host (page-locked)");
  lp->engine_bytes = p->pinned_bytes;
  lp->app_bytes = app[ZO_TIER_PINNED];
  lp->need = add_sat(p->pinned_bytes, app[ZO_TIER_PINNED]);
  const double frac = zo_plan_pinned_fraction(&e->cfg);
  const size_t cap = total == SIZE_MAX ? SIZE_MAX : (size_t)((double)total * frac);
  const size_t memlock = memlock_limit();
  lp->available = cap < memlock ? cap : memlock;
  if (cap < memlock)
    snprintf(lp->source, sizeof lp->source, "%g%% of MemTotal %s (zoffload.pinned_fraction %g)",
             frac * 100, hsize(a, sizeof a, total), frac);
  else
    snprintf(lp->source, sizeof lp->source, "%s",
             memlock == SIZE_MAX ? "RLIMIT_MEMLOCK unlimited or CAP_IPC_LOCK" : "RLIMIT_MEMLOCK");
  if (!fits_in(lp->need, cap)) {
    lp->fits = 0;
    int n = snprintf(lp->advice, sizeof lp->advice,
                     "page-locked memory is limited to %g%% of MemTotal (%s of %s), "
                     "leaving the rest to the OS, driver, data loader and page cache: ",
                     frac * 100, hsize(a, sizeof a, cap), hsize(b2, sizeof b2, total));
    if (e->tier == ZO_OFFLOAD_CPU && (size_t)n < sizeof lp->advice)
      n += snprintf(lp->advice + n, sizeof lp->advice - n,
                    "set zero_optimization.offload_optimizer.device to "
                    "\"nvme\", ");
    if ((size_t)n < sizeof lp->advice)
      snprintf(lp->advice + n, sizeof lp->advice - n,
               "set zero_optimization.offload_optimizer.pin_memory (and "
               "offload_param.pin_memory) to false, lower zero_optimization.sub_group_size or "
               "offload_optimizer.buffer_count, or raise zoffload.pinned_fraction (now %g)",
               frac);
  } else if (!fits_in(lp->need, memlock)) {
    lp->warn = 1;
    snprintf(
        lp->advice, sizeof lp->advice,
        "beyond RLIMIT_MEMLOCK the pool falls back to pageable memory (slower "
        "host-device copies): raise it to at least %zu KiB (`ulimit -l`, LimitMEMLOCK=) or set "
        "zero_optimization.offload_optimizer.pin_memory to false",
        (lp->need + 1023) / 1024);
  }
  return ZO_OK;
}

/* One offload block's NVMe need: its directories (several: the swap files striped across them), and the
 * file system where it is tightest, with that file system's share of the bytes. */
typedef struct nvme_want {
  const char *dirs[ZO_CONFIG_MAX_NVME_PATHS];
  unsigned n;
  const char *key;
  size_t bytes;   /* of the whole block */
  const char *at; /* the directory on the tightest file system */
  size_t need, avail;
  dev_t fsid;
} nvme_want;

/* w's tightest file system: each directory holds 1/n of the bytes (rounded up, plus a stripe of
 * @stripe bytes for the round-robin's tail), directories on one file system add up. */
static void nvme_tightest(nvme_want *w, size_t stripe) {
  size_t share = w->n > 1 ? add_sat(w->bytes / w->n + (w->bytes % w->n != 0), stripe) : w->bytes;
  dev_t fs[ZO_CONFIG_MAX_NVME_PATHS];
  size_t freeb[ZO_CONFIG_MAX_NVME_PATHS];
  for (unsigned i = 0; i < w->n; i++) freeb[i] = fs_free(w->dirs[i], &fs[i]);
  double worst = 0; /* the least room left (negative: short), over the directories' file systems */
  for (unsigned i = 0; i < w->n; i++) {
    size_t need = 0;
    for (unsigned j = 0; j < w->n; j++)
      if (fs[j] == fs[i]) need = add_sat(need, share);
    const double room = (double)freeb[i] - (double)need;
    if (i == 0 || room < worst) {
      worst = room;
      w->at = w->dirs[i], w->need = need, w->avail = freeb[i], w->fsid = fs[i];
    }
  }
}

/* NVMe lines, one per offload block at its tightest file system (both blocks on one directory, or one
 * list, share a line), against statvfs f_bavail. */
static void budget_nvme(const zo_config_t *c, const zo_plan *p, zo_budget *out) {
  char a[32], b2[32];
  nvme_want want[2] = {{.key = "zero_optimization.offload_optimizer.nvme_path",
                        .bytes = p->nvme_bytes[0]},
                       {.key = "zero_optimization.offload_param.nvme_path",
                        .bytes = p->nvme_bytes[1]}};
  const size_t stripe = (size_t)c->aio.block_size;
  for (int k = 0; k < 2; k++) want[k].n = zo_config_nvme_dirs(c, k, want[k].dirs);
  if (want[0].bytes && want[1].bytes &&
      zo_config_nvme_dirs_shared(c)) { /* one swap handle holds both: one need */
    want[0].bytes = add_sat(want[0].bytes, want[1].bytes);
    want[1].bytes = 0;
  }
  zo_budget_line *ln[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    if (!want[k].bytes) continue;
    nvme_tightest(&want[k], stripe);
    if (k == 1 && ln[0] && want[0].n == 1 && want[1].n == 1 && want[1].fsid == want[0].fsid) {
      ln[0]->engine_bytes = add_sat(ln[0]->engine_bytes, want[1].need);
      ln[0]->need = add_sat(ln[0]->need, want[1].need);
      ln[1] = ln[0];
      continue;
    }
    zo_budget_line *l = ln[k] = add_line(out, ZO_TIER_NVME, want[k].at);
    l->engine_bytes = l->need = want[k].need;
    l->available = want[k].avail;
    snprintf(l->source, sizeof l->source, "statvfs f_bavail");
  }
  for (int k = 0; k < 2; k++) {
    zo_budget_line *l = ln[k];
    if (!l || (k == 1 && l == ln[0]) || fits_in(l->need, l->available)) continue;
    l->fits = 0;
    if (want[k].n > 1)
      snprintf(l->advice, sizeof l->advice,
               "the %u directories of %s each hold a share of the swap files: free %s on the file "
               "system of %.200s (it has %s), or add directories on other drives",
               want[k].n, want[k].key, hsize(a, sizeof a, l->need), want[k].at,
               hsize(b2, sizeof b2, l->available));
    else
      snprintf(l->advice, sizeof l->advice,
               "point %s at a file system with at least %s free (%.200s has %s)", want[k].key,
               hsize(a, sizeof a, l->need), want[k].at, hsize(b2, sizeof b2, l->available));
  }
}

/* The plan's bytes per tier (plan.c) against what the machine has: one line per tier, in this order. */
zo_status zo_plan_budget(const zo_engine_t *e, const zo_plan *p, const size_t app[4],
                         zo_budget *out) {
  memset(out, 0, sizeof *out);
  const size_t zero[4] = {0, 0, 0, 0};
  if (!app) app = zero;
  out->fits = 1;
  zo_budget_line *ld;
  ZO_CHECK(budget_device(e, p, app, out, &ld));
  budget_host(e, p, app, out, ld);
  ZO_CHECK(budget_pinned(e, p, app, out));
  budget_nvme(&e->cfg, p, out);
  for (int i = 0; i < out->n_lines; i++) out->fits &= out->line[i].fits;
  return ZO_OK;
}

zo_status zo_budget_check(const zo_budget *b) {
  if (!b) return zo_error_set(ZO_ERR_INVALID_ARG, "budget: NULL");
  char msg[4096];
  int n = 0;
  for (int i = 0; i < b->n_lines; i++) {
    const zo_budget_line *l = &b->line[i];
    char a[32], v[32];
    if (l->warn)
      zo_warn("start-up budget: pinned memory %s over %s: %s", hsize(a, sizeof a, l->need),
              l->source, l->advice);
    if (l->fits || n >= (int)sizeof msg - 1) continue;
    if (l->need == SIZE_MAX)
      snprintf(a, sizeof a, "more than size_t holds"); /* saturated (plan.c, add_sat) */
    else
      hsize(a, sizeof a, l->need);
    n += snprintf(msg + n, sizeof msg - n, "%s%s%s%s: needs %zu bytes (%s), %s available (%s): %s",
                  n ? " | " : "", zo_tier_name(l->tier),
                  l->tier == ZO_TIER_NVME ? " space at " : " memory",
                  l->tier == ZO_TIER_NVME ? l->where : "", l->need, a,
                  hsize(v, sizeof v, l->available), l->source, l->advice);
  }
  if (!n) return ZO_OK;
  return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "start-up budget: this configuration does not fit: %s",
                      msg);
}

void zo_budget_print(const zo_budget *b, void *fp) {
  FILE *f = fp ? fp : stdout;
  if (!b) return;
  fprintf(f, "%-7s %20s %20s %20s %20s  %-6s %s\n", "tier", "need_bytes", "engine_bytes",
          "caller_bytes", "available_bytes", "fits", "where (available from)");
  for (int i = 0; i < b->n_lines; i++) {
    const zo_budget_line *l = &b->line[i];
    char av[32];
    if (l->available == SIZE_MAX)
      snprintf(av, sizeof av, "unlimited");
    else
      snprintf(av, sizeof av, "%zu", l->available);
    fprintf(f, "%-7s %20zu %20zu %20zu %20s  %-6s %s (%s)\n", zo_tier_name(l->tier), l->need,
            l->engine_bytes, l->app_bytes, av,
            !l->fits  ? "NO"
            : l->warn ? "warn"
                      : "yes",
            l->where, l->source);
  }
  for (int i = 0; i < b->n_lines; i++)
    if (!b->line[i].fits || b->line[i].warn)
      fprintf(f, "  %s: %s\n", zo_tier_name(b->line[i].tier), b->line[i].advice);
}
