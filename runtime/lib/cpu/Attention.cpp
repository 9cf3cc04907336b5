//===- Attention.cpp - Fused attention without the score matrix ----------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Flash-attention style: the queries of a head are taken kRows at a time and
// the keys kCols at a time, so only a kRows x kCols tile of scores exists at
// once (on this thread's stack). The forward keeps a running maximum and sum
// per row and rescales the output it accumulates in place; the backward
// recomputes the probabilities from the saved log-sum-exp, one head per
// thread, so that every gradient element is summed by one thread in a fixed
// order whatever the thread count.
//
// Tiles are laid out so that the innermost loops run over contiguous,
// independent elements (the key tile is transposed once per block), which
// the compiler vectorizes without reassociating any sum.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"

#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mtc::rt {

namespace {

constexpr int64_t kRows = 16, kCols = 64, kMaxHeadDim = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// What every tile of one call shares.
struct Problem {
  const AttentionDims &a;
  const float *q, *k, *v;
  const unsigned char *mask;
  DropoutParams drop;
  bool dropout;

  /// The masked and scaled scores of rows [i0, i0 + rows) against keys
  /// [j0, j0 + cols) of head h: s[r * kCols + c]. kT is the key tile
  /// transposed, kT[x * kCols + c].
  void scores(int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
              float *kT, float *s) const {
    const float *kh = k + (h * a.sk + j0) * a.d;
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t x = 0; x < a.d; ++x)
        kT[x * kCols + c] = kh[c * a.d + x];
    for (int64_t r = 0; r < rows; ++r) {
      const float *qi = q + (h * a.sq + i0 + r) * a.d;
      float *sr = s + r * kCols;
      std::fill(sr, sr + cols, 0.0f);
      for (int64_t x = 0; x < a.d; ++x) {
        const float qx = qi[x];
        const float *kx = kT + x * kCols;
        for (int64_t c = 0; c < cols; ++c)
          sr[c] += qx * kx[c];
      }
      for (int64_t c = 0; c < cols; ++c)
        sr[c] *= a.scale;
    }
    if (!mask)
      return;
    const unsigned char *mh = mask + attentionMaskOffset(a, h);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (mh[(i0 + r) * a.maskRowStride + (j0 + c) * a.maskColStride])
          s[r * kCols + c] = kNegInf;
  }

  /// The dropout factor of each key of row i in [j0, j0 + cols): 0 or
  /// 1 / (1 - ratio), drawn in the dropout op's groups of four.
  void dropFactors(int64_t h, int64_t i, int64_t j0, int64_t cols,
                   float *factor) const {
    const uint64_t first = static_cast<uint64_t>((h * a.sq + i) * a.sk + j0);
    const uint64_t last = first + static_cast<uint64_t>(cols);
    for (uint64_t g = first / kDropoutGroup; g * kDropoutGroup < last; ++g) {
      bool keep[kDropoutGroup];
      dropoutGroupKeep(drop, g, keep);
      for (uint64_t w = 0; w < static_cast<uint64_t>(kDropoutGroup); ++w) {
        const uint64_t flat = g * kDropoutGroup + w;
        if (flat >= first && flat < last)
          factor[flat - first] = keep[w] ? drop.scale : 0.0f;
      }
    }
  }

  /// Probabilities of a score tile from the saved log-sum-exp, in place.
  void probabilities(int64_t h, int64_t i0, int64_t rows, int64_t cols,
                     const float *lse, float *s) const {
    for (int64_t r = 0; r < rows; ++r) {
      const float m = lse[h * a.sq + i0 + r];
      float *sr = s + r * kCols;
      for (int64_t c = 0; c < cols; ++c)
        sr[c] = m == kNegInf ? 0.0f : std::exp(sr[c] - m);
    }
  }
};

