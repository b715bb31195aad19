/*
 * cuda_host.c - host memory registration with CUDA for the pinned pool (see
 * cuda_host.h): the process-wide "a CUDA device exists" flag, its activation
 * hook, and cudaHostRegister / cudaHostUnregister. Stubs without CUDA. It
 * keeps no list of ranges: the owner of the memory does (offload/pinned.c).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base_internal.h"
#include "cuda_host.h"

#if ZO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static pthread_mutex_t g_mu =
    PTHREAD_MUTEX_INITIALIZER;         /* serializes activate and set_activate_hook */
static void (*g_hook)(void);           /* under g_mu */
static atomic_int g_active;            /* 0 -> 1 once, under g_mu; read without */
static int g_ordinal = -1;             /* written before g_active is set */
static zo_cuda_host_reg_fn g_fake_reg; /* written before g_active is set */
static zo_cuda_host_unreg_fn g_fake_unreg;

int zo_cuda_host_active(void) { return atomic_load_explicit(&g_active, memory_order_acquire); }

static void activate(int ordinal, zo_cuda_host_reg_fn reg, zo_cuda_host_unreg_fn unreg) {
  pthread_mutex_lock(&g_mu);
  if (!atomic_load_explicit(&g_active, memory_order_relaxed)) {
    g_ordinal = ordinal;
    g_fake_reg = reg;
    g_fake_unreg = unreg;
    /* seq_cst: an owner that then takes its own lock and reads 0 is ordered before the hook's walk */
    atomic_store(&g_active, 1);
    if (g_hook) g_hook(); /* under g_mu: a hook being replaced cannot run half-way */
  }
  pthread_mutex_unlock(&g_mu);
}

void zo_cuda_host_activate(int ordinal) { activate(ordinal, NULL, NULL); }

void zo_cuda_host_set_fake(zo_cuda_host_reg_fn reg, zo_cuda_host_unreg_fn unreg) {
  activate(-1, reg, unreg);
}

void zo_cuda_host_set_activate_hook(void (*fn)(void)) {
  pthread_mutex_lock(&g_mu);
  g_hook = fn;
  pthread_mutex_unlock(&g_mu);
}

#if ZO_HAVE_CUDA
/* Make the activating device current on this thread (registrations are portable, but a
 * call on a thread with no current device would create a context on GPU 0). */
static zo_status use_device(void) {
  int cur = -1;
  if (g_ordinal < 0) return ZO_OK;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == g_ordinal) return ZO_OK;
  cudaError_t e = cudaSetDevice(g_ordinal);
  if (e == cudaSuccess) return ZO_OK;
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_CUDA, "cudaSetDevice(%d): %s (%s)", g_ordinal, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}
#endif

zo_status zo_cuda_host_register(void *ptr, size_t nbytes) {
  if (!zo_cuda_host_active())
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "cudaHostRegister: no CUDA device has been created in this process");
  if (g_fake_reg) return g_fake_reg(ptr, nbytes);
#if ZO_HAVE_CUDA
  ZO_CHECK(use_device());
  cudaError_t e = cudaHostRegister(ptr, nbytes, cudaHostRegisterPortable);
  if (e == cudaSuccess) return ZO_OK;
  (void)cudaGetLastError(); /* not the caller's framework's error to find later */
  return zo_error_set(ZO_ERR_CUDA, "cudaHostRegister(%p, %zu bytes, portable) on cuda:%d: %s (%s)",
                      ptr, nbytes, g_ordinal, cudaGetErrorString(e), cudaGetErrorName(e));
#else
  return zo_error_set(ZO_ERR_UNSUPPORTED, "cudaHostRegister: CUDA backend not built");
#endif
}

zo_status zo_cuda_host_unregister(void *ptr) {
  if (!zo_cuda_host_active())
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "cudaHostUnregister: no CUDA device has been created in this process");
  if (g_fake_unreg) return g_fake_unreg(ptr);
#if ZO_HAVE_CUDA
  ZO_CHECK(use_device());
  cudaError_t e = cudaHostUnregister(ptr);
  if (e == cudaSuccess) return ZO_OK;
  (void)cudaGetLastError();
  return zo_error_set(ZO_ERR_CUDA, "cudaHostUnregister(%p) on cuda:%d: %s (%s)", ptr, g_ordinal,
                      cudaGetErrorString(e), cudaGetErrorName(e));
#else
  return zo_error_set(ZO_ERR_UNSUPPORTED, "cudaHostUnregister: CUDA backend not built");
#endif
}
