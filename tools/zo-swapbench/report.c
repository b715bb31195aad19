/*
 * report.c - zo-swapbench's report of the sweep: the table, the best settings and the "aio" block, the
 * targets, the JSON file and the gnuplot chart. Reads g_res; measures nothing.
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

static const result *find(int op, int engine, uint64_t bs, unsigned qd) {
  const result *best = NULL;
  for (size_t i = 0; i < g_nres; i++) {
    const result *r = &g_res[i];
    if (r->op == op && r->engine == engine && r->block_size == bs && r->queue_depth == qd &&
        r->ok && (!best || r->gbps > best->gbps))
      best = r;
  }
  return best;
}

const result *best_of(int op, int engine) {
  const result *best = NULL;
  for (size_t i = 0; i < g_nres; i++) {
    const result *r = &g_res[i];
    if (r->op == op && r->engine == engine && r->ok && (!best || r->gbps > best->gbps)) best = r;
  }
  return best;
}

static void print_table(const opts *o, int use_fio) {
  printf("\n%-5s %6s %4s %6s %6s | %8s %8s %8s | %7s %7s\n", "op", "bs", "qd", "regbuf", "sqpoll",
         "zoffload", "pread", "fio", "zo/pr", "zo/fio");
  printf("------------------------------------+----------------------------+----------------\n");
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    for (size_t i = 0; i < g_nres; i++) {
      const result *r = &g_res[i];
      if (r->op != op || r->engine != ENG_ZO) continue;
      const result *p = find(op, ENG_PREAD, r->block_size, r->queue_depth);
      const result *f = use_fio ? find(op, ENG_FIO, r->block_size, r->queue_depth) : NULL;
      char bss[32], zs[16], ps[16], fs[16], rp[16], rf[16];
      fmt_size(r->block_size, bss, sizeof bss);
      snprintf(zs, sizeof zs, r->ok ? "%.3f" : "error", r->gbps);
      snprintf(ps, sizeof ps, p ? "%.3f" : "-", p ? p->gbps : 0);
      snprintf(fs, sizeof fs, f ? "%.3f" : "-", f ? f->gbps : 0);
      snprintf(rp, sizeof rp, p && r->ok ? "%.2f" : "-", p && r->ok ? r->gbps / p->gbps : 0);
      snprintf(rf, sizeof rf, f && r->ok ? "%.2f" : "-", f && r->ok ? r->gbps / f->gbps : 0);
      printf("%-5s %6s %4u %6s %6s | %8s %8s %8s | %7s %7s\n", op_name[op], bss, r->queue_depth,
             tri(r->regbuf), tri(r->sqpoll), zs, ps, fs, rp, rf);
    }
  }
  printf("(GB/s = 1e9 bytes/s; best of %d repetition%s, each the first %" PRIu64
         " bytes of a %" PRIu64
         "-byte file or %.2f s, whichever ends first; O_DIRECT, page cache bypassed)\n",
         o->reps, o->reps == 1 ? "" : "s", o->bytes, o->size,
         o->max_sec > 0 ? o->max_sec : INFINITY);
}


static void eval_targets(const opts *o, int use_fio, target *t, int *nt) {
  *nt = 0;
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *zb = best_of(op, ENG_ZO);
    /* 1: against fio's best, at fio's best block size and queue depth (zoffload's best variant there). */
    target *a = &t[(*nt)++];
    a->name = op == OP_READ ? "best read  >= 95% of fio's best (same bs, qd)"
                            : "best write >= 95% of fio's best (same bs, qd)";
    a->need = 0.95;
    a->ratio = -1;
    const result *fb = use_fio ? best_of(op, ENG_FIO) : NULL;
    if (!use_fio) {
      snprintf(a->detail, sizeof a->detail, "fio not run");
    } else if (!fb) {
      snprintf(a->detail, sizeof a->detail, "no fio measurement succeeded");
    } else {
      const result *z = find(op, ENG_ZO, fb->block_size, fb->queue_depth);
      char bss[32];
      fmt_size(fb->block_size, bss, sizeof bss);
      if (z) {
        a->ratio = z->gbps / fb->gbps;
        snprintf(a->detail, sizeof a->detail, "zoffload %.3f vs fio %.3f GB/s at bs=%s qd=%u",
                 z->gbps, fb->gbps, bss, fb->queue_depth);
      } else {
        snprintf(a->detail, sizeof a->detail, "zoffload failed at bs=%s qd=%u", bss,
                 fb->queue_depth);
      }
    }
    /* 2: against the pread/pwrite baseline's best. */
    target *b = &t[(*nt)++];
    b->name = op == OP_READ ? "best read  >= pread baseline's best"
                            : "best write >= pwrite baseline's best";
    b->need = 1.0;
    b->ratio = -1;
    const result *pb = best_of(op, ENG_PREAD);
    if (zb && pb) {
      b->ratio = zb->gbps / pb->gbps;
      snprintf(b->detail, sizeof b->detail, "zoffload %.3f vs pread %.3f GB/s", zb->gbps, pb->gbps);
    } else {
      snprintf(b->detail, sizeof b->detail, "no %s measurement succeeded",
               zb ? "pread" : "zoffload");
    }
  }
}

