/*
 * jemalloc_rt.h - jemalloc's non-standard API (mallctl, mallocx, dallocx,
 * sallocx), found at run time instead of linked. Internal to libzoffload.
 *
 * Why not linked: Debian's libjemalloc exports malloc and keeps 2.6 KB of
 * initial-exec thread-local storage. A library that lists it as DT_NEEDED
 * makes it the allocator of every process that loads the library, and
 * cannot be dlopen()ed into a running process (a Python interpreter loading
 * the package) unless glibc was started with more static TLS: the load
 * fails with "cannot allocate memory in static TLS block", and when it does
 * load it takes over malloc after torch's libraries already used glibc's
 * ("free(): invalid pointer"). So libzoffload.so does not link it:
 *   1. a jemalloc already in the process's global scope (a program that links
 *      it, as zoffload's own tools do, or LD_PRELOAD) is used as it is;
 *   2. else libjemalloc.so.2 is dlopen()ed RTLD_LOCAL: its malloc stays
 *      private, only the arenas below use it (works where static TLS allows,
 *      e.g. GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384);
 *   3. else there is none, and callers fall back: the pinned pool maps every
 *      buffer on its own (page granular), the host device uses posix_memalign.
 * ZOFFLOAD_NO_JEMALLOC=1 in the environment forces 3 (for tests).
 */
#ifndef ZO_JEMALLOC_RT_H
#define ZO_JEMALLOC_RT_H

#include <stddef.h>

typedef struct zo_je {
  int (*mallctl)(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
  void *(*mallocx)(size_t size, int flags);
  void (*dallocx)(void *ptr, int flags);
  size_t (*sallocx)(const void *ptr, int flags);
  const char *version; /* mallctl "version" */
  const char *source;  /* "in the process" (case 1) or "loaded privately" (case 2) */
} zo_je;

/*
 * zo_je_get() - the API, resolved once per process (thread-safe), or NULL
 * when jemalloc is not available (case 3; zo_je_why() says why). The
 * functions are jemalloc's own: flags and semantics as its manual gives.
 */
const zo_je *zo_je_get(void);

/* zo_je_why() - why zo_je_get() returned NULL ("" when it did not). */
const char *zo_je_why(void);

#endif
