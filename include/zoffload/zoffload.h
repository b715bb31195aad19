/*
 * zoffload/zoffload.h - umbrella header: everything a program needs to train
 * with optimizer state offloaded to pinned host memory or NVMe.
 *
 *   status.h  result codes, per-thread error message, logging
 *   dtype.h   element types
 *   config.h  DeepSpeed-style JSON configuration
 *   engine.h  the offload engine (parameters, tiers, optimizer step)
 *   adam.h    CPU Adam/AdamW kernels, casts, gradient norms
 *   swap.h    io_uring swap files (the NVMe tier)
 *   device.h  device memory, streams, events (host backend; CUDA later)
 *   comm.h    collectives between ranks (self now; NCCL/MPI later)
 *   speeds.h  machine speeds (disk, link, CPU Adam) for the placement planner
 */
#ifndef ZOFFLOAD_H
#define ZOFFLOAD_H

#include "zoffload/status.h"
#include "zoffload/dtype.h"
#include "zoffload/config.h"
#include "zoffload/adam.h"
#include "zoffload/swap.h"
#include "zoffload/device.h"
#include "zoffload/arena.h"
#include "zoffload/comm.h"
#include "zoffload/engine.h"
#include "zoffload/budget.h"
#include "zoffload/plan.h"
#include "zoffload/checkpoint.h"
#include "zoffload/speeds.h"

#define ZOFFLOAD_VERSION_MAJOR 0
#define ZOFFLOAD_VERSION_MINOR 1
#define ZOFFLOAD_VERSION_PATCH 0

#endif /* ZOFFLOAD_H */
