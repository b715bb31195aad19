/*
 * cuapi.h - the CUDA driver API functions zo-arenabench times, reached through dlopen("libcuda.so.1")
 * (cuda.h for the types only), so the binary starts on a machine without a GPU driver (the host mode
 * runs there), as the library itself links only cudart. Only with ZO_HAVE_CUDA.
 */
#ifndef ZO_ARENABENCH_CUAPI_H
#define ZO_ARENABENCH_CUAPI_H

#if ZO_HAVE_CUDA
#include <stddef.h>

#include <cuda.h>

typedef struct cu_api {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*PrimaryCtxRelease)(CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  /* virtual memory */
  CUresult (*GetGranularity)(size_t *, const CUmemAllocationProp *,
                             CUmemAllocationGranularity_flags);
  CUresult (*AddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*AddressFree)(CUdeviceptr, size_t);
  CUresult (*Create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
  CUresult (*Release)(CUmemGenericAllocationHandle);
  CUresult (*Map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*Unmap)(CUdeviceptr, size_t);
  CUresult (*SetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  /* allocators: what cudaMalloc/cudaFree call, and the stream-ordered pool (cudaMallocAsync) */
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*DeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
  CUresult (*MemPoolSetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);
  CUresult (*MemPoolGetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);
  CUresult (*MemPoolTrimTo)(CUmemoryPool, size_t);
  CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
} cu_api;

/* cu_load() - every function of @c from libcuda.so.1 (the handle stays open for the process). 0, or -1
 * with @note (@cap bytes) saying what is missing. */
int cu_load(cu_api *c, char *note, size_t cap);

/* CU_TRY(note, call) - run driver call @call; on an error, "CALL failed: CUresult N" into the char array @note
 * and `goto out` (the caller's cleanup label). */
#define CU_TRY(note, call)                                                         \
  do {                                                                             \
    CUresult cu_r_ = (call);                                                       \
    if (cu_r_ != CUDA_SUCCESS) {                                                   \
      snprintf((note), sizeof(note), "%s failed: CUresult %d", #call, (int)cu_r_); \
      goto out;                                                                    \
    }                                                                              \
  } while (0)

#endif
#endif /* ZO_ARENABENCH_CUAPI_H */
