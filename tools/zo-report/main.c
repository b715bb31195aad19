/*
 * zo-report - what this machine offers zoffload (the counterpart of DeepSpeed's
 * ds_report): CPU and SIMD, cores and NUMA, GPUs, NCCL/MPI, io_uring, O_DIRECT
 * on a path, memlock limits, library versions and build options, and with
 * --speeds the machine speeds the placement planner uses (zoffload/speeds.h).
 * Reports only: it changes nothing (but the speeds cache, with --speeds) and
 * exits 0 even when pieces are missing.
 */
#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>
#include <jansson.h>
#include <liburing.h>

#include "args.h"
#include "fsname.h"
#include "zoffload/adam.h"
#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/pinned.h"
#include "zoffload/speeds.h"

#if ZO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if ZO_HAVE_NCCL
#include <nccl.h>
#endif

#ifndef ZO_VERSION
#define ZO_VERSION "unknown"
#endif
#ifndef ZO_BUILD_TYPE
#define ZO_BUILD_TYPE "unknown"
#endif
#ifndef ZO_C_COMPILER
#define ZO_C_COMPILER "unknown"
#endif
#ifndef ZO_HWLOC_PKG_VERSION
#define ZO_HWLOC_PKG_VERSION "unknown"
#endif
#ifndef ZO_URING_PKG_VERSION
#define ZO_URING_PKG_VERSION "2.x"
#endif

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: zo-report [--path DIR] [--speeds] [--config FILE] [--json] [--help]\n"
      "  --path DIR     also test O_DIRECT on DIR: statx DIO alignment, and a 4 KiB aligned\n"
      "                 O_DIRECT write + read of a temporary file (removed). Default: not tested.\n"
      "  --speeds       also report the machine speeds the placement planner uses, each with its\n"
      "                 source: the config's zoffload.speeds, the speeds cache, or a measurement\n"
      "                 (about 1 s, then cached): swap read/write at DIR (--path, else the config's\n"
      "                 nvme_path; none without either), host<->device copies on the config's device,\n"
      "                 CPU Adam on its threads. ZO_SPEEDS_REMEASURE=1 measures again; the cache is\n"
      "                 $ZO_SPEEDS_CACHE, else $XDG_CACHE_HOME/zoffload/speeds.json, else\n"
      "                 ~/.cache/zoffload/speeds.json. Default: not reported.\n"
      "  --config FILE  the DeepSpeed-style config whose settings --speeds measures with (aio block\n"
      "                 size and queue depth, zoffload.adam_threads, dtypes, device, host_link_gbps).\n"
      "                 Default: the defaults with bf16.\n"
      "  --json         print one JSON object instead of text. Default: text.\n"
      "  --help         this message.\n"
      "Exit status 0 whatever is missing; 2 on a bad command line or an unreadable --config.\n");
}

static json_t *limit_json(rlim_t v) {
  return v == RLIM_INFINITY ? json_string("unlimited") : json_integer((json_int_t)v);
}

/* ---------------------------------------------------------------- CPU */
static json_t *report_cpu(void) {
  json_t *o = json_object();
  char model[256] = "unknown";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10) == 0) {
        char *c = strchr(line, ':');
        if (c) {
          c++;
          while (*c == ' ') c++;
          c[strcspn(c, "\n")] = 0;
          snprintf(model, sizeof model, "%s", c);
        }
        break;
      }
    }
    fclose(f);
  }
  json_object_set_new(o, "model", json_string(model));
  unsigned a, b, c, d;
  unsigned l1c = 0, l7b = 0, l7_1a = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) l1c = c;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) l7b = b;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) l7_1a = a;
  json_t *flags = json_object();
  json_object_set_new(flags, "f16c", json_boolean(l1c >> 29 & 1));
  json_object_set_new(flags, "fma", json_boolean(l1c >> 12 & 1));
  json_object_set_new(flags, "avx2", json_boolean(l7b >> 5 & 1));
  json_object_set_new(flags, "avx512f", json_boolean(l7b >> 16 & 1));
  json_object_set_new(flags, "avx512dq", json_boolean(l7b >> 17 & 1));
  json_object_set_new(flags, "avx512bw", json_boolean(l7b >> 30 & 1));
  json_object_set_new(flags, "avx512vl", json_boolean(l7b >> 31 & 1));
  json_object_set_new(flags, "avx512_bf16", json_boolean(l7_1a >> 5 & 1));
  json_object_set_new(o, "cpuid", flags);
  zo_simd best = zo_simd_best();
  json_object_set_new(o, "simd_best", json_string(zo_simd_name(best)));
  json_object_set_new(o, "simd_used", json_string(zo_simd_name(zo_simd_resolve(ZO_SIMD_AUTO))));
  json_object_set_new(o, "adam_avx512_bf16", json_boolean(zo_simd_has_avx512_bf16()));
  return o;
}

