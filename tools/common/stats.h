/* stats.h - the order statistics the tools report their repetitions by (tools/common/stats.c). */
#ifndef ZO_TOOLS_STATS_H
#define ZO_TOOLS_STATS_H

#include <stddef.h>

/* zo_tool_cmp_double() - qsort()'s comparison of two doubles, ascending. */
int zo_tool_cmp_double(const void *a, const void *b);

/*
 * zo_tool_median() - the median of @v[@n]: the middle value, or the mean of the two middle ones when
 * @n is even; -1 when @n is 0 (the tools' "no figure"). Sorts @v in place (ascending, so v[0] and
 * v[n - 1] are then the minimum and maximum). Thread-safe for distinct @v.
 */
double zo_tool_median(double *v, size_t n);

#endif
