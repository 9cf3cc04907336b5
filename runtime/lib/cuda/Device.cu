//===- Device.cu - The CUDA device layer ----------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// One non-blocking stream and one cuBLAS handle per run. Host <-> device
// copies synchronize the stream: the trainer only copies at the edges of a
// step (the batch in, the loss out), where it has to wait anyway.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "Device.h"
#include "Launch.h"

#include "mtc/runtime/Cuda.h"

#include <string>

namespace mtc::rt {

namespace {

Status cudaFailure(const std::string &what, cudaError_t error) {
  return Status::error(what + ": " + cudaGetErrorString(error));
}

} // namespace

cudaStream_t cudaStreamOf(Context &ctx) { return ctx.stream; }

void checkLaunch(Context &ctx, const char *kernelName) {
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    reportError(ctx, std::string("CUDA kernel '") + kernelName +
                         "' failed to launch: " + cudaGetErrorString(error));
}

namespace cuda {

bool checkBlas(Context &ctx, cublasStatus_t status, const char *what) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return true;
  reportError(ctx, std::string(what) + ": cuBLAS error " +
                       cublasGetStatusString(status));
  return false;
}

} // namespace cuda

namespace device {

const char *kind() { return "cuda"; }

Status initialize(Context &ctx) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess)
    return cudaFailure("no usable CUDA device", error);
  if (count == 0)
    return Status::error("no CUDA device is visible");
  error = cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking);
  if (error != cudaSuccess)
    return cudaFailure("cannot create a CUDA stream", error);
  cublasStatus_t status = cublasCreate(&ctx.blas);
  if (status != CUBLAS_STATUS_SUCCESS) {
    ctx.blas = nullptr;
    return Status::error(std::string("cannot initialize cuBLAS: ") +
                         cublasGetStatusString(status));
  }
  status = cublasSetStream(ctx.blas, ctx.stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    return Status::error(std::string("cannot initialize cuBLAS: ") +
                         cublasGetStatusString(status));
  return Status::success();
}

void shutdown(Context &ctx) {
  if (ctx.blas)
    cublasDestroy(ctx.blas);
  if (ctx.stream)
    cudaStreamDestroy(ctx.stream);
  ctx.blas = nullptr;
  ctx.stream = nullptr;
}

std::string name() {
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    return "unknown CUDA device";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ")";
}

bool memoryInfo(uint64_t &freeBytes, uint64_t &totalBytes) {
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess)
    return false;
  freeBytes = f;
  totalBytes = t;
  return true;
}

Status allocate(uint64_t bytes, unsigned char **ptr) {
  void *p = nullptr;
  cudaError_t error = cudaMalloc(&p, bytes ? bytes : 1);
  if (error != cudaSuccess)
    return cudaFailure("cannot allocate the arena of " + std::to_string(bytes) +
                           " bytes on the device",
                       error);
  *ptr = static_cast<unsigned char *>(p);
  return Status::success();
}

void release(unsigned char *ptr) { cudaFree(ptr); }

Status memsetZero(Context &ctx, void *dst, uint64_t bytes) {
  cudaError_t error = cudaMemsetAsync(dst, 0, bytes, ctx.stream);
  if (error == cudaSuccess)
    error = cudaStreamSynchronize(ctx.stream);
  return error == cudaSuccess ? Status::success()
                              : cudaFailure("device memset failed", error);
}

Status copyToDevice(Context &ctx, void *dst, const void *src, uint64_t bytes) {
  cudaError_t error =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream);
  if (error == cudaSuccess)
    error = cudaStreamSynchronize(ctx.stream);
  return error == cudaSuccess ? Status::success()
                              : cudaFailure("copy to the device failed", error);
}

Status copyToHost(Context &ctx, void *dst, const void *src, uint64_t bytes) {
  cudaError_t error =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream);
  if (error == cudaSuccess)
    error = cudaStreamSynchronize(ctx.stream);
  return error == cudaSuccess
             ? Status::success()
             : cudaFailure("copy from the device failed", error);
}

Status synchronize(Context &ctx) {
  cudaError_t error = cudaStreamSynchronize(ctx.stream);
  if (error == cudaSuccess)
    error = cudaGetLastError();
  if (error != cudaSuccess)
    return cudaFailure("CUDA error during the step", error);
  return cuda::collectDeviceErrors(ctx);
}

} // namespace device
} // namespace mtc::rt
