//===- Device.cpp - The CPU "device": host memory -------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Device.h"
#include "Context.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cblas.h>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sys/mman.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mtc::rt {

namespace {
double nowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
} // namespace

void profileBegin(Context &ctx, int op) {
  if (ctx.profiling)
    ctx.profileStart[op] = nowMs();
}

void profileEnd(Context &ctx, int op) {
  if (ctx.profiling)
    ctx.profileMs[op] += nowMs() - ctx.profileStart[op];
}

} // namespace mtc::rt

namespace mtc::rt::device {

const char *kind() { return "cpu"; }

Status initialize(Context &) {
  // GEMMs are split over the OpenMP threads by the runtime (Gemm.cpp);
  // OpenBLAS itself runs on the calling thread, where it allocates nothing
  // per call (its threaded path mallocs job tables on every GEMM).
  openblas_set_num_threads(1);
  return Status::success();
}

void shutdown(Context &) {}

uint64_t workspaceBytes(const Context &) { return 0; }

Status profileSetup(Context &ctx, int ops) {
  ctx.profiling = true;
  ctx.profileMs.assign(ops, 0.0);
  ctx.profileStart.assign(ops, 0.0);
  return Status::success();
}

// The CPU times ops as they run: profileEnd adds to the total at once.
Status profileCollect(Context &) { return Status::success(); }

Status runStep(Context &ctx, StepFunction step, unsigned char *arena,
               int64_t) {
  step(ctx, arena);
  return Status::success();
}

std::string name() {
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0)
      continue;
    size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size())
      model = line.substr(colon + 2);
    break;
  }
#ifdef _OPENMP
  int threads = omp_get_max_threads();
#else
  int threads = 1;
#endif
  return "CPU " + model + " (" + std::to_string(threads) + " threads)";
}

bool memoryInfo(uint64_t &freeBytes, uint64_t &totalBytes) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long available = sysconf(_SC_AVPHYS_PAGES);
  long pageSize = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || available < 0 || pageSize <= 0)
    return false;
  totalBytes = static_cast<uint64_t>(pages) * pageSize;
  freeBytes = static_cast<uint64_t>(available) * pageSize;
  return true;
}

Status allocate(uint64_t bytes, unsigned char **ptr) {
  // aligned_alloc wants a size that is a multiple of the alignment, and a
  // zero-byte plan still needs a valid pointer.
  constexpr uint64_t alignment = 256;
  uint64_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded == 0)
    rounded = alignment;
  if (rounded < bytes)
    return Status::error("arena of " + std::to_string(bytes) +
                         " bytes is too large");
  void *p = std::aligned_alloc(alignment, rounded);
  if (!p)
    return Status::error("cannot allocate the arena of " +
                         std::to_string(bytes) +
                         " bytes in host memory: " + std::strerror(errno));
  *ptr = static_cast<unsigned char *>(p);
  return Status::success();
}

void release(unsigned char *ptr) { std::free(ptr); }

unsigned char *allocateStaging(uint64_t bytes) {
  return static_cast<unsigned char *>(std::malloc(bytes > 0 ? bytes : 1));
}

void releaseStaging(unsigned char *ptr) { std::free(ptr); }

Status allocateZeroed(Context &, uint64_t bytes, unsigned char **ptr) {
  // Anonymous pages read as zeros and are committed when first written.
  void *p = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Status::error("cannot allocate the arena of " +
                         std::to_string(bytes) +
                         " bytes in host memory: " + std::strerror(errno));
  *ptr = static_cast<unsigned char *>(p);
  return Status::success();
}

void releaseZeroed(unsigned char *ptr, uint64_t bytes) {
  munmap(ptr, bytes ? bytes : 1);
}

Status memsetZero(Context &, void *dst, uint64_t bytes) {
  if (bytes)
    std::memset(dst, 0, bytes);
  return Status::success();
}

Status copyToDevice(Context &, void *dst, const void *src, uint64_t bytes) {
  if (bytes)
    std::memcpy(dst, src, bytes);
  return Status::success();
}

Status copyToHost(Context &, void *dst, const void *src, uint64_t bytes) {
  if (bytes)
    std::memcpy(dst, src, bytes);
  return Status::success();
}

Status copyToHostLater(Context &ctx, void *dst, const void *src,
                       uint64_t bytes) {
  return copyToHost(ctx, dst, src, bytes);
}

Status synchronize(Context &) { return Status::success(); }

} // namespace mtc::rt::device
