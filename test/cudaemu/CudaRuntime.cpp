//===- CudaRuntime.cpp - The CUDA runtime API on the CPU --------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The part of the CUDA runtime API that the mtc runtime and its generated
// trainers call, defined against the toolkit's own declarations so that the
// same sources link here instead of to libcudart. One emulated device: an
// sm_90 part with H200-like limits (its shared memory opt-in, 132 SMs).
//
// Device memory is host memory from the heap, filled with 0xff bytes (NaN
// as floats) when allocated. Work on a stream runs at once, in order, on the
// calling thread; a stream being captured records it instead, and a graph
// launch replays the records. What the emulation checks, as a GPU would
// refuse it: copies and fills outside an allocation's bytes, frees of
// unknown pointers, synchronizing or allocating while a stream is being
// captured (which invalidates the capture, as in the global and
// thread-local capture modes), oversized shared memory opt-ins. Each
// refusal is printed once on stderr and returned as an error code.
//
//===----------------------------------------------------------------------===//

#include "Emulation.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;
  cudaGraph_t graph = nullptr;
};
struct CUgraph_st {
  std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};
struct CUevent_st {
  double milliseconds = 0.0;
  bool recorded = false;
};

namespace mtc::cudaemu {
namespace {

constexpr size_t kSharedOptin = 232448; // 227 KB, as sm_90
constexpr size_t kDeviceBytes = size_t(141) << 30;
constexpr int kSms = 132;

/// The compute capability the device reports, major * 10 + minor: 90 (an
/// H100 or H200), or MTC_CUDAEMU_SM (e.g. 75, to run the kernels' choices
/// for a GPU without bfloat16 tensor cores); nothing else changes with it.
int computeCapability() {
  static const int sm = [] {
    const char *v = std::getenv("MTC_CUDAEMU_SM");
    const int parsed = v ? std::atoi(v) : 0;
    return parsed >= 50 && parsed < 200 ? parsed : 90;
  }();
  return sm;
}

/// The L2 cache size the device reports: 50 MiB (an H100's), or
/// MTC_CUDAEMU_L2_BYTES (e.g. a few KiB, to run the kernels' choices for a
/// problem that does not fit it, at the sizes of the tests).
int l2Bytes() {
  static const int bytes = [] {
    const char *v = std::getenv("MTC_CUDAEMU_L2_BYTES");
    const long parsed = v ? std::atol(v) : 0;
    return parsed > 0 && parsed <= (1L << 30) ? static_cast<int>(parsed)
                                              : 50 * 1024 * 1024;
  }();
  return bytes;
}

struct State {
  std::mutex mutex;
  std::map<uintptr_t, size_t> allocations; // start -> bytes
  size_t allocated = 0;
  std::set<cudaStream_t> streams;
  cudaError_t lastError = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  std::set<std::string> complained;
  int capturingStreams = 0;
};

State &state() {
  static State s;
  return s;
}

double nowMilliseconds() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch())
      .count();
}

