/*
 * zo_test_backend.h - the `--backend host|cuda` switch that tests run on either device backend share, and the
 * device each rank opens: the host backend, or the CUDA GPU of its local rank (zo_device_local_ordinal: LOCAL_RANK,
 * OMPI_COMM_WORLD_LOCAL_RANK, ...), as zo-train picks it. ctest runs the cuda side against the stand-in runtime
 * (tests/fake_cudart.c; FAKE_CUDA_DEVICES=2 for two ranks). Not a device abstraction: tests call the API directly.
 * Built with ZO_TEST_DEVADAM_EMU (CMake's zo_test_devadam_emu()), `--backend cuda` also installs the stand-in's
 * emulation of device Adam's kernels (devadam_emu.h), so offload_optimizer "none" runs there instead of skipping.
 */
#ifndef ZO_TEST_BACKEND_H
#define ZO_TEST_BACKEND_H

#include <stdio.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/device.h"

#ifdef ZO_TEST_DEVADAM_EMU
#include "devadam_emu.h"
#endif

static zo_device_kind zo_test_kind = ZO_DEVICE_HOST; /* --backend */
/* 1 when device Adam's kernels run on this cuda device: emulated by the stand-in (or, later, a real GPU's). */
static int zo_test_device_kernels;

/* Takes a leading `--backend host|cuda` off @argc and @argv. Returns 0 to go on, 1 on a bad argument (usage printed
 * as "usage: @prog [--backend host|cuda] @rest") or when this rank has no GPU of its own (zo_device_local_ordinal's
 * message), ZO_TEST_SKIP for cuda without a CUDA device (message printed). */
static inline int zo_test_backend_arg(const char *prog, const char *rest, int *argc, char ***argv) {
  if (*argc >= 3 && !strcmp((*argv)[1], "--backend")) {
    if (!strcmp((*argv)[2], "cuda")) {
      zo_test_kind = ZO_DEVICE_CUDA;
    } else if (strcmp((*argv)[2], "host")) {
      fprintf(stderr, "usage: %s [--backend host|cuda] %s\n", prog, rest);
      return 1;
    }
    (*argv)[2] = (*argv)[0];
    *argc -= 2;
    *argv += 2;
  }
  if (zo_test_kind == ZO_DEVICE_CUDA && zo_device_cuda_count() == 0) {
    printf("%s: no CUDA device, skipped\n", prog);
    return ZO_TEST_SKIP;
  }
  int ordinal =
      0; /* a rank without a GPU of its own fails here, before any collective its peers would wait in */
  if (zo_test_kind == ZO_DEVICE_CUDA &&
      zo_device_local_ordinal(zo_device_cuda_count(), &ordinal) != ZO_OK) {
    fprintf(stderr, "%s: %s\n", prog, zo_last_error());
    return 1;
  }
#ifdef ZO_TEST_DEVADAM_EMU
  if (zo_test_kind == ZO_DEVICE_CUDA && devadam_emu_install() == 1) zo_test_device_kernels = 1;
#endif
  printf("%s: %s backend%s\n", prog, zo_device_kind_name(zo_test_kind),
         zo_test_device_kernels ? ", device Adam's kernels emulated by the stand-in" : "");
  return 0;
}

/* The device of --backend: host, or CUDA device zo_device_local_ordinal() (one GPU per local rank). */
static inline zo_status zo_test_device_create(size_t mem_limit_bytes, zo_device_t **out) {
  int ordinal = 0;
  if (zo_test_kind == ZO_DEVICE_CUDA) {
    zo_status st = zo_device_local_ordinal(zo_device_cuda_count(), &ordinal);
    if (st != ZO_OK) return st;
  }
  return zo_device_create(zo_test_kind, ordinal, mem_limit_bytes, out);
}

/* offload_optimizer "none" on CUDA runs Adam (and the gradient adds) as kernels; the stand-in runs them only when
 * they are emulated (zo_test_device_kernels). */
static inline int zo_test_skip_device_kernels(const char *label, int optimizer_on_device) {
  if (zo_test_kind != ZO_DEVICE_CUDA || !optimizer_on_device || zo_test_device_kernels) return 0;
  printf("skip %s: offload_optimizer \"none\" on cuda needs device kernels (device Adam)\n", label);
  return 1;
}

#endif /* ZO_TEST_BACKEND_H */
