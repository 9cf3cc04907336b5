//===- Kernel.h - CUDA device code on the CPU -------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Included first (g++ -include) by every CUDA source the emulation compiles,
// after translate.py has rewritten its launches and dynamic shared memory.
// It gives device code what nvcc would: the built-in variables, barriers,
// warp exchanges, atomics, the intrinsics the runtime uses and the WMMA
// fragments, all on top of the fiber scheduler in Fibers.cpp.
//
// How the emulation maps the execution model:
//  * a launch runs its blocks one after the other; a block's threads are
//    fibers, started in order and switched only at __syncthreads*, at warp
//    operations (__syncwarp, __shfl*_sync, __any/__all/__ballot_sync) and at
//    WMMA calls, each of which waits for every thread (or lane) that has not
//    exited; a barrier nobody can pass is reported as a deadlock;
//  * __shared__ variables are statics (one block runs at a time) that the
//    first thread of each block to declare them fills with 0xff bytes (NaN
//    as floats; translate.py adds the call), and the dynamic shared memory
//    a fresh buffer per block filled alike, as device memory from
//    cudaMalloc is, so code that reads what it never wrote shows it;
//  * atomics are plain read-modify-writes: fibers never interleave inside
//    one (built with ThreadSanitizer, relaxed atomics of the host);
//  * WMMA fragments hold the whole 16 x 16 tile in every lane; products are
//    summed in float in k order; loads and stores touch each element from
//    the lane mma.sync's layout gives it (a load then gathers the tile);
//  * built with ThreadSanitizer, only __syncthreads* and __syncwarp order
//    the memory accesses of a block's threads (Fibers.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MTC_TEST_CUDAEMU_KERNEL_H
#define MTC_TEST_CUDAEMU_KERNEL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// The project's headers enable their device code for nvcc or for this.
#ifndef MTC_CUDA_EMULATION
#define MTC_CUDA_EMULATION 1
#endif

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

namespace mtc::cudaemu {

/// What one emulated thread sees of the launch.
struct ThreadState {
  uint3 thread;
  uint3 block;
  dim3 blockSize;
  dim3 gridSize;
  unsigned linear; ///< thread flattened, x fastest
};

/// The thread running now (only valid inside a kernel).
const ThreadState &current();

/// __syncthreads and its reductions: every thread of the block that has not
/// exited arrives; returns the reduction of `predicate` over them.
enum class Reduce { None, Or, And, Count };
int blockBarrier(int predicate, Reduce reduce);

/// A warp operation: every lane of the calling thread's warp that has not
/// exited arrives with `value` and `predicate`; the result is the value of
/// lane `source` (0..31; -1 reads none), and `ballot` receives the
/// predicates' bits.
uint64_t warpExchange(uint64_t value, int source, int predicate,
                      unsigned *ballot);

/// __syncwarp: every lane of the calling thread's warp that has not exited
/// arrives, and what each did before happens before what all do after
/// (the one warp operation that orders memory).
void warpBarrier();

/// The lanes of a warp converge (WMMA's collective calls), ordering no
/// memory.
inline void warpConverge() { warpExchange(0, -1, 0, nullptr); }

/// The current block's dynamic shared memory.
void *dynamicShared();

/// Fills the static __shared__ variable at `address` with 0xff bytes unless
/// a thread of the current block did already (translate.py calls it after
/// each declaration).
void freshShared(void *address, size_t bytes);

/// Runs `threadBody` as every thread of every block of a launch of `kernel`
/// (a function address, for the shared memory it may use) named `name`.
/// Validates the configuration at once, as a launch does, and records
/// failures for cudaGetLastError.
void submitLaunch(const void *kernel, const char *name, dim3 grid, dim3 block,
                  size_t sharedBytes, cudaStream_t stream,
                  std::function<void()> threadBody);

template <typename R, typename... P> const void *kernelAddress(R (*f)(P...)) {
  return reinterpret_cast<const void *>(f);
}

/// Makes an expression depend on D, so that a failure to resolve it is a
/// substitution failure.
template <typename D, typename F> F &&dependent(F &&f) {
  return std::forward<F>(f);
}

/// probe(0) when it compiles (the launched name is one function, or a
/// function pointer), else null: a kernel template whose arguments the call
/// deduces has no address before the call, and only opted-in shared memory
/// needs one.
template <typename F> const void *addressOrNull(F probe) {
  if constexpr (std::is_invocable<F, int>::value)
    return probe(0);
  else
    return nullptr;
}

/// `kernel<<<grid, block, shared, stream>>>(args)` after translate.py:
/// Launch(kernel address, "kernel", grid, block, shared, stream)
///     .run([=](auto... p) { kernel(p...); }, args).
/// The arguments are copied at the launch, as CUDA copies them, and every
/// thread calls the kernel with its own copies.
class Launch {
public:
  Launch(const void *kernel, const char *name, dim3 grid, dim3 block,
         size_t sharedBytes = 0, cudaStream_t stream = nullptr)
      : kernel(kernel), name(name), grid(grid), block(block),
        sharedBytes(sharedBytes), stream(stream) {}

