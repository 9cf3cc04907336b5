//===- Optimizers.cu - SGD and AdamW updates ------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The element updates and their scalars come from KernelCommon.h, shared
// with cpu/Optimizers.cpp. The optimizer step (SGD's first step, AdamW's
// bias corrections) is read on the device (cuda::stepCounters), so a
// replayed CUDA graph updates with each step's count.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Trainer.h"

#include <algorithm>

namespace mtc::rt {

namespace {

// The loss-scaling status lives on the device (written by gradCheck on the
// same stream), so the skip decision needs no host synchronization; it is
// the same for every thread of a launch, so a block returns as a whole.
__global__ void sgdKernel(int64_t n, float *p, const float *g, float *buf,
                          SgdScalars s, const float *status,
                          const StepCounters *counters) {
  if (skipsStep(status))
    return;
  s.firstStep = counters->optimizerStep <= 1;
  const float unscale = gradUnscale(status);
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    sgdElement(p[i], g[i] * unscale, buf ? buf + i : nullptr, s);
}

/// The step's AdamW scalars, formed once per block (in double: two pow,
/// a sqrt, divisions) rather than by every thread. Every thread of the
/// block must call it.
__device__ inline AdamwScalars
blockAdamwScalars(const StepCounters *counters, const AdamwHyperparameters &h) {
  __shared__ AdamwScalars shared;
  if (threadIdx.x == 0)
    shared = adamwScalars(counters->optimizerStep, h);
  __syncthreads();
  return shared;
}

__global__ void adamwKernel(int64_t n, float *p, const float *g, float *m,
                            float *v, AdamwHyperparameters h,
                            const float *status,
                            const StepCounters *counters) {
  if (skipsStep(status))
    return;
  const AdamwScalars s = blockAdamwScalars(counters, h);
  const float unscale = gradUnscale(status);
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    adamwElement(p[i], g[i] * unscale, m[i], v[i], s);
}

/// Tensors of one multi-tensor launch, passed by value (kernel parameters
/// hold up to 4 KB): tensor i gets blocks [firstBlock[i], firstBlock[i +
/// 1]) of the 1-D grid, so that no block is idle (a grid sized by the
/// largest tensor for every tensor would leave most blocks of the small
/// ones, biases next to their weight, with nothing to do).
constexpr int kMultiTensors = 32;
/// Blocks one tensor gets at most; their threads stride over it.
constexpr int64_t kMultiBlocksPerTensor = 4096;
template <typename Tensor> struct Tensors {
  Tensor t[kMultiTensors];
  int firstBlock[kMultiTensors + 1];
  int count;
};
using AdamwTensors = Tensors<AdamwTensor>;

/// The tensor this block works on, and its blocks' first and count.
struct MultiBlock {
  int tensor;
  int64_t block, blocks;
};
template <typename Tensor>
__device__ inline MultiBlock multiBlock(const Tensors<Tensor> &tensors) {
  int t = 0;
  while (t + 1 < tensors.count &&
         static_cast<int>(blockIdx.x) >= tensors.firstBlock[t + 1])
    ++t;
  return {t, blockIdx.x - tensors.firstBlock[t],
          tensors.firstBlock[t + 1] - tensors.firstBlock[t]};
}

__global__ void sgdMultiKernel(Tensors<SgdTensor> tensors, SgdScalars s,
                               const float *status,
                               const StepCounters *counters) {
  if (skipsStep(status))
    return;
  s.firstStep = counters->optimizerStep <= 1;
  const float unscale = gradUnscale(status);
  const MultiBlock b = multiBlock(tensors);
  const SgdTensor &t = tensors.t[b.tensor];
  for (int64_t i = b.block * blockDim.x + threadIdx.x; i < t.n;
       i += b.blocks * blockDim.x)
    sgdElement(t.param[i], t.grad[i] * unscale,
               s.momentum != 0.0f && t.momentum ? t.momentum + i : nullptr, s);
}

/// Launches `kernel` over the tensors kMultiTensors at a time, each tensor
/// with blocks of its own (see Tensors), a thread for every kPerThread
/// elements.
template <int kPerThread, typename Tensor, typename Kernel, typename... Args>
void launchMulti(Context &ctx, const Tensor *tensors, int count, Kernel kernel,
                 const char *name, Args... args) {
  for (int first = 0; first < count; first += kMultiTensors) {
    const int n = std::min(kMultiTensors, count - first);
    Tensors<Tensor> chunk = {};
    chunk.count = n;
    int64_t blocks = 0;
    for (int t = 0; t < n; ++t) {
      chunk.t[t] = tensors[first + t];
      chunk.firstBlock[t] = static_cast<int>(blocks);
      const int64_t threads =
          (std::max<int64_t>(chunk.t[t].n, 0) + kPerThread - 1) / kPerThread;
      blocks += std::min(kMultiBlocksPerTensor,
                         (threads + cuda::kBlock - 1) / cuda::kBlock);
    }
    chunk.firstBlock[n] = static_cast<int>(blocks);
    if (blocks == 0)
      continue;
    kernel<<<static_cast<unsigned>(blocks), cuda::kBlock, 0, ctx.stream>>>(
        chunk, args...);
    checkLaunch(ctx, name);
  }
}

/// Whether every array of `t` may be moved four elements at a time: the
/// float arrays on 16 bytes, the 16-bit copy (if any) on 8.
__device__ inline bool inVectors(const AdamwTensor &t) {
  auto on = [](const void *p, unsigned bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  return on(t.param, 16) && on(t.grad, 16) && on(t.expAvg, 16) &&
         on(t.expAvgSq, 16) && (!t.param16 || on(t.param16, 8));
}

/// The 16-bit copy of a parameter value, rounded as a conversion rounds it.
__device__ inline uint16_t copyOf(float p, bool bf16) {
  return bf16 ? floatToBf16(p) : floatToHalf(p);
}

/// Each block updates its part of one tensor (see Tensors): four elements
/// a thread at a time as vectors where the arrays allow (each element by
/// the same arithmetic as alone), then the elements past the last whole
/// vector one by one.
__global__ void adamwMultiKernel(AdamwTensors tensors,
                                 AdamwHyperparameters h, const float *status,
                                 const StepCounters *counters) {
  if (skipsStep(status))
    return;
  const float unscale = gradUnscale(status);
  const AdamwScalars s = blockAdamwScalars(counters, h);
  const MultiBlock b = multiBlock(tensors);
  const AdamwTensor &t = tensors.t[b.tensor];
  const int64_t start = b.block * blockDim.x + threadIdx.x,
                stride = b.blocks * blockDim.x;
  const bool bf16 = t.storage == Storage16::Bf16;
  const int64_t vectors = inVectors(t) ? t.n / 4 : 0;
  for (int64_t i = start; i < vectors; i += stride) {
    float4 p = reinterpret_cast<const float4 *>(t.param)[i];
    const float4 g = reinterpret_cast<const float4 *>(t.grad)[i];
    float4 m = reinterpret_cast<const float4 *>(t.expAvg)[i];
    float4 v = reinterpret_cast<const float4 *>(t.expAvgSq)[i];
    adamwElement(p.x, g.x * unscale, m.x, v.x, s);
    adamwElement(p.y, g.y * unscale, m.y, v.y, s);
    adamwElement(p.z, g.z * unscale, m.z, v.z, s);
    adamwElement(p.w, g.w * unscale, m.w, v.w, s);
    reinterpret_cast<float4 *>(t.param)[i] = p;
    reinterpret_cast<float4 *>(t.expAvg)[i] = m;
    reinterpret_cast<float4 *>(t.expAvgSq)[i] = v;
    if (t.param16)
      reinterpret_cast<ushort4 *>(t.param16)[i] =
          make_ushort4(copyOf(p.x, bf16), copyOf(p.y, bf16), copyOf(p.z, bf16),
                       copyOf(p.w, bf16));
  }
  for (int64_t i = vectors * 4 + start; i < t.n; i += stride) {
    float p = t.param[i];
    adamwElement(p, t.grad[i] * unscale, t.expAvg[i], t.expAvgSq[i], s);
    t.param[i] = p;
    if (t.param16)
      t.param16[i] = copyOf(p, bf16);
  }
}

__global__ void gradCheckBeginKernel(const float *lossScale, float *status) {
  status[0] = inverseLossScale(*lossScale);
  status[1] = 0.0f;
}

__global__ void gradCheckKernel(int64_t n, const float *g, float *status) {
  bool found = false;
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    found |= !isfinite(g[i]);
  // Every writer writes the same value.
  if (__syncthreads_or(found) && threadIdx.x == 0)
    status[1] = 1.0f;
}

__global__ void accumulateKernel(int64_t n, float *acc, const float *g,
                                 bool first, float scale) {
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
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
               double weightDecay, bool nesterov, const float *gradStatus) {
  if (n <= 0)
    return;
  SgdScalars s{static_cast<float>(lr), static_cast<float>(momentum),
               static_cast<float>(weightDecay), nesterov, false};
  float *buf = momentum != 0.0 ? momentumBuf : nullptr;
  sgdKernel<<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(
      n, p, g, buf, s, gradStatus, cuda::stepCounters(ctx));
  checkLaunch(ctx, "sgdKernel");
}

void adamwUpdate(Context &ctx, int64_t n, float *p, const float *g, float *m,
                 float *v, double lr, double beta1, double beta2, double eps,
                 double weightDecay, const float *gradStatus) {
  if (n <= 0)
    return;
  const AdamwHyperparameters h{lr, beta1, beta2, eps, weightDecay};
  adamwKernel<<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(
      n, p, g, m, v, h, gradStatus, cuda::stepCounters(ctx));
  checkLaunch(ctx, "adamwKernel");
}

void sgdUpdateMulti(Context &ctx, const SgdTensor *tensors, int count,
                    double lr, double momentum, double weightDecay,
                    bool nesterov, const float *gradStatus) {
  SgdScalars s{static_cast<float>(lr), static_cast<float>(momentum),
               static_cast<float>(weightDecay), nesterov, false};
  launchMulti<1>(ctx, tensors, count, sgdMultiKernel, "sgdMultiKernel", s,
                 gradStatus, cuda::stepCounters(ctx));
}

void adamwUpdateMulti(Context &ctx, const AdamwTensor *tensors, int count,
                      double lr, double beta1, double beta2, double eps,
                      double weightDecay, const float *gradStatus) {
  const AdamwHyperparameters h{lr, beta1, beta2, eps, weightDecay};
  launchMulti<4>(ctx, tensors, count, adamwMultiKernel, "adamwMultiKernel", h,
                 gradStatus, cuda::stepCounters(ctx));
}

void gradCheckBegin(Context &ctx, const float *lossScale, float *status) {
  gradCheckBeginKernel<<<1, 1, 0, ctx.stream>>>(lossScale, status);
  checkLaunch(ctx, "gradCheckBeginKernel");
}

void gradCheck(Context &ctx, int64_t n, const float *g, float *status) {
  if (n <= 0)
    return;
  gradCheckKernel<<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(n, g,
                                                                     status);
  checkLaunch(ctx, "gradCheckKernel");
}

} // namespace mtc::rt
