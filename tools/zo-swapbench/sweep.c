/*
 * sweep.c - zo-swapbench's sweep: every engine at every (block size, queue depth, op), repetitions
 * interleaved, results appended to g_res; the progress bar; then the device read pass. Not the report.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swapbench.h"

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

/* ---- progress bar (stderr, only on a terminal) -------------------------------------------------- */

int g_tty;
static unsigned g_steps, g_step;

static void progress(const char *what) {
  if (!g_tty) return;
  const int width = 30;
  unsigned filled = g_steps ? (unsigned)((uint64_t)g_step * width / g_steps) : 0;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < (int)filled ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r[%s] %3u/%-3u %-40.40s", bar, g_step, g_steps, what);
  fflush(stderr);
}

static void progress_done(void) {
  if (g_tty) fprintf(stderr, "\r%-90s\r", "");
}

/* ---- the sweep ---------------------------------------------------------------------------------------- */

/* One measurement slot: the repetitions of one engine at one setting. */
typedef struct slot {
  size_t res; /* index into g_res */
  double gb[64];
  int n;
  int failed;
  double best_sec;
  double best_gb;
  uint64_t best_bytes;
} slot;

static size_t slot_new(int op, int engine, uint64_t bs, uint64_t used, unsigned qd, variant v) {
  result *r = res_add();
  r->op = op;
  r->engine = engine;
  r->block_size = bs;
  r->block_used = used;
  r->queue_depth = qd;
  r->regbuf = v.regbuf;
  r->sqpoll = v.sqpoll;
  return g_nres - 1;
}

static void slot_add(slot *sl, double sec, double gbps, uint64_t bytes) {
  if (sl->n < 64) sl->gb[sl->n++] = gbps;
  if (gbps > sl->best_gb) {
    sl->best_gb = gbps;
    sl->best_sec = sec;
    sl->best_bytes = bytes;
  }
}

