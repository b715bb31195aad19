/*
 * zo_test.h - check macros and helpers shared by the test programs in tests/:
 * failures print file:line, the expression and both values, and are counted;
 * zo_test_finish() turns the count into the exit code. Header only, one
 * include per test program; not part of the library.
 *
 * Exit codes: 0 pass, 1 fail, ZO_TEST_SKIP (77) skip.
 */
#ifndef ZO_TEST_H
#define ZO_TEST_H

#include <stdlib.h>

#include <errno.h>

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zoffload/comm.h"
#include "zoffload/status.h"

#define ZO_TEST_SKIP 77

/* Checks failed so far in this program. */
static int zo_test_failures;

/* Print "file:line: <fmt>" to stderr and count a failure. Returns 0. */
static inline int zo_test_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int zo_test_fail_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  zo_test_failures++;
  return 0;
}

/* Integers compared as long long (equality is the same for unsigned operands). Returns 1 when equal. */
static inline int zo_test_check_eq(const char *file, int line, const char *a_expr,
                                   const char *b_expr, long long a, long long b) {
  if (a == b) return 1;
  return zo_test_fail_at(file, line, "%s == %s failed: %lld vs %lld", a_expr, b_expr, a, b);
}

/* Returns 1 when @got == @want; otherwise prints both names and zo_last_error(). */
static inline int zo_test_check_status(const char *file, int line, const char *expr, zo_status got,
                                       zo_status want) {
  if (got == want) return 1;
  return zo_test_fail_at(file, line, "%s returned %s, expected %s (last error: %s)", expr,
                         zo_status_string(got), zo_status_string(want), zo_last_error());
}

/* Mixed tolerance |a - ref| <= atol + rtol*|ref|; NaN fails. Returns 1 when within. */
static inline int zo_test_check_close(const char *file, int line, const char *a_expr,
                                      const char *ref_expr, double a, double ref, double atol,
                                      double rtol) {
  if (fabs(a - ref) <= atol + rtol * fabs(ref)) return 1;
  return zo_test_fail_at(file, line, "%s ~= %s failed: %.17g vs %.17g (atol %g, rtol %g)", a_expr,
                         ref_expr, a, ref, atol, rtol);
}

/*
 * Element-wise mixed tolerance over double[n]; equal values (inf == inf) and
 * NaN where @ref has NaN pass. Prints the first 10 mismatches and a count;
 * one failure however many elements differ. Returns the mismatch count.
 */
static inline size_t zo_test_check_close_array(const char *file, int line, const char *what,
                                               const double *got, const double *ref, size_t n,
                                               double atol, double rtol) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs(got[i] - ref[i]);
    int same = got[i] == ref[i] || (isnan(got[i]) && isnan(ref[i]));
    if (!same && !(err <= atol + rtol * fabs(ref[i]))) {
      if (bad < 10)
        fprintf(stderr, "%s:%d: %s[%zu]: got %.17g, expected %.17g (|diff| %.3g)\n", file, line,
                what, i, got[i], ref[i], err);
      bad++;
    }
  }
  if (bad) zo_test_fail_at(file, line, "%s: %zu of %zu elements out of tolerance", what, bad, n);
  return bad;
}

/* Compare @n bytes; prints the first 10 that differ and a count. Returns the mismatch count. */
static inline size_t zo_test_check_bytes(const char *file, int line, const char *what,
                                         const void *got, const void *want, size_t n) {
  const uint8_t *g = got, *w = want;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (g[i] != w[i]) {
      if (bad < 10)
        fprintf(stderr, "%s:%d: %s: byte %zu: got 0x%02x, expected 0x%02x\n", file, line, what, i,
                g[i], w[i]);
      bad++;
    }
  }
  if (bad) zo_test_fail_at(file, line, "%s: %zu of %zu bytes differ", what, bad, n);
  return bad;
}

/* Returns 1 when @needle occurs in @hay; otherwise prints both strings. */
static inline int zo_test_check_has(const char *file, int line, const char *hay_expr,
                                    const char *needle_expr, const char *hay, const char *needle) {
  if (strstr(hay, needle)) return 1;
  return zo_test_fail_at(file, line, "strstr(%s, %s) failed:\n  text: %s\n  want: %s", hay_expr,
                         needle_expr, hay, needle);
}

