//===- EmulationTest.cu - The CUDA emulation's own tests --------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// CUDA source, translated like the runtime's, checking what the emulation
// promises: the built-in variables, barriers and their reductions, warp
// exchanges with CUDA's width rules, WMMA tiles, mma.sync and ldmatrix
// fragments, static and dynamic shared memory, cp.async copies, the launch
// checks a GPU makes, graph capture and replay, and that a barrier nobody can
// pass fails the launch instead of hanging. Expected values come from CUDA's
// definitions, written out by hand.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>
#include <mma.h>
#ifndef MTC_CUDA_EMULATION
#include <cuda_pipeline.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

template <typename T> T *deviceArray(size_t n) {
  void *p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T *>(p);
}

template <typename T> std::vector<T> fetch(const T *p, size_t n) {
  std::vector<T> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}

__global__ void indexKernel(int *out) {
  const int block = blockIdx.x + gridDim.x * blockIdx.y;
  const int thread =
      threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = block * 1000 + thread;
}

TEST(CudaEmulation, BuiltInVariablesCoverTheGrid) {
  int *out = deviceArray<int>(6 * 24);
  indexKernel<<<dim3(3, 2), dim3(4, 3, 2)>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> got = fetch(out, 6 * 24);
  for (int b = 0; b < 6; ++b)
    for (int t = 0; t < 24; ++t)
      EXPECT_EQ(got[b * 24 + t], b * 1000 + t);
  cudaFree(out);
}

