/*
 * test_tool_args.c - the argument parsers the tools share (tools/common/args.c):
 * zo_tool_parse_int (every tool's integer options), zo_tool_parse_count,
 * zo_tool_parse_double, zo_tool_parse_bytes, zo_tool_split_list and the flag
 * suggestion zo_tool_nearest_option; and their median (tools/common/stats.c).
 * Not a test of getopt or of any tool's messages (tests/zo_*.sh grep those).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "stats.h"
#include "zo_test.h"

static void test_parse_int(void) {
  static const struct {
    const char *s;
    int64_t lo, hi;
    int ok;
    int64_t want;
  } cases[] = {
      {"1", 1, 64, 1, 1},
      {"64", 1, 64, 1, 64},
      {"65", 1, 64, 0, 0},
      {"0", 1, 64, 0, 0},
      {"0", 0, 3, 1, 0},
      {"", 0, 3, 0, 0},
      {"abc", 0, 3, 0, 0},
      {"5x", 0, 9, 0, 0},
      {" 7", 0, 9, 1, 7},
      {"+3", 0, 9, 1, 3},
      {"-1", 0, 9, 0, 0},
      {"-1", -5, 9, 1, -1},
      {"0x10", 0, 99, 0, 0},
      {"1e3", 0, 9999, 0, 0},
      {"99999999999999999999", 0, INT64_MAX, 0, 0},
      {"9223372036854775807", 0, INT64_MAX, 1, INT64_MAX},
      {"4611686018427387904", 1, INT64_MAX / 2, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t v = -42;
    int rc = zo_tool_parse_int(cases[i].s, cases[i].lo, cases[i].hi, &v);
    if (!CHECK_EQ(rc, cases[i].ok ? 0 : -1)) fprintf(stderr, "  input '%s'\n", cases[i].s);
    CHECK_EQ(v, cases[i].ok ? cases[i].want : -42); /* unchanged on failure */
  }
}

static void test_parse_count(void) {
  uint64_t v = 0;
  CHECK_EQ(zo_tool_parse_count("64MiB", 1, &v), 0);
  CHECK_EQ(v, 64ll << 20);
  CHECK_EQ(zo_tool_parse_count("250M", 0, &v), 0);
  CHECK_EQ(v, 250000000);
  CHECK_EQ(zo_tool_parse_count("1e9", 0, &v), 0);
  CHECK_EQ(v, 1000000000);
  CHECK_EQ(zo_tool_parse_count("1.5", 0, &v), -1);
  CHECK_EQ(zo_tool_parse_count("-1", 0, &v), -1);
  CHECK_EQ(zo_tool_parse_count("2Gx", 1, &v), -1);
}

