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

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mtc::rt {

namespace {

Status cudaFailure(const std::string &what, cudaError_t error) {
  return Status::error(what + ": " + cudaGetErrorString(error));
}

} // namespace

cudaStream_t cudaStreamOf(Context &ctx) { return ctx.stream; }

void profileBegin(Context &ctx, int op) {
  if (!ctx.profiling)
    return;
  ctx.profileStart[op] = 1.0;
  cudaEventRecord(ctx.profileEvents[2 * op], ctx.stream);
}

void profileEnd(Context &ctx, int op) {
  if (ctx.profiling)
    cudaEventRecord(ctx.profileEvents[2 * op + 1], ctx.stream);
}

const StepCounters *deviceStepCounters(Context &ctx) {
  return cuda::stepCounters(ctx);
}

void checkLaunch(Context &ctx, const char *kernelName) {
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    reportError(ctx, std::string("CUDA kernel '") + kernelName +
                         "' failed to launch: " + cudaGetErrorString(error));
}

namespace cuda {

const StepCounters *stepCounters(Context &ctx) {
  auto *counters = static_cast<StepCounters *>(ctx.deviceCounters);
  if (ctx.batch == ctx.uploadedBatch &&
      ctx.optimizerStep == ctx.uploadedOptimizerStep)
    return counters;
  // From pageable memory: the copy has taken the values when the call
  // returns, so the host may change them right away.
  const StepCounters values = {ctx.batch, ctx.optimizerStep};
  cudaError_t error = cudaMemcpyAsync(counters, &values, sizeof(values),
                                      cudaMemcpyHostToDevice, ctx.stream);
  if (error != cudaSuccess) {
    reportError(ctx, std::string("cannot upload the step counters: ") +
                         cudaGetErrorString(error));
    return counters;
  }
  ctx.uploadedBatch = ctx.batch;
  ctx.uploadedOptimizerStep = ctx.optimizerStep;
  return counters;
}

size_t sharedBytesOptin() {
  constexpr int kCachedDevices = 64;
  static int cache[kCachedDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return 0;
  bool cached = device >= 0 && device < kCachedDevices;
  if (cached && cache[device] > 0)
    return static_cast<size_t>(cache[device]);
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             device) != cudaSuccess)
    return 0;
  if (cached)
    cache[device] = optin;
  return static_cast<size_t>(optin);
}

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

/// cuBLASLt's and cuBLAS's workspaces: what NVIDIA recommends for Hopper
/// GEMMs each.
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;

Status initialize(Context &ctx) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess)
    return cudaFailure("no usable CUDA device", error);
  if (count == 0)
    return Status::error("no CUDA device is visible");
  int device = 0;
  error = cudaGetDevice(&device);
  if (error == cudaSuccess)
    error = cudaDeviceGetAttribute(&ctx.smCount, cudaDevAttrMultiProcessorCount,
                                   device);
  if (error != cudaSuccess)
    return cudaFailure("cannot query the CUDA device", error);
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
  // After cublasSetStream, which resets the handle to cuBLAS's own pool:
  // without a workspace of ours, a GEMM being captured into a CUDA graph
  // may allocate one inside the graph.
  error = cudaMalloc(&ctx.blasWorkspace, kBlasWorkspaceBytes);
  if (error != cudaSuccess)
    return cudaFailure("cannot allocate the cuBLAS workspace", error);
  status = cublasSetWorkspace(ctx.blas, ctx.blasWorkspace, kBlasWorkspaceBytes);
  if (status != CUBLAS_STATUS_SUCCESS)
    return Status::error(std::string("cannot set the cuBLAS workspace: ") +
                         cublasGetStatusString(status));
  ctx.blasWorkspaceBytes = kBlasWorkspaceBytes;
  status = cublasLtCreate(&ctx.lt);
  if (status != CUBLAS_STATUS_SUCCESS) {
    ctx.lt = nullptr;
    return Status::error(std::string("cannot initialize cuBLASLt: ") +
                         cublasGetStatusString(status));
  }
  error = cudaMalloc(&ctx.ltWorkspace, kLtWorkspaceBytes);
  if (error != cudaSuccess)
    return cudaFailure("cannot allocate the cuBLASLt workspace", error);
  ctx.ltWorkspaceBytes = kLtWorkspaceBytes;
  error = cudaMalloc(&ctx.deviceCounters, sizeof(StepCounters));
  if (error != cudaSuccess)
    return cudaFailure("cannot allocate the step counters", error);
  // Looked up now, not while a step is being captured.
  cuda::deviceErrorRecord(ctx);
  if (hasError(ctx))
    return Status::error(takeError(ctx).message);
  return Status::success();
}

