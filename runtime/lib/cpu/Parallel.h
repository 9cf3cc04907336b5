//===- Parallel.h - When CPU kernels use OpenMP -----------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// CPU kernels parallelize only over independent outputs, never inside one
// reduction, so results are bitwise identical whatever the thread count.
// Small loops stay serial: waking the thread pool costs more than the work.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_CPU_PARALLEL_H
#define MTC_RUNTIME_LIB_CPU_PARALLEL_H

#include <cstdint>

namespace mtc::rt::cpu {

/// Below this many elements of work a loop runs on one thread.
constexpr int64_t kParallelGrain = 1 << 15;

} // namespace mtc::rt::cpu

#endif // MTC_RUNTIME_LIB_CPU_PARALLEL_H
