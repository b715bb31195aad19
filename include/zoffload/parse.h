/*
 * parse.h - what users type, read one way everywhere: byte sizes (the
 * config's byte keys zoffload.device_memory_limit, device_arena_bytes,
 * placement_host_bytes, and every size flag of the tools, so "80G" means the
 * same in a config and on a command line) and the distance between names
 * behind every "did you mean" (unknown config keys, unknown tool flags).
 */
#ifndef ZOFFLOAD_PARSE_H
#define ZOFFLOAD_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * zo_parse_bytes() - a byte size written as digits, an optional decimal
 * fraction and an optional unit, case-insensitive, as GNU coreutils (dd,
 * truncate) and fio read them:
 *   K, M, G, T and KiB, MiB, GiB, TiB   powers of 1024 (4K = 4096)
 *   KB, MB, GB, TB                      powers of 1000 (1GB = 10^9)
 *   B or nothing                        bytes
 * e.g. "1048576", "4K", "64MiB", "80G", "1.5 GiB", "2TB". The value is
 * rounded down to whole bytes ("1.5K" = 1536). One blank may stand before
 * the unit; no sign, other blank, exponent or trailing text. Exact to the byte: the fraction is computed in integers.
 * Returns ZO_OK with *@out set, or ZO_ERR_INVALID_ARG (NULL, anything else,
 * or a value above UINT64_MAX) with a message quoting @s and the accepted
 * forms; *@out unchanged then. Thread-safe; no allocation.
 */
ZO_API zo_status zo_parse_bytes(const char *s, uint64_t *out);

/* Longest name zo_name_distance() compares. */
#define ZO_NAME_DIST_MAX 64

/*
 * zo_name_distance() - the optimal string alignment distance (Levenshtein
 * plus the swap of two adjacent characters, each counting 1: "enabeld" ->
 * "enabled" is 1) between the first @n bytes of @a and the string @b,
 * byte-wise, case-sensitive; ZO_NAME_DIST_MAX when either is that long or
 * longer. Source: Damerau (1964), the restricted form (no substring edited
 * twice). Thread-safe; no allocation; @a and @b not NULL.
 */
ZO_API int zo_name_distance(const char *a, size_t n, const char *b);

/*
 * zo_name_suggestion_distance() - zo_name_distance() of the first @n bytes
 * of @a and @b when @b is close enough to offer as "did you mean @b?": at
 * most 2 edits, and at most a third of the longer name's length (so "a"
 * suggests nothing); else ZO_NAME_DIST_MAX. The one rule of the config's
 * key suggestions and the tools' flag suggestions. Thread-safe; no
 * allocation; @a and @b not NULL.
 */
ZO_API int zo_name_suggestion_distance(const char *a, size_t n, const char *b);

#ifdef __cplusplus
}
#endif

#endif
