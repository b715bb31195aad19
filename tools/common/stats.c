/* stats.c - the tools' median (stats.h). */
#include "stats.h"

#include <stdlib.h>

int zo_tool_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double zo_tool_median(double *v, size_t n) {
  if (!n) return -1;
  qsort(v, n, sizeof *v, zo_tool_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
