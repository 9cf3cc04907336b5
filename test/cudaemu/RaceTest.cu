//===- RaceTest.cu - The emulation's data race reports ----------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// CUDA source, translated like the runtime's and built with ThreadSanitizer
// against the tsan variant of the emulation, checking that it reports what
// a GPU leaves unordered and only that: threads of a block reading what
// another writes with no __syncthreads between them, lanes of a warp with
// no __syncwarp (shuffles, WMMA and cp.async order no memory), plain
// accesses beside atomics. Each kernel is correct one way and racy the
// other, and only the racy one must be reported.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>
#include <mma.h>

#include <cstdint>
#include <vector>

#if !defined(__SANITIZE_THREAD__)
#error "RaceTest.cu needs ThreadSanitizer (-fsanitize=thread)"
#endif

namespace {
int reports = 0;
/// Atomic: the reports come from the fibers of the kernels' threads, and a
/// plain access here would be a race reported from inside a report.
int reportsSoFar() { return __atomic_load_n(&reports, __ATOMIC_RELAXED); }
} // namespace

// ThreadSanitizer calls it for each report it prints.
extern "C" void __tsan_on_report(void *) {
  __atomic_fetch_add(&reports, 1, __ATOMIC_RELAXED);
}
// Every race, even one at an address reported before (device memory is
// reused between tests); the tests judge the reports, not the exit code.
extern "C" const char *__tsan_default_options() {
  return "suppress_equal_addresses=0:exitcode=0";
}

