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

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Parallel.h"
#include "mtc/runtime/VecMath.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace mtc::rt {

namespace {

constexpr int64_t kRows = 16, kCols = 64, kMaxHeadDim = kMaxAttentionHeadDim;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The tile loops are most of the step at long sequences; they are compiled
// per instruction set (MTC_SIMD_CLONES).

/// acc[0, n) += sum over t < count of w[t * wStride] * x[t * xStride + (0,
/// n)], in t order. With the width N known at compile time the accumulator
/// row stays in registers over the whole sum (N = 0: any width n). Always
/// inlined, so that it is compiled per instruction set with its caller.
template <int N>
[[gnu::always_inline]] inline void
weightedRowSum(int64_t n, float *acc, const float *w, int64_t wStride,
               const float *x, int64_t xStride, int64_t count) {
  if constexpr (N == 0) {
    for (int64_t t = 0; t < count; ++t)
      for (int64_t i = 0; i < n; ++i)
        acc[i] += w[t * wStride] * x[t * xStride + i];
  } else {
    float a[N];
    for (int i = 0; i < N; ++i)
      a[i] = acc[i];
    for (int64_t t = 0; t < count; ++t) {
      const float wt = w[t * wStride];
      const float *xt = x + t * xStride;
      for (int i = 0; i < N; ++i)
        a[i] += wt * xt[i];
    }
    for (int i = 0; i < N; ++i)
      acc[i] = a[i];
  }
}

/// An operand element as float32: float32 as is, 16 bits widened.
inline float widen(float x, bool) { return x; }
inline float widen(uint16_t x, bool bf16) { return storedToFloat(x, bf16); }

/// tile[x * kCols + c] = rows[c * stride + x] (as float32) for the `cols`
/// rows of width n, and 0 in the columns past them.
template <typename T>
inline void transposeTile(const T *rows, int64_t n, int64_t stride,
                          int64_t cols, bool bf16, float *tile) {
  for (int64_t x = 0; x < n; ++x) {
    float *tx = tile + x * kCols;
    for (int64_t c = 0; c < cols; ++c)
      tx[c] = widen(rows[c * stride + x], bf16);
    std::fill(tx + cols, tx + kCols, 0.0f);
  }
}

/// Rows of float32 values, `stride` elements apart.
struct Rows {
  const float *at;
  int64_t stride;
  const float *row(int64_t r) const { return at + r * stride; }
};

/// `count` rows of width n, `stride` elements apart, as float32: float32
/// rows where they are, 16-bit ones widened into `buffer` (n apart).
inline Rows floatRows(const float *rows, int64_t, int64_t, int64_t stride,
                      bool, float *) {
  return {rows, stride};
}
inline Rows floatRows(const uint16_t *rows, int64_t count, int64_t n,
                      int64_t stride, bool bf16, float *buffer) {
  for (int64_t r = 0; r < count; ++r)
    for (int64_t x = 0; x < n; ++x)
      buffer[r * n + x] = storedToFloat(rows[r * stride + x], bf16);
  return {buffer, n};
}

/// Stores `count` float32 rows of width n (n apart) at rows `stride`
/// elements apart, as float32 or rounded to 16 bits (`bf16` or float16).
inline void storeRows(const float *from, int64_t count, int64_t n,
                      float *to, int64_t stride, bool) {
  for (int64_t r = 0; r < count; ++r)
    std::copy(from + r * n, from + (r + 1) * n, to + r * stride);
}
inline void storeRows(const float *from, int64_t count, int64_t n,
                      uint16_t *to, int64_t stride, bool bf16) {
  for (int64_t r = 0; r < count; ++r)
    for (int64_t x = 0; x < n; ++x)
      to[r * stride + x] =
          bf16 ? floatToBf16(from[r * n + x]) : floatToHalf(from[r * n + x]);
}

/// out[c] = row . column c of a transposed tile, for all kCols columns: a
/// fixed width, so the kCols sums stay in registers.
MTC_SIMD_CLONES void rowTimesTile(const float *row, const float *tile,
                                  int64_t n, float *out) {
  float acc[kCols] = {};
  for (int64_t x = 0; x < n; ++x) {
    const float rx = row[x];
    const float *tx = tile + x * kCols;
    for (int64_t c = 0; c < kCols; ++c)
      acc[c] += rx * tx[c];
  }
  for (int64_t c = 0; c < kCols; ++c)
    out[c] = acc[c];
}

/// weightedRowSum for the common head dims, else the generic loop.
MTC_SIMD_CLONES void accumulateRows(int64_t n, float *acc, const float *w,
                                    int64_t wStride, const float *x,
                                    int64_t xStride, int64_t count) {
  switch (n) {
  case 8:
    return weightedRowSum<8>(n, acc, w, wStride, x, xStride, count);
  case 16:
    return weightedRowSum<16>(n, acc, w, wStride, x, xStride, count);
  case 32:
    return weightedRowSum<32>(n, acc, w, wStride, x, xStride, count);
  case 64:
    return weightedRowSum<64>(n, acc, w, wStride, x, xStride, count);
  case 128:
    return weightedRowSum<128>(n, acc, w, wStride, x, xStride, count);
  default:
    return weightedRowSum<0>(n, acc, w, wStride, x, xStride, count);
  }
}

/// What every tile of one call shares. T is how Q, K, V and dO are stored:
/// float, or uint16_t in bfloat16 (bf16) or float16.
template <typename T> struct Problem {
  static constexpr bool kNarrow = !std::is_same_v<T, float>;

  const AttentionDims &a;
  const T *q, *k, *v;
  const unsigned char *mask;
  DropoutParams drop;
  bool dropout, bf16;

  /// A product operand as the 16-bit products see it: rounded to the
  /// storage format (as is for float32).
  float operand(float x) const {
    if constexpr (kNarrow)
      return bf16 ? bf16ToFloat(floatToBf16(x)) : halfToFloat(floatToHalf(x));
    return x;
  }

  /// The masked and scaled scores of rows [i0, i0 + rows) (qRows, as
  /// float32) against keys [j0, j0 + cols) of head h: s[r * kCols + c]. kT
  /// receives the key tile transposed, kT[x * kCols + c].
  void scores(int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
              const Rows &qRows, float *kT, float *s) const {
    transposeTile(k + attentionRow(a, a.rows.k, h, j0), a.d, a.rows.k.row, cols, bf16,
                  kT);
    for (int64_t r = 0; r < rows; ++r) {
      rowTimesTile(qRows.row(r), kT, a.d, s + r * kCols);
      for (int64_t c = 0; c < cols; ++c)
        s[r * kCols + c] *= a.scale;
    }
    if (a.causal) {
      // Keys after the query: j0 + c > i0 + r.
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = std::max<int64_t>(i0 + r + 1 - j0, 0); c < cols; ++c)
          s[r * kCols + c] = kNegInf;
      return;
    }
    if (!mask)
      return;
    const unsigned char *mh = mask + attentionMaskOffset(a, h);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (mh[(i0 + r) * a.maskRowStride + (j0 + c) * a.maskColStride])
          s[r * kCols + c] = kNegInf;
  }