/* ------------------------------------------------------------ topology */
static json_t *report_topology(void) {
  json_t *o = json_object();
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    json_object_set_new(o, "error", json_string("hwloc could not load the topology"));
    return o;
  }
  json_object_set_new(o, "packages",
                      json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE)));
  json_object_set_new(o, "physical_cores",
                      json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE)));
  json_object_set_new(o, "hardware_threads",
                      json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU)));
  json_object_set_new(o, "online_cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
  int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  json_t *nodes = json_array();
  for (int i = 0; i < n; i++) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
    json_t *j = json_object();
    char cpus[256] = "";
    if (node->cpuset) hwloc_bitmap_list_snprintf(cpus, sizeof cpus, node->cpuset);
    json_object_set_new(j, "index", json_integer(i));
    json_object_set_new(j, "os_index", json_integer(node->os_index));
    json_object_set_new(j, "memory_bytes",
                        json_integer((json_int_t)node->attr->numanode.local_memory));
    json_object_set_new(j, "cpus", json_string(cpus));
    json_array_append_new(nodes, j);
  }
  json_object_set_new(o, "numa_nodes", nodes);
  hwloc_topology_destroy(topo);
  return o;
}

/* ------------------------------------------------------- GPU, NCCL, MPI */
#if ZO_HAVE_CUDA
static json_t *bf16_peak_json(int major, int minor, const char *name) {
  if (major < 8) return json_string("none (no bf16 tensor cores before sm_80)");
  double t = zo_gpu_bf16_peak_tflops(major, minor, name);
  return t > 0 ? json_real(t) : json_string("unknown");
}

/* First line of a sysfs attribute of PCI device @bus ("0000:3b:00.0") into @out; 0 ok, -1 absent. */
static int pci_sysfs(const char *bus, const char *attr, char *out, size_t n) {
  char path[256];
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/%s", bus, attr);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char *ok = fgets(out, (int)n, f);
  fclose(f);
  if (!ok) return -1;
  out[strcspn(out, "\n")] = 0;
  return 0;
}

/* PCIe generation from a link speed in GT/s (2.5, 5, 8, 16, 32, 64); 0 when not one of them. */
static int pcie_gen(double gts) {
  static const double speeds[] = {2.5, 5, 8, 16, 32, 64};
  for (int g = 0; g < 6; g++)
    if (gts > speeds[g] * 0.95 && gts < speeds[g] * 1.05) return g + 1;
  return 0;
}

/* Usable GB/s per direction of @width lanes at @gts GT/s, after line encoding (8b/10b up to gen 2,
 * 128b/130b for gens 3-5, gen 6 FLIT mode 242/256). Protocol overhead (TLP headers) not counted. */
static double pcie_gbps(double gts, int width) {
  int g = pcie_gen(gts);
  double eff = g <= 2 ? 0.8 : g <= 5 ? 128.0 / 130.0 : 242.0 / 256.0;
  return gts / 8.0 * eff * width;
}

