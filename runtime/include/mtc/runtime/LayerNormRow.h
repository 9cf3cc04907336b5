//===- LayerNormRow.h - One row of layer normalization ----------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The forward layer norm of one row, shared by the runtime's
// layerNormForward* and the generated kernels that compute a layer norm's
// input and normalize it in one kernel (the fusion pass's row epilogues),
// so both compute the same numbers. The statistics are reduced in double;
// the per-element arithmetic after the reductions is the same on both
// targets.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LAYERNORMROW_H
#define MTC_RUNTIME_LAYERNORMROW_H

#include "mtc/runtime/Half.h" // MTC_HOST_DEVICE

#include <cmath>
#include <cstdint>

namespace mtc::rt {

/// invstd = 1 / sqrt(var + eps), formed in double and rounded once.
MTC_HOST_DEVICE inline float inverseStd(double biasedVar, float eps) {
  return static_cast<float>(1.0 / sqrt(biasedVar + static_cast<double>(eps)));
}

MTC_HOST_DEVICE inline float normalizeElement(float x, float mean, float invstd,
                                              float scale, float bias) {
  return (x - mean) * invstd * scale + bias;
}

namespace cpu {

/// The sum of term(0..count-1) in double, over four interleaved
/// accumulators (fixed order: the result does not depend on threads).
template <typename Term> double sumTerms(int64_t count, Term term) {
  double acc0 = 0.0, acc1 = 0.0, acc2 = 0.0, acc3 = 0.0;
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    acc0 += term(j);
    acc1 += term(j + 1);
    acc2 += term(j + 2);
    acc3 += term(j + 3);
  }
  for (; j < count; ++j)
    acc0 += term(j);
  return (acc0 + acc1) + (acc2 + acc3);
}

/// Normalizes the `dim` values at src: store(j, y_j) for each, and the
/// row's mean and 1/std into *mean and *invstd (either may be null).
template <typename Store>
inline void layerNormRow(int64_t dim, const float *src, const float *scale,
                         const float *bias, float eps, Store store,
                         float *mean, float *invstd) {
  double sum = sumTerms(dim, [&](int64_t j) { return src[j]; });
  double rowMean = dim > 0 ? sum / static_cast<double>(dim) : 0.0;
  double squaredDevSum = sumTerms(dim, [&](int64_t j) {
    double dev = src[j] - rowMean;
    return dev * dev;
  });
  float meanF = static_cast<float>(rowMean);
  float inv =
      inverseStd(dim > 0 ? squaredDevSum / static_cast<double>(dim) : 0.0, eps);
  if (mean)
    *mean = meanF;
  if (invstd)
    *invstd = inv;
  for (int64_t j = 0; j < dim; ++j)
    store(j, normalizeElement(src[j], meanF, inv, scale[j],
                              bias ? bias[j] : 0.0f));
}

} // namespace cpu

#if defined(__CUDACC__) || defined(MTC_CUDA_EMULATION)
namespace cuda {

/// The most threads a row's block has.
constexpr int kNormRowThreads = 512;

/// Threads per row: a power of two from 32 up to kNormRowThreads, about
/// four elements per thread. A constant expression: generated kernels size
/// their loops by it.
__host__ __device__ constexpr unsigned normRowThreads(int64_t dim) {
  unsigned threads = 32;
  while (threads < kNormRowThreads && threads * 4 < dim)
    threads *= 2;
  return threads;
}

/// `value` of the lane `offset` away (lane ^ offset) in the warp. A type of
/// several numbers (a pair a reduction carries together) gives an overload
/// next to it, found by argument-dependent lookup, that shuffles each.
template <typename T> __device__ inline T shuffleXor(T value, int offset) {
  return __shfl_xor_sync(0xffffffffu, value, offset);
}

/// The reduction by `op` of one value per lane over the warp, by xor
/// shuffles (offsets 16, 8, ..., 1): a lane and its partner combine the
/// same two values (op must be commutative), so every lane gets the same
/// bits, the same run to run. The whole warp calls it.
template <typename T, typename Op> __device__ T warpReduce(T value, Op op) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = op(value, shuffleXor(value, offset));
  return value;
}

/// The reduction by `op` of one value per thread over the block, in a
/// fixed order, so the result is the same run to run: each warp combines
/// its lanes by xor shuffles (offsets 16, 8, ..., 1), its lane 0 leaves the
/// warp's result in scratch, and every warp then combines those the same
/// way. A lane and its partner combine the same two values (op must be
/// commutative, as + and fmax are in IEEE arithmetic), so every thread gets
/// the same total. `scratch` holds blockDim.x / 32 values; blockDim.x must
/// be a power of two from 32 to 1024. Two barriers, the last so that the
/// next call may reuse scratch.
template <typename T, typename Op>
__device__ T blockReduce(T value, T *scratch, Op op) {
  value = warpReduce(value, op);
  const unsigned warps = blockDim.x / 32;
  if (warps == 1)
    return value;
  if (threadIdx.x % 32 == 0)
    scratch[threadIdx.x / 32] = value;
  __syncthreads();
  value = scratch[threadIdx.x % warps];
  for (unsigned offset = warps / 2; offset > 0; offset /= 2)
    value = op(value, shuffleXor(value, offset));
  __syncthreads();
  return value;
}

