/*
 * progress.c - elapsed time, rate and ETA for the tools' long loops (progress.h): a bar on a
 * terminal, periodic lines on a pipe, on stderr. The figures only; what a loop does is the tool's.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"
#include "zoffload/status.h"

char *zo_tool_duration(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0)
    snprintf(buf, n, "?");
  else if (s < 59.95)
    snprintf(buf, n, "%.1f s", s);
  else if (s < 3599.5)
    snprintf(buf, n, "%dm%02ds", (int)(s + 0.5) / 60, (int)(s + 0.5) % 60);
  else if (s < 1e9)
    snprintf(buf, n, "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60) % 60);
  else
    snprintf(buf, n, "?");
  return buf;
}

double zo_tool_eta_s(double elapsed_s, double done, double total) {
  if (!(done > 0) || !(total >= done) || !(elapsed_s >= 0)) return -1;
  return elapsed_s / done * (total - done);
}

void zo_tool_progress_start(zo_tool_progress *p, const char *tool, const char *unit, int64_t total,
                            double every_s) {
  *p = (zo_tool_progress){.tool = tool, .unit = unit, .total = total, .every_s = every_s};
  p->t0 = p->t_shown = zo_clock_s();
  p->tty = isatty(STDERR_FILENO);
}

void zo_tool_progress_update(zo_tool_progress *p, int64_t done, const char *what) {
  const double now = zo_clock_s(), el = now - p->t0;
  if (now - p->t_shown < (p->tty ? 0.2 : p->every_s)) return;
  p->t_shown = now;
  char e[32], eta[32], w[64] = "";
  zo_tool_duration(el, e, sizeof e);
  zo_tool_duration(zo_tool_eta_s(el, (double)done, (double)p->total), eta, sizeof eta);
  if (what && what[0]) snprintf(w, sizeof w, " (%s)", what);
  const double rate = el > 0 ? done / el : 0;
  if (p->tty) {
    char bar[21];
    const int fill = p->total > 0 ? (int)(20 * done / p->total) : 0;
    for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
    bar[20] = 0;
    fprintf(stderr, "\r%s: [%s] %lld/%lld%-.40s | %s, ETA %s\033[K", p->tool, bar, (long long)done,
            (long long)p->total, w, e, eta);
    p->drawn = 1;
  } else {
    fprintf(stderr, "%s: %lld/%lld %s%s | %s elapsed, %.3g %s/s | ETA %s\n", p->tool,
            (long long)done, (long long)p->total, p->unit, w, e, rate, p->unit, eta);
  }
  fflush(stderr);
}

void zo_tool_progress_end(zo_tool_progress *p) {
  if (p->tty && p->drawn) fprintf(stderr, "\r\033[K");
  fflush(stderr);
  p->drawn = 0;
}