  template <typename F, typename... A> void run(F f, A &&...args) {
    auto copies = std::make_tuple(std::decay_t<A>(std::forward<A>(args))...);
    submitLaunch(kernel, name, grid, block, sharedBytes, stream,
                 [f, copies] { std::apply(f, copies); });
  }

private:
  const void *kernel;
  const char *name;
  dim3 grid, block;
  size_t sharedBytes;
  cudaStream_t stream;
};

template <typename T> uint64_t toSlot(T value) {
  static_assert(sizeof(T) <= sizeof(uint64_t) &&
                    std::is_trivially_copyable<T>::value,
                "warp exchanges move at most 8 bytes");
  uint64_t slot = 0;
  std::memcpy(&slot, &value, sizeof value);
  return slot;
}
template <typename T> T fromSlot(uint64_t slot) {
  T value;
  std::memcpy(&value, &slot, sizeof value);
  return value;
}

/// A function ThreadSanitizer does not instrument: one that works on a
/// lane's registers alone (and the copies of the warp's that it gathers),
/// where checking each access would only cost time.
#if defined(__SANITIZE_THREAD__)
#define MTC_CUDAEMU_REGISTERS_ONLY __attribute__((no_sanitize_thread))
#else
#define MTC_CUDAEMU_REGISTERS_ONLY
#endif

/// The lane of the calling thread in its warp.
inline int laneId() { return static_cast<int>(current().linear % 32); }

/// The value of `lane`, or the caller's own where `lane` lies outside the
/// caller's group of `width` lanes (as __shfl_xor/down/up_sync define it).
template <typename T> T shuffleWithin(T value, int lane, int width) {
  const int self = laneId();
  if (lane < 0 || lane / width != self / width)
    lane = self;
  return fromSlot<T>(warpExchange(toSlot(value), lane, 0, nullptr));
}

/// The most bytes a lane gives warpGather.
constexpr size_t kGatherBytes = 32;

/// A warp operation that gives every lane the `bytes` (at most
/// kGatherBytes) each lane of its warp gives: lane l's at all + l * bytes;
/// 0xff bytes for a lane that has exited or does not exist.
void warpGather(const void *mine, size_t bytes, void *all);

/// A 16-bit value (bfloat16 when `bf16`, else float16) widened to float.
MTC_CUDAEMU_REGISTERS_ONLY inline float widen16(uint16_t bits, bool bf16) {
  if (bf16) {
    const uint32_t word = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &word, sizeof f);
    return f;
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

/// PTX's mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 with the
/// accumulator in place (D = A B + D; T is bf16 when `bf16`, else f16), on
/// the fragments as the PTX ISA lays them out. With g = lane / 4 and
/// t = lane % 4, a lane holds
///   A (16 x 16, two elements a register, the lower index in the low half):
///     a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
///     a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
///   B (16 x 8): b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g];
///   C and D (16 x 8, float): d[0..1] = D[g][2t, 2t+1],
///     d[2..3] = D[g+8][2t, 2t+1].
/// The products are summed in float in k order after D, as the WMMA
/// emulation sums them.
MTC_CUDAEMU_REGISTERS_ONLY inline void mmaM16N8K16(float (&d)[4],
                                                   const uint32_t (&a)[4],
                                                   const uint32_t (&b)[2],
                                                   bool bf16) {
  struct Fragments {
    uint32_t a[4], b[2];
  };
  const Fragments mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  Fragments all[32];
  warpGather(&mine, sizeof mine, all);
  const int lane = laneId(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) {
      // A[row][k] is held by lane 4 (row % 8) + (k % 8) / 2, B[k][col] by
      // lane 4 col + (k % 8) / 2; of a register's pair of elements, the
      // lower index is the low half.
      const uint32_t aWord =
          all[4 * (row % 8) + (k % 8) / 2].a[row / 8 + 2 * (k / 8)];
      const uint32_t bWord = all[4 * col + (k % 8) / 2].b[k / 8];
      const int shift = 16 * (k & 1);
      sum += widen16(static_cast<uint16_t>(aWord >> shift), bf16) *
             widen16(static_cast<uint16_t>(bWord >> shift), bf16);
    }
    d[i] = sum;
  }
}

/// PTX's ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives the
/// address of row l % 8 of the 8 x 8 matrix l / 8 (16 bytes, 16-byte
/// aligned); r[j] gets matrix j's row l / 4, columns 2 (l % 4) and
/// 2 (l % 4) + 1 (the lower column in the low half), or with `trans` its
/// column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1. The whole warp calls it.
void ldmatrixX4(uint32_t (&r)[4], const void *row, bool trans);

/// What WMMA's load_matrix_sync and store_matrix_sync require (CUDA's
/// programming guide): a 256-bit aligned pointer and a leading dimension
/// of a multiple of 16 bytes; else the launch fails, named `what`.
void checkWmmaMatrix(const void *p, size_t ldmBytes, const char *what);

/// A kernel's __launch_bounds__ (its first argument: the most threads a
/// block may have), checked by the first statement translate.py puts in
/// its body: a launch of more threads a block fails on a GPU, so here the
/// launch fails, naming `kernel`. Whether the block may run.
bool withinLaunchBounds(unsigned long long maxThreads, const char *kernel);

/// cp.async through cuda_pipeline.h's primitives. A copy is queued on the
/// calling thread and made only when __pipeline_wait_prior lets its group
/// complete (copies queued since the last commit join the next group), so
/// code that reads the destination before waiting for it, or lets another
/// thread read it before a barrier after the wait, reads what was there
/// before; a thread that exits with copies it never waited for fails the
/// launch.
void asyncCopy(void *dst, const void *src, size_t bytes, size_t zfill);
void asyncCommit();
void asyncWait(size_t prior);

} // namespace mtc::cudaemu

