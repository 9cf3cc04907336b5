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

#include "Divisor.h"
#include "Launch.h"

#include <algorithm>
#include <type_traits>

#include "mtc/runtime/Half.h"
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
  __shared__ long long counts[kReduceThreads / 32];
  long long count = 0;
  for (int64_t pos = threadIdx.x; pos < positions; pos += blockDim.x)
    count += isValidLabel(labels[pos], c, ignoreIndex) ? 1 : 0;
  long long total = cuda::blockSum(count, counts);
  if (threadIdx.x == 0)
    gValidLabels = total;
}

/// `image` (c * d) and `d` as Divisors of the element indices.
__global__ void ceBackwardKernel(int64_t n, int64_t c, int64_t d, Divisor image,
                                 Divisor byD, const float *dloss,
                                 const float *logProb, const int64_t *labels,
                                 Reduction reduction, int64_t ignoreIndex,
                                 float *dlogits) {
  float scale = 0.0f;
  if (reduction == Reduction::Sum) {
    scale = dloss[0];
  } else if (reduction == Reduction::Mean) {
    long long count = gValidLabels;
    scale = count > 0 ? dloss[0] / static_cast<float>(count) : 0.0f;
  }
  for (int64_t at = cuda::threadIndex(); at < n * c * d;
       at += cuda::threadCount()) {
    const int64_t img = image.divide(at), within = image.remainder(at, img);
    const int64_t ci = byD.divide(within), di = byD.remainder(within, ci);
    const int64_t pos = img * d + di;
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

constexpr int kRowThreads = 512;

/// A row's (or a part's) largest logit and the sum of its exponentials
/// relative to it; none yet: -inf and 0 (kNoLogits).
struct MaxSum {
  float max, sum;
};
constexpr MaxSum kNoLogits = {-INFINITY, 0.0f};

/// The lane `offset` away's pair (cuda::blockReduce's shuffle).
__device__ inline MaxSum shuffleXor(MaxSum value, int offset) {
  return {__shfl_xor_sync(0xffffffffu, value.max, offset),
          __shfl_xor_sync(0xffffffffu, value.sum, offset)};
}

/// The pair of both parts: each sum rescaled to the larger maximum. The
/// same bits either way round (fmaxf and + commute; products are not
/// contracted into fused multiply-adds), as blockReduce needs.
__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY)
    return kNoLogits;
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

/// The row kernel's elements go in chunks of kCeChunk consecutive ones:
/// thread t takes chunks t, t + blockDim.x, ..., and visits a chunk's
/// elements in order, whether they move as 16-byte vectors (a whole chunk
/// in an aligned row) or one at a time, so rows that allow vectors and rows
/// that do not (padded and dense logits) give the same sums bit for bit.
constexpr int kCeChunk = 8;

/// Whether rows `ld` elements of T apart from p start on 16 bytes.
template <typename T>
__device__ inline bool rowsAligned(const T *p, int64_t ld) {
  return (ld * sizeof(T)) % 16 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// The chunk of a row of c elements that starts at element i, widened to
/// float into v; returns its length (kCeChunk but for the row's last).
template <typename In>
__device__ inline int loadChunk(const In *row, int64_t i, int64_t c,
                                bool vectors, bool bf16, float *v) {
  const int n = c - i < kCeChunk ? static_cast<int>(c - i) : kCeChunk;
  if (vectors && n == kCeChunk) {
    cuda::loadValues<kCeChunk>(row + i, bf16, v);
    return n;
  }
#pragma unroll
  for (int e = 0; e < kCeChunk; ++e)
    if (e < n)
      v[e] = storedToFloat(row[i + e], bf16);
  return n;
}

/// Stores the n values of a chunk at element i of a row: float32, or
/// rounded to 16 bits (Out = uint16_t; bfloat16 when `bf16`).
template <typename Out>
__device__ inline void storeChunk(Out *row, int64_t i, int n, bool vectors,
                                  bool bf16, const float *v) {
  if (vectors && n == kCeChunk) {
    cuda::storeValues<kCeChunk>(row + i, bf16, v);
    return;
  }
#pragma unroll
  for (int e = 0; e < kCeChunk; ++e) {
    if (e >= n)
      break;
    if constexpr (sizeof(Out) == sizeof(float))
      row[i + e] = v[e];
    else
      row[i + e] = bf16 ? floatToBf16(v[e]) : floatToHalf(v[e]);
  }
}

/// softmaxCrossEntropyWithGrad's rows [first, last), a block per row: the
/// row's maximum and sum of exponentials in one pass, its loss term into
/// rowLoss, then, in a second pass, the gradient as ceBackwardKernel
/// writes it, as float (Out = float) or rounded to 16 bits (Out =
/// uint16_t). The logits are float32 or (In = uint16_t) 16 bits in the same
/// format. With `staged`, the block first copies its row into dynamic
/// shared memory (c elements of In) and both passes read it there: the
/// logits are read from memory once instead of twice, and the numbers are
/// the same. Rows are `ld` elements apart in logits and dlogits; where they
/// start on 16 bytes (the memory plan pads GEMM outputs so), they are read
/// and written 16 bytes at a time (kCeChunk).
template <typename In, typename Out>
__global__ void
ceWithGradRowsKernel(int64_t first, int64_t last, int64_t c, int64_t ld,
                     const In *logits, const int64_t *labels,
                     const float *dloss, bool mean, int64_t ignoreIndex,
                     float *rowLoss, Out *dlogits, bool bf16, bool staged,
                     cuda::DeviceErrorRecord *errors) {
  __shared__ MaxSum pairScratch[kRowThreads / 32];
  extern __shared__ __align__(16) unsigned char ceRowCache[];
  // Without dlogits, the loss alone (dloss is then null).
  float scale = dlogits ? dloss[0] : 0.0f;
  if (mean) {
    long long count = gValidLabels;
    scale = count > 0 ? scale / static_cast<float>(count) : 0.0f;
  }
  const bool inVectors = rowsAligned(logits, ld);
  const bool outVectors = dlogits && rowsAligned(dlogits, ld);
  const int64_t chunkStride = int64_t(blockDim.x) * kCeChunk;
  for (int64_t row = first + blockIdx.x; row < last; row += gridDim.x) {
    const In *src = logits + row * ld;
    // The shared copy starts on 16 bytes: its chunks are vectors.
    bool readVectors = inVectors;
    if (staged) {
      In *cache = reinterpret_cast<In *>(ceRowCache);
      const int64_t units = inVectors ? c * sizeof(In) / 16 : 0;
      for (int64_t u = threadIdx.x; u < units; u += blockDim.x)
        reinterpret_cast<uint4 *>(cache)[u] =
            reinterpret_cast<const uint4 *>(src)[u];
      for (int64_t i = units * 16 / sizeof(In) + threadIdx.x; i < c;
           i += blockDim.x)
        cache[i] = src[i];
      __syncthreads();
      src = cache;
      readVectors = true;
    }
    // f(i, v, n) for each of the thread's chunks in order: the n logits
    // from class i on, widened into v.
    auto eachChunk = [&](auto f) {
      for (int64_t i = threadIdx.x * kCeChunk; i < c; i += chunkStride) {
        float v[kCeChunk];
        f(i, v, loadChunk(src, i, c, readVectors, bf16, v));
      }
    };
    // The maximum and the sum of exponentials in one pass: a thread's sum
    // is relative to the largest logit it has seen, rescaled when a chunk
    // raises it (online softmax), and the block combines the threads'
    // pairs the same way.
    MaxSum stats = kNoLogits;
    eachChunk([&](int64_t, float *v, int n) {
      float chunkMax = stats.max;
#pragma unroll
      for (int e = 0; e < kCeChunk; ++e)
        if (e < n)
          chunkMax = fmaxf(chunkMax, v[e]);
      if (chunkMax == -INFINITY)
        return; // every term so far is exp(-inf) = 0
      if (chunkMax > stats.max) {
        stats.sum *= expf(stats.max - chunkMax);
        stats.max = chunkMax;
      }
#pragma unroll
      for (int e = 0; e < kCeChunk; ++e)
        if (e < n)
          stats.sum += expf(v[e] - stats.max);
    });
    const long long label = labels[row];
    const bool valid = isValidLabel(label, c, ignoreIndex);
    // The label's logit, read before the reduction below synchronizes the
    // block: after it the row may be overwritten.
    const float labelLogit =
        threadIdx.x == 0 && valid ? storedToFloat(src[label], bf16) : 0.0f;
    stats = cuda::blockReduce(stats, pairScratch,
                              [](MaxSum a, MaxSum b) { return combine(a, b); });
    // A row of -inf only: maximum 0, sum 0.
    const float maxValue = stats.max == -INFINITY ? 0.0f : stats.max;
    const float logSum = logf(stats.sum);
    if (threadIdx.x == 0) {
      if (!valid && label != ignoreIndex)
        recordBadLabel(errors, label, row, c, 1);
      rowLoss[row] = valid ? -(labelLogit - maxValue - logSum) : 0.0f;
    }
    if (!dlogits)
      continue;
    // Every thread has read the whole row (the reductions synchronize)
    // before any writes over it; a thread then reads only the chunks it
    // writes.
    Out *dst = dlogits + row * ld;
    eachChunk([&](int64_t i, float *v, int n) {
#pragma unroll
      for (int e = 0; e < kCeChunk; ++e)
        if (e < n)
          v[e] = valid ? scale * (expf(v[e] - maxValue - logSum) -
                                  (i + e == label ? 1.0f : 0.0f))
                       : 0.0f;
      storeChunk(dst, i, n, outVectors, bf16, v);
    });
    __syncthreads();
  }
}

/// The loss from the rows' terms: one block, double, a fixed tree.
__global__ void ceRowLossReduceKernel(int64_t n, const float *rowLoss,
                                      bool mean, float *loss) {
  __shared__ double sums[kReduceThreads / 32];
  double sum = 0.0;
  for (int64_t row = threadIdx.x; row < n; row += blockDim.x)
    sum += rowLoss[row];
  sum = cuda::blockSum(sum, sums);
  if (threadIdx.x != 0)
    return;
  if (!mean)
    loss[0] = static_cast<float>(sum);
  else
    loss[0] = gValidLabels > 0 ? static_cast<float>(sum / gValidLabels) : NAN;
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
      n, c, d, makeDivisor(c * d, n * c * d), makeDivisor(d, c * d), dloss,
      logProb, labels, reduction, ignoreIndex, dlogits);
  checkLaunch(ctx, "ceBackwardKernel");
}

namespace {

/// softmaxCrossEntropyWithGrad on logits stored as In (float, or 16 bits in
/// `storage`, then with dlogits in the same format, in place or not).
/// Without dlogits, the loss alone.
template <typename In>
void lossWithGrad(Context &ctx, int64_t n, int64_t c, int64_t ld,
                  const In *logits, const int64_t *labels, const float *dloss,
                  Reduction reduction, int64_t ignoreIndex, float *loss,
                  void *dlogits, bool narrow, Storage16 storage,
                  void *workspace) {
  cuda::DeviceErrorRecord *errors = cuda::deviceErrorRecord(ctx);
  const bool mean = reduction == Reduction::Mean;
  const bool bf16 = storage == Storage16::Bf16;
  float *rowLoss = static_cast<float *>(workspace);
  ceCountKernel<<<1, kReduceThreads, 0, ctx.stream>>>(n, c, labels,
                                                      ignoreIndex);
  checkLaunch(ctx, "ceCountKernel");
  // A row that fits the shared memory a block may opt into (with the
  // reduction scratch) is staged there: read from memory once.
  const size_t rowBytes = static_cast<size_t>(c) * sizeof(In);
  const bool fits =
      rowBytes + kRowThreads / 32 * sizeof(MaxSum) <= cuda::sharedBytesOptin();
  auto rows = [&](int64_t first, int64_t last, bool to16) {
    if (last <= first)
      return;
    unsigned grid = static_cast<unsigned>(std::min<int64_t>(last - first, 65536));
    constexpr auto kernel16 = ceWithGradRowsKernel<In, uint16_t>;
    constexpr auto kernel32 = ceWithGradRowsKernel<In, float>;
    bool staged =
        fits && (to16 ? cuda::allowSharedBytes<kernel16>(ctx, rowBytes,
                                                         "ceWithGradRowsKernel")
                      : cuda::allowSharedBytes<kernel32>(
                            ctx, rowBytes, "ceWithGradRowsKernel"));
    if (fits && !staged)
      return; // reported
    size_t shared = staged ? rowBytes : 0;
    if (to16)
      kernel16<<<grid, kRowThreads, shared, ctx.stream>>>(
          first, last, c, ld, logits, labels, dloss, mean, ignoreIndex, rowLoss,
          static_cast<uint16_t *>(dlogits), bf16, staged, errors);
    else
      kernel32<<<grid, kRowThreads, shared, ctx.stream>>>(
          first, last, c, ld, logits, labels, dloss, mean, ignoreIndex, rowLoss,
          static_cast<float *>(dlogits), bf16, staged, errors);
    checkLaunch(ctx, "ceWithGradRowsKernel");
  };
  // 16-bit logits are overwritten by a 16-bit dlogits row by row (each
  // block reads its whole row before writing it).
  if (!std::is_same_v<In, float> || !narrow ||
      dlogits != static_cast<const void *>(logits) || n == 0) {
    rows(0, n, narrow);
  } else if (ld != c) {
    reportError(ctx, "softmaxCrossEntropyWithGrad: a 16-bit gradient in "
                     "place of float32 logits needs rows without padding");
    return;
  } else {
    // In place in 16 bits: as on the CPU, row 0 through float32 and
    // narrowInPlace, then rows [1, 2), [2, 4)... in phases.
    rows(0, 1, false);
    narrowInPlace(ctx, storage, static_cast<float *>(dlogits), c);
    for (int64_t first = 1; first < n; first *= 2)
      rows(first, std::min(n, 2 * first), true);
  }
  ceRowLossReduceKernel<<<1, kReduceThreads, 0, ctx.stream>>>(n, rowLoss, mean,
                                                              loss);
  checkLaunch(ctx, "ceRowLossReduceKernel");
}

} // namespace

void softmaxCrossEntropyWithGrad(Context &ctx, int64_t n, int64_t c, int64_t ld,
                                 const float *logits, const int64_t *labels,
                                 const float *dloss, Reduction reduction,
                                 int64_t ignoreIndex, float *loss,
                                 void *dlogits, bool narrow, Storage16 storage,
                                 void *workspace) {
  lossWithGrad(ctx, n, c, ld, logits, labels, dloss, reduction, ignoreIndex,
               loss, dlogits, narrow, storage, workspace);
}

void softmaxCrossEntropyLoss(Context &ctx, int64_t n, int64_t c, int64_t ld,
                             const float *logits, const int64_t *labels,
                             Reduction reduction, int64_t ignoreIndex,
                             float *loss, void *workspace) {
  lossWithGrad(ctx, n, c, ld, logits, labels, nullptr, reduction, ignoreIndex,
               loss, nullptr, false, Storage16::Bf16, workspace);
}

void softmaxCrossEntropyWithGrad16(Context &ctx, Storage16 storage, int64_t n,
                                   int64_t c, int64_t ld,
                                   const uint16_t *logits,
                                   const int64_t *labels, const float *dloss,
                                   Reduction reduction, int64_t ignoreIndex,
                                   float *loss, uint16_t *dlogits,
                                   void *workspace) {
  lossWithGrad(ctx, n, c, ld, logits, labels, dloss, reduction, ignoreIndex,
               loss, dlogits, true, storage, workspace);
}

} // namespace mtc::rt
