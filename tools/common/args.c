/*
 * args.c - the option values the tools share: integers, doubles, counts, byte
 * sizes and comma lists (--params, --capacity, --sizes, --block-sizes,
 * --max-seconds). Flag parsing itself is getopt; messages are the caller's.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
      case 'k':
      case 'K': m = binary ? 1024.0 : 1e3; break;
      case 'm':
      case 'M': m = binary ? 1048576.0 : 1e6; break;
      case 'g':
      case 'G': m = binary ? 1073741824.0 : 1e9; break;
      case 't':
      case 'T': m = binary ? 1099511627776.0 : 1e12; break;
      default: return -1;
    }
    if (end[1] && !(end[1] == 'i' && end[2] == 'B' && !end[3]) && !(end[1] == 'B' && !end[2]))
      return -1;
  }
  v *= m;
  if (v > 1.8e19 || v != floor(v)) return -1;
  *out = (uint64_t)v;
  return 0;
}

int zo_tool_parse_double(const char *s, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || !(v >= lo) || !(v <= hi)) return -1;
  *out = v;
  return 0;
}

int zo_tool_parse_bytes(const char *s, uint64_t *out) {
  if (!s || !isdigit((unsigned char)*s)) return -1;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  uint64_t mul = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K':
      mul = (uint64_t)1 << 10;
      end++;
      break;
    case 'M':
      mul = (uint64_t)1 << 20;
      end++;
      break;
    case 'G':
      mul = (uint64_t)1 << 30;
      end++;
      break;
    case 'T':
      mul = (uint64_t)1 << 40;
      end++;
      break;
    default: break;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end || (v && mul > UINT64_MAX / v)) return -1;
  *out = (uint64_t)v * mul;
  return 0;
}

int zo_tool_split_list(const char *s, int (*fn)(const char *tok, int index, void *ctx), void *ctx,
                       char *bad, size_t bad_n) {
  char buf[ZO_TOOL_LIST_MAX];
  if (strlen(s) >= sizeof buf) return -2;
  memcpy(buf, s, strlen(s) + 1);
  int count = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), count++) {
    if (fn(tok, count, ctx) != 0) {
      if (bad && bad_n) snprintf(bad, bad_n, "%s", tok);
      return -1;
    }
  }
  return count;
}