/// Each thread publishes its index, and after the barrier reads its
/// neighbour's: wrong without the barrier when threads run in either order.
__global__ void rotateKernel(int *out) {
  __shared__ int slot[64];
  slot[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

TEST(CudaEmulation, SyncthreadsOrdersSharedMemory) {
  int *out = deviceArray<int>(64);
  rotateKernel<<<1, 64>>>(out);
  std::vector<int> got = fetch(out, 64);
  for (int t = 0; t < 64; ++t)
    EXPECT_EQ(got[t], (t + 1) % 64);
  cudaFree(out);
}

__global__ void reductionsKernel(int *out) {
  const int t = threadIdx.x;
  out[4 * t + 0] = __syncthreads_or(t == 37);
  out[4 * t + 1] = __syncthreads_and(t < 1000);
  out[4 * t + 2] = __syncthreads_and(t != 5);
  out[4 * t + 3] = __syncthreads_count(t % 3 == 0);
}

TEST(CudaEmulation, BarrierReductions) {
  int *out = deviceArray<int>(4 * 96);
  reductionsKernel<<<1, 96>>>(out);
  std::vector<int> got = fetch(out, 4 * 96);
  for (int t = 0; t < 96; ++t) {
    EXPECT_EQ(got[4 * t + 0], 1);
    EXPECT_EQ(got[4 * t + 1], 1);
    EXPECT_EQ(got[4 * t + 2], 0);
    EXPECT_EQ(got[4 * t + 3], 32); // 0, 3, ..., 93
  }
  cudaFree(out);
}

__global__ void shuffleKernel(float *out) {
  const unsigned t = threadIdx.x;
  const float v = 100.0f + t;
  float *row = out + 7 * t;
  row[0] = __shfl_sync(0xffffffffu, v, 3);        // lane 3 of the warp
  row[1] = __shfl_sync(0xffffffffu, v, 2, 8);     // lane 2 of its 8
  row[2] = __shfl_xor_sync(0xffffffffu, v, 1);    // its pair's
  row[3] = __shfl_down_sync(0xffffffffu, v, 4, 16);
  row[4] = __shfl_up_sync(0xffffffffu, v, 1);
  row[5] = static_cast<float>(__ballot_sync(0xffffffffu, t % 2 == 0) &
                              0xffu);
  row[6] = __shfl_xor_sync(0xffffffffu, v, 8, 8); // across groups of 8
}

TEST(CudaEmulation, WarpShufflesFollowCudasWidthRules) {
  float *out = deviceArray<float>(7 * 64);
  shuffleKernel<<<1, 64>>>(out);
  std::vector<float> got = fetch(out, 7 * 64);
  for (int t = 0; t < 64; ++t) {
    const int warp = t / 32 * 32, lane = t % 32;
    const float *row = got.data() + 7 * t;
    EXPECT_EQ(row[0], 100.0f + warp + 3) << t;
    EXPECT_EQ(row[1], 100.0f + warp + lane / 8 * 8 + 2) << t;
    EXPECT_EQ(row[2], 100.0f + warp + (lane ^ 1)) << t;
    // Past the end of its group of 16 a lane keeps its own value.
    EXPECT_EQ(row[3], 100.0f + (lane % 16 + 4 < 16 ? t + 4 : t)) << t;
    EXPECT_EQ(row[4], 100.0f + (lane >= 1 ? t - 1 : t)) << t;
    EXPECT_EQ(row[5], 0x55) << t;
    // xor reaches into an earlier group, and gives a lane whose partner
    // is in a later group its own value.
    EXPECT_EQ(row[6], 100.0f + warp + (lane & 8 ? lane ^ 8 : lane)) << t;
  }
  cudaFree(out);
}

/// A 16 x 16 x 32 product through WMMA, one warp.
__global__ void wmmaKernel(const __half *a, const __half *b, float *c) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.0f);
  for (int k = 0; k < 32; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, a + k, 32);
    wmma::load_matrix_sync(fb, b + k, 32); // B^T stored row-major
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

TEST(CudaEmulation, WmmaMultipliesTiles) {
  std::vector<__half> a(16 * 32), bt(16 * 32);
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = __float2half(static_cast<float>(i % 7) - 3.0f);
    bt[i] = __float2half(static_cast<float>(i % 5) * 0.5f);
  }
  __half *da = deviceArray<__half>(a.size()), *db = deviceArray<__half>(a.size());
  float *dc = deviceArray<float>(256);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, bt.data(), bt.size() * 2, cudaMemcpyHostToDevice);
  wmmaKernel<<<1, 32>>>(da, db, dc);
  std::vector<float> got = fetch(dc, 256);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float want = 1.0f; // small integers and halves: exact in any order
      for (int k = 0; k < 32; ++k)
        want += __half2float(a[i * 32 + k]) * __half2float(bt[j * 32 + k]);
      EXPECT_EQ(got[i * 16 + j], want) << i << ", " << j;
    }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

__global__ void sharedKernel(int *out, int n) {
  extern __shared__ int dynamic[];
  if (threadIdx.x == 0)
    for (int i = 0; i < n; ++i)
      out[i] = dynamic[i]; // never written: the fill shows
}

TEST(CudaEmulation, DynamicSharedMemoryLimits) {
  int *out = deviceArray<int>(4);
  sharedKernel<<<1, 32, 16>>>(out, 4);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int v : fetch(out, 4))
    EXPECT_EQ(v, -1); // 0xffffffff
  // Over 48 KB needs the kernel's opt-in, and at most the device's 227 KB.
  sharedKernel<<<1, 32, 64 * 1024>>>(out, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(sharedKernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 64 * 1024),
            cudaSuccess);
  sharedKernel<<<1, 32, 64 * 1024>>>(out, 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(sharedKernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 300 * 1024),
            cudaErrorInvalidValue);
  cudaFree(out);
}

TEST(CudaEmulation, OccupancyAsAnSm90WithFewRegisters) {
  int blocks = 0;
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, indexKernel,
                                                          256, 0),
            cudaSuccess);
  EXPECT_EQ(blocks, 8); // 2048 threads
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, indexKernel,
                                                          32, 0),
            cudaSuccess);
  EXPECT_EQ(blocks, 32); // the most blocks an SM holds
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, indexKernel,
                                                          32, 100 * 1024),
            cudaSuccess);
  EXPECT_EQ(blocks, 2); // 228 KB of shared memory
  EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, indexKernel,
                                                          2048, 0),
            cudaErrorInvalidValue);
}