/* Current and maximum link of PCI device @bus from sysfs, plus hwloc's linkspeed when it knows the device. */
static json_t *pcie_json(const char *bus, hwloc_obj_t obj) {
  json_t *o = json_object();
  static const char *const attrs[2][2] = {{"current_link_speed", "current_link_width"},
                                          {"max_link_speed", "max_link_width"}};
  static const char *const keys[2][3] = {{"generation", "width", "gbps"},
                                         {"max_generation", "max_width", "max_gbps"}};
  for (int m = 0; m < 2; m++) {
    char sp[64], wd[64];
    if (pci_sysfs(bus, attrs[m][0], sp, sizeof sp) || pci_sysfs(bus, attrs[m][1], wd, sizeof wd)) {
      json_object_set_new(o, keys[m][0], json_string("unknown (no sysfs link attributes)"));
      continue;
    }
    double gts = atof(sp); /* "16.0 GT/s PCIe" */
    int width = atoi(wd);
    int gen = pcie_gen(gts);
    json_object_set_new(o, keys[m][0], gen ? json_integer(gen) : json_string(sp));
    json_object_set_new(o, keys[m][1], json_integer(width));
    json_object_set_new(o, keys[m][2],
                        gen && width > 0 ? json_real(pcie_gbps(gts, width)) : json_null());
  }
  if (obj && obj->attr && obj->attr->pcidev.linkspeed > 0)
    json_object_set_new(o, "hwloc_gbps", json_real(obj->attr->pcidev.linkspeed));
  else
    json_object_set_new(o, "hwloc_gbps", json_null());
  json_object_set_new(o, "note",
                      json_string(
                          "GB/s per direction after encoding; an idle GPU may train its link "
                          "down (current vs max)"));
  return o;
}

/* The NUMA node(s) nearest PCI object @obj: the nodeset of its first non-I/O ancestor. */
static json_t *numa_json(hwloc_topology_t topo, hwloc_obj_t obj) {
  if (!topo) return json_string("unknown (hwloc could not load the topology)");
  if (!obj) return json_string("unknown (device not in the hwloc topology)");
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (!anc || !anc->nodeset || hwloc_bitmap_iszero(anc->nodeset)) return json_string("unknown");
  if (hwloc_bitmap_weight(anc->nodeset) == 1) return json_integer(hwloc_bitmap_first(anc->nodeset));
  char list[128];
  /* a package-level parent: several nodes */
  hwloc_bitmap_list_snprintf(list, sizeof list, anc->nodeset);
  return json_string(list);
}

/* cudaHostRegister of a 2 MiB anonymous mapping on device @dev, then unregister: "ok" or the CUDA error. */
static json_t *host_register_json(int dev) {
  const size_t n = 2u << 20;
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    char msg[256];
    snprintf(msg, sizeof msg, "not tested: cudaSetDevice: %s", cudaGetErrorString(e));
    return json_string(msg);
  }
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    char msg[256];
    snprintf(msg, sizeof msg, "not tested: mmap of 2 MiB: %s", strerror(errno));
    return json_string(msg);
  }
  memset(p, 0, n);
  json_t *r;
  e = cudaHostRegister(p, n, cudaHostRegisterDefault);
  if (e == cudaSuccess) {
    e = cudaHostUnregister(p);
    r = e == cudaSuccess ? json_string("ok") : NULL;
    if (!r) {
      char msg[256];
      snprintf(msg, sizeof msg, "registered, but cudaHostUnregister: %s", cudaGetErrorString(e));
      r = json_string(msg);
    }
  } else {
    char msg[256];
    snprintf(msg, sizeof msg, "cudaHostRegister of 2 MiB: %s", cudaGetErrorString(e));
    r = json_string(msg);
  }
  cudaGetLastError(); /* clear the sticky last error of a failed call */
  munmap(p, n);
  return r;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Best of 4 timed H2D copies of @n bytes from @host into @dbuf, GB/s (1e9 B/s); 0 on error. */
