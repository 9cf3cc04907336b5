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

__global__ void adamwKernel(int64_t n, float *p, const float *g, float *m,
                            float *v, AdamwHyperparameters h,
                            const float *status,
                            const StepCounters *counters) {
  if (skipsStep(status))
    return;
  const AdamwScalars s = adamwScalars(counters->optimizerStep, h);
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
/// Blocks one tensor gets at most, per SM: a few rounds of the blocks an SM
/// holds at once (three to eight of cuda::kBlock threads, by the kernel's
/// registers). Past that the threads of a large tensor stride over it, so
/// that what a thread does once (finding its tensor, the step's scalars) is
/// paid once for many elements.
constexpr int64_t kMultiBlocksPerSm = 16;
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
      blocks += std::min(kMultiBlocksPerSm * std::max(ctx.smCount, 1),
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

/// Vectors of four elements a thread of adamwMultiKernel loads before it
/// updates the first: 128 bytes of loads in flight a thread.
constexpr int kAdamwVectors = 2;

/// Vector i of a tensor's four float arrays.
struct AdamwVector {
  float4 p, g, m, v;
};

__device__ inline AdamwVector loadAdamwVector(const AdamwTensor &t, int64_t i) {
  return {reinterpret_cast<const float4 *>(t.param)[i],
          reinterpret_cast<const float4 *>(t.grad)[i],
          reinterpret_cast<const float4 *>(t.expAvg)[i],
          reinterpret_cast<const float4 *>(t.expAvgSq)[i]};
}

/// Updates vector i's four elements (each by the same arithmetic as alone)
/// and stores them, with the 16-bit copy if the tensor has one.
__device__ inline void storeAdamwVector(const AdamwTensor &t, int64_t i,
                                        AdamwVector x, float unscale,
                                        const AdamwScalars &s) {
  adamwElement(x.p.x, x.g.x * unscale, x.m.x, x.v.x, s);
  adamwElement(x.p.y, x.g.y * unscale, x.m.y, x.v.y, s);
  adamwElement(x.p.z, x.g.z * unscale, x.m.z, x.v.z, s);
  adamwElement(x.p.w, x.g.w * unscale, x.m.w, x.v.w, s);
  reinterpret_cast<float4 *>(t.param)[i] = x.p;
  reinterpret_cast<float4 *>(t.expAvg)[i] = x.m;
  reinterpret_cast<float4 *>(t.expAvgSq)[i] = x.v;
  if (t.param16) {
    const bool bf16 = t.storage == Storage16::Bf16;
    reinterpret_cast<ushort4 *>(t.param16)[i] =
        make_ushort4(copyOf(x.p.x, bf16), copyOf(x.p.y, bf16),
                     copyOf(x.p.z, bf16), copyOf(x.p.w, bf16));
  }
}

/// Each block updates its part of one tensor (see Tensors): kAdamwVectors
/// vectors of four elements a thread at a time where the arrays allow, all
/// loaded before the first is updated, then the elements past the last
/// whole vector one by one. Every thread forms the step's scalars itself:
/// a warp's lanes run the same instructions one lane would, and no warp
/// waits at a barrier for another's double-precision pows. Three blocks an
/// SM (74 registers a thread on sm_90, no spills; four would spill in the
/// loop) keep 96 KB of loads in flight there.
__global__ void __launch_bounds__(cuda::kBlock, 3)
    adamwMultiKernel(AdamwTensors tensors, AdamwHyperparameters h,
                     const float *status, const StepCounters *counters) {
  if (skipsStep(status))
    return;
  const float unscale = gradUnscale(status);
  const MultiBlock b = multiBlock(tensors);
  const AdamwTensor &t = tensors.t[b.tensor];
  const int64_t start = b.block * blockDim.x + threadIdx.x,
                stride = b.blocks * blockDim.x;
  const AdamwScalars s = adamwScalars(counters->optimizerStep, h);
  const int64_t vectors = inVectors(t) ? t.n / 4 : 0;
  for (int64_t i = start; i < vectors; i += kAdamwVectors * stride) {
    AdamwVector x[kAdamwVectors];
#pragma unroll
    for (int u = 0; u < kAdamwVectors; ++u)
      if (i + u * stride < vectors)
        x[u] = loadAdamwVector(t, i + u * stride);
#pragma unroll
    for (int u = 0; u < kAdamwVectors; ++u)
      if (i + u * stride < vectors)
        storeAdamwVector(t, i + u * stride, x[u], unscale, s);
  }
  const bool bf16 = t.storage == Storage16::Bf16;
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
  launchMulti<4 * kAdamwVectors>(ctx, tensors, count, adamwMultiKernel,
                                 "adamwMultiKernel", h, gradStatus,
                                 cuda::stepCounters(ctx));
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