/// Block 0 writes its static shared array, block 1 only reads it: on a GPU
/// block 1 reads whatever its multiprocessor's shared memory held; the
/// emulation hands every block 0xff bytes, not block 0's values.
__global__ void staticSharedKernel(int *out) {
  __shared__ int slot[32], other[2];
  if (blockIdx.x == 0) {
    slot[threadIdx.x] = 7;
    other[threadIdx.x % 2] = 7;
  }
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = slot[threadIdx.x];
  out[blockIdx.x * 64 + 32 + threadIdx.x] = other[threadIdx.x % 2];
}

TEST(CudaEmulation, StaticSharedMemoryIsFreshPerBlock) {
  int *out = deviceArray<int>(2 * 64);
  staticSharedKernel<<<2, 32>>>(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> got = fetch(out, 2 * 64);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(got[i], 7) << "block 0, " << i;
    EXPECT_EQ(got[64 + i], -1) << "block 1, " << i; // 0xffffffff
  }
  cudaFree(out);
}

TEST(CudaEmulation, LaunchConfigurationsAGpuRefuses) {
  int *out = deviceArray<int>(2048);
  indexKernel<<<1, 1025>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  indexKernel<<<dim3(1, 65536), 1>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  indexKernel<<<1, dim3(1, 1, 65)>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  indexKernel<<<2, 1024>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(out);
}

__global__ void addKernel(float *x, float v) { x[threadIdx.x] += v; }

TEST(CudaEmulation, GraphsRecordAndReplay) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  float *x = deviceArray<float>(8);
  ASSERT_EQ(cudaMemsetAsync(x, 0, 8 * sizeof(float), stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  addKernel<<<1, 8, 0, stream>>>(x, 1.5f);
  addKernel<<<1, 8, 0, stream>>>(x, 2.0f);
#ifdef MTC_CUDA_EMULATION
  // Recorded, not run. (A copy would end the capture: device memory is
  // host memory here, so look at it directly; on a GPU the replays below
  // adding up to 7, not 10.5, show it.)
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(x[i], 0.0f);
#endif
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (float v : fetch(x, 8))
    EXPECT_EQ(v, 7.0f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(x);
  cudaStreamDestroy(stream);
}

TEST(CudaEmulation, SynchronizingDuringACaptureInvalidatesIt) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  float *x = deviceArray<float>(8);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  addKernel<<<1, 8, 0, stream>>>(x, 1.0f);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph),
            cudaErrorStreamCaptureInvalidated);
  cudaFree(x);
  cudaStreamDestroy(stream);
}