/* Entries in directory @path other than . and ..; -1 when it cannot be opened. */
static inline int zo_test_count_entries(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* Print "<name>: all checks passed" or the failure count; returns the exit code (0 or 1). */
static inline int zo_test_finish(const char *name) {
  if (zo_test_failures) {
    printf("%s: %d check(s) failed\n", name, zo_test_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

/* ---- check macros: each records a failure and carries on ---- */
#define FAIL_AT(...) zo_test_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond) ((cond) ? 1 : FAIL_AT("CHECK(%s) failed", #cond))
#define CHECK_EQ(a, b) zo_test_check_eq(__FILE__, __LINE__, #a, #b, (long long)(a), (long long)(b))
#define CHECK_ST(expr, want) zo_test_check_status(__FILE__, __LINE__, #expr, (expr), (want))
#define CHECK_OK(expr) CHECK_ST(expr, ZO_OK)
#define CHECK_CLOSE(a, ref, atol, rtol) \
  zo_test_check_close(__FILE__, __LINE__, #a, #ref, (a), (ref), (atol), (rtol))
#define CHECK_CLOSE_ARRAY(what, got, ref, n, atol, rtol) \
  zo_test_check_close_array(__FILE__, __LINE__, what, got, ref, n, atol, rtol)
#define CHECK_BYTES(what, got, want, n) zo_test_check_bytes(__FILE__, __LINE__, what, got, want, n)
#define CHECK_HAS(hay, needle) zo_test_check_has(__FILE__, __LINE__, #hay, #needle, (hay), (needle))

/* ---- the same, but return from the (void) calling function on failure ---- */
#define REQUIRE(cond)         \
  do {                        \
    if (!CHECK(cond)) return; \
  } while (0)
#define REQUIRE_OK(expr)         \
  do {                           \
    if (!CHECK_OK(expr)) return; \
  } while (0)

/* ---- random numbers: splitmix64 (Steele, Lea & Flood 2014), state in the caller ---- */

/* Next 64 random bits of the stream *@state. */
static inline uint64_t zo_test_rand64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform float in [-1, 1), multiples of 2^-23 (top 24 bits). */
static inline float zo_test_rand_pm1f(uint64_t *state) {
  return (float)((zo_test_rand64(state) >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

/* Uniform double in [lo, hi) (top 53 bits). */
static inline double zo_test_rand_uniform(uint64_t *state, double lo, double hi) {
  return lo + (hi - lo) * ((zo_test_rand64(state) >> 11) * 0x1p-53);
}

/*
 * zo_test_scratch_dir() - make a private scratch directory @name-XXXXXX under
 * @base (a test's first argument, usually the build directory, which must take
 * O_DIRECT for the nvme tests), else $TMPDIR, else /tmp, into @out (@cap
 * bytes). Returns 0, or -1 after printing why (tests then exit ZO_TEST_SKIP).
 */
static inline int zo_test_scratch_dir(const char *base, const char *name, char *out, size_t cap) {
  if (!base || !base[0]) base = getenv("TMPDIR");
  if (!base || !base[0]) base = "/tmp";
  int n = snprintf(out, cap, "%s/%s-XXXXXX", base, name);
  if (n < 0 || (size_t)n >= cap) {
    fprintf(stderr, "skip: the scratch directory name under %s is longer than %zu bytes\n", base,
            cap - 1);
    return -1;
  }
  if (mkdtemp(out)) return 0;
  fprintf(stderr, "skip: cannot make a directory under %s: %s\n", base, strerror(errno));
  return -1;
}

/*
 * zo_test_rank_scratch_dir() - the start of a test that runs on one or more ranks: the communicator a launcher asks
 * for (zo_comm_create_from_env) into *@comm unless one is there already, then this rank's private scratch directory
 * @name-r<rank>-XXXXXX under @base (as zo_test_scratch_dir) into @out (@cap bytes). Returns 0 to go on, 1 when the
 * communicator cannot be made (CHECK_OK's message printed), ZO_TEST_SKIP when the directory cannot be (why printed).
 */
static inline int zo_test_rank_scratch_dir(const char *base, const char *name, zo_comm_t **comm,
                                           char *out, size_t cap) {
  if (!*comm && !CHECK_OK(zo_comm_create_from_env(comm))) return 1;
  char dir[256];
  if (!CHECK((size_t)snprintf(dir, sizeof dir, "%s-r%d", name, zo_comm_rank(*comm)) < sizeof dir))
    return 1;
  return zo_test_scratch_dir(base, dir, out, cap) ? ZO_TEST_SKIP : 0;
}

#endif /* ZO_TEST_H */
