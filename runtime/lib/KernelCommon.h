//===- KernelCommon.h - Math shared by the CPU and CUDA kernels -*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Window and shape arithmetic, per-element formulas and the dropout random
// number generator used by both kernel libraries. Keeping them in one place
// makes the two implementations agree on the exact semantics (which cells a
// pooling window covers, what it divides by, which elements dropout keeps).
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_KERNELCOMMON_H
#define MTC_RUNTIME_LIB_KERNELCOMMON_H

#include "mtc/runtime/Half.h" // MTC_HOST_DEVICE
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/LayerNormRow.h"
#include "mtc/runtime/Random.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace mtc::rt {

/// Number of window taps start + t * dilation (t in [0, taps)) that fall in
/// [lo, hi).
MTC_HOST_DEVICE inline int64_t tapsInRange(int64_t start, int64_t taps,
                                           int64_t dilation, int64_t lo,
                                           int64_t hi) {
  int64_t count = 0;
  for (int64_t t = 0; t < taps; ++t) {
    int64_t pos = start + t * dilation;
    count += (pos >= lo && pos < hi) ? 1 : 0;
  }
  return count;
}

/// The AveragePool divisor of output (oy, ox): the taps inside the input,
/// or with countIncludePad the taps inside the padded input. A ceil-mode
/// window that runs past the padded input counts only what lies inside it,
/// as in PyTorch and the ONNX reference.
MTC_HOST_DEVICE inline int64_t avgPoolDivisor(const Pool2dParams &p, int64_t oy,
                                              int64_t ox) {
  int64_t hStart = oy * p.strideH - p.padTop;
  int64_t wStart = ox * p.strideW - p.padLeft;
  if (!p.countIncludePad)
    return tapsInRange(hStart, p.kh, p.dilationH, 0, p.h) *
           tapsInRange(wStart, p.kw, p.dilationW, 0, p.w);
  int64_t padBottom = p.padBottom < 0 ? p.padTop : p.padBottom;
  int64_t padRight = p.padRight < 0 ? p.padLeft : p.padRight;
  return tapsInRange(hStart, p.kh, p.dilationH, -p.padTop, p.h + padBottom) *
         tapsInRange(wStart, p.kw, p.dilationW, -p.padLeft, p.w + padRight);
}

/// The taps [*first, *last) of a window along one dim, starting at `start`
/// with `taps` taps `dilation` apart, that fall inside [0, size).
MTC_HOST_DEVICE inline void tapsInside(int64_t start, int64_t taps,
                                       int64_t dilation, int64_t size,
                                       int64_t *first, int64_t *last) {
  // Undilated windows (the common case) need no division.
  *first = start >= 0      ? 0
           : dilation == 1 ? -start
                           : (-start + dilation - 1) / dilation;
  const int64_t end = size - start <= 0 ? 0
                      : dilation == 1
                          ? size - start
                          : (size - start + dilation - 1) / dilation;
  *last = end < taps ? end : taps;
  if (*first > *last)
    *first = *last;
}

