/*
 * progress.h - elapsed time, rate and ETA for the tools' long loops (tools/common/progress.c): a
 * bar redrawn in place on a terminal, periodic whole lines on a pipe or file, both on stderr so
 * the results on stdout stay parseable. Not thread-safe: one loop, one thread.
 */
#ifndef ZO_TOOLS_PROGRESS_H
#define ZO_TOOLS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/*
 * zo_tool_duration() - @s seconds for people into @buf (@n bytes): "8.1 s" under a minute,
 * "3m05s" under an hour, "2h07m" beyond; "?" when @s is negative or not finite. Returns @buf.
 */
char *zo_tool_duration(double s, char *buf, size_t n);

/*
 * zo_tool_eta_s() - the seconds left when @done of @total units took @elapsed_s, at the mean rate
 * so far: elapsed_s / done * (total - done). -1 (unknown) when @done <= 0 or @total < @done.
 */
double zo_tool_eta_s(double elapsed_s, double done, double total);

/* A loop's progress: zo_tool_progress_start(), _update() per unit done, _end(). */
typedef struct zo_tool_progress {
  const char *tool, *unit; /* "zo-adambench", "measurements": printed as given */
  int64_t total;           /* units the loop does */
  double t0, t_shown;      /* zo_clock_s() at the start and at the last print */
  double every_s;          /* on a pipe: seconds between lines */
  int tty;                 /* stderr is a terminal: the bar, redrawn in place */
  int drawn;               /* a bar is on the terminal's last line (cleared by _end) */
} zo_tool_progress;

/*
 * zo_tool_progress_start() - a loop of @total @unit starts now. On a terminal the bar is drawn at
 * most five times a second; otherwise a line is printed when @every_s seconds passed since the
 * last (the first after @every_s: a loop shorter than that prints nothing).
 */
void zo_tool_progress_start(zo_tool_progress *p, const char *tool, const char *unit, int64_t total,
                            double every_s);

/*
 * zo_tool_progress_update() - @done of the total are done; @what (may be NULL) names what runs
 * next or last ran, shown after the count. Prints "TOOL: DONE/TOTAL UNIT (WHAT) | 8.1 s elapsed,
 * 1.52 UNIT/s | ETA 20 s" when due (see _start).
 */
void zo_tool_progress_update(zo_tool_progress *p, int64_t done, const char *what);

/*
 * zo_tool_progress_end() - a bar on the terminal is cleared: the loop is over, or the tool prints
 * a result now (a later zo_tool_progress_update() draws the bar anew).
 */
void zo_tool_progress_end(zo_tool_progress *p);

#endif