/// Whether [p, p + bytes) lies inside one allocation.
bool isDeviceRange(const void *p, size_t bytes) {
  State &s = state();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(a);
  if (it == s.allocations.begin())
    return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

/// Refuses a call a GPU refuses while a stream is being captured: the
/// captures are invalidated.
cudaError_t refuseDuringCapture(const char *call) {
  State &s = state();
  if (s.capturingStreams == 0)
    return cudaSuccess;
  complain((std::string(call) +
            " while a stream is being captured (invalidates the capture)")
               .c_str());
  for (cudaStream_t stream : s.streams)
    if (stream->capturing)
      stream->invalidated = true;
  return cudaErrorStreamCaptureUnsupported;
}

/// Checks the device side(s) of a copy of `bytes`.
cudaError_t checkCopy(void *dst, const void *src, size_t bytes,
                      cudaMemcpyKind kind, const char *call) {
  const bool dstDevice =
      kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool srcDevice =
      kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (bytes == 0)
    return cudaSuccess;
  if ((dstDevice && !isDeviceRange(dst, bytes)) ||
      (srcDevice && !isDeviceRange(src, bytes))) {
    complain((std::string(call) + ": " + std::to_string(bytes) +
              " bytes outside any device allocation")
                 .c_str());
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

/// memmove that allows the null pointers of empty ranges (an empty
/// vector's data(), a size-0 allocation), as CUDA's copies of 0 bytes do.
void moveBytes(void *dst, const void *src, size_t count) {
  if (count != 0)
    std::memmove(dst, src, count);
}

/// The sticky error of an earlier failed kernel, else `error`.
cudaError_t withSticky(cudaError_t error) {
  return state().sticky != cudaSuccess ? state().sticky : error;
}

} // namespace

void complain(const char *what) {
  State &s = state();
  if (s.complained.insert(what).second)
    std::fprintf(stderr, "cuda emulation: %s\n", what);
}

void setLastError(cudaError_t error) {
  State &s = state();
  s.lastError = error;
  if (error == cudaErrorLaunchFailure)
    s.sticky = error;
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream && !state().streams.count(stream)) {
    complain("work on a stream that does not exist");
    return cudaErrorInvalidResourceHandle;
  }
  if (stream && stream->capturing) {
    stream->graph->work.push_back(std::move(work));
    return cudaSuccess;
  }
  if (state().sticky != cudaSuccess)
    return state().sticky; // the context is lost, as after a kernel fault
  work();
  return cudaSuccess;
}

} // namespace mtc::cudaemu

using namespace mtc::cudaemu;

//===----------------------------------------------------------------------===//
// Device
//===----------------------------------------------------------------------===//

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (device != 0)
    return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "mtc CUDA emulation (sm_90)");
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = kSharedOptin;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = computeCapability() / 10;
  prop->minor = computeCapability() % 10;
  prop->multiProcessorCount = kSms;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->l2CacheSize = l2Bytes();
  prop->memoryBusWidth = 6144;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr,
                                   int device) {
  if (device != 0)
    return cudaErrorInvalidDevice;
  switch (attr) {
  case cudaDevAttrMaxSharedMemoryPerBlockOptin:
    *value = static_cast<int>(kSharedOptin);
    return cudaSuccess;
  case cudaDevAttrMaxSharedMemoryPerBlock:
    *value = 48 * 1024;
    return cudaSuccess;
  case cudaDevAttrComputeCapabilityMajor:
    *value = computeCapability() / 10;
    return cudaSuccess;
  case cudaDevAttrComputeCapabilityMinor:
    *value = computeCapability() % 10;
    return cudaSuccess;
  case cudaDevAttrMultiProcessorCount:
    *value = kSms;
    return cudaSuccess;
  case cudaDevAttrMaxThreadsPerBlock:
    *value = 1024;
    return cudaSuccess;
  case cudaDevAttrWarpSize:
    *value = 32;
    return cudaSuccess;
  case cudaDevAttrL2CacheSize:
    *value = l2Bytes();
    return cudaSuccess;
  default:
    complain(("cudaDeviceGetAttribute: attribute " +
              std::to_string(static_cast<int>(attr)) + " is not emulated")
                 .c_str());
    return cudaErrorInvalidValue;
  }
}

cudaError_t cudaDeviceSynchronize() {
  if (cudaError_t e = refuseDuringCapture("cudaDeviceSynchronize"))
    return e;
  return withSticky(cudaSuccess);
}

cudaError_t cudaGetLastError() {
  State &s = state();
  cudaError_t e = s.lastError;
  s.lastError = s.sticky;
  return e;
}

