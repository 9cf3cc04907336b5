//===- Accuracy.cpp - Counting correct predictions ------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"

#include "mtc/runtime/Kernels.h"

namespace mtc::rt {

void countCorrect(Context &, int64_t n, int64_t c, int64_t d, int64_t stride,
                  const float *logits, const int64_t *labels,
                  int64_t ignoreIndex, float *count) {
  int64_t correct = 0, counted = 0;
  for (int64_t pos = 0; pos < n * d; ++pos) {
    int64_t label = labels[pos];
    if (label == ignoreIndex)
      continue;
    ++counted;
    const float *row = logits + (pos / d) * stride + pos % d;
    correct += firstArgmax(row, c, d) == label ? 1 : 0;
  }
  count[0] = static_cast<float>(correct);
  count[1] = static_cast<float>(counted);
}

} // namespace mtc::rt