namespace {

template <typename T> T *deviceArray(size_t n) {
  void *p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T *>(p);
}

/// The reports a launch made: `launch` runs it (and waits).
template <typename F> int reportsOf(F launch) {
  const int before = reportsSoFar();
  launch();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return reportsSoFar() - before;
}

/// Each thread publishes its index in shared memory and reads its
/// neighbour's, with or without the barrier between.
__global__ void neighbourKernel(int *out, bool barrier) {
  __shared__ int slot[64];
  slot[threadIdx.x] = threadIdx.x;
  if (barrier)
    __syncthreads();
  out[threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

TEST(CudaEmulationRaces, ABlockNeedsSyncthreads) {
  int *out = deviceArray<int>(64);
  EXPECT_EQ(reportsOf([&] { neighbourKernel<<<2, 64>>>(out, true); }), 0);
  EXPECT_GT(reportsOf([&] { neighbourKernel<<<2, 64>>>(out, false); }), 0);
  cudaFree(out);
}

/// A warp's lanes exchange through shared memory; `order` 0: __syncwarp,
/// 1: a shuffle (which orders no memory), 2: __syncwarp but the partner is
/// in the other warp.
__global__ void warpKernel(int *out, int order) {
  __shared__ int slot[64];
  const int t = threadIdx.x;
  slot[t] = t;
  int partner = (t / 32) * 32 + (t + 1) % 32;
  if (order == 1)
    partner = __shfl_sync(0xffffffffu, t, (t + 1) % 32);
  else
    __syncwarp();
  if (order == 2)
    partner = (t + 32) % 64;
  out[t] = slot[partner];
}

TEST(CudaEmulationRaces, AWarpNeedsSyncwarp) {
  int *out = deviceArray<int>(64);
  EXPECT_EQ(reportsOf([&] { warpKernel<<<1, 64>>>(out, 0); }), 0);
  EXPECT_GT(reportsOf([&] { warpKernel<<<1, 64>>>(out, 1); }), 0);
  EXPECT_GT(reportsOf([&] { warpKernel<<<1, 64>>>(out, 2); }), 0);
  cudaFree(out);
}

/// Every thread adds to one counter atomically; thread 0 then reads it
/// plainly, after the barrier or not.
__global__ void atomicKernel(int *counter, int *out, bool barrier) {
  atomicAdd(counter, 1);
  if (barrier)
    __syncthreads();
  if (threadIdx.x == 0)
    *out = *counter;
}

TEST(CudaEmulationRaces, AtomicsDoNotRaceButPlainReadsOfThemDo) {
  int *counter = deviceArray<int>(2);
  cudaMemset(counter, 0, 2 * sizeof(int));
  EXPECT_EQ(
      reportsOf([&] { atomicKernel<<<1, 64>>>(counter, counter + 1, true); }),
      0);
  EXPECT_GT(
      reportsOf([&] { atomicKernel<<<1, 64>>>(counter, counter + 1, false); }),
      0);
  cudaFree(counter);
}

/// Two threads of a block write one element of global memory.
__global__ void sameElementKernel(int *out, bool distinct) {
  out[distinct ? threadIdx.x : threadIdx.x / 2] = 1;
}

TEST(CudaEmulationRaces, TwoThreadsWritingOneElementRace) {
  int *out = deviceArray<int>(32);
  EXPECT_EQ(reportsOf([&] { sameElementKernel<<<1, 32>>>(out, true); }), 0);
  EXPECT_GT(reportsOf([&] { sameElementKernel<<<1, 32>>>(out, false); }), 0);
  cudaFree(out);
}

/// A WMMA tile stored to shared memory, then read back a lane's element at a
/// time, with or without a __syncwarp between: which lane stores which
/// element is not defined, so reading any needs one.
__global__ void wmmaStoreKernel(float *out, bool syncwarp) {
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(32) float tile[16 * 16];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 2.0f);
  wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
  if (syncwarp)
    __syncwarp();
  for (int i = threadIdx.x; i < 256; i += 32)
    out[i] = tile[(i + 1) % 256];
}

TEST(CudaEmulationRaces, WmmaStoresNeedSyncwarpBeforeLanesRead) {
  float *out = deviceArray<float>(256);
  EXPECT_EQ(reportsOf([&] { wmmaStoreKernel<<<1, 32>>>(out, true); }), 0);
  EXPECT_GT(reportsOf([&] { wmmaStoreKernel<<<1, 32>>>(out, false); }), 0);
  cudaFree(out);
}

/// The lanes scale a tile an element at a time (element e from lane e % 32),
/// then load it as an accumulator: which lane loads which element is not
/// defined, so the load needs a __syncwarp after the writes.
__global__ void wmmaLoadKernel(float *tile, float *out, bool syncwarp) {
  namespace wmma = nvcuda::wmma;
  for (int e = threadIdx.x; e < 256; e += 32)
    tile[e] *= 2.0f;
  if (syncwarp)
    __syncwarp();
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, tile, 16, wmma::mem_row_major);
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

TEST(CudaEmulationRaces, WmmaLoadsNeedSyncwarpAfterLanesWrite) {
  float *tile = deviceArray<float>(256);
  float *out = deviceArray<float>(256);
  cudaMemset(tile, 0, 256 * sizeof(float));
  EXPECT_EQ(reportsOf([&] { wmmaLoadKernel<<<1, 32>>>(tile, out, true); }), 0);
  EXPECT_GT(reportsOf([&] { wmmaLoadKernel<<<1, 32>>>(tile, out, false); }), 0);
  cudaFree(tile);
  cudaFree(out);
}

/// Each thread stages a word with cp.async and waits for it; reading a
/// neighbour's word needs a barrier after the wait too.
__global__ void asyncCopyKernel(const int *src, int *out, bool barrier) {
  __shared__ __align__(16) int slot[64];
  const int t = threadIdx.x;
  __pipeline_memcpy_async(&slot[t], src + t, 4);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  if (barrier)
    __syncthreads();
  out[t] = slot[(t + 1) % 64];
}

TEST(CudaEmulationRaces, AsyncCopiesNeedABarrierBeforeOthersRead) {
  int *src = deviceArray<int>(64);
  int *out = deviceArray<int>(64);
  cudaMemset(src, 0, 64 * sizeof(int));
  EXPECT_EQ(reportsOf([&] { asyncCopyKernel<<<1, 64>>>(src, out, true); }), 0);
  EXPECT_GT(reportsOf([&] { asyncCopyKernel<<<1, 64>>>(src, out, false); }), 0);
  cudaFree(src);
  cudaFree(out);
}

} // namespace
