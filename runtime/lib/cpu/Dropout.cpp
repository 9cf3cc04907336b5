//===- Dropout.cpp - Inverted dropout -------------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The mask comes from the counter-based generator in KernelCommon.h, so the
// forward and the backward regenerate the same one and the CUDA library
// draws the same bits. Elements are independent, so any split over threads
// gives the same result.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Kernels.h"

#include <cstring>

namespace mtc::rt {

namespace {

/// out = in * mask for the dropout op `stream` at the context's step; the
/// forward and the backward differ only in what they pass.
void applyDropout(Context &ctx, int64_t n, const float *in, float *out,
                  float ratio, uint64_t stream) {
  if (n <= 0)
    return;
  DropoutMode mode = dropoutMode(ratio);
  if (mode == DropoutMode::Invalid)
    reportError(ctx, badDropoutRatioMessage(ratio));
  if (mode == DropoutMode::Copy) {
    if (out != in)
      std::memmove(out, in, sizeof(float) * n);
    return;
  }
  if (mode != DropoutMode::Mask) {
    fill(ctx, out, n, 0.0f);
    return;
  }
  const DropoutParams p = dropoutParams(ctx.seed, ctx.batch, stream, ratio);
  const int64_t groups = (n + kDropoutGroup - 1) / kDropoutGroup;
  // Generating the mask costs far more than the copy; split earlier.
  const bool parallel = n >= cpu::kParallelGrain / 8;
  cpu::parallelFor(0, groups, parallel, [&](int64_t g) {
    bool keep[kDropoutGroup];
    dropoutGroupKeep(p, static_cast<uint64_t>(g), keep);
    int64_t first = g * kDropoutGroup;
    for (int j = 0; j < kDropoutGroup && first + j < n; ++j)
      out[first + j] = dropoutElement(in[first + j], keep[j], p);
  });
}

} // namespace

void dropoutForward(Context &ctx, int64_t n, const float *x, float *y,
                    float ratio, uint64_t stream) {
  applyDropout(ctx, n, x, y, ratio, stream);
}

void dropoutBackward(Context &ctx, int64_t n, const float *dy, float *dx,
                     float ratio, uint64_t stream) {
  applyDropout(ctx, n, dy, dx, ratio, stream);
}

} // namespace mtc::rt