static double h2d_gbps(void *dbuf, const void *host, size_t n) {
  double best = 0;
  for (int r = 0; r < 4; r++) {
    double t0 = mono_s();
    if (cudaMemcpyAsync(dbuf, host, n, cudaMemcpyHostToDevice, 0) != cudaSuccess ||
        cudaStreamSynchronize(0) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    double g = n / (mono_s() - t0) / 1e9;
    if (g > best) best = g;
  }
  return best;
}

/*
 * "pinning": 256 MiB of host memory pinned the two ways the pinned pool could
 * (offload/pinned.c registers its jemalloc extents, which it maps itself, with
 * cudaHostRegister; cudaHostAlloc is the alternative): milliseconds to pin and
 * to unpin, and H2D GB/s out of each, so the choice can be checked on a GPU.
 */
static json_t *pinning_json(int dev) {
  const size_t n = 256u << 20;
  json_t *j = json_object();
  void *dbuf = NULL;
  if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&dbuf, n) != cudaSuccess) {
    cudaGetLastError();
    json_object_set_new(j, "error", json_string("cannot allocate 256 MiB of device memory"));
    return j;
  }
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    memset(p, 1, n); /* fault the pages in first, as the pool's extents are */
    double t0 = mono_s();
    cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable);
    double t1 = mono_s();
    if (e == cudaSuccess) {
      json_object_set_new(j, "register_ms", json_real((t1 - t0) * 1e3));
      json_object_set_new(j, "register_h2d_gbps", json_real(h2d_gbps(dbuf, p, n)));
      t0 = mono_s();
      cudaHostUnregister(p);
      json_object_set_new(j, "unregister_ms", json_real((mono_s() - t0) * 1e3));
    } else {
      json_object_set_new(j, "register_error", json_string(cudaGetErrorString(e)));
    }
    json_object_set_new(j, "pageable_h2d_gbps", json_real(h2d_gbps(dbuf, p, n)));
    munmap(p, n);
  }
  void *h = NULL;
  double t0 = mono_s();
  cudaError_t e = cudaHostAlloc(&h, n, cudaHostAllocPortable);
  double t1 = mono_s();
  if (e == cudaSuccess) {
    memset(h, 1, n);
    json_object_set_new(j, "hostalloc_ms", json_real((t1 - t0) * 1e3));
    json_object_set_new(j, "hostalloc_h2d_gbps", json_real(h2d_gbps(dbuf, h, n)));
    t0 = mono_s();
    cudaFreeHost(h);
    json_object_set_new(j, "freehost_ms", json_real((mono_s() - t0) * 1e3));
  } else {
    json_object_set_new(j, "hostalloc_error", json_string(cudaGetErrorString(e)));
  }
  cudaGetLastError();
  cudaFree(dbuf);
  return j;
}

static json_t *gpu_json(int i, hwloc_topology_t topo) {
  json_t *j = json_object();
  json_object_set_new(j, "index", json_integer(i));
  struct cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, i);
  if (e != cudaSuccess) {
    cudaGetLastError();
    char msg[256];
    snprintf(msg, sizeof msg, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
    json_object_set_new(j, "error", json_string(msg));
    return j;
  }
  char cc[16];
  snprintf(cc, sizeof cc, "%d.%d", p.major, p.minor);
  json_object_set_new(j, "name", json_string(p.name));
  json_object_set_new(j, "memory_bytes", json_integer((json_int_t)p.totalGlobalMem));
  json_object_set_new(j, "compute_capability", json_string(cc));
  json_object_set_new(j, "multiprocessors", json_integer(p.multiProcessorCount));
  char bus[64];
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) != cudaSuccess) {
    cudaGetLastError();
    snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
  }
  for (char *c = bus; *c; c++)
    if (*c >= 'A' && *c <= 'F') *c = (char)(*c - 'A' + 'a'); /* sysfs spells hex in lower case */
  json_object_set_new(j, "pci_bus_id", json_string(bus));
  unsigned dom = 0, b = 0, d = 0, f = 0;
  hwloc_obj_t obj = NULL;
  if (topo && sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &f) == 4)
    obj = hwloc_get_pcidev_by_busid(topo, dom, b, d, f);
  json_object_set_new(j, "pcie", pcie_json(bus, obj));
  json_object_set_new(j, "numa_node", numa_json(topo, obj));
  json_object_set_new(j, "bf16_dense_tflops", bf16_peak_json(p.major, p.minor, p.name));
  json_object_set_new(j, "host_register", host_register_json(i));
  json_object_set_new(j, "pinning", pinning_json(i));
  return j;
}
#endif