  /// Whether the mask hides every score of rows [i0, i0 + rows) against
  /// keys [j0, j0 + cols) of head h (half the tiles of a causal mask). Such
  /// a tile adds nothing: its probabilities are 0 and its products add
  /// zeros (to sums that are never -0), so both passes skip it.
  bool tileMasked(int64_t h, int64_t i0, int64_t rows, int64_t j0,
                  int64_t cols) const {
    if (a.causal)
      return j0 > i0 + rows - 1; // the first key is after the last query
    if (!mask)
      return false;
    const unsigned char *mh = mask + attentionMaskOffset(a, h);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (!mh[(i0 + r) * a.maskRowStride + (j0 + c) * a.maskColStride])
          return false;
    return true;
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
      if (m == kNegInf) {
        std::fill(sr, sr + cols, 0.0f);
        continue;
      }
      for (int64_t c = 0; c < cols; ++c)
        sr[c] = cpu::vecExp(sr[c] - m);
    }
  }
};

/// The output tile of query rows [i0, i0 + kRows) of head h: O is how the
/// output is stored, float, or uint16_t in the operands' 16-bit format
/// (each value rounded as a conversion rounds it; the tile is summed in
/// float32 first).
template <typename T, typename O>
[[gnu::always_inline]] inline void forwardTile(const Problem<T> &p, int64_t h,
                                               int64_t i0, O *out,
                                               float *lse) {
  const AttentionDims &a = p.a;
  const int64_t rows = std::min(kRows, a.sq - i0);
  float kT[kMaxHeadDim * kCols], s[kRows * kCols], factor[kCols];
  float qBuffer[kRows * kMaxHeadDim], vBuffer[kCols * kMaxHeadDim];
  // The output tile, summed in float32 and stored at the end.
  float o[kRows * kMaxHeadDim];
  float rowMax[kRows], rowSum[kRows];
  std::fill(rowMax, rowMax + rows, kNegInf);
  std::fill(rowSum, rowSum + rows, 0.0f);
  std::fill(o, o + rows * a.dv, 0.0f);
  const Rows qRows = floatRows(p.q + attentionRow(a, a.rows.q, h, i0), rows,
                               a.d, a.rows.q.row, p.bf16, qBuffer);
  for (int64_t j0 = 0; j0 < a.sk; j0 += kCols) {
    const int64_t cols = std::min(kCols, a.sk - j0);
    if (p.tileMasked(h, i0, rows, j0, cols))
      continue;
    p.scores(h, i0, rows, j0, cols, qRows, kT, s);
    const Rows vRows = floatRows(p.v + attentionRow(a, a.rows.v, h, j0), cols,
                                 a.dv, a.rows.v.row, p.bf16, vBuffer);
    for (int64_t r = 0; r < rows; ++r) {
      float *sr = s + r * kCols;
      float m = rowMax[r];
      for (int64_t c = 0; c < cols; ++c)
        m = std::max(m, sr[c]);
      if (m == kNegInf)
        continue; // every key so far is masked
      float *orow = o + r * a.dv;
      const float rescale = cpu::vecExp(rowMax[r] - m);
      rowSum[r] *= rescale;
      for (int64_t x = 0; x < a.dv; ++x)
        orow[x] *= rescale;
      rowMax[r] = m;
      if (p.dropout)
        p.dropFactors(h, i0 + r, j0, cols, factor);
      // The exponentials in a loop of their own, which vectorizes; then
      // the sum in key order.
      for (int64_t c = 0; c < cols; ++c)
        sr[c] = cpu::vecExp(sr[c] - m);
      for (int64_t c = 0; c < cols; ++c) {
        const float e = sr[c];
        rowSum[r] += e;
        // The weight of V_(j0+c), an operand of the P V product.
        sr[c] = p.operand(p.dropout ? e * factor[c] : e);
      }
      accumulateRows(a.dv, orow, sr, 1, vRows.at, vRows.stride, cols);
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
  storeRows(o, rows, a.dv, out + attentionRow(a, a.rows.o, h, i0), a.rows.o.row,
            p.bf16);
}

/// The backward's per-tile terms: from probabilities P (in s), the
/// gradient of the dropped probabilities dO V^T (in dp) and each row's
/// dO . O (delta), turns s into scale * dS = scale * P * (dP - delta) and
/// stores the dropped probabilities in `dropped`, both as the operands of
/// the products that follow.
template <typename T>
inline void scoreGradients(const Problem<T> &p, int64_t h, int64_t i0,
                           int64_t rows, int64_t j0, int64_t cols,
                           const float *delta, float *s, const float *dp,
                           float *dropped) {
  float factor[kCols];
  for (int64_t r = 0; r < rows; ++r) {
    float *sr = s + r * kCols;
    const float *dpr = dp + r * kCols;
    if (p.dropout)
      p.dropFactors(h, i0 + r, j0, cols, factor);
    for (int64_t c = 0; c < cols; ++c) {
      const float f = p.dropout ? factor[c] : 1.0f;
      dropped[r * kCols + c] = p.operand(sr[c] * f);
      sr[c] = p.operand(sr[c] * (dpr[c] * f - delta[r]) * p.a.scale);
    }
  }
}

/// delta[r] = dO_r . O_(i0+r) for the tile's output gradient rows g, the
/// output stored as float or in 16 bits (`bf16` or float16).
template <typename O>
inline void rowDeltas(const AttentionDims &a, const O *out, bool bf16,
                      const Rows &g, int64_t h, int64_t i0, int64_t rows,
                      float *delta) {
  for (int64_t r = 0; r < rows; ++r) {
    const O *o = out + attentionRow(a, a.rows.o, h, i0 + r);
    const float *gr = g.row(r);
    float sum = 0.0f;
    for (int64_t x = 0; x < a.dv; ++x) {
      float ox;
      if constexpr (std::is_same_v<O, float>)
        ox = o[x];
      else
        ox = storedToFloat(o[x], bf16);
      sum += ox * gr[x];
    }
    delta[r] = sum;
  }
}

/// Where dQ, dK and dV go: float32 arrays, or (`narrow`) uint16_t arrays
/// in the operands' 16-bit format.
struct Grads {
  void *dq, *dk, *dv;
  bool narrow;
};

/// dQ, dK and dV of head h, summed in float32 in `scratch` (resized here),
/// then stored (rounded to 16 bits if the gradients are) where their
/// layouts put them.
template <typename T, typename O>
[[gnu::always_inline]] inline void
backwardHead(const Problem<T> &p, int64_t h, const O *out,
             const float *lse, const T *dout, const Grads &grads,
             std::vector<float> &scratch) {
  const AttentionDims &a = p.a;
  const int64_t nq = a.sq * a.d, nk = a.sk * a.d, nv = a.sk * a.dv;
  scratch.resize(nq + nk + nv);
  float *gq = scratch.data(), *gk = gq + nq, *gv = gk + nk;
  float kT[kMaxHeadDim * kCols], vT[kMaxHeadDim * kCols];
  float s[kRows * kCols], dp[kRows * kCols], dropped[kRows * kCols],
      delta[kRows];
  float qBuffer[kRows * kMaxHeadDim], gBuffer[kRows * kMaxHeadDim];
  float kBuffer[kCols * kMaxHeadDim];
  std::fill(gq, gq + nq + nk + nv, 0.0f);
  for (int64_t i0 = 0; i0 < a.sq; i0 += kRows) {
    const int64_t rows = std::min(kRows, a.sq - i0);
    const Rows qRows = floatRows(p.q + attentionRow(a, a.rows.q, h, i0), rows,
                                 a.d, a.rows.q.row, p.bf16, qBuffer);
    const Rows gRows = floatRows(dout + attentionRow(a, a.rows.dout, h, i0),
                                 rows, a.dv, a.rows.dout.row, p.bf16, gBuffer);
    rowDeltas(a, out, p.bf16, gRows, h, i0, rows, delta);
    for (int64_t j0 = 0; j0 < a.sk; j0 += kCols) {
      const int64_t cols = std::min(kCols, a.sk - j0);
      if (p.tileMasked(h, i0, rows, j0, cols))
        continue;
      p.scores(h, i0, rows, j0, cols, qRows, kT, s);
      p.probabilities(h, i0, rows, cols, lse, s);
      // dp[r][c] = dO_(i0+r) . V_(j0+c), through the transposed values.
      transposeTile(p.v + attentionRow(a, a.rows.v, h, j0), a.dv, a.rows.v.row, cols,
                    p.bf16, vT);
      for (int64_t r = 0; r < rows; ++r)
        rowTimesTile(gRows.row(r), vT, a.dv, dp + r * kCols);
      scoreGradients(p, h, i0, rows, j0, cols, delta, s, dp, dropped);
      // dQ_i += dS_i. K, dK_j += dS_.j Q and dV_j += dropped(P)_.j dO.
      const Rows kRowsF = floatRows(p.k + attentionRow(a, a.rows.k, h, j0), cols,
                                    a.d, a.rows.k.row, p.bf16, kBuffer);
      for (int64_t r = 0; r < rows; ++r)
        accumulateRows(a.d, gq + (i0 + r) * a.d, s + r * kCols, 1, kRowsF.at,
                       kRowsF.stride, cols);
      for (int64_t c = 0; c < cols; ++c) {
        accumulateRows(a.d, gk + (j0 + c) * a.d, s + c, kCols, qRows.at,
                       qRows.stride, rows);
        accumulateRows(a.dv, gv + (j0 + c) * a.dv, dropped + c, kCols,
                       gRows.at, gRows.stride, rows);
      }
    }
  }
  auto store = [&](const float *from, void *to, const AttentionLayout &l,
                   int64_t count, int64_t n) {
    const int64_t at = attentionRow(a, l, h, 0);
    if (grads.narrow)
      storeRows(from, count, n, static_cast<uint16_t *>(to) + at, l.row,
                p.bf16);
    else
      storeRows(from, count, n, static_cast<float *>(to) + at, l.row,
                p.bf16);
  };
  store(gq, grads.dq, a.rows.dq, a.sq, a.d);
  store(gk, grads.dk, a.rows.dk, a.sk, a.d);
  store(gv, grads.dv, a.rows.dv, a.sk, a.dv);
}

// The tiles compiled per instruction set (see MTC_SIMD_CLONES).
MTC_SIMD_CLONES void forwardTile32(const Problem<float> &p, int64_t h,
                                   int64_t i0, float *out, float *lse) {
  forwardTile(p, h, i0, out, lse);
}
MTC_SIMD_CLONES void forwardTile16(const Problem<uint16_t> &p, int64_t h,
                                   int64_t i0, float *out, float *lse) {
  forwardTile(p, h, i0, out, lse);
}
MTC_SIMD_CLONES void forwardTile16Out16(const Problem<uint16_t> &p,
                                        int64_t h, int64_t i0, uint16_t *out,
                                        float *lse) {
  forwardTile(p, h, i0, out, lse);
}
MTC_SIMD_CLONES void backwardHead32(const Problem<float> &p, int64_t h,
                                    const float *out, const float *lse,
                                    const float *dout, const Grads &grads,
                                    std::vector<float> &scratch) {
  backwardHead(p, h, out, lse, dout, grads, scratch);
}
MTC_SIMD_CLONES void backwardHead16(const Problem<uint16_t> &p, int64_t h,
                                    const float *out, const float *lse,
                                    const uint16_t *dout, const Grads &grads,
                                    std::vector<float> &scratch) {
  backwardHead(p, h, out, lse, dout, grads, scratch);
}
MTC_SIMD_CLONES void backwardHead16Out16(const Problem<uint16_t> &p,
                                         int64_t h, const uint16_t *out,
                                         const float *lse,
                                         const uint16_t *dout,
                                         const Grads &grads,
                                         std::vector<float> &scratch) {
  backwardHead(p, h, out, lse, dout, grads, scratch);
}

/// Reports what keeps the kernels from running `a`; whether there is
/// work to do.
bool checkDims(Context &ctx, const AttentionDims &a) {
  if (std::string why = attentionDimsError(a); !why.empty()) {
    reportError(ctx, why);
    return false;
  }
  return a.batch > 0 && a.sq > 0 && a.sk > 0;
}

template <typename T>
Problem<T> makeProblem(Context &ctx, const AttentionDims &a, const T *q,
                       const T *k, const T *v, const unsigned char *mask,
                       bool bf16 = false) {
  // Ratio 1 keeps nothing, so its infinite scale is never used.
  return Problem<T>{a,
                    q,
                    k,
                    v,
                    mask,
                    dropoutParams(ctx.seed, ctx.batch, a.stream, a.dropout),
                    a.dropout > 0.0f,
                    bf16};
}

bool parallelWork(const AttentionDims &a) {
  return a.batch * a.sq * a.sk * (a.d + a.dv) >= cpu::kParallelGrain;
}

/// One query tile per task.
template <typename T, typename Tile, typename O>
void forwardTiles(const Problem<T> &p, Tile tile, O *out, float *lse) {
  const AttentionDims &a = p.a;
  const int64_t blocks = (a.sq + kRows - 1) / kRows;
  cpu::parallelFor(0, a.batch * blocks, parallelWork(a), [&](int64_t t) {
    tile(p, t / blocks, (t % blocks) * kRows, out, lse);
  });
}

/// One head per task: its dQ, dK and dV are summed by one thread, tile
/// after tile in a fixed order, and every tile's probabilities are computed
/// once.
template <typename T, typename Head, typename O>
void backwardHeads(const Problem<T> &p, Head head, const O *out,
                   const float *lse, const T *dout, const Grads &grads) {
  cpu::parallelFor(0, p.a.batch, parallelWork(p.a), [&](int64_t h) {
    std::vector<float> scratch;
    head(p, h, out, lse, dout, grads, scratch);
  });
}

/// The gradients as backwardHeads takes them.
Grads gradsOf(float *dq, float *dk, float *dv) { return {dq, dk, dv, false}; }
Grads gradsOf(uint16_t *dq, uint16_t *dk, uint16_t *dv) {
  return {dq, dk, dv, true};
}

} // namespace

void attentionForward(Context &ctx, const AttentionDims &a, const float *q,
                      const float *k, const float *v,
                      const unsigned char *mask, float *out, float *lse) {
  if (checkDims(ctx, a))
    forwardTiles(makeProblem(ctx, a, q, k, v, mask), forwardTile32, out, lse);
}

void attentionBackward(Context &ctx, const AttentionDims &a, const float *q,
                       const float *k, const float *v,
                       const unsigned char *mask, const float *out,
                       const float *lse, const float *dout, float *dq,
                       float *dk, float *dv) {
  if (checkDims(ctx, a))
    backwardHeads(makeProblem(ctx, a, q, k, v, mask), backwardHead32, out,
                  lse, dout, gradsOf(dq, dk, dv));
}

void attentionForward16(Context &ctx, Storage16 storage,
                        const AttentionDims &a, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v,
                        const unsigned char *mask, float *out, float *lse) {
  if (checkDims(ctx, a))
    forwardTiles(makeProblem(ctx, a, q, k, v, mask,
                             storage == Storage16::Bf16),
                 forwardTile16, out, lse);
}

void attentionForward16(Context &ctx, Storage16 storage,
                        const AttentionDims &a, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v,
                        const unsigned char *mask, uint16_t *out,
                        float *lse) {
  if (checkDims(ctx, a))
    forwardTiles(makeProblem(ctx, a, q, k, v, mask,
                             storage == Storage16::Bf16),
                 forwardTile16Out16, out, lse);
}

namespace {

/// attentionBackward16 with the output stored as O and the gradients as G.
template <typename O, typename G>
void backward16(Context &ctx, Storage16 storage, const AttentionDims &a,
                const uint16_t *q, const uint16_t *k, const uint16_t *v,
                const unsigned char *mask, const O *out, const float *lse,
                const uint16_t *dout, G *dq, G *dk, G *dv) {
  if (!checkDims(ctx, a))
    return;
  const Problem<uint16_t> p =
      makeProblem(ctx, a, q, k, v, mask, storage == Storage16::Bf16);
  if constexpr (std::is_same_v<O, float>)
    backwardHeads(p, backwardHead16, out, lse, dout, gradsOf(dq, dk, dv));
  else
    backwardHeads(p, backwardHead16Out16, out, lse, dout, gradsOf(dq, dk, dv));
}

} // namespace

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const float *out,
                         const float *lse, const uint16_t *dout, float *dq,
                         float *dk, float *dv) {
  backward16(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const uint16_t *out,
                         const float *lse, const uint16_t *dout, float *dq,
                         float *dk, float *dv) {
  backward16(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const float *out,
                         const float *lse, const uint16_t *dout, uint16_t *dq,
                         uint16_t *dk, uint16_t *dv) {
  backward16(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const uint16_t *out,
                         const float *lse, const uint16_t *dout, uint16_t *dq,
                         uint16_t *dk, uint16_t *dv) {
  backward16(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

} // namespace mtc::rt