static void test_parse_double(void) {
  static const struct {
    const char *s;
    double lo, hi;
    int ok;
    double want;
  } cases[] = {
      {"0.3", 0, 3600, 1, 0.3},   {"0", 0, 3600, 1, 0},   {"3600", 0, 3600, 1, 3600},
      {"3601", 0, 3600, 0, 0},    {"-1", 0, 3600, 0, 0},  {"-1", -2, 2, 1, -1},
      {"1e-3", 0, 1, 1, 1e-3},    {" 2.5", 0, 9, 1, 2.5}, {"", 0, 9, 0, 0},
      {"x", 0, 9, 0, 0},          {"1.5s", 0, 9, 0, 0},   {"nan", -1e300, 1e300, 0, 0},
      {"inf", 0, INFINITY, 0, 0}, {"1e-400", 0, 9, 0, 0}, {"1e400", 0, INFINITY, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double v = -42;
    int rc = zo_tool_parse_double(cases[i].s, cases[i].lo, cases[i].hi, &v);
    if (!CHECK_EQ(rc, cases[i].ok ? 0 : -1)) fprintf(stderr, "  input '%s'\n", cases[i].s);
    CHECK(v == (cases[i].ok ? cases[i].want : -42)); /* unchanged on failure */
  }
}

static void test_parse_bytes(void) {
  static const struct {
    const char *s;
    int ok;
    uint64_t want;
  } cases[] = {
      {"1048576", 1, 1048576},
      {"0", 1, 0},
      {"4K", 1, 4096},
      {"512k", 1, 512 << 10},
      {"4MiB", 1, 4 << 20},
      {"1G", 1, 1ull << 30},
      {"1gib", 1, 1ull << 30},
      {"1Gb", 1, 1000000000ull}, /* KB MB GB TB: powers of 1000, as the config reads them */
      {"2TB", 1, 2000000000000ull},
      {"2TiB", 1, 2ull << 40},
      {"16777216T", 0, 0} /* 2^24 * 2^40 = 2^64: one past the top */,
      {"16777215T", 1, 16777215ull << 40},
      {"8B", 1, 8},
      {"", 0, 0},
      {"banana", 0, 0},
      {" 1G", 0, 0},
      {"+1G", 0, 0},
      {"-1", 0, 0},
      {"1.5G", 1, 3ull << 29},
      {"1.5K", 1, 1536},
      {"0.5", 1, 0},
      {"1.", 0, 0},
      {".5K", 0, 0},
      {"1e9", 0, 0},
      {"1Gx", 0, 0},
      {"1iB", 0, 0},
      {"1KK", 0, 0},
      {"1.5 KiB", 1, 1536},
      {"1  K", 0, 0},
      {"1 ", 0, 0},
      {"18446744073709551616", 0, 0},
      {"18446744073709551615", 1, UINT64_MAX},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t v = 7;
    int rc = zo_tool_parse_bytes(cases[i].s, &v);
    if (!CHECK_EQ(rc, cases[i].ok ? 0 : -1)) fprintf(stderr, "  input '%s'\n", cases[i].s);
    CHECK_EQ(v, cases[i].ok ? cases[i].want : 7);
  }
}

typedef struct split_log {
  char toks[8][16];
  int index[8];
  int n;
  int refuse_at; /* index whose token the callback refuses; -1: none */
} split_log;

static int split_cb(const char *tok, int index, void *ctx) {
  split_log *l = ctx;
  if (l->n < 8) {
    snprintf(l->toks[l->n], sizeof l->toks[0], "%s", tok);
    l->index[l->n] = index;
  }
  l->n++;
  return index == l->refuse_at;
}

static void test_split_list(void) {
  split_log l = {.refuse_at = -1};
  CHECK_EQ(zo_tool_split_list("128K,,1M,x", split_cb, &l, NULL, 0), 3);
  CHECK_EQ(l.n, 3);
  CHECK(!strcmp(l.toks[0], "128K") && !strcmp(l.toks[1], "1M") && !strcmp(l.toks[2], "x"));
  CHECK(l.index[0] == 0 && l.index[1] == 1 && l.index[2] == 2);

  memset(&l, 0, sizeof l);
  l.refuse_at = -1;
  CHECK_EQ(zo_tool_split_list(",", split_cb, &l, NULL, 0), 0);
  CHECK_EQ(zo_tool_split_list("", split_cb, &l, NULL, 0), 0);
  CHECK_EQ(l.n, 0);

  char bad[8] = "";
  memset(&l, 0, sizeof l);
  l.refuse_at = 1;
  CHECK_EQ(zo_tool_split_list("a,bad,c", split_cb, &l, bad, sizeof bad), -1);
  CHECK_EQ(l.n, 2); /* stops at the refused token */
  CHECK(!strcmp(bad, "bad"));
  memset(&l, 0, sizeof l);
  l.refuse_at = 0;
  CHECK_EQ(zo_tool_split_list("toolongtoken", split_cb, &l, bad, sizeof bad), -1);
  CHECK(!strcmp(bad, "toolong")); /* truncated to @bad_n */

  char big[ZO_TOOL_LIST_MAX + 1];
  memset(big, 'a', sizeof big - 1);
  big[ZO_TOOL_LIST_MAX] = 0; /* 1024 characters: too long */
  memset(&l, 0, sizeof l);
  l.refuse_at = -1;
  CHECK_EQ(zo_tool_split_list(big, split_cb, &l, NULL, 0), -2);
  CHECK_EQ(l.n, 0);
  big[ZO_TOOL_LIST_MAX - 1] = 0; /* 1023: the longest taken */
  CHECK_EQ(zo_tool_split_list(big, split_cb, &l, NULL, 0), 1);
}

/* zo_tool_nearest_option(): within 2 edits and a third of the longer name, swaps count 1, "=VALUE"
 * ignored, an exact name returned as is, nothing for a word far from every flag. */
static void test_nearest_option(void) {
  static const struct option lo[] = {{"print-every", required_argument, 0, 1},
                                     {"steps", required_argument, 0, 2},
                                     {"save", required_argument, 0, 3},
                                     {"save-every", required_argument, 0, 4},
                                     {"log-json", required_argument, 0, 5},
                                     {0, 0, 0, 0}};
  static const struct {
    const char *word, *want; /* want NULL: no suggestion */
  } cases[] = {
      {"print-evry", "print-every"},
      {"stpes", "steps"},
      {"step", "steps"},
      {"log-jsn=3", "log-json"},
      {"save-evry", "save-every"},
      {"save", "save"},
      {"sav", "save"},
      {"s", NULL},
      {"zzzzzz", NULL},
      {"json", NULL},
      {"", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *got = zo_tool_nearest_option(cases[i].word, lo);
    const int ok = cases[i].want ? got && !strcmp(got, cases[i].want) : got == NULL;
    if (!CHECK(ok))
      fprintf(stderr, "  '%s': got %s, want %s\n", cases[i].word, got ? got : "NULL",
              cases[i].want ? cases[i].want : "NULL");
  }
}

/* zo_tool_median(): the middle value, the mean of the two middle ones, -1 for none; sorts in place */
static void test_median(void) {
  double odd[] = {5, 1, 3}, even[] = {4, 9, 1, 2}, one[] = {7};
  CHECK_EQ(zo_tool_median(odd, 3), 3.0);
  CHECK(odd[0] == 1 && odd[1] == 3 && odd[2] == 5);
  CHECK_EQ(zo_tool_median(even, 4), 3.0); /* (2 + 4) / 2 */
  CHECK(even[0] == 1 && even[3] == 9);
  CHECK_EQ(zo_tool_median(one, 1), 7.0);
  CHECK_EQ(zo_tool_median(one, 0), -1.0);
  const double a = 1, b = 2;
  CHECK(zo_tool_cmp_double(&a, &b) < 0 && zo_tool_cmp_double(&b, &a) > 0 &&
        !zo_tool_cmp_double(&a, &a));
}

int main(void) {
  test_parse_int();
  test_parse_count();
  test_parse_double();
  test_parse_bytes();
  test_split_list();
  test_nearest_option();
  test_median();
  return zo_test_finish("test_tool_args");
}
