//===- Norm.cu - Batch and layer normalization ----------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Mirrors cpu/Norm.cpp: statistics accumulated in double (batch norm: in
// one pass over x, shifted by the channel's first element; layer norm: the
// mean, then the squared deviations, of a row), the same per-element
// formulas (KernelCommon.h). Every reduction is a fixed tree
// over a fixed number of threads, so results are reproducible run to run;
// they match the CPU to rounding, not bit for bit.
//
//  - BatchNorm: blocks reduce each channel (the statistics, or the
//    gradient sums), then a grid over (part of a channel, channel) applies
//    the per-element formula, so that the elementwise part fills the GPU
//    even with few channels. With few channels the reductions split each
//    channel into parts too (bnReduceParts): each block sums its part,
//    and the parts' sums are added in part order by a small kernel, so
//    the results stay reproducible.
//  - LayerNorm: one block per row does the whole row. dscale/dbias are
//    column sums over the rows: formed by the dx pass where a thread holds
//    one vector of a row (each block sums its rows, a small kernel adds
//    the blocks' sums), otherwise by a kernel of their own that runs first,
//    one thread per column and row slice.
//
// The backward kernels finish every read of dy before dx is written, so dx
// may share storage with dy.
//
//===----------------------------------------------------------------------===//

#include "Divisor.h"
#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <type_traits>

namespace mtc::rt {

namespace {

/// Threads of the reduction blocks; a power of two.
constexpr int kReduceThreads = cuda::kNormRowThreads;
/// The scratch of their reductions (cuda::blockReduce): one per warp.
constexpr int kReduceWarps = kReduceThreads / 32;
/// LayerNorm column sums over rows: a warp of columns times kRowSlices
/// rows.
constexpr int kColumns = 32;
constexpr int kRowSlices = 16;
/// The sums of the row blocks' partial column sums (a few hundred rows of
/// doubles): kSumColumns columns, 64 bytes of a row, times kSumSlices
/// rows. GPT-2's 768 columns make 96 blocks rather than 24, so that more
/// of the GPU reads the partials.
constexpr int kSumColumns = 8;
constexpr int kSumSlices = 32;
/// Grid dimensions y and z are limited to 65535.
constexpr int64_t kMaxGridY = 65535;

using cuda::blockSum;
using cuda::loadValues;
using cuda::storeValues;

/// Calls f(offset) for the vectors of V elements (offset: the first's) of
/// channel ch of [n, c, inner] that this thread handles when the channel is
/// split into `parts` parts of blockDim.x threads, this block being part
/// `part`; V divides inner. Whole images go to parts when a plane is at
/// least a block's vectors wide (no division per vector); otherwise the
/// channel's vectors are numbered flat, split into image and position by
/// `byVectors` (inner / V as a Divisor for dividends below n * inner / V:
/// a multiply and a shift, not a 64-bit division).
template <int V, typename F>
__device__ void forEachInChannel(int64_t n, int64_t c, int64_t inner,
                                 const Divisor &byVectors, int64_t ch,
                                 int64_t part, int64_t parts, F &&f) {
  const int64_t vectors = inner / V;
  // Unrolled so that several loads are in flight per thread.
  if (vectors >= blockDim.x) {
    for (int64_t img = part; img < n; img += parts) {
      const int64_t base = (img * c + ch) * inner;
#pragma unroll 4
      for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x)
        f(base + j * V);
    }
    return;
  }
  const int64_t m = n * vectors;
#pragma unroll 4
  for (int64_t r = part * blockDim.x + threadIdx.x; r < m;
       r += parts * blockDim.x) {
    const int64_t img = byVectors.divide(r);
    f((img * c + ch) * inner + byVectors.remainder(r, img) * V);
  }
}

/// The vectors of the kernels below: the widest of 8, 4 and 1 elements that
/// divides inner and to which every tensor of the call is aligned (null
/// ones aside). It depends on the shape and the alignment only, not on how
/// the tensors are stored, so float32 and 16-bit calls sum in the same
/// order.
template <typename... T> int channelVector(int64_t inner, const T *...tensors) {
  auto aligned = [](int v, const auto *p) {
    const size_t bytes = std::min<size_t>(16, v * sizeof(*p));
    return !p || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  for (int v : {8, 4})
    if (inner % v == 0 && (aligned(v, tensors) && ...))
      return v;
  return 1;
}

/// f(std::integral_constant<int, v>) for v (channelVector's).
template <typename F> void withVector(int v, F &&f) {
  if (v == 8)
    f(std::integral_constant<int, 8>());
  else if (v == 4)
    f(std::integral_constant<int, 4>());
  else
    f(std::integral_constant<int, 1>());
}

/// The x-dimension of a grid that splits each of c channels into parts
/// (vectors of v elements).
unsigned channelParts(int64_t n, int64_t c, int64_t inner, int v) {
  const int64_t vectors = inner / v;
  int64_t perChannel = vectors >= cuda::kBlock
                           ? n
                           : (n * vectors + cuda::kBlock - 1) / cuda::kBlock;
  // About 8k blocks in all are plenty to fill a GPU.
  int64_t wanted = std::max<int64_t>(1, 8192 / std::min(c, kMaxGridY));
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min(perChannel, wanted)));
}

