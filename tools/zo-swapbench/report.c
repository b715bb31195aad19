/*
 * report.c - zo-swapbench's report of the sweep: the tables, the comparison with fio and pread, the
 * striping summary, the best settings and the "aio" block, the JSON file and the gnuplot chart.
 * Reads g_res; measures nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "swapbench.h"

void fmt_size(uint64_t b, char *out, size_t n) {
  if (b >= GiB && b % GiB == 0)
    snprintf(out, n, "%" PRIu64 "G", b / GiB);
  else if (b >= MiB && b % MiB == 0)
    snprintf(out, n, "%" PRIu64 "M", b / MiB);
  else if (b >= KiB && b % KiB == 0)
    snprintf(out, n, "%" PRIu64 "K", b / KiB);
  else
    snprintf(out, n, "%" PRIu64, b);
}

const char *tri(int v) { return v < 0 ? "n/a" : v ? "on" : "off"; }

/* ---- reporting ------------------------------------------------------------------------------------------ */

/* The fastest successful result of target @t, @op and @engine at block size @bs and queue depth
 * @qd (0: any); NULL when none. */
static const result *find_t(int t, int op, int engine, uint64_t bs, unsigned qd) {
  const result *best = NULL;
  for (size_t i = 0; i < g_nres; i++) {
    const result *r = &g_res[i];
    if (r->target == t && r->op == op && r->engine == engine && (!bs || r->block_size == bs) &&
        (!qd || r->queue_depth == qd) && r->ok && (!best || r->gbps > best->gbps))
      best = r;
  }
  return best;
}

static const result *find(int op, int engine, uint64_t bs, unsigned qd) {
  return find_t(0, op, engine, bs, qd);
}

const result *best_of_t(int t, int op, int engine) { return find_t(t, op, engine, 0, 0); }

const result *best_of(int op, int engine) { return best_of_t(0, op, engine); }

/* zoffload's fastest median GB/s for @op over the single directories (0: none measured). */
static double fastest_single(int op) {
  double single = 0;
  for (int t = 0; t < g_ntargets; t++) {
    const result *r = g_targets[t].striped ? NULL : best_of_t(t, op, ENG_ZO);
    if (r && r->gbps > single) single = r->gbps;
  }
  return single;
}

/* "zoffload", "zoffload+reg+sqpoll", "pread", "fio+reg": the engine and the ring options it ran with. */
static void engine_label(const result *r, char *out, size_t n) {
  snprintf(out, n, "%s%s%s", eng_name[r->engine], r->regbuf > 0 ? "+reg" : "",
           r->sqpoll > 0 ? "+sqpoll" : "");
}

/* A figure, or "-" when not measured (< 0). */
static void fmt_fig(double v, const char *fmt, char *out, size_t n) {
  if (v < 0)
    snprintf(out, n, "-");
  else
    snprintf(out, n, fmt, v);
}

static void print_row(const result *r) {
  char bss[32], eng[32], g[16], sp[32], io[16], p50[16], p99[16], p999[16], cpu[16];
  fmt_size(r->block_size, bss, sizeof bss);
  engine_label(r, eng, sizeof eng);
  if (r->ok) {
    snprintf(g, sizeof g, "%.3f", r->gbps);
    snprintf(sp, sizeof sp, "%.3f-%.3f", r->gbps_min, r->gbps_max);
  } else {
    snprintf(g, sizeof g, "error");
    snprintf(sp, sizeof sp, "-");
  }
  fmt_fig(r->ok ? r->iops : -1, "%.0f", io, sizeof io);
  fmt_fig(r->ok ? r->p50_us : -1, "%.0f", p50, sizeof p50);
  fmt_fig(r->ok ? r->p99_us : -1, "%.0f", p99, sizeof p99);
  fmt_fig(r->ok ? r->p999_us : -1, "%.0f", p999, sizeof p999);
  fmt_fig(r->ok ? r->cpu_s_per_gb : -1, "%.3f", cpu, sizeof cpu);
  printf("%-5s %5s %4u %-19s %7s %13s %8s %8s %8s %8s %8s\n", op_name[r->op], bss, r->queue_depth,
         eng, g, sp, io, p50, p99, p999, cpu);
}