/*
 * "gpu": driver and runtime versions, "gpus" (one object per CUDA device, possibly empty) and, when
 * there is none, "gpu_error" saying why. Creates a CUDA context per device (the registration test).
 */
static json_t *report_gpu(void) {
  json_t *o = json_object();
  json_t *gpus = json_array();
#if ZO_HAVE_CUDA
  int drv = 0, rt = 0, n = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  char v[32];
  snprintf(v, sizeof v, "%d.%d", drv / 1000, drv % 1000 / 10);
  json_object_set_new(o, "driver_version", drv ? json_string(v) : json_string("none"));
  snprintf(v, sizeof v, "%d.%d", rt / 1000, rt % 1000 / 10);
  json_object_set_new(o, "runtime_version", json_string(v));
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    cudaGetLastError();
    char msg[300];
    snprintf(msg, sizeof msg, "no CUDA device (cudaGetDeviceCount: %s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    json_object_set_new(o, "count", json_integer(0));
    json_object_set_new(o, "gpus", gpus);
    json_object_set_new(o, "gpu_error", json_string(msg));
    return o;
  }
  json_object_set_new(o, "count", json_integer(n));
  /* I/O objects (PCI devices, GPUs among them) are filtered out of a default hwloc topology. */
  hwloc_topology_t topo = NULL;
  if (hwloc_topology_init(&topo) == 0) {
    if (hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
        hwloc_topology_load(topo) != 0) {
      hwloc_topology_destroy(topo);
      topo = NULL;
    }
  } else {
    topo = NULL;
  }
  for (int i = 0; i < n; i++) json_array_append_new(gpus, gpu_json(i, topo));
  if (topo) hwloc_topology_destroy(topo);
  json_object_set_new(o, "gpus", gpus);
#else
  json_object_set_new(o, "driver_version", json_string("unknown (built without CUDA)"));
  json_object_set_new(o, "runtime_version", json_string("none (built without CUDA)"));
  json_object_set_new(o, "count", json_integer(0));
  json_object_set_new(o, "gpus", gpus);
  json_object_set_new(o, "gpu_error", json_string("no CUDA device (zoffload built without CUDA)"));
#endif
  return o;
}