void shutdown(Context &ctx) {
  for (cudaEvent_t e : ctx.profileEvents)
    if (e)
      cudaEventDestroy(e);
  ctx.profileEvents.clear();
  for (Context::StepGraph &g : ctx.graphs) {
    if (g.exec)
      cudaGraphExecDestroy(g.exec);
    g = Context::StepGraph();
  }
  if (ctx.deviceCounters)
    cudaFree(ctx.deviceCounters);
  ctx.deviceCounters = nullptr;
  ctx.uploadedBatch = ctx.uploadedOptimizerStep = -1;
  ctx.errorRecord = nullptr;
  if (ctx.blas)
    cublasDestroy(ctx.blas);
  if (ctx.blasWorkspace)
    cudaFree(ctx.blasWorkspace);
  ctx.blasWorkspace = nullptr;
  ctx.blasWorkspaceBytes = 0;
  if (ctx.lt)
    cublasLtDestroy(ctx.lt);
  if (ctx.ltWorkspace)
    cudaFree(ctx.ltWorkspace);
  ctx.lt = nullptr;
  ctx.ltWorkspace = nullptr;
  ctx.ltWorkspaceBytes = 0;
  ctx.ltAlgos.clear();
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

uint64_t workspaceBytes(const Context &ctx) {
  return ctx.ltWorkspaceBytes + ctx.blasWorkspaceBytes +
         (ctx.deviceCounters ? sizeof(StepCounters) : 0);
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

// Page-locked memory is marked by a header before the buffer, so that
// releaseStaging knows which way it was allocated.
namespace {
constexpr uint64_t kStagingHeader = 256;
}

unsigned char *allocateStaging(uint64_t bytes) {
  void *p = nullptr;
  const bool pinned = cudaHostAlloc(&p, bytes + kStagingHeader,
                                    cudaHostAllocDefault) == cudaSuccess;
  if (!pinned) {
    cudaGetLastError(); // not sticky: ordinary memory will do
    p = std::malloc(bytes + kStagingHeader);
    if (!p)
      return nullptr;
  }
  *static_cast<unsigned char *>(p) = pinned ? 1 : 0;
  return static_cast<unsigned char *>(p) + kStagingHeader;
}

void releaseStaging(unsigned char *ptr) {
  if (!ptr)
    return;
  unsigned char *base = ptr - kStagingHeader;
  if (*base == 1)
    cudaFreeHost(base);
  else
    std::free(base);
}

Status allocateZeroed(Context &ctx, uint64_t bytes, unsigned char **ptr) {
  if (Status s = allocate(bytes, ptr); !s.ok())
    return s;
  return memsetZero(ctx, *ptr, bytes);
}

void releaseZeroed(unsigned char *ptr, uint64_t) { cudaFree(ptr); }

Status memsetZero(Context &ctx, void *dst, uint64_t bytes) {
  cudaError_t error = cudaMemsetAsync(dst, 0, bytes, ctx.stream);
  if (error == cudaSuccess)
    error = cudaStreamSynchronize(ctx.stream);
  return error == cudaSuccess ? Status::success()
                              : cudaFailure("device memset failed", error);
}

// From pageable host memory the copy is staged before cudaMemcpyAsync
// returns (CUDA's API synchronization behavior), so `src` may be reused at
// once and nothing waits for the device.
Status copyToDevice(Context &ctx, void *dst, const void *src, uint64_t bytes) {
  cudaError_t error =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream);
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

Status copyToHostLater(Context &ctx, void *dst, const void *src,
                       uint64_t bytes) {
  cudaError_t error =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream);
  return error == cudaSuccess
             ? Status::success()
             : cudaFailure("copy from the device failed", error);
}

// One wait: the device's error record is read in the same stream order as
// the copies queued before it.
Status synchronize(Context &ctx) {
  cuda::DeviceErrorRecord record = {};
  if (Status s = cuda::queueDeviceErrorsRead(ctx, record); !s.ok())
    return s;
  cudaError_t error = cudaStreamSynchronize(ctx.stream);
  if (error == cudaSuccess)
    error = cudaGetLastError();
  if (error != cudaSuccess)
    return cudaFailure("CUDA error during the step", error);
  return cuda::foldDeviceErrors(ctx, record);
}

Status profileSetup(Context &ctx, int ops) {
  ctx.profiling = true;
  ctx.cudaGraphs = false; // events time the kernels one by one
  ctx.profileMs.assign(ops, 0.0);
  ctx.profileStart.assign(ops, 0.0); // 1: recorded since the last collect
  ctx.profileEvents.assign(2 * static_cast<size_t>(ops), nullptr);
  for (cudaEvent_t &e : ctx.profileEvents) {
    cudaError_t error = cudaEventCreate(&e);
    if (error != cudaSuccess)
      return cudaFailure("cannot create the profiling events", error);
  }
  return Status::success();
}

Status profileCollect(Context &ctx) {
  for (size_t op = 0; op < ctx.profileMs.size(); ++op) {
    // An op that did not run (an update on a micro-batch that is not the
    // last) keeps its events of an earlier step.
    if (ctx.profileStart[op] == 0.0)
      continue;
    ctx.profileStart[op] = 0.0;
    float ms = 0.0f;
    cudaError_t error = cudaEventElapsedTime(
        &ms, ctx.profileEvents[2 * op], ctx.profileEvents[2 * op + 1]);
    if (error != cudaSuccess)
      return cudaFailure("cannot read the profiling events", error);
    ctx.profileMs[op] += ms;
  }
  return Status::success();
}

namespace {

/// Captures one call of `step` on ctx's stream into an executable graph;
/// null (with the reason in `why`) when the driver refuses.
cudaGraphExec_t captureStep(Context &ctx, StepFunction step,
                            unsigned char *arena, std::string &why) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaError_t error =
      cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal);
  if (error == cudaSuccess) {
    step(ctx, arena);
    error = cudaStreamEndCapture(ctx.stream, &graph);
  }
  if (error == cudaSuccess)
    error = cudaGraphInstantiate(&exec, graph, 0);
  if (graph)
    cudaGraphDestroy(graph);
  if (error == cudaSuccess && !hasError(ctx))
    return exec;
  // Launch errors recorded while capturing came from the capture itself;
  // the eager run that follows reports any real one again.
  why = hasError(ctx) ? takeError(ctx).message : cudaGetErrorString(error);
  cudaGetLastError();
  if (exec)
    cudaGraphExecDestroy(exec);
  return nullptr;
}

} // namespace

Status runStep(Context &ctx, StepFunction step, unsigned char *arena,
               int64_t microBatches) {
  cuda::stepCounters(ctx);
  Context::StepGraph &g =
      ctx.graphs[(ctx.microBatch == 0 ? 1 : 0) |
                 (ctx.microBatch + 1 == microBatches ? 2 : 0)];
  if (!ctx.cudaGraphs || g.failed || !g.warm) {
    step(ctx, arena);
    g.warm = true;
    return Status::success();
  }
  if (!g.exec) {
    std::string why;
    g.exec = captureStep(ctx, step, arena, why);
    if (!g.exec) {
      g.failed = true;
      std::fprintf(stderr,
                   "mtc trainer: note: the step could not be captured as a "
                   "CUDA graph (%s); launching its kernels one by one\n",
                   why.c_str());
      step(ctx, arena);
      return Status::success();
    }
  }
  cudaError_t error = cudaGraphLaunch(g.exec, ctx.stream);
  return error == cudaSuccess ? Status::success()
                              : cudaFailure("CUDA graph launch failed", error);
}

} // namespace device
} // namespace mtc::rt
