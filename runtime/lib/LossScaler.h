//===- LossScaler.h - The dynamic loss scale of a trainer -------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Host-side state of dynamic loss scaling (fp16 training). The step seeds
// its backward pass with `scale()`; after the step the trainer reports
// whether mtc.grad_check found an inf or NaN gradient. The rule is PyTorch's
// GradScaler.update(): an overflow multiplies the scale by the backoff
// factor and restarts the count of clean steps; the `interval`-th clean step
// in a row multiplies it by the growth factor (unless that overflows
// float32) and restarts the count.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_LOSSSCALER_H
#define MTC_RUNTIME_LIB_LOSSSCALER_H

#include "mtc/runtime/Trainer.h"

#include <cmath>
#include <cstdint>

namespace mtc::rt {

class LossScaler {
public:
  explicit LossScaler(const LossScaling &policy)
      : policy(policy), current(static_cast<float>(policy.init)) {}

  /// The scale the next step runs with (float32, as the seed is).
  float scale() const { return current; }
  /// Clean steps since the last change of the scale.
  int64_t cleanSteps() const { return clean; }

  /// Restores a checkpointed state.
  void restore(float scale, int64_t cleanSteps) {
    current = scale;
    clean = cleanSteps;
  }

  /// Records the outcome of a step that ran with scale().
  void update(bool overflow) {
    if (overflow) {
      current = static_cast<float>(current * policy.backoff);
      clean = 0;
      return;
    }
    if (++clean < policy.interval)
      return;
    float grown = static_cast<float>(current * policy.growth);
    if (std::isfinite(grown))
      current = grown;
    clean = 0;
  }

private:
  LossScaling policy;
  float current;
  int64_t clean = 0;
};

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_LOSSSCALER_H