/// Parts per channel of the BatchNorm reductions (blocks of
/// kReduceThreads, vectors of v elements): 1 (a block per channel) when
/// there are channels enough to fill the GPU (`resident` blocks at once);
/// otherwise about `resident` blocks in all, each with whole images when a
/// plane is a block's vectors wide, else at least a block's worth of
/// vectors. ResNet-50's 64 channels at 112x112 would otherwise reduce 64 x
/// 112 x 112 elements a block on 64 SMs.
int64_t bnReduceParts(int64_t n, int64_t c, int64_t inner, int v,
                      int64_t resident) {
  const int64_t vectors = inner / v;
  const int64_t perChannel =
      vectors >= kReduceThreads
          ? n
          : (n * vectors + kReduceThreads - 1) / kReduceThreads;
  const int64_t wanted = std::max<int64_t>(1, resident / c);
  return std::max<int64_t>(1, std::min(perChannel, wanted));
}

/// The channel statistics from one pass over x: with d = x - k, k the
/// channel's first element (a shift inside the data, which keeps the
/// subtraction below from cancelling: the shifted-data algorithm), the
/// sums of d and d * d give mean = k + sum(d) / m and the sum of squared
/// deviations sum(d * d) - sum(d)^2 / m. A vector's V terms are added in
/// float, the vectors' sums in double. Both sums of a part of a channel
/// (in one block) go to sums[0] and sums[1] of thread 0.
template <int V, typename X>
__device__ void shiftedChannelSums(int64_t n, int64_t c, int64_t inner,
                                   const Divisor &byVectors, const X *x,
                                   bool bf16, int64_t ch, int64_t part,
                                   int64_t parts, double *scratch,
                                   double sums[2]) {
  const float k = storedToFloat(x[ch * inner], bf16);
  double d1 = 0.0, d2 = 0.0;
  forEachInChannel<V>(n, c, inner, byVectors, ch, part, parts, [&](int64_t at) {
    float v[V];
    loadValues<V>(x + at, bf16, v);
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float d = v[e] - k;
      s1 += d;
      s2 = fmaf(d, d, s2);
    }
    d1 += s1;
    d2 += s2;
  });
  sums[0] = blockSum(d1, scratch);
  sums[1] = blockSum(d2, scratch);
}

/// Mean and squared deviations of channel ch from its sums shifted by k
/// (see shiftedChannelSums) over m elements; saves them and updates the
/// running statistics.
__device__ inline void finishChannelStats(int64_t ch, double d1, double d2,
                                          int64_t m, float *runningMean,
                                          float *runningVar, float eps,
                                          float momentum, float *savedMean,
                                          float *savedInvstd, double k) {
  const double count = static_cast<double>(m);
  const double mean = m > 0 ? k + d1 / count : 0.0;
  const double squaredDevSum = m > 0 ? fmax(d2 - d1 * (d1 / count), 0.0) : 0.0;
  savedMean[ch] = static_cast<float>(mean);
  savedInvstd[ch] = inverseStd(m > 0 ? squaredDevSum / count : 0.0, eps);
  if (m > 0 && runningMean && runningVar)
    updateBatchNormRunningStats(runningMean[ch], runningVar[ch], mean,
                                squaredDevSum, m, momentum);
}

/// Part blockIdx.x of gridDim.x of each channel: its shifted sums, to
/// partials[2 * (ch * parts + part)] and the next. x is float32 or 16-bit
/// (bfloat16 when `bf16`), as are the x of the kernels below.
template <int V, typename X>
__global__ void bnPartialStatsKernel(int64_t n, int64_t c, int64_t inner,
                                     Divisor byVectors, const X *x, bool bf16,
                                     double *partials) {
  __shared__ double scratch[kReduceWarps];
  const int64_t parts = gridDim.x, part = blockIdx.x;
  for (int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
    double sums[2];
    shiftedChannelSums<V>(n, c, inner, byVectors, x, bf16, ch, part, parts,
                          scratch, sums);
    if (threadIdx.x == 0) {
      partials[2 * (ch * parts + part)] = sums[0];
      partials[2 * (ch * parts + part) + 1] = sums[1];
    }
  }
}

/// The statistics from the parts' shifted sums (a thread per channel),
/// added in part order.
template <typename X>
__global__ void
bnFinishStatsKernel(int64_t n, int64_t c, int64_t inner, int64_t parts,
                    const X *x, bool bf16, const double *partials,
                    float *runningMean, float *runningVar, float eps,
                    float momentum, float *savedMean, float *savedInvstd) {
  for (int64_t ch = cuda::threadIndex(); ch < c; ch += cuda::threadCount()) {
    double d1 = 0.0, d2 = 0.0;
    for (int64_t p = 0; p < parts; ++p) {
      d1 += partials[2 * (ch * parts + p)];
      d2 += partials[2 * (ch * parts + p) + 1];
    }
    finishChannelStats(ch, d1, d2, n * inner, runningMean, runningVar, eps,
                       momentum, savedMean, savedInvstd,
                       n * inner > 0 ? storedToFloat(x[ch * inner], bf16)
                                     : 0.0);
  }
}

/// A block per channel: its statistics from one pass over x.
template <int V, typename X>
__global__ void bnTrainStatsKernel(int64_t n, int64_t c, int64_t inner,
                                   Divisor byVectors, const X *x, bool bf16,
                                   float *runningMean, float *runningVar,
                                   float eps, float momentum, float *savedMean,
                                   float *savedInvstd) {
  __shared__ double scratch[kReduceWarps];
  const int64_t m = n * inner;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double sums[2] = {0.0, 0.0};
    if (m > 0)
      shiftedChannelSums<V>(n, c, inner, byVectors, x, bf16, ch, 0, 1, scratch,
                            sums);
    if (threadIdx.x == 0)
      finishChannelStats(ch, sums[0], sums[1], m, runningMean, runningVar, eps,
                         momentum, savedMean, savedInvstd,
                         m > 0 ? storedToFloat(x[ch * inner], bf16) : 0.0);
  }
}