/// The block's sum (blockReduce).
template <typename T> __device__ T blockSum(T value, T *scratch) {
  return blockReduce(value, scratch, [](T a, T b) { return a + b; });
}

/// Elements a thread moves as one vector in the row kernels, and the most
/// vectors it keeps in registers: rows of up to kRowVector *
/// kHeldVectors * blockDim.x elements are read from memory once.
constexpr int kRowVector = 4;
constexpr int kHeldVectors = 2;

/// Whether blocks of `threads` threads may move a row of `dim` elements of
/// T at p (and every row after it, dim apart) as vectors of kRowVector and
/// keep it in registers, up to `vectors` a thread (on the host: what
/// rowInRegisters will say).
template <typename T>
__host__ __device__ inline bool rowHeldBy(int64_t dim, int64_t threads,
                                          const T *p,
                                          int vectors = kHeldVectors) {
  return dim % kRowVector == 0 &&
         dim <= int64_t(kRowVector) * vectors * threads &&
         reinterpret_cast<uintptr_t>(p) % (kRowVector * sizeof(T)) == 0;
}

/// rowHeldBy for the running block.
template <typename T>
__device__ inline bool rowInRegisters(int64_t dim, const T *p) {
  return rowHeldBy(dim, blockDim.x, p);
}

/// The threads that hold a row's vectors in registers and normalize it
/// (normalizeHeldRow): the whole block, or one warp. The vectors of a
/// thread of `rank` among `threads` are the row's rank-th, then every
/// threads-th (forEachHeld).
///
/// The block: normRowThreads(dim) threads, sums through `scratch`
/// (blockReduce: barriers).
struct BlockRow {
  double *scratch;
  __device__ int64_t rank() const { return threadIdx.x; }
  __device__ int64_t threads() const { return blockDim.x; }
  __device__ double sum(double v) const { return blockSum(v, scratch); }
};
/// One warp (warp-row kernels: kWarpRowsPerBlock rows a block, up to
/// kWarpRowVectors vectors a lane): sums by shuffles alone, no barrier and
/// no shared memory, so a warp's row waits for no other.
struct WarpRow {
  __device__ int64_t rank() const { return threadIdx.x % 32; }
  __device__ int64_t threads() const { return 32; }
  __device__ double sum(double v) const {
    return warpReduce(v, [](double a, double b) { return a + b; });
  }
};
/// Rows a block of a warp-row kernel holds, one a warp, and the most
/// vectors of kRowVector elements a lane holds: rows of up to 1024.
constexpr int kWarpRowsPerBlock = 8;
constexpr int kWarpRowVectors = 8;

/// The first element of the h-th vector a thread of `team` holds of a row.
template <typename Team = BlockRow>
__device__ inline int64_t heldFirst(int h, Team team = {}) {
  return (int64_t(h) * team.threads() + team.rank()) * kRowVector;
}

/// f(h, j) for the vectors h the thread holds of a row of `dim` elements
/// (up to Vectors), j being the vector's first element.
template <int Vectors = kHeldVectors, typename F, typename Team = BlockRow>
__device__ inline void forEachHeld(int64_t dim, F f, Team team = {}) {
#pragma unroll
  for (int h = 0; h < Vectors; ++h)
    if (heldFirst(h, team) < dim)
      f(h, heldFirst(h, team));
}

/// The V consecutive values at p widened to float: float32, or 16-bit
/// (bfloat16 when `bf16`). V is 1, 4 or 8; p is aligned to V values (to 16
/// bytes at most): float32 moves as V / 4 float4 vectors, 16-bit values as
/// one vector of 8 or 16 bytes.
template <int V>
__device__ inline void loadValues(const float *p, bool, float *v) {
  if constexpr (V == 1) {
    v[0] = *p;
  } else {
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      const float4 f = reinterpret_cast<const float4 *>(p)[q];
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z,
            v[4 * q + 3] = f.w;
    }
  }
}
/// The V 16-bit values packed in words (two a word) widened to float
/// (bfloat16 when `bf16`).
template <int V>
__device__ inline void widenWords(const uint32_t *words, bool bf16, float *v) {
#pragma unroll
  for (int e = 0; e < V; ++e) {
    // Little-endian: the lower half of a word is the earlier value.
    const uint16_t h = static_cast<uint16_t>(words[e / 2] >> (16 * (e % 2)));
    v[e] = bf16 ? bf16ToFloat(h) : halfToFloat(h);
  }
}
template <int V>
__device__ inline void loadValues(const uint16_t *p, bool bf16, float *v) {
  uint32_t words[(V + 1) / 2];
  if constexpr (V == 1) {
    words[0] = *p;
  } else if constexpr (V == 4) {
    const uint2 q = *reinterpret_cast<const uint2 *>(p);
    words[0] = q.x, words[1] = q.y;
  } else {
    const uint4 q = *reinterpret_cast<const uint4 *>(p);
    words[0] = q.x, words[1] = q.y, words[2] = q.z, words[3] = q.w;
  }
  widenWords<V>(words, bf16, v);
}