static void print_table(const opts *o) {
  for (int t = 0; t < g_ntargets; t++) {
    int any = 0;
    for (size_t i = 0; i < g_nres; i++) any |= g_res[i].target == t && !g_res[i].skipped;
    if (!any) continue;
    const bench_target *bt = &g_targets[t];
    printf("\n%s", bt->striped ? "Striped across " : "Directory ");
    for (int i = 0; i < bt->n_paths; i++) printf("%s%s", i ? ", " : "", bt->paths[i]);
    if (bt->striped) {
      char sts[32];
      fmt_size(o->stripe, sts, sizeof sts);
      printf(" (%s stripes, queue depth per directory; zoffload only)", sts);
    }
    printf(":\n%-5s %5s %4s %-19s %7s %13s %8s %8s %8s %8s %8s\n", "op", "bs", "qd", "engine",
           "GB/s", "min-max", "IOPS", "p50 us", "p99 us", "p99.9 us", "CPU s/GB");
    printf("%.*s\n", 118,
           "-------------------------------------------------------------------"
           "---------------------------------------------------");
    for (int op = OP_READ; op <= OP_WRITE; op++) {
      if (!o->do_op[op]) continue;
      for (size_t i = 0; i < g_nres; i++)
        if (g_res[i].target == t && g_res[i].op == op && !g_res[i].skipped) print_row(&g_res[i]);
    }
  }
  char lim[64] = "no time limit";
  if (o->max_sec > 0) snprintf(lim, sizeof lim, "at most %.2f s", o->max_sec);
  printf(
      "(GB/s = 1e9 bytes/s, the median of %s%d repetition%s and their min-max; each moves the first\n"
      " %" PRIu64 " bytes of a %" PRIu64 "-byte file, %s; O_DIRECT, page cache bypassed.\n"
      " IOPS and latency: requests of the block size, submit to completion (a striped piece is at\n"
      " most one stripe). CPU s/GB: CPU seconds per 1e9 bytes moved.)\n",
      g_stop ? "up to " : "", o->reps, o->reps == 1 ? "" : "s", o->bytes, o->size, lim);
}

/* One comparison of zoffload against another engine, for the report and the JSON. */
typedef struct comparison {
  int op;
  const char *against; /* "fio", "pread" */
  const result *zo, *other;
} comparison;

/* zoffload against fio at fio's fastest setting (the same job), and its best against pread's best. */
static int compare(const opts *o, int use_fio, comparison *c) {
  int n = 0;
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *fb = use_fio ? best_of(op, ENG_FIO) : NULL;
    if (fb) c[n++] = (comparison){op, "fio", find(op, ENG_ZO, fb->block_size, fb->queue_depth), fb};
    const result *pb = best_of(op, ENG_PREAD), *zb = best_of(op, ENG_ZO);
    if (pb && zb) c[n++] = (comparison){op, "pread", zb, pb};
  }
  return n;
}

static void print_compare(const opts *o, int use_fio, const comparison *c, int nc) {
  if (!nc) return;
  if (use_fio)
    printf(
        "\nCompared with fio (the same job: file, block size, queue depth, io_uring, O_DIRECT) at "
        "fio's fastest setting, and with pread/pwrite threads at their fastest:\n");
  else
    printf("\nCompared with pread/pwrite threads at their fastest:\n");
  for (int i = 0; i < nc; i++) {
    const result *z = c[i].zo, *x = c[i].other;
    char bss[32], zbs[32];
    fmt_size(x->block_size, bss, sizeof bss);
    if (!z) {
      printf("  %-5s vs %-5s bs=%s qd=%u: zoffload did not complete this setting\n",
             op_name[c[i].op], c[i].against, bss, x->queue_depth);
      continue;
    }
    fmt_size(z->block_size, zbs, sizeof zbs);
    printf("  %-5s vs %-5s zoffload %.3f GB/s (bs=%s qd=%u) vs %.3f (bs=%s qd=%u): %.0f%%",
           op_name[c[i].op], c[i].against, z->gbps, zbs, z->queue_depth, x->gbps, bss,
           x->queue_depth, 100 * z->gbps / x->gbps);
    if (z->p99_us >= 0 && x->p99_us >= 0) printf("; p99 %.0f vs %.0f us", z->p99_us, x->p99_us);
    if (z->cpu_s_per_gb >= 0 && x->cpu_s_per_gb >= 0)
      printf("; CPU %.3f vs %.3f s/GB", z->cpu_s_per_gb, x->cpu_s_per_gb);
    printf("\n");
  }
  if (!use_fio)
    printf("  (fio %s)\n",
           o->no_fio ? "not run: --no-fio" : "is not installed: apt-get install fio");
}

