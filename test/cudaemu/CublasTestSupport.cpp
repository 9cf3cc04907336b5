//===- CublasTestSupport.cpp - Emulation.h for the cuBLAS tests alone -----===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// A stand-in for the emulation's CUDA runtime (CudaRuntime.cpp), linked only
// into CublasTest so that Cublas.cpp can be tested on its own: a stream runs
// its work at once (or keeps it, when a test asks, to check what the work
// holds by value), nothing is ever captured, and the tests can see which
// stream got the work and how often the emulation complained.
//
//===----------------------------------------------------------------------===//

#include "Emulation.h"

#include <utility>
#include <vector>

namespace mtc::cudaemu {

/// What the tests observe; CublasTest.cpp declares the same names.
namespace testsupport {
cudaStream_t lastStream = nullptr;
int enqueued = 0;
int complaints = 0;
bool deferWork = false;
std::vector<std::function<void()>> deferred;
} // namespace testsupport

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work) {
  testsupport::lastStream = stream;
  ++testsupport::enqueued;
  if (testsupport::deferWork)
    testsupport::deferred.push_back(std::move(work));
  else
    work();
  return cudaSuccess;
}

void setLastError(cudaError_t) {}

void complain(const char *) { ++testsupport::complaints; }

} // namespace mtc::cudaemu
