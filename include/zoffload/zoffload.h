/*
 * zoffload/zoffload.h - umbrella header: everything a program needs to train
 * with the optimizer state (and, at ZeRO stage 3, the working weights)
 * offloaded to pinned host memory or NVMe, on one rank or several.
 *
 *   status.h      result codes, per-thread error message, logging
 *   dtype.h       element types
 *   config.h      DeepSpeed-style JSON configuration
 *   engine.h      the offload engine (parameters, tiers, optimizer step)
 *   handover.h    a front's gradient hand-over space: one fence per space's worth
 *   budget.h      the start-up budget: each tier's bytes against the machine
 *   plan.h        the memory plan: every buffer of every tier
 *   checkpoint.h  checkpoint save and load, safetensors export
 *   adam.h        CPU Adam/AdamW kernels, casts, gradient norms
 *   swap.h        io_uring swap files (the NVMe tier)
 *   device.h      device memory, streams, events: the host backend (an emulated
 *                 device) and the CUDA backend (an NVIDIA GPU, when built with CUDA)
 *   arena.h       the device arena every engine allocation comes from
 *   comm.h        collectives between ranks: self, MPI, NCCL (when built with
 *                 them), or the caller's callbacks
 *   speeds.h      machine speeds (disk, link, CPU Adam) for the placement planner
 *
 * Included separately: placement.h (the placement planner and step-time model)
 * and pinned.h (the pinned host pool).
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
#include "zoffload/handover.h"
#include "zoffload/budget.h"
#include "zoffload/plan.h"
#include "zoffload/checkpoint.h"
#include "zoffload/speeds.h"
#include "zoffload/parse.h"

#define ZOFFLOAD_VERSION_MAJOR 0
#define ZOFFLOAD_VERSION_MINOR 1
#define ZOFFLOAD_VERSION_PATCH 0

#endif /* ZOFFLOAD_H */
