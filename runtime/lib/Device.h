//===- Device.h - The device abstraction used by the trainer ----*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The handful of device operations the host side of a trainer needs. The
// trainer makes exactly one allocation (the arena planned at compile time)
// and moves data with explicit copies, so the same trainer code serves the
// CPU (where "device" memory is host memory) and CUDA.
//
// Implemented by runtime/lib/cpu/Device.cpp and runtime/lib/cuda/Device.cu.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_DEVICE_H
#define MTC_RUNTIME_LIB_DEVICE_H

#include "mtc/runtime/Status.h"

#include <cstdint>
#include <string>

namespace mtc::rt {

struct Context;

namespace device {

/// "cpu" or "cuda", compared with ModelDesc::target so that a trainer linked
/// against the wrong runtime fails clearly.
const char *kind();

/// Prepares `ctx` for kernels (CUDA: picks the device, creates the stream
/// and the cuBLAS handle).
Status initialize(Context &ctx);
/// Releases what initialize() created. Safe after a failed initialize().
void shutdown(Context &ctx);

/// A human-readable name of the device, e.g. "NVIDIA H100 80GB HBM3".
std::string name();
/// Free and total memory of the device in bytes; false when unknown.
bool memoryInfo(uint64_t &freeBytes, uint64_t &totalBytes);
/// Device memory initialize() allocated beside the arena (CUDA: cuBLASLt's
/// workspace and the step counters; the CPU: none).
uint64_t workspaceBytes(const Context &ctx);

/// The single arena allocation (at least 256-byte aligned).
Status allocate(uint64_t bytes, unsigned char **ptr);
void release(unsigned char *ptr);
/// Host memory a batch is gathered in before copyToDevice: page-locked on
/// CUDA where the driver grants it (the copy then runs as DMA without the
/// driver's staging), else ordinary memory; null when none. Released by
/// releaseStaging.
unsigned char *allocateStaging(uint64_t bytes);
void releaseStaging(unsigned char *ptr);

Status memsetZero(Context &ctx, void *dst, uint64_t bytes);
/// The arena: `bytes` (at least 256-byte aligned) reading as zeros. On the
/// CPU its pages are mapped fresh and become resident only as the trainer
/// first touches them, so the process holds no more than it uses.
Status allocateZeroed(Context &ctx, uint64_t bytes, unsigned char **ptr);
/// Releases an allocateZeroed() allocation of `bytes` bytes.
void releaseZeroed(unsigned char *ptr, uint64_t bytes);
/// Copies from host memory to device memory, after the work launched
/// before; returns once `src` may be reused, without waiting for the
/// device (a failed copy is reported by the next synchronize()).
Status copyToDevice(Context &ctx, void *dst, const void *src, uint64_t bytes);
/// Copies from device memory to host memory; returns once `dst` holds the
/// data (which orders it after every kernel launched before).
Status copyToHost(Context &ctx, void *dst, const void *src, uint64_t bytes);
/// Queues that copy after the work launched before: `dst` holds the data
/// once synchronize() returns. A step's results are read this way, so the
/// host waits for the device once a step.
Status copyToHostLater(Context &ctx, void *dst, const void *src,
                       uint64_t bytes);
/// Waits for all work on the context (one wait), then folds errors that
/// kernels recorded on the device (CUDA) into the context's error.
Status synchronize(Context &ctx);

/// --profile: prepares timers for `ops` ops (profileBegin / profileEnd
/// record them), and after a synchronized step adds each op's time to
/// ctx.profileMs.
Status profileSetup(Context &ctx, int ops);
Status profileCollect(Context &ctx);

/// The generated training step.
using StepFunction = void (*)(Context &, unsigned char *);

/// Runs one training step (micro-batch ctx.microBatch of `microBatches`).
/// The CPU calls `step`. CUDA, unless ctx.cudaGraphs is off, runs the first
/// step of each micro-batch position (first, last, both or neither of its
/// optimizer step) eagerly, captures the second into a CUDA graph and
/// replays that graph from then on: one launch per step instead of one per
/// kernel. Kernels read the step counters from device memory, uploaded
/// here before every step, so the replayed graph sees each step's values.
/// A capture the driver refuses falls back to eager launches, with a note.
Status runStep(Context &ctx, StepFunction step, unsigned char *arena,
               int64_t microBatches);

} // namespace device
} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_DEVICE_H