static json_t *report_nccl(void) {
#if ZO_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return json_string("built, but ncclGetVersion failed");
  char s[32];
  /* NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older major*1000 + minor*100 + patch. */
  if (v >= 10000)
    snprintf(s, sizeof s, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
  else
    snprintf(s, sizeof s, "%d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
  return json_string(s);
#else
  return json_string("not built");
#endif
}

/* ------------------------------------------------------------ io_uring */
static json_t *report_io_uring(void) {
  json_t *o = json_object();
  struct io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    json_object_set_new(o, "available", json_false());
    json_object_set_new(o, "error", json_string(strerror(-rc)));
    return o;
  }
  json_object_set_new(o, "available", json_true());
  json_t *ops = json_object();
  struct io_uring_probe *probe = io_uring_get_probe_ring(&ring);
  static const struct {
    const char *name;
    int op;
  } want[] = {{"READ", IORING_OP_READ},
              {"WRITE", IORING_OP_WRITE},
              {"READ_FIXED", IORING_OP_READ_FIXED},
              {"WRITE_FIXED", IORING_OP_WRITE_FIXED},
              {"READV", IORING_OP_READV},
              {"WRITEV", IORING_OP_WRITEV},
              {"FSYNC", IORING_OP_FSYNC},
              {"FALLOCATE", IORING_OP_FALLOCATE}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    json_object_set_new(ops, want[i].name,
                        probe ? json_boolean(io_uring_opcode_supported(probe, want[i].op))
                              : json_string("unknown (no probe)"));
  if (probe) io_uring_free_probe(probe);
  json_object_set_new(o, "ops", ops);
  io_uring_queue_exit(&ring);

  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_SQPOLL;
  p.sq_thread_idle = 10;
  rc = io_uring_queue_init_params(4, &ring, &p);
  if (rc < 0) {
    char msg[128];
    snprintf(msg, sizeof msg, "no (%s)", strerror(-rc));
    json_object_set_new(o, "sqpoll", json_string(msg));
  } else {
    json_object_set_new(o, "sqpoll", json_true());
    io_uring_queue_exit(&ring);
  }
  return o;
}

/* ------------------------------------------------------------ O_DIRECT */
static json_t *report_path(const char *dir) {
  json_t *o = json_object();
  json_object_set_new(o, "path", json_string(dir));
  struct statfs sf;
  if (statfs(dir, &sf) == 0) {
    char fs[32];
    const char *name = zo_tool_fs_name((unsigned long)sf.f_type, fs, sizeof fs);
    json_object_set_new(o, "filesystem", json_string(name));
    json_object_set_new(o, "block_size", json_integer((json_int_t)sf.f_bsize));
    json_object_set_new(o, "free_bytes",
                        json_integer((json_int_t)sf.f_bavail * (json_int_t)sf.f_bsize));
  } else {
    json_object_set_new(o, "error", json_string(strerror(errno)));
    return o;
  }
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "%s/.zo-report-XXXXXX", dir);
  int fd = mkostemp(tmpl, O_CLOEXEC);
  if (fd < 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "not tested: cannot create a file (%s)", strerror(errno));
    json_object_set_new(o, "o_direct", json_string(msg));
    return o;
  }
  /* DIO alignment is reported for regular files (and block devices), not directories. */
  struct statx sx;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
      sx.stx_dio_mem_align) {
    json_object_set_new(o, "dio_mem_align", json_integer(sx.stx_dio_mem_align));
    json_object_set_new(o, "dio_offset_align", json_integer(sx.stx_dio_offset_align));
  } else {
    json_object_set_new(o, "dio_mem_align",
                        json_string("not reported by statx (kernel < 6.1 or file system)"));
  }
  close(fd);
  const char *result = "yes";
  char msg[300];
  fd = open(tmpl, O_RDWR | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    snprintf(msg, sizeof msg, "no (open with O_DIRECT: %s)", strerror(errno));
    result = msg;
  } else {
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, 4096) == 0) {
      memset(buf, 0x5a, 4096);
      ssize_t w = pwrite(fd, buf, 4096, 0);
      memset(buf, 0, 4096);
      ssize_t r = w == 4096 ? pread(fd, buf, 4096, 0) : -1;
      if (w != 4096) {
        snprintf(msg, sizeof msg, "no (4 KiB aligned write: %s)",
                 w < 0 ? strerror(errno) : "short");
        result = msg;
      } else if (r != 4096 || ((unsigned char *)buf)[4095] != 0x5a) {
        snprintf(msg, sizeof msg, "no (4 KiB aligned read back: %s)",
                 r < 0 ? strerror(errno) : "wrong data");
        result = msg;
      }
      free(buf);
    }
    close(fd);
  }
  unlink(tmpl);
  json_object_set_new(o, "o_direct", json_string(result));
  return o;
}

