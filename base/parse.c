/*
 * parse.c - zo_parse_bytes(), the byte-size parser shared by the config and the tools, and
 * zo_name_distance(), the edit distance of every "did you mean" (include/zoffload/parse.h).
 */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "base_internal.h"
#include "zoffload/parse.h"

#define FORMS                                                                                   \
  "digits with an optional fraction and unit: K M G T or KiB MiB GiB TiB (powers of 1024), KB " \
  "MB GB TB (powers of 1000), B"

static zo_status bad(const char *s) {
  return zo_error_set(ZO_ERR_INVALID_ARG, "not a byte size: '%s' (%s)", s, FORMS);
}

zo_status zo_parse_bytes(const char *s, uint64_t *out) {
  if (!s) return zo_error_set(ZO_ERR_INVALID_ARG, "not a byte size: NULL");
  const char *q = s;
  if (!isdigit((unsigned char)*q)) return bad(s);
  unsigned __int128 whole = 0, frac = 0, scale = 1;
  for (; isdigit((unsigned char)*q); q++) {
    whole = whole * 10 + (unsigned)(*q - '0');
    if (whole > UINT64_MAX) return bad(s);
  }
  if (*q == '.') {
    q++;
    if (!isdigit((unsigned char)*q)) return bad(s);
    for (; isdigit((unsigned char)*q); q++)
      if (scale <
          (unsigned __int128)1000000000000000000ull) /* 18 digits are more than a byte's worth */
        frac = frac * 10 + (unsigned)(*q - '0'), scale *= 10;
  }
  if (*q == ' ' && q[1] && q[1] != ' ') q++; /* "1.5 KiB": one blank before a unit */
  static const struct {
    const char *unit;
    uint64_t mul;
  } units[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ull << 10},
      {"kib", 1ull << 10},
      {"kb", 1000ull},
      {"m", 1ull << 20},
      {"mib", 1ull << 20},
      {"mb", 1000000ull},
      {"g", 1ull << 30},
      {"gib", 1ull << 30},
      {"gb", 1000000000ull},
      {"t", 1ull << 40},
      {"tib", 1ull << 40},
      {"tb", 1000000000000ull},
  };
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(q, units[i].unit)) continue;
    const unsigned __int128 v = whole * units[i].mul + frac * units[i].mul / scale;
    if (v > UINT64_MAX) return bad(s);
    *out = (uint64_t)v;
    return ZO_OK;
  }
  return bad(s);
}

int zo_name_distance(const char *a, size_t n, const char *b) {
  const size_t m = strlen(b);
  if (n >= ZO_NAME_DIST_MAX || m >= ZO_NAME_DIST_MAX) return ZO_NAME_DIST_MAX;
  int rows[3][ZO_NAME_DIST_MAX + 1]; /* rows i-2, i-1, i of the table, used round robin */
  for (size_t j = 0; j <= m; j++) rows[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int *cur = rows[i % 3], *up = rows[(i + 2) % 3], *up2 = rows[(i + 1) % 3];
    cur[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int d = up[j - 1] + (a[i - 1] != b[j - 1]);
      if (up[j] + 1 < d) d = up[j] + 1;
      if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && up2[j - 2] + 1 < d)
        d = up2[j - 2] + 1;
      cur[j] = d;
    }
  }
  return rows[n % 3][m];
}

int zo_name_suggestion_distance(const char *a, size_t n, const char *b) {
  const int d = zo_name_distance(a, n, b);
  const size_t m = strlen(b), longer = m > n ? m : n;
  return d <= 2 && (size_t)d * 3 <= longer ? d : ZO_NAME_DIST_MAX;
}
