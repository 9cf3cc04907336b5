//===- KernelCommon.h - Index arithmetic shared by CPU and CUDA -*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Window and shape arithmetic used by both kernel libraries. Keeping it in
// one place makes the two implementations agree on the exact semantics
// (which cells a pooling window covers, what it divides by).
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_KERNELCOMMON_H
#define MTC_RUNTIME_LIB_KERNELCOMMON_H

#include "mtc/runtime/Kernels.h"

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define MTC_HOST_DEVICE __host__ __device__
#else
#define MTC_HOST_DEVICE
#endif

namespace mtc::rt {

/// Number of window taps start + t * dilation (t in [0, taps)) that fall in
/// [lo, hi).
MTC_HOST_DEVICE inline int64_t tapsInRange(int64_t start, int64_t taps,
                                           int64_t dilation, int64_t lo,
                                           int64_t hi) {
  int64_t count = 0;
  for (int64_t t = 0; t < taps; ++t) {
    int64_t pos = start + t * dilation;
    count += (pos >= lo && pos < hi) ? 1 : 0;
  }
  return count;
}

/// The AveragePool divisor of output (oy, ox): the taps inside the input,
/// or with countIncludePad the taps inside the padded input. A ceil-mode
/// window that runs past the padded input counts only what lies inside it,
/// as in PyTorch and the ONNX reference.
MTC_HOST_DEVICE inline int64_t avgPoolDivisor(const Pool2dParams &p, int64_t oy,
                                              int64_t ox) {
  int64_t hStart = oy * p.strideH - p.padTop;
  int64_t wStart = ox * p.strideW - p.padLeft;
  if (!p.countIncludePad)
    return tapsInRange(hStart, p.kh, p.dilationH, 0, p.h) *
           tapsInRange(wStart, p.kw, p.dilationW, 0, p.w);
  int64_t padBottom = p.padBottom < 0 ? p.padTop : p.padBottom;
  int64_t padRight = p.padRight < 0 ? p.padLeft : p.padRight;
  return tapsInRange(hStart, p.kh, p.dilationH, -p.padTop, p.h + padBottom) *
         tapsInRange(wStart, p.kw, p.dilationW, -p.padLeft, p.w + padRight);
}

/// Row-major index (iy * w + ix) of the maximum of window (oy, ox) of one
/// plane, or -1 when no tap lies inside the input. Padded cells never win;
/// ties keep the first tap in row-major window order, and a NaN wins over
/// numbers (the first NaN), as in PyTorch.
MTC_HOST_DEVICE inline int64_t maxPoolArgmax(const Pool2dParams &p,
                                             const float *plane, int64_t oy,
                                             int64_t ox) {
  int64_t hStart = oy * p.strideH - p.padTop;
  int64_t wStart = ox * p.strideW - p.padLeft;
  int64_t best = -1;
  float bestValue = 0.0f;
  for (int64_t i = 0; i < p.kh; ++i) {
    int64_t iy = hStart + i * p.dilationH;
    if (iy < 0 || iy >= p.h)
      continue;
    for (int64_t j = 0; j < p.kw; ++j) {
      int64_t ix = wStart + j * p.dilationW;
      if (ix < 0 || ix >= p.w)
        continue;
      float v = plane[iy * p.w + ix];
      bool bestIsNaN = bestValue != bestValue;
      bool isNaN = v != v;
      if (best < 0 || (!bestIsNaN && (v > bestValue || isNaN))) {
        best = iy * p.w + ix;
        bestValue = v;
      }
    }
  }
  return best;
}

/// reduceSum after dropping unit dims and merging neighbouring dims of the
/// same kind (both reduced or both kept), which turns most reductions into
/// "sum the rows" or "sum the columns" of a matrix.
struct ReducePlan {
  int numKept = 0;
  int64_t keptDims[kMaxRank];
  int64_t keptStrides[kMaxRank]; ///< input strides in elements
  int numReduced = 0;
  int64_t reducedDims[kMaxRank];
  int64_t reducedStrides[kMaxRank];
  int64_t outCount = 1;
  int64_t reduceCount = 1;
  /// Whether the innermost merged input dim is reduced, i.e. the elements
  /// summed into one output are (partly) contiguous.
  bool innermostReduced = false;
};

/// Builds the plan; false when the shapes do not describe a reduction
/// (a dim that is neither kept nor reduced to 1, or a bad rank).
inline bool planReduceSum(int rank, const int64_t *inShape,
                          const int64_t *outShape, ReducePlan &plan) {
  if (rank < 0 || rank > kMaxRank)
    return false;
  int64_t dims[kMaxRank];
  bool reduced[kMaxRank];
  int merged = 0;
  for (int i = 0; i < rank; ++i) {
    if (inShape[i] < 0 || (outShape[i] != inShape[i] && outShape[i] != 1))
      return false;
    if (inShape[i] == 1)
      continue;
    bool isReduced = outShape[i] != inShape[i];
    if (merged > 0 && reduced[merged - 1] == isReduced) {
      dims[merged - 1] *= inShape[i];
      continue;
    }
    dims[merged] = inShape[i];
    reduced[merged] = isReduced;
    ++merged;
  }
  plan = ReducePlan();
  int64_t stride = 1;
  for (int i = merged - 1; i >= 0; --i) {
    if (reduced[i]) {
      plan.reducedDims[plan.numReduced] = dims[i];
      plan.reducedStrides[plan.numReduced++] = stride;
      plan.reduceCount *= dims[i];
    } else {
      plan.keptDims[plan.numKept] = dims[i];
      plan.keptStrides[plan.numKept++] = stride;
      plan.outCount *= dims[i];
    }
    stride *= dims[i];
  }
  // The loops above ran innermost first; callers want outermost first.
  for (int i = 0; i < plan.numKept / 2; ++i) {
    int o = plan.numKept - 1 - i;
    int64_t d = plan.keptDims[i], s = plan.keptStrides[i];
    plan.keptDims[i] = plan.keptDims[o];
    plan.keptStrides[i] = plan.keptStrides[o];
    plan.keptDims[o] = d;
    plan.keptStrides[o] = s;
  }
  for (int i = 0; i < plan.numReduced / 2; ++i) {
    int o = plan.numReduced - 1 - i;
    int64_t d = plan.reducedDims[i], s = plan.reducedStrides[i];
    plan.reducedDims[i] = plan.reducedDims[o];
    plan.reducedStrides[i] = plan.reducedStrides[o];
    plan.reducedDims[o] = d;
    plan.reducedStrides[o] = s;
  }
  plan.innermostReduced = merged > 0 && reduced[merged - 1];
  return true;
}

/// Input offset of the first element summed into output `o` (row-major over
/// the kept dims).
MTC_HOST_DEVICE inline int64_t keptOffset(const ReducePlan &plan, int64_t o) {
  int64_t offset = 0;
  for (int i = plan.numKept - 1; i >= 0; --i) {
    offset += (o % plan.keptDims[i]) * plan.keptStrides[i];
    o /= plan.keptDims[i];
  }
  return offset;
}

/// Input offset (relative to keptOffset) of the r-th summed element in
/// row-major order over the reduced dims.
MTC_HOST_DEVICE inline int64_t reducedOffset(const ReducePlan &plan,
                                             int64_t r) {
  int64_t offset = 0;
  for (int i = plan.numReduced - 1; i >= 0; --i) {
    offset += (r % plan.reducedDims[i]) * plan.reducedStrides[i];
    r /= plan.reducedDims[i];
  }
  return offset;
}

//===----------------------------------------------------------------------===//
// Optimizer element updates
//===----------------------------------------------------------------------===//
//
// The per-element arithmetic follows PyTorch's single-tensor SGD and AdamW
// operation by operation (same rounding order), with the scalar factors
// computed once on the host in double as Python does.

struct SgdScalars {
  float lr, momentum, weightDecay;
  bool nesterov;
  /// Step 1: the momentum buffer starts as the first update (PyTorch clones
  /// d_p instead of scaling an empty buffer).
  bool firstStep;
};

/// One parameter element; `buf` is null without momentum.
MTC_HOST_DEVICE inline void sgdElement(float &p, float g, float *buf,
                                       const SgdScalars &s) {
  float d = g;
  if (s.weightDecay != 0.0f)
    d = d + s.weightDecay * p;
  if (buf) {
    float b = s.firstStep ? d : *buf * s.momentum + d;
    *buf = b;
    d = s.nesterov ? d + s.momentum * b : b;
  }
  p = p + (-s.lr) * d;
}

struct AdamwScalars {
  float decay;      ///< 1 - lr * weightDecay
  float lerpWeight; ///< 1 - beta1
  float beta2;
  float oneMinusBeta2;
  float bc2Sqrt;     ///< sqrt(1 - beta2^t)
  float negStepSize; ///< -lr / (1 - beta1^t)
  float eps;
};

inline AdamwScalars adamwScalars(int64_t step, double lr, double beta1,
                                 double beta2, double eps,
                                 double weightDecay) {
  // Step 0 would divide by zero in the bias corrections; treat it as step 1.
  double t = step < 1 ? 1.0 : static_cast<double>(step);
  double bc1 = 1.0 - std::pow(beta1, t);
  double bc2 = 1.0 - std::pow(beta2, t);
  AdamwScalars s;
  s.decay = static_cast<float>(1.0 - lr * weightDecay);
  s.lerpWeight = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.oneMinusBeta2 = static_cast<float>(1.0 - beta2);
  s.bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  s.negStepSize = static_cast<float>(-(lr / bc1));
  s.eps = static_cast<float>(eps);
  return s;
}

MTC_HOST_DEVICE inline void adamwElement(float &p, float g, float &m, float &v,
                                         const AdamwScalars &s) {
  p = p * s.decay;
  // torch.lerp's formula, which rounds differently from b1*m + (1-b1)*g.
  m = s.lerpWeight < 0.5f ? m + s.lerpWeight * (g - m)
                          : g - (g - m) * (1.0f - s.lerpWeight);
  v = v * s.beta2 + s.oneMinusBeta2 * g * g;
  float denom = sqrtf(v) / s.bc2Sqrt + s.eps;
  p = p + s.negStepSize * m / denom;
}

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_KERNELCOMMON_H