void forwardTile(const Problem &p, int64_t h, int64_t i0, float *out,
                 float *lse) {
  const AttentionDims &a = p.a;
  const int64_t rows = std::min(kRows, a.sq - i0);
  float kT[kMaxHeadDim * kCols], s[kRows * kCols], factor[kCols];
  float rowMax[kRows], rowSum[kRows];
  std::fill(rowMax, rowMax + rows, kNegInf);
  std::fill(rowSum, rowSum + rows, 0.0f);
  float *o = out + (h * a.sq + i0) * a.dv;
  std::fill(o, o + rows * a.dv, 0.0f);
  for (int64_t j0 = 0; j0 < a.sk; j0 += kCols) {
    const int64_t cols = std::min(kCols, a.sk - j0);
    p.scores(h, i0, rows, j0, cols, kT, s);
    for (int64_t r = 0; r < rows; ++r) {
      float *sr = s + r * kCols;
      float m = rowMax[r];
      for (int64_t c = 0; c < cols; ++c)
        m = std::max(m, sr[c]);
      if (m == kNegInf)
        continue; // every key so far is masked
      float *orow = o + r * a.dv;
      const float rescale = std::exp(rowMax[r] - m);
      rowSum[r] *= rescale;
      for (int64_t x = 0; x < a.dv; ++x)
        orow[x] *= rescale;
      rowMax[r] = m;
      if (p.dropout)
        p.dropFactors(h, i0 + r, j0, cols, factor);
      for (int64_t c = 0; c < cols; ++c) {
        const float e = std::exp(sr[c] - m);
        rowSum[r] += e;
        const float w = p.dropout ? e * factor[c] : e;
        if (w == 0.0f)
          continue;
        const float *vj = p.v + (h * a.sk + j0 + c) * a.dv;
        for (int64_t x = 0; x < a.dv; ++x)
          orow[x] += w * vj[x];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float *orow = o + r * a.dv;
    float &l = lse[h * a.sq + i0 + r];
    if (rowSum[r] == 0.0f) {
      std::fill(orow, orow + a.dv, 0.0f);
      l = kNegInf;
      continue;
    }
    const float inv = 1.0f / rowSum[r];
    for (int64_t x = 0; x < a.dv; ++x)
      orow[x] *= inv;
    l = rowMax[r] + std::log(rowSum[r]);
  }
}

/// The backward's per-tile terms: from probabilities P (in s), the
/// gradient of the dropped probabilities dO V^T (in dp) and each row's
/// dO . O (delta), turns s into dS = P * (dP - delta) and stores the
/// dropped probabilities in `dropped`.
void scoreGradients(const Problem &p, int64_t h, int64_t i0, int64_t rows,
                    int64_t j0, int64_t cols, const float *delta, float *s,
                    const float *dp, float *dropped) {
  float factor[kCols];
  for (int64_t r = 0; r < rows; ++r) {
    float *sr = s + r * kCols;
    const float *dpr = dp + r * kCols;
    if (p.dropout)
      p.dropFactors(h, i0 + r, j0, cols, factor);
    for (int64_t c = 0; c < cols; ++c) {
      const float f = p.dropout ? factor[c] : 1.0f;
      dropped[r * kCols + c] = sr[c] * f;
      sr[c] = sr[c] * (dpr[c] * f - delta[r]);
    }
  }
}

/// dp[r][c] = dO_(i0+r) . V_(j0+c), through the transposed value tile vT.
void outputGradDotValues(const Problem &p, const float *dout, int64_t h,
                         int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                         float *vT, float *dp) {
  const AttentionDims &a = p.a;
  const float *vh = p.v + (h * a.sk + j0) * a.dv;
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t x = 0; x < a.dv; ++x)
      vT[x * kCols + c] = vh[c * a.dv + x];
  for (int64_t r = 0; r < rows; ++r) {
    const float *gi = dout + (h * a.sq + i0 + r) * a.dv;
    float *dpr = dp + r * kCols;
    std::fill(dpr, dpr + cols, 0.0f);
    for (int64_t x = 0; x < a.dv; ++x) {
      const float gx = gi[x];
      const float *vx = vT + x * kCols;
      for (int64_t c = 0; c < cols; ++c)
        dpr[c] += gx * vx[c];
    }
  }
}

/// delta[r] = dO_(i0+r) . O_(i0+r).
void rowDeltas(const AttentionDims &a, const float *out, const float *dout,
               int64_t h, int64_t i0, int64_t rows, float *delta) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *o = out + (h * a.sq + i0 + r) * a.dv;
    const float *g = dout + (h * a.sq + i0 + r) * a.dv;
    float sum = 0.0f;
    for (int64_t x = 0; x < a.dv; ++x)
      sum += o[x] * g[x];
    delta[r] = sum;
  }
}

