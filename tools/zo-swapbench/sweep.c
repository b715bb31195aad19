/*
 * sweep.c - zo-swapbench's sweep: every engine at every (block size, queue depth, op), repetitions
 * interleaved, on each --path alone and then striped across all of them, results appended to g_res;
 * the progress line; then the device read pass. Not the report.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "progress.h"
#include "stats.h"
#include "swapbench.h"

bench_target g_targets[SB_MAX_PATHS + 1];
int g_ntargets;

static result *res_add(void) {
  if (g_nres == g_capres) {
    size_t cap = g_capres ? 2 * g_capres : 64;
    result *r = realloc(g_res, cap * sizeof *r);
    if (!r) {
      fprintf(stderr, "zo-swapbench: out of memory\n");
      exit(2);
    }
    g_res = r;
    g_capres = cap;
  }
  result *r = &g_res[g_nres++];
  memset(r, 0, sizeof *r);
  return r;
}

/* ---- progress: the tools' progress line (tools/common/progress.h), one line every SB_PROGRESS_EVERY_S on a pipe */

#define SB_PROGRESS_EVERY_S 10.0

static zo_tool_progress g_prog;
static int64_t g_step; /* measurements (and file fills) started so far */

static void progress(const char *what) { zo_tool_progress_update(&g_prog, g_step, what); }

/* A line of its own on stderr: the bar, when one is drawn, is cleared first. */
#define sb_note(...) (zo_tool_progress_end(&g_prog), fprintf(stderr, __VA_ARGS__))

/* ---- the sweep ---------------------------------------------------------------------------------------- */

/* One measurement slot: the repetitions of one engine at one setting. */
typedef struct slot {
  size_t res; /* index into g_res */
  meas m[SB_MAX_REPS];
  int n;
  int failed;
} slot;

static size_t slot_new(int target, int op, int engine, uint64_t bs, uint64_t used, unsigned qd,
                       variant v) {
  result *r = res_add();
  r->target = target;
  r->op = op;
  r->engine = engine;
  r->block_size = bs;
  r->block_used = used;
  r->queue_depth = qd;
  r->regbuf = v.regbuf;
  r->sqpoll = v.sqpoll;
  return g_nres - 1;
}

/* The median of the repetitions' figure at byte offset @field of meas (those >= 0); -1 when none. */
static double median_of(const slot *sl, size_t field) {
  double v[SB_MAX_REPS];
  size_t n = 0;
  for (int i = 0; i < sl->n; i++) {
    double x = *(const double *)((const char *)&sl->m[i] + field);
    if (x >= 0) v[n++] = x;
  }
  return zo_tool_median(v, n);
}

static void slot_finish(slot *sl) {
  result *r = &g_res[sl->res];
  r->reps = sl->n;
  r->ok = !sl->failed && sl->n > 0;
  r->skipped = !sl->failed && sl->n == 0;
  if (!r->ok) return;
  double cpg[SB_MAX_REPS];
  size_t ncpg = 0;
  r->gbps_min = INFINITY;
  for (int i = 0; i < sl->n; i++) {
    const meas *m = &sl->m[i];
    if (m->gbps < r->gbps_min) r->gbps_min = m->gbps;
    if (m->gbps > r->gbps_max) r->gbps_max = m->gbps;
    if (m->cpu_s >= 0 && m->moved) cpg[ncpg++] = m->cpu_s / ((double)m->moved / 1e9);
  }
  r->gbps = median_of(sl, offsetof(meas, gbps));
  r->iops = median_of(sl, offsetof(meas, iops));
  r->p50_us = median_of(sl, offsetof(meas, p50_us));
  r->p99_us = median_of(sl, offsetof(meas, p99_us));
  r->p999_us = median_of(sl, offsetof(meas, p999_us));
  r->cpu_s_per_gb = zo_tool_median(cpg, ncpg);
  const meas *mid = &sl->m[0]; /* the repetition nearest the median, for its seconds and bytes */
  for (int i = 1; i < sl->n; i++)
    if (fabs(sl->m[i].gbps - r->gbps) < fabs(mid->gbps - r->gbps)) mid = &sl->m[i];
  r->seconds = mid->sec;
  r->bytes = mid->moved;
}

/* Say what actually ran for a zoffload slot: the library warns and goes on without an option the
 * kernel refuses. */
