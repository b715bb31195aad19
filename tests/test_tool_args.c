/*
 * test_tool_args.c - the argument parsers the tools share (tools/common/args.c):
 * zo_tool_parse_int (every tool's integer options) and zo_tool_parse_count.
 * Not a test of getopt or of any tool's messages (tests/zo_*.sh grep those).
 */
#include <stdint.h>
#include <stdio.h>

#include "args.h"
#include "zo_test.h"

static void test_parse_int(void) {
  static const struct {
    const char *s;
    int64_t lo, hi;
    int ok;
    int64_t want;
  } cases[] = {
      {"1", 1, 64, 1, 1},       {"64", 1, 64, 1, 64},   {"65", 1, 64, 0, 0},     {"0", 1, 64, 0, 0},
      {"0", 0, 3, 1, 0},        {"", 0, 3, 0, 0},       {"abc", 0, 3, 0, 0},     {"5x", 0, 9, 0, 0},
      {" 7", 0, 9, 1, 7},       {"+3", 0, 9, 1, 3},     {"-1", 0, 9, 0, 0},      {"-1", -5, 9, 1, -1},
      {"0x10", 0, 99, 0, 0},    {"1e3", 0, 9999, 0, 0}, {"99999999999999999999", 0, INT64_MAX, 0, 0},
      {"9223372036854775807", 0, INT64_MAX, 1, INT64_MAX}, {"4611686018427387904", 1, INT64_MAX / 2, 0, 0},
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

int main(void) {
  test_parse_int();
  test_parse_count();
  return zo_test_finish("test_tool_args");
}
