/*
 * args.c - the integer, count and size arguments the benchmarks share (--params,
 * --capacity, --device-limit, --block-size). Flag parsing itself is getopt.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "args.h"

int zo_tool_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int zo_tool_parse_count(const char *s, int binary, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0)) return -1;
  double m = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': m = binary ? 1024.0 : 1e3; break;
      case 'm': case 'M': m = binary ? 1048576.0 : 1e6; break;
      case 'g': case 'G': m = binary ? 1073741824.0 : 1e9; break;
      case 't': case 'T': m = binary ? 1099511627776.0 : 1e12; break;
      default: return -1;
    }
    if (end[1] && !(end[1] == 'i' && end[2] == 'B' && !end[3]) && !(end[1] == 'B' && !end[2])) return -1;
  }
  v *= m;
  if (v > 1.8e19 || v != floor(v)) return -1;
  *out = (uint64_t)v;
  return 0;
}