/// y (stored as Y) from the statistics; with var non-null they are running
/// statistics (inference) and invstd is formed here, else savedInvstd
/// holds it. With x16, x's 16-bit copy is written there too; with a
/// residual, it is added before the activation (addResidual).
template <int V, typename X, typename Y>
__global__ void
bnApplyKernel(int64_t n, int64_t c, int64_t inner, Divisor byVectors,
              const X *x, bool bf16, const float *scale, const float *bias,
              const float *mean, const float *savedInvstd, const float *var,
              float eps, Y *y, NormActivation act, uint16_t *x16,
              const Y *residual) {
  for (int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
    const float mu = mean[ch];
    const float invstd = var ? inverseStd(var[ch], eps) : savedInvstd[ch];
    const float gamma = scale[ch], beta = bias[ch];
    forEachInChannel<V>(
        n, c, inner, byVectors, ch, blockIdx.x, gridDim.x, [&](int64_t at) {
          float v[V], r[V] = {};
          loadValues<V>(x + at, bf16, v);
          if (residual)
            loadValues<V>(residual + at, bf16, r);
          if (x16)
            storeValues<V>(x16 + at, bf16, v);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            float t = normalizeElement(v[e], mu, invstd, gamma, beta);
            if (residual)
              t = addResidual<Y>(t, r[e], bf16);
            v[e] = activate(t, act);
          }
          storeValues<V>(y + at, bf16, v);
        });
  }
}

/// The V values of dy (float32, or 16-bit like x) at `at`, through the
/// activation when there is one (actOut non-null, stored like x).
template <int V, typename G, typename X>
__device__ inline void gradientsAt(const G *dy, const X *actOut, int64_t at,
                                   const NormActivation &act, bool bf16,
                                   float *g) {
  loadValues<V>(dy + at, bf16, g);
  if (!actOut)
    return;
  float y[V];
  loadValues<V>(actOut + at, bf16, y);
#pragma unroll
  for (int e = 0; e < V; ++e)
    g[e] = activationGrad(g[e], y[e], act);
}

/// The block's sums of dy and of dy * xhat over part `part` of `parts` of
/// channel ch (valid in thread 0): a vector's V terms added in float, the
/// vectors' sums in double.
template <int V, typename G, typename X>
__device__ void channelGradientSums(
    int64_t n, int64_t c, int64_t inner, const Divisor &byVectors, const G *dy,
    const X *x, bool bf16, const float *savedMean, const float *savedInvstd,
    const X *actOut, const NormActivation &act, int64_t ch, int64_t part,
    int64_t parts, double *scratch, double &sumDy, double &sumDyXhat) {
  const float mean = savedMean[ch], invstd = savedInvstd[ch];
  sumDy = 0.0;
  sumDyXhat = 0.0;
  forEachInChannel<V>(n, c, inner, byVectors, ch, part, parts, [&](int64_t at) {
    float v[V], g[V];
    loadValues<V>(x + at, bf16, v);
    gradientsAt<V>(dy, actOut, at, act, bf16, g);
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      s1 += g[e];
      s2 = fmaf(g[e], (v[e] - mean) * invstd, s2);
    }
    sumDy += s1;
    sumDyXhat += s2;
  });
  sumDy = blockSum(sumDy, scratch);
  sumDyXhat = blockSum(sumDyXhat, scratch);
}

template <int V, typename G, typename X>
__global__ void bnBackwardReduceKernel(
    int64_t n, int64_t c, int64_t inner, Divisor byVectors, const G *dy,
    const X *x, bool bf16, const float *savedMean, const float *savedInvstd,
    float *dscale, float *dbias, const X *actOut, NormActivation act) {
  __shared__ double scratch[kReduceWarps];
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double sumDy, sumDyXhat;
    channelGradientSums<V>(n, c, inner, byVectors, dy, x, bf16, savedMean,
                           savedInvstd, actOut, act, ch, 0, 1, scratch, sumDy,
                           sumDyXhat);
    if (threadIdx.x == 0) {
      dbias[ch] = static_cast<float>(sumDy);
      dscale[ch] = static_cast<float>(sumDyXhat);
    }
  }
}

/// Part blockIdx.x of gridDim.x of each channel: its sums of dy and of
/// dy * xhat, to partials[2 * (ch * parts + part)] and the next.
template <int V, typename G, typename X>
__global__ void
bnPartialBackwardKernel(int64_t n, int64_t c, int64_t inner, Divisor byVectors,
                        const G *dy, const X *x, bool bf16,
                        const float *savedMean, const float *savedInvstd,
                        const X *actOut, NormActivation act, double *partials) {
  __shared__ double scratch[kReduceWarps];
  for (int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
    double sumDy, sumDyXhat;
    channelGradientSums<V>(n, c, inner, byVectors, dy, x, bf16, savedMean,
                           savedInvstd, actOut, act, ch, blockIdx.x, gridDim.x,
                           scratch, sumDy, sumDyXhat);
    if (threadIdx.x == 0) {
      const int64_t at = 2 * (ch * gridDim.x + blockIdx.x);
      partials[at] = sumDy;
      partials[at + 1] = sumDyXhat;
    }
  }
}

/// dbias and dscale from the parts' sums (a thread per channel), added in
/// part order.
__global__ void bnFinishBackwardKernel(int64_t c, int64_t parts,
                                       const double *partials, float *dscale,
                                       float *dbias) {
  for (int64_t ch = cuda::threadIndex(); ch < c; ch += cuda::threadCount()) {
    double sumDy = 0.0, sumDyXhat = 0.0;
    for (int64_t p = 0; p < parts; ++p) {
      sumDy += partials[2 * (ch * parts + p)];
      sumDyXhat += partials[2 * (ch * parts + p) + 1];
    }
    dbias[ch] = static_cast<float>(sumDy);
    dscale[ch] = static_cast<float>(sumDyXhat);
  }
}

