//===- Launch.h - Helpers shared by the CUDA kernels ------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Launch geometry and error plumbing. Kernels use grid-stride loops over
// int64 indices, so the grid can be capped without limiting tensor sizes.
// Every launch goes on the context's stream and is followed by
// checkLaunch(), which records a failure in the context instead of aborting.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_CUDA_LAUNCH_H
#define MTC_RUNTIME_LIB_CUDA_LAUNCH_H

#include "Context.h"

#include "mtc/runtime/Cuda.h"
#include "mtc/runtime/Random.h"
#include "mtc/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace mtc::rt::cuda {

constexpr int kBlock = 256;
constexpr int64_t kMaxGrid = 1 << 20;

/// Blocks for `work` items at `perBlock` items per block, at least 1.
inline unsigned gridFor(int64_t work, int64_t perBlock = kBlock) {
  int64_t blocks = (work + perBlock - 1) / perBlock;
  if (blocks < 1)
    blocks = 1;
  if (blocks > kMaxGrid)
    blocks = kMaxGrid;
  return static_cast<unsigned>(blocks);
}

#if defined(__CUDACC__) || defined(MTC_CUDA_EMULATION)
/// First index of this thread and the stride of a grid-stride loop.
__device__ inline int64_t threadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t threadCount() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}
#endif

/// Records a failed cuBLAS call; returns whether it succeeded.
bool checkBlas(Context &ctx, cublasStatus_t status, const char *what);

/// What a kernel found wrong with the data of a step.
enum class DeviceErrorKind : int {
  None = 0,
  Label = 1,       ///< a cross-entropy label outside [0, classes)
  GatherIndex = 2, ///< a gather index outside [-dim, dim)
};

/// The first data error kernels found, kept in device memory until
/// collectDeviceErrors() turns it into the context's error.
struct DeviceErrorRecord {
  int failed;
  int kind;           ///< DeviceErrorKind
  long long value;    ///< the bad label or index
  long long position; ///< where it is in its (flattened) tensor
  long long bound;    ///< number of classes, or the gathered axis size
  long long inner;    ///< labels: positions per batch row
};

/// The device address of the record kernels write to, which they take as an
/// argument: a __device__ variable is visible only to the translation unit
/// defining it unless the library were built with relocatable device code.
/// Null (after reporting the failure to ctx) if it cannot be found.
DeviceErrorRecord *deviceErrorRecord(Context &ctx);

#if defined(__CUDACC__) || defined(MTC_CUDA_EMULATION)
/// Keeps the first error that wins the race; any one is a correct report,
/// and the run stops on it.
__device__ inline void recordDeviceError(DeviceErrorRecord *record,
                                         DeviceErrorKind kind, long long value,
                                         long long position, long long bound,
                                         long long inner) {
  if (!record || atomicCAS(&record->failed, 0, 1) != 0)
    return;
  record->kind = static_cast<int>(kind);
  record->value = value;
  record->position = position;
  record->bound = bound;
  record->inner = inner;
}
#endif

/// Dynamic shared memory a kernel may use without opting in.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

/// The most dynamic shared memory a block may opt into on the current
/// device, 0 when it cannot be queried. Cached per device, so a step being
/// captured into a CUDA graph (which ran eagerly before) queries nothing.
size_t sharedBytesOptin();

/// Opts `kernel` into `bytes` of dynamic shared memory when that is more
/// than the default allows (kDefaultSharedBytes less the kernel's static
/// shared memory: without opting in, the two together stay within it);
/// reports to ctx and returns false when the device refuses. Each kernel
/// instance asks once per size it grows to, so a step being captured into
/// a CUDA graph sets no attribute.
template <auto kernel>
bool allowSharedBytes(Context &ctx, size_t bytes, const char *name) {
  static size_t granted = [] { // per kernel
    cudaFuncAttributes attributes = {};
    if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
      (void)cudaGetLastError(); // not sticky: opt in every time instead
      return size_t(0);
    }
    return attributes.sharedSizeBytes < kDefaultSharedBytes
               ? kDefaultSharedBytes - attributes.sharedSizeBytes
               : size_t(0);
  }();
  if (bytes <= granted)
    return true;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes));
  if (error == cudaSuccess) {
    granted = bytes;
    return true;
  }
  reportError(ctx, std::string(name) + ": cannot use " + std::to_string(bytes) +
                       " bytes of shared memory: " + cudaGetErrorString(error));
  return false;
}

/// Queues the copy of the data errors that kernels recorded on the device
/// (e.g. labels out of range) into `record`, which holds them once the
/// stream is synchronized.
Status queueDeviceErrorsRead(Context &ctx, DeviceErrorRecord &record);
/// Folds a record read by queueDeviceErrorsRead (the stream synchronized
/// since) into ctx and, when it holds an error, clears the device's.
Status foldDeviceErrors(Context &ctx, const DeviceErrorRecord &record);

/// The device copy of ctx's counters, uploaded first (on the stream) when
/// the host's changed since the last upload. device::runStep uploads them
/// before every step, so none is uploaded while a step is being captured.
const StepCounters *stepCounters(Context &ctx);

} // namespace mtc::rt::cuda

#endif // MTC_RUNTIME_LIB_CUDA_LAUNCH_H
