/*
 * jemalloc_rt.c - find jemalloc at run time (see jemalloc_rt.h).
 */
#include "jemalloc_rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static zo_je g_je;
static const zo_je *g_api;
static char g_why[512];

/* Fill @je from @h (RTLD_DEFAULT or a handle); 0 when every symbol is there and mallctl answers "version". */
static int resolve(void *h, zo_je *je) {
  *(void **)&je->mallctl = dlsym(h, "mallctl");
  *(void **)&je->mallocx = dlsym(h, "mallocx");
  *(void **)&je->dallocx = dlsym(h, "dallocx");
  *(void **)&je->sallocx = dlsym(h, "sallocx");
  if (!je->mallctl || !je->mallocx || !je->dallocx || !je->sallocx) return -1;
  size_t sz = sizeof je->version;
  if (je->mallctl("version", &je->version, &sz, NULL, 0) != 0 || !je->version) return -1;
  return 0;
}

static void init(void) {
  const char *off = getenv("ZOFFLOAD_NO_JEMALLOC");
  if (off && *off && strcmp(off, "0") != 0) {
    snprintf(g_why, sizeof g_why, "ZOFFLOAD_NO_JEMALLOC=%s is set", off);
    return;
  }
  if (resolve(RTLD_DEFAULT, &g_je) == 0) {
    g_je.source = "in the process";
    g_api = &g_je;
    return;
  }
  memset(&g_je, 0, sizeof g_je);
  void *h = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(g_why, sizeof g_why, "%s", e ? e : "dlopen(libjemalloc.so.2) failed");
    return;
  }
  if (resolve(h, &g_je) != 0) {
    snprintf(g_why, sizeof g_why, "libjemalloc.so.2 lacks the mallctl/mallocx/dallocx/sallocx API");
    dlclose(h);
    memset(&g_je, 0, sizeof g_je);
    return;
  }
  g_je.source =
      "loaded privately"; /* never dlclose()d: arenas and their hooks live as long as the process */
  g_api = &g_je;
}

const zo_je *zo_je_get(void) {
  pthread_once(&g_once, init);
  return g_api;
}

const char *zo_je_why(void) {
  pthread_once(&g_once, init);
  return g_api ? "" : g_why;
}