/// dx, stored as DX.
template <int V, typename G, typename X, typename DX>
__global__ void
bnBackwardApplyKernel(int64_t n, int64_t c, int64_t inner, Divisor byVectors,
                      const G *dy, const X *x, bool bf16, const float *scale,
                      const float *savedMean, const float *savedInvstd,
                      const float *dscale, const float *dbias, DX *dx,
                      const X *actOut, NormActivation act) {
  for (int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
    const float mean = savedMean[ch], invstd = savedInvstd[ch];
    const NormBackwardFactors f =
        normBackwardFactors(dbias[ch], dscale[ch], n * inner,
                            static_cast<double>(invstd) * scale[ch]);
    forEachInChannel<V>(
        n, c, inner, byVectors, ch, blockIdx.x, gridDim.x, [&](int64_t at) {
          float v[V], g[V];
          loadValues<V>(x + at, bf16, v);
          gradientsAt<V>(dy, actOut, at, act, bf16, g);
#pragma unroll
          for (int e = 0; e < V; ++e)
            v[e] = normBackwardElement(g[e], (v[e] - mean) * invstd, f);
          storeValues<V>(dx + at, bf16, v);
        });
  }
}

/// One row per block; `Out` is float, or uint16_t for a 16-bit y (bfloat16
/// when `bf16`, else float16), rounded as a conversion would round it.
template <typename Out>
__global__ void lnForwardKernel(int64_t outer, int64_t dim, const float *x,
                                const float *scale, const float *bias,
                                float eps, Out *y, float *mean, float *invstd,
                                bool bf16) {
  __shared__ double scratch[kReduceWarps];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x)
    cuda::layerNormRow(dim, x + row * dim, scale, bias, eps, y + row * dim,
                       mean ? mean + row : nullptr,
                       invstd ? invstd + row : nullptr, bf16, scratch);
}

/// x[i] (or dy[i]) widened to float: float32, or 16-bit (bfloat16 when
/// `bf16`).
__device__ inline float loadX(const float *x, int64_t i, bool) { return x[i]; }
__device__ inline float loadX(const uint16_t *x, int64_t i, bool bf16) {
  return bf16 ? bf16ToFloat(x[i]) : halfToFloat(x[i]);
}

/// The end of a column sum by a Columns x Slices block: thread (col,
/// slice) brings its slice's sums of column col, the slices are added in
/// slice order, and thread (col, 0) passes them to store(scale, bias) when
/// its column is `inRange`. Barriers before and after, so that a loop may
/// call it again.
template <int Slices, int Columns, typename Store>
__device__ void addSlices(double accScale, double accBias, bool inRange,
                          double (&partScale)[Slices][Columns],
                          double (&partBias)[Slices][Columns], Store store) {
  partScale[threadIdx.y][threadIdx.x] = accScale;
  partBias[threadIdx.y][threadIdx.x] = accBias;
  __syncthreads();
  if (threadIdx.y == 0 && inRange) {
    double sumScale = 0.0, sumBias = 0.0;
    for (int s = 0; s < Slices; ++s) {
      sumScale += partScale[s][threadIdx.x];
      sumBias += partBias[s][threadIdx.x];
    }
    store(sumScale, sumBias);
  }
  __syncthreads();
}

/// dscale and dbias, or their partial sums over one chunk of rows: a block
/// of kColumns x kRowSlices threads per kColumns columns and chunk of
/// rowsPerChunk rows (blockIdx.y); thread (col, slice) sums the chunk's
/// rows slice, slice + kRowSlices, ..., then the slices are added in order.
/// With `partials`, chunk c's sums go to partials[(2c) * dim + j] (scale)
/// and [(2c + 1) * dim + j] (bias), which lnBackwardParamsSumKernel adds;
/// without, they are dscale and dbias. dy and x are float32 or
/// 16-bit.
template <typename G, typename X>
__global__ void lnBackwardParamsKernel(int64_t outer, int64_t dim,
                                       int64_t rowsPerChunk, const G *dy,
                                       const X *x, bool bf16,
                                       const float *mean, const float *invstd,
                                       float *dscale, float *dbias,
                                       double *partials) {
  __shared__ double partScale[kRowSlices][kColumns];
  __shared__ double partBias[kRowSlices][kColumns];
  const int64_t blocks = (dim + kColumns - 1) / kColumns;
  const int64_t first = blockIdx.y * rowsPerChunk;
  const int64_t last =
      first + rowsPerChunk < outer ? first + rowsPerChunk : outer;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t j = b * kColumns + threadIdx.x;
    double accScale = 0.0, accBias = 0.0;
    if (j < dim) {
      for (int64_t row = first + threadIdx.y; row < last; row += kRowSlices) {
        float g = loadX(dy, row * dim + j, bf16);
        float xhat = (loadX(x, row * dim + j, bf16) - mean[row]) * invstd[row];
        accScale += static_cast<double>(g) * xhat;
        accBias += g;
      }
    }
    addSlices(accScale, accBias, j < dim, partScale, partBias,
              [&](double sumScale, double sumBias) {
                if (partials) {
                  partials[2 * blockIdx.y * dim + j] = sumScale;
                  partials[(2 * blockIdx.y + 1) * dim + j] = sumBias;
                } else {
                  dscale[j] = static_cast<float>(sumScale);
                  if (dbias)
                    dbias[j] = static_cast<float>(sumBias);
                }
              });
  }
}

