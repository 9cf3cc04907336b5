//===- Norm.cpp - Batch and layer normalization ---------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Statistics are two-pass (mean, then the sum of squared deviations from
// it) and accumulate in double: one pass of sum(x^2) - mean^2 cancels
// catastrophically when |mean| >> std, and a float running sum over a
// channel of a large batch drifts by more than the 1e-4 that gradients and
// running statistics must match PyTorch to. Threads split channels (batch
// norm), rows (layer norm forward and dx) or column blocks (layer norm
// dscale/dbias), never one reduction, so results do not depend on the
// thread count.
//
// The backward passes reduce before they write dx, so dx may share storage
// with dy.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mtc::rt {

namespace {

/// Sum of term(j) for j in [0, count), in double. Four interleaved
/// accumulators, combined in a fixed order: one chain of dependent additions
/// would wait out the adder's latency at every element.
constexpr int64_t kMaxColumnBlock = 1024;
int64_t columnBlock(int64_t dim) {
#ifdef _OPENMP
  int64_t threads = std::max(1, omp_get_max_threads());
#else
  int64_t threads = 1;
#endif
  int64_t perThread = (dim + threads - 1) / threads;
  return std::clamp<int64_t>((perThread + 15) / 16 * 16, 256, kMaxColumnBlock);
}

} // namespace

