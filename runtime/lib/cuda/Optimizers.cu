//===- Optimizers.cu - SGD and AdamW updates ------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The element updates and their host-side scalars come from KernelCommon.h,
// shared with cpu/Optimizers.cpp. The step counter is read on the host and
// folded into kernel arguments, so the kernels never read host state.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Trainer.h"

namespace mtc::rt {

namespace {

__global__ void sgdKernel(int64_t n, float *p, const float *g, float *buf,
                          SgdScalars s) {
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    sgdElement(p[i], g[i], buf ? buf + i : nullptr, s);
}

__global__ void adamwKernel(int64_t n, float *p, const float *g, float *m,
                            float *v, AdamwScalars s) {
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    adamwElement(p[i], g[i], m[i], v[i], s);
}

__global__ void accumulateKernel(int64_t n, float *acc, const float *g,
                                 bool first, float scale) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    acc[i] = (first ? g[i] : acc[i] + g[i]) * scale;
}

} // namespace

void accumulateGradient(Context &ctx, int64_t n, float *acc, const float *g,
                        int64_t count) {
  if (n <= 0)
    return;
  int64_t micro = microBatch(ctx);
  float scale = micro == count - 1 ? 1.0f / static_cast<float>(count) : 1.0f;
  accumulateKernel<<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(
      n, acc, g, micro == 0, scale);
  checkLaunch(ctx, "accumulateKernel");
}

void sgdUpdate(Context &ctx, int64_t n, float *p, const float *g,
               float *momentumBuf, double lr, double momentum,
               double weightDecay, bool nesterov) {
  if (n <= 0)
    return;
  SgdScalars s{static_cast<float>(lr), static_cast<float>(momentum),
               static_cast<float>(weightDecay), nesterov,
               stepCounter(ctx) <= 1};
  float *buf = momentum != 0.0 ? momentumBuf : nullptr;
  sgdKernel<<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(n, p, g, buf, s);
  checkLaunch(ctx, "sgdKernel");
}

void adamwUpdate(Context &ctx, int64_t n, float *p, const float *g, float *m,
                 float *v, double lr, double beta1, double beta2, double eps,
                 double weightDecay) {
  if (n <= 0)
    return;
  AdamwScalars s =
      adamwScalars(stepCounter(ctx), lr, beta1, beta2, eps, weightDecay);
  adamwKernel<<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(n, p, g, m, v,
                                                                 s);
  checkLaunch(ctx, "adamwKernel");
}

} // namespace mtc::rt