static void zo_slot_describe(slot *sl, zo_bench *zb, variant v) {
  result *r = &g_res[sl->res];
  if (!sl->failed) snprintf(r->note, sizeof r->note, "%s", zo_swap_describe(zb->sw));
#if SB_HAVE_REGBUF
  if (v.regbuf > 0 && zo_swap_n_registered_buffers(zb->sw) == 0) r->regbuf = 0;
#endif
#if SB_HAVE_SQPOLL
  if (v.sqpoll > 0 && !zo_swap_uses_sqpoll(zb->sw)) r->sqpoll = 0;
#endif
  (void)v;
}

static double cpu_seconds(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

/* One measurement for the engine of @r (a zoffload variant on @zb, pread or fio on @path) at its block size,
 * queue depth and op: 0 with *m filled in, or -1 with r->note set. CPU time: this process's (its I/O
 * threads and io_uring workers included) for zoffload and pread, fio's job's own for fio. */
static int measure(const opts *o, result *r, zo_bench *zb, const char *path, int direct, meas *m) {
  int rc, is_write = r->op == OP_WRITE;
  *m = (meas){.iops = -1, .p50_us = -1, .p99_us = -1, .p999_us = -1, .cpu_s = -1};
  double c0 = cpu_seconds();
  if (r->engine == ENG_ZO) {
    rc = zo_transfer(zb, is_write, o->bytes, o->max_sec, m);
    if (rc) snprintf(r->note, sizeof r->note, "%s", zo_last_error());
  } else if (r->engine == ENG_PREAD) {
    rc = pread_transfer(path, direct, is_write, o->bytes, o->max_sec, r->block_size, r->queue_depth,
                        m, r->note, sizeof r->note);
  } else {
    variant v = {r->regbuf, r->sqpoll};
    return fio_transfer(path, is_write, o->size, o->bytes, o->max_sec, r->block_size,
                        r->queue_depth, v, m, r->note, sizeof r->note);
  }
  double c1 = cpu_seconds();
  if (c0 >= 0 && c1 >= 0) m->cpu_s = c1 - c0;
  return rc;
}

/* The ring variants swept: registered buffers and SQPOLL, each off and on where the API has them. */
static int variants(variant vars[4]) {
  int nv = 0;
  for (int rb = SB_HAVE_REGBUF ? 0 : -1; rb <= (SB_HAVE_REGBUF ? 1 : -1); rb++)
    for (int sq = SB_HAVE_SQPOLL ? 0 : -1; sq <= (SB_HAVE_SQPOLL ? 1 : -1); sq++)
      vars[nv++] = (variant){rb, sq};
  return nv;
}

/* Engines measured on target @t: the zoffload variants, and on one path pread and fio beside them. */
static int n_engines(const opts *o, const bench_target *t, int nv, int use_fio) {
  if (t->striped) return nv;
  return nv + 1 + (use_fio ? (o->fio_variants ? nv : 1) : 0);
}

/*
 * One target (a path, or the striped set): one swap handle per ring variant (each its own rank, so they
 * can be open together) with its own preallocated file, written once untimed, kept for the whole sweep;
 * zo_swap_set_queue() moves every handle to each (block size, queue depth). Then, per op (write first,
 * so reads see written blocks) and per repetition, every engine runs once in turn - the zoffload
 * variants, pread/pwrite, fio - the order rotated by one each repetition, so no engine always runs
 * right after the same neighbour (a write burst the host is still flushing, a poller going to sleep).
 * Interleaving the repetitions spreads the noise of a shared machine over all engines alike. Each
 * measurement moves the first o->bytes bytes of the file, or what o->max_sec allows. pread and fio use
 * the file of the first variant. The device pass runs after the first target.
 */
static int sweep_target(const opts *o, int ti, int use_fio) {
  const bench_target *t = &g_targets[ti];
  variant vars[4];
  int nv = variants(vars);
  int n_eng = n_engines(o, t, nv, use_fio);
  unsigned qd_max = 0;
  for (int i = 0; i < o->n_qd; i++)
    if (o->qd[i] > qd_max) qd_max = o->qd[i];
  int failures = 0;
  char what[96];
  zo_bench zb[4];
  memset(zb, 0, sizeof zb);
  for (int vi = 0; vi < nv && !g_stop; vi++) {
    snprintf(what, sizeof what, "%s: fill file regbuf=%s sqpoll=%s", t->label, tri(vars[vi].regbuf),
             tri(vars[vi].sqpoll));
    progress(what);
    if (zo_bench_open(&zb[vi], o, t, qd_max, vars[vi], SB_RANK - vi) != 0) {
      for (int k = 0; k < nv; k++) zo_bench_close(&zb[k]);
      return -1;
    }
    g_step++;
  }
  const char *path = g_stop ? "" : zo_swap_file_path(zb[0].f);
  int direct = g_stop ? 1 : zo_swap_is_direct(zb[0].sw);
  for (int bi = 0; bi < o->n_bs && !g_stop; bi++) {
    for (int qi = 0; qi < o->n_qd && !g_stop; qi++) {
      uint64_t bs = o->bs[bi];
      unsigned qd = o->qd[qi];
      char bss[32];
      fmt_size(bs, bss, sizeof bss);
      for (int vi = 0; vi < nv; vi++) {
        if (zo_swap_set_queue(zb[vi].sw, (size_t)bs, qd) != ZO_OK) {
          fprintf(stderr, "\nzo-swapbench: set_queue bs=%s qd=%u: %s\n", bss, qd, zo_last_error());
          for (int k = 0; k < nv; k++) zo_bench_close(&zb[k]);
          return -1;
        }
      }
      for (int op = OP_WRITE; op >= OP_READ && !g_stop; op--) {
        if (!o->do_op[op]) continue;
        static slot sl[12];
        memset(sl, 0, sizeof sl);
        for (int k = 0; k < n_eng; k++) {
          if (k < nv) {
            /* a piece is at most one stripe */
            uint64_t used = zo_swap_block_size(zb[k].sw);
            if (t->striped && used > o->stripe) used = o->stripe;
            sl[k].res = slot_new(ti, op, ENG_ZO, bs, used, qd, vars[k]);
          } else if (k == nv) {
            sl[k].res = slot_new(ti, op, ENG_PREAD, bs, bs, qd, (variant){-1, -1});
          } else {
            sl[k].res = slot_new(ti, op, ENG_FIO, bs, bs, qd,
                                 o->fio_variants ? vars[k - nv - 1] : (variant){0, 0});
          }
        }
        for (int rep = 0; rep < o->reps && !g_stop; rep++) {
          for (int kk = 0; kk < n_eng && !g_stop; kk++) {
            int k = (kk + rep) % n_eng;
            result *r = &g_res[sl[k].res];
            snprintf(what, sizeof what, "%s: %s %s bs=%s qd=%u rep %d", t->label,
                     eng_name[r->engine], op_name[op], bss, qd, rep + 1);
            progress(what);
            g_step++;
            if (sl[k].failed) continue;
            meas m;
            int rc = measure(o, r, k < nv ? &zb[k] : NULL, path, direct, &m);
            if (rc != 0) {
              sb_note("zo-swapbench: %s %s bs=%" PRIu64 " qd=%u: %s\n", eng_name[r->engine],
                      op_name[op], bs, qd, r->note);
              sl[k].failed = 1;
              continue;
            }
            if (sl[k].n < SB_MAX_REPS) sl[k].m[sl[k].n++] = m;
          }
        }
        for (int k = 0; k < n_eng; k++) {
          slot_finish(&sl[k]);
          if (k < nv) zo_slot_describe(&sl[k], &zb[k], vars[k]);
          if (!g_res[sl[k].res].ok && !g_res[sl[k].res].skipped) failures++;
        }
      }
    }
  }
  if (ti == 0 && !g_stop && nv > 0) {
    progress("nvme -> pinned -> device read pass");
    if (device_pass(&zb[0], o, &g_pass) != 0 && !g_stop) {
      sb_note("zo-swapbench: nvme -> pinned -> device read pass: %s\n", g_pass.note);
      failures++;
    }
  }
  for (int vi = 0; vi < nv; vi++) zo_bench_close(&zb[vi]);
  return failures;
}

int run_sweep(const opts *o, int use_fio) {
  variant vars[4];
  int nv = variants(vars);
  int nops = o->do_op[OP_READ] + o->do_op[OP_WRITE];
  int64_t total = 0;
  for (int ti = 0; ti < g_ntargets; ti++)
    total += nv + (int64_t)o->n_bs * o->n_qd * nops * o->reps *
                      n_engines(o, &g_targets[ti], nv, use_fio);
  g_step = 0;
  zo_tool_progress_start(&g_prog, "zo-swapbench", "measurements", total, SB_PROGRESS_EVERY_S);
  int failures = 0;
  for (int ti = 0; ti < g_ntargets && !g_stop; ti++) {
    int f = sweep_target(o, ti, use_fio);
    if (f < 0) {
      zo_tool_progress_end(&g_prog);
      return -1;
    }
    failures += f;
  }
  zo_tool_progress_end(&g_prog);
  char el[32];
  fprintf(stderr, "zo-swapbench: %" PRId64 " of %" PRId64 " measurements in %s\n", g_step,
          g_prog.total, zo_tool_duration(zo_clock_s() - g_prog.t0, el, sizeof el));
  return failures;
}