/// dscale and dbias from `chunks` partial sums (partials[(2c) * dim + j]
/// and [(2c + 1) * dim + j] for chunk c), by kSumColumns x kSumSlices
/// blocks: thread (col, slice) adds chunks slice, slice + kSumSlices, ...,
/// then the slices are added in order. Hundreds of chunks (the summing dx
/// kernel's blocks) are read by many threads at once, not walked by one
/// thread a column.
__global__ void lnBackwardParamsSumKernel(int64_t dim, int64_t chunks,
                                          const double *partials,
                                          float *dscale, float *dbias) {
  __shared__ double partScale[kSumSlices][kSumColumns];
  __shared__ double partBias[kSumSlices][kSumColumns];
  const int64_t blocks = (dim + kSumColumns - 1) / kSumColumns;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t j = b * kSumColumns + threadIdx.x;
    double accScale = 0.0, accBias = 0.0;
    if (j < dim) {
      for (int64_t c = threadIdx.y; c < chunks; c += kSumSlices) {
        accScale += partials[2 * c * dim + j];
        accBias += partials[(2 * c + 1) * dim + j];
      }
    }
    addSlices(accScale, accBias, j < dim, partScale, partBias,
              [&](double sumScale, double sumBias) {
                dscale[j] = static_cast<float>(sumScale);
                if (dbias)
                  dbias[j] = static_cast<float>(sumBias);
              });
  }
}

/// A LayerNorm row's two gradient sums (of dy * scale, and of that times
/// xhat), reduced together: one blockReduce adds each by the tree two
/// would, with half the barriers.
struct RowSums {
  double g, gXhat;
};
__device__ inline RowSums operator+(RowSums a, RowSums b) {
  return {a.g + b.g, a.gXhat + b.gXhat};
}
__device__ inline RowSums shuffleXor(RowSums value, int offset) {
  return {__shfl_xor_sync(0xffffffffu, value.g, offset),
          __shfl_xor_sync(0xffffffffu, value.gXhat, offset)};
}

/// dx, a block per row (rows blockIdx.x, blockIdx.x + gridDim.x, ...).
/// `held` (rowHeldBy for every row pointer, the block's threads and Held
/// vectors a thread) keeps the row's dy * scale and xhat in registers, as
/// layerNormRow; otherwise the second pass reads the row again. With Sums
/// (for rows held only: `held` must be true), the block also sums dy * xhat
/// and dy over its rows for each of its threads' columns (in double) and
/// leaves the sums at partials[(2b) * dim + j] (scale) and [(2b + 1) * dim
/// + j] (bias), b = blockIdx.x, which lnBackwardParamsSumKernel adds in
/// block order: dscale and dbias without a second read of dy and x. A
/// thread of the summing kernel holds one vector (its accumulators take
/// registers: with two, ptxas gave it 82 on sm_90, two blocks of 256
/// threads an SM). A block reads a held row's vectors one row ahead
/// (HeldRowInputs), so that they are on their way while it reduces the
/// row before: a block otherwise waits for its row's loads, then for its
/// reduction, with nothing in flight.
template <typename G, typename X, int Held> struct HeldRowInputs {
  cuda::StoredVector<G> g[Held];
  cuda::StoredVector<X> x[Held];
  cuda::StoredVector<float> residual[Held];
  float mean, invstd;

  /// Starts the loads of `row` (the residual's only with acc).
  __device__ void load(int64_t row, int64_t dim, const G *dy, const X *xs,
                       const float *acc, const float *means,
                       const float *invstds) {
    cuda::forEachHeld<Held>(dim, [&](int h, int64_t j) {
      g[h] = cuda::loadStored(dy + row * dim + j);
      x[h] = cuda::loadStored(xs + row * dim + j);
      if (acc)
        residual[h] = cuda::loadStored(acc + row * dim + j);
    });
    mean = means[row];
    invstd = invstds[row];
  }
};

