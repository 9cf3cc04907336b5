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
#include "mtc/runtime/Status.h"

#include <cstdint>

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

#ifdef __CUDACC__
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

/// Folds data errors that kernels recorded on the device (e.g. labels out
/// of range) into ctx and clears them. The stream must be synchronized.
Status collectDeviceErrors(Context &ctx);

} // namespace mtc::rt::cuda

#endif // MTC_RUNTIME_LIB_CUDA_LAUNCH_H