/* ------------------------------------------------------------- speeds */
/* The speeds of zoffload/speeds.h for @cfg: each figure {"gbps" (or "gelems_per_s"), "source"}; null when unknown. */
static json_t *report_speeds(const zo_config_t *cfg, const char *path) {
  json_t *o = json_object();
  char cache[4096];
  json_object_set_new(o, "cache",
                      json_string(zo_speeds_cache_path(cache, sizeof cache) == ZO_OK ? cache
                                                                                     : "none"));
  if (!path && cfg->zero.offload_optimizer.nvme_path[0])
    path = cfg->zero.offload_optimizer.nvme_path;
  if (!path && cfg->zero.offload_param.nvme_path[0]) path = cfg->zero.offload_param.nvme_path;
  json_object_set_new(o, "nvme_path", path ? json_string(path) : json_null());
  zo_device_t *dev = NULL;
  const zo_device_kind kind = cfg->zoffload.device_kind;
  zo_status st = zo_device_create(kind, kind == ZO_DEVICE_HOST ? 0 : zo_device_default_ordinal(),
                                  (size_t)cfg->zoffload.device_memory_limit, &dev);
  if (st == ZO_OK)
    json_object_set_new(o, "device", json_string(zo_device_name(dev)));
  else
    json_object_set_new(o, "device_error",
                        json_sprintf("%s: %s", zo_status_string(st), zo_last_error()));
  zo_speeds s;
  st = zo_speeds_get(cfg, dev, path, &s);
  zo_device_destroy(dev);
  if (st != ZO_OK) {
    json_object_set_new(o, "error", json_sprintf("%s: %s", zo_status_string(st), zo_last_error()));
    return o;
  }
  const struct {
    const char *name;
    double v;
    const char *src;
  } f[] = {{"nvme_read", s.nvme_read_bytes_per_s, s.nvme_read_src},
           {"nvme_write", s.nvme_write_bytes_per_s, s.nvme_write_src},
           {"h2d", s.h2d_bytes_per_s, s.h2d_src},
           {"d2h", s.d2h_bytes_per_s, s.d2h_src},
           {"adam", s.adam_elems_per_s, s.adam_src}};
  for (int i = 0; i < 5; i++) {
    json_t *v = f[i].v > 0 ? json_real(f[i].v * 1e-9) : json_null();
    json_object_set_new(o, f[i].name,
                        json_pack("{s:o, s:s}", i == 4 ? "gelems_per_s" : "gbps", v, "source",
                                  f[i].src));
  }
  return o;
}

/* The speeds section as text: one line per figure, 4 significant digits. */
static void print_speeds(json_t *o) {
  printf("speeds:\n");
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    if (json_is_string(v))
      printf("  %-24s %s\n", k, json_string_value(v));
    else if (json_is_null(v))
      printf("  %-24s none\n", k);
    if (!json_is_object(v)) continue;
    json_t *g = json_object_get(v, "gbps"), *e = json_object_get(v, "gelems_per_s"), *x = g ? g : e;
    char val[48] = "unknown";
    if (json_is_number(x))
      snprintf(val, sizeof val, "%.4g %s", json_number_value(x), g ? "GB/s" : "G elements/s");
    printf("  %-24s %s (%s)\n", k, val, json_string_value(json_object_get(v, "source")));
  }
}

/* ------------------------------------------------------------ memlock */
static json_t *report_memlock(void) {
  json_t *o = json_object();
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    json_object_set_new(o, "soft_bytes", limit_json(rl.rlim_cur));
    json_object_set_new(o, "hard_bytes", limit_json(rl.rlim_max));
  }
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) == 0)
    json_object_set_new(o, "cap_ipc_lock",
                        json_boolean(data[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32) & 1));
  return o;
}

/* ----------------------------------------------------- versions, build */
static json_t *report_libraries(void) {
  json_t *o = json_object();
  char v[64];
  json_object_set_new(o, "liburing", json_string(ZO_URING_PKG_VERSION));
  snprintf(v, sizeof v, "%u.%u.%u", HWLOC_API_VERSION >> 16, HWLOC_API_VERSION >> 8 & 0xff,
           HWLOC_API_VERSION & 0xff);
  json_object_set_new(o, "hwloc_api_compiled", json_string(v));
  unsigned hv = hwloc_get_api_version();
  snprintf(v, sizeof v, "%u.%u.%u", hv >> 16, hv >> 8 & 0xff, hv & 0xff);
  json_object_set_new(o, "hwloc_api_runtime", json_string(v));
  json_object_set_new(o, "hwloc_package", json_string(ZO_HWLOC_PKG_VERSION));
  json_object_set_new(o, "jansson", json_string(JANSSON_VERSION));
  const char *je_version, *je_detail; /* what libzoffload's pinned pool finds (zoffload/pinned.h) */
  json_object_set_new(o, "jemalloc",
                      zo_host_jemalloc(&je_version, &je_detail)
                          ? json_pack("{s:s, s:s}", "version", je_version, "source", je_detail)
                          : json_pack("{s:n, s:s}", "version", "unavailable", je_detail));
  json_object_set_new(o, "openblas", json_string("not linked into libzoffload (zo-train only)"));
  return o;
}

