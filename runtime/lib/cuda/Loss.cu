//===- Loss.cu - Softmax cross-entropy ------------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Mirrors cpu/Loss.cpp: log-softmax through softmaxForward, then the loss
// from the saved log-probabilities. Mean of all-ignored labels is NaN, as in
// PyTorch and the ONNX reference.
//
// Kernels cannot call reportError, so a bad label goes to the device error
// record (DeviceErrors.cu), which device::synchronize() reads after the
// step (the trainer synchronizes there anyway to read the loss). The count
// of valid labels is a module global of a few bytes, not arena memory: the
// kernels still allocate nothing.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/LayerNormRow.h" // cuda::blockSum

namespace mtc::rt {

namespace {

/// Number of valid labels, from ceCountKernel to ceBackwardKernel.
__device__ long long gValidLabels;

constexpr int kReduceThreads = 1024;

__device__ inline bool isValidLabel(long long label, int64_t c,
                                    int64_t ignoreIndex) {
  return label != ignoreIndex && label >= 0 && label < c;
}

__device__ inline void recordBadLabel(cuda::DeviceErrorRecord *errors,
                                      long long label, int64_t position,
                                      int64_t c, int64_t d) {
  cuda::recordDeviceError(errors, cuda::DeviceErrorKind::Label, label, position,
                          c, d);
}

/// Reduction::None: loss[pos] per position.
__global__ void ceLossPerPositionKernel(int64_t n, int64_t c, int64_t d,
                                        const float *logProb,
                                        const int64_t *labels,
                                        int64_t ignoreIndex, float *loss,
                                        cuda::DeviceErrorRecord *errors) {
  for (int64_t pos = cuda::threadIndex(); pos < n * d;
       pos += cuda::threadCount()) {
    long long label = labels[pos];
    bool valid = isValidLabel(label, c, ignoreIndex);
    if (!valid && label != ignoreIndex)
      recordBadLabel(errors, label, pos, c, d);
    loss[pos] = valid ? -logProb[((pos / d) * c + label) * d + pos % d] : 0.0f;
  }
}

/// Sum and Mean: one block of kReduceThreads threads, accumulating in
/// double with a fixed tree so that the result is reproducible.
__global__ void ceLossReduceKernel(int64_t n, int64_t c, int64_t d,
                                   const float *logProb, const int64_t *labels,
                                   int64_t ignoreIndex, bool mean, float *loss,
                                   cuda::DeviceErrorRecord *errors) {
  __shared__ double sums[kReduceThreads];
  __shared__ long long counts[kReduceThreads];
  double sum = 0.0;
  long long count = 0;
  for (int64_t pos = threadIdx.x; pos < n * d; pos += blockDim.x) {
    long long label = labels[pos];
    if (!isValidLabel(label, c, ignoreIndex)) {
      if (label != ignoreIndex)
        recordBadLabel(errors, label, pos, c, d);
      continue;
    }
    sum += -logProb[((pos / d) * c + label) * d + pos % d];
    ++count;
  }
  sums[threadIdx.x] = sum;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      sums[threadIdx.x] += sums[threadIdx.x + width];
      counts[threadIdx.x] += counts[threadIdx.x + width];
    }
    __syncthreads();
  }
  if (threadIdx.x != 0)
    return;
  if (!mean)
    loss[0] = static_cast<float>(sums[0]);
  else
    loss[0] = counts[0] > 0 ? static_cast<float>(sums[0] / counts[0]) : NAN;
}

__global__ void ceCountKernel(int64_t positions, int64_t c,
                              const int64_t *labels, int64_t ignoreIndex) {
  __shared__ long long counts[kReduceThreads];
  long long count = 0;
  for (int64_t pos = threadIdx.x; pos < positions; pos += blockDim.x)
    count += isValidLabel(labels[pos], c, ignoreIndex) ? 1 : 0;
  long long total = cuda::blockSum(count, counts);
  if (threadIdx.x == 0)
    gValidLabels = total;
}

__global__ void ceBackwardKernel(int64_t n, int64_t c, int64_t d,
                                 const float *dloss, const float *logProb,
                                 const int64_t *labels, Reduction reduction,
                                 int64_t ignoreIndex, float *dlogits) {
  float scale = 0.0f;
  if (reduction == Reduction::Sum) {
    scale = dloss[0];
  } else if (reduction == Reduction::Mean) {
    long long count = gValidLabels;
    scale = count > 0 ? dloss[0] / static_cast<float>(count) : 0.0f;
  }
  for (int64_t at = cuda::threadIndex(); at < n * c * d;
       at += cuda::threadCount()) {
    int64_t img = at / (c * d);
    int64_t ci = (at / d) % c;
    int64_t di = at % d;
    int64_t pos = img * d + di;
    long long label = labels[pos];
    if (!isValidLabel(label, c, ignoreIndex)) {
      dlogits[at] = 0.0f;
      continue;
    }
    float g = reduction == Reduction::None ? dloss[pos] : scale;
    float target = ci == label ? 1.0f : 0.0f;
    dlogits[at] = g * (expf(logProb[at]) - target);
  }
}

} // namespace

void softmaxCrossEntropyForward(Context &ctx, int64_t n, int64_t c, int64_t d,
                                const float *logits, const int64_t *labels,
                                Reduction reduction, int64_t ignoreIndex,
                                float *loss, float *logProb) {
  softmaxForward(ctx, n, c, d, logits, logProb, /*log=*/true);
  cuda::DeviceErrorRecord *errors = cuda::deviceErrorRecord(ctx);
  if (reduction == Reduction::None) {
    if (n * d == 0)
      return;
    ceLossPerPositionKernel<<<cuda::gridFor(n * d), cuda::kBlock, 0,
                              ctx.stream>>>(n, c, d, logProb, labels,
                                            ignoreIndex, loss, errors);
    checkLaunch(ctx, "ceLossPerPositionKernel");
    return;
  }
  ceLossReduceKernel<<<1, kReduceThreads, 0, ctx.stream>>>(
      n, c, d, logProb, labels, ignoreIndex, reduction == Reduction::Mean, loss,
      errors);
  checkLaunch(ctx, "ceLossReduceKernel");
}

void softmaxCrossEntropyBackward(Context &ctx, int64_t n, int64_t c, int64_t d,
                                 const float *dloss, const float *logProb,
                                 const int64_t *labels, Reduction reduction,
                                 int64_t ignoreIndex, float *dlogits) {
  if (n * c * d == 0)
    return;
  if (reduction == Reduction::Mean) {
    ceCountKernel<<<1, kReduceThreads, 0, ctx.stream>>>(n * d, c, labels,
                                                        ignoreIndex);
    checkLaunch(ctx, "ceCountKernel");
  }
  ceBackwardKernel<<<cuda::gridFor(n * c * d), cuda::kBlock, 0, ctx.stream>>>(
      n, c, d, dloss, logProb, labels, reduction, ignoreIndex, dlogits);
  checkLaunch(ctx, "ceBackwardKernel");
}

} // namespace mtc::rt