#define threadIdx (::mtc::cudaemu::current().thread)
#define blockIdx (::mtc::cudaemu::current().block)
#define blockDim (::mtc::cudaemu::current().blockSize)
#define gridDim (::mtc::cudaemu::current().gridSize)

// The C++ overloads cuda_runtime.h declares only for nvcc.
template <typename T>
inline cudaError_t cudaGetSymbolAddress(void **devPtr, const T &symbol) {
  return ::cudaGetSymbolAddress(devPtr, static_cast<const void *>(&symbol));
}
template <typename T>
inline cudaError_t
cudaMemcpyToSymbolAsync(const T &symbol, const void *src, size_t count,
                        size_t offset = 0,
                        cudaMemcpyKind kind = cudaMemcpyHostToDevice,
                        cudaStream_t stream = nullptr) {
  return ::cudaMemcpyToSymbolAsync(static_cast<const void *>(&symbol), src,
                                   count, offset, kind, stream);
}
template <typename T>
inline cudaError_t
cudaMemcpyFromSymbolAsync(void *dst, const T &symbol, size_t count,
                          size_t offset = 0,
                          cudaMemcpyKind kind = cudaMemcpyDeviceToHost,
                          cudaStream_t stream = nullptr) {
  return ::cudaMemcpyFromSymbolAsync(dst, static_cast<const void *>(&symbol),
                                     count, offset, kind, stream);
}
template <typename R, typename... P>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr,
                                         R (*entry)(P...)) {
  return ::cudaFuncGetAttributes(attr, ::mtc::cudaemu::kernelAddress(entry));
}
template <typename R, typename... P>
inline cudaError_t cudaFuncSetAttribute(R (*entry)(P...),
                                        cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(::mtc::cudaemu::kernelAddress(entry), attr,
                                value);
}