namespace {

/// The activation of kind K (known at compile time, so the loops keep no
/// branch on it and their selects vectorize), as activate() computes it.
template <NormActivationKind K>
inline float activateAs(float v, const NormActivation &a) {
  if constexpr (K == NormActivationKind::Relu)
    return v > 0.0f ? v : 0.0f;
  else if constexpr (K == NormActivationKind::Clip)
    return v < a.lo ? a.lo : (v > a.hi ? a.hi : v);
  else
    return v;
}

/// `keep ? v : 0.0f` through the bits, which compiles to no branch (a
/// branch on the activation's output mispredicts half the time).
inline float keepOrZero(bool keep, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits &= 0u - static_cast<uint32_t>(keep);
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

/// dy through the activation of kind K from its output y, as
/// activationGrad() computes it.
template <NormActivationKind K>
inline float activationGradAs(float dy, float y, const NormActivation &a) {
  if constexpr (K == NormActivationKind::Relu)
    return keepOrZero(y > 0.0f, dy);
  else if constexpr (K == NormActivationKind::Clip)
    return keepOrZero((y > a.lo) & (y < a.hi), dy);
  else
    return dy;
}

template <NormActivationKind K>
using ActivationKind = std::integral_constant<NormActivationKind, K>;

/// Calls body(ActivationKind<K>{}) for the activation's kind K.
template <typename Body>
void withActivation(const NormActivation &a, Body body) {
  switch (a.kind) {
  case NormActivationKind::Relu:
    return body(ActivationKind<NormActivationKind::Relu>{});
  case NormActivationKind::Clip:
    return body(ActivationKind<NormActivationKind::Clip>{});
  case NormActivationKind::None:
    break;
  }
  body(ActivationKind<NormActivationKind::None>{});
}

} // namespace

namespace {

/// The batch norm loops' tasks take kMaxChannelBlock channels at most, and
/// as few as cover about kNormTaskElements elements: on small feature maps
/// (a few elements a row) a task per channel or per row would cost more in
/// loop and thread overhead than in arithmetic.
constexpr int64_t kMaxChannelBlock = 64;
constexpr int64_t kNormTaskElements = 4096;

/// Channels per task for channels of n rows of `inner` elements.
int64_t channelBlock(int64_t n, int64_t inner) {
  const int64_t perChannel = std::max<int64_t>(1, n * inner);
  return std::clamp<int64_t>(kNormTaskElements / perChannel, 1,
                             kMaxChannelBlock);
}

/// body(first, last) over the channel blocks of [0, c), across threads
/// when `parallel`.
template <typename Body>
void forEachChannelBlock(int64_t c, int64_t block, bool parallel, Body &&body) {
  cpu::parallelFor(0, (c + block - 1) / block, parallel, [&](int64_t b) {
    body(b * block, std::min(c, (b + 1) * block));
  });
}

/// body(row, ch) over the rows [0, n * c) in memory order, runs of rows
/// covering about kNormTaskElements elements to a task.
template <typename Body>
void forEachRow(int64_t n, int64_t c, int64_t inner, bool parallel,
                Body &&body) {
  const int64_t rows = n * c;
  const int64_t run =
      std::max<int64_t>(1, kNormTaskElements / std::max<int64_t>(1, inner));
  cpu::parallelFor(0, (rows + run - 1) / run, parallel, [&](int64_t t) {
    const int64_t first = t * run, last = std::min(rows, first + run);
    int64_t ch = first % c;
    for (int64_t row = first; row < last; ++row) {
      body(row, ch);
      ch = ch + 1 == c ? 0 : ch + 1;
    }
  });
}

/// body(e, ch0, ch1) over the elements [0, n * c) of 1x1 feature maps
/// (rows of one element) in memory order: elements e.. are channels
/// [ch0, ch1) of one image, a vector loop's worth; runs covering about
/// kNormTaskElements elements to a task.
template <typename Body>
void forEachChannelRun(int64_t n, int64_t c, bool parallel, Body &&body) {
  const int64_t size = n * c;
  cpu::parallelFor(0, (size + kNormTaskElements - 1) / kNormTaskElements,
                   parallel, [&](int64_t t) {
                     const int64_t last =
                         std::min(size, (t + 1) * kNormTaskElements);
                     int64_t e = t * kNormTaskElements, ch = e % c;
                     while (e < last) {
                       const int64_t end = std::min(c, ch + (last - e));
                       body(e, ch, end);
                       e += end - ch;
                       ch = 0;
                     }
                   });
}

} // namespace

namespace {

/// batchNormTrainForward16 with x stored as XT and y as YT (float, or
/// uint16_t in the format `bf16` names).
template <typename XT, typename YT>
void batchNormForwardAs(Context &, int64_t n, int64_t c, int64_t inner,
                        const XT *x, bool bf16, const float *scale,
                        const float *bias, float *runningMean,
                        float *runningVar, float eps, float momentum, YT *y,
                        float *savedMean, float *savedInvstd,
                        NormActivation act, uint16_t *x16, const YT *residual) {
  const int64_t m = n * inner;
  const bool parallel = m * c >= cpu::kParallelGrain;
  withActivation(act, [&](auto kind) {
    constexpr NormActivationKind K = decltype(kind)::value;
    // Each channel's sums run over its images in order, a row's elements
    // in sumTerms's order; a task takes a block of channels image by image.
    forEachChannelBlock(
        c, channelBlock(n, inner), parallel, [&](int64_t c0, int64_t c1) {
          double sum[kMaxChannelBlock] = {}, mean[kMaxChannelBlock],
                 squaredDevSum[kMaxChannelBlock] = {};
          // Rows of one element: the same sums (a one-term sumTerms is the
          // term), as vector loops over the block's channels.
          const int64_t width = c1 - c0;
          if (inner == 1) {
            for (int64_t img = 0; img < n; ++img) {
              const XT *src = x + img * c + c0;
#pragma omp simd
              for (int64_t k = 0; k < width; ++k)
                sum[k] += storedToFloat(src[k], bf16);
            }
          } else {
            for (int64_t img = 0; img < n; ++img)
              for (int64_t ch = c0; ch < c1; ++ch) {
                const XT *src = x + (img * c + ch) * inner;
                sum[ch - c0] += cpu::sumTerms(inner, [&](int64_t j) {
                  return storedToFloat(src[j], bf16);
                });
              }
          }
          // An empty batch has no statistics; keep the running ones and let
          // invstd be that of a zero variance.
          for (int64_t ch = c0; ch < c1; ++ch)
            mean[ch - c0] = m > 0 ? sum[ch - c0] / static_cast<double>(m) : 0.0;
          if (inner == 1) {
            for (int64_t img = 0; img < n; ++img) {
              const XT *src = x + img * c + c0;
#pragma omp simd
              for (int64_t k = 0; k < width; ++k) {
                const double dev = storedToFloat(src[k], bf16) - mean[k];
                squaredDevSum[k] += dev * dev;
              }
            }
          } else {
            for (int64_t img = 0; img < n; ++img)
              for (int64_t ch = c0; ch < c1; ++ch) {
                const XT *src = x + (img * c + ch) * inner;
                const double mu = mean[ch - c0];
                squaredDevSum[ch - c0] += cpu::sumTerms(inner, [&](int64_t j) {
                  double dev = storedToFloat(src[j], bf16) - mu;
                  return dev * dev;
                });
              }
          }
          for (int64_t ch = c0; ch < c1; ++ch) {
            const double sq = squaredDevSum[ch - c0];
            savedMean[ch] = static_cast<float>(mean[ch - c0]);
            savedInvstd[ch] =
                inverseStd(m > 0 ? sq / static_cast<double>(m) : 0.0, eps);
            if (m > 0 && runningMean && runningVar)
              updateBatchNormRunningStats(runningMean[ch], runningVar[ch],
                                          mean[ch - c0], sq, m, momentum);
          }
        });
    // The normalization in a second pass over the rows in memory order, so
    // each thread writes the contiguous block of images its share of a
    // following elementwise loop or convolution reads. x's 16-bit copy is
    // written as x is read (before y, which may share x's storage).
    const NormActivation a = act;
    auto result = [&](float normalized, int64_t at) {
      return activateAs<K>(
          residual ? addResidual(normalized, residual, at, bf16) : normalized,
          a);
    };
    if (inner == 1) {
      forEachChannelRun(
          n, c, parallel, [&](int64_t e, int64_t ch0, int64_t ch1) {
            const XT *src = x + e - ch0;
            YT *dst = y + e - ch0;
            if (x16) {
              uint16_t *copy = x16 + e - ch0;
#pragma omp simd
              for (int64_t ch = ch0; ch < ch1; ++ch)
                storeFloat(copy + ch, storedToFloat(src[ch], bf16), bf16);
            }
#pragma omp simd
            for (int64_t ch = ch0; ch < ch1; ++ch)
              storeFloat(dst + ch,
                         result(normalizeElement(storedToFloat(src[ch], bf16),
                                                 savedMean[ch], savedInvstd[ch],
                                                 scale[ch], bias[ch]),
                                e - ch0 + ch),
                         bf16);
          });
      return;
    }
    forEachRow(n, c, inner, parallel, [&](int64_t row, int64_t ch) {
      const float meanF = savedMean[ch], invstd = savedInvstd[ch];
      const float gamma = scale[ch], beta = bias[ch];
      const XT *src = x + row * inner;
      YT *dst = y + row * inner;
      if (x16) {
        uint16_t *copy = x16 + row * inner;
#pragma omp simd
        for (int64_t j = 0; j < inner; ++j)
          storeFloat(copy + j, storedToFloat(src[j], bf16), bf16);
      }
#pragma omp simd
      for (int64_t j = 0; j < inner; ++j)
        storeFloat(dst + j,
                   result(normalizeElement(storedToFloat(src[j], bf16), meanF,
                                           invstd, gamma, beta),
                          row * inner + j),
                   bf16);
    });
  });
}

/// batchNormTrainBackward16 with dy stored as GT (float32, or 16-bit like
/// x), x and actOut as XT and dx as DXT.
template <typename GT, typename XT, typename DXT>
void batchNormBackwardAs(Context &, int64_t n, int64_t c, int64_t inner,
                         const GT *dy, const XT *x, bool bf16,
                         const float *scale, const float *savedMean,
                         const float *savedInvstd, DXT *dx, float *dscale,
                         float *dbias, const XT *actOut, NormActivation act) {
  const int64_t m = n * inner;
  const bool parallel = m * c >= cpu::kParallelGrain;
  if (!actOut)
    act = NormActivation{};
  withActivation(act, [&](auto kind) {
    constexpr NormActivationKind K = decltype(kind)::value;
    const NormActivation a = act;
    // With an activation and a float32 dx, its gradient goes into dx
    // first, in a pass that vectorizes, as its own kernel would write it;
    // the two passes below read it there. Element j depends on dy[j] and
    // actOut[j] alone, so dx may still share storage with a float32 dy. A
    // 16-bit dx cannot hold it: both passes form it from dy and actOut.
    constexpr bool kFormedInDx =
        K != NormActivationKind::None && std::is_same_v<DXT, float>;
    auto gradientAt = [&](int64_t i) {
      float g;
      if constexpr (kFormedInDx)
        g = dx[i];
      else if constexpr (K == NormActivationKind::None)
        g = storedToFloat(dy[i], bf16);
      else
        g = activationGradAs<K>(storedToFloat(dy[i], bf16),
                                storedToFloat(actOut[i], bf16), a);
      return g;
    };
    forEachChannelBlock(
        c, channelBlock(n, inner), parallel, [&](int64_t c0, int64_t c1) {
          if constexpr (kFormedInDx) {
            for (int64_t img = 0; img < n; ++img) {
              const int64_t base = (img * c + c0) * inner,
                            count = (c1 - c0) * inner;
#pragma omp simd
              for (int64_t j = 0; j < count; ++j)
                dx[base + j] = activationGradAs<K>(
                    storedToFloat(dy[base + j], bf16),
                    storedToFloat(actOut[base + j], bf16), a);
            }
          }
          // Each channel's sums over its images in order, both in one pass
          // over each row, in sumTerms's order.
          double sumDy[kMaxChannelBlock] = {}, sumDyXhat[kMaxChannelBlock] = {};
          const int64_t width = c1 - c0;
          // Rows of one element: the same sums, as vector loops over the
          // block's channels.
          if (inner == 1) {
            const float *mean = savedMean + c0, *invstd = savedInvstd + c0;
            for (int64_t img = 0; img < n; ++img) {
              const int64_t base = img * c + c0;
              const XT *src = x + base;
#pragma omp simd
              for (int64_t k = 0; k < width; ++k) {
                const float g = gradientAt(base + k);
                sumDy[k] += g;
                sumDyXhat[k] +=
                    static_cast<double>(g) *
                    ((storedToFloat(src[k], bf16) - mean[k]) * invstd[k]);
              }
            }
          }
          for (int64_t img = 0; inner != 1 && img < n; ++img)
            for (int64_t ch = c0; ch < c1; ++ch) {
              const int64_t base = (img * c + ch) * inner;
              const XT *src = x + base;
              const float mean = savedMean[ch], invstd = savedInvstd[ch];
              double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
              double b0 = 0.0, b1 = 0.0, b2 = 0.0, b3 = 0.0;
              auto add = [&](int64_t j, double &sa, double &sb) {
                const float g = gradientAt(base + j);
                sa += g;
                sb += static_cast<double>(g) *
                      ((storedToFloat(src[j], bf16) - mean) * invstd);
              };
              int64_t j = 0;
              for (; j + 4 <= inner; j += 4) {
                add(j, a0, b0);
                add(j + 1, a1, b1);
                add(j + 2, a2, b2);
                add(j + 3, a3, b3);
              }
              for (; j < inner; ++j)
                add(j, a0, b0);
              sumDy[ch - c0] += (a0 + a1) + (a2 + a3);
              sumDyXhat[ch - c0] += (b0 + b1) + (b2 + b3);
            }
          NormBackwardFactors factors[kMaxChannelBlock];
          for (int64_t ch = c0; ch < c1; ++ch) {
            dbias[ch] = static_cast<float>(sumDy[ch - c0]);
            dscale[ch] = static_cast<float>(sumDyXhat[ch - c0]);
            // From the rounded sums, as the CUDA kernel (which reads them back
            // from dscale/dbias) does.
            factors[ch - c0] = normBackwardFactors(
                dbias[ch], dscale[ch], m,
                static_cast<double>(savedInvstd[ch]) * scale[ch]);
          }
          if (inner == 1) {
            // The factors by field, for a vector loop over the channels.
            float gradMean[kMaxChannelBlock], projMean[kMaxChannelBlock],
                gain[kMaxChannelBlock];
            for (int64_t k = 0; k < width; ++k) {
              gradMean[k] = factors[k].gradMean;
              projMean[k] = factors[k].projMean;
              gain[k] = factors[k].gain;
            }
            const float *mean = savedMean + c0, *invstd = savedInvstd + c0;
            for (int64_t img = 0; img < n; ++img) {
              const int64_t base = img * c + c0;
              const XT *src = x + base;
              DXT *dst = dx + base;
#pragma omp simd
              for (int64_t k = 0; k < width; ++k)
                storeFloat(
                    dst + k,
                    normBackwardElement(
                        gradientAt(base + k),
                        (storedToFloat(src[k], bf16) - mean[k]) * invstd[k],
                        NormBackwardFactors{gradMean[k], projMean[k], gain[k]}),
                    bf16);
            }
            return;
          }
          for (int64_t img = 0; img < n; ++img)
            for (int64_t ch = c0; ch < c1; ++ch) {
              const int64_t base = (img * c + ch) * inner;
              const XT *src = x + base;
              DXT *dst = dx + base;
              const float mean = savedMean[ch], invstd = savedInvstd[ch];
              const NormBackwardFactors f = factors[ch - c0];
#pragma omp simd
              for (int64_t j = 0; j < inner; ++j)
                storeFloat(dst + j,
                           normBackwardElement(
                               gradientAt(base + j),
                               (storedToFloat(src[j], bf16) - mean) * invstd,
                               f),
                           bf16);
            }
        });
  });
}

} // namespace

#include "BatchNormEntryPoints.inc"

void batchNormInferenceForward(Context &, int64_t n, int64_t c, int64_t inner,
                               const float *x, const float *scale,
                               const float *bias, const float *mean,
                               const float *var, float eps, float *y) {
  const bool parallel = n * c * inner >= cpu::kParallelGrain;
  cpu::parallelFor(0, n * c, parallel, [&](int64_t plane) {
    int64_t ch = plane % c;
    float invstd = inverseStd(var[ch], eps);
    const float *src = x + plane * inner;
    float *dst = y + plane * inner;
    for (int64_t j = 0; j < inner; ++j)
      dst[j] = normalizeElement(src[j], mean[ch], invstd, scale[ch], bias[ch]);
  });
}

namespace {

/// Layer norm forward storing each normalized value through `store(i, v)`
/// (i: the flat index).
template <typename Store>
void layerNormRows(int64_t outer, int64_t dim, const float *x,
                   const float *scale, const float *bias, float eps,
                   Store store, float *mean, float *invstd) {
  const bool parallel = outer * dim >= cpu::kParallelGrain;
  cpu::parallelFor(0, outer, parallel, [&](int64_t row) {
    cpu::layerNormRow(
        dim, x + row * dim, scale, bias, eps,
        [&](int64_t j, float v) { store(row * dim + j, v); },
        mean ? mean + row : nullptr, invstd ? invstd + row : nullptr);
  });
}

} // namespace

void layerNormForward(Context &, int64_t outer, int64_t dim, const float *x,
                      const float *scale, const float *bias, float eps,
                      float *y, float *mean, float *invstd) {
  layerNormRows(
      outer, dim, x, scale, bias, eps, [&](int64_t i, float v) { y[i] = v; },
      mean, invstd);
}

void layerNormForward16(Context &, Storage16 storage, int64_t outer,
                        int64_t dim, const float *x, const float *scale,
                        const float *bias, float eps, uint16_t *y, float *mean,
                        float *invstd) {
  if (storage == Storage16::Bf16)
    layerNormRows(
        outer, dim, x, scale, bias, eps,
        [&](int64_t i, float v) { y[i] = floatToBf16(v); }, mean, invstd);
  else
    layerNormRows(
        outer, dim, x, scale, bias, eps,
        [&](int64_t i, float v) { y[i] = floatToHalf(v); }, mean, invstd);
}

namespace {

/// dy[i] widened to float: float32, or 16-bit (bfloat16 when `bf16`).
inline float widenAt(const float *p, int64_t i, bool) { return p[i]; }
inline float widenAt(const uint16_t *p, int64_t i, bool bf16) {
  return bf16 ? bf16ToFloat(p[i]) : halfToFloat(p[i]);
}

/// layerNormBackward with x read through `xAt(row, j)` (float32 or 16-bit
/// storage widened exactly), dy float32 or stored in 16 bits (`bf16` or
/// float16, x's format), and dx also stored in 16 bits into dx16 when it is
/// non-null.
template <typename DY, typename XAt>
void layerNormBackwardRows(int64_t outer, int64_t dim, const DY *dy, XAt xAt,
                           const float *scale, const float *mean,
                           const float *invstd, float *dx, float *dscale,
                           float *dbias, const float *acc,
                           uint16_t *dx16 = nullptr, bool bf16 = false) {
  const bool parallel = outer * dim >= cpu::kParallelGrain;

  // dscale and dbias sum over rows: blocks of columns accumulate whole rows
  // at a time so that memory is read contiguously.
  const int64_t block = columnBlock(dim);
  const int64_t blocks = (dim + block - 1) / block;
  cpu::parallelFor(0, blocks, parallel, [&](int64_t b) {
    int64_t first = b * block;
    int64_t width = std::min(block, dim - first);
    double accScale[kMaxColumnBlock], accBias[kMaxColumnBlock];
    for (int64_t j = 0; j < width; ++j)
      accScale[j] = accBias[j] = 0.0;
    for (int64_t row = 0; row < outer; ++row) {
      const DY *grad = dy + row * dim + first;
      const float rowMean = mean[row], inv = invstd[row];
      for (int64_t j = 0; j < width; ++j) {
        float g = widenAt(grad, j, bf16);
        float xhat = (xAt(row, first + j) - rowMean) * inv;
        accScale[j] += static_cast<double>(g) * xhat;
        accBias[j] += g;
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dscale[first + j] = static_cast<float>(accScale[j]);
      if (dbias)
        dbias[first + j] = static_cast<float>(accBias[j]);
    }
  });

  cpu::parallelFor(0, outer, parallel, [&](int64_t row) {
    const DY *grad = dy + row * dim;
    float *dst = dx + row * dim;
    const float rowMean = mean[row], inv = invstd[row];
    auto g = [&](int64_t j) { return widenAt(grad, j, bf16) * scale[j]; };
    double sumG = cpu::sumTerms(dim, g);
    double sumGXhat = cpu::sumTerms(dim, [&](int64_t j) {
      return static_cast<double>(g(j)) * ((xAt(row, j) - rowMean) * inv);
    });
    NormBackwardFactors f = normBackwardFactors(sumG, sumGXhat, dim, inv);
    const float *add = acc ? acc + row * dim : nullptr;
    for (int64_t j = 0; j < dim; ++j) {
      float d = normBackwardElement(g(j), (xAt(row, j) - rowMean) * inv, f);
      dst[j] = add ? d + add[j] : d;
    }
    if (dx16) {
      uint16_t *copy = dx16 + row * dim;
      for (int64_t j = 0; j < dim; ++j)
        copy[j] = bf16 ? floatToBf16(dst[j]) : floatToHalf(dst[j]);
    }
  });
}

} // namespace

void layerNormBackward(Context &, int64_t outer, int64_t dim, const float *dy,
                       const float *x, const float *scale, const float *mean,
                       const float *invstd, float *dx, float *dscale,
                       float *dbias, const float *acc) {
  layerNormBackwardRows(
      outer, dim, dy, [&](int64_t row, int64_t j) { return x[row * dim + j]; },
      scale, mean, invstd, dx, dscale, dbias, acc);
}

namespace {

template <typename DY>
void layerNormBackward16On(Storage16 storage, int64_t outer, int64_t dim,
                           const DY *dy, const uint16_t *x, const float *scale,
                           const float *mean, const float *invstd, float *dx,
                           float *dscale, float *dbias, const float *acc,
                           uint16_t *dx16) {
  if (storage == Storage16::Bf16)
    layerNormBackwardRows(
        outer, dim, dy,
        [&](int64_t row, int64_t j) { return bf16ToFloat(x[row * dim + j]); },
        scale, mean, invstd, dx, dscale, dbias, acc, dx16, true);
  else
    layerNormBackwardRows(
        outer, dim, dy,
        [&](int64_t row, int64_t j) { return halfToFloat(x[row * dim + j]); },
        scale, mean, invstd, dx, dscale, dbias, acc, dx16, false);
}

} // namespace

void layerNormBackward16(Context &, Storage16 storage, int64_t outer,
                         int64_t dim, const float *dy, const uint16_t *x,
                         const float *scale, const float *mean,
                         const float *invstd, float *dx, float *dscale,
                         float *dbias, const float *acc, uint16_t *dx16) {
  layerNormBackward16On(storage, outer, dim, dy, x, scale, mean, invstd, dx,
                        dscale, dbias, acc, dx16);
}

void layerNormBackward16(Context &, Storage16 storage, int64_t outer,
                         int64_t dim, const uint16_t *dy, const uint16_t *x,
                         const float *scale, const float *mean,
                         const float *invstd, float *dx, float *dscale,
                         float *dbias, const float *acc, uint16_t *dx16) {
  layerNormBackward16On(storage, outer, dim, dy, x, scale, mean, invstd, dx,
                        dscale, dbias, acc, dx16);
}

} // namespace mtc::rt
