//===- Optimizers.cpp - SGD and AdamW updates -----------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Trainer.h"
#include "mtc/runtime/VecMath.h" // MTC_SIMD_CLONES

#include <algorithm>
#include <atomic>
#include <cmath>

namespace mtc::rt {

namespace {

/// Elements per parallel task of the update loops: a few pages of each
/// array, so that a thread streams through memory in long runs.
constexpr int64_t kUpdateChunk = 1 << 14;

/// body(begin, end) over [0, n) in chunks of kUpdateChunk, across threads
/// when the tensor is large enough.
template <typename Body> void forEachChunk(int64_t n, Body &&body) {
  const int64_t chunks = (n + kUpdateChunk - 1) / kUpdateChunk;
  cpu::parallelFor(0, chunks, n >= cpu::kParallelGrain, [&](int64_t c) {
    body(c * kUpdateChunk, std::min(n, (c + 1) * kUpdateChunk));
  });
}

// The update loops, compiled per instruction set (MTC_SIMD_CLONES) with
// restrict-qualified arrays so that they vectorize: the element formulas
// are KernelCommon.h's, each element computed alone by the same IEEE
// operations (no contraction), so every instruction set gives the same
// bits.

MTC_SIMD_CLONES void sgdRange(int64_t begin, int64_t end, float *__restrict p,
                              const float *__restrict g, float *__restrict buf,
                              float unscale, SgdScalars s) {
  if (!buf) {
    for (int64_t i = begin; i < end; ++i)
      sgdElement(p[i], g[i] * unscale, nullptr, s);
    return;
  }
  for (int64_t i = begin; i < end; ++i)
    sgdElement(p[i], g[i] * unscale, buf + i, s);
}

MTC_SIMD_CLONES void adamwRange(int64_t begin, int64_t end, float *__restrict p,
                                const float *__restrict g, float *__restrict m,
                                float *__restrict v, float unscale,
                                AdamwScalars s) {
  for (int64_t i = begin; i < end; ++i)
    adamwElement(p[i], g[i] * unscale, m[i], v[i], s);
}

/// And the parameter's 16-bit copy, rounded as a conversion rounds it.
MTC_SIMD_CLONES void adamwRange16(int64_t begin, int64_t end,
                                  float *__restrict p,
                                  const float *__restrict g,
                                  float *__restrict m, float *__restrict v,
                                  uint16_t *__restrict copy, bool bf16,
                                  float unscale, AdamwScalars s) {
  if (bf16) {
    for (int64_t i = begin; i < end; ++i) {
      adamwElement(p[i], g[i] * unscale, m[i], v[i], s);
      copy[i] = floatToBf16(p[i]);
    }
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    adamwElement(p[i], g[i] * unscale, m[i], v[i], s);
    copy[i] = floatToHalf(p[i]);
  }
}

} // namespace

void sgdUpdate(Context &ctx, int64_t n, float *p, const float *g,
               float *momentumBuf, double lr, double momentum,
               double weightDecay, bool nesterov, const float *gradStatus) {
  if (skipsStep(gradStatus))
    return;
  const float unscale = gradUnscale(gradStatus);
  SgdScalars s{static_cast<float>(lr), static_cast<float>(momentum),
               static_cast<float>(weightDecay), nesterov,
               ctx.optimizerStep <= 1};
  float *buf = momentum != 0.0 ? momentumBuf : nullptr;
  forEachChunk(n, [&](int64_t begin, int64_t end) {
    sgdRange(begin, end, p, g, buf, unscale, s);
  });
}

namespace {

/// One tensor's AdamW update (and its 16-bit copy, if it has one).
void adamwTensor(Context &ctx, const AdamwTensor &t,
                 const AdamwHyperparameters &h, const float *gradStatus) {
  if (skipsStep(gradStatus))
    return;
  const float unscale = gradUnscale(gradStatus);
  const AdamwScalars s = adamwScalars(ctx.optimizerStep, h);
  if (!t.param16) {
    forEachChunk(t.n, [&](int64_t begin, int64_t end) {
      adamwRange(begin, end, t.param, t.grad, t.expAvg, t.expAvgSq, unscale, s);
    });
    return;
  }
  const bool bf16 = t.storage == Storage16::Bf16;
  forEachChunk(t.n, [&](int64_t begin, int64_t end) {
    adamwRange16(begin, end, t.param, t.grad, t.expAvg, t.expAvgSq, t.param16,
                 bf16, unscale, s);
  });
}

} // namespace

void adamwUpdate(Context &ctx, int64_t n, float *p, const float *g, float *m,
                 float *v, double lr, double beta1, double beta2, double eps,
                 double weightDecay, const float *gradStatus) {
  AdamwTensor t;
  t.n = n;
  t.param = p;
  t.grad = g;
  t.expAvg = m;
  t.expAvgSq = v;
  adamwTensor(ctx, t, AdamwHyperparameters{lr, beta1, beta2, eps, weightDecay},
              gradStatus);
}

void sgdUpdateMulti(Context &ctx, const SgdTensor *tensors, int count,
                    double lr, double momentum, double weightDecay,
                    bool nesterov, const float *gradStatus) {
  for (int t = 0; t < count; ++t)
    sgdUpdate(ctx, tensors[t].n, tensors[t].param, tensors[t].grad,
              tensors[t].momentum, lr, momentum, weightDecay, nesterov,
              gradStatus);
}

void adamwUpdateMulti(Context &ctx, const AdamwTensor *tensors, int count,
                      double lr, double beta1, double beta2, double eps,
                      double weightDecay, const float *gradStatus) {
  // Each tensor's loop is as large as adamwUpdate's; the CPU gains nothing
  // from one loop over all of them.
  for (int t = 0; t < count; ++t)
    adamwTensor(ctx, tensors[t],
                AdamwHyperparameters{lr, beta1, beta2, eps, weightDecay},
                gradStatus);
}

void gradCheckBegin(Context &, const float *lossScale, float *status) {
  status[0] = inverseLossScale(*lossScale);
  status[1] = 0.0f;
}

void gradCheck(Context &, int64_t n, const float *g, float *status) {
  // Chunks report independently; any one that finds a bad value sets the
  // flag, which nothing else writes during the check.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::atomic<bool> bad{false};
  cpu::parallelFor(0, chunks, n >= cpu::kParallelGrain, [&](int64_t c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    bool found = false;
    for (int64_t i = c * kChunk; i < end; ++i)
      found |= !std::isfinite(g[i]);
    if (found)
      bad.store(true, std::memory_order_relaxed);
  });
  if (bad.load(std::memory_order_relaxed))
    status[1] = 1.0f;
}

void accumulateGradient(Context &ctx, int64_t n, float *acc, const float *g,
                        int64_t count) {
  int64_t micro = microBatch(ctx);
  float scale = micro == count - 1 ? 1.0f / static_cast<float>(count) : 1.0f;
  const bool parallel = n >= cpu::kParallelGrain;
  cpu::parallelFor(0, n, parallel, [&](int64_t i) {
    acc[i] = (micro == 0 ? g[i] : acc[i] + g[i]) * scale;
  });
}

} // namespace mtc::rt
