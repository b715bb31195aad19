/*
 * cuapi.c - the driver API table of cuapi.h, filled through dlopen/dlsym.
 */
#include "cuapi.h"

#if ZO_HAVE_CUDA
#include <dlfcn.h>
#include <stdio.h>

int cu_load(cu_api *c, char *note, size_t cap) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(note, cap, "libcuda.so.1 not loadable: %s", dlerror());
    return -1;
  }
#define SYM(field, name)                                  \
  do {                                                    \
    *(void **)&c->field = dlsym(h, name);                 \
    if (!c->field) {                                      \
      snprintf(note, cap, "libcuda.so.1 lacks %s", name); \
      return -1;                                          \
    }                                                     \
  } while (0)
  SYM(Init, "cuInit");
  SYM(DeviceGet, "cuDeviceGet");
  SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
  SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  SYM(CtxSetCurrent, "cuCtxSetCurrent");
  SYM(GetGranularity, "cuMemGetAllocationGranularity");
  SYM(AddressReserve, "cuMemAddressReserve");
  SYM(AddressFree, "cuMemAddressFree");
  SYM(Create, "cuMemCreate");
  SYM(Release, "cuMemRelease");
  SYM(Map, "cuMemMap");
  SYM(Unmap, "cuMemUnmap");
  SYM(SetAccess, "cuMemSetAccess");
  SYM(MemAlloc, "cuMemAlloc_v2");
  SYM(MemFree, "cuMemFree_v2");
  SYM(StreamCreate, "cuStreamCreate");
  SYM(StreamDestroy, "cuStreamDestroy_v2");
  SYM(StreamSynchronize, "cuStreamSynchronize");
  SYM(DeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
  SYM(MemPoolSetAttribute, "cuMemPoolSetAttribute");
  SYM(MemPoolGetAttribute, "cuMemPoolGetAttribute");
  SYM(MemPoolTrimTo, "cuMemPoolTrimTo");
  SYM(MemAllocAsync, "cuMemAllocAsync");
  SYM(MemFreeAsync, "cuMemFreeAsync");
#undef SYM
  return 0;
}
#endif
