/*
 * cuda_host.h - registering host memory with CUDA (cudaHostRegister) for the
 * layers above gpu/ that own host memory (offload/pinned.c), without their
 * including CUDA headers. Internal, not installed. Built without CUDA, the
 * calls are stubs: never active, registration unsupported.
 *
 * "Active" means a device of kind CUDA has been created in this process
 * (device_cuda.c calls zo_cuda_host_activate()); it never goes back, because
 * registrations are portable (cudaHostRegisterPortable: valid in every CUDA
 * context) and outlive the zo_device_t. Owners of host memory register what
 * they map while active, and install a hook (zo_cuda_host_set_activate_hook)
 * that registers what they mapped before.
 */
#ifndef ZO_CUDA_HOST_H
#define ZO_CUDA_HOST_H

#include <stddef.h>

#include "zoffload/status.h"

/* zo_cuda_host_active() - 1 once a CUDA device exists in the process (or a fake is installed). Thread-safe. */
int zo_cuda_host_active(void);

/*
 * zo_cuda_host_register() - page-lock [@ptr, @ptr + @nbytes) for DMA with
 * cudaHostRegister(..., cudaHostRegisterPortable), on the GPU of the first
 * CUDA device created (made current on the calling thread). @ptr and @nbytes
 * should be page aligned; the range must be mapped readable and writable and
 * overlap no other registration. Synchronous. Thread-safe.
 * Returns ZO_OK; ZO_ERR_UNSUPPORTED when not active (or built without CUDA);
 * ZO_ERR_CUDA (message names the range and cudaGetErrorString()).
 */
zo_status zo_cuda_host_register(void *ptr, size_t nbytes);

/*
 * zo_cuda_host_unregister() - undo zo_cuda_host_register(@ptr, ...) (the same
 * base pointer) BEFORE the range is unmapped or remapped. Thread-safe.
 * Returns ZO_OK, ZO_ERR_UNSUPPORTED, ZO_ERR_CUDA.
 */
zo_status zo_cuda_host_unregister(void *ptr);

/*
 * zo_cuda_host_set_activate_hook() - call @fn once, from the thread that
 * activates, after the active flag is set: it registers memory mapped while
 * inactive. One hook per process (a later call replaces it); it must not be
 * set from within itself. Thread-safe: activation and hook setting are
 * serialized, so a hook set after activation is never called and its owner
 * sees zo_cuda_host_active() == 1 instead.
 */
void zo_cuda_host_set_activate_hook(void (*fn)(void));

/* zo_cuda_host_activate() - device_cuda.c: a CUDA device of @ordinal exists; first call wins. */
void zo_cuda_host_activate(int ordinal);

/*
 * zo_cuda_host_set_fake() - tests only: route registration to @reg/@unreg
 * instead of CUDA and activate (ordinal -1), so the bookkeeping of the owners
 * can be checked on a machine without a GPU. Call before any CUDA device is
 * created; irreversible for the process.
 */
typedef zo_status (*zo_cuda_host_reg_fn)(void *ptr, size_t nbytes);
typedef zo_status (*zo_cuda_host_unreg_fn)(void *ptr);
void zo_cuda_host_set_fake(zo_cuda_host_reg_fn reg, zo_cuda_host_unreg_fn unreg);

#endif /* ZO_CUDA_HOST_H */
