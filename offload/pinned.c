/*
 * pinned.c - page-locked host buffers (mmap + mlock) with a pageable fallback.
 * Not a general allocator: callers take few, large buffers and keep them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "base_internal.h"
#include "pinned_internal.h"

static atomic_size_t g_pinned_bytes;

static size_t round_page(size_t n) { return (n + 4095) & ~(size_t)4095; }

zo_status zo_host_alloc(size_t nbytes, int pin, void **out, int *pinned) {
  if (!out || nbytes == 0) return zo_error_set(ZO_ERR_INVALID_ARG, "host alloc: nbytes must be > 0");
  *out = NULL;
  if (pinned) *pinned = 0;
  size_t len = round_page(nbytes);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "host alloc: cannot map %zu bytes: %s", len, strerror(errno));
  if (pin) {
    if (mlock(p, len) == 0) {
      atomic_fetch_add(&g_pinned_bytes, len);
      if (pinned) *pinned = 1;
    } else {
      int err = errno;
      struct rlimit rl = {0, 0};
      getrlimit(RLIMIT_MEMLOCK, &rl);
      zo_warn_once("cannot pin host memory (mlock: %s); RLIMIT_MEMLOCK is %llu bytes. Buffers stay pageable "
                   "and host-device copies will be slower. Raise the limit with `ulimit -l unlimited` or "
                   "memlock in /etc/security/limits.conf",
                   strerror(err), (unsigned long long)rl.rlim_cur);
    }
  }
  *out = p;
  return ZO_OK;
}

void zo_host_free(void *ptr, size_t nbytes, int pinned) {
  if (!ptr) return;
  size_t len = round_page(nbytes);
  if (pinned) {
    munlock(ptr, len);
    atomic_fetch_sub(&g_pinned_bytes, len);
  }
  munmap(ptr, len);
}

size_t zo_host_pinned_bytes(void) { return atomic_load(&g_pinned_bytes); }