template <typename G, typename X, int Held, bool Sums>
__global__ void lnBackwardDxKernel(int64_t outer, int64_t dim, const G *dy,
                                   const X *x, bool bf16, const float *scale,
                                   const float *mean, const float *invstd,
                                   float *dx, const float *acc, uint16_t *dx16,
                                   bool held, double *partials) {
  using cuda::kRowVector;
  __shared__ RowSums scratch[kReduceWarps];
  double colScale[Held][kRowVector] = {}, colBias[Held][kRowVector] = {};
  HeldRowInputs<G, X, Held> next = {}, in = {};
  if (held && blockIdx.x < outer)
    next.load(blockIdx.x, dim, dy, x, acc, mean, invstd);
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const G *grad = dy + row * dim;
    const X *src = x + row * dim;
    float *dst = dx + row * dim;
    const float *add = acc ? acc + row * dim : nullptr;
    uint16_t *copy = dx16 ? dx16 + row * dim : nullptr;
    float rowMean, inv;
    if (held) {
      // This row's inputs, loaded last time round; the next row's loads
      // go out now and are widened only there.
      in = next;
      if (row + gridDim.x < outer)
        next.load(row + gridDim.x, dim, dy, x, acc, mean, invstd);
      rowMean = in.mean, inv = in.invstd;
    } else {
      rowMean = mean[row], inv = invstd[row];
    }
    float g[Held][kRowVector], xhat[Held][kRowVector];
    double sumG = 0.0, sumGXhat = 0.0;
    if (held) {
      cuda::forEachHeld<Held>(dim, [&](int h, int64_t j) {
        float gamma[kRowVector];
        cuda::widenVector(in.g[h], bf16, g[h]);
        cuda::widenVector(in.x[h], bf16, xhat[h]);
        cuda::loadVector(scale + j, bf16, gamma);
        for (int e = 0; e < kRowVector; ++e) {
          xhat[h][e] = (xhat[h][e] - rowMean) * inv;
          if (Sums) {
            colScale[h][e] += static_cast<double>(g[h][e]) * xhat[h][e];
            colBias[h][e] += g[h][e];
          }
          g[h][e] *= gamma[e];
          sumG += g[h][e];
          sumGXhat += static_cast<double>(g[h][e]) * xhat[h][e];
        }
      });
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        float gj = loadX(grad, j, bf16) * scale[j];
        float xhatj = (loadX(src, j, bf16) - rowMean) * inv;
        sumG += gj;
        sumGXhat += static_cast<double>(gj) * xhatj;
      }
    }
    const RowSums rowSums = blockSum(RowSums{sumG, sumGXhat}, scratch);
    const NormBackwardFactors f =
        normBackwardFactors(rowSums.g, rowSums.gXhat, dim, inv);
    if (held) {
      cuda::forEachHeld<Held>(dim, [&](int h, int64_t j) {
        float d[kRowVector], residual[kRowVector] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (add)
          cuda::widenVector(in.residual[h], bf16, residual);
        for (int e = 0; e < kRowVector; ++e) {
          d[e] = normBackwardElement(g[h][e], xhat[h][e], f);
          d[e] = add ? d[e] + residual[e] : d[e];
        }
        cuda::storeVector(dst + j, bf16, d);
        // The 16-bit copy (its format is x's).
        if (copy)
          cuda::storeVector(copy + j, bf16, d);
      });
      continue;
    }
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      float d = normBackwardElement(loadX(grad, j, bf16) * scale[j],
                                    (loadX(src, j, bf16) - rowMean) * inv, f);
      d = add ? d + add[j] : d;
      dst[j] = d;
      if (copy)
        copy[j] = bf16 ? floatToBf16(d) : floatToHalf(d);
    }
  }
  if (Sums) {
    double *sums = partials + 2 * blockIdx.x * dim;
    cuda::forEachHeld<Held>(dim, [&](int h, int64_t j) {
      for (int e = 0; e < kRowVector; ++e) {
        sums[j + e] = colScale[h][e];
        sums[dim + j + e] = colBias[h][e];
      }
    });
  }
}

/// Threads per LayerNorm row: a power of two (blockSum needs one) giving
/// each thread about four elements, between a warp and kReduceThreads.
unsigned rowThreads(int64_t dim) { return cuda::normRowThreads(dim); }

dim3 channelGrid(int64_t n, int64_t c, int64_t inner, int v) {
  return dim3(channelParts(n, c, inner, v),
              static_cast<unsigned>(std::min(c, kMaxGridY)));
}

/// inner / v as the Divisor the kernels above split flat vector numbers by.
Divisor vectorDivisor(int64_t n, int64_t inner, int v) {
  return makeDivisor(inner / v, n * inner / v);
}

/// The blocks of `threads` threads running `kernel` that the GPU holds at
/// once (its SMs times the blocks an SM holds, at least one).
template <typename Kernel>
int64_t residentBlocks(Context &ctx, Kernel kernel, unsigned threads) {
  int perSm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads,
                                                    0) != cudaSuccess) {
    cudaGetLastError(); // not a failure of the step: assume one a SM
    perSm = 1;
  }
  return std::max<int64_t>(1, int64_t(ctx.smCount) * std::max(perSm, 1));
}

/// bnReduceParts for `kernel` (the partial sums' kernel) where the
/// context's scratch (cuBLASLt's workspace, free between GEMMs in stream
/// order) holds `perPart` doubles a part of each channel, else 1.
template <typename Kernel>
int64_t reduceParts(Context &ctx, Kernel kernel, int64_t n, int64_t c,
                    int64_t inner, int v, int64_t perPart) {
  const int64_t parts = bnReduceParts(
      n, c, inner, v, residentBlocks(ctx, kernel, kReduceThreads));
  if (parts <= 1 || !ctx.ltWorkspace ||
      static_cast<size_t>(perPart * c * parts) * sizeof(double) >
          ctx.ltWorkspaceBytes)
    return 1;
  return parts;
}

} // namespace

