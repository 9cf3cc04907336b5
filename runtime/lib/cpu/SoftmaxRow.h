//===- SoftmaxRow.h - One row's softmax statistics on the CPU ---*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// softmaxForward and the fused softmax cross-entropy share these, so that
// both give the same bits: log_softmax(x)_i = (x_i - max) - logSum.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_CPU_SOFTMAXROW_H
#define MTC_RUNTIME_CPU_SOFTMAXROW_H

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mtc/runtime/Half.h"
#include "mtc/runtime/VecMath.h"

namespace mtc::rt::cpu {

/// The maximum of the `dim` values at x (stride `stride`) and the sum of
/// exp(x_i - max), in double. An infinite maximum is replaced (by 0 when
/// it is -inf) so that exp() stays finite for every row. The values are
/// stored as T: float, or 16 bits (`bf16` or float16), widened as they are
/// read.
template <typename T>
inline double softmaxRowSum(int64_t dim, const T *x, int64_t stride,
                            bool bf16, float &maxValue) {
  maxValue = -INFINITY;
  for (int64_t i = 0; i < dim; ++i)
    maxValue = std::max(maxValue, storedToFloat(x[i * stride], bf16));
  if (std::isinf(maxValue))
    maxValue = maxValue > 0 ? maxValue : 0.0f;
  // Blocks of exponentials computed in a loop of their own (which
  // vectorizes), then summed in order.
  constexpr int64_t kBlock = 64;
  float e[kBlock];
  double sum = 0.0;
  for (int64_t i0 = 0; i0 < dim; i0 += kBlock) {
    const int64_t n = std::min(kBlock, dim - i0);
    for (int64_t k = 0; k < n; ++k)
      e[k] = vecExp(storedToFloat(x[(i0 + k) * stride], bf16) - maxValue);
    for (int64_t k = 0; k < n; ++k)
      sum += e[k];
  }
  return sum;
}

/// The same over float32 values.
inline double softmaxRowSum(int64_t dim, const float *x, int64_t stride,
                            float &maxValue) {
  return softmaxRowSum(dim, x, stride, false, maxValue);
}

/// The row's maximum and the log of its sum of exponentials as float.
template <typename T>
inline void softmaxRowShift(int64_t dim, const T *x, bool bf16,
                            float &maxValue, float &logSum) {
  logSum =
      static_cast<float>(std::log(softmaxRowSum(dim, x, 1, bf16, maxValue)));
}

} // namespace mtc::rt::cpu

#endif // MTC_RUNTIME_CPU_SOFTMAXROW_H