//===----------------------------------------------------------------------===//
// Barriers and warp operations
//===----------------------------------------------------------------------===//

inline void __syncthreads() {
  ::mtc::cudaemu::blockBarrier(0, ::mtc::cudaemu::Reduce::None);
}
inline int __syncthreads_or(int p) {
  return ::mtc::cudaemu::blockBarrier(p, ::mtc::cudaemu::Reduce::Or);
}
inline int __syncthreads_and(int p) {
  return ::mtc::cudaemu::blockBarrier(p, ::mtc::cudaemu::Reduce::And);
}
inline int __syncthreads_count(int p) {
  return ::mtc::cudaemu::blockBarrier(p, ::mtc::cudaemu::Reduce::Count);
}
inline void __pipeline_memcpy_async(void *__restrict__ dst,
                                    const void *__restrict__ src,
                                    size_t size_and_align, size_t zfill = 0) {
  ::mtc::cudaemu::asyncCopy(dst, src, size_and_align, zfill);
}
inline void __pipeline_commit() { ::mtc::cudaemu::asyncCommit(); }
inline void __pipeline_wait_prior(size_t prior) {
  ::mtc::cudaemu::asyncWait(prior);
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  ::mtc::cudaemu::warpBarrier();
}

/// The lanes are split into groups of `width`; lane `source` of the caller's
/// group (taken modulo width) gives the result.
template <typename T>
inline T __shfl_sync(unsigned, T value, int source, int width = 32) {
  using namespace ::mtc::cudaemu;
  const int group = laneId() / width * width;
  const int lane = group + ((source % width) + width) % width;
  return fromSlot<T>(warpExchange(toSlot(value), lane, 0, nullptr));
}
/// A lane may read a lane of an earlier group of `width`; one of a later
/// group gives the caller its own value (CUDA's programming guide).
template <typename T>
inline T __shfl_xor_sync(unsigned, T value, int mask, int width = 32) {
  using namespace ::mtc::cudaemu;
  const int self = laneId();
  int lane = self ^ mask;
  if (lane / width > self / width || lane >= 32)
    lane = self;
  return fromSlot<T>(warpExchange(toSlot(value), lane, 0, nullptr));
}
template <typename T>
inline T __shfl_down_sync(unsigned, T value, unsigned delta, int width = 32) {
  return ::mtc::cudaemu::shuffleWithin(
      value, ::mtc::cudaemu::laneId() + static_cast<int>(delta), width);
}
template <typename T>
inline T __shfl_up_sync(unsigned, T value, unsigned delta, int width = 32) {
  return ::mtc::cudaemu::shuffleWithin(
      value, ::mtc::cudaemu::laneId() - static_cast<int>(delta), width);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  unsigned bits = 0;
  ::mtc::cudaemu::warpExchange(0, -1, predicate != 0, &bits);
  return bits;
}
inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  unsigned bits = 0;
  ::mtc::cudaemu::warpExchange(0, -1, predicate == 0, &bits);
  (void)mask;
  return bits == 0;
}