namespace {

template <typename X, typename Y>
void batchNormForwardAs(Context &ctx, int64_t n, int64_t c, int64_t inner,
                        const X *x, bool bf16, const float *scale,
                        const float *bias, float *runningMean,
                        float *runningVar, float eps, float momentum, Y *y,
                        float *savedMean, float *savedInvstd,
                        NormActivation act, uint16_t *x16, const Y *residual) {
  withVector(channelVector(inner, x, y, x16, residual), [&](auto vector) {
    constexpr int V = decltype(vector)::value;
    const Divisor byVectors = vectorDivisor(n, inner, V);
    const int64_t parts =
        reduceParts(ctx, bnPartialStatsKernel<V, X>, n, c, inner, V, 2);
    if (parts > 1) {
      double *partials = static_cast<double *>(ctx.ltWorkspace);
      const dim3 grid(static_cast<unsigned>(parts),
                      static_cast<unsigned>(std::min(c, kMaxGridY)));
      bnPartialStatsKernel<V><<<grid, kReduceThreads, 0, ctx.stream>>>(
          n, c, inner, byVectors, x, bf16, partials);
      checkLaunch(ctx, "bnPartialStatsKernel");
      bnFinishStatsKernel<<<cuda::gridFor(c), cuda::kBlock, 0, ctx.stream>>>(
          n, c, inner, parts, x, bf16, partials, runningMean, runningVar, eps,
          momentum, savedMean, savedInvstd);
      checkLaunch(ctx, "bnFinishStatsKernel");
    } else {
      bnTrainStatsKernel<V>
          <<<cuda::gridFor(c, 1), kReduceThreads, 0, ctx.stream>>>(
              n, c, inner, byVectors, x, bf16, runningMean, runningVar, eps,
              momentum, savedMean, savedInvstd);
      checkLaunch(ctx, "bnTrainStatsKernel");
    }
    if (n * inner == 0)
      return;
    bnApplyKernel<V>
        <<<channelGrid(n, c, inner, V), cuda::kBlock, 0, ctx.stream>>>(
            n, c, inner, byVectors, x, bf16, scale, bias, savedMean,
            savedInvstd, nullptr, eps, y, act, x16, residual);
    checkLaunch(ctx, "bnApplyKernel");
  });
}

template <typename G, typename X, typename DX>
void batchNormBackwardAs(Context &ctx, int64_t n, int64_t c, int64_t inner,
                         const G *dy, const X *x, bool bf16, const float *scale,
                         const float *savedMean, const float *savedInvstd,
                         DX *dx, float *dscale, float *dbias, const X *actOut,
                         NormActivation act) {
  withVector(channelVector(inner, dy, x, dx, actOut), [&](auto vector) {
    constexpr int V = decltype(vector)::value;
    const Divisor byVectors = vectorDivisor(n, inner, V);
    const int64_t parts =
        reduceParts(ctx, bnPartialBackwardKernel<V, G, X>, n, c, inner, V, 2);
    if (parts > 1) {
      double *partials = static_cast<double *>(ctx.ltWorkspace);
      bnPartialBackwardKernel<V>
          <<<dim3(static_cast<unsigned>(parts),
                  static_cast<unsigned>(std::min(c, kMaxGridY))),
             kReduceThreads, 0, ctx.stream>>>(n, c, inner, byVectors, dy, x,
                                              bf16, savedMean, savedInvstd,
                                              actOut, act, partials);
      checkLaunch(ctx, "bnPartialBackwardKernel");
      bnFinishBackwardKernel<<<cuda::gridFor(c), cuda::kBlock, 0, ctx.stream>>>(
          c, parts, partials, dscale, dbias);
      checkLaunch(ctx, "bnFinishBackwardKernel");
    } else {
      bnBackwardReduceKernel<V>
          <<<cuda::gridFor(c, 1), kReduceThreads, 0, ctx.stream>>>(
              n, c, inner, byVectors, dy, x, bf16, savedMean, savedInvstd,
              dscale, dbias, actOut, act);
      checkLaunch(ctx, "bnBackwardReduceKernel");
    }
    if (n * inner == 0)
      return;
    bnBackwardApplyKernel<V>
        <<<channelGrid(n, c, inner, V), cuda::kBlock, 0, ctx.stream>>>(
            n, c, inner, byVectors, dy, x, bf16, scale, savedMean, savedInvstd,
            dscale, dbias, dx, actOut, act);
    checkLaunch(ctx, "bnBackwardApplyKernel");
  });
}

} // namespace

#include "BatchNormEntryPoints.inc"

void batchNormInferenceForward(Context &ctx, int64_t n, int64_t c,
                               int64_t inner, const float *x,
                               const float *scale, const float *bias,
                               const float *mean, const float *var, float eps,
                               float *y) {
  if (c <= 0 || n * inner == 0)
    return;
  withVector(channelVector(inner, x, y), [&](auto vector) {
    constexpr int V = decltype(vector)::value;
    bnApplyKernel<V>
        <<<channelGrid(n, c, inner, V), cuda::kBlock, 0, ctx.stream>>>(
            n, c, inner, vectorDivisor(n, inner, V), x, false, scale, bias,
            mean, nullptr, var, eps, y, NormActivation{}, nullptr,
            static_cast<const float *>(nullptr));
    checkLaunch(ctx, "bnApplyKernel");
  });
}

void layerNormForward(Context &ctx, int64_t outer, int64_t dim, const float *x,
                      const float *scale, const float *bias, float eps,
                      float *y, float *mean, float *invstd) {
  if (outer <= 0)
    return;
  lnForwardKernel<<<cuda::gridFor(outer, 1), rowThreads(dim), 0, ctx.stream>>>(
      outer, dim, x, scale, bias, eps, y, mean, invstd, false);
  checkLaunch(ctx, "lnForwardKernel");
}

void layerNormForward16(Context &ctx, Storage16 storage, int64_t outer,
                        int64_t dim, const float *x, const float *scale,
                        const float *bias, float eps, uint16_t *y, float *mean,
                        float *invstd) {
  if (outer <= 0)
    return;
  lnForwardKernel<<<cuda::gridFor(outer, 1), rowThreads(dim), 0, ctx.stream>>>(
      outer, dim, x, scale, bias, eps, y, mean, invstd,
      storage == Storage16::Bf16);
  checkLaunch(ctx, "lnForwardKernel");
}