/// Row-major index (iy * w + ix) of the maximum of window (oy, ox) of one
/// plane, or -1 when no tap lies inside the input. Padded cells never win;
/// ties keep the first tap in row-major window order, and a NaN wins over
/// numbers (the first NaN), as in PyTorch. The taps inside the input are
/// found first, so the loop has no bounds test, and it has no branch on the
/// data either: a larger number replaces the best by selects, and the
/// first NaN is tracked on the side.
/// The plane holds T: float32, or 16-bit values (bfloat16 when `bf16`),
/// compared widened.
template <typename T>
MTC_HOST_DEVICE inline int64_t maxPoolArgmax(const Pool2dParams &p,
                                             const T *plane, int64_t oy,
                                             int64_t ox, bool bf16 = false) {
  const int64_t hStart = oy * p.strideH - p.padTop;
  const int64_t wStart = ox * p.strideW - p.padLeft;
  int64_t i0, i1, j0, j1;
  tapsInside(hStart, p.kh, p.dilationH, p.h, &i0, &i1);
  tapsInside(wStart, p.kw, p.dilationW, p.w, &j0, &j1);
  if (i0 == i1 || j0 == j1)
    return -1;
  int64_t best = (hStart + i0 * p.dilationH) * p.w + wStart + j0 * p.dilationW;
  int64_t firstNaN = -1;
  float bestValue = storedToFloat(plane[best], bf16);
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t rowAt = (hStart + i * p.dilationH) * p.w + wStart;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t at = rowAt + j * p.dilationW;
      const float v = storedToFloat(plane[at], bf16);
      const bool larger = v > bestValue; // false for a NaN on either side
      best = larger ? at : best;
      bestValue = larger ? v : bestValue;
      firstNaN = v != v && firstNaN < 0 ? at : firstNaN;
    }
  }
  return firstNaN >= 0 ? firstNaN : best;
}

/// reduceSum after dropping unit dims and merging neighbouring dims of the
/// same kind (both reduced or both kept), which turns most reductions into
/// "sum the rows" or "sum the columns" of a matrix.
struct ReducePlan {
  int numKept = 0;
  int64_t keptDims[kMaxRank];
  int64_t keptStrides[kMaxRank]; ///< input strides in elements
  int numReduced = 0;
  int64_t reducedDims[kMaxRank];
  int64_t reducedStrides[kMaxRank];
  int64_t outCount = 1;
  int64_t reduceCount = 1;
  /// Whether the innermost merged input dim is reduced, i.e. the elements
  /// summed into one output are (partly) contiguous.
  bool innermostReduced = false;
};

/// Builds the plan; false when the shapes do not describe a reduction
/// (a dim that is neither kept nor reduced to 1, or a bad rank).
inline bool planReduceSum(int rank, const int64_t *inShape,
                          const int64_t *outShape, ReducePlan &plan) {
  if (rank < 0 || rank > kMaxRank)
    return false;
  int64_t dims[kMaxRank];
  bool reduced[kMaxRank];
  int merged = 0;
  for (int i = 0; i < rank; ++i) {
    if (inShape[i] < 0 || (outShape[i] != inShape[i] && outShape[i] != 1))
      return false;
    if (inShape[i] == 1)
      continue;
    bool isReduced = outShape[i] != inShape[i];
    if (merged > 0 && reduced[merged - 1] == isReduced) {
      dims[merged - 1] *= inShape[i];
      continue;
    }
    dims[merged] = inShape[i];
    reduced[merged] = isReduced;
    ++merged;
  }
  plan = ReducePlan();
  int64_t stride = 1;
  for (int i = merged - 1; i >= 0; --i) {
    if (reduced[i]) {
      plan.reducedDims[plan.numReduced] = dims[i];
      plan.reducedStrides[plan.numReduced++] = stride;
      plan.reduceCount *= dims[i];
    } else {
      plan.keptDims[plan.numKept] = dims[i];
      plan.keptStrides[plan.numKept++] = stride;
      plan.outCount *= dims[i];
    }
    stride *= dims[i];
  }
  // The loops above ran innermost first; callers want outermost first.
  for (int i = 0; i < plan.numKept / 2; ++i) {
    int o = plan.numKept - 1 - i;
    int64_t d = plan.keptDims[i], s = plan.keptStrides[i];
    plan.keptDims[i] = plan.keptDims[o];
    plan.keptStrides[i] = plan.keptStrides[o];
    plan.keptDims[o] = d;
    plan.keptStrides[o] = s;
  }
  for (int i = 0; i < plan.numReduced / 2; ++i) {
    int o = plan.numReduced - 1 - i;
    int64_t d = plan.reducedDims[i], s = plan.reducedStrides[i];
    plan.reducedDims[i] = plan.reducedDims[o];
    plan.reducedStrides[i] = plan.reducedStrides[o];
    plan.reducedDims[o] = d;
    plan.reducedStrides[o] = s;
  }
  plan.innermostReduced = merged > 0 && reduced[merged - 1];
  return true;
}