/* Each directory alone against the files striped across all: zoffload's fastest median per op. */
static void print_striping(const opts *o) {
  if (g_ntargets < 2) return;
  printf("\nStriping (zoffload's fastest setting on each; median GB/s):\n");
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const double single = fastest_single(op);
    for (int t = 0; t < g_ntargets; t++) {
      const result *r = best_of_t(t, op, ENG_ZO);
      printf("  %-5s %-28.28s ", op_name[op], g_targets[t].label);
      if (!r) {
        printf("-\n");
        continue;
      }
      char bss[32];
      fmt_size(r->block_size, bss, sizeof bss);
      printf("%.3f GB/s (%.3f-%.3f) at bs=%s qd=%u", r->gbps, r->gbps_min, r->gbps_max, bss,
             r->queue_depth);
      if (g_targets[t].striped && single > 0)
        printf(": %.2fx the fastest single directory", r->gbps / single);
      printf("\n");
    }
  }
}

static void print_best(const opts *o, int use_fio) {
  printf("\nBest settings%s:\n", g_ntargets > 1 ? " (first directory)" : "");
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *z = best_of(op, ENG_ZO);
    const result *p = best_of(op, ENG_PREAD);
    const result *f = use_fio ? best_of(op, ENG_FIO) : NULL;
    if (!z && !p && !f) continue;
    char b1[32] = "-", b2[32] = "-", b3[32] = "-";
    if (z) fmt_size(z->block_size, b1, sizeof b1);
    if (p) fmt_size(p->block_size, b2, sizeof b2);
    if (f) fmt_size(f->block_size, b3, sizeof b3);
    printf("  %-5s zoffload %.3f GB/s (bs=%s qd=%u regbuf=%s sqpoll=%s)", op_name[op],
           z ? z->gbps : 0, b1, z ? z->queue_depth : 0, tri(z ? z->regbuf : -1),
           tri(z ? z->sqpoll : -1));
    printf("; pread %.3f GB/s (bs=%s qd=%u)", p ? p->gbps : 0, b2, p ? p->queue_depth : 0);
    if (use_fio)
      printf("; fio %.3f GB/s (bs=%s qd=%u)", f ? f->gbps : 0, b3, f ? f->queue_depth : 0);
    printf("\n");
  }
  /* The setting to paste: the best read setting when reads were swept (the optimizer state is read
   * before it is written each step and both use the same handle), else the best write. */
  const result *zr = o->do_op[OP_READ] ? best_of(OP_READ, ENG_ZO) : NULL;
  const result *zw = o->do_op[OP_WRITE] ? best_of(OP_WRITE, ENG_ZO) : NULL;
  const result *pick = zr ? zr : zw;
  if (zr && zw && (zr->block_size != zw->block_size || zr->queue_depth != zw->queue_depth)) {
    /* One handle serves both directions: pick the setting with the best sum of read and write GB/s. */
    double best_sum = 0;
    for (size_t i = 0; i < g_nres; i++) {
      const result *r = &g_res[i];
      if (r->target != 0 || r->engine != ENG_ZO || r->op != OP_READ || !r->ok) continue;
      const result *w = find(OP_WRITE, ENG_ZO, r->block_size, r->queue_depth);
      if (w && r->gbps + w->gbps > best_sum) {
        best_sum = r->gbps + w->gbps;
        pick = r;
      }
    }
  }
  if (pick) {
    printf("\nPaste into the config (%s):\n",
           zr && zw ? "best combined read+write setting" : "best setting");
    printf("  \"aio\": {\"block_size\": %" PRIu64 ", \"queue_depth\": %u}\n", pick->block_size,
           pick->queue_depth);
    const result *pr = find(OP_READ, ENG_ZO, pick->block_size, pick->queue_depth);
    const result *pw = find(OP_WRITE, ENG_ZO, pick->block_size, pick->queue_depth);
    printf(
        "  (at that setting the fastest ring options were: read regbuf=%s sqpoll=%s, write regbuf=%s "
        "sqpoll=%s)\n",
        tri(pr ? pr->regbuf : -1), tri(pr ? pr->sqpoll : -1), tri(pw ? pw->regbuf : -1),
        tri(pw ? pw->sqpoll : -1));
    if (g_ntargets > 1) {
      /* the striped set against the fastest single directory, in the op the setting was picked for */
      const int op = zr ? OP_READ : OP_WRITE;
      const result *st = best_of_t(g_ntargets - 1, op, ENG_ZO);
      const double single = fastest_single(op);
      if (st && single > 0 && st->gbps >= 1.1 * single) {
        printf(
            "  and to stripe the swap files across the directories (%s %.2fx one):\n  \"nvme_path\": [",
            op_name[op], st->gbps / single);
        for (int i = 0; i < o->n_paths; i++) printf("%s\"%s\"", i ? ", " : "", o->paths[i]);
        printf("]\n");
      } else if (st && single > 0) {
        printf("  striping across the directories gave %.2fx one directory's %s here: keep one\n",
               st->gbps / single, op_name[op]);
      }
      if (st && pick->block_size != o->stripe) {
        char bss[32], sts[32];
        fmt_size(pick->block_size, bss, sizeof bss);
        fmt_size(o->stripe, sts, sizeof sts);
        printf("  (the engine stripes in aio.block_size pieces, %s; this run striped in %s: "
               "--stripe-size %s measures that)\n",
               bss, sts, bss);
      }
    }
  }
}