static void print_best(const opts *o, int use_fio) {
  printf("\nBest settings:\n");
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *z = best_of(op, ENG_ZO);
    const result *p = best_of(op, ENG_PREAD);
    const result *f = use_fio ? best_of(op, ENG_FIO) : NULL;
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
      if (r->engine != ENG_ZO || r->op != OP_READ || !r->ok) continue;
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
  }
}

static json_t *res_json(const result *r) {
  json_t *j = json_object();
  json_object_set_new(j, "op", json_string(op_name[r->op]));
  json_object_set_new(j, "engine", json_string(eng_name[r->engine]));
  json_object_set_new(j, "block_size", json_integer((json_int_t)r->block_size));
  json_object_set_new(j, "block_size_used", json_integer((json_int_t)r->block_used));
  json_object_set_new(j, "queue_depth", json_integer(r->queue_depth));
  json_object_set_new(j, "registered_buffers",
                      r->regbuf < 0 ? json_string("n/a") : json_boolean(r->regbuf));
  json_object_set_new(j, "sqpoll", r->sqpoll < 0 ? json_string("n/a") : json_boolean(r->sqpoll));
  json_object_set_new(j, "gbps", json_real(r->gbps));
  json_object_set_new(j, "gbps_mean", json_real(r->gbps_mean));
  json_object_set_new(j, "seconds", json_real(r->seconds));
  json_object_set_new(j, "bytes", json_integer((json_int_t)r->bytes));
  json_object_set_new(j, "reps", json_integer(r->reps));
  json_object_set_new(j, "ok", json_boolean(r->ok));
  if (r->note[0]) json_object_set_new(j, "note", json_string(r->note));
  return j;
}

static int write_json(const opts *o, int use_fio, const target *t, int nt) {
  json_t *root = json_object();
  json_t *cfg = json_object();
  json_object_set_new(cfg, "path", json_string(o->path));
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
  for (size_t i = 0; i < g_nres; i++) json_array_append_new(arr, res_json(&g_res[i]));
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
  json_t *tj = json_array();
  for (int i = 0; i < nt; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "target", json_string(t[i].name));
    json_object_set_new(x, "need", json_real(t[i].need));
    json_object_set_new(x, "ratio", t[i].ratio < 0 ? json_null() : json_real(t[i].ratio));
    json_object_set_new(x, "status",
                        json_string(t[i].ratio < 0            ? "n/a"
                                    : t[i].ratio >= t[i].need ? "PASS"
                                                              : "MISS"));
    json_object_set_new(x, "detail", json_string(t[i].detail));
    json_array_append_new(tj, x);
  }
  json_object_set_new(root, "targets", tj);
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
          o->path, o->size);
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

/* The targets of issue 4, one line each. */
static void print_targets(const target *t, int nt) {
  printf("\nTargets (issue 4):\n");
  for (int i = 0; i < nt; i++) {
    if (t[i].ratio < 0)
      printf("  n/a   %s: %s\n", t[i].name, t[i].detail);
    else
      printf("  %s  %s: ratio %.3f (need %.2f) - %s\n", t[i].ratio >= t[i].need ? "PASS" : "MISS",
             t[i].name, t[i].ratio, t[i].need, t[i].detail);
  }
}

int sb_report(const opts *o, int use_fio, int failures) {
  print_table(o, use_fio);
  print_best(o, use_fio);
  target t[4];
  int nt;
  eval_targets(o, use_fio, t, &nt);
  print_targets(t, nt);
  print_device_pass();
  if (failures)
    printf("\n%d measurement%s failed (see above)\n", failures, failures == 1 ? "" : "s");
  int rc = failures ? 1 : 0;
  if (o->json && write_json(o, use_fio, t, nt) != 0) rc = 1;
  if (o->plot && write_plot(o, use_fio) != 0) rc = 1;
  return rc;
}