/// The element offset of row-major position `index` over `rank` dims with
/// the given element strides (0 where a dim is broadcast).
MTC_HOST_DEVICE inline int64_t stridedOffset(int64_t index, int rank,
                                             const int64_t *dims,
                                             const int64_t *strides) {
  int64_t offset = 0;
  for (int i = rank - 1; i >= 0; --i) {
    offset += (index % dims[i]) * strides[i];
    index /= dims[i];
  }
  return offset;
}

/// Input offset of the first element summed into output `o` (row-major over
/// the kept dims).
MTC_HOST_DEVICE inline int64_t keptOffset(const ReducePlan &plan, int64_t o) {
  return stridedOffset(o, plan.numKept, plan.keptDims, plan.keptStrides);
}

/// Input offset (relative to keptOffset) of the r-th summed element in
/// row-major order over the reduced dims.
MTC_HOST_DEVICE inline int64_t reducedOffset(const ReducePlan &plan,
                                             int64_t r) {
  return stridedOffset(r, plan.numReduced, plan.reducedDims,
                       plan.reducedStrides);
}

//===----------------------------------------------------------------------===//
// Optimizer element updates
//===----------------------------------------------------------------------===//
//
// The per-element arithmetic follows PyTorch's single-tensor SGD and AdamW
// operation by operation (same rounding order), with the scalar factors
// computed once on the host in double as Python does.