static json_t *report_build(void) {
  json_t *o = json_object();
  json_object_set_new(o, "version", json_string(ZO_VERSION));
  json_object_set_new(o, "build_type", json_string(ZO_BUILD_TYPE));
  json_object_set_new(o, "c_compiler", json_string(ZO_C_COMPILER));
  json_object_set_new(o, "cuda", json_boolean(ZO_HAVE_CUDA));
  json_object_set_new(o, "nccl", json_boolean(ZO_HAVE_NCCL));
  json_object_set_new(o, "mpi", json_false());
  return o;
}

/* ----------------------------------------------------------------- text */
static void print_text(const char *key, json_t *v, int depth) {
  int pad = depth * 2;
  if (json_is_object(v)) {
    if (key) printf("%*s%s:\n", pad, "", key);
    const char *k;
    json_t *c;
    json_object_foreach(v, k, c) print_text(k, c, depth + (key ? 1 : 0));
  } else if (json_is_array(v)) {
    printf("%*s%s: %s\n", pad, "", key, json_array_size(v) ? "" : "none");
    size_t i;
    json_t *c;
    json_array_foreach(v, i, c) {
      char idx[32];
      snprintf(idx, sizeof idx, "[%zu]", i);
      print_text(idx, c, depth + 1);
    }
  } else {
    char *s = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY);
    const char *txt = json_is_string(v) ? json_string_value(v) : s;
    if (json_is_true(v)) txt = "yes";
    if (json_is_false(v)) txt = "no";
    printf("%*s%-*s %s\n", pad, "", 26 - pad, key, txt ? txt : "?");
    free(s);
  }
}

int main(int argc, char **argv) {
  const char *path = NULL, *config = NULL;
  int as_json = 0, speeds = 0;
  static const struct option longopts[] = {{"path", required_argument, NULL, 'p'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"speeds", no_argument, NULL, 's'},
                                           {"config", required_argument, NULL, 'c'},
                                           {0}};
  int c;
  opterr = 0; /* zo_tool_option_error() says it in one line, with the nearest flag */
  while ((c = getopt_long(argc, argv, ":p:jhsc:", longopts, NULL)) != -1) {
    switch (c) {
      case 'p': path = optarg; break;
      case 'j': as_json = 1; break;
      case 's': speeds = 1; break;
      case 'c': config = optarg; break;
      case 'h': usage(stdout); return 0;
      default: return zo_tool_option_error("zo-report", c, argc, argv, longopts);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "zo-report: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  zo_config_t cfg;
  zo_config_defaults(&cfg);
  cfg.bf16.enabled = 1;
  if (config) {
    static const char *const app_blocks[] = {"model", "data", "train",
                                             NULL}; /* zo-train's own blocks */
    const zo_config_opts co = {.app_blocks = app_blocks};
    if (zo_config_load_file(config, &co, &cfg) != ZO_OK) {
      fprintf(stderr, "zo-report: --config: %s\n", zo_last_error());
      return 2;
    }
  }
  json_t *r = json_object();
  json_object_set_new(r, "zoffload", report_build());
  json_object_set_new(r, "cpu", report_cpu());
  json_object_set_new(r, "topology", report_topology());
  json_object_set_new(r, "gpu", report_gpu());
  json_object_set_new(r, "nccl", report_nccl());
  json_object_set_new(r, "mpi", json_string("not built"));
  json_object_set_new(r, "io_uring", report_io_uring());
  if (path) json_object_set_new(r, "path", report_path(path));
  json_object_set_new(r, "memlock", report_memlock());
  json_object_set_new(r, "libraries", report_libraries());
  json_t *sp =
      speeds ? report_speeds(&cfg, path) : NULL; /* last: nothing else runs while it measures */
  if (sp && as_json) json_object_set_new(r, "speeds", sp), sp = NULL;
  if (as_json) {
    char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s) puts(s);
    free(s);
  } else {
    print_text(NULL, r, 0);
    if (sp) print_speeds(sp);
  }
  json_decref(sp);
  json_decref(r);
  return 0;
}