namespace {

template <typename G, typename X>
void layerNormBackwardOn(Context &ctx, int64_t outer, int64_t dim,
                         const G *dy, const X *x, bool bf16,
                         const float *scale, const float *mean,
                         const float *invstd, float *dx, float *dscale,
                         float *dbias, const float *acc,
                         uint16_t *dx16 = nullptr) {
  if (dim <= 0)
    return;
  const unsigned threads = rowThreads(dim);
  auto heldBy = [&](int vectors) {
    return cuda::rowHeldBy(dim, threads, dy, vectors) &&
           cuda::rowHeldBy(dim, threads, x, vectors) &&
           cuda::rowHeldBy(dim, threads, scale, vectors) &&
           cuda::rowHeldBy(dim, threads, dx, vectors) &&
           (!acc || cuda::rowHeldBy(dim, threads, acc, vectors)) &&
           (!dx16 || cuda::rowHeldBy(dim, threads, dx16, vectors));
  };
  // Rows a thread holds one vector of (up to 4 * kNormRowThreads = 2048
  // columns): one pass forms dx and the blocks' partial column sums. Its
  // grid is the blocks the GPU holds at once (each block walks rows
  // `blocks` apart), so that the partial sums, which the context's scratch
  // holds (cuBLASLt's workspace, free between GEMMs in stream order), are
  // few: for GPT-2's 8192 rows of 768 about 5 MB on an H200 (written and
  // read once), against the 25 MB of 16-bit dy and x that the separate
  // column sums read.
  const auto summing = lnBackwardDxKernel<G, X, 1, true>;
  const int64_t fusedBlocks =
      heldBy(1) && outer > 0 && ctx.ltWorkspace
          ? std::min({outer, residentBlocks(ctx, summing, threads),
                      static_cast<int64_t>(ctx.ltWorkspaceBytes /
                                           (2 * dim * sizeof(double)))})
          : 0;
  if (fusedBlocks >= 1) {
    double *partials = static_cast<double *>(ctx.ltWorkspace);
    summing<<<static_cast<unsigned>(fusedBlocks), threads, 0, ctx.stream>>>(
        outer, dim, dy, x, bf16, scale, mean, invstd, dx, acc, dx16, true,
        partials);
    checkLaunch(ctx, "lnBackwardDxKernel");
    lnBackwardParamsSumKernel<<<cuda::gridFor(dim, kSumColumns),
                                dim3(kSumColumns, kSumSlices), 0, ctx.stream>>>(
        dim, fusedBlocks, partials, dscale, dbias);
    checkLaunch(ctx, "lnBackwardParamsSumKernel");
    return;
  }
  // Otherwise the column sums run first (they read dy, which dx may
  // overwrite). Few columns (GPT-2: 768, 24 blocks) would leave most of
  // the GPU idle while each thread walks thousands of rows: the rows are
  // split into chunks of at least kMinChunkRows, enough for about
  // kWantedBlocks blocks, whose partial sums wait in the context's
  // scratch.
  constexpr int64_t kWantedBlocks = 512, kMinChunkRows = 64;
  const int64_t columnBlocks = (dim + kColumns - 1) / kColumns;
  int64_t chunks = 1;
  if (ctx.ltWorkspace) {
    chunks = std::min({kWantedBlocks / columnBlocks,
                       (outer + kMinChunkRows - 1) / kMinChunkRows,
                       kMaxGridY,
                       static_cast<int64_t>(ctx.ltWorkspaceBytes /
                                            (2 * dim * sizeof(double)))});
    chunks = std::max<int64_t>(chunks, 1);
  }
  const int64_t rowsPerChunk = std::max<int64_t>(1, (outer + chunks - 1) / chunks);
  chunks = std::max<int64_t>(1, (outer + rowsPerChunk - 1) / rowsPerChunk);
  double *partials =
      chunks > 1 ? static_cast<double *>(ctx.ltWorkspace) : nullptr;
  lnBackwardParamsKernel<G, X>
      <<<dim3(cuda::gridFor(dim, kColumns), static_cast<unsigned>(chunks)),
         dim3(kColumns, kRowSlices), 0, ctx.stream>>>(
          outer, dim, rowsPerChunk, dy, x, bf16, mean, invstd, dscale, dbias,
          partials);
  checkLaunch(ctx, "lnBackwardParamsKernel");
  if (partials) {
    lnBackwardParamsSumKernel<<<cuda::gridFor(dim, kSumColumns),
                                dim3(kSumColumns, kSumSlices), 0, ctx.stream>>>(
        dim, chunks, partials, dscale, dbias);
    checkLaunch(ctx, "lnBackwardParamsSumKernel");
  }
  if (outer <= 0)
    return;
  lnBackwardDxKernel<G, X, cuda::kHeldVectors, false>
      <<<cuda::gridFor(outer, 1), threads, 0, ctx.stream>>>(
          outer, dim, dy, x, bf16, scale, mean, invstd, dx, acc, dx16,
          heldBy(cuda::kHeldVectors), nullptr);
  checkLaunch(ctx, "lnBackwardDxKernel");
}

} // namespace

void layerNormBackward(Context &ctx, int64_t outer, int64_t dim,
                       const float *dy, const float *x, const float *scale,
                       const float *mean, const float *invstd, float *dx,
                       float *dscale, float *dbias, const float *acc) {
  layerNormBackwardOn(ctx, outer, dim, dy, x, false, scale, mean, invstd, dx,
                      dscale, dbias, acc);
}

void layerNormBackward16(Context &ctx, Storage16 storage, int64_t outer,
                         int64_t dim, const float *dy, const uint16_t *x,
                         const float *scale, const float *mean,
                         const float *invstd, float *dx, float *dscale,
                         float *dbias, const float *acc, uint16_t *dx16) {
  layerNormBackwardOn(ctx, outer, dim, dy, x, storage == Storage16::Bf16,
                      scale, mean, invstd, dx, dscale, dbias, acc, dx16);
}

void layerNormBackward16(Context &ctx, Storage16 storage, int64_t outer,
                         int64_t dim, const uint16_t *dy, const uint16_t *x,
                         const float *scale, const float *mean,
                         const float *invstd, float *dx, float *dscale,
                         float *dbias, const float *acc, uint16_t *dx16) {
  layerNormBackwardOn(ctx, outer, dim, dy, x, storage == Storage16::Bf16,
                      scale, mean, invstd, dx, dscale, dbias, acc, dx16);
}

} // namespace mtc::rt
