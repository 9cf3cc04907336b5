//===- Dropout.cu - Inverted dropout --------------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Mirrors cpu/Dropout.cpp with the same generator (KernelCommon.h): one
// thread per group of four elements, i.e. per Philox call, so CPU and CUDA
// keep exactly the same elements.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

namespace mtc::rt {

namespace {

__global__ void dropoutKernel(int64_t n, const float *in, float *out,
                              DropoutParams p,
                              const StepCounters *counters) {
  p.step = static_cast<uint64_t>(counters->batch);
  const int64_t groups = (n + kDropoutGroup - 1) / kDropoutGroup;
  for (int64_t g = cuda::threadIndex(); g < groups; g += cuda::threadCount()) {
    bool keep[kDropoutGroup];
    dropoutGroupKeep(p, static_cast<uint64_t>(g), keep);
    const int64_t first = g * kDropoutGroup;
#pragma unroll
    for (int j = 0; j < kDropoutGroup; ++j)
      if (first + j < n)
        out[first + j] = dropoutElement(in[first + j], keep[j], p);
  }
}

void applyDropout(Context &ctx, int64_t n, const float *in, float *out,
                  float ratio, uint64_t stream) {
  if (n <= 0)
    return;
  DropoutMode mode = dropoutMode(ratio);
  if (mode == DropoutMode::Invalid)
    reportError(ctx, badDropoutRatioMessage(ratio));
  if (mode == DropoutMode::Copy) {
    if (out != in)
      copyBytes(ctx, out, in, sizeof(float) * static_cast<uint64_t>(n));
    return;
  }
  if (mode != DropoutMode::Mask) {
    fill(ctx, out, n, 0.0f);
    return;
  }
  // The step is read on the device (a replayed CUDA graph's kernels keep
  // their arguments).
  const DropoutParams p = dropoutParams(ctx.seed, 0, stream, ratio);
  const int64_t groups = (n + kDropoutGroup - 1) / kDropoutGroup;
  dropoutKernel<<<cuda::gridFor(groups), cuda::kBlock, 0, ctx.stream>>>(
      n, in, out, p, cuda::stepCounters(ctx));
  checkLaunch(ctx, "dropoutKernel");
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
