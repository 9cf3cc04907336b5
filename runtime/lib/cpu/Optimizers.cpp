//===- Optimizers.cpp - SGD and AdamW updates -----------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Trainer.h"

namespace mtc::rt {

void sgdUpdate(Context &ctx, int64_t n, float *p, const float *g,
               float *momentumBuf, double lr, double momentum,
               double weightDecay, bool nesterov) {
  SgdScalars s{static_cast<float>(lr), static_cast<float>(momentum),
               static_cast<float>(weightDecay), nesterov,
               stepCounter(ctx) <= 1};
  float *buf = momentum != 0.0 ? momentumBuf : nullptr;
  const bool parallel = n >= cpu::kParallelGrain;
  cpu::parallelFor(0, n, parallel, [&](int64_t i) {
    sgdElement(p[i], g[i], buf ? buf + i : nullptr, s);
  });
}

void adamwUpdate(Context &ctx, int64_t n, float *p, const float *g, float *m,
                 float *v, double lr, double beta1, double beta2, double eps,
                 double weightDecay) {
  AdamwScalars s =
      adamwScalars(stepCounter(ctx), lr, beta1, beta2, eps, weightDecay);
  const bool parallel = n >= cpu::kParallelGrain;
  cpu::parallelFor(0, n, parallel, [&](int64_t i) {
    adamwElement(p[i], g[i], m[i], v[i], s);
  });
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