cudaError_t cudaPeekAtLastError() { return state().lastError; }

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorInvalidConfiguration:
    return "invalid configuration argument";
  case cudaErrorLaunchFailure:
    return "unspecified launch failure";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle:
    return "invalid resource handle";
  case cudaErrorStreamCaptureUnsupported:
    return "operation not permitted when stream is capturing";
  case cudaErrorStreamCaptureInvalidated:
    return "operation failed due to a previous error during capture";
  case cudaErrorIllegalState:
    return "the operation cannot be performed in the present state";
  default:
    return "cuda emulation: unexpected error";
  }
}

const char *cudaGetErrorName(cudaError_t error) {
  return cudaGetErrorString(error);
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  if (cudaError_t e = refuseDuringCapture("cudaMalloc"))
    return e;
  State &s = state();
  // 256-byte aligned as cudaMalloc's, and exactly `size` bytes long, so
  // that AddressSanitizer (MTC_CUDAEMU_ASAN) sees a kernel going past them.
  const size_t bytes = size == 0 ? 1 : size;
  void *p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0)
    return cudaErrorMemoryAllocation;
  std::memset(p, 0xff, bytes);
  s.allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
  s.allocated += bytes;
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  if (!devPtr)
    return cudaSuccess;
  if (cudaError_t e = refuseDuringCapture("cudaFree"))
    return e;
  State &s = state();
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
  if (it == s.allocations.end()) {
    complain("cudaFree of a pointer cudaMalloc did not return");
    return cudaErrorInvalidValue;
  }
  s.allocated -= it->second;
  s.allocations.erase(it);
  std::free(devPtr);
  return cudaSuccess;
}

// Page-locked host memory is host memory here; a copy from it is taken as
// it is queued, as from pageable memory (which a caller of a GPU's
// deferred copy must not rely on: the runtime waits before reusing it).
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int) {
  if (cudaError_t e = refuseDuringCapture("cudaHostAlloc"))
    return e;
  *pHost = std::malloc(size > 0 ? size : 1);
  return *pHost ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  *total = kDeviceBytes;
  *free = kDeviceBytes - state().allocated;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  if (cudaError_t e = checkCopy(dst, src, count, kind, "cudaMemcpyAsync"))
    return e;
  // From (pageable) host memory the source is staged before the call
  // returns, so the caller may reuse it at once (CUDA's API
  // synchronization behavior): the copy takes the bytes now.
  if (kind == cudaMemcpyHostToDevice) {
    // The runtime copies nothing from the host inside a captured step (the
    // step counters go up before it): such a copy is refused, so that one
    // added by mistake shows.
    if (stream && stream->capturing) {
      complain("cudaMemcpyAsync from host memory while its stream is being "
               "captured");
      stream->invalidated = true;
      return cudaErrorStreamCaptureUnsupported;
    }
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char *>(src),
        static_cast<const unsigned char *>(src) + count);
    return withSticky(
        enqueue(stream, [=] { moveBytes(dst, staged->data(), count); }));
  }
  return withSticky(enqueue(stream, [=] { moveBytes(dst, src, count); }));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       cudaMemcpyKind kind) {
  if (cudaError_t e = refuseDuringCapture("cudaMemcpy"))
    return e;
  if (cudaError_t e = checkCopy(dst, src, count, kind, "cudaMemcpy"))
    return e;
  if (state().sticky != cudaSuccess)
    return state().sticky;
  moveBytes(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream) {
  if (count != 0 && !isDeviceRange(devPtr, count)) {
    complain("cudaMemsetAsync outside any device allocation");
    return cudaErrorInvalidValue;
  }
  return withSticky(enqueue(stream, [=] {
    if (count != 0)
      std::memset(devPtr, value, count);
  }));
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  if (cudaError_t e = refuseDuringCapture("cudaMemset"))
    return e;
  return cudaMemsetAsync(devPtr, value, count, nullptr);
}

// __device__ variables are host globals here: a symbol is its address.
cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) {
  *devPtr = const_cast<void *>(symbol);
  return cudaSuccess;
}

cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src,
                                    size_t count, size_t offset, cudaMemcpyKind,
                                    cudaStream_t stream) {
  char *dst = static_cast<char *>(const_cast<void *>(symbol)) + offset;
  return withSticky(enqueue(stream, [=] { moveBytes(dst, src, count); }));
}

cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol,
                                      size_t count, size_t offset,
                                      cudaMemcpyKind, cudaStream_t stream) {
  const char *src = static_cast<const char *>(symbol) + offset;
  return withSticky(enqueue(stream, [=] { moveBytes(dst, src, count); }));
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, const void *) {
  std::memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  attr->maxDynamicSharedSizeBytes = 48 * 1024;
  attr->ptxVersion = attr->binaryVersion = 90;
  return cudaSuccess;
}

/// As an sm_90 SM whose kernels use few registers (the emulation knows
/// none): 2048 threads, at most 32 blocks, 228 KB of shared memory of which
/// each block takes 1 KB more than it asks for.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, const void *, int blockSize, size_t dynamicSMemSize,
    unsigned int) {
  if (blockSize <= 0 || blockSize > 1024 || dynamicSMemSize > kSharedOptin)
    return cudaErrorInvalidValue;
  constexpr size_t kSharedPerSm = 228 * 1024, kReservedPerBlock = 1024;
  *numBlocks = static_cast<int>(
      std::min<size_t>({32, size_t(2048 / blockSize),
                        kSharedPerSm / (dynamicSMemSize + kReservedPerBlock)}));
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr,
                                 int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return cudaSuccess; // carveout preferences change nothing here
  if (value < 0 || static_cast<size_t>(value) > kSharedOptin) {
    complain(("cudaFuncSetAttribute: " + std::to_string(value) +
              " bytes of dynamic shared memory is more than the device's " +
              std::to_string(kSharedOptin))
                 .c_str());
    return cudaErrorInvalidValue;
  }
  setSharedLimit(func, static_cast<size_t>(value));
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// Streams, events and graphs
//===----------------------------------------------------------------------===//

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
  *stream = new CUstream_st;
  state().streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!state().streams.erase(stream))
    return cudaErrorInvalidResourceHandle;
  if (stream->capturing)
    --state().capturingStreams;
  delete stream->graph;
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream && !state().streams.count(stream))
    return cudaErrorInvalidResourceHandle;
  if (cudaError_t e = refuseDuringCapture("cudaStreamSynchronize"))
    return e;
  return withSticky(cudaSuccess);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (!stream || !state().streams.count(stream) || stream->capturing) {
    complain("cudaStreamBeginCapture on the legacy stream, an unknown "
             "stream or one already capturing");
    return stream ? cudaErrorIllegalState : cudaErrorStreamCaptureUnsupported;
  }
  stream->capturing = true;
  stream->invalidated = false;
  stream->graph = new CUgraph_st;
  ++state().capturingStreams;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  if (!stream || !state().streams.count(stream) || !stream->capturing)
    return cudaErrorIllegalState;
  stream->capturing = false;
  --state().capturingStreams;
  cudaGraph_t captured = stream->graph;
  stream->graph = nullptr;
  if (stream->invalidated) {
    delete captured;
    *graph = nullptr;
    return cudaErrorStreamCaptureInvalidated;
  }
  *graph = captured;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long) {
  if (!graph)
    return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph->work};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec)
    return cudaErrorInvalidValue;
  for (const std::function<void()> &work : exec->work)
    if (cudaError_t e = enqueue(stream, work))
      return e;
  return withSticky(cudaSuccess);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned) {
  return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return enqueue(stream, [event] {
    event->milliseconds = nowMilliseconds();
    event->recorded = true;
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event->recorded ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  if (!start->recorded || !end->recorded)
    return cudaErrorInvalidResourceHandle;
  *ms = static_cast<float>(end->milliseconds - start->milliseconds);
  return cudaSuccess;
}
