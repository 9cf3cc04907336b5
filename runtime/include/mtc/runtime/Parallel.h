//===- Parallel.h - When CPU kernels use OpenMP -----------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// CPU kernels parallelize only over independent outputs, never inside one
// reduction, so results are bitwise identical whatever the thread count.
// Small loops stay serial: waking the thread pool costs more than the work.
// A serial loop never enters OpenMP at all: libgomp allocates a team for
// every one-thread parallel region, and the trainer's step loop must not
// allocate.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_PARALLEL_H
#define MTC_RUNTIME_PARALLEL_H

#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mtc::rt::cpu {

/// Below this many elements of work a loop runs on one thread.
constexpr int64_t kParallelGrain = 1 << 15;

/// Runs body(i) for i in [begin, end): split over the OpenMP threads when
/// `parallel` and there is more than one, else in order on this thread.
template <typename Body>
void parallelFor(int64_t begin, int64_t end, bool parallel, Body &&body) {
#ifdef _OPENMP
  if (parallel && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = begin; i < end; ++i)
      body(i);
    return;
  }
#endif
  for (int64_t i = begin; i < end; ++i)
    body(i);
}

} // namespace mtc::rt::cpu

#endif // MTC_RUNTIME_PARALLEL_H