bool checkDims(Context &ctx, const AttentionDims &a) {
  if (a.d > kMaxHeadDim || a.dv > kMaxHeadDim) {
    reportError(ctx, "attention head dims above " +
                         std::to_string(kMaxHeadDim) + " are not supported");
    return false;
  }
  if (dropoutMode(a.dropout) == DropoutMode::Invalid) {
    reportError(ctx, badDropoutRatioMessage(a.dropout));
    return false;
  }
  return a.batch > 0 && a.sq > 0 && a.sk > 0;
}

Problem makeProblem(Context &ctx, const AttentionDims &a, const float *q,
                    const float *k, const float *v,
                    const unsigned char *mask) {
  // Ratio 1 keeps nothing, so its infinite scale is never used.
  return Problem{a, q, k, v, mask,
                 dropoutParams(ctx.seed, ctx.step, a.stream, a.dropout),
                 a.dropout > 0.0f};
}

bool parallelWork(const AttentionDims &a) {
  return a.batch * a.sq * a.sk * (a.d + a.dv) >= cpu::kParallelGrain;
}

} // namespace

void attentionForward(Context &ctx, const AttentionDims &a, const float *q,
                      const float *k, const float *v,
                      const unsigned char *mask, float *out, float *lse) {
  if (!checkDims(ctx, a))
    return;
  const Problem p = makeProblem(ctx, a, q, k, v, mask);
  const int64_t blocks = (a.sq + kRows - 1) / kRows;
  cpu::parallelFor(0, a.batch * blocks, parallelWork(a), [&](int64_t t) {
    forwardTile(p, t / blocks, (t % blocks) * kRows, out, lse);
  });
}

void attentionBackward(Context &ctx, const AttentionDims &a, const float *q,
                       const float *k, const float *v,
                       const unsigned char *mask, const float *out,
                       const float *lse, const float *dout, float *dq,
                       float *dk, float *dv) {
  if (!checkDims(ctx, a))
    return;
  const Problem p = makeProblem(ctx, a, q, k, v, mask);
  // One head per task: its dQ, dK and dV are summed by one thread, tile
  // after tile in a fixed order, and every tile's probabilities are
  // computed once.
  cpu::parallelFor(0, a.batch, parallelWork(a), [&](int64_t h) {
    float kT[kMaxHeadDim * kCols], vT[kMaxHeadDim * kCols];
    float s[kRows * kCols], dp[kRows * kCols], dropped[kRows * kCols],
        delta[kRows];
    float *gq = dq + h * a.sq * a.d;
    float *gk = dk + h * a.sk * a.d;
    float *gv = dv + h * a.sk * a.dv;
    std::fill(gq, gq + a.sq * a.d, 0.0f);
    std::fill(gk, gk + a.sk * a.d, 0.0f);
    std::fill(gv, gv + a.sk * a.dv, 0.0f);
    for (int64_t i0 = 0; i0 < a.sq; i0 += kRows) {
      const int64_t rows = std::min(kRows, a.sq - i0);
      rowDeltas(a, out, dout, h, i0, rows, delta);
      for (int64_t j0 = 0; j0 < a.sk; j0 += kCols) {
        const int64_t cols = std::min(kCols, a.sk - j0);
        p.scores(h, i0, rows, j0, cols, kT, s);
        p.probabilities(h, i0, rows, cols, lse, s);
        outputGradDotValues(p, dout, h, i0, rows, j0, cols, vT, dp);
        scoreGradients(p, h, i0, rows, j0, cols, delta, s, dp, dropped);
        for (int64_t r = 0; r < rows; ++r) {
          const float *qi = q + (h * a.sq + i0 + r) * a.d;
          const float *gi = dout + (h * a.sq + i0 + r) * a.dv;
          float *gr = gq + (i0 + r) * a.d;
          for (int64_t c = 0; c < cols; ++c) {
            const float ws = s[r * kCols + c] * a.scale;
            const float wp = dropped[r * kCols + c];
            float *kc = gk + (j0 + c) * a.d, *vc = gv + (j0 + c) * a.dv;
            if (ws != 0.0f) {
              const float *kj = k + (h * a.sk + j0 + c) * a.d;
              for (int64_t x = 0; x < a.d; ++x)
                gr[x] += ws * kj[x];
              for (int64_t x = 0; x < a.d; ++x)
                kc[x] += ws * qi[x];
            }
            if (wp != 0.0f)
              for (int64_t x = 0; x < a.dv; ++x)
                vc[x] += wp * gi[x];
          }
        }
      }
    }
  });
}

} // namespace mtc::rt