// From pageable host memory an asynchronous copy takes the bytes before it
// returns: the host may reuse its buffer at once (the trainer's batch
// staging buffer and stack values rely on it).
TEST(CudaEmulation, AsyncCopiesFromTheHostTakeTheBytesAtOnce) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  float *x = deviceArray<float>(4);
  std::vector<float> host = {1.0f, 2.0f, 3.0f, 4.0f};
  ASSERT_EQ(cudaMemcpyAsync(x, host.data(), 4 * sizeof(float),
                            cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  host.assign(4, -1.0f);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(fetch(x, 4), (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
  cudaFree(x);
  cudaStreamDestroy(stream);
}

#ifdef MTC_CUDA_EMULATION
// The emulation refuses a copy from the host into a captured step, which
// the runtime never makes (the step counters go up before the capture).
TEST(CudaEmulation, CopyingFromTheHostDuringACaptureIsRefused) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  float *x = deviceArray<float>(4);
  float host[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  EXPECT_EQ(
      cudaMemcpyAsync(x, host, sizeof(host), cudaMemcpyHostToDevice, stream),
      cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph),
            cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  cudaFree(x);
  cudaStreamDestroy(stream);
}
#endif

TEST(CudaEmulation, CopiesOutsideAnAllocationAreRefused) {
  float *x = deviceArray<float>(4);
  std::vector<float> host(8);
  EXPECT_EQ(cudaMemcpy(host.data(), x, 8 * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), x, 4 * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
  cudaFree(x);
}

/// Thread t copies 16 bytes (4 ints) of src into its slot of shared memory
/// in two cp.async groups: words 0-1 then, zero-filling the last 4 bytes,
/// words 2-3. It records its slot before any wait, after waiting for all
/// but the last group and after waiting for all, as CUDA defines
/// __pipeline_wait_prior.
__global__ void asyncCopyKernel(const int *src, int *seen) {
  __shared__ __align__(16) int slot[32][4];
  const int t = threadIdx.x;
  for (int w = 0; w < 4; ++w)
    slot[t][w] = -1;
  __pipeline_memcpy_async(&slot[t][0], src + 4 * t, 8);
  __pipeline_commit();
  __pipeline_memcpy_async(&slot[t][2], src + 4 * t + 2, 8, 4);
  __pipeline_commit();
  for (int phase = 0; phase < 3; ++phase) {
    if (phase > 0)
      __pipeline_wait_prior(2 - phase);
    for (int w = 0; w < 4; ++w)
      seen[(phase * 32 + t) * 4 + w] = slot[t][w];
  }
}

TEST(CudaEmulation, AsyncCopiesLandWhenTheirGroupIsWaitedFor) {
  int *src = deviceArray<int>(32 * 4);
  int *seen = deviceArray<int>(3 * 32 * 4);
  std::vector<int> values(32 * 4);
  for (int i = 0; i < 32 * 4; ++i)
    values[i] = 100 + i;
  ASSERT_EQ(cudaMemcpy(src, values.data(), values.size() * sizeof(int),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  asyncCopyKernel<<<1, 32>>>(src, seen);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> got = fetch(seen, 3 * 32 * 4);
  for (int t = 0; t < 32; ++t) {
    const int *before = &got[t * 4], *first = &got[(32 + t) * 4],
              *all = &got[(64 + t) * 4];
    const int base = 100 + 4 * t;
    EXPECT_EQ(std::vector<int>(before, before + 4),
              std::vector<int>({-1, -1, -1, -1}));
    EXPECT_EQ(std::vector<int>(first, first + 4),
              std::vector<int>({base, base + 1, -1, -1}));
    EXPECT_EQ(std::vector<int>(all, all + 4),
              std::vector<int>({base, base + 1, base + 2, 0}));
  }
  cudaFree(src);
  cudaFree(seen);
}

/// mma.sync.m16n8k16 (bf16 operands, float accumulators): each lane loads
/// its fragments of A (16 x 16), B (16 x 8) and C (16 x 8) from the
/// row-major matrices as the PTX ISA's fragment tables lay them out, and
/// stores its D fragment back the same way.
__global__ void mmaFragmentsKernel(const uint16_t *a, const uint16_t *b,
                                   const float *c, float *d) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto pair = [](uint16_t lo, uint16_t hi) {
    return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
  };
  // a0..a7: rows g, g+8 (a0-a1, a4-a5 on row g), columns 2t, 2t+1 (+8 for
  // a4..a7); b0..b3: rows 2t, 2t+1 (+8 for b2, b3), column g; c0..c3: rows
  // g (c0, c1) and g+8, columns 2t, 2t+1.
  const uint32_t fa[4] = {
      pair(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
      pair(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
      pair(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
      pair(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
  const uint32_t fb[2] = {pair(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
                          pair(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1],
                  c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
#ifdef MTC_CUDA_EMULATION
  ::mtc::cudaemu::mmaM16N8K16(acc, fa, fb, /*bf16=*/true);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
               : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]),
                 "r"(fb[1]));
#endif
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

TEST(CudaEmulation, MmaFragmentsFollowThePtxLayout) {
  // Small integers: exact in bfloat16 (the top 16 bits of the float) and in
  // every float sum, so D = C + A B exactly, element for element.
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  std::vector<float> av(16 * 16), bv(16 * 8), c(16 * 8);
  auto bf16 = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return static_cast<uint16_t>(u >> 16);
  };
  for (int i = 0; i < 16 * 16; ++i)
    a[i] = bf16(av[i] = static_cast<float>((i * 7) % 11 - 5));
  for (int i = 0; i < 16 * 8; ++i) {
    b[i] = bf16(bv[i] = static_cast<float>((i * 5) % 9 - 4));
    c[i] = static_cast<float>(i % 13) * 100.0f;
  }
  uint16_t *da = deviceArray<uint16_t>(a.size()),
           *db = deviceArray<uint16_t>(b.size());
  float *dc = deviceArray<float>(c.size()), *dd = deviceArray<float>(c.size());
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  mmaFragmentsKernel<<<1, 32>>>(da, db, dc, dd);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = fetch(dd, 16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float want = c[i * 8 + j];
      for (int k = 0; k < 16; ++k)
        want += av[i * 16 + k] * bv[k * 8 + j];
      EXPECT_EQ(got[i * 8 + j], want) << "D[" << i << "][" << j << "]";
    }
  for (void *p : {static_cast<void *>(da), static_cast<void *>(db),
                  static_cast<void *>(dc), static_cast<void *>(dd)})
    cudaFree(p);
}

/// ldmatrix.x4 from a 16 x 16 matrix of 16-bit values staged in shared
/// memory with rows 24 elements (48 bytes) apart: lane l gives row
/// l % 8 + 8 ((l / 8) % 2) from column 8 (l / 16) on, so matrix j is the
/// 8 x 8 block at rows 8 (j % 2), columns 8 (j / 2), as the A operand of
/// mma.sync wants it. Each lane stores its four registers, plain and
/// transposed.
__global__ void ldmatrixKernel(const uint16_t *m, uint32_t *plain,
                               uint32_t *transposed) {
  __shared__ __align__(16) uint16_t tile[16 * 24];
  const int lane = threadIdx.x;
  for (int e = lane; e < 16 * 16; e += 32)
    tile[(e / 16) * 24 + e % 16] = m[e];
  __syncwarp();
  const uint16_t *row =
      tile + (lane % 8 + 8 * ((lane / 8) % 2)) * 24 + 8 * (lane / 16);
  uint32_t r[4], rt[4];
#ifdef MTC_CUDA_EMULATION
  ::mtc::cudaemu::ldmatrixX4(r, row, /*trans=*/false);
  ::mtc::cudaemu::ldmatrixX4(rt, row, /*trans=*/true);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(rt[0]), "=r"(rt[1]), "=r"(rt[2]), "=r"(rt[3])
               : "r"(address));
#endif
  for (int j = 0; j < 4; ++j) {
    plain[lane * 4 + j] = r[j];
    transposed[lane * 4 + j] = rt[j];
  }
}

TEST(CudaEmulation, LdmatrixFollowsThePtxLayout) {
  std::vector<uint16_t> m(16 * 16);
  for (int e = 0; e < 16 * 16; ++e)
    m[e] = static_cast<uint16_t>(1000 + e);
  uint16_t *dm = deviceArray<uint16_t>(m.size());
  uint32_t *plain = deviceArray<uint32_t>(32 * 4),
           *transposed = deviceArray<uint32_t>(32 * 4);
  ASSERT_EQ(cudaMemcpy(dm, m.data(), m.size() * 2, cudaMemcpyHostToDevice),
            cudaSuccess);
  ldmatrixKernel<<<1, 32>>>(dm, plain, transposed);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<uint32_t> gotPlain = fetch(plain, 32 * 4),
                              gotTransposed = fetch(transposed, 32 * 4);
  // The PTX ISA's table for a fragment of an 8 x 8 matrix: lane l holds
  // row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1; .trans delivers the
  // transpose's, i.e. column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1.
  auto element = [&](int j, int row, int column) {
    return static_cast<uint32_t>(
        m[(8 * (j % 2) + row) * 16 + 8 * (j / 2) + column]);
  };
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < 4; ++j) {
      const int g = l / 4, t = l % 4;
      EXPECT_EQ(gotPlain[l * 4 + j],
                element(j, g, 2 * t) | element(j, g, 2 * t + 1) << 16)
          << "lane " << l << ", register " << j;
      EXPECT_EQ(gotTransposed[l * 4 + j],
                element(j, 2 * t, g) | element(j, 2 * t + 1, g) << 16)
          << "lane " << l << ", register " << j << " (.trans)";
    }
  for (void *p : {static_cast<void *>(dm), static_cast<void *>(plain),
                  static_cast<void *>(transposed)})
    cudaFree(p);
}

// The emulation's failures (a GPU leaves the first undefined and hangs on
// the second), in child processes.
#ifdef MTC_CUDA_EMULATION
/// A copy nobody waits for.
__global__ void unwaitedCopyKernel(const int *src) {
  __shared__ __align__(16) int slot[4];
  __pipeline_memcpy_async(slot, src, 16);
  __pipeline_commit();
}

TEST(CudaEmulationDeathTest, ACopyNeverWaitedForFailsTheLaunch) {
  EXPECT_EXIT(
      {
        int *src = deviceArray<int>(4);
        unwaitedCopyKernel<<<1, 32>>>(src);
        const bool failed = cudaGetLastError() == cudaErrorLaunchFailure;
        std::exit(failed ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "cp.async copies it never waited for");
}

/// A WMMA tile loaded 16 bytes past a 256-bit boundary.
__global__ void misalignedWmmaKernel(const __half *a, float *c) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, a + 8, 16);
  c[threadIdx.x] = static_cast<float>(fa.x[0]);
}

TEST(CudaEmulationDeathTest, AMisalignedWmmaTileFailsTheLaunch) {
  EXPECT_EXIT(
      {
        __half *a = deviceArray<__half>(16 * 16 + 8);
        float *c = deviceArray<float>(32);
        misalignedWmmaKernel<<<1, 32>>>(a, c);
        const bool failed = cudaGetLastError() == cudaErrorLaunchFailure;
        std::exit(failed ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "256-bit aligned");
}

/// A kernel whose blocks may have at most 64 threads.
__global__ void __launch_bounds__(64) boundedKernel(int *out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

TEST(CudaEmulationDeathTest, ALaunchOverTheKernelsBoundsFails) {
  EXPECT_EXIT(
      {
        int *out = deviceArray<int>(128);
        boundedKernel<<<2, 64>>>(out);
        const bool within = cudaGetLastError() == cudaSuccess &&
                            fetch(out, 128) == std::vector<int>(128, 1);
        boundedKernel<<<1, 128>>>(out);
        const bool failed = cudaGetLastError() == cudaErrorLaunchFailure;
        std::exit(within && failed ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "boundedKernel: a launch of 128 threads a block, over the 64 of its "
      "__launch_bounds__");
}

/// Lane 0 waits at __syncthreads while the rest of its warp waits for it
/// at a shuffle: neither can pass.
__global__ void deadlockKernel(float *out) {
  if (threadIdx.x == 0)
    __syncthreads();
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

TEST(CudaEmulationDeathTest, ABarrierNobodyCanPassFailsTheLaunch) {
  // In a child process: the failure is sticky, as a kernel fault is.
  EXPECT_EXIT(
      {
        float *out = deviceArray<float>(32);
        deadlockKernel<<<1, 32>>>(out);
        const bool failed = cudaGetLastError() == cudaErrorLaunchFailure &&
                            cudaDeviceSynchronize() == cudaErrorLaunchFailure;
        std::exit(failed ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "deadlock in deadlockKernel");
}
#endif

} // namespace
