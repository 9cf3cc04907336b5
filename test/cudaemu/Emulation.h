//===- Emulation.h - What the CUDA emulation's parts share ------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA emulation runs the CUDA runtime library's kernels and the CUDA
// trainers' generated code on the CPU, so that the kernels' indexing,
// barriers, warp exchanges and tensor-core tiles are tested on machines
// without a GPU. Device memory is host memory, every stream runs its work
// at once on the calling thread (or records it while the stream is being
// captured into a graph), and a kernel's blocks run one after the other,
// each block's threads as fibers that switch at barriers and warp
// operations (Fibers.cpp).
//
// This header is what the emulation's own sources share: the CUDA runtime
// API (CudaRuntime.cpp), cuBLAS and cuBLASLt (Cublas.cpp) and the launcher.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_TEST_CUDAEMU_EMULATION_H
#define MTC_TEST_CUDAEMU_EMULATION_H

#include <cuda_runtime_api.h>

#include <functional>

namespace mtc::cudaemu {

/// Runs `work` now, or appends it to the graph being captured when `stream`
/// is capturing. Returns cudaSuccess, or the error of a stream that is not
/// one of the emulation's.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work);

/// Records `error` for the next cudaGetLastError / cudaPeekAtLastError.
void setLastError(cudaError_t error);

/// The dynamic shared memory `kernel` opted into (cudaFuncSetAttribute).
void setSharedLimit(const void *kernel, size_t bytes);

/// Reports a use of the API that a GPU would reject or that breaks a rule
/// the emulation checks (an out-of-range launch, a deadlocked barrier) on
/// stderr, once per message; the caller then returns an error code.
void complain(const char *what);

} // namespace mtc::cudaemu

#endif // MTC_TEST_CUDAEMU_EMULATION_H
