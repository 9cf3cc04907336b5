//===- Loss.cpp - Softmax cross-entropy -----------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// ONNX SoftmaxCrossEntropyLoss (no class weights). With Mean reduction and
// every label ignored the loss is 0/0 = NaN, which is what both PyTorch's
// cross_entropy and the ONNX reference produce; the gradient is then zero.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Kernels.h"

#include <cmath>
#include <limits>
#include <string>

namespace mtc::rt {

namespace {

bool isValidLabel(int64_t label, int64_t c, int64_t ignoreIndex) {
  return label != ignoreIndex && label >= 0 && label < c;
}

} // namespace

void softmaxCrossEntropyForward(Context &ctx, int64_t n, int64_t c, int64_t d,
                                const float *logits, const int64_t *labels,
                                Reduction reduction, int64_t ignoreIndex,
                                float *loss, float *logProb) {
  softmaxForward(ctx, n, c, d, logits, logProb, /*log=*/true);

  // Serial on purpose: it is cheap (one label per position), and the first
  // bad label reported is then always the same one.
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t pos = 0; pos < n * d; ++pos) {
    int64_t label = labels[pos];
    bool valid = isValidLabel(label, c, ignoreIndex);
    if (!valid && label != ignoreIndex && !hasError(ctx))
      reportError(
          ctx,
          "label " + std::to_string(label) + " at batch position " +
              std::to_string(pos / d) +
              (d > 1 ? ", element " + std::to_string(pos % d) : std::string()) +
              " is outside the " + std::to_string(c) + " classes [0, " +
              std::to_string(c) + ")",
          pos / d);
    float value =
        valid ? -logProb[((pos / d) * c + label) * d + pos % d] : 0.0f;
    if (reduction == Reduction::None) {
      loss[pos] = value;
      continue;
    }
    sum += value;
    count += valid ? 1 : 0;
  }
  if (reduction == Reduction::Sum)
    loss[0] = static_cast<float>(sum);
  else if (reduction == Reduction::Mean)
    loss[0] = count > 0 ? static_cast<float>(sum / static_cast<double>(count))
                        : std::numeric_limits<float>::quiet_NaN();
}

void softmaxCrossEntropyBackward(Context &, int64_t n, int64_t c, int64_t d,
                                 const float *dloss, const float *logProb,
                                 const int64_t *labels, Reduction reduction,
                                 int64_t ignoreIndex, float *dlogits) {
  float scale = 0.0f;
  if (reduction == Reduction::Sum) {
    scale = dloss[0];
  } else if (reduction == Reduction::Mean) {
    int64_t count = 0;
    for (int64_t pos = 0; pos < n * d; ++pos)
      count += isValidLabel(labels[pos], c, ignoreIndex) ? 1 : 0;
    scale = count > 0 ? dloss[0] / static_cast<float>(count) : 0.0f;
  }
  const bool parallel = n * c * d >= cpu::kParallelGrain;
  cpu::parallelFor(0, n, parallel, [&](int64_t img) {
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t di = 0; di < d; ++di) {
        int64_t pos = img * d + di;
        int64_t at = (img * c + ci) * d + di;
        int64_t label = labels[pos];
        if (!isValidLabel(label, c, ignoreIndex)) {
          dlogits[at] = 0.0f;
          continue;
        }
        float g = reduction == Reduction::None ? dloss[pos] : scale;
        float target = ci == label ? 1.0f : 0.0f;
        dlogits[at] = g * (std::exp(logProb[at]) - target);
      }
    }
  });
}

} // namespace mtc::rt