/// Stores V values at p (aligned as for loadValues): as float32, or
/// rounded to 16 bits (bfloat16 when `bf16`).
template <int V>
__device__ inline void storeValues(float *p, bool, const float *v) {
  if constexpr (V == 1) {
    *p = v[0];
  } else {
#pragma unroll
    for (int q = 0; q < V / 4; ++q)
      reinterpret_cast<float4 *>(p)[q] =
          make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  }
}
template <int V>
__device__ inline void storeValues(uint16_t *p, bool bf16, const float *v) {
  uint32_t words[(V + 1) / 2] = {};
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const uint16_t h = bf16 ? floatToBf16(v[e]) : floatToHalf(v[e]);
    words[e / 2] |= uint32_t(h) << (16 * (e % 2));
  }
  if constexpr (V == 1)
    *p = static_cast<uint16_t>(words[0]);
  else if constexpr (V == 4)
    *reinterpret_cast<uint2 *>(p) = make_uint2(words[0], words[1]);
  else
    *reinterpret_cast<uint4 *>(p) =
        make_uint4(words[0], words[1], words[2], words[3]);
}

/// The kRowVector values at p (aligned), widened to float: float32, or
/// 16-bit (bfloat16 when `bf16`).
template <typename T>
__device__ inline void loadVector(const T *p, bool bf16, float *v) {
  loadValues<kRowVector>(p, bf16, v);
}

/// kRowVector values of T as stored (16 bytes of float32, 8 of 16-bit
/// values), loaded ahead of their use: a kernel that loads the next row's
/// vectors before it reduces the current one widens them (widenVector)
/// only where it uses them, so that the loads are in flight meanwhile.
template <typename T> struct StoredVector;
template <> struct StoredVector<float> { float4 bits; };
template <> struct StoredVector<uint16_t> { uint2 bits; };

/// The kRowVector values at p (aligned), as stored.
template <typename T> __device__ inline StoredVector<T> loadStored(const T *p) {
  return {*reinterpret_cast<const decltype(StoredVector<T>::bits) *>(p)};
}

/// A stored vector widened to float (16-bit: bfloat16 when `bf16`), as
/// loadVector widens it.
__device__ inline void widenVector(StoredVector<float> s, bool, float *v) {
  v[0] = s.bits.x, v[1] = s.bits.y, v[2] = s.bits.z, v[3] = s.bits.w;
}
__device__ inline void widenVector(StoredVector<uint16_t> s, bool bf16,
                                   float *v) {
  const uint32_t words[2] = {s.bits.x, s.bits.y};
  widenWords<kRowVector>(words, bf16, v);
}

/// Stores kRowVector values at p (aligned): as float32, or rounded to 16
/// bits (bfloat16 when `bf16`).
template <typename T>
__device__ inline void storeVector(T *p, bool bf16, const float *v) {
  storeValues<kRowVector>(p, bf16, v);
}

