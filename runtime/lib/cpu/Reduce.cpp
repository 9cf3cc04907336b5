//===- Reduce.cpp - reduceSum and softmax ---------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Sums accumulate in double: a float running sum over the many elements a
// gradient reduction covers (batch x pixels) drifts far more than the 1e-4
// that gradients must match PyTorch to. Each output is summed in one fixed
// order by one thread, so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "SoftmaxRow.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/VecMath.h"

#include <algorithm>
#include <cmath>

namespace mtc::rt {

void reduceSum(Context &ctx, int rank, const int64_t *inShape,
               const int64_t *outShape, const float *x, float *y, float scale) {
  ReducePlan plan;
  if (!planReduceSum(rank, inShape, outShape, plan)) {
    reportError(ctx, "reduceSum: output shape is not a reduction of the "
                     "input shape");
    return;
  }
  const double s = scale;
  if (plan.reduceCount == 0) {
    // Summing over an empty axis gives zeros.
    for (int64_t o = 0; o < plan.outCount; ++o)
      y[o] = 0.0f;
    return;
  }
  if (plan.numReduced == 0) {
    const bool parallel = plan.outCount >= cpu::kParallelGrain;
    cpu::parallelFor(0, plan.outCount, parallel, [&](int64_t o) {
      y[o] = static_cast<float>(static_cast<double>(x[o]) * s);
    });
    return;
  }

  if (plan.innermostReduced) {
    // Each output sums runs of `inner` contiguous elements.
    int64_t inner = plan.reducedDims[plan.numReduced - 1];
    int64_t runs = plan.reduceCount / inner;
    const bool parallel =
        plan.outCount * plan.reduceCount >= cpu::kParallelGrain;
    cpu::parallelFor(0, plan.outCount, parallel, [&](int64_t o) {
      const float *base = x + keptOffset(plan, o);
      double sum = 0.0;
      for (int64_t run = 0; run < runs; ++run) {
        const float *src = base + reducedOffset(plan, run * inner);
        for (int64_t t = 0; t < inner; ++t)
          sum += src[t];
      }
      y[o] = static_cast<float>(sum * s);
    });
    return;
  }

  // The innermost dim is kept: sum whole rows into a block of accumulators
  // so that memory is read contiguously.
  constexpr int64_t block = 256;
  int64_t inner = plan.keptDims[plan.numKept - 1];
  int64_t outer = plan.outCount / inner;
  int64_t blocksPerRow = (inner + block - 1) / block;
  const bool parallel = plan.outCount * plan.reduceCount >= cpu::kParallelGrain;
  cpu::parallelFor(0, outer * blocksPerRow, parallel, [&](int64_t task) {
    int64_t first =
        (task / blocksPerRow) * inner + (task % blocksPerRow) * block;
    int64_t width = std::min(block, inner - (task % blocksPerRow) * block);
    const float *base = x + keptOffset(plan, first);
    double acc[block];
    for (int64_t j = 0; j < width; ++j)
      acc[j] = 0.0;
    for (int64_t r = 0; r < plan.reduceCount; ++r) {
      const float *src = base + reducedOffset(plan, r);
      for (int64_t j = 0; j < width; ++j)
        acc[j] += src[j];
    }
    for (int64_t j = 0; j < width; ++j)
      y[first + j] = static_cast<float>(acc[j] * s);
  });
}

void softmaxForward(Context &, int64_t outer, int64_t dim, int64_t inner,
                    const float *x, float *y, bool log) {
  int64_t rows = outer * inner;
  const bool parallel = rows * dim >= cpu::kParallelGrain;
  cpu::parallelFor(0, rows, parallel, [&](int64_t row) {
    int64_t base = (row / inner) * dim * inner + row % inner;
    const float *src = x + base;
    float *dst = y + base;
    // Subtracting the max keeps exp() finite for any input.
    float maxValue;
    double sum = cpu::softmaxRowSum(dim, src, inner, maxValue);
    if (log) {
      float logSum = static_cast<float>(std::log(sum));
      for (int64_t i = 0; i < dim; ++i)
        dst[i * inner] = src[i * inner] - maxValue - logSum;
    } else {
      float total = static_cast<float>(sum);
      for (int64_t i = 0; i < dim; ++i)
        dst[i * inner] = cpu::vecExp(src[i * inner] - maxValue) / total;
    }
  });
}

void softmaxBackward(Context &, int64_t outer, int64_t dim, int64_t inner,
                     const float *y, const float *dy, float *dx, bool log) {
  int64_t rows = outer * inner;
  const bool parallel = rows * dim >= cpu::kParallelGrain;
  cpu::parallelFor(0, rows, parallel, [&](int64_t row) {
    int64_t base = (row / inner) * dim * inner + row % inner;
    const float *out = y + base;
    const float *grad = dy + base;
    float *dst = dx + base;
    double sum = 0.0;
    if (log) {
      // d/dx log_softmax: dx = dy - softmax * sum(dy).
      for (int64_t i = 0; i < dim; ++i)
        sum += grad[i * inner];
      float total = static_cast<float>(sum);
      for (int64_t i = 0; i < dim; ++i)
        dst[i * inner] = grad[i * inner] - cpu::vecExp(out[i * inner]) * total;
    } else {
      // d/dx softmax: dx = y * (dy - sum(dy * y)).
      for (int64_t i = 0; i < dim; ++i)
        sum += static_cast<double>(grad[i * inner]) * out[i * inner];
      float total = static_cast<float>(sum);
      for (int64_t i = 0; i < dim; ++i)
        dst[i * inner] = out[i * inner] * (grad[i * inner] - total);
    }
  });
}

} // namespace mtc::rt
