//===- Pool.cpp - 2-D max and average pooling -----------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The window semantics (padding, ceil mode, divisors, tie breaking) live in
// KernelCommon.h and are shared with the CUDA kernels. Backward passes
// scatter within one (image, channel) plane per thread, so every dx element
// is accumulated by one thread in output order.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Kernels.h"

#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace mtc::rt {

namespace {

bool validParams(Context &ctx, const Pool2dParams &p, const char *what) {
  if (p.strideH <= 0 || p.strideW <= 0 || p.dilationH <= 0 ||
      p.dilationW <= 0 || p.kh <= 0 || p.kw <= 0) {
    reportError(ctx, std::string(what) +
                         ": invalid pooling parameters (kernel, stride or "
                         "dilation)");
    return false;
  }
  return true;
}

/// maxPool2dForward16 with x stored as X and y as Y.
template <typename X, typename Y>
void maxPoolForwardAs(Context &, const Pool2dParams &p, const X *x, Y *y,
                      bool bf16) {
  int64_t rows = p.n * p.c * p.oh;
  const bool parallel = rows * p.ow * p.kh * p.kw >= cpu::kParallelGrain;
  cpu::parallelFor(0, rows, parallel, [&](int64_t row) {
    int64_t plane = row / p.oh;
    int64_t oy = row % p.oh;
    const X *src = x + plane * p.h * p.w;
    Y *dst = y + row * p.ow;
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      int64_t at = maxPoolArgmax(p, src, oy, ox, bf16);
      // A window entirely in padding has no input to take the max of.
      storeFloat(dst + ox,
                 at < 0 ? -std::numeric_limits<float>::infinity()
                        : storedToFloat(src[at], bf16),
                 bf16);
    }
  });
}

/// maxPool2dBackward16 with x stored as X, dy as G and dx as DX: each
/// plane's gradients are summed in float32 (in dx itself, or in a scratch
/// plane for a 16-bit dx) and then rounded.
template <typename X, typename G, typename DX>
void maxPoolBackwardAs(Context &, const Pool2dParams &p, const X *x,
                       const G *dy, DX *dx, bool bf16) {
  int64_t planes = p.n * p.c;
  const bool parallel =
      planes * p.oh * p.ow * p.kh * p.kw >= cpu::kParallelGrain;
  cpu::parallelFor(0, planes, parallel, [&](int64_t plane) {
    const X *src = x + plane * p.h * p.w;
    const G *grad = dy + plane * p.oh * p.ow;
    std::vector<float> scratch;
    float *sums;
    if constexpr (std::is_same_v<DX, float>) {
      sums = dx + plane * p.h * p.w;
      std::memset(sums, 0, sizeof(float) * p.h * p.w);
    } else {
      scratch.assign(p.h * p.w, 0.0f);
      sums = scratch.data();
    }
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        int64_t at = maxPoolArgmax(p, src, oy, ox, bf16);
        if (at >= 0)
          sums[at] += storedToFloat(grad[oy * p.ow + ox], bf16);
      }
    }
    if constexpr (!std::is_same_v<DX, float>) {
      DX *dst = dx + plane * p.h * p.w;
      for (int64_t i = 0; i < p.h * p.w; ++i)
        storeFloat(dst + i, sums[i], bf16);
    }
  });
}

} // namespace

#include "MaxPoolEntryPoints.inc"

void avgPool2dForward(Context &ctx, const Pool2dParams &p, const float *x,
                      float *y) {
  if (!validParams(ctx, p, "avgPool2dForward"))
    return;
  int64_t rows = p.n * p.c * p.oh;
  const bool parallel = rows * p.ow * p.kh * p.kw >= cpu::kParallelGrain;
  cpu::parallelFor(0, rows, parallel, [&](int64_t row) {
    int64_t plane = row / p.oh;
    int64_t oy = row % p.oh;
    const float *src = x + plane * p.h * p.w;
    float *dst = y + row * p.ow;
    int64_t hStart = oy * p.strideH - p.padTop;
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      int64_t wStart = ox * p.strideW - p.padLeft;
      float sum = 0.0f;
      for (int64_t i = 0; i < p.kh; ++i) {
        int64_t iy = hStart + i * p.dilationH;
        if (iy < 0 || iy >= p.h)
          continue;
        for (int64_t j = 0; j < p.kw; ++j) {
          int64_t ix = wStart + j * p.dilationW;
          if (ix >= 0 && ix < p.w)
            sum += src[iy * p.w + ix];
        }
      }
      int64_t divisor = avgPoolDivisor(p, oy, ox);
      dst[ox] = divisor > 0 ? sum / static_cast<float>(divisor) : 0.0f;
    }
  });
}

void avgPool2dBackward(Context &ctx, const Pool2dParams &p, const float *dy,
                       float *dx) {
  if (!validParams(ctx, p, "avgPool2dBackward"))
    return;
  int64_t planes = p.n * p.c;
  const bool parallel =
      planes * p.oh * p.ow * p.kh * p.kw >= cpu::kParallelGrain;
  cpu::parallelFor(0, planes, parallel, [&](int64_t plane) {
    const float *grad = dy + plane * p.oh * p.ow;
    float *dst = dx + plane * p.h * p.w;
    std::memset(dst, 0, sizeof(float) * p.h * p.w);
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      int64_t hStart = oy * p.strideH - p.padTop;
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        int64_t divisor = avgPoolDivisor(p, oy, ox);
        if (divisor <= 0)
          continue;
        float share = grad[oy * p.ow + ox] / static_cast<float>(divisor);
        int64_t wStart = ox * p.strideW - p.padLeft;
        for (int64_t i = 0; i < p.kh; ++i) {
          int64_t iy = hStart + i * p.dilationH;
          if (iy < 0 || iy >= p.h)
            continue;
          for (int64_t j = 0; j < p.kw; ++j) {
            int64_t ix = wStart + j * p.dilationW;
            if (ix >= 0 && ix < p.w)
              dst[iy * p.w + ix] += share;
          }
        }
      }
    }
  });
}

} // namespace mtc::rt