/// The normalization of a row whose vectors the threads of `team` hold in v
/// (up to Vectors a thread, as forEachHeld places them; rowHeldBy must
/// hold for scale, bias and dst): the mean and the variance in double, two
/// reductions over the team in a fixed order, then y; see layerNormRow.
/// Generated kernels call it on the rows they compute (a layer norm as
/// their row epilogue), which they then neither store and read back nor
/// wait for: the block's rows through normalizeHeldRow, a warp's through
/// normalizeWarpRow.
template <typename Team, int Vectors, typename Out>
__device__ void
normalizeRowBy(Team team, int64_t dim, const float (&v)[Vectors][kRowVector],
               const float *scale, const float *bias, float eps, Out *dst,
               float *mean, float *invstd, bool bf16) {
  double sum = 0.0;
  forEachHeld<Vectors>(
      dim,
      [&](int h, int64_t) {
        for (int e = 0; e < kRowVector; ++e)
          sum += v[h][e];
      },
      team);
  const double rowMean =
      dim > 0 ? team.sum(sum) / static_cast<double>(dim) : 0.0;
  double squaredDevSum = 0.0;
  forEachHeld<Vectors>(
      dim,
      [&](int h, int64_t) {
        for (int e = 0; e < kRowVector; ++e) {
          double dev = v[h][e] - rowMean;
          squaredDevSum += dev * dev;
        }
      },
      team);
  squaredDevSum = team.sum(squaredDevSum);
  const float meanF = static_cast<float>(rowMean);
  const float inv =
      inverseStd(dim > 0 ? squaredDevSum / static_cast<double>(dim) : 0.0, eps);
  if (team.rank() == 0) {
    if (mean)
      *mean = meanF;
    if (invstd)
      *invstd = inv;
  }
  forEachHeld<Vectors>(
      dim,
      [&](int h, int64_t j) {
        float gamma[kRowVector], beta[kRowVector] = {0.0f, 0.0f, 0.0f, 0.0f};
        loadVector(scale + j, bf16, gamma);
        if (bias)
          loadVector(bias + j, bf16, beta);
        float y[kRowVector];
        for (int e = 0; e < kRowVector; ++e)
          y[e] = normalizeElement(v[h][e], meanF, inv, gamma[e], beta[e]);
        storeVector(dst + j, bf16, y);
      },
      team);
}

/// normalizeRowBy over the block (normRowThreads(dim) threads; `scratch`
/// holds blockDim.x / 32 values).
template <int Vectors, typename Out>
__device__ void
normalizeHeldRow(int64_t dim, const float (&v)[Vectors][kRowVector],
                 const float *scale, const float *bias, float eps, Out *dst,
                 float *mean, float *invstd, bool bf16, double *scratch) {
  normalizeRowBy(BlockRow{scratch}, dim, v, scale, bias, eps, dst, mean, invstd,
                 bf16);
}

/// normalizeRowBy over the calling warp (rows of up to kWarpRowVectors
/// vectors a lane).
template <int Vectors, typename Out>
__device__ void
normalizeWarpRow(int64_t dim, const float (&v)[Vectors][kRowVector],
                 const float *scale, const float *bias, float eps, Out *dst,
                 float *mean, float *invstd, bool bf16) {
  static_assert(Vectors <= kWarpRowVectors, "a lane holds the row");
  normalizeRowBy(WarpRow{}, dim, v, scale, bias, eps, dst, mean, invstd, bf16);
}

/// One row by the whole block (normRowThreads(dim) threads): the values at
/// src normalized into dst; `Out` is float, or uint16_t for a 16-bit dst
/// (bfloat16 when `bf16`, else float16), rounded as a conversion would
/// round it. Thread 0 writes *mean and *invstd (either may be null).
/// Where the row allows (rowInRegisters for src, scale, bias and dst),
/// thread t holds elements 4t..4t+3 (and 4(t + blockDim.x).., ...) in
/// registers and reads and writes them as vectors; otherwise every pass
/// reads src again, an element per thread at a time.
template <typename Out>
__device__ void layerNormRow(int64_t dim, const float *src, const float *scale,
                             const float *bias, float eps, Out *dst,
                             float *mean, float *invstd, bool bf16,
                             double *scratch) {
  const bool held = rowInRegisters(dim, src) && rowInRegisters(dim, scale) &&
                    (!bias || rowInRegisters(dim, bias)) &&
                    rowInRegisters(dim, dst);
  if (held) {
    float v[kHeldVectors][kRowVector];
    forEachHeld(dim,
                [&](int h, int64_t j) { loadVector(src + j, bf16, v[h]); });
    normalizeHeldRow(dim, v, scale, bias, eps, dst, mean, invstd, bf16,
                     scratch);
    return;
  }
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    sum += src[j];
  const double rowMean =
      dim > 0 ? blockSum(sum, scratch) / static_cast<double>(dim) : 0.0;
  double squaredDevSum = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    double dev = src[j] - rowMean;
    squaredDevSum += dev * dev;
  }
  squaredDevSum = blockSum(squaredDevSum, scratch);
  const float meanF = static_cast<float>(rowMean);
  const float inv = inverseStd(
      dim > 0 ? squaredDevSum / static_cast<double>(dim) : 0.0, eps);
  if (threadIdx.x == 0) {
    if (mean)
      *mean = meanF;
    if (invstd)
      *invstd = inv;
  }
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float y =
        normalizeElement(src[j], meanF, inv, scale[j], bias ? bias[j] : 0.0f);
    if constexpr (sizeof(Out) == sizeof(float))
      dst[j] = y;
    else
      dst[j] = bf16 ? floatToBf16(y) : floatToHalf(y);
  }
}

} // namespace cuda
#endif

} // namespace mtc::rt

#endif // MTC_RUNTIME_LAYERNORMROW_H