static json_t *res_json(const result *r) {
  json_t *j = json_object();
  json_object_set_new(j, "path",
                      json_string(g_targets[r->target].striped ? "striped"
                                                               : g_targets[r->target].paths[0]));
  json_object_set_new(j, "op", json_string(op_name[r->op]));
  json_object_set_new(j, "engine", json_string(eng_name[r->engine]));
  json_object_set_new(j, "block_size", json_integer((json_int_t)r->block_size));
  json_object_set_new(j, "block_size_used", json_integer((json_int_t)r->block_used));
  json_object_set_new(j, "queue_depth", json_integer(r->queue_depth));
  json_object_set_new(j, "registered_buffers",
                      r->regbuf < 0 ? json_string("n/a") : json_boolean(r->regbuf));
  json_object_set_new(j, "sqpoll", r->sqpoll < 0 ? json_string("n/a") : json_boolean(r->sqpoll));
  json_object_set_new(j, "gbps", json_real(r->gbps));
  json_object_set_new(j, "gbps_min", json_real(r->gbps_min));
  json_object_set_new(j, "gbps_max", json_real(r->gbps_max));
  json_object_set_new(j, "iops", r->iops >= 0 ? json_real(r->iops) : json_null());
  json_t *lat = json_object();
  json_object_set_new(lat, "p50", r->p50_us >= 0 ? json_real(r->p50_us) : json_null());
  json_object_set_new(lat, "p99", r->p99_us >= 0 ? json_real(r->p99_us) : json_null());
  json_object_set_new(lat, "p99_9", r->p999_us >= 0 ? json_real(r->p999_us) : json_null());
  json_object_set_new(j, "latency_us", lat);
  json_object_set_new(j, "cpu_s_per_gb",
                      r->cpu_s_per_gb >= 0 ? json_real(r->cpu_s_per_gb) : json_null());
  json_object_set_new(j, "seconds", json_real(r->seconds));
  json_object_set_new(j, "bytes", json_integer((json_int_t)r->bytes));
  json_object_set_new(j, "reps", json_integer(r->reps));
  json_object_set_new(j, "ok", json_boolean(r->ok));
  if (r->note[0]) json_object_set_new(j, "note", json_string(r->note));
  return j;
}