static void slot_finish(slot *sl) {
  result *r = &g_res[sl->res];
  double best = 0, sum = 0;
  for (int i = 0; i < sl->n; i++) {
    sum += sl->gb[i];
    if (sl->gb[i] > best) best = sl->gb[i];
  }
  r->ok = !sl->failed && sl->n > 0;
  r->gbps = r->ok ? best : 0;
  r->gbps_mean = r->ok ? sum / sl->n : 0;
  r->reps = sl->n;
  r->seconds = sl->best_sec;
  r->bytes = sl->best_bytes;
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


/* One measurement for the engine of @r (a zoffload variant on @zb, pread or fio on @path) at its block size,
 * queue depth and op: 0 with the seconds, GB/s and bytes moved, or -1 with r->note set. */
static int measure(const opts *o, result *r, zo_bench *zb, const char *path, int direct,
                   double *sec, double *g, uint64_t *moved) {
  int rc, is_write = r->op == OP_WRITE;
  if (r->engine == ENG_ZO) {
    rc = zo_transfer(zb, is_write, o->bytes, o->max_sec, sec, moved);
    if (rc) snprintf(r->note, sizeof r->note, "%s", zo_last_error());
    *g = *sec > 0 ? (double)*moved / *sec / 1e9 : 0;
  } else if (r->engine == ENG_PREAD) {
    rc = pread_transfer(path, direct, is_write, o->bytes, o->max_sec, r->block_size, r->queue_depth,
                        sec, moved, r->note, sizeof r->note);
    *g = *sec > 0 ? (double)*moved / *sec / 1e9 : 0;
  } else {
    variant v = {r->regbuf, r->sqpoll};
    rc = fio_transfer(path, is_write, o->size, o->bytes, o->max_sec, r->block_size, r->queue_depth,
                      v, g, sec, moved, r->note, sizeof r->note);
  }
  return rc;
}

/*
 * One swap handle per ring variant (each its own rank, so they can be open together) with its own
 * preallocated file, written once untimed, kept for the whole sweep; zo_swap_set_queue() moves every
 * handle to each (block size, queue depth). Then, per op (write first, so reads see written blocks) and
 * per repetition, every engine runs once in turn - the zoffload variants, pread/pwrite, fio - the order
 * rotated by one each repetition, so no engine always runs right after the same neighbour (a write
 * burst the host is still flushing, a poller going to sleep). Interleaving the repetitions spreads the
 * noise of a shared machine over all engines alike. Each measurement moves the first o->bytes bytes of
 * the file, or what o->max_sec allows. pread and fio use the file of the first variant.
 */
int run_sweep(const opts *o, int use_fio) {
  variant vars[4];
  int nv = 0;
  for (int rb = SB_HAVE_REGBUF ? 0 : -1; rb <= (SB_HAVE_REGBUF ? 1 : -1); rb++)
    for (int sq = SB_HAVE_SQPOLL ? 0 : -1; sq <= (SB_HAVE_SQPOLL ? 1 : -1); sq++)
      vars[nv++] = (variant){rb, sq};
  int nops = o->do_op[OP_READ] + o->do_op[OP_WRITE];
  int n_fio = use_fio ? (o->fio_variants ? nv : 1) : 0;
  int n_eng = nv + 1 + n_fio;
  unsigned qd_max = 0;
  for (int i = 0; i < o->n_qd; i++)
    if (o->qd[i] > qd_max) qd_max = o->qd[i];
  g_steps = (unsigned)(nv + o->n_bs * o->n_qd * nops * o->reps * n_eng);
  g_step = 0;
  int failures = 0;
  char what[96];
  zo_bench zb[4];
  memset(zb, 0, sizeof zb);
  for (int vi = 0; vi < nv && !g_stop; vi++) {
    snprintf(what, sizeof what, "fill file regbuf=%s sqpoll=%s", tri(vars[vi].regbuf),
             tri(vars[vi].sqpoll));
    progress(what);
    if (zo_bench_open(&zb[vi], o, qd_max, vars[vi], SB_RANK - vi) != 0) {
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
        slot sl[12];
        memset(sl, 0, sizeof sl);
        for (int k = 0; k < n_eng; k++) {
          if (k < nv)
            sl[k].res = slot_new(op, ENG_ZO, bs, zo_swap_block_size(zb[k].sw), qd, vars[k]);
          else if (k == nv)
            sl[k].res = slot_new(op, ENG_PREAD, bs, bs, qd, (variant){-1, -1});
          else
            sl[k].res = slot_new(op, ENG_FIO, bs, bs, qd,
                                 o->fio_variants ? vars[k - nv - 1] : (variant){0, 0});
        }
        for (int rep = 0; rep < o->reps && !g_stop; rep++) {
          for (int kk = 0; kk < n_eng && !g_stop; kk++) {
            int k = (kk + rep) % n_eng;
            result *r = &g_res[sl[k].res];
            snprintf(what, sizeof what, "%s %s bs=%s qd=%u rep %d", eng_name[r->engine],
                     op_name[op], bss, qd, rep + 1);
            progress(what);
            g_step++;
            if (sl[k].failed) continue;
            double sec = 0, g = 0;
            uint64_t moved = 0;
            int rc = measure(o, r, k < nv ? &zb[k] : NULL, path, direct, &sec, &g, &moved);
            if (rc != 0) {
              fprintf(stderr, "\nzo-swapbench: %s %s bs=%" PRIu64 " qd=%u: %s\n",
                      eng_name[r->engine], op_name[op], bs, qd, r->note);
              sl[k].failed = 1;
              continue;
            }
            slot_add(&sl[k], sec, g, moved);
          }
        }
        for (int k = 0; k < n_eng; k++) {
          slot_finish(&sl[k]);
          if (k < nv) zo_slot_describe(&sl[k], &zb[k], vars[k]);
          if (!g_res[sl[k].res].ok && !g_stop) failures++;
        }
      }
    }
  }
  if (!g_stop && nv > 0) {
    progress("nvme -> pinned -> device read pass");
    if (device_pass(&zb[0], o, &g_pass) != 0 && !g_stop) {
      fprintf(stderr, "\nzo-swapbench: nvme -> pinned -> device read pass: %s\n", g_pass.note);
      failures++;
    }
  }
  for (int vi = 0; vi < nv; vi++) zo_bench_close(&zb[vi]);
  progress_done();
  return failures;
}