//===----------------------------------------------------------------------===//
// Atomics (plain: fibers switch only at barriers; under ThreadSanitizer
// relaxed host atomics, which it tells from plain accesses and which order
// nothing, as CUDA's atomics do not)
//===----------------------------------------------------------------------===//

namespace mtc::cudaemu {
/// *address = next(*address) as one atomic step; returns the old value.
template <typename T, typename F> inline T atomicUpdate(T *address, F next) {
#if defined(__SANITIZE_THREAD__)
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T value = next(old);
  while (!__atomic_compare_exchange(address, &old, &value, false,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    value = next(old);
  return old;
#else
  T old = *address;
  *address = next(old);
  return old;
#endif
}
} // namespace mtc::cudaemu

template <typename T> inline T atomicAdd(T *address, T value) {
  return ::mtc::cudaemu::atomicUpdate(address,
                                      [&](T old) { return old + value; });
}
template <typename T> inline T atomicMin(T *address, T value) {
  return ::mtc::cudaemu::atomicUpdate(
      address, [&](T old) { return value < old ? value : old; });
}
template <typename T> inline T atomicMax(T *address, T value) {
  return ::mtc::cudaemu::atomicUpdate(
      address, [&](T old) { return old < value ? value : old; });
}
template <typename T> inline T atomicExch(T *address, T value) {
  return ::mtc::cudaemu::atomicUpdate(address, [&](T) { return value; });
}
template <typename T> inline T atomicCAS(T *address, T compare, T value) {
  return ::mtc::cudaemu::atomicUpdate(
      address, [&](T old) { return old == compare ? value : old; });
}

//===----------------------------------------------------------------------===//
// Intrinsics
//===----------------------------------------------------------------------===//

template <typename T> inline T __ldg(const T *p) { return *p; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) {
  return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __float_as_uint(float x) {
  return ::mtc::cudaemu::fromSlot<unsigned>(::mtc::cudaemu::toSlot(x));
}
inline float __uint_as_float(unsigned x) {
  return ::mtc::cudaemu::fromSlot<float>(::mtc::cudaemu::toSlot(x));
}
inline int __float_as_int(float x) {
  return static_cast<int>(__float_as_uint(x));
}
inline float __int_as_float(int x) {
  return __uint_as_float(static_cast<unsigned>(x));
}

// CUDA's device min / max overloads take mixed integer types.
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b)
                                               : static_cast<C>(a);
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b)
                                               : static_cast<C>(a);
}

//===----------------------------------------------------------------------===//
// WMMA
//===----------------------------------------------------------------------===//

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/// The whole M x N (matrix_b: K x N, matrix_a: M x K) tile, row-major, in
/// float: 16-bit operands widen exactly.
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int kRows = std::is_same<Use, matrix_b>::value ? K : M;
  static constexpr int kCols = std::is_same<Use, matrix_a>::value ? K : N;
  static constexpr int num_elements = kRows * kCols;
  float x[kRows * kCols];
};

template <typename T> inline float widen(T v) { return static_cast<float>(v); }

// Memory as a GPU's lanes touch it: each element of a tile is read and
// written by one lane, the lane that would hold it in mma.sync.m16n8k16's
// fragments (the PTX ISA's layout; mmaM16N8K16 above): element (r, c) of an
// A or accumulator tile by lane 4 (r % 8) + (c % 8) / 2, element (k, n) of
// a B tile by lane 4 (n % 8) + (k % 8) / 2. CUDA leaves WMMA's layout
// undefined but an accumulator's load and store agree, so a kernel may
// store what it loaded without a barrier; a lane that reads what another
// wrote needs a __syncwarp (which ThreadSanitizer checks), and a kernel
// that wrote a tile from lane e % 32 for element e before loading it is
// reported. A load then gathers the lanes' elements, as every lane here
// holds the whole tile.

