/*
 * linkbench.h - the host-device link limit the benchmarks (zo-stepbench, zo-swapbench) hold their
 * pipelines against: timed loops of zo_memcpy_async between pinned host memory and device memory,
 * one direction at a time, then both at once on two streams. Not part of the library, not a pipeline.
 */
#ifndef ZO_TOOLS_LINKBENCH_H
#define ZO_TOOLS_LINKBENCH_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "zoffload/device.h"

/* GB/s is 1e9 bytes per second throughout. */
typedef struct linkbench {
  int ok;                 /* 1: measured; 0: not (why in note) */
  size_t chunk_bytes;     /* bytes per copy: the pipeline's copy size */
  int copies;             /* copies per direction in one repetition */
  int reps;               /* repetitions of each measurement; the best is kept */
  double h2d_gbps;        /* H2D alone, one stream */
  double d2h_gbps;        /* D2H alone, one stream */
  double duplex_h2d_gbps; /* H2D while D2H runs on a second stream */
  double duplex_d2h_gbps; /* D2H while H2D runs */
  double duplex_gbps;     /* both directions' bytes / the time until both finished */
  int host_pinned;        /* the host buffers are mlock'ed (zo_pinned_is_pinned) */
  int host_registered; /* and registered with CUDA (zo_pinned_is_registered; 0 on the host backend) */
  char note[256];
} linkbench;

/*
 * linkbench_measure() - measure the link of @dev with copies of @chunk_bytes (> 0): two host buffers
 * from a pinned pool (opts.pin 1) and two device buffers of that size, a warm-up copy each way, then
 * @reps (>= 1) repetitions of: H2D alone, D2H alone, both at once. Each run enqueues enough copies to
 * move about 256 MiB per direction (4 to 4096 copies); its time runs from the first enqueue to a host
 * func queued after the last copy of the stream (so each direction of the duplex run has its own end).
 * Host backend: it measures the emulated link (zo_device_set_link_gbps) or memcpy when unlimited.
 * Synchronous. Allocates and frees everything it uses. Returns 0 with @out filled and ok = 1, or -1
 * with ok = 0 and note saying why (e.g. device memory for two chunks is not available); it never
 * leaves work queued on @dev.
 */
int linkbench_measure(zo_device_t *dev, size_t chunk_bytes, int reps, linkbench *out);

/* linkbench_json() - @l as a JSON object (fields as in the struct). New reference. */
json_t *linkbench_json(const linkbench *l);

/* linkbench_print() - one or two lines on @f, each starting with @indent. */
void linkbench_print(FILE *f, const char *indent, const linkbench *l);

#endif /* ZO_TOOLS_LINKBENCH_H */