static int write_json(const opts *o, int use_fio, const comparison *c, int nc) {
  json_t *root = json_object();
  json_t *cfg = json_object();
  json_object_set_new(cfg, "path", json_string(o->paths[0]));
  json_t *paths = json_array();
  for (int i = 0; i < o->n_paths; i++) json_array_append_new(paths, json_string(o->paths[i]));
  json_object_set_new(cfg, "paths", paths);
  json_object_set_new(cfg, "stripe_size", json_integer((json_int_t)o->stripe));
  json_object_set_new(cfg, "file_size", json_integer((json_int_t)o->size));
  json_object_set_new(cfg, "bytes_per_measurement", json_integer((json_int_t)o->bytes));
  json_object_set_new(cfg, "max_seconds_per_measurement", json_real(o->max_sec));
  json_object_set_new(cfg, "reps", json_integer(o->reps));
  json_object_set_new(cfg, "quick", json_boolean(o->quick));
  json_object_set_new(cfg, "fio", json_boolean(use_fio));
  json_object_set_new(cfg, "fio_variants", json_boolean(use_fio && o->fio_variants));
  json_object_set_new(cfg, "registered_buffers_available", json_boolean(SB_HAVE_REGBUF));
  json_object_set_new(cfg, "sqpoll_available", json_boolean(SB_HAVE_SQPOLL));
  json_object_set_new(cfg, "device", json_string(zo_device_kind_name(o->device)));
  json_object_set_new(root, "config", cfg);
  json_t *arr = json_array();
  for (size_t i = 0; i < g_nres; i++)
    if (!g_res[i].skipped) json_array_append_new(arr, res_json(&g_res[i]));
  json_object_set_new(root, "results", arr);
  json_t *best = json_object();
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *z = best_of(op, ENG_ZO);
    if (!z) continue;
    json_t *b = res_json(z);
    const result *p = find(op, ENG_PREAD, z->block_size, z->queue_depth);
    const result *f = use_fio ? find(op, ENG_FIO, z->block_size, z->queue_depth) : NULL;
    const result *pb = best_of(op, ENG_PREAD);
    const result *fb = use_fio ? best_of(op, ENG_FIO) : NULL;
    if (p) json_object_set_new(b, "pread_gbps_same_setting", json_real(p->gbps));
    if (f) json_object_set_new(b, "fio_gbps_same_setting", json_real(f->gbps));
    if (pb) json_object_set_new(b, "pread_best", res_json(pb));
    if (fb) json_object_set_new(b, "fio_best", res_json(fb));
    json_t *aio = json_object();
    json_object_set_new(aio, "block_size", json_integer((json_int_t)z->block_size));
    json_object_set_new(aio, "queue_depth", json_integer(z->queue_depth));
    json_object_set_new(b, "aio", aio);
    json_object_set_new(best, op_name[op], b);
  }
  json_object_set_new(root, "best", best);
  json_t *cj = json_array();
  for (int i = 0; i < nc; i++) {
    if (!c[i].zo) continue;
    json_t *x = json_object();
    json_object_set_new(x, "op", json_string(op_name[c[i].op]));
    json_object_set_new(x, "against", json_string(c[i].against));
    json_object_set_new(x, "zoffload", res_json(c[i].zo));
    json_object_set_new(x, "other", res_json(c[i].other));
    json_object_set_new(x, "ratio", json_real(c[i].zo->gbps / c[i].other->gbps));
    json_array_append_new(cj, x);
  }
  json_object_set_new(root, "comparison", cj);
  if (g_ntargets > 1) {
    json_t *sj = json_object();
    for (int op = OP_READ; op <= OP_WRITE; op++) {
      if (!o->do_op[op]) continue;
      json_t *per = json_array();
      for (int t = 0; t < g_ntargets; t++) {
        const result *r = best_of_t(t, op, ENG_ZO);
        if (r) json_array_append_new(per, res_json(r));
      }
      json_object_set_new(sj, op_name[op], per);
    }
    json_object_set_new(root, "striping", sj);
  }
  json_t *dj = json_object();
  json_object_set_new(dj, "kind", json_string(zo_device_kind_name(o->device)));
  json_object_set_new(dj, "name", json_string(g_dev ? zo_device_name(g_dev) : "none"));
  json_object_set_new(root, "device", dj);
  json_object_set_new(root, "link_limit", linkbench_json(&g_link));
  json_object_set_new(root, "nvme_to_device", device_pass_json());
  int rc = json_dump_file(root, o->json, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (rc != 0) {
    fprintf(stderr, "zo-swapbench: cannot write '%s': %s\n", o->json, strerror(errno));
    return -1;
  }
  printf("\nWrote %s\n", o->json);
  return 0;
}

/* gnuplot: one panel per op, GB/s against queue depth, one line per block size; zoffload solid (its
 * best ring variant at each point), fio dashed, pread dotted. */