/// The lane that reads and writes element (r, c) of a tile (`b`: a B
/// tile, K x N).
template <bool kB> inline int shareOwner(int r, int c) {
  return kB ? 4 * (c % 8) + (r % 8) / 2 : 4 * (r % 8) + (c % 8) / 2;
}

/// tile (kRows x kCols, row-major) = read(r, c), each element read by its
/// lane.
template <int kRows, int kCols, bool kB, typename Read>
inline void loadShares(float (&tile)[kRows * kCols], Read read) {
  static_assert(kRows % 8 == 0 && kCols % 8 == 0, "whole 8 x 8 blocks");
  constexpr int kSlots = kRows * kCols / 32;
  constexpr int kPerRound =
      static_cast<int>(::mtc::cudaemu::kGatherBytes / sizeof(float));
  const int lane = ::mtc::cudaemu::laneId();
  float mine[kSlots], all[32 * kSlots];
  int n = 0;
  for (int i = 0; i < kRows * kCols; ++i)
    if (shareOwner<kB>(i / kCols, i % kCols) == lane)
      mine[n++] = read(i / kCols, i % kCols);
  for (int first = 0; first < kSlots; first += kPerRound) {
    const int count = kSlots - first < kPerRound ? kSlots - first : kPerRound;
    float round[32 * kPerRound];
    ::mtc::cudaemu::warpGather(mine + first, count * sizeof(float), round);
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < count; ++j)
        all[l * kSlots + first + j] = round[l * count + j];
  }
  int next[32] = {};
  for (int i = 0; i < kRows * kCols; ++i) {
    const int owner = shareOwner<kB>(i / kCols, i % kCols);
    tile[i] = all[owner * kSlots + next[owner]++];
  }
}

/// Operand tiles: the fragment's layout says how memory holds them.
template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const T *p,
                             unsigned ldm) {
  ::mtc::cudaemu::checkWmmaMatrix(p, ldm * sizeof(T), "load_matrix_sync");
  using F = fragment<Use, M, N, K, T, Layout>;
  loadShares<F::kRows, F::kCols, std::is_same<Use, matrix_b>::value>(
      f.x, [&](int r, int c) {
        return widen(std::is_same<Layout, col_major>::value ? p[c * ldm + r]
                                                            : p[r * ldm + c]);
      });
}

template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f,
                             const float *p, unsigned ldm, layout_t layout) {
  ::mtc::cudaemu::checkWmmaMatrix(p, ldm * sizeof(float), "load_matrix_sync");
  loadShares<M, N, false>(f.x, [&](int r, int c) {
    return layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
  });
}

template <int M, int N, int K>
inline void store_matrix_sync(float *p,
                              const fragment<accumulator, M, N, K, float> &f,
                              unsigned ldm, layout_t layout) {
  ::mtc::cudaemu::checkWmmaMatrix(p, ldm * sizeof(float), "store_matrix_sync");
  ::mtc::cudaemu::warpConverge();
  const int lane = ::mtc::cudaemu::laneId();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      if (shareOwner<false>(r, c) == lane)
        (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) =
            f.x[r * N + c];
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, float value) {
  for (float &v : f.x)
    v = value;
}

template <int M, int N, int K, typename T, typename LA, typename LB>
MTC_CUDAEMU_REGISTERS_ONLY inline void
mma_sync(fragment<accumulator, M, N, K, float> &d,
         const fragment<matrix_a, M, N, K, T, LA> &a,
         const fragment<matrix_b, M, N, K, T, LB> &b,
         const fragment<accumulator, M, N, K, float> &c) {
  ::mtc::cudaemu::warpConverge();
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float sum = c.x[i * N + j];
      for (int k = 0; k < K; ++k)
        sum += a.x[i * K + k] * b.x[k * N + j];
      out[i * N + j] = sum;
    }
  std::memcpy(d.x, out, sizeof out);
}

} // namespace nvcuda::wmma

#endif // MTC_TEST_CUDAEMU_KERNEL_H
