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
/// four elements per thread.
inline unsigned normRowThreads(int64_t dim) {
  unsigned threads = 32;
  while (threads < kNormRowThreads && threads * 4 < dim)
    threads *= 2;
  return threads;
}

/// Sum of one value per thread over the block, by a fixed tree; every thread
/// gets the total. `scratch` holds blockDim.x values; blockDim.x must be a
/// power of two.
template <typename T> __device__ T blockSum(T value, T *scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width)
      scratch[threadIdx.x] += scratch[threadIdx.x + width];
    __syncthreads();
  }
  T total = scratch[0];
  // Everyone must read the total before the next call overwrites it.
  __syncthreads();
  return total;
}

/// One row by the whole block (normRowThreads(dim) threads): the values at
/// src normalized into dst; `Out` is float, or uint16_t for a 16-bit dst
/// (bfloat16 when `bf16`, else float16), rounded as a conversion would
/// round it. Thread 0 writes *mean and *invstd (either may be null).
template <typename Out>
__device__ void layerNormRow(int64_t dim, const float *src, const float *scale,
                             const float *bias, float eps, Out *dst,
                             float *mean, float *invstd, bool bf16,
                             double *scratch) {
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    sum += src[j];
  double rowMean =
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
    const float v =
        normalizeElement(src[j], meanF, inv, scale[j], bias ? bias[j] : 0.0f);
    if constexpr (sizeof(Out) == sizeof(float))
      dst[j] = v;
    else
      dst[j] = bf16 ? floatToBf16(v) : floatToHalf(v);
  }
}

} // namespace cuda
#endif

} // namespace mtc::rt

#endif // MTC_RUNTIME_LAYERNORMROW_H