static int write_plot(const opts *o, int use_fio) {
  char gp[PATH_MAX + 8];
  snprintf(gp, sizeof gp, "%s.gp", o->plot);
  FILE *f = fopen(gp, "w");
  if (!f) {
    fprintf(stderr, "zo-swapbench: cannot write '%s': %s\n", gp, strerror(errno));
    return -1;
  }
  int nops = o->do_op[0] + o->do_op[1];
  int cairo = system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0;
  fprintf(f, "# written by zo-swapbench; run: gnuplot '%s'\n", gp);
  fprintf(f, "set terminal %s size %d,520\nset output '%s'\n", cairo ? "pngcairo" : "png",
          640 * nops, o->plot);
  fprintf(
      f,
      "set logscale x 2\nset xlabel 'queue depth'\nset ylabel 'GB/s'\nset grid\nset key outside right\n");
  fprintf(f, "set multiplot layout 1,%d title 'zo-swapbench: %s, file %" PRIu64 " bytes'\n", nops,
          o->paths[0], o->size);
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    fprintf(f, "$%s << EOD\n", op_name[op]);
    /* Columns: qd zoffload pread fio; one block (two blank lines apart) per block size. */
    for (int bi = 0; bi < o->n_bs; bi++) {
      for (int qi = 0; qi < o->n_qd; qi++) {
        const result *z = find(op, ENG_ZO, o->bs[bi], o->qd[qi]);
        const result *p = find(op, ENG_PREAD, o->bs[bi], o->qd[qi]);
        const result *x = use_fio ? find(op, ENG_FIO, o->bs[bi], o->qd[qi]) : NULL;
        fprintf(f, "%u ", o->qd[qi]);
        if (z)
          fprintf(f, "%.4f ", z->gbps);
        else
          fprintf(f, "NaN ");
        if (p)
          fprintf(f, "%.4f ", p->gbps);
        else
          fprintf(f, "NaN ");
        if (x)
          fprintf(f, "%.4f\n", x->gbps);
        else
          fprintf(f, "NaN\n");
      }
      fprintf(f, "\n\n");
    }
    fprintf(f, "EOD\nset title '%s'\nplot ", op_name[op]);
    for (int bi = 0; bi < o->n_bs; bi++) {
      char bss[32];
      fmt_size(o->bs[bi], bss, sizeof bss);
      fprintf(f, "%s$%s index %d using 1:2 with linespoints lc %d dt 1 title 'zoffload %s'",
              bi ? ", \\\n  " : "", op_name[op], bi, bi + 1, bss);
      if (use_fio)
        fprintf(f, ", \\\n  $%s index %d using 1:4 with lines lc %d dt 2 title 'fio %s'",
                op_name[op], bi, bi + 1, bss);
      fprintf(f, ", \\\n  $%s index %d using 1:3 with lines lc %d dt 3 title 'pread %s'",
              op_name[op], bi, bi + 1, bss);
    }
    fprintf(f, "\n");
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);
  if (!have_program("gnuplot")) {
    fprintf(
        stderr,
        "zo-swapbench: gnuplot is not installed (apt-get install gnuplot-nox); wrote the script %s, "
        "run gnuplot on it to draw %s\n",
        gp, o->plot);
    return -1;
  }
  char cmd[2 * PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
  if (system(cmd) != 0) {
    fprintf(stderr, "zo-swapbench: gnuplot failed on %s\n", gp);
    return -1;
  }
  printf("Wrote %s (script %s)\n", o->plot, gp);
  return 0;
}

int sb_report(const opts *o, int use_fio, int failures) {
  size_t measured = 0;
  for (size_t i = 0; i < g_nres; i++) measured += !g_res[i].skipped;
  if (!measured) {
    printf("\nNothing was measured%s.\n", g_stop ? " before the interrupt" : "");
    return g_stop ? 0 : 1;
  }
  print_table(o);
  comparison c[4];
  int nc = compare(o, use_fio, c);
  print_compare(o, use_fio, c, nc);
  print_striping(o);
  print_best(o, use_fio);
  print_device_pass();
  if (failures)
    printf("\n%d measurement%s failed (see above)\n", failures, failures == 1 ? "" : "s");
  int rc = failures ? 1 : 0;
  if (o->json && write_json(o, use_fio, c, nc) != 0) rc = 1;
  if (o->plot && write_plot(o, use_fio) != 0) rc = 1;
  return rc;
}
