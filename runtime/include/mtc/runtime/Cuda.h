//===- Cuda.h - CUDA specifics for generated kernels ------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Generated CUDA trainers launch their own elementwise kernels on the stream
// the runtime owns, so the whole step stays ordered on one stream.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_CUDA_H
#define MTC_RUNTIME_CUDA_H

#include <cuda_runtime.h>

namespace mtc::rt {
struct Context;
/// The stream every kernel of the step runs on.
cudaStream_t cudaStreamOf(Context &ctx);
/// Reports a failed launch (cudaGetLastError) with the kernel's name; the
/// trainer stops with a clear error after the step.
void checkLaunch(Context &ctx, const char *kernelName);
} // namespace mtc::rt

#endif // MTC_RUNTIME_CUDA_H