/// Loss scaling (null status without): whether mtc.grad_check found an inf
/// or NaN gradient, and the factor that unscales the gradients.
MTC_HOST_DEVICE inline bool skipsStep(const float *gradStatus) {
  return gradStatus && gradStatus[1] != 0.0f;
}
MTC_HOST_DEVICE inline float gradUnscale(const float *gradStatus) {
  return gradStatus ? gradStatus[0] : 1.0f;
}
/// 1 / scale in double, rounded to float, as PyTorch's GradScaler forms it.
MTC_HOST_DEVICE inline float inverseLossScale(float scale) {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

struct SgdScalars {
  float lr, momentum, weightDecay;
  bool nesterov;
  /// Step 1: the momentum buffer starts as the first update (PyTorch clones
  /// d_p instead of scaling an empty buffer).
  bool firstStep;
};

/// One parameter element; `buf` is null without momentum.
MTC_HOST_DEVICE inline void sgdElement(float &p, float g, float *buf,
                                       const SgdScalars &s) {
  float d = g;
  if (s.weightDecay != 0.0f)
    d = d + s.weightDecay * p;
  if (buf) {
    float b = s.firstStep ? d : *buf * s.momentum + d;
    *buf = b;
    d = s.nesterov ? d + s.momentum * b : b;
  }
  p = p + (-s.lr) * d;
}

struct AdamwScalars {
  float decay;      ///< 1 - lr * weightDecay
  float lerpWeight; ///< 1 - beta1
  float beta2;
  float oneMinusBeta2;
  float bc2Sqrt;     ///< sqrt(1 - beta2^t)
  float negStepSize; ///< -lr / (1 - beta1^t)
  float eps;
};

/// What an AdamW update is configured with.
struct AdamwHyperparameters {
  double lr, beta1, beta2, eps, weightDecay;
};

/// The update's scalars at optimizer step `step` (the CUDA kernels form
/// them on the device from the step counter there).
MTC_HOST_DEVICE inline AdamwScalars adamwScalars(int64_t step,
                                                 const AdamwHyperparameters &h) {
  // Step 0 would divide by zero in the bias corrections; treat it as step 1.
  double t = step < 1 ? 1.0 : static_cast<double>(step);
  double bc1 = 1.0 - ::pow(h.beta1, t);
  double bc2 = 1.0 - ::pow(h.beta2, t);
  AdamwScalars s;
  s.decay = static_cast<float>(1.0 - h.lr * h.weightDecay);
  s.lerpWeight = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.oneMinusBeta2 = static_cast<float>(1.0 - h.beta2);
  s.bc2Sqrt = static_cast<float>(::sqrt(bc2));
  s.negStepSize = static_cast<float>(-(h.lr / bc1));
  s.eps = static_cast<float>(h.eps);
  return s;
}

MTC_HOST_DEVICE inline void adamwElement(float &p, float g, float &m, float &v,
                                         const AdamwScalars &s) {
  p = p * s.decay;
  // torch.lerp's formula, which rounds differently from b1*m + (1-b1)*g.
  m = s.lerpWeight < 0.5f ? m + s.lerpWeight * (g - m)
                          : g - (g - m) * (1.0f - s.lerpWeight);
  v = v * s.beta2 + s.oneMinusBeta2 * g * g;
  float denom = sqrtf(v) / s.bc2Sqrt + s.eps;
  p = p + s.negStepSize * m / denom;
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//
//
// Statistics are reduced in double by both libraries (the order differs, the
// rounding to float almost never does); what is shared here is everything
// that happens after the reductions, so that the per-element arithmetic is
// the same on both sides (with inverseStd and normalizeElement from
// mtc/runtime/LayerNormRow.h).

/// The activation a batch normalization applies to its result (the
/// expressions of the generated relu and clip kernels).
MTC_HOST_DEVICE inline float activate(float v, const NormActivation &a) {
  if (a.kind == NormActivationKind::Relu)
    return v > 0.0f ? v : 0.0f;
  if (a.kind == NormActivationKind::Clip)
    return v < a.lo ? a.lo : (v > a.hi ? a.hi : v);
  return v;
}

/// A normalized value v plus a residual block's other term (its stored
/// value widened to float), v first rounded as the output (stored as Y,
/// like the residual) stores it: what a separate kernel adding the stored
/// normalized values computes.
template <typename Y>
MTC_HOST_DEVICE inline float addResidual(float v, float residual, bool bf16) {
  Y rounded;
  storeFloat(&rounded, v, bf16);
  return storedToFloat(rounded, bf16) + residual;
}

/// addResidual with the residual's term at residual[at].
template <typename Y>
MTC_HOST_DEVICE inline float addResidual(float v, const Y *residual, int64_t at,
                                         bool bf16) {
  return addResidual<Y>(v, storedToFloat(residual[at], bf16), bf16);
}

/// The incoming gradient dy through that activation, from its output y (the
/// expressions of the generated relu_grad and clip_grad kernels).
MTC_HOST_DEVICE inline float activationGrad(float dy, float y,
                                            const NormActivation &a) {
  if (a.kind == NormActivationKind::Relu)
    return y > 0.0f ? dy : 0.0f;
  if (a.kind == NormActivationKind::Clip)
    return (y > a.lo && y < a.hi) ? dy : 0.0f;
  return dy;
}

/// running = momentum * running + (1 - momentum) * batch (ONNX momentum).
MTC_HOST_DEVICE inline void updateRunningStat(float &running, double batch,
                                              float momentum) {
  double mom = momentum;
  running = static_cast<float>(mom * running + (1.0 - mom) * batch);
}

/// Updates the running statistics of one BatchNormalization channel from
/// the batch mean and the sum of squared deviations over m elements. The
/// running variance takes the unbiased variance, as PyTorch does; with a
/// single element that is 0/0, so the biased one (0) is used instead of
/// poisoning the running variance with NaN.
MTC_HOST_DEVICE inline void
updateBatchNormRunningStats(float &runningMean, float &runningVar, double mean,
                            double squaredDevSum, int64_t m, float momentum) {
  double unbiased = m > 1 ? squaredDevSum / static_cast<double>(m - 1) : 0.0;
  updateRunningStat(runningMean, mean, momentum);
  updateRunningStat(runningVar, unbiased, momentum);
}

/// Per-channel (BatchNorm) or per-row (LayerNorm) factors of the
/// normalization backward
///   dx = (g - mean(g) - xhat * mean(g * xhat)) * gain,
/// where g is the gradient reaching xhat (dy times the scale for LayerNorm,
/// dy for BatchNorm, whose scale goes into gain instead). This is the
/// textbook dx = gain / m * (m g - sum(g) - xhat sum(g xhat)) with the sums
/// divided by m first, as PyTorch's CPU kernels do.
struct NormBackwardFactors {
  float gradMean; ///< sum(g) / m
  float projMean; ///< sum(g * xhat) / m
  float gain;
};

MTC_HOST_DEVICE inline NormBackwardFactors
normBackwardFactors(double sumG, double sumGXhat, int64_t m, double gain) {
  double count = m > 0 ? static_cast<double>(m) : 1.0;
  NormBackwardFactors f;
  f.gradMean = static_cast<float>(sumG / count);
  f.projMean = static_cast<float>(sumGXhat / count);
  f.gain = static_cast<float>(gain);
  return f;
}

MTC_HOST_DEVICE inline float normBackwardElement(float g, float xhat,
                                                 const NormBackwardFactors &f) {
  return (g - f.gradMean - xhat * f.projMean) * f.gain;
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//
//
// The generator lives in mtc/runtime/Random.h, which generated kernels with
// a fused dropout include too.

/// How a dropout op runs for a given ratio. ratio == 0 copies (nothing is
/// dropped, and the generator would keep everything anyway); ratio == 1
/// drops everything, where 1 / (1 - ratio) would be infinite; a ratio
/// outside [0, 1] (or NaN) is a usage error.
enum class DropoutMode { Copy, Zero, Mask, Invalid };

inline DropoutMode dropoutMode(float ratio) {
  if (!(ratio >= 0.0f && ratio <= 1.0f))
    return DropoutMode::Invalid;
  if (ratio == 0.0f)
    return DropoutMode::Copy;
  return ratio == 1.0f ? DropoutMode::Zero : DropoutMode::Mask;
}

inline std::string badDropoutRatioMessage(float ratio) {
  return "dropout ratio " + std::to_string(ratio) + " is outside [0, 1]";
}

//===----------------------------------------------------------------------===//
// Copies
//===----------------------------------------------------------------------===//

/// Calls f with a null pointer to the unsigned word of `elemBytes` bytes (1,
/// 2, 4 or 8): what a copy moves per element whatever the element type.
/// False, calling nothing, for any other size.
template <typename F> bool withElementWord(int elemBytes, F f) {
  switch (elemBytes) {
  case 1:
    return f(static_cast<uint8_t *>(nullptr)), true;
  case 2:
    return f(static_cast<uint16_t *>(nullptr)), true;
  case 4:
    return f(static_cast<uint32_t *>(nullptr)), true;
  case 8:
    return f(static_cast<uint64_t *>(nullptr)), true;
  default:
    return false;
  }
}

inline std::string badElementSizeMessage(const char *name, int elemBytes) {
  return std::string(name) + ": unsupported element size " +
         std::to_string(elemBytes);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Why the attention kernels cannot run `a` (empty when they can).
inline std::string attentionDimsError(const AttentionDims &a) {
  if (a.d > kMaxAttentionHeadDim || a.dv > kMaxAttentionHeadDim)
    return "attention head dims above " +
           std::to_string(kMaxAttentionHeadDim) + " are not supported";
  if (a.batch > 0 && a.heads < 1)
    return "attention needs at least one head per batch entry";
  if (dropoutMode(a.dropout) == DropoutMode::Invalid)
    return badDropoutRatioMessage(a.dropout);
  return "";
}

/// Where row i of head h of a tensor laid out as `l` starts.
MTC_HOST_DEVICE inline int64_t attentionRow(const AttentionDims &a,
                                            const AttentionLayout &l,
                                            int64_t h, int64_t i) {
  return (h / a.heads) * l.batch + (h % a.heads) * l.head + i * l.row;
}

/// Where head `h`'s mask starts (broadcast batch dims have stride 0).
MTC_HOST_DEVICE inline int64_t attentionMaskOffset(const AttentionDims &a,
                                                   int64_t h) {
  return stridedOffset(h, a.batchRank, a.batchDims, a.maskStrides);
}

/// The order in which a CUDA attention launch takes its tiles (one block of
/// rows of one head each; the blocks of a grid start in blockIdx order).
/// Under a causal mask the tiles of late queries (early keys, for the
/// kernels that own keys) have the most live chunks: 16 times the work of
/// the first one at sequence 1024. Taken head by head, the grid ends on the
/// last head's heaviest tile while most of the device idles. Taken heaviest
/// first across heads, the last tiles to start are the lightest (longest
/// processing time first). Heads are taken in groups of `groupHeads`, each
/// group's tiles interleaved; a group's streamed rows (the K and V, or Q
/// and dO, that its tiles read again and again) are sized to stay in L2.
/// With `lastFirst` a head's tiles start from its last rows (the kernels
/// that own queries), else from its first (those that own keys). Without a
/// mask, or with one that leaves every tile the same work, the order only
/// moves which tiles run side by side.
struct AttentionTileOrder {
  int64_t groupHeads = 1;
  bool lastFirst = false;
};

/// The head and the tile index within the head of launch tile `tile`, of
/// `heads` heads with `tilesPerHead` tiles each, taken in `order`. The
/// arithmetic is 32-bit (a GPU divides 64-bit integers in a subroutine):
/// heads * tilesPerHead must be below 2^32, which the CUDA kernels check.
MTC_HOST_DEVICE inline void attentionTilePlace(int64_t tile, int64_t heads,
                                               int64_t tilesPerHead,
                                               AttentionTileOrder order,
                                               int64_t &head, int64_t &index) {
  const uint32_t t = static_cast<uint32_t>(tile);
  const uint32_t perHead = static_cast<uint32_t>(tilesPerHead);
  const uint32_t groupHeads = static_cast<uint32_t>(order.groupHeads);
  const uint32_t groupTiles = groupHeads * perHead;
  const uint32_t group = t / groupTiles;
  const uint32_t firstHead = group * groupHeads;
  const uint32_t rest = static_cast<uint32_t>(heads) - firstHead;
  const uint32_t inGroup = rest < groupHeads ? rest : groupHeads;
  const uint32_t r = t - group * groupTiles;
  const uint32_t rank = r / inGroup;
  head = firstHead + (r - rank * inGroup);
  index = order.lastFirst ? perHead - 1 - rank : rank;
}

/// The tile order for `heads` heads whose tiles each stream `streamedBytes`
/// a head, on a device with `l2Bytes` of L2 cache: as many heads to a group
/// as half the L2 holds the streamed rows of (at least one).
inline AttentionTileOrder attentionTileOrder(int64_t heads,
                                             int64_t streamedBytes,
                                             int64_t l2Bytes, bool lastFirst) {
  AttentionTileOrder order;
  order.lastFirst = lastFirst;
  const int64_t fit = streamedBytes > 0 ? l2Bytes / 2 / streamedBytes : heads;
  order.groupHeads = fit < 1 ? 1 : fit > heads ? (heads > 0 ? heads : 1) : fit;
  return order;
}

/// Whether the attention dropout keeps element (h, i, j), drawing the words
/// a dropout op over [batch, sq, sk] would draw.
MTC_HOST_DEVICE inline bool attentionKeep(const DropoutParams &p,
                                          const AttentionDims &a, int64_t h,
                                          int64_t i, int64_t j) {
  const uint64_t flat = static_cast<uint64_t>((h * a.sq + i) * a.sk + j);
  bool keep[kDropoutGroup];
  dropoutGroupKeep(p, flat / kDropoutGroup, keep);
  return keep[flat % kDropoutGroup];
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

/// The row `index` selects on an axis of size dim (negative indices count
/// from the end), or -1 when it lies outside [-dim, dim).
MTC_HOST_DEVICE inline int64_t gatherRow(int64_t index, int64_t dim) {
  if (index < -dim || index >= dim)
    return -1;
  return index < 0 ? index + dim : index;
}

/// gatherBackwardAccumulate's scratch (see
/// gatherBackwardAccumulateWorkspaceBytes): firstOf[row] is the first
/// position whose index names row (-1 for none), slotOf[k] the first
/// position naming the row position k names (`count` for a bad index, which
/// a scatter over `count` rows skips), and sums [outer, count, inner] the
/// rows' index-order sums, each stored in the row of its first position.
struct GatherAccumulateScratch {
  int64_t *firstOf;
  int64_t *slotOf;
  float *sums;
  MTC_HOST_DEVICE GatherAccumulateScratch(void *workspace, int64_t dim,
                                          int64_t count) {
    auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
    auto *p = static_cast<unsigned char *>(workspace);
    firstOf = reinterpret_cast<int64_t *>(p);
    slotOf = reinterpret_cast<int64_t *>(
        p + aligned(static_cast<int64_t>(sizeof(int64_t)) * dim));
    sums = reinterpret_cast<float *>(
        p + aligned(static_cast<int64_t>(sizeof(int64_t)) * dim) +
        aligned(static_cast<int64_t>(sizeof(int64_t)) * count));
  }
};

/// The data error both libraries report for a bad gather index.
inline std::string badGatherIndexMessage(int64_t index, int64_t position,
                                         int64_t dim) {
  return "gather index " + std::to_string(index) + " at position " +
         std::to_string(position) + " is outside [" + std::to_string(-dim) +
         ", " + std::to_string(dim) + ") for an axis of size " +
         std::to_string(dim);
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

/// The class with the first maximum logit of one position: `row` points at
/// class 0 and classes are `stride` floats apart (logits [n, c, d]).
MTC_HOST_DEVICE inline int64_t firstArgmax(const float *row, int64_t c,
                                           int64_t stride) {
  int64_t best = 0;
  for (int64_t k = 1; k < c; ++k)
    if (row[k * stride] > row[best * stride])
      best = k;
  return best;
}

//===----------------------------------------------------------------------===//
// GELU epilogues
//===----------------------------------------------------------------------===//
//
// GELU's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715
// x^3), as cuBLASLt's GELU epilogues compute it. Each device supplies its
// tanh(u) (VecMath's on the CPU, tanhf on CUDA).

MTC_HOST_DEVICE inline float geluTanhArgument(float x) {
  return 0.7978845608f * (x + 0.044715f * x * x * x);
}
/// GELU(x) from t = tanh(geluTanhArgument(x)).
MTC_HOST_DEVICE inline float geluFromTanh(float x, float t) {
  return 0.5f * x * (1.0f + t);
}
/// GELU'(x) from t = tanh(geluTanhArgument(x)).
MTC_HOST_DEVICE inline float geluGradFromTanh(float x, float t) {
  float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/// Calls f with t's data as the pointer type it is stored as: const float *
/// or const uint16_t * (StoredIn), float * or uint16_t * (StoredOut).
template <typename F> void withStoredIn(const StoredIn &t, F &&f) {
  if (t.low)
    f(static_cast<const uint16_t *>(t.data));
  else
    f(static_cast<const float *>(t.data));
}
template <typename F> void withStoredOut(const StoredOut &t, F &&f) {
  if (t.low)
    f(static_cast<uint16_t *>(t.data));
  else
    f(static_cast<float *>(t.data));
}

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_KERNELCOMMON_H
