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
#include "SoftmaxRow.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/VecMath.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

namespace mtc::rt {

namespace {

bool isValidLabel(int64_t label, int64_t c, int64_t ignoreIndex) {
  return label != ignoreIndex && label >= 0 && label < c;
}

/// The loss from each position's log-probability of its label
/// (`logProbOf(pos, label)`), reporting the first bad label. Serial on
/// purpose: it is cheap (one label per position), and the first bad label
/// reported is then always the same one.
template <typename LogProbOf>
void reduceLoss(Context &ctx, int64_t n, int64_t c, int64_t d,
                const int64_t *labels, Reduction reduction,
                int64_t ignoreIndex, float *loss, LogProbOf logProbOf) {
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
    float value = valid ? -logProbOf(pos, label) : 0.0f;
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

/// The factor softmaxCrossEntropyBackward scales (softmax - onehot) by.
float gradientScale(int64_t positions, int64_t c, const float *dloss,
                    const int64_t *labels, Reduction reduction,
                    int64_t ignoreIndex) {
  if (reduction == Reduction::Sum)
    return dloss[0];
  int64_t count = 0;
  for (int64_t pos = 0; pos < positions; ++pos)
    count += isValidLabel(labels[pos], c, ignoreIndex) ? 1 : 0;
  return count > 0 ? dloss[0] / static_cast<float>(count) : 0.0f;
}

} // namespace

void softmaxCrossEntropyForward(Context &ctx, int64_t n, int64_t c, int64_t d,
                                const float *logits, const int64_t *labels,
                                Reduction reduction, int64_t ignoreIndex,
                                float *loss, float *logProb) {
  softmaxForward(ctx, n, c, d, logits, logProb, /*log=*/true);
  reduceLoss(ctx, n, c, d, labels, reduction, ignoreIndex, loss,
             [&](int64_t pos, int64_t label) {
               return logProb[((pos / d) * c + label) * d + pos % d];
             });
}

void softmaxCrossEntropyBackward(Context &, int64_t n, int64_t c, int64_t d,
                                 const float *dloss, const float *logProb,
                                 const int64_t *labels, Reduction reduction,
                                 int64_t ignoreIndex, float *dlogits) {
  float scale = reduction == Reduction::None
                    ? 0.0f
                    : gradientScale(n * d, c, dloss, labels, reduction,
                                    ignoreIndex);
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
        dlogits[at] = g * (cpu::vecExp(logProb[at]) - target);
      }
    }
  });
}


namespace {

/// softmaxCrossEntropyWithGrad on logits stored as T (float, or 16 bits in
/// `storage`). 16-bit logits take a 16-bit dlogits of their format, which
/// may be them: each row's gradient is written after the whole row is read.
/// Rows are `ld` elements apart. Without dlogits, the loss alone.
template <typename T>
void lossWithGrad(Context &ctx, int64_t n, int64_t c, int64_t ld,
                  const T *logits, const int64_t *labels, const float *dloss,
                  Reduction reduction, int64_t ignoreIndex, float *loss,
                  void *dlogits, bool narrow, Storage16 storage,
                  void *workspace) {
  const bool bf16 = storage == Storage16::Bf16;
  // Each row's maximum and log of its sum of exponentials, as
  // softmaxForward computes them; log_softmax is then (x - max) - logSum.
  float *shift = static_cast<float *>(workspace);
  const bool parallel = n * c >= cpu::kParallelGrain;
  cpu::parallelFor(0, n, parallel, [&](int64_t row) {
    cpu::softmaxRowShift(c, logits + row * ld, bf16, shift[2 * row],
                         shift[2 * row + 1]);
  });
  auto logProb = [&](int64_t row, int64_t i) {
    return storedToFloat(logits[row * ld + i], bf16) - shift[2 * row] -
           shift[2 * row + 1];
  };
  reduceLoss(ctx, n, c, 1, labels, reduction, ignoreIndex, loss, logProb);
  if (!dlogits)
    return;
  const float scale =
      gradientScale(n, c, dloss, labels, reduction, ignoreIndex);
  auto gradient = [&](int64_t row, int64_t i) {
    int64_t label = labels[row];
    if (!isValidLabel(label, c, ignoreIndex))
      return 0.0f;
    return scale * (cpu::vecExp(logProb(row, i)) - (i == label ? 1.0f : 0.0f));
  };
  auto rows = [&](int64_t first, int64_t last, bool to16) {
    cpu::parallelFor(first, last, parallel && last - first > 1,
                     [&](int64_t row) {
                       if (!to16) {
                         float *dst = static_cast<float *>(dlogits) + row * ld;
                         for (int64_t i = 0; i < c; ++i)
                           dst[i] = gradient(row, i);
                         return;
                       }
                       uint16_t *dst =
                           static_cast<uint16_t *>(dlogits) + row * ld;
                       for (int64_t i = 0; i < c; ++i)
                         dst[i] = bf16 ? floatToBf16(gradient(row, i))
                                       : floatToHalf(gradient(row, i));
                     });
  };
  if (!std::is_same_v<T, float> || !narrow ||
      dlogits != static_cast<const void *>(logits) || n == 0) {
    rows(0, n, narrow);
    return;
  }
  // In place from float32 to 16 bits: row r's 16-bit values overwrite the
  // float32 rows r / 2 to (r + 1) / 2 (rows without padding). Row 0 goes
  // through float32 and narrowInPlace; then rows [1, 2), [2, 4), [4, 8)... each
  // write only rows earlier phases have read.
  if (ld != c) {
    reportError(ctx, "softmaxCrossEntropyWithGrad: a 16-bit gradient in "
                     "place of float32 logits needs rows without padding");
    return;
  }
  rows(0, 1, false);
  narrowInPlace(ctx, storage, static_cast<float *>(dlogits), c);
  for (int64_t first = 1; first < n; first *= 2)
    rows(first, std::min(n, 2 * first), true);
}

} // namespace

void softmaxCrossEntropyWithGrad(Context &ctx, int64_t n, int64_t c, int64_t ld,
                                 const float *logits, const int64_t *labels,
                                 const float *dloss, Reduction reduction,
                                 int64_t ignoreIndex, float *loss,
                                 void *dlogits, bool narrow, Storage16 storage,
                                 void *workspace) {
  lossWithGrad(ctx, n, c, ld, logits, labels, dloss, reduction, ignoreIndex,
               loss, dlogits, narrow, storage, workspace);
}

void softmaxCrossEntropyLoss(Context &ctx, int64_t n, int64_t c, int64_t ld,
                             const float *logits, const int64_t *labels,
                             Reduction reduction, int64_t ignoreIndex,
                             float *loss, void *workspace) {
  lossWithGrad(ctx, n, c, ld, logits, labels, nullptr, reduction, ignoreIndex,
               loss, nullptr, false, Storage16::Bf16, workspace);
}

void softmaxCrossEntropyWithGrad16(Context &ctx, Storage16 storage, int64_t n,
                                   int64_t c, int64_t ld,
                                   const uint16_t *logits,
                                   const int64_t *labels, const float *dloss,
                                   Reduction reduction, int64_t ignoreIndex,
                                   float *loss, uint16_t *dlogits,
                                   void *workspace) {
  lossWithGrad(ctx, n, c, ld, logits, labels, dloss, reduction, ignoreIndex,
               loss, dlogits, true, storage, workspace);
}

} // namespace mtc::rt
