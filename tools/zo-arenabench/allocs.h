/*
 * allocs.h - zo-arenabench's allocator comparison: one training step's allocation pattern (the fetch and
 * release of a stage-3 model's weights: each layer's twelve tensors allocated in forward order with the
 * layer two ahead live, freed two layers later, then the same in backward order) replayed on the device
 * arena (zoffload/arena.h: zo_arena_alloc, and zo_arena_free ordered on a stream as the engine frees),
 * on cuMemAlloc/cuMemFree (what cudaMalloc/cudaFree call: every free synchronizes the device), and on
 * CUDA's stream-ordered caching pool (cuMemAllocAsync/cuMemFreeAsync from the device's default pool,
 * its release threshold raised so freed memory stays cached, as PyTorch's cudaMallocAsync backend keeps
 * it). Only allocation and free are timed: no kernel touches the memory.
 */
#ifndef ZO_ARENABENCH_ALLOCS_H
#define ZO_ARENABENCH_ALLOCS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "zoffload/arena.h"
#include "zoffload/device.h"

enum { ALLOC_ARENA, ALLOC_CUMEMALLOC, ALLOC_POOL, ALLOC_KINDS };

/* One allocator over the trace. */
typedef struct alloc_result {
  const char *name;
  int measured;
  char note[192];     /* why not measured */
  double us_per_pair; /* median over the rounds of a round's time / its alloc+free pairs */
  double round_ms;    /* the median round */
  double peak_bytes;  /* arena: its peak live bytes in the trace; cuMemAlloc: the trace's peak
                          live; pool: its reserved high-water mark */
} alloc_result;

typedef struct alloc_trace {
  int d_model, layers, tensors; /* the model whose weights the trace fetches; tensors a layer */
  uint64_t pairs;               /* alloc+free pairs a round */
  double trace_peak_bytes;      /* the most bytes live at once (requests, unrounded) */
  int rounds;
  alloc_result r[ALLOC_KINDS];
} alloc_trace;

/*
 * alloc_trace_run() - the trace for a model as wide as fits a third of @cap bytes (three layers live)
 * at 24 layers, one untimed round then @rounds timed ones per allocator, on @a (empty on entry and
 * exit; @dev its device) and, when @dev is a CUDA device of @ordinal, the two CUDA allocators (else
 * they say why not). Returns 0, or -1 after printing an arena error.
 */
int alloc_trace_run(zo_device_t *dev, zo_arena_t *a, size_t cap, int ordinal, int rounds,
                    alloc_trace *t);

/* alloc_trace_print() - the figures, one line an allocator, on stdout. */
void alloc_trace_print(const alloc_trace *t);

/* alloc_trace_json() - the figures as a JSON object (new reference). */
json_t *alloc_trace_json(const alloc_trace *t);

#endif /* ZO_ARENABENCH_ALLOCS_H */
