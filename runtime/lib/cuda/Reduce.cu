//===- Reduce.cu - reduceSum and softmax ----------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// reduceSum uses the same dim-merging plan as cpu/Reduce.cpp and, like it,
// accumulates in double. Two kernels cover the shapes:
//  - one thread per output walking the reduced elements in order (best when
//    neighbouring outputs are neighbours in memory, e.g. a bias gradient
//    summed over the batch); this is the CPU's summation order exactly;
//  - one block per output with a tree reduction (best when one output sums
//    many contiguous elements, or when there are too few outputs to fill
//    the GPU).
// Softmax runs one warp per row.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/LayerNormRow.h" // cuda::blockSum

namespace mtc::rt {

namespace {

constexpr int kWarp = 32;

__global__ void scaleCopyKernel(int64_t n, const float *x, float *y,
                                double scale) {
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    y[i] = static_cast<float>(static_cast<double>(x[i]) * scale);
}

/// One thread per output; the reduced index advances like an odometer.
__global__ void reduceSumPerThreadKernel(ReducePlan plan, const float *x,
                                         float *y, double scale) {
  for (int64_t o = cuda::threadIndex(); o < plan.outCount;
       o += cuda::threadCount()) {
    const float *base = x + keptOffset(plan, o);
    int64_t index[kMaxRank] = {0};
    int64_t offset = 0;
    double sum = 0.0;
    for (int64_t r = 0; r < plan.reduceCount; ++r) {
      sum += base[offset];
      for (int d = plan.numReduced - 1; d >= 0; --d) {
        offset += plan.reducedStrides[d];
        if (++index[d] < plan.reducedDims[d])
          break;
        offset -= plan.reducedDims[d] * plan.reducedStrides[d];
        index[d] = 0;
      }
    }
    y[o] = static_cast<float>(sum * scale);
  }
}

/// One block (kBlock threads) per output, tree reduction in shared memory.
__global__ void reduceSumPerBlockKernel(ReducePlan plan, const float *x,
                                        float *y, double scale) {
  __shared__ double partial[cuda::kBlock / 32];
  for (int64_t o = blockIdx.x; o < plan.outCount; o += gridDim.x) {
    const float *base = x + keptOffset(plan, o);
    double sum = 0.0;
    for (int64_t r = threadIdx.x; r < plan.reduceCount; r += blockDim.x)
      sum += base[reducedOffset(plan, r)];
    double total = cuda::blockSum(sum, partial);
    if (threadIdx.x == 0)
      y[o] = static_cast<float>(total * scale);
  }
}

__device__ inline float warpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ inline float warpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// One warp per row of [outer, dim, inner] (row = (o, i)). Every lane of a
/// warp runs the same iterations, so the shuffles are always convergent.
__global__ void softmaxForwardKernel(int64_t outer, int64_t dim, int64_t inner,
                                     const float *x, float *y, bool log) {
  int64_t rows = outer * inner;
  int64_t warp = cuda::threadIndex() / kWarp;
  int64_t warps = cuda::threadCount() / kWarp;
  int lane = threadIdx.x % kWarp;
  for (int64_t row = warp; row < rows; row += warps) {
    int64_t base = (row / inner) * dim * inner + row % inner;
    const float *src = x + base;
    float *dst = y + base;
    float maxValue = -INFINITY;
    for (int64_t i = lane; i < dim; i += kWarp)
      maxValue = fmaxf(maxValue, src[i * inner]);
    maxValue = warpMax(maxValue);
    if (isinf(maxValue) && maxValue < 0)
      maxValue = 0.0f;
    float sum = 0.0f;
    for (int64_t i = lane; i < dim; i += kWarp)
      sum += expf(src[i * inner] - maxValue);
    sum = warpSum(sum);
    if (log) {
      float logSum = logf(sum);
      for (int64_t i = lane; i < dim; i += kWarp)
        dst[i * inner] = src[i * inner] - maxValue - logSum;
    } else {
      for (int64_t i = lane; i < dim; i += kWarp)
        dst[i * inner] = expf(src[i * inner] - maxValue) / sum;
    }
  }
}

__global__ void softmaxBackwardKernel(int64_t outer, int64_t dim, int64_t inner,
                                      const float *y, const float *dy,
                                      float *dx, bool log) {
  int64_t rows = outer * inner;
  int64_t warp = cuda::threadIndex() / kWarp;
  int64_t warps = cuda::threadCount() / kWarp;
  int lane = threadIdx.x % kWarp;
  for (int64_t row = warp; row < rows; row += warps) {
    int64_t base = (row / inner) * dim * inner + row % inner;
    const float *out = y + base;
    const float *grad = dy + base;
    float *dst = dx + base;
    float sum = 0.0f;
    if (log) {
      // d/dx log_softmax: dx = dy - softmax * sum(dy).
      for (int64_t i = lane; i < dim; i += kWarp)
        sum += grad[i * inner];
      sum = warpSum(sum);
      for (int64_t i = lane; i < dim; i += kWarp)
        dst[i * inner] = grad[i * inner] - expf(out[i * inner]) * sum;
    } else {
      // d/dx softmax: dx = y * (dy - sum(dy * y)).
      for (int64_t i = lane; i < dim; i += kWarp)
        sum += grad[i * inner] * out[i * inner];
      sum = warpSum(sum);
      for (int64_t i = lane; i < dim; i += kWarp)
        dst[i * inner] = out[i * inner] * (grad[i * inner] - sum);
    }
  }
}

} // namespace

void reduceSum(Context &ctx, int rank, const int64_t *inShape,
               const int64_t *outShape, const float *x, float *y, float scale) {
  ReducePlan plan;
  if (!planReduceSum(rank, inShape, outShape, plan)) {
    reportError(ctx, "reduceSum: output shape is not a reduction of the "
                     "input shape");
    return;
  }
  if (plan.outCount == 0)
    return;
  if (plan.numReduced == 0) {
    scaleCopyKernel<<<cuda::gridFor(plan.outCount), cuda::kBlock, 0,
                      ctx.stream>>>(plan.outCount, x, y, scale);
    checkLaunch(ctx, "scaleCopyKernel");
    return;
  }
  bool fewOutputs = plan.outCount < 1024 && plan.reduceCount >= 1024;
  bool contiguousRuns = plan.innermostReduced && plan.reduceCount >= 64;
  if (fewOutputs || contiguousRuns) {
    reduceSumPerBlockKernel<<<cuda::gridFor(plan.outCount, 1), cuda::kBlock, 0,
                              ctx.stream>>>(plan, x, y, scale);
    checkLaunch(ctx, "reduceSumPerBlockKernel");
    return;
  }
  reduceSumPerThreadKernel<<<cuda::gridFor(plan.outCount), cuda::kBlock, 0,
                             ctx.stream>>>(plan, x, y, scale);
  checkLaunch(ctx, "reduceSumPerThreadKernel");
}

void softmaxForward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                    const float *x, float *y, bool log) {
  int64_t rows = outer * inner;
  if (rows == 0 || dim == 0)
    return;
  softmaxForwardKernel<<<cuda::gridFor(rows, cuda::kBlock / kWarp),
                         cuda::kBlock, 0, ctx.stream>>>(outer, dim, inner, x, y,
                                                        log);
  checkLaunch(ctx, "softmaxForwardKernel");
}

void softmaxBackward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                     const float *y, const float *dy, float *dx, bool log) {
  int64_t rows = outer * inner;
  if (rows == 0 || dim == 0)
    return;
  softmaxBackwardKernel<<<cuda::gridFor(rows, cuda::kBlock / kWarp),
                          cuda::kBlock, 0, ctx.stream>>>(outer, dim, inner, y,
                                                         dy, dx, log);
  checkLaunch(ctx, "softmaxBackwardKernel");
}

} // namespace mtc::rt
