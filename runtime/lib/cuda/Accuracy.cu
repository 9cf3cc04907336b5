//===- Accuracy.cu - Counting correct predictions -------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// One block counts every position in a fixed order, so the count is exact
// and deterministic; evaluation calls it once per batch.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

namespace mtc::rt {

namespace {

constexpr int kThreads = 256;

__global__ void countCorrectKernel(int64_t n, int64_t c, int64_t d,
                                   int64_t stride, const float *logits,
                                   const int64_t *labels, int64_t ignoreIndex,
                                   float *count) {
  __shared__ int partial[kThreads], partialCounted[kThreads];
  int correct = 0, counted = 0;
  for (int64_t pos = threadIdx.x; pos < n * d; pos += blockDim.x) {
    int64_t label = labels[pos];
    if (label == ignoreIndex)
      continue;
    ++counted;
    const float *row = logits + (pos / d) * stride + pos % d;
    correct += firstArgmax(row, c, d) == label ? 1 : 0;
  }
  partial[threadIdx.x] = correct;
  partialCounted[threadIdx.x] = counted;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      partial[threadIdx.x] += partial[threadIdx.x + stride];
      partialCounted[threadIdx.x] += partialCounted[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    count[0] = static_cast<float>(partial[0]);
    count[1] = static_cast<float>(partialCounted[0]);
  }
}

} // namespace

void countCorrect(Context &ctx, int64_t n, int64_t c, int64_t d, int64_t stride,
                  const float *logits, const int64_t *labels,
                  int64_t ignoreIndex, float *count) {
  countCorrectKernel<<<1, kThreads, 0, ctx.stream>>>(
      n, c, d, stride, logits, labels, ignoreIndex, count);
  checkLaunch(ctx, "countCorrectKernel");
}

} // namespace mtc::rt
